//! A mass failover on MemStore: every binding on one cluster is evicted, and the writes are
//! batched (docs/design.md §7: not one round trip per binding). Prints the figures; asserts only
//! the batching, never a timing. `FLOTILLA_SCALE_BINDINGS` overrides the size (default 2000).

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use crate::support::*;
use flotilla_proto::v1;
use flotilla_runtime::now;
use flotilla_store::typed::Update;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mass_failover_is_batched() {
    let n: usize = env_or("FLOTILLA_SCALE_BINDINGS", 2000);
    let (mem, typed) =
        mem_with_clusters(&[("member1", true), ("member2", true), ("member3", true)]).await;
    create_bindings(&typed, n, |i| {
        binding(&format!("b{i}"), &[("member1", 1), ("member2", 1)], vec![])
    })
    .await;
    let store = Interpose::new(mem.clone(), "never", Box::new(|| Box::pin(async {})));
    let h = Harness::start::<TaintManager>(store.clone(), test_config());
    // Let the caches sync before the clock starts.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let start = Instant::now();
    set_taints(&typed, "member1", vec![not_ready_taint(now())]).await;
    let count = || count_off(&typed, "member1");
    eventually(
        Duration::from_secs(120),
        "every binding evicted",
        || async { (count().await == n).then_some(()) },
    )
    .await;
    let elapsed = start.elapsed();
    let txns = store.binding_txns.load(Ordering::SeqCst);
    let puts = store.binding_puts.load(Ordering::SeqCst);
    // The floor: the same number of guarded puts, batched 64 per transaction, on this store.
    let (olds, _) = typed.list::<v1::ResourceBinding>(None).await.unwrap();
    let floor_start = Instant::now();
    let updates: Vec<_> = olds
        .into_iter()
        .map(|old| {
            let mut new = old.clone();
            new.metadata
                .as_mut()
                .unwrap()
                .labels
                .insert("floor".into(), "1".into());
            Update {
                old: old.into(),
                new,
                guards: Vec::new(),
            }
        })
        .collect();
    typed.update_many(updates).await.unwrap();
    let floor = floor_start.elapsed();
    println!(
        "mass failover: {n} bindings evicted in {elapsed:?} ({:.0}/s); {puts} binding puts in \
         {txns} transactions ({:.1} per txn); batched floor for {n} guarded puts: {floor:?}",
        n as f64 / elapsed.as_secs_f64(),
        puts as f64 / txns.max(1) as f64
    );
    assert_eq!(
        puts, n,
        "exactly one write per evicted binding (no conflicts, no retries)"
    );
    assert!(
        txns * 4 <= n,
        "evictions are batched: {txns} transactions for {n} bindings"
    );
    let sample = get_binding(&typed, "b0").await;
    assert_eq!(sample.spec.graceful_eviction_tasks.len(), 1);
    h.stop().await;
}
