//! Server-streaming Watch over a key prefix of the store.
//!
//! ```text
//!   resourceVersion 0:  list(prefix) at rev R ─► ADDED × n ─► BOOKMARK(R) ─► watch(R+1)
//!   resourceVersion N:  [filtered: list at N to learn which objects the client has]
//!                       ─► watch(N+1)   (compacted ─► OUT_OF_RANGE, the client re-lists)
//!   watch batches ─► ADDED / MODIFIED / DELETED, in revision order; an object that stops
//!   (starts) matching a value filter leaves (enters) the view as DELETED (ADDED), as the
//!   Kubernetes watch cache does. Progress ─► BOOKMARK when bookmarks are allowed.
//!   The stream ends when the client goes away (it is dropped, and the store watch with it)
//!   or the server shuts down (UNAVAILABLE: resume from the last resourceVersion elsewhere).
//!   A store watch that breaks (its etcd member lost, say) is opened again from the
//!   revision after the last one sent, so the client sees no gap and no error; only if it
//!   cannot be opened again for RESUME_WINDOW does the stream end with UNAVAILABLE.
//! ```

use std::collections::{HashSet, VecDeque};
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use flotilla_proto::v1::WatchEventType;
use flotilla_runtime::Shutdown;
use flotilla_store::typed::decode;
use flotilla_store::{
    Event as StoreEvent, KeyValue, RangeRequest, Revision, StoreRef, WatchEvent, WatchStream,
};
use futures::{Stream, StreamExt};
use tonic::Status;

use crate::error::Error;
use crate::kinds::ApiKind;

/// A boxed stream of watch messages, as the generated server wants it.
pub type WatchResponseStream<M> = Pin<Box<dyn Stream<Item = Result<M, Status>> + Send>>;

/// A filter on object values (labels, the clusters a binding targets, ...).
pub type ValueFilter<R> = Arc<dyn Fn(&R) -> bool + Send + Sync>;

/// What to watch and how.
pub struct WatchSpec<R> {
    /// The key prefix.
    pub prefix: String,
    /// Send the changes after this revision (0 = the current state first).
    pub resource_version: i64,
    /// Only objects passing this filter; `None` = everything under the prefix.
    pub filter: Option<ValueFilter<R>>,
    /// Send periodic BOOKMARKs every this often (`None` = only the initial one).
    pub bookmarks: Option<Duration>,
}

enum Step {
    Shutdown,
    Item(Option<flotilla_store::Result<WatchEvent>>),
    Tick,
}

async fn tick(bookmarks: &mut Option<tokio::time::Interval>) {
    match bookmarks.as_mut() {
        Some(interval) => {
            interval.tick().await;
        }
        None => std::future::pending::<()>().await,
    }
}

/// How long a broken store watch is tried again before the client's stream ends.
const RESUME_WINDOW: Duration = Duration::from_secs(30);

struct State<R: ApiKind> {
    watch: WatchStream,
    store: StoreRef,
    prefix: String,
    /// The newest revision the client has everything up to (sent, or skipped by a filter).
    last: Revision,
    pending: VecDeque<R::WatchResponse>,
    /// Keys of the objects in the client's view; only kept with a value filter.
    members: Option<HashSet<String>>,
    filter: Option<ValueFilter<R>>,
    shutdown: Shutdown,
    bookmarks: Option<tokio::time::Interval>,
    done: bool,
}

/// Starts a watch. Errors before the first message (a bad revision, a compacted one when
/// a filtered watch needs the state at it) are returned; later ones end the stream.
pub async fn watch<R: ApiKind>(
    store: StoreRef,
    spec: WatchSpec<R>,
    shutdown: Shutdown,
) -> Result<WatchResponseStream<R::WatchResponse>, Error> {
    let WatchSpec {
        prefix,
        resource_version,
        filter,
        bookmarks,
    } = spec;
    if resource_version < 0 {
        return Err(Error::field(
            "resourceVersion",
            flotilla_core::validation::FieldErrorKind::OutOfRange,
            "must not be negative",
        ));
    }
    let passes = |obj: &R| filter.as_ref().is_none_or(|f| f(obj));
    let mut pending = VecDeque::new();
    let mut members = filter.as_ref().map(|_| HashSet::new());
    let from = if resource_version == 0 {
        let (kvs, revision) = store.list(&prefix, 500).await?;
        for kv in &kvs {
            if let Some(obj) = decode_or_skip::<R>(kv)
                && passes(&obj)
            {
                if let Some(m) = members.as_mut() {
                    m.insert(kv.key.clone());
                }
                pending.push_back(R::watch_response(
                    WatchEventType::Added,
                    Some(obj),
                    kv.mod_revision,
                ));
            }
        }
        pending.push_back(R::watch_response(WatchEventType::Bookmark, None, revision));
        revision + 1
    } else {
        if let Some(m) = members.as_mut() {
            // Which objects the client saw at its revision: the view starts from there.
            let mut req = RangeRequest::prefix(prefix.clone())
                .with_limit(500)
                .at_revision(resource_version);
            loop {
                let resp = store.range(req.clone()).await?;
                for kv in &resp.kvs {
                    if let Some(obj) = decode_or_skip::<R>(kv)
                        && passes(&obj)
                    {
                        m.insert(kv.key.clone());
                    }
                }
                match req.next_page(&resp) {
                    Some(next) => req = next,
                    None => break,
                }
            }
        }
        // i64::MAX has no next revision (found by the every-RPC test: it overflowed)
        resource_version.checked_add(1).ok_or_else(|| {
            Error::field(
                "resourceVersion",
                flotilla_core::validation::FieldErrorKind::OutOfRange,
                "is past any revision the store can reach",
            )
        })?
    };
    let watch = store.watch(&prefix, Some(from)).await?;
    let last = from - 1;
    let bookmarks = bookmarks.map(|period| {
        let mut interval = tokio::time::interval_at(tokio::time::Instant::now() + period, period);
        interval.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        interval
    });
    let state = State::<R> {
        watch,
        store,
        prefix,
        last,
        pending,
        members,
        filter,
        shutdown,
        bookmarks,
        done: false,
    };
    Ok(futures::stream::unfold(state, |mut state| async move {
        let item = state.next().await?;
        Some((item, state))
    })
    .boxed())
}

