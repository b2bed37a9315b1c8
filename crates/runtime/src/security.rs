//! Transport security and caller authentication for every Flotilla gRPC link
//! (docs/design.md §9 (S1, S3)).
//!
//! ```text
//!   server:  --tls-cert + --tls-key            → TLS
//!            + --tls-client-ca                 → mutual TLS (a client certificate signed by
//!                                                that CA is required)
//!            --auth-tokens-file FILE           → every RPC except grpc.health.v1 and
//!                                                reflection needs `authorization: Bearer T`
//!                                                with sha256(T) listed in FILE, or a client
//!                                                certificate whose CN names a principal
//!   client:  https:// endpoints use --tls-ca as the trust root and present
//!            --tls-cert/--tls-key as the client identity (for mutual TLS)
//! ```
//!
//! The tokens file holds one SHA-256 hex digest per line followed by the principal it
//! authenticates (`admin`, `viewer`, `service:<name>`, `agent:<cluster>`; see
//! [`crate::authz`]). A line without a name, or with `sha256sum`'s `-` (so that
//! `printf %s "$TOKEN" | sha256sum >> tokens` works), is `admin`; `#` starts a comment. The
//! file is read again when it changes ([`AuthTokens::keep_reloaded`]): a token removed from
//! it is refused within [`TOKENS_RELOAD_PERIOD`], without a restart. Only digests are kept
//! in memory, comparisons are constant-time, and neither the token nor its digest is ever
//! logged.
//!
//! [`AuthLayer`] authenticates every call (a token first, else the client certificate's CN
//! `system:flotilla:<principal>`) and authorizes it against [`crate::authz::rule`] before any
//! handler runs.

use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock};
use std::task::{Context, Poll};
use std::time::Duration;

use subtle::ConstantTimeEq as _;
use tonic::transport::{Certificate, ClientTlsConfig, Endpoint, Identity};

use crate::authz::{self, Access, Caller, NotAPrincipal, Principal};
use crate::shutdown::keep_reloaded;

/// TLS and authentication flags (flattened into [`crate::CommonArgs`]).
#[derive(Clone, Debug, Default, PartialEq, Eq, clap::Args)]
pub struct SecurityArgs {
    /// Certificate chain (PEM) this service presents: as a server on --grpc-addr, and as a
    /// client to other services over https. Needs --tls-key.
    #[arg(long, env = "FLOTILLA_TLS_CERT", requires = "tls_key")]
    pub tls_cert: Option<PathBuf>,

    /// Private key (PEM) for --tls-cert.
    #[arg(long, env = "FLOTILLA_TLS_KEY", requires = "tls_cert")]
    pub tls_key: Option<PathBuf>,

    /// CA (PEM) that must have signed every client's certificate: with it the gRPC server
    /// requires mutual TLS. Needs --tls-cert and --tls-key.
    #[arg(long, env = "FLOTILLA_TLS_CLIENT_CA", requires = "tls_cert")]
    pub tls_client_ca: Option<PathBuf>,

    /// CA (PEM) trusted when this service calls another over https (default: the system's
    /// roots are not used; an https endpoint without --tls-ca is refused).
    #[arg(long, env = "FLOTILLA_TLS_CA")]
    pub tls_ca: Option<PathBuf>,

    /// File of SHA-256 digests of the bearer tokens callers may present, each with the
    /// principal it authenticates: `<sha256 hex> admin|viewer|service:<name>|agent:<cluster>`
    /// per line (no name: admin). Read again when it changes. Without it (and without
    /// --tls-client-ca) the service accepts every caller as admin.
    #[arg(long, env = "FLOTILLA_AUTH_TOKENS_FILE")]
    pub auth_tokens_file: Option<PathBuf>,

