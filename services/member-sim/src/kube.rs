//! The member's Kubernetes API server, in the spirit of kwok: the parts of the API that
//! Flotilla and `kubectl` use, over the objects the simulator holds.
//!
//! ```text
//!   GET /version                                  the server's version
//!   GET /api, /apis                               discovery: versions and groups
//!   GET /api/v1, /apis/{group}/{version}          the resources of a group version
//!   GET    {gv}/[namespaces/{ns}/]{resource}      a list (?labelSelector=k, k=v, k!=v, !k),
//!                                                 or with ?watch=true a stream of events
//!   GET    {gv}/[namespaces/{ns}/]{resource}/{n}  one object
//!   PATCH  {gv}/[namespaces/{ns}/]{resource}/{n}  server-side apply (apply-patch+yaml;
//!                                                 ?fieldManager=…&force=true)
//!   DELETE {gv}/[namespaces/{ns}/]{resource}/{n}  delete (any propagationPolicy)
//!   GET /api/v1/nodes, /api/v1/[namespaces/{ns}/]pods   the simulated node and pods
//! ```
//!
//! Objects carry server-set metadata (`uid`, `resourceVersion`, `generation`,
//! `creationTimestamp`, `managedFields`) and the `status` the simulated controllers write.
//! Server-side apply is a faithful subset: `fieldManager` is required; an apply creates the
//! object or replaces its manager's whole intent; an object last applied by another manager
//! is a 409 Conflict unless `force=true`, which takes it over. There is no per-field
//! ownership (one manager owns every field). Other patch types answer 415 (docs/operations.md,
//! "member-sim"). The F11 API errors of `SetFault` apply
//! here: applies (500, 409, lost reply, hang), deletes (500) and reads of workloads (500).

use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;
use std::time::Duration;

use axum::extract::State;
use axum::http::{HeaderMap, Method, StatusCode};
use axum::response::{IntoResponse, Response};
use flotilla_core::resource::{Scope, scope_of};
use flotilla_proto::v1;
use serde_json::{Value, json};

use flotilla_kube::http::{self as k, Served};

use crate::sim::{API_ENABLEMENTS, ApiCall, InjectedError, Sim};

/// The Kubernetes version member-sim answers as.
pub const KUBERNETES_VERSION: (&str, &str) = ("1", "33");

/// The Kubernetes routes, to merge into the member's router.
pub fn routes(sim: Arc<Sim>) -> axum::Router {
    axum::Router::new()
        .route("/version", axum::routing::get(version))
        .route("/api", axum::routing::any(dispatch))
        .route("/api/{*rest}", axum::routing::any(dispatch))
        .route("/apis", axum::routing::any(dispatch))
        .route("/apis/{*rest}", axum::routing::any(dispatch))
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
    reply(code, &k::status(code.as_u16(), reason, &message))
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
    ok(&k::version(
        major,
        minor,
        &format!("v{major}.{minor}.0-flotilla-member-sim"),
    ))
}

fn api_versions() -> Response {
    ok(&k::api_versions())
}

/// The verbs member-sim serves on every resource.
fn verbs() -> Vec<String> {
    ["get", "list", "watch", "patch", "delete"]
        .map(str::to_owned)
        .to_vec()
}

/// The short names and categories a real kube-apiserver lists for the built-in resources
/// member-sim serves (the same from 1.20 to 1.33; `member_sim_answers_like_a_real_api_server`
/// compares them with a real server's).
fn built_in_names(plural: &str) -> (&'static [&'static str], &'static [&'static str]) {
    const ALL: &[&str] = &["all"];
    match plural {
        "deployments" => (&["deploy"], ALL),
        "statefulsets" => (&["sts"], ALL),
        "replicasets" => (&["rs"], ALL),
        "daemonsets" => (&["ds"], ALL),
        "jobs" => (&[], ALL),
        "services" => (&["svc"], ALL),
        "pods" => (&["po"], ALL),
        "configmaps" => (&["cm"], &[]),
        "namespaces" => (&["ns"], &[]),
        "serviceaccounts" => (&["sa"], &[]),
        "persistentvolumeclaims" => (&["pvc"], &[]),
        "nodes" => (&["no"], &[]),
        "customresourcedefinitions" => (&["crd", "crds"], &["api-extensions"]),
        _ => (&[], &[]),
    }
}

