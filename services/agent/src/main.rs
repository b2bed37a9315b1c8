//! `flotilla-agent`: the agent of a Pull cluster (see the library docs).

use clap::Parser;

#[tokio::main(flavor = "multi_thread")]
async fn main() -> anyhow::Result<()> {
    flotilla_agent::Args::parse().run().await
}
