//! The scheduling pipeline (SC-5..SC-17) and ClusterAffinities (SC-19) as one pure function.
//!
//! ```text
//!   snapshot ──► filter (SC-5/6) ──► score + capacity (SC-7/8/9) ──► select (SC-10..13)
//!            ──► assign (SC-14..17) ──► ScheduleOutcome { targets, affinity, diagnostics }
//! ```

use std::collections::BTreeMap;
use std::fmt;

use thiserror::Error;

use super::divide::{
    AssignParams, AssignmentMode, AssignmentStrategy, DivideError, assign_replicas, is_workload,
};
use super::filter::{FilterContext, FilterVerdict, effective_affinity, filter_cluster};
use super::score::{Demand, cluster_details};
use super::spread::{SpreadError, select_best_clusters};
use super::trigger::reschedule_required;
use super::webster::TieBreak;
use crate::capacity::{self, Bound, ResourceList};
use crate::time::Time;
use crate::types::{
    Cluster, GracefulEvictionTask, Placement, ReplicaRequirements, ResourceBinding, TargetCluster,
};

/// Scheduler switches.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ScheduleOptions {
    /// `--enable-empty-workload-propagation` (scheduler, default false, SC-14.4): keep every
    /// selected cluster in the result, with 0 replicas where none were assigned.
    pub enable_empty_workload_propagation: bool,
    /// SC-4.6 (Flotilla, A16; scheduler `--place-what-fits`, default on in the service):
    /// when the clusters cannot hold every replica, place those that fit and report the
    /// rest as unschedulable, instead of failing the run and keeping the previous result
    /// (SC-4.2, Karmada's behaviour, which is this switch off).
    pub place_what_fits: bool,
}

/// Everything one scheduling run reads: the binding's scheduling inputs and the cluster
/// snapshot. Build it with [`ScheduleInput::from_binding`], or field by field to simulate a
/// hypothetical placement.
#[derive(Clone, Copy, Debug)]
pub struct ScheduleInput<'a> {
    /// `spec.resource.apiVersion` (SC-6.1).
    pub api_version: &'a str,
    /// `spec.resource.kind` (SC-6.1).
    pub kind: &'a str,
    /// The placement to schedule.
    pub placement: &'a Placement,
    /// `spec.replicas`.
    pub replicas: i32,
    /// `spec.replicaRequirements`: whether it is set (SC-14.1) and what one replica
    /// requests (ES-1, read by SC-8).
    pub replica_requirements: Option<&'a ReplicaRequirements>,
    /// The current result `spec.clusters`.
    pub previous: &'a [TargetCluster],
    /// `spec.gracefulEvictionTasks` (SC-6.6).
    pub eviction_tasks: &'a [GracefulEvictionTask],
    /// `status.applicationFailoverClusters` (SC-6.7); empty when the run forgets them
    /// ([`application_failover_clusters_after`]).
    pub failed_over: &'a [String],
    /// The UID behind the Webster tie-break (SC-15.3); the template's `spec.resource.uid`.
    pub uid: &'a str,
    /// `spec.rescheduleTriggeredAt` (SC-3.4, SC-17.1, SC-19.1).
    pub reschedule_triggered_at: Option<Time>,
    /// `status.lastScheduledTime`.
    pub last_scheduled_time: Option<Time>,
    /// `status.schedulerObservingAffinityName` (SC-19).
    pub observed_affinity_name: &'a str,
    /// The cluster snapshot, deleting clusters included (SC-5 drops them).
    pub clusters: &'a [Cluster],
    /// Switches.
    pub options: ScheduleOptions,
    /// A11: schedule in Fresh mode whatever the reschedule times say (a failback recomputes
    /// the placement's preference).
    pub fresh: bool,
}

// === impl ScheduleInput ===

