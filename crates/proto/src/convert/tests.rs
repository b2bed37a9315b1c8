//! Round-trip tables (domain → wire → bytes → wire → domain == original) and error-path
//! tables for the conversions.

use std::collections::BTreeMap;

use flotilla_core::Time;
use flotilla_core::types as domain;
use prost::Message;
use prost_types::Timestamp;

use super::*;
use crate::v1;

// === fixtures: every field set to a non-default value ===

fn t(secs: i64) -> Option<Time> {
    Some(Time::from_millis(secs * 1000 + 123))
}

/// A wire timestamp.
fn stamp(seconds: i64, nanos: i32) -> Timestamp {
    Timestamp { seconds, nanos }
}

fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect()
}

fn strings(items: &[&str]) -> Vec<String> {
    items.iter().map(|s| (*s).to_owned()).collect()
}

fn meta(name: &str, namespace: &str) -> domain::ObjectMeta {
    domain::ObjectMeta {
        name: name.into(),
        namespace: namespace.into(),
        uid: format!("uid-{name}"),
        resource_version: 1234,
        generation: 7,
        labels: labels(&[("env", "prod"), ("team", "a")]),
        annotations: labels(&[("note", "x")]),
        creation_timestamp: t(1_700_000_000),
        deletion_timestamp: t(1_700_000_600),
        finalizers: strings(&["karmada.io/cluster-controller"]),
        managed_fields: vec![domain::ManagedFieldsEntry {
            manager: "kubectl".into(),
            operation: "Apply".into(),
            api_version: "v1".into(),
            time: t(1_700_000_000),
            fields_type: "FieldsV1".into(),
            fields_v1: r#"{"f:data":{"f:a":{}}}"#.into(),
            subresource: String::new(),
        }],
    }
}

fn condition(type_: &str, status: domain::ConditionStatus) -> domain::Condition {
    domain::Condition {
        type_: type_.into(),
        status,
        reason: "ClusterReady".into(),
        message: "cluster is healthy".into(),
        last_transition_time: t(1_700_000_100),
    }
}

fn cluster() -> domain::Cluster {
    domain::Cluster {
        meta: meta("member1", ""),
        spec: domain::ClusterSpec {
            sync_mode: domain::SyncMode::Pull,
            api_endpoint: "https://member1:6443".into(),
            provider: "aws".into(),
            region: "eu-west-1".into(),
            zones: strings(&["eu-west-1a", "eu-west-1b"]),
            taints: vec![
                domain::Taint::new(
                    domain::TAINT_NOT_READY,
                    domain::TaintEffect::NoSchedule,
                    t(1_700_000_200),
                ),
                domain::Taint {
                    key: "dedicated".into(),
                    value: "gpu".into(),
                    effect: domain::TaintEffect::PreferNoSchedule,
                    time_added: None,
                    trace_context: String::new(),
                },
                domain::Taint::new(
                    domain::TAINT_UNREACHABLE,
                    domain::TaintEffect::NoExecute,
                    t(1_700_000_300),
                ),
            ],
            resource_models: (0..2)
                .map(|g| flotilla_core::capacity::ResourceModel {
                    grade: g,
                    ranges: vec![
                        flotilla_core::capacity::ModelRange {
                            name: "cpu".into(),
                            min: i64::from(g) * 2000,
                            max: if g == 0 { 2000 } else { i64::MAX },
                        },
                        flotilla_core::capacity::ModelRange {
                            name: "memory".into(),
                            min: i64::from(g) << 34,
                            max: if g == 0 { 1 << 34 } else { i64::MAX },
                        },
                    ],
                })
                .collect(),
        },
        status: domain::ClusterStatus {
            conditions: vec![
                condition("Ready", domain::ConditionStatus::False),
                condition("CompleteAPIEnablements", domain::ConditionStatus::Unknown),
            ],
            api_enablements: vec![domain::ApiEnablement {
                group_version: "apps/v1".into(),
                kinds: strings(&["Deployment", "StatefulSet"]),
            }],
            kubernetes_version: "v1.31.0".into(),
            resource_summary: Some(flotilla_core::capacity::Summary {
                allocatable: [
                    ("cpu".into(), 8000),
                    ("pods".into(), 50),
                    ("nvidia.com/gpu".into(), 2),
                ]
                .into(),
                allocated: [("cpu".into(), 1000), ("pods".into(), 8)].into(),
                allocating: [("pods".into(), 2)].into(),
                allocatable_modelings: vec![
                    flotilla_core::capacity::AllocatableModeling { grade: 0, count: 3 },
                    flotilla_core::capacity::AllocatableModeling { grade: 1, count: 1 },
                ],
            }),
        },
    }
}

fn affinity() -> domain::ClusterAffinity {
    domain::ClusterAffinity {
        label_selector: Some(domain::LabelSelector {
            match_labels: labels(&[("env", "prod")]),
            match_expressions: vec![domain::LabelSelectorRequirement {
                key: "tier".into(),
                operator: domain::SelectorOperator::NotIn,
                values: strings(&["db"]),
            }],
        }),
        field_selector: Some(domain::FieldSelector {
            match_expressions: vec![
                domain::LabelSelectorRequirement {
                    key: "region".into(),
                    operator: domain::SelectorOperator::In,
                    values: strings(&["eu-west-1"]),
                },
                domain::LabelSelectorRequirement {
                    key: "zone".into(),
                    operator: domain::SelectorOperator::Exists,
                    values: vec![],
                },
            ],
        }),
        cluster_names: strings(&["member1", "member2"]),
        exclude: strings(&["member3"]),
    }
}

