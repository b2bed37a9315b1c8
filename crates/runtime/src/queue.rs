//! A de-duplicating, delaying work queue with per-key back-off (client-go's `workqueue`
//! semantics, kube-runtime's scheduler shape).
//!
//! ```text
//!   add(k) ──────────────┐            ┌──────────── processing ────────────┐
//!   add_after(k, d) ─► timers ─due─►  ready (FIFO, a key at most once) ─next()─► worker
//!   (earliest wins)                   ▲                                     │ done(k)
//!                                     └── dirty: k was added while processing┘
//! ```
//!
//! Guarantees:
//! - a key is in `ready` at most once: adding it again while it waits is a no-op;
//! - a key is never handed to two workers at once: adding it while it is processed marks it
//!   dirty, and it is queued again when the worker calls [`WorkQueue::done`];
//! - `add_after` keeps the earliest deadline; an immediate `add` cancels a pending delay;
//! - [`WorkQueue::next_backoff`] doubles per consecutive failure of a key, up to the
//!   configured maximum, until [`WorkQueue::forget`] resets it on success.
//!
//! Time is tokio's, so tests drive it with `tokio::time::pause()`.

use std::borrow::Cow;
use std::collections::{BTreeMap, HashMap, HashSet, VecDeque};
use std::fmt;
use std::hash::Hash;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use futures::{Stream, StreamExt};
use tokio::sync::Notify;
use tokio::time::Instant;

use crate::backoff::{Backoff, KeyedBackoff};
use crate::watcher::Event;

/// Why a key was queued: the `reason` field of the reconcile span.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Reason {
    /// The object (or one it depends on) changed.
    Changed,
    /// The reconciler asked to run again after a delay ([`crate::Action::requeue`]).
    Requeue,
    /// The last reconcile failed and the error policy asked for a retry.
    Backoff,
    /// Anything else (a periodic resync, a gRPC request, ...).
    Custom(Cow<'static, str>),
}

impl fmt::Display for Reason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Changed => f.write_str("object changed"),
            Self::Requeue => f.write_str("requeue requested"),
            Self::Backoff => f.write_str("error back-off"),
            Self::Custom(s) => f.write_str(s),
        }
    }
}

/// A key handed to a worker by [`WorkQueue::next`], with why it was queued.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct QueueItem<T> {
    /// The key to reconcile.
    pub key: T,
    /// Why it was queued (the first reason since it was last handed out).
    pub reason: Reason,
}

/// How a [`WorkQueue`] is named and backs off.
#[derive(Clone, Debug)]
pub struct QueueConfig {
    /// The component name in the metric names: `flotilla_<name>_queue_depth`, ... Characters
    /// other than `[A-Za-z0-9_]` become `_`.
    pub name: String,
    /// Per-key back-off after failures. Default 5 ms doubling to 1000 s (client-go's
    /// `DefaultControllerRateLimiter`).
    pub backoff: Backoff,
}

impl QueueConfig {
    /// A queue named `name` with the default back-off.
    pub fn new(name: impl Into<String>) -> Self {
        Self {
            name: name.into(),
            backoff: Backoff::default(),
        }
    }

    /// Sets the back-off policy.
    pub fn backoff(mut self, backoff: Backoff) -> Self {
        self.backoff = backoff;
        self
    }
}

/// A metric-name-safe version of `name`.
pub(crate) fn metric_component(name: &str) -> String {
    name.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '_' {
                c
            } else {
                '_'
            }
        })
        .collect()
}

struct Metrics {
    depth: metrics::Gauge,
    waiting: metrics::Gauge,
    adds: metrics::Counter,
    retries: metrics::Counter,
    wait_seconds: metrics::Histogram,
    oldest_seconds: metrics::Gauge,
}

impl Metrics {
    fn new(name: &str) -> Self {
        let c = metric_component(name);
        Self {
            depth: metrics::gauge!(format!("flotilla_{c}_queue_depth")),
            waiting: metrics::gauge!(format!("flotilla_{c}_queue_delayed")),
            adds: metrics::counter!(format!("flotilla_{c}_queue_adds_total")),
            retries: metrics::counter!(format!("flotilla_{c}_queue_retries_total")),
            wait_seconds: metrics::histogram!(format!("flotilla_{c}_queue_wait_seconds")),
            oldest_seconds: metrics::gauge!(format!("flotilla_{c}_queue_oldest_seconds")),
        }
    }
}

struct Pending {
    reason: Reason,
    since: Instant,
}

struct Delayed {
    due: Instant,
    seq: u64,
    reason: Reason,
}

struct State<T> {
    ready: VecDeque<T>,
    /// The keys in `ready`, with why and since when.
    queued: HashMap<T, Pending>,
    /// Keys handed to a worker and not yet `done`.
    processing: HashSet<T>,
    /// Keys added while processing: queued again on `done`.
    dirty: HashMap<T, Pending>,
    /// Pending delays, one per key (the earliest).
    delayed: HashMap<T, Delayed>,
    timers: BTreeMap<(Instant, u64), T>,
    seq: u64,
    failures: KeyedBackoff<T>,
    shut_down: bool,
}

