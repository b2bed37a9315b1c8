//! Two scheduler replicas on one store: only the leader of `leases/scheduler` reconciles,
//! and when it stops the other takes over (its writes fenced by its own term, I8).

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;
use std::time::Duration;

use crate::common::*;
use flotilla_runtime::Shutdown;
use flotilla_scheduler::{Config, LEADER_ELECTION};
use flotilla_store::typed::Typed;
use flotilla_store::{MemStore, StoreRef};

async fn replica(
    store: &StoreRef,
    identity: &str,
) -> (Shutdown, tokio::task::JoinHandle<anyhow::Result<()>>) {
    let config = Config {
        identity: identity.to_owned(),
        lease_ttl: Duration::from_secs(2),
        ..Config::default()
    };
    let (shutdown, task, _) = spawn_scheduler(store.clone(), config, false).await;
    (shutdown, task)
}

async fn candidates(store: &StoreRef) -> usize {
    store
        .list(&format!("{LEADER_ELECTION}/"), 0)
        .await
        .unwrap()
        .0
        .len()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_follower_takes_over_when_the_leader_stops() {
    let store: StoreRef = Arc::new(MemStore::new());
    let typed = Typed::new(store.clone());
    create_cluster(&typed, cluster("member1")).await;
    create_cluster(&typed, cluster("member2")).await;

    let (stop_a, task_a) = replica(&store, "a").await;
    eventually(Duration::from_secs(5), "a campaigns", || async {
        (candidates(&store).await == 1).then_some(())
    })
    .await;
    let (stop_b, task_b) = replica(&store, "b").await;
    eventually(Duration::from_secs(5), "b campaigns", || async {
        (candidates(&store).await == 2).then_some(())
    })
    .await;

    let key = create_binding_key(&typed, binding("one", divided_static_placement(), 3)).await;
    wait_binding(&typed, &key, "scheduled by a", |rb| {
        rb.spec.clusters == targets(&[("member1", 1), ("member2", 2)])
    })
    .await;

    // The leader stops (resigns): b leads and schedules the next binding.
    stop_task(&stop_a, Duration::from_secs(10), task_a, "a stops").await;
    assert_eq!(candidates(&store).await, 1, "only b is left");
    let key = create_binding_key(&typed, binding("two", divided_static_placement(), 3)).await;
    let rb = wait_binding(&typed, &key, "scheduled by b", |rb| {
        !rb.spec.clusters.is_empty()
    })
    .await;
    assert_eq!(rb.spec.clusters, targets(&[("member1", 1), ("member2", 2)]));
    assert_eq!(rb.status.scheduler_observed_generation, rb.meta.generation);

    stop_task(&stop_b, Duration::from_secs(10), task_b, "b stops").await;
}
