//! In-process tests over real sockets on 127.0.0.1:0: the MemberSim RPCs, the HTTP probes,
//! faults, and the Pull agent against small fake servers.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use clap::Parser;
use flotilla_proto::v1;
use flotilla_proto::v1::member_sim_client::MemberSimClient;
use flotilla_runtime::Shutdown;
use flotilla_runtime::testing::{assert_help_names, rejected_flags};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinHandle;
use tonic::Code;
use tonic::transport::Channel;

use super::*;

// === helpers ===

/// Polls `check` until it holds or `within` passes.
async fn eventually<Fut>(within: Duration, what: &str, mut check: impl FnMut() -> Fut)
where
    Fut: Future<Output = bool>,
{
    flotilla_runtime::testing::eventually(within, what, || {
        let holds = check();
        async move { holds.await.then_some(()) }
    })
    .await;
}

struct Running {
    sim: Arc<Sim>,
    addr: SocketAddr,
    control: SocketAddr,
    shutdown: Shutdown,
    task: JoinHandle<Result<(), Error>>,
}

impl Running {
    async fn start(capacity: u32, delay: Duration) -> Self {
        let sim = Arc::new(Sim::new(SimConfig {
            name: "m1".into(),
            capacity,
            pod_startup_delay: delay,
            fault: Fault::Healthy,
            node_cpu_millis: None,
            node_memory_bytes: None,
        }));
        let listen = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let control = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listen.local_addr().unwrap();
        let control_addr = control.local_addr().unwrap();
        let shutdown = Shutdown::new();
        let task = tokio::spawn(run_with(
            sim.clone(),
            Listeners {
                listen,
                control: Some(control),
            },
            shutdown.clone(),
        ));
        Self {
            sim,
            addr,
            control: control_addr,
            shutdown,
            task,
        }
    }

    /// [`Running::start`] and a member client of its Kubernetes API.
    async fn start_with_kube(capacity: u32, delay: Duration) -> (Self, flotilla_member::Member) {
        let r = Self::start(capacity, delay).await;
        let k = kube(r.addr);
        (r, k)
    }

    /// A gRPC channel to the main address.
    async fn channel(&self) -> Channel {
        Channel::from_shared(format!("http://{}", self.addr))
            .unwrap()
            .connect()
            .await
            .unwrap()
    }

    async fn client(&self) -> MemberSimClient<Channel> {
        MemberSimClient::new(self.channel().await)
    }

    async fn control_client(&self) -> MemberSimClient<Channel> {
        MemberSimClient::connect(format!("http://{}", self.control))
            .await
            .unwrap()
    }

    async fn stop(self) {
        self.shutdown.trigger();
        tokio::time::timeout(Duration::from_secs(5), self.task)
            .await
            .expect("stops on shutdown")
            .unwrap()
            .unwrap();
    }
}

/// A plain HTTP/1.1 GET: (status, body).
async fn http_get(addr: SocketAddr, path: &str) -> std::io::Result<(u16, String)> {
    let mut s = TcpStream::connect(addr).await?;
    s.write_all(
        format!("GET {path} HTTP/1.1\r\nHost: sim\r\nConnection: close\r\n\r\n").as_bytes(),
    )
    .await?;
    let mut buf = Vec::new();
    s.read_to_end(&mut buf).await?;
    let text = String::from_utf8_lossy(&buf).into_owned();
    let code = text
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    let body = text
        .split_once("\r\n\r\n")
        .map(|(_, b)| b.to_owned())
        .unwrap_or_default();
    Ok((code, body))
}

fn deployment(name: &str, replicas: i32) -> serde_json::Value {
    serde_json::json!({"apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": name, "namespace": "default",
                     "labels": {"resourcebinding.karmada.io/permanent-id": "p1"}},
        "spec": {"replicas": replicas}})
}

fn deployment_ref(name: &str) -> flotilla_member::ObjectRef {
    flotilla_member::ObjectRef {
        api_version: "apps/v1".into(),
        kind: "Deployment".into(),
        namespace: "default".into(),
        name: name.into(),
    }
}

