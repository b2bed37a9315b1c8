//! `flotilla bench failover`: the whole suite in this process (as `flotilla up`), N simulated
//! member clusters, M workloads each Divided over the cluster that will fail and one partner;
//! then the failed cluster goes away with every failover timer at zero, and the time until
//! every affected binding has been rescheduled, its new Works applied and Ready and its
//! eviction task removed is measured per binding and stage — printed next to the store floor
//! measured in the same run (docs/design.md §7).
//!
//! ```text
//!   layout: clusters c000 … c(N-1); workload i lives in namespace bench-<partner>,
//!           partner = c(1 + i mod (N-1)) — a team per namespace, as in Karmada's docs —
//!           and that namespace's PropagationPolicy (N-1 in all) places every Deployment
//!           of it on clusterNames [c000, partner], Divided, static weights 1:1 → every
//!           binding is {c000: R/2, partner: R/2}, so failing c000 moves every one of the
//!           M bindings (all replicas to its partner). Namespaced policies keep the
//!           detector's claim to one candidate per workload (it indexes them by namespace;
//!           N-1 cluster-wide policies would each be matched against every workload).
//!   timers: failure/success thresholds 0, failover eviction timeout 0, default tolerations 0
//!           (eviction at the first failed probe); graceful eviction timeout 10m (tasks go
//!           because the replacement is healthy, not by timeout); pods Ready at once.
//! ```

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context as _, anyhow};
use flotilla_member_sim::Fault;
use flotilla_proto::v1;
use flotilla_runtime::{Shutdown, StoreKind};
use flotilla_store::bench::{self as store_bench, BenchOptions};
use flotilla_store::{EtcdStore, MemStore, StoreRef};
use futures::StreamExt as _;
use indicatif::{ProgressBar, ProgressStyle};

use super::cpu;
use super::etcd::TempEtcd;
use super::members::External;
use super::stats::{Summary, secs, thousands};
use super::track::{self, STAGES, Shared};
use flotilla_suite::logging;
use flotilla_suite::store::StoreArgs;
use flotilla_suite::timers::{flag_duration, merge_service_flags};
use flotilla_suite::{MemberSpec, Service, ServiceListen, Suite, SuiteConfig};

/// Writes a failover costs per binding (evict, schedule, update the Work, member status,
/// aggregated status, drop the task, mark the orphan): docs/design.md §7.
const WRITES_PER_BINDING: usize = 7;

/// The label naming a workload's partner cluster (informative; the namespace decides).
const PARTNER_LABEL: &str = "bench.flotilla.io/partner";

/// The namespace of the workloads whose partner is `partner`.
fn namespace(partner: &str) -> String {
    format!("bench-{partner}")
}

/// How the failed cluster fails.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum FaultArg {
    /// Nothing answers (probes time out after --probe-timeout).
    Unreachable,
    /// Probes answer 500; RPCs still work.
    Unhealthy,
}

const LONG_ABOUT: &str = "\
Measures a failover end to end on the whole suite in this process: N simulated member \
clusters, M workloads each Divided (static weights 1:1) over cluster 0 and one partner \
cluster (a namespace per partner, each with one PropagationPolicy), so that \
every binding has replicas on cluster 0. Once everything is scheduled, applied and Ready, \
cluster 0 fails with every failover timer at zero (failure threshold, eviction timeout and \
tolerations 0), and the bench reports, per stage (evicted → rescheduled → Works applied → \
Ready → task removed), percentiles of the time since the fault, the end-to-end time and \
bindings per second — next to the floor of the store measured in the same run: the time to \
write 7 × M keys in transactions of 64 guarded puts (docs/design.md §7: a failover touches each \
binding about seven times). With --store etcd and no --etcd-endpoints a temporary etcd is \
started from the `etcd` on PATH.";

/// Flags of `flotilla bench failover`.
#[derive(Debug, clap::Args)]
#[command(after_long_help = LONG_ABOUT)]
pub struct FailoverArgs {
    #[command(flatten)]
    flags: Box<FailoverFlags>,
}

#[derive(Debug, clap::Args)]
struct FailoverFlags {
    /// Member clusters (at least 2): cluster 0 fails, the others are partners.
    #[arg(long, default_value_t = 100)]
    clusters: usize,

    /// Workloads (one binding each), all with replicas on cluster 0.
    #[arg(long, default_value_t = 10_000)]
    bindings: usize,

    /// Replicas per workload (even: half on cluster 0, half on the partner).
    #[arg(long, default_value_t = 2)]
    workload_replicas: i32,

    /// Replicas of each controller service. With more than one, the scheduler and the work
    /// executor split 16 shards between theirs (`--shards 16`) and the other controllers'
    /// extra replicas stand by. Use with --processes to see each replica's CPU and memory.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u16).range(1..=16))]
    replicas: u16,

    /// Delay every request to a member by this much, as a remote cluster's round trip
    /// would (e.g. 20ms). Default none.
    #[arg(long, default_value = "0s", value_parser = humantime::parse_duration)]
    member_latency: Duration,

    #[command(flatten)]
    store: StoreArgs,

    /// How cluster 0 fails. `unhealthy` (default): probes get HTTP 500 at once, so
    /// detection is one probe period at most. `unreachable`: nothing answers, so detection
    /// also waits for --probe-timeout.
    #[arg(long, value_enum, default_value_t = FaultArg::Unhealthy)]
    fault: FaultArg,

    /// How often cluster-health probes each member (its --cluster-status-update-frequency).
    /// Each probe also collects the member's status, so short periods cost CPU with many
    /// members and workloads.
    #[arg(long, default_value = "1s", value_parser = humantime::parse_duration)]
    probe_period: Duration,

