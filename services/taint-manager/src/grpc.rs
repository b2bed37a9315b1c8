//! `flotilla.v1.TaintManager`: the dry-run `Explain`, calling the very rules the controller
//! uses (TM-7 `need_eviction`, TM-8 tolerations, TM-9 purge mode, TM-11 the task).
//!
//! ```text
//!   ExplainRequest ──validate + convert (INVALID_ARGUMENT naming the field)──► core types
//!        ──► need_eviction / resolve_purge_mode / graceful_evict_cluster (on a copy)
//!        ──► ExplainResponse { decision, evictAfter, evictAt, tolerations, purgeMode, task,
//!                              reasons }
//! ```

use flotilla_core::Time;
use flotilla_core::eviction::{
    EvictOptions, EvictOutcome, EvictionDecision, EvictionError, graceful_evict_cluster,
    need_eviction, resolve_purge_mode,
};
use flotilla_core::taint::no_execute_taints;
use flotilla_core::toleration::tolerates;
use flotilla_core::types::{Cluster, PurgeMode, ResourceBinding};
use flotilla_core::validation::{
    FieldError, FieldErrors, FieldPath, Limits, validate_cluster, validate_eviction_task,
    validate_failover_at, validate_target_names, validate_tolerations,
};
use flotilla_proto::convert::{WireEnum, time_to_timestamp, timestamp_to_time};
use flotilla_proto::v1;
use flotilla_proto::v1::taint_manager_server::{TaintManager, TaintManagerServer};
use tonic::Request;

use crate::error::Error;

/// The `TaintManager` gRPC service. Stateless: every answer is computed from the request.
#[derive(Clone, Debug, Default)]
pub struct TaintManagerService {
    limits: Limits,
}

/// The service wrapped in its generated server, with Flotilla's decode limit.
pub fn server() -> TaintManagerServer<TaintManagerService> {
    flotilla_runtime::decode_limited!(TaintManagerServer::new(TaintManagerService::default()))
}

fn prefixed(parent: &str, errors: FieldErrors) -> FieldErrors {
    errors
        .into_iter()
        .map(|mut e| {
            e.field = if e.field.is_empty() {
                parent.to_owned()
            } else {
                format!("{parent}.{}", e.field)
            };
            e
        })
        .collect()
}

/// The parts of a binding the eviction rule reads, validated (paths under `binding.`).
fn validate_binding(binding: &ResourceBinding, limits: &Limits) -> FieldErrors {
    let spec = FieldPath::new("binding.spec");
    let mut errs = validate_target_names(&binding.spec.clusters, &spec.child("clusters"));
    for (i, task) in binding.spec.graceful_eviction_tasks.iter().enumerate() {
        errs.extend(validate_eviction_task(
            task,
            &spec.child("gracefulEvictionTasks").index(i),
            limits,
        ));
    }
    if let Some(failover) = &binding.spec.failover {
        errs.extend(validate_failover_at(
            failover,
            &spec.child("failover"),
            limits,
        ));
    }
    if let Some(placement) = &binding.status.applied_placement {
        errs.extend(validate_tolerations(
            &placement.cluster_tolerations,
            &FieldPath::new("binding.status.appliedPlacement.clusterTolerations"),
            limits,
        ));
    }
    errs
}

/// The decoded and validated inputs of `Explain`.
struct ExplainInput {
    cluster: Cluster,
    binding: ResourceBinding,
    eviction_enabled: bool,
    flag_purge_mode: PurgeMode,
    now: Time,
}

fn decode_request(req: v1::ExplainRequest, limits: &Limits) -> Result<ExplainInput, Error> {
    let v1::ExplainRequest {
        cluster,
        binding,
        options,
        now,
    } = req;
    let cluster = cluster.ok_or_else(|| Error::required("cluster"))?;
    let binding = binding.ok_or_else(|| Error::required("binding"))?;
    let cluster = Cluster::try_from(cluster).map_err(|e| Error::convert_at("cluster", e))?;
    let binding =
        ResourceBinding::try_from(binding).map_err(|e| Error::convert_at("binding", e))?;
    let mut errs = prefixed("cluster", validate_cluster(&cluster, limits));
    errs.extend(validate_binding(&binding, limits));
    let options = options.unwrap_or_default();
    let flag_purge_mode =
        PurgeMode::from_wire(options.default_purge_mode, "options.defaultPurgeMode")
            .map_err(|e| Error::convert_at("", e))?
            .unwrap_or(PurgeMode::Gracefully);
    if flag_purge_mode == PurgeMode::Never {
        // TM-9: the flag accepts only Gracefully or Directly.
        errs.push(FieldError::not_supported(
            &FieldPath::new("options.defaultPurgeMode"),
            "Never",
            &["Gracefully", "Directly"],
        ));
    }
    let now = match now {
        Some(ts) => timestamp_to_time(&ts).map_err(|e| Error::convert_at("now", e))?,
        None => flotilla_runtime::now(),
    };
    if !errs.is_empty() {
        return Err(Error::InvalidArgument(errs));
    }
    Ok(ExplainInput {
        cluster,
        binding,
        eviction_enabled: options.no_execute_taint_eviction.unwrap_or(true),
        flag_purge_mode,
        now,
    })
}

