//! `flotilla bench latency`: how long one binding's failover takes above the timers. Two
//! simulated members in their own process; each round heals cluster 0, creates one workload
//! Divided 1:1 over both clusters, waits until it is scheduled, applied and Ready, fails
//! cluster 0 and measures from its NoExecute taint (every timer at zero, so what follows is
//! Flotilla's own work) to the binding done: evicted, rescheduled, its Work applied and Ready,
//! the task removed. Printed beside the floor of the same run: the sequential store writes a
//! failover needs (evict, schedule, Work, Work status, binding status, drop the task) at the
//! p50 latency of one guarded write.

use std::time::{Duration, Instant};

use anyhow::anyhow;
use flotilla_member_sim::Fault;
use flotilla_proto::v1;
use flotilla_runtime::Shutdown;
use flotilla_suite::Suite;
use flotilla_suite::store::StoreArgs;

use super::failover::{
    BenchStore, Out, ReportArgs, cluster_name, member_clusters, suite_config, wind_down,
    zero_timers,
};
use super::members::External;
use super::stats::{Summary, secs};
use super::track;

/// The store writes on one binding's failover path, one after the other.
const SEQUENTIAL_WRITES: usize = 6;

/// Flags of `flotilla bench latency`.
#[derive(Debug, clap::Args)]
pub struct LatencyArgs {
    /// Failovers to measure (at least 1).
    #[arg(long, default_value_t = 20, value_parser = crate::at_least_one())]
    rounds: usize,

    /// How often cluster-health probes the members (detection, not measured).
    #[arg(long, default_value = "100ms", value_parser = humantime::parse_duration)]
    probe_period: Duration,

    #[command(flatten)]
    store: StoreArgs,

    #[command(flatten)]
    report: ReportArgs,
}

/// Runs `flotilla bench latency`.
pub async fn run(args: LatencyArgs) -> anyhow::Result<()> {
    let out = args.report.start()?;
    let bench_store = BenchStore::for_run(&args.store).await?;
    out.line(format!(
        "flotilla bench latency: {} failovers of one binding between 2 clusters, every timer at \
         zero, store {}",
        args.rounds,
        bench_store.describe()
    ));
    let external = External::spawn(2, Duration::from_secs(60)).await?;
    let config = suite_config(zero_timers(args.probe_period));
    let shutdown = Shutdown::new();
    shutdown.trigger_on_signals();
    let tracker = track::spawn(bench_store.store(), shutdown.clone());
    let suite = Suite::start(config, bench_store.store(), shutdown.clone()).await?;
    let result = rounds(&args, &suite, &tracker, &external, &bench_store, out).await;
    wind_down(suite, Some(external), bench_store, result, args.report.json).await
}