fn placement() -> domain::Placement {
    domain::Placement {
        cluster_affinity: Some(affinity()),
        cluster_affinities: vec![
            domain::ClusterAffinityTerm {
                affinity_name: "primary".into(),
                affinity: affinity(),
            },
            domain::ClusterAffinityTerm {
                affinity_name: "backup".into(),
                affinity: domain::ClusterAffinity {
                    exclude: strings(&["member1"]),
                    ..Default::default()
                },
            },
        ],
        cluster_tolerations: vec![
            domain::Toleration {
                key: domain::TAINT_NOT_READY.into(),
                operator: domain::TolerationOperator::Exists,
                value: String::new(),
                effect: Some(domain::TaintEffect::NoExecute),
                toleration_seconds: Some(300),
            },
            domain::Toleration {
                key: "dedicated".into(),
                operator: domain::TolerationOperator::Equal,
                value: "gpu".into(),
                effect: None,
                toleration_seconds: Some(0),
            },
        ],
        spread_constraints: vec![
            domain::SpreadConstraint {
                spread_by_field: Some(domain::SpreadField::Region),
                spread_by_label: String::new(),
                max_groups: 3,
                min_groups: 1,
            },
            domain::SpreadConstraint {
                spread_by_field: None,
                spread_by_label: "rack".into(),
                max_groups: 0,
                min_groups: 2,
            },
        ],
        replica_scheduling: Some(domain::ReplicaSchedulingStrategy {
            replica_scheduling_type: domain::ReplicaSchedulingType::Divided,
            replica_division_preference: Some(domain::ReplicaDivisionPreference::Weighted),
            weight_preference: Some(domain::ClusterPreferences {
                static_weight_list: vec![
                    domain::StaticClusterWeight {
                        target_cluster: domain::ClusterAffinity {
                            cluster_names: strings(&["member1"]),
                            ..Default::default()
                        },
                        weight: 2,
                    },
                    domain::StaticClusterWeight {
                        target_cluster: affinity(),
                        weight: 1,
                    },
                ],
                dynamic_weight: Some(domain::DynamicWeightFactor::AvailableReplicas),
            }),
        }),
    }
}

fn failover() -> domain::FailoverBehavior {
    domain::FailoverBehavior {
        cluster: Some(domain::ClusterFailoverBehavior {
            purge_mode: Some(domain::PurgeMode::Directly),
            state_preservation: vec![domain::StatePreservationRule {
                alias_label_name: "app.io/epoch".into(),
                json_path: "{.epoch}".into(),
            }],
            failback_stabilization_window_seconds: Some(600),
        }),
        application: Some(domain::ApplicationFailoverBehavior {
            toleration_seconds: Some(120),
            purge_mode: Some(domain::PurgeMode::Never),
            grace_period_seconds: Some(600),
            state_preservation: vec![domain::StatePreservationRule {
                alias_label_name: "app.io/offset".into(),
                json_path: "{.offset}".into(),
            }],
        }),
    }
}

fn propagation_policy(namespace: &str) -> domain::PropagationPolicy {
    domain::PropagationPolicy {
        meta: meta("nginx-pp", namespace),
        spec: domain::PropagationSpec {
            resource_selectors: vec![domain::ResourceSelector {
                api_version: "apps/v1".into(),
                kind: "Deployment".into(),
                namespace: namespace.into(),
                name: "nginx".into(),
                label_selector: Some(domain::LabelSelector {
                    match_labels: labels(&[("app", "nginx")]),
                    match_expressions: vec![domain::LabelSelectorRequirement {
                        key: "tier".into(),
                        operator: domain::SelectorOperator::NotIn,
                        values: strings(&["test"]),
                    }],
                }),
            }],
            priority: 5,
            placement: placement(),
            failover: Some(failover()),
            propagate_deps: true,
            scheduler_name: domain::DEFAULT_SCHEDULER_NAME.into(),
            preemption: domain::Preemption::Always,
            activation_preference: Some(domain::ActivationPreference::Lazy),
            preserve_resources_on_deletion: true,
            conflict_resolution: domain::ConflictResolution::Overwrite,
            suspension: Some(domain::Suspension {
                dispatching: Some(false),
                dispatching_on_clusters: Some(domain::SuspendClusters {
                    cluster_names: vec!["member2".into()],
                }),
            }),
        },
    }
}

fn taint_policy() -> domain::ClusterTaintPolicy {
    domain::ClusterTaintPolicy {
        meta: meta("not-ready", ""),
        target_clusters: Some(affinity()),
        add_on_conditions: vec![domain::MatchCondition {
            condition_type: "Ready".into(),
            operator: domain::SelectorOperator::In,
            status_values: vec![
                domain::ConditionStatus::False,
                domain::ConditionStatus::Unknown,
            ],
        }],
        remove_on_conditions: vec![domain::MatchCondition {
            condition_type: "Ready".into(),
            operator: domain::SelectorOperator::NotIn,
            status_values: vec![domain::ConditionStatus::False],
        }],
        taints: vec![domain::TaintSpec {
            key: domain::TAINT_NOT_READY.into(),
            value: "x".into(),
            effect: domain::TaintEffect::NoExecute,
        }],
    }
}

