//! Scheduler scenarios end to end: the seeds' worked examples, SC-4 error handling and
//! SC-19 ClusterAffinities.

use super::*;
use crate::time::Time;
use crate::types::{
    Cluster, ClusterAffinity, ClusterAffinityTerm, ClusterPreferences, DynamicWeightFactor,
    GracefulEvictionTask, ObjectReference, Placement, ReplicaDivisionPreference,
    ReplicaSchedulingStrategy, ReplicaSchedulingType, ResourceBinding, SpreadConstraint,
    SpreadField, StaticClusterWeight, TAINT_NOT_READY, Taint, TaintEffect, TargetCluster,
};

fn cluster(name: &str, allocatable: Option<i64>) -> Cluster {
    let mut c = Cluster::named(name).serving("apps/v1", &["Deployment"]);
    c.status.resource_summary = allocatable.map(super::score::tests::pods_only);
    c
}

fn tainted(mut c: Cluster, effect: TaintEffect) -> Cluster {
    c.spec.taints.push(Taint::new(
        TAINT_NOT_READY,
        effect,
        Some(Time::from_secs(1)),
    ));
    c
}

fn binding(placement: Placement, replicas: i32, previous: &[(&str, i32)]) -> ResourceBinding {
    let mut rb = ResourceBinding::default();
    rb.meta.generation = 1;
    rb.spec.resource = ObjectReference::new("apps/v1", "Deployment", "default", "nginx");
    rb.spec.replicas = replicas;
    rb.spec.clusters = tc(previous);
    rb.status.applied_placement = Some(placement.clone());
    rb.spec.placement = Some(placement);
    rb
}

fn evict(rb: &mut ResourceBinding, cluster: &str) {
    rb.spec.clusters.retain(|t| t.name != cluster);
    rb.spec.graceful_eviction_tasks.push(GracefulEvictionTask {
        from_cluster: cluster.to_owned(),
        producer: "TaintManager".to_owned(),
        reason: "TaintUntolerated".to_owned(),
        ..Default::default()
    });
}

use crate::test_support::tc;

fn strategy(
    t: ReplicaSchedulingType,
    pref: Option<ReplicaDivisionPreference>,
    weights: Option<ClusterPreferences>,
) -> Option<ReplicaSchedulingStrategy> {
    Some(ReplicaSchedulingStrategy {
        replica_scheduling_type: t,
        replica_division_preference: pref,
        weight_preference: weights,
    })
}

/// A placement dividing replicas with `pref` (and `weights`, for Weighted).
fn divided(pref: ReplicaDivisionPreference, weights: Option<ClusterPreferences>) -> Placement {
    Placement {
        replica_scheduling: strategy(ReplicaSchedulingType::Divided, Some(pref), weights),
        ..Default::default()
    }
}

/// The diagnostic of `cluster` in `outcome`.
fn diagnostic<'a>(outcome: &'a ScheduleOutcome, cluster: &str) -> &'a ClusterDiagnostic {
    outcome
        .diagnostics
        .iter()
        .find(|d| d.cluster == cluster)
        .expect("diagnosed")
}

fn run(rb: &ResourceBinding, clusters: &[Cluster]) -> Result<ScheduleOutcome, ScheduleError> {
    let input = ScheduleInput::from_binding(rb, clusters)?;
    schedule(&input)
}

fn static_weight(name: &str, weight: i64) -> StaticClusterWeight {
    StaticClusterWeight {
        target_cluster: ClusterAffinity {
            cluster_names: vec![name.to_owned()],
            ..Default::default()
        },
        weight,
    }
}

