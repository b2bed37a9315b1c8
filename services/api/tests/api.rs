//! The api over gRPC on 127.0.0.1:0 and a MemStore: CRUD of every kind, bad input
//! (INVALID_ARGUMENT naming the field, nothing written), optimistic concurrency, watches,
//! paging, and the detector (seed workload, policy changes, precedence, conflicts).

#![allow(clippy::unwrap_used, clippy::expect_used)] // tests

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use flotilla_api::batch::BatchWriter;
use flotilla_api::claim::{LABEL_CLUSTER_POLICY_NAME, LABEL_POLICY_NAME};
use flotilla_api::detector::{CacheWriters, Ctx, reconcile};
use flotilla_api::testing::{
    self, TestApi, application_directly, cluster, deployment_selector, labelled, named,
    nginx_workload, object_meta, seed_policy, static_weights,
};
use flotilla_core::validation::PERMANENT_ID_LABEL_POLICY;
use flotilla_proto::Resource;
use flotilla_proto::v1::{self, WatchEventType, api_client::ApiClient};
use flotilla_runtime::Recorder;
use flotilla_runtime::watcher::{Event, Object};
use flotilla_store::typed::{Stored, Typed};
use flotilla_store::{MemStore, StoreRef};
use tonic::transport::Channel;
use tonic::{Code, Response, Status, Streaming};
use tonic_types::StatusExt;

type Client = ApiClient<Channel>;

async fn setup() -> (StoreRef, TestApi, Client) {
    let store: StoreRef = Arc::new(MemStore::new());
    let api = testing::serve(store.clone(), testing::config()).await;
    let client = api.client().await;
    (store, api, client)
}

/// [`flotilla_runtime::testing::eventually`] for at most 10 s.
async fn eventually<T, Fut>(what: &str, f: impl FnMut() -> Fut) -> T
where
    Fut: Future<Output = Option<T>>,
{
    flotilla_runtime::testing::eventually(Duration::from_secs(10), what, f).await
}

/// Every key except the election's, with its mod revision.
async fn snapshot(store: &StoreRef) -> Vec<(String, i64)> {
    let (kvs, _) = store.list("", 0).await.unwrap();
    kvs.into_iter()
        .filter(|kv| !kv.key.starts_with("leases/"))
        .map(|kv| (kv.key, kv.mod_revision))
        .collect()
}

fn bad_fields(status: &Status) -> Vec<String> {
    status
        .get_details_bad_request()
        .map(|b| b.field_violations.into_iter().map(|v| v.field).collect())
        .unwrap_or_default()
}

/// The call fails with INVALID_ARGUMENT naming `field` (in the details and the message),
/// and the store is unchanged.
async fn expect_invalid<T: std::fmt::Debug>(
    store: &StoreRef,
    field: &str,
    call: impl Future<Output = Result<Response<T>, Status>>,
) {
    let before = snapshot(store).await;
    let err = call.await.expect_err(&format!("{field}: must be rejected"));
    assert_eq!(err.code(), Code::InvalidArgument, "{field}: {err:?}");
    let fields = bad_fields(&err);
    assert!(
        fields.iter().any(|f| f == field),
        "expected a violation at {field}, got {fields:?} ({})",
        err.message()
    );
    assert!(err.message().contains(field), "{}", err.message());
    assert_eq!(
        snapshot(store).await,
        before,
        "{field}: nothing may be written"
    );
}

async fn next<M: std::fmt::Debug>(stream: &mut Streaming<M>) -> M {
    tokio::time::timeout(Duration::from_secs(5), stream.message())
        .await
        .expect("a watch message within 5 s")
        .expect("no stream error")
        .expect("the stream is open")
}

fn create_cluster(c: v1::Cluster) -> v1::CreateClusterRequest {
    v1::CreateClusterRequest { cluster: Some(c) }
}

fn create_pp(p: v1::PropagationPolicy) -> v1::CreatePropagationPolicyRequest {
    v1::CreatePropagationPolicyRequest {
        propagation_policy: Some(p),
    }
}

fn create_workload(w: v1::Workload) -> v1::CreateWorkloadRequest {
    v1::CreateWorkloadRequest { workload: Some(w) }
}

fn kind_only(name: &str, priority: i32) -> v1::PropagationSpec {
    v1::PropagationSpec {
        resource_selectors: vec![deployment_selector("")],
        priority,
        placement: Some(v1::Placement {
            cluster_affinity: Some(v1::ClusterAffinity {
                cluster_names: vec![format!("{name}-cluster")],
                ..Default::default()
            }),
            ..Default::default()
        }),
        ..Default::default()
    }
}

fn pp(name: &str, spec: v1::PropagationSpec) -> v1::PropagationPolicy {
    v1::PropagationPolicy {
        metadata: Some(v1::ObjectMeta {
            name: name.into(),
            namespace: "default".into(),
            ..Default::default()
        }),
        spec: Some(spec),
    }
}

fn work(cluster: &str, name: &str) -> v1::Work {
    v1::Work {
        metadata: object_meta("default", name),
        spec: Some(v1::WorkSpec {
            cluster: cluster.into(),
            manifest: "{}".into(),
            ..Default::default()
        }),
        status: None,
    }
}

// ---------------------------------------------------------------------------------------
// CRUD
// ---------------------------------------------------------------------------------------

