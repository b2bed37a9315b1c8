//! Test support: an in-process fake member Kubernetes API server (discovery, server-side
//! apply, delete, labelled lists), object builders, a running executor on a store, and
//! `eventually`.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, dead_code)]

use std::collections::BTreeMap;
use std::future::Future;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::body::Bytes;
use axum::extract::State;
use axum::http::{Method, StatusCode};
use axum::response::{IntoResponse, Response};
use flotilla_proto::v1;
use flotilla_proto::v1::work_executor_client::WorkExecutorClient;
use flotilla_runtime::cas::Races;
use flotilla_runtime::{Readiness, Shutdown};
use flotilla_store::StoreRef;
use flotilla_store::typed::{Stored, Typed};
use flotilla_work_executor::{Config, WorkExecutor};
use serde_json::{Value, json};
use tokio_stream::wrappers::TcpListenerStream;

// === fake member ===

/// One object on the fake member.
#[derive(Clone, Debug)]
pub struct Manifest {
    pub resource: v1::ObjectReference,
    pub manifest: String,
    pub replicas: i32,
}

#[derive(Default)]
pub struct MemberState {
    pub manifests: BTreeMap<(String, String, String), Manifest>,
    /// Pods turn Ready (ready == desired) only while this is true.
    pub pods_ready: bool,
    /// Every call hangs (an unreachable member accepts but never answers).
    pub hang: bool,
    pub applies: Vec<Manifest>,
    pub deletes: Vec<v1::ObjectReference>,
    /// Lists of applied objects (status collection).
    pub status_calls: usize,
    /// Per object: (manifest hash, pods ready, generation, resourceVersion) as last served.
    pub versions: Versions,
    /// The last resourceVersion handed out (one counter for all objects, like etcd's).
    pub revision: u64,
    /// While set, lists answer these objects (as they were when [`FakeMember::freeze_lists`]
    /// took them): a lagging list, served from a cache behind the applies.
    pub frozen_list: Option<Vec<Value>>,
}

/// Per object: (manifest hash, pods ready, generation, resourceVersion) as last served.
pub type Versions = BTreeMap<(String, String, String), (u64, bool, i64, u64)>;

/// The generation and resourceVersion of `m` served with `ready`, as a real API server moves
/// them: the generation with every change of the spec (here: the manifest), the
/// resourceVersion, from one rising counter, with every change at all (the pods' readiness
/// included). Status collection skips objects whose resourceVersion it has already read, and
/// takes no reading older than an apply's answer (WE-7.1).
fn version_of(
    versions: &mut Versions,
    revision: &mut u64,
    m: &Manifest,
    ready: bool,
) -> (i64, u64) {
    use std::hash::{Hash, Hasher};
    let mut h = std::collections::hash_map::DefaultHasher::new();
    (&m.manifest, m.replicas).hash(&mut h);
    let hash = h.finish();
    let entry = versions.entry(id(&m.resource)).or_insert_with(|| {
        *revision += 1;
        (hash, ready, 1, *revision)
    });
    if entry.0 != hash {
        *revision += 1;
        *entry = (hash, ready, entry.2 + 1, *revision);
    } else if entry.1 != ready {
        *revision += 1;
        entry.1 = ready;
        entry.3 = *revision;
    }
    (entry.2, entry.3)
}

/// A scriptable in-process member API server.
#[derive(Clone, Default)]
pub struct FakeMember {
    pub state: Arc<Mutex<MemberState>>,
}

fn id(r: &v1::ObjectReference) -> (String, String, String) {
    (r.namespace.clone(), r.kind.clone(), r.name.clone())
}

/// The resources the fake serves: (group version, plural, kind, namespaced).
const RESOURCES: &[(&str, &str, &str, bool)] = &[
    ("apps/v1", "deployments", "Deployment", true),
    ("apps/v1", "statefulsets", "StatefulSet", true),
    ("apps/v1", "daemonsets", "DaemonSet", true),
    ("batch/v1", "jobs", "Job", true),
    ("v1", "configmaps", "ConfigMap", true),
    ("v1", "secrets", "Secret", true),
    ("v1", "services", "Service", true),
    ("v1", "serviceaccounts", "ServiceAccount", true),
    (
        "v1",
        "persistentvolumeclaims",
        "PersistentVolumeClaim",
        true,
    ),
    ("v1", "namespaces", "Namespace", false),
    (
        "rbac.authorization.k8s.io/v1",
        "clusterroles",
        "ClusterRole",
        false,
    ),
];

