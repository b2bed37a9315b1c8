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
//! This module is the rule only. The scheduler still divides by the member's pod count
//! (SC-8); wiring these rules into cluster-health's summary and the scheduler is the rest of
//! the capacity work (docs/rules.md says which parts are in force).

use std::collections::BTreeMap;

use serde_json::Value;

use crate::quantity;

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

/// The counted, parseable quantities of a `requests`/`limits`/`overhead` map. A quantity
/// that does not parse counts as absent (admission refuses such templates; a member would
/// too).
fn list(map: Option<&Value>) -> ResourceList {
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
            amount(name, &text).ok().map(|a| (name.clone(), a))
        })
        .collect()
}

/// One container's requests, each limit standing in for a missing request (ES-1.1).
fn container_requests(container: &Value) -> ResourceList {
    let resources = container.get("resources");
    let mut requests = list(resources.and_then(|r| r.get("requests")));
    for (name, limit) in list(resources.and_then(|r| r.get("limits"))) {
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

/// What one replica of a pod template requests (ES-1): the sum over its containers, raised
/// to the largest single init container per resource, plus the pod's overhead; amounts that
/// are not positive are left out. `spec` is the pod spec (`spec.template.spec`). Empty when
/// nothing is requested.
///
/// As Karmada v1.13, restartable (sidecar) init containers are taken like any other init
/// container (Kubernetes' scheduler adds them to the sum instead).
pub fn replica_requests(spec: &Value) -> ResourceList {
    let mut total = ResourceList::new();
    for c in containers(spec, "containers") {
        for (name, a) in container_requests(c) {
            let sum = total.entry(name).or_insert(0);
            *sum = sum.saturating_add(a);
        }
    }
    for c in containers(spec, "initContainers") {
        for (name, a) in container_requests(c) {
            let at = total.entry(name).or_insert(0);
            *at = (*at).max(a);
        }
    }
    for (name, a) in list(spec.get("overhead")) {
        let sum = total.entry(name).or_insert(0);
        *sum = sum.saturating_add(a);
    }
    total.retain(|_, a| *a > 0);
    total
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
}

impl Summary {
    /// Allocatable − allocated − allocating of `name` (absent parts count as 0).
    pub fn free(&self, name: &str) -> i64 {
        let of = |l: &ResourceList| l.get(name).copied().unwrap_or(0);
        of(&self.allocatable)
            .saturating_sub(of(&self.allocated))
            .saturating_sub(of(&self.allocating))
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
pub fn max_replicas(summary: Option<&Summary>, requests: &ResourceList) -> i64 {
    let Some(summary) = summary else {
        return 0;
    };
    let allowed = summary.free(PODS);
    if allowed <= 0 {
        return 0;
    }
    let mut most = allowed;
    for (name, &request) in requests {
        if request <= 0 || name == PODS {
            continue;
        }
        if !summary.allocatable.contains_key(name) {
            return 0;
        }
        let free = summary.free(name);
        if free <= 0 {
            return 0;
        }
        most = most.min(free / request);
    }
    most
}

#[cfg(test)]
mod tests;
