//! The gateway's writes, each one call of the api (docs/kubernetes-api.md "Writes"):
//!
//! ```text
//!   POST   …/{resource}          body ──read (flotilla_kube::manifest)──► Apply(CREATE)  → 201
//!   PUT    …/{resource}/{name}   body ──read──► Apply(UPDATE, resourceVersion precondition) → 200
//!   PATCH  …/{resource}/{name}   stored object (Kubernetes form) + JSON merge patch, JSON
//!                                patch, strategic merge patch or server-side apply
//!                                (flotilla_kube::ssa) ──read──► Apply(UPDATE, on the version
//!                                read) → 200; a concurrent write in between: read again
//!
//! Every write carries the object's managers (`metadata.managedFields`) as it leaves them
//! (docs/kubernetes-api.md "Server-side apply").
//!   DELETE …/{resource}/{name}   Delete* (preconditions from DeleteOptions) → Status or the
//!                                object a finalizer keeps
//! ```
//!
//! A body is read by the same reader as `flotilla apply -f` (Karmada's field names, strict:
//! an unknown field is refused), then admitted by the api like any other write, so both
//! paths refuse and accept the same objects. What the reader or the api refuses is a 422
//! `Invalid` Status with one cause per field.

// A failure here is the HTTP answer itself, made at most once per request: boxing it would
// buy nothing.
#![allow(clippy::result_large_err)]

use axum::http::{HeaderMap, StatusCode};
use axum::response::Response;
use flotilla_proto::Resource;
use flotilla_proto::v1;
use flotilla_proto::v1::api_client::ApiClient;
use serde_json::{Value, json};
use tonic::transport::Channel;
use tonic_types::StatusExt as _;

use super::{Kind, Req, failure, fetch, from_status, list_page, param, reply, request};
use crate::manifest::{self, ReadOptions};
use crate::ssa;

/// The largest request body read (kube-apiserver's limit is 3 MiB too).
pub(super) const MAX_BODY_BYTES: usize = 3 * 1024 * 1024;

/// How often a patch is read and applied again when someone else wrote in between.
const PATCH_ATTEMPTS: usize = 5;

fn bad_request(message: &str) -> Response {
    failure(StatusCode::BAD_REQUEST, "BadRequest", message)
}

/// The API group of `req`'s kind (`policy.karmada.io`).
fn group(req: &Req) -> &'static str {
    req.group_version().split_once('/').map_or("", |(g, _)| g)
}

/// A 422 `Invalid` Status: `causes` are (field, message) pairs.
pub(super) fn invalid(req: &Req, name: &str, causes: &[(String, String)]) -> Response {
    let summary: Vec<String> = causes
        .iter()
        .map(|(f, m)| {
            if f.is_empty() {
                m.clone()
            } else {
                format!("{f}: {m}")
            }
        })
        .collect();
    let mut body = crate::http::status(
        422,
        "Invalid",
        &format!(
            "{}.{} {name:?} is invalid: {}",
            req.name(),
            group(req),
            summary.join(", ")
        ),
    );
    body["details"] = json!({
        "name": name,
        "group": group(req),
        "kind": req.name(),
        "causes": causes.iter().map(|(f, m)| json!({
            "reason": "FieldValueInvalid", "message": m, "field": f,
        })).collect::<Vec<_>>(),
    });
    reply(StatusCode::UNPROCESSABLE_ENTITY, &body)
}

/// A refusal of a write by the api: its INVALID_ARGUMENT (with the fields it names, without
/// Apply's `objects[0].`) is a 422, as kube-apiserver answers a validation failure.
fn refused(req: &Req, name: &str, status: &tonic::Status) -> Response {
    if status.code() != tonic::Code::InvalidArgument {
        return from_status(status);
    }
    let causes: Vec<(String, String)> = status
        .get_details_bad_request()
        .map(|b| {
            b.field_violations
                .into_iter()
                .map(|v| {
                    let field = v.field.strip_prefix("objects[0]").unwrap_or(&v.field);
                    let field = field.strip_prefix('.').unwrap_or(field).to_owned();
                    (field, v.description)
                })
                .collect()
        })
        .unwrap_or_default();
    if causes.is_empty() {
        return invalid(req, name, &[(String::new(), status.message().to_owned())]);
    }
    invalid(req, name, &causes)
}

/// Refuses what the gateway does not do rather than ignoring it: a dry run, and field
/// validation other than strict (the reader always refuses unknown fields).
fn check_options(query: &[(String, String)]) -> Result<(), Response> {
    if param(query, "dryRun").is_some_and(|d| !d.is_empty()) {
        return Err(bad_request(
            "dryRun is not served by Flotilla's Kubernetes API; use `flotilla apply --dry-run` \
             or `flotilla explain`",
        ));
    }
    match param(query, "fieldValidation") {
        None | Some("" | "Strict" | "Warn") => Ok(()),
        Some("Ignore") => Err(bad_request(
            "fieldValidation=Ignore is not served: unknown fields are refused (Strict) or \
             warned of (Warn)",
        )),
        Some(other) => Err(bad_request(&format!(
            "fieldValidation {other:?}: expected Strict, Warn or Ignore"
        ))),
    }
}

