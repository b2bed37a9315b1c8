//! What the control plane keeps of a member's objects: a Work's status from the object the
//! member returned (health by the IN-3 rules, ready replicas, the `status` field), and the
//! cluster's capacity summary from its nodes and pods (CH-5.2).

use std::collections::BTreeMap;

use flotilla_core::capacity::{self, ResourceList, ResourceModel, Summary};
use flotilla_core::interpret;
use flotilla_core::types::ResourceHealth;
use flotilla_proto::convert::quantities;
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
    // a count the member sends is never taken below zero (a negative one, from a broken or
    // hostile member, found by `malformed_member_objects_read_safely`)
    let replicas = object
        .pointer("/spec/replicas")
        .and_then(Value::as_i64)
        .and_then(|n| i32::try_from(n).ok())
        .unwrap_or(0)
        .max(0);
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
        ready_replicas: interpret::ready_replicas(object).max(0),
        health: health.into(),
        status: object
            .get("status")
            .filter(|v| v.as_object().is_some_and(|m| !m.is_empty()))
            .map_or_else(|| "{}".to_owned(), Value::to_string),
        applied_at: None,
        generation: object
            .pointer("/metadata/generation")
            .and_then(Value::as_i64)
            .unwrap_or(0)
            .max(0),
        resource_version: s("/metadata/resourceVersion").to_owned(),
    }
}

/// Where the member object of `status` stood when it was read (WE-7.1).
pub fn stand(status: &v1::ManifestStatus) -> flotilla_core::interpret::Stand {
    flotilla_core::interpret::Stand {
        uid: status
            .resource
            .as_ref()
            .map(|r| r.uid.clone())
            .unwrap_or_default(),
        generation: (status.generation > 0).then_some(status.generation),
        resource_version: status.resource_version.clone(),
    }
}

/// Where the member object stood when the apply that `status` records returned it; `None`
/// when the status does not say (written before Flotilla recorded it, or by an old agent).
pub fn applied_stand(status: &v1::WorkStatus) -> Option<flotilla_core::interpret::Stand> {
    (!status.member_resource_version.is_empty() || !status.member_uid.is_empty()).then(|| {
        flotilla_core::interpret::Stand {
            uid: status.member_uid.clone(),
            generation: (status.member_generation > 0).then_some(status.member_generation),
            resource_version: status.member_resource_version.clone(),
        }
    })
}

/// Records in `status` where the applied object stood (`member`: the apply's answer).
pub fn record_applied_stand(status: &mut v1::WorkStatus, member: &v1::ManifestStatus) {
    let s = stand(member);
    status.member_uid = s.uid;
    status.member_generation = s.generation.unwrap_or(0);
    status.member_resource_version = s.resource_version;
}

/// A quantity of `resources` (a `{"cpu": "4", "memory": "16Gi", "pods": "110"}` map).
fn add(a: &mut ResourceList, b: &ResourceList) {
    for (name, amount) in b {
        let sum = a.entry(name.clone()).or_insert(0);
        *sum = sum.saturating_add(*amount);
    }
}

/// A node as the capacity summary reads it: its conditions and `status.allocatable`. Lists
/// are parsed straight into this shape, so the rest of every node is skipped by the parser
/// rather than built as JSON values.
#[derive(Debug, Default, serde::Deserialize)]
pub struct NodeCapacity {
    #[serde(default)]
    metadata: Option<NodeMeta>,
    #[serde(default)]
    status: Option<NodeStatus>,
}

#[derive(Debug, Default, serde::Deserialize)]
struct NodeMeta {
    #[serde(default)]
    name: Option<String>,
}

#[derive(Debug, Default, serde::Deserialize)]
struct NodeStatus {
    #[serde(default)]
    allocatable: Option<Value>,
    #[serde(default)]
    conditions: Option<Vec<Condition>>,
}

#[derive(Debug, Default, serde::Deserialize)]
struct Condition {
    #[serde(default, rename = "type")]
    type_: Option<String>,
    #[serde(default)]
    status: Option<String>,
}

