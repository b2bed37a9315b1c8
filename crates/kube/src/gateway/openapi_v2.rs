//! `/openapi/v2`: one Swagger 2.0 document of every kind served, for the clients that read
//! v2 rather than v3: kubectl before 1.27 (`explain`, client-side apply's patch), and today's
//! with `explain --output plaintext-openapiv2`, and the tools built on client-go's
//! `OpenAPISchema()` (Argo CD's diffs among them).
//!
//! ```text
//!   openapi::document(gv) for each group version ──v2 dialect──► {swagger, definitions}
//!                                                     │
//!                      Accept: …proto-openapi.spec.v2…+protobuf ──► gnostic's openapi.v2.Document
//! ```
//!
//! The schemas are the v3 documents' (one derivation, [`super::openapi`]), rewritten into the
//! dialect kube-openapi's v2 reader takes: `#/definitions/` references, a reference beside a
//! description written as `$ref` with siblings (v2 has no `allOf` of one), no `anyOf`/`oneOf`
//! (v2 has none; such a schema takes anything), and every array with an item schema.
//!
//! client-go asks for the protobuf form only (gnostic's `openapi.v2.Document`), so it is
//! encoded here with prost from the subset of gnostic's messages a schema document uses; the
//! field numbers are those of gnostic's `OpenAPIv2.proto`. Vendor extensions are written, as
//! kube-apiserver writes them, as YAML in gnostic's `Any.yaml`. Any other `Accept` gets JSON.

use serde_json::{Map, Value, json};

use super::KindInfo;

/// The media type the protobuf form is answered with (kube-apiserver's: client-go asks for
/// `…spec.v2@v1.0+protobuf`, whose `@` Go's media type parser refuses in an answer).
pub(super) const PROTOBUF: &str = "application/com.github.proto-openapi.spec.v2.v1.0+protobuf";

