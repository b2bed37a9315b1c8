//! `flotilla bench schedule`: the scheduler alone, in two measurements.
//!
//! ```text
//!   decisions   flotilla_core's schedule() on one thread, over M bindings shaped as the
//!               failover bench's (Divided, static weights 1:1 over cluster 0 and a partner)
//!               against N clusters: first placements, and the failover decision itself
//!               (cluster 0 tainted NoExecute, its replicas in an eviction task)
//!   with writes the scheduler service on a store holding N clusters and M unscheduled
//!               bindings: the time until every binding is scheduled (one guarded write
//!               each), next to the store's floor for M guarded puts in 64-op transactions
//! ```

use std::hint::black_box;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use anyhow::anyhow;
use flotilla_core::Time;
use flotilla_core::scheduler::schedule::{ScheduleInput, schedule};
use flotilla_core::types::{
    ClusterAffinity, ClusterPreferences, GracefulEvictionTask, ObjectReference, Placement,
    PurgeMode, ReplicaDivisionPreference, ReplicaSchedulingStrategy, ReplicaSchedulingType,
    ResourceBinding, StaticClusterWeight, TAINT_NOT_READY, Taint, TaintEffect, TargetCluster,
};
use flotilla_proto::v1;
use flotilla_runtime::Shutdown;
use flotilla_store::typed::Typed;
use flotilla_suite::Service;
use flotilla_suite::store::StoreArgs;
use futures::StreamExt as _;

use super::failover::{BenchStore, Out, bar, cluster_name};
use super::stats::{secs, thousands};
use super::track;

/// Flags of `flotilla bench schedule`.
#[derive(Debug, clap::Args)]
pub struct ScheduleArgs {
    /// Member clusters.
    #[arg(long, default_value_t = 100)]
    clusters: usize,

    /// Bindings.
    #[arg(long, default_value_t = 10_000)]
    bindings: usize,

    /// Passes over the bindings for the in-process decisions.
    #[arg(long, default_value_t = 5)]
    rounds: usize,

    /// Only the in-process decisions (no store, no service).
    #[arg(long)]
    decisions_only: bool,

    #[command(flatten)]
    store: StoreArgs,

    /// Print the results as one JSON object on stdout (the human report goes to stderr).
    #[arg(long)]
    json: bool,
}

fn partner(i: usize, n: usize) -> String {
    cluster_name(1 + i % (n - 1), n)
}

/// The failover bench's placement: Divided, Weighted by static weights 1:1 over cluster 0
/// and `partner`.
fn placement(failed: &str, partner: &str) -> Placement {
    let weight = |c: &str| StaticClusterWeight {
        target_cluster: ClusterAffinity {
            cluster_names: vec![c.to_owned()],
            ..Default::default()
        },
        weight: 1,
    };
    Placement {
        cluster_affinity: Some(ClusterAffinity {
            cluster_names: vec![failed.to_owned(), partner.to_owned()],
            ..Default::default()
        }),
        replica_scheduling: Some(ReplicaSchedulingStrategy {
            replica_scheduling_type: ReplicaSchedulingType::Divided,
            replica_division_preference: Some(ReplicaDivisionPreference::Weighted),
            weight_preference: Some(ClusterPreferences {
                static_weight_list: vec![weight(failed), weight(partner)],
                dynamic_weight: None,
            }),
        }),
        ..Default::default()
    }
}

/// Unscheduled binding `i` of `m`, in the namespace of its partner.
fn binding(i: usize, n: usize, m: usize) -> ResourceBinding {
    let failed = cluster_name(0, n);
    let partner = partner(i, n);
    let name = super::failover::workload_name(i, m);
    let mut rb = ResourceBinding::default();
    rb.meta.name = format!("{name}-deployment");
    rb.meta.namespace = format!("bench-{partner}");
    rb.meta.generation = 1;
    rb.spec.resource = ObjectReference {
        api_version: "apps/v1".to_owned(),
        kind: "Deployment".to_owned(),
        namespace: rb.meta.namespace.clone(),
        name,
        uid: format!("uid-{i}"),
    };
    rb.spec.replicas = 2;
    rb.spec.placement = Some(placement(&failed, &partner));
    rb
}

