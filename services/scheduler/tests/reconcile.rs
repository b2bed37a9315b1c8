//! The scheduling controller on a MemStore: the seed examples end to end, SC-4 outcomes,
//! SC-2 triggers, and no lost update under a concurrent writer (I5).

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;
use std::time::Duration;

use crate::common::*;
use flotilla_core::types::{
    ClusterAffinity, Placement, ReplicaDivisionPreference, ReplicaSchedulingStrategy,
    ReplicaSchedulingType, TaintEffect,
};
use flotilla_proto::v1;
use flotilla_runtime::events::Recorder;
use flotilla_runtime::testing::Interpose;
use flotilla_runtime::{Action, Shutdown};
use flotilla_scheduler::controller::{self, ControllerConfig, Running, reconcile};
use flotilla_store::typed::Typed;
use flotilla_store::{MemStore, StoreRef};

struct Harness {
    typed: Typed,
    running: Running,
    shutdown: Shutdown,
}

impl Drop for Harness {
    fn drop(&mut self) {
        self.shutdown.trigger();
    }
}

fn test_config() -> ControllerConfig {
    ControllerConfig {
        workers: 8,
        unschedulable_initial_backoff: Duration::from_millis(20),
        unschedulable_max_backoff: Duration::from_millis(200),
        ..ControllerConfig::default()
    }
}

/// The controller on `store`, writing through `writes`, always leading.
async fn start_with(store: StoreRef, writes: StoreRef) -> Harness {
    start_configured(store, writes, test_config()).await
}

/// The controller on `store` with `config`, writing through `writes`, always leading.
async fn start_configured(store: StoreRef, writes: StoreRef, config: ControllerConfig) -> Harness {
    let shutdown = Shutdown::new();
    let recorder = Recorder::spawn(store.clone(), "scheduler", shutdown.clone());
    let running = controller::spawn(
        store.clone(),
        writes,
        config,
        flotilla_runtime::Gate::Always,
        recorder,
        shutdown.clone(),
        flotilla_runtime::Clock::system(),
    );
    running.ctx.bindings().wait_until_ready().await;
    running.ctx.clusters().wait_until_ready().await;
    Harness {
        typed: Typed::new(store),
        running,
        shutdown,
    }
}

async fn start() -> Harness {
    let store: StoreRef = Arc::new(MemStore::new());
    start_with(store.clone(), store).await
}

/// A running scheduler with member1 and member2 and the seed binding `nginx` (Divided,
/// static weights 1:2, 3 replicas); the binding's key.
async fn start_with_seed() -> (Harness, String) {
    let h = start().await;
    create_cluster(&h.typed, cluster("member1")).await;
    create_cluster(&h.typed, cluster("member2")).await;
    let key = create_binding_key(&h.typed, binding("nginx", divided_static_placement(), 3)).await;
    (h, key)
}

async fn events(typed: &Typed, reason: &str) -> Vec<v1::Event> {
    eventually(Duration::from_secs(5), reason, || async {
        let (all, _) = typed.list::<v1::Event>(None).await.unwrap();
        let found: Vec<v1::Event> = all.into_iter().filter(|e| e.reason == reason).collect();
        (!found.is_empty()).then_some(found)
    })
    .await
}

