//! Cluster, cluster taints and ClusterTaintPolicy (docs/reliability.md (bad input), CH-16).

use std::collections::{HashMap, HashSet};

use super::meta::validate_object_meta;
use super::names::{
    check_cluster_name, check_dns1123_subdomain, check_label_value, check_qualified_name,
};
use super::placement::{check_in_or_not_in, validate_cluster_affinity};
use super::{
    FieldError, FieldErrors, FieldPath, Limits, check_count, check_non_empty, counted, quote,
    validate_some,
};
use crate::types::{Cluster, ClusterTaintPolicy, MatchCondition, Taint, TaintEffect};

/// Validate a Cluster as a user submits it (docs/reliability.md (bad input), Karmada
/// `pkg/apis/cluster/validation`):
/// - `metadata.name` is a cluster name (non-empty, ≤ 48, DNS-1123 label); no namespace;
///   labels, annotations and finalizers are well-formed;
/// - `spec.apiEndpoint`, when set, is an http(s) URL with a host and without userinfo, query
///   or fragment (see [`validate_api_endpoint`]); as in Karmada it may be empty;
/// - `spec.provider`, `spec.region` and each of `spec.zones` are label values; zones are
///   non-empty and unique;
/// - `spec.taints` pass [`validate_cluster_taints`];
/// - `spec.resourceModels` pass [`validate_resource_models`].
///
/// `status` is owned by cluster-health and is not validated here.
pub fn validate_cluster(cluster: &Cluster, limits: &Limits) -> FieldErrors {
    let mut errs = validate_object_meta(&cluster.meta, check_cluster_name, false, limits);
    let spec = FieldPath::new("spec");
    if !cluster.spec.api_endpoint.is_empty() {
        errs.extend(validate_api_endpoint(
            &cluster.spec.api_endpoint,
            &spec.child("apiEndpoint"),
        ));
    }
    if let Err(e) = check_label_value(&cluster.spec.provider) {
        errs.push(e.at(&spec.child("provider")));
    }
    if let Err(e) = check_label_value(&cluster.spec.region) {
        errs.push(e.at(&spec.child("region")));
    }
    let zones = spec.child("zones");
    for (i, zone) in counted(&mut errs, &zones, &cluster.spec.zones, limits.max_zones) {
        if zone.is_empty() {
            errs.push(FieldError::required(
                &zones.index(i),
                "a zone must not be empty",
            ));
        } else if let Err(e) = check_label_value(zone) {
            errs.push(e.at(&zones.index(i)));
        }
    }
    super::check_unique(
        &mut errs,
        &zones,
        cluster.spec.zones.iter().map(String::as_str),
    );
    errs.extend(validate_cluster_taints(
        &cluster.spec.taints,
        &spec.child("taints"),
        limits,
    ));
    errs.extend(validate_resource_models(
        &cluster.spec.resource_models,
        &spec.child("resourceModels"),
    ));
    errs
}

/// The most grades of resource models a cluster declares (Karmada's defaults have 9).
pub const MAX_RESOURCE_MODELS: usize = 64;
/// The most resources one grade ranges over.
pub const MAX_MODEL_RANGES: usize = 16;

