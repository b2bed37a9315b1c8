//! Seed scenario, Duplicated: candidates member1, member2, member3 and member5, Duplicated,
//! one spread constraint {spreadByField: cluster, minGroups: 2, maxGroups: 2}.
//!
//! Expected placement from the rules: Duplicated ignores capacity (SC-10.2: needReplicas −1),
//! so the spread selection takes the first two clusters in SC-9 order (SC-11.3). On the first
//! schedule every score is 0 (SC-7: ClusterLocality is 0 while `spec.clusters` is empty) and
//! every member has the same allocatable replicas (capacity 100, nothing running), so the
//! order is by name → [member1, member2].
//!
//! member2 becomes unreachable → not-ready taints → eviction → reschedule (SC-3.5:
//! Duplicated always reschedules): member2 is out (untolerated NoSchedule taint, and it is
//! the `fromCluster` of an eviction task, SC-6.6); member1 scores 100 (ClusterLocality),
//! member3 and member5 score 0 with equal available replicas (100) → by name → member3.
//! The new result is [member1, member3], each with all 3 replicas (I2), and member1's Work
//! is never written (its resourceVersion and generation stay as they were).
//!
//! Real processes: etcd, the six control-plane services and four member-sims.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use flotilla_proto::v1;
use flotilla_tests::{
    Stack, Timers, api_client, binding_healthy, cluster_names, cluster_work, create_nginx,
    eventually, nginx_binding, nginx_policy, record_works, resource_version, set_fault,
    target_names, targeted, tasks, wait_clusters_ready, wait_nginx, wait_nginx_healthy,
    work_cluster, work_clusters,
};

const T: Duration = Duration::from_secs(30);
const MEMBERS: [&str; 4] = ["member1", "member2", "member3", "member5"];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn seed_duplicated_spread_failover_keeps_member1_untouched() {
    let mut stack = Stack::start(Timers::fast()).await;
    for name in MEMBERS {
        stack
            .start_member(name, &["--pod-startup-delay=200ms"])
            .await;
    }
    let api = api_client(&stack).await;
    stack.create_push_clusters(&api, &MEMBERS).await;
    wait_clusters_ready(&api, &MEMBERS, T).await;

    let placement = v1::Placement {
        cluster_affinity: Some(cluster_names(&MEMBERS)),
        spread_constraints: vec![v1::SpreadConstraint {
            spread_by_field: v1::SpreadField::Cluster as i32,
            min_groups: 2,
            max_groups: 2,
            ..Default::default()
        }],
        replica_scheduling: Some(v1::ReplicaSchedulingStrategy {
            replica_scheduling_type: v1::ReplicaSchedulingType::Duplicated as i32,
            ..Default::default()
        }),
        ..Default::default()
    };
    create_nginx(&api, nginx_policy(placement, None)).await;

    // [member1, member2] by name (all scores 0, equal capacity), 3 replicas each, all Ready.
    wait_nginx_healthy(&api, T, &[("member1", 3), ("member2", 3)]).await;
    assert_eq!(work_clusters(&api).await, ["member1", "member2"]);

    // member1's Work once its status settled (applied, 3/3 Ready): from here on nothing may
    // write it.
    let before = eventually(T, "member1's Work reports 3 Ready replicas", || async {
        let w = cluster_work(&api, "member1").await?;
        let s = w.status.as_ref()?;
        (s.applied && s.ready_replicas == 3 && s.health == v1::ResourceHealth::Healthy as i32)
            .then_some(w)
    })
    .await;
    let works = record_works(&api).await;

    set_fault(&stack.members["member2"], v1::FaultMode::Unreachable).await;

    // Eviction, then the refill: member1 stays, member3 (by name over member5) joins.
    let settled = |b: &v1::ResourceBinding| {
        targeted(b, &[("member1", 3), ("member3", 3)]) && tasks(b).is_empty() && binding_healthy(b)
    };
    wait_nginx(
        &api,
        T,
        "result [member1, member3] and member2's task gone",
        settled,
    )
    .await;
    let b = nginx_binding(&api).await.unwrap();
    assert_eq!(target_names(&b), ["member1", "member3"]);

    // member5 was never used; member2's Work waits for member2 to answer (finalizer).
    let clusters = work_clusters(&api).await;
    assert!(!clusters.contains(&"member5".to_string()), "{clusters:?}");
    assert!(clusters.contains(&"member3".to_string()), "{clusters:?}");

    // member1's Work was never touched: same resourceVersion and generation, and no watch
    // event for it since the fault.
    let after = cluster_work(&api, "member1").await.expect("member1's Work");
    assert_eq!(
        resource_version(after.metadata.as_ref()),
        resource_version(before.metadata.as_ref()),
        "member1's Work was written during member2's failover"
    );
    assert_eq!(
        after.metadata.as_ref().unwrap().generation,
        before.metadata.as_ref().unwrap().generation
    );
    let touched: Vec<_> = works
        .seen()
        .into_iter()
        .filter(|s| {
            work_cluster(&s.object) == "member1"
                && s.revision > resource_version(before.metadata.as_ref())
        })
        .map(|s| (s.kind, s.revision))
        .collect();
    assert!(touched.is_empty(), "member1's Work changed: {touched:?}");

    // The member itself still runs the 3 replicas it had.
    let m1 = flotilla_tests::member_status(&stack.members["member1"]).await;
    assert_eq!((m1.replicas, m1.ready_replicas), (3, 3));
}
