//! The scheduling controller: caches of bindings and clusters, the SC-2 triggers, and the
//! reconcile of one binding (SC-3, SC-4) with a compare-and-swap write.
//!
//! ```text
//!   watch bindings/ ──reflect──► Cache<v1::ResourceBinding> ──BindingTrigger (SC-1, SC-2.1/2.2)─┐
//!   watch clusters/ ──reflect──► Cache<Cluster> ──ClusterTrigger (SC-2.3/2.4) → affected keys ──┤
//!                                    │ snapshot (rebuilt when the cache revision moves)          ▼
//!                                    └──────────────────────────────► WorkQueue<binding key>
//!   worker × N (only while leading `leases/scheduler`):                                          │
//!     reconcile(key): cached wire binding → core → decide() → plan_write() ──► BatchWriter ◄──────┘
//!        Conflict → re-read from the store, re-decide at once (bounded)   (update_many, fenced)
//!        Ok → log once at info + Event (Scheduled / ScheduleFailed)
//!        Action: await change | requeue with back-off (SC-4.2 Unschedulable, SC-4.4)
//! ```

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use flotilla_core::Time;
use flotilla_core::scheduler::trigger::{
    binding_affected_by_cluster_change, cluster_change_relevant, cluster_status_may_fit_more,
};
use flotilla_core::scheduler::{ScheduleOptions, ScheduleTrigger};
use flotilla_core::types::{Cluster, DEFAULT_SCHEDULER_NAME, Placement, ResourceBinding};
use flotilla_proto::Resource;
use flotilla_proto::v1;
use flotilla_runtime::CacheBarrier;
use flotilla_runtime::backoff::{Backoff, KeyedBackoff};
use flotilla_runtime::cas::{Lost, Races};
use flotilla_runtime::events::{EventType, Recorder, Regarding};
use flotilla_runtime::queue::QueueConfig;
use flotilla_runtime::watcher::{Event, WatcherConfig};
use flotilla_runtime::{
    Action, BatchConfig, BatchWriter, Cache, Change, ChangeFilter, Controller, Gate, Held,
    Shutdown, WorkQueue, Writer, reflect_watch,
};
use flotilla_store::ObjectKey;
use flotilla_store::typed::{Stored, Typed, decode};
use flotilla_store::{KeyValue, Revision, StoreRef};
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tracing::Instrument;

use crate::decision::{
    Decision, EVENT_SCHEDULE_FAILED, EVENT_SCHEDULED, decide, format_wire_targets, plan_write,
    trigger_name, trigger_reason,
};
use crate::error::Error;

/// The controller's tunables (see the flags in [`crate::Args`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ControllerConfig {
    /// SC-1: the bindings this scheduler handles (`spec.schedulerName`, empty = default).
    pub scheduler_name: String,
    /// Switches of the scheduling rules (SC-14.4).
    pub options: ScheduleOptions,
    /// Reconcile workers.
    pub workers: usize,
    /// Binding writes per etcd transaction.
    pub write_batch_size: usize,
    /// Write transactions in flight at once.
    pub write_concurrency: usize,
    /// First retry delay of an unschedulable binding (SC-4.2, SC-4.4).
    pub unschedulable_initial_backoff: Duration,
    /// Largest retry delay of an unschedulable binding.
    pub unschedulable_max_backoff: Duration,
    /// A11: at least this long between two failbacks (`--failback-rate`); `None` = no limit.
    pub failback_interval: Option<Duration>,
}

impl Default for ControllerConfig {
    fn default() -> Self {
        Self {
            scheduler_name: DEFAULT_SCHEDULER_NAME.to_owned(),
            // the service's defaults (SC-4.6 on), as `Args` has them
            options: ScheduleOptions {
                place_what_fits: true,
                ..ScheduleOptions::default()
            },
            workers: 64,
            write_batch_size: 64,
            write_concurrency: 4,
            unschedulable_initial_backoff: Duration::from_secs(1),
            unschedulable_max_backoff: Duration::from_secs(10),
            failback_interval: None,
        }
    }
}

/// SC-1: whether `scheduler_name` handles this wire binding (empty name = default).
pub fn responsible(binding: &v1::ResourceBinding, scheduler_name: &str) -> bool {
    let name = binding
        .spec
        .as_ref()
        .map_or("", |s| s.scheduler_name.as_str());
    let name = if name.is_empty() {
        DEFAULT_SCHEDULER_NAME
    } else {
        name
    };
    name == scheduler_name
}

