//! `flotilla up`: the whole suite in one process — api, cluster-health, taint-manager,
//! scheduler, graceful-eviction and work-executor, each on its own loopback port talking
//! gRPC, on one shared store (in-memory by default), plus simulated member clusters
//! registered as Push Clusters. `--demo` then plays the seed scenario and narrates it.
//!
//! ```text
//!   ports (--base-port B, default 7400):
//!     B+0 api   B+1 cluster-health   B+2 taint-manager   B+3 scheduler
//!     B+4 graceful-eviction   B+5 work-executor   B+6 the Kubernetes API (kubectl; plain
//!     HTTP on loopback, docs/kubernetes-api.md)
//!     B+11 … B+19 member1 … member9, then B+30, B+31, … for member10 onwards
//!     B+20 … B+25 admin (/metrics, /livez, /readyz) of the six services, in the same order
//! ```

pub mod demo;

use std::collections::BTreeMap;
use std::net::{Ipv4Addr, SocketAddr};
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::{Context as _, anyhow};
use flotilla_runtime::Shutdown;

use flotilla_suite::logging;
use flotilla_suite::store::StoreArgs;
use flotilla_suite::timers::{Effective, TimerFlags, merge_service_flags};
use flotilla_suite::{MemberSpec, Service, ServiceListen, Suite, SuiteConfig};

const AFTER_HELP: &str = "\
How it works: every service runs in this one process — api, cluster-health, \
taint-manager, scheduler, graceful-eviction and work-executor, each on its own loopback \
port speaking gRPC — on one shared store (in-memory by default, or etcd), with simulated \
member clusters (member-sims) registered as Push Clusters. It prints where everything \
listens and runs until Ctrl-C (or SIGTERM), then stops everything gracefully. Timers are \
compressed to seconds unless --production-timers is given (then every service keeps its \
own default, which is Karmada's); each timer flag names both. With --demo it plays the \
seed scenario through the api and narrates each step as it happens: a Deployment nginx (3 \
replicas) and a PropagationPolicy with static weights member1:1, member2:2; member1 becomes \
unreachable; taints, eviction, rescheduling to member2:3, graceful eviction; member1 heals, \
its old Work is deleted, nothing moves back.

Ports (--base-port B, default 7400): api B, cluster-health B+1, taint-manager B+2, \
scheduler B+3, graceful-eviction B+4, work-executor B+5; admin (/metrics, /readyz) B+20..B+25 \
in the same order; members B+11..B+19, then B+30 onwards.

Examples:
  flotilla up                                  # then, in another terminal: flotilla get clusters
  flotilla up --demo                           # the seed failover scenario, narrated
  flotilla up --demo --failure-threshold 5s    # slower detection
  flotilla up --store etcd --etcd-endpoints http://127.0.0.1:2379
  flotilla up --service-flag scheduler:--workers=8 --log info --log-file /tmp/flotilla.log";

/// Flags of `flotilla up` (boxed: the command enum stays small).
#[derive(Debug, clap::Args)]
#[command(after_long_help = AFTER_HELP)]
pub struct UpArgs {
    #[command(flatten)]
    flags: Box<UpFlags>,
}

/// The flags of `flotilla up`.
#[derive(Debug, clap::Args)]
struct UpFlags {
    #[command(flatten)]
    store: StoreArgs,

    /// First port: the api listens on it (the client's default --server), the other
    /// services, members and admin servers at fixed offsets from it (see below).
    #[arg(long, default_value_t = 7400, value_name = "PORT")]
    base_port: u16,

