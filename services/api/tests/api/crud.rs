//! CRUD of every kind, bad input (INVALID_ARGUMENT naming the field, nothing written),
//! optimistic concurrency and the cluster's own update and delete rules.

use super::*;

#[tokio::test]
async fn crud_round_trips_for_every_kind() {
    let (store, api, mut client) = setup().await;
    let typed = Typed::new(store.clone());

    // Cluster
    let c =
        accepted(client.create_cluster(create_cluster(cluster("member1", "http://127.0.0.1:1"))))
            .await;
    let m = c.metadata.clone().unwrap();
    assert!(m.resource_version > 0 && !m.uid.is_empty() && m.creation_timestamp.is_some());
    assert_eq!(m.generation, 1);
    let got = accepted(client.get_cluster(v1::GetClusterRequest {
        name: "member1".into(),
    }))
    .await;
    assert_eq!(got, c);
    let list = accepted(client.list_clusters(v1::ListClustersRequest {
        label_selector: "env=test".into(),
        ..Default::default()
    }))
    .await;
    assert_eq!(list.items, vec![c.clone()]);
    assert!(list.resource_version >= m.resource_version);
    let mut changed = c.clone();
    changed.spec.as_mut().unwrap().region = "us".into();
    let updated = accepted(client.update_cluster(v1::UpdateClusterRequest {
        cluster: Some(changed),
    }))
    .await;
    assert_eq!(updated.spec.as_ref().unwrap().region, "us");
    assert_eq!(
        updated.generation(),
        2,
        "a spec change bumps the generation"
    );
    assert_eq!(updated.metadata.as_ref().unwrap().uid, m.uid, "uid is kept");
    let deleted = accepted(client.delete_cluster(v1::DeleteClusterRequest {
        name: "member1".into(),
        preconditions: None,
    }))
    .await;
    assert!(deleted.deleted);
    let err = client
        .get_cluster(v1::GetClusterRequest {
            name: "member1".into(),
        })
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::NotFound);

    // PropagationPolicy: defaulted (PD-1, A1) and given a permanent id (PD-1.6)
    let p = accepted(client.create_propagation_policy(create_pp(seed_policy()))).await;
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
    let list = accepted(
        client.list_propagation_policies(v1::ListPropagationPoliciesRequest {
            namespace: "default".into(),
            ..Default::default()
        }),
    )
    .await;
    assert_eq!(list.items, vec![p.clone()]);
    let other_ns = accepted(
        client.list_propagation_policies(v1::ListPropagationPoliciesRequest {
            namespace: "other".into(),
            ..Default::default()
        }),
    )
    .await;
    assert!(other_ns.items.is_empty());
    // An update that leaves the labels out keeps the permanent id.
    let mut changed = p.clone();
    changed.metadata.as_mut().unwrap().labels.clear();
    changed.spec.as_mut().unwrap().priority = 3;
    let updated = accepted(
        client.update_propagation_policy(v1::UpdatePropagationPolicyRequest {
            propagation_policy: Some(changed),
        }),
    )
    .await;
    assert_eq!(updated.spec.as_ref().unwrap().priority, 3);
    assert_eq!(
        updated.metadata.as_ref().unwrap().labels[PERMANENT_ID_LABEL_POLICY],
        id
    );
    assert_eq!(updated.generation(), 2);
    let got = accepted(
        client.get_propagation_policy(v1::GetPropagationPolicyRequest {
            namespace: "default".into(),
            name: "nginx-propagation".into(),
        }),
    )
    .await;
    assert_eq!(got, updated);
    assert!(
        accepted(
            client.delete_propagation_policy(v1::DeletePropagationPolicyRequest {
                namespace: "default".into(),
                name: "nginx-propagation".into(),
                preconditions: None,
            })
        )
        .await
        .deleted
    );

    // ClusterPropagationPolicy
    let cpp = v1::ClusterPropagationPolicy {
        metadata: named("all-deployments"),
        spec: Some(kind_only("cpp", 0)),
    };
    let created = accepted(client.create_cluster_propagation_policy(
        v1::CreateClusterPropagationPolicyRequest {
            cluster_propagation_policy: Some(cpp),
        },
    ))
    .await;
    assert_eq!(
        created.spec.as_ref().unwrap().scheduler_name,
        "default-scheduler"
    );
    let mut changed = created.clone();
    changed.spec.as_mut().unwrap().priority = 7;
    let updated = accepted(client.update_cluster_propagation_policy(
        v1::UpdateClusterPropagationPolicyRequest {
            cluster_propagation_policy: Some(changed),
        },
    ))
    .await;
    assert_eq!(updated.spec.as_ref().unwrap().priority, 7);
    let listed =
        accepted(client.list_cluster_propagation_policies(
            v1::ListClusterPropagationPoliciesRequest::default(),
        ))
        .await;
    assert_eq!(listed.items, vec![updated.clone()]);
    let got = accepted(client.get_cluster_propagation_policy(
        v1::GetClusterPropagationPolicyRequest {
            name: "all-deployments".into(),
        },
    ))
    .await;
    assert_eq!(got, updated);
    accepted(
        client.delete_cluster_propagation_policy(v1::DeleteClusterPropagationPolicyRequest {
            name: "all-deployments".into(),
            preconditions: None,
        }),
    )
    .await;

    // ClusterTaintPolicy
    let ctp = flotilla_runtime::testing::bindings::taint_policy_on_not_ready(
        "maintenance",
        "example.com/not-ready",
        v1::TaintEffect::NoSchedule,
    );
    let created = accepted(client.create_cluster_taint_policy(
        v1::CreateClusterTaintPolicyRequest {
            cluster_taint_policy: Some(ctp),
        },
    ))
    .await;
    let mut changed = created.clone();
    changed.spec.as_mut().unwrap().taints[0].value = "v".into();
    let updated = accepted(client.update_cluster_taint_policy(
        v1::UpdateClusterTaintPolicyRequest {
            cluster_taint_policy: Some(changed),
        },
    ))
    .await;
    assert_eq!(updated.spec.as_ref().unwrap().taints[0].value, "v");
    let got = accepted(
        client.get_cluster_taint_policy(v1::GetClusterTaintPolicyRequest {
            name: "maintenance".into(),
        }),
    )
    .await;
    assert_eq!(got, updated);
    let listed = accepted(
        client.list_cluster_taint_policies(v1::ListClusterTaintPoliciesRequest::default()),
    )
    .await;
    assert_eq!(listed.items.len(), 1);
    accepted(
        client.delete_cluster_taint_policy(v1::DeleteClusterTaintPolicyRequest {
            name: "maintenance".into(),
            preconditions: None,
        }),
    )
    .await;

    // Workload: identity, labels, replicas and requests read from the manifest
    let w = accepted(client.create_workload(create_workload(nginx_workload()))).await;
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
    let updated = scale(&mut client, &w, 5).await;
    assert_eq!(updated.replicas, 5);
    assert_eq!(updated.generation(), 2);
    let got = accepted(client.get_workload(flotilla_api::testing::get_nginx())).await;
    assert_eq!(got, updated);
    for (kind, count) in [("Deployment", 1), ("StatefulSet", 0), ("", 1)] {
        let listed = accepted(client.list_workloads(v1::ListWorkloadsRequest {
            kind: kind.into(),
            ..Default::default()
        }))
        .await;
        assert_eq!(listed.items.len(), count, "kind {kind:?}");
    }
    accepted(client.delete_workload(flotilla_api::testing::delete_nginx())).await;

    // Works and events are written by controllers; the api reads them.
    typed
        .create(work("member1", "nginx-1"), None)
        .await
        .unwrap();
    typed
        .create(work("member2", "nginx-2"), None)
        .await
        .unwrap();
    let works = accepted(client.list_works(v1::ListWorksRequest {
        cluster: "member1".into(),
        ..Default::default()
    }))
    .await;
    assert_eq!(works.items.len(), 1);
    assert_eq!(works.items[0].name(), "nginx-1");
    let all = accepted(client.list_works(v1::ListWorksRequest {
        namespace: "default".into(),
        ..Default::default()
    }))
    .await;
    assert_eq!(all.items.len(), 2);
    let got = accepted(client.get_work(v1::GetWorkRequest {
        cluster: "member2".into(),
        namespace: "default".into(),
        name: "nginx-2".into(),
    }))
    .await;
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
        let events = accepted(client.list_events(v1::ListEventsRequest {
            involved_object_kind: kind.into(),
            ..Default::default()
        }))
        .await;
        assert_eq!(events.items.len(), count, "{kind}");
    }
    let got = accepted(client.get_event(v1::GetEventRequest {
        namespace: "default".into(),
        name: "member1.1".into(),
    }))
    .await;
    assert_eq!(got.reason, "TaintClusterSucceed");
    api.stop().await;
}

