//! Table tests of [`assess`]: one case per rule path (CH-3, CH-4, CH-5, CH-9, CH-10, CH-11,
//! CH-12, CH-15, CH-17, A1, A2, A9).

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::type_complexity)]

use flotilla_core::types::{
    ClusterAffinity, MatchCondition, ObjectMeta, SelectorOperator, TAINT_NOT_READY,
    TAINT_TERMINATING, TAINT_UNREACHABLE, TaintSpec,
};

use super::*;
use ConditionStatus::{False, True, Unknown};

fn t(secs: i64) -> Time {
    Time::from_secs(secs)
}

/// A stored Ready condition as CH-3 would have written it (same reason and message).
fn ready(status: ConditionStatus, since: i64, reason: &str) -> Condition {
    let message = match reason {
        "ClusterReady" => "cluster is healthy and ready to accept workloads",
        "ClusterNotReady" => "cluster is reachable but health endpoint responded without ok",
        "ClusterNotReachable" => "cluster is not reachable",
        _ => "",
    };
    Condition {
        type_: CONDITION_READY.into(),
        status,
        reason: reason.into(),
        message: message.into(),
        last_transition_time: Some(t(since)),
    }
}

fn cluster(mode: SyncMode, ready: Option<Condition>, taints: Vec<Taint>) -> v1::Cluster {
    let mut c = Cluster::default();
    c.meta.name = "m1".into();
    c.meta.creation_timestamp = Some(t(0));
    c.spec.sync_mode = mode;
    c.spec.api_endpoint = "http://127.0.0.1:1".into();
    c.spec.taints = taints;
    c.status.conditions = ready.into_iter().collect();
    c.into()
}

fn taint(key: &str, effect: TaintEffect, added: i64) -> Taint {
    Taint::new(key, effect, Some(t(added)))
}

fn obs(online: bool, healthy: bool) -> Observation {
    Observation {
        outcome: ProbeOutcome { online, healthy },
        message: String::new(),
        collected: None,
    }
}

fn run(
    c: &v1::Cluster,
    o: Option<&Observation>,
    hb: Option<i64>,
    memory: Memory,
    now: i64,
    options: &Options,
) -> Decision {
    assess(Inputs {
        observation: o,
        last_heartbeat: hb.map(t),
        ..inputs(c, memory, t(now), options)
    })
    .unwrap()
}

/// One evaluation of `c` at `now`: no observation, heartbeat or policy, uninterrupted
/// observation.
fn inputs<'a>(c: &'a v1::Cluster, memory: Memory, now: Time, options: &'a Options) -> Inputs<'a> {
    Inputs {
        cluster: c,
        observation: None,
        last_heartbeat: None,
        ready_transition: None,
        memory,
        observing_since: flotilla_core::Time::EPOCH,
        policies: &[],
        options,
        now,
    }
}

fn keys(taints: &[Taint]) -> Vec<String> {
    taints
        .iter()
        .map(|t| format!("{}:{}", t.key, t.effect.as_str()))
        .collect()
}

fn mem(observed: ConditionStatus, since: Option<i64>) -> Memory {
    Memory {
        threshold: Some(ThresholdState {
            observed,
            since: since.map(t),
        }),
        monitor: None,
    }
}

const NR_NS: &str = "cluster.karmada.io/not-ready:NoSchedule";
const NR_NE: &str = "cluster.karmada.io/not-ready:NoExecute";
const UR_NS: &str = "cluster.karmada.io/unreachable:NoSchedule";
const UR_NE: &str = "cluster.karmada.io/unreachable:NoExecute";