    /// Member clusters to simulate, comma-separated names. Each is a member-sim served in this
    /// process and registered as a Push Cluster (regions eu-west-1, us-east-1, ap-southeast-1
    /// in turn; provider `sim`; labels env=demo, flotilla.io/simulated=true). --demo needs
    /// member1 and member2.
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "member1,member2,member3",
        value_name = "NAME,..."
    )]
    members: Vec<String>,

    /// Pods each member can run at once (member-sim --capacity). Its one simulated node has
    /// as many CPUs and GiB of memory, which the scheduler divides by what each replica
    /// requests.
    #[arg(long, default_value_t = 100, value_name = "PODS")]
    member_capacity: u32,

    /// Replicas of each controller service, all in this process. With more than one, the
    /// scheduler and the work executor split 16 shards between their replicas (`--shards
    /// 16`; `flotilla get shards` shows who holds what) and the other controllers' extra
    /// replicas stand by in their leader election. The extra replicas listen on free ports
    /// and serve no admin port. The api runs once.
    #[arg(long, default_value_t = 1, value_name = "N", value_parser = clap::value_parser!(u16).range(1..=16))]
    replicas: u16,

    /// Use every service's own timer defaults (Karmada's: 10s probes, 30s thresholds, 5m
    /// NoExecute delay, 300s tolerations, 10m graceful eviction) instead of the demo's.
    /// Timer flags given explicitly still apply.
    #[arg(long)]
    production_timers: bool,

    /// How often members are probed (cluster-health --cluster-status-update-frequency).
    /// Demo 500ms; production 10s.
    #[arg(long, value_parser = humantime::parse_duration, value_name = "DURATION")]
    status_update_frequency: Option<Duration>,

    /// How long a member must look unhealthy before Ready turns False
    /// (cluster-health --cluster-failure-threshold). Demo 2s; production 30s.
    #[arg(long, value_parser = humantime::parse_duration, value_name = "DURATION")]
    failure_threshold: Option<Duration>,

    /// How long a member must look healthy before Ready turns True again
    /// (cluster-health --cluster-success-threshold). Demo 2s; production 30s.
    #[arg(long, value_parser = humantime::parse_duration, value_name = "DURATION")]
    success_threshold: Option<Duration>,

    /// How long Ready may be False before the NoExecute taint (cluster-health
    /// --failover-eviction-timeout). Demo 3s; production 5m.
    #[arg(long, value_parser = humantime::parse_duration, value_name = "DURATION")]
    failover_eviction_timeout: Option<Duration>,

    /// How long one probe may take before the member counts as unreachable (cluster-health
    /// --probe-timeout). Demo 1s; production 5s.
    #[arg(long, value_parser = humantime::parse_duration, value_name = "DURATION")]
    probe_timeout: Option<Duration>,

    /// tolerationSeconds of the default not-ready/unreachable NoExecute tolerations every
    /// policy gets (api --default-{not-ready,unreachable}-toleration-seconds). Demo 2;
    /// production 300.
    #[arg(long, value_name = "SECONDS")]
    default_toleration_seconds: Option<i64>,

    /// How long an eviction task keeps the old copy while the replacement is not healthy
    /// (graceful-eviction --graceful-eviction-timeout). Demo 1m; production 10m.
    #[arg(long, value_parser = humantime::parse_duration, value_name = "DURATION")]
    graceful_eviction_timeout: Option<Duration>,

    /// How long a simulated pod takes to become Ready (member-sim --pod-startup-delay).
    /// Demo 1s; production 2s (member-sim's default).
    #[arg(long, value_parser = humantime::parse_duration, value_name = "DURATION")]
    pod_startup_delay: Option<Duration>,

    /// How often member status is collected (work-executor --status-sync-period). Demo
    /// 500ms; production 10s.
    #[arg(long, value_parser = humantime::parse_duration, value_name = "DURATION")]
    status_sync_period: Option<Duration>,

    /// Deadline of one work-executor call to a member (work-executor --member-timeout). A
    /// status pass waits for its slowest member, so an unreachable member holds the others'
    /// status back this long. Demo 1s; production 5s.
    #[arg(long, value_parser = humantime::parse_duration, value_name = "DURATION")]
    member_timeout: Option<Duration>,

    /// Any other flag of a service, as SERVICE:--flag=value (repeatable), e.g.
    /// `scheduler:--workers=8`; it replaces the same flag set by a timer above. `flotilla-<service>
    /// --help` lists them.
    #[arg(long, value_name = "SERVICE:--FLAG=VALUE")]
    service_flag: Vec<String>,

    /// Play the seed failover scenario through the api and narrate it; exit 0 at the end.
    #[arg(long)]
    demo: bool,

    /// With --demo: keep running after the demo (until Ctrl-C).
    #[arg(long, requires = "demo")]
    keep: bool,

    /// Log filter of the services (tracing EnvFilter syntax, e.g. `info` or
    /// `warn,flotilla_scheduler=debug`).
    #[arg(
        long,
        env = "FLOTILLA_LOG",
        default_value = "warn",
        value_name = "FILTER"
    )]
    log: String,

    /// Write the services' logs to this file instead of stderr. With --demo the default is
    /// flotilla-up-<base-port>.log in the temp directory, so the narration stays readable.
    #[arg(long, value_name = "PATH")]
    log_file: Option<PathBuf>,

    /// Serve the Kubernetes API (base port + 6) over TLS with this certificate (PEM; with
    /// --kube-tls-key). kubectl sends a bearer token only over TLS. Default: plain HTTP on
    /// loopback (docs/kubernetes-api.md).
    #[arg(long, value_name = "PEM", requires = "kube_tls_key")]
    kube_tls_cert: Option<PathBuf>,

    /// The private key of --kube-tls-cert (PEM).
    #[arg(long, value_name = "PEM", requires = "kube_tls_cert")]
    kube_tls_key: Option<PathBuf>,

    /// Write a kubeconfig for the Kubernetes API to this file (owner-only), so that
    /// `kubectl --kubeconfig PATH get pp -A` works; with --kube-tls-cert, pass the CA that
    /// signed it as --kube-tls-ca to embed it.
    #[arg(long, value_name = "PATH")]
    write_kubeconfig: Option<PathBuf>,

    /// With --write-kubeconfig and --kube-tls-cert: the CA certificate (PEM) to embed.
    #[arg(long, value_name = "PEM", requires = "kube_tls_cert")]
    kube_tls_ca: Option<PathBuf>,
}

