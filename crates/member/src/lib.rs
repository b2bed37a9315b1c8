//! The Kubernetes side of a member cluster, through kube-rs: the one way Flotilla talks to a
//! member's API server, used by the work-executor (Push), `flotilla-agent` (Pull) and
//! cluster-health.
//!
//! ```text
//!   Members ── member(cluster, Target) ──► Member (one kube::Client, one discovery cache)
//!     apply(manifest)   discovery: apiVersion+kind → resource, scope (cached per
//!                       group version, refreshed when a kind is missing or the entry is old)
//!                       → PATCH …?fieldManager=flotilla&force=true  (server-side apply)
//!     delete(ref)       → DELETE … propagationPolicy=Background  (absent = already deleted)
//!     list_managed(kind)→ GET …?labelSelector=resourcebinding.karmada.io/permanent-id&limit=500
//!                       (clusterresourcebinding.… for cluster-scoped kinds)
//!     readyz / version / api_enablements / resource_summary   (cluster-health)
//! ```
//!
//! Every call has a deadline and goes through its member's own bound on the calls in flight;
//! applies carry no server-set metadata ([`apply_body`]); lists are paged; a member
//! that answers with a Kubernetes `Status` becomes [`MemberError::Api`] with its HTTP code and
//! reason. Credentials ([`Target`]) are never printed: its `Debug` shows the endpoint only.
//! See docs/design.md ("Members through the Kubernetes API").

use std::collections::HashMap;
use std::fmt;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use futures::Future;
use kube::api::{Api, DeleteParams, DynamicObject, ListParams, Patch, PatchParams};
use kube::core::discovery::{ApiCapabilities, Scope};
use kube::core::{ApiResource, GroupVersion};
use serde_json::Value;
use tokio::sync::Semaphore;
use tokio::time::Instant;

pub mod status;
pub mod watch;

pub use watch::ManagedWatch;

/// The field manager of every server-side apply Flotilla makes.
pub const FIELD_MANAGER: &str = "flotilla";
/// The label every namespaced object Flotilla applies carries (its binding's permanent id, as
/// Karmada labels it); status collection lists by it.
pub const MANAGED_LABEL: &str = "resourcebinding.karmada.io/permanent-id";
/// The same label on cluster-scoped objects.
pub const MANAGED_LABEL_CLUSTER: &str = "clusterresourcebinding.karmada.io/permanent-id";

/// The label that marks `kind`'s objects as Flotilla's, by the kind's scope.
pub fn managed_label(namespaced: bool) -> &'static str {
    if namespaced {
        MANAGED_LABEL
    } else {
        MANAGED_LABEL_CLUSTER
    }
}
/// How long a group version's resources are trusted before discovery asks again.
pub const DISCOVERY_TTL: Duration = Duration::from_secs(300);
/// A kind missing from a cached group version triggers a new discovery at most this often.
const DISCOVERY_RETRY: Duration = Duration::from_secs(5);

/// How to reach one member's API server. `Debug` prints the endpoint and which credentials
/// are present, never their values.
#[derive(Clone, Default, PartialEq, Eq, Hash)]
pub struct Target {
    /// `https://host:port` (or `http://` for a local member-sim).
    pub endpoint: String,
    /// PEM bundle trusted for the server's certificate; `None`: the system roots.
    pub ca_pem: Option<Vec<u8>>,
    /// A bearer token.
    pub token: Option<String>,
    /// A file holding the bearer token, read again every [`TOKEN_FILE_RELOAD`] (a projected
    /// ServiceAccount token is rotated in place), trimmed as client-go trims it. Takes the
    /// place of `token` when both are set. (kube-rs' own `token_file` keeps the file's
    /// trailing newline, which `kubectl create token > file` writes, and every request then
    /// fails on an invalid header.)
    pub token_file: Option<std::path::PathBuf>,
    /// A client certificate and key, PEM.
    pub client_cert_pem: Option<(Vec<u8>, Vec<u8>)>,
    /// Skip verifying the server's certificate (the Cluster's
    /// `insecureSkipTLSVerification`).
    pub insecure_skip_tls_verify: bool,
    /// An HTTP proxy to reach the member through (the Cluster's `proxyURL`).
    pub proxy_url: Option<String>,
}

impl fmt::Debug for Target {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Target")
            .field("endpoint", &self.endpoint)
            .field("ca", &self.ca_pem.is_some())
            .field("token", &self.token.as_ref().map(|_| "<redacted>"))
            .field("token_file", &self.token_file)
            .field("client_cert", &self.client_cert_pem.is_some())
            .field("insecure_skip_tls_verify", &self.insecure_skip_tls_verify)
            .field("proxy_url", &self.proxy_url)
            .finish()
    }
}

impl Target {
    /// A target without credentials (a member-sim on a private network, or a test).
    pub fn plain(endpoint: impl Into<String>) -> Self {
        Self {
            endpoint: endpoint.into(),
            ..Self::default()
        }
    }

    fn config(&self, timeout: Duration) -> Result<kube::Config, MemberError> {
        let bad = |message: String| MemberError::BadTarget {
            endpoint: self.endpoint.clone(),
            message,
        };
        if !self.endpoint.starts_with("http://") && !self.endpoint.starts_with("https://") {
            return Err(bad(
                "only http:// and https:// endpoints are supported".into()
            ));
        }
        let uri: http::Uri = self
            .endpoint
            .parse()
            .map_err(|e: http::uri::InvalidUri| bad(e.to_string()))?;
        let mut config = kube::Config::new(uri);
        config.connect_timeout = Some(timeout);
        config.read_timeout = Some(timeout);
        config.write_timeout = Some(timeout);
        config.accept_invalid_certs = self.insecure_skip_tls_verify;
        if let Some(pem) = &self.ca_pem {
            config.root_cert = Some(pem_certificates(pem).map_err(bad)?);
        }
        if let Some(token) = &self.token {
            config.auth_info.token = Some(token.clone().into());
        }
        if let Some((cert, key)) = &self.client_cert_pem {
            use base64::Engine as _;
            let encode = |b: &[u8]| base64::engine::general_purpose::STANDARD.encode(b);
            config.auth_info.client_certificate_data = Some(encode(cert));
            config.auth_info.client_key_data = Some(encode(key).into());
        }
        if let Some(proxy) = &self.proxy_url {
            config.proxy_url = Some(
                proxy
                    .parse()
                    .map_err(|e: http::uri::InvalidUri| bad(format!("proxyURL: {e}")))?,
            );
        }
        Ok(config)
    }
}

