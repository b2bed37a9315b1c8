//! Test support (feature `test-util`): the api served in-process on 127.0.0.1:0, and the
//! seed objects of the scenario tests (Karmada's `samples/nginx`).

use std::net::SocketAddr;
use std::time::Duration;

use flotilla_proto::v1;
use flotilla_proto::v1::api_client::ApiClient;
use flotilla_runtime::Shutdown;
use flotilla_store::StoreRef;
use tokio::net::TcpListener;
use tokio::task::JoinHandle;
use tonic::transport::{Channel, Endpoint};

use crate::{Api, Args, Config};

/// The default configuration (every flag at its default), with test-sized timers: a
/// 100 ms bookmark period, two detector workers and a 2 s election lease.
pub fn config() -> Config {
    use clap::Parser;
    let args = Args::try_parse_from([
        "flotilla-api",
        "--store",
        "mem",
        "--identity",
        "test",
        "--lease-ttl",
        "2s",
        "--detector-workers",
        "2",
        "--watch-bookmark-interval",
        "100ms",
    ])
    .expect("test flags parse");
    args.validate().expect("test flags are valid")
}

/// An api server running in this process.
#[derive(Debug)]
pub struct TestApi {
    /// Where it listens.
    pub addr: SocketAddr,
    /// Stops it.
    pub shutdown: Shutdown,
    /// The server task.
    pub task: JoinHandle<anyhow::Result<()>>,
}

/// Serves the api on `store` on 127.0.0.1:0.
pub async fn serve(store: StoreRef, config: Config) -> TestApi {
    let listener = TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind 127.0.0.1:0");
    let addr = listener.local_addr().expect("local address");
    let shutdown = Shutdown::new();
    let timeout = config.grpc_timeout;
    let task = flotilla_runtime::service::spawn_config::<Api>(
        store, config, timeout, listener, None, None, &shutdown,
    )
    .await
    .expect("the api starts");
    TestApi {
        addr,
        shutdown,
        task,
    }
}

impl TestApi {
    /// A client of the server.
    pub async fn client(&self) -> ApiClient<Channel> {
        let channel = Endpoint::from_shared(format!("http://{}", self.addr))
            .expect("endpoint")
            .connect_timeout(Duration::from_secs(5))
            .connect()
            .await
            .expect("connect to the test api");
        ApiClient::new(channel)
    }

    /// Stops the server and waits for it (watch streams end first).
    pub async fn stop(self) {
        self.shutdown.trigger();
        let result = tokio::time::timeout(Duration::from_secs(10), self.task)
            .await
            .expect("the api stops within 10 s")
            .expect("the api task did not panic");
        result.expect("the api stopped cleanly");
    }
}

/// The metadata of a cluster-scoped object `name` (nothing else set).
pub fn named(name: &str) -> Option<v1::ObjectMeta> {
    object_meta("", name)
}

/// A Push cluster `name` with `endpoint`, in region `eu`, labelled `env=test`.
pub fn cluster(name: &str, endpoint: &str) -> v1::Cluster {
    v1::Cluster {
        metadata: Some(v1::ObjectMeta {
            name: name.into(),
            labels: [("env".to_owned(), "test".to_owned())].into(),
            ..Default::default()
        }),
        spec: Some(v1::ClusterSpec {
            sync_mode: v1::SyncMode::Push as i32,
            api_endpoint: endpoint.into(),
            region: "eu".into(),
            ..Default::default()
        }),
        status: None,
    }
}

pub use crate::seed::{NGINX_MANIFEST, deployment_selector, object_meta, seed_policy};

/// The seed workload (only the manifest: the server fills in the rest).
pub fn nginx_workload() -> v1::Workload {
    v1::Workload {
        manifest: NGINX_MANIFEST.into(),
        ..Default::default()
    }
}

/// A Get of the seed workload (`default/Deployment/nginx`).
pub fn get_nginx() -> v1::GetWorkloadRequest {
    v1::GetWorkloadRequest {
        namespace: "default".into(),
        kind: "Deployment".into(),
        name: "nginx".into(),
    }
}

/// A Delete of the seed workload, without preconditions.
pub fn delete_nginx() -> v1::DeleteWorkloadRequest {
    delete_workload("default", "Deployment", "nginx")
}

/// A Delete of the workload `namespace`/`kind`/`name`, without preconditions.
pub fn delete_workload(namespace: &str, kind: &str, name: &str) -> v1::DeleteWorkloadRequest {
    v1::DeleteWorkloadRequest {
        namespace: namespace.into(),
        kind: kind.into(),
        name: name.into(),
        preconditions: None,
    }
}

/// The static weight list of a placement's replica scheduling (panics where a level is
/// missing: a test's fixture always has them).
pub fn static_weights(placement: &mut v1::Placement) -> &mut Vec<v1::StaticClusterWeight> {
    &mut placement
        .replica_scheduling
        .as_mut()
        .expect("replicaScheduling")
        .weight_preference
        .as_mut()
        .expect("weightPreference")
        .static_weight_list
}

/// Application failover that purges Directly, with `grace_period_seconds` (which Directly
/// refuses: the tests' invalid case).
pub fn application_directly(grace_period_seconds: Option<i64>) -> v1::FailoverBehavior {
    v1::FailoverBehavior {
        application: Some(v1::ApplicationFailoverBehavior {
            purge_mode: v1::PurgeMode::Directly as i32,
            grace_period_seconds,
            ..Default::default()
        }),
        cluster: None,
    }
}

/// `object` with the label `key=value` added.
pub fn labelled<R: flotilla_proto::Resource + Clone>(object: &R, key: &str, value: &str) -> R {
    let mut object = object.clone();
    object
        .meta_mut()
        .labels
        .insert(key.to_owned(), value.to_owned());
    object
}

/// The next message of a watch stream (panics after 10 s, on an error or at its end).
pub async fn next_message<T>(stream: &mut tonic::Streaming<T>) -> T {
    tokio::time::timeout(Duration::from_secs(10), stream.message())
        .await
        .expect("a watch message within 10 s")
        .expect("a watch message, not an error")
        .expect("a watch message, not the end")
}

/// The cluster names of a placement's cluster affinity (panics where either is missing).
pub fn affinity_names(placement: Option<v1::Placement>) -> Vec<String> {
    placement
        .and_then(|p| p.cluster_affinity)
        .expect("placement.clusterAffinity")
        .cluster_names
}

/// A watch of every Cluster (from its current state, after a first BOOKMARK).
pub async fn watch_clusters(
    client: &mut ApiClient<Channel>,
) -> tonic::Streaming<v1::WatchClustersResponse> {
    client
        .watch_clusters(v1::WatchClustersRequest::default())
        .await
        .expect("watch clusters")
        .into_inner()
}
