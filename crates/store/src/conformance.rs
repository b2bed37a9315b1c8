//! The one conformance suite every [`Store`] must pass (feature `test-util`). Each case is
//! an `async fn(&Ctx)`; `crates/store/tests/` runs every case on `MemStore` and on a real
//! etcd (`mem_<case>`, `etcd_<case>`), and any other backend can do the same.
//!
//! Cases assume a store (or namespace) of their own. [`compaction_then_watch_is_compacted`]
//! compacts, which on etcd is global: run it on a dedicated etcd
//! ([`crate::testing::EtcdServer::dedicated`]).

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;

use crate::Store;
use crate::clock::ManualClock;
use crate::election::Election;
use crate::error::StoreError;
use crate::mem::MemStore;
use crate::types::{
    Compare, CompareOp, Event, MAX_TXN_OPS, Op, OpResult, RangeRequest, Revision, Txn, TxnResponse,
    WatchBatch, WatchEvent,
};
use crate::watch::WatchStream;

/// How long a case waits for something it expects (a watch event, a campaign).
pub const WAIT: Duration = Duration::from_secs(15);

/// Asserts that a backend's test file (`source`) runs every case: for each case name, `entry`
/// gives the text that names the case's test in that file.
pub fn assert_every_case_in(source: &str, backend: &str, entry: impl Fn(&str) -> String) {
    for case in CASES {
        assert!(
            source.contains(&entry(case)),
            "conformance case {case} is not run on {backend}"
        );
    }
}

/// Every case's name, in the order the test files run them (for listings and checks).
pub const CASES: &[&str] = &[
    "get_put_delete",
    "range_pagination",
    "range_at_revision",
    "create_if_absent",
    "cas_conflict",
    "txn_all_or_nothing",
    "txn_op_limit",
    "watch_ordering",
    "watch_resume_from_revision",
    "watch_sees_deletes",
    "watch_progress",
    "compaction_then_watch_is_compacted",
    "lease_expiry_removes_keys",
    "lease_revoke_and_keep_alive",
    "election_handover",
];

/// What a case runs against: a store, and how time passes for it.
#[derive(Clone, Debug)]
pub struct Ctx {
    store: Arc<dyn Store>,
    clock: Option<ManualClock>,
}

// === impl Ctx ===

impl Ctx {
    /// A store on real time (etcd): leases expire while the case waits.
    pub fn new(store: Arc<dyn Store>) -> Self {
        Self { store, clock: None }
    }

    /// A store whose leases follow `clock`; the case advances it.
    pub fn with_manual_clock(store: Arc<dyn Store>, clock: ManualClock) -> Self {
        Self {
            store,
            clock: Some(clock),
        }
    }

    /// A fresh `MemStore` on a manual clock.
    pub fn mem() -> Self {
        let clock = ManualClock::new();
        Self::with_manual_clock(
            Arc::new(MemStore::with_clock(Arc::new(clock.clone()))),
            clock,
        )
    }

    /// The store under test.
    pub fn store(&self) -> &Arc<dyn Store> {
        &self.store
    }

    /// Lets `d` pass: advances a manual clock; on real time it does nothing, because the
    /// case then waits (with a timeout) for what the passing time causes.
    pub fn pass_time(&self, d: Duration) {
        if let Some(clock) = &self.clock {
            clock.advance(d);
        }
    }
}

fn b(s: &str) -> Bytes {
    Bytes::copy_from_slice(s.as_bytes())
}

/// The next batch (skipping progress notifications), failing the case after [`WAIT`].
pub async fn next_batch(w: &mut WatchStream) -> WatchBatch {
    loop {
        let item = tokio::time::timeout(WAIT, w.next())
            .await
            .expect("a watch event within the wait")
            .expect("the watch is still open")
            .expect("no watch error");
        if let WatchEvent::Batch(batch) = item {
            return batch;
        }
    }
}

