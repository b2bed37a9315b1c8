//! `flotilla-work-executor`: see the library documentation.

#[tokio::main(flavor = "multi_thread")]
async fn main() -> anyhow::Result<()> {
    flotilla_runtime::service::main::<flotilla_work_executor::Executor>().await
}