/// Where everything of `flotilla up` listens.
#[derive(Clone, Debug)]
pub struct Ports {
    base: u16,
}

impl Ports {
    /// The layout for `--base-port base`; fails if the highest port would overflow.
    pub fn new(base: u16, members: usize) -> anyhow::Result<Self> {
        let ports = Ports { base };
        let highest = ports.member_offset(members.max(1)).max(25);
        if u32::from(base) + highest > u32::from(u16::MAX) {
            anyhow::bail!(
                "--base-port {base} is too high for {members} members (the last port would be {})",
                u32::from(base) + highest
            );
        }
        if base == 0 {
            anyhow::bail!("--base-port must not be 0 (the client needs a known api port)");
        }
        Ok(ports)
    }

    fn member_offset(&self, n: usize) -> u32 {
        let n = u32::try_from(n).unwrap_or(u32::MAX / 2);
        if n <= 9 { 10 + n } else { 30 + (n - 10) }
    }

    fn at(&self, offset: u32) -> SocketAddr {
        let port = u16::try_from(u32::from(self.base) + offset).unwrap_or(0);
        SocketAddr::from((Ipv4Addr::LOCALHOST, port))
    }

    /// A service's gRPC and admin addresses.
    pub fn service(&self, service: Service) -> ServiceListen {
        let i = Service::ALL
            .iter()
            .position(|s| *s == service)
            .and_then(|i| u32::try_from(i).ok())
            .unwrap_or(0);
        ServiceListen {
            grpc: self.at(i),
            admin: Some(self.at(20 + i)),
        }
    }

    /// The address of member `n` (1-based).
    pub fn member(&self, n: usize) -> SocketAddr {
        self.at(self.member_offset(n))
    }
}

// The allocator of the whole `flotilla` binary (`flotilla up` and `flotilla bench` run every
// service in this one process): mimalloc, as in every service binary.
flotilla_runtime::global_allocator!();

/// Regions given to the members in turn.
const REGIONS: [&str; 3] = ["eu-west-1", "us-east-1", "ap-southeast-1"];

