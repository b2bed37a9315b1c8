//! Which policy claims a workload, and the binding that follows (pure functions of the
//! detector).
//!
//! ```text
//!   Workload ──► namespaced PropagationPolicies of its namespace that match ─┐ none?
//!                 ClusterPropagationPolicies that match ◄────────────────────┘
//!            ──► claimed already and its policy still matches? keep it (PL-3)
//!            ──► else best by: priority (desc) ▸ specificity: name > labelSelector >
//!                kind-only ▸ policy name (asc) (PL-4)
//!            ──► no policy matches: the binding is detached, not deleted (PL-1, PL-5)
//!            ──► ResourceBinding `<ns>/<name>-<kind lowercased>`: spec.resource, replicas,
//!                replicaRequirements, placement, failover, schedulerName (the detector's
//!                fields, DESIGN §3), labelled with the policy's identity
//! ```

use std::cmp::Ordering;
use std::fmt;

use flotilla_core::affinity::label_selector_matches;
use flotilla_core::resource;
use flotilla_core::types as domain;
use flotilla_core::validation::{PERMANENT_ID_LABEL_CLUSTER_POLICY, PERMANENT_ID_LABEL_POLICY};
use flotilla_proto::Resource;
use flotilla_proto::v1;
use flotilla_store::typed::{Stored, namespaced_key, workload_key};

use crate::admission::new_permanent_id;

/// Label: namespace of the PropagationPolicy that claimed a binding (Karmada v1.5).
pub const LABEL_POLICY_NAMESPACE: &str = "propagationpolicy.karmada.io/namespace";
/// Label: name of the PropagationPolicy that claimed a binding (Karmada v1.5).
pub const LABEL_POLICY_NAME: &str = "propagationpolicy.karmada.io/name";
/// Label: name of the ClusterPropagationPolicy that claimed a binding (Karmada v1.5).
pub const LABEL_CLUSTER_POLICY_NAME: &str = "clusterpropagationpolicy.karmada.io/name";
/// Label: the binding's own permanent id, by which its Works are found (docs/design.md, section 4a).
pub const LABEL_BINDING_PERMANENT_ID: &str = "resourcebinding.karmada.io/permanent-id";
/// The template's resourceVersion a binding was last rendered from (PL-6: a Lazy policy's
/// change waits for the template's next change). An annotation, so that recording it never
/// bumps the binding's generation.
/// (The template's generation, not its resourceVersion: the work executor's write of the
/// template's aggregated status moves the one and not the other, and is no change of it.)
pub const ANNOTATION_TEMPLATE_VERSION: &str = "flotilla.io/template-generation";

/// Every label the detector manages on a binding (besides the binding's permanent id).
const POLICY_LABELS: [&str; 5] = [
    LABEL_POLICY_NAMESPACE,
    LABEL_POLICY_NAME,
    PERMANENT_ID_LABEL_POLICY,
    LABEL_CLUSTER_POLICY_NAME,
    PERMANENT_ID_LABEL_CLUSTER_POLICY,
];

/// Identifies a policy.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum PolicyRef {
    /// A PropagationPolicy.
    Namespaced {
        /// Its namespace.
        namespace: String,
        /// Its name.
        name: String,
    },
    /// A ClusterPropagationPolicy.
    Cluster {
        /// Its name.
        name: String,
    },
}

// === impl PolicyRef ===

impl PolicyRef {
    /// The policy's name.
    pub fn name(&self) -> &str {
        match self {
            PolicyRef::Namespaced { name, .. } | PolicyRef::Cluster { name } => name,
        }
    }

    /// The policy a binding's labels name, if any.
    pub fn from_labels(labels: &std::collections::BTreeMap<String, String>) -> Option<Self> {
        if let (Some(namespace), Some(name)) = (
            labels.get(LABEL_POLICY_NAMESPACE),
            labels.get(LABEL_POLICY_NAME),
        ) {
            return Some(PolicyRef::Namespaced {
                namespace: namespace.clone(),
                name: name.clone(),
            });
        }
        labels
            .get(LABEL_CLUSTER_POLICY_NAME)
            .map(|name| PolicyRef::Cluster { name: name.clone() })
    }

    /// The policy's store key (`policies/<ns>/<name>` or `clusterpolicies/<name>`).
    pub fn key(&self) -> String {
        match self {
            PolicyRef::Namespaced { namespace, name } => {
                namespaced_key(v1::PropagationPolicy::PREFIX, namespace, name)
            }
            PolicyRef::Cluster { name } => {
                format!("{}{name}", v1::ClusterPropagationPolicy::PREFIX)
            }
        }
    }
}

impl fmt::Display for PolicyRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PolicyRef::Namespaced { namespace, name } => {
                write!(f, "PropagationPolicy {namespace}/{name}")
            }
            PolicyRef::Cluster { name } => write!(f, "ClusterPropagationPolicy {name}"),
        }
    }
}

