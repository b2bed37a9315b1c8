//! The few lines every service's `main` shares: logs, metrics, signals, store, then serving
//! gRPC and the admin endpoints until SIGTERM/SIGINT.
//!
//! ```text
//!   let rt = Runtime::start(&args.common).await?;      // tracing, Prometheus, signals, store
//!   ... build caches (rt.readiness.add_cache), controllers (rt.shutdown), GrpcServer ...
//!   rt.serve(grpc_server).await?;                      // --grpc-addr + --admin-addr
//! ```

use std::sync::Arc;

use flotilla_store::Store;
use metrics_exporter_prometheus::PrometheusHandle;
use tokio::net::TcpListener;

use crate::admin::serve_admin;
use crate::args::{ArgError, CommonArgs, ConnectError};
use crate::server::{GrpcConfig, GrpcServer, Readiness, ServerError, bind};
use crate::shutdown::Shutdown;
use crate::telemetry::{LogFormat, TelemetryError, init_tracing, install_metrics};

/// Why a service could not start.
#[derive(Debug, thiserror::Error)]
pub enum BootstrapError {
    /// Logs or metrics could not be set up.
    #[error(transparent)]
    Telemetry(#[from] TelemetryError),
    /// The store could not be set up.
    #[error(transparent)]
    Connect(#[from] ConnectError),
    /// A server could not start, or failed.
    #[error(transparent)]
    Server(#[from] ServerError),
    /// A TLS or tokens file could not be used.
    #[error(transparent)]
    Security(#[from] crate::security::SecurityError),
}

/// Why a process that runs without a [`Runtime`] (the agent, the member simulator) could
/// not start.
#[derive(Debug, thiserror::Error)]
pub enum ProcessError {
    /// Flags that do not make sense.
    #[error("invalid flags: {}", .0.iter().map(ToString::to_string).collect::<Vec<_>>().join("; "))]
    Args(Vec<ArgError>),
    /// Logging could not be set up.
    #[error(transparent)]
    Telemetry(#[from] TelemetryError),
}

/// Starts such a process: its flags as validated (every problem found), logging at `log`
/// in `format` (unless a subscriber is already installed, as when several share a process),
/// and a [`Shutdown`] hooked to SIGTERM and SIGINT.
pub fn start_process<C>(
    validated: Result<C, Vec<ArgError>>,
    log: &str,
    format: LogFormat,
) -> Result<(C, Shutdown), ProcessError> {
    let config = validated.map_err(ProcessError::Args)?;
    init_logging(log, format)?;
    let shutdown = Shutdown::new();
    shutdown.trigger_on_signals();
    Ok((config, shutdown))
}

/// [`init_tracing`], where a subscriber installed already is no error.
fn init_logging(log: &str, format: LogFormat) -> Result<(), TelemetryError> {
    match init_tracing(log, format) {
        Ok(()) | Err(TelemetryError::SubscriberInstalled(_)) => Ok(()),
        Err(e) => Err(e),
    }
}

/// What a started service shares between its parts.
#[derive(Clone, derive_more::Debug)]
pub struct Runtime {
    /// The flags it was started with.
    pub args: CommonArgs,
    /// The store, from `--store`.
    #[debug(skip)]
    pub store: Arc<dyn Store>,
    /// Fires on SIGTERM/SIGINT (or when triggered by hand).
    #[debug(skip)]
    pub shutdown: Shutdown,
    /// What must be synced before `/readyz` and gRPC health say ready.
    pub readiness: Readiness,
    /// The Prometheus handle behind `/metrics`.
    #[debug(skip)]
    pub metrics: PrometheusHandle,
}

// === impl Runtime ===

impl Runtime {
    /// Validates the flags, installs logging (unless a subscriber is already installed, as
    /// when several services share a process) and the Prometheus recorder, hooks SIGTERM and
    /// SIGINT to [`Runtime::shutdown`], and connects the store.
    pub async fn start(args: &CommonArgs) -> Result<Self, BootstrapError> {
        args.validate()
            .map_err(|e| BootstrapError::Connect(ConnectError::Args(e)))?;
        init_logging(&args.log, args.log_format)?;
        let metrics = install_metrics()?;
        let shutdown = Shutdown::new();
        shutdown.trigger_on_signals();
        if std::env::var_os(crate::shutdown::EXIT_WITH_PARENT_ENV).is_some() {
            shutdown.trigger_when_stdin_closes();
        }
        let store = args.connect_store().await?;
        tracing::info!(store = ?args.store, grpc = %args.grpc_addr, admin = %args.admin_addr, "starting");
        Ok(Self {
            args: args.clone(),
            store,
            shutdown,
            readiness: Readiness::new(),
            metrics,
        })
    }

    /// A gRPC server with health (following [`Runtime::readiness`]), reflection over
    /// `descriptor_sets` and `--grpc-timeout`.
    ///
    /// With `--tls-cert`/`--tls-key` it serves TLS (mutual with `--tls-client-ca`), with
    /// `--auth-tokens-file` it takes bearer tokens (read again when the file changes); every
    /// call is authorized per principal ([`crate::authz`]); plaintext on an address other than
    /// loopback is allowed (compose networks) but logged as a warning.
    pub async fn grpc_server(
        &self,
        descriptor_sets: &[&'static [u8]],
        config: GrpcConfig,
    ) -> Result<GrpcServer, BootstrapError> {
        let security = &self.args.security;
        let tls = security.server_tls()?;
        let tokens = security.auth_tokens()?;
        if let Some(tokens) = &tokens {
            tokio::spawn(tokens.clone().keep_reloaded(self.shutdown.clone()));
        }
        if tls.is_none() && !self.args.grpc_addr.ip().is_loopback() {
            tracing::warn!(
                grpc = %self.args.grpc_addr,
                "serving gRPC WITHOUT TLS on a non-loopback address; set --tls-cert, --tls-key \
                 and --tls-client-ca for mutual TLS outside a private network"
            );
        }
        let config = config
            .request_timeout(self.args.grpc_timeout)
            .tls(tls)
            .auth_tokens(tokens)
            .client_certs(security.tls_client_ca.is_some());
        GrpcServer::new(
            descriptor_sets,
            config,
            self.readiness.clone(),
            &self.shutdown,
        )
        .await
        .map_err(BootstrapError::from)
    }

    /// Serves `grpc` on `--grpc-addr` and the admin endpoints on `--admin-addr` until the
    /// shutdown fires; returns when both have stopped, after exporting the spans still queued
    /// (at most 5 s; see [`crate::telemetry::shutdown_tracing`]).
    pub async fn serve(&self, grpc: GrpcServer) -> Result<(), BootstrapError> {
        let grpc_listener = bind(self.args.grpc_addr).await?;
        let admin_listener = bind(self.args.admin_addr).await?;
        let served = self.serve_on(grpc, grpc_listener, admin_listener).await;
        crate::telemetry::shutdown_tracing(std::time::Duration::from_secs(5));
        served
    }

    /// [`Runtime::serve`] on listeners the caller bound (e.g. on port 0 in tests).
    pub async fn serve_on(
        &self,
        grpc: GrpcServer,
        grpc_listener: TcpListener,
        admin_listener: TcpListener,
    ) -> Result<(), BootstrapError> {
        // Checked on the address actually bound (a caller's listener may differ from
        // --grpc-addr): beyond loopback, no credentials at all is refused.
        if let Ok(addr) = grpc_listener.local_addr() {
            self.args.security.check_open(addr)?;
        }
        tracing::info!(
            grpc = ?grpc_listener.local_addr().ok(),
            admin = ?admin_listener.local_addr().ok(),
            "serving"
        );
        let admin = serve_admin(
            admin_listener,
            Some(self.metrics.clone()),
            self.readiness.clone(),
            self.shutdown.clone(),
        );
        let grpc = grpc.serve(grpc_listener, self.shutdown.clone());
        let (grpc, admin) = tokio::join!(grpc, admin);
        grpc?;
        admin?;
        Ok(())
    }
}