/// The strings of the array at `pointer` in `value` (none when absent).
fn strings_at(value: &Value, pointer: &str) -> Vec<String> {
    value
        .pointer(pointer)
        .and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .filter_map(Value::as_str)
                .map(str::to_owned)
                .collect()
        })
        .unwrap_or_default()
}

/// The group versions of the CustomResourceDefinitions applied on the member, with their
/// resources (`spec.group`, each served `spec.versions[].name`, `spec.names`, `spec.scope`).
fn custom_resources(sim: &Sim) -> Vec<(String, Served)> {
    let mut out = Vec::new();
    for crd in sim.objects("apiextensions.k8s.io/v1", "CustomResourceDefinition", None) {
        let s = |p: &str| crd.pointer(p).and_then(Value::as_str).unwrap_or_default();
        let (group, plural, kind) = (
            s("/spec/group"),
            s("/spec/names/plural"),
            s("/spec/names/kind"),
        );
        if group.is_empty() || plural.is_empty() || kind.is_empty() {
            continue;
        }
        let served = Served {
            plural: plural.to_owned(),
            kind: kind.to_owned(),
            namespaced: s("/spec/scope") != "Cluster",
            short_names: strings_at(&crd, "/spec/names/shortNames"),
            categories: strings_at(&crd, "/spec/names/categories"),
            verbs: verbs(),
        };
        for v in crd
            .pointer("/spec/versions")
            .and_then(Value::as_array)
            .map(Vec::as_slice)
            .unwrap_or_default()
        {
            let name = v.get("name").and_then(Value::as_str).unwrap_or_default();
            let on = v.get("served").and_then(Value::as_bool).unwrap_or(true);
            if !name.is_empty() && on {
                out.push((format!("{group}/{name}"), served.clone()));
            }
        }
    }
    out
}

/// Every group version the member serves: the built-in ones and those of its CRDs.
fn group_versions(sim: &Sim) -> Vec<String> {
    let mut gvs: Vec<String> = API_ENABLEMENTS
        .iter()
        .map(|(gv, _)| (*gv).to_owned())
        .collect();
    for (gv, _) in custom_resources(sim) {
        if !gvs.contains(&gv) {
            gvs.push(gv);
        }
    }
    gvs
}

fn api_groups(sim: &Sim) -> Response {
    ok(&k::api_groups(&group_versions(sim)))
}

/// The resources of `group_version` (`v1`, `apps/v1`, a CRD's), `None` when it is not served.
fn resources(sim: &Sim, group_version: &str) -> Option<Vec<Served>> {
    if let Some((_, list)) = API_ENABLEMENTS.iter().find(|(gv, _)| *gv == group_version) {
        return Some(
            list.iter()
                .map(|(plural, kind)| {
                    let (short_names, categories) = built_in_names(plural);
                    let owned = |names: &[&str]| names.iter().map(|n| (*n).to_owned()).collect();
                    Served {
                        plural: (*plural).to_owned(),
                        kind: (*kind).to_owned(),
                        namespaced: scope_of(group_version, kind) == Scope::Namespaced,
                        short_names: owned(short_names),
                        categories: owned(categories),
                        verbs: verbs(),
                    }
                })
                .collect(),
        );
    }
    let custom: Vec<Served> = custom_resources(sim)
        .into_iter()
        .filter(|(gv, _)| gv == group_version)
        .map(|(_, s)| s)
        .collect();
    (!custom.is_empty()).then_some(custom)
}

fn resource_list(sim: &Sim, group_version: &str) -> Response {
    let Some(list) = resources(sim, group_version) else {
        return not_found(format!("the API group version {group_version}"));
    };
    ok(&k::resource_list(group_version, &list))
}

