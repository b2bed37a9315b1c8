//! Transport security over real sockets (docs/design.md §9 (S1, S3)): a server started with
//! `--tls-cert/--tls-key/--tls-client-ca` accepts only clients holding a certificate of its
//! CA, whose CN names the caller's principal (`system:flotilla:agent:edge1`); with
//! `--auth-tokens-file` a call may carry a bearer token instead, which then decides (health
//! and reflection stay open). Each principal may call only what the method table allows. The
//! certificates come from `scripts/dev-certs.sh`, the same script users run, so it is tested
//! too.

#![allow(clippy::unwrap_used)] // test helpers outside #[test] fns unwrap too

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use flotilla_proto::v1;
use flotilla_proto::v1::scheduler_client::SchedulerClient;
use flotilla_runtime::security::SecurityArgs;
use flotilla_runtime::server::GrpcConfig;
use flotilla_runtime::testing::grpc::{serve_mtls_loopback, serve_runtime_loopback};
use flotilla_runtime::{AuthTokens, Shutdown};
use tonic::Code;
use tonic::transport::Channel;
use tonic_health::pb::HealthCheckRequest;
use tonic_health::pb::health_client::HealthClient;

/// Runs `scripts/dev-certs.sh DIR` (a fresh CA and per-service certificates).
fn dev_certs(name: &str) -> PathBuf {
    dev_certs_for(name, &[])
}

/// [`dev_certs`] with certificates for `principals` too (`agent:edge1` → `agent-edge1.pem`).
fn dev_certs_for(name: &str, principals: &[&str]) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("flotilla-certs-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    flotilla_runtime::testing::grpc::dev_certs(&dir, principals);
    dir
}

fn security(dir: &Path, who: &str) -> SecurityArgs {
    SecurityArgs {
        tls_cert: Some(dir.join(format!("{who}.pem"))),
        tls_key: Some(dir.join(format!("{who}-key.pem"))),
        tls_client_ca: Some(dir.join("ca.pem")),
        tls_ca: Some(dir.join("ca.pem")),
        ..SecurityArgs::default()
    }
}

async fn serve(certs: &Path, shutdown: &Shutdown) -> SocketAddr {
    let server_security = security(certs, "scheduler");
    serve_runtime_loopback(
        GrpcConfig::default()
            .tls(server_security.server_tls().unwrap())
            .auth_tokens(Some(AuthTokens::from_tokens(["right-token"])))
            .client_certs(true),
        shutdown,
    )
    .await
}

