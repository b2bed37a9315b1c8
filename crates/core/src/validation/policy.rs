//! Failover behaviour (PD-3.3) and PropagationPolicy / ClusterPropagationPolicy.

use std::collections::HashSet;

use super::meta::{validate_annotations, validate_labels};
use super::meta::{validate_label_selector, validate_object_meta};
use super::names::{
    check_api_version, check_dns1123_label, check_dns1123_subdomain, check_kind,
    check_path_segment_name, check_qualified_name,
};
use super::placement::{validate_cluster_affinity, validate_placement_at};
use super::{
    FieldError, FieldErrors, FieldPath, Limits, check_name_once, check_required_text,
    check_seconds, counted, validate_some,
};
use crate::overrides::{Operator, OverridePolicy, Overriders, PatchOperation};
use crate::types::{
    ApplicationFailoverBehavior, ClusterFailoverBehavior, DEFAULT_SCHEDULER_NAME, FailoverBehavior,
    ObjectMeta, PropagationPolicy, PurgeMode, ResourceSelector, StatePreservationRule,
};

/// Label holding a PropagationPolicy's permanent id (PD-1.6); immutable once set.
pub const PERMANENT_ID_LABEL_POLICY: &str = "propagationpolicy.karmada.io/permanent-id";
/// Label holding a ClusterPropagationPolicy's permanent id (PD-1.6); immutable once set.
pub const PERMANENT_ID_LABEL_CLUSTER_POLICY: &str =
    "clusterpropagationpolicy.karmada.io/permanent-id";

/// Maximum length of a state-preservation `jsonPath` (Flotilla choice).
const JSON_PATH_MAX_LEN: usize = 1024;

/// Validate a policy's failover behaviour rooted at `spec.failover` (PD-3.3, PD-4), plus the
/// rule that application failover requires `spec.propagateDeps` (Invalid at
/// `spec.propagateDeps` when `propagate_deps` is false). See [`validate_failover_at`].
pub fn validate_failover(
    failover: &FailoverBehavior,
    propagate_deps: bool,
    limits: &Limits,
) -> FieldErrors {
    let spec = FieldPath::new("spec");
    let mut errs = validate_failover_at(failover, &spec.child("failover"), limits);
    if failover.application.is_some() && !propagate_deps {
        errs.push(FieldError::invalid(
            &spec.child("propagateDeps"),
            "application failover is set, propagateDeps must be true",
        ));
    }
    errs
}

/// Validate a failover behaviour rooted at `path` (PD-3.3), expecting defaulted input:
/// - `application.decisionConditions.tolerationSeconds` in `0..=max_duration_seconds`;
/// - `application.gracePeriodSeconds` Required when the purge mode is Gracefully (an unset
///   mode is Gracefully, PD-2), Forbidden with Directly or Never, and in
///   `1..=max_duration_seconds` (OutOfRange);
/// - `cluster.purgeMode` is Directly or Gracefully (Never is application-only:
///   NotSupported);
/// - `cluster.failback.stabilizationWindowSeconds` (A11) in `0..=max_duration_seconds`;
/// - every `statePreservation.rules[i]` has a qualified-name `aliasLabelName` (unique within
///   its list) and a non-empty `jsonPath`.
pub fn validate_failover_at(
    failover: &FailoverBehavior,
    path: &FieldPath,
    limits: &Limits,
) -> FieldErrors {
    let mut errs = FieldErrors::new();
    if let Some(app) = &failover.application {
        check_application_failover(&mut errs, app, &path.child("application"), limits);
    }
    if let Some(cluster) = &failover.cluster {
        check_cluster_failover(&mut errs, cluster, &path.child("cluster"), limits);
    }
    errs
}

fn check_application_failover(
    errs: &mut FieldErrors,
    app: &ApplicationFailoverBehavior,
    path: &FieldPath,
    limits: &Limits,
) {
    if let Some(seconds) = app.toleration_seconds {
        check_seconds(
            errs,
            &path.child("decisionConditions").child("tolerationSeconds"),
            seconds,
            false,
            limits.max_duration_seconds,
        );
    }
    let purge_mode = app.purge_mode.unwrap_or(PurgeMode::Gracefully);
    let grace = path.child("gracePeriodSeconds");
    match (purge_mode, app.grace_period_seconds) {
        (PurgeMode::Gracefully, None) => {
            errs.push(FieldError::required(
                &grace,
                "must be set when purgeMode is Gracefully",
            ));
        }
        (PurgeMode::Directly | PurgeMode::Never, Some(_)) => {
            errs.push(FieldError::forbidden(
                &grace,
                format!(
                    "only takes effect when purgeMode is Gracefully (purgeMode is {})",
                    purge_mode.as_str()
                ),
            ));
        }
        _ => {}
    }
    if let Some(seconds) = app.grace_period_seconds {
        check_seconds(errs, &grace, seconds, true, limits.max_duration_seconds);
    }
    check_state_preservation(
        errs,
        &app.state_preservation,
        &path.child("statePreservation"),
        limits,
    );
}

