//! SC-5 candidates and SC-6 filter plugins.
//!
//! Every plugin is a pure function returning `Ok(())` or the reason the cluster does not
//! fit; [`filter_cluster`] runs them in Karmada's order and stops at the first failure, and
//! the per-cluster [`FilterVerdict`]s are what the dry-run "Simulate" shows.

use std::fmt;

use crate::affinity::cluster_matches_affinity;
use crate::toleration::tolerates;
use crate::types::{
    ApiEnablement, Cluster, ClusterAffinity, GracefulEvictionTask, Placement, SpreadConstraint,
    SpreadField, Taint, TaintEffect, TargetCluster, Toleration,
};

/// The filter plugins, in the order they run (SC-6.1..SC-6.6). WorkloadAffinity (SC-6.7)
/// is alpha in Karmada and not implemented.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum FilterPlugin {
    /// SC-6.1.
    ApiEnablement,
    /// SC-6.2.
    TaintToleration,
    /// SC-6.3/SC-6.4.
    ClusterAffinity,
    /// SC-6.5.
    SpreadConstraint,
    /// SC-6.6.
    ClusterEviction,
}

impl FilterPlugin {
    /// Every plugin, in run order.
    pub const ALL: [FilterPlugin; 5] = [
        FilterPlugin::ApiEnablement,
        FilterPlugin::TaintToleration,
        FilterPlugin::ClusterAffinity,
        FilterPlugin::SpreadConstraint,
        FilterPlugin::ClusterEviction,
    ];

    /// Karmada's plugin name.
    pub fn name(self) -> &'static str {
        match self {
            FilterPlugin::ApiEnablement => "APIEnablement",
            FilterPlugin::TaintToleration => "TaintToleration",
            FilterPlugin::ClusterAffinity => "ClusterAffinity",
            FilterPlugin::SpreadConstraint => "SpreadConstraint",
            FilterPlugin::ClusterEviction => "ClusterEviction",
        }
    }
}

/// Why a cluster does not fit. `Display` gives Karmada's reason string, which is what
/// `FitError` histograms count (SC-4.3).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum UnfitReason {
    /// SC-6.1: the resource's group/version/kind is not served by the cluster.
    ApiNotEnabled,
    /// SC-6.2: the first NoSchedule/NoExecute taint no toleration covers.
    UntoleratedTaint(Taint),
    /// SC-6.3: the affinity in use does not match.
    AffinityMismatch,
    /// SC-6.5: a spread constraint by this field, but the cluster has no such property.
    MissingSpreadProperty(SpreadField),
    /// SC-6.6: the cluster is the `fromCluster` of one of the binding's eviction tasks.
    InEviction,
    /// SC-6.7 (Flotilla): application failover evicted the binding from the cluster.
    FailedOver,
}

impl fmt::Display for UnfitReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            UnfitReason::ApiNotEnabled => f.write_str("cluster(s) did not have the API resource"),
            UnfitReason::UntoleratedTaint(t) => {
                write!(
                    f,
                    "cluster(s) had untolerated taint {{{}}}",
                    taint_to_string(t)
                )
            }
            UnfitReason::AffinityMismatch => {
                f.write_str("cluster(s) did not match the placement cluster affinity constraint")
            }
            UnfitReason::MissingSpreadProperty(field) => {
                let property = match field {
                    SpreadField::Provider => "provider",
                    SpreadField::Region => "region",
                    SpreadField::Zone => "zones",
                    SpreadField::Cluster => "cluster",
                };
                write!(f, "cluster(s) did not have {property} property")
            }
            UnfitReason::InEviction => f.write_str("cluster(s) is in the process of eviction"),
            UnfitReason::FailedOver => {
                f.write_str("cluster(s) had the application fail over from them")
            }
        }
    }
}

