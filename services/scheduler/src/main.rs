//! `flotilla-scheduler`: see the library documentation for what it does.

flotilla_runtime::global_allocator!();

#[tokio::main(flavor = "multi_thread")]
async fn main() -> anyhow::Result<()> {
    flotilla_runtime::service::main::<flotilla_scheduler::Scheduler>().await
}
