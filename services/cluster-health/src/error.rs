//! The service's one error type, and its one mapping onto `tonic::Status`.

use flotilla_core::validation::{FieldError, FieldErrorKind};
use flotilla_proto::ConvertError;
use flotilla_store::StoreError;
use tonic_types::StatusExt;

/// What can go wrong in a reconcile or an RPC.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The store failed (unavailable, leadership lost, ...).
    #[error("store: {0}")]
    Store(#[from] StoreError),
    /// A stored object does not decode into the domain types.
    #[error("cannot convert {key}: {source}")]
    Convert {
        /// The object's key.
        key: String,
        /// Which field is bad.
        #[source]
        source: ConvertError,
    },
    /// A conflicting writer won every one of the bounded re-read-and-re-decide attempts.
    #[error("{key}: still conflicting after {attempts} attempts")]
    TooManyConflicts {
        /// The cluster's key.
        key: String,
        /// How many attempts were made.
        attempts: usize,
    },
    /// A request is malformed; every problem found, each naming its field.
    #[error("invalid request: {}", format_fields(.0))]
    InvalidArgument(Vec<FieldError>),
    /// The object a request names does not exist.
    #[error("{0}")]
    NotFound(String),
    /// The request is well-formed but does not apply to the object (e.g. a heartbeat for a
    /// Push cluster).
    #[error("{0}")]
    FailedPrecondition(String),
    /// The caller may not act for the object (a heartbeat for another cluster).
    #[error("{0}")]
    PermissionDenied(String),
}

fn format_fields(errors: &[FieldError]) -> String {
    errors
        .iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join("; ")
}

impl Error {
    /// An invalid-argument error from a conversion error at `parent` (e.g. `cluster`).
    pub fn convert_at(parent: &str, e: ConvertError) -> Self {
        let e = e.within(parent);
        Error::InvalidArgument(vec![FieldError {
            field: e.field,
            kind: FieldErrorKind::Invalid,
            message: e.message,
        }])
    }

    /// A required request field is missing.
    pub fn required(field: &str) -> Self {
        Error::InvalidArgument(vec![FieldError::required(
            &flotilla_core::validation::FieldPath::new(field),
            "is required",
        )])
    }

    /// A request field has a bad value.
    pub fn invalid(field: &str, message: impl Into<String>) -> Self {
        Error::InvalidArgument(vec![FieldError::invalid(
            &flotilla_core::validation::FieldPath::new(field),
            message,
        )])
    }
}

impl From<Error> for tonic::Status {
    fn from(e: Error) -> Self {
        match &e {
            Error::InvalidArgument(fields) => {
                // google.rpc.BadRequest, one violation per field (tonic's richer-error idiom).
                let violations = fields
                    .iter()
                    .map(|f| tonic_types::FieldViolation::new(f.field.clone(), f.to_string()))
                    .collect::<Vec<_>>();
                tonic::Status::with_error_details(
                    tonic::Code::InvalidArgument,
                    e.to_string(),
                    tonic_types::ErrorDetails::with_bad_request(violations),
                )
            }
            Error::NotFound(_) => tonic::Status::not_found(e.to_string()),
            Error::FailedPrecondition(_) => tonic::Status::failed_precondition(e.to_string()),
            Error::PermissionDenied(_) => tonic::Status::permission_denied(e.to_string()),
            Error::TooManyConflicts { .. } => tonic::Status::aborted(e.to_string()),
            Error::Store(s) if s.is_retryable() => tonic::Status::unavailable(e.to_string()),
            Error::Store(_) | Error::Convert { .. } => tonic::Status::internal(e.to_string()),
        }
    }
}