fn task(cluster: &str, purge_mode: domain::PurgeMode) -> domain::GracefulEvictionTask {
    domain::GracefulEvictionTask {
        from_cluster: cluster.into(),
        purge_mode,
        replicas: Some(4),
        reason: domain::REASON_TAINT_UNTOLERATED.into(),
        message: "evicted".into(),
        producer: domain::PRODUCER_TAINT_MANAGER.into(),
        grace_period_seconds: Some(30),
        suppress_deletion: Some(false),
        preserved_label_state: labels(&[("app.io/epoch", "3")]),
        clusters_before_failover: strings(&["member1", "member2"]),
        creation_timestamp: t(1_700_000_400),
        trace_context: "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01".into(),
    }
}

fn binding() -> domain::ResourceBinding {
    domain::ResourceBinding {
        meta: meta("nginx-deployment", "default"),
        spec: domain::ResourceBindingSpec {
            resource: domain::ObjectReference {
                api_version: "apps/v1".into(),
                kind: "Deployment".into(),
                namespace: "default".into(),
                name: "nginx".into(),
                uid: "tmpl-uid".into(),
            },
            replicas: 12,
            replica_requirements: Some(domain::ReplicaRequirements::of(&[
                ("cpu", 250),
                ("memory", 128 << 20),
                ("nvidia.com/gpu", 1),
            ])),
            placement: Some(placement()),
            clusters: vec![
                domain::TargetCluster::new("member2", 8),
                domain::TargetCluster::new("member3", 4),
            ],
            graceful_eviction_tasks: vec![
                task("member1", domain::PurgeMode::Gracefully),
                domain::GracefulEvictionTask {
                    from_cluster: "member4".into(),
                    purge_mode: domain::PurgeMode::Never,
                    suppress_deletion: Some(true),
                    ..Default::default()
                },
            ],
            required_by_clusters: strings(&["member5", "member6"]),
            reschedule_triggered_at: t(1_700_000_500),
            failover: Some(failover()),
            scheduler_name: "default-scheduler".into(),
            propagate_deps: true,
            preserve_resources_on_deletion: true,
            suspension: None,
            conflict_resolution: domain::ConflictResolution::Overwrite,
        },
        status: domain::ResourceBindingStatus {
            conditions: vec![condition("Scheduled", domain::ConditionStatus::True)],
            scheduler_observed_generation: 7,
            aggregated_status_observed_generation: 7,
            failback_clusters: strings(&["member9"]),
            application_failover_clusters: strings(&["member8"]),
            unschedulable_replicas: 2,
            scheduler_observing_affinity_name: "primary".into(),
            last_scheduled_time: t(1_700_000_450),
            applied_placement: Some(placement()),
            aggregated_status: vec![
                domain::AggregatedStatusItem {
                    cluster_name: "member2".into(),
                    applied: true,
                    applied_message: String::new(),
                    health: domain::ResourceHealth::Healthy,
                    ready_replicas: 8,
                    status: r#"{"readyReplicas":8}"#.into(),
                },
                domain::AggregatedStatusItem {
                    cluster_name: "member3".into(),
                    applied: false,
                    applied_message: "Failed to apply all manifests (0/1)".into(),
                    health: domain::ResourceHealth::Unhealthy,
                    ready_replicas: 0,
                    status: String::new(),
                },
            ],
        },
    }
}

/// domain → wire → bytes → wire → domain.
fn roundtrip<D, W>(value: &D) -> D
where
    D: Clone + Into<W> + TryFrom<W, Error = ConvertError>,
    W: Message + Default,
{
    let wire: W = value.clone().into();
    let decoded = W::decode(wire.encode_to_vec().as_slice()).unwrap();
    D::try_from(decoded).unwrap()
}

/// Asserts that each of `values` comes back unchanged from a [`roundtrip`] through `W`.
#[track_caller]
fn assert_roundtrips<D, W>(values: impl IntoIterator<Item = D>)
where
    D: Clone + std::fmt::Debug + PartialEq + Into<W> + TryFrom<W, Error = ConvertError>,
    W: Message + Default,
{
    for value in values {
        assert_eq!(roundtrip::<_, W>(&value), value);
    }
}

// === round trips ===

