//! `flotilla-taint-manager`: evicts bindings from clusters with untolerated NoExecute taints
//! by moving the cluster from `spec.clusters` to a graceful eviction task, in one CAS
//! (docs/semantics.md, TM-1..TM-12, with A3, A4, A7, A8, A12).
//!
//! ```text
//!   etcd ──watch clusters/──► Cache<Cluster> ─┐                 leases/taint-manager
//!        ──watch bindings/──► Cache<binding> ─┤ (index: spec.clusters)      │ leader only
//!                                             ▼                             ▼
//!                 TM-3 delays ──► WorkQueue<(cluster, binding)> ──► reconcile × --workers
//!                                                                      │ TM-6/7 on fresh state
//!                        A8 rate + brake (Ready conditions) ──token──► │ TM-9 purge mode
//!                                                                      ▼ TM-11
//!              bindings/<ns>/<name> ◄── update_many (batched CAS, fenced) ── BatchWriter
//!              events/…  ◄── EvictWorkloadFromCluster, EvictionRate<Reason>
//!
//!   gRPC flotilla.v1.TaintManager/Explain: the same rules as a dry run
//! ```
//!
//! Deviation from Karmada (documented): `--enable-no-execute-taint-eviction` defaults to
//! **true** here (Karmada ≥ v1.14: false), because A1 makes failover work out of the box.

#![deny(missing_docs)]

pub mod controller;
pub mod error;
pub mod grpc;

use flotilla_runtime::service::{Parts, Started};
use std::sync::Arc;
use std::time::Duration;

use clap::{ArgAction, Parser};
use flotilla_core::eviction::EvictionRateConfig;
use flotilla_core::types::{Cluster, PurgeMode};
use flotilla_proto::v1;
use flotilla_runtime::CacheBarrier;
use flotilla_runtime::args::{ArgError, or_errors, require};
use flotilla_runtime::{
    BatchConfig, CommonArgs, Controller, Elected, QueueConfig, Shutdown, WorkQueue, Writer,
};
use flotilla_store::typed::decode;
use flotilla_store::{KeyValue, StoreRef};

pub use crate::controller::{Context, EvictKey};
pub use crate::error::Error;

/// The election prefix of this service.
pub const LEASE_PREFIX: &str = "leases/taint-manager";

/// The fully qualified gRPC service name (for health).
pub const SERVICE_NAME: &str = "flotilla.v1.TaintManager";

/// Flags of `flotilla-taint-manager`.
#[derive(Clone, Debug, Parser)]
#[command(
    name = "flotilla-taint-manager",
    version,
    about = "Evicts bindings from clusters with untolerated NoExecute taints (Karmada's taint manager, TM-1..TM-12)"
)]
pub struct Args {
    /// Store, gRPC, admin and logging flags shared by every service.
    #[command(flatten)]
    pub common: CommonArgs,

    /// Evict bindings from clusters with untolerated NoExecute taints at all. Flotilla's
    /// default is true (Karmada ≥ v1.14 defaults to false): A1 makes failover work out of the
    /// box. `--enable-no-execute-taint-eviction=false` turns evictions off.
    #[arg(
        long,
        env = "FLOTILLA_ENABLE_NO_EXECUTE_TAINT_EVICTION",
        default_value_t = true,
        action = ArgAction::Set,
        num_args = 0..=1,
        default_missing_value = "true"
    )]
    pub enable_no_execute_taint_eviction: bool,

    /// Purge mode of evictions of bindings without `failover.cluster`: Gracefully or Directly
    /// (Karmada `--no-execute-taint-eviction-purge-mode`, default Gracefully, TM-9). Other
    /// values are rejected at start-up.
    #[arg(
        long,
        env = "FLOTILLA_NO_EXECUTE_TAINT_EVICTION_PURGE_MODE",
        default_value = "Gracefully"
    )]
    pub no_execute_taint_eviction_purge_mode: String,

    /// Evictions per second while few clusters are unhealthy (A8). Unset = unlimited
    /// (Flotilla's default, A12; Karmada's `--resource-eviction-rate` is a fixed 0.5/s).
    #[arg(long, env = "FLOTILLA_EVICTION_RATE")]
    pub eviction_rate: Option<f64>,

    /// Evictions per second once at least `--unhealthy-cluster-threshold` of the clusters are
    /// unhealthy (A8; default 0.01, Kubernetes' `--secondary-node-eviction-rate`).
    #[arg(long, env = "FLOTILLA_SECONDARY_EVICTION_RATE", default_value_t = 0.01)]
    pub secondary_eviction_rate: f64,

    /// Fraction of clusters (Ready not True) from which the secondary rate applies (A8;
    /// default 0.55, Kubernetes' `--unhealthy-zone-threshold`). When every cluster is
    /// unhealthy nothing is evicted.
    #[arg(
        long,
        env = "FLOTILLA_UNHEALTHY_CLUSTER_THRESHOLD",
        default_value_t = 0.55
    )]
    pub unhealthy_cluster_threshold: f64,

    /// After a disruption ends (every cluster unhealthy, or at least
    /// `--unhealthy-cluster-threshold` of them), evictions stay at the secondary rate this
    /// long and the toleration clocks of older NoExecute taints restart, so that clusters
    /// coming back a little later than the others lose nothing (A8, "no herd"; the
    /// node-lifecycle controller's behaviour).
    #[arg(long, env = "FLOTILLA_EVICTION_STABILIZATION_WINDOW", default_value = "60s", value_parser = humantime::parse_duration)]
    pub eviction_stabilization_window: Duration,

    /// Concurrent reconciles; also the largest batch of evictions written in one go
    /// (default 64, the size of one etcd transaction of guarded puts; Karmada has 3, A12).
    #[arg(long, env = "FLOTILLA_WORKERS", default_value_t = 64)]
    pub workers: usize,
}

