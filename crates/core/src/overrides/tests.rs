use serde_json::json;

use super::*;
use crate::types::{ClusterAffinity, ObjectMeta, ResourceSelector};

fn patch(path: &str, operator: Operator, value: Option<Value>) -> PatchOperation {
    PatchOperation {
        path: path.into(),
        operator,
        value,
    }
}

fn deployment() -> Value {
    json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": "web", "namespace": "default", "labels": {"app": "web"}},
        "spec": {"replicas": 3, "template": {"spec": {
            "initContainers": [{"name": "init", "image": "busybox"}],
            "containers": [
                {"name": "web", "image": "docker.io/library/nginx:1.27", "args": ["-v", "-q"]},
                {"name": "sidecar", "image": "envoy"}
            ]
        }}}
    })
}

#[test]
fn ov_2_plaintext_add_remove_replace() {
    let base = deployment();
    for (what, op, want) in [
        (
            "replace an existing field",
            patch("/spec/replicas", Operator::Replace, Some(json!(5))),
            Ok(json!(5)),
        ),
        (
            "add a new key",
            patch("/spec/paused", Operator::Add, Some(json!(true))),
            Ok(json!(3)),
        ),
        (
            "remove an existing key",
            patch("/spec/replicas", Operator::Remove, None),
            Ok(Value::Null),
        ),
        (
            "replace a missing key is an error",
            patch("/spec/missing", Operator::Replace, Some(json!(1))),
            Err("replace /spec/missing: the path does not exist"),
        ),
        (
            "remove a missing key is an error",
            patch("/spec/missing", Operator::Remove, None),
            Err("remove /spec/missing: the path does not exist"),
        ),
        (
            "add under a missing parent is an error",
            patch("/spec/nothing/here", Operator::Add, Some(json!(1))),
            Err("add /spec/nothing/here: the path does not exist"),
        ),
    ] {
        let mut doc = base.clone();
        let result = apply_overriders(
            &mut doc,
            &Overriders {
                plaintext: vec![op],
                ..Default::default()
            },
        );
        match want {
            Ok(replicas) => {
                assert!(result.is_ok(), "{what}: {result:?}");
                assert_eq!(doc["spec"]["replicas"], replicas, "{what}");
            }
            Err(message) => {
                assert_eq!(result.unwrap_err().to_string(), message, "{what}");
                assert_eq!(doc, base, "{what}: never half-patched");
            }
        }
    }
    // lists: append with `-`, insert at an index, escaped keys
    let mut doc = base.clone();
    apply_patch(
        &mut doc,
        &patch(
            "/spec/template/spec/containers/0/args/-",
            Operator::Add,
            Some(json!("--x")),
        ),
    )
    .unwrap();
    assert_eq!(
        doc["spec"]["template"]["spec"]["containers"][0]["args"],
        json!(["-v", "-q", "--x"])
    );
    apply_patch(
        &mut doc,
        &patch(
            "/metadata/labels/example.com~1team",
            Operator::Add,
            Some(json!("a")),
        ),
    )
    .unwrap();
    assert_eq!(doc["metadata"]["labels"]["example.com/team"], "a");
}

#[test]
fn ov_2_image_reference_parts() {
    for (image, registry, repository, tag, digest) in [
        (
            "docker.io/library/nginx:1.27",
            "docker.io",
            "library/nginx",
            "1.27",
            "",
        ),
        ("nginx", "", "nginx", "", ""),
        ("library/nginx:1", "", "library/nginx", "1", ""),
        ("localhost:5000/app:v2", "localhost:5000", "app", "v2", ""),
        ("localhost/app", "localhost", "app", "", ""),
        ("r.io/app@sha256:abc", "r.io", "app", "", "sha256:abc"),
    ] {
        let parsed = Image::parse(image).unwrap();
        assert_eq!(
            (
                parsed.registry.as_str(),
                parsed.repository.as_str(),
                parsed.tag.as_str(),
                parsed.digest.as_str()
            ),
            (registry, repository, tag, digest),
            "{image}"
        );
        assert_eq!(parsed.render(), image, "{image} round-trips");
    }
    assert!(Image::parse("Nginx").is_err());
    assert!(Image::parse("").is_err());
}