/// A pod as the capacity summary reads it: its phase, its node and its containers' requests
/// (the rest of the pod, most of its spec, is skipped by the parser).
#[derive(Debug, Default, serde::Deserialize)]
pub struct PodCapacity {
    #[serde(default)]
    spec: Option<PodSpec>,
    #[serde(default)]
    status: Option<PodStatus>,
}

#[derive(Debug, Default, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
struct PodSpec {
    #[serde(default)]
    node_name: Option<String>,
    #[serde(default)]
    containers: Option<Vec<Container>>,
    #[serde(default)]
    init_containers: Option<Vec<Container>>,
    #[serde(default)]
    overhead: Option<Value>,
}

#[derive(Debug, Default, serde::Deserialize)]
struct Container {
    #[serde(default)]
    resources: Option<Resources>,
}

#[derive(Debug, Default, serde::Deserialize)]
struct Resources {
    #[serde(default)]
    requests: Option<Value>,
}

#[derive(Debug, Default, serde::Deserialize)]
struct PodStatus {
    #[serde(default)]
    phase: Option<String>,
}

impl NodeCapacity {
    fn ready(&self) -> bool {
        self.status
            .as_ref()
            .and_then(|s| s.conditions.as_ref())
            .is_some_and(|cs| {
                cs.iter().any(|c| {
                    c.type_.as_deref() == Some("Ready") && c.status.as_deref() == Some("True")
                })
            })
    }

    fn name(&self) -> &str {
        self.metadata
            .as_ref()
            .and_then(|m| m.name.as_deref())
            .unwrap_or_default()
    }

    fn allocatable(&self) -> ResourceList {
        capacity::resource_list(self.status.as_ref().and_then(|s| s.allocatable.as_ref()))
    }
}

impl PodCapacity {
    fn finished(&self) -> bool {
        let phase = self.status.as_ref().and_then(|s| s.phase.as_deref());
        matches!(phase, Some("Succeeded" | "Failed"))
    }

    fn node(&self) -> Option<&str> {
        self.spec
            .as_ref()
            .and_then(|s| s.node_name.as_deref())
            .filter(|n| !n.is_empty())
    }

    fn bound(&self) -> bool {
        self.spec
            .as_ref()
            .and_then(|s| s.node_name.as_deref())
            .is_some_and(|n| !n.is_empty())
    }

    /// The pod's requests, and one pod (ES-3): the sum over its containers, raised to its
    /// largest init container per resource, plus its overhead (limits do not stand in for
    /// requests here, as Karmada's status controller counts them).
    fn requests(&self) -> ResourceList {
        let spec = self.spec.as_ref();
        let requests = |c: &Container| {
            capacity::resource_list(c.resources.as_ref().and_then(|r| r.requests.as_ref()))
        };
        let of = |list: Option<&Vec<Container>>| {
            list.map(Vec::as_slice)
                .unwrap_or_default()
                .iter()
                .map(requests)
                .collect::<Vec<_>>()
        };
        let mut total = capacity::effective_requests(
            of(spec.and_then(|s| s.containers.as_ref())),
            of(spec.and_then(|s| s.init_containers.as_ref())),
            capacity::resource_list(spec.and_then(|s| s.overhead.as_ref())),
        );
        total.insert(capacity::PODS.to_owned(), 1);
        total
    }
}

