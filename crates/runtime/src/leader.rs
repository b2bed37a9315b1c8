//! Leader election with fencing, on the store's [`Election`].
//!
//! ```text
//!   LeaderElector task (one per replica and election):
//!     lease_grant(ttl) ─► campaign(identity, lease) ─► leading ─► step down ─┐
//!        ▲  keep-alive every ttl/3 while campaigning and leading            │
//!        └──────────── re-campaign with a new lease ◄────────────────────────┘
//!   step down when: the lease is not found, no keep-alive succeeded in time for the lease to
//!   still be alive (local deadline = last keep-alive sent + ttl − margin), or our election
//!   key was deleted / re-created. Publishes Some(Leadership) / None on a tokio watch.
//!
//!   Fence / FencedStore: every write Txn also compares
//!       create_revision(leader key) == fencing_revision
//!   so a deposed leader's writes fail at the store (I8), whatever its timers think.
//! ```

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use bytes::Bytes;
use flotilla_store::{
    Compare, DeleteResponse, Election, Event as StoreEvent, Leadership, Lease, LeaseId, Op,
    OpResult, Revision, Store, StoreError, Txn, TxnResponse, WatchEvent, WatchStream, Wrapper,
};
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tokio::time::Instant;

use crate::backoff::{Backoff, BackoffState};
use crate::shutdown::Shutdown;

/// How a [`LeaderElector`] campaigns.
#[derive(Clone, Debug)]
pub struct ElectionConfig {
    /// This replica's identity, stored as the election key's value (e.g. `host:pid`).
    pub identity: String,
    /// The lease TTL: how long a dead leader blocks its successor. Default 15 s (Karmada's
    /// and kube-controller-manager's `--leader-elect-lease-duration`).
    pub ttl: Duration,
    /// How often the lease is refreshed. Default `ttl / 3` (etcd's clients do the same).
    pub renew_interval: Option<Duration>,
    /// How long before the lease could expire the leader steps down if no refresh
    /// succeeded. Default `ttl / 10`.
    pub margin: Option<Duration>,
    /// Back-off between failed attempts to get a lease or campaign. Default 200 ms → 10 s,
    /// jittered.
    pub retry: Backoff,
}

impl ElectionConfig {
    /// The defaults, for `identity`.
    pub fn new(identity: impl Into<String>) -> Self {
        Self {
            identity: identity.into(),
            ttl: Duration::from_secs(15),
            renew_interval: None,
            margin: None,
            retry: Backoff::new(Duration::from_millis(200), Duration::from_secs(10))
                .with_jitter(true),
        }
    }

    /// Sets the lease TTL.
    pub fn ttl(mut self, ttl: Duration) -> Self {
        self.ttl = ttl;
        self
    }

    fn renew(&self) -> Duration {
        self.renew_interval
            .unwrap_or(self.ttl / 3)
            .max(Duration::from_millis(10))
    }

    fn margin(&self) -> Duration {
        self.margin.unwrap_or(self.ttl / 10)
    }
}

/// A running candidacy in one election. Stop it with [`LeaderElector::resign`] (or by
/// triggering the [`Shutdown`] it was spawned with): it steps down, deletes its key and
/// revokes its lease so that a successor takes over at once.
#[derive(Debug)]
pub struct LeaderElector {
    rx: watch::Receiver<Option<Leadership>>,
    stop: Shutdown,
    task: JoinHandle<()>,
    prefix: String,
}

// === impl LeaderElector ===

impl LeaderElector {
    /// Starts campaigning in the election under `prefix` (e.g. `leases/scheduler`) until
    /// `shutdown` fires.
    pub fn spawn(
        store: Arc<dyn Store>,
        prefix: impl Into<String>,
        config: ElectionConfig,
        shutdown: &Shutdown,
    ) -> Self {
        let prefix = prefix.into();
        let (tx, rx) = watch::channel(None);
        let stop = shutdown.child();
        let run = Run {
            election: Election::new(store.clone(), prefix.clone()),
            gauge: metrics::gauge!("flotilla_leader", "election" => prefix.clone()),
            store,
            config,
            tx,
            stop: stop.clone(),
            prefix: prefix.clone(),
        };
        let task = tokio::spawn(run.run());
        Self {
            rx,
            stop,
            task,
            prefix,
        }
    }

    /// The election prefix.
    pub fn prefix(&self) -> &str {
        &self.prefix
    }

    /// Whether this replica leads right now.
    pub fn is_leader(&self) -> bool {
        self.rx.borrow().is_some()
    }

    /// The current leadership, if any.
    pub fn leadership(&self) -> Option<Leadership> {
        self.rx.borrow().clone()
    }

    /// The fence of the current leadership, if any.
    pub fn fence(&self) -> Option<Fence> {
        self.leadership().map(Fence::new)
    }