#[test]
fn ch_3_healthy_probe_makes_ready_true_and_collects() {
    let o = Options::default();
    let c = cluster(SyncMode::Push, None, vec![]);
    let mut ob = obs(true, true);
    ob.collected = Some(v1::ClusterStatus {
        api_enablements: vec![v1::ApiEnablement {
            group_version: "apps/v1".into(),
            resources: vec![v1::ApiResource {
                name: "deployments".into(),
                kind: "Deployment".into(),
            }],
        }],
        kubernetes_version: "v1.31.0".into(),
        resource_summary: Some(v1::ResourceSummary {
            allocatable_replicas: Some(7),
            ..Default::default()
        }),
        conditions: vec![],
    });
    let d = run(&c, Some(&ob), None, Memory::default(), 10, &o);
    let r = d.ready.clone().unwrap();
    assert_eq!((r.status, r.reason.as_str()), (True, "ClusterReady"));
    assert_eq!(r.last_transition_time, Some(t(10)));
    assert!(d.collect && d.status_changed);
    assert_eq!(d.status.kubernetes_version, "v1.31.0");
    assert_eq!(
        d.status.resource_summary.unwrap().allocatable_replicas,
        Some(7)
    );
    let complete = d
        .status
        .conditions
        .iter()
        .find(|c| c.r#type == CONDITION_COMPLETE_API_ENABLEMENTS)
        .unwrap();
    assert_eq!(complete.reason, "Complete");
    assert!(d.taints.is_empty() && !d.taints_changed);
    assert_eq!(d.requeue_after, None, "Push: the prober drives it");
}

/// What a case expects: the Ready (status, reason), the taints and the requeue.
type Verdict = (
    ConditionStatus,
    &'static str,
    Vec<&'static str>,
    Option<Duration>,
);

/// Ready=True and untainted, looked at again after `requeue`.
fn stays_ready(requeue: Option<Duration>) -> Verdict {
    (True, "ClusterReady", vec![], requeue)
}

/// Ready=False for `reason` with the not-ready:NoSchedule taint (CH-11.1).
fn not_ready(reason: &'static str, requeue: Option<Duration>) -> Verdict {
    (False, reason, vec![NR_NS], requeue)
}

fn secs(s: u64) -> Option<Duration> {
    Some(Duration::from_secs(s))
}

/// Requeued right after the eviction timeout (5 min), for CH-10.
const AFTER_EVICTION_TIMEOUT: Option<Duration> = Some(Duration::from_millis(300_001));

fn check(name: &str, d: &Decision, (status, reason, taints, requeue): Verdict) {
    let r = d.ready.clone().unwrap();
    assert_eq!((r.status, r.reason.as_str()), (status, reason), "{name}");
    assert_eq!(keys(&d.taints), taints, "{name}");
    assert_eq!(d.requeue_after, requeue, "{name}");
    assert!(!d.reasons.is_empty(), "{name}: reasons");
}

#[test]
fn ch_4_threshold_table() {
    let o = Options::default();
    let ready_true = cluster(SyncMode::Push, Some(ready(True, 0, "ClusterReady")), vec![]);
    let no_ready = cluster(SyncMode::Push, None, vec![]);
    let ready_false = cluster(
        SyncMode::Push,
        Some(ready(False, 0, "ClusterNotReachable")),
        vec![taint(TAINT_NOT_READY, TaintEffect::NoSchedule, 0)],
    );
    let failing = obs(false, false);
    // a failing probe at 100, nothing remembered yet: (name, cluster, want)
    for (name, c, want) in [
        (
            "first sight of a Ready cluster is damped too (memory seeded from the stored \
             condition: a new leader lets no blip through, I9)",
            &ready_true,
            stays_ready(secs(30)),
        ),
        (
            "CH-4.2 no Ready condition yet: the observation passes, unreachable → False \
             ClusterNotReachable (CH-3.1)",
            &no_ready,
            not_ready("ClusterNotReachable", AFTER_EVICTION_TIMEOUT),
        ),
    ] {
        check(
            name,
            &run(c, Some(&failing), None, Memory::default(), 100, &o),
            want,
        );
    }
    // a Ready cluster and what its memory says: (name, observation, memory, now, want)
    for (name, ob, memory, now, want) in [
        (
            "CH-4.3 a failure starts the window: Ready stays True (I9)",
            obs(false, false),
            mem(True, None),
            100,
            stays_ready(secs(30)),
        ),
        (
            "CH-4.5 inside the window",
            obs(false, false),
            mem(False, Some(100)),
            129,
            stays_ready(secs(1)),
        ),
        (
            "CH-4.6 at the threshold the failure wins: not-ready:NoSchedule (CH-11.1)",
            obs(false, false),
            mem(False, Some(100)),
            130,
            not_ready("ClusterNotReachable", AFTER_EVICTION_TIMEOUT),
        ),
        (
            "CH-3.2 reachable but not ok → ClusterNotReady",
            obs(true, false),
            mem(False, Some(100)),
            130,
            not_ready("ClusterNotReady", AFTER_EVICTION_TIMEOUT),
        ),
    ] {
        check(
            name,
            &run(&ready_true, Some(&ob), None, memory, now, &o),
            want,
        );
    }
    // a healthy probe of a cluster stored not Ready: (name, memory, now, want)
    let healthy = obs(true, true);
    for (name, memory, now, want) in [
        (
            "recovery is damped by the success threshold",
            mem(False, Some(0)),
            200,
            not_ready("ClusterNotReachable", secs(30)),
        ),
        (
            "recovery after the success threshold removes the taint (CH-11.3)",
            mem(True, Some(200)),
            230,
            stays_ready(None),
        ),
    ] {
        check(
            name,
            &run(&ready_false, Some(&healthy), None, memory, now, &o),
            want,
        );
    }
}

#[test]
fn ch_4_a_blip_shorter_than_the_threshold_never_taints() {
    // I9: fail at 0, recover at 20, fail at 25, recover at 40: Ready stays True throughout.
    let o = Options::default();
    let c = cluster(SyncMode::Push, Some(ready(True, 0, "ClusterReady")), vec![]);
    let mut memory = mem(True, None);
    for (now, ok) in [(0, false), (10, false), (20, true), (25, false), (40, true)] {
        let d = run(&c, Some(&obs(ok, ok)), None, memory, now, &o);
        assert_eq!(d.ready.unwrap().status, True, "at {now}");
        assert!(!d.taints_changed && !d.status_changed, "at {now}");
        memory = d.memory;
    }
}

#[test]
fn ch_5_5_condition_written_only_on_change() {
    let o = Options::default();
    let c = cluster(SyncMode::Push, Some(ready(True, 5, "ClusterReady")), vec![]);
    let d = run(&c, Some(&obs(true, true)), None, mem(True, None), 50, &o);
    assert!(!d.status_changed);
    assert_eq!(d.ready.unwrap().last_transition_time, Some(t(5)));
}

#[test]
fn ch_10_no_execute_after_the_eviction_timeout_in_auto_mode_only() {
    let auto = Options::default();
    let policy = Options {
        no_execute: NoExecuteTaints::Policy,
        ..Options::default()
    };
    let c = cluster(
        SyncMode::Push,
        Some(ready(False, 0, "ClusterNotReachable")),
        vec![taint(TAINT_NOT_READY, TaintEffect::NoSchedule, 0)],
    );
    let failing = obs(false, false);
    let d = run(&c, Some(&failing), None, mem(False, Some(0)), 300, &auto);
    assert!(!d.taints_changed, "exactly at the timeout: not yet");
    assert_eq!(d.requeue_after, Some(Duration::from_millis(1)));
    let d = run(&c, Some(&failing), None, mem(False, Some(0)), 301, &auto);
    assert_eq!(keys(&d.taints), vec![NR_NS, NR_NE]);
    assert_eq!(keys(&d.added), vec![NR_NE]);
    assert_eq!(d.added[0].time_added, Some(t(301)));
    assert_eq!(d.requeue_after, None);
    let d = run(&c, Some(&failing), None, mem(False, Some(0)), 301, &policy);
    assert!(
        !d.taints_changed,
        "policy mode: no automatic NoExecute (A1)"
    );
    assert_eq!(d.requeue_after, None);

    // CH-10.3: Ready again removes both NoExecute taints, in auto mode
    let healthy = obs(true, true);
    let c = cluster(
        SyncMode::Push,
        Some(ready(True, 400, "ClusterReady")),
        vec![
            taint("user/key", TaintEffect::NoSchedule, 0),
            taint(TAINT_NOT_READY, TaintEffect::NoExecute, 301),
            taint(TAINT_UNREACHABLE, TaintEffect::NoExecute, 301),
        ],
    );
    let d = run(&c, Some(&healthy), None, mem(True, Some(0)), 500, &auto);
    assert_eq!(keys(&d.taints), vec!["user/key:NoSchedule"]);
    assert_eq!(keys(&d.removed), vec![NR_NE, UR_NE]);
    // ... but in policy mode they are the policies' and operators' business
    let d = run(&c, Some(&healthy), None, mem(True, Some(0)), 500, &policy);
    assert!(!d.taints_changed);
}

#[test]
fn ch_12_identity_ignores_the_value() {
    let o = Options::default();
    let mut existing = taint(TAINT_NOT_READY, TaintEffect::NoSchedule, 1);
    existing.value = "x".into();
    let c = cluster(
        SyncMode::Push,
        Some(ready(False, 0, "ClusterNotReady")),
        vec![existing],
    );
    let d = run(
        &c,
        Some(&obs(true, false)),
        None,
        mem(False, Some(0)),
        10,
        &o,
    );
    assert!(!d.taints_changed && d.added.is_empty());
}

#[test]
fn ch_11_4_no_ready_condition_means_not_ready() {
    let o = Options::default();
    let c = cluster(SyncMode::Push, None, vec![]);
    let d = run(&c, None, None, Memory::default(), 10, &o);
    assert_eq!(keys(&d.taints), vec![NR_NS]);
    assert_eq!(d.ready, None);
    assert!(!d.status_changed);
}

#[test]
fn ch_9_pull_heartbeats_stop_then_unknown_then_unreachable_no_execute() {
    let o = Options::default();
    let c = cluster(SyncMode::Pull, Some(ready(True, 0, "ClusterReady")), vec![]);
    let healthy = obs(true, true);
    // heartbeat at 100, looked at 110: fine; next look due at 100 + 40s grace
    let d = run(&c, Some(&healthy), Some(100), mem(True, None), 110, &o);
    assert!(!d.status_changed);
    assert_eq!(
        d.requeue_after,
        Some(Duration::from_millis(30_001)),
        "CH-8: at the grace deadline, not every monitor period"
    );
    let entry = d.memory.monitor.clone().unwrap();
    assert_eq!(entry.probe_timestamp, t(100), "seeded from the heartbeat");

    // 140: exactly at the grace: not yet
    let d = run(&c, Some(&healthy), Some(100), d.memory, 140, &o);
    assert!(!d.status_changed);
    assert_eq!(d.requeue_after, Some(Duration::from_millis(1)));
    // 140.001: the heartbeat's probe is stale, the monitor marks Unknown (CH-9.5)
    let d = assess(Inputs {
        observation: Some(&healthy),
        last_heartbeat: Some(t(100)),
        ..inputs(&c, d.memory, Time::from_millis(140_001), &o)
    })
    .unwrap();
    let r = d.ready.clone().unwrap();
    assert_eq!(
        (r.status, r.reason.as_str()),
        (Unknown, "ClusterStatusUnknown")
    );
    assert!(d.status_changed);
    assert_eq!(keys(&d.taints), vec![UR_NS], "CH-11.2");
    assert_eq!(
        d.memory.threshold,
        Some(ThresholdState {
            observed: Unknown,
            since: Some(Time::from_millis(140_001))
        }),
        "A9: silence restarts the success window"
    );
    // NoExecute 5m after the last heartbeat (CH-10.2); the CH-8 safety net comes first
    assert_eq!(d.requeue_after, Some(Duration::from_secs(40)));

    // stored Unknown; at 100 + 300 + 0.001 the unreachable NoExecute taint is added
    let mut stored: Cluster = c.clone().try_into().unwrap();
    stored.status.conditions = vec![r];
    stored.spec.taints = d.taints.clone();
    let stored: v1::Cluster = stored.into();
    let at = |now| {
        run(
            &stored,
            Some(&healthy),
            Some(100),
            d.memory.clone(),
            now,
            &o,
        )
    };
    let d2 = at(400);
    assert!(!d2.taints_changed, "at last heartbeat + timeout: not yet");
    let d2 = at(401);
    assert_eq!(keys(&d2.taints), vec![UR_NS, UR_NE]);

    // the agent comes back healthy at 402: damped by the success threshold (A9)
    let d3 = run(&stored, Some(&healthy), Some(402), d.memory, 402, &o);
    assert_eq!(d3.ready.unwrap().status, Unknown);
    assert!(d3.reasons.iter().any(|r| r.starts_with("CH-4")));
}

#[test]
fn ch_9_pull_cluster_that_never_posted_goes_unknown_after_the_startup_grace() {
    let o = Options::default();
    let c = cluster(SyncMode::Pull, None, vec![]);
    let d = run(&c, None, None, Memory::default(), 60, &o);
    assert!(!d.status_changed);
    assert_eq!(keys(&d.taints), vec![NR_NS], "CH-11.4");
    let d = run(&c, None, None, d.memory, 61, &o);
    let r = d.ready.unwrap();
    assert_eq!(
        (r.status, r.reason.as_str()),
        (Unknown, "ClusterStatusNeverUpdated")
    );
    assert_eq!(keys(&d.taints), vec![UR_NS]);
}

#[test]
fn ch_9_3_push_clusters_are_never_marked_unknown() {
    let o = Options::default();
    let c = cluster(SyncMode::Push, Some(ready(True, 0, "ClusterReady")), vec![]);
    let d = run(&c, None, None, Memory::default(), 10_000, &o);
    assert!(!d.status_changed && !d.taints_changed);
}

#[test]
fn a2_ch_15_terminating_taint_while_deleting() {
    let o = Options::default();
    let mut c = cluster(SyncMode::Push, Some(ready(True, 0, "ClusterReady")), vec![]);
    c.metadata.as_mut().unwrap().deletion_timestamp = Some(prost_types::Timestamp {
        seconds: 5,
        nanos: 0,
    });
    let d = run(&c, Some(&obs(true, true)), None, mem(True, None), 10, &o);
    assert_eq!(
        keys(&d.taints),
        vec![format!("{TAINT_TERMINATING}:NoExecute")]
    );
}

fn policy(name: &str, key: &str) -> ClusterTaintPolicy {
    let ready_in = |values: Vec<ConditionStatus>| MatchCondition {
        condition_type: CONDITION_READY.into(),
        operator: SelectorOperator::In,
        status_values: values,
    };
    ClusterTaintPolicy {
        meta: ObjectMeta {
            name: name.into(),
            creation_timestamp: Some(t(0)),
            ..Default::default()
        },
        target_clusters: None,
        add_on_conditions: vec![ready_in(vec![False, Unknown])],
        remove_on_conditions: vec![ready_in(vec![True])],
        taints: vec![TaintSpec {
            key: key.into(),
            value: String::new(),
            effect: TaintEffect::NoExecute,
        }],
    }
}

#[test]
fn ch_17_taint_policies_add_and_remove_on_the_new_condition() {
    let o = Options {
        no_execute: NoExecuteTaints::Policy,
        ..Options::default()
    };
    let policies = [policy("p", "example.com/down")];
    let c = cluster(SyncMode::Push, Some(ready(True, 0, "ClusterReady")), vec![]);
    // the failure passes the threshold in this very evaluation: the policy sees False
    let d = assess(Inputs {
        observation: Some(&obs(false, false)),
        policies: &policies,
        ..inputs(&c, mem(False, Some(0)), t(30), &o)
    })
    .unwrap();
    assert_eq!(keys(&d.taints), vec![NR_NS, "example.com/down:NoExecute"]);
    // recovered: the policy removes its taint, CH-11 removes not-ready
    let mut down: Cluster = c.clone().try_into().unwrap();
    down.status.conditions = vec![ready(False, 30, "ClusterNotReachable")];
    down.spec.taints = d.taints;
    let down: v1::Cluster = down.into();
    let d = assess(Inputs {
        observation: Some(&obs(true, true)),
        policies: &policies,
        ..inputs(&down, mem(True, Some(30)), t(60), &o)
    })
    .unwrap();
    assert!(d.taints.is_empty(), "{:?}", d.taints);
    assert_eq!(d.removed.len(), 2);
    // a policy that targets another cluster is skipped
    let mut other = policy("q", "example.com/other");
    other.target_clusters = Some(ClusterAffinity {
        cluster_names: vec!["m2".into()],
        ..Default::default()
    });
    let d = assess(Inputs {
        policies: &[other],
        ..inputs(&down, Memory::default(), t(60), &o)
    })
    .unwrap();
    assert!(!d.taints_changed);
}

#[test]
fn bad_stored_cluster_is_a_conversion_error_naming_the_field() {
    let o = Options::default();
    let mut c = cluster(SyncMode::Push, None, vec![]);
    c.spec.as_mut().unwrap().sync_mode = 0;
    let err = assess(inputs(&c, Memory::default(), t(1), &o)).unwrap_err();
    assert_eq!(err.field, "spec.syncMode");
}
