//! Application failover (GE-8) on the real services and members.
//!
//! (a) State preservation (TM-10, GE-8.6, WE-4.5): Divided + Aggregated puts all 3 replicas on
//!     member1 (allocatable 100 beats member2's 50), whose pods never become Ready, so the
//!     Deployment stays Unhealthy. After the application toleration (2 s) graceful eviction
//!     evicts member1 with purge mode Directly, its task preserves `{ .replicas }` of
//!     member1's collected status under `failover.flotilla.io/replicas`, and the new copy on
//!     member2 — the one cluster the application moves to, which did not run it before —
//!     carries that label on the member, as Karmada's `injectReservedLabelState` does. As in
//!     Karmada, the label belongs to the move: once the task ends (member2 healthy) the next
//!     render no longer injects it, so the test looks while member2's pods start (5 s).
//!
//! (b) No churn (SC-6.7): Duplicated over member1 and member2, member1 able to run only one
//!     of the three pods (Unhealthy), application toleration 2 s, Gracefully with an 8 s
//!     grace period. member1 is evicted; member2 already serves, so the task ends at once
//!     (GE-4.3). Before SC-6.7 the scheduler placed member1 back right then (Duplicated is
//!     always rescheduled) and application failover evicted it again, every 3-4 s, for ever.
//!     Checked on the binding's whole history for 12 s after the eviction: member1 is never
//!     a target again, its copy is deleted, and the binding remembers it.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use flotilla_proto::v1;
use flotilla_tests::{
    Stack, Timers, cluster_names, cluster_work, create_nginx, divided_over_members, eventually,
    eviction_tasks, member_kubectl, member_status, nginx_policy, record_bindings, scale_nginx,
    wait_nginx, work_clusters,
};

const T: Duration = Duration::from_secs(30);
const LABEL: &str = "failover.flotilla.io/replicas";

/// Application failover `app` with a 2 s toleration.
fn after_two_seconds(app: v1::ApplicationFailoverBehavior) -> v1::FailoverBehavior {
    v1::FailoverBehavior {
        application: Some(v1::ApplicationFailoverBehavior {
            decision_conditions: Some(v1::DecisionConditions {
                toleration_seconds: Some(2),
            }),
            ..app
        }),
        ..Default::default()
    }
}

