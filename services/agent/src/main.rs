//! `flotilla-agent`: the agent of a Pull cluster (see the library docs).

use clap::Parser;

flotilla_runtime::global_allocator!();

#[tokio::main(flavor = "multi_thread")]
async fn main() -> anyhow::Result<()> {
    flotilla_agent::Args::parse().run().await
}
