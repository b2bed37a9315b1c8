//! The api service's one error type and its one mapping onto `tonic::Status`.

use flotilla_core::validation::{FieldError, FieldErrorKind, FieldErrors, FieldPath};
use flotilla_proto::ConvertError;
use flotilla_runtime::status::Failure;
use flotilla_store::StoreError;

/// How many field errors the status message lists (all of them go into the details).
const MESSAGE_ERRORS: usize = 8;

/// Everything an api request can fail with.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The request (or the object in it) is invalid: INVALID_ARGUMENT with one
    /// `google.rpc.BadRequest` field violation per error.
    #[error("invalid request: {}", summary(.0))]
    Invalid(FieldErrors),
    /// The object does not exist: NOT_FOUND.
    #[error("{0} not found")]
    NotFound(String),
    /// The object already exists: ALREADY_EXISTS.
    #[error("{0} already exists")]
    AlreadyExists(String),
    /// A precondition (resourceVersion, uid) does not hold any more: ABORTED (re-read and
    /// retry).
    #[error("{0}")]
    Aborted(String),
    /// The revision asked for is gone (compacted) or not there yet: OUT_OF_RANGE (re-list).
    #[error("{0}")]
    OutOfRange(String),
    /// The store failed.
    #[error(transparent)]
    Store(StoreError),
}

fn summary(errs: &FieldErrors) -> String {
    let mut parts: Vec<String> = errs
        .iter()
        .take(MESSAGE_ERRORS)
        .map(ToString::to_string)
        .collect();
    if errs.len() > MESSAGE_ERRORS {
        parts.push(format!("and {} more", errs.len() - MESSAGE_ERRORS));
    }
    parts.join("; ")
}

// === impl Error ===

impl Error {
    /// One field error.
    pub fn field(field: &str, kind: FieldErrorKind, message: impl Into<String>) -> Self {
        Error::Invalid(vec![FieldError::new(&FieldPath::new(field), kind, message)])
    }

    /// A required field is missing.
    pub fn required(field: &str, message: impl Into<String>) -> Self {
        Self::field(field, FieldErrorKind::Required, message)
    }

    /// A field has a bad value.
    pub fn invalid(field: &str, message: impl Into<String>) -> Self {
        Self::field(field, FieldErrorKind::Invalid, message)
    }

    /// Fails with [`Error::Invalid`] unless `errs` is empty.
    pub fn check(errs: FieldErrors) -> Result<(), Error> {
        if errs.is_empty() {
            Ok(())
        } else {
            Err(Error::Invalid(errs))
        }
    }

    /// A conversion error, seen from the object root (its field is already a JSON path).
    pub fn convert(e: ConvertError) -> Self {
        let field = if e.field.is_empty() {
            "(root)".to_owned()
        } else {
            e.field
        };
        Self::field(&field, FieldErrorKind::Invalid, e.message)
    }
}

impl From<StoreError> for Error {
    fn from(e: StoreError) -> Self {
        match e {
            StoreError::NotFound { key } => Error::NotFound(key),
            StoreError::AlreadyExists { key } => Error::AlreadyExists(key),
            StoreError::Conflict {
                key,
                expected_revision,
                actual_revision,
            } => Error::Aborted(format!(
                "{key} was modified: resourceVersion {expected_revision} is stale (current \
                 {actual_revision}); re-read and retry"
            )),
            StoreError::Compacted { compact_revision } => Error::OutOfRange(format!(
                "the revision was compacted (oldest available {compact_revision}); re-list"
            )),
            StoreError::FutureRevision { revision, current } => Error::OutOfRange(format!(
                "revision {revision} is newer than the store's ({current})"
            )),
            other => Error::Store(other),
        }
    }
}

impl From<flotilla_runtime::cas::Exhausted> for Error {
    fn from(e: flotilla_runtime::cas::Exhausted) -> Self {
        Error::Aborted(e.to_string())
    }
}

impl flotilla_runtime::IntoStatus for Error {
    fn failure(&self) -> Failure<'_> {
        match self {
            Error::Invalid(errs) => Failure::Invalid(errs),
            Error::NotFound(_) => Failure::NotFound,
            Error::AlreadyExists(_) => Failure::AlreadyExists,
            Error::Aborted(_) => Failure::Aborted,
            Error::OutOfRange(_) => Failure::OutOfRange,
            Error::Store(store) => Failure::Store(store),
        }
    }
}

impl From<Error> for tonic::Status {
    fn from(e: Error) -> Self {
        flotilla_runtime::IntoStatus::into_status(e)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tonic::Code;
    use tonic_types::StatusExt;

    #[test]
    fn invalid_carries_bad_request_details() {
        let err = Error::Invalid(vec![
            FieldError::invalid(&FieldPath::new("spec").child("a"), "bad a"),
            FieldError::required(&FieldPath::new("metadata").child("name"), "name!"),
        ]);
        let status = tonic::Status::from(err);
        assert_eq!(status.code(), Code::InvalidArgument);
        assert!(status.message().contains("spec.a"), "{}", status.message());
        let bad = status.get_details_bad_request().expect("details");
        let fields: Vec<_> = bad
            .field_violations
            .iter()
            .map(|v| v.field.as_str())
            .collect();
        assert_eq!(fields, ["spec.a", "metadata.name"]);
        assert_eq!(bad.field_violations[1].reason, "Required");
    }

    #[test]
    fn store_errors_map_to_codes() {
        let code = |e: StoreError| tonic::Status::from(Error::from(e)).code();
        assert_eq!(
            code(StoreError::NotFound { key: "k".into() }),
            Code::NotFound
        );
        assert_eq!(
            code(StoreError::Conflict {
                key: "k".into(),
                expected_revision: 1,
                actual_revision: 2
            }),
            Code::Aborted
        );
        assert_eq!(
            code(StoreError::AlreadyExists { key: "k".into() }),
            Code::AlreadyExists
        );
        assert_eq!(
            code(StoreError::Compacted {
                compact_revision: 3
            }),
            Code::OutOfRange
        );
        assert_eq!(code(StoreError::Internal("x".into())), Code::Internal);
    }
}
