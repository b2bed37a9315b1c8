//! `Prefixed`: any [`Store`] seen under a key prefix (a "chroot"), like GreptimeDB's
//! `chroot.rs`. Keys go in relative and come out relative; nothing outside the prefix is
//! visible. Tests use it to share one store; services use it to nest namespaces.

use std::sync::Arc;

use async_trait::async_trait;
use bytes::Bytes;
use futures::StreamExt;

use crate::Store;
use crate::error::{Result, StoreError};
use crate::types::{
    Compare, DeleteResponse, Event, KeyValue, LeaseId, Op, OpResult, RangeRequest, RangeResponse,
    Revision, Txn, TxnResponse, WatchBatch, WatchEvent,
};
use crate::watch::WatchStream;
use crate::wrapper::Wrapper;

/// A [`Store`] that prepends `prefix` to every key of `inner`.
#[derive(Clone, derive_more::Debug)]
pub struct Prefixed {
    #[debug(skip)]
    inner: Arc<dyn Store>,
    prefix: String,
}

// === impl Prefixed ===

impl Prefixed {
    /// Wraps `inner` under `prefix` (used verbatim: include a trailing `/` if you want one).
    pub fn new(inner: Arc<dyn Store>, prefix: impl Into<String>) -> Self {
        Self {
            inner,
            prefix: prefix.into(),
        }
    }

    /// The prefix.
    pub fn prefix(&self) -> &str {
        &self.prefix
    }

    fn full(&self, key: &str) -> String {
        let mut s = String::with_capacity(self.prefix.len() + key.len());
        s.push_str(&self.prefix);
        s.push_str(key);
        s
    }

    fn strip(&self, key: String) -> Result<String> {
        key.strip_prefix(&self.prefix)
            .map(str::to_owned)
            .ok_or_else(|| StoreError::Internal(format!("key {key:?} outside prefix")))
    }

    fn kv(&self, mut kv: KeyValue) -> Result<KeyValue> {
        kv.key = self.strip(kv.key)?;
        Ok(kv)
    }

    fn opt_kv(&self, kv: Option<KeyValue>) -> Result<Option<KeyValue>> {
        kv.map(|kv| self.kv(kv)).transpose()
    }

    fn event(&self, ev: Event) -> Result<Event> {
        Ok(match ev {
            Event::Put(kv) => Event::Put(self.kv(kv)?),
            Event::Delete {
                key,
                prev,
                mod_revision,
            } => Event::Delete {
                key: self.strip(key)?,
                prev: self.opt_kv(prev)?,
                mod_revision,
            },
        })
    }
}

fn validate_relative(key: &str) -> Result<()> {
    crate::types::validate_key(key)
}

#[async_trait]
impl Wrapper for Prefixed {
    fn inner(&self) -> &dyn Store {
        &*self.inner
    }

    async fn get(&self, key: &str) -> Result<Option<KeyValue>> {
        validate_relative(key)?;
        let kv = self.inner.get(&self.full(key)).await?;
        self.opt_kv(kv)
    }

    async fn range(&self, req: RangeRequest) -> Result<RangeResponse> {
        let req = RangeRequest {
            prefix: self.full(&req.prefix),
            start_after: req.start_after.map(|k| self.full(&k)),
            ..req
        };
        let resp = self.inner.range(req).await?;
        Ok(RangeResponse {
            kvs: resp
                .kvs
                .into_iter()
                .map(|kv| self.kv(kv))
                .collect::<Result<_>>()?,
            ..resp
        })
    }

    async fn put(&self, key: &str, value: Bytes, lease: Option<LeaseId>) -> Result<Revision> {
        validate_relative(key)?;
        self.inner.put(&self.full(key), value, lease).await
    }

    async fn delete(&self, key: &str) -> Result<DeleteResponse> {
        validate_relative(key)?;
        let resp = self.inner.delete(&self.full(key)).await?;
        Ok(DeleteResponse {
            revision: resp.revision,
            prev: self.opt_kv(resp.prev)?,
        })
    }

    async fn txn(&self, txn: Txn) -> Result<TxnResponse> {
        txn.validate()?;
        let txn = Txn {
            compares: txn
                .compares
                .into_iter()
                .map(|c| Compare {
                    key: self.full(&c.key),
                    ..c
                })
                .collect(),
            success: txn
                .success
                .into_iter()
                .map(|op| match op {
                    Op::Put { key, value, lease } => Op::Put {
                        key: self.full(&key),
                        value,
                        lease,
                    },
                    Op::Delete { key } => Op::Delete {
                        key: self.full(&key),
                    },
                    Op::Get { key } => Op::Get {
                        key: self.full(&key),
                    },
                })
                .collect(),
        };
        Ok(match self.inner.txn(txn).await? {
            TxnResponse::Committed { revision, results } => TxnResponse::Committed {
                revision,
                results: results
                    .into_iter()
                    .map(|r| match r {
                        OpResult::Get(kv) => self.opt_kv(kv).map(OpResult::Get),
                        other => Ok(other),
                    })
                    .collect::<Result<_>>()?,
            },
            TxnResponse::Failed {
                revision,
                failed,
                current,
            } => TxnResponse::Failed {
                revision,
                failed,
                current: current
                    .into_iter()
                    .map(|kv| self.opt_kv(kv))
                    .collect::<Result<_>>()?,
            },
        })
    }

    async fn watch(&self, prefix: &str, from_revision: Option<Revision>) -> Result<WatchStream> {
        let inner = self.inner.watch(&self.full(prefix), from_revision).await?;
        let progress = inner.progress_sender();
        let this = self.clone();
        let mapped = inner.map(move |item| {
            item.and_then(|ev| match ev {
                WatchEvent::Batch(b) => Ok(WatchEvent::Batch(WatchBatch {
                    revision: b.revision,
                    events: b
                        .events
                        .into_iter()
                        .map(|e| this.event(e))
                        .collect::<Result<_>>()?,
                })),
                progress @ WatchEvent::Progress { .. } => Ok(progress),
            })
        });
        Ok(WatchStream::from_stream(mapped, progress))
    }
}
