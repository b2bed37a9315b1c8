//! The reflector: an in-memory cache of a watched prefix, written by exactly one [`Writer`]
//! and read through any number of cloneable [`Cache`] handles.
//!
//! ```text
//!   watcher ──Event──► Writer::apply_watcher_event ──► Snapshot { objects, indexes, revision }
//!                        │ Init: new buffer                  ▲ RwLock, short critical sections
//!                        │ InitApply: into the buffer        │
//!                        │ InitDone: swap the buffer in ─────┤  (deletions during a gap vanish)
//!                        │ Apply / Delete: in place ─────────┘
//!                        └─► ready = true (tokio watch) on the first InitDone
//!
//!   Cache::{get, list, by_index(name, value), revision, wait_until_ready}
//! ```
//!
//! Secondary indexes are functions `&K -> Vec<String>` registered on the writer (e.g.
//! bindings by target cluster). They are recomputed once per applied object and kept in the
//! snapshot, so a lookup is one map access.

use std::collections::{BTreeMap, BTreeSet, HashMap, VecDeque};
use std::sync::{Arc, PoisonError, RwLock, RwLockReadGuard, RwLockWriteGuard};

use flotilla_store::{KeyValue, Revision, StoreRef};
use futures::{Stream, StreamExt};
use tokio::sync::watch;

use crate::watcher::{Event, Object, WatcherConfig, shared_watcher};

/// A secondary index: the index values an object is filed under (e.g. the clusters a
/// binding targets). An object may be filed under none, one or several values.
pub type IndexFn<K> = Arc<dyn Fn(&K) -> Vec<String> + Send + Sync>;

struct Entry<K> {
    value: Arc<K>,
    revision: Revision,
    /// The values this object is filed under, one list per index (in registration order).
    filed_under: Vec<Vec<String>>,
}

struct Snapshot<K> {
    objects: BTreeMap<String, Entry<K>>,
    /// index name → index value → keys.
    indexes: HashMap<String, HashMap<String, BTreeSet<String>>>,
    /// The revision the snapshot reflects (the last list's or event's).
    revision: Revision,
}

impl<K> Snapshot<K> {
    fn new<'a>(index_names: impl Iterator<Item = &'a str>) -> Self {
        Self {
            objects: BTreeMap::new(),
            indexes: index_names
                .map(|n| (n.to_owned(), HashMap::new()))
                .collect(),
            revision: 0,
        }
    }

    /// Files `entry` under `key`; returns the entry it replaced in place, if any, for the
    /// caller to drop once it has released the lock.
    #[must_use]
    fn insert(&mut self, names: &[&str], key: &str, entry: Entry<K>) -> Option<Entry<K>> {
        // The common update files the object under the same index values as before (a
        // binding's status changed, not its clusters): replace the entry in place and leave
        // the indexes alone, which spares the key and index-value allocations of a re-file.
        if let Some(existing) = self.objects.get_mut(key)
            && existing.filed_under == entry.filed_under
        {
            return Some(std::mem::replace(existing, entry));
        }
        self.remove(names, key);
        for (name, values) in names.iter().zip(&entry.filed_under) {
            let index = self.indexes.entry((*name).to_owned()).or_default();
            for v in values {
                index.entry(v.clone()).or_default().insert(key.to_owned());
            }
        }
        self.objects.insert(key.to_owned(), entry);
        None
    }

    fn remove(&mut self, names: &[&str], key: &str) -> bool {
        let Some(old) = self.objects.remove(key) else {
            return false;
        };
        for (name, values) in names.iter().zip(&old.filed_under) {
            if let Some(index) = self.indexes.get_mut(*name) {
                for v in values {
                    if let Some(keys) = index.get_mut(v) {
                        keys.remove(key);
                        if keys.is_empty() {
                            index.remove(v);
                        }
                    }
                }
            }
        }
        true
    }
}

struct Shared<K> {
    snapshot: RwLock<Snapshot<K>>,
    ready: watch::Sender<bool>,
}

impl<K> Shared<K> {
    fn read(&self) -> RwLockReadGuard<'_, Snapshot<K>> {
        // A panic while holding the lock cannot leave a snapshot half-updated in a way that
        // breaks readers (every mutation is a map insert/remove), so poisoning is ignored.
        self.snapshot.read().unwrap_or_else(PoisonError::into_inner)
    }

    fn write(&self) -> RwLockWriteGuard<'_, Snapshot<K>> {
        self.snapshot
            .write()
            .unwrap_or_else(PoisonError::into_inner)
    }
}

