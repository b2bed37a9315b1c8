//! The Kubernetes API over the api's gRPC: kubectl (and client libraries) read Flotilla's
//! objects through it as they read karmada-apiserver's (docs/kubernetes-api.md).
//!
//! ```text
//!   kubectl ──HTTP/JSON──► gateway ──gRPC (flotilla.v1.Api), the caller's bearer token──► api
//!     GET /version, /api, /apis, /apis/{g}/{v}      discovery of Karmada's groups
//!     GET …/{resource}[?labelSelector&fieldSelector&limit&continue]   List*  → a List
//!     GET …/{resource}?watch=1[&resourceVersion]    Watch* → watch event lines
//!     GET …/{resource}/{name}                       Get*   → the object
//! ```
//!
//! The gateway holds no state and decides nothing: every request is one of the api's RPCs,
//! made with the caller's `Authorization` header, so authentication, the method table,
//! redaction and validation are the api's own (one admission path). Objects are written in
//! their Kubernetes form by [`crate::form`], the printer of `flotilla get -o yaml`.
//! Writes ([`write`]) are the api's Apply (create, update, patch) and Delete* RPCs.

use std::future::Future;
use std::pin::Pin;
use std::time::Duration;

use axum::extract::State;
use axum::http::{HeaderMap, Method, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use flotilla_proto::v1;
use flotilla_proto::v1::api_client::ApiClient;
use futures::{Stream, StreamExt};
use serde_json::{Value, json};
use tonic::transport::Channel;

use crate::http::{self as k, Path, Served};
use crate::table::Wanted;

/// The Kubernetes version the gateway answers as (Karmada v1.13's apiserver is built on
/// Kubernetes 1.31).
pub const KUBERNETES_VERSION: (&str, &str) = ("1", "31");

/// How long a watch lasts when the client names no `timeoutSeconds`.
const WATCH_DEFAULT_TIMEOUT: Duration = Duration::from_secs(1800);

/// The longest `timeoutSeconds` taken (a longer one is cut to this).
const WATCH_MAX_TIMEOUT_SECONDS: u64 = 86_400;

/// A kind the gateway serves.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    Cluster,
    PropagationPolicy,
    ClusterPropagationPolicy,
    OverridePolicy,
    ClusterOverridePolicy,
    ClusterTaintPolicy,
    ResourceBinding,
    ClusterResourceBinding,
    /// A resource template (a Workload of the api) of the kind its [`KindInfo`] names.
    Template,
}

/// Karmada's group versions, as its apiserver serves them.
const CLUSTER: &str = "cluster.karmada.io/v1alpha1";
const POLICY: &str = "policy.karmada.io/v1alpha1";
const WORK: &str = "work.karmada.io/v1alpha2";

/// A kind the gateway serves, as discovery lists it.
struct KindInfo {
    kind: Kind,
    /// The Kubernetes `kind`.
    name: &'static str,
    group_version: &'static str,
    plural: &'static str,
    namespaced: bool,
    short_names: &'static [&'static str],
    /// The protobuf message of its objects.
    message: &'static str,
}

