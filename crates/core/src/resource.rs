//! A resource template's identity and scope (RM-1, CR-1..CR-4), and the dependencies Karmada's
//! default interpreter reads from a pod template (PD-1).
//!
//! ```text
//!   apiVersion "apps/v1" ──group()──► "apps"      kind "Deployment"
//!   (group, kind) ──kind_segment()──► "Deployment.apps"    (the store key's kind segment;
//!                                      a core-group kind is just "ConfigMap")
//!   (group, kind) ──scope()─────────► Namespaced | Cluster  (Kubernetes' built-in kinds;
//!                                      any other kind is namespaced)
//!   manifest ──dependencies()───────► [ConfigMap a, Secret b, ServiceAccount c, PVC d]
//! ```
//!
//! Without a member API server to ask (discovery), the scope of a kind comes from the table of
//! Kubernetes' built-in cluster-scoped kinds below; a custom resource is taken to be
//! namespaced. See docs/rules.md (RM, CR, DEP).

use std::collections::BTreeSet;

use serde_json::Value;

/// Whether objects of a kind live in a namespace.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Scope {
    /// In a namespace (Deployment, ConfigMap, any custom resource).
    Namespaced,
    /// Cluster-wide (Namespace, ClusterRole, StorageClass, ...).
    Cluster,
}

/// Kubernetes' built-in cluster-scoped kinds, by group (`""` is the core group).
const CLUSTER_SCOPED: &[(&str, &str)] = &[
    ("", "Namespace"),
    ("", "Node"),
    ("", "PersistentVolume"),
    ("", "ComponentStatus"),
    ("rbac.authorization.k8s.io", "ClusterRole"),
    ("rbac.authorization.k8s.io", "ClusterRoleBinding"),
    ("apiextensions.k8s.io", "CustomResourceDefinition"),
    ("apiregistration.k8s.io", "APIService"),
    ("storage.k8s.io", "StorageClass"),
    ("storage.k8s.io", "CSIDriver"),
    ("storage.k8s.io", "CSINode"),
    ("storage.k8s.io", "VolumeAttachment"),
    ("scheduling.k8s.io", "PriorityClass"),
    ("node.k8s.io", "RuntimeClass"),
    ("networking.k8s.io", "IngressClass"),
    (
        "admissionregistration.k8s.io",
        "ValidatingWebhookConfiguration",
    ),
    (
        "admissionregistration.k8s.io",
        "MutatingWebhookConfiguration",
    ),
    ("admissionregistration.k8s.io", "ValidatingAdmissionPolicy"),
    (
        "admissionregistration.k8s.io",
        "ValidatingAdmissionPolicyBinding",
    ),
    ("certificates.k8s.io", "CertificateSigningRequest"),
    ("flowcontrol.apiserver.k8s.io", "FlowSchema"),
    ("flowcontrol.apiserver.k8s.io", "PriorityLevelConfiguration"),
];

/// The group of the built-in kinds a user names without one (`Deployment` → `apps`), so that
/// `get workload Deployment/nginx` finds `apps/v1 Deployment nginx`.
const BUILTIN_GROUPS: &[(&str, &str)] = &[
    ("Deployment", "apps"),
    ("StatefulSet", "apps"),
    ("DaemonSet", "apps"),
    ("ReplicaSet", "apps"),
    ("ControllerRevision", "apps"),
    ("Job", "batch"),
    ("CronJob", "batch"),
    ("Ingress", "networking.k8s.io"),
    ("IngressClass", "networking.k8s.io"),
    ("NetworkPolicy", "networking.k8s.io"),
    ("Role", "rbac.authorization.k8s.io"),
    ("RoleBinding", "rbac.authorization.k8s.io"),
    ("ClusterRole", "rbac.authorization.k8s.io"),
    ("ClusterRoleBinding", "rbac.authorization.k8s.io"),
    ("HorizontalPodAutoscaler", "autoscaling"),
    ("PodDisruptionBudget", "policy"),
    ("StorageClass", "storage.k8s.io"),
    ("CSIDriver", "storage.k8s.io"),
    ("PriorityClass", "scheduling.k8s.io"),
    ("RuntimeClass", "node.k8s.io"),
    ("CustomResourceDefinition", "apiextensions.k8s.io"),
    ("APIService", "apiregistration.k8s.io"),
    (
        "ValidatingWebhookConfiguration",
        "admissionregistration.k8s.io",
    ),
    (
        "MutatingWebhookConfiguration",
        "admissionregistration.k8s.io",
    ),
];

/// The API group of an `apiVersion` (`apps/v1` → `apps`; `v1` → `""`, the core group).
pub fn group(api_version: &str) -> &str {
    api_version.rsplit_once('/').map_or("", |(g, _)| g)
}

