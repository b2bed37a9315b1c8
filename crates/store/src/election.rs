//! Leader election built only on [`Store`] primitives, so that it behaves the same on etcd
//! and on `MemStore` (the recipe of etcd's `concurrency.Election`).
//!
//! ```text
//!   <prefix>/<lease-hex>   one key per candidate, put with create_revision == 0 and its lease
//!        │
//!   leader = the candidate key with the lowest create_revision
//!        │
//!   a candidate waits (watch) until every key created before its own is gone
//!        │
//!   Leadership { key, fencing_revision = create_revision of our key }
//!        │
//!   every write of the leader carries  create_revision(key) == fencing_revision
//!   → once the key is gone (resign, lease expiry) or re-created, the write fails
//! ```

use std::collections::BTreeMap;
use std::sync::Arc;

use bytes::Bytes;

use crate::Store;
use crate::error::{Result, StoreError};
use crate::types::{
    Compare, CompareOp, Event, KeyValue, LeaseId, Op, Revision, Txn, TxnResponse, WatchEvent,
};
use crate::watch::WatchStream;

/// One election: the candidates under `<prefix>/`.
#[derive(Clone, Debug)]
pub struct Election {
    store: Arc<dyn Store>,
    prefix: String,
}

/// Proof of leadership: the election key and its create revision, the fencing token.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Leadership {
    /// The candidate key, `<prefix>/<lease-hex>`.
    pub key: String,
    /// The create revision of `key`. Guard every write with [`Leadership::fence`].
    pub fencing_revision: Revision,
    /// The lease the key is attached to; when it ends, so does the leadership.
    pub lease: LeaseId,
}

// === impl Leadership ===

impl Leadership {
    /// The compare that holds only while this leadership does.
    pub fn fencing_compare(&self) -> Compare {
        Compare::create_revision(self.key.clone(), CompareOp::Equal, self.fencing_revision)
    }

    /// Adds the fencing compare to `txn`, so that a deposed leader's write fails instead of
    /// overwriting its successor's.
    pub fn fence(&self, txn: Txn) -> Txn {
        txn.when(self.fencing_compare())
    }
}

// === impl Election ===

impl Election {
    /// The election whose candidates live under `<prefix>/` (e.g. `leases/scheduler`).
    pub fn new(store: Arc<dyn Store>, prefix: impl Into<String>) -> Self {
        let mut prefix = prefix.into();
        while prefix.ends_with('/') {
            prefix.pop();
        }
        Self { store, prefix }
    }

    fn dir(&self) -> String {
        format!("{}/", self.prefix)
    }

    /// The key a candidate holding `lease` uses.
    pub fn candidate_key(&self, lease: LeaseId) -> String {
        format!("{}/{:x}", self.prefix, lease.0)
    }

    /// Becomes a candidate with `value` (e.g. this replica's address) under `lease`, and
    /// waits until it leads. Campaigning again with the same lease resumes the same
    /// candidacy. Fails with [`StoreError::LeadershipLost`] if the candidate key disappears
    /// while waiting (the lease ended). Dropping the future stops waiting but leaves the
    /// candidate key: resign, or revoke the lease.
    pub async fn campaign(&self, value: Bytes, lease: LeaseId) -> Result<Leadership> {
        let key = self.candidate_key(lease);
        let create = Txn::new()
            .when(Compare::absent(key.clone()))
            .and_then(Op::put_with_lease(key.clone(), value.clone(), lease));
        let fencing_revision = match self.store.txn(create).await? {
            TxnResponse::Committed { revision, .. } => revision,
            TxnResponse::Failed { mut current, .. } => {
                let existing = current
                    .pop()
                    .flatten()
                    .ok_or_else(|| StoreError::LeadershipLost { key: key.clone() })?;
                if existing.value != value {
                    let update = Txn::new()
                        .when(Compare::create_revision(
                            key.clone(),
                            CompareOp::Equal,
                            existing.create_revision,
                        ))
                        .and_then(Op::put_with_lease(key.clone(), value, lease));
                    if !self.store.txn(update).await?.is_committed() {
                        return Err(StoreError::LeadershipLost { key });
                    }
                }
                existing.create_revision
            }
        };
        loop {
            let (candidates, rev) = self.store.list(&self.dir(), 0).await?;
            let ours = candidates.iter().find(|kv| kv.key == key);
            if ours.is_none_or(|kv| kv.create_revision != fencing_revision) {
                return Err(StoreError::LeadershipLost { key });
            }
            let Some(pred) = candidates
                .iter()
                .filter(|kv| kv.create_revision < fencing_revision)
                .max_by_key(|kv| kv.create_revision)
            else {
                tracing::info!(key, fencing_revision, "elected leader");
                return Ok(Leadership {
                    key,
                    fencing_revision,
                    lease,
                });
            };
            self.wait_for_delete(&[pred.key.as_str(), key.as_str()], rev + 1)
                .await?;
        }
    }

