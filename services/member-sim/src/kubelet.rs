//! Node mode (`--kube-apiserver`): member-sim drives a REAL Kubernetes API server instead of
//! serving a simulated one, as kwok does. It plays the parts a cluster without a container
//! runtime lacks:
//!
//! ```text
//!   kube-apiserver ◄── nodes: registers `<cluster>-node-<i>` (capacity: cpu, memory, pods
//!        ▲   ▲              from --capacity), renews their Leases and Ready heartbeats
//!        │   └──── kubelet: pods bound to those nodes go Running and Ready after
//!        │                  --pod-startup-delay (Job pods Succeeded); a deleting pod is
//!        │                  finalised at once (grace period 0), as a kubelet confirms it
//!        │                  (binding is kube-scheduler's, or ours with --bind-pods)
//!   --listen: a TCP proxy to the API server, where the faults apply: `unreachable` holds
//!             every byte until healed (a network partition, not a refusal)
//!   --control-listen: flotilla.v1.MemberSim (SetFault, GetStats) and /readyz, faults ignored
//! ```
//!
//! `unhealthy` turns the nodes NotReady (a Ready=False condition, and their Leases are no
//! longer renewed); the API server itself stays ready, so cluster-health's `/readyz` probe
//! still passes through the proxy. docs/real-kubernetes.md lists what differs from the
//! simulated server.
//!
//! The Deployments', ReplicaSets', StatefulSets' and Jobs' own status is written by the real
//! kube-controller-manager from these pods, so Flotilla's health interpretation reads what a
//! real cluster reports.

use std::collections::{BTreeMap, HashSet};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use flotilla_runtime::Shutdown;
use futures::StreamExt;
use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::api::core::v1::{
    Binding, ContainerState, ContainerStateRunning, ContainerStateTerminated, ContainerStatus,
    Node, NodeCondition, NodeSpec, NodeStatus, NodeSystemInfo, ObjectReference, Pod, PodCondition,
    PodStatus,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta, Time};
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use kube::runtime::watcher;
use tokio::net::{TcpListener, TcpStream};

use crate::sim::{Fault, Sim};

/// How often node Leases and Ready heartbeats are renewed (a kubelet's default is 10 s).
pub const HEARTBEAT: Duration = Duration::from_secs(10);
/// A node Lease's duration (a kubelet's default is 40 s).
const LEASE_SECONDS: i32 = 40;
/// The field manager of the node agent's writes.
const MANAGER: &str = "flotilla-member-sim";

/// What the node agent needs to know.
#[derive(Clone, Debug)]
pub struct KubeletConfig {
    /// The member cluster's name (node names are `<name>-node-<i>`).
    pub cluster: String,
    /// How many nodes to register.
    pub nodes: u32,
    /// Pods the nodes take in all (`--capacity`), split evenly.
    pub capacity: u32,
    /// Each node's allocatable CPU (`--node-cpu`, a quantity).
    pub node_cpu: String,
    /// Each node's allocatable memory (`--node-memory`, a quantity).
    pub node_memory: String,
    /// From bound to Running and Ready.
    pub pod_startup_delay: Duration,
    /// Bind unscheduled pods ourselves (no kube-scheduler runs).
    pub bind_pods: bool,
}

impl KubeletConfig {
    /// The nodes' names.
    pub fn node_names(&self) -> Vec<String> {
        (1..=self.nodes.max(1))
            .map(|i| format!("{}-node-{i}", self.cluster))
            .collect()
    }

    fn pods_per_node(&self) -> u32 {
        self.capacity.div_ceil(self.nodes.max(1))
    }
}

fn now() -> Time {
    Time(Timestamp::now())
}

/// Runs the node agent against `client` until `shutdown`: registers the nodes, keeps them
/// alive (or NotReady while `sim`'s fault is `unhealthy`) and plays kubelet for their pods.
pub async fn run(client: kube::Client, config: KubeletConfig, sim: Arc<Sim>, shutdown: Shutdown) {
    let nodes = config.node_names();
    tracing::info!(cluster = %config.cluster, nodes = ?nodes, pods_per_node = config.pods_per_node(), bind_pods = config.bind_pods, "node agent starting");
    let heartbeats = heartbeat_loop(client.clone(), config.clone(), sim, shutdown.clone());
    let pods = pod_loop(client, config, shutdown);
    tokio::join!(heartbeats, pods);
}

