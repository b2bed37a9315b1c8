//! `flotilla.v1.WorkExecutor`: Work status for users (`GetWorkStatus`), status reports from
//! Pull agents (`ReportWorkStatus`), and the dry-run `Plan`, which calls the very functions
//! the binding controller uses (`plan::decide`, `plan::aggregate`).

use flotilla_core::types as domain;
use flotilla_core::validation::{FieldError, FieldPath};
use flotilla_proto::Resource;
use flotilla_proto::v1;
use flotilla_proto::v1::work_executor_server::WorkExecutor;
use flotilla_runtime::cas::{Exhausted, Races};
use flotilla_runtime::rpc::metadata_str;
use flotilla_runtime::status::{Failure, IntoStatus};
use flotilla_store::StoreError;
use flotilla_store::typed::{Stored, Typed, work_key};
use tonic::{Request, Status};

use crate::plan::{
    MoveSettings, aggregate, decide_with, end_healthy_tasks, with_aggregated_status,
};
use crate::render::{Overrides, cluster_is_pull, explain_overrides, is_deleting, work_cluster};

/// Metadata key naming the calling agent's cluster; when present it must match the Work's.
pub const CLUSTER_METADATA: &str = "x-flotilla-cluster";

/// Why an RPC failed; mapped to a status in one place.
#[derive(Debug, thiserror::Error)]
pub enum ApiError {
    /// A request field is missing or malformed (INVALID_ARGUMENT).
    #[error("{}: {}", .0.field, .0.message)]
    Invalid(FieldError),
    /// NOT_FOUND.
    #[error("{0}")]
    NotFound(String),
    /// PERMISSION_DENIED.
    #[error("{0}")]
    PermissionDenied(String),
    /// FAILED_PRECONDITION.
    #[error("{0}")]
    FailedPrecondition(String),
    /// ABORTED (stale uid or generation, or lost CAS races).
    #[error("{0}")]
    Aborted(String),
    /// The store failed.
    #[error(transparent)]
    Store(#[from] StoreError),
}

fn invalid(field: impl Into<String>, message: impl Into<String>) -> ApiError {
    ApiError::Invalid(FieldError::invalid(&FieldPath::new(&field.into()), message))
}

impl IntoStatus for ApiError {
    fn failure(&self) -> Failure<'_> {
        match self {
            ApiError::Invalid(e) => Failure::Invalid(std::slice::from_ref(e)),
            ApiError::NotFound(_) => Failure::NotFound,
            ApiError::PermissionDenied(_) => Failure::PermissionDenied,
            ApiError::FailedPrecondition(_) => Failure::FailedPrecondition,
            ApiError::Aborted(_) => Failure::Aborted,
            ApiError::Store(e) => Failure::Store(e),
        }
    }
}

impl From<Exhausted> for ApiError {
    fn from(e: Exhausted) -> Self {
        ApiError::Aborted(format!("{e}; report again"))
    }
}

impl From<ApiError> for Status {
    fn from(e: ApiError) -> Self {
        e.into_status()
    }
}

/// The WorkExecutor gRPC service.
#[derive(Clone)]
pub struct WorkExecutorApi {
    typed: Typed,
    /// `--replica-move-timeout`, so the dry run holds shrinks as the controller does (WE-10).
    move_timeout: std::time::Duration,
    /// The dry run's `now`.
    clock: flotilla_runtime::Clock,
}

impl std::fmt::Debug for WorkExecutorApi {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WorkExecutorApi").finish_non_exhaustive()
    }
}

impl WorkExecutorApi {
    /// A service reading and writing through `typed` (not fenced: any replica may serve
    /// agents; every write is a CAS on the Work).
    pub fn new(
        typed: Typed,
        move_timeout: std::time::Duration,
        clock: flotilla_runtime::Clock,
    ) -> Self {
        Self {
            typed,
            move_timeout,
            clock,
        }
    }
}

/// Validates a WorkKey and returns its store key. The namespace may be empty: the Works of
/// a cluster-scoped object's binding (a ClusterResourceBinding) have none. (Refusing it
/// left a Pull cluster's agent unable to report, or finish deleting, a CRD or a ClusterRole;
/// found by the real-member scenario.)
fn key_of(work: Option<&v1::WorkKey>) -> Result<(String, v1::WorkKey), ApiError> {
    let w = work.ok_or_else(|| invalid("work", "required"))?;
    for (field, value, required) in [
        ("work.cluster", &w.cluster, true),
        ("work.namespace", &w.namespace, false),
        ("work.name", &w.name, true),
    ] {
        if required && value.is_empty() {
            return Err(invalid(field, "required"));
        }
        if value.contains('/') || value.chars().any(char::is_control) {
            return Err(invalid(field, "must not contain '/' or control characters"));
        }
    }
    Ok((work_key(&w.cluster, &w.namespace, &w.name), w.clone()))
}

