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

/// Addresses of the controllers' dry-run services and the evaluation time. Each address
/// defaults to the `--server` host with the port `flotilla up` gives the service (the api's
/// port plus 2 to 5: taint-manager, scheduler, graceful-eviction, work-executor), so
/// `--server 127.0.0.1:7400` implies the scheduler at 127.0.0.1:7403.
#[derive(Clone, Debug, clap::Args)]
pub struct DryRunArgs {
    /// cluster-health (ClusterHealth.Assess) [default: --server port + 1, 127.0.0.1:7401].
    #[arg(long, env = "FLOTILLA_CLUSTER_HEALTH", value_name = "ADDR")]
    pub cluster_health: Option<String>,

    /// The scheduler (Scheduler.Simulate) [default: --server port + 3, 127.0.0.1:7403].
    #[arg(long, env = "FLOTILLA_SCHEDULER", value_name = "ADDR")]
    pub scheduler: Option<String>,

    /// The taint manager (TaintManager.Explain) [default: --server port + 2,
    /// 127.0.0.1:7402].
    #[arg(long, env = "FLOTILLA_TAINT_MANAGER", value_name = "ADDR")]
    pub taint_manager: Option<String>,

    /// The graceful-eviction service (GracefulEviction.Assess) [default: --server port + 4,
    /// 127.0.0.1:7404].
    #[arg(long, env = "FLOTILLA_GRACEFUL_EVICTION", value_name = "ADDR")]
    pub graceful_eviction: Option<String>,

    /// The work executor (WorkExecutor.Plan) [default: --server port + 5, 127.0.0.1:7405].
    #[arg(long, env = "FLOTILLA_WORK_EXECUTOR", value_name = "ADDR")]
    pub work_executor: Option<String>,

    /// Evaluate at this time (RFC 3339, e.g. 2025-06-01T12:00:00Z) instead of now.
    #[arg(long, value_parser = parse_rfc3339, value_name = "TIME")]
    pub now: Option<prost_types::Timestamp>,

    #[command(flatten)]
    pub server: ServerArgs,
}

/// The dry-run services, with `flotilla up`'s port offsets from the api.
#[derive(Clone, Copy, Debug)]
enum Service {
    ClusterHealth,
    TaintManager,
    Scheduler,
    GracefulEviction,
    WorkExecutor,
}

impl Service {
    fn offset(self) -> u16 {
        match self {
            Service::ClusterHealth => 1,
            Service::TaintManager => 2,
            Service::Scheduler => 3,
            Service::GracefulEviction => 4,
            Service::WorkExecutor => 5,
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
    /// The address of `service`: its flag, else derived from `--server`.
    fn addr(&self, service: Service) -> String {
        let explicit = match service {
            Service::ClusterHealth => &self.cluster_health,
            Service::TaintManager => &self.taint_manager,
            Service::Scheduler => &self.scheduler,
            Service::GracefulEviction => &self.graceful_eviction,
            Service::WorkExecutor => &self.work_executor,
        };
        if let Some(addr) = explicit {
            return addr.clone();
        }
        derive_addr(&self.server.server, service.offset())
    }
}

/// `host:(port + offset)` of an api address (`HOST:PORT` or `http://HOST:PORT`).
fn derive_addr(server: &str, offset: u16) -> String {
    let bare = server.split_once("://").map_or(server, |(_, rest)| rest);
    let bare = bare.trim_end_matches('/');
    match bare.rsplit_once(':') {
        Some((host, port)) => match port.parse::<u16>() {
            Ok(p) => format!("{host}:{}", p.saturating_add(offset)),
            Err(_) => format!("{bare}:{}", 7400 + offset),
        },
        None => format!("{bare}:{}", 7400 + offset),
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
    let addr = args.addr(service);
    args.server
        .connect(&addr, true)
        .await
        .map_err(|e| anyhow::anyhow!("{e:#} (set {} if it listens elsewhere)", service.flag()))
}

fn decision_words(d: i32) -> &'static str {
    match v1::EvictionDecision::try_from(d) {
        Ok(v1::EvictionDecision::NotApplicable) => "not applicable",
        Ok(v1::EvictionDecision::Tolerate) => "tolerated: stays",
        Ok(v1::EvictionDecision::EvictAfter) => "evicted later",
        Ok(v1::EvictionDecision::EvictNow) => "evicted now",
        _ => "unknown",
    }
}

fn outcome_words(o: i32) -> &'static str {
    match v1::TaskOutcome::try_from(o) {
        Ok(v1::TaskOutcome::Stamped) => "new, stamped and kept",
        Ok(v1::TaskOutcome::Kept) => "kept (waiting for the new placement to be healthy)",
        Ok(v1::TaskOutcome::KeptSuppressed) => "kept (deletion suppressed)",
        Ok(v1::TaskOutcome::KeptNoReplacement) => "kept (no replacement cluster yet)",
        Ok(v1::TaskOutcome::RemovedSuppressionLifted) => "removed (suppression lifted)",
        Ok(v1::TaskOutcome::RemovedTimedOut) => "removed (timed out)",
        Ok(v1::TaskOutcome::RemovedHealthy) => "removed (the new placement is healthy)",
        _ => "unknown",
    }
}

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

