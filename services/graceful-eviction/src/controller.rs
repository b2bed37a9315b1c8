//! The graceful-eviction controller: one key per binding with eviction tasks (or with
//! application failover, or a `ReplacementPending` condition to clear).
//!
//! ```text
//!   bindings watch ──► Cache<wire binding> ──mapper──► WorkQueue<binding key>
//!     create AND update events (and a full pass after every list): a restart resumes (#3467)
//!                                                          │ workers, leader only
//!                                                          ▼
//!   reconcile: plan(binding, app memory, --graceful-eviction-timeout, now)     (plan.rs)
//!        unchanged → requeue per GE-6 / GE-8
//!        changed   → CAS the binding (BatchWriter, update_many): tasks stamped/removed,
//!                    app-failover evictions, ReplacementPending; conflict → re-read, re-plan
//!                    events: EvictWorkloadFromClusterSucceed per removed task, ...
//! ```

use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use flotilla_core::Time;
use flotilla_core::types::{CONDITION_REPLACEMENT_PENDING, ResourceBinding};
use flotilla_proto::v1;
use flotilla_runtime::cas::{Lost, Races};
use flotilla_runtime::{Action, Cache, Event, EventType, Regarding, Writes};

use crate::Config;
use flotilla_store::ObjectKey;

use crate::error::Error;
use crate::plan::{AppInputs, Plan, describe, plan};
use flotilla_core::graceful::Collection;
use flotilla_store::typed::Stored as _;

/// The parent of a binding's reconcile span while it has an eviction task: the span that
/// last wrote `status.traceContext` (scheduler, then work executor) when it belongs to the
/// failover's trace, else the newest task's (the eviction). `None` otherwise.
pub fn failover_trace(key: &ObjectKey, ctx: &Context) -> Option<String> {
    let binding = ctx.bindings.get(key)?;
    let task = binding
        .spec
        .as_ref()?
        .graceful_eviction_tasks
        .iter()
        .rev()
        .find(|t| !t.trace_context.is_empty())?;
    let status = binding
        .status
        .as_ref()
        .map_or("", |s| s.trace_context.as_str());
    flotilla_runtime::trace::continue_failover(status, &task.trace_context)
}

/// Everything a reconcile needs.
pub struct Context {
    pub(crate) config: Config,
    pub(crate) bindings: Cache<v1::ResourceBinding>,
    /// GE-8.7: the status collector's last pass over each cluster.
    pub(crate) collections: Cache<v1::StatusCollection>,
    pub(crate) writes: Writes<v1::ResourceBinding>,
    /// GE-8.2: per binding, `{cluster → first time seen Unhealthy}`. In memory only, as in
    /// Karmada: a restart starts the toleration over.
    app_memory: Mutex<HashMap<String, BTreeMap<String, Time>>>,
    /// The wall clock decisions read.
    pub(crate) clock: flotilla_runtime::Clock,
}

impl fmt::Debug for Context {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Context")
            .field("bindings", &self.bindings)
            .finish_non_exhaustive()
    }
}

// === impl Context ===

impl Context {
    pub(crate) fn new(
        config: Config,
        bindings: Cache<v1::ResourceBinding>,
        collections: Cache<v1::StatusCollection>,
        writes: Writes<v1::ResourceBinding>,
        clock: flotilla_runtime::Clock,
    ) -> Self {
        Context {
            clock,
            config,
            bindings,
            collections,
            writes,
            app_memory: Mutex::new(HashMap::new()),
        }
    }

    fn memory(&self) -> std::sync::MutexGuard<'_, HashMap<String, BTreeMap<String, Time>>> {
        self.app_memory
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    fn remember(&self, key: &str, memory: Option<BTreeMap<String, Time>>) {
        let mut all = self.memory();
        match memory {
            Some(m) => {
                all.insert(key.to_owned(), m);
            }
            None => {
                all.remove(key);
            }
        }
    }
}