/// The exclusive writing half of a reflector: applies [`Event`]s to the cache its [`Cache`]
/// handles read.
pub struct Writer<K> {
    shared: Arc<Shared<K>>,
    indexers: Vec<(String, IndexFn<K>)>,
    /// The snapshot being built between `Init` and `InitDone`.
    buffer: Option<Snapshot<K>>,
}

impl<K> std::fmt::Debug for Writer<K> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Writer")
            .field(
                "indexes",
                &self.indexers.iter().map(|(n, _)| n).collect::<Vec<_>>(),
            )
            .field("listing", &self.buffer.is_some())
            .finish_non_exhaustive()
    }
}

impl<K> Default for Writer<K> {
    fn default() -> Self {
        Self::new()
    }
}

// === impl Writer ===

impl<K> Writer<K> {
    /// An empty, not yet ready cache without indexes.
    pub fn new() -> Self {
        let (ready, _) = watch::channel(false);
        Self {
            shared: Arc::new(Shared {
                snapshot: RwLock::new(Snapshot::new(std::iter::empty())),
                ready,
            }),
            indexers: Vec::new(),
            buffer: None,
        }
    }

    /// Registers a secondary index `name` computed by `index` (replacing one of the same
    /// name). Objects already cached are filed at once.
    pub fn with_index<F>(mut self, name: impl Into<String>, index: F) -> Self
    where
        F: Fn(&K) -> Vec<String> + Send + Sync + 'static,
    {
        let name = name.into();
        let index: IndexFn<K> = Arc::new(index);
        let pos = match self.indexers.iter().position(|(n, _)| *n == name) {
            Some(pos) => {
                self.indexers[pos].1 = index.clone();
                pos
            }
            None => {
                self.indexers.push((name.clone(), index.clone()));
                self.indexers.len() - 1
            }
        };
        let rebuild = |snap: &mut Snapshot<K>| {
            let mut map: HashMap<String, BTreeSet<String>> = HashMap::new();
            for (key, entry) in &mut snap.objects {
                let values = index(&entry.value);
                for v in &values {
                    map.entry(v.clone()).or_default().insert(key.clone());
                }
                if entry.filed_under.len() <= pos {
                    entry.filed_under.resize(pos + 1, Vec::new());
                }
                entry.filed_under[pos] = values;
            }
            snap.indexes.insert(name.clone(), map);
        };
        rebuild(&mut self.shared.write());
        if let Some(buffer) = self.buffer.as_mut() {
            rebuild(buffer);
        }
        self
    }

    /// A reader of this cache. Readers are cheap to clone and see every applied event.
    pub fn cache(&self) -> Cache<K> {
        Cache {
            shared: self.shared.clone(),
        }
    }

    fn entry(&self, object: &Object<K>) -> Entry<K> {
        Entry {
            value: object.value.clone(),
            revision: object.revision,
            filed_under: self
                .indexers
                .iter()
                .map(|(_, f)| f(&object.value))
                .collect(),
        }
    }

    /// Applies one watcher event. Returns the keys that vanished when an `InitDone` swapped in
    /// a snapshot without them (objects deleted while the watch was down), so that a
    /// controller can reconcile their deletion; empty for every other event.
    pub fn apply_watcher_event(&mut self, event: &Event<K>) -> Vec<String> {
        let names: Vec<&str> = self.indexers.iter().map(|(n, _)| n.as_str()).collect();
        match event {
            Event::Init { .. } => {
                self.buffer = Some(Snapshot::new(names.iter().copied()));
                Vec::new()
            }
            Event::InitApply(object) => {
                let entry = self.entry(object);
                let replaced = self
                    .buffer
                    .get_or_insert_with(|| Snapshot::new(names.iter().copied()))
                    .insert(&names, &object.key, entry);
                drop(replaced);
                Vec::new()
            }
            Event::InitDone { revision } => {
                let mut fresh = self
                    .buffer
                    .take()
                    .unwrap_or_else(|| Snapshot::new(names.iter().copied()));
                fresh.revision = *revision;
                let old = std::mem::replace(&mut *self.shared.write(), fresh);
                let vanished = {
                    let now = self.shared.read();
                    old.objects
                        .into_keys()
                        .filter(|k| !now.objects.contains_key(k))
                        .collect()
                };
                self.shared.ready.send_replace(true);
                vanished
            }
            Event::Apply(object) => {
                let entry = self.entry(object);
                let mut snap = self.shared.write();
                let newer = snap
                    .objects
                    .get(&object.key)
                    .is_none_or(|e| e.revision <= object.revision);
                let replaced = if newer {
                    snap.insert(&names, &object.key, entry)
                } else {
                    None
                };
                snap.revision = snap.revision.max(object.revision);
                drop(snap);
                // the replaced object is freed outside the write lock
                drop(replaced);
                Vec::new()
            }
            Event::Progress { revision } => {
                let mut snap = self.shared.write();
                snap.revision = snap.revision.max(*revision);
                Vec::new()
            }
            Event::Delete { key, revision } => {
                let mut snap = self.shared.write();
                let newer = snap
                    .objects
                    .get(key)
                    .is_none_or(|e| e.revision <= *revision);
                if newer {
                    snap.remove(&names, key);
                }
                snap.revision = snap.revision.max(*revision);
                Vec::new()
            }
        }
    }
}