/// The request body as JSON (or YAML, by its content type).
pub(super) fn parse_body(headers: &HeaderMap, body: &[u8]) -> Result<Value, Response> {
    let ct = content_type(headers);
    if ct.contains("protobuf") || ct.contains("cbor") {
        return Err(failure(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            "UnsupportedMediaType",
            &format!("{ct:?}: bodies are served as JSON or YAML only"),
        ));
    }
    let yaml = ct.contains("yaml");
    let parsed = if yaml {
        serde_norway::from_slice::<Value>(body).map_err(|e| e.to_string())
    } else {
        serde_json::from_slice::<Value>(body).map_err(|e| e.to_string())
    };
    match parsed {
        Ok(v @ Value::Object(_)) => Ok(v),
        Ok(_) => Err(bad_request("the request body must be one object")),
        Err(e) => Err(bad_request(&format!(
            "the request body is not valid {}: {e}",
            if yaml { "YAML" } else { "JSON" }
        ))),
    }
}

fn content_type(headers: &HeaderMap) -> &str {
    headers
        .get(axum::http::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("application/json")
}

fn meta_str<'a>(object: &'a Value, key: &str) -> Option<&'a str> {
    object
        .pointer(&format!("/metadata/{key}"))
        .and_then(Value::as_str)
        .filter(|s| !s.is_empty())
}

/// Checks a body against the path it was sent to, as kube-apiserver does: its apiVersion and
/// kind, its namespace (taken from the path when it has none), and for a named path its
/// name. Returns its name.
fn check_target(req: &Req, object: &mut Value, name: Option<&str>) -> Result<String, Response> {
    let want_gv = req.group_version();
    let want_kind = req.name();
    let got_gv = object
        .get("apiVersion")
        .and_then(Value::as_str)
        .unwrap_or("");
    // Flotilla's own group for Clusters reads the same (`flotilla apply` takes both).
    let cluster_alias = req.kind == Kind::Cluster && got_gv == manifest::FLOTILLA_API_VERSION;
    if got_gv != want_gv && !cluster_alias {
        return Err(bad_request(&format!(
            "the API version in the data ({got_gv}) does not match the expected API version ({want_gv})"
        )));
    }
    let got_kind = object.get("kind").and_then(Value::as_str).unwrap_or("");
    if got_kind != want_kind {
        return Err(bad_request(&format!(
            "the kind in the data ({got_kind}) does not match the expected kind ({want_kind})"
        )));
    }
    if !object.get("metadata").is_some_and(Value::is_object) {
        object["metadata"] = json!({});
    }
    if req.namespace.is_empty() {
        // cluster-scoped: a namespace in the body means nothing (kube-apiserver clears it)
        if let Some(meta) = object["metadata"].as_object_mut() {
            meta.remove("namespace");
        }
    } else {
        match meta_str(object, "namespace") {
            None => object["metadata"]["namespace"] = req.namespace.clone().into(),
            Some(ns) if ns == req.namespace => {}
            Some(_) => {
                return Err(bad_request(
                    "the namespace of the provided object does not match the namespace sent on the request",
                ));
            }
        }
    }
    let body_name = meta_str(object, "name").map(str::to_owned);
    match (name, body_name) {
        (Some(path), Some(body)) if path != body => Err(bad_request(&format!(
            "the name of the object ({body}) does not match the name on the URL ({path})"
        ))),
        (Some(path), _) => {
            object["metadata"]["name"] = path.into();
            Ok(path.to_owned())
        }
        (None, Some(body)) => Ok(body),
        (None, None) => Err(invalid(
            req,
            "",
            &[(
                "metadata.name".into(),
                "Required value: name is required (generateName is not served)".into(),
            )],
        )),
    }
}

/// `metadata.resourceVersion` of a body: 0 when absent.
fn resource_version(req: &Req, name: &str, object: &Value) -> Result<i64, Response> {
    match meta_str(object, "resourceVersion") {
        None => Ok(0),
        Some(rv) => rv.parse::<i64>().ok().filter(|n| *n > 0).ok_or_else(|| {
            invalid(
                req,
                name,
                &[(
                    "metadata.resourceVersion".into(),
                    format!("Invalid value: {rv:?}: not a resourceVersion this server gave out"),
                )],
            )
        }),
    }
}

