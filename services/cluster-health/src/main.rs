//! `flotilla-cluster-health`: cluster health and controller taints (see the library docs).

use clap::Parser;

#[tokio::main(flavor = "multi_thread")]
async fn main() -> anyhow::Result<()> {
    flotilla_cluster_health::Args::parse().run().await
}
