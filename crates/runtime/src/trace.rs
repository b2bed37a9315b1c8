//! W3C trace context: across gRPC calls (metadata `traceparent`) and across services through
//! the objects they write (an opaque `trace_context` string on a taint, an eviction task, a
//! binding's status, a Work), so that one failover is one trace.
//!
//! ```text
//!   writer's span ── current() ──► "00-<trace id>-<span id>-01" stored on the object
//!   next service:  Controller::trace_parent(|key, ctx| stored string)  (read from its cache)
//!                  └─► its `reconcile` span is created with that parent (set_parent)
//!   gRPC:          client inject(metadata) ──► server span (trace_fn) extracts `traceparent`
//! ```
//!
//! With no OTLP exporter installed every function here is a no-op and [`current`] returns
//! an empty string, so nothing is stored on objects.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};

use opentelemetry::Context;
use opentelemetry::propagation::{Extractor, Injector, TextMapPropagator};
use opentelemetry::trace::TraceContextExt;
use opentelemetry_sdk::propagation::TraceContextPropagator;
use tracing_opentelemetry::OpenTelemetrySpanExt;

/// Whether an OTLP exporter was installed in this process (see
/// [`crate::telemetry::init_tracing`]). Without one, nothing reads or writes stored trace
/// contexts, so hot paths can skip looking them up.
static EXPORTING: AtomicBool = AtomicBool::new(false);

/// Whether spans are exported (an OTLP exporter was installed in this process).
pub fn exporting() -> bool {
    EXPORTING.load(Ordering::Relaxed)
}

pub(crate) fn set_exporting() {
    EXPORTING.store(true, Ordering::Relaxed);
}

/// The longest trace context string accepted from an object (a W3C `traceparent` is 55
/// characters; anything longer is not one).
pub const MAX_TRACE_CONTEXT_LEN: usize = 128;

/// The `traceparent` of the current span (`00-<trace id>-<span id>-<flags>`), or an empty
/// string when spans are not exported (no OTLP endpoint) or there is no current span.
pub fn current() -> String {
    of_span(&tracing::Span::current())
}

/// The `traceparent` of `span` (see [`current`]).
pub fn of_span(span: &tracing::Span) -> String {
    let cx = span.context();
    if !cx.span().span_context().is_valid() {
        return String::new();
    }
    let mut carrier = HashMap::new();
    TraceContextPropagator::new().inject_context(&cx, &mut carrier);
    carrier.remove("traceparent").unwrap_or_default()
}

/// The OpenTelemetry context a stored `traceparent` string stands for; `None` when it is empty
/// or not a valid W3C `traceparent`.
pub fn parse(traceparent: &str) -> Option<Context> {
    if traceparent.is_empty() || traceparent.len() > MAX_TRACE_CONTEXT_LEN {
        return None;
    }
    let carrier = HashMap::from([("traceparent".to_owned(), traceparent.to_owned())]);
    let cx = TraceContextPropagator::new().extract(&carrier);
    cx.span().span_context().is_valid().then_some(cx)
}

/// The trace id of a stored `traceparent` (`None` when it is not a valid one).
pub fn trace_id(traceparent: &str) -> Option<String> {
    parse(traceparent).map(|cx| cx.span().span_context().trace_id().to_string())
}

/// Whether two stored `traceparent`s belong to the same trace.
pub fn same_trace(a: &str, b: &str) -> bool {
    matches!((trace_id(a), trace_id(b)), (Some(x), Some(y)) if x == y)
}

/// The context a failover step continues: `preferred` (e.g. the context the previous step
/// stored in a binding's status) when it belongs to the same trace as `failover` (the
/// newest eviction task's, which starts the failover's part on the binding), else
/// `failover` itself; `None` when `failover` is empty. A context left over from an earlier
/// failover is never continued.
pub fn continue_failover(preferred: &str, failover: &str) -> Option<String> {
    parse(failover)?;
    if same_trace(preferred, failover) {
        Some(preferred.to_owned())
    } else {
        Some(failover.to_owned())
    }
}

