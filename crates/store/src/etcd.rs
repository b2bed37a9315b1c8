//! `EtcdStore`: the [`Store`] over a real etcd (v3 API, tested against 3.4.23) through
//! `etcd-client` 0.21.
//!
//! ```text
//!   Store call ──► full key = namespace + key ──► KvClient / LeaseClient (one HTTP/2 channel)
//!   watch ──► own gRPC watch stream ──► task: created? canceled(compact_revision)? progress?
//!             events split per mod_revision ──mpsc──► WatchStream
//!   txn ──► etcd Txn { compare, success, failure: [Get each compared key] }
//!             failed? evaluate the compares locally on those Gets → failed + current
//! ```
//!
//! Every key is stored under a namespace (default `/flotilla/`), so one etcd can hold
//! several installations, and every test its own prefix. gRPC errors become
//! [`StoreError`]s in [`map_err`]; connection-level failures are
//! [`StoreError::Unavailable`] (retryable).

use std::collections::{HashMap, VecDeque};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use bytes::Bytes;
use etcd_client as ec;
use futures::StreamExt;
use tokio::sync::mpsc;
use tonic::Code;

use crate::Store;
use crate::error::{Result, StoreError};
use crate::types::{
    Compare, CompareOp, CompareTarget, DeleteResponse, Event, KeyValue, Lease, LeaseId, Op,
    OpResult, RangeRequest, RangeResponse, Revision, Txn, TxnResponse, WatchBatch, WatchEvent,
    validate_key,
};
use crate::watch::WatchStream;

/// The default key namespace (docs/design.md §3).
pub const DEFAULT_NAMESPACE: &str = "/flotilla";

/// TLS material for a secured etcd, as PEM files (the usual `--cacert`, `--cert`, `--key`).
#[derive(Clone, Debug, Default)]
pub struct EtcdTls {
    /// CA bundle that signed the server certificate; `None` uses the platform roots.
    pub ca_file: Option<PathBuf>,
    /// Client certificate, for mutual TLS (needs `key_file`).
    pub cert_file: Option<PathBuf>,
    /// Client private key, for mutual TLS (needs `cert_file`).
    pub key_file: Option<PathBuf>,
    /// The server name to verify, when it differs from the endpoint's host.
    pub domain_name: Option<String>,
}

/// How to reach etcd.
#[derive(Clone, Debug)]
pub struct EtcdConfig {
    /// Client URLs, e.g. `http://127.0.0.1:2379` (`https://` with [`EtcdConfig::tls`]).
    pub endpoints: Vec<String>,
    /// Every key is stored under this prefix; a `/` is appended if missing. The empty string
    /// means no namespace. Default [`DEFAULT_NAMESPACE`].
    pub namespace: String,
    /// How long to wait for a TCP/TLS connection. Default 5 s.
    pub connect_timeout: Duration,
    /// How long one unary request may take (not a watch's lifetime). Default 10 s.
    pub request_timeout: Duration,
    /// TLS, if the endpoints are `https://`.
    pub tls: Option<EtcdTls>,
    /// User and password, if etcd has auth enabled.
    pub user: Option<(String, String)>,
    /// Ask etcd for the previous value of every watched change (`Event::Delete::prev`).
    /// Default off: etcd then reads its backend once per event, which the store benchmark
    /// measured as several times the watch latency at p99 on a loaded etcd 3.4, and
    /// reflectors already hold the previous value in their cache.
    pub watch_prev_kv: bool,
}

impl Default for EtcdConfig {
    fn default() -> Self {
        Self {
            endpoints: vec!["http://127.0.0.1:2379".into()],
            namespace: DEFAULT_NAMESPACE.into(),
            connect_timeout: Duration::from_secs(5),
            request_timeout: Duration::from_secs(10),
            tls: None,
            user: None,
            watch_prev_kv: false,
        }
    }
}

impl EtcdConfig {
    /// The default configuration for these endpoints.
    pub fn new(endpoints: impl IntoIterator<Item = impl Into<String>>) -> Self {
        Self {
            endpoints: endpoints.into_iter().map(Into::into).collect(),
            ..Self::default()
        }
    }

    /// Uses another namespace.
    pub fn with_namespace(mut self, namespace: impl Into<String>) -> Self {
        self.namespace = namespace.into();
        self
    }
}

/// The etcd-backed [`Store`]. Cheap to clone: clones share one gRPC channel.
#[derive(Clone)]
pub struct EtcdStore {
    client: ec::Client,
    ns: String,
    watch_prev_kv: bool,
    /// With several endpoints: what keeps the balancer to the usable ones
    /// ([`keep_endpoints_usable`]), stopped with the last clone.
    endpoints: Option<Arc<EndpointKeeper>>,
}

/// Aborts a task when dropped.
struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// How often [`keep_endpoints_usable`] resolves every endpoint's name.
const ENDPOINT_CHECK_PERIOD: Duration = Duration::from_secs(1);
/// How long [`keep_endpoints_usable`]'s connection probe waits.
const ENDPOINT_PROBE_TIMEOUT: Duration = Duration::from_secs(1);
/// How long after its first attempt [`EtcdStore::send`] still starts a new attempt of a
/// request: longer than an election (etcd's default election timeout is 1 s; the first one
/// after a leader's loss takes up to twice that). See [`may_resend`].
const RETRY_WINDOW: Duration = Duration::from_secs(5);
/// At most this many retries of one request.
const MAX_RETRIES: u32 = 16;
/// The back-off before the first retry, doubled each time up to [`RETRY_BACKOFF_MAX`].
const RETRY_BACKOFF: Duration = Duration::from_millis(10);
const RETRY_BACKOFF_MAX: Duration = Duration::from_millis(250);

/// Which failed requests [`EtcdStore::send`] sends again.
///
/// - Every request is sent again when it surely was not applied: it never reached a server
///   (no connection to its endpoint: a name that stopped resolving, a refused or timed-out
///   connect), or etcd refused it before proposing it (`etcdserver: no leader`, answered
///   during an election).
/// - [`Retry::Unavailable`] also sends again a request that may have reached a server and
///   failed as unavailable (leader changed, request timed out, connection lost mid-call).
///   That is safe for reads (`get`, `range`, `current_revision`, `status`, opening a watch,
///   a lease keep-alive, which repeat nothing), and for guarded transactions, whose compare
///   on every written key makes a second application impossible; [`Store::txn`] resolves a
///   repeat whose compare fails on its own first success.
/// - Unguarded writes (`put`, `delete`, a txn writing a key it does not compare, lease
///   grant and revoke, compaction) are sent again only when surely not applied, as etcd's Go
///   client does for mutating calls.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Retry {
    NeverApplied,
    Unavailable,
}

