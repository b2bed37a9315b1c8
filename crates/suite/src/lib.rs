//! The whole Flotilla suite in one process: the six control-plane services, each on its own
//! loopback gRPC port (+ an admin port), on one shared store, and simulated member clusters
//! served in-process. Used by `flotilla up` (fixed ports) and `flotilla bench` (port 0).
//! `flotilla bench failover --processes` runs each service as its own process instead
//! ([`Hosting::Processes`]), as production does, sharing only etcd.
//!
//! ```text
//!   StoreRef (MemStore or etcd) ─┬─ api               grpc + admin   (detector + Api)
//!                                ├─ cluster-health    grpc + admin   (probes members)
//!                                ├─ taint-manager     grpc + admin
//!                                ├─ scheduler         grpc + admin
//!                                ├─ graceful-eviction grpc + admin
//!                                └─ work-executor     grpc + admin   (applies to members)
//!   member-sim × N  (each its own address: its Kubernetes API, /readyz, gRPC MemberSim control)
//!   supervisor: the first task that stops on its own stops everything (a partial suite
//!   would only confuse); Suite::stop drains every task.
//! ```
//!
//! Every service's configuration comes from parsing its own clap `Args` with the flags we
//! want (`flotilla_scheduler::Args::try_parse_from([...])`), so that defaults are defined in
//! one place: the service. The services are started by looping over one registry,
//! [`Service::ALL`]; the process-based test harness names its binaries from it too.

pub mod logging;
pub mod store;
pub mod timers;

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context as _, anyhow};
use clap::Parser;
use flotilla_member_sim::{Fault, Listeners, Sim, SimConfig};
use flotilla_proto::v1;
use flotilla_proto::v1::api_client::ApiClient;
use flotilla_runtime::Shutdown;
use flotilla_runtime::telemetry::install_metrics;
use flotilla_store::StoreRef;
use futures::future::BoxFuture;
use metrics_exporter_prometheus::PrometheusHandle;
use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio::task::{JoinHandle, JoinSet};
use tonic::transport::{Channel, Endpoint};

/// What every admin port's `/metrics` renders (one recorder per process).
type Handle = Option<PrometheusHandle>;

/// How the suite starts one service: `flotilla_runtime::service::spawn::<S>` for its `S`.
type SpawnFn = for<'a> fn(
    StoreRef,
    &'a [String],
    TcpListener,
    Option<TcpListener>,
    Handle,
    &'a Shutdown,
) -> BoxFuture<'a, anyhow::Result<JoinHandle<anyhow::Result<()>>>>;

fn spawn_boxed<'a, S: flotilla_runtime::service::Service>(
    store: StoreRef,
    flags: &'a [String],
    grpc: TcpListener,
    admin: Option<TcpListener>,
    metrics: Handle,
    shutdown: &'a Shutdown,
) -> BoxFuture<'a, anyhow::Result<JoinHandle<anyhow::Result<()>>>> {
    Box::pin(flotilla_runtime::service::spawn::<S>(
        store, flags, grpc, admin, metrics, shutdown,
    ))
}

/// A control-plane service: an entry of the one registry ([`Service::ALL`]) that `flotilla
/// up`, `flotilla bench` and the test harnesses loop over. Adding a service is one line
/// there.
#[derive(Clone, Copy)]
pub struct Service {
    name: &'static str,
    grpc_service: &'static str,
    spawn: SpawnFn,
}

impl Service {
    /// The entry of `S` (its name and gRPC service come from its `Service` impl).
    const fn of<S: flotilla_runtime::service::Service>() -> Service {
        Service {
            name: S::NAME,
            grpc_service: S::GRPC_SERVICE,
            spawn: spawn_boxed::<S>,
        }
    }

    /// `flotilla-api`: the front door and the detector.
    pub const API: Service = Service::of::<flotilla_api::Api>();
    /// `flotilla-cluster-health`: probes members, Ready condition, controller taints.
    pub const CLUSTER_HEALTH: Service = Service::of::<flotilla_cluster_health::ClusterHealth>();
    /// `flotilla-taint-manager`: evicts bindings from NoExecute-tainted clusters.
    pub const TAINT_MANAGER: Service = Service::of::<flotilla_taint_manager::TaintManager>();
    /// `flotilla-scheduler`: places bindings.
    pub const SCHEDULER: Service = Service::of::<flotilla_scheduler::Scheduler>();
    /// `flotilla-graceful-eviction`: removes eviction tasks.
    pub const GRACEFUL_EVICTION: Service =
        Service::of::<flotilla_graceful_eviction::GracefulEviction>();
    /// `flotilla-work-executor`: Works, member applies, aggregated status.
    pub const WORK_EXECUTOR: Service = Service::of::<flotilla_work_executor::Executor>();

