//! The work-executor service: renders one Work per target cluster of a binding, removes
//! orphan Works, applies Works on Push members, takes status reports from Pull agents,
//! collects member status and aggregates it into the binding (docs/rules.md, WE-1..WE-9).
//!
//! ```text
//!                 etcd / MemStore
//!   bindings/ works/ workloads/ clusters/ ──watch──► reflector caches
//!        │            │                                   │
//!        ▼            ▼                                   ▼
//!   binding controller (queue: binding key)        execution controller (queue: Work key)
//!     plan::decide → mark orphans deleting,          Push, cluster Ready: server-side apply
//!     wait for Directly, create/update Works         / DELETE on the member's API, then
//!     plan::aggregate → status.aggregatedStatus      Work status / Work removal
//!     + FullyApplied (CAS)                           (finalizer: WE-6.2..6.4)
//!        │                                                │
//!        └── BatchWriter<Work | Binding>: update_many ────┘ ← status collection: one
//!            (leader-fenced writes)                          labelled list per kind per
//!                                                            Ready Push cluster per period
//!   gRPC flotilla.v1.WorkExecutor: GetWorkStatus, ReportWorkStatus (Pull agents), Plan
//! ```
//!
//! Controllers and status collection run only while this replica holds
//! `leases/work-executor`; their writes are fenced on that leadership (I8).

#![deny(missing_docs)]

pub mod controller;
pub mod execution;
pub mod grpc;
pub mod member;
pub mod plan;
pub mod render;
pub mod status;

use flotilla_runtime::service::{Parts, Started};
use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use clap::Parser;
use flotilla_core::overrides::{OverridePolicy, policy_match};
use flotilla_proto::Resource;
use flotilla_proto::v1;
use flotilla_proto::v1::work_executor_server::WorkExecutorServer;
use flotilla_runtime::queue::{QueueConfig, by_key};
use flotilla_runtime::reflector::{Writer, reflect};
use flotilla_runtime::watcher::{Event, WatcherConfig, shared_watcher};
use flotilla_runtime::{
    BatchConfig, BatchWriter, CacheBarrier, ChangeFilter, CommonArgs, Controller, Digest, Gate,
    Readiness, Replica, Sharding, Shutdown, WorkQueue,
};
use flotilla_store::typed::{Stored, Typed, decode, workload_key};
use flotilla_store::{ObjectKey, StoreRef};
use futures::Stream;

use crate::controller::{
    Context, INDEX_BINDING, INDEX_CLUSTER, INDEX_NAMESPACE, INDEX_WORKLOAD, binding_of_work,
};
use crate::grpc::WorkExecutorApi;
use crate::member::Members;
use crate::render::{
    cluster_endpoint, cluster_is_pull, cluster_ready, is_deleting, work_binding_ref, work_cluster,
};

/// The gRPC service name, for health.
pub const SERVICE_NAME: &str = "flotilla.v1.WorkExecutor";
/// The leader-election prefix.
pub const LEASE_PREFIX: &str = "leases/work-executor";

/// `flotilla-work-executor`: Works from bindings, applied on members, status aggregated.
#[derive(Debug, Parser)]
#[command(name = "flotilla-work-executor", version, about, long_about = None)]
pub struct Args {
    /// Flags every service shares.
    #[command(flatten)]
    pub common: CommonArgs,

    /// How often the status of every Work on a Ready Push cluster is collected (one labelled list per kind
    /// per cluster). Default 10s, Karmada's `--cluster-status-update-frequency`.
    #[arg(long, env = "FLOTILLA_STATUS_SYNC_PERIOD", default_value = "10s", value_parser = humantime::parse_duration)]
    pub status_sync_period: Duration,

    /// Deadline of one call to a member (apply, delete, status). An unreachable member never
    /// answers; this bounds how long a worker waits for it. Default 5s.
    #[arg(long, env = "FLOTILLA_MEMBER_TIMEOUT", default_value = "5s", value_parser = humantime::parse_duration)]
    pub member_timeout: Duration,

    /// Most calls in flight at once to one member cluster; each cluster has its own bound, so
    /// a member that hangs cannot hold the permits of the healthy ones. Also how many
    /// clusters a status collection reads at once. Default 64 (A12: no fixed QPS limit, only a
    /// bound on concurrency).
    #[arg(long, env = "FLOTILLA_MEMBER_CONCURRENCY", default_value_t = 64)]
    pub member_concurrency: usize,