/// How a request failed, for [`Retry`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Failure {
    /// Surely not applied.
    NeverApplied,
    /// Unavailable after it may have reached a server.
    MaybeApplied,
    /// Anything else: an answer (conflict, permission, invalid, compacted…), not retried.
    Answered,
}

impl std::fmt::Debug for EtcdStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EtcdStore")
            .field("namespace", &self.ns)
            .finish_non_exhaustive()
    }
}

/// The largest watch response the client accepts (see [`EtcdStore`]'s watch).
pub const WATCH_MAX_DECODING_MESSAGE_SIZE: usize = 256 * 1024 * 1024;

// === impl EtcdStore ===

impl EtcdStore {
    /// Builds the client. The connection is made lazily: a down etcd shows up as
    /// [`StoreError::Unavailable`] on the first request (see [`EtcdStore::status`]).
    pub async fn connect(config: EtcdConfig) -> Result<Self> {
        let mut opts = ec::ConnectOptions::new()
            .with_connect_timeout(config.connect_timeout)
            .with_timeout(config.request_timeout)
            .with_keep_alive(Duration::from_secs(10), Duration::from_secs(5));
        if let Some((user, password)) = &config.user {
            opts = opts.with_user(user.clone(), password.clone());
        }
        if let Some(tls) = &config.tls {
            opts = opts.with_tls(tls_options(tls)?);
        }
        let client = ec::Client::connect(&config.endpoints, Some(opts))
            .await
            .map_err(map_err)?;
        let mut ns = config.namespace;
        if !ns.is_empty() && !ns.ends_with('/') {
            ns.push('/');
        }
        let endpoints = (config.endpoints.len() > 1).then(|| {
            Arc::new(EndpointKeeper::start(
                client.clone(),
                config.endpoints.clone(),
            ))
        });
        Ok(Self {
            client,
            ns,
            watch_prev_kv: config.watch_prev_kv,
            endpoints,
        })
    }

    /// The endpoints out of the client's balancer now: their name does not resolve or they
    /// refuse connections ([`keep_endpoints_usable`]). Empty with one endpoint.
    pub fn endpoints_out(&self) -> Vec<String> {
        self.endpoints
            .as_ref()
            .and_then(|k| k.out.lock().ok().map(|out| out.iter().cloned().collect()))
            .unwrap_or_default()
    }

    /// Runs one unary request (`attempt` makes it afresh), observed as `op`, and sends it
    /// again on another endpoint when `retry` allows it for the failure (see [`Retry`]), with a
    /// short doubling back-off, for at most [`RETRY_WINDOW`] (one retry at least). The
    /// balancer picks the endpoint, and an endpoint whose name stopped resolving is not in it
    /// ([`keep_endpoints_usable`], told at once of an attempt that could not connect). Returns the result and whether an attempt that may
    /// have been applied was sent again (only under [`Retry::Unavailable`]).
    async fn send<T, Fut>(
        &self,
        op: &'static str,
        retry: Retry,
        mut attempt: impl FnMut() -> Fut,
    ) -> (std::result::Result<T, ec::Error>, bool)
    where
        Fut: std::future::Future<Output = std::result::Result<T, ec::Error>>,
    {
        let started = tokio::time::Instant::now();
        let mut backoff = RETRY_BACKOFF;
        let mut tries = 0;
        let mut resent_applied = false;
        loop {
            let this_attempt = started.elapsed();
            let result = attempt().observe(op).await;
            let Err(e) = &result else {
                return (result, resent_applied);
            };
            let why = match failure_kind(e) {
                Failure::NeverApplied => {
                    if let Some(keeper) = &self.endpoints {
                        keeper.suspect.notify_one();
                    }
                    "unsent"
                }
                Failure::MaybeApplied if retry == Retry::Unavailable => "unavailable",
                _ => return (result, resent_applied),
            };
            if !may_resend(this_attempt, tries) {
                return (result, resent_applied);
            }
            resent_applied |= why == "unavailable";
            tries += 1;
            metrics::counter!("flotilla_etcd_retries_total", "op" => op, "why" => why).increment(1);
            tracing::debug!(op, why, tries, error = %e, "etcd request sent again");
            tokio::time::sleep(backoff).await;
            backoff = (backoff * 2).min(RETRY_BACKOFF_MAX);
        }
    }

    /// [`EtcdStore::send`] for a request whose repeat needs no resolution.
    async fn unary<T, Fut>(
        &self,
        op: &'static str,
        retry: Retry,
        attempt: impl FnMut() -> Fut,
    ) -> std::result::Result<T, ec::Error>
    where
        Fut: std::future::Future<Output = std::result::Result<T, ec::Error>>,
    {
        self.send(op, retry, attempt).await.0
    }

    /// A read of `key` with `opts` (`op` names it), sent again while etcd is unavailable.
    async fn kv_get(
        &self,
        op: &'static str,
        key: Vec<u8>,
        opts: Option<ec::GetOptions>,
    ) -> std::result::Result<ec::GetResponse, ec::Error> {
        self.unary(op, Retry::Unavailable, || {
            let (mut kv, key, opts) = (self.client.kv_client(), key.clone(), opts.clone());
            async move { kv.get(key, opts).await }
        })
        .await
    }

    /// The server's version string (e.g. `3.4.23`): a cheap liveness check.
    pub async fn status(&self) -> Result<String> {
        let resp = self
            .unary("status", Retry::Unavailable, || {
                let mut m = self.client.maintenance_client();
                async move { m.status().await }
            })
            .await
            .map_err(map_err)?;
        Ok(resp.version().to_owned())
    }

    /// The namespace every key is stored under (ends with `/`, or is empty).
    pub fn namespace(&self) -> &str {
        &self.ns
    }

    /// The underlying client, for what the trait does not cover (e.g. maintenance).
    pub fn client(&self) -> &ec::Client {
        &self.client
    }

    fn full(&self, key: &str) -> Vec<u8> {
        let mut v = Vec::with_capacity(self.ns.len() + key.len());
        v.extend_from_slice(self.ns.as_bytes());
        v.extend_from_slice(key.as_bytes());
        v
    }

    fn strip(&self, key: Vec<u8>) -> Result<String> {
        let rel = key.strip_prefix(self.ns.as_bytes()).ok_or_else(|| {
            StoreError::Internal("etcd returned a key outside the namespace".into())
        })?;
        std::str::from_utf8(rel)
            .map(str::to_owned)
            .map_err(StoreError::codec)
    }

