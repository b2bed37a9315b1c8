//! The gRPC servers' TLS, read again from its files while the server runs.
//!
//! tonic's own `ServerTlsConfig` is fixed when the server starts, so a renewed server
//! certificate, or a client CA that was rotated (docs/design.md §9, "life cycle"), would need
//! a restart of every service. Here the server accepts TCP itself and hands tonic finished
//! rustls streams: every new connection is accepted with the configuration read last, and
//! [`ServerTls::keep_reloaded`] reads the files again every [`TLS_RELOAD_PERIOD`]. Connections
//! already open keep the configuration they were accepted with, as with any TLS server.
//!
//! A change that cannot be used (a half-written key, a CA that does not parse) keeps the
//! configuration in use and is logged once, so a rotation in progress never takes a service
//! off the air.

use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock};
use std::time::Duration;

use futures::Stream;
use ring::digest::{Context, SHA256};
use tokio::net::{TcpListener, TcpStream};
use tokio_rustls::rustls::pki_types::pem::PemObject;
use tokio_rustls::rustls::pki_types::{CertificateDer, PrivateKeyDer};
use tokio_rustls::rustls::server::WebPkiClientVerifier;
use tokio_rustls::rustls::{self, RootCertStore, ServerConfig};
use tokio_rustls::server::TlsStream;
use tokio_stream::wrappers::ReceiverStream;

use crate::Shutdown;
use crate::shutdown::keep_reloaded;

/// How often [`ServerTls::keep_reloaded`] reads the certificate, key and client CA again.
pub const TLS_RELOAD_PERIOD: Duration = Duration::from_secs(2);

/// The longest a client may take over its TLS handshake before the connection is dropped, so
/// that slow or silent clients cannot hold accept slots.
pub const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// The files a TLS server is configured from.
#[derive(Clone, Debug)]
pub struct ServerTlsFiles {
    /// The server's certificate chain (PEM).
    pub cert: PathBuf,
    /// The server's private key (PEM).
    pub key: PathBuf,
    /// The CA that signs client certificates (PEM). When set, every client must present a
    /// certificate it signed (mutual TLS), unless [`ServerTlsFiles::client_cert_optional`].
    pub client_ca: Option<PathBuf>,
    /// With `client_ca`: a client may also come without a certificate (and then authenticates
    /// otherwise, by a bearer token, as at the Kubernetes API gateway). A certificate that
    /// is presented must still be the CA's.
    pub client_cert_optional: bool,
}

/// Why a TLS file cannot be used. Never holds the files' content.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    /// A file could not be read.
    #[error("cannot read {path}")]
    Read {
        /// The file.
        path: PathBuf,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
    /// A file does not hold what it should in PEM.
    #[error("{path}: {what}")]
    Pem {
        /// The file.
        path: PathBuf,
        /// What is missing or wrong.
        what: &'static str,
    },
    /// rustls refused the combination (e.g. a key that does not match the certificate).
    #[error("TLS configuration refused: {0}")]
    Config(String),
}

/// A server TLS configuration, shared by clones, that follows its files.
#[derive(Clone)]
pub struct ServerTls {
    files: Arc<ServerTlsFiles>,
    current: Arc<RwLock<Loaded>>,
}

struct Loaded {
    config: Arc<ServerConfig>,
    /// SHA-256 over the three files' bytes: a reload that finds the same bytes changes nothing.
    fingerprint: [u8; 32],
}

impl std::fmt::Debug for ServerTls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ServerTls")
            .field("files", &self.files)
            .finish_non_exhaustive()
    }
}

// === impl ServerTls ===

impl ServerTls {
    /// Reads the files; fails when any of them cannot be used.
    pub fn load(files: ServerTlsFiles) -> Result<Self, TlsError> {
        let (config, fingerprint) = build(&files)?;
        Ok(Self {
            files: Arc::new(files),
            current: Arc::new(RwLock::new(Loaded {
                config,
                fingerprint,
            })),
        })
    }

    /// Whether clients must present a certificate (a client CA is configured, and a
    /// certificate is not optional).
    pub fn requires_client_certs(&self) -> bool {
        self.files.client_ca.is_some() && !self.files.client_cert_optional
    }

    /// Reads the files again. `Ok(true)` when they changed and the new configuration is in
    /// use; an error keeps the configuration in use.
    pub fn reload(&self) -> Result<bool, TlsError> {
        let fingerprint = fingerprint(&self.files)?;
        if self.read().fingerprint == fingerprint {
            return Ok(false);
        }
        let (config, fingerprint) = build(&self.files)?;
        let mut current = self
            .current
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        *current = Loaded {
            config,
            fingerprint,
        };
        Ok(true)
    }

    /// Reads the files again every [`TLS_RELOAD_PERIOD`] until `shutdown`.
    pub async fn keep_reloaded(self, shutdown: Shutdown) {
        let reloaded = || {
            tracing::info!(
                cert = %self.files.cert.display(),
                client_ca = ?self.files.client_ca,
                "TLS files read again; new connections use them"
            );
        };
        let failed = |error: TlsError| {
            tracing::error!(%error, "TLS files cannot be used; keeping the configuration read before");
        };
        let reload = || self.reload();
        keep_reloaded(&shutdown, TLS_RELOAD_PERIOD, reload, reloaded, failed).await;
    }