/// `object` read as `flotilla apply -f` reads a document, into one item of an Apply carrying
/// `resource_version` as its precondition; also the reader's warnings.
fn admit(
    req: &Req,
    name: &str,
    object: &Value,
    resource_version: i64,
    query: &[(String, String)],
) -> Result<(v1::apply_object::Object, Vec<String>), Response> {
    let options = ReadOptions {
        namespace: if req.namespace.is_empty() {
            "default".to_owned()
        } else {
            req.namespace.clone()
        },
        namespace_explicit: !req.namespace.is_empty(),
    };
    // what the server sets is not the user's to write (and a template's manifest keeps
    // what it is given): dropped, as kube-apiserver ignores it in a body
    let mut object = object.clone();
    if let Some(meta) = object.get_mut("metadata").and_then(Value::as_object_mut) {
        for key in manifest::SERVER_SET_METADATA {
            meta.remove(key);
        }
    }
    if let Some(map) = object.as_object_mut() {
        map.remove("status");
    }
    let parsed = manifest::read("the request body", &object.to_string(), &options);
    if !parsed.errors.is_empty() {
        let causes: Vec<(String, String)> = parsed
            .errors
            .into_iter()
            .map(|e| (e.field, e.reason))
            .collect();
        return Err(invalid(req, name, &causes));
    }
    // fieldValidation=Strict (what kubectl sends): a template's unknown field is refused;
    // otherwise it is a warning. Karmada's kinds are always read strictly.
    if param(query, "fieldValidation") == Some("Strict") {
        let unknown: Vec<(String, String)> = parsed
            .warnings
            .iter()
            .filter(|w| w.contains("unknown field"))
            .map(|w| (String::new(), w.clone()))
            .collect();
        if !unknown.is_empty() {
            return Err(invalid(req, name, &unknown));
        }
    }
    let [document] = <[manifest::Document; 1]>::try_from(parsed.documents)
        .map_err(|_| bad_request("the request body must be exactly one object"))?;
    let mut item = document.object.to_apply();
    set_resource_version(&mut item, resource_version);
    Ok((item, parsed.warnings))
}

fn meta_mut(item: &mut v1::apply_object::Object) -> &mut v1::ObjectMeta {
    use v1::apply_object::Object as O;
    match item {
        O::Cluster(o) => o.meta_mut(),
        O::PropagationPolicy(o) => o.meta_mut(),
        O::ClusterPropagationPolicy(o) => o.meta_mut(),
        O::ClusterTaintPolicy(o) => o.meta_mut(),
        O::OverridePolicy(o) => o.meta_mut(),
        O::ClusterOverridePolicy(o) => o.meta_mut(),
        O::Secret(o) => o.meta_mut(),
        O::Workload(o) => o.meta_mut(),
    }
}

fn set_resource_version(item: &mut v1::apply_object::Object, rv: i64) {
    meta_mut(item).resource_version = rv;
}

/// The admitted `item` in its Kubernetes form: what an update's managers are worked out on,
/// as kube-apiserver works them out on the object after defaulting (a field the reader
/// defaults is no change of the writer's).
fn admitted(req: &Req, item: &v1::apply_object::Object) -> Result<Value, Response> {
    use prost::Message as _;
    use v1::apply_object::Object as O;
    let bytes = match item {
        O::Cluster(o) => o.encode_to_vec(),
        O::PropagationPolicy(o) => o.encode_to_vec(),
        O::ClusterPropagationPolicy(o) => o.encode_to_vec(),
        O::ClusterTaintPolicy(o) => o.encode_to_vec(),
        O::OverridePolicy(o) => o.encode_to_vec(),
        O::ClusterOverridePolicy(o) => o.encode_to_vec(),
        O::Secret(o) => o.encode_to_vec(),
        O::Workload(o) => o.encode_to_vec(),
    };
    crate::form::kubernetes(req.info.message, &bytes).map_err(|e| {
        failure(
            StatusCode::INTERNAL_SERVER_ERROR,
            "InternalError",
            &format!("writing the admitted object: {e:#}"),
        )
    })
}

/// Who writes, by the request: its `fieldManager`, else its User-Agent's product (as
/// kube-apiserver names an update's manager).
fn field_manager(req: &Req, query: &[(String, String)]) -> Result<String, Response> {
    match param(query, "fieldManager") {
        Some(m) if m.chars().count() > 128 => Err(options_invalid(
            "fieldManager",
            "FieldValueTooLong",
            &format!("Too long: must have at most 128 bytes (got {})", m.len()),
        )),
        Some(m) if !m.is_empty() => Ok(m.to_owned()),
        _ => Ok(ssa::manager_from_user_agent(
            req.headers
                .get(axum::http::header::USER_AGENT)
                .and_then(|v| v.to_str().ok())
                .unwrap_or_default(),
        )),
    }
}

/// A 422 about the request's PatchOptions, as kube-apiserver words it.
fn options_invalid(field: &str, reason: &str, message: &str) -> Response {
    let mut body = crate::http::status(
        422,
        "Invalid",
        &format!("PatchOptions.meta.k8s.io \"\" is invalid: {field}: {message}"),
    );
    body["details"] = json!({
        "group": "meta.k8s.io",
        "kind": "PatchOptions",
        "causes": [{"reason": reason, "message": message, "field": field}],
    });
    reply(StatusCode::UNPROCESSABLE_ENTITY, &body)
}

