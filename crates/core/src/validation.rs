//! Validation of everything a user can send (docs/reliability.md (bad input), docs/semantics.md PD-3).
//!
//! ```text
//!   gRPC request ──► proto::convert (enums, wrappers) ──► types ──► validation ──► FieldErrors
//!                                                                      │
//!                                          empty ──► default / store   └► INVALID_ARGUMENT
//! ```
//!
//! Every validator is a pure function: no I/O, no clock, no shared state. Each one walks the
//! whole input and **accumulates** every problem it finds as a [`FieldError`] whose `field`
//! is a JSON path with Karmada's camelCase names
//! (`spec.placement.clusterTolerations[1].tolerationSeconds`), so that a user sees all of
//! their mistakes at once and the api service can map them one-to-one onto
//! `google.rpc.BadRequest` field violations.
//!
//! Kinds are used consistently:
//! - [`FieldErrorKind::Required`]: a required value is empty or missing;
//! - [`FieldErrorKind::Invalid`]: a value has the wrong format or contradicts another field;
//! - [`FieldErrorKind::NotSupported`]: a value outside an enumerated set;
//! - [`FieldErrorKind::Duplicate`]: a value that must be unique is repeated (reported on the
//!   later occurrence);
//! - [`FieldErrorKind::Forbidden`]: a field that may not be set in this context;
//! - [`FieldErrorKind::TooLong`]: a string over its length limit;
//! - [`FieldErrorKind::TooMany`]: a list over its item limit;
//! - [`FieldErrorKind::OutOfRange`]: a number outside its bounds.
//!
//! Validators expect **defaulted** input (PD-1, PD-2), as Karmada's validating webhooks run
//! after its mutating one: e.g. an application failover in Gracefully mode without
//! `gracePeriodSeconds` is rejected, because PD-1.5 would have filled in 600.
//!
//! Enumerations that the domain types cannot represent (an unknown or unset proto enum, a
//! toleration operator `Lt`/`Gt`, an unset taint effect) must be rejected by the proto
//! conversion at the edge, with the same [`FieldError`] shape.

use std::fmt;

mod binding;
mod cluster;
mod meta;
mod names;
mod placement;
mod policy;

#[cfg(test)]
mod tests;

pub use binding::{
    WorkloadTemplate, validate_binding_spec, validate_binding_update, validate_eviction_task,
    validate_page_size, validate_target_names, validate_workload,
};
pub use cluster::{
    validate_api_endpoint, validate_cluster, validate_cluster_taint_policy,
    validate_cluster_taint_policy_conflicts, validate_cluster_taints,
};
pub use meta::{
    validate_annotations, validate_label_selector, validate_labels, validate_managed_fields,
};
pub use names::{
    AFFINITY_NAME_MAX_LEN, CLUSTER_NAME_MAX_LEN, DNS1123_LABEL_MAX_LEN, DNS1123_SUBDOMAIN_MAX_LEN,
    EVICTION_MESSAGE_MAX_LEN, EVICTION_REASON_MAX_LEN, LABEL_VALUE_MAX_LEN, NameError,
    QUALIFIED_NAME_MAX_LEN, check_affinity_name, check_cluster_name, check_dns1123_label,
    check_dns1123_subdomain, check_eviction_reason, check_label_value, check_path_segment_name,
    check_qualified_name, check_text,
};
pub use placement::{
    validate_cluster_affinity, validate_placement, validate_placement_at, validate_toleration,
    validate_tolerations,
};
pub use policy::{
    PERMANENT_ID_LABEL_CLUSTER_POLICY, PERMANENT_ID_LABEL_POLICY, validate_failover,
    validate_failover_at, validate_override_policy, validate_propagation_policy,
    validate_propagation_policy_update,
};

// ---------------------------------------------------------------------------------------
// Field errors
// ---------------------------------------------------------------------------------------

/// What is wrong with a field (the Kubernetes `field.ErrorType` set that applies to us).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum FieldErrorKind {
    /// A required value is empty or missing.
    Required,
    /// The value has the wrong format or contradicts another field.
    Invalid,
    /// The value is not one of the supported values of an enumeration.
    NotSupported,
    /// The value must be unique and is repeated.
    Duplicate,
    /// The field may not be set (or changed) in this context.
    Forbidden,
    /// The string is longer than allowed.
    TooLong,
    /// The list has more items than allowed.
    TooMany,
    /// The number is outside its allowed range.
    OutOfRange,
}

// === impl FieldErrorKind ===

