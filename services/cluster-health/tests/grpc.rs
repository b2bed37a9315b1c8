//! `flotilla.v1.ClusterHealth` over a real socket: Heartbeat validation and recording,
//! Assess table cases (the same rules as the controller), bad input → INVALID_ARGUMENT with
//! the field.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::sync::Arc;
use std::time::Duration;

use crate::support::*;
use flotilla_cluster_health::NoExecuteTaints;
use flotilla_core::Time;
use flotilla_proto::convert::time_to_timestamp;
use flotilla_proto::v1;
use flotilla_proto::v1::cluster_health_client::ClusterHealthClient;
use flotilla_runtime::testing::bindings::taint_policy_on_not_ready;
use flotilla_store::{MemStore, StoreRef};
use tonic::Code;
use tonic::transport::Channel;
use tonic_types::StatusExt;

async fn setup() -> (StoreRef, Health, ClusterHealthClient<Channel>) {
    let store: StoreRef = Arc::new(MemStore::new());
    let h = Health::with_mode(store.clone(), NoExecuteTaints::Auto);
    let addr = h.serve_grpc().await;
    let client = ClusterHealthClient::connect(format!("http://{addr}"))
        .await
        .unwrap();
    (store, h, client)
}

fn heartbeat(name: &str) -> v1::HeartbeatRequest {
    v1::HeartbeatRequest {
        cluster_name: name.into(),
        cluster_uid: String::new(),
        probe: Some(v1::ProbeResult {
            online: true,
            healthy: true,
            message: "ok".into(),
        }),
        status: Some(v1::ClusterStatus {
            conditions: vec![v1::Condition {
                r#type: "Ready".into(),
                status: v1::ConditionStatus::False as i32,
                ..Default::default()
            }],
            kubernetes_version: "v1.31.0".into(),
            ..Default::default()
        }),
        sent_at: None,
    }
}

