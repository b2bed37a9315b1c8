//! The rules SSA-1 to SSA-6, on objects and answers recorded from kube-apiserver 1.20.2
//! (the suite's real control plane): `kubectl apply --server-side` of a Deployment,
//! `kubectl create configmap`, a second manager's conflicting apply, and its forced one.

use serde_json::{Value, json};

use super::*;

const T: &str = "2026-12-02T12:54:34Z";

fn writer(manager: &str) -> Writer<'_> {
    Writer {
        manager,
        api_version: "apps/v1",
        time: T,
        schema: Schema::Builtin,
    }
}

fn deployment(replicas: i64, image: &str) -> Value {
    json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": "nginx", "labels": {"app": "nginx"}},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"app": "nginx"}},
            "template": {
                "metadata": {"labels": {"app": "nginx"}},
                "spec": {"containers": [{
                    "name": "nginx", "image": image,
                    "ports": [{"containerPort": 80}],
                    "resources": {"limits": {"cpu": "100m"}},
                }]},
            },
        },
    })
}

/// What kube-apiserver 1.20.2 recorded for `kubectl apply --server-side` of `deployment(2, …)`.
fn applied_by_kubectl() -> Value {
    json!({"f:metadata": {"f:labels": {"f:app": {}}}, "f:spec": {"f:replicas": {}, "f:selector": {},
        "f:template": {"f:metadata": {"f:labels": {"f:app": {}}}, "f:spec": {"f:containers": {
            "k:{\"name\":\"nginx\"}": {".": {}, "f:image": {}, "f:name": {},
                "f:ports": {"k:{\"containerPort\":80,\"protocol\":\"TCP\"}": {".": {}, "f:containerPort": {}}},
                "f:resources": {"f:limits": {"f:cpu": {}}}}}}}}})
}

fn fields(entries: &[Entry], manager: &str) -> Value {
    entries
        .iter()
        .find(|e| e.manager == manager)
        .map_or(Value::Null, |e| e.fields.to_fields_v1())
}

#[test]
fn ssa_1_an_applied_field_set_is_kube_apiservers() {
    let w = apply(
        None,
        &[],
        &deployment(2, "nginx:1.19"),
        writer("kubectl"),
        false,
    )
    .unwrap();
    assert_eq!(w.managed.len(), 1);
    assert_eq!(w.managed[0].operation, Operation::Apply);
    assert_eq!(fields(&w.managed, "kubectl"), applied_by_kubectl());
    assert_eq!(w.object, deployment(2, "nginx:1.19"), "created as applied");
}

#[test]
fn ssa_1_fields_v1_reads_back_what_it_writes() {
    for doc in [
        applied_by_kubectl(),
        json!({"f:data": {".": {}, "f:a": {}}}),
        json!({"f:metadata": {"f:finalizers": {"v:\"x\"": {}}}}),
        json!({}),
    ] {
        assert_eq!(FieldSet::from_fields_v1(&doc).unwrap().to_fields_v1(), doc);
    }
    for bad in [json!([]), json!({"spec": {}}), json!({"f:a": 1})] {
        assert!(FieldSet::from_fields_v1(&bad).is_err(), "{bad}");
    }
}

#[test]
fn ssa_1_identity_status_and_atomic_values() {
    let object = json!({
        "apiVersion": "v1", "kind": "Service",
        "metadata": {"name": "s", "namespace": "d", "resourceVersion": "3", "uid": "u",
                     "finalizers": ["a/b"]},
        "spec": {"selector": {"app": "x"}, "ports": [{"port": 80}], "externalIPs": ["1.2.3.4"]},
        "status": {"loadBalancer": {}},
    });
    let w = apply(
        None,
        &[],
        &object,
        Writer {
            api_version: "v1",
            ..writer("m")
        },
        false,
    )
    .unwrap();
    assert_eq!(
        fields(&w.managed, "m"),
        json!({"f:metadata": {"f:finalizers": {"v:\"a/b\"": {}}},
               "f:spec": {"f:externalIPs": {}, "f:ports": {"k:{\"port\":80,\"protocol\":\"TCP\"}": {".": {}, "f:port": {}}},
                          "f:selector": {"f:app": {}}}}),
        "a Service's selector is a map, a Deployment's an atomic struct; a list without a key is one leaf"
    );
    // in a custom resource every list outside metadata is atomic
    let policy = json!({"apiVersion": "policy.karmada.io/v1alpha1", "kind": "PropagationPolicy",
        "metadata": {"name": "p"},
        "spec": {"resourceSelectors": [{"kind": "Deployment", "name": "nginx"}]}});
    let w = apply(
        None,
        &[],
        &policy,
        Writer {
            schema: Schema::Custom,
            ..writer("m")
        },
        false,
    )
    .unwrap();
    assert_eq!(
        fields(&w.managed, "m"),
        json!({"f:spec": {"f:resourceSelectors": {}}})
    );
}