fn json_answer(code: StatusCode, v: &Value) -> Response {
    (code, [("content-type", "application/json")], v.to_string()).into_response()
}

fn failure(code: StatusCode, reason: &str) -> Response {
    json_answer(
        code,
        &json!({"kind": "Status", "apiVersion": "v1", "status": "Failure", "reason": reason,
                "message": reason, "code": code.as_u16()}),
    )
}

impl FakeMember {
    /// Serves on 127.0.0.1:0; returns the member and its `http://` endpoint.
    pub async fn start() -> (Self, String) {
        let member = Self::default();
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr: SocketAddr = listener.local_addr().unwrap();
        let app = axum::Router::new()
            .fallback(Self::handle)
            .with_state(member.clone());
        tokio::spawn(async move {
            axum::serve(listener, app).await.unwrap();
        });
        (member, format!("http://{addr}"))
    }

    pub fn with<T>(&self, f: impl FnOnce(&mut MemberState) -> T) -> T {
        f(&mut self.state.lock().unwrap())
    }

    /// Replicas of the manifest named `name` (any namespace/kind), if present.
    pub fn replicas(&self, name: &str) -> Option<i32> {
        self.with(|s| {
            s.manifests
                .values()
                .find(|m| m.resource.name == name)
                .map(|m| m.replicas)
        })
    }

    /// From now on lists answer the objects as they are now, whatever is applied later,
    /// until [`FakeMember::thaw_lists`].
    pub fn freeze_lists(&self) {
        self.with(|s| {
            let MemberState {
                manifests,
                versions,
                revision,
                pods_ready,
                ..
            } = s;
            let objects = manifests
                .values()
                .map(|m| {
                    let v = version_of(versions, revision, m, *pods_ready);
                    Self::object_of(m, *pods_ready, v)
                })
                .collect();
            s.frozen_list = Some(objects);
        });
    }

    /// Lists answer the current objects again.
    pub fn thaw_lists(&self) {
        self.with(|s| s.frozen_list = None);
    }

    pub fn applies(&self) -> usize {
        self.with(|s| s.applies.len())
    }

    pub fn deletes(&self) -> usize {
        self.with(|s| s.deletes.len())
    }

    /// The object as an API server returns it, with a Deployment-like status (its
    /// controller observes every generation at once).
    fn object_of(m: &Manifest, ready: bool, (generation, revision): (i64, u64)) -> Value {
        let mut object: Value = serde_json::from_str(&m.manifest).unwrap_or(json!({}));
        let ready_replicas = if ready { m.replicas } else { 0 };
        object["metadata"]["generation"] = json!(generation);
        object["metadata"]["resourceVersion"] = json!(revision.to_string());
        if m.resource.kind == "Deployment" {
            object["status"] = json!({"observedGeneration": generation, "replicas": m.replicas,
                "updatedReplicas": m.replicas, "readyReplicas": ready_replicas,
                "availableReplicas": ready_replicas});
        }
        object
    }