fn check_status(status: &v1::WorkStatus) -> Result<(), ApiError> {
    if v1::ResourceHealth::try_from(status.health).is_err() {
        return Err(invalid(
            "status.health",
            format!("unknown ResourceHealth {}", status.health),
        ));
    }
    for (i, c) in status.conditions.iter().enumerate() {
        if c.r#type.is_empty() {
            return Err(invalid(format!("status.conditions[{i}].type"), "required"));
        }
        match v1::ConditionStatus::try_from(c.status) {
            Ok(v1::ConditionStatus::Unspecified) | Err(_) => {
                return Err(invalid(
                    format!("status.conditions[{i}].status"),
                    "must be TRUE, FALSE or UNKNOWN",
                ));
            }
            Ok(_) => {}
        }
    }
    // WE-7.1: a report names the Work generation its reading is about; the server never
    // stamps one on it (a reading from before an apply would pass for the new generation)
    if status.observed_generation < 1 {
        return Err(invalid(
            "status.observedGeneration",
            "required: the Work generation this status describes (at least 1)",
        ));
    }
    if status.ready_replicas < 0 {
        return Err(invalid("status.readyReplicas", "must not be negative"));
    }
    Ok(())
}

// === impl WorkExecutorApi ===

impl WorkExecutorApi {
    /// `GetWorkStatus`: the stored Work's status, generation and resource version.
    async fn get_work_status(
        &self,
        request: Request<v1::GetWorkStatusRequest>,
    ) -> Result<v1::GetWorkStatusResponse, ApiError> {
        let req = request.into_inner();
        let (key, _) = key_of(req.work.as_ref())?;
        let work: v1::Work = self
            .typed
            .get(&key)
            .await?
            .ok_or_else(|| ApiError::NotFound(format!("Work {key} not found")))?;
        Ok(v1::GetWorkStatusResponse {
            status: Some(work.status.clone().unwrap_or_default()),
            generation: work.generation(),
            resource_version: work.resource_version(),
        })
    }

