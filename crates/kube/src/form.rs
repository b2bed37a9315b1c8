//! Flotilla's objects in their Kubernetes form: what `flotilla get -o yaml|json` prints, what
//! the Kubernetes API gateway serves, and the shape `flotilla apply -f` reads, so that what
//! either prints applies back unchanged (docs/operations.md, "Two JSON shapes").
//!
//! ```text
//!   wire message ──proto3 JSON (64-bit integers as numbers)──► walk with its descriptor:
//!     enums  TAINT_EFFECT_NO_EXECUTE → NoExecute   (SpreadField, OverrideOperator: lower case)
//!   ──► per kind: apiVersion + kind; a template is its manifest; a Work in Karmada's shape
//!       (its execution namespace, `spec.workload.manifests`);
//!       Flotilla's trace contexts dropped
//!   ──► a propagation, taint or override policy's spec is the domain type's serde form
//!       (the one model)
//!   ──► metadata.resourceVersion as a string, as Kubernetes writes it
//! ```
//!
//! The gRPC wire keeps the proto3 JSON mapping (what grpcurl prints); only what users' tools
//! read is reshaped.

use anyhow::Context as _;
use prost_reflect::{DescriptorPool, DynamicMessage, Kind, MessageDescriptor, SerializeOptions};
use serde_json::{Map, Value};

/// Karmada's policy group/version.
pub const POLICY: &str = "policy.karmada.io/v1alpha1";

/// The message `bytes` of protobuf type `full_name` (`flotilla.v1.Cluster`) as a Kubernetes
/// object (see the module doc).
pub fn kubernetes(full_name: &str, bytes: &[u8]) -> anyhow::Result<Value> {
    let descriptor = pool()?
        .get_message_by_name(full_name)
        .with_context(|| format!("no descriptor for {full_name}"))?;
    let dynamic = DynamicMessage::decode(descriptor.clone(), bytes)
        .with_context(|| format!("decoding a {full_name}"))?;
    let options = SerializeOptions::new().stringify_64_bit_integers(false);
    let mut value = dynamic
        .serialize_with_options(serde_json::value::Serializer, &options)
        .with_context(|| format!("serializing a {full_name}"))?;
    enums(&mut value, &descriptor);
    // Kubernetes' ObjectMeta has resourceVersion as a string (clients parse it as one)
    if let Some(rv) = value.pointer_mut("/metadata/resourceVersion")
        && let Some(n) = rv.as_i64()
    {
        *rv = Value::String(n.to_string());
    }
    // a manager's field set is an object in Kubernetes' form, JSON text on the wire
    if let Some(entries) = value
        .pointer_mut("/metadata/managedFields")
        .and_then(Value::as_array_mut)
    {
        for entry in entries {
            json_text_as_object(entry.get_mut("fieldsV1"));
        }
    }
    let short = full_name.rsplit('.').next().unwrap_or_default();
    if let Value::Object(map) = &mut value {
        match short {
            "PropagationPolicy" | "ClusterPropagationPolicy" => {
                map.insert("spec".into(), propagation_spec(bytes)?);
            }
            "ClusterTaintPolicy" => {
                map.insert("spec".into(), taint_policy_spec(bytes)?);
            }
            "OverridePolicy" | "ClusterOverridePolicy" => {
                map.insert("spec".into(), override_spec(bytes)?);
            }
            _ => {}
        }
    }
    Ok(reshape(short, value))
}

/// A listing as kubectl prints one: `apiVersion: v1, kind: List, items: […]` (which `apply -f`
/// reads too).
pub fn list(items: Vec<Value>, revision: i64) -> Value {
    serde_json::json!({
        "apiVersion": "v1",
        "kind": "List",
        "metadata": {"resourceVersion": revision.to_string()},
        "items": items,
    })
}

fn pool() -> anyhow::Result<&'static DescriptorPool> {
    static POOL: std::sync::OnceLock<Result<DescriptorPool, String>> = std::sync::OnceLock::new();
    POOL.get_or_init(|| {
        DescriptorPool::decode(flotilla_proto::FILE_DESCRIPTOR_SET).map_err(|e| e.to_string())
    })
    .as_ref()
    .map_err(|e| anyhow::anyhow!("reading the embedded protobuf descriptors: {e}"))
}