/// What a request path names below a group version.
#[derive(Debug, PartialEq, Eq)]
struct Target<'a> {
    group_version: String,
    namespace: Option<&'a str>,
    resource: &'a str,
    kind: String,
    namespaced: bool,
    name: Option<&'a str>,
}

/// Splits `/api/v1/...` or `/apis/{group}/{version}/...`; `Err` is the answer itself
/// (discovery, or a 404).
#[allow(clippy::result_large_err)] // the error is the answer itself
fn parse<'a>(sim: &Sim, path: &'a str) -> Result<Target<'a>, Response> {
    let segments: Vec<&str> = path.trim_matches('/').split('/').collect();
    let (group_version, rest) = match segments.as_slice() {
        ["api"] => return Err(api_versions()),
        ["apis"] => return Err(api_groups(sim)),
        ["api", "v1"] => return Err(resource_list(sim, "v1")),
        ["apis", group, version] => {
            return Err(resource_list(sim, &format!("{group}/{version}")));
        }
        ["api", "v1", rest @ ..] => ("v1".to_owned(), rest),
        ["apis", group, version, rest @ ..] => (format!("{group}/{version}"), rest),
        _ => return Err(not_found(format!("the path {path}"))),
    };
    let (namespace, resource, name) = match rest {
        ["namespaces", ns, resource] => (Some(*ns), *resource, None),
        ["namespaces", ns, resource, name] => (Some(*ns), *resource, Some(*name)),
        [resource] => (None, *resource, None),
        [resource, name] => (None, *resource, Some(*name)),
        _ => return Err(not_found(format!("the path {path}"))),
    };
    let served = resources(sim, &group_version)
        .and_then(|r| r.into_iter().find(|s| s.plural == resource))
        .ok_or_else(|| not_found(format!("the resource {resource} of {group_version}")))?;
    Ok(Target {
        group_version,
        namespace,
        resource,
        kind: served.kind,
        namespaced: served.namespaced,
        name,
    })
}

fn query(uri: &axum::http::Uri) -> HashMap<String, String> {
    uri.query()
        .map(|q| {
            url_pairs(q)
                .into_iter()
                .collect::<HashMap<String, String>>()
        })
        .unwrap_or_default()
}

/// `a=b&c=d%2Fe` as decoded pairs (`application/x-www-form-urlencoded`, as a Kubernetes
/// API server reads its query).
fn url_pairs(q: &str) -> Vec<(String, String)> {
    k::url_pairs(q)
}

/// One requirement of a label selector.
#[derive(Debug, PartialEq, Eq)]
enum Requirement {
    Exists(String),
    NotExists(String),
    Equals(String, String),
    NotEquals(String, String),
}

/// Parses the equality-based selectors Flotilla and kubectl send (`k`, `!k`, `k=v`, `k==v`,
/// `k!=v`, comma-separated); set-based selectors (`in`, `notin`) answer 400.
fn parse_selector(text: &str) -> Result<Vec<Requirement>, String> {
    text.split(',')
        .map(str::trim)
        .filter(|t| !t.is_empty())
        .map(|t| {
            if t.contains(" in ") || t.contains(" notin ") || t.contains('(') {
                return Err(format!(
                    "set-based selector {t:?} is not served by member-sim"
                ));
            }
            Ok(if let Some((k, v)) = t.split_once("!=") {
                Requirement::NotEquals(k.trim().into(), v.trim().into())
            } else if let Some((k, v)) = t.split_once("==").or_else(|| t.split_once('=')) {
                Requirement::Equals(k.trim().into(), v.trim().into())
            } else if let Some(k) = t.strip_prefix('!') {
                Requirement::NotExists(k.trim().into())
            } else {
                Requirement::Exists(t.into())
            })
        })
        .collect()
}

