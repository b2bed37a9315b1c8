//! Graceful eviction tasks (§1.7), bindings (A7), workload templates and List paging.

use crate::resource::Scope;
use std::collections::HashMap;

use super::meta::{validate_labels, validate_object_meta};
use super::names::{
    EVICTION_MESSAGE_MAX_LEN, check_api_version, check_cluster_name, check_dns1123_label,
    check_dns1123_subdomain, check_eviction_reason, check_kind, check_path_segment_name,
    check_text,
};
use super::placement::validate_placement_at;
use super::policy::validate_failover_at;
use super::{
    FieldError, FieldErrors, FieldPath, Limits, check_cluster_names, check_required_text,
    check_seconds, counted, first_seen, validate_some,
};
use crate::types::{
    GracefulEvictionTask, ObjectMeta, ObjectReference, ReplicaRequirements, ResourceBinding,
    ResourceBindingSpec, TargetCluster,
};

/// Maximum length of a task's `producer` (Flotilla choice; Karmada's are < 64).
const PRODUCER_MAX_LEN: usize = 253;
/// Maximum length of a task's W3C `traceContext` (Flotilla choice; a traceparent is 55).
const TRACE_CONTEXT_MAX_LEN: usize = 1024;

/// Validate a GracefulEvictionTask at `path` (e.g. `spec.gracefulEvictionTasks[0]`; pass an
/// empty path for paths relative to the task), per docs/semantics.md:
/// - `fromCluster` is a valid cluster name (Required when empty);
/// - `reason` is 1–32 characters matching `^[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?$`;
/// - `message` is at most 1024 characters, without control characters except tab/newline;
/// - `producer` is required, without control characters;
/// - `gracePeriodSeconds` is in `1..=max_duration_seconds` and cannot coexist with
///   `suppressDeletion` (Forbidden at `gracePeriodSeconds`);
/// - `replicas` is in `0..=max_replicas`; `clustersBeforeFailover` are unique cluster
///   names; `preservedLabelState` is a valid label map; `traceContext` has no control
///   characters.
///
/// `purgeMode` is an enumeration and always valid once decoded.
pub fn validate_eviction_task(
    task: &GracefulEvictionTask,
    path: &FieldPath,
    limits: &Limits,
) -> FieldErrors {
    let mut errs = FieldErrors::new();
    if let Err(e) = check_cluster_name(&task.from_cluster) {
        errs.push(e.at(&path.child("fromCluster")));
    }
    if let Err(e) = check_eviction_reason(&task.reason) {
        errs.push(e.at(&path.child("reason")));
    }
    if let Err(e) = check_text(&task.message, EVICTION_MESSAGE_MAX_LEN, true) {
        errs.push(e.at(&path.child("message")));
    }
    check_required_text(
        &mut errs,
        &path.child("producer"),
        &task.producer,
        PRODUCER_MAX_LEN,
        "the producer of the task is required",
    );
    let grace = path.child("gracePeriodSeconds");
    if let Some(seconds) = task.grace_period_seconds {
        check_seconds(
            &mut errs,
            &grace,
            seconds,
            true,
            limits.max_duration_seconds,
        );
        if task.suppress_deletion.is_some() {
            errs.push(FieldError::forbidden(
                &grace,
                "gracePeriodSeconds and suppressDeletion cannot coexist",
            ));
        }
    }
    if let Some(replicas) = task.replicas {
        check_replicas(
            &mut errs,
            &path.child("replicas"),
            i64::from(replicas),
            limits,
        );
    }
    check_cluster_names(
        &mut errs,
        &path.child("clustersBeforeFailover"),
        &task.clusters_before_failover,
        limits,
    );
    errs.extend(validate_labels(
        &task.preserved_label_state,
        &path.child("preservedLabelState"),
        limits,
    ));
    if let Err(e) = check_text(&task.trace_context, TRACE_CONTEXT_MAX_LEN, false) {
        errs.push(e.at(&path.child("traceContext")));
    }
    errs
}

/// `0..=max_replicas`, OutOfRange otherwise.
fn check_replicas(errs: &mut FieldErrors, path: &FieldPath, replicas: i64, limits: &Limits) {
    if replicas < 0 {
        errs.push(FieldError::out_of_range(
            path,
            format!("must be greater than or equal to 0 (got {replicas})"),
        ));
    } else if replicas > i64::from(limits.max_replicas) {
        errs.push(FieldError::out_of_range(
            path,
            format!("must be at most {} (got {replicas})", limits.max_replicas),
        ));
    }
}

