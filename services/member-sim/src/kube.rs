//! A Kubernetes API server over what the member holds (reads, server-side apply, delete), so
//! that `kubectl` (and any Kubernetes client) can look at and change a simulated member:
//!
//! ```text
//!   GET /version                                   the server's version
//!   GET /api, /apis                                discovery: versions and groups
//!   GET /api/v1, /apis/{group}/{version}           the resources of a group version
//!   GET …/{resource}                               a list over every namespace
//!   GET …/namespaces/{ns}/{resource}[/{name}]      a list in a namespace, or one object
//!   GET /api/v1/namespaces[/{name}]                the namespaces objects live in
//!   PATCH …/namespaces/{ns}/{resource}/{name}      server-side apply (apply-patch+yaml)
//!   DELETE …/namespaces/{ns}/{resource}/{name}     delete
//! ```
//!
//! Objects are the applied manifests with server-set metadata (`resourceVersion`,
//! `generation`, `creationTimestamp`) and the simulated `status` (replicas, readyReplicas, …)
//! filled in. Server-side apply is a subset: the applied object replaces the stored one (one
//! field manager's whole intent, as `force` gives it); there is no field ownership, so no
//! conflicts. Other patch types answer 415; watch is not served (docs/operations.md,
//! member-sim).

use std::collections::BTreeSet;
use std::sync::Arc;

use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use flotilla_core::resource::{Scope, scope_of};
use flotilla_proto::v1;
use serde_json::{Value, json};

use crate::sim::{API_ENABLEMENTS, Sim};

/// The Kubernetes version member-sim answers as.
pub const KUBERNETES_VERSION: (&str, &str) = ("1", "31");

/// The Kubernetes routes, to merge into the member's router.
pub fn routes(sim: Arc<Sim>) -> axum::Router {
    axum::Router::new()
        .route("/version", get(version))
        .route("/api", get(api_versions))
        .route("/apis", get(api_groups))
        .route("/api/v1", get(core_resources))
        .route("/api/v1/namespaces", get(namespaces))
        .route("/api/v1/namespaces/{name}", get(namespace))
        .route("/api/v1/{resource}", get(core_list))
        .route("/api/v1/namespaces/{ns}/{resource}", get(core_list_in))
        .route(
            "/api/v1/namespaces/{ns}/{resource}/{name}",
            get(core_get).patch(core_apply).delete(core_delete),
        )
        .route("/apis/{group}/{version}", get(group_resources))
        .route("/apis/{group}/{version}/{resource}", get(group_list))
        .route(
            "/apis/{group}/{version}/namespaces/{ns}/{resource}",
            get(group_list_in),
        )
        .route(
            "/apis/{group}/{version}/namespaces/{ns}/{resource}/{name}",
            get(group_get).patch(group_apply).delete(group_delete),
        )
        .with_state(sim)
}

/// `body` as a JSON response with `code`.
fn reply(code: StatusCode, body: &Value) -> Response {
    (
        code,
        [(axum::http::header::CONTENT_TYPE, "application/json")],
        body.to_string(),
    )
        .into_response()
}

fn ok(body: &Value) -> Response {
    reply(StatusCode::OK, body)
}

/// A Kubernetes `Status` failure.
fn failure(code: StatusCode, reason: &str, message: String) -> Response {
    reply(
        code,
        &json!({
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": message,
            "reason": reason,
            "code": code.as_u16(),
        }),
    )
}

fn not_found(what: String) -> Response {
    failure(
        StatusCode::NOT_FOUND,
        "NotFound",
        format!("{what} not found"),
    )
}

async fn version() -> Response {
    let (major, minor) = KUBERNETES_VERSION;
    ok(&json!({
        "major": major,
        "minor": minor,
        "gitVersion": format!("v{major}.{minor}.0-flotilla-member-sim"),
        "platform": "linux/amd64",
    }))
}

async fn api_versions() -> Response {
    ok(&json!({
        "kind": "APIVersions",
        "versions": ["v1"],
        "serverAddressByClientCIDRs": [],
    }))
}

