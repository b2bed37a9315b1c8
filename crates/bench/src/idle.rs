//! `flotilla bench idle`: what the control plane costs while nothing fails. `--clusters` Pull
//! clusters (1,000) heart-beat at production timers from a second process (the hidden
//! `flotilla bench members --heartbeats-to`); once all are Ready, the CPU of the control plane
//! (this process), of the heart-beating process and of the temporary etcd is measured over
//! `--window`, and printed as cores next to the reference: 0.014 cores for 1,000 clusters,
//! measured when the issue asking for this bench was filed.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use anyhow::anyhow;
use flotilla_proto::v1;
use flotilla_runtime::Shutdown;
use flotilla_suite::store::StoreArgs;
use flotilla_suite::{Service, Suite};

use super::cpu;
use super::failover::{BenchStore, Out, ReportArgs, bar, suite_config, wind_down};
use super::members::{External, pull_cluster_name};
use super::track;

/// Cores 1,000 heart-beating clusters cost the control plane at production timers, as the
/// issue asking for this bench measured it (the reference printed beside the result).
const REFERENCE_CORES_PER_1000: f64 = 0.014;

/// Flags of `flotilla bench idle`.
#[derive(Debug, clap::Args)]
pub struct IdleArgs {
    /// Pull clusters heart-beating (at least 1).
    #[arg(long, default_value_t = 1_000, value_parser = crate::at_least_one())]
    clusters: usize,

    /// How long to measure once every cluster is Ready.
    #[arg(long, default_value = "60s", value_parser = humantime::parse_duration)]
    window: Duration,

    /// Longest time for every cluster to turn Ready (cluster-health's success threshold at
    /// production timers is 30s).
    #[arg(long, default_value = "5m", value_parser = humantime::parse_duration)]
    ready_timeout: Duration,

    #[command(flatten)]
    store: StoreArgs,

    #[command(flatten)]
    report: ReportArgs,
}

fn pull_cluster(name: &str) -> v1::Cluster {
    v1::Cluster {
        metadata: Some(v1::ObjectMeta {
            name: name.to_owned(),
            ..Default::default()
        }),
        spec: Some(v1::ClusterSpec {
            sync_mode: v1::SyncMode::Pull as i32,
            ..Default::default()
        }),
        status: None,
    }
}

/// Runs `flotilla bench idle`.
pub async fn run(args: IdleArgs) -> anyhow::Result<()> {
    let out = args.report.start()?;
    let bench_store = BenchStore::for_run(&args.store).await?;
    out.line(format!(
        "flotilla bench idle: {} Pull clusters heart-beating at production timers, store {}",
        args.clusters,
        bench_store.describe()
    ));
    let shutdown = Shutdown::new();
    shutdown.trigger_on_signals();
    let config = suite_config(BTreeMap::new());
    let tracker = track::spawn(bench_store.store(), shutdown.clone());
    let suite = Suite::start(config, bench_store.store(), shutdown.clone()).await?;
    let result = measure(&args, &suite, &tracker, &bench_store, out).await;
    wind_down(suite, None, bench_store, result, args.report.json).await
}

async fn measure(
    args: &IdleArgs,
    suite: &Suite,
    tracker: &track::Shared,
    bench_store: &BenchStore,
    out: Out,
) -> anyhow::Result<serde_json::Value> {
    let n = args.clusters;
    suite.wait_serving(Duration::from_secs(120)).await?;
    let clusters = (0..n)
        .map(|i| pull_cluster(&pull_cluster_name(i, n)))
        .collect();
    suite.register_clusters(clusters, 32).await?;
    let health = suite
        .addr(Service::CLUSTER_HEALTH)
        .ok_or_else(|| anyhow!("no cluster-health"))?;
    let beats =
        External::heartbeats(n, &format!("http://{health}"), Duration::from_secs(120)).await?;
    let pb = bar(n as u64, "clusters Ready");
    let deadline = Instant::now() + args.ready_timeout;
    loop {
        let ready = track::lock(tracker)
            .clusters()
            .values()
            .filter(|c| c.ready)
            .count();
        pb.set_position(ready as u64);
        if ready >= n {
            break;
        }
        if let Some(why) = suite.failure() {
            anyhow::bail!("the suite stopped: {why}");
        }
        if Instant::now() >= deadline {
            anyhow::bail!("only {ready} of {n} clusters turned Ready");
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    pb.finish_and_clear();
    // Let the first status writes after Ready settle before measuring.
    tokio::time::sleep(Duration::from_secs(5)).await;
    let helpers = cpu::helpers([
        ("heartbeats", beats.pid()),
        ("etcd", bench_store.helper_pid()),
    ]);
    let pb = bar(args.window.as_secs(), "measuring (s)");
    let before = cpu::Sample::now(&helpers);
    let revision_before = bench_store.store().current_revision().await.unwrap_or(0);
    let started = Instant::now();
    while started.elapsed() < args.window {
        pb.set_position(started.elapsed().as_secs());
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    let usage = before.until(&cpu::Sample::now(&helpers));
    let writes = bench_store
        .store()
        .current_revision()
        .await
        .unwrap_or(0)
        .saturating_sub(revision_before);
    pb.finish_and_clear();
    beats.stop().await;
    let wall = usage.wall.as_secs_f64().max(1e-9);
    let cores = usage.process_cpu.map(|c| c / wall);
    let reference = REFERENCE_CORES_PER_1000 * n as f64 / 1000.0;
    if let Some(line) = usage.describe("control plane (this process)") {
        out.line(format!("  {line}"));
    }
    if let Some(c) = cores {
        out.line(format!(
            "  idle cost: {c:.4} cores for {n} heart-beating clusters ({:.1} µs of CPU per \
             cluster per second); reference {reference:.4} cores; {writes} store revisions in \
             {wall:.0} s ({:.1}/s)",
            c * 1e6 / n as f64,
            writes as f64 / wall
        ));
    }
    Ok(serde_json::json!({
        "clusters": n,
        "window_s": wall,
        "control_plane_cores": cores,
        "control_plane_cpu_s": usage.process_cpu,
        "heartbeats_cpu_s": usage.helper("heartbeats"),
        "etcd_cpu_s": usage.helper("etcd"),
        "store_revisions": writes,
        "reference_cores": reference,
    }))
}