/// A plain kube-rs client of `target` (its token file read once), for programs that drive a
/// member's API server directly (member-sim's node agent).
pub fn kube_client(target: &Target, timeout: Duration) -> Result<kube::Client, MemberError> {
    build_client(&with_file_token(target)?, timeout)
}

/// `target` with the token of its token file, if it names one.
fn with_file_token(target: &Target) -> Result<Target, MemberError> {
    let mut target = target.clone();
    if let Some(path) = &target.token_file {
        target.token = Some(
            read_token_file(path).map_err(|message| MemberError::BadTarget {
                endpoint: target.endpoint.clone(),
                message,
            })?,
        );
    }
    Ok(target)
}

/// A kube-rs client of `target` as it is (its token file is not read here).
fn build_client(target: &Target, timeout: Duration) -> Result<kube::Client, MemberError> {
    let config = target.config(timeout)?;
    kube::Client::try_from(config).map_err(|e| MemberError::BadTarget {
        endpoint: target.endpoint.clone(),
        message: e.to_string(),
    })
}

/// How often a [`Target::token_file`] is read again.
pub const TOKEN_FILE_RELOAD: Duration = Duration::from_secs(10);

/// The token in `path`, trimmed; an error names the file, never its content.
pub fn read_token_file(path: &std::path::Path) -> Result<String, String> {
    match std::fs::read_to_string(path) {
        Ok(t) if !t.trim().is_empty() => Ok(t.trim().to_owned()),
        Ok(_) => Err(format!("{} is empty", path.display())),
        Err(e) => Err(format!("cannot read {}: {e}", path.display())),
    }
}

/// The keys of a member's credentials Secret, as Karmada names them (`token`, `caBundle`),
/// plus a client certificate in Kubernetes' TLS Secret keys.
pub const SECRET_TOKEN: &str = "token";
/// The CA bundle key.
pub const SECRET_CA_BUNDLE: &str = "caBundle";
/// A client certificate (PEM).
pub const SECRET_TLS_CERT: &str = "tls.crt";
/// Its key (PEM).
pub const SECRET_TLS_KEY: &str = "tls.key";

/// How to reach a Push `cluster`: its `spec.apiEndpoint`, `insecureSkipTLSVerification`, and
/// the credentials of the Secret its `secretRef` names (`secret`: that Secret as stored, or
/// `None` when it is missing). A `secretRef` whose Secret is missing, or that holds neither a
/// token nor a client certificate, is an error that names the Secret (never its values).
pub fn target_of(
    cluster: &flotilla_proto::v1::Cluster,
    secret: Option<&flotilla_proto::v1::Secret>,
) -> Result<Target, MemberError> {
    let spec = cluster.spec.clone().unwrap_or_default();
    let mut target = Target::plain(spec.api_endpoint.clone());
    target.insecure_skip_tls_verify = spec.insecure_skip_tls_verification;
    let Some(reference) = spec.secret_ref.as_ref() else {
        return Ok(target);
    };
    let bad = |message: String| MemberError::BadTarget {
        endpoint: spec.api_endpoint.clone(),
        message,
    };
    let name = format!("{}/{}", reference.namespace, reference.name);
    let secret = secret.ok_or_else(|| bad(format!("its secretRef {name} does not exist")))?;
    let value = |key: &str| secret.data.get(key).filter(|v| !v.is_empty()).cloned();
    if let Some(token) = value(SECRET_TOKEN) {
        let token = String::from_utf8(token)
            .map_err(|_| bad(format!("{SECRET_TOKEN} of Secret {name} is not UTF-8")))?;
        target.token = Some(token.trim().to_owned());
    }
    target.ca_pem = value(SECRET_CA_BUNDLE);
    target.client_cert_pem = match (value(SECRET_TLS_CERT), value(SECRET_TLS_KEY)) {
        (Some(cert), Some(key)) => Some((cert, key)),
        (None, None) => None,
        _ => {
            return Err(bad(format!(
                "Secret {name} must hold both {SECRET_TLS_CERT} and {SECRET_TLS_KEY}, or neither"
            )));
        }
    };
    if target.token.is_none() && target.client_cert_pem.is_none() {
        return Err(bad(format!(
            "Secret {name} holds neither {SECRET_TOKEN} nor {SECRET_TLS_CERT}/{SECRET_TLS_KEY}"
        )));
    }
    Ok(target)
}

/// The key of the Secret a Cluster's `secretRef` names, if any.
pub fn secret_key_of(cluster: &flotilla_proto::v1::Cluster) -> Option<String> {
    let r = cluster.spec.as_ref()?.secret_ref.as_ref()?;
    Some(format!("secrets/{}/{}", r.namespace, r.name))
}