    /// Binding reconcile workers. Default 128 (Karmada's `--concurrent-resourcebinding-syncs`
    /// is 5; A12 wants many): a reconcile mostly waits for its batched writes, and the bench
    /// failover of 10,000 bindings queued reconciles for 6 s on average with 16.
    #[arg(long, env = "FLOTILLA_BINDING_WORKERS", default_value_t = 128)]
    pub binding_workers: usize,

    /// Work execution workers (each waits on one member call at a time). Default 64, as many
    /// as `--member-concurrency` lets call at once (Karmada's `--concurrent-work-syncs` is 5;
    /// A12 wants many).
    #[arg(long, env = "FLOTILLA_WORK_WORKERS", default_value_t = 64)]
    pub work_workers: usize,

    /// How soon a Work whose cluster is not Ready is looked at again (WE-6.3, WE-6.5); a
    /// cluster turning Ready queues its Works at once anyway. Default 10s.
    #[arg(long, env = "FLOTILLA_NOT_READY_RECHECK", default_value = "10s", value_parser = humantime::parse_duration)]
    pub not_ready_recheck: Duration,

    /// Make before break (WE-10): how long a cluster whose replicas a new placement lowers
    /// keeps the replicas it runs while the clusters that gain them are not Ready yet. After
    /// it the move proceeds anyway. `0s` turns holding off (Karmada's behaviour: the new
    /// split is written at once). Default 10m, as graceful eviction's timeout.
    #[arg(long, env = "FLOTILLA_REPLICA_MOVE_TIMEOUT", default_value = "10m", value_parser = humantime::parse_duration)]
    pub replica_move_timeout: Duration,

    /// Split the bindings and their Works into this many shards held by the live replicas
    /// through etcd leases, so that every replica renders, applies and collects status
    /// (docs/design.md §10). A binding and all its Works are in one shard. Every replica
    /// must run with the same number. 0 (the default): one elected replica does everything.
    #[arg(long, env = "FLOTILLA_SHARDS", default_value_t = 0)]
    pub shards: u32,
}

/// The most shards the work executor may be split into.
pub const MAX_SHARDS: u32 = 1024;

/// The service's settings (the flags minus the common ones).
#[derive(Clone, Debug)]
pub struct Config {
    /// `--status-sync-period`.
    pub status_sync_period: Duration,
    /// `--member-timeout`.
    pub member_timeout: Duration,
    /// `--member-concurrency`.
    pub member_concurrency: usize,
    /// `--binding-workers`.
    pub binding_workers: usize,
    /// `--work-workers`.
    pub work_workers: usize,
    /// `--not-ready-recheck`.
    pub not_ready_recheck: Duration,
    /// `--replica-move-timeout` (WE-10.4; zero: no hold).
    pub replica_move_timeout: Duration,
    /// Leader-election identity (`--identity`).
    pub identity: String,
    /// Leader-election lease TTL (`--lease-ttl`).
    pub lease_ttl: Duration,
    /// gRPC request timeout (`--grpc-timeout`).
    pub grpc_timeout: Duration,
    /// TLS for `https://` member endpoints (`--tls-ca`, `--tls-cert`, `--tls-key`).
    pub security: flotilla_runtime::SecurityArgs,
    /// `--shards` (0: leader election).
    pub shards: u32,
}

impl Default for Config {
    fn default() -> Self {
        Self {
            status_sync_period: Duration::from_secs(10),
            member_timeout: Duration::from_secs(5),
            member_concurrency: 64,
            binding_workers: 128,
            work_workers: 64,
            not_ready_recheck: Duration::from_secs(10),
            replica_move_timeout: Duration::from_secs(600),
            identity: "work-executor".into(),
            lease_ttl: Duration::from_secs(15),
            grpc_timeout: Duration::from_secs(30),
            security: flotilla_runtime::SecurityArgs::default(),
            shards: 0,
        }
    }
}

/// A flag value that makes no sense.
#[derive(Debug, thiserror::Error)]
#[error("--{flag}: {message}")]
pub struct FlagError {
    /// The flag.
    pub flag: &'static str,
    /// Why.
    pub message: String,
}

impl FlagError {
    /// `--flag` is wrong: `message`.
    pub fn new(flag: &'static str, message: impl Into<String>) -> Self {
        Self {
            flag,
            message: message.into(),
        }
    }
}

// === impl Args ===

