//! Shared helpers of the cluster-health integration tests: a running cluster-health on a
//! store, in-process members, cluster builders and an `eventually` poll.

#![allow(dead_code, clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use flotilla_cluster_health::{Config, NoExecuteTaints, Started, start};
use flotilla_core::types::TaintEffect;
use flotilla_member_sim::Sim;
use flotilla_proto::convert::WireEnum;
use flotilla_proto::v1;
use flotilla_runtime::{Readiness, Shutdown};
use flotilla_store::StoreRef;
use flotilla_store::typed::Typed;
use tokio::net::TcpListener;

/// Compressed timers: probes every 100ms, thresholds 400ms, grace 600ms / 1s, eviction 1.2s.
pub fn fast_config(identity: &str) -> Config {
    let mut c = Config::new(identity);
    c.frequency = Duration::from_millis(100);
    c.probe_timeout = Duration::from_millis(250);
    c.options.thresholds.success = Duration::from_millis(400);
    c.options.thresholds.failure = Duration::from_millis(400);
    c.options.grace.monitor = Duration::from_millis(600);
    c.options.grace.startup = Duration::from_secs(1);
    c.options.monitor_period = Duration::from_millis(100);
    c.options.failover_eviction_timeout = Duration::from_millis(1200);
    c.lease_ttl = Duration::from_secs(2);
    c
}

/// A cluster-health replica.
pub struct Health {
    pub started: Started,
    pub shutdown: Shutdown,
    pub readiness: Readiness,
}

impl Health {
    pub fn start(store: StoreRef, config: Config) -> Self {
        let shutdown = Shutdown::new();
        let readiness = Readiness::new();
        let started = start(
            store,
            config,
            readiness.clone(),
            shutdown.clone(),
            flotilla_runtime::Clock::system(),
        );
        Health {
            started,
            shutdown,
            readiness,
        }
    }

    pub fn with_mode(store: StoreRef, mode: NoExecuteTaints) -> Self {
        let mut c = fast_config("test");
        c.options.no_execute = mode;
        Self::start(store, c)
    }

    /// Serves the ClusterHealth gRPC service on 127.0.0.1:0.
    pub async fn serve_grpc(&self) -> SocketAddr {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let server = tonic::transport::Server::builder()
            .add_service(flotilla_cluster_health::grpc::server(
                self.started.service.clone(),
            ))
            .serve_with_incoming_shutdown(
                tokio_stream::wrappers::TcpListenerStream::new(listener),
                self.shutdown.triggered(),
            );
        tokio::spawn(server);
        addr
    }

    pub async fn stop(self) {
        self.shutdown.trigger();
        let _ = tokio::time::timeout(Duration::from_secs(5), self.started.task).await;
    }
}

/// An in-process member: a member-sim, and for a Pull cluster a `flotilla-agent` next to it
/// that heartbeats to the control plane at `pull`.
pub struct Member {
    pub sim: Arc<Sim>,
    pub addr: SocketAddr,
    pub shutdown: Shutdown,
    pub agent: Option<Shutdown>,
    pull: Option<String>,
}

impl Member {
    pub async fn start(name: &str, capacity: u32, pull: Option<String>) -> Self {
        let shutdown = Shutdown::new();
        let (sim, addr) =
            flotilla_member_sim::spawn_local(name, capacity, Duration::from_millis(50), &shutdown)
                .await
                .unwrap();
        let mut m = Member {
            sim,
            addr,
            shutdown,
            agent: None,
            pull,
        };
        m.start_agent();
        m
    }

    /// Starts the Pull agent (again).
    pub fn start_agent(&mut self) {
        let Some(control_plane) = self.pull.clone() else {
            return;
        };
        let stop = Shutdown::new();
        let config = flotilla_agent::Config {
            cluster: self.sim.name().to_owned(),
            member: flotilla_member::Target::plain(self.endpoint()),
            api: control_plane.clone(),
            cluster_health: control_plane.clone(),
            work_executor: control_plane,
            token: None,
            heartbeat_interval: Duration::from_millis(100),
            status_interval: Duration::from_millis(100),
            member_timeout: Duration::from_millis(500),
            status_source: Default::default(),
            security: Default::default(),
        };
        tokio::spawn(flotilla_agent::run(config, stop.clone()));
        self.agent = Some(stop);
    }

    /// Stops the Pull agent: its heartbeats stop.
    pub fn stop_agent(&mut self) {
        if let Some(stop) = self.agent.take() {
            stop.trigger();
        }
    }

    pub fn endpoint(&self) -> String {
        format!("http://{}", self.addr)
    }
}

impl Drop for Member {
    fn drop(&mut self) {
        self.stop_agent();
        self.shutdown.trigger();
    }
}

pub use flotilla_runtime::testing::bindings::member_cluster as cluster;

pub async fn create(store: &StoreRef, c: v1::Cluster) -> v1::Cluster {
    Typed::new(store.clone()).create(c, None).await.unwrap()
}

pub async fn get(store: &StoreRef, name: &str) -> Option<v1::Cluster> {
    Typed::new(store.clone())
        .get(&format!("clusters/{name}"))
        .await
        .unwrap()
}

