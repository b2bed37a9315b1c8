//! The detector: keeps one ResourceBinding per workload that a policy claims (Karmada's
//! resource detector), while this replica leads `leases/api-detector`.
//!
//! ```text
//!   watch workloads/ ─┐  reflector caches (indexes: workloads by namespace and by binding
//!   watch policies/ ──┤  key, bindings by policy and by cluster)
//!   watch clusterpolicies/ ─┤         │ mappers: a policy change → the workloads it matches
//!   watch bindings/ ──┘               ▼           and those its bindings name
//!                       WorkQueue<workload key> ──► reconcile(workload key):
//!     claim = select(workload, policies)            (claim.rs: namespaced ▸ priority ▸
//!     none  → delete the binding (CAS)               specificity ▸ name)
//!     some  → create the binding, or CAS-update only the detector's fields
//!             (resource, replicas, replicaRequirements, placement, failover,
//!             schedulerName, policy labels); a conflict re-reads and re-decides at once
//!   writes are group-committed (batch.rs: ≤ 64 guarded writes per Txn) through the
//!   FencedStore of the leadership (I8)
//! ```

use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use flotilla_core::resource;
use flotilla_proto::Resource;
use flotilla_proto::v1;
use flotilla_runtime::CacheBarrier;
use flotilla_runtime::Elected;
use flotilla_runtime::cas::{Lost, Races};
use flotilla_runtime::events::{EventType, Recorder, Regarding};
use flotilla_runtime::reflector::{Cache, Writer, reflect};
use flotilla_runtime::watcher::{Event, WatcherConfig, shared_watcher};
use flotilla_runtime::{
    Action, Change, ChangeFilter, Controller, Digest, QueueConfig, Readiness, Shutdown, WorkQueue,
};
use flotilla_store::ObjectKey;
use flotilla_store::StoreRef;
use flotilla_store::typed::{Stored, Typed, decode, namespaced_key, workload_key};
use tokio::task::JoinHandle;

use crate::batch::{BatchWriter, Write};
use crate::claim::{
    self, Candidate, PolicyRef, attached_binding, binding_keys_of, desired_binding,
    is_attached_only, with_required_by, workload_key_of,
};
use crate::error::Error;

/// The election the detector runs under.
pub const DETECTOR_ELECTION: &str = "leases/api-detector";

/// Index of workloads by namespace.
const BY_NAMESPACE: &str = "namespace";
/// Index of workloads by the keys their binding may have (RM-1: the usual one and the one
/// with a group suffix).
const BY_BINDING: &str = "binding";
/// Index of bindings by the store key of their workload (`spec.resource`).
const BY_WORKLOAD: &str = "workload";
/// Index of workloads by the keys of the templates they depend on (DEP-1).
const BY_DEPENDENCY: &str = "dependency";
/// Index of bindings by the `<ns>/<name>` of the bindings that require them (DEP-2).
const BY_REQUIRED_BY: &str = "required-by";
/// Index of bindings by the store key of the policy that claimed them.
const BY_POLICY: &str = "policy";
/// Index of bindings by the clusters they target or have an eviction task for.
pub const BY_CLUSTER: &str = "cluster";

/// How the detector runs.
#[derive(Clone, Debug)]
pub struct DetectorConfig {
    /// This replica's identity in the election.
    pub identity: String,
    /// The election lease TTL.
    pub lease_ttl: Duration,
    /// Reconcile workers.
    pub workers: usize,
}

/// The caches the detector keeps (the api's handlers read the bindings one too).
#[derive(Clone, Debug)]
pub struct Caches {
    /// Workloads.
    pub workloads: Cache<v1::Workload>,
    /// PropagationPolicies.
    pub policies: Cache<v1::PropagationPolicy>,
    /// ClusterPropagationPolicies.
    pub cluster_policies: Cache<v1::ClusterPropagationPolicy>,
    /// ResourceBindings (indexed by cluster: [`BY_CLUSTER`]).
    pub bindings: Cache<v1::ResourceBinding>,
}

impl Caches {
    async fn synced(&self) {
        self.workloads.wait_until_ready().await;
        self.policies.wait_until_ready().await;
        self.cluster_policies.wait_until_ready().await;
        self.bindings.wait_until_ready().await;
    }
}

/// What a reconcile needs.
pub struct Ctx {
    caches: Caches,
    /// Reads after a lost race (the fenced store in production).
    typed: Typed,
    /// Binding writes, group-committed (fenced in production).
    writer: BatchWriter,
    recorder: Recorder,
}

