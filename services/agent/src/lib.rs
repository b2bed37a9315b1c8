//! `flotilla-agent`: the agent of a Pull cluster, Flotilla's `karmada-agent`. It runs next to
//! a member's Kubernetes API server and is the only thing that calls it; the control plane
//! never does.
//!
//! ```text
//!   heartbeats ── every --heartbeat-interval ──► ClusterHealth.Heartbeat
//!                 probe: GET /readyz (/healthz on 404) on --member; when healthy, the
//!                 member's version, API enablements and capacity (nodes, pods)
//!
//!   works ── Api.WatchWorks{cluster} (from 0: ADDED…, BOOKMARK, then changes; resumed from
//!            the last resourceVersion, re-listed on OUT_OF_RANGE, jittered back-off)
//!            │ Work generation changed → server-side apply of its manifest on --member
//!            │ (the work-executor's code: flotilla-member); failures are retried every
//!            │ --status-interval; deletionTimestamp / DELETED → delete on the member
//!            │ (unless preserveResourcesOnDeletion, WE-6.1)
//!            ▼
//!          every --status-interval: one labelled list per kind → health (IN-3), ready
//!          replicas → WorkExecutor.ReportWorkStatus for every Work whose status changed
//! ```
//!
//! Calls to the control plane carry `x-flotilla-cluster` (the work-executor refuses reports
//! about another cluster's Works) and, with `--token-file`, a bearer token whose principal
//! `agent:<cluster>` confines the agent to its own cluster (docs/design.md §9); `https://`
//! addresses use the `--tls-*` flags (mutual TLS). See docs/operations.md ("flotilla-agent").

#![forbid(unsafe_code)]
#![deny(missing_docs)]

pub mod agent;

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use flotilla_member::{Member, MemberError, Target};
use flotilla_proto::v1;
use flotilla_proto::v1::cluster_health_client::ClusterHealthClient;
use flotilla_runtime::args::ArgError;
use flotilla_runtime::bootstrap::{ProcessError, start_process};
use flotilla_runtime::telemetry::LogFormat;
use flotilla_runtime::{SecurityArgs, Shutdown};
use flotilla_store::typed::now_timestamp;
use tonic::metadata::MetadataValue;
use tonic::transport::{Channel, Endpoint};

/// Metadata naming the agent's cluster on its calls.
pub const CLUSTER_METADATA: &str = "x-flotilla-cluster";
/// How long one unary RPC of the agent may take.
pub const RPC_TIMEOUT: Duration = Duration::from_secs(10);

/// Flags of `flotilla-agent`. Every flag can also be given as `FLOTILLA_<FLAG>`.
#[derive(Clone, Debug, clap::Parser)]
#[command(
    name = "flotilla-agent",
    version,
    about = "The agent of a Pull cluster (Karmada's karmada-agent): heartbeats its Cluster to \
             cluster-health, watches its Works on the api, applies them on the member's \
             Kubernetes API server and reports their status to the work-executor."
)]
pub struct Args {
    /// The Cluster's name in Flotilla (a Pull Cluster of that name must exist).
    #[arg(long, env = "FLOTILLA_CLUSTER_NAME")]
    pub cluster: String,

    /// The member's Kubernetes API server (`https://host:6443`, or `http://` for a local
    /// member-sim).
    #[arg(long, env = "FLOTILLA_MEMBER")]
    pub member: String,

    /// PEM CA bundle that signed the member API server's certificate.
    #[arg(long, env = "FLOTILLA_MEMBER_CA")]
    pub member_ca: Option<PathBuf>,

    /// File holding the bearer token the agent presents to the member's API server (a
    /// ServiceAccount token). Read again every 10 s and used from then on when it changed,
    /// so a rotated projected token keeps working. Never logged.
    #[arg(long, env = "FLOTILLA_MEMBER_TOKEN_FILE")]
    pub member_token_file: Option<PathBuf>,

    /// The api service (`host:port` or `http(s)://host:port`), for Api.WatchWorks.
    #[arg(long, env = "FLOTILLA_API")]
    pub api: String,

