//! `flotilla explain binding|cluster` and `flotilla what-if fail`: reports built from the
//! controllers' dry-run RPCs, which run the very functions the controllers use
//! (Scheduler.Simulate, TaintManager.Explain, GracefulEviction.Assess, WorkExecutor.Plan,
//! ClusterHealth.Assess).
//!
//! ```text
//!   explain binding NS/NAME:  api (binding, clusters, workload, works)
//!       ─► Simulate  (filters, scores, result)        why these clusters
//!       ─► Explain   per target with NoExecute taints  tolerate / evict after d / evict now
//!       ─► Assess    when there are eviction tasks     kept / removed, next retry
//!       ─► Plan      the binding's Works              kept, held, orphans, blocked
//!
//!   explain cluster NAME [--probe P [--for D]]:  api (cluster)
//!       ─► ClusterHealth.Assess (cluster, probe, threshold memory) ─► Ready, taints ±, why
//!
//!   what-if fail CLUSTER:  clusters' = clusters with CLUSTER tainted not-ready NoSchedule +
//!       NoExecute (timeAdded = now) and Ready=False; for each binding on CLUSTER:
//!       Explain(CLUSTER', binding) ─► when;  evict as the taint manager would (TM-11)
//!       ─► Simulate(binding', clusters') ─► where to, or nowhere
//! ```

use std::fmt::Write as _;
use std::process::ExitCode;
use std::time::Duration;

use crate::client::conn::Conn;
use flotilla_core::eviction::{EvictOptions, graceful_evict_cluster};
use flotilla_core::types as core;
use flotilla_proto::Resource as _;
use flotilla_proto::convert::WireEnum as _;
use flotilla_proto::v1;
use flotilla_proto::v1::cluster_health_client::ClusterHealthClient;
use flotilla_proto::v1::graceful_eviction_client::GracefulEvictionClient;
use flotilla_proto::v1::scheduler_client::SchedulerClient;
use flotilla_proto::v1::taint_manager_client::TaintManagerClient;
use flotilla_proto::v1::work_executor_client::WorkExecutorClient;

use super::conn::{ServerArgs, status_error};
use super::kinds::{Scope, list_all};
use super::output::{
    Table, age, human_duration, millis, now, parse_rfc3339, rfc3339, std_duration,
};
use super::words;

mod binding;
mod cluster;
mod what_if;

use binding::*;
use cluster::*;
use what_if::*;

/// Addresses of the controllers' dry-run services and the evaluation time. Without an
/// address here the dry run goes to the api, which forwards it to its `--peer` of that name
/// (`flotilla up` and the docker-compose stack set them).
#[derive(Clone, Debug, clap::Args)]
pub struct DryRunArgs {
    /// cluster-health (ClusterHealth.Assess) [default: through the api].
    #[arg(long, env = "FLOTILLA_CLUSTER_HEALTH", value_name = "ADDR")]
    pub cluster_health: Option<String>,

    /// The scheduler (Scheduler.Simulate) [default: through the api].
    #[arg(long, env = "FLOTILLA_SCHEDULER", value_name = "ADDR")]
    pub scheduler: Option<String>,

    /// The taint manager (TaintManager.Explain) [default: through the api].
    #[arg(long, env = "FLOTILLA_TAINT_MANAGER", value_name = "ADDR")]
    pub taint_manager: Option<String>,

    /// The graceful-eviction service (GracefulEviction.Assess) [default: through the api].
    #[arg(long, env = "FLOTILLA_GRACEFUL_EVICTION", value_name = "ADDR")]
    pub graceful_eviction: Option<String>,

    /// The work executor (WorkExecutor.Plan) [default: through the api].
    #[arg(long, env = "FLOTILLA_WORK_EXECUTOR", value_name = "ADDR")]
    pub work_executor: Option<String>,

    /// Evaluate at this time (RFC 3339, e.g. 2025-06-01T12:00:00Z) instead of now.
    #[arg(long, value_parser = parse_rfc3339, value_name = "TIME")]
    pub now: Option<prost_types::Timestamp>,

    #[command(flatten)]
    pub server: ServerArgs,
}

/// The dry-run services.
#[derive(Clone, Copy, Debug)]
enum Service {
    ClusterHealth,
    TaintManager,
    Scheduler,
    GracefulEviction,
    WorkExecutor,
}

impl Service {
    /// Its name, as the api's `GetPeers` knows it.
    fn name(self) -> &'static str {
        match self {
            Service::ClusterHealth => "cluster-health",
            Service::TaintManager => "taint-manager",
            Service::Scheduler => "scheduler",
            Service::GracefulEviction => "graceful-eviction",
            Service::WorkExecutor => "work-executor",
        }
    }

    fn flag(self) -> &'static str {
        match self {
            Service::ClusterHealth => "--cluster-health",
            Service::TaintManager => "--taint-manager",
            Service::Scheduler => "--scheduler",
            Service::GracefulEviction => "--graceful-eviction",
            Service::WorkExecutor => "--work-executor",
        }
    }
}