    fn kv_ref(&self, kv: &ec::KeyValue) -> Result<KeyValue> {
        Ok(KeyValue {
            key: self.strip(kv.key().to_vec())?,
            value: Bytes::copy_from_slice(kv.value()),
            create_revision: kv.create_revision(),
            mod_revision: kv.mod_revision(),
            version: kv.version(),
            lease: lease_of(kv.lease()),
        })
    }

    fn kv_owned(&self, kv: ec::KeyValue) -> Result<KeyValue> {
        let (create_revision, mod_revision, version, lease) = (
            kv.create_revision(),
            kv.mod_revision(),
            kv.version(),
            kv.lease(),
        );
        let (key, value) = kv.into_key_value();
        Ok(KeyValue {
            key: self.strip(key)?,
            value: Bytes::from(value),
            create_revision,
            mod_revision,
            version,
            lease: lease_of(lease),
        })
    }

    fn compare(&self, c: &Compare) -> ec::Compare {
        let key = self.full(&c.key);
        let op = match c.op {
            CompareOp::Equal => ec::CompareOp::Equal,
            CompareOp::NotEqual => ec::CompareOp::NotEqual,
            CompareOp::Less => ec::CompareOp::Less,
            CompareOp::Greater => ec::CompareOp::Greater,
        };
        match &c.target {
            CompareTarget::Version(v) => ec::Compare::version(key, op, *v),
            CompareTarget::CreateRevision(r) => ec::Compare::create_revision(key, op, *r),
            CompareTarget::ModRevision(r) => ec::Compare::mod_revision(key, op, *r),
            CompareTarget::Value(v) => ec::Compare::value(key, op, v.to_vec()),
        }
    }

    fn op(&self, op: &Op) -> ec::TxnOp {
        match op {
            Op::Put { key, value, lease } => ec::TxnOp::put(
                self.full(key),
                value.to_vec(),
                lease.map(|l| ec::PutOptions::new().with_lease(l.0)),
            ),
            Op::Delete { key } => ec::TxnOp::delete(self.full(key), None),
            Op::Get { key } => ec::TxnOp::get(self.full(key), None),
        }
    }
}

fn lease_of(id: i64) -> Option<LeaseId> {
    (id != 0).then_some(LeaseId(id))
}

/// The smallest key greater than every key starting with `prefix` (etcd's `range_end` for a
/// prefix); `[0]` means "to the end of the keyspace".
fn prefix_end(prefix: &[u8]) -> Vec<u8> {
    let mut end = prefix.to_vec();
    while let Some(last) = end.pop() {
        if last < 0xff {
            end.push(last + 1);
            return end;
        }
    }
    vec![0]
}

fn tls_options(tls: &EtcdTls) -> Result<ec::TlsOptions> {
    fn read(path: &PathBuf) -> Result<Vec<u8>> {
        std::fs::read(path).map_err(|e| {
            StoreError::InvalidArgument(format!("cannot read {}: {e}", path.display()))
        })
    }
    let mut opts = ec::TlsOptions::new();
    if let Some(ca) = &tls.ca_file {
        opts = opts.ca_certificate(ec::Certificate::from_pem(read(ca)?));
    }
    match (&tls.cert_file, &tls.key_file) {
        (Some(cert), Some(key)) => {
            opts = opts.identity(ec::Identity::from_pem(read(cert)?, read(key)?));
        }
        (None, None) => {}
        _ => {
            return Err(StoreError::InvalidArgument(
                "TLS client certificate and key must be given together".into(),
            ));
        }
    }
    if let Some(domain) = &tls.domain_name {
        opts = opts.domain_name(domain.clone());
    }
    Ok(opts)
}

/// After a guarded txn was sent again and its compares failed: whether the keys now hold
/// exactly what it writes (every put's value and lease, every deleted key gone), i.e. its
/// first attempt was applied and only the reply was lost. Then the results it would have
/// had; `None` when it has reads (their results are gone) or a key differs. A different
/// writer that wrote the same bytes in between is indistinguishable, and leaves the state
/// the caller derived anyway.
fn own_first_attempt(txn: &Txn, found: &HashMap<&str, Option<KeyValue>>) -> Option<Vec<OpResult>> {
    txn.success
        .iter()
        .map(|op| match op {
            Op::Put { key, value, lease } => found
                .get(key.as_str())?
                .as_ref()
                .filter(|kv| kv.value == *value && kv.lease == *lease)
                .map(|_| OpResult::Put),
            Op::Delete { key } => found
                .get(key.as_str())?
                .is_none()
                .then_some(OpResult::Delete { deleted: true }),
            Op::Get { .. } => None,
        })
        .collect()
}

/// Whether a failed attempt that started `started_after` the request's first one, after
/// `tries` earlier retries, may be followed by another. The window bounds when an attempt
/// *starts*, not when it fails: an attempt sent during an election may wait for etcd's own
/// request timeout (5 s plus two election timeouts, 7 s by default) before it answers
/// "request timed out, possibly due to previous leader failure". By then the new leader
/// is known, so the attempt after it succeeds; judging by the failure's time instead gave
/// that error to the caller when one member of three was killed (a compose run: a delete
/// whose first attempt lost its connection to the killed leader and whose second waited
/// 7 s on a follower). A request thus takes at most the window plus one attempt's timeout.
fn may_resend(started_after: Duration, tries: u32) -> bool {
    tries < MAX_RETRIES && started_after < RETRY_WINDOW
}

/// Classifies a failed request for [`Retry`]. Never applied: the connection to its endpoint
/// could not be made (name resolution, refused, connect timeout), or etcd answered `no
/// leader`, which its gRPC layer does before a request reaches raft.
fn failure_kind(e: &ec::Error) -> Failure {
    let text = format!("{e:?}");
    if text.contains("ConnectError") || text.contains("dns error") {
        return Failure::NeverApplied;
    }
    if let ec::Error::GRpcStatus(status) = e
        && status.code() == Code::Unavailable
        && status.message().contains("no leader")
    {
        return Failure::NeverApplied;
    }
    let unavailable = match e {
        ec::Error::TransportError(_) | ec::Error::IoError(_) => true,
        ec::Error::GRpcStatus(status) => {
            matches!(map_status(status.clone()), StoreError::Unavailable(_))
        }
        _ => false,
    };
    if unavailable {
        Failure::MaybeApplied
    } else {
        Failure::Answered
    }
}

