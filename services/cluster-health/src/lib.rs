//! `flotilla-cluster-health`: turns probes of Push members and heartbeats of Pull agents into
//! each cluster's `Ready` condition and its controller taints (`cluster.karmada.io/*`)
//! (docs/semantics.md: CH-1..CH-19, with A1, A2, A9).
//!
//! ```text
//!   etcd ─watch clusters/──────────────► Cache<Cluster> ──┬─► probe queue (Push clusters)
//!        ─watch clustertaintpolicies/──► Cache<CTP>      │     probe × --concurrent-probes:
//!        ─watch heartbeats/────────────► Cache<record>   │     GET /readyz (/healthz on 404),
//!        ─watch bindings/──────────────► Cache<refs>     │     Kubernetes API (CH-2, 5.2)  
//!                                                        │          │ Observations
//!                                                        ▼          ▼
//!                    health queue (cluster) ──► reconcile × --concurrent-cluster-syncs
//!                       (leader only, leases/cluster-health; writes fenced)
//!        CH-3 observe → CH-4 damp (A9) → CH-5.5 condition → CH-9 monitor (Pull)
//!        → CH-11 NoSchedule + CH-10 NoExecute (auto, A1) + CH-15 terminating (A2)
//!        → CH-12 arithmetic → CH-16..18 ClusterTaintPolicies
//!        ──► clusters/<name>: status + taints in ONE compare-and-swap; requeue at the next
//!            deadline; a deleting cluster is removed once nothing references it
//!
//!   gRPC flotilla.v1.ClusterHealth (every replica):
//!     Heartbeat → heartbeats/<cluster> (HeartbeatRecord: renew time, probe, status)
//!     Assess    → the same `assess` as the controller, as a dry run
//! ```

#![deny(missing_docs)]

pub mod assess;
pub mod controller;
pub mod error;
pub mod grpc;
pub mod heartbeat;
pub mod probe;

use std::sync::Arc;
use std::time::Duration;

use clap::Parser;
use flotilla_core::health::{MonitorGrace, Thresholds};
use flotilla_core::types::ClusterTaintPolicy;
use flotilla_proto::v1;
use flotilla_proto::v1::cluster_health_server::ClusterHealthServer;
use flotilla_runtime::CacheBarrier;
use flotilla_runtime::args::ArgError;
use flotilla_runtime::{
    ChangeFilter, CommonArgs, Controller, Elected, Event, QueueConfig, Readiness, Shutdown,
    WatcherConfig, WorkQueue, Writer, reflect, shared_watcher,
};
use flotilla_store::typed::decode;
use flotilla_store::{KeyValue, StoreRef};
use tokio::task::JoinHandle;
use tonic::server::NamedService;

pub use crate::assess::{NoExecuteTaints, Options};
pub use crate::controller::{Context, cluster_key};
pub use crate::error::Error;
pub use crate::grpc::ClusterHealthService;

/// The election prefix of this service.
pub const LEASE_PREFIX: &str = "leases/cluster-health";

/// The fully qualified gRPC service name (for health), as the generated server names it.
pub const SERVICE_NAME: &str = <ClusterHealthServer<ClusterHealthService> as NamedService>::NAME;

/// Flags of `flotilla-cluster-health`. Timers take `500ms`, `30s`, `5m`, ... so that tests can
/// compress them.
#[derive(Clone, Debug, Parser)]
#[command(
    name = "flotilla-cluster-health",
    version,
    about = "Turns probes (Push) and heartbeats (Pull) into each cluster's Ready condition and \
             its cluster.karmada.io/* taints (Karmada's cluster status and cluster controllers, \
             CH-1..CH-19)"
)]
pub struct Args {
    /// Store, gRPC, admin and logging flags shared by every service.
    #[command(flatten)]
    pub common: CommonArgs,

    /// How often each Push member is probed (Karmada `--cluster-status-update-frequency`,
    /// 10s, CH-1.3). Also how often a deleting cluster is checked for references (Karmada's
    /// CleanupCheckInterval, 10s, CH-15).
    #[arg(long, env = "FLOTILLA_CLUSTER_STATUS_UPDATE_FREQUENCY", default_value = "10s", value_parser = humantime::parse_duration)]
    pub cluster_status_update_frequency: Duration,

