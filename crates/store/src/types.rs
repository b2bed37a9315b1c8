//! Plain data types shared by every backend: keys and values, ranges, transactions, watch
//! events and leases. They mirror etcd's v3 API closely so that `MemStore` and `EtcdStore`
//! behave the same.

use std::fmt;
use std::time::Duration;

use bytes::Bytes;

use crate::error::{Result, StoreError};

/// A store revision: etcd's global, strictly increasing modification counter. A fresh store
/// is at revision 1 and the first write gets revision 2 (as in etcd).
pub type Revision = i64;

/// etcd's default `--max-txn-ops`: the most operations (and, separately, compares) one
/// transaction may carry. Larger transactions are rejected with
/// [`StoreError::TooManyOps`] before they are sent.
pub const MAX_TXN_OPS: usize = 128;

/// The identifier of a lease. Keys put with a lease are deleted when it expires or is revoked.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct LeaseId(pub i64);

impl fmt::Display for LeaseId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:x}", self.0)
    }
}

/// A granted lease: its id and the time-to-live the store actually granted (etcd may round
/// the requested TTL up to its minimum).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Lease {
    /// The lease's id.
    pub id: LeaseId,
    /// The granted time-to-live.
    pub ttl: Duration,
}

/// One key with its value and MVCC metadata, as stored.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KeyValue {
    /// The key, relative to the store's namespace.
    pub key: String,
    /// The value bytes.
    pub value: Bytes,
    /// The revision at which the key was (last) created. It is the fencing token of an
    /// election key and the "resource version" of nothing: use `mod_revision` for that.
    pub create_revision: Revision,
    /// The revision of the last modification: an object's `resource_version`.
    pub mod_revision: Revision,
    /// How many times the key was written since it was created (1 after creation).
    pub version: i64,
    /// The lease the key is attached to, if any.
    pub lease: Option<LeaseId>,
}

/// A paginated, optionally point-in-time read of all keys under a prefix.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RangeRequest {
    /// Return keys starting with this prefix (the empty prefix means every key).
    pub prefix: String,
    /// Return only keys strictly greater than this one: the last key of the previous page.
    pub start_after: Option<String>,
    /// The most keys to return; 0 means no limit (etcd's convention).
    pub limit: usize,
    /// Read at this past revision instead of the current one. Fails with
    /// [`StoreError::Compacted`] if it is older than the compaction point.
    pub revision: Option<Revision>,
}

impl RangeRequest {
    /// All keys under `prefix`, at the current revision, without limit.
    pub fn prefix(prefix: impl Into<String>) -> Self {
        Self {
            prefix: prefix.into(),
            ..Self::default()
        }
    }

    /// Sets the page size.
    pub fn with_limit(mut self, limit: usize) -> Self {
        self.limit = limit;
        self
    }

    /// Reads at a past revision.
    pub fn at_revision(mut self, revision: Revision) -> Self {
        self.revision = Some(revision);
        self
    }

    /// The request for the page after `resp`, pinned to the revision `resp` was read at so
    /// that all pages form one consistent snapshot. `None` when `resp` was the last page.
    pub fn next_page(&self, resp: &RangeResponse) -> Option<Self> {
        if !resp.more {
            return None;
        }
        let last = resp.kvs.last()?;
        Some(Self {
            prefix: self.prefix.clone(),
            start_after: Some(last.key.clone()),
            limit: self.limit,
            revision: Some(resp.revision),
        })
    }
}

/// One page of a [`RangeRequest`].
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RangeResponse {
    /// The keys, in ascending key order.
    pub kvs: Vec<KeyValue>,
    /// Whether more keys remain after the last one returned.
    pub more: bool,
    /// The revision the page was read at: the requested revision, or the store's current
    /// revision. Watch from `revision + 1` to follow the range without a gap.
    pub revision: Revision,
}

/// The result of a single-key delete.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DeleteResponse {
    /// The store revision after the delete (unchanged if nothing was deleted).
    pub revision: Revision,
    /// The deleted key-value, or `None` if the key did not exist.
    pub prev: Option<KeyValue>,
}