static KINDS: &[KindInfo] = &[
    KindInfo {
        kind: Kind::Cluster,
        name: "Cluster",
        group_version: CLUSTER,
        plural: "clusters",
        namespaced: false,
        short_names: &[],
        message: "flotilla.v1.Cluster",
    },
    KindInfo {
        kind: Kind::PropagationPolicy,
        name: "PropagationPolicy",
        group_version: POLICY,
        plural: "propagationpolicies",
        namespaced: true,
        short_names: &["pp"],
        message: "flotilla.v1.PropagationPolicy",
    },
    KindInfo {
        kind: Kind::ClusterPropagationPolicy,
        name: "ClusterPropagationPolicy",
        group_version: POLICY,
        plural: "clusterpropagationpolicies",
        namespaced: false,
        short_names: &["cpp"],
        message: "flotilla.v1.ClusterPropagationPolicy",
    },
    KindInfo {
        kind: Kind::OverridePolicy,
        name: "OverridePolicy",
        group_version: POLICY,
        plural: "overridepolicies",
        namespaced: true,
        short_names: &["op"],
        message: "flotilla.v1.OverridePolicy",
    },
    KindInfo {
        kind: Kind::ClusterOverridePolicy,
        name: "ClusterOverridePolicy",
        group_version: POLICY,
        plural: "clusteroverridepolicies",
        namespaced: false,
        short_names: &["cop"],
        message: "flotilla.v1.ClusterOverridePolicy",
    },
    KindInfo {
        kind: Kind::ClusterTaintPolicy,
        name: "ClusterTaintPolicy",
        group_version: POLICY,
        plural: "clustertaintpolicies",
        namespaced: false,
        short_names: &[],
        message: "flotilla.v1.ClusterTaintPolicy",
    },
    KindInfo {
        kind: Kind::ResourceBinding,
        name: "ResourceBinding",
        group_version: WORK,
        plural: "resourcebindings",
        namespaced: true,
        short_names: &["rb"],
        message: "flotilla.v1.ResourceBinding",
    },
    KindInfo {
        kind: Kind::ClusterResourceBinding,
        name: "ClusterResourceBinding",
        group_version: WORK,
        plural: "clusterresourcebindings",
        namespaced: false,
        short_names: &["crb"],
        message: "flotilla.v1.ResourceBinding",
    },
    // Resource templates: the built-in kinds Flotilla propagates, each a Workload of the api
    // (Secrets are not served here yet: see docs/kubernetes-api.md).
    KindInfo {
        kind: Kind::Template,
        name: "ConfigMap",
        group_version: "v1",
        plural: "configmaps",
        namespaced: true,
        short_names: &["cm"],
        message: "flotilla.v1.Workload",
    },
    KindInfo {
        kind: Kind::Template,
        name: "Service",
        group_version: "v1",
        plural: "services",
        namespaced: true,
        short_names: &["svc"],
        message: "flotilla.v1.Workload",
    },
    KindInfo {
        kind: Kind::Template,
        name: "ServiceAccount",
        group_version: "v1",
        plural: "serviceaccounts",
        namespaced: true,
        short_names: &["sa"],
        message: "flotilla.v1.Workload",
    },
    KindInfo {
        kind: Kind::Template,
        name: "PersistentVolumeClaim",
        group_version: "v1",
        plural: "persistentvolumeclaims",
        namespaced: true,
        short_names: &["pvc"],
        message: "flotilla.v1.Workload",
    },
    KindInfo {
        kind: Kind::Template,
        name: "Namespace",
        group_version: "v1",
        plural: "namespaces",
        namespaced: false,
        short_names: &["ns"],
        message: "flotilla.v1.Workload",
    },
    KindInfo {
        kind: Kind::Template,
        name: "Deployment",
        group_version: "apps/v1",
        plural: "deployments",
        namespaced: true,
        short_names: &["deploy"],
        message: "flotilla.v1.Workload",
    },
    KindInfo {
        kind: Kind::Template,
        name: "StatefulSet",
        group_version: "apps/v1",
        plural: "statefulsets",
        namespaced: true,
        short_names: &["sts"],
        message: "flotilla.v1.Workload",
    },
    KindInfo {
        kind: Kind::Template,
        name: "DaemonSet",
        group_version: "apps/v1",
        plural: "daemonsets",
        namespaced: true,
        short_names: &["ds"],
        message: "flotilla.v1.Workload",
    },
    KindInfo {
        kind: Kind::Template,
        name: "ReplicaSet",
        group_version: "apps/v1",
        plural: "replicasets",
        namespaced: true,
        short_names: &["rs"],
        message: "flotilla.v1.Workload",
    },
    KindInfo {
        kind: Kind::Template,
        name: "Job",
        group_version: "batch/v1",
        plural: "jobs",
        namespaced: true,
        short_names: &[],
        message: "flotilla.v1.Workload",
    },
    KindInfo {
        kind: Kind::Template,
        name: "CronJob",
        group_version: "batch/v1",
        plural: "cronjobs",
        namespaced: true,
        short_names: &["cj"],
        message: "flotilla.v1.Workload",
    },
    KindInfo {
        kind: Kind::Template,
        name: "Ingress",
        group_version: "networking.k8s.io/v1",
        plural: "ingresses",
        namespaced: true,
        short_names: &["ing"],
        message: "flotilla.v1.Workload",
    },
    KindInfo {
        kind: Kind::Template,
        name: "PodDisruptionBudget",
        group_version: "policy/v1",
        plural: "poddisruptionbudgets",
        namespaced: true,
        short_names: &["pdb"],
        message: "flotilla.v1.Workload",
    },
    KindInfo {
        kind: Kind::Template,
        name: "Role",
        group_version: "rbac.authorization.k8s.io/v1",
        plural: "roles",
        namespaced: true,
        short_names: &[],
        message: "flotilla.v1.Workload",
    },
    KindInfo {
        kind: Kind::Template,
        name: "RoleBinding",
        group_version: "rbac.authorization.k8s.io/v1",
        plural: "rolebindings",
        namespaced: true,
        short_names: &[],
        message: "flotilla.v1.Workload",
    },
    KindInfo {
        kind: Kind::Template,
        name: "ClusterRole",
        group_version: "rbac.authorization.k8s.io/v1",
        plural: "clusterroles",
        namespaced: false,
        short_names: &[],
        message: "flotilla.v1.Workload",
    },
    KindInfo {
        kind: Kind::Template,
        name: "ClusterRoleBinding",
        group_version: "rbac.authorization.k8s.io/v1",
        plural: "clusterrolebindings",
        namespaced: false,
        short_names: &[],
        message: "flotilla.v1.Workload",
    },
];

mod openapi;
mod write;

fn group_versions() -> Vec<&'static str> {
    let mut gvs = Vec::new();
    for k in KINDS {
        if !gvs.contains(&k.group_version) {
            gvs.push(k.group_version);
        }
    }
    gvs
}

fn served(group_version: &str) -> Vec<Served> {
    KINDS
        .iter()
        .filter(|k| k.group_version == group_version)
        .map(|k| Served {
            plural: k.plural.to_owned(),
            kind: k.name.to_owned(),
            namespaced: k.namespaced,
            short_names: k.short_names.iter().map(|s| (*s).to_owned()).collect(),
            categories: Vec::new(),
            verbs: verbs(k.kind),
        })
        .collect()
}

/// What discovery says may be done with `kind`: bindings are read-only to users.
fn verbs(kind: Kind) -> Vec<String> {
    let read = ["get", "list", "watch"];
    let write = ["create", "update", "patch", "delete", "deletecollection"];
    let all: Vec<&str> = match kind {
        Kind::ResourceBinding | Kind::ClusterResourceBinding => read.to_vec(),
        _ => read.iter().chain(write.iter()).copied().collect(),
    };
    all.into_iter().map(str::to_owned).collect()
}

/// The Kubernetes routes of the gateway over `api`.
pub fn router(api: ApiClient<Channel>) -> axum::Router {
    axum::Router::new()
        .route("/version", axum::routing::get(version))
        .route(
            "/openapi/v3",
            axum::routing::get(|| async { reply(StatusCode::OK, &openapi::index()) }),
        )
        .route("/openapi/v3/{*rest}", axum::routing::get(openapi_document))
        .route("/api", axum::routing::any(dispatch))
        .route("/api/{*rest}", axum::routing::any(dispatch))
        .route("/apis", axum::routing::any(dispatch))
        .route("/apis/{*rest}", axum::routing::any(dispatch))
        .fallback(|uri: Uri| async move { not_found(&format!("the path {}", uri.path())) })
        .with_state(api)
}

/// Serves the gateway on `listener` until `shutdown` completes.
pub async fn serve(
    listener: tokio::net::TcpListener,
    api: ApiClient<Channel>,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    axum::serve(listener, router(api))
        .with_graceful_shutdown(shutdown)
        .await
}

