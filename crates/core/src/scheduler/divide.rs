//! SC-14..SC-17: replica assignment over the selected clusters.
//!
//! Flotilla divides with the latest rules (A5): Webster with the UID tie-break for static
//! weights, and Steady / Fresh modes for dynamic weights and Aggregated, so a failover only
//! places the missing replicas and never moves healthy ones. The legacy division of SC-18
//! (floor + remainder, v1.5–v1.15) is deliberately not implemented.

use thiserror::Error;

use super::webster::{TieBreak, dispense};
use crate::affinity::cluster_matches_affinity;
use crate::types::{
    Cluster, ClusterPreferences, Placement, ReplicaDivisionPreference, ReplicaSchedulingType,
    TargetCluster,
};

/// How replicas are assigned (SC-14.2/SC-14.3).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum AssignmentStrategy {
    /// Every selected cluster runs `spec.replicas`.
    Duplicated,
    /// Divided, packed into as few clusters as possible.
    Aggregated,
    /// Divided by static weights.
    StaticWeight,
    /// Divided by available replicas.
    DynamicWeight,
}

impl AssignmentStrategy {
    /// SC-14.2/SC-14.3: nil replicaScheduling or Duplicated → Duplicated; Divided +
    /// Aggregated → Aggregated; Divided + Weighted with a dynamicWeight → DynamicWeight;
    /// everything else (including an empty preference, which PD-1.3 defaults to Weighted)
    /// → StaticWeight.
    pub fn for_placement(placement: &Placement) -> Self {
        let Some(rs) = &placement.replica_scheduling else {
            return AssignmentStrategy::Duplicated;
        };
        match (rs.replica_scheduling_type, rs.replica_division_preference) {
            (ReplicaSchedulingType::Duplicated, _) => AssignmentStrategy::Duplicated,
            (ReplicaSchedulingType::Divided, Some(ReplicaDivisionPreference::Aggregated)) => {
                AssignmentStrategy::Aggregated
            }
            (ReplicaSchedulingType::Divided, _) => {
                if rs
                    .weight_preference
                    .as_ref()
                    .is_some_and(|w| w.dynamic_weight.is_some())
                {
                    AssignmentStrategy::DynamicWeight
                } else {
                    AssignmentStrategy::StaticWeight
                }
            }
        }
    }

    /// Karmada's strategy name.
    pub fn as_str(self) -> &'static str {
        match self {
            AssignmentStrategy::Duplicated => "Duplicated",
            AssignmentStrategy::Aggregated => "Aggregated",
            AssignmentStrategy::StaticWeight => "StaticWeight",
            AssignmentStrategy::DynamicWeight => "DynamicWeight",
        }
    }
}

/// Dynamic / Aggregated re-assignment mode (SC-17).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum AssignmentMode {
    /// Keep the previous distribution; only scale the difference (A5).
    #[default]
    Steady,
    /// Recompute from scratch: a reschedule was requested after the last schedule (SC-3.4).
    Fresh,
}

/// Why replicas could not be assigned.
#[derive(Clone, Debug, PartialEq, Eq, Error)]
pub enum DivideError {
    /// SC-17.5: the weights (available replicas) do not cover the replicas to place; Karmada's
    /// `UnschedulableError` (SC-4.2: keep the previous result, retry with back-off).
    #[error("Clusters available replicas {available} are not enough to schedule.")]
    InsufficientCapacity {
        /// Σ weights.
        available: i64,
        /// Replicas to place in this round.
        target: i64,
    },
    /// No cluster was selected to assign to (Karmada's plain error, SC-4.4).
    #[error("no clusters available to schedule")]
    NoCandidates,
}

/// SC-14.1: a workload has replicas or per-replica requirements (multi-component templates
/// are not modelled). Only workloads are divided.
pub fn is_workload(replicas: i32, has_requirements: bool) -> bool {
    replicas > 0 || has_requirements
}

/// A selected cluster with its SC-8 allocatable replicas, as the dynamic strategies see it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CandidateCapacity {
    /// Cluster name.
    pub name: String,
    /// SC-8 allocatable replicas (without the replicas already assigned).
    pub allocatable: i64,
}

impl CandidateCapacity {
    /// Shorthand constructor.
    pub fn new(name: impl Into<String>, allocatable: i64) -> Self {
        CandidateCapacity {
            name: name.into(),
            allocatable,
        }
    }
}