/// The scope of `kind` in `group`: cluster-wide for Kubernetes' built-in cluster-scoped
/// kinds, namespaced for everything else (CR-2).
pub fn scope(group: &str, kind: &str) -> Scope {
    if CLUSTER_SCOPED.contains(&(group, kind)) {
        Scope::Cluster
    } else {
        Scope::Namespaced
    }
}

/// CR-5 (Flotilla): why an object of Karmada's own API (a `*.karmada.io` group) cannot be a
/// resource template, or `None` for every other object. Karmada's detector never propagates
/// its own API's objects; Flotilla refuses them at admission, by name, with what to do
/// instead, rather than storing one as a template that would be propagated to the members
/// (where no controller serves it). The kinds Flotilla applies itself (policies, Clusters,
/// the release of a binding's task) are read before this, by the CLI and the api.
pub fn not_a_template(api_version: &str, kind: &str) -> Option<String> {
    let group = group(api_version);
    if group != "karmada.io" && !group.ends_with(".karmada.io") {
        return None;
    }
    let instead = match (group, kind) {
        ("autoscaling.karmada.io", "FederatedHPA" | "CronFederatedHPA") => {
            "Flotilla has no federated autoscaler: propagate a HorizontalPodAutoscaler to the \
             members instead (each scales its own copy)"
        }
        ("networking.karmada.io", "MultiClusterService" | "MultiClusterIngress") => {
            "Flotilla does not route traffic between clusters: propagate the Service or \
             Ingress itself to the clusters that serve it"
        }
        ("policy.karmada.io", "FederatedResourceQuota") => {
            "Flotilla has no federated quota: propagate a ResourceQuota to the members instead"
        }
        ("config.karmada.io", _) => {
            "Flotilla has no resource interpreter customizations yet: a custom kind is divided \
             by no replica field and is healthy once it exists (docs/rules.md, IN-3)"
        }
        ("apps.karmada.io", "WorkloadRebalancer") => {
            "Flotilla keeps no rebalancer object: request the fresh schedule it would trigger \
             with `flotilla reschedule rb NAME` for each workload's binding"
        }
        ("work.karmada.io", _) => {
            "bindings and Works are written by Flotilla's controllers (a binding can be applied \
             only to release a held eviction task)"
        }
        ("cluster.karmada.io", _) => "Flotilla applies Clusters of cluster.karmada.io/v1alpha1",
        ("policy.karmada.io", _) => {
            "Flotilla applies PropagationPolicy, ClusterPropagationPolicy, OverridePolicy, \
             ClusterOverridePolicy and ClusterTaintPolicy of policy.karmada.io/v1alpha1"
        }
        _ => "Flotilla does not carry this part of Karmada's API",
    };
    Some(format!(
        "{kind} of {api_version} is an object of Karmada's own API, not a resource template \
         to propagate: {instead}"
    ))
}

/// The scope of the kind an `apiVersion` and `kind` name.
pub fn scope_of(api_version: &str, kind: &str) -> Scope {
    scope(group(api_version), kind)
}

/// The key segment that names a kind with its group (RM-1: identity is group, kind,
/// namespace, name): `Deployment.apps`, `Gateway.networking.istio.io`; a core-group kind is
/// its bare name (`ConfigMap`), as kubectl's `TYPE.GROUP` notation writes them.
pub fn kind_segment(group: &str, kind: &str) -> String {
    if group.is_empty() {
        kind.to_owned()
    } else {
        format!("{kind}.{group}")
    }
}

/// The kind segment a user typed, completed: `Kind.group` as given; a bare `Kind` with the
/// group of the built-in kind of that name (`Deployment` → `Deployment.apps`), else as it
/// is (the core group).
pub fn resolve_kind_segment(typed: &str) -> String {
    if typed.contains('.') {
        return typed.to_owned();
    }
    match BUILTIN_GROUPS.iter().find(|(k, _)| *k == typed) {
        Some((kind, group)) => kind_segment(group, kind),
        None => typed.to_owned(),
    }
}

/// The kind, qualified with its group only where a bare kind would mean another group
/// (`Deployment` for apps/v1's, `Deployment.example.com` for another's): what names the kind
/// to a user, and what Work names are derived from so that they stay Karmada's for the
/// built-in kinds while two groups' templates of one kind and name still get two Works.
pub fn qualified_kind(group: &str, kind: &str) -> String {
    let segment = kind_segment(group, kind);
    if resolve_kind_segment(kind) == segment {
        kind.to_owned()
    } else {
        segment
    }
}

/// `(kind, group)` of a key's kind segment (the inverse of [`kind_segment`]).
pub fn split_kind_segment(segment: &str) -> (&str, &str) {
    segment.split_once('.').unwrap_or((segment, ""))
}

/// The suffix added to a binding's name when `<name>-<kind>` is taken by a template of the
/// same kind and name in another group (RM-1): five hex digits of a stable hash (FNV-1a) of
/// the group, so the name is the same on every replica and after every restart.
pub fn group_suffix(group: &str) -> String {
    let mut hash: u32 = 0x811c_9dc5;
    for byte in group.bytes() {
        hash ^= u32::from(byte);
        hash = hash.wrapping_mul(0x0100_0193);
    }
    format!("{:05x}", hash & 0xf_ffff)
}

