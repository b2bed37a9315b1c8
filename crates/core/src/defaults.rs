//! Policy defaulting (PD-1, PD-2) with Flotilla's A1 default tolerations.

use crate::types::{
    DEFAULT_SCHEDULER_NAME, PropagationSpec, PurgeMode, ReplicaDivisionPreference,
    ReplicaSchedulingType, SpreadConstraint, SpreadField, TAINT_NOT_READY, TAINT_UNREACHABLE,
    TaintEffect, Toleration, TolerationOperator,
};

/// PD-1.5: default grace period of application failover with purge mode Gracefully.
pub const DEFAULT_APPLICATION_GRACE_PERIOD_SECONDS: i64 = 600;
/// PD-2: default `decisionConditions.tolerationSeconds` of application failover.
pub const DEFAULT_APPLICATION_TOLERATION_SECONDS: i64 = 300;
/// PD-1.7 / A1: default toleration of the not-ready and unreachable NoExecute taints.
pub const DEFAULT_NO_EXECUTE_TOLERATION_SECONDS: i64 = 300;

/// Where NoExecute taints come from (A1, `--no-execute-taints`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum NoExecuteTaints {
    /// Flotilla's default (Karmada v1.5): cluster-health adds them after the eviction
    /// timeout, and policies get default tolerations.
    #[default]
    Auto,
    /// Latest Karmada: only ClusterTaintPolicies or operators add them; no default
    /// tolerations.
    Policy,
}

/// Options of [`default_propagation_spec`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DefaultingOptions {
    /// A1 mode.
    pub no_execute_taints: NoExecuteTaints,
    /// `--default-not-ready-toleration-seconds` (300).
    pub not_ready_toleration_seconds: i64,
    /// `--default-unreachable-toleration-seconds` (300).
    pub unreachable_toleration_seconds: i64,
}

impl Default for DefaultingOptions {
    fn default() -> Self {
        DefaultingOptions {
            no_execute_taints: NoExecuteTaints::Auto,
            not_ready_toleration_seconds: DEFAULT_NO_EXECUTE_TOLERATION_SECONDS,
            unreachable_toleration_seconds: DEFAULT_NO_EXECUTE_TOLERATION_SECONDS,
        }
    }
}

fn default_toleration(key: &str, seconds: i64) -> Toleration {
    Toleration {
        key: key.into(),
        operator: TolerationOperator::Exists,
        value: String::new(),
        effect: Some(TaintEffect::NoExecute),
        toleration_seconds: Some(seconds),
    }
}

/// PD-1.7 "equal toleration": same key, operator, value and effect (seconds ignored).
fn has_equal_toleration(tols: &[Toleration], want: &Toleration) -> bool {
    tols.iter().any(|t| {
        t.key == want.key
            && t.operator == want.operator
            && t.value == want.value
            && t.effect == want.effect
    })
}

/// PD-1 and PD-2: default a (Cluster)PropagationPolicy spec in place. `namespace` is the
/// policy's namespace (empty for a ClusterPropagationPolicy). Idempotent.
pub fn default_propagation_spec(
    spec: &mut PropagationSpec,
    namespace: &str,
    opts: &DefaultingOptions,
) {
    // PD-1.1
    if !namespace.is_empty() {
        for sel in &mut spec.resource_selectors {
            if sel.namespace.is_empty() {
                sel.namespace = namespace.to_string();
            }
        }
    }
    // PD-1.4
    if spec
        .resource_selectors
        .iter()
        .any(|s| s.kind == "ServiceImport")
    {
        spec.propagate_deps = true;
    }
    // PD-2
    if spec.scheduler_name.is_empty() {
        spec.scheduler_name = DEFAULT_SCHEDULER_NAME.into();
    }
    let placement = &mut spec.placement;
    // PD-1.2
    for c in &mut placement.spread_constraints {
        default_spread_constraint(c);
    }
    // PD-1.3
    if let Some(rs) = &mut placement.replica_scheduling
        && rs.replica_scheduling_type == ReplicaSchedulingType::Divided
        && rs.replica_division_preference.is_none()
    {
        rs.replica_division_preference = Some(ReplicaDivisionPreference::Weighted);
    }
    // PD-1.7 / A1
    if opts.no_execute_taints == NoExecuteTaints::Auto {
        for (key, secs) in [
            (TAINT_NOT_READY, opts.not_ready_toleration_seconds),
            (TAINT_UNREACHABLE, opts.unreachable_toleration_seconds),
        ] {
            let tol = default_toleration(key, secs);
            if !has_equal_toleration(&placement.cluster_tolerations, &tol) {
                placement.cluster_tolerations.push(tol);
            }
        }
    }
    // PD-1.5 and PD-2 failover defaults
    if let Some(failover) = &mut spec.failover {
        if let Some(app) = &mut failover.application {
            app.toleration_seconds
                .get_or_insert(DEFAULT_APPLICATION_TOLERATION_SECONDS);
            let mode = *app.purge_mode.get_or_insert(PurgeMode::Gracefully);
            if mode == PurgeMode::Gracefully {
                app.grace_period_seconds
                    .get_or_insert(DEFAULT_APPLICATION_GRACE_PERIOD_SECONDS);
            }
        }
        if let Some(cluster) = &mut failover.cluster {
            cluster.purge_mode.get_or_insert(PurgeMode::Gracefully);
        }
    }
}