/// The writing halves of the detector's caches, with their indexes.
#[derive(Debug)]
pub struct CacheWriters {
    /// Workloads, by namespace and by binding key.
    pub workloads: Writer<v1::Workload>,
    /// PropagationPolicies, by namespace.
    pub policies: Writer<v1::PropagationPolicy>,
    /// ClusterPropagationPolicies.
    pub cluster_policies: Writer<v1::ClusterPropagationPolicy>,
    /// ResourceBindings, by policy and by cluster.
    pub bindings: Writer<v1::ResourceBinding>,
}

impl Default for CacheWriters {
    fn default() -> Self {
        Self::new()
    }
}

impl CacheWriters {
    /// Empty caches with the detector's indexes.
    pub fn new() -> Self {
        CacheWriters {
            workloads: Writer::<v1::Workload>::new()
                .with_index(BY_NAMESPACE, |w| vec![w.namespace().to_owned()])
                .with_index(BY_BINDING, |w| binding_keys_of(w).to_vec())
                .with_index(BY_DEPENDENCY, dependency_keys),
            policies: Writer::<v1::PropagationPolicy>::new()
                .with_index(BY_NAMESPACE, |p| vec![p.namespace().to_owned()]),
            cluster_policies: Writer::new(),
            bindings: Writer::<v1::ResourceBinding>::new()
                .with_index(BY_POLICY, |b| {
                    b.meta()
                        .and_then(|m| PolicyRef::from_labels(&m.labels))
                        .map(|p| vec![p.key()])
                        .unwrap_or_default()
                })
                .with_index(BY_CLUSTER, binding_clusters)
                .with_index(BY_WORKLOAD, |b| workload_key_of(b).into_iter().collect())
                .with_index(BY_REQUIRED_BY, |b| {
                    b.spec
                        .iter()
                        .flat_map(|s| &s.required_by)
                        .map(|r| format!("{}/{}", r.namespace, r.name))
                        .collect()
                }),
        }
    }

    /// Readers of the caches.
    pub fn caches(&self) -> Caches {
        Caches {
            workloads: self.workloads.cache(),
            policies: self.policies.cache(),
            cluster_policies: self.cluster_policies.cache(),
            bindings: self.bindings.cache(),
        }
    }
}

impl Ctx {
    /// A reconcile context: `caches` to read, `typed` to re-read after a lost race,
    /// `writer` to write (both over the fenced store in production), `recorder` for events.
    pub fn new(caches: Caches, typed: Typed, writer: BatchWriter, recorder: Recorder) -> Self {
        Ctx {
            caches,
            typed,
            writer,
            recorder,
        }
    }
}

impl std::fmt::Debug for Ctx {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Ctx")
            .field("caches", &self.caches)
            .finish_non_exhaustive()
    }
}

/// A running detector.
#[derive(Debug)]
pub struct Detector {
    /// Its caches.
    pub caches: Caches,
    /// The controller task (ends after shutdown).
    pub task: JoinHandle<()>,
}

/// `K`'s events from the store (a watcher named `name`), applied to `writer`'s cache as they
/// pass.
fn reflected<K>(
    store: &StoreRef,
    writer: Writer<K>,
    name: &str,
) -> impl futures::Stream<Item = Event<K>> + Send + 'static
where
    K: Stored + Send + Sync + 'static,
{
    reflect(
        writer,
        shared_watcher(
            store.clone(),
            K::PREFIX,
            WatcherConfig::for_prefix(K::PREFIX).named(name),
            decode::<K>,
        ),
    )
}

fn binding_clusters(b: &v1::ResourceBinding) -> Vec<String> {
    let Some(spec) = &b.spec else {
        return Vec::new();
    };
    let mut clusters: Vec<String> = spec
        .clusters
        .iter()
        .map(|t| t.name.clone())
        .chain(
            spec.graceful_eviction_tasks
                .iter()
                .map(|t| t.from_cluster.clone()),
        )
        .collect();
    clusters.sort();
    clusters.dedup();
    clusters
}

