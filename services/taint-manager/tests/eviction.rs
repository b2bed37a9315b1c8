//! The taint manager on MemStore with compressed time (toleration seconds of 1 s).

use std::time::{Duration, Instant};

use crate::support::*;
use flotilla_core::types::{
    PRODUCER_TAINT_MANAGER, PurgeMode, REASON_TAINT_UNTOLERATED, TAINT_NOT_READY, TargetCluster,
    Toleration,
};
use flotilla_proto::v1;
use flotilla_runtime::now;
use flotilla_store::StoreRef;
use flotilla_store::typed::Typed;
use flotilla_taint_manager::Config;

const WAIT: Duration = Duration::from_secs(10);

/// A running taint manager on `store`, after member1 got a NoExecute not-ready taint added now.
async fn start_tainting_member1(typed: &Typed, store: StoreRef, config: Config) -> Harness {
    let h = Harness::start::<TaintManager>(store, config);
    set_taints(typed, "member1", vec![not_ready_taint(now())]).await;
    h
}

/// A store with healthy member1 and member2 and binding `b` on both (one replica each),
/// tolerating `tolerations`.
async fn b_on_two_members(tolerations: Vec<Toleration>) -> (StoreRef, Typed) {
    let (store, typed) = mem_with_clusters(&[("member1", true), ("member2", true)]).await;
    create_scheduled(&typed, "b", &[("member1", 1), ("member2", 1)], tolerations).await;
    (store, typed)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tm_toleration_expires_then_one_task_i12() {
    let (store, typed) = mem_with_clusters(&[("member1", true), ("member2", true)]).await;
    create_scheduled(
        &typed,
        "web-deployment",
        &[("member1", 2), ("member2", 1)],
        vec![tolerate(TAINT_NOT_READY, Some(1))],
    )
    .await;
    let h = Harness::start::<TaintManager>(store, test_config());

    let start = Instant::now();
    let added = now();
    set_taints(&typed, "member1", vec![not_ready_taint(added)]).await;
    wait_evicted(&typed, WAIT, "web-deployment", "member1").await;
    // I12: never before timeAdded + tolerationSeconds.
    assert!(
        start.elapsed() >= Duration::from_secs(1),
        "evicted after {:?}",
        start.elapsed()
    );

    let b = get_binding(&typed, "web-deployment").await;
    assert_eq!(b.spec.clusters, vec![TargetCluster::new("member2", 1)]);
    assert_eq!(
        b.spec.graceful_eviction_tasks.len(),
        1,
        "{:?}",
        b.spec.graceful_eviction_tasks
    );
    let task = &b.spec.graceful_eviction_tasks[0];
    assert_eq!(task.from_cluster, "member1");
    assert_eq!(task.producer, PRODUCER_TAINT_MANAGER);
    assert_eq!(task.reason, REASON_TAINT_UNTOLERATED);
    assert_eq!(task.purge_mode, PurgeMode::Gracefully);
    assert_eq!(task.replicas, Some(2));
    // TM-11.4 (Flotilla): stamped at the eviction, so graceful eviction need not write
    let created = task
        .creation_timestamp
        .expect("stamped by the taint manager");
    assert!(
        created <= flotilla_runtime::now(),
        "{created:?} is in the future"
    );
    // The eviction was recorded as an event.
    wait_event(&typed, WAIT, "EvictWorkloadFromCluster").await;
    h.stop().await;
}

/// Labels binding `name` (a change the taint manager reacts to by deciding the binding again
/// at once, cancelling the requeue it had set for when its toleration ends).
async fn touch(typed: &Typed, name: &str, label: &str) {
    loop {
        let old: v1::ResourceBinding = typed
            .get(&binding_key(name))
            .await
            .expect("read the binding")
            .expect("the binding exists");
        let mut new = old.clone();
        new.metadata
            .get_or_insert_with(Default::default)
            .labels
            .insert("touched".into(), label.into());
        match typed.update(&old, new).await {
            Ok(_) => return,
            Err(e) if e.is_conflict() => continue,
            Err(e) => panic!("{e}"),
        }
    }
}

/// I12 with time as a parameter: a ten-minute toleration ends when the taint manager's own
/// clock passes it. The test moves a manual clock instead of waiting ten minutes; a service
/// that read the system clock instead would never evict here. The task is stamped with that
/// clock's time, past `timeAdded + tolerationSeconds`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tm_a_ten_minute_toleration_ends_when_the_clock_passes_it_i12() {
    let (store, typed) = mem_with_clusters(&[("member1", true), ("member2", true)]).await;
    create_scheduled(
        &typed,
        "web",
        &[("member1", 2), ("member2", 1)],
        vec![tolerate(TAINT_NOT_READY, Some(600))],
    )
    .await;
    // `untolerated` is evicted as soon as the manager sees the taint: once it is, the
    // manager's toleration clock for the taint (F6: when it first saw it) stands at `added`.
    create_scheduled(&typed, "untolerated", &[("member1", 1)], vec![]).await;
    let manual = flotilla_runtime::ManualClock::at_system_time();
    let clock = flotilla_runtime::Clock::manual(&manual);
    let h = Harness::start_clocked::<TaintManager>(store, test_config(), clock.clone());
    let added = clock.now();
    set_taints(&typed, "member1", vec![not_ready_taint(added)]).await;
    wait_evicted(&typed, WAIT, "untolerated", "member1").await;
    assert!(
        get_binding(&typed, "web").await.targets("member1"),
        "tolerated while the clock stands at timeAdded"
    );

    manual.advance(Duration::from_secs(601));
    touch(&typed, "web", "after-601s").await;
    wait_evicted(&typed, WAIT, "web", "member1").await;
    let b = get_binding(&typed, "web").await;
    let task = &b.spec.graceful_eviction_tasks[0];
    let stamped = task
        .creation_timestamp
        .expect("stamped by the taint manager");
    assert!(
        stamped >= added + Duration::from_secs(600),
        "stamped {stamped:?}, taint added {added:?}: the task must carry the manager's clock"
    );
    h.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tm_taint_removed_before_toleration_no_task_i11_f9() {
    let (store, typed) =
        mem_with_clusters(&[("member1", true), ("member2", true), ("member3", true)]).await;
    let tol = vec![tolerate(TAINT_NOT_READY, Some(1))];
    // `control` on member1 (taint stays) proves time passed and the manager was working.
    create_scheduled(
        &typed,
        "control",
        &[("member1", 1), ("member3", 1)],
        tol.clone(),
    )
    .await;
    create_scheduled(&typed, "recovers", &[("member2", 1), ("member3", 1)], tol).await;
    let h = Harness::start::<TaintManager>(store, test_config());

    let added = now();
    set_taints(&typed, "member1", vec![not_ready_taint(added)]).await;
    set_taints(&typed, "member2", vec![not_ready_taint(added)]).await;
    tokio::time::sleep(Duration::from_millis(200)).await;
    set_taints(&typed, "member2", vec![]).await; // recovered before the toleration ran out

    wait_evicted(&typed, WAIT, "control", "member1").await;
    // Past the toleration of the recovered cluster too (same timeAdded) plus a margin.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let b = get_binding(&typed, "recovers").await;
    assert!(b.targets("member2"), "recovered cluster kept");
    assert!(
        b.spec.graceful_eviction_tasks.is_empty(),
        "{:?}",
        b.spec.graceful_eviction_tasks
    );
    h.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tm_untolerated_is_immediate_and_forever_is_never() {
    let (store, typed) = mem_with_clusters(&[("member1", true), ("member2", true)]).await;
    create_scheduled(
        &typed,
        "forever",
        &[("member1", 1)],
        vec![tolerate(TAINT_NOT_READY, None)],
    )
    .await;
    create_scheduled(
        &typed,
        "untolerated",
        &[("member1", 3), ("member2", 3)],
        vec![],
    )
    .await;
    let h = Harness::start::<TaintManager>(store, test_config());
    // A toleration without seconds tolerates forever (TM-8.3); no toleration → at once.
    set_taints(&typed, "member1", vec![not_ready_taint(now())]).await;
    wait_evicted(&typed, WAIT, "untolerated", "member1").await;
    let b = get_binding(&typed, "untolerated").await;
    assert_eq!(b.spec.graceful_eviction_tasks.len(), 1);
    tokio::time::sleep(Duration::from_millis(300)).await;
    let b = get_binding(&typed, "forever").await;
    assert!(b.targets("member1"));
    assert!(b.spec.graceful_eviction_tasks.is_empty());
    h.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tm_many_triggers_make_exactly_one_task_i4() {
    let (store, typed) = b_on_two_members(vec![tolerate(TAINT_NOT_READY, Some(1))]).await;
    let h = Harness::start::<TaintManager>(store, test_config());
    let added = now();
    // Several triggers for the same (cluster, binding): taint changes and binding changes.
    set_taints(&typed, "member1", vec![not_ready_taint(added)]).await;
    set_taints(
        &typed,
        "member1",
        vec![
            not_ready_taint(added),
            no_execute("example.com/maintenance", added),
        ],
    )
    .await;
    for i in 0..5 {
        loop {
            let old: v1::ResourceBinding = typed.get(&binding_key("b")).await.unwrap().unwrap();
            let mut new = old.clone();
            new.metadata
                .as_mut()
                .unwrap()
                .labels
                .insert("touch".into(), i.to_string());
            if typed.update(&old, new).await.is_ok() {
                break;
            }
        }
    }
    wait_evicted(&typed, WAIT, "b", "member1").await;
    // More triggers after the eviction: taint flaps, cluster status updates.
    set_taints(&typed, "member1", vec![not_ready_taint(added)]).await;
    set_ready(&typed, "member1", true).await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    let b = get_binding(&typed, "b").await;
    assert_eq!(
        b.spec.graceful_eviction_tasks.len(),
        1,
        "{:?}",
        b.spec.graceful_eviction_tasks
    );
    assert_eq!(b.spec.clusters, vec![TargetCluster::new("member2", 1)]);
    h.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tm_concurrent_scheduler_write_is_preserved_i5() {
    let (mem, typed) =
        mem_with_clusters(&[("member1", true), ("member2", true), ("member3", true)]).await;
    create_scheduled(&typed, "b", &[("member1", 2), ("member2", 2)], vec![]).await;
    // Between the taint manager's read and its CAS, a scheduler adds member3.
    let store = interpose_binding(mem, &typed, "b", |typed| async move {
        let old: v1::ResourceBinding = typed.get(&binding_key("b")).await.unwrap().unwrap();
        let mut new = old.clone();
        new.spec.as_mut().unwrap().clusters.push(v1::TargetCluster {
            name: "member3".into(),
            replicas: 2,
        });
        typed.update(&old, new).await.unwrap();
    });
    let h = start_tainting_member1(&typed, store.clone(), test_config()).await;
    wait_evicted(&typed, WAIT, "b", "member1").await;
    assert_eq!(store.fired(), 1, "the concurrent write happened");
    let b = get_binding(&typed, "b").await;
    assert_eq!(
        b.spec.clusters,
        vec![
            TargetCluster::new("member2", 2),
            TargetCluster::new("member3", 2)
        ],
        "the scheduler's change survived the conflict"
    );
    assert_eq!(b.spec.graceful_eviction_tasks.len(), 1);
    assert_eq!(b.spec.graceful_eviction_tasks[0].from_cluster, "member1");
    h.stop().await;
}

/// Regression (fault suite, I11 race): the NoExecute taint is removed between the taint
/// manager's decision (made on its cached cluster) and its compare-and-swap of the binding.
/// Before the fix the CAS compared only the binding's revision, and the binding was evicted
/// from a cluster that no longer carried the taint (seen 4 ms after the removal). Now the
/// eviction is guarded by the cluster's revision too: it fails, the key is decided again on
/// the new cluster, and nothing is evicted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tm_eviction_is_guarded_by_the_cluster_it_was_decided_on_i11() {
    let (mem, typed) = mem_with_clusters(&[("member1", true), ("member2", true)]).await;
    create_scheduled(&typed, "b", &[("member1", 2), ("member2", 2)], vec![]).await;
    // Right before the eviction's write: the member recovers and its taint is removed.
    let store = interpose_binding(mem, &typed, "b", |typed| async move {
        set_taints(&typed, "member1", vec![]).await;
    });
    let h = start_tainting_member1(&typed, store.clone(), test_config()).await;
    eventually(WAIT, "the eviction was attempted", || async {
        (store.fired() == 1).then_some(())
    })
    .await;
    // give a wrong eviction every chance to land
    tokio::time::sleep(Duration::from_millis(500)).await;
    let b = get_binding(&typed, "b").await;
    assert!(
        b.targets("member1") && b.spec.graceful_eviction_tasks.is_empty(),
        "I11: no eviction from a cluster whose taint was removed before the write: {:?}",
        b.spec
    );
    h.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tm_brake_no_eviction_when_every_cluster_is_unhealthy_i10() {
    let (store, typed) = mem_with_clusters(&[("member1", false), ("member2", false)]).await;
    create_scheduled(&typed, "b", &[("member1", 1), ("member2", 1)], vec![]).await;
    let mut config = test_config();
    config.stabilization_window = Duration::from_secs(1);
    let h = start_tainting_member1(&typed, store, config).await;
    tokio::time::sleep(Duration::from_millis(800)).await;
    let b = get_binding(&typed, "b").await;
    assert!(
        b.targets("member1"),
        "halted: nothing evicted while every cluster is down"
    );
    assert!(b.spec.graceful_eviction_tasks.is_empty());
    // One cluster comes back (1 of 2 unhealthy < 0.55): the brake lets go; the parked
    // eviction runs once the stabilisation window (A8, 1 s here) is over.
    let released = Instant::now();
    set_ready(&typed, "member2", true).await;
    wait_evicted(&typed, WAIT, "b", "member1").await;
    assert!(
        released.elapsed() >= Duration::from_millis(900),
        "A8: not before the stabilisation window ended ({:?})",
        released.elapsed()
    );
    wait_event(&typed, WAIT, "EvictionRateStabilising").await;
    h.stop().await;
}

/// Regression (fault suite, F10 / I10 / A8 "no herd"): every member failed and the brake held
/// evictions at zero; when they healed, three turned Ready a moment before the other two,
/// the unhealthy share fell from 5/5 to 2/5, the rate limit lifted, and every binding parked
/// on the two late members was evicted at once (Directly ones lost their old copy). Now the
/// end of the disruption restarts the toleration clocks and holds the secondary rate for the
/// stabilisation window, so the two late members lose nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tm_leaving_a_full_disruption_releases_no_herd_a8_i10() {
    let names = ["member1", "member2", "member3", "member4", "member5"];
    let (store, typed) = mem_with_clusters(&names.map(|n| (n, false))).await;
    const N: usize = 20;
    create_bindings(&typed, N, |i| {
        let (a, b) = (names[i % 5], names[(i + 1) % 5]);
        binding(&format!("b{i}"), &[(a, 1), (b, 1)], vec![])
    })
    .await;
    let from = store.current_revision().await.unwrap();
    let h = Harness::start::<TaintManager>(store.clone(), test_config()); // window 60 s
    for n in names {
        set_taints(&typed, n, vec![not_ready_taint(now())]).await;
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    // Three come back first (their taints go, then Ready) ...
    for n in &names[..3] {
        set_taints(&typed, n, vec![]).await;
        set_ready(&typed, n, true).await;
    }
    // ... the other two 100 ms later.
    tokio::time::sleep(Duration::from_millis(100)).await;
    for n in &names[3..] {
        set_taints(&typed, n, vec![]).await;
        set_ready(&typed, n, true).await;
    }
    tokio::time::sleep(Duration::from_millis(1000)).await;
    h.stop().await;
    // Every version of every binding since the start: none ever lost a target.
    let mut history = store.watch("bindings/", Some(from + 1)).await.unwrap();
    let until = store.current_revision().await.unwrap();
    let mut evictions = Vec::new();
    while let Ok(Some(Ok(ev))) = tokio::time::timeout(
        Duration::from_millis(500),
        futures::StreamExt::next(&mut history),
    )
    .await
    {
        let flotilla_store::WatchEvent::Batch(batch) = ev else {
            continue;
        };
        for e in batch.events {
            if let flotilla_store::Event::Put(kv) = e {
                let b: v1::ResourceBinding = flotilla_store::typed::decode(&kv).unwrap();
                let spec = b.spec.unwrap_or_default();
                if spec.clusters.len() < 2 || !spec.graceful_eviction_tasks.is_empty() {
                    evictions.push((kv.key.clone(), kv.mod_revision));
                }
            }
        }
        if batch.revision >= until {
            break;
        }
    }
    assert!(
        evictions.is_empty(),
        "I10/A8: evictions released by the end of the disruption: {evictions:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tm_rate_limit_spaces_evictions_a8() {
    let (store, typed) =
        mem_with_clusters(&[("member1", true), ("member2", true), ("member3", true)]).await;
    const N: usize = 6;
    create_bindings(&typed, N, |i| {
        binding(&format!("b{i}"), &[("member1", 1), ("member2", 1)], vec![])
    })
    .await;
    let mut config = test_config();
    config.rate.primary_rate = Some(4.0); // one eviction per 250 ms, burst 1
    let h = start_tainting_member1(&typed, store, config).await;
    let count = || count_off(&typed, "member1");
    eventually(WAIT, "first eviction", || async {
        (count().await >= 1).then_some(())
    })
    .await;
    let first = Instant::now();
    tokio::time::sleep(Duration::from_millis(500)).await;
    let after_half_second = count().await;
    // 1 + 2 per 500 ms at most (plus one for timer slack).
    assert!(
        after_half_second <= 4,
        "{after_half_second} evictions within 0.5 s at 4/s"
    );
    eventually(WAIT, "all evicted", || async {
        (count().await == N).then_some(())
    })
    .await;
    // N − 1 further evictions need at least (N − 1) × 250 ms.
    assert!(
        first.elapsed() >= Duration::from_millis(1200),
        "{N} evictions took only {:?}",
        first.elapsed()
    );
    h.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tm_directly_flag_and_disabled_switch() {
    let (store, typed) = b_on_two_members(vec![]).await;
    let mut config = test_config();
    config.purge_mode = PurgeMode::Directly;
    let h = start_tainting_member1(&typed, store.clone(), config).await;
    wait_evicted(&typed, WAIT, "b", "member1").await;
    let b = get_binding(&typed, "b").await;
    assert_eq!(
        b.spec.graceful_eviction_tasks[0].purge_mode,
        PurgeMode::Directly,
        "TM-9 flag"
    );
    h.stop().await;

    // --enable-no-execute-taint-eviction=false: nothing happens.
    let (store, typed) = b_on_two_members(vec![]).await;
    let mut config = test_config();
    config.eviction_enabled = false;
    let h = start_tainting_member1(&typed, store, config).await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(get_binding(&typed, "b").await.targets("member1"));
    h.stop().await;
}