impl FieldErrorKind {
    /// A stable machine-readable name (used as the `reason` of a gRPC field violation).
    pub fn as_str(self) -> &'static str {
        match self {
            FieldErrorKind::Required => "Required",
            FieldErrorKind::Invalid => "Invalid",
            FieldErrorKind::NotSupported => "NotSupported",
            FieldErrorKind::Duplicate => "Duplicate",
            FieldErrorKind::Forbidden => "Forbidden",
            FieldErrorKind::TooLong => "TooLong",
            FieldErrorKind::TooMany => "TooMany",
            FieldErrorKind::OutOfRange => "OutOfRange",
        }
    }

    /// The human-readable phrase Kubernetes uses for this kind.
    fn phrase(self) -> &'static str {
        match self {
            FieldErrorKind::Required => "Required value",
            FieldErrorKind::Invalid => "Invalid value",
            FieldErrorKind::NotSupported => "Unsupported value",
            FieldErrorKind::Duplicate => "Duplicate value",
            FieldErrorKind::Forbidden => "Forbidden",
            FieldErrorKind::TooLong => "Too long",
            FieldErrorKind::TooMany => "Too many",
            FieldErrorKind::OutOfRange => "Out of range",
        }
    }
}

impl fmt::Display for FieldErrorKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.phrase())
    }
}

/// One problem with one field of a request.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{field}: {kind}: {message}")]
pub struct FieldError {
    /// JSON path with Karmada's camelCase names, e.g.
    /// `spec.placement.clusterTolerations[1].tolerationSeconds`.
    pub field: String,
    /// What kind of problem.
    pub kind: FieldErrorKind,
    /// What is wrong and what is expected, for a human.
    pub message: String,
}

/// All the problems found in one request; empty means valid.
pub type FieldErrors = Vec<FieldError>;

// === impl FieldError ===

impl FieldError {
    /// A field error of any kind.
    pub fn new(field: &FieldPath, kind: FieldErrorKind, message: impl Into<String>) -> Self {
        FieldError {
            field: field.as_str().to_owned(),
            kind,
            message: message.into(),
        }
    }

    /// A required value is missing.
    pub fn required(field: &FieldPath, message: impl Into<String>) -> Self {
        Self::new(field, FieldErrorKind::Required, message)
    }

    /// A value has the wrong format or contradicts another field.
    pub fn invalid(field: &FieldPath, message: impl Into<String>) -> Self {
        Self::new(field, FieldErrorKind::Invalid, message)
    }

    /// A value outside an enumeration; `supported` lists the accepted spellings.
    pub fn not_supported(field: &FieldPath, value: &str, supported: &[&str]) -> Self {
        let list = supported
            .iter()
            .map(|s| format!("\"{s}\""))
            .collect::<Vec<_>>()
            .join(", ");
        Self::new(
            field,
            FieldErrorKind::NotSupported,
            format!("{}: supported values: {list}", quote(value)),
        )
    }

    /// A value that must be unique is repeated.
    pub fn duplicate(field: &FieldPath, message: impl Into<String>) -> Self {
        Self::new(field, FieldErrorKind::Duplicate, message)
    }

    /// A field that may not be set or changed here.
    pub fn forbidden(field: &FieldPath, message: impl Into<String>) -> Self {
        Self::new(field, FieldErrorKind::Forbidden, message)
    }

    /// A string longer than `max` (in the unit the rule counts: bytes or characters).
    pub fn too_long(field: &FieldPath, len: usize, max: usize) -> Self {
        Self::new(
            field,
            FieldErrorKind::TooLong,
            format!("may not be more than {max} characters (got {len})"),
        )
    }

    /// A list with more than `max` items.
    pub fn too_many(field: &FieldPath, len: usize, max: usize) -> Self {
        Self::new(
            field,
            FieldErrorKind::TooMany,
            format!("must have at most {max} items (got {len})"),
        )
    }

    /// A number outside its bounds.
    pub fn out_of_range(field: &FieldPath, message: impl Into<String>) -> Self {
        Self::new(field, FieldErrorKind::OutOfRange, message)
    }
}

/// Quote a user-supplied value for a message, cut to 64 characters so that an error never
/// echoes a megabyte back to the caller.
pub(crate) fn quote(value: &str) -> String {
    const MAX: usize = 64;
    if value.chars().count() <= MAX {
        format!("{value:?}")
    } else {
        let cut: String = value.chars().take(MAX).collect();
        format!("{cut:?}...")
    }
}

// ---------------------------------------------------------------------------------------
// Field paths
// ---------------------------------------------------------------------------------------

/// A JSON path to a field, built like Kubernetes' `field.Path`:
/// `FieldPath::new("spec").child("taints").index(1).child("key")` is `spec.taints[1].key`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct FieldPath(String);

// === impl FieldPath ===

impl FieldPath {
    /// A path starting at `root` (may be empty, for paths relative to a sub-object).
    pub fn new(root: &str) -> Self {
        FieldPath(root.to_owned())
    }