    /// Serve on an address other than loopback with no credentials at all (no
    /// --auth-tokens-file, no --tls-client-ca), so that anyone who reaches it is admin.
    /// Without this flag such a service refuses to start. Only for private networks.
    #[arg(long, env = "FLOTILLA_ALLOW_UNAUTHENTICATED")]
    pub allow_unauthenticated: bool,
}

/// A security file that cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum SecurityError {
    /// A file could not be read (or written).
    #[error("cannot read or write {path}")]
    Read {
        /// The file.
        path: PathBuf,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
    /// A line of the tokens file is not a SHA-256 hex digest.
    #[error("{path}:{line}: not a SHA-256 hex digest (64 hex characters)")]
    TokenLine {
        /// The file.
        path: PathBuf,
        /// The 1-based line number.
        line: usize,
    },
    /// A line of the tokens file names no principal.
    #[error("{path}:{line}: {source}")]
    TokenPrincipal {
        /// The file.
        path: PathBuf,
        /// The 1-based line number.
        line: usize,
        /// What is wrong with the name.
        #[source]
        source: NotAPrincipal,
    },
    /// The tokens file lists no digest (which would lock every caller out).
    #[error("{path}: lists no token digest")]
    NoTokens {
        /// The file.
        path: PathBuf,
    },
    /// The server's certificate, key or client CA cannot be used.
    #[error(transparent)]
    Tls(#[from] crate::tls::TlsError),
    /// A service would accept every caller as admin beyond loopback.
    #[error(
        "refusing to serve {addr} without credentials: every caller would be admin. Set \
         --auth-tokens-file (tokens; `flotilla credentials init DIR` makes one) or \
         --tls-client-ca (mutual TLS), listen on loopback, or pass --allow-unauthenticated \
         on a private network"
    )]
    OpenBeyondLoopback {
        /// The address.
        addr: std::net::SocketAddr,
    },
    /// An https endpoint was asked for without a trust root.
    #[error("{endpoint} is https but --tls-ca is not set")]
    NoTrustRoot {
        /// The endpoint.
        endpoint: String,
    },
    /// tonic refused the endpoint or the TLS configuration.
    #[error("invalid endpoint or TLS configuration for {endpoint}")]
    Transport {
        /// The endpoint.
        endpoint: String,
        /// tonic's complaint.
        #[source]
        source: tonic::transport::Error,
    },
}

fn read(path: &Path) -> Result<Vec<u8>, SecurityError> {
    std::fs::read(path).map_err(|source| SecurityError::Read {
        path: path.to_owned(),
        source,
    })
}

// === impl SecurityArgs ===

impl SecurityArgs {
    /// The server's TLS configuration, when --tls-cert/--tls-key are set (mutual TLS when
    /// --tls-client-ca is set too). The server reads the files again while it runs
    /// ([`crate::tls`]).
    pub fn server_tls(&self) -> Result<Option<crate::tls::ServerTls>, SecurityError> {
        let (Some(cert), Some(key)) = (&self.tls_cert, &self.tls_key) else {
            return Ok(None);
        };
        let files = crate::tls::ServerTlsFiles {
            cert: cert.clone(),
            key: key.clone(),
            client_ca: self.tls_client_ca.clone(),
            client_cert_optional: false,
        };
        Ok(Some(crate::tls::ServerTls::load(files)?))
    }

    /// The client TLS configuration for calls to `https://` endpoints: --tls-ca as the only
    /// trust root, --tls-cert/--tls-key as the client identity when set. `None` without
    /// --tls-ca.
    pub fn client_tls(&self) -> Result<Option<ClientTlsConfig>, SecurityError> {
        let Some(ca) = &self.tls_ca else {
            return Ok(None);
        };
        let mut config = ClientTlsConfig::new().ca_certificate(Certificate::from_pem(read(ca)?));
        if let (Some(cert), Some(key)) = (&self.tls_cert, &self.tls_key) {
            config = config.identity(Identity::from_pem(read(cert)?, read(key)?));
        }
        Ok(Some(config))
    }