/// The field paths of the BadRequest violations of an INVALID_ARGUMENT status.
fn violations(status: &tonic::Status) -> Vec<String> {
    assert_eq!(status.code(), Code::InvalidArgument, "{status:?}");
    status
        .get_details_bad_request()
        .map(|b| b.field_violations.into_iter().map(|v| v.field).collect())
        .unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn heartbeat_is_validated_and_recorded() {
    let (store, h, mut client) = setup().await;
    let pull = create(&store, cluster("p1", v1::SyncMode::Pull, "")).await;
    create(
        &store,
        cluster("m1", v1::SyncMode::Push, "http://127.0.0.1:1"),
    )
    .await;

    let mut no_name = heartbeat("p1");
    no_name.cluster_name.clear();
    let err = client.heartbeat(no_name).await.unwrap_err();
    assert_eq!(violations(&err), vec!["clusterName"]);
    let mut no_probe = heartbeat("p1");
    no_probe.probe = None;
    let err = client.heartbeat(no_probe).await.unwrap_err();
    assert_eq!(violations(&err), vec!["probe"]);
    let mut bad_time = heartbeat("p1");
    bad_time.sent_at = Some(prost_types::Timestamp {
        seconds: 0,
        nanos: -1,
    });
    let err = client.heartbeat(bad_time).await.unwrap_err();
    assert_eq!(violations(&err), vec!["sentAt"]);

    let err = client.heartbeat(heartbeat("nope")).await.unwrap_err();
    assert_eq!(err.code(), Code::NotFound);
    let err = client.heartbeat(heartbeat("m1")).await.unwrap_err();
    assert_eq!(
        err.code(),
        Code::FailedPrecondition,
        "a Push cluster is probed"
    );
    let mut stale_uid = heartbeat("p1");
    stale_uid.cluster_uid = "not-the-uid".into();
    let err = client.heartbeat(stale_uid).await.unwrap_err();
    assert_eq!(err.code(), Code::FailedPrecondition, "re-created cluster");
    let mut impostor = tonic::Request::new(heartbeat("p1"));
    impostor
        .metadata_mut()
        .insert("x-flotilla-cluster", "m1".parse().unwrap());
    let err = client.heartbeat(impostor).await.unwrap_err();
    assert_eq!(err.code(), Code::PermissionDenied);
    assert!(
        store.get("heartbeats/p1").await.unwrap().is_none(),
        "nothing recorded by rejected heartbeats"
    );

    let mut ok = tonic::Request::new(heartbeat("p1"));
    ok.get_mut().cluster_uid = pull.metadata.clone().unwrap().uid;
    ok.metadata_mut()
        .insert("x-flotilla-cluster", "p1".parse().unwrap());
    let before = flotilla_runtime::now();
    let resp = client.heartbeat(ok).await.unwrap().into_inner();
    assert_eq!(resp.lease_duration.unwrap().nanos, 600_000_000);
    assert_eq!(resp.renew_interval.unwrap().nanos, 150_000_000);
    let kv = store.get("heartbeats/p1").await.unwrap().unwrap();
    let record = flotilla_cluster_health::heartbeat::decode(&kv).unwrap();
    assert!(flotilla_cluster_health::heartbeat::renew_time(&record).unwrap() >= before);
    assert_eq!(record.cluster_uid, pull.metadata.unwrap().uid);
    let status = record.status.unwrap();
    assert!(
        status.conditions.is_empty(),
        "the agent's conditions are ignored"
    );
    assert_eq!(status.kubernetes_version, "v1.31.0");
    // ... and the controller derives Ready from it
    until_ready_is(
        &store,
        "p1",
        "Ready from the heartbeat",
        v1::ConditionStatus::True,
    )
    .await;
    h.stop().await;
}

fn stored(mode: v1::SyncMode, ready: Option<(v1::ConditionStatus, &str, i64)>) -> v1::Cluster {
    let mut c = cluster("m1", mode, "http://127.0.0.1:1");
    c.metadata.as_mut().unwrap().creation_timestamp = Some(time_to_timestamp(Time::EPOCH));
    c.status = Some(v1::ClusterStatus {
        conditions: ready
            .into_iter()
            .map(|(status, reason, since)| v1::Condition {
                r#type: "Ready".into(),
                status: status as i32,
                reason: reason.into(),
                message: String::new(),
                last_transition_time: Some(time_to_timestamp(Time::from_secs(since))),
            })
            .collect(),
        ..Default::default()
    });
    c
}

fn secs(s: i64) -> Option<prost_types::Duration> {
    Some(prost_types::Duration {
        seconds: s,
        nanos: 0,
    })
}

/// Karmada's defaults, explicitly (the service runs with compressed ones).
fn karmada_defaults() -> v1::ClusterHealthOptions {
    v1::ClusterHealthOptions {
        success_threshold: secs(30),
        failure_threshold: secs(30),
        monitor_grace_period: secs(40),
        startup_grace_period: secs(60),
        failover_eviction_timeout: secs(300),
        no_execute_taints: v1::NoExecuteTaintMode::Auto as i32,
        monitor_period: secs(5),
    }
}

fn at(s: i64) -> Option<prost_types::Timestamp> {
    Some(time_to_timestamp(Time::from_secs(s)))
}

fn probe(online: bool, healthy: bool) -> Option<v1::ProbeResult> {
    Some(v1::ProbeResult {
        online,
        healthy,
        message: String::new(),
    })
}

fn threshold(status: v1::ConditionStatus, since: Option<i64>) -> Option<v1::ThresholdState> {
    Some(v1::ThresholdState {
        ready_status: status as i32,
        threshold_start: since.and_then(at),
    })
}

fn taint_keys(taints: &[v1::Taint]) -> Vec<String> {
    taints
        .iter()
        .map(|t| {
            let e = v1::TaintEffect::try_from(t.effect).unwrap().as_str_name();
            format!("{}:{e}", t.key)
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn assess_table() {
    use v1::ConditionStatus::{False, True, Unknown};
    let (_store, h, mut client) = setup().await;
    struct Case {
        name: &'static str,
        req: v1::ClusterHealthAssessRequest,
        ready: (v1::ConditionStatus, &'static str),
        added: Vec<&'static str>,
        removed: Vec<&'static str>,
        requeue_ms: Option<i64>,
        reason_prefix: &'static str,
    }
    let base = |cluster: v1::Cluster| v1::ClusterHealthAssessRequest {
        cluster: Some(cluster),
        options: Some(karmada_defaults()),
        now: at(100),
        ..Default::default()
    };
    // a Ready Push cluster's probe at 100, given the threshold memory
    let push_ready = |probe, threshold| v1::ClusterHealthAssessRequest {
        probe,
        threshold,
        ..base(stored(v1::SyncMode::Push, Some((True, "ClusterReady", 0))))
    };
    let cases = vec![
        Case {
            name: "CH-4.3: a failure while Ready is damped; requeue when the window ends",
            req: push_ready(probe(false, false), threshold(True, None)),
            ready: (True, "ClusterReady"),
            added: vec![],
            removed: vec![],
            requeue_ms: Some(30_000),
            reason_prefix: "CH-4",
        },
        Case {
            name: "CH-4.6 + CH-3.1 + CH-11.1: after the failure threshold",
            req: push_ready(probe(false, false), threshold(False, Some(70))),
            ready: (False, "ClusterNotReachable"),
            added: vec!["cluster.karmada.io/not-ready:TAINT_EFFECT_NO_SCHEDULE"],
            removed: vec![],
            requeue_ms: Some(300_001),
            reason_prefix: "CH-3",
        },
        Case {
            name: "CH-10.1: False for longer than the eviction timeout → NoExecute",
            req: v1::ClusterHealthAssessRequest {
                probe: probe(true, false),
                threshold: threshold(False, Some(0)),
                now: at(400),
                ..base(stored(
                    v1::SyncMode::Push,
                    Some((False, "ClusterNotReady", 0)),
                ))
            },
            ready: (False, "ClusterNotReady"),
            added: vec![
                "cluster.karmada.io/not-ready:TAINT_EFFECT_NO_SCHEDULE",
                "cluster.karmada.io/not-ready:TAINT_EFFECT_NO_EXECUTE",
            ],
            removed: vec![],
            requeue_ms: None,
            reason_prefix: "CH-3",
        },
        Case {
            name: "CH-9.5: a Pull cluster silent for longer than the grace → Unknown",
            req: v1::ClusterHealthAssessRequest {
                last_heartbeat_time: at(59),
                ..base(stored(v1::SyncMode::Pull, Some((True, "ClusterReady", 0))))
            },
            ready: (Unknown, "ClusterStatusUnknown"),
            added: vec!["cluster.karmada.io/unreachable:TAINT_EFFECT_NO_SCHEDULE"],
            removed: vec![],
            // CH-10.2 is due at 59 + 300 s; the CH-8 safety net (the grace period) comes first
            requeue_ms: Some(40_000),
            reason_prefix: "CH-9",
        },
        Case {
            name: "CH-9: within the grace nothing changes; look again when the grace ends (CH-8)",
            req: v1::ClusterHealthAssessRequest {
                last_heartbeat_time: at(90),
                probe: probe(true, true),
                threshold: threshold(True, None),
                ..base(stored(v1::SyncMode::Pull, Some((True, "ClusterReady", 0))))
            },
            ready: (True, "ClusterReady"),
            added: vec![],
            removed: vec![],
            requeue_ms: Some(30_001),
            reason_prefix: "CH-3",
        },
    ];
    for case in cases {
        let resp = client
            .assess(case.req.clone())
            .await
            .unwrap_or_else(|e| panic!("{}: {e}", case.name))
            .into_inner();
        let ready = resp.ready.clone().unwrap();
        assert_eq!(
            (
                v1::ConditionStatus::try_from(ready.status).unwrap(),
                ready.reason.as_str()
            ),
            case.ready,
            "{}",
            case.name
        );
        assert_eq!(taint_keys(&resp.added_taints), case.added, "{}", case.name);
        assert_eq!(
            taint_keys(&resp.removed_taints),
            case.removed,
            "{}",
            case.name
        );
        assert_eq!(
            resp.requeue_after
                .map(|d| d.seconds * 1000 + i64::from(d.nanos / 1_000_000)),
            case.requeue_ms,
            "{}",
            case.name
        );
        assert!(
            resp.reasons
                .iter()
                .any(|r| r.starts_with(case.reason_prefix)),
            "{}: {:?}",
            case.name,
            resp.reasons
        );
        assert_eq!(
            resp.taints_changed,
            !case.added.is_empty() || !case.removed.is_empty(),
            "{}",
            case.name
        );
    }
    h.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn assess_uses_the_given_taint_policies_and_the_service_options() {
    let (_store, h, mut client) = setup().await;
    // no options: the service's compressed ones (400ms failure threshold) apply
    let resp = client
        .assess(v1::ClusterHealthAssessRequest {
            cluster: Some(stored(
                v1::SyncMode::Push,
                Some((v1::ConditionStatus::True, "ClusterReady", 0)),
            )),
            probe: probe(false, false),
            threshold: Some(v1::ThresholdState {
                ready_status: v1::ConditionStatus::False as i32,
                threshold_start: Some(time_to_timestamp(Time::from_millis(99_600))),
            }),
            now: at(100),
            taint_policies: vec![taint_policy_on_not_ready(
                "p",
                "example.com/down",
                v1::TaintEffect::NoExecute,
            )],
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(
        taint_keys(&resp.taints),
        vec![
            "cluster.karmada.io/not-ready:TAINT_EFFECT_NO_SCHEDULE",
            "example.com/down:TAINT_EFFECT_NO_EXECUTE"
        ]
    );
    assert!(resp.status_changed);
    assert_eq!(
        resp.threshold.unwrap().ready_status,
        v1::ConditionStatus::False as i32
    );
    h.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn assess_bad_input_is_invalid_argument_naming_the_field() {
    let (_store, h, mut client) = setup().await;
    // a good request, then edited
    let good = |edit: &dyn Fn(&mut v1::ClusterHealthAssessRequest)| {
        let mut req = v1::ClusterHealthAssessRequest {
            cluster: Some(stored(v1::SyncMode::Push, None)),
            ..Default::default()
        };
        edit(&mut req);
        req
    };
    let mut no_mode = stored(v1::SyncMode::Push, None);
    no_mode.spec.as_mut().unwrap().sync_mode = 0;
    let negative = prost_types::Duration {
        seconds: -1,
        nanos: 0,
    };
    let bad_now = prost_types::Timestamp {
        seconds: 0,
        nanos: 2_000_000_000,
    };
    let no_effect = v1::ClusterTaintPolicy {
        metadata: None,
        spec: Some(v1::ClusterTaintPolicySpec {
            taints: vec![v1::TaintSpec {
                key: "k".into(),
                value: String::new(),
                effect: 0,
            }],
            ..Default::default()
        }),
    };
    let cases: Vec<(v1::ClusterHealthAssessRequest, &str)> = vec![
        (v1::ClusterHealthAssessRequest::default(), "cluster"),
        (
            v1::ClusterHealthAssessRequest {
                cluster: Some(no_mode),
                ..Default::default()
            },
            "cluster.spec.syncMode",
        ),
        (
            good(&|r| r.threshold = Some(v1::ThresholdState::default())),
            "threshold.readyStatus",
        ),
        (
            good(&|r| {
                r.options = Some(v1::ClusterHealthOptions {
                    success_threshold: Some(negative),
                    ..Default::default()
                });
            }),
            "options.successThreshold",
        ),
        (
            good(&|r| r.options.get_or_insert_default().no_execute_taints = 42),
            "options.noExecuteTaints",
        ),
        (good(&|r| r.now = Some(bad_now)), "now"),
        (
            good(&|r| r.taint_policies = vec![no_effect.clone()]),
            "taintPolicies[0].spec.taints[0].effect",
        ),
    ];
    for (req, field) in cases {
        let err = client.assess(req).await.unwrap_err();
        assert_eq!(violations(&err), vec![field], "{err:?}");
    }
    // a good request answers
    let resp = tokio::time::timeout(Duration::from_secs(5), client.assess(good(&|_| {})))
        .await
        .unwrap()
        .unwrap()
        .into_inner();
    assert_eq!(
        taint_keys(&resp.taints),
        vec!["cluster.karmada.io/not-ready:TAINT_EFFECT_NO_SCHEDULE"],
        "CH-11.4"
    );
    h.stop().await;
}
