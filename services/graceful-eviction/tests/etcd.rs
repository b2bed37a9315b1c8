//! The graceful-eviction controller against a real etcd (fails, never skips, without one).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

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
        typed
            .create(
                evicting(
                    &format!("b{i}"),
                    &["member2"],
                    vec![task("member1", None)],
                    vec![item("member2", Healthy)],
                ),
                None,
            )
            .await
            .unwrap();
    }
    let h = start_graceful_eviction(store, test_config()).await;
    for i in 0..10 {
        let name = format!("b{i}");
        eventually(Duration::from_secs(15), "stamped", || async {
            get_binding(&typed, &name)
                .await
                .spec
                .graceful_eviction_tasks
                .first()
                .and_then(|t| t.creation_timestamp)
        })
        .await;
        observe_generation(&typed, &name).await;
    }
    for i in 0..10 {
        let name = format!("b{i}");
        eventually(Duration::from_secs(15), "removed", || async {
            get_binding(&typed, &name)
                .await
                .spec
                .graceful_eviction_tasks
                .is_empty()
                .then_some(())
        })
        .await;
    }
    h.stop().await;
}