/// Now, as managedFields' times are written (whole seconds, RFC 3339).
fn now_rfc3339() -> String {
    let secs = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    prost_types::Timestamp {
        seconds: i64::try_from(secs).unwrap_or(i64::MAX),
        nanos: 0,
    }
    .to_string()
}

fn writer<'a>(req: &Req, manager: &'a str, time: &'a str) -> ssa::Writer<'a> {
    ssa::Writer {
        manager,
        api_version: req.group_version(),
        time,
        schema: if req.kind == Kind::Template {
            ssa::Schema::Builtin
        } else {
            ssa::Schema::Custom
        },
    }
}

/// The managers of a stored object (its Kubernetes form).
fn managers(object: &Value) -> Result<Vec<ssa::Entry>, Response> {
    ssa::Entry::of(object).map_err(|e| {
        failure(
            StatusCode::INTERNAL_SERVER_ERROR,
            "InternalError",
            &format!("the stored managedFields are unreadable: {e}"),
        )
    })
}

/// `entries` onto the write's metadata.
fn set_managers(item: &mut v1::apply_object::Object, entries: &[ssa::Entry]) {
    meta_mut(item).managed_fields = entries
        .iter()
        .map(|e| v1::ManagedFieldsEntry {
            manager: e.manager.clone(),
            operation: e.operation.as_str().to_owned(),
            api_version: e.api_version.clone(),
            time: e.time.parse().ok(),
            fields_type: "FieldsV1".into(),
            fields_v1: e.fields.to_fields_v1().to_string(),
            subresource: String::new(),
        })
        .collect();
}

/// A refused server-side apply: 409 `Conflict`, a cause per field.
fn conflicted(req: &Req, conflicts: &[ssa::Conflict]) -> Response {
    let mut body = crate::http::status(
        409,
        "Conflict",
        &ssa::conflict_message(conflicts, req.group_version()),
    );
    body["details"] = json!({
        "causes": conflicts.iter().map(|c| json!({
            "reason": "FieldManagerConflict",
            "message": format!("conflict with {:?}", c.manager),
            "field": c.field,
        })).collect::<Vec<_>>(),
    });
    reply(StatusCode::CONFLICT, &body)
}

/// Bindings are the controllers' to write; users release a held task with the gRPC api or
/// `flotilla apply` (GE-9.1).
fn writable(req: &Req) -> Result<(), Response> {
    match req.kind {
        Kind::ResourceBinding | Kind::ClusterResourceBinding => Err(failure(
            StatusCode::METHOD_NOT_ALLOWED,
            "MethodNotAllowed",
            &format!(
                "{}s are written by Flotilla's controllers; to release a held eviction task, \
                 use `flotilla release` or `flotilla apply -f` of the binding",
                req.name()
            ),
        )),
        Kind::Work | Kind::Event => Err(failure(
            StatusCode::METHOD_NOT_ALLOWED,
            "MethodNotAllowed",
            &format!(
                "{}s are written by Flotilla's controllers ({}), not through this API",
                req.name(),
                if req.kind == Kind::Work {
                    "the work executor"
                } else {
                    "each service's event recorder"
                }
            ),
        )),
        _ => Ok(()),
    }
}

/// Warnings as kubectl prints them (`Warning: …`), in `299` headers.
fn with_warnings(mut response: Response, warnings: &[String]) -> Response {
    // at most 4 KiB of them, as kube-apiserver caps its warnings
    let mut budget = 4096_usize;
    for w in warnings {
        if w.len() > budget {
            break;
        }
        budget -= w.len();
        let text = format!("299 - \"{}\"", w.replace(['"', '\n', '\r'], "'"));
        if let Ok(value) = axum::http::HeaderValue::from_str(&text) {
            response.headers_mut().append("warning", value);
        }
    }
    response
}

async fn apply(
    api: &mut ApiClient<Channel>,
    req: &Req,
    item: v1::apply_object::Object,
    mode: v1::ApplyMode,
) -> Result<(), tonic::Status> {
    api.apply(request(
        v1::ApplyRequest {
            objects: vec![v1::ApplyObject { object: Some(item) }],
            dry_run: false,
            mode: mode as i32,
        },
        &req.headers,
    ))
    .await
    .map(drop)
}

/// The object as stored after a write (another write may have come after it: what is read
/// is the newest, as kube-apiserver's answer would be had it come a moment later).
async fn written(api: ApiClient<Channel>, req: &Req, name: &str, code: StatusCode) -> Response {
    match fetch(api, req, name).await {
        Ok(object) => reply(code, &object),
        Err(failed) => failed,
    }
}

