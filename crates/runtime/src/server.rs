//! The gRPC server every service runs: `grpc.health.v1` (SERVING only once its caches
//! synced), server reflection v1 and v1alpha, a request timeout, a decode limit and graceful
//! shutdown.
//!
//! ```text
//!   GrpcServer::new(descriptor sets, config, readiness, shutdown)
//!     Server::builder().timeout(t)
//!       .trace_fn(span "grpc.server" per RPC, parent = the caller's `traceparent` metadata)
//!       .layer(GrpcMetricsLayer)          (requests by method and code, latency by method)
//!       + grpc.health.v1.Health           ("" NOT_SERVING → SERVING when readiness is ready,
//!                                           NOT_SERVING again on shutdown)
//!       + grpc.reflection.v1 + v1alpha    (your sets + tonic-health's)
//!       + your services (.map_router(|r| r.add_service(decode_limited!(XServer::new(svc)))))
//!   .serve(listener, shutdown)  — stops accepting on shutdown, drains in-flight calls
//! ```

use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use tokio::net::TcpListener;
use tokio::sync::watch;
use tonic::transport::Server;
use tonic::transport::server::{Router as TonicRouter, TcpIncoming};
use tonic_health::ServingStatus;
use tonic_health::server::HealthReporter;
use tower::layer::util::{Identity, Stack};

use crate::reflector::Cache;
use crate::security::{AuthLayer, AuthTokens};
use crate::shutdown::Shutdown;
use crate::tls::ServerTls;

pub mod metrics;

pub use self::metrics::{GrpcMetricsLayer, KnownMethods};

/// The router of a [`GrpcServer`]: tonic's, with [`GrpcMetricsLayer`] in front (so refused
/// calls are counted too) and [`AuthLayer`] behind it.
pub type Router = TonicRouter<Stack<AuthLayer, Stack<GrpcMetricsLayer, Identity>>>;

/// The span of one incoming RPC: `grpc.server` named after the path
/// (`/flotilla.v1.Api/GetCluster`) with `rpc.system`, `rpc.service`, `rpc.method`, whose
/// parent is the caller's W3C `traceparent` metadata (a root span without one). Headers,
/// metadata (e.g. `authorization`) and the request body are never recorded.
pub fn rpc_span(req: &http::Request<()>) -> tracing::Span {
    let path = req.uri().path();
    let mut parts = path.trim_start_matches('/').splitn(2, '/');
    let service = parts.next().unwrap_or("");
    let method = parts.next().unwrap_or("");
    let span = tracing::info_span!(
        "grpc.server",
        otel.name = %path,
        otel.kind = "server",
        rpc.system = "grpc",
        rpc.service = %service,
        rpc.method = %method,
    );
    let cx = crate::trace::extract(req.headers());
    let _ = tracing_opentelemetry::OpenTelemetrySpanExt::set_parent(&span, cx);
    span
}

/// The largest request message a Flotilla server decodes: 1.5 MiB (etcd's default
/// `--max-request-bytes`, so that anything accepted also fits in one etcd write).
pub const MAX_DECODING_MESSAGE_SIZE: usize = 1536 * 1024;

/// Applies [`MAX_DECODING_MESSAGE_SIZE`] to a generated tonic server
/// (`decode_limited!(SchedulerServer::new(svc))`). Generated servers have the method but
/// share no trait, hence a macro.
#[macro_export]
macro_rules! decode_limited {
    ($server:expr) => {
        $server.max_decoding_message_size($crate::server::MAX_DECODING_MESSAGE_SIZE)
    };
}

