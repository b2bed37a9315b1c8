//! Rendering Works from a binding and its template (WE-4, WE-5), and the small status
//! helpers shared by the controllers and the gRPC handlers (conditions, observations).
//!
//! Everything here is pure: no I/O, no clock (callers pass `now`).

use std::collections::{BTreeMap, HashMap};

use flotilla_core::Time;
use flotilla_core::overrides::{Applied, OverridePolicy, PolicyError, Template, apply_policies};
use flotilla_core::types::Cluster;
use flotilla_core::types::{ResourceHealth, TargetCluster};
use flotilla_core::work::{WorkObservation, work_name};
use flotilla_core::{interpret, resource};
use flotilla_proto::Resource;
use flotilla_proto::convert::time_to_timestamp;
use flotilla_proto::v1;
use flotilla_store::typed::{Stored, work_key};

/// The Work finalizer of the execution controller (docs/rules.md, WE-6): a deleting Work keeps
/// existing until the member confirmed the manifest is gone (WE-6.2/6.3).
pub const EXECUTION_FINALIZER: &str = "karmada.io/execution-controller";
/// The binding finalizer of the binding controller (§1.3), removed once every Work of a
/// deleting binding is gone (WE-1).
pub const BINDING_FINALIZER: &str = "karmada.io/binding-controller";
/// Label carrying the binding's permanent id (§1.10); Works are found by it.
pub const LABEL_PERMANENT_ID: &str = "resourcebinding.karmada.io/permanent-id";
/// Label carrying the binding's namespace (v1.5's way of finding Works).
pub const LABEL_BINDING_NAMESPACE: &str = "resourcebinding.karmada.io/namespace";
/// Label carrying the binding's name (v1.5's way of finding Works).
pub const LABEL_BINDING_NAME: &str = "resourcebinding.karmada.io/name";
/// The Work condition written after an apply (WE-6.5).
pub const CONDITION_APPLIED: &str = "Applied";
/// `Applied` reason on success (Karmada's `AppliedSuccessful`).
pub const REASON_APPLIED_SUCCESSFUL: &str = "AppliedSuccessful";
/// `Applied` reason on failure (Karmada's `AppliedFailed`).
pub const REASON_APPLIED_FAILED: &str = "AppliedFailed";
/// `Applied` reason when status collection no longer finds the manifest on the member: the
/// execution controller applies it again.
pub const REASON_MANIFEST_MISSING: &str = "ManifestMissing";

/// The annotation recording the OverridePolicies applied to a Work (Karmada's): a JSON list
/// of `{policyName, overriders}` in the order applied.
pub const ANNOTATION_APPLIED_OVERRIDES: &str = "policy.karmada.io/applied-overrides";
/// The same for ClusterOverridePolicies.
pub const ANNOTATION_APPLIED_CLUSTER_OVERRIDES: &str =
    "policy.karmada.io/applied-cluster-overrides";

/// Why a Work could not be rendered.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RenderError {
    /// The template's manifest is not a JSON object.
    #[error("the template manifest is not a JSON object: {0}")]
    Manifest(String),
    /// An override policy's rule cannot apply to this cluster's manifest (OV-2): the Work
    /// stays as it was.
    #[error(transparent)]
    Override(#[from] PolicyError),
}

/// What the Works of a binding are adapted with (OV-1..OV-3): the override policies in
/// scope (every ClusterOverridePolicy, the OverridePolicies of the template's namespace) and
/// the clusters their `targetCluster` affinities are matched against. Empty: no overrides.
#[derive(Clone, Debug, Default)]
pub struct Overrides {
    /// The policies (a ClusterOverridePolicy has an empty namespace).
    pub policies: Vec<OverridePolicy>,
    /// Clusters by name; one missing from here is matched by its name alone.
    pub clusters: HashMap<String, Cluster>,
}

/// What override policies are matched against: the template's identity and labels (OV-1).
pub fn template_of(workload: &v1::Workload) -> Template<'_> {
    static NO_LABELS: BTreeMap<String, String> = BTreeMap::new();
    Template {
        api_version: &workload.api_version,
        kind: &workload.kind,
        namespace: workload.namespace(),
        name: workload.name(),
        labels: workload.metadata.as_ref().map_or(&NO_LABELS, |m| &m.labels),
    }
}

impl Overrides {
    /// [`apply_policies`] of these policies to `manifest` for the cluster called `cluster`
    /// (matched by its name alone when it is not among `clusters`).
    fn apply(
        &self,
        manifest: &mut serde_json::Value,
        template: &Template<'_>,
        cluster: &str,
    ) -> Result<Applied, PolicyError> {
        let named;
        let target = match self.clusters.get(cluster) {
            Some(c) => c,
            None => {
                named = Cluster::named(cluster);
                &named
            }
        };
        let policies: Vec<&OverridePolicy> = self.policies.iter().collect();
        apply_policies(manifest, template, target, &policies)
    }
}

/// OV-1..OV-3: `manifest` (JSON text) adapted for `cluster` by the policies of `overrides`,
/// with the annotations recording what applied. Without policies the text is passed through.
pub fn apply_overrides(
    value: &mut serde_json::Value,
    workload: &v1::Workload,
    cluster: &str,
    overrides: &Overrides,
) -> Result<BTreeMap<String, String>, RenderError> {
    if overrides.policies.is_empty() {
        return Ok(BTreeMap::new());
    }
    let template = template_of(workload);
    let applied = overrides.apply(value, &template, cluster)?;
    Ok(applied_annotations(&applied))
}

/// The template's manifest as JSON (parsed once per render: every step below edits the
/// value, and it is serialised once at the end).
fn parse_manifest(manifest: &str) -> Result<serde_json::Value, RenderError> {
    serde_json::from_str(manifest).map_err(|e| RenderError::Manifest(e.to_string()))
}