/// Requests name resources Kubernetes' scheduler counts (ES-1.4) and are non-negative, at
/// `path.resourceRequest[<name>]` (as Kubernetes names a quantity of a resource list).
fn check_requirements(errs: &mut FieldErrors, req: &ReplicaRequirements, path: &FieldPath) {
    let request = path.child("resourceRequest");
    for (name, &value) in &req.resource_request {
        if !crate::capacity::is_counted(name) {
            errs.push(FieldError::invalid(
                &request.key(name),
                "is not a resource a replica requests: cpu, memory, ephemeral-storage, or an \
                 extended resource such as nvidia.com/gpu",
            ));
        } else if value < 0 {
            errs.push(FieldError::out_of_range(
                &request.key(name),
                format!("must be greater than or equal to 0 (got {value})"),
            ));
        }
    }
}

fn check_object_reference(errs: &mut FieldErrors, r: &ObjectReference, path: &FieldPath) {
    if let Err(e) = check_api_version(&r.api_version) {
        errs.push(e.at(&path.child("apiVersion")));
    }
    if let Err(e) = check_kind(&r.kind) {
        errs.push(e.at(&path.child("kind")));
    }
    if !r.namespace.is_empty()
        && let Err(e) = check_dns1123_label(&r.namespace)
    {
        errs.push(e.at(&path.child("namespace")));
    }
    if let Err(e) = check_path_segment_name(&r.name) {
        errs.push(e.at(&path.child("name")));
    }
}

/// The names of `targets` (at `path`, a list of target clusters): each a valid cluster name
/// and listed once (the dry-run RPCs check this much of a binding they are given).
pub fn validate_target_names(targets: &[TargetCluster], path: &FieldPath) -> FieldErrors {
    let mut errs = FieldErrors::new();
    let mut seen = std::collections::HashSet::new();
    for (i, target) in targets.iter().enumerate() {
        let p = path.index(i).child("name");
        if let Err(e) = check_cluster_name(&target.name) {
            errs.push(e.at(&p));
        } else if !seen.insert(target.name.as_str()) {
            errs.push(FieldError::duplicate(&p, "cluster listed twice"));
        }
    }
    errs
}

/// Validate a binding spec rooted at `spec`, including the invariants every writer must keep
/// (A7, Karmada #3283):
/// - `resource` has a well-formed `apiVersion`, `kind`, `name` and optional `namespace`;
/// - `replicas` and every `clusters[i].replicas` are in `0..=max_replicas`; requests are
///   non-negative; `placement` and `failover` are valid; `schedulerName` is a DNS-1123
///   subdomain when set;
/// - `clusters[i].name` are valid, unique cluster names (Duplicate at `clusters[i].name`),
///   at most `max_placement_clusters`;
/// - at most `max_eviction_tasks` tasks, each valid ([`validate_eviction_task`]), at most one
///   per cluster (Duplicate at `gracefulEvictionTasks[i].fromCluster`), and **no cluster is
///   both a target and a task** (Forbidden at `gracefulEvictionTasks[i].fromCluster`).
pub fn validate_binding_spec(spec: &ResourceBindingSpec, limits: &Limits) -> FieldErrors {
    let mut errs = FieldErrors::new();
    let root = FieldPath::new("spec");
    check_object_reference(&mut errs, &spec.resource, &root.child("resource"));
    check_replicas(
        &mut errs,
        &root.child("replicas"),
        i64::from(spec.replicas),
        limits,
    );
    if let Some(req) = &spec.replica_requirements {
        check_requirements(&mut errs, req, &root.child("replicaRequirements"));
    }
    errs.extend(validate_some(
        spec.placement.as_ref(),
        &root.child("placement"),
        limits,
        validate_placement_at,
    ));
    errs.extend(validate_some(
        spec.failover.as_ref(),
        &root.child("failover"),
        limits,
        validate_failover_at,
    ));
    if !spec.scheduler_name.is_empty()
        && let Err(e) = check_dns1123_subdomain(&spec.scheduler_name)
    {
        errs.push(e.at(&root.child("schedulerName")));
    }

    let targets = check_targets(&mut errs, &spec.clusters, &root.child("clusters"), limits);
    check_eviction_tasks(
        &mut errs,
        &spec.graceful_eviction_tasks,
        &targets,
        &root.child("gracefulEvictionTasks"),
        limits,
    );
    errs
}

