//! `flotilla-member-sim`: a simulated member cluster, in the spirit of kwok.
//!
//! ```text
//!             --listen (one address, gRPC + HTTP/1.1)        --control-listen (optional)
//!   probes ──► GET /readyz, /healthz  200 "ok" | 500          same router, faults ignored
//!   work-executor ──► Kubernetes API (kube.rs): discovery,       (tests look inside an
//!                      server-side apply, delete, lists          "unreachable" member here)
//!   cluster-health ──► /version, discovery, nodes and pods
//!   tests, CLI ─────► flotilla.v1.MemberSim SetFault, GetStats
//!                         │
//!                         ▼
//!                  sim::Sim  manifests → "pods": Pending until a place within --capacity,
//!                            Ready after --pod-startup-delay; status as each kind's
//!                            controller writes it (health is read from it, IN-3)
//!                         ▲
//!
//! A Pull cluster is a member-sim with `flotilla-agent` next to it, pointed at its address.
//! ```
//!
//! Faults (`--fault`, `SetFault`): `unhealthy` makes `/readyz` answer 500 while the API still
//! works (reachable but not ok, CH-3.2); `unreachable` makes every HTTP request and RPC on
//! `--listen` hang until healed (CH-3.1) — except `SetFault` itself, which stays exempt so
//! that a test can heal the member through the same address. `SetFault` also sets the member API's errors (F11,
//! `api_errors`): seeded percentages of applies that fail (500), conflict (409), apply but lose
//! their reply, or hang past the caller's timeout, and of deletes and status reads that fail;
//! `GetStats` counts the objects ever created (`creates`) and the errors injected.

#![forbid(unsafe_code)]
#![deny(missing_docs)]

pub mod grpc;
pub mod kube;
pub mod kubelet;
pub mod server;
pub mod sim;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use flotilla_runtime::Shutdown;
use flotilla_runtime::args::ArgError;
use flotilla_runtime::bootstrap::{ProcessError, start_process};
use flotilla_runtime::telemetry::LogFormat;
use tokio::net::TcpListener;

pub use crate::sim::{Fault, Sim, SimConfig};

/// Flags of `flotilla-member-sim`. Every flag can also be given as `FLOTILLA_<FLAG>`.
#[derive(Clone, Debug, clap::Parser)]
#[command(
    name = "flotilla-member-sim",
    version,
    about = "A simulated member cluster for Flotilla (like kwok): runs \"pods\" of applied \
             manifests with a start-up delay and a capacity, answers health probes, and can \
             be told to become unhealthy or unreachable."
)]
pub struct Args {
    /// Address serving gRPC (flotilla.v1.MemberSim, grpc.health.v1, reflection) and HTTP/1.1
    /// `GET /readyz` and `GET /healthz` on one port. A Push Cluster's `spec.apiEndpoint` is
    /// `http://<this address>`. Default port 6443, a Kubernetes API server's.
    #[arg(long, env = "FLOTILLA_LISTEN", default_value = "0.0.0.0:6443")]
    pub listen: SocketAddr,

    /// Optional second address serving the same RPCs and endpoints with faults ignored, so
    /// that a test or an operator can look inside (and heal) an "unreachable" member.
    #[arg(long, env = "FLOTILLA_CONTROL_LISTEN")]
    pub control_listen: Option<SocketAddr>,