/// SC-16.1/SC-16.2: static weights of the candidates: the largest weight of the
/// staticWeightList rules whose target matches (SC-6.4), clusters with weight 0 left out;
/// when no cluster has a positive weight (or there is no preference), every candidate
/// weighs 1. Candidate order is kept.
pub fn static_weights(
    candidates: &[&Cluster],
    preferences: Option<&ClusterPreferences>,
) -> Vec<(String, i64)> {
    let rules = preferences
        .map(|p| p.static_weight_list.as_slice())
        .unwrap_or_default();
    let weights: Vec<(String, i64)> = candidates
        .iter()
        .filter_map(|c| {
            let weight = rules
                .iter()
                .filter(|r| cluster_matches_affinity(c, &r.target_cluster))
                .map(|r| r.weight)
                .max()
                .unwrap_or(0);
            (weight > 0).then(|| (c.name().to_owned(), weight))
        })
        .collect();
    if weights.is_empty() {
        candidates
            .iter()
            .map(|c| (c.name().to_owned(), 1))
            .collect()
    } else {
        weights
    }
}

/// SC-16.3: divide `replicas` by static weights from scratch with Webster (the previous
/// result is ignored; Webster is house-monotone, so scaling up never lowers a cluster — the
/// fix for #6735). Clusters may come out with 0 replicas.
pub fn divide_by_static_weight(
    candidates: &[&Cluster],
    preferences: Option<&ClusterPreferences>,
    replicas: i32,
    tie: TieBreak,
) -> Vec<TargetCluster> {
    dispense(replicas, &static_weights(candidates, preferences), &[], tie)
}

/// Stable sort by weight descending (Go's `sort.Sort` on ≤ 12 items is an insertion sort,
/// so equal weights keep candidate order there too, U-4).
fn sort_desc(weights: &mut [(String, i64)]) {
    weights.sort_by_key(|(_, w)| std::cmp::Reverse(*w));
}

/// One round of dynamic division: what to divide, by which weights, onto what.
struct Plan {
    /// Weights per cluster.
    weights: Vec<(String, i64)>,
    /// Replicas to place in this round.
    target: i32,
    /// The result the new replicas are added onto.
    init: Vec<TargetCluster>,
    /// Clusters Aggregated moves to the front (previously used, replicas > 0).
    prior: Vec<String>,
}

/// SC-17: DynamicWeight (`aggregated == false`) or Aggregated division over `candidates`
/// (the selected clusters, in selection order) given the `previous` result.
///
/// scheduled = previous targets that are still candidates; assigned = Σ scheduled.
/// * Fresh (SC-17.1): weights = allocatable + scheduled replicas, target = replicas.
/// * Steady, assigned > replicas (SC-17.2, scale down): weights = scheduled replicas,
///   target = replicas.
/// * Steady, assigned < replicas (SC-17.3: first schedule, scale up, failover refill):
///   weights = allocatable, target = replicas − assigned, added onto scheduled.
/// * Steady, equal (SC-17.4): scheduled unchanged.
///
/// Then (SC-17.5) Σweights < target → [`DivideError::InsufficientCapacity`]; Aggregated moves
/// the previously used clusters (replicas > 0) to the front and keeps the shortest prefix
/// whose weights reach the target; Webster divides the target and the result is merged.
pub fn divide_dynamically(
    aggregated: bool,
    mode: AssignmentMode,
    candidates: &[CandidateCapacity],
    previous: &[TargetCluster],
    replicas: i32,
    tie: TieBreak,
) -> Result<Vec<TargetCluster>, DivideError> {
    let scheduled: Vec<TargetCluster> = previous
        .iter()
        .filter(|t| candidates.iter().any(|c| c.name == t.name))
        .cloned()
        .collect();
    let assigned: i64 = scheduled.iter().map(|t| i64::from(t.replicas)).sum();
    let scheduled_of = |name: &str| -> i64 {
        scheduled
            .iter()
            .filter(|t| t.name == name)
            .map(|t| i64::from(t.replicas))
            .sum()
    };
    let replicas_i64 = i64::from(replicas);

    let plan = match mode {
        AssignmentMode::Fresh => Plan {
            weights: candidates
                .iter()
                .map(|c| {
                    (
                        c.name.clone(),
                        c.allocatable.saturating_add(scheduled_of(&c.name)),
                    )
                })
                .collect(),
            target: replicas,
            init: Vec::new(),
            prior: Vec::new(),
        },
        AssignmentMode::Steady if assigned > replicas_i64 => Plan {
            weights: scheduled
                .iter()
                .map(|t| (t.name.clone(), i64::from(t.replicas)))
                .collect(),
            target: replicas,
            init: Vec::new(),
            prior: Vec::new(),
        },
        AssignmentMode::Steady if assigned < replicas_i64 => Plan {
            weights: candidates
                .iter()
                .map(|c| (c.name.clone(), c.allocatable))
                .collect(),
            target: i32::try_from(replicas_i64 - assigned).unwrap_or(i32::MAX),
            prior: scheduled
                .iter()
                .filter(|t| t.replicas > 0)
                .map(|t| t.name.clone())
                .collect(),
            init: scheduled,
        },
        AssignmentMode::Steady => return Ok(scheduled),
    };
    let Plan {
        mut weights,
        target,
        init,
        prior,
    } = plan;
    sort_desc(&mut weights);

    let available = weights
        .iter()
        .fold(0i64, |acc, (_, w)| acc.saturating_add(*w));
    if available < i64::from(target) {
        return Err(DivideError::InsufficientCapacity {
            available,
            target: i64::from(target),
        });
    }
    if aggregated {
        if !prior.is_empty() {
            let (mut front, back): (Vec<_>, Vec<_>) =
                weights.into_iter().partition(|(n, _)| prior.contains(n));
            front.extend(back);
            weights = front;
        }
        let mut sum = 0i64;
        let mut keep = weights.len();
        for (i, (_, w)) in weights.iter().enumerate() {
            sum = sum.saturating_add(*w);
            if sum >= i64::from(target) {
                keep = i + 1;
                break;
            }
        }
        weights.truncate(keep);
    }
    Ok(dispense(target, &weights, &init, tie))
}