#[test]
fn sc_6_2_seed_a_duplicated_spread_failover_keeps_member1_and_adds_another() {
    let placement = Placement {
        spread_constraints: vec![SpreadConstraint {
            spread_by_field: Some(SpreadField::Cluster),
            min_groups: 2,
            max_groups: 2,
            ..Default::default()
        }],
        replica_scheduling: strategy(ReplicaSchedulingType::Duplicated, None, None),
        ..Default::default()
    };
    let mut rb = binding(placement, 2, &[("member1", 2), ("member2", 2)]);
    let healthy = vec![
        cluster("member1", None),
        cluster("member2", None),
        cluster("member3", None),
        cluster("member5", None),
    ];
    // Settled: the result is sticky (score 100 for the current targets).
    assert_eq!(
        run(&rb, &healthy).map(|o| o.targets),
        Ok(tc(&[("member1", 2), ("member2", 2)]))
    );

    // member2 tainted NoExecute but not yet evicted: it stays (SC-6.2, already a target).
    let mut clusters = healthy.clone();
    clusters[1] = tainted(clusters[1].clone(), TaintEffect::NoExecute);
    assert_eq!(
        run(&rb, &clusters).map(|o| o.targets),
        Ok(tc(&[("member1", 2), ("member2", 2)]))
    );

    // The taint manager evicts member2: task + removed from spec.clusters.
    evict(&mut rb, "member2");
    assert_eq!(
        needs_scheduling(&rb, &clusters),
        ScheduleDecision::Schedule(ScheduleTrigger::NonWorkloadOrDuplicated),
        "SC-3.5: Duplicated is always rescheduled"
    );
    let outcome = run(&rb, &clusters).expect("schedules");
    assert_eq!(
        outcome.targets[0],
        TargetCluster::new("member1", 2),
        "member1 kept"
    );
    assert_eq!(outcome.targets.len(), 2);
    assert!(["member3", "member5"].contains(&outcome.targets[1].name.as_str()));
    assert_eq!(outcome.targets[1].replicas, 2);
    let member2 = diagnostic(&outcome, "member2");
    assert_eq!(
        member2.verdict,
        FilterVerdict::Unfit {
            plugin: FilterPlugin::TaintToleration,
            reason: UnfitReason::UntoleratedTaint(clusters[1].spec.taints[0].clone()),
        }
    );
    // Tie between member3 and member5 (score 0, same capacity) goes by name.
    assert_eq!(outcome.targets[1].name, "member3");
}

#[test]
fn sc_16_seed_b_static_weight_failover_moves_replicas_to_member2() {
    let weights = ClusterPreferences {
        static_weight_list: vec![static_weight("member1", 1), static_weight("member2", 2)],
        dynamic_weight: None,
    };
    let placement = divided(ReplicaDivisionPreference::Weighted, Some(weights));
    let mut rb = binding(placement, 3, &[]);
    let mut clusters = vec![cluster("member1", None), cluster("member2", None)];
    let first = run(&rb, &clusters).expect("schedules");
    assert_eq!(first.targets, tc(&[("member1", 1), ("member2", 2)]));
    assert_eq!(first.strategy, AssignmentStrategy::StaticWeight);

    rb.spec.clusters = first.targets;
    clusters[0] = tainted(clusters[0].clone(), TaintEffect::NoExecute);
    evict(&mut rb, "member1");
    assert_eq!(
        needs_scheduling(&rb, &clusters),
        ScheduleDecision::Schedule(ScheduleTrigger::ReplicasChanged)
    );
    assert_eq!(
        run(&rb, &clusters).map(|o| o.targets),
        Ok(tc(&[("member2", 3)]))
    );

    // Seed (c): 9 replicas with weights 1:2 → 3 and 6.
    let mut nine = rb.clone();
    nine.spec.replicas = 9;
    nine.spec.graceful_eviction_tasks.clear();
    nine.spec.clusters.clear();
    let healthy = vec![cluster("member1", None), cluster("member2", None)];
    assert_eq!(
        run(&nine, &healthy).map(|o| o.targets),
        Ok(tc(&[("member1", 3), ("member2", 6)]))
    );
}

#[test]
fn sc_17_6_aggregated_failover_refill_end_to_end() {
    let placement = divided(ReplicaDivisionPreference::Aggregated, None);
    let mut rb = binding(placement, 24, &[("m1", 4), ("m2", 8)]);
    evict(&mut rb, "m2");
    let clusters = vec![
        cluster("m1", Some(4)),
        tainted(cluster("m2", Some(100)), TaintEffect::NoExecute),
        cluster("m3", Some(8)),
        cluster("m4", Some(12)),
    ];
    assert_eq!(
        needs_scheduling(&rb, &clusters),
        ScheduleDecision::Schedule(ScheduleTrigger::ReplicasChanged)
    );
    let outcome = run(&rb, &clusters).expect("schedules");
    assert_eq!(outcome.targets, tc(&[("m1", 7), ("m3", 7), ("m4", 10)]));
    assert_eq!(outcome.mode, AssignmentMode::Steady);
    let m1 = diagnostic(&outcome, "m1");
    assert_eq!(
        (m1.score, m1.allocatable_replicas, m1.available_replicas),
        (Some(100), Some(4), Some(8))
    );
    assert_eq!(m1.assigned_replicas, Some(7));
}

