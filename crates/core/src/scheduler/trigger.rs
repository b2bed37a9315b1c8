//! SC-1..SC-3: which events enqueue a binding, and whether a dequeued binding is scheduled.

use crate::affinity::cluster_matches_affinity;
use crate::time::Time;
use crate::types::{
    Cluster, DEFAULT_SCHEDULER_NAME, Placement, ReplicaSchedulingType, ResourceBinding,
    ResourceBindingSpec,
};

use super::filter::effective_affinity;

/// Why a binding is (re)scheduled (SC-3.2..SC-3.6, first match wins).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ScheduleTrigger {
    /// SC-3.2: the placement differs from the one last applied.
    PlacementChanged,
    /// SC-3.3: the result no longer adds up to `spec.replicas` (this is how an eviction
    /// triggers failover: the evicted replicas left the sum).
    ReplicasChanged,
    /// SC-3.4: a reschedule was requested after the last schedule (Fresh mode, SC-17).
    RescheduleRequested,
    /// SC-3.5: non-workloads and Duplicated workloads are always rescheduled.
    NonWorkloadOrDuplicated,
    /// SC-3.6: a target cluster is being deleted.
    TargetClusterDeleting {
        /// The cluster.
        cluster: String,
    },
    /// A target cluster is no longer in the snapshot at all. Flotilla's choice (Karmada's
    /// handling is not specified): treated like SC-3.6, so a vanished cluster never stays in
    /// a result (#829).
    TargetClusterMissing {
        /// The cluster.
        cluster: String,
    },
    /// A11 (Flotilla): clusters the binding was evicted from have been Ready and untainted
    /// for the policy's stabilisation window; the preference is recomputed (Fresh).
    Failback {
        /// The recovered clusters.
        clusters: Vec<String>,
    },
}

/// The decision on dequeue (SC-3).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ScheduleDecision {
    /// SC-3.1: the binding is being deleted; nothing to do.
    Deleting,
    /// SC-3.1: `spec.placement` is missing; an error for the caller to report.
    MissingPlacement,
    /// Schedule, for this reason.
    Schedule(ScheduleTrigger),
    /// SC-3.7: nothing to schedule.
    NoSchedule {
        /// `Some(generation)`: write `status.schedulerObservedGeneration = generation`
        /// (the binding's generation moved without needing a new result, ≥v1.6).
        bump_observed_generation: Option<i64>,
    },
}

/// SC-1: whether the scheduler named `scheduler_name` handles this binding
/// (`spec.schedulerName`, empty meaning `default-scheduler`). Flotilla's bindings carry no
/// suspension or managed-by label, so the name is the only condition.
pub fn responsible_for(binding: &ResourceBinding, scheduler_name: &str) -> bool {
    let name = if binding.spec.scheduler_name.is_empty() {
        DEFAULT_SCHEDULER_NAME
    } else {
        binding.spec.scheduler_name.as_str()
    };
    name == scheduler_name
}

/// SC-2.2: a binding update enqueues only when `metadata.generation` changed (status-only
/// updates never do).
pub fn binding_generation_changed(old: &ResourceBinding, new: &ResourceBinding) -> bool {
    old.meta.generation != new.meta.generation
}

/// SC-2.3/SC-2.4: a cluster update matters to the scheduler only when its deletion timestamp
/// is newly set, its labels changed, or its generation changed (any spec change, taints
/// included). Status changes (Ready flips) do not: only the resulting taint does.
pub fn cluster_change_relevant(old: &Cluster, new: &Cluster) -> bool {
    (old.meta.deletion_timestamp.is_none() && new.meta.deletion_timestamp.is_some())
        || old.meta.labels != new.meta.labels
        || old.meta.generation != new.meta.generation
}

