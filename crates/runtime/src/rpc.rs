//! Unary gRPC methods without the async-trait boilerplate: a service's tonic trait is written
//! by [`unary_service!`](crate::unary_service) from one row per method, each answered by a
//! plain `async fn` of the service that takes the request (message and metadata) and returns
//! the response message or an error that converts into a `tonic::Status` (the one mapping of
//! [`crate::status`]).

/// A request metadata value as text (`None` when absent or not visible ASCII).
pub fn metadata_str<T>(request: &tonic::Request<T>, key: &str) -> Option<String> {
    request
        .metadata()
        .get(key)
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned)
}

/// Implements a tonic service trait whose methods are all unary, one row per method:
///
/// ```ignore
/// flotilla_runtime::unary_service! {
///     impl Scheduler for SchedulerService {
///         simulate(v1::SimulateRequest) -> v1::SimulateResponse = Self::simulate;
///     }
/// }
/// ```
///
/// Each handler is an `async fn(&self, tonic::Request<Req>) -> Result<Resp, E>` with
/// `E: Into<tonic::Status>`; the macro wraps its answer in a `tonic::Response`.
#[macro_export]
macro_rules! unary_service {
    (impl $trait:ident for $ty:ty {
        $($rpc:ident($request:ty) -> $response:ty = $handler:path;)*
    }) => {
        #[$crate::__tonic::async_trait]
        impl $trait for $ty {
            $(
                async fn $rpc(
                    &self,
                    request: $crate::__tonic::Request<$request>,
                ) -> ::std::result::Result<
                    $crate::__tonic::Response<$response>,
                    $crate::__tonic::Status,
                > {
                    $handler(self, request)
                        .await
                        .map($crate::__tonic::Response::new)
                        .map_err(::std::convert::Into::into)
                }
            )*
        }
    };
}