/// Decodes a stored cluster straight into the domain type the rules read.
fn decode_cluster(kv: &KeyValue) -> Result<Cluster, String> {
    let wire: v1::Cluster = decode(kv).map_err(|e| e.to_string())?;
    Cluster::try_from(wire).map_err(|e| format!("{}: {e}", kv.key))
}

/// The cluster snapshot handed to the rules, rebuilt only when the cluster cache moved.
struct Snapshot {
    revision: Revision,
    clusters: Arc<Vec<Cluster>>,
}

/// What every reconcile shares.
#[derive(derive_more::Debug)]
pub struct Context {
    config: ControllerConfig,
    bindings: Cache<v1::ResourceBinding>,
    clusters: Cache<Cluster>,
    #[debug(skip)]
    snapshot: Mutex<Snapshot>,
    #[debug(skip)]
    reader: Typed,
    #[debug(skip)]
    writer: BatchWriter<v1::ResourceBinding>,
    #[debug(skip)]
    recorder: Recorder,
    /// Consecutive back-off retries per binding (SC-4.2 / SC-4.4), reset by any other outcome.
    #[debug(skip)]
    retries: Mutex<KeyedBackoff<String>>,
    /// A11: when the next failback may be written (`--failback-rate`).
    #[debug(skip)]
    next_failback: Mutex<std::time::Instant>,
    /// The wall clock decisions read.
    #[debug(skip)]
    clock: flotilla_runtime::Clock,
    /// The shards this replica holds, when sharded: its share of `--failback-rate`.
    #[debug(skip)]
    held: Option<watch::Receiver<Held>>,
    /// SC-2.6 / SC-4.6: bindings a cluster's new room queued; their next run schedules even
    /// though SC-3 counts a short result as in place.
    #[debug(skip)]
    room: Arc<Mutex<HashSet<String>>>,
}

// === impl Context ===

impl Context {
    /// The cached bindings (wire objects, as stored).
    pub fn bindings(&self) -> &Cache<v1::ResourceBinding> {
        &self.bindings
    }

    /// The cached clusters (domain objects).
    pub fn clusters(&self) -> &Cache<Cluster> {
        &self.clusters
    }

    /// The cluster snapshot the rules see: every cached cluster, rebuilt only when the cache's
    /// revision moved since the last call.
    pub fn cluster_snapshot(&self) -> Arc<Vec<Cluster>> {
        let mut snap = self.snapshot.lock().unwrap_or_else(PoisonError::into_inner);
        // Read the revision before listing: the list is at least that new, and a later event
        // moves the revision past the label, so the next call rebuilds.
        let revision = self.clusters.revision();
        if snap.revision != revision {
            let clusters: Vec<Cluster> = self
                .clusters
                .list()
                .into_iter()
                .map(|c| (*c).clone())
                .collect();
            *snap = Snapshot {
                revision,
                clusters: Arc::new(clusters),
            };
        }
        snap.clusters.clone()
    }

    /// The next back-off of `key` (SC-4.2/SC-4.4): initial · 2^n, capped.
    fn next_backoff(&self, key: &str) -> Duration {
        self.retries
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .next_delay(key.to_owned())
    }

    fn forget(&self, key: &str) {
        self.retries
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .forget(&key.to_owned());
    }

    fn action_for(&self, key: &str, decision: &Decision, now: Time) -> Action {
        if decision.retry_with_backoff() {
            return Action::requeue(self.next_backoff(key));
        }
        self.forget(key);
        match decision {
            // A11: look again when the first pending stabilisation window ends
            Decision::Unchanged {
                failback_pending, ..
            } if !failback_pending.is_empty() => {
                let first = failback_pending
                    .iter()
                    .map(|(_, at)| *at)
                    .min()
                    .unwrap_or(now);
                Action::requeue(first.saturating_since(now) + Duration::from_millis(100))
            }
            _ => Action::await_change(),
        }
    }

    /// A11: whether a failback may be written now (`--failback-rate`); otherwise how long
    /// until one may.
    fn take_failback_slot(&self) -> Result<(), Duration> {
        let Some(mut interval) = self.config.failback_interval else {
            return Ok(());
        };
        // Sharded, each replica writes its share of the fleet's rate (SH-3 spreads the
        // bindings evenly over the shards), so that the replicas together keep to it.
        if let Some(held) = &self.held {
            let share = held.borrow().share();
            if share > 0.0 {
                interval = Duration::try_from_secs_f64(interval.as_secs_f64() / share)
                    .unwrap_or(Duration::MAX);
            }
        }
        let mut next = self
            .next_failback
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        let now = std::time::Instant::now();
        if *next > now {
            return Err(*next - now);
        }
        // (a rate so small that the interval overflows the clock: one failback a day)
        *next = now
            .checked_add(interval)
            .unwrap_or_else(|| now + Duration::from_secs(86_400));
        Ok(())
    }
}

