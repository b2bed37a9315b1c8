//! The simulated member cluster: applied manifests, their "pods", the capacity and the fault.
//!
//! ```text
//!   apply(manifest, replicas) ──► Manifest { pods: [Pod { bound_at }] }
//!                                    │ schedule(): pending pods are bound, oldest manifest
//!                                    │ first, while bound pods < --capacity
//!                                    ▼
//!   status(now): ready = bound pods with bound_at + --pod-startup-delay ≤ now
//!                health = Healthy iff ready == desired (non-workloads: Healthy once applied)
//! ```
//!
//! Readiness is computed when asked, from `tokio::time::Instant`s, so nothing ticks in the
//! background and tests can run it under `tokio::time::pause()`.

use std::collections::BTreeMap;
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use flotilla_proto::v1;
use serde_json::Value;
use tokio::sync::watch;
use tokio::time::Instant;

/// The Kubernetes version the simulated member reports (`status.kubernetesVersion`).
pub const KUBERNETES_VERSION: &str = "v1.33.0-flotilla-member-sim";

/// Kinds whose replicas become pods even when the request and the manifest name none (then
/// one replica, Kubernetes' default for `spec.replicas`).
pub const WORKLOAD_KINDS: [&str; 3] = ["Deployment", "StatefulSet", "ReplicaSet"];

/// The API resources the member serves: `(groupVersion, [(resource, kind)])`. The scheduler's
/// APIEnablement filter (SC-6.1) looks for the workload's kind here.
pub const API_ENABLEMENTS: &[(&str, &[(&str, &str)])] = &[
    (
        "apps/v1",
        &[
            ("deployments", "Deployment"),
            ("statefulsets", "StatefulSet"),
            ("replicasets", "ReplicaSet"),
            ("daemonsets", "DaemonSet"),
        ],
    ),
    ("batch/v1", &[("jobs", "Job")]),
    (
        "v1",
        &[
            ("configmaps", "ConfigMap"),
            ("secrets", "Secret"),
            ("services", "Service"),
            ("namespaces", "Namespace"),
            ("serviceaccounts", "ServiceAccount"),
            ("persistentvolumeclaims", "PersistentVolumeClaim"),
            ("pods", "Pod"),
            ("nodes", "Node"),
        ],
    ),
    (
        "apiextensions.k8s.io/v1",
        &[("customresourcedefinitions", "CustomResourceDefinition")],
    ),
    (
        "rbac.authorization.k8s.io/v1",
        &[
            ("clusterroles", "ClusterRole"),
            ("clusterrolebindings", "ClusterRoleBinding"),
            ("roles", "Role"),
            ("rolebindings", "RoleBinding"),
        ],
    ),
];

/// A simulated fault (`--fault`, `SetFault`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum Fault {
    /// No fault: `/readyz` answers 200.
    #[default]
    Healthy,
    /// Reachable but not ok: `/readyz` answers 500, RPCs still answer (CH-3.2).
    Unhealthy,
    /// Nothing answers: HTTP requests and RPCs hang until healed (CH-3.1); Pull agents stop
    /// heartbeating.
    Unreachable,
}

// === impl Fault ===

impl Fault {
    /// The wire value.
    pub fn to_wire(self) -> v1::FaultMode {
        match self {
            Fault::Healthy => v1::FaultMode::Healthy,
            Fault::Unhealthy => v1::FaultMode::Unhealthy,
            Fault::Unreachable => v1::FaultMode::Unreachable,
        }
    }

    /// The domain value of a raw wire value; `None` for UNSPECIFIED or unknown values.
    pub fn from_wire(raw: i32) -> Option<Self> {
        match v1::FaultMode::try_from(raw).ok()? {
            v1::FaultMode::Unspecified => None,
            v1::FaultMode::Healthy => Some(Fault::Healthy),
            v1::FaultMode::Unhealthy => Some(Fault::Unhealthy),
            v1::FaultMode::Unreachable => Some(Fault::Unreachable),
        }
    }
}

/// Identity of an object on the member: (namespace, kind, name), as in Kubernetes (two kinds
/// may share a name).
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ResourceKey {
    /// Namespace; empty for cluster-scoped objects.
    pub namespace: String,
    /// Kind, e.g. `Deployment`.
    pub kind: String,
    /// Name.
    pub name: String,
}

impl std::fmt::Display for ResourceKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.namespace.is_empty() {
            write!(f, "{}/{}", self.kind, self.name)
        } else {
            write!(f, "{}/{}/{}", self.kind, self.namespace, self.name)
        }
    }
}

/// A request that cannot be applied: the JSON path of the bad field and why.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{field}: {message}")]
pub struct FieldError {
    /// JSON path of the offending field in the request, e.g. `manifest.metadata.name`.
    pub field: String,
    /// What is wrong with it.
    pub message: String,
}

impl FieldError {
    fn new(field: impl Into<String>, message: impl Into<String>) -> Self {
        Self {
            field: field.into(),
            message: message.into(),
        }
    }
}

/// A validated apply: what [`Sim::apply`] stores.
#[derive(Clone, Debug, PartialEq)]
pub struct ApplySpec {
    /// Identity of the object (apiVersion, kind, namespace, name, uid).
    pub resource: v1::ObjectReference,
    /// The manifest, a JSON object (with `spec.replicas` revised for workloads).
    pub manifest: Value,
    /// Desired replicas (0 for non-workloads).
    pub replicas: i32,
    /// Whether the object runs pods (health follows readiness) or is plain configuration
    /// (Healthy once applied, WE-7).
    pub workload: bool,
}

fn str_at<'a>(v: &'a Value, path: &[&str]) -> Option<&'a str> {
    path.iter().try_fold(v, |v, k| v.get(k))?.as_str()
}

/// Validates an apply: the manifest must be a JSON object; identity comes from `resource` if
/// given, else from the manifest's `apiVersion`, `kind` and `metadata`; replicas from
/// `replicas` if given, else the manifest's `spec.replicas`, else 1 for [`WORKLOAD_KINDS`]
/// and 0 for everything else.
pub fn parse_apply(
    manifest: &str,
    resource: Option<v1::ObjectReference>,
    replicas: Option<i32>,
) -> Result<ApplySpec, FieldError> {
    if manifest.trim().is_empty() {
        return Err(FieldError::new(
            "manifest",
            "must be a JSON object, not empty",
        ));
    }
    let mut manifest: Value = serde_json::from_str(manifest)
        .map_err(|e| FieldError::new("manifest", format!("not valid JSON: {e}")))?;
    if !manifest.is_object() {
        return Err(FieldError::new("manifest", "must be a JSON object"));
    }
    let resource = match resource {
        Some(r) => {
            if r.kind.is_empty() {
                return Err(FieldError::new("resource.kind", "must not be empty"));
            }
            if r.name.is_empty() {
                return Err(FieldError::new("resource.name", "must not be empty"));
            }
            r
        }
        None => {
            let kind = str_at(&manifest, &["kind"]).unwrap_or_default();
            if kind.is_empty() {
                return Err(FieldError::new(
                    "manifest.kind",
                    "must be set when `resource` is absent",
                ));
            }
            let name = str_at(&manifest, &["metadata", "name"]).unwrap_or_default();
            if name.is_empty() {
                return Err(FieldError::new(
                    "manifest.metadata.name",
                    "must be set when `resource` is absent",
                ));
            }
            v1::ObjectReference {
                api_version: str_at(&manifest, &["apiVersion"])
                    .unwrap_or_default()
                    .to_owned(),
                kind: kind.to_owned(),
                namespace: str_at(&manifest, &["metadata", "namespace"])
                    .unwrap_or_default()
                    .to_owned(),
                name: name.to_owned(),
                uid: str_at(&manifest, &["metadata", "uid"])
                    .unwrap_or_default()
                    .to_owned(),
            }
        }
    };
    let in_manifest = match manifest.get("spec").and_then(|s| s.get("replicas")) {
        None | Some(Value::Null) => None,
        Some(v) => Some(
            v.as_i64()
                .and_then(|n| i32::try_from(n).ok())
                .filter(|n| *n >= 0)
                .ok_or_else(|| {
                    FieldError::new(
                        "manifest.spec.replicas",
                        "must be a non-negative 32-bit integer",
                    )
                })?,
        ),
    };
    if let Some(n) = replicas
        && n < 0
    {
        return Err(FieldError::new("replicas", "must not be negative"));
    }
    let listed = WORKLOAD_KINDS.contains(&resource.kind.as_str());
    let workload = listed || replicas.is_some() || in_manifest.is_some();
    let replicas = replicas
        .or(in_manifest)
        .unwrap_or(if listed { 1 } else { 0 });
    if workload && let Some(obj) = manifest.as_object_mut() {
        let spec = obj
            .entry("spec")
            .or_insert_with(|| Value::Object(serde_json::Map::new()));
        if let Some(spec) = spec.as_object_mut() {
            spec.insert("replicas".into(), Value::from(replicas));
        }
    }
    Ok(ApplySpec {
        resource,
        manifest,
        replicas,
        workload,
    })
}

