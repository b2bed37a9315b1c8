//! `flotilla-graceful-eviction`: stamps and removes graceful eviction tasks once the new
//! placement is healthy or the task timed out, keeps them while no replacement exists, and
//! runs application failover (docs/semantics.md, GE-1..GE-8, with A6 and A10).
//!
//! ```text
//!   etcd ──watch bindings/──► Cache<binding> ──create/update/list──► WorkQueue<binding key>
//!                                                                        │ leader only
//!                                                 leases/graceful-eviction ┘ (fenced writes)
//!   reconcile × --workers: plan(binding, app-failover memory, timeout, now)
//!       GE-8 Unhealthy too long → graceful_evict_cluster (producer §1.8, purge mode)
//!       GE-3/4 stamp, keep, remove (A6: an empty placement is never healthy)
//!       A6 ReplacementPending condition
//!     ──► bindings/<ns>/<name> (batched CAS: update_many) ; events/… ; requeue per GE-6
//!
//!   gRPC flotilla.v1.GracefulEviction/Assess: the same step as a dry run
//! ```

#![deny(missing_docs)]

pub mod controller;
pub mod error;
pub mod grpc;
pub mod plan;

use flotilla_runtime::service::{Parts, Started};
use std::sync::Arc;
use std::time::Duration;

use clap::Parser;
use flotilla_proto::v1;
use flotilla_runtime::CacheBarrier;
use flotilla_runtime::args::{ArgError, or_errors, require};
use flotilla_runtime::{
    BatchConfig, CommonArgs, Controller, Elected, QueueConfig, Shutdown, WorkQueue, Writer,
};
use flotilla_store::StoreRef;
use flotilla_store::typed::decode;

pub use crate::controller::Context;
pub use crate::error::Error;

/// The election prefix of this service.
pub const LEASE_PREFIX: &str = "leases/graceful-eviction";

/// The fully qualified gRPC service name (for health).
pub const SERVICE_NAME: &str = "flotilla.v1.GracefulEviction";

/// Flags of `flotilla-graceful-eviction`.
#[derive(Clone, Debug, Parser)]
#[command(
    name = "flotilla-graceful-eviction",
    version,
    about = "Removes graceful eviction tasks when the replacement is healthy or the grace period ends, and runs application failover (GE-1..GE-8)"
)]
pub struct Args {
    /// Store, gRPC, admin and logging flags shared by every service.
    #[command(flatten)]
    pub common: CommonArgs,

    /// How long an eviction task without its own `gracePeriodSeconds` keeps the old copy
    /// while the new placement is not yet healthy (Karmada `--graceful-eviction-timeout`,
    /// default 10m). Accepts `200ms`, `30s`, `10m`.
    #[arg(
        long,
        env = "FLOTILLA_GRACEFUL_EVICTION_TIMEOUT",
        default_value = "10m",
        value_parser = humantime::parse_duration
    )]
    pub graceful_eviction_timeout: Duration,

    /// Concurrent reconciles; also the largest batch of binding writes sent in one go
    /// (default 64, one etcd transaction of guarded puts; Karmada has 5, A12).
    #[arg(long, env = "FLOTILLA_WORKERS", default_value_t = 64)]
    pub workers: usize,
}

/// Validated settings of the controller (what the service starts from).
#[derive(Clone, Debug)]
pub struct Config {
    /// `--graceful-eviction-timeout`.
    pub default_timeout: Duration,
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
            default_timeout: Duration::from_secs(600),
            workers: 64,
            identity: identity.into(),
            lease_ttl: Duration::from_secs(15),
        }
    }
}

// === impl Args ===

impl Args {
    /// Checks what clap cannot and builds the [`Config`]; every problem is reported.
    pub fn validate(&self) -> Result<Config, Vec<ArgError>> {
        let mut errors = self.common.validate().err().unwrap_or_default();
        require(
            &mut errors,
            !self.graceful_eviction_timeout.is_zero(),
            "graceful-eviction-timeout",
            "must be positive",
        );
        require(
            &mut errors,
            self.workers > 0,
            "workers",
            "must be at least 1",
        );
        or_errors(errors, || Config {
            default_timeout: self.graceful_eviction_timeout,
            workers: self.workers,
            identity: self.common.identity(),
            lease_ttl: self.common.lease_ttl,
        })
    }

