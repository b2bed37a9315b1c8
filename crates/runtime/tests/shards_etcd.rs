//! Sharded ownership against a real etcd: replicas split the shards between them, a
//! rebalance moves only the shards it must (sticky), a dead replica's shards are taken within
//! its lease and its late write is refused by etcd, and replicas that disagree on the shard
//! count hold nothing.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use flotilla_runtime::shards::{ShardConfig, ShardOwner, owner_key, prefix_shards, table};
use flotilla_runtime::{Held, Shutdown};
use flotilla_store::testing::EtcdServer;
use flotilla_store::{Store, StoreError};

const TTL: Duration = Duration::from_secs(2);

fn config(service: &str, shards: u32, id: &str) -> ShardConfig {
    ShardConfig::new(service, shards, id).ttl(TTL)
}

/// For tests of who holds what, not of expiry: long enough that a loaded CI machine's
/// pauses do not cost a lease (a lost lease rejoins under a new member id, which moves
/// shards that stickiness says stay). The 2 s one lost leases, then shards, under load.
const STEADY_TTL: Duration = Duration::from_secs(10);

fn shards_of(o: &ShardOwner) -> BTreeSet<u32> {
    o.held().terms.keys().copied().collect()
}

/// Waits until each owner holds exactly what SH-3 gives it over the live members the store
/// lists (so a passing moment of the rebalance is not taken for its end), the members being
/// these owners; returns what each holds.
async fn settled(
    store: &dyn Store,
    owners: &[&ShardOwner],
    n: u32,
    within: Duration,
) -> Vec<BTreeSet<u32>> {
    let deadline = tokio::time::Instant::now() + within;
    loop {
        let held: Vec<BTreeSet<u32>> = owners.iter().map(|o| shards_of(o)).collect();
        let members = table(store, "svc").await.map(|t| t.0).unwrap_or_default();
        let ids: Vec<&str> = members.iter().map(|m| m.id.as_str()).collect();
        let done = ids.len() == owners.len()
            && owners.iter().zip(&held).all(|(o, h)| {
                o.held().lease.is_some_and(|l| {
                    let me = format!("{:016x}", l.0);
                    let want: BTreeSet<u32> = flotilla_core::shard::desired_shards(&me, &ids, n)
                        .into_iter()
                        .collect();
                    *h == want
                })
            })
            && held.iter().map(BTreeSet::len).sum::<usize>() == n as usize;
        if done {
            return held;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "shards did not settle within {within:?}: {held:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replicas_split_the_shards_and_rebalance_only_what_they_must() {
    // What each owner decided, printed if the test fails.
    let _ = tracing_subscriber::fmt()
        .with_env_filter("flotilla_runtime=info")
        .with_test_writer()
        .try_init();
    let etcd = EtcdServer::start().await;
    let store: Arc<dyn Store> = Arc::new(etcd.store("runtime-shards-sticky").await);
    let shutdown = Shutdown::new();
    let n = 16;
    let config = |shards, id| config("svc", shards, id).ttl(STEADY_TTL);
    let a = ShardOwner::spawn(store.clone(), config(n, "a"), &shutdown);
    let b = ShardOwner::spawn(store.clone(), config(n, "b"), &shutdown);
    let c = ShardOwner::spawn(store.clone(), config(n, "c"), &shutdown);
    let before = settled(&*store, &[&a, &b, &c], n, Duration::from_secs(30)).await;

    // The table says the same, with each owner's identity.
    let (members, rows) = table(&*store, "svc").await.unwrap();
    assert_eq!(members.len(), 3);
    assert_eq!(rows.len(), n as usize);
    for row in &rows {
        let who = ["a", "b", "c"]
            .iter()
            .position(|id| *id == row.owner)
            .expect("every shard owned");
        assert!(before[who].contains(&row.shard), "{row:?}");
    }

    // A joiner takes shards only for itself: a, b and c each keep a subset of theirs.
    let d = ShardOwner::spawn(store.clone(), config(n, "d"), &shutdown);
    let after_join = settled(&*store, &[&a, &b, &c, &d], n, Duration::from_secs(30)).await;
    for i in 0..3 {
        assert!(
            after_join[i].is_subset(&before[i]),
            "replica {i} gained a shard when d joined: {:?} -> {:?}",
            before[i],
            after_join[i]
        );
    }

    // A leaver's shards go to the others; no other shard moves.
    c.resign().await;
    let after_leave = settled(&*store, &[&a, &b, &d], n, Duration::from_secs(30)).await;
    for (i, was) in [
        (0, &after_join[0]),
        (1, &after_join[1]),
        (2, &after_join[3]),
    ] {
        assert!(
            was.is_subset(&after_leave[i]),
            "a shard moved off a replica that stayed: {was:?} -> {:?}",
            after_leave[i]
        );
    }
    shutdown.trigger();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_replicas_shards_are_taken_within_its_lease_and_its_late_write_is_refused() {
    let etcd = EtcdServer::start().await;
    // Both runtimes' clients in one namespace of this test's own.
    let namespace = format!(
        "/flotilla-test/runtime-shards-dead-{:x}-{:x}/",
        std::process::id(),
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_nanos()
    );
    let connect = {
        let endpoints = etcd.endpoints().to_vec();
        let namespace = namespace.clone();
        move || {
            flotilla_store::EtcdStore::connect(
                flotilla_store::EtcdConfig::new(endpoints.clone())
                    .with_namespace(namespace.clone()),
            )
        }
    };
    let store: Arc<dyn Store> = Arc::new(connect().await.unwrap());
    let n = 4;
    // `a` runs on a runtime of its own, dropped below as a process dies: no revoke, no release.
    let (held_tx, held_rx) = std::sync::mpsc::channel::<tokio::sync::watch::Receiver<Held>>();
    let (stop_tx, stop_rx) = std::sync::mpsc::channel::<()>();
    let thread = std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async {
            let store: Arc<dyn Store> = Arc::new(connect().await.unwrap());
            let a = ShardOwner::spawn(
                store,
                ShardConfig::new("svc", n, "a").ttl(TTL),
                &Shutdown::new(),
            );
            let mut rx = a.subscribe();
            rx.wait_for(|h| h.terms.len() == n as usize).await.unwrap();
            held_tx.send(a.subscribe()).unwrap();
            std::mem::forget(a); // no Drop: the replica dies without a word
        });
        stop_rx.recv().unwrap();
        drop(rt);
    });
    let a_held = held_rx
        .recv_timeout(Duration::from_secs(30))
        .expect("a holds every shard");
    let a_terms = a_held.borrow().clone();
    assert_eq!(a_terms.terms.len(), n as usize);

    let shutdown = Shutdown::new();
    let b = ShardOwner::spawn(store.clone(), config("svc", n, "b"), &shutdown);
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(
        shards_of(&b).is_empty(),
        "b takes nothing a holds while a lives"
    );

    // a dies: its runtime stops, its lease is left to expire.
    stop_tx.send(()).unwrap();
    thread.join().unwrap();
    let died = tokio::time::Instant::now();
    let mut rx = b.subscribe();
    tokio::time::timeout(TTL * 4, rx.wait_for(|h| h.terms.len() == n as usize))
        .await
        .expect("b takes every shard within the lease TTL (and some slack)")
        .unwrap();
    let took = died.elapsed();
    assert!(
        took >= TTL / 2,
        "b took the shards before a's lease could expire: {took:?}"
    );

    // a's fenced store, still believing it holds everything, writes late: etcd refuses.
    let (tx, a_stale) = tokio::sync::watch::channel(a_terms.clone());
    drop(tx);
    let stale = flotilla_runtime::ShardFencedStore::new(
        store.clone(),
        a_stale,
        "svc",
        "a",
        prefix_shards("objects/", n),
    );
    let err = flotilla_store::Store::txn(
        &stale,
        flotilla_store::Txn::new().and_then(flotilla_store::Op::put("objects/x", "late")),
    )
    .await
    .expect_err("the late write must be refused");
    assert!(matches!(err, StoreError::LeadershipLost { .. }), "{err}");
    assert!(store.get("objects/x").await.unwrap().is_none());

    // b's own write goes through and stamps the owner key of its shard.
    let fenced = b.fenced_store(store.clone(), prefix_shards("objects/", n));
    let rev = fenced
        .put("objects/x", Bytes::from_static(b"b"), None)
        .await
        .unwrap();
    let shard = flotilla_core::shard::shard_of("x", n);
    let owner = store.get(&owner_key("svc", shard)).await.unwrap().unwrap();
    assert_eq!(
        owner.mod_revision, rev,
        "the stamp is in the write's revision"
    );
    assert_eq!(&owner.value[..], b"b");
    assert_eq!(
        Some(owner.create_revision),
        b.held().terms.get(&shard).copied()
    );
    // a key in no shard is refused outright
    let err = fenced
        .put("elsewhere/y", Bytes::from_static(b"b"), None)
        .await
        .expect_err("a key outside the shards");
    assert!(matches!(err, StoreError::InvalidArgument(_)), "{err}");
    shutdown.trigger();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replicas_that_disagree_on_the_shard_count_hold_nothing() {
    let etcd = EtcdServer::start().await;
    let store: Arc<dyn Store> = Arc::new(etcd.store("runtime-shards-count").await);
    let shutdown = Shutdown::new();
    let a = ShardOwner::spawn(store.clone(), config("svc", 8, "a"), &shutdown);
    settled(&*store, &[&a], 8, Duration::from_secs(30)).await;
    let b = ShardOwner::spawn(store.clone(), config("svc", 4, "b"), &shutdown);
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    while !(shards_of(&a).is_empty() && shards_of(&b).is_empty()) {
        assert!(
            tokio::time::Instant::now() < deadline,
            "a {:?} and b {:?} still hold shards while disagreeing",
            shards_of(&a),
            shards_of(&b)
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // b goes: a alone agrees with itself and takes everything again.
    b.resign().await;
    settled(&*store, &[&a], 8, Duration::from_secs(30)).await;
    let owned: BTreeMap<u32, String> = table(&*store, "svc")
        .await
        .unwrap()
        .1
        .into_iter()
        .map(|r| (r.shard, r.owner))
        .collect();
    assert!(owned.values().all(|o| o == "a"), "{owned:?}");
    shutdown.trigger();
}

/// A full batch of guarded writes over many shards fits etcd's limits: the fenced store adds
/// a fence and a stamp per shard written, and `Typed::update_many` leaves room for them when
/// told (`with_per_write_overhead`). Without that room, 63 writes with a guard each (126
/// compares) plus the fences were one transaction too many compares (TooManyOps).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_batch_of_guarded_writes_over_many_shards_fits_one_transaction_limit() {
    use flotilla_proto::v1;
    use flotilla_store::typed::{Typed, Update};

    let etcd = EtcdServer::start().await;
    let store: Arc<dyn Store> = Arc::new(etcd.store("runtime-shards-batch").await);
    let shutdown = Shutdown::new();
    let n = 64;
    let owner = ShardOwner::spawn(store.clone(), config("svc", n, "a"), &shutdown);
    settled(&*store, &[&owner], n, Duration::from_secs(30)).await;
    let plain = Typed::new(store.clone());
    let guard = plain
        .create(
            v1::Cluster {
                metadata: Some(v1::ObjectMeta {
                    name: "member1".into(),
                    ..Default::default()
                }),
                ..Default::default()
            },
            None,
        )
        .await
        .unwrap();
    let mut bindings = Vec::new();
    for i in 0..63 {
        let b = v1::ResourceBinding {
            metadata: Some(v1::ObjectMeta {
                name: format!("b-{i}"),
                namespace: "default".into(),
                ..Default::default()
            }),
            ..Default::default()
        };
        bindings.push(plain.create(b, None).await.unwrap());
    }
    let guard_key = "clusters/member1".to_owned();
    let guard_rev = guard.metadata.as_ref().unwrap().resource_version;
    let updates =
        |bindings: &[v1::ResourceBinding], label: &str| -> Vec<Update<v1::ResourceBinding>> {
            bindings
                .iter()
                .map(|b| {
                    let mut new = b.clone();
                    new.metadata
                        .as_mut()
                        .unwrap()
                        .labels
                        .insert("round".into(), label.into());
                    Update::new(b.clone(), new).guarded_by(guard_key.clone(), guard_rev)
                })
                .collect()
        };
    let fenced: Arc<dyn Store> =
        Arc::new(owner.fenced_store(store.clone(), prefix_shards("bindings/", n)));
    // Without room for the fences: the store refuses the transaction.
    let tight = Typed::new(fenced.clone());
    let refused = tight.update_many(updates(&bindings, "one")).await;
    assert!(
        matches!(
            refused,
            Err(StoreError::TooManyOps { .. }) | Err(StoreError::InvalidArgument(_))
        ) || refused.as_ref().is_ok_and(|r| r.iter().any(Result::is_err)),
        "63 guarded writes over many shards fit without room for the fences? {refused:?}"
    );
    // With it: every write lands, each stamped.
    let roomy = Typed::with_per_write_overhead(fenced, 1);
    let results = roomy.update_many(updates(&bindings, "two")).await.unwrap();
    assert_eq!(results.len(), 63);
    for r in results {
        let b = r.expect("each write lands");
        assert_eq!(b.metadata.unwrap().labels["round"], "two");
    }
    shutdown.trigger();
}