/// Why a server could not start or stopped with an error.
#[derive(Debug, thiserror::Error)]
pub enum ServerError {
    /// A file-descriptor set given for reflection does not decode.
    #[error("cannot build the reflection service")]
    Reflection(#[source] tonic_reflection::server::Error),
    /// The address could not be bound.
    #[error("cannot listen on {addr}")]
    Bind {
        /// The address.
        addr: std::net::SocketAddr,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
    /// The gRPC transport failed.
    #[error("gRPC server failed")]
    Transport(#[source] tonic::transport::Error),
    /// The admin HTTP server failed.
    #[error("admin server failed")]
    Io(#[source] std::io::Error),
}

/// Reflection v1 and v1alpha resolving every type of `descriptor_sets` (and grpc.health.v1)
/// and listing the services `listed` plus each reflection version itself, as it does when it
/// lists everything; with nothing `listed`, they list every service of the sets.
pub fn reflection_services(
    descriptor_sets: &[&'static [u8]],
    listed: &[String],
) -> Result<
    (
        tonic_reflection::server::v1::ServerReflectionServer<
            impl tonic_reflection::server::v1::ServerReflection,
        >,
        tonic_reflection::server::v1alpha::ServerReflectionServer<
            impl tonic_reflection::server::v1alpha::ServerReflection,
        >,
    ),
    tonic_reflection::server::Error,
> {
    let reflection = |itself: &str| {
        let mut b = tonic_reflection::server::Builder::configure()
            .register_encoded_file_descriptor_set(tonic_health::pb::FILE_DESCRIPTOR_SET);
        for set in descriptor_sets {
            b = b.register_encoded_file_descriptor_set(set);
        }
        if !listed.is_empty() {
            b = b.with_service_name(itself);
        }
        for name in listed {
            b = b.with_service_name(name.clone());
        }
        b
    };
    Ok((
        reflection("grpc.reflection.v1.ServerReflection").build_v1()?,
        reflection("grpc.reflection.v1alpha.ServerReflection").build_v1alpha()?,
    ))
}

/// Binds a TCP listener (use port 0 in tests, then `local_addr()`).
pub async fn bind(addr: std::net::SocketAddr) -> Result<TcpListener, ServerError> {
    TcpListener::bind(addr)
        .await
        .map_err(|source| ServerError::Bind { addr, source })
}

/// What a service must have synced before it is ready: a set of named `watch::Receiver<bool>`
/// (typically [`Cache::ready`]). Cloneable; shared by the admin `/readyz` and gRPC health.
#[derive(Clone, Debug, Default)]
pub struct Readiness {
    parts: Arc<Mutex<Vec<Condition>>>,
}

/// One named readiness condition.
type Condition = (String, watch::Receiver<bool>);

// === impl Readiness ===

impl Readiness {
    /// Nothing to wait for yet (ready until something is added).
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds a condition; register every cache before serving.
    pub fn add(&self, name: impl Into<String>, ready: watch::Receiver<bool>) {
        self.parts
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push((name.into(), ready));
    }

    /// Adds a cache's "has synced" signal.
    pub fn add_cache<K>(&self, name: impl Into<String>, cache: &Cache<K>) {
        self.add(name, cache.ready());
    }

    fn parts(&self) -> Vec<Condition> {
        self.parts
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// The names of the conditions that do not hold yet.
    pub fn pending(&self) -> Vec<String> {
        self.parts()
            .into_iter()
            .filter(|(_, rx)| !*rx.borrow())
            .map(|(n, _)| n)
            .collect()
    }

    /// Whether every condition holds.
    pub fn is_ready(&self) -> bool {
        self.pending().is_empty()
    }

    /// Waits until every condition holds (a condition whose sender is gone never will).
    pub async fn wait_ready(&self) {
        loop {
            let parts = self.parts();
            for (_, mut rx) in parts.iter().cloned() {
                if rx.wait_for(|r| *r).await.is_err() {
                    std::future::pending::<()>().await;
                }
            }
            // Something may have been added while we waited.
            if self.parts().len() == parts.len() {
                return;
            }
        }
    }
}

/// Options of a [`GrpcServer`].
#[derive(Clone, Debug)]
pub struct GrpcConfig {
    /// The longest a request may take. Default 30 s; a client's shorter `grpc-timeout` wins.
    pub request_timeout: Duration,
    /// Fully qualified services (e.g. `flotilla.v1.Scheduler`) whose health follows the
    /// server's ("" always does). When set, reflection lists only these (with health and
    /// reflection); empty: every service of the descriptor sets.
    pub health_services: Vec<String>,
    /// TLS (mutual when it names a client CA), read again while serving; `None` serves
    /// plaintext.
    pub tls: Option<ServerTls>,
    /// Bearer tokens (with their principals) a call may authenticate with; `None`: none.
    pub auth_tokens: Option<AuthTokens>,
    /// Whether `tls` requires client certificates, whose CN then names the caller's principal.
    pub client_certs: bool,
}

impl Default for GrpcConfig {
    fn default() -> Self {
        Self {
            request_timeout: Duration::from_secs(30),
            health_services: Vec::new(),
            tls: None,
            auth_tokens: None,
            client_certs: false,
        }
    }
}

impl GrpcConfig {
    /// Sets the request timeout.
    pub fn request_timeout(mut self, timeout: Duration) -> Self {
        self.request_timeout = timeout;
        self
    }

    /// Reports `service`'s health along with the server's.
    pub fn health_service(mut self, service: impl Into<String>) -> Self {
        self.health_services.push(service.into());
        self
    }

    setters! {
        /// Serves TLS (`None`: plaintext).
        tls(tls: Option<ServerTls>);
        /// Authenticates calls by `tokens` (`None`: no tokens).
        auth_tokens(tokens: Option<AuthTokens>);
        /// Says that `tls` requires client certificates (mutual TLS).
        client_certs(required: bool);
    }
}

/// A tonic router with health and reflection already in it.
#[derive(Debug)]
pub struct GrpcServer {
    router: Router,
    health: HealthReporter,
    tls: Option<ServerTls>,
}

// === impl GrpcServer ===

impl GrpcServer {
    /// Builds the router: health (NOT_SERVING until `readiness` is ready; NOT_SERVING again
    /// on `shutdown`) and reflection v1 and v1alpha over `descriptor_sets` plus the health
    /// service's own descriptors. Must be called inside a tokio runtime.
    pub async fn new(
        descriptor_sets: &[&'static [u8]],
        config: GrpcConfig,
        readiness: Readiness,
        shutdown: &Shutdown,
    ) -> Result<Self, ServerError> {
        let (health, health_service) = tonic_health::server::health_reporter();
        let mut names = vec![String::new()];
        names.extend(config.health_services.iter().cloned());
        for n in &names {
            health
                .set_service_status(n, ServingStatus::NotServing)
                .await;
        }
        tokio::spawn(follow_readiness(
            health.clone(),
            names,
            readiness,
            shutdown.clone(),
        ));

        // Reflection lists only what this port serves (its own services, health and
        // reflection), though it resolves every type of the sets: a grpcurl user is not led
        // to call another service's method here and get a bare UNIMPLEMENTED.
        let listed: Vec<String> = if config.health_services.is_empty() {
            Vec::new()
        } else {
            std::iter::once("grpc.health.v1.Health".to_owned())
                .chain(config.health_services.iter().cloned())
                .collect()
        };
        let (v1, v1alpha) =
            reflection_services(descriptor_sets, &listed).map_err(ServerError::Reflection)?;

        if let Some(tls) = &config.tls {
            tokio::spawn(tls.clone().keep_reloaded(shutdown.clone()));
        }
        let router = Server::builder()
            .timeout(config.request_timeout)
            .trace_fn(rpc_span)
            .layer(GrpcMetricsLayer::new(KnownMethods::from_descriptor_sets(
                &known_sets(descriptor_sets),
            )))
            .layer(AuthLayer::new(config.auth_tokens, config.client_certs))
            .add_service(decode_limited!(health_service))
            .add_service(decode_limited!(v1))
            .add_service(decode_limited!(v1alpha));
        Ok(Self {
            router,
            health,
            tls: config.tls,
        })
    }

    /// The health reporter, to set a service's status by hand.
    pub fn health(&self) -> &HealthReporter {
        &self.health
    }

    /// Adds services: `server.map_router(|r| r.add_service(decode_limited!(X::new(svc))))`.
    pub fn map_router(mut self, f: impl FnOnce(Router) -> Router) -> Self {
        self.router = f(self.router);
        self
    }

    /// The router, to serve it some other way.
    pub fn into_router(self) -> Router {
        self.router
    }

    /// Serves on `listener` until `shutdown` fires, then stops accepting and drains the
    /// calls in flight.
    pub async fn serve(self, listener: TcpListener, shutdown: Shutdown) -> Result<(), ServerError> {
        let served = match &self.tls {
            Some(tls) => {
                self.router
                    .serve_with_incoming_shutdown(tls.incoming(listener), shutdown.triggered())
                    .await
            }
            None => {
                let incoming = TcpIncoming::from(listener).with_nodelay(Some(true));
                self.router
                    .serve_with_incoming_shutdown(incoming, shutdown.triggered())
                    .await
            }
        };
        served.map_err(ServerError::Transport)
    }
}

async fn follow_readiness(
    health: HealthReporter,
    names: Vec<String>,
    readiness: Readiness,
    shutdown: Shutdown,
) {
    tokio::select! {
        () = shutdown.triggered() => return,
        () = readiness.wait_ready() => {}
    }
    for n in &names {
        health.set_service_status(n, ServingStatus::Serving).await;
    }
    tracing::info!("caches synced: serving");
    shutdown.triggered().await;
    for n in &names {
        health
            .set_service_status(n, ServingStatus::NotServing)
            .await;
    }
}

/// The descriptor sets whose methods the metrics name: the services' own, health and both
/// reflection versions.
fn known_sets<'a>(descriptor_sets: &[&'a [u8]]) -> Vec<&'a [u8]> {
    let mut sets: Vec<&'a [u8]> = vec![
        tonic_health::pb::FILE_DESCRIPTOR_SET,
        tonic_reflection::pb::v1::FILE_DESCRIPTOR_SET,
        tonic_reflection::pb::v1alpha::FILE_DESCRIPTOR_SET,
    ];
    sets.extend_from_slice(descriptor_sets);
    sets
}