/// `TAINT_EFFECT_NO_EXECUTE` of enum `TaintEffect` → `NoExecute`; Karmada writes a few enums in
/// lower case (`spreadByField: region`, an overrider's `operator: add`).
fn enum_spelling(enum_name: &str, value: &str) -> String {
    let mut prefix = String::new();
    for (i, c) in enum_name.chars().enumerate() {
        if c.is_ascii_uppercase() && i > 0 {
            prefix.push('_');
        }
        prefix.push(c.to_ascii_uppercase());
    }
    prefix.push('_');
    let rest = value.strip_prefix(&prefix).unwrap_or(value);
    let words = rest.split('_').map(|w| {
        let lower = w.to_ascii_lowercase();
        let mut chars = lower.chars();
        chars
            .next()
            .map(|f| f.to_ascii_uppercase().to_string() + chars.as_str())
            .unwrap_or_default()
    });
    let pascal: String = words.collect();
    if matches!(enum_name, "SpreadField" | "OverrideOperator") {
        pascal.to_ascii_lowercase()
    } else {
        pascal
    }
}

/// Rewrites every enum value of `value` (a `descriptor` message in proto3 JSON) in Kubernetes'
/// spelling, recursively.
fn enums(value: &mut Value, descriptor: &MessageDescriptor) {
    let Value::Object(map) = value else {
        return;
    };
    for (name, v) in map.iter_mut() {
        let Some(field) = descriptor.get_field_by_json_name(name) else {
            continue;
        };
        let kind = if field.is_map() {
            match field.kind() {
                Kind::Message(entry) => entry.map_entry_value_field().kind(),
                other => other,
            }
        } else {
            field.kind()
        };
        let each: Vec<&mut Value> = match v {
            Value::Array(items) => items.iter_mut().collect(),
            Value::Object(entries) if field.is_map() => entries.values_mut().collect(),
            other => vec![other],
        };
        match kind {
            Kind::Enum(e) => {
                for item in each {
                    if let Value::String(s) = item {
                        *s = enum_spelling(e.name(), s);
                    }
                }
            }
            Kind::Message(m) if !m.full_name().starts_with("google.protobuf.") => {
                for item in each {
                    enums(item, &m);
                }
            }
            _ => {}
        }
    }
}

/// The per-kind part: apiVersion and kind first (the map is ordered by key, and `apiVersion`,
/// `kind`, `metadata`, `spec`, `status` happen to sort as Kubernetes prints them).
fn reshape(short: &str, mut value: Value) -> Value {
    let (api_version, kind) = match short {
        "Cluster" => {
            // Karmada's spelling of this field is not proto3 JSON's camel case
            if let Some(spec) = value.get_mut("spec").and_then(Value::as_object_mut)
                && let Some(v) = spec.remove("insecureSkipTlsVerification")
            {
                spec.insert("insecureSkipTLSVerification".into(), v);
            }
            ("cluster.karmada.io/v1alpha1", "Cluster")
        }
        "PropagationPolicy" | "ClusterPropagationPolicy" | "ClusterTaintPolicy" => (POLICY, short),
        "OverridePolicy" | "ClusterOverridePolicy" => (POLICY, short),
        "Workload" => return workload(value),
        "ResourceBinding" => {
            let cluster_scoped = value
                .pointer("/metadata/namespace")
                .and_then(Value::as_str)
                .is_none_or(str::is_empty);
            let kind = if cluster_scoped {
                "ClusterResourceBinding"
            } else {
                "ResourceBinding"
            };
            // a member's status is an object in Karmada's aggregatedStatus, not JSON text
            if let Some(items) = value
                .pointer_mut("/status/aggregatedStatus")
                .and_then(Value::as_array_mut)
            {
                for item in items {
                    json_text_as_object(item.get_mut("status"));
                }
            }
            ("work.karmada.io/v1alpha2", kind)
        }
        "Work" => {
            karmada_work(&mut value);
            ("work.karmada.io/v1alpha1", "Work")
        }
        "Event" => ("v1", "Event"),
        _ => return value,
    };
    drop_trace_contexts(&mut value);
    if let Value::Object(map) = &mut value {
        map.insert("apiVersion".into(), api_version.into());
        map.insert("kind".into(), kind.into());
    }
    value
}