    /// How long a healthy observation must persist before Ready turns True again (Karmada
    /// `--cluster-success-threshold`, 30s, CH-4). Applies to probes and heartbeats (A9).
    #[arg(long, env = "FLOTILLA_CLUSTER_SUCCESS_THRESHOLD", default_value = "30s", value_parser = humantime::parse_duration)]
    pub cluster_success_threshold: Duration,

    /// How long an unhealthy observation must persist before Ready turns False (Karmada
    /// `--cluster-failure-threshold`, 30s, CH-4). Applies to probes and heartbeats (A9).
    #[arg(long, env = "FLOTILLA_CLUSTER_FAILURE_THRESHOLD", default_value = "30s", value_parser = humantime::parse_duration)]
    pub cluster_failure_threshold: Duration,

    /// How often the store's own health is checked (at most every second), so that a
    /// control plane blind to etcd judges no cluster (Karmada `--cluster-monitor-period`, 5s,
    /// CH-8). Clusters are looked at their deadlines, exactly, and on every change of what
    /// they are judged from; a Pull cluster also at least once per monitor grace period.
    #[arg(long, env = "FLOTILLA_CLUSTER_MONITOR_PERIOD", default_value = "5s", value_parser = humantime::parse_duration)]
    pub cluster_monitor_period: Duration,

    /// Silence after which a Pull cluster that posted status becomes Ready=Unknown (Karmada
    /// `--cluster-monitor-grace-period`, 40s, CH-9.1).
    #[arg(long, env = "FLOTILLA_CLUSTER_MONITOR_GRACE_PERIOD", default_value = "40s", value_parser = humantime::parse_duration)]
    pub cluster_monitor_grace_period: Duration,

    /// Silence after which a Pull cluster that never posted status becomes Ready=Unknown
    /// (Karmada `--cluster-startup-grace-period`, 60s, CH-9.1).
    #[arg(long, env = "FLOTILLA_CLUSTER_STARTUP_GRACE_PERIOD", default_value = "60s", value_parser = humantime::parse_duration)]
    pub cluster_startup_grace_period: Duration,

    /// How long Ready may be False (or Unknown since the last heartbeat) before the
    /// `not-ready` / `unreachable` NoExecute taint (Karmada ≤ v1.13
    /// `--failover-eviction-timeout`, 5m, CH-10); only with `--no-execute-taints auto`.
    #[arg(long, env = "FLOTILLA_FAILOVER_EVICTION_TIMEOUT", default_value = "5m", value_parser = humantime::parse_duration)]
    pub failover_eviction_timeout: Duration,

    /// Who adds NoExecute taints on failure (A1): `auto` = this service after
    /// `--failover-eviction-timeout` (Karmada v1.5, failover out of the box); `policy` = only
    /// ClusterTaintPolicies and operators (Karmada latest).
    #[arg(long, env = "FLOTILLA_NO_EXECUTE_TAINTS", value_enum, default_value_t = NoExecuteTaints::Auto)]
    pub no_execute_taints: NoExecuteTaints,

    /// How long one probe (`/readyz`, `/healthz`, status collection) may take before the
    /// member counts as unreachable (default 5s: Karmada's cluster client timeout).
    #[arg(long, env = "FLOTILLA_PROBE_TIMEOUT", default_value = "5s", value_parser = humantime::parse_duration)]
    pub probe_timeout: Duration,

    /// Concurrent health reconciles (Karmada `--concurrent-cluster-syncs`, 5).
    #[arg(long, env = "FLOTILLA_CONCURRENT_CLUSTER_SYNCS", default_value_t = 5)]
    pub concurrent_cluster_syncs: usize,

    /// Concurrent probes of Push members, so that hanging members do not delay the others
    /// (Flotilla's, A12; default 32).
    #[arg(long, env = "FLOTILLA_CONCURRENT_PROBES", default_value_t = 32)]
    pub concurrent_probes: usize,
}