/// The key an object reference names (apiVersion and uid play no part).
pub fn key_of(r: &v1::ObjectReference) -> ResourceKey {
    ResourceKey {
        namespace: r.namespace.clone(),
        kind: r.kind.clone(),
        name: r.name.clone(),
    }
}

/// How the simulated member behaves (`--name`, `--capacity`, `--pod-startup-delay`).
#[derive(Clone, Debug)]
pub struct SimConfig {
    /// The cluster's name (reported by GetStats and used by the Pull agent).
    pub name: String,
    /// How many pods may run at once over all manifests; more stay Pending.
    pub capacity: u32,
    /// The node's allocatable CPU in millicores (`--node-cpu`); `None`: `capacity` cores,
    /// and placement counts pods only.
    pub node_cpu_millis: Option<i64>,
    /// The node's allocatable memory in bytes (`--node-memory`); `None`: `capacity` GiB,
    /// and placement counts pods only.
    pub node_memory_bytes: Option<i64>,
    /// How long a pod takes from getting a place to Ready.
    pub pod_startup_delay: Duration,
    /// The fault at start-up.
    pub fault: Fault,
}

#[derive(Debug)]
struct Pod {
    /// When the pod got a place within the capacity; `None` while Pending.
    bound_at: Option<Instant>,
}

#[derive(Debug)]
struct Manifest {
    resource: v1::ObjectReference,
    manifest: Value,
    /// `manifest` as JSON text, rendered once per apply: every status report carries it, and
    /// re-serialising every manifest on every status call was the largest cost of a
    /// `flotilla bench failover` member-sim.
    manifest_text: String,
    replicas: i32,
    workload: bool,
    /// What one pod requests (ES-1: its pod template's containers, init containers and
    /// overhead), as the node's CPU and memory are counted.
    requests: PodRequests,
    pods: Vec<Pod>,
    applied_at: SystemTime,
    /// Creation order: pending pods of older manifests get places first.
    seq: u64,
    generation: i64,
    /// `metadata.uid`, set at creation.
    uid: String,
    /// `metadata.creationTimestamp`.
    created_at: SystemTime,
    /// `metadata.resourceVersion`: the member's write counter at the last write.
    resource_version: u64,
    /// The ready pods the status showed at that write: when the clock makes more (or fewer)
    /// Ready, [`State::settle`] records the status change as a write, as a real Deployment
    /// controller's status update moves the object's `resourceVersion`.
    reported_ready: usize,
    /// The field manager of the last server-side apply.
    manager: String,
}

/// A pod's CPU (millicores) and memory (bytes) requests.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct PodRequests {
    cpu: i64,
    memory: i64,
}

impl PodRequests {
    /// The requests of one pod of `manifest` (a Pod's own spec, else its pod template's).
    fn of(manifest: &Value) -> Self {
        let spec = if manifest.get("kind").and_then(Value::as_str) == Some("Pod") {
            manifest.get("spec")
        } else {
            manifest.pointer("/spec/template/spec")
        };
        let requests = spec
            .map(flotilla_core::capacity::replica_requests)
            .unwrap_or_default();
        let of = |name: &str| requests.get(name).copied().unwrap_or(0);
        PodRequests {
            cpu: of("cpu"),
            memory: of("memory"),
        }
    }
}

/// What the node holds, when placement counts CPU and memory besides pods.
#[derive(Clone, Copy, Debug)]
struct NodeRoom {
    cpu: i64,
    memory: i64,
}

#[derive(Debug, Default)]
struct State {
    manifests: BTreeMap<ResourceKey, Manifest>,
    /// The write counter (`resourceVersion`s).
    writes: u64,
    next_seq: u64,
    bound: u64,
    pending: u64,
    /// Objects created since start.
    creates: u64,
    /// API calls failed on purpose since start.
    injected: u64,
    /// F11: the API errors in force and their generator.
    api_errors: Option<(v1::ApiErrors, rand::rngs::StdRng)>,
}

/// An API call of the member (F11 error injection).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ApiCall {
    /// A server-side apply.
    Apply,
    /// A delete.
    Delete,
    /// A get or a list.
    Status,
}

/// What an injected API error does to one call.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum InjectedError {
    /// Fails at once; nothing done (an HTTP 500).
    Unavailable,
    /// Fails at once with a conflict; nothing done (an HTTP 409).
    Conflict,
    /// Does the work, then fails (the reply is lost).
    LostReply,
    /// Hangs for 30 s, then fails (the caller times out first).
    Timeout,
}

/// One simulated member cluster. Shared (`Arc<Sim>`) by the gRPC service, the HTTP probes
/// and the Pull agent.
#[derive(Debug)]
pub struct Sim {
    config: SimConfig,
    fault: watch::Sender<Fault>,
    changes: watch::Sender<u64>,
    state: Mutex<State>,
    /// The bearer token its Kubernetes API requires (`--token-file`); `None`: anonymous.
    token: std::sync::OnceLock<String>,
    /// A delay added to every request on its main port, in microseconds (a remote cluster's
    /// round trip; `flotilla bench failover --member-latency`). 0 by default.
    latency_us: std::sync::atomic::AtomicU64,
    /// How late watch events reach their clients, in milliseconds (`SetFault.watch_delay_ms`).
    watch_delay_ms: std::sync::atomic::AtomicU64,
}

/// The longest watch delay `SetFault` takes.
pub const MAX_WATCH_DELAY_MS: u32 = 60_000;

/// Aggregates of [`Sim::summary`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Summary {
    /// Manifests applied.
    pub manifests: usize,
    /// Desired replicas over all manifests.
    pub replicas: i64,
    /// Ready replicas over all manifests.
    pub ready: i64,
    /// Pods with a place (Ready or starting).
    pub bound: i64,
    /// Pods waiting for capacity.
    pub pending: i64,
}