#[test]
fn ov_2_image_overrider_components_and_operators() {
    use ImageComponent::*;
    use Operator::*;
    for (image, component, operator, value, want) in [
        ("nginx", Registry, Add, "r.io", "r.io/nginx"),
        (
            "docker.io/nginx:1",
            Registry,
            Add,
            ".cn",
            "docker.io.cn/nginx:1",
        ),
        (
            "docker.io/nginx:1",
            Registry,
            Replace,
            "eu.r.io",
            "eu.r.io/nginx:1",
        ),
        ("docker.io/nginx:1", Registry, Remove, "", "nginx:1"),
        (
            "docker.io/nginx:1",
            Repository,
            Replace,
            "team/nginx",
            "docker.io/team/nginx:1",
        ),
        (
            "docker.io/nginx:1",
            Tag,
            Replace,
            "1.27",
            "docker.io/nginx:1.27",
        ),
        (
            "docker.io/nginx:1",
            Tag,
            Add,
            "-alpine",
            "docker.io/nginx:1-alpine",
        ),
        ("docker.io/nginx:1", Tag, Remove, "", "docker.io/nginx"),
        (
            "docker.io/nginx:1",
            Tag,
            Replace,
            "sha256:beef",
            "docker.io/nginx@sha256:beef",
        ),
        // not a tag nor a digest: ignored, as in Karmada
        (
            "docker.io/nginx:1",
            Tag,
            Replace,
            "@bad tag",
            "docker.io/nginx:1",
        ),
    ] {
        let mut img = Image::parse(image).unwrap();
        img.apply(component, operator, value);
        assert_eq!(
            img.render(),
            want,
            "{image} {component:?} {operator:?} {value}"
        );
    }
}

#[test]
fn ov_2_image_overrider_default_paths_and_predicate() {
    let registry = |predicate: Option<&str>| Overriders {
        image: vec![ImageOverrider {
            predicate_path: predicate.map(Into::into),
            component: ImageComponent::Registry,
            operator: Operator::Replace,
            value: "eu.r.io".into(),
        }],
        ..Default::default()
    };
    let mut doc = deployment();
    apply_overriders(&mut doc, &registry(None)).unwrap();
    let pod = &doc["spec"]["template"]["spec"];
    assert_eq!(pod["containers"][0]["image"], "eu.r.io/library/nginx:1.27");
    assert_eq!(pod["containers"][1]["image"], "eu.r.io/envoy");
    assert_eq!(
        pod["initContainers"][0]["image"], "busybox",
        "not init containers"
    );

    let mut doc = deployment();
    apply_overriders(
        &mut doc,
        &registry(Some("/spec/template/spec/containers/1/image")),
    )
    .unwrap();
    let pod = &doc["spec"]["template"]["spec"];
    assert_eq!(
        pod["containers"][0]["image"],
        "docker.io/library/nginx:1.27"
    );
    assert_eq!(pod["containers"][1]["image"], "eu.r.io/envoy");

    let mut doc = deployment();
    let before = doc.clone();
    let err = apply_overriders(&mut doc, &registry(Some("/spec/nothing"))).unwrap_err();
    assert!(err.to_string().contains("no image string"), "{err}");
    assert_eq!(doc, before);

    // a kind without default paths (a CronJob, a custom kind) is left alone
    let mut cron = json!({"apiVersion": "batch/v1", "kind": "CronJob",
        "spec": {"jobTemplate": {"spec": {"template": {"spec": {"containers": [{"name": "c", "image": "x"}]}}}}}});
    let before = cron.clone();
    apply_overriders(&mut cron, &registry(None)).unwrap();
    assert_eq!(cron, before);
}

