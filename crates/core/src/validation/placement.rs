//! Placement: cluster affinity (PD-3.1), spread constraints (PD-3.2), replica scheduling and
//! cluster tolerations (Kubernetes toleration rules).

use std::collections::{HashMap, HashSet};

use super::meta::validate_label_selector;
use super::names::{check_affinity_name, check_label_value, check_qualified_name};
use super::{
    FieldError, FieldErrors, FieldPath, Limits, check_cluster_names, check_count, check_name_once,
    check_non_empty, check_seconds, counted, first_seen, validate_some,
};
use crate::types::{
    ClusterAffinity, FieldSelector, Placement, ReplicaSchedulingStrategy, SelectorOperator,
    SpreadConstraint, SpreadField, TaintEffect, Toleration, TolerationOperator,
};

/// The Kubernetes spelling of a selector operator.
pub(crate) fn selector_operator_str(op: SelectorOperator) -> &'static str {
    match op {
        SelectorOperator::In => "In",
        SelectorOperator::NotIn => "NotIn",
        SelectorOperator::Exists => "Exists",
        SelectorOperator::DoesNotExist => "DoesNotExist",
    }
}

/// Validate a policy's placement rooted at `spec.placement`; see [`validate_placement_at`].
pub fn validate_placement(placement: &Placement, limits: &Limits) -> FieldErrors {
    validate_placement_at(
        placement,
        &FieldPath::new("spec").child("placement"),
        limits,
    )
}

/// Validate a placement rooted at `path` (e.g. `spec.placement` of a binding):
/// - PD-3.1: `clusterAffinity` and `clusterAffinities` are exclusive (Forbidden at
///   `clusterAffinities`); affinity names are 1–32 character qualified names and unique
///   (Duplicate on the repeat); every affinity passes [`validate_cluster_affinity`];
/// - `clusterTolerations` pass [`validate_tolerations`];
/// - PD-3.2 spread constraints: field and label exclusive (Forbidden at `spreadByLabel`),
///   label a qualified name, `minGroups`/`maxGroups` in `0..=max_placement_clusters`
///   (OutOfRange), `maxGroups ≥ minGroups` when `maxGroups > 0` (Invalid at `maxGroups`),
///   one constraint per field (Duplicate at `spreadByField`), and a `cluster` constraint
///   whenever a field constraint is used (Required at `spreadConstraints`);
/// - replica scheduling: every static weight ≥ 1 (OutOfRange), the weights' sum fits in
///   i64 (OutOfRange at `staticWeightList`), duplicate static-weight targets are rejected
///   where detectable (an identical `targetCluster`, or a cluster listed in the
///   `clusterNames` of two name-only targets), each target a valid affinity.
///
/// As in Karmada (whose scheduler ignores them), a division preference or weights given with
/// `Duplicated` are accepted, so that Karmada YAML applies unchanged (docs/design.md §4); their
/// contents are still validated.
pub fn validate_placement_at(
    placement: &Placement,
    path: &FieldPath,
    limits: &Limits,
) -> FieldErrors {
    let mut errs = FieldErrors::new();

    // PD-3.1
    let terms_path = path.child("clusterAffinities");
    if placement.cluster_affinity.is_some() && !placement.cluster_affinities.is_empty() {
        errs.push(FieldError::forbidden(
            &terms_path,
            "clusterAffinities cannot co-exist with clusterAffinity",
        ));
    }
    errs.extend(validate_some(
        placement.cluster_affinity.as_ref(),
        &path.child("clusterAffinity"),
        limits,
        validate_cluster_affinity,
    ));
    let mut names = HashSet::new();
    for (i, term) in counted(
        &mut errs,
        &terms_path,
        &placement.cluster_affinities,
        limits.max_affinity_terms,
    ) {
        let p = terms_path.index(i);
        let name_path = p.child("affinityName");
        check_name_once(
            &mut errs,
            &mut names,
            &term.affinity_name,
            &name_path,
            check_affinity_name,
            || "each affinity term in a policy must have a unique name".to_owned(),
        );
        // The term's affinity is inlined in Karmada's JSON.
        errs.extend(validate_cluster_affinity(&term.affinity, &p, limits));
    }

    errs.extend(validate_tolerations(
        &placement.cluster_tolerations,
        &path.child("clusterTolerations"),
        limits,
    ));
    check_spread_constraints(
        &mut errs,
        &placement.spread_constraints,
        &path.child("spreadConstraints"),
        limits,
    );
    if let Some(strategy) = &placement.replica_scheduling {
        check_replica_scheduling(
            &mut errs,
            strategy,
            &path.child("replicaScheduling"),
            limits,
        );
    }
    errs
}