    /// The member cluster's name (`--cluster` is an alias): reported by GetStats and used in
    /// the names of its simulated node.
    #[arg(
        long,
        visible_alias = "cluster",
        env = "FLOTILLA_CLUSTER_NAME",
        default_value = "member1"
    )]
    pub name: String,

    /// How many replicas ("pods") may run at once over every manifest; more stay Pending.
    /// Reported as `resourceSummary.allocatableReplicas` (capacity minus every pod). Default
    /// 100, a modest cluster.
    #[arg(long, env = "FLOTILLA_CAPACITY", default_value_t = 100)]
    pub capacity: u32,

    /// How long a pod takes from getting a place to Ready (`500ms`, `2s`, `1m`). Default 2s,
    /// about a small container's start-up.
    #[arg(long, env = "FLOTILLA_POD_STARTUP_DELAY", default_value = "2s", value_parser = humantime::parse_duration)]
    pub pod_startup_delay: Duration,

    /// The fault at start-up; change it later with the SetFault RPC.
    #[arg(long, env = "FLOTILLA_FAULT", value_enum, default_value_t = Fault::Healthy)]
    pub fault: Fault,

    /// A file holding the bearer token its Kubernetes API requires (401 without it), as a
    /// real API server requires credentials; `/version`, `/readyz` and `/healthz` stay
    /// anonymous. Default: none required.
    #[arg(long, env = "FLOTILLA_TOKEN_FILE")]
    pub token_file: Option<std::path::PathBuf>,

    /// Node mode: drive this REAL Kubernetes API server (`https://host:port`) instead of
    /// serving a simulated one. member-sim then registers `--nodes` simulated Nodes, renews
    /// their Leases, plays kubelet for the pods bound to them (Running and Ready after
    /// `--pod-startup-delay`), and `--listen` becomes a TCP proxy to the API server where the
    /// faults apply (`unreachable` holds every byte; `unhealthy` turns the nodes NotReady).
    /// Point Flotilla at `https://<--listen>` with the API server's CA and a token.
    #[arg(long, env = "FLOTILLA_KUBE_APISERVER")]
    pub kube_apiserver: Option<String>,

    /// Node mode: the PEM CA bundle that signed the API server's certificate.
    #[arg(long, env = "FLOTILLA_KUBE_CA", requires = "kube_apiserver")]
    pub kube_ca: Option<std::path::PathBuf>,

    /// Node mode: a file holding the bearer token member-sim presents to the API server. It
    /// needs to create Nodes and Leases, write pod status, bind and delete pods (the
    /// `system:node`-like rights of a kubelet; cluster-admin in tests).
    #[arg(long, env = "FLOTILLA_KUBE_TOKEN_FILE", requires = "kube_apiserver")]
    pub kube_token_file: Option<std::path::PathBuf>,

    /// Node mode: how many Nodes to register; `--capacity` pods are split evenly over them.
    #[arg(long, env = "FLOTILLA_NODES", default_value_t = 1)]
    pub nodes: u32,

    /// Each node's allocatable CPU, a Kubernetes quantity (`4`, `1500m`). A pod whose CPU
    /// request does not fit stays Pending (simulated: on the one node; node mode: the real
    /// kube-scheduler decides), and cluster-health's resource summary counts it (ES-3).
    /// Default: simulated, one CPU per `--capacity` pod and placement by pods only; node
    /// mode, 8.
    #[arg(long, env = "FLOTILLA_NODE_CPU")]
    pub node_cpu: Option<String>,

    /// Each node's allocatable memory, a Kubernetes quantity (`32Gi`), as `--node-cpu`.
    /// Default: simulated, 1Gi per `--capacity` pod; node mode, 32Gi.
    #[arg(long, env = "FLOTILLA_NODE_MEMORY")]
    pub node_memory: Option<String>,

    /// Node mode: bind unscheduled pods to the nodes (least loaded with room first), for an
    /// API server without a kube-scheduler. It counts pods only, not CPU or memory.
    #[arg(long, env = "FLOTILLA_BIND_PODS")]
    pub bind_pods: bool,

    /// Log filter, in `tracing-subscriber` `EnvFilter` syntax (e.g. `info,flotilla=debug`).
    #[arg(long, env = "FLOTILLA_LOG", default_value = "info")]
    pub log: String,

    /// Log line format.
    #[arg(long, env = "FLOTILLA_LOG_FORMAT", value_enum, default_value_t = LogFormat::Text)]
    pub log_format: LogFormat,
}

/// Validated configuration.
#[derive(Clone)]
pub struct Config {
    /// The simulated member.
    pub sim: SimConfig,
    /// `--listen`.
    pub listen: SocketAddr,
    /// `--control-listen`.
    pub control_listen: Option<SocketAddr>,
    /// The token its Kubernetes API requires (`--token-file`).
    pub token: Option<String>,
    /// Node mode (`--kube-apiserver`): the real API server and the node agent's settings.
    pub kube: Option<NodeMode>,
}

/// Node mode's settings.
#[derive(Clone, Debug)]
pub struct NodeMode {
    /// The API server, with its CA and token file.
    pub target: flotilla_member::Target,
    /// `host:port` the proxy on `--listen` relays to.
    pub upstream: String,
    /// The node agent.
    pub kubelet: kubelet::KubeletConfig,
}

impl std::fmt::Debug for Config {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Config")
            .field("sim", &self.sim)
            .field("listen", &self.listen)
            .field("control_listen", &self.control_listen)
            .field("token", &self.token.as_ref().map(|_| "<redacted>"))
            .field("kube", &self.kube)
            .finish_non_exhaustive()
    }
}