fn timestamp(t: SystemTime) -> prost_types::Timestamp {
    let d = t.duration_since(UNIX_EPOCH).unwrap_or_default();
    prost_types::Timestamp {
        seconds: i64::try_from(d.as_secs()).unwrap_or(i64::MAX),
        nanos: i32::try_from(d.subsec_millis() * 1_000_000).unwrap_or(0),
    }
}

fn clamp_i32(n: i64) -> i32 {
    i32::try_from(n).unwrap_or(i32::MAX)
}

// === impl State ===

impl State {
    /// Records, as writes, the status changes the clock made since the objects `which`
    /// selects were last written: each object whose ready pods changed gets a new
    /// `resourceVersion`, so that a client comparing `resourceVersion`s (status collection
    /// does) sees every status change, as on a real API server. Returns whether any moved.
    fn settle(&mut self, now: Instant, delay: Duration, which: impl Fn(&Manifest) -> bool) -> bool {
        let mut moved = false;
        for m in self.manifests.values_mut().filter(|m| which(m)) {
            moved |= settle_one(m, &mut self.writes, now, delay);
        }
        moved
    }

    /// [`State::settle`] for the objects at `keys`.
    fn settle_keys(&mut self, keys: &[ResourceKey], now: Instant, delay: Duration) -> bool {
        let mut moved = false;
        for key in keys {
            if let Some(m) = self.manifests.get_mut(key) {
                moved |= settle_one(m, &mut self.writes, now, delay);
            }
        }
        moved
    }

    /// Binds pending pods, oldest manifest first, while there is capacity: a free pod and,
    /// with `room` (`--node-cpu`/`--node-memory`), the pod's CPU and memory requests free on
    /// the node, as kube-scheduler's resource fit; a pod that does not fit stays Pending while
    /// smaller ones of later manifests may take a place.
    fn schedule(&mut self, capacity: u64, room: Option<NodeRoom>, now: Instant) {
        if self.pending == 0 || self.bound >= capacity {
            return;
        }
        // what the bound pods take (only counted when the node's room is)
        let mut used = room.map(|_| {
            self.manifests
                .values()
                .fold(PodRequests::default(), |acc, m| {
                    let bound =
                        i64::try_from(m.pods.iter().filter(|p| p.bound_at.is_some()).count())
                            .unwrap_or(i64::MAX);
                    PodRequests {
                        cpu: acc.cpu.saturating_add(m.requests.cpu.saturating_mul(bound)),
                        memory: acc
                            .memory
                            .saturating_add(m.requests.memory.saturating_mul(bound)),
                    }
                })
        });
        let mut order: Vec<(u64, ResourceKey)> = self
            .manifests
            .iter()
            .filter(|(_, m)| m.pods.iter().any(|p| p.bound_at.is_none()))
            .map(|(k, m)| (m.seq, k.clone()))
            .collect();
        order.sort();
        for (_, key) in order {
            let Some(m) = self.manifests.get_mut(&key) else {
                continue;
            };
            let requests = m.requests;
            for pod in m.pods.iter_mut().filter(|p| p.bound_at.is_none()) {
                if self.bound >= capacity {
                    return;
                }
                if let (Some(room), Some(used)) = (room, used.as_mut()) {
                    let cpu = used.cpu.saturating_add(requests.cpu);
                    let memory = used.memory.saturating_add(requests.memory);
                    if cpu > room.cpu || memory > room.memory {
                        break;
                    }
                    *used = PodRequests { cpu, memory };
                }
                pod.bound_at = Some(now);
                self.bound += 1;
                self.pending -= 1;
            }
        }
    }

    /// Grows or shrinks a manifest's pods to `replicas`: new pods are Pending; a scale-down
    /// removes Pending pods first, then the youngest bound ones (Kubernetes removes
    /// not-ready pods first).
    fn resize(&mut self, key: &ResourceKey, replicas: i32) {
        let Some(m) = self.manifests.get_mut(key) else {
            return;
        };
        let want = usize::try_from(replicas).unwrap_or(0);
        while m.pods.len() < want {
            m.pods.push(Pod { bound_at: None });
            self.pending += 1;
        }
        while m.pods.len() > want {
            let victim = m
                .pods
                .iter()
                .position(|p| p.bound_at.is_none())
                .or_else(|| {
                    m.pods
                        .iter()
                        .enumerate()
                        .max_by_key(|(_, p)| p.bound_at)
                        .map(|(i, _)| i)
                });
            let Some(i) = victim else { break };
            let pod = m.pods.swap_remove(i);
            if pod.bound_at.is_some() {
                self.bound -= 1;
            } else {
                self.pending -= 1;
            }
        }
    }

    fn remove(&mut self, key: &ResourceKey) -> bool {
        let Some(m) = self.manifests.remove(key) else {
            return false;
        };
        for p in &m.pods {
            if p.bound_at.is_some() {
                self.bound -= 1;
            } else {
                self.pending -= 1;
            }
        }
        true
    }

    /// Keys matching `key`; an empty kind matches every kind.
    fn matching(&self, key: &ResourceKey) -> Vec<ResourceKey> {
        if !key.kind.is_empty() {
            return if self.manifests.contains_key(key) {
                vec![key.clone()]
            } else {
                Vec::new()
            };
        }
        self.manifests
            .keys()
            .filter(|k| k.namespace == key.namespace && k.name == key.name)
            .cloned()
            .collect()
    }
}

/// A server-side apply that another field manager's object refuses (without `force`).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("Apply failed with 1 conflict: {key} is managed by {manager:?}")]
pub struct ApplyConflict {
    /// The object.
    pub key: ResourceKey,
    /// Its current manager.
    pub manager: String,
}

/// Why a lookup found nothing usable.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum LookupError {
    /// No such object.
    #[error("{0} not found")]
    NotFound(ResourceKey),
    /// An empty kind matched objects of several kinds.
    #[error("{key} matches {count} objects of different kinds; set resource.kind")]
    Ambiguous {
        /// The key asked for (kind empty).
        key: ResourceKey,
        /// How many objects matched.
        count: usize,
    },
}

// === impl Sim ===

impl Sim {
    /// A member with nothing applied.
    pub fn new(config: SimConfig) -> Self {
        let (fault, _) = watch::channel(config.fault);
        let (changes, _) = watch::channel(0);
        Self {
            config,
            fault,
            changes,
            state: Mutex::new(State::default()),
            token: std::sync::OnceLock::new(),
            latency_us: std::sync::atomic::AtomicU64::new(0),
            watch_delay_ms: std::sync::atomic::AtomicU64::new(0),
        }
    }

    /// Delivers every later watch event `delay` after the change it reports (a loaded API
    /// server or a slow watch cache: a client's cache then lags behind what its own gets and
    /// applies return). 0: none, the default.
    pub fn set_watch_delay(&self, delay: std::time::Duration) -> Result<(), FieldError> {
        let ms = u64::try_from(delay.as_millis()).unwrap_or(u64::MAX);
        if ms > u64::from(MAX_WATCH_DELAY_MS) {
            return Err(FieldError {
                field: "watch_delay_ms".into(),
                message: format!("must be at most {MAX_WATCH_DELAY_MS}, not {ms}"),
            });
        }
        let previous = self
            .watch_delay_ms
            .swap(ms, std::sync::atomic::Ordering::Relaxed);
        if previous != ms {
            tracing::info!(cluster = %self.config.name, delay_ms = ms, "watch delay changed");
        }
        Ok(())
    }

