//! The list+watch state machine: turns a key prefix of the [`Store`] into a stream of
//! kube-rs-style [`Event`]s that never goes back in revision.
//!
//! ```text
//!            ┌──────────── Compacted / list error (back-off) ───────────┐
//!            ▼                                                          │
//!   Relist ──range(prefix, limit)──► Init{rev} InitApply(obj)…  (pages pinned at rev)
//!            │                         InitDone{rev}                    │
//!            ▼                                                          │
//!   Watch{from = rev+1} ──watch(prefix, from)──► Watching ── Batch(r): r ≤ last seen? drop
//!            ▲                                      │         else Apply/Delete at r
//!            └── stream error/end (back-off) ───────┘  Progress(r): last seen = r
//! ```
//!
//! Every failure is retried forever with jittered exponential back-off: the stream itself
//! never ends and never yields an error (they are logged and counted). A watch that breaks is
//! resumed from `last seen + 1`; if that revision was compacted meanwhile the store says
//! [`StoreError::Compacted`] and the watcher re-lists, so that a reflector fed by it swaps in a
//! fresh snapshot in which deletions made during the gap are gone too (I7).

use std::collections::VecDeque;
use std::fmt::Display;
use std::sync::Arc;
use std::time::Duration;

use flotilla_store::{
    Event as StoreEvent, KeyValue, RangeRequest, Revision, Store, StoreError, WatchEvent,
    WatchStream,
};
use futures::Stream;

use crate::backoff::{Backoff, BackoffState};

mod hub;

pub use hub::{shared_watcher, shared_watches};

/// One object of a watched prefix: its key, the revision it was last modified at (its
/// `resource_version`) and its decoded value.
#[derive(Debug, PartialEq)]
pub struct Object<K> {
    /// The store key (relative to the store's namespace).
    pub key: String,
    /// The key's mod revision: compare it in the write that updates the object.
    pub revision: Revision,
    /// The decoded value, shared with every cache and queue that holds it.
    pub value: Arc<K>,
}

impl<K> Clone for Object<K> {
    fn clone(&self) -> Self {
        Self {
            key: self.key.clone(),
            revision: self.revision,
            value: self.value.clone(),
        }
    }
}

/// What a [`watcher`] stream yields: the kube-rs re-list protocol on store revisions.
///
/// A (re-)list is `Init`, then one `InitApply` per object, then `InitDone`; a consumer that
/// buffers between `Init` and `InitDone` and swaps on `InitDone` sees deletions made while it
/// was not watching. Afterwards `Apply`/`Delete` follow the watch, in revision order.
#[derive(Debug, PartialEq)]
pub enum Event<K> {
    /// A re-list is starting, read at `revision`.
    Init {
        /// The revision the whole list is read at.
        revision: Revision,
    },
    /// An object of the list in progress.
    InitApply(Object<K>),
    /// The list is complete: the objects since `Init` are the whole prefix at `revision`.
    InitDone {
        /// The revision of the snapshot.
        revision: Revision,
    },
    /// An object was created or updated (at `object.revision`).
    Apply(Object<K>),
    /// An object was deleted at `revision`.
    Delete {
        /// The deleted key.
        key: String,
        /// The revision of the delete.
        revision: Revision,
    },
    /// Every change of the prefix up to `revision` has been delivered (an etcd progress
    /// notification). A [`crate::reflect`]ed cache takes it as its revision and does not pass
    /// it on; a leader's cache barrier waits for it ([`crate::CacheBarrier`]).
    Progress {
        /// The revision everything up to which was delivered.
        revision: Revision,
    },
}

impl<K> Clone for Event<K> {
    fn clone(&self) -> Self {
        match self {
            Self::Init { revision } => Self::Init {
                revision: *revision,
            },
            Self::InitApply(o) => Self::InitApply(o.clone()),
            Self::InitDone { revision } => Self::InitDone {
                revision: *revision,
            },
            Self::Apply(o) => Self::Apply(o.clone()),
            Self::Delete { key, revision } => Self::Delete {
                key: key.clone(),
                revision: *revision,
            },
            Self::Progress { revision } => Self::Progress {
                revision: *revision,
            },
        }
    }
}

// === impl Event ===

impl<K> Event<K> {
    /// The revision the event carries: the list revision for `Init`/`InitDone`, the object's
    /// mod revision for `InitApply`/`Apply`, the delete's revision for `Delete`.
    pub fn revision(&self) -> Revision {
        match self {
            Self::Init { revision } | Self::InitDone { revision } | Self::Progress { revision } => {
                *revision
            }
            Self::InitApply(o) | Self::Apply(o) => o.revision,
            Self::Delete { revision, .. } => *revision,
        }
    }