/// The node object as registered (status included: a Node's status may be set on create,
/// as a kubelet registers itself).
fn node_object(config: &KubeletConfig, name: &str, ready: bool) -> Node {
    let labels = [
        ("kubernetes.io/hostname", name),
        ("kubernetes.io/os", "linux"),
        ("kubernetes.io/arch", "amd64"),
        ("type", "flotilla-member-sim"),
        ("flotilla.io/cluster", config.cluster.as_str()),
    ];
    Node {
        metadata: ObjectMeta {
            name: Some(name.to_owned()),
            labels: Some(
                labels
                    .into_iter()
                    .map(|(k, v)| (k.to_owned(), v.to_owned()))
                    .collect(),
            ),
            ..ObjectMeta::default()
        },
        spec: Some(NodeSpec::default()),
        status: Some(node_status(config, ready)),
    }
}

fn node_status(config: &KubeletConfig, ready: bool) -> NodeStatus {
    let at = now();
    let (status, reason, message) = if ready {
        (
            "True",
            "KubeletReady",
            "member-sim's node agent is posting ready status",
        )
    } else {
        (
            "False",
            "KubeletNotReady",
            "simulated fault: the node is not ready",
        )
    };
    let resources: BTreeMap<String, Quantity> = [
        ("cpu", config.node_cpu.clone()),
        ("memory", config.node_memory.clone()),
        ("pods", config.pods_per_node().to_string()),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_owned(), Quantity(v)))
    .collect();
    NodeStatus {
        capacity: Some(resources.clone()),
        allocatable: Some(resources),
        conditions: Some(vec![NodeCondition {
            type_: "Ready".into(),
            status: status.into(),
            reason: Some(reason.into()),
            message: Some(message.into()),
            last_heartbeat_time: Some(at.clone()),
            last_transition_time: Some(at),
        }]),
        node_info: Some(NodeSystemInfo {
            kubelet_version: "v1.20.2-flotilla-member-sim".into(),
            operating_system: "linux".into(),
            architecture: "amd64".into(),
            container_runtime_version: "simulated://1".into(),
            os_image: config.cluster.clone(),
            ..NodeSystemInfo::default()
        }),
        ..NodeStatus::default()
    }
}

/// Registers the nodes, then every [`HEARTBEAT`] renews their Leases and Ready condition.
async fn heartbeat_loop(
    client: kube::Client,
    config: KubeletConfig,
    sim: Arc<Sim>,
    shutdown: Shutdown,
) {
    let nodes: Api<Node> = Api::all(client.clone());
    let leases: Api<Lease> = Api::namespaced(client, "kube-node-lease");
    let mut fault_rx = sim.subscribe_fault();
    let mut registered: HashSet<String> = HashSet::new();
    loop {
        let ready = *fault_rx.borrow_and_update() != Fault::Unhealthy;
        for name in config.node_names() {
            if !registered.contains(&name) {
                let node = node_object(&config, &name, ready);
                match nodes.create(&PostParams::default(), &node).await {
                    Ok(_) => {
                        tracing::info!(node = %name, "node registered");
                        registered.insert(name.clone());
                    }
                    Err(kube::Error::Api(s)) if s.code == 409 => {
                        registered.insert(name.clone());
                    }
                    Err(error) => {
                        tracing::warn!(node = %name, %error, "cannot register the node; retrying");
                        continue;
                    }
                }
            }
            let status = Node {
                status: Some(node_status(&config, ready)),
                ..Node::default()
            };
            if let Err(error) = nodes
                .patch_status(&name, &PatchParams::default(), &Patch::Merge(&status))
                .await
            {
                tracing::warn!(node = %name, %error, "cannot post the node's status");
            }
            if ready && let Err(error) = renew_lease(&leases, &name).await {
                tracing::warn!(node = %name, %error, "cannot renew the node's Lease");
            }
        }
        tokio::select! {
            () = shutdown.triggered() => return,
            () = tokio::time::sleep(HEARTBEAT) => {}
            _ = fault_rx.changed() => {}
        }
    }
}