    /// Follows the leadership: `Some` while leading, `None` otherwise.
    pub fn subscribe(&self) -> watch::Receiver<Option<Leadership>> {
        self.rx.clone()
    }

    /// A store whose writes are fenced with whatever leadership this elector holds at the time
    /// of each write (and fail with [`StoreError::LeadershipLost`] while it holds none).
    pub fn fenced_store(&self, inner: Arc<dyn Store>) -> FencedStore {
        FencedStore::following(inner, self.subscribe())
    }

    /// Waits until this replica leads; returns the leadership.
    pub async fn wait_until_leader(&self) -> Option<Leadership> {
        let mut rx = self.rx.clone();
        rx.wait_for(Option::is_some)
            .await
            .ok()
            .and_then(|l| l.clone())
    }

    /// Steps down (if leading), gives up the candidacy and stops campaigning.
    pub async fn resign(mut self) {
        self.stop.trigger();
        if let Err(e) = (&mut self.task).await
            && e.is_panic()
        {
            tracing::error!(election = %self.prefix, "leader elector panicked");
        }
    }
}

impl Drop for LeaderElector {
    fn drop(&mut self) {
        // Dropping the handle ends the candidacy too: the task steps down, resigns and
        // revokes its lease in the background.
        self.stop.trigger();
    }
}

struct Run {
    store: Arc<dyn Store>,
    election: Election,
    config: ElectionConfig,
    tx: watch::Sender<Option<Leadership>>,
    stop: Shutdown,
    prefix: String,
    gauge: metrics::Gauge,
}

/// Why a term (a lease) ended.
enum TermEnd {
    Stopped,
    Lost(String),
}

/// A lease being kept alive, with the local deadline before which it surely still exists.
struct KeptLease {
    lease: Lease,
    /// The lease is alive at the store at least until this instant.
    valid_until: Instant,
}

// === impl Run ===

impl Run {
    async fn run(self) {
        let mut backoff = BackoffState::new(self.config.retry);
        loop {
            if self.stop.is_triggered() {
                break;
            }
            let sent = Instant::now();
            let granted = tokio::select! {
                () = self.stop.triggered() => break,
                r = self.store.lease_grant(self.config.ttl) => r,
            };
            let kept = match granted {
                Ok(lease) => KeptLease {
                    lease,
                    valid_until: sent + lease.ttl,
                },
                Err(error) => {
                    let delay = backoff.next_delay();
                    tracing::warn!(election = %self.prefix, %error, retry_in = ?delay, "cannot get a lease");
                    self.pause(delay).await;
                    continue;
                }
            };
            match self.term(kept).await {
                TermEnd::Stopped => break,
                TermEnd::Lost(reason) => {
                    let delay = backoff.next_delay();
                    tracing::warn!(election = %self.prefix, %reason, retry_in = ?delay, "candidacy ended; campaigning again");
                    self.pause(delay).await;
                }
            }
        }
        self.publish(None);
    }

    async fn pause(&self, delay: Duration) {
        tokio::select! {
            () = self.stop.triggered() => {}
            () = tokio::time::sleep(delay) => {}
        }
    }

    fn publish(&self, leadership: Option<Leadership>) {
        self.gauge.set(if leadership.is_some() { 1.0 } else { 0.0 });
        self.tx.send_replace(leadership);
    }

    /// Refreshes the lease once. `Err` means the lease is gone or may be.
    async fn renew(&self, kept: &mut KeptLease) -> Result<(), String> {
        let sent = Instant::now();
        match self.store.lease_keep_alive(kept.lease.id).await {
            Ok(ttl) => {
                kept.valid_until = sent + ttl;
                Ok(())
            }
            Err(e @ StoreError::LeaseNotFound { .. }) => Err(e.to_string()),
            Err(error) => {
                tracing::warn!(election = %self.prefix, %error, "lease keep-alive failed");
                Ok(())
            }
        }
    }