/// Validated settings of the controller (what the service starts from).
#[derive(Clone, Debug)]
pub struct Config {
    /// `--enable-no-execute-taint-eviction`.
    pub eviction_enabled: bool,
    /// `--no-execute-taint-eviction-purge-mode` (Gracefully or Directly).
    pub purge_mode: PurgeMode,
    /// A8 flags.
    pub rate: EvictionRateConfig,
    /// `--eviction-stabilization-window` (A8).
    pub stabilization_window: Duration,
    /// `--workers`.
    pub workers: usize,
    /// This replica's identity in the election.
    pub identity: String,
    /// Leader lease TTL.
    pub lease_ttl: Duration,
}

impl Config {
    /// Defaults (as the flags' defaults) for `identity`, e.g. for tests and `flotilla up`.
    pub fn new(identity: impl Into<String>) -> Self {
        Config {
            eviction_enabled: true,
            purge_mode: PurgeMode::Gracefully,
            rate: EvictionRateConfig::default(),
            stabilization_window: Duration::from_secs(60),
            workers: 64,
            identity: identity.into(),
            lease_ttl: Duration::from_secs(15),
        }
    }
}

/// Parses a purge-mode flag value (TM-9: only Gracefully or Directly).
pub fn parse_purge_mode(value: &str) -> Result<PurgeMode, String> {
    match value {
        "Gracefully" => Ok(PurgeMode::Gracefully),
        "Directly" => Ok(PurgeMode::Directly),
        other => Err(format!(
            "{other:?} is not a purge mode for taint evictions: use Gracefully or Directly"
        )),
    }
}

// === impl Args ===

impl Args {
    /// Checks what clap cannot and builds the [`Config`]; every problem is reported.
    pub fn validate(&self) -> Result<Config, Vec<ArgError>> {
        let mut errors = self.common.validate().err().unwrap_or_default();
        let purge_mode = parse_purge_mode(&self.no_execute_taint_eviction_purge_mode)
            .map_err(|message| {
                errors.push(ArgError {
                    flag: "no-execute-taint-eviction-purge-mode",
                    message,
                })
            })
            .unwrap_or_default();
        require(
            &mut errors,
            self.eviction_rate
                .is_none_or(|rate| rate.is_finite() && rate >= 0.0),
            "eviction-rate",
            "must be a finite number ≥ 0",
        );
        require(
            &mut errors,
            self.secondary_eviction_rate.is_finite() && self.secondary_eviction_rate >= 0.0,
            "secondary-eviction-rate",
            "must be a finite number ≥ 0",
        );
        require(
            &mut errors,
            self.unhealthy_cluster_threshold > 0.0 && self.unhealthy_cluster_threshold <= 1.0,
            "unhealthy-cluster-threshold",
            "must be in (0, 1]",
        );
        require(
            &mut errors,
            self.workers > 0,
            "workers",
            "must be at least 1",
        );
        or_errors(errors, || Config {
            eviction_enabled: self.enable_no_execute_taint_eviction,
            purge_mode,
            rate: EvictionRateConfig {
                primary_rate: self.eviction_rate,
                secondary_rate: self.secondary_eviction_rate,
                unhealthy_threshold: self.unhealthy_cluster_threshold,
            },
            stabilization_window: self.eviction_stabilization_window,
            workers: self.workers,
            identity: self.common.identity(),
            lease_ttl: self.common.lease_ttl,
        })
    }

