//! `Wrapper`: a [`Store`] in front of another that changes only some calls (a key prefix, a
//! fence, a test's hook or partition) and hands every other call to the store behind it
//! unchanged.

use std::time::Duration;

use async_trait::async_trait;
use bytes::Bytes;

use crate::Store;
use crate::error::Result;
use crate::types::{
    DeleteResponse, KeyValue, Lease, LeaseId, RangeRequest, RangeResponse, Revision, Txn,
    TxnResponse,
};
use crate::watch::WatchStream;

/// A store in front of [`Wrapper::inner`]: every method defaults to the same call on it, and
/// every `Wrapper` is a [`Store`]. Override what the wrapper changes.
#[async_trait]
pub trait Wrapper: Send + Sync + 'static {
    /// The store behind this one.
    fn inner(&self) -> &dyn Store;

    /// What every forwarded call goes through first (default: nothing): an error fails the
    /// call before it reaches [`Wrapper::inner`]. A method that is overridden calls it itself
    /// if it should.
    async fn admit(&self) -> Result<()> {
        Ok(())
    }

    /// [`Wrapper::inner`], once [`Wrapper::admit`] let the call through.
    async fn admitted(&self) -> Result<&dyn Store> {
        self.admit().await?;
        Ok(self.inner())
    }

    /// [`Store::get`].
    async fn get(&self, key: &str) -> Result<Option<KeyValue>> {
        self.admitted().await?.get(key).await
    }

    /// [`Store::range`].
    async fn range(&self, req: RangeRequest) -> Result<RangeResponse> {
        self.admitted().await?.range(req).await
    }

    /// [`Store::put`].
    async fn put(&self, key: &str, value: Bytes, lease: Option<LeaseId>) -> Result<Revision> {
        self.admitted().await?.put(key, value, lease).await
    }

    /// [`Store::delete`].
    async fn delete(&self, key: &str) -> Result<DeleteResponse> {
        self.admitted().await?.delete(key).await
    }

    /// [`Store::txn`].
    async fn txn(&self, txn: Txn) -> Result<TxnResponse> {
        self.admitted().await?.txn(txn).await
    }

    /// [`Store::compact`].
    async fn compact(&self, revision: Revision) -> Result<()> {
        self.admitted().await?.compact(revision).await
    }

    /// [`Store::current_revision`].
    async fn current_revision(&self) -> Result<Revision> {
        self.admitted().await?.current_revision().await
    }

    /// [`Store::watch`].
    async fn watch(&self, prefix: &str, from_revision: Option<Revision>) -> Result<WatchStream> {
        self.admitted().await?.watch(prefix, from_revision).await
    }

    /// [`Store::lease_grant`].
    async fn lease_grant(&self, ttl: Duration) -> Result<Lease> {
        self.admitted().await?.lease_grant(ttl).await
    }

    /// [`Store::lease_keep_alive`].
    async fn lease_keep_alive(&self, lease: LeaseId) -> Result<Duration> {
        self.admitted().await?.lease_keep_alive(lease).await
    }

    /// [`Store::lease_revoke`].
    async fn lease_revoke(&self, lease: LeaseId) -> Result<()> {
        self.admitted().await?.lease_revoke(lease).await
    }
}

#[async_trait]
impl<W: Wrapper> Store for W {
    async fn get(&self, key: &str) -> Result<Option<KeyValue>> {
        Wrapper::get(self, key).await
    }

    async fn range(&self, req: RangeRequest) -> Result<RangeResponse> {
        Wrapper::range(self, req).await
    }

    async fn put(&self, key: &str, value: Bytes, lease: Option<LeaseId>) -> Result<Revision> {
        Wrapper::put(self, key, value, lease).await
    }

    async fn delete(&self, key: &str) -> Result<DeleteResponse> {
        Wrapper::delete(self, key).await
    }

    async fn txn(&self, txn: Txn) -> Result<TxnResponse> {
        Wrapper::txn(self, txn).await
    }

    async fn compact(&self, revision: Revision) -> Result<()> {
        Wrapper::compact(self, revision).await
    }

    async fn current_revision(&self) -> Result<Revision> {
        Wrapper::current_revision(self).await
    }

    async fn watch(&self, prefix: &str, from_revision: Option<Revision>) -> Result<WatchStream> {
        Wrapper::watch(self, prefix, from_revision).await
    }

    async fn lease_grant(&self, ttl: Duration) -> Result<Lease> {
        Wrapper::lease_grant(self, ttl).await
    }

    async fn lease_keep_alive(&self, lease: LeaseId) -> Result<Duration> {
        Wrapper::lease_keep_alive(self, lease).await
    }

    async fn lease_revoke(&self, lease: LeaseId) -> Result<()> {
        Wrapper::lease_revoke(self, lease).await
    }
}