    /// An endpoint for `url`, with [`SecurityArgs::client_tls`] applied when it is
    /// `https://` (refused without --tls-ca: no silent fallback to the system's roots).
    pub fn endpoint(&self, url: &str) -> Result<Endpoint, SecurityError> {
        let endpoint =
            Endpoint::from_shared(url.to_owned()).map_err(|source| SecurityError::Transport {
                endpoint: url.to_owned(),
                source,
            })?;
        if !url.starts_with("https://") {
            return Ok(endpoint);
        }
        let tls = self
            .client_tls()?
            .ok_or_else(|| SecurityError::NoTrustRoot {
                endpoint: url.to_owned(),
            })?;
        endpoint
            .tls_config(tls)
            .map_err(|source| SecurityError::Transport {
                endpoint: url.to_owned(),
                source,
            })
    }

    /// Refuses to serve `addr` when it is beyond loopback and no caller would need a
    /// credential, unless --allow-unauthenticated says so (docs/design.md §9).
    pub fn check_open(&self, addr: std::net::SocketAddr) -> Result<(), SecurityError> {
        let credentials = self.auth_tokens_file.is_some() || self.tls_client_ca.is_some();
        if credentials || addr.ip().is_loopback() || self.allow_unauthenticated {
            Ok(())
        } else {
            Err(SecurityError::OpenBeyondLoopback { addr })
        }
    }

    /// The callers' token digests from --auth-tokens-file (`None` without it).
    pub fn auth_tokens(&self) -> Result<Option<AuthTokens>, SecurityError> {
        self.auth_tokens_file
            .as_deref()
            .map(AuthTokens::from_file)
            .transpose()
    }
}

/// How often [`AuthTokens::keep_reloaded`] looks at the tokens file.
pub const TOKENS_RELOAD_PERIOD: Duration = Duration::from_secs(2);

/// One accepted token: its SHA-256 digest and the principal it authenticates.
type TokenEntry = ([u8; 32], Principal);

/// SHA-256 digests of the accepted bearer tokens, with their principals; shared by clones,
/// and swapped whole when the file is read again.
#[derive(Clone)]
pub struct AuthTokens {
    entries: Arc<RwLock<Arc<Vec<TokenEntry>>>>,
    path: Option<PathBuf>,
}

impl std::fmt::Debug for AuthTokens {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Digests are not secrets in the strict sense, but nothing about them needs printing.
        write!(f, "AuthTokens({} digests)", self.current().len())
    }
}

impl AuthTokens {
    /// Parses a tokens file (see the module docs).
    pub fn from_file(path: &Path) -> Result<Self, SecurityError> {
        let entries = Self::parse_file(path)?;
        Ok(Self {
            entries: Arc::new(RwLock::new(Arc::new(entries))),
            path: Some(path.to_owned()),
        })
    }

    fn parse_file(path: &Path) -> Result<Vec<TokenEntry>, SecurityError> {
        let text = read(path)?;
        let text = String::from_utf8_lossy(&text);
        let mut entries = Vec::new();
        for (i, line) in text.lines().enumerate() {
            let line = line.split('#').next().unwrap_or("").trim();
            let mut words = line.split_whitespace();
            let Some(hex) = words.next() else {
                continue;
            };
            let digest = parse_hex32(hex).ok_or_else(|| SecurityError::TokenLine {
                path: path.to_owned(),
                line: i + 1,
            })?;
            let principal = match words.next() {
                None | Some("-") => Principal::Admin,
                Some(name) => {
                    Principal::parse(name).map_err(|source| SecurityError::TokenPrincipal {
                        path: path.to_owned(),
                        line: i + 1,
                        source,
                    })?
                }
            };
            entries.push((digest, principal));
        }
        if entries.is_empty() {
            return Err(SecurityError::NoTokens {
                path: path.to_owned(),
            });
        }
        Ok(entries)
    }