    /// How long a probe may take (cluster-health --probe-timeout; default: the service's,
    /// 5s). With the failure threshold at 0, a healthy member whose probe times out under
    /// load is failed over at once, so keep it well above the probe latency under load.
    #[arg(long, value_parser = humantime::parse_duration)]
    probe_timeout: Option<Duration>,

    /// work-executor --status-sync-period (member status collection; Works also get their
    /// status from each apply).
    #[arg(long, default_value = "2s", value_parser = humantime::parse_duration)]
    status_sync_period: Duration,

    /// Workload creations in flight through the api.
    #[arg(long, default_value_t = 64)]
    create_concurrency: usize,

    /// Longest time to load (clusters Ready, workloads created, everything settled).
    #[arg(long, default_value = "20m", value_parser = humantime::parse_duration)]
    load_timeout: Duration,

    /// Longest time for the failover to complete.
    #[arg(long, default_value = "5m", value_parser = humantime::parse_duration)]
    failover_timeout: Duration,

    /// Run each service as its own process (the binaries `flotilla-<service>` beside this
    /// one, as production runs them) instead of all six in this process, and report the CPU
    /// and memory of each. Needs `--store etcd`: separate processes share state only there.
    /// Without it, services in one process share one decoded copy of each object.
    #[arg(long)]
    processes: bool,

    /// Any other service flag, as SERVICE:--flag=value (repeatable), e.g.
    /// `scheduler:--workers=128`.
    #[arg(long, value_name = "SERVICE:--FLAG=VALUE")]
    service_flag: Vec<String>,

    /// Log filter of the services (tracing EnvFilter syntax).
    #[arg(long, env = "FLOTILLA_LOG", default_value = "warn")]
    log: String,

    /// Write the services' logs to this file instead of stderr.
    #[arg(long)]
    log_file: Option<std::path::PathBuf>,

    /// Print the results as one JSON object on stdout (the human report goes to stderr), to
    /// compare runs over time.
    #[arg(long)]
    json: bool,

    /// Write every service's Prometheus metrics (queue depths, reconcile and write
    /// latencies, batch sizes) to this file once the failover is done, for finding the
    /// bottleneck.
    #[arg(long, value_name = "PATH")]
    metrics_file: Option<std::path::PathBuf>,
}

/// The flags every bench of the suite shares: its services' logs and the report's form.
#[derive(Debug, clap::Args)]
pub(crate) struct ReportArgs {
    /// Log filter of the services (tracing EnvFilter syntax).
    #[arg(long, env = "FLOTILLA_LOG", default_value = "warn")]
    pub(crate) log: String,

    /// Print the results as one JSON object on stdout (the human report goes to stderr).
    #[arg(long)]
    pub(crate) json: bool,
}

impl ReportArgs {
    /// Installs the services' logging; returns where the report goes.
    pub(crate) fn start(&self) -> anyhow::Result<Out> {
        logging::init(&self.log, None)?;
        Ok(Out { json: self.json })
    }
}

/// The store of the run, and what is needed to measure its floor and clean up.
pub(crate) enum BenchStore {
    Mem(Arc<MemStore>),
    Etcd(Box<EtcdBench>),
}

/// An etcd run: the store, its key namespace, and the temporary etcd if we started one.
pub(crate) struct EtcdBench {
    store: EtcdStore,
    namespace: String,
    temporary: Option<TempEtcd>,
    /// The store flags a service process needs to use this same store and namespace.
    service_flags: Vec<String>,
}

impl BenchStore {
    /// The store of a new run (its own key namespace on etcd).
    pub(crate) async fn for_run(args: &StoreArgs) -> anyhow::Result<Self> {
        let run_id = format!("bench-{:08x}", rand::random::<u32>());
        Self::open(args, &run_id).await
    }

    async fn open(args: &StoreArgs, run: &str) -> anyhow::Result<Self> {
        match args.store {
            StoreKind::Mem => Ok(BenchStore::Mem(Arc::new(MemStore::new()))),
            StoreKind::Etcd => {
                let temporary = if args.etcd_endpoints.is_empty() {
                    Some(TempEtcd::start().await?)
                } else {
                    None
                };
                let endpoints: Vec<String> =
                    temporary.iter().map(|t| t.endpoint().to_owned()).collect();
                let common = args.common(&endpoints)?;
                let namespace = format!("{}/{run}/", common.etcd_prefix.trim_end_matches('/'));
                let config = common.etcd_config().with_namespace(namespace.clone());
                let store = EtcdStore::connect(config)
                    .await
                    .context("connecting to etcd")?;
                tokio::time::timeout(Duration::from_secs(10), store.status())
                    .await
                    .map_err(|_| anyhow!("etcd did not answer within 10s"))?
                    .context("etcd does not answer")?;
                let mut service_flags = vec![
                    "--store=etcd".to_owned(),
                    format!("--etcd-endpoints={}", common.etcd_endpoints.join(",")),
                    format!("--etcd-prefix={namespace}"),
                ];
                for (flag, file) in [
                    ("--etcd-ca", &common.etcd_ca),
                    ("--etcd-cert", &common.etcd_cert),
                    ("--etcd-key", &common.etcd_key),
                ] {
                    if let Some(f) = file {
                        service_flags.push(format!("{flag}={}", f.display()));
                    }
                }
                let mut etcd = EtcdBench::new(store, namespace, temporary);
                etcd.service_flags = service_flags;
                Ok(BenchStore::Etcd(Box::new(etcd)))
            }
        }
    }