#[test]
fn resources_roundtrip() {
    // Each case: name, whether domain → wire → domain gives back the original.
    let cases: Vec<(&str, bool)> = vec![
        (
            "cluster",
            roundtrip::<_, v1::Cluster>(&cluster()) == cluster(),
        ),
        ("cluster/default", {
            let minimal = domain::Cluster::default();
            roundtrip::<_, v1::Cluster>(&minimal) == minimal
        }),
        (
            "propagation policy",
            roundtrip::<_, v1::PropagationPolicy>(&propagation_policy("default"))
                == propagation_policy("default"),
        ),
        (
            "cluster propagation policy",
            roundtrip::<_, v1::ClusterPropagationPolicy>(&propagation_policy(""))
                == propagation_policy(""),
        ),
        ("propagation policy/default", {
            let minimal = domain::PropagationPolicy::default();
            roundtrip::<_, v1::PropagationPolicy>(&minimal) == minimal
        }),
        ("cluster taint policy", {
            roundtrip::<_, v1::ClusterTaintPolicy>(&taint_policy()) == taint_policy()
        }),
        ("cluster taint policy/default", {
            let minimal = domain::ClusterTaintPolicy::default();
            roundtrip::<_, v1::ClusterTaintPolicy>(&minimal) == minimal
        }),
        (
            "resource binding",
            roundtrip::<_, v1::ResourceBinding>(&binding()) == binding(),
        ),
        ("resource binding/default", {
            let minimal = domain::ResourceBinding::default();
            roundtrip::<_, v1::ResourceBinding>(&minimal) == minimal
        }),
        ("placement/default", {
            let minimal = domain::Placement::default();
            roundtrip::<_, v1::Placement>(&minimal) == minimal
        }),
        ("failover/empty behaviours", {
            let behaviours = domain::FailoverBehavior {
                cluster: Some(domain::ClusterFailoverBehavior::default()),
                application: Some(domain::ApplicationFailoverBehavior::default()),
            };
            roundtrip::<_, v1::FailoverBehavior>(&behaviours) == behaviours
        }),
    ];
    let failed: Vec<&str> = cases
        .iter()
        .filter(|(_, ok)| !ok)
        .map(|(name, _)| *name)
        .collect();
    assert!(failed.is_empty(), "round trip changed: {failed:?}");
}

#[test]
fn every_enum_variant_roundtrips() {
    use domain::{ConditionStatus as C, SelectorOperator as O, SpreadField as F};
    use domain::{PurgeMode as P, ResourceHealth as H, TaintEffect as E};
    for effect in [E::NoSchedule, E::PreferNoSchedule, E::NoExecute] {
        let taint = domain::Taint::new("k", effect, None);
        assert_eq!(roundtrip::<_, v1::Taint>(&taint), taint);
        let toleration = domain::Toleration {
            effect: Some(effect),
            ..Default::default()
        };
        assert_eq!(roundtrip::<_, v1::Toleration>(&toleration), toleration);
    }
    assert_roundtrips::<_, v1::GracefulEvictionTask>(
        [P::Directly, P::Gracefully, P::Never].map(|purge_mode| task("m", purge_mode)),
    );
    assert_roundtrips::<_, v1::AggregatedStatusItem>([H::Healthy, H::Unhealthy, H::Unknown].map(
        |health| domain::AggregatedStatusItem {
            health,
            ..Default::default()
        },
    ));
    assert_roundtrips::<_, v1::ClusterSpec>([domain::SyncMode::Push, domain::SyncMode::Pull].map(
        |sync_mode| domain::ClusterSpec {
            sync_mode,
            ..Default::default()
        },
    ));
    assert_roundtrips::<_, v1::Condition>(
        [C::True, C::False, C::Unknown].map(|status| condition("Ready", status)),
    );
    assert_roundtrips::<_, v1::SpreadConstraint>(
        [F::Cluster, F::Region, F::Zone, F::Provider].map(|field| domain::SpreadConstraint {
            spread_by_field: Some(field),
            ..Default::default()
        }),
    );
    assert_roundtrips::<_, v1::LabelSelectorRequirement>(
        [O::In, O::NotIn, O::Exists, O::DoesNotExist].map(|operator| {
            domain::LabelSelectorRequirement {
                key: "k".into(),
                operator,
                values: vec![],
            }
        }),
    );
    for (kind, preference) in [
        (domain::ReplicaSchedulingType::Duplicated, None),
        (
            domain::ReplicaSchedulingType::Divided,
            Some(domain::ReplicaDivisionPreference::Aggregated),
        ),
    ] {
        let s = domain::ReplicaSchedulingStrategy {
            replica_scheduling_type: kind,
            replica_division_preference: preference,
            weight_preference: None,
        };
        assert_eq!(roundtrip::<_, v1::ReplicaSchedulingStrategy>(&s), s);
    }
}