impl Args {
    /// Checks the service's flags and returns its [`Config`].
    pub fn validate(&self) -> Result<Config, Vec<FlagError>> {
        let mut errors = Vec::new();
        let mut check = |flag: &'static str, ok: bool, message: &str| {
            if !ok {
                errors.push(FlagError::new(flag, message));
            }
        };
        for (flag, d) in [
            ("status-sync-period", self.status_sync_period),
            ("member-timeout", self.member_timeout),
            ("not-ready-recheck", self.not_ready_recheck),
        ] {
            check(flag, !d.is_zero(), "must be positive");
        }
        for (flag, n) in [
            ("member-concurrency", self.member_concurrency),
            ("binding-workers", self.binding_workers),
            ("work-workers", self.work_workers),
        ] {
            check(flag, n > 0, "must be at least 1");
        }
        check(
            "shards",
            self.shards <= MAX_SHARDS,
            &format!("must be at most {MAX_SHARDS}"),
        );
        if !errors.is_empty() {
            return Err(errors);
        }
        Ok(Config {
            status_sync_period: self.status_sync_period,
            member_timeout: self.member_timeout,
            member_concurrency: self.member_concurrency,
            binding_workers: self.binding_workers,
            work_workers: self.work_workers,
            not_ready_recheck: self.not_ready_recheck,
            replica_move_timeout: self.replica_move_timeout,
            identity: self.common.identity(),
            lease_ttl: self.common.lease_ttl,
            grpc_timeout: self.common.grpc_timeout,
            security: self.common.security.clone(),
            shards: self.shards,
        })
    }

    /// Runs the service until SIGTERM/SIGINT: store, caches, controllers, gRPC and admin.
    pub async fn run(self) -> anyhow::Result<()> {
        flotilla_runtime::service::run::<Executor>(self).await
    }
}

/// A started work executor: its caches, controllers and status collection run in background
/// tasks until the shutdown fires.
#[derive(Debug)]
pub struct WorkExecutor {
    ctx: Arc<Context>,
    api: WorkExecutorApi,
    gate: Gate,
}

type Feed<K> = std::pin::Pin<Box<dyn Stream<Item = Event<K>> + Send>>;

fn watch_kind<K: Stored + Send + Sync + 'static>(
    store: &StoreRef,
    name: &str,
    writer: Writer<K>,
) -> Feed<K> {
    let events = shared_watcher(
        store.clone(),
        K::PREFIX,
        WatcherConfig::for_prefix(K::PREFIX).named(format!("work_executor_{name}")),
        decode::<K>,
    );
    Box::pin(reflect(writer, events))
}

/// `controller`, starting no worker before every cache holds a full list: a partial Works
/// cache would hide orphans and re-create existing Works.
fn ready_after_caches<E: std::fmt::Display + Send + 'static>(
    controller: Controller<ObjectKey, Context, E>,
    ctx: &Context,
) -> Controller<ObjectKey, Context, E> {
    controller
        .ready_after("bindings", &ctx.bindings)
        .ready_after("works", &ctx.works)
        .ready_after("workloads", &ctx.workloads)
        .ready_after("clusters", &ctx.clusters)
        .ready_after("overridepolicies", &ctx.overrides)
        .ready_after("clusteroverridepolicies", &ctx.cluster_overrides)
}

/// OV-5: a change of an override policy queues the bindings of every template it selected
/// before or selects now (so that deleting a policy or narrowing its selectors re-renders
/// the Works it had changed). Templates are read from the workloads cache.
fn override_trigger<K>(
    queue: WorkQueue<ObjectKey>,
    workloads: flotilla_runtime::Cache<v1::Workload>,
    bindings: flotilla_runtime::Cache<v1::ResourceBinding>,
) -> impl FnMut(&Event<K>) + Send + 'static
where
    K: Clone
        + TryInto<OverridePolicy, Error = flotilla_proto::convert::ConvertError>
        + Send
        + Sync
        + 'static,
{
    let mut last: HashMap<String, OverridePolicy> = HashMap::new();
    move |ev: &Event<K>| {
        let (key, new) = match ev {
            Event::Apply(o) | Event::InitApply(o) => {
                (o.key.clone(), o.value.as_ref().clone().try_into().ok())
            }
            Event::Delete { key, .. } => (key.clone(), None),
            Event::Init { .. } | Event::InitDone { .. } | Event::Progress { .. } => return,
        };
        let old = match &new {
            Some(p) => last.insert(key, p.clone()),
            None => last.remove(&key),
        };
        let policies: Vec<&OverridePolicy> = old.iter().chain(new.iter()).collect();
        if policies.is_empty() {
            return;
        }
        for w in workloads.list() {
            let template = crate::render::template_of(&w);
            let selected = policies.iter().any(|p| {
                (p.meta.namespace.is_empty() || p.meta.namespace == template.namespace)
                    && policy_match(&p.spec, &template).is_some()
            });
            if selected {
                for b in bindings.index_keys(INDEX_WORKLOAD, &w.key()) {
                    queue.add(b.into());
                }
            }
        }
    }
}