#[test]
fn ssa_6_a_create_owns_what_it_set_with_its_new_maps() {
    let cm = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c1"}, "data": {"a": "b"}});
    let managed = update(
        None,
        &[],
        &cm,
        Writer {
            api_version: "v1",
            ..writer("kubectl-create")
        },
    );
    assert_eq!(managed.len(), 1);
    assert_eq!(managed[0].operation, Operation::Update);
    // kube-apiserver 1.20.2, `kubectl create cm c1 --from-literal=a=b`
    assert_eq!(
        fields(&managed, "kubectl-create"),
        json!({"f:data": {".": {}, "f:a": {}}})
    );
}

#[test]
fn ssa_3_a_changed_field_of_another_manager_is_a_conflict_unless_forced() {
    let first = apply(
        None,
        &[],
        &deployment(2, "nginx:1.19"),
        writer("kubectl"),
        false,
    )
    .unwrap();
    let config = deployment(3, "nginx:1.20");
    let conflicts = apply(
        Some(&first.object),
        &first.managed,
        &config,
        writer("other"),
        false,
    )
    .unwrap_err();
    assert_eq!(
        conflict_message(&conflicts, "apps/v1"),
        "Apply failed with 2 conflicts: conflicts with \"kubectl\":\n- .spec.replicas\n\
         - .spec.template.spec.containers[name=\"nginx\"].image",
        "kube-apiserver's words"
    );
    let forced = apply(
        Some(&first.object),
        &first.managed,
        &config,
        writer("other"),
        true,
    )
    .unwrap();
    // kube-apiserver 1.20.2 after `?fieldManager=other&force=true`
    let mut kept = applied_by_kubectl();
    kept["f:spec"].as_object_mut().unwrap().remove("f:replicas");
    kept["f:spec"]["f:template"]["f:spec"]["f:containers"]["k:{\"name\":\"nginx\"}"]
        .as_object_mut()
        .unwrap()
        .remove("f:image");
    assert_eq!(fields(&forced.managed, "kubectl"), kept);
    assert_eq!(fields(&forced.managed, "other"), applied_by_kubectl());
    assert_eq!(forced.object["spec"]["replicas"], 3);
    // the same values are shared, not a conflict
    let shared = apply(
        Some(&first.object),
        &first.managed,
        &deployment(2, "nginx:1.19"),
        writer("other"),
        false,
    )
    .unwrap();
    assert_eq!(fields(&shared.managed, "kubectl"), applied_by_kubectl());
    assert_eq!(fields(&shared.managed, "other"), applied_by_kubectl());
}

#[test]
fn ssa_3_conflicts_name_each_owner_and_its_version() {
    let c = |m: &str, v: &str, f: &str| Conflict {
        manager: m.into(),
        api_version: v.into(),
        field: f.into(),
    };
    assert_eq!(
        conflict_message(&[c("kubectl", "apps/v1", ".spec.replicas")], "apps/v1"),
        "Apply failed with 1 conflict: conflict with \"kubectl\": .spec.replicas"
    );
    assert_eq!(
        conflict_message(
            &[c("a", "apps/v1", ".x"), c("b", "apps/v1beta1", ".y")],
            "apps/v1"
        ),
        "Apply failed with 2 conflicts: conflict with \"a\": .x\nconflict with \"b\" using apps/v1beta1: .y"
    );
}

#[test]
fn ssa_2_keyed_items_merge_and_others_stay() {
    let first = apply(
        None,
        &[],
        &deployment(2, "nginx:1.19"),
        writer("kubectl"),
        false,
    )
    .unwrap();
    let sidecar = json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "nginx"},
        "spec": {"template": {"spec": {"containers": [{"name": "log", "image": "busybox"}]}}}});
    let w = apply(
        Some(&first.object),
        &first.managed,
        &sidecar,
        writer("mesh"),
        false,
    )
    .unwrap();
    let names: Vec<&str> = w.object["spec"]["template"]["spec"]["containers"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["nginx", "log"]);
    assert_eq!(w.object["spec"]["replicas"], 2);
    assert_eq!(
        fields(&w.managed, "mesh"),
        json!({"f:spec": {"f:template": {"f:spec": {"f:containers": {
            "k:{\"name\":\"log\"}": {".": {}, "f:image": {}, "f:name": {}}}}}}})
    );
}