/// The members of `flotilla up`.
fn members(
    args: &UpFlags,
    ports: &Ports,
    pod_startup_delay: Duration,
) -> anyhow::Result<Vec<MemberSpec>> {
    let mut seen = std::collections::BTreeSet::new();
    let mut out = Vec::new();
    for (i, name) in args.members.iter().enumerate() {
        let name = name.trim();
        if name.is_empty() {
            anyhow::bail!("--members: empty member name");
        }
        if !seen.insert(name.to_owned()) {
            anyhow::bail!("--members: {name} is listed twice");
        }
        let region = REGIONS[i % REGIONS.len()];
        out.push(MemberSpec {
            name: name.to_owned(),
            listen: ports.member(i + 1),
            region: region.to_owned(),
            provider: "sim".to_owned(),
            zones: vec![format!("{region}a")],
            labels: BTreeMap::from([
                ("env".to_owned(), "demo".to_owned()),
                ("flotilla.io/simulated".to_owned(), "true".to_owned()),
            ]),
            capacity: args.member_capacity,
            pod_startup_delay,
        });
    }
    if out.is_empty() {
        anyhow::bail!("--members: at least one member is needed");
    }
    if args.demo {
        for needed in ["member1", "member2"] {
            if !seen.contains(needed) {
                anyhow::bail!(
                    "--demo needs a member named {needed} (the seed policy targets member1 and member2)"
                );
            }
        }
    }
    Ok(out)
}

impl UpFlags {
    fn timer_flags(&self) -> TimerFlags {
        TimerFlags {
            status_update_frequency: self.status_update_frequency,
            failure_threshold: self.failure_threshold,
            success_threshold: self.success_threshold,
            failover_eviction_timeout: self.failover_eviction_timeout,
            probe_timeout: self.probe_timeout,
            default_toleration_seconds: self.default_toleration_seconds,
            graceful_eviction_timeout: self.graceful_eviction_timeout,
            status_sync_period: self.status_sync_period,
            member_timeout: self.member_timeout,
            pod_startup_delay: self.pod_startup_delay,
            production: self.production_timers,
        }
    }
}

/// Runs `flotilla up`.
pub async fn run(args: UpArgs) -> anyhow::Result<ExitCode> {
    let args = *args.flags;
    let ports = Ports::new(args.base_port, args.members.len())?;
    let timers = args.timer_flags();
    let mut flags = timers.service_flags();
    merge_service_flags(&mut flags, &args.service_flag)?;
    let effective = Effective::resolve(&flags, timers.pod_startup_delay())?;
    let members = members(&args, &ports, timers.pod_startup_delay())?;
    let log_file = args.log_file.clone().or_else(|| {
        args.demo
            .then(|| std::env::temp_dir().join(format!("flotilla-up-{}.log", args.base_port)))
    });
    logging::init(&args.log, log_file.as_deref())?;

    let store = args.store.connect().await?;
    let shutdown = Shutdown::new();
    shutdown.trigger_on_signals();
    let config = SuiteConfig {
        listen: Service::ALL
            .into_iter()
            .map(|s| (s, ports.service(s)))
            .collect(),
        flags,
        members,
        hosting: flotilla_suite::Hosting::InProcess,
        replicas: usize::from(args.replicas),
    };
    let suite = Suite::start(config, store, shutdown.clone()).await?;
    let started = async {
        suite.wait_serving(Duration::from_secs(60)).await?;
        suite
            .register_members(8)
            .await
            .context("registering the member clusters")
    };
    let started = tokio::select! {
        r = started => r,
        () = shutdown.triggered() => Err(anyhow!("interrupted while starting")),
    };
    if let Err(e) = started {
        let problems = suite.stop(Duration::from_secs(10)).await;
        return Err(e.context(problems.join("; ")));
    }
    let kube = ports.at(6);
    let kube_tls = match (&args.kube_tls_cert, &args.kube_tls_key) {
        (Some(cert), Some(key)) => Some(
            flotilla_runtime::tls::ServerTls::load(flotilla_runtime::tls::ServerTlsFiles {
                cert: cert.clone(),
                key: key.clone(),
                client_ca: None,
                client_cert_optional: false,
            })
            .context("--kube-tls-cert/--kube-tls-key")?,
        ),
        _ => None,
    };
    let kube_scheme = if kube_tls.is_some() { "https" } else { "http" };
    let gateway = match start_gateway(&suite, kube, kube_tls, &shutdown).await {
        Ok(task) => task,
        Err(e) => {
            let problems = suite.stop(Duration::from_secs(10)).await;
            return Err(e.context(problems.join("; ")));
        }
    };
    let kube_url = format!("{kube_scheme}://{kube}");
    if let Some(path) = &args.write_kubeconfig
        && let Err(e) = write_kubeconfig(path, &kube_url, args.kube_tls_ca.as_deref())
    {
        let problems = suite.stop(Duration::from_secs(10)).await;
        return Err(e.context(problems.join("; ")));
    }
    print_table(&suite, &args, &effective, log_file.as_deref(), &kube_url);

    let mut code = ExitCode::SUCCESS;
    if args.demo {
        let outcome = tokio::select! {
            r = demo::run(&suite, &effective) => Some(r),
            why = suite.failed() => Some(Err(anyhow!("the suite stopped: {why}"))),
            () = shutdown.triggered() => None,
        };
        match outcome {
            Some(Ok(())) => {}
            Some(Err(e)) => {
                eprintln!("error: {e:#}");
                if let Some(f) = &log_file {
                    eprintln!("(service logs: {})", f.display());
                }
                code = ExitCode::FAILURE;
            }
            None => println!("interrupted"),
        }
        if args.keep && code == ExitCode::SUCCESS && !shutdown.is_triggered() {
            println!("\nStill running (--keep). Press Ctrl-C to stop.");
            code = wait(&suite, &shutdown).await;
        }
    } else {
        println!("Press Ctrl-C to stop.");
        code = wait(&suite, &shutdown).await;
    }
    logging::quiet();
    println!("Stopping…");
    shutdown.trigger();
    let _ = tokio::time::timeout(Duration::from_secs(5), gateway).await;
    let problems = suite.stop(Duration::from_secs(15)).await;
    for p in &problems {
        eprintln!("warning: {p}");
    }
    flotilla_runtime::telemetry::shutdown_tracing(Duration::from_secs(5));
    println!("Stopped.");
    Ok(code)
}

