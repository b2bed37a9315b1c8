//! Connections: the api (`--server`), the controllers' dry-run services and member clusters,
//! and the rendering of a failed call (`tonic::Status` with its field violations).

use std::fmt::Write as _;
use std::time::Duration;

use anyhow::Context as _;
use flotilla_proto::v1::api_client::ApiClient;
use flotilla_runtime::SecurityArgs;
use tonic::service::interceptor::InterceptedService;
use tonic::transport::Channel;
use tonic_types::StatusExt as _;

/// Default address of the api: where `flotilla up` serves it.
pub const DEFAULT_SERVER: &str = "127.0.0.1:7400";

/// Where the api listens, and how long to wait for it.
#[derive(Clone, Debug, clap::Args)]
pub struct ServerArgs {
    /// Address of the Flotilla api service, `HOST:PORT` or `http://HOST:PORT`. The default is
    /// where `flotilla up` serves it.
    #[arg(
        long,
        env = "FLOTILLA_SERVER",
        default_value = DEFAULT_SERVER,
        value_name = "ADDR"
    )]
    pub server: String,

    /// How long to wait for a connection and for each request (`10s`, `500ms`); watches
    /// (`-w`) are not limited.
    #[arg(
        long,
        env = "FLOTILLA_REQUEST_TIMEOUT",
        default_value = "10s",
        value_parser = humantime::parse_duration,
        value_name = "DURATION"
    )]
    pub request_timeout: Duration,

    /// Bearer token sent with every call (for services started with --auth-tokens-file).
    /// Prefer the environment variable: a flag shows up in `ps`.
    #[arg(
        long,
        env = "FLOTILLA_TOKEN",
        hide_env_values = true,
        value_name = "TOKEN"
    )]
    pub token: Option<String>,

    /// A file holding the bearer token (instead of --token), e.g. what `flotilla credentials
    /// init` or `flotilla join --agent-token-file` wrote.
    #[arg(
        long,
        env = "FLOTILLA_TOKEN_FILE",
        value_name = "FILE",
        conflicts_with = "token"
    )]
    pub token_file: Option<std::path::PathBuf>,

    #[command(flatten)]
    pub tls: TlsArgs,
}

/// The client side of TLS: whom to trust, and the certificate to present for mutual TLS.
#[derive(Clone, Debug, Default, clap::Args)]
pub struct TlsArgs {
    /// CA (PEM) to trust for an `https://` address.
    #[arg(long, env = "FLOTILLA_TLS_CA", value_name = "FILE")]
    pub tls_ca: Option<std::path::PathBuf>,

    /// Client certificate (PEM) for mutual TLS; needs --tls-key.
    #[arg(
        long,
        env = "FLOTILLA_TLS_CERT",
        requires = "tls_key",
        value_name = "FILE"
    )]
    pub tls_cert: Option<std::path::PathBuf>,

    /// Client private key (PEM) for --tls-cert.
    #[arg(
        long,
        env = "FLOTILLA_TLS_KEY",
        requires = "tls_cert",
        value_name = "FILE"
    )]
    pub tls_key: Option<std::path::PathBuf>,
}

impl TlsArgs {
    /// These settings as the runtime's security settings of a client.
    pub fn security(&self) -> SecurityArgs {
        SecurityArgs {
            tls_ca: self.tls_ca.clone(),
            tls_cert: self.tls_cert.clone(),
            tls_key: self.tls_key.clone(),
            ..SecurityArgs::default()
        }
    }
}

/// A connection to a Flotilla service: a channel whose calls carry the bearer token (when
/// one is set) and the current span's W3C trace context.
pub type Conn = InterceptedService<Channel, Credentials>;

/// The interceptor of a [`Conn`].
#[derive(Clone)]
pub struct Credentials {
    authorization: Option<tonic::metadata::MetadataValue<tonic::metadata::Ascii>>,
}

impl std::fmt::Debug for Credentials {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Credentials")
            .field("token", &self.authorization.as_ref().map(|_| "***"))
            .finish()
    }
}

impl tonic::service::Interceptor for Credentials {
    fn call(
        &mut self,
        mut request: tonic::Request<()>,
    ) -> Result<tonic::Request<()>, tonic::Status> {
        if let Some(value) = &self.authorization {
            request
                .metadata_mut()
                .insert("authorization", value.clone());
        }
        flotilla_runtime::trace::inject(request.metadata_mut());
        Ok(request)
    }
}

