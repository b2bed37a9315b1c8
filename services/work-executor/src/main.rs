//! `flotilla-work-executor`: see the library documentation.

use clap::Parser;

#[tokio::main(flavor = "multi_thread")]
async fn main() -> anyhow::Result<()> {
    flotilla_work_executor::Args::parse().run().await
}