    /// The cluster-health service, for ClusterHealth.Heartbeat.
    #[arg(long, env = "FLOTILLA_CLUSTER_HEALTH")]
    pub cluster_health: String,

    /// The work-executor service, for WorkExecutor.ReportWorkStatus.
    #[arg(long, env = "FLOTILLA_WORK_EXECUTOR")]
    pub work_executor: String,

    /// File holding the bearer token the agent presents to the control plane (services
    /// started with --auth-tokens-file; its line there names `agent:<cluster>`). Read again
    /// every 10 s, so a rotated token takes over without a restart. Never logged.
    #[arg(long, env = "FLOTILLA_TOKEN_FILE")]
    pub token_file: Option<PathBuf>,

    /// How often to heartbeat. Default 10s: Karmada's agent renews its lease every
    /// `--cluster-lease-duration` (40s) × `--cluster-lease-renew-interval-fraction` (0.25).
    #[arg(long, env = "FLOTILLA_HEARTBEAT_INTERVAL", default_value = "10s", value_parser = humantime::parse_duration)]
    pub heartbeat_interval: Duration,

    /// How often the applied objects' status is read back (one list per kind) and failed
    /// applies are retried. Default 1s.
    #[arg(long, env = "FLOTILLA_STATUS_INTERVAL", default_value = "1s", value_parser = humantime::parse_duration)]
    pub status_interval: Duration,

    /// How the applied objects' status is read back: `watch` follows each kind the Works
    /// hold through one watch selected by Flotilla's label and reports a change as it
    /// happens; `list` lists each kind every `--status-interval`. Default `watch` (measured
    /// against `list` on member-sim and on a real kube-apiserver: docs/real-kubernetes.md).
    #[arg(long, env = "FLOTILLA_STATUS_SOURCE", value_enum, default_value_t = StatusSource::Watch)]
    pub status_source: StatusSource,

    /// Deadline of each call to the member's API server. Default 5s.
    #[arg(long, env = "FLOTILLA_MEMBER_TIMEOUT", default_value = "5s", value_parser = humantime::parse_duration)]
    pub member_timeout: Duration,

    /// TLS towards the control plane (`--tls-ca`, and `--tls-cert`/`--tls-key` for mutual
    /// TLS).
    #[command(flatten)]
    pub security: SecurityArgs,

    /// Log filter, in `tracing-subscriber` `EnvFilter` syntax (e.g. `info,flotilla=debug`).
    #[arg(long, env = "FLOTILLA_LOG", default_value = "info")]
    pub log: String,

    /// Log line format.
    #[arg(long, env = "FLOTILLA_LOG_FORMAT", value_enum, default_value_t = LogFormat::Text)]
    pub log_format: LogFormat,
}

/// Validated configuration.
#[derive(Clone, Debug)]
pub struct Config {
    /// The Cluster's name.
    pub cluster: String,
    /// How to reach the member's API server (its credentials are redacted from `Debug`).
    pub member: Target,
    /// The api service.
    pub api: String,
    /// The cluster-health service.
    pub cluster_health: String,
    /// The work-executor service.
    pub work_executor: String,
    /// The control-plane token, if any.
    pub token: Option<Token>,
    /// `--heartbeat-interval`.
    pub heartbeat_interval: Duration,
    /// `--status-interval`.
    pub status_interval: Duration,
    /// `--member-timeout`.
    pub member_timeout: Duration,
    /// `--status-source`.
    pub status_source: StatusSource,
    /// TLS towards the control plane.
    pub security: SecurityArgs,
}

/// How the agent reads back the status of what it applied (`--status-source`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum StatusSource {
    /// One watch per kind, by Flotilla's label: changes are reported as they happen.
    #[default]
    Watch,
    /// One list per kind every status interval.
    List,
}