/// For `explain binding` (OV-2..OV-4): what the policies of `overrides` do to `target`'s
/// Work: the policies applied, the differences from the template with its replicas revised,
/// or why they cannot apply.
pub fn explain_overrides(
    workload: &v1::Workload,
    spec: &v1::ResourceBindingSpec,
    target: &TargetCluster,
    overrides: &Overrides,
) -> v1::ClusterOverrides {
    let mut out = v1::ClusterOverrides {
        cluster: target.name.clone(),
        ..Default::default()
    };
    let resource = spec.resource.clone().unwrap_or_default();
    let revision = Revision {
        resource: &resource,
        target,
        binding: Some(spec),
    };
    let base = match revise_replicas(&workload.manifest, &revision) {
        Ok((m, _)) => m,
        Err(e) => {
            out.error = e.to_string();
            return out;
        }
    };
    let Ok(before) = serde_json::from_str::<serde_json::Value>(&base) else {
        return out;
    };
    let mut after = before.clone();
    let template = template_of(workload);
    match overrides.apply(&mut after, &template, &target.name) {
        Ok(applied) => {
            let ns = workload.namespace();
            out.applied = applied
                .cluster
                .iter()
                .map(|a| format!("ClusterOverridePolicy {}", a.policy_name))
                .chain(
                    applied
                        .namespaced
                        .iter()
                        .map(|a| format!("OverridePolicy {ns}/{}", a.policy_name)),
                )
                .collect();
            out.applied.dedup();
            out.changes = flotilla_core::overrides::diff(&before, &after);
        }
        Err(e) => out.error = e.to_string(),
    }
    out
}

/// The applied-overrides annotations of `applied` (none for what did not apply).
pub fn applied_annotations(applied: &Applied) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    for (key, list) in [
        (ANNOTATION_APPLIED_CLUSTER_OVERRIDES, &applied.cluster),
        (ANNOTATION_APPLIED_OVERRIDES, &applied.namespaced),
    ] {
        if !list.is_empty()
            && let Ok(json) = serde_json::to_string(list)
        {
            out.insert(key.to_owned(), json);
        }
    }
    out
}

/// `bindings/<ns>/<name>`.
pub fn binding_key(namespace: &str, name: &str) -> String {
    format!("{}{namespace}/{name}", v1::ResourceBinding::PREFIX)
}

/// `(namespace, name)` of a binding key.
pub fn parse_binding_key(key: &str) -> Option<(&str, &str)> {
    key.strip_prefix(v1::ResourceBinding::PREFIX)?
        .split_once('/')
        // an empty namespace: a ClusterResourceBinding
        .filter(|(_, n)| !n.is_empty() && !n.contains('/'))
}

/// The `<ns>/<name>` index value of the binding a Work belongs to.
pub fn work_binding_ref(work: &v1::Work) -> Option<String> {
    let b = work.spec.as_ref()?.binding.as_ref()?;
    // `/<name>` for a ClusterResourceBinding's Work
    (!b.name.is_empty()).then(|| format!("{}/{}", b.namespace, b.name))
}

/// The Work's target cluster (`""` without a spec).
pub fn work_cluster(work: &v1::Work) -> &str {
    work.spec.as_ref().map_or("", |s| s.cluster.as_str())
}

/// The object the Work's manifest is (the default reference without a spec).
pub fn work_resource(work: &v1::Work) -> v1::ObjectReference {
    work.spec
        .as_ref()
        .and_then(|s| s.resource.clone())
        .unwrap_or_default()
}

/// Whether an object's deletion was requested.
pub fn is_deleting(meta: Option<&v1::ObjectMeta>) -> bool {
    meta.is_some_and(|m| m.deletion_timestamp.is_some())
}

/// The Work key a binding's template gets on `cluster` (WE-5 name, binding namespace).
pub fn expected_work_key(binding: &v1::ResourceBinding, cluster: &str) -> String {
    let ns = binding.namespace();
    let resource = binding
        .spec
        .as_ref()
        .and_then(|s| s.resource.clone())
        .unwrap_or_default();
    work_key(
        cluster,
        ns,
        &work_name(
            &resource.namespace,
            &resource.name,
            &resource::qualified_kind(resource::group(&resource.api_version), &resource.kind),
        ),
    )
}

/// What a Work's manifest is revised with (WE-4.1, IN-1, WE-4.2).
#[derive(Clone, Copy, Debug)]
pub struct Revision<'a> {
    /// The template (`apiVersion` and kind pick the field, IN-1).
    pub resource: &'a v1::ObjectReference,
    /// The cluster and its replicas.
    pub target: &'a TargetCluster,
    /// The binding's spec: its targets divide a Job's completions when it divides its
    /// replicas ([`divided_targets`]).
    pub binding: Option<&'a v1::ResourceBindingSpec>,
}

/// The binding's targets with their replicas when it divides them (Divided and replicas > 0,
/// Karmada's `needReviseJobCompletions`): what a Job's completions are divided by (WE-4.2).
fn divided_targets(spec: &v1::ResourceBindingSpec) -> Option<Vec<(&str, i32)>> {
    let divided = spec.replicas > 0
        && spec
            .placement
            .as_ref()
            .and_then(|p| p.replica_scheduling.as_ref())
            .is_some_and(|r| {
                r.replica_scheduling_type == v1::ReplicaSchedulingType::Divided as i32
            });
    divided.then(|| {
        spec.clusters
            .iter()
            .map(|t| (t.name.as_str(), t.replicas))
            .collect()
    })
}

/// WE-4.1: the template manifest with `spec.replicas` (a Job: `spec.parallelism`, IN-1) set
/// to the target's replicas for kinds with replicas, keyed by apiVersion and kind (a custom
/// resource whose kind is `Deployment` is passed through), and a Job's `spec.completions`
/// divided over the targets (WE-4.2); other kinds are passed through (normalised JSON) with no
/// replicas.
pub fn revise_replicas(
    manifest: &str,
    revision: &Revision<'_>,
) -> Result<(String, Option<i32>), RenderError> {
    let mut value = parse_manifest(manifest)?;
    let replicas = revise_replicas_in(&mut value, revision)?;
    Ok((value.to_string(), replicas))
}