/// The metadata fields a server sets and a server-side apply must not carry. A real
/// kube-apiserver refuses an apply body with `managedFields` ("metadata.managedFields must be
/// nil"), and takes `resourceVersion` and `uid` as preconditions, so a manifest exported from
/// another cluster (`kubectl get -o yaml`) would fail with 409 on every member. The rest are
/// ignored or overwritten by the server; they are dropped so that the body says only what
/// Flotilla means to own. Karmada strips the same fields from its Work manifests.
pub const SERVER_SET_METADATA: [&str; 8] = [
    "managedFields",
    "resourceVersion",
    "uid",
    "creationTimestamp",
    "deletionTimestamp",
    "deletionGracePeriodSeconds",
    "generation",
    "selfLink",
];

/// The body of a server-side apply of `manifest`: the manifest without
/// [`SERVER_SET_METADATA`] and without `status` (status belongs to the member's controllers;
/// an apply's `status` is ignored by kinds with a status subresource and would take ownership
/// of it on the others). Borrowed unchanged when there is nothing to drop.
pub fn apply_body(manifest: &Value) -> std::borrow::Cow<'_, Value> {
    let carries = |o: &serde_json::Map<String, Value>| {
        o.contains_key("status")
            || o.get("metadata")
                .and_then(Value::as_object)
                .is_some_and(|m| SERVER_SET_METADATA.iter().any(|k| m.contains_key(*k)))
    };
    match manifest {
        Value::Object(o) if carries(o) => {
            let mut body = o.clone();
            body.remove("status");
            if let Some(Value::Object(meta)) = body.get_mut("metadata") {
                for key in SERVER_SET_METADATA {
                    meta.remove(key);
                }
            }
            std::borrow::Cow::Owned(Value::Object(body))
        }
        _ => std::borrow::Cow::Borrowed(manifest),
    }
}

/// The DER certificates of a PEM bundle.
fn pem_certificates(pem: &[u8]) -> Result<Vec<Vec<u8>>, String> {
    let certs: Vec<Vec<u8>> = pem::parse_many(pem)
        .map_err(|e| format!("the CA bundle is not PEM: {e}"))?
        .into_iter()
        .filter(|p| p.tag() == "CERTIFICATE")
        .map(|p| p.into_contents())
        .collect();
    if certs.is_empty() {
        return Err("the CA bundle holds no certificate".into());
    }
    Ok(certs)
}

/// Why a member call failed.
#[derive(Debug, thiserror::Error)]
pub enum MemberError {
    /// The Cluster's endpoint or credentials cannot be used.
    #[error("cannot reach member {endpoint}: {message}")]
    BadTarget {
        /// The endpoint.
        endpoint: String,
        /// What is wrong.
        message: String,
    },
    /// The member did not answer in time.
    #[error("member {endpoint} did not answer {verb} within {timeout:?}")]
    Timeout {
        /// The endpoint.
        endpoint: String,
        /// What was asked.
        verb: &'static str,
        /// The deadline.
        timeout: Duration,
    },
    /// The member answered with a Kubernetes error (`Status`).
    #[error("member {endpoint} answered {verb} with {code} {reason}: {message}")]
    Api {
        /// The endpoint.
        endpoint: String,
        /// What was asked.
        verb: &'static str,
        /// The HTTP status code.
        code: u16,
        /// The Status reason (`Conflict`, `NotFound`, `InternalError`, ...).
        reason: String,
        /// The Status message.
        message: String,
    },
    /// PL-7: `conflictResolution: Abort` and the member already has the object, not made by
    /// Flotilla for this binding (it lacks the manifest's permanent-id label).
    #[error(
        "{kind} {name} already exists on member {endpoint} and Flotilla did not create it; \
         it is left alone (conflictResolution: Abort; Overwrite takes it over)"
    )]
    NotOurs {
        /// The endpoint.
        endpoint: String,
        /// The object's kind.
        kind: String,
        /// The object's namespace/name.
        name: String,
    },
    /// The member does not serve the object's kind (discovery found no resource for it).
    #[error("member {endpoint} serves no resource for {api_version} {kind}")]
    UnknownKind {
        /// The endpoint.
        endpoint: String,
        /// The object's apiVersion.
        api_version: String,
        /// The object's kind.
        kind: String,
    },
    /// The object to apply is not a Kubernetes object.
    #[error("not a Kubernetes object: {0}")]
    BadObject(String),
    /// The connection failed (refused, reset, TLS).
    #[error("member {endpoint}: {verb} failed: {message}")]
    Transport {
        /// The endpoint.
        endpoint: String,
        /// What was asked.
        verb: &'static str,
        /// The transport error.
        message: String,
    },
}

impl MemberError {
    /// The HTTP code of an API answer (409 for a field-manager conflict, ...).
    pub fn code(&self) -> Option<u16> {
        match self {
            Self::Api { code, .. } => Some(*code),
            _ => None,
        }
    }

    /// A short label for metrics.
    fn label(&self) -> &'static str {
        match self {
            Self::Timeout { .. } => "timeout",
            Self::Api { code: 404, .. } => "not_found",
            Self::Api { code: 409, .. } => "conflict",
            _ => "error",
        }
    }
}

/// The resources of one group version, as discovery found them.
type Resources = Arc<Vec<(ApiResource, ApiCapabilities)>>;

/// One member's API server: a kube client and its discovery cache.
pub struct Member {
    client: Mutex<kube::Client>,
    /// The target with the token last read from its token file (to rebuild the client).
    target: Mutex<(Instant, Target)>,
    /// How often the token file is read again ([`TOKEN_FILE_RELOAD`]).
    token_reload: Duration,
    /// Whether the target names a token file (otherwise the client never changes).
    reloads: bool,
    endpoint: String,
    timeout: Duration,
    in_flight: Arc<Semaphore>,
    /// apiVersion → (when asked, its resources).
    discovery: Mutex<HashMap<String, (Instant, Resources)>>,
}

impl fmt::Debug for Member {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Member")
            .field("endpoint", &self.endpoint)
            .finish_non_exhaustive()
    }
}