#[test]
fn sc_17_3_failover_refill_even_when_evicted_target_still_listed() {
    // If the evicted cluster were still in spec.clusters it is not a candidate (eviction
    // filter), so its replicas are treated as missing all the same.
    let placement = divided(ReplicaDivisionPreference::Aggregated, None);
    let mut rb = binding(placement, 24, &[("m1", 4), ("m2", 8)]);
    rb.spec.graceful_eviction_tasks.push(GracefulEvictionTask {
        from_cluster: "m2".to_owned(),
        ..Default::default()
    });
    let clusters = vec![
        cluster("m1", Some(4)),
        cluster("m2", Some(8)),
        cluster("m3", Some(8)),
        cluster("m4", Some(12)),
    ];
    assert_eq!(
        run(&rb, &clusters).map(|o| o.targets),
        Ok(tc(&[("m1", 7), ("m3", 7), ("m4", 10)]))
    );
}

#[test]
fn sc_17_1_fresh_mode_after_reschedule_request() {
    let dynamic = ClusterPreferences {
        dynamic_weight: Some(DynamicWeightFactor::AvailableReplicas),
        ..Default::default()
    };
    let placement = divided(ReplicaDivisionPreference::Weighted, Some(dynamic));
    let mut rb = binding(placement, 6, &[("m1", 6)]);
    let clusters = vec![cluster("m1", Some(0)), cluster("m2", Some(6))];
    let steady = run(&rb, &clusters).expect("schedules");
    assert_eq!(
        (steady.mode, steady.targets),
        (AssignmentMode::Steady, tc(&[("m1", 6)])),
        "SC-17.4 equal"
    );
    rb.status.last_scheduled_time = Some(Time::from_secs(10));
    rb.spec.reschedule_triggered_at = Some(Time::from_secs(20));
    let fresh = run(&rb, &clusters).expect("schedules");
    assert_eq!(fresh.mode, AssignmentMode::Fresh);
    assert_eq!(
        fresh.targets,
        tc(&[("m1", 3), ("m2", 3)]),
        "weights 0+6 and 6+0"
    );
}

/// SC-8 by ES-2 end to end: dynamic weights are the replicas each cluster's free CPU holds,
/// not its free pods (the measurement: 1-CPU replicas on 8 and 2 free CPUs).
#[test]
fn sc_8_es_2_dynamic_weights_follow_the_free_cpu() {
    let dynamic = ClusterPreferences {
        dynamic_weight: Some(DynamicWeightFactor::AvailableReplicas),
        ..Default::default()
    };
    let placement = divided(ReplicaDivisionPreference::Weighted, Some(dynamic));
    let mut rb = binding(placement, 10, &[]);
    rb.spec.replica_requirements = Some(crate::types::ReplicaRequirements::of(&[
        ("cpu", 1000),
        ("memory", 64 << 20),
    ]));
    let sized = |name: &str, cpu: i64| {
        let mut c = cluster(name, None);
        c.status.resource_summary = Some(crate::capacity::Summary {
            allocatable: [
                ("cpu".to_owned(), cpu),
                ("memory".to_owned(), 32 << 30),
                ("pods".to_owned(), 20),
            ]
            .into(),
            ..Default::default()
        });
        c
    };
    let clusters = vec![sized("member1", 8000), sized("member2", 2000)];
    let outcome = run(&rb, &clusters).expect("schedules");
    assert_eq!(outcome.targets, tc(&[("member1", 8), ("member2", 2)]));
    let d = diagnostic(&outcome, "member2");
    assert_eq!(d.allocatable_replicas, Some(2));
    assert_eq!(
        d.capacity_bound,
        Some(crate::capacity::Bound::Resource("cpu".into()))
    );
    // without requests the pods decide: 20:20
    rb.spec.replica_requirements = None;
    let by_pods = run(&rb, &clusters).expect("schedules");
    assert_eq!(by_pods.targets, tc(&[("member1", 5), ("member2", 5)]));
    assert_eq!(
        diagnostic(&by_pods, "member2").capacity_bound,
        Some(crate::capacity::Bound::Pods)
    );
}

