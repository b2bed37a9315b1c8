//! The one shape of a Flotilla service, and the two ways it is started.
//!
//! ```text
//!   impl Service for X {                       main.rs:  service::main::<X>()
//!     Args   (clap, with CommonArgs inside)       parse → validate → Runtime::start
//!     validate(&Args) -> Config                   → X::start(parts, config) → Started
//!     start(&Parts, Config) -> Started            → gRPC server (TLS, auth, metrics,
//!   }                                               health, reflection) + admin server
//!                                                 → serve ‖ Started::run, until SIGTERM
//!
//!   flotilla up / bench:  service::spawn::<X>(store, flags, listeners, …) — the same
//!                         validate → start → server, in this process, on a shared store
//! ```
//!
//! A service only says what it is: its flags, how they become a configuration, and what it
//! starts (controllers on the [`Parts`], gRPC routes). Building the server — and so TLS,
//! bearer tokens, metrics, health, reflection and the decode limit — happens here, once for
//! every service.

use std::future::Future;
use std::time::Duration;

use anyhow::Context as _;
use futures::future::BoxFuture;
use metrics_exporter_prometheus::PrometheusHandle;
use tokio::net::TcpListener;
use tokio::task::JoinHandle;

use crate::admin::serve_admin;
use crate::args::CommonArgs;
use crate::bootstrap::Runtime;
use crate::server::{GrpcConfig, GrpcServer, Readiness, Router};
use crate::shutdown::Shutdown;
use flotilla_store::StoreRef;

/// What a service starts on: the shared parts of a [`Runtime`].
#[derive(Clone)]
pub struct Parts {
    /// The store.
    pub store: StoreRef,
    /// What must be synced before the service reports ready.
    pub readiness: Readiness,
    /// Fires when the service must stop.
    pub shutdown: Shutdown,
    /// The wall clock its decisions read.
    pub clock: crate::Clock,
}

/// What a started service serves and runs.
pub struct Started {
    /// Adds the service's gRPC services to the router.
    pub routes: Box<dyn FnOnce(Router) -> Router + Send>,
    /// Runs until the shutdown fires (controllers, elections); its error stops the service.
    pub run: BoxFuture<'static, anyhow::Result<()>>,
}

impl Started {
    /// A service that serves `routes` and runs `run`.
    pub fn new(
        routes: impl FnOnce(Router) -> Router + Send + 'static,
        run: impl Future<Output = anyhow::Result<()>> + Send + 'static,
    ) -> Self {
        Started {
            routes: Box::new(routes),
            run: Box::pin(run),
        }
    }
}

/// A Flotilla service.
pub trait Service: 'static {
    /// The binary's name without `flotilla-` (`taint-manager`).
    const NAME: &'static str;
    /// The gRPC service whose health the server reports (`flotilla.v1.TaintManager`).
    const GRPC_SERVICE: &'static str;
    /// Its flags, which embed the common ones.
    type Args: clap::Parser + Send + 'static;
    /// Its configuration, checked from the flags.
    type Config: Send + 'static;

    /// The common flags in `args`.
    fn common(args: &Self::Args) -> &CommonArgs;

    /// Checks the flags; every problem found, each naming its flag.
    fn validate(args: &Self::Args) -> Result<Self::Config, Vec<impl std::fmt::Display>>;

    /// Starts the service's controllers on `parts` and says what it serves and runs.
    fn start(parts: &Parts, config: Self::Config) -> Started;
}