async fn renew_lease(leases: &Api<Lease>, node: &str) -> Result<(), kube::Error> {
    let lease = Lease {
        metadata: kube::api::ObjectMeta {
            name: Some(node.to_owned()),
            namespace: Some("kube-node-lease".into()),
            ..Default::default()
        },
        spec: Some(LeaseSpec {
            holder_identity: Some(node.to_owned()),
            lease_duration_seconds: Some(LEASE_SECONDS),
            renew_time: Some(MicroTime(Timestamp::now())),
            ..Default::default()
        }),
    };
    leases
        .patch(
            node,
            &PatchParams::apply(MANAGER).force(),
            &Patch::Apply(&lease),
        )
        .await
        .map(|_| ())
}

/// What the kubelet has already set in motion, by pod uid.
#[derive(Default)]
struct Seen {
    starting: HashSet<String>,
    finalising: HashSet<String>,
    binding: HashSet<String>,
}

/// Records `uid` in the set `which` picks; whether it was not there yet (the first event of
/// a pod sets the work in motion, later ones do not).
fn first_time(seen: &Mutex<Seen>, which: fn(&mut Seen) -> &mut HashSet<String>, uid: &str) -> bool {
    which(&mut seen.lock().unwrap_or_else(PoisonError::into_inner)).insert(uid.to_owned())
}

/// Follows every pod: binds (with `--bind-pods`), starts and finalises those of our nodes.
async fn pod_loop(client: kube::Client, config: KubeletConfig, shutdown: Shutdown) {
    let all: Api<Pod> = Api::all(client.clone());
    let ours: HashSet<String> = config.node_names().into_iter().collect();
    let seen = Arc::new(Mutex::new(Seen::default()));
    // pods bound per node, for --bind-pods (least loaded first)
    let load: Arc<Mutex<BTreeMap<String, HashSet<String>>>> = Arc::new(Mutex::new(
        ours.iter().map(|n| (n.clone(), HashSet::new())).collect(),
    ));
    let stream = watcher(all, watcher::Config::default()).boxed();
    let mut stream = stream;
    loop {
        let event = tokio::select! {
            () = shutdown.triggered() => return,
            e = stream.next() => e,
        };
        let pod = match event {
            None => return,
            Some(Ok(watcher::Event::Apply(p) | watcher::Event::InitApply(p))) => p,
            Some(Ok(watcher::Event::Delete(p))) => {
                let uid = p.metadata.uid.clone().unwrap_or_default();
                let mut s = seen.lock().unwrap_or_else(PoisonError::into_inner);
                s.starting.remove(&uid);
                s.finalising.remove(&uid);
                s.binding.remove(&uid);
                for pods in load
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .values_mut()
                {
                    pods.remove(&uid);
                }
                continue;
            }
            Some(Ok(_)) => continue,
            Some(Err(error)) => {
                tracing::debug!(%error, "pod watch error; the watcher retries");
                tokio::time::sleep(Duration::from_millis(500)).await;
                continue;
            }
        };
        handle_pod(&client, &config, &ours, &seen, &load, pod);
    }
}

