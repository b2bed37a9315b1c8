//! `flotilla.v1.GracefulEviction`: the dry-run `Assess`, calling the same step the
//! controller runs ([`crate::plan::plan`], i.e. GE-3..GE-6 with A6; application failover is
//! left out because it depends on the controller's memory).
//!
//! ```text
//!   GracefulEvictionAssessRequest ──validate + convert (INVALID_ARGUMENT naming the field)
//!        ──► plan(binding, None, timeout, now)
//!        ──► { keptTasks, evictedClusters, assessments[], changed, nextRetry, conditions,
//!              reasons }
//! ```

use std::collections::HashSet;
use std::time::Duration;

use flotilla_core::graceful::TaskVerdict;
use flotilla_core::types::ResourceBinding;
use flotilla_core::validation::{
    FieldError, FieldErrors, FieldPath, Limits, ONE_YEAR_SECONDS, check_cluster_name,
    validate_eviction_task, validate_target_names,
};
use flotilla_proto::convert::{time_to_timestamp, timestamp_to_time};
use flotilla_proto::v1;
use flotilla_proto::v1::graceful_eviction_server::{GracefulEviction, GracefulEvictionServer};
use tonic::Request;

use crate::error::Error;
use crate::plan::{describe, plan, task_deadline};

/// The `GracefulEviction` gRPC service. `default_timeout` answers requests that do not name
/// one (the server's `--graceful-eviction-timeout`).
#[derive(Clone, Debug)]
pub struct GracefulEvictionService {
    default_timeout: Duration,
    limits: Limits,
}

/// The service wrapped in its generated server, with Flotilla's decode limit.
pub fn server(default_timeout: Duration) -> GracefulEvictionServer<GracefulEvictionService> {
    flotilla_runtime::decode_limited!(GracefulEvictionServer::new(GracefulEvictionService {
        default_timeout,
        limits: Limits::default(),
    }))
}

fn outcome(verdict: TaskVerdict) -> v1::TaskOutcome {
    match verdict {
        TaskVerdict::Stamped => v1::TaskOutcome::Stamped,
        TaskVerdict::Suppressed => v1::TaskOutcome::KeptSuppressed,
        TaskVerdict::Released => v1::TaskOutcome::RemovedSuppressionLifted,
        TaskVerdict::TimedOut => v1::TaskOutcome::RemovedTimedOut,
        TaskVerdict::ReplacementHealthy => v1::TaskOutcome::RemovedHealthy,
        TaskVerdict::NoReplacement => v1::TaskOutcome::KeptNoReplacement,
        TaskVerdict::Waiting => v1::TaskOutcome::Kept,
        TaskVerdict::ReplacementShort => v1::TaskOutcome::KeptReplacementShort,
        TaskVerdict::Rescheduled => v1::TaskOutcome::RemovedRescheduled,
    }
}

/// The parts of the binding the assessment reads, validated (paths under `binding.`).
fn validate_binding(binding: &ResourceBinding, limits: &Limits) -> FieldErrors {
    let spec = FieldPath::new("binding.spec");
    let mut errs = validate_target_names(&binding.spec.clusters, &spec.child("clusters"));
    let tasks = spec.child("gracefulEvictionTasks");
    if binding.spec.graceful_eviction_tasks.len() > limits.max_eviction_tasks {
        errs.push(FieldError::too_many(
            &tasks,
            binding.spec.graceful_eviction_tasks.len(),
            limits.max_eviction_tasks,
        ));
    }
    let mut from = HashSet::new();
    for (i, task) in binding.spec.graceful_eviction_tasks.iter().enumerate() {
        let p = tasks.index(i);
        errs.extend(validate_eviction_task(task, &p, limits));
        if !from.insert(task.from_cluster.as_str()) {
            errs.push(FieldError::duplicate(
                &p.child("fromCluster"),
                "at most one task per cluster (A7)",
            ));
        }
    }
    let status = FieldPath::new("binding.status.aggregatedStatus");
    for (i, item) in binding.status.aggregated_status.iter().enumerate() {
        if let Err(e) = check_cluster_name(&item.cluster_name) {
            errs.push(e.at(&status.index(i).child("clusterName")));
        }
    }
    errs
}