/// [`revise_replicas`] on a parsed manifest, in place; returns the Work's replicas.
fn revise_replicas_in(
    value: &mut serde_json::Value,
    revision: &Revision<'_>,
) -> Result<Option<i32>, RenderError> {
    let Some(object) = value.as_object_mut() else {
        return Err(RenderError::Manifest("not an object".into()));
    };
    let (resource, target) = (revision.resource, revision.target);
    let Some(field) = interpret::replica_field(&resource.api_version, &resource.kind) else {
        return Ok(None);
    };
    let spec = object
        .entry("spec")
        .or_insert_with(|| serde_json::Value::Object(serde_json::Map::new()));
    let Some(spec) = spec.as_object_mut() else {
        return Err(RenderError::Manifest("spec is not an object".into()));
    };
    spec.insert(field.into(), serde_json::Value::from(target.replicas));
    // WE-4.2: a divided Job runs its share of the completions on each cluster (the targets
    // are listed only for a Job)
    if field == "parallelism"
        && let Some(targets) = revision.binding.and_then(divided_targets)
        && let Some(completions) = spec
            .get("completions")
            .and_then(serde_json::Value::as_i64)
            .and_then(|c| i32::try_from(c).ok())
    {
        let share = interpret::divide_job_completions(completions, &targets)
            .into_iter()
            .find(|(name, _)| *name == target.name)
            .map_or(0, |(_, share)| share);
        spec.insert("completions".into(), serde_json::Value::from(share));
    }
    Ok(Some(target.replicas))
}

/// Labels the manifest with its binding's permanent id, as Karmada's binding controller does
/// (`resourcebinding.karmada.io/permanent-id`, or `clusterresourcebinding.…` for a
/// cluster-scoped object): the member's objects say whose they are, and status collection
/// lists them by it.
pub fn label_manifest(
    value: &mut serde_json::Value,
    cluster_scoped: bool,
    permanent_id: &str,
) -> Result<(), RenderError> {
    let meta = value
        .as_object_mut()
        .ok_or_else(|| RenderError::Manifest("not an object".into()))?
        .entry("metadata")
        .or_insert_with(|| serde_json::Value::Object(serde_json::Map::new()));
    let labels = meta
        .as_object_mut()
        .ok_or_else(|| RenderError::Manifest("metadata is not an object".into()))?
        .entry("labels")
        .or_insert_with(|| serde_json::Value::Object(serde_json::Map::new()));
    let labels = labels
        .as_object_mut()
        .ok_or_else(|| RenderError::Manifest("metadata.labels is not an object".into()))?;
    labels.insert(
        flotilla_member::managed_label(!cluster_scoped).to_owned(),
        permanent_id.into(),
    );
    Ok(())
}

/// WE-4.5: the newest task's preserved label state, when it goes into the manifest for
/// `target` ([`flotilla_core::preserve::injects`]).
fn preserved_labels<'a>(
    spec: &'a v1::ResourceBindingSpec,
    target: &str,
) -> Option<&'a BTreeMap<String, String>> {
    let task = spec.graceful_eviction_tasks.last()?;
    (!task.preserved_label_state.is_empty()
        && flotilla_core::preserve::injects(
            spec.clusters.len(),
            task.purge_mode == v1::PurgeMode::Directly as i32,
            &task.clusters_before_failover,
            target,
        ))
    .then_some(&task.preserved_label_state)
}

/// The manifest with `labels` merged into `metadata.labels` (Karmada's `MergeLabel`: a
/// preserved label wins over the template's).
fn merge_labels(
    value: &mut serde_json::Value,
    labels: &BTreeMap<String, String>,
) -> Result<(), RenderError> {
    let target = value
        .pointer_mut("/metadata/labels")
        .and_then(serde_json::Value::as_object_mut)
        .ok_or_else(|| RenderError::Manifest("metadata.labels is not an object".into()))?;
    for (k, v) in labels {
        target.insert(k.clone(), serde_json::Value::String(v.clone()));
    }
    Ok(())
}

/// The trace context a Work carries: during a failover (the binding has an eviction task)
/// that of the span rendering it — the work executor's reconcile, which continues the
/// failover's trace — so that its apply continues the trace in turn; empty otherwise (and
/// when spans are not exported).
fn trace_context(binding: &v1::ResourceBinding) -> String {
    let in_failover = binding
        .spec
        .as_ref()
        .is_some_and(|s| !s.graceful_eviction_tasks.is_empty());
    if in_failover {
        flotilla_runtime::trace::current()
    } else {
        String::new()
    }
}

/// WE-4: the Work for `target`: the template with replicas revised, the binding's identity
/// as labels (§1.10), the execution finalizer and the binding reference. Metadata that only
/// the store sets (uid, creation time, revision) is left empty. No override policies.
pub fn render_work(
    binding: &v1::ResourceBinding,
    workload: &v1::Workload,
    target: &TargetCluster,
) -> Result<v1::Work, RenderError> {
    render_work_with(binding, workload, target, &Overrides::default())
}

