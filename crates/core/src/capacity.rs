//! Resource-aware capacity, as Karmada's general estimator counts it (ES-1..ES-3 in
//! docs/rules.md): what one replica of a workload requests, and how many such replicas a
//! cluster's resource summary still holds.
//!
//! ```text
//!   pod template spec ──replica_requests()──► {cpu: 1500, memory: 268435456, nvidia.com/gpu: 1}
//!   (allocatable − allocated − allocating) per resource ÷ request ──max_replicas()──► 7
//!                                             (and never more than the pods still allowed)
//! ```
//!
//! Quantities are integers: CPU in millicores, every other resource in its unit (bytes for
//! memory and ephemeral-storage), rounded up as Kubernetes' `MilliValue`/`Value` round.
//!
//! cluster-health reports each member's summary (ES-3, `flotilla_member::status`), the api
//! computes a template's requests when it is admitted (ES-1), and the scheduler's SC-8 asks
//! [`max_replicas`] how many replicas each feasible cluster still holds.

use std::collections::BTreeMap;

use serde_json::Value;

use crate::quantity;

pub mod models;

pub use models::{AllocatableModeling, ModelRange, ResourceModel};

/// Resource name → amount (CPU in millicores, others in their unit).
pub type ResourceList = BTreeMap<String, i64>;

/// The `pods` resource: how many more pods a cluster allows.
pub const PODS: &str = "pods";

/// Whether Karmada counts `name` in a replica's requirements (ES-1.4): cpu, memory,
/// ephemeral-storage, pods, and the scalar resources (extended resources such as
/// `nvidia.com/gpu`, `hugepages-*`, `attachable-volumes-*`, names under `kubernetes.io/`).
pub fn is_counted(name: &str) -> bool {
    match name {
        "cpu" | "memory" | "ephemeral-storage" | PODS => true,
        _ => {
            name.starts_with("hugepages-")
                || name.starts_with("attachable-volumes-")
                || name.contains("kubernetes.io/")
                || (name.contains('/') && !name.starts_with("requests."))
        }
    }
}

/// `text` as an amount of `name`: millicores for cpu, units (rounded up) for the rest.
pub fn amount(name: &str, text: &str) -> Result<i64, String> {
    if name == "cpu" {
        quantity::cpu_millis(text)
    } else {
        quantity::parse_scaled(text, 0)
    }
}

/// The counted, parseable, non-negative quantities of a `requests`/`limits`/`overhead` or
/// a node's `allocatable` map. A quantity that does not parse counts as absent (admission
/// refuses such templates; a member would too).
pub fn resource_list(map: Option<&Value>) -> ResourceList {
    map.and_then(Value::as_object)
        .into_iter()
        .flatten()
        .filter(|(name, _)| is_counted(name))
        .filter_map(|(name, q)| {
            let text = match q {
                Value::String(s) => s.clone(),
                Value::Number(n) => n.to_string(),
                _ => return None,
            };
            amount(name, &text)
                .ok()
                .filter(|a| *a >= 0)
                .map(|a| (name.clone(), a))
        })
        .collect()
}

/// One container's requests, each limit standing in for a missing request (ES-1.1).
fn container_requests(container: &Value) -> ResourceList {
    let resources = container.get("resources");
    let mut requests = resource_list(resources.and_then(|r| r.get("requests")));
    for (name, limit) in resource_list(resources.and_then(|r| r.get("limits"))) {
        requests.entry(name).or_insert(limit);
    }
    requests
}

fn containers<'a>(spec: &'a Value, field: &str) -> impl Iterator<Item = &'a Value> {
    spec.get(field)
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
}

/// A pod's effective requests from its parts (ES-1.2, ES-1.3): the sum over `containers`,
/// raised to the largest single init container per resource, plus `overhead`; amounts that
/// are not positive are left out.
pub fn effective_requests(
    containers: impl IntoIterator<Item = ResourceList>,
    init_containers: impl IntoIterator<Item = ResourceList>,
    overhead: ResourceList,
) -> ResourceList {
    let mut total = ResourceList::new();
    for c in containers {
        for (name, a) in c {
            let sum = total.entry(name).or_insert(0);
            *sum = sum.saturating_add(a);
        }
    }
    for c in init_containers {
        for (name, a) in c {
            let at = total.entry(name).or_insert(0);
            *at = (*at).max(a);
        }
    }
    for (name, a) in overhead {
        let sum = total.entry(name).or_insert(0);
        *sum = sum.saturating_add(a);
    }
    total.retain(|_, a| *a > 0);
    total
}

/// What one replica of a pod template requests (ES-1): the sum over its containers, raised
/// to the largest single init container per resource, plus the pod's overhead; amounts that
/// are not positive are left out. `spec` is the pod spec (`spec.template.spec`). Empty when
/// nothing is requested.
///
/// As Karmada v1.13, restartable (sidecar) init containers are taken like any other init
/// container (Kubernetes' scheduler adds them to the sum instead).
pub fn replica_requests(spec: &Value) -> ResourceList {
    effective_requests(
        containers(spec, "containers").map(container_requests),
        containers(spec, "initContainers").map(container_requests),
        resource_list(spec.get("overhead")),
    )
}

/// `list` as people read it: `cpu 250m, memory 128Mi, nvidia.com/gpu 1` (`none` when empty).
pub fn describe(list: &ResourceList) -> String {
    if list.is_empty() {
        return "none".to_owned();
    }
    list.iter()
        .map(|(name, &a)| format!("{name} {}", quantity::format(name, a)))
        .collect::<Vec<_>>()
        .join(", ")
}