/// A cloneable, read-only handle on a reflector's cache.
pub struct Cache<K> {
    shared: Arc<Shared<K>>,
}

clone_handle!(Cache<K> { shared });

impl<K> std::fmt::Debug for Cache<K> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let snap = self.shared.read();
        f.debug_struct("Cache")
            .field("objects", &snap.objects.len())
            .field("revision", &snap.revision)
            .field("ready", &*self.shared.ready.borrow())
            .finish()
    }
}

// === impl Cache ===

impl<K> Cache<K> {
    /// The cached object under `key`.
    pub fn get(&self, key: &str) -> Option<Arc<K>> {
        self.shared.read().objects.get(key).map(|e| e.value.clone())
    }

    /// The cached object under `key` with its key and mod revision (for a CAS write).
    pub fn get_object(&self, key: &str) -> Option<Object<K>> {
        self.shared.read().objects.get(key).map(|e| Object {
            key: key.to_owned(),
            revision: e.revision,
            value: e.value.clone(),
        })
    }

    /// Every cached object, in key order.
    pub fn list(&self) -> Vec<Arc<K>> {
        self.shared
            .read()
            .objects
            .values()
            .map(|e| e.value.clone())
            .collect()
    }

    /// The cached objects `keep` accepts, with their keys and revisions, in key order. `keep`
    /// runs under the cache's read lock, so it must be cheap; only what it keeps is cloned (a
    /// scan for the few objects in some state copies no key of the others).
    pub fn objects_where(&self, keep: impl Fn(&K) -> bool) -> Vec<Object<K>> {
        self.shared
            .read()
            .objects
            .iter()
            .filter(|(_, e)| keep(&e.value))
            .map(|(key, e)| Object {
                key: key.clone(),
                revision: e.revision,
                value: e.value.clone(),
            })
            .collect()
    }

    /// Every cached object with its key and revision, in key order.
    pub fn objects(&self) -> Vec<Object<K>> {
        self.shared
            .read()
            .objects
            .iter()
            .map(|(key, e)| Object {
                key: key.clone(),
                revision: e.revision,
                value: e.value.clone(),
            })
            .collect()
    }

    /// Every cached key, in order.
    pub fn keys(&self) -> Vec<String> {
        self.shared.read().objects.keys().cloned().collect()
    }

    /// How many objects are cached.
    pub fn len(&self) -> usize {
        self.shared.read().objects.len()
    }

    /// Whether the cache holds no object.
    pub fn is_empty(&self) -> bool {
        self.shared.read().objects.is_empty()
    }

    /// The objects filed under `value` in index `name`, in key order. Empty if nothing is
    /// filed there, or if no index of that name was registered.
    pub fn by_index(&self, name: &str, value: &str) -> Vec<Arc<K>> {
        let snap = self.shared.read();
        snap.indexes
            .get(name)
            .and_then(|index| index.get(value))
            .map(|keys| {
                keys.iter()
                    .filter_map(|k| snap.objects.get(k).map(|e| e.value.clone()))
                    .collect()
            })
            .unwrap_or_default()
    }

    /// The keys filed under `value` in index `name`, in order.
    pub fn index_keys(&self, name: &str, value: &str) -> Vec<String> {
        self.shared
            .read()
            .indexes
            .get(name)
            .and_then(|index| index.get(value))
            .map(|keys| keys.iter().cloned().collect())
            .unwrap_or_default()
    }

    /// The store revision the cache reflects: the last list's revision or the last event's,
    /// whichever is newer. 0 before the first list completes.
    pub fn revision(&self) -> Revision {
        self.shared.read().revision
    }

    /// Whether the first list has been applied (the cache is "synced").
    pub fn is_ready(&self) -> bool {
        *self.shared.ready.borrow()
    }

