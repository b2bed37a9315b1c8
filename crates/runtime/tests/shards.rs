//! Sharded ownership on the in-memory store, on tokio's paused clock: how a replica comes
//! back after losing its lease.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;
use std::time::Duration;

use flotilla_runtime::Shutdown;
use flotilla_runtime::backoff::Backoff;
use flotilla_runtime::shards::{ShardConfig, ShardOwner};
use flotilla_runtime::testing::FlakyStore;
use flotilla_store::{MemStore, Store};
use tokio::time::Instant;

async fn held_within(owner: &ShardOwner, n: usize, within: Duration) -> Option<Duration> {
    let start = Instant::now();
    while start.elapsed() < within {
        if owner.held().terms.len() == n {
            return Some(start.elapsed());
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    None
}

/// Regression: the back-off between attempts to join was never reset, so a replica that had
/// once failed to reach etcd for a while (its delay grown to the 10 s cap) waited the full
/// cap after every later loss of its lease, however long it had held it. A term that lasted
/// a lease TTL now starts the back-off over.
#[tokio::test(start_paused = true)]
async fn a_replica_that_held_its_lease_for_a_while_rejoins_at_once_after_losing_it() {
    let flaky = FlakyStore::new(Arc::new(MemStore::new()));
    let store: Arc<dyn Store> = flaky.clone();
    let shutdown = Shutdown::new();
    let mut config = ShardConfig::new("svc", 4, "a").ttl(Duration::from_secs(2));
    config.retry = Backoff::new(Duration::from_millis(200), Duration::from_secs(10));
    // Unreachable for long enough that the back-off reaches its cap.
    flaky.partition();
    let owner = ShardOwner::spawn(store, config, &shutdown);
    tokio::time::sleep(Duration::from_secs(40)).await;
    assert!(owner.held().terms.is_empty());
    flaky.heal();
    assert!(
        held_within(&owner, 4, Duration::from_secs(15))
            .await
            .is_some(),
        "never joined after the store came back"
    );
    // A long, healthy term.
    tokio::time::sleep(Duration::from_secs(30)).await;
    assert_eq!(owner.held().terms.len(), 4);
    // A short outage: the lease is lost (its keep-alives fail), then the store answers again.
    flaky.partition();
    tokio::time::sleep(Duration::from_millis(2500)).await;
    assert!(
        owner.held().terms.is_empty(),
        "still holding past the lease"
    );
    flaky.heal();
    let back = held_within(&owner, 4, Duration::from_secs(15)).await;
    assert!(
        back.is_some_and(|d| d < Duration::from_secs(3)),
        "rejoined {back:?} after the store came back; the back-off of the first outage \
         carried over"
    );
    shutdown.trigger();
}
