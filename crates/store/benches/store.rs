//! `cargo bench -p flotilla-store --features test-util`: the store benchmark on a real etcd
//! (FLOTILLA_ETCD_ENDPOINTS, else one the harness starts; FLOTILLA_ETCD_SOURCE=binary avoids
//! Docker's port proxy), printed next to the same workload on the raw etcd-client (the floor,
//! measured in the same run), MemStore, and docs/design.md §7's figures.
//!
//! etcd slows down as its database grows, so when the harness starts etcd each side of each
//! round gets a fresh instance; on external endpoints the sides alternate which goes first.
//! Each column shows the best of the rounds (FLOTILLA_BENCH_ROUNDS, default 2): on a shared
//! 2-core machine the best round is the least disturbed one.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;

use flotilla_store::bench::{self, BenchOptions, BenchReport, DESIGN_REFERENCE};
use flotilla_store::testing::{EtcdServer, EtcdSource};
use flotilla_store::{MemStore, Store};

/// Runs one side of a round on its own etcd (or on the external one).
async fn measure(floor: bool, opts: &BenchOptions) -> BenchReport {
    let server = EtcdServer::start().await;
    let store = server.store("bench").await;
    if floor {
        bench::etcd_floor(store.client().clone(), opts)
            .await
            .expect("raw etcd-client floor")
    } else {
        let store: Arc<dyn Store> = Arc::new(store);
        bench::run(store, opts).await.expect("EtcdStore benchmark")
    }
}

#[tokio::main(flavor = "multi_thread")]
async fn main() {
    let rounds: usize = std::env::var("FLOTILLA_BENCH_ROUNDS")
        .ok()
        .and_then(|r| r.parse().ok())
        .unwrap_or(2)
        .max(1);
    {
        let server = EtcdServer::start().await;
        let version = server
            .store("probe")
            .await
            .status()
            .await
            .expect("etcd status");
        println!(
            "etcd {version}: {:?} at {:?} (started in {:?}); {rounds} round(s){}",
            server.source(),
            server.endpoints(),
            server.started_in(),
            if server.source() == EtcdSource::External {
                ""
            } else {
                ", a fresh etcd for each side of each round"
            }
        );
    }
    let mut floors = Vec::new();
    let mut ours = Vec::new();
    for round in 0..rounds {
        let opts = BenchOptions {
            prefix: format!("bench{round}/"),
            ..BenchOptions::default()
        };
        // Alternate which side goes first.
        if round % 2 == 0 {
            floors.push(measure(true, &opts).await);
            ours.push(measure(false, &opts).await);
        } else {
            ours.push(measure(false, &opts).await);
            floors.push(measure(true, &opts).await);
        }
        if rounds > 1 {
            println!(
                "round {}:\n{}",
                round + 1,
                BenchReport::table(&[("EtcdStore", &ours[round]), ("raw client", &floors[round])])
            );
        }
    }
    let mem = bench::run(Arc::new(MemStore::new()), &BenchOptions::default())
        .await
        .expect("MemStore benchmark");
    let floor = BenchReport::best_of(&floors).expect("a round");
    let etcd = BenchReport::best_of(&ours).expect("a round");
    println!(
        "{}",
        BenchReport::table(&[
            ("EtcdStore", &etcd),
            ("raw client", &floor),
            ("MemStore", &mem),
            ("DESIGN §7", &DESIGN_REFERENCE)
        ])
    );
}