    /// Accepts the given tokens as `admin` (for tests and embedding).
    pub fn from_tokens<'a>(tokens: impl IntoIterator<Item = &'a str>) -> Self {
        Self::from_principals(tokens.into_iter().map(|t| (t, Principal::Admin)))
    }

    /// Accepts the given tokens, each as its principal (for tests and embedding).
    pub fn from_principals<'a>(tokens: impl IntoIterator<Item = (&'a str, Principal)>) -> Self {
        let entries = tokens.into_iter().map(|(t, p)| (sha256(t), p)).collect();
        Self {
            entries: Arc::new(RwLock::new(Arc::new(entries))),
            path: None,
        }
    }

    fn current(&self) -> Arc<Vec<TokenEntry>> {
        match self.entries.read() {
            Ok(e) => Arc::clone(&e),
            Err(poisoned) => Arc::clone(&poisoned.into_inner()),
        }
    }

    /// Reads the file again; on an error the tokens in use stay. Returns whether the set
    /// changed.
    pub fn reload(&self) -> Result<bool, SecurityError> {
        let Some(path) = &self.path else {
            return Ok(false);
        };
        let fresh = Self::parse_file(path)?;
        if *self.current() == fresh {
            return Ok(false);
        }
        let mut entries = match self.entries.write() {
            Ok(e) => e,
            Err(poisoned) => poisoned.into_inner(),
        };
        *entries = Arc::new(fresh);
        Ok(true)
    }

    /// Reads the file again every [`TOKENS_RELOAD_PERIOD`] until `shutdown`, so that added,
    /// revoked and rotated tokens take effect without a restart. A file that cannot be used
    /// keeps the tokens in use (logged once per change, never the content).
    pub async fn keep_reloaded(self, shutdown: crate::Shutdown) {
        let reloaded = || {
            let tokens = self.current().len();
            tracing::info!(tokens, "tokens file read again; its tokens are in use now");
        };
        let failed = |error: SecurityError| {
            tracing::error!(%error, "tokens file cannot be used; keeping the tokens read before");
        };
        let reload = || self.reload();
        keep_reloaded(&shutdown, TOKENS_RELOAD_PERIOD, reload, reloaded, failed).await;
    }

    /// The principal `token` authenticates, if it is accepted. Every digest is compared,
    /// each in constant time, so the time taken says nothing about which or how much matched.
    pub fn principal_of(&self, token: &str) -> Option<Principal> {
        let digest = sha256(token);
        let mut found = None;
        for (d, principal) in self.current().iter() {
            if bool::from(d.ct_eq(&digest)) && found.is_none() {
                found = Some(principal.clone());
            }
        }
        found
    }

    /// Whether `token` is one of the accepted tokens.
    pub fn accepts(&self, token: &str) -> bool {
        self.principal_of(token).is_some()
    }

    /// Checks an `authorization` header value (`Bearer <token>`).
    fn check(&self, header: &http::HeaderValue) -> Result<Principal, &'static str> {
        let value = header
            .to_str()
            .map_err(|_| "malformed authorization metadata")?;
        let token = value
            .strip_prefix("Bearer ")
            .or_else(|| value.strip_prefix("bearer "))
            .ok_or("authorization metadata must be `Bearer <token>`")?;
        self.principal_of(token.trim())
            .ok_or("invalid bearer token")
    }
}

/// A new random bearer token: 32 bytes from the operating system's generator, hex.
pub fn new_token() -> Result<String, ring::error::Unspecified> {
    let bytes: [u8; 32] = ring::rand::generate(&ring::rand::SystemRandom::new())?.expose();
    Ok(hex(&bytes))
}

/// The tokens-file line for `token` authenticating `principal`: `<sha256 hex> <principal>`.
pub fn tokens_line(token: &str, principal: &Principal) -> String {
    format!("{} {principal}\n", hex(&sha256(token)))
}

