use serde_json::json;

use super::*;

#[test]
fn ages_are_written_as_kube_apiserver_writes_them() {
    for (secs, want) in [
        (-5, "<invalid>"),
        (-1, "0s"),
        (0, "0s"),
        (119, "119s"),
        (120, "2m"),
        (125, "2m5s"),
        (600, "10m"),
        (179 * 60, "179m"),
        (3 * 3600, "3h"),
        (3 * 3600 + 120, "3h2m"),
        (8 * 3600 + 120, "8h"),
        (47 * 3600, "47h"),
        (48 * 3600, "2d"),
        (50 * 3600, "2d2h"),
        (8 * 24 * 3600, "8d"),
        (730 * 24 * 3600, "2y"),
        (735 * 24 * 3600, "2y5d"),
        (9 * 365 * 24 * 3600, "9y"),
    ] {
        assert_eq!(human_duration(secs), want, "{secs}s");
    }
}

#[test]
fn a_table_is_asked_for_as_kubectl_asks() {
    let kubectl = "application/json;as=Table;v=v1;g=meta.k8s.io,application/json;as=Table;v=v1beta1;g=meta.k8s.io,application/json";
    assert_eq!(
        wanted(kubectl, None),
        Ok(Some(Wanted {
            version: "v1",
            include: Include::Metadata
        }))
    );
    let beta = "application/json;as=Table;v=v1beta1;g=meta.k8s.io";
    assert_eq!(
        wanted(beta, Some("Object")).unwrap().unwrap().version,
        "v1beta1"
    );
    assert_eq!(wanted("application/json", None), Ok(None));
    assert_eq!(
        wanted("application/json;as=Table;v=v2;g=meta.k8s.io", None),
        Ok(None)
    );
    assert!(wanted(kubectl, Some("Everything")).is_err());
}

const NOW: i64 = 1_764_669_600; // 2025-12-02T10:00:00Z

fn deployment() -> serde_json::Value {
    json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": "nginx", "namespace": "default", "creationTimestamp": "2025-12-02T09:55:00Z"},
        "spec": {"replicas": 2, "selector": {"matchLabels": {"app": "nginx"}},
                 "template": {"spec": {"containers": [{"name": "nginx", "image": "nginx:1.25"}]}}},
        "status": {"readyReplicas": 2, "updatedReplicas": 2, "availableReplicas": 1}
    })
}