/// How specifically a resource selector names a workload (Karmada's implicit priority).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Specificity {
    /// Only apiVersion and kind.
    KindOnly,
    /// A label selector.
    LabelSelector,
    /// The workload's name.
    Name,
}

impl fmt::Display for Specificity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Specificity::KindOnly => "kind only",
            Specificity::LabelSelector => "label selector",
            Specificity::Name => "name",
        })
    }
}

/// How one resource selector matches `workload`, if it does: apiVersion and kind must be
/// equal, the namespace (if set) too; then a name must be equal, else a label selector must
/// match the workload's labels, else the selector matches every object of the kind.
pub fn selector_specificity(
    selector: &v1::ResourceSelector,
    workload: &v1::Workload,
) -> Option<Specificity> {
    if selector.api_version != workload.api_version || selector.kind != workload.kind {
        return None;
    }
    if !selector.namespace.is_empty() && selector.namespace != workload.namespace() {
        return None;
    }
    if !selector.name.is_empty() {
        return (selector.name == workload.name()).then_some(Specificity::Name);
    }
    match &selector.label_selector {
        Some(wire) => {
            let selector = domain::LabelSelector::try_from(wire.clone()).ok()?;
            let labels = workload.meta().map(|m| &m.labels)?;
            label_selector_matches(&selector, labels).then_some(Specificity::LabelSelector)
        }
        None => Some(Specificity::KindOnly),
    }
}

/// How a policy matches `workload`: the most specific of its selectors that match.
pub fn policy_specificity(
    spec: &v1::PropagationSpec,
    workload: &v1::Workload,
) -> Option<Specificity> {
    spec.resource_selectors
        .iter()
        .filter_map(|s| selector_specificity(s, workload))
        .max()
}

/// A policy that may claim workloads.
#[derive(Clone, Copy, Debug)]
pub struct Candidate<'a> {
    /// The policy's metadata.
    pub meta: &'a v1::ObjectMeta,
    /// Its spec.
    pub spec: &'a v1::PropagationSpec,
    /// Whether it is a ClusterPropagationPolicy.
    pub cluster_wide: bool,
}

impl<'a> Candidate<'a> {
    /// A PropagationPolicy as a candidate (`None` without metadata or spec).
    pub fn namespaced(p: &'a v1::PropagationPolicy) -> Option<Self> {
        Some(Candidate {
            meta: p.metadata.as_ref()?,
            spec: p.spec.as_ref()?,
            cluster_wide: false,
        })
    }

    /// A ClusterPropagationPolicy as a candidate.
    pub fn cluster(p: &'a v1::ClusterPropagationPolicy) -> Option<Self> {
        Some(Candidate {
            meta: p.metadata.as_ref()?,
            spec: p.spec.as_ref()?,
            cluster_wide: true,
        })
    }

    fn policy_ref(&self) -> PolicyRef {
        if self.cluster_wide {
            PolicyRef::Cluster {
                name: self.meta.name.clone(),
            }
        } else {
            PolicyRef::Namespaced {
                namespace: self.meta.namespace.clone(),
                name: self.meta.name.clone(),
            }
        }
    }
}

/// The policy that claims a workload, and why.
#[derive(Clone, Debug)]
pub struct Claim<'a> {
    /// The winner.
    pub policy: PolicyRef,
    /// Its metadata.
    pub meta: &'a v1::ObjectMeta,
    /// Its spec (placement, failover, schedulerName are copied into the binding).
    pub spec: &'a v1::PropagationSpec,
    /// How its best selector matched.
    pub specificity: Specificity,
    /// How many policies of the winning scope matched.
    pub matched: usize,
    /// Whether the workload kept the policy that had claimed it (PL-3) rather than the
    /// precedence of PL-4 choosing it.
    pub kept: bool,
    /// The policy this one took the workload from (PL-3, `preemption: Always`).
    pub preempted: Option<PolicyRef>,
}

impl Claim<'_> {
    /// Why this policy won, for logs and events.
    pub fn reason(&self) -> String {
        if let Some(from) = &self.preempted {
            return format!(
                "{} preempts {from}: preemption Always, priority {} (PL-3: a \
                 PropagationPolicy takes a template from any ClusterPropagationPolicy and from a \
                 PropagationPolicy of lower priority; a ClusterPropagationPolicy only from a \
                 ClusterPropagationPolicy of lower priority)",
                self.policy, self.spec.priority
            );
        }
        if self.kept {
            return format!(
                "{} keeps it: a claimed workload stays with its policy while that policy \
                 matches it (PL-3, preemption Never; {} matching)",
                self.policy, self.matched
            );
        }
        let scope = match self.policy {
            PolicyRef::Namespaced { .. } => "namespaced policies win over cluster policies",
            PolicyRef::Cluster { .. } => "no namespaced policy matches",
        };
        format!(
            "{} claims it: matched by {}, priority {}, the best of {} matching ({scope}; then \
             priority, then specificity, then name)",
            self.policy, self.specificity, self.spec.priority, self.matched
        )
    }
}