    /// One lease: campaign with it, lead while it lives.
    async fn term(&self, mut kept: KeptLease) -> TermEnd {
        let identity = Bytes::from(self.config.identity.clone().into_bytes());
        let campaign = self.election.campaign(identity, kept.lease.id);
        tokio::pin!(campaign);
        let renew = self.config.renew();
        let margin = self.config.margin();
        let leadership = loop {
            let expires = kept
                .valid_until
                .checked_sub(margin)
                .unwrap_or(kept.valid_until);
            tokio::select! {
                () = self.stop.triggered() => {
                    self.revoke(kept.lease.id).await;
                    return TermEnd::Stopped;
                }
                r = &mut campaign => match r {
                    Ok(l) => break l,
                    Err(e) => {
                        self.revoke(kept.lease.id).await;
                        return TermEnd::Lost(format!("campaign failed: {e}"));
                    }
                },
                () = tokio::time::sleep(renew) => {
                    if let Err(reason) = self.renew(&mut kept).await {
                        return TermEnd::Lost(reason);
                    }
                }
                () = tokio::time::sleep_until(expires) => {
                    self.revoke(kept.lease.id).await;
                    return TermEnd::Lost("no keep-alive succeeded in time".into());
                }
            }
        };
        // Campaigning may have taken longer than the lease: check it is still ours.
        if Instant::now()
            >= kept
                .valid_until
                .checked_sub(margin)
                .unwrap_or(kept.valid_until)
        {
            self.revoke(kept.lease.id).await;
            return TermEnd::Lost("lease may have expired while campaigning".into());
        }
        tracing::info!(election = %self.prefix, key = %leadership.key, fencing_revision = leadership.fencing_revision, "became leader");
        self.publish(Some(leadership.clone()));
        let end = self.lead(&leadership, &mut kept).await;
        // Step down before anything else: controllers stop at once.
        self.publish(None);
        match &end {
            TermEnd::Stopped => {
                match self.election.resign(&leadership).await {
                    Ok(_) => {}
                    Err(error) => {
                        tracing::warn!(election = %self.prefix, %error, "resign failed; the lease will expire");
                    }
                }
                self.revoke(kept.lease.id).await;
                tracing::info!(election = %self.prefix, "resigned");
            }
            TermEnd::Lost(reason) => {
                tracing::warn!(election = %self.prefix, %reason, "lost leadership");
                self.revoke(kept.lease.id).await;
            }
        }
        end
    }

    async fn lead(&self, leadership: &Leadership, kept: &mut KeptLease) -> TermEnd {
        let renew = self.config.renew();
        let margin = self.config.margin();
        let mut key_watch = self.watch_key(leadership).await;
        loop {
            let expires = kept
                .valid_until
                .checked_sub(margin)
                .unwrap_or(kept.valid_until);
            tokio::select! {
                () = self.stop.triggered() => return TermEnd::Stopped,
                () = tokio::time::sleep(renew) => {
                    if let Err(reason) = self.renew(kept).await {
                        return TermEnd::Lost(reason);
                    }
                    if key_watch.is_none() {
                        key_watch = self.watch_key(leadership).await;
                    }
                }
                () = tokio::time::sleep_until(expires) => {
                    return TermEnd::Lost("no keep-alive succeeded in time; the lease may expire".into());
                }
                item = next_or_pending(&mut key_watch) => match item {
                    Some(Ok(WatchEvent::Batch(b))) => {
                        for ev in &b.events {
                            match ev {
                                StoreEvent::Delete { key, .. } if *key == leadership.key => {
                                    return TermEnd::Lost("election key deleted".into());
                                }
                                StoreEvent::Put(kv) if kv.key == leadership.key
                                    && kv.create_revision != leadership.fencing_revision => {
                                    return TermEnd::Lost("election key re-created".into());
                                }
                                _ => {}
                            }
                        }
                    }
                    Some(Ok(WatchEvent::Progress { .. })) => {}
                    Some(Err(error)) => {
                        tracing::debug!(election = %self.prefix, %error, "election key watch ended; re-checking");
                        key_watch = None;
                        match self.store.get(&leadership.key).await {
                            Ok(Some(kv)) if kv.create_revision == leadership.fencing_revision => {}
                            Ok(_) => return TermEnd::Lost("election key gone".into()),
                            Err(_) => {}
                        }
                    }
                    None => key_watch = None,
                },
            }
        }
    }

    /// Watches our own election key from just after its creation, so that a deletion that
    /// happened in between is replayed.
    async fn watch_key(&self, leadership: &Leadership) -> Option<WatchStream> {
        match self
            .store
            .watch(&leadership.key, Some(leadership.fencing_revision + 1))
            .await
        {
            Ok(w) => Some(w),
            Err(StoreError::Compacted { .. }) => self.store.watch(&leadership.key, None).await.ok(),
            Err(_) => None,
        }
    }

    async fn revoke(&self, lease: LeaseId) {
        match self.store.lease_revoke(lease).await {
            Ok(()) | Err(StoreError::LeaseNotFound { .. }) => {}
            Err(error) => {
                tracing::debug!(election = %self.prefix, %error, "lease revoke failed; it will expire");
            }
        }
    }
}

/// The next item of `w`, or never while there is no stream (for a `select!` arm).
pub(crate) async fn next_or_pending(
    w: &mut Option<WatchStream>,
) -> Option<flotilla_store::Result<WatchEvent>> {
    match w {
        Some(w) => w.next().await,
        None => std::future::pending().await,
    }
}

/// The guard of one leadership term: adds `create_revision(leader key) == fencing_revision`
/// to a transaction, so that it commits only while that term lasts.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Fence {
    leadership: Leadership,
}