/// Serves the gateway over TLS (`tls`: its certificate; HTTP/2,
/// as kubectl speaks it) on `listener` until `shutdown` completes. kubectl sends a bearer
/// token only over TLS.
pub async fn serve_tls(
    listener: tokio::net::TcpListener,
    tls: flotilla_runtime::tls::ServerTls,
    api: ApiClient<Channel>,
    shutdown: impl Future<Output = ()> + Send + 'static,
) {
    let router = router(api);
    let incoming = tls.incoming(listener).take_until(shutdown);
    let mut incoming = std::pin::pin!(incoming);
    while let Some(accepted) = incoming.next().await {
        let Ok(stream) = accepted else { continue };
        let service = hyper_util::service::TowerToHyperService::new(router.clone());
        tokio::spawn(async move {
            let builder =
                hyper_util::server::conn::auto::Builder::new(hyper_util::rt::TokioExecutor::new());
            if let Err(error) = builder
                .serve_connection(hyper_util::rt::TokioIo::new(stream), service)
                .await
            {
                tracing::debug!(%error, "a Kubernetes API connection ended with an error");
            }
        });
    }
}

fn reply(code: StatusCode, body: &Value) -> Response {
    (
        code,
        [(axum::http::header::CONTENT_TYPE, "application/json")],
        body.to_string(),
    )
        .into_response()
}

fn failure(code: StatusCode, reason: &str, message: &str) -> Response {
    reply(code, &k::status(code.as_u16(), reason, message))
}

fn not_found(what: &str) -> Response {
    failure(
        StatusCode::NOT_FOUND,
        "NotFound",
        &format!("{what} not found"),
    )
}

async fn openapi_document(uri: Uri) -> Response {
    let path = uri.path();
    let gv = match path.strip_prefix("/openapi/v3/apis/") {
        Some(gv) => gv,
        None if path == "/openapi/v3/api/v1" => "v1",
        None => "",
    };
    if group_versions().contains(&gv) {
        reply(StatusCode::OK, &openapi::document(gv))
    } else {
        not_found(&format!("the OpenAPI document {}", uri.path()))
    }
}

async fn version() -> Response {
    let (major, minor) = KUBERNETES_VERSION;
    reply(
        StatusCode::OK,
        &k::version(major, minor, &format!("v{major}.{minor}.0-flotilla")),
    )
}

/// A gRPC failure as the Kubernetes `Status` kube-apiserver would answer.
fn from_status(status: &tonic::Status) -> Response {
    use tonic::Code;
    let (code, reason) = match status.code() {
        Code::InvalidArgument => (StatusCode::BAD_REQUEST, "BadRequest"),
        Code::NotFound => (StatusCode::NOT_FOUND, "NotFound"),
        Code::AlreadyExists => (StatusCode::CONFLICT, "AlreadyExists"),
        Code::Aborted | Code::FailedPrecondition => (StatusCode::CONFLICT, "Conflict"),
        Code::PermissionDenied => (StatusCode::FORBIDDEN, "Forbidden"),
        Code::Unauthenticated => (StatusCode::UNAUTHORIZED, "Unauthorized"),
        Code::OutOfRange => (StatusCode::GONE, "Expired"),
        Code::Unavailable => (StatusCode::SERVICE_UNAVAILABLE, "ServiceUnavailable"),
        Code::DeadlineExceeded => (StatusCode::GATEWAY_TIMEOUT, "Timeout"),
        Code::ResourceExhausted => (StatusCode::TOO_MANY_REQUESTS, "TooManyRequests"),
        _ => (StatusCode::INTERNAL_SERVER_ERROR, "InternalError"),
    };
    failure(code, reason, status.message())
}

/// The query of a request, as pairs.
fn query(uri: &Uri) -> Vec<(String, String)> {
    uri.query().map(k::url_pairs).unwrap_or_default()
}

fn param<'a>(query: &'a [(String, String)], key: &str) -> Option<&'a str> {
    query
        .iter()
        .find(|(k, _)| k == key)
        .map(|(_, v)| v.as_str())
}

/// `fieldSelector`: equality on `metadata.name` and `metadata.namespace` (what kubectl sends
/// for `get NAME -w`); anything else is refused, not ignored.
#[derive(Debug, Default, PartialEq, Eq)]
struct Fields {
    name: Option<String>,
    namespace: Option<String>,
}

fn field_selector(text: Option<&str>) -> Result<Fields, String> {
    let mut fields = Fields::default();
    for term in text.unwrap_or_default().split(',').map(str::trim) {
        if term.is_empty() {
            continue;
        }
        let (key, value) = term
            .split_once("==")
            .or_else(|| term.split_once('='))
            .filter(|(k, _)| !k.ends_with('!'))
            .ok_or_else(|| {
                format!("field selector {term:?}: only metadata.name= and metadata.namespace= are served")
            })?;
        match key.trim() {
            "metadata.name" => fields.name = Some(value.trim().to_owned()),
            "metadata.namespace" => fields.namespace = Some(value.trim().to_owned()),
            other => {
                return Err(format!(
                    "field selector {other:?} is not served (only metadata.name and metadata.namespace)"
                ));
            }
        }
    }
    Ok(fields)
}

impl Fields {
    fn matches(&self, object: &Value) -> bool {
        let meta = |k: &str| {
            object
                .pointer(&format!("/metadata/{k}"))
                .and_then(Value::as_str)
                .unwrap_or_default()
        };
        self.name.as_deref().is_none_or(|n| meta("name") == n)
            && self
                .namespace
                .as_deref()
                .is_none_or(|n| meta("namespace") == n)
    }
}

/// A boolean query parameter as kube-apiserver reads one (Go's `strconv.ParseBool`: the
/// Python client sends `True`).
fn truthy(value: &str) -> bool {
    matches!(value, "1" | "t" | "T" | "true" | "TRUE" | "True")
}