impl<'a> ScheduleInput<'a> {
    /// The inputs of `binding` against `clusters`; fails when the binding has no placement
    /// (SC-3.1).
    pub fn from_binding(
        binding: &'a ResourceBinding,
        clusters: &'a [Cluster],
    ) -> Result<Self, ScheduleError> {
        let placement = binding
            .spec
            .placement
            .as_ref()
            .ok_or(ScheduleError::MissingPlacement)?;
        Ok(ScheduleInput {
            api_version: &binding.spec.resource.api_version,
            kind: &binding.spec.resource.kind,
            placement,
            replicas: binding.spec.replicas,
            replica_requirements: binding.spec.replica_requirements.as_ref(),
            previous: &binding.spec.clusters,
            eviction_tasks: &binding.spec.graceful_eviction_tasks,
            failed_over: &binding.status.application_failover_clusters,
            uid: &binding.spec.resource.uid,
            reschedule_triggered_at: binding.spec.reschedule_triggered_at,
            last_scheduled_time: binding.status.last_scheduled_time,
            observed_affinity_name: &binding.status.scheduler_observing_affinity_name,
            clusters,
            options: ScheduleOptions::default(),
            fresh: false,
        })
    }

    /// SC-17: Fresh when a reschedule was requested after the last schedule (or for a
    /// failback, A11), else Steady.
    pub fn mode(&self) -> AssignmentMode {
        if self.fresh || reschedule_required(self.reschedule_triggered_at, self.last_scheduled_time)
        {
            AssignmentMode::Fresh
        } else {
            AssignmentMode::Steady
        }
    }
}

/// SC-6.7: whether a run for `trigger` forgets the clusters application failover evicted the
/// binding from: a changed placement or a requested reschedule gives them another chance.
pub fn forgets_failed_over(trigger: Option<&super::ScheduleTrigger>) -> bool {
    matches!(
        trigger,
        Some(
            super::ScheduleTrigger::PlacementChanged | super::ScheduleTrigger::RescheduleRequested
        )
    )
}

/// SC-6.7: `status.applicationFailoverClusters` after a run of `binding` that results in
/// `targets`: the clusters remembered before (none when the run `forget`s them, see
/// [`forgets_failed_over`]) and those application failover's tasks name, minus the targets.
/// Sorted.
pub fn application_failover_clusters_after(
    binding: &crate::types::ResourceBinding,
    targets: &[TargetCluster],
    forget: bool,
) -> Vec<String> {
    let remembered: &[String] = if forget {
        &[]
    } else {
        &binding.status.application_failover_clusters
    };
    super::failback::remembered_evictions(
        remembered,
        binding,
        crate::types::PRODUCER_APPLICATION_FAILOVER,
        targets,
        &[],
    )
}

/// What the scheduler knows about one cluster of the snapshot after a run, for explanation
/// (the dry-run "Simulate" RPC shows these).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ClusterDiagnostic {
    /// Cluster name.
    pub cluster: String,
    /// SC-5/SC-6 verdict; the reason string is `UnfitReason`'s `Display`.
    pub verdict: FilterVerdict,
    /// SC-7 score (feasible clusters only).
    pub score: Option<i64>,
    /// SC-8 allocatable replicas (feasible clusters only).
    pub allocatable_replicas: Option<i64>,
    /// SC-8 available replicas (feasible clusters only).
    pub available_replicas: Option<i64>,
    /// What bounds the SC-8 estimate (ES-2): `pods`, a resource, a resource the cluster
    /// lacks; `None` for a non-workload or a cluster without a summary (no estimate).
    pub capacity_bound: Option<Bound>,
    /// Whether the spread selection (SC-10) kept it.
    pub selected: bool,
    /// Replicas in the new result, if it is a target.
    pub assigned_replicas: Option<i32>,
}

/// Karmada's `FitError`: no cluster passed the filters (SC-4.3).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FitError {
    /// Clusters in the snapshot, deleting ones included.
    pub num_all_clusters: usize,
    /// Per-cluster verdicts.
    pub diagnostics: Vec<ClusterDiagnostic>,
}