/// [`render_work`], then the override policies of `overrides` for the target cluster, last
/// as in Karmada (OV-1..OV-4), recorded in the Work's applied-overrides annotations (OV-4).
pub fn render_work_with(
    binding: &v1::ResourceBinding,
    workload: &v1::Workload,
    target: &TargetCluster,
    overrides: &Overrides,
) -> Result<v1::Work, RenderError> {
    // borrowed, not cloned: a binding's spec carries its whole placement and eviction tasks
    let default_meta = v1::ObjectMeta::default();
    let meta = binding.metadata.as_ref().unwrap_or(&default_meta);
    let resource = binding
        .spec
        .as_ref()
        .and_then(|s| s.resource.clone())
        .unwrap_or_default();
    let permanent_id = meta
        .labels
        .get(LABEL_PERMANENT_ID)
        .cloned()
        .unwrap_or_else(|| meta.uid.clone());
    // #31: one parse and one serialisation per render (each step used to parse the text
    // and write it out again)
    let mut value = parse_manifest(&workload.manifest)?;
    let replicas = revise_replicas_in(
        &mut value,
        &Revision {
            resource: &resource,
            target,
            binding: binding.spec.as_ref(),
        },
    )?;
    let annotations = apply_overrides(&mut value, workload, &target.name, overrides)?;
    label_manifest(&mut value, resource.namespace.is_empty(), &permanent_id)?;
    if let Some(state) = binding
        .spec
        .as_ref()
        .and_then(|s| preserved_labels(s, &target.name))
    {
        merge_labels(&mut value, state)?;
    }
    let manifest = value.to_string();
    let labels: BTreeMap<String, String> = binding_labels(meta)
        .into_iter()
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .collect();
    Ok(v1::Work {
        metadata: Some(v1::ObjectMeta {
            name: work_name(
                &resource.namespace,
                &resource.name,
                &resource::qualified_kind(resource::group(&resource.api_version), &resource.kind),
            ),
            namespace: meta.namespace.clone(),
            labels: labels.into_iter().collect(),
            annotations,
            finalizers: vec![EXECUTION_FINALIZER.to_owned()],
            ..Default::default()
        }),
        spec: Some(v1::WorkSpec {
            cluster: target.name.clone(),
            binding: Some(v1::BindingReference {
                namespace: meta.namespace.clone(),
                name: meta.name.clone(),
                uid: meta.uid.clone(),
                permanent_id,
            }),
            resource: Some(resource),
            manifest,
            replicas,
            // WE-6.5: the policy's suspension, through the binding, for this cluster
            suspend_dispatching: binding
                .spec
                .as_ref()
                .and_then(|s| s.suspension.clone())
                .is_some_and(|s| flotilla_core::types::Suspension::from(s).suspends(&target.name)),
            // PL-2, WE-6.1: the policy's choice, through the binding
            preserve_resources_on_deletion: binding
                .spec
                .as_ref()
                .is_some_and(|s| s.preserve_resources_on_deletion),
            // PL-7: the policy's choice, through the binding
            conflict_resolution: binding.spec.as_ref().map_or(0, |s| s.conflict_resolution),
            trace_context: trace_context(binding),
        }),
        status: None,
    })
}