#[tokio::test]
async fn sc_16_seed_divided_static_weights_then_eviction_moves_replicas_to_member2() {
    let (h, key) = start_with_seed().await;

    // SC-2.1 add → SC-3.2 (never applied) → SC-16 Webster 1:2 over 3 replicas.
    let first = wait_binding(&h.typed, &key, "first schedule", |rb| {
        rb.spec.clusters == targets(&[("member1", 1), ("member2", 2)])
    })
    .await;
    assert_eq!(
        scheduled(&first),
        Some(("True".into(), "Success".into())),
        "SC-4.1"
    );
    assert_eq!(
        first.status.scheduler_observed_generation, first.meta.generation,
        "SC-4.1: observed generation = the generation written"
    );
    assert_eq!(
        first.status.applied_placement, first.spec.placement,
        "A3: the applied placement is recorded for the taint manager"
    );
    assert!(first.status.last_scheduled_time.is_some());
    let scheduled_events = events(&h.typed, "Scheduled").await;
    assert!(scheduled_events[0].message.contains("member1:1, member2:2"));

    // member1 fails: NoExecute taint, then the taint manager's eviction (one CAS: target
    // removed, task appended, generation bumped).
    add_taint(&h.typed, "member1", not_ready(TaintEffect::NoExecute)).await;
    let evicted = evict(&h.typed, &key, "member1").await;
    let evicted_generation = evicted.metadata.as_ref().unwrap().generation;
    assert!(evicted_generation > first.meta.generation);

    // SC-3.3 (the sum lost member1's replica) → SC-6.2/6.6 exclude member1 → {member2: 3}.
    let after = wait_binding(&h.typed, &key, "failover", |rb| {
        rb.spec.clusters == targets(&[("member2", 3)])
    })
    .await;
    assert_eq!(scheduled(&after), Some(("True".into(), "Success".into())));
    assert_eq!(
        after.status.scheduler_observed_generation, after.meta.generation,
        "GE-2 hasScheduled holds for the new result"
    );
    assert!(after.meta.generation > evicted_generation);
    assert_eq!(after.spec.graceful_eviction_tasks.len(), 1, "task kept");
    assert_eq!(
        after.spec.graceful_eviction_tasks[0].from_cluster,
        "member1"
    );
}

#[tokio::test]
async fn sc_6_seed_duplicated_spread_eviction_keeps_member1_and_adds_another() {
    let h = start().await;
    for name in ["member1", "member2", "member3", "member5"] {
        create_cluster(&h.typed, cluster(name)).await;
    }
    let key =
        create_binding_key(&h.typed, binding("nginx", duplicated_spread_placement(), 2)).await;
    // First schedule: all scores 0, equal capacity → by name (SC-9): member1, member2.
    wait_binding(&h.typed, &key, "first schedule", |rb| {
        rb.spec.clusters == targets(&[("member1", 2), ("member2", 2)])
    })
    .await;

    add_taint(&h.typed, "member2", not_ready(TaintEffect::NoExecute)).await;
    evict(&h.typed, &key, "member2").await;
    let after = wait_binding(&h.typed, &key, "failover", |rb| {
        rb.spec.clusters.len() == 2 && !rb.targets("member2")
    })
    .await;
    assert_eq!(
        after.spec.clusters[0].name, "member1",
        "member1 kept (SC-7)"
    );
    assert!(
        ["member3", "member5"].contains(&after.spec.clusters[1].name.as_str()),
        "{:?}",
        after.spec.clusters
    );
    assert!(after.spec.clusters.iter().all(|t| t.replicas == 2));
    assert_eq!(
        after.status.scheduler_observed_generation,
        after.meta.generation
    );
    assert_eq!(scheduled(&after), Some(("True".into(), "Success".into())));
}

#[tokio::test]
async fn sc_4_3_fit_error_empties_the_result_with_a_condition_and_no_observed_bump() {
    let h = start().await;
    create_cluster(&h.typed, cluster("member1")).await;
    create_cluster(&h.typed, cluster("member2")).await;
    // Only member1 is allowed (#5803 / #7455 shape).
    let placement = Placement {
        cluster_affinity: Some(ClusterAffinity {
            cluster_names: vec!["member1".into()],
            ..Default::default()
        }),
        ..divided_static_placement()
    };
    let key = create_binding_key(&h.typed, binding("only1", placement, 2)).await;
    let first = wait_binding(&h.typed, &key, "first schedule", |rb| {
        rb.spec.clusters == targets(&[("member1", 2)])
    })
    .await;

    add_taint(&h.typed, "member1", not_ready(TaintEffect::NoExecute)).await;
    evict(&h.typed, &key, "member1").await;
    let after = wait_binding(&h.typed, &key, "NoClusterFit", |rb| {
        scheduled(rb).is_some_and(|(_, r)| r == "NoClusterFit")
    })
    .await;
    assert!(after.spec.clusters.is_empty(), "SC-4.3: empty result");
    assert_eq!(scheduled(&after).unwrap().0, "False");
    assert_eq!(
        after.status.scheduler_observed_generation, first.meta.generation,
        "SC-4.3: observed generation not bumped"
    );
    assert!(after.meta.generation > after.status.scheduler_observed_generation);
    assert_eq!(after.spec.graceful_eviction_tasks.len(), 1, "task kept");
    let failed = events(&h.typed, "ScheduleFailed").await;
    assert!(
        failed[0].message.contains("NoClusterFit"),
        "{}",
        failed[0].message
    );

    // Not retried until something changes: the stored binding stays as it is.
    let revision = after.meta.resource_version;
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(
        read_binding(&h.typed, &key).await.meta.resource_version,
        revision
    );
}