fn selects(requirements: &[Requirement], object: &Value) -> bool {
    let label = |k: &str| {
        object
            .pointer("/metadata/labels")
            .and_then(|l| l.get(k))
            .and_then(Value::as_str)
    };
    requirements.iter().all(|r| match r {
        Requirement::Exists(k) => label(k).is_some(),
        Requirement::NotExists(k) => label(k).is_none(),
        Requirement::Equals(k, v) => label(k) == Some(v.as_str()),
        Requirement::NotEquals(k, v) => label(k) != Some(v.as_str()),
    })
}

/// F11 on this call: `Some(answer)` when it fails on purpose before doing anything.
async fn injected_before(sim: &Sim, call: ApiCall) -> Result<Option<InjectedError>, Response> {
    match sim.inject(call) {
        None => Ok(None),
        Some(InjectedError::Unavailable) => Err(failure(
            StatusCode::INTERNAL_SERVER_ERROR,
            "InternalError",
            "injected (F11): the member's API answered 500".into(),
        )),
        Some(InjectedError::Conflict) => Err(failure(
            StatusCode::CONFLICT,
            "Conflict",
            "injected (F11): the object has been modified; please apply your changes again".into(),
        )),
        Some(InjectedError::Timeout) => {
            tokio::time::sleep(Duration::from_secs(30)).await;
            Err(failure(
                StatusCode::GATEWAY_TIMEOUT,
                "Timeout",
                "injected (F11): the member's API did not answer".into(),
            ))
        }
        Some(InjectedError::LostReply) => Ok(Some(InjectedError::LostReply)),
    }
}

/// How long a watch lasts when the client names no `timeoutSeconds` (a real API server picks
/// between its `--min-request-timeout` and twice that).
const WATCH_DEFAULT_TIMEOUT: Duration = Duration::from_secs(1800);

/// What a watch covers, owned (it outlives the request).
#[derive(Clone, Debug)]
struct WatchScope {
    group_version: String,
    namespace: Option<String>,
    kind: String,
    selector: std::sync::Arc<Vec<Requirement>>,
}

struct WatchState {
    sim: Arc<Sim>,
    scope: WatchScope,
    changes: tokio::sync::watch::Receiver<u64>,
    /// What the client has, by `namespace/name`: the object as last sent.
    sent: HashMap<String, Value>,
    /// Send the current objects as ADDED first.
    initial: bool,
    /// The `resourceVersion` the watch starts from: objects written after it are sent first.
    since: Option<u64>,
    first: bool,
    deadline: tokio::time::Instant,
}

fn identity(object: &Value) -> String {
    let s = |p: &str| {
        object
            .pointer(p)
            .and_then(Value::as_str)
            .unwrap_or_default()
    };
    format!("{}/{}", s("/metadata/namespace"), s("/metadata/name"))
}

/// The objects the watch covers now, by `namespace/name`.
fn current(st: &WatchState) -> HashMap<String, Value> {
    let target = Target {
        group_version: st.scope.group_version.clone(),
        namespace: st.scope.namespace.as_deref(),
        resource: "",
        kind: st.scope.kind.clone(),
        namespaced: true,
        name: None,
    };
    objects(&st.sim, &target)
        .into_iter()
        .filter(|o| selects(&st.scope.selector, o))
        .map(|o| (identity(&o), o))
        .collect()
}

/// One watch event line, `type` first as the API server writes it.
fn event_line(type_: &str, object: &Value) -> String {
    k::event_line(type_, object)
}

/// The changes since the last call: ADDED, MODIFIED (any change of the object, its status
/// included) and DELETED, as watch lines.
fn watch_events(st: &mut WatchState) -> String {
    let now = current(st);
    let mut out = String::new();
    let mut keys: Vec<&String> = now.keys().collect();
    keys.sort();
    for key in keys {
        let object = &now[key];
        match st.sent.get(key) {
            None => out.push_str(&event_line("ADDED", object)),
            Some(old) if old != object => out.push_str(&event_line("MODIFIED", object)),
            Some(_) => {}
        }
    }
    let mut gone: Vec<&String> = st.sent.keys().filter(|k| !now.contains_key(*k)).collect();
    gone.sort();
    for key in gone {
        out.push_str(&event_line("DELETED", &st.sent[key]));
    }
    st.sent = now;
    out
}

