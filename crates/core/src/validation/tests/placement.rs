//! Placement: PD-3.1 affinities, PD-3.2 spread constraints, replica scheduling, and the
//! Kubernetes toleration rules on `clusterTolerations`.

use std::collections::BTreeMap;

use super::{Want, assert_errs};
use crate::types::*;
use crate::validation::FieldErrorKind::*;
use crate::validation::*;

struct Case {
    name: &'static str,
    placement: Placement,
    want: Want,
}

fn run(cases: Vec<Case>) {
    let limits = Limits::default();
    for c in cases {
        assert_errs(c.name, &validate_placement(&c.placement, &limits), c.want);
    }
}

fn names(names: &[&str]) -> Vec<String> {
    names.iter().map(|s| (*s).to_owned()).collect()
}

fn by_names(list: &[&str]) -> ClusterAffinity {
    ClusterAffinity {
        cluster_names: names(list),
        ..ClusterAffinity::default()
    }
}

fn term(name: &str, affinity: ClusterAffinity) -> ClusterAffinityTerm {
    ClusterAffinityTerm {
        affinity_name: name.to_owned(),
        affinity,
    }
}

fn req(key: &str, operator: SelectorOperator, values: &[&str]) -> LabelSelectorRequirement {
    LabelSelectorRequirement {
        key: key.to_owned(),
        operator,
        values: names(values),
    }
}

fn p(f: impl FnOnce(&mut Placement)) -> Placement {
    let mut p = Placement::default();
    f(&mut p);
    p
}

#[test]
fn pd_3_1_affinity_and_affinities_exclusive() {
    run(vec![
        Case {
            name: "empty placement",
            placement: Placement::default(),
            want: &[],
        },
        Case {
            name: "affinity alone",
            placement: p(|p| p.cluster_affinity = Some(by_names(&["member1"]))),
            want: &[],
        },
        Case {
            name: "affinities alone",
            placement: p(|p| p.cluster_affinities = vec![term("primary", by_names(&["member1"]))]),
            want: &[],
        },
        Case {
            name: "both",
            placement: p(|p| {
                p.cluster_affinity = Some(by_names(&["member1"]));
                p.cluster_affinities = vec![term("primary", by_names(&["member1"]))];
            }),
            want: &[("spec.placement.clusterAffinities", Forbidden)],
        },
    ]);
}

#[test]
fn pd_3_1_affinity_names_unique_1_to_32_chars() {
    run(vec![
        Case {
            name: "exactly 32 chars",
            placement: p(|p| p.cluster_affinities = vec![term(&"a".repeat(32), by_names(&[]))]),
            want: &[],
        },
        Case {
            name: "33 chars",
            placement: p(|p| p.cluster_affinities = vec![term(&"a".repeat(33), by_names(&[]))]),
            want: &[("spec.placement.clusterAffinities[0].affinityName", TooLong)],
        },
        Case {
            name: "empty name",
            placement: p(|p| p.cluster_affinities = vec![term("", by_names(&[]))]),
            want: &[("spec.placement.clusterAffinities[0].affinityName", Required)],
        },
        Case {
            name: "not a label key",
            placement: p(|p| p.cluster_affinities = vec![term("a b", by_names(&[]))]),
            want: &[("spec.placement.clusterAffinities[0].affinityName", Invalid)],
        },
        Case {
            name: "duplicate names",
            placement: p(|p| {
                p.cluster_affinities = vec![
                    term("primary", by_names(&["member1"])),
                    term("backup", by_names(&["member2"])),
                    term("primary", by_names(&["member3"])),
                ];
            }),
            want: &[(
                "spec.placement.clusterAffinities[2].affinityName",
                Duplicate,
            )],
        },
        Case {
            name: "the term's affinity is inlined in the path",
            placement: p(|p| p.cluster_affinities = vec![term("primary", by_names(&["Bad"]))]),
            want: &[(
                "spec.placement.clusterAffinities[0].clusterNames[0]",
                Invalid,
            )],
        },
        Case {
            name: "too many terms",
            placement: p(|p| {
                p.cluster_affinities = (0..65)
                    .map(|i| term(&format!("t{i}"), by_names(&[])))
                    .collect();
            }),
            want: &[("spec.placement.clusterAffinities", TooMany)],
        },
    ]);
}