/// The running controller: its caches and context (for gRPC handlers and tests) and its task.
#[derive(Debug)]
pub struct Running {
    /// What every reconcile shares (caches, writer, recorder).
    pub ctx: Arc<Context>,
    /// The controller task (triggers + workers); ends on shutdown.
    pub task: JoinHandle<()>,
}

/// Starts the scheduling controller: watches on `store` (reads), writes through `writes`
/// (normally the leader-fenced store), workers gated by `leader` (`None`: always run).
pub fn spawn(
    store: StoreRef,
    writes: StoreRef,
    config: ControllerConfig,
    gate: Gate,
    recorder: Recorder,
    shutdown: Shutdown,
    clock: flotilla_runtime::Clock,
) -> Running {
    let binding_writer: Writer<v1::ResourceBinding> = Writer::new();
    let cluster_writer: Writer<Cluster> = Writer::new();
    let bindings = binding_writer.cache();
    let clusters = cluster_writer.cache();
    let room: Arc<Mutex<HashSet<String>>> = Arc::default();
    let (barrier_store, barrier_bindings, barrier_clusters) =
        (store.clone(), bindings.clone(), clusters.clone());

    let binding_events = reflect_watch(
        binding_writer,
        store.clone(),
        v1::ResourceBinding::PREFIX,
        // Re-list rather than resume after a broken watch (WatcherConfig::for_prefix).
        WatcherConfig::for_prefix(v1::ResourceBinding::PREFIX).named("scheduler_bindings"),
        decode::<v1::ResourceBinding>,
    );
    let cluster_events = reflect_watch(
        cluster_writer,
        store.clone(),
        v1::Cluster::PREFIX,
        WatcherConfig::for_prefix(v1::Cluster::PREFIX).named("scheduler_clusters"),
        decode_cluster,
    );

    let ctx = Arc::new(Context {
        // Group commit (docs/design.md §7): ≤ 64 writes per transaction, several in flight.
        writer: BatchWriter::spawn(
            // sharded: each write may carry its shard's fence and stamp (docs/design.md §10)
            match &gate {
                Gate::Shards(_) => Typed::with_per_write_overhead(writes, 1),
                _ => Typed::new(writes),
            },
            BatchConfig::default()
                .max_batch(
                    config
                        .write_batch_size
                        .clamp(1, flotilla_store::MAX_TXN_OPS / 2),
                )
                .concurrency(config.write_concurrency)
                .metrics("scheduler"),
        ),
        reader: Typed::new(store),
        snapshot: Mutex::new(Snapshot {
            revision: -1,
            clusters: Arc::new(Vec::new()),
        }),
        bindings: bindings.clone(),
        clusters,
        recorder,
        next_failback: Mutex::new(std::time::Instant::now()),
        clock,
        room: room.clone(),
        held: match &gate {
            Gate::Shards(held) => Some(held.clone()),
            _ => None,
        },
        retries: Mutex::new(KeyedBackoff::new(Backoff::new(
            config.unschedulable_initial_backoff,
            config.unschedulable_max_backoff,
        ))),
        config: config.clone(),
    });

    let binding_trigger = BindingTrigger::new(config.scheduler_name.clone());
    let mut cluster_trigger = ClusterTrigger::new(config.scheduler_name.clone(), bindings);
    cluster_trigger.room = room;
    let queue = WorkQueue::new(QueueConfig::new("scheduler"));
    let mut controller = Controller::new(
        queue,
        reconcile,
        |_key: &ObjectKey, e: &Error, _: &Context| error_policy(e),
    )
    .trace_parent(eviction_trace)
    .workers(config.workers)
    .watches(binding_events, move |ev| binding_trigger.map(ev))
    .watches(cluster_events, move |ev| cluster_trigger.map(ev));
    // A new leader (or a new holder of a shard) schedules only from caches at least as new
    // as the store it won.
    let shards = match &gate {
        Gate::Shards(held) => held.borrow().shards,
        _ => 1,
    };
    let shard_bindings = barrier_bindings.clone();
    controller = controller.gated(
        gate,
        CacheBarrier::new(barrier_store)
            .cache(v1::ResourceBinding::PREFIX, &barrier_bindings)
            .cache(v1::Cluster::PREFIX, &barrier_clusters),
        move |key: &ObjectKey| binding_shard(key.as_str(), shards),
        move |shard| {
            shard_bindings
                .keys()
                .into_iter()
                .filter(|k| binding_shard(k, shards) == shard)
                .map(ObjectKey::from)
                .collect()
        },
    );
    let task = tokio::spawn(
        controller
            .run(ctx.clone(), shutdown)
            .instrument(tracing::info_span!("scheduler")),
    );
    Running { ctx, task }
}