#[test]
fn sc_12_7_region_spread_end_to_end() {
    // Regions R1(member1) R2(member2..4) R3(member5, member6); region 1..2, cluster 3..4,
    // Duplicated: region scores come from SC-13, the current targets score 100.
    let mut clusters: Vec<Cluster> = (1..=6)
        .map(|i| cluster(&format!("member{i}"), Some(10)))
        .collect();
    for (c, r) in clusters
        .iter_mut()
        .zip(["R1", "R2", "R2", "R2", "R3", "R3"])
    {
        c.spec.region = r.to_owned();
    }
    let placement = Placement {
        spread_constraints: vec![
            SpreadConstraint {
                spread_by_field: Some(SpreadField::Region),
                min_groups: 1,
                max_groups: 2,
                ..Default::default()
            },
            SpreadConstraint {
                spread_by_field: Some(SpreadField::Cluster),
                min_groups: 3,
                max_groups: 4,
                ..Default::default()
            },
        ],
        ..Default::default()
    };
    let rb = binding(placement, 1, &[("member5", 1)]);
    let outcome = run(&rb, &clusters).expect("schedules");
    // SC-13 (Duplicated, 1 replica): R1 = 1×1000, R2 = 3×1000, R3 = 2×1000 + (100+0)/2.
    // Feasible paths (≥ 3 clusters, ≤ 2 regions): [R1,R3] 3050, [R1,R2] 4000, [R3,R2] 5050,
    // [R2] 3000. [R2,R3] ranks first, but [R2] is feasible and a strict prefix of it, so
    // the single region wins (SC-12.4), filled from R2's own clusters.
    let names: Vec<&str> = outcome.targets.iter().map(|t| t.name.as_str()).collect();
    assert_eq!(names, ["member2", "member3", "member4"]);
    // A region missing its property is filtered out before spreading (SC-6.5).
    let mut no_region = clusters.clone();
    no_region[0].spec.region.clear();
    let outcome = run(&rb, &no_region).expect("schedules");
    let member1 = diagnostic(&outcome, "member1");
    assert_eq!(
        member1.verdict,
        FilterVerdict::Unfit {
            plugin: FilterPlugin::SpreadConstraint,
            reason: UnfitReason::MissingSpreadProperty(SpreadField::Region)
        }
    );
}

#[test]
fn sc_4_3_fit_error_message_and_handling() {
    let rb = binding(Placement::default(), 1, &[]);
    let mut no_api = cluster("a", None);
    no_api.status.api_enablements.clear();
    let mut gone = cluster("d", None);
    gone.meta.deletion_timestamp = Some(Time::from_secs(1));
    let clusters = vec![
        no_api,
        tainted(cluster("b", None), TaintEffect::NoSchedule),
        tainted(cluster("c", None), TaintEffect::NoSchedule),
        gone,
    ];
    let err = run(&rb, &clusters).expect_err("nothing fits");
    assert_eq!(
        err.to_string(),
        "0/4 clusters are available: 1 cluster(s) did not have the API resource, \
         2 cluster(s) had untolerated taint {cluster.karmada.io/not-ready:NoSchedule}."
    );
    assert_eq!(err.condition_reason(), "NoClusterFit");
    assert!(err.clears_result());
    assert_eq!(
        err.diagnostics()[3].verdict,
        FilterVerdict::Deleting,
        "SC-5"
    );
    // No clusters at all is a FitError too.
    let empty = run(&rb, &[]).expect_err("no clusters");
    assert_eq!(empty.to_string(), "0/0 clusters are available: .");
    assert_eq!(
        ScheduleInput::from_binding(&ResourceBinding::default(), &[]).err(),
        Some(ScheduleError::MissingPlacement)
    );
}

#[test]
fn sc_4_2_unschedulable_keeps_previous_result() {
    let placement = divided(ReplicaDivisionPreference::Aggregated, None);
    let rb = binding(placement, 10, &[("m1", 2)]);
    let clusters = vec![cluster("m1", Some(3)), cluster("m2", Some(4))];
    let err = run(&rb, &clusters).expect_err("7 available, 8 missing");
    assert_eq!(err.condition_reason(), "Unschedulable");
    assert!(!err.clears_result());
    assert_eq!(
        err.to_string(),
        "failed to assign replicas: Clusters available replicas 7 are not enough to schedule."
    );
    assert_eq!(err.diagnostics().len(), 2);
}

