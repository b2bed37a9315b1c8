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
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, Uri};
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
    /// Karmada's Work, read-only, in its cluster's execution namespace `karmada-es-<cluster>`.
    Work,
    /// A core/v1 Event of Flotilla's controllers, read-only.
    Event,
    /// `kubectl auth can-i` (create only).
    AccessReview,
    /// `kubectl auth can-i --list` (create only).
    RulesReview,
    /// `kubectl auth whoami` (create only).
    UserReview,
    /// A resource template (a Workload of the api) of the kind its [`KindInfo`] names.
    Template,
}

/// Karmada's group versions, as its apiserver serves them.
const CLUSTER: &str = "cluster.karmada.io/v1alpha1";
const POLICY: &str = "policy.karmada.io/v1alpha1";
const WORK: &str = "work.karmada.io/v1alpha2";
const WORK_V1ALPHA1: &str = "work.karmada.io/v1alpha1";
const AUTHORIZATION: &str = "authorization.k8s.io/v1";

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
    KindInfo {
        kind: Kind::Work,
        name: "Work",
        group_version: WORK_V1ALPHA1,
        plural: "works",
        namespaced: true,
        short_names: &[],
        message: "flotilla.v1.Work",
    },
    KindInfo {
        kind: Kind::Event,
        name: "Event",
        group_version: "v1",
        plural: "events",
        namespaced: true,
        short_names: &["ev"],
        message: "flotilla.v1.Event",
    },
    KindInfo {
        kind: Kind::AccessReview,
        name: "SelfSubjectAccessReview",
        group_version: AUTHORIZATION,
        plural: "selfsubjectaccessreviews",
        namespaced: false,
        short_names: &[],
        message: "",
    },
    KindInfo {
        kind: Kind::RulesReview,
        name: "SelfSubjectRulesReview",
        group_version: AUTHORIZATION,
        plural: "selfsubjectrulesreviews",
        namespaced: false,
        short_names: &[],
        message: "",
    },
    KindInfo {
        kind: Kind::UserReview,
        name: "SelfSubjectReview",
        group_version: "authentication.k8s.io/v1",
        plural: "selfsubjectreviews",
        namespaced: false,
        short_names: &[],
        message: "",
    },
    // Resource templates: the built-in kinds Flotilla propagates, each a Workload of the api
    // (a viewer reads a Secret's keys without their values: the api redacts them).
    KindInfo {
        kind: Kind::Template,
        name: "Secret",
        group_version: "v1",
        plural: "secrets",
        namespaced: true,
        short_names: &[],
        message: "flotilla.v1.Workload",
    },
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
    KindInfo {
        kind: Kind::Template,
        name: "Pod",
        group_version: "v1",
        plural: "pods",
        namespaced: true,
        short_names: &["po"],
        message: "flotilla.v1.Workload",
    },
    KindInfo {
        kind: Kind::Template,
        name: "LimitRange",
        group_version: "v1",
        plural: "limitranges",
        namespaced: true,
        short_names: &["limits"],
        message: "flotilla.v1.Workload",
    },
    KindInfo {
        kind: Kind::Template,
        name: "ResourceQuota",
        group_version: "v1",
        plural: "resourcequotas",
        namespaced: true,
        short_names: &["quota"],
        message: "flotilla.v1.Workload",
    },
    KindInfo {
        kind: Kind::Template,
        name: "HorizontalPodAutoscaler",
        group_version: "autoscaling/v2",
        plural: "horizontalpodautoscalers",
        namespaced: true,
        short_names: &["hpa"],
        message: "flotilla.v1.Workload",
    },
    KindInfo {
        kind: Kind::Template,
        name: "NetworkPolicy",
        group_version: "networking.k8s.io/v1",
        plural: "networkpolicies",
        namespaced: true,
        short_names: &["netpol"],
        message: "flotilla.v1.Workload",
    },
    KindInfo {
        kind: Kind::Template,
        name: "IngressClass",
        group_version: "networking.k8s.io/v1",
        plural: "ingressclasses",
        namespaced: false,
        short_names: &[],
        message: "flotilla.v1.Workload",
    },
    KindInfo {
        kind: Kind::Template,
        name: "StorageClass",
        group_version: "storage.k8s.io/v1",
        plural: "storageclasses",
        namespaced: false,
        short_names: &["sc"],
        message: "flotilla.v1.Workload",
    },
    KindInfo {
        kind: Kind::Template,
        name: "PriorityClass",
        group_version: "scheduling.k8s.io/v1",
        plural: "priorityclasses",
        namespaced: false,
        short_names: &["pc"],
        message: "flotilla.v1.Workload",
    },
    // a CRD is a template too (propagated to the members), and makes its kind servable here
    // ([`custom`])
    KindInfo {
        kind: Kind::Template,
        name: "CustomResourceDefinition",
        group_version: "apiextensions.k8s.io/v1",
        plural: "customresourcedefinitions",
        namespaced: false,
        short_names: &["crd", "crds"],
        message: "flotilla.v1.Workload",
    },
];

