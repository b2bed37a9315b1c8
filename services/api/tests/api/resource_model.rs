//! Karmada's resource model: groups and kinds (RM-1), cluster-scoped templates (CR-1,
//! CR-2), dependencies (DEP-1..3) and override policies (OV-1).

use super::*;

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
    accepted(client.create_cluster_propagation_policy(cpp_for(
        "deployments",
        &[("apps/v1", "Deployment"), ("example.com/v1", "Deployment")],
    )))
    .await;
    let apps = r#"{"apiVersion":"apps/v1","kind":"Deployment","metadata":{"name":"clash","namespace":"default"},"spec":{"replicas":2}}"#;
    let custom = r#"{"apiVersion":"example.com/v1","kind":"Deployment","metadata":{"name":"clash","namespace":"default"},"spec":{"size":9}}"#;
    accepted(client.create_workload(manifest_workload(apps))).await;
    let first = stored_binding_at(&typed, "bindings/default/clash-deployment", |_| true).await;
    // the other group's template is created beside it, not in its place
    client
        .create_workload(manifest_workload(custom))
        .await
        .expect("another group's Deployment of the same name is another template");
    let keys = keys_under(&store, "workloads/").await;
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
    let listed = accepted(client.list_workloads(v1::ListWorkloadsRequest {
        namespace: "default".into(),
        kind: "Deployment".into(),
        ..Default::default()
    }))
    .await
    .items;
    assert_eq!(listed.len(), 2);

    // deleting one group's template removes its binding only
    accepted(client.delete_workload(testing::delete_workload(
        "default",
        "Deployment.example.com",
        "clash",
    )))
    .await;
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
    accepted(client.create_propagation_policy(create_pp(pp("namespaced", namespaced)))).await;
    accepted(client.create_cluster_propagation_policy(cpp_for(
        "platform",
        &[
            ("v1", "Namespace"),
            ("rbac.authorization.k8s.io/v1", "ClusterRole"),
        ],
    )))
    .await;
    // a namespace given to a cluster-scoped object is dropped, from the manifest too (CR-4)
    let ns = accepted(client.create_workload(manifest_workload(
            r#"{"apiVersion":"v1","kind":"Namespace","metadata":{"name":"team-a","namespace":"default"}}"#,
        ))).await;
    assert_eq!(ns.metadata.as_ref().unwrap().namespace, "");
    assert!(
        !ns.manifest.contains("namespace\":\"default"),
        "{}",
        ns.manifest
    );
    accepted(client.create_workload(manifest_workload(
            r#"{"apiVersion":"rbac.authorization.k8s.io/v1","kind":"ClusterRole","metadata":{"name":"viewer"},"rules":[]}"#,
        ))).await;
    let keys = keys_under(&store, "workloads/").await;
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
    let crb = accepted(client.get_resource_binding(v1::GetResourceBindingRequest {
        namespace: String::new(),
        name: "team-a-namespace".into(),
    }))
    .await;
    assert_eq!(crb.metadata.unwrap().name, "team-a-namespace");
    let in_default = accepted(
        client.list_resource_bindings(v1::ListResourceBindingsRequest {
            namespace: "default".into(),
            ..Default::default()
        }),
    )
    .await
    .items;
    assert!(in_default.is_empty(), "{in_default:?}");
    // a cluster-scoped kind is found whatever namespace the request names (kubectl's -n)
    let got = accepted(client.get_workload(v1::GetWorkloadRequest {
        namespace: "default".into(),
        kind: "Namespace".into(),
        name: "team-a".into(),
    }))
    .await;
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