    /// `ReportWorkStatus`: an agent's report on a Work of its cluster (named by
    /// [`CLUSTER_METADATA`], when sent).
    async fn report_work_status(
        &self,
        request: Request<v1::ReportWorkStatusRequest>,
    ) -> Result<v1::ReportWorkStatusResponse, ApiError> {
        let caller = metadata_str(&request, CLUSTER_METADATA);
        let extensions = request.extensions().clone();
        let req = request.into_inner();
        let (key, wk) = key_of(req.work.as_ref())?;
        // an agent reports only its own cluster's Works (docs/design.md §9)
        flotilla_runtime::authz::confine(&extensions, &wk.cluster)
            .map_err(|denied| ApiError::PermissionDenied(denied.message().to_owned()))?;
        if let Some(caller) = caller
            && caller != wk.cluster
        {
            return Err(ApiError::PermissionDenied(format!(
                "cluster {caller:?} may not report the status of a Work of cluster {:?}",
                wk.cluster
            )));
        }
        if !req.manifest_deleted {
            let status = req
                .status
                .as_ref()
                .ok_or_else(|| invalid("status", "required unless manifestDeleted is set"))?;
            check_status(status)?;
        }
        let cluster: Option<v1::Cluster> = self
            .typed
            .get(&format!("{}{}", v1::Cluster::PREFIX, wk.cluster))
            .await?;
        let mut races = Races::new(&key);
        loop {
            let work: v1::Work = self
                .typed
                .get(&key)
                .await?
                .ok_or_else(|| ApiError::NotFound(format!("Work {key} not found")))?;
            if work_cluster(&work) != wk.cluster {
                return Err(ApiError::FailedPrecondition(format!(
                    "Work {key} belongs to cluster {:?}",
                    work_cluster(&work)
                )));
            }
            match cluster.as_ref() {
                None => {
                    return Err(ApiError::FailedPrecondition(format!(
                        "cluster {:?} does not exist",
                        wk.cluster
                    )));
                }
                Some(c) if !cluster_is_pull(c) => {
                    return Err(ApiError::FailedPrecondition(format!(
                        "cluster {:?} is a Push cluster: the work executor collects its status",
                        wk.cluster
                    )));
                }
                Some(_) => {}
            }
            let meta = work.metadata.clone().unwrap_or_default();
            if !req.work_uid.is_empty() && req.work_uid != meta.uid {
                return Err(ApiError::Aborted(format!(
                    "Work {key} has uid {}, not {} (it was re-created)",
                    meta.uid, req.work_uid
                )));
            }
            if req.manifest_deleted {
                if !is_deleting(work.metadata.as_ref()) {
                    return Err(ApiError::FailedPrecondition(format!(
                        "Work {key} is not being deleted"
                    )));
                }
                match self.typed.delete(&key, Some(work.resource_version())).await {
                    Ok(revision) => {
                        tracing::info!(work = %key, cluster = %wk.cluster, "Work removed: the agent deleted the manifest (WE-6.2)");
                        return Ok(v1::ReportWorkStatusResponse {
                            resource_version: revision,
                        });
                    }
                    Err(e) if e.is_conflict() => {
                        races.lost()?;
                        continue;
                    }
                    Err(e) => return Err(e.into()),
                }
            }
            let mut status = req.status.clone().unwrap_or_default();
            if status.observed_generation > meta.generation {
                return Err(invalid(
                    "status.observedGeneration",
                    format!(
                        "{} is newer than the Work's generation {}",
                        status.observed_generation, meta.generation
                    ),
                ));
            }
            let stored = work.status.as_ref().map_or(0, |s| s.observed_generation);
            if status.observed_generation < stored {
                return Err(ApiError::Aborted(format!(
                    "status of generation {} is older than the stored one ({stored})",
                    status.observed_generation
                )));
            }
            if status.health == v1::ResourceHealth::Unspecified as i32 {
                status.health = v1::ResourceHealth::Unknown as i32;
            }
            let mut new = work.clone();
            new.status = Some(status);
            match self.typed.update(&work, new).await {
                Ok(w) => {
                    return Ok(v1::ReportWorkStatusResponse {
                        resource_version: w.resource_version(),
                    });
                }
                Err(e) if e.is_conflict() => races.lost()?,
                Err(e) => return Err(e.into()),
            }
        }
    }

