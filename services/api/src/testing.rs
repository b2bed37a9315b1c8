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

pub use crate::seed::{NGINX_MANIFEST, nginx_workload, seed_policy};
