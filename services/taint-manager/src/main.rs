//! `flotilla-taint-manager`: see the library documentation.

use clap::Parser;

#[tokio::main(flavor = "multi_thread")]
async fn main() -> anyhow::Result<()> {
    flotilla_taint_manager::Args::parse().run().await
}