    /// The key the event is about, if it is about one object.
    pub fn key(&self) -> Option<&str> {
        match self {
            Self::InitApply(o) | Self::Apply(o) => Some(&o.key),
            Self::Delete { key, .. } => Some(key),
            Self::Init { .. } | Self::InitDone { .. } | Self::Progress { .. } => None,
        }
    }

    /// The object, for `InitApply` and `Apply`.
    pub fn object(&self) -> Option<&Object<K>> {
        match self {
            Self::InitApply(o) | Self::Apply(o) => Some(o),
            _ => None,
        }
    }
}

/// How a [`watcher`] lists and retries.
#[derive(Clone, Debug)]
pub struct WatcherConfig {
    /// A name for logs and the `watch` label of the watcher metrics (e.g. `bindings`).
    /// Default: the prefix.
    pub name: Option<String>,
    /// Keys per list page. Default 500 (kube-rs and client-go's reflector page size).
    pub page_size: usize,
    /// Back-off between failed attempts. Default 100 ms doubling to 30 s, jittered (the
    /// order of kube-runtime's `DefaultBackoff`, 800 ms → 30 s, made faster at the start
    /// because etcd blips are short).
    pub backoff: Backoff,
    /// Re-list (instead of resuming the watch from the last seen revision + 1) when a watch
    /// stream breaks for a reason other than compaction. Default false: resuming is what
    /// etcd's own clients do and costs no list; a compacted resume re-lists anyway.
    pub relist_on_break: bool,
    /// How long a watch may stay quiet before the watcher asks the store for a progress
    /// notification, so that the cache's revision follows the store's even on a prefix that
    /// does not change (a new leader waits for its caches to reach the revision it won at).
    /// Default 1 s.
    pub progress_interval: Duration,
}

impl Default for WatcherConfig {
    fn default() -> Self {
        Self {
            name: None,
            page_size: 500,
            backoff: Backoff::new(Duration::from_millis(100), Duration::from_secs(30))
                .with_jitter(true),
            relist_on_break: false,
            progress_interval: Duration::from_secs(1),
        }
    }
}

impl WatcherConfig {
    /// The default config for a watch of `prefix`: the bindings re-list after a broken stream
    /// rather than resume, because a failover's backlog of binding writes can exceed what one
    /// etcd watch response may carry to a client, which would fail every resume again; a
    /// re-list reads pages and cannot get stuck. Every watch of a prefix takes the same
    /// config, so that the process shares one watch of it ([`shared_watcher`]).
    pub fn for_prefix(prefix: &str) -> Self {
        Self::default().relist_on_break(prefix == "bindings/")
    }

    /// Names the watcher (logs and metric labels).
    pub fn named(mut self, name: impl Into<String>) -> Self {
        self.name = Some(name.into());
        self
    }

    setters! {
        /// Sets the list page size.
        page_size(page_size: usize);
        /// Sets the back-off policy.
        backoff(backoff: Backoff);
        /// Re-list after every broken stream, not only after compaction.
        relist_on_break(relist: bool);
        /// Sets how long a quiet watch waits before asking for a progress notification.
        progress_interval(interval: Duration);
    }
}

/// The identity decoder: the raw [`KeyValue`] as the object.
pub fn raw(kv: &KeyValue) -> Result<KeyValue, std::convert::Infallible> {
    Ok(kv.clone())
}

/// Lists and watches every key under `prefix`, decoding values with `decode`.
///
/// The stream never ends and never yields errors: store errors are retried with
/// `config.backoff`, and values that fail to decode are logged, counted
/// (`flotilla_watcher_decode_errors_total`) and skipped. Drop the stream to stop watching.
pub fn watcher<K, E, D>(
    store: Arc<dyn Store>,
    prefix: impl Into<String>,
    config: WatcherConfig,
    decode: D,
) -> impl Stream<Item = Event<K>> + Send + 'static
where
    K: Send + Sync + 'static,
    E: Display + 'static,
    D: Fn(&KeyValue) -> Result<K, E> + Send + Sync + 'static,
{
    let prefix = prefix.into();
    let name = config.name.clone().unwrap_or_else(|| prefix.clone());
    let state = State {
        store,
        metrics: Metrics::new(&name),
        name,
        prefix,
        backoff: BackoffState::new(config.backoff),
        config,
        decode,
        phase: Phase::Relist,
        pending: VecDeque::new(),
        last_seen: 0,
    };
    futures::stream::unfold(state, |mut state| async move {
        let event = state.step().await;
        Some((event, state))
    })
}