/// POST: create.
pub(super) async fn create(
    mut api: ApiClient<Channel>,
    req: &Req,
    query: &[(String, String)],
    body: &[u8],
) -> Response {
    let go = async {
        writable(req)?;
        check_options(query)?;
        let mut object = parse_body(&req.headers, body)?;
        let name = check_target(req, &mut object, None)?;
        if meta_str(&object, "resourceVersion").is_some() {
            return Err(invalid(
                req,
                &name,
                &[(
                    "metadata.resourceVersion".into(),
                    "must not be set on an object to be created".into(),
                )],
            ));
        }
        let manager = field_manager(req, query)?;
        let time = now_rfc3339();
        let (mut item, warnings) = admit(req, &name, &object, 0, query)?;
        let managed = ssa::update(
            None,
            &[],
            &admitted(req, &item)?,
            writer(req, &manager, &time),
        );
        set_managers(&mut item, &managed);
        apply(&mut api, req, item, v1::ApplyMode::Create)
            .await
            .map_err(|s| refused(req, &name, &s))?;
        Ok(with_warnings(
            written(api.clone(), req, &name, StatusCode::CREATED).await,
            &warnings,
        ))
    };
    go.await.unwrap_or_else(|failed| failed)
}

/// PUT: replace, on the body's resourceVersion when it has one.
pub(super) async fn replace(
    mut api: ApiClient<Channel>,
    req: &Req,
    name: &str,
    query: &[(String, String)],
    body: &[u8],
) -> Response {
    let go = async {
        writable(req)?;
        check_options(query)?;
        let mut object = parse_body(&req.headers, body)?;
        check_target(req, &mut object, Some(name))?;
        let named = resource_version(req, name, &object)?;
        let manager = field_manager(req, query)?;
        let time = now_rfc3339();
        // the managers are worked out on the version read: without a resourceVersion in
        // the body, that version is the precondition, read again after a concurrent write
        let mut last = None;
        for _ in 0..PATCH_ATTEMPTS {
            let live = fetch(api.clone(), req, name).await?;
            let read_at = resource_version(req, name, &live)?;
            let rv = if named != 0 { named } else { read_at };
            let (mut item, warnings) = admit(req, name, &object, rv, query)?;
            let managed = ssa::update(
                Some(&live),
                &managers(&live)?,
                &admitted(req, &item)?,
                writer(req, &manager, &time),
            );
            set_managers(&mut item, &managed);
            match apply(&mut api, req, item, v1::ApplyMode::Update).await {
                Ok(()) => {
                    return Ok(with_warnings(
                        written(api.clone(), req, name, StatusCode::OK).await,
                        &warnings,
                    ));
                }
                Err(s) if s.code() == tonic::Code::Aborted && named == 0 => last = Some(s),
                Err(s) => return Err(refused(req, name, &s)),
            }
        }
        Err(last.map_or_else(
            || bad_request("the object could not be replaced"),
            |s| from_status(&s),
        ))
    };
    go.await.unwrap_or_else(|failed| failed)
}

/// The patch types served, by content type.
enum PatchType {
    Merge,
    Json(json_patch::Patch),
    /// Of a built-in kind only (a resource template).
    Strategic,
    /// Server-side apply: the body is the manager's whole intent.
    Apply(Value),
}

fn patch_type(req: &Req, headers: &HeaderMap, body: &[u8]) -> Result<(PatchType, Value), Response> {
    let ct = content_type(headers);
    let ct = ct.split(';').next().unwrap_or("").trim();
    let parse = || {
        serde_json::from_slice::<Value>(body)
            .map_err(|e| bad_request(&format!("the patch is not valid JSON: {e}")))
    };
    match ct {
        "application/merge-patch+json" => Ok((PatchType::Merge, parse()?)),
        "application/apply-patch+yaml" | "application/apply-patch+json" => {
            let config = parse_body(headers, body)?;
            Ok((PatchType::Apply(config), Value::Null))
        }
        "application/strategic-merge-patch+json" if req.kind == Kind::Template => {
            Ok((PatchType::Strategic, parse()?))
        }
        "application/json-patch+json" => {
            let value = parse()?;
            let patch: json_patch::Patch = serde_json::from_value(value.clone())
                .map_err(|e| bad_request(&format!("the JSON patch is malformed: {e}")))?;
            if patch.0.len() > MAX_JSON_PATCH_OPERATIONS {
                return Err(invalid(
                    req,
                    "",
                    &[(
                        String::new(),
                        format!(
                            "the JSON patch has {} operations, more than the {MAX_JSON_PATCH_OPERATIONS} allowed",
                            patch.0.len()
                        ),
                    )],
                ));
            }
            Ok((PatchType::Json(patch), value))
        }
        other => Err(failure(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            "UnsupportedMediaType",
            &format!(
                "the body of the request was in an unknown format ({other:?}) - accepted media \
                 types include: application/json-patch+json, application/merge-patch+json, \
                 application/apply-patch+yaml (strategic merge patch is not served for custom \
                 kinds, as on kube-apiserver)"
            ),
        )),
    }
}