/// SC-2.6 (Flotilla; Karmada's scheduling queue moves its unschedulable bindings back to the
/// active queue on cluster events): a cluster status change that can make an unschedulable
/// binding fit, although SC-2.4 enqueues nothing for status: the cluster's API enablements
/// changed (a custom resource's kind became served after its CRD reached the member), or its
/// resource summary became known or has more room in some resource (a node was added, a
/// workload scaled down: ES-3). Less room in every resource, or a Ready flip, cannot make a
/// binding fit.
pub fn cluster_status_may_fit_more(old: &Cluster, new: &Cluster) -> bool {
    old.status.api_enablements != new.status.api_enablements
        || match (&old.status.resource_summary, &new.status.resource_summary) {
            (Some(before), Some(now)) => now.has_more_room_than(before),
            (None, Some(_)) => true,
            (_, None) => false,
        }
}

/// SC-2.3: whether a relevant cluster change enqueues `binding`: a ClusterAffinities binding
/// whose observed generation lags is enqueued unconditionally; otherwise the affinity in use
/// (clusterAffinity, or the term named by the observed affinity name) must match the old or
/// the new cluster, and no affinity matches every cluster.
pub fn binding_affected_by_cluster_change(
    binding: &ResourceBinding,
    old: &Cluster,
    new: &Cluster,
) -> bool {
    let Some(placement) = &binding.spec.placement else {
        return false;
    };
    if !placement.cluster_affinities.is_empty()
        && binding.status.scheduler_observed_generation != binding.meta.generation
    {
        return true;
    }
    match effective_affinity(placement, &binding.status.scheduler_observing_affinity_name) {
        None => true,
        Some(affinity) => {
            cluster_matches_affinity(old, affinity) || cluster_matches_affinity(new, affinity)
        }
    }
}

/// SC-3.2 `placementChanged`, against the typed applied placement (Karmada keeps it in the
/// `policy.karmada.io/applied-placement` annotation; Flotilla has no unparsable case).
///
/// No applied placement → changed; identical → not; clusterAffinity, clusterTolerations,
/// spreadConstraints or replicaScheduling differ → changed; otherwise only the ClusterAffinities
/// term currently observed is compared (no observed name, or the term missing on either
/// side → changed).
pub fn placement_changed(
    placement: &Placement,
    applied: Option<&Placement>,
    observed_affinity_name: &str,
) -> bool {
    let Some(applied) = applied else {
        return true;
    };
    if placement == applied {
        return false;
    }
    if placement.cluster_affinity != applied.cluster_affinity
        || placement.cluster_tolerations != applied.cluster_tolerations
        || placement.spread_constraints != applied.spread_constraints
        || placement.replica_scheduling != applied.replica_scheduling
    {
        return true;
    }
    if observed_affinity_name.is_empty() {
        return true;
    }
    let term = |p: &Placement| {
        p.cluster_affinities
            .iter()
            .find(|t| t.affinity_name == observed_affinity_name)
            .cloned()
    };
    match (term(placement), term(applied)) {
        (Some(now), Some(before)) => now != before,
        _ => true,
    }
}

/// SC-3.3: the result no longer matches `spec.replicas`: Duplicated → some target's replicas
/// differ; Divided → the sum differs; nil replicaScheduling → never (SC-3.5 handles it).
pub fn replicas_changed(spec: &ResourceBindingSpec, placement: &Placement) -> bool {
    let Some(rs) = &placement.replica_scheduling else {
        return false;
    };
    match rs.replica_scheduling_type {
        ReplicaSchedulingType::Duplicated => {
            spec.clusters.iter().any(|t| t.replicas != spec.replicas)
        }
        ReplicaSchedulingType::Divided => {
            spec.clusters
                .iter()
                .map(|t| i64::from(t.replicas))
                .sum::<i64>()
                != i64::from(spec.replicas)
        }
    }
}

/// SC-3.4 (`RescheduleRequired`): a reschedule was triggered after the last schedule. Both
/// times must be set.
pub fn reschedule_required(triggered_at: Option<Time>, last_scheduled: Option<Time>) -> bool {
    matches!((triggered_at, last_scheduled), (Some(t), Some(l)) if t > l)
}