/// `GET …?watch=true`: a stream of watch events (one JSON object per line), as the Kubernetes
/// API sends them. Without a `resourceVersion` (or with `0`) the current objects come first as
/// ADDED; with one, what changed after it: objects written since that version come first (as
/// ADDED: which of them the client had is not known), then every later change. As on a real
/// API server, a change between a list and the watch that follows it is not lost. (Deviation:
/// an object deleted between that version and the watch's start is not reported; a real API
/// server sends its DELETED from its history.) Changes are noticed when the member changes
/// (an apply, a delete) and when a pod turns Ready. The stream ends after `timeoutSeconds`.
fn watch(sim: Arc<Sim>, target: &Target<'_>, query: &HashMap<String, String>) -> Response {
    let selector = match query.get("labelSelector").map(|s| parse_selector(s)) {
        None => Vec::new(),
        Some(Ok(r)) => r,
        Some(Err(e)) => return failure(StatusCode::BAD_REQUEST, "BadRequest", e),
    };
    let timeout = query
        .get("timeoutSeconds")
        .and_then(|t| t.parse::<u64>().ok())
        .map_or(WATCH_DEFAULT_TIMEOUT, Duration::from_secs);
    let initial = query
        .get("resourceVersion")
        .is_none_or(|rv| rv.is_empty() || rv == "0");
    let since = query
        .get("resourceVersion")
        .and_then(|rv| rv.parse::<u64>().ok())
        .filter(|rv| *rv > 0);
    let scope = WatchScope {
        group_version: target.group_version.clone(),
        namespace: target.namespace.map(str::to_owned),
        kind: target.kind.clone(),
        selector: std::sync::Arc::new(selector),
    };
    let changes = sim.subscribe_changes();
    let state = WatchState {
        sim,
        scope,
        changes,
        sent: HashMap::new(),
        initial,
        since,
        first: true,
        deadline: tokio::time::Instant::now() + timeout,
    };
    let stream = futures::stream::unfold(state, |mut st| async move {
        loop {
            if st.first {
                st.first = false;
                if let Some(since) = st.since {
                    // what the client has: the objects as they were at `since`
                    st.sent = current(&st)
                        .into_iter()
                        .filter(|(_, o)| {
                            o.pointer("/metadata/resourceVersion")
                                .and_then(Value::as_str)
                                .and_then(|rv| rv.parse::<u64>().ok())
                                .is_some_and(|rv| rv <= since)
                        })
                        .collect();
                }
                let lines = watch_events(&mut st);
                if (st.initial || st.since.is_some()) && !lines.is_empty() {
                    let delay = st.sim.watch_delay();
                    if !delay.is_zero() {
                        tokio::time::sleep(delay).await;
                    }
                    return Some((Ok::<_, std::convert::Infallible>(lines), st));
                }
                continue;
            }
            let ready_at = st.sim.next_ready_at();
            tokio::select! {
                () = tokio::time::sleep_until(st.deadline) => return None,
                changed = st.changes.changed() => {
                    if changed.is_err() {
                        return None;
                    }
                }
                () = async {
                    match ready_at {
                        Some(t) => tokio::time::sleep_until(t).await,
                        None => std::future::pending().await,
                    }
                } => {}
            }
            let lines = watch_events(&mut st);
            if !lines.is_empty() {
                // SetFault's watch delay: the events, as of now, reach the client late
                let delay = st.sim.watch_delay();
                if !delay.is_zero() {
                    tokio::time::sleep(delay).await;
                }
                return Some((Ok(lines), st));
            }
        }
    });
    (
        StatusCode::OK,
        [(axum::http::header::CONTENT_TYPE, "application/json")],
        axum::body::Body::from_stream(stream),
    )
        .into_response()
}

