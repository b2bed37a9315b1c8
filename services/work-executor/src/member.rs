//! Calls to Push members (`flotilla.v1.MemberSim` at a cluster's `spec.apiEndpoint`): one
//! cached channel per endpoint, a deadline on every call and a bound on the calls in flight.

use std::collections::HashMap;
use std::future::Future;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use flotilla_proto::v1;
use flotilla_proto::v1::member_sim_client::MemberSimClient;
use flotilla_runtime::SecurityArgs;
use tokio::sync::Semaphore;
use tonic::transport::Channel;

/// Why a member call failed.
#[derive(Debug, thiserror::Error)]
pub enum MemberError {
    /// The cluster's endpoint is not a usable URL.
    #[error("invalid member endpoint {endpoint:?}: {message}")]
    BadEndpoint {
        /// The endpoint.
        endpoint: String,
        /// What is wrong with it.
        message: String,
    },
    /// The member did not answer in time (an unreachable member accepts and never answers).
    #[error("member {endpoint} did not answer {method} within {timeout:?}")]
    Timeout {
        /// The endpoint.
        endpoint: String,
        /// The RPC.
        method: &'static str,
        /// The deadline.
        timeout: Duration,
    },
    /// The member answered with an error.
    #[error("member {endpoint} answered {method} with {}: {}", .status.code(), .status.message())]
    Status {
        /// The endpoint.
        endpoint: String,
        /// The RPC.
        method: &'static str,
        /// What it answered.
        status: tonic::Status,
    },
}

/// Clients of the Push members, shared by the execution controller and status collection.
#[derive(Debug)]
pub struct MemberClients {
    channels: Mutex<HashMap<String, Channel>>,
    timeout: Duration,
    in_flight: Arc<Semaphore>,
    security: SecurityArgs,
}

// === impl MemberClients ===

impl MemberClients {
    /// Clients with a per-call `timeout` and at most `concurrency` calls in flight.
    pub fn new(timeout: Duration, concurrency: usize) -> Self {
        Self {
            channels: Mutex::new(HashMap::new()),
            timeout,
            in_flight: Arc::new(Semaphore::new(concurrency.max(1))),
            security: SecurityArgs::default(),
        }
    }

    /// Uses `security` for `https://` member endpoints: its `--tls-ca` as the trust root and
    /// its `--tls-cert`/`--tls-key` as this client's identity (mutual TLS).
    pub fn with_security(mut self, security: SecurityArgs) -> Self {
        self.security = security;
        self
    }

    fn channel(&self, endpoint: &str) -> Result<Channel, MemberError> {
        let mut channels = self.channels.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(ch) = channels.get(endpoint) {
            return Ok(ch.clone());
        }
        let bad = |message: String| MemberError::BadEndpoint {
            endpoint: endpoint.to_owned(),
            message,
        };
        if !endpoint.starts_with("http://") && !endpoint.starts_with("https://") {
            return Err(bad(
                "only http:// and https:// endpoints are supported".into()
            ));
        }
        let ch = self
            .security
            .endpoint(endpoint)
            .map_err(|e| bad(e.to_string()))?
            .connect_timeout(self.timeout)
            .timeout(self.timeout)
            .tcp_nodelay(true)
            .connect_lazy();
        channels.insert(endpoint.to_owned(), ch.clone());
        Ok(ch)
    }

    /// Drops a cached channel whose member stopped answering, so that the next call dials
    /// afresh instead of waiting on a connection that may never recover.
    fn forget(&self, endpoint: &str) {
        self.channels
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(endpoint);
    }

    async fn call<T, F, Fut>(
        &self,
        endpoint: &str,
        method: &'static str,
        f: F,
    ) -> Result<T, MemberError>
    where
        F: FnOnce(MemberSimClient<Channel>) -> Fut,
        Fut: Future<Output = Result<tonic::Response<T>, tonic::Status>>,
    {
        let client = MemberSimClient::new(self.channel(endpoint)?);
        // The semaphore is never closed; a closed one would only lift the bound.
        let _permit = self.in_flight.acquire().await.ok();
        let outcome = tokio::time::timeout(self.timeout, f(client)).await;
        let (result, label) = match outcome {
            Ok(Ok(resp)) => (Ok(resp.into_inner()), "ok"),
            Ok(Err(status)) => {
                if matches!(
                    status.code(),
                    tonic::Code::Unavailable | tonic::Code::DeadlineExceeded
                ) {
                    self.forget(endpoint);
                }
                let label = if status.code() == tonic::Code::NotFound {
                    "not_found"
                } else {
                    "error"
                };
                (
                    Err(MemberError::Status {
                        endpoint: endpoint.to_owned(),
                        method,
                        status,
                    }),
                    label,
                )
            }
            Err(_) => {
                self.forget(endpoint);
                (
                    Err(MemberError::Timeout {
                        endpoint: endpoint.to_owned(),
                        method,
                        timeout: self.timeout,
                    }),
                    "timeout",
                )
            }
        };
        metrics::counter!(
            "flotilla_work_executor_member_calls_total",
            "method" => method,
            "result" => label
        )
        .increment(1);
        result
    }

    /// Applies one manifest (create or update).
    pub async fn apply(
        &self,
        endpoint: &str,
        request: v1::ApplyManifestRequest,
    ) -> Result<v1::ApplyManifestResponse, MemberError> {
        self.call(endpoint, "ApplyManifest", |mut c| async move {
            c.apply_manifest(flotilla_runtime::trace::request(request))
                .await
        })
        .await
    }

    /// Deletes one manifest; `Ok(false)` when it was already absent.
    pub async fn delete(
        &self,
        endpoint: &str,
        resource: v1::ObjectReference,
    ) -> Result<bool, MemberError> {
        let result = self
            .call(endpoint, "DeleteManifest", |mut c| async move {
                c.delete_manifest(flotilla_runtime::trace::request(
                    v1::DeleteManifestRequest {
                        resource: Some(resource),
                    },
                ))
                .await
            })
            .await;
        match result {
            Ok(resp) => Ok(resp.deleted),
            Err(MemberError::Status { status, .. }) if status.code() == tonic::Code::NotFound => {
                Ok(false)
            }
            Err(e) => Err(e),
        }
    }

    /// The member's whole state, with every manifest's status (one call per cluster).
    pub async fn status(
        &self,
        endpoint: &str,
    ) -> Result<v1::MemberSimGetStatusResponse, MemberError> {
        self.call(endpoint, "GetStatus", |mut c| async move {
            c.get_status(flotilla_runtime::trace::request(
                v1::MemberSimGetStatusRequest {},
            ))
            .await
        })
        .await
    }
}
