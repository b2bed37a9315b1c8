//! Transport security and caller authentication for every Flotilla gRPC link
//! (docs/design.md §9 (S1, S3)).
//!
//! ```text
//!   server:  --tls-cert + --tls-key            → TLS
//!            + --tls-client-ca                 → mutual TLS (a client certificate signed by
//!                                                that CA is required)
//!            --auth-tokens-file FILE           → every RPC except grpc.health.v1 and
//!                                                reflection needs `authorization: Bearer T`
//!                                                with sha256(T) listed in FILE
//!   client:  https:// endpoints use --tls-ca as the trust root and present
//!            --tls-cert/--tls-key as the client identity (for mutual TLS)
//! ```
//!
//! The tokens file holds one SHA-256 hex digest per line, optionally followed by a name
//! (`sha256sum`'s output format works: `printf %s "$TOKEN" | sha256sum >> tokens`); `#`
//! starts a comment. Only digests are kept in memory, comparisons are constant-time, and
//! neither the token nor its digest is ever logged.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::task::{Context, Poll};

use subtle::ConstantTimeEq as _;
use tonic::transport::{Certificate, ClientTlsConfig, Endpoint, Identity, ServerTlsConfig};

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

    /// File of SHA-256 digests of the bearer tokens callers must present (one hex digest per
    /// line, `sha256sum` format). Without it the service accepts every caller.
    #[arg(long, env = "FLOTILLA_AUTH_TOKENS_FILE")]
    pub auth_tokens_file: Option<PathBuf>,
}

/// A security file that cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum SecurityError {
    /// A file could not be read.
    #[error("cannot read {path}")]
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
    /// The tokens file lists no digest (which would lock every caller out).
    #[error("{path}: lists no token digest")]
    NoTokens {
        /// The file.
        path: PathBuf,
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
    /// --tls-client-ca is set too).
    pub fn server_tls(&self) -> Result<Option<ServerTlsConfig>, SecurityError> {
        let (Some(cert), Some(key)) = (&self.tls_cert, &self.tls_key) else {
            return Ok(None);
        };
        let mut config =
            ServerTlsConfig::new().identity(Identity::from_pem(read(cert)?, read(key)?));
        if let Some(ca) = &self.tls_client_ca {
            config = config.client_ca_root(Certificate::from_pem(read(ca)?));
        }
        Ok(Some(config))
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

    /// The callers' token digests from --auth-tokens-file (`None` without it).
    pub fn auth_tokens(&self) -> Result<Option<AuthTokens>, SecurityError> {
        self.auth_tokens_file
            .as_deref()
            .map(AuthTokens::from_file)
            .transpose()
    }
}

/// SHA-256 digests of the accepted bearer tokens.
#[derive(Clone)]
pub struct AuthTokens {
    digests: Arc<Vec<[u8; 32]>>,
}

impl std::fmt::Debug for AuthTokens {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Digests are not secrets in the strict sense, but nothing about them needs printing.
        write!(f, "AuthTokens({} digests)", self.digests.len())
    }
}

impl AuthTokens {
    /// Parses a tokens file (see the module docs).
    pub fn from_file(path: &Path) -> Result<Self, SecurityError> {
        let text = read(path)?;
        let text = String::from_utf8_lossy(&text);
        let mut digests = Vec::new();
        for (i, line) in text.lines().enumerate() {
            let line = line.split('#').next().unwrap_or("").trim();
            let Some(hex) = line.split_whitespace().next() else {
                continue;
            };
            let digest = parse_hex32(hex).ok_or_else(|| SecurityError::TokenLine {
                path: path.to_owned(),
                line: i + 1,
            })?;
            digests.push(digest);
        }
        if digests.is_empty() {
            return Err(SecurityError::NoTokens {
                path: path.to_owned(),
            });
        }
        Ok(Self {
            digests: Arc::new(digests),
        })
    }

    /// Accepts tokens whose digests are given (for tests and embedding).
    pub fn from_tokens<'a>(tokens: impl IntoIterator<Item = &'a str>) -> Self {
        Self {
            digests: Arc::new(tokens.into_iter().map(sha256).collect()),
        }
    }

    /// Whether `token` is one of the accepted tokens. Every digest is compared, each in
    /// constant time, so the time taken says nothing about which or how much matched.
    pub fn accepts(&self, token: &str) -> bool {
        let digest = sha256(token);
        let mut ok = subtle::Choice::from(0u8);
        for d in self.digests.iter() {
            ok |= d.ct_eq(&digest);
        }
        ok.into()
    }

    /// Checks an `authorization` header value (`Bearer <token>`).
    fn check(&self, header: Option<&http::HeaderValue>) -> Result<(), &'static str> {
        let Some(value) = header else {
            return Err("missing authorization metadata (Bearer token)");
        };
        let value = value
            .to_str()
            .map_err(|_| "malformed authorization metadata")?;
        let token = value
            .strip_prefix("Bearer ")
            .or_else(|| value.strip_prefix("bearer "))
            .ok_or("authorization metadata must be `Bearer <token>`")?;
        if self.accepts(token.trim()) {
            Ok(())
        } else {
            Err("invalid bearer token")
        }
    }
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

/// Paths that never need a token: health checks and reflection (listing what a server
/// offers reveals nothing a caller could not learn from the published protos).
fn is_public(path: &str) -> bool {
    path.starts_with("/grpc.health.v1.") || path.starts_with("/grpc.reflection.")
}

/// A tower layer that answers UNAUTHENTICATED to every call without an accepted bearer
/// token (health and reflection excepted); with `None` it lets everything through.
#[derive(Clone, Debug, Default)]
pub struct AuthLayer {
    tokens: Option<AuthTokens>,
}

impl AuthLayer {
    /// A layer checking `tokens` (`None`: no authentication).
    pub fn new(tokens: Option<AuthTokens>) -> Self {
        Self { tokens }
    }
}

impl<S> tower::Layer<S> for AuthLayer {
    type Service = AuthService<S>;

    fn layer(&self, inner: S) -> Self::Service {
        AuthService {
            inner,
            tokens: self.tokens.clone(),
        }
    }
}

/// The service of [`AuthLayer`].
#[derive(Clone, Debug)]
pub struct AuthService<S> {
    inner: S,
    tokens: Option<AuthTokens>,
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

    fn call(&mut self, req: http::Request<B>) -> Self::Future {
        if let Some(tokens) = &self.tokens
            && !is_public(req.uri().path())
            && let Err(why) = tokens.check(req.headers().get(http::header::AUTHORIZATION))
        {
            tracing::debug!(path = req.uri().path(), why, "unauthenticated call refused");
            let response = tonic::Status::unauthenticated(why).into_http();
            return futures::future::Either::Right(std::future::ready(Ok(response)));
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
        let tokens = AuthTokens::from_file(&good).unwrap();
        assert_eq!(tokens.digests.len(), 1);
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
        assert!(tokens.check(Some(&h("Bearer t0k"))).is_ok());
        assert!(tokens.check(Some(&h("bearer t0k"))).is_ok());
        assert!(tokens.check(Some(&h("Bearer nope"))).is_err());
        assert!(tokens.check(Some(&h("Basic t0k"))).is_err());
        assert!(tokens.check(None).is_err());
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
}