#[test]
fn ov_2_command_and_args_by_container_name() {
    let args = |container: &str, operator: Operator, value: &[&str]| Overriders {
        args: vec![CommandArgsOverrider {
            container_name: container.into(),
            operator,
            value: value.iter().map(|s| (*s).to_owned()).collect(),
        }],
        ..Default::default()
    };
    let mut doc = deployment();
    apply_overriders(&mut doc, &args("web", Operator::Add, &["--region=eu"])).unwrap();
    assert_eq!(
        doc["spec"]["template"]["spec"]["containers"][0]["args"],
        json!(["-v", "-q", "--region=eu"])
    );
    apply_overriders(
        &mut doc,
        &args("web", Operator::Remove, &["-v", "--region=eu"]),
    )
    .unwrap();
    assert_eq!(
        doc["spec"]["template"]["spec"]["containers"][0]["args"],
        json!(["-q"])
    );
    // a container without args gets the list; an unknown container changes nothing
    apply_overriders(&mut doc, &args("sidecar", Operator::Add, &["-x"])).unwrap();
    assert_eq!(
        doc["spec"]["template"]["spec"]["containers"][1]["args"],
        json!(["-x"])
    );
    let before = doc.clone();
    apply_overriders(&mut doc, &args("nobody", Operator::Add, &["-x"])).unwrap();
    assert_eq!(doc, before);
    let mut doc = deployment();
    apply_overriders(
        &mut doc,
        &Overriders {
            command: vec![CommandArgsOverrider {
                container_name: "web".into(),
                operator: Operator::Add,
                value: vec!["/bin/start".into()],
            }],
            ..Default::default()
        },
    )
    .unwrap();
    assert_eq!(
        doc["spec"]["template"]["spec"]["containers"][0]["command"],
        json!(["/bin/start"])
    );
}

#[test]
fn ov_2_labels_and_annotations() {
    let map = |operator: Operator, pairs: &[(&str, &str)]| MapOverrider {
        operator,
        value: pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect(),
    };
    let mut doc = deployment();
    apply_overriders(
        &mut doc,
        &Overriders {
            labels: vec![
                map(Operator::Add, &[("mesh", "on"), ("app", "web2")]),
                map(Operator::Replace, &[("app", "web3"), ("missing", "x")]),
                map(Operator::Remove, &[("mesh", ""), ("absent", "")]),
            ],
            annotations: vec![map(Operator::Add, &[("example.com/owner", "team-a")])],
            ..Default::default()
        },
    )
    .unwrap();
    assert_eq!(doc["metadata"]["labels"], json!({"app": "web3"}));
    assert_eq!(
        doc["metadata"]["annotations"],
        json!({"example.com/owner": "team-a"}),
        "created when missing"
    );
}

#[test]
fn ov_2_field_overrider_json_and_yaml() {
    let config = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"},
        "data": {"app.yaml": "db:\n  host: primary\n  port: 5432\n", "app.json": "{\"level\":\"info\"}"}});
    let mut doc = config.clone();
    apply_overriders(
        &mut doc,
        &Overriders {
            field: vec![
                FieldOverrider {
                    field_path: "/data/app.yaml".into(),
                    yaml: true,
                    operations: vec![patch("/db/host", Operator::Replace, Some(json!("eu-db")))],
                },
                FieldOverrider {
                    field_path: "/data/app.json".into(),
                    yaml: false,
                    operations: vec![patch("/level", Operator::Replace, Some(json!("debug")))],
                },
            ],
            ..Default::default()
        },
    )
    .unwrap();
    let yaml: Value = serde_norway::from_str(doc["data"]["app.yaml"].as_str().unwrap()).unwrap();
    assert_eq!(yaml, json!({"db": {"host": "eu-db", "port": 5432}}));
    assert_eq!(doc["data"]["app.json"], "{\"level\":\"debug\"}");

    for (path, want) in [
        ("/data/missing", "does not exist"),
        ("/metadata", "is not a string"),
    ] {
        let mut doc = config.clone();
        let err = apply_overriders(
            &mut doc,
            &Overriders {
                field: vec![FieldOverrider {
                    field_path: path.into(),
                    yaml: false,
                    operations: vec![],
                }],
                ..Default::default()
            },
        )
        .unwrap_err();
        assert!(err.to_string().contains(want), "{err}");
        assert_eq!(doc, config);
    }
}