/// Serves the Kubernetes API gateway on `addr` over the suite's api until `shutdown`.
async fn start_gateway(
    suite: &Suite,
    addr: SocketAddr,
    tls: Option<flotilla_runtime::tls::ServerTls>,
    shutdown: &Shutdown,
) -> anyhow::Result<tokio::task::JoinHandle<()>> {
    let api = suite
        .addr(Service::API)
        .context("the suite has no api address")?;
    let channel = tonic::transport::Endpoint::from_shared(format!("http://{api}"))
        .context("the api's address")?
        .connect_lazy();
    let client = flotilla_proto::v1::api_client::ApiClient::new(channel);
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .with_context(|| format!("binding the Kubernetes API on {addr}"))?;
    let stop = shutdown.clone();
    Ok(tokio::spawn(async move {
        let stopped = async move { stop.triggered().await };
        match tls {
            Some(tls) => {
                flotilla_kube::gateway::serve_tls(listener, tls, client, stopped).await;
            }
            None => {
                if let Err(error) = flotilla_kube::gateway::serve(listener, client, stopped).await {
                    tracing::error!(%error, "the Kubernetes API gateway stopped");
                }
            }
        }
    }))
}

/// Runs until Ctrl-C/SIGTERM (success) or until a part of the suite fails.
async fn wait(suite: &Suite, shutdown: &Shutdown) -> ExitCode {
    tokio::select! {
        () = shutdown.triggered() => ExitCode::SUCCESS,
        why = suite.failed() => {
            eprintln!("error: the suite stopped: {why}");
            ExitCode::FAILURE
        }
    }
}

