//! The eviction controller: (cluster, binding) keys, TM-3 enqueue delays, TM-6/TM-7
//! decisions on fresh state, the A8 rate and brake, and TM-11 evictions written in batches.
//!
//! ```text
//!   clusters watch ──► Cache<Cluster> ──feed──┐ NoExecute taints changed → bindings on it
//!                                             │   (index "cluster") → TM-3 delay → add_after
//!                                             │ every event: A8 rate from Ready conditions
//!   bindings watch ──► Cache<wire binding> ───┤ binding changed → its tainted targets → add_after
//!                                             ▼
//!                 WorkQueue<EvictKey{cluster, binding}>  (identical keys collapse, TM-4)
//!                                             │ workers (--workers), leader only
//!                                             ▼
//!   reconcile: re-decide on the cache (TM-6, TM-7) ─ tolerate → drop (I11)
//!                                                  ─ evict after d → requeue(d)
//!                                                  ─ evict now → A8 token ─► TM-9 purge mode
//!                 → TM-11 graceful_evict_cluster (cluster out of spec.clusters + task, ONE CAS)
//!                 → BatchWriter (update_many) ── conflict → re-read from the store, re-decide
//! ```

use std::collections::{HashMap, HashSet};
use std::fmt;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use flotilla_core::Time;
use flotilla_core::preserve::cluster_failover_state;

/// TM-10.2: how soon an eviction postponed for its preserved state is tried again.
const STATE_RETRY: Duration = Duration::from_secs(1);
use flotilla_core::eviction::{
    BrakeMemory, EvictOptions, EvictOutcome, EvictionDecision, EvictionError, EvictionRate,
    TokenBucket, effective_rate, enqueue_delay, eviction_rate, graceful_evict_cluster,
    local_toleration_clocks, need_eviction, observe_fleet, resolve_purge_mode,
    restart_toleration_clocks,
};
use flotilla_core::taint::no_execute_taints;
use flotilla_core::types::{
    Cluster, ConditionStatus, Placement, ResourceBinding, ResourceBindingSpec, Taint, TaintEffect,
};
use flotilla_proto::v1;
use flotilla_runtime::cas::{Lost, Races};
use flotilla_runtime::queue::Reason;
use flotilla_runtime::{Action, Cache, Event, EventType, Regarding, WorkQueue, Writes};
use flotilla_store::ObjectKey;
use flotilla_store::StoreError;
use flotilla_store::typed::{Update, cluster_scoped_key};

use crate::Config;
use crate::error::Error;

/// Name of the bindings index: the clusters in `spec.clusters` (TM-2.2: eviction-task
/// clusters are not indexed).
pub const CLUSTER_INDEX: &str = "cluster";

/// How long an item parked by the brake waits before it looks again even if no brake change
/// released it (a safety net; the release on a brake change is what normally wakes it).
const PARKED_RECHECK: Duration = Duration::from_secs(30);

/// F6: when this replica first saw each NoExecute taint of one cluster, by (key, effect).
type FirstSeen = HashMap<(String, TaintEffect), Time>;

/// The queue key: one binding on one cluster (TM-4).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct EvictKey {
    /// Cluster name.
    pub cluster: String,
    /// The binding's store key (`bindings/<ns>/<name>`).
    pub binding: ObjectKey,
}

impl fmt::Display for EvictKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}@{}", self.binding, self.cluster)
    }
}

/// The store key of a cluster.
pub fn cluster_key(name: &str) -> String {
    cluster_scoped_key("clusters/", name)
}

/// The A8 state shared by the workers.
struct Brake {
    memory: BrakeMemory,
    bucket: TokenBucket,
    /// Keys held back while evictions are halted; released when the brake lets go.
    parked: HashSet<EvictKey>,
}

/// Everything a reconcile needs.
pub struct Context {
    pub(crate) config: Config,
    pub(crate) clusters: Cache<Cluster>,
    pub(crate) bindings: Cache<v1::ResourceBinding>,
    pub(crate) queue: WorkQueue<EvictKey>,
    /// Evictions and events; reads (re-reads after a conflict) go to the store directly
    /// through `writes.typed`.
    pub(crate) writes: Writes<v1::ResourceBinding>,
    brake: Mutex<Brake>,
    /// The NoExecute taints last acted on, per cluster: a cluster update that does not
    /// change them (a heartbeat) re-enqueues nothing.
    seen_taints: Mutex<HashMap<String, Vec<Taint>>>,
    /// F6: when this replica first saw each NoExecute taint, per cluster and (key, effect).
    first_seen: Mutex<HashMap<String, FirstSeen>>,
    /// The wall clock decisions read.
    pub(crate) clock: flotilla_runtime::Clock,
}

