//! `flotilla bench store`: the store benchmark (`flotilla_store::bench`) on etcd — through
//! Flotilla's store layer (`EtcdStore`) and on the raw etcd client (the floor), plus
//! `MemStore` — printed next to docs/design.md §7's figures.

use std::sync::Arc;

use anyhow::{Context as _, anyhow};
use flotilla_store::bench::{self as store_bench, BenchOptions, BenchReport, DESIGN_REFERENCE};
use flotilla_store::{EtcdConfig, EtcdStore, MemStore};
use indicatif::ProgressBar;

use super::etcd::TempEtcd;
use super::failover::EtcdBench;

const LONG_ABOUT: &str = "\
Runs the store benchmark of docs/design.md §7 (sequential and concurrent puts, compare-and-swaps, \
transactions of 64 guarded puts and of 128 puts, watch latency) against etcd: once through \
Flotilla's store layer (EtcdStore) and once on the raw etcd client (the floor), plus \
MemStore, next to the figures docs/design.md §7 budgets with. Without --etcd-endpoints each side \
gets a fresh temporary etcd from the `etcd` on PATH (etcd slows down as its database grows).";

/// Flags of `flotilla bench store`.
#[derive(Debug, clap::Args)]
#[command(after_long_help = LONG_ABOUT)]
pub struct StoreBenchArgs {
    /// etcd client URLs, comma-separated; none: temporary etcds from PATH.
    #[arg(long, value_delimiter = ',', value_name = "URL,...")]
    etcd_endpoints: Vec<String>,

    /// Key prefix for the EtcdStore side on an external etcd (removed afterwards).
    #[arg(long, default_value = "/flotilla-bench-store")]
    etcd_prefix: String,

    /// Rounds; each column shows the best figure over them (the least disturbed run on a
    /// shared machine).
    #[arg(long, default_value_t = 1)]
    rounds: usize,

    /// A tenth of the default amounts (a quick look).
    #[arg(long)]
    quick: bool,

    /// Leave MemStore out.
    #[arg(long)]
    no_mem: bool,
}

fn options(quick: bool, round: usize) -> BenchOptions {
    let d = BenchOptions::default();
    let scale = |n: usize| if quick { (n / 10).max(8) } else { n };
    BenchOptions {
        prefix: format!("bench{round}/"),
        seq_puts: scale(d.seq_puts),
        concurrent_puts: scale(d.concurrent_puts),
        cas_ops: scale(d.cas_ops),
        guarded_txns: scale(d.guarded_txns),
        txns_128: scale(d.txns_128),
        watch_samples: scale(d.watch_samples),
        ..d
    }
}

/// One side of a round on its own etcd (temporary) or on the given one.
async fn side(
    endpoints: &[String],
    prefix: &str,
    floor: bool,
    opts: &BenchOptions,
) -> anyhow::Result<BenchReport> {
    let temporary = if endpoints.is_empty() {
        Some(TempEtcd::start().await?)
    } else {
        None
    };
    let urls: Vec<String> = match &temporary {
        Some(t) => vec![t.endpoint().to_owned()],
        None => endpoints.to_vec(),
    };
    let namespace = format!("{}/", prefix.trim_end_matches('/'));
    let store = EtcdStore::connect(EtcdConfig::new(urls.clone()).with_namespace(namespace.clone()))
        .await
        .context("connecting to etcd")?;
    store
        .status()
        .await
        .with_context(|| format!("etcd at {} does not answer", urls.join(",")))?;
    let report = if floor {
        store_bench::etcd_floor(store.client().clone(), opts).await
    } else {
        store_bench::run(Arc::new(store.clone()), opts).await
    }
    .map_err(|e| anyhow!("benchmark on etcd failed: {e}"));
    EtcdBench::new(store, namespace, temporary).finish().await;
    report
}

/// Runs `flotilla bench store`.
pub async fn run(args: StoreBenchArgs) -> anyhow::Result<()> {
    let rounds = args.rounds.max(1);
    let spinner = ProgressBar::new_spinner();
    spinner.enable_steady_tick(std::time::Duration::from_millis(100));
    let mut ours = Vec::new();
    let mut floors = Vec::new();
    let mut mem = Vec::new();
    for round in 0..rounds {
        let opts = options(args.quick, round);
        // Alternate which side goes first.
        for floor in if round % 2 == 0 {
            [true, false]
        } else {
            [false, true]
        } {
            spinner.set_message(format!(
                "round {}/{rounds}: {}",
                round + 1,
                if floor {
                    "raw etcd client"
                } else {
                    "EtcdStore"
                }
            ));
            let r = side(&args.etcd_endpoints, &args.etcd_prefix, floor, &opts).await?;
            if floor {
                floors.push(r);
            } else {
                ours.push(r);
            }
        }
        if !args.no_mem {
            spinner.set_message(format!("round {}/{rounds}: MemStore", round + 1));
            mem.push(
                store_bench::run(Arc::new(MemStore::new()), &opts)
                    .await
                    .map_err(|e| anyhow!("benchmark on MemStore failed: {e}"))?,
            );
        }
    }
    spinner.finish_and_clear();
    let best = |v: &[BenchReport]| BenchReport::best_of(v);
    let (Some(ours), Some(floor)) = (best(&ours), best(&floors)) else {
        anyhow::bail!("no round ran");
    };
    let mem = best(&mem);
    let mut columns: Vec<(&str, &BenchReport)> = vec![("EtcdStore", &ours), ("raw etcd", &floor)];
    if let Some(m) = &mem {
        columns.push(("MemStore", m));
    }
    columns.push(("DESIGN §7", &DESIGN_REFERENCE));
    println!(
        "store benchmark: etcd at {}; best of {rounds} round(s){}\n",
        if args.etcd_endpoints.is_empty() {
            "temporary instances (a fresh one per side and round)".to_owned()
        } else {
            args.etcd_endpoints.join(",")
        },
        if args.quick { ", --quick amounts" } else { "" }
    );
    print!("{}", BenchReport::table(&columns));
    Ok(())
}