/// The bearer token the agent presents to the control plane; `Debug` never shows it. One
/// read from `--token-file` is read again every [`flotilla_member::TOKEN_FILE_RELOAD`] when it
/// is next used, so a rotated token takes over without a restart (the old one can then be
/// revoked); a file that cannot be read keeps the token in use.
#[derive(Clone)]
pub struct Token {
    current: Arc<std::sync::Mutex<(Instant, String)>>,
    file: Option<PathBuf>,
}

impl std::fmt::Debug for Token {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Token(<redacted>)")
    }
}

impl PartialEq for Token {
    fn eq(&self, other: &Self) -> bool {
        self.file == other.file && self.value() == other.value()
    }
}

impl Eq for Token {}

impl Token {
    /// A fixed token (tests).
    pub fn new(token: impl Into<String>) -> Self {
        Self {
            current: Arc::new(std::sync::Mutex::new((Instant::now(), token.into()))),
            file: None,
        }
    }

    /// `token`, read from `file` just now.
    fn from_file(file: PathBuf, token: String) -> Self {
        Self {
            current: Arc::new(std::sync::Mutex::new((Instant::now(), token))),
            file: Some(file),
        }
    }

    /// The token to send now.
    pub fn value(&self) -> String {
        let mut current = match self.current.lock() {
            Ok(c) => c,
            Err(poisoned) => poisoned.into_inner(),
        };
        if let Some(file) = &self.file
            && current.0.elapsed() >= flotilla_member::TOKEN_FILE_RELOAD
        {
            current.0 = Instant::now();
            match flotilla_member::read_token_file(file) {
                Ok(token) if token != current.1 => {
                    tracing::info!(file = %file.display(), "control-plane token file changed; using the new token");
                    current.1 = token;
                }
                Ok(_) => {}
                Err(error) => {
                    tracing::warn!(%error, "control-plane token file unreadable; keeping the token in use");
                }
            }
        }
        current.1.clone()
    }
}

/// Why the agent could not run.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// Its flags or logging.
    #[error(transparent)]
    Start(#[from] ProcessError),
    /// A control-plane address cannot be used.
    #[error("invalid address {addr:?}: {message}")]
    Address {
        /// The address as given.
        addr: String,
        /// Why.
        message: String,
    },
    /// The member's API server cannot be reached with what was given.
    #[error(transparent)]
    Member(#[from] MemberError),
}

fn read_secret(flag: &'static str, path: &std::path::Path) -> Result<String, ArgError> {
    std::fs::read_to_string(path)
        .map(|s| s.trim().to_owned())
        .map_err(|e| ArgError {
            flag,
            message: format!("cannot read {}: {e}", path.display()),
        })
        .and_then(|s| {
            if s.is_empty() {
                Err(ArgError {
                    flag,
                    message: format!("{} is empty", path.display()),
                })
            } else {
                Ok(s)
            }
        })
}

impl Args {
    /// Checks what clap cannot and builds the [`Config`]; every problem is reported.
    pub fn validate(&self) -> Result<Config, Vec<ArgError>> {
        let mut errors = Vec::new();
        let mut need = |flag: &'static str, v: &str| {
            if v.trim().is_empty() {
                errors.push(ArgError {
                    flag,
                    message: "must not be empty".into(),
                });
            }
            v.trim().to_owned()
        };
        let cluster = need("cluster", &self.cluster);
        let member = need("member", &self.member);
        let api = need("api", &self.api);
        let cluster_health = need("cluster-health", &self.cluster_health);
        let work_executor = need("work-executor", &self.work_executor);
        for (flag, d) in [
            ("heartbeat-interval", self.heartbeat_interval),
            ("status-interval", self.status_interval),
            ("member-timeout", self.member_timeout),
        ] {
            if d.is_zero() {
                errors.push(ArgError {
                    flag,
                    message: "must be positive".into(),
                });
            }
        }
        let mut target = Target::plain(member);
        if let Some(path) = &self.member_ca {
            match std::fs::read(path) {
                Ok(pem) => target.ca_pem = Some(pem),
                Err(e) => errors.push(ArgError {
                    flag: "member-ca",
                    message: format!("cannot read {}: {e}", path.display()),
                }),
            }
        }
        if let Some(path) = &self.member_token_file {
            // read once now so that a missing or empty file is refused at start; the client
            // reads the file itself from then on (rotation)
            match read_secret("member-token-file", path) {
                Ok(t) => {
                    target.token = Some(t);
                    target.token_file = Some(path.clone());
                }
                Err(e) => errors.push(e),
            }
        }
        let token = match &self.token_file {
            None => None,
            Some(path) => match read_secret("token-file", path) {
                Ok(t) => Some(Token::from_file(path.clone(), t)),
                Err(e) => {
                    errors.push(e);
                    None
                }
            },
        };
        if !errors.is_empty() {
            return Err(errors);
        }
        Ok(Config {
            cluster,
            member: target,
            api,
            cluster_health,
            work_executor,
            token,
            heartbeat_interval: self.heartbeat_interval,
            status_interval: self.status_interval,
            member_timeout: self.member_timeout,
            status_source: self.status_source,
            security: self.security.clone(),
        })
    }

    /// Runs the agent until SIGTERM/SIGINT.
    pub async fn run(self) -> anyhow::Result<()> {
        let (config, shutdown) =
            start_process(self.validate(), &self.log, self.log_format).map_err(Error::Start)?;
        run(config, shutdown).await?;
        Ok(())
    }
}