/// SC-14.4: drop clusters that end with 0 replicas.
pub fn drop_zero_replicas(targets: Vec<TargetCluster>) -> Vec<TargetCluster> {
    targets.into_iter().filter(|t| t.replicas > 0).collect()
}

/// Everything [`assign_replicas`] needs besides the selected clusters.
#[derive(Clone, Copy, Debug)]
pub struct AssignParams<'a> {
    /// The placement (strategy and static weights).
    pub placement: &'a Placement,
    /// `spec.replicas`.
    pub replicas: i32,
    /// SC-14.1.
    pub is_workload: bool,
    /// The previous result `spec.clusters`.
    pub previous: &'a [TargetCluster],
    /// Steady or Fresh (SC-17).
    pub mode: AssignmentMode,
    /// The UID tie-break (SC-15.3).
    pub tie: TieBreak,
}

/// SC-14: assign replicas to the selected clusters (`selected` pairs each cluster with its
/// SC-8 allocatable replicas, in selection order).
///
/// Non-workloads get every selected cluster with 0 replicas; Duplicated gives each
/// `spec.replicas`; the divided strategies follow SC-16/SC-17, and workloads lose the
/// clusters that end with 0 replicas.
pub fn assign_replicas(
    params: &AssignParams<'_>,
    selected: &[(&Cluster, i64)],
) -> Result<Vec<TargetCluster>, DivideError> {
    if selected.is_empty() {
        return Err(DivideError::NoCandidates);
    }
    if !params.is_workload {
        return Ok(selected
            .iter()
            .map(|(c, _)| TargetCluster::new(c.name(), 0))
            .collect());
    }
    let result = match AssignmentStrategy::for_placement(params.placement) {
        AssignmentStrategy::Duplicated => selected
            .iter()
            .map(|(c, _)| TargetCluster::new(c.name(), params.replicas))
            .collect(),
        AssignmentStrategy::StaticWeight => {
            let clusters: Vec<&Cluster> = selected.iter().map(|(c, _)| *c).collect();
            let prefs = params
                .placement
                .replica_scheduling
                .as_ref()
                .and_then(|r| r.weight_preference.as_ref());
            divide_by_static_weight(&clusters, prefs, params.replicas, params.tie)
        }
        strategy @ (AssignmentStrategy::Aggregated | AssignmentStrategy::DynamicWeight) => {
            let candidates: Vec<CandidateCapacity> = selected
                .iter()
                .map(|(c, allocatable)| CandidateCapacity::new(c.name(), *allocatable))
                .collect();
            divide_dynamically(
                strategy == AssignmentStrategy::Aggregated,
                params.mode,
                &candidates,
                params.previous,
                params.replicas,
                params.tie,
            )?
        }
    };
    Ok(drop_zero_replicas(result))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::types::{
        ClusterAffinity, DynamicWeightFactor, LabelSelector, ReplicaSchedulingStrategy,
        StaticClusterWeight,
    };
    use proptest::prelude::*;

    fn cluster(name: &str) -> Cluster {
        Cluster::named(name)
    }

    fn rule(names: &[&str], weight: i64) -> StaticClusterWeight {
        StaticClusterWeight {
            target_cluster: ClusterAffinity {
                cluster_names: names.iter().map(|n| (*n).to_owned()).collect(),
                ..Default::default()
            },
            weight,
        }
    }

    fn prefs(rules: Vec<StaticClusterWeight>) -> ClusterPreferences {
        ClusterPreferences {
            static_weight_list: rules,
            dynamic_weight: None,
        }
    }

    use crate::test_support::tc;

    fn caps(list: &[(&str, i64)]) -> Vec<CandidateCapacity> {
        list.iter()
            .map(|(n, a)| CandidateCapacity::new(*n, *a))
            .collect()
    }

    /// [`divide_dynamically`] in Steady mode with the default tie-break, from (name,
    /// allocatable) candidates and (name, replicas) previous targets.
    fn steady(
        aggregated: bool,
        candidates: &[(&str, i64)],
        previous: &[(&str, i32)],
        replicas: i32,
    ) -> Result<Vec<TargetCluster>, DivideError> {
        let (candidates, previous) = (caps(candidates), tc(previous));
        let (mode, tie) = (AssignmentMode::Steady, TieBreak::default());
        divide_dynamically(aggregated, mode, &candidates, &previous, replicas, tie)
    }

    fn placement(
        t: ReplicaSchedulingType,
        pref: Option<ReplicaDivisionPreference>,
        w: Option<ClusterPreferences>,
    ) -> Placement {
        Placement {
            replica_scheduling: Some(ReplicaSchedulingStrategy {
                replica_scheduling_type: t,
                replica_division_preference: pref,
                weight_preference: w,
            }),
            ..Default::default()
        }
    }

    #[test]
    fn sc_14_strategy_selection() {
        use AssignmentStrategy as S;
        use ReplicaDivisionPreference::{Aggregated, Weighted};
        use ReplicaSchedulingType::Divided;
        let dynamic = ClusterPreferences {
            dynamic_weight: Some(DynamicWeightFactor::AvailableReplicas),
            ..Default::default()
        };
        let cases = [
            ("nil replicaScheduling", Placement::default(), S::Duplicated),
            (
                "duplicated",
                placement(ReplicaSchedulingType::Duplicated, Some(Aggregated), None),
                S::Duplicated,
            ),
            (
                "aggregated",
                placement(Divided, Some(Aggregated), None),
                S::Aggregated,
            ),
            (
                "weighted, dynamic",
                placement(Divided, Some(Weighted), Some(dynamic.clone())),
                S::DynamicWeight,
            ),
            (
                "weighted, nil preference",
                placement(Divided, Some(Weighted), None),
                S::StaticWeight,
            ),
            (
                "weighted, static",
                placement(Divided, Some(Weighted), Some(prefs(vec![rule(&["a"], 1)]))),
                S::StaticWeight,
            ),
            (
                "empty preference defaults to weighted",
                placement(Divided, None, Some(dynamic)),
                S::DynamicWeight,
            ),
            (
                "empty preference, no weights",
                placement(Divided, None, None),
                S::StaticWeight,
            ),
        ];
        for (name, p, want) in cases {
            assert_eq!(AssignmentStrategy::for_placement(&p), want, "{name}");
        }
        assert!(is_workload(1, false));
        assert!(is_workload(0, true));
        assert!(!is_workload(0, false));
    }

    #[test]
    fn sc_16_static_weights() {
        let (a, b, c) = (cluster("member1"), cluster("member2"), cluster("member3"));
        let all = [&a, &b, &c];
        struct Case {
            name: &'static str,
            prefs: Option<ClusterPreferences>,
            want: Vec<(&'static str, i64)>,
        }
        let cases = [
            Case {
                name: "nil preference → 1 each",
                prefs: None,
                want: vec![("member1", 1), ("member2", 1), ("member3", 1)],
            },
            Case {
                name: "empty list → 1 each",
                prefs: Some(prefs(vec![])),
                want: vec![("member1", 1), ("member2", 1), ("member3", 1)],
            },
            Case {
                name: "unmatched clusters are ignored",
                prefs: Some(prefs(vec![rule(&["member1"], 1), rule(&["member2"], 2)])),
                want: vec![("member1", 1), ("member2", 2)],
            },
            Case {
                name: "max over matching rules",
                prefs: Some(prefs(vec![
                    rule(&["member1", "member2"], 3),
                    rule(&["member1"], 5),
                    rule(&["member2"], 1),
                ])),
                want: vec![("member1", 5), ("member2", 3)],
            },
            Case {
                name: "zero weight ignored",
                prefs: Some(prefs(vec![rule(&["member1"], 0), rule(&["member2"], 2)])),
                want: vec![("member2", 2)],
            },
            Case {
                name: "all zero → 1 each",
                prefs: Some(prefs(vec![rule(&["member1"], 0), rule(&["member2"], 0)])),
                want: vec![("member1", 1), ("member2", 1), ("member3", 1)],
            },
            Case {
                name: "label selector rule",
                prefs: Some(prefs(vec![StaticClusterWeight {
                    target_cluster: ClusterAffinity {
                        label_selector: Some(LabelSelector::default()),
                        ..Default::default()
                    },
                    weight: 4,
                }])),
                want: vec![("member1", 4), ("member2", 4), ("member3", 4)],
            },
        ];
        for case in cases {
            let got = static_weights(&all, case.prefs.as_ref());
            let want: Vec<(String, i64)> = case
                .want
                .iter()
                .map(|(n, w)| ((*n).to_owned(), *w))
                .collect();
            assert_eq!(got, want, "{}", case.name);
        }
    }

    #[test]
    fn sc_16_3_static_weight_division_examples() {
        let (a, b) = (cluster("member1"), cluster("member2"));
        let p = prefs(vec![rule(&["member1"], 1), rule(&["member2"], 2)]);
        let tie = TieBreak::default();
        // Seed (b): 3 replicas, 1:2 → {member1:1, member2:2}.
        assert_eq!(
            divide_by_static_weight(&[&a, &b], Some(&p), 3, tie),
            tc(&[("member1", 1), ("member2", 2)])
        );
        // Seed (b): member1 evicted, only member2 left → all 3 there.
        assert_eq!(
            divide_by_static_weight(&[&b], Some(&p), 3, tie),
            tc(&[("member2", 3)])
        );
        // Seed (c): 9 replicas, 1:2 → 3 and 6.
        assert_eq!(
            divide_by_static_weight(&[&a, &b], Some(&p), 9, tie),
            tc(&[("member1", 3), ("member2", 6)])
        );
        // Karmada's table: 9 replicas, 1:3 → 2:7.
        let p13 = prefs(vec![rule(&["member1"], 1), rule(&["member2"], 3)]);
        assert_eq!(
            divide_by_static_weight(&[&a, &b], Some(&p13), 9, tie),
            tc(&[("member1", 2), ("member2", 7)])
        );
        // Zero replicas: every weighted cluster with 0 (dropped later).
        assert_eq!(
            divide_by_static_weight(&[&a, &b], Some(&p), 0, tie),
            tc(&[("member1", 0), ("member2", 0)])
        );
    }

    #[test]
    fn sc_17_1_fresh_mode_recomputes() {
        // Fresh: weights = allocatable + previous; previous kept nowhere.
        let fresh = |candidates: &[(&str, i64)], previous: &[(&str, i32)], replicas| {
            let (mode, tie) = (AssignmentMode::Fresh, TieBreak::default());
            divide_dynamically(false, mode, &caps(candidates), &tc(previous), replicas, tie)
        };
        let got = fresh(&[("m1", 2), ("m2", 6)], &[("m1", 6), ("m2", 0)], 8);
        // weights m1 8, m2 6 → 8 replicas: m1 ≈ 4.57, m2 ≈ 3.43 → 5 / 3.
        assert_eq!(got, Ok(tc(&[("m1", 5), ("m2", 3)])));
        let short = fresh(&[("m1", 1)], &[], 5);
        assert_eq!(
            short,
            Err(DivideError::InsufficientCapacity {
                available: 1,
                target: 5
            })
        );
    }

    #[test]
    fn sc_17_2_scale_down_by_previous_replicas() {
        let got = steady(
            false,
            &[("m1", 100), ("m2", 100)],
            &[("m1", 6), ("m2", 3)],
            6,
        );
        assert_eq!(got, Ok(tc(&[("m1", 4), ("m2", 2)])));
        // Aggregated scale-down keeps the biggest first.
        let agg = steady(
            true,
            &[("m1", 100), ("m2", 100)],
            &[("m1", 2), ("m2", 7)],
            5,
        );
        assert_eq!(agg.map(drop_zero_replicas), Ok(tc(&[("m2", 5)])));
    }

    #[test]
    fn sc_17_3_failover_refill_onto_kept_clusters() {
        // SC-17.6: previous {m1:4, m2:8}, m2 evicted (not a candidate), 24 replicas.
        let previous = [("m1", 4), ("m2", 8)];
        let candidates = [("m1", 4), ("m3", 8), ("m4", 12)];
        let got = steady(true, &candidates, &previous, 24);
        assert_eq!(got, Ok(tc(&[("m1", 7), ("m3", 7), ("m4", 10)])));
        // Same with DynamicWeight: no prefix cut, same weights → same delta.
        let dynamic = steady(false, &candidates, &previous, 24);
        assert_eq!(dynamic, Ok(tc(&[("m1", 7), ("m3", 7), ("m4", 10)])));
        // Aggregated refill fits on the kept cluster alone when it can.
        let small = steady(true, &candidates, &[("m1", 4), ("m2", 2)], 6);
        assert_eq!(small.map(drop_zero_replicas), Ok(tc(&[("m1", 6)])));
        // Capacity exactly equal to the missing replicas is enough.
        let exact = steady(false, &[("m1", 0), ("m3", 3)], &[("m1", 4), ("m2", 3)], 7);
        assert_eq!(
            exact.map(drop_zero_replicas),
            Ok(tc(&[("m1", 4), ("m3", 3)]))
        );
        // One short → Unschedulable, previous result kept by the caller.
        let short = steady(false, &[("m1", 0), ("m3", 2)], &[("m1", 4), ("m2", 3)], 7);
        assert_eq!(
            short,
            Err(DivideError::InsufficientCapacity {
                available: 2,
                target: 3
            })
        );
        // First schedule is a scale-up from nothing.
        let first = steady(true, &[("a", 5), ("b", 10)], &[], 8);
        assert_eq!(first.map(drop_zero_replicas), Ok(tc(&[("b", 8)])));
    }

    #[test]
    fn sc_17_4_equal_keeps_scheduled() {
        let got = steady(
            false,
            &[("m1", 0), ("m3", 50)],
            &[("m1", 3), ("gone", 2), ("m3", 2)],
            5,
        );
        assert_eq!(
            got,
            Ok(tc(&[("m1", 3), ("m3", 2)])),
            "non-candidates dropped, rest unchanged"
        );
    }

    #[test]
    fn sc_17_5_aggregated_prefers_previously_used() {
        // m1 is used and small; the big unused m2 would otherwise come first.
        let got = steady(true, &[("m2", 10), ("m1", 3)], &[("m1", 1)], 4);
        assert_eq!(got.map(drop_zero_replicas), Ok(tc(&[("m1", 4)])));
        // A previously listed cluster with 0 replicas is not "used".
        let zero = steady(true, &[("m2", 10), ("m1", 3)], &[("m1", 0)], 3);
        assert_eq!(zero.map(drop_zero_replicas), Ok(tc(&[("m2", 3)])));
    }

    #[test]
    fn sc_14_assign_replicas() {
        let (a, b) = (cluster("a"), cluster("b"));
        let selected = [(&a, 5i64), (&b, 0i64)];
        let params = |p: &'static Placement, replicas, workload| AssignParams {
            placement: p,
            replicas,
            is_workload: workload,
            previous: &[],
            mode: AssignmentMode::Steady,
            tie: TieBreak::default(),
        };
        static DUP: Placement = Placement {
            cluster_affinity: None,
            cluster_affinities: Vec::new(),
            cluster_tolerations: Vec::new(),
            spread_constraints: Vec::new(),
            replica_scheduling: None,
        };
        assert_eq!(
            assign_replicas(&params(&DUP, 3, true), &selected),
            Ok(tc(&[("a", 3), ("b", 3)]))
        );
        assert_eq!(
            assign_replicas(&params(&DUP, 0, false), &selected),
            Ok(tc(&[("a", 0), ("b", 0)])),
            "SC-14.1: non-workloads keep every cluster with 0"
        );
        assert_eq!(
            assign_replicas(&params(&DUP, 3, true), &[]),
            Err(DivideError::NoCandidates)
        );
        // Divided: (preference, replicas, want a's replicas, case); b is never kept.
        for (pref, replicas, want, case) in [
            (
                ReplicaDivisionPreference::Aggregated,
                4,
                4,
                "SC-14.4: zero dropped",
            ),
            (
                ReplicaDivisionPreference::Weighted,
                1,
                1,
                "1 replica over 1:1 → a only",
            ),
        ] {
            let divided = placement(ReplicaSchedulingType::Divided, Some(pref), None);
            let p = AssignParams {
                placement: &divided,
                ..params(&DUP, replicas, true)
            };
            assert_eq!(
                assign_replicas(&p, &selected),
                Ok(tc(&[("a", want)])),
                "{case}"
            );
        }
    }

    proptest! {
        #[test]
        fn sc_16_static_division_conserves_and_never_lowers_on_scale_up(
            weights in proptest::collection::vec(0i64..6, 1..6),
            replicas in 0i32..50,
            extra in 0i32..30,
            odd in any::<bool>(),
        ) {
            let clusters: Vec<Cluster> = (0..weights.len()).map(|i| cluster(&format!("m{i}"))).collect();
            let refs: Vec<&Cluster> = clusters.iter().collect();
            let rules = weights.iter().enumerate().map(|(i, w)| rule(&[&format!("m{i}")], *w)).collect();
            let p = prefs(rules);
            let tie = if odd { TieBreak::NameDescending } else { TieBreak::NameAscending };
            let before = divide_by_static_weight(&refs, Some(&p), replicas, tie);
            let after = divide_by_static_weight(&refs, Some(&p), replicas + extra, tie);
            prop_assert_eq!(before.iter().map(|t| t.replicas).sum::<i32>(), replicas);
            prop_assert_eq!(after.iter().map(|t| t.replicas).sum::<i32>(), replicas + extra);
            for t in &before {
                let now = after.iter().find(|a| a.name == t.name).map_or(0, |a| a.replicas);
                prop_assert!(now >= t.replicas, "{} lowered from {} to {}", t.name, t.replicas, now);
            }
        }

        #[test]
        fn sc_17_dynamic_division_conserves_and_steady_scale_up_never_lowers(
            alloc in proptest::collection::vec(0i64..20, 1..6),
            prev in proptest::collection::vec(0i32..10, 0..6),
            replicas in 0i32..60,
            aggregated in any::<bool>(),
            fresh in any::<bool>(),
        ) {
            let candidates: Vec<CandidateCapacity> =
                alloc.iter().enumerate().map(|(i, a)| CandidateCapacity::new(format!("m{i}"), *a)).collect();
            // Previous result: some candidates and one cluster that is gone.
            let mut previous: Vec<TargetCluster> =
                prev.iter().enumerate().map(|(i, r)| TargetCluster::new(format!("m{i}"), *r)).collect();
            previous.push(TargetCluster::new("gone", 3));
            let mode = if fresh { AssignmentMode::Fresh } else { AssignmentMode::Steady };
            let result = divide_dynamically(aggregated, mode, &candidates, &previous, replicas, TieBreak::default());
            if let Ok(targets) = &result {
                prop_assert_eq!(targets.iter().map(|t| i64::from(t.replicas)).sum::<i64>(), i64::from(replicas));
                prop_assert!(targets.iter().all(|t| t.name != "gone"), "non-candidates never kept");
                let kept: Vec<&TargetCluster> =
                    previous.iter().filter(|t| candidates.iter().any(|c| c.name == t.name)).collect();
                let assigned: i64 = kept.iter().map(|t| i64::from(t.replicas)).sum();
                if !fresh && assigned <= i64::from(replicas) {
                    for old in kept {
                        let now = targets.iter().find(|t| t.name == old.name).map_or(0, |t| t.replicas);
                        prop_assert!(now >= old.replicas, "{} lowered from {} to {}", old.name, old.replicas, now);
                    }
                }
            } else {
                // Only capacity can fail.
                let capacity = matches!(result, Err(DivideError::InsufficientCapacity { .. }));
                prop_assert!(capacity, "unexpected {:?}", result);
            }
        }
    }
}
