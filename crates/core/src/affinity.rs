//! Cluster affinity matching (SC-6.4): label selectors, field selectors, names.
//!
//! ```text
//!   ClusterAffinity ──► exclude? ──► labelSelector ──► fieldSelector ──► clusterNames ──► bool
//!                        (name)      (cluster labels)  (provider/region/zones)  (name)
//! ```
//!
//! The same matching is used by the scheduler's ClusterAffinity filter (SC-6.3), by static
//! weight rules (SC-16.1), by the scheduler's cluster-event fan-out (SC-2.3) and by
//! ClusterTaintPolicy targets (CH-16).

use std::collections::BTreeMap;

use crate::types::{
    Cluster, ClusterAffinity, FieldSelector, LabelSelector, LabelSelectorRequirement,
    SelectorOperator,
};

/// Field-selector key for `spec.provider` (SC-6.4).
pub const FIELD_PROVIDER: &str = "provider";
/// Field-selector key for `spec.region` (SC-6.4).
pub const FIELD_REGION: &str = "region";
/// Field-selector key for `spec.zones` (SC-6.4).
pub const FIELD_ZONE: &str = "zone";

/// Whether a requirement is well formed with Kubernetes' rules: `In`/`NotIn` need at least
/// one value, `Exists`/`DoesNotExist` take none.
///
/// Kubernetes refuses to build a selector from a malformed requirement, and Karmada then
/// treats the whole affinity as not matching; we do the same (see [`label_selector_matches`]).
pub fn requirement_is_valid(req: &LabelSelectorRequirement) -> bool {
    match req.operator {
        SelectorOperator::In | SelectorOperator::NotIn => !req.values.is_empty(),
        SelectorOperator::Exists | SelectorOperator::DoesNotExist => req.values.is_empty(),
    }
}

/// Whether one requirement holds for a label set (Kubernetes semantics).
///
/// `In`: the key is present with a listed value. `NotIn`: the key is absent or its value is
/// not listed. `Exists`: the key is present. `DoesNotExist`: the key is absent. Validity is
/// not checked here (see [`requirement_is_valid`]).
pub fn requirement_matches(
    req: &LabelSelectorRequirement,
    labels: &BTreeMap<String, String>,
) -> bool {
    let value = labels.get(&req.key);
    match req.operator {
        SelectorOperator::In => value.is_some_and(|v| req.values.contains(v)),
        SelectorOperator::NotIn => value.is_none_or(|v| !req.values.contains(v)),
        SelectorOperator::Exists => value.is_some(),
        SelectorOperator::DoesNotExist => value.is_none(),
    }
}

/// Whether a label selector matches a label set (`metav1.LabelSelectorAsSelector` +
/// `Matches`): every `matchLabels` entry and every expression must hold; an empty selector
/// matches everything; a selector with a malformed expression matches nothing.
pub fn label_selector_matches(selector: &LabelSelector, labels: &BTreeMap<String, String>) -> bool {
    if !selector.match_expressions.iter().all(requirement_is_valid) {
        return false;
    }
    selector
        .match_labels
        .iter()
        .all(|(k, v)| labels.get(k).is_some_and(|have| have == v))
        && selector
            .match_expressions
            .iter()
            .all(|req| requirement_matches(req, labels))
}

/// SC-6.4: a `zone` field requirement against a cluster's `spec.zones`.
///
/// `In`: some zone of the cluster is listed. `NotIn`: no zone of the cluster is listed
/// (vacuously true without zones). `Exists`: at least one zone. `DoesNotExist`: no zone.
pub fn zone_requirement_matches(req: &LabelSelectorRequirement, zones: &[String]) -> bool {
    match req.operator {
        SelectorOperator::In => zones.iter().any(|z| req.values.contains(z)),
        SelectorOperator::NotIn => !zones.iter().any(|z| req.values.contains(z)),
        SelectorOperator::Exists => !zones.is_empty(),
        SelectorOperator::DoesNotExist => zones.is_empty(),
    }
}

/// The cluster's `provider` and `region` as a label set, omitting empty values, so that
/// field requirements behave like label requirements (SC-6.4: an empty region is an
/// absent key: `NotIn`/`DoesNotExist` hold, `In`/`Exists` do not).
fn cluster_fields(cluster: &Cluster) -> BTreeMap<String, String> {
    let mut fields = BTreeMap::new();
    if !cluster.spec.provider.is_empty() {
        fields.insert(FIELD_PROVIDER.to_owned(), cluster.spec.provider.clone());
    }
    if !cluster.spec.region.is_empty() {
        fields.insert(FIELD_REGION.to_owned(), cluster.spec.region.clone());
    }
    fields
}

