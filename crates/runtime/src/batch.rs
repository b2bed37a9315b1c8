//! Group commit of guarded writes: many reconciles hand their compare-and-swap updates to one
//! writer task, which sends whatever has accumulated to the store together with
//! [`Typed::update_many`] (≤ 64 guarded puts per transaction, each keeping its own compare
//! on the revision its caller read).
//!
//! ```text
//!   reconcile ─┐ update(old, new) ──► mpsc ──► writer task: take one, wait for a free slot
//!   reconcile ─┤                                (≤ concurrency batches in flight), take what
//!   reconcile ─┘                                is waiting (≤ max_batch, lingering a few
//!        ▲                                      yields if asked; one write per key if asked)
//!        │                                      → update_many(batch)
//!        └── oneshot, one per write: Ok(written) | Conflict | NotFound | LeadershipLost | …
//! ```
//!
//! A failover of 10,000 bindings thus costs about 10,000 / 64 transactions instead of 10,000
//! sequential round trips (docs/design.md §7), while a lone write still goes out at once. Batching
//! changes how many round trips a burst costs, never what a write may overwrite: a loser gets
//! its own `Conflict` (or `NotFound`) and is re-read and re-decided by its caller (I5);
//! nothing is retried here. A failure of the whole batch (the leadership fence of a
//! [`FencedStore`](crate::FencedStore), an unavailable store) is reported to every write in
//! it.
//!
//! The task ends when every handle is dropped or, with [`BatchWriter::spawn_until`], on
//! shutdown: it then refuses new writes but still commits (and answers) the ones already
//! queued, so no caller is left waiting.

use std::collections::{HashSet, VecDeque};
use std::fmt;
use std::sync::Arc;

use flotilla_store::typed::{Stored, Typed, Update};
use flotilla_store::{MAX_TXN_OPS, Result, StoreError};
use tokio::sync::{Semaphore, mpsc, oneshot};

use crate::queue::metric_component;
use crate::shutdown::Shutdown;

/// How a [`BatchWriter`] groups writes. The default sends what is waiting at once, in
/// batches of up to 64, one batch at a time, and records no metric.
#[derive(Clone, Debug)]
pub struct BatchConfig {
    max_batch: usize,
    concurrency: usize,
    linger_yields: usize,
    one_write_per_key: bool,
    metric: Option<String>,
}

impl Default for BatchConfig {
    fn default() -> Self {
        Self {
            max_batch: MAX_TXN_OPS / 2,
            concurrency: 1,
            linger_yields: 0,
            one_write_per_key: false,
            metric: None,
        }
    }
}

// === impl BatchConfig ===

impl BatchConfig {
    /// Group commit for `workers` concurrent reconciles (docs/design.md §7): up to `workers`
    /// writes per transaction, a few yields of lingering so that workers mid-decision join the
    /// batch, metrics under `name`.
    pub fn group_commit(workers: usize, name: &str) -> Self {
        Self::default()
            .max_batch(workers)
            .linger_yields(4)
            .metrics(name)
    }

    /// The largest batch handed to one [`Typed::update_many`] call (at least 1). Default 64:
    /// etcd's `--max-txn-ops` 128 divided by the compare and the put of each write. A larger
    /// batch is split by `update_many` into transactions of 64 sent one after the other.
    pub fn max_batch(mut self, max_batch: usize) -> Self {
        self.max_batch = max_batch.max(1);
        self
    }

    /// How many batches may be in flight at once (at least 1). Default 1. With more, the
    /// writer drains the next batch while earlier ones commit; while every slot is busy,
    /// writes pile up and the next transaction carries them all (the scheduler pipelines 4).
    pub fn concurrency(mut self, concurrency: usize) -> Self {
        self.concurrency = concurrency.clamp(1, Semaphore::MAX_PERMITS);
        self
    }

    setters! {
        /// How many times the writer yields (no timer) to let more writes arrive before it
        /// sends a batch that is not full. Default 0: send what is waiting. A few yields let
        /// workers that are mid-decision join the batch.
        linger_yields(yields: usize);
        /// Whether a batch may hold at most one write per key; a later write of a key already in
        /// the batch then waits for the next batch (and, its revision being stale by then, is
        /// usually answered `Conflict`). Default off. etcd refuses a transaction that writes a
        /// key twice, failing every write of the batch, so turn this on when two callers may
        /// write the same key at the same time.
        one_write_per_key(on: bool);
    }