/// Declares a service: its type and its [`Service`] impl, from its name, its gRPC service,
/// its flags (`Args`, which hold the [`CommonArgs`] in a field `common` and check themselves
/// with `Args::validate(&self) -> Result<Config, Vec<impl Display>>`) and the function that
/// starts it (`fn(&Parts, Config) -> Started`).
///
/// ```ignore
/// flotilla_runtime::service! {
///     /// The taint-manager as a service.
///     pub struct TaintManager {
///         name: "taint-manager",
///         grpc: SERVICE_NAME,
///         flags: Args => Config,
///         start: start_service,
///     }
/// }
/// ```
#[macro_export]
macro_rules! service {
    (
        $(#[$meta:meta])*
        $vis:vis struct $ty:ident {
            name: $name:expr,
            grpc: $grpc:expr,
            flags: $args:ty => $config:ty,
            start: $start:path $(,)?
        }
    ) => {
        $(#[$meta])*
        $vis struct $ty;

        impl $crate::service::Service for $ty {
            const NAME: &'static str = $name;
            const GRPC_SERVICE: &'static str = $grpc;
            type Args = $args;
            type Config = $config;

            fn common(args: &$args) -> &$crate::CommonArgs {
                &args.common
            }

            fn validate(args: &$args) -> Result<$config, Vec<impl std::fmt::Display>> {
                args.validate()
            }

            fn start(parts: &$crate::service::Parts, config: $config) -> $crate::service::Started {
                $start(parts, config)
            }
        }
    };
}

/// The one flag error: every problem the service's `validate` found.
fn flag_error<S: Service>(errors: Vec<impl std::fmt::Display>) -> anyhow::Error {
    let errors: Vec<String> = errors.iter().map(ToString::to_string).collect();
    anyhow::anyhow!(
        "invalid flags for flotilla-{}: {}",
        S::NAME,
        errors.join("; ")
    )
}

/// Parses the flags of a service hosted in this process: `flotilla-<name> --store=mem
/// <flags>` (the store flag only satisfies the parser; the host hands the service its store).
pub fn parse_flags<A: clap::Parser>(name: &str, flags: &[String]) -> anyhow::Result<A> {
    let argv = [format!("flotilla-{name}"), "--store=mem".into()]
        .into_iter()
        .chain(flags.iter().cloned());
    A::try_parse_from(argv).map_err(|e| {
        anyhow::anyhow!(
            "invalid flags for flotilla-{name}: {}",
            e.to_string().trim_end()
        )
    })
}

/// The gRPC server of `S` with its routes: health, reflection and `timeout` always; TLS and
/// bearer tokens when the runtime has them (standalone).
async fn server<S: Service>(
    rt: Option<&Runtime>,
    readiness: &Readiness,
    shutdown: &Shutdown,
    timeout: Duration,
    routes: Box<dyn FnOnce(Router) -> Router + Send>,
) -> anyhow::Result<GrpcServer> {
    let config = GrpcConfig::default()
        .request_timeout(timeout)
        .health_service(S::GRPC_SERVICE);
    let server = match rt {
        Some(rt) => {
            rt.grpc_server(&[flotilla_proto::FILE_DESCRIPTOR_SET], config)
                .await?
        }
        None => {
            GrpcServer::new(
                &[flotilla_proto::FILE_DESCRIPTOR_SET],
                config,
                readiness.clone(),
                shutdown,
            )
            .await?
        }
    };
    Ok(server.map_router(routes))
}

/// The `main` of every service binary: parse the flags, check them, start the runtime
/// (logging, metrics, signals, store), start the service, serve until SIGTERM.
pub async fn main<S: Service>() -> anyhow::Result<()> {
    let args = <S::Args as clap::Parser>::parse();
    run::<S>(args).await
}

/// [`main`] with flags already parsed.
pub async fn run<S: Service>(args: S::Args) -> anyhow::Result<()> {
    let config = S::validate(&args).map_err(flag_error::<S>)?;
    let rt = Runtime::start(S::common(&args)).await?;
    let parts = Parts {
        store: rt.store.clone(),
        readiness: rt.readiness.clone(),
        shutdown: rt.shutdown.clone(),
        clock: crate::Clock::system(),
    };
    let started = S::start(&parts, config);
    let grpc = server::<S>(
        Some(&rt),
        &rt.readiness,
        &rt.shutdown,
        rt.args.grpc_timeout,
        started.routes,
    )
    .await?;
    let (served, ran) = tokio::join!(rt.serve(grpc), started.run);
    served?;
    ran
}

/// Starts `S` in this process (`flotilla up`, the benchmark): its own `flags` (plus
/// `--store=mem` to satisfy the parser; the service runs on `store`), serving gRPC on `grpc`
/// and `/metrics`, `/livez`, `/readyz` on `admin`; returns the task that ends when `shutdown`
/// fires (or the service fails).
pub async fn spawn<S: Service>(
    store: StoreRef,
    flags: &[String],
    grpc: TcpListener,
    admin: Option<TcpListener>,
    metrics: Option<PrometheusHandle>,
    shutdown: &Shutdown,
) -> anyhow::Result<JoinHandle<anyhow::Result<()>>> {
    let args: S::Args = parse_flags(S::NAME, flags)?;
    let timeout = S::common(&args).grpc_timeout;
    let config = S::validate(&args).map_err(flag_error::<S>)?;
    spawn_config::<S>(store, config, timeout, grpc, admin, metrics, shutdown).await
}

/// [`spawn`] with the configuration already made (tests that set fields no flag reaches) and
/// `timeout` as the gRPC request timeout.
pub async fn spawn_config<S: Service>(
    store: StoreRef,
    config: S::Config,
    timeout: Duration,
    grpc: TcpListener,
    admin: Option<TcpListener>,
    metrics: Option<PrometheusHandle>,
    shutdown: &Shutdown,
) -> anyhow::Result<JoinHandle<anyhow::Result<()>>> {
    let parts = Parts {
        store,
        readiness: Readiness::new(),
        shutdown: shutdown.clone(),
        clock: crate::Clock::system(),
    };
    let started = S::start(&parts, config);
    let grpc_server = server::<S>(None, &parts.readiness, shutdown, timeout, started.routes)
        .await
        .with_context(|| format!("building the gRPC server of {}", S::NAME))?;
    let Parts {
        readiness,
        shutdown,
        ..
    } = parts;
    let run = started.run;
    Ok(tokio::spawn(async move {
        let admin = async {
            match admin {
                Some(l) => serve_admin(l, metrics, readiness, shutdown.clone())
                    .await
                    .context("admin server"),
                None => Ok(()),
            }
        };
        let (served, admin, ran) =
            tokio::join!(grpc_server.serve(grpc, shutdown.clone()), admin, run);
        served.context("gRPC server")?;
        admin?;
        ran
    }))
}