#[test]
fn ssa_4_what_a_manager_stops_applying_goes_unless_another_owns_it() {
    let with = |labels: Value| json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c", "labels": labels}});
    let w = |m| Writer {
        api_version: "v1",
        ..writer(m)
    };
    let first = apply(
        None,
        &[],
        &with(json!({"a": "1", "b": "2"})),
        w("gitops"),
        false,
    )
    .unwrap();
    let second = apply(
        Some(&first.object),
        &first.managed,
        &with(json!({"a": "1"})),
        w("gitops"),
        false,
    )
    .unwrap();
    assert_eq!(
        second.object["metadata"]["labels"],
        json!({"a": "1"}),
        "b is removed"
    );
    // another manager also applied b: it stays, and is that manager's alone
    let shared = apply(
        Some(&first.object),
        &first.managed,
        &with(json!({"b": "2"})),
        w("other"),
        false,
    )
    .unwrap();
    let third = apply(
        Some(&shared.object),
        &shared.managed,
        &with(json!({"a": "1"})),
        w("gitops"),
        false,
    )
    .unwrap();
    assert_eq!(
        third.object["metadata"]["labels"],
        json!({"a": "1", "b": "2"})
    );
    assert_eq!(
        fields(&third.managed, "other"),
        json!({"f:metadata": {"f:labels": {"f:b": {}}}})
    );
}

#[test]
fn ssa_6_an_update_takes_what_it_changes_from_every_other_manager() {
    let first = apply(
        None,
        &[],
        &deployment(2, "nginx:1.19"),
        writer("kubectl"),
        false,
    )
    .unwrap();
    let mut edited = first.object.clone();
    edited["spec"]["replicas"] = json!(5);
    let managed = update(
        Some(&first.object),
        &first.managed,
        &edited,
        writer("kubectl-edit"),
    );
    assert_eq!(
        fields(&managed, "kubectl-edit"),
        json!({"f:spec": {"f:replicas": {}}})
    );
    assert!(
        fields(&managed, "kubectl")["f:spec"]
            .get("f:replicas")
            .is_none(),
        "kubectl no longer owns replicas"
    );
    // and an apply of the old value now conflicts with the editor
    let conflicts = apply(
        Some(&edited),
        &managed,
        &deployment(2, "nginx:1.19"),
        writer("kubectl"),
        false,
    )
    .unwrap_err();
    assert_eq!(conflicts.len(), 1);
    assert_eq!(conflicts[0].manager, "kubectl-edit");
    assert_eq!(conflicts[0].field, ".spec.replicas");
    // an update that changes nothing records nothing
    assert_eq!(
        update(
            Some(&first.object),
            &first.managed,
            &first.object,
            writer("noop")
        ),
        first.managed
    );
}

#[test]
fn a_manager_is_named_by_its_user_agent_when_it_names_none() {
    assert_eq!(
        manager_from_user_agent("kubectl/v1.20.2 (linux/amd64) kubernetes/abc"),
        "kubectl"
    );
    assert_eq!(
        manager_from_user_agent("OpenAPI-Generator/31.0.0/python"),
        "OpenAPI-Generator"
    );
    assert_eq!(manager_from_user_agent(""), "unknown");
}

/// SSA-5: managers in kube-apiserver's stored order (Apply before Update, then by second,
/// then by name), so that a forced apply in the same second as the entry it takes from
/// lists the two by name, as kube-apiserver did in the differential test.
#[test]
fn ssa_5_managers_in_kube_apiservers_order() {
    let first = apply(None, &[], &deployment(2, "nginx:1"), writer("other"), false)
        .unwrap_or_else(|c| panic!("{c:?}"));
    let same_second = apply(
        Some(&first.object),
        &first.managed,
        &deployment(3, "nginx:1"),
        writer("kustomize-controller"),
        true,
    )
    .unwrap_or_else(|c| panic!("{c:?}"));
    let names = |m: &[Entry]| m.iter().map(|e| e.manager.clone()).collect::<Vec<_>>();
    assert_eq!(
        names(&same_second.managed),
        ["kustomize-controller", "other"],
        "the same second: by name"
    );
    let later = Writer {
        time: "2026-12-02T12:54:35Z",
        ..writer("a-manager")
    };
    let next = apply(
        Some(&same_second.object),
        &same_second.managed,
        &deployment(4, "nginx:1"),
        later,
        true,
    )
    .unwrap_or_else(|c| panic!("{c:?}"));
    assert_eq!(
        names(&next.managed).last().map(String::as_str),
        Some("a-manager"),
        "a later second goes last"
    );
    let updated = update(
        Some(&next.object),
        &next.managed,
        &deployment(5, "nginx:2"),
        writer("aaa-update"),
    );
    assert_eq!(
        updated.last().map(|e| (e.manager.as_str(), e.operation)),
        Some(("aaa-update", Operation::Update)),
        "Update entries after every Apply"
    );
}