async fn next_item(w: &mut WatchStream) -> Result<WatchEvent, StoreError> {
    tokio::time::timeout(WAIT, w.next())
        .await
        .expect("a watch item within the wait")
        .expect("the watch is still open")
}

async fn watch_from_next(s: &dyn Store, prefix: &str) -> (WatchStream, Revision) {
    let rev = s.current_revision().await.unwrap();
    (s.watch(prefix, Some(rev + 1)).await.unwrap(), rev)
}

/// Put, get, overwrite, delete: revisions and versions as etcd keeps them.
pub async fn get_put_delete(ctx: &Ctx) {
    let s = ctx.store().as_ref();
    assert!(s.get("a").await.unwrap().is_none());
    let r1 = s.put("a", b("1"), None).await.unwrap();
    let kv = s.get("a").await.unwrap().unwrap();
    assert_eq!(
        (
            kv.key.as_str(),
            kv.value.as_ref(),
            kv.create_revision,
            kv.mod_revision,
            kv.version
        ),
        ("a", &b"1"[..], r1, r1, 1)
    );
    assert_eq!(kv.lease, None);
    let r2 = s.put("a", b("2"), None).await.unwrap();
    assert!(r2 > r1);
    let kv = s.get("a").await.unwrap().unwrap();
    assert_eq!(
        (kv.create_revision, kv.mod_revision, kv.version),
        (r1, r2, 2)
    );
    let del = s.delete("a").await.unwrap();
    assert!(del.revision > r2);
    assert_eq!(del.prev.unwrap().value, b("2"));
    assert!(s.get("a").await.unwrap().is_none());
    let again = s.delete("a").await.unwrap();
    assert!(
        again.prev.is_none(),
        "deleting an absent key deletes nothing"
    );
    let r3 = s.put("a", b("3"), None).await.unwrap();
    let kv = s.get("a").await.unwrap().unwrap();
    assert_eq!(
        (kv.create_revision, kv.version),
        (r3, 1),
        "re-created key starts over"
    );
    assert!(matches!(
        s.put("", b("x"), None).await,
        Err(StoreError::InvalidArgument(_))
    ));
}

/// Pages of a range are ordered, complete, and pinned to one snapshot.
pub async fn range_pagination(ctx: &Ctx) {
    let s = ctx.store().as_ref();
    for i in 0..10 {
        s.put(&format!("p/{i:02}"), b(&format!("v{i}")), None)
            .await
            .unwrap();
    }
    s.put("p", b("not under p/"), None).await.unwrap();
    s.put("q/0", b("other prefix"), None).await.unwrap();
    let req = RangeRequest::prefix("p/").with_limit(3);
    let first = s.range(req.clone()).await.unwrap();
    assert_eq!(first.kvs.len(), 3);
    assert!(first.more);
    // Changes after the first page must not show up in later pages.
    s.put("p/05", b("changed"), None).await.unwrap();
    s.put("p/99", b("new"), None).await.unwrap();
    let mut keys: Vec<String> = first.kvs.iter().map(|kv| kv.key.clone()).collect();
    let mut values = Vec::new();
    let mut next = req.next_page(&first);
    let mut pages = 1;
    while let Some(r) = next {
        let page = s.range(r.clone()).await.unwrap();
        assert_eq!(
            page.revision, first.revision,
            "pages are pinned to the first revision"
        );
        assert!(page.kvs.len() <= 3);
        keys.extend(page.kvs.iter().map(|kv| kv.key.clone()));
        values.extend(page.kvs.iter().map(|kv| kv.value.clone()));
        next = r.next_page(&page);
        pages += 1;
    }
    let expected: Vec<String> = (0..10).map(|i| format!("p/{i:02}")).collect();
    assert_eq!(keys, expected);
    assert_eq!(pages, 4);
    assert!(values.contains(&b("v5")) && !values.contains(&b("changed")));
    let (all, rev) = s.list("p/", 4).await.unwrap();
    assert_eq!(all.len(), 11, "a fresh list sees the new key");
    assert!(rev > first.revision);
    let unlimited = s.range(RangeRequest::prefix("p/")).await.unwrap();
    assert_eq!(unlimited.kvs.len(), 11);
    assert!(!unlimited.more);
}