/// PD-1.2: a spread constraint with neither field nor label spreads by cluster; minGroups 0
/// becomes 1; maxGroups is not defaulted.
pub fn default_spread_constraint(c: &mut SpreadConstraint) {
    if c.spread_by_field.is_none() && c.spread_by_label.is_empty() {
        c.spread_by_field = Some(SpreadField::Cluster);
    }
    if c.min_groups == 0 {
        c.min_groups = 1;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::types::{
        ApplicationFailoverBehavior, ClusterFailoverBehavior, FailoverBehavior,
        ReplicaSchedulingStrategy, ResourceSelector,
    };

    /// The placement's cluster tolerations as `(key, tolerationSeconds)`.
    fn toleration_seconds(spec: &PropagationSpec) -> Vec<(&str, Option<i64>)> {
        spec.placement
            .cluster_tolerations
            .iter()
            .map(|t| (t.key.as_str(), t.toleration_seconds))
            .collect()
    }

    #[test]
    fn pd_1_defaults_table() {
        let mut spec = PropagationSpec {
            resource_selectors: vec![
                ResourceSelector {
                    api_version: "apps/v1".into(),
                    kind: "Deployment".into(),
                    ..Default::default()
                },
                ResourceSelector {
                    kind: "ServiceImport".into(),
                    namespace: "other".into(),
                    ..Default::default()
                },
            ],
            placement: crate::types::Placement {
                spread_constraints: vec![
                    SpreadConstraint::default(),
                    SpreadConstraint {
                        spread_by_label: "x".into(),
                        min_groups: 2,
                        ..Default::default()
                    },
                ],
                replica_scheduling: Some(ReplicaSchedulingStrategy::default()),
                ..Default::default()
            },
            failover: Some(FailoverBehavior {
                cluster: Some(ClusterFailoverBehavior::default()),
                application: Some(ApplicationFailoverBehavior::default()),
            }),
            ..Default::default()
        };
        default_propagation_spec(&mut spec, "default", &DefaultingOptions::default());
        // 1.1 namespace defaulted, explicit kept
        assert_eq!(spec.resource_selectors[0].namespace, "default");
        assert_eq!(spec.resource_selectors[1].namespace, "other");
        // 1.4
        assert!(spec.propagate_deps);
        // 1.2
        assert_eq!(
            spec.placement.spread_constraints[0],
            SpreadConstraint {
                spread_by_field: Some(SpreadField::Cluster),
                min_groups: 1,
                ..Default::default()
            }
        );
        assert_eq!(spec.placement.spread_constraints[1].spread_by_field, None);
        assert_eq!(spec.placement.spread_constraints[1].min_groups, 2);
        // 1.3
        assert_eq!(
            spec.placement
                .replica_scheduling
                .as_ref()
                .unwrap()
                .replica_division_preference,
            Some(ReplicaDivisionPreference::Weighted)
        );
        // 1.5 / PD-2
        let failover = spec.failover.as_ref().unwrap();
        let app = failover.application.as_ref().unwrap();
        assert_eq!(
            (
                app.toleration_seconds,
                app.purge_mode,
                app.grace_period_seconds
            ),
            (Some(300), Some(PurgeMode::Gracefully), Some(600))
        );
        assert_eq!(
            failover.cluster.as_ref().unwrap().purge_mode,
            Some(PurgeMode::Gracefully)
        );
        assert_eq!(spec.scheduler_name, DEFAULT_SCHEDULER_NAME);
        // 1.7 / A1: both default tolerations
        let keys = toleration_seconds(&spec);
        assert_eq!(
            keys,
            vec![(TAINT_NOT_READY, Some(300)), (TAINT_UNREACHABLE, Some(300))]
        );
        // idempotent
        let again = spec.clone();
        default_propagation_spec(&mut spec, "default", &DefaultingOptions::default());
        assert_eq!(spec, again);
    }

    #[test]
    fn pd_1_7_equal_toleration_is_not_duplicated() {
        let mut spec = PropagationSpec::default();
        spec.placement
            .cluster_tolerations
            .push(default_toleration(TAINT_NOT_READY, 30));
        let opts = DefaultingOptions {
            not_ready_toleration_seconds: 120,
            unreachable_toleration_seconds: 60,
            ..Default::default()
        };
        default_propagation_spec(&mut spec, "", &opts);
        let tols = toleration_seconds(&spec);
        // the user's 30 s toleration stays; unreachable gets the configured 60 s
        assert_eq!(
            tols,
            vec![(TAINT_NOT_READY, Some(30)), (TAINT_UNREACHABLE, Some(60))]
        );
        // an Equal toleration with the same key is not "equal" → default still added
        let mut spec = PropagationSpec::default();
        spec.placement.cluster_tolerations.push(Toleration {
            key: TAINT_UNREACHABLE.into(),
            effect: Some(TaintEffect::NoExecute),
            ..Default::default()
        });
        default_propagation_spec(&mut spec, "", &DefaultingOptions::default());
        assert_eq!(spec.placement.cluster_tolerations.len(), 3);
    }

    #[test]
    fn a1_policy_mode_adds_no_tolerations() {
        let mut spec = PropagationSpec::default();
        let opts = DefaultingOptions {
            no_execute_taints: NoExecuteTaints::Policy,
            ..Default::default()
        };
        default_propagation_spec(&mut spec, "ns", &opts);
        assert!(spec.placement.cluster_tolerations.is_empty());
    }

    #[test]
    fn pd_1_5_grace_period_only_for_gracefully() {
        let mut spec = PropagationSpec {
            failover: Some(FailoverBehavior {
                cluster: None,
                application: Some(ApplicationFailoverBehavior {
                    purge_mode: Some(PurgeMode::Never),
                    ..Default::default()
                }),
            }),
            ..Default::default()
        };
        default_propagation_spec(&mut spec, "ns", &DefaultingOptions::default());
        let app = spec.failover.unwrap().application.unwrap();
        assert_eq!(app.grace_period_seconds, None);
        // Duplicated keeps no division preference
        let mut spec = PropagationSpec::default();
        spec.placement.replica_scheduling = Some(ReplicaSchedulingStrategy {
            replica_scheduling_type: ReplicaSchedulingType::Duplicated,
            ..Default::default()
        });
        default_propagation_spec(&mut spec, "ns", &DefaultingOptions::default());
        assert_eq!(
            spec.placement
                .replica_scheduling
                .unwrap()
                .replica_division_preference,
            None
        );
    }
}

#[cfg(test)]
mod drift_tests {
    use super::*;
    use crate::types::{
        ApplicationFailoverBehavior, ClusterAffinity, ClusterPreferences, FailoverBehavior,
        ObjectMeta, PropagationPolicy, ReplicaSchedulingStrategy, ResourceSelector,
        StaticClusterWeight,
    };
    use crate::validation::{Limits, validate_propagation_policy};

    /// What the defaults produce must pass validation, in both A1 modes (the api runs them in
    /// this order, as Karmada's mutating then validating webhooks do).
    #[test]
    fn pd_1_defaulted_policies_validate() {
        for mode in [NoExecuteTaints::Auto, NoExecuteTaints::Policy] {
            let weight = |c: &str, w| StaticClusterWeight {
                target_cluster: ClusterAffinity {
                    cluster_names: vec![c.into()],
                    ..Default::default()
                },
                weight: w,
            };
            let mut policy = PropagationPolicy {
                meta: ObjectMeta {
                    name: "nginx-propagation".into(),
                    namespace: "default".into(),
                    ..Default::default()
                },
                spec: PropagationSpec {
                    resource_selectors: vec![ResourceSelector {
                        api_version: "apps/v1".into(),
                        kind: "Deployment".into(),
                        name: "nginx".into(),
                        ..Default::default()
                    }],
                    propagate_deps: true,
                    placement: crate::types::Placement {
                        cluster_affinity: Some(ClusterAffinity {
                            cluster_names: vec!["member1".into(), "member2".into()],
                            ..Default::default()
                        }),
                        spread_constraints: vec![SpreadConstraint::default()],
                        replica_scheduling: Some(ReplicaSchedulingStrategy {
                            weight_preference: Some(ClusterPreferences {
                                static_weight_list: vec![
                                    weight("member1", 1),
                                    weight("member2", 2),
                                ],
                                dynamic_weight: None,
                            }),
                            ..Default::default()
                        }),
                        ..Default::default()
                    },
                    failover: Some(FailoverBehavior {
                        cluster: Some(Default::default()),
                        application: Some(ApplicationFailoverBehavior::default()),
                    }),
                    ..Default::default()
                },
            };
            let opts = DefaultingOptions {
                no_execute_taints: mode,
                ..Default::default()
            };
            default_propagation_spec(&mut policy.spec, "default", &opts);
            let errs = validate_propagation_policy(&policy, false, &Limits::default());
            assert!(errs.is_empty(), "{mode:?}: {errs:?}");
        }
    }
}