/// CR-5: an object of Karmada's own API is refused as a template, naming the kind and what
/// to do instead, through CreateWorkload as through Apply; nothing is stored.
#[tokio::test]
async fn cr_5_karmadas_own_api_objects_are_refused_as_templates() {
    let (store, _api, mut client) = setup().await;
    for manifest in [
        r#"{"apiVersion":"autoscaling.karmada.io/v1alpha1","kind":"FederatedHPA","metadata":{"name":"web","namespace":"default"},"spec":{"minReplicas":1,"maxReplicas":3}}"#,
        r#"{"apiVersion":"config.karmada.io/v1alpha1","kind":"ResourceInterpreterCustomization","metadata":{"name":"flink"},"spec":{}}"#,
        r#"{"apiVersion":"networking.karmada.io/v1alpha1","kind":"MultiClusterService","metadata":{"name":"web","namespace":"default"},"spec":{}}"#,
    ] {
        let err = client
            .create_workload(manifest_workload(manifest))
            .await
            .unwrap_err();
        assert_eq!(err.code(), tonic::Code::InvalidArgument, "{err:?}");
        assert_eq!(bad_fields(&err), ["kind".to_owned()], "{err:?}");
        assert!(
            err.message().contains("Karmada's own API"),
            "{}",
            err.message()
        );
    }
    let (stored, _) = store.list("workloads/", 0).await.unwrap();
    assert!(stored.is_empty(), "nothing stored: {stored:?}");
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
    accepted(client.create_propagation_policy(create_pp(pp("web", spec)))).await;
    for manifest in [
        r#"{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"web-config","namespace":"default"},"data":{"a":"b"}}"#,
        r#"{"apiVersion":"v1","kind":"Secret","metadata":{"name":"web-secret","namespace":"default"},"data":{"token":"eA=="}}"#,
    ] {
        accepted(client.create_workload(manifest_workload(manifest))).await;
    }
    let parent = accepted(client.create_workload(manifest_workload(&web_deployment(true)))).await;
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
    accepted(client.update_workload(v1::UpdateWorkloadRequest {
        workload: Some(changed),
    }))
    .await;
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
    accepted(client.create_propagation_policy(create_pp(pp("config", own)))).await;
    let claimed = stored_binding_at(&typed, "bindings/default/web-config-configmap", |b| {
        policy_label(b) == "config"
    })
    .await;
    assert_eq!(required_by_of(&claimed), on(&[("member2", 2)]));

    // the parent template is deleted: its binding goes, and with it the requirement; the
    // claimed dependency keeps its binding (its own policy), with an empty requiredBy
    accepted(client.delete_workload(testing::delete_workload("default", "Deployment", "web")))
        .await;
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
    let created = accepted(
        client.create_override_policy(v1::CreateOverridePolicyRequest {
            override_policy: Some(op.clone()),
        }),
    )
    .await;
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
    let got = accepted(client.get_override_policy(v1::GetOverridePolicyRequest {
        namespace: "default".into(),
        name: "regional".into(),
    }))
    .await;
    assert_eq!(got, created);
    let mut changed = created.clone();
    changed.spec.as_mut().unwrap().override_rules[0] =
        replace_rule("member2", "/spec/replicas", "7");
    let updated = accepted(
        client.update_override_policy(v1::UpdateOverridePolicyRequest {
            override_policy: Some(changed),
        }),
    )
    .await;
    assert_eq!(updated.metadata.as_ref().unwrap().generation, 2);

    // OV-1 admission: each mistake named at its field, nothing written
    for (rule, field) in [
        (
            replace_rule("member1", "/spec/replicas", ""),
            "spec.overrideRules[0].overriders.plaintext[0].value",
        ),
        (
            replace_rule("member1", "spec", "1"),
            "spec.overrideRules[0].overriders.plaintext[0].path",
        ),
        (
            replace_rule("member1", "/a", "{not json"),
            "spec.overrideRules[0].overriders.plaintext[0].valueJson",
        ),
    ] {
        let bad = override_policy("default", "bad", vec![rule]);
        expect_invalid(
            &store,
            field,
            client.create_override_policy(v1::CreateOverridePolicyRequest {
                override_policy: Some(bad),
            }),
        )
        .await;
    }
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
    accepted(
        client.create_cluster_override_policy(v1::CreateClusterOverridePolicyRequest {
            cluster_override_policy: Some(cop),
        }),
    )
    .await;
    let list = accepted(
        client.list_cluster_override_policies(v1::ListClusterOverridePoliciesRequest::default()),
    )
    .await;
    assert_eq!(list.items.len(), 1);
    let deleted = accepted(
        client.delete_override_policy(v1::DeleteOverridePolicyRequest {
            namespace: "default".into(),
            name: "regional".into(),
            preconditions: None,
        }),
    )
    .await;
    assert!(deleted.deleted);
    assert!(
        store
            .get("overridepolicies/default/regional")
            .await
            .unwrap()
            .is_none()
    );
}