/// A range at a past revision sees the store as it was.
pub async fn range_at_revision(ctx: &Ctx) {
    let s = ctx.store().as_ref();
    let r1 = s.put("h/a", b("1"), None).await.unwrap();
    let r2 = s.put("h/a", b("2"), None).await.unwrap();
    let r3 = s.put("h/b", b("1"), None).await.unwrap();
    let r4 = s.delete("h/a").await.unwrap().revision;
    let at = |rev| async move {
        let resp = s
            .range(RangeRequest::prefix("h/").at_revision(rev))
            .await
            .unwrap();
        assert_eq!(resp.revision, rev);
        resp.kvs
            .into_iter()
            .map(|kv| format!("{}={}", kv.key, String::from_utf8_lossy(&kv.value)))
            .collect::<Vec<_>>()
    };
    assert_eq!(at(r1).await, ["h/a=1"]);
    assert_eq!(at(r2).await, ["h/a=2"]);
    assert_eq!(at(r3).await, ["h/a=2", "h/b=1"]);
    assert_eq!(at(r4).await, ["h/b=1"]);
    let now = s.range(RangeRequest::prefix("h/")).await.unwrap();
    assert_eq!(now.kvs.len(), 1);
    assert!(now.revision >= r4);
    let future = s
        .range(RangeRequest::prefix("h/").at_revision(now.revision + 1000))
        .await;
    assert!(
        matches!(future, Err(StoreError::FutureRevision { .. })),
        "{future:?}"
    );
}

/// Create-if-absent is a compare on `create_revision == 0`.
pub async fn create_if_absent(ctx: &Ctx) {
    let s = ctx.store().as_ref();
    let rev = s.create("c", b("first"), None).await.unwrap();
    let err = s.create("c", b("second"), None).await.unwrap_err();
    assert!(
        matches!(&err, StoreError::AlreadyExists { key } if key == "c"),
        "{err}"
    );
    assert!(err.is_conflict());
    let resp = s
        .txn(
            Txn::new()
                .when(Compare::absent("c"))
                .and_then(Op::put("c", b("third"))),
        )
        .await
        .unwrap();
    let TxnResponse::Failed {
        failed, current, ..
    } = resp
    else {
        panic!("create of an existing key must fail");
    };
    assert_eq!(failed, [0]);
    let kv = current[0].as_ref().unwrap();
    assert_eq!((kv.value.clone(), kv.create_revision), (b("first"), rev));
    assert_eq!(s.get("c").await.unwrap().unwrap().value, b("first"));
}

/// Compare-and-swap on a stale mod revision fails, naming the failed compares and returning
/// the compared keys' current values.
pub async fn cas_conflict(ctx: &Ctx) {
    let s = ctx.store().as_ref();
    let r1 = s.put("k", b("1"), None).await.unwrap();
    let r2 = s.compare_and_put("k", r1, b("2")).await.unwrap();
    assert!(r2 > r1);
    let err = s.compare_and_put("k", r1, b("3")).await.unwrap_err();
    assert!(
        matches!(&err, StoreError::Conflict { key, expected_revision, actual_revision }
            if key == "k" && *expected_revision == r1 && *actual_revision == r2),
        "{err}"
    );
    assert!(!err.is_retryable());
    assert_eq!(s.get("k").await.unwrap().unwrap().value, b("2"));

    // A batch of independent CAS writes: each op keeps its own compare.
    let ra = s.put("a", b("a1"), None).await.unwrap();
    let _rb = s.put("b", b("b1"), None).await.unwrap();
    s.put("c", b("c1"), None).await.unwrap();
    let txn = Txn::new()
        .when(Compare::mod_revision("a", CompareOp::Equal, ra))
        .when(Compare::mod_revision("b", CompareOp::Equal, r1))
        .when(Compare::absent("c"))
        .and_then(Op::put("a", b("a2")))
        .and_then(Op::put("b", b("b2")))
        .and_then(Op::put("c", b("c2")));
    let TxnResponse::Failed {
        failed, current, ..
    } = s.txn(txn).await.unwrap()
    else {
        panic!("stale compares must fail the transaction");
    };
    assert_eq!(failed, [1, 2]);
    let values: Vec<Bytes> = current
        .iter()
        .map(|kv| kv.as_ref().unwrap().value.clone())
        .collect();
    assert_eq!(values, [b("a1"), b("b1"), b("c1")]);
    assert_eq!(
        s.get("a").await.unwrap().unwrap().mod_revision,
        ra,
        "nothing was written"
    );

    // Ordering compares.
    let ok = Txn::new()
        .when(Compare::mod_revision("k", CompareOp::Greater, r1))
        .when(Compare::version("k", CompareOp::Less, 3))
        .when(Compare::value("k", CompareOp::Equal, b("2")))
        .when(Compare::create_revision("k", CompareOp::NotEqual, 0))
        .and_then(Op::put("k", b("4")));
    assert!(s.txn(ok).await.unwrap().is_committed());
}