/// Regression (#30, the guestbook sample applied in its README's order): a custom resource
/// applied right after its CRD found no member serving its kind (NoClusterFit), and stayed so
/// after the members' API enablements listed the kind, a status change SC-2.4 ignores. SC-2.6:
/// such a status change requeues the unschedulable bindings it may let fit.
#[tokio::test]
async fn sc_2_6_a_kind_served_later_schedules_the_binding_that_did_not_fit() {
    let h = start().await;
    create_cluster(&h.typed, cluster("member1")).await;
    let mut rb = binding("guestbook", divided_static_placement(), 0);
    rb.spec.resource.api_version = "webapp.my.domain/v1".into();
    rb.spec.resource.kind = "Guestbook".into();
    let key = create_binding_key(&h.typed, rb).await;
    wait_binding(&h.typed, &key, "NoClusterFit", |rb| {
        scheduled(rb).is_some_and(|(_, r)| r == "NoClusterFit")
    })
    .await;
    // the CRD reached the member: its status now lists the kind (no spec change)
    let served = modify(&h.typed, "clusters/member1", |c: &mut v1::Cluster| {
        c.status
            .get_or_insert_with(Default::default)
            .api_enablements
            .push(v1::ApiEnablement {
                group_version: "webapp.my.domain/v1".into(),
                resources: vec![v1::ApiResource {
                    name: "guestbooks".into(),
                    kind: "Guestbook".into(),
                }],
            });
    })
    .await;
    assert_eq!(
        served.metadata.as_ref().map(|m| m.generation),
        Some(1),
        "a status change: the generation did not move"
    );
    let placed = wait_binding(&h.typed, &key, "scheduled once the kind is served", |rb| {
        scheduled(rb).is_some_and(|(s, _)| s == "True")
    })
    .await;
    assert_eq!(placed.spec.clusters, targets(&[("member1", 0)]));
}

#[tokio::test]
async fn sc_4_2_unschedulable_keeps_the_result_and_retries_with_backoff() {
    // Karmada's behaviour: `--place-what-fits=false`
    let store: StoreRef = Arc::new(MemStore::new());
    let mut config = test_config();
    config.options.place_what_fits = false;
    let h = start_configured(store.clone(), store, config).await;
    let mut small1 = cluster("member1");
    small1.status.resource_summary = Some(flotilla_core::capacity::Summary::with_pods(2));
    let mut small2 = cluster("member2");
    small2.status.resource_summary = Some(flotilla_core::capacity::Summary::with_pods(2));
    create_cluster(&h.typed, small1).await;
    create_cluster(&h.typed, small2).await;
    let aggregated = Placement {
        replica_scheduling: Some(ReplicaSchedulingStrategy {
            replica_scheduling_type: ReplicaSchedulingType::Divided,
            replica_division_preference: Some(ReplicaDivisionPreference::Aggregated),
            weight_preference: None,
        }),
        ..Default::default()
    };
    let key = create_binding_key(&h.typed, binding("big", aggregated, 6)).await;
    let stuck = wait_binding(&h.typed, &key, "Unschedulable", |rb| {
        scheduled(rb).is_some_and(|(_, r)| r == "Unschedulable")
    })
    .await;
    assert!(
        stuck.spec.clusters.is_empty(),
        "previous (empty) result kept"
    );

    // Capacity appears: a status-only change, which triggers nothing (SC-2.4) — the
    // back-off retry picks it up.
    modify(&h.typed, "clusters/member2", |c: &mut v1::Cluster| {
        c.status
            .get_or_insert_with(Default::default)
            .resource_summary
            .get_or_insert_with(Default::default)
            .allocatable
            .get_or_insert_with(Default::default)
            .pods = 10;
    })
    .await;
    let done = wait_binding(&h.typed, &key, "scheduled after retry", |rb| {
        scheduled(rb).is_some_and(|(s, _)| s == "True")
    })
    .await;
    assert_eq!(
        done.spec.clusters.iter().map(|t| t.replicas).sum::<i32>(),
        6
    );
}