/// Appends `token`'s line for `principal` to the tokens file at `path`, after checking that
/// the file as it stands is usable (so that nothing is added to a broken file). Written in
/// place, not renamed over: the file is often a bind mount, which a rename would detach.
pub fn add_token(path: &Path, token: &str, principal: &Principal) -> Result<(), SecurityError> {
    AuthTokens::parse_file(path)?;
    let mut text = String::from_utf8_lossy(&read(path)?).into_owned();
    if !text.is_empty() && !text.ends_with('\n') {
        text.push('\n');
    }
    text.push_str(&tokens_line(token, principal));
    write(path, &text)
}

/// Removes every line of `principal` from the tokens file at `path` (in place, as
/// [`add_token`]); returns how many there were. Refuses to remove the last token, which would
/// lock every caller out.
pub fn revoke_principal(path: &Path, principal: &Principal) -> Result<usize, SecurityError> {
    let text = String::from_utf8_lossy(&read(path)?).into_owned();
    let name = principal.to_string();
    let mut removed = 0;
    let kept: String = text
        .lines()
        .filter(|line| {
            let content = line.split('#').next().unwrap_or("");
            let drop = content.split_whitespace().nth(1) == Some(name.as_str());
            removed += usize::from(drop);
            !drop
        })
        .map(|line| format!("{line}\n"))
        .collect();
    if removed > 0 {
        let has_token = kept
            .lines()
            .any(|l| !l.split('#').next().unwrap_or("").trim().is_empty());
        if !has_token {
            return Err(SecurityError::NoTokens {
                path: path.to_owned(),
            });
        }
        write(path, &kept)?;
    }
    Ok(removed)
}

fn write(path: &Path, text: &str) -> Result<(), SecurityError> {
    std::fs::write(path, text).map_err(|source| SecurityError::Read {
        path: path.to_owned(),
        source,
    })
}

fn hex(bytes: &[u8]) -> String {
    use std::fmt::Write as _;
    bytes
        .iter()
        .fold(String::with_capacity(bytes.len() * 2), |mut s, b| {
            let _ = write!(s, "{b:02x}");
            s
        })
}

fn sha256(token: &str) -> [u8; 32] {
    let d = ring::digest::digest(&ring::digest::SHA256, token.as_bytes());
    let mut out = [0u8; 32];
    out.copy_from_slice(d.as_ref());
    out
}

fn parse_hex32(hex: &str) -> Option<[u8; 32]> {
    if hex.len() != 64 {
        return None;
    }
    let mut out = [0u8; 32];
    for (i, byte) in out.iter_mut().enumerate() {
        *byte = u8::from_str_radix(hex.get(2 * i..2 * i + 2)?, 16).ok()?;
    }
    Some(out)
}

/// A tower layer that authenticates every call and authorizes it against
/// [`authz::rule`] before any handler runs (health and reflection are public):
///
/// - UNAUTHENTICATED without a principal: no accepted bearer token, and no client
///   certificate whose CN is `system:flotilla:<principal>`, while tokens or client
///   certificates are configured;
/// - PERMISSION_DENIED, naming the principal and the method, when the rule does not allow the
///   principal, and for a method without a rule;
/// - UNAUTHENTICATED for the Kubernetes API gateway's certificate without the CN of its
///   caller's certificate ([`authz::CLIENT_CN_METADATA`]), and for that metadata from anyone
///   but the gateway;
/// - otherwise the call goes on with the principal in its extensions ([`Caller`]).
///
/// Without tokens and client certificates every caller is `admin` (a loopback default).
#[derive(Clone, Debug, Default)]
pub struct AuthLayer {
    tokens: Option<AuthTokens>,
    client_certs: bool,
}

impl AuthLayer {
    /// A layer checking `tokens` (`None`: no tokens); `client_certs` says the server requires
    /// client certificates (mutual TLS), whose CN then names the principal.
    pub fn new(tokens: Option<AuthTokens>, client_certs: bool) -> Self {
        Self {
            tokens,
            client_certs,
        }
    }
}

