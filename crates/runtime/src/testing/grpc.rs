//! gRPC services under test on 127.0.0.1:0, and the BadRequest details of their errors.
//!
//! ```text
//!   serve_loopback(|s| s.add_service(svc))   serve until the Shutdown fires; the URL
//!   violations(&status)                      the field paths of its BadRequest details
//!   assert_invalid_field(case, &status, f)   INVALID_ARGUMENT naming f (message, details)
//!   wait_serving(url, service, timeout)      poll grpc.health.v1 until SERVING
//! ```

use std::time::Duration;

use tokio::net::TcpListener;
use tonic::transport::Server;
use tonic::transport::server::{Router, TcpIncoming};
use tonic_health::pb::HealthCheckRequest;
use tonic_health::pb::health_check_response::ServingStatus;
use tonic_health::pb::health_client::HealthClient;
use tonic_types::StatusExt;

use super::eventually;
use crate::shutdown::Shutdown;

/// Serves the routes that `routes` adds to a server on 127.0.0.1:0 until the returned
/// [`Shutdown`] fires; returns the URL to connect to.
pub async fn serve_loopback(routes: impl FnOnce(&mut Server) -> Router) -> (String, Shutdown) {
    let listener = TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind 127.0.0.1:0");
    let addr = listener.local_addr().expect("a local address");
    let shutdown = Shutdown::new();
    let stop = shutdown.clone();
    let router = routes(&mut Server::builder());
    tokio::spawn(async move {
        router
            .serve_with_incoming_shutdown(TcpIncoming::from(listener), stop.triggered())
            .await
            .expect("the test server runs");
    });
    (format!("http://{addr}"), shutdown)
}

/// The field paths of the BadRequest violations in `status` (none without such details).
pub fn violations(status: &tonic::Status) -> Vec<String> {
    status
        .get_details_bad_request()
        .map(|b| b.field_violations.into_iter().map(|v| v.field).collect())
        .unwrap_or_default()
}

/// Asserts that `err` is INVALID_ARGUMENT and names `field` both in its message and among
/// its BadRequest violations (`case` names the request in the panics).
pub fn assert_invalid_field(case: &str, err: &tonic::Status, field: &str) {
    assert_eq!(err.code(), tonic::Code::InvalidArgument, "{case}: {err}");
    assert!(
        err.message().contains(field),
        "{case}: {:?} should name {field}",
        err.message()
    );
    assert!(
        violations(err).iter().any(|f| f == field),
        "{case}: {:?}",
        violations(err)
    );
}

/// Waits at most `timeout` until the health service at `url` reports `service` (`""`: the
/// server as a whole) SERVING, connecting again on each try.
pub async fn wait_serving(url: &str, service: &str, timeout: Duration) {
    eventually(
        timeout,
        &format!("{service:?} SERVING at {url}"),
        || async move {
            let channel = tonic::transport::Channel::from_shared(url.to_owned())
                .ok()?
                .connect()
                .await
                .ok()?;
            let request = HealthCheckRequest {
                service: service.to_owned(),
            };
            let resp = HealthClient::new(channel).check(request).await.ok()?;
            (resp.into_inner().status == ServingStatus::Serving as i32).then_some(())
        },
    )
    .await;
}