/// SC-4.6 (Flotilla, A16): with `place_what_fits`, a run short of room places what fits
/// and reports the rest; off, SC-4.2 holds (see the test above).
#[test]
fn sc_4_6_place_what_fits() {
    let run_fitting = |rb: &ResourceBinding, clusters: &[Cluster]| {
        let mut input = ScheduleInput::from_binding(rb, clusters).expect("placement");
        input.options.place_what_fits = true;
        schedule(&input)
    };
    let dynamic = divided(
        ReplicaDivisionPreference::Weighted,
        Some(ClusterPreferences {
            dynamic_weight: Some(DynamicWeightFactor::AvailableReplicas),
            ..Default::default()
        }),
    );
    let aggregated = divided(ReplicaDivisionPreference::Aggregated, None);
    // (what, placement, replicas, previous, evicted, free per cluster, want, unschedulable)
    type Case<'a> = (
        &'a str,
        &'a Placement,
        i32,
        &'a [(&'a str, i32)],
        Option<&'a str>,
        &'a [(&'a str, i64)],
        Result<&'a [(&'a str, i32)], ()>,
        i32,
    );
    let cases: [Case<'_>; 6] = [
        (
            "the issue's failover: member1 fails, 4+1 free beside 4/2 kept",
            &dynamic,
            12,
            &[("member1", 6), ("member2", 3), ("member3", 3)],
            Some("member1"),
            &[("member1", 8), ("member2", 1), ("member3", 0)],
            Ok(&[("member2", 4), ("member3", 3)]),
            5,
        ),
        (
            "first schedule of 10 onto 3+4 free: 7 placed",
            &aggregated,
            10,
            &[],
            None,
            &[("m1", 3), ("m2", 4)],
            Ok(&[("m1", 3), ("m2", 4)]),
            3,
        ),
        (
            "scale-up keeps what is placed and adds what fits",
            &aggregated,
            10,
            &[("m1", 2)],
            None,
            &[("m1", 3), ("m2", 4)],
            Ok(&[("m1", 5), ("m2", 4)]),
            1,
        ),
        (
            "room for everything: complete",
            &dynamic,
            6,
            &[],
            None,
            &[("m1", 3), ("m2", 4)],
            Ok(&[("m1", 3), ("m2", 3)]),
            0,
        ),
        (
            "no room at all and nothing placed: SC-4.2 still fails",
            &dynamic,
            4,
            &[],
            None,
            &[("m1", 0), ("m2", 0)],
            Err(()),
            0,
        ),
        (
            "no room beside what is kept: the kept result, all the rest short",
            &dynamic,
            12,
            &[("member1", 6), ("member2", 3), ("member3", 3)],
            Some("member1"),
            &[("member1", 8), ("member2", 0), ("member3", 0)],
            Ok(&[("member2", 3), ("member3", 3)]),
            6,
        ),
    ];
    for (what, placement, replicas, previous, evicted, free, want, short) in cases {
        let mut rb = binding(placement.clone(), replicas, previous);
        let mut clusters: Vec<Cluster> = free.iter().map(|(n, f)| cluster(n, Some(*f))).collect();
        if let Some(gone) = evicted {
            evict(&mut rb, gone);
            for c in clusters.iter_mut().filter(|c| c.name() == gone) {
                *c = tainted(c.clone(), TaintEffect::NoExecute);
            }
        }
        let got = run_fitting(&rb, &clusters);
        match want {
            Ok(targets) => {
                let outcome = got.unwrap_or_else(|e| panic!("{what}: {e}"));
                assert_eq!(outcome.targets, tc(targets), "{what}");
                assert_eq!(outcome.unschedulable_replicas, short, "{what}");
                assert_eq!(outcome.complete(), short == 0, "{what}");
                let placed: i32 = outcome.targets.iter().map(|t| t.replicas).sum();
                assert_eq!(
                    placed + short,
                    replicas,
                    "{what}: placed + short = replicas"
                );
                if short > 0 {
                    assert!(
                        outcome.unschedulable_reason.contains("not enough"),
                        "{what}: {}",
                        outcome.unschedulable_reason
                    );
                    // the switch off: Karmada's SC-4.2
                    let err = run(&rb, &clusters).expect_err("SC-4.2 without the switch");
                    assert_eq!(err.condition_reason(), "Unschedulable", "{what}");
                }
            }
            Err(()) => assert!(got.is_err(), "{what}: {got:?}"),
        }
    }
}

