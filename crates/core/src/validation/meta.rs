//! Object metadata, labels, annotations and label selectors (Kubernetes apimachinery rules).

use std::collections::BTreeMap;

use super::names::{NameError, check_label_value, check_qualified_name};
use super::{FieldError, FieldErrorKind, FieldErrors, FieldPath, Limits, check_count, counted};
use crate::types::{LabelSelector, ObjectMeta, SelectorOperator};

/// Validate a label map at `path` (e.g. `metadata.labels`): at most `max_labels` entries,
/// keys are qualified names and values are label values. Errors on one entry are reported
/// at `path[key]`.
pub fn validate_labels(
    labels: &BTreeMap<String, String>,
    path: &FieldPath,
    limits: &Limits,
) -> FieldErrors {
    let mut errs = FieldErrors::new();
    check_count(&mut errs, path, labels.len(), limits.max_labels);
    for (key, value) in labels {
        let entry = path.key(key);
        if let Err(e) = check_qualified_name(key) {
            errs.push(e.at(&entry));
        }
        if let Err(e) = check_label_value(value) {
            errs.push(e.at(&entry));
        }
    }
    errs
}

/// Validate an annotation map at `path` (e.g. `metadata.annotations`): keys are qualified
/// names (Kubernetes checks them lower-cased, so do we), and keys plus values total at most
/// `max_annotations_bytes` (256 KiB by default). Values are free-form.
pub fn validate_annotations(
    annotations: &BTreeMap<String, String>,
    path: &FieldPath,
    limits: &Limits,
) -> FieldErrors {
    let mut errs: FieldErrors = annotations
        .keys()
        .filter_map(|key| {
            let e = check_qualified_name(&key.to_ascii_lowercase()).err()?;
            Some(e.at(&path.key(key)))
        })
        .collect();
    let total = annotations.iter().fold(0usize, |total, (key, value)| {
        total.saturating_add(key.len()).saturating_add(value.len())
    });
    if total > limits.max_annotations_bytes {
        errs.push(FieldError::new(
            path,
            FieldErrorKind::TooLong,
            format!(
                "annotations may not total more than {} bytes (got {total})",
                limits.max_annotations_bytes
            ),
        ));
    }
    errs
}

/// Validate a Kubernetes label selector at `path` (e.g.
/// `spec.placement.clusterAffinity.labelSelector`): `matchLabels` as labels; each
/// `matchExpressions[i]` has a qualified-name key, `In`/`NotIn` need at least one value,
/// `Exists`/`DoesNotExist` take none, and every value is a label value.
pub fn validate_label_selector(
    selector: &LabelSelector,
    path: &FieldPath,
    limits: &Limits,
) -> FieldErrors {
    let mut errs = FieldErrors::new();
    check_count(
        &mut errs,
        path,
        selector
            .match_labels
            .len()
            .saturating_add(selector.match_expressions.len()),
        limits.max_selector_requirements,
    );
    let labels_path = path.child("matchLabels");
    for (key, value) in &selector.match_labels {
        let entry = labels_path.key(key);
        if let Err(e) = check_qualified_name(key) {
            errs.push(e.at(&entry));
        }
        if let Err(e) = check_label_value(value) {
            errs.push(e.at(&entry));
        }
    }
    let exprs_path = path.child("matchExpressions");
    for (i, req) in selector.match_expressions.iter().enumerate() {
        let req_path = exprs_path.index(i);
        if let Err(e) = check_qualified_name(&req.key) {
            errs.push(e.at(&req_path.child("key")));
        }
        let values_path = req_path.child("values");
        match req.operator {
            SelectorOperator::In | SelectorOperator::NotIn => {
                if req.values.is_empty() {
                    errs.push(FieldError::required(
                        &values_path,
                        "must be specified when `operator` is 'In' or 'NotIn'",
                    ));
                }
            }
            SelectorOperator::Exists | SelectorOperator::DoesNotExist => {
                if !req.values.is_empty() {
                    errs.push(FieldError::forbidden(
                        &values_path,
                        "may not be specified when `operator` is 'Exists' or 'DoesNotExist'",
                    ));
                }
            }
        }
        for (j, value) in counted(
            &mut errs,
            &values_path,
            &req.values,
            limits.max_selector_values,
        ) {
            if let Err(e) = check_label_value(value) {
                errs.push(e.at(&values_path.index(j)));
            }
        }
    }
    errs
}