// === impl ServerArgs ===

impl ServerArgs {
    /// An api client whose calls time out after `--request-timeout`.
    pub async fn api(&self) -> anyhow::Result<ApiClient<Conn>> {
        self.api_client(true).await
    }

    /// An api client for watch streams (no per-request timeout).
    pub async fn api_streaming(&self) -> anyhow::Result<ApiClient<Conn>> {
        self.api_client(false).await
    }

    async fn api_client(&self, limit_requests: bool) -> anyhow::Result<ApiClient<Conn>> {
        let channel = self
            .connect(&self.server, limit_requests)
            .await
            .with_context(|| hint_up(&self.server))?;
        Ok(ApiClient::new(channel))
    }

    /// Connects to a gRPC server at `addr` with these credentials and TLS settings; with
    /// `limit_requests`, every call on the connection times out after --request-timeout.
    pub async fn connect(&self, addr: &str, limit_requests: bool) -> anyhow::Result<Conn> {
        let from_file = match &self.token_file {
            Some(path) => Some(
                std::fs::read_to_string(path)
                    .with_context(|| format!("--token-file: cannot read {}", path.display()))?,
            ),
            None => None,
        };
        let authorization = self
            .token
            .as_deref()
            .or(from_file.as_deref())
            .map(|t| format!("Bearer {}", t.trim()).parse())
            .transpose()
            .map_err(|_| anyhow::anyhow!("--token holds characters not allowed in metadata"))?;
        let channel = connect(
            &self.tls.security(),
            addr,
            self.request_timeout,
            limit_requests,
        )
        .await?;
        Ok(InterceptedService::new(
            channel,
            Credentials { authorization },
        ))
    }
}

fn hint_up(addr: &str) -> String {
    format!(
        "cannot reach the Flotilla api at {addr} (is `flotilla up` running? set --server or \
         FLOTILLA_SERVER)"
    )
}

/// `http://` + `addr` unless it already names a scheme.
pub fn url(addr: &str) -> String {
    if addr.contains("://") {
        addr.to_owned()
    } else {
        format!("http://{addr}")
    }
}

/// Connects to a gRPC server at `addr`; with `limit_requests`, every call on the channel
/// times out after `timeout` too.
async fn connect(
    security: &SecurityArgs,
    addr: &str,
    timeout: Duration,
    limit_requests: bool,
) -> anyhow::Result<Channel> {
    let mut endpoint = security
        .endpoint(&url(addr))
        .with_context(|| format!("{addr:?} is not a valid address"))?
        .connect_timeout(timeout);
    if limit_requests {
        endpoint = endpoint.timeout(timeout);
    }
    endpoint
        .connect()
        .await
        .with_context(|| format!("connecting to {addr}"))
}

/// A failed call as an error: what was attempted, the gRPC code in words, the server's
/// message and, for INVALID_ARGUMENT, one line per field violation.
pub fn status_error(what: impl std::fmt::Display, status: &tonic::Status) -> anyhow::Error {
    anyhow::anyhow!("{what}: {}", describe_status(status))
}

/// The text of a failed call (see [`status_error`]).
pub fn describe_status(status: &tonic::Status) -> String {
    use tonic::Code;
    let code = match status.code() {
        Code::InvalidArgument => "invalid",
        Code::NotFound => "not found",
        Code::AlreadyExists => "already exists",
        Code::Aborted => "conflict (the object changed meanwhile)",
        Code::FailedPrecondition => "failed precondition",
        Code::OutOfRange => "out of range",
        Code::Unavailable => "unavailable",
        Code::DeadlineExceeded => "timed out",
        Code::PermissionDenied => "permission denied",
        Code::Unimplemented => "not implemented by the server",
        Code::ResourceExhausted => "too large",
        _ => "failed",
    };
    let violations = status
        .get_details_bad_request()
        .map(|b| b.field_violations)
        .unwrap_or_default();
    if violations.is_empty() {
        let message = status.message();
        if message.is_empty() {
            code.to_owned()
        } else {
            format!("{code}: {message}")
        }
    } else {
        let mut out = format!(
            "rejected by the server ({code}), {} problem{}:",
            violations.len(),
            if violations.len() == 1 { "" } else { "s" }
        );
        for v in violations {
            let _ = write!(out, "\n  {}: {}", v.field, v.description);
        }
        out
    }
}