/// Starts the detector on `store`: caches (registered with `readiness`), the election and
/// the controller, until `shutdown`.
pub fn spawn(
    store: StoreRef,
    config: &DetectorConfig,
    readiness: &Readiness,
    shutdown: &Shutdown,
) -> Detector {
    let CacheWriters {
        workloads: workloads_w,
        policies: policies_w,
        cluster_policies: cluster_policies_w,
        bindings: bindings_w,
    } = CacheWriters::new();
    let caches = Caches {
        workloads: workloads_w.cache(),
        policies: policies_w.cache(),
        cluster_policies: cluster_policies_w.cache(),
        bindings: bindings_w.cache(),
    };
    readiness.add_cache("workloads", &caches.workloads);
    readiness.add_cache("propagationpolicies", &caches.policies);
    readiness.add_cache("clusterpropagationpolicies", &caches.cluster_policies);
    readiness.add_cache("resourcebindings", &caches.bindings);

    let workload_events = reflected(&store, workloads_w, "api-workloads");
    let policy_events = reflected(&store, policies_w, "api-policies");
    let cluster_policy_events = reflected(&store, cluster_policies_w, "api-clusterpolicies");
    let binding_events = reflected(&store, bindings_w, "api-bindings");

    let barrier_store = store.clone();
    let elected = Elected::spawn(
        store.clone(),
        DETECTOR_ELECTION,
        &config.identity,
        config.lease_ttl,
        "api-detector",
        shutdown,
    );
    let ctx = Arc::new(Ctx::new(
        caches.clone(),
        elected.typed(),
        BatchWriter::spawn(elected.fenced.clone(), shutdown.clone()),
        elected.recorder.clone(),
    ));

    let queue = WorkQueue::new(QueueConfig::new("api_detector"));
    // A new leader decides only from caches at least as new as the store it won.
    let barrier = CacheBarrier::new(barrier_store)
        .cache(v1::Workload::PREFIX, &caches.workloads)
        .cache(v1::PropagationPolicy::PREFIX, &caches.policies)
        .cache(
            v1::ClusterPropagationPolicy::PREFIX,
            &caches.cluster_policies,
        )
        .cache(v1::ResourceBinding::PREFIX, &caches.bindings);
    let (c0, c1, c2, c3) = (
        caches.clone(),
        caches.clone(),
        caches.clone(),
        caches.clone(),
    );
    let controller = Controller::new(queue, reconcile, |_key: &String, _e: &Error, _ctx: &Ctx| {
        Action::requeue(Duration::from_secs(1))
    })
    .workers(config.workers)
    .leader(elected.leader())
    .barrier(barrier)
    .watches(workload_events, move |e| workload_trigger(&c0, e))
    .watches(binding_events, {
        let seen = Mutex::new(ChangeFilter::new("api_detector", trigger_digest));
        move |e| binding_trigger(&c1, &seen, e)
    })
    .watches(policy_events, move |e| policy_trigger(&c2, e))
    .watches(cluster_policy_events, move |e| {
        cluster_policy_trigger(&c3, e)
    });
    let shutdown = shutdown.clone();
    let task = tokio::spawn(async move {
        controller.run(ctx, shutdown).await;
        // Resign at once so that another replica takes over without waiting for the TTL.
        elected.resign().await;
    });
    Detector { caches, task }
}

/// A binding change → the workload it is for (a deleted binding: the workload whose binding
/// key it was, so that a binding deleted by someone else is re-created), and the templates
/// it requires when its clusters change (DEP-2).
///
/// Only changes to what the detector itself writes count: the other writers of a binding
/// (scheduler, taint manager, graceful eviction, work-executor) change its clusters, tasks
/// and status about seven times per failover, and each would otherwise re-run the detector
/// for a workload whose binding is already as it should be. Karmada's detector does not
/// watch bindings at all; this one still re-creates a deleted binding and undoes an edit of
/// its own fields made behind its back. A binding with `propagateDeps` also counts when its
/// clusters or eviction tasks change: its dependencies follow them.
fn binding_trigger(
    caches: &Caches,
    seen: &Mutex<ChangeFilter<v1::ResourceBinding, (u64, u64)>>,
    event: &Event<v1::ResourceBinding>,
) -> Vec<String> {
    let mut seen = seen.lock().unwrap_or_else(PoisonError::into_inner);
    let before = match event {
        Event::Apply(o) => seen.get(&o.key).copied(),
        _ => None,
    };
    match (seen.observe(event), event) {
        // the first list queues every workload; later, only changes of the detector's fields
        (_, Event::InitApply(o)) => workload_key_of(&o.value).into_iter().collect(),
        (change, Event::Apply(o)) if change.is_change() => {
            let (own, deps) = trigger_digest(&o.value);
            let mut keys = Vec::new();
            if before.is_none_or(|(o, _)| o != own) {
                keys.extend(workload_key_of(&o.value));
            }
            if before.is_none_or(|(_, d)| d != deps) {
                keys.extend(required_now(caches, &o.value));
                keys.extend(required_before(caches, &o.key));
            }
            keys
        }
        (Change::Removed { key, .. }, _) => {
            let mut keys = caches.workloads.index_keys(BY_BINDING, key);
            keys.extend(required_before(caches, key));
            keys
        }
        _ => Vec::new(),
    }
}