impl fmt::Debug for Context {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Context")
            .field("clusters", &self.clusters)
            .field("bindings", &self.bindings)
            .finish_non_exhaustive()
    }
}

/// The applied placement (A3) of a wire binding, if it converts.
fn applied_placement(binding: &v1::ResourceBinding) -> Option<Placement> {
    let placement = binding.status.as_ref()?.applied_placement.clone()?;
    Placement::try_from(placement).ok()
}

fn targets(binding: &v1::ResourceBinding) -> impl Iterator<Item = &str> {
    binding
        .spec
        .iter()
        .flat_map(|s| s.clusters.iter().map(|t| t.name.as_str()))
}

/// The bindings index: every cluster in `spec.clusters`.
pub fn index_targets(binding: &v1::ResourceBinding) -> Vec<String> {
    targets(binding).map(str::to_owned).collect()
}

// === impl Context ===

impl Context {
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn new(
        config: Config,
        clusters: Cache<Cluster>,
        bindings: Cache<v1::ResourceBinding>,
        queue: WorkQueue<EvictKey>,
        writes: Writes<v1::ResourceBinding>,
        clock: flotilla_runtime::Clock,
    ) -> Self {
        Context {
            clock,
            config,
            clusters,
            bindings,
            queue,
            writes,
            brake: Mutex::new(Brake {
                memory: BrakeMemory::default(),
                bucket: TokenBucket::new(),
                parked: HashSet::new(),
            }),
            seen_taints: Mutex::new(HashMap::new()),
            first_seen: Mutex::new(HashMap::new()),
        }
    }

    fn brake(&self) -> std::sync::MutexGuard<'_, Brake> {
        self.brake.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The rate A8 currently applies (unknown before the cluster cache synced: halted).
    pub fn current_rate(&self) -> EvictionRate {
        effective_rate(&self.brake().memory, self.clock.now(), &self.config.rate)
    }

    /// The NoExecute taints of `cluster` as this replica's toleration clocks see them: added
    /// when this replica first saw them (F6, single clock authority), and restarted at the end
    /// of the last disruption (A8).
    fn clocked(&self, cluster: &str, taints: &[Taint], now: Time) -> Vec<Taint> {
        let local = {
            let seen = self
                .first_seen
                .lock()
                .unwrap_or_else(PoisonError::into_inner);
            let of_cluster = seen.get(cluster);
            local_toleration_clocks(
                taints,
                |t| of_cluster.and_then(|m| m.get(&(t.key.clone(), t.effect)).copied()),
                now,
            )
        };
        restart_toleration_clocks(&local, self.brake().memory.disruption_ended_at)
    }

    /// F6: notes when this replica first saw each NoExecute taint of `cluster` (now, for the
    /// ones it had not seen), and forgets the ones that are gone.
    fn note_taints(&self, cluster: &Cluster, now: Time) {
        let mut seen = self
            .first_seen
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        let present: Vec<(String, TaintEffect)> = cluster
            .spec
            .taints
            .iter()
            .filter(|t| t.effect == TaintEffect::NoExecute)
            .map(|t| (t.key.clone(), t.effect))
            .collect();
        if present.is_empty() {
            seen.remove(cluster.name());
            return;
        }
        let of_cluster = seen.entry(cluster.name().to_owned()).or_default();
        of_cluster.retain(|k, _| present.contains(k));
        for k in present {
            of_cluster.entry(k).or_insert(now);
        }
    }

    fn both_ready(&self) -> bool {
        self.clusters.is_ready() && self.bindings.is_ready()
    }