/// SC-4.6 (the default): the replicas that fit are placed at once, the rest is counted,
/// and placed when room appears (SC-2.6, a status-only change).
#[tokio::test]
async fn sc_4_6_places_what_fits_then_the_rest_when_room_appears() {
    let h = start().await;
    for name in ["member1", "member2"] {
        let mut small = cluster(name);
        small.status.resource_summary = Some(flotilla_core::capacity::Summary::with_pods(2));
        create_cluster(&h.typed, small).await;
    }
    let aggregated = Placement {
        replica_scheduling: Some(ReplicaSchedulingStrategy {
            replica_scheduling_type: ReplicaSchedulingType::Divided,
            replica_division_preference: Some(ReplicaDivisionPreference::Aggregated),
            weight_preference: None,
        }),
        ..Default::default()
    };
    let key = create_binding_key(&h.typed, binding("big", aggregated, 6)).await;
    let short = wait_binding(&h.typed, &key, "InsufficientCapacity", |rb| {
        scheduled(rb).is_some_and(|(_, r)| r == "InsufficientCapacity")
    })
    .await;
    assert_eq!(
        short.spec.clusters.iter().map(|t| t.replicas).sum::<i32>(),
        4,
        "what fits is placed"
    );
    assert_eq!(short.status.unschedulable_replicas, 2);
    modify(&h.typed, "clusters/member2", |c: &mut v1::Cluster| {
        c.status
            .get_or_insert_with(Default::default)
            .resource_summary
            .get_or_insert_with(Default::default)
            .allocatable
            .get_or_insert_with(Default::default)
            .pods = 10;
    })
    .await;
    let done = wait_binding(&h.typed, &key, "the rest placed", |rb| {
        scheduled(rb).is_some_and(|(s, _)| s == "True")
    })
    .await;
    assert_eq!(
        done.spec.clusters.iter().map(|t| t.replicas).sum::<i32>(),
        6
    );
    assert_eq!(done.status.unschedulable_replicas, 0);
}

#[tokio::test]
async fn sc_2_3_cluster_taint_change_requeues_affected_bindings() {
    let h = start().await;
    create_cluster(&h.typed, cluster("member1")).await;
    create_cluster(
        &h.typed,
        tainted("member2", not_ready(TaintEffect::NoSchedule)),
    )
    .await;
    // Duplicated without spread: every feasible cluster (SC-10.1).
    let dup = Placement {
        replica_scheduling: Some(ReplicaSchedulingStrategy {
            replica_scheduling_type: ReplicaSchedulingType::Duplicated,
            ..Default::default()
        }),
        ..Default::default()
    };
    let key = create_binding_key(&h.typed, binding("web", dup, 1)).await;
    let first = wait_binding(&h.typed, &key, "first schedule", |rb| {
        rb.spec.clusters == targets(&[("member1", 1)])
    })
    .await;

    // A status-only cluster change triggers nothing (SC-2.4).
    modify(&h.typed, "clusters/member2", |c: &mut v1::Cluster| {
        c.status
            .get_or_insert_with(Default::default)
            .kubernetes_version = "v1.31".into();
    })
    .await;
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert_eq!(
        read_binding(&h.typed, &key).await.meta.resource_version,
        first.meta.resource_version
    );

    // The NoSchedule taint goes away (a spec change, SC-2.3): the binding is re-queued and
    // member2 is added (SC-3.5/SC-3.8: Duplicated re-adds a cluster that passes again).
    clear_taints(&h.typed, "member2").await;
    wait_binding(&h.typed, &key, "member2 added", |rb| {
        rb.spec.clusters == targets(&[("member1", 1), ("member2", 1)])
    })
    .await;
}

#[tokio::test]
async fn no_write_when_nothing_changed() {
    let (h, key) = start_with_seed().await;
    let settled = wait_binding(&h.typed, &key, "scheduled", |rb| {
        rb.status.scheduler_observed_generation == rb.meta.generation
            && !rb.spec.clusters.is_empty()
    })
    .await;
    // Let the cache catch up with our own write, then reconcile by hand.
    eventually(Duration::from_secs(5), "cache caught up", || async {
        let cached = h.running.ctx.bindings().get(&key)?;
        (cached.metadata.as_ref()?.resource_version == settled.meta.resource_version).then_some(())
    })
    .await;
    let action = reconcile(key.clone().into(), h.running.ctx.clone())
        .await
        .unwrap();
    assert_eq!(action, Action::await_change());
    assert_eq!(
        read_binding(&h.typed, &key).await.meta.resource_version,
        settled.meta.resource_version,
        "a settled binding is never rewritten"
    );
}