/// SH-1: a binding's shard, from its store key (`bindings/<ns>/<name>`, shard key
/// `<ns>/<name>`).
pub fn binding_shard(key: &str, shards: u32) -> u32 {
    flotilla_core::shard::shard_of(
        key.strip_prefix(v1::ResourceBinding::PREFIX).unwrap_or(key),
        shards,
    )
}

/// What follows a failed reconcile: a store error is retried with the queue's back-off
/// (starting at 100 ms here, doubling); a validation error cannot happen in the controller.
pub fn error_policy(error: &Error) -> Action {
    match error {
        Error::InvalidArgument(_) => Action::await_change(),
        _ => Action::requeue(Duration::from_millis(100)),
    }
}

/// Reconciles one binding: decide on the cached object, write the result with a
/// compare-and-swap; on a conflict re-read it from the store and re-decide at once
/// ([`flotilla_runtime::cas::Races`]; I5: a concurrent writer's change — e.g. an eviction task appended
/// by the taint manager — is never overwritten).
pub async fn reconcile(key: ObjectKey, ctx: Arc<Context>) -> Result<Action, Error> {
    // Never decide on a partial view: with the cluster cache not yet listed every target
    // would look missing (SC-3.6) and every result would be wiped by a FitError.
    ctx.clusters.wait_until_ready().await;
    ctx.bindings.wait_until_ready().await;
    let now = ctx.clock.now();
    let clusters = ctx.cluster_snapshot();
    let first = ctx.bindings.get(&key);
    let mut races = Races::new(&key);
    let mut current = first;
    loop {
        let Some(old) = current else {
            // Deleted: nothing to schedule.
            ctx.forget(&key);
            return Ok(Action::await_change());
        };
        if !responsible(&old, &ctx.config.scheduler_name) {
            ctx.forget(&key);
            return Ok(Action::await_change());
        }
        let binding = match ResourceBinding::try_from((*old).clone()) {
            Ok(b) => b,
            Err(e) => {
                // A binding the domain cannot represent: nothing to do until it changes.
                tracing::warn!(binding = %key, error = %e, "cannot read binding; skipped until it changes");
                ctx.forget(&key);
                return Ok(Action::await_change());
            }
        };
        let started = std::time::Instant::now();
        // SC-4.6: a short result runs again only when a cluster got more room (SC-2.6);
        // any other event would re-read summaries that may not count its newest pods yet
        let room = ctx
            .room
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(key.as_str());
        let force = room && binding.status.unschedulable_replicas > 0;
        let decision = decide(&binding, &clusters, ctx.config.options, force, now);
        record_decision_metrics(&decision, started.elapsed());
        if decision == Decision::MissingPlacement {
            if old.spec.as_ref().is_some_and(|s| !s.required_by.is_empty()) {
                // an attached binding (DEP-2): its clusters are its dependants'
                tracing::debug!(binding = %key, "attached binding: placed by the bindings that require it, not scheduled");
            } else {
                tracing::warn!(binding = %key, "SC-3.1: binding has no placement; nothing to schedule");
            }
        }
        if let Some(ScheduleTrigger::Failback { clusters: back }) = decision.trigger()
            && let Err(wait) = ctx.take_failback_slot()
        {
            tracing::debug!(binding = %key, clusters = ?back, wait_ms = wait.as_millis() as u64, "A11: failback waits for the failback rate");
            return Ok(Action::requeue(wait));
        }
        let Some(mut new) = plan_write(&old, &binding, &decision, now) else {
            return Ok(ctx.action_for(&key, &decision, now));
        };
        stamp_trace_context(&mut new);
        match ctx.writer.update(old.clone(), new).await {
            Ok(written) => {
                report(&ctx, &key, &old, &written, &decision);
                return Ok(ctx.action_for(&key, &decision, now));
            }
            Err(e) => {
                current = match races.after::<Error>(e)? {
                    Lost::Changed => {
                        metrics::counter!("flotilla_scheduler_write_conflicts_total").increment(1);
                        ctx.reader
                            .get::<v1::ResourceBinding>(&key)
                            .await?
                            .map(Arc::new)
                    }
                    Lost::Gone => None,
                }
            }
        }
    }
}