// ---------------------------------------------------------------------------------------
// Bad input
// ---------------------------------------------------------------------------------------

#[tokio::test]
async fn invalid_objects_are_rejected_naming_the_field_and_nothing_is_written() {
    let (store, api, mut client) = setup().await;
    const URL: &str = "https://127.0.0.1:6443";
    let ok = cluster("member1", URL);
    accepted(client.create_cluster(create_cluster(ok.clone()))).await;

    // Clusters
    let member2 = |f: &dyn Fn(&mut v1::Cluster)| {
        let mut c = cluster("member2", URL);
        f(&mut c);
        c
    };
    let soft_taint = member2(&|c| {
        c.spec.as_mut().unwrap().taints = vec![v1::Taint {
            key: "example.com/soft".into(),
            effect: v1::TaintEffect::PreferNoSchedule as i32,
            ..Default::default()
        }];
    });
    let clusters = [
        ("metadata.name", Some(cluster(&"a".repeat(49), URL))),
        ("spec.taints[0].effect", Some(soft_taint.clone())),
        (
            "spec.apiEndpoint",
            Some(cluster("member2", "https://admin:secret@127.0.0.1:6443")),
        ),
        (
            "spec.syncMode",
            Some(member2(&|c| c.spec.as_mut().unwrap().sync_mode = 0)),
        ),
        (
            "metadata.resourceVersion",
            Some(member2(&|c| {
                c.metadata.as_mut().unwrap().resource_version = 5
            })),
        ),
        ("cluster", None),
    ];
    for (field, c) in clusters {
        let create = v1::CreateClusterRequest { cluster: c };
        expect_invalid(&store, field, client.create_cluster(create)).await;
    }
    // the same taint on an update of an existing cluster
    let mut existing = ok.clone();
    existing.spec = soft_taint.spec;
    let update = v1::UpdateClusterRequest {
        cluster: Some(existing),
    };
    expect_invalid(
        &store,
        "spec.taints[0].effect",
        client.update_cluster(update),
    )
    .await;

    // Policies
    let with_placement = |f: &dyn Fn(&mut v1::Placement)| {
        let mut p = seed_policy();
        f(p.spec.as_mut().unwrap().placement.as_mut().unwrap());
        p
    };
    let with_spec = |f: &dyn Fn(&mut v1::PropagationSpec)| {
        let mut p = seed_policy();
        f(p.spec.as_mut().unwrap());
        p
    };
    let toleration = |operator: i32, value: &str| {
        with_placement(&|pl| {
            pl.cluster_tolerations = vec![v1::Toleration {
                key: "example.com/x".into(),
                operator,
                value: value.into(),
                ..Default::default()
            }];
        })
    };
    let policies = [
        (
            "spec.placement.clusterTolerations[0].operator",
            toleration(v1::TolerationOperator::Exists as i32, "v"),
        ),
        (
            "spec.placement.clusterTolerations[0].operator",
            toleration(9, ""),
        ),
        (
            "spec.placement.spreadConstraints[0].maxGroups",
            with_placement(&|pl| {
                pl.spread_constraints = vec![v1::SpreadConstraint {
                    spread_by_field: v1::SpreadField::Cluster as i32,
                    min_groups: 3,
                    max_groups: 2,
                    ..Default::default()
                }];
            }),
        ),
        (
            "spec.placement.replicaScheduling.weightPreference.staticWeightList[0].weight",
            with_placement(&|pl| static_weights(pl)[0].weight = 0),
        ),
        (
            "spec.failover.application.gracePeriodSeconds",
            with_spec(&|spec| {
                spec.propagate_deps = true;
                spec.failover = Some(application_directly(Some(60)));
            }),
        ),
        (
            "spec.resourceSelectors",
            with_spec(&|spec| spec.resource_selectors.clear()),
        ),
    ];
    for (field, p) in policies {
        expect_invalid(
            &store,
            field,
            client.create_propagation_policy(create_pp(p)),
        )
        .await;
    }
    // schedulerName is immutable (an existing policy)
    let created = accepted(client.create_propagation_policy(create_pp(seed_policy()))).await;
    let mut p = created.clone();
    p.spec.as_mut().unwrap().scheduler_name = "other-scheduler".into();
    let req = v1::UpdatePropagationPolicyRequest {
        propagation_policy: Some(p),
    };
    expect_invalid(
        &store,
        "spec.schedulerName",
        client.update_propagation_policy(req),
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
    let create = v1::CreateClusterPropagationPolicyRequest {
        cluster_propagation_policy: Some(cpp),
    };
    expect_invalid(
        &store,
        "metadata.namespace",
        client.create_cluster_propagation_policy(create),
    )
    .await;

    // ClusterTaintPolicies: NoExecute needs the admin switch (CH-16.1); taints required;
    // no two policies manage the same taint.
    let ctp = |name: &str, effect: v1::TaintEffect| v1::CreateClusterTaintPolicyRequest {
        cluster_taint_policy: Some(v1::ClusterTaintPolicy {
            metadata: named(name),
            spec: Some(v1::ClusterTaintPolicySpec {
                taints: vec![v1::TaintSpec {
                    key: "example.com/down".into(),
                    value: String::new(),
                    effect: effect as i32,
                }],
                ..Default::default()
            }),
        }),
    };
    let mut empty = ctp("a", v1::TaintEffect::NoSchedule);
    let spec = empty.cluster_taint_policy.as_mut().unwrap().spec.as_mut();
    spec.unwrap().taints.clear();
    let taint_policies = [
        (
            "spec.taints[0].effect",
            ctp("a", v1::TaintEffect::NoExecute),
        ),
        ("spec.taints", empty),
    ];
    for (field, create) in taint_policies {
        expect_invalid(&store, field, client.create_cluster_taint_policy(create)).await;
    }
    accepted(client.create_cluster_taint_policy(ctp("a", v1::TaintEffect::NoSchedule))).await;
    let second = ctp("b", v1::TaintEffect::NoSchedule);
    expect_invalid(
        &store,
        "spec.taints[0]",
        client.create_cluster_taint_policy(second),
    )
    .await;

    // Workloads
    let manifest = |f: &dyn Fn(&str) -> String| {
        let mut w = nginx_workload();
        w.manifest = f(&w.manifest);
        w
    };
    let mut stateful = nginx_workload();
    stateful.kind = "StatefulSet".into();
    let huge_image = format!("\"image\": \"{}\"", "x".repeat(1 << 20));
    let workloads = [
        (
            "manifest",
            manifest(&|_| "{\"apiVersion\": \"apps/v1\", \"kind\": ".into()),
        ),
        ("kind", stateful),
        (
            "spec.replicas",
            manifest(&|m| m.replace("\"replicas\": 3", "\"replicas\": -1")),
        ),
        (
            "manifest.spec.template.spec.containers[0].resources.requests.cpu",
            manifest(&|m| m.replace("\"100m\"", "\"lots\"")),
        ),
        (
            "manifest",
            manifest(&|m| m.replace("\"image\": \"nginx\"", &huge_image)),
        ),
    ];
    for (field, w) in workloads {
        expect_invalid(&store, field, client.create_workload(create_workload(w))).await;
    }

    // Requests
    let lists = [
        (
            "pageSize",
            v1::ListClustersRequest {
                page_size: 501,
                ..Default::default()
            },
        ),
        (
            "labelSelector",
            v1::ListClustersRequest {
                label_selector: "tier in (web".into(),
                ..Default::default()
            },
        ),
        (
            "pageToken",
            v1::ListClustersRequest {
                page_token: "garbage".into(),
                ..Default::default()
            },
        ),
    ];
    for (field, list) in lists {
        expect_invalid(&store, field, client.list_clusters(list)).await;
    }
    let watch = v1::WatchClustersRequest {
        resource_version: -1,
        ..Default::default()
    };
    expect_invalid(&store, "resourceVersion", client.watch_clusters(watch)).await;
    let watch_works = v1::WatchWorksRequest {
        cluster: "Not_A_Cluster".into(),
        ..Default::default()
    };
    expect_invalid(&store, "cluster", client.watch_works(watch_works)).await;
    let get = v1::GetClusterRequest { name: "a/b".into() };
    expect_invalid(&store, "name", client.get_cluster(get)).await;
    api.stop().await;
}

#[tokio::test]
async fn optimistic_concurrency_and_existence() {
    let (_store, api, mut client) = setup().await;
    let c =
        accepted(client.create_cluster(create_cluster(cluster("member1", "http://127.0.0.1:1"))))
            .await;
    let err = client
        .create_cluster(create_cluster(cluster("member1", "http://127.0.0.1:2")))
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::AlreadyExists, "{err:?}");

    let first = labelled(&c, "a", "1");
    let updated = accepted(client.update_cluster(v1::UpdateClusterRequest {
        cluster: Some(first),
    }))
    .await;
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
    let forced = accepted(client.update_cluster(v1::UpdateClusterRequest {
        cluster: Some(stale),
    }))
    .await;
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
        .delete_workload(testing::delete_workload("default", "Deployment", "ghost"))
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::NotFound);
    api.stop().await;
}

