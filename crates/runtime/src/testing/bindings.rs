//! Builders and store helpers for tests of the binding controllers (taint manager, graceful
//! eviction): clusters with a Ready condition and taints, scheduled bindings with
//! tolerations, and read-modify-CAS writes as the other services would make them.
//!
//! ```text
//!   cluster(name, healthy)            v1::Cluster with Ready True/False
//!   binding(name, targets, tolerations)  scheduled v1::ResourceBinding in NS (A3 placement)
//!   set_taints / set_ready            CAS a cluster, as the api / cluster-health would
//!   get_binding                       the domain ResourceBinding under binding_key(name)
//! ```

use flotilla_core::Time;
use flotilla_core::types::{
    Cluster, ClusterStatus, Condition, ConditionStatus, ObjectMeta, ObjectReference, Placement,
    ResourceBinding, ResourceBindingSpec, ResourceBindingStatus, TAINT_NOT_READY, Taint,
    TaintEffect, TargetCluster, Toleration, TolerationOperator,
};
use flotilla_proto::v1;
use flotilla_store::typed::Typed;

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

/// Sets the taints of a cluster (read-modify-CAS, as the api / cluster-health would).
pub async fn set_taints(typed: &Typed, name: &str, taints: Vec<Taint>) {
    loop {
        let old = get_cluster(typed, name).await;
        let mut new = old.clone();
        new.spec.get_or_insert_with(Default::default).taints =
            taints.iter().cloned().map(Into::into).collect();
        match typed.update(&old, new).await {
            Ok(_) => return,
            Err(e) if e.is_conflict() => continue,
            Err(e) => panic!("{e}"),
        }
    }
}

/// Sets a cluster's Ready condition.
pub async fn set_ready(typed: &Typed, name: &str, healthy: bool) {
    loop {
        let old = get_cluster(typed, name).await;
        let mut new = old.clone();
        let status = if healthy {
            ConditionStatus::True
        } else {
            ConditionStatus::False
        };
        new.status.get_or_insert_with(Default::default).conditions = vec![ready(status).into()];
        match typed.update(&old, new).await {
            Ok(_) => return,
            Err(e) if e.is_conflict() => continue,
            Err(e) => panic!("{e}"),
        }
    }
}

async fn get_cluster(typed: &Typed, name: &str) -> v1::Cluster {
    typed
        .get(&format!("clusters/{name}"))
        .await
        .expect("read the cluster")
        .expect("the cluster exists")
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
