//! Cluster, cluster taints and ClusterTaintPolicy (docs/reliability.md (bad input), CH-16).

use std::collections::BTreeMap;

use super::{EditCase, assert_errs, rename, run_edits};
use crate::types::*;
use crate::validation::FieldErrorKind::{self, *};
use crate::validation::*;

fn cluster(name: &str) -> Cluster {
    Cluster {
        meta: ObjectMeta {
            name: name.to_owned(),
            labels: BTreeMap::from([("env".to_owned(), "prod".to_owned())]),
            ..ObjectMeta::default()
        },
        spec: ClusterSpec {
            sync_mode: SyncMode::Push,
            api_endpoint: "https://10.0.0.1:6443".to_owned(),
            provider: "aws".to_owned(),
            region: "us-east-1".to_owned(),
            zones: vec!["us-east-1a".to_owned(), "us-east-1b".to_owned()],
            taints: vec![Taint::new(TAINT_NOT_READY, TaintEffect::NoSchedule, None)],
            resource_models: Vec::new(),
        },
        status: ClusterStatus::default(),
    }
}

struct Case {
    name: &'static str,
    cluster: Cluster,
    want: &'static [(&'static str, FieldErrorKind)],
}

fn with(f: impl FnOnce(&mut Cluster)) -> Cluster {
    let mut c = cluster("member1");
    f(&mut c);
    c
}

fn run(cases: Vec<Case>) {
    let limits = Limits::default();
    for c in cases {
        assert_errs(c.name, &validate_cluster(&c.cluster, &limits), c.want);
    }
}

#[test]
fn karmada_cluster_name_48_chars() {
    run(vec![
        Case {
            name: "valid",
            cluster: cluster("member1"),
            want: &[],
        },
        Case {
            name: "exactly 48",
            cluster: cluster(&"a".repeat(48)),
            want: &[],
        },
        Case {
            name: "49 is too long",
            cluster: cluster(&"a".repeat(49)),
            want: &[("metadata.name", TooLong)],
        },
        Case {
            name: "empty",
            cluster: cluster(""),
            want: &[("metadata.name", Required)],
        },
        Case {
            name: "not a DNS label",
            cluster: cluster("Member_1"),
            want: &[("metadata.name", Invalid)],
        },
        Case {
            name: "cluster-scoped: no namespace",
            cluster: with(|c| c.meta.namespace = "default".to_owned()),
            want: &[("metadata.namespace", Forbidden)],
        },
        Case {
            name: "bad label key and value",
            cluster: with(|c| {
                c.meta.labels.insert("-bad".to_owned(), "ok".to_owned());
                c.meta
                    .labels
                    .insert("ok".to_owned(), "bad value".to_owned());
            }),
            want: &[
                ("metadata.labels[-bad]", Invalid),
                ("metadata.labels[ok]", Invalid),
            ],
        },
    ]);
}

#[test]
fn karmada_cluster_api_endpoint() {
    let valid = [
        "https://10.0.0.1:6443",
        "http://example.com",
        "HTTPS://example.com:443/",
        "https://[::1]:6443/k8s/clusters/member1",
        "https://[fd00::1]",
        "https://member1.example.com.",
    ];
    let check = |endpoint: &str, want: &[(&str, FieldErrorKind)]| {
        let c = with(|c| c.spec.api_endpoint = endpoint.to_owned());
        assert_errs(endpoint, &validate_cluster(&c, &Limits::default()), want);
    };
    for endpoint in valid {
        check(endpoint, &[]);
    }
    let e = "spec.apiEndpoint";
    // each of these is one Invalid
    let invalid = [
        "example.com:6443",
        "10.0.0.1",
        "https://",
        "https:///path",
        "https://admin:secret@example.com",
        "https://example.com?token=x",
        "https://example.com/#frag",
        "https://example.com:0",
        "https://example.com:65536",
        "https://example.com:",
        "https://example.com:+443",
        "https://exa mple.com",
        "https://example.com\n",
        "https://exa_mple.com",
        "https://-example.com",
        "https://a..b",
        "https://[::1",
        "https://[::1]x",
        "https://[fe80::1%25eth0]",
        "https://::1:6443",
    ];
    for endpoint in invalid {
        check(endpoint, &[(e, Invalid)]);
    }
    check("ftp://example.com", &[(e, NotSupported)]);
    check(
        "unix:///var/run/k8s.sock",
        &[(e, NotSupported), (e, Invalid)],
    );
    check(
        "https://u@example.com/?q#f",
        &[(e, Invalid), (e, Invalid), (e, Invalid)],
    );
    // As in Karmada, the endpoint may be empty (pull clusters, or filled in later).
    assert_errs(
        "empty",
        &validate_cluster(&with(|c| c.spec.api_endpoint.clear()), &Limits::default()),
        &[],
    );
}