/// The clusters: every one serving Deployments; `failed` tainted NoExecute when true.
fn clusters(n: usize, failed: bool) -> Vec<flotilla_core::types::Cluster> {
    (0..n)
        .map(|i| {
            let mut c = flotilla_core::types::Cluster::named(&cluster_name(i, n))
                .serving("apps/v1", &["Deployment"]);
            if failed && i == 0 {
                c.spec.taints.push(Taint::new(
                    TAINT_NOT_READY,
                    TaintEffect::NoExecute,
                    Some(Time::from_secs(1)),
                ));
            }
            c
        })
        .collect()
}

/// Decisions per second of `schedule()` over `bindings` against `snapshot`, one thread.
fn decisions_per_sec(
    bindings: &[ResourceBinding],
    snapshot: &[flotilla_core::types::Cluster],
    rounds: usize,
) -> anyhow::Result<(usize, Duration)> {
    let started = Instant::now();
    let mut n = 0;
    for _ in 0..rounds {
        for rb in bindings {
            let input = ScheduleInput::from_binding(rb, snapshot)
                .map_err(|e| anyhow!("binding {}: {e}", rb.meta.name))?;
            let outcome = schedule(&input).map_err(|e| anyhow!("binding {}: {e}", rb.meta.name))?;
            black_box(outcome);
            n += 1;
        }
    }
    Ok((n, started.elapsed()))
}

/// Runs `flotilla bench schedule`.
pub async fn run(args: ScheduleArgs) -> anyhow::Result<()> {
    let (n, m) = (args.clusters, args.bindings);
    if n < 2 || m == 0 || args.rounds == 0 {
        anyhow::bail!("--clusters must be at least 2, --bindings and --rounds at least 1");
    }
    let out = Out { json: args.json };
    out.line(format!(
        "flotilla bench schedule: {m} bindings (Divided 1:1 over {} + one partner) against {n} \
         clusters",
        cluster_name(0, n)
    ));

    // In process: first placements, then the failover decision.
    let fresh: Vec<ResourceBinding> = (0..m).map(|i| binding(i, n, m)).collect();
    let (count, took) = decisions_per_sec(&fresh, &clusters(n, false), args.rounds)?;
    let first_rate = count as f64 / took.as_secs_f64().max(1e-9);
    let failed = cluster_name(0, n);
    let failing: Vec<ResourceBinding> = (0..m)
        .map(|i| {
            let mut rb = binding(i, n, m);
            rb.spec.clusters = vec![TargetCluster::new(partner(i, n), 1)];
            rb.spec.graceful_eviction_tasks = vec![GracefulEvictionTask {
                from_cluster: failed.clone(),
                purge_mode: PurgeMode::Gracefully,
                replicas: Some(1),
                ..Default::default()
            }];
            rb.status.applied_placement = rb.spec.placement.clone();
            rb.meta.generation = 2;
            rb.status.scheduler_observed_generation = 1;
            rb
        })
        .collect();
    let (fcount, ftook) = decisions_per_sec(&failing, &clusters(n, true), args.rounds)?;
    let failover_rate = fcount as f64 / ftook.as_secs_f64().max(1e-9);
    out.line(format!(
        "  in process, one thread: first placements {} decisions/s ({:.1} µs each); the \
         failover decision {} decisions/s ({:.1} µs each) — goal ≥ 50,000/s",
        thousands(first_rate),
        1e6 / first_rate.max(1e-9),
        thousands(failover_rate),
        1e6 / failover_rate.max(1e-9),
    ));
    let mut json = serde_json::json!({
        "clusters": n,
        "bindings": m,
        "decisions_per_s": {
            "first_placement": first_rate,
            "failover": failover_rate,
        },
    });
    if !args.decisions_only {
        let written = with_writes(&args, out).await?;
        if let Some(obj) = json.as_object_mut() {
            obj.insert("with_writes".into(), written);
        }
    }
    if args.json {
        println!("{json}");
    }
    Ok(())
}