/// Validate object metadata at `metadata`: the name with `check_name`, the namespace (a
/// DNS-1123 label when `namespaced`, absent otherwise), labels, annotations and finalizer
/// names. Server-set fields (uid, resourceVersion, generation, timestamps) are not the
/// caller's to validate.
pub(crate) fn validate_object_meta(
    meta: &ObjectMeta,
    check_name: fn(&str) -> Result<(), NameError>,
    namespaced: bool,
    limits: &Limits,
) -> FieldErrors {
    let path = FieldPath::new("metadata");
    let mut errs = FieldErrors::new();
    if let Err(e) = check_name(&meta.name) {
        errs.push(e.at(&path.child("name")));
    }
    let ns_path = path.child("namespace");
    if namespaced {
        if let Err(e) = super::names::check_dns1123_label(&meta.namespace) {
            errs.push(e.at(&ns_path));
        }
    } else if !meta.namespace.is_empty() {
        errs.push(FieldError::forbidden(
            &ns_path,
            "not allowed on cluster-scoped objects",
        ));
    }
    errs.extend(validate_labels(&meta.labels, &path.child("labels"), limits));
    errs.extend(validate_annotations(
        &meta.annotations,
        &path.child("annotations"),
        limits,
    ));
    let fin_path = path.child("finalizers");
    for (i, f) in counted(&mut errs, &fin_path, &meta.finalizers, limits.max_labels) {
        if let Err(e) = check_qualified_name(f) {
            errs.push(e.at(&fin_path.index(i)));
        }
    }
    errs.extend(validate_managed_fields(
        &meta.managed_fields,
        &path.child("managedFields"),
        limits,
    ));
    errs
}

/// The most managed-field entries an object keeps (one per manager and operation).
const MAX_MANAGED_FIELDS: usize = 64;
/// The longest field manager name (kube-apiserver's limit too).
const MAX_MANAGER_LENGTH: usize = 128;

/// Validate server-side apply's bookkeeping (kube-apiserver's rules): each entry names a
/// manager of at most 128 characters, an operation `Apply` or `Update`, the `FieldsV1` type
/// with a JSON object as its fields; together they count against the annotations' budget.
pub fn validate_managed_fields(
    entries: &[crate::types::ManagedFieldsEntry],
    path: &FieldPath,
    limits: &Limits,
) -> FieldErrors {
    let mut errs = FieldErrors::new();
    let mut total = 0usize;
    for (i, entry) in counted(&mut errs, path, entries, MAX_MANAGED_FIELDS) {
        let at = path.index(i);
        if entry.manager.is_empty() {
            errs.push(FieldError::required(&at.child("manager"), "must be set"));
        } else if entry.manager.chars().count() > MAX_MANAGER_LENGTH {
            errs.push(FieldError::too_long(
                &at.child("manager"),
                entry.manager.chars().count(),
                MAX_MANAGER_LENGTH,
            ));
        }
        if !matches!(entry.operation.as_str(), "Apply" | "Update") {
            errs.push(FieldError::not_supported(
                &at.child("operation"),
                &entry.operation,
                &["Apply", "Update"],
            ));
        }
        if entry.fields_type != "FieldsV1" {
            errs.push(FieldError::not_supported(
                &at.child("fieldsType"),
                &entry.fields_type,
                &["FieldsV1"],
            ));
        }
        if !serde_json::from_str::<serde_json::Value>(&entry.fields_v1).is_ok_and(|v| v.is_object())
        {
            errs.push(FieldError::invalid(
                &at.child("fieldsV1"),
                "must be a JSON object (the FieldsV1 format)",
            ));
        }
        total = total
            .saturating_add(entry.manager.len())
            .saturating_add(entry.fields_v1.len());
    }
    if total > limits.max_annotations_bytes {
        errs.push(FieldError::new(
            path,
            FieldErrorKind::TooLong,
            format!(
                "managed fields may not total more than {} bytes (got {total})",
                limits.max_annotations_bytes
            ),
        ));
    }
    errs
}