impl fmt::Display for FitError {
    /// `0/N clusters are available: <count> <reason>, ….` with the reasons counted and sorted
    /// as strings, like kube-scheduler and Karmada (deleting clusters have no reason).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut histogram: BTreeMap<String, usize> = BTreeMap::new();
        for d in &self.diagnostics {
            if let FilterVerdict::Unfit { reason, .. } = &d.verdict {
                *histogram.entry(reason.to_string()).or_default() += 1;
            }
        }
        let mut reasons: Vec<String> = histogram
            .into_iter()
            .map(|(r, n)| format!("{n} {r}"))
            .collect();
        reasons.sort();
        write!(
            f,
            "0/{} clusters are available: {}.",
            self.num_all_clusters,
            reasons.join(", ")
        )
    }
}

/// Why scheduling failed. [`ScheduleError::condition_reason`] gives the `Scheduled=False`
/// reason of SC-4.
#[derive(Clone, Debug, PartialEq, Eq, Error)]
pub enum ScheduleError {
    /// SC-3.1: the binding has no placement.
    #[error("binding has no placement")]
    MissingPlacement,
    /// SC-4.3: no cluster fits. The caller writes an **empty** result (for ClusterAffinities,
    /// keeping the previously observed affinity name, SC-19.3), does not retry and does not
    /// bump the observed generation.
    #[error("{0}")]
    NoClusterFit(FitError),
    /// SC-4.2 (capacity) or SC-4.4 (nothing selected): the previous result is kept and the
    /// binding is retried.
    #[error("failed to assign replicas: {error}")]
    Unschedulable {
        /// What went wrong.
        error: DivideError,
        /// Per-cluster diagnostics of the run.
        diagnostics: Vec<ClusterDiagnostic>,
    },
    /// SC-10..SC-13: the spread constraints cannot be met (Karmada's plain error, SC-4.4:
    /// previous result kept, rate-limited retry).
    #[error("failed to select clusters: {error}")]
    SpreadUnsatisfiable {
        /// What went wrong.
        error: SpreadError,
        /// Per-cluster diagnostics of the run.
        diagnostics: Vec<ClusterDiagnostic>,
    },
}

impl ScheduleError {
    /// SC-4: the reason of the `Scheduled=False` condition.
    pub fn condition_reason(&self) -> &'static str {
        match self {
            ScheduleError::NoClusterFit(_) => "NoClusterFit",
            ScheduleError::Unschedulable {
                error: DivideError::InsufficientCapacity { .. },
                ..
            } => "Unschedulable",
            ScheduleError::MissingPlacement
            | ScheduleError::Unschedulable {
                error: DivideError::NoCandidates,
                ..
            }
            | ScheduleError::SpreadUnsatisfiable { .. } => "SchedulerError",
        }
    }

    /// SC-4.3: only a `FitError` replaces the result with an empty one.
    pub fn clears_result(&self) -> bool {
        matches!(self, ScheduleError::NoClusterFit(_))
    }

    /// The per-cluster diagnostics of the failed run, if it got as far as filtering.
    pub fn diagnostics(&self) -> &[ClusterDiagnostic] {
        match self {
            ScheduleError::MissingPlacement => &[],
            ScheduleError::NoClusterFit(fit) => &fit.diagnostics,
            ScheduleError::Unschedulable { diagnostics, .. }
            | ScheduleError::SpreadUnsatisfiable { diagnostics, .. } => diagnostics,
        }
    }
}

/// A successful run.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ScheduleOutcome {
    /// The new `spec.clusters`.
    pub targets: Vec<TargetCluster>,
    /// With ClusterAffinities: the term that scheduled, to write to
    /// `status.schedulerObservingAffinityName` (SC-19.1); `None` for a single affinity.
    pub affinity_name: Option<String>,
    /// The assignment strategy (SC-14).
    pub strategy: AssignmentStrategy,
    /// Steady or Fresh (SC-17).
    pub mode: AssignmentMode,
    /// Per-cluster diagnostics, in snapshot order.
    pub diagnostics: Vec<ClusterDiagnostic>,
    /// SC-4.6: replicas left unplaced for lack of room (0 when the result holds them all).
    pub unschedulable_replicas: i32,
    /// SC-4.6: why they are left, e.g. `Clusters available replicas 9 are not enough to
    /// schedule.` (empty when none is).
    pub unschedulable_reason: String,
}