/// What of a cluster matters to its Works' execution.
#[derive(Clone, PartialEq, Eq)]
struct ClusterState {
    ready: bool,
    deleting: bool,
    pull: bool,
    endpoint: String,
    /// How it is reached: the Secret it names and whether TLS is verified.
    access: (Option<String>, bool),
}

/// What the execution controller reads of a Work (`execution::step`): its generation (the
/// spec), deletion and finalizers, and whether and for which generation it was applied. A
/// status write that only brings the member's status (status collection, every period for
/// every Work that changed on its member) leaves it as it was.
fn execution_state(w: &v1::Work) -> u64 {
    let meta = w.metadata.as_ref();
    let status = w.status.as_ref();
    Digest::new()
        .add(&w.generation())
        .add(&meta.is_some_and(|m| m.deletion_timestamp.is_some()))
        .add(&meta.map(|m| m.finalizers.as_slice()))
        .add(&status.map(|s| s.observed_generation))
        .add(&status.and_then(render::applied_state))
        .finish()
}

/// The [`ClusterState`] of a cluster.
fn cluster_state(c: &v1::Cluster) -> ClusterState {
    ClusterState {
        ready: cluster_ready(c),
        deleting: is_deleting(c.metadata.as_ref()),
        pull: cluster_is_pull(c),
        endpoint: cluster_endpoint(c).to_owned(),
        access: (
            flotilla_member::secret_key_of(c),
            c.spec
                .as_ref()
                .is_some_and(|s| s.insecure_skip_tls_verification),
        ),
    }
}

// === impl WorkExecutor ===