    fn fail(&mut self, what: String) {
        self.line(2, format!("unavailable: {what}"));
        self.failures.push(what);
    }
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

async fn explain_binding(args: ExplainBindingArgs) -> anyhow::Result<ExitCode> {
    let (ns, name) = split_binding(&args.binding, &args.namespace);
    let dry = &args.dry_run;
    let mut api = dry.server.api().await?;
    let binding = api
        .get_resource_binding(v1::GetResourceBindingRequest {
            namespace: ns.clone(),
            name: name.clone(),
        })
        .await
        .map_err(|s| status_error(format!("reading binding {ns}/{name}"), &s))?
        .into_inner();
    let (clusters, _) = list_all::<v1::Cluster>(&mut api, &Scope::default())
        .await
        .map_err(|s| status_error("listing clusters", &s))?;
    let at = dry.now.unwrap_or_else(now);
    let spec = binding.spec.clone().unwrap_or_default();
    let status = binding.status.clone().unwrap_or_default();
    let mut r = Report::default();

    r.section(&format!("Binding {ns}/{name}"));
    if let Some(res) = &spec.resource {
        r.line(
            2,
            format!(
                "Resource:        {} {} {} ({} replicas)",
                res.api_version,
                res.kind,
                words::qualified(&res.namespace, &res.name),
                spec.replicas
            ),
        );
    }
    r.line(
        2,
        format!(
            "Placement:       {}",
            words::placement_type(spec.placement.as_ref())
        ),
    );
    r.line(
        2,
        format!("Runs on:         {}", words::targets(&spec.clusters)),
    );
    r.line(
        2,
        format!(
            "Generation:      {} (scheduler observed {})",
            binding.generation(),
            status.scheduler_observed_generation
        ),
    );
    if let Some(t) = &status.last_scheduled_time {
        r.line(2, format!("Last scheduled:  {} ago", age(Some(t), &at)));
    }
    let tolerations = status
        .applied_placement
        .as_ref()
        .map(|p| p.cluster_tolerations.clone())
        .unwrap_or_default();
    r.line(
        2,
        format!(
            "Tolerations:     {} (of the placement last applied, A3)",
            words::list_spaced(tolerations.iter().map(words::toleration))
        ),
    );
    r.line(2, format!("Evaluated at:    {}", rfc3339(&at)));

    // Scheduling.
    r.section("Scheduling (Scheduler.Simulate)");
    match simulate(dry, &binding, &clusters, false, &at).await {
        Ok(sim) => print_simulation(&mut r, &sim, &spec.clusters),
        Err(e) => r.fail(format!("{e:#}")),
    }

    // Taints.
    r.section("NoExecute taints (TaintManager.Explain)");
    if spec.clusters.is_empty() {
        r.line(2, "the binding has no target cluster");
    }
    for target in &spec.clusters {
        let Some(cluster) = clusters.iter().find(|c| c.name() == target.name) else {
            r.line(2, format!("{}: the cluster does not exist", target.name));
            continue;
        };
        if no_execute(cluster).is_empty() {
            r.line(2, format!("{}: no NoExecute taint: stays", target.name));
            continue;
        }
        match explain_taints(dry, cluster, &binding, &at).await {
            Ok(ex) => print_explanation(&mut r, &target.name, &ex, &at),
            Err(e) => r.fail(format!("{e:#}")),
        }
    }

    // Eviction tasks.
    r.section("Eviction tasks (GracefulEviction.Assess)");
    if spec.graceful_eviction_tasks.is_empty() {
        r.line(2, "none");
    } else {
        match assess(dry, &binding, &at).await {
            Ok(a) => print_assessment(&mut r, &a, &at),
            Err(e) => r.fail(format!("{e:#}")),
        }
    }

    // Works.
    r.section("Works (WorkExecutor.Plan)");
    match plan(&mut api, dry, &binding).await {
        Ok(p) => print_plan(&mut r, &p),
        Err(e) => r.fail(format!("{e:#}")),
    }

    print!("{}", r.text);
    if r.failures.is_empty() {
        Ok(ExitCode::SUCCESS)
    } else {
        eprintln!(
            "error: {} section(s) could not be explained (see above)",
            r.failures.len()
        );
        Ok(ExitCode::FAILURE)
    }
}

async fn simulate(
    dry: &DryRunArgs,
    binding: &v1::ResourceBinding,
    clusters: &[v1::Cluster],
    force: bool,
    at: &prost_types::Timestamp,
) -> anyhow::Result<v1::SimulateResponse> {
    let mut client = SchedulerClient::new(channel(dry, Service::Scheduler).await?);
    let resp = client
        .simulate(v1::SimulateRequest {
            binding: Some(binding.clone()),
            clusters: clusters.to_vec(),
            options: None,
            force,
            now: Some(*at),
        })
        .await
        .map_err(|s| status_error("Scheduler.Simulate", &s))?;
    Ok(resp.into_inner())
}

async fn explain_taints(
    dry: &DryRunArgs,
    cluster: &v1::Cluster,
    binding: &v1::ResourceBinding,
    at: &prost_types::Timestamp,
) -> anyhow::Result<v1::ExplainResponse> {
    let mut client = TaintManagerClient::new(channel(dry, Service::TaintManager).await?);
    let resp = client
        .explain(v1::ExplainRequest {
            cluster: Some(cluster.clone()),
            binding: Some(binding.clone()),
            options: None,
            now: Some(*at),
        })
        .await
        .map_err(|s| status_error("TaintManager.Explain", &s))?;
    Ok(resp.into_inner())
}

async fn assess(
    dry: &DryRunArgs,
    binding: &v1::ResourceBinding,
    at: &prost_types::Timestamp,
) -> anyhow::Result<v1::GracefulEvictionAssessResponse> {
    let mut client = GracefulEvictionClient::new(channel(dry, Service::GracefulEviction).await?);
    let resp = client
        .assess(v1::GracefulEvictionAssessRequest {
            binding: Some(binding.clone()),
            graceful_eviction_timeout: None,
            now: Some(*at),
        })
        .await
        .map_err(|s| status_error("GracefulEviction.Assess", &s))?;
    Ok(resp.into_inner())
}

async fn plan(
    api: &mut flotilla_proto::v1::api_client::ApiClient<Conn>,
    dry: &DryRunArgs,
    binding: &v1::ResourceBinding,
) -> anyhow::Result<v1::PlanResponse> {
    let spec = binding.spec.clone().unwrap_or_default();
    let workload = match &spec.resource {
        Some(res) => match api
            .get_workload(v1::GetWorkloadRequest {
                namespace: res.namespace.clone(),
                kind: res.kind.clone(),
                name: res.name.clone(),
            })
            .await
        {
            Ok(w) => Some(w.into_inner()),
            Err(s) if s.code() == tonic::Code::NotFound => None,
            Err(s) => return Err(status_error("reading the workload", &s)),
        },
        None => None,
    };
    let scope = Scope {
        namespace: Some(binding.namespace().to_owned()),
        ..Default::default()
    };
    let (works, _) = list_all::<v1::Work>(api, &scope)
        .await
        .map_err(|s| status_error("listing works", &s))?;
    let works: Vec<v1::Work> = works
        .into_iter()
        .filter(|w| {
            w.spec
                .as_ref()
                .and_then(|s| s.binding.as_ref())
                .is_some_and(|b| b.name == binding.name() && b.namespace == binding.namespace())
        })
        .collect();
    let mut client = WorkExecutorClient::new(channel(dry, Service::WorkExecutor).await?);
    let resp = client
        .plan(v1::PlanRequest {
            binding: Some(binding.clone()),
            workload,
            works,
        })
        .await
        .map_err(|s| status_error("WorkExecutor.Plan", &s))?;
    Ok(resp.into_inner())
}

fn print_simulation(r: &mut Report, sim: &v1::SimulateResponse, now_on: &[v1::TargetCluster]) {
    if sim.needs_scheduling {
        r.line(
            2,
            format!(
                "Would reschedule: yes ({})",
                if sim.trigger.is_empty() {
                    "forced"
                } else {
                    &sim.trigger
                }
            ),
        );
    } else {
        r.line(
            2,
            "Would reschedule: no (no trigger fired; the current result stands)",
        );
    }
    if !sim.strategy.is_empty() {
        let mode = if sim.mode.is_empty() {
            String::new()
        } else {
            format!(", {} mode", sim.mode)
        };
        r.line(2, format!("Strategy:         {}{mode}", sim.strategy));
    }
    if !sim.filter_results.is_empty() {
        r.line(2, "Filters:");
        let mut t = Table::new(["CLUSTER", "FEASIBLE", "FILTER", "REASON"]);
        for f in &sim.filter_results {
            t.row(vec![
                f.cluster.clone(),
                if f.feasible { "yes" } else { "no" }.into(),
                if f.filter.is_empty() {
                    "-".into()
                } else {
                    f.filter.clone()
                },
                f.reason.clone(),
            ]);
        }
        r.table(4, &t);
    }
    if !sim.scores.is_empty() {
        r.line(2, "Scores:");
        let mut t = Table::new(["CLUSTER", "SCORE", "ALLOCATABLE", "AVAILABLE"]);
        for s in &sim.scores {
            t.row(vec![
                s.cluster.clone(),
                s.score.to_string(),
                s.allocatable_replicas.to_string(),
                s.available_replicas.to_string(),
            ]);
        }
        r.table(4, &t);
    }
    if !sim.selected_clusters.is_empty() {
        r.line(
            2,
            format!("Selected:         {}", sim.selected_clusters.join(",")),
        );
    }
    if !sim.affinity_name.is_empty() {
        r.line(2, format!("Affinity term:    {}", sim.affinity_name));
    }
    let mut result = words::targets(&sim.clusters);
    if sim.needs_scheduling {
        let mut a: Vec<_> = sim.clusters.iter().map(|c| (&c.name, c.replicas)).collect();
        let mut b: Vec<_> = now_on.iter().map(|c| (&c.name, c.replicas)).collect();
        a.sort();
        b.sort();
        result.push_str(if a == b {
            " (the same as now)"
        } else {
            " (differs from now)"
        });
    }
    r.line(2, format!("Result:           {result}"));
    if let Some(c) = &sim.scheduled_condition {
        r.line(
            2,
            format!(
                "Condition:        Scheduled={} ({}){}",
                words::condition_status(c.status),
                c.reason,
                if c.message.is_empty() {
                    String::new()
                } else {
                    format!(": {}", c.message)
                }
            ),
        );
    }
    if !sim.reasons.is_empty() {
        r.line(2, "Why:");
        for reason in &sim.reasons {
            r.line(4, format!("- {reason}"));
        }
    }
}

fn print_explanation(
    r: &mut Report,
    cluster: &str,
    ex: &v1::ExplainResponse,
    at: &prost_types::Timestamp,
) {
    let mut head = format!("{cluster}: {}", decision_words(ex.decision));
    if ex.decision == v1::EvictionDecision::EvictAfter as i32 {
        if let Some(d) = &ex.evict_after {
            let _ = write!(head, " after {}", human_duration(std_duration(d)));
        }
        if let Some(t) = &ex.evict_at {
            let _ = write!(head, " (at {})", rfc3339(t));
        }
    }
    if ex.decision == v1::EvictionDecision::EvictAfter as i32
        || ex.decision == v1::EvictionDecision::EvictNow as i32
    {
        let _ = write!(head, ", purge mode {}", words::purge_mode(ex.purge_mode));
    }
    r.line(2, head);
    for tt in &ex.tolerations {
        let taint = tt.taint.as_ref().map(words::taint).unwrap_or_default();
        let added = tt
            .taint
            .as_ref()
            .and_then(|t| t.time_added.as_ref())
            .map(|t| format!(" added {} ago", age(Some(t), at)))
            .unwrap_or_default();
        let by = match &tt.toleration {
            None => "NOT tolerated".to_owned(),
            Some(tol) => {
                let until = tt
                    .expires_at
                    .as_ref()
                    .map(|e| format!(" until {}", rfc3339(e)))
                    .unwrap_or_else(|| " forever".into());
                format!("tolerated by {}{until}", words::toleration(tol))
            }
        };
        r.line(4, format!("{taint}{added}: {by}"));
    }
    for reason in &ex.reasons {
        r.line(4, format!("- {reason}"));
    }
}

fn print_assessment(
    r: &mut Report,
    a: &v1::GracefulEvictionAssessResponse,
    at: &prost_types::Timestamp,
) {
    for task in &a.assessments {
        let deadline = task
            .deadline
            .as_ref()
            .map(|d| {
                let left = millis(d) - millis(at);
                if left > 0 {
                    format!(
                        ", times out in {} (at {})",
                        human_duration(Duration::from_millis(left.unsigned_abs())),
                        rfc3339(d)
                    )
                } else {
                    format!(", timed out at {}", rfc3339(d))
                }
            })
            .unwrap_or_default();
        r.line(
            2,
            format!(
                "{}: {}{deadline}",
                task.from_cluster,
                outcome_words(task.outcome)
            ),
        );
        if !task.reason.is_empty() {
            r.line(4, &task.reason);
        }
    }
    if !a.evicted_clusters.is_empty() {
        r.line(
            2,
            format!(
                "Old copies removed from: {} (their Works go)",
                a.evicted_clusters.join(",")
            ),
        );
    }
    match &a.next_retry {
        Some(d) => r.line(
            2,
            format!("Next assessment in {}", human_duration(std_duration(d))),
        ),
        None => r.line(2, "Next assessment: when the binding changes"),
    }
    for c in &a.conditions {
        r.line(
            2,
            format!(
                "Condition {}={} ({}): {}",
                c.r#type,
                words::condition_status(c.status),
                c.reason,
                c.message
            ),
        );
    }
    for reason in &a.reasons {
        r.line(4, format!("- {reason}"));
    }
}

fn print_plan(r: &mut Report, p: &v1::PlanResponse) {
    r.line(
        2,
        format!(
            "Kept on:          {}",
            words::list_or_none(&p.kept_clusters)
        ),
    );
    if !p.held_clusters.is_empty() {
        r.line(
            2,
            format!(
                "Held by eviction: {} (the old copies stay until their tasks end)",
                p.held_clusters.join(",")
            ),
        );
    }
    if !p.orphans.is_empty() {
        r.line(
            2,
            format!(
                "Orphans:          {}",
                p.orphans
                    .iter()
                    .map(|o| format!("{}/{}", o.cluster, o.name))
                    .collect::<Vec<_>>()
                    .join(",")
            ),
        );
    }
    if p.blocked {
        r.line(
            2,
            format!(
                "Blocked:          new Works wait until the Directly evicted Works on {} are gone",
                p.waiting_for_clusters.join(",")
            ),
        );
    }
    if let Some(c) = &p.fully_applied {
        r.line(
            2,
            format!(
                "FullyApplied:     {} ({}){}",
                words::condition_status(c.status),
                c.reason,
                if c.message.is_empty() {
                    String::new()
                } else {
                    format!(": {}", c.message)
                }
            ),
        );
    }
    for reason in &p.reasons {
        r.line(4, format!("- {reason}"));
    }
}

// ---------------------------------------------------------------------------------------
// what-if fail
// ---------------------------------------------------------------------------------------

/// The taint-manager's eviction of `cluster` from `binding` (TM-11) with `purge_mode`, as
/// a new generation of the binding (the spec changed), ready to be simulated.
pub fn evicted_copy(
    binding: &v1::ResourceBinding,
    cluster: &str,
    purge_mode: i32,
) -> anyhow::Result<v1::ResourceBinding> {
    let mut domain = core::ResourceBinding::try_from(binding.clone())
        .map_err(|e| anyhow::anyhow!("the binding cannot be read: {e}"))?;
    let mode = core::PurgeMode::from_wire(purge_mode, "purgeMode")
        .ok()
        .flatten()
        .unwrap_or(core::PurgeMode::Gracefully);
    graceful_evict_cluster(
        &mut domain.spec,
        cluster,
        &EvictOptions::taint_manager(mode, format!("what-if: {cluster} fails")),
    );
    let mut copy = v1::ResourceBinding::from(domain);
    let meta = copy.meta_mut();
    meta.generation += 1;
    Ok(copy)
}

/// `cluster` as it would look once failed at `at`: Ready=False and the not-ready
/// NoSchedule and NoExecute taints (CH-11, CH-10).
pub fn failed_copy(cluster: &v1::Cluster, at: &prost_types::Timestamp) -> v1::Cluster {
    let mut c = cluster.clone();
    let spec = c.spec.get_or_insert_with(Default::default);
    for effect in [v1::TaintEffect::NoSchedule, v1::TaintEffect::NoExecute] {
        let e = effect as i32;
        if !spec
            .taints
            .iter()
            .any(|t| t.key == core::TAINT_NOT_READY && t.effect == e)
        {
            spec.taints.push(v1::Taint {
                key: core::TAINT_NOT_READY.into(),
                value: String::new(),
                effect: e,
                time_added: Some(*at),
                trace_context: String::new(),
            });
        }
    }
    let status = c.status.get_or_insert_with(Default::default);
    status
        .conditions
        .retain(|x| x.r#type != core::CONDITION_READY);
    status.conditions.push(v1::Condition {
        r#type: core::CONDITION_READY.into(),
        status: v1::ConditionStatus::False as i32,
        reason: "ClusterNotReady".into(),
        message: "what-if: the cluster fails".into(),
        last_transition_time: Some(*at),
    });
    c
}

/// What happens to one binding.
enum Fate {
    /// Tolerates the taints forever, or eviction does not apply.
    Stays(String),
    /// Already being evicted from the cluster.
    AlreadyEvicted,
    /// Evicted at `when` (None = now) and rescheduled to `to`.
    Moves {
        when: Option<prost_types::Timestamp>,
        to: Vec<v1::TargetCluster>,
    },
    /// Evicted, but no cluster fits.
    Nowhere {
        when: Option<prost_types::Timestamp>,
        why: String,
    },
    /// A dry-run call failed.
    Unknown(String),
}

async fn fate(
    dry: &DryRunArgs,
    failed: &v1::Cluster,
    clusters_after: &[v1::Cluster],
    binding: &v1::ResourceBinding,
    at: &prost_types::Timestamp,
) -> Fate {
    let cluster = failed.name();
    let targets = binding
        .spec
        .as_ref()
        .is_some_and(|s| s.clusters.iter().any(|c| c.name == cluster));
    if !targets {
        return Fate::AlreadyEvicted;
    }
    let ex = match explain_taints(dry, failed, binding, at).await {
        Ok(ex) => ex,
        Err(e) => return Fate::Unknown(format!("{e:#}")),
    };
    let when = match v1::EvictionDecision::try_from(ex.decision) {
        Ok(v1::EvictionDecision::EvictNow) => None,
        Ok(v1::EvictionDecision::EvictAfter) => ex.evict_at,
        _ => {
            let why = ex
                .reasons
                .first()
                .cloned()
                .unwrap_or_else(|| decision_words(ex.decision).to_owned());
            return Fate::Stays(why);
        }
    };
    let evicted = match evicted_copy(binding, cluster, ex.purge_mode) {
        Ok(b) => b,
        Err(e) => return Fate::Unknown(format!("{e:#}")),
    };
    let sim_at = when.unwrap_or(*at);
    let sim = match simulate(dry, &evicted, clusters_after, true, &sim_at).await {
        Ok(s) => s,
        Err(e) => return Fate::Unknown(format!("{e:#}")),
    };
    let scheduled = sim
        .scheduled_condition
        .as_ref()
        .is_none_or(|c| c.status == v1::ConditionStatus::True as i32);
    if sim.clusters.is_empty() || !scheduled {
        // The scheduler's own summary; else each cluster's failed filter.
        let mut why = sim
            .scheduled_condition
            .as_ref()
            .map(|c| c.message.trim_end_matches('.').to_owned())
            .filter(|m| !m.is_empty())
            .unwrap_or_default();
        if why.is_empty() {
            why = sim
                .filter_results
                .iter()
                .filter(|f| !f.feasible)
                .map(|f| format!("{}: {} ({})", f.cluster, f.filter, f.reason))
                .collect::<Vec<_>>()
                .join("; ");
        }
        if why.is_empty() {
            why = "no cluster fits the placement".into();
        }
        return Fate::Nowhere { when, why };
    }
    Fate::Moves {
        when,
        to: sim.clusters,
    }
}

fn when_words(when: Option<&prost_types::Timestamp>, at: &prost_types::Timestamp) -> String {
    match when {
        None => "now".into(),
        Some(t) => {
            let left = (millis(t) - millis(at)).max(0);
            format!(
                "after {} ({})",
                human_duration(Duration::from_millis(left.unsigned_abs())),
                rfc3339(t)
            )
        }
    }
}

async fn what_if_fail(args: WhatIfFailArgs) -> anyhow::Result<ExitCode> {
    let dry = &args.dry_run;
    let mut api = dry.server.api().await?;
    let (clusters, _) = list_all::<v1::Cluster>(&mut api, &Scope::default())
        .await
        .map_err(|s| status_error("listing clusters", &s))?;
    let Some(cluster) = clusters.iter().find(|c| c.name() == args.cluster) else {
        anyhow::bail!("cluster {:?} not found", args.cluster);
    };
    let at = dry.now.unwrap_or_else(now);
    let failed = failed_copy(cluster, &at);
    let clusters_after: Vec<v1::Cluster> = clusters
        .iter()
        .map(|c| {
            if c.name() == args.cluster {
                failed.clone()
            } else {
                c.clone()
            }
        })
        .collect();
    let scope = Scope {
        namespace: None,
        cluster: Some(args.cluster.clone()),
        ..Default::default()
    };
    let (bindings, _) = list_all::<v1::ResourceBinding>(&mut api, &scope)
        .await
        .map_err(|s| status_error("listing bindings", &s))?;

    println!(
        "What if {} fails at {}: it turns NotReady and gets {}:NoSchedule and \
         {}:NoExecute.",
        args.cluster,
        rfc3339(&at),
        core::TAINT_NOT_READY,
        core::TAINT_NOT_READY
    );
    if bindings.is_empty() {
        println!("No binding runs on {}: nothing would move.", args.cluster);
        return Ok(ExitCode::SUCCESS);
    }
    println!();
    let mut table = Table::new(["BINDING", "NOW", "EVICTED", "WOULD RUN ON"]);
    let mut details = Vec::new();
    let (mut moving, mut nowhere, mut staying, mut unknown) = (0, 0, 0, 0);
    for b in &bindings {
        let id = words::qualified(b.namespace(), b.name());
        let now_on = words::targets(
            &b.spec
                .as_ref()
                .map(|s| s.clusters.clone())
                .unwrap_or_default(),
        );
        let row = match fate(dry, &failed, &clusters_after, b, &at).await {
            Fate::Stays(why) => {
                staying += 1;
                details.push(format!("{id}: stays on {}: {why}", args.cluster));
                vec![id, now_on, "never".into(), "(unchanged)".into()]
            }
            Fate::AlreadyEvicted => {
                staying += 1;
                vec![
                    id,
                    now_on,
                    "already (eviction task)".into(),
                    "(unchanged)".into(),
                ]
            }
            Fate::Moves { when, to } => {
                moving += 1;
                vec![
                    id,
                    now_on,
                    when_words(when.as_ref(), &at),
                    words::targets(&to),
                ]
            }
            Fate::Nowhere { when, why } => {
                nowhere += 1;
                details.push(format!("{id}: nowhere to go: {why}"));
                vec![
                    id,
                    now_on,
                    when_words(when.as_ref(), &at),
                    "NOWHERE TO GO".into(),
                ]
            }
            Fate::Unknown(e) => {
                unknown += 1;
                details.push(format!("{id}: could not be simulated: {e}"));
                vec![id, now_on, "?".into(), "?".into()]
            }
        };
        table.row(row);
    }
    print!("{}", table.render());
    if !details.is_empty() {
        println!();
        for d in &details {
            println!("{d}");
        }
    }
    println!();
    println!(
        "{moving} binding(s) would move, {nowhere} would have nowhere to go, {staying} would \
         stay{}.",
        if unknown > 0 {
            format!(", {unknown} could not be simulated")
        } else {
            String::new()
        }
    );
    println!(
        "Times count from the NoExecute taint; with --no-execute-taints auto, cluster-health \
         adds it --failover-eviction-timeout after the cluster turns NotReady."
    );
    Ok(if unknown == 0 {
        ExitCode::SUCCESS
    } else {
        eprintln!("error: {unknown} binding(s) could not be simulated");
        ExitCode::FAILURE
    })
}

/// The Assess request of `flotilla explain cluster`: the stored cluster, the assumed probe and,
/// with `--for`, a threshold memory that has seen the probe's Ready status since `at - for`.
fn cluster_assess_request(
    cluster: v1::Cluster,
    probe: Option<ProbeArg>,
    seen_for: Option<Duration>,
    at: prost_types::Timestamp,
) -> v1::ClusterHealthAssessRequest {
    let probe = probe.map(|p| v1::ProbeResult {
        online: p != ProbeArg::Unreachable,
        healthy: p == ProbeArg::Healthy,
        message: String::new(),
    });
    let threshold = match (&probe, seen_for) {
        (Some(p), Some(d)) => {
            let since = prost_types::Timestamp {
                seconds: at
                    .seconds
                    .saturating_sub(i64::try_from(d.as_secs()).unwrap_or(i64::MAX)),
                nanos: at.nanos,
            };
            Some(v1::ThresholdState {
                ready_status: if p.healthy {
                    v1::ConditionStatus::True as i32
                } else {
                    v1::ConditionStatus::False as i32
                },
                threshold_start: Some(since),
            })
        }
        _ => None,
    };
    v1::ClusterHealthAssessRequest {
        cluster: Some(cluster),
        probe,
        threshold,
        now: Some(at),
        ..Default::default()
    }
}

fn ready_words(c: Option<&v1::Condition>) -> String {
    match c {
        None => "no Ready condition".to_owned(),
        Some(c) => format!(
            "{} ({}){}",
            words::condition_status(c.status),
            if c.reason.is_empty() { "-" } else { &c.reason },
            c.last_transition_time
                .as_ref()
                .map(|t| format!(" since {}", rfc3339(t)))
                .unwrap_or_default()
        ),
    }
}

async fn explain_cluster(args: ExplainClusterArgs) -> anyhow::Result<ExitCode> {
    let dry = &args.dry_run;
    let mut api = dry.server.api().await?;
    let cluster = api
        .get_cluster(v1::GetClusterRequest {
            name: args.cluster.clone(),
        })
        .await
        .map_err(|s| status_error(format!("reading cluster {}", args.cluster), &s))?
        .into_inner();
    let at = dry.now.unwrap_or_else(now);
    let stored_ready = cluster
        .status
        .as_ref()
        .and_then(|s| words::condition(&s.conditions, core::CONDITION_READY))
        .cloned();
    let stored_taints: Vec<String> = cluster
        .spec
        .as_ref()
        .map(|s| s.taints.iter().map(words::taint).collect())
        .unwrap_or_default();
    let request = cluster_assess_request(cluster.clone(), args.probe, args.for_, at);
    let mut client = ClusterHealthClient::new(channel(dry, Service::ClusterHealth).await?);
    let resp = client
        .assess(request)
        .await
        .map_err(|s| status_error("ClusterHealth.Assess", &s))?
        .into_inner();

    let mut r = Report::default();
    r.section(&format!("Cluster {}", args.cluster));
    r.line(
        2,
        format!(
            "Sync mode:       {}",
            words::sync_mode(cluster.spec.as_ref().map_or(0, |s| s.sync_mode))
        ),
    );
    r.line(
        2,
        format!("Ready now:       {}", ready_words(stored_ready.as_ref())),
    );
    r.line(
        2,
        format!("Taints now:      {}", words::list_or_none(&stored_taints)),
    );
    r.line(
        2,
        format!(
            "Assumed probe:   {}",
            match (
                args.probe
                    .and_then(|p| clap::ValueEnum::to_possible_value(&p)),
                args.for_
            ) {
                (None, _) => "none (no new observation)".to_owned(),
                (Some(p), None) => p.get_name().to_owned(),
                (Some(p), Some(d)) =>
                    format!("{} for {}", p.get_name(), humantime::format_duration(d)),
            }
        ),
    );
    r.line(2, format!("At:              {}", rfc3339(&at)));

    r.section("cluster-health would write (nothing is written)");
    r.line(
        2,
        format!(
            "Ready:           {}{}",
            ready_words(resp.ready.as_ref()),
            if resp.status_changed {
                "   (changed)"
            } else {
                "   (unchanged)"
            }
        ),
    );
    let taints = |ts: &[v1::Taint]| words::list_or_none(ts.iter().map(words::taint));
    r.line(
        2,
        format!("Taints added:    {}", taints(&resp.added_taints)),
    );
    r.line(
        2,
        format!("Taints removed:  {}", taints(&resp.removed_taints)),
    );
    r.line(2, format!("Taints then:     {}", taints(&resp.taints)));
    r.line(
        2,
        format!(
            "Look again in:   {}",
            resp.requeue_after.as_ref().map_or_else(
                || "only on new input".to_owned(),
                |d| human_duration(std_duration(d))
            )
        ),
    );
    r.section("Why");
    if resp.reasons.is_empty() {
        r.line(2, "no rule applies: nothing to change");
    }
    for reason in &resp.reasons {
        r.line(2, reason);
    }
    print!("{}", r.text);
    Ok(ExitCode::SUCCESS)
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
    fn dry_run_addresses_follow_the_server() {
        assert_eq!(derive_addr("127.0.0.1:7400", 3), "127.0.0.1:7403");
        assert_eq!(derive_addr("http://10.0.0.1:17400/", 5), "10.0.0.1:17405");
        assert_eq!(derive_addr("localhost", 2), "localhost:7402");
        assert_eq!(derive_addr("[::1]:9000", 4), "[::1]:9004");
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
        let binding = v1::ResourceBinding {
            metadata: Some(v1::ObjectMeta {
                name: "nginx-deployment".into(),
                namespace: "default".into(),
                generation: 4,
                ..Default::default()
            }),
            spec: Some(v1::ResourceBindingSpec {
                replicas: 3,
                clusters: vec![
                    v1::TargetCluster {
                        name: "member1".into(),
                        replicas: 1,
                    },
                    v1::TargetCluster {
                        name: "member2".into(),
                        replicas: 2,
                    },
                ],
                ..Default::default()
            }),
            status: None,
        };
        let evicted = evicted_copy(&binding, "member1", v1::PurgeMode::Gracefully as i32).unwrap();
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
