//! The health reconciler: one key per cluster; reads the caches, calls
//! [`assess`](crate::assess::assess) with `now`, and writes the cluster's status and controller
//! taints in ONE compare-and-swap.
//!
//! ```text
//!   triggers: cluster change, probe observation, heartbeat record change, any taint-policy
//!             change (every cluster), binding change (clusters being deleted), requeue at
//!             the next deadline (CH-4 threshold, CH-10 timeout, CH-9 grace)
//!   reconcile(cluster):
//!     cache → assess(observation, heartbeat, memory, policies, now)
//!       deleting and nothing references it → delete the Cluster (CAS on its revision, CH-15)
//!       status or taints changed → Typed::update(old, new)  (conflict → re-read, re-decide)
//!     remember the CH-4 / CH-9 memory; Action::requeue(earliest deadline)
//! ```

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::sync::{Mutex, PoisonError};
use std::time::Duration;

use flotilla_core::Time;
use flotilla_core::types::{ClusterTaintPolicy, ConditionStatus};
use flotilla_proto::v1;
use flotilla_runtime::cas::{Lost, Races};
use flotilla_runtime::{Action, Cache, EventType, Recorder, Regarding};
use flotilla_store::typed::Typed;
use flotilla_store::{Compare, CompareOp, KeyValue, Op, RangeRequest, StoreError, StoreRef, Txn};

use crate::assess::{
    Decision, Inputs, Memory, Observation, Options, assess, describe_taint_change,
};
use crate::error::Error;
use crate::heartbeat;
use crate::probe::Observations;

/// Index of the bindings cache: the clusters a binding references.
pub const BINDING_INDEX: &str = "cluster";

/// What cluster-health needs of a binding: the clusters it references (targets and eviction
/// tasks), which keep a deleting cluster alive (CH-15.4).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct BindingRefs {
    /// Target clusters and the `fromCluster` of every graceful eviction task.
    pub clusters: Vec<String>,
}

/// Decodes a stored binding into the clusters it references.
pub fn decode_binding_refs(kv: &KeyValue) -> Result<BindingRefs, String> {
    let b: v1::ResourceBinding = flotilla_store::typed::decode(kv).map_err(|e| e.to_string())?;
    let mut clusters: Vec<String> = Vec::new();
    if let Some(spec) = b.spec {
        clusters.extend(spec.clusters.into_iter().map(|t| t.name));
        clusters.extend(
            spec.graceful_eviction_tasks
                .into_iter()
                .map(|t| t.from_cluster),
        );
    }
    clusters.sort();
    clusters.dedup();
    Ok(BindingRefs { clusters })
}

/// The index function of [`BINDING_INDEX`].
pub fn index_binding(b: &BindingRefs) -> Vec<String> {
    b.clusters.clone()
}

#[derive(Debug)]
struct ClusterMemory {
    uid: String,
    memory: Memory,
}

/// Everything a reconcile reads and writes.
pub struct Context {
    /// Rule timers and switches.
    pub options: Options,
    /// `--cluster-status-update-frequency`: also how often a deleting cluster is checked.
    pub frequency: Duration,
    /// `--probe-timeout`: a Push observation older than 3 frequencies + this is stale.
    pub probe_timeout: Duration,
    /// Clusters (wire objects, with resourceVersion).
    pub clusters: Cache<v1::Cluster>,
    /// ClusterTaintPolicies.
    pub policies: Cache<ClusterTaintPolicy>,
    /// Heartbeat records.
    pub heartbeats: Cache<v1::HeartbeatRecord>,
    /// Bindings, indexed by the clusters they reference.
    pub bindings: Cache<BindingRefs>,
    /// Latest probe of every Push cluster.
    pub observations: Arc<Observations>,
    /// Typed access through the fenced store (writes only while leading).
    pub typed: Typed,
    /// The fenced store (heartbeat record clean-up, Work look-ups).
    pub store: StoreRef,
    /// Events.
    pub recorder: Recorder,
    memory: Mutex<HashMap<String, ClusterMemory>>,
    deleting: Mutex<HashSet<String>>,
    /// A13: whether this replica can observe now, and since when.
    observing: Mutex<Observing>,
    /// The wall clock decisions read.
    pub clock: flotilla_runtime::Clock,
}

/// A13: this replica's own ability to observe. Blind from the start until the store first
/// answers and the heartbeat cache has caught up with it, and again whenever the store stops
/// answering; `since` is when observation last resumed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Observing {
    /// The store does not answer (or the caches have not caught up since it came back).
    pub blind: bool,
    /// When observation last (re)started; no grace period counts from before it.
    pub since: Time,
}