async fn dispatch(
    State(sim): State<Arc<Sim>>,
    method: Method,
    uri: axum::http::Uri,
    headers: HeaderMap,
    body: axum::body::Bytes,
) -> Response {
    let authorization = headers
        .get(axum::http::header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok());
    if !sim.authorized(authorization) {
        return failure(
            StatusCode::UNAUTHORIZED,
            "Unauthorized",
            "Unauthorized".into(),
        );
    }
    let target = match parse(&sim, uri.path()) {
        Ok(t) => t,
        Err(answer) => {
            return if method == Method::GET {
                answer
            } else {
                failure(
                    StatusCode::METHOD_NOT_ALLOWED,
                    "MethodNotAllowed",
                    format!("{method} is not served on {}", uri.path()),
                )
            };
        }
    };
    let query = query(&uri);
    match (&method, target.name) {
        (&Method::GET, None) if query.get("watch").is_some_and(|w| w == "true" || w == "1") => {
            watch(sim.clone(), &target, &query)
        }
        (&Method::GET, None) => list(&sim, &target, &query).await,
        (&Method::GET, Some(name)) => get(&sim, &target, name).await,
        (&Method::PATCH, Some(name)) => apply(&sim, &target, name, &query, &headers, &body).await,
        (&Method::DELETE, Some(name)) => delete(&sim, &target, name).await,
        _ => failure(
            StatusCode::METHOD_NOT_ALLOWED,
            "MethodNotAllowed",
            format!("{method} is not served on {}", uri.path()),
        ),
    }
}

/// The objects `target` names (before selection), by kind.
fn objects(sim: &Sim, target: &Target<'_>) -> Vec<Value> {
    match (target.group_version.as_str(), target.kind.as_str()) {
        ("v1", "Namespace") => namespace_names(sim)
            .iter()
            .map(|n| namespace_object(n))
            .collect(),
        ("v1", "Node") => sim.nodes(),
        ("v1", "Pod") => {
            let mut pods = sim.pods(target.namespace);
            pods.extend(sim.objects("v1", "Pod", target.namespace));
            pods
        }
        (gv, kind) => sim.objects(gv, kind, target.namespace),
    }
}

async fn list(sim: &Sim, target: &Target<'_>, query: &HashMap<String, String>) -> Response {
    let selector = match query.get("labelSelector").map(|s| parse_selector(s)) {
        None => Vec::new(),
        Some(Ok(r)) => r,
        Some(Err(e)) => return failure(StatusCode::BAD_REQUEST, "BadRequest", e),
    };
    if let Err(answer) = injected_before(sim, ApiCall::Status).await {
        return answer;
    }
    let items: Vec<Value> = objects(sim, target)
        .into_iter()
        .filter(|o| selects(&selector, o))
        .collect();
    ok(&json!({
        "kind": format!("{}List", target.kind),
        "apiVersion": target.group_version,
        "metadata": {"resourceVersion": sim.revision().to_string()},
        "items": items,
    }))
}

async fn get(sim: &Sim, target: &Target<'_>, name: &str) -> Response {
    if let Err(answer) = injected_before(sim, ApiCall::Status).await {
        return answer;
    }
    // `/api/v1/namespaces/{name}` names a Namespace, not a namespace to look in
    let scoped = Target {
        group_version: target.group_version.clone(),
        namespace: target.namespace.filter(|_| target.kind != "Namespace"),
        resource: target.resource,
        kind: target.kind.clone(),
        namespaced: target.namespaced,
        name: target.name,
    };
    objects(sim, &scoped)
        .into_iter()
        .find(|o| o.pointer("/metadata/name").and_then(Value::as_str) == Some(name))
        .map_or_else(
            || not_found(format!("{} {name:?}", target.resource)),
            |o| ok(&o),
        )
}