impl DryRunArgs {
    /// Where to call `service`: its flag, else the api itself, which forwards the dry run to
    /// its `--peer` (asked first with `GetPeers`, for a clear error when it has none).
    async fn addr(&self, service: Service) -> anyhow::Result<String> {
        let explicit = match service {
            Service::ClusterHealth => &self.cluster_health,
            Service::TaintManager => &self.taint_manager,
            Service::Scheduler => &self.scheduler,
            Service::GracefulEviction => &self.graceful_eviction,
            Service::WorkExecutor => &self.work_executor,
        };
        if let Some(addr) = explicit {
            return Ok(addr.clone());
        }
        let mut api = self.server.api().await?;
        let peers = api
            .get_peers(v1::GetPeersRequest {})
            .await
            .map_err(|s| {
                anyhow::anyhow!(
                    "asking the api at {} whether it knows the {}: {}: {} (set {})",
                    self.server.server,
                    service.name(),
                    s.code(),
                    s.message(),
                    service.flag()
                )
            })?
            .into_inner()
            .peers;
        if peers.contains_key(service.name()) {
            // the api forwards the dry run (a compose stack publishes only the api's port)
            Ok(self.server.server.clone())
        } else {
            Err(anyhow::anyhow!(
                "the api at {} does not know where the {} is: set {} (or start the api with \
                 --peer {}=ADDR)",
                self.server.server,
                service.name(),
                service.flag(),
                service.name()
            ))
        }
    }
}

/// `flotilla explain ...`.
#[derive(Debug, clap::Subcommand)]
pub enum ExplainCommand {
    /// Why a binding runs where it runs: scheduling (filters, scores, result), NoExecute
    /// taints on its clusters and their tolerations, its eviction tasks and its Works.
    #[command(after_help = "\
Examples:
  flotilla explain binding default/nginx-deployment
  flotilla explain binding nginx-deployment -n default --now 2025-06-01T12:00:00Z")]
    Binding(ExplainBindingArgs),

    /// What cluster-health would make of a cluster: its Ready condition and taints after the
    /// next probe (or with no new probe), and why, by the rules the service runs
    /// (ClusterHealth.Assess; nothing is written).
    #[command(after_help = "\
Without --probe, no new observation is assumed: the stored state alone (e.g. a grace period or
the failover eviction timeout running out by --now). With --probe, the next probe is assumed to
see that; --for says it has seen it that long already (cluster-health's threshold memory, CH-4),
e.g. past the failure threshold (30s by default).

Examples:
  flotilla explain cluster member1
  flotilla explain cluster member1 --probe unreachable
  flotilla explain cluster member1 --probe unhealthy --for 40s")]
    Cluster(ExplainClusterArgs),
}

/// What a probe of a member sees, for `flotilla explain cluster --probe`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum ProbeArg {
    /// The member answers `/readyz` (or `/healthz`) with 200.
    Healthy,
    /// The member answers, but not with 200.
    Unhealthy,
    /// The member does not answer.
    Unreachable,
}

/// Arguments of `flotilla explain cluster`.
#[derive(Debug, clap::Args)]
pub struct ExplainClusterArgs {
    /// The cluster.
    #[arg(value_name = "CLUSTER")]
    pub cluster: String,

    /// Assume the next probe sees this.
    #[arg(long, value_enum)]
    pub probe: Option<ProbeArg>,

    /// ... and has seen it for this long already (e.g. 40s).
    #[arg(long = "for", value_name = "DURATION", requires = "probe", value_parser = humantime::parse_duration)]
    pub for_: Option<Duration>,

    #[command(flatten)]
    pub dry_run: DryRunArgs,
}

/// Arguments of `flotilla explain binding`.
#[derive(Debug, clap::Args)]
pub struct ExplainBindingArgs {
    /// The binding, `NAMESPACE/NAME` (or `NAME` with `-n`). Bindings are named
    /// `<workload>-<kind>`, e.g. `nginx-deployment`.
    #[arg(value_name = "NS/NAME")]
    pub binding: String,

    /// Namespace when the binding is given without one.
    #[arg(
        short = 'n',
        long,
        env = "FLOTILLA_NAMESPACE",
        default_value = "default"
    )]
    pub namespace: String,

    #[command(flatten)]
    pub dry_run: DryRunArgs,
}

