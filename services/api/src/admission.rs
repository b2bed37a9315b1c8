//! Admission: what Karmada's mutating and validating webhooks do, per kind. Every object is
//! converted to the domain type (`flotilla_proto::convert`), defaulted
//! (`flotilla_core::defaults`, PD-1/PD-2, A1) and validated (`flotilla_core::validation`)
//! before anything is written; the first problem found stops the request with
//! INVALID_ARGUMENT naming every bad field.
//!
//! ```text
//!   wire ──TryFrom──► domain ──default (policies)──► validate ──► wire to store
//!     │ ConvertError{field}            FieldErrors{field} │
//!     └───────────────► INVALID_ARGUMENT ◄────────────────┘
//! ```

use flotilla_core::defaults::{DefaultingOptions, default_propagation_spec};
use flotilla_core::overrides::OverridePolicy;
use flotilla_core::resource::{self, Scope};
use flotilla_core::types as domain;
use flotilla_core::validation::{
    FieldError, FieldErrorKind, FieldErrors, FieldPath, Limits, PERMANENT_ID_LABEL_CLUSTER_POLICY,
    PERMANENT_ID_LABEL_POLICY, WorkloadTemplate, validate_cluster, validate_cluster_taint_policy,
    validate_cluster_taint_policy_conflicts, validate_override_policy, validate_propagation_policy,
    validate_propagation_policy_update, validate_workload,
};
use flotilla_proto::v1;

use crate::error::Error;
use crate::manifest;

/// The prefix of the taints cluster-health owns (`cluster.karmada.io/not-ready`, ...).
pub const CONTROLLER_TAINT_PREFIX: &str = "cluster.karmada.io/";

/// Admission options (from the flags).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Admission {
    /// PD-1 / A1 defaulting options.
    pub defaulting: DefaultingOptions,
    /// Size caps.
    pub limits: Limits,
    /// Whether a ClusterTaintPolicy may carry NoExecute taints (CH-16.1).
    pub allow_no_execute_taint_policy: bool,
}

/// A random RFC 4122 version-4 id, for permanent ids (PD-1.6).
pub fn new_permanent_id() -> String {
    flotilla_store::typed::new_uid()
}

/// Gives every NoExecute taint without `timeAdded` the time it was first seen: the stored
/// taint's with the same key and effect, else now (as `kubectl taint` / `karmadactl taint`
/// do), so that tolerationSeconds count from it (a taint without it never triggers a timed
/// eviction, TM-8.3).
fn stamp_no_execute_taints(cluster: &mut v1::Cluster, current: Option<&v1::Cluster>) {
    let no_execute = v1::TaintEffect::NoExecute as i32;
    let stored: Vec<v1::Taint> = current
        .and_then(|c| c.spec.as_ref())
        .map(|s| s.taints.clone())
        .unwrap_or_default();
    let Some(spec) = cluster.spec.as_mut() else {
        return;
    };
    for taint in spec
        .taints
        .iter_mut()
        .filter(|t| t.effect == no_execute && t.time_added.is_none())
    {
        taint.time_added = stored
            .iter()
            .find(|s| s.key == taint.key && s.effect == taint.effect)
            .and_then(|s| s.time_added)
            .or_else(|| Some(crate::objects::now_timestamp()));
    }
}

/// ES-4.1, as Karmada's registry stores them: a cluster's resource models sorted by grade,
/// the first grade's mins 0 and the last grade's maxes unbounded (written as quantities).
/// Flotilla: a Cluster without models gets none (Karmada fills in its default grades when
/// its CustomizedClusterResourceModeling gate is on): estimates then come from the summed
/// summary, ES-2.
fn standardize_resource_models(cluster: &mut v1::Cluster) -> Result<(), Error> {
    let Some(spec) = cluster
        .spec
        .as_mut()
        .filter(|s| !s.resource_models.is_empty())
    else {
        return Ok(());
    };
    let mut models = std::mem::take(&mut spec.resource_models)
        .into_iter()
        .enumerate()
        .map(|(i, m)| {
            flotilla_core::capacity::ResourceModel::try_from(m)
                .map_err(|e| Error::convert(e.at_index("resourceModels", i).within("spec")))
        })
        .collect::<Result<Vec<_>, Error>>()?;
    flotilla_core::capacity::models::standardize(&mut models);
    spec.resource_models = models.into_iter().map(Into::into).collect();
    Ok(())
}