/// `Explain` on decoded input: the same calls the controller makes.
fn explain(input: ExplainInput) -> Result<v1::ExplainResponse, Error> {
    let ExplainInput {
        cluster,
        binding,
        eviction_enabled,
        flag_purge_mode,
        now,
    } = input;
    let mut resp = v1::ExplainResponse::default();
    let purge_mode = resolve_purge_mode(binding.spec.failover.as_ref(), flag_purge_mode);
    resp.purge_mode = v1::PurgeMode::from(purge_mode).into();
    resp.reasons.push(match &binding.spec.failover {
        Some(f) if f.cluster.is_some() => format!(
            "TM-9: purge mode {} from spec.failover.cluster",
            purge_mode.as_str()
        ),
        _ => format!(
            "TM-9: purge mode {} from --no-execute-taint-eviction-purge-mode",
            purge_mode.as_str()
        ),
    });
    let taints = no_execute_taints(&cluster.spec.taints);
    let tolerations = binding
        .status
        .applied_placement
        .as_ref()
        .map(|p| p.cluster_tolerations.clone())
        .unwrap_or_default();
    for taint in &taints {
        let used = tolerations.iter().find(|t| tolerates(t, taint));
        let expires_at = match (used.and_then(|t| t.toleration_seconds), taint.time_added) {
            (Some(secs), Some(added)) => Some(time_to_timestamp(added.plus_secs(secs))),
            _ => None,
        };
        resp.tolerations.push(v1::TaintToleration {
            taint: Some(taint.clone().into()),
            toleration: used.cloned().map(Into::into),
            expires_at,
        });
    }
    let not_applicable = |resp: &mut v1::ExplainResponse, why: String| {
        resp.decision = v1::EvictionDecision::NotApplicable.into();
        resp.reasons.push(why);
    };
    if !eviction_enabled {
        not_applicable(
            &mut resp,
            "TM-1: NoExecute taint eviction is disabled".to_owned(),
        );
        return Ok(resp);
    }
    if binding.meta.deletion_timestamp.is_some() {
        not_applicable(&mut resp, "TM-6.1: the binding is being deleted".to_owned());
        return Ok(resp);
    }
    if !binding.targets(cluster.name()) {
        not_applicable(
            &mut resp,
            format!(
                "TM-6.1: cluster {:?} is not in spec.clusters",
                cluster.name()
            ),
        );
        return Ok(resp);
    }
    let explanation = match need_eviction(
        &cluster.spec.taints,
        binding.status.applied_placement.as_ref(),
        now,
    ) {
        Ok(e) => e,
        Err(EvictionError::NoAppliedPlacement) => {
            return Err(Error::FailedPrecondition(
                "binding.status.appliedPlacement: absent; the scheduler has not placed this \
                 binding yet (TM-7.1, A3: tolerations are read only from the applied placement)"
                    .into(),
            ));
        }
    };
    match explanation.decision {
        EvictionDecision::Tolerate => {
            resp.decision = v1::EvictionDecision::Tolerate.into();
            resp.reasons.push(if taints.is_empty() {
                "TM-7.3: the cluster has no NoExecute taint".to_owned()
            } else {
                "TM-8.3: every NoExecute taint is tolerated without a time limit".to_owned()
            });
        }
        EvictionDecision::EvictAfter(d) => {
            resp.decision = v1::EvictionDecision::EvictAfter.into();
            resp.evict_after = prost_types::Duration::try_from(d).ok();
            resp.evict_at = Some(time_to_timestamp(now + d));
            resp.reasons.push(format!(
                "TM-8.3: tolerated for {} more (the earliest toleration to run out)",
                humantime::format_duration(d)
            ));
        }
        EvictionDecision::EvictNow => {
            resp.decision = v1::EvictionDecision::EvictNow.into();
            let why = match &explanation.untolerated {
                Some(t) => {
                    resp.reasons.push(format!(
                        "TM-7.4: taint {}={}:NoExecute is not tolerated",
                        t.key, t.value
                    ));
                    format!("taint {}={}:NoExecute is not tolerated", t.key, t.value)
                }
                None => {
                    resp.reasons
                        .push("TM-7.5: the toleration time is over".to_owned());
                    "the toleration time of the NoExecute taints is over".to_owned()
                }
            };
            let message = format!("evicted from cluster {}: {why}", cluster.name());
            let mut opts = EvictOptions::taint_manager(purge_mode, message, now);
            match flotilla_core::preserve::cluster_failover_state(&binding, cluster.name()) {
                Ok(state) => opts.preserved_label_state = state,
                Err(why) => resp.reasons.push(format!(
                    "TM-10.2: the eviction waits until the state can be preserved: {why}"
                )),
            }
            let mut spec = binding.spec.clone();
            match graceful_evict_cluster(&mut spec, cluster.name(), &opts) {
                EvictOutcome::Evicted => {
                    resp.task = spec.graceful_eviction_tasks.last().cloned().map(Into::into);
                    resp.reasons.push(format!(
                        "TM-11: {:?} leaves spec.clusters and becomes a graceful eviction task \
                         in the same write",
                        cluster.name()
                    ));
                }
                EvictOutcome::RemovedTaskExisted => resp.reasons.push(format!(
                    "TM-11.3: {:?} leaves spec.clusters; it already has a task (A7: never two)",
                    cluster.name()
                )),
                EvictOutcome::NotTargeted => {}
            }
        }
    }
    Ok(resp)
}

flotilla_runtime::unary_service! {
    impl TaintManager for TaintManagerService {
        explain(v1::ExplainRequest) -> v1::ExplainResponse = Self::explain_request;
    }
}

impl TaintManagerService {
    /// `TaintManager.Explain`: the request decoded and validated, then [`explain`].
    async fn explain_request(
        &self,
        request: Request<v1::ExplainRequest>,
    ) -> Result<v1::ExplainResponse, Error> {
        explain(decode_request(request.into_inner(), &self.limits)?)
    }
}
