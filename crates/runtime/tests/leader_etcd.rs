//! Leader election and fencing against a real etcd: the deposed leader's write is refused by
//! etcd itself (I8), and leadership moves on resign and on lease loss.

#![allow(clippy::unwrap_used)] // test helpers outside #[test] fns unwrap too

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use flotilla_runtime::Shutdown;
use flotilla_runtime::leader::{ElectionConfig, FencedStore, LeaderElector};
use flotilla_store::testing::EtcdServer;
use flotilla_store::{Leadership, Store, StoreError};
use tokio::time::timeout;

async fn leader_within(e: &LeaderElector, within: Duration) -> Leadership {
    timeout(within, e.wait_until_leader())
        .await
        .expect("became leader in time")
        .expect("elector alive")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn etcd_refuses_the_deposed_leaders_writes_and_leadership_moves_on() {
    let etcd = EtcdServer::start().await;
    let store: Arc<dyn Store> = Arc::new(etcd.store("runtime-leader").await);
    let shutdown = Shutdown::new();
    let config = |id: &str| ElectionConfig::new(id).ttl(Duration::from_secs(3));
    let a = LeaderElector::spawn(store.clone(), "leases/scheduler", config("a"), &shutdown);
    let la = leader_within(&a, Duration::from_secs(10)).await;
    let b = LeaderElector::spawn(store.clone(), "leases/scheduler", config("b"), &shutdown);
    tokio::time::sleep(Duration::from_secs(4)).await;
    assert!(a.is_leader(), "keep-alives hold the lease past its TTL");
    assert!(!b.is_leader());

    let fenced_a = FencedStore::new(store.clone(), la.clone());
    fenced_a
        .put("objects/1", Bytes::from_static(b"a"), None)
        .await
        .unwrap();
    // a's lease ends behind its back: etcd refuses a's next write at once.
    store.lease_revoke(la.lease).await.unwrap();
    let err = fenced_a
        .put("objects/1", Bytes::from_static(b"a-late"), None)
        .await
        .unwrap_err();
    assert!(matches!(err, StoreError::LeadershipLost { .. }), "{err}");
    let lb = leader_within(&b, Duration::from_secs(10)).await;
    assert!(lb.fencing_revision > la.fencing_revision);
    let mut a_rx = a.subscribe();
    timeout(Duration::from_secs(5), a_rx.wait_for(Option::is_none))
        .await
        .expect("a stepped down")
        .unwrap();
    FencedStore::new(store.clone(), lb)
        .put("objects/1", Bytes::from_static(b"b"), None)
        .await
        .unwrap();
    assert_eq!(
        store.get("objects/1").await.unwrap().unwrap().value,
        Bytes::from_static(b"b")
    );

    // b resigns; a, campaigning again, takes over.
    b.resign().await;
    let la2 = leader_within(&a, Duration::from_secs(10)).await;
    assert!(la2.fencing_revision > la.fencing_revision);
    shutdown.trigger();
}
