//! Graceful eviction tasks (§1.7), binding invariants (A7), workloads, metadata, paging.

use std::collections::BTreeMap;

use super::{EditCase, Want, assert_errs, run_edits};
use crate::types::*;
use crate::validation::FieldErrorKind::*;
use crate::validation::*;

fn task(from: &str) -> GracefulEvictionTask {
    GracefulEvictionTask {
        from_cluster: from.to_owned(),
        purge_mode: PurgeMode::Gracefully,
        replicas: Some(3),
        reason: REASON_TAINT_UNTOLERATED.to_owned(),
        message: "cluster member1 is not ready".to_owned(),
        producer: PRODUCER_TAINT_MANAGER.to_owned(),
        grace_period_seconds: None,
        suppress_deletion: None,
        preserved_label_state: BTreeMap::new(),
        clusters_before_failover: vec!["member1".to_owned(), "member2".to_owned()],
        creation_timestamp: None,
        trace_context: "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01".to_owned(),
    }
}

#[test]
fn eviction_task_fields_1_7() {
    let cases: Vec<EditCase<GracefulEvictionTask>> = vec![
        EditCase {
            name: "suppressDeletion alone",
            edit: |t| t.suppress_deletion = Some(true),
            want: &[],
        },
        EditCase {
            name: "grace period and suppressDeletion",
            edit: |t| {
                t.grace_period_seconds = Some(600);
                t.suppress_deletion = Some(false);
            },
            want: &[("gracePeriodSeconds", Forbidden)],
        },
        EditCase {
            name: "clustersBeforeFailover",
            edit: |t| {
                t.clusters_before_failover = vec!["member1".into(), "Bad".into(), "member1".into()]
            },
            want: &[
                ("clustersBeforeFailover[1]", Invalid),
                ("clustersBeforeFailover[2]", Duplicate),
            ],
        },
        EditCase {
            name: "preservedLabelState",
            edit: |t| {
                t.preserved_label_state
                    .insert("bad key".to_owned(), "v".to_owned());
            },
            want: &[("preservedLabelState[bad key]", Invalid)],
        },
    ];
    let validate = |t: &GracefulEvictionTask| {
        validate_eviction_task(t, &FieldPath::new(""), &Limits::default())
    };
    run_edits(cases, || task("member3"), validate);
    // The fields the rows below set: (field path, setter).
    type Field<V> = (&'static str, fn(&mut GracefulEvictionTask, V));
    let from: Field<String> = ("fromCluster", |t, v| t.from_cluster = v);
    let reason: Field<String> = ("reason", |t, v| t.reason = v);
    let message: Field<String> = ("message", |t, v| t.message = v);
    let producer: Field<String> = ("producer", |t, v| t.producer = v);
    let trace: Field<String> = ("traceContext", |t, v| t.trace_context = v);
    let grace: Field<i64> = ("gracePeriodSeconds", |t, v| {
        t.grace_period_seconds = Some(v)
    });
    let replicas: Field<i64> = ("replicas", |t, v| t.replicas = Some(v.try_into().unwrap()));
    fn with<V>(set: fn(&mut GracefulEvictionTask, V), value: V) -> GracefulEvictionTask {
        let mut t = task("member3");
        set(&mut t, value);
        t
    }
    for (field, set) in [from, reason, producer] {
        let got = validate(&with(set, String::new()));
        assert_errs(&format!("{field} required"), &got, &[(field, Required)]);
    }
    // At most `max` characters: the maximum passes, one more is TooLong.
    for ((field, set), max, fill) in [(from, 48, "a"), (reason, 32, "R"), (message, 1024, "m")] {
        for (len, want) in [(max, &[][..]), (max + 1, &[(field, TooLong)][..])] {
            let got = validate(&with(set, fill.repeat(len)));
            assert_errs(&format!("{field} {len} chars"), &got, want);
        }
    }
    // (case, field, value, the error it gives at that field if any)
    let (ok, invalid, out) = (None, Some(Invalid), Some(OutOfRange));
    for (case, (field, set), value, kind) in [
        ("reason pattern", reason, "Taint-Untolerated", invalid),
        ("message may be empty", message, "", ok),
        ("message with newline", message, "a\nb", ok),
        ("message with escape", message, "a\u{1b}[31m", invalid),
        ("traceContext", trace, "a\nb", invalid),
    ] {
        let want: Vec<_> = kind.map(|k| (field, k)).into_iter().collect();
        assert_errs(case, &validate(&with(set, value.to_owned())), &want);
    }
    for (case, (field, set), value, kind) in [
        ("grace period 1", grace, 1, ok),
        ("grace period 0", grace, 0, out),
        ("grace period cap + 1", grace, ONE_YEAR_SECONDS + 1, out),
        ("replicas 0", replicas, 0, ok),
        ("replicas negative", replicas, -1, out),
    ] {
        let want: Vec<_> = kind.map(|k| (field, k)).into_iter().collect();
        assert_errs(case, &validate(&with(set, value)), &want);
    }
}

fn binding() -> ResourceBinding {
    ResourceBinding {
        meta: ObjectMeta {
            name: "nginx-deployment".to_owned(),
            namespace: "default".to_owned(),
            ..ObjectMeta::default()
        },
        spec: ResourceBindingSpec {
            resource: ObjectReference {
                uid: "uid-1".to_owned(),
                ..ObjectReference::new("apps/v1", "Deployment", "default", "nginx")
            },
            replicas: 5,
            replica_requirements: Some(ReplicaRequirements::of(&[
                ("cpu", 100),
                ("memory", 1 << 20),
            ])),
            placement: Some(Placement::default()),
            clusters: vec![
                TargetCluster::new("member1", 3),
                TargetCluster::new("member2", 2),
            ],
            graceful_eviction_tasks: vec![task("member3")],
            required_by_clusters: vec![],
            reschedule_triggered_at: None,
            failover: Some(FailoverBehavior::default()),
            scheduler_name: DEFAULT_SCHEDULER_NAME.to_owned(),
            propagate_deps: false,
            preserve_resources_on_deletion: true,
            suspension: None,
            conflict_resolution: Default::default(),
        },
        status: ResourceBindingStatus::default(),
    }
}

#[test]
fn a7_binding_invariants() {
    let cases: Vec<EditCase<ResourceBindingSpec>> = vec![
        EditCase {
            name: "A7/#3283: a cluster is never both a target and a task",
            edit: |s| s.graceful_eviction_tasks.push(task("member2")),
            want: &[("spec.gracefulEvictionTasks[1].fromCluster", Forbidden)],
        },
        EditCase {
            name: "A7: at most one task per cluster",
            edit: |s| s.graceful_eviction_tasks.push(task("member3")),
            want: &[("spec.gracefulEvictionTasks[1].fromCluster", Duplicate)],
        },
        EditCase {
            name: "no duplicate targets",
            edit: |s| s.clusters.push(TargetCluster::new("member1", 0)),
            want: &[("spec.clusters[2].name", Duplicate)],
        },
        EditCase {
            name: "target names are cluster names",
            edit: |s| s.clusters[0].name = "a".repeat(49),
            want: &[("spec.clusters[0].name", TooLong)],
        },
        EditCase {
            name: "replicas ≥ 0",
            edit: |s| {
                s.replicas = -1;
                s.clusters[1].replicas = -2;
            },
            want: &[
                ("spec.replicas", OutOfRange),
                ("spec.clusters[1].replicas", OutOfRange),
            ],
        },
        EditCase {
            name: "replicas ≤ max",
            edit: |s| {
                s.replicas = 100_000;
                s.clusters[0].replicas = 100_001;
            },
            want: &[("spec.clusters[0].replicas", OutOfRange)],
        },
        EditCase {
            name: "negative requests",
            edit: |s| {
                s.replica_requirements =
                    Some(ReplicaRequirements::of(&[("cpu", -1), ("memory", -1)]))
            },
            want: &[
                ("spec.replicaRequirements.resourceRequest[cpu]", OutOfRange),
                (
                    "spec.replicaRequirements.resourceRequest[memory]",
                    OutOfRange,
                ),
            ],
        },
        EditCase {
            name: "resource reference",
            edit: |s| s.resource = ObjectReference::default(),
            want: &[
                ("spec.resource.apiVersion", Required),
                ("spec.resource.kind", Required),
                ("spec.resource.name", Required),
            ],
        },
        EditCase {
            name: "placement and failover are validated",
            edit: |s| {
                s.placement = Some(Placement {
                    cluster_tolerations: vec![Toleration::default()],
                    ..Placement::default()
                });
                s.failover = Some(FailoverBehavior {
                    cluster: Some(ClusterFailoverBehavior {
                        purge_mode: Some(PurgeMode::Never),
                        ..ClusterFailoverBehavior::default()
                    }),
                    application: None,
                });
            },
            want: &[
                ("spec.placement.clusterTolerations[0].operator", Invalid),
                ("spec.failover.cluster.purgeMode", NotSupported),
            ],
        },
    ];
    run_edits(
        cases,
        || binding().spec,
        |spec| validate_binding_spec(spec, &Limits::default()),
    );
    // The eviction task list as a whole: (case, tasks, want).
    let evicted = |n: usize| (0..n).map(|i| task(&format!("evicted{i}"))).collect();
    let mut reasonless = task("member3");
    reasonless.reason.clear();
    let lists: [(&str, Vec<GracefulEvictionTask>, Want); 3] = [
        (
            "tasks are validated in place",
            vec![reasonless],
            &[("spec.gracefulEvictionTasks[0].reason", Required)],
        ),
        ("128 tasks", evicted(128), &[]),
        (
            "129 tasks",
            evicted(129),
            &[("spec.gracefulEvictionTasks", TooMany)],
        ),
    ];
    for (name, graceful_eviction_tasks, want) in lists {
        let spec = ResourceBindingSpec {
            graceful_eviction_tasks,
            ..binding().spec
        };
        assert_errs(
            name,
            &validate_binding_spec(&spec, &Limits::default()),
            want,
        );
    }
}

#[test]
fn binding_update_template_identity_immutable() {
    let old = binding();
    let mut new = binding();
    new.spec.resource.uid = "uid-2".to_owned();
    new.spec.resource.api_version = "apps/v2".to_owned();
    new.spec.clusters.pop();
    assert_errs(
        "uid, apiVersion and result may change",
        &validate_binding_update(&old, &new, &Limits::default()),
        &[],
    );

    let mut new = binding();
    new.meta.name = "other".to_owned();
    new.spec.resource.kind = "StatefulSet".to_owned();
    new.spec.resource.namespace = "other".to_owned();
    new.spec.resource.name = "other".to_owned();
    new.spec.graceful_eviction_tasks.push(task("member1"));
    assert_errs(
        "identity changed and a broken invariant",
        &validate_binding_update(&old, &new, &Limits::default()),
        &[
            ("metadata.name", Forbidden),
            ("spec.resource.kind", Forbidden),
            ("spec.resource.namespace", Forbidden),
            ("spec.resource.name", Forbidden),
            ("spec.gracefulEvictionTasks[1].fromCluster", Forbidden),
        ],
    );
}

#[test]
fn sc_4_6_unschedulable_replicas_are_part_of_the_replicas() {
    let old = binding();
    for (short, ok) in [
        (0, true),
        (old.spec.replicas, true),
        (-1, false),
        (old.spec.replicas + 1, false),
    ] {
        let mut new = binding();
        new.status.unschedulable_replicas = short;
        let want: &[(&str, FieldErrorKind)] = if ok {
            &[]
        } else {
            &[("status.unschedulableReplicas", Invalid)]
        };
        assert_errs(
            &format!("unschedulable {short}"),
            &validate_binding_update(&old, &new, &Limits::default()),
            want,
        );
    }
}

#[test]
fn workload_template() {
    struct Case {
        name: &'static str,
        meta: ObjectMeta,
        api_version: &'static str,
        kind: &'static str,
        replicas: Option<i64>,
        requests: Option<ReplicaRequirements>,
        manifest_bytes: usize,
        want: Want,
    }
    let meta = |ns: &str, name: &str| ObjectMeta {
        name: name.to_owned(),
        namespace: ns.to_owned(),
        ..ObjectMeta::default()
    };
    let ok = || Case {
        name: "valid",
        meta: meta("default", "nginx"),
        api_version: "apps/v1",
        kind: "Deployment",
        replicas: Some(3),
        requests: Some(ReplicaRequirements::of(&[("cpu", 0), ("memory", 0)])),
        manifest_bytes: 1024,
        want: &[],
    };
    let cases = [
        ok(),
        Case {
            name: "no replicas field",
            replicas: None,
            ..ok()
        },
        Case {
            name: "0 replicas",
            replicas: Some(0),
            ..ok()
        },
        Case {
            name: "max replicas",
            replicas: Some(100_000),
            ..ok()
        },
        Case {
            name: "max + 1",
            replicas: Some(100_001),
            want: &[("spec.replicas", OutOfRange)],
            ..ok()
        },
        Case {
            name: "negative",
            replicas: Some(-1),
            want: &[("spec.replicas", OutOfRange)],
            ..ok()
        },
        Case {
            name: "beyond int32",
            replicas: Some(i64::from(i32::MAX) + 1),
            want: &[("spec.replicas", OutOfRange)],
            ..ok()
        },
        Case {
            name: "manifest 1 MiB",
            manifest_bytes: 1 << 20,
            ..ok()
        },
        Case {
            name: "manifest 1 MiB + 1",
            manifest_bytes: (1 << 20) + 1,
            want: &[("manifest", TooLong)],
            ..ok()
        },
        Case {
            name: "apiVersion and kind required",
            api_version: "",
            kind: "",
            want: &[("apiVersion", Required), ("kind", Required)],
            ..ok()
        },
        Case {
            name: "namespace required, name a DNS subdomain",
            meta: meta("", "Nginx"),
            want: &[("metadata.namespace", Required), ("metadata.name", Invalid)],
            ..ok()
        },
        Case {
            name: "dotted name, 63-char namespace",
            meta: meta(&"n".repeat(63), "nginx.v2"),
            ..ok()
        },
        Case {
            name: "64-char namespace",
            meta: meta(&"n".repeat(64), "nginx"),
            want: &[("metadata.namespace", TooLong)],
            ..ok()
        },
        Case {
            name: "negative requests",
            requests: Some(ReplicaRequirements::of(&[("cpu", -1), ("memory", 1)])),
            want: &[("spec.replicaRequirements.resourceRequest[cpu]", OutOfRange)],
            ..ok()
        },
        Case {
            name: "a resource no replica requests",
            requests: Some(ReplicaRequirements::of(&[
                ("nvidia.com/gpu", 1),
                ("storage", 1),
            ])),
            want: &[("spec.replicaRequirements.resourceRequest[storage]", Invalid)],
            ..ok()
        },
    ];
    for c in cases {
        let w = WorkloadTemplate {
            meta: &c.meta,
            api_version: c.api_version,
            kind: c.kind,
            replicas: c.replicas,
            replica_requirements: c.requests.as_ref(),
            manifest_bytes: c.manifest_bytes,
        };
        assert_errs(c.name, &validate_workload(&w, &Limits::default()), c.want);
    }
}

#[test]
fn k8s_annotations_256_kib_total() {
    let limits = Limits::default();
    let path = FieldPath::new("metadata").child("annotations");
    let exact = BTreeMap::from([("k".to_owned(), "v".repeat(256 * 1024 - 1))]);
    assert_errs(
        "exactly 256 KiB",
        &validate_annotations(&exact, &path, &limits),
        &[],
    );
    let over = BTreeMap::from([("k".to_owned(), "v".repeat(256 * 1024))]);
    assert_errs(
        "256 KiB + 1",
        &validate_annotations(&over, &path, &limits),
        &[("metadata.annotations", TooLong)],
    );
    let keys = BTreeMap::from([
        ("Example.com/Upper".to_owned(), String::new()),
        (
            "bad key".to_owned(),
            "multi\nline values are fine".to_owned(),
        ),
    ]);
    assert_errs(
        "keys are qualified names (checked lower-cased)",
        &validate_annotations(&keys, &path, &limits),
        &[("metadata.annotations[bad key]", Invalid)],
    );
}

#[test]
fn k8s_labels() {
    let limits = Limits::default();
    let path = FieldPath::new("metadata").child("labels");
    let many: BTreeMap<_, _> = (0..257).map(|i| (format!("k{i}"), String::new())).collect();
    assert_errs(
        "257 labels",
        &validate_labels(&many, &path, &limits),
        &[("metadata.labels", TooMany)],
    );
    let bad = BTreeMap::from([("".to_owned(), "v".repeat(64))]);
    assert_errs(
        "empty key, long value",
        &validate_labels(&bad, &path, &limits),
        &[
            ("metadata.labels[]", Required),
            ("metadata.labels[]", TooLong),
        ],
    );
}

#[test]
fn grpc_page_size_at_most_500() {
    let limits = Limits::default();
    for (size, ok) in [
        (0, true),
        (1, true),
        (500, true),
        (501, false),
        (-1, false),
        (i64::MAX, false),
    ] {
        let want: Want = if ok { &[] } else { &[("pageSize", OutOfRange)] };
        assert_errs(&size.to_string(), &validate_page_size(size, &limits), want);
    }
}
