use serde_json::json;

use super::*;

fn l(items: &[(&str, i64)]) -> ResourceList {
    items.iter().map(|(n, a)| ((*n).to_owned(), *a)).collect()
}

const GI: i64 = 1 << 30;
const MI: i64 = 1 << 20;

#[test]
fn es_1_replica_requests_from_the_pod_template() {
    // (case, pod spec, requests of one replica)
    let cases: Vec<(&str, serde_json::Value, ResourceList)> = vec![
        (
            "ES-1.2 containers are summed",
            json!({"containers": [
                {"resources": {"requests": {"cpu": "1", "memory": "128Mi"}}},
                {"resources": {"requests": {"cpu": "500m", "memory": "128Mi"}}},
            ]}),
            l(&[("cpu", 1500), ("memory", 256 * MI)]),
        ),
        (
            "ES-1.2 an init container larger than the sum raises it",
            json!({"containers": [
                {"resources": {"requests": {"cpu": "1"}}},
                {"resources": {"requests": {"cpu": "500m"}}},
            ], "initContainers": [{"resources": {"requests": {"cpu": "2"}}}]}),
            l(&[("cpu", 2000)]),
        ),
        (
            "ES-1.2 a smaller one does not, and init containers are not summed",
            json!({"containers": [
                {"resources": {"requests": {"cpu": "1"}}},
                {"resources": {"requests": {"cpu": "1500m"}}},
            ], "initContainers": [
                {"resources": {"requests": {"cpu": "2"}}},
                {"resources": {"requests": {"cpu": "2"}}},
            ]}),
            l(&[("cpu", 2500)]),
        ),
        (
            "ES-1.2 a sidecar (restartable init container) is an init container too",
            json!({"containers": [{"resources": {"requests": {"cpu": "1"}}}],
                   "initContainers": [{"restartPolicy": "Always",
                                       "resources": {"requests": {"cpu": "500m"}}}]}),
            l(&[("cpu", 1000)]),
        ),
        (
            "ES-1.3 the overhead is added after the init containers' maximum",
            json!({"containers": [{"resources": {"requests": {"cpu": "1"}}}],
                   "initContainers": [{"resources": {"requests": {"cpu": "2"}}}],
                   "overhead": {"cpu": "250m", "memory": "120Mi"}}),
            l(&[("cpu", 2250), ("memory", 120 * MI)]),
        ),
        (
            "ES-1.1 a limit stands in for a missing request, not for a given one",
            json!({"containers": [{"resources": {
                "requests": {"cpu": "100m"},
                "limits": {"cpu": "2", "memory": "1Gi"}}}]}),
            l(&[("cpu", 100), ("memory", GI)]),
        ),
        (
            "ES-1.4 extended resources, hugepages and ephemeral storage count; storage does not",
            json!({"containers": [{"resources": {"requests": {
                "nvidia.com/gpu": "1", "hugepages-2Mi": "4Mi", "ephemeral-storage": "1Gi",
                "storage": "10Gi", "requests.cpu": "1"}}}]}),
            l(&[
                ("ephemeral-storage", GI),
                ("hugepages-2Mi", 4 * MI),
                ("nvidia.com/gpu", 1),
            ]),
        ),
        (
            "ES-1.5 nothing requested, zero requests and unparseable ones leave nothing",
            json!({"containers": [{"name": "a"}, {"resources": {"requests": {
                "cpu": "0", "memory": "lots"}}}]}),
            l(&[]),
        ),
        (
            "ES-1.1 CPU rounds up to a millicore",
            json!({"containers": [{"resources": {"requests": {"cpu": "0.0001"}}}]}),
            l(&[("cpu", 1)]),
        ),
    ];
    for (case, spec, want) in cases {
        assert_eq!(replica_requests(&spec), want, "{case}");
    }
}