/// [`setup`] with cluster member1 created, the store seen through [`Typed`].
async fn setup_with_member1() -> (Typed, TestApi, Client) {
    let (store, api, mut client) = setup().await;
    accepted(client.create_cluster(create_cluster(cluster("member1", "http://127.0.0.1:1")))).await;
    (Typed::new(store), api, client)
}

#[tokio::test]
async fn cluster_updates_keep_controller_taints_and_status() {
    let (typed, api, mut client) = setup_with_member1().await;
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
    let updated = accepted(client.update_cluster(v1::UpdateClusterRequest {
        cluster: Some(user),
    }))
    .await;
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
    let first = accepted(client.update_cluster(v1::UpdateClusterRequest {
        cluster: Some(with_evict),
    }))
    .await;
    let stamped = first.spec.as_ref().unwrap().taints[0].time_added;
    assert!(stamped.is_some(), "timeAdded stamped");
    let mut again = first.clone();
    again.spec.as_mut().unwrap().taints = vec![evict];
    let second = accepted(client.update_cluster(v1::UpdateClusterRequest {
        cluster: Some(again),
    }))
    .await;
    assert_eq!(second.spec.as_ref().unwrap().taints[0].time_added, stamped);
    // status given on create is cluster-health's, not the user's
    let mut with_status = cluster("member2", "http://127.0.0.1:1");
    with_status.status = health.status.clone();
    let created = accepted(client.create_cluster(create_cluster(with_status))).await;
    assert!(created.status.is_none());
    api.stop().await;
}

