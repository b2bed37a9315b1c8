//! Property tests: validators never panic on arbitrary input, and inputs that are valid by
//! construction pass.

use std::collections::BTreeMap;

use proptest::prelude::*;

use crate::types::*;
use crate::validation::*;

/// A valid cluster name: a DNS-1123 label of 1–48 characters.
fn cluster_name() -> impl Strategy<Value = String> {
    "[a-z0-9]([-a-z0-9]{0,46}[a-z0-9])?"
}

/// A valid label value (possibly empty).
fn label_value() -> impl Strategy<Value = String> {
    "([A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?)?"
}

/// A valid qualified name, with or without a prefix.
fn qualified_name() -> impl Strategy<Value = String> {
    "([a-z0-9]([-a-z0-9]{0,20}[a-z0-9])?(\\.[a-z0-9]{1,10}){0,3}/)?[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?"
}

/// Arbitrary text, biased towards the characters the checks care about.
fn nasty() -> impl Strategy<Value = String> {
    prop_oneof![
        any::<String>(),
        "[a-zA-Z0-9./:@?#%_\\-\\[\\] \n\u{0}\u{85}é]{0,80}",
        "https?://[a-z0-9.:@\\[\\]?#/%-]{0,40}",
    ]
}

proptest! {
    #[test]
    fn name_checks_never_panic(s in nasty()) {
        let _ = check_dns1123_label(&s);
        let _ = check_dns1123_subdomain(&s);
        let _ = check_cluster_name(&s);
        let _ = check_qualified_name(&s);
        let _ = check_label_value(&s);
        let _ = check_affinity_name(&s);
        let _ = check_eviction_reason(&s);
        let _ = check_path_segment_name(&s);
        let _ = check_text(&s, 16, true);
        let _ = validate_api_endpoint(&s, &FieldPath::new("spec").child("apiEndpoint"));
    }

    #[test]
    fn object_validators_never_panic(
        a in nasty(), b in nasty(), c in nasty(), d in nasty(),
        n in any::<i64>(), m in any::<i32>(),
    ) {
        let limits = Limits::default();
        let cluster = Cluster {
            meta: ObjectMeta {
                name: a.clone(),
                namespace: b.clone(),
                labels: BTreeMap::from([(c.clone(), d.clone())]),
                annotations: BTreeMap::from([(d.clone(), c.clone())]),
                finalizers: vec![a.clone()],
                ..ObjectMeta::default()
            },
            spec: ClusterSpec {
                api_endpoint: b.clone(),
                provider: c.clone(),
                region: d.clone(),
                zones: vec![a.clone(), a.clone()],
                taints: vec![Taint { key: c.clone(), value: d.clone(), effect: TaintEffect::NoExecute, time_added: None, trace_context: String::new() }],
                ..ClusterSpec::default()
            },
            status: ClusterStatus::default(),
        };
        let _ = validate_cluster(&cluster, &limits);
        let affinity = ClusterAffinity {
            label_selector: Some(LabelSelector {
                match_labels: BTreeMap::from([(a.clone(), b.clone())]),
                match_expressions: vec![LabelSelectorRequirement {
                    key: c.clone(), operator: SelectorOperator::In, values: vec![d.clone()],
                }],
            }),
            field_selector: Some(FieldSelector {
                match_expressions: vec![LabelSelectorRequirement {
                    key: a.clone(), operator: SelectorOperator::NotIn, values: vec![b.clone()],
                }],
            }),
            cluster_names: vec![a.clone(), b.clone()],
            exclude: vec![c.clone()],
        };
        let placement = Placement {
            cluster_affinity: Some(affinity.clone()),
            cluster_affinities: vec![ClusterAffinityTerm { affinity_name: d.clone(), affinity: affinity.clone() }],
            cluster_tolerations: vec![Toleration {
                key: a.clone(), operator: TolerationOperator::Exists, value: b.clone(),
                effect: None, toleration_seconds: Some(n),
            }],
            spread_constraints: vec![SpreadConstraint {
                spread_by_field: Some(SpreadField::Zone), spread_by_label: c.clone(),
                max_groups: m, min_groups: m.wrapping_neg(),
            }],
            replica_scheduling: Some(ReplicaSchedulingStrategy {
                replica_scheduling_type: ReplicaSchedulingType::Divided,
                replica_division_preference: None,
                weight_preference: Some(ClusterPreferences {
                    static_weight_list: vec![
                        StaticClusterWeight { target_cluster: affinity.clone(), weight: n },
                        StaticClusterWeight { target_cluster: affinity, weight: n },
                    ],
                    dynamic_weight: None,
                }),
            }),
        };
        let failover = FailoverBehavior {
            cluster: Some(ClusterFailoverBehavior {
                purge_mode: Some(PurgeMode::Never),
                state_preservation: vec![StatePreservationRule { alias_label_name: a.clone(), json_path: b.clone() }],
                failback_stabilization_window_seconds: Some(n),
            }),
            application: Some(ApplicationFailoverBehavior {
                toleration_seconds: Some(n), purge_mode: None, grace_period_seconds: Some(n),
                state_preservation: vec![],
            }),
        };
        let policy = PropagationPolicy {
            meta: cluster.meta.clone(),
            spec: PropagationSpec {
                resource_selectors: vec![ResourceSelector {
                    api_version: a.clone(), kind: b.clone(), namespace: c.clone(), name: d.clone(),
                    label_selector: None,
                }],
                priority: m,
                placement: placement.clone(),
                failover: Some(failover.clone()),
                propagate_deps: false,
                scheduler_name: c.clone(),
                ..PropagationSpec::default()
            },
        };
        let _ = validate_propagation_policy(&policy, false, &limits);
        let _ = validate_propagation_policy(&policy, true, &limits);
        let _ = validate_propagation_policy_update(&policy, &PropagationPolicy::default());
        let task = GracefulEvictionTask {
            from_cluster: a.clone(), reason: b.clone(), message: c.clone(), producer: d.clone(),
            grace_period_seconds: Some(n), replicas: Some(m), trace_context: a.clone(),
            clusters_before_failover: vec![b.clone()],
            ..GracefulEvictionTask::default()
        };
        let spec = ResourceBindingSpec {
            resource: ObjectReference { api_version: a.clone(), kind: b.clone(), namespace: c.clone(), name: d.clone(), uid: a.clone() },
            replicas: m,
            placement: Some(placement),
            failover: Some(failover),
            clusters: vec![TargetCluster::new(a.clone(), m)],
            graceful_eviction_tasks: vec![task.clone(), task],
            scheduler_name: b.clone(),
            ..ResourceBindingSpec::default()
        };
        let _ = validate_binding_spec(&spec, &limits);
        let w = WorkloadTemplate {
            meta: &cluster.meta, api_version: &a, kind: &b, replicas: Some(n),
            replica_requirements: None, manifest_bytes: usize::MAX,
        };
        let _ = validate_workload(&w, &limits);
        let _ = validate_page_size(n, &limits);
    }

    #[test]
    fn valid_clusters_pass(
        name in cluster_name(),
        label in qualified_name(),
        value in label_value(),
        keys in proptest::collection::btree_set(qualified_name(), 0..8),
        port in 1u32..=65535,
        zones in proptest::collection::btree_set("[a-z0-9]{1,10}", 0..4),
    ) {
        let cluster = Cluster {
            meta: ObjectMeta {
                name: name.clone(),
                labels: BTreeMap::from([(label, value.clone())]),
                ..ObjectMeta::default()
            },
            spec: ClusterSpec {
                sync_mode: SyncMode::Push,
                api_endpoint: format!("https://{name}.example.com:{port}/api"),
                provider: value.clone(),
                region: value.clone(),
                zones: zones.into_iter().collect(),
                taints: keys
                    .into_iter()
                    .flat_map(|k| {
                        [TaintEffect::NoSchedule, TaintEffect::NoExecute]
                            .map(|effect| Taint { key: k.clone(), value: value.clone(), effect, time_added: None, trace_context: String::new() })
                    })
                    .collect(),
                resource_models: Vec::new(),
            },
            status: ClusterStatus::default(),
        };
        let errs = validate_cluster(&cluster, &Limits::default());
        prop_assert!(errs.is_empty(), "{errs:#?}");
    }

    #[test]
    fn valid_policies_pass(
        names in proptest::collection::btree_set(cluster_name(), 1..20),
        key in qualified_name(),
        value in label_value(),
        seconds in 0..=ONE_YEAR_SECONDS,
        grace in 1..=ONE_YEAR_SECONDS,
        weights in proptest::collection::vec(1i64..=i64::MAX / 64, 1..20),
        min in 0i32..=10,
        extra in 0i32..=10,
    ) {
        let names: Vec<String> = names.into_iter().collect();
        let placement = Placement {
            cluster_affinities: vec![ClusterAffinityTerm {
                affinity_name: "primary".to_owned(),
                affinity: ClusterAffinity {
                    label_selector: Some(LabelSelector {
                        match_labels: BTreeMap::from([(key.clone(), value.clone())]),
                        match_expressions: vec![LabelSelectorRequirement {
                            key: key.clone(),
                            operator: SelectorOperator::Exists,
                            values: vec![],
                        }],
                    }),
                    cluster_names: names.clone(),
                    ..ClusterAffinity::default()
                },
            }],
            cluster_tolerations: vec![Toleration {
                key: key.clone(),
                operator: TolerationOperator::Equal,
                value: value.clone(),
                effect: Some(TaintEffect::NoExecute),
                toleration_seconds: Some(seconds),
            }],
            spread_constraints: vec![
                SpreadConstraint { spread_by_field: Some(SpreadField::Cluster), min_groups: min, max_groups: min + extra, ..SpreadConstraint::default() },
                SpreadConstraint { spread_by_field: Some(SpreadField::Region), min_groups: min, max_groups: 0, ..SpreadConstraint::default() },
            ],
            replica_scheduling: Some(ReplicaSchedulingStrategy {
                replica_scheduling_type: ReplicaSchedulingType::Divided,
                replica_division_preference: Some(ReplicaDivisionPreference::Weighted),
                weight_preference: Some(ClusterPreferences {
                    static_weight_list: names
                        .iter()
                        .zip(weights)
                        .map(|(n, w)| StaticClusterWeight {
                            target_cluster: ClusterAffinity { cluster_names: vec![n.clone()], ..ClusterAffinity::default() },
                            weight: w,
                        })
                        .collect(),
                    dynamic_weight: None,
                }),
            }),
            ..Placement::default()
        };
        let policy = PropagationPolicy {
            meta: ObjectMeta { name: "p".to_owned(), namespace: "ns".to_owned(), ..ObjectMeta::default() },
            spec: PropagationSpec {
                resource_selectors: vec![ResourceSelector {
                    api_version: "apps/v1".to_owned(),
                    kind: "Deployment".to_owned(),
                    namespace: "ns".to_owned(),
                    name: String::new(),
                    label_selector: None,
                }],
                priority: 0,
                placement,
                failover: Some(FailoverBehavior {
                    cluster: Some(ClusterFailoverBehavior { purge_mode: Some(PurgeMode::Directly), ..ClusterFailoverBehavior::default() }),
                    application: Some(ApplicationFailoverBehavior {
                        toleration_seconds: Some(seconds),
                        purge_mode: Some(PurgeMode::Gracefully),
                        grace_period_seconds: Some(grace),
                        state_preservation: vec![StatePreservationRule { alias_label_name: key, json_path: "{ .replicas }".to_owned() }],
                    }),
                }),
                propagate_deps: true,
                scheduler_name: String::new(),
                ..PropagationSpec::default()
            },
        };
        let errs = validate_propagation_policy(&policy, false, &Limits::default());
        prop_assert!(errs.is_empty(), "{errs:#?}");

        // A binding whose targets and tasks are disjoint passes.
        let (targets, evicted) = names.split_at(names.len() / 2);
        let spec = ResourceBindingSpec {
            resource: ObjectReference::new("apps/v1", "Deployment", "ns", "web"),
            replicas: 10,
            clusters: targets.iter().map(|n| TargetCluster::new(n.clone(), 1)).collect(),
            graceful_eviction_tasks: evicted
                .iter()
                .map(|n| GracefulEvictionTask {
                    from_cluster: n.clone(),
                    reason: REASON_TAINT_UNTOLERATED.to_owned(),
                    producer: PRODUCER_TAINT_MANAGER.to_owned(),
                    grace_period_seconds: Some(grace),
                    ..GracefulEvictionTask::default()
                })
                .collect(),
            placement: Some(policy.spec.placement.clone()),
            failover: policy.spec.failover.clone(),
            ..ResourceBindingSpec::default()
        };
        let errs = validate_binding_spec(&spec, &Limits::default());
        prop_assert!(errs.is_empty(), "{errs:#?}");
    }
}