/// A gRPC request carrying the caller's `Authorization` header.
fn request<T>(message: T, headers: &HeaderMap) -> tonic::Request<T> {
    let mut request = tonic::Request::new(message);
    if let Some(value) = headers
        .get(axum::http::header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse().ok())
    {
        request.metadata_mut().insert("authorization", value);
    }
    request
}

async fn dispatch(
    State(api): State<ApiClient<Channel>>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    body: axum::body::Body,
) -> Response {
    let (group_version, namespace, resource, name, subresource) = match k::parse_path(uri.path()) {
        // the core group: its template kinds (ConfigMaps, Services…) under /api/v1
        Path::ApiVersions => {
            return reply(
                StatusCode::OK,
                &json!({"kind": "APIVersions", "versions": ["v1"], "serverAddressByClientCIDRs": []}),
            );
        }
        Path::ApiGroups => {
            let named: Vec<&str> = group_versions()
                .into_iter()
                .filter(|gv| gv.contains('/'))
                .collect();
            return reply(StatusCode::OK, &k::api_groups(&named));
        }
        Path::Resources(gv) => {
            let list = served(&gv);
            if list.is_empty() {
                return not_found(&format!("the API group version {gv}"));
            }
            return reply(StatusCode::OK, &k::resource_list(&gv, &list));
        }
        Path::Unknown => return not_found(&format!("the path {}", uri.path())),
        Path::Object {
            group_version,
            namespace,
            resource,
            name,
            subresource,
        } => (group_version, namespace, resource, name, subresource),
    };
    let Some(info) = KINDS
        .iter()
        .find(|k| k.group_version == group_version && k.plural == resource)
    else {
        return not_found(&format!("the resource {resource} of {group_version}"));
    };
    let kind = info.kind;
    if namespace.is_some() && !info.namespaced {
        return not_found(&format!(
            "the namespaced resource {resource} ({} is cluster-scoped)",
            info.name
        ));
    }
    if info.namespaced && namespace.is_none() && name.is_some() {
        // as kube-apiserver: a namespaced object is named only below its namespace
        return not_found(&format!(
            "the cluster-scoped path of {} (a namespaced kind: use /namespaces/{{namespace}}/{resource}/{{name}})",
            info.name
        ));
    }
    if headers
        .keys()
        .any(|h| h.as_str().starts_with("impersonate-"))
    {
        // acting as another principal is not the gateway's to grant: the api knows only the
        // caller's own token
        return failure(
            StatusCode::FORBIDDEN,
            "Forbidden",
            "impersonation (kubectl --as, Impersonate-* headers) is not served: use the \
             principal's own token",
        );
    }
    if method != Method::GET && info.namespaced && namespace.is_none_or(str::is_empty) {
        // as kube-apiserver: a namespaced kind is written below its namespace only
        return not_found(&format!(
            "the path {} for a {method} ({} is namespaced: use /namespaces/{{namespace}}/{resource})",
            uri.path(),
            info.name
        ));
    }
    if subresource.is_some() {
        return not_found(&format!(
            "the subresource {}",
            subresource.unwrap_or_default()
        ));
    }
    let query = query(&uri);
    let namespace = namespace.unwrap_or_default().to_owned();
    let request = Req {
        kind,
        info,
        namespace,
        headers,
    };
    if method == Method::GET {
        // kubectl get asks for a Table (what it prints), and takes the object otherwise
        let accept = request
            .headers
            .get(axum::http::header::ACCEPT)
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default();
        let table = match crate::table::wanted(accept, param(&query, "includeObject")) {
            Ok(t) => t,
            Err(e) => return failure(StatusCode::BAD_REQUEST, "BadRequest", &e),
        };
        return match name {
            Some(name) => get(api, request, name, table).await,
            None if param(&query, "watch").is_some_and(truthy) => {
                watch(api, request, &query, table).await
            }
            None => list(api, request, &query, table).await,
        };
    }
    let body = match axum::body::to_bytes(body, write::MAX_BODY_BYTES).await {
        Ok(b) => b,
        Err(_) => {
            return failure(
                StatusCode::PAYLOAD_TOO_LARGE,
                "RequestEntityTooLarge",
                &format!(
                    "the request body is larger than {} MiB, or was cut off",
                    write::MAX_BODY_BYTES >> 20
                ),
            );
        }
    };
    match (&method, name) {
        (&Method::POST, None) => write::create(api, &request, &query, &body).await,
        (&Method::PUT, Some(name)) => write::replace(api, &request, name, &query, &body).await,
        (&Method::PATCH, Some(name)) => write::patch(api, &request, name, &query, &body).await,
        (&Method::DELETE, Some(name)) => write::delete(api, &request, name, &query, &body).await,
        (&Method::DELETE, None) => write::delete_collection(api, &request, &query, &body).await,
        _ => failure(
            StatusCode::METHOD_NOT_ALLOWED,
            "MethodNotAllowed",
            &format!(
                "{method} on {} is not served (served: get, list, watch, create, update, \
                 patch, delete, deletecollection)",
                uri.path()
            ),
        ),
    }
}

/// What a request names.
struct Req {
    kind: Kind,
    /// Its kind as discovery lists it.
    info: &'static KindInfo,
    /// "" for every namespace (or a cluster-scoped kind).
    namespace: String,
    headers: HeaderMap,
}

impl Req {
    /// `message` in Kubernetes form; `Err` says why it cannot be written.
    fn shaped<M: prost::Message>(&self, message: &M) -> Result<Value, String> {
        crate::form::kubernetes(self.info.message, &message.encode_to_vec())
            .map_err(|e| format!("writing a {}: {e:#}", self.info.name))
    }

    fn shaped_all<M: prost::Message>(&self, items: &[M]) -> Result<Vec<Value>, String> {
        items.iter().map(|m| self.shaped(m)).collect()
    }