fn handle_pod(
    client: &kube::Client,
    config: &KubeletConfig,
    ours: &HashSet<String>,
    seen: &Arc<Mutex<Seen>>,
    load: &Arc<Mutex<BTreeMap<String, HashSet<String>>>>,
    pod: Pod,
) {
    let uid = pod.metadata.uid.clone().unwrap_or_default();
    let name = pod.metadata.name.clone().unwrap_or_default();
    let namespace = pod.metadata.namespace.clone().unwrap_or_default();
    let spec = pod.spec.clone().unwrap_or_default();
    let phase = pod
        .status
        .as_ref()
        .and_then(|s| s.phase.clone())
        .unwrap_or_default();
    let api: Api<Pod> = Api::namespaced(client.clone(), &namespace);
    let node = spec.node_name.clone().unwrap_or_default();
    if node.is_empty() {
        if config.bind_pods && pod.metadata.deletion_timestamp.is_none() {
            bind(client, config, seen, load, &pod);
        }
        return;
    }
    if !ours.contains(&node) {
        return;
    }
    load.lock()
        .unwrap_or_else(PoisonError::into_inner)
        .entry(node.clone())
        .or_default()
        .insert(uid.clone());
    if pod.metadata.deletion_timestamp.is_some() {
        // the kubelet's part of a deletion: the containers are stopped, the pod object goes
        if first_time(seen, |s| &mut s.finalising, &uid) {
            tokio::spawn(async move {
                let params = DeleteParams {
                    grace_period_seconds: Some(0),
                    preconditions: Some(kube::api::Preconditions {
                        uid: Some(uid),
                        resource_version: None,
                    }),
                    ..DeleteParams::default()
                };
                if let Err(error) = api.delete(&name, &params).await {
                    tracing::debug!(pod = %name, %error, "cannot finalise the pod");
                }
            });
        }
        return;
    }
    if phase != "Pending" && !phase.is_empty() {
        return;
    }
    if !first_time(seen, |s| &mut s.starting, &uid) {
        return;
    }
    let completes = pod
        .metadata
        .owner_references
        .as_ref()
        .is_some_and(|o| o.iter().any(|r| r.kind == "Job"));
    let delay = config.pod_startup_delay;
    let containers: Vec<(String, String)> = spec
        .containers
        .iter()
        .map(|c| (c.name.clone(), c.image.clone().unwrap_or_default()))
        .collect();
    let seen = seen.clone();
    tokio::spawn(async move {
        tokio::time::sleep(delay).await;
        let status = pod_status(&containers, completes, &uid);
        match api
            .patch_status(&name, &PatchParams::default(), &Patch::Merge(&status))
            .await
        {
            Ok(_) => tracing::debug!(pod = %name, %node, completes, "pod started"),
            Err(error) => {
                tracing::debug!(pod = %name, %error, "cannot start the pod; retried on its next event");
                seen.lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .starting
                    .remove(&uid);
            }
        }
    });
}

/// The status a kubelet posts for a started pod: Running and Ready, or, for a Job's pod,
/// Succeeded with every container terminated with exit code 0.
fn pod_status(containers: &[(String, String)], completes: bool, uid: &str) -> Pod {
    let at = now();
    // a stable fake address per pod, in the documentation range
    let octet = uid
        .bytes()
        .fold(0u8, |a, b| a.wrapping_mul(31).wrapping_add(b))
        % 250
        + 2;
    let statuses = containers
        .iter()
        .map(|(name, image)| {
            let state = if completes {
                ContainerState {
                    terminated: Some(ContainerStateTerminated {
                        exit_code: 0,
                        reason: Some("Completed".into()),
                        started_at: Some(at.clone()),
                        finished_at: Some(at.clone()),
                        ..ContainerStateTerminated::default()
                    }),
                    ..ContainerState::default()
                }
            } else {
                ContainerState {
                    running: Some(ContainerStateRunning {
                        started_at: Some(at.clone()),
                    }),
                    ..ContainerState::default()
                }
            };
            ContainerStatus {
                name: name.clone(),
                image: image.clone(),
                image_id: format!("simulated://{image}"),
                ready: !completes,
                started: Some(!completes),
                restart_count: 0,
                state: Some(state),
                ..ContainerStatus::default()
            }
        })
        .collect();
    let ready = if completes { "False" } else { "True" };
    let reason = completes.then(|| "PodCompleted".to_owned());
    let condition = |type_: &str, status: &str| PodCondition {
        type_: type_.into(),
        status: status.into(),
        last_transition_time: Some(at.clone()),
        reason: reason.clone(),
        ..PodCondition::default()
    };
    Pod {
        status: Some(PodStatus {
            phase: Some(if completes { "Succeeded" } else { "Running" }.into()),
            host_ip: Some("192.0.2.10".into()),
            pod_ip: Some(format!("198.51.100.{octet}")),
            start_time: Some(at.clone()),
            conditions: Some(vec![
                condition("Initialized", "True"),
                condition("Ready", ready),
                condition("ContainersReady", ready),
                condition("PodScheduled", "True"),
            ]),
            container_statuses: Some(statuses),
            ..PodStatus::default()
        }),
        ..Pod::default()
    }
}