async fn api_groups() -> Response {
    let groups: Vec<Value> = API_ENABLEMENTS
        .iter()
        .filter_map(|(gv, _)| gv.split_once('/'))
        .map(|(group, version)| {
            let gv = json!({"groupVersion": format!("{group}/{version}"), "version": version});
            json!({"name": group, "versions": [gv.clone()], "preferredVersion": gv})
        })
        .collect();
    ok(&json!({"kind": "APIGroupList", "apiVersion": "v1", "groups": groups}))
}

/// The resources of `group_version` (`v1`, `apps/v1`), `None` when it is not served.
fn resources(group_version: &str) -> Option<&'static [(&'static str, &'static str)]> {
    API_ENABLEMENTS
        .iter()
        .find(|(gv, _)| *gv == group_version)
        .map(|(_, r)| *r)
}

/// The kind `resource` (`deployments`) names in `group_version`, or a NotFound answer.
#[allow(clippy::result_large_err)] // the error is the answer itself
fn kind_of(group_version: &str, resource: &str) -> Result<&'static str, Response> {
    resources(group_version)
        .and_then(|r| r.iter().find(|(name, _)| *name == resource))
        .map(|(_, kind)| *kind)
        .ok_or_else(|| not_found(format!("the resource {resource} of {group_version}")))
}

fn namespaced(group_version: &str, kind: &str) -> bool {
    scope_of(group_version, kind) == Scope::Namespaced
}

fn resource_list(group_version: &str) -> Response {
    let Some(list) = resources(group_version) else {
        return not_found(format!("the API group version {group_version}"));
    };
    let resources: Vec<Value> = list
        .iter()
        .map(|(name, kind)| {
            json!({
                "name": name,
                "singularName": kind.to_ascii_lowercase(),
                "namespaced": namespaced(group_version, kind),
                "kind": kind,
                "verbs": ["get", "list", "patch", "delete"],
            })
        })
        .collect();
    ok(&json!({
        "kind": "APIResourceList",
        "apiVersion": "v1",
        "groupVersion": group_version,
        "resources": resources,
    }))
}

async fn core_resources() -> Response {
    resource_list("v1")
}

async fn group_resources(Path((group, version)): Path<(String, String)>) -> Response {
    resource_list(&format!("{group}/{version}"))
}

/// An applied object as the API server returns it.
fn object(status: &v1::ManifestStatus) -> Option<Value> {
    let mut object: Value = serde_json::from_str(&status.manifest).ok()?;
    let meta = object
        .as_object_mut()?
        .entry("metadata")
        .or_insert(json!({}));
    if let (Some(meta), Some(applied)) = (meta.as_object_mut(), status.applied_at.as_ref()) {
        let millis = applied.seconds * 1000 + i64::from(applied.nanos) / 1_000_000;
        meta.insert("resourceVersion".into(), json!(millis.to_string()));
        // (RFC 3339, as Kubernetes writes it)
        meta.insert("creationTimestamp".into(), json!(applied.to_string()));
    }
    let simulated: Value = serde_json::from_str(&status.status).unwrap_or(json!({}));
    if let Some(generation) = simulated.get("observedGeneration").cloned()
        && let Some(meta) = object.get_mut("metadata").and_then(Value::as_object_mut)
    {
        meta.insert("generation".into(), generation);
    }
    if simulated.as_object().is_some_and(|s| !s.is_empty())
        && let Some(map) = object.as_object_mut()
    {
        map.insert("status".into(), simulated);
    }
    Some(object)
}

/// The objects of `kind` in `group_version`, in `namespace` (`None`: every namespace).
fn select(sim: &Sim, group_version: &str, kind: &str, namespace: Option<&str>) -> Vec<Value> {
    sim.list()
        .iter()
        .filter(|s| {
            s.resource.as_ref().is_some_and(|r| {
                r.api_version == group_version
                    && r.kind == kind
                    && namespace.is_none_or(|ns| r.namespace == ns)
            })
        })
        .filter_map(object)
        .collect()
}