/// An object's identity as the member knows it.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct ObjectRef {
    /// `apps/v1`, `v1`.
    pub api_version: String,
    /// `Deployment`.
    pub kind: String,
    /// Empty for cluster-scoped objects.
    pub namespace: String,
    /// The name.
    pub name: String,
}

impl ObjectRef {
    /// The identity of a manifest (`apiVersion`, `kind`, `metadata`).
    pub fn of(object: &Value) -> Result<Self, MemberError> {
        let s = |p: &str| {
            object
                .pointer(p)
                .and_then(Value::as_str)
                .unwrap_or_default()
        };
        let r = Self {
            api_version: s("/apiVersion").to_owned(),
            kind: s("/kind").to_owned(),
            namespace: s("/metadata/namespace").to_owned(),
            name: s("/metadata/name").to_owned(),
        };
        if r.api_version.is_empty() || r.kind.is_empty() || r.name.is_empty() {
            return Err(MemberError::BadObject(
                "apiVersion, kind and metadata.name must be set".into(),
            ));
        }
        Ok(r)
    }
}

impl Member {
    /// A client of `target` with a per-call `timeout` and `in_flight` bounding its calls.
    pub fn new(
        target: &Target,
        timeout: Duration,
        in_flight: Arc<Semaphore>,
    ) -> Result<Self, MemberError> {
        let target = with_file_token(target)?;
        let client = build_client(&target, timeout)?;
        Ok(Self {
            client: Mutex::new(client),
            target: Mutex::new((Instant::now(), target.clone())),
            token_reload: TOKEN_FILE_RELOAD,
            reloads: target.token_file.is_some(),
            endpoint: target.endpoint.clone(),
            timeout,
            in_flight,
            discovery: Mutex::new(HashMap::new()),
        })
    }