/// Validated settings (what [`start`] needs).
#[derive(Clone, Debug)]
pub struct Config {
    /// The rules' timers and switches.
    pub options: Options,
    /// `--cluster-status-update-frequency`.
    pub frequency: Duration,
    /// `--probe-timeout`.
    pub probe_timeout: Duration,
    /// `--concurrent-cluster-syncs`.
    pub concurrent_syncs: usize,
    /// `--concurrent-probes`.
    pub concurrent_probes: usize,
    /// This replica's identity in the election.
    pub identity: String,
    /// Leader lease TTL.
    pub lease_ttl: Duration,
}

impl Config {
    /// The flags' defaults for `identity` (tests and `flotilla up`).
    pub fn new(identity: impl Into<String>) -> Self {
        Config {
            options: Options::default(),
            frequency: Duration::from_secs(10),
            probe_timeout: Duration::from_secs(5),
            concurrent_syncs: 5,
            concurrent_probes: 32,
            identity: identity.into(),
            lease_ttl: Duration::from_secs(15),
        }
    }
}

// === impl Args ===

impl Args {
    /// Checks what clap cannot and builds the [`Config`]; every problem is reported.
    pub fn validate(&self) -> Result<Config, Vec<ArgError>> {
        let Self {
            common,
            cluster_status_update_frequency,
            cluster_success_threshold,
            cluster_failure_threshold,
            cluster_monitor_period,
            cluster_monitor_grace_period,
            cluster_startup_grace_period,
            failover_eviction_timeout,
            no_execute_taints,
            probe_timeout,
            concurrent_cluster_syncs,
            concurrent_probes,
        } = self;
        let mut errors = common.validate().err().unwrap_or_default();
        let mut check = |flag: &'static str, ok: bool, message: &str| {
            if !ok {
                errors.push(ArgError {
                    flag,
                    message: message.into(),
                });
            }
        };
        for (flag, d) in [
            (
                "cluster-status-update-frequency",
                cluster_status_update_frequency,
            ),
            ("cluster-monitor-period", cluster_monitor_period),
            ("cluster-monitor-grace-period", cluster_monitor_grace_period),
            ("cluster-startup-grace-period", cluster_startup_grace_period),
            ("probe-timeout", probe_timeout),
        ] {
            check(flag, !d.is_zero(), "must be positive");
        }
        for (flag, n) in [
            ("concurrent-cluster-syncs", concurrent_cluster_syncs),
            ("concurrent-probes", concurrent_probes),
        ] {
            check(flag, *n > 0, "must be at least 1");
        }
        if !errors.is_empty() {
            return Err(errors);
        }
        Ok(Config {
            options: Options {
                thresholds: Thresholds {
                    success: *cluster_success_threshold,
                    failure: *cluster_failure_threshold,
                },
                grace: MonitorGrace {
                    startup: *cluster_startup_grace_period,
                    monitor: *cluster_monitor_grace_period,
                },
                failover_eviction_timeout: *failover_eviction_timeout,
                no_execute: *no_execute_taints,
                monitor_period: *cluster_monitor_period,
            },
            frequency: *cluster_status_update_frequency,
            probe_timeout: *probe_timeout,
            concurrent_syncs: *concurrent_cluster_syncs,
            concurrent_probes: *concurrent_probes,
            identity: common.identity(),
            lease_ttl: common.lease_ttl,
        })
    }

    /// Runs the service until SIGTERM/SIGINT: store, controllers, gRPC and admin servers.
    pub async fn run(self) -> anyhow::Result<()> {
        flotilla_runtime::service::run::<ClusterHealth>(self).await
    }
}

