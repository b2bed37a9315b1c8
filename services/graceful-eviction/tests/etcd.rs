//! The graceful-eviction controller against a real etcd (fails, never skips, without one).

use std::sync::Arc;
use std::time::Duration;

use crate::support::*;
use flotilla_core::types::ResourceHealth::Healthy;
use flotilla_store::StoreRef;
use flotilla_store::testing::EtcdServer;
use flotilla_store::typed::Typed;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn etcd_stamp_then_remove_when_healthy() {
    let etcd = EtcdServer::start().await;
    let store: StoreRef = Arc::new(etcd.store("graceful-eviction").await);
    let typed = Typed::new(store.clone());
    for i in 0..10 {
        create_binding(
            &typed,
            on_member2(&format!("b{i}"), task("member1", None), Some(Healthy)),
        )
        .await;
    }
    let h = Harness::start::<GracefulEviction>(store, test_config());
    for i in 0..10 {
        let name = format!("b{i}");
        wait_stamped(&typed, Duration::from_secs(15), &name).await;
        observe_generation(&typed, &name).await;
    }
    for i in 0..10 {
        let name = format!("b{i}");
        wait_no_tasks(&typed, Duration::from_secs(15), &name, "removed").await;
    }
    h.stop().await;
}
