//! `flotilla gateway`: the Kubernetes API (docs/kubernetes-api.md) as a process of its own, in
//! front of an api it reaches over gRPC. `flotilla up` runs the same gateway inside itself;
//! docker-compose runs this one in the `kube-gateway` container.
//!
//! ```text
//!   kubectl ──https (bearer token)──► flotilla gateway ──gRPC, the caller's token──► api
//!   kubectl ──https (client cert)───► flotilla gateway ──gRPC over mTLS as
//!                                      service:kube-gateway, naming the cert's CN──► api
//! ```
//!
//! Its own certificate grants nothing by itself: every request is made as the caller (its
//! token, or the CN of the certificate the gateway verified), so it grants nothing the api
//! would not.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::Context as _;
use flotilla_runtime::Shutdown;

use crate::client::TlsArgs;

/// Serve Flotilla's Kubernetes API (kubectl, GitOps tools) in front of an api.
#[derive(Debug, clap::Args)]
#[command(after_help = "Examples:\n  \
    flotilla gateway --server 127.0.0.1:7400 --listen 127.0.0.1:7406\n  \
    flotilla gateway --server api:50051 --listen 0.0.0.0:6443 \\\n    \
    --kube-tls-cert /credentials/kube.pem --kube-tls-key /credentials/kube-key.pem\n\n\
    Without TLS kubectl sends no bearer token, so an api that requires tokens answers it 401:\n\
    serve TLS (`flotilla credentials init` makes a certificate) wherever tokens are on.")]
pub struct GatewayArgs {
    /// Where to serve the Kubernetes API.
    #[arg(long, env = "FLOTILLA_KUBE_LISTEN", default_value = "127.0.0.1:7406")]
    listen: SocketAddr,

    /// The api to serve (host:port, or https://host:port with --tls-ca).
    #[arg(long, env = "FLOTILLA_SERVER", default_value = "127.0.0.1:7400")]
    server: String,

    /// The TLS of the connection to the api.
    #[command(flatten)]
    tls: TlsArgs,

    /// Serve over TLS with this certificate chain (PEM); HTTP/2, as kubectl speaks it.
    #[arg(
        long,
        env = "FLOTILLA_KUBE_TLS_CERT",
        value_name = "PEM",
        requires = "kube_tls_key"
    )]
    kube_tls_cert: Option<PathBuf>,

    /// The private key of --kube-tls-cert (PEM).
    #[arg(
        long,
        env = "FLOTILLA_KUBE_TLS_KEY",
        value_name = "PEM",
        requires = "kube_tls_cert"
    )]
    kube_tls_key: Option<PathBuf>,

    /// Also accept client certificates signed by this CA (PEM), as kube-apiserver's
    /// --client-ca-file: a certificate's CN names the caller's principal
    /// (`system:flotilla:viewer`). Callers without one still use bearer tokens. Needs
    /// --kube-tls-cert, and the gateway's own client certificate to the api (--tls-cert,
    /// CN system:flotilla:service:kube-gateway), the one identity the api lets name another
    /// caller.
    #[arg(
        long,
        env = "FLOTILLA_KUBE_CLIENT_CA",
        value_name = "PEM",
        requires = "kube_tls_cert"
    )]
    kube_client_ca: Option<PathBuf>,

    /// Log filter (`info`, `flotilla_kube=debug`).
    #[arg(long, env = "FLOTILLA_LOG", default_value = "info")]
    log: String,
}

/// Runs `flotilla gateway` until SIGTERM or Ctrl-C.
pub async fn run(args: GatewayArgs) -> anyhow::Result<ExitCode> {
    flotilla_runtime::telemetry::init_tracing(
        &args.log,
        flotilla_runtime::telemetry::LogFormat::Text,
    )
    .context("--log")?;
    if args.kube_client_ca.is_some() {
        check_delegation(&args.tls)?;
    }
    let tls = match (&args.kube_tls_cert, &args.kube_tls_key) {
        (Some(cert), Some(key)) => Some(
            flotilla_runtime::tls::ServerTls::load(flotilla_runtime::tls::ServerTlsFiles {
                cert: cert.clone(),
                key: key.clone(),
                client_ca: args.kube_client_ca.clone(),
                client_cert_optional: true,
            })
            .context("--kube-tls-cert/--kube-tls-key/--kube-client-ca")?,
        ),
        _ => None,
    };
    let url = crate::client::url(&args.server);
    let channel = args
        .tls
        .security()
        .endpoint(&url)
        .with_context(|| format!("--server {}", args.server))?
        .connect_timeout(Duration::from_secs(5))
        .connect_lazy();
    let api = flotilla_proto::v1::api_client::ApiClient::new(channel);
    let listener = tokio::net::TcpListener::bind(args.listen)
        .await
        .with_context(|| format!("binding --listen {}", args.listen))?;
    let shutdown = Shutdown::new();
    shutdown.trigger_on_signals();
    let scheme = if tls.is_some() { "https" } else { "http" };
    tracing::info!(
        listen = %args.listen,
        api = %url,
        client_ca = ?args.kube_client_ca,
        "serving the Kubernetes API at {scheme}://{} over the api at {url}",
        args.listen
    );
    let stopped = shutdown.triggered();
    match tls {
        Some(tls) => flotilla_kube::gateway::serve_tls(listener, tls, api, stopped).await,
        None => flotilla_kube::gateway::serve(listener, api, stopped)
            .await
            .context("serving the Kubernetes API")?,
    }
    tracing::info!("stopped");
    Ok(ExitCode::SUCCESS)
}

/// With --kube-client-ca the gateway names its callers' certificates to the api, which
/// honours that from the gateway's own client certificate only: refuse to start without it
/// rather than answer every certificate holder 401.
fn check_delegation(tls: &TlsArgs) -> anyhow::Result<()> {
    let expected = flotilla_runtime::Principal::kube_gateway().cert_cn();
    let Some(cert) = &tls.tls_cert else {
        anyhow::bail!(
            "--kube-client-ca needs the gateway's own client certificate to the api: \
             --tls-cert/--tls-key with CN {expected} (and an https:// --server)"
        );
    };
    let cn = flotilla_runtime::tls::cert_file_cn(cert).context("--tls-cert")?;
    if cn.as_deref() != Some(expected.as_str()) {
        anyhow::bail!(
            "--kube-client-ca: the api takes a caller's certificate from the gateway's \
             certificate only, and --tls-cert {} has CN {:?}, not {expected}",
            cert.display(),
            cn.unwrap_or_default()
        );
    }
    Ok(())
}