/// SC-6.4: whether a field selector matches a cluster. Requirements are ANDed; `zone`
/// requirements use [`zone_requirement_matches`], every other key is a label requirement on
/// `{provider, region}` (an unknown key is therefore always absent). A malformed non-zone
/// requirement makes the selector match nothing, as in Kubernetes. An empty selector
/// matches every cluster.
pub fn field_selector_matches(selector: &FieldSelector, cluster: &Cluster) -> bool {
    let fields = cluster_fields(cluster);
    selector.match_expressions.iter().all(|req| {
        if req.key == FIELD_ZONE {
            zone_requirement_matches(req, &cluster.spec.zones)
        } else {
            requirement_is_valid(req) && requirement_matches(req, &fields)
        }
    })
}

/// SC-6.4: an empty `clusterNames` list matches every cluster, else the name must be listed.
pub fn cluster_names_match(cluster: &Cluster, names: &[String]) -> bool {
    names.is_empty() || names.iter().any(|n| n == cluster.name())
}

/// SC-6.4: whether `cluster` matches `affinity`, checked in Karmada's order: a name in
/// `exclude` never matches; then the label selector (if set), the field selector (if set)
/// and `clusterNames` (if non-empty) must all match.
pub fn cluster_matches_affinity(cluster: &Cluster, affinity: &ClusterAffinity) -> bool {
    if affinity.exclude.iter().any(|n| n == cluster.name()) {
        return false;
    }
    if let Some(selector) = &affinity.label_selector
        && !label_selector_matches(selector, &cluster.meta.labels)
    {
        return false;
    }
    if let Some(selector) = &affinity.field_selector
        && !field_selector_matches(selector, cluster)
    {
        return false;
    }
    cluster_names_match(cluster, &affinity.cluster_names)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::types::ObjectMeta;

    fn req(key: &str, op: SelectorOperator, values: &[&str]) -> LabelSelectorRequirement {
        LabelSelectorRequirement {
            key: key.to_owned(),
            operator: op,
            values: values.iter().map(|v| (*v).to_owned()).collect(),
        }
    }

    fn cluster(
        name: &str,
        labels: &[(&str, &str)],
        provider: &str,
        region: &str,
        zones: &[&str],
    ) -> Cluster {
        let mut c = Cluster {
            meta: ObjectMeta {
                name: name.to_owned(),
                ..Default::default()
            },
            ..Default::default()
        };
        c.meta.labels = labels
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect();
        c.spec.provider = provider.to_owned();
        c.spec.region = region.to_owned();
        c.spec.zones = zones.iter().map(|z| (*z).to_owned()).collect();
        c
    }

    fn names(list: &[&str]) -> Vec<String> {
        list.iter().map(|n| (*n).to_owned()).collect()
    }

    #[test]
    fn sc_6_4_label_requirement_operators() {
        use SelectorOperator::*;
        let labels: BTreeMap<String, String> = [("env".to_owned(), "prod".to_owned())].into();
        // (case, requirement, whether it matches env=prod)
        let cases = [
            ("in, listed", req("env", In, &["prod", "dev"]), true),
            ("in, not listed", req("env", In, &["dev"]), false),
            ("in, key absent", req("tier", In, &["x"]), false),
            ("notin, listed", req("env", NotIn, &["prod"]), false),
            ("notin, not listed", req("env", NotIn, &["dev"]), true),
            ("notin, key absent", req("tier", NotIn, &["x"]), true),
            ("exists", req("env", Exists, &[]), true),
            ("exists, absent", req("tier", Exists, &[]), false),
            ("doesnotexist", req("tier", DoesNotExist, &[]), true),
            (
                "doesnotexist, present",
                req("env", DoesNotExist, &[]),
                false,
            ),
        ];
        for (name, req, want) in cases {
            assert_eq!(requirement_matches(&req, &labels), want, "{name}");
        }
    }

    #[test]
    fn sc_6_4_label_selector_match_labels_and_expressions() {
        use SelectorOperator::*;
        let labels: BTreeMap<String, String> = [
            ("env".to_owned(), "prod".to_owned()),
            ("team".to_owned(), "a".to_owned()),
        ]
        .into();
        let mut sel = LabelSelector::default();
        assert!(
            label_selector_matches(&sel, &labels),
            "empty selector matches everything"
        );
        assert!(
            label_selector_matches(&sel, &BTreeMap::new()),
            "even an empty label set"
        );
        sel.match_labels.insert("env".to_owned(), "prod".to_owned());
        assert!(label_selector_matches(&sel, &labels));
        sel.match_expressions.push(req("team", In, &["a"]));
        assert!(label_selector_matches(&sel, &labels));
        sel.match_labels.insert("env".to_owned(), "dev".to_owned());
        assert!(
            !label_selector_matches(&sel, &labels),
            "matchLabels AND expressions"
        );
        let malformed = LabelSelector {
            match_expressions: vec![req("env", NotIn, &[])],
            ..Default::default()
        };
        assert!(
            !label_selector_matches(&malformed, &labels),
            "NotIn without values is invalid"
        );
        let malformed = LabelSelector {
            match_expressions: vec![req("env", Exists, &["prod"])],
            ..Default::default()
        };
        assert!(
            !label_selector_matches(&malformed, &labels),
            "Exists with values is invalid"
        );
    }

    #[test]
    fn sc_6_4_zone_requirement() {
        use SelectorOperator::*;
        let zone = |op, values: &[&str]| req("zone", op, values);
        // (case, requirement, the cluster's zones, whether it matches)
        let cases: [(&str, LabelSelectorRequirement, &[&str], bool); 10] = [
            ("in, one listed", zone(In, &["z1"]), &["z1", "z2"], true),
            ("in, none listed", zone(In, &["z3"]), &["z1", "z2"], false),
            ("in, no zones", zone(In, &["z1"]), &[], false),
            (
                "notin, one listed",
                zone(NotIn, &["z2"]),
                &["z1", "z2"],
                false,
            ),
            ("notin, none listed", zone(NotIn, &["z3"]), &["z1"], true),
            ("notin, no zones", zone(NotIn, &["z3"]), &[], true),
            ("exists", zone(Exists, &[]), &["z1"], true),
            ("exists, no zones", zone(Exists, &[]), &[], false),
            ("doesnotexist", zone(DoesNotExist, &[]), &[], true),
            (
                "doesnotexist, zones",
                zone(DoesNotExist, &[]),
                &["z1"],
                false,
            ),
        ];
        for (name, req, zones, want) in cases {
            assert_eq!(
                zone_requirement_matches(&req, &names(zones)),
                want,
                "{name}"
            );
        }
    }

    #[test]
    fn sc_6_4_field_selector_provider_region_zone() {
        use SelectorOperator::*;
        let c = cluster("m1", &[], "aws", "us-east-1", &["us-east-1a"]);
        let no_region = cluster("m2", &[], "aws", "", &[]);
        // (case, (requirements, cluster, whether the selector matches it))
        let cases = [
            ("empty selector", (vec![], &c, true)),
            (
                "provider in",
                (vec![req("provider", In, &["aws"])], &c, true),
            ),
            (
                "provider notin",
                (vec![req("provider", NotIn, &["aws"])], &c, false),
            ),
            (
                "region in",
                (vec![req("region", In, &["us-east-1"])], &c, true),
            ),
            (
                "region and zone",
                (
                    vec![
                        req("region", In, &["us-east-1"]),
                        req("zone", In, &["us-east-1b"]),
                    ],
                    &c,
                    false,
                ),
            ),
            (
                "empty region is absent: notin",
                (vec![req("region", NotIn, &["x"])], &no_region, true),
            ),
            (
                "empty region is absent: exists",
                (vec![req("region", Exists, &[])], &no_region, false),
            ),
            (
                "empty region: doesnotexist",
                (vec![req("region", DoesNotExist, &[])], &no_region, true),
            ),
            (
                "unknown key in",
                (vec![req("color", In, &["red"])], &c, false),
            ),
            (
                "malformed provider in",
                (vec![req("provider", In, &[])], &c, false),
            ),
        ];
        for (name, (match_expressions, target, want)) in cases {
            let sel = FieldSelector { match_expressions };
            assert_eq!(field_selector_matches(&sel, target), want, "{name}");
        }
    }

    #[test]
    fn sc_6_4_cluster_matches_affinity() {
        use SelectorOperator::*;
        let c = cluster("member1", &[("env", "prod")], "aws", "r1", &["z1"]);
        let prod = LabelSelector {
            match_labels: [("env".to_owned(), "prod".to_owned())].into(),
            ..Default::default()
        };
        let dev = LabelSelector {
            match_labels: [("env".to_owned(), "dev".to_owned())].into(),
            ..Default::default()
        };
        let by_names = |list: &[&str]| ClusterAffinity {
            cluster_names: names(list),
            ..Default::default()
        };
        let by_label = |selector: &LabelSelector, list: &[&str]| ClusterAffinity {
            label_selector: Some(selector.clone()),
            cluster_names: names(list),
            ..Default::default()
        };
        let field = |key: &str, value: &str| {
            Some(FieldSelector {
                match_expressions: vec![req(key, In, &[value])],
            })
        };
        let cases = [
            (
                "empty affinity matches all",
                ClusterAffinity::default(),
                true,
            ),
            (
                "excluded wins over names",
                ClusterAffinity {
                    exclude: names(&["member1"]),
                    ..by_names(&["member1"])
                },
                false,
            ),
            ("names listed", by_names(&["member2", "member1"]), true),
            ("names not listed", by_names(&["member2"]), false),
            (
                "label selector matches, names empty",
                by_label(&prod, &[]),
                true,
            ),
            ("label selector fails", by_label(&dev, &["member1"]), false),
            (
                "label, field and names all match",
                ClusterAffinity {
                    field_selector: field("zone", "z1"),
                    ..by_label(&prod, &["member1"])
                },
                true,
            ),
            (
                "field fails",
                ClusterAffinity {
                    field_selector: field("provider", "gcp"),
                    ..by_label(&prod, &[])
                },
                false,
            ),
        ];
        for (name, affinity, want) in cases {
            assert_eq!(cluster_matches_affinity(&c, &affinity), want, "{name}");
        }
    }
}