fn list(sim: &Sim, group_version: &str, resource: &str, namespace: Option<&str>) -> Response {
    let kind = match kind_of(group_version, resource) {
        Ok(kind) => kind,
        Err(response) => return response,
    };
    if kind == "Namespace" {
        return namespace_list(sim);
    }
    let items = select(sim, group_version, kind, namespace);
    ok(&json!({
        "kind": format!("{kind}List"),
        "apiVersion": group_version,
        "metadata": {"resourceVersion": sim.revision().to_string()},
        "items": items,
    }))
}

fn one(sim: &Sim, group_version: &str, resource: &str, namespace: &str, name: &str) -> Response {
    let kind = match kind_of(group_version, resource) {
        Ok(kind) => kind,
        Err(response) => return response,
    };
    select(sim, group_version, kind, Some(namespace))
        .into_iter()
        .find(|o| o.pointer("/metadata/name").and_then(Value::as_str) == Some(name))
        .map_or_else(|| not_found(format!("{resource} {name:?}")), |o| ok(&o))
}

async fn core_list(State(sim): State<Arc<Sim>>, Path(resource): Path<String>) -> Response {
    list(&sim, "v1", &resource, None)
}

async fn core_list_in(
    State(sim): State<Arc<Sim>>,
    Path((ns, resource)): Path<(String, String)>,
) -> Response {
    list(&sim, "v1", &resource, Some(&ns))
}

async fn core_get(
    State(sim): State<Arc<Sim>>,
    Path((ns, resource, name)): Path<(String, String, String)>,
) -> Response {
    one(&sim, "v1", &resource, &ns, &name)
}

async fn group_list(
    State(sim): State<Arc<Sim>>,
    Path((group, version, resource)): Path<(String, String, String)>,
) -> Response {
    list(&sim, &format!("{group}/{version}"), &resource, None)
}

async fn group_list_in(
    State(sim): State<Arc<Sim>>,
    Path((group, version, ns, resource)): Path<(String, String, String, String)>,
) -> Response {
    list(&sim, &format!("{group}/{version}"), &resource, Some(&ns))
}

async fn group_get(
    State(sim): State<Arc<Sim>>,
    Path((group, version, ns, resource, name)): Path<(String, String, String, String, String)>,
) -> Response {
    one(&sim, &format!("{group}/{version}"), &resource, &ns, &name)
}

/// The namespaces: `default`, `kube-system`, every namespace an object lives in, and every
/// applied Namespace.
fn namespace_names(sim: &Sim) -> BTreeSet<String> {
    let mut names: BTreeSet<String> = ["default", "kube-system"]
        .iter()
        .map(|s| (*s).to_owned())
        .collect();
    for s in sim.list() {
        if let Some(r) = &s.resource {
            if !r.namespace.is_empty() {
                names.insert(r.namespace.clone());
            }
            if r.kind == "Namespace" && r.api_version == "v1" {
                names.insert(r.name.clone());
            }
        }
    }
    names
}

fn namespace_object(name: &str) -> Value {
    json!({
        "apiVersion": "v1",
        "kind": "Namespace",
        "metadata": {"name": name},
        "status": {"phase": "Active"},
    })
}

fn namespace_list(sim: &Sim) -> Response {
    let items: Vec<Value> = namespace_names(sim)
        .iter()
        .map(|n| namespace_object(n))
        .collect();
    ok(&json!({
        "kind": "NamespaceList",
        "apiVersion": "v1",
        "metadata": {"resourceVersion": sim.revision().to_string()},
        "items": items,
    }))
}

async fn namespaces(State(sim): State<Arc<Sim>>) -> Response {
    namespace_list(&sim)
}

async fn namespace(State(sim): State<Arc<Sim>>, Path(name): Path<String>) -> Response {
    if namespace_names(&sim).contains(&name) {
        ok(&namespace_object(&name))
    } else {
        not_found(format!("namespaces {name:?}"))
    }
}

// ---------------------------------------------------------------------------------------
// Writes
// ---------------------------------------------------------------------------------------