#[test]
fn ov_2_order_within_a_rule_plaintext_last() {
    // the image overrider runs before plaintext, so a plaintext replace of the image wins
    let mut doc = deployment();
    apply_overriders(
        &mut doc,
        &Overriders {
            plaintext: vec![patch(
                "/spec/template/spec/containers/0/image",
                Operator::Replace,
                Some(json!("final:1")),
            )],
            image: vec![ImageOverrider {
                predicate_path: None,
                component: ImageComponent::Tag,
                operator: Operator::Replace,
                value: "9".into(),
            }],
            ..Default::default()
        },
    )
    .unwrap();
    let pod = &doc["spec"]["template"]["spec"];
    assert_eq!(pod["containers"][0]["image"], "final:1");
    assert_eq!(pod["containers"][1]["image"], "envoy:9");
    // an error in the last overrider undoes the earlier ones
    let mut doc = deployment();
    let before = doc.clone();
    assert!(
        apply_overriders(
            &mut doc,
            &Overriders {
                image: vec![ImageOverrider {
                    predicate_path: None,
                    component: ImageComponent::Tag,
                    operator: Operator::Replace,
                    value: "9".into(),
                }],
                plaintext: vec![patch("/nope", Operator::Remove, None)],
                ..Default::default()
            },
        )
        .is_err()
    );
    assert_eq!(doc, before, "never half-patched");
}

fn policy(
    ns: &str,
    name: &str,
    selectors: Vec<ResourceSelector>,
    rules: Vec<OverrideRule>,
) -> OverridePolicy {
    OverridePolicy {
        meta: ObjectMeta {
            name: name.into(),
            namespace: ns.into(),
            ..Default::default()
        },
        spec: OverrideSpec {
            resource_selectors: selectors,
            override_rules: rules,
        },
    }
}

fn selector(name: &str, labels: Option<(&str, &str)>) -> ResourceSelector {
    ResourceSelector {
        api_version: "apps/v1".into(),
        kind: "Deployment".into(),
        namespace: String::new(),
        name: name.into(),
        label_selector: labels.map(|(k, v)| crate::types::LabelSelector {
            match_labels: BTreeMap::from([(k.into(), v.into())]),
            match_expressions: Vec::new(),
        }),
    }
}

/// A policy with one rule setting the `order` label to its own name on every cluster.
fn ordering_policy(ns: &str, name: &str, selectors: Vec<ResourceSelector>) -> OverridePolicy {
    policy(ns, name, selectors, vec![label_rule(name, &[])])
}

/// A rule setting the `order` label to `value` on every cluster (or only `clusters`).
fn label_rule(value: &str, clusters: &[&str]) -> OverrideRule {
    OverrideRule {
        target_cluster: (!clusters.is_empty()).then(|| ClusterAffinity {
            cluster_names: clusters.iter().map(|c| (*c).to_owned()).collect(),
            ..Default::default()
        }),
        overriders: Overriders {
            labels: vec![MapOverrider {
                operator: Operator::Add,
                value: BTreeMap::from([("order".into(), value.into())]),
            }],
            ..Default::default()
        },
    }
}

fn template<'a>(doc: &'a Value, labels: &'a BTreeMap<String, String>) -> Template<'a> {
    Template {
        api_version: "apps/v1",
        kind: "Deployment",
        namespace: doc["metadata"]["namespace"].as_str().unwrap_or(""),
        name: doc["metadata"]["name"].as_str().unwrap_or(""),
        labels,
    }
}

fn applied_names(list: &[AppliedOverrider]) -> Vec<&str> {
    list.iter().map(|a| a.policy_name.as_str()).collect()
}

#[test]
fn ov_1_selector_match_priority() {
    let doc = deployment();
    let labels = BTreeMap::from([("app".to_owned(), "web".to_owned())]);
    let t = template(&doc, &labels);
    let mut other_kind = selector("", None);
    other_kind.kind = "StatefulSet".into();
    let mut other_ns = selector("", None);
    other_ns.namespace = "prod".into();
    for (what, sel, want) in [
        ("kind only", selector("", None), Some(Specificity::All)),
        (
            "labels match",
            selector("", Some(("app", "web"))),
            Some(Specificity::Labels),
        ),
        ("labels differ", selector("", Some(("app", "db"))), None),
        ("name", selector("web", None), Some(Specificity::Name)),
        ("other name", selector("api", None), None),
        (
            "name wins over labels",
            selector("web", Some(("app", "db"))),
            Some(Specificity::Name),
        ),
        ("other kind", other_kind, None),
        ("other namespace", other_ns, None),
    ] {
        assert_eq!(selector_match(&sel, &t), want, "{what}");
    }
    assert_eq!(
        policy_match(&OverrideSpec::default(), &t),
        Some(Specificity::All),
        "no selectors: every template"
    );
    let spec = OverrideSpec {
        resource_selectors: vec![selector("", None), selector("web", None)],
        override_rules: Vec::new(),
    };
    assert_eq!(
        policy_match(&spec, &t),
        Some(Specificity::Name),
        "the best selector"
    );
}