    async fn handle(
        State(me): State<FakeMember>,
        method: Method,
        uri: axum::http::Uri,
        body: Bytes,
    ) -> Response {
        if me.with(|s| s.hang) {
            std::future::pending::<()>().await;
        }
        let path = uri.path().trim_matches('/').to_owned();
        let segments: Vec<&str> = path.split('/').collect();
        let (gv, rest) = match segments.as_slice() {
            ["api", "v1", rest @ ..] => ("v1".to_owned(), rest.to_vec()),
            ["apis", g, v, rest @ ..] => (format!("{g}/{v}"), rest.to_vec()),
            _ => return failure(StatusCode::NOT_FOUND, "NotFound"),
        };
        if rest.is_empty() {
            let resources: Vec<Value> = RESOURCES
                .iter()
                .filter(|(g, ..)| *g == gv)
                .map(|(_, plural, kind, namespaced)| {
                    json!({"name": plural, "singularName": "", "namespaced": namespaced,
                           "kind": kind, "verbs": ["get", "list", "patch", "delete"]})
                })
                .collect();
            if resources.is_empty() {
                return failure(StatusCode::NOT_FOUND, "NotFound");
            }
            return json_answer(
                StatusCode::OK,
                &json!({"kind": "APIResourceList", "groupVersion": gv, "resources": resources}),
            );
        }
        let (namespace, plural, name) = match rest.as_slice() {
            ["namespaces", ns, plural] => (*ns, *plural, None),
            ["namespaces", ns, plural, name] => (*ns, *plural, Some(*name)),
            [plural] => ("", *plural, None),
            [plural, name] => ("", *plural, Some(*name)),
            _ => return failure(StatusCode::NOT_FOUND, "NotFound"),
        };
        let Some(kind) = RESOURCES
            .iter()
            .find(|(g, p, ..)| *g == gv && *p == plural)
            .map(|(_, _, k, _)| *k)
        else {
            return failure(StatusCode::NOT_FOUND, "NotFound");
        };
        let resource = v1::ObjectReference {
            api_version: gv.clone(),
            kind: kind.into(),
            namespace: namespace.into(),
            name: name.unwrap_or_default().into(),
            uid: String::new(),
        };
        match (method, name) {
            (Method::PATCH, Some(_)) => {
                let manifest = String::from_utf8_lossy(&body).into_owned();
                let replicas = serde_json::from_str::<Value>(&manifest)
                    .ok()
                    .and_then(|v| v.pointer("/spec/replicas").and_then(Value::as_i64))
                    .map_or(0, |n| i32::try_from(n).unwrap());
                let m = Manifest {
                    resource: resource.clone(),
                    manifest,
                    replicas,
                };
                let object = me.with(|s| {
                    s.applies.push(m.clone());
                    s.manifests.insert(id(&resource), m.clone());
                    let v = version_of(&mut s.versions, &mut s.revision, &m, s.pods_ready);
                    Self::object_of(&m, s.pods_ready, v)
                });
                json_answer(StatusCode::OK, &object)
            }
            (Method::DELETE, Some(_)) => {
                let deleted = me.with(|s| {
                    s.deletes.push(resource.clone());
                    s.versions.remove(&id(&resource));
                    s.manifests.remove(&id(&resource)).is_some()
                });
                if deleted {
                    json_answer(
                        StatusCode::OK,
                        &json!({"kind": "Status", "status": "Success"}),
                    )
                } else {
                    failure(StatusCode::NOT_FOUND, "NotFound")
                }
            }
            (Method::GET, Some(_)) => me
                .with(|s| {
                    let m = s.manifests.get(&id(&resource))?.clone();
                    let v = version_of(&mut s.versions, &mut s.revision, &m, s.pods_ready);
                    Some(Self::object_of(&m, s.pods_ready, v))
                })
                .map_or_else(
                    || failure(StatusCode::NOT_FOUND, "NotFound"),
                    |o| json_answer(StatusCode::OK, &o),
                ),
            (Method::GET, None) => {
                let items: Vec<Value> = me.with(|s| {
                    s.status_calls += 1;
                    if let Some(frozen) = &s.frozen_list {
                        return frozen
                            .iter()
                            .filter(|o| o["kind"] == kind && o["apiVersion"] == gv.as_str())
                            .cloned()
                            .collect();
                    }
                    let MemberState {
                        manifests,
                        versions,
                        revision,
                        pods_ready,
                        ..
                    } = s;
                    manifests
                        .values()
                        .filter(|m| m.resource.kind == kind && m.resource.api_version == gv)
                        .map(|m| {
                            let v = version_of(versions, revision, m, *pods_ready);
                            Self::object_of(m, *pods_ready, v)
                        })
                        .collect()
                });
                json_answer(
                    StatusCode::OK,
                    &json!({"kind": format!("{kind}List"), "apiVersion": gv,
                            "metadata": {"resourceVersion": "1"}, "items": items}),
                )
            }
            _ => failure(StatusCode::METHOD_NOT_ALLOWED, "MethodNotAllowed"),
        }
    }
}