    /// TM-3 for one binding on one tainted cluster: queue it now, after the remaining
    /// toleration, or not at all.
    fn enqueue_pair(&self, cluster: &str, taints: &[Taint], binding_key: &str, now: Time) {
        let Some(binding) = self.bindings.get(binding_key) else {
            return;
        };
        let placement = applied_placement(&binding);
        if let Some(delay) =
            enqueue_delay(&self.clocked(cluster, taints, now), placement.as_ref(), now)
        {
            let key = EvictKey {
                cluster: cluster.to_owned(),
                binding: binding_key.into(),
            };
            self.queue.add_after(key, delay, Reason::Changed);
        }
    }

    /// TM-2: a cluster with NoExecute taints → the bindings targeting it → TM-3. With
    /// `force`, even if the taints did not change since last time.
    fn enqueue_cluster(&self, cluster: &Cluster, force: bool, now: Time) {
        if !self.config.eviction_enabled {
            return;
        }
        let taints = no_execute_taints(&cluster.spec.taints);
        {
            let mut seen = self
                .seen_taints
                .lock()
                .unwrap_or_else(PoisonError::into_inner);
            let unchanged = seen.get(cluster.name()) == Some(&taints);
            if unchanged && !force {
                return;
            }
            if taints.is_empty() {
                seen.remove(cluster.name());
            } else {
                seen.insert(cluster.name().to_owned(), taints.clone());
            }
        }
        // I11: no taint → nothing queued; items queued earlier drop themselves on dequeue.
        if taints.is_empty() {
            return;
        }
        let keys = self.bindings.index_keys(CLUSTER_INDEX, cluster.name());
        tracing::debug!(
            cluster = cluster.name(),
            bindings = keys.len(),
            "NoExecute taints; enqueueing bindings"
        );
        for key in keys {
            self.enqueue_pair(cluster.name(), &taints, &key, now);
        }
    }

    /// A binding changed: its targets with NoExecute taints → TM-3.
    fn enqueue_binding(&self, key: &str, binding: &v1::ResourceBinding, now: Time) {
        if !self.config.eviction_enabled {
            return;
        }
        for target in targets(binding) {
            if let Some(cluster) = self.clusters.get(&cluster_key(target)) {
                let taints = no_execute_taints(&cluster.spec.taints);
                if !taints.is_empty() {
                    self.enqueue_pair(target, &taints, key, now);
                }
            }
        }
    }

    /// Every tainted cluster's bindings (after a (re-)list of either cache).
    fn sweep(&self, now: Time) {
        for cluster in self.clusters.list() {
            self.enqueue_cluster(&cluster, true, now);
        }
    }

    /// A8: recompute the rate from the clusters' Ready conditions; on a change, log it once,
    /// export it and record an event; when the brake lets go, release the parked keys.
    fn update_rate(&self) {
        // A cluster that has no Ready condition yet (it is joining) is not judged either way.
        let clusters = self.clusters.list();
        let judged: Vec<ConditionStatus> = clusters
            .iter()
            .filter_map(|c| c.ready().map(|r| r.status))
            .collect();
        let total = judged.len();
        let unhealthy = judged
            .iter()
            .filter(|s| **s != ConditionStatus::True)
            .count();
        let observed = eviction_rate(total, unhealthy, &self.config.rate);
        let now = self.clock.now();
        let (previous, rate, ended, released) = {
            let mut brake = self.brake();
            let previous = brake.memory.observed;
            if previous == Some(observed) {
                return;
            }
            let ended = observe_fleet(
                &mut brake.memory,
                total,
                unhealthy,
                &self.config.rate,
                now,
                self.config.stabilization_window,
            );
            if ended {
                // A8 "no herd": the window starts without a token.
                brake.bucket = TokenBucket::empty(now);
            }
            let rate = effective_rate(&brake.memory, now, &self.config.rate);
            let released: Vec<EvictKey> = if rate == EvictionRate::Halted {
                Vec::new()
            } else {
                brake.parked.drain().collect()
            };
            (previous, rate, ended, released)
        };
        if ended {
            tracing::info!(
                window = ?self.config.stabilization_window,
                secondary_rate = self.config.rate.secondary_rate,
                unhealthy,
                total,
                "A8: a disruption ended; toleration clocks restart now and evictions stay at the \
                 secondary rate for the stabilisation window"
            );
        }
        export_rate(rate);
        let per_second = rate
            .per_second()
            .map_or_else(|| "unlimited".to_owned(), |r| format!("{r}/s"));
        let message = format!(
            "eviction rate {per_second} ({}): {unhealthy} of {total} clusters unhealthy",
            rate.reason()
        );
        tracing::info!(
            reason = rate.reason(),
            rate = %per_second,
            unhealthy,
            total,
            previous = ?previous.map(|p| p.reason()),
            "A8 eviction rate changed"
        );
        if previous.is_some() {
            let type_ = if rate == EvictionRate::Halted {
                EventType::Warning
            } else {
                EventType::Normal
            };
            self.writes.recorder.record(
                Regarding {
                    kind: "TaintManager",
                    namespace: "",
                    name: "eviction-rate",
                },
                type_,
                &format!("EvictionRate{}", rate.reason()),
                message,
                "",
            );
        }
        for key in released {
            self.queue
                .add_with_reason(key, Reason::Custom("eviction brake released".into()));
        }
    }

