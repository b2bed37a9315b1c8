//! The taint manager against a real etcd (fails, never skips, when etcd is missing).

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
    create_clusters(
        &typed,
        &[("member1", true), ("member2", true), ("member3", true)],
    )
    .await;
    let tol = vec![tolerate(TAINT_NOT_READY, Some(1))];
    create_bindings(&typed, 20, |i| {
        binding(
            &format!("web-{i}"),
            &[("member1", 2), ("member3", 1)],
            tol.clone(),
        )
    })
    .await;
    create_scheduled(&typed, "recovers", &[("member2", 1), ("member3", 1)], tol).await;
    let h = Harness::start::<TaintManager>(store, test_config());

    let start = Instant::now();
    let added = now();
    set_taints(&typed, "member1", vec![not_ready_taint(added)]).await;
    set_taints(&typed, "member2", vec![not_ready_taint(added)]).await;
    set_taints(&typed, "member2", vec![]).await;
    for i in 0..20 {
        let name = format!("web-{i}");
        wait_evicted(&typed, Duration::from_secs(15), &name, "member1").await;
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