/// The capacity summary as Karmada's cluster status controller computes it (ES-3):
/// allocatable is the sum of the Ready nodes' `status.allocatable` (Flotilla: Karmada sums
/// every node; a node that is not Ready runs nothing new); allocated the requests of the
/// pods bound to a node that have not finished (Succeeded or Failed); allocating the
/// requests of the pods no node has taken yet. Allocatable replicas is the pods that still
/// fit: allocatable pods minus every unfinished pod, bound or Pending.
///
/// With resource models (`models`, the cluster's `spec.resourceModels`), the Ready nodes are
/// counted per grade of what each has free: its allocatable minus the requests of its
/// unfinished pods (ES-4.2).
pub fn resource_summary<'a>(
    nodes: impl IntoIterator<Item = &'a NodeCapacity>,
    pods: impl IntoIterator<Item = &'a PodCapacity>,
    models: &[ResourceModel],
) -> v1::ResourceSummary {
    let mut summary = Summary::default();
    // each Ready node's free resources, by name (for the models)
    let mut free: BTreeMap<&str, ResourceList> = BTreeMap::new();
    for node in nodes.into_iter().filter(|n| n.ready()) {
        let allocatable = node.allocatable();
        add(&mut summary.allocatable, &allocatable);
        free.insert(node.name(), allocatable);
    }
    let mut unfinished = 0i64;
    for pod in pods {
        if !pod.finished()
            && let Some(node) = pod.node().and_then(|n| free.get_mut(n))
        {
            for (name, amount) in pod.requests() {
                let left = node.entry(name).or_insert(0);
                *left = left.saturating_sub(amount);
            }
        }
        if !pod.bound() {
            // as Karmada: a pod without a node is allocating whatever its phase
            add(&mut summary.allocating, &pod.requests());
        }
        if pod.finished() {
            continue;
        }
        unfinished += 1;
        if pod.bound() {
            add(&mut summary.allocated, &pod.requests());
        }
    }
    let allocatable_pods = summary
        .allocatable
        .get(capacity::PODS)
        .copied()
        .unwrap_or(0);
    v1::ResourceSummary {
        allocatable_replicas: Some(allocatable_pods.saturating_sub(unfinished).max(0)),
        allocatable: Some(quantities(&summary.allocatable)),
        allocated: Some(quantities(&summary.allocated)),
        allocating: Some(quantities(&summary.allocating)),
        allocatable_modelings: if models.is_empty() {
            Vec::new()
        } else {
            capacity::models::allocatable_modelings(models, free.values())
                .into_iter()
                .map(|m| v1::AllocatableModeling {
                    grade: m.grade,
                    count: m.count,
                })
                .collect()
        },
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
        // as a list's items arrive: JSON text, with fields the summary does not read
        let node = |ready: &str, cpu: &str, pods: &str| -> NodeCapacity {
            let node = json!({"metadata": {"name": "n", "labels": {"zone": "a"}},
                              "status": {"allocatable": {"cpu": cpu, "memory": "1Gi", "pods": pods},
                              "capacity": {"cpu": "64"}, "images": [{"names": ["nginx"]}],
                              "conditions": [{"type": "MemoryPressure", "status": "False"},
                                             {"type": "Ready", "status": ready,
                                              "reason": "KubeletReady"}]}});
            serde_json::from_str(&node.to_string()).expect("a node")
        };
        let pod = |node: &str, phase: &str, cpu: &str| -> PodCapacity {
            let pod = json!({"spec": {"nodeName": node, "volumes": [{"name": "v"}], "containers": [
                        {"name": "c", "env": [{"name": "A", "value": "1"}],
                         "resources": {"requests": {"cpu": cpu, "memory": "128Mi"}}},
                        {"resources": {}}]},
                   "status": {"phase": phase, "conditions": null}});
            serde_json::from_str(&pod.to_string()).expect("a pod")
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
        let s = resource_summary(&nodes, &pods, &[]);
        let allocatable = s.allocatable.expect("allocatable");
        assert_eq!((allocatable.cpu_millis, allocatable.pods), (4500, 15));
        assert_eq!(allocatable.memory_bytes, 2 << 30);
        let allocated = s.allocated.expect("allocated");
        assert_eq!(
            (allocated.cpu_millis, allocated.memory_bytes, allocated.pods),
            (250, 128 << 20, 1)
        );
        // the Pending pod, on no node yet, is allocating
        let allocating = s.allocating.expect("allocating");
        assert_eq!(
            (
                allocating.cpu_millis,
                allocating.memory_bytes,
                allocating.pods
            ),
            (1000, 128 << 20, 1)
        );
        // 15 pods fit; one runs and one is Pending
        assert_eq!(s.allocatable_replicas, Some(13));

        // ES-3: init containers raise the sum, the overhead is added, limits are not requests
        let pod: PodCapacity = serde_json::from_value(json!({"spec": {
            "nodeName": "n1",
            "containers": [{"resources": {"requests": {"cpu": "1"}, "limits": {"memory": "1Gi"}}},
                           {"resources": {"requests": {"cpu": "500m"}}}],
            "initContainers": [{"resources": {"requests": {"cpu": "2", "memory": "64Mi"}}}],
            "overhead": {"cpu": "100m"}}}))
        .expect("a pod");
        let r = pod.requests();
        let want: ResourceList = [
            ("cpu".to_owned(), 2100),
            ("memory".to_owned(), 64 << 20),
            ("pods".to_owned(), 1),
        ]
        .into();
        assert_eq!(r, want);

        // ES-4.2: with resource models each Ready node is counted in the grade of what it
        // has free (allocatable minus its unfinished pods' requests)
        let node = |name: &str, cpu: &str, ready: &str| -> NodeCapacity {
            serde_json::from_value(json!({"metadata": {"name": name}, "status": {
                "allocatable": {"cpu": cpu, "memory": "8Gi", "pods": "10"},
                "conditions": [{"type": "Ready", "status": ready}]}}))
            .expect("a node")
        };
        let on = |node: &str, cpu: &str, phase: &str| -> PodCapacity {
            serde_json::from_value(json!({"spec": {"nodeName": node,
                "containers": [{"resources": {"requests": {"cpu": cpu}}}]},
                "status": {"phase": phase}}))
            .expect("a pod")
        };
        let grades = [0u32, 1].map(|g| ResourceModel {
            grade: g,
            ranges: vec![capacity::ModelRange {
                name: "cpu".into(),
                min: i64::from(g) * 2000,
                max: if g == 0 { 2000 } else { i64::MAX },
            }],
        });
        let nodes = [
            node("big", "4", "True"),
            node("busy", "4", "True"),
            node("down", "4", "False"),
        ];
        let pods = [on("busy", "3", "Running"), on("big", "3", "Succeeded")];
        let s = resource_summary(&nodes, &pods, &grades);
        let counts: Vec<(u32, i64)> = s
            .allocatable_modelings
            .iter()
            .map(|m| (m.grade, m.count))
            .collect();
        assert_eq!(
            counts,
            [(0, 1), (1, 1)],
            "busy has 1 CPU free (grade 0), big 4 (its pod finished), down is not Ready"
        );
        assert!(
            resource_summary(&nodes, &pods, &[])
                .allocatable_modelings
                .is_empty()
        );

        // extended resources are summed too, and reach the wire in `scalar`
        let gpu_node: NodeCapacity = serde_json::from_value(json!({"status": {
            "allocatable": {"cpu": "4", "pods": "10", "nvidia.com/gpu": "2", "ephemeral-storage": "10Gi"},
            "conditions": [{"type": "Ready", "status": "True"}]}}))
        .expect("a node");
        let gpu_pod: PodCapacity = serde_json::from_value(json!({"spec": {
            "nodeName": "n1",
            "containers": [{"resources": {"requests": {"nvidia.com/gpu": "1"}}}]}}))
        .expect("a pod");
        let s = resource_summary([&gpu_node], [&gpu_pod], &[]);
        let allocatable = s.allocatable.expect("allocatable");
        assert_eq!(allocatable.scalar.get("nvidia.com/gpu"), Some(&2));
        assert_eq!(
            allocatable.scalar.get("ephemeral-storage"),
            Some(&(10 << 30))
        );
        assert_eq!(
            s.allocated.expect("allocated").scalar.get("nvidia.com/gpu"),
            Some(&1)
        );

        // what a member may leave out or send as null reads as absent
        let sparse: PodCapacity =
            serde_json::from_str(r#"{"spec": {"nodeName": null, "containers": null}}"#)
                .expect("a sparse pod");
        let bare: NodeCapacity = serde_json::from_str(r#"{"status": null}"#).expect("a node");
        let s = resource_summary([&bare], [&sparse], &[]);
        let allocated = s.allocated.expect("allocated");
        assert_eq!((allocated.cpu_millis, allocated.pods), (0, 0));
        assert_eq!(s.allocatable_replicas, Some(0));
    }

    /// Keys of the objects a member returns, so that random documents hit the paths the
    /// status readers look at.
    const KEYS: &[&str] = &[
        "apiVersion",
        "kind",
        "metadata",
        "name",
        "namespace",
        "uid",
        "generation",
        "spec",
        "replicas",
        "status",
        "readyReplicas",
        "availableReplicas",
        "updatedReplicas",
        "observedGeneration",
        "conditions",
        "type",
        "succeeded",
        "failed",
        "active",
        "completionTime",
        "phase",
        "nodeName",
        "containers",
        "resources",
        "requests",
        "allocatable",
        "cpu",
        "memory",
        "pods",
    ];

    /// Any JSON a member (or something posing as one) could send: random trees of its keys,
    /// and its objects' own shape with random values in every field the readers look at.
    fn member_json() -> impl proptest::strategy::Strategy<Value = Value> {
        use proptest::prelude::*;
        prop_oneof![random_tree(), shaped_object()]
    }

    fn leaf() -> impl proptest::strategy::Strategy<Value = Value> {
        use proptest::prelude::*;
        prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::Bool),
            any::<i64>().prop_map(Value::from),
            prop_oneof![Just(-1i64), Just(0), Just(3), Just(i64::from(i32::MAX) + 1)]
                .prop_map(Value::from),
            any::<f64>()
                .prop_map(|f| serde_json::Number::from_f64(f).map_or(Value::Null, Value::Number)),
            prop_oneof![
                Just("True".to_owned()),
                Just("Ready".to_owned()),
                Just("Complete".to_owned()),
                Just("-5".to_owned()),
                Just("1e400".to_owned()),
                Just("9999999999999Ei".to_owned()),
                Just("250m".to_owned()),
                ".{0,12}"
            ]
            .prop_map(Value::String),
        ]
    }

    /// A Deployment-, Job- or Node-like object whose counts and conditions are random.
    fn shaped_object() -> impl proptest::strategy::Strategy<Value = Value> {
        use proptest::prelude::*;
        (
            proptest::collection::vec(leaf(), 12),
            proptest::sample::select(&["Deployment", "Job", "StatefulSet", "Pod", "Node"][..]),
        )
            .prop_map(|(v, kind)| {
                serde_json::json!({
                    "apiVersion": "apps/v1", "kind": kind,
                    "metadata": {"name": "x", "generation": v[0]},
                    "spec": {"replicas": v[1], "nodeName": v[2],
                             "containers": [{"resources": {"requests": {"cpu": v[3], "memory": v[4]}}}]},
                    "status": {"readyReplicas": v[5], "availableReplicas": v[6],
                               "updatedReplicas": v[7], "observedGeneration": v[8],
                               "phase": v[9], "allocatable": {"pods": v[10], "cpu": v[11]},
                               "conditions": [{"type": "Ready", "status": v[9]}]},
                })
            })
    }

    fn random_tree() -> impl proptest::strategy::Strategy<Value = Value> {
        use proptest::prelude::*;
        leaf().prop_recursive(5, 64, 6, |inner| {
            prop_oneof![
                proptest::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
                proptest::collection::vec((proptest::sample::select(KEYS), inner), 0..6).prop_map(
                    |fields| {
                        Value::Object(fields.into_iter().map(|(k, v)| (k.to_owned(), v)).collect())
                    }
                ),
            ]
        })
    }

    proptest::proptest! {
        #![proptest_config(flotilla_core::testing::proptest_config(256))]

        /// Whatever a member returns, reading its status neither panics nor yields a negative
        /// count, and the kept `status` is JSON.
        #[test]
        fn malformed_member_objects_read_safely(object in member_json()) {
            let s = manifest_status(&object);
            proptest::prop_assert!(s.replicas >= 0 && s.ready_replicas >= 0, "{s:?}");
            proptest::prop_assert!(serde_json::from_str::<Value>(&s.status).is_ok());
            let node: Option<NodeCapacity> = serde_json::from_value(object.clone()).ok();
            let pod: Option<PodCapacity> = serde_json::from_value(object).ok();
            let summary = resource_summary(node.iter(), pod.iter(), &[]);
            let a = summary.allocatable.unwrap_or_default();
            proptest::prop_assert!(
                a.cpu_millis >= 0 && a.memory_bytes >= 0 && a.pods >= 0,
                "{a:?}"
            );
            proptest::prop_assert!(summary.allocatable_replicas.unwrap_or(0) >= 0);
        }
    }
}
