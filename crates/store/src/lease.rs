//! `LeaseKeeper`: a background task that keeps a lease alive through the [`Store`] trait and
//! says when it is lost, so that a leader can step down before its keys vanish.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;
use tokio::task::JoinHandle;

use crate::Store;
use crate::error::{Result, StoreError};
use crate::types::Lease;

/// Keeps a lease alive by refreshing it every third of its TTL (etcd's client does the
/// same). Dropping the keeper stops the refreshes; the lease then expires after its TTL.
///
/// It runs on tokio's clock, not on a `MemStore`'s injected clock.
#[derive(Debug)]
pub struct LeaseKeeper {
    lease: Lease,
    lost: watch::Receiver<Option<String>>,
    task: JoinHandle<()>,
    store: Arc<dyn Store>,
}

// === impl LeaseKeeper ===

impl LeaseKeeper {
    /// Starts refreshing `lease` every `lease.ttl / 3` (at least every 100 ms).
    pub fn spawn(store: Arc<dyn Store>, lease: Lease) -> Self {
        let interval = (lease.ttl / 3).max(Duration::from_millis(100));
        Self::with_interval(store, lease, interval)
    }

    /// Starts refreshing `lease` every `interval`.
    pub fn with_interval(store: Arc<dyn Store>, lease: Lease, interval: Duration) -> Self {
        let (tx, rx) = watch::channel(None);
        let task = tokio::spawn(keep_alive_loop(store.clone(), lease, interval, tx));
        Self {
            lease,
            lost: rx,
            task,
            store,
        }
    }

    /// The lease being kept.
    pub fn lease(&self) -> Lease {
        self.lease
    }

    /// Why the lease was lost, if it was.
    pub fn lost_reason(&self) -> Option<String> {
        self.lost.borrow().clone()
    }

    /// Resolves once the lease is lost: the store no longer knows it, or no refresh has
    /// succeeded for a whole TTL. Returns the reason.
    pub async fn lost(&mut self) -> String {
        match self.lost.wait_for(Option::is_some).await {
            Ok(reason) => reason.clone().unwrap_or_default(),
            Err(_) => "lease keeper stopped".into(),
        }
    }

    /// Stops refreshing and revokes the lease, deleting its keys now.
    pub async fn revoke(self) -> Result<()> {
        self.task.abort();
        self.store.lease_revoke(self.lease.id).await
    }
}

impl Drop for LeaseKeeper {
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn keep_alive_loop(
    store: Arc<dyn Store>,
    lease: Lease,
    interval: Duration,
    lost: watch::Sender<Option<String>>,
) {
    let mut last_ok = tokio::time::Instant::now();
    loop {
        tokio::time::sleep(interval).await;
        match store.lease_keep_alive(lease.id).await {
            Ok(_) => last_ok = tokio::time::Instant::now(),
            Err(e @ StoreError::LeaseNotFound { .. }) => {
                let _ = lost.send(Some(e.to_string()));
                return;
            }
            Err(e) => {
                tracing::warn!(lease = %lease.id, error = %e, "lease keep-alive failed");
                if last_ok.elapsed() >= lease.ttl {
                    let _ = lost.send(Some(format!("no keep-alive succeeded for a TTL: {e}")));
                    return;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mem::MemStore;
    use crate::types::Event;

    #[tokio::test(start_paused = true)]
    async fn keeps_the_lease_alive_and_reports_its_loss() {
        let store: Arc<dyn Store> = Arc::new(MemStore::new());
        let lease = store.lease_grant(Duration::from_secs(3)).await.unwrap();
        store.put("k", "v".into(), Some(lease.id)).await.unwrap();
        let mut keeper = LeaseKeeper::spawn(store.clone(), lease);
        // Ten TTLs of (paused, auto-advanced) time: the keeper refreshes every second.
        tokio::time::sleep(Duration::from_secs(30)).await;
        assert!(store.get("k").await.unwrap().is_some(), "kept alive");
        assert!(keeper.lost_reason().is_none());
        store.lease_revoke(lease.id).await.unwrap();
        let reason = tokio::time::timeout(Duration::from_secs(10), keeper.lost())
            .await
            .unwrap();
        assert!(reason.contains("not found"), "{reason}");
    }

    #[tokio::test(start_paused = true)]
    async fn dropping_the_keeper_lets_the_lease_expire() {
        let store: Arc<dyn Store> = Arc::new(MemStore::new());
        let lease = store.lease_grant(Duration::from_secs(3)).await.unwrap();
        store.put("k", "v".into(), Some(lease.id)).await.unwrap();
        let keeper = LeaseKeeper::spawn(store.clone(), lease);
        tokio::time::sleep(Duration::from_secs(10)).await;
        let mut watch = store.watch("k", None).await.unwrap();
        drop(keeper);
        let batch = watch.next_batch(Duration::from_secs(10)).await;
        assert!(matches!(&batch.events[..], [Event::Delete { key, .. }] if key == "k"));
    }
}