    /// Records the size of every batch in the histogram
    /// `flotilla_<component>_write_batch_size` (characters other than `[A-Za-z0-9_]` in
    /// `component` become `_`). Default: no metric.
    pub fn metrics(mut self, component: &str) -> Self {
        self.metric = Some(format!(
            "flotilla_{}_write_batch_size",
            metric_component(component)
        ));
        self
    }
}

struct Request<R> {
    update: Update<R>,
    reply: oneshot::Sender<Result<R>>,
}

/// A handle on a group-commit writer task for objects of kind `R`; cheap to clone.
pub struct BatchWriter<R> {
    tx: mpsc::Sender<Request<R>>,
}

clone_handle!(BatchWriter<R> { tx });

impl<R> fmt::Debug for BatchWriter<R> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("BatchWriter").finish_non_exhaustive()
    }
}

// === impl BatchWriter ===

impl<R: Stored + 'static> BatchWriter<R> {
    /// Starts the writer task on `typed` (normally over the leader-fenced store). It runs
    /// until every handle is dropped.
    pub fn spawn(typed: Typed, config: BatchConfig) -> Self {
        Self::start(typed, config, None)
    }

    /// Starts the writer task on `typed`, until every handle is dropped or `shutdown` fires.
    /// On shutdown new writes are refused, and those already queued are still committed.
    pub fn spawn_until(typed: Typed, config: BatchConfig, shutdown: Shutdown) -> Self {
        Self::start(typed, config, Some(shutdown))
    }

    fn start(typed: Typed, config: BatchConfig, shutdown: Option<Shutdown>) -> Self {
        let capacity = config
            .max_batch
            .saturating_mul(config.concurrency)
            .saturating_mul(4)
            .min(Semaphore::MAX_PERMITS);
        let (tx, rx) = mpsc::channel(capacity);
        tokio::spawn(run(typed, config, rx, shutdown));
        Self { tx }
    }

    /// Writes `new` if the object still has `old`'s resourceVersion (0: if it is absent),
    /// batched with whatever else is waiting; the typed layer bumps the generation on a spec
    /// change. Returns the written object, or the error of this write alone: `Conflict` or
    /// `NotFound` (re-read and re-decide), or the batch's failure (`LeadershipLost`, ...).
    pub async fn update(&self, old: impl Into<std::sync::Arc<R>>, new: R) -> Result<R> {
        self.write(Update::new(old, new)).await
    }

    /// Like [`BatchWriter::update`], for an [`Update`] that may carry guards (other keys the
    /// write was derived from, compared in the same transaction).
    pub async fn write(&self, update: Update<R>) -> Result<R> {
        let (reply, rx) = oneshot::channel();
        let request = Request { update, reply };
        self.tx.send(request).await.map_err(|_| stopped::<R>())?;
        rx.await.map_err(|_| stopped::<R>())?
    }

    /// Writes several updates (queued together, so usually in one transaction); one result
    /// each, in order.
    pub async fn update_all(&self, updates: Vec<Update<R>>) -> Vec<Result<R>> {
        let mut pending = Vec::with_capacity(updates.len());
        for update in updates {
            let (reply, rx) = oneshot::channel();
            let sent = self.tx.send(Request { update, reply }).await;
            pending.push(sent.ok().map(|()| rx));
        }
        let mut out = Vec::with_capacity(pending.len());
        for rx in pending {
            out.push(match rx {
                Some(rx) => rx.await.unwrap_or_else(|_| Err(stopped::<R>())),
                None => Err(stopped::<R>()),
            });
        }
        out
    }
}

/// What a write gets when the writer task is gone (shut down).
fn stopped<R: Stored>() -> StoreError {
    StoreError::Internal(format!("the {} batch writer has stopped", R::KIND))
}