    /// A receiver that turns `true` once the first list has been applied, for readiness
    /// probes and for `grpc.health.v1`.
    pub fn ready(&self) -> watch::Receiver<bool> {
        self.shared.ready.subscribe()
    }

    /// Waits until the first list has been applied.
    pub async fn wait_until_ready(&self) {
        let mut rx = self.ready();
        // The sender lives in `self.shared`, which we hold: the channel cannot close.
        let _ = rx.wait_for(|ready| *ready).await;
    }
}

/// A cache as seen by a [`CacheBarrier`]: its keys with their mod revisions.
pub trait Revisioned: Send + Sync {
    /// The revision the cache reflects (0 before the first list).
    fn revision(&self) -> Revision;
    /// Every cached key with its mod revision.
    fn key_revisions(&self) -> Vec<(String, Revision)>;
}

impl<K: Send + Sync> Revisioned for Cache<K> {
    fn revision(&self) -> Revision {
        Cache::revision(self)
    }

    fn key_revisions(&self) -> Vec<(String, Revision)> {
        self.shared
            .read()
            .objects
            .iter()
            .map(|(k, e)| (k.clone(), e.revision))
            .collect()
    }
}

/// Whether a cache holds the state of a listing at revision `at`, or something newer: every
/// listed key is cached at its listed revision or later, and nothing the listing says was
/// deleted is still cached from before.
fn caught_up(listed: &[(String, Revision)], at: Revision, cached: &[(String, Revision)]) -> bool {
    let cached_map: HashMap<&str, Revision> =
        cached.iter().map(|(k, r)| (k.as_str(), *r)).collect();
    let listed_map: HashMap<&str, Revision> =
        listed.iter().map(|(k, r)| (k.as_str(), *r)).collect();
    listed
        .iter()
        .all(|(k, r)| cached_map.get(k.as_str()).is_some_and(|c| c >= r))
        && cached
            .iter()
            .all(|(k, r)| *r > at || listed_map.contains_key(k.as_str()))
}

/// The caches a controller decides from: before a newly elected leader's workers start,
/// [`CacheBarrier::wait`] lists each cache's prefix in the store and waits until the cache
/// holds that state (or a newer one). A replica that regains leadership after its watch was
/// cut therefore never acts on what its caches held before the cut (I7).
///
/// It compares with a listing rather than waiting for the cache's revision to pass the
/// store's: etcd 3.4 cannot confirm that a watch of a quiet prefix is up to date (it answers
/// progress requests even while a watch is still replaying), so a revision may never come.
#[derive(Clone, Default)]
pub struct CacheBarrier {
    store: Option<Arc<dyn flotilla_store::Store>>,
    caches: Vec<(String, String, Arc<dyn Revisioned>)>,
}

impl std::fmt::Debug for CacheBarrier {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CacheBarrier")
            .field(
                "caches",
                &self.caches.iter().map(|(n, _, _)| n).collect::<Vec<_>>(),
            )
            .finish_non_exhaustive()
    }
}

impl CacheBarrier {
    /// A barrier over caches of `store`.
    pub fn new(store: Arc<dyn flotilla_store::Store>) -> Self {
        Self {
            store: Some(store),
            caches: Vec::new(),
        }
    }

    /// Adds the cache of the store prefix `prefix` (the one its watcher watches).
    pub fn cache<K: Send + Sync + 'static>(mut self, prefix: &str, cache: &Cache<K>) -> Self {
        self.caches.push((
            prefix.to_owned(),
            prefix.to_owned(),
            Arc::new(cache.clone()),
        ));
        self
    }

    /// Waits until every cache holds the state its prefix had in the store when this was
    /// called (or a newer one). Store errors are retried: the caller has nothing else to do.
    pub async fn wait(&self) {
        let Some(store) = &self.store else {
            return;
        };
        let started = tokio::time::Instant::now();
        let mut last_log = started;
        for (name, prefix, cache) in &self.caches {
            // The listing is taken once, now: a cache that then catches up with it (or
            // passes it) is at least as new as the store was when the barrier began.
            let (listed, at) = loop {
                match store.list(prefix, 500).await {
                    Ok((kvs, at)) => {
                        break (
                            kvs.into_iter()
                                .map(|kv| (kv.key, kv.mod_revision))
                                .collect::<Vec<_>>(),
                            at,
                        );
                    }
                    Err(e) => {
                        tracing::warn!(cache = %name, error = %e, "cache barrier: cannot list; retrying");
                        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
                    }
                }
            };
            while !caught_up(&listed, at, &cache.key_revisions()) {
                if last_log.elapsed() >= std::time::Duration::from_secs(5) {
                    last_log = tokio::time::Instant::now();
                    tracing::warn!(cache = %name, revision = at, cached = cache.revision(), "cache barrier: still waiting for the cache to catch up");
                }
                tokio::time::sleep(std::time::Duration::from_millis(5)).await;
            }
        }
        if !self.caches.is_empty() {
            tracing::info!(
                caches = self.caches.len(),
                waited_ms = started.elapsed().as_millis() as u64,
                "caches hold the store's state of when the barrier began"
            );
        }
    }
}