    /// The registry: every service, in port order (api first: the client's default
    /// `--server`; `flotilla up` gives the i-th service the api's port + i).
    pub const ALL: [Service; 6] = [
        Service::API,
        Service::CLUSTER_HEALTH,
        Service::TAINT_MANAGER,
        Service::SCHEDULER,
        Service::GRACEFUL_EVICTION,
        Service::WORK_EXECUTOR,
    ];

    /// The service's short name, as in its binary `flotilla-<name>`.
    pub fn name(self) -> &'static str {
        self.name
    }

    /// The gRPC service it serves (`flotilla.v1.Scheduler`).
    pub fn grpc_service(self) -> &'static str {
        self.grpc_service
    }

    /// Parses a name as given on the command line (`scheduler`, `flotilla-scheduler`).
    pub fn parse(name: &str) -> Option<Service> {
        let name = name.strip_prefix("flotilla-").unwrap_or(name);
        Service::ALL.into_iter().find(|s| s.name() == name)
    }

    /// Starts the service on `store` through the one service shape
    /// (`flotilla_runtime::service::spawn`); returns its task.
    pub async fn spawn(
        self,
        store: StoreRef,
        flags: &[String],
        grpc: TcpListener,
        admin: Option<TcpListener>,
        metrics: Handle,
        shutdown: &Shutdown,
    ) -> anyhow::Result<JoinHandle<anyhow::Result<()>>> {
        (self.spawn)(store, flags, grpc, admin, metrics, shutdown).await
    }
}

impl std::fmt::Debug for Service {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name)
    }
}

impl PartialEq for Service {
    fn eq(&self, other: &Self) -> bool {
        self.name == other.name
    }
}

impl Eq for Service {}

impl PartialOrd for Service {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Service {
    /// Registry order.
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        let index = |s: &Service| Service::ALL.iter().position(|x| x == s);
        index(self).cmp(&index(other))
    }
}

impl std::hash::Hash for Service {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.name.hash(state);
    }
}

/// A simulated member cluster to run and register.
#[derive(Clone, Debug)]
pub struct MemberSpec {
    /// Cluster name.
    pub name: String,
    /// Where its member-sim listens (port 0: any).
    pub listen: SocketAddr,
    /// `spec.region` of its Cluster.
    pub region: String,
    /// `spec.provider` of its Cluster.
    pub provider: String,
    /// `spec.zones` of its Cluster.
    pub zones: Vec<String>,
    /// `metadata.labels` of its Cluster.
    pub labels: BTreeMap<String, String>,
    /// Pods it can run at once (member-sim `--capacity`).
    pub capacity: u32,
    /// Start-up delay of its pods (member-sim `--pod-startup-delay`).
    pub pod_startup_delay: Duration,
}

/// Where one service listens.
#[derive(Clone, Copy, Debug)]
pub struct ServiceListen {
    /// gRPC address (port 0: any).
    pub grpc: SocketAddr,
    /// Admin HTTP address (`/metrics`, `/livez`, `/readyz`); `None`: no admin server.
    pub admin: Option<SocketAddr>,
}

/// What [`Suite::start`] runs.
#[derive(Clone, Debug)]
pub struct SuiteConfig {
    /// Where each service listens.
    pub listen: BTreeMap<Service, ServiceListen>,
    /// Flags passed to each service's own `Args` parser (besides `--store mem`).
    pub flags: BTreeMap<Service, Vec<String>>,
    /// The member clusters.
    pub members: Vec<MemberSpec>,
    /// Where the services run: in this process (the default), or each in its own.
    pub hosting: Hosting,
    /// Replicas of each controller service (0 or 1: one). With more, the scheduler and the
    /// work executor split [`REPLICA_SHARDS`] shards between theirs (`--shards`), and the
    /// other controllers' extra replicas stand by in their leader election. The api runs
    /// once.
    pub replicas: usize,
}

/// The shard count the suite gives the sharded services when it runs several replicas.
pub const REPLICA_SHARDS: u32 = 16;

