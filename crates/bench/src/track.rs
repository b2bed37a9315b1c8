//! Follows the store while `flotilla bench failover` runs: how many bindings have settled
//! (scheduled, applied, Ready), and for every binding on the failed cluster when it reached
//! each stage of its failover.
//!
//! ```text
//!   store watch bindings/ ─┐  (decoded into "lite" messages: only the fields read here,
//!   store watch works/ ────┼─► Tracker (one task, timestamps at receipt) ─► Arc<Mutex<…>>
//!   store watch clusters/ ─┘                                                 read by the bench
//! ```
//!
//! Per affected binding, stages are recorded the first time they hold:
//! evicted (the failed cluster left `spec.clusters` or got an eviction task) → rescheduled
//! (`spec.clusters` sums to `spec.replicas` without it, scheduler observed = generation) →
//! Works applied (every target's Work carries its replicas and is applied at its generation)
//! → Ready (aggregated status of the binding's generation: every target Healthy with its
//! replicas Ready) → task removed (no eviction task for the failed cluster any more).

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Instant;

use flotilla_proto::v1;
use flotilla_runtime::{Event, Shutdown, WatcherConfig, watcher};
use flotilla_store::{KeyValue, StoreRef};
use futures::StreamExt as _;

// === lite messages: the tags of proto/flotilla/v1/resources.proto, only what we read ===

/// `ObjectMeta`: generation and deletion mark.
#[derive(Clone, PartialEq, prost::Message)]
pub struct LiteMeta {
    /// `generation`.
    #[prost(int64, tag = "5")]
    pub generation: i64,
    /// `deletion_timestamp`.
    #[prost(message, optional, tag = "9")]
    pub deletion_timestamp: Option<prost_types::Timestamp>,
}

/// `GracefulEvictionTask`: its cluster.
#[derive(Clone, PartialEq, prost::Message)]
pub struct LiteTask {
    /// `from_cluster`.
    #[prost(string, tag = "1")]
    pub from_cluster: String,
}

/// `ResourceBindingSpec`: replicas, result and tasks.
#[derive(Clone, PartialEq, prost::Message)]
pub struct LiteBindingSpec {
    /// `replicas`.
    #[prost(int32, tag = "2")]
    pub replicas: i32,
    /// `clusters`.
    #[prost(message, repeated, tag = "5")]
    pub clusters: Vec<v1::TargetCluster>,
    /// `graceful_eviction_tasks`.
    #[prost(message, repeated, tag = "6")]
    pub tasks: Vec<LiteTask>,
}

/// `AggregatedStatusItem`: cluster, health and ready replicas.
#[derive(Clone, PartialEq, prost::Message)]
pub struct LiteItem {
    /// `cluster_name`.
    #[prost(string, tag = "1")]
    pub cluster_name: String,
    /// `health`.
    #[prost(int32, tag = "5")]
    pub health: i32,
    /// `ready_replicas`.
    #[prost(int32, tag = "6")]
    pub ready_replicas: i32,
}

/// `ResourceBindingStatus`: what the scheduler and the work executor observed.
#[derive(Clone, PartialEq, prost::Message)]
pub struct LiteBindingStatus {
    /// `scheduler_observed_generation`.
    #[prost(int64, tag = "2")]
    pub scheduler_observed_generation: i64,
    /// `aggregated_status`.
    #[prost(message, repeated, tag = "6")]
    pub aggregated_status: Vec<LiteItem>,
    /// `aggregated_status_observed_generation`.
    #[prost(int64, tag = "7")]
    pub aggregated_status_observed_generation: i64,
}

/// `ResourceBinding`, lite.
#[derive(Clone, PartialEq, prost::Message)]
pub struct LiteBinding {
    /// `metadata`.
    #[prost(message, optional, tag = "1")]
    pub metadata: Option<LiteMeta>,
    /// `spec`.
    #[prost(message, optional, tag = "2")]
    pub spec: Option<LiteBindingSpec>,
    /// `status`.
    #[prost(message, optional, tag = "3")]
    pub status: Option<LiteBindingStatus>,
}