/// A multi-op transaction applies every op at one revision, or none of them.
pub async fn txn_all_or_nothing(ctx: &Ctx) {
    let s = ctx.store().as_ref();
    let rx = s.put("t/x", b("x0"), None).await.unwrap();
    s.put("t/z", b("z0"), None).await.unwrap();
    let txn = Txn::new()
        .when(Compare::mod_revision("t/x", CompareOp::Equal, rx))
        .when(Compare::absent("t/y"))
        .and_then(Op::put("t/x", b("x1")))
        .and_then(Op::put("t/y", b("y1")))
        .and_then(Op::delete("t/z"))
        .and_then(Op::get("t/x"))
        .and_then(Op::delete("t/never"));
    let TxnResponse::Committed { revision, results } = s.txn(txn).await.unwrap() else {
        panic!("all compares hold");
    };
    assert_eq!(results.len(), 5);
    assert_eq!(results[0], OpResult::Put);
    assert_eq!(results[2], OpResult::Delete { deleted: true });
    assert_eq!(results[4], OpResult::Delete { deleted: false });
    let OpResult::Get(Some(x)) = &results[3] else {
        panic!("get inside the txn returns the key");
    };
    assert_eq!(
        (x.value.clone(), x.mod_revision),
        (b("x1"), revision),
        "reads see earlier ops"
    );
    let y = s.get("t/y").await.unwrap().unwrap();
    assert_eq!(
        y.mod_revision, revision,
        "every write of a transaction shares its revision"
    );
    assert!(s.get("t/z").await.unwrap().is_none());

    let stale = Txn::new()
        .when(Compare::mod_revision("t/x", CompareOp::Equal, rx))
        .and_then(Op::put("t/a", b("1")))
        .and_then(Op::put("t/b", b("1")))
        .and_then(Op::delete("t/y"));
    assert!(!s.txn(stale).await.unwrap().is_committed());
    assert!(s.get("t/a").await.unwrap().is_none());
    assert!(s.get("t/y").await.unwrap().is_some());
    // The store may be shared with other writers, so the global revision can move; what
    // must not move is anything under this test's prefix.
    let after = s.range(RangeRequest::prefix("t/")).await.unwrap();
    assert!(
        after.kvs.iter().all(|kv| kv.mod_revision <= revision),
        "a failed txn writes nothing: {:?}",
        after
            .kvs
            .iter()
            .map(|kv| (&kv.key, kv.mod_revision))
            .collect::<Vec<_>>()
    );
    assert!(s.get("t/b").await.unwrap().is_none());

    let dup = Txn::new()
        .and_then(Op::put("t/d", b("1")))
        .and_then(Op::put("t/d", b("2")));
    assert!(matches!(
        s.txn(dup).await,
        Err(StoreError::InvalidArgument(_))
    ));
}