fn decode_or_skip<R: ApiKind>(kv: &KeyValue) -> Option<R> {
    match decode::<R>(kv) {
        Ok(obj) => Some(obj),
        Err(error) => {
            tracing::warn!(key = %kv.key, %error, "skipping an undecodable object in a watch");
            None
        }
    }
}

// === impl State ===

impl<R: ApiKind> State<R> {
    async fn next(&mut self) -> Option<Result<R::WatchResponse, Status>> {
        loop {
            if let Some(msg) = self.pending.pop_front() {
                return Some(Ok(msg));
            }
            if self.done {
                return None;
            }
            let step = {
                let shutdown = &self.shutdown;
                let watch = &mut self.watch;
                let bookmarks = &mut self.bookmarks;
                tokio::select! {
                    biased;
                    () = shutdown.triggered() => Step::Shutdown,
                    item = watch.next() => Step::Item(item),
                    () = tick(bookmarks) => Step::Tick,
                }
            };
            match step {
                Step::Shutdown => {
                    self.done = true;
                    return Some(Err(Status::unavailable(
                        "the server is shutting down; watch again from the last resourceVersion",
                    )));
                }
                Step::Item(Some(Ok(WatchEvent::Batch(batch)))) => {
                    self.last = self.last.max(batch.revision);
                    for event in batch.events {
                        self.apply(event, batch.revision);
                    }
                }
                Step::Item(Some(Ok(WatchEvent::Progress { revision }))) => {
                    self.last = self.last.max(revision);
                    if self.bookmarks.is_some() {
                        self.pending.push_back(R::watch_response(
                            WatchEventType::Bookmark,
                            None,
                            revision,
                        ));
                    }
                }
                Step::Item(Some(Err(e))) if e.is_retryable() => {
                    if let Err(e) = self.resume(&e.to_string()).await {
                        self.done = true;
                        return Some(Err(e));
                    }
                }
                Step::Item(Some(Err(e))) => {
                    self.done = true;
                    return Some(Err(Error::from(e).into()));
                }
                Step::Item(None) => {
                    if let Err(e) = self.resume("the store watch ended").await {
                        self.done = true;
                        return Some(Err(e));
                    }
                }
                Step::Tick => {
                    // The bookmark follows as a Progress, after every change up to it.
                    let _ = self.watch.request_progress();
                }
            }
        }
    }

    /// Opens the store watch again after the last revision the client has, retrying for
    /// [`RESUME_WINDOW`]; the status to end the client's stream with when it cannot.
    async fn resume(&mut self, why: &str) -> Result<(), Status> {
        tracing::debug!(prefix = %self.prefix, from = self.last + 1, why, "store watch broke; opening it again");
        let started = tokio::time::Instant::now();
        let mut backoff = Duration::from_millis(50);
        loop {
            match self.store.watch(&self.prefix, Some(self.last + 1)).await {
                Ok(watch) => {
                    self.watch = watch;
                    return Ok(());
                }
                Err(e) if e.is_retryable() && started.elapsed() < RESUME_WINDOW => {
                    tokio::select! {
                        () = self.shutdown.triggered() => {
                            return Err(Status::unavailable(
                                "the server is shutting down; watch again from the last \
                                 resourceVersion",
                            ));
                        }
                        () = tokio::time::sleep(backoff) => {}
                    }
                    backoff = (backoff * 2).min(Duration::from_secs(1));
                }
                Err(e) => return Err(Error::from(e).into()),
            }
        }
    }

    fn apply(&mut self, event: StoreEvent, revision: Revision) {
        match event {
            StoreEvent::Put(kv) => {
                let Some(obj) = decode_or_skip::<R>(&kv) else {
                    return;
                };
                let type_ = match (&self.filter, self.members.as_mut()) {
                    (Some(filter), Some(members)) => {
                        if filter(&obj) {
                            if members.insert(kv.key.clone()) {
                                WatchEventType::Added
                            } else {
                                WatchEventType::Modified
                            }
                        } else if members.remove(&kv.key) {
                            WatchEventType::Deleted
                        } else {
                            return;
                        }
                    }
                    _ if kv.create_revision == kv.mod_revision => WatchEventType::Added,
                    _ => WatchEventType::Modified,
                };
                self.pending
                    .push_back(R::watch_response(type_, Some(obj), revision));
            }
            StoreEvent::Delete { key, prev, .. } => {
                if let Some(members) = self.members.as_mut()
                    && !members.remove(&key)
                {
                    return;
                }
                let mut obj = prev
                    .as_ref()
                    .and_then(decode_or_skip::<R>)
                    .unwrap_or_else(|| R::tombstone(&key));
                obj.meta_mut().resource_version = revision;
                self.pending.push_back(R::watch_response(
                    WatchEventType::Deleted,
                    Some(obj),
                    revision,
                ));
            }
        }
    }
}
