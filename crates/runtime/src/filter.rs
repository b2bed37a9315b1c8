//! Event filters: queue a key only when the part of an object a controller reads changed.
//!
//! A binding is written about seven times in a failover, by five writers. A controller that
//! reads only some of its fields (the work-executor reads the spec and metadata, not the
//! conditions others write; the detector reads only the fields it wrote itself) would
//! otherwise reconcile once per write and find nothing to do. [`ChangeFilter`] remembers
//! the fields that matter (or a [`Digest`] of them) per key, so a trigger can drop the events that leave
//! them as they were (kube-rs' `predicates::generation` is the same idea, keyed on one field).
//! Every filter is named, and counts what it let through and what it dropped in
//! `flotilla_filter_events_total{filter, outcome = queued | skipped}`: a filter that skips
//! nothing costs a digest per event for nothing, and one that skips what it should not shows
//! up as a controller that stops reacting.
//!
//! ```text
//!   event ─► digest(fields the controller reads) ─► same as last time? ─► drop
//!                                                  └► differs / new key ─► queue
//! ```

use std::collections::HashMap;
use std::hash::{DefaultHasher, Hash, Hasher};

use crate::watcher::Event;

/// A digest of chosen fields of an object, built field by field.
#[derive(Debug, Default)]
pub struct Digest {
    hasher: DefaultHasher,
    buf: Vec<u8>,
}

impl Digest {
    /// An empty digest.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds a hashable value (numbers, strings, flags).
    pub fn add<T: Hash + ?Sized>(&mut self, value: &T) -> &mut Self {
        value.hash(&mut self.hasher);
        self
    }

    /// Adds a protobuf message by its encoding (`None` and an absent message differ from an
    /// empty one only by the marker, which is what a change check needs).
    pub fn message<M: prost::Message>(&mut self, message: Option<&M>) -> &mut Self {
        match message {
            None => 0u8.hash(&mut self.hasher),
            Some(m) => {
                self.buf.clear();
                // encoding into a Vec cannot run out of room
                let _ = m.encode(&mut self.buf);
                1u8.hash(&mut self.hasher);
                self.buf.hash(&mut self.hasher);
            }
        }
        self
    }

    /// The digest.
    pub fn finish(&self) -> u64 {
        self.hasher.finish()
    }
}

