//! `/openapi/v3`: the OpenAPI v3 index and one document per group version, as kube-apiserver
//! publishes them. kubectl reads them before a write: a PATCH operation of the object's kind
//! that takes the `fieldValidation` query parameter tells it the server validates fields
//! itself, so `kubectl apply -f` needs no `--validate=false`. `kubectl explain` reads the
//! schemas: those of Karmada's policies and Clusters are derived (schemars) from the serde
//! types that read `apply -f` documents and write `get -o yaml`
//! ([`crate::manifest::spec_schema`]), so what `explain` lists is what the reader takes, with
//! the types' own documentation. The other kinds' schemas are open objects.

use serde_json::{Map, Value, json};

use schemars::generate::SchemaSettings;

use super::{KindInfo, verbs};

/// The index: each group version's document, at a URL that names its content's hash (a
/// client caches it until the hash changes).
pub(super) fn index(kinds: &[&'static KindInfo]) -> Value {
    let mut paths = Map::new();
    for gv in super::group_versions(kinds) {
        let hash = hash(&document(gv, kinds).to_string());
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
    format!("{}{}", schema_prefix(info.group_version), info.name)
}

/// `io.karmada.policy.v1alpha1.` for `policy.karmada.io/v1alpha1` (`core.v1.` for `v1`).
fn schema_prefix(group_version: &str) -> String {
    let (group, version) = group_version
        .split_once('/')
        .unwrap_or(("core", group_version));
    let reversed: Vec<&str> = group.split('.').rev().collect();
    format!("{}.{version}.", reversed.join("."))
}

/// Kubernetes' name of ObjectMeta's schema, which every document with a kind carries.
const OBJECT_META: &str = "io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta";

fn reference(name: &str) -> Value {
    json!({"$ref": format!("#/components/schemas/{name}")})
}

/// The schema of one kind: for Karmada's policies and Clusters, `spec` is the reader's own
/// schema; any other kind's fields are open (the api's validation is what says which exist).
fn kind_schema(info: &KindInfo, generator: &mut schemars::SchemaGenerator, prefix: &str) -> Value {
    let Some(spec) = crate::manifest::spec_schema(info.name, generator) else {
        return json!({
            "type": "object",
            "description": format!(
                "{}: its fields are not described here; Flotilla's api validates them \
                 (docs/kubernetes-api.md)",
                info.name
            ),
            "x-kubernetes-preserve-unknown-fields": true,
            "x-kubernetes-group-version-kind": [gvk(info)],
        });
    };
    let mut spec = spec.to_value();
    kubernetes_flavour(&mut spec, prefix);
    let status = if info.name == "Cluster" {
        "Written by Flotilla's cluster-health service: the member's conditions, version and \
         capacity. A write of it is refused."
    } else {
        "Not used by this kind."
    };
    json!({
        "type": "object",
        "description": format!("Karmada's {} ({}), as Flotilla reads and serves it.",
            info.name, info.group_version),
        "properties": {
            "apiVersion": {"type": "string", "description": format!(
                "The versioned schema of this object: {}.", info.group_version)},
            "kind": {"type": "string", "description": format!("{}.", info.name)},
            "metadata": {"allOf": [reference(OBJECT_META)],
                "description": "The object's name, namespace, labels and annotations, and what the control plane keeps of it."},
            "spec": {"allOf": [spec], "description": "What the user declares."},
            "status": {"type": "object", "x-kubernetes-preserve-unknown-fields": true,
                "description": status},
        },
        "x-kubernetes-group-version-kind": [gvk(info)],
    })
}

/// schemars' OpenAPI 3 output in the form kube-apiserver publishes: references named with the
/// group's prefix; an optional field as the schema of its value (Kubernetes reads a missing
/// field as unset and writes no `nullable`); a reference beside a description wrapped in
/// `allOf`; and a schema that takes anything (`serde_json::Value`) marked as preserving
/// unknown fields, since kubectl's explain reads no `true` schema.
fn kubernetes_flavour(schema: &mut Value, prefix: &str) {
    let Value::Object(map) = schema else {
        if *schema == Value::Bool(true) {
            *schema = json!({"x-kubernetes-preserve-unknown-fields": true});
        }
        return;
    };
    map.remove("$schema");
    map.remove("nullable");
    if let Some(Value::Array(branches)) = map.get_mut("anyOf") {
        branches.retain(|b| {
            b.get("enum") != Some(&json!([null])) && b.get("type") != Some(&json!("null"))
        });
        if branches.len() == 1
            && let Some(Value::Array(one)) = map.remove("anyOf")
        {
            map.insert("allOf".into(), Value::Array(one));
        }
    }
    if let Some(Value::String(r)) = map.get_mut("$ref")
        && let Some(name) = r.strip_prefix("#/components/schemas/")
    {
        *r = format!("#/components/schemas/{prefix}{name}");
    }
    if map.contains_key("$ref")
        && map.len() > 1
        && let Some(r) = map.remove("$ref")
    {
        map.insert("allOf".into(), json!([{"$ref": r}]));
    }
    for (key, value) in map.iter_mut() {
        match (key.as_str(), value) {
            ("properties", Value::Object(fields)) => {
                fields
                    .values_mut()
                    .for_each(|f| kubernetes_flavour(f, prefix));
            }
            ("allOf" | "anyOf" | "oneOf", Value::Array(branches)) => {
                branches
                    .iter_mut()
                    .for_each(|b| kubernetes_flavour(b, prefix));
            }
            ("items" | "additionalProperties" | "not", value @ Value::Object(_)) => {
                kubernetes_flavour(value, prefix);
            }
            ("items", value @ Value::Bool(true)) => kubernetes_flavour(value, prefix),
            _ => {}
        }
    }
    let described_only = map.keys().all(|k| k == "description" || k == "default");
    if described_only {
        map.insert("x-kubernetes-preserve-unknown-fields".into(), json!(true));
    }
}

/// A string enum (a Rust enum of unit variants; schemars writes it as a `oneOf` of one-value
/// enums when its variants are documented) flattened into `{type: string, enum: [...]}`, with
/// the variants' documentation in Kubernetes' words ("Possible enum values"), or `None` for
/// a schema that is no such enum.
fn flat_enum(schema: &Value) -> Option<(Value, String)> {
    if schema.get("properties").is_some() {
        return None;
    }
    if let Some(values) = schema.get("enum") {
        return Some((json!({"type": "string", "enum": values}), String::new()));
    }
    let branches = schema.get("oneOf")?.as_array()?;
    let mut values = Vec::new();
    let mut text = String::from("Possible enum values:");
    for branch in branches {
        let [value] = branch.get("enum")?.as_array()?.as_slice() else {
            return None;
        };
        let said = branch
            .get("description")
            .and_then(Value::as_str)
            .unwrap_or("");
        text.push_str(&format!("\n - `{value}` {}", said.replace('\n', " ")));
        values.push(value.clone());
    }
    Some((json!({"type": "string", "enum": values}), text))
}

/// A reference to a string enum becomes the enum itself, as Kubernetes writes its enums:
/// `kubectl explain` then prints `<string>`, the values and what each means.
fn inline_enums(schemas: &mut Map<String, Value>) {
    let enums: Map<String, Value> = schemas
        .iter()
        .filter_map(|(name, s)| {
            let (inline, text) = flat_enum(s)?;
            Some((
                format!("#/components/schemas/{name}"),
                json!({"schema": inline, "text": text}),
            ))
        })
        .collect();
    fn walk(v: &mut Value, enums: &Map<String, Value>) {
        match v {
            Value::Object(map) => {
                let target = match map.get("allOf") {
                    Some(Value::Array(one)) if one.len() == 1 => one[0].get("$ref"),
                    _ => map.get("$ref"),
                };
                if let Some(found) = target.and_then(Value::as_str).and_then(|r| enums.get(r)) {
                    let found = found.clone();
                    map.remove("allOf");
                    map.remove("$ref");
                    if let Some(Value::Object(inline)) = found.get("schema") {
                        for (k, v) in inline {
                            map.entry(k.clone()).or_insert_with(|| v.clone());
                        }
                    }
                    let text = found.get("text").and_then(Value::as_str).unwrap_or("");
                    if !text.is_empty() {
                        let said = map.get("description").and_then(Value::as_str).unwrap_or("");
                        let description = if said.is_empty() {
                            text.to_owned()
                        } else {
                            format!("{said}\n\n{text}")
                        };
                        map.insert("description".into(), Value::String(description));
                    }
                }
                map.values_mut().for_each(|v| walk(v, enums));
            }
            Value::Array(items) => items.iter_mut().for_each(|v| walk(v, enums)),
            _ => {}
        }
    }
    for schema in schemas.values_mut() {
        walk(schema, &enums);
    }
    for name in enums.keys() {
        if let Some(name) = name.strip_prefix("#/components/schemas/") {
            schemas.remove(name);
        }
    }
}

/// The part of Kubernetes' ObjectMeta a Flotilla object has.
fn object_meta() -> Value {
    let text = |d: &str| json!({"type": "string", "description": d});
    let map = |d: &str| json!({"type": "object", "additionalProperties": {"type": "string"}, "description": d});
    json!({
        "type": "object",
        "description": "Standard object metadata.",
        "properties": {
            "name": text("The object's name, unique in its namespace (or among cluster-scoped objects of its kind)."),
            "namespace": text("The namespace; empty for a cluster-scoped kind."),
            "labels": map("Labels: what selectors match."),
            "annotations": map("Annotations: data for tools, not selected on."),
            "finalizers": {"type": "array", "items": {"type": "string"},
                "description": "What must finish before the object is removed; a delete waits for them."},
            "uid": text("Set by the control plane at creation; read-only."),
            "resourceVersion": text("The store revision of the last write; a precondition of an update. Read-only."),
            "generation": {"type": "integer", "format": "int64",
                "description": "Moves with each change of the spec. Read-only."},
            "creationTimestamp": text("When the object was created (RFC 3339). Read-only."),
            "deletionTimestamp": text("When its deletion was asked for (RFC 3339). Read-only."),
            "managedFields": {"type": "array", "items": {"type": "object", "x-kubernetes-preserve-unknown-fields": true},
                "description": "Which field manager owns which fields (server-side apply)."},
        },
    })
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
pub(super) fn document(group_version: &str, kinds: &[&'static KindInfo]) -> Value {
    let mut paths = Map::new();
    let mut schemas = Map::new();
    let mut generator = SchemaSettings::openapi3().into_generator();
    let prefix = schema_prefix(group_version);
    for info in kinds.iter().filter(|k| k.group_version == group_version) {
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
        let schema = kind_schema(info, &mut generator, &prefix);
        schemas.insert(schema_name(info), schema);
    }
    for (name, mut schema) in generator.take_definitions(true) {
        kubernetes_flavour(&mut schema, &prefix);
        schemas.insert(format!("{prefix}{name}"), schema);
    }
    if !schemas.is_empty() {
        schemas.insert(OBJECT_META.into(), object_meta());
    }
    inline_enums(&mut schemas);
    json!({
        "openapi": "3.0.0",
        "info": {"title": "Flotilla", "version": super::KUBERNETES_VERSION.1},
        "paths": paths,
        "components": {"schemas": schemas},
    })
}