    fn group_version(&self) -> &'static str {
        self.info.group_version
    }

    /// The Kubernetes `kind`.
    fn name(&self) -> &'static str {
        self.info.name
    }

    /// The api's name of a template kind (RM-1: `Deployment`, `Ingress.networking.k8s.io`).
    fn template_kind(&self) -> String {
        flotilla_core::resource::qualified_kind(
            flotilla_core::resource::group(self.info.group_version),
            self.info.name,
        )
    }
}

/// A failure of Flotilla's own (an object it cannot write): 500.
fn internal(message: &str) -> Response {
    failure(StatusCode::INTERNAL_SERVER_ERROR, "InternalError", message)
}

async fn get(api: ApiClient<Channel>, req: Req, name: &str, table: Option<Wanted>) -> Response {
    match fetch(api, &req, name).await {
        Ok(object) => match table {
            Some(wanted) => {
                let rv = object
                    .pointer("/metadata/resourceVersion")
                    .cloned()
                    .unwrap_or_default();
                let meta = json!({ "resourceVersion": rv });
                reply(StatusCode::OK, &as_table(&req, wanted, &[object], meta))
            }
            None => reply(StatusCode::OK, &object),
        },
        Err(failed) => failed,
    }
}

/// `items` of `req`'s kind as a Table (`kubectl get`), aged by the wall clock now.
fn as_table(req: &Req, wanted: Wanted, items: &[Value], metadata: Value) -> Value {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_secs()).unwrap_or(i64::MAX));
    crate::table::table(
        wanted,
        flotilla_core::resource::group(req.group_version()),
        req.name(),
        items,
        metadata,
        now,
    )
}

/// One object in Kubernetes form; `Err` is the failure to answer.
async fn fetch(mut api: ApiClient<Channel>, req: &Req, name: &str) -> Result<Value, Response> {
    let (ns, name) = (req.namespace.clone(), name.to_owned());
    let h = &req.headers;
    let shaped = match req.kind {
        Kind::Template => api
            .get_workload(request(
                v1::GetWorkloadRequest {
                    namespace: ns,
                    kind: req.template_kind(),
                    name,
                },
                h,
            ))
            .await
            .map(|r| req.shaped(r.get_ref())),
        Kind::Cluster => api
            .get_cluster(request(v1::GetClusterRequest { name }, h))
            .await
            .map(|r| req.shaped(r.get_ref())),
        Kind::PropagationPolicy => api
            .get_propagation_policy(request(
                v1::GetPropagationPolicyRequest {
                    namespace: ns,
                    name,
                },
                h,
            ))
            .await
            .map(|r| req.shaped(r.get_ref())),
        Kind::ClusterPropagationPolicy => api
            .get_cluster_propagation_policy(request(
                v1::GetClusterPropagationPolicyRequest { name },
                h,
            ))
            .await
            .map(|r| req.shaped(r.get_ref())),
        Kind::OverridePolicy => api
            .get_override_policy(request(
                v1::GetOverridePolicyRequest {
                    namespace: ns,
                    name,
                },
                h,
            ))
            .await
            .map(|r| req.shaped(r.get_ref())),
        Kind::ClusterOverridePolicy => api
            .get_cluster_override_policy(request(v1::GetClusterOverridePolicyRequest { name }, h))
            .await
            .map(|r| req.shaped(r.get_ref())),
        Kind::ClusterTaintPolicy => api
            .get_cluster_taint_policy(request(v1::GetClusterTaintPolicyRequest { name }, h))
            .await
            .map(|r| req.shaped(r.get_ref())),
        Kind::ResourceBinding | Kind::ClusterResourceBinding => api
            .get_resource_binding(request(
                v1::GetResourceBindingRequest {
                    namespace: ns,
                    name,
                },
                h,
            ))
            .await
            .map(|r| req.shaped(r.get_ref())),
    };
    match shaped {
        Ok(Ok(object)) => Ok(object),
        Ok(Err(message)) => Err(internal(&message)),
        Err(status) => Err(from_status(&status)),
    }
}

/// One page of a list: the objects, the list's revision and the next page's token.
type Page = (Vec<Value>, i64, String);

async fn list(
    api: ApiClient<Channel>,
    req: Req,
    query: &[(String, String)],
    table: Option<Wanted>,
) -> Response {
    let (items, revision, next) = match list_page(api, &req, query).await {
        Ok(page) => page,
        Err(failed) => return failed,
    };
    let group_version = req.group_version();
    let mut metadata = json!({"resourceVersion": revision.to_string()});
    if !next.is_empty() {
        metadata["continue"] = next.into();
    }
    if let Some(wanted) = table {
        return reply(StatusCode::OK, &as_table(&req, wanted, &items, metadata));
    }
    reply(
        StatusCode::OK,
        &json!({
            "apiVersion": group_version,
            "kind": format!("{}List", req.name()),
            "metadata": metadata,
            "items": items,
        }),
    )
}