/// The v2 document of `kinds`, in JSON.
pub(super) fn document(kinds: &[&'static KindInfo]) -> Value {
    let mut definitions = Map::new();
    for gv in super::group_versions(kinds) {
        let v3 = super::openapi::document(gv, kinds);
        let Some(Value::Object(schemas)) = v3.pointer("/components/schemas").cloned() else {
            continue;
        };
        for (name, mut schema) in schemas {
            v2_dialect(&mut schema);
            definitions.insert(name, schema);
        }
    }
    json!({
        "swagger": "2.0",
        "info": {"title": "Flotilla", "version": super::KUBERNETES_VERSION.1},
        "paths": {},
        "definitions": definitions,
    })
}

/// Rewrites a v3 schema (as [`super::openapi`] writes it) into v2's dialect, in place.
fn v2_dialect(schema: &mut Value) {
    let Value::Object(map) = schema else {
        *schema = json!({});
        return;
    };
    // `allOf` of one (a reference or an inline schema beside a description): its content
    // beside the siblings, which v2 readers take (kube-openapi ignores a `$ref`'s siblings
    // but the description, as kube-apiserver's own v2 document has it)
    if let Some(Value::Array(one)) = map.get("allOf")
        && one.len() == 1
        && let Some(Value::Object(only)) = map
            .remove("allOf")
            .and_then(|mut v| v.as_array_mut().and_then(|a| a.pop()))
    {
        for (k, v) in only {
            map.entry(k).or_insert(v);
        }
    }
    if let Some(Value::String(r)) = map.get_mut("$ref")
        && let Some(name) = r.strip_prefix("#/components/schemas/")
    {
        *r = format!("#/definitions/{name}");
    }
    let union = map.remove("anyOf").is_some() | map.remove("oneOf").is_some();
    map.remove("not");
    map.remove("nullable");
    if union && !map.contains_key("type") && !map.contains_key("$ref") {
        map.insert("x-kubernetes-preserve-unknown-fields".into(), json!(true));
    }
    if map.get("type") == Some(&json!("array")) && !map.contains_key("items") {
        map.insert("items".into(), json!({}));
    }
    for (key, value) in map.iter_mut() {
        match (key.as_str(), value) {
            ("properties", Value::Object(fields)) => fields.values_mut().for_each(v2_dialect),
            ("allOf", Value::Array(branches)) => branches.iter_mut().for_each(v2_dialect),
            ("items", value) => v2_dialect(value),
            ("additionalProperties", value @ Value::Object(_)) => v2_dialect(value),
            _ => {}
        }
    }
}

/// The subset of gnostic's `openapi.v2` messages a schema document uses, with gnostic's
/// field numbers.
mod gnostic {
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct Document {
        #[prost(string, tag = "1")]
        pub swagger: String,
        #[prost(message, optional, tag = "2")]
        pub info: Option<Info>,
        #[prost(message, optional, tag = "8")]
        pub paths: Option<Paths>,
        #[prost(message, optional, tag = "9")]
        pub definitions: Option<Definitions>,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct Info {
        #[prost(string, tag = "1")]
        pub title: String,
        #[prost(string, tag = "2")]
        pub version: String,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct Paths {}

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct Definitions {
        #[prost(message, repeated, tag = "1")]
        pub additional_properties: Vec<NamedSchema>,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct NamedSchema {
        #[prost(string, tag = "1")]
        pub name: String,
        #[prost(message, optional, tag = "2")]
        pub value: Option<Schema>,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct Schema {
        #[prost(string, tag = "1")]
        pub xref: String,
        #[prost(string, tag = "2")]
        pub format: String,
        #[prost(string, tag = "3")]
        pub title: String,
        #[prost(string, tag = "4")]
        pub description: String,
        #[prost(message, optional, tag = "5")]
        pub default: Option<Any>,
        #[prost(double, tag = "7")]
        pub maximum: f64,
        #[prost(double, tag = "9")]
        pub minimum: f64,
        #[prost(int64, tag = "11")]
        pub max_length: i64,
        #[prost(int64, tag = "12")]
        pub min_length: i64,
        #[prost(string, tag = "13")]
        pub pattern: String,
        #[prost(int64, tag = "14")]
        pub max_items: i64,
        #[prost(int64, tag = "15")]
        pub min_items: i64,
        #[prost(bool, tag = "16")]
        pub unique_items: bool,
        #[prost(string, repeated, tag = "19")]
        pub required: Vec<String>,
        #[prost(message, repeated, tag = "20")]
        pub r#enum: Vec<Any>,
        #[prost(message, optional, tag = "21")]
        pub additional_properties: Option<AdditionalPropertiesItem>,
        #[prost(message, optional, tag = "22")]
        pub r#type: Option<TypeItem>,
        #[prost(message, optional, tag = "23")]
        pub items: Option<ItemsItem>,
        #[prost(message, repeated, tag = "24")]
        pub all_of: Vec<Schema>,
        #[prost(message, optional, tag = "25")]
        pub properties: Option<Properties>,
        #[prost(message, repeated, tag = "31")]
        pub vendor_extension: Vec<NamedAny>,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct AdditionalPropertiesItem {
        #[prost(oneof = "Additional", tags = "1, 2")]
        pub oneof: Option<Additional>,
    }

    #[derive(Clone, PartialEq, prost::Oneof)]
    pub enum Additional {
        #[prost(message, boxed, tag = "1")]
        Schema(Box<Schema>),
        #[prost(bool, tag = "2")]
        Boolean(bool),
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct TypeItem {
        #[prost(string, repeated, tag = "1")]
        pub value: Vec<String>,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct ItemsItem {
        #[prost(message, repeated, tag = "1")]
        pub schema: Vec<Schema>,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct Properties {
        #[prost(message, repeated, tag = "1")]
        pub additional_properties: Vec<NamedSchema>,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct NamedAny {
        #[prost(string, tag = "1")]
        pub name: String,
        #[prost(message, optional, tag = "2")]
        pub value: Option<Any>,
    }

    /// gnostic's `Any`: the value as YAML (field 1, a protobuf `Any`, is not used).
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct Any {
        #[prost(string, tag = "2")]
        pub yaml: String,
    }
}

/// `document` (the JSON [`document`] wrote) as gnostic's protobuf message.
pub(super) fn protobuf(document: &Value) -> Vec<u8> {
    use prost::Message as _;
    gnostic::Document {
        swagger: "2.0".into(),
        info: Some(gnostic::Info {
            title: text(document.pointer("/info/title")),
            version: text(document.pointer("/info/version")),
        }),
        paths: Some(gnostic::Paths {}),
        definitions: Some(gnostic::Definitions {
            additional_properties: named(document.get("definitions")),
        }),
    }
    .encode_to_vec()
}

/// A JSON object of schemas (definitions, properties) as gnostic's ordered pairs.
fn named(map: Option<&Value>) -> Vec<gnostic::NamedSchema> {
    map.and_then(Value::as_object)
        .into_iter()
        .flatten()
        .map(|(name, s)| gnostic::NamedSchema {
            name: name.clone(),
            value: Some(schema(s)),
        })
        .collect()
}

fn text(v: Option<&Value>) -> String {
    v.and_then(Value::as_str).unwrap_or_default().to_owned()
}

fn yaml(v: &Value) -> gnostic::Any {
    gnostic::Any {
        yaml: serde_norway::to_string(v).unwrap_or_default(),
    }
}

/// One v2 schema as gnostic's message; keywords it has no field for are left out.
fn schema(v: &Value) -> gnostic::Schema {
    let mut out = gnostic::Schema::default();
    let Value::Object(map) = v else {
        return out;
    };
    let int = |k: &str| map.get(k).and_then(Value::as_i64).unwrap_or(0);
    let float = |k: &str| map.get(k).and_then(Value::as_f64).unwrap_or(0.0);
    out.xref = text(map.get("$ref"));
    out.format = text(map.get("format"));
    out.title = text(map.get("title"));
    out.description = text(map.get("description"));
    out.default = map.get("default").map(yaml);
    out.maximum = float("maximum");
    out.minimum = float("minimum");
    out.max_length = int("maxLength");
    out.min_length = int("minLength");
    out.pattern = text(map.get("pattern"));
    out.max_items = int("maxItems");
    out.min_items = int("minItems");
    out.unique_items = map.get("uniqueItems").and_then(Value::as_bool) == Some(true);
    out.required = map
        .get("required")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .map(str::to_owned)
        .collect();
    out.r#enum = map
        .get("enum")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .map(yaml)
        .collect();
    out.additional_properties = match map.get("additionalProperties") {
        Some(Value::Bool(b)) => Some(gnostic::AdditionalPropertiesItem {
            oneof: Some(gnostic::Additional::Boolean(*b)),
        }),
        Some(s @ Value::Object(_)) => Some(gnostic::AdditionalPropertiesItem {
            oneof: Some(gnostic::Additional::Schema(Box::new(schema(s)))),
        }),
        _ => None,
    };
    out.r#type = match map.get("type") {
        Some(Value::String(t)) => Some(gnostic::TypeItem {
            value: vec![t.clone()],
        }),
        Some(Value::Array(ts)) => Some(gnostic::TypeItem {
            value: ts
                .iter()
                .filter_map(Value::as_str)
                .map(str::to_owned)
                .collect(),
        }),
        _ => None,
    };
    out.items = match map.get("items") {
        Some(Value::Array(items)) => Some(gnostic::ItemsItem {
            schema: items.iter().map(schema).collect(),
        }),
        Some(item) => Some(gnostic::ItemsItem {
            schema: vec![schema(item)],
        }),
        None => None,
    };
    out.all_of = map
        .get("allOf")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .map(schema)
        .collect();
    out.properties = map
        .get("properties")
        .filter(|p| p.is_object())
        .map(|p| gnostic::Properties {
            additional_properties: named(Some(p)),
        });
    out.vendor_extension = map
        .iter()
        .filter(|(k, _)| k.starts_with("x-"))
        .map(|(k, v)| gnostic::NamedAny {
            name: k.clone(),
            value: Some(yaml(v)),
        })
        .collect();
    out
}

#[cfg(test)]
mod tests {
    use prost::Message as _;

    use super::*;

    fn builtin() -> Vec<&'static KindInfo> {
        super::super::KINDS.iter().collect()
    }

    /// Every `$ref` of `v`.
    fn references(v: &Value, out: &mut Vec<String>) {
        match v {
            Value::Object(map) => {
                if let Some(Value::String(r)) = map.get("$ref") {
                    out.push(r.clone());
                }
                map.values().for_each(|v| references(v, out));
            }
            Value::Array(items) => items.iter().for_each(|v| references(v, out)),
            _ => {}
        }
    }

    #[test]
    fn the_v2_document_is_in_v2s_dialect_and_every_reference_resolves() {
        let doc = document(&builtin());
        let definitions = doc["definitions"].as_object().unwrap();
        let policy = &definitions["io.karmada.policy.v1alpha1.PropagationPolicy"];
        assert_eq!(
            policy["x-kubernetes-group-version-kind"],
            json!([{"group": "policy.karmada.io", "version": "v1alpha1", "kind": "PropagationPolicy"}])
        );
        let spec = &policy["properties"]["spec"];
        assert!(
            spec["$ref"].as_str().unwrap().starts_with("#/definitions/"),
            "{spec}"
        );
        assert_eq!(spec["description"], "What the user declares.");
        let text = doc.to_string();
        for word in ["\"anyOf\"", "\"oneOf\"", "#/components/", "\"nullable\""] {
            assert!(!text.contains(word), "v2 has no {word}");
        }
        let mut refs = Vec::new();
        references(&doc, &mut refs);
        assert!(!refs.is_empty());
        for r in refs {
            let name = r
                .strip_prefix("#/definitions/")
                .unwrap_or_else(|| panic!("{r}"));
            assert!(definitions.contains_key(name), "{r} resolves");
        }
        fn arrays_have_items(v: &Value) {
            if let Value::Object(map) = v {
                if map.get("type") == Some(&json!("array")) {
                    assert!(map.contains_key("items"), "an array without items: {v}");
                }
                map.values().for_each(arrays_have_items);
            }
        }
        arrays_have_items(&doc);
    }

    #[test]
    fn the_protobuf_form_carries_the_schemas_with_gnostics_field_numbers() {
        let doc = document(&builtin());
        let bytes = protobuf(&doc);
        let back = gnostic::Document::decode(bytes.as_slice()).unwrap();
        assert_eq!(back.swagger, "2.0");
        let definitions = back.definitions.unwrap().additional_properties;
        assert_eq!(
            definitions.len(),
            doc["definitions"].as_object().unwrap().len()
        );
        let policy = definitions
            .iter()
            .find(|d| d.name == "io.karmada.policy.v1alpha1.PropagationPolicy")
            .and_then(|d| d.value.clone())
            .unwrap();
        assert_eq!(policy.r#type.unwrap().value, ["object"]);
        let gvk = policy
            .vendor_extension
            .iter()
            .find(|e| e.name == "x-kubernetes-group-version-kind")
            .and_then(|e| e.value.clone())
            .unwrap();
        let gvk: Value = serde_norway::from_str(&gvk.yaml).unwrap();
        assert_eq!(gvk[0]["kind"], "PropagationPolicy");
        let fields = policy.properties.unwrap().additional_properties;
        let spec = fields.iter().find(|f| f.name == "spec").unwrap();
        assert!(
            spec.value
                .as_ref()
                .unwrap()
                .xref
                .starts_with("#/definitions/"),
            "{spec:?}"
        );
        // a map's value schema (ObjectMeta's labels) is an additionalProperties schema
        let meta = definitions
            .iter()
            .find(|d| d.name == "io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta")
            .and_then(|d| d.value.clone())
            .unwrap();
        let labels = meta
            .properties
            .unwrap()
            .additional_properties
            .into_iter()
            .find(|f| f.name == "labels")
            .and_then(|f| f.value)
            .unwrap();
        match labels.additional_properties.and_then(|a| a.oneof) {
            Some(gnostic::Additional::Schema(s)) => {
                assert_eq!(s.r#type.unwrap().value, ["string"]);
            }
            other => panic!("labels' values: {other:?}"),
        }
        // the wire bytes of field 1 (swagger) and 9 (definitions) are where gnostic has them
        assert_eq!(&bytes[..5], b"\x0a\x032.0");
    }
}
