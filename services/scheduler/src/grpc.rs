//! `flotilla.v1.Scheduler`: the dry-run `Simulate` RPC. It validates the request, converts it
//! to domain types, runs the very same [`decide`] the controller runs (SC-3 then the
//! SC-5..SC-19 pipeline), and explains the outcome cluster by cluster. It writes nothing.
//!
//! ```text
//!   SimulateRequest ──validate + convert──► (ResourceBinding, [Cluster], options, now)
//!        │ INVALID_ARGUMENT + BadRequest{field violations} on any problem
//!        ▼
//!   decide() ─► Decision ─► SimulateResponse { needs_scheduling, trigger, filter_results,
//!                                              scores, selected_clusters, clusters,
//!                                              affinity_name, scheduled_condition, reasons,
//!                                              strategy, mode }
//! ```

use std::collections::HashMap;

use flotilla_core::Time;
use flotilla_core::scheduler::{
    ClusterDiagnostic, FilterVerdict, ScheduleInput, ScheduleOptions, schedule,
};
use flotilla_core::types::{Cluster, ResourceBinding};
use flotilla_core::validation::{
    FieldError, FieldPath, Limits, validate_binding_spec, validate_cluster,
};
use flotilla_proto::convert::{ConvertError, timestamp_to_time};
use flotilla_proto::v1;
use flotilla_proto::v1::scheduler_server::Scheduler;
use tonic::{Request, Status};

use crate::decision::{
    Decision, REASON_SUCCESS, decide, format_core_targets, scheduled_condition, trigger_name,
    trigger_reason,
};
use crate::error::Error;

/// The `Scheduler` gRPC service.
#[derive(Clone, Debug, Default)]
pub struct SchedulerService {
    limits: Limits,
    options: ScheduleOptions,
}

// === impl SchedulerService ===

impl SchedulerService {
    /// A service validating with `limits`; `options` are the controller's defaults, which a
    /// request's own `options` replace.
    pub fn new(limits: Limits, options: ScheduleOptions) -> Self {
        Self { limits, options }
    }

    /// `Scheduler.Simulate`: the request validated, then [`simulate`].
    async fn simulate_request(
        &self,
        request: Request<v1::SimulateRequest>,
    ) -> Result<v1::SimulateResponse, Status> {
        let input = SimulateInput::from_request(request.into_inner(), &self.limits, self.options)?;
        Ok(simulate(&input))
    }
}

flotilla_runtime::unary_service! {
    impl Scheduler for SchedulerService {
        simulate(v1::SimulateRequest) -> v1::SimulateResponse = Self::simulate_request;
    }
}

/// A validated `SimulateRequest` in domain types.
#[derive(Clone, Debug)]
pub struct SimulateInput {
    /// The binding.
    pub binding: ResourceBinding,
    /// The cluster snapshot.
    pub clusters: Vec<Cluster>,
    /// Rule switches.
    pub options: ScheduleOptions,
    /// Schedule even if SC-3 says nothing changed.
    pub force: bool,
    /// Evaluation time.
    pub now: Time,
}

fn convert_error(e: ConvertError, parent: &str) -> FieldError {
    let e = e.within(parent);
    FieldError::invalid(&FieldPath::new(&e.field), e.message)
}

fn prefixed(mut errors: Vec<FieldError>, parent: &str) -> Vec<FieldError> {
    for e in &mut errors {
        e.field = format!("{parent}.{}", e.field);
    }
    errors
}

// === impl SimulateInput ===

