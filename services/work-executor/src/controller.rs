//! The binding controller (WE-1..WE-5, WE-8): per binding, mark orphan Works deleting,
//! wait for Directly-purged Works, ensure one Work per target, and write the aggregated
//! status with the `FullyApplied` condition.
//!
//! ```text
//!   bindings ─┐                       ┌─ Works cache (index: binding, cluster)
//!   works ────┼─► queue<binding key> ─┤  workloads cache, bindings cache
//!   workloads ┘                       └► reconcile: plan::decide → Work writes (BatchWriter:
//!                                        update_many) → plan::aggregate → binding status CAS
//!   conflict on any write → re-read the losers from the store and decide again (bounded)
//! ```

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use flotilla_core::Time;
use flotilla_core::overrides::OverridePolicy;
use flotilla_core::types as domain;
use flotilla_core::work::DIRECTLY_PURGE_RECHECK;
use flotilla_proto::Resource;
use flotilla_proto::convert::time_to_timestamp;
use flotilla_proto::v1;
use flotilla_runtime::cas::{Exhausted, Races};
use flotilla_runtime::{Action, BatchWriter, Cache, EventType, Recorder, Regarding};
use flotilla_store::ObjectKey;
use flotilla_store::StoreError;
use flotilla_store::typed::new_uid;
use flotilla_store::typed::{Stored, Typed, Update, workload_key};

use crate::Config;
use crate::member::Members;
use crate::plan::{
    CONDITION_REPLICAS_HELD, MoveSettings, REASON_OVERRIDE_FAILED, RenderMemo, Rendered, aggregate,
    decide_remembering, end_healthy_tasks, hold_status, moves_condition, overrides_condition,
    with_aggregated_status, with_condition, with_overrides_condition,
};
use crate::render::{
    BINDING_FINALIZER, Overrides, applied_state, binding_key, cluster_ready, is_deleting,
    parse_binding_key, work_cluster,
};

/// Index of the Works cache: the `<ns>/<name>` of the binding a Work belongs to.
pub const INDEX_BINDING: &str = "binding";
/// Index of the Works cache: the Work's cluster.
pub const INDEX_CLUSTER: &str = "cluster";
/// Index of the bindings cache: the key of the binding's template (`workloads/<ns>/<kind>/<name>`).
pub const INDEX_WORKLOAD: &str = "workload";
/// Index of the OverridePolicies cache: by namespace.
pub const INDEX_NAMESPACE: &str = "namespace";