/// `BindingReference`: namespace and name.
#[derive(Clone, PartialEq, prost::Message)]
pub struct LiteBindingRef {
    /// `namespace`.
    #[prost(string, tag = "1")]
    pub namespace: String,
    /// `name`.
    #[prost(string, tag = "2")]
    pub name: String,
}

/// `WorkSpec`: cluster, binding and replicas.
#[derive(Clone, PartialEq, prost::Message)]
pub struct LiteWorkSpec {
    /// `cluster`.
    #[prost(string, tag = "1")]
    pub cluster: String,
    /// `binding`.
    #[prost(message, optional, tag = "2")]
    pub binding: Option<LiteBindingRef>,
    /// `replicas`.
    #[prost(int32, optional, tag = "5")]
    pub replicas: Option<i32>,
}

/// `WorkStatus`: applied at which generation.
#[derive(Clone, PartialEq, prost::Message)]
pub struct LiteWorkStatus {
    /// `applied`.
    #[prost(bool, tag = "2")]
    pub applied: bool,
    /// `observed_generation`.
    #[prost(int64, tag = "7")]
    pub observed_generation: i64,
}

/// `Work`, lite.
#[derive(Clone, PartialEq, prost::Message)]
pub struct LiteWork {
    /// `metadata`.
    #[prost(message, optional, tag = "1")]
    pub metadata: Option<LiteMeta>,
    /// `spec`.
    #[prost(message, optional, tag = "2")]
    pub spec: Option<LiteWorkSpec>,
    /// `status`.
    #[prost(message, optional, tag = "3")]
    pub status: Option<LiteWorkStatus>,
}

// === state ===

/// The failover stages of a binding, in order.
pub const STAGES: [&str; 5] = [
    "evicted",
    "rescheduled",
    "Works applied",
    "Ready",
    "task removed",
];

#[derive(Debug, Default)]
struct BindingState {
    binding: LiteBinding,
    settled: bool,
    affected: bool,
    stages: [Option<Instant>; 5],
}

#[derive(Clone, Copy, Debug, Default)]
struct WorkState {
    replicas: Option<i32>,
    applied_current: bool,
}

/// What the tracker knows about one cluster.
#[derive(Clone, Debug, Default)]
pub struct ClusterState {
    /// Ready=True.
    pub ready: bool,
    /// Its taints as `key:Effect`.
    pub taints: Vec<String>,
}

/// The failover being measured.
#[derive(Debug)]
struct Armed {
    failed: String,
    not_ready: Option<Instant>,
    no_schedule: Option<Instant>,
    no_execute: Option<Instant>,
}

/// Everything the tracker saw, shared with the bench.
#[derive(Debug, Default)]
pub struct State {
    bindings: HashMap<String, BindingState>,
    works: HashMap<(String, String), WorkState>,
    clusters: HashMap<String, ClusterState>,
    settled: usize,
    /// Bindings scheduled at their current generation, kept as they change.
    scheduled: usize,
    armed: Option<Armed>,
    affected: usize,
    complete: usize,
    /// Binding and Work versions seen since [`State::arm`].
    versions: (usize, usize),
}

/// What the bench reads when the failover is done.
#[derive(Debug, Default)]
pub struct Outcome {
    /// When the failed cluster turned not Ready / got its NoSchedule / NoExecute taint.
    pub not_ready: Option<Instant>,
    /// NoSchedule taint.
    pub no_schedule: Option<Instant>,
    /// NoExecute taint.
    pub no_execute: Option<Instant>,
    /// Per stage ([`STAGES`]), the instants the affected bindings reached it.
    pub stages: [Vec<Instant>; 5],
    /// Affected bindings.
    pub affected: usize,
    /// Affected bindings that finished (Ready and task removed).
    pub complete: usize,
    /// A few unfinished bindings, described.
    pub stragglers: Vec<String>,
    /// Binding versions written since the fault (every binding, affected or not).
    pub binding_versions: usize,
    /// Work versions written (and deletions) since the fault.
    pub work_versions: usize,
}