/// The namespaces: `default`, `kube-system`, every namespace an object lives in, and every
/// applied Namespace.
fn namespace_names(sim: &Sim) -> BTreeSet<String> {
    let mut names: BTreeSet<String> = ["default", "kube-system"]
        .iter()
        .map(|s| (*s).to_owned())
        .collect();
    for r in sim.references() {
        if !r.namespace.is_empty() {
            names.insert(r.namespace.clone());
        }
        if r.kind == "Namespace" && r.api_version == "v1" {
            names.insert(r.name);
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

/// Server-side apply of `body` as `target`/`name`.
async fn apply(
    sim: &Sim,
    target: &Target<'_>,
    name: &str,
    query: &HashMap<String, String>,
    headers: &HeaderMap,
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
    let Some(manager) = query.get("fieldManager").filter(|m| !m.is_empty()) else {
        return failure(
            StatusCode::BAD_REQUEST,
            "BadRequest",
            "PatchOptions.meta.k8s.io \"\" is invalid: fieldManager: Required value: is required for apply patch".into(),
        );
    };
    let force = query.get("force").is_some_and(|f| f == "true");
    // JSON is YAML; kubectl and kube-rs send JSON
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
    let namespace = target.namespace.unwrap_or_default();
    if said("/kind") != target.kind
        || said("/apiVersion") != target.group_version
        || said("/metadata/name") != name
        || (!said("/metadata/namespace").is_empty() && said("/metadata/namespace") != namespace)
    {
        return failure(
            StatusCode::BAD_REQUEST,
            "BadRequest",
            format!(
                "the body is {} {} {:?}, the path names {} {} {name:?}",
                said("/apiVersion"),
                said("/kind"),
                said("/metadata/name"),
                target.group_version,
                target.kind,
            ),
        );
    }
    if target.namespaced == target.namespace.is_none() {
        return not_found(format!("{} {name:?} at this path", target.resource));
    }
    // (one lookup: rendering the kind's objects here made every apply O(objects), and the
    // 10,000-binding bench three times slower on the member side)
    let current = sim.identity(&crate::sim::ResourceKey {
        namespace: namespace.to_owned(),
        kind: target.kind.clone(),
        name: name.to_owned(),
    });
    if let Some(refusal) = refused_metadata(&applied, current.as_ref(), target, name) {
        return refusal;
    }
    let lost_reply = match injected_before(sim, ApiCall::Apply).await {
        Ok(lost) => lost.is_some(),
        Err(answer) => return answer,
    };
    let reference = v1::ObjectReference {
        api_version: target.group_version.clone(),
        kind: target.kind.to_owned(),
        namespace: namespace.to_owned(),
        name: name.to_owned(),
        uid: String::new(),
    };
    let spec = match crate::sim::parse_apply(&applied.to_string(), Some(reference), None) {
        Ok(spec) => spec,
        Err(e) => return failure(StatusCode::UNPROCESSABLE_ENTITY, "Invalid", e.to_string()),
    };
    match sim.apply_as(spec, manager, force) {
        Ok(_) if lost_reply => failure(
            StatusCode::INTERNAL_SERVER_ERROR,
            "InternalError",
            "injected (F11): applied, but the reply was lost".into(),
        ),
        Ok((created, object)) => reply(
            if created {
                StatusCode::CREATED
            } else {
                StatusCode::OK
            },
            &object,
        ),
        Err(conflict) => failure(StatusCode::CONFLICT, "Conflict", conflict.to_string()),
    }
}

/// What a real kube-apiserver (1.20, checked by hand against the real-member tests' server)
/// refuses in a server-side apply body, answered the same way:
/// - `metadata.managedFields`, unless empty: 400 "metadata.managedFields must be nil";
/// - a `metadata.uid` that is not the object's (or any uid for an object to be created):
///   422 Invalid, "field is immutable";
/// - a `metadata.resourceVersion` that is not the existing object's: 409 Conflict (it is a
///   precondition; on create it is ignored).
fn refused_metadata(
    applied: &Value,
    current: Option<&(String, String)>,
    target: &Target<'_>,
    name: &str,
) -> Option<Response> {
    let meta = applied.get("metadata")?;
    let managed = meta.get("managedFields");
    if managed.is_some_and(|m| !m.is_null() && m.as_array().is_none_or(|a| !a.is_empty())) {
        return Some(failure(
            StatusCode::BAD_REQUEST,
            "BadRequest",
            "metadata.managedFields must be nil".into(),
        ));
    }
    if let Some(uid) = meta
        .get("uid")
        .and_then(Value::as_str)
        .filter(|u| !u.is_empty())
        && current.map(|c| c.0.as_str()) != Some(uid)
    {
        return Some(failure(
            StatusCode::UNPROCESSABLE_ENTITY,
            "Invalid",
            format!(
                "{} {name:?} is invalid: metadata.uid: Invalid value: {uid:?}: field is immutable",
                target.kind
            ),
        ));
    }
    if let Some(rv) = meta
        .get("resourceVersion")
        .and_then(Value::as_str)
        .filter(|v| !v.is_empty())
        && let Some((_, current_rv)) = current
        && current_rv != rv
    {
        return Some(failure(
            StatusCode::CONFLICT,
            "Conflict",
            format!(
                "Operation cannot be fulfilled on {} {name:?}: the object has been modified; \
                 please apply your changes to the latest version and try again",
                target.resource
            ),
        ));
    }
    None
}

async fn delete(sim: &Sim, target: &Target<'_>, name: &str) -> Response {
    if let Err(answer) = injected_before(sim, ApiCall::Delete).await {
        return answer;
    }
    let key = crate::sim::ResourceKey {
        namespace: target.namespace.unwrap_or_default().to_owned(),
        kind: target.kind.to_owned(),
        name: name.to_owned(),
    };
    if sim.delete(&key) {
        ok(
            &json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success",
                   "details": {"name": name, "kind": target.resource}}),
        )
    } else {
        not_found(format!("{} {name:?}", target.resource))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn selectors_parse_and_select() {
        let r = parse_selector("app=web, !legacy,tier!=db,resourcebinding.karmada.io/permanent-id")
            .expect("parse");
        assert_eq!(r.len(), 4);
        let o = json!({"metadata": {"labels": {"app": "web", "tier": "fe",
                        "resourcebinding.karmada.io/permanent-id": "x"}}});
        assert!(selects(&r, &o));
        let o = json!({"metadata": {"labels": {"app": "web", "legacy": "1"}}});
        assert!(!selects(&r, &o));
        assert!(parse_selector("app in (a,b)").is_err());
    }

    #[test]
    fn paths_name_their_target() {
        let sim = Sim::new(crate::sim::SimConfig {
            name: "m".into(),
            capacity: 1,
            pod_startup_delay: Duration::from_millis(1),
            fault: crate::sim::Fault::Healthy,
            node_cpu_millis: None,
            node_memory_bytes: None,
        });
        #[allow(clippy::result_large_err)] // the error is the answer itself
        let parse = |p| parse(&sim, p);
        let t = parse("/apis/apps/v1/namespaces/shop/deployments/web").expect("target");
        assert_eq!(
            (
                t.group_version.as_str(),
                t.namespace,
                t.kind.as_str(),
                t.name
            ),
            ("apps/v1", Some("shop"), "Deployment", Some("web"))
        );
        let t = parse("/api/v1/namespaces/shop").expect("target");
        assert_eq!((t.kind.as_str(), t.name), ("Namespace", Some("shop")));
        let t = parse("/apis/rbac.authorization.k8s.io/v1/clusterroles/view").expect("target");
        assert_eq!((t.namespace, t.kind.as_str()), (None, "ClusterRole"));
        assert!(parse("/apis/apps/v1/widgets").is_err());
        assert_eq!(
            url_pairs("labelSelector=resourcebinding.karmada.io%2Fpermanent-id&watch=1&x=a+b"),
            [
                (
                    "labelSelector".to_owned(),
                    "resourcebinding.karmada.io/permanent-id".to_owned()
                ),
                ("watch".to_owned(), "1".to_owned()),
                ("x".to_owned(), "a b".to_owned()),
            ]
        );
    }
}
