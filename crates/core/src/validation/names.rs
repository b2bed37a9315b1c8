//! Name and string checks (Kubernetes `util/validation`, Karmada's cluster-name rule),
//! hand-written: each returns the first problem as a [`NameError`].

use std::fmt;

use super::{FieldError, FieldErrorKind, FieldPath};

/// Maximum length of a DNS-1123 label (RFC 1123), e.g. a namespace or a Work name.
pub const DNS1123_LABEL_MAX_LEN: usize = 63;
/// Maximum length of a DNS-1123 subdomain, e.g. a resource name.
pub const DNS1123_SUBDOMAIN_MAX_LEN: usize = 253;
/// Maximum length of a cluster name: 63 minus the 15 characters reserved for the
/// `karmada-es-` execution-namespace prefix (Karmada `ValidateClusterName`).
pub const CLUSTER_NAME_MAX_LEN: usize = 48;
/// Maximum length of the name part of a qualified name (label key, taint key).
pub const QUALIFIED_NAME_MAX_LEN: usize = 63;
/// Maximum length of a label value.
pub const LABEL_VALUE_MAX_LEN: usize = 63;
/// Maximum length of a `clusterAffinities[].affinityName` (PD-2, CRD `MaxLength=32`).
pub const AFFINITY_NAME_MAX_LEN: usize = 32;
/// Maximum length of a GracefulEvictionTask `reason` (§1.7).
pub const EVICTION_REASON_MAX_LEN: usize = 32;
/// Maximum length in characters of a GracefulEvictionTask `message` (§1.7).
pub const EVICTION_MESSAGE_MAX_LEN: usize = 1024;

/// Why a name or string is not acceptable.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum NameError {
    /// The value is empty but must not be.
    Empty,
    /// The value is longer than `max` (bytes for names, characters for free text).
    TooLong {
        /// The length found.
        len: usize,
        /// The maximum.
        max: usize,
    },
    /// The value has the wrong format; the string says what is expected.
    Invalid(String),
}

// === impl NameError ===

impl NameError {
    /// The field-error kind this maps to: Required, TooLong or Invalid.
    pub fn kind(&self) -> FieldErrorKind {
        match self {
            NameError::Empty => FieldErrorKind::Required,
            NameError::TooLong { .. } => FieldErrorKind::TooLong,
            NameError::Invalid(_) => FieldErrorKind::Invalid,
        }
    }

    /// This error as a [`FieldError`] at `path`.
    pub fn at(&self, path: &FieldPath) -> FieldError {
        match self {
            NameError::TooLong { len, max } => FieldError::too_long(path, *len, *max),
            _ => FieldError::new(path, self.kind(), self.to_string()),
        }
    }
}

/// `TooLong` when `value` has more than `max` bytes.
fn check_len(value: &str, max: usize) -> Result<(), NameError> {
    if value.len() > max {
        return Err(NameError::TooLong {
            len: value.len(),
            max,
        });
    }
    Ok(())
}

/// `Empty` when `value` is empty, else `TooLong` when it has more than `max` bytes.
fn check_size(value: &str, max: usize) -> Result<(), NameError> {
    if value.is_empty() {
        return Err(NameError::Empty);
    }
    check_len(value, max)
}

/// `Invalid`: the quoted `value` followed by `rest` (what is wrong with it).
fn invalid(value: &str, rest: &str) -> NameError {
    NameError::Invalid(format!("{}{rest}", super::quote(value)))
}

/// `Ok` when `ok`, else [`invalid`] with `rest` (formatted only on failure).
fn require(ok: bool, value: &str, rest: impl fmt::Display) -> Result<(), NameError> {
    if ok {
        Ok(())
    } else {
        Err(invalid(value, &rest.to_string()))
    }
}

impl fmt::Display for NameError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            NameError::Empty => f.write_str("must not be empty"),
            NameError::TooLong { len, max } => {
                write!(f, "may not be more than {max} characters (got {len})")
            }
            NameError::Invalid(msg) => f.write_str(msg),
        }
    }
}

impl std::error::Error for NameError {}

fn is_lower_alnum(b: u8) -> bool {
    b.is_ascii_lowercase() || b.is_ascii_digit()
}