impl std::fmt::Debug for Context {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Context")
            .field("options", &self.options)
            .field("frequency", &self.frequency)
            .field("clusters", &self.clusters.len())
            .finish_non_exhaustive()
    }
}

/// The key of a cluster.
pub fn cluster_key(name: &str) -> String {
    format!("clusters/{name}")
}

// === impl Context ===

impl Context {
    /// A context; `typed` and `store` should be fenced by the leader election.
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        options: Options,
        frequency: Duration,
        probe_timeout: Duration,
        clusters: Cache<v1::Cluster>,
        policies: Cache<ClusterTaintPolicy>,
        heartbeats: Cache<v1::HeartbeatRecord>,
        bindings: Cache<BindingRefs>,
        observations: Arc<Observations>,
        store: StoreRef,
        recorder: Recorder,
        clock: flotilla_runtime::Clock,
    ) -> Self {
        Context {
            clock,
            options,
            frequency,
            probe_timeout,
            clusters,
            policies,
            heartbeats,
            bindings,
            observations,
            typed: Typed::new(store.clone()),
            store,
            recorder,
            memory: Mutex::default(),
            deleting: Mutex::default(),
            observing: Mutex::new(Observing {
                blind: true,
                since: Time::EPOCH,
            }),
        }
    }

    /// A13: this replica's ability to observe.
    pub fn observing(&self) -> Observing {
        *self
            .observing
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// A13: the store stopped answering at `now`: nothing is judged until it answers again.
    /// Returns whether this is news.
    pub fn store_lost(&self, now: Time) -> bool {
        let mut o = self
            .observing
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        let news = !o.blind;
        o.blind = true;
        if news {
            tracing::warn!(
                at = %now,
                "A13: the store does not answer; no cluster is judged until it does, and \
                 every cluster then gets a fresh grace period"
            );
        }
        news
    }

    /// A13: the store answers again and the caches caught up at `now`: observation resumes,
    /// and every grace period counts from now. Returns whether this is news.
    pub fn observation_resumed(&self, now: Time) -> bool {
        let mut o = self
            .observing
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if !o.blind {
            return false;
        }
        *o = Observing {
            blind: false,
            since: now,
        };
        tracing::info!(
            since = %now,
            "A13: observing; every cluster's grace period counts from now at the earliest"
        );
        true
    }

    fn memory_of(&self, name: &str, uid: &str) -> Memory {
        let memory = self.memory.lock().unwrap_or_else(PoisonError::into_inner);
        match memory.get(name) {
            // a re-created cluster starts afresh
            Some(m) if m.uid == uid => m.memory.clone(),
            _ => Memory::default(),
        }
    }

    fn remember(&self, name: &str, uid: &str, memory: Memory) {
        self.memory
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(
                name.to_owned(),
                ClusterMemory {
                    uid: uid.to_owned(),
                    memory,
                },
            );
    }

    /// The memory kept for a cluster (tests and diagnostics).
    pub fn memory(&self, name: &str) -> Option<Memory> {
        self.memory
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get(name)
            .map(|m| m.memory.clone())
    }

    /// Notes whether a cluster is being deleted (from the cluster watch); binding changes
    /// re-check those clusters.
    pub fn note_deleting(&self, name: &str, deleting: bool) {
        let mut set = self.deleting.lock().unwrap_or_else(PoisonError::into_inner);
        if deleting {
            set.insert(name.to_owned());
        } else {
            set.remove(name);
        }
    }

    /// The clusters being deleted.
    pub fn deleting(&self) -> Vec<String> {
        self.deleting
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .iter()
            .cloned()
            .collect()
    }

    /// Drops everything kept about a cluster that is gone, including its heartbeat record.
    async fn forget(&self, name: &str) -> Result<(), Error> {
        self.memory
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(name);
        self.observations.remove(name);
        self.note_deleting(name, false);
        let key = heartbeat::key(name);
        if let Some(obj) = self.heartbeats.get_object(&key) {
            let txn = Txn::new()
                .when(Compare::mod_revision(&key, CompareOp::Equal, obj.revision))
                .and_then(Op::delete(&key));
            // a newer record (the cluster was re-created meanwhile) stays
            self.store.txn(txn).await?;
        }
        Ok(())
    }

    /// CH-15.4: whether a binding (target or eviction task) or a Work still references the
    /// cluster (the api's DeleteCluster holds on the same two).
    ///
    /// The cache answers "yes" cheaply; a "no" is confirmed in the store, because the bindings
    /// cache may lag behind the clusters cache (a binding created just before the cluster was
    /// marked). A deletion is rare, so one paged read of the bindings is fine here.
    async fn referenced(&self, name: &str) -> Result<bool, Error> {
        if !self.bindings.index_keys(BINDING_INDEX, name).is_empty() {
            return Ok(true);
        }
        let (bindings, _) = self.store.list("bindings/", 500).await?;
        for kv in &bindings {
            match decode_binding_refs(kv) {
                Ok(refs) if refs.clusters.iter().any(|c| c == name) => return Ok(true),
                Ok(_) => {}
                // an undecodable binding might reference it: keep the cluster
                Err(_) => return Ok(true),
            }
        }
        let works = self
            .store
            .range(
                RangeRequest::prefix(flotilla_store::typed::works_on_cluster_prefix(name))
                    .with_limit(1),
            )
            .await?;
        Ok(!works.kvs.is_empty())
    }

    /// The observation and last heartbeat of a cluster.
    fn observation_of(
        &self,
        cluster: &v1::Cluster,
        now: Time,
    ) -> (Option<Observation>, Option<Time>) {
        let name = cluster.metadata.as_ref().map_or("", |m| m.name.as_str());
        let uid = cluster.metadata.as_ref().map_or("", |m| m.uid.as_str());
        let pull = cluster
            .spec
            .as_ref()
            .is_some_and(|s| s.sync_mode == v1::SyncMode::Pull as i32);
        if pull {
            let Some(record) = self.heartbeats.get(&heartbeat::key(name)) else {
                return (None, None);
            };
            // a record left by an earlier cluster of the same name is not this one's
            if !record.cluster_uid.is_empty() && !uid.is_empty() && record.cluster_uid != uid {
                return (None, None);
            }
            (
                heartbeat::observation(&record),
                heartbeat::renew_time(&record),
            )
        } else {
            // A probe that old means the prober stopped (e.g. leadership moved): not an
            // observation of the present.
            let stale = self.frequency * 3 + self.probe_timeout;
            let observation = self
                .observations
                .get(name)
                .filter(|(_, at)| now.saturating_since(*at) <= stale)
                .map(|(o, _)| o);
            (observation, None)
        }
    }
}