fn required<T>(obj: Option<T>, field: &str) -> Result<T, Error> {
    obj.ok_or_else(|| Error::required(field, "the object is required"))
}

// === impl Admission ===

impl Admission {
    /// A new Cluster: the user's spec (endpoint, sync mode, region/zones/provider, labels,
    /// taints) is validated; `status` is dropped (cluster-health owns it).
    pub fn cluster(&self, cluster: Option<v1::Cluster>) -> Result<v1::Cluster, Error> {
        let mut cluster = required(cluster, "cluster")?;
        cluster.status = None;
        standardize_resource_models(&mut cluster)?;
        self.check_cluster(&cluster)?;
        stamp_no_execute_taints(&mut cluster, None);
        Ok(cluster)
    }

    /// An updated Cluster: the user's spec, except that the controller taints
    /// (`cluster.karmada.io/*`) and the status are kept from the stored object, so that a
    /// user update never clobbers what cluster-health wrote (DESIGN §3).
    pub fn cluster_update(
        &self,
        current: &v1::Cluster,
        mut new: v1::Cluster,
    ) -> Result<v1::Cluster, Error> {
        new.status = current.status.clone();
        let spec = new.spec.get_or_insert_with(Default::default);
        spec.taints
            .retain(|t| !t.key.starts_with(CONTROLLER_TAINT_PREFIX));
        if let Some(old) = &current.spec {
            spec.taints.extend(
                old.taints
                    .iter()
                    .filter(|t| t.key.starts_with(CONTROLLER_TAINT_PREFIX))
                    .cloned(),
            );
        }
        standardize_resource_models(&mut new)?;
        self.check_cluster(&new)?;
        stamp_no_execute_taints(&mut new, Some(current));
        Ok(new)
    }

    fn check_cluster(&self, cluster: &v1::Cluster) -> Result<(), Error> {
        let mut probe = cluster.clone();
        probe.status = None;
        let domain = domain::Cluster::try_from(probe).map_err(Error::convert)?;
        let mut errs = validate_cluster(&domain, &self.limits);
        if let Some(capacity) = cluster.spec.as_ref().and_then(|s| s.capacity.as_ref()) {
            let path = FieldPath::new("spec").child("capacity");
            for (value, name) in [
                (capacity.cpu_millis, "cpuMillis"),
                (capacity.memory_bytes, "memoryBytes"),
                (capacity.pods, "pods"),
            ] {
                if value < 0 {
                    errs.push(FieldError::out_of_range(
                        &path.child(name),
                        format!("must be greater than or equal to 0 (got {value})"),
                    ));
                }
            }
        }
        Error::check(errs)
    }

    /// A PropagationPolicy (`cluster_wide == false`) or ClusterPropagationPolicy to create
    /// (`current` = None) or to update: PD-1/PD-2 defaults, A1 default tolerations, the
    /// permanent-id label (PD-1.6: assigned on create, kept on update), validation and the
    /// update-only rules.
    pub fn propagation_policy<K>(
        &self,
        policy: Option<K>,
        current: Option<&K>,
        cluster_wide: bool,
    ) -> Result<K, Error>
    where
        K: TryInto<domain::PropagationPolicy, Error = flotilla_proto::convert::ConvertError>
            + From<domain::PropagationPolicy>
            + Clone,
    {
        let field = if cluster_wide {
            "clusterPropagationPolicy"
        } else {
            "propagationPolicy"
        };
        let domain = required(policy, field)?
            .try_into()
            .map_err(Error::convert)?;
        let current = current
            .cloned()
            .map(K::try_into)
            .transpose()
            .map_err(Error::convert)?;
        let domain = self.admit_policy(domain, current.as_ref(), cluster_wide)?;
        Ok(domain.into())
    }

