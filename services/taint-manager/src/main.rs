//! `flotilla-taint-manager`: see the library documentation.

flotilla_runtime::global_allocator!();

#[tokio::main(flavor = "multi_thread")]
async fn main() -> anyhow::Result<()> {
    flotilla_runtime::service::main::<flotilla_taint_manager::TaintManager>().await
}