/// Why the simulator could not run.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// Its flags or logging.
    #[error(transparent)]
    Start(#[from] ProcessError),
    /// An address could not be bound.
    #[error("cannot listen on {addr}")]
    Bind {
        /// The address.
        addr: SocketAddr,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
    /// The router could not be built.
    #[error(transparent)]
    Server(#[from] server::ServerError),
}

// === impl Args ===

impl Args {
    /// Checks what clap cannot and builds the [`Config`]; every problem is reported.
    pub fn validate(&self) -> Result<Config, Vec<ArgError>> {
        let Self {
            listen,
            control_listen,
            name,
            capacity,
            pod_startup_delay,
            fault,
            token_file,
            kube_apiserver,
            kube_ca,
            kube_token_file,
            nodes,
            node_cpu,
            node_memory,
            bind_pods,
            log: _,
            log_format: _,
        } = self;
        let mut errors = Vec::new();
        if name.trim().is_empty() {
            errors.push(ArgError {
                flag: "name",
                message: "must not be empty".into(),
            });
        }
        if i32::try_from(*capacity).is_err() {
            errors.push(ArgError {
                flag: "capacity",
                message: format!("must be at most {}", i32::MAX),
            });
        }
        if control_listen.is_some_and(|c| c == *listen && listen.port() != 0) {
            errors.push(ArgError {
                flag: "control-listen",
                message: "must differ from --listen".into(),
            });
        }
        let token = token_file.as_ref().and_then(|path| {
            let token = match std::fs::read_to_string(path) {
                Ok(t) if !t.trim().is_empty() => Ok(t.trim().to_owned()),
                Ok(_) => Err(format!("{} is empty", path.display())),
                Err(e) => Err(format!("cannot read {}: {e}", path.display())),
            };
            token
                .map_err(|message| {
                    errors.push(ArgError {
                        flag: "token-file",
                        message,
                    });
                })
                .ok()
        });
        let mut quantity = |flag: &'static str, text: &Option<String>, cpu: bool| {
            let text = text.as_deref()?;
            let parsed = if cpu {
                flotilla_core::quantity::cpu_millis(text)
            } else {
                flotilla_core::quantity::memory_bytes(text)
            };
            let message = match parsed {
                Ok(a) if a > 0 => return Some(a),
                Ok(_) => format!("{text:?} must be more than 0"),
                Err(e) => format!("{text:?} is not a quantity: {e}"),
            };
            errors.push(ArgError { flag, message });
            None
        };
        let node_cpu_millis = quantity("node-cpu", node_cpu, true);
        let node_memory_bytes = quantity("node-memory", node_memory, false);
        let kube = kube_apiserver.as_ref().and_then(|endpoint| {
            let mut push = |flag: &'static str, message: String| {
                errors.push(ArgError { flag, message });
            };
            let upstream = endpoint
                .parse::<http::Uri>()
                .ok()
                .filter(|u| matches!(u.scheme_str(), Some("https" | "http")))
                .and_then(|u| {
                    let port = u.port_u16().unwrap_or(if u.scheme_str() == Some("https") {
                        443
                    } else {
                        80
                    });
                    u.host().map(|h| format!("{h}:{port}"))
                });
            let Some(upstream) = upstream else {
                push(
                    "kube-apiserver",
                    format!("{endpoint:?} is not an https:// or http:// URL with a host"),
                );
                return None;
            };
            if *nodes == 0 {
                push("nodes", "must be at least 1".into());
            }
            let mut target = flotilla_member::Target::plain(endpoint.clone());
            if let Some(path) = kube_ca {
                match std::fs::read(path) {
                    Ok(pem) => target.ca_pem = Some(pem),
                    Err(e) => push("kube-ca", format!("cannot read {}: {e}", path.display())),
                }
            }
            if let Some(path) = kube_token_file {
                match flotilla_member::read_token_file(path) {
                    Ok(_) => target.token_file = Some(path.clone()),
                    Err(message) => push("kube-token-file", message),
                }
            }
            Some(NodeMode {
                target,
                upstream,
                kubelet: kubelet::KubeletConfig {
                    cluster: name.clone(),
                    nodes: *nodes,
                    capacity: *capacity,
                    node_cpu: node_cpu.clone().unwrap_or_else(|| "8".to_owned()),
                    node_memory: node_memory.clone().unwrap_or_else(|| "32Gi".to_owned()),
                    pod_startup_delay: *pod_startup_delay,
                    bind_pods: *bind_pods,
                },
            })
        });
        if !errors.is_empty() {
            return Err(errors);
        }
        Ok(Config {
            kube,
            sim: SimConfig {
                name: name.clone(),
                capacity: *capacity,
                pod_startup_delay: *pod_startup_delay,
                fault: *fault,
                node_cpu_millis,
                node_memory_bytes,
            },
            listen: *listen,
            control_listen: *control_listen,
            token,
        })
    }

    /// Runs the simulator until SIGTERM/SIGINT.
    pub async fn run(self) -> anyhow::Result<()> {
        let (config, shutdown) =
            start_process(self.validate(), &self.log, self.log_format).map_err(Error::Start)?;
        let listeners = Listeners::bind(&config).await?;
        let sim = Arc::new(Sim::new(config.sim.clone()));
        if let Some(token) = config.token.clone() {
            sim.require_token(token);
        }
        match config.kube {
            Some(mode) => run_node_mode(sim, mode, listeners, shutdown).await?,
            None => run_with(sim, listeners, shutdown).await?,
        }
        Ok(())
    }
}