#[test]
fn wire_shape_follows_karmada() {
    let wire = v1::ResourceBinding::from(binding());
    let spec = wire.spec.as_ref().unwrap();
    assert_eq!(spec.clusters[0].replicas, 8);
    assert_eq!(spec.graceful_eviction_tasks[0].from_cluster, "member1");
    assert_eq!(
        spec.graceful_eviction_tasks[0].purge_mode,
        v1::PurgeMode::Gracefully as i32
    );
    // requiredBy is written as one unnamed entry holding the flattened clusters.
    assert_eq!(spec.required_by.len(), 1);
    let names: Vec<&str> = spec.required_by[0]
        .clusters
        .iter()
        .map(|c| c.name.as_str())
        .collect();
    assert_eq!(names, ["member5", "member6"]);
    // Karmada inlines a term's affinity next to its name.
    let terms = &spec.placement.as_ref().unwrap().cluster_affinities;
    assert_eq!(terms[1].affinity_name, "backup");
    assert_eq!(terms[1].exclude, ["member1"]);
    // Empty rules are written as an absent `statePreservation`; window as `failback`.
    let cluster_failover = v1::FailoverBehavior::from(failover()).cluster.unwrap();
    assert_eq!(
        cluster_failover
            .failback
            .unwrap()
            .stabilization_window_seconds,
        600
    );
    let empty = v1::ClusterFailoverBehavior::from(domain::ClusterFailoverBehavior::default());
    assert!(empty.state_preservation.is_none() && empty.failback.is_none());
    // The summary goes whole (extended resources in `scalar`), with the pods still allowed
    // as its allocatable replicas: 50 − 8 − 2.
    let status = v1::Cluster::from(cluster()).status.unwrap();
    let summary = status.resource_summary.unwrap();
    assert_eq!(summary.allocatable_replicas, Some(40));
    let allocatable = summary.allocatable.unwrap();
    assert_eq!((allocatable.cpu_millis, allocatable.pods), (8000, 50));
    assert_eq!(allocatable.scalar.get("nvidia.com/gpu"), Some(&2));
    assert_eq!(summary.allocatable_modelings.len(), 2);
    // resource models travel as Karmada writes them: quantities
    let spec = v1::Cluster::from(cluster()).spec.unwrap();
    let grade1 = &spec.resource_models[1].ranges[1];
    assert_eq!(
        (grade1.min.as_str(), grade1.name.as_str()),
        ("16Gi", "memory")
    );
    assert_eq!(spec.resource_models[0].ranges[0].max, "2");
    let bad = v1::ClusterSpec {
        resource_models: vec![v1::ResourceModel {
            grade: 0,
            ranges: vec![v1::ResourceModelRange {
                name: "cpu".into(),
                min: "lots".into(),
                max: "2".into(),
            }],
        }],
        ..spec
    };
    let err = domain::ClusterSpec::try_from(bad).unwrap_err();
    assert_eq!(err.field, "resourceModels[0].ranges[0].min", "{err}");
    // a reporter of pods alone: its count is the free pods; "unknown" (−1) is no summary
    let pods_only = |n| {
        domain::ClusterStatus::try_from(v1::ClusterStatus {
            resource_summary: Some(v1::ResourceSummary {
                allocatable_replicas: Some(n),
                ..Default::default()
            }),
            ..Default::default()
        })
        .unwrap()
        .resource_summary
    };
    assert_eq!(pods_only(7).map(|s| s.free("pods")), Some(7));
    assert_eq!(pods_only(-1), None);
    let none = v1::ClusterStatus::from(domain::ClusterStatus::default());
    assert!(none.resource_summary.is_none());
}

// === UNSPECIFIED and absent fields ===

#[test]
fn unspecified_reads_as_the_kubernetes_meaning_where_there_is_one() {
    let toleration = domain::Toleration::try_from(v1::Toleration {
        key: "k".into(),
        operator: v1::TolerationOperator::Unspecified as i32,
        effect: v1::TaintEffect::Unspecified as i32,
        ..Default::default()
    })
    .unwrap();
    assert_eq!(toleration.operator, domain::TolerationOperator::Equal);
    assert_eq!(
        toleration.effect, None,
        "an empty effect matches every effect"
    );

    let strategy =
        domain::ReplicaSchedulingStrategy::try_from(v1::ReplicaSchedulingStrategy::default())
            .unwrap();
    assert_eq!(
        strategy.replica_scheduling_type,
        domain::ReplicaSchedulingType::Divided
    );
    assert_eq!(strategy.replica_division_preference, None);

    let constraint = domain::SpreadConstraint::try_from(v1::SpreadConstraint::default()).unwrap();
    assert_eq!(constraint.spread_by_field, None);

    let behavior =
        domain::ClusterFailoverBehavior::try_from(v1::ClusterFailoverBehavior::default()).unwrap();
    assert_eq!(behavior.purge_mode, None);
}

#[test]
fn absent_messages_read_as_defaults() {
    let binding = domain::ResourceBinding::try_from(v1::ResourceBinding::default()).unwrap();
    assert_eq!(binding, domain::ResourceBinding::default());
    let policy = domain::ClusterTaintPolicy::try_from(v1::ClusterTaintPolicy {
        metadata: Some(v1::ObjectMeta {
            name: "p".into(),
            ..Default::default()
        }),
        spec: None,
    })
    .unwrap();
    assert_eq!(policy.meta.name, "p");
    assert!(policy.taints.is_empty() && policy.target_clusters.is_none());
}

// === error paths ===

/// Converts a corrupted wire object and returns the error's field path.
fn error_path<W, D>(wire: W) -> String
where
    D: TryFrom<W, Error = ConvertError> + std::fmt::Debug,
{
    match D::try_from(wire) {
        Ok(value) => panic!("expected an error, converted to {value:?}"),
        Err(e) => e.field,
    }
}

/// A change that makes a wire message invalid.
type Corrupt<W> = fn(&mut W);