mod access;
mod custom;
mod openapi;
mod openapi_v2;
mod write;

/// The group versions of `kinds`, in their order.
fn group_versions(kinds: &[&'static KindInfo]) -> Vec<&'static str> {
    let mut gvs = Vec::new();
    for k in kinds {
        if !gvs.contains(&k.group_version) {
            gvs.push(k.group_version);
        }
    }
    gvs
}

/// Every kind served to this caller: the built-in ones, then those of the CRDs the caller
/// may read.
async fn all_kinds(api: ApiClient<Channel>, headers: &HeaderMap) -> Vec<&'static KindInfo> {
    let mut kinds: Vec<&'static KindInfo> = KINDS.iter().collect();
    kinds.extend(custom::kinds(api, headers).await);
    kinds
}

fn served(kinds: &[&'static KindInfo], group_version: &str) -> Vec<Served> {
    kinds
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

/// What discovery says may be done with `kind`: bindings, Works and Events are read-only to
/// users; a review is only created.
fn verbs(kind: Kind) -> Vec<String> {
    let read = ["get", "list", "watch"];
    let write = ["create", "update", "patch", "delete", "deletecollection"];
    let all: Vec<&str> = match kind {
        k if read_only(k) => read.to_vec(),
        k if review(k) => vec!["create"],
        _ => read.iter().chain(write.iter()).copied().collect(),
    };
    all.into_iter().map(str::to_owned).collect()
}

/// A kind users read and Flotilla's controllers write.
fn read_only(kind: Kind) -> bool {
    matches!(
        kind,
        Kind::ResourceBinding | Kind::ClusterResourceBinding | Kind::Work | Kind::Event
    )
}

/// A kind that is only created, and answered rather than stored.
fn review(kind: Kind) -> bool {
    matches!(
        kind,
        Kind::AccessReview | Kind::RulesReview | Kind::UserReview
    )
}

/// The Kubernetes routes of the gateway over `api`.
pub fn router(api: ApiClient<Channel>) -> axum::Router {
    axum::Router::new()
        .route("/version", axum::routing::get(version))
        .route(
            "/openapi/v3",
            axum::routing::get(
                |State(api): State<ApiClient<Channel>>, headers: HeaderMap| async move {
                    reply(
                        StatusCode::OK,
                        &openapi::index(&all_kinds(api, &headers).await),
                    )
                },
            ),
        )
        .route("/openapi/v3/{*rest}", axum::routing::get(openapi_document))
        .route("/openapi/v2", axum::routing::get(openapi_v2_document))
        .route("/api", axum::routing::any(dispatch))
        .route("/api/{*rest}", axum::routing::any(dispatch))
        .route("/apis", axum::routing::any(dispatch))
        .route("/apis/{*rest}", axum::routing::any(dispatch))
        .fallback(|uri: Uri| async move { not_found(&format!("the path {}", uri.path())) })
        .with_state(api)
}

/// The header in which the connection tells the handlers the CN of the client certificate
/// the TLS handshake verified; [`request`] passes it on to the api as the gRPC metadata of
/// the same name, which the api honours from the gateway's own certificate only. A copy a
/// client sends is always dropped first ([`verified_cn`]), on plain HTTP too.
const CLIENT_CN: &str = flotilla_runtime::authz::CLIENT_CN_METADATA;

/// `req` with the client's own [`CLIENT_CN`] headers removed, and `cn` (what the handshake
/// verified) in their place.
fn verified_cn<B>(mut req: http::Request<B>, cn: Option<&HeaderValue>) -> http::Request<B> {
    req.headers_mut().remove(CLIENT_CN);
    if let Some(cn) = cn {
        req.headers_mut().insert(CLIENT_CN, cn.clone());
    }
    req
}

/// Serves the gateway on `listener` until `shutdown` completes.
pub async fn serve(
    listener: tokio::net::TcpListener,
    api: ApiClient<Channel>,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let router = router(api).layer(axum::middleware::map_request(
        |req: axum::extract::Request| async move { verified_cn(req, None) },
    ));
    axum::serve(listener, router)
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
        // verified by the handshake against the client CA (only when one is configured)
        let cn = flotilla_runtime::tls::peer_cn(&stream).and_then(|cn| {
            HeaderValue::from_str(&cn)
                .inspect_err(|_| tracing::info!("a client certificate's CN is no header value"))
                .ok()
        });
        let service = tower::ServiceBuilder::new()
            .map_request(move |req| verified_cn(req, cn.as_ref()))
            .service(router.clone());
        let service = hyper_util::service::TowerToHyperService::new(service);
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

async fn openapi_document(
    State(api): State<ApiClient<Channel>>,
    headers: HeaderMap,
    uri: Uri,
) -> Response {
    let path = uri.path();
    let gv = match path.strip_prefix("/openapi/v3/apis/") {
        Some(gv) => gv,
        None if path == "/openapi/v3/api/v1" => "v1",
        None => "",
    };
    let kinds = if KINDS.iter().any(|k| k.group_version == gv) {
        KINDS.iter().collect()
    } else {
        all_kinds(api, &headers).await
    };
    if group_versions(&kinds).contains(&gv) {
        reply(StatusCode::OK, &openapi::document(gv, &kinds))
    } else {
        not_found(&format!("the OpenAPI document {}", uri.path()))
    }
}

/// `/openapi/v2`: protobuf when the client asks for it (client-go asks for nothing else),
/// JSON otherwise.
async fn openapi_v2_document(
    State(api): State<ApiClient<Channel>>,
    headers: HeaderMap,
) -> Response {
    let document = openapi_v2::document(&all_kinds(api, &headers).await);
    let accept = headers
        .get(axum::http::header::ACCEPT)
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default();
    if accept.contains("protobuf") {
        (
            StatusCode::OK,
            [(axum::http::header::CONTENT_TYPE, openapi_v2::PROTOBUF)],
            openapi_v2::protobuf(&document),
        )
            .into_response()
    } else {
        reply(StatusCode::OK, &document)
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
/// for `get NAME -w`), and for Events the fields kube-apiserver selects them by (what
/// `kubectl describe` sends); anything else is refused, not ignored.
#[derive(Debug, Default, PartialEq, Eq)]
struct Fields {
    name: Option<String>,
    namespace: Option<String>,
    /// Other selected fields: (JSON pointer, value).
    others: Vec<(String, String)>,
    /// The namespace of the URL when the api's list cannot narrow to it (Works, whose
    /// Kubernetes namespace is their cluster's).
    url_namespace: Option<String>,
}

/// An Event's selectable fields besides metadata's, with their JSON pointers.
const EVENT_FIELDS: &[(&str, &str)] = &[
    ("involvedObject.kind", "/involvedObject/kind"),
    ("involvedObject.namespace", "/involvedObject/namespace"),
    ("involvedObject.name", "/involvedObject/name"),
    ("involvedObject.uid", "/involvedObject/uid"),
    ("involvedObject.apiVersion", "/involvedObject/apiVersion"),
    (
        "involvedObject.resourceVersion",
        "/involvedObject/resourceVersion",
    ),
    ("involvedObject.fieldPath", "/involvedObject/fieldPath"),
    ("reason", "/reason"),
    ("source", "/source/component"),
    ("type", "/type"),
];

fn field_selector(text: Option<&str>, req: &Req) -> Result<Fields, String> {
    let mut fields = Fields::default();
    if req.kind == Kind::Work && !req.namespace.is_empty() {
        fields.url_namespace = Some(req.namespace.clone());
    }
    let served = if req.kind == Kind::Event {
        "metadata.name, metadata.namespace, involvedObject.*, reason, source and type"
    } else {
        "metadata.name and metadata.namespace"
    };
    for term in text.unwrap_or_default().split(',').map(str::trim) {
        if term.is_empty() {
            continue;
        }
        let (key, value) = term
            .split_once("==")
            .or_else(|| term.split_once('='))
            .filter(|(k, _)| !k.ends_with('!'))
            .ok_or_else(|| {
                format!("field selector {term:?}: only equality on {served} is served")
            })?;
        let value = value.trim().to_owned();
        match key.trim() {
            "metadata.name" => fields.name = Some(value),
            "metadata.namespace" => fields.namespace = Some(value),
            other => match EVENT_FIELDS.iter().find(|(k, _)| *k == other) {
                Some((_, pointer)) if req.kind == Kind::Event => {
                    fields.others.push(((*pointer).to_owned(), value));
                }
                _ => {
                    return Err(format!(
                        "field selector {other:?} is not served for {} (only {served})",
                        req.info.plural
                    ));
                }
            },
        }
    }
    Ok(fields)
}

impl Fields {
    fn matches(&self, object: &Value) -> bool {
        let at = |p: &str| {
            object
                .pointer(p)
                .and_then(Value::as_str)
                .unwrap_or_default()
        };
        self.name
            .as_deref()
            .is_none_or(|n| at("/metadata/name") == n)
            && self
                .namespace
                .as_deref()
                .is_none_or(|n| at("/metadata/namespace") == n)
            && self
                .url_namespace
                .as_deref()
                .is_none_or(|n| at("/metadata/namespace") == n)
            && self.others.iter().all(|(p, v)| at(p) == v)
    }

    /// An Event's selected `involvedObject` field (`kind`, `name`), "" when not selected:
    /// the api narrows its list by them.
    fn involved(&self, field: &str) -> String {
        let pointer = format!("/involvedObject/{field}");
        self.others
            .iter()
            .find(|(p, _)| *p == pointer)
            .map(|(_, v)| v.clone())
            .unwrap_or_default()
    }
}

/// A boolean query parameter as kube-apiserver reads one (Go's `strconv.ParseBool`: the
/// Python client sends `True`).
fn truthy(value: &str) -> bool {
    matches!(value, "1" | "t" | "T" | "true" | "TRUE" | "True")
}

/// A gRPC request naming the caller as it authenticated here: the caller's `Authorization`
/// header as it came, else the CN of the client certificate [`serve_tls`] verified. A token
/// wins over a certificate, as it does at the api over gRPC (docs/design.md §9); this is the
/// other way round from kube-apiserver, whose x509 authenticator runs before its token
/// authenticators, and keeps one rule for every Flotilla client.
fn request<T>(message: T, headers: &HeaderMap) -> tonic::Request<T> {
    let mut request = tonic::Request::new(message);
    let header = |name| {
        headers
            .get(name)
            .and_then(|v: &HeaderValue| v.to_str().ok())
            .and_then(|v| v.parse().ok())
    };
    if let Some(value) = header(axum::http::header::AUTHORIZATION.as_str()) {
        request.metadata_mut().insert("authorization", value);
    } else if let Some(cn) = header(CLIENT_CN) {
        request.metadata_mut().insert(CLIENT_CN, cn);
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
    let path = k::parse_path(uri.path());
    let discovery = match path {
        Path::ApiVersions | Path::ApiGroups => aggregated(&headers),
        _ => None,
    };
    let (group_version, namespace, resource, name, subresource) = match path {
        // the core group: its template kinds (ConfigMaps, Services…) under /api/v1
        Path::ApiVersions | Path::ApiGroups if discovery.is_some() => {
            let version = discovery.unwrap_or("v2");
            let core = matches!(path, Path::ApiVersions);
            let kinds = if core {
                KINDS.iter().collect()
            } else {
                all_kinds(api, &headers).await
            };
            let groups: Vec<(String, Vec<Served>)> = group_versions(&kinds)
                .into_iter()
                .filter(|gv| gv.contains('/') != core)
                .map(|gv| (gv.to_owned(), served(&kinds, gv)))
                .collect();
            return (
                StatusCode::OK,
                [(
                    axum::http::header::CONTENT_TYPE,
                    k::aggregated_discovery_type(version),
                )],
                k::aggregated_discovery(version, &groups).to_string(),
            )
                .into_response();
        }
        Path::ApiVersions => {
            return reply(
                StatusCode::OK,
                &json!({"kind": "APIVersions", "versions": ["v1"], "serverAddressByClientCIDRs": []}),
            );
        }
        Path::ApiGroups => {
            let kinds = all_kinds(api, &headers).await;
            let named: Vec<&str> = group_versions(&kinds)
                .into_iter()
                .filter(|gv| gv.contains('/'))
                .collect();
            return reply(StatusCode::OK, &k::api_groups(&named));
        }
        Path::Resources(gv) => {
            let mut list = served(&KINDS.iter().collect::<Vec<_>>(), &gv);
            if list.is_empty() {
                list = served(&all_kinds(api, &headers).await, &gv);
            }
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
    let wanted = |k: &&'static KindInfo| k.group_version == group_version && k.plural == resource;
    // the built-in kinds first, from the static table; the stored CRDs only when none is it
    let info = match KINDS.iter().find(wanted) {
        Some(info) => Some(info),
        None => all_kinds(api.clone(), &headers)
            .await
            .into_iter()
            .find(wanted),
    };
    let Some(info) = info else {
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
    match subresource {
        None => {}
        // `/status`: the object, as kube-apiserver reads it there; its status is the
        // controllers' to write (cluster-health, the work executor)
        Some("status") if name.is_some() && !review(kind) && method == Method::GET => {}
        Some("status") if name.is_some() && !review(kind) => {
            return failure(
                StatusCode::METHOD_NOT_ALLOWED,
                "MethodNotAllowed",
                &format!(
                    "{method} of the status of a {} is not served: Flotilla's controllers \
                     write it (read it with GET)",
                    info.name
                ),
            );
        }
        Some(other) => return not_found(&format!("the subresource {other}")),
    }
    let query = query(&uri);
    let namespace = namespace.unwrap_or_default().to_owned();
    let request = Req {
        kind,
        info,
        namespace,
        headers,
    };
    if review(kind) {
        if method != Method::POST || name.is_some() {
            return failure(
                StatusCode::METHOD_NOT_ALLOWED,
                "MethodNotAllowed",
                &format!("{} is only created (POST {})", info.name, uri.path()),
            );
        }
        let body = match read_body(body).await {
            Ok(b) => b,
            Err(failed) => return failed,
        };
        return match write::parse_body(&request.headers, &body) {
            Ok(body) => access::review(api, &request, &body).await,
            Err(failed) => failed,
        };
    }
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
    let body = match read_body(body).await {
        Ok(b) => b,
        Err(failed) => return failed,
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

/// The aggregated discovery version the request's `Accept` asks for (kubectl's first ask of
/// `/api` and `/apis`), `None` for the legacy documents.
fn aggregated(headers: &HeaderMap) -> Option<&'static str> {
    headers
        .get(axum::http::header::ACCEPT)
        .and_then(|v| v.to_str().ok())
        .and_then(k::aggregated_discovery_wanted)
}

/// A request's body, at most [`write::MAX_BODY_BYTES`].
async fn read_body(body: axum::body::Body) -> Result<axum::body::Bytes, Response> {
    axum::body::to_bytes(body, write::MAX_BODY_BYTES)
        .await
        .map_err(|_| {
            failure(
                StatusCode::PAYLOAD_TOO_LARGE,
                "RequestEntityTooLarge",
                &format!(
                    "the request body is larger than {} MiB, or was cut off",
                    write::MAX_BODY_BYTES >> 20
                ),
            )
        })
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
    if let Some(columns) = custom::columns(req.info) {
        return crate::table::custom_table(wanted, &columns, items, metadata, now);
    }
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
    if req.kind == Kind::Work {
        return fetch_work(api, req, name).await;
    }
    let (ns, name) = (req.namespace.clone(), name.to_owned());
    let h = &req.headers;
    let shaped = match req.kind {
        Kind::Work | Kind::AccessReview | Kind::RulesReview | Kind::UserReview => {
            return Err(internal("this kind is not read by name here"));
        }
        Kind::Event => api
            .get_event(request(
                v1::GetEventRequest {
                    namespace: ns,
                    name,
                },
                h,
            ))
            .await
            .map(|r| req.shaped(r.get_ref())),
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

/// A Work by its Kubernetes name in `karmada-es-<cluster>`: the api keys Works by the
/// binding's namespace, which that name does not say, so the cluster's Works are read
/// page by page until it is found (a Work's name hashes its template's namespace, kind and
/// name, so it is unique within its cluster).
async fn fetch_work(mut api: ApiClient<Channel>, req: &Req, name: &str) -> Result<Value, Response> {
    let cluster = access::work_cluster(&req.namespace).to_owned();
    let missing = || {
        not_found(&format!(
            "works.work.karmada.io {name:?} in the namespace {:?} (a Work is in its \
             cluster's namespace karmada-es-<cluster>)",
            req.namespace
        ))
    };
    if cluster.is_empty() {
        return Err(missing());
    }
    let mut page_token = String::new();
    loop {
        let page = api
            .list_works(request(
                v1::ListWorksRequest {
                    namespace: String::new(),
                    cluster: cluster.clone(),
                    label_selector: String::new(),
                    page_size: 500,
                    page_token,
                },
                &req.headers,
            ))
            .await
            .map_err(|s| from_status(&s))?
            .into_inner();
        if let Some(work) = page
            .items
            .iter()
            .find(|w| w.metadata.as_ref().is_some_and(|m| m.name == name))
        {
            return req.shaped(work).map_err(|m| internal(&m));
        }
        if page.next_page_token.is_empty() {
            return Err(missing());
        }
        page_token = page.next_page_token;
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
    let fields = match field_selector(param(query, "fieldSelector"), req) {
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
        Kind::AccessReview | Kind::RulesReview | Kind::UserReview => {
            return Err(internal("a review is not listed"));
        }
        Kind::Work => api
            .list_works(request(
                v1::ListWorksRequest {
                    namespace: String::new(),
                    cluster: access::work_cluster(&ns).to_owned(),
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
        Kind::Event => api
            .list_events(request(
                v1::ListEventsRequest {
                    namespace: ns,
                    involved_object_kind: fields.involved("kind"),
                    involved_object_name: fields.involved("name"),
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
        Kind::AccessReview | Kind::RulesReview | Kind::UserReview => {
            return Err(tonic::Status::unimplemented("a review is not watched"));
        }
        Kind::Work => api
            .watch_works(request(
                v1::WatchWorksRequest {
                    namespace: String::new(),
                    cluster: access::work_cluster(&ns).to_owned(),
                    label_selector,
                    resource_version: revision,
                    allow_bookmarks: true,
                },
                h,
            ))
            .await?
            .into_inner()
            .events(full_name),
        Kind::Event => api
            .watch_events(request(
                v1::WatchEventsRequest {
                    namespace: ns,
                    involved_object_kind: String::new(),
                    involved_object_name: String::new(),
                    label_selector,
                    resource_version: revision,
                    allow_bookmarks: true,
                },
                h,
            ))
            .await?
            .into_inner()
            .events(full_name),
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

impl WatchResponse for v1::WatchWorksResponse {
    type Object = v1::Work;
    fn parts(self) -> (i32, Option<v1::Work>, i64) {
        (self.r#type, self.object, self.resource_version)
    }
}

impl WatchResponse for v1::WatchEventsResponse {
    type Object = v1::Event;
    fn parts(self) -> (i32, Option<v1::Event>, i64) {
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
    let fields = match field_selector(param(query, "fieldSelector"), &req) {
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
    /// The built-in kinds, as a request without CRDs sees them.
    fn builtin() -> Vec<&'static KindInfo> {
        KINDS.iter().collect()
    }

    use super::*;

    #[test]
    fn field_selectors_served_and_refused() {
        let of = |plural: &str, namespace: &str| Req {
            kind: KINDS.iter().find(|k| k.plural == plural).unwrap().kind,
            info: KINDS.iter().find(|k| k.plural == plural).unwrap(),
            namespace: namespace.into(),
            headers: HeaderMap::new(),
        };
        let pp = of("propagationpolicies", "default");
        assert_eq!(field_selector(None, &pp), Ok(Fields::default()));
        assert_eq!(
            field_selector(Some("metadata.name=nginx,metadata.namespace==default"), &pp),
            Ok(Fields {
                name: Some("nginx".into()),
                namespace: Some("default".into()),
                ..Fields::default()
            })
        );
        assert!(field_selector(Some("metadata.name!=nginx"), &pp).is_err());
        assert!(field_selector(Some("spec.x=1"), &pp).is_err());
        let f = field_selector(Some("metadata.name=a"), &pp).unwrap();
        assert!(f.matches(&json!({"metadata": {"name": "a"}})));
        assert!(!f.matches(&json!({"metadata": {"name": "b"}})));
        // an Event's own fields, as kubectl describe selects them; not another kind's
        let events = of("events", "default");
        let f = field_selector(
            Some("involvedObject.kind=Cluster,involvedObject.name=member1,type=Warning"),
            &events,
        )
        .unwrap();
        assert_eq!(
            (f.involved("kind"), f.involved("name")),
            ("Cluster".into(), "member1".into())
        );
        let event =
            json!({"involvedObject": {"kind": "Cluster", "name": "member1"}, "type": "Warning"});
        assert!(f.matches(&event));
        assert!(!f.matches(
            &json!({"involvedObject": {"kind": "Cluster", "name": "member2"}, "type": "Warning"})
        ));
        let refused = field_selector(Some("involvedObject.name=x"), &pp).unwrap_err();
        assert!(
            refused.contains("not served for propagationpolicies"),
            "{refused}"
        );
        // a Work's namespace is its cluster's: the list of every Work is narrowed to it
        let works = of("works", "karmada-es-member1");
        let f = field_selector(None, &works).unwrap();
        assert!(f.matches(&json!({"metadata": {"namespace": "karmada-es-member1"}})));
        assert!(!f.matches(&json!({"metadata": {"namespace": "karmada-es-member2"}})));
    }

    #[test]
    fn discovery_lists_karmadas_groups_and_short_names() {
        let gvs = group_versions(&builtin());
        assert_eq!(gvs[..3], [CLUSTER, POLICY, WORK]);
        assert!(gvs.contains(&"v1") && gvs.contains(&"apps/v1"), "{gvs:?}");
        let policy = served(&builtin(), POLICY);
        let pp = policy
            .iter()
            .find(|s| s.plural == "propagationpolicies")
            .unwrap();
        assert_eq!(
            (pp.kind.as_str(), pp.namespaced),
            ("PropagationPolicy", true)
        );
        assert_eq!(pp.short_names, ["pp"]);
        let rb = served(&builtin(), WORK);
        assert!(
            rb.iter()
                .any(|s| s.plural == "resourcebindings" && s.short_names == ["rb"])
        );
        // resource templates, with every verb; bindings are read-only
        let deploy = served(&builtin(), "apps/v1");
        let deploy = deploy.iter().find(|s| s.plural == "deployments").unwrap();
        assert_eq!(deploy.short_names, ["deploy"]);
        assert!(
            deploy.verbs.iter().any(|v| v == "patch"),
            "{:?}",
            deploy.verbs
        );
        assert!(rb.iter().all(|s| !s.verbs.iter().any(|v| v == "patch")));
        let ns = served(&builtin(), "v1");
        assert!(ns.iter().any(|s| s.plural == "namespaces" && !s.namespaced));
        assert!(served(&builtin(), "node.k8s.io/v1").is_empty());
    }

    #[test]
    fn the_openapi_index_names_each_group_versions_document() {
        let index = openapi::index(&builtin());
        let core = index["paths"]["api/v1"]["serverRelativeURL"]
            .as_str()
            .unwrap();
        assert!(core.starts_with("/openapi/v3/api/v1?hash="), "{core}");
        let policy = openapi::document(POLICY, &builtin());
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
        let work = openapi::document(WORK, &builtin());
        assert!(
            work["paths"]["/apis/work.karmada.io/v1alpha2/namespaces/{namespace}/resourcebindings/{name}"]
                .get("patch")
                .is_none(),
            "bindings take no writes"
        );
    }

    /// Every `$ref` of a document, for the check that each names a schema of it.
    fn references(v: &serde_json::Value, out: &mut Vec<String>) {
        match v {
            serde_json::Value::Object(map) => {
                if let Some(r) = map.get("$ref").and_then(|r| r.as_str()) {
                    out.push(r.to_owned());
                }
                assert!(
                    !map.contains_key("nullable"),
                    "Kubernetes writes no nullable: {v}"
                );
                map.values().for_each(|v| references(v, out));
            }
            serde_json::Value::Array(items) => items.iter().for_each(|v| references(v, out)),
            _ => {}
        }
    }

    #[test]
    fn the_openapi_schemas_are_the_readers_own_and_every_reference_resolves() {
        for gv in group_versions(&builtin()) {
            let doc = openapi::document(gv, &builtin());
            let mut refs = Vec::new();
            references(&doc, &mut refs);
            for r in refs {
                let name = r.strip_prefix("#/components/schemas/").unwrap();
                assert!(
                    doc["components"]["schemas"].get(name).is_some(),
                    "{gv}: {r} names no schema of the document"
                );
            }
        }
        let policy = openapi::document(POLICY, &builtin());
        let schemas = &policy["components"]["schemas"];
        let pp = &schemas["io.karmada.policy.v1alpha1.PropagationPolicy"];
        assert_eq!(
            pp["x-kubernetes-group-version-kind"][0]["kind"],
            "PropagationPolicy"
        );
        let placement = &schemas["io.karmada.policy.v1alpha1.Placement"]["properties"];
        for field in [
            "clusterAffinity",
            "clusterAffinities",
            "clusterTolerations",
            "spreadConstraints",
            "replicaScheduling",
        ] {
            assert!(placement.get(field).is_some(), "{field} in {placement}");
        }
        // a field Karmada has and the reader refuses is not offered
        let spec = &schemas["io.karmada.policy.v1alpha1.PropagationSpec"]["properties"];
        assert!(spec.get("schedulePriority").is_none(), "{spec}");
        assert!(spec.get("resourceSelectors").is_some(), "{spec}");
        // an enum is inline, with its values and what each means
        let strategy = &schemas["io.karmada.policy.v1alpha1.ReplicaSchedulingStrategy"]["properties"]
            ["replicaSchedulingType"];
        assert_eq!(strategy["type"], "string", "{strategy}");
        assert_eq!(
            strategy["enum"],
            serde_json::json!(["Duplicated", "Divided"])
        );
        let said = strategy["description"].as_str().unwrap();
        assert!(
            said.contains("Possible enum values:\n - `\"Duplicated\"`"),
            "{said}"
        );
        assert!(
            schemas
                .get("io.karmada.policy.v1alpha1.ReplicaSchedulingType")
                .is_none(),
            "an inlined enum is not kept as a schema of its own"
        );
        // a Cluster's spec is the reader's too, in Karmada's spelling
        let cluster = openapi::document(CLUSTER, &builtin());
        let spec = &cluster["components"]["schemas"]["io.karmada.cluster.v1alpha1.ClusterSpec"]["properties"];
        assert!(spec.get("insecureSkipTLSVerification").is_some(), "{spec}");
        assert!(spec.get("apiEndpoint").is_some(), "{spec}");
        // a binding's fields are open (the controllers write them)
        let work = openapi::document(WORK, &builtin());
        let rb = &work["components"]["schemas"]["io.karmada.work.v1alpha2.ResourceBinding"];
        assert_eq!(rb["x-kubernetes-preserve-unknown-fields"], true, "{rb}");
    }
}