    /// An OverridePolicy (`cluster_wide == false`) or ClusterOverridePolicy to create or
    /// update (OV-1): converted, its selectors' namespaces defaulted to an OverridePolicy's
    /// own (as PD-1.1 does for propagation policies), validated.
    pub fn override_policy<K>(&self, policy: Option<K>, cluster_wide: bool) -> Result<K, Error>
    where
        K: TryInto<OverridePolicy, Error = flotilla_proto::convert::ConvertError>
            + From<OverridePolicy>,
    {
        let field = if cluster_wide {
            "clusterOverridePolicy"
        } else {
            "overridePolicy"
        };
        let mut policy: OverridePolicy = required(policy, field)?
            .try_into()
            .map_err(Error::convert)?;
        if !cluster_wide {
            let namespace = policy.meta.namespace.clone();
            for selector in &mut policy.spec.resource_selectors {
                if selector.namespace.is_empty() {
                    selector.namespace.clone_from(&namespace);
                }
            }
        }
        Error::check(validate_override_policy(
            &policy,
            cluster_wide,
            &self.limits,
        ))?;
        Ok(policy.into())
    }

    /// A Secret: a valid namespace and name, data keys as Kubernetes allows them
    /// (`[-._a-zA-Z0-9]+`), at most 1 MiB of data; `type` defaults to `Opaque`.
    pub fn secret(&self, secret: Option<v1::Secret>) -> Result<v1::Secret, Error> {
        let mut secret = required(secret, "secret")?;
        let meta = secret.metadata.get_or_insert_with(Default::default);
        flotilla_core::validation::check_dns1123_subdomain(&meta.name)
            .map_err(|e| Error::invalid("metadata.name", e.to_string()))?;
        flotilla_core::validation::check_dns1123_label(&meta.namespace)
            .map_err(|e| Error::invalid("metadata.namespace", e.to_string()))?;
        let mut size = 0usize;
        for (key, value) in &secret.data {
            let valid = !key.is_empty()
                && key.len() <= 253
                && key
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'));
            if !valid {
                return Err(Error::invalid(
                    &format!("data[{key}]"),
                    "a key must consist of alphanumeric characters, '-', '_' or '.'",
                ));
            }
            size += key.len() + value.len();
        }
        if size > 1 << 20 {
            return Err(Error::invalid("data", "must be at most 1 MiB in all"));
        }
        if secret.r#type.is_empty() {
            "Opaque".clone_into(&mut secret.r#type);
        }
        Ok(secret)
    }

    fn admit_policy(
        &self,
        mut policy: domain::PropagationPolicy,
        current: Option<&domain::PropagationPolicy>,
        cluster_wide: bool,
    ) -> Result<domain::PropagationPolicy, Error> {
        let label = if cluster_wide {
            PERMANENT_ID_LABEL_CLUSTER_POLICY
        } else {
            PERMANENT_ID_LABEL_POLICY
        };
        // PD-1.6: the permanent id is the server's; an update that leaves it out keeps it.
        let kept = current.and_then(|c| c.meta.labels.get(label)).cloned();
        if !policy.meta.labels.contains_key(label) {
            let id = kept.unwrap_or_else(new_permanent_id);
            policy.meta.labels.insert(label.to_owned(), id);
        }
        let namespace = policy.meta.namespace.clone();
        default_propagation_spec(&mut policy.spec, &namespace, &self.defaulting);
        let mut errs = validate_propagation_policy(&policy, cluster_wide, &self.limits);
        if let Some(current) = current {
            errs.extend(validate_propagation_policy_update(current, &policy));
        }
        Error::check(errs)?;
        Ok(policy)
    }

    /// A ClusterTaintPolicy to create or update: validated (CH-16) and checked against the
    /// taints the `others` already manage.
    pub fn cluster_taint_policy(
        &self,
        policy: Option<v1::ClusterTaintPolicy>,
        others: &[v1::ClusterTaintPolicy],
    ) -> Result<v1::ClusterTaintPolicy, Error> {
        let policy = required(policy, "clusterTaintPolicy")?;
        let domain = domain::ClusterTaintPolicy::try_from(policy).map_err(Error::convert)?;
        let mut errs = validate_cluster_taint_policy(
            &domain,
            self.allow_no_execute_taint_policy,
            &self.limits,
        );
        let others: Vec<domain::ClusterTaintPolicy> = others
            .iter()
            .cloned()
            .filter_map(|o| domain::ClusterTaintPolicy::try_from(o).ok())
            .collect();
        errs.extend(validate_cluster_taint_policy_conflicts(&domain, &others));
        Error::check(errs)?;
        Ok(domain.into())
    }