/// [`reflect`] of a [`shared_watcher`] on `prefix` with `config`: the cache that `writer`
/// keeps of one prefix, and its events. The watch is shared with every other watch of the
/// process on the same store handle and prefix (`decode` must capture nothing).
pub fn reflect_watch<K, E, D>(
    writer: Writer<K>,
    store: StoreRef,
    prefix: &str,
    config: WatcherConfig,
    decode: D,
) -> impl Stream<Item = Event<K>> + Send + use<K, E, D>
where
    K: Send + Sync + 'static,
    E: std::fmt::Display + 'static,
    D: Fn(&KeyValue) -> Result<K, E> + Send + Sync + 'static,
{
    reflect(
        writer,
        shared_watcher(store, prefix.to_owned(), config, decode),
    )
}

impl<K: Send + Sync + 'static> Writer<K> {
    /// [`reflect_watch`] of this writer on `{name}/`, with the default config and metrics
    /// named `name`, e.g. `writer.reflect_prefix(store, "bindings", decode::<v1::ResourceBinding>)`.
    pub fn reflect_prefix<E, D>(
        self,
        store: StoreRef,
        name: &str,
        decode: D,
    ) -> impl Stream<Item = Event<K>> + Send + use<K, E, D>
    where
        E: std::fmt::Display + 'static,
        D: Fn(&KeyValue) -> Result<K, E> + Send + Sync + 'static,
    {
        let prefix = format!("{name}/");
        let config = WatcherConfig::for_prefix(&prefix).named(name);
        reflect_watch(self, store, &prefix, config, decode)
    }
}

/// Applies every event of `events` to `writer` and passes it on, so that whoever consumes the
/// returned stream (e.g. a controller's trigger) sees the cache already updated.
///
/// A (re-)list is passed on only once it is complete: the `InitApply` events are held back
/// until their `InitDone` has swapped the fresh snapshot in, then handed out (followed by the
/// `InitDone`). A consumer that queues keys on `InitApply` therefore never reconciles against
/// the snapshot of before the list (a watch gap's changes would otherwise be read as already
/// done and dropped: the fault suite found Works stuck at an old generation that way).
///
/// After an `InitDone`, one synthetic `Event::Delete` (at the list's revision) follows for each
/// key that vanished from the cache, so that deletions missed during a watch gap still reach
/// the controller.
///
/// `Progress` events advance the cache's revision and are not passed on.
pub fn reflect<K, S>(writer: Writer<K>, events: S) -> impl Stream<Item = Event<K>> + Send
where
    K: Send + Sync + 'static,
    S: Stream<Item = Event<K>> + Send + 'static,
{
    struct State<K, S> {
        writer: Writer<K>,
        events: S,
        /// Events ready to hand out.
        ready: VecDeque<Event<K>>,
        /// The `InitApply` events of the list in progress.
        held: Vec<Event<K>>,
    }
    let state = State {
        writer,
        events: Box::pin(events),
        ready: VecDeque::new(),
        held: Vec::new(),
    };
    futures::stream::unfold(state, |mut st| async move {
        loop {
            if let Some(ev) = st.ready.pop_front() {
                return Some((ev, st));
            }
            let ev = st.events.next().await?;
            let vanished = st.writer.apply_watcher_event(&ev);
            match ev {
                Event::Init { .. } => {
                    st.held.clear();
                    st.ready.push_back(ev);
                }
                Event::InitApply(_) => st.held.push(ev),
                Event::InitDone { revision } => {
                    st.ready.extend(st.held.drain(..));
                    st.ready.push_back(ev);
                    st.ready.extend(
                        vanished
                            .into_iter()
                            .map(|key| Event::Delete { key, revision }),
                    );
                }
                Event::Progress { .. } => {}
                Event::Apply(_) | Event::Delete { .. } => st.ready.push_back(ev),
            }
        }
    })
}

#[cfg(test)]
mod tests;
