//! The service's one error type, and its one mapping to `tonic::Status`.

use std::sync::Arc;

use flotilla_core::validation::FieldError;
use flotilla_store::StoreError;
use tonic::Code;
use tonic_types::{ErrorDetails, StatusExt};

/// Everything the scheduler's controller and RPCs can fail with.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A request failed validation; every problem is listed with its JSON field path.
    #[error("invalid request: {}", join(.0))]
    InvalidArgument(Vec<FieldError>),
    /// The store failed (unavailable, timed out, leadership lost, ...).
    #[error("store error: {0}")]
    Store(#[source] Arc<StoreError>),
    /// The binding kept changing under the scheduler: every compare-and-swap of the bounded
    /// re-read/re-decide loop lost.
    #[error("binding {key}: still conflicting after {attempts} attempts")]
    TooManyConflicts {
        /// The binding's key.
        key: String,
        /// How many writes were tried.
        attempts: usize,
    },
}

fn join(errors: &[FieldError]) -> String {
    errors
        .iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join("; ")
}

impl From<StoreError> for Error {
    fn from(e: StoreError) -> Self {
        Error::Store(Arc::new(e))
    }
}

impl From<Error> for tonic::Status {
    /// INVALID_ARGUMENT carries a `google.rpc.BadRequest` with one field violation per
    /// problem; store errors map by retryability (UNAVAILABLE / ABORTED / INTERNAL).
    fn from(e: Error) -> Self {
        match &e {
            Error::InvalidArgument(errors) => {
                let mut details = ErrorDetails::new();
                for f in errors {
                    details.add_bad_request_violation(f.field.clone(), f.to_string());
                }
                tonic::Status::with_error_details(Code::InvalidArgument, e.to_string(), details)
            }
            Error::Store(store) => match store.as_ref() {
                StoreError::Conflict { .. } => tonic::Status::aborted(e.to_string()),
                s if s.is_retryable() => tonic::Status::unavailable(e.to_string()),
                _ => tonic::Status::internal(e.to_string()),
            },
            Error::TooManyConflicts { .. } => tonic::Status::aborted(e.to_string()),
        }
    }
}