#[tokio::test]
async fn cluster_delete_only_marks_while_works_reference_it() {
    let (typed, api, mut client) = setup_with_member1().await;
    let w = typed
        .create(work("member1", "nginx-1"), None)
        .await
        .unwrap();
    let delete = v1::DeleteClusterRequest {
        name: "member1".into(),
        preconditions: None,
    };
    for _ in 0..2 {
        let resp = accepted(client.delete_cluster(delete.clone())).await;
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
    let resp = accepted(client.delete_cluster(delete)).await;
    assert!(resp.deleted);
    api.stop().await;
}

#[tokio::test]
async fn ge_9_1_release_sets_only_suppress_deletion_of_a_held_task() {
    let (store, api, mut client) = setup().await;
    let typed = Typed::new(store);
    let task = |cluster: &str, suppress: Option<bool>| v1::GracefulEvictionTask {
        from_cluster: cluster.into(),
        purge_mode: if suppress.is_some() {
            v1::PurgeMode::Never
        } else {
            v1::PurgeMode::Gracefully
        } as i32,
        suppress_deletion: suppress,
        reason: "ApplicationFailure".into(),
        producer: "resource-binding-application-failover-controller".into(),
        ..Default::default()
    };
    let stored = stored_binding(
        &typed,
        "nginx-deployment",
        "member3",
        vec![task("member1", Some(true)), task("member2", None)],
    )
    .await;
    let release = |cluster: &str, resource_version: i64| v1::ReleaseEvictionTaskRequest {
        namespace: "default".into(),
        name: "nginx-deployment".into(),
        cluster: cluster.into(),
        resource_version,
    };
    // a stale resourceVersion: nothing written
    let stale = stored.metadata.as_ref().unwrap().resource_version - 1;
    let err = client
        .release_eviction_task(release("member1", stale))
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::Aborted, "{err:?}");
    // released: that one field changes, and the spec's generation with it
    let released = accepted(client.release_eviction_task(release("member1", 0))).await;
    let mut want = stored.clone();
    want.spec.as_mut().unwrap().graceful_eviction_tasks[0].suppress_deletion = Some(false);
    assert_eq!(released.spec, want.spec);
    assert_eq!(released.metadata.as_ref().unwrap().generation, 2);
    // again: answered unchanged, nothing written
    let again = accepted(client.release_eviction_task(release("member1", 0))).await;
    assert_eq!(
        again.metadata.as_ref().unwrap().resource_version,
        released.metadata.as_ref().unwrap().resource_version
    );
    // a task nothing holds, no task, no binding
    for (cluster, name, code, says) in [
        (
            "member2",
            "nginx-deployment",
            Code::InvalidArgument,
            "not held by suppressDeletion",
        ),
        (
            "member9",
            "nginx-deployment",
            Code::InvalidArgument,
            "no graceful eviction task",
        ),
        ("", "nginx-deployment", Code::InvalidArgument, "cluster"),
        ("member1", "absent", Code::NotFound, "absent"),
    ] {
        let err = client
            .release_eviction_task(v1::ReleaseEvictionTaskRequest {
                name: name.into(),
                ..release(cluster, 0)
            })
            .await
            .unwrap_err();
        assert_eq!(err.code(), code, "{cluster}/{name}: {err:?}");
        assert!(
            err.message().contains(says),
            "{cluster}/{name}: {}",
            err.message()
        );
    }
    let after: v1::ResourceBinding = typed
        .get("bindings/default/nginx-deployment")
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        after.spec, released.spec,
        "a refused release wrote something"
    );
    // the release is an event on the binding
    let event = event_with_reason(&client, "EvictionTaskReleased").await;
    assert!(event.message.contains("member1"), "{}", event.message);
    assert_eq!(event.involved_object.unwrap().name, "nginx-deployment");
    api.stop().await;
}