/// The services that split their keys into shards when replicated (`--shards`).
pub fn shards_when_replicated(service: Service) -> bool {
    service == Service::SCHEDULER || service == Service::WORK_EXECUTOR
}

/// Where [`Suite::start`] runs the services.
#[derive(Clone, Debug, Default)]
pub enum Hosting {
    /// Every service in this process, on the store handed to [`Suite::start`] (`flotilla
    /// up`, the default bench).
    #[default]
    InProcess,
    /// Every service as its own process, the binary `flotilla-<name>` from `bin_dir`, as in
    /// production: they share nothing but the store, which `store_flags` name (an etcd's
    /// endpoints and prefix; the store handed to [`Suite::start`] must be that same one).
    Processes {
        /// The directory holding the service binaries.
        bin_dir: std::path::PathBuf,
        /// The store flags of every service (`--store=etcd`, `--etcd-endpoints=…`, …).
        store_flags: Vec<String>,
        /// Their log filter (`FLOTILLA_LOG`).
        log: String,
    },
}

impl Hosting {
    /// The binary of `service` in `bin_dir`, if it is there.
    pub fn binary(bin_dir: &std::path::Path, service: Service) -> Option<std::path::PathBuf> {
        let path = bin_dir.join(format!("flotilla-{}", service.name()));
        path.is_file().then_some(path)
    }
}

/// A running service's addresses.
#[derive(Clone, Debug)]
pub struct RunningService {
    /// Which service.
    pub service: Service,
    /// Its gRPC address.
    pub grpc: SocketAddr,
    /// Its admin address, if any.
    pub admin: Option<SocketAddr>,
    /// Its process id, when it runs as a process of its own ([`Hosting::Processes`]).
    pub pid: Option<u32>,
    /// Which replica of the service it is, from 1 ([`SuiteConfig::replicas`]).
    pub replica: usize,
}

impl RunningService {
    /// Its name in reports: the service's, with `-<replica>` from the second replica on.
    pub fn name(&self) -> String {
        if self.replica > 1 {
            format!("{}-{}", self.service.name(), self.replica)
        } else {
            self.service.name().to_owned()
        }
    }
}

/// A running member-sim.
#[derive(Clone, Debug)]
pub struct RunningMember {
    /// What it was started from.
    pub spec: MemberSpec,
    /// The address it serves (its Kubernetes API, `/readyz`, the gRPC MemberSim control).
    pub addr: SocketAddr,
    /// The simulator, to inspect it or set faults in-process (`flotilla bench`).
    #[allow(dead_code)]
    pub sim: Arc<Sim>,
}

