//! Purge modes (A4, TM-9, GE-4.1, GE-8.6, WE-2, WE-3.2, WE-3.5).
//!
//! (a) Directly (`failover.cluster.purgeMode: Directly`): Divided + Aggregated puts all 3
//!     replicas on member1 (allocatable 100 beats member2's 50, SC-17.5). member1 turns
//!     unhealthy (reachable, `/readyz` 500) → not-ready taints → eviction with a Directly
//!     task → member1's Work is marked for deletion at once (WE-2: a Directly task does not
//!     keep its cluster), and nothing is created or updated while it exists (WE-3.2) — so no
//!     Work for member2, although member2 is the new target. member1 is not Ready, so its
//!     manifest cannot be deleted yet (WE-6.3): the old Work hangs until member1 is Ready
//!     again; only then is it removed, and only after that is member2's Work created. The
//!     order is checked on a watch of the Works (DELETED member1 before ADDED member2).
//!
//! (b) Never (application failover only: `failover.application.purgeMode: Never`,
//!     `propagateDeps: true`): static weights member1:2, member2:1; member1 can run only one
//!     pod (`--capacity 1`), so its Deployment stays 1/2 Ready = Unhealthy. After the
//!     application toleration (3 s) graceful eviction evicts member1 with
//!     `suppressDeletion: true` (GE-8.6) and the scheduler refills member2:3; member1's Work
//!     is kept (neither deleted nor updated, WE-3.5) while the task is suppressed. The operator
//!     releases it as Karmada's guide says, by editing the binding's task to
//!     `suppressDeletion: false`: `flotilla get rb -o yaml`, the edit, `flotilla apply -f`
//!     (GE-9.1). The task is released (GE-4.1), member1's Work is deleted, and the release
//!     is recorded as an event.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::{Duration, Instant};

use flotilla_proto::v1;
use flotilla_tests::{
    Stack, Timers, binding_healthy, cluster_names, cluster_work, create_nginx,
    divided_over_members, eventually, eviction_tasks, member_status, nginx_binding, nginx_policy,
    record_bindings, record_works, resource_version, set_fault, targets, tasks, wait_nginx,
    wait_nginx_healthy, work_cluster, work_clusters, work_deleting,
};

const T: Duration = Duration::from_secs(30);

/// Waits until member1's Work is marked for deletion.
async fn member1_work_marked(api: &flotilla_tests::ApiClient) {
    eventually(T, "member1's Work marked for deletion", || async {
        cluster_work(api, "member1")
            .await
            .filter(work_deleting)
            .map(|_| ())
    })
    .await;
}

/// Waits until the binding targets {member2:3} and is healthy, and only member2's Work is
/// left (with `no_task`, and the eviction task is gone).
async fn member2_took_over(api: &flotilla_tests::ApiClient, no_task: bool) {
    eventually(
        T,
        "{member2:3} healthy, only member2's Work left",
        || async {
            let b = nginx_binding(api).await?;
            (targets(&b) == [("member2".into(), 3)]
                && binding_healthy(&b)
                && (!no_task || tasks(&b).is_empty())
                && work_clusters(api).await == ["member2"])
            .then_some(())
        },
    )
    .await;
}