/// Polls `done` every 2 ms until it holds; fails after `timeout`.
async fn wait(
    timeout: Duration,
    what: &str,
    suite: &Suite,
    mut done: impl FnMut() -> bool,
) -> anyhow::Result<()> {
    let deadline = Instant::now() + timeout;
    while !done() {
        if let Some(why) = suite.failure() {
            anyhow::bail!("the suite stopped while waiting for {what}: {why}");
        }
        if Instant::now() >= deadline {
            anyhow::bail!("timed out after {timeout:?} waiting for {what}");
        }
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    Ok(())
}

async fn rounds(
    args: &LatencyArgs,
    suite: &Suite,
    tracker: &track::Shared,
    external: &External,
    bench_store: &BenchStore,
    out: Out,
) -> anyhow::Result<serde_json::Value> {
    const T: Duration = Duration::from_secs(60);
    suite.wait_serving(Duration::from_secs(120)).await?;
    suite
        .register_clusters(member_clusters(external), 2)
        .await?;
    let (failed, partner) = (cluster_name(0, 2), cluster_name(1, 2));
    let addr = external
        .addr(&failed)
        .ok_or_else(|| anyhow!("no member {failed}"))?;
    let mut api = suite.api().await?;
    api.create_propagation_policy(v1::CreatePropagationPolicyRequest {
        propagation_policy: Some(super::failover::policy(&failed, &partner)),
    })
    .await
    .map_err(|s| anyhow!("creating the PropagationPolicy: {}", s.message()))?;

    let mut latencies = Vec::with_capacity(args.rounds);
    for round in 0..args.rounds {
        External::set_fault(addr, Fault::Healthy).await?;
        let healed = || {
            let st = track::lock(tracker);
            [&failed, &partner].iter().all(|c| {
                st.clusters()
                    .get(c.as_str())
                    .is_some_and(|c| c.ready && c.taints.is_empty())
            })
        };
        wait(T, "both clusters Ready and untainted", suite, healed).await?;
        // The tracker may see the cluster recover before the scheduler does: a workload
        // placed meanwhile lands on the partner alone and would have nothing to fail over.
        // Such a workload is left as it is and the round takes a new one.
        let mut attempt = 0;
        loop {
            let name = format!("lat-{round:04}-{attempt}");
            api.create_workload(v1::CreateWorkloadRequest {
                workload: Some(super::failover::workload(&name, &partner, 2)),
            })
            .await
            .map_err(|s| anyhow!("creating workload {name}: {}", s.message()))?;
            let mut on_failed = None;
            wait(T, "the new binding settled", suite, || {
                on_failed = track::lock(tracker).settled_on(&name, &failed);
                on_failed.is_some()
            })
            .await?;
            if on_failed == Some(true) {
                break;
            }
            attempt += 1;
            if attempt == 5 {
                anyhow::bail!("5 new workloads in a row were placed without {failed}");
            }
            out.line(format!(
                "  {name} was placed before the scheduler saw {failed} recover; taking another workload"
            ));
        }
        track::lock(tracker).arm(&failed);
        External::set_fault(addr, Fault::Unhealthy).await?;
        wait(T, "the failover", suite, || {
            let (done, of) = track::lock(tracker).progress();
            of > 0 && done >= of
        })
        .await?;
        let outcome = track::lock(tracker).outcome();
        let last = outcome.stages.iter().flat_map(|v| v.iter()).max().copied();
        if let (Some(taint), Some(last)) = (outcome.no_execute, last) {
            latencies.push(last.saturating_duration_since(taint));
        }
    }

    // The floor: one guarded write's latency, measured here (on a key no service watches),
    // times the writes in sequence.
    let store = bench_store.store();
    let key = "bench-floor/latency";
    let _ = store.delete(key).await;
    let mut revision = 0;
    let mut writes = Vec::new();
    for i in 0..50u32 {
        let t = Instant::now();
        revision = store
            .compare_and_put(key, revision, bytes::Bytes::from(i.to_string()))
            .await
            .map_err(|e| anyhow!("measuring the write latency: {e}"))?;
        writes.push(t.elapsed());
    }
    let _ = store.delete(key).await;
    let write = Summary::of(writes).map(|s| s.p50).unwrap_or_default();
    let floor = write * u32::try_from(SEQUENTIAL_WRITES).unwrap_or(u32::MAX);
    let Some(s) = Summary::of(latencies.clone()) else {
        anyhow::bail!("no failover was measured");
    };
    out.line(format!(
        "  one binding, NoExecute taint → done ({} failovers): p50 {} s, p90 {} s, max {} s \
         (goal p50 ≤ 0.020 s); floor: {SEQUENTIAL_WRITES} sequential guarded writes × {:.2} ms \
         (p50 of one, same run) = {:.2} ms",
        s.count,
        secs(s.p50),
        secs(s.p90),
        secs(s.max),
        write.as_secs_f64() * 1e3,
        floor.as_secs_f64() * 1e3
    ));
    Ok(serde_json::json!({
        "rounds": s.count,
        "p50_s": s.p50.as_secs_f64(),
        "p90_s": s.p90.as_secs_f64(),
        "max_s": s.max.as_secs_f64(),
        "write_p50_s": write.as_secs_f64(),
        "floor_s": floor.as_secs_f64(),
    }))
}