/// Validate a cluster affinity at `path`: `labelSelector` (see
/// [`validate_label_selector`](super::validate_label_selector)); `fieldSelector` keys are
/// provider, region or zone with operator In or NotIn (NotSupported otherwise), at least one
/// value, values label values; `clusterNames` and `exclude` are cluster names, unique, at
/// most `max_placement_clusters` each.
pub fn validate_cluster_affinity(
    affinity: &ClusterAffinity,
    path: &FieldPath,
    limits: &Limits,
) -> FieldErrors {
    let mut errs = FieldErrors::new();
    errs.extend(validate_some(
        affinity.label_selector.as_ref(),
        &path.child("labelSelector"),
        limits,
        validate_label_selector,
    ));
    if let Some(selector) = &affinity.field_selector {
        check_field_selector(&mut errs, selector, &path.child("fieldSelector"), limits);
    }
    for (list, name) in [
        (&affinity.cluster_names, "clusterNames"),
        (&affinity.exclude, "exclude"),
    ] {
        check_cluster_names(&mut errs, &path.child(name), list, limits);
    }
    errs
}

/// Push NotSupported at `path` unless `operator` is In or NotIn (the operators of field
/// selectors and of ClusterTaintPolicy match conditions).
pub(super) fn check_in_or_not_in(
    errs: &mut FieldErrors,
    operator: SelectorOperator,
    path: &FieldPath,
) {
    if !matches!(operator, SelectorOperator::In | SelectorOperator::NotIn) {
        errs.push(FieldError::not_supported(
            path,
            selector_operator_str(operator),
            &["In", "NotIn"],
        ));
    }
}

fn check_field_selector(
    errs: &mut FieldErrors,
    selector: &FieldSelector,
    path: &FieldPath,
    limits: &Limits,
) {
    let exprs = path.child("matchExpressions");
    for (i, req) in counted(
        errs,
        &exprs,
        &selector.match_expressions,
        limits.max_selector_requirements,
    ) {
        let p = exprs.index(i);
        if !matches!(req.key.as_str(), "provider" | "region" | "zone") {
            errs.push(FieldError::not_supported(
                &p.child("key"),
                &req.key,
                &["provider", "region", "zone"],
            ));
        }
        check_in_or_not_in(errs, req.operator, &p.child("operator"));
        let values = p.child("values");
        check_non_empty(
            errs,
            &values,
            req.values.len(),
            "at least one value is required",
        );
        for (j, value) in counted(errs, &values, &req.values, limits.max_selector_values) {
            if let Err(e) = check_label_value(value) {
                errs.push(e.at(&values.index(j)));
            }
        }
    }
}

/// Validate one toleration at `path` with Kubernetes' rules (Karmada does not run them on
/// `clusterTolerations`; docs/reliability.md (bad input) says we should):
/// - a non-empty key is a qualified name;
/// - an empty key requires operator Exists (Invalid at `operator`);
/// - Exists with a non-empty value is Invalid at `operator`
///   ("value must be empty when `operator` is 'Exists'");
/// - with Equal the value is a label value;
/// - `tolerationSeconds` only with effect NoExecute (Invalid at `effect`), and within
///   `0..=max_duration_seconds` (OutOfRange): a negative value would mean "evict now" in
///   Kubernetes, which we forbid.
pub fn validate_toleration(
    toleration: &Toleration,
    path: &FieldPath,
    limits: &Limits,
) -> FieldErrors {
    let mut errs = validate_toleration_match(toleration, path);
    if let Some(seconds) = toleration.toleration_seconds {
        if toleration.effect != Some(TaintEffect::NoExecute) {
            errs.push(FieldError::invalid(
                &path.child("effect"),
                "effect must be 'NoExecute' when `tolerationSeconds` is set",
            ));
        }
        check_seconds(
            &mut errs,
            &path.child("tolerationSeconds"),
            seconds,
            false,
            limits.max_duration_seconds,
        );
    }
    errs
}

/// The match part of a toleration (see [`validate_toleration`]): key, operator and value.
fn validate_toleration_match(toleration: &Toleration, path: &FieldPath) -> FieldErrors {
    let mut errs = FieldErrors::new();
    let operator = path.child("operator");
    if toleration.key.is_empty() {
        if toleration.operator != TolerationOperator::Exists {
            errs.push(FieldError::invalid(
                &operator,
                "operator must be Exists when `key` is empty, which means \"match all values \
                 and all keys\"",
            ));
        }
    } else if let Err(e) = check_qualified_name(&toleration.key) {
        errs.push(e.at(&path.child("key")));
    }
    match toleration.operator {
        TolerationOperator::Equal => {
            if let Err(e) = check_label_value(&toleration.value) {
                errs.push(e.at(&path.child("value")));
            }
        }
        TolerationOperator::Exists => {
            if !toleration.value.is_empty() {
                errs.push(FieldError::invalid(
                    &operator,
                    "value must be empty when `operator` is 'Exists'",
                ));
            }
        }
    }
    errs
}

/// Validate a toleration list at `path` (normally `spec.placement.clusterTolerations`): at
/// most `max_tolerations` (TooMany at `path`), each passing [`validate_toleration`] at
/// `path[i]`.
pub fn validate_tolerations(
    tolerations: &[Toleration],
    path: &FieldPath,
    limits: &Limits,
) -> FieldErrors {
    let mut errs = FieldErrors::new();
    for (i, t) in counted(&mut errs, path, tolerations, limits.max_tolerations) {
        errs.extend(validate_toleration(t, &path.index(i), limits));
    }
    errs
}