/// The prefix of a member's execution namespace, where Karmada keeps its Works.
pub const EXECUTION_NAMESPACE_PREFIX: &str = "karmada-es-";

/// A Work in Karmada's shape: its manifest under `spec.workload.manifests` (one, as Flotilla
/// writes a Work per object and cluster), and the Work in its cluster's execution namespace
/// `karmada-es-<cluster>`, where `kubectl get work -n karmada-es-member1` finds it. The
/// binding's namespace, which Flotilla keys the Work by, stays in `spec.binding`; Flotilla's
/// own fields (`cluster`, `binding`, `resource`, `replicas`, `conflictResolution`) are kept
/// beside Karmada's.
fn karmada_work(value: &mut Value) {
    json_text_as_object(value.pointer_mut("/spec/manifest"));
    let cluster = value
        .pointer("/spec/cluster")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_owned();
    if let Some(spec) = value.get_mut("spec").and_then(Value::as_object_mut)
        && let Some(manifest) = spec.remove("manifest")
    {
        spec.insert(
            "workload".into(),
            serde_json::json!({ "manifests": [manifest] }),
        );
    }
    if !cluster.is_empty()
        && let Some(meta) = value.get_mut("metadata").and_then(Value::as_object_mut)
    {
        meta.insert(
            "namespace".into(),
            Value::String(format!("{EXECUTION_NAMESPACE_PREFIX}{cluster}")),
        );
    }
}

/// Replaces a string holding a JSON object or array (a Work's manifest, a member's status,
/// both kept as JSON text on the wire) with what it holds; anything else stays as it is.
fn json_text_as_object(slot: Option<&mut Value>) {
    if let Some(slot) = slot
        && let Some(text) = slot.as_str()
        && let Ok(object) = serde_json::from_str::<Value>(text)
        && (object.is_object() || object.is_array())
    {
        *slot = object;
    }
}

/// Flotilla's trace contexts are internal plumbing, not part of what a user applies.
fn drop_trace_contexts(value: &mut Value) {
    match value {
        Value::Object(map) => {
            map.remove("traceContext");
            map.values_mut().for_each(drop_trace_contexts);
        }
        Value::Array(items) => items.iter_mut().for_each(drop_trace_contexts),
        _ => {}
    }
}

/// A propagation policy's spec: the domain type's serde form, which is Karmada's (the one
/// model, docs/design.md). Both policy kinds share their wire layout, so either decodes as a
/// PropagationPolicy.
fn propagation_spec(bytes: &[u8]) -> anyhow::Result<Value> {
    let policy = <flotilla_proto::v1::PropagationPolicy as prost::Message>::decode(bytes)
        .context("decoding a propagation policy")?;
    let spec = flotilla_core::types::PropagationSpec::try_from(policy.spec.unwrap_or_default())
        .context("reading a propagation policy's spec")?;
    serde_json::to_value(spec).context("writing a propagation policy's spec")
}

/// A ClusterTaintPolicy's spec: the domain type's serde form (the one model).
fn taint_policy_spec(bytes: &[u8]) -> anyhow::Result<Value> {
    let policy = <flotilla_proto::v1::ClusterTaintPolicy as prost::Message>::decode(bytes)
        .context("decoding a cluster taint policy")?;
    let policy = flotilla_core::types::ClusterTaintPolicy::try_from(policy)
        .context("reading a cluster taint policy")?;
    serde_json::to_value(flotilla_core::types::shape::TaintPolicySpec::from(policy))
        .context("writing a cluster taint policy's spec")
}

/// An override policy's spec: the domain type's serde form, overriders in Karmada's field
/// names (`predicate.path`, a patch's `value` as JSON, a fieldOverrider's `json`/`yaml`
/// lists). Both policy kinds share their wire layout, so either decodes as an OverridePolicy.
fn override_spec(bytes: &[u8]) -> anyhow::Result<Value> {
    let policy = <flotilla_proto::v1::OverridePolicy as prost::Message>::decode(bytes)
        .context("decoding an override policy")?;
    let policy = flotilla_core::overrides::OverridePolicy::try_from(policy)
        .context("reading an override policy")?;
    serde_json::to_value(policy.spec).context("writing an override policy's spec")
}