/// One page of `req`'s objects as `query` selects them, in Kubernetes form.
#[allow(clippy::result_large_err)] // the failure is the HTTP answer itself
async fn list_page(
    mut api: ApiClient<Channel>,
    req: &Req,
    query: &[(String, String)],
) -> Result<Page, Response> {
    let fields = match field_selector(param(query, "fieldSelector")) {
        Ok(f) => f,
        Err(e) => return Err(failure(StatusCode::BAD_REQUEST, "BadRequest", &e)),
    };
    let label_selector = param(query, "labelSelector").unwrap_or_default().to_owned();
    let page_size = match param(query, "limit").map(str::parse::<i32>) {
        None => 0,
        Some(Ok(n)) if n >= 0 => n,
        Some(_) => {
            return Err(failure(
                StatusCode::BAD_REQUEST,
                "BadRequest",
                "limit must be a non-negative integer",
            ));
        }
    };
    let page_token = param(query, "continue").unwrap_or_default().to_owned();
    let (ns, h) = (req.namespace.clone(), &req.headers);
    let page: Result<Result<Page, String>, tonic::Status> = match req.kind {
        Kind::Template => api
            .list_workloads(request(
                v1::ListWorkloadsRequest {
                    namespace: ns,
                    kind: req.template_kind(),
                    label_selector,
                    page_size,
                    page_token,
                },
                h,
            ))
            .await
            .map(|r| {
                let r = r.into_inner();
                req.shaped_all(&r.items)
                    .map(|i| (i, r.resource_version, r.next_page_token))
            }),
        Kind::Cluster => api
            .list_clusters(request(
                v1::ListClustersRequest {
                    label_selector,
                    page_size,
                    page_token,
                },
                h,
            ))
            .await
            .map(|r| {
                let r = r.into_inner();
                req.shaped_all(&r.items)
                    .map(|i| (i, r.resource_version, r.next_page_token))
            }),
        Kind::PropagationPolicy => api
            .list_propagation_policies(request(
                v1::ListPropagationPoliciesRequest {
                    namespace: ns,
                    label_selector,
                    page_size,
                    page_token,
                },
                h,
            ))
            .await
            .map(|r| {
                let r = r.into_inner();
                req.shaped_all(&r.items)
                    .map(|i| (i, r.resource_version, r.next_page_token))
            }),
        Kind::ClusterPropagationPolicy => api
            .list_cluster_propagation_policies(request(
                v1::ListClusterPropagationPoliciesRequest {
                    label_selector,
                    page_size,
                    page_token,
                },
                h,
            ))
            .await
            .map(|r| {
                let r = r.into_inner();
                req.shaped_all(&r.items)
                    .map(|i| (i, r.resource_version, r.next_page_token))
            }),
        Kind::OverridePolicy => api
            .list_override_policies(request(
                v1::ListOverridePoliciesRequest {
                    namespace: ns,
                    label_selector,
                    page_size,
                    page_token,
                },
                h,
            ))
            .await
            .map(|r| {
                let r = r.into_inner();
                req.shaped_all(&r.items)
                    .map(|i| (i, r.resource_version, r.next_page_token))
            }),
        Kind::ClusterOverridePolicy => api
            .list_cluster_override_policies(request(
                v1::ListClusterOverridePoliciesRequest {
                    label_selector,
                    page_size,
                    page_token,
                },
                h,
            ))
            .await
            .map(|r| {
                let r = r.into_inner();
                req.shaped_all(&r.items)
                    .map(|i| (i, r.resource_version, r.next_page_token))
            }),
        Kind::ClusterTaintPolicy => api
            .list_cluster_taint_policies(request(
                v1::ListClusterTaintPoliciesRequest {
                    label_selector,
                    page_size,
                    page_token,
                },
                h,
            ))
            .await
            .map(|r| {
                let r = r.into_inner();
                req.shaped_all(&r.items)
                    .map(|i| (i, r.resource_version, r.next_page_token))
            }),
        Kind::ResourceBinding | Kind::ClusterResourceBinding => api
            .list_resource_bindings(request(
                v1::ListResourceBindingsRequest {
                    namespace: ns,
                    cluster: String::new(),
                    label_selector,
                    page_size,
                    page_token,
                    cluster_scoped: req.kind == Kind::ClusterResourceBinding,
                },
                h,
            ))
            .await
            .map(|r| {
                let r = r.into_inner();
                // a namespaced list holds only the bindings of namespaced templates
                let items: Vec<&v1::ResourceBinding> = r
                    .items
                    .iter()
                    .filter(|b| {
                        req.kind == Kind::ClusterResourceBinding
                            || b.metadata.as_ref().is_some_and(|m| !m.namespace.is_empty())
                    })
                    .collect();
                items
                    .into_iter()
                    .map(|b| req.shaped(b))
                    .collect::<Result<Vec<_>, _>>()
                    .map(|i| (i, r.resource_version, r.next_page_token))
            }),
    };
    let (items, revision, next) = match page {
        Ok(Ok(page)) => page,
        Ok(Err(message)) => return Err(internal(&message)),
        Err(status) => return Err(from_status(&status)),
    };
    let items: Vec<Value> = items.into_iter().filter(|o| fields.matches(o)).collect();
    Ok((items, revision, next))
}

/// One event of a gRPC watch: its type, the object in Kubernetes form (none for a bookmark)
/// and the revision.
type Event = Result<(i32, Option<Value>, i64), tonic::Status>;
type Events = Pin<Box<dyn Stream<Item = Event> + Send>>;

/// The watch of `req`'s kind over gRPC, from `revision`, as [`Event`]s.
async fn open_watch(
    mut api: ApiClient<Channel>,
    req: &Req,
    label_selector: String,
    revision: i64,
) -> Result<Events, tonic::Status> {
    let (ns, h, full_name) = (req.namespace.clone(), &req.headers, req.info.message);
    Ok(match req.kind {
        Kind::Template => api
            .watch_workloads(request(
                v1::WatchWorkloadsRequest {
                    namespace: ns,
                    kind: req.template_kind(),
                    label_selector,
                    resource_version: revision,
                    allow_bookmarks: true,
                },
                h,
            ))
            .await?
            .into_inner()
            .events(full_name),
        Kind::Cluster => api
            .watch_clusters(request(
                v1::WatchClustersRequest {
                    label_selector,
                    resource_version: revision,
                    allow_bookmarks: true,
                },
                h,
            ))
            .await?
            .into_inner()
            .events(full_name),
        Kind::PropagationPolicy => api
            .watch_propagation_policies(request(
                v1::WatchPropagationPoliciesRequest {
                    namespace: ns,
                    label_selector,
                    resource_version: revision,
                    allow_bookmarks: true,
                },
                h,
            ))
            .await?
            .into_inner()
            .events(full_name),
        Kind::ClusterPropagationPolicy => api
            .watch_cluster_propagation_policies(request(
                v1::WatchClusterPropagationPoliciesRequest {
                    label_selector,
                    resource_version: revision,
                    allow_bookmarks: true,
                },
                h,
            ))
            .await?
            .into_inner()
            .events(full_name),
        Kind::OverridePolicy => api
            .watch_override_policies(request(
                v1::WatchOverridePoliciesRequest {
                    namespace: ns,
                    label_selector,
                    resource_version: revision,
                    allow_bookmarks: true,
                },
                h,
            ))
            .await?
            .into_inner()
            .events(full_name),
        Kind::ClusterOverridePolicy => api
            .watch_cluster_override_policies(request(
                v1::WatchClusterOverridePoliciesRequest {
                    label_selector,
                    resource_version: revision,
                    allow_bookmarks: true,
                },
                h,
            ))
            .await?
            .into_inner()
            .events(full_name),
        Kind::ClusterTaintPolicy => api
            .watch_cluster_taint_policies(request(
                v1::WatchClusterTaintPoliciesRequest {
                    label_selector,
                    resource_version: revision,
                    allow_bookmarks: true,
                },
                h,
            ))
            .await?
            .into_inner()
            .events(full_name),
        Kind::ResourceBinding | Kind::ClusterResourceBinding => {
            let cluster_scoped = req.kind == Kind::ClusterResourceBinding;
            api.watch_resource_bindings(request(
                v1::WatchResourceBindingsRequest {
                    namespace: ns,
                    cluster: String::new(),
                    label_selector,
                    resource_version: revision,
                    allow_bookmarks: true,
                    cluster_scoped,
                },
                h,
            ))
            .await?
            .into_inner()
            .filter(move |e| {
                // a namespaced watch follows only the bindings of namespaced templates
                let keep = cluster_scoped
                    || e.as_ref().map_or(true, |e| {
                        e.object.as_ref().is_none_or(|b| {
                            b.metadata.as_ref().is_some_and(|m| !m.namespace.is_empty())
                        })
                    });
                std::future::ready(keep)
            })
            .events(full_name)
        }
    })
}