/// 128 operations commit in one revision; 129 are refused before anything is sent.
pub async fn txn_op_limit(ctx: &Ctx) {
    let s = ctx.store().as_ref();
    let full = Txn {
        compares: (0..MAX_TXN_OPS)
            .map(|i| Compare::absent(format!("n/{i:03}")))
            .collect(),
        success: (0..MAX_TXN_OPS)
            .map(|i| Op::put(format!("n/{i:03}"), b("v")))
            .collect(),
    };
    let TxnResponse::Committed { revision, .. } = s.txn(full).await.unwrap() else {
        panic!("128 guarded puts fit in one transaction");
    };
    let resp = s.range(RangeRequest::prefix("n/")).await.unwrap();
    assert_eq!(resp.kvs.len(), MAX_TXN_OPS);
    assert!(resp.kvs.iter().all(|kv| kv.mod_revision == revision));
    let too_many = Txn {
        compares: vec![],
        success: (0..=MAX_TXN_OPS)
            .map(|i| Op::put(format!("m/{i:03}"), b("v")))
            .collect(),
    };
    assert!(matches!(
        s.txn(too_many).await,
        Err(StoreError::TooManyOps { ops: 129, max: 128 })
    ));
    let too_many_compares = Txn {
        compares: (0..=MAX_TXN_OPS)
            .map(|i| Compare::absent(format!("m/{i:03}")))
            .collect(),
        success: vec![Op::put("m/x", b("v"))],
    };
    assert!(matches!(
        s.txn(too_many_compares).await,
        Err(StoreError::TooManyOps { .. })
    ));
    assert!(
        s.range(RangeRequest::prefix("m/"))
            .await
            .unwrap()
            .kvs
            .is_empty()
    );
}

/// A watch yields one batch per revision, in order, with a transaction's events together,
/// and nothing from outside its prefix.
pub async fn watch_ordering(ctx: &Ctx) {
    let s = ctx.store().as_ref();
    let (mut w, _) = watch_from_next(s, "w/").await;
    let r1 = s.put("w/a", b("1"), None).await.unwrap();
    let txn = Txn::new()
        .and_then(Op::put("w/b", b("1")))
        .and_then(Op::put("w/c", b("1")))
        .and_then(Op::delete("w/a"));
    let r2 = s.txn(txn).await.unwrap().revision();
    s.put("elsewhere", b("1"), None).await.unwrap();
    let r4 = s.put("w/d", b("1"), None).await.unwrap();

    let b1 = next_batch(&mut w).await;
    assert_eq!(b1.revision, r1);
    assert!(matches!(&b1.events[..], [Event::Put(kv)] if kv.key == "w/a"));
    let b2 = next_batch(&mut w).await;
    assert_eq!(b2.revision, r2);
    let keys: Vec<(&str, bool)> = b2
        .events
        .iter()
        .map(|e| (e.key(), matches!(e, Event::Put(_))))
        .collect();
    assert_eq!(keys, [("w/b", true), ("w/c", true), ("w/a", false)]);
    assert!(b2.events.iter().all(|e| e.mod_revision() == r2));
    let b3 = next_batch(&mut w).await;
    assert_eq!(b3.revision, r4, "the write outside the prefix is not seen");
    assert_eq!(b3.events.len(), 1);
}