/// A client certificate of `dir`'s CA with CN `flotilla-client` (as dev-certs.sh made them
/// before principals): it names no principal.
fn legacy_cert(dir: &Path) -> SecurityArgs {
    let run = |args: &[&str]| {
        let out = Command::new("openssl").args(args).output().unwrap();
        assert!(out.status.success(), "openssl {args:?}: {out:?}");
    };
    let key = dir.join("legacy-key.pem");
    let csr = dir.join("legacy.csr");
    let cert = dir.join("legacy.pem");
    let ext = dir.join("legacy.ext");
    std::fs::write(&ext, "extendedKeyUsage=clientAuth\n").unwrap();
    run(&[
        "req",
        "-newkey",
        "ec",
        "-pkeyopt",
        "ec_paramgen_curve:prime256v1",
        "-nodes",
        "-keyout",
        key.to_str().unwrap(),
        "-out",
        csr.to_str().unwrap(),
        "-subj",
        "/CN=flotilla-client",
    ]);
    run(&[
        "x509",
        "-req",
        "-in",
        csr.to_str().unwrap(),
        "-CA",
        dir.join("ca.pem").to_str().unwrap(),
        "-CAkey",
        dir.join("ca-key.pem").to_str().unwrap(),
        "-CAcreateserial",
        "-out",
        cert.to_str().unwrap(),
        "-days",
        "2",
        "-extfile",
        ext.to_str().unwrap(),
    ]);
    SecurityArgs {
        tls_cert: Some(cert),
        tls_key: Some(key),
        tls_client_ca: None,
        tls_ca: Some(dir.join("ca.pem")),
        ..SecurityArgs::default()
    }
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

/// Calls a method the server does not serve (Scheduler.Simulate, readable by admin, viewer
/// and services): UNIMPLEMENTED once authenticated and allowed, UNAUTHENTICATED or
/// PERMISSION_DENIED before.
async fn guarded_call(ch: Channel, token: Option<&str>) -> Code {
    guarded(ch, token).await.code()
}

async fn guarded(ch: Channel, token: Option<&str>) -> tonic::Status {
    let mut req = tonic::Request::new(v1::SimulateRequest::default());
    if let Some(t) = token {
        req.metadata_mut()
            .insert("authorization", format!("Bearer {t}").parse().unwrap());
    }
    SchedulerClient::new(ch).simulate(req).await.unwrap_err()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mutual_tls_and_bearer_tokens() {
    let ours = dev_certs_for("ours", &["agent:edge1", "viewer"]);
    let theirs = dev_certs("theirs");
    let shutdown = Shutdown::new();
    let addr = serve(&ours, &shutdown).await;
    let url = format!("https://localhost:{}", addr.port());

    // The CLI's certificate (CN system:flotilla:admin) is admin; a token, when sent, decides.
    let cli = security(&ours, "cli");
    let ch = channel(&cli, &url).await.unwrap();
    assert!(health(ch.clone()).await.is_ok(), "health needs no token");
    assert_eq!(
        guarded_call(ch.clone(), None).await,
        Code::Unimplemented,
        "the certificate's principal reaches the router"
    );
    assert_eq!(
        guarded_call(ch.clone(), Some("wrong-token")).await,
        Code::Unauthenticated,
        "a wrong token is never overlooked for the certificate"
    );
    assert_eq!(
        guarded_call(ch, Some("right-token")).await,
        Code::Unimplemented,
        "an accepted token reaches the router"
    );

    // An agent's certificate may not call a dry run; a viewer's may.
    let agent = channel(&security(&ours, "agent-edge1"), &url)
        .await
        .unwrap();
    let denied = guarded(agent, None).await;
    assert_eq!(denied.code(), Code::PermissionDenied, "{denied:?}");
    assert!(
        denied.message().contains("agent:edge1")
            && denied.message().contains("/flotilla.v1.Scheduler/Simulate"),
        "the refusal names the principal and the method: {}",
        denied.message()
    );
    let viewer = channel(&security(&ours, "viewer"), &url).await.unwrap();
    assert_eq!(guarded_call(viewer, None).await, Code::Unimplemented);

    // A certificate of the CA whose CN names no principal is no credential.
    let legacy = legacy_cert(&ours);
    let ch = channel(&legacy, &url).await.unwrap();
    assert_eq!(guarded_call(ch.clone(), None).await, Code::Unauthenticated);
    assert_eq!(
        guarded_call(ch, Some("right-token")).await,
        Code::Unimplemented
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

/// Whether `client` gets through to `url` (handshake and a health call) within `within`.
async fn reaches(client: &SecurityArgs, url: &str) -> bool {
    match channel(client, url).await {
        Err(_) => false,
        Ok(ch) => health(ch).await.is_ok(),
    }
}

/// Polls until `reaches(client, url) == want`, for at most 15 s (the server reads its files
/// every 2 s).
async fn until_reaches(client: &SecurityArgs, url: &str, want: bool) -> bool {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(15);
    while tokio::time::Instant::now() < deadline {
        if reaches(client, url).await == want {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    false
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_follows_its_rotated_certificate_and_client_ca_without_restart() {
    let old = dev_certs("rotate-old");
    let new = dev_certs("rotate-new");
    // The server's own files, which the "operator" replaces below.
    let live = std::env::temp_dir().join(format!("flotilla-certs-{}-live", std::process::id()));
    let _ = std::fs::remove_dir_all(&live);
    std::fs::create_dir_all(&live).unwrap();
    let install = |from: &Path| {
        for (src, dst) in [
            ("scheduler.pem", "server.pem"),
            ("scheduler-key.pem", "server-key.pem"),
            ("ca.pem", "client-ca.pem"),
        ] {
            // Written beside and renamed, as a careful operator (or cert-manager) does.
            let tmp = live.join(format!("{dst}.tmp"));
            std::fs::copy(from.join(src), &tmp).unwrap();
            std::fs::rename(&tmp, live.join(dst)).unwrap();
        }
    };
    install(&old);
    let (addr, shutdown) = serve_mtls_loopback(&live, "server", "client-ca.pem").await;
    let url = format!("https://localhost:{}", addr.port());

    let old_client = security(&old, "cli");
    let new_client = security(&new, "cli");
    assert!(
        reaches(&old_client, &url).await,
        "the first CA's client is served"
    );
    assert!(
        !reaches(&new_client, &url).await,
        "the next CA is not trusted yet"
    );

    // Rotation: the server's certificate and the client CA both change; no restart.
    install(&new);
    assert!(
        until_reaches(&new_client, &url, true).await,
        "the next CA's client is served after the files changed"
    );
    assert!(
        !reaches(&old_client, &url).await,
        "the retired CA's client (which also trusts only the old server CA) is refused"
    );

    // A broken file keeps the configuration in use instead of taking the server down.
    std::fs::write(
        live.join("client-ca.pem"),
        "-----BEGIN CERTIFICATE-----\nbroken\n",
    )
    .unwrap();
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert!(
        reaches(&new_client, &url).await,
        "an unusable CA file does not replace the one in use"
    );

    shutdown.trigger();
    for dir in [&old, &new, &live] {
        let _ = std::fs::remove_dir_all(dir);
    }
}

/// The Kubernetes API gateway verifies kubectl's client certificate itself and names its CN
/// in `x-flotilla-client-cn`: the api takes that name from the gateway's certificate only,
/// never takes the gateway's certificate alone for a caller, and refuses the metadata from
/// anyone else.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_the_kube_gateway_names_a_certificates_caller() {
    let certs = dev_certs_for("gateway", &["service:kube-gateway", "viewer"]);
    let shutdown = Shutdown::new();
    let addr = serve(&certs, &shutdown).await;
    let url = format!("https://localhost:{}", addr.port());
    let gateway = channel(&security(&certs, "service-kube-gateway"), &url)
        .await
        .unwrap();
    let naming = |cn: &str, token: Option<&str>| {
        let mut req = tonic::Request::new(v1::SimulateRequest::default());
        req.metadata_mut()
            .insert("x-flotilla-client-cn", cn.parse().unwrap());
        if let Some(t) = token {
            req.metadata_mut()
                .insert("authorization", format!("Bearer {t}").parse().unwrap());
        }
        req
    };
    let call =
        |ch: Channel, req| async move { SchedulerClient::new(ch).simulate(req).await.unwrap_err() };

    // the gateway names a viewer: the viewer's rights, not the gateway's
    let named = call(gateway.clone(), naming("system:flotilla:viewer", None)).await;
    assert_eq!(named.code(), Code::Unimplemented, "{named:?}");
    let agent = call(gateway.clone(), naming("system:flotilla:agent:edge1", None)).await;
    assert_eq!(agent.code(), Code::PermissionDenied, "{agent:?}");
    assert!(
        agent.message().contains("agent:edge1"),
        "the named caller is the one refused: {}",
        agent.message()
    );
    // the gateway's certificate alone is nobody
    let alone = guarded(gateway.clone(), None).await;
    assert_eq!(alone.code(), Code::Unauthenticated, "{alone:?}");
    assert!(
        alone.message().contains("service:kube-gateway")
            && alone.message().contains("x-flotilla-client-cn"),
        "{}",
        alone.message()
    );
    for cn in [
        "flotilla-client",
        "system:flotilla:service:kube-gateway",
        "",
    ] {
        let refused = call(gateway.clone(), naming(cn, None)).await;
        assert_eq!(refused.code(), Code::Unauthenticated, "{cn:?}: {refused:?}");
    }
    // a caller's token passed on by the gateway decides as it is, without the metadata
    assert_eq!(
        guarded_call(gateway.clone(), Some("right-token")).await,
        Code::Unimplemented
    );
    // nobody else may name a caller: not a viewer's certificate, not an admin's token
    let viewer = channel(&security(&certs, "viewer"), &url).await.unwrap();
    let forged = call(viewer, naming("system:flotilla:admin", None)).await;
    assert_eq!(forged.code(), Code::Unauthenticated, "{forged:?}");
    assert!(
        forged
            .message()
            .contains("honoured from service:kube-gateway only"),
        "{}",
        forged.message()
    );
    let forged = call(
        gateway,
        naming("system:flotilla:viewer", Some("right-token")),
    )
    .await;
    assert_eq!(forged.code(), Code::Unauthenticated, "{forged:?}");

    shutdown.trigger();
    let _ = std::fs::remove_dir_all(&certs);
}
