//! Helpers shared by the watcher tests on MemStore (`watcher`) and on etcd (`watcher_etcd`):
//! reading a reflector's events with a deadline, and comparing its cache with the store.

#![allow(clippy::unwrap_used)] // test helpers outside #[test] fns unwrap too

use std::collections::BTreeMap;
use std::pin::Pin;
use std::time::Duration;

use bytes::Bytes;
use flotilla_runtime::reflector::Cache;
use flotilla_runtime::watcher::Event;
use flotilla_store::{KeyValue, Revision, Store};
use futures::{Stream, StreamExt};

/// A reflector's event stream.
pub type Events<K> = Pin<Box<dyn Stream<Item = Event<K>> + Send>>;

/// The next event, within `within`.
async fn next_within<K>(events: &mut Events<K>, within: Duration) -> Event<K> {
    tokio::time::timeout(within, events.next())
        .await
        .expect("an event in time")
        .expect("the watcher never ends")
}

/// Reads events (each within `within`) until `done` says so; returns them.
pub async fn until_within<K>(
    events: &mut Events<K>,
    within: Duration,
    mut done: impl FnMut(&Event<K>) -> bool,
) -> Vec<Event<K>> {
    let mut out = Vec::new();
    loop {
        let ev = next_within(events, within).await;
        let stop = done(&ev);
        out.push(ev);
        if stop {
            return out;
        }
    }
}

/// (key → (mod revision, value)) of the store under `prefix`.
pub async fn snapshot(store: &dyn Store, prefix: &str) -> BTreeMap<String, (Revision, Bytes)> {
    let (kvs, _) = store.list(prefix, 0).await.unwrap();
    kvs.into_iter()
        .map(|kv| (kv.key, (kv.mod_revision, kv.value)))
        .collect()
}

/// (key → (mod revision, value)) of the cache.
pub fn cached(cache: &Cache<KeyValue>) -> BTreeMap<String, (Revision, Bytes)> {
    cache
        .objects()
        .into_iter()
        .map(|o| (o.key, (o.revision, o.value.value.clone())))
        .collect()
}

/// The events that arrive until none has for `quiet`.
pub async fn drain_quiet<K>(events: &mut Events<K>, quiet: Duration) -> Vec<Event<K>> {
    let mut out = Vec::new();
    while let Ok(Some(ev)) = tokio::time::timeout(quiet, events.next()).await {
        out.push(ev);
    }
    out
}

/// The keys of the `Delete` events among `events`, sorted, each once.
pub fn deleted_keys<K>(events: &[Event<K>]) -> Vec<String> {
    let mut deleted: Vec<String> = events
        .iter()
        .filter(|e| matches!(e, Event::Delete { .. }))
        .map(|e| e.key().unwrap().to_owned())
        .collect();
    deleted.sort();
    deleted.dedup();
    deleted
}

/// Asserts that no event arrives within `within` (`why` says what that shows).
pub async fn assert_quiet<K: std::fmt::Debug>(events: &mut Events<K>, within: Duration, why: &str) {
    let next = tokio::time::timeout(within, events.next()).await;
    assert!(next.is_err(), "{why}: {next:?}");
}