    /// The client, rebuilt first when the token file holds a new token. A file that cannot be
    /// read keeps the last token (a rotation writes a new file in place of the old one).
    fn client(&self) -> kube::Client {
        if self.reloads {
            self.reload_token();
        }
        self.client
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// Reads the token file again when [`Member::token_reload`] has passed, and rebuilds the
    /// client when it holds a new token.
    fn reload_token(&self) {
        let mut target = self.target.lock().unwrap_or_else(PoisonError::into_inner);
        if target.0.elapsed() >= self.token_reload
            && let Some(path) = target.1.token_file.clone()
        {
            target.0 = Instant::now();
            match read_token_file(&path) {
                Ok(token) if target.1.token.as_deref() != Some(token.as_str()) => {
                    target.1.token = Some(token);
                    match build_client(&target.1, self.timeout) {
                        Ok(client) => {
                            tracing::info!(endpoint = %self.endpoint, file = %path.display(), "the member token file changed; using the new token");
                            *self.client.lock().unwrap_or_else(PoisonError::into_inner) = client;
                        }
                        Err(error) => {
                            tracing::warn!(endpoint = %self.endpoint, %error, "cannot use the new member token");
                        }
                    }
                }
                Ok(_) => {}
                Err(error) => {
                    tracing::warn!(endpoint = %self.endpoint, %error, "cannot read the member token file again; keeping the last token");
                }
            }
        }
    }

    /// The member's endpoint.
    pub fn endpoint(&self) -> &str {
        &self.endpoint
    }

    async fn call<T, Fut>(&self, verb: &'static str, fut: Fut) -> Result<T, MemberError>
    where
        Fut: Future<Output = Result<T, kube::Error>>,
    {
        // The semaphore is never closed; a closed one would only lift the bound.
        let _permit = self.in_flight.acquire().await.ok();
        let result = match tokio::time::timeout(self.timeout, fut).await {
            Ok(Ok(v)) => Ok(v),
            Ok(Err(e)) => Err(self.error(verb, e)),
            Err(_) => Err(MemberError::Timeout {
                endpoint: self.endpoint.clone(),
                verb,
                timeout: self.timeout,
            }),
        };
        let label = result.as_ref().map_or_else(MemberError::label, |_| "ok");
        metrics::counter!("flotilla_member_calls_total", "verb" => verb, "result" => label)
            .increment(1);
        result
    }

    fn error(&self, verb: &'static str, e: kube::Error) -> MemberError {
        match e {
            kube::Error::Api(status) => MemberError::Api {
                endpoint: self.endpoint.clone(),
                verb,
                code: status.code,
                reason: status.reason.clone(),
                message: status.message.clone(),
            },
            other => {
                // the cause is deep in the chain (kube → hyper-util → hyper → io)
                let mut message = other.to_string();
                let mut timed_out = false;
                let mut source = std::error::Error::source(&other);
                while let Some(cause) = source {
                    let text = cause.to_string();
                    timed_out |= text.contains("timed out")
                        || cause
                            .downcast_ref::<std::io::Error>()
                            .is_some_and(|io| io.kind() == std::io::ErrorKind::TimedOut);
                    message.push_str(": ");
                    message.push_str(&text);
                    source = cause.source();
                }
                if timed_out {
                    MemberError::Timeout {
                        endpoint: self.endpoint.clone(),
                        verb,
                        timeout: self.timeout,
                    }
                } else {
                    MemberError::Transport {
                        endpoint: self.endpoint.clone(),
                        verb,
                        message,
                    }
                }
            }
        }
    }

    /// The resources of `api_version`, from the cache while it is fresh (and, when
    /// `missing` names a kind the cache lacks, once more from the member).
    async fn resources(
        &self,
        api_version: &str,
        missing: Option<&str>,
    ) -> Result<Resources, MemberError> {
        let cached = self
            .discovery
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get(api_version)
            .cloned();
        if let Some((at, resources)) = &cached {
            let fresh = at.elapsed() < DISCOVERY_TTL;
            let has = missing.is_none_or(|k| resources.iter().any(|(r, _)| r.kind == k));
            if fresh && (has || at.elapsed() < DISCOVERY_RETRY) {
                return Ok(resources.clone());
            }
        }
        let gv: GroupVersion = api_version
            .parse()
            .map_err(|e| MemberError::BadObject(format!("apiVersion {api_version:?}: {e}")))?;
        let version = gv.version.clone();
        let group = self
            .call(
                "discover",
                kube::discovery::pinned_group(&self.client(), &gv),
            )
            .await?;
        let resources = Arc::new(group.versioned_resources(&version));
        tracing::debug!(endpoint = %self.endpoint, api_version, resources = resources.len(), "discovered");
        self.discovery
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(api_version.to_owned(), (Instant::now(), resources.clone()));
        Ok(resources)
    }

    /// The resource serving `api_version` `kind`, and whether it is namespaced.
    pub async fn resource_for(
        &self,
        api_version: &str,
        kind: &str,
    ) -> Result<(ApiResource, bool), MemberError> {
        let unknown = || MemberError::UnknownKind {
            endpoint: self.endpoint.clone(),
            api_version: api_version.to_owned(),
            kind: kind.to_owned(),
        };
        let resources = match self.resources(api_version, Some(kind)).await {
            Ok(r) => r,
            Err(MemberError::Api { code: 404, .. }) => return Err(unknown()),
            Err(e) => return Err(e),
        };
        resources
            .iter()
            // subresources (deployments/status) share the kind
            .find(|(r, _)| r.kind == kind && !r.plural.contains('/'))
            .map(|(r, caps)| (r.clone(), caps.scope == Scope::Namespaced))
            .ok_or_else(unknown)
    }

    async fn api_for(&self, r: &ObjectRef) -> Result<Api<DynamicObject>, MemberError> {
        let (resource, namespaced) = self.resource_for(&r.api_version, &r.kind).await?;
        Ok(if namespaced {
            let ns = if r.namespace.is_empty() {
                "default"
            } else {
                r.namespace.as_str()
            };
            Api::namespaced_with(self.client(), ns, &resource)
        } else {
            Api::all_with(self.client(), &resource)
        })
    }

    /// PL-7: [`Member::apply`], unless the member already has the object and it is not
    /// Flotilla's for this binding: its permanent-id label (namespaced or cluster-scoped
    /// form) is not the manifest's. Then [`MemberError::NotOurs`], and nothing is written.
    /// One read more than `apply`: callers check only before a Work's first apply.
    pub async fn apply_if_ours(&self, manifest: &Value) -> Result<Value, MemberError> {
        let r = ObjectRef::of(manifest)?;
        let label = |o: &Value, key: &str| {
            o.pointer("/metadata/labels")
                .and_then(|l| l.get(key))
                .and_then(Value::as_str)
                .map(str::to_owned)
        };
        let key = [MANAGED_LABEL, MANAGED_LABEL_CLUSTER]
            .into_iter()
            .find(|k| label(manifest, k).is_some());
        let existing = match self.get(&r).await {
            Ok(existing) => existing,
            Err(MemberError::UnknownKind { .. }) => None,
            Err(e) => return Err(e),
        };
        if let Some(on_member) = existing
            && key.is_none_or(|k| label(&on_member, k) != label(manifest, k))
        {
            return Err(MemberError::NotOurs {
                endpoint: self.endpoint.clone(),
                kind: r.kind.clone(),
                name: if r.namespace.is_empty() {
                    r.name.clone()
                } else {
                    format!("{}/{}", r.namespace, r.name)
                },
            });
        }
        self.apply(manifest).await
    }

    /// Server-side apply of `manifest` as field manager `flotilla`, forcing conflicts (the
    /// control plane's intent wins, as Karmada's execution controller overwrites); returns
    /// the object as the member stored it, with its status.
    ///
    /// The body sent is [`apply_body`]: the manifest without the metadata a server sets.
    pub async fn apply(&self, manifest: &Value) -> Result<Value, MemberError> {
        let r = ObjectRef::of(manifest)?;
        let api = self.api_for(&r).await?;
        let params = PatchParams::apply(FIELD_MANAGER).force();
        let body = apply_body(manifest);
        let object = self
            .call("apply", api.patch(&r.name, &params, &Patch::Apply(&body)))
            .await?;
        Ok(into_value(object, &r.api_version, &r.kind))
    }

    /// Deletes an object with background propagation (its dependents go too, as Karmada
    /// deletes, so a Job's pods are not orphaned); `Ok(false)` when it was already absent.
    pub async fn delete(&self, r: &ObjectRef) -> Result<bool, MemberError> {
        let api = match self.api_for(r).await {
            Ok(api) => api,
            // a kind the member no longer serves has no objects left to delete
            Err(MemberError::UnknownKind { .. }) => return Ok(false),
            Err(e) => return Err(e),
        };
        match self
            .call("delete", api.delete(&r.name, &DeleteParams::background()))
            .await
        {
            Ok(_) => Ok(true),
            Err(MemberError::Api { code: 404, .. }) => Ok(false),
            Err(e) => Err(e),
        }
    }

    /// One object as the member has it; `None` when absent.
    pub async fn get(&self, r: &ObjectRef) -> Result<Option<Value>, MemberError> {
        let api = self.api_for(r).await?;
        match self.call("get", api.get_opt(&r.name)).await? {
            None => Ok(None),
            Some(o) => Ok(Some(into_value(o, &r.api_version, &r.kind))),
        }
    }

    /// Every object of `api_version` `kind` that Flotilla applied (by [`managed_label`]), in
    /// every namespace, cut to identity, `spec` and `status` ([`Member::list_slim`]).
    pub async fn list_managed(
        &self,
        api_version: &str,
        kind: &str,
    ) -> Result<Vec<Value>, MemberError> {
        self.list_managed_lazily(api_version, kind)
            .await?
            .into_iter()
            .map(Listed::into_value)
            .collect()
    }

    /// As [`Member::list_managed`], but each object's `spec` and `status` are kept as the
    /// JSON text the member sent, parsed only when [`Listed::value`] asks for them: status
    /// collection reads the identity and `resourceVersion` of every object and parses only
    /// the ones that changed since its last pass (docs/design.md §7).
    pub async fn list_managed_lazily(
        &self,
        api_version: &str,
        kind: &str,
    ) -> Result<Vec<Listed>, MemberError> {
        let (resource, namespaced) = self.resource_for(api_version, kind).await?;
        let params = ListParams::default().labels(managed_label(namespaced));
        self.list_slim(&resource, &params, api_version, kind).await
    }

    /// Every object of a core or group resource (nodes, pods) in every namespace, each item
    /// parsed straight into `T`: what `T` does not name is skipped by the parser.
    pub async fn list_all<T: serde::de::DeserializeOwned>(
        &self,
        api_version: &str,
        kind: &str,
    ) -> Result<Vec<T>, MemberError> {
        let (resource, _) = self.resource_for(api_version, kind).await?;
        let list: TypedList<T> = self.list_request(&resource, &ListParams::default()).await?;
        Ok(list.items)
    }

    /// A list of `resource` in every namespace, each item cut to what status and capacity
    /// read: `metadata`'s identity (name, namespace, uid, generation, resourceVersion,
    /// labels), `spec` and `status`. The JSON is read straight into that shape: kube's
    /// `DynamicObject` buffers every item through serde's flatten, and parsing
    /// `managedFields` and annotations only to drop them was a tenth of the control
    /// plane's CPU in a failover (profile in docs/design.md §7).
    async fn list_slim(
        &self,
        resource: &ApiResource,
        params: &ListParams,
        api_version: &str,
        kind: &str,
    ) -> Result<Vec<Listed>, MemberError> {
        let list: TypedList<SlimItem> = self.list_request(resource, params).await?;
        // list items carry no apiVersion/kind of their own
        Ok(list
            .items
            .into_iter()
            .map(|item| Listed {
                item,
                api_version: api_version.to_owned(),
                kind: kind.to_owned(),
            })
            .collect())
    }

    /// A list of `resource` in every namespace, parsed straight into `T`s, in pages of
    /// [`LIST_PAGE`] (one unpaged list of a big cluster's pods is a single response of
    /// hundreds of MB, and an API server may cut it off). A continue token that expired
    /// (410 Gone) restarts the list once from the beginning.
    async fn list_request<T: serde::de::DeserializeOwned>(
        &self,
        resource: &ApiResource,
        params: &ListParams,
    ) -> Result<TypedList<T>, MemberError> {
        let url = <DynamicObject as kube::Resource>::url_path(resource, None);
        let mut restarted = false;
        let mut items = Vec::new();
        let mut params = params.clone().limit(LIST_PAGE);
        loop {
            let request = kube::core::Request::new(&url)
                .list(&params)
                .map_err(|e| MemberError::BadObject(e.to_string()))?;
            let client = self.client();
            let page: TypedList<T> = match self.call("list", client.request(request)).await {
                Ok(page) => page,
                Err(MemberError::Api { code: 410, .. }) if !restarted => {
                    restarted = true;
                    items.clear();
                    params.continue_token = None;
                    continue;
                }
                Err(e) => return Err(e),
            };
            items.extend(page.items);
            match page.metadata.continue_token.filter(|t| !t.is_empty()) {
                Some(token) => params.continue_token = Some(token),
                None => {
                    return Ok(TypedList {
                        items,
                        ..TypedList::default()
                    });
                }
            }
        }
    }

    /// `GET path` (`/readyz`, `/healthz`): the HTTP code and body; transport failures and
    /// timeouts are errors.
    pub async fn get_raw(&self, path: &'static str) -> Result<(u16, String), MemberError> {
        let request = http::Request::get(path)
            .body(Vec::new())
            .map_err(|e| MemberError::BadObject(e.to_string()))?;
        let client = self.client();
        let fut = async move {
            let response = client.send(request.map(Into::into)).await?;
            let code = response.status().as_u16();
            let body = http_body_util::BodyExt::collect(response.into_body())
                .await
                .map_err(|e| kube::Error::Service(Box::new(e)))?
                .to_bytes();
            Ok((code, String::from_utf8_lossy(&body).into_owned()))
        };
        self.call("probe", fut).await
    }

    /// The member's Kubernetes version (`/version`'s `gitVersion`).
    pub async fn version(&self) -> Result<String, MemberError> {
        let info = self
            .call("version", self.client().apiserver_version())
            .await?;
        Ok(info.git_version)
    }

    /// The group versions and resources the member serves (Karmada's `apiEnablements`).
    pub async fn api_enablements(
        &self,
    ) -> Result<Vec<flotilla_proto::v1::ApiEnablement>, MemberError> {
        let mut out = Vec::new();
        let core = self
            .call("discover", self.client().list_core_api_versions())
            .await?;
        let groups = self
            .call("discover", self.client().list_api_groups())
            .await?;
        let mut versions: Vec<String> = core.versions;
        for g in groups.groups {
            versions.extend(g.versions.into_iter().map(|v| v.group_version));
        }
        for gv in versions {
            let resources = self.resources(&gv, None).await?;
            let mut list: Vec<flotilla_proto::v1::ApiResource> = resources
                .iter()
                .filter(|(r, _)| !r.plural.contains('/'))
                .map(|(r, _)| flotilla_proto::v1::ApiResource {
                    name: r.plural.clone(),
                    kind: r.kind.clone(),
                })
                .collect();
            list.sort_by(|a, b| a.name.cmp(&b.name));
            out.push(flotilla_proto::v1::ApiEnablement {
                group_version: gv,
                resources: list,
            });
        }
        out.sort_by(|a, b| a.group_version.cmp(&b.group_version));
        Ok(out)
    }

    /// What a heartbeat reports of `cluster` (this member): its [`Member::probe`] (CH-2) and,
    /// when it is online and healthy, its [`Member::cluster_status`] (CH-5.2; `None`, logged
    /// at debug, when that cannot be collected).
    pub async fn probe_with_status(
        &self,
        cluster: &str,
        models: &[flotilla_core::capacity::ResourceModel],
    ) -> (
        flotilla_core::health::ProbeOutcome,
        String,
        Option<flotilla_proto::v1::ClusterStatus>,
    ) {
        let (outcome, message) = self.probe().await;
        if !(outcome.online && outcome.healthy) {
            return (outcome, message, None);
        }
        let status = match self.cluster_status(models).await {
            Ok(status) => Some(status),
            Err(error) => {
                tracing::debug!(cluster, %error, "cannot collect the member's status");
                None
            }
        };
        (outcome, message, status)
    }

    /// CH-2: `GET /readyz`, then `/healthz` if that answered 404; the outcome and what the
    /// last answer was (`{url}: HTTP 500`, `{url}: no answer within 1s`, ...).
    pub async fn probe(&self) -> (flotilla_core::health::ProbeOutcome, String) {
        use flotilla_core::health::{ProbeResponse, interpret_probe, needs_healthz_fallback};
        let get = |path: &'static str| async move {
            let url = format!("{}{path}", self.endpoint.trim_end_matches('/'));
            match self.get_raw(path).await {
                Ok((status, _)) => (
                    ProbeResponse::Status(status),
                    format!("{url}: HTTP {status}"),
                ),
                Err(MemberError::Timeout { timeout, .. }) => (
                    ProbeResponse::Error,
                    format!("{url}: no answer within {timeout:?}"),
                ),
                Err(e) => (ProbeResponse::Error, format!("{url}: {e}")),
            }
        };
        let (readyz, mut message) = get("/readyz").await;
        let healthz = if needs_healthz_fallback(readyz) {
            let (h, m) = get("/healthz").await;
            message = m;
            Some(h)
        } else {
            None
        };
        (interpret_probe(readyz, healthz), message)
    }

    /// What a status collection reports of the member (CH-5.2): its Kubernetes version, API
    /// enablements and capacity summary (with its nodes per grade of `models`, ES-4.2).
    pub async fn cluster_status(
        &self,
        models: &[flotilla_core::capacity::ResourceModel],
    ) -> Result<flotilla_proto::v1::ClusterStatus, MemberError> {
        Ok(flotilla_proto::v1::ClusterStatus {
            conditions: Vec::new(),
            kubernetes_version: self.version().await?,
            api_enablements: self.api_enablements().await?,
            resource_summary: Some(self.resource_summary(models).await?),
        })
    }

    /// The capacity summary from the member's nodes and pods ([`status::resource_summary`]).
    pub async fn resource_summary(
        &self,
        models: &[flotilla_core::capacity::ResourceModel],
    ) -> Result<flotilla_proto::v1::ResourceSummary, MemberError> {
        let nodes: Vec<status::NodeCapacity> = self.list_all("v1", "Node").await?;
        let pods: Vec<status::PodCapacity> = self.list_all("v1", "Pod").await?;
        Ok(status::resource_summary(&nodes, &pods, models))
    }
}

/// Objects per page of a list.
pub const LIST_PAGE: u32 = 500;

/// A list's items, each parsed straight into `T`, and its continue token.
#[derive(serde::Deserialize)]
struct TypedList<T> {
    #[serde(default = "Vec::new")]
    items: Vec<T>,
    #[serde(default)]
    metadata: ListMeta,
}

impl<T> Default for TypedList<T> {
    fn default() -> Self {
        Self {
            items: Vec::new(),
            metadata: ListMeta::default(),
        }
    }
}

/// The part of a list's metadata paging reads.
#[derive(Default, serde::Deserialize)]
struct ListMeta {
    #[serde(default, rename = "continue")]
    continue_token: Option<String>,
}

/// One item of a [`SlimList`]: every other field is skipped by the parser, and `spec` and
/// `status` are only checked to be JSON and kept as text until asked for.
#[derive(serde::Deserialize)]
struct SlimItem {
    #[serde(default)]
    metadata: SlimMeta,
    spec: Option<Box<serde_json::value::RawValue>>,
    status: Option<Box<serde_json::value::RawValue>>,
}

#[derive(Clone, Default, serde::Deserialize)]
#[serde(default, rename_all = "camelCase")]
struct SlimMeta {
    name: Option<String>,
    namespace: Option<String>,
    uid: Option<String>,
    generation: Option<i64>,
    resource_version: Option<String>,
    labels: Option<std::collections::BTreeMap<String, String>>,
}

/// One object of a managed list ([`Member::list_managed_lazily`]): its identity and
/// `resourceVersion` at hand, its `spec` and `status` parsed on demand.
pub struct Listed {
    item: SlimItem,
    api_version: String,
    kind: String,
}

impl Listed {
    /// `metadata.namespace` ("" for a cluster-scoped object).
    pub fn namespace(&self) -> &str {
        self.item.metadata.namespace.as_deref().unwrap_or_default()
    }