#[test]
fn cluster_affinity_names_and_selectors() {
    let aff = |a: ClusterAffinity| p(|p| p.cluster_affinity = Some(a));
    let label = |exprs: Vec<LabelSelectorRequirement>, labels: &[(&str, &str)]| {
        aff(ClusterAffinity {
            label_selector: Some(LabelSelector {
                match_labels: labels
                    .iter()
                    .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                    .collect::<BTreeMap<_, _>>(),
                match_expressions: exprs,
            }),
            ..ClusterAffinity::default()
        })
    };
    let field = |exprs: Vec<LabelSelectorRequirement>| {
        aff(ClusterAffinity {
            field_selector: Some(FieldSelector {
                match_expressions: exprs,
            }),
            ..ClusterAffinity::default()
        })
    };
    let many = |n: usize| (0..n).map(|i| format!("m{i}")).collect::<Vec<_>>();
    use SelectorOperator::*;
    run(vec![
        Case {
            name: "names: 48 ok, 49 too long, bad, duplicate",
            placement: aff(ClusterAffinity {
                cluster_names: vec![
                    "a".repeat(48),
                    "a".repeat(49),
                    "Member".to_owned(),
                    "a".repeat(48),
                ],
                exclude: names(&["member1", "member1", ""]),
                ..ClusterAffinity::default()
            }),
            want: &[
                ("spec.placement.clusterAffinity.clusterNames[1]", TooLong),
                ("spec.placement.clusterAffinity.clusterNames[2]", Invalid),
                ("spec.placement.clusterAffinity.clusterNames[3]", Duplicate),
                ("spec.placement.clusterAffinity.exclude[1]", Duplicate),
                ("spec.placement.clusterAffinity.exclude[2]", Required),
            ],
        },
        Case {
            name: "exactly 1000 names",
            placement: aff(ClusterAffinity {
                cluster_names: many(1000),
                ..Default::default()
            }),
            want: &[],
        },
        Case {
            name: "1001 names",
            placement: aff(ClusterAffinity {
                exclude: many(1001),
                ..Default::default()
            }),
            want: &[("spec.placement.clusterAffinity.exclude", TooMany)],
        },
        Case {
            name: "valid label selector",
            placement: label(
                vec![
                    req("env", In, &["prod", "staging"]),
                    req("example.com/tier", NotIn, &["batch"]),
                    req("gpu", Exists, &[]),
                    req("spot", DoesNotExist, &[]),
                ],
                &[("region", "eu"), ("empty", "")],
            ),
            want: &[],
        },
        Case {
            name: "label selector: In/NotIn need values, Exists/DoesNotExist take none",
            placement: label(
                vec![
                    req("env", In, &[]),
                    req("env", NotIn, &[]),
                    req("gpu", Exists, &["x"]),
                    req("spot", DoesNotExist, &["y"]),
                ],
                &[],
            ),
            want: &[
                (
                    "spec.placement.clusterAffinity.labelSelector.matchExpressions[0].values",
                    Required,
                ),
                (
                    "spec.placement.clusterAffinity.labelSelector.matchExpressions[1].values",
                    Required,
                ),
                (
                    "spec.placement.clusterAffinity.labelSelector.matchExpressions[2].values",
                    Forbidden,
                ),
                (
                    "spec.placement.clusterAffinity.labelSelector.matchExpressions[3].values",
                    Forbidden,
                ),
            ],
        },
        Case {
            name: "label selector: keys and values",
            placement: label(
                vec![req("bad key", In, &["ok", "bad value"])],
                &[("-k", "v"), ("k", "-v")],
            ),
            want: &[
                (
                    "spec.placement.clusterAffinity.labelSelector.matchExpressions[0].key",
                    Invalid,
                ),
                (
                    "spec.placement.clusterAffinity.labelSelector.matchExpressions[0].values[1]",
                    Invalid,
                ),
                (
                    "spec.placement.clusterAffinity.labelSelector.matchLabels[-k]",
                    Invalid,
                ),
                (
                    "spec.placement.clusterAffinity.labelSelector.matchLabels[k]",
                    Invalid,
                ),
            ],
        },
        Case {
            name: "valid field selector",
            placement: field(vec![
                req("provider", In, &["aws"]),
                req("region", NotIn, &["us-east-1"]),
                req("zone", In, &["a", "b"]),
            ]),
            want: &[],
        },
        Case {
            name: "field selector: key provider/region/zone, operator In/NotIn, values",
            placement: field(vec![
                req("name", In, &["member1"]),
                req("region", Exists, &[]),
                req("zone", In, &["bad value"]),
            ]),
            want: &[
                (
                    "spec.placement.clusterAffinity.fieldSelector.matchExpressions[0].key",
                    NotSupported,
                ),
                (
                    "spec.placement.clusterAffinity.fieldSelector.matchExpressions[1].operator",
                    NotSupported,
                ),
                (
                    "spec.placement.clusterAffinity.fieldSelector.matchExpressions[1].values",
                    Required,
                ),
                (
                    "spec.placement.clusterAffinity.fieldSelector.matchExpressions[2].values[0]",
                    Invalid,
                ),
            ],
        },
    ]);
}