fn targets(b: &LiteBinding) -> &[v1::TargetCluster] {
    b.spec.as_ref().map_or(&[], |s| s.clusters.as_slice())
}

fn generation(b: &LiteBinding) -> i64 {
    b.metadata.as_ref().map_or(0, |m| m.generation)
}

fn scheduled(b: &LiteBinding) -> bool {
    let Some(spec) = b.spec.as_ref() else {
        return false;
    };
    !spec.clusters.is_empty()
        && spec.clusters.iter().map(|c| c.replicas).sum::<i32>() == spec.replicas
        && b.status
            .as_ref()
            .is_some_and(|s| s.scheduler_observed_generation == generation(b))
}

fn ready(b: &LiteBinding) -> bool {
    let Some(status) = b.status.as_ref() else {
        return false;
    };
    status.aggregated_status_observed_generation == generation(b)
        && !targets(b).is_empty()
        && targets(b).iter().all(|t| {
            status.aggregated_status.iter().any(|i| {
                i.cluster_name == t.name
                    && i.health == v1::ResourceHealth::Healthy as i32
                    && i.ready_replicas >= t.replicas
            })
        })
}

fn has_task(b: &LiteBinding, cluster: &str) -> bool {
    b.spec
        .as_ref()
        .is_some_and(|s| s.tasks.iter().any(|t| t.from_cluster == cluster))
}

fn targets_cluster(b: &LiteBinding, cluster: &str) -> bool {
    targets(b).iter().any(|t| t.name == cluster)
}

impl State {
    /// Bindings seen.
    pub fn bindings(&self) -> usize {
        self.bindings.len()
    }

    /// Bindings scheduled, applied and Ready at their current generation.
    pub fn settled(&self) -> usize {
        self.settled
    }

    /// Bindings scheduled at their current generation (every target's replicas assigned,
    /// `schedulerObservedGeneration` caught up).
    pub fn scheduled(&self) -> usize {
        self.scheduled
    }

    /// Clusters seen, by name.
    pub fn clusters(&self) -> &HashMap<String, ClusterState> {
        &self.clusters
    }

    /// Whether the binding of the Deployment `name` has settled and, if so, whether it
    /// targets `cluster`: `None` until it has settled.
    pub fn settled_on(&self, name: &str, cluster: &str) -> Option<bool> {
        let suffix = format!(
            "/{}",
            flotilla_core::resource::binding_name(name, "apps", "Deployment", false)
        );
        self.bindings
            .iter()
            .find(|(key, _)| key.ends_with(&suffix))
            .filter(|(_, b)| b.settled)
            .map(|(_, b)| targets_cluster(&b.binding, cluster))
    }

    /// Affected bindings that finished their failover, of how many.
    pub fn progress(&self) -> (usize, usize) {
        (self.complete, self.affected)
    }

    /// Starts measuring a failover of `failed`: the bindings targeting it now are affected.
    pub fn arm(&mut self, failed: &str) {
        let mut affected = 0;
        for b in self.bindings.values_mut() {
            b.affected = targets_cluster(&b.binding, failed);
            b.stages = [None; 5];
            affected += usize::from(b.affected);
        }
        self.affected = affected;
        self.complete = 0;
        self.versions = (0, 0);
        self.armed = Some(Armed {
            failed: failed.to_owned(),
            not_ready: None,
            no_schedule: None,
            no_execute: None,
        });
    }

