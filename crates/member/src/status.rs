//! What the control plane keeps of a member's objects: a Work's status from the object the
//! member returned (health by the IN-3 rules, ready replicas, the `status` field), and the
//! cluster's capacity summary from its nodes and pods (CH-5.2).

use flotilla_core::interpret;
use flotilla_core::quantity;
use flotilla_core::types::ResourceHealth;
use flotilla_proto::v1;
use serde_json::Value;

/// The member's view of one applied object, as a Work's status records it.
pub fn manifest_status(object: &Value) -> v1::ManifestStatus {
    let s = |p: &str| {
        object
            .pointer(p)
            .and_then(Value::as_str)
            .unwrap_or_default()
    };
    let health = match interpret::health(object) {
        ResourceHealth::Healthy => v1::ResourceHealth::Healthy,
        ResourceHealth::Unhealthy => v1::ResourceHealth::Unhealthy,
        ResourceHealth::Unknown => v1::ResourceHealth::Unknown,
    };
    let replicas = object
        .pointer("/spec/replicas")
        .and_then(Value::as_i64)
        .and_then(|n| i32::try_from(n).ok())
        .unwrap_or(0);
    v1::ManifestStatus {
        resource: Some(v1::ObjectReference {
            api_version: s("/apiVersion").to_owned(),
            kind: s("/kind").to_owned(),
            namespace: s("/metadata/namespace").to_owned(),
            name: s("/metadata/name").to_owned(),
            uid: s("/metadata/uid").to_owned(),
        }),
        manifest: String::new(),
        replicas,
        ready_replicas: interpret::ready_replicas(object),
        health: health.into(),
        status: object
            .get("status")
            .filter(|v| v.as_object().is_some_and(|m| !m.is_empty()))
            .map_or_else(|| "{}".to_owned(), Value::to_string),
        applied_at: None,
    }
}

/// A quantity of `resources` (a `{"cpu": "4", "memory": "16Gi", "pods": "110"}` map).
fn quantities(resources: Option<&Value>) -> v1::ResourceQuantities {
    let read = |key: &str, parse: fn(&str) -> Result<i64, String>| {
        resources
            .and_then(|r| r.get(key))
            .and_then(Value::as_str)
            .and_then(|q| parse(q).ok())
            .unwrap_or(0)
    };
    v1::ResourceQuantities {
        cpu_millis: read("cpu", quantity::cpu_millis),
        memory_bytes: read("memory", quantity::memory_bytes),
        pods: read("pods", |q| quantity::parse_scaled(q, 0)),
    }
}

fn add(a: &mut v1::ResourceQuantities, b: &v1::ResourceQuantities) {
    a.cpu_millis = a.cpu_millis.saturating_add(b.cpu_millis);
    a.memory_bytes = a.memory_bytes.saturating_add(b.memory_bytes);
    a.pods = a.pods.saturating_add(b.pods);
}

fn node_ready(node: &Value) -> bool {
    node.pointer("/status/conditions")
        .and_then(Value::as_array)
        .is_some_and(|cs| {
            cs.iter().any(|c| {
                c.get("type").and_then(Value::as_str) == Some("Ready")
                    && c.get("status").and_then(Value::as_str) == Some("True")
            })
        })
}

/// A pod's requests: the sum over its containers, and one pod.
fn pod_requests(pod: &Value) -> v1::ResourceQuantities {
    let mut total = v1::ResourceQuantities {
        pods: 1,
        ..Default::default()
    };
    for c in pod
        .pointer("/spec/containers")
        .and_then(Value::as_array)
        .map(Vec::as_slice)
        .unwrap_or_default()
    {
        let r = quantities(c.pointer("/resources/requests"));
        total.cpu_millis = total.cpu_millis.saturating_add(r.cpu_millis);
        total.memory_bytes = total.memory_bytes.saturating_add(r.memory_bytes);
    }
    total
}