    /// `metadata.name`.
    pub fn name(&self) -> &str {
        self.item.metadata.name.as_deref().unwrap_or_default()
    }

    /// The kind the list was of.
    pub fn kind(&self) -> &str {
        &self.kind
    }

    /// `metadata.resourceVersion` ("" when the member sent none): it changes whenever the
    /// object does, so an unchanged one means unchanged `spec` and `status`.
    pub fn resource_version(&self) -> &str {
        self.item
            .metadata
            .resource_version
            .as_deref()
            .unwrap_or_default()
    }

    /// `metadata.uid` ("" when the member sent none).
    pub fn uid(&self) -> &str {
        self.item.metadata.uid.as_deref().unwrap_or_default()
    }

    /// Where the object stood when listed (WE-7.1): uid, generation, resourceVersion.
    pub fn stand(&self) -> flotilla_core::interpret::Stand {
        flotilla_core::interpret::Stand {
            uid: self.uid().to_owned(),
            generation: self.item.metadata.generation.filter(|g| *g > 0),
            resource_version: self.resource_version().to_owned(),
        }
    }

    /// `spec` and `status`, parsed. The text was checked to be JSON when the list was read;
    /// only a nesting past serde_json's depth limit can fail here (the check has none), and
    /// that object is refused, as a list holding it was before the parse was deferred.
    fn fields(&self) -> Result<serde_json::Map<String, Value>, MemberError> {
        let parse = |part: &str, raw: &serde_json::value::RawValue| {
            serde_json::from_str::<Value>(raw.get()).map_err(|e| {
                MemberError::BadObject(format!(
                    "{} {}/{}: {part}: {e}",
                    self.kind,
                    self.namespace(),
                    self.name()
                ))
            })
        };
        let mut fields = serde_json::Map::new();
        if let Some(spec) = self.item.spec.as_deref() {
            fields.insert("spec".into(), parse("spec", spec)?);
        }
        if let Some(status) = self.item.status.as_deref() {
            fields.insert("status".into(), parse("status", status)?);
        }
        Ok(fields)
    }