/// Kubernetes' `Taint.ToString()`: `key=value:Effect`, or `key:Effect` with an empty value.
pub fn taint_to_string(taint: &Taint) -> String {
    if taint.value.is_empty() {
        format!("{}:{}", taint.key, taint.effect.as_str())
    } else {
        format!("{}={}:{}", taint.key, taint.value, taint.effect.as_str())
    }
}

/// The outcome of the filters for one cluster of the snapshot.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum FilterVerdict {
    /// Every filter passed: the cluster is a candidate.
    Fit,
    /// SC-5: the cluster has a deletion timestamp and is not a candidate (no filter ran).
    Deleting,
    /// A filter failed; later filters did not run.
    Unfit {
        /// The first plugin that failed.
        plugin: FilterPlugin,
        /// Why.
        reason: UnfitReason,
    },
}

impl FilterVerdict {
    /// Whether the cluster is a candidate.
    pub fn is_fit(&self) -> bool {
        matches!(self, FilterVerdict::Fit)
    }
}

/// What the filters need to know about the binding.
#[derive(Clone, Copy, Debug)]
pub struct FilterContext<'a> {
    /// `spec.resource.apiVersion` (e.g. `apps/v1`).
    pub api_version: &'a str,
    /// `spec.resource.kind`.
    pub kind: &'a str,
    /// The current result `spec.clusters`: those clusters pass SC-6.1 and SC-6.2.
    pub previous: &'a [TargetCluster],
    /// `placement.clusterTolerations`.
    pub tolerations: &'a [Toleration],
    /// The affinity in use ([`effective_affinity`]); `None` → every cluster matches.
    pub affinity: Option<&'a ClusterAffinity>,
    /// `placement.spreadConstraints`.
    pub spread_constraints: &'a [SpreadConstraint],
    /// `spec.gracefulEvictionTasks`.
    pub eviction_tasks: &'a [GracefulEvictionTask],
    /// SC-6.7: `status.applicationFailoverClusters` (empty when the run forgets them).
    pub failed_over: &'a [String],
}

// === impl FilterContext ===

impl FilterContext<'_> {
    fn targets(&self, cluster: &str) -> bool {
        self.previous.iter().any(|t| t.name == cluster)
    }
}

/// SC-6.3: the affinity in use: `placement.clusterAffinity`, else the ClusterAffinities term
/// named `observed_name`, else none.
pub fn effective_affinity<'p>(
    placement: &'p Placement,
    observed_name: &str,
) -> Option<&'p ClusterAffinity> {
    placement.cluster_affinity.as_ref().or_else(|| {
        placement
            .cluster_affinities
            .iter()
            .find(|term| term.affinity_name == observed_name)
            .map(|term| &term.affinity)
    })
}

/// Whether `kind` of `api_version` is listed in a cluster's API enablements (SC-6.1).
pub fn is_api_enabled(enablements: &[ApiEnablement], api_version: &str, kind: &str) -> bool {
    enablements
        .iter()
        .any(|e| e.group_version == api_version && e.kinds.iter().any(|k| k == kind))
}

/// SC-6.1 APIEnablement: a cluster already in the result passes (≥v1.12, so an API that
/// disappears never removes a placement); otherwise the kind must be listed, whether or not
/// the cluster's list is complete.
pub fn filter_api_enablement(
    ctx: &FilterContext<'_>,
    cluster: &Cluster,
) -> Result<(), UnfitReason> {
    if ctx.targets(cluster.name())
        || is_api_enabled(&cluster.status.api_enablements, ctx.api_version, ctx.kind)
    {
        Ok(())
    } else {
        Err(UnfitReason::ApiNotEnabled)
    }
}

