//! `MemStore`: an in-memory MVCC store with etcd's semantics, for `flotilla up`, unit tests
//! and reconcile tests.
//!
//! ```text
//!   writers ──lock──► State { rev, keys: BTreeMap<key, [versions]>, log: [WatchBatch],
//!                             leases, compacted }
//!                        │ every revision, under the lock
//!                        ▼
//!                 broadcast::Sender<Arc<WatchBatch>>  (never blocks a writer)
//!                        │ one receiver per watch
//!                        ▼
//!                 watch task: filter by prefix ──mpsc──► WatchStream
//!                   lagged? re-read the history log from the last revision it saw;
//!                   log already compacted past it? → Err(Compacted): the caller re-lists
//! ```
//!
//! History: every key keeps its versions since the compaction point, and the log keeps every
//! revision since then, so ranges at a past revision and watches from a past revision work
//! inside the window. The window is bounded: after each write, if more than
//! [`MemStoreOptions::history_revisions`] revisions are kept (plus a small slack so that the
//! cost is amortised), the store compacts itself. [`Store::compact`] compacts explicitly.
//!
//! Leases expire on an injected [`Clock`]: a background task sleeps until the next deadline
//! (so watchers see the deletes without any other operation), and every operation also
//! expires due leases first, so that reads right after `ManualClock::advance` are
//! deterministic.

use std::collections::{BTreeMap, BTreeSet, HashMap, VecDeque};
use std::ops::Bound;
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::time::Duration;

use async_trait::async_trait;
use bytes::Bytes;
use tokio::sync::{Notify, broadcast};
use tokio::task::JoinHandle;

use crate::clock::{Clock, TokioClock};
use crate::error::{Result, StoreError};
use crate::types::{
    Compare, DeleteResponse, Event, KeyValue, Lease, LeaseId, Op, OpResult, RangeRequest,
    RangeResponse, Revision, Txn, TxnResponse, WatchBatch, WatchEvent, validate_key,
};
use crate::watch::{DEFAULT_WATCH_BUFFER, WatchSink, WatchStream};
use crate::{Store, StoreError as E};

/// Tuning of a [`MemStore`]. Every default is chosen for `flotilla up` scale.
#[derive(Clone, Debug)]
pub struct MemStoreOptions {
    /// How many past revisions are kept for ranges and watches at a past revision before the
    /// store compacts itself. Default 10,000 (a few seconds of a failover storm).
    pub history_revisions: i64,
    /// Items buffered per watch between its task and the consumer. Default
    /// [`DEFAULT_WATCH_BUFFER`].
    pub watch_buffer: usize,
    /// Revisions buffered in the broadcast fan-out before a slow watch lags and has to catch
    /// up from the history log. Default 4,096.
    pub broadcast_capacity: usize,
}

impl Default for MemStoreOptions {
    fn default() -> Self {
        Self {
            history_revisions: 10_000,
            watch_buffer: DEFAULT_WATCH_BUFFER,
            broadcast_capacity: 4096,
        }
    }
}

/// The in-memory [`Store`]. Cheap to clone: clones share the same data.
#[derive(Clone)]
pub struct MemStore {
    shared: Arc<Shared>,
}

impl std::fmt::Debug for MemStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MemStore")
            .field("options", &self.shared.opts)
            .finish_non_exhaustive()
    }
}

struct Shared {
    state: Mutex<State>,
    clock: Arc<dyn Clock>,
    events: broadcast::Sender<Arc<WatchBatch>>,
    lease_changed: Arc<Notify>,
    expiry_task: Mutex<Option<JoinHandle<()>>>,
    opts: MemStoreOptions,
}

impl Drop for Shared {
    fn drop(&mut self) {
        if let Ok(mut task) = self.expiry_task.lock()
            && let Some(task) = task.take()
        {
            task.abort();
        }
    }
}

/// One version of a key: its value, or a tombstone (`None`) at a delete.
#[derive(Clone, Debug)]
struct Version {
    mod_revision: Revision,
    kv: Option<KeyValue>,
}

#[derive(Debug)]
struct LeaseState {
    ttl: Duration,
    deadline: Duration,
    keys: BTreeSet<String>,
}