/// The labels a binding's Works carry (§1.10): its permanent id (its uid when it has none)
/// and its namespace and name.
fn binding_labels(meta: &v1::ObjectMeta) -> [(&'static str, &str); 3] {
    let permanent_id = meta
        .labels
        .get(LABEL_PERMANENT_ID)
        .map_or(meta.uid.as_str(), String::as_str);
    [
        (LABEL_PERMANENT_ID, permanent_id),
        (LABEL_BINDING_NAMESPACE, meta.namespace.as_str()),
        (LABEL_BINDING_NAME, meta.name.as_str()),
    ]
}

/// #31: a digest of everything [`render_work_with`] reads to render `target`'s Work, the
/// trace context aside (which alone never rewrites a Work, [`needs_update`]): the binding's
/// identity, labels and generation (every spec write moves it: resource, placement, targets,
/// eviction tasks with their preserved labels, suspension, deletion and conflict choices),
/// the template's generation and the target with its replicas. `None` while override policies
/// are in scope: their inputs (policies, the clusters their affinities match) are not
/// digested, so such Works are always rendered.
pub fn render_inputs(
    binding: &v1::ResourceBinding,
    workload: &v1::Workload,
    target: &TargetCluster,
    overrides: &Overrides,
) -> Option<u64> {
    use std::hash::{Hash, Hasher};
    if !overrides.policies.is_empty() {
        return None;
    }
    let mut h = std::collections::hash_map::DefaultHasher::new();
    let default_meta = v1::ObjectMeta::default();
    let meta = binding.metadata.as_ref().unwrap_or(&default_meta);
    binding_labels(meta).hash(&mut h);
    meta.uid.hash(&mut h);
    meta.generation.hash(&mut h);
    let template = workload.metadata.as_ref().unwrap_or(&default_meta);
    template.uid.hash(&mut h);
    // its generation, not its revision: the write of its aggregated status (IN-4) moves the
    // revision and changes nothing a Work is rendered from
    template.generation.hash(&mut h);
    target.name.hash(&mut h);
    target.replicas.hash(&mut h);
    Some(h.finish())
}

/// Whether `existing` carries the metadata its binding's Work is rendered with when no
/// override policy is in scope ([`needs_update`]'s metadata half, without rendering): the
/// binding's labels, the execution finalizer, and no applied-overrides annotation.
pub fn owned_meta_current(existing: &v1::Work, binding: &v1::ResourceBinding) -> bool {
    let Some(em) = existing.metadata.as_ref() else {
        return false;
    };
    let default_meta = v1::ObjectMeta::default();
    let meta = binding.metadata.as_ref().unwrap_or(&default_meta);
    binding_labels(meta)
        .iter()
        .all(|(k, v)| em.labels.get(*k).map(String::as_str) == Some(*v))
        && em.finalizers.iter().any(|f| f == EXECUTION_FINALIZER)
        && [
            ANNOTATION_APPLIED_OVERRIDES,
            ANNOTATION_APPLIED_CLUSTER_OVERRIDES,
        ]
        .iter()
        .all(|k| !em.annotations.contains_key(*k))
}

/// Whether `existing` differs from `desired` in what the binding controller owns: its labels,
/// the finalizer and the spec (the trace context aside, which alone never rewrites a Work).
pub fn needs_update(existing: &v1::Work, desired: &v1::Work) -> bool {
    let (Some(em), Some(dm)) = (existing.metadata.as_ref(), desired.metadata.as_ref()) else {
        return true;
    };
    let labels_differ = dm.labels.iter().any(|(k, v)| em.labels.get(k) != Some(v));
    let overrides_differ = [
        ANNOTATION_APPLIED_OVERRIDES,
        ANNOTATION_APPLIED_CLUSTER_OVERRIDES,
    ]
    .iter()
    .any(|k| em.annotations.get(*k) != dm.annotations.get(*k));
    let finalizer_missing = dm.finalizers.iter().any(|f| !em.finalizers.contains(f));
    let strip = |w: &v1::Work| {
        w.spec.clone().map(|mut s| {
            s.trace_context.clear();
            s
        })
    };
    labels_differ || overrides_differ || finalizer_missing || strip(existing) != strip(desired)
}

/// `existing` with the desired labels, finalizer and spec (its status and other metadata kept).
pub fn merge_update(existing: &v1::Work, desired: &v1::Work) -> v1::Work {
    let mut out = existing.clone();
    let meta = out.metadata.get_or_insert_with(Default::default);
    if let Some(dm) = desired.metadata.as_ref() {
        for (k, v) in &dm.labels {
            meta.labels.insert(k.clone(), v.clone());
        }
        for f in &dm.finalizers {
            if !meta.finalizers.contains(f) {
                meta.finalizers.push(f.clone());
            }
        }
        // the applied-overrides record is the renderer's: set or removed with the manifest
        for key in [
            ANNOTATION_APPLIED_OVERRIDES,
            ANNOTATION_APPLIED_CLUSTER_OVERRIDES,
        ] {
            match dm.annotations.get(key) {
                Some(v) => {
                    meta.annotations.insert(key.to_owned(), v.clone());
                }
                None => {
                    meta.annotations.remove(key);
                }
            }
        }
    }
    out.spec.clone_from(&desired.spec);
    out
}

/// The `Applied` state of a Work status: the `Applied` condition if present (Unknown →
/// `None`), else the `applied` flag.
pub fn applied_state(status: &v1::WorkStatus) -> Option<bool> {
    match status
        .conditions
        .iter()
        .find(|c| c.r#type == CONDITION_APPLIED)
    {
        Some(c) => match v1::ConditionStatus::try_from(c.status) {
            Ok(v1::ConditionStatus::True) => Some(true),
            Ok(v1::ConditionStatus::False) => Some(false),
            _ => None,
        },
        None => Some(status.applied),
    }
}

/// Whether the Work's current generation is applied on its member.
pub fn applied_current(work: &v1::Work) -> bool {
    work.status.as_ref().is_some_and(|s| {
        s.observed_generation == work.generation() && applied_state(s) == Some(true)
    })
}

fn health_of(raw: i32) -> ResourceHealth {
    match v1::ResourceHealth::try_from(raw) {
        Ok(v1::ResourceHealth::Healthy) => ResourceHealth::Healthy,
        Ok(v1::ResourceHealth::Unhealthy) => ResourceHealth::Unhealthy,
        _ => ResourceHealth::Unknown,
    }
}

/// WE-8 input for one Work. A status that describes an older generation than the Work's
/// counts as not applied yet: an aggregated Healthy must be about the current spec (I1a).
pub fn observation(work: &v1::Work) -> WorkObservation {
    let status = work.status.clone().unwrap_or_default();
    let current = status.observed_generation == work.generation();
    let applied = if current {
        applied_state(&status)
    } else {
        None
    };
    WorkObservation {
        cluster: work_cluster(work).to_owned(),
        deleting: is_deleting(work.metadata.as_ref()),
        applied,
        applied_message: status.applied_message.clone(),
        health: health_of(status.health),
        ready_replicas: status.ready_replicas,
    }
}

/// Sets a condition: `lastTransitionTime` moves only when the status changes (CH-5.5).
pub fn set_condition(
    conditions: &mut Vec<v1::Condition>,
    type_: &str,
    status: v1::ConditionStatus,
    reason: &str,
    message: &str,
    now: Time,
) {
    let status = status as i32;
    match conditions.iter_mut().find(|c| c.r#type == type_) {
        Some(c) => {
            if c.status != status {
                c.status = status;
                c.last_transition_time = Some(time_to_timestamp(now));
            }
            reason.clone_into(&mut c.reason);
            message.clone_into(&mut c.message);
        }
        None => conditions.push(v1::Condition {
            r#type: type_.to_owned(),
            status,
            reason: reason.to_owned(),
            message: message.to_owned(),
            last_transition_time: Some(time_to_timestamp(now)),
        }),
    }
}

/// WE-6.5 success: `Applied=True` for `generation`, with what the member said about the
/// object (health, ready replicas, status JSON).
pub fn applied_status(
    old: Option<&v1::WorkStatus>,
    generation: i64,
    member: Option<&v1::ManifestStatus>,
    now: Time,
) -> v1::WorkStatus {
    let mut status = old.cloned().unwrap_or_default();
    set_condition(
        &mut status.conditions,
        CONDITION_APPLIED,
        v1::ConditionStatus::True,
        REASON_APPLIED_SUCCESSFUL,
        "Manifest has been successfully applied",
        now,
    );
    status.applied = true;
    status.applied_message.clear();
    status.observed_generation = generation;
    match member {
        Some(m) => {
            merge_member_status(&mut status, m);
            // WE-7.1: status collection takes no reading older than this answer
            flotilla_member::status::record_applied_stand(&mut status, m);
        }
        None => {
            status.health = v1::ResourceHealth::Unknown as i32;
            status.member_uid.clear();
            status.member_generation = 0;
            status.member_resource_version.clear();
        }
    }
    status
}

/// Copies the member's view of the object (health, ready replicas, status JSON) into a Work
/// status; returns whether anything changed.
pub fn merge_member_status(status: &mut v1::WorkStatus, member: &v1::ManifestStatus) -> bool {
    let health = match v1::ResourceHealth::try_from(member.health) {
        Ok(v1::ResourceHealth::Unspecified) | Err(_) => v1::ResourceHealth::Unknown as i32,
        Ok(h) => h as i32,
    };
    let changed = status.health != health
        || status.ready_replicas != member.ready_replicas
        || status.resource_status != member.status;
    status.health = health;
    status.ready_replicas = member.ready_replicas;
    status.resource_status.clone_from(&member.status);
    changed
}

/// WE-6.5 failure: `Applied=False`, `AppliedFailed`, with Karmada's message shape.
pub fn failed_status(
    old: Option<&v1::WorkStatus>,
    generation: i64,
    error: &str,
    now: Time,
) -> v1::WorkStatus {
    let mut status = old.cloned().unwrap_or_default();
    let message = format!("Failed to apply all manifests (0/1): {error}");
    set_condition(
        &mut status.conditions,
        CONDITION_APPLIED,
        v1::ConditionStatus::False,
        REASON_APPLIED_FAILED,
        &message,
        now,
    );
    status.applied = false;
    status.applied_message = message;
    status.observed_generation = generation;
    status.health = v1::ResourceHealth::Unknown as i32;
    status
}

/// The member lost the manifest (status collection no longer lists it): not applied any more,
/// so that the execution controller applies it again.
pub fn missing_status(old: &v1::WorkStatus, now: Time) -> v1::WorkStatus {
    let mut status = old.clone();
    let message = "the manifest is not on the member any more; applying it again";
    set_condition(
        &mut status.conditions,
        CONDITION_APPLIED,
        v1::ConditionStatus::False,
        REASON_MANIFEST_MISSING,
        message,
        now,
    );
    status.applied = false;
    message.clone_into(&mut status.applied_message);
    status.health = v1::ResourceHealth::Unknown as i32;
    status.ready_replicas = 0;
    status
}

/// Whether a cluster's `Ready` condition is True.
pub fn cluster_ready(cluster: &v1::Cluster) -> bool {
    cluster.status.as_ref().is_some_and(|s| {
        s.conditions.iter().any(|c| {
            c.r#type == flotilla_core::types::CONDITION_READY
                && c.status == v1::ConditionStatus::True as i32
        })
    })
}

/// Whether a cluster is a Pull cluster (its agent applies Works and reports their status).
pub fn cluster_is_pull(cluster: &v1::Cluster) -> bool {
    cluster
        .spec
        .as_ref()
        .is_some_and(|s| s.sync_mode == v1::SyncMode::Pull as i32)
}

/// The cluster's member endpoint (`spec.apiEndpoint`).
pub fn cluster_endpoint(cluster: &v1::Cluster) -> &str {
    cluster
        .spec
        .as_ref()
        .map_or("", |s| s.api_endpoint.as_str())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    fn binding() -> v1::ResourceBinding {
        crate::plan::tests::nginx_binding("b-uid", "w-uid", &[], &[])
    }

    fn workload(manifest: &str) -> v1::Workload {
        v1::Workload {
            kind: "Deployment".into(),
            api_version: "apps/v1".into(),
            manifest: manifest.into(),
            replicas: 3,
            ..Default::default()
        }
    }

    #[test]
    fn we_4_1_replicas_revised_into_the_manifest() {
        let w = render_work(
            &binding(),
            &workload(r#"{"kind":"Deployment","metadata":{"name":"nginx"},"spec":{"replicas":3,"template":{}}}"#),
            &TargetCluster::new("member2", 2),
        )
        .unwrap();
        let spec = w.spec.clone().unwrap();
        let manifest: serde_json::Value = serde_json::from_str(&spec.manifest).unwrap();
        assert_eq!(manifest["spec"]["replicas"], 2);
        assert_eq!(manifest["spec"]["template"], serde_json::json!({}));
        assert_eq!(spec.replicas, Some(2));
        assert_eq!(spec.cluster, "member2");
        // WE-5 name, binding namespace, binding identity labels, execution finalizer
        assert_eq!(w.name(), "nginx-687f7fb96f");
        assert_eq!(w.namespace(), "default");
        let meta = w.metadata.clone().unwrap();
        assert_eq!(meta.labels[LABEL_PERMANENT_ID], "b-uid");
        assert_eq!(meta.labels[LABEL_BINDING_NAME], "nginx-deployment");
        assert_eq!(meta.finalizers, vec![EXECUTION_FINALIZER.to_string()]);
        assert_eq!(w.key(), "works/member2/default/nginx-687f7fb96f");
        assert_eq!(w.key(), expected_work_key(&binding(), "member2"));
    }

    #[test]
    fn we_4_5_preserved_state_is_injected_into_the_new_copy_only() {
        let manifest = r#"{"kind":"Deployment","metadata":{"name":"nginx","labels":{"app":"nginx"}},"spec":{"replicas":1}}"#;
        let moved = |targets: &[&str], mode: v1::PurgeMode| {
            let mut b = binding();
            let spec = b.spec.as_mut().unwrap();
            spec.clusters = targets
                .iter()
                .map(|c| v1::TargetCluster {
                    name: (*c).into(),
                    replicas: 1,
                })
                .collect();
            spec.graceful_eviction_tasks = vec![v1::GracefulEvictionTask {
                from_cluster: "member1".into(),
                purge_mode: mode as i32,
                preserved_label_state: [("app.io/epoch".to_owned(), "7".to_owned())].into(),
                clusters_before_failover: vec!["member1".into()],
                ..Default::default()
            }];
            b
        };
        let labels = |b: &v1::ResourceBinding, cluster: &str| {
            let w = render_work(b, &workload(manifest), &TargetCluster::new(cluster, 1)).unwrap();
            let m: serde_json::Value = serde_json::from_str(&w.spec.unwrap().manifest).unwrap();
            m["metadata"]["labels"].clone()
        };
        let injected = labels(&moved(&["member2"], v1::PurgeMode::Directly), "member2");
        assert_eq!(injected["app.io/epoch"], "7");
        assert_eq!(injected["app"], "nginx");
        assert_eq!(injected[flotilla_member::managed_label(true)], "b-uid");
        for (what, b, cluster) in [
            (
                "Gracefully",
                moved(&["member2"], v1::PurgeMode::Gracefully),
                "member2",
            ),
            (
                "two targets",
                moved(&["member2", "member3"], v1::PurgeMode::Directly),
                "member2",
            ),
            (
                "ran it before",
                moved(&["member1"], v1::PurgeMode::Directly),
                "member1",
            ),
        ] {
            assert!(labels(&b, cluster).get("app.io/epoch").is_none(), "{what}");
        }
    }

    /// The manifest revised for `replicas` of `kind` in `api_version` on `cluster`, divided
    /// among `divided` when given: (manifest, replicas).
    fn revised(
        manifest: &str,
        (api_version, kind): (&str, &str),
        (cluster, replicas): (&str, i32),
        divided: Option<&[(&str, i32)]>,
    ) -> Result<(String, Option<i32>), RenderError> {
        let resource = v1::ObjectReference {
            api_version: api_version.into(),
            kind: kind.into(),
            ..Default::default()
        };
        let target = TargetCluster::new(cluster, replicas);
        // a binding that divides its replicas over `divided`
        let spec = divided.map(|targets| v1::ResourceBindingSpec {
            replicas: targets.iter().map(|(_, r)| r).sum(),
            placement: Some(v1::Placement {
                replica_scheduling: Some(v1::ReplicaSchedulingStrategy {
                    replica_scheduling_type: v1::ReplicaSchedulingType::Divided as i32,
                    ..Default::default()
                }),
                ..Default::default()
            }),
            clusters: v1::TargetCluster::from_pairs(targets),
            ..Default::default()
        });
        let revision = Revision {
            resource: &resource,
            target: &target,
            binding: spec.as_ref(),
        };
        revise_replicas(manifest, &revision)
    }

    /// [`revised`] on member1, not divided.
    fn to(
        manifest: &str,
        api_version: &str,
        kind: &str,
        replicas: i32,
    ) -> Result<(String, Option<i32>), RenderError> {
        revised(manifest, (api_version, kind), ("member1", replicas), None)
    }

    /// PL-2, WE-6.1: a policy's `preserveResourcesOnDeletion`, copied onto its binding, reaches
    /// every Work, so deleting a Work leaves the member object.
    #[test]
    fn we_6_1_preserve_resources_on_deletion_reaches_the_work() {
        let wl = workload(r#"{"spec":{"replicas":3}}"#);
        let target = TargetCluster::new("member1", 1);
        let kept = |b: &v1::ResourceBinding| {
            let w = render_work(b, &wl, &target).unwrap();
            w.spec.unwrap().preserve_resources_on_deletion
        };
        let mut b = binding();
        assert!(!kept(&b), "not asked for");
        b.spec.as_mut().unwrap().preserve_resources_on_deletion = true;
        assert!(kept(&b));
    }

    /// WE-6.5: a policy's `suspension`, copied onto its binding, suspends the Works of every
    /// cluster (`dispatching`) or of the clusters it names (`dispatchingOnClusters`).
    #[test]
    fn we_6_5_suspension_reaches_the_works_of_the_clusters_it_names() {
        let wl = workload(r#"{"spec":{"replicas":3}}"#);
        let suspended = |b: &v1::ResourceBinding, cluster: &str| {
            let w = render_work(b, &wl, &TargetCluster::new(cluster, 1)).unwrap();
            w.spec.unwrap().suspend_dispatching
        };
        let mut b = binding();
        assert!(!suspended(&b, "member1"), "not asked for");
        b.spec.as_mut().unwrap().suspension = Some(v1::Suspension {
            dispatching: None,
            dispatching_on_clusters: Some(v1::SuspendClusters {
                cluster_names: vec!["member2".into()],
            }),
        });
        assert!(!suspended(&b, "member1"));
        assert!(suspended(&b, "member2"));
        b.spec.as_mut().unwrap().suspension = Some(v1::Suspension {
            dispatching: Some(true),
            dispatching_on_clusters: None,
        });
        assert!(suspended(&b, "member1") && suspended(&b, "member2"));
    }

    #[test]
    fn non_workload_kinds_are_not_revised() {
        let (m, r) = to(r#"{"data":{"a":"b"}}"#, "v1", "ConfigMap", 4).unwrap();
        assert_eq!(r, None);
        assert!(!m.contains("replicas"), "{m}");
        assert!(to("[1]", "apps/v1", "Deployment", 1).is_err());
        assert!(to("{", "apps/v1", "Deployment", 1).is_err());
        let (m, r) = to(r#"{"spec":{"template":{}}}"#, "apps/v1", "DaemonSet", 2).unwrap();
        assert_eq!(r, None, "IN-2: a DaemonSet is not revised");
        assert!(!m.contains("replicas"), "{m}");
    }

    /// Regression (#30): a custom resource whose kind is `Deployment` in another group gained
    /// `spec.replicas` on the member. The interpreter keys on apiVersion and kind.
    #[test]
    fn in_1_a_custom_resource_named_like_a_built_in_is_not_revised() {
        let manifest = r#"{"apiVersion":"example.com/v1","kind":"Deployment","spec":{"size":3}}"#;
        let (m, r) = to(manifest, "example.com/v1", "Deployment", 2).unwrap();
        assert_eq!(r, None);
        let m: serde_json::Value = serde_json::from_str(&m).unwrap();
        assert_eq!(m["spec"], serde_json::json!({"size": 3}), "untouched");
        let (m, r) = to(r#"{"spec":{}}"#, "apps/v1", "Deployment", 2).unwrap();
        assert_eq!(r, Some(2));
        assert!(m.contains(r#""replicas":2"#), "{m}");
    }

    #[test]
    fn in_1_a_jobs_share_is_its_parallelism() {
        let job = r#"{"kind":"Job","spec":{"parallelism":5,"completions":5}}"#;
        let (m, r) = to(job, "batch/v1", "Job", 2).unwrap();
        assert_eq!(r, Some(2));
        let m: serde_json::Value = serde_json::from_str(&m).unwrap();
        assert_eq!(m["spec"]["parallelism"], 2);
        assert_eq!(
            m["spec"]["completions"], 5,
            "not divided: completions are the Job's own"
        );
        assert!(m["spec"].get("replicas").is_none());
    }

    /// WE-4.2 (Karmada's divideReplicasByJobCompletions): a Divided Job runs a share of its
    /// completions on each target, by the targets' replicas; a Job without completions keeps
    /// none.
    #[test]
    fn we_4_2_a_divided_jobs_completions_are_divided() {
        let targets = [("member1", 1), ("member2", 2)];
        let job = r#"{"kind":"Job","spec":{"parallelism":3,"completions":10}}"#;
        let shares: Vec<serde_json::Value> = targets
            .iter()
            .map(|target| {
                let (m, _) = revised(job, ("batch/v1", "Job"), *target, Some(&targets)).unwrap();
                let m: serde_json::Value = serde_json::from_str(&m).unwrap();
                serde_json::json!([m["spec"]["parallelism"], m["spec"]["completions"]])
            })
            .collect();
        assert_eq!(
            shares,
            [serde_json::json!([1, 3]), serde_json::json!([2, 7])],
            "10 completions by 1:2"
        );
        let endless = r#"{"spec":{"parallelism":3}}"#;
        let (m, _) = revised(endless, ("batch/v1", "Job"), ("member1", 1), Some(&targets)).unwrap();
        assert!(!m.contains("completions"), "{m}");
    }

    #[test]
    fn unchanged_works_need_no_update_and_trace_context_alone_does_not_count() {
        let b = binding();
        let wl = workload(r#"{"spec":{"replicas":3}}"#);
        let desired = render_work(&b, &wl, &TargetCluster::new("m1", 1)).unwrap();
        let mut existing = desired.clone();
        existing.metadata.as_mut().unwrap().uid = "x".into();
        existing.status = Some(v1::WorkStatus {
            applied: true,
            ..Default::default()
        });
        assert!(!needs_update(&existing, &desired));
        existing.spec.as_mut().unwrap().trace_context = "00-abc".into();
        assert!(!needs_update(&existing, &desired));
        let more = render_work(&b, &wl, &TargetCluster::new("m1", 2)).unwrap();
        assert!(needs_update(&existing, &more));
        let merged = merge_update(&existing, &more);
        assert_eq!(merged.metadata.as_ref().unwrap().uid, "x", "metadata kept");
        assert!(merged.status.as_ref().unwrap().applied, "status kept");
        assert_eq!(merged.spec, more.spec);
    }

    #[test]
    fn observations_require_the_current_generation() {
        let mut w = v1::Work {
            metadata: Some(v1::ObjectMeta {
                generation: 2,
                ..Default::default()
            }),
            spec: Some(v1::WorkSpec {
                cluster: "m1".into(),
                ..Default::default()
            }),
            status: Some(applied_status(None, 1, None, Time::from_millis(0))),
        };
        assert_eq!(observation(&w).applied, None, "status of generation 1");
        assert!(!applied_current(&w));
        w.status = Some(applied_status(None, 2, None, Time::from_millis(0)));
        assert_eq!(observation(&w).applied, Some(true));
        assert!(applied_current(&w));
        w.status = Some(failed_status(
            w.status.as_ref(),
            2,
            "boom",
            Time::from_millis(5),
        ));
        let o = observation(&w);
        assert_eq!(o.applied, Some(false));
        assert!(o.applied_message.contains("boom"));
    }

    #[test]
    fn conditions_keep_their_transition_time_while_status_holds() {
        let mut c = Vec::new();
        let t1 = Time::from_millis(1000);
        let t2 = Time::from_millis(2000);
        set_condition(&mut c, "A", v1::ConditionStatus::True, "R", "m", t1);
        set_condition(&mut c, "A", v1::ConditionStatus::True, "R2", "m2", t2);
        assert_eq!(c[0].last_transition_time, Some(time_to_timestamp(t1)));
        assert_eq!(c[0].reason, "R2");
        set_condition(&mut c, "A", v1::ConditionStatus::False, "R3", "m3", t2);
        assert_eq!(c[0].last_transition_time, Some(time_to_timestamp(t2)));
    }

    #[test]
    fn binding_keys_round_trip() {
        assert_eq!(binding_key("ns", "b"), "bindings/ns/b");
        assert_eq!(parse_binding_key("bindings/ns/b"), Some(("ns", "b")));
        assert_eq!(parse_binding_key("bindings/ns"), None);
        assert_eq!(parse_binding_key("bindings//crb"), Some(("", "crb")));
        // CR-3: a ClusterResourceBinding's Work leads back to its binding
        let work = v1::Work {
            spec: Some(v1::WorkSpec {
                binding: Some(v1::BindingReference {
                    namespace: String::new(),
                    name: "viewer-clusterrole".into(),
                    ..Default::default()
                }),
                ..Default::default()
            }),
            ..Default::default()
        };
        assert_eq!(
            crate::controller::binding_of_work(&work).as_deref(),
            Some("bindings//viewer-clusterrole")
        );
        assert_eq!(
            work_binding_ref(&work).as_deref(),
            Some("/viewer-clusterrole")
        );
        assert_eq!(parse_binding_key("works/ns/b"), None);
    }
}