/// What the control plane sets in a template's metadata (the rest is the user's).
const SERVER_SET: [&str; 6] = [
    "resourceVersion",
    "uid",
    "creationTimestamp",
    "generation",
    "deletionTimestamp",
    "managedFields",
];

/// A resource template is its manifest, as the user applied it, with the metadata the
/// control plane keeps of it (its resourceVersion, uid, creationTimestamp, generation,
/// managedFields, finalizers, and the labels Flotilla adds), as kube-apiserver returns an object. A
/// manifest's own copy of those fields (an exported object applied again) is not shown.
fn workload(value: Value) -> Value {
    let Some(mut manifest) = value
        .get("manifest")
        .and_then(Value::as_str)
        .and_then(|m| serde_json::from_str::<Map<String, Value>>(m).ok())
    else {
        return value;
    };
    let Some(stored) = value.get("metadata").and_then(Value::as_object) else {
        return Value::Object(manifest);
    };
    let meta = manifest
        .entry("metadata")
        .or_insert_with(|| Value::Object(Map::new()));
    if let Some(meta) = meta.as_object_mut() {
        for key in SERVER_SET {
            meta.remove(key);
            if let Some(v) = stored.get(key) {
                meta.insert(key.into(), v.clone());
            }
        }
        if let Some(Value::Array(f)) = stored.get("finalizers")
            && !f.is_empty()
        {
            meta.insert("finalizers".into(), Value::Array(f.clone()));
        }
        if let Some(Value::Object(labels)) = stored.get("labels") {
            let own = meta
                .entry("labels")
                .or_insert_with(|| Value::Object(Map::new()));
            if let Some(own) = own.as_object_mut() {
                for (k, v) in labels {
                    own.entry(k.clone()).or_insert_with(|| v.clone());
                }
            }
        }
    }
    // the aggregated status the work executor keeps (IN-4), never the manifest's own
    manifest.remove("status");
    if let Some(status) = value
        .get("status")
        .and_then(Value::as_str)
        .filter(|s| !s.is_empty())
        .and_then(|s| serde_json::from_str::<Value>(s).ok())
        .filter(Value::is_object)
    {
        manifest.insert("status".into(), status);
    }
    Value::Object(manifest)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn enum_values_take_kubernetes_spellings() {
        for (enum_name, value, want) in [
            ("TaintEffect", "TAINT_EFFECT_NO_EXECUTE", "NoExecute"),
            (
                "TaintEffect",
                "TAINT_EFFECT_PREFER_NO_SCHEDULE",
                "PreferNoSchedule",
            ),
            (
                "ReplicaSchedulingType",
                "REPLICA_SCHEDULING_TYPE_DIVIDED",
                "Divided",
            ),
            ("PurgeMode", "PURGE_MODE_GRACEFULLY", "Gracefully"),
            ("SelectorOperator", "SELECTOR_OPERATOR_NOT_IN", "NotIn"),
            (
                "DynamicWeightFactor",
                "DYNAMIC_WEIGHT_FACTOR_AVAILABLE_REPLICAS",
                "AvailableReplicas",
            ),
            ("ConditionStatus", "CONDITION_STATUS_TRUE", "True"),
            ("SpreadField", "SPREAD_FIELD_REGION", "region"),
            ("OverrideOperator", "OVERRIDE_OPERATOR_REPLACE", "replace"),
            ("ImageComponent", "IMAGE_COMPONENT_REGISTRY", "Registry"),
        ] {
            assert_eq!(enum_spelling(enum_name, value), want, "{value}");
        }
    }

    /// Karmada's `aggregatedStatus[].status` is the member's status object; the wire keeps
    /// it as JSON text, and `get -o yaml` prints the object.
    #[test]
    fn a_binding_prints_each_members_status_as_an_object() {
        let binding = flotilla_proto::v1::ResourceBinding {
            metadata: Some(flotilla_proto::v1::ObjectMeta {
                name: "nginx-deployment".into(),
                namespace: "default".into(),
                ..Default::default()
            }),
            status: Some(flotilla_proto::v1::ResourceBindingStatus {
                aggregated_status: vec![flotilla_proto::v1::AggregatedStatusItem {
                    cluster_name: "member1".into(),
                    status: r#"{"readyReplicas":2,"replicas":2}"#.into(),
                    applied: true,
                    ..Default::default()
                }],
                ..Default::default()
            }),
            ..Default::default()
        };
        let json = kubernetes(
            "flotilla.v1.ResourceBinding",
            &prost::Message::encode_to_vec(&binding),
        )
        .unwrap();
        assert_eq!(json["kind"], "ResourceBinding");
        assert_eq!(
            json["status"]["aggregatedStatus"][0]["status"],
            serde_json::json!({"readyReplicas": 2, "replicas": 2})
        );
        assert_eq!(
            json["status"]["aggregatedStatus"][0]["clusterName"],
            "member1"
        );
    }

    /// Karmada keeps a Work in `karmada-es-<cluster>` with its manifests under
    /// `spec.workload.manifests`.
    #[test]
    fn a_work_takes_karmadas_shape_and_execution_namespace() {
        let work = flotilla_proto::v1::Work {
            metadata: Some(flotilla_proto::v1::ObjectMeta {
                name: "nginx-687f7fb96f".into(),
                namespace: "default".into(),
                ..Default::default()
            }),
            spec: Some(flotilla_proto::v1::WorkSpec {
                cluster: "member1".into(),
                manifest: r#"{"apiVersion":"apps/v1","kind":"Deployment"}"#.into(),
                ..Default::default()
            }),
            ..Default::default()
        };
        let json = kubernetes("flotilla.v1.Work", &prost::Message::encode_to_vec(&work)).unwrap();
        assert_eq!(json["apiVersion"], "work.karmada.io/v1alpha1");
        assert_eq!(json["metadata"]["namespace"], "karmada-es-member1");
        assert_eq!(
            json["spec"]["workload"]["manifests"],
            serde_json::json!([{"apiVersion": "apps/v1", "kind": "Deployment"}])
        );
        assert!(json["spec"].get("manifest").is_none(), "{json}");
        assert_eq!(json["spec"]["cluster"], "member1");
    }

    #[test]
    fn objects_take_the_kubernetes_shape() {
        let cluster = flotilla_proto::v1::Cluster {
            metadata: Some(flotilla_proto::v1::ObjectMeta {
                name: "member1".into(),
                resource_version: 7,
                ..Default::default()
            }),
            spec: Some(flotilla_proto::v1::ClusterSpec {
                sync_mode: flotilla_proto::v1::SyncMode::Push as i32,
                taints: vec![flotilla_proto::v1::Taint {
                    key: "k".into(),
                    effect: flotilla_proto::v1::TaintEffect::NoExecute as i32,
                    time_added: Some(prost_types::Timestamp {
                        seconds: 0,
                        nanos: 0,
                    }),
                    trace_context: "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01".into(),
                    ..Default::default()
                }],
                ..Default::default()
            }),
            status: None,
        };
        let json = kubernetes(
            "flotilla.v1.Cluster",
            &prost::Message::encode_to_vec(&cluster),
        )
        .unwrap();
        assert_eq!(json["apiVersion"], "cluster.karmada.io/v1alpha1");
        assert_eq!(json["kind"], "Cluster");
        assert_eq!(json["metadata"]["name"], "member1");
        assert_eq!(
            json["metadata"]["resourceVersion"], "7",
            "a string, as Kubernetes' ObjectMeta has it"
        );
        assert_eq!(json["spec"]["syncMode"], "Push");
        assert_eq!(json["spec"]["taints"][0]["effect"], "NoExecute");
        assert_eq!(
            json["spec"]["taints"][0]["timeAdded"],
            "1970-01-01T00:00:00Z"
        );
        assert!(json["spec"]["taints"][0].get("traceContext").is_none());
        assert!(json.get("status").is_none());
        let keys: Vec<&String> = json.as_object().unwrap().keys().collect();
        assert_eq!(
            keys,
            ["apiVersion", "kind", "metadata", "spec"],
            "Kubernetes' order"
        );

        let workload = flotilla_proto::v1::Workload {
            manifest: r#"{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"c"}}"#.into(),
            ..Default::default()
        };
        assert_eq!(
            kubernetes(
                "flotilla.v1.Workload",
                &prost::Message::encode_to_vec(&workload)
            )
            .unwrap(),
            serde_json::json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}}),
            "a template is its manifest"
        );
    }
}
