//! The graceful-eviction controller on MemStore with compressed timeouts.

use std::sync::Arc;
use std::time::Duration;

use crate::support::*;
use flotilla_core::types::{
    ApplicationFailoverBehavior, CONDITION_REPLACEMENT_PENDING, ConditionStatus, FailoverBehavior,
    PRODUCER_APPLICATION_FAILOVER, PurgeMode, REASON_APPLICATION_FAILURE,
    ResourceHealth::{Healthy, Unhealthy, Unknown},
    TargetCluster,
};
use flotilla_proto::v1;
use flotilla_runtime::now;
use flotilla_store::typed::Typed;
use flotilla_store::{MemStore, StoreRef};

const WAIT: Duration = Duration::from_secs(10);

fn config(timeout: Duration) -> flotilla_graceful_eviction::Config {
    let mut c = test_config();
    c.default_timeout = timeout;
    c
}

fn mem() -> (StoreRef, Typed) {
    let store: StoreRef = Arc::new(MemStore::new());
    (store.clone(), Typed::new(store))
}

/// A running controller (default timeout `timeout`) on a fresh store holding `binding`.
async fn start_on(binding: v1::ResourceBinding, timeout: Duration) -> (Typed, Harness) {
    let (store, typed) = mem();
    create_binding(&typed, binding).await;
    let h = Harness::start::<GracefulEviction>(store, config(timeout));
    (typed, h)
}