    pub(crate) fn store(&self) -> StoreRef {
        match self {
            BenchStore::Mem(m) => m.clone(),
            BenchStore::Etcd(e) => Arc::new(e.store.clone()),
        }
    }

    /// The store flags that give a service process this same store (etcd only).
    pub(crate) fn service_flags(&self) -> Option<&[String]> {
        match self {
            BenchStore::Etcd(e) => Some(&e.service_flags),
            BenchStore::Mem(_) => None,
        }
    }

    /// The temporary etcd's process, if we started one.
    pub(crate) fn helper_pid(&self) -> Option<u32> {
        match self {
            BenchStore::Etcd(e) => e.temporary.as_ref().and_then(TempEtcd::pid),
            BenchStore::Mem(_) => None,
        }
    }

    pub(crate) fn describe(&self) -> String {
        match self {
            BenchStore::Mem(_) => "mem (MemStore in this process)".to_owned(),
            BenchStore::Etcd(e) => match &e.temporary {
                Some(t) => format!("etcd (temporary, {})", t.endpoint()),
                None => format!("etcd (keys under {})", e.namespace),
            },
        }
    }

    /// The floor: `keys` guarded puts in transactions of 64, on this store (etcd: the raw
    /// client, without our store layer). Returns keys per second.
    pub(crate) async fn floor(&self, keys: usize) -> anyhow::Result<(&'static str, f64)> {
        let txn_concurrency = 8;
        let txns = keys.div_ceil(64).div_ceil(txn_concurrency) * txn_concurrency;
        let opts = BenchOptions {
            prefix: "bench-floor/".into(),
            seq_puts: 0,
            concurrent_puts: 0,
            cas_ops: 0,
            guarded_txns: txns,
            txns_128: 0,
            txn_concurrency,
            watch_samples: 0,
            ..BenchOptions::default()
        };
        match self {
            BenchStore::Mem(m) => {
                let r = store_bench::run(m.clone(), &opts).await?;
                Ok(("MemStore", r.guarded_txn_keys_per_sec))
            }
            BenchStore::Etcd(e) => {
                let r = store_bench::etcd_floor(e.store.client().clone(), &opts).await?;
                Ok(("etcd (raw etcd-client)", r.guarded_txn_keys_per_sec))
            }
        }
    }

    /// Removes what the run wrote to an etcd it does not own; stops a temporary etcd.
    pub(crate) async fn finish(self) {
        if let BenchStore::Etcd(e) = self {
            e.finish().await;
        }
    }
}

impl EtcdBench {
    /// A run's etcd: `store` in its key `namespace`, on the `temporary` etcd if we started one.
    pub(crate) fn new(store: EtcdStore, namespace: String, temporary: Option<TempEtcd>) -> Self {
        Self {
            store,
            namespace,
            temporary,
            service_flags: Vec::new(),
        }
    }

    /// Removes what the run wrote (its namespace and the floor's keys) from an etcd it does
    /// not own; stops a temporary etcd.
    pub(crate) async fn finish(self) {
        match self.temporary {
            Some(t) => t.stop().await,
            None => {
                let mut kv = self.store.client().kv_client();
                for prefix in [self.namespace.as_str(), "/flotilla-bench-floor/"] {
                    let all = etcd_client::DeleteOptions::new().with_prefix();
                    let _ = kv.delete(prefix, Some(all)).await;
                }
            }
        }
    }
}

pub(crate) fn cluster_name(i: usize, n: usize) -> String {
    let width = n.saturating_sub(1).to_string().len().max(3);
    format!("cluster-{i:0width$}")
}

pub(crate) fn workload_name(i: usize, m: usize) -> String {
    let width = m.saturating_sub(1).to_string().len().max(5);
    format!("w-{i:0width$}")
}

pub(crate) fn policy(failed: &str, partner: &str) -> v1::PropagationPolicy {
    let weights = [(failed, 1), (partner, 1)];
    flotilla_api::seed::weighted_deployments(&namespace(partner), "failover", "", &weights)
}

pub(crate) fn workload(name: &str, partner: &str, replicas: i32) -> v1::Workload {
    let manifest = serde_json::json!({
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {
            "name": name,
            "namespace": namespace(partner),
            "labels": {"app": name, PARTNER_LABEL: partner},
        },
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"app": name}},
            "template": {
                "metadata": {"labels": {"app": name}},
                "spec": {"containers": [{"name": "app", "image": "nginx"}]},
            },
        },
    });
    v1::Workload {
        manifest: manifest.to_string(),
        ..Default::default()
    }
}

/// The service flags that put every failover timer at zero (toleration, failure and success
/// thresholds, eviction timeout) with members probed every `probe_period`.
pub(crate) fn zero_timers(probe_period: Duration) -> BTreeMap<Service, Vec<String>> {
    BTreeMap::from([
        (
            Service::API,
            vec![
                "--default-not-ready-toleration-seconds=0".into(),
                "--default-unreachable-toleration-seconds=0".into(),
            ],
        ),
        (
            Service::CLUSTER_HEALTH,
            vec![
                format!(
                    "--cluster-status-update-frequency={}",
                    flag_duration(probe_period)
                ),
                "--cluster-failure-threshold=0s".into(),
                "--cluster-success-threshold=0s".into(),
                "--failover-eviction-timeout=0s".into(),
            ],
        ),
    ])
}