    /// `Plan`: the dry run of the binding controller's decision and aggregation.
    async fn plan(&self, request: Request<v1::PlanRequest>) -> Result<v1::PlanResponse, ApiError> {
        let req = request.into_inner();
        let binding = req.binding.ok_or_else(|| invalid("binding", "required"))?;
        let meta = binding.metadata.clone().unwrap_or_default();
        if meta.name.is_empty() {
            return Err(invalid("binding.metadata.name", "required"));
        }
        // (an empty namespace is a ClusterResourceBinding's)
        let wire_spec = binding
            .spec
            .clone()
            .ok_or_else(|| invalid("binding.spec", "required"))?;
        let resource = wire_spec
            .resource
            .clone()
            .ok_or_else(|| invalid("binding.spec.resource", "required"))?;
        if resource.kind.is_empty() {
            return Err(invalid("binding.spec.resource.kind", "required"));
        }
        if resource.name.is_empty() {
            return Err(invalid("binding.spec.resource.name", "required"));
        }
        let spec: domain::ResourceBindingSpec =
            wire_spec
                .try_into()
                .map_err(|e: flotilla_proto::ConvertError| {
                    let e = e.within("binding.spec");
                    invalid(e.field, e.message)
                })?;
        for (i, t) in spec.clusters.iter().enumerate() {
            if t.name.is_empty() {
                return Err(invalid(
                    format!("binding.spec.clusters[{i}].name"),
                    "required",
                ));
            }
            if t.replicas < 0 {
                return Err(invalid(
                    format!("binding.spec.clusters[{i}].replicas"),
                    "must not be negative",
                ));
            }
        }
        for (i, t) in spec.graceful_eviction_tasks.iter().enumerate() {
            if t.from_cluster.is_empty() {
                return Err(invalid(
                    format!("binding.spec.gracefulEvictionTasks[{i}].fromCluster"),
                    "required",
                ));
            }
        }
        if let Some(w) = req.workload.as_ref()
            && let Err(e) =
                serde_json::from_str::<serde_json::Map<String, serde_json::Value>>(&w.manifest)
        {
            return Err(invalid(
                "workload.manifest",
                format!("not a JSON object: {e}"),
            ));
        }
        for (i, w) in req.works.iter().enumerate() {
            if work_cluster(w).is_empty() {
                return Err(invalid(format!("works[{i}].spec.cluster"), "required"));
            }
            if w.name().is_empty() {
                return Err(invalid(format!("works[{i}].metadata.name"), "required"));
            }
            // (an empty namespace is the Work of a cluster-scoped object's binding)
        }
        let overrides = plan_overrides(
            req.override_policies,
            req.cluster_override_policies,
            req.clusters,
        )?;
        let now = self.clock.now();
        let d = decide_with(
            Some(&binding),
            &spec,
            req.workload.as_ref(),
            &req.works,
            &overrides,
            &MoveSettings {
                now,
                timeout: self.move_timeout,
            },
        );
        let explained = match req.workload.as_ref() {
            Some(w) if !overrides.policies.is_empty() => {
                let wire = binding.spec.clone().unwrap_or_default();
                spec.clusters
                    .iter()
                    .map(|t| explain_overrides(w, &wire, t, &overrides))
                    .collect()
            }
            _ => Vec::new(),
        };
        let previous = binding
            .status
            .as_ref()
            .map(|s| s.conditions.clone())
            .unwrap_or_default();
        let (aggregated_status, fully_applied) = aggregate(&spec, &req.works, &previous, now);
        let mut reasons = d.reasons.clone();
        reasons.push(format!(
            "WE-8: FullyApplied={} over {} Work(s)",
            if fully_applied.status == v1::ConditionStatus::True as i32 {
                "True"
            } else {
                "False"
            },
            aggregated_status.len()
        ));
        // WE-8.6: the tasks this status write would end (the stamp as the controller would set
        // it when the Works are current)
        if let Some(written) = with_aggregated_status(
            &binding,
            aggregated_status.clone(),
            fully_applied.clone(),
            true,
        ) {
            let (_, ended) = end_healthy_tasks(&binding, written, &req.works, now);
            if !ended.is_empty() {
                reasons.push(format!(
                    "WE-8.6: every new target reports Healthy: this status write also ends the \
                     eviction task(s) for {}",
                    ended.join(", ")
                ));
            }
        }
        Ok(v1::PlanResponse {
            kept_clusters: d.kept.iter().cloned().collect(),
            orphans: d
                .orphans
                .iter()
                .map(|w| v1::WorkKey {
                    cluster: work_cluster(w).to_owned(),
                    namespace: w.namespace().to_owned(),
                    name: w.name().to_owned(),
                })
                .collect(),
            works: d.desired(&req.works).cloned().collect(),
            blocked: d.blocked(),
            aggregated_status,
            fully_applied: Some(fully_applied),
            reasons,
            held_clusters: d.held.clone(),
            waiting_for_clusters: d.waiting_for.clone(),
            overrides: explained,
        })
    }
}

/// The Plan request's override policies and clusters, converted (OV-1).
fn plan_overrides(
    policies: Vec<v1::OverridePolicy>,
    cluster_policies: Vec<v1::ClusterOverridePolicy>,
    clusters: Vec<v1::Cluster>,
) -> Result<Overrides, ApiError> {
    let bad = |field: &'static str, i: usize| {
        move |e: flotilla_proto::ConvertError| {
            let e = e.within(&format!("{field}[{i}]"));
            invalid(e.field, e.message)
        }
    };
    let mut out = Overrides::default();
    for (i, p) in cluster_policies.into_iter().enumerate() {
        out.policies
            .push(p.try_into().map_err(bad("clusterOverridePolicies", i))?);
    }
    for (i, p) in policies.into_iter().enumerate() {
        out.policies
            .push(p.try_into().map_err(bad("overridePolicies", i))?);
    }
    for (i, c) in clusters.into_iter().enumerate() {
        let c: domain::Cluster = c.try_into().map_err(bad("clusters", i))?;
        out.clusters.insert(c.meta.name.clone(), c);
    }
    Ok(out)
}

flotilla_runtime::unary_service! {
    impl WorkExecutor for WorkExecutorApi {
        get_work_status(v1::GetWorkStatusRequest) -> v1::GetWorkStatusResponse =
            Self::get_work_status;
        report_work_status(v1::ReportWorkStatusRequest) -> v1::ReportWorkStatusResponse =
            Self::report_work_status;
        plan(v1::PlanRequest) -> v1::PlanResponse = Self::plan;
    }
}