/// The endpoints a multi-member client balances over, kept to those that can take a request
/// ([`keep_endpoints_usable`]).
struct EndpointKeeper {
    /// The keeping task, stopped with the last clone of the store.
    _task: AbortOnDrop,
    /// Woken by a request that could not connect: every endpoint is probed at once.
    suspect: Arc<tokio::sync::Notify>,
    /// The endpoints out of the balancer now.
    out: Arc<std::sync::Mutex<std::collections::BTreeSet<String>>>,
}

impl EndpointKeeper {
    fn start(client: ec::Client, endpoints: Vec<String>) -> Self {
        let suspect = Arc::new(tokio::sync::Notify::new());
        let out = Arc::new(std::sync::Mutex::new(std::collections::BTreeSet::new()));
        let task = tokio::spawn(keep_endpoints_usable(
            client,
            endpoints,
            suspect.clone(),
            out.clone(),
        ));
        EndpointKeeper {
            _task: AbortOnDrop(task),
            suspect,
            out,
        }
    }
}

/// Why an endpoint cannot take a request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Unusable {
    /// Its host name does not resolve.
    Unresolved,
    /// Nothing accepts a connection on it.
    Refused,
}

impl Unusable {
    fn as_str(self) -> &'static str {
        match self {
            Unusable::Unresolved => "its name does not resolve",
            Unusable::Refused => "it refuses connections",
        }
    }
}

/// Keeps the client's balancer to the endpoints that can take a request. A dead member
/// either loses its DNS name (in compose and in a Kubernetes StatefulSet alike) or, reached by
/// address, refuses connections; a balanced request sent to it fails at once, and the
/// balancer keeps choosing it: an endpoint that fails at once has no requests pending, so it
/// looks the least loaded (found by the fault suite under load: a request's sixteen retries
/// all went to the killed member, 6 s after it died).
///
/// Every [`ENDPOINT_CHECK_PERIOD`] each endpoint's name is resolved. When a request could not
/// connect ([`EndpointKeeper::suspect`]), every endpoint is also probed with a TCP connect at
/// once, and so is every endpoint that is out, each period, until it accepts again. An
/// unusable endpoint leaves the balancer (never the last one) and comes back when it is
/// usable again. Healthy endpoints are not probed by connection in steady state, so a TLS
/// member's log gets no handshake-less connections.
async fn keep_endpoints_usable(
    client: ec::Client,
    endpoints: Vec<String>,
    suspect: Arc<tokio::sync::Notify>,
    out: Arc<std::sync::Mutex<std::collections::BTreeSet<String>>>,
) {
    let mut removed: std::collections::BTreeSet<String> = std::collections::BTreeSet::new();
    let mut suspicious = false;
    loop {
        for endpoint in &endpoints {
            let probe = suspicious || removed.contains(endpoint);
            let unusable = usable(endpoint, probe).await.err();
            if let Some(why) = unusable
                && !removed.contains(endpoint)
                && removed.len() + 1 < endpoints.len()
            {
                match client.remove_endpoint(endpoint).await {
                    Ok(()) => {
                        tracing::warn!(%endpoint, why = why.as_str(), "etcd endpoint taken out of use; no request goes to it until it is usable again");
                        removed.insert(endpoint.clone());
                    }
                    Err(error) => {
                        tracing::warn!(%endpoint, %error, "cannot take the etcd endpoint out")
                    }
                }
            } else if unusable.is_none() && removed.contains(endpoint) {
                match client.add_endpoint(endpoint).await {
                    Ok(()) => {
                        tracing::info!(%endpoint, "etcd endpoint usable again; in use");
                        removed.remove(endpoint);
                    }
                    Err(error) => {
                        tracing::warn!(%endpoint, %error, "cannot put the etcd endpoint back")
                    }
                }
            }
        }
        if let Ok(mut out) = out.lock() {
            out.clone_from(&removed);
        }
        suspicious = tokio::select! {
            () = tokio::time::sleep(ENDPOINT_CHECK_PERIOD) => false,
            () = suspect.notified() => true,
        };
    }
}

/// Whether `endpoint` (`http(s)://host:port`) can take a request: its host resolves and,
/// when `probe`, a TCP connection to it opens within [`ENDPOINT_PROBE_TIMEOUT`] (a slow
/// answer counts as usable: only a refusal or an unreachable address is judged).
async fn usable(endpoint: &str, probe: bool) -> std::result::Result<(), Unusable> {
    let Some((host, port)) = host_port(endpoint) else {
        return Ok(());
    };
    let addr = match tokio::net::lookup_host((host.as_str(), port)).await {
        Ok(mut addrs) => addrs.next().ok_or(Unusable::Unresolved)?,
        Err(_) => return Err(Unusable::Unresolved),
    };
    if !probe {
        return Ok(());
    }
    match tokio::time::timeout(ENDPOINT_PROBE_TIMEOUT, tokio::net::TcpStream::connect(addr)).await {
        Ok(Err(_)) => Err(Unusable::Refused),
        Ok(Ok(_)) | Err(_) => Ok(()),
    }
}

/// The host (without IPv6 brackets) and port (default 2379) of `http(s)://host:port`.
fn host_port(endpoint: &str) -> Option<(String, u16)> {
    let uri = endpoint.parse::<tonic::codegen::http::Uri>().ok()?;
    let host = uri.host()?.trim_start_matches('[').trim_end_matches(']');
    Some((host.to_owned(), uri.port_u16().unwrap_or(2379)))
}

/// Maps an etcd-client error to a [`StoreError`]: transport failures, timeouts, "no leader"
/// and "leader changed" are [`StoreError::Unavailable`]; etcd's well-known messages become
/// their own variants.
pub fn map_err(e: ec::Error) -> StoreError {
    match e {
        ec::Error::GRpcStatus(status) => map_status(status),
        ec::Error::TransportError(_) | ec::Error::IoError(_) => StoreError::unavailable(e),
        ec::Error::LeaseKeepAliveError(ref msg) if msg.contains("not found") => {
            StoreError::LeaseNotFound { lease: LeaseId(0) }
        }
        ec::Error::WatchError(msg) => StoreError::WatchClosed(msg),
        ec::Error::InvalidArgs(msg) => StoreError::InvalidArgument(msg),
        ec::Error::InvalidUri(e) => StoreError::InvalidArgument(e.to_string()),
        ec::Error::EndpointError(msg) => StoreError::InvalidArgument(msg),
        other => StoreError::Internal(other.to_string()),
    }
}