// === impl Fence ===

impl Fence {
    /// The fence of `leadership`.
    pub fn new(leadership: Leadership) -> Self {
        Self { leadership }
    }

    /// The leadership fenced on.
    pub fn leadership(&self) -> &Leadership {
        &self.leadership
    }

    /// The compare that holds only during this term.
    pub fn compare(&self) -> Compare {
        self.leadership.fencing_compare()
    }

    /// `txn` with the fencing compare appended (it is the last compare).
    pub fn guard(&self, txn: Txn) -> Txn {
        txn.when(self.compare())
    }

    /// Runs `txn` fenced. A failure of the fence alone or together with other compares is
    /// [`StoreError::LeadershipLost`]; a failure of the caller's compares only is returned
    /// as `TxnResponse::Failed` with indices and values for the caller's compares (the fence
    /// removed), as if unfenced.
    pub async fn txn(&self, store: &dyn Store, txn: Txn) -> flotilla_store::Result<TxnResponse> {
        let fence_at = txn.compares.len();
        match store.txn(self.guard(txn)).await? {
            TxnResponse::Failed {
                revision,
                failed,
                mut current,
            } => {
                if failed.contains(&fence_at) {
                    return Err(StoreError::LeadershipLost {
                        key: self.leadership.key.clone(),
                    });
                }
                current.truncate(fence_at);
                Ok(TxnResponse::Failed {
                    revision,
                    failed,
                    current,
                })
            }
            committed => Ok(committed),
        }
    }
}

enum FenceSource {
    Fixed(Fence),
    Following(watch::Receiver<Option<Leadership>>),
}

/// A [`Store`] whose every write (put, delete, txn, and so create / compare-and-put) is
/// fenced: it commits only while the leadership holds, and fails with
/// [`StoreError::LeadershipLost`] otherwise. Reads, watches and leases pass through.
pub struct FencedStore {
    inner: Arc<dyn Store>,
    source: FenceSource,
}

impl std::fmt::Debug for FencedStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let fence = match &self.source {
            FenceSource::Fixed(f) => Some(f.leadership.clone()),
            FenceSource::Following(rx) => rx.borrow().clone(),
        };
        f.debug_struct("FencedStore")
            .field("leadership", &fence)
            .finish_non_exhaustive()
    }
}

// === impl FencedStore ===

impl FencedStore {
    /// Fenced on one leadership term for good.
    pub fn new(inner: Arc<dyn Store>, leadership: Leadership) -> Self {
        Self {
            inner,
            source: FenceSource::Fixed(Fence::new(leadership)),
        }
    }

    /// Fenced on whatever leadership `leader` holds at each write; writes fail while it
    /// holds none.
    pub fn following(inner: Arc<dyn Store>, leader: watch::Receiver<Option<Leadership>>) -> Self {
        Self {
            inner,
            source: FenceSource::Following(leader),
        }
    }

    fn fence(&self) -> flotilla_store::Result<Fence> {
        match &self.source {
            FenceSource::Fixed(f) => Ok(f.clone()),
            FenceSource::Following(rx) => {
                rx.borrow()
                    .clone()
                    .map(Fence::new)
                    .ok_or_else(|| StoreError::LeadershipLost {
                        key: "(not leading)".into(),
                    })
            }
        }
    }
}

#[async_trait]
impl Wrapper for FencedStore {
    fn inner(&self) -> &dyn Store {
        &*self.inner
    }

    async fn put(
        &self,
        key: &str,
        value: Bytes,
        lease: Option<LeaseId>,
    ) -> flotilla_store::Result<Revision> {
        let op = Op::Put {
            key: key.to_owned(),
            value,
            lease,
        };
        let fence = self.fence()?;
        match fence.txn(&*self.inner, Txn::new().and_then(op)).await? {
            TxnResponse::Committed { revision, .. } => Ok(revision),
            TxnResponse::Failed { .. } => Err(StoreError::Internal(
                "fenced put failed without a failed compare".into(),
            )),
        }
    }

    async fn delete(&self, key: &str) -> flotilla_store::Result<DeleteResponse> {
        let txn = Txn::new().and_then(Op::get(key)).and_then(Op::delete(key));
        let fence = self.fence()?;
        match fence.txn(&*self.inner, txn).await? {
            TxnResponse::Committed { revision, results } => {
                let prev = match results.into_iter().next() {
                    Some(OpResult::Get(prev)) => prev,
                    _ => None,
                };
                Ok(DeleteResponse { revision, prev })
            }
            TxnResponse::Failed { .. } => Err(StoreError::Internal(
                "fenced delete failed without a failed compare".into(),
            )),
        }
    }

    async fn txn(&self, txn: Txn) -> flotilla_store::Result<TxnResponse> {
        self.fence()?.txn(&*self.inner, txn).await
    }
}
