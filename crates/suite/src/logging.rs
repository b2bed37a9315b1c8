//! Logs of the in-process services: to a file or to stderr, filtered (default `warn`) so that
//! what `flotilla up` and `flotilla bench` print stays readable.

use std::path::Path;
use std::sync::{Mutex, OnceLock};

use std::error::Error as _;

use anyhow::{Context as _, anyhow};
use tracing_subscriber::layer::SubscriberExt as _;
use tracing_subscriber::util::SubscriberInitExt as _;
use tracing_subscriber::{EnvFilter, Registry, reload};

/// Lets [`quiet`] change the filter after start-up.
static FILTER: OnceLock<reload::Handle<EnvFilter, Registry>> = OnceLock::new();

/// Installs the process's tracing subscriber: `filter` (tracing `EnvFilter` syntax) to
/// `file` (appended), or to stderr when `None`.
pub fn init(filter: &str, file: Option<&Path>) -> anyhow::Result<()> {
    // kube-rs' own per-request ERROR lines are off here too (the services report each
    // failed member call once).
    let effective = flotilla_runtime::telemetry::quiet_kube_client(filter);
    let env_filter = EnvFilter::try_new(&effective).map_err(|e| {
        anyhow!(
            "--log {filter:?} is not a log filter (e.g. warn, info,flotilla_scheduler=debug): {e}"
        )
    })?;
    let (filter_layer, handle) = reload::Layer::new(env_filter);
    // One process, one tracer provider: with OTEL_EXPORTER_OTLP_ENDPOINT set, every
    // in-process service exports as service.name `flotilla` (or OTEL_SERVICE_NAME); the
    // `controller` attribute of reconcile spans and `rpc.service` of RPC spans tell the
    // services apart (an OpenTelemetry resource is per provider, not per span).
    let otel = flotilla_runtime::telemetry::otel_layer(
        &flotilla_runtime::telemetry::default_service_name(),
    )
    .map_err(|e| {
        anyhow!(
            "{e}: {}",
            e.source().map(ToString::to_string).unwrap_or_default()
        )
    })?;
    let registry = tracing_subscriber::registry().with(filter_layer).with(otel);
    let installed = match file {
        Some(path) => {
            let f = std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(path)
                .with_context(|| format!("opening the log file {}", path.display()))?;
            registry
                .with(
                    tracing_subscriber::fmt::layer()
                        .with_ansi(false)
                        .with_writer(Mutex::new(f)),
                )
                .try_init()
        }
        None => registry
            .with(tracing_subscriber::fmt::layer().with_writer(std::io::stderr))
            .try_init(),
    };
    installed.map_err(|e| anyhow!("cannot install the logger: {e}"))?;
    let _ = FILTER.set(handle);
    Ok(())
}

/// From now on only errors: the suite is being stopped on purpose, and the services'
/// complaints about the leadership they just gave up are noise.
pub fn quiet() {
    if let Some(handle) = FILTER.get() {
        let _ = handle.reload(EnvFilter::new(
            flotilla_runtime::telemetry::quiet_kube_client("error"),
        ));
    }
}