fn map_status(status: tonic::Status) -> StoreError {
    let msg = status.message();
    match status.code() {
        Code::Unavailable | Code::DeadlineExceeded | Code::ResourceExhausted | Code::Aborted => {
            StoreError::unavailable(status)
        }
        Code::OutOfRange if msg.contains("compacted") => StoreError::Compacted {
            compact_revision: 0,
        },
        Code::OutOfRange if msg.contains("future revision") => StoreError::FutureRevision {
            revision: 0,
            current: 0,
        },
        Code::InvalidArgument if msg.contains("too many operations") => StoreError::TooManyOps {
            ops: 0,
            max: crate::MAX_TXN_OPS,
        },
        Code::NotFound if msg.contains("lease") => StoreError::LeaseNotFound { lease: LeaseId(0) },
        Code::PermissionDenied | Code::Unauthenticated => {
            StoreError::PermissionDenied(msg.to_owned())
        }
        // etcd reports missing or wrong credentials as InvalidArgument.
        Code::InvalidArgument
            if msg.contains("user name is empty")
                || msg.contains("authentication failed")
                || msg.contains("invalid auth token") =>
        {
            StoreError::PermissionDenied(msg.to_owned())
        }
        Code::InvalidArgument => StoreError::InvalidArgument(msg.to_owned()),
        // grpc-go reports a dropped connection mid-call as Unknown/Cancelled.
        Code::Unknown | Code::Cancelled
            if msg.contains("transport")
                || msg.contains("connection")
                || msg.contains("closed")
                || msg.contains("canceled")
                || msg.contains("cancelled") =>
        {
            StoreError::unavailable(status)
        }
        _ => StoreError::Internal(format!("{:?}: {msg}", status.code())),
    }
}

/// Fills in the lease id that etcd's error messages leave out.
fn with_lease(e: StoreError, lease: LeaseId) -> StoreError {
    match e {
        StoreError::LeaseNotFound { .. } => StoreError::LeaseNotFound { lease },
        other => other,
    }
}

fn header_rev(h: Option<&ec::ResponseHeader>) -> Revision {
    h.map_or(0, ec::ResponseHeader::revision)
}

/// Records every etcd request: `flotilla_etcd_request_duration_seconds{op}` (a histogram,
/// whose `_count` is the number of requests) and `flotilla_etcd_request_errors_total{op}` (the
/// request failed: unavailable, timeout, ...; a transaction whose compare failed is an answer,
/// not an error).
trait Observe: std::future::Future + Sized {
    fn observe(self, op: &'static str) -> impl std::future::Future<Output = Self::Output>;
}

impl<F, T, E> Observe for F
where
    F: std::future::Future<Output = std::result::Result<T, E>>,
{
    async fn observe(self, op: &'static str) -> Self::Output {
        let start = std::time::Instant::now();
        let result = self.await;
        metrics::histogram!("flotilla_etcd_request_duration_seconds", "op" => op)
            .record(start.elapsed().as_secs_f64());
        if result.is_err() {
            metrics::counter!("flotilla_etcd_request_errors_total", "op" => op).increment(1);
        }
        result
    }
}

#[async_trait]
impl Store for EtcdStore {
    async fn get(&self, key: &str) -> Result<Option<KeyValue>> {
        validate_key(key)?;
        let full = self.full(key);
        let mut resp = self.kv_get("get", full, None).await.map_err(map_err)?;
        resp.take_kvs()
            .into_iter()
            .next()
            .map(|kv| self.kv_owned(kv))
            .transpose()
    }

    async fn range(&self, req: RangeRequest) -> Result<RangeResponse> {
        let prefix = self.full(&req.prefix);
        let end = prefix_end(&prefix);
        let start = match &req.start_after {
            Some(after) => {
                let mut k = self.full(after);
                k.push(0);
                k.max(prefix.clone())
            }
            None => prefix.clone(),
        };
        let start = if start.is_empty() { vec![0] } else { start };
        let mut opts = ec::GetOptions::new().with_range(end);
        if req.limit > 0 {
            opts = opts.with_limit(i64::try_from(req.limit).unwrap_or(i64::MAX));
        }
        if let Some(rev) = req.revision.filter(|r| *r > 0) {
            opts = opts.with_revision(rev);
        }
        let mut resp =
            self.kv_get("range", start, Some(opts))
                .await
                .map_err(|e| match map_err(e) {
                    StoreError::FutureRevision { .. } => StoreError::FutureRevision {
                        revision: req.revision.unwrap_or(0),
                        current: 0,
                    },
                    other => other,
                })?;
        let revision = req
            .revision
            .filter(|r| *r > 0)
            .unwrap_or_else(|| header_rev(resp.header()));
        let more = resp.more();
        let kvs = resp
            .take_kvs()
            .into_iter()
            .map(|kv| self.kv_owned(kv))
            .collect::<Result<Vec<_>>>()?;
        Ok(RangeResponse {
            kvs,
            more,
            revision,
        })
    }

    async fn put(&self, key: &str, value: Bytes, lease: Option<LeaseId>) -> Result<Revision> {
        validate_key(key)?;
        let opts = lease.map(|l| ec::PutOptions::new().with_lease(l.0));
        let full = self.full(key);
        let resp = self
            .unary("put", Retry::NeverApplied, || {
                let (mut kv, full, opts) = (self.client.kv_client(), full.clone(), opts.clone());
                let value = value.to_vec();
                async move { kv.put(full, value, opts).await }
            })
            .await
            .map_err(|e| match lease {
                Some(l) => with_lease(map_err(e), l),
                None => map_err(e),
            })?;
        Ok(header_rev(resp.header()))
    }

    async fn delete(&self, key: &str) -> Result<DeleteResponse> {
        validate_key(key)?;
        let full = self.full(key);
        let mut resp = self
            .unary("delete", Retry::NeverApplied, || {
                let (mut kv, full) = (self.client.kv_client(), full.clone());
                async move {
                    kv.delete(full, Some(ec::DeleteOptions::new().with_prev_key()))
                        .await
                }
            })
            .await
            .map_err(map_err)?;
        let prev = resp
            .take_prev_kvs()
            .into_iter()
            .next()
            .map(|kv| self.kv_owned(kv))
            .transpose()?;
        Ok(DeleteResponse {
            revision: header_rev(resp.header()),
            prev,
        })
    }