    /// The measurements so far.
    pub fn outcome(&self) -> Outcome {
        let mut out = Outcome {
            affected: self.affected,
            complete: self.complete,
            binding_versions: self.versions.0,
            work_versions: self.versions.1,
            ..Outcome::default()
        };
        if let Some(a) = &self.armed {
            out.not_ready = a.not_ready;
            out.no_schedule = a.no_schedule;
            out.no_execute = a.no_execute;
        }
        for (key, b) in &self.bindings {
            if !b.affected {
                continue;
            }
            for (i, t) in b.stages.iter().enumerate() {
                if let Some(t) = t {
                    out.stages[i].push(*t);
                }
            }
            if !(b.stages[3].is_some() && b.stages[4].is_some()) && out.stragglers.len() < 3 {
                let reached = b.stages.iter().take_while(|s| s.is_some()).count();
                out.stragglers.push(format!(
                    "{key}: reached {:?}, targets {:?}, generation {}",
                    STAGES.get(reached.wrapping_sub(1)).unwrap_or(&"nothing"),
                    targets(&b.binding)
                        .iter()
                        .map(|t| format!("{}:{}", t.name, t.replicas))
                        .collect::<Vec<_>>(),
                    generation(&b.binding)
                ));
            }
        }
        out
    }

    fn on_cluster(&mut self, cluster: &v1::Cluster, now: Instant) {
        let name = cluster
            .metadata
            .as_ref()
            .map(|m| m.name.clone())
            .unwrap_or_default();
        let ready = cluster.status.as_ref().is_some_and(|s| {
            s.conditions
                .iter()
                .any(|c| c.r#type == "Ready" && c.status == v1::ConditionStatus::True as i32)
        });
        let effects: Vec<(String, i32)> = cluster
            .spec
            .as_ref()
            .map(|s| s.taints.iter().map(|t| (t.key.clone(), t.effect)).collect())
            .unwrap_or_default();
        let taints = effects
            .iter()
            .map(|(k, e)| {
                let e = v1::TaintEffect::try_from(*e).map_or("?", |e| match e {
                    v1::TaintEffect::NoSchedule => "NoSchedule",
                    v1::TaintEffect::NoExecute => "NoExecute",
                    v1::TaintEffect::PreferNoSchedule => "PreferNoSchedule",
                    v1::TaintEffect::Unspecified => "?",
                });
                format!("{k}:{e}")
            })
            .collect();
        if let Some(a) = self.armed.as_mut().filter(|a| a.failed == name) {
            if !ready && a.not_ready.is_none() {
                a.not_ready = Some(now);
            }
            let has = |effect: v1::TaintEffect| effects.iter().any(|(_, e)| *e == effect as i32);
            if has(v1::TaintEffect::NoSchedule) && a.no_schedule.is_none() {
                a.no_schedule = Some(now);
            }
            if has(v1::TaintEffect::NoExecute) && a.no_execute.is_none() {
                a.no_execute = Some(now);
            }
        }
        self.clusters.insert(name, ClusterState { ready, taints });
    }

    fn on_binding(&mut self, key: &str, binding: LiteBinding, now: Instant) {
        self.versions.0 += 1;
        let now_scheduled = scheduled(&binding);
        let state = self.bindings.entry(key.to_owned()).or_default();
        let was_scheduled = scheduled(&state.binding);
        state.binding = binding;
        self.scheduled = self.scheduled + usize::from(now_scheduled) - usize::from(was_scheduled);
        self.evaluate(key, now);
    }

    fn on_binding_deleted(&mut self, key: &str) {
        if let Some(b) = self.bindings.remove(key) {
            self.settled -= usize::from(b.settled);
            self.scheduled -= usize::from(scheduled(&b.binding));
        }
    }

    fn on_work(&mut self, work: LiteWork, deleted: bool, now: Instant) {
        self.versions.1 += 1;
        let Some(spec) = work.spec else { return };
        let Some(binding) = spec.binding else { return };
        let key = format!("bindings/{}/{}", binding.namespace, binding.name);
        let slot = (key.clone(), spec.cluster);
        if deleted {
            self.works.remove(&slot);
        } else {
            let generation = work.metadata.as_ref().map_or(0, |m| m.generation);
            let applied_current = work
                .status
                .as_ref()
                .is_some_and(|s| s.applied && s.observed_generation == generation);
            self.works.insert(
                slot,
                WorkState {
                    replicas: spec.replicas,
                    applied_current,
                },
            );
        }
        if self.bindings.contains_key(&key) {
            self.evaluate(&key, now);
        }
    }

    fn works_applied(&self, key: &str, b: &LiteBinding) -> bool {
        targets(b).iter().all(|t| {
            self.works
                .get(&(key.to_owned(), t.name.clone()))
                .is_some_and(|w| w.applied_current && w.replicas == Some(t.replicas))
        })
    }

    fn evaluate(&mut self, key: &str, now: Instant) {
        let failed = self.armed.as_ref().map(|a| a.failed.clone());
        let Some(state) = self.bindings.get(key) else {
            return;
        };
        let b = &state.binding;
        let settled = scheduled(b) && ready(b);
        let was_settled = state.settled;
        let mut stages = state.stages;
        let affected = state.affected;
        if let (Some(failed), true) = (failed.as_deref(), affected) {
            let on_failed = targets_cluster(b, failed);
            let task = has_task(b, failed);
            if stages[0].is_none() && (!on_failed || task) {
                stages[0] = Some(now);
            }
            if stages[0].is_some() && stages[1].is_none() && !on_failed && scheduled(b) {
                stages[1] = Some(now);
            }
            if stages[1].is_some() && stages[2].is_none() && self.works_applied(key, b) {
                stages[2] = Some(now);
            }
            if stages[1].is_some() && stages[3].is_none() && ready(b) {
                stages[3] = Some(now);
            }
            if stages[0].is_some() && stages[4].is_none() && !task && !on_failed {
                stages[4] = Some(now);
            }
        }
        let was_complete = state.stages[3].is_some() && state.stages[4].is_some();
        let complete = stages[3].is_some() && stages[4].is_some();
        if let Some(state) = self.bindings.get_mut(key) {
            state.settled = settled;
            state.stages = stages;
        }
        match (was_settled, settled) {
            (false, true) => self.settled += 1,
            (true, false) => self.settled -= 1,
            _ => {}
        }
        if affected && complete && !was_complete {
            self.complete += 1;
        }
    }
}

/// The shared state, updated by the tracker task.
pub type Shared = Arc<Mutex<State>>;

/// Locks the shared state (a panicked tracker leaves it readable).
pub fn lock(shared: &Shared) -> std::sync::MutexGuard<'_, State> {
    shared.lock().unwrap_or_else(PoisonError::into_inner)
}

