//! Watcher + reflector against `MemStore`: list+watch, updates and deletes, compaction while
//! the watcher is not reading, injected faults, and monotonic revisions (I7).

#![allow(clippy::unwrap_used)] // test helpers outside #[test] fns unwrap too

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;

use crate::watch_support::*;
use flotilla_runtime::backoff::Backoff;
use flotilla_runtime::reflector::{Cache, Writer, reflect};
use flotilla_runtime::testing::FlakyStore;
use flotilla_runtime::watcher::{Event, WatcherConfig, raw, shared_watcher, watcher};
use flotilla_store::{
    KeyValue, MemStore, MemStoreOptions, Revision, Store, StoreError, TokioClock,
};
use futures::StreamExt;

fn config() -> WatcherConfig {
    WatcherConfig::default()
        .named("test")
        .page_size(2)
        .backoff(Backoff::new(
            Duration::from_millis(100),
            Duration::from_secs(2),
        ))
}

/// A reflector over `prefix` with the raw key-values as objects, indexed by value.
fn reflector(
    store: Arc<dyn Store>,
    prefix: &str,
    config: WatcherConfig,
) -> (Cache<KeyValue>, Events<KeyValue>) {
    let writer = Writer::new().with_index("value", |kv: &KeyValue| {
        vec![String::from_utf8_lossy(&kv.value).into_owned()]
    });
    let cache = writer.cache();
    let events = reflect(writer, watcher(store, prefix, config, raw));
    (cache, Box::pin(events))
}

const WITHIN: Duration = Duration::from_secs(20);

async fn until<K>(events: &mut Events<K>, done: impl FnMut(&Event<K>) -> bool) -> Vec<Event<K>> {
    until_within(events, WITHIN, done).await
}

async fn put(store: &dyn Store, key: &str, value: &str) -> Revision {
    store
        .put(key, Bytes::from(value.to_owned()), None)
        .await
        .unwrap()
}

/// The stream position after each event: InitDone/Apply/Delete carry it. It must never go
/// back, and an `Init` must never start below it.
fn assert_monotonic<K>(events: &[Event<K>]) {
    let mut position = 0;
    let mut listing = false;
    for ev in events {
        match ev {
            Event::Init { revision } => {
                assert!(
                    *revision >= position,
                    "re-list at {revision} below {position}"
                );
                listing = true;
            }
            Event::InitApply(o) => assert!(listing && o.revision <= position.max(o.revision)),
            Event::InitDone { revision } => {
                assert!(
                    *revision >= position,
                    "InitDone {revision} went back from {position}"
                );
                position = *revision;
                listing = false;
            }
            Event::Apply(_) | Event::Delete { .. } | Event::Progress { .. } => {
                // Synthetic deletes after a re-list carry the list revision itself.
                assert!(
                    ev.revision() >= position,
                    "{} went back from {position}",
                    ev.revision()
                );
                position = ev.revision();
            }
        }
    }
}

