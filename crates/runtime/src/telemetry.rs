//! Logs (tracing-subscriber), spans exported over OTLP/gRPC when `OTEL_EXPORTER_OTLP_ENDPOINT`
//! is set, and metrics (the Prometheus recorder behind `/metrics`).
//!
//! ```text
//!   registry ─┬─ EnvFilter (--log / FLOTILLA_LOG)
//!             ├─ fmt layer (text | json) ──► stderr
//!             └─ tracing-opentelemetry layer (only with OTEL_EXPORTER_OTLP_ENDPOINT)
//!                  └─ SdkTracerProvider: batch processor (its own thread; OTEL_BSP_* env)
//!                       └─ OTLP/gRPC exporter (tonic) ──► collector / Jaeger :4317
//!                       resource service.name = OTEL_SERVICE_NAME or the binary's name
//!   shutdown_tracing(timeout): flush + shut the provider down from a plain thread (the
//!   tonic exporter deadlocks when flushed from a current_thread / 1-worker runtime)
//! ```
//!
//! Only spans at INFO or above that pass `--log` are exported; span attributes are the
//! allow-listed fields the code gives them (ids, names, counts, reasons), never a request
//! body, a manifest or a credential.

use std::sync::{Mutex, OnceLock};
use std::time::Duration;

use opentelemetry::trace::TracerProvider as _;
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::trace::SdkTracerProvider;

use metrics_exporter_prometheus::{Matcher, PrometheusBuilder, PrometheusHandle};
use tracing_subscriber::EnvFilter;
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;

/// How log lines are written to stderr.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum LogFormat {
    /// Human-readable lines (the default).
    #[default]
    Text,
    /// One JSON object per line, for log collectors.
    Json,
}