/// At most this many operations in a JSON patch (kube-apiserver's limit too).
const MAX_JSON_PATCH_OPERATIONS: usize = 10_000;

/// A JSON patch, operation by operation, refused once what its `add`, `replace` and `copy`
/// operations put in could make the object larger than a request body may be (a `copy` of
/// the whole document doubles it: sixty of them would exhaust memory).
fn json_patch_bounded(doc: &mut Value, patch: &json_patch::Patch) -> Result<(), String> {
    use json_patch::PatchOperation as Op;
    let size = |v: &Value| serde_json::to_vec(v).map_or(0, |b| b.len());
    let mut grown = size(doc);
    for op in &patch.0 {
        grown += match op {
            Op::Add(a) => size(&a.value),
            Op::Replace(r) => size(&r.value),
            Op::Copy(c) => doc.pointer(c.from.as_str()).map_or(0, size),
            Op::Remove(_) | Op::Move(_) | Op::Test(_) => 0,
        };
        if grown > MAX_BODY_BYTES {
            return Err(format!(
                "it would make the object larger than {} MiB",
                MAX_BODY_BYTES >> 20
            ));
        }
        json_patch::patch(doc, std::slice::from_ref(op)).map_err(|e| e.to_string())?;
    }
    Ok(())
}

/// PATCH: the stored object, patched, replaced on the version it was read at; a
/// server-side apply of an object that is not there creates it.
pub(super) async fn patch(
    mut api: ApiClient<Channel>,
    req: &Req,
    name: &str,
    query: &[(String, String)],
    body: &[u8],
) -> Response {
    let go = async {
        writable(req)?;
        check_options(query)?;
        let (kind, patch) = patch_type(req, &req.headers, body)?;
        let force = match param(query, "force") {
            None | Some("" | "false") => false,
            Some("true") if matches!(kind, PatchType::Apply(_)) => true,
            Some("true") => {
                return Err(options_invalid(
                    "force",
                    "FieldValueForbidden",
                    "Forbidden: may not be specified for non-apply patch",
                ));
            }
            Some(other) => {
                return Err(bad_request(&format!(
                    "force={other:?}: expected true or false"
                )));
            }
        };
        let manager = match (&kind, param(query, "fieldManager")) {
            (PatchType::Apply(_), None | Some("")) => {
                return Err(options_invalid(
                    "fieldManager",
                    "FieldValueRequired",
                    "Required value: is required for apply patch",
                ));
            }
            _ => field_manager(req, query)?,
        };
        let time = now_rfc3339();
        let who = writer(req, &manager, &time);
        let mut last = None;
        for _ in 0..PATCH_ATTEMPTS {
            let live = match fetch(api.clone(), req, name).await {
                Ok(live) => Some(live),
                Err(failed)
                    if failed.status() == StatusCode::NOT_FOUND
                        && matches!(kind, PatchType::Apply(_)) =>
                {
                    None
                }
                Err(failed) => return Err(failed),
            };
            let (mut object, managed, read_at) = match (&kind, &live) {
                (PatchType::Apply(config), live) => {
                    let mut config = config.clone();
                    check_target(req, &mut config, Some(name))?;
                    if config.pointer("/metadata/managedFields").is_some() {
                        return Err(bad_request(
                            "metadata.managedFields must be nil in a server-side apply",
                        ));
                    }
                    let before = match live {
                        Some(l) => managers(l)?,
                        None => Vec::new(),
                    };
                    let written = ssa::apply(live.as_ref(), &before, &config, who, force)
                        .map_err(|c| conflicted(req, &c))?;
                    let read_at = match live {
                        Some(l) => resource_version(req, name, l)?,
                        None => 0,
                    };
                    // an apply that names a resourceVersion makes it the precondition
                    let named = resource_version(req, name, &config)?;
                    let rv = if named != 0 { named } else { read_at };
                    (written.object, written.managed, rv)
                }
                (_, None) => return Err(bad_request("the patch could not be applied")),
                (other, Some(live)) => {
                    let mut object = live.clone();
                    patched(req, name, other, &patch, &mut object)?;
                    // worked out once admitted, below
                    (object, Vec::new(), resource_version(req, name, live)?)
                }
            };
            check_target(req, &mut object, Some(name))?;
            // A patch that names a resourceVersion makes it the precondition, as on
            // kube-apiserver; otherwise the version read is, and a conflict reads again.
            let named = resource_version(req, name, &object)?;
            let explicit = named != read_at && live.is_some();
            let rv = if explicit { named } else { read_at };
            let (mut item, warnings) = admit(req, name, &object, rv, query)?;
            let managed = match (&kind, &live) {
                (PatchType::Apply(_), _) | (_, None) => managed,
                (_, Some(live)) => {
                    ssa::update(Some(live), &managers(live)?, &admitted(req, &item)?, who)
                }
            };
            set_managers(&mut item, &managed);
            let (mode, code) = if live.is_some() {
                (v1::ApplyMode::Update, StatusCode::OK)
            } else {
                (v1::ApplyMode::Create, StatusCode::CREATED)
            };
            match apply(&mut api, req, item, mode).await {
                Ok(()) => {
                    return Ok(with_warnings(
                        written(api.clone(), req, name, code).await,
                        &warnings,
                    ));
                }
                Err(s)
                    if (s.code() == tonic::Code::Aborted && !explicit)
                        || (s.code() == tonic::Code::AlreadyExists && live.is_none()) =>
                {
                    last = Some(s);
                }
                Err(s) => return Err(refused(req, name, &s)),
            }
        }
        Err(last.map_or_else(
            || bad_request("the patch could not be applied"),
            |s| from_status(&s),
        ))
    };
    go.await.unwrap_or_else(|failed| failed)
}