/// `flotilla what-if ...`.
#[derive(Debug, clap::Subcommand)]
pub enum WhatIfCommand {
    /// What a cluster failure would do: which bindings would move where, when, and which
    /// would have nowhere to go.
    #[command(after_help = "\
The cluster is assumed to turn NotReady now: it gets cluster.karmada.io/not-ready NoSchedule and
NoExecute taints (timeAdded = now). Each binding on it is asked when the taint manager would
evict it (its tolerations), evicted as the taint manager would, and rescheduled by the
scheduler's Simulate on the changed cluster list. Nothing is written.

Note: with `--no-execute-taints auto` (the default), cluster-health adds the NoExecute taint
--failover-eviction-timeout after the cluster turns NotReady, so real evictions come that much
later than shown; with `policy`, only a ClusterTaintPolicy or an operator adds it.

Examples:
  flotilla what-if fail member1
  flotilla what-if fail member1 --now 2025-06-01T12:00:00Z")]
    Fail(WhatIfFailArgs),
}

/// Arguments of `flotilla what-if fail`.
#[derive(Debug, clap::Args)]
pub struct WhatIfFailArgs {
    /// The cluster that fails.
    #[arg(value_name = "CLUSTER")]
    pub cluster: String,

    #[command(flatten)]
    pub dry_run: DryRunArgs,
}

/// Runs `flotilla explain ...`.
pub async fn explain(cmd: ExplainCommand) -> anyhow::Result<ExitCode> {
    match cmd {
        ExplainCommand::Binding(args) => explain_binding(args).await,
        ExplainCommand::Cluster(args) => explain_cluster(args).await,
    }
}

/// Runs `flotilla what-if ...`.
pub async fn what_if(cmd: WhatIfCommand) -> anyhow::Result<ExitCode> {
    match cmd {
        WhatIfCommand::Fail(args) => what_if_fail(args).await,
    }
}

async fn channel(args: &DryRunArgs, service: Service) -> anyhow::Result<Conn> {
    let addr = args.addr(service).await?;
    args.server
        .connect(&addr, true)
        .await
        .map_err(|e| anyhow::anyhow!("{e:#} (set {} if it listens elsewhere)", service.flag()))
}

/// The reply of a dry-run call, or an error naming the call (`Scheduler.Simulate`).
fn reply<T>(what: &str, r: Result<tonic::Response<T>, tonic::Status>) -> anyhow::Result<T> {
    r.map(tonic::Response::into_inner)
        .map_err(|s| status_error(what, &s))
}

/// `fn $name(raw: i32) -> &'static str`: the words for each named value of the wire enum,
/// `unknown` for any other.
macro_rules! enum_words {
    ($name:ident: $enum:ident { $($variant:ident => $words:literal,)* }) => {
        fn $name(raw: i32) -> &'static str {
            match v1::$enum::try_from(raw) {
                $(Ok(v1::$enum::$variant) => $words,)*
                _ => "unknown",
            }
        }
    };
}

enum_words!(decision_words: EvictionDecision {
    NotApplicable => "not applicable",
    Tolerate => "tolerated: stays",
    EvictAfter => "evicted later",
    EvictNow => "evicted now",
});

enum_words!(outcome_words: TaskOutcome {
    Stamped => "new, stamped and kept",
    Kept => "kept (waiting for the new placement to be healthy)",
    KeptSuppressed => "kept (deletion suppressed)",
    KeptNoReplacement => "kept (no replacement cluster yet)",
    KeptReplacementShort => "kept (the replacement lacks room for some replicas)",
    RemovedSuppressionLifted => "removed (suppression lifted)",
    RemovedTimedOut => "removed (timed out)",
    RemovedHealthy => "removed (the new placement is healthy)",
    RemovedRescheduled => "removed (its cluster is a target again)",
});

fn split_binding(text: &str, default_ns: &str) -> (String, String) {
    match text.split_once('/') {
        Some((ns, name)) => (ns.to_owned(), name.to_owned()),
        None => (default_ns.to_owned(), text.to_owned()),
    }
}

/// A report built section by section; sections whose service failed say so.
#[derive(Default)]
struct Report {
    text: String,
    failures: Vec<String>,
}

impl Report {
    fn section(&mut self, title: &str) {
        if !self.text.is_empty() {
            self.text.push('\n');
        }
        let _ = writeln!(self.text, "{title}");
    }

    fn line(&mut self, indent: usize, text: impl std::fmt::Display) {
        let _ = writeln!(self.text, "{:indent$}{text}", "");
    }

    fn table(&mut self, indent: usize, t: &Table) {
        for l in t.render().lines() {
            self.line(indent, l);
        }
    }

    /// `title:` and a table of `items` below it, one row each; nothing without items.
    fn table_of<T: TableRow>(&mut self, title: &str, items: &[T]) {
        if items.is_empty() {
            return;
        }
        self.line(2, format!("{title}:"));
        let mut t = Table::new(T::HEADERS.iter().copied());
        for item in items {
            t.row(item.cells());
        }
        self.table(4, &t);
    }