/// A13: asks the store for its revision every `period` (at most every second) and keeps the
/// context's [`controller::Observing`] current. When no pulse has succeeded for a quarter of
/// the monitor grace period (at most 500 ms) the replica turns blind (nothing is judged); a
/// single failed call does not (with several etcd endpoints the client may still try a dead
/// one now and then, which is no outage). The first pulse that succeeds afterwards waits until
/// the heartbeat cache has caught up with the store, then resumes observation (every grace
/// period counts from then) and queues every cluster.
async fn store_pulse(
    store: StoreRef,
    ctx: Arc<Context>,
    health: WorkQueue<String>,
    period: Duration,
    shutdown: Shutdown,
) {
    // A pulse that takes longer than its period counts as no answer: blindness is noticed
    // well within one grace period (which is many monitor periods).
    let period = period.min(Duration::from_secs(1));
    let deadline = period;
    let blind_after = (ctx.options.grace.monitor / 4).min(Duration::from_millis(500));
    let mut last_success = ctx.clock.now();
    loop {
        let answered = tokio::time::timeout(deadline, store.current_revision()).await;
        let now = ctx.clock.now();
        match answered {
            Ok(Ok(_)) => {
                last_success = now;
                if ctx.observing().blind {
                    // the heartbeats seen must be the store's, not those of before the gap
                    let caught_up =
                        CacheBarrier::new(store.clone()).cache(heartbeat::PREFIX, &ctx.heartbeats);
                    tokio::select! {
                        () = shutdown.triggered() => return,
                        () = caught_up.wait() => {}
                    }
                    if ctx.observation_resumed(ctx.clock.now()) {
                        for c in ctx.clusters.list() {
                            health.add(name_of(&c).to_owned());
                        }
                    }
                }
            }
            Ok(Err(_)) | Err(_) => {
                if now.saturating_since(last_success) >= blind_after || ctx.observing().blind {
                    ctx.store_lost(now);
                }
            }
        }
        tokio::select! {
            () = shutdown.triggered() => return,
            () = tokio::time::sleep(period) => {}
        }
    }
}

fn decode_policy(kv: &KeyValue) -> Result<ClusterTaintPolicy, String> {
    let wire: v1::ClusterTaintPolicy = decode(kv).map_err(|e| e.to_string())?;
    ClusterTaintPolicy::try_from(wire).map_err(|e| e.to_string())
}

fn name_of(cluster: &v1::Cluster) -> &str {
    cluster.metadata.as_ref().map_or("", |m| m.name.as_str())
}

/// A started cluster-health: its gRPC service (mount it on a server) and the task running the
/// controllers until shutdown.
#[derive(Debug)]
pub struct Started {
    /// `flotilla.v1.ClusterHealth` over this replica's caches.
    pub service: ClusterHealthService,
    /// Runs until the shutdown fires.
    pub task: JoinHandle<Result<(), Error>>,
    /// The health reconciler's context (for tests: memory, caches).
    pub context: Arc<Context>,
}