/// ES-4.1, Karmada's `ValidateClusterResourceModels`, on standardized models (sorted by
/// grade, the first grade's mins 0, the last grade's maxes unbounded): at most
/// [`MAX_RESOURCE_MODELS`] grades of at most [`MAX_MODEL_RANGES`] ranges; neighbouring grades
/// differ; every grade has ranges, as many as the first, over the same resources in the same
/// order (each named once); each range has max > min; each grade starts where the one before
/// it ends (its min is the previous max).
pub fn validate_resource_models(
    models: &[crate::capacity::ResourceModel],
    path: &FieldPath,
) -> FieldErrors {
    let mut errs = FieldErrors::new();
    if models.len() > MAX_RESOURCE_MODELS {
        check_count(&mut errs, path, models.len(), MAX_RESOURCE_MODELS);
        return errs;
    }
    let Some(first) = models.first() else {
        return errs;
    };
    for (i, model) in models.iter().enumerate() {
        let p = path.index(i);
        let ranges = p.child("ranges");
        if model.ranges.is_empty() {
            errs.push(FieldError::required(&ranges, "a grade needs its ranges"));
            continue;
        }
        check_count(&mut errs, &ranges, model.ranges.len(), MAX_MODEL_RANGES);
        if i > 0 && models[i - 1].grade == model.grade {
            errs.push(FieldError::invalid(
                &p.child("grade"),
                format!(
                    "grade {} is repeated: neighbouring grades must differ",
                    model.grade
                ),
            ));
        }
        if model.ranges.len() != first.ranges.len() {
            errs.push(FieldError::invalid(
                &ranges,
                format!(
                    "every grade ranges over the same resources: {} here, {} in the first grade",
                    model.ranges.len(),
                    first.ranges.len()
                ),
            ));
            continue;
        }
        let mut names = HashSet::new();
        for (j, range) in model.ranges.iter().enumerate() {
            let r = ranges.index(j);
            if range.name.is_empty() {
                errs.push(FieldError::required(
                    &r.child("name"),
                    "a range names its resource",
                ));
            } else if !names.insert(range.name.as_str()) {
                errs.push(FieldError::invalid(
                    &r.child("name"),
                    format!("{} is repeated in this grade", quote(&range.name)),
                ));
            }
            if range.name != first.ranges[j].name {
                errs.push(FieldError::invalid(
                    &r.child("name"),
                    format!(
                        "must be {} (every grade lists the same resources in the same order)",
                        quote(&first.ranges[j].name)
                    ),
                ));
            }
            if range.max <= range.min {
                errs.push(FieldError::invalid(
                    &r.child("max"),
                    "must be greater than min (a range is [min, max))",
                ));
            }
            if i > 0
                && let Some(before) = models[i - 1].ranges.get(j)
                && before.max != range.min
            {
                errs.push(FieldError::invalid(
                    &r.child("min"),
                    format!(
                        "must be the previous grade's max for {} (grades join without gaps)",
                        quote(&range.name)
                    ),
                ));
            }
        }
    }
    errs
}

/// Validate a cluster's taints at `path` (normally `spec.taints`; Karmada's lift of
/// Kubernetes' node-taint rules): at most `max_cluster_taints`; each key is a qualified
/// name, each value a label value; the effect is NoSchedule or NoExecute (PreferNoSchedule
/// is NotSupported on clusters); taints are unique by (key, effect), a repeat being reported
/// as Duplicate at `path[i]`.
pub fn validate_cluster_taints(taints: &[Taint], path: &FieldPath, limits: &Limits) -> FieldErrors {
    let mut errs = FieldErrors::new();
    let mut seen = TaintIdentities::default();
    for (i, taint) in counted(&mut errs, path, taints, limits.max_cluster_taints) {
        let p = path.index(i);
        check_taint_fields(&mut errs, &p, &taint.key, &taint.value, taint.effect);
        seen.check(&mut errs, &p, &taint.key, taint.effect, |id| {
            format!("taints must be unique by key and effect: {id} is repeated")
        });
    }
    errs
}

/// The taint identities (key, effect; CH-12.1) seen so far in one list.
#[derive(Default)]
struct TaintIdentities<'a>(HashSet<(&'a str, TaintEffect)>);

impl<'a> TaintIdentities<'a> {
    /// Push `Duplicate` at `path` when `key:effect` was seen before in the list; `message`
    /// words the error from the quoted `key:effect`.
    fn check(
        &mut self,
        errs: &mut FieldErrors,
        path: &FieldPath,
        key: &'a str,
        effect: TaintEffect,
        message: fn(&str) -> String,
    ) {
        if !self.0.insert((key, effect)) {
            let id = format!("{}:{}", quote(key), effect.as_str());
            errs.push(FieldError::duplicate(path, message(&id)));
        }
    }
}

/// Key, value and effect checks shared by cluster taints and ClusterTaintPolicy taints.
fn check_taint_fields(
    errs: &mut FieldErrors,
    path: &FieldPath,
    key: &str,
    value: &str,
    effect: TaintEffect,
) {
    if let Err(e) = check_qualified_name(key) {
        errs.push(e.at(&path.child("key")));
    }
    if let Err(e) = check_label_value(value) {
        errs.push(e.at(&path.child("value")));
    }
    if effect == TaintEffect::PreferNoSchedule {
        errs.push(FieldError::not_supported(
            &path.child("effect"),
            effect.as_str(),
            &[
                TaintEffect::NoSchedule.as_str(),
                TaintEffect::NoExecute.as_str(),
            ],
        ));
    }
}