impl<T: Clone + Eq + Hash> State<T> {
    fn cancel_delay(&mut self, key: &T) {
        if let Some(d) = self.delayed.remove(key) {
            self.timers.remove(&(d.due, d.seq));
        }
    }

    /// Queues `key` now (or marks it dirty). Returns whether a worker should be woken.
    fn enqueue(&mut self, key: T, reason: Reason, now: Instant) -> bool {
        self.cancel_delay(&key);
        if self.processing.contains(&key) {
            self.dirty
                .entry(key)
                .or_insert(Pending { reason, since: now });
            false
        } else if self.queued.contains_key(&key) {
            false
        } else {
            self.ready.push_back(key.clone());
            self.queued.insert(key, Pending { reason, since: now });
            true
        }
    }

    /// Moves every due timer to `ready`. Returns how many.
    fn promote_due(&mut self, now: Instant) -> usize {
        let mut n = 0;
        while let Some(entry) = self.timers.first_entry() {
            if entry.key().0 > now {
                break;
            }
            let key = entry.remove();
            if let Some(d) = self.delayed.remove(&key) {
                self.enqueue(key, d.reason, now);
                n += 1;
            }
        }
        n
    }
}

struct Inner<T> {
    state: Mutex<State<T>>,
    wake: Notify,
    metrics: Metrics,
    name: String,
}

impl<T> Inner<T> {
    fn lock(&self) -> MutexGuard<'_, State<T>> {
        // Every critical section leaves the state consistent before anything can panic.
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn gauges(&self, state: &State<T>) {
        self.metrics.depth.set(state.ready.len() as f64);
        self.metrics.waiting.set(state.delayed.len() as f64);
    }
}

/// The de-duplicating work queue. Cheap to clone: clones share the queue.
pub struct WorkQueue<T> {
    inner: Arc<Inner<T>>,
}

clone_handle!(WorkQueue<T> { inner });

impl<T> fmt::Debug for WorkQueue<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let s = self.inner.lock();
        f.debug_struct("WorkQueue")
            .field("name", &self.inner.name)
            .field("ready", &s.ready.len())
            .field("processing", &s.processing.len())
            .field("delayed", &s.delayed.len())
            .finish()
    }
}

// === impl WorkQueue ===