#[derive(Debug)]
struct State {
    rev: Revision,
    /// Reads and watches at revisions `>= compacted` are served.
    compacted: Revision,
    keys: BTreeMap<String, Vec<Version>>,
    /// Every revision's batch since `compacted` (inclusive).
    log: VecDeque<Arc<WatchBatch>>,
    leases: HashMap<i64, LeaseState>,
    next_lease: i64,
}

// === impl MemStore ===

impl Default for MemStore {
    fn default() -> Self {
        Self::new()
    }
}

impl MemStore {
    /// A store with default options on tokio's clock (which `tokio::time::pause` controls).
    pub fn new() -> Self {
        Self::with_options(MemStoreOptions::default(), Arc::new(TokioClock::default()))
    }

    /// A store on a given clock, e.g. a [`ManualClock`](crate::ManualClock) in tests.
    pub fn with_clock(clock: Arc<dyn Clock>) -> Self {
        Self::with_options(MemStoreOptions::default(), clock)
    }

    /// A store with explicit options and clock. Starts the lease-expiry task if called inside
    /// a tokio runtime; without one, leases expire only when the next operation runs.
    pub fn with_options(opts: MemStoreOptions, clock: Arc<dyn Clock>) -> Self {
        let (events, _) = broadcast::channel(opts.broadcast_capacity.max(1));
        let shared = Arc::new(Shared {
            state: Mutex::new(State {
                rev: 1,
                compacted: 0,
                keys: BTreeMap::new(),
                log: VecDeque::new(),
                leases: HashMap::new(),
                next_lease: 0x1000,
            }),
            clock,
            events,
            lease_changed: Arc::new(Notify::new()),
            expiry_task: Mutex::new(None),
            opts,
        });
        if let Ok(handle) = tokio::runtime::Handle::try_current() {
            let task = handle.spawn(expiry_loop(
                Arc::downgrade(&shared),
                shared.clock.clone(),
                shared.lease_changed.clone(),
            ));
            if let Ok(mut slot) = shared.expiry_task.lock() {
                *slot = Some(task);
            }
        }
        Self { shared }
    }

    /// The oldest revision still readable (0 before any compaction).
    pub fn compacted_revision(&self) -> Revision {
        self.shared.lock().map_or(0, |s| s.compacted)
    }
}

impl Shared {
    fn lock(&self) -> Result<MutexGuard<'_, State>> {
        self.state
            .lock()
            .map_err(|_| StoreError::Internal("memstore lock poisoned".into()))
    }

    /// Locks the state after expiring every lease whose deadline has passed.
    fn lock_fresh(&self) -> Result<MutexGuard<'_, State>> {
        let mut state = self.lock()?;
        let now = self.clock.now();
        self.expire_due(&mut state, now);
        Ok(state)
    }

    fn expire_due(&self, state: &mut State, now: Duration) {
        let due: Vec<i64> = state
            .leases
            .iter()
            .filter(|(_, l)| l.deadline <= now)
            .map(|(id, _)| *id)
            .collect();
        for id in due {
            self.remove_lease(state, id);
        }
    }

    /// Removes a lease and deletes its keys in one revision.
    fn remove_lease(&self, state: &mut State, id: i64) -> bool {
        let Some(lease) = state.leases.remove(&id) else {
            return false;
        };
        let ops: Vec<Op> = lease
            .keys
            .into_iter()
            .map(|key| Op::Delete { key })
            .collect();
        if !ops.is_empty() {
            self.apply(state, &ops);
        }
        true
    }

    /// Applies operations at the next revision (if any writes). The caller has validated
    /// them (leases exist, no duplicate keys).
    fn apply(&self, state: &mut State, ops: &[Op]) -> (Revision, Vec<OpResult>) {
        let new_rev = state.rev + 1;
        let mut events = Vec::new();
        let mut results = Vec::with_capacity(ops.len());
        for op in ops {
            match op {
                Op::Get { key } => results.push(OpResult::Get(state.current(key).cloned())),
                Op::Put { key, value, lease } => {
                    let prev = state.current(key).cloned();
                    if let Some(old) = prev.as_ref().and_then(|p| p.lease)
                        && let Some(l) = state.leases.get_mut(&old.0)
                    {
                        l.keys.remove(key);
                    }
                    if let Some(new) = lease
                        && let Some(l) = state.leases.get_mut(&new.0)
                    {
                        l.keys.insert(key.clone());
                    }
                    let kv = KeyValue {
                        key: key.clone(),
                        value: value.clone(),
                        create_revision: prev.as_ref().map_or(new_rev, |p| p.create_revision),
                        mod_revision: new_rev,
                        version: prev.as_ref().map_or(0, |p| p.version) + 1,
                        lease: *lease,
                    };
                    state.keys.entry(key.clone()).or_default().push(Version {
                        mod_revision: new_rev,
                        kv: Some(kv.clone()),
                    });
                    events.push(Event::Put(kv));
                    results.push(OpResult::Put);
                }
                Op::Delete { key } => {
                    let prev = state.current(key).cloned();
                    if let Some(p) = &prev {
                        if let Some(old) = p.lease
                            && let Some(l) = state.leases.get_mut(&old.0)
                        {
                            l.keys.remove(key);
                        }
                        state.keys.entry(key.clone()).or_default().push(Version {
                            mod_revision: new_rev,
                            kv: None,
                        });
                        events.push(Event::Delete {
                            key: key.clone(),
                            prev: Some(p.clone()),
                            mod_revision: new_rev,
                        });
                    }
                    results.push(OpResult::Delete {
                        deleted: prev.is_some(),
                    });
                }
            }
        }
        if events.is_empty() {
            return (state.rev, results);
        }
        state.rev = new_rev;
        let batch = Arc::new(WatchBatch {
            revision: new_rev,
            events,
        });
        state.log.push_back(batch.clone());
        // No receivers is fine: nobody watches.
        let _ = self.events.send(batch);
        let window = self.opts.history_revisions.max(1);
        let slack = (window / 16).max(1);
        if state.rev - window - state.compacted >= slack {
            state.compact(state.rev - window);
        }
        (new_rev, results)
    }

    fn check_leases(state: &State, ops: &[Op]) -> Result<()> {
        for op in ops {
            if let Op::Put {
                lease: Some(lease), ..
            } = op
                && !state.leases.contains_key(&lease.0)
            {
                return Err(StoreError::LeaseNotFound { lease: *lease });
            }
        }
        Ok(())
    }
}