/// A watch from a past revision replays history from there, then follows live changes.
pub async fn watch_resume_from_revision(ctx: &Ctx) {
    let s = ctx.store().as_ref();
    let _r1 = s.put("r/1", b("1"), None).await.unwrap();
    let r2 = s.put("r/2", b("2"), None).await.unwrap();
    let r3 = s.put("r/3", b("3"), None).await.unwrap();
    let mut w = s.watch("r/", Some(r2)).await.unwrap();
    let first = next_batch(&mut w).await;
    assert_eq!(
        first.revision, r2,
        "replay starts at the requested revision"
    );
    assert_eq!(first.events[0].key(), "r/2");
    assert_eq!(next_batch(&mut w).await.revision, r3);
    let r4 = s.put("r/4", b("4"), None).await.unwrap();
    let live = next_batch(&mut w).await;
    assert_eq!((live.revision, live.events[0].key()), (r4, "r/4"));

    // From a revision that does not exist yet: nothing before it is delivered.
    let now = s.current_revision().await.unwrap();
    let mut ahead = s.watch("r/", Some(now + 3)).await.unwrap();
    let mut writes = Vec::new();
    for k in ["r/5", "r/6", "r/7"] {
        writes.push((s.put(k, b(k), None).await.unwrap(), k));
    }
    // On a shared etcd other writers also take revisions: expect the first of ours at or
    // after `now + 3`.
    let (rev, key) = writes
        .iter()
        .find(|(rev, _)| *rev >= now + 3)
        .copied()
        .expect("three writes after `now` reach `now + 3`");
    let first = next_batch(&mut ahead).await;
    assert_eq!((first.revision, first.events[0].key()), (rev, key));
}

/// Deletes reach watchers with the deleted key, its last value and the delete's revision.
pub async fn watch_sees_deletes(ctx: &Ctx) {
    let s = ctx.store().as_ref();
    s.put("d/a", b("last"), None).await.unwrap();
    let (mut w, _) = watch_from_next(s, "d/").await;
    let del = s.delete("d/a").await.unwrap();
    let batch = next_batch(&mut w).await;
    assert_eq!(batch.revision, del.revision);
    let [
        Event::Delete {
            key,
            prev,
            mod_revision,
        },
    ] = &batch.events[..]
    else {
        panic!("expected one delete, got {:?}", batch.events);
    };
    assert_eq!((key.as_str(), *mod_revision), ("d/a", del.revision));
    if let Some(prev) = prev {
        assert_eq!(prev.value, b("last"));
    }
}

/// A progress request on a quiet prefix reports how far the watch has caught up.
pub async fn watch_progress(ctx: &Ctx) {
    let s = ctx.store().as_ref();
    let mut w = s.watch("quiet/", None).await.unwrap();
    let rev = s.put("busy", b("1"), None).await.unwrap();
    w.request_progress().unwrap();
    match next_item(&mut w).await.unwrap() {
        WatchEvent::Progress { revision } => assert!(revision >= rev, "{revision} < {rev}"),
        other => panic!("expected progress, got {other:?}"),
    }
    let r2 = s.put("quiet/x", b("1"), None).await.unwrap();
    let batch = next_batch(&mut w).await;
    assert_eq!(
        batch.revision, r2,
        "events after a progress notification still arrive"
    );

    // While a watch replays history, progress never runs ahead of what it delivered.
    let mut replayed = Vec::new();
    for i in 0..3 {
        replayed.push(s.put(&format!("hist/{i}"), b("1"), None).await.unwrap());
    }
    s.put("after", b("1"), None).await.unwrap();
    let mut w = s.watch("hist/", Some(replayed[0])).await.unwrap();
    w.request_progress().unwrap();
    let (mut highest, mut batches, mut progress_after_replay) = (0, Vec::new(), false);
    while !progress_after_replay {
        let item = next_item(&mut w).await.unwrap();
        assert!(
            item.revision() >= highest,
            "{item:?} went back from {highest}"
        );
        highest = item.revision();
        match item {
            WatchEvent::Batch(b) => {
                assert!(!batches.contains(&b.revision));
                batches.push(b.revision);
                if b.revision == replayed[2] {
                    w.request_progress().unwrap();
                }
            }
            WatchEvent::Progress { revision } => {
                // Every replayed revision at or below the progress mark came before it.
                for r in &replayed {
                    assert!(
                        *r > revision || batches.contains(r),
                        "progress {revision} skipped {r}"
                    );
                }
                progress_after_replay = batches.len() == replayed.len();
            }
        }
    }
    assert_eq!(batches, replayed);
}