/// Starts cluster-health on `store`: caches (registered with `readiness`), leader election on
/// [`LEASE_PREFIX`], the probe and health controllers (only while leading, writes fenced).
/// `flotilla up` calls this with a shared in-memory store and mounts [`Started::service`].
/// Must be called inside a tokio runtime.
pub fn start(
    store: StoreRef,
    config: Config,
    readiness: Readiness,
    shutdown: Shutdown,
    clock: flotilla_runtime::Clock,
) -> Started {
    let elected = Elected::spawn(
        store.clone(),
        LEASE_PREFIX,
        &config.identity,
        config.lease_ttl,
        "cluster-health",
        &shutdown,
    );
    let fenced = elected.fenced.clone();
    let recorder = elected.recorder.clone();

    let clusters_writer: Writer<v1::Cluster> = Writer::new();
    let secrets_writer: Writer<v1::Secret> = Writer::new();
    let policies_writer: Writer<ClusterTaintPolicy> = Writer::new();
    let heartbeats_writer: Writer<v1::HeartbeatRecord> = Writer::new();
    let bindings_writer: Writer<controller::BindingRefs> =
        Writer::new().with_index(controller::BINDING_INDEX, controller::index_binding);
    let clusters = clusters_writer.cache();
    let secrets = secrets_writer.cache();
    let policies = policies_writer.cache();
    let heartbeats = heartbeats_writer.cache();
    let bindings = bindings_writer.cache();
    readiness.add_cache("clusters", &clusters);
    readiness.add_cache("secrets", &secrets);
    readiness.add_cache("clustertaintpolicies", &policies);
    readiness.add_cache("heartbeats", &heartbeats);
    readiness.add_cache("bindings", &bindings);

    let observations = Arc::new(probe::Observations::default());
    let health_queue: WorkQueue<String> = WorkQueue::new(QueueConfig::new("cluster_health"));
    let probe_queue: WorkQueue<String> = WorkQueue::new(QueueConfig::new("cluster_health_probes"));
    let ctx = Arc::new(Context::new(
        config.options,
        config.frequency,
        config.probe_timeout,
        clusters.clone(),
        policies.clone(),
        heartbeats.clone(),
        bindings.clone(),
        observations.clone(),
        fenced,
        recorder,
        clock.clone(),
    ));
    let probe_ctx = Arc::new(probe::ProbeContext {
        clusters: clusters.clone(),
        secrets: secrets.clone(),
        store: flotilla_store::typed::Typed::new(store.clone()),
        observations,
        health: health_queue.clone(),
        prober: probe::Prober::new(config.probe_timeout),
        frequency: config.frequency,
        clock: clock.clone(),
    });
    let service = ClusterHealthService::new(
        config.options,
        clusters.clone(),
        policies.clone(),
        heartbeats.clone(),
        store.clone(),
        clock,
    );

    let watch = |prefix: &str, name: &str| {
        (
            store.clone(),
            prefix.to_owned(),
            WatcherConfig::for_prefix(prefix).named(name),
        )
    };
    let (s, p, c) = watch("clusters/", "clusters");
    let cluster_events = reflect(
        clusters_writer,
        shared_watcher(s, p, c, decode::<v1::Cluster>),
    );
    let (s, p, c) = watch("secrets/", "secrets");
    let secret_events = reflect(
        secrets_writer,
        shared_watcher(s, p, c, decode::<v1::Secret>),
    );
    let (s, p, c) = watch("clustertaintpolicies/", "clustertaintpolicies");
    let policy_events = reflect(policies_writer, shared_watcher(s, p, c, decode_policy));
    let (s, p, c) = watch(heartbeat::PREFIX, "heartbeats");
    let heartbeat_events = reflect(
        heartbeats_writer,
        shared_watcher(s, p, c, heartbeat::decode),
    );
    let (s, p, c) = watch("bindings/", "bindings");
    let binding_events = reflect(
        bindings_writer,
        shared_watcher(s, p, c, controller::decode_binding_refs),
    );

    // A new leader judges clusters only from caches at least as new as the store it won.
    let barrier = CacheBarrier::new(store.clone())
        .cache("clusters/", &clusters)
        .cache("clustertaintpolicies/", &policies)
        .cache(heartbeat::PREFIX, &heartbeats)
        .cache("bindings/", &bindings);
    let context = ctx.clone();
    let task = tokio::spawn(async move {
        let pulse = tokio::spawn(store_pulse(
            store.clone(),
            ctx.clone(),
            health_queue.clone(),
            config.options.monitor_period,
            shutdown.clone(),
        ));
        // Judge and probe only once every cache holds a full list.
        let caches = (clusters, policies, heartbeats, bindings);
        let (c1, c2) = (ctx.clone(), ctx.clone());
        let health = ready_after_caches(
            Controller::new(
                health_queue.clone(),
                controller::reconcile,
                controller::error_policy,
            ),
            &caches,
        )
        .watches_with(
            cluster_events,
            cluster_trigger(ctx.clone(), health_queue.clone(), probe_queue.clone()),
        )
        .watches(policy_events, move |ev| all_clusters(&c1, ev))
        .watches_with(
            heartbeat_events,
            heartbeat_trigger(ctx.clone(), health_queue.clone()),
        )
        .watches(binding_events, move |ev| deleting_clusters(&c2, ev))
        // one failover = one trace: while a Push cluster fails, its reconciles (and the
        // taints they write) continue the probe span that first saw the failure
        .trace_parent(|name: &String, ctx: &controller::Context| {
            ctx.observations.failure_trace(name)
        })
        .workers(config.concurrent_syncs)
        .leader(elected.leader())
        .barrier(barrier.clone())
        .run(ctx, shutdown.clone());
        let probes = ready_after_caches(
            Controller::new(probe_queue, probe::probe_cluster, probe::probe_error_policy),
            &caches,
        )
        // credentials are read at probe time; a change takes effect at the next probe
        .watches(secret_events, |_| Vec::new())
        .workers(config.concurrent_probes)
        .leader(elected.leader())
        .barrier(barrier)
        .run(probe_ctx, shutdown.clone());
        tokio::join!(health, probes);
        pulse.abort();
        elected.resign().await;
        Ok(())
    });
    Started {
        service,
        task,
        context,
    }
}

