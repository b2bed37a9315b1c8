//! `/openapi/v3`: the OpenAPI v3 index and one document per group version, as kube-apiserver
//! publishes them. kubectl reads them before a write: a PATCH operation of the object's kind
//! that takes the `fieldValidation` query parameter tells it the server validates fields
//! itself, so `kubectl apply -f` needs no `--validate=false`. Each document holds the paths
//! and operations of the group version's kinds; the schemas are open objects (what the
//! fields are, the api's validation says; `kubectl explain` is not served yet).

use serde_json::{Map, Value, json};

use super::{KINDS, KindInfo, verbs};

/// The index: each group version's document, at a URL that names its content's hash (a
/// client caches it until the hash changes).
pub(super) fn index() -> Value {
    let mut paths = Map::new();
    for gv in super::group_versions() {
        let hash = hash(&document(gv).to_string());
        let at = if gv.contains('/') {
            format!("apis/{gv}")
        } else {
            format!("api/{gv}")
        };
        paths.insert(
            at.clone(),
            json!({"serverRelativeURL": format!("/openapi/v3/{at}?hash={hash:016X}")}),
        );
    }
    json!({ "paths": paths })
}

/// FNV-1a: stable across builds and processes (unlike std's hasher).
fn hash(text: &str) -> u64 {
    text.bytes().fold(0xcbf2_9ce4_8422_2325_u64, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3)
    })
}

/// The schema name of a kind, in Kubernetes' reversed-group style
/// (`io.karmada.policy.v1alpha1.PropagationPolicy`).
fn schema_name(info: &KindInfo) -> String {
    let (group, version) = info
        .group_version
        .split_once('/')
        .unwrap_or(("core", info.group_version));
    let reversed: Vec<&str> = group.split('.').rev().collect();
    format!("{}.{version}.{}", reversed.join("."), info.name)
}

fn gvk(info: &KindInfo) -> Value {
    let (group, version) = info
        .group_version
        .split_once('/')
        .unwrap_or(("", info.group_version));
    json!({"group": group, "version": version, "kind": info.name})
}

fn query_parameter(name: &str, description: &str) -> Value {
    json!({"name": name, "in": "query", "description": description,
           "schema": {"type": "string", "uniqueItems": true}})
}

fn operation(info: &KindInfo, action: &str, parameters: Vec<Value>) -> Value {
    json!({
        "description": format!("{action} a {}", info.name),
        "operationId": format!("{action}{}", info.name),
        "parameters": parameters,
        "responses": {"200": {"description": "OK", "content": {"application/json": {"schema": {
            "$ref": format!("#/components/schemas/{}", schema_name(info)),
        }}}}},
        "x-kubernetes-action": action,
        "x-kubernetes-group-version-kind": gvk(info),
    })
}

/// The document of one group version ("" fields for one it does not serve).
pub(super) fn document(group_version: &str) -> Value {
    let mut paths = Map::new();
    let mut schemas = Map::new();
    for info in KINDS.iter().filter(|k| k.group_version == group_version) {
        let verbs = verbs(info.kind);
        let writes = verbs.iter().any(|v| v == "patch");
        let root = if group_version.contains('/') {
            "apis"
        } else {
            "api"
        };
        let base = if info.namespaced {
            format!(
                "/{root}/{group_version}/namespaces/{{namespace}}/{}",
                info.plural
            )
        } else {
            format!("/{root}/{group_version}/{}", info.plural)
        };
        let validation = || {
            vec![
                query_parameter(
                    "fieldValidation",
                    "Strict (an unknown field is refused) or Warn (it is warned of); Ignore is not served",
                ),
                query_parameter(
                    "fieldManager",
                    "the field manager; required for server-side apply",
                ),
                query_parameter(
                    "force",
                    "server-side apply only: take the conflicting fields from their owners",
                ),
            ]
        };
        let reads = verbs.iter().any(|v| v == "get");
        let creates = verbs.iter().any(|v| v == "create");
        let mut collection = Map::new();
        if reads {
            collection.insert("get".into(), operation(info, "list", Vec::new()));
        }
        if creates {
            collection.insert("post".into(), operation(info, "post", validation()));
        }
        let mut item = Map::new();
        if reads {
            item.insert("get".into(), operation(info, "get", Vec::new()));
        }
        if writes {
            item.insert("put".into(), operation(info, "put", validation()));
            item.insert("patch".into(), operation(info, "patch", validation()));
            item.insert("delete".into(), operation(info, "delete", Vec::new()));
        }
        paths.insert(base.clone(), Value::Object(collection));
        if !item.is_empty() {
            paths.insert(format!("{base}/{{name}}"), Value::Object(item));
        }
        schemas.insert(
            schema_name(info),
            json!({
                "type": "object",
                "description": format!(
                    "{}: the fields are Karmada's; Flotilla's api validates them (docs/kubernetes-api.md)",
                    info.name
                ),
                "x-kubernetes-preserve-unknown-fields": true,
                "x-kubernetes-group-version-kind": [gvk(info)],
            }),
        );
    }
    json!({
        "openapi": "3.0.0",
        "info": {"title": "Flotilla", "version": super::KUBERNETES_VERSION.1},
        "paths": paths,
        "components": {"schemas": schemas},
    })
}