impl ScheduleOutcome {
    /// Whether the result holds every replica.
    pub fn complete(&self) -> bool {
        self.unschedulable_replicas == 0
    }
}

/// One pass of the pipeline with a given affinity in use (Karmada's `genericScheduler.Schedule`).
fn schedule_once(
    input: &ScheduleInput<'_>,
    affinity_name: Option<&str>,
) -> Result<ScheduleOutcome, ScheduleError> {
    let placement = input.placement;
    let observed = affinity_name.unwrap_or(input.observed_affinity_name);
    let ctx = FilterContext {
        api_version: input.api_version,
        kind: input.kind,
        previous: input.previous,
        tolerations: &placement.cluster_tolerations,
        affinity: effective_affinity(placement, observed),
        spread_constraints: &placement.spread_constraints,
        eviction_tasks: input.eviction_tasks,
        failed_over: input.failed_over,
    };

    // SC-5/SC-6.
    let mut diagnostics: Vec<ClusterDiagnostic> = input
        .clusters
        .iter()
        .map(|c| ClusterDiagnostic {
            cluster: c.name().to_owned(),
            verdict: filter_cluster(&ctx, c),
            score: None,
            allocatable_replicas: None,
            available_replicas: None,
            capacity_bound: None,
            selected: false,
            assigned_replicas: None,
        })
        .collect();
    let feasible: Vec<&Cluster> = input
        .clusters
        .iter()
        .zip(&diagnostics)
        .filter(|(_, d)| d.verdict.is_fit())
        .map(|(c, _)| c)
        .collect();
    if feasible.is_empty() {
        return Err(ScheduleError::NoClusterFit(FitError {
            num_all_clusters: input.clusters.len(),
            diagnostics,
        }));
    }

    // SC-7/SC-8/SC-9.
    let workload = is_workload(input.replicas, input.replica_requirements.is_some());
    let no_requests = ResourceList::new();
    let demand = Demand {
        replicas: input.replicas,
        is_workload: workload,
        requests: input
            .replica_requirements
            .map_or(&no_requests, |r| &r.resource_request),
    };
    let details = cluster_details(&feasible, input.previous, &demand);
    for detail in &details {
        if let Some(d) = diagnostics.iter_mut().find(|d| d.cluster == detail.name()) {
            d.score = Some(detail.score);
            d.allocatable_replicas = Some(detail.allocatable_replicas);
            d.available_replicas = Some(detail.available_replicas);
            d.capacity_bound = detail
                .cluster
                .status
                .resource_summary
                .as_ref()
                .filter(|_| workload)
                .map(|summary| {
                    let models = &detail.cluster.spec.resource_models;
                    capacity::estimate(Some(summary), models, demand.requests).1
                });
        }
    }

    // SC-10..SC-13.
    let selected = match select_best_clusters(placement, &details, input.replicas) {
        Ok(selected) => selected,
        Err(error) => return Err(ScheduleError::SpreadUnsatisfiable { error, diagnostics }),
    };
    for s in &selected {
        if let Some(d) = diagnostics.iter_mut().find(|d| d.cluster == s.name()) {
            d.selected = true;
        }
    }

    // SC-14..SC-17.
    let mode = input.mode();
    let params = AssignParams {
        placement,
        replicas: input.replicas,
        is_workload: workload,
        previous: input.previous,
        mode,
        tie: TieBreak::for_uid(input.uid),
    };
    let pairs: Vec<(&Cluster, i64)> = selected
        .iter()
        .map(|s| (s.cluster, s.allocatable_replicas))
        .collect();
    let (mut targets, unschedulable_replicas, unschedulable_reason) =
        match assign_replicas(&params, &pairs) {
            Ok(targets) => (targets, 0, String::new()),
            Err(error) => match place_what_fits(input, &params, &pairs, &error) {
                Some((targets, short)) => (targets, short, error.to_string()),
                None => return Err(ScheduleError::Unschedulable { error, diagnostics }),
            },
        };
    // SC-14.4 `--enable-empty-workload-propagation`.
    if input.options.enable_empty_workload_propagation {
        for s in &selected {
            if !targets.iter().any(|t| t.name == s.name()) {
                targets.push(TargetCluster::new(s.name(), 0));
            }
        }
    }
    for t in &targets {
        if let Some(d) = diagnostics.iter_mut().find(|d| d.cluster == t.name) {
            d.assigned_replicas = Some(t.replicas);
        }
    }
    Ok(ScheduleOutcome {
        targets,
        affinity_name: None,
        strategy: AssignmentStrategy::for_placement(placement),
        mode,
        diagnostics,
        unschedulable_replicas,
        unschedulable_reason,
    })
}

