//! Builders and store helpers for tests of the binding controllers (taint manager, graceful
//! eviction): clusters with a Ready condition and taints, scheduled bindings with
//! tolerations, and read-modify-CAS writes as the other services would make them.
//!
//! ```text
//!   cluster(name, healthy)            v1::Cluster with Ready True/False
//!   member_cluster(name, mode, url)   v1::Cluster with a sync mode and endpoint, no status
//!   binding(name, targets, tolerations)  scheduled v1::ResourceBinding in NS (A3 placement)
//!   modify                            read-modify-CAS any stored object, retried on conflicts
//!   set_taints / set_ready            CAS a cluster, as the api / cluster-health would
//!   get_binding                       the domain ResourceBinding under binding_key(name)
//!   create_clusters                   create clusters (name, healthy)
//!   mem_with_clusters                 a MemStore holding the given clusters
//!   create_binding(s)                 create one binding, or n built from their index
//!   create_scheduled                  create binding(name, targets, tolerations)
//!   wait_evicted / wait_event         poll until a binding leaves a cluster / an event exists
//!   interpose_binding                 run a write of another service before the first CAS of a binding
//!   count_off                         how many bindings no longer target a cluster
//! ```

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use flotilla_core::Time;
use flotilla_core::types::{
    Cluster, ClusterStatus, Condition, ConditionStatus, ObjectMeta, ObjectReference, Placement,
    ResourceBinding, ResourceBindingSpec, ResourceBindingStatus, TAINT_NOT_READY, Taint,
    TaintEffect, TargetCluster, Toleration, TolerationOperator,
};
use flotilla_proto::v1;
use flotilla_store::typed::{Stored, Typed};
use flotilla_store::{MemStore, StoreRef};

use super::Interpose;
use super::harness::eventually;

/// The namespace of every binding built here.
pub const NS: &str = "default";

/// A `Ready` condition with `status`.
pub fn ready(status: ConditionStatus) -> Condition {
    Condition {
        type_: "Ready".into(),
        status,
        reason: "Test".into(),
        message: String::new(),
        last_transition_time: Some(Time::from_secs(1)),
    }
}

/// A cluster whose Ready condition is True (`healthy`) or False.
pub fn cluster(name: &str, healthy: bool) -> v1::Cluster {
    Cluster {
        meta: ObjectMeta {
            name: name.into(),
            ..Default::default()
        },
        status: ClusterStatus {
            conditions: vec![ready(if healthy {
                ConditionStatus::True
            } else {
                ConditionStatus::False
            })],
            ..Default::default()
        },
        ..Default::default()
    }
    .into()
}

/// A cluster synced in `mode` whose API server is at `endpoint` (empty for Pull), without
/// status.
pub fn member_cluster(name: &str, mode: v1::SyncMode, endpoint: &str) -> v1::Cluster {
    v1::Cluster {
        metadata: Some(v1::ObjectMeta {
            name: name.into(),
            ..Default::default()
        }),
        spec: Some(v1::ClusterSpec {
            sync_mode: mode as i32,
            api_endpoint: endpoint.into(),
            ..Default::default()
        }),
        status: None,
    }
}

/// A NoExecute taint `key`, added at `added`.
pub fn no_execute(key: &str, added: Time) -> Taint {
    Taint::new(key, TaintEffect::NoExecute, Some(added))
}

/// A NoExecute toleration of `key` for `secs` (`None` = forever).
pub fn tolerate(key: &str, secs: Option<i64>) -> Toleration {
    Toleration {
        key: key.into(),
        operator: TolerationOperator::Exists,
        value: String::new(),
        effect: Some(TaintEffect::NoExecute),
        toleration_seconds: secs,
    }
}

/// A scheduled binding on `targets`, with `tolerations` in its applied placement (A3).
pub fn binding(
    name: &str,
    targets: &[(&str, i32)],
    tolerations: Vec<Toleration>,
) -> v1::ResourceBinding {
    let placement = Placement {
        cluster_tolerations: tolerations,
        ..Default::default()
    };
    ResourceBinding {
        meta: ObjectMeta {
            name: name.into(),
            namespace: NS.into(),
            ..Default::default()
        },
        spec: ResourceBindingSpec {
            resource: ObjectReference {
                api_version: "apps/v1".into(),
                kind: "Deployment".into(),
                namespace: NS.into(),
                name: name.into(),
                uid: String::new(),
            },
            replicas: targets.iter().map(|(_, r)| r).sum(),
            placement: Some(placement.clone()),
            clusters: targets
                .iter()
                .map(|(c, r)| TargetCluster::new(*c, *r))
                .collect(),
            ..Default::default()
        },
        status: ResourceBindingStatus {
            scheduler_observed_generation: 1,
            applied_placement: Some(placement),
            ..Default::default()
        },
    }
    .into()
}

/// The store key of binding `name` in [`NS`].
pub fn binding_key(name: &str) -> String {
    format!("bindings/{NS}/{name}")
}

/// Reads binding `name` (it must exist and convert).
pub async fn get_binding(typed: &Typed, name: &str) -> ResourceBinding {
    let wire: v1::ResourceBinding = typed
        .get(&binding_key(name))
        .await
        .expect("read the binding")
        .expect("the binding exists");
    ResourceBinding::try_from(wire).expect("a valid binding")
}

/// Read-modify-CAS of the object stored under `key` (it must exist), retried on conflicts as
/// every Flotilla writer does; the object as written.
pub async fn modify<R, F>(typed: &Typed, key: &str, f: F) -> R
where
    R: Stored,
    F: Fn(&mut R),
{
    loop {
        let old: R = typed
            .get(key)
            .await
            .expect("read the object")
            .expect("the object exists");
        let mut new = old.clone();
        f(&mut new);
        match typed.update(&old, new).await {
            Ok(written) => return written,
            Err(e) if e.is_conflict() => continue,
            Err(e) => panic!("update {key}: {e}"),
        }
    }
}

