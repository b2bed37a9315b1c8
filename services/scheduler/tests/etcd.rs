//! The scheduler against a real etcd (never skipped: `EtcdServer::start` fails without one):
//! the whole service (`run_scheduler`, the service shape: leader election on `leases/scheduler`, fenced batched
//! writes) schedules the seed example and fails it over; then a failover burst of many
//! bindings, with its throughput printed next to the etcd floor measured in the same run.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::HashSet;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::common::*;
use flotilla_core::types::{ResourceBinding, TaintEffect};
use flotilla_proto::v1;
use flotilla_runtime::Shutdown;
use flotilla_runtime::testing::grpc::wait_serving;
use flotilla_scheduler::Config;
use flotilla_store::testing::EtcdServer;
use flotilla_store::typed::{Stored, Typed, decode, encode};
use flotilla_store::{Compare, CompareOp, Event as StoreEvent, Op, StoreRef, Txn, WatchEvent};

async fn start_service(store: StoreRef) -> (Shutdown, tokio::task::JoinHandle<anyhow::Result<()>>) {
    let mut config = Config {
        lease_ttl: Duration::from_secs(3),
        ..Config::default()
    };
    config.controller.workers = env_or("FLOTILLA_SCHEDULER_WORKERS", config.controller.workers);
    let (shutdown, task, url) = spawn_scheduler(store, config, false).await;
    // Serving once both caches synced.
    wait_serving(&url, "", Duration::from_secs(20)).await;
    (shutdown, task)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn etcd_seed_divided_failover() {
    let etcd = EtcdServer::start().await;
    let store: StoreRef = Arc::new(etcd.store("scheduler-seed").await);
    let typed = Typed::new(store.clone());
    create_cluster(&typed, cluster("member1")).await;
    create_cluster(&typed, cluster("member2")).await;
    let (shutdown, task) = start_service(store.clone()).await;

    let key = create_binding_key(&typed, binding("nginx", divided_static_placement(), 3)).await;
    let first = wait_binding(&typed, &key, "first schedule", |rb| {
        rb.spec.clusters == targets(&[("member1", 1), ("member2", 2)])
    })
    .await;
    assert_eq!(
        first.status.scheduler_observed_generation,
        first.meta.generation
    );

    add_taint(&typed, "member1", not_ready(TaintEffect::NoExecute)).await;
    evict(&typed, &key, "member1").await;
    let after = wait_binding(&typed, &key, "failover", |rb| {
        rb.spec.clusters == targets(&[("member2", 3)])
    })
    .await;
    assert_eq!(
        after.status.scheduler_observed_generation,
        after.meta.generation
    );
    assert_eq!(scheduled(&after), Some(("True".into(), "Success".into())));
    assert_eq!(after.spec.graceful_eviction_tasks.len(), 1);

    stop_task(&shutdown, Duration::from_secs(15), task, "stops").await;
}

/// Evicts `cluster` from every binding (TM-11), 64 guarded puts per transaction, 4
/// transactions in flight; returns how long it took (the batched etcd floor for these
/// writes, docs/design.md §7).
async fn evict_all(store: &StoreRef, cluster: &str) -> Duration {
    let typed = Typed::new(store.clone());
    let (current, _) = typed.list::<v1::ResourceBinding>(None).await.unwrap();
    let started = Instant::now();
    let mut inflight = tokio::task::JoinSet::new();
    for chunk in current.chunks(64) {
        let mut txn = Txn::new();
        for old in chunk {
            let mut new = old.clone();
            let spec = new.spec.as_mut().unwrap();
            let replicas = spec
                .clusters
                .iter()
                .find(|t| t.name == cluster)
                .map(|t| t.replicas);
            spec.clusters.retain(|t| t.name != cluster);
            spec.graceful_eviction_tasks
                .push(taint_task(cluster, replicas));
            new.metadata.as_mut().unwrap().generation += 1;
            txn = txn
                .when(Compare::mod_revision(
                    old.key(),
                    CompareOp::Equal,
                    old.metadata.as_ref().unwrap().resource_version,
                ))
                .and_then(Op::put(old.key(), encode(&new)));
        }
        if inflight.len() >= 4 {
            inflight.join_next().await.unwrap().unwrap();
        }
        let store = store.clone();
        inflight.spawn(async move {
            assert!(matches!(
                store.txn(txn).await.unwrap(),
                flotilla_store::TxnResponse::Committed { .. }
            ));
        });
    }
    while let Some(r) = inflight.join_next().await {
        r.unwrap();
    }
    started.elapsed()
}

/// A watch on every binding from the next change on. Opened before the writes it follows:
/// replaying thousands of writes from history arrives as one etcd watch response larger than
/// the client's 4 MiB decode limit (see the report: the store's watch does not ask etcd to
/// fragment).
async fn watch_bindings(store: &StoreRef) -> flotilla_store::WatchStream {
    store
        .watch(v1::ResourceBinding::PREFIX, None)
        .await
        .unwrap()
}

/// Converged: on `on`, scheduled for the current generation, with `tasks` eviction tasks.
fn all_on(on: &[(&str, i32)], tasks: usize) -> impl Fn(&ResourceBinding) -> bool {
    let on = targets(on);
    move |rb| {
        rb.spec.clusters == on
            && rb.status.scheduler_observed_generation == rb.meta.generation
            && rb.spec.graceful_eviction_tasks.len() == tasks
    }
}

/// Follows `watch` until `n` distinct bindings satisfy `done`.
async fn wait_converged(
    mut watch: flotilla_store::WatchStream,
    n: usize,
    done: impl Fn(&ResourceBinding) -> bool,
) {
    let mut converged = HashSet::new();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(120);
    while converged.len() < n {
        let event = tokio::time::timeout_at(deadline, watch.next())
            .await
            .unwrap_or_else(|_| panic!("only {} of {n} bindings converged", converged.len()))
            .expect("watch open")
            .unwrap();
        let WatchEvent::Batch(batch) = event else {
            continue;
        };
        for ev in batch.events {
            let StoreEvent::Put(kv) = ev else { continue };
            let rb =
                ResourceBinding::try_from(decode::<v1::ResourceBinding>(&kv).unwrap()).unwrap();
            if done(&rb) {
                converged.insert(kv.key);
            }
        }
    }
}

/// A failover burst of `FLOTILLA_SCHEDULER_BURST` bindings (default 1000) settled on
/// member1/member2 (static weights 1:2; member3 has none):
/// 1. cold: all are evicted from member1 while no scheduler runs (the batched etcd floor for
///    these writes), then the scheduler starts and moves every one to {member2: 3};
/// 2. live: member2 fails too and all are evicted from it while the scheduler runs; every one
///    moves to {member3: 3} (SC-16.2: no weighted candidate left → equal weights).
///
/// Asserts every binding converges (watched, not polled) with observed generation =
/// generation and both tasks kept; prints bindings/s next to the floor. Timings are never
/// asserted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn etcd_failover_burst() {
    let n: usize = env_or("FLOTILLA_SCHEDULER_BURST", 1000);
    let etcd = EtcdServer::start().await;
    let store: StoreRef = Arc::new(etcd.store("scheduler-burst").await);
    let typed = Typed::new(store.clone());
    for name in ["member1", "member2", "member3"] {
        create_cluster(&typed, cluster(name)).await;
    }
    let mut settled = Vec::with_capacity(n);
    for i in 0..n {
        let mut rb = binding(&format!("app{i:05}"), divided_static_placement(), 3);
        rb.meta.generation = 1;
        rb.meta.uid = format!("uid-{i}");
        rb.status.scheduler_observed_generation = 1;
        rb.spec.clusters = targets(&[("member1", 1), ("member2", 2)]);
        rb.status.applied_placement = rb.spec.placement.clone();
        settled.push(v1::ResourceBinding::from(rb));
    }
    for chunk in settled.chunks(64) {
        let mut txn = Txn::new();
        for b in chunk {
            txn = txn.and_then(Op::put(b.key(), encode(b)));
        }
        store.txn(txn).await.unwrap();
    }

    // 1. Cold.
    add_taint(&typed, "member1", not_ready(TaintEffect::NoExecute)).await;
    let floor = evict_all(&store, "member1").await;
    let watch = watch_bindings(&store).await;
    let started = Instant::now();
    let (shutdown, task) = start_service(store.clone()).await;
    wait_converged(watch, n, all_on(&[("member2", 3)], 1)).await;
    let cold = started.elapsed();

    // 2. Live.
    add_taint(&typed, "member2", not_ready(TaintEffect::NoExecute)).await;
    let watch = watch_bindings(&store).await;
    let started = Instant::now();
    let evicting = evict_all(&store, "member2").await;
    wait_converged(watch, n, all_on(&[("member3", 3)], 2)).await;
    let live = started.elapsed();

    let rate = |d: Duration| n as f64 / d.as_secs_f64();
    eprintln!(
        "scheduler failover burst on etcd, {n} bindings:\n  \
         floor: the eviction writes alone (64 guarded puts/txn, 4 in flight) {floor:?} = {:.0}/s\n  \
         cold: scheduler start (list + schedule + batched CAS) until all moved {cold:?} = {:.0}/s\n  \
         live: first eviction until all moved, evictions ({evicting:?}) overlapping {live:?} = {:.0}/s",
        rate(floor),
        rate(cold),
        rate(live),
    );

    stop_task(&shutdown, Duration::from_secs(15), task, "stops").await;
}