// ---------------------------------------------------------------------------------------
// I5: a concurrent writer between the scheduler's read and its write
// ---------------------------------------------------------------------------------------

#[tokio::test]
async fn i5_task_appended_between_read_and_write_is_not_lost() {
    let store: StoreRef = Arc::new(MemStore::new());
    let typed = Typed::new(store.clone());
    for name in ["member1", "member2", "member3"] {
        create_cluster(&typed, cluster(name)).await;
    }
    // Already scheduled {member1:1, member2:2}, then evicted from member1 by the taint
    // manager, before the scheduler starts.
    let mut rb = binding("nginx", divided_static_placement(), 3);
    rb.spec.clusters = targets(&[("member1", 1), ("member2", 2)]);
    rb.status.applied_placement = rb.spec.placement.clone();
    let key = create_binding_key(&typed, rb).await;
    add_taint(&typed, "member1", not_ready(TaintEffect::NoExecute)).await;
    evict(&typed, &key, "member1").await;

    // The concurrent writer: graceful eviction stamps the task (GE-3.1) and an application
    // failover appends a task for member3 (not a target) — between the scheduler's read and
    // its write.
    let hook_store = store.clone();
    let hook_key = key.clone();
    let interposer = Interpose::new(
        store.clone(),
        &key,
        Box::new(move || {
            let (typed, key) = (Typed::new(hook_store.clone()), hook_key.clone());
            Box::pin(async move {
                modify(&typed, &key, |b: &mut v1::ResourceBinding| {
                    let spec = b.spec.as_mut().unwrap();
                    spec.graceful_eviction_tasks[0].creation_timestamp = Some(prost_types_ts(42));
                    let mut task = taint_task("member3", None);
                    task.producer = "resource-binding-application-failover-controller".into();
                    task.reason = "ApplicationFailure".into();
                    spec.graceful_eviction_tasks.push(task);
                })
                .await;
            })
        }),
    );
    let h = start_with(store.clone(), interposer.clone()).await;

    let after = wait_binding(&h.typed, &key, "rescheduled", |rb| {
        rb.spec.clusters == targets(&[("member2", 3)])
    })
    .await;
    assert!(
        interposer.key_txns() >= 2,
        "the first write lost its compare and was redone after a re-read"
    );
    let tasks = &after.spec.graceful_eviction_tasks;
    assert_eq!(tasks.len(), 2, "no lost task: {tasks:?}");
    assert_eq!(tasks[0].from_cluster, "member1");
    assert!(tasks[0].creation_timestamp.is_some(), "the stamp survived");
    assert_eq!(tasks[1].from_cluster, "member3");
    assert_eq!(
        after.status.scheduler_observed_generation,
        after.meta.generation
    );
}

fn prost_types_ts(seconds: i64) -> prost_types::Timestamp {
    prost_types::Timestamp { seconds, nanos: 0 }
}

#[tokio::test]
async fn sc_3_6_a_deleting_target_cluster_is_replaced() {
    let (h, key) = start_with_seed().await;
    wait_binding(&h.typed, &key, "first schedule", |rb| {
        rb.spec.clusters == targets(&[("member1", 1), ("member2", 2)])
    })
    .await;

    // Deletion requested (metadata only: no generation bump) — SC-2.3 "deletion newly set".
    modify(&h.typed, "clusters/member1", |c: &mut v1::Cluster| {
        c.metadata.as_mut().unwrap().deletion_timestamp = Some(prost_types_ts(1_700_000_000));
    })
    .await;
    let after = wait_binding(&h.typed, &key, "moved off the deleting cluster", |rb| {
        rb.spec.clusters == targets(&[("member2", 3)])
    })
    .await;
    assert_eq!(scheduled(&after), Some(("True".into(), "Success".into())));
    assert!(
        after.spec.graceful_eviction_tasks.is_empty(),
        "the scheduler never creates tasks"
    );
}