/// After a compaction, reads and watches below it fail with `Compacted` (the caller
/// re-lists); at or above it they work. Needs a dedicated store on etcd.
pub async fn compaction_then_watch_is_compacted(ctx: &Ctx) {
    let s = ctx.store().as_ref();
    let r1 = s.put("c/1", b("1"), None).await.unwrap();
    s.put("c/2", b("2"), None).await.unwrap();
    let r3 = s.put("c/3", b("3"), None).await.unwrap();
    let r4 = s.put("c/4", b("4"), None).await.unwrap();
    s.compact(r3).await.unwrap();

    let mut w = s.watch("c/", Some(r1)).await.unwrap();
    match next_item(&mut w).await {
        Err(StoreError::Compacted { compact_revision }) => assert_eq!(compact_revision, r3),
        other => panic!("expected Compacted, got {other:?}"),
    }
    assert!(w.next().await.is_none(), "Compacted ends the watch");
    assert!(matches!(
        s.range(RangeRequest::prefix("c/").at_revision(r1)).await,
        Err(StoreError::Compacted { .. })
    ));
    let at = s
        .range(RangeRequest::prefix("c/").at_revision(r3))
        .await
        .unwrap();
    assert_eq!(
        at.kvs.len(),
        3,
        "the compaction revision itself stays readable"
    );
    let mut w = s.watch("c/", Some(r3 + 1)).await.unwrap();
    assert_eq!(next_batch(&mut w).await.revision, r4);
    assert!(matches!(
        s.compact(r1).await,
        Err(StoreError::Compacted { .. })
    ));
}

/// Keys put with a lease vanish when it expires, and watchers see the deletes.
pub async fn lease_expiry_removes_keys(ctx: &Ctx) {
    let s = ctx.store().as_ref();
    let lease = s.lease_grant(Duration::from_secs(1)).await.unwrap();
    assert!(lease.ttl >= Duration::from_secs(1));
    s.put("l/a", b("1"), Some(lease.id)).await.unwrap();
    s.put("l/b", b("1"), Some(lease.id)).await.unwrap();
    s.put("l/c", b("no lease"), None).await.unwrap();
    assert_eq!(s.get("l/a").await.unwrap().unwrap().lease, Some(lease.id));
    let (mut w, _) = watch_from_next(s, "l/").await;
    ctx.pass_time(lease.ttl + Duration::from_secs(1));
    let mut deleted = Vec::new();
    while deleted.len() < 2 {
        for e in next_batch(&mut w).await.events {
            match e {
                Event::Delete { key, .. } => deleted.push(key),
                Event::Put(kv) => panic!("unexpected put of {}", kv.key),
            }
        }
    }
    deleted.sort();
    assert_eq!(deleted, ["l/a", "l/b"]);
    assert!(s.get("l/a").await.unwrap().is_none());
    assert!(s.get("l/c").await.unwrap().is_some());
    assert!(matches!(
        s.lease_keep_alive(lease.id).await,
        Err(StoreError::LeaseNotFound { .. })
    ));
    assert!(matches!(
        s.put("l/d", b("1"), Some(lease.id)).await,
        Err(StoreError::LeaseNotFound { .. })
    ));
}

/// Keep-alive refreshes a live lease; revoke deletes its keys at once.
pub async fn lease_revoke_and_keep_alive(ctx: &Ctx) {
    let s = ctx.store().as_ref();
    let lease = s.lease_grant(Duration::from_secs(30)).await.unwrap();
    s.put("v/a", b("1"), Some(lease.id)).await.unwrap();
    let ttl = s.lease_keep_alive(lease.id).await.unwrap();
    assert!(ttl >= Duration::from_secs(29), "{ttl:?}");
    let (mut w, _) = watch_from_next(s, "v/").await;
    s.lease_revoke(lease.id).await.unwrap();
    let batch = next_batch(&mut w).await;
    assert!(matches!(&batch.events[..], [Event::Delete { key, .. }] if key == "v/a"));
    assert!(s.get("v/a").await.unwrap().is_none());
    assert!(matches!(
        s.lease_revoke(lease.id).await,
        Err(StoreError::LeaseNotFound { .. })
    ));
}

