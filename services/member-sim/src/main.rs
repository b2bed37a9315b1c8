//! `flotilla-member-sim`: a simulated member cluster (see the library docs).

use clap::Parser;

flotilla_runtime::global_allocator!();

#[tokio::main(flavor = "multi_thread")]
async fn main() -> anyhow::Result<()> {
    flotilla_member_sim::Args::parse().run().await
}
