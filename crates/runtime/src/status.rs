//! The one mapping of failures onto gRPC status codes, and the error type the controllers
//! share.
//!
//! ```text
//!   service error ──IntoStatus::failure──► Failure ──to_status──► tonic::Status
//!   (ServiceError, the api's Error,        (what kind of          (one code per kind; store
//!    the work-executor's ApiError)          failure it is)         errors by their kind)
//! ```
//!
//! Every service maps its errors here, so a store conflict is ABORTED and a lost leadership
//! UNAVAILABLE in every service, and every INVALID_ARGUMENT carries one
//! `google.rpc.BadRequest` field violation per problem (field = JSON path, reason = the
//! kind, description = kind and message). The codes and when a client should retry are listed
//! in `docs/operations.md`.

use flotilla_core::validation::{FieldError, FieldErrorKind, FieldPath};
use flotilla_proto::ConvertError;
use flotilla_store::StoreError;
use tonic::{Code, Status};
use tonic_types::{ErrorDetails, FieldViolation, StatusExt};

/// What kind of failure an error is, to a gRPC caller.
#[derive(Debug)]
pub enum Failure<'a> {
    /// The request is malformed: INVALID_ARGUMENT, one field violation per error.
    Invalid(&'a [FieldError]),
    /// The named object does not exist: NOT_FOUND.
    NotFound,
    /// The object exists already: ALREADY_EXISTS.
    AlreadyExists,
    /// A precondition the caller sent (resourceVersion, uid, generation) no longer holds, or a
    /// bounded compare-and-swap loop lost every race: ABORTED — re-read and retry.
    Aborted,
    /// The revision asked for was compacted or is not there yet: OUT_OF_RANGE — re-list.
    OutOfRange,
    /// The request is well-formed but does not apply to the object: FAILED_PRECONDITION.
    FailedPrecondition,
    /// The caller may not act on the object: PERMISSION_DENIED.
    PermissionDenied,
    /// Something that should not happen (a stored object that does not decode): INTERNAL,
    /// logged.
    Internal,
    /// The store failed: mapped by the store error's kind (see [`store_code`]).
    Store(&'a StoreError),
}

/// An error that knows its [`Failure`] kind; its `Display` is the status message.
pub trait IntoStatus: std::fmt::Display {
    /// The kind of failure.
    fn failure(&self) -> Failure<'_>;

    /// The gRPC status for this error.
    fn into_status(self) -> Status
    where
        Self: Sized,
    {
        to_status(self.to_string(), self.failure())
    }
}

/// The gRPC code of a store error: NOT_FOUND, ALREADY_EXISTS, ABORTED for a conflict,
/// OUT_OF_RANGE for a compacted or future revision, UNAVAILABLE when retrying may succeed
/// (the store did not answer, a watch closed, this replica lost its leadership), else
/// INTERNAL — also when etcd refuses the server's own credentials or request: that is the
/// server's problem, not the caller's permission or argument.
pub fn store_code(e: &StoreError) -> Code {
    match e {
        StoreError::NotFound { .. } => Code::NotFound,
        StoreError::AlreadyExists { .. } => Code::AlreadyExists,
        StoreError::Conflict { .. } => Code::Aborted,
        StoreError::Compacted { .. } | StoreError::FutureRevision { .. } => Code::OutOfRange,
        StoreError::LeadershipLost { .. } => Code::Unavailable,
        e if e.is_retryable() => Code::Unavailable,
        _ => Code::Internal,
    }
}

/// The longest status message sent, in bytes. A status travels in HTTP/2 trailers, which a
/// client limits (16 KiB by default in hyper): a message echoing a 70,000-character field
/// made the client reset the stream, and the caller saw INTERNAL instead of INVALID_ARGUMENT
/// (found by the api's mutated-request test).
pub const MAX_STATUS_MESSAGE: usize = 2048;
/// The most field violations sent in one INVALID_ARGUMENT, each description at most
/// [`MAX_VIOLATION_DESCRIPTION`] bytes; the message says how many there were.
pub const MAX_VIOLATIONS: usize = 20;
/// The longest field-violation description, in bytes.
pub const MAX_VIOLATION_DESCRIPTION: usize = 300;

/// `text` cut to at most `max` bytes at a character boundary, saying how much was cut.
pub fn bounded(text: &str, max: usize) -> String {
    if text.len() <= max {
        return text.to_owned();
    }
    let mut end = max.saturating_sub(40).min(text.len());
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}… ({} more bytes)", &text[..end], text.len() - end)
}