impl<S> tower::Layer<S> for AuthLayer {
    type Service = AuthService<S>;

    fn layer(&self, inner: S) -> Self::Service {
        AuthService {
            inner,
            tokens: self.tokens.clone(),
            client_certs: self.client_certs,
        }
    }
}

/// The service of [`AuthLayer`].
#[derive(Clone, Debug)]
pub struct AuthService<S> {
    inner: S,
    tokens: Option<AuthTokens>,
    client_certs: bool,
}

impl<S> AuthService<S> {
    /// The caller's principal (see [`AuthLayer`]): the one its own credential names, or,
    /// when that credential is the Kubernetes API gateway's certificate, the one named by the
    /// client certificate the gateway verified for its caller ([`authz::CLIENT_CN_METADATA`]).
    /// The gateway's certificate alone authenticates nobody, so a gateway bug that drops the
    /// caller can never turn into the gateway's own rights; and nobody else may name a caller.
    fn authenticate<B>(&self, req: &http::Request<B>) -> Result<Principal, String> {
        let own = self.own_principal(req)?;
        let gateway = own == Principal::kube_gateway();
        match req.headers().get(authz::CLIENT_CN_METADATA) {
            None if gateway => Err(format!(
                "{own} authenticates no caller by itself: it names its caller's certificate in \
                 {} or passes on the caller's token",
                authz::CLIENT_CN_METADATA
            )),
            None => Ok(own),
            Some(_) if !gateway => Err(format!(
                "{} is honoured from {} only, not from {own}",
                authz::CLIENT_CN_METADATA,
                Principal::kube_gateway()
            )),
            Some(cn) => {
                let cn = cn.to_str().unwrap_or_default();
                match Principal::from_cert_cn(cn) {
                    Some(p) if p == Principal::kube_gateway() => {
                        Err(format!("a caller of {own} cannot be {own} itself"))
                    }
                    Some(p) => Ok(p),
                    None => Err(cn_names_no_principal(cn)),
                }
            }
        }
    }

    /// The principal of the caller's own credential (see [`AuthLayer`]).
    fn own_principal<B>(&self, req: &http::Request<B>) -> Result<Principal, String> {
        let header = req.headers().get(http::header::AUTHORIZATION);
        if let (Some(tokens), Some(header)) = (&self.tokens, header) {
            return tokens.check(header).map_err(str::to_owned);
        }
        let cn = peer_cert_cn(req);
        if let Some(principal) = cn.as_deref().and_then(Principal::from_cert_cn) {
            return Ok(principal);
        }
        if self.tokens.is_some() {
            return Err("missing authorization metadata (Bearer token)".to_owned());
        }
        if self.client_certs {
            return Err(cn_names_no_principal(&cn.unwrap_or_default()));
        }
        Ok(Principal::Admin)
    }
}

fn cn_names_no_principal(cn: &str) -> String {
    let shown = crate::status::bounded(cn, 128);
    format!(
        "the client certificate's CN {shown:?} names no principal (expected {}<principal>, \
         e.g. {}agent:edge1)",
        authz::CERT_CN_PREFIX,
        authz::CERT_CN_PREFIX
    )
}

/// The CN of the client certificate the caller presented over mutual TLS, if any.
fn peer_cert_cn<B>(req: &http::Request<B>) -> Option<String> {
    use tonic::transport::server::{TcpConnectInfo, TlsConnectInfo};
    let certs = req
        .extensions()
        .get::<TlsConnectInfo<TcpConnectInfo>>()?
        .peer_certs()?;
    crate::tls::cert_cn(certs.first()?.as_ref())
}