/// Waits until the candidate key of `lease` exists (through a watch, not a poll).
async fn wait_for_key(s: &dyn Store, w: &mut WatchStream, key: &str) {
    if s.get(key).await.unwrap().is_some() {
        return;
    }
    loop {
        let batch = next_batch(w).await;
        if batch
            .events
            .iter()
            .any(|e| matches!(e, Event::Put(kv) if kv.key == key))
        {
            return;
        }
    }
}

/// Election hand-over: the next candidate leads when the leader resigns or its lease dies,
/// and a deposed leader's fenced writes fail.
pub async fn election_handover(ctx: &Ctx) {
    let store = ctx.store().clone();
    let s = store.as_ref();
    let election = Election::new(store.clone(), "leases/test");
    let (la, lb, lc) = (
        s.lease_grant(Duration::from_secs(60)).await.unwrap(),
        s.lease_grant(Duration::from_secs(60)).await.unwrap(),
        s.lease_grant(Duration::from_secs(60)).await.unwrap(),
    );
    let (mut candidates, _) = watch_from_next(s, "leases/test/").await;
    let a = election.campaign(b("a"), la.id).await.unwrap();
    assert_eq!(a.key, election.candidate_key(la.id));
    assert_eq!(
        s.get(&a.key).await.unwrap().unwrap().create_revision,
        a.fencing_revision
    );
    assert_eq!(election.leader().await.unwrap().unwrap().value, b("a"));
    let mut observer = election.observe().await.unwrap();
    assert_eq!(observer.leader().unwrap().value, b("a"));

    let e = election.clone();
    let mut b_campaign = tokio::spawn(async move { e.campaign(b("b"), lb.id).await });
    wait_for_key(s, &mut candidates, &election.candidate_key(lb.id)).await;
    assert!(
        !b_campaign.is_finished(),
        "b cannot lead while a's key exists"
    );
    assert_eq!(election.leader().await.unwrap().unwrap().value, b("a"));

    assert!(election.resign(&a).await.unwrap());
    let b_lead = tokio::time::timeout(WAIT, &mut b_campaign)
        .await
        .expect("b leads after a resigns")
        .unwrap()
        .unwrap();
    assert!(b_lead.fencing_revision > a.fencing_revision);
    let seen = tokio::time::timeout(WAIT, observer.changed())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(seen.unwrap().value, b("b"));

    let write = |who: &str| Txn::new().and_then(Op::put("leader-state", b(who)));
    let TxnResponse::Failed { failed, .. } = s.txn(a.fence(write("a"))).await.unwrap() else {
        panic!("a deposed leader's fenced write must fail");
    };
    assert_eq!(failed, [0]);
    assert!(
        s.txn(b_lead.fence(write("b")))
            .await
            .unwrap()
            .is_committed()
    );

    // Now b's lease dies: c takes over, b is fenced off.
    let e = election.clone();
    let c_campaign = tokio::spawn(async move { e.campaign(b("c"), lc.id).await });
    wait_for_key(s, &mut candidates, &election.candidate_key(lc.id)).await;
    s.lease_revoke(lb.id).await.unwrap();
    let c_lead = tokio::time::timeout(WAIT, c_campaign)
        .await
        .expect("c leads after b's lease ends")
        .unwrap()
        .unwrap();
    assert!(c_lead.fencing_revision > b_lead.fencing_revision);
    assert!(
        !s.txn(b_lead.fence(write("b")))
            .await
            .unwrap()
            .is_committed()
    );
    assert!(
        s.txn(c_lead.fence(write("c")))
            .await
            .unwrap()
            .is_committed()
    );
    assert_eq!(s.get("leader-state").await.unwrap().unwrap().value, b("c"));
    let seen = tokio::time::timeout(WAIT, observer.changed())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(seen.unwrap().value, b("c"));
    assert!(
        !election.resign(&b_lead).await.unwrap(),
        "b no longer holds its key"
    );
}