    /// A8: may one eviction happen now? `Err(d)` = look again after `d` (the key is parked
    /// when evictions are halted).
    fn take_token(&self, key: &EvictKey, now: Time) -> Result<(), Duration> {
        let mut brake = self.brake();
        let rate = effective_rate(&brake.memory, now, &self.config.rate);
        if rate == EvictionRate::Halted {
            brake.parked.insert(key.clone());
            return Err(PARKED_RECHECK);
        }
        // a stabilisation window's end lifts the limit: look again then at the latest
        let window_end = match rate {
            EvictionRate::Stabilising(_) => brake
                .memory
                .stabilising_until
                .map(|until| until.saturating_since(now) + Duration::from_millis(1)),
            _ => None,
        };
        brake
            .bucket
            .try_take(now, rate.per_second(), 1.0)
            .map_err(|wait| {
                window_end
                    .map_or(wait, |end| wait.min(end))
                    .clamp(Duration::from_millis(1), PARKED_RECHECK)
            })
    }
}

/// A8 metrics: `flotilla_taint_manager_eviction_rate` (evictions per second; +Inf =
/// unlimited, 0 = halted) and `flotilla_taint_manager_brake_state{reason}` (1 for the reason
/// in force — Normal, PartialDisruption or FullDisruption — 0 for the others).
fn export_rate(rate: EvictionRate) {
    let value = rate.per_second().unwrap_or(f64::INFINITY);
    metrics::gauge!("flotilla_taint_manager_eviction_rate").set(value);
    for reason in [
        "Normal",
        "PartialDisruption",
        "FullDisruption",
        "Stabilising",
    ] {
        let on = if reason == rate.reason() { 1.0 } else { 0.0 };
        metrics::gauge!("flotilla_taint_manager_brake_state", "reason" => reason).set(on);
    }
}

/// Feeds the queue from cluster events (TM-2) and keeps the A8 rate current.
pub fn on_cluster_event(ctx: &Context, ev: &Event<Cluster>) {
    let now = ctx.clock.now();
    match ev {
        Event::Apply(obj) => {
            ctx.note_taints(&obj.value, now);
            if ctx.bindings.is_ready() {
                ctx.enqueue_cluster(&obj.value, false, now);
            }
            ctx.update_rate();
        }
        Event::Delete { key, .. } => {
            let name = key.strip_prefix("clusters/").unwrap_or(key);
            ctx.seen_taints
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .remove(name);
            ctx.first_seen
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .remove(name);
            ctx.update_rate();
        }
        Event::InitDone { .. } => {
            for cluster in ctx.clusters.list() {
                ctx.note_taints(&cluster, now);
            }
            ctx.update_rate();
            if ctx.both_ready() {
                ctx.sweep(now);
            }
        }
        Event::Init { .. } | Event::InitApply(_) | Event::Progress { .. } => {}
    }
}

/// Feeds the queue from binding events: a binding placed on (or changed on) a tainted
/// cluster is decided too.
pub fn on_binding_event(ctx: &Context, ev: &Event<v1::ResourceBinding>) {
    let now = ctx.clock.now();
    match ev {
        Event::Apply(obj) => {
            if ctx.clusters.is_ready() {
                ctx.enqueue_binding(&obj.key, &obj.value, now);
            }
        }
        Event::InitDone { .. } => {
            if ctx.both_ready() {
                ctx.sweep(now);
            }
        }
        Event::Init { .. }
        | Event::InitApply(_)
        | Event::Delete { .. }
        | Event::Progress { .. } => {}
    }
}

