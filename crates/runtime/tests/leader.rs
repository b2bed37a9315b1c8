//! Leader election with fencing on `MemStore` under paused time: hand-over on resign and on
//! lease expiry, the deposed leader's fenced writes fail at the store (I8), and controllers
//! run only on the leader.

#![allow(clippy::unwrap_used)] // test helpers outside #[test] fns unwrap too

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use bytes::Bytes;
use flotilla_runtime::leader::{ElectionConfig, Fence, FencedStore, LeaderElector};
use flotilla_runtime::testing::FlakyStore;
use flotilla_runtime::{Action, Controller, QueueConfig, Shutdown, WorkQueue};
use flotilla_store::{
    Compare, CompareOp, Leadership, MemStore, Op, OpResult, Store, StoreError, Txn, TxnResponse,
};
use tokio::time::{Instant, sleep, timeout};

const PREFIX: &str = "leases/scheduler";
const TTL: Duration = Duration::from_secs(10);

fn config(identity: &str) -> ElectionConfig {
    ElectionConfig::new(identity).ttl(TTL)
}

/// `e`'s leadership, once it leads (within `within`).
pub(crate) async fn leader_within(e: &LeaderElector, within: Duration) -> Leadership {
    timeout(within, e.wait_until_leader())
        .await
        .expect("became leader in time")
        .expect("elector alive")
}

/// Puts `value` at `key` through `store` (no lease).
pub(crate) async fn put_v(
    store: &dyn Store,
    key: &str,
    value: &'static [u8],
) -> flotilla_store::Result<flotilla_store::Revision> {
    store.put(key, Bytes::from_static(value), None).await
}

/// Asserts that `result` is the `LeadershipLost` of a fenced write.
#[track_caller]
pub(crate) fn assert_lost<T: std::fmt::Debug>(result: flotilla_store::Result<T>) {
    match result {
        Err(StoreError::LeadershipLost { .. }) => {}
        other => panic!("not LeadershipLost: {other:?}"),
    }
}

/// Candidate `a` on `store`, once it leads (within 1 s), with the shutdown that stops it.
async fn a_leading(store: &Arc<dyn Store>) -> (Shutdown, LeaderElector, Leadership) {
    let shutdown = Shutdown::new();
    let a = LeaderElector::spawn(store.clone(), PREFIX, config("a"), &shutdown);
    let la = leader_within(&a, Duration::from_secs(1)).await;
    (shutdown, a, la)
}

/// [`a_leading`] on a fresh MemStore, and the store fenced by a's leadership.
async fn a_fenced_on_mem() -> (
    Arc<dyn Store>,
    Shutdown,
    LeaderElector,
    Leadership,
    FencedStore,
) {
    let store: Arc<dyn Store> = Arc::new(MemStore::new());
    let (shutdown, a, la) = a_leading(&store).await;
    let fenced = FencedStore::new(store.clone(), la.clone());
    (store, shutdown, a, la, fenced)
}

/// The value at `key` in `store` (it must exist).
pub(crate) async fn value_at(store: &dyn Store, key: &str) -> Bytes {
    store.get(key).await.unwrap().expect("the key exists").value
}

fn write(key: &str) -> Txn {
    Txn::new().and_then(Op::put(key, Bytes::from_static(b"v")))
}

/// Whether a write of `x` through `fence` commits on `store`.
async fn commits(fence: &Fence, store: &dyn Store) -> bool {
    fence.txn(store, write("x")).await.unwrap().is_committed()
}

#[tokio::test(start_paused = true)]
async fn resigning_hands_over_at_once_and_the_old_fence_fails() {
    let store: Arc<dyn Store> = Arc::new(MemStore::new());
    let (shutdown, a, la) = a_leading(&store).await;
    let b = LeaderElector::spawn(store.clone(), PREFIX, config("b"), &shutdown);
    sleep(Duration::from_secs(60)).await;
    assert!(a.is_leader(), "keep-alives hold the lease across many TTLs");
    assert!(!b.is_leader());
    let fence_a = a.fence().expect("a leads");
    assert_eq!(fence_a.leadership(), &la);
    assert!(commits(&fence_a, &*store).await);

    let t = Instant::now();
    a.resign().await;
    let lb = leader_within(&b, Duration::from_secs(1)).await;
    assert!(
        t.elapsed() < Duration::from_secs(1),
        "no wait for a TTL after a resign"
    );
    assert!(lb.fencing_revision > la.fencing_revision);
    assert_lost(fence_a.txn(&*store, write("x")).await);
    let fence_b = b.fence().unwrap();
    assert!(commits(&fence_b, &*store).await);
    shutdown.trigger();
}