#[test]
fn ov_3_cluster_policies_first_then_by_specificity_then_name() {
    let doc = deployment();
    let labels = BTreeMap::from([("app".to_owned(), "web".to_owned())]);
    let policies = [
        ordering_policy("default", "b-name", vec![selector("web", None)]),
        ordering_policy("default", "z-all", vec![]),
        ordering_policy("", "c-name", vec![selector("web", None)]),
        ordering_policy(
            "default",
            "a-labels",
            vec![selector("", Some(("app", "web")))],
        ),
        ordering_policy("", "c-all", vec![selector("", None)]),
        ordering_policy("default", "a-name", vec![selector("web", None)]),
        // not applied: another namespace, another template, another cluster
        policy("prod", "other-ns", vec![], vec![label_rule("x", &[])]),
        policy(
            "default",
            "other-name",
            vec![selector("api", None)],
            vec![label_rule("x", &[])],
        ),
        policy(
            "default",
            "other-cluster",
            vec![],
            vec![label_rule("x", &["member2"])],
        ),
    ];
    let refs: Vec<&OverridePolicy> = policies.iter().collect();
    let mut out = doc.clone();
    let applied = apply_policies(
        &mut out,
        &template(&doc, &labels),
        &Cluster::named("member1"),
        &refs,
    )
    .unwrap();
    assert_eq!(applied_names(&applied.cluster), ["c-all", "c-name"]);
    assert_eq!(
        applied_names(&applied.namespaced),
        ["z-all", "a-labels", "a-name", "b-name"]
    );
    assert_eq!(
        out["metadata"]["labels"]["order"], "b-name",
        "the last applied wins"
    );
}

#[test]
fn ov_1_rules_by_target_cluster_and_namespace_scope() {
    let doc = deployment();
    let labels = BTreeMap::new();
    let p = policy(
        "default",
        "regional",
        vec![],
        vec![
            label_rule("one", &["member1"]),
            label_rule("two", &["member2"]),
            label_rule("all", &[]),
        ],
    );
    for (cluster, want, rules) in [
        ("member1", "all", 2),
        ("member2", "all", 2),
        ("member3", "all", 1),
    ] {
        let mut out = doc.clone();
        let applied = apply_policies(
            &mut out,
            &template(&doc, &labels),
            &Cluster::named(cluster),
            &[&p],
        )
        .unwrap();
        assert_eq!(applied.namespaced.len(), rules, "{cluster}");
        assert_eq!(out["metadata"]["labels"]["order"], want);
    }
    let p = policy(
        "default",
        "one",
        vec![],
        vec![label_rule("one", &["member1"])],
    );
    let mut out = doc.clone();
    apply_policies(
        &mut out,
        &template(&doc, &labels),
        &Cluster::named("member1"),
        &[&p],
    )
    .unwrap();
    assert_eq!(out["metadata"]["labels"]["order"], "one");
    // a cluster-scoped template gets no OverridePolicy, only ClusterOverridePolicies
    let mut ns_less = doc.clone();
    ns_less["metadata"]["namespace"] = Value::Null;
    let before = ns_less.clone();
    let applied = apply_policies(
        &mut ns_less,
        &template(&before, &labels),
        &Cluster::named("member1"),
        &[&p],
    )
    .unwrap();
    assert!(applied.is_empty());
    assert_eq!(ns_less, before);
}

#[test]
fn ov_2_a_failing_policy_leaves_the_manifest_and_names_the_policy() {
    let doc = deployment();
    let labels = BTreeMap::new();
    let good = policy("", "a-good", vec![], vec![label_rule("good", &[])]);
    let bad = policy(
        "default",
        "bad",
        vec![],
        vec![OverrideRule {
            target_cluster: None,
            overriders: Overriders {
                plaintext: vec![patch("/spec/nope", Operator::Replace, Some(json!(1)))],
                ..Default::default()
            },
        }],
    );
    let mut out = doc.clone();
    let err = apply_policies(
        &mut out,
        &template(&doc, &labels),
        &Cluster::named("m"),
        &[&good, &bad],
    )
    .unwrap_err();
    assert_eq!(err.policy, "OverridePolicy default/bad");
    assert!(err.to_string().contains("replace /spec/nope"), "{err}");
    assert_eq!(
        out, doc,
        "never half-patched, not even by the policy that did apply"
    );
}