/// The kubeconfig of `flotilla up`'s Kubernetes API. Access is open, so it holds no token
/// (over TLS kubectl then sends none, and the open api takes that).
fn write_kubeconfig(
    path: &std::path::Path,
    server: &str,
    ca: Option<&std::path::Path>,
) -> anyhow::Result<()> {
    let ca = ca
        .map(|p| std::fs::read(p).with_context(|| format!("--kube-tls-ca {}", p.display())))
        .transpose()?;
    let text = flotilla_kube::kubeconfig::render(&flotilla_kube::kubeconfig::KubeconfigFor {
        server,
        ca_pem: ca.as_deref(),
        token: None,
        name: "flotilla-up",
    })?;
    flotilla_kube::kubeconfig::write_private(path, &text).context("--write-kubeconfig")
}

fn print_table(
    suite: &Suite,
    args: &UpFlags,
    effective: &Effective,
    log_file: Option<&std::path::Path>,
    kube: &str,
) {
    let dash = |a: Option<SocketAddr>| a.map_or_else(|| "-".to_owned(), |a| a.to_string());
    let mut out = String::new();
    out.push_str(&format!(
        "Flotilla is up: {} services and {} member cluster{} in one process; store: {}\n\n",
        suite.services.len(),
        suite.members.len(),
        if suite.members.len() == 1 { "" } else { "s" },
        args.store.describe()
    ));
    out.push_str(&format!(
        "  {:<20}{:<20}{}\n",
        "SERVICE", "GRPC", "ADMIN (/metrics /readyz)"
    ));
    for s in &suite.services {
        out.push_str(&format!(
            "  {:<20}{:<20}{}\n",
            s.service.name(),
            s.grpc.to_string(),
            dash(s.admin)
        ));
    }
    out.push('\n');
    out.push_str(&format!(
        "  {:<20}{:<28}{:<16}{}\n",
        "MEMBER", "ENDPOINT (Push)", "REGION", "CAPACITY"
    ));
    for m in &suite.members {
        out.push_str(&format!(
            "  {:<20}{:<28}{:<16}{} pods\n",
            m.spec.name,
            m.endpoint(),
            m.spec.region,
            m.spec.capacity
        ));
    }
    out.push('\n');
    out.push_str(&format!(
        "  timers: {effective}\n          ({})\n",
        if args.production_timers {
            "production: the services' own defaults, Karmada's"
        } else {
            "demo timers; --production-timers for Karmada's defaults"
        }
    ));
    out.push_str(
        "  access: open, no credentials: every caller on this machine is admin. Everything \
         listens on loopback only\n          (127.0.0.1); run the services with \
         --auth-tokens-file or mutual TLS to serve beyond it (README, Security)\n",
    );
    out.push_str(&format!(
        "  logs:   {} at {}\n",
        log_file.map_or_else(|| "stderr".to_owned(), |p| p.display().to_string()),
        args.log
    ));
    let api = suite
        .addr(Service::API)
        .map_or_else(String::new, |a| a.to_string());
    out.push_str(&format!(
        "  try:    flotilla get clusters --server {api}   ·   grpcurl -plaintext {api} list\n"
    ));
    out.push_str(&format!(
        "          kubectl --server {kube} get clusters,pp,rb   (the Kubernetes API; \
         docs/kubernetes-api.md)\n"
    ));
    if let Some(path) = &args.write_kubeconfig {
        out.push_str(&format!(
            "  kubeconfig: {}   (kubectl --kubeconfig {} get pp -A)\n",
            path.display(),
            path.display()
        ));
    }
    println!("{out}");
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    #[test]
    fn ports_follow_the_base() {
        let p = Ports::new(7400, 3).unwrap();
        assert_eq!(p.service(Service::API).grpc.port(), 7400);
        assert_eq!(p.service(Service::WORK_EXECUTOR).grpc.port(), 7405);
        assert_eq!(p.service(Service::API).admin.unwrap().port(), 7420);
        assert_eq!(
            p.service(Service::WORK_EXECUTOR).admin.unwrap().port(),
            7425
        );
        assert_eq!(p.member(1).port(), 7411);
        assert_eq!(p.member(9).port(), 7419);
        assert_eq!(p.member(10).port(), 7430);
        let p = Ports::new(9000, 3).unwrap();
        assert_eq!(p.member(2).port(), 9012);
        assert!(Ports::new(65_530, 3).is_err());
        assert!(Ports::new(0, 3).is_err());
    }
}