/// `object` patched by a merge, JSON or strategic merge `patch`.
fn patched(
    req: &Req,
    name: &str,
    kind: &PatchType,
    patch: &Value,
    object: &mut Value,
) -> Result<(), Response> {
    match kind {
        PatchType::Merge => json_patch::merge(object, patch),
        PatchType::Strategic => crate::smp::apply(object, patch).map_err(|e| {
            invalid(
                req,
                name,
                &[(
                    String::new(),
                    format!("the strategic merge patch failed: {e}"),
                )],
            )
        })?,
        PatchType::Json(p) => json_patch_bounded(object, p).map_err(|e| {
            invalid(
                req,
                name,
                &[(String::new(), format!("the JSON patch failed: {e}"))],
            )
        })?,
        PatchType::Apply(_) => {}
    }
    Ok(())
}

/// DeleteOptions' preconditions, from the body (kubectl sends one) and the query.
fn preconditions(
    body: &[u8],
    query: &[(String, String)],
) -> Result<Option<v1::Preconditions>, Response> {
    let options: Value = if body.iter().all(u8::is_ascii_whitespace) {
        Value::Null
    } else {
        serde_json::from_slice(body)
            .map_err(|e| bad_request(&format!("the DeleteOptions are not valid JSON: {e}")))?
    };
    if options
        .get("dryRun")
        .is_some_and(|d| d.as_array().is_some_and(|a| !a.is_empty()))
        || param(query, "dryRun").is_some_and(|d| !d.is_empty())
    {
        return Err(bad_request(
            "dryRun is not served by Flotilla's Kubernetes API",
        ));
    }
    let Some(pre) = options.get("preconditions").filter(|p| p.is_object()) else {
        return Ok(None);
    };
    let resource_version = match pre.get("resourceVersion").and_then(Value::as_str) {
        None | Some("") => None,
        Some(rv) => Some(rv.parse::<i64>().map_err(|_| {
            bad_request(&format!(
                "preconditions.resourceVersion {rv:?} is not one this server gave out"
            ))
        })?),
    };
    let uid = pre
        .get("uid")
        .and_then(Value::as_str)
        .filter(|u| !u.is_empty())
        .map(str::to_owned);
    Ok(Some(v1::Preconditions {
        resource_version,
        uid,
    }))
}

/// DELETE of a collection: every object the query selects (`labelSelector`,
/// `fieldSelector`), one by one, as kube-apiserver does (not all or nothing: a failure
/// answers with the objects before it deleted).
pub(super) async fn delete_collection(
    api: ApiClient<Channel>,
    req: &Req,
    query: &[(String, String)],
    body: &[u8],
) -> Response {
    let go = async {
        writable(req)?;
        let mut page_query: Vec<(String, String)> = query
            .iter()
            .filter(|(k, _)| k == "labelSelector" || k == "fieldSelector")
            .cloned()
            .collect();
        let mut names = Vec::new();
        loop {
            let (items, _, next) = list_page(api.clone(), req, &page_query).await?;
            names.extend(items.iter().filter_map(|o| {
                Some((
                    meta_str(o, "namespace").unwrap_or_default().to_owned(),
                    meta_str(o, "name")?.to_owned(),
                ))
            }));
            if next.is_empty() {
                break;
            }
            page_query.retain(|(k, _)| k != "continue");
            page_query.push(("continue".into(), next));
        }
        for (deleted, (namespace, name)) in names.iter().enumerate() {
            let one = Req {
                kind: req.kind,
                info: req.info,
                namespace: namespace.clone(),
                headers: req.headers.clone(),
            };
            let answer = delete(api.clone(), &one, name, query, body).await;
            if !answer.status().is_success() {
                tracing::info!(
                    kind = req.name(),
                    deleted,
                    of = names.len(),
                    "deletecollection stopped at a failure"
                );
                return Err(answer);
            }
        }
        Ok(reply(
            StatusCode::OK,
            &crate::http::success(json!({"group": group(req), "kind": req.info.plural})),
        ))
    };
    go.await.unwrap_or_else(|failed| failed)
}