/// The bound listeners (bind port 0 in tests and read `local_addr`).
#[derive(Debug)]
pub struct Listeners {
    /// `--listen`: faults apply.
    pub listen: TcpListener,
    /// `--control-listen`: faults ignored.
    pub control: Option<TcpListener>,
}

impl Listeners {
    /// Binds `--listen` and `--control-listen`.
    pub async fn bind(config: &Config) -> Result<Self, Error> {
        let bind = |addr: SocketAddr| async move {
            TcpListener::bind(addr)
                .await
                .map_err(|source| Error::Bind { addr, source })
        };
        let listen = bind(config.listen).await?;
        let control = match config.control_listen {
            Some(addr) => Some(bind(addr).await?),
            None => None,
        };
        Ok(Self { listen, control })
    }
}

/// Starts a healthy member-sim `name` with `capacity` replicas, serving on 127.0.0.1:0 (no
/// control listener) until `shutdown` fires: for tests that keep the `Sim` to set faults
/// in-process. Returns the sim and its address.
pub async fn spawn_local(
    name: &str,
    capacity: u32,
    pod_startup_delay: Duration,
    shutdown: &Shutdown,
) -> std::io::Result<(Arc<Sim>, SocketAddr)> {
    let sim = Arc::new(Sim::new(SimConfig {
        name: name.into(),
        capacity,
        pod_startup_delay,
        fault: Fault::Healthy,
        node_cpu_millis: None,
        node_memory_bytes: None,
    }));
    let listen = TcpListener::bind("127.0.0.1:0").await?;
    let addr = listen.local_addr()?;
    let listeners = Listeners {
        listen,
        control: None,
    };
    tokio::spawn(run_with(sim.clone(), listeners, shutdown.clone()));
    Ok((sim, addr))
}

/// Serves `sim` on `listeners` until `shutdown` fires. `flotilla up` and tests call this with a `Sim` they keep a handle on
/// (to set faults in-process).
pub async fn run_with(
    sim: Arc<Sim>,
    listeners: Listeners,
    shutdown: Shutdown,
) -> Result<(), Error> {
    let router = server::router(sim.clone()).await?;
    let Listeners { listen, control } = listeners;
    tracing::info!(
        cluster = %sim.name(),
        listen = ?listen.local_addr().ok(),
        control = ?control.as_ref().and_then(|c| c.local_addr().ok()),
        capacity = sim.config().capacity,
        pod_startup_delay = ?sim.config().pod_startup_delay,
        fault = ?sim.fault(),
        "member-sim serving (its Kubernetes API, /readyz, /healthz and gRPC on one address)"
    );
    let main = server::serve(listen, router.clone(), Some(sim.clone()), shutdown.clone());
    let control = async {
        if let Some(l) = control {
            server::serve(l, router, None, shutdown.clone()).await;
        }
    };
    tokio::join!(main, control);
    Ok(())
}

/// Node mode: the proxy on `listeners.listen`, the control listener, and the node agent
/// driving the real API server, until `shutdown` fires.
pub async fn run_node_mode(
    sim: Arc<Sim>,
    mode: NodeMode,
    listeners: Listeners,
    shutdown: Shutdown,
) -> anyhow::Result<()> {
    // a long deadline: the node agent's pod watch is one request that lasts minutes
    let client = flotilla_member::kube_client(&mode.target, Duration::from_secs(295))?;
    let router = server::router(sim.clone()).await?;
    let Listeners { listen, control } = listeners;
    tracing::info!(
        cluster = %sim.name(),
        apiserver = %mode.target.endpoint,
        proxy = ?listen.local_addr().ok(),
        control = ?control.as_ref().and_then(|c| c.local_addr().ok()),
        nodes = mode.kubelet.nodes,
        capacity = mode.kubelet.capacity,
        pod_startup_delay = ?mode.kubelet.pod_startup_delay,
        "member-sim in node mode: a proxy to a real API server on --listen, simulated nodes and kubelet"
    );
    let proxy = kubelet::proxy(listen, mode.upstream, sim.clone(), shutdown.clone());
    let control = async {
        if let Some(l) = control {
            server::serve(l, router, None, shutdown.clone()).await;
        }
    };
    let nodes = kubelet::run(client, mode.kubelet, sim, shutdown.clone());
    tokio::join!(proxy, control, nodes);
    Ok(())
}

#[cfg(test)]
mod tests;