/// A Kubernetes client of the member (the control plane's own client).
fn kube(addr: SocketAddr) -> flotilla_member::Member {
    flotilla_member::Member::new(
        &flotilla_member::Target::plain(format!("http://{addr}")),
        Duration::from_secs(2),
        Arc::new(tokio::sync::Semaphore::new(8)),
    )
    .unwrap()
}

/// One Deployment's status as the control plane reads it.
async fn manifest(k: &flotilla_member::Member, name: &str) -> v1::ManifestStatus {
    let object = k.get(&deployment_ref(name)).await.unwrap().expect("exists");
    flotilla_member::status::manifest_status(&object)
}

/// SetFault `mode` with no API errors.
fn fault(mode: v1::FaultMode) -> v1::SetFaultRequest {
    v1::SetFaultRequest {
        mode: mode as i32,
        api_errors: None,
        watch_delay_ms: 0,
    }
}

/// Keeps the member Healthy but injects the API errors `set` sets (F11).
async fn inject(
    c: &mut MemberSimClient<Channel>,
    set: impl FnOnce(&mut v1::ApiErrors),
) -> Result<tonic::Response<v1::SetFaultResponse>, tonic::Status> {
    let mut errors = v1::ApiErrors::default();
    set(&mut errors);
    c.set_fault(v1::SetFaultRequest {
        api_errors: Some(errors),
        ..fault(v1::FaultMode::Healthy)
    })
    .await
}

async fn stats(c: &mut MemberSimClient<Channel>) -> v1::GetStatsResponse {
    c.get_stats(v1::GetStatsRequest {})
        .await
        .unwrap()
        .into_inner()
}

// === the Kubernetes API and the control service ===

/// Reads watch lines from `GET path` until `n` events came or `within` passed.
async fn watch_lines(
    addr: SocketAddr,
    path: &str,
    n: usize,
    within: Duration,
) -> Vec<serde_json::Value> {
    let mut s = TcpStream::connect(addr).await.unwrap();
    s.write_all(format!("GET {path} HTTP/1.1\r\nHost: sim\r\n\r\n").as_bytes())
        .await
        .unwrap();
    let mut buf = Vec::new();
    let mut events = Vec::new();
    let deadline = tokio::time::Instant::now() + within;
    while events.len() < n {
        let mut chunk = [0u8; 8192];
        let read = tokio::time::timeout_at(deadline, s.read(&mut chunk)).await;
        let Ok(Ok(k)) = read else { break };
        if k == 0 {
            break;
        }
        buf.extend_from_slice(&chunk[..k]);
        // chunked transfer encoding: the JSON lines are inside; pick them out
        let text = String::from_utf8_lossy(&buf).into_owned();
        events = text
            .lines()
            .filter(|l| l.starts_with("{\"type\""))
            .filter_map(|l| serde_json::from_str(l).ok())
            .collect();
    }
    events
}

#[tokio::test]
async fn a_custom_resource_definition_makes_its_kind_served() {
    let (r, k) = Running::start_with_kube(10, Duration::from_millis(10)).await;
    let widget = serde_json::json!({"apiVersion": "example.io/v1", "kind": "Widget",
        "metadata": {"name": "w1", "namespace": "default",
                     "labels": {"resourcebinding.karmada.io/permanent-id": "p9"}},
        "spec": {"size": 3}});
    let err = k.apply(&widget).await.unwrap_err();
    assert!(
        matches!(err, flotilla_member::MemberError::UnknownKind { .. }),
        "{err}"
    );
    let crd = serde_json::json!({
        "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": "widgets.example.io"},
        "spec": {"group": "example.io", "scope": "Namespaced",
                 "names": {"plural": "widgets", "singular": "widget", "kind": "Widget"},
                 "versions": [{"name": "v1", "served": true, "storage": true}]}});
    let applied = k.apply(&crd).await.unwrap();
    assert_eq!(applied["status"]["conditions"][1]["type"], "Established");
    let other = kube(r.addr); // a fresh discovery cache (the first one retries after 5 s)
    other.apply(&widget).await.unwrap();
    let listed = other.list_managed("example.io/v1", "Widget").await.unwrap();
    assert_eq!(listed.len(), 1);
    assert_eq!(listed[0]["spec"]["size"], 3);
    let groups = other.api_enablements().await.unwrap();
    assert!(
        groups.iter().any(|e| e.group_version == "example.io/v1"
            && e.resources.iter().any(|r| r.kind == "Widget")),
        "{groups:?}"
    );
    r.stop().await;
}