    /// Waits until one of `keys` is deleted (or the watch has to be re-established).
    async fn wait_for_delete(&self, keys: &[&str], from: Revision) -> Result<()> {
        let mut watch = self.store.watch(&self.dir(), Some(from)).await?;
        loop {
            match watch.next().await {
                None | Some(Err(StoreError::Compacted { .. })) => return Ok(()),
                Some(Err(e)) => return Err(e),
                Some(Ok(WatchEvent::Batch(b))) => {
                    if b.events.iter().any(
                        |e| matches!(e, Event::Delete { key, .. } if keys.contains(&key.as_str())),
                    ) {
                        return Ok(());
                    }
                }
                Some(Ok(WatchEvent::Progress { .. })) => {}
            }
        }
    }

    /// The current leader's key-value, if anyone leads.
    pub async fn leader(&self) -> Result<Option<KeyValue>> {
        let (candidates, _) = self.store.list(&self.dir(), 0).await?;
        Ok(candidates.into_iter().min_by_key(|kv| kv.create_revision))
    }

    /// Gives up the leadership (or candidacy): deletes the key if it is still ours. Returns
    /// whether it was.
    pub async fn resign(&self, leadership: &Leadership) -> Result<bool> {
        let txn = leadership
            .fence(Txn::new())
            .and_then(Op::delete(leadership.key.clone()));
        Ok(self.store.txn(txn).await?.is_committed())
    }

    /// Follows the leader: see [`LeaderObserver::changed`].
    pub async fn observe(&self) -> Result<LeaderObserver> {
        let mut observer = LeaderObserver {
            store: self.store.clone(),
            dir: self.dir(),
            candidates: BTreeMap::new(),
            watch: None,
            leader: None,
        };
        observer.relist().await?;
        Ok(observer)
    }
}

/// Follows who leads an [`Election`], from a list and a watch of its candidates.
#[derive(Debug)]
pub struct LeaderObserver {
    store: Arc<dyn Store>,
    dir: String,
    /// Candidates by create revision.
    candidates: BTreeMap<Revision, KeyValue>,
    watch: Option<WatchStream>,
    leader: Option<KeyValue>,
}

impl LeaderObserver {
    async fn relist(&mut self) -> Result<()> {
        let (kvs, rev) = self.store.list(&self.dir, 0).await?;
        self.candidates = kvs.into_iter().map(|kv| (kv.create_revision, kv)).collect();
        self.watch = Some(self.store.watch(&self.dir, Some(rev + 1)).await?);
        self.leader = self.candidates.values().next().cloned();
        Ok(())
    }

    /// The leader as last seen.
    pub fn leader(&self) -> Option<&KeyValue> {
        self.leader.as_ref()
    }

    /// Waits until the leader (its key or value) changes and returns the new one (`None`:
    /// nobody leads right now).
    pub async fn changed(&mut self) -> Result<Option<KeyValue>> {
        loop {
            let item = match self.watch.as_mut() {
                Some(w) => w.next().await,
                None => None,
            };
            match item {
                Some(Ok(WatchEvent::Batch(b))) => {
                    for ev in b.events {
                        match ev {
                            Event::Put(kv) => {
                                self.candidates.insert(kv.create_revision, kv);
                            }
                            Event::Delete { key, .. } => {
                                self.candidates.retain(|_, kv| kv.key != key)
                            }
                        }
                    }
                }
                Some(Ok(WatchEvent::Progress { .. })) => continue,
                None | Some(Err(StoreError::Compacted { .. })) => self.relist().await?,
                Some(Err(e)) => return Err(e),
            }
            let now = self.candidates.values().next().cloned();
            if now != self.leader {
                self.leader = now.clone();
                return Ok(now);
            }
        }
    }
}