/// The suite of a bench: every service on a free loopback port without an admin server,
/// with `flags`. The members run in their own process (members.rs), so that the control
/// plane's CPU and memory are measured apart from theirs.
pub(crate) fn suite_config(flags: BTreeMap<Service, Vec<String>>) -> SuiteConfig {
    let any = SocketAddr::from(([127, 0, 0, 1], 0));
    SuiteConfig {
        listen: Service::ALL
            .into_iter()
            .map(|s| {
                (
                    s,
                    ServiceListen {
                        grpc: any,
                        admin: None,
                    },
                )
            })
            .collect(),
        flags,
        members: vec![],
        hosting: flotilla_suite::Hosting::InProcess,
        replicas: 1,
    }
}

/// The Push Clusters of the members the members' process serves.
pub(crate) fn member_clusters(external: &External) -> Vec<v1::Cluster> {
    external
        .members
        .iter()
        .map(|(name, addr)| {
            MemberSpec {
                name: name.clone(),
                listen: *addr,
                region: "bench".into(),
                provider: "sim".into(),
                zones: vec![],
                labels: BTreeMap::from([("bench".to_owned(), "true".to_owned())]),
                capacity: u32::MAX / 2,
                pod_startup_delay: Duration::ZERO,
            }
            .cluster(*addr)
        })
        .collect()
}

pub(crate) fn bar(len: u64, msg: &str) -> ProgressBar {
    let pb = ProgressBar::new(len);
    pb.set_style(
        ProgressStyle::with_template(
            "  {spinner} {msg:<28} [{bar:30}] {pos}/{len} ({per_sec}, {elapsed})",
        )
        .unwrap_or_else(|_| ProgressStyle::default_bar())
        .progress_chars("=> "),
    );
    pb.set_message(msg.to_owned());
    pb.enable_steady_tick(Duration::from_millis(100));
    pb
}