/// `controller`, starting no worker before every cache of cluster-health holds a full list.
fn ready_after_caches<C: Send + Sync + 'static, E: std::fmt::Display + Send + 'static>(
    controller: Controller<String, C, E>,
    (clusters, policies, heartbeats, bindings): &(
        flotilla_runtime::Cache<v1::Cluster>,
        flotilla_runtime::Cache<ClusterTaintPolicy>,
        flotilla_runtime::Cache<v1::HeartbeatRecord>,
        flotilla_runtime::Cache<controller::BindingRefs>,
    ),
) -> Controller<String, C, E> {
    controller
        .ready_after("clusters", clusters)
        .ready_after("clustertaintpolicies", policies)
        .ready_after("heartbeats", heartbeats)
        .ready_after("bindings", bindings)
}

/// Cluster changes: the cluster's health key; its probe key when it is new to the prober or
/// its sync mode or endpoint changed (not on our own status writes, which would probe in a
/// loop). Keeps what it last saw of each cluster's probe target.
fn cluster_trigger(
    ctx: Arc<Context>,
    health: WorkQueue<String>,
    probes: WorkQueue<String>,
) -> impl FnMut(&Event<v1::Cluster>) + Send + 'static {
    // what the prober reads of a cluster: its sync mode and endpoint
    let mut targets = ChangeFilter::new("cluster_health_probes", |c: &v1::Cluster| {
        c.spec
            .as_ref()
            .map(|s| (s.sync_mode, s.api_endpoint.clone()))
            .unwrap_or_default()
    });
    move |ev| {
        let change = targets.observe(ev);
        let Some(name) = change.key().and_then(|k| k.strip_prefix("clusters/")) else {
            return;
        };
        if name.is_empty() {
            return;
        }
        match (change, ev) {
            (_, Event::InitApply(o) | Event::Apply(o)) => {
                let deleting = o
                    .value
                    .metadata
                    .as_ref()
                    .is_some_and(|m| m.deletion_timestamp.is_some());
                ctx.note_deleting(name, deleting);
                if change.is_change() {
                    probes.add(name.to_owned());
                }
            }
            _ => probes.add(name.to_owned()),
        }
        health.add(name.to_owned());
    }
}

/// ClusterTaintPolicy changes: every cluster (CH-17.1; a deleted policy leaves its taints).
fn all_clusters(ctx: &Context, ev: &Event<ClusterTaintPolicy>) -> Vec<String> {
    if ev.key().is_none() {
        return Vec::new();
    }
    ctx.clusters
        .list()
        .iter()
        .map(|c| name_of(c).to_owned())
        .collect()
}

/// Heartbeat record changes: that cluster, unless the heartbeat only renewed the lease of a
/// Ready cluster ([`heartbeat::RenewalFilter`]; a gap of half the monitor grace period between
/// two records queues it too).
fn heartbeat_trigger(
    ctx: Arc<Context>,
    health: WorkQueue<String>,
) -> impl FnMut(&Event<v1::HeartbeatRecord>) + Send + 'static {
    let mut filter = heartbeat::RenewalFilter::new(ctx.options.grace.monitor / 2);
    move |ev| {
        let ready = |name: &str| {
            ctx.clusters
                .get(&cluster_key(name))
                .is_some_and(|c| controller::ready_and_kept(&c))
        };
        if let Some(name) = filter.cluster_to_queue(ev, ready) {
            health.add(name.to_owned());
        }
    }
}