enum Phase {
    /// Start a list from scratch.
    Relist,
    /// A list is in progress at `revision`; `next` is the next page.
    Listing {
        next: RangeRequest,
        revision: Revision,
    },
    /// Open a watch from `from`.
    Watch { from: Revision },
    /// Follow an open watch.
    Watching(WatchStream),
}

struct State<D> {
    store: Arc<dyn Store>,
    prefix: String,
    name: String,
    config: WatcherConfig,
    decode: D,
    phase: Phase,
    pending: VecDeque<PendingEvent>,
    /// The highest revision delivered (a list's revision, a batch's, or a progress mark).
    last_seen: Revision,
    backoff: BackoffState,
    metrics: Metrics,
}

/// Events are produced a page or a batch at a time and handed out one by one; they are kept
/// raw so that decoding happens as they are handed out.
enum PendingEvent {
    Init(Revision),
    InitApply(KeyValue),
    InitDone(Revision),
    Apply(KeyValue),
    Delete(String, Revision),
    Progress(Revision),
}

struct Metrics {
    relists: metrics::Counter,
    errors: metrics::Counter,
    decode_errors: metrics::Counter,
    events: metrics::Counter,
    revision: metrics::Gauge,
}

impl Metrics {
    fn new(name: &str) -> Self {
        let label = [("watch", name.to_owned())];
        Self {
            relists: metrics::counter!("flotilla_watcher_relists_total", &label),
            errors: metrics::counter!("flotilla_watcher_errors_total", &label),
            decode_errors: metrics::counter!("flotilla_watcher_decode_errors_total", &label),
            events: metrics::counter!("flotilla_watcher_events_total", &label),
            revision: metrics::gauge!("flotilla_watcher_revision", &label),
        }
    }
}

// === impl State ===