/// SC-4.6 (Flotilla, A16): after SC-17.5 found too little room for `error`'s target, assign
/// the replicas that fit — spec.replicas less the shortfall — with the same rules, so that
/// Steady keeps what is scheduled and adds what fits, and Fresh divides what fits. Returns
/// the targets and the shortfall, or `None` when the switch is off or nothing would be
/// placed (then SC-4.2 applies: the previous result stays).
fn place_what_fits(
    input: &ScheduleInput<'_>,
    params: &AssignParams<'_>,
    pairs: &[(&Cluster, i64)],
    error: &DivideError,
) -> Option<(Vec<TargetCluster>, i32)> {
    let DivideError::InsufficientCapacity { available, target } = *error else {
        return None;
    };
    if !input.options.place_what_fits {
        return None;
    }
    let short = i32::try_from(target.saturating_sub(available)).ok()?;
    let fitting = input.replicas.checked_sub(short).filter(|n| *n > 0)?;
    let reduced = AssignParams {
        replicas: fitting,
        ..*params
    };
    let targets = assign_replicas(&reduced, pairs).ok()?;
    let placed: i64 = targets.iter().map(|t| i64::from(t.replicas)).sum();
    (placed > 0).then_some((targets, short))
}

/// Schedule a binding: the whole pipeline, with ClusterAffinities handled per SC-19.
///
/// With a single affinity (or none) this is one pass. With ClusterAffinities the terms are
/// tried from the observed one upward (index 0 when there is none, when it is unknown, or —
/// v1.19 — when a reschedule was requested after the last schedule, SC-3.4); the first term
/// that schedules wins and is reported in [`ScheduleOutcome::affinity_name`]. A term earlier
/// than the observed one is never tried on its own (SC-19.2: going back needs a reschedule).
/// When every term fails, the first error is returned (SC-19.3; if it is a FitError the
/// caller writes an empty result and keeps the old affinity name).
pub fn schedule(input: &ScheduleInput<'_>) -> Result<ScheduleOutcome, ScheduleError> {
    let terms = &input.placement.cluster_affinities;
    if terms.is_empty() {
        return schedule_once(input, None);
    }
    let start = if input.mode() == AssignmentMode::Fresh {
        0
    } else {
        terms
            .iter()
            .position(|t| t.affinity_name == input.observed_affinity_name)
            .unwrap_or(0)
    };
    let try_term = |term: &crate::types::ClusterAffinityTerm| {
        schedule_once(input, Some(&term.affinity_name)).map(|mut outcome| {
            outcome.affinity_name = Some(term.affinity_name.clone());
            outcome
        })
    };
    let Some((first, rest)) = terms.get(start..).and_then(<[_]>::split_first) else {
        return schedule_once(input, None);
    };
    let first_error = match try_term(first) {
        Ok(outcome) => return Ok(outcome),
        Err(e) => e,
    };
    for term in rest {
        if let Ok(outcome) = try_term(term) {
            return Ok(outcome);
        }
    }
    Err(first_error)
}