/// Why a reconcile failed (it is retried with back-off).
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The store failed (unavailable, leadership lost, ...).
    #[error("store: {0}")]
    Store(#[from] StoreError),
    /// A member call failed.
    #[error(transparent)]
    Member(#[from] crate::member::MemberError),
    /// Still losing compare-and-swap races after every attempt.
    #[error(transparent)]
    Contended(#[from] Exhausted),
}

/// Everything the controllers share: caches, writers, member clients.
#[derive(derive_more::Debug)]
pub struct Context {
    /// Bindings, indexed by template key.
    pub bindings: Cache<v1::ResourceBinding>,
    /// Works, indexed by binding and by cluster.
    pub works: Cache<v1::Work>,
    /// Resource templates.
    #[debug(skip)]
    pub workloads: Cache<v1::Workload>,
    /// Clusters.
    #[debug(skip)]
    pub clusters: Cache<v1::Cluster>,
    /// Secrets: the credentials of Push members (`spec.secretRef`).
    #[debug(skip)]
    pub secrets: Cache<v1::Secret>,
    /// OverridePolicies (OV-1), indexed by namespace.
    #[debug(skip)]
    pub overrides: Cache<v1::OverridePolicy>,
    /// ClusterOverridePolicies (OV-1).
    #[debug(skip)]
    pub cluster_overrides: Cache<v1::ClusterOverridePolicy>,
    /// Typed access through the leader-fenced store (re-reads and deletes).
    #[debug(skip)]
    pub typed: Typed,
    /// Batched Work writes (fenced).
    #[debug(skip)]
    pub work_writer: BatchWriter<v1::Work>,
    /// Batched binding status writes (fenced).
    #[debug(skip)]
    pub binding_writer: BatchWriter<v1::ResourceBinding>,
    /// Batched writes of the templates' aggregated status (IN-4; fenced).
    #[debug(skip)]
    pub template_writer: BatchWriter<v1::Workload>,
    /// Push member clients.
    #[debug(skip)]
    pub members: Members,
    /// Events.
    #[debug(skip)]
    pub recorder: Recorder,
    /// Timers and limits.
    pub config: Config,
    /// The wall clock decisions read.
    #[debug(skip)]
    pub clock: flotilla_runtime::Clock,
    /// Status collection's memory of what it already read (`status::Seen`), per cluster.
    #[debug(skip)]
    pub status_seen: crate::status::SeenByCluster,
    /// The binding controller's render memory (`plan::Rendered`), per binding key.
    #[debug(skip)]
    pub rendered: RenderMemory,
    /// The shards this replica holds, when sharded (`--shards`): status collection reads
    /// only their Works.
    #[debug(skip)]
    pub held: Option<tokio::sync::watch::Receiver<flotilla_runtime::Held>>,
}

/// [`RenderMemo`] per binding key. Each sync of a binding replaces its own entry, so Works
/// that went away are forgotten with it; a binding that is gone or deleting drops its entry.
/// Per process: a new leader starts empty and renders everything once.
pub type RenderMemory = Mutex<HashMap<String, RenderMemo>>;

impl Context {
    /// Whether this replica collects `work`'s status: always, unless sharded and the
    /// Work's shard is not held.
    pub fn collects(&self, work: &v1::Work) -> bool {
        let Some(held) = &self.held else {
            return true;
        };
        let held = held.borrow();
        let key = flotilla_store::typed::work_key(
            crate::render::work_cluster(work),
            work.namespace(),
            work.name(),
        );
        crate::work_shard(&key, held.shards).is_some_and(|s| held.terms.contains_key(&s))
    }

    /// Whether this replica is sharded (`--shards`).
    pub fn sharded(&self) -> bool {
        self.held.is_some()
    }
    /// Resolves once every cache holds a full list.
    pub async fn caches_ready(&self) {
        self.bindings.wait_until_ready().await;
        self.works.wait_until_ready().await;
        self.workloads.wait_until_ready().await;
        self.clusters.wait_until_ready().await;
        self.secrets.wait_until_ready().await;
        self.overrides.wait_until_ready().await;
        self.cluster_overrides.wait_until_ready().await;
    }

    /// OV-1: the override policies in scope of a template in `namespace` — every
    /// ClusterOverridePolicy and the OverridePolicies of that namespace — with the `targets`
    /// their rules are matched against (only those: a render needs no other cluster). Empty
    /// (nothing converted) when there are none.
    pub fn overrides_for<'a>(
        &self,
        namespace: &str,
        targets: impl IntoIterator<Item = &'a str>,
    ) -> Overrides {
        let mut policies = Vec::new();
        for p in self.cluster_overrides.list() {
            push_policy(&mut policies, (*p).clone());
        }
        if !namespace.is_empty() {
            for p in self.overrides.by_index(INDEX_NAMESPACE, namespace) {
                push_policy(&mut policies, (*p).clone());
            }
        }
        if policies.is_empty() {
            return Overrides::default();
        }
        let clusters = targets
            .into_iter()
            .filter_map(|name| self.clusters.get(&format!("{}{name}", v1::Cluster::PREFIX)))
            .filter_map(|c| domain::Cluster::try_from((*c).clone()).ok())
            .map(|c| (c.meta.name.clone(), c))
            .collect();
        Overrides { policies, clusters }
    }
}

/// Adds a policy read from the cache (one the api admitted, so it converts; one that does not
/// is skipped with a warning rather than stopping every render).
fn push_policy<K>(policies: &mut Vec<OverridePolicy>, policy: K)
where
    K: TryInto<OverridePolicy, Error = flotilla_proto::convert::ConvertError> + Stored,
{
    let key = policy.key();
    match policy.try_into() {
        Ok(p) => policies.push(p),
        Err(e) => {
            tracing::warn!(policy = %key, error = %e, "override policy cannot be read; skipped")
        }
    }
}

/// A create as a guarded update: compare resourceVersion 0 (absent), generation 1.
pub fn create_update(mut work: v1::Work, now: Time) -> Update<v1::Work> {
    let meta = work.metadata.get_or_insert_with(Default::default);
    meta.uid = new_uid();
    meta.creation_timestamp = Some(time_to_timestamp(now));
    meta.generation = 1;
    meta.resource_version = 0;
    Update::new(work.clone(), work)
}

/// The binding and its Works, as last read (cache first, the store after a lost CAS).
struct View {
    key: String,
    namespace: String,
    name: String,
    // shared with the caches: cloned only to write
    binding: Option<Arc<v1::ResourceBinding>>,
    works: BTreeMap<String, Arc<v1::Work>>,
}

impl View {
    fn from_cache(ctx: &Context, key: &str, namespace: &str, name: &str) -> Self {
        let works = ctx
            .works
            .by_index(INDEX_BINDING, &format!("{namespace}/{name}"))
            .into_iter()
            .map(|w| (w.key(), w))
            .collect();
        Self {
            key: key.to_owned(),
            namespace: namespace.to_owned(),
            name: name.to_owned(),
            binding: ctx.bindings.get(key),
            works,
        }
    }

    /// Re-reads the binding and every Work key involved from the store.
    async fn refresh(&mut self, ctx: &Context, extra: Vec<String>) -> Result<(), Error> {
        self.binding = ctx.typed.get(&self.key).await?.map(Arc::new);
        let mut keys: Vec<String> = self.works.keys().cloned().collect();
        keys.extend(extra);
        keys.sort();
        keys.dedup();
        for key in keys {
            match ctx.typed.get::<v1::Work>(&key).await? {
                Some(w) => {
                    self.works.insert(key, Arc::new(w));
                }
                None => {
                    self.works.remove(&key);
                }
            }
        }
        Ok(())
    }
}

enum Step {
    Done(Action),
    /// Lost a CAS: re-read these keys (plus the binding and known Works) and decide again.
    Conflict(Vec<String>),
}

/// Whether a failover is under way for the binding: it has a graceful eviction task.
pub fn in_failover(binding: &v1::ResourceBinding) -> bool {
    binding
        .spec
        .as_ref()
        .is_some_and(|s| !s.graceful_eviction_tasks.is_empty())
}

/// The parent of a binding's reconcile span while it is in failover: the span that last
/// wrote `status.traceContext` (the scheduler's reschedule, then this controller's own
/// aggregated-status writes) when it belongs to the failover's trace, else the newest
/// eviction task's (the taint manager's eviction). `None` outside a failover: reconciles
/// then start traces of their own.
pub fn failover_trace(key: &ObjectKey, ctx: &Context) -> Option<String> {
    let binding = ctx.bindings.get(key)?;
    let status = binding
        .status
        .as_ref()
        .map_or("", |s| s.trace_context.as_str());
    flotilla_runtime::trace::continue_failover(status, task_trace(&binding))
}

/// The trace context of the newest eviction task that has one ("" without).
pub fn task_trace(binding: &v1::ResourceBinding) -> &str {
    binding
        .spec
        .as_ref()
        .and_then(|s| {
            s.graceful_eviction_tasks
                .iter()
                .rev()
                .find(|t| !t.trace_context.is_empty())
        })
        .map_or("", |t| t.trace_context.as_str())
}

/// An aggregated status written during a failover carries this reconcile span's trace
/// context: graceful eviction continues it when it removes the task.
fn stamp_trace_context(new: &mut v1::ResourceBinding) {
    let trace = flotilla_runtime::trace::current();
    // only a span of this failover's trace (one started before the task existed is not)
    if in_failover(new) && flotilla_runtime::trace::same_trace(&trace, task_trace(new)) {
        new.status
            .get_or_insert_with(Default::default)
            .trace_context = trace;
    }
}

/// Reconciles one binding key (`bindings/<ns>/<name>`).
pub async fn reconcile_binding(key: ObjectKey, ctx: Arc<Context>) -> Result<Action, Error> {
    let Some((namespace, name)) = parse_binding_key(&key) else {
        tracing::warn!(%key, "not a binding key; ignored");
        return Ok(Action::await_change());
    };
    let now = ctx.clock.now();
    let mut view = View::from_cache(&ctx, &key, namespace, name);
    let mut races = Races::new(&key);
    loop {
        match sync(&ctx, &mut view, now).await? {
            Step::Done(action) => return Ok(action),
            Step::Conflict(keys) => {
                races.lost()?;
                view.refresh(&ctx, keys).await?;
            }
        }
    }
}

async fn sync(ctx: &Context, view: &mut View, now: Time) -> Result<Step, Error> {
    if view.binding.is_none()
        && view
            .works
            .values()
            .any(|w| !is_deleting(w.metadata.as_ref()))
    {
        // Before deleting Works of a binding the cache does not have, make sure it is really
        // gone: the bindings cache may lag behind the Works cache.
        view.binding = ctx.typed.get(&view.key).await?.map(Arc::new);
    }
    let binding_ref = view.binding.as_deref();
    let spec: domain::ResourceBindingSpec = match binding_ref.and_then(|b| b.spec.as_ref()) {
        Some(spec) => match domain::ResourceBindingSpec::try_from(spec.clone()) {
            Ok(s) => s,
            Err(e) => {
                tracing::warn!(binding = %view.key, error = %e, "binding spec cannot be read; skipped");
                return Ok(Step::Done(Action::await_change()));
            }
        },
        None => domain::ResourceBindingSpec::default(),
    };
    let workload = binding_ref.and_then(|b| {
        let r = b.spec.as_ref()?.resource.as_ref()?;
        ctx.workloads.get(&workload_key(
            &r.namespace,
            &r.api_version,
            &r.kind,
            &r.name,
        ))
    });
    let works: Vec<Arc<v1::Work>> = view.works.values().cloned().collect();
    let overrides = workload
        .as_deref()
        .map(|w| {
            let targets = spec.clusters.iter().map(|t| t.name.as_str());
            ctx.overrides_for(w.namespace(), targets)
        })
        .unwrap_or_default();
    let moves = MoveSettings {
        now,
        timeout: ctx.config.replica_move_timeout,
    };
    let memo = ctx
        .rendered
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .get(&view.key)
        .cloned()
        .unwrap_or_default();
    let mut decision = decide_remembering(
        binding_ref,
        &spec,
        workload.as_deref(),
        &works,
        &overrides,
        &moves,
        &memo,
    );

    // IN-7: the Works rendered from the template as it is now (before the writes take them)
    let rendered_now: std::collections::HashSet<String> =
        decision.desired(&works).map(Stored::key).collect();
    // WE-3.1 / WE-1: mark orphans deleting; the execution controller removes them once the
    // member confirms (WE-6.2..6.4).
    let mut writes: Vec<Update<v1::Work>> = Vec::new();
    for w in &decision.mark_deleting {
        let mut new = w.clone();
        new.metadata
            .get_or_insert_with(Default::default)
            .deletion_timestamp = Some(time_to_timestamp(now));
        writes.push(Update::new(w.clone(), new));
    }
    let marked = writes.len();
    // WE-3.4: create and update (none while blocked, WE-3.2); moved out of the decision,
    // which is not read for them again
    let (created, updated) = (decision.create.len(), decision.update.len());
    for w in std::mem::take(&mut decision.create) {
        writes.push(create_update(w, now));
    }
    for (old, new) in std::mem::take(&mut decision.update) {
        writes.push(Update::new(old, new));
    }
    // WE-3.5: every Work write is derived from this binding revision (absent: 0) and commits
    // only while the binding is still at it, so a Work is never written from a superseded
    // placement (e.g. scaled up after a newer revision added an eviction task for its
    // cluster). A lost guard re-reads the binding and decides again.
    let derived_from = binding_ref
        .and_then(|b| b.metadata.as_ref())
        .map_or(0, |m| m.resource_version);
    let writes: Vec<Update<v1::Work>> = writes
        .into_iter()
        .map(|u| u.guarded_by(view.key.clone(), derived_from))
        .collect();
    if !writes.is_empty() {
        let keys: Vec<String> = writes.iter().map(|u| u.new.key()).collect();
        let results = ctx.work_writer.update_all(writes).await;
        let mut conflicts = Vec::new();
        for (key, result) in keys.into_iter().zip(results) {
            match result {
                Ok(w) => {
                    view.works.insert(key, Arc::new(w));
                }
                Err(e) if e.is_conflict() || matches!(e, StoreError::NotFound { .. }) => {
                    conflicts.push(key);
                }
                Err(e) => return Err(e.into()),
            }
        }
        if !conflicts.is_empty() {
            tracing::debug!(binding = %view.key, ?conflicts, "Work writes lost a CAS; re-reading");
            return Ok(Step::Conflict(conflicts));
        }
    }
    remember_rendered(ctx, view, &decision.rendered);
    // every target's Work rendered, whatever came of it, and those taken from the memory
    let rendered = (created
        + updated
        + decision.unchanged.len()
        + decision.waiting_deletion.len()
        + decision.render_errors.len())
    .saturating_sub(decision.remembered);
    if rendered > 0 {
        metrics::counter!("flotilla_work_executor_renders_total", "outcome" => "rendered")
            .increment(rendered as u64);
    }
    if decision.remembered > 0 {
        metrics::counter!("flotilla_work_executor_renders_total", "outcome" => "remembered")
            .increment(decision.remembered as u64);
    }
    if marked > 0 {
        let clusters: Vec<&str> = decision.mark_deleting.iter().map(work_cluster).collect();
        let clusters = clusters.join(",");
        tracing::info!(binding = %view.key, cluster = %clusters, "orphan Works marked for deletion (WE-3.1)");
        ctx.recorder.record(
            Regarding::binding(&view.namespace, &view.name),
            EventType::Normal,
            "CleanupOrphanWork",
            format!("Works on {clusters} are no longer needed and are being deleted (WE-3.1)"),
            "",
        );
    }
    if created + updated > 0 {
        tracing::debug!(binding = %view.key, created, updated, "Works synced (WE-3.4)");
        ctx.recorder.record(
            Regarding::binding(&view.namespace, &view.name),
            EventType::Normal,
            "SyncWorkSucceed",
            format!("{created} Work(s) created, {updated} updated"),
            "",
        );
    }
    for (cluster, error) in &decision.render_errors {
        let overriding = decision.override_errors.iter().any(|(c, _)| c == cluster);
        tracing::warn!(binding = %view.key, cluster, error, "cannot render the Work; it is left as it was");
        ctx.recorder.record(
            Regarding::binding(&view.namespace, &view.name),
            EventType::Warning,
            if overriding {
                REASON_OVERRIDE_FAILED
            } else {
                "SyncWorkFailed"
            },
            format!("cannot render the Work for {cluster}: {error}"),
            "",
        );
    }

    let Some(binding) = view.binding.clone() else {
        return Ok(Step::Done(Action::await_change()));
    };
    if is_deleting(binding.metadata.as_ref()) {
        // WE-1: once every Work is gone, release the binding's finalizer.
        let has_finalizer = binding
            .metadata
            .as_ref()
            .is_some_and(|m| m.finalizers.iter().any(|f| f == BINDING_FINALIZER));
        if view.works.is_empty() && has_finalizer {
            let mut new = (*binding).clone();
            if let Some(m) = new.metadata.as_mut() {
                m.finalizers.retain(|f| f != BINDING_FINALIZER);
            }
            match ctx.binding_writer.update(binding.clone(), new).await {
                Ok(b) => view.binding = Some(Arc::new(b)),
                Err(e) if e.is_conflict() => return Ok(Step::Conflict(Vec::new())),
                Err(StoreError::NotFound { .. }) => {}
                Err(e) => return Err(e.into()),
            }
        }
        return Ok(Step::Done(Action::await_change()));
    }

    // WE-8: aggregated status over the Works as they are now.
    let works: Vec<Arc<v1::Work>> = view.works.values().cloned().collect();
    let previous = binding
        .status
        .as_ref()
        .map(|s| s.conditions.clone())
        .unwrap_or_default();
    let (items, condition) = aggregate(&spec, &works, &previous, now);
    // A binding without Works that never had the condition (not scheduled yet, or its
    // template is missing) gets nothing written: that write would only race the scheduler's.
    let silent = works.is_empty()
        && !previous
            .iter()
            .any(|c| c.r#type == domain::CONDITION_FULLY_APPLIED);
    let update = if silent {
        None
    } else {
        with_aggregated_status(&binding, items, condition, decision.works_current())
    };
    // OV-2: a cluster whose overrides cannot apply keeps its Work, and the binding says why
    let update = with_overrides_condition(
        &binding,
        update,
        overrides_condition(&previous, &decision.override_errors, now),
    );
    // WE-10: the binding says which shrinks are held for which growing clusters, and why.
    let held_before = previous.iter().any(|c| {
        c.r#type == CONDITION_REPLICAS_HELD && c.status == v1::ConditionStatus::True as i32
    });
    let update = with_condition(
        &binding,
        update,
        moves_condition(&previous, &decision.moves, &spec.clusters, now),
    );
    if decision.moves.holds() != held_before {
        let (reason, message) = if decision.moves.holds() {
            (
                "ReplicasHeld",
                decision.moves.describe(&spec.clusters).unwrap_or_default(),
            )
        } else {
            (
                "ReplicasReleased",
                decision.moves.describe(&spec.clusters).unwrap_or_else(|| {
                    "the growing clusters report their replicas Ready: the held shrinks proceed (WE-10.1)".into()
                }),
            )
        };
        tracing::info!(binding = %view.key, %message, "{reason} (WE-10)");
        ctx.recorder.record(
            Regarding::binding(&view.namespace, &view.name),
            EventType::Normal,
            reason,
            message,
            "",
        );
    }
    // WE-8.5: a write that only repeats what a write sure to follow will say waits for it.
    let update = update.filter(|new| {
        let answers = |cluster: &str| {
            ctx.clusters
                .get(&format!("{}{cluster}", v1::Cluster::PREFIX))
                .is_some_and(|c| cluster_ready(&c) && !is_deleting(c.metadata.as_ref()))
        };
        match hold_status(&binding, new, &works, answers) {
            Some(hold) => {
                tracing::debug!(binding = %view.key, ?hold, "status write waits (WE-8.5)");
                false
            }
            None => true,
        }
    });
    // WE-8.6: the status write that proves a replacement healthy also ends its task.
    let (update, ended) = match update {
        Some(new) => {
            let (new, ended) = end_healthy_tasks(&binding, new, &works, now);
            (Some(new), ended)
        }
        None => (None, Vec::new()),
    };
    if let Some(mut new) = update {
        stamp_trace_context(&mut new);
        match ctx.binding_writer.update(binding.clone(), new).await {
            Ok(b) => {
                view.binding = Some(Arc::new(b));
                report_ended(ctx, view, &ended);
            }
            Err(e) if e.is_conflict() => return Ok(Step::Conflict(Vec::new())),
            Err(StoreError::NotFound { .. }) => return Ok(Step::Conflict(Vec::new())),
            Err(e) => return Err(e.into()),
        }
    }

    // IN-4, IN-7: the template's status, aggregated from its members' copies
    if let (Some(workload), Some(binding)) = (workload.as_ref(), view.binding.as_ref()) {
        let current = decision.works_current();
        match write_template_status(
            ctx,
            binding,
            workload,
            (&rendered_now, current),
            &works,
            now,
        )
        .await
        {
            Ok(()) => {}
            Err(e) if e.is_conflict() || matches!(e, StoreError::NotFound { .. }) => {
                return Ok(Step::Conflict(Vec::new()));
            }
            Err(e) => return Err(e.into()),
        }
    }

    let action = if decision.blocked() {
        tracing::debug!(binding = %view.key, waiting_for = ?decision.waiting_for, "waiting for Directly-purged Works (WE-3.2)");
        Action::requeue(DIRECTLY_PURGE_RECHECK)
    } else if let Some(deadline) = decision.moves.deadline {
        // WE-10.4: the growing side's status changes queue the binding; the timeout does not.
        Action::requeue(deadline.saturating_since(now) + Duration::from_millis(10))
    } else {
        // Deleting Works of targets and missing templates are waited for through the
        // watches (a Work's deletion and a template's creation queue the binding).
        Action::await_change()
    };
    Ok(Step::Done(action))
}

/// IN-4, IN-7: writes the template's aggregated status when it changed, on the template's
/// revision the Works were rendered from (a newer template loses the CAS and the binding is
/// synced again). A member's copy counts as having observed the template's generation when
/// its Work was rendered from this template in this sync (none blocked, WE-3.2), its status
/// describes the Work as it is and it is applied, and the member's controller observed the
/// object's generation the apply returned.
async fn write_template_status(
    ctx: &Context,
    binding: &v1::ResourceBinding,
    workload: &Arc<v1::Workload>,
    (rendered, works_current): (&std::collections::HashSet<String>, bool),
    works: &[Arc<v1::Work>],
    now: Time,
) -> Result<(), StoreError> {
    use flotilla_core::aggregate::{MemberStatus, aggregate_status, aggregates};
    if !aggregates(&workload.api_version, &workload.kind) || is_deleting(workload.metadata.as_ref())
    {
        return Ok(());
    }
    let Some(spec) = binding.spec.as_ref() else {
        return Ok(());
    };
    let parsed: Vec<(&str, Option<serde_json::Value>, bool)> = spec
        .clusters
        .iter()
        .map(|target| {
            let work = works
                .iter()
                .find(|w| work_cluster(w) == target.name && !is_deleting(w.metadata.as_ref()));
            let status = work
                .and_then(|w| w.status.as_ref())
                .filter(|s| s.observed_generation == work.map_or(0, |w| w.generation()))
                .filter(|s| applied_state(s) == Some(true))
                .and_then(|s| serde_json::from_str::<serde_json::Value>(&s.resource_status).ok())
                .filter(serde_json::Value::is_object);
            let observed = works_current
                && work.is_some_and(|w| {
                    rendered.contains(&w.key()) && {
                        let member_generation =
                            w.status.as_ref().map_or(0, |s| s.member_generation);
                        let seen = status
                            .as_ref()
                            .and_then(|s| s.get("observedGeneration"))
                            .and_then(serde_json::Value::as_i64)
                            .unwrap_or(0);
                        status.is_some() && (member_generation == 0 || seen >= member_generation)
                    }
                });
            (target.name.as_str(), status, observed)
        })
        .collect();
    let members: Vec<MemberStatus<'_>> = parsed
        .iter()
        .map(|(cluster, status, observed)| MemberStatus {
            cluster,
            status: status.as_ref(),
            observed: *observed,
        })
        .collect();
    let template: serde_json::Value =
        serde_json::from_str(&workload.manifest).unwrap_or(serde_json::Value::Null);
    let old: Option<serde_json::Value> = (!workload.status.is_empty())
        .then(|| serde_json::from_str(&workload.status).ok())
        .flatten();
    let stamp = time_to_timestamp(now);
    let stamp = prost_types::Timestamp { nanos: 0, ..stamp }.to_string();
    let Some(status) = aggregate_status(
        &workload.api_version,
        &workload.kind,
        &template,
        workload.generation(),
        old.as_ref(),
        &members,
        &stamp,
    ) else {
        return Ok(());
    };
    if old.as_ref() == Some(&status) || (old.is_none() && status == serde_json::json!({})) {
        return Ok(());
    }
    let mut new = (**workload).clone();
    new.status = status.to_string();
    ctx.template_writer.update(workload.clone(), new).await?;
    tracing::debug!(template = %workload.key(), status = %status, "template status aggregated (IN-4)");
    Ok(())
}

/// #31: remembers, once every Work write of the sync committed, which Works are as their
/// rendering inputs render them ([`Rendered`]), replacing what was remembered of the binding.
fn remember_rendered(ctx: &Context, view: &View, rendered: &[(String, u64)]) {
    let memo: RenderMemo = rendered
        .iter()
        .filter_map(|(key, inputs)| {
            let work = view.works.get(key)?;
            (!is_deleting(work.metadata.as_ref()))
                .then(|| (key.clone(), Rendered::of(work, *inputs)))
        })
        .collect();
    let mut all = ctx.rendered.lock().unwrap_or_else(PoisonError::into_inner);
    if memo.is_empty() {
        all.remove(&view.key);
    } else {
        all.insert(view.key.clone(), memo);
    }
}

/// Logs, counts and records the eviction tasks a status write ended (WE-8.6), as graceful
/// eviction does for the tasks it removes.
fn report_ended(ctx: &Context, view: &View, ended: &[String]) {
    for cluster in ended {
        tracing::info!(
            binding = %view.key,
            cluster = %cluster,
            verdict = "ReplacementHealthy",
            "graceful eviction task ended by the status write that proves the replacement healthy (WE-8.6)"
        );
        metrics::counter!("flotilla_work_executor_eviction_tasks_ended_total").increment(1);
        ctx.recorder.record(
            Regarding::binding(&view.namespace, &view.name),
            EventType::Normal,
            "EvictWorkloadFromClusterSucceed",
            format!(
                "eviction from cluster {cluster} finished: every new target reports Healthy \
                 (GE-4.3, ended by the work executor's status write, WE-8.6)"
            ),
            "",
        );
    }
}

/// Error policy: retry soon; the queue's per-key back-off grows with repeated failures.
pub fn error_policy(_key: &ObjectKey, error: &Error, _ctx: &Context) -> Action {
    match error {
        Error::Contended(_) => Action::requeue(Duration::from_millis(10)),
        _ => Action::requeue(Duration::from_millis(500)),
    }
}

/// The binding key a Work event is about (from the Work's binding reference).
pub fn binding_of_work(work: &v1::Work) -> Option<String> {
    let b = work.spec.as_ref()?.binding.as_ref()?;
    // an empty namespace: the Work of a ClusterResourceBinding
    (!b.name.is_empty()).then(|| binding_key(&b.namespace, &b.name))
}
