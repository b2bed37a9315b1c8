//! `flotilla bench`: Flotilla measured against the floor of its store, in the same run
//! (docs/design.md §7).
//!
//! ```text
//!   bench failover  the whole suite in this process, N member-sims, M bindings; one cluster
//!                   fails with every timer at zero → per-stage percentiles, bindings/s,
//!                   and the store floor (7 × M guarded puts in 64-op transactions)
//!   bench store     flotilla_store::bench on etcd: EtcdStore, raw client, MemStore, DESIGN §7
//!   bench schedule  schedule() decisions/s on one thread; the scheduler service scheduling
//!                   M preloaded bindings on the store, next to the floor of M guarded puts
//!   bench latency   one binding's failover above the timers, R times: p50/p90/max next to
//!                   the sequential guarded writes it needs at one write's p50 latency
//!   bench idle      the control plane's CPU while N Pull clusters heart-beat at production
//!                   timers (from a second process), next to the reference
//!   (bench members  hidden: the simulated members / heartbeats, in their own process)
//! ```

mod cpu;
mod etcd;
pub mod failover;
mod idle;
mod latency;
mod members;
pub mod schedule;
mod stats;
pub mod store;
mod track;

use std::process::ExitCode;

/// Benchmarks.
#[derive(Debug, clap::Subcommand)]
pub enum BenchCommand {
    /// Fail one of N clusters under M bindings with every timer at zero and measure the
    /// failover end to end, per stage, next to the store's floor.
    Failover(failover::FailoverArgs),
    /// The store benchmark of docs/design.md §7 on etcd (given or temporary) and MemStore.
    Store(store::StoreBenchArgs),
    /// The scheduler alone: decisions per second in process, and the scheduler service
    /// scheduling M bindings on the store, next to the store's floor.
    Schedule(schedule::ScheduleArgs),
    /// One binding's failover above the timers, repeated: latency percentiles next to the
    /// sequential-write floor of the same run.
    Latency(latency::LatencyArgs),
    /// The control plane's CPU while N Pull clusters heart-beat at production timers.
    Idle(idle::IdleArgs),
    /// The simulated members of `bench failover`, in their own process (started by it).
    #[command(hide = true)]
    Members(members::MembersArgs),
}

/// A count flag that must be at least 1 (clap refuses 0 with the flag's name).
fn at_least_one() -> clap::builder::RangedU64ValueParser<usize> {
    clap::builder::RangedU64ValueParser::<usize>::new().range(1..)
}

/// Runs a benchmark.
pub async fn run(cmd: BenchCommand) -> anyhow::Result<ExitCode> {
    match cmd {
        BenchCommand::Failover(args) => failover::run(args).await?,
        BenchCommand::Store(args) => store::run(args).await?,
        BenchCommand::Schedule(args) => schedule::run(args).await?,
        BenchCommand::Latency(args) => latency::run(args).await?,
        BenchCommand::Idle(args) => idle::run(args).await?,
        BenchCommand::Members(args) => members::serve(args).await?,
    }
    Ok(ExitCode::SUCCESS)
}