/// How a [`Compare`] relates the key's current field to the given target.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CompareOp {
    /// `current == target`
    Equal,
    /// `current != target`
    NotEqual,
    /// `current < target`
    Less,
    /// `current > target`
    Greater,
}

/// Which field of a key a [`Compare`] looks at, with the target value.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum CompareTarget {
    /// The key's version (0 if absent).
    Version(i64),
    /// The key's create revision (0 if absent): `CreateRevision(0)` with `Equal` is
    /// "create if absent".
    CreateRevision(Revision),
    /// The key's mod revision (0 if absent): optimistic concurrency on `resource_version`.
    ModRevision(Revision),
    /// The key's value. As in etcd, a compare on the value of an absent key is false.
    Value(Bytes),
}

/// A guard of a [`Txn`]: the transaction commits only if every compare holds.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Compare {
    /// The key to look at.
    pub key: String,
    /// The comparison.
    pub op: CompareOp,
    /// The field and its target value.
    pub target: CompareTarget,
}

impl Compare {
    /// Compares the key's mod revision.
    pub fn mod_revision(key: impl Into<String>, op: CompareOp, revision: Revision) -> Self {
        Self {
            key: key.into(),
            op,
            target: CompareTarget::ModRevision(revision),
        }
    }

    /// Compares the key's create revision.
    pub fn create_revision(key: impl Into<String>, op: CompareOp, revision: Revision) -> Self {
        Self {
            key: key.into(),
            op,
            target: CompareTarget::CreateRevision(revision),
        }
    }

    /// Compares the key's version.
    pub fn version(key: impl Into<String>, op: CompareOp, version: i64) -> Self {
        Self {
            key: key.into(),
            op,
            target: CompareTarget::Version(version),
        }
    }

    /// Compares the key's value.
    pub fn value(key: impl Into<String>, op: CompareOp, value: impl Into<Bytes>) -> Self {
        Self {
            key: key.into(),
            op,
            target: CompareTarget::Value(value.into()),
        }
    }

    /// "The key does not exist": `create_revision == 0`.
    pub fn absent(key: impl Into<String>) -> Self {
        Self::create_revision(key, CompareOp::Equal, 0)
    }

    /// The indexes of the `compares` that fail against `current` (each compare's key's state,
    /// in the same order), as a failed transaction reports them.
    pub fn failing(compares: &[Compare], current: &[Option<KeyValue>]) -> Vec<usize> {
        compares
            .iter()
            .zip(current)
            .enumerate()
            .filter(|(_, (c, kv))| !c.evaluate(kv.as_ref()))
            .map(|(i, _)| i)
            .collect()
    }

    /// Evaluates the compare against the key's current state (`None` = absent), with etcd's
    /// rules: revision and version fields of an absent key are 0, and a value compare on an
    /// absent key is false whatever the operator.
    pub fn evaluate(&self, current: Option<&KeyValue>) -> bool {
        use std::cmp::Ordering;
        let ord: Ordering = match (&self.target, current) {
            (CompareTarget::Value(_), None) => return false,
            (CompareTarget::Value(v), Some(kv)) => kv.value.as_ref().cmp(v.as_ref()),
            (CompareTarget::Version(v), kv) => kv.map_or(0, |kv| kv.version).cmp(v),
            (CompareTarget::CreateRevision(r), kv) => kv.map_or(0, |kv| kv.create_revision).cmp(r),
            (CompareTarget::ModRevision(r), kv) => kv.map_or(0, |kv| kv.mod_revision).cmp(r),
        };
        match self.op {
            CompareOp::Equal => ord == Ordering::Equal,
            CompareOp::NotEqual => ord != Ordering::Equal,
            CompareOp::Less => ord == Ordering::Less,
            CompareOp::Greater => ord == Ordering::Greater,
        }
    }
}

/// One operation of a [`Txn`]'s success branch.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Op {
    /// Writes a key, optionally attached to a lease.
    Put {
        /// The key.
        key: String,
        /// The new value.
        value: Bytes,
        /// The lease to attach; `None` detaches any previous lease (as etcd does).
        lease: Option<LeaseId>,
    },
    /// Deletes a key (a no-op if absent).
    Delete {
        /// The key.
        key: String,
    },
    /// Reads a key, seeing the writes of earlier operations of the same transaction.
    Get {
        /// The key.
        key: String,
    },
}