#[tokio::test(start_paused = true)]
async fn a_partitioned_leader_steps_down_before_its_successor_takes_over() {
    let mem: Arc<dyn Store> = Arc::new(MemStore::new());
    let flaky = FlakyStore::new(mem.clone());
    let shutdown = Shutdown::new();
    let a = LeaderElector::spawn(flaky.clone(), PREFIX, config("a"), &shutdown);
    let la = leader_within(&a, Duration::from_secs(1)).await;
    let b = LeaderElector::spawn(mem.clone(), PREFIX, config("b"), &shutdown);
    sleep(Duration::from_secs(1)).await;
    let fenced_a = a.fenced_store(mem.clone());
    put_v(&fenced_a, "obj", b"1").await.unwrap();

    let mut a_rx = a.subscribe();
    let mut b_rx = b.subscribe();
    let t0 = Instant::now();
    flaky.partition();
    let a_down = async {
        a_rx.wait_for(Option::is_none).await.unwrap();
        t0.elapsed()
    };
    let b_up = async {
        b_rx.wait_for(Option::is_some).await.unwrap();
        t0.elapsed()
    };
    let (a_down, b_up) = timeout(Duration::from_secs(60), async {
        tokio::join!(a_down, b_up)
    })
    .await
    .expect("hand-over within a few TTLs");
    assert!(
        a_down <= TTL,
        "a stepped down by its local deadline: {a_down:?}"
    );
    // By its own clock, not by noticing b: a full safety margin (ttl / 10) before a's lease
    // could expire and b take over.
    assert!(
        a_down + TTL / 10 <= b_up,
        "a stepped down ({a_down:?}) a margin before b took over ({b_up:?})"
    );
    assert!(
        b_up <= TTL + Duration::from_secs(1),
        "b took over once a's lease expired: {b_up:?}"
    );

    // The old leader comes back: its writes fail at the store, whatever it believes.
    flaky.heal();
    assert_lost(Fence::new(la.clone()).txn(&*mem, write("obj")).await);
    assert_lost(
        FencedStore::new(mem.clone(), la)
            .put("obj", Bytes::from_static(b"2"), None)
            .await,
    );
    assert_lost(put_v(&fenced_a, "obj", b"3").await);
    // It campaigns again, behind b.
    sleep(Duration::from_secs(60)).await;
    assert!(b.is_leader());
    assert!(!a.is_leader());
    assert_eq!(value_at(&*mem, "obj").await, &b"1"[..]);
    shutdown.trigger();
}

#[tokio::test(start_paused = true)]
async fn a_deposed_leaders_write_fails_at_the_store_before_any_timer_fires() {
    let (store, shutdown, a, la, fenced) = a_fenced_on_mem().await;
    put_v(&fenced, "obj", b"1").await.unwrap();
    // The lease ends behind the leader's back (an operator, an etcd-side expiry it has not
    // noticed yet). No time passes: no timer of the elector can have fired.
    store.lease_revoke(la.lease).await.unwrap();
    assert_lost(put_v(&fenced, "obj", b"2").await);
    assert_lost(fenced.delete("obj").await);
    assert_eq!(value_at(&*store, "obj").await, &b"1"[..]);
    // And the elector notices through its key watch, without waiting for a TTL.
    let mut rx = a.subscribe();
    timeout(Duration::from_millis(100), rx.wait_for(Option::is_none))
        .await
        .expect("stepped down at once")
        .unwrap();
    shutdown.trigger();
}

