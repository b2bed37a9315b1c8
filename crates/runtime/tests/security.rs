//! Transport security over real sockets (docs/design.md §9 (S1, S3)): a server started with
//! `--tls-cert/--tls-key/--tls-client-ca` accepts only clients holding a certificate of its
//! CA, and with `--auth-tokens-file` only calls carrying an accepted bearer token (health
//! and reflection stay open). The certificates come from `scripts/dev-certs.sh`, the same
//! script users run, so it is tested too.

#![allow(clippy::unwrap_used)] // test helpers outside #[test] fns unwrap too

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use flotilla_proto::v1;
use flotilla_proto::v1::scheduler_client::SchedulerClient;
use flotilla_runtime::security::SecurityArgs;
use flotilla_runtime::server::{GrpcConfig, GrpcServer, Readiness, bind};
use flotilla_runtime::{AuthTokens, Shutdown};
use tonic::Code;
use tonic::transport::Channel;
use tonic_health::pb::HealthCheckRequest;
use tonic_health::pb::health_client::HealthClient;

/// Runs `scripts/dev-certs.sh DIR` (a fresh CA and per-service certificates).
fn dev_certs(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("flotilla-certs-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scripts/dev-certs.sh");
    let out = Command::new("bash")
        .arg(&script)
        .arg(&dir)
        .output()
        .expect("bash runs scripts/dev-certs.sh");
    assert!(
        out.status.success(),
        "scripts/dev-certs.sh failed (is openssl installed? apt-get install -y openssl): {}",
        String::from_utf8_lossy(&out.stderr)
    );
    dir
}

fn security(dir: &Path, who: &str) -> SecurityArgs {
    SecurityArgs {
        tls_cert: Some(dir.join(format!("{who}.pem"))),
        tls_key: Some(dir.join(format!("{who}-key.pem"))),
        tls_client_ca: Some(dir.join("ca.pem")),
        tls_ca: Some(dir.join("ca.pem")),
        auth_tokens_file: None,
    }
}

async fn serve(certs: &Path, shutdown: &Shutdown) -> SocketAddr {
    let server_security = security(certs, "scheduler");
    let server = GrpcServer::new(
        &[flotilla_proto::FILE_DESCRIPTOR_SET],
        GrpcConfig::default()
            .tls(server_security.server_tls().unwrap())
            .auth_tokens(Some(AuthTokens::from_tokens(["right-token"]))),
        Readiness::new(),
        shutdown,
    )
    .await
    .unwrap();
    let listener = bind("127.0.0.1:0".parse().unwrap()).await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(server.serve(listener, shutdown.clone()));
    addr
}

async fn channel(client: &SecurityArgs, url: &str) -> Result<Channel, String> {
    client
        .endpoint(url)
        .map_err(|e| e.to_string())?
        .connect_timeout(Duration::from_secs(5))
        .timeout(Duration::from_secs(5))
        .connect()
        .await
        .map_err(|e| format!("{e:?}"))
}

async fn health(ch: Channel) -> Result<i32, tonic::Status> {
    HealthClient::new(ch)
        .check(HealthCheckRequest::default())
        .await
        .map(|r| r.into_inner().status)
}

/// Calls a method the server does not serve: UNIMPLEMENTED once authenticated,
/// UNAUTHENTICATED before.
async fn guarded_call(ch: Channel, token: Option<&str>) -> Code {
    let mut req = tonic::Request::new(v1::SimulateRequest::default());
    if let Some(t) = token {
        req.metadata_mut()
            .insert("authorization", format!("Bearer {t}").parse().unwrap());
    }
    SchedulerClient::new(ch)
        .simulate(req)
        .await
        .unwrap_err()
        .code()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mutual_tls_and_bearer_tokens() {
    let ours = dev_certs("ours");
    let theirs = dev_certs("theirs");
    let shutdown = Shutdown::new();
    let addr = serve(&ours, &shutdown).await;
    let url = format!("https://localhost:{}", addr.port());

    // A client of the same CA: health is open, everything else needs the token.
    let cli = security(&ours, "cli");
    let ch = channel(&cli, &url).await.unwrap();
    assert!(health(ch.clone()).await.is_ok(), "health needs no token");
    assert_eq!(guarded_call(ch.clone(), None).await, Code::Unauthenticated);
    assert_eq!(
        guarded_call(ch.clone(), Some("wrong-token")).await,
        Code::Unauthenticated
    );
    assert_eq!(
        guarded_call(ch, Some("right-token")).await,
        Code::Unimplemented,
        "an accepted token reaches the router"
    );

    // No client certificate: the handshake is refused.
    let anonymous = SecurityArgs {
        tls_ca: Some(ours.join("ca.pem")),
        ..SecurityArgs::default()
    };
    let refused = match channel(&anonymous, &url).await {
        Err(_) => true,
        Ok(ch) => health(ch).await.is_err(),
    };
    assert!(refused, "a client without a certificate is refused");

    // A certificate from another CA: refused.
    let mut stranger = security(&theirs, "cli");
    stranger.tls_ca = Some(ours.join("ca.pem"));
    let refused = match channel(&stranger, &url).await {
        Err(_) => true,
        Ok(ch) => health(ch).await.is_err(),
    };
    assert!(refused, "a client certificate of another CA is refused");

    // A client that trusts another CA does not accept the server.
    let wrong_root = security(&theirs, "cli");
    let refused = match channel(&wrong_root, &url).await {
        Err(_) => true,
        Ok(ch) => health(ch).await.is_err(),
    };
    assert!(
        refused,
        "a server certificate of an untrusted CA is refused"
    );

    // Plaintext against the TLS port gets nowhere.
    let plain = SecurityArgs::default();
    let refused = match channel(&plain, &format!("http://{addr}")).await {
        Err(_) => true,
        Ok(ch) => health(ch).await.is_err(),
    };
    assert!(refused, "plaintext is refused");

    shutdown.trigger();
    let _ = std::fs::remove_dir_all(&ours);
    let _ = std::fs::remove_dir_all(&theirs);
}
