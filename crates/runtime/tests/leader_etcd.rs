//! Leader election and fencing against a real etcd: the deposed leader's write is refused by
//! etcd itself (I8), and leadership moves on resign and on lease loss.

#![allow(clippy::unwrap_used)] // test helpers outside #[test] fns unwrap too

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;

use crate::leader::{assert_lost, leader_within, put_v, value_at};
use flotilla_runtime::Shutdown;
use flotilla_runtime::leader::{ElectionConfig, FencedStore, LeaderElector};
use flotilla_store::Store;
use flotilla_store::testing::EtcdServer;
use tokio::time::timeout;

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
    put_v(&fenced_a, "objects/1", b"a").await.unwrap();
    // a's lease ends behind its back: etcd refuses a's next write at once.
    store.lease_revoke(la.lease).await.unwrap();
    assert_lost(put_v(&fenced_a, "objects/1", b"a-late").await);
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
    assert_eq!(value_at(&*store, "objects/1").await, &b"b"[..]);

    // b resigns; a, campaigning again, takes over.
    b.resign().await;
    let la2 = leader_within(&a, Duration::from_secs(10)).await;
    assert!(la2.fencing_revision > la.fencing_revision);
    shutdown.trigger();
}