impl State {
    fn current(&self, key: &str) -> Option<&KeyValue> {
        self.keys.get(key)?.last()?.kv.as_ref()
    }

    fn at(&self, key: &str, rev: Revision) -> Option<&KeyValue> {
        let versions = self.keys.get(key)?;
        let idx = versions.partition_point(|v| v.mod_revision <= rev);
        versions.get(idx.checked_sub(1)?)?.kv.as_ref()
    }

    /// Drops history below `rev`: per key, only the latest version at or before `rev`
    /// survives (tombstones vanish), and the log keeps revisions `>= rev`.
    fn compact(&mut self, rev: Revision) {
        if rev <= self.compacted {
            return;
        }
        let mut touched = BTreeSet::new();
        while let Some(front) = self.log.front() {
            if front.revision > rev {
                break;
            }
            for ev in &front.events {
                touched.insert(ev.key().to_owned());
            }
            if front.revision < rev {
                self.log.pop_front();
            } else {
                break;
            }
        }
        for key in touched {
            let Some(versions) = self.keys.get_mut(&key) else {
                continue;
            };
            let idx = versions.partition_point(|v| v.mod_revision <= rev);
            if idx > 1 {
                versions.drain(..idx - 1);
            }
            if versions
                .first()
                .is_some_and(|v| v.kv.is_none() && v.mod_revision <= rev)
            {
                versions.remove(0);
            }
            if versions.is_empty() {
                self.keys.remove(&key);
            }
        }
        self.compacted = rev;
    }

    fn check_read_revision(&self, rev: Revision) -> Result<()> {
        if rev < self.compacted {
            return Err(E::Compacted {
                compact_revision: self.compacted,
            });
        }
        if rev > self.rev {
            return Err(E::FutureRevision {
                revision: rev,
                current: self.rev,
            });
        }
        Ok(())
    }

    /// Batches with revision >= `from`, filtered to `prefix`.
    fn replay(&self, prefix: &str, from: Revision) -> Vec<WatchBatch> {
        let start = self.log.partition_point(|b| b.revision < from);
        self.log
            .range(start..)
            .filter_map(|b| filter_batch(b, prefix))
            .collect()
    }
}

fn filter_batch(batch: &WatchBatch, prefix: &str) -> Option<WatchBatch> {
    let events: Vec<Event> = batch
        .events
        .iter()
        .filter(|e| e.key().starts_with(prefix))
        .cloned()
        .collect();
    (!events.is_empty()).then_some(WatchBatch {
        revision: batch.revision,
        events,
    })
}

