//! The one error type of the store layer.

use crate::types::LeaseId;

/// A boxed error source, kept so that callers can walk the chain with `source()`.
pub type BoxError = Box<dyn std::error::Error + Send + Sync + 'static>;

/// Result alias used throughout the crate.
pub type Result<T, E = StoreError> = std::result::Result<T, E>;

/// Everything a [`Store`](crate::Store) operation can fail with.
///
/// Retryability is data on the error ([`StoreError::is_retryable`]), so that callers (and the
/// single place that maps errors to `tonic::Status` in a service) never match on strings.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum StoreError {
    /// The key (or object) does not exist.
    #[error("key not found: {key}")]
    NotFound {
        /// The key that was looked up, relative to the store's namespace.
        key: String,
    },
    /// A compare-and-swap lost: the key's revision is not the expected one. Re-read and retry.
    #[error("conflict on {key}: expected revision {expected_revision}, found {actual_revision}")]
    Conflict {
        /// The key whose compare failed.
        key: String,
        /// The revision the caller expected (0 means "expected absent").
        expected_revision: i64,
        /// The revision found in the store (0 means "absent").
        actual_revision: i64,
    },
    /// A create-if-absent found the key already present.
    #[error("key already exists: {key}")]
    AlreadyExists {
        /// The key that already exists.
        key: String,
    },
    /// The requested revision is older than the store's compaction point: re-list and watch
    /// from the new list's revision. Also ends a watch that fell behind compaction.
    #[error("revision compacted (compact revision {compact_revision})")]
    Compacted {
        /// The oldest revision still available; 0 when the server did not say (etcd's range
        /// errors carry no number).
        compact_revision: i64,
    },
    /// The requested revision is newer than the store's current revision.
    #[error("future revision {revision} (current {current})")]
    FutureRevision {
        /// The revision that was asked for.
        revision: i64,
        /// The store's current revision; 0 when the server did not say.
        current: i64,
    },
    /// A transaction had more operations (or compares) than the store accepts (etcd's
    /// `--max-txn-ops`, 128 by default). Rejected before anything is sent.
    #[error("transaction has {ops} operations, at most {max} are allowed")]
    TooManyOps {
        /// The number of operations (or compares) in the rejected transaction.
        ops: usize,
        /// The limit ([`MAX_TXN_OPS`](crate::MAX_TXN_OPS)).
        max: usize,
    },
    /// The lease does not exist (never granted, expired or revoked).
    #[error("lease {lease} not found")]
    LeaseNotFound {
        /// The missing lease.
        lease: LeaseId,
    },
    /// The caller is no longer the leader (its election key is gone or was re-created).
    #[error("leadership lost on {key}")]
    LeadershipLost {
        /// The election key this process held.
        key: String,
    },
    /// The request is malformed (empty key, duplicate key in a transaction, bad range, ...).
    #[error("invalid argument: {0}")]
    InvalidArgument(String),
    /// The store could not be reached or did not answer in time (connection refused, timeout,
    /// no leader, leader changed). Retrying the same request may succeed.
    #[error("store unavailable: {0}")]
    Unavailable(#[source] BoxError),
    /// The server refused the credentials or the caller lacks permission.
    #[error("permission denied: {0}")]
    PermissionDenied(String),
    /// A value could not be encoded or decoded (typed layers above this crate), or a key from
    /// the server was not UTF-8.
    #[error("codec error: {0}")]
    Codec(#[source] BoxError),
    /// A watch ended: the store closed it or the store was dropped. Re-establish it.
    #[error("watch closed: {0}")]
    WatchClosed(String),
    /// Anything else the backend reported. Not retried automatically.
    #[error("store error: {0}")]
    Internal(String),
}

// === impl StoreError ===

impl StoreError {
    /// Whether sending the very same request again may succeed without re-reading anything:
    /// true for [`StoreError::Unavailable`] and [`StoreError::WatchClosed`]. A
    /// [`StoreError::Conflict`] is not retryable as is: re-read, recompute, then write again.
    pub fn is_retryable(&self) -> bool {
        matches!(self, Self::Unavailable(_) | Self::WatchClosed(_))
    }

    /// Whether this is an optimistic-concurrency loss ([`StoreError::Conflict`] or
    /// [`StoreError::AlreadyExists`]): re-read and retry.
    pub fn is_conflict(&self) -> bool {
        matches!(self, Self::Conflict { .. } | Self::AlreadyExists { .. })
    }

    /// Builds [`StoreError::Unavailable`] from any error.
    pub fn unavailable(e: impl Into<BoxError>) -> Self {
        Self::Unavailable(e.into())
    }

    /// Builds [`StoreError::Codec`] from any error.
    pub fn codec(e: impl Into<BoxError>) -> Self {
        Self::Codec(e.into())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retryability_is_data() {
        assert!(StoreError::unavailable("connection refused").is_retryable());
        assert!(
            !StoreError::Conflict {
                key: "a".into(),
                expected_revision: 2,
                actual_revision: 3
            }
            .is_retryable()
        );
        assert!(
            StoreError::AlreadyExists { key: "a".into() }.is_conflict(),
            "create-if-absent losses are conflicts"
        );
        assert!(
            !StoreError::Compacted {
                compact_revision: 5
            }
            .is_retryable()
        );
    }
}