/// A gRPC watch response of the api: its type, object and revision.
trait WatchResponse: Send + 'static {
    type Object: prost::Message;
    fn parts(self) -> (i32, Option<Self::Object>, i64);
}

/// A stream of a kind's watch responses, as [`Event`]s with the objects in Kubernetes form.
trait IntoEvents {
    fn events(self, full_name: &'static str) -> Events;
}

impl<S, R> IntoEvents for S
where
    S: Stream<Item = Result<R, tonic::Status>> + Send + 'static,
    R: WatchResponse,
{
    fn events(self, full_name: &'static str) -> Events {
        self.map(move |e| {
            e.map(|e| {
                let (type_, object, revision) = e.parts();
                (type_, shape(full_name, object.as_ref()), revision)
            })
        })
        .boxed()
    }
}

impl WatchResponse for v1::WatchClustersResponse {
    type Object = v1::Cluster;
    fn parts(self) -> (i32, Option<v1::Cluster>, i64) {
        (self.r#type, self.object, self.resource_version)
    }
}

impl WatchResponse for v1::WatchPropagationPoliciesResponse {
    type Object = v1::PropagationPolicy;
    fn parts(self) -> (i32, Option<v1::PropagationPolicy>, i64) {
        (self.r#type, self.object, self.resource_version)
    }
}

impl WatchResponse for v1::WatchClusterPropagationPoliciesResponse {
    type Object = v1::ClusterPropagationPolicy;
    fn parts(self) -> (i32, Option<v1::ClusterPropagationPolicy>, i64) {
        (self.r#type, self.object, self.resource_version)
    }
}

impl WatchResponse for v1::WatchOverridePoliciesResponse {
    type Object = v1::OverridePolicy;
    fn parts(self) -> (i32, Option<v1::OverridePolicy>, i64) {
        (self.r#type, self.object, self.resource_version)
    }
}

impl WatchResponse for v1::WatchClusterOverridePoliciesResponse {
    type Object = v1::ClusterOverridePolicy;
    fn parts(self) -> (i32, Option<v1::ClusterOverridePolicy>, i64) {
        (self.r#type, self.object, self.resource_version)
    }
}

impl WatchResponse for v1::WatchClusterTaintPoliciesResponse {
    type Object = v1::ClusterTaintPolicy;
    fn parts(self) -> (i32, Option<v1::ClusterTaintPolicy>, i64) {
        (self.r#type, self.object, self.resource_version)
    }
}

impl WatchResponse for v1::WatchWorkloadsResponse {
    type Object = v1::Workload;
    fn parts(self) -> (i32, Option<v1::Workload>, i64) {
        (self.r#type, self.object, self.resource_version)
    }
}

impl WatchResponse for v1::WatchResourceBindingsResponse {
    type Object = v1::ResourceBinding;
    fn parts(self) -> (i32, Option<v1::ResourceBinding>, i64) {
        (self.r#type, self.object, self.resource_version)
    }
}

/// A watch event's object in Kubernetes form (`None`: a bookmark, or an object that cannot
/// be written, which is logged and skipped).
fn shape<M: prost::Message>(full_name: &str, object: Option<&M>) -> Option<Value> {
    let object = object?;
    match crate::form::kubernetes(full_name, &object.encode_to_vec()) {
        Ok(value) => Some(value),
        Err(error) => {
            tracing::warn!(full_name, error = %format!("{error:#}"), "a watched object cannot be written in Kubernetes form; skipped");
            None
        }
    }
}

async fn watch(
    api: ApiClient<Channel>,
    req: Req,
    query: &[(String, String)],
    table: Option<Wanted>,
) -> Response {
    let fields = match field_selector(param(query, "fieldSelector")) {
        Ok(f) => f,
        Err(e) => return failure(StatusCode::BAD_REQUEST, "BadRequest", &e),
    };
    let revision = match param(query, "resourceVersion").filter(|rv| !rv.is_empty()) {
        None => 0,
        Some(rv) => match rv.parse::<i64>() {
            Ok(n) if n >= 0 => n,
            _ => {
                return failure(
                    StatusCode::BAD_REQUEST,
                    "BadRequest",
                    &format!("resourceVersion {rv:?} is not one this server gave out"),
                );
            }
        },
    };
    // 0 (or nothing) is the server's default, as on kube-apiserver; at most a day
    let timeout = param(query, "timeoutSeconds")
        .and_then(|t| t.parse::<u64>().ok())
        .filter(|t| *t > 0)
        .map_or(WATCH_DEFAULT_TIMEOUT, |t| {
            Duration::from_secs(t.min(WATCH_MAX_TIMEOUT_SECONDS))
        });
    let bookmarks = param(query, "allowWatchBookmarks").is_some_and(truthy);
    let label_selector = param(query, "labelSelector").unwrap_or_default().to_owned();
    let events = match open_watch(api, &req, label_selector, revision).await {
        Ok(events) => events,
        Err(status) => return from_status(&status),
    };
    let group_version = req.group_version();
    let kind = req.name();
    let deadline = tokio::time::Instant::now() + timeout;
    let lines = events
        .take_until(tokio::time::sleep_until(deadline))
        .scan(false, move |ended, event| {
            if *ended {
                return std::future::ready(None);
            }
            let line = match event {
                Ok((t, object, rv)) => match v1::WatchEventType::try_from(t) {
                    Ok(v1::WatchEventType::Bookmark) if bookmarks => Some(k::event_line(
                        "BOOKMARK",
                        &json!({"apiVersion": group_version, "kind": kind,
                                "metadata": {"resourceVersion": rv.to_string()}}),
                    )),
                    Ok(
                        t @ (v1::WatchEventType::Added
                        | v1::WatchEventType::Modified
                        | v1::WatchEventType::Deleted),
                    ) => object.filter(|o| fields.matches(o)).map(|o| {
                        let name = match t {
                            v1::WatchEventType::Added => "ADDED",
                            v1::WatchEventType::Modified => "MODIFIED",
                            _ => "DELETED",
                        };
                        match table {
                            // each event a Table of its one row, as kube-apiserver sends them
                            Some(wanted) => {
                                let meta = json!({"resourceVersion": rv.to_string()});
                                k::event_line(name, &as_table(&req, wanted, &[o], meta))
                            }
                            None => k::event_line(name, &o),
                        }
                    }),
                    _ => None,
                },
                Err(status) => {
                    *ended = true;
                    let code = if status.code() == tonic::Code::OutOfRange {
                        (410, "Expired")
                    } else {
                        (500, "InternalError")
                    };
                    Some(k::event_line(
                        "ERROR",
                        &k::status(code.0, code.1, status.message()),
                    ))
                }
            };
            std::future::ready(Some(line))
        })
        .filter_map(std::future::ready)
        .map(Ok::<_, std::convert::Infallible>);
    (
        StatusCode::OK,
        [(axum::http::header::CONTENT_TYPE, "application/json")],
        axum::body::Body::from_stream(lines),
    )
        .into_response()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn field_selectors_served_and_refused() {
        assert_eq!(field_selector(None), Ok(Fields::default()));
        assert_eq!(
            field_selector(Some("metadata.name=nginx,metadata.namespace==default")),
            Ok(Fields {
                name: Some("nginx".into()),
                namespace: Some("default".into())
            })
        );
        assert!(field_selector(Some("metadata.name!=nginx")).is_err());
        assert!(field_selector(Some("spec.x=1")).is_err());
        let f = field_selector(Some("metadata.name=a")).unwrap();
        assert!(f.matches(&json!({"metadata": {"name": "a"}})));
        assert!(!f.matches(&json!({"metadata": {"name": "b"}})));
    }

    #[test]
    fn discovery_lists_karmadas_groups_and_short_names() {
        let gvs = group_versions();
        assert_eq!(gvs[..3], [CLUSTER, POLICY, WORK]);
        assert!(gvs.contains(&"v1") && gvs.contains(&"apps/v1"), "{gvs:?}");
        let policy = served(POLICY);
        let pp = policy
            .iter()
            .find(|s| s.plural == "propagationpolicies")
            .unwrap();
        assert_eq!(
            (pp.kind.as_str(), pp.namespaced),
            ("PropagationPolicy", true)
        );
        assert_eq!(pp.short_names, ["pp"]);
        let rb = served(WORK);
        assert!(
            rb.iter()
                .any(|s| s.plural == "resourcebindings" && s.short_names == ["rb"])
        );
        // resource templates, with every verb; bindings are read-only
        let deploy = served("apps/v1");
        let deploy = deploy.iter().find(|s| s.plural == "deployments").unwrap();
        assert_eq!(deploy.short_names, ["deploy"]);
        assert!(
            deploy.verbs.iter().any(|v| v == "patch"),
            "{:?}",
            deploy.verbs
        );
        assert!(rb.iter().all(|s| !s.verbs.iter().any(|v| v == "patch")));
        let ns = served("v1");
        assert!(ns.iter().any(|s| s.plural == "namespaces" && !s.namespaced));
        assert!(served("storage.k8s.io/v1").is_empty());
    }

    #[test]
    fn the_openapi_index_names_each_group_versions_document() {
        let index = openapi::index();
        let core = index["paths"]["api/v1"]["serverRelativeURL"]
            .as_str()
            .unwrap();
        assert!(core.starts_with("/openapi/v3/api/v1?hash="), "{core}");
        let policy = openapi::document(POLICY);
        let patch = &policy["paths"]["/apis/policy.karmada.io/v1alpha1/namespaces/{namespace}/propagationpolicies/{name}"]
            ["patch"];
        assert_eq!(
            patch["x-kubernetes-group-version-kind"]["kind"],
            "PropagationPolicy"
        );
        assert!(
            patch["parameters"]
                .as_array()
                .unwrap()
                .iter()
                .any(|p| p["name"] == "fieldValidation" && p["in"] == "query"),
            "{patch}"
        );
        let work = openapi::document(WORK);
        assert!(
            work["paths"]["/apis/work.karmada.io/v1alpha2/namespaces/{namespace}/resourcebindings/{name}"]
                .get("patch")
                .is_none(),
            "bindings take no writes"
        );
    }
}