#[async_trait]
impl Store for MemStore {
    async fn get(&self, key: &str) -> Result<Option<KeyValue>> {
        validate_key(key)?;
        let state = self.shared.lock_fresh()?;
        Ok(state.current(key).cloned())
    }

    async fn range(&self, req: RangeRequest) -> Result<RangeResponse> {
        let state = self.shared.lock_fresh()?;
        let rev = match req.revision {
            Some(r) if r > 0 => {
                state.check_read_revision(r)?;
                r
            }
            _ => state.rev,
        };
        let lower = match &req.start_after {
            Some(after) if after.as_str() >= req.prefix.as_str() => Bound::Excluded(after.clone()),
            _ => Bound::Included(req.prefix.clone()),
        };
        let mut kvs = Vec::new();
        let mut more = false;
        for (key, _) in state.keys.range::<String, _>((lower, Bound::Unbounded)) {
            if !key.starts_with(&req.prefix) {
                break;
            }
            let Some(kv) = state.at(key, rev) else {
                continue;
            };
            if req.limit > 0 && kvs.len() == req.limit {
                more = true;
                break;
            }
            kvs.push(kv.clone());
        }
        Ok(RangeResponse {
            kvs,
            more,
            revision: rev,
        })
    }

    async fn put(&self, key: &str, value: Bytes, lease: Option<LeaseId>) -> Result<Revision> {
        validate_key(key)?;
        let ops = [Op::Put {
            key: key.to_owned(),
            value,
            lease,
        }];
        let mut state = self.shared.lock_fresh()?;
        Shared::check_leases(&state, &ops)?;
        Ok(self.shared.apply(&mut state, &ops).0)
    }

    async fn delete(&self, key: &str) -> Result<DeleteResponse> {
        validate_key(key)?;
        let mut state = self.shared.lock_fresh()?;
        let prev = state.current(key).cloned();
        let (revision, _) = self.shared.apply(
            &mut state,
            &[Op::Delete {
                key: key.to_owned(),
            }],
        );
        Ok(DeleteResponse { revision, prev })
    }

    async fn txn(&self, txn: Txn) -> Result<TxnResponse> {
        txn.validate()?;
        let mut state = self.shared.lock_fresh()?;
        let current: Vec<Option<KeyValue>> = txn
            .compares
            .iter()
            .map(|c| state.current(&c.key).cloned())
            .collect();
        let failed = Compare::failing(&txn.compares, &current);
        if !failed.is_empty() {
            return Ok(TxnResponse::Failed {
                revision: state.rev,
                failed,
                current,
            });
        }
        Shared::check_leases(&state, &txn.success)?;
        let (revision, results) = self.shared.apply(&mut state, &txn.success);
        Ok(TxnResponse::Committed { revision, results })
    }

    async fn compact(&self, revision: Revision) -> Result<()> {
        let mut state = self.shared.lock_fresh()?;
        if revision <= state.compacted {
            return Err(E::Compacted {
                compact_revision: state.compacted,
            });
        }
        if revision > state.rev {
            return Err(E::FutureRevision {
                revision,
                current: state.rev,
            });
        }
        state.compact(revision);
        Ok(())
    }

    async fn current_revision(&self) -> Result<Revision> {
        Ok(self.shared.lock_fresh()?.rev)
    }

    async fn watch(&self, prefix: &str, from_revision: Option<Revision>) -> Result<WatchStream> {
        let (stream, sink) = WatchStream::channel(self.shared.opts.watch_buffer);
        let (replay, rx, seen, start) = {
            let state = self.shared.lock_fresh()?;
            let start = match from_revision {
                Some(r) if r > 0 => r,
                _ => state.rev + 1,
            };
            if start < state.compacted {
                // Reported on the stream, like etcd does, so callers handle one path.
                let compacted = E::Compacted {
                    compact_revision: state.compacted,
                };
                let _ = sink.tx.try_send(Err(compacted));
                return Ok(stream);
            }
            // Subscribing under the lock: no revision falls between replay and live.
            (
                state.replay(prefix, start),
                self.shared.events.subscribe(),
                state.rev,
                start,
            )
        };
        let filter = Filter {
            prefix: prefix.to_owned(),
            start,
        };
        let task = tokio::spawn(watch_task(
            Arc::downgrade(&self.shared),
            filter,
            replay,
            rx,
            seen,
            sink,
        ));
        Ok(stream.with_task(task))
    }