/// Binds an unscheduled pod to the least loaded node that has room (`--bind-pods`).
fn bind(
    client: &kube::Client,
    config: &KubeletConfig,
    seen: &Arc<Mutex<Seen>>,
    load: &Arc<Mutex<BTreeMap<String, HashSet<String>>>>,
    pod: &Pod,
) {
    let uid = pod.metadata.uid.clone().unwrap_or_default();
    if !first_time(seen, |s| &mut s.binding, &uid) {
        return;
    }
    let per_node = config.pods_per_node() as usize;
    let node = {
        let mut load = load.lock().unwrap_or_else(PoisonError::into_inner);
        let pick = load
            .iter()
            .filter(|(_, pods)| pods.len() < per_node)
            .min_by_key(|(_, pods)| pods.len())
            .map(|(n, _)| n.clone());
        if let Some(n) = &pick {
            load.entry(n.clone()).or_default().insert(uid.clone());
        }
        pick
    };
    let Some(node) = node else {
        // no room: it stays Pending, and is looked at again on its next event
        seen.lock()
            .unwrap_or_else(PoisonError::into_inner)
            .binding
            .remove(&uid);
        return;
    };
    let name = pod.metadata.name.clone().unwrap_or_default();
    let namespace = pod.metadata.namespace.clone().unwrap_or_default();
    let client = client.clone();
    tokio::spawn(async move {
        let binding = Binding {
            metadata: ObjectMeta {
                name: Some(name.clone()),
                namespace: Some(namespace.clone()),
                ..ObjectMeta::default()
            },
            target: ObjectReference {
                api_version: Some("v1".into()),
                kind: Some("Node".into()),
                name: Some(node),
                ..ObjectReference::default()
            },
        };
        let body = match serde_json::to_vec(&binding) {
            Ok(b) => b,
            Err(error) => {
                tracing::warn!(pod = %name, %error, "cannot encode the binding");
                return;
            }
        };
        let url = format!("/api/v1/namespaces/{namespace}/pods/{name}/binding");
        let request = match http::Request::post(url)
            .header("content-type", "application/json")
            .body(body)
        {
            Ok(r) => r,
            Err(error) => {
                tracing::warn!(pod = %name, %error, "cannot build the binding request");
                return;
            }
        };
        if let Err(error) = client.request_text(request).await {
            tracing::debug!(pod = %name, %error, "cannot bind the pod");
        }
    });
}

/// Relays TCP connections from `listener` to `upstream` (`host:port`) until `shutdown`;
/// while `sim` is unreachable no byte crosses in either direction (connections hang, as
/// behind a partition) and new connections are accepted but not served.
pub async fn proxy(listener: TcpListener, upstream: String, sim: Arc<Sim>, shutdown: Shutdown) {
    loop {
        let accepted = tokio::select! {
            () = shutdown.triggered() => return,
            a = listener.accept() => a,
        };
        let Ok((client, _)) = accepted else {
            continue;
        };
        let upstream = upstream.clone();
        let sim = sim.clone();
        tokio::spawn(async move {
            sim.wait_reachable().await;
            let server = match TcpStream::connect(&upstream).await {
                Ok(s) => s,
                Err(error) => {
                    tracing::debug!(%upstream, %error, "cannot reach the API server");
                    return;
                }
            };
            let (cr, cw) = client.into_split();
            let (sr, sw) = server.into_split();
            let last_sent = Arc::new(Mutex::new(tokio::time::Instant::now()));
            tokio::join!(
                pump(cr, sw, sim.clone(), Direction::Request(last_sent.clone())),
                pump(sr, cw, sim, Direction::Answer(last_sent))
            );
        });
    }
}

/// How long after the client last sent a byte the API server's bytes count as a watch's
/// events rather than a reply (SetFault's watch delay, which the proxy cannot see inside TLS).
const WATCH_QUIET: Duration = Duration::from_millis(500);

/// Which way a [`pump`] copies.
enum Direction {
    /// Client to API server: records when the client last sent.
    Request(Arc<Mutex<tokio::time::Instant>>),
    /// API server to client: bytes sent [`WATCH_QUIET`] after the client's last are held for
    /// the member's watch delay.
    Answer(Arc<Mutex<tokio::time::Instant>>),
}