/// Picks the policy for `workload`.
///
/// - PL-3: a workload already claimed by a policy (`claimed`, from its binding's labels)
///   keeps it as long as that policy exists, is not being deleted and still matches the
///   workload, even when a policy of higher precedence appears (`preemption: Never`, the
///   default) — unless a matching policy with `preemption: Always` may preempt the claimer:
///   a PropagationPolicy preempts any ClusterPropagationPolicy and a PropagationPolicy of
///   lower priority; a ClusterPropagationPolicy only a ClusterPropagationPolicy of lower
///   priority. The best preemptor wins by PL-4's order. (Karmada keeps preemption behind its
///   `PropagationPolicyPreemption` feature gate; Flotilla always honours the field.)
/// - PL-4, for an unclaimed workload (or one whose policy went away): namespaced policies of
///   its namespace first, cluster policies only if none of those matches; among the matching
///   ones the highest `spec.priority`, then the most specific selector, then the smallest
///   name.
///
/// Policies marked for deletion and PropagationPolicies of other namespaces never claim.
pub fn select<'a>(
    workload: &v1::Workload,
    namespaced: &[Candidate<'a>],
    cluster_wide: &[Candidate<'a>],
    claimed: Option<&PolicyRef>,
) -> Option<Claim<'a>> {
    let matching_in = |candidates: &[Candidate<'a>]| -> Vec<(Candidate<'a>, Specificity)> {
        candidates
            .iter()
            .filter(|c| c.meta.deletion_timestamp.is_none())
            .filter(|c| c.cluster_wide || c.meta.namespace == workload.namespace())
            .filter_map(|c| policy_specificity(c.spec, workload).map(|s| (*c, s)))
            .collect()
    };
    let best = |candidates: &[Candidate<'a>]| -> Option<Claim<'a>> {
        let matching = matching_in(candidates);
        let matched = matching.len();
        let (winner, specificity) = matching.into_iter().min_by(|(a, sa), (b, sb)| {
            b.spec
                .priority
                .cmp(&a.spec.priority)
                .then(sb.cmp(sa))
                .then_with(|| a.meta.name.cmp(&b.meta.name))
                .then(Ordering::Equal)
        })?;
        Some(Claim {
            policy: winner.policy_ref(),
            meta: winner.meta,
            spec: winner.spec,
            specificity,
            matched,
            kept: false,
            preempted: None,
        })
    };
    if let Some(claimed) = claimed {
        let scope = match claimed {
            PolicyRef::Namespaced { .. } => namespaced,
            PolicyRef::Cluster { .. } => cluster_wide,
        };
        let matching = matching_in(scope);
        let matched = matching.len();
        if let Some((keeper, specificity)) = matching
            .into_iter()
            .find(|(c, _)| c.policy_ref() == *claimed)
        {
            // PL-3, `preemption: Always`: a PropagationPolicy takes a template from a
            // ClusterPropagationPolicy whatever their priorities, and from a
            // PropagationPolicy of lower priority; a ClusterPropagationPolicy only from a
            // ClusterPropagationPolicy of lower priority.
            let may_preempt = |c: &Candidate<'a>| {
                c.spec.preemption == v1::Preemption::Always as i32
                    && c.policy_ref() != *claimed
                    && match (keeper.cluster_wide, c.cluster_wide) {
                        (true, false) => true,
                        (false, true) => false,
                        _ => c.spec.priority > keeper.spec.priority,
                    }
            };
            let preemptors = |candidates: &[Candidate<'a>]| -> Vec<Candidate<'a>> {
                candidates
                    .iter()
                    .filter(|c| may_preempt(c))
                    .copied()
                    .collect()
            };
            if let Some(mut winner) =
                best(&preemptors(namespaced)).or_else(|| best(&preemptors(cluster_wide)))
            {
                winner.preempted = Some(claimed.clone());
                return Some(winner);
            }
            return Some(Claim {
                policy: keeper.policy_ref(),
                meta: keeper.meta,
                spec: keeper.spec,
                specificity,
                matched,
                kept: true,
                preempted: None,
            });
        }
    }
    best(namespaced).or_else(|| best(cluster_wide))
}

/// The binding keys a workload may have (RM-1): `<ns>/<name>-<kind lowercased>` (Karmada's
/// convention; the namespace is empty for a cluster-scoped template, whose binding is a
/// ClusterResourceBinding), and the same with a suffix naming the group, used only when the
/// first is held by a template of the same kind and name in another group.
pub fn binding_keys_of(workload: &v1::Workload) -> [String; 2] {
    let group = resource::group(&workload.api_version);
    [false, true].map(|collision| {
        namespaced_key(
            v1::ResourceBinding::PREFIX,
            workload.namespace(),
            &resource::binding_name(workload.name(), group, &workload.kind, collision),
        )
    })
}

/// The binding `workload` should have under `claim`: `base` (the stored binding, if any)
/// with the detector's fields set — spec.resource, replicas, replicaRequirements, placement,
/// failover, schedulerName, propagateDeps, preserveResourcesOnDeletion, the policy labels and (once) the binding's permanent id. Every
/// other field (spec.clusters, eviction tasks, status, ...) is kept as it is.
pub fn desired_binding(
    workload: &v1::Workload,
    claim: &Claim<'_>,
    base: Option<&v1::ResourceBinding>,
    name: &str,
) -> v1::ResourceBinding {
    let mut binding = base.cloned().unwrap_or_default();
    let meta = binding.meta_mut();
    name.clone_into(&mut meta.name);
    meta.namespace = workload.namespace().to_owned();
    for label in POLICY_LABELS {
        meta.labels.remove(label);
    }
    let permanent_id = |label: &str| claim.meta.labels.get(label).cloned();
    match &claim.policy {
        PolicyRef::Namespaced { namespace, name } => {
            meta.labels
                .insert(LABEL_POLICY_NAMESPACE.to_owned(), namespace.clone());
            meta.labels
                .insert(LABEL_POLICY_NAME.to_owned(), name.clone());
            if let Some(id) = permanent_id(PERMANENT_ID_LABEL_POLICY) {
                meta.labels.insert(PERMANENT_ID_LABEL_POLICY.to_owned(), id);
            }
        }
        PolicyRef::Cluster { name } => {
            meta.labels
                .insert(LABEL_CLUSTER_POLICY_NAME.to_owned(), name.clone());
            if let Some(id) = permanent_id(PERMANENT_ID_LABEL_CLUSTER_POLICY) {
                meta.labels
                    .insert(PERMANENT_ID_LABEL_CLUSTER_POLICY.to_owned(), id);
            }
        }
    }
    meta.labels
        .entry(LABEL_BINDING_PERMANENT_ID.to_owned())
        .or_insert_with(new_permanent_id);
    meta.annotations.insert(
        ANNOTATION_TEMPLATE_VERSION.to_owned(),
        template_version(workload),
    );
    let spec = binding.spec.get_or_insert_with(Default::default);
    spec.resource = Some(resource_of(workload));
    spec.replicas = workload.replicas;
    spec.replica_requirements = workload.replica_requirements.clone();
    spec.placement = claim.spec.placement.clone();
    spec.failover = claim.spec.failover.clone();
    spec.scheduler_name = claim.spec.scheduler_name.clone();
    spec.propagate_deps = claim.spec.propagate_deps;
    spec.preserve_resources_on_deletion = claim.spec.preserve_resources_on_deletion;
    spec.suspension = claim.spec.suspension.clone();
    spec.conflict_resolution = claim.spec.conflict_resolution;
    binding
}

/// The attached binding of a dependency no policy claims (DEP-2): `base` (the stored one, if
/// any) with the template's identity and no placement; its clusters are those of the
/// `requiredBy` entries (set by [`with_required_by`]), and the scheduler leaves it alone.
pub fn attached_binding(
    workload: &v1::Workload,
    base: Option<&v1::ResourceBinding>,
    name: &str,
) -> v1::ResourceBinding {
    let mut binding = base.cloned().unwrap_or_default();
    let meta = binding.meta_mut();
    name.clone_into(&mut meta.name);
    meta.namespace = workload.namespace().to_owned();
    meta.labels
        .entry(LABEL_BINDING_PERMANENT_ID.to_owned())
        .or_insert_with(new_permanent_id);
    let spec = binding.spec.get_or_insert_with(Default::default);
    spec.resource = Some(resource_of(workload));
    spec.replicas = workload.replicas;
    spec.replica_requirements = workload.replica_requirements.clone();
    binding
}

/// `binding` with `spec.requiredBy` set to `required_by` (DEP-2: the bindings that depend on
/// it, with their clusters).
pub fn with_required_by(
    mut binding: v1::ResourceBinding,
    required_by: &[v1::BindingSnapshot],
) -> v1::ResourceBinding {
    binding
        .spec
        .get_or_insert_with(Default::default)
        .required_by = required_by.to_vec();
    binding
}

/// Whether `binding` exists only because other bindings require it (DEP-2): no placement of
/// its own, so no policy has ever claimed its template.
pub fn is_attached_only(binding: &v1::ResourceBinding) -> bool {
    binding.spec.as_ref().is_none_or(|s| s.placement.is_none())
}

/// The template's generation, as [`ANNOTATION_TEMPLATE_VERSION`] records it (every change of
/// its manifest moves it; a write of its aggregated status does not).
fn template_version(workload: &v1::Workload) -> String {
    workload
        .meta()
        .map(|m| m.generation)
        .unwrap_or_default()
        .to_string()
}

/// PL-6: whether `binding` stays as it is although its policy changed: the policy is Lazy,
/// it claimed the template before this change, and the template has not changed since the
/// binding was rendered from it. A new claim, another policy, or a template change renders
/// the binding from the policy as it is now.
pub fn held_lazily(
    workload: &v1::Workload,
    claim: &Claim<'_>,
    previous: Option<&PolicyRef>,
    binding: &v1::ResourceBinding,
) -> bool {
    claim.spec.activation_preference == v1::ActivationPreference::Lazy as i32
        && previous == Some(&claim.policy)
        && binding
            .meta()
            .and_then(|m| m.annotations.get(ANNOTATION_TEMPLATE_VERSION))
            .is_some_and(|v| *v == template_version(workload))
}

fn resource_of(workload: &v1::Workload) -> v1::ObjectReference {
    v1::ObjectReference {
        api_version: workload.api_version.clone(),
        kind: workload.kind.clone(),
        namespace: workload.namespace().to_owned(),
        name: workload.name().to_owned(),
        uid: workload.meta().map(|m| m.uid.clone()).unwrap_or_default(),
    }
}

/// `binding` detached from its policy (PL-1, PL-5): the policy labels removed, everything
/// else — placement, targets, eviction tasks, status, and so the Works on the members —
/// kept until the workload itself is deleted or another policy claims it.
pub fn detached_binding(binding: &v1::ResourceBinding) -> v1::ResourceBinding {
    let mut detached = binding.clone();
    let meta = detached.meta_mut();
    for label in POLICY_LABELS {
        meta.labels.remove(label);
    }
    detached
}

/// The store key of the workload `binding` is for (from its `spec.resource`).
pub fn workload_key_of(binding: &v1::ResourceBinding) -> Option<String> {
    let r = binding.spec.as_ref()?.resource.as_ref()?;
    Some(workload_key(&r.namespace, &r.api_version, &r.kind, &r.name))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn workload(name: &str, labels: &[(&str, &str)]) -> v1::Workload {
        v1::Workload {
            metadata: Some(v1::ObjectMeta {
                name: name.into(),
                namespace: "default".into(),
                uid: "w-uid".into(),
                labels: labels
                    .iter()
                    .map(|(k, v)| ((*k).into(), (*v).into()))
                    .collect(),
                ..Default::default()
            }),
            api_version: "apps/v1".into(),
            kind: "Deployment".into(),
            manifest: String::new(),
            replicas: 3,
            replica_requirements: None,
            status: String::new(),
        }
    }

    fn selector(name: &str, labels: Option<(&str, &str)>) -> v1::ResourceSelector {
        v1::ResourceSelector {
            api_version: "apps/v1".into(),
            kind: "Deployment".into(),
            namespace: String::new(),
            name: name.into(),
            label_selector: labels.map(|(k, v)| v1::LabelSelector {
                match_labels: [(k.to_owned(), v.to_owned())].into(),
                match_expressions: vec![],
            }),
        }
    }

    fn meta(ns: &str, name: &str) -> v1::ObjectMeta {
        v1::ObjectMeta {
            name: name.into(),
            namespace: ns.into(),
            ..Default::default()
        }
    }

    fn spec(priority: i32, selectors: Vec<v1::ResourceSelector>) -> v1::PropagationSpec {
        v1::PropagationSpec {
            resource_selectors: selectors,
            priority,
            scheduler_name: "default-scheduler".into(),
            ..Default::default()
        }
    }

    #[test]
    fn selectors_match_by_name_labels_or_kind() {
        let w = workload("nginx", &[("app", "nginx")]);
        let cases = [
            (selector("nginx", None), Some(Specificity::Name)),
            (selector("other", None), None),
            // a name wins even if the label selector would not match
            (
                selector("nginx", Some(("app", "x"))),
                Some(Specificity::Name),
            ),
            (
                selector("", Some(("app", "nginx"))),
                Some(Specificity::LabelSelector),
            ),
            (selector("", Some(("app", "x"))), None),
            (selector("", None), Some(Specificity::KindOnly)),
            (
                v1::ResourceSelector {
                    kind: "StatefulSet".into(),
                    ..selector("", None)
                },
                None,
            ),
            (
                v1::ResourceSelector {
                    api_version: "apps/v2".into(),
                    ..selector("", None)
                },
                None,
            ),
            (
                v1::ResourceSelector {
                    namespace: "other".into(),
                    ..selector("", None)
                },
                None,
            ),
        ];
        for (i, (sel, want)) in cases.into_iter().enumerate() {
            assert_eq!(selector_specificity(&sel, &w), want, "case {i}");
        }
    }

    #[test]
    fn pl_4_precedence_namespaced_then_priority_then_specificity_then_name() {
        let w = workload("nginx", &[("app", "nginx")]);
        let (m_kind, m_label, m_name, m_b, m_hi, m_other_ns) = (
            meta("default", "z-kind"),
            meta("default", "y-label"),
            meta("default", "x-name"),
            meta("default", "b-name"),
            meta("default", "w-high"),
            meta("other", "a-elsewhere"),
        );
        let (s_kind, s_label, s_name, s_hi) = (
            spec(0, vec![selector("", None)]),
            spec(0, vec![selector("", Some(("app", "nginx")))]),
            spec(0, vec![selector("nginx", None)]),
            spec(5, vec![selector("", None)]),
        );
        let c = |meta, spec| Candidate {
            meta,
            spec,
            cluster_wide: false,
        };
        let cluster_meta = meta("", "cluster-name");
        let cluster = [Candidate {
            meta: &cluster_meta,
            spec: &s_name,
            cluster_wide: true,
        }];
        let pick =
            |ns: &[Candidate<'_>]| select(&w, ns, &cluster, None).map(|c| c.policy.to_string());
        // specificity: name > label > kind
        assert_eq!(
            pick(&[
                c(&m_kind, &s_kind),
                c(&m_label, &s_label),
                c(&m_name, &s_name)
            ])
            .as_deref(),
            Some("PropagationPolicy default/x-name")
        );
        assert_eq!(
            pick(&[c(&m_kind, &s_kind), c(&m_label, &s_label)]).as_deref(),
            Some("PropagationPolicy default/y-label")
        );
        // priority beats specificity
        assert_eq!(
            pick(&[c(&m_name, &s_name), c(&m_hi, &s_hi)]).as_deref(),
            Some("PropagationPolicy default/w-high")
        );
        // name order breaks ties
        assert_eq!(
            pick(&[c(&m_name, &s_name), c(&m_b, &s_name)]).as_deref(),
            Some("PropagationPolicy default/b-name")
        );
        // a namespaced kind-only policy beats a cluster policy naming the workload
        assert_eq!(
            pick(&[c(&m_kind, &s_kind)]).as_deref(),
            Some("PropagationPolicy default/z-kind")
        );
        // policies of another namespace never claim; the cluster policy does
        assert_eq!(
            pick(&[c(&m_other_ns, &s_name)]).as_deref(),
            Some("ClusterPropagationPolicy cluster-name")
        );
        // a policy being deleted does not claim
        let mut deleting = m_name.clone();
        deleting.deletion_timestamp = Some(prost_types::Timestamp::default());
        assert_eq!(
            pick(&[c(&deleting, &s_name), c(&m_kind, &s_kind)]).as_deref(),
            Some("PropagationPolicy default/z-kind")
        );
        let none: [Candidate<'_>; 0] = [];
        assert!(select(&w, &none, &none, None).is_none());
    }

    #[test]
    fn pl_3_preemption_always_takes_a_claim_from_lower_precedence() {
        let w = workload("nginx", &[]);
        let always = |priority: i32| {
            let mut s = spec(priority, vec![selector("", None)]);
            s.preemption = v1::Preemption::Always as i32;
            s
        };
        let never = |priority: i32| spec(priority, vec![selector("", None)]);
        let (pp_low_m, pp_high_m, pp_eq_m) = (
            meta("default", "pp-low"),
            meta("default", "pp-high"),
            meta("default", "pp-eq"),
        );
        let (cpp_low_m, cpp_high_m) = (meta("", "cpp-low"), meta("", "cpp-high"));
        let pp = |m: &'static str| PolicyRef::Namespaced {
            namespace: "default".into(),
            name: m.into(),
        };
        let cpp = |m: &'static str| PolicyRef::Cluster { name: m.into() };
        type Policies<'m> = Vec<(&'m v1::ObjectMeta, v1::PropagationSpec)>;
        // (what, namespaced (meta, spec), cluster-wide (meta, spec), claimed by, winner)
        let table: Vec<(&str, Policies<'_>, Policies<'_>, PolicyRef, PolicyRef)> = vec![
            (
                "PP Always of higher priority preempts a PP",
                vec![(&pp_low_m, never(1)), (&pp_high_m, always(5))],
                vec![],
                pp("pp-low"),
                pp("pp-high"),
            ),
            (
                "PP Always of equal priority does not",
                vec![(&pp_low_m, never(5)), (&pp_eq_m, always(5))],
                vec![],
                pp("pp-low"),
                pp("pp-low"),
            ),
            (
                "PP Never of higher priority does not",
                vec![(&pp_low_m, never(1)), (&pp_high_m, never(9))],
                vec![],
                pp("pp-low"),
                pp("pp-low"),
            ),
            (
                "PP Always preempts a CPP whatever the priorities",
                vec![(&pp_low_m, always(0))],
                vec![(&cpp_high_m, never(100))],
                cpp("cpp-high"),
                pp("pp-low"),
            ),
            (
                "CPP Always of higher priority preempts a CPP",
                vec![],
                vec![(&cpp_low_m, never(1)), (&cpp_high_m, always(2))],
                cpp("cpp-low"),
                cpp("cpp-high"),
            ),
            (
                "CPP Always never preempts a PP",
                vec![(&pp_low_m, never(0))],
                vec![(&cpp_high_m, always(100))],
                pp("pp-low"),
                pp("pp-low"),
            ),
        ];
        for (what, ns, cw, claimed, want) in &table {
            let namespaced: Vec<Candidate<'_>> = ns
                .iter()
                .map(|(meta, spec)| Candidate {
                    meta,
                    spec,
                    cluster_wide: false,
                })
                .collect();
            let cluster_wide: Vec<Candidate<'_>> = cw
                .iter()
                .map(|(meta, spec)| Candidate {
                    meta,
                    spec,
                    cluster_wide: true,
                })
                .collect();
            let claim = select(&w, &namespaced, &cluster_wide, Some(claimed)).unwrap();
            assert_eq!(&claim.policy, want, "{what}");
            assert_eq!(
                claim.preempted.as_ref(),
                (want != claimed).then_some(claimed),
                "{what}"
            );
            if claim.preempted.is_some() {
                assert!(claim.reason().contains("preempts"), "{}", claim.reason());
            }
        }
    }

    #[test]
    fn pl_3_a_claimed_workload_keeps_its_policy_while_it_matches() {
        let w = workload("nginx", &[("app", "nginx")]);
        let (m_low, m_high, m_other) = (
            meta("default", "low"),
            meta("default", "high"),
            meta("default", "other-app"),
        );
        let s_low = spec(1, vec![selector("", None)]);
        let s_high = spec(50, vec![selector("nginx", None)]);
        let s_other = spec(1, vec![selector("", Some(("app", "other")))]);
        let c = |meta, spec| Candidate {
            meta,
            spec,
            cluster_wide: false,
        };
        let cm = meta("", "everything");
        let cs = spec(100, vec![selector("", None)]);
        let cpp = [Candidate {
            meta: &cm,
            spec: &cs,
            cluster_wide: true,
        }];
        let low = PolicyRef::Namespaced {
            namespace: "default".into(),
            name: "low".into(),
        };
        let pick = |ns: &[Candidate<'_>], cl: &[Candidate<'_>], claimed: Option<&PolicyRef>| {
            select(&w, ns, cl, claimed).map(|c| (c.policy.to_string(), c.kept))
        };
        let both = [c(&m_low, &s_low), c(&m_high, &s_high)];
        for (what, namespaced, cluster, claimed, want, kept) in [
            // unclaimed: PL-4 precedence picks the higher priority
            (
                "unclaimed",
                &both[..],
                &cpp[..],
                None,
                "PropagationPolicy default/high",
                false,
            ),
            // claimed by low: a higher-priority newcomer does not take it (PL-3)
            (
                "claimed",
                &both[..],
                &cpp[..],
                Some(&low),
                "PropagationPolicy default/low",
                true,
            ),
            // the claiming policy is gone: the best remaining one claims
            (
                "gone",
                &both[1..],
                &cpp[..],
                Some(&low),
                "PropagationPolicy default/high",
                false,
            ),
            // a namespaced claim is kept over a cluster policy of higher priority
            (
                "vs cluster",
                &both[..1],
                &cpp[..],
                Some(&low),
                "PropagationPolicy default/low",
                true,
            ),
        ] {
            assert_eq!(
                pick(namespaced, cluster, claimed),
                Some((want.to_owned(), kept)),
                "{what}"
            );
        }
        // the claiming policy no longer matches (PL-5): precedence decides again
        let s_low_other = spec(1, vec![selector("", Some(("app", "other")))]);
        let moved = [c(&m_low, &s_low_other), c(&m_other, &s_other)];
        assert_eq!(
            pick(&moved, &cpp, Some(&low)),
            Some(("ClusterPropagationPolicy everything".to_owned(), false))
        );
        // a claimed policy being deleted no longer holds it
        let mut deleting = m_low.clone();
        deleting.deletion_timestamp = Some(prost_types::Timestamp::default());
        assert_eq!(
            pick(
                &[c(&deleting, &s_low), c(&m_high, &s_high)],
                &cpp,
                Some(&low)
            ),
            Some(("PropagationPolicy default/high".to_owned(), false))
        );
    }

    #[test]
    fn pl_1_a_detached_binding_loses_only_its_policy_labels() {
        let stored = v1::ResourceBinding {
            metadata: Some(v1::ObjectMeta {
                name: "nginx-deployment".into(),
                namespace: "default".into(),
                labels: [
                    (LABEL_POLICY_NAMESPACE.to_owned(), "default".to_owned()),
                    (LABEL_POLICY_NAME.to_owned(), "pp".to_owned()),
                    (PERMANENT_ID_LABEL_POLICY.to_owned(), "pp-id".to_owned()),
                    (LABEL_BINDING_PERMANENT_ID.to_owned(), "b-id".to_owned()),
                    ("user".to_owned(), "kept".to_owned()),
                ]
                .into(),
                ..Default::default()
            }),
            spec: Some(v1::ResourceBindingSpec {
                replicas: 3,
                clusters: v1::TargetCluster::from_pairs(&[("member1", 3)]),
                ..Default::default()
            }),
            status: Some(v1::ResourceBindingStatus::default()),
        };
        let detached = detached_binding(&stored);
        let labels = &detached.metadata.as_ref().unwrap().labels;
        assert_eq!(
            labels.keys().map(String::as_str).collect::<Vec<_>>(),
            [LABEL_BINDING_PERMANENT_ID, "user"]
        );
        assert_eq!(detached.spec, stored.spec, "placement and targets kept");
        assert_eq!(detached.status, stored.status);
        assert_eq!(PolicyRef::from_labels(labels), None);
    }

    #[test]
    fn desired_binding_sets_only_the_detectors_fields() {
        let w = workload("nginx", &[]);
        let mut pmeta = meta("default", "pp");
        pmeta
            .labels
            .insert(PERMANENT_ID_LABEL_POLICY.into(), "pp-id".into());
        let mut pspec = spec(0, vec![selector("nginx", None)]);
        pspec.preserve_resources_on_deletion = true;
        pspec.placement = Some(v1::Placement {
            cluster_tolerations: vec![v1::Toleration {
                key: "k".into(),
                ..Default::default()
            }],
            ..Default::default()
        });
        let claim = select(
            &w,
            &[Candidate {
                meta: &pmeta,
                spec: &pspec,
                cluster_wide: false,
            }],
            &[],
            None,
        )
        .unwrap();
        let mut stored = v1::ResourceBinding {
            metadata: Some(v1::ObjectMeta {
                labels: [
                    (LABEL_CLUSTER_POLICY_NAME.to_owned(), "old".to_owned()),
                    (LABEL_BINDING_PERMANENT_ID.to_owned(), "b-id".to_owned()),
                    ("user".to_owned(), "kept".to_owned()),
                ]
                .into(),
                resource_version: 7,
                ..Default::default()
            }),
            spec: Some(v1::ResourceBindingSpec {
                clusters: v1::TargetCluster::from_pairs(&[("member1", 3)]),
                ..Default::default()
            }),
            status: Some(v1::ResourceBindingStatus {
                scheduler_observed_generation: 4,
                ..Default::default()
            }),
        };
        let b = desired_binding(&w, &claim, Some(&stored), "nginx-deployment");
        let labels = &b.metadata.as_ref().unwrap().labels;
        assert_eq!(labels.get(LABEL_POLICY_NAME).unwrap(), "pp");
        assert_eq!(labels.get(PERMANENT_ID_LABEL_POLICY).unwrap(), "pp-id");
        assert_eq!(labels.get(LABEL_BINDING_PERMANENT_ID).unwrap(), "b-id");
        assert_eq!(labels.get("user").unwrap(), "kept");
        assert!(!labels.contains_key(LABEL_CLUSTER_POLICY_NAME));
        let spec = b.spec.as_ref().unwrap();
        assert_eq!(spec.clusters.len(), 1, "scheduler's field kept");
        assert_eq!(spec.replicas, 3);
        assert_eq!(spec.resource.as_ref().unwrap().uid, "w-uid");
        assert_eq!(spec.placement, pspec.placement);
        assert!(
            spec.preserve_resources_on_deletion,
            "PL-2: the policy's choice"
        );
        assert_eq!(b.status, stored.status);
        assert_eq!(b.metadata.as_ref().unwrap().name, "nginx-deployment");
        // idempotent: applying again changes nothing
        stored = b.clone();
        assert_eq!(
            desired_binding(&w, &claim, Some(&stored), "nginx-deployment"),
            b
        );
        assert_eq!(
            workload_key_of(&b).as_deref(),
            Some(w.key().as_str()),
            "the binding names its workload"
        );
    }
}