    async fn txn(&self, txn: Txn) -> Result<TxnResponse> {
        txn.validate()?;
        // The failure branch reads every compared key once, so that a lost compare costs no
        // extra round trip.
        let mut compared: Vec<&str> = Vec::with_capacity(txn.compares.len());
        for c in &txn.compares {
            if !compared.contains(&c.key.as_str()) {
                compared.push(&c.key);
            }
        }
        let request = ec::Txn::new()
            .when(
                txn.compares
                    .iter()
                    .map(|c| self.compare(c))
                    .collect::<Vec<_>>(),
            )
            .and_then(txn.success.iter().map(|op| self.op(op)).collect::<Vec<_>>())
            .or_else(
                compared
                    .iter()
                    .map(|k| ec::TxnOp::get(self.full(k), None))
                    .collect::<Vec<_>>(),
            );
        let leases: Vec<LeaseId> = txn
            .success
            .iter()
            .filter_map(|op| match op {
                Op::Put { lease, .. } => *lease,
                _ => None,
            })
            .collect();
        // Guarded: every key it writes is compared, so a second application cannot pass.
        let guarded = txn.success.iter().all(|op| match op {
            Op::Get { .. } => true,
            Op::Put { key, .. } | Op::Delete { key } => compared.contains(&key.as_str()),
        });
        let retry = if guarded {
            Retry::Unavailable
        } else {
            Retry::NeverApplied
        };
        let (resp, resent_applied) = self
            .send("txn", retry, || {
                let (mut kv, request) = (self.client.kv_client(), request.clone());
                async move { kv.txn(request).await }
            })
            .await;
        let resp = resp.map_err(|e| match leases.first() {
            Some(l) => with_lease(map_err(e), *l),
            None => map_err(e),
        })?;
        let revision = header_rev(resp.header());
        let responses = resp.op_responses();
        if resp.succeeded() {
            let mut results = Vec::with_capacity(responses.len());
            for r in responses {
                results.push(match r {
                    ec::TxnOpResponse::Put(_) => OpResult::Put,
                    ec::TxnOpResponse::Delete(d) => OpResult::Delete {
                        deleted: d.deleted() > 0,
                    },
                    ec::TxnOpResponse::Get(g) => {
                        OpResult::Get(g.kvs().first().map(|kv| self.kv_ref(kv)).transpose()?)
                    }
                    ec::TxnOpResponse::Txn(_) => {
                        return Err(StoreError::Internal(
                            "unexpected nested txn response".into(),
                        ));
                    }
                });
            }
            return Ok(TxnResponse::Committed { revision, results });
        }
        let mut found: HashMap<&str, Option<KeyValue>> = HashMap::with_capacity(compared.len());
        for (key, r) in compared.iter().zip(responses) {
            let kv = match r {
                ec::TxnOpResponse::Get(g) => {
                    g.kvs().first().map(|kv| self.kv_ref(kv)).transpose()?
                }
                _ => None,
            };
            found.insert(key, kv);
        }
        let current: Vec<Option<KeyValue>> = txn
            .compares
            .iter()
            .map(|c| found.get(c.key.as_str()).cloned().flatten())
            .collect();
        if resent_applied && let Some(results) = own_first_attempt(&txn, &found) {
            // The first attempt was applied after all (its reply was lost): the compares
            // now fail on its own writes. Reported as committed at the newest revision
            // among them.
            let revision = found
                .values()
                .flatten()
                .map(|kv| kv.mod_revision)
                .max()
                .unwrap_or(revision);
            metrics::counter!("flotilla_etcd_txn_resolved_total").increment(1);
            return Ok(TxnResponse::Committed { revision, results });
        }
        let failed = Compare::failing(&txn.compares, &current);
        Ok(TxnResponse::Failed {
            revision,
            failed,
            current,
        })
    }

    async fn compact(&self, revision: Revision) -> Result<()> {
        self.unary("compact", Retry::NeverApplied, || {
            let mut kv = self.client.kv_client();
            async move {
                kv.compact(revision, Some(ec::CompactionOptions::new().with_physical()))
                    .await
            }
        })
        .await
        .map_err(|e| match map_err(e) {
            StoreError::FutureRevision { .. } => StoreError::FutureRevision {
                revision,
                current: 0,
            },
            other => other,
        })?;
        Ok(())
    }

    async fn current_revision(&self) -> Result<Revision> {
        // A key inside the namespace, so that a user whose role covers only the namespace
        // may ask.
        let key = if self.ns.is_empty() {
            vec![0u8]
        } else {
            self.full("")
        };
        let count_only = ec::GetOptions::new().with_count_only();
        let resp = self
            .kv_get("current_revision", key, Some(count_only))
            .await
            .map_err(map_err)?;
        Ok(header_rev(resp.header()))
    }

    async fn watch(&self, prefix: &str, from_revision: Option<Revision>) -> Result<WatchStream> {
        let key = self.full(prefix);
        let key = if key.is_empty() { vec![0] } else { key };
        let mut opts = ec::WatchOptions::new().with_range(prefix_end(&key));
        if self.watch_prev_kv {
            opts = opts.with_prev_key();
        }
        let from = from_revision.filter(|r| *r > 0);
        if let Some(rev) = from {
            opts = opts.with_start_revision(rev);
        }
        // A watch that replays history gets one response per revision, and one revision can be
        // a 128-op transaction of large objects (a 10,000-binding failover replayed 5.7 MB in
        // one response). etcd does not limit what it sends; the client's 4 MiB default would
        // fail the watch forever. Fragmentation is not used because a fragmented revision would
        // reach consumers as two batches of one revision.
        let ws = self
            .unary("watch", Retry::Unavailable, || {
                let (watch, key, opts) = (self.client.watch_client(), key.clone(), opts.clone());
                async move {
                    watch
                        .max_decoding_message_size(WATCH_MAX_DECODING_MESSAGE_SIZE)
                        .watch(key, Some(opts))
                        .await
                }
            })
            .await
            .map_err(map_err)?;
        let (requests, responses) = ws.split();
        let (progress_tx, progress) = mpsc::unbounded_channel();
        let state = EtcdWatch {
            store: self.clone(),
            requests,
            responses,
            progress,
            pending: VecDeque::new(),
            from,
            last: from.map_or(0, |f| f - 1),
            emitted: 0,
            synced: from.is_none(),
            created_rev: None,
            done: false,
        };
        Ok(WatchStream::from_stream(state.into_stream(), progress_tx))
    }

    async fn lease_grant(&self, ttl: Duration) -> Result<Lease> {
        let secs = i64::try_from(ttl.as_secs() + u64::from(ttl.subsec_nanos() > 0))
            .unwrap_or(i64::MAX)
            .max(1);
        let resp = self
            .unary("lease_grant", Retry::NeverApplied, || {
                let mut lease = self.client.lease_client();
                async move { lease.grant(secs, None).await }
            })
            .await
            .map_err(map_err)?;
        if !resp.error().is_empty() {
            return Err(StoreError::Internal(resp.error().to_owned()));
        }
        Ok(Lease {
            id: LeaseId(resp.id()),
            ttl: Duration::from_secs(u64::try_from(resp.ttl()).unwrap_or(0)),
        })
    }