// === objects ===

pub const NS: &str = "default";

pub fn ready_condition(ready: bool) -> v1::Condition {
    v1::Condition {
        r#type: "Ready".into(),
        status: if ready {
            v1::ConditionStatus::True as i32
        } else {
            v1::ConditionStatus::False as i32
        },
        reason: if ready {
            "ClusterReady"
        } else {
            "ClusterNotReady"
        }
        .into(),
        message: String::new(),
        last_transition_time: None,
    }
}

pub fn cluster(name: &str, endpoint: &str, ready: bool, mode: v1::SyncMode) -> v1::Cluster {
    v1::Cluster {
        status: Some(v1::ClusterStatus {
            conditions: vec![ready_condition(ready)],
            ..Default::default()
        }),
        ..flotilla_runtime::testing::bindings::member_cluster(name, mode, endpoint)
    }
}

pub fn workload(name: &str, replicas: i32) -> v1::Workload {
    v1::Workload {
        metadata: Some(v1::ObjectMeta {
            name: name.into(),
            namespace: NS.into(),
            uid: format!("{name}-uid"),
            ..Default::default()
        }),
        api_version: "apps/v1".into(),
        kind: "Deployment".into(),
        manifest: format!(
            r#"{{"apiVersion":"apps/v1","kind":"Deployment","metadata":{{"name":"{name}","namespace":"{NS}"}},"spec":{{"replicas":{replicas},"template":{{"spec":{{"containers":[{{"name":"c","image":"nginx"}}]}}}}}}}}"#
        ),
        replicas,
        replica_requirements: None,
        status: String::new(),
    }
}

pub fn task(cluster: &str, mode: v1::PurgeMode) -> v1::GracefulEvictionTask {
    v1::GracefulEvictionTask {
        from_cluster: cluster.into(),
        purge_mode: mode as i32,
        reason: "TaintUntolerated".into(),
        producer: "TaintManager".into(),
        ..Default::default()
    }
}

pub fn binding(workload: &str, clusters: &[(&str, i32)]) -> v1::ResourceBinding {
    v1::ResourceBinding {
        metadata: Some(v1::ObjectMeta {
            name: format!("{workload}-deployment"),
            namespace: NS.into(),
            ..Default::default()
        }),
        spec: Some(v1::ResourceBindingSpec {
            resource: Some(v1::ObjectReference {
                api_version: "apps/v1".into(),
                kind: "Deployment".into(),
                namespace: NS.into(),
                name: workload.into(),
                uid: format!("{workload}-uid"),
            }),
            replicas: clusters.iter().map(|(_, r)| r).sum(),
            clusters: targets(clusters),
            ..Default::default()
        }),
        status: None,
    }
}

pub fn targets(clusters: &[(&str, i32)]) -> Vec<v1::TargetCluster> {
    clusters
        .iter()
        .map(|(n, r)| v1::TargetCluster {
            name: (*n).into(),
            replicas: *r,
        })
        .collect()
}

pub fn binding_key(workload: &str) -> String {
    format!("bindings/{NS}/{workload}-deployment")
}

pub fn work_key(cluster: &str, workload: &str) -> String {
    flotilla_store::typed::work_key(
        cluster,
        NS,
        &flotilla_core::work::work_name(NS, workload, "Deployment"),
    )
}

/// Read-modify-write with a CAS, retried on conflict as the services retry theirs
/// ([`flotilla_runtime::cas::Races`]).
pub async fn modify<R: Stored>(typed: &Typed, key: &str, f: impl Fn(&mut R)) -> R {
    let mut races = Races::new(key);
    loop {
        let old: R = typed.get(key).await.unwrap().expect("object exists");
        let mut new = old.clone();
        f(&mut new);
        match typed.update(&old, new).await {
            Ok(r) => return r,
            Err(e) if e.is_conflict() => {
                races.lost().unwrap_or_else(|e| panic!("update {key}: {e}"))
            }
            Err(e) => panic!("update {key}: {e}"),
        }
    }
}