#[tokio::test]
async fn watch_streams_adds_status_changes_and_deletes() {
    let (r, k) = Running::start_with_kube(10, Duration::from_millis(300)).await;
    k.apply(&deployment("a", 1)).await.unwrap();
    let addr = r.addr;
    let watching = tokio::spawn(async move {
        watch_lines(
            addr,
            "/apis/apps/v1/deployments?watch=true&timeoutSeconds=10&labelSelector=resourcebinding.karmada.io%2Fpermanent-id",
            5,
            Duration::from_secs(8),
        )
        .await
    });
    tokio::time::sleep(Duration::from_millis(100)).await;
    k.apply(&deployment("b", 1)).await.unwrap();
    // the pods turn Ready after 300 ms: MODIFIED with readyReplicas 1, without any write
    tokio::time::sleep(Duration::from_millis(500)).await;
    k.delete(&deployment_ref("b")).await.unwrap();
    let events = watching.await.unwrap();
    let seen: Vec<(String, String)> = events
        .iter()
        .map(|e| {
            (
                e["type"].as_str().unwrap_or_default().to_owned(),
                e["object"]["metadata"]["name"]
                    .as_str()
                    .unwrap_or_default()
                    .to_owned(),
            )
        })
        .collect();
    assert_eq!(seen[0], ("ADDED".into(), "a".into()), "{seen:?}");
    assert_eq!(seen[1], ("ADDED".into(), "b".into()), "{seen:?}");
    assert!(
        events.iter().any(|e| e["type"] == "MODIFIED"
            && e["object"]["metadata"]["name"] == "a"
            && e["object"]["status"]["readyReplicas"] == 1),
        "a status change is an event: {seen:?}"
    );
    assert_eq!(
        seen.last(),
        Some(&("DELETED".into(), "b".into())),
        "{seen:?}"
    );
    r.stop().await;
}

#[tokio::test]
async fn apply_then_pods_turn_ready_after_the_startup_delay() {
    let delay = Duration::from_millis(300);
    let (r, k) = Running::start_with_kube(100, delay).await;
    let started = tokio::time::Instant::now();
    let object = k.apply(&deployment("web", 3)).await.unwrap();
    assert_eq!(object["metadata"]["generation"], 1);
    let stored = r.sim.objects("apps/v1", "Deployment", Some("default"));
    assert_eq!(
        stored[0]["metadata"]["managedFields"][0]["manager"],
        "flotilla"
    );
    assert!(
        object["metadata"]["uid"]
            .as_str()
            .is_some_and(|u| !u.is_empty())
    );
    let st = flotilla_member::status::manifest_status(&object);
    assert_eq!((st.replicas, st.ready_replicas), (3, 0));
    assert_eq!(st.health, v1::ResourceHealth::Unhealthy as i32);

    eventually(Duration::from_secs(5), "3 pods Ready", || {
        let k = &k;
        async move { manifest(k, "web").await.ready_replicas == 3 }
    })
    .await;
    assert!(
        started.elapsed() >= delay,
        "Ready only after --pod-startup-delay"
    );
    let st = manifest(&k, "web").await;
    assert_eq!(st.health, v1::ResourceHealth::Healthy as i32);
    let json: serde_json::Value = serde_json::from_str(&st.status).unwrap();
    assert_eq!(json["readyReplicas"], 3);
    // the pods turning Ready is a status write, as on a real API server: the object's
    // resourceVersion moved, and it stays put while nothing changes (status collection
    // parses only the objects whose resourceVersion moved)
    let listed = k
        .list_managed_lazily("apps/v1", "Deployment")
        .await
        .unwrap();
    let ready_version = listed[0].resource_version().to_owned();
    assert_ne!(
        Some(ready_version.as_str()),
        object["metadata"]["resourceVersion"].as_str()
    );
    let listed = k
        .list_managed_lazily("apps/v1", "Deployment")
        .await
        .unwrap();
    assert_eq!(listed[0].resource_version(), ready_version);
    assert_eq!(listed[0].value().unwrap()["status"]["readyReplicas"], 3);

    // re-apply with more replicas: a new generation; the new pods start again
    let object = k.apply(&deployment("web", 5)).await.unwrap();
    assert_eq!(object["metadata"]["generation"], 2);
    let st = flotilla_member::status::manifest_status(&object);
    assert_eq!((st.replicas, st.ready_replicas), (5, 3));
    assert_eq!(st.health, v1::ResourceHealth::Unhealthy as i32);
    // the same intent again changes nothing
    let again = k.apply(&deployment("web", 5)).await.unwrap();
    assert_eq!(
        again["metadata"]["resourceVersion"],
        object["metadata"]["resourceVersion"]
    );

    assert!(k.delete(&deployment_ref("web")).await.unwrap());
    assert!(k.get(&deployment_ref("web")).await.unwrap().is_none());
    assert!(
        !k.delete(&deployment_ref("web")).await.unwrap(),
        "already gone"
    );
    r.stop().await;
}