fn check_cluster_failover(
    errs: &mut FieldErrors,
    cluster: &ClusterFailoverBehavior,
    path: &FieldPath,
    limits: &Limits,
) {
    if cluster.purge_mode == Some(PurgeMode::Never) {
        errs.push(FieldError::not_supported(
            &path.child("purgeMode"),
            PurgeMode::Never.as_str(),
            &[PurgeMode::Directly.as_str(), PurgeMode::Gracefully.as_str()],
        ));
    }
    if let Some(seconds) = cluster.failback_stabilization_window_seconds {
        check_seconds(
            errs,
            &path.child("failback").child("stabilizationWindowSeconds"),
            seconds,
            false,
            limits.max_duration_seconds,
        );
    }
    check_state_preservation(
        errs,
        &cluster.state_preservation,
        &path.child("statePreservation"),
        limits,
    );
}

fn check_state_preservation(
    errs: &mut FieldErrors,
    rules: &[StatePreservationRule],
    path: &FieldPath,
    limits: &Limits,
) {
    let rules_path = path.child("rules");
    let mut aliases = HashSet::new();
    for (i, rule) in counted(
        errs,
        &rules_path,
        rules,
        limits.max_state_preservation_rules,
    ) {
        let p = rules_path.index(i);
        let alias = p.child("aliasLabelName");
        check_name_once(
            errs,
            &mut aliases,
            &rule.alias_label_name,
            &alias,
            check_qualified_name,
            || {
                format!(
                    "{} is already used by another rule",
                    super::quote(&rule.alias_label_name)
                )
            },
        );
        check_required_text(
            errs,
            &p.child("jsonPath"),
            &rule.json_path,
            JSON_PATH_MAX_LEN,
            "a JSONPath into the status is required",
        );
        // TM-10.1: only the subset that names one value is evaluated
        if !rule.json_path.is_empty()
            && let Err(reason) = crate::preserve::parse_json_path(&rule.json_path)
        {
            errs.push(FieldError::invalid(
                &p.child("jsonPath"),
                format!("not a supported JSONPath: {reason}"),
            ));
        }
    }
}

/// Validate a PropagationPolicy (`cluster_wide == false`) or ClusterPropagationPolicy
/// (`cluster_wide == true`), expecting defaulted input (PD-1, PD-2):
/// - `metadata.name` is a DNS-1123 subdomain; `metadata.namespace` is a DNS-1123 label for
///   a namespaced policy and absent (Forbidden) for a cluster-wide one;
/// - `spec.resourceSelectors` has 1..=`max_resource_selectors` entries, each with a
///   well-formed `apiVersion` and `kind` (Required when empty), a valid optional `name` and
///   `labelSelector`, and, for a namespaced policy, a `namespace` that is empty or equal to
///   the policy's (Forbidden otherwise);
/// - `spec.placement` passes [`validate_placement_at`]; `spec.failover` passes
///   [`validate_failover`] (which also needs `spec.propagateDeps`);
/// - `spec.schedulerName`, when set, is a DNS-1123 subdomain.
///
/// `spec.priority` is any int32, as in Karmada. On update, also call
/// [`validate_propagation_policy_update`].
pub fn validate_propagation_policy(
    policy: &PropagationPolicy,
    cluster_wide: bool,
    limits: &Limits,
) -> FieldErrors {
    let mut errs = validate_policy_head(
        &policy.meta,
        &policy.spec.resource_selectors,
        cluster_wide,
        true,
        limits,
    );
    let spec = FieldPath::new("spec");
    errs.extend(validate_placement_at(
        &policy.spec.placement,
        &spec.child("placement"),
        limits,
    ));
    if let Some(failover) = &policy.spec.failover {
        errs.extend(validate_failover(
            failover,
            policy.spec.propagate_deps,
            limits,
        ));
    }
    if !policy.spec.scheduler_name.is_empty()
        && let Err(e) = check_dns1123_subdomain(&policy.spec.scheduler_name)
    {
        errs.push(e.at(&spec.child("schedulerName")));
    }
    errs
}