fn assess(
    req: v1::GracefulEvictionAssessRequest,
    server_default: Duration,
    limits: &Limits,
) -> Result<v1::GracefulEvictionAssessResponse, Error> {
    let v1::GracefulEvictionAssessRequest {
        binding,
        graceful_eviction_timeout,
        now,
    } = req;
    let binding = binding.ok_or_else(|| Error::required("binding"))?;
    let binding =
        ResourceBinding::try_from(binding).map_err(|e| Error::convert_at("binding", e))?;
    let mut errs = validate_binding(&binding, limits);
    let timeout = match graceful_eviction_timeout {
        None => server_default,
        Some(d) => match flotilla_proto::convert::duration_from_wire(&d) {
            Ok(d) if !d.is_zero() && d.as_secs() <= ONE_YEAR_SECONDS.unsigned_abs() => d,
            _ => {
                errs.push(FieldError::out_of_range(
                    &FieldPath::new("gracefulEvictionTimeout"),
                    "must be positive and at most one year",
                ));
                server_default
            }
        },
    };
    let now = match now {
        Some(ts) => timestamp_to_time(&ts).map_err(|e| Error::convert_at("now", e))?,
        None => flotilla_runtime::now(),
    };
    if !errs.is_empty() {
        return Err(Error::InvalidArgument(errs));
    }

    let step = plan(&binding, None, timeout, now);
    let mut resp = v1::GracefulEvictionAssessResponse {
        kept_tasks: step.tasks.iter().cloned().map(Into::into).collect(),
        evicted_clusters: step.assessment.evicted.clone(),
        changed: step.spec_changed,
        next_retry: step
            .requeue
            .and_then(|d| prost_types::Duration::try_from(d).ok()),
        conditions: step.conditions.iter().cloned().map(Into::into).collect(),
        ..Default::default()
    };
    resp.reasons.push(format!(
        "GE-2.1: hasScheduled = {} (schedulerObservedGeneration {} vs generation {})",
        step.has_scheduled, binding.status.scheduler_observed_generation, binding.meta.generation
    ));
    for (task, (cluster, verdict)) in binding
        .spec
        .graceful_eviction_tasks
        .iter()
        .zip(&step.assessment.verdicts)
    {
        let deadline = task_deadline(task, now, timeout, binding.status.last_scheduled_time);
        resp.assessments.push(v1::TaskAssessment {
            from_cluster: cluster.clone(),
            outcome: outcome(*verdict).into(),
            deadline: deadline.map(time_to_timestamp),
            reason: describe(*verdict).to_owned(),
        });
        resp.reasons
            .push(format!("{cluster}: {}", describe(*verdict)));
    }
    if step.replacement_pending {
        resp.reasons.push(
            "A6: the binding has no target cluster; ReplacementPending=True and every task is \
             kept (an empty placement is never healthy)"
                .into(),
        );
    }
    match step.requeue {
        Some(d) => resp.reasons.push(format!(
            "GE-6: assess again in {}",
            humantime::format_duration(d)
        )),
        None => resp
            .reasons
            .push("GE-6: no timed re-assessment; only a binding change triggers one".into()),
    }
    Ok(resp)
}

flotilla_runtime::unary_service! {
    impl GracefulEviction for GracefulEvictionService {
        assess(v1::GracefulEvictionAssessRequest) -> v1::GracefulEvictionAssessResponse =
            Self::assess_request;
    }
}

impl GracefulEvictionService {
    /// `GracefulEviction.Assess`: [`assess`] with the server's default timeout.
    async fn assess_request(
        &self,
        request: Request<v1::GracefulEvictionAssessRequest>,
    ) -> Result<v1::GracefulEvictionAssessResponse, Error> {
        assess(request.into_inner(), self.default_timeout, &self.limits)
    }
}