    /// Runs the service until SIGTERM/SIGINT: store, controller, gRPC and admin servers.
    pub async fn run(self) -> anyhow::Result<()> {
        flotilla_runtime::service::run::<TaintManager>(self).await
    }
}

fn decode_cluster(kv: &KeyValue) -> Result<Cluster, String> {
    let wire: v1::Cluster = decode(kv).map_err(|e| e.to_string())?;
    Cluster::try_from(wire).map_err(|e| e.to_string())
}

/// Runs the taint manager's controller until the shutdown fires: leader election on
/// [`LEASE_PREFIX`], the watches that keep the writers' caches, and the eviction workers (only
/// while leading, writes fenced).
async fn run(
    store: StoreRef,
    config: Config,
    shutdown: Shutdown,
    clusters_writer: Writer<Cluster>,
    bindings_writer: Writer<v1::ResourceBinding>,
    clock: flotilla_runtime::Clock,
) -> Result<(), Error> {
    let elected = Elected::spawn(
        store.clone(),
        LEASE_PREFIX,
        &config.identity,
        config.lease_ttl,
        "taint-manager",
        &shutdown,
    );
    // Queue keys are (cluster, binding): when two clusters of one binding fail together
    // both evictions of that binding may be due at once, and etcd refuses a transaction
    // that writes one key twice — so one write per key per batch (the second waits for
    // the next batch and then loses its CAS and re-decides on the new binding).
    let batches =
        BatchConfig::group_commit(config.workers, "taint_manager").one_write_per_key(true);
    let writes = elected.writes(batches, &shutdown);
    let clusters = clusters_writer.cache();
    let bindings = bindings_writer.cache();
    let queue = WorkQueue::new(QueueConfig::new("taint_manager"));
    let ctx = Arc::new(Context::new(
        config.clone(),
        clusters.clone(),
        bindings.clone(),
        queue.clone(),
        writes,
        clock,
    ));

    let cluster_events = clusters_writer.reflect_prefix(store.clone(), "clusters", decode_cluster);
    // the plain typed decoder and the prefix's config: the process shares one watch of the
    // bindings (flotilla_runtime::shared_watcher)
    let binding_events =
        bindings_writer.reflect_prefix(store.clone(), "bindings", decode::<v1::ResourceBinding>);
    let (on_clusters, on_bindings) = (ctx.clone(), ctx.clone());
    Controller::new(queue, controller::reconcile, controller::error_policy)
        .watches_with(cluster_events, move |ev| {
            controller::on_cluster_event(&on_clusters, ev)
        })
        .watches_with(binding_events, move |ev| {
            controller::on_binding_event(&on_bindings, ev)
        })
        // decide only once both caches hold a full list
        .ready_after("clusters", &clusters)
        .ready_after("bindings", &bindings)
        // one failover = one trace: an eviction continues the span that added the
        // cluster's NoExecute taint (cluster-health)
        .trace_parent(controller::taint_trace)
        .workers(config.workers)
        .leader(elected.leader())
        .barrier(
            CacheBarrier::new(store.clone())
                .cache("clusters/", &clusters)
                .cache("bindings/", &bindings),
        )
        .run(ctx, shutdown.clone())
        .await;
    elected.resign().await;
    Ok(())
}

flotilla_runtime::service! {
    /// The taint-manager as a service (`flotilla_runtime::service`).
    pub struct TaintManager {
        name: "taint-manager",
        grpc: SERVICE_NAME,
        flags: Args => Config,
        start: start_service,
    }
}

/// Starts TaintManager: what `flotilla-taint-manager` runs on the [`Parts`] of its runtime.
fn start_service(parts: &Parts, config: Config) -> Started {
    tracing::info!(
        eviction_enabled = config.eviction_enabled,
        purge_mode = config.purge_mode.as_str(),
        eviction_rate = ?config.rate.primary_rate,
        secondary_rate = config.rate.secondary_rate,
        unhealthy_threshold = config.rate.unhealthy_threshold,
        workers = config.workers,
        "taint-manager configured"
    );
    // Caches first, so that health says SERVING only once they synced.
    let clusters_writer: Writer<Cluster> = Writer::new();
    let bindings_writer: Writer<v1::ResourceBinding> =
        Writer::new().with_index(controller::CLUSTER_INDEX, controller::index_targets);
    parts
        .readiness
        .add_cache("clusters", &clusters_writer.cache());
    parts
        .readiness
        .add_cache("bindings", &bindings_writer.cache());
    let running = run(
        parts.store.clone(),
        config,
        parts.shutdown.clone(),
        clusters_writer,
        bindings_writer,
        parts.clock.clone(),
    );
    Started::new(|r| r.add_service(grpc::server()), async move {
        Ok(running.await?)
    })
}