/// Asserts that binding `b` keeps its member1 task through a decision of the controller,
/// with no wait that hopes the decision came: a second, unstamped task for member3 is added
/// (with the scheduler's observation kept current), and once the controller has acted on it,
/// stamping or removing it in the one write that also carries its verdict on every other
/// task, member1's task must still be there. The member3 task is then taken away again.
async fn assert_kept_through_a_decision(typed: &Typed, why: &str) {
    let observed = |b: &mut flotilla_core::types::ResourceBinding| {
        // the task change bumps the generation by one: the scheduler has seen it
        b.status.scheduler_observed_generation = b.meta.generation + 1;
        b.status.aggregated_status_observed_generation = b.meta.generation + 1;
    };
    update_binding(typed, "b", |b| {
        b.spec.graceful_eviction_tasks.push(task("member3", None));
        observed(b);
    })
    .await;
    eventually(WAIT, "the controller acts on member3's task", || async {
        let tasks = tasks_of(typed, "b").await;
        let member3 = tasks.iter().find(|t| t.from_cluster == "member3");
        member3
            .is_none_or(|t| t.creation_timestamp.is_some())
            .then_some(tasks)
    })
    .await
    .iter()
    .find(|t| t.from_cluster == "member1")
    .unwrap_or_else(|| panic!("member1's task is gone: {why}"));
    update_binding(typed, "b", |b| {
        b.spec
            .graceful_eviction_tasks
            .retain(|t| t.from_cluster != "member3");
        observed(b);
    })
    .await;
    assert_eq!(tasks_of(typed, "b").await.len(), 1, "{why}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ge_stamps_then_removes_when_targets_healthy_and_scheduled() {
    let (typed, h) = start_on(
        on_member2("b", task("member1", None), Some(Healthy)),
        Duration::from_secs(600),
    )
    .await;
    // GE-3.1: stamped (a spec write: the generation moves past the scheduler's).
    let stamped = wait_stamped(&typed, WAIT, "b").await;
    assert!(stamped <= now());
    // The stamping write is the decision that kept it (hasScheduled is false); nothing makes
    // the controller decide again before the scheduler's observation below (its one timer is
    // the 600 s timeout), so no wait could show more.
    assert_eq!(
        tasks_of(&typed, "b").await.len(),
        1,
        "hasScheduled is false: kept"
    );
    // The scheduler observes the new generation (SC-3.7) → all targets Healthy → removed.
    observe_generation(&typed, "b").await;
    wait_no_tasks(&typed, WAIT, "b", "removed").await;
    wait_event(&typed, WAIT, "EvictWorkloadFromClusterSucceed").await;
    h.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ge_unknown_health_keeps_the_task_ge_5_3() {
    let (typed, h) = start_on(
        on_member2("b", task("member1", Some(now())), Some(Unknown)),
        Duration::from_secs(600),
    )
    .await;
    assert_kept_through_a_decision(&typed, "Unknown blocks removal").await;
    // control: Healthy (status-only write, generation unchanged) → removed
    update_binding(&typed, "b", |b| {
        b.status.aggregated_status = vec![item("member2", Healthy)]
    })
    .await;
    wait_no_tasks(&typed, WAIT, "b", "removed").await;
    h.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ge_removed_after_the_compressed_timeout_ge_4_2() {
    let timeout = Duration::from_millis(500);
    let (typed, h) = start_on(
        on_member2("b", task("member1", None), Some(Unhealthy)),
        timeout,
    )
    .await;
    let stamped = wait_stamped(&typed, WAIT, "b").await;
    wait_no_tasks(&typed, WAIT, "b", "timed out").await;
    // I1 (b): not before created + grace.
    assert!(
        now().saturating_since(stamped) >= timeout,
        "removed {:?} after stamping",
        now().saturating_since(stamped)
    );
    h.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ge_empty_placement_keeps_task_and_sets_replacement_pending_a6_f8() {
    let long_ago = now() - Duration::from_secs(3600);
    let (typed, h) = start_on(
        evicting("b", &[], vec![task("member1", Some(long_ago))], vec![]),
        Duration::from_millis(200),
    )
    .await;
    let condition = eventually(WAIT, "ReplacementPending", || async {
        get_binding(&typed, "b")
            .await
            .status
            .conditions
            .into_iter()
            .find(|c| c.type_ == CONDITION_REPLACEMENT_PENDING)
    })
    .await;
    assert_eq!(condition.status, ConditionStatus::True);
    assert_eq!(condition.reason, "NoReplacementFits");
    assert!(
        condition.message.contains("member1"),
        "{}",
        condition.message
    );
    // The condition was written with the decision that kept the task, long past its 200 ms
    // timeout; with no target the controller sets no timer (GE-6.5), so it decides again only
    // on the change below.
    assert_eq!(
        tasks_of(&typed, "b").await.len(),
        1,
        "an empty placement is never healthy"
    );
    // The scheduler finds a replacement; it becomes healthy → task removed, condition False.
    update_binding(&typed, "b", |b| {
        b.spec.clusters = vec![TargetCluster::new("member2", 1)];
        b.status.aggregated_status = vec![item("member2", Healthy)];
        b.status.last_scheduled_time = Some(now());
    })
    .await;
    observe_generation(&typed, "b").await;
    wait_no_tasks(&typed, WAIT, "b", "removed").await;
    let b = get_binding(&typed, "b").await;
    let c = b
        .status
        .conditions
        .iter()
        .find(|c| c.type_ == CONDITION_REPLACEMENT_PENDING)
        .unwrap();
    assert_eq!(c.status, ConditionStatus::False);
    h.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ge_suppress_deletion_true_keeps_the_task_ge_4_1() {
    let mut t = task("member1", Some(now() - Duration::from_secs(3600)));
    t.suppress_deletion = Some(true);
    let (typed, h) = start_on(
        on_member2("b", t, Some(Healthy)),
        Duration::from_millis(100),
    )
    .await;
    assert_kept_through_a_decision(&typed, "healthy and timed out, but suppressed").await;
    // A human lifts the suppression.
    update_binding(&typed, "b", |b| {
        b.spec.graceful_eviction_tasks[0].suppress_deletion = Some(false)
    })
    .await;
    wait_no_tasks(&typed, WAIT, "b", "released").await;
    h.stop().await;
}

/// GE-8.7: plays the work executor's status collector for `cluster`: a pass every 200 ms,
/// recorded as it records them, until the task is aborted.
fn collect_status(typed: &Typed, cluster: &str) -> tokio::task::JoinHandle<()> {
    let (typed, cluster) = (typed.clone(), cluster.to_owned());
    tokio::spawn(async move {
        let key = format!("statuscollections/{cluster}");
        loop {
            let at = flotilla_proto::convert::time_to_timestamp(now());
            let mark = v1::StatusCollection {
                metadata: Some(v1::ObjectMeta {
                    name: cluster.clone(),
                    ..Default::default()
                }),
                started_at: Some(at),
                finished_at: Some(at),
                period: prost_types::Duration::try_from(Duration::from_millis(200)).ok(),
            };
            match typed.get::<v1::StatusCollection>(&key).await.unwrap() {
                Some(old) => drop(typed.update(&old, mark).await.unwrap()),
                None => drop(typed.create(mark, None).await.unwrap()),
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    })
}

/// The binding of [`ge_application_failover_evicts_unhealthy_cluster_ge_8_a10`]: member1
/// Unhealthy, application failover after 1 s with purge mode Never.
fn unhealthy_on_member1() -> v1::ResourceBinding {
    let mut wire = evicting(
        "b",
        &["member1", "member2"],
        vec![],
        vec![item("member1", Unhealthy), item("member2", Healthy)],
    );
    let spec = wire.spec.as_mut().unwrap();
    spec.failover = Some(
        FailoverBehavior {
            cluster: None,
            application: Some(ApplicationFailoverBehavior {
                toleration_seconds: Some(1),
                purge_mode: Some(PurgeMode::Never),
                ..Default::default()
            }),
        }
        .into(),
    );
    wire
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ge_8_7_no_application_failover_on_status_nobody_collects() {
    let (store, typed) = mem();
    typed.create(unhealthy_on_member1(), None).await.unwrap();
    let h = Harness::start::<GracefulEviction>(store, config(Duration::from_secs(600)));
    // the work executor is down: the last status it wrote says Unhealthy, but nobody has
    // looked since, so 3 s (three tolerations) pass without an eviction
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert!(
        get_binding(&typed, "b").await.targets("member1"),
        "evicted on a status nobody collected"
    );
    // collection resumes and still finds it Unhealthy: the period counts from then
    let resumed = now();
    let collector = collect_status(&typed, "member1");
    eventually(WAIT, "member1 evicted", || async {
        (!get_binding(&typed, "b").await.targets("member1")).then_some(())
    })
    .await;
    assert!(
        now().saturating_since(resumed) >= Duration::from_secs(1),
        "the unhealthy period must count from when collection resumed"
    );
    collector.abort();
    h.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ge_application_failover_evicts_unhealthy_cluster_ge_8_a10() {
    let (store, typed) = mem();
    let collector = collect_status(&typed, "member1");
    typed.create(unhealthy_on_member1(), None).await.unwrap();
    let start = now();
    let h = Harness::start::<GracefulEviction>(store, config(Duration::from_secs(600)));
    eventually(WAIT, "member1 evicted", || async {
        (!get_binding(&typed, "b").await.targets("member1")).then_some(())
    })
    .await;
    assert!(
        now().saturating_since(start) >= Duration::from_secs(1),
        "not before tolerationSeconds"
    );
    let b = get_binding(&typed, "b").await;
    assert_eq!(b.spec.clusters, vec![TargetCluster::new("member2", 1)]);
    assert_eq!(b.spec.graceful_eviction_tasks.len(), 1);
    let t = &b.spec.graceful_eviction_tasks[0];
    assert_eq!(t.from_cluster, "member1");
    assert_eq!(t.producer, PRODUCER_APPLICATION_FAILOVER);
    assert_eq!(t.reason, REASON_APPLICATION_FAILURE);
    assert_eq!(t.purge_mode, PurgeMode::Never);
    assert_eq!(t.suppress_deletion, Some(true));
    assert!(t.creation_timestamp.is_some(), "stamped in the same write");
    collector.abort();
    h.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ge_concurrent_status_write_is_preserved_i5() {
    let (mem_store, typed) = mem();
    create_binding(
        &typed,
        on_member2("b", task("member1", None), Some(Unknown)),
    )
    .await;
    // Between our read and our CAS the work executor writes the aggregated status.
    let store = interpose_binding(mem_store, &typed, "b", |typed| async move {
        update_binding(&typed, "b", |b| {
            b.status.aggregated_status = vec![item("member2", Unhealthy)];
        })
        .await;
    });
    let h = Harness::start::<GracefulEviction>(store.clone(), config(Duration::from_secs(600)));
    wait_stamped(&typed, WAIT, "b").await;
    assert_eq!(store.fired(), 1);
    let b = get_binding(&typed, "b").await;
    assert_eq!(
        b.status.aggregated_status,
        vec![item("member2", Unhealthy)],
        "the other write survived"
    );
    assert_eq!(b.spec.graceful_eviction_tasks.len(), 1);
    h.stop().await;
}