impl SimulateInput {
    /// Validates and converts a request; every problem is reported with its JSON path
    /// (`binding.spec.replicas`, `clusters[1].spec.taints[0].effect`, `now`, ...).
    pub fn from_request(
        req: v1::SimulateRequest,
        limits: &Limits,
        default_options: ScheduleOptions,
    ) -> Result<Self, Error> {
        let v1::SimulateRequest {
            binding,
            clusters,
            options,
            force,
            now,
        } = req;
        let mut errors = Vec::new();

        let binding = match binding {
            None => {
                errors.push(FieldError::required(
                    &FieldPath::new("binding"),
                    "the binding to simulate is required",
                ));
                None
            }
            Some(b) => match ResourceBinding::try_from(b) {
                Ok(b) => {
                    errors.extend(prefixed(validate_binding_spec(&b.spec, limits), "binding"));
                    if b.spec.placement.is_none() {
                        errors.push(FieldError::required(
                            &FieldPath::new("binding.spec.placement"),
                            "SC-3.1: a binding without a placement cannot be scheduled",
                        ));
                    }
                    Some(b)
                }
                Err(e) => {
                    errors.push(convert_error(e, "binding"));
                    None
                }
            },
        };

        let path = FieldPath::new("clusters");
        if clusters.len() > limits.max_placement_clusters {
            errors.push(FieldError::too_many(
                &path,
                clusters.len(),
                limits.max_placement_clusters,
            ));
        }
        let mut names: HashMap<String, usize> = HashMap::new();
        let mut domain = Vec::with_capacity(clusters.len());
        for (i, wire) in clusters.into_iter().enumerate() {
            let at = format!("clusters[{i}]");
            let allocatable = wire
                .status
                .as_ref()
                .and_then(|s| s.resource_summary.as_ref())
                .and_then(|r| r.allocatable_replicas);
            if allocatable.is_some_and(|n| n < 0) {
                errors.push(FieldError::out_of_range(
                    &path
                        .index(i)
                        .child("status")
                        .child("resourceSummary")
                        .child("allocatableReplicas"),
                    "must be at least 0",
                ));
            }
            match Cluster::try_from(wire) {
                Ok(c) => {
                    errors.extend(prefixed(validate_cluster(&c, limits), &at));
                    if let Some(first) = names.insert(c.meta.name.clone(), i) {
                        errors.push(FieldError::duplicate(
                            &path.index(i).child("metadata").child("name"),
                            format!("{:?} is already clusters[{first}]", c.meta.name),
                        ));
                    }
                    domain.push(c);
                }
                Err(e) => errors.push(convert_error(e, &at)),
            }
        }

        let now = match now {
            None => flotilla_runtime::now(),
            Some(ts) => match timestamp_to_time(&ts) {
                Ok(t) => t,
                Err(e) => {
                    errors.push(convert_error(e, "now"));
                    Time::EPOCH
                }
            },
        };

        match binding {
            Some(binding) if errors.is_empty() => Ok(SimulateInput {
                binding,
                clusters: domain,
                options: options.map_or(default_options, |o| ScheduleOptions {
                    enable_empty_workload_propagation: o.enable_empty_workload_propagation,
                    place_what_fits: o.place_what_fits.unwrap_or(default_options.place_what_fits),
                }),
                force,
                now,
            }),
            _ => Err(Error::InvalidArgument(errors)),
        }
    }
}

/// SC-9 order of feasible clusters: score desc, available replicas desc, name asc (every
/// cluster has overflow order 0, SC-20 is not implemented).
fn sc9_order(a: &&ClusterDiagnostic, b: &&ClusterDiagnostic) -> std::cmp::Ordering {
    b.score
        .cmp(&a.score)
        .then(b.available_replicas.cmp(&a.available_replicas))
        .then(a.cluster.cmp(&b.cluster))
}

fn filter_result(d: &ClusterDiagnostic) -> v1::ClusterFilterResult {
    let (filter, reason) = match &d.verdict {
        FilterVerdict::Fit => (String::new(), String::new()),
        FilterVerdict::Deleting => (
            "Candidates".to_owned(),
            "cluster is being deleted (SC-5)".to_owned(),
        ),
        FilterVerdict::Unfit { plugin, reason } => (plugin.name().to_owned(), reason.to_string()),
    };
    v1::ClusterFilterResult {
        cluster: d.cluster.clone(),
        feasible: d.verdict.is_fit(),
        filter,
        reason,
    }
}

