//! Event filters: queue a key only when the part of an object a controller reads changed.
//!
//! A binding is written about seven times in a failover, by five writers. A controller that
//! reads only some of its fields (the work-executor reads the spec and metadata, not the
//! conditions others write; the detector reads only the fields it wrote itself) would
//! otherwise reconcile once per write and find nothing to do. [`Fingerprints`] remembers a
//! digest of the fields that matter per key, so a trigger can drop the events that leave
//! them as they were (kube-rs' `predicates::generation` is the same idea, keyed on one field).
//!
//! ```text
//!   event ─► digest(fields the controller reads) ─► same as last time? ─► drop
//!                                                  └► differs / new key ─► queue
//! ```

use std::collections::HashMap;
use std::hash::{DefaultHasher, Hash, Hasher};

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

/// The last digest seen per key.
#[derive(Debug, Default)]
pub struct Fingerprints {
    seen: HashMap<String, u64>,
}

impl Fingerprints {
    /// An empty memory.
    pub fn new() -> Self {
        Self::default()
    }

    /// Records `digest` for `key`; true when the key is new or its digest differs from the
    /// last one recorded.
    pub fn changed(&mut self, key: &str, digest: u64) -> bool {
        match self.seen.get_mut(key) {
            Some(last) if *last == digest => false,
            Some(last) => {
                *last = digest;
                true
            }
            None => {
                self.seen.insert(key.to_owned(), digest);
                true
            }
        }
    }

    /// Forgets `key` (deleted): its next event counts as new.
    pub fn forget(&mut self, key: &str) {
        self.seen.remove(key);
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
    fn fingerprints_report_new_changed_and_forgotten_keys() {
        let mut f = Fingerprints::new();
        assert!(f.changed("k", 1), "a new key is a change");
        assert!(!f.changed("k", 1), "the same digest is not");
        assert!(f.changed("k", 2));
        assert!(!f.changed("k", 2));
        assert!(f.changed("other", 2), "keys are separate");
        f.forget("k");
        assert_eq!(f.len(), 1);
        assert!(f.changed("k", 2), "a forgotten key is new again");
        assert!(!f.is_empty());
    }
}