#[test]
fn sc_11_2_max_groups_zero_is_a_scheduler_error() {
    let placement = Placement {
        spread_constraints: vec![SpreadConstraint {
            spread_by_field: Some(SpreadField::Cluster),
            min_groups: 1,
            ..Default::default()
        }],
        ..Default::default()
    };
    let rb = binding(placement, 1, &[]);
    let err = run(&rb, &[cluster("m1", None)]).expect_err("maxGroups 0");
    assert_eq!(err.condition_reason(), "SchedulerError");
    assert!(matches!(
        err,
        ScheduleError::SpreadUnsatisfiable {
            error: SpreadError::NoClusterSelected { max_groups: 0 },
            ..
        }
    ));
}

#[test]
fn sc_14_1_non_workload_goes_everywhere_with_zero_replicas() {
    let mut rb = binding(Placement::default(), 0, &[]);
    rb.spec.resource.kind = "Deployment".to_owned();
    let clusters = vec![cluster("b", None), cluster("a", None)];
    let outcome = run(&rb, &clusters).expect("schedules");
    assert_eq!(
        outcome.targets,
        tc(&[("a", 0), ("b", 0)]),
        "every selected cluster, SC-9 order"
    );
}

#[test]
fn sc_14_4_empty_workload_propagation_reattaches_zero_clusters() {
    let placement = divided(ReplicaDivisionPreference::Aggregated, None);
    let rb = binding(placement, 2, &[]);
    let clusters = vec![cluster("a", Some(5)), cluster("b", Some(1))];
    let mut input = ScheduleInput::from_binding(&rb, &clusters).expect("placement");
    assert_eq!(schedule(&input).map(|o| o.targets), Ok(tc(&[("a", 2)])));
    input.options.enable_empty_workload_propagation = true;
    assert_eq!(
        schedule(&input).map(|o| o.targets),
        Ok(tc(&[("a", 2), ("b", 0)]))
    );
}

#[test]
fn sc_15_3_uid_tie_break_end_to_end() {
    let placement = divided(ReplicaDivisionPreference::Weighted, None);
    let mut rb = binding(placement, 3, &[]);
    let clusters = vec![cluster("member1", None), cluster("member2", None)];
    rb.spec.resource.uid = "a".to_owned(); // fnv32a even → name ascending
    assert_eq!(
        run(&rb, &clusters).map(|o| o.targets),
        Ok(tc(&[("member1", 2), ("member2", 1)]))
    );
    rb.spec.resource.uid = "b".to_owned(); // fnv32a odd → name descending
    assert_eq!(
        run(&rb, &clusters).map(|o| o.targets),
        Ok(tc(&[("member1", 1), ("member2", 2)]))
    );
}

fn affinities_binding(terms: &[(&str, &[&str])], observed: &str) -> ResourceBinding {
    let terms = terms
        .iter()
        .map(|(name, clusters)| ClusterAffinityTerm {
            affinity_name: (*name).to_owned(),
            affinity: ClusterAffinity {
                cluster_names: clusters.iter().map(|c| (*c).to_owned()).collect(),
                ..Default::default()
            },
        })
        .collect();
    let placement = Placement {
        cluster_affinities: terms,
        ..divided(ReplicaDivisionPreference::Aggregated, None)
    };
    let mut rb = binding(placement, 2, &[]);
    rb.status.scheduler_observing_affinity_name = observed.to_owned();
    rb
}