/// Polls `done` every 50 ms until it returns `Some`, showing `pb`; fails after `timeout`.
async fn until<T>(
    timeout: Duration,
    what: &str,
    pb: &ProgressBar,
    suite: &Suite,
    mut done: impl FnMut(&ProgressBar) -> Result<T, String>,
) -> anyhow::Result<T> {
    let deadline = Instant::now() + timeout;
    loop {
        match done(pb) {
            Ok(v) => return Ok(v),
            Err(state) => {
                if suite.shutdown.is_triggered() && suite.failure().is_none() {
                    anyhow::bail!("interrupted while waiting for {what}");
                }
                if let Some(why) = suite.failure() {
                    anyhow::bail!("the suite stopped while waiting for {what}: {why}");
                }
                if Instant::now() >= deadline {
                    anyhow::bail!(
                        "timed out after {} waiting for {what}: {state}",
                        humantime::format_duration(timeout)
                    );
                }
            }
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Runs `flotilla bench failover`.
pub async fn run(args: FailoverArgs) -> anyhow::Result<()> {
    let args = *args.flags;
    let (n, m) = (args.clusters, args.bindings);
    if n < 2 {
        anyhow::bail!("--clusters must be at least 2 (one fails, the others take over)");
    }
    if m == 0 {
        anyhow::bail!("--bindings must be at least 1");
    }
    if args.workload_replicas < 2 || args.workload_replicas % 2 != 0 {
        anyhow::bail!("--workload-replicas must be even and at least 2 (half on each cluster)");
    }
    logging::init(&args.log, args.log_file.as_deref())?;

    let mut flags = zero_timers(args.probe_period);
    flags.insert(
        Service::WORK_EXECUTOR,
        vec![format!(
            "--status-sync-period={}",
            flag_duration(args.status_sync_period)
        )],
    );
    if let Some(timeout) = args.probe_timeout {
        flags
            .entry(Service::CLUSTER_HEALTH)
            .or_default()
            .push(format!("--probe-timeout={}", flag_duration(timeout)));
    }
    merge_service_flags(&mut flags, &args.service_flag)?;

    let bench_store = BenchStore::for_run(&args.store).await?;
    let store = bench_store.store();
    let failed = cluster_name(0, n);
    let out = Out { json: args.json };
    out.line(format!(
        "flotilla bench failover: {n} clusters, {m} bindings × {} replicas (Divided 1:1 over \
         {failed} + one partner; {} namespaces with a PropagationPolicy each), store {}, \
         fault {:?}",
        args.workload_replicas,
        n - 1,
        bench_store.describe(),
        args.fault
    ));
    out.line(format!(
        "  timers: failure threshold 0, eviction timeout 0, tolerations 0; probes every {}{}; \
         pods Ready at once",
        humantime::format_duration(args.probe_period),
        args.probe_timeout
            .map(|t| format!(" (timeout {})", humantime::format_duration(t)))
            .unwrap_or_default()
    ));

    let shutdown = Shutdown::new();
    shutdown.trigger_on_signals();
    if args.replicas > 1 || !args.member_latency.is_zero() {
        out.line(format!(
            "  {} replica(s) of each controller{}; member latency {}",
            args.replicas,
            if args.replicas > 1 {
                " (scheduler and work-executor over 16 shards)"
            } else {
                ""
            },
            humantime::format_duration(args.member_latency)
        ));
    }
    let external =
        match External::spawn_with_latency(n, args.member_latency, Duration::from_secs(60)).await {
            Ok(e) => e,
            Err(e) => {
                bench_store.finish().await;
                return Err(e);
            }
        };
    let clusters = member_clusters(&external);
    let mut config = suite_config(flags);
    config.replicas = usize::from(args.replicas);
    if args.processes {
        config.hosting = match processes_hosting(&bench_store, &args.log) {
            Ok(h) => h,
            Err(e) => {
                external.stop().await;
                bench_store.finish().await;
                return Err(e);
            }
        };
    }
    let tracker = track::spawn(store.clone(), shutdown.clone());
    let suite = Suite::start(config, store, shutdown.clone()).await?;
    let run = Run {
        args: &args,
        suite: &suite,
        tracker: &tracker,
        failed: &failed,
        bench_store: &bench_store,
        external: &external,
        out,
    };
    let result = run.measure(clusters).await;
    wind_down(suite, Some(external), bench_store, result, args.json).await
}

/// `--processes`: every service as the binary beside this one, on the run's etcd.
fn processes_hosting(
    bench_store: &BenchStore,
    log: &str,
) -> anyhow::Result<flotilla_suite::Hosting> {
    let store_flags = bench_store
        .service_flags()
        .ok_or_else(|| {
            anyhow!("--processes needs --store etcd: separate processes share state only there")
        })?
        .to_vec();
    let exe = std::env::current_exe().context("finding the flotilla executable")?;
    let bin_dir = exe
        .parent()
        .ok_or_else(|| anyhow!("{} has no directory", exe.display()))?
        .to_path_buf();
    for service in Service::ALL {
        if flotilla_suite::Hosting::binary(&bin_dir, service).is_none() {
            anyhow::bail!(
                "--processes runs the service binaries beside {}, and flotilla-{} is not there: \
                 build them with `cargo build --release --workspace --bins`",
                exe.display(),
                service.name()
            );
        }
    }
    Ok(flotilla_suite::Hosting::Processes {
        bin_dir,
        store_flags,
        log: log.to_owned(),
    })
}

/// Ends a bench run: stops the suite (what went wrong stopping it is printed as warnings),
/// the members' process if any and the store, then prints the JSON report if `json` (or
/// returns the run's error).
pub(crate) async fn wind_down(
    suite: Suite,
    external: Option<External>,
    bench_store: BenchStore,
    result: anyhow::Result<serde_json::Value>,
    json: bool,
) -> anyhow::Result<()> {
    logging::quiet();
    for p in suite.stop(Duration::from_secs(20)).await {
        eprintln!("warning: {p}");
    }
    if let Some(external) = external {
        external.stop().await;
    }
    bench_store.finish().await;
    let report = result?;
    if json {
        println!("{report}");
    }
    Ok(())
}

/// Where human-readable lines go: stdout, or stderr when stdout carries the JSON report.
#[derive(Clone, Copy)]
pub(crate) struct Out {
    pub(crate) json: bool,
}

impl Out {
    pub(crate) fn line(self, line: impl std::fmt::Display) {
        if self.json {
            eprintln!("{line}");
        } else {
            println!("{line}");
        }
    }
}

/// One run of the benchmark: what it measures with.
struct Run<'a> {
    args: &'a FailoverFlags,
    suite: &'a Suite,
    tracker: &'a Shared,
    failed: &'a str,
    bench_store: &'a BenchStore,
    external: &'a External,
    out: Out,
}

impl Run<'_> {
    /// Loads, fails the cluster, waits for the failover; prints the report and returns it
    /// as JSON.
    async fn measure(&self, clusters: Vec<v1::Cluster>) -> anyhow::Result<serde_json::Value> {
        let Run {
            args,
            suite,
            tracker,
            failed,
            bench_store,
            external,
            out,
        } = *self;
        let (n, m) = (args.clusters, args.bindings);
        let suite_store = bench_store.store();
        suite.wait_serving(Duration::from_secs(120)).await?;
        let load_started = Instant::now();

        // Clusters, all Ready and untainted.
        suite.register_clusters(clusters, 32).await?;
        let pb = bar(n as u64, "clusters Ready");
        until(args.load_timeout, "every cluster Ready", &pb, suite, |pb| {
            let st = track::lock(tracker);
            let ready = st
                .clusters()
                .values()
                .filter(|c| c.ready && c.taints.is_empty())
                .count();
            pb.set_position(ready as u64);
            if ready >= n {
                Ok(())
            } else {
                Err(format!("{ready} of {n} Ready and untainted"))
            }
        })
        .await?;
        pb.finish_and_clear();

        // One policy per partner, then the workloads.
        let api = suite.api().await?;
        let partners: Vec<String> = (1..n).map(|i| cluster_name(i, n)).collect();
        let created: Vec<anyhow::Result<()>> = futures::stream::iter(partners.iter().map(|p| {
            let mut api = api.clone();
            let policy = policy(failed, p);
            async move {
                api.create_propagation_policy(v1::CreatePropagationPolicyRequest {
                    propagation_policy: Some(policy),
                })
                .await
                .map(|_| ())
                .map_err(|s| anyhow!("creating a PropagationPolicy: {}", s.message()))
            }
        }))
        .buffer_unordered(16)
        .collect()
        .await;
        created.into_iter().collect::<anyhow::Result<()>>()?;

        let pb = bar(m as u64, "creating workloads");
        let creating = Instant::now();
        let mut stream = futures::stream::iter((0..m).map(|i| {
            let mut api = api.clone();
            let name = workload_name(i, m);
            let partner = partners[i % partners.len()].clone();
            let w = workload(&name, &partner, args.workload_replicas);
            async move {
                api.create_workload(v1::CreateWorkloadRequest { workload: Some(w) })
                    .await
                    .map(|_| ())
                    .map_err(|s| {
                        anyhow!("creating workload {name}: {:?}: {}", s.code(), s.message())
                    })
            }
        }))
        .buffer_unordered(args.create_concurrency.max(1));
        loop {
            let next = tokio::select! {
                r = stream.next() => r,
                () = suite.shutdown.triggered() => anyhow::bail!("interrupted while creating workloads"),
            };
            let Some(r) = next else { break };
            r?;
            pb.inc(1);
        }
        let create_time = creating.elapsed();
        pb.finish_and_clear();

        let pb = bar(m as u64, "scheduled, applied, Ready");
        until(
            args.load_timeout,
            "every binding to settle",
            &pb,
            suite,
            |pb| {
                let st = track::lock(tracker);
                pb.set_position(st.settled() as u64);
                if st.settled() >= m {
                    Ok(())
                } else {
                    Err(format!(
                        "{} bindings seen, {} scheduled, applied and Ready",
                        st.bindings(),
                        st.settled()
                    ))
                }
            },
        )
        .await?;
        pb.finish_and_clear();
        let load_time = load_started.elapsed();
        out.line(format!(
            "  load: {m} workloads created in {:.1}s ({}/s); {n} clusters Ready, every binding \
             scheduled, applied and Ready after {:.1}s",
            create_time.as_secs_f64(),
            thousands(m as f64 / create_time.as_secs_f64().max(1e-9)),
            load_time.as_secs_f64()
        ));

        // The failover.
        let addr = external
            .addr(failed)
            .ok_or_else(|| anyhow!("no member {failed}"))?;
        let revision_before = suite_store.current_revision().await.unwrap_or(0);
        let mut helpers = cpu::helpers([
            ("members", external.pid()),
            ("etcd", bench_store.helper_pid()),
        ]);
        // --processes: each service is a helper of its own
        // (a replica's report name lives as long as the run: leaked, a few bytes per replica)
        let service_pids: Vec<(&'static str, u32)> = suite
            .services
            .iter()
            .filter_map(|s| {
                let name: &'static str = if s.replica > 1 {
                    Box::leak(s.name().into_boxed_str())
                } else {
                    s.service.name()
                };
                Some((name, s.pid?))
            })
            .collect();
        helpers.extend(
            service_pids
                .iter()
                .map(|&(name, pid)| cpu::Helper { name, pid }),
        );
        let cpu_before = cpu::Sample::now(&helpers);
        let fault = match args.fault {
            FaultArg::Unreachable => Fault::Unreachable,
            FaultArg::Unhealthy => Fault::Unhealthy,
        };
        let t0 = {
            let mut st = track::lock(tracker);
            st.arm(failed);
            Instant::now()
        };
        External::set_fault(addr, fault).await?;
        let affected = track::lock(tracker).progress().1;
        let pb = bar(affected as u64, &format!("failing over from {failed}"));
        let waited = until(args.failover_timeout, "the failover", &pb, suite, |pb| {
            let st = track::lock(tracker);
            let (done, of) = st.progress();
            pb.set_position(done as u64);
            if done >= of {
                Ok(())
            } else {
                let o = st.outcome();
                let reached: Vec<String> = STAGES
                    .iter()
                    .zip(o.stages.iter())
                    .map(|(s, v)| format!("{s} {}", v.len()))
                    .collect();
                Err(format!(
                    "{done} of {of} done ({}); e.g. {}",
                    reached.join(", "),
                    o.stragglers.join("; ")
                ))
            }
        })
        .await;
        pb.finish_and_clear();
        waited?;
        let outcome = track::lock(tracker).outcome();
        let usage = cpu_before.until(&cpu::Sample::now(&helpers));
        let per_service = ServiceUsage::read(&usage, &service_pids);
        let memory = match &per_service {
            Some(p) => Some(p.memory),
            None => cpu::memory(None),
        };
        let members_memory = external.pid().and_then(|p| cpu::memory(Some(p)));
        let revisions = suite_store
            .current_revision()
            .await
            .unwrap_or(0)
            .saturating_sub(revision_before);

        // The floor, on the same store after the run.
        let keys = WRITES_PER_BINDING * outcome.affected.max(1);
        let pb = ProgressBar::new_spinner();
        pb.set_message(format!("measuring the store floor ({keys} guarded puts)"));
        pb.enable_steady_tick(Duration::from_millis(100));
        let floor = bench_store.floor(keys).await;
        pb.finish_and_clear();

        let mut report = report(out, t0, &outcome, failed, n, floor);
        let affected = outcome.affected.max(1) as f64;
        out.line(format!(
            "  store writes from the fault to the last binding done: {revisions} revisions — {} \
             binding versions, {} Work versions ({:.1} and {:.1} per affected binding; goal ≤ 3 \
             and ≤ 1.5)",
            outcome.binding_versions,
            outcome.work_versions,
            outcome.binding_versions as f64 / affected,
            outcome.work_versions as f64 / affected
        ));
        let control_plane_cpu = match &per_service {
            Some(p) => {
                if let Some(line) = usage.describe("the bench itself (its tracker)") {
                    out.line(format!("  {line}"));
                }
                out.line(format!("  {}", p.describe(usage.wall)));
                Some(p.cpu)
            }
            None => {
                if let Some(line) = usage.describe("control plane (this process)") {
                    out.line(format!("  {line}"));
                }
                usage.process_cpu
            }
        };
        if let Some(cpu) = control_plane_cpu {
            let what = if per_service.is_some() {
                "the six service processes"
            } else {
                "includes the bench's own watch of every binding"
            };
            out.line(format!(
                "  control-plane CPU per failed-over binding: {:.0} µs (goal ≤ 250 µs; {what})",
                cpu * 1e6 / affected
            ));
        }
        let mib = |b: u64| b as f64 / (1024.0 * 1024.0);
        if let Some((rss, peak)) = memory {
            out.line(format!(
                "  control-plane memory: {:.0} MiB resident after the failover, {:.0} MiB peak \
                 (goal ≤ 300 MiB){}",
                mib(rss),
                mib(peak),
                members_memory.map_or_else(String::new, |(r, p)| format!(
                    "; members' process {:.0} MiB ({:.0} peak)",
                    mib(r),
                    mib(p)
                ))
            ));
        }
        if let Some(obj) = report.as_object_mut() {
            obj.insert(
                "config".into(),
                serde_json::json!({
                    "clusters": n,
                    "bindings": m,
                    "replicas": args.workload_replicas,
                    "controller_replicas": args.replicas,
                    "member_latency_ms": args.member_latency.as_millis(),
                    "store": bench_store.describe(),
                    "fault": format!("{:?}", args.fault),
                    "probe_period_s": args.probe_period.as_secs_f64(),
                    "status_sync_period_s": args.status_sync_period.as_secs_f64(),
                }),
            );
            obj.insert(
                "load".into(),
                serde_json::json!({
                    "create_s": create_time.as_secs_f64(),
                    "settled_s": load_time.as_secs_f64(),
                }),
            );
            obj.insert(
                "writes".into(),
                serde_json::json!({
                    "revisions": revisions,
                    "binding_versions": outcome.binding_versions,
                    "work_versions": outcome.work_versions,
                    "binding_versions_per_binding": outcome.binding_versions as f64 / affected,
                    "work_versions_per_binding": outcome.work_versions as f64 / affected,
                }),
            );
            obj.insert(
                "cpu".into(),
                serde_json::json!({
                    "wall_s": usage.wall.as_secs_f64(),
                    "control_plane_s": control_plane_cpu,
                    "control_plane_us_per_binding": control_plane_cpu.map(|c| c * 1e6 / affected),
                    "processes": per_service.is_some(),
                    "services_s": per_service.as_ref().map(|p| p.json()),
                    "bench_s": per_service.as_ref().and(usage.process_cpu),
                    "members_s": usage.helper("members"),
                    "etcd_s": usage.helper("etcd"),
                    "machine_busy_cores": usage.machine_busy_cores,
                    "cores": usage.cores,
                }),
            );
            obj.insert(
                "memory_mib".into(),
                serde_json::json!({
                    "control_plane_rss": memory.map(|(r, _)| mib(r)),
                    "control_plane_peak": memory.map(|(_, p)| mib(p)),
                    "members_rss": members_memory.map(|(r, _)| mib(r)),
                    "members_peak": members_memory.map(|(_, p)| mib(p)),
                }),
            );
        }
        if let Some(path) = &args.metrics_file {
            let text = flotilla_runtime::telemetry::install_metrics()
                .map(|h| h.render())
                .map_err(|e| anyhow!("no metrics recorder: {e}"))?;
            std::fs::write(path, text)
                .with_context(|| format!("writing the metrics to {}", path.display()))?;
            out.line(format!("  metrics: {}", path.display()));
        }
        Ok(report)
    }
}

/// `--processes`: what each service process used during the failover.
struct ServiceUsage {
    /// (service, CPU seconds, resident bytes), in registry order.
    services: Vec<(&'static str, f64, u64)>,
    /// Their CPU seconds together.
    cpu: f64,
    /// Their resident and peak resident bytes together.
    memory: (u64, u64),
}

impl ServiceUsage {
    /// `None` unless the services ran as processes (`pids`).
    fn read(usage: &cpu::Usage, pids: &[(&'static str, u32)]) -> Option<Self> {
        if pids.is_empty() {
            return None;
        }
        let mut services = Vec::new();
        let mut memory = (0, 0);
        for &(name, pid) in pids {
            let (rss, peak) = cpu::memory(Some(pid)).unwrap_or((0, 0));
            memory = (memory.0 + rss, memory.1 + peak);
            services.push((name, usage.helper(name).unwrap_or(0.0), rss));
        }
        let cpu = services.iter().map(|(_, c, _)| c).sum();
        Some(Self {
            services,
            cpu,
            memory,
        })
    }

    /// One report line: the total and each service's share.
    fn describe(&self, wall: Duration) -> String {
        let wall = wall.as_secs_f64().max(1e-9);
        let mib = |b: u64| b as f64 / (1024.0 * 1024.0);
        let each: Vec<String> = self
            .services
            .iter()
            .map(|(name, cpu, rss)| {
                format!(
                    "{name} {cpu:.1} ({:.2} cores, {:.0} MiB)",
                    cpu / wall,
                    mib(*rss)
                )
            })
            .collect();
        format!(
            "control plane (6 processes): {:.1} CPU-seconds ({:.2} cores): {}",
            self.cpu,
            self.cpu / wall,
            each.join(", ")
        )
    }

    fn json(&self) -> serde_json::Value {
        self.services
            .iter()
            .map(|(name, cpu, rss)| {
                (
                    (*name).to_owned(),
                    serde_json::json!({"cpu_s": cpu, "rss_mib": *rss as f64 / (1024.0 * 1024.0)}),
                )
            })
            .collect::<serde_json::Map<_, _>>()
            .into()
    }
}

/// Prints the per-stage report and returns it as JSON.
fn report(
    out: Out,
    t0: Instant,
    o: &track::Outcome,
    failed: &str,
    n: usize,
    floor: anyhow::Result<(&'static str, f64)>,
) -> serde_json::Value {
    let since = |t: Instant| t.saturating_duration_since(t0);
    let at = |t: Option<Instant>| t.map_or_else(|| "-".to_owned(), |t| secs(since(t)));
    let at_json = |t: Option<Instant>| t.map(|t| since(t).as_secs_f64());
    out.line(format!(
        "\nfailover of {} bindings off {failed} (1 of {n} clusters; {} completed); seconds \
         since the fault:",
        o.affected, o.complete
    ));
    out.line(format!(
        "  {failed}: not Ready {}  ·  NoSchedule taint {}  ·  NoExecute taint {}",
        at(o.not_ready),
        at(o.no_schedule),
        at(o.no_execute)
    ));
    out.line(format!(
        "  {:<16}{:>9}{:>9}{:>9}{:>9}{:>9}",
        "stage", "bindings", "p50", "p90", "p99", "max"
    ));
    let mut stages = serde_json::Map::new();
    for (name, instants) in STAGES.iter().zip(o.stages.iter()) {
        match Summary::of(instants.iter().map(|t| since(*t)).collect()) {
            Some(s) => {
                out.line(format!(
                    "  {:<16}{:>9}{:>9}{:>9}{:>9}{:>9}",
                    name,
                    s.count,
                    secs(s.p50),
                    secs(s.p90),
                    secs(s.p99),
                    secs(s.max)
                ));
                stages.insert(
                    (*name).to_owned(),
                    serde_json::json!({
                        "bindings": s.count,
                        "p50_s": s.p50.as_secs_f64(),
                        "p90_s": s.p90.as_secs_f64(),
                        "p99_s": s.p99.as_secs_f64(),
                        "max_s": s.max.as_secs_f64(),
                    }),
                );
            }
            None => out.line(format!("  {name:<16}{:>9}", 0)),
        }
    }
    let mut json = serde_json::json!({
        "affected": o.affected,
        "completed": o.complete,
        "not_ready_s": at_json(o.not_ready),
        "no_schedule_s": at_json(o.no_schedule),
        "no_execute_s": at_json(o.no_execute),
        "stages": stages,
    });
    let last = o
        .stages
        .iter()
        .skip(3)
        .flat_map(|v| v.iter())
        .max()
        .copied();
    let Some(last) = last else {
        out.line("  nothing completed");
        return json;
    };
    let from_taint = o.no_execute.map(|t| last.saturating_duration_since(t));
    let total = since(last);
    let rate = |d: Duration| o.affected as f64 / d.as_secs_f64().max(1e-9);
    out.line(format!(
        "  end to end: fault → last binding done {} s ({} bindings/s; goal ≤ 3 s)",
        secs(total),
        thousands(rate(total))
    ));
    if let Some(d) = from_taint {
        out.line(format!(
            "              NoExecute taint → last binding done {} s ({} bindings/s)",
            secs(d),
            thousands(rate(d))
        ));
    }
    if let Some(obj) = json.as_object_mut() {
        obj.insert("end_to_end_s".into(), total.as_secs_f64().into());
        obj.insert("bindings_per_s".into(), rate(total).into());
        obj.insert(
            "taint_to_done_s".into(),
            from_taint.map(|d| d.as_secs_f64()).into(),
        );
    }
    match floor {
        Ok((store, keys_per_sec)) => {
            let writes = WRITES_PER_BINDING * o.affected;
            let floor_time = Duration::from_secs_f64(writes as f64 / keys_per_sec.max(1e-9));
            let measured = from_taint.unwrap_or(total);
            let times = measured.as_secs_f64() / floor_time.as_secs_f64().max(1e-9);
            out.line(format!(
                "  {} floor (same run, {store}): guarded-64 txns {} keys/s → {} bindings × \
                 {WRITES_PER_BINDING} writes = {} s; measured {} s = {times:.1}× the floor \
                 (goal ≤ 3.5×)",
                if store == "MemStore" { "store" } else { "etcd" },
                thousands(keys_per_sec),
                o.affected,
                secs(floor_time),
                secs(measured),
            ));
            if let Some(obj) = json.as_object_mut() {
                obj.insert(
                    "floor".into(),
                    serde_json::json!({
                        "store": store,
                        "keys_per_s": keys_per_sec,
                        "seconds": floor_time.as_secs_f64(),
                        "times_floor": times,
                    }),
                );
            }
        }
        Err(e) => out.line(format!("  floor: not measured: {e:#}")),
    }
    json
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_sort_in_creation_order() {
        assert_eq!(cluster_name(0, 100), "cluster-000");
        assert_eq!(cluster_name(7, 1000), "cluster-007");
        assert_eq!(cluster_name(1234, 2000), "cluster-1234");
        assert_eq!(workload_name(42, 10_000), "w-00042");
    }

    #[test]
    fn every_binding_lands_on_the_failed_cluster() {
        let p = policy("cluster-000", "cluster-003");
        let spec = p.spec.as_ref().map(|s| s.placement.clone());
        let names = spec
            .flatten()
            .and_then(|pl| pl.cluster_affinity)
            .map(|a| a.cluster_names)
            .unwrap_or_default();
        assert_eq!(names, vec!["cluster-000", "cluster-003"]);
        let w = workload("w-00001", "cluster-003", 2);
        let manifest: serde_json::Value =
            serde_json::from_str(&w.manifest).unwrap_or(serde_json::Value::Null);
        assert_eq!(manifest["metadata"]["labels"][PARTNER_LABEL], "cluster-003");
        // The policy and the workload meet in the partner's namespace.
        let ns = p.metadata.as_ref().map(|m| m.namespace.clone());
        assert_eq!(ns.as_deref(), Some("bench-cluster-003"));
        assert_eq!(manifest["metadata"]["namespace"], "bench-cluster-003");
        assert_eq!(manifest["spec"]["replicas"], 2);
    }
}