async fn run<R: Stored + 'static>(
    typed: Typed,
    config: BatchConfig,
    mut rx: mpsc::Receiver<Request<R>>,
    shutdown: Option<Shutdown>,
) {
    let slots = Arc::new(Semaphore::new(config.concurrency));
    let batch_size = config.metric.clone().map(|name| metrics::histogram!(name));
    let stop = async move {
        match shutdown {
            Some(shutdown) => shutdown.triggered().await,
            None => std::future::pending().await,
        }
    };
    tokio::pin!(stop);
    let mut stopping = false;
    // Writes held back from a batch that already wrote their key (one_write_per_key).
    let mut carry: VecDeque<Request<R>> = VecDeque::new();
    loop {
        let first = match carry.pop_front() {
            Some(r) => r,
            None if stopping => match rx.recv().await {
                Some(r) => r,
                None => return,
            },
            None => tokio::select! {
                r = rx.recv() => match r {
                    Some(r) => r,
                    None => return,
                },
                () = &mut stop => {
                    // Refuse new writes; those already queued are still received (drained).
                    rx.close();
                    stopping = true;
                    continue;
                }
            },
        };
        // Wait for a slot before draining: while every slot is busy, writes accumulate and
        // the next transaction carries more of them.
        let Ok(permit) = slots.clone().acquire_owned().await else {
            return;
        };
        let batch = take_batch(first, &mut rx, &mut carry, &config).await;
        if let Some(histogram) = &batch_size {
            histogram.record(batch.len() as f64);
        }
        let typed = typed.clone();
        tokio::spawn(async move {
            commit(&typed, batch).await;
            drop(permit);
        });
    }
}

/// `first` and what else is waiting (carried-over writes first), up to `max_batch`.
async fn take_batch<R: Stored>(
    first: Request<R>,
    rx: &mut mpsc::Receiver<Request<R>>,
    carry: &mut VecDeque<Request<R>>,
    config: &BatchConfig,
) -> Vec<Request<R>> {
    let mut keys = HashSet::new();
    if config.one_write_per_key {
        keys.insert(first.update.old.key());
    }
    let mut batch = vec![first];
    let mut held = VecDeque::new();
    let mut lingered = 0;
    while batch.len() < config.max_batch {
        let next = match carry.pop_front() {
            Some(r) => r,
            None => match rx.try_recv() {
                Ok(r) => r,
                Err(_) if lingered < config.linger_yields => {
                    // Let the workers that are mid-decision run a little, and take that too.
                    lingered += 1;
                    tokio::task::yield_now().await;
                    continue;
                }
                Err(_) => break,
            },
        };
        if !config.one_write_per_key || keys.insert(next.update.old.key()) {
            batch.push(next);
        } else {
            held.push_back(next);
        }
    }
    held.extend(carry.drain(..));
    *carry = held;
    batch
}

/// Sends one batch and answers each of its writes.
async fn commit<R: Stored>(typed: &Typed, batch: Vec<Request<R>>) {
    let size = batch.len();
    let (updates, replies): (Vec<_>, Vec<_>) =
        batch.into_iter().map(|r| (r.update, r.reply)).unzip();
    match typed.update_many(updates).await {
        Ok(results) => {
            for (reply, result) in replies.into_iter().zip(results) {
                let _ = reply.send(result);
            }
        }
        Err(e) => {
            tracing::debug!(error = %e, size, kind = R::KIND, "batched write failed");
            for reply in replies {
                let _ = reply.send(Err(replicate(&e)));
            }
        }
    }
}

/// The same error for another write of a failed batch (`StoreError` is not `Clone`: an
/// error source becomes its message).
fn replicate(e: &StoreError) -> StoreError {
    match e {
        StoreError::NotFound { key } => StoreError::NotFound { key: key.clone() },
        StoreError::Conflict {
            key,
            expected_revision,
            actual_revision,
        } => StoreError::Conflict {
            key: key.clone(),
            expected_revision: *expected_revision,
            actual_revision: *actual_revision,
        },
        StoreError::AlreadyExists { key } => StoreError::AlreadyExists { key: key.clone() },
        StoreError::Compacted { compact_revision } => StoreError::Compacted {
            compact_revision: *compact_revision,
        },
        StoreError::FutureRevision { revision, current } => StoreError::FutureRevision {
            revision: *revision,
            current: *current,
        },
        StoreError::TooManyOps { ops, max } => StoreError::TooManyOps {
            ops: *ops,
            max: *max,
        },
        StoreError::LeaseNotFound { lease } => StoreError::LeaseNotFound { lease: *lease },
        StoreError::LeadershipLost { key } => StoreError::LeadershipLost { key: key.clone() },
        StoreError::InvalidArgument(m) => StoreError::InvalidArgument(m.clone()),
        StoreError::Unavailable(source) => StoreError::unavailable(source.to_string()),
        StoreError::PermissionDenied(m) => StoreError::PermissionDenied(m.clone()),
        StoreError::Codec(source) => StoreError::Codec(source.to_string().into()),
        StoreError::WatchClosed(m) => StoreError::WatchClosed(m.clone()),
        StoreError::Internal(m) => StoreError::Internal(m.clone()),
        other => StoreError::Internal(other.to_string()),
    }
}

#[cfg(test)]
mod tests;