/// SC-6.2 TaintToleration: a cluster already in the result passes (the taint manager
/// decides about existing placements); otherwise the first NoSchedule or NoExecute taint
/// that no toleration tolerates rejects it. PreferNoSchedule taints are ignored.
pub fn filter_taint_toleration(
    ctx: &FilterContext<'_>,
    cluster: &Cluster,
) -> Result<(), UnfitReason> {
    if ctx.targets(cluster.name()) {
        return Ok(());
    }
    let untolerated = cluster.spec.taints.iter().find(|taint| {
        matches!(
            taint.effect,
            TaintEffect::NoSchedule | TaintEffect::NoExecute
        ) && !ctx.tolerations.iter().any(|tol| tolerates(tol, taint))
    });
    match untolerated {
        Some(taint) => Err(UnfitReason::UntoleratedTaint(taint.clone())),
        None => Ok(()),
    }
}

/// SC-6.3 ClusterAffinity: no affinity in use → pass; else SC-6.4 matching.
pub fn filter_cluster_affinity(
    ctx: &FilterContext<'_>,
    cluster: &Cluster,
) -> Result<(), UnfitReason> {
    match ctx.affinity {
        Some(affinity) if !cluster_matches_affinity(cluster, affinity) => {
            Err(UnfitReason::AffinityMismatch)
        }
        _ => Ok(()),
    }
}

/// SC-6.5 SpreadConstraint: for each constraint by provider/region/zone (in order) the
/// cluster needs a non-empty provider/region/zones.
pub fn filter_spread_constraint(
    ctx: &FilterContext<'_>,
    cluster: &Cluster,
) -> Result<(), UnfitReason> {
    for constraint in ctx.spread_constraints {
        let missing = match constraint.spread_by_field {
            Some(SpreadField::Provider) => cluster.spec.provider.is_empty(),
            Some(SpreadField::Region) => cluster.spec.region.is_empty(),
            Some(SpreadField::Zone) => cluster.spec.zones.is_empty(),
            Some(SpreadField::Cluster) | None => false,
        };
        if let (true, Some(field)) = (missing, constraint.spread_by_field) {
            return Err(UnfitReason::MissingSpreadProperty(field));
        }
    }
    Ok(())
}

/// SC-6.6 ClusterEviction (≥v1.6): a cluster being evicted for this binding is never picked
/// again while its task exists (without it an evicted cluster could be re-picked). SC-6.7
/// (Flotilla): nor, after its task ends, a cluster application failover evicted it from.
pub fn filter_cluster_eviction(
    ctx: &FilterContext<'_>,
    cluster: &Cluster,
) -> Result<(), UnfitReason> {
    if ctx
        .eviction_tasks
        .iter()
        .any(|t| t.from_cluster == cluster.name())
    {
        Err(UnfitReason::InEviction)
    } else if ctx.failed_over.iter().any(|c| c == cluster.name()) {
        Err(UnfitReason::FailedOver)
    } else {
        Ok(())
    }
}