/// Whether a binding is this controller's business: it has tasks (GE-1.2), application
/// failover (GE-8), or a `ReplacementPending=True` condition to clear (A6).
pub fn interesting(binding: &v1::ResourceBinding) -> bool {
    let spec = binding.spec.as_ref();
    spec.is_some_and(|s| !s.graceful_eviction_tasks.is_empty())
        || spec
            .and_then(|s| s.failover.as_ref())
            .is_some_and(|f| f.application.is_some())
        || binding.status.as_ref().is_some_and(|s| {
            s.conditions.iter().any(|c| {
                c.r#type == CONDITION_REPLACEMENT_PENDING
                    && c.status == v1::ConditionStatus::True as i32
            })
        })
}

/// GE-8.7: the last pass the status collector recorded over `cluster`, if any.
fn collection(cache: &Cache<v1::StatusCollection>, cluster: &str) -> Option<Collection> {
    let mark = cache.get(&format!("{}{cluster}", v1::StatusCollection::PREFIX))?;
    let time = |t: &Option<prost_types::Timestamp>| {
        t.as_ref()
            .and_then(|t| flotilla_proto::convert::timestamp_to_time(t).ok())
    };
    Some(Collection {
        started: time(&mark.started_at)?,
        finished: time(&mark.finished_at)?,
        period: mark
            .period
            .and_then(|p| flotilla_proto::convert::duration_from_wire(&p).ok())
            .unwrap_or_default(),
    })
}

/// The queue keys for a watcher event: create AND update events of interesting bindings
/// (#3467: a restart resumes), every interesting binding after a (re-)list, and deletions
/// (to drop the application failover memory).
pub fn keys_for(
    cache: &Cache<v1::ResourceBinding>,
    event: &Event<v1::ResourceBinding>,
) -> Vec<ObjectKey> {
    match event {
        Event::Apply(obj) => {
            if interesting(&obj.value) {
                vec![obj.key.as_str().into()]
            } else {
                Vec::new()
            }
        }
        Event::Delete { key, .. } => vec![key.as_str().into()],
        Event::InitDone { .. } => cache
            .objects()
            .into_iter()
            .filter(|o| interesting(&o.value))
            .map(|o| o.key.into())
            .collect(),
        Event::Init { .. } | Event::InitApply(_) | Event::Progress { .. } => Vec::new(),
    }
}

fn action(requeue: Option<Duration>) -> Action {
    requeue.map_or_else(Action::await_change, Action::requeue)
}

/// The wire binding with the plan's lists and conditions; every other field as read.
fn apply_to_wire(wire: &v1::ResourceBinding, plan: &Plan) -> v1::ResourceBinding {
    let mut new = wire.clone();
    let spec = new.spec.get_or_insert_with(Default::default);
    spec.clusters = plan.clusters.iter().cloned().map(Into::into).collect();
    spec.graceful_eviction_tasks = plan.tasks.iter().cloned().map(Into::into).collect();
    if plan.status_changed {
        let status = new.status.get_or_insert_with(Default::default);
        status.conditions = plan.conditions.iter().cloned().map(Into::into).collect();
    }
    new
}