/// Server-side apply of `body` as `resource`/`name` in `namespace` of `group_version`.
fn apply(
    sim: &Sim,
    group_version: &str,
    (namespace, resource, name): (&str, &str, &str),
    headers: &axum::http::HeaderMap,
    body: &[u8],
) -> Response {
    let content_type = headers
        .get(axum::http::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default();
    if !content_type.starts_with("application/apply-patch+yaml") {
        return failure(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            "UnsupportedMediaType",
            format!(
                "{content_type:?}: member-sim serves server-side apply (application/apply-patch+yaml) only"
            ),
        );
    }
    let kind = match kind_of(group_version, resource) {
        Ok(kind) => kind,
        Err(response) => return response,
    };
    // JSON is YAML; kubectl sends JSON
    let text = String::from_utf8_lossy(body);
    let applied: Value = match serde_json::from_str(&text)
        .or_else(|_| serde_norway::from_str::<Value>(&text).map_err(|e| e.to_string()))
    {
        Ok(v) => v,
        Err(e) => {
            return failure(
                StatusCode::BAD_REQUEST,
                "BadRequest",
                format!("the body is not a Kubernetes object: {e}"),
            );
        }
    };
    let said = |path: &str| {
        applied
            .pointer(path)
            .and_then(Value::as_str)
            .unwrap_or_default()
    };
    if said("/kind") != kind
        || said("/apiVersion") != group_version
        || said("/metadata/name") != name
    {
        return failure(
            StatusCode::BAD_REQUEST,
            "BadRequest",
            format!(
                "the body is {} {} {:?}, the path names {group_version} {kind} {name:?}",
                said("/apiVersion"),
                said("/kind"),
                said("/metadata/name")
            ),
        );
    }
    let reference = v1::ObjectReference {
        api_version: group_version.to_owned(),
        kind: kind.to_owned(),
        namespace: namespace.to_owned(),
        name: name.to_owned(),
        uid: String::new(),
    };
    match crate::sim::parse_apply(&applied.to_string(), Some(reference), None) {
        Ok(spec) => {
            let (created, status) = sim.apply(spec);
            let code = if created {
                StatusCode::CREATED
            } else {
                StatusCode::OK
            };
            object(&status).map_or_else(
                || {
                    failure(
                        StatusCode::INTERNAL_SERVER_ERROR,
                        "InternalError",
                        "unreadable".into(),
                    )
                },
                |o| reply(code, &o),
            )
        }
        Err(e) => failure(StatusCode::UNPROCESSABLE_ENTITY, "Invalid", e.to_string()),
    }
}

fn delete(sim: &Sim, group_version: &str, resource: &str, namespace: &str, name: &str) -> Response {
    let kind = match kind_of(group_version, resource) {
        Ok(kind) => kind,
        Err(response) => return response,
    };
    let key = crate::sim::ResourceKey {
        namespace: namespace.to_owned(),
        kind: kind.to_owned(),
        name: name.to_owned(),
    };
    if sim.delete(&key) {
        ok(
            &json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success",
            "details": {"name": name, "kind": resource}}),
        )
    } else {
        not_found(format!("{resource} {name:?}"))
    }
}

async fn core_apply(
    State(sim): State<Arc<Sim>>,
    Path((ns, resource, name)): Path<(String, String, String)>,
    headers: axum::http::HeaderMap,
    body: axum::body::Bytes,
) -> Response {
    apply(&sim, "v1", (&ns, &resource, &name), &headers, &body)
}

async fn group_apply(
    State(sim): State<Arc<Sim>>,
    Path((group, version, ns, resource, name)): Path<(String, String, String, String, String)>,
    headers: axum::http::HeaderMap,
    body: axum::body::Bytes,
) -> Response {
    let gv = format!("{group}/{version}");
    apply(&sim, &gv, (&ns, &resource, &name), &headers, &body)
}

async fn core_delete(
    State(sim): State<Arc<Sim>>,
    Path((ns, resource, name)): Path<(String, String, String)>,
) -> Response {
    delete(&sim, "v1", &resource, &ns, &name)
}

async fn group_delete(
    State(sim): State<Arc<Sim>>,
    Path((group, version, ns, resource, name)): Path<(String, String, String, String, String)>,
) -> Response {
    delete(&sim, &format!("{group}/{version}"), &resource, &ns, &name)
}