/// Sets the taints of a cluster (read-modify-CAS, as the api / cluster-health would).
pub async fn set_taints(typed: &Typed, name: &str, taints: Vec<Taint>) {
    modify(typed, &cluster_key(name), |c: &mut v1::Cluster| {
        c.spec.get_or_insert_with(Default::default).taints =
            taints.iter().cloned().map(Into::into).collect();
    })
    .await;
}

/// Sets a cluster's Ready condition.
pub async fn set_ready(typed: &Typed, name: &str, healthy: bool) {
    let status = if healthy {
        ConditionStatus::True
    } else {
        ConditionStatus::False
    };
    modify(typed, &cluster_key(name), |c: &mut v1::Cluster| {
        c.status.get_or_insert_with(Default::default).conditions = vec![ready(status).into()];
    })
    .await;
}

fn cluster_key(name: &str) -> String {
    format!("clusters/{name}")
}

/// The `cluster.karmada.io/not-ready` NoExecute taint, added at `added`.
pub fn not_ready_taint(added: Time) -> Taint {
    no_execute(TAINT_NOT_READY, added)
}

/// A ClusterTaintPolicy `name` that adds `taint_key` with `effect` to clusters whose Ready
/// condition is False (CH-16), on every cluster.
pub fn taint_policy_on_not_ready(
    name: &str,
    taint_key: &str,
    effect: v1::TaintEffect,
) -> v1::ClusterTaintPolicy {
    v1::ClusterTaintPolicy {
        metadata: Some(v1::ObjectMeta {
            name: name.into(),
            ..Default::default()
        }),
        spec: Some(v1::ClusterTaintPolicySpec {
            target_clusters: None,
            add_on_conditions: vec![v1::MatchCondition {
                condition_type: "Ready".into(),
                operator: v1::SelectorOperator::In as i32,
                status_values: vec![v1::ConditionStatus::False as i32],
            }],
            remove_on_conditions: vec![],
            taints: vec![v1::TaintSpec {
                key: taint_key.into(),
                value: String::new(),
                effect: effect as i32,
            }],
        }),
    }
}

/// A fresh [`MemStore`] holding `clusters` (name, healthy), and typed access to it.
pub async fn mem_with_clusters(clusters: &[(&str, bool)]) -> (StoreRef, Typed) {
    let store: StoreRef = Arc::new(MemStore::new());
    let typed = Typed::new(store.clone());
    create_clusters(&typed, clusters).await;
    (store, typed)
}

/// Creates `clusters` (name, healthy); none may exist yet.
pub async fn create_clusters(typed: &Typed, clusters: &[(&str, bool)]) {
    for (name, healthy) in clusters {
        typed
            .create(cluster(name, *healthy), None)
            .await
            .expect("create the cluster");
    }
}

/// Creates `binding` (it must not exist yet).
pub async fn create_binding(typed: &Typed, binding: v1::ResourceBinding) {
    typed
        .create(binding, None)
        .await
        .expect("create the binding");
}

/// Creates [`binding`]`(name, targets, tolerations)` (it must not exist yet).
pub async fn create_scheduled(
    typed: &Typed,
    name: &str,
    targets: &[(&str, i32)],
    tolerations: Vec<Toleration>,
) {
    create_binding(typed, binding(name, targets, tolerations)).await;
}

/// Creates the bindings `build(0)`, …, `build(n - 1)`.
pub async fn create_bindings(
    typed: &Typed,
    n: usize,
    build: impl Fn(usize) -> v1::ResourceBinding,
) {
    for i in 0..n {
        create_binding(typed, build(i)).await;
    }
}

/// Waits at most `timeout` until binding `name` no longer targets `cluster`.
pub async fn wait_evicted(typed: &Typed, timeout: Duration, name: &str, cluster: &str) {
    eventually(
        timeout,
        &format!("{name} evicted from {cluster}"),
        || async { (!get_binding(typed, name).await.targets(cluster)).then_some(()) },
    )
    .await;
}

/// Waits at most `timeout` until an event with `reason` has been recorded.
pub async fn wait_event(typed: &Typed, timeout: Duration, reason: &str) {
    eventually(timeout, &format!("a {reason} event"), || async {
        let (events, _) = typed
            .list::<v1::Event>(None)
            .await
            .expect("list the events");
        events.iter().any(|e| e.reason == reason).then_some(())
    })
    .await;
}

/// How many bindings no longer target `cluster`.
pub async fn count_off(typed: &Typed, cluster: &str) -> usize {
    let (all, _) = typed
        .list::<v1::ResourceBinding>(None)
        .await
        .expect("list the bindings");
    all.iter()
        .filter(|b| {
            !b.spec
                .as_ref()
                .expect("a binding spec")
                .clusters
                .iter()
                .any(|t| t.name == cluster)
        })
        .count()
}

/// `store` wrapped in an [`Interpose`] that runs `hook` (with typed access to `typed`'s store)
/// once, right before the first transaction writing binding `name`: a concurrent writer
/// between a controller's read and its CAS.
pub fn interpose_binding<F, Fut>(
    store: StoreRef,
    typed: &Typed,
    name: &str,
    hook: F,
) -> Arc<Interpose>
where
    F: Fn(Typed) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = ()> + Send + 'static,
{
    let typed = typed.clone();
    Interpose::new(
        store,
        &binding_key(name),
        Box::new(move || Box::pin(hook(typed.clone()))),
    )
}
