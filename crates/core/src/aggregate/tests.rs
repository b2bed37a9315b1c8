//! Table tests of the template status aggregation (IN-4) and its generation rule (IN-7).

use serde_json::{Value, json};

use super::{MemberStatus, aggregate_status, aggregates};

const NOW: &str = "2026-12-02T10:00:00Z";

fn member<'a>(cluster: &'a str, status: &'a Value, observed: bool) -> MemberStatus<'a> {
    MemberStatus {
        cluster,
        status: Some(status),
        observed,
    }
}

fn aggregate(
    kind: (&str, &str),
    template: &Value,
    old: Option<&Value>,
    members: &[MemberStatus<'_>],
) -> Value {
    aggregate_status(kind.0, kind.1, template, 3, old, members, NOW).expect("aggregated kind")
}

const DEPLOYMENT: (&str, &str) = ("apps/v1", "Deployment");

#[test]
fn in_4_deployment_counters_are_summed_and_zeros_omitted() {
    let a =
        json!({"replicas": 2, "readyReplicas": 2, "updatedReplicas": 2, "availableReplicas": 2});
    let b = json!({"replicas": 1, "updatedReplicas": 1, "unavailableReplicas": 1});
    let got = aggregate(
        DEPLOYMENT,
        &json!({}),
        None,
        &[member("m1", &a, true), member("m2", &b, true)],
    );
    assert_eq!(
        got,
        json!({"replicas": 3, "readyReplicas": 2, "updatedReplicas": 3, "availableReplicas": 2,
               "unavailableReplicas": 1, "observedGeneration": 3})
    );
    // the old status's other fields stay; a counter that fell to 0 goes
    let old = json!({"readyReplicas": 5, "conditions": [{"type": "Available"}]});
    let zero = json!({"replicas": 1});
    let got = aggregate(
        DEPLOYMENT,
        &json!({}),
        Some(&old),
        &[member("m1", &zero, true)],
    );
    assert_eq!(
        got,
        json!({"replicas": 1, "conditions": [{"type": "Available"}], "observedGeneration": 3})
    );
}

#[test]
fn in_7_observed_generation_moves_only_once_every_member_observed_it() {
    let s = json!({"replicas": 1});
    let old = json!({"observedGeneration": 2});
    // one member still on the old generation: the old value stays
    let got = aggregate(
        DEPLOYMENT,
        &json!({}),
        Some(&old),
        &[member("m1", &s, true), member("m2", &s, false)],
    );
    assert_eq!(got["observedGeneration"], 2, "{got}");
    // none before: still none
    let got = aggregate(DEPLOYMENT, &json!({}), None, &[member("m1", &s, false)]);
    assert!(got.get("observedGeneration").is_none(), "{got}");
    // all of them: the template's generation
    let got = aggregate(
        ("apps/v1", "StatefulSet"),
        &json!({}),
        Some(&old),
        &[member("m1", &s, true), member("m2", &s, true)],
    );
    assert_eq!(got["observedGeneration"], 3, "{got}");
    assert_eq!(got["replicas"], 2);
}

#[test]
fn in_4_statefulset_and_daemonset_keep_kubernetes_required_zeros() {
    let s = json!({});
    let got = aggregate(
        ("apps/v1", "StatefulSet"),
        &json!({}),
        None,
        &[member("m", &s, true)],
    );
    assert_eq!(
        got,
        json!({"replicas": 0, "availableReplicas": 0, "observedGeneration": 3})
    );
    let d1 = json!({"desiredNumberScheduled": 1, "currentNumberScheduled": 1, "numberReady": 1, "updatedNumberScheduled": 1, "numberAvailable": 1});
    let d2 = json!({"desiredNumberScheduled": 2, "currentNumberScheduled": 2, "numberReady": 1, "numberUnavailable": 1});
    let got = aggregate(
        ("apps/v1", "DaemonSet"),
        &json!({}),
        None,
        &[member("a", &d1, true), member("b", &d2, true)],
    );
    assert_eq!(
        got,
        json!({"desiredNumberScheduled": 3, "currentNumberScheduled": 3, "numberReady": 2,
               "numberMisscheduled": 0, "updatedNumberScheduled": 1, "numberAvailable": 1,
               "numberUnavailable": 1, "observedGeneration": 3})
    );
}

fn job_done(at: &str) -> Value {
    json!({"succeeded": 1, "startTime": "2026-12-02T09:00:00Z", "completionTime": at,
           "conditions": [{"type": "Complete", "status": "True"}]})
}

#[test]
fn in_4_a_job_is_complete_once_every_members_copy_is() {
    const JOB: (&str, &str) = ("batch/v1", "Job");
    let done = job_done("2026-12-02T09:05:00Z");
    let later = job_done("2026-12-02T09:07:00Z");
    let running = json!({"active": 1, "startTime": "2026-12-02T08:59:00Z"});
    let got = aggregate(
        JOB,
        &json!({}),
        None,
        &[member("a", &done, true), member("b", &running, true)],
    );
    assert_eq!(
        got,
        json!({"active": 1, "succeeded": 1, "startTime": "2026-12-02T08:59:00Z"}),
        "not complete while one runs; the earliest start once all started"
    );
    let got = aggregate(
        JOB,
        &json!({}),
        None,
        &[member("a", &done, true), member("b", &later, true)],
    );
    assert_eq!(got["succeeded"], 2);
    assert_eq!(
        got["completionTime"], "2026-12-02T09:07:00Z",
        "the last completion"
    );
    assert_eq!(
        got["conditions"],
        json!([{"type": "Complete", "status": "True", "reason": "Completed",
                "message": "Job completed", "lastProbeTime": NOW, "lastTransitionTime": NOW}])
    );
    // again, later: the condition keeps its times (an unchanged status)
    let again = aggregate_status(
        JOB.0,
        JOB.1,
        &json!({}),
        3,
        None,
        &[member("a", &done, true), member("b", &later, true)],
        "2026-12-02T11:00:00Z",
    )
    .unwrap();
    let kept = aggregate_status(
        JOB.0,
        JOB.1,
        &json!({}),
        3,
        Some(&got),
        &[member("a", &done, true)],
        "2026-12-02T11:00:00Z",
    )
    .unwrap();
    assert_ne!(again, got, "a fresh aggregation stamps now");
    assert_eq!(kept, got, "a finished Job's status never changes again");
    // one member not collected yet: not complete
    let uncollected = MemberStatus {
        cluster: "c",
        status: None,
        observed: false,
    };
    let got = aggregate(
        JOB,
        &json!({}),
        None,
        &[member("a", &done, true), uncollected],
    );
    assert!(got.get("conditions").is_none(), "{got}");
    // a failed copy fails the template, naming its cluster
    let failed = json!({"failed": 1, "conditions": [{"type": "Failed", "status": "True"}]});
    let got = aggregate(
        JOB,
        &json!({}),
        None,
        &[member("a", &done, true), member("b", &failed, true)],
    );
    assert_eq!(got["conditions"][0]["type"], "Failed");
    assert_eq!(
        got["conditions"][0]["message"],
        "Job executed failed in member clusters b"
    );
}

#[test]
fn in_4_load_balancer_ingresses_are_collected_and_named_after_their_cluster() {
    let a = json!({"loadBalancer": {"ingress": [{"ip": "10.0.0.1"}]}});
    let b = json!({"loadBalancer": {"ingress": [{"ip": "10.0.0.2", "hostname": "lb.b"}]}});
    let lb = json!({"spec": {"type": "LoadBalancer"}});
    let got = aggregate(
        ("v1", "Service"),
        &lb,
        None,
        &[member("a", &a, true), member("b", &b, true)],
    );
    assert_eq!(
        got,
        json!({"loadBalancer": {"ingress": [{"ip": "10.0.0.1", "hostname": "a"}, {"ip": "10.0.0.2", "hostname": "lb.b"}]}})
    );
    // a ClusterIP Service keeps what it has
    let got = aggregate(
        ("v1", "Service"),
        &json!({"spec": {}}),
        None,
        &[member("a", &a, true)],
    );
    assert_eq!(got, json!({}));
    let got = aggregate(
        ("networking.k8s.io/v1", "Ingress"),
        &json!({}),
        None,
        &[member("a", &a, true)],
    );
    assert_eq!(got["loadBalancer"]["ingress"][0]["hostname"], "a");
}

#[test]
fn in_4_pods_take_the_worst_phase_and_claims_are_bound_only_when_all_are() {
    let running = json!({"phase": "Running", "containerStatuses": [{"name": "c", "ready": true, "state": {"running": {}}, "image": "x"}]});
    let succeeded = json!({"phase": "Succeeded"});
    let got = aggregate(
        ("v1", "Pod"),
        &json!({}),
        None,
        &[member("a", &running, true), member("b", &succeeded, true)],
    );
    assert_eq!(
        got,
        json!({"phase": "Running", "containerStatuses": [{"ready": true, "state": {"running": {}}}]})
    );
    let uncollected = MemberStatus {
        cluster: "c",
        status: None,
        observed: false,
    };
    let got = aggregate(
        ("v1", "Pod"),
        &json!({}),
        None,
        &[member("a", &running, true), uncollected],
    );
    assert_eq!(got["phase"], "Pending");

    let bound = json!({"phase": "Bound"});
    let pending = json!({"phase": "Pending"});
    let lost = json!({"phase": "Lost"});
    let pvc = ("v1", "PersistentVolumeClaim");
    assert_eq!(
        aggregate(pvc, &json!({}), None, &[member("a", &bound, true)]),
        json!({"phase": "Bound"})
    );
    assert_eq!(
        aggregate(
            pvc,
            &json!({}),
            None,
            &[member("a", &bound, true), member("b", &pending, true)]
        ),
        json!({"phase": "Pending"})
    );
    assert_eq!(
        aggregate(
            pvc,
            &json!({}),
            None,
            &[member("a", &lost, true), member("b", &pending, true)]
        ),
        json!({"phase": "Lost"})
    );
}

#[test]
fn in_4_disruption_budgets_are_summed_and_kinds_without_a_rule_keep_no_status() {
    let a = json!({"currentHealthy": 2, "desiredHealthy": 1, "expectedPods": 2, "disruptionsAllowed": 1, "disruptedPods": {"p": "t"}});
    let got = aggregate(
        ("policy/v1", "PodDisruptionBudget"),
        &json!({}),
        None,
        &[member("a", &a, true), member("b", &a, true)],
    );
    assert_eq!(got["currentHealthy"], 4);
    assert_eq!(got["disruptedPods"], json!({"a/p": "t", "b/p": "t"}));
    for (api_version, kind) in [
        ("v1", "ConfigMap"),
        ("apps.kruise.io/v1alpha1", "CloneSet"),
        ("apps/v1", "ReplicaSet"),
    ] {
        assert!(!aggregates(api_version, kind));
        assert!(aggregate_status(api_version, kind, &json!({}), 1, None, &[], NOW).is_none());
    }
    assert!(aggregates("apps/v1", "Deployment") && aggregates("batch/v1", "Job"));
}