/// The capacity summary as Karmada's cluster status controller computes it: allocatable is
/// the sum of the Ready nodes' `status.allocatable`; allocated the requests of the pods bound
/// to a node that have not finished (Succeeded or Failed). Allocatable replicas is the pods
/// that still fit: allocatable pods minus every unfinished pod, bound or Pending.
pub fn resource_summary<'a>(
    nodes: impl IntoIterator<Item = &'a Value>,
    pods: impl IntoIterator<Item = &'a Value>,
) -> v1::ResourceSummary {
    let mut allocatable = v1::ResourceQuantities::default();
    for node in nodes.into_iter().filter(|n| node_ready(n)) {
        add(
            &mut allocatable,
            &quantities(node.pointer("/status/allocatable")),
        );
    }
    let mut allocated = v1::ResourceQuantities::default();
    let mut unfinished = 0i64;
    for pod in pods {
        let phase = pod
            .pointer("/status/phase")
            .and_then(Value::as_str)
            .unwrap_or_default();
        if matches!(phase, "Succeeded" | "Failed") {
            continue;
        }
        unfinished += 1;
        let bound = pod
            .pointer("/spec/nodeName")
            .and_then(Value::as_str)
            .is_some_and(|n| !n.is_empty());
        if bound {
            add(&mut allocated, &pod_requests(pod));
        }
    }
    v1::ResourceSummary {
        allocatable_replicas: Some(allocatable.pods.saturating_sub(unfinished).max(0)),
        allocatable: Some(allocatable),
        allocated: Some(allocated),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn in_3_manifest_status_reads_health_and_replicas() {
        let object = json!({
            "apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "web", "namespace": "default", "generation": 2, "uid": "u1"},
            "spec": {"replicas": 3},
            "status": {"observedGeneration": 2, "replicas": 3, "updatedReplicas": 3,
                       "readyReplicas": 2, "availableReplicas": 2},
        });
        let s = manifest_status(&object);
        assert_eq!(s.health, v1::ResourceHealth::Unhealthy as i32);
        assert_eq!((s.replicas, s.ready_replicas), (3, 2));
        assert_eq!(s.resource.as_ref().map(|r| r.name.as_str()), Some("web"));
        let status: Value = serde_json::from_str(&s.status).expect("json");
        assert_eq!(status["readyReplicas"], 2);

        let config = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}});
        let s = manifest_status(&config);
        assert_eq!(s.health, v1::ResourceHealth::Healthy as i32);
        assert_eq!(s.status, "{}");
    }

    #[test]
    fn ch_5_2_summary_from_nodes_and_pods() {
        let node = |ready: &str, cpu: &str, pods: &str| {
            json!({"status": {"allocatable": {"cpu": cpu, "memory": "1Gi", "pods": pods},
                              "conditions": [{"type": "Ready", "status": ready}]}})
        };
        let pod = |node: &str, phase: &str, cpu: &str| {
            json!({"spec": {"nodeName": node, "containers": [
                        {"resources": {"requests": {"cpu": cpu, "memory": "128Mi"}}},
                        {"resources": {}}]},
                   "status": {"phase": phase}})
        };
        let nodes = [
            node("True", "4", "10"),
            node("True", "500m", "5"),
            node("False", "64", "100"),
        ];
        let pods = [
            pod("n1", "Running", "250m"),
            pod("n1", "Succeeded", "1"),
            pod("", "Pending", "1"),
        ];
        let s = resource_summary(&nodes, &pods);
        let allocatable = s.allocatable.expect("allocatable");
        assert_eq!((allocatable.cpu_millis, allocatable.pods), (4500, 15));
        assert_eq!(allocatable.memory_bytes, 2 << 30);
        let allocated = s.allocated.expect("allocated");
        assert_eq!(
            (allocated.cpu_millis, allocated.memory_bytes, allocated.pods),
            (250, 128 << 20, 1)
        );
        // 15 pods fit; one runs and one is Pending
        assert_eq!(s.allocatable_replicas, Some(13));
    }
}