impl RunningMember {
    /// `spec.apiEndpoint` of its Cluster.
    pub fn endpoint(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Its Cluster object, as registered through the api (a Push cluster).
    pub fn cluster(&self) -> v1::Cluster {
        self.spec.cluster(self.addr)
    }
}

impl MemberSpec {
    /// The Push Cluster of this member when it serves at `addr` (its `spec.apiEndpoint`).
    pub fn cluster(&self, addr: SocketAddr) -> v1::Cluster {
        v1::Cluster {
            metadata: Some(v1::ObjectMeta {
                name: self.name.clone(),
                labels: self.labels.clone().into_iter().collect(),
                ..Default::default()
            }),
            spec: Some(v1::ClusterSpec {
                sync_mode: v1::SyncMode::Push as i32,
                api_endpoint: format!("http://{addr}"),
                provider: self.provider.clone(),
                region: self.region.clone(),
                zones: self.zones.clone(),
                ..Default::default()
            }),
            status: None,
        }
    }
}

/// The running suite.
#[derive(Debug)]
pub struct Suite {
    /// The services, in [`Service::ALL`] order.
    pub services: Vec<RunningService>,
    /// The member clusters, in the order given.
    pub members: Vec<RunningMember>,
    /// Fires to stop everything (also fired by the supervisor when a task fails).
    pub shutdown: Shutdown,
    failure: watch::Receiver<Option<String>>,
    supervisor: JoinHandle<Vec<String>>,
}

type Task = (String, anyhow::Result<()>);

/// Binds `addr` for `what`, with a hint when the port is taken.
async fn bind(addr: SocketAddr, what: &str) -> anyhow::Result<TcpListener> {
    TcpListener::bind(addr).await.map_err(|e| {
        let hint = if e.kind() == std::io::ErrorKind::AddrInUse {
            " (address in use: is another `flotilla up` running? --base-port moves every port)"
        } else {
            ""
        };
        anyhow!("cannot listen on {addr} for {what}: {e}{hint}")
    })
}

/// Parses a service's own flags: `flotilla-<name> --store mem <flags>`. The store flag only
/// satisfies the parser; the suite hands every service the shared store.
pub fn parse_service_args<A: Parser>(service: Service, flags: &[String]) -> anyhow::Result<A> {
    flotilla_runtime::service::parse_flags(service.name(), flags)
}

// === impl Suite ===

impl Suite {
    /// Binds every address first (so that a taken port fails before anything starts), then
    /// starts the services and the member-sims on `store`. Everything stops when
    /// `shutdown` fires, or when any part stops on its own.
    pub async fn start(
        config: SuiteConfig,
        store: StoreRef,
        shutdown: Shutdown,
    ) -> anyhow::Result<Suite> {
        let mut listeners = Vec::new();
        for service in Service::ALL {
            let listen = config
                .listen
                .get(&service)
                .copied()
                .unwrap_or(ServiceListen {
                    grpc: SocketAddr::from(([127, 0, 0, 1], 0)),
                    admin: None,
                });
            let grpc = bind(listen.grpc, service.name()).await?;
            let admin = match listen.admin {
                Some(a) => Some(bind(a, &format!("the admin server of {}", service.name())).await?),
                None => None,
            };
            listeners.push((service, grpc, admin));
        }
        let mut member_listeners = Vec::new();
        for m in &config.members {
            member_listeners.push(bind(m.listen, &format!("member {}", m.name)).await?);
        }

        // One Prometheus recorder for the process; every admin port serves it.
        let metrics: Handle = install_metrics().ok();
        let mut set: JoinSet<Task> = JoinSet::new();
        let mut services = Vec::new();
        // The api tells the CLI where the other services are (`--peer`, `GetPeers`).
        let peers: Vec<String> = listeners
            .iter()
            .filter(|(service, _, _)| *service != Service::API)
            .filter_map(|(service, grpc, _)| {
                let addr = grpc.local_addr().ok()?;
                Some(format!("--peer={}={addr}", service.name()))
            })
            .collect();
        let replicas = config.replicas.max(1);
        let mut instances = Vec::new();
        for (service, grpc, admin) in listeners {
            let mut flags = config.flags.get(&service).cloned().unwrap_or_default();
            if service == Service::API {
                flags.extend(peers.iter().cloned());
                instances.push((service, 1, grpc, admin, flags));
                continue;
            }
            if replicas > 1
                && shards_when_replicated(service)
                && !flags.iter().any(|f| f.starts_with("--shards"))
            {
                flags.push(format!("--shards={REPLICA_SHARDS}"));
            }
            let with_identity = |r: usize| {
                let mut flags = flags.clone();
                if replicas > 1 && !flags.iter().any(|f| f.starts_with("--identity")) {
                    flags.push(format!("--identity={}-{r}", service.name()));
                }
                flags
            };
            instances.push((service, 1, grpc, admin, with_identity(1)));
            for r in 2..=replicas {
                let what = format!("replica {r} of {}", service.name());
                let grpc = bind(SocketAddr::from(([127, 0, 0, 1], 0)), &what).await?;
                instances.push((service, r, grpc, None, with_identity(r)));
            }
        }
        for (service, replica, grpc, admin, flags) in instances {
            let mut addrs = RunningService {
                service,
                grpc: grpc.local_addr()?,
                admin: admin.as_ref().and_then(|a| a.local_addr().ok()),
                pid: None,
                replica,
            };
            if let Hosting::Processes {
                bin_dir,
                store_flags,
                log,
            } = &config.hosting
            {
                // the child binds the addresses itself: hand them over
                drop(grpc);
                let admin = match admin {
                    Some(a) => a.local_addr()?,
                    None => bind(SocketAddr::from(([127, 0, 0, 1], 0)), "an admin port")
                        .await?
                        .local_addr()?,
                };
                addrs.admin = Some(admin);
                let child = match spawn_process(bin_dir, service, store_flags, log, &addrs, &flags)
                {
                    Ok(c) => c,
                    Err(e) => {
                        shutdown.trigger();
                        return Err(e);
                    }
                };
                addrs.pid = child.id();
                let (name, sd) = (service.name().to_owned(), shutdown.clone());
                set.spawn(async move {
                    let result = supervise_process(child, &sd).await;
                    (name, result)
                });
                services.push(addrs);
                continue;
            }
            let task = service
                .spawn(
                    store.clone(),
                    &flags,
                    grpc,
                    admin,
                    metrics.clone(),
                    &shutdown,
                )
                .await;
            let task = match task {
                Ok(t) => t,
                Err(e) => {
                    shutdown.trigger();
                    return Err(e);
                }
            };
            let name = service.name().to_owned();
            set.spawn(async move {
                let result = match task.await {
                    Ok(r) => r,
                    Err(e) => Err(anyhow!("task failed: {e}")),
                };
                (name, result)
            });
            services.push(addrs);
        }

        let mut members = Vec::new();
        for (spec, listen) in config.members.into_iter().zip(member_listeners) {
            let addr = listen.local_addr()?;
            let sim = Arc::new(Sim::new(SimConfig {
                name: spec.name.clone(),
                capacity: spec.capacity,
                pod_startup_delay: spec.pod_startup_delay,
                fault: Fault::Healthy,
                node_cpu_millis: None,
                node_memory_bytes: None,
            }));
            let listeners = Listeners {
                listen,
                control: None,
            };
            let name = format!("member {}", spec.name);
            let (s, sd) = (sim.clone(), shutdown.clone());
            set.spawn(async move {
                let result = flotilla_member_sim::run_with(s, listeners, sd)
                    .await
                    .map_err(anyhow::Error::from);
                (name, result)
            });
            members.push(RunningMember { spec, addr, sim });
        }

        let (failure_tx, failure) = watch::channel(None);
        let supervisor = tokio::spawn(supervise(set, shutdown.clone(), failure_tx));
        Ok(Suite {
            services,
            members,
            shutdown,
            failure,
            supervisor,
        })
    }