/// Makes `span` continue the trace of `traceparent` (its parent becomes the span that wrote
/// it); with no valid `traceparent` the span becomes the root of a trace of its own (and not
/// a child of a long-lived enclosing span, which would never be exported).
///
/// Must be called before the span is first entered: a started span keeps its parent.
pub fn set_parent(span: &tracing::Span, traceparent: Option<&str>) {
    let cx = traceparent.and_then(parse).unwrap_or_default();
    // Err only when no OpenTelemetry layer is installed (nothing to do) or the span already
    // started (a programming error that only costs the link).
    let _ = span.set_parent(cx);
}

/// Copies `traceparent` (and `tracestate`) of the current span into gRPC request metadata.
pub fn inject(metadata: &mut tonic::metadata::MetadataMap) {
    let cx = tracing::Span::current().context();
    if !cx.span().span_context().is_valid() {
        return;
    }
    TraceContextPropagator::new().inject_context(&cx, &mut MetadataInjector(metadata));
}

/// A request for `message` carrying the current span's trace context.
pub fn request<T>(message: T) -> tonic::Request<T> {
    let mut request = tonic::Request::new(message);
    inject(request.metadata_mut());
    request
}

/// A tonic interceptor that injects the current span's trace context into every call
/// (`XClient::with_interceptor(channel, TraceInterceptor)`).
#[derive(Clone, Copy, Debug, Default)]
pub struct TraceInterceptor;

impl tonic::service::Interceptor for TraceInterceptor {
    fn call(
        &mut self,
        mut request: tonic::Request<()>,
    ) -> Result<tonic::Request<()>, tonic::Status> {
        inject(request.metadata_mut());
        Ok(request)
    }
}

/// The trace context an incoming HTTP/2 request carries (`traceparent` header), or an empty
/// context.
pub fn extract(headers: &http::HeaderMap) -> Context {
    TraceContextPropagator::new().extract(&HeaderExtractor(headers))
}

struct MetadataInjector<'a>(&'a mut tonic::metadata::MetadataMap);

impl Injector for MetadataInjector<'_> {
    fn set(&mut self, key: &str, value: String) {
        if let (Ok(k), Ok(v)) = (
            tonic::metadata::MetadataKey::from_bytes(key.as_bytes()),
            tonic::metadata::MetadataValue::try_from(value.as_str()),
        ) {
            self.0.insert(k, v);
        }
    }
}

struct HeaderExtractor<'a>(&'a http::HeaderMap);

impl Extractor for HeaderExtractor<'_> {
    fn get(&self, key: &str) -> Option<&str> {
        self.0.get(key).and_then(|v| v.to_str().ok())
    }

    fn keys(&self) -> Vec<&str> {
        self.0.keys().map(http::HeaderName::as_str).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_valid_traceparents_parse() {
        assert!(parse("").is_none());
        assert!(parse("not a traceparent").is_none());
        assert!(parse("00-00000000000000000000000000000000-b7ad6b7169203331-01").is_none());
        let cx = parse("00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01").unwrap();
        assert_eq!(
            cx.span().span_context().trace_id().to_string(),
            "0af7651916cd43dd8448eb211c80319c"
        );
    }

    #[test]
    fn a_failover_continues_only_contexts_of_its_own_trace() {
        let task = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01";
        let same = "00-0af7651916cd43dd8448eb211c80319c-00f067aa0ba902b7-01";
        let old = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
        assert!(same_trace(task, same));
        assert!(!same_trace(task, old));
        assert!(!same_trace(task, ""));
        assert_eq!(continue_failover(same, task).as_deref(), Some(same));
        assert_eq!(continue_failover(old, task).as_deref(), Some(task));
        assert_eq!(continue_failover("", task).as_deref(), Some(task));
        assert_eq!(continue_failover(same, ""), None);
    }

    #[test]
    fn without_an_exporter_nothing_is_stored() {
        let span = tracing::info_span!("x");
        assert_eq!(of_span(&span), "");
    }
}