/// Whether the cluster's Ready condition is True and it is not being deleted.
pub fn ready_and_kept(c: &v1::Cluster) -> bool {
    ready_of(c).is_some_and(|(status, _)| status == v1::ConditionStatus::True as i32)
        && c.metadata
            .as_ref()
            .is_none_or(|m| m.deletion_timestamp.is_none())
}

fn ready_of(c: &v1::Cluster) -> Option<(i32, String)> {
    c.status.as_ref().and_then(|s| {
        s.conditions
            .iter()
            .find(|c| c.r#type == flotilla_core::types::CONDITION_READY)
            .map(|c| (c.status, c.reason.clone()))
    })
}

/// Logs and records what a successful write changed (once, at info, with the cluster).
fn report(ctx: &Context, name: &str, old: &v1::Cluster, d: &Decision) {
    if let Some(ready) = &d.ready {
        let before = ready_of(old);
        let now = (
            v1::ConditionStatus::from(ready.status) as i32,
            ready.reason.clone(),
        );
        if before.as_ref() != Some(&now) {
            tracing::info!(
                cluster = %name,
                ready = ready.status.as_str(),
                reason = %ready.reason,
                "Ready condition changed"
            );
            let type_ = if ready.status == ConditionStatus::True {
                EventType::Normal
            } else {
                EventType::Warning
            };
            ctx.recorder.record(
                Regarding::cluster(name),
                type_,
                &ready.reason,
                format!("Ready={}: {}", ready.status.as_str(), ready.message),
                "",
            );
        }
    }
    if d.taints_changed {
        let change = describe_taint_change(&d.added, &d.removed);
        tracing::info!(cluster = %name, taints = %change, "cluster taints updated");
        // CH-12.5
        ctx.recorder.record(
            Regarding::cluster(name),
            EventType::Normal,
            "TaintClusterSucceed",
            format!("taints {change}"),
            "",
        );
    }
    tracing::debug!(cluster = %name, reasons = ?d.reasons, "assessed");
}

/// A taint about to be written: one already on the cluster keeps the trace context it was
/// added with; a new one gets this reconcile span's (the eviction it causes continues it).
fn with_trace_context(mut taint: v1::Taint, previous: &[v1::Taint]) -> v1::Taint {
    taint.trace_context = previous
        .iter()
        .find(|p| p.key == taint.key && p.effect == taint.effect)
        .map(|p| p.trace_context.clone())
        .unwrap_or_else(flotilla_runtime::trace::current);
    taint
}

/// Reconciles one cluster (see the module docs).
pub async fn reconcile(name: String, ctx: Arc<Context>) -> Result<Action, Error> {
    let now = ctx.clock.now();
    let key = cluster_key(&name);
    let observing = ctx.observing();
    if observing.blind {
        // A13: the control plane's own blindness is not evidence against the member; the
        // pulse queues every cluster again once observation resumes.
        return Ok(Action::requeue(ctx.options.monitor_period));
    }
    let mut first = ctx.clusters.get(&key).map(|c| (*c).clone());
    let policies: Vec<ClusterTaintPolicy> =
        ctx.policies.list().iter().map(|p| (**p).clone()).collect();
    let mut races = Races::new(&key);
    let mut lost = None;
    loop {
        let cluster = Lost::next(lost.take(), &mut first, || ctx.typed.get(&key)).await?;
        let Some(current) = cluster else {
            ctx.forget(&name).await?;
            return Ok(Action::await_change());
        };
        let meta = current.metadata.clone().unwrap_or_default();
        let (observation, last_heartbeat) = ctx.observation_of(&current, now);
        let decision = assess(Inputs {
            cluster: &current,
            observation: observation.as_ref(),
            last_heartbeat,
            ready_transition: None,
            memory: ctx.memory_of(&name, &meta.uid),
            observing_since: observing.since,
            policies: &policies,
            options: &ctx.options,
            now,
        })
        .map_err(|source| Error::Convert {
            key: key.clone(),
            source,
        })?;

        let deleting = meta.deletion_timestamp.is_some();
        if deleting && !ctx.referenced(&name).await? {
            // CH-15 / A2: nothing references the cluster any more: it goes.
            match ctx.typed.delete(&key, Some(meta.resource_version)).await {
                Ok(_) => {
                    tracing::info!(cluster = %name, "deleted cluster removed: no binding or Work references it");
                    ctx.recorder.record(
                        Regarding::cluster(&name),
                        EventType::Normal,
                        "ClusterRemoved",
                        "no binding or Work references the cluster any more",
                        "",
                    );
                    ctx.forget(&name).await?;
                    return Ok(Action::await_change());
                }
                Err(e) => {
                    lost = Some(races.after::<Error>(e)?);
                    continue;
                }
            }
        }

        if decision.status_changed || decision.taints_changed {
            let mut new = current.clone();
            if decision.taints_changed {
                let previous = current
                    .spec
                    .as_ref()
                    .map(|s| s.taints.as_slice())
                    .unwrap_or(&[]);
                new.spec.get_or_insert_with(Default::default).taints = decision
                    .taints
                    .iter()
                    .cloned()
                    .map(v1::Taint::from)
                    .map(|t| with_trace_context(t, previous))
                    .collect();
            }
            new.status = Some(decision.status.clone());
            match ctx.typed.update(&current, new).await {
                Ok(_) => report(&ctx, &name, &current, &decision),
                // someone (the api, another writer) changed or removed the cluster: the loop
                // re-reads and decides again
                Err(e) if e.is_conflict() || matches!(e, StoreError::NotFound { .. }) => {
                    lost = Some(races.after::<Error>(e)?);
                    continue;
                }
                Err(e) => {
                    ctx.recorder.record(
                        Regarding::cluster(&name),
                        EventType::Warning,
                        "TaintClusterFailed",
                        format!("cannot write the cluster's status and taints: {e}"),
                        "",
                    );
                    return Err(e.into());
                }
            }
        } else {
            tracing::debug!(cluster = %name, reasons = ?decision.reasons, "no change");
        }
        ctx.remember(&name, &meta.uid, decision.memory);
        let mut requeue = decision.requeue_after;
        if deleting {
            // CH-15.4: look again every CleanupCheckInterval (Karmada: 10s)
            requeue = Some(requeue.map_or(ctx.frequency, |d| d.min(ctx.frequency)));
        }
        return Ok(requeue.map_or_else(Action::await_change, Action::requeue));
    }
}

/// After a failure: retry with the queue's back-off (store errors are usually transient).
pub fn error_policy(_name: &String, error: &Error, _ctx: &Context) -> Action {
    match error {
        // a malformed stored cluster waits for the api to fix it
        Error::Convert { .. } => Action::await_change(),
        _ => Action::requeue(Duration::from_millis(100)),
    }
}