#[tokio::test]
async fn capacity_bounds_pods_and_nodes_and_pods_tell_the_capacity() {
    let (r, k) = Running::start_with_kube(4, Duration::from_millis(100)).await;
    let mut c = r.client().await;
    k.apply(&deployment("a", 3)).await.unwrap();
    k.apply(&deployment("b", 3)).await.unwrap();
    k.apply(&serde_json::json!({"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "cfg", "namespace": "default"}}))
        .await
        .unwrap();
    let s = stats(&mut c).await;
    assert_eq!(s.cluster_name, "m1");
    assert_eq!(s.fault, v1::FaultMode::Healthy as i32);
    assert_eq!(s.capacity, 4);
    assert_eq!((s.manifests, s.replicas, s.pending_replicas), (3, 6, 2));
    let summary = k.resource_summary(&[]).await.unwrap();
    assert_eq!(
        summary.allocatable_replicas,
        Some(0),
        "capacity − every pod"
    );
    assert_eq!(summary.allocatable.unwrap().pods, 4);
    assert_eq!(
        summary.allocated.unwrap().pods,
        4,
        "4 pods bound to the node"
    );
    assert!(k.version().await.unwrap().starts_with("v1.33."));
    let enablements = k.api_enablements().await.unwrap();
    let kinds = |gv: &str| -> Vec<String> {
        enablements
            .iter()
            .filter(|e| e.group_version == gv)
            .flat_map(|e| e.resources.iter().map(|r| r.kind.clone()))
            .collect()
    };
    assert!(kinds("apps/v1").contains(&"Deployment".to_owned()));
    assert!(kinds("v1").contains(&"ConfigMap".to_owned()));
    assert!(kinds("v1").contains(&"Service".to_owned()));
    let managed = k.list_managed("apps/v1", "Deployment").await.unwrap();
    let names: Vec<&str> = managed
        .iter()
        .filter_map(|o| o["metadata"]["name"].as_str())
        .collect();
    assert_eq!(names, ["a", "b"]);
    let cfg = k
        .get(&flotilla_member::ObjectRef {
            api_version: "v1".into(),
            kind: "ConfigMap".into(),
            namespace: "default".into(),
            name: "cfg".into(),
        })
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        flotilla_member::status::manifest_status(&cfg).health,
        v1::ResourceHealth::Healthy as i32,
        "kinds without a health rule are Healthy once applied"
    );
    assert!(
        k.list_managed("v1", "ConfigMap").await.unwrap().is_empty(),
        "not labelled as Flotilla's"
    );

    // a was applied first: it gets its 3 places, b only 1
    eventually(Duration::from_secs(5), "4 pods Ready", || {
        let mut c = c.clone();
        async move { stats(&mut c).await.ready_replicas == 4 }
    })
    .await;
    assert_eq!(manifest(&k, "a").await.ready_replicas, 3);
    let b = manifest(&k, "b").await;
    assert_eq!(b.ready_replicas, 1);
    assert_eq!(b.health, v1::ResourceHealth::Unhealthy as i32);

    // scale a down: b's pending pods get the places
    k.apply(&deployment("a", 1)).await.unwrap();
    eventually(Duration::from_secs(5), "b fully Ready", || {
        let k = &k;
        async move { manifest(k, "b").await.ready_replicas == 3 }
    })
    .await;
    let s = stats(&mut c).await;
    assert_eq!(
        (s.replicas, s.ready_replicas, s.pending_replicas),
        (4, 4, 0)
    );
    r.stop().await;
}

#[tokio::test]
async fn server_side_apply_needs_a_manager_and_another_manager_conflicts_unless_forced() {
    let (r, k) = Running::start_with_kube(4, Duration::from_millis(10)).await;
    k.apply(&deployment("web", 1)).await.unwrap();
    // another manager without force: 409; with force it takes the object over
    let url = format!(
        "http://{}/apis/apps/v1/namespaces/default/deployments/web?fieldManager=kubectl",
        r.addr
    );
    let body = deployment("web", 2).to_string();
    let patch = |url: String, ct: &'static str| {
        let body = body.clone();
        async move {
            let mut s = TcpStream::connect(url.split('/').nth(2).unwrap())
                .await
                .unwrap();
            let path = &url[url.find("/apis").unwrap()..];
            s.write_all(
                format!(
                    "PATCH {path} HTTP/1.1\r\nHost: sim\r\nContent-Type: {ct}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                    body.len()
                )
                .as_bytes(),
            )
            .await
            .unwrap();
            let mut buf = Vec::new();
            s.read_to_end(&mut buf).await.unwrap();
            let text = String::from_utf8_lossy(&buf).into_owned();
            text.split_whitespace()
                .nth(1)
                .and_then(|c| c.parse::<u16>().ok())
                .unwrap_or(0)
        }
    };
    assert_eq!(
        patch(url.clone(), "application/apply-patch+yaml").await,
        409
    );
    assert_eq!(
        manifest(&k, "web").await.replicas,
        1,
        "the conflict changed nothing"
    );
    assert_eq!(
        patch(format!("{url}&force=true"), "application/apply-patch+yaml").await,
        200
    );
    assert_eq!(manifest(&k, "web").await.replicas, 2);
    let no_manager = url.replace("?fieldManager=kubectl", "");
    assert_eq!(patch(no_manager, "application/apply-patch+yaml").await, 400);
    assert_eq!(patch(url, "application/merge-patch+json").await, 415);
    // Flotilla forces: the control plane's intent wins back
    k.apply(&deployment("web", 1)).await.unwrap();
    assert_eq!(manifest(&k, "web").await.replicas, 1);
    r.stop().await;
}

#[tokio::test]
async fn readyz_answers_500_when_unhealthy_while_the_api_still_answers() {
    let r = Running::start(10, Duration::from_millis(50)).await;
    assert_eq!(
        http_get(r.addr, "/readyz").await.unwrap(),
        (200, "ok".into())
    );
    assert_eq!(
        http_get(r.addr, "/healthz").await.unwrap(),
        (200, "ok".into())
    );
    assert_eq!(http_get(r.addr, "/nope").await.unwrap().0, 404);

    let mut c = r.client().await;
    let prev = c
        .set_fault(fault(v1::FaultMode::Unhealthy))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(prev.previous, v1::FaultMode::Healthy as i32);
    let (code, body) = http_get(r.addr, "/readyz").await.unwrap();
    assert_eq!(code, 500, "{body}");
    assert_eq!(http_get(r.addr, "/healthz").await.unwrap().0, 500);
    // reachable but not ok: the API still works
    let k = kube(r.addr);
    assert_eq!(k.get_raw("/readyz").await.unwrap().0, 500);
    k.apply(&deployment("x", 1)).await.unwrap();
    assert_eq!(stats(&mut c).await.fault, v1::FaultMode::Unhealthy as i32);

    c.set_fault(fault(v1::FaultMode::Healthy)).await.unwrap();
    assert_eq!(http_get(r.addr, "/readyz").await.unwrap().0, 200);
    r.stop().await;
}

#[tokio::test]
async fn unreachable_hangs_everything_but_set_fault_until_healed() {
    let r = Running::start(10, Duration::from_millis(50)).await;
    let mut c = r.client().await;
    c.set_fault(fault(v1::FaultMode::Unreachable))
        .await
        .unwrap();
    assert_eq!(r.sim.fault(), Fault::Unreachable);

    let short = Duration::from_millis(300);
    assert!(
        tokio::time::timeout(short, http_get(r.addr, "/readyz"))
            .await
            .is_err(),
        "HTTP hangs"
    );
    assert!(
        tokio::time::timeout(short, http_get(r.addr, "/apis/apps/v1/deployments"))
            .await
            .is_err(),
        "the Kubernetes API hangs"
    );
    assert!(
        tokio::time::timeout(short, c.get_stats(v1::GetStatsRequest {}))
            .await
            .is_err(),
        "gRPC hangs"
    );
    // the control address ignores faults and shows it
    let mut control = r.control_client().await;
    assert_eq!(
        stats(&mut control).await.fault,
        v1::FaultMode::Unreachable as i32
    );
    assert_eq!(http_get(r.control, "/readyz").await.unwrap().0, 500);

    // a probe started now answers once healed
    let pending = tokio::spawn(http_get(r.addr, "/readyz"));
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert!(!pending.is_finished());
    let prev = c
        .set_fault(fault(v1::FaultMode::Healthy))
        .await
        .expect("SetFault answers while unreachable")
        .into_inner();
    assert_eq!(prev.previous, v1::FaultMode::Unreachable as i32);
    let answered = tokio::time::timeout(Duration::from_secs(5), pending)
        .await
        .expect("the hanging probe answers once healed")
        .unwrap()
        .unwrap();
    assert_eq!(answered, (200, "ok".into()));
    assert!(c.get_stats(v1::GetStatsRequest {}).await.is_ok());
    r.stop().await;
}

#[tokio::test]
async fn bad_requests_are_refused_and_change_nothing() {
    let r = Running::start(10, Duration::from_millis(50)).await;
    let mut c = r.client().await;
    let k = kube(r.addr);
    let err = k
        .apply(
            &serde_json::json!({"apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "a", "namespace": "default"}, "spec": {"replicas": -1}}),
        )
        .await
        .unwrap_err();
    assert_eq!(err.code(), Some(422), "{err}");
    assert!(err.to_string().contains("replicas"), "{err}");
    let err = k
        .apply(
            &serde_json::json!({"apiVersion": "example.io/v1", "kind": "Widget",
            "metadata": {"name": "w", "namespace": "default"}}),
        )
        .await
        .unwrap_err();
    assert!(
        matches!(err, flotilla_member::MemberError::UnknownKind { .. }),
        "{err}"
    );
    let err = c
        .set_fault(v1::SetFaultRequest {
            mode: 0,
            api_errors: None,
            watch_delay_ms: 0,
        })
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::InvalidArgument);
    assert!(err.message().starts_with("mode"), "{}", err.message());
    assert_eq!(
        http_get(
            r.addr,
            "/apis/apps/v1/deployments?labelSelector=a%20in%20(b)"
        )
        .await
        .unwrap()
        .0,
        400
    );
    // nothing was applied by the bad requests
    assert_eq!(stats(&mut c).await.manifests, 0);
    r.stop().await;
}

#[tokio::test]
async fn grpc_health_serves_on_the_same_address() {
    use tonic_health::pb::health_check_response::ServingStatus;
    use tonic_health::pb::health_client::HealthClient;
    let r = Running::start(1, Duration::from_millis(10)).await;
    let mut h = HealthClient::new(r.channel().await);
    for service in ["", "flotilla.v1.MemberSim"] {
        let resp = h
            .check(tonic_health::pb::HealthCheckRequest {
                service: service.into(),
            })
            .await
            .unwrap()
            .into_inner();
        assert_eq!(resp.status, ServingStatus::Serving as i32, "{service:?}");
    }
    r.stop().await;
}

#[tokio::test]
async fn reflection_lists_the_services() {
    use tonic_reflection::pb::v1::ServerReflectionRequest;
    use tonic_reflection::pb::v1::server_reflection_client::ServerReflectionClient;
    use tonic_reflection::pb::v1::server_reflection_request::MessageRequest;
    use tonic_reflection::pb::v1::server_reflection_response::MessageResponse;
    let r = Running::start(1, Duration::from_millis(10)).await;
    let mut client = ServerReflectionClient::new(r.channel().await);
    let request = ServerReflectionRequest {
        host: String::new(),
        message_request: Some(MessageRequest::ListServices(String::new())),
    };
    let mut stream = client
        .server_reflection_info(tokio_stream::iter(vec![request]))
        .await
        .unwrap()
        .into_inner();
    let resp = stream.message().await.unwrap().unwrap();
    let Some(MessageResponse::ListServicesResponse(list)) = resp.message_response else {
        panic!("unexpected reflection answer: {resp:?}");
    };
    let names: Vec<String> = list.service.into_iter().map(|s| s.name).collect();
    for want in ["flotilla.v1.MemberSim", "grpc.health.v1.Health"] {
        assert!(names.iter().any(|n| n == want), "{want} in {names:?}");
    }
    r.stop().await;
}

// === flags ===

#[test]
fn flags_defaults_and_validation() {
    let a = Args::try_parse_from(["member-sim"]).unwrap();
    let c = a.validate().unwrap();
    assert_eq!(c.sim.capacity, 100);
    assert_eq!(c.sim.pod_startup_delay, Duration::from_secs(2));
    assert_eq!(c.sim.fault, Fault::Healthy);
    assert_eq!(c.listen.port(), 6443);

    let a = Args::try_parse_from([
        "member-sim",
        "--cluster",
        "edge",
        "--pod-startup-delay",
        "200ms",
        "--fault",
        "unreachable",
    ])
    .unwrap();
    let c = a.validate().unwrap();
    assert_eq!(c.sim.name, "edge");
    assert_eq!(c.sim.pod_startup_delay, Duration::from_millis(200));
    assert_eq!(c.sim.fault, Fault::Unreachable);
    let a = Args::try_parse_from(["member-sim", "--name", " "]).unwrap();
    assert_eq!(rejected_flags(a.validate()), vec!["name"]);

    assert_help_names::<Args>(&[
        "--listen",
        "--control-listen",
        "--capacity",
        "--pod-startup-delay",
        "--fault",
    ]);
}

/// F11: injected API errors on the Kubernetes API — a failing apply changes nothing, a
/// lost reply applies but fails, conflicts are 409, bad percentages are refused, reads fail
/// too, and creates are counted once.
#[tokio::test]
async fn f11_api_errors_fail_calls_as_told_and_creates_are_counted() {
    let r = Running::start(10, Duration::from_millis(50)).await;
    let mut c = r.client().await;
    let k = kube(r.addr);
    // discover before the errors start (discovery is a read)
    k.resource_for("apps/v1", "Deployment").await.unwrap();
    let refused = inject(&mut c, |e| e.apply_error_percent = 101)
        .await
        .unwrap_err();
    assert_eq!(refused.code(), tonic::Code::InvalidArgument, "{refused}");

    inject(&mut c, |e| e.apply_error_percent = 100)
        .await
        .unwrap();
    let e = k.apply(&deployment("web", 1)).await.unwrap_err();
    assert_eq!(e.code(), Some(500), "{e}");
    let s = stats(&mut c).await;
    assert_eq!(
        (s.manifests, s.creates, s.injected_errors),
        (0, 0, 1),
        "nothing applied"
    );

    inject(&mut c, |e| e.apply_conflict_percent = 100)
        .await
        .unwrap();
    let e = k.apply(&deployment("web", 1)).await.unwrap_err();
    assert_eq!(e.code(), Some(409), "{e}");

    inject(&mut c, |e| e.apply_lost_reply_percent = 100)
        .await
        .unwrap();
    assert_eq!(
        k.apply(&deployment("web", 1)).await.unwrap_err().code(),
        Some(500)
    );
    assert_eq!(
        k.apply(&deployment("web", 2)).await.unwrap_err().code(),
        Some(500)
    );
    let s = stats(&mut c).await;
    assert_eq!(
        (s.manifests, s.replicas, s.creates),
        (1, 2, 1),
        "both applies took effect; the object was created once"
    );

    inject(&mut c, |e| {
        e.delete_error_percent = 100;
        e.status_error_percent = 100;
    })
    .await
    .unwrap();
    assert_eq!(
        k.delete(&deployment_ref("web")).await.unwrap_err().code(),
        Some(500)
    );
    assert_eq!(
        k.get(&deployment_ref("web")).await.unwrap_err().code(),
        Some(500)
    );
    // lists are how the work-executor reads every object's status: they fail too (F8's
    // "status missing" replacement relies on it)
    assert_eq!(
        k.list_managed("apps/v1", "Deployment")
            .await
            .unwrap_err()
            .code(),
        Some(500)
    );
    // healing clears the errors
    c.set_fault(fault(v1::FaultMode::Healthy)).await.unwrap();
    assert_eq!(
        stats(&mut c).await.manifests,
        1,
        "the failed delete deleted nothing"
    );
    r.stop().await;
}

/// SetFault's watch delay (WE-7.1's scenarios): a watch event reaches its client that much
/// after the change while a get answers at once; a delay past 60 s is refused, and a refused
/// SetFault changes nothing.
#[tokio::test]
async fn a_watch_delay_holds_the_events_and_not_the_reads() {
    let r = Running::start(10, Duration::from_millis(50)).await;
    let mut c = r.client().await;
    let k = kube(r.addr);
    let refused = c
        .set_fault(v1::SetFaultRequest {
            watch_delay_ms: 60_001,
            ..fault(v1::FaultMode::Unhealthy)
        })
        .await
        .unwrap_err();
    assert_eq!(refused.code(), tonic::Code::InvalidArgument, "{refused}");
    assert!(refused.message().starts_with("watch_delay_ms"), "{refused}");
    assert_eq!(r.sim.watch_delay(), Duration::ZERO);
    assert_eq!(r.sim.probe().1, 200, "the refused call set no fault either");

    c.set_fault(v1::SetFaultRequest {
        watch_delay_ms: 800,
        ..fault(v1::FaultMode::Healthy)
    })
    .await
    .unwrap();
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    let _watch = k.watch_managed("apps/v1", "Deployment", tx).await.unwrap();
    let first = tokio::time::timeout(Duration::from_secs(5), rx.recv()).await;
    assert_eq!(first.unwrap(), Some(None), "the first list");
    let applied_at = tokio::time::Instant::now();
    k.apply(&deployment("web", 1)).await.unwrap();
    assert!(
        k.get(&deployment_ref("web")).await.unwrap().is_some(),
        "a get answers at once"
    );
    let event = tokio::time::timeout(Duration::from_secs(5), rx.recv())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(event, Some(deployment_ref("web")));
    let late = applied_at.elapsed();
    assert!(
        late >= Duration::from_millis(750),
        "the event came after {late:?}"
    );
}

/// A watch from a list's `resourceVersion` gets what changed after that version, as a real
/// API server sends it: a change between the list and the watch is not lost (member-sim used
/// to send only what changed after the watch began, so a client's cache could miss an apply
/// made in between until its next re-list).
#[tokio::test]
async fn a_watch_from_a_resource_version_sends_the_changes_since() {
    // pods never start: no status change moves "before" meanwhile
    let r = Running::start(10, Duration::from_secs(3600)).await;
    let k = kube(r.addr);
    k.apply(&deployment("before", 1)).await.unwrap();
    let (code, list) = http_get(r.addr, "/apis/apps/v1/deployments").await.unwrap();
    assert_eq!(code, 200, "{list}");
    let list: serde_json::Value = serde_json::from_str(&list).unwrap();
    let rv = list["metadata"]["resourceVersion"]
        .as_str()
        .unwrap()
        .to_owned();
    k.apply(&deployment("between", 1)).await.unwrap();
    let (code, events) = http_get(
        r.addr,
        &format!("/apis/apps/v1/deployments?watch=1&resourceVersion={rv}&timeoutSeconds=1"),
    )
    .await
    .unwrap();
    assert_eq!(code, 200, "{events}");
    assert!(events.contains("\"name\":\"between\""), "{events}");
    assert!(
        !events.contains("\"name\":\"before\""),
        "the client has what it listed: {events}"
    );
}
