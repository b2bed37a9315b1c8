//! The taint manager against a real etcd (fails, never skips, when etcd is missing).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::support::*;
use flotilla_core::types::{TAINT_NOT_READY, TargetCluster};
use flotilla_runtime::now;
use flotilla_store::StoreRef;
use flotilla_store::testing::EtcdServer;
use flotilla_store::typed::Typed;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn etcd_toleration_expiry_evicts_once_and_recovery_keeps() {
    let etcd = EtcdServer::start().await;
    let store: StoreRef = Arc::new(etcd.store("taint-manager").await);
    let typed = Typed::new(store.clone());
    for name in ["member1", "member2", "member3"] {
        typed.create(cluster(name, true), None).await.unwrap();
    }
    let tol = vec![tolerate(TAINT_NOT_READY, Some(1))];
    for i in 0..20 {
        typed
            .create(
                binding(
                    &format!("web-{i}"),
                    &[("member1", 2), ("member3", 1)],
                    tol.clone(),
                ),
                None,
            )
            .await
            .unwrap();
    }
    typed
        .create(
            binding("recovers", &[("member2", 1), ("member3", 1)], tol),
            None,
        )
        .await
        .unwrap();
    let h = start_taint_manager(store, test_config()).await;

    let start = Instant::now();
    let added = now();
    set_taints(&typed, "member1", vec![not_ready_taint(added)]).await;
    set_taints(&typed, "member2", vec![not_ready_taint(added)]).await;
    set_taints(&typed, "member2", vec![]).await;
    for i in 0..20 {
        let name = format!("web-{i}");
        eventually(Duration::from_secs(15), "evicted", || async {
            (!get_binding(&typed, &name).await.targets("member1")).then_some(())
        })
        .await;
    }
    assert!(
        start.elapsed() >= Duration::from_secs(1),
        "I12: not before the toleration"
    );
    for i in 0..20 {
        let b = get_binding(&typed, &format!("web-{i}")).await;
        assert_eq!(b.spec.clusters, vec![TargetCluster::new("member3", 1)]);
        assert_eq!(b.spec.graceful_eviction_tasks.len(), 1);
        assert_eq!(b.spec.graceful_eviction_tasks[0].replicas, Some(2));
    }
    let b = get_binding(&typed, "recovers").await;
    assert!(
        b.targets("member2") && b.spec.graceful_eviction_tasks.is_empty(),
        "I11"
    );
    h.stop().await;
}