    fn fail(&mut self, what: String) {
        self.line(2, format!("unavailable: {what}"));
        self.failures.push(what);
    }
}

/// A message a report shows as one row of a table ([`Report::table_of`]).
trait TableRow {
    /// The column headers.
    const HEADERS: &'static [&'static str];

    /// The cells of the row, one per header.
    fn cells(&self) -> Vec<String>;
}

fn no_execute(cluster: &v1::Cluster) -> Vec<&v1::Taint> {
    cluster
        .spec
        .as_ref()
        .map(|s| {
            s.taints
                .iter()
                .filter(|t| t.effect == v1::TaintEffect::NoExecute as i32)
                .collect()
        })
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn explain_cluster_requests_carry_the_assumed_probe_and_memory() {
        let at = prost_types::Timestamp {
            seconds: 1_000,
            nanos: 5,
        };
        let c = v1::Cluster::default();
        let none = cluster_assess_request(c.clone(), None, None, at);
        assert_eq!(none.probe, None, "no new observation");
        assert_eq!(none.threshold, None);
        assert_eq!(none.now, Some(at));

        let down = cluster_assess_request(
            c.clone(),
            Some(ProbeArg::Unreachable),
            Some(Duration::from_secs(40)),
            at,
        );
        let p = down.probe.unwrap();
        assert!(!p.online && !p.healthy);
        let t = down.threshold.unwrap();
        assert_eq!(t.ready_status, v1::ConditionStatus::False as i32);
        assert_eq!(t.threshold_start.unwrap().seconds, 960);

        let sick = cluster_assess_request(c.clone(), Some(ProbeArg::Unhealthy), None, at);
        let p = sick.probe.unwrap();
        assert!(p.online && !p.healthy);
        assert_eq!(sick.threshold, None, "first sight without --for");

        let fine = cluster_assess_request(c, Some(ProbeArg::Healthy), Some(Duration::ZERO), at);
        assert!(fine.probe.unwrap().healthy);
        assert_eq!(
            fine.threshold.unwrap().ready_status,
            v1::ConditionStatus::True as i32
        );
    }

    #[test]
    fn a_failed_cluster_gets_not_ready_taints_once() {
        let at = prost_types::Timestamp {
            seconds: 100,
            nanos: 0,
        };
        let cluster = v1::Cluster {
            metadata: Some(v1::ObjectMeta {
                name: "member1".into(),
                ..Default::default()
            }),
            spec: Some(v1::ClusterSpec {
                taints: vec![v1::Taint {
                    key: core::TAINT_NOT_READY.into(),
                    effect: v1::TaintEffect::NoSchedule as i32,
                    ..Default::default()
                }],
                ..Default::default()
            }),
            status: None,
        };
        let failed = failed_copy(&cluster, &at);
        let taints = &failed.spec.as_ref().unwrap().taints;
        assert_eq!(taints.len(), 2);
        assert_eq!(taints[1].effect, v1::TaintEffect::NoExecute as i32);
        assert_eq!(taints[1].time_added, Some(at));
        let ready = &failed.status.as_ref().unwrap().conditions[0];
        assert_eq!(ready.status, v1::ConditionStatus::False as i32);
    }

    #[test]
    fn eviction_moves_the_target_to_a_task_in_a_new_generation() {
        let target = |name: &str, replicas| v1::TargetCluster {
            name: name.into(),
            replicas,
        };
        let binding = v1::ResourceBinding {
            metadata: Some(v1::ObjectMeta {
                name: "nginx-deployment".into(),
                namespace: "default".into(),
                generation: 4,
                ..Default::default()
            }),
            spec: Some(v1::ResourceBindingSpec {
                replicas: 3,
                clusters: vec![target("member1", 1), target("member2", 2)],
                ..Default::default()
            }),
            status: None,
        };
        let evicted = evicted_copy(
            &binding,
            "member1",
            v1::PurgeMode::Gracefully as i32,
            &prost_types::Timestamp::default(),
        )
        .unwrap();
        let spec = evicted.spec.as_ref().unwrap();
        assert_eq!(words::targets(&spec.clusters), "member2:2");
        assert_eq!(spec.graceful_eviction_tasks.len(), 1);
        let task = &spec.graceful_eviction_tasks[0];
        assert_eq!(task.from_cluster, "member1");
        assert_eq!(task.replicas, Some(1));
        assert_eq!(task.producer, core::PRODUCER_TAINT_MANAGER);
        assert_eq!(task.purge_mode, v1::PurgeMode::Gracefully as i32);
        assert_eq!(evicted.generation(), 5);
    }
}