/// The status for `failure`, with `message`.
pub fn to_status(message: String, failure: Failure<'_>) -> Status {
    let message = bounded(&message, MAX_STATUS_MESSAGE);
    let code = match failure {
        Failure::Invalid(errors) => return invalid_argument(message, errors),
        Failure::NotFound => Code::NotFound,
        Failure::AlreadyExists => Code::AlreadyExists,
        Failure::Aborted => Code::Aborted,
        Failure::OutOfRange => Code::OutOfRange,
        Failure::FailedPrecondition => Code::FailedPrecondition,
        Failure::PermissionDenied => Code::PermissionDenied,
        Failure::Internal => Code::Internal,
        Failure::Store(e) => store_code(e),
    };
    if code == Code::Internal {
        tracing::error!(error = %message, "internal error answered to a caller");
    }
    Status::new(code, message)
}

/// INVALID_ARGUMENT with a `google.rpc.BadRequest` of one violation per field error.
pub fn invalid_argument(message: String, errors: &[FieldError]) -> Status {
    let mut message = bounded(&message, MAX_STATUS_MESSAGE);
    if errors.len() > MAX_VIOLATIONS {
        message.push_str(&format!(
            " ({} problems; the details list the first {MAX_VIOLATIONS})",
            errors.len()
        ));
    }
    let violations: Vec<FieldViolation> = errors
        .iter()
        .take(MAX_VIOLATIONS)
        .map(|err| FieldViolation {
            field: bounded(&err.field, MAX_VIOLATION_DESCRIPTION),
            description: bounded(
                &format!("{}: {}", err.kind, err.message),
                MAX_VIOLATION_DESCRIPTION,
            ),
            reason: err.kind.as_str().to_owned(),
            localized_message: None,
        })
        .collect();
    Status::with_error_details(
        Code::InvalidArgument,
        message,
        ErrorDetails::with_bad_request(violations),
    )
}

/// The error of the controller services (cluster-health, taint-manager, scheduler,
/// graceful-eviction): what can go wrong in a reconcile or an RPC.
#[derive(Debug, thiserror::Error)]
pub enum ServiceError {
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
    /// A conflicting writer won every attempt of the bounded re-read-and-re-decide loop.
    #[error("{key}: still conflicting after {attempts} attempts")]
    TooManyConflicts {
        /// The object's key.
        key: String,
        /// How many attempts were made.
        attempts: usize,
    },
    /// A request is malformed; every problem found, each naming its field.
    #[error("invalid request: {}", join(.0))]
    InvalidArgument(Vec<FieldError>),
    /// The object a request names does not exist.
    #[error("{0}")]
    NotFound(String),
    /// The request is well-formed but does not apply to the object.
    #[error("{0}")]
    FailedPrecondition(String),
    /// The caller may not act on the object.
    #[error("{0}")]
    PermissionDenied(String),
}

fn join(errors: &[FieldError]) -> String {
    errors
        .iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join("; ")
}

impl ServiceError {
    /// An invalid-argument error from a conversion error at `parent` (e.g. `binding`).
    pub fn convert_at(parent: &str, e: ConvertError) -> Self {
        let e = e.within(parent);
        ServiceError::InvalidArgument(vec![FieldError {
            field: e.field,
            kind: FieldErrorKind::Invalid,
            message: e.message,
        }])
    }

    /// A required request field is missing.
    pub fn required(field: &str) -> Self {
        ServiceError::InvalidArgument(vec![FieldError::required(
            &FieldPath::new(field),
            "is required",
        )])
    }

    /// A request field has a bad value.
    pub fn invalid(field: &str, message: impl Into<String>) -> Self {
        ServiceError::InvalidArgument(vec![FieldError::invalid(&FieldPath::new(field), message)])
    }
}