#[test]
fn ov_1_karmada_yaml_round_trips() {
    let yaml = r#"
plaintext:
  - path: /spec/replicas
    operator: replace
    value: 5
  - path: /metadata/annotations/x
    operator: remove
imageOverrider:
  - component: Registry
    operator: replace
    value: eu.registry.example.com
  - predicate:
      path: /spec/template/spec/containers/0/image
    component: Tag
    operator: replace
    value: "1.28"
commandOverrider:
  - containerName: web
    operator: add
    value: ["--verbose"]
argsOverrider:
  - containerName: web
    operator: remove
    value: ["-q"]
labelsOverrider:
  - operator: add
    value: {mesh: eu}
annotationsOverrider:
  - operator: replace
    value: {owner: team-eu}
"#;
    let yaml = format!("{yaml}{}", crate::testing::log_level_field_overrider(0));
    let o: Overriders = serde_norway::from_str(&yaml).unwrap();
    assert_eq!(o.plaintext.len(), 2);
    assert_eq!(o.plaintext[1].value, None);
    assert_eq!(
        o.image[1].predicate_path.as_deref(),
        Some("/spec/template/spec/containers/0/image")
    );
    assert_eq!(o.image[1].component, ImageComponent::Tag);
    assert_eq!(o.args[0].value, ["-q"]);
    assert!(o.field[0].yaml);
    assert_eq!(o.field[0].operations[0].path, "/log/level");
    // written back in the same shape (the applied-overrides annotation)
    let json = serde_json::to_value(&o).unwrap();
    assert_eq!(
        json["imageOverrider"][1]["predicate"]["path"],
        "/spec/template/spec/containers/0/image"
    );
    assert_eq!(
        json["fieldOverrider"][0]["yaml"][0]["subPath"],
        "/log/level"
    );
    assert!(json["fieldOverrider"][0].get("json").is_none());
    assert!(json["plaintext"][1].get("value").is_none());
    assert!(json.get("commandOverrider").is_some() && json.get("nothing").is_none());
    let back: Overriders = serde_json::from_value(json).unwrap();
    assert_eq!(back, o);
    // mistakes are named
    for (bad, want) in [
        (
            "plaintext: [{path: /a, operator: upsert}]",
            "unknown variant",
        ),
        (
            "imageOverrider: [{component: Host, operator: add}]",
            "unknown variant",
        ),
        ("labelOverrider: []", "unknown field"),
        ("fieldOverrider: [{fieldPath: /a}]", "either json or yaml"),
        (
            "fieldOverrider: [{fieldPath: /a, json: [{subPath: /b, operator: remove}], yaml: [{subPath: /b, operator: remove}]}]",
            "only one is allowed",
        ),
    ] {
        let err = serde_norway::from_str::<Overriders>(bad)
            .unwrap_err()
            .to_string();
        assert!(err.contains(want), "{bad}: {err}");
    }
}

#[test]
fn ov_4_diff_names_each_changed_leaf() {
    let before = deployment();
    let mut after = before.clone();
    after["spec"]["replicas"] = json!(5);
    after["metadata"]["labels"]["mesh"] = json!("eu");
    after["spec"]["template"]["spec"]["containers"][0]["args"] = json!(["-v", "-q", "--eu"]);
    after["metadata"]["labels"]
        .as_object_mut()
        .unwrap()
        .remove("app");
    assert_eq!(
        diff(&before, &after),
        [
            "/metadata/labels/app: \"web\" → (absent)",
            "/metadata/labels/mesh: (absent) → \"eu\"",
            "/spec/replicas: 3 → 5",
            "/spec/template/spec/containers/0/args: [\"-v\",\"-q\"] → [\"-v\",\"-q\",\"--eu\"]",
        ]
    );
    assert!(diff(&before, &before).is_empty());
}