    async fn lease_keep_alive(&self, lease: LeaseId) -> Result<Duration> {
        // The first request/response pair is made (and checked) by `keep_alive` itself; a
        // second one tells us the renewed TTL. A new stream per renewal, so that a renewal
        // after a member's loss goes to a member that answers.
        let (mut keeper, mut responses) = self
            .unary("lease_keep_alive", Retry::Unavailable, || {
                let mut client = self.client.lease_client();
                async move { client.keep_alive(lease.0).await }
            })
            .await
            .map_err(|e| with_lease(map_err(e), lease))?;
        keeper
            .keep_alive()
            .await
            .map_err(|e| with_lease(map_err(e), lease))?;
        match responses
            .message()
            .await
            .map_err(|e| with_lease(map_err(e), lease))?
        {
            Some(r) if r.ttl() > 0 => Ok(Duration::from_secs(u64::try_from(r.ttl()).unwrap_or(0))),
            Some(_) => Err(StoreError::LeaseNotFound { lease }),
            None => Err(StoreError::unavailable("lease keep-alive stream closed")),
        }
    }

    async fn lease_revoke(&self, lease: LeaseId) -> Result<()> {
        self.unary("lease_revoke", Retry::NeverApplied, || {
            let mut client = self.client.lease_client();
            async move { client.revoke(lease.0).await }
        })
        .await
        .map_err(|e| with_lease(map_err(e), lease))?;
        Ok(())
    }
}

/// The state of one etcd watch, polled directly by the consumer of its [`WatchStream`] (no
/// task in between, so no extra wake-up per event).
///
/// etcd-client 0.21 quirks handled here: the first message is `created=true` with no events;
/// a watch from a compacted revision is `created` and then `canceled` with
/// `compact_revision` (so is a watch that fell behind a compaction); a progress notification
/// is a message with no events.
///
/// etcd 3.4.23 answers a progress request with its current revision even while this watch
/// is still replaying history (fixed in later etcd releases). To keep "every event up to the
/// progress revision was delivered" true, a watch that started at a past revision reports
/// the last delivered revision instead until it has delivered an event at or past the
/// revision etcd had when the watch was created.
struct EtcdWatch {
    store: EtcdStore,
    requests: ec::WatchRequestSender,
    responses: ec::WatchResponseStream,
    progress: mpsc::UnboundedReceiver<()>,
    pending: VecDeque<WatchEvent>,
    from: Option<Revision>,
    /// The newest revision delivered (or skipped as already delivered).
    last: Revision,
    /// The newest revision of any item handed to the consumer.
    emitted: Revision,
    synced: bool,
    created_rev: Option<Revision>,
    done: bool,
}

impl EtcdWatch {
    fn into_stream(self) -> impl futures::Stream<Item = Result<WatchEvent>> + Send {
        futures::stream::unfold(self, |mut st| async move {
            if st.done {
                return None;
            }
            loop {
                if let Some(ev) = st.pending.pop_front() {
                    return Some((Ok(ev), st));
                }
                let step = tokio::select! {
                    Some(()) = st.progress.recv() => {
                        st.requests.request_progress().await.map_err(map_err)
                    }
                    msg = st.responses.next() => st.handle(msg),
                };
                if let Err(e) = step {
                    st.done = true;
                    return Some((Err(e), st));
                }
            }
        })
    }

    /// Turns one etcd message into pending items, or a terminal error.
    fn handle(
        &mut self,
        msg: Option<std::result::Result<ec::WatchResponse, ec::Error>>,
    ) -> Result<()> {
        let resp = match msg {
            None => {
                return Err(StoreError::WatchClosed(
                    "etcd closed the watch stream".into(),
                ));
            }
            Some(Err(e)) => return Err(map_err(e)),
            Some(Ok(resp)) => resp,
        };
        if resp.canceled() {
            return Err(if resp.compact_revision() > 0 {
                StoreError::Compacted {
                    compact_revision: resp.compact_revision(),
                }
            } else {
                StoreError::WatchClosed(format!(
                    "etcd canceled the watch: {}",
                    resp.cancel_reason()
                ))
            });
        }
        let header = header_rev(resp.header());
        if resp.created() {
            self.created_rev = Some(header);
            if self.from.is_none_or(|f| f > header) {
                self.synced = true;
            }
            if resp.events().is_empty() {
                return Ok(());
            }
        }
        if resp.events().is_empty() {
            // Synced: etcd's revision. Still replaying: only what was surely delivered (the
            // revision before the start, or the last batch).
            let revision = if self.synced {
                header.max(self.emitted)
            } else {
                self.emitted.max(self.last)
            };
            self.emitted = revision;
            self.pending.push_back(WatchEvent::Progress { revision });
            return Ok(());
        }
        for batch in split_batches(&self.store, resp.events())? {
            if batch.revision <= self.last {
                continue;
            }
            self.last = batch.revision;
            self.emitted = batch.revision;
            if self.created_rev.is_some_and(|c| self.last >= c) {
                self.synced = true;
            }
            self.pending.push_back(WatchEvent::Batch(batch));
        }
        Ok(())
    }
}

/// Splits one watch response (which may carry several revisions) into one batch per revision.
fn split_batches(store: &EtcdStore, events: &[ec::Event]) -> Result<Vec<WatchBatch>> {
    let mut out: Vec<WatchBatch> = Vec::new();
    for ev in events {
        let Some(kv) = ev.kv() else { continue };
        let rev = kv.mod_revision();
        let event = match ev.event_type() {
            ec::EventType::Put => Event::Put(store.kv_ref(kv)?),
            ec::EventType::Delete => Event::Delete {
                key: store.strip(kv.key().to_vec())?,
                prev: ev.prev_kv().map(|p| store.kv_ref(p)).transpose()?,
                mod_revision: rev,
            },
        };
        match out.last_mut() {
            Some(b) if b.revision == rev => b.events.push(event),
            _ => out.push(WatchBatch {
                revision: rev,
                events: vec![event],
            }),
        }
    }
    Ok(out)
}

/// Raft timing for a one-member etcd on this machine: it elects itself at once with a short
/// heartbeat (used by the tests' etcd and the benchmarks' temporary one).
pub const FAST_RAFT: [&str; 2] = ["--heartbeat-interval=10", "--election-timeout=100"];

/// The command-line flags of a one-member etcd named `name` with its data under `data_dir`,
/// serving clients on `client_url` and its (unused) peer port on `peer_url`, with
/// [`FAST_RAFT`] timing and logs as JSON on stderr.
pub fn single_member_flags(
    name: &str,
    data_dir: &std::path::Path,
    client_url: &str,
    peer_url: &str,
) -> Vec<String> {
    let mut flags = vec![
        format!("--name={name}"),
        format!("--data-dir={}", data_dir.display()),
        "--logger=zap".to_owned(),
        "--log-outputs=stderr".to_owned(),
        format!("--listen-client-urls={client_url}"),
        format!("--advertise-client-urls={client_url}"),
        format!("--listen-peer-urls={peer_url}"),
        format!("--initial-advertise-peer-urls={peer_url}"),
        format!("--initial-cluster={name}={peer_url}"),
        format!("--initial-cluster-token={name}"),
    ];
    flags.extend(FAST_RAFT.map(str::to_owned));
    flags
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prefix_end_matches_etcd() {
        assert_eq!(prefix_end(b"a/"), b"a0".to_vec());
        assert_eq!(prefix_end(b"a\xff"), b"b".to_vec());
        assert_eq!(prefix_end(b"\xff\xff"), vec![0]);
        assert_eq!(prefix_end(b""), vec![0]);
    }

    /// An endpoint is judged by its name, and by a connection only when probed: a listening
    /// address is usable, a refusing one is not, a name that does not resolve is not.
    #[tokio::test]
    async fn endpoints_are_judged_by_name_and_by_a_probe() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let endpoint = format!("http://{}", listener.local_addr().expect("address"));
        assert_eq!(usable(&endpoint, true).await, Ok(()));
        drop(listener);
        assert_eq!(usable(&endpoint, true).await, Err(Unusable::Refused));
        assert_eq!(usable(&endpoint, false).await, Ok(()), "not probed");
        assert_eq!(
            usable("http://flotilla-no-such-host.invalid:2379", false).await,
            Err(Unusable::Unresolved)
        );
        assert_eq!(
            host_port("https://[::1]:2380"),
            Some(("::1".to_owned(), 2380))
        );
        assert_eq!(
            host_port("http://etcd-0"),
            Some(("etcd-0".to_owned(), 2379))
        );
    }

