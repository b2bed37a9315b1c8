//! Bad input (RELIABILITY §3) over gRPC against the real api process on etcd: each kind of
//! invalid object is rejected with INVALID_ARGUMENT whose message and `google.rpc.BadRequest`
//! details name the field, and nothing is written — the rejected object is absent from Get
//! and List, and no key of the stack's etcd namespace changed (every object key keeps its
//! mod revision; leader leases are left out, they renew on their own).

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeMap;
use std::time::Duration;

use flotilla_api::testing::{application_directly, cluster, named, seed_policy, static_weights};
use flotilla_proto::v1;
use flotilla_tests::{
    Stack, Timers, api_client, eventually, field_violations, get_policy, list_clusters,
    list_policies, list_taint_policies, list_workloads, names, object_revisions,
    try_create_cluster, try_create_policy,
};
use tonic::Code;

/// Asserts INVALID_ARGUMENT naming `field` in both the message and the details.
fn assert_invalid<T: std::fmt::Debug>(what: &str, result: Result<T, tonic::Status>, field: &str) {
    let status = match result {
        Ok(v) => panic!("{what}: accepted: {v:?}"),
        Err(s) => s,
    };
    assert_eq!(
        status.code(),
        Code::InvalidArgument,
        "{what}: {}",
        status.message()
    );
    let violations = field_violations(&status);
    assert!(
        violations.iter().any(|(f, _)| f == field),
        "{what}: no violation of {field} in the details: {violations:?}"
    );
    assert!(
        status.message().contains(field),
        "{what}: the message does not name {field}: {}",
        status.message()
    );
}

/// A valid policy named `name` (the seed policy), changed by `f`.
fn policy(name: &str, f: impl FnOnce(&mut v1::PropagationSpec)) -> v1::PropagationPolicy {
    let mut p = seed_policy();
    p.metadata.as_mut().unwrap().name = name.into();
    f(p.spec.as_mut().unwrap());
    p
}