impl WorkExecutor {
    /// Starts watching, campaigning for `leases/work-executor`, and (while leading)
    /// reconciling. Caches are registered with `readiness`.
    pub fn start(
        store: StoreRef,
        config: Config,
        readiness: &Readiness,
        shutdown: &Shutdown,
        clock: flotilla_runtime::Clock,
    ) -> Self {
        let bindings_w = Writer::<v1::ResourceBinding>::new().with_index(INDEX_WORKLOAD, |b| {
            b.spec
                .as_ref()
                .and_then(|s| s.resource.as_ref())
                .map(|r| vec![workload_key(&r.namespace, &r.api_version, &r.kind, &r.name)])
                .unwrap_or_default()
        });
        let works_w = Writer::<v1::Work>::new()
            .with_index(INDEX_BINDING, |w| work_binding_ref(w).into_iter().collect())
            .with_index(INDEX_CLUSTER, |w| vec![work_cluster(w).to_owned()]);
        let workloads_w = Writer::<v1::Workload>::new();
        let clusters_w = Writer::<v1::Cluster>::new();
        let secrets_w = Writer::<v1::Secret>::new();
        let overrides_w = Writer::<v1::OverridePolicy>::new()
            .with_index(INDEX_NAMESPACE, |p| vec![p.namespace().to_owned()]);
        let cluster_overrides_w = Writer::<v1::ClusterOverridePolicy>::new();
        // One elected replica, or (--shards) each replica on the bindings and Works of its
        // shards: a binding's shard is its Works' (SH-1 over `<namespace>/<Work name>`).
        let shards = config.shards;
        let sharding = (shards > 0).then(|| {
            let bindings = bindings_w.cache();
            let works = works_w.cache();
            let key_shard: flotilla_runtime::ShardKeyFn = Arc::new(move |key: &str| {
                if key.starts_with(v1::Work::PREFIX) {
                    return work_shard(key, shards);
                }
                key.starts_with(v1::ResourceBinding::PREFIX)
                    .then(|| binding_shard(&bindings, &works, key, shards))
                    .flatten()
            });
            Sharding { shards, key_shard }
        });
        let replica = Replica::spawn(
            store.clone(),
            "work-executor",
            LEASE_PREFIX,
            &config.identity,
            config.lease_ttl,
            sharding,
            shutdown,
        );
        let gate = replica.gate();
        // sharded: each write may carry its shard's fence and stamp (docs/design.md §10)
        let typed = if shards > 0 {
            Typed::with_per_write_overhead(replica.fenced.clone(), 1)
        } else {
            Typed::new(replica.fenced.clone())
        };
        let recorder = replica.recorder.clone();
        {
            let shutdown = shutdown.clone();
            tokio::spawn(async move {
                shutdown.triggered().await;
                replica.resign().await;
            });
        }
        let ctx = Arc::new(Context {
            bindings: bindings_w.cache(),
            works: works_w.cache(),
            workloads: workloads_w.cache(),
            clusters: clusters_w.cache(),
            secrets: secrets_w.cache(),
            overrides: overrides_w.cache(),
            cluster_overrides: cluster_overrides_w.cache(),
            // A transaction may write a key only once: a second write of a Work (or binding)
            // already in the batch waits for the next one.
            work_writer: BatchWriter::spawn(
                typed.clone(),
                BatchConfig::default().one_write_per_key(true),
            ),
            binding_writer: BatchWriter::spawn(
                typed.clone(),
                BatchConfig::default().one_write_per_key(true),
            ),
            template_writer: BatchWriter::spawn(
                typed.clone(),
                BatchConfig::default().one_write_per_key(true),
            ),
            typed,
            members: Members::new(config.member_timeout, config.member_concurrency),
            recorder,
            held: match &gate {
                Gate::Shards(held) => Some(held.clone()),
                _ => None,
            },
            config: config.clone(),
            clock: clock.clone(),
            status_seen: Default::default(),
            rendered: Default::default(),
        });
        readiness.add_cache("bindings", &ctx.bindings);
        readiness.add_cache("works", &ctx.works);
        readiness.add_cache("workloads", &ctx.workloads);
        readiness.add_cache("clusters", &ctx.clusters);
        readiness.add_cache("secrets", &ctx.secrets);
        readiness.add_cache("overridepolicies", &ctx.overrides);
        readiness.add_cache("clusteroverridepolicies", &ctx.cluster_overrides);

        let binding_queue: WorkQueue<ObjectKey> =
            WorkQueue::new(QueueConfig::new("work_executor_bindings"));
        let work_queue: WorkQueue<ObjectKey> =
            WorkQueue::new(QueueConfig::new("work_executor_works"));
        // A new leader writes Works only from caches at least as new as the store it won.
        let barrier = CacheBarrier::new(store.clone())
            .cache(v1::ResourceBinding::PREFIX, &ctx.bindings)
            .cache(v1::Work::PREFIX, &ctx.works)
            .cache(v1::Workload::PREFIX, &ctx.workloads)
            .cache(v1::Cluster::PREFIX, &ctx.clusters)
            .cache(v1::OverridePolicy::PREFIX, &ctx.overrides)
            .cache(v1::ClusterOverridePolicy::PREFIX, &ctx.cluster_overrides);

        // works → their binding (remembered for deletions) and themselves, when what the
        // execution controller reads changed (a status write by status collection does not
        // wake it: `execution_state`)
        let works_trigger = {
            let bq = binding_queue.clone();
            let wq = work_queue.clone();
            let mut owners: HashMap<String, String> = HashMap::new();
            let mut execution = ChangeFilter::new("work_executor_works", execution_state);
            move |ev: &Event<v1::Work>| match ev {
                Event::Apply(o) | Event::InitApply(o) => {
                    if let Some(b) = binding_of_work(&o.value) {
                        owners.insert(o.key.clone(), b.clone());
                        bq.add(b.into());
                    }
                    // a Work not applied (yet, or its apply failed) is queued on every
                    // write, as before the filter: its own failure write retries it at once
                    let applied =
                        o.value.status.as_ref().and_then(render::applied_state) == Some(true);
                    if execution.observe(ev).is_change() || !applied {
                        wq.add(o.key.as_str().into());
                    }
                }
                Event::Delete { key, .. } => {
                    execution.observe(ev);
                    if let Some(b) = owners.remove(key) {
                        bq.add(b.into());
                    }
                }
                Event::Init { .. } | Event::InitDone { .. } | Event::Progress { .. } => {}
            }
        };
        // workloads → the bindings of that template
        let workloads_trigger = {
            let bindings = ctx.bindings.clone();
            move |ev: &Event<v1::Workload>| {
                ev.key()
                    .map(|key| bindings.index_keys(INDEX_WORKLOAD, key))
                    .unwrap_or_default()
                    .into_iter()
                    .map(ObjectKey::from)
                    .collect::<Vec<_>>()
            }
        };
        let overrides_trigger = override_trigger::<v1::OverridePolicy>(
            binding_queue.clone(),
            ctx.workloads.clone(),
            ctx.bindings.clone(),
        );
        let cluster_overrides_trigger = override_trigger::<v1::ClusterOverridePolicy>(
            binding_queue.clone(),
            ctx.workloads.clone(),
            ctx.bindings.clone(),
        );
        // clusters → their Works, when readiness, deletion, mode or endpoint changed
        let clusters_trigger = {
            let wq = work_queue.clone();
            let works = ctx.works.clone();
            let mut seen = ChangeFilter::new("work_executor_clusters", cluster_state);
            move |ev: &Event<v1::Cluster>| {
                let change = seen.observe(ev);
                if let Some(key) = change.key().filter(|_| change.is_change()) {
                    let name = key.strip_prefix(v1::Cluster::PREFIX).unwrap_or(key);
                    for work in works.index_keys(INDEX_CLUSTER, name) {
                        wq.add(work.into());
                    }
                }
            }
        };

        // a Secret's change → the Works of the clusters whose secretRef names it (a failed
        // apply is tried again with the new credentials)
        let secrets_trigger = {
            let wq = work_queue.clone();
            let works = ctx.works.clone();
            let clusters = ctx.clusters.clone();
            move |ev: &Event<v1::Secret>| {
                let Some(key) = ev.key() else { return };
                for cluster in clusters.list() {
                    if flotilla_member::secret_key_of(&cluster).as_deref() == Some(key) {
                        for work in works.index_keys(INDEX_CLUSTER, cluster.name()) {
                            wq.add(work.into());
                        }
                    }
                }
            }
        };

        let binding_controller = ready_after_caches(
            Controller::new(
                binding_queue,
                controller::reconcile_binding,
                controller::error_policy,
            ),
            &ctx,
        )
        .watches(watch_kind(&store, "bindings", bindings_w), by_key)
        .watches(
            watch_kind(&store, "workloads", workloads_w),
            workloads_trigger,
        )
        .watches_with(
            watch_kind(&store, "overridepolicies", overrides_w),
            overrides_trigger,
        )
        .watches_with(
            watch_kind(&store, "clusteroverridepolicies", cluster_overrides_w),
            cluster_overrides_trigger,
        )
        // one failover = one trace: while a binding has an eviction task, its reconciles
        // continue the span that last wrote its status (the scheduler's reschedule first)
        .trace_parent(controller::failover_trace)
        .workers(config.binding_workers)
        .gated(
            gate.clone(),
            barrier.clone(),
            {
                let (bindings, works) = (ctx.bindings.clone(), ctx.works.clone());
                move |key: &ObjectKey| {
                    binding_shard(&bindings, &works, key.as_str(), shards.max(1)).unwrap_or(0)
                }
            },
            {
                let (bindings, works) = (ctx.bindings.clone(), ctx.works.clone());
                move |shard| {
                    bindings
                        .keys()
                        .into_iter()
                        .filter(|k| {
                            binding_shard(&bindings, &works, k, shards.max(1)) == Some(shard)
                        })
                        .map(ObjectKey::from)
                        .collect()
                }
            },
        );
        let work_controller = ready_after_caches(
            Controller::new(
                work_queue,
                execution::reconcile_work,
                execution::error_policy,
            ),
            &ctx,
        )
        .watches_with(watch_kind(&store, "works", works_w), works_trigger)
        .watches_with(watch_kind(&store, "clusters", clusters_w), clusters_trigger)
        .watches_with(watch_kind(&store, "secrets", secrets_w), secrets_trigger)
        // the apply of a Work written during a failover continues the Work's trace
        .trace_parent(execution::work_trace)
        .workers(config.work_workers)
        .gated(
            gate.clone(),
            barrier,
            move |key: &ObjectKey| work_shard(key.as_str(), shards.max(1)).unwrap_or(0),
            {
                let works = ctx.works.clone();
                move |shard| {
                    works
                        .keys()
                        .into_iter()
                        .filter(|k| work_shard(k, shards.max(1)) == Some(shard))
                        .map(ObjectKey::from)
                        .collect()
                }
            },
        );
        {
            let ctx = ctx.clone();
            let shutdown = shutdown.clone();
            let gate = gate.clone();
            tokio::spawn(async move {
                tokio::join!(
                    binding_controller.run(ctx.clone(), shutdown.clone()),
                    work_controller.run(ctx.clone(), shutdown.clone()),
                    async {
                        // status collection, too, only on complete caches
                        tokio::select! {
                            () = shutdown.triggered() => {}
                            () = ctx.caches_ready() => {
                                status::run(ctx.clone(), gate, shutdown.clone()).await;
                            }
                        }
                    },
                );
            });
        }
        let api = WorkExecutorApi::new(Typed::new(store), ctx.config.replica_move_timeout, clock);
        Self { ctx, api, gate }
    }