    /// The object as the JSON the rules read (what [`Member::list_managed`] returns).
    pub fn value(&self) -> Result<Value, MemberError> {
        let metadata = self.item.metadata.clone();
        Ok(object_value(
            self.fields()?,
            metadata,
            &self.api_version,
            &self.kind,
        ))
    }

    /// [`Listed::value`], consuming the object.
    pub fn into_value(self) -> Result<Value, MemberError> {
        let fields = self.fields()?;
        Ok(object_value(
            fields,
            self.item.metadata,
            &self.api_version,
            &self.kind,
        ))
    }
}

/// `fields` with `apiVersion`, `kind` and the metadata the rules read.
fn object_value(
    mut fields: serde_json::Map<String, Value>,
    metadata: SlimMeta,
    api_version: &str,
    kind: &str,
) -> Value {
    let mut meta = serde_json::Map::new();
    let mut put = |key: &str, value: Option<Value>| {
        if let Some(v) = value {
            meta.insert(key.to_owned(), v);
        }
    };
    put("name", metadata.name.map(Value::from));
    put("namespace", metadata.namespace.map(Value::from));
    put("uid", metadata.uid.map(Value::from));
    put("generation", metadata.generation.map(Value::from));
    put(
        "resourceVersion",
        metadata.resource_version.map(Value::from),
    );
    put(
        "labels",
        metadata
            .labels
            .map(|l| Value::Object(l.into_iter().map(|(k, v)| (k, Value::from(v))).collect())),
    );
    fields.insert("apiVersion".into(), api_version.into());
    fields.insert("kind".into(), kind.into());
    fields.insert("metadata".into(), Value::Object(meta));
    Value::Object(fields)
}

/// An object as JSON for the interpreter: its fields (`spec`, `status`, ...) as kube-rs
/// parsed them, moved rather than re-serialized, with `apiVersion`, `kind` and the metadata
/// the rules read (name, namespace, uid, generation, resourceVersion, labels).
pub(crate) fn into_value(object: DynamicObject, api_version: &str, kind: &str) -> Value {
    let DynamicObject { metadata, data, .. } = object;
    let fields = match data {
        Value::Object(map) => map,
        _ => serde_json::Map::new(),
    };
    let metadata = SlimMeta {
        name: metadata.name,
        namespace: metadata.namespace,
        uid: metadata.uid,
        generation: metadata.generation,
        resource_version: metadata.resource_version,
        labels: metadata.labels,
    };
    object_value(fields, metadata, api_version, kind)
}

/// The members of every cluster, one [`Member`] per cluster (rebuilt when its [`Target`]
/// changes), each with its own bound on the calls in flight: a member that hangs holds only
/// its own permits, so it cannot starve the healthy members during a failover (which is when
/// one member hangs).
#[derive(Debug)]
pub struct Members {
    members: Mutex<HashMap<String, (Target, Arc<Member>)>>,
    timeout: Duration,
    concurrency: usize,
}

impl Members {
    /// Members with a per-call `timeout` and at most `concurrency` calls in flight to each.
    pub fn new(timeout: Duration, concurrency: usize) -> Self {
        Self {
            members: Mutex::new(HashMap::new()),
            timeout,
            concurrency: concurrency.max(1),
        }
    }

    /// The member of `cluster`, reached at `target`.
    pub fn member(&self, cluster: &str, target: &Target) -> Result<Arc<Member>, MemberError> {
        let mut members = self.members.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some((t, m)) = members.get(cluster)
            && t == target
        {
            return Ok(m.clone());
        }
        // a rebuilt client (new credentials) takes a fresh bound: calls still running on the
        // old one finish on their own permits
        let in_flight = Arc::new(Semaphore::new(self.concurrency));
        let member = Arc::new(Member::new(target, self.timeout, in_flight)?);
        members.insert(cluster.to_owned(), (target.clone(), member.clone()));
        Ok(member)
    }

    /// Forgets a cluster's client (its Cluster was deleted).
    pub fn forget(&self, cluster: &str) {
        self.members
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(cluster);
    }
}

#[cfg(test)]
mod tests;