/// `(status, reason)` of the Ready condition.
pub fn ready(c: &v1::Cluster) -> Option<(v1::ConditionStatus, String)> {
    condition(c, "Ready").map(|c| {
        (
            v1::ConditionStatus::try_from(c.status).unwrap(),
            c.reason.clone(),
        )
    })
}

pub fn condition(c: &v1::Cluster, type_: &str) -> Option<v1::Condition> {
    c.status
        .as_ref()?
        .conditions
        .iter()
        .find(|c| c.r#type == type_)
        .cloned()
}

/// `key:Effect` of every taint, in order.
pub fn taints(c: &v1::Cluster) -> Vec<String> {
    let taints = c.spec.as_ref().map_or(&[][..], |s| &s.taints);
    taints
        .iter()
        .map(|t| {
            // the domain effect's name (`NoSchedule`, ...); `?` when unset
            let effect = TaintEffect::from_wire(t.effect, "effect")
                .unwrap()
                .map_or_else(|| "?".to_owned(), |e| format!("{e:?}"));
            format!("{}:{effect}", t.key)
        })
        .collect()
}

pub const NR_NS: &str = "cluster.karmada.io/not-ready:NoSchedule";
pub const NR_NE: &str = "cluster.karmada.io/not-ready:NoExecute";
pub const UR_NS: &str = "cluster.karmada.io/unreachable:NoSchedule";
pub const UR_NE: &str = "cluster.karmada.io/unreachable:NoExecute";
pub const TERMINATING: &str = "cluster.karmada.io/terminating:NoExecute";

/// Polls the cluster until `check` holds (10s at most); returns it.
pub async fn eventually<F>(store: &StoreRef, name: &str, what: &str, mut check: F) -> v1::Cluster
where
    F: FnMut(&v1::Cluster) -> bool,
{
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    loop {
        if let Some(c) = get(store, name).await
            && check(&c)
        {
            return c;
        }
        if tokio::time::Instant::now() > deadline {
            panic!(
                "not within 10s: {what}; cluster is {:#?}",
                get(store, name).await
            );
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Whether the Ready condition is True.
pub fn is_ready(c: &v1::Cluster) -> bool {
    ready_is(c, v1::ConditionStatus::True)
}

/// Whether the Ready condition has `status`.
pub fn ready_is(c: &v1::Cluster, status: v1::ConditionStatus) -> bool {
    ready(c).is_some_and(|(s, _)| s == status)
}

/// Polls the cluster until its Ready condition has `status`; returns it.
pub async fn until_ready_is(
    store: &StoreRef,
    name: &str,
    what: &str,
    status: v1::ConditionStatus,
) -> v1::Cluster {
    eventually(store, name, what, |c| ready_is(c, status)).await
}

/// Polls the cluster until it is Ready without taints; returns it.
pub async fn until_ready_untainted(store: &StoreRef, name: &str, what: &str) -> v1::Cluster {
    eventually(store, name, what, |c| is_ready(c) && taints(c).is_empty()).await
}

/// Polls the cluster until it carries `taint` (`key:Effect`); returns it.
pub async fn until_tainted(store: &StoreRef, name: &str, taint: &str) -> v1::Cluster {
    eventually(store, name, &format!("taint {taint}"), |c| {
        taints(c).iter().any(|t| t == taint)
    })
    .await
}

/// A Push member `name` with `capacity` replicas, its cluster created on `store` and Ready
/// without taints (cluster-health must be running); returns it and the Ready cluster.
pub async fn ready_push_member(
    store: &StoreRef,
    name: &str,
    capacity: u32,
) -> (Member, v1::Cluster) {
    let m = Member::start(name, capacity, None).await;
    create(store, cluster(name, v1::SyncMode::Push, &m.endpoint())).await;
    let c = until_ready_untainted(store, name, "Ready").await;
    (m, c)
}

/// The allocatable replicas the cluster's status reports.
pub fn allocatable_replicas(c: &v1::Cluster) -> Option<i64> {
    c.status
        .as_ref()?
        .resource_summary
        .as_ref()?
        .allocatable_replicas
}

/// Asserts that at least `ms` milliseconds passed since `cut` (`why`: the rule that damps).
pub fn assert_not_before(cut: tokio::time::Instant, ms: u64, why: &str) {
    let elapsed = cut.elapsed();
    assert!(elapsed >= Duration::from_millis(ms), "{why} ({elapsed:?})");
}

/// Polls `check` until it holds (10s at most).
pub async fn until<F, Fut>(what: &str, mut check: F)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while !check().await {
        if tokio::time::Instant::now() > deadline {
            panic!("not within 10s: {what}");
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

pub fn timestamp_ms(ts: &Option<prost_types::Timestamp>) -> i64 {
    let ts = ts.as_ref().expect("timestamp");
    ts.seconds * 1000 + i64::from(ts.nanos / 1_000_000)
}

// A store that runs a hook once, right before the first transaction that writes `key`: a
// concurrent writer between the controller's read and its compare-and-swap.
pub use flotilla_runtime::testing::Interpose;
