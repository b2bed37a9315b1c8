//! gRPC services under test on 127.0.0.1:0, and the BadRequest details of their errors.
//!
//! ```text
//!   serve_loopback(|s| s.add_service(svc))   serve until the Shutdown fires; the URL
//!   serve_runtime_loopback(config, &shutdown) a GrpcServer (health, reflection) on
//!                                            127.0.0.1:0 until shutdown; its address
//!   serve_mtls_loopback(dir, who, client_ca)  the same with mutual TLS from dir's files
//!   dev_certs(dir, principals)               run scripts/dev-certs.sh (a CA, certificates)
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
use crate::security::SecurityArgs;
use crate::server::{GrpcConfig, GrpcServer, Readiness, bind};
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

/// Serves a [`GrpcServer`] over Flotilla's descriptor set with `config` (TLS, client
/// certificates, tokens…) on 127.0.0.1:0 until `shutdown` fires; returns its address.
pub async fn serve_runtime_loopback(
    config: GrpcConfig,
    shutdown: &Shutdown,
) -> std::net::SocketAddr {
    let server = GrpcServer::new(
        &[flotilla_proto::FILE_DESCRIPTOR_SET],
        config,
        Readiness::new(),
        shutdown,
    )
    .await
    .expect("the test server starts");
    let listener = bind(std::net::SocketAddr::from(([127, 0, 0, 1], 0)))
        .await
        .expect("bind 127.0.0.1:0");
    let addr = listener.local_addr().expect("a local address");
    tokio::spawn(server.serve(listener, shutdown.clone()));
    addr
}

/// [`serve_runtime_loopback`] with mutual TLS: the server presents `dir/{who}.pem` (key
/// `dir/{who}-key.pem`) and requires client certificates signed by `dir/{client_ca}`. The
/// files are read again when they change. Returns the address and the [`Shutdown`] that stops
/// the server.
pub async fn serve_mtls_loopback(
    dir: &std::path::Path,
    who: &str,
    client_ca: &str,
) -> (std::net::SocketAddr, Shutdown) {
    let security = SecurityArgs {
        tls_cert: Some(dir.join(format!("{who}.pem"))),
        tls_key: Some(dir.join(format!("{who}-key.pem"))),
        tls_client_ca: Some(dir.join(client_ca)),
        ..SecurityArgs::default()
    };
    let tls = security.server_tls().expect("the server's TLS files load");
    let shutdown = Shutdown::new();
    let config = GrpcConfig::default().tls(tls).client_certs(true);
    (serve_runtime_loopback(config, &shutdown).await, shutdown)
}

/// Runs `scripts/dev-certs.sh dir principals…`, the script users run: a fresh CA in `dir`
/// with a certificate for every service and for each principal (`agent:edge1` →
/// `agent-edge1.pem`).
pub fn dev_certs(dir: &std::path::Path, principals: &[&str]) {
    let script =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scripts/dev-certs.sh");
    let out = std::process::Command::new("bash")
        .arg(&script)
        .arg(dir)
        .args(principals)
        .output()
        .expect("bash runs scripts/dev-certs.sh");
    assert!(
        out.status.success(),
        "scripts/dev-certs.sh failed (is openssl installed? apt-get install -y openssl): {}",
        String::from_utf8_lossy(&out.stderr)
    );
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