/// `[a-z0-9]([-a-z0-9]*[a-z0-9])?` without a length check.
fn matches_dns_label_chars(s: &str) -> bool {
    let b = s.as_bytes();
    match (b.first(), b.last()) {
        (Some(&first), Some(&last)) => {
            is_lower_alnum(first)
                && is_lower_alnum(last)
                && b.iter().all(|&c| is_lower_alnum(c) || c == b'-')
        }
        _ => false,
    }
}

/// `([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]` without a length check (the name part of a
/// qualified name, and a non-empty label value).
fn matches_qualified_name_part(s: &str) -> bool {
    let b = s.as_bytes();
    match (b.first(), b.last()) {
        (Some(&first), Some(&last)) => {
            first.is_ascii_alphanumeric()
                && last.is_ascii_alphanumeric()
                && b.iter()
                    .all(|&c| c.is_ascii_alphanumeric() || matches!(c, b'-' | b'_' | b'.'))
        }
        _ => false,
    }
}

const DNS_LABEL_FORMAT: &str = "must consist of lower case alphanumeric characters or '-', and \
                                must start and end with an alphanumeric character";
const DNS_SUBDOMAIN_FORMAT: &str = "must consist of lower case alphanumeric characters, '-' or \
                                    '.', and must start and end with an alphanumeric character";
const QUALIFIED_FORMAT: &str = "must consist of alphanumeric characters, '-', '_' or '.', and \
                                must start and end with an alphanumeric character";

/// A DNS-1123 label: 1–63 characters of `[a-z0-9]([-a-z0-9]*[a-z0-9])?` (namespaces,
/// Work names).
pub fn check_dns1123_label(value: &str) -> Result<(), NameError> {
    check_size(value, DNS1123_LABEL_MAX_LEN)?;
    require(
        matches_dns_label_chars(value),
        value,
        format_args!(" is not a DNS-1123 label: {DNS_LABEL_FORMAT}"),
    )
}

/// A DNS-1123 subdomain: 1–253 characters, dot-separated DNS-1123 label patterns (resource
/// names). As in Kubernetes, only the total length is limited, not each part.
pub fn check_dns1123_subdomain(value: &str) -> Result<(), NameError> {
    check_size(value, DNS1123_SUBDOMAIN_MAX_LEN)?;
    require(
        value.split('.').all(matches_dns_label_chars),
        value,
        format_args!(" is not a DNS-1123 subdomain: {DNS_SUBDOMAIN_FORMAT}"),
    )
}

/// A cluster name: non-empty, at most 48 characters, and a DNS-1123 label (Karmada
/// `ValidateClusterName`: 15 characters are reserved for the `karmada-es-` prefix).
pub fn check_cluster_name(value: &str) -> Result<(), NameError> {
    check_len(value, CLUSTER_NAME_MAX_LEN)?;
    check_dns1123_label(value)
}

/// A qualified name (label key, annotation key, taint key, toleration key): an optional
/// DNS-1123 subdomain prefix of at most 253 characters and a `/`, then a name of 1–63
/// characters matching `[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?`.
pub fn check_qualified_name(value: &str) -> Result<(), NameError> {
    if value.is_empty() {
        return Err(NameError::Empty);
    }
    let (prefix, name) = match value.split_once('/') {
        None => (None, value),
        Some((prefix, name)) => (Some(prefix), name),
    };
    if let Some(prefix) = prefix {
        if prefix.is_empty() {
            return Err(invalid(value, ": prefix part must be non-empty"));
        }
        if name.contains('/') {
            return Err(NameError::Invalid(format!(
                "{}: a qualified name must consist of an optional prefix and a name separated \
                 by a single '/'",
                super::quote(value)
            )));
        }
        match check_dns1123_subdomain(prefix) {
            Ok(()) => {}
            Err(NameError::TooLong { len, max }) => return Err(NameError::TooLong { len, max }),
            Err(_) => {
                return Err(invalid(
                    value,
                    &format!(": prefix part {DNS_SUBDOMAIN_FORMAT}"),
                ));
            }
        }
    }
    if name.is_empty() {
        return Err(invalid(value, ": name part must be non-empty"));
    }
    check_len(name, QUALIFIED_NAME_MAX_LEN)?;
    require(
        matches_qualified_name_part(name),
        value,
        format_args!(": name part {QUALIFIED_FORMAT}"),
    )
}

