//! Reflector tests without I/O: feed events to a `Writer`, assert on a `Cache`.

use std::sync::Arc;

use futures::StreamExt;

use super::*;

/// A binding-like object: a name and the clusters it is placed on.
#[derive(Debug, PartialEq, Eq)]
struct Binding {
    name: &'static str,
    clusters: Vec<&'static str>,
}

fn obj(key: &str, revision: Revision, clusters: &[&'static str]) -> Object<Binding> {
    Object {
        key: key.to_owned(),
        revision,
        value: Arc::new(Binding {
            name: "b",
            clusters: clusters.to_vec(),
        }),
    }
}

fn by_cluster(b: &Binding) -> Vec<String> {
    b.clusters.iter().map(|c| (*c).to_owned()).collect()
}

fn writer() -> Writer<Binding> {
    Writer::new().with_index("cluster", by_cluster)
}

fn list(w: &mut Writer<Binding>, revision: Revision, objects: Vec<Object<Binding>>) -> Vec<String> {
    w.apply_watcher_event(&Event::Init { revision });
    for o in objects {
        w.apply_watcher_event(&Event::InitApply(o));
    }
    w.apply_watcher_event(&Event::InitDone { revision })
}

/// A [`writer`] after a first list of `objects` at `revision`, and its cache.
fn listed(revision: Revision, objects: Vec<Object<Binding>>) -> (Writer<Binding>, Cache<Binding>) {
    let mut w = writer();
    let cache = w.cache();
    list(&mut w, revision, objects);
    (w, cache)
}

fn delete(w: &mut Writer<Binding>, key: &str, revision: Revision) -> Vec<String> {
    w.apply_watcher_event(&Event::Delete {
        key: key.into(),
        revision,
    })
}

#[test]
fn first_list_fills_the_cache_and_marks_it_ready() {
    let mut w = writer();
    let cache = w.cache();
    assert!(!cache.is_ready());
    assert_eq!(cache.revision(), 0);
    let vanished = list(
        &mut w,
        10,
        vec![obj("b/1", 3, &["a"]), obj("b/2", 5, &["a", "b"])],
    );
    assert!(vanished.is_empty());
    assert!(cache.is_ready());
    assert!(*cache.ready().borrow());
    assert_eq!(cache.revision(), 10);
    assert_eq!(cache.keys(), vec!["b/1", "b/2"]);
    assert_eq!(cache.index_keys("cluster", "a"), vec!["b/1", "b/2"]);
    assert_eq!(cache.index_keys("cluster", "b"), vec!["b/2"]);
    assert_eq!(cache.by_index("cluster", "b").len(), 1);
    assert_eq!(cache.get_object("b/2").unwrap().revision, 5);
}

#[test]
fn a_list_in_progress_is_invisible_until_init_done() {
    let (mut w, cache) = listed(10, vec![obj("b/1", 3, &["a"])]);
    w.apply_watcher_event(&Event::Init { revision: 20 });
    w.apply_watcher_event(&Event::InitApply(obj("b/9", 15, &["z"])));
    assert_eq!(
        cache.keys(),
        vec!["b/1"],
        "readers keep the old snapshot while listing"
    );
    assert!(cache.by_index("cluster", "z").is_empty());
    assert_eq!(cache.revision(), 10);
    let vanished = w.apply_watcher_event(&Event::InitDone { revision: 20 });
    assert_eq!(vanished, vec!["b/1"]);
    assert_eq!(cache.keys(), vec!["b/9"]);
    assert!(
        cache.by_index("cluster", "a").is_empty(),
        "index swapped with the objects"
    );
    assert_eq!(cache.index_keys("cluster", "z"), vec!["b/9"]);
    assert_eq!(cache.revision(), 20);
}

#[test]
fn updates_move_objects_between_index_values() {
    let (mut w, cache) = listed(10, vec![obj("b/1", 3, &["a"])]);
    w.apply_watcher_event(&Event::Apply(obj("b/1", 11, &["b", "c"])));
    assert!(cache.by_index("cluster", "a").is_empty());
    assert_eq!(cache.index_keys("cluster", "b"), vec!["b/1"]);
    assert_eq!(cache.index_keys("cluster", "c"), vec!["b/1"]);
    assert_eq!(cache.revision(), 11);
    w.apply_watcher_event(&Event::Apply(obj("b/2", 12, &["c"])));
    assert_eq!(cache.index_keys("cluster", "c"), vec!["b/1", "b/2"]);
    delete(&mut w, "b/1", 13);
    assert_eq!(cache.index_keys("cluster", "c"), vec!["b/2"]);
    assert!(cache.by_index("cluster", "b").is_empty());
    assert!(cache.get("b/1").is_none());
    assert_eq!(cache.len(), 1);
    assert_eq!(cache.revision(), 13);
}

#[test]
fn older_revisions_never_overwrite_newer_ones() {
    let (mut w, cache) = listed(10, vec![obj("b/1", 8, &["a"])]);
    w.apply_watcher_event(&Event::Apply(obj("b/1", 7, &["old"])));
    assert_eq!(cache.get_object("b/1").unwrap().revision, 8);
    assert!(cache.by_index("cluster", "old").is_empty());
    delete(&mut w, "b/1", 6);
    assert!(
        cache.get("b/1").is_some(),
        "a stale delete does not remove a newer object"
    );
    assert_eq!(cache.revision(), 10, "the cache revision never goes back");
}

#[test]
fn unknown_index_is_empty_and_late_index_is_built() {
    let mut w = Writer::<Binding>::new();
    let cache = w.cache();
    list(
        &mut w,
        4,
        vec![obj("b/1", 2, &["a"]), obj("b/2", 3, &["a"])],
    );
    assert!(cache.by_index("cluster", "a").is_empty());
    let mut w = w.with_index("cluster", by_cluster);
    assert_eq!(cache.index_keys("cluster", "a"), vec!["b/1", "b/2"]);
    w.apply_watcher_event(&Event::Apply(obj("b/2", 5, &["b"])));
    assert_eq!(cache.index_keys("cluster", "a"), vec!["b/1"]);
    assert_eq!(cache.index_keys("cluster", "b"), vec!["b/2"]);
}

#[test]
fn readers_are_clones_of_one_cache() {
    let mut w = writer();
    let a = w.cache();
    let b = a.clone();
    list(&mut w, 2, vec![obj("b/1", 2, &["a"])]);
    assert_eq!(a.len(), 1);
    assert_eq!(b.list().len(), 1);
    assert!(b.is_ready());
}

/// [`reflect`] over `events` into a fresh [`writer`]: its cache, and the passed-on events.
fn reflected(
    events: Vec<Event<Binding>>,
) -> (Cache<Binding>, impl Stream<Item = Event<Binding>> + Send) {
    let w = writer();
    (w.cache(), reflect(w, futures::stream::iter(events)))
}

#[tokio::test]
async fn reflect_applies_then_reports_vanished_keys_as_deletes() {
    let (cache, out) = reflected(vec![
        Event::Init { revision: 5 },
        Event::InitApply(obj("b/1", 2, &["a"])),
        Event::InitApply(obj("b/2", 3, &["a"])),
        Event::InitDone { revision: 5 },
        Event::Apply(obj("b/3", 6, &["a"])),
        // A re-list after a gap in which b/1 and b/3 were deleted.
        Event::Init { revision: 9 },
        Event::InitApply(obj("b/2", 3, &["a"])),
        Event::InitDone { revision: 9 },
    ]);
    let out: Vec<Event<Binding>> = out.collect().await;
    let tail: Vec<(Option<&str>, Revision)> = out[out.len() - 3..]
        .iter()
        .map(|e| (e.key(), e.revision()))
        .collect();
    assert_eq!(tail, vec![(None, 9), (Some("b/1"), 9), (Some("b/3"), 9)]);
    assert!(matches!(out[out.len() - 2], Event::Delete { .. }));
    assert_eq!(cache.keys(), vec!["b/2"]);
    cache.wait_until_ready().await;
}

/// Regression (fault suite, F5/I3): a consumer that queues keys on `InitApply` and reads the
/// cache when it reconciles must see the re-listed object, not the one from before the gap.
/// Before the fix the re-list's `InitApply` was passed on before `InitDone` swapped the new
/// snapshot in, so the reader saw generation 1 although the list said generation 2.
#[tokio::test]
async fn a_relisted_object_is_in_the_cache_before_its_init_apply_is_passed_on() {
    let (cache, out) = reflected(vec![
        Event::Init { revision: 5 },
        Event::InitApply(obj("b/1", 2, &["old"])),
        Event::InitDone { revision: 5 },
        // The watch was cut; b/1 changed (and the history was compacted): a re-list.
        Event::Init { revision: 9 },
        Event::InitApply(obj("b/1", 8, &["new"])),
        Event::InitDone { revision: 9 },
    ]);
    let mut out = std::pin::pin!(out);
    let mut seen_by_consumer = Vec::new();
    while let Some(ev) = out.next().await {
        if let Event::InitApply(o) = &ev {
            // what a worker would read for this key right now
            let cached = cache.get_object(&o.key).expect("cached");
            seen_by_consumer.push((o.revision, cached.revision, cached.value.clusters.clone()));
        }
    }
    assert_eq!(
        seen_by_consumer,
        vec![(2, 2, vec!["old"]), (8, 8, vec!["new"])],
        "every InitApply must be visible in the cache when it is handed out"
    );
}

#[tokio::test]
async fn progress_advances_the_cache_revision_and_is_not_passed_on() {
    let (cache, out) = reflected(vec![
        Event::Init { revision: 5 },
        Event::InitDone { revision: 5 },
        Event::Progress { revision: 12 },
    ]);
    let out: Vec<Event<Binding>> = out.collect().await;
    assert_eq!(out.len(), 2, "{out:?}");
    assert_eq!(cache.revision(), 12);
}
