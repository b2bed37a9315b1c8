//! `flotilla-work-executor`: see the library documentation.

flotilla_runtime::global_allocator!();

#[tokio::main(flavor = "multi_thread")]
async fn main() -> anyhow::Result<()> {
    flotilla_runtime::service::main::<flotilla_work_executor::Executor>().await
}