    async fn lease_grant(&self, ttl: Duration) -> Result<Lease> {
        if ttl.is_zero() {
            return Err(E::InvalidArgument("lease TTL must be positive".into()));
        }
        let mut state = self.shared.lock_fresh()?;
        state.next_lease += 1;
        let id = state.next_lease;
        let deadline = self.shared.clock.now() + ttl;
        state.leases.insert(
            id,
            LeaseState {
                ttl,
                deadline,
                keys: BTreeSet::new(),
            },
        );
        drop(state);
        self.shared.lease_changed.notify_one();
        Ok(Lease {
            id: LeaseId(id),
            ttl,
        })
    }

    async fn lease_keep_alive(&self, lease: LeaseId) -> Result<Duration> {
        let mut state = self.shared.lock_fresh()?;
        let now = self.shared.clock.now();
        let l = state
            .leases
            .get_mut(&lease.0)
            .ok_or(E::LeaseNotFound { lease })?;
        l.deadline = now + l.ttl;
        let ttl = l.ttl;
        drop(state);
        self.shared.lease_changed.notify_one();
        Ok(ttl)
    }

    async fn lease_revoke(&self, lease: LeaseId) -> Result<()> {
        let mut state = self.shared.lock_fresh()?;
        if !self.shared.remove_lease(&mut state, lease.0) {
            return Err(E::LeaseNotFound { lease });
        }
        drop(state);
        self.shared.lease_changed.notify_one();
        Ok(())
    }
}

/// Expires leases when their deadline passes, so that watchers see the deletes even when no
/// other operation runs. Holds only a weak reference: it ends when the store is dropped.
async fn expiry_loop(shared: Weak<Shared>, clock: Arc<dyn Clock>, changed: Arc<Notify>) {
    loop {
        let next = {
            let Some(shared) = shared.upgrade() else {
                return;
            };
            let Ok(mut state) = shared.lock() else {
                return;
            };
            shared.expire_due(&mut state, clock.now());
            state.leases.values().map(|l| l.deadline).min()
        };
        match next {
            Some(deadline) => {
                tokio::select! {
                    () = clock.sleep_until(deadline) => {}
                    () = changed.notified() => {}
                }
            }
            None => changed.notified().await,
        }
    }
}

/// Feeds one watch: the replayed history, then live batches from the broadcast. A watch that
/// lags behind the broadcast re-reads the log from the last revision it saw; if the log has
/// been compacted past it, it ends with [`StoreError::Compacted`] so that the caller re-lists.
async fn watch_task(
    shared: Weak<Shared>,
    filter: Filter,
    replay: Vec<WatchBatch>,
    mut rx: broadcast::Receiver<Arc<WatchBatch>>,
    mut seen: Revision,
    mut sink: WatchSink,
) {
    for batch in replay {
        if sink.tx.send(Ok(WatchEvent::Batch(batch))).await.is_err() {
            return;
        }
    }
    loop {
        let step = tokio::select! {
            () = sink.tx.closed() => return,
            Some(()) = sink.progress.recv() => {
                // Take everything already published, then report how far we are.
                loop {
                    match rx.try_recv() {
                        Ok(batch) => {
                            if !forward(&sink, &filter, &batch, &mut seen).await {
                                return;
                            }
                        }
                        Err(broadcast::error::TryRecvError::Empty) => break,
                        Err(broadcast::error::TryRecvError::Lagged(_)) => {
                            match catch_up(&shared, &filter, &mut seen, &sink).await {
                                Some(new_rx) => rx = new_rx,
                                None => return,
                            }
                        }
                        Err(broadcast::error::TryRecvError::Closed) => {
                            let _ = sink.tx.send(Err(E::WatchClosed("store dropped".into()))).await;
                            return;
                        }
                    }
                }
                Some(WatchEvent::Progress { revision: seen })
            }
            received = rx.recv() => match received {
                Ok(batch) => {
                    if !forward(&sink, &filter, &batch, &mut seen).await {
                        return;
                    }
                    None
                }
                Err(broadcast::error::RecvError::Lagged(_)) => {
                    match catch_up(&shared, &filter, &mut seen, &sink).await {
                        Some(new_rx) => rx = new_rx,
                        None => return,
                    }
                    None
                }
                Err(broadcast::error::RecvError::Closed) => {
                    let _ = sink.tx.send(Err(E::WatchClosed("store dropped".into()))).await;
                    return;
                }
            },
        };
        if let Some(item) = step
            && sink.tx.send(Ok(item)).await.is_err()
        {
            return;
        }
    }
}