enum Change {
    Cluster(Box<v1::Cluster>),
    Binding(String, LiteBinding),
    BindingDeleted(String),
    Work(LiteWork, bool),
}

fn decode_lite<M: prost::Message + Default>(kv: &KeyValue) -> Result<M, prost::DecodeError> {
    M::decode(kv.value.as_ref())
}

/// Starts following `store`; runs until `shutdown`.
pub fn spawn(store: StoreRef, shutdown: Shutdown) -> Shared {
    let shared: Shared = Arc::default();
    let state = shared.clone();
    let config = |name: &str| WatcherConfig::default().named(format!("bench_{name}"));
    let clusters = watcher(
        store.clone(),
        "clusters/",
        config("clusters"),
        flotilla_store::typed::decode::<v1::Cluster>,
    )
    .filter_map(|ev| async move {
        match ev {
            Event::Apply(o) | Event::InitApply(o) => {
                Some(Change::Cluster(Box::new((*o.value).clone())))
            }
            _ => None,
        }
    })
    .boxed();
    let bindings = watcher(
        store.clone(),
        "bindings/",
        config("bindings"),
        decode_lite::<LiteBinding>,
    )
    .filter_map(|ev| async move {
        match ev {
            Event::Apply(o) | Event::InitApply(o) => {
                Some(Change::Binding(o.key, (*o.value).clone()))
            }
            Event::Delete { key, .. } => Some(Change::BindingDeleted(key)),
            _ => None,
        }
    })
    .boxed();
    // Deletions carry no value: remember each Work's value by key.
    let mut last: HashMap<String, LiteWork> = HashMap::new();
    let works = watcher(store, "works/", config("works"), decode_lite::<LiteWork>)
        .filter_map(move |ev| {
            let change = match ev {
                Event::Apply(o) | Event::InitApply(o) => {
                    last.insert(o.key.clone(), (*o.value).clone());
                    Some(Change::Work((*o.value).clone(), false))
                }
                Event::Delete { key, .. } => last.remove(&key).map(|w| Change::Work(w, true)),
                _ => None,
            };
            async move { change }
        })
        .boxed();
    let mut all = futures::stream::select_all([clusters, bindings, works]);
    tokio::spawn(async move {
        loop {
            let change = tokio::select! {
                () = shutdown.triggered() => return,
                c = all.next() => match c {
                    Some(c) => c,
                    None => return,
                },
            };
            let now = Instant::now();
            let mut st = lock(&state);
            match change {
                Change::Cluster(c) => st.on_cluster(&c, now),
                Change::Binding(key, b) => st.on_binding(&key, b, now),
                Change::BindingDeleted(key) => st.on_binding_deleted(&key),
                Change::Work(w, deleted) => st.on_work(w, deleted, now),
            }
        }
    });
    shared
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use prost::Message as _;

    use super::*;

    fn lite(
        targets: &[(&str, i32)],
        tasks: &[&str],
        generation: i64,
        observed: i64,
        healthy: &[(&str, i32)],
        aggregated_generation: i64,
    ) -> LiteBinding {
        LiteBinding {
            metadata: Some(LiteMeta {
                generation,
                deletion_timestamp: None,
            }),
            spec: Some(LiteBindingSpec {
                replicas: 2,
                clusters: v1::TargetCluster::from_pairs(targets),
                tasks: tasks
                    .iter()
                    .map(|c| LiteTask {
                        from_cluster: (*c).into(),
                    })
                    .collect(),
            }),
            status: Some(LiteBindingStatus {
                scheduler_observed_generation: observed,
                aggregated_status: healthy
                    .iter()
                    .map(|(n, r)| LiteItem {
                        cluster_name: (*n).into(),
                        health: v1::ResourceHealth::Healthy as i32,
                        ready_replicas: *r,
                    })
                    .collect(),
                aggregated_status_observed_generation: aggregated_generation,
            }),
        }
    }

    #[test]
    fn scheduled_bindings_are_counted_as_they_change() {
        let mut st = State::default();
        let now = Instant::now();
        st.on_binding("b1", lite(&[("m1", 2)], &[], 1, 1, &[], 0), now);
        st.on_binding("b2", lite(&[("m1", 2)], &[], 1, 0, &[], 0), now);
        assert_eq!(st.scheduled(), 1, "b2 not observed by the scheduler yet");
        st.on_binding("b2", lite(&[("m1", 2)], &[], 1, 1, &[], 0), now);
        assert_eq!(st.scheduled(), 2);
        st.on_binding("b1", lite(&[("m1", 2)], &["m2"], 2, 1, &[], 0), now);
        assert_eq!(
            st.scheduled(),
            1,
            "b1's new generation is not scheduled yet"
        );
        st.on_binding_deleted("b2");
        st.on_binding_deleted("b9");
        assert_eq!(st.scheduled(), 0);
    }

    fn work(cluster: &str, replicas: i32, generation: i64, observed: i64) -> LiteWork {
        LiteWork {
            metadata: Some(LiteMeta {
                generation,
                deletion_timestamp: None,
            }),
            spec: Some(LiteWorkSpec {
                cluster: cluster.into(),
                binding: Some(LiteBindingRef {
                    namespace: "bench".into(),
                    name: "w-deployment".into(),
                }),
                replicas: Some(replicas),
            }),
            status: Some(LiteWorkStatus {
                applied: true,
                observed_generation: observed,
            }),
        }
    }

    #[test]
    fn lite_messages_read_the_real_wire_format() {
        let real = v1::ResourceBinding {
            metadata: Some(v1::ObjectMeta {
                name: "x".into(),
                generation: 7,
                ..Default::default()
            }),
            spec: Some(v1::ResourceBindingSpec {
                replicas: 2,
                clusters: vec![v1::TargetCluster {
                    name: "c1".into(),
                    replicas: 2,
                }],
                graceful_eviction_tasks: vec![v1::GracefulEvictionTask {
                    from_cluster: "c0".into(),
                    reason: "TaintUntolerated".into(),
                    ..Default::default()
                }],
                ..Default::default()
            }),
            status: Some(v1::ResourceBindingStatus {
                scheduler_observed_generation: 7,
                aggregated_status_observed_generation: 6,
                aggregated_status: vec![v1::AggregatedStatusItem {
                    cluster_name: "c1".into(),
                    health: v1::ResourceHealth::Healthy as i32,
                    ready_replicas: 2,
                    status: "{\"replicas\":2}".into(),
                    ..Default::default()
                }],
                ..Default::default()
            }),
        };
        let l = LiteBinding::decode(real.encode_to_vec().as_slice()).unwrap();
        assert_eq!(generation(&l), 7);
        assert!(scheduled(&l));
        assert!(has_task(&l, "c0"));
        assert!(
            !ready(&l),
            "aggregated status of generation 6 is not the current one"
        );
        let w = v1::Work {
            metadata: Some(v1::ObjectMeta {
                generation: 3,
                ..Default::default()
            }),
            spec: Some(v1::WorkSpec {
                cluster: "c1".into(),
                binding: Some(v1::BindingReference {
                    namespace: "ns".into(),
                    name: "b".into(),
                    ..Default::default()
                }),
                replicas: Some(2),
                manifest: "{}".into(),
                ..Default::default()
            }),
            status: Some(v1::WorkStatus {
                applied: true,
                observed_generation: 3,
                ..Default::default()
            }),
        };
        let lw = LiteWork::decode(w.encode_to_vec().as_slice()).unwrap();
        assert_eq!(lw.spec.as_ref().unwrap().replicas, Some(2));
        assert_eq!(lw.spec.unwrap().binding.unwrap().name, "b");
        assert_eq!(lw.status.unwrap().observed_generation, 3);
    }

    #[test]
    fn stages_are_recorded_in_order_of_the_pipeline() {
        let key = "bindings/bench/w-deployment";
        let mut st = State::default();
        let t = Instant::now();
        st.on_binding(
            key,
            lite(
                &[("c0", 1), ("c1", 1)],
                &[],
                2,
                2,
                &[("c0", 1), ("c1", 1)],
                2,
            ),
            t,
        );
        assert_eq!(st.settled(), 1);
        st.arm("c0");
        assert_eq!(st.progress(), (0, 1));
        // Taint manager: c0 out, task in.
        st.on_binding(key, lite(&[("c1", 1)], &["c0"], 3, 2, &[("c1", 1)], 2), t);
        assert_eq!(st.settled(), 0);
        // Scheduler: c1:2.
        st.on_binding(key, lite(&[("c1", 2)], &["c0"], 4, 4, &[("c1", 1)], 2), t);
        // Work of c1 updated and applied (before its generation is observed: not yet).
        st.on_work(work("c1", 2, 5, 4), false, t);
        st.on_work(work("c1", 2, 5, 5), false, t);
        // Aggregated status for generation 4, then the task removed (generation 5).
        st.on_binding(key, lite(&[("c1", 2)], &["c0"], 4, 4, &[("c1", 2)], 4), t);
        assert_eq!(st.progress(), (0, 1));
        st.on_binding(key, lite(&[("c1", 2)], &[], 5, 5, &[("c1", 2)], 4), t);
        let out = st.outcome();
        assert_eq!(
            out.stages.iter().map(Vec::len).collect::<Vec<_>>(),
            vec![1; 5]
        );
        assert_eq!(st.progress(), (1, 1));
        assert!(out.stragglers.is_empty());
    }
}