/// Runs the dry run: the controller's [`decide`], explained.
pub fn simulate(input: &SimulateInput) -> v1::SimulateResponse {
    let SimulateInput {
        binding,
        clusters,
        options,
        force,
        now,
    } = input;
    let decision = decide(binding, clusters, *options, *force, *now);
    let mut resp = v1::SimulateResponse::default();
    let mut reasons = Vec::new();
    if let Some(t) = decision.trigger() {
        resp.needs_scheduling = true;
        resp.trigger = trigger_name(t).to_owned();
        reasons.push(trigger_reason(t));
    }

    // Diagnostics: from the run itself, or — when nothing is scheduled — from a run of the
    // same pipeline for explanation only.
    let explanatory;
    let diagnostics: &[ClusterDiagnostic] = match &decision {
        Decision::Scheduled { outcome, .. } => &outcome.diagnostics,
        Decision::Failed { error, .. } => error.diagnostics(),
        Decision::Unchanged { .. } | Decision::Deleting | Decision::MissingPlacement => {
            explanatory = ScheduleInput::from_binding(binding, clusters)
                .ok()
                .map(|mut i| {
                    i.options = *options;
                    schedule(&i)
                });
            match &explanatory {
                Some(Ok(o)) => &o.diagnostics,
                Some(Err(e)) => e.diagnostics(),
                None => &[],
            }
        }
    };
    resp.filter_results = diagnostics.iter().map(filter_result).collect();
    let mut feasible: Vec<&ClusterDiagnostic> =
        diagnostics.iter().filter(|d| d.verdict.is_fit()).collect();
    feasible.sort_by(sc9_order);
    resp.scores = feasible
        .iter()
        .map(|d| v1::ClusterScore {
            cluster: d.cluster.clone(),
            score: d.score.unwrap_or_default(),
            allocatable_replicas: d.allocatable_replicas.unwrap_or_default(),
            available_replicas: d.available_replicas.unwrap_or_default(),
            bounded_by: d
                .capacity_bound
                .as_ref()
                .map(ToString::to_string)
                .unwrap_or_default(),
        })
        .collect();

    let previous = &binding.spec.clusters;
    match &decision {
        Decision::Deleting => {
            reasons.push("SC-3.1: the binding is being deleted; nothing is scheduled".to_owned());
            resp.clusters = previous.iter().cloned().map(Into::into).collect();
        }
        Decision::MissingPlacement => {
            reasons.push("SC-3.1: the binding has no placement".to_owned());
        }
        Decision::Unchanged {
            bump_observed_generation,
            failback_pending,
        } => {
            for (cluster, at) in failback_pending {
                reasons.push(format!(
                    "A11: failback to {cluster} pending: Ready and untainted, its stabilisation \
                     window ends at {} ({} s from now)",
                    flotilla_proto::convert::time_to_timestamp(*at),
                    at.saturating_since(*now).as_secs()
                ));
            }
            reasons.push(
                "SC-3.7: no trigger fired; the current result stays (the filters and scores \
                 below are for explanation only)"
                    .to_owned(),
            );
            if let Some(g) = bump_observed_generation {
                reasons.push(format!(
                    "SC-3.7: schedulerObservedGeneration would be set to {g}"
                ));
            }
            resp.clusters = previous.iter().cloned().map(Into::into).collect();
            resp.affinity_name = binding.status.scheduler_observing_affinity_name.clone();
        }
        Decision::Scheduled { outcome, .. } => {
            resp.selected_clusters = selected(&outcome.diagnostics);
            resp.clusters = outcome.targets.iter().cloned().map(Into::into).collect();
            resp.affinity_name = outcome.affinity_name.clone().unwrap_or_default();
            resp.strategy = outcome.strategy.as_str().to_owned();
            resp.mode = format!("{:?}", outcome.mode);
            reasons.push(format!(
                "SC-14: {} assignment ({:?} mode, SC-17) → {}",
                outcome.strategy.as_str(),
                outcome.mode,
                format_core_targets(&outcome.targets)
            ));
            resp.unschedulable_replicas = outcome.unschedulable_replicas;
            if outcome.complete() {
                reasons.push(format!(
                    "SC-4.1: Scheduled=True/{REASON_SUCCESS}; result written, observed \
                     generation = generation"
                ));
            } else {
                reasons.push(format!(
                    "SC-4.6: {} replicas have no room ({}); the result places the rest, \
                     Scheduled=False/InsufficientCapacity, retried with back-off and when a \
                     cluster has more room; an evicted copy keeps serving meanwhile (GE-4.7)",
                    outcome.unschedulable_replicas,
                    outcome.unschedulable_reason.trim_end_matches('.')
                ));
            }
        }
        Decision::Failed { error, .. } => {
            resp.selected_clusters = selected(error.diagnostics());
            resp.strategy = binding
                .spec
                .placement
                .as_ref()
                .map(|p| {
                    flotilla_core::scheduler::AssignmentStrategy::for_placement(p)
                        .as_str()
                        .to_owned()
                })
                .unwrap_or_default();
            if error.clears_result() {
                reasons.push(format!(
                    "SC-4.3: {error}; the result becomes empty and is not retried until \
                     something changes"
                ));
            } else {
                resp.clusters = previous.iter().cloned().map(Into::into).collect();
                if matches!(
                    error,
                    flotilla_core::scheduler::ScheduleError::Unschedulable {
                        error: flotilla_core::scheduler::DivideError::InsufficientCapacity { .. },
                        ..
                    }
                ) {
                    let kept: i32 = previous.iter().map(|t| t.replicas).sum();
                    resp.unschedulable_replicas = binding.spec.replicas.saturating_sub(kept).max(0);
                }
                reasons.push(format!(
                    "SC-4.2/SC-4.4: {error}; the previous result is kept and retried with \
                     back-off"
                ));
            }
            resp.affinity_name = binding.status.scheduler_observing_affinity_name.clone();
        }
    }
    resp.scheduled_condition = scheduled_condition(&decision, *now).map(Into::into);
    resp.reasons = reasons;
    resp
}

fn selected(diagnostics: &[ClusterDiagnostic]) -> Vec<String> {
    let mut picked: Vec<&ClusterDiagnostic> = diagnostics.iter().filter(|d| d.selected).collect();
    picked.sort_by(sc9_order);
    picked.into_iter().map(|d| d.cluster.clone()).collect()
}