impl IntoStatus for ServiceError {
    fn failure(&self) -> Failure<'_> {
        match self {
            ServiceError::Store(e) => Failure::Store(e),
            ServiceError::Convert { .. } => Failure::Internal,
            ServiceError::TooManyConflicts { .. } => Failure::Aborted,
            ServiceError::InvalidArgument(errors) => Failure::Invalid(errors),
            ServiceError::NotFound(_) => Failure::NotFound,
            ServiceError::FailedPrecondition(_) => Failure::FailedPrecondition,
            ServiceError::PermissionDenied(_) => Failure::PermissionDenied,
        }
    }
}

impl From<ServiceError> for Status {
    fn from(e: ServiceError) -> Self {
        e.into_status()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn conflict() -> StoreError {
        StoreError::Conflict {
            key: "bindings/default/a".into(),
            expected_revision: 2,
            actual_revision: 3,
        }
    }

    #[test]
    fn every_store_error_has_one_code() {
        let cases = [
            (StoreError::NotFound { key: "k".into() }, Code::NotFound),
            (
                StoreError::AlreadyExists { key: "k".into() },
                Code::AlreadyExists,
            ),
            (conflict(), Code::Aborted),
            (
                StoreError::Compacted {
                    compact_revision: 9,
                },
                Code::OutOfRange,
            ),
            (
                StoreError::LeadershipLost {
                    key: "leases/x".into(),
                },
                Code::Unavailable,
            ),
            (StoreError::unavailable("refused"), Code::Unavailable),
            (StoreError::WatchClosed("gone".into()), Code::Unavailable),
            (StoreError::PermissionDenied("no".into()), Code::Internal),
            (StoreError::InvalidArgument("bad".into()), Code::Internal),
            (StoreError::Internal("?".into()), Code::Internal),
        ];
        for (e, want) in cases {
            assert_eq!(store_code(&e), want, "{e}");
            assert_eq!(Status::from(ServiceError::Store(e)).code(), want);
        }
    }

    #[test]
    fn a_lost_race_is_aborted_and_a_corrupt_object_internal() {
        let lost = ServiceError::TooManyConflicts {
            key: "bindings/default/a".into(),
            attempts: 16,
        };
        assert_eq!(Status::from(lost).code(), Code::Aborted);
        let corrupt = ServiceError::Convert {
            key: "clusters/m1".into(),
            source: ConvertError {
                field: "spec".into(),
                message: "missing".into(),
            },
        };
        assert_eq!(Status::from(corrupt).code(), Code::Internal);
    }

    #[test]
    fn huge_messages_and_many_violations_are_bounded() {
        let long = "é".repeat(40_000);
        let cut = bounded(&long, MAX_STATUS_MESSAGE);
        assert!(cut.len() <= MAX_STATUS_MESSAGE, "{}", cut.len());
        assert!(cut.ends_with("more bytes)"), "{cut}");
        assert_eq!(bounded("short", 10), "short");
        let errors: Vec<FieldError> = (0..100)
            .map(|i| FieldError::invalid(&FieldPath::new("spec").child(&format!("f{i}")), &long))
            .collect();
        let status = invalid_argument(long.clone(), &errors);
        assert!(status.message().len() < MAX_STATUS_MESSAGE + 100);
        assert!(
            status.message().contains("100 problems"),
            "{}",
            status.message()
        );
        let bad = status.get_details_bad_request().expect("details");
        assert_eq!(bad.field_violations.len(), MAX_VIOLATIONS);
        assert!(
            bad.field_violations
                .iter()
                .all(|v| v.description.len() <= MAX_VIOLATION_DESCRIPTION)
        );
    }

    #[test]
    fn invalid_argument_carries_one_violation_per_field() {
        let e = ServiceError::InvalidArgument(vec![
            FieldError::invalid(&FieldPath::new("spec").child("a"), "bad a"),
            FieldError::required(&FieldPath::new("metadata").child("name"), "is required"),
        ]);
        let status = Status::from(e);
        assert_eq!(status.code(), Code::InvalidArgument);
        assert!(status.message().contains("spec.a"), "{}", status.message());
        let bad = status
            .get_details_bad_request()
            .expect("BadRequest details");
        let fields: Vec<_> = bad
            .field_violations
            .iter()
            .map(|v| (v.field.as_str(), v.reason.as_str()))
            .collect();
        assert_eq!(
            fields,
            [("spec.a", "Invalid"), ("metadata.name", "Required")]
        );
    }
}