fn record_decision_metrics(decision: &Decision, elapsed: Duration) {
    let result = match decision {
        Decision::Scheduled { .. } => "scheduled",
        Decision::Failed { error, .. } => error.condition_reason(),
        Decision::Unchanged { .. } => "unchanged",
        Decision::Deleting => "deleting",
        Decision::MissingPlacement => "missing_placement",
    };
    metrics::counter!("flotilla_scheduler_decisions_total", "result" => result).increment(1);
    if matches!(
        decision,
        Decision::Scheduled { .. } | Decision::Failed { .. }
    ) {
        metrics::histogram!("flotilla_scheduler_schedule_duration_seconds")
            .record(elapsed.as_secs_f64());
    }
}

/// Logs a written decision once (info when the result or the condition changed, debug for
/// bookkeeping such as an observed-generation bump) and records its Event.
fn report(
    ctx: &Context,
    key: &str,
    old: &v1::ResourceBinding,
    written: &v1::ResourceBinding,
    decision: &Decision,
) {
    let empty = Vec::new();
    let from = old.spec.as_ref().map_or(&empty, |s| &s.clusters);
    let to = written.spec.as_ref().map_or(&empty, |s| &s.clusters);
    let condition = |b: &v1::ResourceBinding| {
        b.status.as_ref().and_then(|s| {
            s.conditions
                .iter()
                .find(|c| c.r#type == flotilla_core::types::CONDITION_SCHEDULED)
                .map(|c| (c.status, c.reason.clone()))
        })
    };
    let material = from != to || condition(old) != condition(written);
    let (namespace, name) = (written.namespace(), written.name());
    let trigger = decision.trigger().map_or("", trigger_name);
    let trace = trace_context(written);
    match decision {
        Decision::Scheduled {
            outcome,
            reinstated,
            ..
        } if material => {
            let reason = decision.trigger().map(trigger_reason).unwrap_or_default();
            if !reinstated.is_empty() {
                tracing::info!(
                    binding = %key,
                    clusters = %reinstated.join(","),
                    "A6: evicted cluster(s) recovered and nothing replaced them: scheduled \
                     again, their eviction tasks end"
                );
            }
            tracing::info!(
                binding = %key,
                from = %format_wire_targets(from),
                to = %format_wire_targets(to),
                trigger,
                reason = %reason,
                strategy = outcome.strategy.as_str(),
                "scheduled"
            );
            ctx.recorder.record(
                Regarding::binding(namespace, name),
                EventType::Normal,
                EVENT_SCHEDULED,
                format!(
                    "Scheduled to {} (was {}): {reason}",
                    format_wire_targets(to),
                    format_wire_targets(from)
                ),
                trace,
            );
        }
        Decision::Failed { error, .. } if material => {
            tracing::info!(
                binding = %key,
                from = %format_wire_targets(from),
                to = %format_wire_targets(to),
                trigger,
                reason = error.condition_reason(),
                error = %error,
                "scheduling failed"
            );
            ctx.recorder.record(
                Regarding::binding(namespace, name),
                EventType::Warning,
                EVENT_SCHEDULE_FAILED,
                format!("{}: {error}", error.condition_reason()),
                trace,
            );
        }
        _ => {
            tracing::debug!(binding = %key, trigger, "status updated");
        }
    }
}

/// While a failover is under way (the binding has an eviction task), the written result
/// carries this reconcile span's trace context in `status.traceContext`: the work executor
/// continues the trace from it.
fn stamp_trace_context(new: &mut v1::ResourceBinding) {
    let task = trace_context(new).to_owned();
    let trace = flotilla_runtime::trace::current();
    // only a span of this failover's trace (a reconcile that started before the task
    // existed and re-read after a conflict is not)
    if flotilla_runtime::trace::same_trace(&trace, &task) {
        new.status
            .get_or_insert_with(Default::default)
            .trace_context = trace;
    }
}

/// The parent of a binding's reconcile span: the trace context of its newest eviction task
/// that has one (the taint manager's eviction), so that the reschedule continues the
/// failover's trace. `None` when the binding has no task.
pub fn eviction_trace(key: &ObjectKey, ctx: &Context) -> Option<String> {
    let binding = ctx.bindings.get(key)?;
    binding
        .spec
        .as_ref()?
        .graceful_eviction_tasks
        .iter()
        .rev()
        .find(|t| !t.trace_context.is_empty())
        .map(|t| t.trace_context.clone())
}

/// The trace context of the step that caused this scheduling round: the newest eviction
/// task's, so a failover can be followed from eviction to reschedule.
fn trace_context(binding: &v1::ResourceBinding) -> &str {
    binding
        .spec
        .as_ref()
        .and_then(|s| s.graceful_eviction_tasks.last())
        .map_or("", |t| t.trace_context.as_str())
}

// ---------------------------------------------------------------------------------------
// Triggers
// ---------------------------------------------------------------------------------------

/// SC-1/SC-2.1/SC-2.2: a binding is queued when it appears and whenever its generation
/// changes; status-only updates (e.g. this scheduler's own condition writes, aggregated
/// status) never queue it. Deletions queue it once so that its bookkeeping is dropped.
struct BindingTrigger {
    scheduler_name: String,
    generations: Mutex<ChangeFilter<v1::ResourceBinding, i64>>,
}

impl BindingTrigger {
    fn new(scheduler_name: String) -> Self {
        Self {
            scheduler_name,
            generations: Mutex::new(ChangeFilter::new("scheduler", |b: &v1::ResourceBinding| {
                b.generation()
            })),
        }
    }

    fn map(&self, event: &Event<v1::ResourceBinding>) -> Vec<ObjectKey> {
        let change = self
            .generations
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .observe(event);
        match (change, event) {
            (Change::Added(key), Event::InitApply(o) | Event::Apply(o))
                if responsible(&o.value, &self.scheduler_name) =>
            {
                vec![key.into()]
            }
            // A generation this scheduler has already observed is its own successful write
            // (only the scheduler sets the observed generation, and always to the generation
            // it writes): re-deciding it would be a no-op, so it is not queued. A refinement
            // of SC-2.2 that halves the reconciles of a failover.
            (Change::Changed(key), Event::InitApply(o) | Event::Apply(o))
                if !observed(&o.value) && responsible(&o.value, &self.scheduler_name) =>
            {
                vec![key.into()]
            }
            (Change::Removed { key, .. }, _) => vec![key.into()],
            _ => Vec::new(),
        }
    }
}

/// Whether the scheduler has observed the binding's generation (its own write).
fn observed(b: &v1::ResourceBinding) -> bool {
    b.status
        .as_ref()
        .is_some_and(|s| s.scheduler_observed_generation == b.generation())
}

/// Why a cluster event queues bindings (logged).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Why {
    /// SC-2.3: deletion requested, labels or spec changed.
    Changed,
    /// SC-2.6: its status may let an unschedulable binding fit.
    MayFitMore,
    /// Added after the first sync.
    Added,
    /// The object is gone.
    Removed,
}