fn spread(field: Option<SpreadField>, label: &str, min: i32, max: i32) -> SpreadConstraint {
    SpreadConstraint {
        spread_by_field: field,
        spread_by_label: label.to_owned(),
        min_groups: min,
        max_groups: max,
    }
}

#[test]
fn pd_3_2_spread_constraints() {
    use SpreadField::*;
    let s = |list: Vec<SpreadConstraint>| p(|p| p.spread_constraints = list);
    let mut cases = vec![
        Case {
            name: "none",
            placement: s(vec![]),
            want: &[],
        },
        Case {
            name: "cluster and region",
            placement: s(vec![
                spread(Some(Cluster), "", 1, 3),
                spread(Some(Region), "", 2, 2),
            ]),
            want: &[],
        },
        Case {
            name: "label alone needs no cluster constraint",
            placement: s(vec![spread(None, "topology.example.com/rack", 1, 0)]),
            want: &[],
        },
        Case {
            name: "field and label exclusive",
            placement: s(vec![spread(Some(Cluster), "rack", 1, 1)]),
            want: &[(
                "spec.placement.spreadConstraints[0].spreadByLabel",
                Forbidden,
            )],
        },
        Case {
            name: "label is a qualified name",
            placement: s(vec![spread(None, "bad label", 1, 1)]),
            want: &[("spec.placement.spreadConstraints[0].spreadByLabel", Invalid)],
        },
        Case {
            name: "one constraint per field",
            placement: s(vec![
                spread(Some(Cluster), "", 1, 1),
                spread(Some(Region), "", 1, 1),
                spread(Some(Region), "", 2, 2),
                spread(Some(Cluster), "", 1, 1),
            ]),
            want: &[
                (
                    "spec.placement.spreadConstraints[2].spreadByField",
                    Duplicate,
                ),
                (
                    "spec.placement.spreadConstraints[3].spreadByField",
                    Duplicate,
                ),
            ],
        },
        Case {
            name: "cluster mandatory with any field constraint",
            placement: s(vec![
                spread(Some(Region), "", 1, 1),
                spread(Some(Zone), "", 1, 1),
            ]),
            want: &[("spec.placement.spreadConstraints", Required)],
        },
        Case {
            name: "too many constraints",
            placement: s((0..65)
                .map(|i| spread(None, &format!("l{i}"), 1, 1))
                .collect()),
            want: &[("spec.placement.spreadConstraints", TooMany)],
        },
    ];
    // One cluster constraint with (min, max) groups.
    let groups: [(&str, i32, i32, Want); 6] = [
        ("min and max zero are fine", 0, 0, &[]),
        (
            "negative min and max",
            -1,
            -1,
            &[
                ("spec.placement.spreadConstraints[0].minGroups", OutOfRange),
                ("spec.placement.spreadConstraints[0].maxGroups", OutOfRange),
            ],
        ),
        (
            "max below min",
            3,
            2,
            &[("spec.placement.spreadConstraints[0].maxGroups", Invalid)],
        ),
        ("max equal to min", 3, 3, &[]),
        ("max 0 means unset, any min", 3, 0, &[]),
        (
            "groups above the cluster cap",
            1001,
            1000,
            &[
                ("spec.placement.spreadConstraints[0].minGroups", OutOfRange),
                ("spec.placement.spreadConstraints[0].maxGroups", Invalid),
            ],
        ),
    ];
    cases.extend(groups.map(|(name, min, max, want)| Case {
        name,
        placement: s(vec![spread(Some(Cluster), "", min, max)]),
        want,
    }));
    run(cases);
}