#[tokio::test]
async fn crud_round_trips_for_every_kind() {
    let (store, api, mut client) = setup().await;
    let typed = Typed::new(store.clone());

    // Cluster
    let c = client
        .create_cluster(create_cluster(cluster("member1", "http://127.0.0.1:1")))
        .await
        .unwrap()
        .into_inner();
    let m = c.metadata.clone().unwrap();
    assert!(m.resource_version > 0 && !m.uid.is_empty() && m.creation_timestamp.is_some());
    assert_eq!(m.generation, 1);
    let got = client
        .get_cluster(v1::GetClusterRequest {
            name: "member1".into(),
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(got, c);
    let list = client
        .list_clusters(v1::ListClustersRequest {
            label_selector: "env=test".into(),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(list.items, vec![c.clone()]);
    assert!(list.resource_version >= m.resource_version);
    let mut changed = c.clone();
    changed.spec.as_mut().unwrap().region = "us".into();
    let updated = client
        .update_cluster(v1::UpdateClusterRequest {
            cluster: Some(changed),
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(updated.spec.as_ref().unwrap().region, "us");
    assert_eq!(
        updated.generation(),
        2,
        "a spec change bumps the generation"
    );
    assert_eq!(updated.metadata.as_ref().unwrap().uid, m.uid, "uid is kept");
    let deleted = client
        .delete_cluster(v1::DeleteClusterRequest {
            name: "member1".into(),
            preconditions: None,
        })
        .await
        .unwrap()
        .into_inner();
    assert!(deleted.deleted);
    let err = client
        .get_cluster(v1::GetClusterRequest {
            name: "member1".into(),
        })
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::NotFound);

    // PropagationPolicy: defaulted (PD-1, A1) and given a permanent id (PD-1.6)
    let p = client
        .create_propagation_policy(create_pp(seed_policy()))
        .await
        .unwrap()
        .into_inner();
    let spec = p.spec.as_ref().unwrap();
    assert_eq!(spec.scheduler_name, "default-scheduler");
    assert_eq!(spec.resource_selectors[0].namespace, "default");
    let tolerations: Vec<_> = spec
        .placement
        .as_ref()
        .unwrap()
        .cluster_tolerations
        .iter()
        .map(|t| (t.key.as_str(), t.operator, t.effect, t.toleration_seconds))
        .collect();
    let exists = v1::TolerationOperator::Exists as i32;
    let no_execute = v1::TaintEffect::NoExecute as i32;
    assert_eq!(
        tolerations,
        vec![
            (
                "cluster.karmada.io/not-ready",
                exists,
                no_execute,
                Some(300)
            ),
            (
                "cluster.karmada.io/unreachable",
                exists,
                no_execute,
                Some(300)
            ),
        ]
    );
    let id = p.metadata.as_ref().unwrap().labels[PERMANENT_ID_LABEL_POLICY].clone();
    let list = client
        .list_propagation_policies(v1::ListPropagationPoliciesRequest {
            namespace: "default".into(),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(list.items, vec![p.clone()]);
    let other_ns = client
        .list_propagation_policies(v1::ListPropagationPoliciesRequest {
            namespace: "other".into(),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    assert!(other_ns.items.is_empty());
    // An update that leaves the labels out keeps the permanent id.
    let mut changed = p.clone();
    changed.metadata.as_mut().unwrap().labels.clear();
    changed.spec.as_mut().unwrap().priority = 3;
    let updated = client
        .update_propagation_policy(v1::UpdatePropagationPolicyRequest {
            propagation_policy: Some(changed),
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(updated.spec.as_ref().unwrap().priority, 3);
    assert_eq!(
        updated.metadata.as_ref().unwrap().labels[PERMANENT_ID_LABEL_POLICY],
        id
    );
    assert_eq!(updated.generation(), 2);
    let got = client
        .get_propagation_policy(v1::GetPropagationPolicyRequest {
            namespace: "default".into(),
            name: "nginx-propagation".into(),
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(got, updated);
    assert!(
        client
            .delete_propagation_policy(v1::DeletePropagationPolicyRequest {
                namespace: "default".into(),
                name: "nginx-propagation".into(),
                preconditions: None,
            })
            .await
            .unwrap()
            .into_inner()
            .deleted
    );

    // ClusterPropagationPolicy
    let cpp = v1::ClusterPropagationPolicy {
        metadata: named("all-deployments"),
        spec: Some(kind_only("cpp", 0)),
    };
    let created = client
        .create_cluster_propagation_policy(v1::CreateClusterPropagationPolicyRequest {
            cluster_propagation_policy: Some(cpp),
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(
        created.spec.as_ref().unwrap().scheduler_name,
        "default-scheduler"
    );
    let mut changed = created.clone();
    changed.spec.as_mut().unwrap().priority = 7;
    let updated = client
        .update_cluster_propagation_policy(v1::UpdateClusterPropagationPolicyRequest {
            cluster_propagation_policy: Some(changed),
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(updated.spec.as_ref().unwrap().priority, 7);
    let listed = client
        .list_cluster_propagation_policies(v1::ListClusterPropagationPoliciesRequest::default())
        .await
        .unwrap()
        .into_inner();
    assert_eq!(listed.items, vec![updated.clone()]);
    let got = client
        .get_cluster_propagation_policy(v1::GetClusterPropagationPolicyRequest {
            name: "all-deployments".into(),
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(got, updated);
    client
        .delete_cluster_propagation_policy(v1::DeleteClusterPropagationPolicyRequest {
            name: "all-deployments".into(),
            preconditions: None,
        })
        .await
        .unwrap();

    // ClusterTaintPolicy
    let ctp = flotilla_runtime::testing::bindings::taint_policy_on_not_ready(
        "maintenance",
        "example.com/not-ready",
        v1::TaintEffect::NoSchedule,
    );
    let created = client
        .create_cluster_taint_policy(v1::CreateClusterTaintPolicyRequest {
            cluster_taint_policy: Some(ctp),
        })
        .await
        .unwrap()
        .into_inner();
    let mut changed = created.clone();
    changed.spec.as_mut().unwrap().taints[0].value = "v".into();
    let updated = client
        .update_cluster_taint_policy(v1::UpdateClusterTaintPolicyRequest {
            cluster_taint_policy: Some(changed),
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(updated.spec.as_ref().unwrap().taints[0].value, "v");
    let got = client
        .get_cluster_taint_policy(v1::GetClusterTaintPolicyRequest {
            name: "maintenance".into(),
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(got, updated);
    let listed = client
        .list_cluster_taint_policies(v1::ListClusterTaintPoliciesRequest::default())
        .await
        .unwrap()
        .into_inner();
    assert_eq!(listed.items.len(), 1);
    client
        .delete_cluster_taint_policy(v1::DeleteClusterTaintPolicyRequest {
            name: "maintenance".into(),
            preconditions: None,
        })
        .await
        .unwrap();

    // Workload: identity, labels, replicas and requests read from the manifest
    let w = client
        .create_workload(create_workload(nginx_workload()))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(
        (
            w.api_version.as_str(),
            w.kind.as_str(),
            w.name(),
            w.namespace()
        ),
        ("apps/v1", "Deployment", "nginx", "default")
    );
    assert_eq!(w.replicas, 3);
    let req = w
        .replica_requirements
        .as_ref()
        .and_then(|r| r.resource_request.as_ref())
        .unwrap();
    assert_eq!((req.cpu_millis, req.memory_bytes), (100, 128 << 20));
    assert_eq!(w.metadata.as_ref().unwrap().labels["app"], "nginx");
    let mut changed = w.clone();
    changed.manifest = changed
        .manifest
        .replace("\"replicas\": 3", "\"replicas\": 5");
    let updated = client
        .update_workload(v1::UpdateWorkloadRequest {
            workload: Some(changed),
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(updated.replicas, 5);
    assert_eq!(updated.generation(), 2);
    let got = client
        .get_workload(flotilla_api::testing::get_nginx())
        .await
        .unwrap()
        .into_inner();
    assert_eq!(got, updated);
    for (kind, count) in [("Deployment", 1), ("StatefulSet", 0), ("", 1)] {
        let listed = client
            .list_workloads(v1::ListWorkloadsRequest {
                kind: kind.into(),
                ..Default::default()
            })
            .await
            .unwrap()
            .into_inner();
        assert_eq!(listed.items.len(), count, "kind {kind:?}");
    }
    client
        .delete_workload(flotilla_api::testing::delete_nginx())
        .await
        .unwrap();

    // Works and events are written by controllers; the api reads them.
    typed
        .create(work("member1", "nginx-1"), None)
        .await
        .unwrap();
    typed
        .create(work("member2", "nginx-2"), None)
        .await
        .unwrap();
    let works = client
        .list_works(v1::ListWorksRequest {
            cluster: "member1".into(),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(works.items.len(), 1);
    assert_eq!(works.items[0].name(), "nginx-1");
    let all = client
        .list_works(v1::ListWorksRequest {
            namespace: "default".into(),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(all.items.len(), 2);
    let got = client
        .get_work(v1::GetWorkRequest {
            cluster: "member2".into(),
            namespace: "default".into(),
            name: "nginx-2".into(),
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(got.spec.unwrap().cluster, "member2");
    let event = v1::Event {
        metadata: Some(v1::ObjectMeta {
            name: "member1.1".into(),
            namespace: "default".into(),
            ..Default::default()
        }),
        involved_object: Some(v1::ObjectReference {
            kind: "Cluster".into(),
            name: "member1".into(),
            ..Default::default()
        }),
        reason: "TaintClusterSucceed".into(),
        ..Default::default()
    };
    typed.create(event, None).await.unwrap();
    for (kind, count) in [("Cluster", 1), ("ResourceBinding", 0)] {
        let events = client
            .list_events(v1::ListEventsRequest {
                involved_object_kind: kind.into(),
                ..Default::default()
            })
            .await
            .unwrap()
            .into_inner();
        assert_eq!(events.items.len(), count, "{kind}");
    }
    let got = client
        .get_event(v1::GetEventRequest {
            namespace: "default".into(),
            name: "member1.1".into(),
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(got.reason, "TaintClusterSucceed");
    api.stop().await;
}

// ---------------------------------------------------------------------------------------
// Bad input
// ---------------------------------------------------------------------------------------

#[tokio::test]
async fn invalid_objects_are_rejected_naming_the_field_and_nothing_is_written() {
    let (store, api, mut client) = setup().await;
    let ok = cluster("member1", "https://127.0.0.1:6443");
    client
        .create_cluster(create_cluster(ok.clone()))
        .await
        .unwrap();

    let mut c = cluster(&"a".repeat(49), "https://127.0.0.1:6443");
    expect_invalid(
        &store,
        "metadata.name",
        client.create_cluster(create_cluster(c)),
    )
    .await;

    c = cluster("member2", "https://127.0.0.1:6443");
    c.spec.as_mut().unwrap().taints = vec![v1::Taint {
        key: "example.com/soft".into(),
        effect: v1::TaintEffect::PreferNoSchedule as i32,
        ..Default::default()
    }];
    expect_invalid(
        &store,
        "spec.taints[0].effect",
        client.create_cluster(create_cluster(c.clone())),
    )
    .await;
    // the same on an update of an existing cluster
    let mut existing = ok.clone();
    existing.spec = c.spec.clone();
    expect_invalid(
        &store,
        "spec.taints[0].effect",
        client.update_cluster(v1::UpdateClusterRequest {
            cluster: Some(existing),
        }),
    )
    .await;

    c = cluster("member2", "https://admin:secret@127.0.0.1:6443");
    expect_invalid(
        &store,
        "spec.apiEndpoint",
        client.create_cluster(create_cluster(c)),
    )
    .await;
    c = cluster("member2", "https://127.0.0.1:6443");
    c.spec.as_mut().unwrap().sync_mode = 0;
    expect_invalid(
        &store,
        "spec.syncMode",
        client.create_cluster(create_cluster(c)),
    )
    .await;
    c = cluster("member2", "https://127.0.0.1:6443");
    c.metadata.as_mut().unwrap().resource_version = 5;
    expect_invalid(
        &store,
        "metadata.resourceVersion",
        client.create_cluster(create_cluster(c)),
    )
    .await;
    expect_invalid(
        &store,
        "cluster",
        client.create_cluster(v1::CreateClusterRequest { cluster: None }),
    )
    .await;

    // Policies
    let with_placement = |f: &dyn Fn(&mut v1::Placement)| {
        let mut p = seed_policy();
        f(p.spec.as_mut().unwrap().placement.as_mut().unwrap());
        p
    };
    let p = with_placement(&|pl| {
        pl.cluster_tolerations = vec![v1::Toleration {
            key: "example.com/x".into(),
            operator: v1::TolerationOperator::Exists as i32,
            value: "v".into(),
            ..Default::default()
        }];
    });
    expect_invalid(
        &store,
        "spec.placement.clusterTolerations[0].operator",
        client.create_propagation_policy(create_pp(p)),
    )
    .await;
    let p = with_placement(&|pl| {
        pl.cluster_tolerations = vec![v1::Toleration {
            key: "example.com/x".into(),
            operator: 9,
            ..Default::default()
        }];
    });
    expect_invalid(
        &store,
        "spec.placement.clusterTolerations[0].operator",
        client.create_propagation_policy(create_pp(p)),
    )
    .await;
    let p = with_placement(&|pl| {
        pl.spread_constraints = vec![v1::SpreadConstraint {
            spread_by_field: v1::SpreadField::Cluster as i32,
            min_groups: 3,
            max_groups: 2,
            ..Default::default()
        }];
    });
    expect_invalid(
        &store,
        "spec.placement.spreadConstraints[0].maxGroups",
        client.create_propagation_policy(create_pp(p)),
    )
    .await;
    let p = with_placement(&|pl| static_weights(pl)[0].weight = 0);
    expect_invalid(
        &store,
        "spec.placement.replicaScheduling.weightPreference.staticWeightList[0].weight",
        client.create_propagation_policy(create_pp(p)),
    )
    .await;
    let mut p = seed_policy();
    let spec = p.spec.as_mut().unwrap();
    spec.propagate_deps = true;
    spec.failover = Some(application_directly(Some(60)));
    expect_invalid(
        &store,
        "spec.failover.application.gracePeriodSeconds",
        client.create_propagation_policy(create_pp(p)),
    )
    .await;
    let mut p = seed_policy();
    p.spec.as_mut().unwrap().resource_selectors.clear();
    expect_invalid(
        &store,
        "spec.resourceSelectors",
        client.create_propagation_policy(create_pp(p)),
    )
    .await;
    // schedulerName is immutable (an existing policy)
    let created = client
        .create_propagation_policy(create_pp(seed_policy()))
        .await
        .unwrap()
        .into_inner();
    let mut p = created.clone();
    p.spec.as_mut().unwrap().scheduler_name = "other-scheduler".into();
    expect_invalid(
        &store,
        "spec.schedulerName",
        client.update_propagation_policy(v1::UpdatePropagationPolicyRequest {
            propagation_policy: Some(p),
        }),
    )
    .await;
    let cpp = v1::ClusterPropagationPolicy {
        metadata: Some(v1::ObjectMeta {
            name: "cpp".into(),
            namespace: "default".into(),
            ..Default::default()
        }),
        spec: Some(kind_only("cpp", 0)),
    };
    expect_invalid(
        &store,
        "metadata.namespace",
        client.create_cluster_propagation_policy(v1::CreateClusterPropagationPolicyRequest {
            cluster_propagation_policy: Some(cpp),
        }),
    )
    .await;

    // ClusterTaintPolicies: NoExecute needs the admin switch (CH-16.1); taints required;
    // no two policies manage the same taint.
    let ctp = |name: &str, effect: v1::TaintEffect| v1::ClusterTaintPolicy {
        metadata: named(name),
        spec: Some(v1::ClusterTaintPolicySpec {
            taints: vec![v1::TaintSpec {
                key: "example.com/down".into(),
                value: String::new(),
                effect: effect as i32,
            }],
            ..Default::default()
        }),
    };
    let create_ctp = |p: v1::ClusterTaintPolicy| v1::CreateClusterTaintPolicyRequest {
        cluster_taint_policy: Some(p),
    };
    expect_invalid(
        &store,
        "spec.taints[0].effect",
        client.create_cluster_taint_policy(create_ctp(ctp("a", v1::TaintEffect::NoExecute))),
    )
    .await;
    let mut empty = ctp("a", v1::TaintEffect::NoSchedule);
    empty.spec.as_mut().unwrap().taints.clear();
    expect_invalid(
        &store,
        "spec.taints",
        client.create_cluster_taint_policy(create_ctp(empty)),
    )
    .await;
    client
        .create_cluster_taint_policy(create_ctp(ctp("a", v1::TaintEffect::NoSchedule)))
        .await
        .unwrap();
    expect_invalid(
        &store,
        "spec.taints[0]",
        client.create_cluster_taint_policy(create_ctp(ctp("b", v1::TaintEffect::NoSchedule))),
    )
    .await;

    // Workloads
    let mut w = nginx_workload();
    w.manifest = "{\"apiVersion\": \"apps/v1\", \"kind\": ".into();
    expect_invalid(
        &store,
        "manifest",
        client.create_workload(create_workload(w)),
    )
    .await;
    let mut w = nginx_workload();
    w.kind = "StatefulSet".into();
    expect_invalid(&store, "kind", client.create_workload(create_workload(w))).await;
    let mut w = nginx_workload();
    w.manifest = w.manifest.replace("\"replicas\": 3", "\"replicas\": -1");
    expect_invalid(
        &store,
        "spec.replicas",
        client.create_workload(create_workload(w)),
    )
    .await;
    let mut w = nginx_workload();
    w.manifest = w.manifest.replace("\"100m\"", "\"lots\"");
    expect_invalid(
        &store,
        "manifest.spec.template.spec.containers[0].resources.requests.cpu",
        client.create_workload(create_workload(w)),
    )
    .await;
    let mut w = nginx_workload();
    w.manifest = w.manifest.replace(
        "\"image\": \"nginx\"",
        &format!("\"image\": \"{}\"", "x".repeat(1 << 20)),
    );
    expect_invalid(
        &store,
        "manifest",
        client.create_workload(create_workload(w)),
    )
    .await;

    // Requests
    expect_invalid(
        &store,
        "pageSize",
        client.list_clusters(v1::ListClustersRequest {
            page_size: 501,
            ..Default::default()
        }),
    )
    .await;
    expect_invalid(
        &store,
        "labelSelector",
        client.list_clusters(v1::ListClustersRequest {
            label_selector: "tier in (web".into(),
            ..Default::default()
        }),
    )
    .await;
    expect_invalid(
        &store,
        "pageToken",
        client.list_clusters(v1::ListClustersRequest {
            page_token: "garbage".into(),
            ..Default::default()
        }),
    )
    .await;
    expect_invalid(
        &store,
        "resourceVersion",
        client.watch_clusters(v1::WatchClustersRequest {
            resource_version: -1,
            ..Default::default()
        }),
    )
    .await;
    expect_invalid(
        &store,
        "cluster",
        client.watch_works(v1::WatchWorksRequest {
            cluster: "Not_A_Cluster".into(),
            ..Default::default()
        }),
    )
    .await;
    expect_invalid(
        &store,
        "name",
        client.get_cluster(v1::GetClusterRequest { name: "a/b".into() }),
    )
    .await;
    api.stop().await;
}

#[tokio::test]
async fn optimistic_concurrency_and_existence() {
    let (_store, api, mut client) = setup().await;
    let c = client
        .create_cluster(create_cluster(cluster("member1", "http://127.0.0.1:1")))
        .await
        .unwrap()
        .into_inner();
    let err = client
        .create_cluster(create_cluster(cluster("member1", "http://127.0.0.1:2")))
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::AlreadyExists, "{err:?}");

    let first = labelled(&c, "a", "1");
    let updated = client
        .update_cluster(v1::UpdateClusterRequest {
            cluster: Some(first),
        })
        .await
        .unwrap()
        .into_inner();
    // a second writer with the old resourceVersion loses
    let mut stale = labelled(&c, "b", "2");
    let err = client
        .update_cluster(v1::UpdateClusterRequest {
            cluster: Some(stale.clone()),
        })
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::Aborted, "{err:?}");
    let err = client
        .delete_cluster(v1::DeleteClusterRequest {
            name: "member1".into(),
            preconditions: Some(v1::Preconditions {
                resource_version: Some(c.resource_version()),
                uid: None,
            }),
        })
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::Aborted);
    let err = client
        .delete_cluster(v1::DeleteClusterRequest {
            name: "member1".into(),
            preconditions: Some(v1::Preconditions {
                resource_version: None,
                uid: Some("someone-else".into()),
            }),
        })
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::Aborted);
    // resourceVersion 0 = unconditional
    stale.metadata.as_mut().unwrap().resource_version = 0;
    let forced = client
        .update_cluster(v1::UpdateClusterRequest {
            cluster: Some(stale),
        })
        .await
        .unwrap()
        .into_inner();
    assert!(forced.resource_version() > updated.resource_version());
    assert_eq!(
        forced.metadata.as_ref().unwrap().labels.get("a"),
        None,
        "replaced labels"
    );

    let err = client
        .update_cluster(v1::UpdateClusterRequest {
            cluster: Some(cluster("ghost", "http://127.0.0.1:1")),
        })
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::NotFound);
    let err = client
        .delete_workload(v1::DeleteWorkloadRequest {
            namespace: "default".into(),
            kind: "Deployment".into(),
            name: "ghost".into(),
            preconditions: None,
        })
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::NotFound);
    api.stop().await;
}

#[tokio::test]
async fn cluster_updates_keep_controller_taints_and_status() {
    let (store, api, mut client) = setup().await;
    let typed = Typed::new(store.clone());
    client
        .create_cluster(create_cluster(cluster("member1", "http://127.0.0.1:1")))
        .await
        .unwrap();
    // cluster-health writes a controller taint and the status
    let stored: v1::Cluster = typed.get("clusters/member1").await.unwrap().unwrap();
    let mut health = stored.clone();
    health.spec.as_mut().unwrap().taints.push(v1::Taint {
        key: "cluster.karmada.io/not-ready".into(),
        effect: v1::TaintEffect::NoSchedule as i32,
        ..Default::default()
    });
    health.status = Some(v1::ClusterStatus {
        kubernetes_version: "v1.31.0".into(),
        ..Default::default()
    });
    let health = typed.update(&stored, health).await.unwrap();
    // the user adds their own taint and tries to drop the controller's
    let mut user = health.clone();
    user.spec.as_mut().unwrap().taints = vec![v1::Taint {
        key: "example.com/maintenance".into(),
        effect: v1::TaintEffect::NoSchedule as i32,
        ..Default::default()
    }];
    user.status = None;
    let updated = client
        .update_cluster(v1::UpdateClusterRequest {
            cluster: Some(user),
        })
        .await
        .unwrap()
        .into_inner();
    let keys: Vec<_> = updated
        .spec
        .as_ref()
        .unwrap()
        .taints
        .iter()
        .map(|t| t.key.as_str())
        .collect();
    assert_eq!(
        keys,
        ["example.com/maintenance", "cluster.karmada.io/not-ready"]
    );
    assert_eq!(
        updated.status.as_ref().unwrap().kubernetes_version,
        "v1.31.0"
    );
    // an operator's NoExecute taint gets its timeAdded once (TM-8.3), kept on later updates
    let evict = v1::Taint {
        key: "example.com/evict".into(),
        effect: v1::TaintEffect::NoExecute as i32,
        ..Default::default()
    };
    let mut with_evict = updated.clone();
    with_evict.spec.as_mut().unwrap().taints = vec![evict.clone()];
    let first = client
        .update_cluster(v1::UpdateClusterRequest {
            cluster: Some(with_evict),
        })
        .await
        .unwrap()
        .into_inner();
    let stamped = first.spec.as_ref().unwrap().taints[0].time_added;
    assert!(stamped.is_some(), "timeAdded stamped");
    let mut again = first.clone();
    again.spec.as_mut().unwrap().taints = vec![evict];
    let second = client
        .update_cluster(v1::UpdateClusterRequest {
            cluster: Some(again),
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(second.spec.as_ref().unwrap().taints[0].time_added, stamped);
    // status given on create is cluster-health's, not the user's
    let mut with_status = cluster("member2", "http://127.0.0.1:1");
    with_status.status = health.status.clone();
    let created = client
        .create_cluster(create_cluster(with_status))
        .await
        .unwrap()
        .into_inner();
    assert!(created.status.is_none());
    api.stop().await;
}

#[tokio::test]
async fn cluster_delete_only_marks_while_works_reference_it() {
    let (store, api, mut client) = setup().await;
    let typed = Typed::new(store.clone());
    client
        .create_cluster(create_cluster(cluster("member1", "http://127.0.0.1:1")))
        .await
        .unwrap();
    let w = typed
        .create(work("member1", "nginx-1"), None)
        .await
        .unwrap();
    let delete = v1::DeleteClusterRequest {
        name: "member1".into(),
        preconditions: None,
    };
    for _ in 0..2 {
        let resp = client
            .delete_cluster(delete.clone())
            .await
            .unwrap()
            .into_inner();
        assert!(!resp.deleted, "a Work still targets member1 (A2/CH-15)");
        assert!(
            resp.cluster
                .unwrap()
                .metadata
                .unwrap()
                .deletion_timestamp
                .is_some()
        );
    }
    typed.delete(&w.key(), None).await.unwrap();
    let resp = client.delete_cluster(delete).await.unwrap().into_inner();
    assert!(resp.deleted);
    api.stop().await;
}

// ---------------------------------------------------------------------------------------
// List paging and Watch
// ---------------------------------------------------------------------------------------

#[tokio::test]
async fn list_pages_are_read_at_one_revision() {
    let (_store, api, mut client) = setup().await;
    for i in 0..5 {
        client
            .create_cluster(create_cluster(cluster(
                &format!("m{i}"),
                "http://127.0.0.1:1",
            )))
            .await
            .unwrap();
    }
    let mut names = vec![];
    let mut token = String::new();
    let mut revisions = vec![];
    loop {
        let page = client
            .list_clusters(v1::ListClustersRequest {
                page_size: 2,
                page_token: token.clone(),
                ..Default::default()
            })
            .await
            .unwrap()
            .into_inner();
        assert!(page.items.len() <= 2);
        names.extend(page.items.iter().map(|c| c.name().to_owned()));
        revisions.push(page.resource_version);
        if revisions.len() == 1 {
            // created after the first page: not part of this list
            client
                .create_cluster(create_cluster(cluster("m9", "http://127.0.0.1:1")))
                .await
                .unwrap();
        }
        if page.next_page_token.is_empty() {
            break;
        }
        token = page.next_page_token;
    }
    assert_eq!(names, ["m0", "m1", "m2", "m3", "m4"]);
    assert_eq!(revisions.len(), 3);
    assert!(
        revisions.iter().all(|r| *r == revisions[0]),
        "{revisions:?}"
    );
    api.stop().await;
}

#[tokio::test]
async fn watch_sees_added_modified_deleted_in_order() {
    let (store, api, mut client) = setup().await;
    let a = client
        .create_cluster(create_cluster(cluster("a", "http://127.0.0.1:1")))
        .await
        .unwrap()
        .into_inner();
    let mut stream = testing::watch_clusters(&mut client).await;
    let first = next(&mut stream).await;
    assert_eq!(first.r#type, WatchEventType::Added as i32);
    assert_eq!(first.object.as_ref().unwrap().name(), "a");
    let bookmark = next(&mut stream).await;
    assert_eq!(bookmark.r#type, WatchEventType::Bookmark as i32);
    assert!(bookmark.object.is_none() && bookmark.resource_version >= a.resource_version());

    let b = client
        .create_cluster(create_cluster(cluster("b", "http://127.0.0.1:1")))
        .await
        .unwrap()
        .into_inner();
    let mut b2 = b.clone();
    b2.spec.as_mut().unwrap().region = "us".into();
    client
        .update_cluster(v1::UpdateClusterRequest { cluster: Some(b2) })
        .await
        .unwrap();
    client
        .delete_cluster(v1::DeleteClusterRequest {
            name: "b".into(),
            preconditions: None,
        })
        .await
        .unwrap();
    let mut seen = vec![];
    let mut last = 0;
    for _ in 0..3 {
        let e = next(&mut stream).await;
        assert!(e.resource_version > last, "revisions increase");
        last = e.resource_version;
        let obj = e.object.unwrap();
        seen.push((
            WatchEventType::try_from(e.r#type).unwrap(),
            obj.name().to_owned(),
            obj.spec.map(|s| s.region).unwrap_or_default(),
        ));
    }
    assert_eq!(
        seen,
        [
            (WatchEventType::Added, "b".to_owned(), "eu".to_owned()),
            (WatchEventType::Modified, "b".to_owned(), "us".to_owned()),
            (WatchEventType::Deleted, "b".to_owned(), "us".to_owned()),
        ]
    );

    // From a List's resourceVersion: only what changed after it.
    let list = client
        .list_clusters(v1::ListClustersRequest::default())
        .await
        .unwrap()
        .into_inner();
    client
        .create_cluster(create_cluster(cluster("c", "http://127.0.0.1:1")))
        .await
        .unwrap();
    let mut from_list = client
        .watch_clusters(v1::WatchClustersRequest {
            resource_version: list.resource_version,
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    let e = next(&mut from_list).await;
    assert_eq!(
        (e.r#type, e.object.unwrap().name().to_owned()),
        (WatchEventType::Added as i32, "c".to_owned())
    );

    // A label-selected view: an object that stops matching leaves it as DELETED.
    let mut gold = client
        .watch_clusters(v1::WatchClustersRequest {
            label_selector: "tier=gold".into(),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(
        next(&mut gold).await.r#type,
        WatchEventType::Bookmark as i32
    );
    let mut d = cluster("d", "http://127.0.0.1:1");
    d.metadata
        .as_mut()
        .unwrap()
        .labels
        .insert("tier".into(), "gold".into());
    let d = client
        .create_cluster(create_cluster(d))
        .await
        .unwrap()
        .into_inner();
    let mut plain = d.clone();
    plain.metadata.as_mut().unwrap().labels.remove("tier");
    client
        .update_cluster(v1::UpdateClusterRequest {
            cluster: Some(plain),
        })
        .await
        .unwrap();
    let types: Vec<i32> = vec![next(&mut gold).await.r#type, next(&mut gold).await.r#type];
    assert_eq!(
        types,
        [WatchEventType::Added as i32, WatchEventType::Deleted as i32]
    );

    // A compacted revision: OUT_OF_RANGE, the client must re-list.
    let now = store.current_revision().await.unwrap();
    store.compact(now).await.unwrap();
    let mut old = client
        .watch_clusters(v1::WatchClustersRequest {
            resource_version: 2,
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    let err = tokio::time::timeout(Duration::from_secs(5), old.message())
        .await
        .unwrap()
        .unwrap_err();
    assert_eq!(err.code(), Code::OutOfRange, "{err:?}");
    api.stop().await;
}

#[tokio::test]
async fn watch_works_filters_by_cluster_and_sends_bookmarks() {
    let (store, api, mut client) = setup().await;
    let typed = Typed::new(store.clone());
    typed.create(work("member1", "w1"), None).await.unwrap();
    typed.create(work("member2", "w2"), None).await.unwrap();
    let mut stream = client
        .watch_works(v1::WatchWorksRequest {
            cluster: "member1".into(),
            allow_bookmarks: true,
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    let e = next(&mut stream).await;
    assert_eq!(e.object.unwrap().name(), "w1");
    assert_eq!(
        next(&mut stream).await.r#type,
        WatchEventType::Bookmark as i32
    );
    // Periodic bookmarks (100 ms in tests) may come at any time: skip them.
    async fn next_change(stream: &mut Streaming<v1::WatchWorksResponse>) -> v1::WatchWorksResponse {
        loop {
            let e = next(stream).await;
            if e.r#type != WatchEventType::Bookmark as i32 {
                return e;
            }
        }
    }
    typed.create(work("member2", "w3"), None).await.unwrap();
    let w4 = typed.create(work("member1", "w4"), None).await.unwrap();
    let e = next_change(&mut stream).await;
    assert_eq!(
        e.object.unwrap().name(),
        "w4",
        "member2's Works are not sent"
    );
    // with nothing happening, periodic bookmarks carry the revision on
    let e = next(&mut stream).await;
    assert_eq!(e.r#type, WatchEventType::Bookmark as i32);
    assert!(e.resource_version >= w4.resource_version());
    typed.delete(&w4.key(), None).await.unwrap();
    let deleted = next_change(&mut stream).await;
    assert_eq!(deleted.r#type, WatchEventType::Deleted as i32);
    assert_eq!(deleted.object.unwrap().spec.unwrap().cluster, "member1");
    api.stop().await;
}

/// The request timeout bounds unary calls, not how long a watch stream stays open.
#[tokio::test]
async fn watches_outlive_the_request_timeout() {
    let store: StoreRef = Arc::new(MemStore::new());
    let mut config = testing::config();
    config.grpc_timeout = Duration::from_millis(200);
    let api = testing::serve(store, config).await;
    let mut client = api.client().await;
    let mut stream = testing::watch_clusters(&mut client).await;
    assert_eq!(
        next(&mut stream).await.r#type,
        WatchEventType::Bookmark as i32
    );
    tokio::time::sleep(Duration::from_millis(500)).await;
    client
        .create_cluster(create_cluster(cluster("late", "http://127.0.0.1:1")))
        .await
        .unwrap();
    let e = next(&mut stream).await;
    assert_eq!(e.object.unwrap().name(), "late");
    api.stop().await;
}

#[tokio::test]
async fn watches_end_when_the_server_shuts_down() {
    let (_store, api, mut client) = setup().await;
    let mut stream = testing::watch_clusters(&mut client).await;
    assert_eq!(
        next(&mut stream).await.r#type,
        WatchEventType::Bookmark as i32
    );
    api.shutdown.trigger();
    let end = tokio::time::timeout(Duration::from_secs(5), stream.message())
        .await
        .expect("the watch ends promptly");
    match end {
        Ok(None) => {}
        Err(status) => assert_eq!(status.code(), Code::Unavailable, "{status:?}"),
        Ok(Some(msg)) => panic!("unexpected message {msg:?}"),
    }
    api.stop().await;
}

// ---------------------------------------------------------------------------------------
// Detector
// ---------------------------------------------------------------------------------------

async fn binding(client: &mut Client) -> Option<v1::ResourceBinding> {
    client
        .get_resource_binding(v1::GetResourceBindingRequest {
            namespace: "default".into(),
            name: "nginx-deployment".into(),
        })
        .await
        .ok()
        .map(Response::into_inner)
}

fn policy_label(b: &v1::ResourceBinding) -> String {
    let labels = &b.metadata.as_ref().unwrap().labels;
    labels
        .get(LABEL_POLICY_NAME)
        .or_else(|| labels.get(LABEL_CLUSTER_POLICY_NAME))
        .cloned()
        .unwrap_or_default()
}

#[tokio::test]
async fn detector_binds_the_seed_workload_and_follows_changes() {
    let (store, api, mut client) = setup().await;
    let typed = Typed::new(store.clone());
    let policy = client
        .create_propagation_policy(create_pp(seed_policy()))
        .await
        .unwrap()
        .into_inner();
    let workload = client
        .create_workload(create_workload(nginx_workload()))
        .await
        .unwrap()
        .into_inner();
    let b = eventually("the binding", || {
        let mut c = client.clone();
        async move { binding(&mut c).await }
    })
    .await;
    let spec = b.spec.clone().unwrap();
    assert_eq!(
        spec.resource,
        Some(v1::ObjectReference {
            api_version: "apps/v1".into(),
            kind: "Deployment".into(),
            namespace: "default".into(),
            name: "nginx".into(),
            uid: workload.metadata.as_ref().unwrap().uid.clone(),
        })
    );
    assert_eq!(spec.replicas, 3);
    let req = spec.replica_requirements.unwrap().resource_request.unwrap();
    assert_eq!((req.cpu_millis, req.memory_bytes), (100, 128 << 20));
    let placement = spec.placement.clone().unwrap();
    assert_eq!(
        placement,
        policy.spec.as_ref().unwrap().placement.clone().unwrap()
    );
    assert_eq!(
        placement.cluster_affinity.unwrap().cluster_names,
        ["member1", "member2"]
    );
    let weights: Vec<i64> = placement
        .replica_scheduling
        .unwrap()
        .weight_preference
        .unwrap()
        .static_weight_list
        .iter()
        .map(|w| w.weight)
        .collect();
    assert_eq!(weights, [1, 2]);
    let tolerations: Vec<_> = placement
        .cluster_tolerations
        .iter()
        .map(|t| (t.key.as_str(), t.toleration_seconds))
        .collect();
    assert_eq!(
        tolerations,
        [
            ("cluster.karmada.io/not-ready", Some(300)),
            ("cluster.karmada.io/unreachable", Some(300))
        ]
    );
    assert_eq!(spec.scheduler_name, "default-scheduler");
    assert_eq!(policy_label(&b), "nginx-propagation");
    assert_eq!(
        b.metadata.as_ref().unwrap().labels[PERMANENT_ID_LABEL_POLICY],
        policy.metadata.as_ref().unwrap().labels[PERMANENT_ID_LABEL_POLICY]
    );
    assert_eq!(b.generation(), 1);

    // The scheduler writes its fields.
    let stored: v1::ResourceBinding = typed.get(&b.key()).await.unwrap().unwrap();
    let mut scheduled = stored.clone();
    scheduled.spec.as_mut().unwrap().clusters = vec![
        v1::TargetCluster {
            name: "member1".into(),
            replicas: 1,
        },
        v1::TargetCluster {
            name: "member2".into(),
            replicas: 2,
        },
    ];
    scheduled.status = Some(v1::ResourceBindingStatus {
        scheduler_observed_generation: 2,
        ..Default::default()
    });
    let scheduled = typed.update(&stored, scheduled).await.unwrap();
    assert_eq!(scheduled.generation(), 2);

    // A policy change re-syncs the binding (generation bumps), keeping the scheduler's fields.
    let mut changed = policy.clone();
    let list = static_weights(changed.spec.as_mut().unwrap().placement.as_mut().unwrap());
    list[0].weight = 2;
    list[1].weight = 1;
    client
        .update_propagation_policy(v1::UpdatePropagationPolicyRequest {
            propagation_policy: Some(changed),
        })
        .await
        .unwrap();
    let b = eventually("the new weights", || {
        let mut c = client.clone();
        async move {
            binding(&mut c).await.filter(|b| {
                b.spec
                    .as_ref()
                    .unwrap()
                    .placement
                    .as_ref()
                    .unwrap()
                    .replica_scheduling
                    .as_ref()
                    .unwrap()
                    .weight_preference
                    .as_ref()
                    .unwrap()
                    .static_weight_list[0]
                    .weight
                    == 2
            })
        }
    })
    .await;
    assert_eq!(b.generation(), 3);
    assert_eq!(
        b.spec.as_ref().unwrap().clusters.len(),
        2,
        "spec.clusters kept"
    );
    assert_eq!(
        b.status.as_ref().unwrap().scheduler_observed_generation,
        2,
        "status kept"
    );

    // A workload change (replicas) too.
    let mut scaled = workload.clone();
    scaled.manifest = scaled
        .manifest
        .replace("\"replicas\": 3", "\"replicas\": 5");
    client
        .update_workload(v1::UpdateWorkloadRequest {
            workload: Some(scaled),
        })
        .await
        .unwrap();
    let b = eventually("5 replicas", || {
        let mut c = client.clone();
        async move {
            binding(&mut c)
                .await
                .filter(|b| b.spec.as_ref().unwrap().replicas == 5)
        }
    })
    .await;
    assert_eq!(b.generation(), 4);
    assert_eq!(b.spec.as_ref().unwrap().clusters.len(), 2);

    // The workload goes: so does its binding.
    client
        .delete_workload(flotilla_api::testing::delete_nginx())
        .await
        .unwrap();
    eventually("the binding deleted", || {
        let mut c = client.clone();
        async move { binding(&mut c).await.is_none().then_some(()) }
    })
    .await;
    // the claim was recorded as an event on the binding (events are written in batches)
    eventually("the ApplyPolicySucceed event", || {
        let mut c = client.clone();
        async move {
            let events = c
                .list_events(v1::ListEventsRequest {
                    involved_object_name: "nginx-deployment".into(),
                    ..Default::default()
                })
                .await
                .unwrap()
                .into_inner();
            events
                .items
                .iter()
                .any(|e| e.reason == "ApplyPolicySucceed")
                .then_some(())
        }
    })
    .await;
    api.stop().await;
}

/// PL-4 for a workload no policy claims yet, and PL-1 on each deletion: every policy exists
/// before the workload, so the best one claims it; deleting the claiming policy detaches the
/// binding (kept, with its targets) and the best remaining policy claims it again.
#[tokio::test]
async fn detector_pl4_precedence_and_pl1_detach_on_each_policy_deletion() {
    let (_store, api, mut client) = setup().await;
    let observer = client.clone();
    let claimed_by = move |want: &'static str| {
        let client = observer.clone();
        async move {
            eventually(want, || {
                let mut c = client.clone();
                async move { binding(&mut c).await.filter(|b| policy_label(b) == want) }
            })
            .await
        }
    };
    client
        .create_cluster_propagation_policy(v1::CreateClusterPropagationPolicyRequest {
            cluster_propagation_policy: Some(v1::ClusterPropagationPolicy {
                metadata: named("all-deployments"),
                spec: Some(kind_only("cpp", 100)),
            }),
        })
        .await
        .unwrap();
    let mut by_label = kind_only("b-label", 0);
    by_label.resource_selectors[0].label_selector = Some(v1::LabelSelector {
        match_labels: [("app".to_owned(), "nginx".to_owned())].into(),
        match_expressions: vec![],
    });
    let mut by_name = kind_only("z-name", 0);
    by_name.resource_selectors[0].name = "nginx".into();
    for (name, spec) in [
        ("a-kind", kind_only("a-kind", 0)),
        ("b-label", by_label),
        ("z-name", by_name),
        ("high", kind_only("high", 10)),
    ] {
        client
            .create_propagation_policy(create_pp(pp(name, spec)))
            .await
            .unwrap();
    }
    client
        .create_workload(create_workload(nginx_workload()))
        .await
        .unwrap();
    // the highest priority wins over specificity
    let b = claimed_by("high").await;
    assert_eq!(
        b.spec
            .unwrap()
            .placement
            .unwrap()
            .cluster_affinity
            .unwrap()
            .cluster_names,
        ["high-cluster"]
    );
    // then, one deletion at a time: a name is more specific than a label selector, which is
    // more specific than kind-only; namespaced policies win over cluster-wide ones
    for (delete, next) in [
        ("high", "z-name"),
        ("z-name", "b-label"),
        ("b-label", "a-kind"),
        ("a-kind", "all-deployments"),
    ] {
        client
            .delete_propagation_policy(v1::DeletePropagationPolicyRequest {
                namespace: "default".into(),
                name: delete.into(),
                preconditions: None,
            })
            .await
            .unwrap();
        claimed_by(next).await;
    }
    let b = binding(&mut client).await.unwrap();
    assert!(
        !b.metadata
            .as_ref()
            .unwrap()
            .labels
            .contains_key(LABEL_POLICY_NAME),
        "no stale namespaced policy label"
    );
    // no policy at all: the binding stays, detached (PL-1), until the workload goes (PL-2)
    client
        .delete_cluster_propagation_policy(v1::DeleteClusterPropagationPolicyRequest {
            name: "all-deployments".into(),
            preconditions: None,
        })
        .await
        .unwrap();
    let detached = claimed_by("").await;
    assert_eq!(
        detached
            .spec
            .unwrap()
            .placement
            .unwrap()
            .cluster_affinity
            .unwrap()
            .cluster_names,
        ["cpp-cluster"],
        "the last placement is kept"
    );
    client
        .delete_workload(flotilla_api::testing::delete_nginx())
        .await
        .unwrap();
    eventually("the binding deleted with its workload", || {
        let mut c = client.clone();
        async move { binding(&mut c).await.is_none().then_some(()) }
    })
    .await;
    api.stop().await;
}

/// A MemStore for detector tests, and the api's admission.
fn detector_store() -> (Typed, flotilla_api::admission::Admission) {
    let store: StoreRef = Arc::new(MemStore::new());
    (Typed::new(store), testing::config().admission)
}

/// `policy`, admitted and stored.
async fn create_policy(
    typed: &Typed,
    admission: &flotilla_api::admission::Admission,
    policy: v1::PropagationPolicy,
) -> v1::PropagationPolicy {
    typed
        .create(
            admission
                .propagation_policy(Some(policy), None, false)
                .unwrap(),
            None,
        )
        .await
        .unwrap()
}

/// The seed workload's binding as stored (it must exist).
async fn stored_binding(typed: &Typed) -> v1::ResourceBinding {
    typed
        .get("bindings/default/nginx-deployment")
        .await
        .unwrap()
        .expect("the binding exists")
}

/// The seed workload stored beside `policy`, the detector's caches holding both (and no
/// binding yet), and a detector context over `typed`.
async fn detector_on(
    typed: &Typed,
    admission: &flotilla_api::admission::Admission,
    policy: &v1::PropagationPolicy,
) -> (v1::Workload, CacheWriters, Arc<Ctx>) {
    let workload = typed
        .create(admission.workload(Some(nginx_workload())).unwrap(), None)
        .await
        .unwrap();
    let mut writers = CacheWriters::new();
    apply_list(
        &mut writers.policies,
        vec![(policy.key(), policy.resource_version(), policy.clone())],
    );
    apply_list(
        &mut writers.workloads,
        vec![(
            workload.key(),
            workload.resource_version(),
            workload.clone(),
        )],
    );
    apply_list(&mut writers.cluster_policies, vec![]);
    apply_list(&mut writers.bindings, vec![]);
    let ctx = Arc::new(Ctx::new(
        writers.caches(),
        typed.clone(),
        BatchWriter::spawn(typed.store().clone(), flotilla_runtime::Shutdown::new()),
        Recorder::disabled("test"),
    ));
    (workload, writers, ctx)
}

/// PL-3: a workload claimed by a low-priority policy keeps it when a higher-priority policy
/// that also matches is created (Karmada's `preemption: Never`): the reconcile that follows
/// the new policy writes nothing.
/// The seed workload claimed by the priority-1 policy `low`, the detector's caches holding
/// the policy, the workload and the binding.
struct Claimed {
    typed: Typed,
    admission: flotilla_api::admission::Admission,
    low: v1::PropagationPolicy,
    workload: v1::Workload,
    writers: CacheWriters,
    ctx: Arc<Ctx>,
    claimed: v1::ResourceBinding,
}

async fn claimed_by_low() -> Claimed {
    let (typed, admission) = detector_store();
    let low = create_policy(&typed, &admission, pp("low", kind_only("low", 1))).await;
    let (workload, mut writers, ctx) = detector_on(&typed, &admission, &low).await;
    reconcile(workload.key(), ctx.clone()).await.unwrap();
    let claimed: v1::ResourceBinding = stored_binding(&typed).await;
    assert_eq!(policy_label(&claimed), "low");
    apply_list(
        &mut writers.bindings,
        vec![(claimed.key(), claimed.resource_version(), claimed.clone())],
    );
    Claimed {
        typed,
        admission,
        low,
        workload,
        writers,
        ctx,
        claimed,
    }
}

#[tokio::test]
async fn detector_pl3_a_claimed_workload_stays_with_its_policy() {
    let Claimed {
        typed,
        admission,
        low,
        workload,
        mut writers,
        ctx,
        claimed,
    } = claimed_by_low().await;
    // a priority-50 policy naming the workload arrives
    let mut by_name = kind_only("high", 50);
    by_name.resource_selectors[0].name = "nginx".into();
    let high = create_policy(&typed, &admission, pp("high", by_name)).await;
    writers.policies.apply_watcher_event(&Event::Apply(Object {
        key: high.key(),
        revision: high.resource_version(),
        value: Arc::new(high.clone()),
    }));
    reconcile(workload.key(), ctx.clone()).await.unwrap();
    let after: v1::ResourceBinding = stored_binding(&typed).await;
    assert_eq!(policy_label(&after), "low", "not preempted");
    assert_eq!(
        after.resource_version(),
        claimed.resource_version(),
        "nothing written"
    );
    // once the claiming policy is gone, the other one claims it (PL-1, then PL-4)
    typed
        .delete(&low.key(), Some(low.resource_version()))
        .await
        .unwrap();
    writers.policies.apply_watcher_event(&Event::Delete {
        key: low.key(),
        revision: low.resource_version() + 10,
    });
    reconcile(workload.key(), ctx).await.unwrap();
    let taken: v1::ResourceBinding = stored_binding(&typed).await;
    assert_eq!(policy_label(&taken), "high");
}

#[tokio::test]
async fn detector_pl3_preemption_always_takes_a_claimed_workload() {
    let Claimed {
        typed,
        admission,
        low: _,
        workload,
        mut writers,
        ctx,
        claimed: _,
    } = claimed_by_low().await;
    // a priority-50 policy with `preemption: Always` arrives: it takes the workload
    let mut preempting = kind_only("high", 50);
    preempting.preemption = v1::Preemption::Always as i32;
    let high = create_policy(&typed, &admission, pp("high", preempting)).await;
    writers.policies.apply_watcher_event(&Event::Apply(Object {
        key: high.key(),
        revision: high.resource_version(),
        value: Arc::new(high.clone()),
    }));
    reconcile(workload.key(), ctx).await.unwrap();
    let taken: v1::ResourceBinding = stored_binding(&typed).await;
    assert_eq!(policy_label(&taken), "high", "preempted");
    assert_eq!(
        taken
            .spec
            .unwrap()
            .placement
            .unwrap()
            .cluster_affinity
            .unwrap()
            .cluster_names,
        ["high-cluster"],
        "the new policy's placement"
    );
}

fn apply_list<K: Send + Sync + 'static>(
    writer: &mut flotilla_runtime::Writer<K>,
    objects: Vec<(String, i64, K)>,
) {
    writer.apply_watcher_event(&Event::Init { revision: 1 });
    for (key, revision, value) in objects {
        writer.apply_watcher_event(&Event::InitApply(Object {
            key,
            revision,
            value: Arc::new(value),
        }));
    }
    writer.apply_watcher_event(&Event::InitDone { revision: 1 });
}

/// A concurrent writer changes the binding between the detector's read (a stale cache)
/// and its write: the CAS fails, the detector re-reads and re-decides, and neither update
/// is lost (I5).
#[tokio::test]
async fn detector_rereads_after_a_conflict_and_loses_no_update() {
    let (typed, admission) = detector_store();
    let policy = create_policy(&typed, &admission, seed_policy()).await;
    let (workload, mut writers, ctx) = detector_on(&typed, &admission, &policy).await;
    reconcile(workload.key(), ctx.clone()).await.unwrap();
    let b1: v1::ResourceBinding = stored_binding(&typed).await;
    apply_list(
        &mut writers.bindings,
        vec![(b1.key(), b1.resource_version(), b1.clone())],
    );
    // the scheduler writes spec.clusters; the detector's cache still has b1
    let mut b2 = b1.clone();
    b2.spec.as_mut().unwrap().clusters = v1::TargetCluster::from_pairs(&[("member1", 3)]);
    typed.update(&b1, b2).await.unwrap();
    // the policy changes (store and cache)
    let mut changed = policy.clone();
    changed
        .spec
        .as_mut()
        .unwrap()
        .placement
        .as_mut()
        .unwrap()
        .cluster_affinity
        .as_mut()
        .unwrap()
        .cluster_names
        .push("member3".into());
    let changed = typed.update(&policy, changed).await.unwrap();
    writers.policies.apply_watcher_event(&Event::Apply(Object {
        key: changed.key(),
        revision: changed.resource_version(),
        value: Arc::new(changed.clone()),
    }));
    reconcile(workload.key(), ctx).await.unwrap();
    let b3: v1::ResourceBinding = stored_binding(&typed).await;
    let spec = b3.spec.unwrap();
    assert_eq!(spec.clusters.len(), 1, "the scheduler's write survives");
    assert_eq!(
        testing::affinity_names(spec.placement),
        ["member1", "member2", "member3"],
        "the detector's write lands"
    );
}

/// `--peer NAME=ADDR` is what `GetPeers` answers (the CLI's `explain` finds the dry-run
/// services this way); malformed or repeated peers are refused, each naming the flag.
#[tokio::test]
async fn get_peers_answers_the_peer_flags_and_bad_peers_are_refused() {
    use clap::Parser as _;
    let parse = |peers: &[&str]| {
        let mut argv = vec!["flotilla-api", "--store", "mem", "--identity", "t"];
        for p in peers {
            argv.extend(["--peer", p]);
        }
        flotilla_api::Args::try_parse_from(argv)
            .expect("parses")
            .validate()
    };
    for (bad, why) in [
        ("scheduler", "expected NAME=ADDR"),
        ("Scheduler=1.2.3.4:5", "NAME must be a service name"),
        ("scheduler=", "ADDR must be"),
        ("scheduler=a b", "ADDR must be"),
    ] {
        let errors = parse(&[bad]).expect_err(bad);
        assert!(
            errors
                .iter()
                .any(|e| e.starts_with("--peer") && e.contains(why)),
            "{bad}: {errors:?}"
        );
    }
    let twice = parse(&["scheduler=a:1", "scheduler=b:2"]).expect_err("twice");
    assert!(
        twice.iter().any(|e| e.contains("scheduler is given twice")),
        "{twice:?}"
    );

    let mut config = testing::config();
    config.peers = parse(&["scheduler=127.0.0.1:7403", "cluster-health=http://h:1"])
        .expect("valid")
        .peers;
    let store: StoreRef = Arc::new(MemStore::new());
    let api = testing::serve(store, config).await;
    let peers = api
        .client()
        .await
        .get_peers(v1::GetPeersRequest {})
        .await
        .expect("GetPeers")
        .into_inner()
        .peers;
    assert_eq!(peers.len(), 2, "{peers:?}");
    assert_eq!(peers["scheduler"], "127.0.0.1:7403");
    assert_eq!(peers["cluster-health"], "http://h:1");
    api.stop().await;
}

/// `Apply` (#12 item 7): every object admitted first, then all written in one transaction;
/// a file with one object the server refuses writes nothing, and the refusal names
/// `objects[i]`. Applying the same objects again changes nothing; a change is `configured`.
#[tokio::test]
async fn apply_admits_everything_first_and_writes_all_or_nothing() {
    let (store, api, client) = setup().await;
    let cm = v1::Workload {
        manifest: r#"{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"settings","namespace":"default"},"data":{"a":"b"}}"#.into(),
        ..Default::default()
    };
    let objects = |policy: v1::PropagationPolicy| {
        vec![
            v1::ApplyObject {
                object: Some(v1::apply_object::Object::Workload(cm.clone())),
            },
            v1::ApplyObject {
                object: Some(v1::apply_object::Object::Workload(nginx_workload())),
            },
            v1::ApplyObject {
                object: Some(v1::apply_object::Object::PropagationPolicy(policy)),
            },
        ]
    };
    let apply = |objects: Vec<v1::ApplyObject>, dry_run: bool| {
        let mut c = client.clone();
        async move {
            c.apply(v1::ApplyRequest { objects, dry_run })
                .await
                .map(Response::into_inner)
        }
    };
    let actions = |r: &v1::ApplyResponse| -> Vec<String> {
        r.outcomes
            .iter()
            .map(|o| format!("{} {} {}", o.kind, o.name, o.action))
            .collect()
    };

    // A refused object (a ClusterTaintPolicy with NoExecute, not allowed by default) after
    // valid ones: nothing is written.
    let before = snapshot(&store).await;
    let mut refused = objects(seed_policy());
    let mut ctp = flotilla_runtime::testing::bindings::taint_policy_on_not_ready(
        "no-execute",
        "example.com/down",
        v1::TaintEffect::NoExecute,
    );
    ctp.metadata.as_mut().unwrap().namespace.clear();
    refused.push(v1::ApplyObject {
        object: Some(v1::apply_object::Object::ClusterTaintPolicy(ctp)),
    });
    let status = apply(refused, false).await.unwrap_err();
    assert_eq!(status.code(), Code::InvalidArgument, "{status:?}");
    let fields = bad_fields(&status);
    assert!(
        fields.iter().all(|f| f.starts_with("objects[3].")) && !fields.is_empty(),
        "{fields:?}"
    );
    assert_eq!(snapshot(&store).await, before, "nothing half-written");

    // A dry run says what would happen and writes nothing.
    let dry = apply(objects(seed_policy()), true).await.unwrap();
    assert_eq!(
        actions(&dry),
        [
            "Workload settings created",
            "Workload nginx created",
            "PropagationPolicy nginx-propagation created"
        ]
    );
    assert_eq!(snapshot(&store).await, before);

    // All three in one transaction: one revision (the detector writes the binding after).
    let done = apply(objects(seed_policy()), false).await.unwrap();
    assert_eq!(actions(&done), actions(&dry));
    let after = snapshot(&store).await;
    let new_revisions: std::collections::HashSet<i64> = after
        .iter()
        .filter(|(k, _)| k.starts_with("workloads/") || k.starts_with("policies/"))
        .map(|(_, rv)| *rv)
        .collect();
    assert_eq!(
        new_revisions,
        std::collections::HashSet::from([done.resource_version]),
        "{after:?}"
    );

    // Again: unchanged; a changed policy: configured, the others unchanged.
    let again = apply(objects(seed_policy()), false).await.unwrap();
    assert!(
        again.outcomes.iter().all(|o| o.action == "unchanged"),
        "{again:?}"
    );
    let mut changed = seed_policy();
    changed.spec.as_mut().unwrap().priority = 5;
    let configured = apply(objects(changed), false).await.unwrap();
    assert_eq!(
        actions(&configured),
        [
            "Workload settings unchanged",
            "Workload nginx unchanged",
            "PropagationPolicy nginx-propagation configured"
        ]
    );

    // The same object twice in one request is refused.
    let mut twice = objects(seed_policy());
    twice.push(twice[0].clone());
    let status = apply(twice, false).await.unwrap_err();
    assert_eq!(bad_fields(&status), ["objects[3]"], "{status:?}");
    api.stop().await;
}

/// A file of more objects than one transaction holds (128) is admitted whole, then written in
/// transactions of 128, in order; a refused object among them still writes nothing.
#[tokio::test]
async fn apply_writes_a_large_file_in_transactions_of_128() {
    let (store, api, mut client) = setup().await;
    let config_map = |i: usize| v1::ApplyObject {
        object: Some(v1::apply_object::Object::Workload(v1::Workload {
            manifest: format!(
                r#"{{"apiVersion":"v1","kind":"ConfigMap","metadata":{{"name":"cm-{i}","namespace":"default"}},"data":{{}}}}"#
            ),
            ..Default::default()
        })),
    };
    let mut objects: Vec<v1::ApplyObject> = (0..200).map(config_map).collect();
    // one bad object at the end: nothing is written
    let before = snapshot(&store).await;
    objects.push(v1::ApplyObject {
        object: Some(v1::apply_object::Object::Workload(v1::Workload {
            manifest: "{not json".into(),
            ..Default::default()
        })),
    });
    let status = client
        .apply(v1::ApplyRequest {
            objects: objects.clone(),
            dry_run: false,
        })
        .await
        .unwrap_err();
    assert!(
        bad_fields(&status)
            .iter()
            .all(|f| f.starts_with("objects[200]")),
        "{status:?}"
    );
    assert_eq!(snapshot(&store).await, before);
    objects.pop();
    let done = client
        .apply(v1::ApplyRequest {
            objects,
            dry_run: false,
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(done.outcomes.len(), 200);
    assert!(done.outcomes.iter().all(|o| o.action == "created"));
    let revisions: std::collections::BTreeSet<i64> = snapshot(&store)
        .await
        .into_iter()
        .filter(|(k, _)| k.starts_with("workloads/default/ConfigMap/cm-"))
        .map(|(_, rv)| rv)
        .collect();
    assert_eq!(revisions.len(), 2, "128 + 72 objects: two transactions");
    assert_eq!(revisions.last(), Some(&done.resource_version));
    api.stop().await;
}

/// A ClusterPropagationPolicy selecting every template of the given `(apiVersion, kind)`s.
fn cpp_for(name: &str, kinds: &[(&str, &str)]) -> v1::CreateClusterPropagationPolicyRequest {
    let mut spec = kind_only(name, 0);
    spec.resource_selectors = kinds
        .iter()
        .map(|(api_version, kind)| v1::ResourceSelector {
            api_version: (*api_version).into(),
            kind: (*kind).into(),
            ..Default::default()
        })
        .collect();
    v1::CreateClusterPropagationPolicyRequest {
        cluster_propagation_policy: Some(v1::ClusterPropagationPolicy {
            metadata: named(name),
            spec: Some(spec),
        }),
    }
}

fn manifest_workload(manifest: &str) -> v1::CreateWorkloadRequest {
    create_workload(v1::Workload {
        manifest: manifest.into(),
        ..Default::default()
    })
}

/// The binding stored at `key`, if any.
async fn stored_binding_or_none(typed: &Typed, key: &str) -> Option<v1::ResourceBinding> {
    typed.get(key).await.unwrap()
}

/// The binding at `key` once it exists and `ok` holds for it.
async fn stored_binding_at(
    typed: &Typed,
    key: &str,
    ok: impl Fn(&v1::ResourceBinding) -> bool,
) -> v1::ResourceBinding {
    eventually(key, || async {
        stored_binding_or_none(typed, key).await.filter(|b| ok(b))
    })
    .await
}

#[tokio::test]
async fn rm_1_one_kind_and_name_in_two_groups_are_two_templates_with_two_bindings() {
    let (store, _api, mut client) = setup().await;
    let typed = Typed::new(store.clone());
    client
        .create_cluster_propagation_policy(cpp_for(
            "deployments",
            &[("apps/v1", "Deployment"), ("example.com/v1", "Deployment")],
        ))
        .await
        .unwrap();
    let apps = r#"{"apiVersion":"apps/v1","kind":"Deployment","metadata":{"name":"clash","namespace":"default"},"spec":{"replicas":2}}"#;
    let custom = r#"{"apiVersion":"example.com/v1","kind":"Deployment","metadata":{"name":"clash","namespace":"default"},"spec":{"size":9}}"#;
    client
        .create_workload(manifest_workload(apps))
        .await
        .unwrap();
    let first = stored_binding_at(&typed, "bindings/default/clash-deployment", |_| true).await;
    // the other group's template is created beside it, not in its place
    client
        .create_workload(manifest_workload(custom))
        .await
        .expect("another group's Deployment of the same name is another template");
    let keys: Vec<String> = snapshot(&store)
        .await
        .into_iter()
        .map(|(k, _)| k)
        .filter(|k| k.starts_with("workloads/"))
        .collect();
    assert_eq!(
        keys,
        [
            "workloads/default/Deployment.apps/clash",
            "workloads/default/Deployment.example.com/clash"
        ]
    );
    // its binding takes the usual name with the group's suffix, since that name is taken
    let suffixed = format!(
        "bindings/default/clash-deployment-{}",
        flotilla_core::resource::group_suffix("example.com")
    );
    let second = stored_binding_at(&typed, &suffixed, |_| true).await;
    let resource = |b: &v1::ResourceBinding| b.spec.clone().unwrap().resource.unwrap();
    assert_eq!(resource(&first).api_version, "apps/v1");
    assert_eq!(resource(&second).api_version, "example.com/v1");
    assert_eq!(
        second.spec.as_ref().unwrap().replicas,
        0,
        "IN-1: a custom kind has none"
    );
    // the first binding was not touched by the second template
    let again: v1::ResourceBinding = typed
        .get("bindings/default/clash-deployment")
        .await
        .unwrap()
        .unwrap();
    assert_eq!(resource(&again).api_version, "apps/v1");

    // Get: a bare kind means the built-in group; Kind.group names one exactly
    let get = |kind: &str| {
        let mut c = client.clone();
        let kind = kind.to_owned();
        async move {
            c.get_workload(v1::GetWorkloadRequest {
                namespace: "default".into(),
                kind,
                name: "clash".into(),
            })
            .await
            .map(|r| r.into_inner().api_version)
        }
    };
    assert_eq!(get("Deployment").await.unwrap(), "apps/v1");
    assert_eq!(get("Deployment.apps").await.unwrap(), "apps/v1");
    assert_eq!(
        get("Deployment.example.com").await.unwrap(),
        "example.com/v1"
    );
    // List by a bare kind finds both groups' Deployments
    let listed = client
        .list_workloads(v1::ListWorkloadsRequest {
            namespace: "default".into(),
            kind: "Deployment".into(),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner()
        .items;
    assert_eq!(listed.len(), 2);

    // deleting one group's template removes its binding only
    client
        .delete_workload(v1::DeleteWorkloadRequest {
            namespace: "default".into(),
            kind: "Deployment.example.com".into(),
            name: "clash".into(),
            preconditions: None,
        })
        .await
        .unwrap();
    eventually("the custom template's binding deleted", || async {
        stored_binding_or_none(&typed, &suffixed)
            .await
            .is_none()
            .then_some(())
    })
    .await;
    assert!(
        stored_binding_or_none(&typed, "bindings/default/clash-deployment")
            .await
            .is_some()
    );
}

#[tokio::test]
async fn cr_1_cr_2_cluster_scoped_templates_get_cluster_resource_bindings() {
    let (store, _api, mut client) = setup().await;
    let typed = Typed::new(store.clone());
    // CR-1: a namespaced policy never claims a cluster-scoped template
    let mut namespaced = kind_only("namespaced", 100);
    namespaced.resource_selectors[0] = v1::ResourceSelector {
        api_version: "v1".into(),
        kind: "Namespace".into(),
        ..Default::default()
    };
    client
        .create_propagation_policy(create_pp(pp("namespaced", namespaced)))
        .await
        .unwrap();
    client
        .create_cluster_propagation_policy(cpp_for(
            "platform",
            &[
                ("v1", "Namespace"),
                ("rbac.authorization.k8s.io/v1", "ClusterRole"),
            ],
        ))
        .await
        .unwrap();
    // a namespace given to a cluster-scoped object is dropped, from the manifest too (CR-4)
    let ns = client
        .create_workload(manifest_workload(
            r#"{"apiVersion":"v1","kind":"Namespace","metadata":{"name":"team-a","namespace":"default"}}"#,
        ))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(ns.metadata.as_ref().unwrap().namespace, "");
    assert!(
        !ns.manifest.contains("namespace\":\"default"),
        "{}",
        ns.manifest
    );
    client
        .create_workload(manifest_workload(
            r#"{"apiVersion":"rbac.authorization.k8s.io/v1","kind":"ClusterRole","metadata":{"name":"viewer"},"rules":[]}"#,
        ))
        .await
        .unwrap();
    let keys: Vec<String> = snapshot(&store)
        .await
        .into_iter()
        .map(|(k, _)| k)
        .filter(|k| k.starts_with("workloads/"))
        .collect();
    assert_eq!(
        keys,
        [
            "workloads//ClusterRole.rbac.authorization.k8s.io/viewer",
            "workloads//Namespace/team-a"
        ]
    );
    // CR-2: ClusterResourceBindings (no namespace), claimed by the cluster-wide policy
    for (key, name) in [
        ("bindings//team-a-namespace", "team-a"),
        ("bindings//viewer-clusterrole", "viewer"),
    ] {
        let b = stored_binding_at(&typed, key, |_| true).await;
        assert_eq!(b.metadata.as_ref().unwrap().namespace, "");
        assert_eq!(policy_label(&b), "platform", "{key}");
        let resource = b.spec.unwrap().resource.unwrap();
        assert_eq!(
            (resource.namespace.as_str(), resource.name.as_str()),
            ("", name)
        );
    }
    // Get with an empty namespace names a ClusterResourceBinding; no ResourceBinding exists
    let crb = client
        .get_resource_binding(v1::GetResourceBindingRequest {
            namespace: String::new(),
            name: "team-a-namespace".into(),
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(crb.metadata.unwrap().name, "team-a-namespace");
    let in_default = client
        .list_resource_bindings(v1::ListResourceBindingsRequest {
            namespace: "default".into(),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner()
        .items;
    assert!(in_default.is_empty(), "{in_default:?}");
    // a cluster-scoped kind is found whatever namespace the request names (kubectl's -n)
    let got = client
        .get_workload(v1::GetWorkloadRequest {
            namespace: "default".into(),
            kind: "Namespace".into(),
            name: "team-a".into(),
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(got.metadata.unwrap().name, "team-a");
    // a namespaced kind still needs its namespace
    let err = client
        .create_workload(manifest_workload(
            r#"{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"c"}}"#,
        ))
        .await
        .unwrap_err();
    assert_eq!(err.code(), tonic::Code::InvalidArgument, "{err:?}");
    assert!(
        bad_fields(&err).contains(&"metadata.namespace".to_owned()),
        "{err:?}"
    );
}

/// Sets what the scheduler, taint manager and graceful eviction own on the binding at `key`
/// (its targets and eviction tasks), retrying on a conflict with the detector.
async fn place(typed: &Typed, key: &str, targets: &[(&str, i32)], evicting: &[&str]) {
    loop {
        let old: v1::ResourceBinding = typed.get(key).await.unwrap().expect(key);
        let mut new = old.clone();
        let spec = new.spec.as_mut().unwrap();
        spec.clusters = v1::TargetCluster::from_pairs(targets);
        spec.graceful_eviction_tasks = evicting
            .iter()
            .map(|cluster| v1::GracefulEvictionTask {
                from_cluster: (*cluster).into(),
                purge_mode: v1::PurgeMode::Gracefully as i32,
                reason: "TaintUntolerated".into(),
                producer: "TaintManager".into(),
                grace_period_seconds: Some(600),
                ..Default::default()
            })
            .collect();
        match typed.update(&old, new).await {
            Ok(_) => return,
            Err(flotilla_store::StoreError::Conflict { .. }) => continue,
            Err(e) => panic!("{e}"),
        }
    }
}

/// `requiredBy` of the binding at `key` as `(parent, [(cluster, replicas)])`.
fn required_by_of(b: &v1::ResourceBinding) -> Vec<(String, Vec<(String, i32)>)> {
    b.spec
        .iter()
        .flat_map(|s| &s.required_by)
        .map(|r| {
            (
                format!("{}/{}", r.namespace, r.name),
                r.clusters
                    .iter()
                    .map(|c| (c.name.clone(), c.replicas))
                    .collect(),
            )
        })
        .collect()
}

fn web_deployment(secret: bool) -> String {
    let secret_env = if secret {
        r#",{"name":"TOKEN","valueFrom":{"secretKeyRef":{"name":"web-secret","key":"token"}}}"#
    } else {
        ""
    };
    format!(
        r#"{{"apiVersion":"apps/v1","kind":"Deployment","metadata":{{"name":"web","namespace":"default"}},"spec":{{"replicas":2,"template":{{"spec":{{"containers":[{{"name":"web","image":"nginx","envFrom":[{{"configMapRef":{{"name":"web-config"}}}},{{"configMapRef":{{"name":"not-applied"}}}}],"env":[{{"name":"A","value":"b"}}{secret_env}]}}]}}}}}}}}"#
    )
}

#[tokio::test]
async fn dep_1_to_3_dependencies_follow_their_parent_through_a_failover() {
    let (store, _api, mut client) = setup().await;
    let typed = Typed::new(store.clone());
    let mut spec = kind_only("web", 0);
    spec.resource_selectors[0].name = "web".into();
    spec.propagate_deps = true;
    client
        .create_propagation_policy(create_pp(pp("web", spec)))
        .await
        .unwrap();
    for manifest in [
        r#"{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"web-config","namespace":"default"},"data":{"a":"b"}}"#,
        r#"{"apiVersion":"v1","kind":"Secret","metadata":{"name":"web-secret","namespace":"default"},"data":{"token":"eA=="}}"#,
    ] {
        client
            .create_workload(manifest_workload(manifest))
            .await
            .unwrap();
    }
    let parent = client
        .create_workload(manifest_workload(&web_deployment(true)))
        .await
        .unwrap()
        .into_inner();
    let parent_key = "bindings/default/web-deployment";
    let b = stored_binding_at(&typed, parent_key, |_| true).await;
    assert!(
        b.spec.as_ref().unwrap().propagate_deps,
        "copied from the policy"
    );
    // not scheduled yet: nothing requires the dependencies
    assert!(
        stored_binding_or_none(&typed, "bindings/default/web-config-configmap")
            .await
            .is_none()
    );

    // DEP-2: once the parent is scheduled, each dependency that exists as a template gets an
    // attached binding naming it, with its clusters; no placement, no policy
    place(&typed, parent_key, &[("member1", 2)], &[]).await;
    let parent_ref = "default/web-deployment".to_owned();
    let on = |clusters: &[(&str, i32)]| {
        vec![(
            parent_ref.clone(),
            clusters
                .iter()
                .map(|(c, r)| ((*c).to_owned(), *r))
                .collect::<Vec<_>>(),
        )]
    };
    for key in [
        "bindings/default/web-config-configmap",
        "bindings/default/web-secret-secret",
    ] {
        let want = on(&[("member1", 2)]);
        let attached = stored_binding_at(&typed, key, |b| required_by_of(b) == want).await;
        let spec = attached.spec.as_ref().unwrap();
        assert!(
            spec.placement.is_none(),
            "{key}: an attached binding has no placement"
        );
        assert_eq!(policy_label(&attached), "", "{key}: and no policy");
    }
    assert!(
        stored_binding_or_none(&typed, "bindings/default/not-applied-configmap")
            .await
            .is_none(),
        "a dependency that is not a template is not propagated"
    );

    // a failover: the parent moves to member2 and keeps a task on member1 — the dependencies
    // stay on member1 while the old copy runs there
    place(&typed, parent_key, &[("member2", 2)], &["member1"]).await;
    let want = on(&[("member1", 0), ("member2", 2)]);
    stored_binding_at(&typed, "bindings/default/web-config-configmap", |b| {
        required_by_of(b) == want
    })
    .await;
    // the task ends: the dependencies leave member1
    place(&typed, parent_key, &[("member2", 2)], &[]).await;
    let want = on(&[("member2", 2)]);
    stored_binding_at(&typed, "bindings/default/web-config-configmap", |b| {
        required_by_of(b) == want
    })
    .await;

    // DEP-3: the parent stops referring to the Secret: its attached binding goes
    let mut changed = parent.clone();
    changed.manifest = web_deployment(false);
    client
        .update_workload(v1::UpdateWorkloadRequest {
            workload: Some(changed),
        })
        .await
        .unwrap();
    eventually("the Secret's attached binding deleted", || async {
        stored_binding_or_none(&typed, "bindings/default/web-secret-secret")
            .await
            .is_none()
            .then_some(())
    })
    .await;

    // a dependency with a policy of its own keeps its binding and placement; it is required too
    let mut own = kind_only("config", 0);
    own.resource_selectors[0] = v1::ResourceSelector {
        api_version: "v1".into(),
        kind: "ConfigMap".into(),
        name: "web-config".into(),
        ..Default::default()
    };
    client
        .create_propagation_policy(create_pp(pp("config", own)))
        .await
        .unwrap();
    let claimed = stored_binding_at(&typed, "bindings/default/web-config-configmap", |b| {
        policy_label(b) == "config"
    })
    .await;
    assert_eq!(required_by_of(&claimed), on(&[("member2", 2)]));

    // the parent template is deleted: its binding goes, and with it the requirement; the
    // claimed dependency keeps its binding (its own policy), with an empty requiredBy
    client
        .delete_workload(v1::DeleteWorkloadRequest {
            namespace: "default".into(),
            kind: "Deployment".into(),
            name: "web".into(),
            preconditions: None,
        })
        .await
        .unwrap();
    let kept = stored_binding_at(&typed, "bindings/default/web-config-configmap", |b| {
        required_by_of(b).is_empty()
    })
    .await;
    assert_eq!(policy_label(&kept), "config");
}

fn override_policy(ns: &str, name: &str, rules: Vec<v1::OverrideRule>) -> v1::OverridePolicy {
    v1::OverridePolicy {
        metadata: object_meta(ns, name),
        spec: Some(v1::OverrideSpec {
            resource_selectors: vec![deployment_selector("nginx")],
            override_rules: rules,
        }),
    }
}

fn replace_rule(cluster: &str, path: &str, value_json: &str) -> v1::OverrideRule {
    v1::OverrideRule {
        target_cluster: Some(v1::ClusterAffinity {
            cluster_names: vec![cluster.into()],
            ..Default::default()
        }),
        overriders: Some(v1::Overriders {
            plaintext: vec![v1::PatchOperation {
                path: path.into(),
                operator: v1::OverrideOperator::Replace as i32,
                value_json: value_json.into(),
            }],
            ..Default::default()
        }),
    }
}

#[tokio::test]
async fn ov_1_override_policies_crud_and_admission() {
    let (store, _api, mut client) = setup().await;
    let op = override_policy(
        "default",
        "regional",
        vec![replace_rule("member1", "/spec/replicas", "5")],
    );
    let created = client
        .create_override_policy(v1::CreateOverridePolicyRequest {
            override_policy: Some(op.clone()),
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(created.metadata.as_ref().unwrap().generation, 1);
    let selector = &created.spec.as_ref().unwrap().resource_selectors[0];
    assert_eq!(
        selector.namespace, "default",
        "defaulted to the policy's namespace"
    );
    assert!(
        store
            .get("overridepolicies/default/regional")
            .await
            .unwrap()
            .is_some(),
        "stored under its key"
    );
    let got = client
        .get_override_policy(v1::GetOverridePolicyRequest {
            namespace: "default".into(),
            name: "regional".into(),
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(got, created);
    let mut changed = created.clone();
    changed.spec.as_mut().unwrap().override_rules[0] =
        replace_rule("member2", "/spec/replicas", "7");
    let updated = client
        .update_override_policy(v1::UpdateOverridePolicyRequest {
            override_policy: Some(changed),
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(updated.metadata.as_ref().unwrap().generation, 2);

    // OV-1 admission: each mistake named at its field, nothing written
    let mut no_value = override_policy(
        "default",
        "bad",
        vec![replace_rule("member1", "/spec/replicas", "")],
    );
    expect_invalid(
        &store,
        "spec.overrideRules[0].overriders.plaintext[0].value",
        client.create_override_policy(v1::CreateOverridePolicyRequest {
            override_policy: Some(no_value.clone()),
        }),
    )
    .await;
    no_value.spec.as_mut().unwrap().override_rules = vec![replace_rule("member1", "spec", "1")];
    expect_invalid(
        &store,
        "spec.overrideRules[0].overriders.plaintext[0].path",
        client.create_override_policy(v1::CreateOverridePolicyRequest {
            override_policy: Some(no_value.clone()),
        }),
    )
    .await;
    no_value.spec.as_mut().unwrap().override_rules =
        vec![replace_rule("member1", "/a", "{not json")];
    expect_invalid(
        &store,
        "spec.overrideRules[0].overriders.plaintext[0].valueJson",
        client.create_override_policy(v1::CreateOverridePolicyRequest {
            override_policy: Some(no_value.clone()),
        }),
    )
    .await;
    let mut other_ns = override_policy("default", "bad", vec![]);
    other_ns.spec.as_mut().unwrap().resource_selectors[0].namespace = "prod".into();
    expect_invalid(
        &store,
        "spec.resourceSelectors[0].namespace",
        client.create_override_policy(v1::CreateOverridePolicyRequest {
            override_policy: Some(other_ns),
        }),
    )
    .await;

    // the cluster-wide kind
    let cop = v1::ClusterOverridePolicy {
        metadata: Some(v1::ObjectMeta {
            name: "everywhere".into(),
            ..Default::default()
        }),
        spec: Some(v1::OverrideSpec {
            resource_selectors: Vec::new(),
            override_rules: vec![replace_rule("member1", "/spec/replicas", "1")],
        }),
    };
    client
        .create_cluster_override_policy(v1::CreateClusterOverridePolicyRequest {
            cluster_override_policy: Some(cop),
        })
        .await
        .unwrap();
    let list = client
        .list_cluster_override_policies(v1::ListClusterOverridePoliciesRequest::default())
        .await
        .unwrap()
        .into_inner();
    assert_eq!(list.items.len(), 1);
    let deleted = client
        .delete_override_policy(v1::DeleteOverridePolicyRequest {
            namespace: "default".into(),
            name: "regional".into(),
            preconditions: None,
        })
        .await
        .unwrap()
        .into_inner();
    assert!(deleted.deleted);
    assert!(
        store
            .get("overridepolicies/default/regional")
            .await
            .unwrap()
            .is_none()
    );
}