/// TM-11 on the wire object: the cluster leaves `spec.clusters` and its task is appended,
/// both in the one object written by one CAS (A7). `None` if the cluster is not a target.
fn evict_wire(
    wire: &v1::ResourceBinding,
    spec: &ResourceBindingSpec,
    cluster: &str,
    opts: &EvictOptions,
) -> Option<(v1::ResourceBinding, EvictOutcome)> {
    let mut lists = ResourceBindingSpec {
        clusters: spec.clusters.clone(),
        graceful_eviction_tasks: spec.graceful_eviction_tasks.clone(),
        ..Default::default()
    };
    let outcome = graceful_evict_cluster(&mut lists, cluster, opts);
    if outcome == EvictOutcome::NotTargeted {
        return None;
    }
    let mut new = wire.clone();
    let wire_spec = new.spec.get_or_insert_with(Default::default);
    // Only these two lists change; every other field (including ones the domain types do
    // not model) is written back as read.
    wire_spec.clusters = lists.clusters.into_iter().map(Into::into).collect();
    wire_spec.graceful_eviction_tasks = lists
        .graceful_eviction_tasks
        .into_iter()
        .map(Into::into)
        .collect();
    Some((new, outcome))
}

/// The trace context of the NoExecute taint that makes `key.cluster` evict (the newest one
/// that has one): the parent of the eviction's reconcile span.
pub fn taint_trace(key: &EvictKey, ctx: &Context) -> Option<String> {
    let cluster = ctx.clusters.get(&cluster_key(&key.cluster))?;
    no_execute_taints(&cluster.spec.taints)
        .into_iter()
        .rev()
        .find(|t| !t.trace_context.is_empty())
        .map(|t| t.trace_context)
}