/// Validate a cluster `apiEndpoint` at `path`, parsed by hand (Karmada
/// `ValidateClusterAPIEndpoint`): an absolute `http://` or `https://` URL with a host (a DNS
/// name, an IPv4 address or a bracketed IPv6 address) and an optional port 1–65535, an
/// optional path, and no userinfo (`user@`), query (`?`) or fragment (`#`). Whitespace and
/// control characters are rejected. Every problem found is reported, all at `path`.
pub fn validate_api_endpoint(endpoint: &str, path: &FieldPath) -> FieldErrors {
    let mut errs = FieldErrors::new();
    if endpoint
        .chars()
        .any(|c| c.is_control() || c.is_whitespace())
    {
        errs.push(FieldError::invalid(
            path,
            "must not contain whitespace or control characters",
        ));
        return errs;
    }
    let Some((scheme, rest)) = endpoint.split_once("://") else {
        errs.push(FieldError::invalid(
            path,
            format!(
                "{} must be an absolute URL such as https://host:6443",
                quote(endpoint)
            ),
        ));
        return errs;
    };
    if !(scheme.eq_ignore_ascii_case("http") || scheme.eq_ignore_ascii_case("https")) {
        errs.push(FieldError::not_supported(path, scheme, &["http", "https"]));
    }
    let authority_end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    let (authority, tail) = rest.split_at(authority_end);
    let (before_fragment, fragment) = match tail.split_once('#') {
        Some((before, _)) => (before, true),
        None => (tail, false),
    };
    if before_fragment.contains('?') {
        errs.push(FieldError::invalid(
            path,
            "query parameters are not permitted in the URL",
        ));
    }
    if fragment {
        errs.push(FieldError::invalid(
            path,
            "fragments are not permitted in the URL",
        ));
    }
    let host_port = match authority.rsplit_once('@') {
        Some((_, host_port)) => {
            errs.push(FieldError::invalid(
                path,
                "user information is not permitted in the URL",
            ));
            host_port
        }
        None => authority,
    };
    if host_port.is_empty() {
        errs.push(FieldError::invalid(path, "host must be provided"));
        return errs;
    }
    if let Err(msg) = check_host_port(host_port) {
        errs.push(FieldError::invalid(path, msg));
    }
    errs
}

/// `host[:port]` or `[v6]:port`.
fn check_host_port(host_port: &str) -> Result<(), String> {
    let (host_ok, port) = if let Some(bracketed) = host_port.strip_prefix('[') {
        let Some((v6, after)) = bracketed.split_once(']') else {
            return Err("IPv6 host is missing its closing ']'".to_owned());
        };
        let port = match after {
            "" => None,
            _ => match after.strip_prefix(':') {
                Some(port) => Some(port),
                None => return Err("unexpected characters after the IPv6 host".to_owned()),
            },
        };
        (is_ipv6_literal(v6), port)
    } else {
        match host_port.split_once(':') {
            Some((host, port)) => (is_host_name(host), Some(port)),
            None => (is_host_name(host_port), None),
        }
    };
    if !host_ok {
        return Err(format!(
            "{} is not a valid host name or IP address",
            quote(host_port)
        ));
    }
    if let Some(port) = port {
        let valid = !port.is_empty()
            && port.len() <= 5
            && port.bytes().all(|b| b.is_ascii_digit())
            && port.parse::<u32>().is_ok_and(|p| (1..=65535).contains(&p));
        if !valid {
            return Err(format!(
                "port {} must be a number from 1 to 65535",
                quote(port)
            ));
        }
    }
    Ok(())
}

/// A DNS name or dotted IPv4 address: dot-separated non-empty labels of ASCII letters,
/// digits and '-', not starting or ending with '-'; one trailing dot allowed.
fn is_host_name(host: &str) -> bool {
    let host = host.strip_suffix('.').unwrap_or(host);
    !host.is_empty()
        && host.len() <= 253
        && host.split('.').all(|label| {
            let b = label.as_bytes();
            !b.is_empty()
                && b.len() <= 63
                && b.iter().all(|c| c.is_ascii_alphanumeric() || *c == b'-')
                && b.first() != Some(&b'-')
                && b.last() != Some(&b'-')
        })
}

/// The inside of `[...]`: hex digits, ':' and '.', with at least two ':' (no zone ids).
fn is_ipv6_literal(v6: &str) -> bool {
    v6.bytes().filter(|&b| b == b':').count() >= 2
        && v6
            .bytes()
            .all(|b| b.is_ascii_hexdigit() || b == b':' || b == b'.')
}