/// The scheduling targets at `path` (`spec.clusters`): at most `max_placement_clusters`, each a
/// cluster name with valid replicas, none repeated. Returns each name's first index.
fn check_targets<'a>(
    errs: &mut FieldErrors,
    clusters: &'a [TargetCluster],
    path: &FieldPath,
    limits: &Limits,
) -> HashMap<&'a str, usize> {
    let mut targets = HashMap::new();
    for (i, target) in counted(errs, path, clusters, limits.max_placement_clusters) {
        let p = path.index(i);
        let name = p.child("name");
        if let Err(e) = check_cluster_name(&target.name) {
            errs.push(e.at(&name));
        }
        check_replicas(
            errs,
            &p.child("replicas"),
            i64::from(target.replicas),
            limits,
        );
        check_not_repeated(errs, &mut targets, &target.name, i, &name, |first| {
            format!("is already spec.clusters[{first}]")
        });
    }
    targets
}

/// A `Duplicate` at `path` when `key` (entry `i` of its list) was seen before ([`first_seen`]):
/// the quoted key, then `repeat` of the index it was first seen at.
fn check_not_repeated<'a>(
    errs: &mut FieldErrors,
    seen: &mut HashMap<&'a str, usize>,
    key: &'a str,
    i: usize,
    path: &FieldPath,
    repeat: impl FnOnce(usize) -> String,
) {
    if let Some(first) = first_seen(seen, key, i) {
        let message = format!("{} {}", super::quote(key), repeat(first));
        errs.push(FieldError::duplicate(path, message));
    }
}

/// The graceful eviction tasks at `path` (`spec.gracefulEvictionTasks`): at most
/// `max_eviction_tasks`, each valid, at most one per cluster, and none for a cluster that is
/// also one of the `targets` (A7).
fn check_eviction_tasks(
    errs: &mut FieldErrors,
    tasks: &[GracefulEvictionTask],
    targets: &HashMap<&str, usize>,
    path: &FieldPath,
    limits: &Limits,
) {
    let mut evicted = HashMap::new();
    for (i, task) in counted(errs, path, tasks, limits.max_eviction_tasks) {
        let p = path.index(i);
        errs.extend(validate_eviction_task(task, &p, limits));
        let from = p.child("fromCluster");
        check_not_repeated(errs, &mut evicted, &task.from_cluster, i, &from, |first| {
            format!("already has an eviction task (gracefulEvictionTasks[{first}])")
        });
        if let Some(j) = targets.get(task.from_cluster.as_str()) {
            errs.push(FieldError::forbidden(
                &from,
                format!(
                    "{} is also a scheduling target (spec.clusters[{j}]); a cluster is never both \
                     a target and an eviction task",
                    super::quote(&task.from_cluster)
                ),
            ));
        }
    }
}

/// Validate a binding update: the new spec passes [`validate_binding_spec`], and the
/// template identity is immutable (Forbidden): `metadata.name`, `metadata.namespace`,
/// `spec.resource.kind`, `spec.resource.namespace`, `spec.resource.name`. (The template's
/// `apiVersion` and `uid` may change: a template can be re-created or move API version.)
/// `status.unschedulableReplicas` (SC-4.6) is in `0..=spec.replicas`.
pub fn validate_binding_update(
    old: &ResourceBinding,
    new: &ResourceBinding,
    limits: &Limits,
) -> FieldErrors {
    let mut errs = validate_binding_spec(&new.spec, limits);
    let meta = FieldPath::new("metadata");
    let resource = FieldPath::new("spec").child("resource");
    let immutable = [
        (&old.meta.name, &new.meta.name, meta.child("name")),
        (
            &old.meta.namespace,
            &new.meta.namespace,
            meta.child("namespace"),
        ),
        (
            &old.spec.resource.kind,
            &new.spec.resource.kind,
            resource.child("kind"),
        ),
        (
            &old.spec.resource.namespace,
            &new.spec.resource.namespace,
            resource.child("namespace"),
        ),
        (
            &old.spec.resource.name,
            &new.spec.resource.name,
            resource.child("name"),
        ),
    ];
    for (before, after, path) in immutable {
        if before != after {
            errs.push(FieldError::forbidden(&path, "field is immutable"));
        }
    }
    // SC-4.6: what the scheduler could not place is a part of spec.replicas
    let short = new.status.unschedulable_replicas;
    if !(0..=new.spec.replicas.max(0)).contains(&short) {
        errs.push(FieldError::invalid(
            &FieldPath::new("status").child("unschedulableReplicas"),
            format!(
                "must be between 0 and spec.replicas ({}) (got {short})",
                new.spec.replicas
            ),
        ));
    }
    errs
}

