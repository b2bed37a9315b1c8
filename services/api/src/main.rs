//! `flotilla-api`: serves `flotilla.v1.Api` and runs the detector.

use clap::Parser;

#[tokio::main(flavor = "multi_thread")]
async fn main() -> anyhow::Result<()> {
    flotilla_api::Args::parse().run().await
}
