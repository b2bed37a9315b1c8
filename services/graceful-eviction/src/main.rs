//! `flotilla-graceful-eviction`: see the library documentation.

use clap::Parser;

#[tokio::main(flavor = "multi_thread")]
async fn main() -> anyhow::Result<()> {
    flotilla_graceful_eviction::Args::parse().run().await
}