/// TM-6: decide one (cluster, binding) again on fresh state and act.
pub async fn reconcile(key: EvictKey, ctx: Arc<Context>) -> Result<Action, Error> {
    let now = ctx.clock.now();
    // TM-7.2: cluster gone → nothing to do.
    let cluster_key = cluster_key(&key.cluster);
    let Some(cluster_obj) = ctx.clusters.get_object(&cluster_key) else {
        return Ok(Action::await_change());
    };
    let cluster = cluster_obj.value;
    // I11: recovery beats toleration — no NoExecute taint left, drop the item.
    if !ctx.config.eviction_enabled || no_execute_taints(&cluster.spec.taints).is_empty() {
        return Ok(Action::await_change());
    }
    // #31: the cached binding is shared, not cloned; it is copied to convert it, and again
    // only for the eviction's write
    let mut first = ctx.bindings.get(&key.binding);
    let mut races = Races::new(&key.binding);
    let mut lost = None;
    loop {
        let current = Lost::next(lost.take(), &mut first, || async {
            let read: Option<v1::ResourceBinding> = ctx.writes.typed.get(&key.binding).await?;
            Ok::<_, StoreError>(read.map(Arc::new))
        })
        .await?;
        let Some(wire) = current else {
            return Ok(Action::await_change());
        };
        let binding = match ResourceBinding::try_from((*wire).clone()) {
            Ok(b) => b,
            Err(source) => {
                // A malformed stored binding: nothing sensible to do until it is rewritten.
                tracing::warn!(binding = %key.binding, error = %source, "cannot decode binding");
                return Ok(Action::await_change());
            }
        };
        // TM-6.1
        if binding.meta.deletion_timestamp.is_some() || !binding.targets(&key.cluster) {
            return Ok(Action::await_change());
        }
        // TM-7 with A3: tolerations from the placement the scheduler applied.
        let taints = ctx.clocked(&key.cluster, &cluster.spec.taints, now);
        let explanation = match need_eviction(
            &taints,
            binding.status.applied_placement.as_ref(),
            now,
        ) {
            Ok(e) => e,
            Err(EvictionError::NoAppliedPlacement) => {
                // The scheduler's write of the applied placement is a binding change that
                // enqueues this key again.
                tracing::debug!(binding = %key.binding, cluster = %key.cluster, "no applied placement yet");
                return Ok(Action::await_change());
            }
        };
        match explanation.decision {
            EvictionDecision::Tolerate => return Ok(Action::await_change()),
            EvictionDecision::EvictAfter(d) => return Ok(Action::requeue(d)),
            EvictionDecision::EvictNow => {}
        }
        // TM-10.2: the state to preserve is read from the status collected from the cluster;
        // without it the eviction waits, as Karmada's does (it returns an error and retries).
        let preserved = match cluster_failover_state(&binding, &key.cluster) {
            Ok(state) => state,
            Err(why) => {
                tracing::info!(
                    cluster = %key.cluster, binding = %key.binding, %why,
                    "eviction postponed until the state can be preserved (TM-10.2)"
                );
                return Ok(Action::requeue(STATE_RETRY));
            }
        };
        // A8: one token per eviction (not per conflict retry).
        if races.attempt() == 0
            && let Err(wait) = ctx.take_token(&key, now)
        {
            tracing::debug!(binding = %key.binding, cluster = %key.cluster, ?wait, "eviction rate-limited");
            return Ok(Action::requeue(wait));
        }
        let purge_mode = resolve_purge_mode(binding.spec.failover.as_ref(), ctx.config.purge_mode);
        let why = match &explanation.untolerated {
            Some(t) => format!("taint {}={}:NoExecute is not tolerated", t.key, t.value),
            None => "the toleration time of the NoExecute taints is over".to_owned(),
        };
        let message = format!("evicted from cluster {}: {why}", key.cluster);
        let mut opts = EvictOptions::taint_manager(purge_mode, message.clone(), now);
        // the task carries this span's context: the reschedule continues the trace
        opts.trace_context = flotilla_runtime::trace::current();
        opts.preserved_label_state = preserved;
        let reason = if explanation.untolerated.is_some() {
            "taint_untolerated"
        } else {
            "toleration_expired"
        };
        let Some((new, outcome)) = evict_wire(&wire, &binding.spec, &key.cluster, &opts) else {
            return Ok(Action::await_change());
        };
        // I11: the eviction commits only if the cluster is still as read — with the taint
        // that is not tolerated. A taint removed meanwhile fails this guard instead of
        // evicting from a recovered cluster.
        let update = Update::new(wire.clone(), new).guarded_by(&cluster_key, cluster_obj.revision);
        match ctx.writes.writer.write(update).await {
            Ok(_) => {
                let (namespace, name) = key.binding.namespace_name();
                tracing::info!(
                    cluster = %key.cluster,
                    binding = %key.binding,
                    purge_mode = purge_mode.as_str(),
                    reason = %why,
                    task_existed = outcome == EvictOutcome::RemovedTaskExisted,
                    "evicted binding from cluster (TM-11)"
                );
                metrics::counter!(
                    "flotilla_taint_manager_evictions_total",
                    "purge_mode" => purge_mode.as_str(),
                    "reason" => reason
                )
                .increment(1);
                ctx.writes.recorder.record(
                    Regarding::binding(namespace, name),
                    EventType::Normal,
                    "EvictWorkloadFromCluster",
                    format!("{message} (purge mode {})", purge_mode.as_str()),
                    "",
                );
                return Ok(Action::await_change());
            }
            Err(StoreError::Conflict {
                key: conflicted, ..
            }) if conflicted == cluster_key => {
                // The cluster changed since the cache showed it: decide again once the cache
                // has the new version (its taint may be gone: I11).
                tracing::debug!(binding = %key.binding, cluster = %key.cluster, "cluster changed under the eviction; deciding again");
                return Ok(Action::requeue(Duration::from_millis(10)));
            }
            Err(e) if e.is_conflict() || matches!(e, StoreError::NotFound { .. }) => {
                // I5: someone else wrote the binding since we read it: the loop re-reads and
                // decides again; a binding deleted meanwhile is decided on as gone.
                lost = Some(races.after::<Error>(e)?);
            }
            Err(e) => {
                let (namespace, name) = key.binding.namespace_name();
                ctx.writes.recorder.record(
                    Regarding::binding(namespace, name),
                    EventType::Warning,
                    "EvictWorkloadFromClusterFailed",
                    format!("cannot evict from cluster {}: {e}", key.cluster),
                    "",
                );
                return Err(e.into());
            }
        }
    }
}

/// After a failed reconcile: retry after the queue's back-off.
pub fn error_policy(_key: &EvictKey, _error: &Error, _ctx: &Context) -> Action {
    Action::requeue(Duration::from_millis(5))
}