#[test]
fn sc_19_cluster_affinities() {
    let clusters = vec![
        cluster("m1", Some(5)),
        cluster("m2", Some(5)),
        cluster("m3", Some(5)),
    ];
    /// How the run starts: with no observed term, from the observed term, or on an explicit
    /// reschedule request while observing a term.
    #[derive(Clone, Copy)]
    enum Start {
        Fresh,
        Observed(&'static str),
        Rescheduled(&'static str),
    }
    use Start::*;
    // The one cluster of each term, in order; the terms are named primary, backup and last.
    type Terms = &'static [&'static str];
    // (case, (terms, start), Ok((term, cluster)) or Err(condition reason))
    let cases: [(&str, (Terms, Start), Result<(&str, &str), &str>); 7] = [
        (
            "sc_19_1 first term that schedules wins",
            (&["gone", "m2"], Fresh),
            Ok(("backup", "m2")),
        ),
        (
            "sc_19_1 start from the observed term",
            (&["m1", "m2"], Observed("backup")),
            Ok(("backup", "m2")),
        ),
        (
            "sc_19_2 never go back on its own, go forward instead",
            (&["m1", "gone", "m3"], Observed("backup")),
            Ok(("last", "m3")),
        ),
        (
            "sc_19_1 explicit reschedule restarts at index 0",
            (&["m1", "m2"], Rescheduled("backup")),
            Ok(("primary", "m1")),
        ),
        (
            "unknown observed name starts at 0",
            (&["m1", "m2"], Observed("renamed")),
            Ok(("primary", "m1")),
        ),
        (
            "sc_19_3 all fail → first error (a FitError)",
            (&["gone", "gone2"], Fresh),
            Err("NoClusterFit"),
        ),
        (
            "sc_19_3 all fail from the observed term; earlier term not retried",
            (&["m1", "gone"], Observed("backup")),
            Err("NoClusterFit"),
        ),
    ];
    for (name, (terms, start), want) in cases {
        let observed = match start {
            Fresh => "",
            Observed(term) | Rescheduled(term) => term,
        };
        let terms: Vec<(&str, &[&str])> = ["primary", "backup", "last"]
            .into_iter()
            .zip(terms.iter().map(std::slice::from_ref))
            .collect();
        let mut rb = affinities_binding(&terms, observed);
        if let Rescheduled(_) = start {
            rb.status.last_scheduled_time = Some(Time::from_secs(1));
            rb.spec.reschedule_triggered_at = Some(Time::from_secs(2));
        }
        let got = run(&rb, &clusters);
        match (got, want) {
            (Ok(outcome), Ok((term, cluster))) => {
                assert_eq!(outcome.affinity_name.as_deref(), Some(term), "{name}");
                assert_eq!(outcome.targets, tc(&[(cluster, 2)]), "{name}");
            }
            (Err(e), Err(reason)) => assert_eq!(e.condition_reason(), reason, "{name}"),
            (got, want) => panic!("{name}: got {got:?}, want {want:?}"),
        }
    }
}

#[test]
fn sc_19_3_first_error_returned_even_if_not_a_fit_error() {
    // Term "small" fits but lacks capacity (Unschedulable); "none" fits nothing (FitError).
    let clusters = vec![cluster("m1", Some(1)), cluster("m2", Some(1))];
    let rb = affinities_binding(&[("small", &["m1"]), ("none", &["gone"])], "");
    let err = run(&rb, &clusters).expect_err("both terms fail");
    assert_eq!(err.condition_reason(), "Unschedulable");
    assert!(!err.clears_result(), "not a FitError: nothing is patched");
}

#[test]
fn sc_6_3_single_affinity_has_no_affinity_name() {
    let placement = Placement {
        cluster_affinity: Some(ClusterAffinity {
            exclude: vec!["m1".to_owned()],
            ..Default::default()
        }),
        ..Default::default()
    };
    let rb = binding(placement, 1, &[]);
    let outcome = run(&rb, &[cluster("m1", None), cluster("m2", None)]).expect("schedules");
    assert_eq!(outcome.affinity_name, None);
    assert_eq!(outcome.targets, tc(&[("m2", 1)]));
    assert_eq!(outcome.strategy, AssignmentStrategy::Duplicated);
}

#[test]
fn sc_6_7_application_failover_clusters_are_remembered_until_forgotten() {
    use crate::types::{GracefulEvictionTask, PRODUCER_APPLICATION_FAILOVER, ResourceBinding};
    let mut b = ResourceBinding::default();
    b.status.application_failover_clusters = vec!["member3".to_owned()];
    b.spec.graceful_eviction_tasks = vec![
        GracefulEvictionTask {
            from_cluster: "member1".to_owned(),
            producer: PRODUCER_APPLICATION_FAILOVER.to_owned(),
            ..Default::default()
        },
        GracefulEvictionTask {
            from_cluster: "member4".to_owned(),
            producer: "TaintManager".to_owned(),
            ..Default::default()
        },
    ];
    let targets = [TargetCluster::new("member2", 3)];
    // remembered and added; a taint eviction is not the application's failure
    assert_eq!(
        application_failover_clusters_after(&b, &targets, false),
        ["member1", "member3"]
    );
    // a placement change or a requested reschedule forgets what was remembered
    assert_eq!(
        application_failover_clusters_after(&b, &targets, true),
        ["member1"]
    );
    // a cluster in the result is not remembered
    let back = [TargetCluster::new("member3", 3)];
    assert_eq!(
        application_failover_clusters_after(&b, &back, false),
        ["member1"]
    );
    assert!(forgets_failed_over(Some(
        &ScheduleTrigger::PlacementChanged
    )));
    assert!(forgets_failed_over(Some(
        &ScheduleTrigger::RescheduleRequested
    )));
    assert!(!forgets_failed_over(Some(
        &ScheduleTrigger::NonWorkloadOrDuplicated
    )));
    assert!(!forgets_failed_over(None));
}

mod properties {
    use super::*;
    use proptest::prelude::*;

    #[derive(Clone, Debug)]
    struct Member {
        allocatable: Option<i64>,
        tainted: bool,
        deleting: bool,
        previous: Option<i32>,
        evicting: bool,
    }

    fn member() -> impl Strategy<Value = Member> {
        (
            proptest::option::of(0i64..20),
            proptest::bool::weighted(0.2),
            proptest::bool::weighted(0.1),
            proptest::option::of(0i32..8),
            proptest::bool::weighted(0.2),
        )
            .prop_map(
                |(allocatable, tainted, deleting, previous, evicting)| Member {
                    allocatable,
                    tainted,
                    deleting,
                    previous,
                    evicting,
                },
            )
    }

    fn placement_for(kind: u8) -> Placement {
        let (t, pref, weights) = match kind {
            0 => (ReplicaSchedulingType::Duplicated, None, None),
            1 => (
                ReplicaSchedulingType::Divided,
                Some(ReplicaDivisionPreference::Weighted),
                None,
            ),
            2 => (
                ReplicaSchedulingType::Divided,
                Some(ReplicaDivisionPreference::Weighted),
                Some(ClusterPreferences {
                    dynamic_weight: Some(DynamicWeightFactor::AvailableReplicas),
                    ..Default::default()
                }),
            ),
            _ => (
                ReplicaSchedulingType::Divided,
                Some(ReplicaDivisionPreference::Aggregated),
                None,
            ),
        };
        Placement {
            replica_scheduling: strategy(t, pref, weights),
            ..Default::default()
        }
    }

    proptest! {
        /// A7 + SC-5/SC-6.6/SC-14: a result never names a deleting cluster or a cluster
        /// with an eviction task, never names a cluster twice, and a divided workload's
        /// result always adds up to spec.replicas.
        #[test]
        fn sc_14_schedule_result_invariants(
            members in proptest::collection::vec(member(), 1..6),
            kind in 0u8..4,
            replicas in 0i32..30,
            uid in "[a-z0-9]{0,6}",
            fresh in any::<bool>(),
        ) {
            let mut clusters = Vec::new();
            let mut rb = binding(placement_for(kind), replicas, &[]);
            rb.spec.resource.uid = uid;
            if fresh {
                rb.status.last_scheduled_time = Some(Time::from_secs(1));
                rb.spec.reschedule_triggered_at = Some(Time::from_secs(2));
            }
            for (i, m) in members.iter().enumerate() {
                let name = format!("m{i}");
                let mut c = cluster(&name, m.allocatable);
                if m.tainted {
                    c = tainted(c, TaintEffect::NoSchedule);
                }
                if m.deleting {
                    c.meta.deletion_timestamp = Some(Time::from_secs(1));
                }
                clusters.push(c);
                if let Some(r) = m.previous {
                    rb.spec.clusters.push(TargetCluster::new(name.clone(), r));
                }
                if m.evicting {
                    evict(&mut rb, &name);
                }
            }
            match run(&rb, &clusters) {
                Ok(outcome) => {
                    let mut names: Vec<&str> = outcome.targets.iter().map(|t| t.name.as_str()).collect();
                    names.sort_unstable();
                    let before = names.len();
                    names.dedup();
                    prop_assert_eq!(before, names.len(), "duplicate target");
                    for t in &outcome.targets {
                        let i: usize = t.name[1..].parse().expect("name");
                        prop_assert!(!members[i].deleting, "deleting cluster {} targeted", t.name);
                        prop_assert!(!members[i].evicting, "evicted cluster {} targeted", t.name);
                    }
                    let sum: i64 = outcome.targets.iter().map(|t| i64::from(t.replicas)).sum();
                    if kind == 0 {
                        prop_assert!(outcome.targets.iter().all(|t| t.replicas == replicas));
                    } else {
                        prop_assert_eq!(sum, i64::from(replicas));
                    }
                }
                Err(e) => {
                    prop_assert!(
                        matches!(e.condition_reason(), "NoClusterFit" | "Unschedulable"),
                        "unexpected {:?}", e
                    );
                }
            }
        }
    }
}