impl<K, E, D> State<D>
where
    K: Send + Sync + 'static,
    E: Display,
    D: Fn(&KeyValue) -> Result<K, E> + 'static,
{
    /// Produces the next event, doing as much I/O (and back-off) as it takes.
    async fn step(&mut self) -> Event<K> {
        loop {
            while let Some(p) = self.pending.pop_front() {
                if let Some(ev) = self.decode_pending(p) {
                    self.metrics.events.increment(1);
                    return ev;
                }
            }
            let phase = std::mem::replace(&mut self.phase, Phase::Relist);
            self.phase = match phase {
                Phase::Relist => self.start_list().await,
                Phase::Listing { next, revision } => self.next_page(next, revision).await,
                Phase::Watch { from } => self.open_watch(from).await,
                Phase::Watching(stream) => self.follow(stream).await,
            };
        }
    }

    fn decode_pending(&self, p: PendingEvent) -> Option<Event<K>> {
        Some(match p {
            PendingEvent::Init(revision) => Event::Init { revision },
            PendingEvent::InitDone(revision) => Event::InitDone { revision },
            PendingEvent::Delete(key, revision) => Event::Delete { key, revision },
            PendingEvent::Progress(revision) => Event::Progress { revision },
            PendingEvent::InitApply(kv) => Event::InitApply(self.decode_kv(kv)?),
            PendingEvent::Apply(kv) => Event::Apply(self.decode_kv(kv)?),
        })
    }

    fn decode_kv(&self, kv: KeyValue) -> Option<Object<K>> {
        match (self.decode)(&kv) {
            Ok(value) => Some(Object {
                key: kv.key,
                revision: kv.mod_revision,
                value: Arc::new(value),
            }),
            Err(error) => {
                self.metrics.decode_errors.increment(1);
                tracing::warn!(
                    watch = %self.name,
                    key = %kv.key,
                    revision = kv.mod_revision,
                    %error,
                    "skipping a value that does not decode"
                );
                None
            }
        }
    }

    /// Logs and counts a failure; returns how long to back off.
    fn failed(&mut self, what: &str, error: &dyn Display) -> Duration {
        self.metrics.errors.increment(1);
        let delay = self.backoff.next_delay();
        tracing::warn!(
            watch = %self.name,
            prefix = %self.prefix,
            %error,
            retry_in = ?delay,
            "{what} failed; retrying"
        );
        delay
    }

    async fn fail(&mut self, what: &str, error: &(dyn Display + Sync)) {
        let delay = self.failed(what, error);
        tokio::time::sleep(delay).await;
    }

    async fn start_list(&mut self) -> Phase {
        self.metrics.relists.increment(1);
        let req = RangeRequest::prefix(self.prefix.clone()).with_limit(self.config.page_size);
        match self.store.range(req.clone()).await {
            Ok(resp) if resp.revision < self.last_seen => {
                // A lagging member answered: taking its snapshot would go back in time.
                let error = format!(
                    "snapshot at revision {} is older than the last seen revision {}",
                    resp.revision, self.last_seen
                );
                self.fail("list", &error).await;
                Phase::Relist
            }
            Ok(resp) => {
                tracing::debug!(watch = %self.name, revision = resp.revision, "listing");
                self.pending.push_back(PendingEvent::Init(resp.revision));
                self.accept_page(&req, resp)
            }
            Err(e) => {
                self.fail("list", &e).await;
                Phase::Relist
            }
        }
    }

    async fn next_page(&mut self, req: RangeRequest, revision: Revision) -> Phase {
        match self.store.range(req.clone()).await {
            Ok(resp) => self.accept_page(&req, resp),
            Err(e @ StoreError::Compacted { .. }) => {
                // The snapshot we were paging through is gone: start over at a newer one.
                tracing::info!(watch = %self.name, revision, error = %e, "list snapshot compacted; re-listing");
                Phase::Relist
            }
            Err(e) => {
                self.fail("list page", &e).await;
                Phase::Listing {
                    next: req,
                    revision,
                }
            }
        }
    }

    fn accept_page(&mut self, req: &RangeRequest, resp: flotilla_store::RangeResponse) -> Phase {
        let next = req.next_page(&resp);
        let revision = resp.revision;
        self.pending
            .extend(resp.kvs.into_iter().map(PendingEvent::InitApply));
        match next {
            Some(next) => Phase::Listing { next, revision },
            None => {
                self.pending.push_back(PendingEvent::InitDone(revision));
                self.advance(revision);
                self.backoff.reset();
                Phase::Watch { from: revision + 1 }
            }
        }
    }

    fn advance(&mut self, revision: Revision) {
        if revision > self.last_seen {
            self.last_seen = revision;
            self.metrics.revision.set(revision as f64);
        }
    }

    async fn open_watch(&mut self, from: Revision) -> Phase {
        match self.store.watch(&self.prefix, Some(from)).await {
            Ok(stream) => {
                // The store answered: a later break starts backing off from the base again
                // (a quiet prefix delivers no batch that would reset it).
                self.backoff.reset();
                Phase::Watching(stream)
            }
            Err(e @ StoreError::Compacted { .. }) => {
                tracing::info!(watch = %self.name, from, error = %e, "watch start compacted; re-listing");
                Phase::Relist
            }
            Err(e) => {
                self.fail("watch", &e).await;
                Phase::Watch { from }
            }
        }
    }

    async fn follow(&mut self, mut stream: WatchStream) -> Phase {
        let next = tokio::time::timeout(self.config.progress_interval, stream.next()).await;
        let Ok(next) = next else {
            // Quiet: ask where the store is. A failed request is harmless (the stream's own
            // error, if any, arrives on the next read).
            let _ = stream.request_progress();
            return Phase::Watching(stream);
        };
        match next {
            Some(Ok(WatchEvent::Batch(batch))) => {
                if batch.revision <= self.last_seen {
                    tracing::debug!(
                        watch = %self.name,
                        revision = batch.revision,
                        last_seen = self.last_seen,
                        "dropping a batch at or below the last seen revision"
                    );
                    return Phase::Watching(stream);
                }
                let revision = batch.revision;
                self.pending
                    .extend(batch.events.into_iter().map(|ev| match ev {
                        StoreEvent::Put(kv) => PendingEvent::Apply(kv),
                        StoreEvent::Delete { key, .. } => PendingEvent::Delete(key, revision),
                    }));
                self.advance(revision);
                self.backoff.reset();
                Phase::Watching(stream)
            }
            Some(Ok(WatchEvent::Progress { revision })) => {
                if revision > self.last_seen {
                    self.advance(revision);
                    self.pending.push_back(PendingEvent::Progress(revision));
                }
                Phase::Watching(stream)
            }
            Some(Err(e @ StoreError::Compacted { .. })) => {
                tracing::info!(
                    watch = %self.name,
                    last_seen = self.last_seen,
                    error = %e,
                    "watch compacted; re-listing"
                );
                Phase::Relist
            }
            Some(Err(e)) => {
                drop(stream);
                self.fail("watch stream", &e).await;
                self.after_break()
            }
            None => {
                drop(stream);
                let e = StoreError::WatchClosed("the watch stream ended".into());
                self.fail("watch stream", &e).await;
                self.after_break()
            }
        }
    }

    fn after_break(&self) -> Phase {
        if self.config.relist_on_break {
            Phase::Relist
        } else {
            Phase::Watch {
                from: self.last_seen + 1,
            }
        }
    }
}