/// A template's binding name: `<name>-<kind lowercased>` (Karmada's convention), with
/// [`group_suffix`] appended when `collision` (that name belongs to another group's template).
pub fn binding_name(name: &str, group: &str, kind: &str, collision: bool) -> String {
    let base = format!("{name}-{}", kind.to_ascii_lowercase());
    if collision {
        format!("{base}-{}", group_suffix(group))
    } else {
        base
    }
}

/// A resource a template depends on (DEP-1): a core-group object in the template's namespace.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Dependency {
    /// `ConfigMap`, `Secret`, `ServiceAccount` or `PersistentVolumeClaim` (all `v1`).
    pub kind: &'static str,
    /// The object's name.
    pub name: String,
}

/// The path of the pod spec inside a workload kind's manifest (DEP-1 kinds).
fn pod_spec_path(api_version: &str, kind: &str) -> Option<&'static str> {
    match (api_version, kind) {
        ("apps/v1", "Deployment" | "StatefulSet" | "DaemonSet" | "ReplicaSet")
        | ("batch/v1", "Job") => Some("/spec/template/spec"),
        ("batch/v1", "CronJob") => Some("/spec/jobTemplate/spec/template/spec"),
        ("v1", "Pod") => Some("/spec"),
        _ => None,
    }
}

/// Whether the kind has a pod template whose dependencies [`dependencies`] reads (DEP-1).
pub fn has_pod_template(api_version: &str, kind: &str) -> bool {
    pod_spec_path(api_version, kind).is_some()
}

/// DEP-1: the ConfigMaps, Secrets, ServiceAccount and PersistentVolumeClaims a workload's pod
/// template refers to — volumes (projected sources included), `env[].valueFrom`, `envFrom`
/// of every container, init and ephemeral container, `imagePullSecrets`, the
/// `serviceAccountName` unless it is `default`, and PVC volumes (a StatefulSet's own
/// `volumeClaimTemplates` excepted). Sorted, without duplicates;
/// empty for kinds without a pod template.
pub fn dependencies(manifest: &Value) -> Vec<Dependency> {
    let api_version = manifest
        .get("apiVersion")
        .and_then(Value::as_str)
        .unwrap_or("");
    let kind = manifest.get("kind").and_then(Value::as_str).unwrap_or("");
    let Some(pod) = pod_spec_path(api_version, kind).and_then(|p| manifest.pointer(p)) else {
        return Vec::new();
    };
    let mut deps = BTreeSet::new();
    let mut add = |kind: &'static str, name: Option<&Value>| {
        if let Some(name) = name.and_then(Value::as_str).filter(|n| !n.is_empty()) {
            deps.insert(Dependency {
                kind,
                name: name.to_owned(),
            });
        }
    };
    for volume in array(pod.get("volumes")) {
        add("ConfigMap", volume.pointer("/configMap/name"));
        add("Secret", volume.pointer("/secret/secretName"));
        add(
            "PersistentVolumeClaim",
            volume.pointer("/persistentVolumeClaim/claimName"),
        );
        for source in array(volume.pointer("/projected/sources")) {
            add("ConfigMap", source.pointer("/configMap/name"));
            add("Secret", source.pointer("/secret/name"));
        }
    }
    for list in ["containers", "initContainers", "ephemeralContainers"] {
        for container in array(pod.get(list)) {
            for env in array(container.get("env")) {
                add("ConfigMap", env.pointer("/valueFrom/configMapKeyRef/name"));
                add("Secret", env.pointer("/valueFrom/secretKeyRef/name"));
            }
            for from in array(container.get("envFrom")) {
                add("ConfigMap", from.pointer("/configMapRef/name"));
                add("Secret", from.pointer("/secretRef/name"));
            }
        }
    }
    for secret in array(pod.get("imagePullSecrets")) {
        add("Secret", secret.get("name"));
    }
    let account = pod
        .get("serviceAccountName")
        .filter(|n| n.as_str() != Some("default"));
    add("ServiceAccount", account);
    // A StatefulSet's claims from its volumeClaimTemplates are made on each member, not
    // propagated.
    let templates: BTreeSet<&str> = array(manifest.pointer("/spec/volumeClaimTemplates"))
        .filter_map(|t| t.pointer("/metadata/name").and_then(Value::as_str))
        .collect();
    deps.into_iter()
        .filter(|d| !(d.kind == "PersistentVolumeClaim" && templates.contains(d.name.as_str())))
        .collect()
}

fn array(value: Option<&Value>) -> impl Iterator<Item = &Value> {
    value.and_then(Value::as_array).into_iter().flatten()
}

#[cfg(test)]
mod tests;
