//! No replacement fits (A6, F8, Karmada #7455): the policy's clusterAffinity names only
//! member1 (member2 is healthy but not allowed). member1 stops answering → NoExecute →
//! eviction: member1 leaves `spec.clusters` for an eviction task, and the scheduler finds no
//! cluster (`Scheduled=False NoClusterFit`, empty result, SC-4.3). Graceful eviction keeps
//! the task — an empty placement is never healthy — and says so with `ReplacementPending=True`
//! (reason `NoReplacementFits`); member1's Work is never deleted, well past the
//! graceful-eviction timeout (2 s here).

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::{Duration, Instant};

use flotilla_proto::v1;
use flotilla_tests::{
    Stack, Timers, binding_condition, cluster_names, create_nginx, eventually, nginx_binding,
    nginx_policy, record_works, set_fault, targets, tasks, wait_nginx_healthy, work_cluster,
    work_clusters,
};

const T: Duration = Duration::from_secs(30);
const GRACE: Duration = Duration::from_secs(2);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_replacement_keeps_task_and_work() {
    let timers = Timers::fast().set("graceful-eviction", "graceful-eviction-timeout", "2s");
    let (stack, api) = Stack::with_two_members(timers, T).await;
    let placement = v1::Placement {
        cluster_affinity: Some(cluster_names(&["member1"])),
        replica_scheduling: Some(v1::ReplicaSchedulingStrategy {
            replica_scheduling_type: v1::ReplicaSchedulingType::Divided as i32,
            replica_division_preference: v1::ReplicaDivisionPreference::Weighted as i32,
            ..Default::default()
        }),
        ..Default::default()
    };
    create_nginx(&api, nginx_policy(placement, None)).await;
    wait_nginx_healthy(&api, T, &[("member1", 3)]).await;
    assert_eq!(work_clusters(&api).await, ["member1"]);
    let works = record_works(&api).await;

    set_fault(&stack.members["member1"], v1::FaultMode::Unreachable).await;

    // Evicted, nothing fits, the task is kept and the binding says why.
    // (graceful eviction and the scheduler react to the eviction independently: wait for both)
    let b = eventually(
        T,
        "member1 evicted, ReplacementPending=True, Scheduled=False",
        || async {
            let b = nginx_binding(&api).await?;
            let pending = binding_condition(&b, "ReplacementPending")?;
            let scheduled = binding_condition(&b, "Scheduled")?;
            (tasks(&b) == ["member1"]
                && targets(&b).is_empty()
                && pending.status == v1::ConditionStatus::True as i32
                && scheduled.status == v1::ConditionStatus::False as i32)
                .then_some(b)
        },
    )
    .await;
    let evicted_at = Instant::now();
    let pending = binding_condition(&b, "ReplacementPending").unwrap();
    assert_eq!(pending.reason, "NoReplacementFits");
    assert!(
        pending.message.contains("member1"),
        "the message names the cluster still serving: {:?}",
        pending.message
    );
    let scheduled = binding_condition(&b, "Scheduled").expect("Scheduled condition");
    assert_eq!(scheduled.status, v1::ConditionStatus::False as i32);
    assert_eq!(scheduled.reason, "NoClusterFit");
    let task = &b.spec.as_ref().unwrap().graceful_eviction_tasks[0];
    assert_eq!(task.reason, "TaintUntolerated");
    assert_eq!(task.producer, "TaintManager");
    assert!(
        task.creation_timestamp.is_some(),
        "graceful eviction stamped the task"
    );

    // Well past the grace period (2 s) — 3 × the timeout — the task, the condition and
    // member1's Work all stay.
    let until = evicted_at + 3 * GRACE + Duration::from_secs(1);
    while Instant::now() < until {
        let b = nginx_binding(&api).await.unwrap();
        assert_eq!(tasks(&b), ["member1"], "the eviction task was dropped");
        assert!(targets(&b).is_empty(), "a replacement appeared: {b:?}");
        assert_eq!(
            binding_condition(&b, "ReplacementPending").map(|c| c.status),
            Some(v1::ConditionStatus::True as i32)
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let deleted: Vec<_> = works
        .seen()
        .into_iter()
        .filter(|s| {
            work_cluster(&s.object) == "member1"
                && (s.kind == v1::WatchEventType::Deleted
                    || s.object
                        .metadata
                        .as_ref()
                        .is_some_and(|m| m.deletion_timestamp.is_some()))
        })
        .map(|s| (s.kind, s.revision))
        .collect();
    assert!(
        deleted.is_empty(),
        "member1's Work was deleted or marked for deletion: {deleted:?}"
    );
    assert_eq!(work_clusters(&api).await, ["member1"]);
    // The member still runs its replicas.
    let m1 = flotilla_tests::member_status(&stack.members["member1"]).await;
    assert_eq!(m1.replicas, 3);
}