/// A workload change → the workload itself, and for a kind with a pod template the templates
/// it refers to now and those its binding required before (DEP-1: a dependency added to or
/// removed from the manifest).
fn workload_trigger(caches: &Caches, event: &Event<v1::Workload>) -> Vec<String> {
    match event {
        Event::InitApply(o) | Event::Apply(o) => {
            let mut keys = vec![o.key.clone()];
            if resource::has_pod_template(&o.value.api_version, &o.value.kind) {
                keys.extend(dependency_keys(&o.value));
                for binding in binding_keys_of(&o.value) {
                    keys.extend(required_before(caches, &binding));
                }
            }
            keys
        }
        Event::Delete { key, .. } => vec![key.clone()],
        Event::Init { .. } | Event::InitDone { .. } | Event::Progress { .. } => Vec::new(),
    }
}

/// `(detector_digest, dependency digest)` of a binding: the second is 0 without
/// `propagateDeps`, so only bindings whose dependencies follow them trigger that path.
fn trigger_digest(b: &v1::ResourceBinding) -> (u64, u64) {
    let deps = match &b.spec {
        Some(spec) if spec.propagate_deps => {
            let mut d = Digest::new();
            for c in required_clusters(spec) {
                d.add(&c.name).add(&c.replicas);
            }
            d.message(b.meta().and_then(|m| m.deletion_timestamp.as_ref()));
            d.finish()
        }
        _ => 0,
    };
    (detector_digest(b), deps)
}

/// DEP-1: the keys of the templates a workload's pod template refers to (core-group objects
/// in its namespace); empty for a kind without a pod template.
fn dependency_keys(w: &v1::Workload) -> Vec<String> {
    if !resource::has_pod_template(&w.api_version, &w.kind) {
        return Vec::new();
    }
    let Ok(manifest) = serde_json::from_str::<serde_json::Value>(&w.manifest) else {
        return Vec::new();
    };
    resource::dependencies(&manifest)
        .into_iter()
        .map(|d| workload_key(w.namespace(), "v1", d.kind, &d.name))
        .collect()
}

/// The templates the binding `b` requires by its workload's manifest now.
fn required_now(caches: &Caches, b: &v1::ResourceBinding) -> Vec<String> {
    workload_key_of(b)
        .and_then(|key| caches.workloads.get(&key))
        .map(|w| dependency_keys(&w))
        .unwrap_or_default()
}

/// The templates whose bindings name the binding at `binding_key` in `requiredBy`.
fn required_before(caches: &Caches, binding_key: &str) -> Vec<String> {
    let key = ObjectKey::new(binding_key);
    let (namespace, name) = key.namespace_name();
    caches
        .bindings
        .by_index(BY_REQUIRED_BY, &format!("{namespace}/{name}"))
        .iter()
        .filter_map(|b| workload_key_of(b))
        .collect()
}

/// The clusters a parent's dependencies must be on (DEP-2): its targets with their replicas,
/// then, with 0 replicas, the clusters it still has an eviction task for — the old copy
/// runs there until the task ends, and needs its ConfigMaps and Secrets until then.
fn required_clusters(spec: &v1::ResourceBindingSpec) -> Vec<v1::TargetCluster> {
    let mut clusters = spec.clusters.clone();
    for task in &spec.graceful_eviction_tasks {
        if !clusters.iter().any(|c| c.name == task.from_cluster) {
            clusters.push(v1::TargetCluster {
                name: task.from_cluster.clone(),
                replicas: 0,
            });
        }
    }
    clusters.sort_by(|a, b| a.name.cmp(&b.name));
    clusters
}