#[tokio::test]
async fn lists_in_pages_then_follows_updates_and_deletes() {
    let store: Arc<dyn Store> = Arc::new(MemStore::new());
    for i in 0..5 {
        put(&*store, &format!("b/{i}"), "a").await;
    }
    put(&*store, "other/x", "a").await;
    let list_rev = store.current_revision().await.unwrap();
    let (cache, mut events) = reflector(store.clone(), "b/", config());

    let first = until(&mut events, |e| matches!(e, Event::InitDone { .. }));
    let first = first.await;
    assert_eq!(first.len(), 7, "Init, 5 × InitApply, InitDone: {first:?}");
    assert_eq!(first[0], Event::Init { revision: list_rev });
    let keys: Vec<_> = first[1..6]
        .iter()
        .map(|e| e.key().unwrap().to_owned())
        .collect();
    assert_eq!(keys, vec!["b/0", "b/1", "b/2", "b/3", "b/4"]);
    assert!(cache.is_ready());
    assert_eq!(cache.revision(), list_rev);
    assert_eq!(cached(&cache), snapshot(&*store, "b/").await);

    let r1 = put(&*store, "b/1", "z").await;
    let r2 = store.delete("b/3").await.unwrap().revision;
    put(&*store, "other/y", "a").await;
    let r3 = put(&*store, "b/9", "z").await;
    let live = until(&mut events, |e| e.revision() == r3).await;
    let summary: Vec<_> = live
        .iter()
        .map(|e| {
            (
                matches!(e, Event::Delete { .. }),
                e.key().unwrap().to_owned(),
                e.revision(),
            )
        })
        .collect();
    assert_eq!(
        summary,
        vec![
            (false, "b/1".into(), r1),
            (true, "b/3".into(), r2),
            (false, "b/9".into(), r3)
        ]
    );
    assert_eq!(cached(&cache), snapshot(&*store, "b/").await);
    assert_eq!(cache.revision(), r3);
    assert_eq!(cache.index_keys("value", "z"), vec!["b/1", "b/9"]);
    assert!(cache.get("b/3").is_none());
    let mut all = first;
    all.extend(live);
    assert_monotonic(&all);
}

#[tokio::test]
async fn compaction_while_not_reading_relists_and_the_cache_equals_the_store() {
    // A one-item watch buffer and a two-revision fan-out: a watcher that stops reading falls
    // behind at once, and the compaction below then cancels its watch.
    let store = MemStore::with_options(
        MemStoreOptions {
            history_revisions: 100_000,
            watch_buffer: 1,
            broadcast_capacity: 2,
        },
        Arc::new(TokioClock::default()),
    );
    let dyn_store: Arc<dyn Store> = Arc::new(store.clone());
    for i in 0..10 {
        put(&store, &format!("b/{i}"), "v1").await;
    }
    let (cache, mut events) = reflector(dyn_store.clone(), "b/", config());
    let mut all = until(&mut events, |e| matches!(e, Event::InitDone { .. })).await;
    assert_eq!(cache.len(), 10);
    // Let the watcher open its watch (nothing to read yet), then stop reading.
    assert_quiet(&mut events, Duration::from_millis(100), "no event").await;

    // Not reading: delete half, update some, add some, then compact everything.
    for i in 0..5 {
        store.delete(&format!("b/{i}")).await.unwrap();
    }
    for i in 5..8 {
        put(&store, &format!("b/{i}"), "v2").await;
    }
    for i in 10..13 {
        put(&store, &format!("b/{i}"), "v2").await;
    }
    let last = store.current_revision().await.unwrap();
    store.compact(last).await.unwrap();
    assert_eq!(store.compacted_revision(), last);

    let rest = until(
        &mut events,
        |e| matches!(e, Event::InitDone { revision } if *revision == last),
    )
    .await;
    // Then the synthetic deletes for whatever vanished in the gap.
    let inits = rest
        .iter()
        .filter(|e| matches!(e, Event::Init { .. }))
        .count();
    assert_eq!(inits, 1, "exactly one re-list: {rest:?}");
    all.extend(rest);
    let trailing = drain_quiet(&mut events, Duration::from_millis(200)).await;
    assert_eq!(
        cached(&cache),
        snapshot(&store, "b/").await,
        "deletions included"
    );
    assert_eq!(cache.revision(), last);
    for i in 0..5 {
        assert!(
            cache.get(&format!("b/{i}")).is_none(),
            "b/{i} was deleted during the gap"
        );
    }
    // Every deletion reached a consumer: as a watch Delete before the watch broke, or as a
    // synthetic Delete after the re-list.
    all.extend(trailing);
    assert_eq!(
        deleted_keys(&all),
        (0..5).map(|i| format!("b/{i}")).collect::<Vec<_>>()
    );
    assert_monotonic(&all);
}