/// DELETE of one object. Gone: a `Success` Status; kept by a finalizer: the object, marked.
pub(super) async fn delete(
    mut api: ApiClient<Channel>,
    req: &Req,
    name: &str,
    query: &[(String, String)],
    body: &[u8],
) -> Response {
    let go = async {
        writable(req)?;
        let pre = preconditions(body, query)?;
        let (ns, n, h) = (req.namespace.clone(), name.to_owned(), &req.headers);
        let done: Result<(Option<Value>, bool), tonic::Status> = match req.kind {
            Kind::Template => api
                .delete_workload(request(
                    v1::DeleteWorkloadRequest {
                        namespace: ns,
                        kind: req.template_kind(),
                        name: n,
                        preconditions: pre,
                    },
                    h,
                ))
                .await
                .map(|r| {
                    let r = r.into_inner();
                    (r.workload.and_then(|o| req.shaped(&o).ok()), r.deleted)
                }),
            Kind::Cluster => api
                .delete_cluster(request(
                    v1::DeleteClusterRequest {
                        name: n,
                        preconditions: pre,
                    },
                    h,
                ))
                .await
                .map(|r| {
                    let r = r.into_inner();
                    (r.cluster.and_then(|o| req.shaped(&o).ok()), r.deleted)
                }),
            Kind::PropagationPolicy => api
                .delete_propagation_policy(request(
                    v1::DeletePropagationPolicyRequest {
                        namespace: ns,
                        name: n,
                        preconditions: pre,
                    },
                    h,
                ))
                .await
                .map(|r| {
                    let r = r.into_inner();
                    (
                        r.propagation_policy.and_then(|o| req.shaped(&o).ok()),
                        r.deleted,
                    )
                }),
            Kind::ClusterPropagationPolicy => api
                .delete_cluster_propagation_policy(request(
                    v1::DeleteClusterPropagationPolicyRequest {
                        name: n,
                        preconditions: pre,
                    },
                    h,
                ))
                .await
                .map(|r| {
                    let r = r.into_inner();
                    (
                        r.cluster_propagation_policy
                            .and_then(|o| req.shaped(&o).ok()),
                        r.deleted,
                    )
                }),
            Kind::OverridePolicy => api
                .delete_override_policy(request(
                    v1::DeleteOverridePolicyRequest {
                        namespace: ns,
                        name: n,
                        preconditions: pre,
                    },
                    h,
                ))
                .await
                .map(|r| {
                    let r = r.into_inner();
                    (
                        r.override_policy.and_then(|o| req.shaped(&o).ok()),
                        r.deleted,
                    )
                }),
            Kind::ClusterOverridePolicy => api
                .delete_cluster_override_policy(request(
                    v1::DeleteClusterOverridePolicyRequest {
                        name: n,
                        preconditions: pre,
                    },
                    h,
                ))
                .await
                .map(|r| {
                    let r = r.into_inner();
                    (
                        r.cluster_override_policy.and_then(|o| req.shaped(&o).ok()),
                        r.deleted,
                    )
                }),
            Kind::ClusterTaintPolicy => api
                .delete_cluster_taint_policy(request(
                    v1::DeleteClusterTaintPolicyRequest {
                        name: n,
                        preconditions: pre,
                    },
                    h,
                ))
                .await
                .map(|r| {
                    let r = r.into_inner();
                    (
                        r.cluster_taint_policy.and_then(|o| req.shaped(&o).ok()),
                        r.deleted,
                    )
                }),
            Kind::ResourceBinding
            | Kind::ClusterResourceBinding
            | Kind::Work
            | Kind::Event
            | Kind::AccessReview
            | Kind::RulesReview
            | Kind::UserReview => unreachable_write(),
        };
        let (object, deleted) = done.map_err(|s| from_status(&s))?;
        if deleted {
            let uid = object
                .as_ref()
                .and_then(|o| meta_str(o, "uid"))
                .unwrap_or_default()
                .to_owned();
            Ok(reply(
                StatusCode::OK,
                &crate::http::success(json!({"name": name, "group": group(req),
                    "kind": req.info.plural, "uid": uid})),
            ))
        } else {
            // kept by a finalizer: the object with its deletionTimestamp, 202 as on
            // kube-apiserver when the delete is not complete
            Ok(reply(
                StatusCode::ACCEPTED,
                &object.unwrap_or_else(|| json!({})),
            ))
        }
    };
    go.await.unwrap_or_else(|failed| failed)
}

/// What `writable` refused already.
fn unreachable_write<T>() -> Result<T, tonic::Status> {
    Err(tonic::Status::unimplemented(
        "bindings, Works, Events and reviews are not written here",
    ))
}
