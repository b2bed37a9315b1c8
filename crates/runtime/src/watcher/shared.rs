//! Decoded values shared between the watchers of one process.
//!
//! `flotilla up` and `flotilla bench` run every service in one process on one store, and
//! each service watches the bindings: without sharing, every binding version is decoded,
//! allocated and freed once per service. Here a watcher that decodes a value remembers it
//! (weakly) under what identifies it — the value type, the decoder, the key, its revisions
//! and a digest of the bytes — and the next watcher of the process that meets the same
//! version takes the same `Arc` instead of decoding it again. Separate processes (compose,
//! production) are unaffected; decoded values are immutable, so sharing them is safe.
//!
//! ```text
//!   watcher A: kv ─► memo miss ─► decode ─► Arc<K> ──► A's cache    (the memo keeps a Weak)
//!   watcher B: kv ─► memo hit (Weak alive) ─────────► same Arc<K> ──► B's cache
//! ```

use std::any::{Any, TypeId};
use std::collections::HashMap;
use std::hash::{DefaultHasher, Hash, Hasher};
use std::sync::{Arc, LazyLock, Mutex, PoisonError, Weak};

use flotilla_store::KeyValue;

/// Entries are swept of dead values after this many inserts.
const SWEEP_EVERY: usize = 16_384;

struct Entry {
    types: (TypeId, TypeId),
    key: String,
    mod_revision: i64,
    create_revision: i64,
    value_digest: u64,
    value: Weak<dyn Any + Send + Sync>,
}

#[derive(Default)]
struct Memo {
    entries: HashMap<u64, Entry>,
    inserts: usize,
}

static MEMO: LazyLock<Mutex<Memo>> = LazyLock::new(Mutex::default);

fn digest(bytes: &[u8]) -> u64 {
    let mut h = DefaultHasher::new();
    bytes.hash(&mut h);
    h.finish()
}

/// `decode(kv)`, or the value another watcher of this process already decoded from the same
/// version of the same key with the same decoder.
pub(crate) fn decode<K, E, D>(kv: &KeyValue, decode: &D) -> Result<Arc<K>, E>
where
    K: Send + Sync + 'static,
    D: Fn(&KeyValue) -> Result<K, E> + 'static,
{
    let types = (TypeId::of::<K>(), TypeId::of::<D>());
    let value_digest = digest(&kv.value);
    let id = {
        let mut h = DefaultHasher::new();
        (
            types,
            &kv.key,
            kv.mod_revision,
            kv.create_revision,
            value_digest,
        )
            .hash(&mut h);
        h.finish()
    };
    let same = |e: &Entry| {
        e.types == types
            && e.mod_revision == kv.mod_revision
            && e.create_revision == kv.create_revision
            && e.value_digest == value_digest
            && e.key == kv.key
    };
    {
        let memo = MEMO.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(e) = memo.entries.get(&id).filter(|e| same(e))
            && let Some(shared) = e.value.upgrade()
            && let Ok(value) = shared.downcast::<K>()
        {
            return Ok(value);
        }
    }
    let value = Arc::new(decode(kv)?);
    let erased: Arc<dyn Any + Send + Sync> = value.clone();
    let mut memo = MEMO.lock().unwrap_or_else(PoisonError::into_inner);
    memo.entries.insert(
        id,
        Entry {
            types,
            key: kv.key.clone(),
            mod_revision: kv.mod_revision,
            create_revision: kv.create_revision,
            value_digest,
            value: Arc::downgrade(&erased),
        },
    );
    memo.inserts += 1;
    if memo.inserts >= SWEEP_EVERY {
        memo.inserts = 0;
        memo.entries.retain(|_, e| e.value.strong_count() > 0);
    }
    Ok(value)
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Bytes;

    fn kv(key: &str, value: &'static [u8], rev: i64) -> KeyValue {
        KeyValue {
            key: key.to_owned(),
            value: Bytes::from_static(value),
            create_revision: 1,
            mod_revision: rev,
            version: 1,
            lease: None,
        }
    }

    fn as_text(kv: &KeyValue) -> Result<String, std::str::Utf8Error> {
        std::str::from_utf8(&kv.value).map(str::to_owned)
    }

    fn as_len(kv: &KeyValue) -> Result<String, std::convert::Infallible> {
        Ok(kv.value.len().to_string())
    }

    #[test]
    fn the_same_version_is_decoded_once_while_someone_holds_it() {
        let a = decode(&kv("shared/a", b"one", 7), &as_text).unwrap();
        let b = decode(&kv("shared/a", b"one", 7), &as_text).unwrap();
        assert!(
            Arc::ptr_eq(&a, &b),
            "the second watcher shares the first's value"
        );
        assert_eq!(*b, "one");
    }

    #[test]
    fn other_versions_keys_bytes_and_decoders_are_not_shared() {
        let base = decode(&kv("shared/b", b"one", 7), &as_text).unwrap();
        let newer = decode(&kv("shared/b", b"two", 8), &as_text).unwrap();
        let other_key = decode(&kv("shared/c", b"one", 7), &as_text).unwrap();
        // same key and revision, other bytes (another store in the same process)
        let other_bytes = decode(&kv("shared/b", b"uno", 7), &as_text).unwrap();
        let other_decoder = decode(&kv("shared/b", b"one", 7), &as_len).unwrap();
        assert!(!Arc::ptr_eq(&base, &newer));
        assert!(!Arc::ptr_eq(&base, &other_key));
        assert!(!Arc::ptr_eq(&base, &other_bytes));
        assert_eq!(*other_bytes, "uno");
        assert_eq!(*other_decoder, "3", "another decoder decodes for itself");
    }

    #[test]
    fn a_dropped_value_is_decoded_again() {
        let first = decode(&kv("shared/d", b"one", 3), &as_text).unwrap();
        let weak = Arc::downgrade(&first);
        drop(first);
        assert!(weak.upgrade().is_none());
        let again = decode(&kv("shared/d", b"one", 3), &as_text).unwrap();
        assert_eq!(*again, "one");
    }

    #[test]
    fn decode_errors_are_returned_and_not_remembered() {
        assert!(decode(&kv("shared/e", b"\xff", 1), &as_text).is_err());
        assert!(decode(&kv("shared/e", b"\xff", 1), &as_text).is_err());
    }
}