    /// The address of `service`.
    pub fn addr(&self, service: Service) -> Option<SocketAddr> {
        self.services
            .iter()
            .find(|s| s.service == service)
            .map(|s| s.grpc)
    }

    /// The api's URL.
    pub fn api_url(&self) -> String {
        format!(
            "http://{}",
            self.addr(Service::API)
                .unwrap_or_else(|| SocketAddr::from(([127, 0, 0, 1], 0)))
        )
    }

    /// A client of the api.
    pub async fn api(&self) -> anyhow::Result<ApiClient<Channel>> {
        let channel = channel(&self.api_url()).await?;
        Ok(ApiClient::new(channel)
            .max_decoding_message_size(64 * 1024 * 1024)
            .max_encoding_message_size(16 * 1024 * 1024))
    }

    /// Waits until every service answers gRPC health with SERVING (its caches synced).
    pub async fn wait_serving(&self, timeout: Duration) -> anyhow::Result<()> {
        let deadline = tokio::time::Instant::now() + timeout;
        for s in &self.services {
            let url = format!("http://{}", s.grpc);
            loop {
                if let Some(reason) = self.failure() {
                    anyhow::bail!("the suite stopped: {reason}");
                }
                if serving(&url).await {
                    break;
                }
                if tokio::time::Instant::now() >= deadline {
                    anyhow::bail!(
                        "{} at {} did not report SERVING within {}",
                        s.service.name(),
                        s.grpc,
                        humantime::format_duration(timeout)
                    );
                }
                tokio::time::sleep(Duration::from_millis(25)).await;
            }
        }
        Ok(())
    }

    /// Registers every member as a Push Cluster through the api (an existing Cluster of the
    /// same name, e.g. from an earlier run on etcd, is updated to this endpoint).
    /// `concurrency` registrations run at once.
    pub async fn register_members(&self, concurrency: usize) -> anyhow::Result<()> {
        let clusters = self.members.iter().map(RunningMember::cluster).collect();
        self.register_clusters(clusters, concurrency).await
    }

    /// Registers `clusters` through the api, as [`Suite::register_members`] does (for members
    /// that run elsewhere, e.g. the benchmark's members process).
    pub async fn register_clusters(
        &self,
        clusters: Vec<v1::Cluster>,
        concurrency: usize,
    ) -> anyhow::Result<()> {
        use futures::StreamExt as _;
        let api = self.api().await?;
        let results: Vec<anyhow::Result<()>> =
            futures::stream::iter(clusters.into_iter().map(|c| {
                let api = api.clone();
                register(api, c)
            }))
            .buffer_unordered(concurrency.max(1))
            .collect()
            .await;
        results.into_iter().collect()
    }