/// What every policy kind starts with: `metadata` (a DNS-1123 subdomain name, namespaced
/// unless `cluster_wide`) and `spec.resourceSelectors` (at least one when `required`, at
/// most `max_resource_selectors`, each within the policy's namespace when namespaced).
fn validate_policy_head(
    meta: &ObjectMeta,
    selectors: &[ResourceSelector],
    cluster_wide: bool,
    required: bool,
    limits: &Limits,
) -> FieldErrors {
    let mut errs = validate_object_meta(meta, check_dns1123_subdomain, !cluster_wide, limits);
    let path = FieldPath::new("spec").child("resourceSelectors");
    if required && selectors.is_empty() {
        errs.push(FieldError::required(
            &path,
            "at least one resource selector is required",
        ));
    }
    let policy_namespace = (!cluster_wide).then_some(meta.namespace.as_str());
    for (i, selector) in counted(&mut errs, &path, selectors, limits.max_resource_selectors) {
        check_resource_selector(
            &mut errs,
            selector,
            &path.index(i),
            policy_namespace,
            limits,
        );
    }
    errs
}

fn check_resource_selector(
    errs: &mut FieldErrors,
    selector: &ResourceSelector,
    path: &FieldPath,
    policy_namespace: Option<&str>,
    limits: &Limits,
) {
    if let Err(e) = check_api_version(&selector.api_version) {
        errs.push(e.at(&path.child("apiVersion")));
    }
    if let Err(e) = check_kind(&selector.kind) {
        errs.push(e.at(&path.child("kind")));
    }
    if !selector.namespace.is_empty() {
        let ns = path.child("namespace");
        match policy_namespace {
            Some(policy_ns) if selector.namespace != policy_ns => {
                errs.push(FieldError::forbidden(
                    &ns,
                    format!(
                        "{} must equal the policy's namespace {}",
                        super::quote(&selector.namespace),
                        super::quote(policy_ns)
                    ),
                ));
            }
            _ => {
                if let Err(e) = check_dns1123_label(&selector.namespace) {
                    errs.push(e.at(&ns));
                }
            }
        }
    }
    if !selector.name.is_empty()
        && let Err(e) = check_path_segment_name(&selector.name)
    {
        errs.push(e.at(&path.child("name")));
    }
    errs.extend(validate_some(
        selector.label_selector.as_ref(),
        &path.child("labelSelector"),
        limits,
        validate_label_selector,
    ));
}

/// The update-only rules of a (Cluster)PropagationPolicy; call
/// [`validate_propagation_policy`] on `new` as well:
/// - `spec.schedulerName` is immutable (an empty name counts as `default-scheduler`, PD-2);
/// - `metadata.name` and `metadata.namespace` are immutable;
/// - the permanent-id label (PD-1.6), once set, is immutable.
///
/// All are Forbidden errors.
pub fn validate_propagation_policy_update(
    old: &PropagationPolicy,
    new: &PropagationPolicy,
) -> FieldErrors {
    let mut errs = FieldErrors::new();
    let scheduler = |p: &PropagationPolicy| -> String {
        if p.spec.scheduler_name.is_empty() {
            DEFAULT_SCHEDULER_NAME.to_owned()
        } else {
            p.spec.scheduler_name.clone()
        }
    };
    if scheduler(old) != scheduler(new) {
        errs.push(FieldError::forbidden(
            &FieldPath::new("spec").child("schedulerName"),
            "the schedulerName should not be updated",
        ));
    }
    let meta = FieldPath::new("metadata");
    if old.meta.name != new.meta.name {
        errs.push(FieldError::forbidden(
            &meta.child("name"),
            "field is immutable",
        ));
    }
    if old.meta.namespace != new.meta.namespace {
        errs.push(FieldError::forbidden(
            &meta.child("namespace"),
            "field is immutable",
        ));
    }
    for key in [PERMANENT_ID_LABEL_POLICY, PERMANENT_ID_LABEL_CLUSTER_POLICY] {
        if let Some(old_id) = old.meta.labels.get(key)
            && new.meta.labels.get(key) != Some(old_id)
        {
            errs.push(FieldError::forbidden(
                &meta.child("labels").key(key),
                "the permanent id is immutable",
            ));
        }
    }
    errs
}

