//! `flotilla-api`: serves `flotilla.v1.Api` and runs the detector.

flotilla_runtime::global_allocator!();

#[tokio::main(flavor = "multi_thread")]
async fn main() -> anyhow::Result<()> {
    flotilla_runtime::service::main::<flotilla_api::Api>().await
}