    /// The gRPC service, ready to add to a router.
    pub fn server(&self) -> WorkExecutorServer<WorkExecutorApi> {
        flotilla_runtime::decode_limited!(WorkExecutorServer::new(self.api.clone()))
    }

    /// The shared controller context (caches, writers), e.g. for tests and dry runs.
    pub fn context(&self) -> &Arc<Context> {
        &self.ctx
    }

    /// What this replica's controllers follow: its leadership of `leases/work-executor`, or
    /// the shards it holds.
    pub fn gate(&self) -> &Gate {
        &self.gate
    }

    /// Whether this replica works now: it leads, or holds at least one shard.
    pub fn is_active(&self) -> bool {
        match &self.gate {
            Gate::Always => true,
            Gate::Leader(l) => l.borrow().is_some(),
            Gate::Shards(h) => !h.borrow().terms.is_empty(),
        }
    }
}

/// SH-1 for the work executor: a Work's shard, from its store key
/// (`works/<cluster>/<namespace>/<name>-<hash>`). The shard key is
/// `<namespace>/<template name>`: a Work's name is its template's name lower-cased, a dash
/// and a hash without dashes (WE-5), so every Work of a binding, on every cluster, has it;
/// and a template's name never changes (its kind's group may, which changes the hash).
pub fn work_shard(key: &str, shards: u32) -> Option<u32> {
    let rest = key.strip_prefix(v1::Work::PREFIX)?;
    let (_cluster, ns_name) = rest.split_once('/')?;
    let (namespace, name) = ns_name.split_once('/')?;
    let (template, _hash) = name.rsplit_once('-')?;
    Some(flotilla_core::shard::shard_of(
        &format!("{namespace}/{template}"),
        shards,
    ))
}