#[test]
fn a_deployment_prints_ready_up_to_date_and_available() {
    let wanted = Wanted {
        version: "v1",
        include: Include::Metadata,
    };
    let t = table(
        wanted,
        "apps",
        "Deployment",
        &[deployment()],
        json!({"resourceVersion": "7"}),
        NOW,
    );
    assert_eq!(t["kind"], "Table");
    assert_eq!(t["apiVersion"], "meta.k8s.io/v1");
    let names: Vec<&str> = t["columnDefinitions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["name"].as_str().unwrap())
        .collect();
    assert_eq!(
        names,
        [
            "Name",
            "Ready",
            "Up-to-date",
            "Available",
            "Age",
            "Containers",
            "Images",
            "Selector"
        ]
    );
    assert_eq!(
        t["rows"][0]["cells"],
        json!([
            "nginx",
            "2/2",
            2,
            1,
            "5m",
            "nginx",
            "nginx:1.25",
            "app=nginx"
        ])
    );
    assert_eq!(t["rows"][0]["object"]["kind"], "PartialObjectMetadata");
    assert_eq!(t["rows"][0]["object"]["metadata"]["name"], "nginx");
    assert_eq!(t["metadata"]["resourceVersion"], "7");
    let bare = table(
        Wanted {
            version: "v1",
            include: Include::None,
        },
        "apps",
        "Deployment",
        &[deployment()],
        json!({}),
        NOW,
    );
    assert!(bare["rows"][0].get("object").is_none());
}

#[test]
fn karmadas_kinds_print_their_crds_columns_and_others_name_and_age() {
    let wanted = Wanted {
        version: "v1",
        include: Include::Object,
    };
    let rb = json!({
        "metadata": {"name": "nginx-deployment", "creationTimestamp": "2025-12-02T08:00:00Z"},
        "status": {"conditions": [{"type": "Scheduled", "status": "True"},
                                  {"type": "FullyApplied", "status": "False"}]}
    });
    let t = table(
        wanted,
        "work.karmada.io",
        "ResourceBinding",
        std::slice::from_ref(&rb),
        json!({}),
        NOW,
    );
    assert_eq!(
        t["rows"][0]["cells"],
        json!(["nginx-deployment", "True", "False", "120m"])
    );
    assert_eq!(
        t["rows"][0]["object"], rb,
        "includeObject=Object: the whole object"
    );
    let pp =
        json!({"metadata": {"name": "p"}, "spec": {"priority": 3, "conflictResolution": "Abort"}});
    let t = table(
        wanted,
        "policy.karmada.io",
        "PropagationPolicy",
        &[pp],
        json!({}),
        NOW,
    );
    assert_eq!(
        t["rows"][0]["cells"],
        json!(["p", "Abort", "3", "<unknown>"])
    );
    let cluster = json!({"metadata": {"name": "member1"}, "spec": {"syncMode": "Push"}});
    let t = table(
        wanted,
        "cluster.karmada.io",
        "Cluster",
        &[cluster],
        json!({}),
        NOW,
    );
    assert_eq!(
        t["rows"][0]["cells"],
        json!([
            "member1",
            "",
            "Push",
            "Unknown",
            "<unknown>",
            "<none>",
            "<none>",
            "<none>",
            "",
            "<none>"
        ])
    );
    let cm = json!({"metadata": {"name": "c"}, "data": {"a": "1", "b": "2"}});
    let t = table(wanted, "", "ConfigMap", &[cm], json!({}), NOW);
    assert_eq!(t["rows"][0]["cells"], json!(["c", 2, "<unknown>"]));
    let other = json!({"metadata": {"name": "x", "creationTimestamp": "2025-12-02T09:59:30Z"}});
    let t = table(
        wanted,
        "apps.kruise.io",
        "CloneSet",
        &[other],
        json!({}),
        NOW,
    );
    assert_eq!(t["rows"][0]["cells"], json!(["x", "30s"]));
}

#[test]
fn jobs_and_services_print_as_kubectl_shows_them() {
    let wanted = Wanted {
        version: "v1",
        include: Include::None,
    };
    let job = json!({
        "metadata": {"name": "pi"},
        "spec": {"completions": 2},
        "status": {"succeeded": 1, "startTime": "2025-12-02T09:58:00Z"}
    });
    let t = table(wanted, "batch", "Job", &[job], json!({}), NOW);
    assert_eq!(t["rows"][0]["cells"][1], "1/2");
    assert_eq!(t["rows"][0]["cells"][2], "2m", "running: since its start");
    let svc = json!({
        "metadata": {"name": "web"},
        "spec": {"type": "LoadBalancer", "clusterIP": "10.0.0.7",
                 "ports": [{"port": 80, "nodePort": 30080}, {"port": 53, "protocol": "UDP"}]},
        "status": {"loadBalancer": {"ingress": [{"ip": "1.2.3.4", "hostname": "member1"}]}}
    });
    let t = table(wanted, "", "Service", &[svc], json!({}), NOW);
    assert_eq!(
        t["rows"][0]["cells"],
        json!([
            "web",
            "LoadBalancer",
            "10.0.0.7",
            "1.2.3.4",
            "80:30080/TCP,53/UDP",
            "<unknown>",
            "<none>"
        ])
    );
}

#[test]
fn pods_print_ready_status_and_restarts_as_kube_apiservers_printer() {
    let wanted = Wanted {
        version: "v1",
        include: Include::None,
    };
    let row = |pod: serde_json::Value| {
        let t = table(wanted, "", "Pod", &[pod], json!({}), NOW);
        t["rows"][0]["cells"].clone()
    };
    let two = json!([{"name": "a"}, {"name": "b"}]);
    let running = json!({
        "metadata": {"name": "web", "creationTimestamp": "2025-12-02T09:50:00Z"},
        "spec": {"containers": two, "nodeName": "n1"},
        "status": {"phase": "Running", "podIP": "10.1.0.4", "containerStatuses": [
            {"name": "a", "ready": true, "restartCount": 2, "state": {"running": {}},
             "lastState": {"terminated": {"exitCode": 1, "finishedAt": "2025-12-02T09:55:00Z"}}},
            {"name": "b", "ready": true, "restartCount": 1, "state": {"running": {}}},
        ]}
    });
    assert_eq!(
        row(running.clone()),
        json!([
            "web",
            "2/2",
            "Running",
            "3 (5m ago)",
            "10m",
            "10.1.0.4",
            "n1"
        ])
    );
    let mut crashing = running.clone();
    crashing["status"]["containerStatuses"][1] = json!({"name": "b", "ready": false, "restartCount": 0, "state": {"waiting": {"reason": "CrashLoopBackOff"}}});
    let cells = row(crashing);
    assert_eq!(
        (&cells[1], &cells[2]),
        (&json!("1/2"), &json!("CrashLoopBackOff"))
    );
    let init = json!({
        "metadata": {"name": "web"},
        "spec": {"containers": two},
        "status": {"phase": "Pending", "initContainerStatuses": [
            {"name": "i0", "state": {"terminated": {"exitCode": 0}}},
            {"name": "i1", "state": {"running": {}}},
        ]}
    });
    assert_eq!(row(init)[2], "Init:1/2");
    let failed = json!({
        "metadata": {"name": "job-x"},
        "spec": {"containers": [{"name": "a"}]},
        "status": {"phase": "Failed", "containerStatuses": [
            {"name": "a", "ready": false, "restartCount": 0, "state": {"terminated": {"exitCode": 137, "signal": 9}}},
        ]}
    });
    assert_eq!(row(failed)[2], "Signal:9");
    let mut deleted = running;
    deleted["metadata"]["deletionTimestamp"] = json!("2025-12-02T10:00:00Z");
    assert_eq!(row(deleted)[2], "Terminating");
    let bare = json!({"metadata": {"name": "new"}, "spec": {"containers": [{"name": "a"}]}});
    let cells = row(bare);
    assert_eq!(
        (&cells[1], &cells[2], &cells[3]),
        (&json!("0/1"), &json!(""), &json!("0"))
    );
}

#[test]
fn simple_json_paths_find_what_kube_apiservers_jsonpath_finds() {
    let o = json!({
        "metadata": {"name": "job", "labels": {"app.kubernetes.io/name": "flink"}},
        "spec": {"replicas": 3, "images": ["a:1", "b:2"], "job": {"parallelism": 2}},
        "status": {"conditions": [
            {"type": "Ready", "status": "False"},
            {"type": "Synced", "status": "True"},
        ]},
    });
    for (path, want) in [
        (".spec.replicas", Some(json!(3))),
        ("{.spec.replicas}", Some(json!(3))),
        ("$.spec.job.parallelism", Some(json!(2))),
        (".spec.images[1]", Some(json!("b:2"))),
        (".spec.images[-1]", Some(json!("b:2"))),
        (".spec.images[*]", Some(json!("a:1"))),
        (
            ".metadata.labels['app.kubernetes.io/name']",
            Some(json!("flink")),
        ),
        (
            ".status.conditions[?(@.type==\"Synced\")].status",
            Some(json!("True")),
        ),
        (
            ".status.conditions[?(@.type=='Ready')].status",
            Some(json!("False")),
        ),
        (".status.conditions[?(@.type==\"Gone\")].status", None),
        (".spec.missing", None),
        (".spec.images[7]", None),
        ("spec.replicas", None),
        (".spec.images[", None),
    ] {
        assert_eq!(json_path(&o, path).cloned(), want, "{path}");
    }
}

#[test]
fn a_custom_kind_prints_name_and_its_crds_columns_converted_by_type() {
    let column = |name: &str, type_: &str, path: &str, priority: i64| PrinterColumn {
        name: name.into(),
        type_: type_.into(),
        format: String::new(),
        description: format!("Custom resource definition column (in JSONPath format): {path}"),
        priority,
        json_path: path.into(),
    };
    let columns = [
        column("Replicas", "integer", ".spec.replicas", 0),
        column(
            "Ready",
            "string",
            ".status.conditions[?(@.type==\"Ready\")].status",
            0,
        ),
        column("Spec", "string", ".spec.job", 1),
        column("Suspended", "boolean", ".spec.suspend", 0),
        column("Started", "date", ".status.startTime", 0),
        column("Load", "number", ".status.load", 1),
    ];
    let now = 1_700_000_000;
    let item = json!({
        "metadata": {"name": "wordcount", "namespace": "default"},
        "spec": {"replicas": 2.0, "job": {"jar": "x.jar"}, "suspend": "no"},
        "status": {
            "conditions": [{"type": "Ready", "status": "True"}],
            "startTime": "2023-11-14T22:10:20Z",
            "load": 0.5,
        },
    });
    let wanted = Wanted {
        version: "v1",
        include: Include::None,
    };
    let t = custom_table(wanted, &columns, &[item], json!({}), now);
    let names: Vec<&str> = t["columnDefinitions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["name"].as_str().unwrap())
        .collect();
    assert_eq!(
        names,
        [
            "Name",
            "Replicas",
            "Ready",
            "Spec",
            "Suspended",
            "Started",
            "Load"
        ]
    );
    assert_eq!(t["columnDefinitions"][3]["priority"], 1);
    assert_eq!(
        t["rows"][0]["cells"],
        json!([
            "wordcount",
            2,
            "True",
            "{\"jar\":\"x.jar\"}",
            null,
            "3m",
            0.5
        ]),
        "a float integer truncates, an object prints as JSON, a string is no boolean, a date is an age"
    );
    // a version without columns gets kube-apiserver's Age
    let t = custom_table(
        wanted,
        &[PrinterColumn::default_age()],
        &[json!({"metadata": {"name": "a", "creationTimestamp": "2023-11-14T22:13:00Z"}})],
        json!({}),
        now,
    );
    assert_eq!(t["rows"][0]["cells"], json!(["a", "20s"]));
    assert_eq!(t["columnDefinitions"][1]["type"], "date");
}