/// What [`validate_workload`] needs to know about a resource template (e.g. a Deployment
/// manifest): a borrowed view, so the api service can build it from whatever it decoded.
#[derive(Clone, Copy, Debug)]
pub struct WorkloadTemplate<'a> {
    /// The template's metadata (`metadata.name`, `metadata.namespace`, labels, annotations).
    pub meta: &'a ObjectMeta,
    /// `apiVersion`, e.g. `apps/v1`.
    pub api_version: &'a str,
    /// `kind`, e.g. `Deployment`.
    pub kind: &'a str,
    /// `spec.replicas`, if the kind has replicas (i64 so that an out-of-range wire value is
    /// reported rather than truncated).
    pub replicas: Option<i64>,
    /// Per-replica requests, if known.
    pub replica_requirements: Option<&'a ReplicaRequirements>,
    /// Size of the encoded manifest in bytes.
    pub manifest_bytes: usize,
}

/// Validate a resource template:
/// - `apiVersion` and `kind` are present and well-formed;
/// - `metadata.namespace` is a DNS-1123 label and `metadata.name` a DNS-1123 subdomain
///   (both required); labels and annotations (≤ 256 KiB) are valid;
/// - `spec.replicas` is in `0..=max_replicas` (which fits int32);
/// - requests are non-negative (`spec.replicaRequirements.resourceRequest[<resource>]`, ES-1.4 names only);
/// - the manifest is at most `max_manifest_bytes` (TooLong at `manifest`).
pub fn validate_workload(workload: &WorkloadTemplate<'_>, limits: &Limits) -> FieldErrors {
    let mut errs = FieldErrors::new();
    if let Err(e) = check_api_version(workload.api_version) {
        errs.push(e.at(&FieldPath::new("apiVersion")));
    }
    if let Err(e) = check_kind(workload.kind) {
        errs.push(e.at(&FieldPath::new("kind")));
    }
    // CR-2: a cluster-scoped kind (Namespace, ClusterRole, ...) has no namespace.
    let namespaced =
        crate::resource::scope_of(workload.api_version, workload.kind) == Scope::Namespaced;
    errs.extend(validate_object_meta(
        workload.meta,
        check_dns1123_subdomain,
        namespaced,
        limits,
    ));
    let spec = FieldPath::new("spec");
    if let Some(replicas) = workload.replicas {
        check_replicas(&mut errs, &spec.child("replicas"), replicas, limits);
    }
    if let Some(req) = workload.replica_requirements {
        check_requirements(&mut errs, req, &spec.child("replicaRequirements"));
    }
    if workload.manifest_bytes > limits.max_manifest_bytes {
        errs.push(FieldError::new(
            &FieldPath::new("manifest"),
            super::FieldErrorKind::TooLong,
            format!(
                "manifest may not be more than {} bytes (got {})",
                limits.max_manifest_bytes, workload.manifest_bytes
            ),
        ));
    }
    errs
}

/// Validate a List call's `page_size` (0 = server default): OutOfRange at `pageSize` when
/// negative or above `max_page_size` (500 by default).
pub fn validate_page_size(page_size: i64, limits: &Limits) -> FieldErrors {
    let path = FieldPath::new("pageSize");
    if page_size < 0 || page_size > i64::from(limits.max_page_size) {
        vec![FieldError::out_of_range(
            &path,
            format!(
                "must be between 0 and {} (got {page_size})",
                limits.max_page_size
            ),
        )]
    } else {
        Vec::new()
    }
}