    /// The delay [`Sim::set_watch_delay`] set.
    pub fn watch_delay(&self) -> std::time::Duration {
        std::time::Duration::from_millis(
            self.watch_delay_ms
                .load(std::sync::atomic::Ordering::Relaxed),
        )
    }

    /// Delays every later request on the member's main port by `latency`, as a remote
    /// cluster's round trip would (0: none, the default).
    pub fn set_latency(&self, latency: std::time::Duration) {
        let us = u64::try_from(latency.as_micros()).unwrap_or(u64::MAX);
        self.latency_us
            .store(us, std::sync::atomic::Ordering::Relaxed);
    }

    /// The delay [`Sim::set_latency`] set.
    pub fn latency(&self) -> std::time::Duration {
        std::time::Duration::from_micros(self.latency_us.load(std::sync::atomic::Ordering::Relaxed))
    }

    /// Requires `token` (as `Authorization: Bearer …`) on every Kubernetes API call but
    /// `/version`, `/readyz` and `/healthz`, which a real API server also answers anonymously.
    /// Set once; later calls are ignored.
    pub fn require_token(&self, token: String) {
        let _ = self.token.set(token);
    }

    /// Whether `authorization` (the header's value) is acceptable.
    pub fn authorized(&self, authorization: Option<&str>) -> bool {
        match self.token.get() {
            None => true,
            Some(t) => authorization
                .and_then(|a| a.strip_prefix("Bearer "))
                .is_some_and(|given| {
                    // constant-time over the token's length
                    given.len() == t.len()
                        && given
                            .bytes()
                            .zip(t.bytes())
                            .fold(0u8, |acc, (a, b)| acc | (a ^ b))
                            == 0
                }),
        }
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn changed(&self) {
        self.changes.send_modify(|v| *v = v.wrapping_add(1));
    }

    /// The configuration it runs with.
    pub fn config(&self) -> &SimConfig {
        &self.config
    }

    /// The cluster's name.
    pub fn name(&self) -> &str {
        &self.config.name
    }

    /// The current fault.
    pub fn fault(&self) -> Fault {
        *self.fault.borrow()
    }

    /// F11: the API errors from now on (`None`: none). Percentages above 100 are refused.
    pub fn set_api_errors(&self, errors: Option<v1::ApiErrors>) -> Result<(), FieldError> {
        if let Some(e) = &errors {
            for (field, p) in [
                ("api_errors.apply_error_percent", e.apply_error_percent),
                (
                    "api_errors.apply_conflict_percent",
                    e.apply_conflict_percent,
                ),
                (
                    "api_errors.apply_lost_reply_percent",
                    e.apply_lost_reply_percent,
                ),
                ("api_errors.apply_timeout_percent", e.apply_timeout_percent),
                ("api_errors.delete_error_percent", e.delete_error_percent),
                ("api_errors.status_error_percent", e.status_error_percent),
            ] {
                if p > 100 {
                    return Err(FieldError {
                        field: field.into(),
                        message: format!("is a percentage (0..=100), not {p}"),
                    });
                }
            }
            let apply = u64::from(e.apply_error_percent)
                + u64::from(e.apply_conflict_percent)
                + u64::from(e.apply_lost_reply_percent)
                + u64::from(e.apply_timeout_percent);
            if apply > 100 {
                return Err(FieldError {
                    field: "api_errors".into(),
                    message: format!("the apply percentages add up to {apply}, more than 100"),
                });
            }
        }
        use rand::SeedableRng;
        tracing::info!(cluster = %self.config.name, ?errors, "API errors changed (F11)");
        self.lock().api_errors = errors.map(|e| (e, rand::rngs::StdRng::seed_from_u64(e.seed)));
        Ok(())
    }

    /// F11: whether this call of the member's API fails on purpose, and how.
    pub fn inject(&self, call: ApiCall) -> Option<InjectedError> {
        use rand::Rng;
        let mut st = self.lock();
        let (e, rng) = st.api_errors.as_mut()?;
        let roll: u32 = rng.random_range(0..100);
        let outcome = match call {
            ApiCall::Apply => {
                let bands = [
                    (e.apply_error_percent, InjectedError::Unavailable),
                    (e.apply_conflict_percent, InjectedError::Conflict),
                    (e.apply_lost_reply_percent, InjectedError::LostReply),
                    (e.apply_timeout_percent, InjectedError::Timeout),
                ];
                let mut upto = 0;
                bands.into_iter().find_map(|(p, what)| {
                    upto += p;
                    (roll < upto).then_some(what)
                })
            }
            ApiCall::Delete => {
                (roll < e.delete_error_percent).then_some(InjectedError::Unavailable)
            }
            ApiCall::Status => {
                (roll < e.status_error_percent).then_some(InjectedError::Unavailable)
            }
        };
        if outcome.is_some() {
            st.injected += 1;
        }
        outcome
    }

    /// Sets the fault; returns the previous one.
    pub fn set_fault(&self, fault: Fault) -> Fault {
        let previous = self.fault.send_replace(fault);
        if previous != fault {
            tracing::info!(cluster = %self.config.name, ?previous, ?fault, "fault changed");
            self.changed();
        }
        previous
    }

    /// Follows the fault.
    pub fn subscribe_fault(&self) -> watch::Receiver<Fault> {
        self.fault.subscribe()
    }

    /// Resolves at once unless the member is unreachable; then when it is healed.
    pub async fn wait_reachable(&self) {
        let mut rx = self.fault.subscribe();
        // The sender lives in `self`: the channel cannot close while we borrow it.
        let _ = rx.wait_for(|f| *f != Fault::Unreachable).await;
    }

    /// A counter bumped by every change (apply, delete, fault): wake-ups for the Pull agent.
    pub fn subscribe_changes(&self) -> watch::Receiver<u64> {
        self.changes.subscribe()
    }

    /// The probe answer (CH-2): `(healthy, HTTP status, message)`.
    pub fn probe(&self) -> (bool, u16, &'static str) {
        match self.fault() {
            Fault::Healthy => (true, 200, "ok"),
            Fault::Unhealthy | Fault::Unreachable => {
                (false, 500, "[-]simulated fault: the member is not ready")
            }
        }
    }

    /// Creates or updates a manifest as field manager `flotilla`, forcing; returns whether it
    /// was created and its status.
    pub fn apply(&self, spec: ApplySpec) -> (bool, v1::ManifestStatus) {
        match self.apply_as(spec, "flotilla", true) {
            Ok((created, object)) => (created, self.status_of_object(&object)),
            // a forced apply takes the object over
            Err(_) => (false, v1::ManifestStatus::default()),
        }
    }

    /// Server-side apply as `manager`: creates the object, or replaces the intent of its
    /// manager. An object last applied by another manager is a conflict unless `force`
    /// (then `manager` takes it over). Returns whether it was created and the object.
    pub fn apply_as(
        &self,
        spec: ApplySpec,
        manager: &str,
        force: bool,
    ) -> Result<(bool, Value), ApplyConflict> {
        let now = Instant::now();
        let key = key_of(&spec.resource);
        let capacity = u64::from(self.config.capacity);
        let mut st = self.lock();
        st.writes += 1;
        let rv = st.writes;
        let created = match st.manifests.get_mut(&key) {
            Some(m) => {
                if m.manager != manager && !force {
                    return Err(ApplyConflict {
                        key,
                        manager: m.manager.clone(),
                    });
                }
                let changed = m.manifest != spec.manifest || m.replicas != spec.replicas;
                if changed {
                    m.generation += 1;
                }
                if changed || m.manager != manager {
                    m.resource_version = rv;
                }
                m.resource = spec.resource;
                m.manifest_text = spec.manifest.to_string();
                m.manifest = spec.manifest;
                m.replicas = spec.replicas;
                m.workload = spec.workload;
                m.requests = PodRequests::of(&m.manifest);
                m.applied_at = SystemTime::now();
                manager.clone_into(&mut m.manager);
                false
            }
            None => {
                st.creates += 1;
                let seq = st.next_seq;
                st.next_seq += 1;
                st.manifests.insert(
                    key.clone(),
                    Manifest {
                        resource: spec.resource,
                        manifest_text: spec.manifest.to_string(),
                        requests: PodRequests::of(&spec.manifest),
                        manifest: spec.manifest,
                        replicas: spec.replicas,
                        workload: spec.workload,
                        pods: Vec::new(),
                        applied_at: SystemTime::now(),
                        seq,
                        generation: 1,
                        uid: format!("{}-{seq:08x}-{rv:08x}", self.config.name),
                        created_at: SystemTime::now(),
                        resource_version: rv,
                        reported_ready: 0,
                        manager: manager.to_owned(),
                    },
                );
                true
            }
        };
        st.resize(&key, spec.replicas);
        st.schedule(capacity, self.room(), now);
        st.settle_keys(
            std::slice::from_ref(&key),
            now,
            self.config.pod_startup_delay,
        );
        let object = st
            .manifests
            .get(&key)
            .map(|m| self.object_of(m, now))
            .unwrap_or_default();
        drop(st);
        tracing::debug!(cluster = %self.config.name, %key, created, manager, "applied");
        self.changed();
        Ok((created, object))
    }

    /// Deletes the objects `key` names (an empty kind: every kind); returns whether any
    /// existed. Their places go to Pending pods of other manifests.
    pub fn delete(&self, key: &ResourceKey) -> bool {
        let now = Instant::now();
        let capacity = u64::from(self.config.capacity);
        let mut st = self.lock();
        let keys = st.matching(key);
        let mut deleted = false;
        for k in &keys {
            deleted |= st.remove(k);
        }
        st.schedule(capacity, self.room(), now);
        drop(st);
        if deleted {
            tracing::debug!(cluster = %self.config.name, %key, "deleted");
            self.changed();
        }
        deleted
    }

    /// One object's status.
    pub fn get(&self, key: &ResourceKey) -> Result<v1::ManifestStatus, LookupError> {
        let now = Instant::now();
        let mut st = self.lock();
        let keys = st.matching(key);
        let moved = st.settle_keys(&keys, now, self.config.pod_startup_delay);
        let result = match keys.as_slice() {
            [] => Err(LookupError::NotFound(key.clone())),
            [k] => st
                .manifests
                .get(k)
                .map(|m| self.status_of(m, now))
                .ok_or_else(|| LookupError::NotFound(key.clone())),
            more => Err(LookupError::Ambiguous {
                key: key.clone(),
                count: more.len(),
            }),
        };
        drop(st);
        if moved {
            self.changed();
        }
        result
    }

    /// The `uid` and `resourceVersion` of the object at exactly `key`, if it exists: one
    /// map lookup, for the checks of an apply body (nothing is rendered).
    pub fn identity(&self, key: &ResourceKey) -> Option<(String, String)> {
        let mut st = self.lock();
        // the version a precondition is checked against moves with the pods' readiness, as a
        // real API server's moves with the status write that records it
        let moved = st.settle_keys(
            std::slice::from_ref(key),
            Instant::now(),
            self.config.pod_startup_delay,
        );
        let identity = st
            .manifests
            .get(key)
            .map(|m| (m.uid.clone(), m.resource_version.to_string()));
        drop(st);
        if moved {
            self.changed();
        }
        identity
    }

    /// How many changes the member has seen (a list's `resourceVersion`).
    pub fn revision(&self) -> u64 {
        *self.changes.borrow()
    }

    /// Every object's identity, without rendering it (namespaces, lookups).
    pub fn references(&self) -> Vec<v1::ObjectReference> {
        self.lock()
            .manifests
            .values()
            .map(|m| m.resource.clone())
            .collect()
    }

    /// Every object's status, ordered by (namespace, kind, name).
    pub fn list(&self) -> Vec<v1::ManifestStatus> {
        let now = Instant::now();
        let mut st = self.lock();
        let moved = st.settle(now, self.config.pod_startup_delay, |_| true);
        let list = st
            .manifests
            .values()
            .map(|m| self.status_of(m, now))
            .collect();
        drop(st);
        if moved {
            self.changed();
        }
        list
    }

    /// Totals over every manifest.
    pub fn summary(&self) -> Summary {
        let now = Instant::now();
        let delay = self.config.pod_startup_delay;
        let st = self.lock();
        let mut s = Summary {
            manifests: st.manifests.len(),
            replicas: 0,
            ready: 0,
            bound: i64::try_from(st.bound).unwrap_or(i64::MAX),
            pending: i64::try_from(st.pending).unwrap_or(i64::MAX),
        };
        for m in st.manifests.values() {
            s.replicas += i64::from(m.replicas);
            s.ready += i64::try_from(ready_pods(m, now, delay)).unwrap_or(i64::MAX);
        }
        s
    }

    /// The earliest time a bound pod turns Ready, if any is still starting.
    pub fn next_ready_at(&self) -> Option<Instant> {
        let now = Instant::now();
        let delay = self.config.pod_startup_delay;
        let st = self.lock();
        st.manifests
            .values()
            .flat_map(|m| m.pods.iter())
            .filter_map(|p| p.bound_at.map(|t| t + delay))
            .filter(|t| *t > now)
            .min()
    }

    /// How many more replicas fit: capacity minus every pod (bound or Pending).
    pub fn allocatable_replicas(&self) -> i64 {
        let st = self.lock();
        i64::from(self.config.capacity)
            .saturating_sub(i64::try_from(st.bound + st.pending).unwrap_or(i64::MAX))
            .max(0)
    }

    /// The API enablements the member serves.
    pub fn api_enablements() -> Vec<v1::ApiEnablement> {
        API_ENABLEMENTS
            .iter()
            .map(|(gv, resources)| v1::ApiEnablement {
                group_version: (*gv).to_owned(),
                resources: resources
                    .iter()
                    .map(|(name, kind)| v1::ApiResource {
                        name: (*name).to_owned(),
                        kind: (*kind).to_owned(),
                    })
                    .collect(),
            })
            .collect()
    }

    /// The resource summary a status collector reports (CH-5.2, ES-3): allocatable pods =
    /// capacity, allocated = bound pods, allocating = pods waiting for capacity, allocatable
    /// replicas = what still fits.
    pub fn resource_summary(&self) -> v1::ResourceSummary {
        let summary = self.summary();
        v1::ResourceSummary {
            allocatable: Some(v1::ResourceQuantities {
                pods: i64::from(self.config.capacity),
                ..Default::default()
            }),
            allocated: Some(v1::ResourceQuantities {
                pods: summary.bound,
                ..Default::default()
            }),
            allocating: Some(v1::ResourceQuantities {
                pods: summary.pending,
                ..Default::default()
            }),
            allocatable_replicas: Some(self.allocatable_replicas()),
            allocatable_modelings: Vec::new(),
        }
    }

    /// The GetStats answer.
    pub fn stats(&self) -> v1::GetStatsResponse {
        let summary = self.summary();
        let (creates, injected) = {
            let st = self.lock();
            (st.creates, st.injected)
        };
        v1::GetStatsResponse {
            cluster_name: self.config.name.clone(),
            fault: self.fault().to_wire().into(),
            manifests: clamp_i32(i64::try_from(summary.manifests).unwrap_or(i64::MAX)),
            replicas: clamp_i32(summary.replicas),
            ready_replicas: clamp_i32(summary.ready),
            capacity: clamp_i32(i64::from(self.config.capacity)),
            pending_replicas: clamp_i32(summary.pending),
            creates,
            injected_errors: injected,
        }
    }

    fn status_of(&self, m: &Manifest, now: Instant) -> v1::ManifestStatus {
        let mut status = self.status_of_object(&self.object_of(m, now));
        status.manifest.clone_from(&m.manifest_text);
        status.applied_at = Some(timestamp(m.applied_at));
        status
    }

    /// What a status collector makes of an object (the same code as the control plane's).
    fn status_of_object(&self, object: &Value) -> v1::ManifestStatus {
        let _ = self;
        flotilla_member::status::manifest_status(object)
    }

    /// The object as the Kubernetes API returns it: the applied manifest with server-set
    /// metadata and the status the simulated controllers write.
    fn object_of(&self, m: &Manifest, now: Instant) -> Value {
        let mut object = m.manifest.clone();
        let Some(map) = object.as_object_mut() else {
            return object;
        };
        let meta = map
            .entry("metadata")
            .or_insert_with(|| Value::Object(serde_json::Map::new()));
        if let Some(meta) = meta.as_object_mut() {
            meta.insert("uid".into(), m.uid.clone().into());
            meta.insert(
                "resourceVersion".into(),
                m.resource_version.to_string().into(),
            );
            meta.insert("generation".into(), m.generation.into());
            meta.insert("creationTimestamp".into(), rfc3339(m.created_at).into());
            meta.insert(
                "managedFields".into(),
                serde_json::json!([{
                    "manager": m.manager,
                    "operation": "Apply",
                    "apiVersion": m.resource.api_version,
                    "time": rfc3339(m.applied_at),
                    "fieldsType": "FieldsV1",
                    "fieldsV1": {},
                }]),
            );
        }
        let status = self.simulated_status(m, now);
        if status.as_object().is_some_and(|s| !s.is_empty()) {
            map.insert("status".into(), status);
        }
        object
    }

    /// The status a kind's controller would write (IN-3 reads it back).
    fn simulated_status(&self, m: &Manifest, now: Instant) -> Value {
        use serde_json::json;
        let ready = i64::try_from(ready_pods(m, now, self.config.pod_startup_delay)).unwrap_or(0);
        if m.workload {
            return json!({
                "observedGeneration": m.generation,
                "replicas": m.replicas,
                "updatedReplicas": m.replicas,
                "readyReplicas": ready,
                "availableReplicas": ready,
                "unavailableReplicas": i64::from(m.replicas) - ready,
            });
        }
        let group = flotilla_core::resource::group(&m.resource.api_version);
        match (group, m.resource.kind.as_str()) {
            // one simulated node runs one copy
            ("apps", "DaemonSet") => json!({
                "observedGeneration": m.generation,
                "desiredNumberScheduled": 1, "currentNumberScheduled": 1,
                "updatedNumberScheduled": 1, "numberAvailable": 1, "numberReady": 1,
            }),
            ("batch", "Job") => json!({
                "succeeded": 1,
                "conditions": [{"type": "Complete", "status": "True"}],
            }),
            ("", "PersistentVolumeClaim") => json!({"phase": "Bound"}),
            // its kind is served from now on (discovery, lists, applies)
            ("apiextensions.k8s.io", "CustomResourceDefinition") => json!({
                "conditions": [{"type": "NamesAccepted", "status": "True"},
                               {"type": "Established", "status": "True"}],
            }),
            ("", "Pod") => json!({
                "phase": "Running",
                "conditions": [{"type": "Ready", "status": "True"}],
            }),
            ("", "Service")
                if m.manifest.pointer("/spec/type").and_then(Value::as_str)
                    == Some("LoadBalancer") =>
            {
                json!({"loadBalancer": {"ingress": [{"ip": "192.0.2.10"}]}})
            }
            _ => json!({}),
        }
    }

    /// The objects of `kind` in `api_version`, in `namespace` (`None`: every namespace), as
    /// the Kubernetes API returns them.
    pub fn objects(&self, api_version: &str, kind: &str, namespace: Option<&str>) -> Vec<Value> {
        let now = Instant::now();
        let selected = |m: &Manifest| {
            m.resource.api_version == api_version
                && m.resource.kind == kind
                && namespace.is_none_or(|ns| m.resource.namespace == ns)
        };
        let mut st = self.lock();
        let moved = st.settle(now, self.config.pod_startup_delay, selected);
        let objects = st
            .manifests
            .values()
            .filter(|m| selected(m))
            .map(|m| self.object_of(m, now))
            .collect();
        drop(st);
        if moved {
            self.changed();
        }
        objects
    }

    /// The node's CPU and memory when placement counts them (`--node-cpu` or
    /// `--node-memory` given; the other one defaults as [`Sim::nodes`] says).
    fn room(&self) -> Option<NodeRoom> {
        let (cpu, memory) = (self.config.node_cpu_millis, self.config.node_memory_bytes);
        if cpu.is_none() && memory.is_none() {
            return None;
        }
        let capacity = i64::from(self.config.capacity);
        Some(NodeRoom {
            cpu: cpu.unwrap_or(capacity.saturating_mul(1000)),
            memory: memory.unwrap_or(capacity.saturating_mul(1 << 30)),
        })
    }

    /// The simulated node: its allocatable pods are `--capacity`; its CPU and memory are
    /// `--node-cpu` and `--node-memory`, by default one CPU and 1 GiB per pod.
    pub fn nodes(&self) -> Vec<Value> {
        let capacity = self.config.capacity;
        let cpu = self.config.node_cpu_millis.map_or_else(
            || capacity.to_string(),
            |m| flotilla_core::quantity::format("cpu", m),
        );
        let memory = self.config.node_memory_bytes.map_or_else(
            || format!("{capacity}Gi"),
            |b| flotilla_core::quantity::format("memory", b),
        );
        let allocatable = serde_json::json!({
            "cpu": cpu,
            "memory": memory,
            "pods": capacity.to_string(),
        });
        vec![serde_json::json!({
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {"name": format!("{}-node-1", self.config.name), "resourceVersion": "1",
                         "labels": {"kubernetes.io/hostname": format!("{}-node-1", self.config.name)}},
            "status": {
                "capacity": allocatable.clone(),
                "allocatable": allocatable,
                "conditions": [{"type": "Ready", "status": "True"}],
            },
        })]
    }

    /// The simulated pods of every workload: `<name>-<n>`, Pending until they get a place on
    /// the node, Running and Ready after `--pod-startup-delay`.
    pub fn pods(&self, namespace: Option<&str>) -> Vec<Value> {
        let now = Instant::now();
        let delay = self.config.pod_startup_delay;
        let node = format!("{}-node-1", self.config.name);
        let selected = |m: &Manifest| namespace.is_none_or(|ns| m.resource.namespace == ns);
        let mut st = self.lock();
        // a pod's readiness and the version it is listed at move together (settled first)
        let moved = st.settle(now, delay, selected);
        let mut out = Vec::new();
        for m in st.manifests.values().filter(|m| selected(m)) {
            let containers = m
                .manifest
                .pointer("/spec/template/spec/containers")
                .cloned()
                .unwrap_or_else(|| serde_json::json!([]));
            for (i, pod) in m.pods.iter().enumerate() {
                let ready = pod.bound_at.is_some_and(|t| t + delay <= now);
                let (phase, node_name) = match pod.bound_at {
                    None => ("Pending", ""),
                    Some(_) => ("Running", node.as_str()),
                };
                out.push(serde_json::json!({
                    "apiVersion": "v1",
                    "kind": "Pod",
                    "metadata": {"name": format!("{}-{i}", m.resource.name),
                                 "namespace": m.resource.namespace,
                                 "uid": format!("{}-{i}", m.uid),
                                 "resourceVersion": m.resource_version.to_string()},
                    "spec": {"nodeName": node_name, "containers": containers},
                    "status": {"phase": phase,
                               "conditions": [{"type": "Ready",
                                               "status": if ready { "True" } else { "False" }}]},
                }));
            }
        }
        drop(st);
        if moved {
            self.changed();
        }
        out
    }
}

/// `t` as Kubernetes writes times (RFC 3339, seconds, UTC).
fn rfc3339(t: SystemTime) -> String {
    let ts = timestamp(t);
    let ts = prost_types::Timestamp {
        seconds: ts.seconds,
        nanos: 0,
    };
    ts.to_string()
}

/// [`State::settle`] for one object: a workload whose ready pods changed since its last write
/// is written again (the write counter `writes` moves).
fn settle_one(m: &mut Manifest, writes: &mut u64, now: Instant, delay: Duration) -> bool {
    if !m.workload {
        return false;
    }
    let ready = ready_pods(m, now, delay);
    if ready == m.reported_ready {
        return false;
    }
    *writes += 1;
    m.resource_version = *writes;
    m.reported_ready = ready;
    true
}

fn ready_pods(m: &Manifest, now: Instant, delay: Duration) -> usize {
    m.pods
        .iter()
        .filter(|p| p.bound_at.is_some_and(|t| t + delay <= now))
        .count()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sim(capacity: u32) -> Sim {
        Sim::new(SimConfig {
            name: "m1".into(),
            capacity,
            pod_startup_delay: Duration::from_secs(2),
            fault: Fault::Healthy,
            node_cpu_millis: None,
            node_memory_bytes: None,
        })
    }

    fn deployment(name: &str, replicas: i32) -> ApplySpec {
        let m = format!(
            r#"{{"apiVersion":"apps/v1","kind":"Deployment","metadata":{{"name":"{name}","namespace":"default"}},"spec":{{"replicas":{replicas}}}}}"#
        );
        parse_apply(&m, None, None).unwrap()
    }

    fn key(kind: &str, name: &str) -> ResourceKey {
        ResourceKey {
            namespace: "default".into(),
            kind: kind.into(),
            name: name.into(),
        }
    }

    #[test]
    fn parse_apply_reads_identity_and_replicas() {
        let s = deployment("web", 3);
        assert_eq!(s.resource.kind, "Deployment");
        assert_eq!(s.resource.namespace, "default");
        assert_eq!(s.resource.api_version, "apps/v1");
        assert_eq!((s.replicas, s.workload), (3, true));

        // (manifest, revised replicas, replicas written into the manifest)
        let written = [
            // Deployment without spec.replicas: Kubernetes' default of 1, written back.
            (
                r#"{"apiVersion":"apps/v1","kind":"Deployment","metadata":{"name":"a"}}"#,
                None,
                1,
            ),
            // explicit replicas win and are revised into the manifest
            (
                r#"{"kind":"Deployment","metadata":{"name":"a"},"spec":{"replicas":9}}"#,
                Some(4),
                4,
            ),
        ];
        for (manifest, revised, want) in written {
            let s = parse_apply(manifest, None, revised).unwrap();
            assert_eq!(s.replicas, want, "{manifest}");
            assert_eq!(s.manifest["spec"]["replicas"], want, "{manifest}");
        }

        // a ConfigMap is not a workload
        let s = parse_apply(
            r#"{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"c"}}"#,
            None,
            None,
        )
        .unwrap();
        assert_eq!((s.replicas, s.workload), (0, false));
        assert!(s.manifest.get("spec").is_none());
    }

    #[test]
    fn parse_apply_names_the_bad_field() {
        let cases = [
            ("", None, None, "manifest"),
            ("[1]", None, None, "manifest"),
            ("{not json", None, None, "manifest"),
            (r#"{"metadata":{"name":"a"}}"#, None, None, "manifest.kind"),
            (
                r#"{"kind":"Deployment"}"#,
                None,
                None,
                "manifest.metadata.name",
            ),
            (
                r#"{"kind":"Deployment","metadata":{"name":"a"},"spec":{"replicas":-1}}"#,
                None,
                None,
                "manifest.spec.replicas",
            ),
            (
                r#"{"kind":"Deployment","metadata":{"name":"a"},"spec":{"replicas":"x"}}"#,
                None,
                None,
                "manifest.spec.replicas",
            ),
            (
                r#"{"kind":"Deployment","metadata":{"name":"a"}}"#,
                None,
                Some(-2),
                "replicas",
            ),
            (
                "{}",
                Some(v1::ObjectReference {
                    kind: "Deployment".into(),
                    ..Default::default()
                }),
                None,
                "resource.name",
            ),
            (
                "{}",
                Some(v1::ObjectReference {
                    name: "x".into(),
                    ..Default::default()
                }),
                None,
                "resource.kind",
            ),
        ];
        for (manifest, resource, replicas, field) in cases {
            let err = parse_apply(manifest, resource, replicas).unwrap_err();
            assert_eq!(err.field, field, "{manifest}: {err}");
        }
    }

    #[tokio::test(start_paused = true)]
    async fn pods_turn_ready_after_the_startup_delay() {
        let s = sim(100);
        let (created, st) = s.apply(deployment("web", 3));
        assert!(created);
        assert_eq!((st.replicas, st.ready_replicas), (3, 0));
        assert_eq!(st.health, v1::ResourceHealth::Unhealthy as i32);
        assert_eq!(
            s.next_ready_at(),
            Some(Instant::now() + Duration::from_secs(2))
        );
        tokio::time::advance(Duration::from_millis(1999)).await;
        assert_eq!(s.get(&key("Deployment", "web")).unwrap().ready_replicas, 0);
        tokio::time::advance(Duration::from_millis(1)).await;
        let st = s.get(&key("Deployment", "web")).unwrap();
        assert_eq!(st.ready_replicas, 3);
        assert_eq!(st.health, v1::ResourceHealth::Healthy as i32);
        let json: Value = serde_json::from_str(&st.status).unwrap();
        assert_eq!(json["readyReplicas"], 3);
        assert_eq!(s.next_ready_at(), None);
    }

    #[tokio::test(start_paused = true)]
    async fn pods_and_identity_show_the_version_their_readiness_moved_to() {
        let s = sim(100);
        s.apply(deployment("web", 1));
        s.apply(deployment("api", 1));
        let version = |name: &str| -> u64 {
            s.identity(&key("Deployment", name))
                .unwrap()
                .1
                .parse()
                .unwrap()
        };
        let (web, api) = (version("web"), version("api"));
        tokio::time::advance(Duration::from_secs(2)).await;
        // nothing has read the objects since their pods turned Ready: the first look settles
        let pods = s.pods(None);
        let listed = |name: &str| -> u64 {
            let pod = pods
                .iter()
                .find(|p| p["metadata"]["name"] == format!("{name}-0"))
                .unwrap();
            assert_eq!(pod["status"]["conditions"][0]["status"], "True");
            pod["metadata"]["resourceVersion"]
                .as_str()
                .unwrap()
                .parse()
                .unwrap()
        };
        assert!(
            listed("web") > web,
            "a Ready pod is listed at a newer version"
        );
        assert!(listed("api") > api);
        let s2 = sim(100);
        s2.apply(deployment("web", 1));
        let before: u64 = s2
            .identity(&key("Deployment", "web"))
            .unwrap()
            .1
            .parse()
            .unwrap();
        tokio::time::advance(Duration::from_secs(2)).await;
        let after: u64 = s2
            .identity(&key("Deployment", "web"))
            .unwrap()
            .1
            .parse()
            .unwrap();
        assert!(
            after > before,
            "a precondition is checked against the moved version"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn capacity_bounds_pods_across_manifests() {
        let s = sim(5);
        s.apply(deployment("a", 3));
        let (_, b) = s.apply(deployment("b", 4));
        tokio::time::advance(Duration::from_secs(2)).await;
        let sum = s.summary();
        assert_eq!((sum.replicas, sum.ready, sum.pending), (7, 5, 2));
        assert_eq!(b.replicas, 4);
        let b = s.get(&key("Deployment", "b")).unwrap();
        assert_eq!(b.ready_replicas, 2, "b gets what is left after a");
        assert_eq!(b.health, v1::ResourceHealth::Unhealthy as i32);
        assert_eq!(s.allocatable_replicas(), 0);

        // deleting a frees places: b's pending pods start now, Ready after the delay
        assert!(s.delete(&key("Deployment", "a")));
        assert_eq!(s.get(&key("Deployment", "b")).unwrap().ready_replicas, 2);
        tokio::time::advance(Duration::from_secs(2)).await;
        let b = s.get(&key("Deployment", "b")).unwrap();
        assert_eq!(b.ready_replicas, 4);
        assert_eq!(b.health, v1::ResourceHealth::Healthy as i32);
        assert_eq!(s.allocatable_replicas(), 1);
    }

    /// `--node-cpu`: a pod is placed only where its CPU request fits, as kube-scheduler's
    /// resource fit; what does not fit stays Pending, smaller pods still get places, and
    /// the node lists the CPU it was given.
    #[tokio::test(start_paused = true)]
    async fn node_cpu_bounds_pods_by_their_requests() {
        let s = Sim::new(SimConfig {
            node_cpu_millis: Some(4000),
            ..sim(100).config().clone()
        });
        let requesting = |name: &str, replicas: i32, cpu: &str| {
            let m = format!(
                r#"{{"apiVersion":"apps/v1","kind":"Deployment","metadata":{{"name":"{name}","namespace":"default"}},"spec":{{"replicas":{replicas},"template":{{"spec":{{"containers":[{{"name":"c","resources":{{"requests":{{"cpu":"{cpu}"}}}}}}]}}}}}}}}"#
            );
            parse_apply(&m, None, None).unwrap()
        };
        s.apply(requesting("big", 6, "1"));
        s.apply(requesting("small", 3, "500m"));
        s.apply(deployment("free", 2));
        tokio::time::advance(Duration::from_secs(2)).await;
        let ready = |name: &str| s.get(&key("Deployment", name)).unwrap().ready_replicas;
        assert_eq!(
            (ready("big"), ready("small"), ready("free")),
            (4, 0, 2),
            "4 CPUs hold 4 of big; small finds none left; free requests nothing"
        );
        assert_eq!(s.summary().pending, 5);
        assert_eq!(s.nodes()[0]["status"]["allocatable"]["cpu"], "4");
        // scaling big down frees CPU for small
        s.apply(requesting("big", 2, "1"));
        tokio::time::advance(Duration::from_secs(2)).await;
        assert_eq!((ready("big"), ready("small")), (2, 3));
    }

    #[tokio::test(start_paused = true)]
    async fn reapply_scales_up_and_down() {
        let s = sim(100);
        s.apply(deployment("web", 2));
        tokio::time::advance(Duration::from_secs(2)).await;
        let (created, st) = s.apply(deployment("web", 5));
        assert!(!created);
        assert_eq!((st.replicas, st.ready_replicas), (5, 2));
        let json: Value = serde_json::from_str(&st.status).unwrap();
        assert_eq!(json["observedGeneration"], 2);
        tokio::time::advance(Duration::from_secs(1)).await;
        // scale down removes the starting pods first: the 2 Ready ones stay
        let (_, st) = s.apply(deployment("web", 2));
        assert_eq!((st.replicas, st.ready_replicas), (2, 2));
        assert_eq!(st.health, v1::ResourceHealth::Healthy as i32);
        let (_, st) = s.apply(deployment("web", 0));
        assert_eq!((st.replicas, st.ready_replicas), (0, 0));
        assert_eq!(st.health, v1::ResourceHealth::Healthy as i32);
        assert_eq!(s.summary().bound, 0);
        // the same apply again does not bump the generation
        let (_, st) = s.apply(deployment("web", 0));
        let json: Value = serde_json::from_str(&st.status).unwrap();
        assert_eq!(json["observedGeneration"], 4);
    }

    #[test]
    fn non_workloads_are_healthy_once_applied_and_lookups_by_name() {
        let s = sim(1);
        let cm = parse_apply(
            r#"{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"web","namespace":"default"}}"#,
            None,
            None,
        )
        .unwrap();
        s.apply(cm);
        let st = s.get(&key("ConfigMap", "web")).unwrap();
        assert_eq!(st.health, v1::ResourceHealth::Healthy as i32);
        assert_eq!(st.status, "{}");
        // an empty kind finds the only object of that name
        assert!(s.get(&key("", "web")).is_ok());
        s.apply(deployment("web", 1));
        assert!(matches!(
            s.get(&key("", "web")),
            Err(LookupError::Ambiguous { count: 2, .. })
        ));
        assert!(matches!(
            s.get(&key("Secret", "web")),
            Err(LookupError::NotFound(_))
        ));
        // an empty kind deletes both
        assert!(s.delete(&key("", "web")));
        assert!(s.list().is_empty());
        assert!(!s.delete(&key("", "web")));
    }

    #[tokio::test]
    async fn fault_changes_are_observable() {
        let s = sim(1);
        assert_eq!(s.probe(), (true, 200, "ok"));
        let changes = s.subscribe_changes();
        assert_eq!(s.set_fault(Fault::Unhealthy), Fault::Healthy);
        assert!(changes.has_changed().unwrap());
        assert_eq!(s.probe().1, 500);
        s.set_fault(Fault::Unreachable);
        let waiting = tokio::time::timeout(Duration::from_millis(20), s.wait_reachable()).await;
        assert!(waiting.is_err(), "unreachable: waits");
        s.set_fault(Fault::Healthy);
        tokio::time::timeout(Duration::from_secs(1), s.wait_reachable())
            .await
            .unwrap();
        assert_eq!(Fault::from_wire(3), Some(Fault::Unreachable));
        assert_eq!(Fault::from_wire(0), None);
        assert_eq!(Fault::from_wire(42), None);
    }
}