/// Copies `from` to `to`, holding each chunk while the member is unreachable, and the API
/// server's watch events for the watch delay (in order: a chunk never overtakes another).
async fn pump(
    mut from: tokio::net::tcp::OwnedReadHalf,
    mut to: tokio::net::tcp::OwnedWriteHalf,
    sim: Arc<Sim>,
    direction: Direction,
) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<(tokio::time::Instant, Vec<u8>)>();
    let read = async move {
        let mut buf = vec![0u8; 64 * 1024];
        loop {
            let n = match from.read(&mut buf).await {
                Ok(0) | Err(_) => break,
                Ok(n) => n,
            };
            sim.wait_reachable().await;
            let now = tokio::time::Instant::now();
            let at = match &direction {
                Direction::Request(last) => {
                    *last.lock().unwrap_or_else(PoisonError::into_inner) = now;
                    now
                }
                Direction::Answer(last) => {
                    let sent = *last.lock().unwrap_or_else(PoisonError::into_inner);
                    let delay = sim.watch_delay();
                    if !delay.is_zero() && now.duration_since(sent) > WATCH_QUIET {
                        now + delay
                    } else {
                        now
                    }
                }
            };
            if tx.send((at, buf[..n].to_vec())).is_err() {
                break;
            }
        }
    };
    let write = async move {
        while let Some((at, chunk)) = rx.recv().await {
            tokio::time::sleep_until(at).await;
            if to.write_all(&chunk).await.is_err() {
                break;
            }
        }
        let _ = to.shutdown().await;
    };
    tokio::join!(read, write);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nodes_split_the_capacity_and_are_named_after_the_cluster() {
        let c = KubeletConfig {
            cluster: "m1".into(),
            nodes: 3,
            capacity: 10,
            node_cpu: "1500m".into(),
            node_memory: "2Gi".into(),
            pod_startup_delay: Duration::ZERO,
            bind_pods: false,
        };
        assert_eq!(c.node_names(), ["m1-node-1", "m1-node-2", "m1-node-3"]);
        assert_eq!(c.pods_per_node(), 4);
        let node = node_object(&c, "m1-node-1", true);
        let status = node.status.clone().unwrap_or_default();
        assert_eq!(
            status.allocatable.clone().unwrap_or_default().get("pods"),
            Some(&Quantity("4".into()))
        );
        // --node-cpu and --node-memory are each node's, as given
        let allocatable = status.allocatable.unwrap_or_default();
        assert_eq!(allocatable.get("cpu"), Some(&Quantity("1500m".into())));
        assert_eq!(allocatable.get("memory"), Some(&Quantity("2Gi".into())));
        let ready = |n: &Node| {
            n.status
                .as_ref()
                .and_then(|s| s.conditions.as_ref())
                .and_then(|c| c.first())
                .map(|c| c.status.clone())
        };
        assert_eq!(ready(&node).as_deref(), Some("True"));
        assert_eq!(node.metadata.name.as_deref(), Some("m1-node-1"));
        let json = serde_json::to_value(&node).unwrap_or_default();
        assert_eq!(json["kind"], "Node", "typed objects carry their kind");
        assert_eq!(
            ready(&node_object(&c, "m1-node-1", false)).as_deref(),
            Some("False")
        );
    }

    #[test]
    fn a_jobs_pod_completes_and_the_others_run() {
        let containers = [("c".to_owned(), "nginx".to_owned())];
        let run = serde_json::to_value(pod_status(&containers, false, "u1")).unwrap_or_default();
        assert_eq!(run["status"]["phase"], "Running");
        assert_eq!(run["status"]["containerStatuses"][0]["ready"], true);
        assert!(run["status"]["containerStatuses"][0]["state"]["running"].is_object());
        let done = serde_json::to_value(pod_status(&containers, true, "u1")).unwrap_or_default();
        assert_eq!(done["status"]["phase"], "Succeeded");
        assert_eq!(
            done["status"]["containerStatuses"][0]["state"]["terminated"]["exitCode"],
            0
        );
        // the times are Kubernetes times
        assert!(
            run["status"]["startTime"]
                .as_str()
                .is_some_and(|t| t.ends_with('Z'))
        );
    }
}