    /// `self.name`, or `name` if `self` is empty.
    pub fn child(&self, name: &str) -> Self {
        if self.0.is_empty() {
            FieldPath(name.to_owned())
        } else {
            FieldPath(format!("{}.{name}", self.0))
        }
    }

    /// `self[i]`.
    pub fn index(&self, i: usize) -> Self {
        FieldPath(format!("{}[{i}]", self.0))
    }

    /// `self[key]`, for map entries.
    pub fn key(&self, key: &str) -> Self {
        FieldPath(format!("{}[{key}]", self.0))
    }

    /// The path as a string.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for FieldPath {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

// ---------------------------------------------------------------------------------------
// Limits
// ---------------------------------------------------------------------------------------

/// One year in seconds: the cap on every toleration time and grace period
/// (docs/reliability.md (bad input), *(infer)* "a total toleration time or grace period beyond the cap").
pub const ONE_YEAR_SECONDS: i64 = 365 * 24 * 60 * 60;

/// Size caps on user input, passed explicitly to the validators (no globals).
///
/// The defaults come from docs/reliability.md (bad input) ("gRPC-specific requirements"); where it gives
/// no number the default is a Flotilla choice, marked as such. Format limits fixed by
/// Kubernetes or Karmada (63-char labels, 48-char cluster names, …) are constants in
/// this module instead, because changing them would break compatibility.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Limits {
    /// Maximum replicas of a workload, a binding or one target (default 100 000, §3).
    /// Always fits in an `i32`, so every accepted value fits the int32 wire fields.
    pub max_replicas: i32,
    /// Maximum entries of any per-cluster list: `clusterNames`, `exclude`,
    /// `staticWeightList`, a binding's `clusters`, `clustersBeforeFailover` (default 1000,
    /// §3); also the upper bound of `minGroups`/`maxGroups`.
    pub max_placement_clusters: usize,
    /// Maximum taints on a cluster or in a ClusterTaintPolicy (default 64, §3).
    pub max_cluster_taints: usize,
    /// Maximum graceful eviction tasks on one binding (default 128, §3).
    pub max_eviction_tasks: usize,
    /// Maximum `clusterTolerations` (default 64).
    pub max_tolerations: usize,
    /// Maximum `resourceSelectors` of a policy (default 128).
    pub max_resource_selectors: usize,
    /// Maximum `spreadConstraints` (default 64).
    pub max_spread_constraints: usize,
    /// Maximum `clusterAffinities` terms (default 64, Flotilla choice).
    pub max_affinity_terms: usize,
    /// Maximum requirements of one selector (`matchLabels` + `matchExpressions`), and of
    /// one condition list of a ClusterTaintPolicy (default 64, Flotilla choice).
    pub max_selector_requirements: usize,
    /// Maximum `values` of one selector requirement (default 256, Flotilla choice).
    pub max_selector_values: usize,
    /// Maximum `zones` of a cluster (default 64, Flotilla choice).
    pub max_zones: usize,
    /// Maximum state-preservation rules per failover section (default 64, Flotilla choice).
    pub max_state_preservation_rules: usize,
    /// Cap on every toleration time, grace period and stabilization window, in seconds
    /// (default one year, §3 *(infer)*).
    pub max_duration_seconds: i64,
    /// Maximum labels on one object (default 256, Flotilla choice; each is ≤ 63 + 316 bytes).
    pub max_labels: usize,
    /// Maximum total size of an object's annotations, keys plus values, in bytes
    /// (default 256 KiB, Kubernetes' `TotalAnnotationSizeLimitB`).
    pub max_annotations_bytes: usize,
    /// Maximum size of a workload manifest in bytes (default 1 MiB: below etcd's
    /// `--max-request-bytes` of 1.5 MiB so that a binding write around it still fits).
    pub max_manifest_bytes: usize,
    /// Maximum `page_size` of a List call (default 500, §3).
    pub max_page_size: u32,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_replicas: 100_000,
            max_placement_clusters: 1000,
            max_cluster_taints: 64,
            max_eviction_tasks: 128,
            max_tolerations: 64,
            max_resource_selectors: 128,
            max_spread_constraints: 64,
            max_affinity_terms: 64,
            max_selector_requirements: 64,
            max_selector_values: 256,
            max_zones: 64,
            max_state_preservation_rules: 64,
            max_duration_seconds: ONE_YEAR_SECONDS,
            max_labels: 256,
            max_annotations_bytes: 256 * 1024,
            max_manifest_bytes: 1024 * 1024,
            max_page_size: 500,
        }
    }
}

// ---------------------------------------------------------------------------------------
// Small shared helpers
// ---------------------------------------------------------------------------------------