#[test]
fn karmada_cluster_provider_region_zones_label_values() {
    run(vec![
        Case {
            name: "empty provider, region and zones",
            cluster: with(|c| {
                c.spec.provider.clear();
                c.spec.region.clear();
                c.spec.zones.clear();
            }),
            want: &[],
        },
        Case {
            name: "provider and region are label values",
            cluster: with(|c| {
                c.spec.provider = "a b".to_owned();
                c.spec.region = "r".repeat(64);
            }),
            want: &[("spec.provider", Invalid), ("spec.region", TooLong)],
        },
        Case {
            name: "bad, empty and duplicate zones",
            cluster: with(|c| {
                c.spec.zones = vec![
                    "z/1".to_owned(),
                    String::new(),
                    "z2".to_owned(),
                    "z2".to_owned(),
                ];
            }),
            want: &[
                ("spec.zones[0]", Invalid),
                ("spec.zones[1]", Required),
                ("spec.zones[3]", Duplicate),
            ],
        },
        Case {
            name: "too many zones",
            cluster: with(|c| c.spec.zones = (0..65).map(|i| format!("z{i}")).collect()),
            want: &[("spec.zones", TooMany)],
        },
    ]);
}

#[test]
fn karmada_cluster_taints() {
    let taint =
        |key: &str, value: &str, effect| crate::test_support::taint(key, value, effect, None);
    let tainted = |taints: Vec<Taint>| with(|c| c.spec.taints = taints);
    let many = |n| {
        tainted(
            (0..n)
                .map(|i| taint(&format!("k{i}"), "", TaintEffect::NoSchedule))
                .collect(),
        )
    };
    run(vec![
        Case {
            name: "no taints",
            cluster: with(|c| c.spec.taints.clear()),
            want: &[],
        },
        Case {
            name: "same key, different effects",
            cluster: tainted(vec![
                taint(TAINT_NOT_READY, "", TaintEffect::NoSchedule),
                taint(TAINT_NOT_READY, "", TaintEffect::NoExecute),
            ]),
            want: &[],
        },
        Case {
            name: "duplicate (key, effect), different values",
            cluster: tainted(vec![
                taint("dedicated", "a", TaintEffect::NoSchedule),
                taint("other", "", TaintEffect::NoSchedule),
                taint("dedicated", "b", TaintEffect::NoSchedule),
            ]),
            want: &[("spec.taints[2]", Duplicate)],
        },
        Case {
            name: "PreferNoSchedule is not supported on clusters",
            cluster: tainted(vec![taint("a", "", TaintEffect::PreferNoSchedule)]),
            want: &[("spec.taints[0].effect", NotSupported)],
        },
        Case {
            name: "bad key and value",
            cluster: tainted(vec![
                taint("", "", TaintEffect::NoSchedule),
                taint("a/b/c", "x y", TaintEffect::NoExecute),
            ]),
            want: &[
                ("spec.taints[0].key", Required),
                ("spec.taints[1].key", Invalid),
                ("spec.taints[1].value", Invalid),
            ],
        },
        Case {
            name: "exactly 64 taints",
            cluster: many(64),
            want: &[],
        },
        Case {
            name: "65 taints",
            cluster: many(65),
            want: &[("spec.taints", TooMany)],
        },
    ]);
}