/// The scheduler service on a store preloaded with the clusters and unscheduled bindings.
async fn with_writes(args: &ScheduleArgs, out: Out) -> anyhow::Result<serde_json::Value> {
    let m = args.bindings;
    let bench_store = BenchStore::for_run(&args.store).await?;
    let result = scheduled_on(args, &bench_store).await;
    bench_store.finish().await;
    let (took, floor) = result?;
    let rate = m as f64 / took.as_secs_f64().max(1e-9);
    let mut json = serde_json::json!({
        "store": bench_store_name(args),
        "seconds": took.as_secs_f64(),
        "bindings_per_s": rate,
    });
    let floor_line = match floor {
        Ok((store, keys_per_sec)) => {
            let floor_time = m as f64 / keys_per_sec.max(1e-9);
            if let Some(obj) = json.as_object_mut() {
                obj.insert(
                    "floor".into(),
                    serde_json::json!({"store": store, "keys_per_s": keys_per_sec, "seconds": floor_time}),
                );
            }
            format!(
                "; floor (same run, {store}): {m} guarded puts in 64-op transactions {} s = {} \
                 keys/s, measured {:.1}× the floor",
                secs(Duration::from_secs_f64(floor_time)),
                thousands(keys_per_sec),
                took.as_secs_f64() / floor_time.max(1e-9)
            )
        }
        Err(e) => format!("; floor not measured: {e:#}"),
    };
    out.line(format!(
        "  the scheduler service on {}: {m} bindings scheduled in {} s = {} bindings/s (goal ≥ \
         10,000/s){floor_line}",
        bench_store_name(args),
        secs(took),
        thousands(rate)
    ));
    Ok(json)
}

fn bench_store_name(args: &ScheduleArgs) -> &'static str {
    match args.store.store {
        flotilla_runtime::StoreKind::Mem => "mem",
        flotilla_runtime::StoreKind::Etcd => "etcd",
    }
}

type Floor = anyhow::Result<(&'static str, f64)>;

async fn scheduled_on(
    args: &ScheduleArgs,
    bench_store: &BenchStore,
) -> anyhow::Result<(Duration, Floor)> {
    let (n, m) = (args.clusters, args.bindings);
    let store = bench_store.store();
    let typed = Typed::new(store.clone());
    for c in clusters(n, false) {
        typed
            .create(v1::Cluster::from(c), None)
            .await
            .map_err(|e| anyhow!("creating a cluster: {e}"))?;
    }
    let pb = bar(m as u64, "writing unscheduled bindings");
    let mut writes = futures::stream::iter((0..m).map(|i| {
        let typed = typed.clone();
        async move {
            typed
                .create(v1::ResourceBinding::from(binding(i, n, m)), None)
                .await
                .map(|_| ())
                .map_err(|e| anyhow!("creating a binding: {e}"))
        }
    }))
    .buffer_unordered(64);
    while let Some(r) = writes.next().await {
        r?;
        pb.inc(1);
    }
    pb.finish_and_clear();

    let shutdown = Shutdown::new();
    shutdown.trigger_on_signals();
    let tracker = track::spawn(store.clone(), shutdown.clone());
    let grpc = tokio::net::TcpListener::bind(SocketAddr::from(([127, 0, 0, 1], 0))).await?;
    let started = Instant::now();
    let task = Service::SCHEDULER
        .spawn(store.clone(), &[], grpc, None, None, &shutdown)
        .await?;
    let pb = bar(m as u64, "scheduling");
    let deadline = started + Duration::from_secs(600);
    let took = loop {
        let done = track::lock(&tracker).scheduled();
        pb.set_position(done as u64);
        if done >= m {
            break started.elapsed();
        }
        if task.is_finished() {
            anyhow::bail!("the scheduler stopped");
        }
        if Instant::now() >= deadline {
            anyhow::bail!("only {done} of {m} bindings were scheduled within 10 minutes");
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    };
    pb.finish_and_clear();
    shutdown.trigger();
    let _ = tokio::time::timeout(Duration::from_secs(20), task).await;
    let floor = bench_store.floor(m).await;
    Ok((took, floor))
}