/// A label value: empty, or at most 63 characters matching
/// `[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?` (also provider, region, zones, taint values).
pub fn check_label_value(value: &str) -> Result<(), NameError> {
    if value.is_empty() {
        return Ok(());
    }
    check_len(value, LABEL_VALUE_MAX_LEN)?;
    require(
        matches_qualified_name_part(value),
        value,
        format_args!(" is not a label value: {QUALIFIED_FORMAT}"),
    )
}

/// A `clusterAffinities[].affinityName`: 1–32 characters and a qualified name (PD-2; Karmada
/// validates it with `IsQualifiedName`).
pub fn check_affinity_name(value: &str) -> Result<(), NameError> {
    check_len(value, AFFINITY_NAME_MAX_LEN)?;
    check_qualified_name(value)
}

/// A GracefulEvictionTask `reason` (§1.7): 1–32 characters matching
/// `^[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?$` (the metav1.Condition reason format).
pub fn check_eviction_reason(value: &str) -> Result<(), NameError> {
    check_size(value, EVICTION_REASON_MAX_LEN)?;
    let b = value.as_bytes();
    let ok = match (b.first(), b.last()) {
        (Some(&first), Some(&last)) => {
            first.is_ascii_alphabetic()
                && (b.len() == 1 || last.is_ascii_alphanumeric() || last == b'_')
                && b.iter()
                    .all(|&c| c.is_ascii_alphanumeric() || matches!(c, b'_' | b',' | b':'))
        }
        _ => false,
    };
    require(
        ok,
        value,
        " must start with a letter, contain only letters, digits, '_', ',' and ':', and end \
         with a letter, digit or '_'",
    )
}

/// A name that is safe as one path segment (Kubernetes `IsValidPathSegmentName`, used for
/// resource-selector names that may target any kind, e.g. `system:aggregate-to-admin`):
/// 1–253 bytes, not `.` or `..`, no `/`, `%` or control characters.
pub fn check_path_segment_name(value: &str) -> Result<(), NameError> {
    check_size(value, DNS1123_SUBDOMAIN_MAX_LEN)?;
    if value == "." || value == ".." {
        return Err(NameError::Invalid(format!(
            "may not be {}",
            super::quote(value)
        )));
    }
    let bad = |c: char| c == '/' || c == '%' || c.is_control() || c.is_whitespace();
    require(
        !value.chars().any(bad),
        value,
        " may not contain '/', '%', whitespace or control characters",
    )
}

/// Free text: at most `max_chars` Unicode scalar values and no control characters, except
/// tab, newline and carriage return when `multiline` is true. (Rust strings are always
/// UTF-8; invalid UTF-8 is rejected when the request is decoded.) Empty text is accepted.
pub fn check_text(value: &str, max_chars: usize, multiline: bool) -> Result<(), NameError> {
    let len = value.chars().count();
    if len > max_chars {
        return Err(NameError::TooLong {
            len,
            max: max_chars,
        });
    }
    let bad = value
        .chars()
        .any(|c| c.is_control() && !(multiline && matches!(c, '\t' | '\n' | '\r')));
    if bad {
        return Err(NameError::Invalid(if multiline {
            "must not contain control characters other than tab and newline".to_owned()
        } else {
            "must not contain control characters".to_owned()
        }));
    }
    Ok(())
}

/// An `apiVersion`: `version` (core group) or `group/version`, where the group is a DNS-1123
/// subdomain and the version a DNS-1123 label (`v1`, `apps/v1`, `policy.karmada.io/v1alpha1`).
pub(crate) fn check_api_version(value: &str) -> Result<(), NameError> {
    if value.is_empty() {
        return Err(NameError::Empty);
    }
    let (group, version) = match value.split_once('/') {
        Some((group, version)) => (Some(group), version),
        None => (None, value),
    };
    let group_ok = group.is_none_or(|g| check_dns1123_subdomain(g).is_ok());
    require(
        group_ok && check_dns1123_label(version).is_ok(),
        value,
        " must be `version` or `group/version`, e.g. \"v1\" or \"apps/v1\"",
    )
}

/// A `kind`: 1–63 ASCII letters and digits starting with a letter (`Deployment`).
pub(crate) fn check_kind(value: &str) -> Result<(), NameError> {
    check_size(value, DNS1123_LABEL_MAX_LEN)?;
    let b = value.as_bytes();
    require(
        b.first().is_some_and(u8::is_ascii_alphabetic) && b.iter().all(u8::is_ascii_alphanumeric),
        value,
        " must consist of ASCII letters and digits and start with a letter",
    )
}