/// What a [`ChangeFilter`] made of one event.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Change<'a> {
    /// The key was not seen before (a new object, or the first list).
    Added(&'a str),
    /// The state the controller reads differs from the last one seen.
    Changed(&'a str),
    /// An update that leaves that state as it was: usually nothing to do.
    Same(&'a str),
    /// The object was deleted; `seen` says whether the filter knew it.
    Removed {
        /// The deleted key.
        key: &'a str,
        /// Whether the key had been seen.
        seen: bool,
    },
    /// Not about one object (`Init`, `InitDone`, `Progress`).
    None,
}

impl<'a> Change<'a> {
    /// The key the event is about, if any.
    pub fn key(self) -> Option<&'a str> {
        match self {
            Change::Added(k) | Change::Changed(k) | Change::Same(k) => Some(k),
            Change::Removed { key, .. } => Some(key),
            Change::None => None,
        }
    }

    /// Whether the state the controller reads appeared, changed or went away.
    pub fn is_change(self) -> bool {
        match self {
            Change::Added(_) | Change::Changed(_) => true,
            Change::Removed { seen, .. } => seen,
            Change::Same(_) | Change::None => false,
        }
    }
}

/// Remembers, per key, the part of an object a controller reads (`state`: a few fields, or a
/// [`Digest`] of them) and tells each event apart: added, changed, the same, removed. The
/// one change filter of the services' triggers.
#[derive(Debug)]
pub struct ChangeFilter<K, V> {
    state: fn(&K) -> V,
    seen: HashMap<String, V>,
    queued: metrics::Counter,
    skipped: metrics::Counter,
}

impl<K, V: PartialEq> ChangeFilter<K, V> {
    /// A filter named `name` (the `filter` label of its metric) on `state(object)`.
    pub fn new(name: &'static str, state: fn(&K) -> V) -> Self {
        let counter = |outcome: &'static str| metrics::counter!("flotilla_filter_events_total", "filter" => name, "outcome" => outcome);
        Self {
            state,
            seen: HashMap::new(),
            queued: counter("queued"),
            skipped: counter("skipped"),
        }
    }

    /// Records the event and says what it changed.
    pub fn observe<'e>(&mut self, event: &'e Event<K>) -> Change<'e> {
        let change = self.classify(event);
        match change {
            Change::None => {}
            c if c.is_change() => self.queued.increment(1),
            _ => self.skipped.increment(1),
        }
        change
    }

    fn classify<'e>(&mut self, event: &'e Event<K>) -> Change<'e> {
        match event {
            Event::InitApply(o) | Event::Apply(o) => {
                let state = (self.state)(&o.value);
                match self.seen.get_mut(&o.key) {
                    Some(last) if *last == state => Change::Same(&o.key),
                    Some(last) => {
                        *last = state;
                        Change::Changed(&o.key)
                    }
                    None => {
                        self.seen.insert(o.key.clone(), state);
                        Change::Added(&o.key)
                    }
                }
            }
            Event::Delete { key, .. } => Change::Removed {
                key,
                seen: self.seen.remove(key).is_some(),
            },
            Event::Init { .. } | Event::InitDone { .. } | Event::Progress { .. } => Change::None,
        }
    }

    /// The state last seen for `key`.
    pub fn get(&self, key: &str) -> Option<&V> {
        self.seen.get(key)
    }

    /// How many keys are remembered.
    pub fn len(&self) -> usize {
        self.seen.len()
    }

    /// Whether no key is remembered.
    pub fn is_empty(&self) -> bool {
        self.seen.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn digest_of(labels: &[(&str, &str)], generation: i64) -> u64 {
        let map: std::collections::BTreeMap<String, String> = labels
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect();
        Digest::new().add(&generation).add(&map).finish()
    }

    #[test]
    fn insertion_order_does_not_matter_but_content_does() {
        let a = digest_of(&[("a", "1"), ("b", "2"), ("c", "3")], 1);
        let b = digest_of(&[("c", "3"), ("a", "1"), ("b", "2")], 1);
        assert_eq!(a, b);
        assert_ne!(a, digest_of(&[("a", "1"), ("b", "2"), ("c", "4")], 1));
        assert_ne!(a, digest_of(&[("a", "1"), ("b", "2"), ("c", "3")], 2));
        assert_ne!(a, digest_of(&[("a", "1"), ("b", "2")], 1));
    }

    #[test]
    fn messages_absent_empty_and_set_differ() {
        let none = Digest::new()
            .message::<prost_types::Timestamp>(None)
            .finish();
        let empty = Digest::new()
            .message(Some(&prost_types::Timestamp::default()))
            .finish();
        let set = Digest::new()
            .message(Some(&prost_types::Timestamp {
                seconds: 5,
                nanos: 0,
            }))
            .finish();
        assert_ne!(none, empty);
        assert_ne!(empty, set);
        assert_eq!(
            set,
            Digest::new()
                .message(Some(&prost_types::Timestamp {
                    seconds: 5,
                    nanos: 0
                }))
                .finish()
        );
    }

    #[test]
    fn a_change_filter_tells_added_changed_same_and_removed_apart() {
        use crate::watcher::Object;
        let apply = |key: &str, v: (i64, &'static str)| {
            Event::Apply(Object {
                key: key.into(),
                value: std::sync::Arc::new(v),
                revision: 1,
            })
        };
        let mut f: ChangeFilter<(i64, &'static str), i64> = ChangeFilter::new("test", |v| v.0);
        assert_eq!(f.observe(&apply("a", (1, "x"))), Change::Added("a"));
        assert_eq!(
            f.observe(&apply("a", (1, "y"))),
            Change::Same("a"),
            "only .0 is read"
        );
        assert_eq!(f.observe(&apply("a", (2, "y"))), Change::Changed("a"));
        assert_eq!(f.get("a"), Some(&2));
        let delete = |key: &str| Event::Delete {
            key: key.into(),
            revision: 2,
        };
        let (del_a, del_b) = (delete("a"), delete("b"));
        let removed = f.observe(&del_a);
        assert_eq!(
            removed,
            Change::Removed {
                key: "a",
                seen: true
            }
        );
        assert!(removed.is_change());
        let unknown = f.observe(&del_b);
        assert!(!unknown.is_change(), "a key never seen");
        assert_eq!(unknown.key(), Some("b"));
        assert_eq!(f.observe(&Event::InitDone { revision: 3 }), Change::None);
        assert!(f.is_empty());
    }
}