#[tokio::test(start_paused = true)]
async fn failed_watches_are_retried_with_backoff() {
    let flaky = FlakyStore::new(Arc::new(MemStore::new()));
    put(&*flaky, "b/1", "v").await;
    for _ in 0..3 {
        flaky.inject_watch_error(StoreError::unavailable("connection refused"));
    }
    let start = tokio::time::Instant::now();
    let (cache, mut events) = reflector(flaky.clone(), "b/", config());
    until(&mut events, |e| matches!(e, Event::InitDone { .. })).await;
    let r = put(&*flaky, "b/2", "v").await;
    until(&mut events, |e| e.revision() == r).await;
    assert_eq!(flaky.watch_calls(), 4);
    // 100 ms + 200 ms + 400 ms of back-off before the fourth attempt.
    assert!(
        start.elapsed() >= Duration::from_millis(700),
        "{:?}",
        start.elapsed()
    );
    assert_eq!(cached(&cache), snapshot(&*flaky, "b/").await);
}

#[tokio::test(start_paused = true)]
async fn a_list_older_than_what_was_seen_is_rejected() {
    let flaky = FlakyStore::new(Arc::new(MemStore::new()));
    let early = put(&*flaky, "b/1", "v").await;
    put(&*flaky, "b/2", "v").await;
    let synced = put(&*flaky, "b/3", "v").await;
    // The first watch says "compacted": the watcher re-lists, and a lagging member answers
    // that list with a snapshot from before what the watcher has already seen.
    flaky.inject_watch_error(StoreError::Compacted {
        compact_revision: synced,
    });
    let (cache, mut events) = reflector(flaky.clone(), "b/", config());
    let first = until(&mut events, |e| matches!(e, Event::InitDone { .. })).await;
    assert_eq!(first[0].revision(), synced);
    flaky.stale_lists(1, early);
    let second = until(&mut events, |e| matches!(e, Event::InitDone { .. })).await;
    assert_eq!(
        second[0],
        Event::Init { revision: synced },
        "the stale snapshot was never emitted"
    );
    // Two pages, one refused stale page, two pages.
    assert_eq!(
        flaky.range_calls(),
        5,
        "the stale list was asked for and refused"
    );
    assert_eq!(cache.len(), 3);
    let mut all = first;
    all.extend(second);
    assert_monotonic(&all);
}

#[tokio::test]
async fn replayed_history_at_or_below_the_last_seen_revision_is_dropped() {
    let flaky = FlakyStore::new(Arc::new(MemStore::new()));
    for i in 0..6 {
        put(&*flaky, &format!("b/{i}"), "old").await;
    }
    store_delete(&*flaky, "b/0").await;
    // Every watch starts 5 revisions early: it replays puts and the delete already listed.
    flaky.rewind_watches(5);
    let (cache, mut events) = reflector(flaky.clone(), "b/", config());
    let first = until(&mut events, |e| matches!(e, Event::InitDone { .. })).await;
    let listed = first.last().unwrap().revision();
    let r = put(&*flaky, "b/7", "new").await;
    let live = until(&mut events, |e| e.revision() == r).await;
    assert_eq!(live.len(), 1, "only the new change, no replay: {live:?}");
    assert!(live.iter().all(|e| e.revision() > listed));
    assert_eq!(cached(&cache), snapshot(&*flaky, "b/").await);
}

async fn store_delete(store: &dyn Store, key: &str) {
    store.delete(key).await.unwrap();
}

#[tokio::test]
async fn values_that_do_not_decode_are_skipped() {
    let store: Arc<dyn Store> = Arc::new(MemStore::new());
    put(&*store, "n/a", "1").await;
    put(&*store, "n/b", "not a number").await;
    put(&*store, "n/c", "3").await;
    let decode = |kv: &KeyValue| -> Result<u32, std::num::ParseIntError> {
        String::from_utf8_lossy(&kv.value).parse()
    };
    let writer = Writer::<u32>::new();
    let cache = writer.cache();
    let mut events: Events<u32> = Box::pin(reflect(
        writer,
        watcher(store.clone(), "n/", config(), decode),
    ));
    let first = until(&mut events, |e| matches!(e, Event::InitDone { .. })).await;
    assert_eq!(first.len(), 4, "Init, two decodable objects, InitDone");
    assert_eq!(cache.keys(), vec!["n/a", "n/c"]);
    put(&*store, "n/d", "garbage").await;
    let r = put(&*store, "n/b", "2").await;
    until(&mut events, |e| e.revision() == r).await;
    assert_eq!(*cache.get("n/b").unwrap(), 2);
    assert!(cache.get("n/d").is_none());
}