/// Binding changes: the clusters being deleted, which go once no binding references them.
fn deleting_clusters(ctx: &Context, ev: &Event<controller::BindingRefs>) -> Vec<String> {
    if ev.key().is_none() {
        return Vec::new();
    }
    ctx.deleting()
}

flotilla_runtime::service! {
    /// cluster-health as a service (`flotilla_runtime::service`).
    pub struct ClusterHealth {
        name: "cluster-health",
        grpc: SERVICE_NAME,
        flags: Args => Config,
        start: start_service,
    }
}

/// Starts ClusterHealth: what `flotilla-cluster-health` runs on the parts of its runtime.
fn start_service(
    parts: &flotilla_runtime::service::Parts,
    config: Config,
) -> flotilla_runtime::service::Started {
    tracing::info!(
        frequency = ?config.frequency,
        success_threshold = ?config.options.thresholds.success,
        failure_threshold = ?config.options.thresholds.failure,
        monitor_period = ?config.options.monitor_period,
        monitor_grace = ?config.options.grace.monitor,
        startup_grace = ?config.options.grace.startup,
        failover_eviction_timeout = ?config.options.failover_eviction_timeout,
        no_execute_taints = ?config.options.no_execute,
        probe_timeout = ?config.probe_timeout,
        "cluster-health configured"
    );
    let started = start(
        parts.store.clone(),
        config,
        parts.readiness.clone(),
        parts.shutdown.clone(),
        parts.clock.clone(),
    );
    let service = started.service.clone();
    let task = started.task;
    flotilla_runtime::service::Started::new(
        move |r| r.add_service(grpc::server(service)),
        async move {
            task.await
                .map_err(|e| anyhow::anyhow!("controller task: {e}"))??;
            Ok(())
        },
    )
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use flotilla_runtime::testing::{assert_help_names, rejected_flags};

    use super::*;

    #[test]
    fn flags_default_to_karmadas_and_compress() {
        let c = Args::try_parse_from(["cluster-health"])
            .unwrap()
            .validate()
            .unwrap();
        assert_eq!(c.frequency, Duration::from_secs(10));
        assert_eq!(c.probe_timeout, Duration::from_secs(5));
        assert_eq!(c.options, Options::default());
        assert_eq!(c.options.thresholds.failure, Duration::from_secs(30));
        assert_eq!(c.options.grace.monitor, Duration::from_secs(40));
        assert_eq!(c.options.grace.startup, Duration::from_secs(60));
        assert_eq!(
            c.options.failover_eviction_timeout,
            Duration::from_secs(300)
        );
        assert_eq!(c.options.no_execute, NoExecuteTaints::Auto);
        assert_eq!((c.concurrent_syncs, c.concurrent_probes), (5, 32));

        let c = Args::try_parse_from([
            "cluster-health",
            "--cluster-status-update-frequency",
            "200ms",
            "--cluster-failure-threshold",
            "1s",
            "--failover-eviction-timeout",
            "2s",
            "--no-execute-taints",
            "policy",
        ])
        .unwrap()
        .validate()
        .unwrap();
        assert_eq!(c.frequency, Duration::from_millis(200));
        assert_eq!(c.options.thresholds.failure, Duration::from_secs(1));
        assert_eq!(c.options.no_execute, NoExecuteTaints::Policy);

        let args = Args::try_parse_from([
            "cluster-health",
            "--probe-timeout",
            "0s",
            "--concurrent-probes",
            "0",
        ])
        .unwrap();
        assert_eq!(
            rejected_flags(args.validate()),
            vec!["probe-timeout", "concurrent-probes"]
        );

        assert_help_names::<Args>(&[
            "--cluster-status-update-frequency",
            "--cluster-success-threshold",
            "--cluster-failure-threshold",
            "--cluster-monitor-period",
            "--cluster-monitor-grace-period",
            "--cluster-startup-grace-period",
            "--failover-eviction-timeout",
            "--no-execute-taints",
            "--probe-timeout",
        ]);
    }
}
