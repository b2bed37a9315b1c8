//! The controllers' dry-run RPCs, forwarded by the api to its `--peer`s, so that the CLI's
//! `explain` and `what-if` need only the api's address (a docker-compose stack publishes only
//! the api's port; its peers are container names only the api can resolve).
//!
//! ```text
//!   flotilla explain ──/flotilla.v1.Scheduler/Simulate──► api ──same call──► scheduler
//!                    ◄───────────── the peer's answer, status and trailers ◄──┘
//! ```
//!
//! Only the dry-run methods are forwarded (Simulate, Explain, both Assess, Plan); any other
//! method of those services answers UNIMPLEMENTED here, so a Pull agent's status reports or
//! heartbeats never travel through the api under its identity. The call goes out with the
//! api's own client TLS (`--tls-ca`, `--tls-cert`) and carries the caller's metadata
//! (a bearer token included) on to the peer, which checks it again. A peer that does not
//! answer is UNAVAILABLE, naming it.

use std::collections::BTreeMap;
use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use flotilla_runtime::SecurityArgs;
use flotilla_runtime::server::Router;
use tonic::body::Body;
use tonic::server::NamedService;
use tonic::transport::Channel;
use tower::{Service, ServiceExt as _};

/// One forwarded gRPC service (the type parameter names it for the router).
#[derive(Clone, Debug)]
pub struct Forward<N> {
    channel: Channel,
    peer: String,
    _name: std::marker::PhantomData<N>,
}

/// Names a forwarded service for [`NamedService`], says which method is forwarded and which
/// `--peer` serves it.
pub trait Forwarded: Clone + Send + Sync + 'static {
    /// The peer's name in `--peer NAME=ADDRESS`: `scheduler`.
    const PEER: &'static str;
    /// The gRPC service: `flotilla.v1.Scheduler`.
    const NAME: &'static str;
    /// Its one forwarded (dry-run) method: `Simulate`.
    const METHOD: &'static str;
}

/// The scheduler's `Simulate`.
#[derive(Clone, Copy, Debug)]
pub struct Scheduler;
impl Forwarded for Scheduler {
    const PEER: &'static str = "scheduler";
    const NAME: &'static str = "flotilla.v1.Scheduler";
    const METHOD: &'static str = "Simulate";
}

/// The taint manager's `Explain`.
#[derive(Clone, Copy, Debug)]
pub struct TaintManager;
impl Forwarded for TaintManager {
    const PEER: &'static str = "taint-manager";
    const NAME: &'static str = "flotilla.v1.TaintManager";
    const METHOD: &'static str = "Explain";
}

/// Graceful eviction's `Assess`.
#[derive(Clone, Copy, Debug)]
pub struct GracefulEviction;
impl Forwarded for GracefulEviction {
    const PEER: &'static str = "graceful-eviction";
    const NAME: &'static str = "flotilla.v1.GracefulEviction";
    const METHOD: &'static str = "Assess";
}

/// The work executor's `Plan`.
#[derive(Clone, Copy, Debug)]
pub struct WorkExecutor;
impl Forwarded for WorkExecutor {
    const PEER: &'static str = "work-executor";
    const NAME: &'static str = "flotilla.v1.WorkExecutor";
    const METHOD: &'static str = "Plan";
}

/// Cluster health's `Assess`.
#[derive(Clone, Copy, Debug)]
pub struct ClusterHealth;
impl Forwarded for ClusterHealth {
    const PEER: &'static str = "cluster-health";
    const NAME: &'static str = "flotilla.v1.ClusterHealth";
    const METHOD: &'static str = "Assess";
}

impl<N: Forwarded> NamedService for Forward<N> {
    const NAME: &'static str = N::NAME;
}

impl<N: Forwarded> Service<http::Request<Body>> for Forward<N> {
    type Response = http::Response<Body>;
    type Error = Infallible;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, Infallible>> + Send>>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        Poll::Ready(Ok(()))
    }

    fn call(
        &mut self,
        request: http::Request<Body>,
    ) -> <Self as Service<http::Request<Body>>>::Future {
        let method = request
            .uri()
            .path()
            .rsplit('/')
            .next()
            .unwrap_or_default()
            .to_owned();
        if method != N::METHOD {
            let status = tonic::Status::unimplemented(format!(
                "the api forwards only {}/{} (a dry run); call {method} on the service itself",
                N::NAME,
                N::METHOD
            ));
            return Box::pin(async move { Ok(status.into_http()) });
        }
        let mut channel = self.channel.clone();
        let peer = self.peer.clone();
        Box::pin(async move {
            // (tower's contract: ready before call; the channel is a buffer)
            let answer = match channel.ready().await {
                Ok(ready) => ready.call(request).await,
                Err(e) => Err(e),
            };
            match answer {
                Ok(response) => Ok(response.map(Body::new)),
                Err(e) => {
                    tracing::warn!(service = N::NAME, %peer, error = %e, "forwarding a dry run failed");
                    Ok(tonic::Status::unavailable(format!(
                        "the api could not reach {} at {peer}: {e}",
                        N::NAME
                    ))
                    .into_http())
                }
            }
        })
    }
}

/// The URL of a `--peer` address (`HOST:PORT` is plain HTTP/2).
fn url(addr: &str) -> String {
    if addr.contains("://") {
        addr.to_owned()
    } else {
        format!("http://{addr}")
    }
}

/// Checks that every `--peer` can be dialled (an `https://` peer needs `--tls-ca`).
pub fn check_peers(
    peers: &BTreeMap<String, String>,
    security: &SecurityArgs,
) -> Result<(), Vec<String>> {
    let errors: Vec<String> = peers
        .iter()
        .filter_map(|(name, addr)| {
            security
                .endpoint(&url(addr))
                .err()
                .map(|e| format!("--peer {name}={addr}: {e}"))
        })
        .collect();
    if errors.is_empty() {
        Ok(())
    } else {
        Err(errors)
    }
}

fn forward<N: Forwarded>(
    router: Router,
    peers: &BTreeMap<String, String>,
    security: &SecurityArgs,
) -> Router {
    let peer_name = N::PEER;
    let Some(addr) = peers.get(peer_name) else {
        return router;
    };
    // (checked by `check_peers` at start-up)
    let channel = match security.endpoint(&url(addr)) {
        Ok(endpoint) => endpoint.connect_lazy(),
        Err(e) => {
            tracing::error!(peer = peer_name, %addr, error = %e, "dry runs are not forwarded");
            return router;
        }
    };
    router.add_service(Forward::<N> {
        channel,
        peer: addr.clone(),
        _name: std::marker::PhantomData,
    })
}

/// `router` with a forwarder for every dry-run service that `peers` names.
pub fn routes(router: Router, peers: &BTreeMap<String, String>, security: &SecurityArgs) -> Router {
    let router = forward::<Scheduler>(router, peers, security);
    let router = forward::<TaintManager>(router, peers, security);
    let router = forward::<GracefulEviction>(router, peers, security);
    let router = forward::<WorkExecutor>(router, peers, security);
    forward::<ClusterHealth>(router, peers, security)
}