    /// The accepted, handshaken connections on `listener`, for tonic's
    /// `serve_with_incoming_shutdown`. Handshakes run concurrently, each bounded by
    /// [`HANDSHAKE_TIMEOUT`]; a failed one is logged and dropped. Accepting stops when the
    /// stream is dropped.
    pub fn incoming(
        &self,
        listener: TcpListener,
    ) -> impl Stream<Item = Result<TlsStream<TcpStream>, std::io::Error>> + use<> {
        let (tx, rx) = tokio::sync::mpsc::channel(64);
        let tls = self.clone();
        tokio::spawn(async move {
            loop {
                let accepted = tokio::select! {
                    () = tx.closed() => return,
                    accepted = listener.accept() => accepted,
                };
                let (tcp, peer) = match accepted {
                    Ok(accepted) => accepted,
                    Err(error) => {
                        // Out of descriptors and the like: wait a little rather than spin.
                        tracing::warn!(%error, "accepting a connection failed");
                        tokio::time::sleep(Duration::from_millis(100)).await;
                        continue;
                    }
                };
                let _ = tcp.set_nodelay(true);
                let acceptor = tokio_rustls::TlsAcceptor::from(tls.read().config.clone());
                let tx = tx.clone();
                tokio::spawn(async move {
                    match tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(tcp)).await {
                        Ok(Ok(stream)) => {
                            let _ = tx.send(Ok(stream)).await;
                        }
                        Ok(Err(error)) => {
                            tracing::debug!(%peer, %error, "TLS handshake refused");
                        }
                        Err(_) => tracing::debug!(%peer, "TLS handshake timed out"),
                    }
                });
            }
        });
        ReceiverStream::new(rx)
    }

    fn read(&self) -> std::sync::RwLockReadGuard<'_, Loaded> {
        self.current
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

/// The CN of the first certificate `stream`'s client presented (rustls verified it against
/// the client CA during the handshake), if any.
pub fn peer_cn(stream: &TlsStream<TcpStream>) -> Option<String> {
    cert_cn(stream.get_ref().1.peer_certificates()?.first()?.as_ref())
}

/// The CN of the first certificate in the PEM file at `path`.
pub fn cert_file_cn(path: &Path) -> Result<Option<String>, TlsError> {
    Ok(certificates(path)?
        .first()
        .and_then(|c| cert_cn(c.as_ref())))
}

/// The subject's CN of a DER certificate.
pub fn cert_cn(der: &[u8]) -> Option<String> {
    let (_, cert) = x509_parser::parse_x509_certificate(der).ok()?;
    let cn = cert.subject().iter_common_name().next()?.as_str().ok()?;
    Some(cn.to_owned())
}

fn read(path: &Path) -> Result<Vec<u8>, TlsError> {
    std::fs::read(path).map_err(|source| TlsError::Read {
        path: path.to_owned(),
        source,
    })
}

fn fingerprint(files: &ServerTlsFiles) -> Result<[u8; 32], TlsError> {
    let mut hash = Context::new(&SHA256);
    for path in [
        Some(&files.cert),
        Some(&files.key),
        files.client_ca.as_ref(),
    ]
    .into_iter()
    .flatten()
    {
        let bytes = read(path)?;
        hash.update(&(bytes.len() as u64).to_be_bytes());
        hash.update(&bytes);
    }
    let mut out = [0; 32];
    out.copy_from_slice(hash.finish().as_ref());
    Ok(out)
}

fn certificates(path: &Path) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    let bytes = read(path)?;
    let certs = CertificateDer::pem_slice_iter(&bytes)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|_| TlsError::Pem {
            path: path.to_owned(),
            what: "not a PEM certificate",
        })?;
    if certs.is_empty() {
        return Err(TlsError::Pem {
            path: path.to_owned(),
            what: "holds no certificate",
        });
    }
    Ok(certs)
}

/// The configuration from `files`, and the fingerprint of the bytes it was built from. The
/// fingerprint is taken first, so a file that changes while it is read is read again at the
/// next period.
fn build(files: &ServerTlsFiles) -> Result<(Arc<ServerConfig>, [u8; 32]), TlsError> {
    let fingerprint = fingerprint(files)?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = ServerConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .map_err(|e| TlsError::Config(e.to_string()))?;
    let builder = match &files.client_ca {
        None => builder.with_no_client_auth(),
        Some(ca) => {
            let mut roots = RootCertStore::empty();
            for cert in certificates(ca)? {
                roots.add(cert).map_err(|_| TlsError::Pem {
                    path: ca.clone(),
                    what: "not a usable CA certificate",
                })?;
            }
            let verifier = WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider);
            let verifier = if files.client_cert_optional {
                verifier.allow_unauthenticated()
            } else {
                verifier
            };
            let verifier = verifier
                .build()
                .map_err(|e| TlsError::Config(e.to_string()))?;
            builder.with_client_cert_verifier(verifier)
        }
    };
    let key_bytes = read(&files.key)?;
    let key = PrivateKeyDer::from_pem_slice(&key_bytes).map_err(|_| TlsError::Pem {
        path: files.key.clone(),
        what: "holds no PEM private key",
    })?;
    let mut config = builder
        .with_single_cert(certificates(&files.cert)?, key)
        .map_err(|e| TlsError::Config(e.to_string()))?;
    config.alpn_protocols = vec![b"h2".to_vec()];
    Ok((Arc::new(config), fingerprint))
}