/// A cluster's resource summary, as its status reports it (ES-3): the sum of its nodes'
/// allocatable, the requests of its pods bound to a node and not finished (allocated), and
/// the requests of its pods not yet bound (allocating). Each includes `pods`, a count.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Summary {
    /// Sum of the nodes' `status.allocatable`.
    pub allocatable: ResourceList,
    /// Requests of the bound, unfinished pods.
    pub allocated: ResourceList,
    /// Requests of the pods without a node.
    pub allocating: ResourceList,
    /// Nodes per grade of the cluster's resource models (ES-4.2), in the models' order;
    /// empty without models.
    pub allocatable_modelings: Vec<AllocatableModeling>,
}

impl Summary {
    /// A summary of `pods` free pods and no other resource: what a member reporting pods
    /// alone offers (a replica requesting cpu fits nowhere in it).
    pub fn with_pods(pods: i64) -> Self {
        Summary {
            allocatable: [(PODS.to_owned(), pods)].into(),
            ..Default::default()
        }
    }

    /// Allocatable − allocated − allocating of `name` (absent parts count as 0).
    pub fn free(&self, name: &str) -> i64 {
        let of = |l: &ResourceList| l.get(name).copied().unwrap_or(0);
        of(&self.allocatable)
            .saturating_sub(of(&self.allocated))
            .saturating_sub(of(&self.allocating))
    }

    /// Whether some resource has more free than in `before` (a node added, a pod gone), so
    /// that a replica which did not fit then may fit now (SC-2.6).
    pub fn has_more_room_than(&self, before: &Summary) -> bool {
        // ES-4.3 counts the nodes of a grade and above: more of them fit more replicas
        let from = |s: &Summary, grade: u32| {
            s.allocatable_modelings
                .iter()
                .filter(|m| m.grade >= grade)
                .fold(0i64, |n, m| n.saturating_add(m.count))
        };
        self.allocatable
            .keys()
            .any(|name| self.free(name) > before.free(name))
            || self
                .allocatable_modelings
                .iter()
                .any(|m| from(self, m.grade) > from(before, m.grade))
    }
}

/// What bounds an estimate of ES-2, for the explanations (`flotilla explain binding`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Bound {
    /// ES-2.1: no summary, nothing is known to fit.
    NoSummary,
    /// ES-2.2/ES-2.4: the pods still allowed.
    Pods,
    /// ES-2.3: the free amount of this resource, divided by the request.
    Resource(String),
    /// ES-2.3: the cluster does not list this requested resource.
    Missing(String),
    /// ES-4.3: the nodes of the cluster's resource models from this grade on.
    Models {
        /// The least grade whose min covers every request.
        from_grade: u32,
    },
}

impl std::fmt::Display for Bound {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Bound::NoSummary => f.write_str("no resource summary"),
            Bound::Pods => f.write_str(PODS),
            Bound::Resource(name) => f.write_str(name),
            Bound::Missing(name) => write!(f, "{name} (the cluster has none)"),
            Bound::Models { from_grade } => {
                write!(f, "nodes of grade {from_grade} and up (resource models)")
            }
        }
    }
}

/// How many more replicas requesting `requests` each fit in a cluster with `summary`
/// (ES-2, Karmada's general estimator over the cluster's summed resources):
/// - no summary: 0 (nothing is known to fit);
/// - the pods still allowed (allocatable − allocated − allocating pods) bound it, 0 when
///   none are;
/// - each positive request divides the free amount of its resource (a resource the
///   cluster does not list, or has none of free, gives 0), and the least quotient wins;
/// - without positive requests, the pods still allowed.
///
/// A cluster with resource models whose nodes have been counted is estimated from them
/// instead (ES-4.3), unless a requested resource is not in its models.
pub fn max_replicas(
    summary: Option<&Summary>,
    models: &[ResourceModel],
    requests: &ResourceList,
) -> i64 {
    estimate(summary, models, requests).0
}

/// [`max_replicas`], with what bounds it: the first resource (by name) whose quotient is the
/// least, the grades of the resource models, or the pods when nothing bounds it more
/// tightly.
pub fn estimate(
    summary: Option<&Summary>,
    models: &[ResourceModel],
    requests: &ResourceList,
) -> (i64, Bound) {
    let Some(summary) = summary else {
        return (0, Bound::NoSummary);
    };
    let allowed = summary.free(PODS);
    if allowed <= 0 {
        return (0, Bound::Pods);
    }
    let requested = requests.iter().any(|(n, a)| *a > 0 && n != PODS);
    if requested
        && !summary.allocatable_modelings.is_empty()
        && let Some((fit, from_grade)) =
            models::replicas_by_models(models, &summary.allocatable_modelings, requests)
    {
        return if fit < allowed {
            (fit, Bound::Models { from_grade })
        } else {
            (allowed, Bound::Pods)
        };
    }
    let mut most = (allowed, Bound::Pods);
    for (name, &request) in requests {
        if request <= 0 || name == PODS {
            continue;
        }
        if !summary.allocatable.contains_key(name) {
            return (0, Bound::Missing(name.clone()));
        }
        let fit = summary.free(name).max(0) / request;
        if fit < most.0 {
            most = (fit, Bound::Resource(name.clone()));
        }
        if fit == 0 {
            break;
        }
    }
    most
}

#[cfg(test)]
mod tests;