/// Adds the agent's identity and token to a request.
pub(crate) fn authorize<T>(request: &mut tonic::Request<T>, cluster: &str, token: Option<&Token>) {
    if let Ok(v) = MetadataValue::try_from(cluster) {
        request.metadata_mut().insert(CLUSTER_METADATA, v);
    }
    if let Some(t) = token
        && let Ok(v) = MetadataValue::try_from(format!("Bearer {}", t.value()))
    {
        request.metadata_mut().insert("authorization", v);
    }
}

fn endpoint(security: &SecurityArgs, addr: &str) -> Result<Endpoint, Error> {
    let url = if addr.contains("://") {
        addr.to_owned()
    } else {
        format!("http://{addr}")
    };
    security
        .endpoint(&url)
        .map(|e| e.connect_timeout(Duration::from_secs(5)))
        .map_err(|e| Error::Address {
            addr: addr.to_owned(),
            message: e.to_string(),
        })
}

/// How often the agent reads its TLS files (`--tls-cert`, `--tls-key`, `--tls-ca`) again.
pub const TLS_RELOAD: Duration = Duration::from_secs(10);

/// A channel whose endpoint `build` makes from the TLS flags; every [`TLS_RELOAD`] the TLS
/// files are read again, and when they changed a new endpoint built with them joins the
/// channel and the old one leaves. So a rotated client certificate (or CA) is used by every
/// new call without a restart and without replacing the clients; calls under way (the Works
/// watch) finish on the old connection. A rotation that cannot be used (a missing or broken
/// file) is logged and the endpoint in use stays.
pub fn tls_following_channel(
    security: &SecurityArgs,
    build: impl Fn(&SecurityArgs) -> Result<Endpoint, Error> + Send + 'static,
    period: Duration,
    shutdown: Shutdown,
) -> Result<Channel, Error> {
    use tonic::transport::channel::Change;
    let first = build(security)?;
    let (channel, changes) = Channel::balance_channel::<u64>(4);
    let _ = changes.try_send(Change::Insert(0, first));
    let files: Vec<PathBuf> = [&security.tls_cert, &security.tls_key, &security.tls_ca]
        .into_iter()
        .flatten()
        .cloned()
        .collect();
    if files.is_empty() {
        return Ok(channel);
    }
    let read_all = move || {
        files
            .iter()
            .map(|f| std::fs::read(f).ok())
            .collect::<Vec<_>>()
    };
    let security = security.clone();
    tokio::spawn(async move {
        let mut seen = read_all();
        let mut key = 0u64;
        loop {
            tokio::select! {
                () = shutdown.triggered() => return,
                () = tokio::time::sleep(period) => {}
            }
            let now = read_all();
            if now == seen {
                continue;
            }
            match build(&security) {
                Ok(endpoint) => {
                    key += 1;
                    if changes.send(Change::Insert(key, endpoint)).await.is_err()
                        || changes.send(Change::Remove(key - 1)).await.is_err()
                    {
                        return; // the channel is gone
                    }
                    tracing::info!("TLS files changed; new calls use them");
                    seen = now;
                }
                Err(error) => {
                    tracing::warn!(%error, "TLS files changed but cannot be used; keeping the ones in use");
                    seen = now;
                }
            }
        }
    });
    Ok(channel)
}

