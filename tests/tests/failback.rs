//! Failback (A11) on real processes and etcd, with the whole history checked.
//!
//! Deployment nginx (3 replicas, Divided + Aggregated: all on member1, whose capacity beats
//! member2's) under a policy with `failover.cluster.failback.stabilizationWindowSeconds: 2`.
//! member1 turns unhealthy: the taint manager evicts it and the scheduler refills member2.
//! member1 recovers: once it has been Ready and untainted for 2 s the scheduler moves the
//! replicas back to member1, and member2 keeps its copy through a graceful `Failback` task
//! until member1's is healthy. The same run without the field never moves back (SC-3.8).

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use flotilla_proto::v1;
use flotilla_tests::{
    EtcdServer, Stack, Timers, binding_healthy, create_nginx, divided_over_members, eventually,
    eviction_tasks, nginx_binding, nginx_policy, set_fault, targets, tasks, work_clusters,
};

const T: Duration = Duration::from_secs(45);

async fn run(failback: Option<i64>) {
    let (mut stack, recorder) =
        Stack::start_recorded(EtcdServer::start().await, Timers::fast()).await;
    let api = stack.ready_unequal_members(T).await;
    let placement = divided_over_members(v1::ReplicaDivisionPreference::Aggregated);
    let failover = v1::FailoverBehavior {
        cluster: Some(v1::ClusterFailoverBehavior {
            failback: failback.map(|s| v1::Failback {
                stabilization_window_seconds: s,
            }),
            ..Default::default()
        }),
        ..Default::default()
    };
    create_nginx(&api, nginx_policy(placement, Some(failover))).await;
    // `only`: and no Work elsewhere (a Work on an unhealthy member stays marked until it is
    // Ready again, WE-6.3)
    let on = |cluster: &'static str, only: bool| {
        let api = api.clone();
        async move {
            eventually(T, &format!("{{{cluster}:3}} healthy, no task"), || async {
                let b = nginx_binding(&api).await?;
                (targets(&b) == [(cluster.to_owned(), 3)]
                    && binding_healthy(&b)
                    && tasks(&b).is_empty()
                    && (!only || work_clusters(&api).await == [cluster]))
                .then_some(b)
            })
            .await
        }
    };
    on("member1", true).await;

    set_fault(&stack.members["member1"], v1::FaultMode::Unhealthy).await;
    let evicted = on("member2", false).await;
    let remembered = evicted
        .status
        .as_ref()
        .map(|s| s.failback_clusters.clone())
        .unwrap_or_default();
    set_fault(&stack.members["member1"], v1::FaultMode::Healthy).await;

    match failback {
        Some(_) => {
            assert_eq!(remembered, ["member1"], "the evicted cluster is remembered");
            // the move back goes through a graceful task on member2 …
            let moving = eventually(T, "a Failback task for member2", || async {
                let b = nginx_binding(&api).await?;
                eviction_tasks(&b)
                    .into_iter()
                    .find(|t| t.from_cluster == "member2" && t.reason == "Failback")
                    .map(|t| (b, t))
            })
            .await;
            assert_eq!(targets(&moving.0), [("member1".to_owned(), 3)]);
            assert_eq!(moving.1.producer, "Scheduler");
            // … and ends with everything back on member1
            on("member1", true).await;
        }
        None => {
            assert!(
                remembered.is_empty(),
                "nothing is remembered: {remembered:?}"
            );
            // member1 is back and untainted; give the scheduler time to (not) act
            eventually(T, "member1 untainted", || async {
                let c = flotilla_tests::get_cluster(&api, "member1").await?;
                flotilla_tests::taint_names(&c).is_empty().then_some(())
            })
            .await;
            tokio::time::sleep(Duration::from_secs(4)).await;
            let b = nginx_binding(&api).await.unwrap();
            assert_eq!(
                targets(&b),
                [("member2".to_owned(), 3)],
                "SC-3.8: no move back"
            );
        }
    }
    let scenario = if failback.is_some() {
        "failback"
    } else {
        "no failback"
    };
    stack
        .verdict_member1_flapped(recorder, scenario, true)
        .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a11_replicas_move_back_after_the_stabilisation_window_gracefully() {
    run(Some(2)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sc_3_8_without_failback_nothing_moves_back() {
    run(None).await;
}