fn spread_field_str(field: SpreadField) -> &'static str {
    match field {
        SpreadField::Cluster => "cluster",
        SpreadField::Region => "region",
        SpreadField::Zone => "zone",
        SpreadField::Provider => "provider",
    }
}

/// PD-3.2 (Karmada `ValidateSpreadConstraint`).
fn check_spread_constraints(
    errs: &mut FieldErrors,
    constraints: &[SpreadConstraint],
    path: &FieldPath,
    limits: &Limits,
) {
    let max_groups = i64::try_from(limits.max_placement_clusters).unwrap_or(i64::MAX);
    let mut fields = HashSet::new();
    for (i, c) in counted(errs, path, constraints, limits.max_spread_constraints) {
        let p = path.index(i);
        if !c.spread_by_label.is_empty() {
            let label = p.child("spreadByLabel");
            if c.spread_by_field.is_some() {
                errs.push(FieldError::forbidden(
                    &label,
                    "spreadByLabel should not co-exist with spreadByField",
                ));
            }
            if let Err(e) = check_qualified_name(&c.spread_by_label) {
                errs.push(e.at(&label));
            }
        }
        for (value, name) in [(c.min_groups, "minGroups"), (c.max_groups, "maxGroups")] {
            let value = i64::from(value);
            if value < 0 {
                errs.push(FieldError::out_of_range(
                    &p.child(name),
                    format!("{name} lower than 0 is not allowed (got {value})"),
                ));
            } else if value > max_groups {
                errs.push(FieldError::out_of_range(
                    &p.child(name),
                    format!("{name} may not exceed {max_groups} (got {value})"),
                ));
            }
        }
        if c.max_groups > 0 && c.max_groups < c.min_groups {
            errs.push(FieldError::invalid(
                &p.child("maxGroups"),
                format!(
                    "maxGroups ({}) lower than minGroups ({}) is not allowed",
                    c.max_groups, c.min_groups
                ),
            ));
        }
        if let Some(field) = c.spread_by_field
            && !fields.insert(field)
        {
            errs.push(FieldError::duplicate(
                &p.child("spreadByField"),
                format!(
                    "multiple {} spread constraints are not allowed",
                    spread_field_str(field)
                ),
            ));
        }
    }
    if !fields.is_empty() && !fields.contains(&SpreadField::Cluster) {
        errs.push(FieldError::required(
            path,
            "a spreadByField: cluster constraint is required when spreading by field",
        ));
    }
}

fn check_replica_scheduling(
    errs: &mut FieldErrors,
    strategy: &ReplicaSchedulingStrategy,
    path: &FieldPath,
    limits: &Limits,
) {
    let Some(prefs) = &strategy.weight_preference else {
        return;
    };
    let list_path = path.child("weightPreference").child("staticWeightList");
    let list = &prefs.static_weight_list;
    check_count(errs, &list_path, list.len(), limits.max_placement_clusters);
    let mut sum: Option<i64> = Some(0);
    // A cluster name listed by a name-only target → index of that target.
    let mut named: HashMap<&str, usize> = HashMap::new();
    for (i, entry) in list.iter().enumerate() {
        let p = list_path.index(i);
        let target = p.child("targetCluster");
        if entry.weight < 1 {
            errs.push(FieldError::out_of_range(
                &p.child("weight"),
                format!("must be greater than or equal to 1 (got {})", entry.weight),
            ));
        } else {
            sum = sum.and_then(|s| s.checked_add(entry.weight));
        }
        errs.extend(validate_cluster_affinity(
            &entry.target_cluster,
            &target,
            limits,
        ));
        // Quadratic, so only within the cap (an over-long list is already rejected).
        let identical = if list.len() <= limits.max_placement_clusters {
            list[..i]
                .iter()
                .position(|e| e.target_cluster == entry.target_cluster)
        } else {
            None
        };
        if let Some(j) = identical {
            errs.push(FieldError::duplicate(
                &target,
                format!("same targetCluster as staticWeightList[{j}]"),
            ));
            continue;
        }
        let t = &entry.target_cluster;
        if t.label_selector.is_none() && t.field_selector.is_none() {
            for (k, name) in t.cluster_names.iter().enumerate() {
                if t.exclude.contains(name) {
                    continue;
                }
                if let Some(j) = first_seen(&mut named, name, i)
                    && j != i
                {
                    errs.push(FieldError::duplicate(
                        &target.child("clusterNames").index(k),
                        format!(
                            "cluster {} already has a weight in staticWeightList[{j}]",
                            super::quote(name)
                        ),
                    ));
                }
            }
        }
    }
    if sum.is_none() {
        errs.push(FieldError::out_of_range(
            &list_path,
            "the sum of the weights overflows int64",
        ));
    }
}