/// Why telemetry could not be set up.
#[derive(Debug, thiserror::Error)]
pub enum TelemetryError {
    /// The `--log` filter does not parse (`info`, `flotilla=debug,tower=warn`, ...).
    #[error("invalid log filter {filter:?}")]
    Filter {
        /// The filter as given.
        filter: String,
        /// The parser's complaint.
        #[source]
        source: tracing_subscriber::filter::ParseError,
    },
    /// A global tracing subscriber was already installed.
    #[error("a tracing subscriber is already installed")]
    SubscriberInstalled(#[source] tracing_subscriber::util::TryInitError),
    /// Another global metrics recorder was installed first.
    #[error("cannot install the Prometheus recorder")]
    Recorder(#[source] metrics_exporter_prometheus::BuildError),
    /// The OTLP exporter could not be built (e.g. a malformed `OTEL_EXPORTER_OTLP_ENDPOINT`).
    #[error("cannot set up the OTLP span exporter")]
    Otlp(#[source] opentelemetry_otlp::ExporterBuildError),
}

/// The environment variable that turns span export on (the OpenTelemetry standard one).
pub const OTLP_ENDPOINT_ENV: &str = "OTEL_EXPORTER_OTLP_ENDPOINT";

/// The provider installed by [`otel_layer`], flushed by [`shutdown_tracing`].
static PROVIDER: Mutex<Option<SdkTracerProvider>> = Mutex::new(None);

/// The `service.name` of this process: `OTEL_SERVICE_NAME` if set, else the binary's file
/// name (`flotilla-scheduler`, ...).
pub fn default_service_name() -> String {
    if let Ok(name) = std::env::var("OTEL_SERVICE_NAME")
        && !name.trim().is_empty()
    {
        return name;
    }
    std::env::args_os()
        .next()
        .and_then(|a| {
            std::path::Path::new(&a)
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
        })
        .unwrap_or_else(|| "flotilla".to_owned())
}

/// The OpenTelemetry layer exporting spans over OTLP/gRPC as `service_name`, or `None` when
/// `OTEL_EXPORTER_OTLP_ENDPOINT` is unset or empty. Installs the W3C trace-context propagator
/// and remembers the provider for [`shutdown_tracing`]. Must be called inside a tokio runtime
/// (the exporter's channel is created there).
///
/// The batch processor reads the standard `OTEL_BSP_SCHEDULE_DELAY`,
/// `OTEL_BSP_MAX_QUEUE_SIZE`, ... and the exporter `OTEL_EXPORTER_OTLP_TIMEOUT`.
pub fn otel_layer<S>(
    service_name: &str,
) -> Result<Option<impl tracing_subscriber::Layer<S>>, TelemetryError>
where
    S: tracing::Subscriber + for<'a> tracing_subscriber::registry::LookupSpan<'a>,
{
    let endpoint = std::env::var(OTLP_ENDPOINT_ENV).unwrap_or_default();
    if endpoint.trim().is_empty() {
        return Ok(None);
    }
    use opentelemetry_otlp::WithExportConfig as _;
    let exporter = opentelemetry_otlp::SpanExporter::builder()
        .with_tonic()
        .with_endpoint(endpoint.trim())
        .with_timeout(Duration::from_secs(3))
        .build()
        .map_err(TelemetryError::Otlp)?;
    let provider = SdkTracerProvider::builder()
        .with_batch_exporter(exporter)
        .with_resource(
            Resource::builder()
                .with_service_name(service_name.to_owned())
                .build(),
        )
        .build();
    opentelemetry::global::set_text_map_propagator(
        opentelemetry_sdk::propagation::TraceContextPropagator::new(),
    );
    let tracer = provider.tracer("flotilla");
    *PROVIDER
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner) = Some(provider);
    crate::trace::set_exporting();
    Ok(Some(
        tracing_opentelemetry::layer()
            .with_tracer(tracer)
            // code locations and thread names are noise in a failover trace
            .with_location(false)
            .with_threads(false),
    ))
}

/// Exports the spans still queued and stops the exporter, waiting at most `timeout`. Runs on
/// a plain thread, never on the caller's runtime: the tonic exporter deadlocks when flushed
/// from a `current_thread` or 1-worker runtime (docs/design.md §8). No-op without an exporter.
pub fn shutdown_tracing(timeout: Duration) {
    let provider = PROVIDER
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .take();
    let Some(provider) = provider else { return };
    let (tx, rx) = std::sync::mpsc::channel();
    let spawned = std::thread::Builder::new()
        .name("otel-shutdown".into())
        .spawn(move || {
            let _ = provider.force_flush();
            let _ = provider.shutdown();
            let _ = tx.send(());
        });
    if spawned.is_ok() && rx.recv_timeout(timeout).is_err() {
        eprintln!("span export did not finish within {timeout:?}; some spans may be lost");
    }
}

/// `filter` with kube-rs' per-request ERROR log turned off, unless `filter` names
/// `kube_client` itself: Flotilla reports each failed member call once, with its cluster.
pub fn quiet_kube_client(filter: &str) -> String {
    if filter.contains("kube_client") {
        filter.to_owned()
    } else {
        format!("{filter},kube_client::client::builder=off")
    }
}

/// Installs the global tracing subscriber: an `EnvFilter` from `filter` (the `--log` flag,
/// env `FLOTILLA_LOG`) writing `format` lines to stderr, plus OTLP span export as
/// [`default_service_name`] when `OTEL_EXPORTER_OTLP_ENDPOINT` is set (see [`otel_layer`]).
///
/// kube-rs logs every failed member request at ERROR from its client builder; Flotilla
/// reports those failures itself (once, with the cluster, on the Work or the probe), so that
/// target is off unless `filter` names `kube_client` itself.
pub fn init_tracing(filter: &str, format: LogFormat) -> Result<(), TelemetryError> {
    let effective = quiet_kube_client(filter);
    let env_filter = EnvFilter::try_new(&effective).map_err(|source| TelemetryError::Filter {
        filter: filter.to_owned(),
        source,
    })?;
    if tracing::dispatcher::has_been_set() {
        // Several services in one process (`flotilla up`, tests): the first one's wins, and
        // no second exporter is started. (Fails: a global subscriber is set.)
        return tracing_subscriber::registry()
            .try_init()
            .map_err(TelemetryError::SubscriberInstalled);
    }
    let otel = otel_layer(&default_service_name())?;
    let registry = tracing_subscriber::registry().with(env_filter).with(otel);
    match format {
        LogFormat::Text => registry
            .with(tracing_subscriber::fmt::layer().with_writer(std::io::stderr))
            .try_init(),
        LogFormat::Json => registry
            .with(
                tracing_subscriber::fmt::layer()
                    .json()
                    .with_current_span(true)
                    .with_writer(std::io::stderr),
            )
            .try_init(),
    }
    .map_err(TelemetryError::SubscriberInstalled)
}

/// Histogram buckets for every `*_seconds` metric: 1 ms to 60 s, roughly ×2.5 per step
/// (reconcile and queue latencies span that range in a failover storm).
pub const SECONDS_BUCKETS: &[f64] = &[
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0,
];

static HANDLE: OnceLock<PrometheusHandle> = OnceLock::new();

/// A Prometheus recorder with Flotilla's buckets that is not installed globally, for tests
/// that read what a component recorded (build the component inside
/// `metrics::with_local_recorder`).
pub fn prometheus_recorder()
-> Result<metrics_exporter_prometheus::PrometheusRecorder, TelemetryError> {
    Ok(builder()?.build_recorder())
}

fn builder() -> Result<PrometheusBuilder, TelemetryError> {
    PrometheusBuilder::new()
        .set_buckets_for_metric(Matcher::Suffix("_seconds".into()), SECONDS_BUCKETS)
        .map_err(TelemetryError::Recorder)
}

/// Installs the process-wide Prometheus recorder (once; later calls return the same handle)
/// and returns the handle the admin server renders `/metrics` from.
///
/// Call it before building queues and controllers: they take their metric handles from the
/// recorder installed when they are created.
pub fn install_metrics() -> Result<PrometheusHandle, TelemetryError> {
    static INSTALL: std::sync::Mutex<()> = std::sync::Mutex::new(());
    let _guard = INSTALL
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    if let Some(h) = HANDLE.get() {
        return Ok(h.clone());
    }
    let recorder = builder()?.build_recorder();
    let handle = recorder.handle();
    metrics::set_global_recorder(recorder).map_err(|e| TelemetryError::Recorder(e.into()))?;
    Ok(HANDLE.get_or_init(|| handle).clone())
}