/// A new leader's [`CacheBarrier`] completes once its caches hold what the store held when
/// it began, also on a quiet prefix while the rest of the store moves on; and it does not
/// complete while a cache lacks a change (here: a cache nobody feeds).
#[tokio::test]
async fn a_cache_barrier_waits_until_the_caches_hold_the_store_state() {
    use flotilla_runtime::CacheBarrier;
    let store: Arc<dyn Store> = Arc::new(MemStore::new());
    put(&*store, "b/1", "a").await;
    let writer: Writer<KeyValue> = Writer::new();
    let cache = writer.cache();
    let config = WatcherConfig::default().progress_interval(Duration::from_millis(20));
    let events = reflect(writer, watcher(store.clone(), "b/", config, raw));
    let drive = tokio::spawn(async move {
        let mut events = std::pin::pin!(events);
        while events.next().await.is_some() {}
    });
    cache.wait_until_ready().await;
    // Busy elsewhere: the store moves on, the watched prefix does not.
    let mut last = 0;
    for i in 0..50 {
        last = put(&*store, &format!("other/{i}"), "x").await;
    }
    let barrier = CacheBarrier::new(store.clone()).cache("b/", &cache);
    tokio::time::timeout(Duration::from_secs(10), barrier.wait())
        .await
        .expect("the barrier completes: the quiet cache holds the store's state");
    // progress notifications carry the cache's revision along as well (MemStore)
    tokio::time::timeout(Duration::from_secs(10), async {
        while cache.revision() < last {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await
    .expect("progress advances the revision of a quiet cache");

    // A stale cache: it never saw b/2.
    let stale_writer: Writer<KeyValue> = Writer::new();
    let stale = stale_writer.cache();
    put(&*store, "b/2", "a").await;
    let barrier = CacheBarrier::new(store.clone()).cache("b/", &stale);
    assert!(
        tokio::time::timeout(Duration::from_millis(300), barrier.wait())
            .await
            .is_err(),
        "a cache without b/1 and b/2 is not caught up"
    );
    drive.abort();
}

// === shared watches (one watch per prefix per process) ===

/// A reflector like [`reflector`], on the process's shared watch of `prefix`.
fn shared_reflector(
    store: Arc<dyn Store>,
    prefix: &str,
    config: WatcherConfig,
) -> (Cache<KeyValue>, Events<KeyValue>) {
    let writer = Writer::new();
    let cache = writer.cache();
    let events = reflect(writer, shared_watcher(store, prefix, config, raw));
    (cache, Box::pin(events))
}

/// Two consumers of one prefix on one store handle, the second joining late, are served by
/// one list and one watch, and each sees the protocol a watch of its own would give: the late
/// one gets the state so far as a list, then the same live events as the first.
#[tokio::test]
async fn consumers_of_one_prefix_share_one_watch_and_a_late_one_gets_the_state_as_a_list() {
    let flaky = FlakyStore::new(Arc::new(MemStore::new()));
    for i in 0..5 {
        put(&*flaky, &format!("b/{i}"), "a").await;
    }
    let (early_cache, mut early) = shared_reflector(flaky.clone(), "b/", config());
    until(&mut early, |e| matches!(e, Event::InitDone { .. })).await;

    // Changes the early consumer has seen, then a late one joins.
    store_delete(&*flaky, "b/0").await;
    let moved = put(&*flaky, "b/1", "b").await;
    until(&mut early, |e| e.revision() == moved).await;
    let ranges_before = flaky.range_calls();
    let (late_cache, mut late) = shared_reflector(flaky.clone(), "b/", config());
    let joined = until(&mut late, |e| matches!(e, Event::InitDone { .. })).await;
    assert_eq!(
        flaky.range_calls(),
        ranges_before,
        "the late consumer listed nothing"
    );
    assert_eq!(joined.first(), Some(&Event::Init { revision: moved }));
    assert_eq!(joined.last(), Some(&Event::InitDone { revision: moved }));
    let listed: Vec<_> = joined.iter().filter_map(|e| e.key()).collect();
    assert_eq!(
        listed,
        ["b/1", "b/2", "b/3", "b/4"],
        "the state as of {moved}"
    );
    assert_eq!(cached(&late_cache), snapshot(&*flaky, "b/").await);

    // Live changes reach both, in the same order.
    store_delete(&*flaky, "b/2").await;
    put(&*flaky, "b/7", "c").await;
    let last = put(&*flaky, "b/3", "c").await;
    let seen_early = until(&mut early, |e| e.revision() == last).await;
    let seen_late = until(&mut late, |e| e.revision() == last).await;
    assert_eq!(seen_early, seen_late);
    assert_eq!(seen_late.len(), 3, "{seen_late:?}");
    assert_eq!(cached(&early_cache), snapshot(&*flaky, "b/").await);
    assert_eq!(cached(&late_cache), snapshot(&*flaky, "b/").await);
    assert_monotonic(&joined);

    assert_eq!(flaky.watch_calls(), 1, "one watch for both consumers");
}

/// Watches that differ in what they list or how they recover, and watches of other store
/// handles, are not shared.
#[tokio::test]
async fn watches_with_another_config_or_store_handle_are_their_own() {
    let inner: Arc<dyn Store> = Arc::new(MemStore::new());
    put(&*inner, "b/1", "a").await;
    let flaky = FlakyStore::new(inner.clone());
    let other_handle = FlakyStore::new(inner);
    let (_, mut a) = shared_reflector(flaky.clone(), "b/", config());
    let (_, mut b) = shared_reflector(flaky.clone(), "b/", config().relist_on_break(true));
    let (_, mut c) = shared_reflector(other_handle.clone(), "b/", config());
    for events in [&mut a, &mut b, &mut c] {
        until(events, |e| matches!(e, Event::InitDone { .. })).await;
    }
    let r = put(&*flaky, "b/2", "a").await;
    for events in [&mut a, &mut b, &mut c] {
        until(events, |e| e.revision() == r).await;
    }
    assert_eq!(flaky.watch_calls(), 2, "one per config");
    assert_eq!(other_handle.watch_calls(), 1);
}

/// When its last consumer goes, a shared watch closes, and the next consumer starts a new
/// one; a consumer that leaves takes nothing from the others.
#[tokio::test]
async fn a_shared_watch_closes_with_its_last_consumer() {
    let flaky = FlakyStore::new(Arc::new(MemStore::new()));
    put(&*flaky, "b/1", "a").await;
    let (_, mut first) = shared_reflector(flaky.clone(), "b/", config());
    let (stays_cache, mut stays) = shared_reflector(flaky.clone(), "b/", config());
    until(&mut first, |e| matches!(e, Event::InitDone { .. })).await;
    until(&mut stays, |e| matches!(e, Event::InitDone { .. })).await;
    drop(first);
    let r = put(&*flaky, "b/2", "a").await;
    until(&mut stays, |e| e.revision() == r).await;
    assert_eq!(cached(&stays_cache), snapshot(&*flaky, "b/").await);
    drop(stays);
    assert_eq!(flaky.watch_calls(), 1);

    // The hub retires on its own task: a consumer that comes before it has may still join
    // it, so look until a new watch is opened.
    tokio::time::timeout(WITHIN, async {
        loop {
            let (cache, mut next) = shared_reflector(flaky.clone(), "b/", config());
            until(&mut next, |e| matches!(e, Event::InitDone { .. })).await;
            assert_eq!(cached(&cache), snapshot(&*flaky, "b/").await);
            if flaky.watch_calls() == 2 {
                break;
            }
            drop(next);
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await
    .expect("the closed watch is not reused");
}

/// A shared watch that must re-list (its resume was compacted) after keys were deleted while
/// it was down gives every consumer, the one that joined during the gap included, the fresh
/// list and the deletions of the gap, and lists once for all of them.
#[tokio::test(start_paused = true)]
async fn a_shared_relist_brings_every_consumer_the_deletions_of_the_gap() {
    let flaky = FlakyStore::new(Arc::new(MemStore::new()));
    for i in 0..10 {
        put(&*flaky, &format!("b/{i}"), "a").await;
    }
    // The watch after the first list fails, and its retry finds the revision compacted.
    flaky.inject_watch_error(StoreError::unavailable("connection refused"));
    flaky.inject_watch_error(StoreError::Compacted {
        compact_revision: 1,
    });
    let (early_cache, mut early) = shared_reflector(flaky.clone(), "b/", config());
    let mut early_seen = until(&mut early, |e| matches!(e, Event::InitDone { .. })).await;
    for i in 0..5 {
        store_delete(&*flaky, &format!("b/{i}")).await;
    }
    let last = put(&*flaky, "b/5", "b").await;
    // Joins while the watch is down: it gets the state as of the first list.
    let (late_cache, mut late) = shared_reflector(flaky.clone(), "b/", config());
    let mut late_seen = until(&mut late, |e| matches!(e, Event::InitDone { .. })).await;
    assert_eq!(late_cache.len(), 10, "the hub's state before the gap");

    for (seen, events) in [(&mut early_seen, &mut early), (&mut late_seen, &mut late)] {
        seen.extend(
            until(
                events,
                |e| matches!(e, Event::InitDone { revision } if *revision >= last),
            )
            .await,
        );
        seen.extend(drain_quiet(events, Duration::from_millis(200)).await);
        assert_eq!(
            deleted_keys(seen),
            (0..5).map(|i| format!("b/{i}")).collect::<Vec<_>>()
        );
        assert_monotonic(seen);
    }
    assert_eq!(cached(&early_cache), snapshot(&*flaky, "b/").await);
    assert_eq!(cached(&late_cache), snapshot(&*flaky, "b/").await);
    assert_eq!(flaky.watch_calls(), 3, "one watch: failed, compacted, open");
}

/// A shared watch runs on the runtime of its first consumer. When that runtime stops, a
/// consumer on another runtime sees its stream end instead of waiting forever on a watch
/// that is gone.
#[test]
fn when_the_shared_watchs_runtime_stops_its_other_consumers_streams_end() {
    let runtime = || {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap()
    };
    let (first_rt, other_rt) = (runtime(), runtime());
    let store: Arc<dyn Store> = Arc::new(MemStore::new());
    first_rt.block_on(put(&*store, "b/1", "a"));
    let mut first: Events<KeyValue> = Box::pin(shared_watcher(store.clone(), "b/", config(), raw));
    first_rt.block_on(until(&mut first, |e| matches!(e, Event::InitDone { .. })));
    let mut other: Events<KeyValue> = Box::pin(shared_watcher(store.clone(), "b/", config(), raw));
    other_rt.block_on(until(&mut other, |e| matches!(e, Event::InitDone { .. })));
    assert_eq!(
        flotilla_runtime::watcher::shared_watches(&store),
        [("b/".to_owned(), 2)]
    );

    drop(first_rt);
    let end = other_rt.block_on(async { tokio::time::timeout(WITHIN, other.next()).await });
    assert!(
        matches!(end, Ok(None)),
        "the stream ends with the watch: {end:?}"
    );
    assert!(flotilla_runtime::watcher::shared_watches(&store).is_empty());
    drop(first);
}