fn taint_policy() -> ClusterTaintPolicy {
    ClusterTaintPolicy {
        meta: ObjectMeta {
            name: "not-ready".to_owned(),
            ..ObjectMeta::default()
        },
        target_clusters: Some(ClusterAffinity {
            cluster_names: vec!["member1".to_owned()],
            ..ClusterAffinity::default()
        }),
        add_on_conditions: vec![MatchCondition {
            condition_type: CONDITION_READY.to_owned(),
            operator: SelectorOperator::In,
            status_values: vec![ConditionStatus::False, ConditionStatus::Unknown],
        }],
        remove_on_conditions: vec![MatchCondition {
            condition_type: CONDITION_READY.to_owned(),
            operator: SelectorOperator::NotIn,
            status_values: vec![ConditionStatus::False, ConditionStatus::Unknown],
        }],
        taints: vec![TaintSpec {
            key: TAINT_NOT_READY.to_owned(),
            value: String::new(),
            effect: TaintEffect::NoSchedule,
        }],
    }
}

#[test]
fn ch_16_cluster_taint_policy() {
    let no_execute = |p: &mut ClusterTaintPolicy| p.taints[0].effect = TaintEffect::NoExecute;
    let cases: [EditCase<ClusterTaintPolicy>; 11] = [
        EditCase {
            name: "CH-16: at least one taint",
            edit: |p| p.taints.clear(),
            want: &[("spec.taints", Required)],
        },
        EditCase {
            name: "CH-16.1: NoExecute forbidden by default",
            edit: no_execute,
            want: &[("spec.taints[0].effect", Forbidden)],
        },
        EditCase {
            name: "CH-16.2: duplicate (key, effect)",
            edit: |p| {
                let mut t = p.taints[0].clone();
                t.value = "other".to_owned();
                p.taints.push(t);
            },
            want: &[("spec.taints[1]", Duplicate)],
        },
        EditCase {
            name: "PreferNoSchedule is not supported",
            edit: |p| p.taints[0].effect = TaintEffect::PreferNoSchedule,
            want: &[("spec.taints[0].effect", NotSupported)],
        },
        EditCase {
            name: "bad taint key",
            edit: |p| p.taints[0].key = "bad key".to_owned(),
            want: &[("spec.taints[0].key", Invalid)],
        },
        EditCase {
            name: "CH-18: operators In and NotIn only",
            edit: |p| {
                p.add_on_conditions[0].operator = SelectorOperator::Exists;
                p.remove_on_conditions[0].operator = SelectorOperator::DoesNotExist;
            },
            want: &[
                ("spec.addOnConditions[0].operator", NotSupported),
                ("spec.removeOnConditions[0].operator", NotSupported),
            ],
        },
        EditCase {
            name: "status values required and unique",
            edit: |p| {
                p.add_on_conditions[0].status_values.clear();
                p.remove_on_conditions[0].status_values =
                    vec![ConditionStatus::True, ConditionStatus::True];
            },
            want: &[
                ("spec.addOnConditions[0].statusValues", Required),
                ("spec.removeOnConditions[0].statusValues[1]", Duplicate),
            ],
        },
        EditCase {
            name: "condition type required",
            edit: |p| p.add_on_conditions[0].condition_type.clear(),
            want: &[("spec.addOnConditions[0].conditionType", Required)],
        },
        EditCase {
            name: "empty condition lists are allowed",
            edit: |p| {
                p.add_on_conditions.clear();
                p.remove_on_conditions.clear();
                p.target_clusters = None;
            },
            want: &[],
        },
        EditCase {
            name: "target clusters are a valid affinity",
            edit: |p| {
                if let Some(t) = &mut p.target_clusters {
                    t.cluster_names.push("Bad".to_owned());
                }
            },
            want: &[("spec.targetClusters.clusterNames[1]", Invalid)],
        },
        EditCase {
            name: "name is a DNS subdomain, no namespace",
            edit: |p| rename(&mut p.meta, "Bad", "default"),
            want: &[
                ("metadata.name", Invalid),
                ("metadata.namespace", Forbidden),
            ],
        },
    ];
    let limits = Limits::default();
    run_edits(cases, taint_policy, |p| {
        validate_cluster_taint_policy(p, false, &limits)
    });
    let mut p = taint_policy();
    no_execute(&mut p);
    let got = validate_cluster_taint_policy(&p, true, &limits);
    assert_errs("CH-16.1: NoExecute allowed by the admin flag", &got, &[]);
}