/// What one watch wants: keys under `prefix`, revisions from `start` on.
struct Filter {
    prefix: String,
    start: Revision,
}

async fn forward(
    sink: &WatchSink,
    filter: &Filter,
    batch: &WatchBatch,
    seen: &mut Revision,
) -> bool {
    if batch.revision <= *seen {
        return true;
    }
    *seen = batch.revision;
    if batch.revision < filter.start {
        return true;
    }
    match filter_batch(batch, &filter.prefix) {
        Some(b) => sink.tx.send(Ok(WatchEvent::Batch(b))).await.is_ok(),
        None => true,
    }
}

/// Re-reads the history log after the watch lagged. Returns the new receiver, or `None` if
/// the watch ended (an error was sent, or the consumer left).
async fn catch_up(
    shared: &Weak<Shared>,
    filter: &Filter,
    seen: &mut Revision,
    sink: &WatchSink,
) -> Option<broadcast::Receiver<Arc<WatchBatch>>> {
    let outcome = match shared.upgrade() {
        None => Err(E::WatchClosed("store dropped".into())),
        Some(shared) => match shared.lock() {
            Err(e) => Err(e),
            Ok(state) if *seen + 1 < state.compacted => Err(E::Compacted {
                compact_revision: state.compacted,
            }),
            Ok(state) => {
                let replay = state.replay(&filter.prefix, (*seen + 1).max(filter.start));
                let rx = shared.events.subscribe();
                let rev = state.rev;
                Ok((replay, rx, rev))
            }
        },
    };
    match outcome {
        Err(e) => {
            let _ = sink.tx.send(Err(e)).await;
            None
        }
        Ok((replay, rx, rev)) => {
            tracing::debug!(
                prefix = filter.prefix,
                from = *seen + 1,
                to = rev,
                "memstore watch lagged; caught up from history"
            );
            *seen = rev;
            for batch in replay {
                if sink.tx.send(Ok(WatchEvent::Batch(batch))).await.is_err() {
                    return None;
                }
            }
            Some(rx)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clock::ManualClock;

    fn small(history: i64, broadcast: usize, buffer: usize) -> MemStore {
        MemStore::with_options(
            MemStoreOptions {
                history_revisions: history,
                watch_buffer: buffer,
                broadcast_capacity: broadcast,
            },
            Arc::new(ManualClock::new()),
        )
    }

    /// Puts `k/0` … `k/<n-1>`, one revision each.
    async fn put_numbered(s: &MemStore, n: usize) {
        for i in 0..n {
            s.put(&format!("k/{i}"), Bytes::from_static(b"v"), None)
                .await
                .unwrap();
        }
    }

    async fn next(w: &mut WatchStream) -> Result<WatchEvent> {
        tokio::time::timeout(Duration::from_secs(5), w.next())
            .await
            .expect("watch item in time")
            .expect("watch still open")
    }

    #[tokio::test]
    async fn starts_like_etcd() {
        let s = MemStore::new();
        assert_eq!(s.current_revision().await.unwrap(), 1);
        assert_eq!(s.put("a", Bytes::from_static(b"1"), None).await.unwrap(), 2);
    }

    #[tokio::test]
    async fn history_window_compacts_itself() {
        let s = small(10, 64, 64);
        for i in 0..40 {
            s.put("k", Bytes::from(format!("{i}")), None).await.unwrap();
        }
        let rev = s.current_revision().await.unwrap();
        let compacted = s.compacted_revision();
        assert!(
            compacted >= rev - 11 && compacted <= rev - 10,
            "compacted={compacted} rev={rev}"
        );
        // Inside the window: readable, with the value of that time.
        let old = s
            .range(RangeRequest::prefix("k").at_revision(rev - 5))
            .await
            .unwrap();
        assert_eq!(old.kvs[0].mod_revision, rev - 5);
        // Below it: compacted, for ranges and for watches.
        assert!(matches!(
            s.range(RangeRequest::prefix("k").at_revision(2)).await,
            Err(StoreError::Compacted { compact_revision }) if compact_revision == compacted
        ));
        let mut w = s.watch("k", Some(2)).await.unwrap();
        assert!(matches!(
            next(&mut w).await,
            Err(StoreError::Compacted { .. })
        ));
        // Only the kept versions remain.
        let versions = s.shared.lock().unwrap().keys["k"].len() as i64;
        assert!(versions <= rev - compacted + 1, "versions={versions}");
    }

    #[tokio::test]
    async fn slow_watcher_catches_up_from_history_without_blocking_writers() {
        // Broadcast of 2 and a buffer of 1: the watcher lags almost at once.
        let s = small(1000, 2, 1);
        let mut w = s.watch("k/", None).await.unwrap();
        put_numbered(&s, 100).await;
        let mut last = 0;
        for i in 0..100 {
            let WatchEvent::Batch(b) = next(&mut w).await.unwrap() else {
                panic!("expected a batch");
            };
            assert!(b.revision > last, "revisions go forward");
            last = b.revision;
            assert_eq!(b.events[0].key(), format!("k/{i}"));
        }
    }

    #[tokio::test]
    async fn slow_watcher_past_the_window_gets_compacted() {
        let s = small(4, 2, 1);
        let mut w = s.watch("k/", None).await.unwrap();
        put_numbered(&s, 50).await;
        let mut saw_compacted = false;
        while let Some(item) = tokio::time::timeout(Duration::from_secs(5), w.next())
            .await
            .unwrap()
        {
            if let Err(e) = item {
                assert!(matches!(e, StoreError::Compacted { .. }), "{e}");
                saw_compacted = true;
            }
        }
        assert!(
            saw_compacted,
            "a watcher that fell out of the window must be told to re-list"
        );
    }

    #[tokio::test]
    async fn lease_expiry_follows_the_manual_clock() {
        let clock = ManualClock::new();
        let s = MemStore::with_clock(Arc::new(clock.clone()));
        let lease = s.lease_grant(Duration::from_secs(10)).await.unwrap();
        s.put("a", Bytes::from_static(b"1"), Some(lease.id))
            .await
            .unwrap();
        clock.advance(Duration::from_secs(9));
        assert!(s.get("a").await.unwrap().is_some(), "not yet expired");
        s.lease_keep_alive(lease.id).await.unwrap();
        clock.advance(Duration::from_secs(9));
        assert!(
            s.get("a").await.unwrap().is_some(),
            "keep-alive pushed the deadline"
        );
        clock.advance(Duration::from_secs(1));
        assert!(
            s.get("a").await.unwrap().is_none(),
            "expired at exactly the deadline"
        );
        assert!(matches!(
            s.lease_keep_alive(lease.id).await,
            Err(StoreError::LeaseNotFound { .. })
        ));
    }

    #[tokio::test(start_paused = true)]
    async fn lease_expiry_under_paused_tokio_time_reaches_watchers() {
        let s = MemStore::new();
        let lease = s.lease_grant(Duration::from_secs(30)).await.unwrap();
        s.put("a", Bytes::from_static(b"1"), Some(lease.id))
            .await
            .unwrap();
        let mut w = s.watch("a", None).await.unwrap();
        // With paused time the runtime jumps straight to the lease deadline.
        let b = w.next_batch(Duration::from_secs(60)).await;
        assert!(matches!(&b.events[0], Event::Delete { key, .. } if key == "a"));
    }

    #[tokio::test]
    async fn progress_reports_the_latest_revision() {
        let s = MemStore::new();
        let mut w = s.watch("quiet/", None).await.unwrap();
        let rev = s.put("busy", Bytes::from_static(b"1"), None).await.unwrap();
        w.request_progress().unwrap();
        assert_eq!(
            next(&mut w).await.unwrap(),
            WatchEvent::Progress { revision: rev }
        );
    }
}

#[cfg(test)]
mod model_tests {
    //! MemStore against a plain model: after random puts, deletes and transactions (with
    //! automatic compaction on a tiny window), every revision still in the window reads
    //! exactly as the model did at that revision, older ones report `Compacted`, and a watch
    //! from the compaction point replays exactly the model's changes.

    use std::collections::BTreeMap;

    use proptest::prelude::*;

    use super::*;
    use crate::clock::ManualClock;

    /// One key's change in a revision: the new value, or `None` for a delete.
    type Change = (String, Option<Vec<u8>>);

    #[derive(Clone, Debug)]
    enum Step {
        Put(u8, u8),
        Delete(u8),
        Txn(Vec<(u8, Option<u8>)>),
    }

    fn step() -> impl Strategy<Value = Step> {
        prop_oneof![
            (0u8..6, any::<u8>()).prop_map(|(k, v)| Step::Put(k, v)),
            (0u8..6).prop_map(Step::Delete),
            proptest::collection::vec((0u8..6, proptest::option::of(any::<u8>())), 1..4)
                .prop_map(Step::Txn),
        ]
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(64))]
        #[test]
        fn matches_a_plain_model(steps in proptest::collection::vec(step(), 1..80)) {
            let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
            rt.block_on(async move {
                let window = 8;
                let store = MemStore::with_options(
                    MemStoreOptions { history_revisions: window, ..MemStoreOptions::default() },
                    Arc::new(ManualClock::new()),
                );
                // The model: the key space after each revision, and each revision's changes.
                let mut snapshots: BTreeMap<Revision, BTreeMap<String, Vec<u8>>> = BTreeMap::new();
                snapshots.insert(1, BTreeMap::new());
                let mut changes: BTreeMap<Revision, Vec<Change>> = BTreeMap::new();
                let mut current: BTreeMap<String, Vec<u8>> = BTreeMap::new();
                for step in steps {
                    let writes: Vec<(String, Option<u8>)> = match step {
                        Step::Put(k, v) => vec![(format!("k{k}"), Some(v))],
                        Step::Delete(k) => vec![(format!("k{k}"), None)],
                        Step::Txn(ops) => {
                            let mut seen = std::collections::HashSet::new();
                            ops.into_iter()
                                .filter(|(k, _)| seen.insert(*k))
                                .map(|(k, v)| (format!("k{k}"), v))
                                .collect()
                        }
                    };
                    let txn = Txn {
                        compares: vec![],
                        success: writes
                            .iter()
                            .map(|(k, v)| match v {
                                Some(v) => Op::put(k.clone(), vec![*v]),
                                None => Op::delete(k.clone()),
                            })
                            .collect(),
                    };
                    let rev = store.txn(txn).await.unwrap().revision();
                    let mut changed = Vec::new();
                    for (k, v) in writes {
                        match v {
                            Some(v) => {
                                current.insert(k.clone(), vec![v]);
                                changed.push((k, Some(vec![v])));
                            }
                            None => {
                                if current.remove(&k).is_some() {
                                    changed.push((k, None));
                                }
                            }
                        }
                    }
                    let last = *snapshots.keys().last().unwrap();
                    if changed.is_empty() {
                        prop_assert_eq!(rev, last, "a no-op transaction keeps the revision");
                    } else {
                        prop_assert_eq!(rev, last + 1);
                        snapshots.insert(rev, current.clone());
                        changes.insert(rev, changed);
                    }
                }
                let head = store.current_revision().await.unwrap();
                let compacted = store.compacted_revision();
                prop_assert!(head - compacted <= window + window / 16 + 1);
                for (rev, snapshot) in &snapshots {
                    let read = store.range(RangeRequest::prefix("k").at_revision(*rev)).await;
                    if *rev < compacted {
                        prop_assert!(matches!(read, Err(StoreError::Compacted { .. })), "rev {}", rev);
                        continue;
                    }
                    let got: BTreeMap<String, Vec<u8>> = read
                        .unwrap()
                        .kvs
                        .into_iter()
                        .map(|kv| (kv.key, kv.value.to_vec()))
                        .collect();
                    prop_assert_eq!(&got, snapshot, "range at revision {}", rev);
                }
                let from = compacted.max(2);
                let mut watch = store.watch("k", Some(from)).await.unwrap();
                for (rev, expected) in changes.range(from..) {
                    let batch = watch.next_batch(Duration::from_secs(5)).await;
                    prop_assert_eq!(batch.revision, *rev);
                    let got: Vec<Change> = batch
                        .events
                        .into_iter()
                        .map(|e| match e {
                            Event::Put(kv) => (kv.key, Some(kv.value.to_vec())),
                            Event::Delete { key, .. } => (key, None),
                        })
                        .collect();
                    prop_assert_eq!(&got, expected);
                }
                Ok(())
            })?;
        }
    }
}
