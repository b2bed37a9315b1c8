//! One listener, two protocols: gRPC (`flotilla.v1.MemberSim`, `grpc.health.v1`, reflection)
//! over HTTP/2 and the member API server's probes `GET /readyz`, `GET /healthz` over
//! HTTP/1.1, both from one axum router served by `axum::serve` (h1 + h2c).
//!
//! ```text
//!   TcpListener ─accept─► axum::serve (HTTP/1.1 or h2c by preface)
//!                            │
//!                            ▼ fault gate (only on --listen, not on --control-listen):
//!                            │   UNREACHABLE → every request waits until healed, except
//!                            │   /flotilla.v1.MemberSim/SetFault (so that tests can heal)
//!                            ▼
//!                 axum::Router = tonic Routes (MemberSim, health, reflection v1/v1alpha)
//!                                + GET /readyz, /healthz (200 "ok" | 500 when UNHEALTHY)
//! ```

use std::sync::Arc;
use std::time::Duration;

use axum::response::IntoResponse;
use axum::routing::get;
use axum::serve::ListenerExt as _;
use flotilla_proto::v1::member_sim_server::MemberSimServer;
use flotilla_runtime::Shutdown;
use http::StatusCode;
use tokio::net::TcpListener;
use tonic::service::Routes;

use crate::grpc::MemberSimService;
use crate::sim::{Fault, Sim};

/// The one RPC that still answers while the member is unreachable.
pub const SET_FAULT_PATH: &str = "/flotilla.v1.MemberSim/SetFault";

/// How long in-flight requests may take to finish once shutdown fires.
const DRAIN: Duration = Duration::from_secs(2);

/// Why the router could not be built.
#[derive(Debug, thiserror::Error)]
pub enum ServerError {
    /// A file-descriptor set for reflection did not decode.
    #[error("cannot build the reflection service")]
    Reflection(#[source] tonic_reflection::server::Error),
}

fn probe_answer(sim: &Sim) -> (StatusCode, &'static str) {
    let (_, code, message) = sim.probe();
    (
        StatusCode::from_u16(code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR),
        message,
    )
}

/// The router behind both listeners: the gRPC services plus `/readyz` and `/healthz`.
///
/// `grpc.health.v1` reports SERVING for `""` and `flotilla.v1.MemberSim` for as long as the
/// process runs: it tells that the simulator is up, while `/readyz` and `Probe` tell the
/// simulated member's health.
pub async fn router(sim: Arc<Sim>) -> Result<axum::Router, ServerError> {
    let (health, health_service) = tonic_health::server::health_reporter();
    health
        .set_serving::<MemberSimServer<MemberSimService>>()
        .await;
    // Reflection lists what this port serves only (the member, health, reflection).
    let (v1, v1alpha) = flotilla_runtime::server::reflection_services(
        &[flotilla_proto::FILE_DESCRIPTOR_SET],
        &[
            "flotilla.v1.MemberSim".into(),
            "grpc.health.v1.Health".into(),
        ],
    )
    .map_err(ServerError::Reflection)?;
    let member =
        flotilla_runtime::decode_limited!(MemberSimServer::new(MemberSimService::new(sim.clone())));
    let mut routes = Routes::builder();
    routes
        .add_service(member)
        .add_service(health_service)
        .add_service(v1)
        .add_service(v1alpha);
    let readyz = {
        let sim = sim.clone();
        move || std::future::ready(probe_answer(&sim))
    };
    let kube = crate::kube::routes(sim.clone());
    let healthz = move || std::future::ready(probe_answer(&sim));
    Ok(routes
        .routes()
        .prepare()
        .into_axum_router()
        .route("/readyz", get(readyz))
        .route("/healthz", get(healthz))
        .merge(kube)
        .fallback(not_found))
}

/// Unknown paths: gRPC UNIMPLEMENTED for gRPC requests, HTTP 404 for everything else (as an
/// API server answers, which matters for the `/healthz` fallback of CH-2.2).
async fn not_found(req: http::Request<axum::body::Body>) -> http::Response<axum::body::Body> {
    let grpc = req
        .headers()
        .get(http::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|ct| ct.starts_with("application/grpc"));
    if grpc {
        tonic::Status::unimplemented(format!("{} is not served here", req.uri().path())).into_http()
    } else {
        (StatusCode::NOT_FOUND, "not found").into_response()
    }
}

/// Serves `router` on `listener` until `shutdown` fires (in-flight requests then get
/// [`DRAIN`] to finish). With `gate`, requests wait while that member is
/// [`Fault::Unreachable`] (except [`SET_FAULT_PATH`]); without, the listener ignores faults
/// (`--control-listen`).
pub async fn serve(
    listener: TcpListener,
    router: axum::Router,
    gate: Option<Arc<Sim>>,
    shutdown: Shutdown,
) {
    let addr = listener.local_addr().ok();
    let router = match gate {
        Some(sim) => router.layer(axum::middleware::from_fn_with_state(
            (sim, shutdown.clone()),
            hold_while_unreachable,
        )),
        None => router,
    };
    let listener = listener.tap_io(|stream| {
        let _ = stream.set_nodelay(true);
    });
    // (axum::serve retries failed accepts, e.g. EMFILE, and speaks HTTP/1.1 and h2c)
    let server = axum::serve(listener, router).with_graceful_shutdown(shutdown.triggered());
    let drained = async {
        shutdown.triggered().await;
        tokio::time::sleep(DRAIN).await;
    };
    tokio::select! {
        result = server => {
            if let Err(error) = result {
                tracing::warn!(?addr, %error, "listener failed");
            }
        }
        () = drained => tracing::debug!(?addr, "connections still open after the drain; dropped"),
    }
    tracing::debug!(?addr, "listener closed");
}

/// The fault gate: while the member is unreachable every request but `SetFault` waits until
/// it is healed (or the simulator shuts down), as requests to a partitioned server hang.
async fn hold_while_unreachable(
    axum::extract::State((sim, shutdown)): axum::extract::State<(Arc<Sim>, Shutdown)>,
    request: axum::extract::Request,
    next: axum::middleware::Next,
) -> axum::response::Response {
    let latency = sim.latency();
    if !latency.is_zero() && request.uri().path() != SET_FAULT_PATH {
        tokio::time::sleep(latency).await;
    }
    if request.uri().path() != SET_FAULT_PATH && sim.fault() == Fault::Unreachable {
        tokio::select! {
            () = sim.wait_reachable() => {}
            () = shutdown.triggered() => {
                return (StatusCode::SERVICE_UNAVAILABLE, "shutting down").into_response();
            }
        }
    }
    next.run(request).await
}
