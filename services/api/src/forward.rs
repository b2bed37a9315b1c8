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

/// One forwarded gRPC service: [`FORWARDED`]`[S]` (the index names it for the router).
#[derive(Clone, Debug)]
pub struct Forward<const S: usize> {
    channel: Channel,
    peer: String,
}

/// A forwarded service: which `--peer` serves it, its name, and the method forwarded.
#[derive(Clone, Copy, Debug)]
pub struct Forwarded {
    /// The peer's name in `--peer NAME=ADDRESS`: `scheduler`.
    pub peer: &'static str,
    /// The gRPC service: `flotilla.v1.Scheduler`.
    pub name: &'static str,
    /// Its one forwarded (dry-run) method: `Simulate`.
    pub method: &'static str,
}

/// The dry runs the api forwards: the scheduler's `Simulate`, the taint manager's `Explain`,
/// graceful eviction's `Assess`, the work executor's `Plan` and cluster health's `Assess`.
pub const FORWARDED: [Forwarded; 5] = [
    Forwarded {
        peer: "scheduler",
        name: "flotilla.v1.Scheduler",
        method: "Simulate",
    },
    Forwarded {
        peer: "taint-manager",
        name: "flotilla.v1.TaintManager",
        method: "Explain",
    },
    Forwarded {
        peer: "graceful-eviction",
        name: "flotilla.v1.GracefulEviction",
        method: "Assess",
    },
    Forwarded {
        peer: "work-executor",
        name: "flotilla.v1.WorkExecutor",
        method: "Plan",
    },
    Forwarded {
        peer: "cluster-health",
        name: "flotilla.v1.ClusterHealth",
        method: "Assess",
    },
];

impl<const S: usize> NamedService for Forward<S> {
    const NAME: &'static str = FORWARDED[S].name;
}

impl<const S: usize> Service<http::Request<Body>> for Forward<S> {
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
        let Forwarded {
            name,
            method: forwarded,
            ..
        } = FORWARDED[S];
        if method != forwarded {
            let status = tonic::Status::unimplemented(format!(
                "the api forwards only {name}/{forwarded} (a dry run); call {method} on the service itself"
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
                    tracing::warn!(service = name, %peer, error = %e, "forwarding a dry run failed");
                    Ok(tonic::Status::unavailable(format!(
                        "the api could not reach {name} at {peer}: {e}"
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

fn forward<const S: usize>(
    router: Router,
    peers: &BTreeMap<String, String>,
    security: &SecurityArgs,
) -> Router {
    let peer_name = FORWARDED[S].peer;
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
    router.add_service(Forward::<S> {
        channel,
        peer: addr.clone(),
    })
}

/// `router` with a forwarder for every dry-run service that `peers` names.
pub fn routes(router: Router, peers: &BTreeMap<String, String>, security: &SecurityArgs) -> Router {
    let router = forward::<0>(router, peers, security);
    let router = forward::<1>(router, peers, security);
    let router = forward::<2>(router, peers, security);
    let router = forward::<3>(router, peers, security);
    forward::<4>(router, peers, security)
}