#[test]
fn es_2_max_replicas_by_the_general_estimator() {
    // a cluster of 8 CPUs and 32Gi with 110 pods, 3 CPUs and 4Gi allocated over 10 pods,
    // 1 CPU allocating in 2 Pending pods
    let summary = Summary {
        allocatable: l(&[("cpu", 8000), ("memory", 32 * GI), ("pods", 110)]),
        allocated: l(&[("cpu", 3000), ("memory", 4 * GI), ("pods", 10)]),
        allocating: l(&[("cpu", 1000), ("pods", 2)]),
        ..Default::default()
    };
    let cases: Vec<(&str, Option<&Summary>, ResourceList, i64)> = vec![
        (
            "ES-2.1 no summary: nothing is known to fit",
            None,
            l(&[("cpu", 1000)]),
            0,
        ),
        (
            "ES-2.4 no requests: the pods still allowed",
            Some(&summary),
            l(&[]),
            98,
        ),
        (
            "ES-2.3 CPU bounds: (8 − 3 − 1) / 1",
            Some(&summary),
            l(&[("cpu", 1000)]),
            4,
        ),
        (
            "ES-2.3 the least quotient wins: memory (28Gi / 8Gi) under CPU (4000 / 500)",
            Some(&summary),
            l(&[("cpu", 500), ("memory", 8 * GI)]),
            3,
        ),
        (
            "ES-2.2 the pods still allowed bound small requests",
            Some(&summary),
            l(&[("cpu", 1)]),
            98,
        ),
        (
            "ES-2.3 a resource the cluster does not list fits nowhere",
            Some(&summary),
            l(&[("cpu", 100), ("nvidia.com/gpu", 1)]),
            0,
        ),
        (
            "ES-2.3 a replica larger than what is free: 0",
            Some(&summary),
            l(&[("cpu", 5000)]),
            0,
        ),
        (
            "ES-2.3 zero requests are ignored",
            Some(&summary),
            l(&[("cpu", 0), ("memory", GI)]),
            28,
        ),
    ];
    for (case, summary, requests, want) in cases {
        assert_eq!(max_replicas(summary, &[], &requests), want, "{case}");
    }
    let full = Summary {
        allocatable: l(&[("cpu", 8000), ("pods", 10)]),
        allocated: l(&[("pods", 8)]),
        allocating: l(&[("pods", 2)]),
        ..Default::default()
    };
    assert_eq!(
        max_replicas(Some(&full), &[], &l(&[("cpu", 1)])),
        0,
        "ES-2.2 no pod allowed: 0"
    );
    let over = Summary {
        allocatable: l(&[("cpu", 2000), ("pods", 10)]),
        allocated: l(&[("cpu", 2500)]),
        allocating: l(&[]),
        ..Default::default()
    };
    assert_eq!(
        max_replicas(Some(&over), &[], &l(&[("cpu", 100)])),
        0,
        "ES-2.3 over-committed: nothing free"
    );
}

/// ES-2 as `flotilla explain binding` shows it: the estimate and what bounds it.
#[test]
fn es_2_what_bounds_the_estimate() {
    let summary = Summary {
        allocatable: l(&[("cpu", 8000), ("memory", 32 * GI), ("pods", 110)]),
        allocated: l(&[("cpu", 3000), ("memory", 4 * GI), ("pods", 10)]),
        allocating: l(&[("cpu", 1000), ("pods", 2)]),
        ..Default::default()
    };
    let full = Summary {
        allocatable: l(&[("pods", 10)]),
        allocated: l(&[("pods", 10)]),
        ..Default::default()
    };
    let cases: Vec<(&str, Option<&Summary>, ResourceList, (i64, Bound))> = vec![
        ("ES-2.1", None, l(&[]), (0, Bound::NoSummary)),
        ("ES-2.2", Some(&full), l(&[("cpu", 1)]), (0, Bound::Pods)),
        ("ES-2.4", Some(&summary), l(&[]), (98, Bound::Pods)),
        (
            "ES-2.3 cpu",
            Some(&summary),
            l(&[("cpu", 1000), ("memory", GI)]),
            (4, Bound::Resource("cpu".into())),
        ),
        (
            "ES-2.3 memory under cpu",
            Some(&summary),
            l(&[("cpu", 500), ("memory", 8 * GI)]),
            (3, Bound::Resource("memory".into())),
        ),
        (
            "ES-2.3 missing",
            Some(&summary),
            l(&[("cpu", 100), ("nvidia.com/gpu", 1)]),
            (0, Bound::Missing("nvidia.com/gpu".into())),
        ),
    ];
    for (case, summary, requests, want) in cases {
        assert_eq!(estimate(summary, &[], &requests), want, "{case}");
        assert_eq!(max_replicas(summary, &[], &requests), want.0, "{case}");
    }
    assert_eq!(
        Bound::Missing("nvidia.com/gpu".into()).to_string(),
        "nvidia.com/gpu (the cluster has none)"
    );
}

#[test]
fn es_1_4_counted_resource_names() {
    for (name, counted) in [
        ("cpu", true),
        ("memory", true),
        ("ephemeral-storage", true),
        ("pods", true),
        ("nvidia.com/gpu", true),
        ("example.com/foo", true),
        ("hugepages-1Gi", true),
        ("attachable-volumes-aws-ebs", true),
        ("kubernetes.io/something", true),
        ("storage", false),
        ("requests.example.com/foo", false),
        ("gpu", false),
    ] {
        assert_eq!(is_counted(name), counted, "{name}");
    }
}