impl<S, B> tower::Service<http::Request<B>> for AuthService<S>
where
    S: tower::Service<http::Request<B>, Response = http::Response<tonic::body::Body>>,
    S::Future: Send + 'static,
{
    type Response = http::Response<tonic::body::Body>;
    type Error = S::Error;
    type Future =
        futures::future::Either<S::Future, std::future::Ready<Result<Self::Response, Self::Error>>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, mut req: http::Request<B>) -> Self::Future {
        let refuse = |status: tonic::Status| {
            futures::future::Either::Right(std::future::ready(Ok(status.into_http())))
        };
        let path = req.uri().path().to_owned();
        let shown = crate::status::bounded(&path, 256);
        let Some(access) = authz::rule(&path) else {
            tracing::warn!(path = %shown, "call of a method without an access rule refused");
            return refuse(tonic::Status::permission_denied(format!(
                "{shown} has no access rule: nobody may call it"
            )));
        };
        if access != Access::Public {
            let principal = match self.authenticate(&req) {
                Ok(p) => p,
                Err(why) => {
                    tracing::debug!(path, why, "unauthenticated call refused");
                    return refuse(tonic::Status::unauthenticated(why));
                }
            };
            if !principal.may(access) {
                tracing::info!(path, %principal, "call refused: not allowed for this principal");
                return refuse(tonic::Status::permission_denied(format!(
                    "{principal} may not call {shown} (allowed: {access})"
                )));
            }
            req.extensions_mut().insert(Caller(principal));
        }
        futures::future::Either::Left(self.inner.call(req))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_file_parses_sha256sum_output_and_rejects_garbage() {
        let dir = std::env::temp_dir().join(format!("flotilla-tokens-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let good = dir.join("good");
        // sha256("s3cret") as `sha256sum` prints it, a comment and a blank line.
        std::fs::write(
            &good,
            "# operators\n\n\
             1ec1c26b50d5d3c58d9583181af8076655fe00756bf7285940ba3670f99fcba0  alice\n",
        )
        .unwrap();
        let tokens = AuthTokens::from_file(&good).unwrap_err();
        assert!(
            matches!(tokens, SecurityError::TokenPrincipal { line: 3, .. }),
            "a name that is no principal is refused: {tokens}"
        );
        std::fs::write(
            &good,
            "# operators\n\n\
             1ec1c26b50d5d3c58d9583181af8076655fe00756bf7285940ba3670f99fcba0  -\n\
             ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad agent:edge1\n",
        )
        .unwrap();
        let tokens = AuthTokens::from_file(&good).unwrap();
        assert_eq!(tokens.current().len(), 2);
        assert_eq!(tokens.principal_of("s3cret"), Some(Principal::Admin));
        assert_eq!(
            tokens.principal_of("abc"),
            Some(Principal::Agent("edge1".into()))
        );
        // revoked: the agent's line goes, the file is read again
        std::fs::write(
            &good,
            "1ec1c26b50d5d3c58d9583181af8076655fe00756bf7285940ba3670f99fcba0 admin\n",
        )
        .unwrap();
        assert!(tokens.reload().unwrap());
        assert_eq!(tokens.principal_of("abc"), None);
        assert!(!tokens.reload().unwrap(), "unchanged");
        // a broken file keeps the tokens in use
        std::fs::write(&good, "garbage\n").unwrap();
        assert!(tokens.reload().is_err());
        assert!(tokens.accepts("s3cret"));
        assert!(!tokens.accepts("s3cre"));

        let bad = dir.join("bad");
        std::fs::write(&bad, "# x\nnot-a-digest\n").unwrap();
        assert!(matches!(
            AuthTokens::from_file(&bad),
            Err(SecurityError::TokenLine { line: 2, .. })
        ));
        let empty = dir.join("empty");
        std::fs::write(&empty, "# nothing\n").unwrap();
        assert!(matches!(
            AuthTokens::from_file(&empty),
            Err(SecurityError::NoTokens { .. })
        ));
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn tokens_are_issued_and_revoked_in_the_file() {
        let dir = std::env::temp_dir().join(format!("flotilla-issue-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("tokens");
        std::fs::write(&path, tokens_line("root", &Principal::Admin)).unwrap();
        let edge = Principal::Agent("edge1".into());
        let token = new_token().unwrap();
        assert_eq!(token.len(), 64);
        assert_ne!(token, new_token().unwrap());
        add_token(&path, &token, &edge).unwrap();
        let tokens = AuthTokens::from_file(&path).unwrap();
        assert_eq!(tokens.principal_of(&token), Some(edge.clone()));
        assert_eq!(revoke_principal(&path, &edge).unwrap(), 1);
        assert_eq!(revoke_principal(&path, &edge).unwrap(), 0);
        assert!(tokens.reload().unwrap());
        assert_eq!(tokens.principal_of(&token), None);
        assert!(tokens.accepts("root"));
        // the last token is never removed
        assert!(matches!(
            revoke_principal(&path, &Principal::Admin),
            Err(SecurityError::NoTokens { .. })
        ));
        // nothing is added to a broken file
        std::fs::write(&path, "garbage\n").unwrap();
        assert!(add_token(&path, &token, &edge).is_err());
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "garbage\n");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn accepts_only_listed_tokens() {
        let tokens = AuthTokens::from_tokens(["alpha", "beta"]);
        assert!(tokens.accepts("alpha"));
        assert!(tokens.accepts("beta"));
        assert!(!tokens.accepts("gamma"));
        assert!(!tokens.accepts(""));
        assert!(!tokens.accepts("alph"));
    }

    #[test]
    fn header_forms() {
        let tokens = AuthTokens::from_tokens(["t0k"]);
        let h = |s: &str| http::HeaderValue::from_str(s).unwrap();
        assert_eq!(tokens.check(&h("Bearer t0k")), Ok(Principal::Admin));
        assert!(tokens.check(&h("bearer t0k")).is_ok());
        assert!(tokens.check(&h("Bearer nope")).is_err());
        assert!(tokens.check(&h("Basic t0k")).is_err());
    }

    #[test]
    fn digest_matches_sha256sum() {
        // `printf %s abc | sha256sum`
        let expected =
            parse_hex32("ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad")
                .unwrap();
        assert_eq!(sha256("abc"), expected);
    }

    #[test]
    fn https_without_a_trust_root_is_refused() {
        let args = SecurityArgs::default();
        assert!(args.endpoint("http://127.0.0.1:1").is_ok());
        assert!(matches!(
            args.endpoint("https://127.0.0.1:1"),
            Err(SecurityError::NoTrustRoot { .. })
        ));
    }

    #[test]
    fn serving_beyond_loopback_needs_a_credential_or_the_explicit_flag() {
        let loopback: std::net::SocketAddr = "127.0.0.1:50051".parse().unwrap();
        let v6_loopback: std::net::SocketAddr = "[::1]:50051".parse().unwrap();
        let any: std::net::SocketAddr = "0.0.0.0:50051".parse().unwrap();
        let open = SecurityArgs::default();
        assert!(open.check_open(loopback).is_ok());
        assert!(open.check_open(v6_loopback).is_ok());
        let refused = open.check_open(any).unwrap_err();
        assert!(matches!(refused, SecurityError::OpenBeyondLoopback { .. }));
        assert!(
            refused.to_string().contains("--auth-tokens-file"),
            "{refused}"
        );
        for args in [
            SecurityArgs {
                auth_tokens_file: Some("/t".into()),
                ..SecurityArgs::default()
            },
            SecurityArgs {
                tls_client_ca: Some("/ca.pem".into()),
                ..SecurityArgs::default()
            },
            SecurityArgs {
                allow_unauthenticated: true,
                ..SecurityArgs::default()
            },
        ] {
            assert!(args.check_open(any).is_ok(), "{args:?}");
        }
    }
}
