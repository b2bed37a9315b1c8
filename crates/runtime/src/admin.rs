//! The admin HTTP server: `/metrics` (Prometheus text), `/livez` and `/readyz` (also
//! `/live` and `/ready`).
//!
//! ```text
//!   GET /livez  → 200 "ok" while the process serves at all
//!   GET /readyz → 200 "ok" once every Readiness condition holds, else 503 + what is pending
//!   GET /metrics → the Prometheus recorder's text exposition
//! ```

use std::time::Duration;

use axum::Router;
use axum::extract::State;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use http::{StatusCode, header};
use metrics_exporter_prometheus::PrometheusHandle;
use tokio::net::TcpListener;

use crate::server::{Readiness, ServerError};
use crate::shutdown::Shutdown;

/// How often histogram upkeep runs on the recorder (the exporter's own default).
const UPKEEP_INTERVAL: Duration = Duration::from_secs(5);

/// What the admin handlers answer from.
#[derive(Clone)]
struct Admin {
    metrics: Option<PrometheusHandle>,
    readiness: Readiness,
}

/// Serves the admin endpoints on `listener` until `shutdown` fires. `metrics` is the handle
/// from [`crate::telemetry::install_metrics`]; without one `/metrics` answers 404. Only GET
/// (and HEAD) are answered; anything else is 405.
pub async fn serve_admin(
    listener: TcpListener,
    metrics: Option<PrometheusHandle>,
    readiness: Readiness,
    shutdown: Shutdown,
) -> Result<(), ServerError> {
    if let Some(handle) = metrics.clone() {
        let stop = shutdown.clone();
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(UPKEEP_INTERVAL);
            loop {
                tokio::select! {
                    () = stop.triggered() => return,
                    _ = tick.tick() => handle.run_upkeep(),
                }
            }
        });
    }
    let router = Router::new()
        .route("/livez", get(live))
        .route("/live", get(live))
        .route("/healthz", get(live))
        .route("/readyz", get(ready))
        .route("/ready", get(ready))
        .route("/metrics", get(render_metrics))
        .fallback(|| async { text(StatusCode::NOT_FOUND, "not found\n") })
        .with_state(Admin { metrics, readiness });
    // (accept errors such as EMFILE are retried by axum::serve, not fatal)
    axum::serve(listener, router)
        .with_graceful_shutdown(shutdown.triggered())
        .await
        .map_err(ServerError::Io)
}

async fn live() -> Response {
    text(StatusCode::OK, "ok\n")
}

async fn ready(State(admin): State<Admin>) -> Response {
    let pending = admin.readiness.pending();
    if pending.is_empty() {
        text(StatusCode::OK, "ok\n")
    } else {
        text(
            StatusCode::SERVICE_UNAVAILABLE,
            format!("not ready: {}\n", pending.join(", ")),
        )
    }
}

async fn render_metrics(State(admin): State<Admin>) -> Response {
    match &admin.metrics {
        Some(h) => (
            [(
                header::CONTENT_TYPE,
                "text/plain; version=0.0.4; charset=utf-8",
            )],
            h.render(),
        )
            .into_response(),
        None => text(StatusCode::NOT_FOUND, "no metrics recorder installed\n"),
    }
}

fn text(status: StatusCode, body: impl Into<String>) -> Response {
    (
        status,
        [(header::CONTENT_TYPE, "text/plain; charset=utf-8")],
        body.into(),
    )
        .into_response()
}