/// Push a `TooMany` error when `len > max`.
pub(crate) fn check_count(errs: &mut FieldErrors, path: &FieldPath, len: usize, max: usize) {
    if len > max {
        errs.push(FieldError::too_many(path, len, max));
    }
}

/// Push a `TooMany` error when `items` has more than `max` entries ([`check_count`]), then
/// enumerate them for their own checks.
pub(crate) fn counted<'a, T>(
    errs: &mut FieldErrors,
    path: &FieldPath,
    items: &'a [T],
    max: usize,
) -> impl Iterator<Item = (usize, &'a T)> + use<'a, T> {
    check_count(errs, path, items.len(), max);
    items.iter().enumerate()
}

/// Record that `key` is at index `i` unless it was seen before; for a repeat, the index it
/// was first seen at (the map keeps that first index).
pub(crate) fn first_seen<'a>(
    seen: &mut std::collections::HashMap<&'a str, usize>,
    key: &'a str,
    i: usize,
) -> Option<usize> {
    match seen.entry(key) {
        std::collections::hash_map::Entry::Occupied(first) => Some(*first.get()),
        std::collections::hash_map::Entry::Vacant(slot) => {
            slot.insert(i);
            None
        }
    }
}

/// What `validate` reports for `value` at `path`; nothing when there is no value.
pub(crate) fn validate_some<T>(
    value: Option<&T>,
    path: &FieldPath,
    limits: &Limits,
    validate: fn(&T, &FieldPath, &Limits) -> FieldErrors,
) -> FieldErrors {
    value.map_or_else(FieldErrors::new, |value| validate(value, path, limits))
}

/// Check `name` at `path` with `check`, and push a `Duplicate` (with `duplicate`'s message)
/// when it is already in `seen`, a set of the names before it in its list.
pub(crate) fn check_name_once<'a>(
    errs: &mut FieldErrors,
    seen: &mut std::collections::HashSet<&'a str>,
    name: &'a str,
    path: &FieldPath,
    check: fn(&str) -> Result<(), NameError>,
    duplicate: impl FnOnce() -> String,
) {
    if let Err(e) = check(name) {
        errs.push(e.at(path));
    }
    if !seen.insert(name) {
        errs.push(FieldError::duplicate(path, duplicate()));
    }
}

/// Push `Required` (with `message`) at `path` when the list there has no entries (`len` 0).
pub(crate) fn check_non_empty(errs: &mut FieldErrors, path: &FieldPath, len: usize, message: &str) {
    if len == 0 {
        errs.push(FieldError::required(path, message));
    }
}

/// Check a list of cluster names: at most `max_placement_clusters`, each a cluster name
/// (reported at `path[i]`), none repeated.
pub(crate) fn check_cluster_names(
    errs: &mut FieldErrors,
    path: &FieldPath,
    names: &[String],
    limits: &Limits,
) {
    for (i, name) in counted(errs, path, names, limits.max_placement_clusters) {
        if let Err(e) = check_cluster_name(name) {
            errs.push(e.at(&path.index(i)));
        }
    }
    check_unique(errs, path, names.iter().map(String::as_str));
}

/// Push `Required` (with `message`) when `value` is empty, else check it as one-line text of at
/// most `max_chars` characters ([`check_text`]).
pub(crate) fn check_required_text(
    errs: &mut FieldErrors,
    path: &FieldPath,
    value: &str,
    max_chars: usize,
    message: &str,
) {
    if value.is_empty() {
        errs.push(FieldError::required(path, message));
    } else if let Err(e) = check_text(value, max_chars, false) {
        errs.push(e.at(path));
    }
}

/// Push `Duplicate` errors for repeated names in a list of names, on the later occurrence.
pub(crate) fn check_unique<'a, I>(errs: &mut FieldErrors, path: &FieldPath, items: I)
where
    I: IntoIterator<Item = &'a str>,
{
    let mut seen = std::collections::HashSet::new();
    for (i, item) in items.into_iter().enumerate() {
        if !seen.insert(item) {
            errs.push(FieldError::duplicate(&path.index(i), quote(item)));
        }
    }
}

/// Push an `OutOfRange` error unless `0 <= value <= max` (or `1 <= value` if `positive`).
pub(crate) fn check_seconds(
    errs: &mut FieldErrors,
    path: &FieldPath,
    value: i64,
    positive: bool,
    max: i64,
) {
    if positive && value <= 0 {
        errs.push(FieldError::out_of_range(
            path,
            format!("must be greater than 0 (got {value})"),
        ));
    } else if value < 0 {
        errs.push(FieldError::out_of_range(
            path,
            format!("must be greater than or equal to 0 (got {value})"),
        ));
    } else if value > max {
        errs.push(FieldError::out_of_range(
            path,
            format!("must be at most {max} seconds (got {value})"),
        ));
    }
}
