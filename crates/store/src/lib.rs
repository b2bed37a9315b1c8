//! `flotilla-store`: the one door to Flotilla's state.
//!
//! Every service reads, writes and watches its objects through the byte-level [`Store`]
//! trait, used as `Arc<dyn Store>`. Two backends implement it with the same semantics, which
//! one conformance suite checks on both:
//!
//! ```text
//!                 services / runtime (reflectors, controllers, election)
//!                                   │ Arc<dyn Store>
//!        ┌──────────────────────────┼───────────────────────────┐
//!        │                          │                           │
//!   Prefixed (chroot)          EtcdStore                     MemStore
//!   any Store under a     etcd-client 0.21 ──gRPC──► etcd   BTreeMap MVCC + history
//!   key prefix            (namespace "/flotilla/")          window, broadcast watch
//!                                                           fan-out, leases on a Clock
//!
//!   get / range(prefix, page, at revision) / put / delete / compact
//!   txn(compares → ops, ≤128; failure → failed indices + current values)
//!   watch(prefix, from revision) → WatchBatch per revision | Progress | Err(Compacted)
//!   lease_grant / lease_keep_alive / lease_revoke  (keys vanish with their lease)
//!
//!   election::Election  — built only on the trait: campaign → Leadership{key, fencing rev}
//!   lease::LeaseKeeper  — background keep-alive that reports loss
//! ```
//!
//! Semantics follow etcd v3: a fresh store is at revision 1, every write transaction gets
//! the next revision, keys carry create/mod revisions and a version, compares on an absent
//! key see zeros, and a watch replays history from a revision and then follows live
//! changes. Object `resource_version`s are mod revisions; writes are guarded transactions.
//!
//! Features: `test-util` adds [`conformance`] (the shared suite) and [`testing`] (a real etcd
//! for tests: `FLOTILLA_ETCD_ENDPOINTS`, a local Docker image, or the `etcd` binary) and
//! implies `bench`, which adds [`mod@bench`] (the store benchmark behind `flotilla bench store`).

#![forbid(unsafe_code)]

pub mod clock;
pub mod election;
pub mod error;
pub mod etcd;
pub mod key;
pub mod lease;
pub mod mem;
pub mod prefixed;
pub mod typed;
pub mod types;
pub mod watch;
pub mod wrapper;

#[cfg(feature = "bench")]
pub mod bench;
#[cfg(feature = "test-util")]
pub mod conformance;
#[cfg(any(test, feature = "test-util"))]
pub mod testing;

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use bytes::Bytes;

pub use crate::clock::{Clock, ManualClock, TokioClock};
pub use crate::election::{Election, LeaderObserver, Leadership};
pub use crate::error::{Result, StoreError};
pub use crate::etcd::{EtcdConfig, EtcdStore, EtcdTls};
pub use crate::key::ObjectKey;
pub use crate::lease::LeaseKeeper;
pub use crate::mem::{MemStore, MemStoreOptions};
pub use crate::prefixed::Prefixed;
pub use crate::types::{
    Compare, CompareOp, CompareTarget, DeleteResponse, Event, KeyValue, Lease, LeaseId,
    MAX_TXN_OPS, Op, OpResult, RangeRequest, RangeResponse, Revision, Txn, TxnResponse, WatchBatch,
    WatchEvent,
};
pub use crate::watch::WatchStream;
pub use crate::wrapper::Wrapper;

/// The shared handle every service holds.
pub type StoreRef = Arc<dyn Store>;