/// Runs `check` (which asserts) every `every` for `period`.
async fn for_a_while<F, Fut>(period: Duration, every: Duration, mut check: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = ()>,
{
    let until = Instant::now() + period;
    while Instant::now() < until {
        check().await;
        tokio::time::sleep(every).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn directly_deletes_the_old_work_before_creating_the_new_one() {
    let mut stack = Stack::start(Timers::fast()).await;
    let api = stack.ready_unequal_members(T).await;
    let placement = divided_over_members(v1::ReplicaDivisionPreference::Aggregated);
    let failover = v1::FailoverBehavior {
        cluster: Some(v1::ClusterFailoverBehavior {
            purge_mode: v1::PurgeMode::Directly as i32,
            ..Default::default()
        }),
        ..Default::default()
    };
    create_nginx(&api, nginx_policy(placement, Some(failover))).await;
    wait_nginx_healthy(&api, T, &[("member1", 3)]).await;
    assert_eq!(work_clusters(&api).await, ["member1"]);
    let works = record_works(&api).await;

    // Reachable but not ok: Ready=False (ClusterNotReady) → not-ready taints → eviction.
    set_fault(&stack.members["member1"], v1::FaultMode::Unhealthy).await;
    let b = wait_nginx(
        &api,
        T,
        "a Directly task for member1, target member2",
        |b| tasks(b) == ["member1"] && targets(b) == [("member2".into(), 3)],
    )
    .await;
    let task = &eviction_tasks(&b)[0];
    assert_eq!(task.purge_mode, v1::PurgeMode::Directly as i32);
    assert_eq!(task.producer, "TaintManager");

    // The delete is requested at once: member1's Work is marked, while member1 is down.
    member1_work_marked(&api).await;
    // …and stays (its manifest cannot be deleted on a member that is not Ready), and meanwhile
    // no Work is created for member2.
    for_a_while(
        Duration::from_secs(2),
        Duration::from_millis(100),
        || async {
            assert_eq!(
                work_clusters(&api).await,
                ["member1"],
                "a Work was created (or member1's removed) while member1's Directly-purged Work \
             still existed"
            );
        },
    )
    .await;
    assert_eq!(
        member_status(&stack.members["member2"]).await.manifests,
        0,
        "member2 got the workload before member1's copy was deleted"
    );

    // member1 is Ready again → its manifest is deleted, its Work removed, then member2's
    // Work is created.
    set_fault(&stack.members["member1"], v1::FaultMode::Healthy).await;
    member2_took_over(&api, false).await;
    assert_eq!(member_status(&stack.members["member1"]).await.manifests, 0);

    let seen = works.seen();
    let first = |cluster: &str, kind: v1::WatchEventType| {
        seen.iter()
            .find(|s| work_cluster(&s.object) == cluster && s.kind == kind)
            .map(|s| s.revision)
            .unwrap_or_else(|| panic!("no {kind:?} for {cluster}'s Work in {seen:#?}"))
    };
    let marked = seen
        .iter()
        .find(|s| work_cluster(&s.object) == "member1" && work_deleting(&s.object))
        .map(|s| s.revision)
        .expect("member1's Work was marked for deletion");
    let deleted = first("member1", v1::WatchEventType::Deleted);
    let added = first("member2", v1::WatchEventType::Added);
    assert!(
        marked < deleted && deleted < added,
        "order: marked {marked}, deleted {deleted}, member2 added {added}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn never_keeps_the_old_work_until_released() {
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
    let weight = |cluster: &str, weight: i64| v1::StaticClusterWeight {
        target_cluster: Some(cluster_names(&[cluster])),
        weight,
    };
    let placement = v1::Placement {
        cluster_affinity: Some(cluster_names(&["member1", "member2"])),
        replica_scheduling: Some(v1::ReplicaSchedulingStrategy {
            replica_scheduling_type: v1::ReplicaSchedulingType::Divided as i32,
            replica_division_preference: v1::ReplicaDivisionPreference::Weighted as i32,
            weight_preference: Some(v1::ClusterPreferences {
                static_weight_list: vec![weight("member1", 2), weight("member2", 1)],
                dynamic_weight: 0,
            }),
        }),
        ..Default::default()
    };
    let failover = v1::FailoverBehavior {
        application: Some(v1::ApplicationFailoverBehavior {
            decision_conditions: Some(v1::DecisionConditions {
                toleration_seconds: Some(3),
            }),
            purge_mode: v1::PurgeMode::Never as i32,
            ..Default::default()
        }),
        ..Default::default()
    };
    let works = record_works(&api).await;
    create_nginx(&api, nginx_policy(placement, Some(failover))).await;

    // member1 runs 1 of its 2 replicas: Unhealthy for longer than 3 s → evicted, Never.
    let b = wait_nginx(&api, T, "member1 evicted by application failover", |b| {
        tasks(b) == ["member1"]
    })
    .await;
    let task = eviction_tasks(&b)[0].clone();
    assert_eq!(task.purge_mode, v1::PurgeMode::Never as i32);
    assert_eq!(task.suppress_deletion, Some(true));
    assert_eq!(task.grace_period_seconds, None);
    assert_eq!(task.reason, "ApplicationFailure");
    assert_eq!(
        task.producer,
        "resource-binding-application-failover-controller"
    );
    assert_eq!(task.replicas, Some(2));
    let m1_work = cluster_work(&api, "member1").await.expect("member1's Work");
    assert_eq!(m1_work.spec.as_ref().unwrap().replicas, Some(2));
    let m1_status = member_status(&stack.members["member1"]).await;
    assert_eq!((m1_status.replicas, m1_status.ready_replicas), (2, 1));

    wait_nginx_healthy(&api, T, &[("member2", 3)]).await;

    // Suppressed: member1's Work is kept as it was (neither deleted nor updated), well past
    // the refill becoming healthy.
    for_a_while(
        Duration::from_secs(3),
        Duration::from_millis(200),
        || async {
            let b = nginx_binding(&api).await.unwrap();
            assert_eq!(tasks(&b), ["member1"], "the suppressed task was removed");
            let w = cluster_work(&api, "member1")
                .await
                .expect("member1's Work was removed while its task suppresses deletion");
            assert!(!work_deleting(&w), "member1's Work was marked for deletion");
            assert_eq!(w.spec.as_ref().unwrap().replicas, Some(2));
            assert_eq!(
                w.metadata.as_ref().unwrap().generation,
                m1_work.metadata.as_ref().unwrap().generation
            );
        },
    )
    .await;
    assert_eq!(member_status(&stack.members["member1"]).await.replicas, 2);

    // The operator releases it as Karmada's guide says: the binding's task edited to
    // suppressDeletion: false, and applied (GE-9.1).
    let bindings = record_bindings(&api).await;
    let yaml = stack
        .cli_ok(&["get", "rb", "nginx-deployment", "-o", "yaml"])
        .await;
    assert!(yaml.contains("suppressDeletion: true"), "{yaml}");
    let edited = yaml.replace("suppressDeletion: true", "suppressDeletion: false");
    let file = std::env::temp_dir().join(format!("release-{}.yaml", std::process::id()));
    std::fs::write(&file, edited).unwrap();
    let out = stack.cli_ok(&["apply", "-f", file.to_str().unwrap()]).await;
    assert!(
        out.contains("resourcebinding/nginx-deployment eviction task of cluster member1 released"),
        "{out}"
    );
    let _ = std::fs::remove_file(&file);
    let released_at = eventually(T, "the release recorded", || async {
        bindings
            .seen()
            .into_iter()
            .find(|s| {
                eviction_tasks(&s.object)
                    .iter()
                    .any(|t| t.suppress_deletion == Some(false))
            })
            .map(|s| resource_version(s.object.metadata.as_ref()))
    })
    .await;

    eventually(T, "task released and member1's Work deleted", || async {
        let b = nginx_binding(&api).await?;
        (tasks(&b).is_empty() && work_clusters(&api).await == ["member2"]).then_some(())
    })
    .await;
    assert_eq!(member_status(&stack.members["member1"]).await.manifests, 0);
    // The release is an event on the binding, naming who released what.
    let events = stack.cli_ok(&["get", "events"]).await;
    assert!(
        events.contains("EvictionTaskReleased") && events.contains("member1"),
        "{events}"
    );
    // The Work was deleted only after the release, never before.
    let deletions: Vec<i64> = works
        .seen()
        .into_iter()
        .filter(|s| {
            work_cluster(&s.object) == "member1"
                && (s.kind == v1::WatchEventType::Deleted || work_deleting(&s.object))
        })
        .map(|s| s.revision)
        .collect();
    assert!(!deletions.is_empty());
    assert!(
        deletions.iter().all(|r| *r > released_at),
        "member1's Work was deleted before the release (revision {released_at}): {deletions:?}"
    );
}

/// (a') Directly with a target that already runs a copy: the seed policy (static weights,
/// {member1:1, member2:2}) with `purgeMode: Directly`. After member1's eviction the refill is
/// {member2:3}; member2's Work must not be scaled to 3 while member1's Directly-purged Work
/// still exists (WE-3.2), i.e. the graceful-eviction task may not be released on the
/// strength of member2's *old* 2/2 Ready replicas.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn directly_scales_an_existing_target_only_after_the_old_work_is_gone() {
    let (stack, api) = Stack::with_two_members(Timers::fast(), T).await;
    let mut policy = flotilla_api::testing::seed_policy();
    policy.spec.as_mut().unwrap().failover = Some(v1::FailoverBehavior {
        cluster: Some(v1::ClusterFailoverBehavior {
            purge_mode: v1::PurgeMode::Directly as i32,
            ..Default::default()
        }),
        ..Default::default()
    });
    create_nginx(&api, policy).await;
    wait_nginx_healthy(&api, T, &[("member1", 1), ("member2", 2)]).await;
    let works = record_works(&api).await;

    set_fault(&stack.members["member1"], v1::FaultMode::Unhealthy).await;
    wait_nginx(
        &api,
        T,
        "a Directly task for member1, target {member2:3}",
        |b| tasks(b) == ["member1"] && targets(b) == [("member2".into(), 3)],
    )
    .await;
    member1_work_marked(&api).await;
    for_a_while(
        Duration::from_secs(3),
        Duration::from_millis(100),
        || async {
            let m2 = cluster_work(&api, "member2").await.expect("member2's Work");
            assert_eq!(
                m2.spec.as_ref().unwrap().replicas,
                Some(2),
                "member2 was scaled up while member1's Directly-purged Work still existed: {:?}",
                nginx_binding(&api).await
            );
        },
    )
    .await;

    set_fault(&stack.members["member1"], v1::FaultMode::Healthy).await;
    member2_took_over(&api, true).await;
    let seen = works.seen();
    let deleted = seen
        .iter()
        .find(|s| work_cluster(&s.object) == "member1" && s.kind == v1::WatchEventType::Deleted)
        .map(|s| s.revision)
        .expect("member1's Work deleted");
    let scaled = seen
        .iter()
        .find(|s| {
            work_cluster(&s.object) == "member2"
                && s.object.spec.as_ref().and_then(|s| s.replicas) == Some(3)
        })
        .map(|s| s.revision)
        .expect("member2's Work scaled to 3");
    assert!(
        deleted < scaled,
        "member2 scaled (revision {scaled}) before member1's Work was gone ({deleted})"
    );
}