/// Validate an OverridePolicy (`cluster_wide == false`) or ClusterOverridePolicy (OV-1,
/// Karmada's webhook):
/// - metadata as for propagation policies;
/// - `spec.resourceSelectors` may be empty (the policy then adapts every template in its
///   scope); each one as for propagation policies;
/// - each rule's `targetCluster` is a valid cluster affinity;
/// - plaintext paths and JSON/YAML sub-paths are JSON pointers; `add` and `replace` need a
///   value, `remove` takes none;
/// - image predicate paths and field paths are JSON pointers; command and args overriders
///   name a container and only `add` or `remove`;
/// - labelsOverrider values are labels, annotationsOverrider values annotations.
pub fn validate_override_policy(
    policy: &OverridePolicy,
    cluster_wide: bool,
    limits: &Limits,
) -> FieldErrors {
    let mut errs = validate_policy_head(
        &policy.meta,
        &policy.spec.resource_selectors,
        cluster_wide,
        false,
        limits,
    );
    let spec = FieldPath::new("spec");
    let rules = spec.child("overrideRules");
    for (i, rule) in counted(
        &mut errs,
        &rules,
        &policy.spec.override_rules,
        limits.max_resource_selectors,
    ) {
        let path = rules.index(i);
        errs.extend(validate_some(
            rule.target_cluster.as_ref(),
            &path.child("targetCluster"),
            limits,
            validate_cluster_affinity,
        ));
        check_overriders(
            &mut errs,
            &rule.overriders,
            &path.child("overriders"),
            limits,
        );
    }
    errs
}

fn check_pointer(errs: &mut FieldErrors, pointer: &str, path: &FieldPath) {
    if !pointer.is_empty() && !pointer.starts_with('/') {
        errs.push(FieldError::invalid(
            path,
            format!(
                "{} is not a JSON pointer: it must be empty or start with /",
                super::quote(pointer)
            ),
        ));
    }
}

fn check_patch(errs: &mut FieldErrors, op: &PatchOperation, path: &FieldPath, path_field: &str) {
    check_pointer(errs, &op.path, &path.child(path_field));
    match (op.operator, &op.value) {
        (Operator::Add | Operator::Replace, None) => errs.push(FieldError::invalid(
            &path.child("value"),
            "value is required for add or replace operation",
        )),
        (Operator::Remove, Some(_)) => errs.push(FieldError::invalid(
            &path.child("value"),
            "value is not allowed for remove operation",
        )),
        _ => {}
    }
}

fn check_overriders(errs: &mut FieldErrors, o: &Overriders, path: &FieldPath, limits: &Limits) {
    for (i, p) in o.plaintext.iter().enumerate() {
        check_patch(errs, p, &path.child("plaintext").index(i), "path");
    }
    for (i, image) in o.image.iter().enumerate() {
        if let Some(pointer) = &image.predicate_path {
            let at = path.child("imageOverrider").index(i).child("predicate");
            check_pointer(errs, pointer, &at.child("path"));
        }
    }
    for (field, list) in [("commandOverrider", &o.command), ("argsOverrider", &o.args)] {
        for (i, c) in list.iter().enumerate() {
            let at = path.child(field).index(i);
            if c.container_name.is_empty() {
                errs.push(FieldError::required(
                    &at.child("containerName"),
                    "the container to change is required",
                ));
            }
            if c.operator == Operator::Replace {
                errs.push(FieldError::not_supported(
                    &at.child("operator"),
                    "replace",
                    &["add", "remove"],
                ));
            }
        }
    }
    for (i, l) in o.labels.iter().enumerate() {
        let at = path.child("labelsOverrider").index(i).child("value");
        errs.extend(validate_labels(&l.value, &at, limits));
    }
    for (i, a) in o.annotations.iter().enumerate() {
        let at = path.child("annotationsOverrider").index(i).child("value");
        errs.extend(validate_annotations(&a.value, &at, limits));
    }
    for (i, f) in o.field.iter().enumerate() {
        let at = path.child("fieldOverrider").index(i);
        check_pointer(errs, &f.field_path, &at.child("fieldPath"));
        let list = if f.yaml { "yaml" } else { "json" };
        for (j, p) in f.operations.iter().enumerate() {
            check_patch(errs, p, &at.child(list).index(j), "subPath");
        }
    }
}