/// A binding's shard: its Works' ([`work_shard`]), from the cached binding's namespace and
/// template name, or from a Work still cached for it once the binding is gone. `None` when
/// neither is known.
pub fn binding_shard(
    bindings: &flotilla_runtime::Cache<v1::ResourceBinding>,
    works: &flotilla_runtime::Cache<v1::Work>,
    key: &str,
    shards: u32,
) -> Option<u32> {
    if let Some(b) = bindings.get(key) {
        let name = b
            .spec
            .as_ref()
            .and_then(|s| s.resource.as_ref())
            .map_or("", |r| r.name.as_str());
        let template = name.replace(':', ".").to_lowercase();
        return Some(flotilla_core::shard::shard_of(
            &format!("{}/{template}", b.namespace()),
            shards,
        ));
    }
    works
        .index_keys(INDEX_BINDING, key)
        .first()
        .and_then(|w| work_shard(w, shards))
}

flotilla_runtime::service! {
    /// The work-executor as a service (`flotilla_runtime::service`).
    pub struct Executor {
        name: "work-executor",
        grpc: SERVICE_NAME,
        flags: Args => Config,
        start: start_service,
    }
}

/// Starts Executor: what `flotilla-work-executor` runs on the [`Parts`] of its runtime.
fn start_service(parts: &Parts, config: Config) -> Started {
    let executor = WorkExecutor::start(
        parts.store.clone(),
        config,
        &parts.readiness,
        &parts.shutdown,
        parts.clock.clone(),
    );
    let server = executor.server();
    let shutdown = parts.shutdown.clone();
    Started::new(move |r| r.add_service(server), async move {
        // `executor` owns the controllers' context: keep it until the shutdown.
        shutdown.triggered().await;
        drop(executor);
        Ok(())
    })
}
