//! `flotilla-scheduler`: see the library documentation for what it does.

use clap::Parser;

#[tokio::main(flavor = "multi_thread")]
async fn main() -> anyhow::Result<()> {
    flotilla_scheduler::Args::parse().run().await
}