    /// Runs the service until SIGTERM/SIGINT: store, controller, gRPC and admin servers.
    pub async fn run(self) -> anyhow::Result<()> {
        flotilla_runtime::service::run::<GracefulEviction>(self).await
    }
}

/// Runs the graceful-eviction controller until the shutdown fires: leader election on
/// [`LEASE_PREFIX`], the watch that keeps `bindings_writer`'s cache, and the workers (only
/// while leading, writes fenced).
async fn run(
    store: StoreRef,
    config: Config,
    shutdown: Shutdown,
    bindings_writer: Writer<v1::ResourceBinding>,
    clock: flotilla_runtime::Clock,
) -> Result<(), Error> {
    let elected = Elected::spawn(
        store.clone(),
        LEASE_PREFIX,
        &config.identity,
        config.lease_ttl,
        "graceful-eviction",
        &shutdown,
    );
    let batches = BatchConfig::group_commit(config.workers, "graceful_eviction");
    let writes = elected.writes(batches, &shutdown);
    let bindings = bindings_writer.cache();
    // GE-8.7: the status collector's passes (read when an application failover is due; a
    // postponed one looks again by itself, so their events queue nothing)
    let collections_writer: Writer<v1::StatusCollection> = Writer::new();
    let collections = collections_writer.cache();
    let collection_events = collections_writer.reflect_prefix(
        store.clone(),
        "statuscollections",
        decode::<v1::StatusCollection>,
    );
    let ctx = Arc::new(Context::new(
        config.clone(),
        bindings.clone(),
        collections,
        writes,
        clock,
    ));
    // the plain typed decoder and the prefix's config: the process shares one watch of the
    // bindings (flotilla_runtime::shared_watcher)
    let events =
        bindings_writer.reflect_prefix(store.clone(), "bindings", decode::<v1::ResourceBinding>);
    let queue = WorkQueue::new(QueueConfig::new("graceful_eviction"));
    let cache = bindings.clone();
    Controller::new(queue, controller::reconcile, controller::error_policy)
        // one failover = one trace: the task's removal continues the span that last
        // wrote the binding's status (the work executor's aggregated status)
        .trace_parent(controller::failover_trace)
        .workers(config.workers)
        .leader(elected.leader())
        .barrier(CacheBarrier::new(store.clone()).cache("bindings/", &bindings))
        .watches(events, move |ev| controller::keys_for(&cache, ev))
        .watches(collection_events, |_| Vec::new())
        .run(ctx, shutdown.clone())
        .await;
    elected.resign().await;
    Ok(())
}

flotilla_runtime::service! {
    /// graceful-eviction as a service (`flotilla_runtime::service`).
    pub struct GracefulEviction {
        name: "graceful-eviction",
        grpc: SERVICE_NAME,
        flags: Args => Config,
        start: start_service,
    }
}

/// Starts GracefulEviction: what `flotilla-graceful-eviction` runs on the [`Parts`] of its runtime.
fn start_service(parts: &Parts, config: Config) -> Started {
    tracing::info!(
        graceful_eviction_timeout = %humantime::format_duration(config.default_timeout),
        workers = config.workers,
        "graceful-eviction configured"
    );
    let timeout = config.default_timeout;
    // The cache first, so that health says SERVING only once it synced.
    let bindings_writer: Writer<v1::ResourceBinding> = Writer::new();
    parts
        .readiness
        .add_cache("bindings", &bindings_writer.cache());
    let running = run(
        parts.store.clone(),
        config,
        parts.shutdown.clone(),
        bindings_writer,
        parts.clock.clone(),
    );
    Started::new(move |r| r.add_service(grpc::server(timeout)), async move {
        Ok(running.await?)
    })
}