    /// Why the suite stopped by itself, if it did.
    pub fn failure(&self) -> Option<String> {
        self.failure.borrow().clone()
    }

    /// Resolves when a part of the suite stopped by itself; returns why.
    pub async fn failed(&self) -> String {
        let mut rx = self.failure.clone();
        match rx.wait_for(Option::is_some).await {
            Ok(v) => v.clone().unwrap_or_default(),
            Err(_) => std::future::pending().await,
        }
    }

    /// Stops everything and waits up to `timeout` for every task; returns the problems seen
    /// while stopping (a service that failed to stop cleanly), if any.
    pub async fn stop(self, timeout: Duration) -> Vec<String> {
        self.shutdown.trigger();
        match tokio::time::timeout(timeout, self.supervisor).await {
            Ok(Ok(problems)) => problems,
            Ok(Err(e)) => vec![format!("supervisor failed: {e}")],
            Err(_) => vec![format!(
                "some services did not stop within {}",
                humantime::format_duration(timeout)
            )],
        }
    }
}

/// Creates `cluster` through the api; if it exists, updates its spec and labels.
async fn register(mut api: ApiClient<Channel>, cluster: v1::Cluster) -> anyhow::Result<()> {
    let name = cluster
        .metadata
        .as_ref()
        .map(|m| m.name.clone())
        .unwrap_or_default();
    match api
        .create_cluster(v1::CreateClusterRequest {
            cluster: Some(cluster.clone()),
        })
        .await
    {
        Ok(_) => Ok(()),
        Err(status) if status.code() == tonic::Code::AlreadyExists => {
            let mut current = api
                .get_cluster(v1::GetClusterRequest { name: name.clone() })
                .await
                .with_context(|| format!("reading the existing Cluster {name}"))?
                .into_inner();
            let mut spec = cluster.spec.unwrap_or_default();
            // Keep the taints as stored (the controller's are kept by the api anyway).
            spec.taints = current.spec.take().map(|s| s.taints).unwrap_or_default();
            if let (Some(meta), Some(new)) = (current.metadata.as_mut(), cluster.metadata) {
                meta.labels = new.labels;
            }
            current.spec = Some(spec);
            current.status = None;
            api.update_cluster(v1::UpdateClusterRequest {
                cluster: Some(current),
            })
            .await
            .with_context(|| format!("updating the existing Cluster {name}"))?;
            Ok(())
        }
        Err(status) => Err(anyhow!(
            "registering Cluster {name}: {}: {}",
            status.code(),
            status.message()
        )),
    }
}

/// Starts `service` as the process `bin_dir/flotilla-<name>` on the store `store_flags` name,
/// listening where `addrs` says.
fn spawn_process(
    bin_dir: &std::path::Path,
    service: Service,
    store_flags: &[String],
    log: &str,
    addrs: &RunningService,
    flags: &[String],
) -> anyhow::Result<tokio::process::Child> {
    let binary = Hosting::binary(bin_dir, service).ok_or_else(|| {
        anyhow!(
            "no flotilla-{} in {}: build the service binaries beside this one \
             (`cargo build --release --workspace --bins`)",
            service.name(),
            bin_dir.display()
        )
    })?;
    let admin = addrs
        .admin
        .ok_or_else(|| anyhow!("{} has no admin address", service.name()))?;
    tokio::process::Command::new(&binary)
        .args(store_flags)
        .arg(format!("--grpc-addr={}", addrs.grpc))
        .arg(format!("--admin-addr={admin}"))
        .args(flags)
        .env("FLOTILLA_LOG", log)
        // the child's stdin is a pipe this process holds open for as long as it lives: a
        // bench killed outright (SIGKILL) closes it, and the service stops with it
        .env(flotilla_runtime::EXIT_WITH_PARENT_ENV, "1")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::inherit())
        .kill_on_drop(true)
        .spawn()
        .with_context(|| format!("starting {}", binary.display()))
}

/// Waits for a service's process: its exit is a failure unless the suite is shutting down,
/// in which case it is stopped (killed: its leases expire, as after a crash).
async fn supervise_process(
    mut child: tokio::process::Child,
    shutdown: &Shutdown,
) -> anyhow::Result<()> {
    // held, not closed, while the child runs (`Child::wait` would close it first): the child
    // stops when it closes, that is when this process is gone
    let _stdin = child.stdin.take();
    tokio::select! {
        status = child.wait() => match status {
            Ok(s) => Err(anyhow!("exited: {s}")),
            Err(e) => Err(anyhow!("cannot wait for it: {e}")),
        },
        () = shutdown.triggered() => {
            child.kill().await.map_err(|e| anyhow!("cannot stop it: {e}"))
        }
    }
}