/// SC-5 + SC-6: a deleting cluster is not a candidate; otherwise the plugins run in order and
/// the first failure is the verdict.
pub fn filter_cluster(ctx: &FilterContext<'_>, cluster: &Cluster) -> FilterVerdict {
    if cluster.meta.deletion_timestamp.is_some() {
        return FilterVerdict::Deleting;
    }
    for plugin in FilterPlugin::ALL {
        let result = match plugin {
            FilterPlugin::ApiEnablement => filter_api_enablement(ctx, cluster),
            FilterPlugin::TaintToleration => filter_taint_toleration(ctx, cluster),
            FilterPlugin::ClusterAffinity => filter_cluster_affinity(ctx, cluster),
            FilterPlugin::SpreadConstraint => filter_spread_constraint(ctx, cluster),
            FilterPlugin::ClusterEviction => filter_cluster_eviction(ctx, cluster),
        };
        if let Err(reason) = result {
            return FilterVerdict::Unfit { plugin, reason };
        }
    }
    FilterVerdict::Fit
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::time::Time;
    use crate::types::{ClusterAffinityTerm, TolerationOperator};

    fn cluster(name: &str) -> Cluster {
        Cluster::named(name).serving("apps/v1", &["Deployment"])
    }

    fn ctx<'a>(previous: &'a [TargetCluster]) -> FilterContext<'a> {
        FilterContext {
            api_version: "apps/v1",
            kind: "Deployment",
            previous,
            tolerations: &[],
            affinity: None,
            spread_constraints: &[],
            eviction_tasks: &[],
            failed_over: &[],
        }
    }

    fn taint(key: &str, value: &str, effect: TaintEffect) -> Taint {
        Taint {
            key: key.to_owned(),
            value: value.to_owned(),
            effect,
            time_added: None,
            trace_context: String::new(),
        }
    }

    #[test]
    fn sc_6_1_api_enablement() {
        let prev = [TargetCluster::new("member1", 1)];
        let mut c = cluster("member2");
        assert_eq!(filter_api_enablement(&ctx(&prev), &c), Ok(()));
        c.status.api_enablements[0].kinds = vec!["StatefulSet".to_owned()];
        assert_eq!(
            filter_api_enablement(&ctx(&prev), &c),
            Err(UnfitReason::ApiNotEnabled)
        );
        c.status.api_enablements.clear();
        assert_eq!(
            filter_api_enablement(&ctx(&prev), &c),
            Err(UnfitReason::ApiNotEnabled),
            "empty list"
        );
        let mut targeted = cluster("member1");
        targeted.status.api_enablements.clear();
        assert_eq!(
            filter_api_enablement(&ctx(&prev), &targeted),
            Ok(()),
            "already a target passes"
        );
        assert_eq!(
            UnfitReason::ApiNotEnabled.to_string(),
            "cluster(s) did not have the API resource"
        );
    }

    /// `got` passes when `want` is `None`, else fails with the message `want`.
    fn assert_verdict(got: Result<(), UnfitReason>, want: Option<String>, case: &str) {
        assert_eq!(
            got.map_err(|r| r.to_string()),
            want.map_or(Ok(()), Err),
            "{case}"
        );
    }

    #[test]
    fn sc_6_2_taint_toleration() {
        use TaintEffect::{NoExecute, NoSchedule, PreferNoSchedule};
        let exists = |key: &str, effect: Option<TaintEffect>| Toleration {
            key: key.to_owned(),
            operator: TolerationOperator::Exists,
            effect,
            ..Default::default()
        };
        let equal_v2 = Toleration {
            key: "k".to_owned(),
            value: "v2".to_owned(),
            ..Default::default()
        };
        let not_ready = taint("cluster.karmada.io/not-ready", "", NoSchedule);
        // (case, (taints, tolerations, already in spec.clusters, the untolerated taint))
        let cases = [
            ("no taints", (vec![], vec![], false, None)),
            (
                "NoSchedule untolerated",
                (
                    vec![not_ready],
                    vec![],
                    false,
                    Some("{cluster.karmada.io/not-ready:NoSchedule}"),
                ),
            ),
            (
                "value shown as key=value:Effect",
                (
                    vec![taint("k", "v", NoExecute)],
                    vec![],
                    false,
                    Some("{k=v:NoExecute}"),
                ),
            ),
            (
                "PreferNoSchedule ignored",
                (vec![taint("k", "", PreferNoSchedule)], vec![], false, None),
            ),
            (
                "tolerated by Exists",
                (
                    vec![taint("k", "v", NoSchedule)],
                    vec![exists("k", None)],
                    false,
                    None,
                ),
            ),
            (
                "toleration for the wrong effect",
                (
                    vec![taint("k", "", NoSchedule)],
                    vec![exists("k", Some(NoExecute))],
                    false,
                    Some("{k:NoSchedule}"),
                ),
            ),
            (
                "first untolerated in order",
                (
                    vec![
                        taint("a", "", PreferNoSchedule),
                        taint("b", "", NoSchedule),
                        taint("c", "", NoExecute),
                    ],
                    vec![exists("b", None)],
                    false,
                    Some("{c:NoExecute}"),
                ),
            ),
            (
                "Equal operator compares values",
                (
                    vec![taint("k", "v1", NoSchedule)],
                    vec![equal_v2],
                    false,
                    Some("{k=v1:NoSchedule}"),
                ),
            ),
            (
                "already in spec.clusters passes",
                (vec![taint("k", "", NoExecute)], vec![], true, None),
            ),
        ];
        for (name, (taints, tolerations, in_result, untolerated)) in cases {
            let mut c = cluster("member1");
            c.spec.taints = taints;
            let prev = if in_result {
                vec![TargetCluster::new("member1", 1)]
            } else {
                vec![]
            };
            let mut fc = ctx(&prev);
            fc.tolerations = &tolerations;
            let want = untolerated.map(|t| format!("cluster(s) had untolerated taint {t}"));
            assert_verdict(filter_taint_toleration(&fc, &c), want, name);
        }
    }

    #[test]
    fn sc_6_3_cluster_affinity_in_use() {
        let a = ClusterAffinity {
            cluster_names: vec!["member1".to_owned()],
            ..Default::default()
        };
        let b = ClusterAffinity {
            cluster_names: vec!["member2".to_owned()],
            ..Default::default()
        };
        let terms = vec![
            ClusterAffinityTerm {
                affinity_name: "primary".to_owned(),
                affinity: a.clone(),
            },
            ClusterAffinityTerm {
                affinity_name: "backup".to_owned(),
                affinity: b.clone(),
            },
        ];
        let p = Placement {
            cluster_affinities: terms,
            ..Default::default()
        };
        assert_eq!(effective_affinity(&p, "backup"), Some(&b));
        assert_eq!(effective_affinity(&p, "primary"), Some(&a));
        assert_eq!(
            effective_affinity(&p, "missing"),
            None,
            "unknown term → no affinity"
        );
        let single = Placement {
            cluster_affinity: Some(a.clone()),
            ..Default::default()
        };
        assert_eq!(effective_affinity(&single, "backup"), Some(&a));
        assert_eq!(effective_affinity(&Placement::default(), ""), None);

        let mut fc = ctx(&[]);
        assert_eq!(
            filter_cluster_affinity(&fc, &cluster("member2")),
            Ok(()),
            "no affinity → pass"
        );
        fc.affinity = Some(&a);
        assert_eq!(filter_cluster_affinity(&fc, &cluster("member1")), Ok(()));
        let err = filter_cluster_affinity(&fc, &cluster("member2")).map_err(|r| r.to_string());
        assert_eq!(
            err,
            Err("cluster(s) did not match the placement cluster affinity constraint".to_owned())
        );
    }

    #[test]
    fn sc_6_5_spread_constraint_field_presence() {
        use SpreadField::{Cluster, Provider, Region, Zone};
        let by = |field| SpreadConstraint {
            spread_by_field: Some(field),
            min_groups: 1,
            ..Default::default()
        };
        let by_label = SpreadConstraint {
            spread_by_label: "x".to_owned(),
            ..Default::default()
        };
        // (case, (constraints, (provider, region, zones), the missing property))
        let cases: [(&str, (Vec<SpreadConstraint>, (&str, &str, &[&str]), _)); 8] = [
            ("no constraints", (vec![], ("", "", &[]), None)),
            ("cluster only", (vec![by(Cluster)], ("", "", &[]), None)),
            (
                "region missing",
                (vec![by(Cluster), by(Region)], ("", "", &[]), Some("region")),
            ),
            ("region present", (vec![by(Region)], ("", "r1", &[]), None)),
            (
                "zones missing",
                (vec![by(Zone)], ("p", "r1", &[]), Some("zones")),
            ),
            ("zones present", (vec![by(Zone)], ("", "", &["z"]), None)),
            (
                "provider missing, first constraint reported",
                (
                    vec![by(Provider), by(Region)],
                    ("", "", &[]),
                    Some("provider"),
                ),
            ),
            (
                "label constraint does not filter",
                (vec![by_label], ("", "", &[]), None),
            ),
        ];
        for (name, (constraints, (provider, region, zones), missing)) in cases {
            let mut c = cluster("m");
            c.spec.provider = provider.to_owned();
            c.spec.region = region.to_owned();
            c.spec.zones = zones.iter().map(|z| (*z).to_owned()).collect();
            let mut fc = ctx(&[]);
            fc.spread_constraints = &constraints;
            let want = missing.map(|p| format!("cluster(s) did not have {p} property"));
            assert_verdict(filter_spread_constraint(&fc, &c), want, name);
        }
    }

    #[test]
    fn sc_6_6_cluster_eviction() {
        let tasks = [GracefulEvictionTask {
            from_cluster: "member2".to_owned(),
            ..Default::default()
        }];
        let mut fc = ctx(&[]);
        fc.eviction_tasks = &tasks;
        assert_eq!(filter_cluster_eviction(&fc, &cluster("member1")), Ok(()));
        let err = filter_cluster_eviction(&fc, &cluster("member2")).map_err(|r| r.to_string());
        assert_eq!(
            err,
            Err("cluster(s) is in the process of eviction".to_owned())
        );
        assert_eq!(
            filter_cluster_eviction(&ctx(&[]), &cluster("member2")),
            Ok(()),
            "no tasks"
        );
    }

    #[test]
    fn sc_5_deleting_and_first_failure_wins() {
        let mut deleting = cluster("gone");
        deleting.meta.deletion_timestamp = Some(Time::from_secs(1));
        assert_eq!(
            filter_cluster(&ctx(&[]), &deleting),
            FilterVerdict::Deleting
        );
        // Deleting is checked before everything, even for a current target.
        let prev = [TargetCluster::new("gone", 1)];
        assert_eq!(
            filter_cluster(&ctx(&prev), &deleting),
            FilterVerdict::Deleting
        );

        // Tainted AND evicted: TaintToleration runs first.
        let tasks = [GracefulEvictionTask {
            from_cluster: "member2".to_owned(),
            ..Default::default()
        }];
        let mut fc = ctx(&[]);
        fc.eviction_tasks = &tasks;
        let mut c = cluster("member2");
        c.spec.taints = vec![taint("k", "", TaintEffect::NoExecute)];
        let verdict = filter_cluster(&fc, &c);
        assert!(
            matches!(
                verdict,
                FilterVerdict::Unfit {
                    plugin: FilterPlugin::TaintToleration,
                    ..
                }
            ),
            "{verdict:?}"
        );
        c.spec.taints.clear();
        assert_eq!(
            filter_cluster(&fc, &c),
            FilterVerdict::Unfit {
                plugin: FilterPlugin::ClusterEviction,
                reason: UnfitReason::InEviction
            }
        );
        assert!(filter_cluster(&fc, &cluster("member1")).is_fit());
        // SC-5: readiness is not filtered; only taints keep unhealthy clusters out.
        let mut not_ready = cluster("member3");
        not_ready.status.conditions = vec![crate::types::Condition {
            type_: "Ready".to_owned(),
            status: crate::types::ConditionStatus::False,
            ..Default::default()
        }];
        assert!(filter_cluster(&fc, &not_ready).is_fit());
    }

    #[test]
    fn sc_6_7_a_cluster_the_application_failed_over_from_stays_out() {
        let failed = ["member1".to_owned()];
        let mut fc = ctx(&[]);
        fc.failed_over = &failed;
        assert_eq!(
            filter_cluster(&fc, &cluster("member1")),
            FilterVerdict::Unfit {
                plugin: FilterPlugin::ClusterEviction,
                reason: UnfitReason::FailedOver
            }
        );
        assert!(filter_cluster(&fc, &cluster("member2")).is_fit());
        assert_eq!(
            UnfitReason::FailedOver.to_string(),
            "cluster(s) had the application fail over from them"
        );
    }
}