/// Runs the agent until `shutdown` fires.
pub async fn run(config: Config, shutdown: Shutdown) -> Result<(), Error> {
    let follow = |addr: &str, build: fn(Endpoint) -> Endpoint| {
        let addr = addr.to_owned();
        tls_following_channel(
            &config.security,
            move |security| endpoint(security, &addr).map(build),
            TLS_RELOAD,
            shutdown.clone(),
        )
    };
    let health = follow(&config.cluster_health, |e| e.timeout(RPC_TIMEOUT))?;
    let executor = follow(&config.work_executor, |e| e.timeout(RPC_TIMEOUT))?;
    // No request timeout on the watch: it is a stream that lasts. HTTP/2 keep-alives notice
    // a dead server instead.
    let api = follow(&config.api, |e| {
        e.http2_keep_alive_interval(Duration::from_secs(10))
            .keep_alive_timeout(Duration::from_secs(5))
            .keep_alive_while_idle(true)
    })?;
    let member = Arc::new(Member::new(
        &config.member,
        config.member_timeout,
        Arc::new(tokio::sync::Semaphore::new(32)),
    )?);
    tracing::info!(
        cluster = %config.cluster,
        member = %config.member.endpoint,
        api = %config.api,
        cluster_health = %config.cluster_health,
        work_executor = %config.work_executor,
        "flotilla-agent starting"
    );
    let works = agent::WorkAgent::new(member.clone(), &config, executor);
    tokio::join!(
        heartbeats(
            member,
            &config,
            ClusterHealthClient::new(health),
            shutdown.clone()
        ),
        works.run(
            flotilla_proto::v1::api_client::ApiClient::new(api),
            shutdown
        ),
    );
    Ok(())
}

/// The heartbeat the agent sends now: its probe of the member (CH-2) and, when healthy, the
/// status it collected (CH-5.2).
pub async fn heartbeat_request(cluster: &str, member: &Member) -> v1::HeartbeatRequest {
    // Flotilla: a Pull agent does not count its nodes per grade of resource models (it does
    // not read its Cluster's spec); a Pull cluster is estimated from its summed summary
    let (outcome, message, status) = member.probe_with_status(cluster, &[]).await;
    v1::HeartbeatRequest {
        cluster_name: cluster.to_owned(),
        cluster_uid: String::new(),
        probe: Some(v1::ProbeResult {
            online: outcome.online,
            healthy: outcome.online && outcome.healthy,
            message,
        }),
        status,
        sent_at: Some(now_timestamp()),
    }
}

/// Heartbeats every `--heartbeat-interval` until `shutdown`.
async fn heartbeats(
    member: Arc<Member>,
    config: &Config,
    mut client: ClusterHealthClient<Channel>,
    shutdown: Shutdown,
) {
    let mut failing = false;
    loop {
        let mut request = tonic::Request::new(heartbeat_request(&config.cluster, &member).await);
        authorize(&mut request, &config.cluster, config.token.as_ref());
        match client.heartbeat(request).await {
            Ok(_) => {
                if failing {
                    tracing::info!(cluster = %config.cluster, "heartbeats accepted again");
                }
                failing = false;
            }
            Err(status) => {
                if !failing {
                    tracing::warn!(cluster = %config.cluster, %status, "heartbeat failed");
                }
                failing = true;
            }
        }
        tokio::select! {
            () = shutdown.triggered() => return,
            () = tokio::time::sleep(config.heartbeat_interval) => {}
        }
    }
}

#[cfg(test)]
mod tests;