#[tokio::test]
async fn sc_3_4_reschedule_sets_only_the_trigger_time_and_records_it() {
    let (store, api, mut client) = setup().await;
    let typed = Typed::new(store);
    let stored = stored_binding(&typed, "web", "member1", Vec::new()).await;
    let request = |name: &str, resource_version: i64| v1::RescheduleBindingRequest {
        namespace: "default".into(),
        name: name.into(),
        resource_version,
    };
    let stale = stored.metadata.as_ref().unwrap().resource_version - 1;
    let err = client
        .reschedule_binding(request("web", stale))
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::Aborted, "{err:?}");
    let err = client
        .reschedule_binding(request("absent", 0))
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::NotFound, "{err:?}");
    let err = client.reschedule_binding(request("", 0)).await.unwrap_err();
    assert_eq!(err.code(), Code::InvalidArgument, "{err:?}");

    let before = flotilla_runtime::now().as_millis();
    let rescheduled = accepted(client.reschedule_binding(request("web", 0))).await;
    let at = rescheduled
        .spec
        .as_ref()
        .unwrap()
        .reschedule_triggered_at
        .expect("rescheduleTriggeredAt set");
    let at_ms = at.seconds * 1000 + i64::from(at.nanos / 1_000_000);
    assert!(
        i128::from(at_ms) >= i128::from(before) - 1,
        "{at_ms} before the request at {before}"
    );
    // only that field changed
    let mut want = stored.spec.clone().unwrap();
    want.reschedule_triggered_at = Some(at);
    assert_eq!(rescheduled.spec, Some(want));
    let event = event_with_reason(&client, "RescheduleRequested").await;
    assert_eq!(event.involved_object.unwrap().name, "web");
    api.stop().await;
}

/// A ResourceBinding `default/<name>` with 3 replicas on `cluster` and `tasks`, written
/// straight to the store (the controllers' part).
async fn stored_binding(
    typed: &Typed,
    name: &str,
    cluster: &str,
    tasks: Vec<v1::GracefulEvictionTask>,
) -> v1::ResourceBinding {
    let mut binding = flotilla_store::testing::binding(name, 0);
    let spec = binding.spec.get_or_insert_with(Default::default);
    spec.clusters = vec![v1::TargetCluster {
        name: cluster.into(),
        replicas: 3,
    }];
    spec.graceful_eviction_tasks = tasks;
    typed.create(binding, None).await.unwrap()
}

/// The first event with `reason`, once the api lists one.
async fn event_with_reason(client: &ApiClient<Channel>, reason: &str) -> v1::Event {
    eventually(&format!("the {reason} event"), || {
        let mut client = client.clone();
        async move {
            let events = client
                .list_events(v1::ListEventsRequest::default())
                .await
                .ok()?
                .into_inner()
                .items;
            events.into_iter().find(|e| e.reason == reason)
        }
    })
    .await
}