    #[test]
    fn status_codes_map_to_variants() {
        let compacted = map_status(tonic::Status::out_of_range(
            "etcdserver: mvcc: required revision has been compacted",
        ));
        assert!(matches!(compacted, StoreError::Compacted { .. }));
        let unavailable = map_status(tonic::Status::unavailable("etcdserver: leader changed"));
        assert!(unavailable.is_retryable());
        let lease = map_status(tonic::Status::not_found(
            "etcdserver: requested lease not found",
        ));
        assert!(matches!(lease, StoreError::LeaseNotFound { .. }));
        let dup = map_status(tonic::Status::invalid_argument(
            "etcdserver: duplicate key given in txn request",
        ));
        assert!(matches!(dup, StoreError::InvalidArgument(_)));
    }

    /// The compose run's sequence: the first attempt loses its connection to the killed
    /// leader at once, the second waits 7 s on a follower for etcd's own request timeout.
    /// The third must still be sent, since the second started inside the window.
    #[test]
    fn an_attempt_started_inside_the_window_is_followed_by_another() {
        let ms = Duration::from_millis;
        let cases = [
            (ms(0), 0, true),
            (ms(110), 1, true),
            (RETRY_WINDOW - ms(1), 5, true),
            (RETRY_WINDOW, 5, false),
            (ms(7_110), 2, false),
            (ms(100), MAX_RETRIES, false),
        ];
        for (started_after, tries, want) in cases {
            assert_eq!(
                may_resend(started_after, tries),
                want,
                "attempt started {started_after:?} after the first, {tries} retries before"
            );
        }
    }

    #[test]
    fn failures_are_classified_for_retry() {
        use tonic::Code;
        let cases = [
            (
                Code::Unavailable,
                "etcdserver: no leader",
                Failure::NeverApplied,
            ),
            (
                Code::Unavailable,
                "etcdserver: leader changed",
                Failure::MaybeApplied,
            ),
            (
                Code::Unavailable,
                "etcdserver: request timed out",
                Failure::MaybeApplied,
            ),
            (Code::DeadlineExceeded, "timeout", Failure::MaybeApplied),
            (
                Code::Unknown,
                "error reading a body from connection",
                Failure::MaybeApplied,
            ),
            (
                Code::InvalidArgument,
                "etcdserver: duplicate key given in txn request",
                Failure::Answered,
            ),
            (
                Code::PermissionDenied,
                "etcdserver: permission denied",
                Failure::Answered,
            ),
            (
                Code::OutOfRange,
                "etcdserver: mvcc: required revision has been compacted",
                Failure::Answered,
            ),
        ];
        for (code, message, want) in cases {
            let status = tonic::Status::new(code, message);
            let got = failure_kind(&ec::Error::GRpcStatus(status));
            assert_eq!(got, want, "{code:?}: {message}");
        }
    }

    fn kv(key: &str, value: &'static [u8], mod_revision: Revision) -> KeyValue {
        KeyValue {
            key: key.into(),
            value: Bytes::from_static(value),
            create_revision: 1,
            mod_revision,
            version: 1,
            lease: None,
        }
    }

    #[test]
    fn a_resent_txn_recognises_its_own_first_application() {
        let txn = Txn::new()
            .when(Compare::mod_revision("a", CompareOp::Equal, 5))
            .when(Compare::mod_revision("b", CompareOp::Equal, 6))
            .and_then(Op::put("a", Bytes::from_static(b"new")))
            .and_then(Op::delete("b"));
        // applied: a holds the new bytes, b is gone
        let applied = HashMap::from([("a", Some(kv("a", b"new", 9))), ("b", None)]);
        assert_eq!(
            own_first_attempt(&txn, &applied),
            Some(vec![OpResult::Put, OpResult::Delete { deleted: true }])
        );
        // someone else wrote a: a real conflict
        let other = HashMap::from([("a", Some(kv("a", b"theirs", 9))), ("b", None)]);
        assert_eq!(own_first_attempt(&txn, &other), None);
        // b still there: not applied
        let kept = HashMap::from([
            ("a", Some(kv("a", b"new", 9))),
            ("b", Some(kv("b", b"x", 6))),
        ]);
        assert_eq!(own_first_attempt(&txn, &kept), None);
        // a txn that reads cannot be resolved (its read is gone)
        let reads = Txn::new()
            .when(Compare::mod_revision("a", CompareOp::Equal, 5))
            .and_then(Op::put("a", Bytes::from_static(b"new")))
            .and_then(Op::get("a"));
        assert_eq!(own_first_attempt(&reads, &applied), None);
    }
}