impl Why {
    fn as_str(self) -> &'static str {
        match self {
            Why::Changed => "cluster changed",
            Why::MayFitMore => "cluster may fit more (API enablements or capacity)",
            Why::Added => "cluster added",
            Why::Removed => "cluster removed",
        }
    }
}

/// Whether the scheduler's last attempt on the binding failed (`Scheduled=False`: no cluster
/// fit, or not enough capacity).
fn unschedulable(b: &v1::ResourceBinding) -> bool {
    b.status.as_ref().is_some_and(|s| {
        s.conditions
            .iter()
            .any(|c| c.r#type == "Scheduled" && c.status == v1::ConditionStatus::False as i32)
    })
}

/// SC-2.3/SC-2.4: a cluster whose deletion was newly requested, whose labels changed or whose
/// generation changed (any spec change, taints included) queues every binding whose affinity
/// in use matches the old or the new cluster. Status changes (Ready flips) queue nothing.
///
/// Flotilla additions (Karmada's scheduler does not react to them): a cluster added after the
/// first sync, and a cluster object removed outright, are treated as relevant changes too, so
/// that a new cluster is considered and a vanished target is replaced (SC-3.6); and SC-2.6,
/// a status change that may let an unschedulable binding fit queues the unschedulable ones.
struct ClusterTrigger {
    scheduler_name: String,
    bindings: Cache<v1::ResourceBinding>,
    seen: Mutex<HashMap<String, Arc<Cluster>>>,
    synced: AtomicBool,
    /// Shared with [`Context::room`]: the keys SC-2.6 queued.
    room: Arc<Mutex<HashSet<String>>>,
}

impl ClusterTrigger {
    fn new(scheduler_name: String, bindings: Cache<v1::ResourceBinding>) -> Self {
        Self {
            scheduler_name,
            bindings,
            seen: Mutex::new(HashMap::new()),
            synced: AtomicBool::new(false),
            room: Arc::default(),
        }
    }

    fn map(&self, event: &Event<Cluster>) -> Vec<ObjectKey> {
        let change = {
            let mut seen = self.seen.lock().unwrap_or_else(PoisonError::into_inner);
            match event {
                Event::InitApply(o) | Event::Apply(o) => {
                    match seen.insert(o.key.clone(), o.value.clone()) {
                        Some(old) if cluster_change_relevant(&old, &o.value) => {
                            Some((old, o.value.clone(), Why::Changed))
                        }
                        Some(old) if cluster_status_may_fit_more(&old, &o.value) => {
                            Some((old, o.value.clone(), Why::MayFitMore))
                        }
                        Some(_) => None,
                        None if self.synced.load(Ordering::Relaxed) => {
                            Some((o.value.clone(), o.value.clone(), Why::Added))
                        }
                        None => None,
                    }
                }
                Event::Delete { key, .. } => {
                    seen.remove(key).map(|old| (old.clone(), old, Why::Removed))
                }
                Event::InitDone { .. } => {
                    self.synced.store(true, Ordering::Relaxed);
                    None
                }
                Event::Init { .. } | Event::Progress { .. } => None,
            }
        };
        let Some((old, new, why)) = change else {
            return Vec::new();
        };
        let keys = if why == Why::MayFitMore {
            let keys = self.unschedulable_affected(&old, &new);
            let mut room = self.room.lock().unwrap_or_else(PoisonError::into_inner);
            room.extend(keys.iter().map(|k| k.as_str().to_owned()));
            keys
        } else {
            self.affected(&old, &new)
        };
        if !keys.is_empty() {
            tracing::debug!(cluster = %new.name(), why = why.as_str(), bindings = keys.len(), "cluster change queues bindings");
        }
        keys
    }

    /// SC-2.6: the responsible bindings that could not be scheduled (`Scheduled=False`) and
    /// whose affinity in use matches the cluster: a status change that may let them fit now.
    fn unschedulable_affected(&self, old: &Cluster, new: &Cluster) -> Vec<ObjectKey> {
        // a capacity change is frequent and unschedulable bindings are few: pick them out
        // under the cache's lock, then match their affinities
        self.bindings
            .objects_where(|b| unschedulable(b) && responsible(b, &self.scheduler_name))
            .into_iter()
            .filter(|o| wire_affected(&o.value, old, new))
            .map(|o| o.key.into())
            .collect()
    }

    /// The responsible bindings the change of `old` → `new` concerns (SC-2.3), plus those
    /// targeting the cluster (a removed cluster must leave every result).
    fn affected(&self, old: &Cluster, new: &Cluster) -> Vec<ObjectKey> {
        self.bindings
            .objects()
            .into_iter()
            .filter(|o| responsible(&o.value, &self.scheduler_name))
            .filter(|o| {
                // targets, and eviction tasks: a recovered cluster may end its task (A6)
                let concerned = o.value.spec.as_ref().is_some_and(|s| {
                    s.clusters.iter().any(|t| t.name == new.name())
                        || s.graceful_eviction_tasks
                            .iter()
                            .any(|t| t.from_cluster == new.name())
                });
                concerned || wire_affected(&o.value, old, new)
            })
            .map(|o| o.key.into())
            .collect()
    }
}

/// [`binding_affected_by_cluster_change`] on a wire binding, converting only what it reads
/// (a placement without any affinity matches every cluster and needs no conversion).
fn wire_affected(binding: &v1::ResourceBinding, old: &Cluster, new: &Cluster) -> bool {
    let Some(placement) = binding.spec.as_ref().and_then(|s| s.placement.as_ref()) else {
        return false;
    };
    if placement.cluster_affinity.is_none() && placement.cluster_affinities.is_empty() {
        return true;
    }
    let Ok(placement) = Placement::try_from(placement.clone()) else {
        // Unreadable: let the reconcile report it.
        return true;
    };
    let mut view = ResourceBinding::default();
    view.meta.generation = binding.generation();
    if let Some(status) = &binding.status {
        view.status.scheduler_observed_generation = status.scheduler_observed_generation;
        view.status
            .scheduler_observing_affinity_name
            .clone_from(&status.scheduler_observing_affinity_name);
    }
    view.spec.placement = Some(placement);
    binding_affected_by_cluster_change(&view, old, new)
}

#[cfg(test)]
mod tests {
    use flotilla_core::types::{ClusterAffinity, ObjectMeta, Taint, TaintEffect, TargetCluster};
    use flotilla_runtime::watcher::Object;

    use super::*;

    fn cluster(name: &str) -> Cluster {
        Cluster {
            meta: ObjectMeta {
                name: name.to_owned(),
                generation: 1,
                ..Default::default()
            },
            ..Default::default()
        }
    }

    fn object<K>(key: &str, revision: Revision, value: K) -> Object<K> {
        Object {
            key: key.to_owned(),
            revision,
            value: Arc::new(value),
        }
    }

    fn binding(name: &str, generation: i64, only: Option<&str>) -> v1::ResourceBinding {
        let mut rb = ResourceBinding::default();
        rb.meta.name = name.to_owned();
        rb.meta.namespace = "default".to_owned();
        rb.meta.generation = generation;
        rb.spec.placement = Some(Placement {
            cluster_affinity: only.map(|c| ClusterAffinity {
                cluster_names: vec![c.to_owned()],
                ..Default::default()
            }),
            ..Default::default()
        });
        v1::ResourceBinding::from(rb)
    }

    #[test]
    fn sc_2_1_and_2_2_bindings_queue_on_add_and_generation_change_only() {
        let trigger = BindingTrigger::new(DEFAULT_SCHEDULER_NAME.to_owned());
        let key = "bindings/default/a";
        let apply = |generation: i64, rev: Revision| {
            Event::Apply(object(key, rev, binding("a", generation, None)))
        };
        let ignored = |rev: Revision, b: v1::ResourceBinding| {
            trigger.map(&Event::Apply(object(key, rev, b))).is_empty()
        };
        // observed generation = generation: a status-only write or the scheduler's own
        let observed = |generation: i64| {
            let mut b = binding("a", generation, None);
            b.status
                .get_or_insert_with(Default::default)
                .scheduler_observed_generation = generation;
            b
        };
        assert_eq!(trigger.map(&apply(1, 10)), vec![key.to_owned()], "add");
        assert!(ignored(11, observed(1)), "SC-2.2: status-only update");
        assert_eq!(
            trigger.map(&apply(2, 12)),
            vec![key.to_owned()],
            "generation"
        );
        assert!(
            ignored(13, observed(3)),
            "the scheduler's own write (observed = generation) is not re-queued"
        );
        let mut other = binding("a", 4, None);
        other.spec.as_mut().unwrap().scheduler_name = "other-scheduler".into();
        assert!(ignored(14, other), "SC-1: another scheduler's binding");
    }

    #[test]
    fn sc_2_3_cluster_changes_queue_bindings_whose_affinity_matches() {
        let mut writer: Writer<v1::ResourceBinding> = Writer::new();
        writer.apply_watcher_event(&Event::Init { revision: 1 });
        for (key, only) in [
            ("bindings/default/any", None),
            ("bindings/default/m1", Some("member1")),
            ("bindings/default/m2", Some("member2")),
        ] {
            writer.apply_watcher_event(&Event::InitApply(object(key, 1, binding(key, 1, only))));
        }
        // A binding on member2 only, but targeting member1 (e.g. the affinity changed since).
        let mut stale = binding("stale", 1, Some("member2"));
        stale.spec.as_mut().unwrap().clusters = vec![TargetCluster::new("member1", 1).into()];
        writer.apply_watcher_event(&Event::InitApply(object(
            "bindings/default/stale",
            1,
            stale,
        )));
        writer.apply_watcher_event(&Event::InitDone { revision: 1 });
        let trigger = ClusterTrigger::new(DEFAULT_SCHEDULER_NAME.to_owned(), writer.cache());

        let key = "clusters/member1";
        let c1 = cluster("member1");
        trigger.map(&Event::Init { revision: 1 });
        assert!(
            trigger
                .map(&Event::InitApply(object(key, 1, c1.clone())))
                .is_empty()
        );
        trigger.map(&Event::InitDone { revision: 1 });

        // SC-2.4: a status change (Ready flip, capacity) queues nothing.
        let mut status = c1.clone();
        status.status.resource_summary = Some(flotilla_core::capacity::Summary::with_pods(4));
        assert!(
            trigger
                .map(&Event::Apply(object(key, 2, status.clone())))
                .is_empty()
        );

        // SC-2.3: a taint (spec change, generation bump) queues the bindings whose affinity
        // in use matches member1 — and those targeting it — but not member2-only bindings.
        let mut tainted = status.clone();
        tainted.meta.generation = 2;
        tainted
            .spec
            .taints
            .push(Taint::new("k", TaintEffect::NoExecute, None));
        let mut keys = trigger.map(&Event::Apply(object(key, 3, tainted)));
        keys.sort();
        assert_eq!(
            keys,
            vec![
                "bindings/default/any".to_owned(),
                "bindings/default/m1".to_owned(),
                "bindings/default/stale".to_owned(),
            ]
        );

        // A cluster added after the first sync (Flotilla addition) queues its matches.
        let keys = trigger.map(&Event::Apply(object(
            "clusters/member2",
            4,
            cluster("member2"),
        )));
        assert!(keys.contains(&"bindings/default/m2".into()));
        assert!(!keys.contains(&"bindings/default/m1".into()));
    }
}