/// Validate a ClusterTaintPolicy (CH-16 and Karmada's webhook and CRD):
/// - `metadata.name` is a DNS-1123 subdomain; no namespace;
/// - `spec.targetClusters`, when set, is a valid cluster affinity;
/// - each of `spec.addOnConditions[]` / `spec.removeOnConditions[]` has a `conditionType`
///   (a qualified name such as `Ready`), operator In or NotIn (others NotSupported), and a
///   non-empty list of unique `statusValues`;
/// - `spec.taints` has at least one taint (Required), at most `max_cluster_taints`; keys,
///   values and effects as for cluster taints; NoExecute is Forbidden unless
///   `allow_no_execute` (karmada-webhook `--allow-no-execute-taint-policy`, CH-16.1);
///   (key, effect) pairs are unique (CH-16.2).
///
/// Conflicts with other policies are checked by [`validate_cluster_taint_policy_conflicts`].
pub fn validate_cluster_taint_policy(
    policy: &ClusterTaintPolicy,
    allow_no_execute: bool,
    limits: &Limits,
) -> FieldErrors {
    let mut errs = validate_object_meta(&policy.meta, check_dns1123_subdomain, false, limits);
    let spec = FieldPath::new("spec");
    errs.extend(validate_some(
        policy.target_clusters.as_ref(),
        &spec.child("targetClusters"),
        limits,
        validate_cluster_affinity,
    ));
    for (conditions, name) in [
        (&policy.add_on_conditions, "addOnConditions"),
        (&policy.remove_on_conditions, "removeOnConditions"),
    ] {
        check_match_conditions(&mut errs, conditions, &spec.child(name), limits);
    }
    let taints = spec.child("taints");
    if policy.taints.is_empty() {
        errs.push(FieldError::required(
            &taints,
            "at least one taint is required",
        ));
    }
    check_count(
        &mut errs,
        &taints,
        policy.taints.len(),
        limits.max_cluster_taints,
    );
    let mut seen = TaintIdentities::default();
    for (i, taint) in policy.taints.iter().enumerate() {
        let p = taints.index(i);
        check_taint_fields(&mut errs, &p, &taint.key, &taint.value, taint.effect);
        if taint.effect == TaintEffect::NoExecute && !allow_no_execute {
            errs.push(FieldError::forbidden(
                &p.child("effect"),
                "NoExecute taints are not allowed in a ClusterTaintPolicy unless the \
                 administrator enables them (--allow-no-execute-taint-policy)",
            ));
        }
        seen.check(&mut errs, &p, &taint.key, taint.effect, |id| {
            format!("taint {id} already exists")
        });
    }
    errs
}

fn check_match_conditions(
    errs: &mut FieldErrors,
    conditions: &[MatchCondition],
    path: &FieldPath,
    limits: &Limits,
) {
    for (i, cond) in counted(errs, path, conditions, limits.max_selector_requirements) {
        let p = path.index(i);
        if let Err(e) = check_qualified_name(&cond.condition_type) {
            errs.push(e.at(&p.child("conditionType")));
        }
        check_in_or_not_in(errs, cond.operator, &p.child("operator"));
        let values = p.child("statusValues");
        let required = "at least one status value is required";
        check_non_empty(errs, &values, cond.status_values.len(), required);
        super::check_unique(errs, &values, cond.status_values.iter().map(|s| s.as_str()));
    }
}

/// Reject taints that another ClusterTaintPolicy already manages (Karmada's webhook: two
/// policies may not own the same (key, effect), or they would fight over it). `others` is
/// the current list of policies; the one with the same name as `policy` is skipped (an
/// update). One Duplicate error at `spec.taints[i]` per conflicting taint.
pub fn validate_cluster_taint_policy_conflicts(
    policy: &ClusterTaintPolicy,
    others: &[ClusterTaintPolicy],
) -> FieldErrors {
    let path = FieldPath::new("spec").child("taints");
    let mut owners: HashMap<(&str, TaintEffect), &str> = HashMap::new();
    for other in others
        .iter()
        .filter(|other| other.meta.name != policy.meta.name)
    {
        for t in &other.taints {
            owners
                .entry((t.key.as_str(), t.effect))
                .or_insert(other.meta.name.as_str());
        }
    }
    let mut errs = FieldErrors::new();
    for (i, taint) in policy.taints.iter().enumerate() {
        if let Some(owner) = owners.get(&(taint.key.as_str(), taint.effect)) {
            errs.push(FieldError::duplicate(
                &path.index(i),
                format!(
                    "taint {}:{} conflicts with ClusterTaintPolicy {}",
                    quote(&taint.key),
                    taint.effect.as_str(),
                    quote(owner)
                ),
            ));
        }
    }
    errs
}
