//! Client commands against a running Flotilla: the api (`--server`, default where
//! `flotilla up` serves it) and, for `explain` / `what-if`, the controllers' dry-run RPCs.
//!
//! ```text
//!   apply -f FILE|-        flotilla_kube::manifest: Karmada YAML ─► core ─► validate all ─► wire
//!                          apply.rs:    pre-flight reads ─► Create, or Update at the
//!                                       current resourceVersion
//!   get / describe         kinds.rs (list/get/watch per kind), get.rs, describe.rs
//!   delete, taint/untaint, mutate.rs: CAS updates of a cluster's user taints, Create/Delete
//!   cordon/uncordon,
//!   join/unjoin
//!   cluster fail|heal      fault.rs: MemberSim.SetFault at the cluster's apiEndpoint
//!   explain binding,       explain.rs: Scheduler.Simulate, TaintManager.Explain,
//!   what-if fail           GracefulEviction.Assess, WorkExecutor.Plan
//! ```
//!
//! Exit codes: 0 success, 1 an error (printed on stderr), 2 a usage error (clap).

use std::process::ExitCode;

mod apply;
mod conn;
mod describe;
mod explain;
mod fault;
mod get;
mod kinds;
mod kubeconfig;
use flotilla_kube::manifest;
mod mutate;
mod output;
mod shape;
pub(crate) mod words;

pub use conn::{TlsArgs, url};

/// Client commands.
#[derive(Debug, clap::Subcommand)]
pub enum ClientCommand {
    /// Create or update objects from YAML: Karmada policies (PropagationPolicy,
    /// ClusterPropagationPolicy, ClusterTaintPolicy), Clusters and workloads (Deployments,
    /// ...). Every document is validated first; a file with a problem applies nothing.
    Apply(apply::ApplyArgs),
    /// List objects as a table (or `-o yaml|json|name`), optionally watching for changes
    /// (`-w`).
    Get(get::GetArgs),
    /// Show objects in detail, with the events about them.
    Describe(get::DescribeArgs),
    /// Delete objects (clusters, policies, workloads).
    Delete(mutate::DeleteArgs),
    /// Add taints to a cluster (`key[=value]:NoSchedule|NoExecute`).
    Taint(mutate::TaintArgs),
    /// Remove taints from a cluster (`key[:Effect]`).
    Untaint(mutate::UntaintArgs),
    /// Stop new placements on a cluster: adds the NoSchedule taint
    /// `cluster.flotilla.io/unschedulable`; what runs there stays.
    #[command(after_help = "Example:\n  flotilla cordon member1")]
    Cordon(mutate::CordonArgs),
    /// Allow new placements on a cordoned cluster again.
    #[command(after_help = "Example:\n  flotilla uncordon member1")]
    Uncordon(mutate::CordonArgs),
    /// Release a graceful eviction task that `suppressDeletion: true` holds (purge mode
    /// Never), so that the old copy on that cluster is deleted.
    Release(mutate::ReleaseArgs),
    /// Ask the scheduler to divide a binding's replicas again from scratch (Karmada's
    /// WorkloadRebalancer); moved replicas are moved make before break.
    Reschedule(mutate::RescheduleArgs),
    /// Register a member cluster (Push by default, `--pull` for an agent).
    Join(mutate::JoinArgs),
    /// Remove a member cluster (its workloads are evicted first).
    Unjoin(mutate::UnjoinArgs),
    /// Drive a simulated member cluster: `cluster fail NAME`, `cluster heal NAME`.
    #[command(subcommand)]
    Cluster(fault::ClusterCommand),
    /// Explain a controller's decision: `explain binding NS/NAME`.
    #[command(subcommand)]
    Explain(explain::ExplainCommand),
    /// Simulate an event without changing anything: `what-if fail CLUSTER`.
    #[command(subcommand, name = "what-if")]
    WhatIf(explain::WhatIfCommand),
}

/// Runs a client command.
pub async fn run(cmd: ClientCommand) -> anyhow::Result<ExitCode> {
    match cmd {
        ClientCommand::Apply(args) => apply::run(args).await,
        ClientCommand::Get(args) => get::get(args).await,
        ClientCommand::Describe(args) => get::describe(args).await,
        ClientCommand::Delete(args) => mutate::delete(args).await,
        ClientCommand::Taint(args) => mutate::taint(args).await,
        ClientCommand::Untaint(args) => mutate::untaint(args).await,
        ClientCommand::Cordon(args) => mutate::cordon(args, true).await,
        ClientCommand::Uncordon(args) => mutate::cordon(args, false).await,
        ClientCommand::Release(args) => mutate::release(args).await,
        ClientCommand::Reschedule(args) => mutate::reschedule(args).await,
        ClientCommand::Join(args) => mutate::join(args).await,
        ClientCommand::Unjoin(args) => mutate::unjoin(args).await,
        ClientCommand::Cluster(cmd) => fault::run(cmd).await,
        ClientCommand::Explain(cmd) => explain::explain(cmd).await,
        ClientCommand::WhatIf(cmd) => explain::what_if(cmd).await,
    }
}