fn weighted(list: Vec<StaticClusterWeight>) -> Placement {
    p(|p| {
        p.replica_scheduling = Some(ReplicaSchedulingStrategy {
            replica_scheduling_type: ReplicaSchedulingType::Divided,
            replica_division_preference: Some(ReplicaDivisionPreference::Weighted),
            weight_preference: Some(ClusterPreferences {
                static_weight_list: list,
                dynamic_weight: None,
            }),
        });
    })
}

fn weight(target: ClusterAffinity, weight: i64) -> StaticClusterWeight {
    StaticClusterWeight {
        target_cluster: target,
        weight,
    }
}

#[test]
fn replica_scheduling_static_weights() {
    run(vec![
        Case {
            name: "valid weights",
            placement: weighted(vec![
                weight(by_names(&["member1"]), 1),
                weight(by_names(&["member2", "member3"]), 2),
            ]),
            want: &[],
        },
        Case {
            name: "weight 0 and negative",
            placement: weighted(vec![
                weight(by_names(&["member1"]), 0),
                weight(by_names(&["member2"]), -3),
            ]),
            want: &[
                (
                    "spec.placement.replicaScheduling.weightPreference.staticWeightList[0].weight",
                    OutOfRange,
                ),
                (
                    "spec.placement.replicaScheduling.weightPreference.staticWeightList[1].weight",
                    OutOfRange,
                ),
            ],
        },
        Case {
            name: "i64::MAX alone fits",
            placement: weighted(vec![weight(by_names(&["member1"]), i64::MAX)]),
            want: &[],
        },
        Case {
            name: "sum overflows i64",
            placement: weighted(vec![
                weight(by_names(&["member1"]), i64::MAX),
                weight(by_names(&["member2"]), 1),
            ]),
            want: &[(
                "spec.placement.replicaScheduling.weightPreference.staticWeightList",
                OutOfRange,
            )],
        },
        Case {
            name: "identical targets",
            placement: weighted(vec![
                weight(by_names(&["member1"]), 1),
                weight(by_names(&["member1"]), 2),
            ]),
            want: &[(
                "spec.placement.replicaScheduling.weightPreference.staticWeightList[1].targetCluster",
                Duplicate,
            )],
        },
        Case {
            name: "a cluster named by two name-only targets",
            placement: weighted(vec![
                weight(by_names(&["member1", "member2"]), 1),
                weight(by_names(&["member3", "member2"]), 2),
            ]),
            want: &[(
                "spec.placement.replicaScheduling.weightPreference.staticWeightList[1].targetCluster.clusterNames[1]",
                Duplicate,
            )],
        },
        Case {
            name: "not detectable with a label selector",
            placement: weighted(vec![
                weight(by_names(&["member1"]), 1),
                weight(
                    ClusterAffinity {
                        cluster_names: names(&["member1"]),
                        label_selector: Some(LabelSelector::default()),
                        ..ClusterAffinity::default()
                    },
                    2,
                ),
            ]),
            want: &[],
        },
        Case {
            name: "excluded in the second target",
            placement: weighted(vec![
                weight(by_names(&["member1"]), 1),
                weight(
                    ClusterAffinity {
                        cluster_names: names(&["member1", "member2"]),
                        exclude: names(&["member1"]),
                        ..ClusterAffinity::default()
                    },
                    2,
                ),
            ]),
            want: &[],
        },
        Case {
            name: "targets are validated as affinities",
            placement: weighted(vec![weight(by_names(&["Member1"]), 1)]),
            want: &[(
                "spec.placement.replicaScheduling.weightPreference.staticWeightList[0].targetCluster.clusterNames[0]",
                Invalid,
            )],
        },
        Case {
            name: "too many weights",
            placement: weighted(
                (0..1001)
                    .map(|i| weight(by_names(&[&format!("m{i}")]), 1))
                    .collect(),
            ),
            want: &[(
                "spec.placement.replicaScheduling.weightPreference.staticWeightList",
                TooMany,
            )],
        },
        Case {
            name: "Karmada parity: Duplicated ignores a division preference and weights",
            placement: p(|p| {
                p.replica_scheduling = Some(ReplicaSchedulingStrategy {
                    replica_scheduling_type: ReplicaSchedulingType::Duplicated,
                    replica_division_preference: Some(ReplicaDivisionPreference::Weighted),
                    weight_preference: Some(ClusterPreferences {
                        static_weight_list: vec![weight(by_names(&["member1"]), 1)],
                        dynamic_weight: Some(DynamicWeightFactor::AvailableReplicas),
                    }),
                });
            }),
            want: &[],
        },
        Case {
            name: "Duplicated still validates the weights it carries",
            placement: p(|p| {
                p.replica_scheduling = Some(ReplicaSchedulingStrategy {
                    replica_scheduling_type: ReplicaSchedulingType::Duplicated,
                    replica_division_preference: None,
                    weight_preference: Some(ClusterPreferences {
                        static_weight_list: vec![weight(by_names(&["member1"]), 0)],
                        dynamic_weight: None,
                    }),
                });
            }),
            want: &[(
                "spec.placement.replicaScheduling.weightPreference.staticWeightList[0].weight",
                OutOfRange,
            )],
        },
    ]);
}

