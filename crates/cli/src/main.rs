//! `flotilla`: the user's command-line tool.
//!
//! ```text
//!   flotilla up [--demo]          every service in one process on the embedded store (up.rs)
//!   flotilla apply|get|describe…  client commands against the api (client/)
//!   flotilla explain|what-if      dry-run RPCs of the controllers (client/)
//!   flotilla bench failover|store measured against the etcd floor (crates/bench)
//!   flotilla healthcheck [ADDR]   one gRPC health check, exit 0/1 (containers' healthcheck)
//! ```

use std::process::ExitCode;

use clap::{Parser, Subcommand};

mod client;
mod healthcheck;
mod up;

/// Flotilla: a multi-cluster failover control plane.
#[derive(Debug, Parser)]
#[command(name = "flotilla", version, about, long_about = None)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Run every Flotilla service in one process on the embedded store, with simulated
    /// member clusters.
    Up(up::UpArgs),
    /// Measure Flotilla against the etcd floor.
    #[command(subcommand)]
    Bench(flotilla_bench::BenchCommand),
    /// Ask a gRPC server's grpc.health.v1 once: exit 0 if SERVING, else 1 (the health check
    /// of the FROM-scratch container images, which have no shell or curl).
    Healthcheck(healthcheck::HealthcheckArgs),
    #[command(flatten)]
    Client(Box<client::ClientCommand>),
}

#[tokio::main(flavor = "multi_thread")]
async fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Up(args) => up::run(args).await,
        Command::Bench(cmd) => flotilla_bench::run(cmd).await,
        Command::Healthcheck(args) => healthcheck::run(args).await,
        Command::Client(cmd) => client::run(*cmd).await,
    };
    match result {
        Ok(code) => code,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::FAILURE
        }
    }
}