/// Watches the tasks: the first to stop before the shutdown stops everything and is
/// reported; returns the problems seen while stopping.
async fn supervise(
    mut set: JoinSet<Task>,
    shutdown: Shutdown,
    failure: watch::Sender<Option<String>>,
) -> Vec<String> {
    let mut problems = Vec::new();
    while let Some(joined) = set.join_next().await {
        let (name, result) = match joined {
            Ok(task) => task,
            Err(e) => ("a task".to_owned(), Err(anyhow!("panicked: {e}"))),
        };
        if !shutdown.is_triggered() {
            let why = match &result {
                Ok(()) => format!("{name} stopped unexpectedly"),
                Err(e) => format!("{name} failed: {e:#}"),
            };
            tracing::error!(reason = %why, "stopping the suite");
            failure.send_replace(Some(why));
            shutdown.trigger();
        } else if let Err(e) = result {
            problems.push(format!("{name}: {e:#}"));
        }
    }
    problems
}

/// A lazily connecting channel to `url` with short connect timeouts.
pub async fn channel(url: &str) -> anyhow::Result<Channel> {
    let endpoint = Endpoint::from_shared(url.to_owned())
        .with_context(|| format!("bad address {url}"))?
        .connect_timeout(Duration::from_secs(5))
        .tcp_nodelay(true);
    endpoint
        .connect()
        .await
        .with_context(|| format!("connecting to {url}"))
}

/// Whether `url` answers `grpc.health.v1.Health/Check` ("") with SERVING.
pub async fn serving(url: &str) -> bool {
    use tonic_health::pb::health_client::HealthClient;
    use tonic_health::pb::{HealthCheckRequest, health_check_response::ServingStatus};
    let Ok(endpoint) = Endpoint::from_shared(url.to_owned()) else {
        return false;
    };
    let Ok(channel) = endpoint
        .connect_timeout(Duration::from_secs(1))
        .timeout(Duration::from_secs(2))
        .connect()
        .await
    else {
        return false;
    };
    HealthClient::new(channel)
        .check(HealthCheckRequest {
            service: String::new(),
        })
        .await
        .is_ok_and(|r| r.into_inner().status == ServingStatus::Serving as i32)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;
    use flotilla_runtime::watcher::shared_watches;

    /// The consumers of each store watch of `prefix`, sorted.
    fn consumers(watches: &[(String, usize)], prefix: &str) -> Vec<usize> {
        let mut n: Vec<usize> = watches
            .iter()
            .filter(|(p, _)| p == prefix)
            .map(|(_, n)| *n)
            .collect();
        n.sort_unstable();
        n
    }

    /// `flotilla up` and the benchmark host every service in one process: the services that
    /// watch a prefix with the same decoder share one store watch of it. The bindings are
    /// two watches: the full decode (api, scheduler, taint manager, graceful eviction, work
    /// executor) and cluster-health's slim one. A service whose watch settings drift from
    /// the others' would open a watch of its own, and this would fail.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn in_one_process_the_services_share_one_watch_per_prefix() {
        let store: StoreRef = Arc::new(flotilla_store::MemStore::new());
        let shutdown = Shutdown::new();
        let config = SuiteConfig {
            listen: BTreeMap::new(),
            flags: BTreeMap::new(),
            members: vec![],
            hosting: Hosting::InProcess,
            replicas: 1,
        };
        let suite = Suite::start(config, store.clone(), shutdown.clone())
            .await
            .unwrap();
        suite.wait_serving(Duration::from_secs(60)).await.unwrap();
        // A subscription starts at its consumer's first poll.
        let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
        let watches = loop {
            let watches = shared_watches(&store);
            if consumers(&watches, "bindings/") == [1, 5] {
                break watches;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "the bindings are not two shared watches: {watches:?}"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        };
        // the api's detector and the work executor
        assert_eq!(consumers(&watches, "workloads/"), [2], "{watches:?}");
        // cluster-health and the work executor
        assert_eq!(consumers(&watches, "secrets/"), [2], "{watches:?}");
        shutdown.trigger();
    }
}