fn tol(
    key: &str,
    operator: TolerationOperator,
    value: &str,
    effect: Option<TaintEffect>,
    seconds: Option<i64>,
) -> Toleration {
    Toleration {
        key: key.to_owned(),
        operator,
        value: value.to_owned(),
        effect,
        toleration_seconds: seconds,
    }
}

/// Runs tolerations as `clusterTolerations[1]` (index 0 is a valid one) so that the index
/// in the path is checked too; the wanted fields are relative to that toleration.
fn run_tolerations(cases: &[(&str, Toleration, Want)]) {
    let ok = tol(
        TAINT_UNREACHABLE,
        TolerationOperator::Exists,
        "",
        Some(TaintEffect::NoExecute),
        Some(300),
    );
    for (name, t, want) in cases {
        let placement = p(|p| p.cluster_tolerations = vec![ok.clone(), t.clone()]);
        let want: Vec<_> = want
            .iter()
            .map(|(field, kind)| {
                (
                    format!("spec.placement.clusterTolerations[1].{field}"),
                    *kind,
                )
            })
            .collect();
        let want: Vec<_> = want.iter().map(|(f, k)| (f.as_str(), *k)).collect();
        let got = validate_placement(&placement, &Limits::default());
        assert_errs(name, &got, &want);
    }
}

use TolerationOperator::{Equal, Exists};
const NE: Option<TaintEffect> = Some(TaintEffect::NoExecute);
const NS: Option<TaintEffect> = Some(TaintEffect::NoSchedule);
const PNS: Option<TaintEffect> = Some(TaintEffect::PreferNoSchedule);
// What a bad toleration gives, relative to `clusterTolerations[1]`.
const BAD_OPERATOR: Want = &[("operator", Invalid)];
const BAD_KEY: Want = &[("key", Invalid)];
const TOO_LONG: Want = &[("value", TooLong)];
const BAD_VALUE: Want = &[("value", Invalid)];
const BAD_EFFECT: Want = &[("effect", Invalid)];
const OUT_OF_RANGE: Want = &[("tolerationSeconds", OutOfRange)];