/// A transactional, watchable key-value store with etcd v3 semantics. Keys are UTF-8
/// strings relative to the store's namespace; values are bytes.
#[async_trait]
pub trait Store: Send + Sync + 'static {
    /// Reads one key at the current revision.
    async fn get(&self, key: &str) -> Result<Option<KeyValue>>;

    /// Reads one page of keys under a prefix, optionally at a past revision.
    async fn range(&self, req: RangeRequest) -> Result<RangeResponse>;

    /// Writes a key (attached to `lease`, if given) and returns the new revision.
    async fn put(&self, key: &str, value: Bytes, lease: Option<LeaseId>) -> Result<Revision>;

    /// Deletes a key; deleting an absent key is not an error (`prev` is `None`).
    async fn delete(&self, key: &str) -> Result<DeleteResponse>;

    /// Applies a guarded transaction atomically. Rejects more than [`MAX_TXN_OPS`] operations
    /// with [`StoreError::TooManyOps`] before sending anything.
    async fn txn(&self, txn: Txn) -> Result<TxnResponse>;

    /// Discards history older than `revision`: reads and watches below it then fail with
    /// [`StoreError::Compacted`]. On etcd this is global to the cluster.
    async fn compact(&self, revision: Revision) -> Result<()>;

    /// The store's current revision.
    async fn current_revision(&self) -> Result<Revision>;

    /// Watches every key under `prefix`, starting at `from_revision` (inclusive; replaying
    /// history) or, with `None`, at the next change.
    async fn watch(&self, prefix: &str, from_revision: Option<Revision>) -> Result<WatchStream>;

    /// Grants a lease of (at least) `ttl`.
    async fn lease_grant(&self, ttl: Duration) -> Result<Lease>;

    /// Refreshes a lease once and returns its renewed time-to-live. Fails with
    /// [`StoreError::LeaseNotFound`] if it already expired. See [`LeaseKeeper`] for a task
    /// that does this periodically.
    async fn lease_keep_alive(&self, lease: LeaseId) -> Result<Duration>;

    /// Revokes a lease, deleting every key attached to it (in one revision).
    async fn lease_revoke(&self, lease: LeaseId) -> Result<()>;

    /// Creates `key` only if it is absent; [`StoreError::AlreadyExists`] otherwise.
    async fn create(&self, key: &str, value: Bytes, lease: Option<LeaseId>) -> Result<Revision> {
        let op = Op::Put {
            key: key.to_owned(),
            value,
            lease,
        };
        match self
            .txn(Txn::new().when(Compare::absent(key)).and_then(op))
            .await?
        {
            TxnResponse::Committed { revision, .. } => Ok(revision),
            TxnResponse::Failed { .. } => Err(StoreError::AlreadyExists {
                key: key.to_owned(),
            }),
        }
    }

    /// Writes `key` only if its mod revision is still `expected` (0 = absent):
    /// [`StoreError::Conflict`] otherwise, carrying the revision found.
    async fn compare_and_put(
        &self,
        key: &str,
        expected: Revision,
        value: Bytes,
    ) -> Result<Revision> {
        let txn = Txn::new()
            .when(Compare::mod_revision(key, CompareOp::Equal, expected))
            .and_then(Op::put(key, value));
        match self.txn(txn).await? {
            TxnResponse::Committed { revision, .. } => Ok(revision),
            TxnResponse::Failed { current, .. } => Err(StoreError::Conflict {
                key: key.to_owned(),
                expected_revision: expected,
                actual_revision: current
                    .first()
                    .and_then(|kv| kv.as_ref())
                    .map_or(0, |kv| kv.mod_revision),
            }),
        }
    }

    /// Reads every key under `prefix` as one consistent snapshot, paging with `page_size`
    /// keys per request (0 = one request). Returns the keys and the snapshot's revision.
    async fn list(&self, prefix: &str, page_size: usize) -> Result<(Vec<KeyValue>, Revision)> {
        let mut req = RangeRequest::prefix(prefix).with_limit(page_size);
        let mut out = Vec::new();
        loop {
            let mut resp = self.range(req.clone()).await?;
            let next = req.next_page(&resp);
            let revision = resp.revision;
            out.append(&mut resp.kvs);
            match next {
                Some(n) => req = n,
                None => return Ok((out, revision)),
            }
        }
    }
}

impl std::fmt::Debug for dyn Store {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("dyn Store")
    }
}