/// Moves the nginx binding onto `clusters` with a graceful-eviction task off `from` (what the
/// taint-manager and the scheduler do together).
pub async fn evict(typed: &Typed, clusters: &[(&str, i32)], from: &str, mode: v1::PurgeMode) {
    modify::<v1::ResourceBinding>(typed, &binding_key("nginx"), |b| {
        let spec = b.spec.as_mut().unwrap();
        spec.clusters = targets(clusters);
        spec.graceful_eviction_tasks = vec![task(from, mode)];
    })
    .await;
}

pub async fn set_ready(typed: &Typed, name: &str, ready: bool) -> v1::Cluster {
    modify::<v1::Cluster>(typed, &format!("clusters/{name}"), |c| {
        c.status.get_or_insert_with(Default::default).conditions = vec![ready_condition(ready)];
    })
    .await
}

// === executor ===

pub fn test_config() -> Config {
    Config {
        status_sync_period: Duration::from_millis(100),
        member_timeout: Duration::from_millis(300),
        member_concurrency: 16,
        binding_workers: 4,
        work_workers: 8,
        not_ready_recheck: Duration::from_millis(100),
        // These tests pin other rules against a fake member whose status the test writes;
        // make before break (WE-10) is covered by the plan's tests and the scenarios.
        replica_move_timeout: Duration::ZERO,
        identity: "test".into(),
        lease_ttl: Duration::from_secs(3),
        grpc_timeout: Duration::from_secs(5),
        security: Default::default(),
        shards: 0,
    }
}

/// A work executor on `store`, serving gRPC on 127.0.0.1:0.
pub struct Running {
    pub store: StoreRef,
    pub typed: Typed,
    pub shutdown: Shutdown,
    pub executor: WorkExecutor,
    pub addr: SocketAddr,
}

impl Running {
    pub async fn start(store: StoreRef) -> Self {
        Self::start_with(store, test_config()).await
    }

    pub async fn start_with(store: StoreRef, config: Config) -> Self {
        // the executor's decisions, shown with a failing test's output
        let _ = tracing_subscriber::fmt()
            .with_env_filter("flotilla=debug,info")
            .with_test_writer()
            .try_init();
        let shutdown = Shutdown::new();
        let readiness = Readiness::new();
        let executor = WorkExecutor::start(
            store.clone(),
            config,
            &readiness,
            &shutdown,
            flotilla_runtime::Clock::system(),
        );
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let server = executor.server();
        let stop = shutdown.clone();
        tokio::spawn(async move {
            tonic::transport::Server::builder()
                .add_service(server)
                .serve_with_incoming_shutdown(TcpListenerStream::new(listener), stop.triggered())
                .await
                .unwrap();
        });
        readiness.wait_ready().await;
        Self {
            typed: Typed::new(store.clone()),
            store,
            shutdown,
            executor,
            addr,
        }
    }

    /// Sets cluster `name`'s Ready condition and waits until the executor's cluster cache
    /// holds that version: its next decisions see the change. (Without the wait, a Work
    /// reconciled in between still sees the cluster as it was; under load a test once saw
    /// member1's Work deleted on a member it had just made NotReady.)
    pub async fn set_ready(&self, name: &str, ready: bool) {
        let written = set_ready(&self.typed, name, ready).await;
        let key = format!("clusters/{name}");
        let clusters = &self.executor.context().clusters;
        until(&format!("the executor sees {name} Ready={ready}"), || {
            clusters.get(&key).is_some_and(|c| {
                flotilla_proto::Resource::resource_version(&*c)
                    >= flotilla_proto::Resource::resource_version(&written)
            })
        })
        .await;
    }

    pub async fn client(&self) -> WorkExecutorClient<tonic::transport::Channel> {
        WorkExecutorClient::connect(format!("http://{}", self.addr))
            .await
            .unwrap()
    }

