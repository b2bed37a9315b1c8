//! `flotilla_grpc_server_requests_total{method, code}` and
//! `flotilla_grpc_server_request_duration_seconds{method}`: a tower layer in front of every
//! service's router.
//!
//! ```text
//!   request ─► GrpcMetrics ─► routes ─► response headers  (grpc-status here: trailers-only error)
//!                                        └─ body frames … trailers (grpc-status: unary OK,
//!                                           stream end) → counted once
//!   body dropped before any grpc-status (client went away) → code CANCELLED
//! ```

use std::collections::HashSet;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use futures::future::BoxFuture;
use http_body::{Body, Frame};
use tokio::time::Instant;

/// The gRPC status code names (`grpc-status` value → name), as Prometheus label values.
pub fn code_name(code: &str) -> &'static str {
    match code {
        "0" => "OK",
        "1" => "CANCELLED",
        "2" => "UNKNOWN",
        "3" => "INVALID_ARGUMENT",
        "4" => "DEADLINE_EXCEEDED",
        "5" => "NOT_FOUND",
        "6" => "ALREADY_EXISTS",
        "7" => "PERMISSION_DENIED",
        "8" => "RESOURCE_EXHAUSTED",
        "9" => "FAILED_PRECONDITION",
        "10" => "ABORTED",
        "11" => "OUT_OF_RANGE",
        "12" => "UNIMPLEMENTED",
        "13" => "INTERNAL",
        "14" => "UNAVAILABLE",
        "15" => "DATA_LOSS",
        "16" => "UNAUTHENTICATED",
        _ => "UNKNOWN",
    }
}

/// The methods a server may name in its `method` label: `/<package.Service>/<Method>` of
/// every service in its descriptor sets. Any other path is counted as `other`, so that a
/// client calling made-up methods cannot grow the label (and the metrics) without bound.
#[derive(Clone, Debug, Default)]
pub struct KnownMethods(Arc<HashSet<String>>);

impl KnownMethods {
    /// The methods of the services in `descriptor_sets` (encoded `FileDescriptorSet`s);
    /// sets that do not decode add nothing.
    pub fn from_descriptor_sets(descriptor_sets: &[&[u8]]) -> Self {
        let mut methods = HashSet::new();
        for set in descriptor_sets {
            let Ok(set) = <prost_types::FileDescriptorSet as prost::Message>::decode(*set) else {
                continue;
            };
            for file in &set.file {
                for service in &file.service {
                    for method in &service.method {
                        methods.insert(format!(
                            "/{}{}{}/{}",
                            file.package(),
                            if file.package().is_empty() { "" } else { "." },
                            service.name(),
                            method.name()
                        ));
                    }
                }
            }
        }
        Self(Arc::new(methods))
    }

    /// Every method path (`/package.Service/Method`), sorted.
    pub fn paths(&self) -> Vec<String> {
        let mut paths: Vec<String> = self.0.iter().cloned().collect();
        paths.sort();
        paths
    }

    /// The label of a request path.
    fn label(&self, path: &str) -> String {
        if self.0.contains(path) {
            path.to_owned()
        } else {
            "other".to_owned()
        }
    }
}

/// The layer (add it with `Server::builder().layer(GrpcMetricsLayer::new(known))`).
#[derive(Clone, Debug, Default)]
pub struct GrpcMetricsLayer {
    known: KnownMethods,
}

impl GrpcMetricsLayer {
    /// A layer labelling the `known` methods by name.
    pub fn new(known: KnownMethods) -> Self {
        Self { known }
    }
}

impl<S> tower::Layer<S> for GrpcMetricsLayer {
    type Service = GrpcMetrics<S>;

    fn layer(&self, inner: S) -> Self::Service {
        GrpcMetrics {
            inner,
            known: self.known.clone(),
        }
    }
}

/// The service [`GrpcMetricsLayer`] wraps a router in.
#[derive(Clone, Debug)]
pub struct GrpcMetrics<S> {
    inner: S,
    known: KnownMethods,
}

/// What a finished call is recorded under.
#[derive(Debug)]
struct Call {
    method: String,
    start: Instant,
}

impl Call {
    fn record(self, code: &'static str) {
        metrics::counter!(
            "flotilla_grpc_server_requests_total",
            "method" => self.method.clone(),
            "code" => code
        )
        .increment(1);
        metrics::histogram!(
            "flotilla_grpc_server_request_duration_seconds",
            "method" => self.method
        )
        .record(self.start.elapsed().as_secs_f64());
    }
}

impl<S, B, RB> tower::Service<http::Request<B>> for GrpcMetrics<S>
where
    S: tower::Service<http::Request<B>, Response = http::Response<RB>>,
    S::Future: Send + 'static,
    RB: Body + Unpin,
{
    type Response = http::Response<MeteredBody<RB>>;
    type Error = S::Error;
    type Future = BoxFuture<'static, Result<Self::Response, Self::Error>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: http::Request<B>) -> Self::Future {
        // The path is `/<package.Service>/<Method>`; a method this server does not serve is
        // folded into "other" so that made-up paths cannot make the label unbounded.
        let method = self.known.label(req.uri().path());
        let call = Call {
            method,
            start: Instant::now(),
        };
        let fut = self.inner.call(req);
        Box::pin(async move {
            let resp = fut.await?;
            let mut call = Some(call);
            if let Some(code) = resp.headers().get("grpc-status")
                && let Some(c) = call.take()
            {
                c.record(code_name(code.to_str().unwrap_or("")));
            }
            Ok(resp.map(|inner| MeteredBody { inner, call }))
        })
    }
}

/// A response body that records its call when the `grpc-status` trailer passes.
#[derive(Debug)]
pub struct MeteredBody<B> {
    inner: B,
    call: Option<Call>,
}

impl<B: Body + Unpin> Body for MeteredBody<B> {
    type Data = B::Data;
    type Error = B::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Self::Data>, Self::Error>>> {
        let polled = Pin::new(&mut self.inner).poll_frame(cx);
        match &polled {
            Poll::Ready(Some(Ok(frame))) => {
                if let Some(trailers) = frame.trailers_ref()
                    && let Some(call) = self.call.take()
                {
                    let code = trailers
                        .get("grpc-status")
                        .and_then(|v| v.to_str().ok())
                        .unwrap_or("2");
                    call.record(code_name(code));
                }
            }
            Poll::Ready(Some(Err(_))) => {
                if let Some(call) = self.call.take() {
                    call.record("INTERNAL");
                }
            }
            Poll::Ready(None) | Poll::Pending => {}
        }
        polled
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.inner.size_hint()
    }
}

impl<B> Drop for MeteredBody<B> {
    fn drop(&mut self) {
        if let Some(call) = self.call.take() {
            call.record("CANCELLED");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_served_methods_get_a_label_of_their_own() {
        let known = KnownMethods::from_descriptor_sets(&[
            tonic_health::pb::FILE_DESCRIPTOR_SET,
            b"not a descriptor set",
        ]);
        assert_eq!(
            known.label("/grpc.health.v1.Health/Check"),
            "/grpc.health.v1.Health/Check"
        );
        for junk in [
            "/grpc.health.v1.Health/Nope",
            "/made.up.Service/Method",
            "/x/y",
            "/",
            "",
        ] {
            assert_eq!(known.label(junk), "other", "{junk:?}");
        }
    }
}