#[tokio::test(start_paused = true)]
async fn fenced_writes_keep_their_own_compares_and_results() {
    let (store, shutdown, _a, la, fenced) = a_fenced_on_mem().await;
    let r1 = put_v(&fenced, "obj", b"1").await.unwrap();
    // The caller's compare fails, the fence holds: a plain Failed, aligned with the caller's
    // compares.
    let stale = Txn::new()
        .when(Compare::mod_revision("obj", CompareOp::Equal, r1 - 1))
        .and_then(Op::put("obj", Bytes::from_static(b"2")));
    match fenced.txn(stale).await.unwrap() {
        TxnResponse::Failed {
            failed, current, ..
        } => {
            assert_eq!(failed, vec![0]);
            assert_eq!(current.len(), 1);
            assert_eq!(current[0].as_ref().unwrap().mod_revision, r1);
        }
        other => panic!("expected a failed compare, got {other:?}"),
    }
    assert!(matches!(
        fenced.compare_and_put("obj", r1 - 1, Bytes::from_static(b"2")).await,
        Err(StoreError::Conflict { actual_revision, .. }) if actual_revision == r1
    ));
    assert!(matches!(
        fenced.create("obj", Bytes::from_static(b"2"), None).await,
        Err(StoreError::AlreadyExists { .. })
    ));
    let r2 = fenced
        .compare_and_put("obj", r1, Bytes::from_static(b"2"))
        .await
        .unwrap();
    assert!(r2 > r1);
    let deleted = fenced.delete("obj").await.unwrap();
    assert_eq!(deleted.prev.unwrap().value, Bytes::from_static(b"2"));
    assert!(fenced.delete("obj").await.unwrap().prev.is_none());
    // Reads pass through.
    let txn = Fence::new(la).guard(Txn::new().and_then(Op::get("obj")));
    assert_eq!(txn.compares.len(), 1);
    match store.txn(txn).await.unwrap() {
        TxnResponse::Committed { results, .. } => assert_eq!(results, vec![OpResult::Get(None)]),
        other => panic!("{other:?}"),
    }
    shutdown.trigger();
}

#[tokio::test(start_paused = true)]
async fn only_the_leader_runs_its_controller() {
    let store: Arc<dyn Store> = Arc::new(MemStore::new());
    let shutdown = Shutdown::new();
    let runs = [Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0))];
    let mut electors = Vec::new();
    let mut queues = Vec::new();
    for (i, id) in ["a", "b"].into_iter().enumerate() {
        let elector = LeaderElector::spawn(store.clone(), PREFIX, config(id), &shutdown);
        if i == 0 {
            leader_within(&elector, Duration::from_secs(1)).await;
        }
        let queue = WorkQueue::<String>::new(QueueConfig::new(format!("ctl-{id}")));
        let ctx = Arc::new((runs[i].clone(), elector.fenced_store(store.clone())));
        let controller = Controller::new(
            queue.clone(),
            |key: String, ctx: Arc<(Arc<AtomicUsize>, FencedStore)>| async move {
                ctx.0.fetch_add(1, Ordering::SeqCst);
                ctx.1.put(&key, Bytes::from_static(b"done"), None).await?;
                Ok::<_, StoreError>(Action::requeue(Duration::from_secs(5)))
            },
            |_: &String, _: &StoreError, _: &(Arc<AtomicUsize>, FencedStore)| {
                Action::requeue(Duration::from_secs(1))
            },
        )
        .leader(elector.subscribe());
        tokio::spawn(controller.run(ctx, shutdown.clone()));
        queue.add("objects/1".into());
        electors.push(elector);
        queues.push(queue);
    }
    sleep(Duration::from_secs(21)).await;
    assert_eq!(
        runs[0].load(Ordering::SeqCst),
        5,
        "the leader reconciles every 5 s"
    );
    assert_eq!(
        runs[1].load(Ordering::SeqCst),
        0,
        "the follower reconciles nothing"
    );
    let a = electors.remove(0);
    a.resign().await;
    sleep(Duration::from_secs(11)).await;
    assert_eq!(
        runs[0].load(Ordering::SeqCst),
        5,
        "a stopped with its leadership"
    );
    assert!(runs[1].load(Ordering::SeqCst) >= 2, "b took over the work");
    shutdown.trigger();
}