/// Corrupts the wire form of `value` by each case and collects the cases whose error path
/// is not the expected one, as (expected, got).
fn corrupted_paths<D, W>(
    value: D,
    cases: Vec<(&'static str, Corrupt<W>)>,
    mismatches: &mut Vec<(&'static str, String)>,
) where
    D: Clone + TryFrom<W, Error = ConvertError> + std::fmt::Debug,
    W: From<D>,
{
    for (want, corrupt) in cases {
        let mut wire = W::from(value.clone());
        corrupt(&mut wire);
        let got = error_path::<_, D>(wire);
        if got != want {
            mismatches.push((want, got));
        }
    }
}

/// The placement of a wire binding's spec (the fixture has one).
fn placement_of(b: &mut v1::ResourceBinding) -> &mut v1::Placement {
    b.spec.as_mut().unwrap().placement.as_mut().unwrap()
}

#[test]
fn bad_enums_report_their_json_path() {
    const BOGUS: i32 = 99;
    let cluster_cases: Vec<(&str, Corrupt<v1::Cluster>)> = vec![
        ("spec.taints[2].effect", |c| {
            c.spec.as_mut().unwrap().taints[2].effect = BOGUS;
        }),
        ("spec.taints[1].effect", |c| {
            c.spec.as_mut().unwrap().taints[1].effect = v1::TaintEffect::Unspecified as i32;
        }),
        ("spec.syncMode", |c| c.spec.as_mut().unwrap().sync_mode = 0),
        ("status.conditions[1].status", |c| {
            c.status.as_mut().unwrap().conditions[1].status = BOGUS;
        }),
    ];
    let binding_cases: Vec<(&str, Corrupt<v1::ResourceBinding>)> = vec![
        ("spec.gracefulEvictionTasks[1].purgeMode", |b| {
            b.spec.as_mut().unwrap().graceful_eviction_tasks[1].purge_mode = 0;
        }),
        ("spec.placement.clusterTolerations[1].operator", |b| {
            placement_of(b).cluster_tolerations[1].operator = BOGUS;
        }),
        ("spec.placement.clusterTolerations[0].effect", |b| {
            placement_of(b).cluster_tolerations[0].effect = BOGUS;
        }),
        (
            "spec.placement.clusterAffinity.labelSelector.matchExpressions[0].operator",
            |b| {
                let a = placement_of(b).cluster_affinity.as_mut().unwrap();
                a.label_selector.as_mut().unwrap().match_expressions[0].operator = 0;
            },
        ),
        (
            "spec.placement.clusterAffinities[0].fieldSelector.matchExpressions[1].operator",
            |b| {
                let a = &mut placement_of(b).cluster_affinities[0];
                a.field_selector.as_mut().unwrap().match_expressions[1].operator = BOGUS;
            },
        ),
        ("spec.placement.spreadConstraints[1].spreadByField", |b| {
            placement_of(b).spread_constraints[1].spread_by_field = BOGUS;
        }),
        (
            "spec.placement.replicaScheduling.replicaSchedulingType",
            |b| {
                let s = placement_of(b).replica_scheduling.as_mut().unwrap();
                s.replica_scheduling_type = BOGUS;
            },
        ),
        (
            "spec.placement.replicaScheduling.weightPreference.dynamicWeight",
            |b| {
                let s = placement_of(b).replica_scheduling.as_mut().unwrap();
                s.weight_preference.as_mut().unwrap().dynamic_weight = BOGUS;
            },
        ),
        (
            "spec.placement.replicaScheduling.weightPreference.staticWeightList[0].targetCluster.fieldSelector.matchExpressions[0].operator",
            |b| {
                let s = placement_of(b).replica_scheduling.as_mut().unwrap();
                let w = &mut s.weight_preference.as_mut().unwrap().static_weight_list[0];
                w.target_cluster.as_mut().unwrap().field_selector = Some(v1::FieldSelector {
                    match_expressions: vec![v1::LabelSelectorRequirement {
                        key: "zone".into(),
                        operator: BOGUS,
                        values: vec![],
                    }],
                });
            },
        ),
        ("spec.failover.cluster.purgeMode", |b| {
            let f = b.spec.as_mut().unwrap().failover.as_mut().unwrap();
            f.cluster.as_mut().unwrap().purge_mode = BOGUS;
        }),
        ("spec.failover.application.purgeMode", |b| {
            let f = b.spec.as_mut().unwrap().failover.as_mut().unwrap();
            f.application.as_mut().unwrap().purge_mode = BOGUS;
        }),
        ("status.aggregatedStatus[1].health", |b| {
            b.status.as_mut().unwrap().aggregated_status[1].health = 0;
        }),
        ("status.conditions[0].status", |b| {
            b.status.as_mut().unwrap().conditions[0].status = 0;
        }),
        (
            "status.appliedPlacement.clusterTolerations[0].effect",
            |b| {
                let p = b
                    .status
                    .as_mut()
                    .unwrap()
                    .applied_placement
                    .as_mut()
                    .unwrap();
                p.cluster_tolerations[0].effect = BOGUS;
            },
        ),
    ];
    let policy_cases: Vec<(&str, Corrupt<v1::ClusterTaintPolicy>)> = vec![
        ("spec.taints[0].effect", |p| {
            p.spec.as_mut().unwrap().taints[0].effect = 0
        }),
        ("spec.addOnConditions[0].statusValues[1]", |p| {
            p.spec.as_mut().unwrap().add_on_conditions[0].status_values[1] = BOGUS;
        }),
        ("spec.removeOnConditions[0].operator", |p| {
            p.spec.as_mut().unwrap().remove_on_conditions[0].operator = 0;
        }),
        (
            "spec.targetClusters.labelSelector.matchExpressions[0].operator",
            |p| {
                let target = p.spec.as_mut().unwrap().target_clusters.as_mut().unwrap();
                target.label_selector.as_mut().unwrap().match_expressions[0].operator = BOGUS;
            },
        ),
    ];
    let pp_cases: Vec<(&str, Corrupt<v1::PropagationPolicy>)> = vec![
        (
            "spec.resourceSelectors[0].labelSelector.matchExpressions[0].operator",
            |p| {
                let s = &mut p.spec.as_mut().unwrap().resource_selectors[0];
                s.label_selector.as_mut().unwrap().match_expressions[0].operator = 0;
            },
        ),
        ("spec.placement.clusterTolerations[1].effect", |p| {
            let placement = p.spec.as_mut().unwrap().placement.as_mut().unwrap();
            placement.cluster_tolerations[1].effect = BOGUS;
        }),
    ];

    let mut mismatches = Vec::new();
    corrupted_paths(cluster(), cluster_cases, &mut mismatches);
    corrupted_paths(binding(), binding_cases, &mut mismatches);
    corrupted_paths(taint_policy(), policy_cases, &mut mismatches);
    corrupted_paths(propagation_policy("default"), pp_cases, &mut mismatches);
    assert!(mismatches.is_empty(), "(expected, got): {mismatches:#?}");
}

#[test]
fn error_messages_name_the_enum_and_value() {
    let mut wire = v1::Taint::from(domain::Taint::new(
        "k",
        domain::TaintEffect::NoExecute,
        None,
    ));
    wire.effect = 42;
    let err = domain::Taint::try_from(wire.clone()).unwrap_err();
    assert_eq!(
        err,
        ConvertError::new("effect", "unknown TaintEffect value 42")
    );
    assert_eq!(err.to_string(), "effect: unknown TaintEffect value 42");
    wire.effect = 0;
    let err = domain::Taint::try_from(wire).unwrap_err();
    assert_eq!(err.message, "TaintEffect must be set, not UNSPECIFIED");
}

#[test]
fn bad_timestamps_report_their_json_path() {
    type Corrupt = fn(&mut v1::ResourceBinding);
    let cases: Vec<(&str, &str, Corrupt)> = vec![
        ("metadata.creationTimestamp", "nanos", |b| {
            b.metadata.as_mut().unwrap().creation_timestamp = Some(stamp(0, -1));
        }),
        ("metadata.deletionTimestamp", "nanos", |b| {
            b.metadata.as_mut().unwrap().deletion_timestamp = Some(stamp(0, 1_000_000_000));
        }),
        (
            "spec.gracefulEvictionTasks[0].creationTimestamp",
            "seconds",
            |b| {
                b.spec.as_mut().unwrap().graceful_eviction_tasks[0].creation_timestamp =
                    Some(stamp(i64::MAX, 0));
            },
        ),
        ("spec.rescheduleTriggeredAt", "seconds", |b| {
            b.spec.as_mut().unwrap().reschedule_triggered_at =
                Some(stamp(MIN_TIMESTAMP_SECONDS - 1, 0));
        }),
        ("status.lastScheduledTime", "nanos", |b| {
            b.status.as_mut().unwrap().last_scheduled_time = Some(stamp(1, i32::MIN));
        }),
        ("status.conditions[0].lastTransitionTime", "seconds", |b| {
            b.status.as_mut().unwrap().conditions[0].last_transition_time =
                Some(stamp(MAX_TIMESTAMP_SECONDS + 1, 0));
        }),
    ];
    for (want_field, want_word, corrupt) in cases {
        let mut wire = v1::ResourceBinding::from(binding());
        corrupt(&mut wire);
        let err = domain::ResourceBinding::try_from(wire).unwrap_err();
        assert_eq!(err.field, want_field);
        assert!(
            err.message.contains(want_word),
            "{want_field}: {}",
            err.message
        );
    }
    let mut wire = v1::Cluster::from(cluster());
    wire.spec.as_mut().unwrap().taints[0].time_added = Some(stamp(0, -5));
    assert_eq!(
        error_path::<_, domain::Cluster>(wire),
        "spec.taints[0].timeAdded"
    );
}

// === timestamps ===

#[test]
fn timestamps_convert_at_millisecond_precision() {
    let cases = [
        (0, stamp(0, 0)),
        (1_500, stamp(1, 500_000_000)),
        (-1, stamp(-1, 999_000_000)),
        (-1_500, stamp(-2, 500_000_000)),
        (
            MAX_TIMESTAMP_SECONDS * 1000 + 999,
            stamp(MAX_TIMESTAMP_SECONDS, 999_000_000),
        ),
        (
            MIN_TIMESTAMP_SECONDS * 1000,
            stamp(MIN_TIMESTAMP_SECONDS, 0),
        ),
    ];
    for (millis, ts) in cases {
        assert_eq!(
            time_to_timestamp(Time::from_millis(millis)),
            ts,
            "{millis} ms"
        );
        assert_eq!(
            timestamp_to_time(&ts),
            Ok(Time::from_millis(millis)),
            "{ts:?}"
        );
    }
    // Sub-millisecond nanos are truncated, never rounded up.
    assert_eq!(
        timestamp_to_time(&stamp(2, 999_999)),
        Ok(Time::from_millis(2_000))
    );
    assert_eq!(
        timestamp_to_time(&stamp(-1, 1_999_999)),
        Ok(Time::from_millis(-999))
    );
}

proptest::proptest! {
    #[test]
    fn any_valid_time_roundtrips(
        millis in (MIN_TIMESTAMP_SECONDS * 1000)..=(MAX_TIMESTAMP_SECONDS * 1000 + 999)
    ) {
        let time = Time::from_millis(millis);
        let ts = time_to_timestamp(time);
        proptest::prop_assert!((0..1_000_000_000).contains(&ts.nanos));
        proptest::prop_assert_eq!(timestamp_to_time(&ts), Ok(time));
    }
}

// === ConvertError paths ===

#[test]
fn error_paths_compose() {
    let leaf = ConvertError::new("effect", "bad");
    assert_eq!(
        leaf.clone().at_index("taints", 2).within("spec").field,
        "spec.taints[2].effect"
    );
    assert_eq!(
        ConvertError::new("", "bad").within("timeAdded").field,
        "timeAdded"
    );
    assert_eq!(
        ConvertError::new("[1]", "bad").within("statusValues").field,
        "statusValues[1]"
    );
}

// === One model: the proto contract and the Karmada YAML carry the same fields ===

/// The fields of `message` (and of the messages under it) that `value`, the serde form of a
/// domain object, leaves out, as JSON paths (`[]` for any item of a list). A field counts as
/// carried when any item of its list has it, since some fields exclude each other.
fn missing_fields(
    set: &prost_types::FileDescriptorSet,
    message: &str,
    value: &serde_json::Value,
) -> std::collections::BTreeSet<String> {
    let (mut expected, mut present) = Default::default();
    walk_fields(set, message, value, "spec", &mut expected, &mut present);
    &expected - &present
}

fn walk_fields(
    set: &prost_types::FileDescriptorSet,
    message: &str,
    value: &serde_json::Value,
    path: &str,
    expected: &mut std::collections::BTreeSet<String>,
    present: &mut std::collections::BTreeSet<String>,
) {
    use prost_types::field_descriptor_proto::{Label, Type};
    let descriptor = set
        .file
        .iter()
        .flat_map(|f| &f.message_type)
        .find(|m| m.name() == message)
        .unwrap_or_else(|| panic!("message {message} missing"));
    for field in &descriptor.field {
        let here = format!("{path}.{}", field.json_name());
        expected.insert(here.clone());
        let Some(v) = value.get(field.json_name()) else {
            continue;
        };
        present.insert(here.clone());
        if field.r#type() != Type::Message || field.type_name().starts_with(".google.") {
            continue;
        }
        let nested = field.type_name().rsplit('.').next().unwrap_or_default();
        match (field.label(), v) {
            (Label::Repeated, serde_json::Value::Array(items)) => {
                for item in items {
                    walk_fields(set, nested, item, &format!("{here}[]"), expected, present);
                }
            }
            // a map (its entries are strings here)
            (Label::Repeated, _) => {}
            _ => walk_fields(set, nested, v, &here, expected, present),
        }
    }
}

/// The guard of the one model (docs/design.md): a field added to the proto contract of a
/// propagation policy but not to the domain type (or not to its conversion) is missing from
/// the YAML that `get -o yaml` prints and `apply -f` reads, and fails here.
#[test]
fn every_proto_field_of_a_propagation_spec_is_in_its_karmada_yaml() {
    let set =
        <prost_types::FileDescriptorSet as prost::Message>::decode(crate::FILE_DESCRIPTOR_SET)
            .unwrap();
    let spec = propagation_policy("default").spec;
    // through the wire and back, so that a field the conversion drops is missing too
    let spec = domain::PropagationSpec::try_from(v1::PropagationSpec::from(spec)).unwrap();
    let value = serde_json::to_value(&spec).unwrap();
    let missing = missing_fields(&set, "PropagationSpec", &value);
    assert!(
        missing.is_empty(),
        "not carried into Karmada's YAML: {missing:#?}"
    );
}

/// The same guard for a ClusterTaintPolicy's spec.
#[test]
fn every_proto_field_of_a_taint_policy_spec_is_in_its_karmada_yaml() {
    let set =
        <prost_types::FileDescriptorSet as prost::Message>::decode(crate::FILE_DESCRIPTOR_SET)
            .unwrap();
    let policy =
        domain::ClusterTaintPolicy::try_from(v1::ClusterTaintPolicy::from(taint_policy())).unwrap();
    let spec = flotilla_core::types::shape::TaintPolicySpec::from(policy);
    let value = serde_json::to_value(&spec).unwrap();
    let missing = missing_fields(&set, "ClusterTaintPolicySpec", &value);
    assert!(
        missing.is_empty(),
        "not carried into Karmada's YAML: {missing:#?}"
    );
}