impl Op {
    /// A put without a lease.
    pub fn put(key: impl Into<String>, value: impl Into<Bytes>) -> Self {
        Self::Put {
            key: key.into(),
            value: value.into(),
            lease: None,
        }
    }

    /// A put attached to `lease`.
    pub fn put_with_lease(key: impl Into<String>, value: impl Into<Bytes>, lease: LeaseId) -> Self {
        Self::Put {
            key: key.into(),
            value: value.into(),
            lease: Some(lease),
        }
    }

    /// A delete.
    pub fn delete(key: impl Into<String>) -> Self {
        Self::Delete { key: key.into() }
    }

    /// A read.
    pub fn get(key: impl Into<String>) -> Self {
        Self::Get { key: key.into() }
    }

    /// The key the operation touches.
    pub fn key(&self) -> &str {
        match self {
            Self::Put { key, .. } | Self::Delete { key } | Self::Get { key } => key,
        }
    }
}

/// An atomic, guarded multi-key write: if every compare holds, all of `success` is applied at
/// one revision; otherwise nothing is, and the response says which compares failed and what
/// the compared keys hold now.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Txn {
    /// The guards. Each batched CAS keeps its own compare.
    pub compares: Vec<Compare>,
    /// The operations applied when every compare holds; at most [`MAX_TXN_OPS`].
    pub success: Vec<Op>,
}

impl Txn {
    /// An empty transaction.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds a guard.
    pub fn when(mut self, compare: Compare) -> Self {
        self.compares.push(compare);
        self
    }

    /// Adds an operation.
    pub fn and_then(mut self, op: Op) -> Self {
        self.success.push(op);
        self
    }

    /// Checks the limits every backend enforces: at most [`MAX_TXN_OPS`] compares and
    /// operations, non-empty keys, and no key written twice (etcd rejects duplicate keys).
    pub fn validate(&self) -> Result<()> {
        let ops = self.compares.len().max(self.success.len());
        if ops > MAX_TXN_OPS {
            return Err(StoreError::TooManyOps {
                ops,
                max: MAX_TXN_OPS,
            });
        }
        let mut written = std::collections::HashSet::with_capacity(self.success.len());
        for op in &self.success {
            validate_key(op.key())?;
            if !matches!(op, Op::Get { .. }) && !written.insert(op.key()) {
                return Err(StoreError::InvalidArgument(format!(
                    "duplicate key {:?} given in transaction",
                    op.key()
                )));
            }
        }
        for c in &self.compares {
            validate_key(&c.key)?;
        }
        Ok(())
    }
}

/// The result of one operation of a committed [`Txn`], in the same order as `success`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum OpResult {
    /// The put was applied (at the transaction's revision).
    Put,
    /// The delete was applied; `deleted` says whether the key existed.
    Delete {
        /// Whether a key was removed.
        deleted: bool,
    },
    /// The value read, `None` if absent.
    Get(Option<KeyValue>),
}

/// The outcome of a [`Txn`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum TxnResponse {
    /// Every compare held and every operation was applied.
    Committed {
        /// The store revision after the transaction (the revision of its writes, if any).
        revision: Revision,
        /// One result per operation of `success`.
        results: Vec<OpResult>,
    },
    /// At least one compare failed; nothing was written.
    Failed {
        /// The store revision the compares were evaluated at.
        revision: Revision,
        /// Indices (into `compares`) of the compares that failed.
        failed: Vec<usize>,
        /// The current value of each compared key, aligned with `compares`, so that the
        /// caller can re-read only the losers without another round trip.
        current: Vec<Option<KeyValue>>,
    },
}

impl TxnResponse {
    /// Whether the transaction committed.
    pub fn is_committed(&self) -> bool {
        matches!(self, Self::Committed { .. })
    }

    /// The revision in the response.
    pub fn revision(&self) -> Revision {
        match self {
            Self::Committed { revision, .. } | Self::Failed { revision, .. } => *revision,
        }
    }
}