/// DEP-2: the bindings that require the template at `key` — the bindings, with
/// `propagateDeps`, of the workloads whose pod templates refer to it — each with the clusters
/// its dependencies must be on. A parent not scheduled yet, or being deleted, requires nothing.
fn required_by(caches: &Caches, key: &str) -> Vec<v1::BindingSnapshot> {
    let mut snapshots: Vec<v1::BindingSnapshot> = caches
        .workloads
        .by_index(BY_DEPENDENCY, key)
        .iter()
        .flat_map(|parent| caches.bindings.by_index(BY_WORKLOAD, &parent.key()))
        .filter(|b| b.meta().is_some_and(|m| m.deletion_timestamp.is_none()))
        .filter_map(|b| {
            let spec = b.spec.as_ref().filter(|s| s.propagate_deps)?;
            let clusters = required_clusters(spec);
            (!clusters.is_empty()).then(|| v1::BindingSnapshot {
                namespace: b.namespace().to_owned(),
                name: b.name().to_owned(),
                clusters,
            })
        })
        .collect();
    snapshots.sort_by(|a, b| (&a.namespace, &a.name).cmp(&(&b.namespace, &b.name)));
    snapshots.dedup_by(|a, b| (&a.namespace, &a.name) == (&b.namespace, &b.name));
    snapshots
}

/// A digest of the fields of a binding that [`desired_binding`] writes (its labels and the
/// template- and policy-derived parts of the spec, `requiredBy` included), plus whether it
/// is being deleted.
fn detector_digest(b: &v1::ResourceBinding) -> u64 {
    let mut d = Digest::new();
    if let Some(m) = b.metadata.as_ref() {
        d.add(&m.labels).message(m.deletion_timestamp.as_ref());
    }
    if let Some(spec) = b.spec.as_ref() {
        d.message(spec.resource.as_ref())
            .add(&spec.replicas)
            .message(spec.replica_requirements.as_ref())
            .message(spec.placement.as_ref())
            .message(spec.failover.as_ref())
            .add(&spec.scheduler_name)
            .add(&spec.propagate_deps)
            .add(&spec.preserve_resources_on_deletion)
            .add(&spec.conflict_resolution)
            .message(spec.suspension.as_ref());
        for r in &spec.required_by {
            d.message(Some(r));
        }
    }
    d.finish()
}

/// The workloads a policy (whose store key is `policy_key`) claimed before this change.
fn claimed_by(caches: &Caches, policy_key: &str) -> Vec<String> {
    caches
        .bindings
        .by_index(BY_POLICY, policy_key)
        .iter()
        .filter_map(|b| workload_key_of(b))
        .collect()
}

/// A PropagationPolicy change → the workloads it claimed and those it matches now (only
/// workloads of its own namespace can match).
fn policy_trigger(caches: &Caches, event: &Event<v1::PropagationPolicy>) -> Vec<String> {
    let candidates =
        |p: &v1::PropagationPolicy| caches.workloads.by_index(BY_NAMESPACE, p.namespace());
    any_policy_trigger(caches, event, |p| p.spec.as_ref(), candidates)
}

/// A ClusterPropagationPolicy change → the workloads it claimed and those it matches now.
fn cluster_policy_trigger(
    caches: &Caches,
    event: &Event<v1::ClusterPropagationPolicy>,
) -> Vec<String> {
    let candidates = |_: &v1::ClusterPropagationPolicy| caches.workloads.list();
    any_policy_trigger(caches, event, |p| p.spec.as_ref(), candidates)
}

/// A policy change → the workloads it claimed (by the binding index) and those of
/// `candidates` that its spec matches now.
fn any_policy_trigger<P>(
    caches: &Caches,
    event: &Event<P>,
    spec: impl Fn(&P) -> Option<&v1::PropagationSpec>,
    candidates: impl Fn(&P) -> Vec<Arc<v1::Workload>>,
) -> Vec<String> {
    match event {
        Event::InitApply(o) | Event::Apply(o) => {
            let mut keys = claimed_by(caches, &o.key);
            if let Some(spec) = spec(&o.value) {
                keys.extend(
                    candidates(&o.value)
                        .iter()
                        .filter(|w| claim::policy_specificity(spec, w).is_some())
                        .map(|w| w.key()),
                );
            }
            keys
        }
        Event::Delete { key, .. } => claimed_by(caches, key),
        Event::Init { .. } | Event::InitDone { .. } | Event::Progress { .. } => Vec::new(),
    }
}