/// Duplicated (the default) over member1 and member2.
fn on_both_members() -> v1::Placement {
    v1::Placement {
        cluster_affinity: Some(cluster_names(&["member1", "member2"])),
        ..Default::default()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tm_10_state_is_preserved_and_injected_into_the_new_copy() {
    let mut stack = Stack::start(Timers::fast()).await;
    // member1's pods never become Ready; member2's do
    stack
        .start_member("member1", &["--pod-startup-delay=1h", "--capacity=100"])
        .await;
    stack
        .start_member("member2", &["--pod-startup-delay=5s", "--capacity=50"])
        .await;
    let api = stack
        .register_push_members(&["member1", "member2"], T)
        .await;
    let failover = after_two_seconds(v1::ApplicationFailoverBehavior {
        purge_mode: v1::PurgeMode::Directly as i32,
        state_preservation: Some(v1::StatePreservation {
            rules: vec![v1::StatePreservationRule {
                alias_label_name: LABEL.into(),
                json_path: "{ .replicas }".into(),
            }],
        }),
        ..Default::default()
    });
    let placement = divided_over_members(v1::ReplicaDivisionPreference::Aggregated);
    let bindings = record_bindings(&api).await;
    create_nginx(&api, nginx_policy(placement, Some(failover))).await;
    let b = wait_nginx(&api, T, "member1 evicted, member2 the target", |b| {
        flotilla_tests::tasks(b) == ["member1"]
            && flotilla_tests::targets(b) == [("member2".into(), 3)]
    })
    .await;
    // (on the history: the first placement, too short-lived for a poll, was member1's)
    assert!(
        bindings
            .seen()
            .iter()
            .any(|s| flotilla_tests::targets(&s.object) == [("member1".into(), 3)]),
        "the replicas were never all on member1"
    );
    let m1 = member_status(&stack.members["member1"]).await;
    assert_eq!(m1.ready_replicas, 0, "member1's pods must never be Ready");
    let task = &eviction_tasks(&b)[0];
    assert_eq!(task.purge_mode, v1::PurgeMode::Directly as i32);
    assert_eq!(
        task.preserved_label_state.get(LABEL).map(String::as_str),
        Some("3"),
        "{task:?}"
    );
    assert_eq!(task.clusters_before_failover, ["member1"]);

    // member2's Work carries the preserved state as a label of its manifest from its
    // creation (the task lives until member2's pods are Ready, 5 s later)…
    let work = eventually(T, "member2's Work", || cluster_work(&api, "member2")).await;
    let manifest: serde_json::Value =
        serde_json::from_str(&work.spec.as_ref().unwrap().manifest).unwrap();
    assert_eq!(
        manifest["metadata"]["labels"][LABEL], "3",
        "member2's Work: {manifest}"
    );
    // …and so does the copy on the member itself
    let addr = stack.members["member2"].addr.clone();
    let label = eventually(T, "the Deployment on member2 with the label", || async {
        let (ok, out, _) = member_kubectl(
            &addr,
            &["get", "deploy", "nginx", "-n", "default", "-o", "json"],
        )
        .await;
        if !ok {
            return None;
        }
        let d: serde_json::Value = serde_json::from_str(&out).ok()?;
        d["metadata"]["labels"][LABEL].as_str().map(str::to_owned)
    })
    .await;
    assert_eq!(label, "3");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sc_6_7_an_application_failed_over_from_a_cluster_is_not_placed_back() {
    let mut stack = Stack::start(Timers::fast()).await;
    stack
        .start_member("member1", &["--pod-startup-delay=200ms", "--capacity=1"])
        .await;
    stack
        .start_member("member2", &["--pod-startup-delay=100ms"])
        .await;
    let api = stack
        .register_push_members(&["member1", "member2"], T)
        .await;
    let placement = on_both_members();
    let failover = after_two_seconds(v1::ApplicationFailoverBehavior {
        purge_mode: v1::PurgeMode::Gracefully as i32,
        grace_period_seconds: Some(8),
        ..Default::default()
    });
    let bindings = record_bindings(&api).await;
    create_nginx(&api, nginx_policy(placement, Some(failover))).await;
    // (on the history: the task may end before a poll could see it)
    let evicted_at = eventually(T, "member1 evicted", || async {
        bindings
            .seen()
            .iter()
            .find(|s| flotilla_tests::tasks(&s.object) == ["member1"])
            .map(|s| s.revision)
    })
    .await;
    tokio::time::sleep(Duration::from_secs(12)).await;
    let back: Vec<i64> = bindings
        .seen()
        .iter()
        .filter(|s| {
            s.revision > evicted_at
                && flotilla_tests::targets(&s.object)
                    .iter()
                    .any(|(c, _)| c == "member1")
        })
        .map(|s| s.revision)
        .collect();
    assert!(
        back.is_empty(),
        "member1 was placed back after application failover evicted it, at revisions {back:?}"
    );
    let evictions = bindings
        .seen()
        .windows(2)
        .filter(|w| {
            flotilla_tests::tasks(&w[0].object).is_empty()
                && flotilla_tests::tasks(&w[1].object) == ["member1"]
        })
        .count();
    assert_eq!(evictions, 1, "member1 was evicted more than once");
    let b = flotilla_tests::nginx_binding(&api).await.unwrap();
    assert_eq!(flotilla_tests::targets(&b), [("member2".into(), 3)]);
    assert_eq!(
        b.status.as_ref().unwrap().application_failover_clusters,
        ["member1"]
    );
    eventually(T, "member1's copy deleted", || async {
        (work_clusters(&api).await == ["member2"]).then_some(())
    })
    .await;
}

/// (c) Blindness is not the workload's fault (GE-8.7): Duplicated over member1 and member2,
///     pods starting in 1.5 s, application toleration 2 s. The Deployment is scaled from 3 to
///     5 replicas; once the binding says member1 is Unhealthy (3 of 5 Ready) the work
///     executor is SIGKILLed, and it stays down for 4 s while member1's new pods become
///     Ready. Its last written "Unhealthy" outlives the toleration, but nobody collected it
///     during the period, so graceful eviction must not evict: checked on the binding's
///     whole history, through the restart and until the status says Healthy again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ge_8_7_stale_unhealthy_status_evicts_nothing() {
    let mut stack = Stack::start(Timers::fast()).await;
    for member in ["member1", "member2"] {
        stack
            .start_member(member, &["--pod-startup-delay=1500ms"])
            .await;
    }
    let api = stack
        .register_push_members(&["member1", "member2"], T)
        .await;
    let placement = on_both_members();
    let failover = after_two_seconds(v1::ApplicationFailoverBehavior {
        purge_mode: v1::PurgeMode::Gracefully as i32,
        grace_period_seconds: Some(30),
        ..Default::default()
    });
    create_nginx(&api, nginx_policy(placement, Some(failover))).await;
    let health = |b: &v1::ResourceBinding, cluster: &str| {
        b.status.as_ref().and_then(|s| {
            s.aggregated_status
                .iter()
                .find(|i| i.cluster_name == cluster)
                .map(|i| i.health)
        })
    };
    let healthy = v1::ResourceHealth::Healthy as i32;
    wait_nginx(&api, T, "healthy on both members", |b| {
        health(b, "member1") == Some(healthy) && health(b, "member2") == Some(healthy)
    })
    .await;
    let bindings = record_bindings(&api).await;
    scale_nginx(&api, 3, 5).await;
    wait_nginx(&api, T, "member1 Unhealthy (scaling up)", |b| {
        health(b, "member1") == Some(v1::ResourceHealth::Unhealthy as i32)
    })
    .await;
    stack.kill_service("work-executor").await;
    tokio::time::sleep(Duration::from_secs(4)).await;
    stack.start_service("work-executor");
    wait_nginx(&api, T, "healthy on both members again", |b| {
        health(b, "member1") == Some(healthy) && health(b, "member2") == Some(healthy)
    })
    .await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    let evicted: Vec<i64> = bindings
        .seen()
        .iter()
        .filter(|s| !flotilla_tests::tasks(&s.object).is_empty())
        .map(|s| s.revision)
        .collect();
    assert!(
        evicted.is_empty(),
        "application failover evicted on a status nobody collected, at revisions {evicted:?}"
    );
}
