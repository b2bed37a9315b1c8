//! The admin HTTP server: `/metrics` (Prometheus text), `/livez` and `/readyz` (also
//! `/live` and `/ready`).
//!
//! ```text
//!   GET /livez  → 200 "ok" while the process serves at all
//!   GET /readyz → 200 "ok" once every Readiness condition holds, else 503 + what is pending
//!   GET /metrics → the Prometheus recorder's text exposition
//! ```

use std::convert::Infallible;
use std::time::Duration;

use bytes::Bytes;
use http::{Method, Request, Response, StatusCode, header};
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use metrics_exporter_prometheus::PrometheusHandle;
use tokio::net::TcpListener;

use crate::server::{Readiness, ServerError};
use crate::shutdown::Shutdown;

/// How often histogram upkeep runs on the recorder (the exporter's own default).
const UPKEEP_INTERVAL: Duration = Duration::from_secs(5);

/// Serves the admin endpoints on `listener` until `shutdown` fires. `metrics` is the handle
/// from [`crate::telemetry::install_metrics`]; without one `/metrics` answers 404.
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
    loop {
        let (stream, peer) = tokio::select! {
            () = shutdown.triggered() => return Ok(()),
            accepted = listener.accept() => match accepted {
                Ok(conn) => conn,
                Err(error) => {
                    // Per-connection errors (EMFILE, aborted handshakes) must not end the server.
                    tracing::warn!(%error, "admin accept failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
        };
        let metrics = metrics.clone();
        let readiness = readiness.clone();
        let stop = shutdown.clone();
        tokio::spawn(async move {
            let service = service_fn(move |req| {
                let response = handle(&req, metrics.as_ref(), &readiness);
                async move { Ok::<_, Infallible>(response) }
            });
            let conn = http1::Builder::new().serve_connection(TokioIo::new(stream), service);
            tokio::pin!(conn);
            tokio::select! {
                res = conn.as_mut() => {
                    if let Err(error) = res {
                        tracing::debug!(%peer, %error, "admin connection ended with an error");
                    }
                }
                () = stop.triggered() => {
                    conn.as_mut().graceful_shutdown();
                    let _ = conn.await;
                }
            }
        });
    }
}

fn text(status: StatusCode, body: impl Into<Bytes>) -> Response<Full<Bytes>> {
    let mut resp = Response::new(Full::new(body.into()));
    *resp.status_mut() = status;
    resp.headers_mut().insert(
        header::CONTENT_TYPE,
        header::HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    resp
}

fn handle(
    req: &Request<Incoming>,
    metrics: Option<&PrometheusHandle>,
    readiness: &Readiness,
) -> Response<Full<Bytes>> {
    if req.method() != Method::GET && req.method() != Method::HEAD {
        return text(StatusCode::METHOD_NOT_ALLOWED, "use GET\n");
    }
    match req.uri().path() {
        "/livez" | "/live" | "/healthz" => text(StatusCode::OK, "ok\n"),
        "/readyz" | "/ready" => {
            let pending = readiness.pending();
            if pending.is_empty() {
                text(StatusCode::OK, "ok\n")
            } else {
                text(
                    StatusCode::SERVICE_UNAVAILABLE,
                    format!("not ready: {}\n", pending.join(", ")),
                )
            }
        }
        "/metrics" => match metrics {
            Some(h) => {
                let mut resp = text(StatusCode::OK, h.render());
                resp.headers_mut().insert(
                    header::CONTENT_TYPE,
                    header::HeaderValue::from_static("text/plain; version=0.0.4; charset=utf-8"),
                );
                resp
            }
            None => text(StatusCode::NOT_FOUND, "no metrics recorder installed\n"),
        },
        _ => text(StatusCode::NOT_FOUND, "not found\n"),
    }
}