    /// A Workload to create or update: the manifest must parse as a Kubernetes object whose
    /// `apiVersion`, `kind` and `metadata.name` (and `metadata.namespace`, if set) agree with
    /// the Workload's (empty Workload fields are filled in from the manifest, and so are the
    /// labels when the Workload has none); `replicas` and `replicaRequirements` are derived
    /// from the manifest, whatever the request said.
    pub fn workload(&self, workload: Option<v1::Workload>) -> Result<v1::Workload, Error> {
        let mut workload = required(workload, "workload")?;
        // IN-4: the aggregated status is the work executor's (it writes the store, not
        // through here); a user's write never sets it, as kube-apiserver ignores `status`
        // in a write of the main resource. An update keeps the stored one.
        workload.status.clear();
        let manifest_bytes = workload.manifest.len();
        if manifest_bytes > self.limits.max_manifest_bytes {
            return Err(Error::field(
                "manifest",
                FieldErrorKind::TooLong,
                format!(
                    "manifest may not be more than {} bytes (got {manifest_bytes})",
                    self.limits.max_manifest_bytes
                ),
            ));
        }
        let m = manifest::inspect(&workload.manifest).map_err(Error::Invalid)?;
        // CR-5: Karmada's own API objects are never stored as templates
        if let Some(why) = resource::not_a_template(&m.api_version, &m.kind) {
            return Err(Error::field("kind", FieldErrorKind::NotSupported, why));
        }
        let mut errs = FieldErrors::new();
        let mut agree = |field: &str, ours: &mut String, theirs: &str| {
            if ours.is_empty() {
                theirs.clone_into(ours);
            } else if ours != theirs {
                errs.push(FieldError::invalid(
                    &FieldPath::new(field),
                    format!("{ours:?} does not match the manifest's {theirs:?}"),
                ));
            }
        };
        agree("apiVersion", &mut workload.api_version, &m.api_version);
        agree("kind", &mut workload.kind, &m.kind);
        let cluster_scoped = resource::scope_of(&m.api_version, &m.kind) == Scope::Cluster;
        {
            let meta = workload.metadata.get_or_insert_with(Default::default);
            agree("metadata.name", &mut meta.name, &m.name);
            if cluster_scoped {
                // CR-4: a cluster-scoped object has no namespace; as the Kubernetes API
                // server does, one given is dropped (from the manifest too, so no member
                // sees it).
                meta.namespace.clear();
            } else if let Some(ns) = &m.namespace {
                agree("metadata.namespace", &mut meta.namespace, ns);
            }
            if meta.labels.is_empty() {
                meta.labels.clone_from(&m.labels);
            }
        }
        Error::check(errs)?;
        if cluster_scoped && m.namespace.is_some() {
            workload.manifest = manifest::without_namespace(&workload.manifest);
        } else if !cluster_scoped
            && workload
                .metadata
                .as_ref()
                .is_none_or(|m| m.namespace.is_empty())
        {
            return Err(Error::required(
                "metadata.namespace",
                format!("{} is namespaced: a namespace is required", m.kind),
            ));
        }
        let requirements = m.requirements.clone();
        let meta = domain::ObjectMeta::try_from(workload.metadata.clone().unwrap_or_default())
            .map_err(|e| Error::convert(e.within("metadata")))?;
        Error::check(validate_workload(
            &WorkloadTemplate {
                meta: &meta,
                api_version: &workload.api_version,
                kind: &workload.kind,
                replicas: Some(m.replicas),
                replica_requirements: requirements.as_ref(),
                manifest_bytes,
            },
            &self.limits,
        ))?;
        // In range: validate_workload checked 0..=max_replicas, which fits an i32.
        workload.replicas = i32::try_from(m.replicas).unwrap_or(i32::MAX);
        workload.replica_requirements = requirements.map(Into::into);
        Ok(workload)
    }
}