#[test]
fn ch_16_cluster_taint_policy_conflicts_with_other_policies() {
    let mine = taint_policy();
    let mut other = taint_policy();
    other.meta.name = "other".to_owned();
    let mut unrelated = taint_policy();
    unrelated.meta.name = "unrelated".to_owned();
    unrelated.taints[0].effect = TaintEffect::NoExecute;

    let got = validate_cluster_taint_policy_conflicts(&mine, &[unrelated.clone(), other]);
    assert_errs(
        "same taint in another policy",
        &got,
        &[("spec.taints[0]", Duplicate)],
    );
    assert!(got[0].message.contains("\"other\""), "{}", got[0].message);

    let got = validate_cluster_taint_policy_conflicts(&mine, &[mine.clone(), unrelated]);
    assert_errs("itself (update) and a different effect", &got, &[]);
}

/// ES-4.1: Karmada's rules for resource models (on standardized models).
#[test]
fn es_4_1_resource_models_validation() {
    use crate::capacity::{ModelRange, ResourceModel};
    let range = |name: &str, min: i64, max: i64| ModelRange {
        name: name.to_owned(),
        min,
        max,
    };
    let grade = |g: u32, ranges: Vec<ModelRange>| ResourceModel { grade: g, ranges };
    let good = || {
        vec![
            grade(0, vec![range("cpu", 0, 1000), range("memory", 0, 4 << 30)]),
            grade(
                1,
                vec![
                    range("cpu", 1000, i64::MAX),
                    range("memory", 4 << 30, i64::MAX),
                ],
            ),
        ]
    };
    let with_models = |edit: fn(&mut Vec<ResourceModel>)| {
        with(|c| {
            c.spec.resource_models = good();
            edit(&mut c.spec.resource_models);
        })
    };
    run(vec![
        Case {
            name: "ES-4.1 valid",
            cluster: with_models(|_| {}),
            want: &[],
        },
        Case {
            name: "ES-4.1 repeated grade",
            cluster: with_models(|m| m[1].grade = 0),
            want: &[("spec.resourceModels[1].grade", FieldErrorKind::Invalid)],
        },
        Case {
            name: "ES-4.1 a gap between grades",
            cluster: with_models(|m| m[1].ranges[0].min = 2000),
            want: &[(
                "spec.resourceModels[1].ranges[0].min",
                FieldErrorKind::Invalid,
            )],
        },
        Case {
            name: "ES-4.1 max not above min",
            cluster: with_models(|m| m[0].ranges[0].max = 0),
            want: &[
                (
                    "spec.resourceModels[0].ranges[0].max",
                    FieldErrorKind::Invalid,
                ),
                (
                    "spec.resourceModels[1].ranges[0].min",
                    FieldErrorKind::Invalid,
                ),
            ],
        },
        Case {
            name: "ES-4.1 resources in another order",
            cluster: with_models(|m| m[1].ranges.swap(0, 1)),
            want: &[
                (
                    "spec.resourceModels[1].ranges[0].name",
                    FieldErrorKind::Invalid,
                ),
                (
                    "spec.resourceModels[1].ranges[0].min",
                    FieldErrorKind::Invalid,
                ),
                (
                    "spec.resourceModels[1].ranges[1].name",
                    FieldErrorKind::Invalid,
                ),
                (
                    "spec.resourceModels[1].ranges[1].min",
                    FieldErrorKind::Invalid,
                ),
            ],
        },
        Case {
            name: "ES-4.1 a grade with fewer resources",
            cluster: with_models(|m| {
                m[1].ranges.pop();
            }),
            want: &[("spec.resourceModels[1].ranges", FieldErrorKind::Invalid)],
        },
        Case {
            name: "ES-4.1 a grade without ranges",
            cluster: with_models(|m| m[1].ranges.clear()),
            want: &[("spec.resourceModels[1].ranges", FieldErrorKind::Required)],
        },
        Case {
            name: "ES-4.1 too many grades",
            cluster: with_models(|m| {
                let last = m[1].clone();
                m.extend((0..64).map(|_| last.clone()));
            }),
            want: &[("spec.resourceModels", FieldErrorKind::TooMany)],
        },
    ]);
}