/// SC-3: whether a dequeued binding needs scheduling (first match wins). `clusters` is the
/// scheduler's cluster snapshot.
pub fn needs_scheduling(binding: &ResourceBinding, clusters: &[Cluster]) -> ScheduleDecision {
    // SC-3.1.
    if binding.meta.deletion_timestamp.is_some() {
        return ScheduleDecision::Deleting;
    }
    let Some(placement) = &binding.spec.placement else {
        return ScheduleDecision::MissingPlacement;
    };
    let spec = &binding.spec;
    let status = &binding.status;
    // SC-3.2.
    if placement_changed(
        placement,
        status.applied_placement.as_ref(),
        &status.scheduler_observing_affinity_name,
    ) {
        return ScheduleDecision::Schedule(ScheduleTrigger::PlacementChanged);
    }
    // SC-3.3; SC-4.6: a short result the scheduler wrote for this generation adds up with
    // its unschedulable replicas (it is scheduled again when a cluster gets room, SC-2.6)
    let short_in_place = status.unschedulable_replicas > 0
        && status.scheduler_observed_generation == binding.meta.generation
        && spec
            .clusters
            .iter()
            .map(|t| i64::from(t.replicas))
            .sum::<i64>()
            + i64::from(status.unschedulable_replicas)
            == i64::from(spec.replicas);
    if replicas_changed(spec, placement) && !short_in_place {
        return ScheduleDecision::Schedule(ScheduleTrigger::ReplicasChanged);
    }
    // SC-3.4.
    if reschedule_required(spec.reschedule_triggered_at, status.last_scheduled_time) {
        return ScheduleDecision::Schedule(ScheduleTrigger::RescheduleRequested);
    }
    // SC-3.5 (nil replicaScheduling counts as Duplicated, PD-2).
    let non_workload = spec.replicas == 0 && spec.replica_requirements.is_none();
    let duplicated = placement
        .replica_scheduling
        .as_ref()
        .is_none_or(|r| r.replica_scheduling_type == ReplicaSchedulingType::Duplicated);
    if non_workload || duplicated {
        return ScheduleDecision::Schedule(ScheduleTrigger::NonWorkloadOrDuplicated);
    }
    // SC-3.6.
    for target in &spec.clusters {
        match clusters.iter().find(|c| c.name() == target.name) {
            Some(c) if c.meta.deletion_timestamp.is_some() => {
                return ScheduleDecision::Schedule(ScheduleTrigger::TargetClusterDeleting {
                    cluster: target.name.clone(),
                });
            }
            Some(_) => {}
            None => {
                return ScheduleDecision::Schedule(ScheduleTrigger::TargetClusterMissing {
                    cluster: target.name.clone(),
                });
            }
        }
    }
    // SC-3.7.
    let generation = binding.meta.generation;
    ScheduleDecision::NoSchedule {
        bump_observed_generation: (generation != status.scheduler_observed_generation)
            .then_some(generation),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::types::{
        ClusterAffinity, ClusterAffinityTerm, ReplicaDivisionPreference, ReplicaRequirements,
        ReplicaSchedulingStrategy, SpreadConstraint, Taint, TaintEffect, TargetCluster, Toleration,
    };

    fn cluster(name: &str) -> Cluster {
        Cluster::named(name)
    }

    /// SC-2.6: which status changes may make an unschedulable binding fit.
    #[test]
    fn sc_2_6_status_changes_that_may_make_a_binding_fit() {
        let with = |kinds: &[&str], allocatable: Option<i64>| {
            let mut c = cluster("member1");
            c.status.resource_summary = allocatable.map(crate::scheduler::score::tests::pods_only);
            c.status.api_enablements = vec![crate::types::ApiEnablement {
                group_version: "example.com/v1".into(),
                kinds: kinds.iter().map(|k| (*k).to_owned()).collect(),
            }];
            c
        };
        // (what, kinds and capacity before, after, whether it may fit more)
        let g: &[&str] = &["Guestbook"];
        let cases = [
            (
                "a kind became served",
                (&[][..], Some(5)),
                (g, Some(5)),
                true,
            ),
            ("a kind went away", (g, Some(5)), (&[], Some(5)), true),
            ("capacity grew", (&[], Some(5)), (&[], Some(6)), true),
            ("capacity became known", (&[], None), (&[], Some(0)), true),
            ("capacity shrank", (&[], Some(5)), (&[], Some(4)), false),
            (
                "capacity became unknown",
                (&[], Some(5)),
                (&[], None),
                false,
            ),
            ("nothing that fits more", (g, Some(5)), (g, Some(5)), false),
        ];
        for (what, (k0, a0), (k1, a1), want) in cases {
            let (old, new) = (with(k0, a0), with(k1, a1));
            assert_eq!(cluster_status_may_fit_more(&old, &new), want, "{what}");
        }
        // room in one resource is enough: a CPU-bound binding fits again when another
        // workload's pods go, though a Pending pod took one of the free pods
        let summary = |cpu_allocated: i64, pods_allocating: i64| crate::capacity::Summary {
            allocatable: [("cpu".to_owned(), 4000), ("pods".to_owned(), 110)].into(),
            allocated: [("cpu".to_owned(), cpu_allocated)].into(),
            allocating: [("pods".to_owned(), pods_allocating)].into(),
            ..Default::default()
        };
        let at = |s| {
            let mut c = cluster("member1");
            c.status.resource_summary = Some(s);
            c
        };
        for (what, before, after, want) in [
            (
                "cpu freed, a pod fewer",
                summary(4000, 0),
                summary(2000, 1),
                true,
            ),
            ("cpu taken", summary(2000, 0), summary(3000, 0), false),
            ("the same", summary(2000, 1), summary(2000, 1), false),
        ] {
            assert_eq!(
                cluster_status_may_fit_more(&at(before), &at(after)),
                want,
                "{what}"
            );
        }
        // ES-4: a node that reaches a higher grade lets a larger replica fit, though the sums
        // are the same (it was fragmented before)
        let graded = |counts: &[(u32, i64)]| {
            let mut s = summary(2000, 0);
            s.allocatable_modelings = counts
                .iter()
                .map(|&(grade, count)| crate::capacity::AllocatableModeling { grade, count })
                .collect();
            at(s)
        };
        assert!(cluster_status_may_fit_more(
            &graded(&[(0, 2), (1, 0)]),
            &graded(&[(0, 1), (1, 1)])
        ));
        assert!(!cluster_status_may_fit_more(
            &graded(&[(0, 1), (1, 1)]),
            &graded(&[(0, 2), (1, 0)])
        ));
    }

    fn divided() -> Placement {
        Placement {
            replica_scheduling: Some(ReplicaSchedulingStrategy {
                replica_scheduling_type: ReplicaSchedulingType::Divided,
                replica_division_preference: Some(ReplicaDivisionPreference::Weighted),
                weight_preference: None,
            }),
            ..Default::default()
        }
    }

    /// A Divided binding with 3 replicas on member1/member2, scheduled and settled.
    fn settled() -> ResourceBinding {
        let mut rb = ResourceBinding::default();
        rb.meta.generation = 2;
        rb.status.scheduler_observed_generation = 2;
        rb.spec.replicas = 3;
        rb.spec.placement = Some(divided());
        rb.status.applied_placement = Some(divided());
        rb.spec.clusters = vec![
            TargetCluster::new("member1", 1),
            TargetCluster::new("member2", 2),
        ];
        rb
    }

    fn snapshot() -> Vec<Cluster> {
        vec![cluster("member1"), cluster("member2")]
    }

    #[test]
    fn sc_1_responsible_scheduler() {
        let mut rb = settled();
        assert!(
            responsible_for(&rb, "default-scheduler"),
            "empty name is the default scheduler"
        );
        rb.spec.scheduler_name = "other".to_owned();
        assert!(!responsible_for(&rb, "default-scheduler"));
        assert!(responsible_for(&rb, "other"));
    }

    #[test]
    fn sc_2_2_only_generation_changes_enqueue() {
        let old = settled();
        let mut new = old.clone();
        new.status.last_scheduled_time = Some(Time::from_secs(9));
        assert!(!binding_generation_changed(&old, &new), "status-only");
        new.meta.generation += 1;
        assert!(binding_generation_changed(&old, &new));
    }

    #[test]
    fn sc_2_3_cluster_change_relevance() {
        let old = cluster("m1");
        let mut status_only = old.clone();
        status_only.status.resource_summary = Some(crate::scheduler::score::tests::pods_only(3));
        assert!(
            !cluster_change_relevant(&old, &status_only),
            "SC-2.4 status changes do not enqueue"
        );
        let mut deleting = old.clone();
        deleting.meta.deletion_timestamp = Some(Time::from_secs(1));
        assert!(
            cluster_change_relevant(&old, &deleting),
            "deletion newly set"
        );
        assert!(
            !cluster_change_relevant(&deleting, &deleting.clone()),
            "deletion not newly set"
        );
        let mut labelled = old.clone();
        labelled
            .meta
            .labels
            .insert("env".to_owned(), "prod".to_owned());
        assert!(cluster_change_relevant(&old, &labelled));
        let mut tainted = old.clone();
        tainted.meta.generation += 1;
        tainted
            .spec
            .taints
            .push(Taint::new("k", TaintEffect::NoSchedule, None));
        assert!(
            cluster_change_relevant(&old, &tainted),
            "spec change bumps generation"
        );
    }

    #[test]
    fn sc_2_3_binding_affected_by_cluster_change() {
        let only_m1 = ClusterAffinity {
            cluster_names: vec!["m1".to_owned()],
            ..Default::default()
        };
        // Whether a change of cluster `name` that keeps its labels affects `rb`.
        let affected = |rb: &ResourceBinding, name: &str| {
            binding_affected_by_cluster_change(rb, &cluster(name), &cluster(name))
        };
        let mut rb = settled();
        assert!(affected(&rb, "x"), "no affinity → all");
        rb.spec.placement = Some(Placement {
            cluster_affinity: Some(only_m1.clone()),
            ..divided()
        });
        assert!(affected(&rb, "m1"));
        assert!(!affected(&rb, "m2"));
        // Matches the old cluster only (e.g. a label was removed).
        let mut old = cluster("m3");
        old.meta.labels.insert("env".to_owned(), "prod".to_owned());
        let prod = ClusterAffinity {
            label_selector: Some(crate::types::LabelSelector {
                match_labels: [("env".to_owned(), "prod".to_owned())].into(),
                ..Default::default()
            }),
            ..Default::default()
        };
        rb.spec.placement = Some(Placement {
            cluster_affinity: Some(prod),
            ..divided()
        });
        assert!(binding_affected_by_cluster_change(
            &rb,
            &old,
            &cluster("m3")
        ));
        // ClusterAffinities: the observed term decides; a lagging generation enqueues always.
        let terms = vec![
            ClusterAffinityTerm {
                affinity_name: "a".to_owned(),
                affinity: only_m1,
            },
            ClusterAffinityTerm {
                affinity_name: "b".to_owned(),
                affinity: ClusterAffinity {
                    cluster_names: vec!["m2".to_owned()],
                    ..Default::default()
                },
            },
        ];
        rb.spec.placement = Some(Placement {
            cluster_affinities: terms,
            ..divided()
        });
        rb.status.scheduler_observing_affinity_name = "b".to_owned();
        assert!(affected(&rb, "m2"));
        assert!(!affected(&rb, "m1"));
        rb.meta.generation += 1;
        assert!(affected(&rb, "m1"), "generation lags");
    }

    #[test]
    fn sc_3_2_placement_changed() {
        let base = divided();
        let tolerating = Placement {
            cluster_tolerations: vec![Toleration::default()],
            ..divided()
        };
        let spread = Placement {
            spread_constraints: vec![SpreadConstraint::default()],
            ..divided()
        };
        let term = |name: &str, cluster: &str| ClusterAffinityTerm {
            affinity_name: name.to_owned(),
            affinity: ClusterAffinity {
                cluster_names: vec![cluster.to_owned()],
                ..Default::default()
            },
        };
        let terms = |list: Vec<ClusterAffinityTerm>| Placement {
            cluster_affinities: list,
            ..divided()
        };
        let a1_b2 = terms(vec![term("a", "m1"), term("b", "m2")]);
        let a1_b9 = terms(vec![term("a", "m1"), term("b", "m9")]);
        let a3_b2 = terms(vec![term("a", "m3"), term("b", "m2")]);
        let b9 = terms(vec![term("b", "m9")]);
        let unset = Placement::default();
        // (case, placement now, applied placement, observed term, changed)
        let cases: [(&str, &Placement, Option<&Placement>, &str, bool); 9] = [
            ("no applied placement", &base, None, "", true),
            ("identical", &base, Some(&base), "", false),
            ("tolerations differ", &tolerating, Some(&base), "", true),
            ("spread differs", &spread, Some(&base), "", true),
            ("replica scheduling differs", &unset, Some(&base), "", true),
            (
                "other term changed, observed one equal",
                &a1_b9,
                Some(&a1_b2),
                "a",
                false,
            ),
            ("observed term changed", &a3_b2, Some(&a1_b2), "a", true),
            ("no observed name", &a1_b9, Some(&a1_b2), "", true),
            ("observed term missing now", &b9, Some(&a1_b2), "a", true),
        ];
        for (name, now, applied, observed, want) in cases {
            assert_eq!(placement_changed(now, applied, observed), want, "{name}");
        }
    }

    #[test]
    fn sc_3_3_replicas_changed() {
        let rb = settled();
        let p = divided();
        assert!(!replicas_changed(&rb.spec, &p), "1 + 2 = 3");
        let mut evicted = rb.spec.clone();
        evicted.clusters.retain(|t| t.name != "member1");
        assert!(
            replicas_changed(&evicted, &p),
            "eviction removed replicas from the sum"
        );
        let dup = Placement {
            replica_scheduling: Some(ReplicaSchedulingStrategy {
                replica_scheduling_type: ReplicaSchedulingType::Duplicated,
                ..Default::default()
            }),
            ..Default::default()
        };
        let mut spec = rb.spec.clone();
        spec.clusters = vec![TargetCluster::new("m1", 3), TargetCluster::new("m2", 3)];
        assert!(!replicas_changed(&spec, &dup));
        spec.clusters[1].replicas = 2;
        assert!(replicas_changed(&spec, &dup));
        assert!(
            !replicas_changed(&spec, &Placement::default()),
            "nil replicaScheduling → no"
        );
        spec.clusters.clear();
        assert!(
            !replicas_changed(&spec, &dup),
            "Duplicated with no targets: nothing differs"
        );
    }

    #[test]
    fn sc_3_4_reschedule_required() {
        let t = Time::from_secs;
        assert!(reschedule_required(Some(t(10)), Some(t(5))));
        assert!(
            !reschedule_required(Some(t(5)), Some(t(5))),
            "equal is not later"
        );
        assert!(!reschedule_required(Some(t(5)), Some(t(10))));
        assert!(!reschedule_required(Some(t(5)), None), "never scheduled");
        assert!(!reschedule_required(None, Some(t(5))));
    }

    #[test]
    fn sc_3_needs_scheduling_first_match_wins() {
        let clusters = snapshot();
        struct Case {
            name: &'static str,
            binding: ResourceBinding,
            want: ScheduleDecision,
        }
        let with = |f: &dyn Fn(&mut ResourceBinding)| {
            let mut rb = settled();
            f(&mut rb);
            rb
        };
        let cases = [
            Case {
                name: "settled",
                binding: settled(),
                want: ScheduleDecision::NoSchedule {
                    bump_observed_generation: None,
                },
            },
            Case {
                name: "sc_3_1 deleting",
                binding: with(&|rb| rb.meta.deletion_timestamp = Some(Time::from_secs(1))),
                want: ScheduleDecision::Deleting,
            },
            Case {
                name: "sc_3_1 no placement",
                binding: with(&|rb| rb.spec.placement = None),
                want: ScheduleDecision::MissingPlacement,
            },
            Case {
                name: "sc_3_2 never applied",
                binding: with(&|rb| rb.status.applied_placement = None),
                want: ScheduleDecision::Schedule(ScheduleTrigger::PlacementChanged),
            },
            Case {
                name: "sc_3_3 eviction removed a target",
                binding: with(&|rb| rb.spec.clusters.retain(|t| t.name != "member1")),
                want: ScheduleDecision::Schedule(ScheduleTrigger::ReplicasChanged),
            },
            Case {
                name: "sc_3_3 scale up",
                binding: with(&|rb| rb.spec.replicas = 5),
                want: ScheduleDecision::Schedule(ScheduleTrigger::ReplicasChanged),
            },
            Case {
                name: "sc_4_6 a short result of this generation adds up with its shortfall",
                binding: with(&|rb| {
                    rb.spec.clusters.retain(|t| t.name != "member1");
                    rb.status.unschedulable_replicas = 1;
                }),
                want: ScheduleDecision::NoSchedule {
                    bump_observed_generation: None,
                },
            },
            Case {
                name: "sc_4_6 a short result that scaled up since: scheduled",
                binding: with(&|rb| {
                    rb.spec.clusters.retain(|t| t.name != "member1");
                    rb.status.unschedulable_replicas = 1;
                    rb.spec.replicas = 5;
                }),
                want: ScheduleDecision::Schedule(ScheduleTrigger::ReplicasChanged),
            },
            Case {
                name: "sc_3_4 reschedule requested",
                binding: with(&|rb| {
                    rb.status.last_scheduled_time = Some(Time::from_secs(5));
                    rb.spec.reschedule_triggered_at = Some(Time::from_secs(6));
                }),
                want: ScheduleDecision::Schedule(ScheduleTrigger::RescheduleRequested),
            },
            Case {
                name: "sc_3_5 non-workload",
                binding: with(&|rb| {
                    rb.spec.replicas = 0;
                    rb.spec.clusters = vec![TargetCluster::new("member1", 0)];
                }),
                want: ScheduleDecision::Schedule(ScheduleTrigger::NonWorkloadOrDuplicated),
            },
            Case {
                name: "sc_3_5 replicas 0 with requirements is a workload",
                binding: with(&|rb| {
                    rb.spec.replicas = 0;
                    rb.spec.replica_requirements = Some(ReplicaRequirements::default());
                    rb.spec.clusters = vec![TargetCluster::new("member1", 0)];
                }),
                want: ScheduleDecision::NoSchedule {
                    bump_observed_generation: None,
                },
            },
            Case {
                name: "sc_3_5 nil replicaScheduling is Duplicated",
                binding: with(&|rb| {
                    rb.spec.placement = Some(Placement::default());
                    rb.status.applied_placement = Some(Placement::default());
                }),
                want: ScheduleDecision::Schedule(ScheduleTrigger::NonWorkloadOrDuplicated),
            },
            Case {
                name: "sc_3_6 target deleting",
                binding: settled(),
                want: ScheduleDecision::Schedule(ScheduleTrigger::TargetClusterDeleting {
                    cluster: "member2".to_owned(),
                }),
            },
            Case {
                name: "target missing from the snapshot",
                binding: with(&|rb| {
                    rb.spec.clusters = vec![
                        TargetCluster::new("member1", 1),
                        TargetCluster::new("member9", 2),
                    ]
                }),
                want: ScheduleDecision::Schedule(ScheduleTrigger::TargetClusterMissing {
                    cluster: "member9".to_owned(),
                }),
            },
            Case {
                name: "sc_3_7 bump observed generation",
                binding: with(&|rb| rb.meta.generation = 3),
                want: ScheduleDecision::NoSchedule {
                    bump_observed_generation: Some(3),
                },
            },
            Case {
                name: "sc_3_8 recovered cluster: Divided is not moved back",
                binding: with(&|rb| rb.spec.clusters = vec![TargetCluster::new("member2", 3)]),
                want: ScheduleDecision::NoSchedule {
                    bump_observed_generation: None,
                },
            },
        ];
        for c in cases {
            let snap = if c.name == "sc_3_6 target deleting" {
                let mut s = clusters.clone();
                s[1].meta.deletion_timestamp = Some(Time::from_secs(1));
                s
            } else {
                clusters.clone()
            };
            assert_eq!(needs_scheduling(&c.binding, &snap), c.want, "{}", c.name);
        }
    }
}