/// One change seen by a watch.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Event {
    /// The key was created or updated; the new state.
    Put(KeyValue),
    /// The key was deleted (explicitly, or because its lease ended).
    Delete {
        /// The deleted key.
        key: String,
        /// The last value before the delete: always from `MemStore`; from etcd only with
        /// `EtcdConfig::watch_prev_kv` (and while etcd still has it).
        prev: Option<KeyValue>,
        /// The revision of the delete.
        mod_revision: Revision,
    },
}

impl Event {
    /// The key the event is about.
    pub fn key(&self) -> &str {
        match self {
            Self::Put(kv) => &kv.key,
            Self::Delete { key, .. } => key,
        }
    }

    /// The revision of the change.
    pub fn mod_revision(&self) -> Revision {
        match self {
            Self::Put(kv) => kv.mod_revision,
            Self::Delete { mod_revision, .. } => *mod_revision,
        }
    }
}

/// All the changes under the watched prefix made at one revision (one put, or one
/// transaction or lease expiry touching several keys).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WatchBatch {
    /// The revision of every event in the batch.
    pub revision: Revision,
    /// The events, in the order the backend applied them.
    pub events: Vec<Event>,
}

/// What a watch stream yields. Revisions never go backwards across items.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum WatchEvent {
    /// Changes at one revision.
    Batch(WatchBatch),
    /// Every change up to and including `revision` has been delivered, even if nothing under
    /// the prefix changed: a reflector may treat its cache as fresh up to `revision`.
    Progress {
        /// The revision the watch has caught up to.
        revision: Revision,
    },
}

impl WatchEvent {
    /// The revision of the item.
    pub fn revision(&self) -> Revision {
        match self {
            Self::Batch(b) => b.revision,
            Self::Progress { revision } => *revision,
        }
    }
}

/// Rejects keys that no backend accepts (etcd refuses the empty key).
pub fn validate_key(key: &str) -> Result<()> {
    if key.is_empty() {
        return Err(StoreError::InvalidArgument("empty key".into()));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kv(rev: i64) -> KeyValue {
        KeyValue {
            key: "a".into(),
            value: Bytes::from_static(b"v"),
            create_revision: rev,
            mod_revision: rev,
            version: 1,
            lease: None,
        }
    }

    #[test]
    fn compare_on_absent_key_follows_etcd() {
        assert!(Compare::absent("a").evaluate(None));
        assert!(!Compare::absent("a").evaluate(Some(&kv(3))));
        assert!(!Compare::value("a", CompareOp::NotEqual, "x").evaluate(None));
        assert!(Compare::mod_revision("a", CompareOp::Less, 4).evaluate(Some(&kv(3))));
        assert!(Compare::mod_revision("a", CompareOp::Greater, 2).evaluate(Some(&kv(3))));
        assert!(Compare::value("a", CompareOp::Greater, "u").evaluate(Some(&kv(3))));
    }

    #[test]
    fn validate_rejects_oversized_and_duplicate() {
        let big = Txn {
            compares: vec![],
            success: (0..=MAX_TXN_OPS)
                .map(|i| Op::put(format!("k{i}"), "v"))
                .collect(),
        };
        assert!(matches!(
            big.validate(),
            Err(StoreError::TooManyOps { ops: 129, max: 128 })
        ));
        let dup = Txn::new()
            .and_then(Op::put("a", "1"))
            .and_then(Op::delete("a"));
        assert!(matches!(
            dup.validate(),
            Err(StoreError::InvalidArgument(_))
        ));
        let reads = Txn::new()
            .and_then(Op::get("a"))
            .and_then(Op::put("a", "1"));
        assert!(reads.validate().is_ok());
    }

    #[test]
    fn next_page_pins_revision() {
        let req = RangeRequest::prefix("p/").with_limit(1);
        let resp = RangeResponse {
            kvs: vec![kv(3)],
            more: true,
            revision: 7,
        };
        let next = req.next_page(&resp).unwrap();
        assert_eq!(next.start_after.as_deref(), Some("a"));
        assert_eq!(next.revision, Some(7));
        let last = RangeResponse {
            more: false,
            ..resp
        };
        assert!(req.next_page(&last).is_none());
    }
}