/// Logs and events of a written step, once each.
fn report(ctx: &Context, key: &ObjectKey, before: &ResourceBinding, plan: &Plan) {
    let (namespace, name) = key.namespace_name();
    let regarding = Regarding::binding(namespace, name);
    for cluster in &plan.app_evicted {
        tracing::info!(
            cluster = %cluster,
            binding = %key,
            reason = "ApplicationFailure",
            "application failover: evicted binding from cluster (GE-8)"
        );
        metrics::counter!("flotilla_graceful_eviction_application_failovers_total").increment(1);
        ctx.writes.recorder.record(
            regarding,
            EventType::Warning,
            "EvictWorkloadFromCluster",
            format!("application failover: the workload on cluster {cluster} stayed Unhealthy"),
            "",
        );
    }
    for (cluster, verdict) in &plan.assessment.verdicts {
        if !verdict.removes() {
            continue;
        }
        tracing::info!(
            cluster = %cluster,
            binding = %key,
            verdict = ?verdict,
            "graceful eviction task removed"
        );
        metrics::counter!(
            "flotilla_graceful_eviction_tasks_removed_total",
            "verdict" => format!("{verdict:?}")
        )
        .increment(1);
        ctx.writes.recorder.record(
            regarding,
            EventType::Normal,
            "EvictWorkloadFromClusterSucceed",
            format!(
                "eviction from cluster {cluster} finished: {}",
                describe(*verdict)
            ),
            "",
        );
    }
    let was_pending = before.status.conditions.iter().any(|c| {
        c.type_ == CONDITION_REPLACEMENT_PENDING
            && c.status == flotilla_core::types::ConditionStatus::True
    });
    if plan.replacement_pending && !was_pending {
        let kept: Vec<&str> = plan.tasks.iter().map(|t| t.from_cluster.as_str()).collect();
        tracing::info!(binding = %key, kept = ?kept, "A6: no replacement fits; keeping the evicted copies");
        ctx.writes.recorder.record(
            regarding,
            EventType::Warning,
            "ReplacementPending",
            format!(
                "no target cluster fits; the workload keeps running on {}",
                kept.join(", ")
            ),
            "",
        );
    } else if !plan.replacement_pending && was_pending {
        tracing::info!(binding = %key, "A6: replacement pending cleared");
    }
}

/// GE-2: assess one binding's tasks (and application failover) and write the result.
pub async fn reconcile(key: ObjectKey, ctx: Arc<Context>) -> Result<Action, Error> {
    let now = ctx.clock.now();
    // #31: the cached binding is shared, not cloned; it is copied once to convert it, and
    // once more only when there is something to write
    let first = ctx.bindings.get(&key);
    let mut races = Races::new(&key);
    let mut current = first;
    loop {
        let Some(wire) = current else {
            ctx.remember(&key, None);
            return Ok(Action::await_change());
        };
        let binding = match ResourceBinding::try_from((*wire).clone()) {
            Ok(b) => b,
            Err(source) => {
                tracing::warn!(binding = %key, error = %source, "cannot decode binding");
                return Ok(Action::await_change());
            }
        };
        // GE-1.2: deleting bindings are skipped.
        if binding.meta.deletion_timestamp.is_some() {
            ctx.remember(&key, None);
            return Ok(Action::await_change());
        }
        let memory = ctx.memory().get(key.as_str()).cloned().unwrap_or_default();
        let collected = |cluster: &str| collection(&ctx.collections, cluster);
        let app = AppInputs {
            memory: &memory,
            collected: &collected,
        };
        let step = plan(&binding, Some(app), ctx.config.default_timeout, now);
        for (cluster, why) in &step.app_postponed {
            tracing::info!(
                cluster = %cluster, binding = %key, %why,
                "application failover: eviction postponed until the state can be preserved (TM-10.2)"
            );
        }
        if !step.changed() {
            ctx.remember(&key, step.app_memory.clone());
            return Ok(action(step.requeue));
        }
        let new = apply_to_wire(&wire, &step);
        // I5: a conflict means another writer (scheduler, taint manager, work executor) got
        // there first: the loop re-reads and re-plans at once.
        match ctx.writes.writer.update(wire.clone(), new).await {
            Ok(_) => {
                ctx.remember(&key, step.app_memory.clone());
                report(&ctx, &key, &binding, &step);
                return Ok(action(step.requeue));
            }
            Err(e) => {
                current = match races.after::<Error>(e)? {
                    Lost::Changed => ctx.writes.typed.get(&key).await?.map(Arc::new),
                    Lost::Gone => None,
                }
            }
        }
    }
}

/// After a failed reconcile: retry after the queue's back-off.
pub fn error_policy(_key: &ObjectKey, _error: &Error, _ctx: &Context) -> Action {
    Action::requeue(Duration::from_millis(5))
}