#[test]
fn k8s_toleration_exists_with_value_rejected() {
    run_tolerations(&[
        ("Exists without value", tol("k", Exists, "", NS, None), &[]),
        (
            "Exists with a value",
            tol("k", Exists, "v", NS, None),
            BAD_OPERATOR,
        ),
    ]);
}

#[test]
fn k8s_toleration_empty_key_requires_exists() {
    run_tolerations(&[
        (
            "empty key with Exists tolerates everything",
            tol("", Exists, "", None, None),
            &[],
        ),
        (
            "empty key with Equal",
            tol("", Equal, "", None, None),
            BAD_OPERATOR,
        ),
        ("bad key", tol("a/b/c", Equal, "", None, None), BAD_KEY),
    ]);
}

#[test]
fn k8s_toleration_equal_value_is_label_value() {
    run_tolerations(&[
        ("empty value", tol("k", Equal, "", NS, None), &[]),
        ("63 chars", tol("k", Equal, &"v".repeat(63), NS, None), &[]),
        (
            "64 chars",
            tol("k", Equal, &"v".repeat(64), NS, None),
            TOO_LONG,
        ),
        (
            "not a label value",
            tol("k", Equal, "a b", NS, None),
            BAD_VALUE,
        ),
    ]);
}

#[test]
fn k8s_toleration_seconds_only_with_no_execute() {
    run_tolerations(&[
        ("NoExecute", tol("k", Exists, "", NE, Some(60)), &[]),
        ("NoSchedule", tol("k", Exists, "", NS, Some(60)), BAD_EFFECT),
        (
            "any effect",
            tol("k", Exists, "", None, Some(60)),
            BAD_EFFECT,
        ),
        (
            "PreferNoSchedule",
            tol("k", Exists, "", PNS, Some(60)),
            BAD_EFFECT,
        ),
    ]);
}

#[test]
fn k8s_toleration_seconds_bounds() {
    let cap = ONE_YEAR_SECONDS;
    run_tolerations(&[
        (
            "zero evicts at once but is allowed",
            tol("k", Exists, "", NE, Some(0)),
            &[],
        ),
        ("exactly the cap", tol("k", Exists, "", NE, Some(cap)), &[]),
        ("negative", tol("k", Exists, "", NE, Some(-1)), OUT_OF_RANGE),
        (
            "cap + 1",
            tol("k", Exists, "", NE, Some(cap + 1)),
            OUT_OF_RANGE,
        ),
        (
            "i64::MIN",
            tol("k", Exists, "", NE, Some(i64::MIN)),
            OUT_OF_RANGE,
        ),
    ]);
}

#[test]
fn k8s_toleration_count_cap() {
    let t = tol("k", Exists, "", None, None);
    let ok = p(|p| p.cluster_tolerations = vec![t.clone(); 64]);
    assert_errs(
        "exactly 64",
        &validate_placement(&ok, &Limits::default()),
        &[],
    );
    let over = p(|p| p.cluster_tolerations = vec![t.clone(); 65]);
    assert_errs(
        "65",
        &validate_placement(&over, &Limits::default()),
        &[("spec.placement.clusterTolerations", TooMany)],
    );
    // The standalone validators take their path from the caller.
    let errs = validate_tolerations(
        &[tol("", Equal, "", None, None)],
        &FieldPath::new("t"),
        &Limits::default(),
    );
    assert_errs("standalone", &errs, &[("t[0].operator", Invalid)]);
    let errs = validate_toleration(
        &tol("k", Exists, "v", None, None),
        &FieldPath::new(""),
        &Limits::default(),
    );
    assert_errs("relative", &errs, &[("operator", Invalid)]);
}

#[test]
fn placement_at_other_roots() {
    let bad = p(|p| p.cluster_affinity = Some(by_names(&["Bad"])));
    let errs = validate_placement_at(
        &bad,
        &FieldPath::new("status").child("appliedPlacement"),
        &Limits::default(),
    );
    assert_errs(
        "custom root",
        &errs,
        &[(
            "status.appliedPlacement.clusterAffinity.clusterNames[0]",
            Invalid,
        )],
    );
}