    pub async fn work(&self, key: &str) -> Option<v1::Work> {
        self.typed.get(key).await.unwrap()
    }

    pub async fn binding(&self, key: &str) -> v1::ResourceBinding {
        self.typed.get(key).await.unwrap().expect("binding exists")
    }

    /// Creates the Ready `clusters` (name, endpoint, sync mode), the nginx template (3
    /// replicas) and its binding onto `targets`.
    pub async fn seed_nginx(
        &self,
        clusters: &[(&str, &str, v1::SyncMode)],
        targets: &[(&str, i32)],
    ) {
        for (name, endpoint, mode) in clusters {
            self.typed
                .create(cluster(name, endpoint, true, *mode), None)
                .await
                .unwrap();
        }
        self.typed.create(workload("nginx", 3), None).await.unwrap();
        self.typed
            .create(binding("nginx", targets), None)
            .await
            .unwrap();
    }

    /// Moves the nginx binding onto `clusters` (what the scheduler does).
    pub async fn retarget(&self, clusters: &[(&str, i32)]) {
        modify::<v1::ResourceBinding>(&self.typed, &binding_key("nginx"), |b| {
            b.spec.as_mut().unwrap().clusters = targets(clusters);
        })
        .await;
    }

    /// Waits until the nginx Work on `cluster` is marked deleting, then checks that it is still
    /// there `hold_ms` milliseconds later (`why`: what keeps it).
    pub async fn deleting_but_kept(&self, cluster: &str, hold_ms: u64, why: &str) {
        let key = work_key(cluster, "nginx");
        eventually(
            &format!("{cluster}'s Work marked deleting"),
            WAIT,
            || async {
                let w = self.work(&key).await?;
                w.metadata
                    .as_ref()?
                    .deletion_timestamp
                    .is_some()
                    .then_some(())
            },
        )
        .await;
        tokio::time::sleep(Duration::from_millis(hold_ms)).await;
        assert!(self.work(&key).await.is_some(), "{why}");
    }

    /// Waits until the nginx Work on `cluster` is gone from the store.
    pub async fn until_work_gone(&self, what: &str, cluster: &str) {
        let key = work_key(cluster, "nginx");
        eventually(what, WAIT, || async {
            self.work(&key).await.is_none().then_some(())
        })
        .await;
    }

    /// Evicts member1 with a `mode` task while the scheduler gives member2 all 3 replicas.
    pub async fn evict_member1(&self, mode: v1::PurgeMode) {
        evict(&self.typed, &[("member2", 3)], "member1", mode).await;
    }

    /// Waits until the nginx binding aggregates two items, both Healthy; returns the binding.
    pub async fn until_healthy(&self, what: &str) -> v1::ResourceBinding {
        eventually(what, WAIT, || async {
            let b = self.binding(&binding_key("nginx")).await;
            let items = &b.status.as_ref()?.aggregated_status;
            (items.len() == 2
                && items
                    .iter()
                    .all(|i| i.health == v1::ResourceHealth::Healthy as i32))
            .then_some(b)
        })
        .await
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        self.shutdown.trigger();
    }
}

/// [`flotilla_runtime::testing::eventually`], naming what is awaited first.
pub async fn eventually<T, Fut>(what: &str, timeout: Duration, f: impl FnMut() -> Fut) -> T
where
    Fut: Future<Output = Option<T>>,
{
    flotilla_runtime::testing::eventually(timeout, what, f).await
}

pub const WAIT: Duration = Duration::from_secs(10);

/// Waits (up to [`WAIT`]) until `cond` holds.
pub async fn until(what: &str, cond: impl Fn() -> bool) {
    eventually(what, WAIT, || async { cond().then_some(()) }).await;
}

/// `spec.replicas` of a Work's manifest.
pub fn manifest_replicas(work: &v1::Work) -> i64 {
    let spec = work.spec.as_ref().unwrap();
    let m: serde_json::Value = serde_json::from_str(&spec.manifest).unwrap();
    m["spec"]["replicas"].as_i64().unwrap()
}

pub fn applied(work: &v1::Work) -> bool {
    flotilla_work_executor::render::applied_current(work)
}