/// What a reconcile decided to write.
enum Plan {
    Nothing,
    Create(Box<v1::ResourceBinding>),
    Update(Box<v1::ResourceBinding>, Box<v1::ResourceBinding>),
    Detach(Box<v1::ResourceBinding>, Box<v1::ResourceBinding>),
    Delete(Box<v1::ResourceBinding>, &'static str),
}

/// The key of the binding of the workload at `key`: the binding the cache holds for it, else
/// `<ns>/<name>-<kind>`, else — when a template of the same kind and name in another group
/// holds that name (RM-1) — the same with the group's suffix.
fn binding_key_for(caches: &Caches, key: &ObjectKey) -> String {
    if let Some(b) = caches.bindings.by_index(BY_WORKLOAD, key).first() {
        return b.key();
    }
    let (namespace, segment, name) = workload_parts(key);
    let (kind, group) = resource::split_kind_segment(segment);
    let name_for = |collision| {
        namespaced_key(
            v1::ResourceBinding::PREFIX,
            namespace,
            &resource::binding_name(name, group, kind, collision),
        )
    };
    let base = name_for(false);
    match caches.bindings.get(&base) {
        Some(other) if workload_key_of(&other).as_deref() != Some(key.as_str()) => name_for(true),
        _ => base,
    }
}

/// `(namespace, kind segment, name)` of a workload key (`workloads/<ns>/<kind>[.<group>]/<name>`).
fn workload_parts(key: &ObjectKey) -> (&str, &str, &str) {
    let mut parts = key.splitn(4, '/').skip(1);
    let namespace = parts.next().unwrap_or_default();
    let segment = parts.next().unwrap_or_default();
    (namespace, segment, key.name())
}

/// Keeps the binding of the workload at `key` (`workloads/<ns>/<kind>[.<group>]/<name>`) in
/// line with the policy that claims it.
pub async fn reconcile(key: String, ctx: Arc<Ctx>) -> Result<Action, Error> {
    ctx.caches.synced().await;
    let key = ObjectKey::new(key);
    let (namespace, segment, name) = workload_parts(&key);
    let kind = resource::split_kind_segment(segment).0;
    let binding_key = binding_key_for(&ctx.caches, &key);
    let binding_name = ObjectKey::new(binding_key.as_str()).name().to_owned();
    // The cache first; after a lost race the store itself.
    let mut first = ctx.caches.bindings.get(&binding_key).map(|b| (*b).clone());
    let mut races = Races::new(&binding_key);
    let mut lost = None;
    loop {
        let current = Lost::next(lost.take(), &mut first, || ctx.typed.get(&binding_key)).await?;
        let workload = ctx.caches.workloads.get(&key);
        if let Some(b) = &current
            && workload_key_of(b).as_deref() != Some(key.as_str())
        {
            // Another template's binding took this name meanwhile (RM-1): once the cache
            // holds it, binding_key_for picks the name with the group suffix.
            tracing::debug!(binding = %binding_key, workload = %key, "a binding of another template holds this name; choosing again");
            return Ok(Action::requeue(Duration::from_millis(50)));
        }
        let policies = ctx.caches.policies.by_index(BY_NAMESPACE, namespace);
        let cluster_policies = ctx.caches.cluster_policies.list();
        let namespaced: Vec<Candidate<'_>> = policies
            .iter()
            .filter_map(|p| Candidate::namespaced(p))
            .collect();
        let cluster_wide: Vec<Candidate<'_>> = cluster_policies
            .iter()
            .filter_map(|p| Candidate::cluster(p))
            .collect();
        let previous = current
            .as_ref()
            .and_then(|b| b.meta())
            .and_then(|m| PolicyRef::from_labels(&m.labels));
        let claim = workload
            .as_deref()
            .and_then(|w| claim::select(w, &namespaced, &cluster_wide, previous.as_ref()));
        // DEP-2: the bindings that require this template, with their clusters
        let required = match workload.as_deref() {
            Some(_) => required_by(&ctx.caches, &key),
            None => Vec::new(),
        };
        let update = |b: v1::ResourceBinding, desired: v1::ResourceBinding| {
            if desired == b {
                Plan::Nothing
            } else {
                Plan::Update(Box::new(b), Box::new(desired))
            }
        };
        let plan = match (workload.as_deref(), &claim, current) {
            (Some(w), Some(claim), None) => Plan::Create(Box::new(with_required_by(
                desired_binding(w, claim, None, &binding_name),
                &required,
            ))),
            (Some(w), Some(claim), Some(b)) => {
                let desired = if claim::held_lazily(w, claim, previous.as_ref(), &b) {
                    tracing::debug!(binding = %binding_key, workload = %key, policy = %claim.policy, "PL-6: the policy is Lazy and the template unchanged: its change waits for the template's next change");
                    b.clone()
                } else {
                    desired_binding(w, claim, Some(&b), &binding_name)
                };
                update(b, with_required_by(desired, &required))
            }
            (None, _, Some(b)) => Plan::Delete(Box::new(b), "its workload is gone"),
            // DEP-3: a binding only dependants kept, none of which requires it any more
            (Some(_), None, Some(b)) if is_attached_only(&b) && required.is_empty() => {
                Plan::Delete(Box::new(b), "no binding requires it any more (DEP-3)")
            }
            // DEP-2: an attached binding follows its dependants
            (Some(w), None, Some(b)) if is_attached_only(&b) => {
                let desired = attached_binding(w, Some(&b), &binding_name);
                update(b, with_required_by(desired, &required))
            }
            // PL-1/PL-5: the policy was deleted or no longer matches: detach, keep the
            // binding and the member copies until the workload is deleted
            (Some(_), None, Some(b)) => {
                let detached = with_required_by(claim::detached_binding(&b), &required);
                if detached == b {
                    Plan::Nothing
                } else if previous.is_none() {
                    Plan::Update(Box::new(b), Box::new(detached))
                } else {
                    Plan::Detach(Box::new(b), Box::new(detached))
                }
            }
            (Some(w), None, None) if !required.is_empty() => Plan::Create(Box::new(
                with_required_by(attached_binding(w, None, &binding_name), &required),
            )),
            (_, _, None) => Plan::Nothing,
        };
        let claimed_now = matches!(plan, Plan::Create(_) | Plan::Update(..))
            && claim.as_ref().map(|c| &c.policy) != previous.as_ref();
        let result = match plan {
            Plan::Nothing => return Ok(Action::await_change()),
            Plan::Create(b) => ctx.writer.write(Write::Create(b)).await,
            Plan::Update(old, new) => ctx.writer.write(Write::Update { old, new }).await,
            Plan::Detach(old, new) => {
                let detached = ctx.writer.write(Write::Update { old, new }).await;
                if detached.is_ok() {
                    let why = format!(
                        "{} no longer claims {kind} {namespace}/{name} (deleted, or it no \
                         longer matches): the binding is detached and kept with its \
                         placement and member copies until the workload is deleted or \
                         another policy claims it (PL-1, PL-5)",
                        previous
                            .as_ref()
                            .map_or_else(|| "its policy".to_owned(), ToString::to_string)
                    );
                    tracing::info!(binding = %binding_key, workload = %key, "{why}");
                    ctx.recorder.record(
                        Regarding::binding(namespace, &binding_name),
                        EventType::Normal,
                        "PolicyDetached",
                        why,
                        "",
                    );
                }
                detached
            }
            Plan::Delete(old, why) => {
                let deleted = ctx
                    .writer
                    .write(Write::Delete {
                        key: binding_key.clone(),
                        revision: old.resource_version(),
                    })
                    .await;
                if deleted.is_ok() {
                    tracing::info!(binding = %binding_key, workload = %key, reason = why, "binding deleted");
                    ctx.recorder.record(
                        Regarding::binding(namespace, &binding_name),
                        EventType::Normal,
                        "BindingDeleted",
                        format!("deleted: {why}"),
                        "",
                    );
                }
                deleted
            }
        };
        match result {
            Ok(()) => {
                if claimed_now && let Some(claim) = &claim {
                    let why = claim.reason();
                    tracing::info!(binding = %binding_key, workload = %key, policy = %claim.policy, "{why}");
                    ctx.recorder.record(
                        Regarding::binding(namespace, &binding_name),
                        EventType::Normal,
                        "ApplyPolicySucceed",
                        format!("{} for {kind} {namespace}/{name}", why),
                        "",
                    );
                } else {
                    tracing::debug!(binding = %binding_key, workload = %key, "binding in line with its policy");
                }
                return Ok(Action::await_change());
            }
            // lost a race (changed, created or deleted meanwhile): decide again
            Err(e) => lost = Some(races.after::<Error>(e)?),
        }
    }
}