impl<T> WorkQueue<T>
where
    T: Clone + Eq + Hash + Send + 'static,
{
    /// An empty queue. Its metric handles are taken from the metrics recorder installed at
    /// this point: install the recorder first ([`crate::telemetry::install_metrics`]).
    pub fn new(config: QueueConfig) -> Self {
        Self {
            inner: Arc::new(Inner {
                state: Mutex::new(State {
                    ready: VecDeque::new(),
                    queued: HashMap::new(),
                    processing: HashSet::new(),
                    dirty: HashMap::new(),
                    delayed: HashMap::new(),
                    timers: BTreeMap::new(),
                    seq: 0,
                    failures: KeyedBackoff::new(config.backoff),
                    shut_down: false,
                }),
                wake: Notify::new(),
                metrics: Metrics::new(&config.name),
                name: config.name,
            }),
        }
    }

    /// The queue's name.
    pub fn name(&self) -> &str {
        &self.inner.name
    }

    /// Queues `key` because it changed.
    pub fn add(&self, key: T) {
        self.add_with_reason(key, Reason::Changed);
    }

    /// Queues `key` now, with a reason. A no-op if it is already waiting; if a worker is
    /// processing it, it runs again once that worker is done. Cancels a pending delay.
    pub fn add_with_reason(&self, key: T, reason: Reason) {
        let now = Instant::now();
        let mut s = self.inner.lock();
        if s.shut_down {
            return;
        }
        self.inner.metrics.adds.increment(1);
        if reason == Reason::Backoff {
            self.inner.metrics.retries.increment(1);
        }
        let wake = s.enqueue(key, reason, now);
        self.inner.gauges(&s);
        drop(s);
        if wake {
            self.inner.wake.notify_one();
        }
    }

    /// Queues `key` after `delay` (a requeue). If the key already has an earlier (or
    /// immediate) turn, that one is kept; a later pending delay is replaced.
    pub fn add_after(&self, key: T, delay: Duration, reason: Reason) {
        if delay.is_zero() {
            return self.add_with_reason(key, reason);
        }
        let now = Instant::now();
        let due = now + delay;
        let mut s = self.inner.lock();
        if s.shut_down || s.queued.contains_key(&key) || s.dirty.contains_key(&key) {
            return;
        }
        if s.delayed.get(&key).is_some_and(|d| d.due <= due) {
            return;
        }
        self.inner.metrics.adds.increment(1);
        if reason == Reason::Backoff {
            self.inner.metrics.retries.increment(1);
        }
        s.cancel_delay(&key);
        s.seq += 1;
        let seq = s.seq;
        s.timers.insert((due, seq), key.clone());
        s.delayed.insert(key, Delayed { due, seq, reason });
        self.inner.gauges(&s);
        drop(s);
        // A sleeping worker may be waiting for a later deadline.
        self.inner.wake.notify_one();
    }

    /// The next back-off delay for `key`: `base · 2^failures` (capped), counting one more
    /// failure.
    pub fn next_backoff(&self, key: &T) -> Duration {
        self.inner.lock().failures.next_delay(key.clone())
    }

    /// Queues `key` after its next back-off delay.
    pub fn add_rate_limited(&self, key: T) {
        let d = self.next_backoff(&key);
        self.add_after(key, d, Reason::Backoff);
    }

    /// Forgets `key`'s failures (after a successful reconcile).
    pub fn forget(&self, key: &T) {
        self.inner.lock().failures.forget(key);
    }

    /// How many consecutive failures `key` has had.
    pub fn failures(&self, key: &T) -> u32 {
        self.inner.lock().failures.attempts(key)
    }

    /// Waits for the next ready key and marks it as processing; `None` once the queue is shut
    /// down. The caller must call [`WorkQueue::done`] with the key when finished. Cancel-safe:
    /// a key is only taken in the poll that returns it.
    pub async fn next(&self) -> Option<QueueItem<T>> {
        loop {
            let notified = self.inner.wake.notified();
            tokio::pin!(notified);
            // Register for wake-ups before looking, so that an add in between is not missed.
            notified.as_mut().enable();
            let deadline = {
                let now = Instant::now();
                let mut s = self.inner.lock();
                if s.shut_down {
                    return None;
                }
                s.promote_due(now);
                if let Some(key) = s.ready.pop_front() {
                    let pending = s.queued.remove(&key);
                    s.processing.insert(key.clone());
                    let reason = match pending {
                        Some(p) => {
                            self.inner
                                .metrics
                                .wait_seconds
                                .record(now.saturating_duration_since(p.since).as_secs_f64());
                            p.reason
                        }
                        None => Reason::Changed,
                    };
                    let oldest = s
                        .ready
                        .front()
                        .and_then(|k| s.queued.get(k))
                        .map_or(0.0, |p| {
                            now.saturating_duration_since(p.since).as_secs_f64()
                        });
                    self.inner.metrics.oldest_seconds.set(oldest);
                    self.inner.gauges(&s);
                    let more = !s.ready.is_empty();
                    drop(s);
                    if more {
                        // Hand the rest to another idle worker.
                        self.inner.wake.notify_one();
                    }
                    return Some(QueueItem { key, reason });
                }
                self.inner.gauges(&s);
                s.timers.first_key_value().map(|((due, _), _)| *due)
            };
            match deadline {
                Some(due) => {
                    tokio::select! {
                        () = &mut notified => {}
                        () = tokio::time::sleep_until(due) => {}
                    }
                }
                None => notified.await,
            }
        }
    }

    /// Marks `key` as no longer processing; if it was added meanwhile, it is queued again.
    pub fn done(&self, key: &T) {
        let now = Instant::now();
        let mut s = self.inner.lock();
        s.processing.remove(key);
        let wake = match s.dirty.remove(key) {
            Some(p) if !s.shut_down => s.enqueue(key.clone(), p.reason, now.min(p.since)),
            _ => false,
        };
        self.inner.gauges(&s);
        drop(s);
        if wake {
            self.inner.wake.notify_one();
        }
    }

    /// Keys ready to be handed out (the queue depth).
    pub fn len(&self) -> usize {
        self.inner.lock().ready.len()
    }

    /// Whether no key is ready.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Keys waiting for a delay to pass.
    pub fn delayed_len(&self) -> usize {
        self.inner.lock().delayed.len()
    }

    /// When `key`'s pending delay ends, if it has one.
    pub fn delayed_until(&self, key: &T) -> Option<Instant> {
        self.inner.lock().delayed.get(key).map(|d| d.due)
    }

    /// Whether a worker is processing `key` now.
    pub fn is_processing(&self, key: &T) -> bool {
        self.inner.lock().processing.contains(key)
    }

    /// Stops the queue: [`WorkQueue::next`] returns `None` from now on, and adds are ignored.
    pub fn shut_down(&self) {
        self.inner.lock().shut_down = true;
        self.inner.wake.notify_waiters();
    }

    /// Whether [`WorkQueue::shut_down`] was called.
    pub fn is_shut_down(&self) -> bool {
        self.inner.lock().shut_down
    }

    /// Feeds the queue from a stream of watcher events: every key `mapper` returns for an
    /// event is added. Ends when the stream does.
    pub async fn feed<K, S, F>(self, events: S, mapper: F)
    where
        S: Stream<Item = Event<K>>,
        F: Fn(&Event<K>) -> Vec<T>,
    {
        let mut events = std::pin::pin!(events);
        while let Some(ev) = events.next().await {
            for key in mapper(&ev) {
                self.add(key);
            }
        }
    }
}

/// The usual mapper: the key of the object the event is about (nothing for `Init` and
/// `InitDone`).
pub fn by_key<K, T: for<'a> From<&'a str>>(event: &Event<K>) -> Vec<T> {
    event.key().map(|k| vec![T::from(k)]).unwrap_or_default()
}

#[cfg(test)]
mod tests;