fn placement(p: &mut v1::PropagationSpec) -> &mut v1::Placement {
    p.placement.as_mut().unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn invalid_objects_are_rejected_naming_the_field_and_nothing_is_written() {
    let stack = Stack::start(Timers::fast()).await;
    let api = api_client(&stack).await;
    let store = stack.store().await;

    // One valid policy to update (matching no workload, so no controller touches it).
    let valid = try_create_policy(&api, policy("valid", |_| {}))
        .await
        .expect("a valid policy is accepted");
    // The namespace settles (the detector may look at the new policy once).
    let before: BTreeMap<String, i64> =
        eventually(Duration::from_secs(10), "the store to settle", || async {
            let a = object_revisions(&store).await;
            tokio::time::sleep(Duration::from_millis(300)).await;
            let b = object_revisions(&store).await;
            (a == b).then_some(b)
        })
        .await;
    assert!(
        before.contains_key("policies/default/valid"),
        "the test reads the stack's namespace: {before:?}"
    );

    // --- clusters ---
    let name49 = "a".repeat(49);
    let mut prefer = cluster("prefer", "http://127.0.0.1:1");
    prefer.spec.as_mut().unwrap().taints = vec![v1::Taint {
        key: "example.com/maintenance".into(),
        value: String::new(),
        effect: v1::TaintEffect::PreferNoSchedule as i32,
        time_added: None,
        trace_context: String::new(),
    }];
    let mut unknown = cluster("unknown", "http://127.0.0.1:1");
    unknown.spec.as_mut().unwrap().sync_mode = 7;
    let clusters = [
        (
            "cluster name of 49 characters",
            cluster(&name49, "http://127.0.0.1:1"),
            "metadata.name",
        ),
        (
            "PreferNoSchedule cluster taint",
            prefer,
            "spec.taints[0].effect",
        ),
        (
            "apiEndpoint with userinfo",
            cluster("userinfo", "https://admin:secret@10.0.0.1:6443"),
            "spec.apiEndpoint",
        ),
        ("unknown syncMode enum value", unknown, "spec.syncMode"),
    ];
    for (what, c, field) in clusters {
        assert_invalid(what, try_create_cluster(&api, c).await, field);
    }
    assert_invalid(
        "ClusterTaintPolicy with a NoExecute taint (not allowed by default, CH-16.1)",
        api.clone()
            .create_cluster_taint_policy(v1::CreateClusterTaintPolicyRequest {
                cluster_taint_policy: Some(v1::ClusterTaintPolicy {
                    metadata: named("evict-not-ready"),
                    spec: Some(v1::ClusterTaintPolicySpec {
                        add_on_conditions: vec![v1::MatchCondition {
                            condition_type: "Ready".into(),
                            operator: v1::SelectorOperator::In as i32,
                            status_values: vec![v1::ConditionStatus::False as i32],
                        }],
                        taints: vec![v1::TaintSpec {
                            key: "example.com/not-ready".into(),
                            value: String::new(),
                            effect: v1::TaintEffect::NoExecute as i32,
                        }],
                        ..Default::default()
                    }),
                }),
            })
            .await,
        "spec.taints[0].effect",
    );

    // --- propagation policies ---
    let cases: Vec<(&str, v1::PropagationPolicy, &str)> = vec![
        (
            "toleration Exists with a value",
            policy("tolerate", |p| {
                placement(p).cluster_tolerations = vec![v1::Toleration {
                    key: "example.com/maintenance".into(),
                    operator: v1::TolerationOperator::Exists as i32,
                    value: "yes".into(),
                    effect: v1::TaintEffect::NoSchedule as i32,
                    toleration_seconds: None,
                }];
            }),
            "spec.placement.clusterTolerations[0].operator",
        ),
        (
            "spreadConstraint maxGroups < minGroups",
            policy("spread", |p| {
                placement(p).spread_constraints = vec![v1::SpreadConstraint {
                    spread_by_field: v1::SpreadField::Cluster as i32,
                    min_groups: 3,
                    max_groups: 2,
                    ..Default::default()
                }];
            }),
            "spec.placement.spreadConstraints[0].maxGroups",
        ),
        (
            "static weight 0",
            policy("weight", |p| {
                static_weights(placement(p))[0].weight = 0;
            }),
            "spec.placement.replicaScheduling.weightPreference.staticWeightList[0].weight",
        ),
        (
            "application failover Directly with gracePeriodSeconds",
            policy("purge", |p| {
                p.propagate_deps = true;
                p.failover = Some(application_directly(Some(30)));
            }),
            "spec.failover.application.gracePeriodSeconds",
        ),
    ];
    for (what, p, field) in cases {
        assert_invalid(what, try_create_policy(&api, p).await, field);
    }
    // The same rule on update: the stored policy keeps its spec and resourceVersion.
    let mut update = valid.clone();
    static_weights(placement(update.spec.as_mut().unwrap()))[1].weight = 0;
    assert_invalid(
        "static weight 0 on update",
        api.clone()
            .update_propagation_policy(v1::UpdatePropagationPolicyRequest {
                propagation_policy: Some(update),
            })
            .await,
        "spec.placement.replicaScheduling.weightPreference.staticWeightList[1].weight",
    );

    // --- workloads ---
    assert_invalid(
        "manifest that is not JSON",
        api.clone()
            .create_workload(v1::CreateWorkloadRequest {
                workload: Some(v1::Workload {
                    manifest: "apiVersion: apps/v1\nkind: Deployment\n".into(),
                    ..Default::default()
                }),
            })
            .await,
        "manifest",
    );

    // --- requests ---
    // 500 is the limit, not past it.
    for page_size in [501, 500] {
        let listed = api
            .clone()
            .list_clusters(v1::ListClustersRequest {
                page_size,
                ..Default::default()
            })
            .await;
        if page_size > 500 {
            assert_invalid("page_size 501 (clusters)", listed, "pageSize");
        } else {
            listed.expect("page_size 500 is accepted");
        }
    }
    assert_invalid(
        "page_size 501 (works)",
        api.clone()
            .list_works(v1::ListWorksRequest {
                page_size: 501,
                ..Default::default()
            })
            .await,
        "pageSize",
    );

    // Nothing was written: no rejected object is visible, the updated policy is as it was,
    // and no key in the stack's namespace changed.
    assert!(
        list_clusters(&api).await.is_empty(),
        "a rejected cluster was stored"
    );
    assert_eq!(names(&list_policies(&api).await), ["valid"]);
    let workloads = list_workloads(&api).await;
    assert!(workloads.is_empty(), "a rejected workload was stored");
    let stored = get_policy(&api, "default", "valid").await.unwrap();
    assert_eq!(stored, valid, "the rejected update changed the policy");
    let ctps = list_taint_policies(&api).await;
    assert!(
        ctps.is_empty(),
        "a rejected cluster taint policy was stored"
    );
    for name in [name49.as_str(), "prefer", "userinfo", "unknown"] {
        let err = api
            .clone()
            .get_cluster(v1::GetClusterRequest { name: name.into() })
            .await
            .expect_err("a rejected cluster is not found");
        assert_eq!(err.code(), Code::NotFound);
    }
    assert_eq!(
        object_revisions(&store).await,
        before,
        "the store changed while every request was rejected"
    );
}
