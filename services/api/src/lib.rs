//! `flotilla-api`: the front door of Flotilla (docs/design.md §4) and the detector.
//!
//! ```text
//!   user / CLI / pull agents ──gRPC flotilla.v1.Api──► handlers (grpc.rs)
//!       Create/Update: convert (proto::convert) ─► default (PD-1/2, A1) ─► validate
//!                      ─► guarded write (create-if-absent / CAS on resourceVersion)
//!       Get/List (paged at one revision) / Delete (marks while finalizers or references
//!       remain) / Watch (list+BOOKMARK+changes, OUT_OF_RANGE when compacted)
//!                                  │ reads and writes
//!                                  ▼
//!   store: clusters/ policies/ clusterpolicies/ clustertaintpolicies/ workloads/
//!          bindings/ works/ events/
//!                                  │ watches
//!                                  ▼
//!   detector (detector.rs, leader of leases/api-detector, fenced writes):
//!       workload + policies ─► claim (claim.rs) ─► ResourceBinding <ns>/<name>-<kind>
//! ```
//!
//! [`Args::run`] serves one process; [`run_with`] runs the same thing on a given store and
//! listener so that `flotilla up` can host every service in one process.

use std::collections::BTreeMap;
use std::time::Duration;

use anyhow::Context as _;
use flotilla_core::defaults::{
    DEFAULT_NO_EXECUTE_TOLERATION_SECONDS, DefaultingOptions, NoExecuteTaints,
};
use flotilla_core::validation::{Limits, ONE_YEAR_SECONDS};
use flotilla_proto::v1::api_server::ApiServer;
use flotilla_runtime::{CommonArgs, Readiness, Shutdown, decode_limited};
use flotilla_store::StoreRef;

pub mod admission;
pub mod batch;
pub mod claim;
pub mod detector;
pub mod error;
pub mod forward;
pub mod grpc;
pub mod kinds;
pub mod manifest;
pub mod objects;
pub use flotilla_core::quantity;
pub mod requests;
pub mod selector;
pub mod watch;

pub use crate::error::Error;
pub use crate::grpc::{ApiParts, ApiService};

/// The fully qualified name of the service, for health checks.
pub const SERVICE_NAME: &str = "flotilla.v1.Api";

/// Where NoExecute taints come from (A1).
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum NoExecuteTaintsArg {
    /// Karmada v1.5 (Flotilla's default): cluster-health adds not-ready/unreachable
    /// NoExecute taints after the eviction timeout, and every policy gets default
    /// tolerations of them (PD-1.7).
    Auto,
    /// Latest Karmada: only ClusterTaintPolicies and operators add NoExecute taints; no
    /// default tolerations.
    Policy,
}

/// `flotilla-api`: serves `flotilla.v1.Api` and runs the detector.
#[derive(Clone, Debug, clap::Parser)]
#[command(name = "flotilla-api", version, about, long_about = None)]
pub struct Args {
    /// Flags every Flotilla service has.
    #[command(flatten)]
    pub common: CommonArgs,

    /// Where NoExecute taints come from (docs/rules.md, A1): `auto` defaults every policy with
    /// not-ready/unreachable NoExecute tolerations (Karmada v1.5's webhook); `policy` adds
    /// none (latest Karmada, CH-16..18).
    #[arg(long, env = "FLOTILLA_NO_EXECUTE_TAINTS", value_enum, default_value_t = NoExecuteTaintsArg::Auto)]
    pub no_execute_taints: NoExecuteTaintsArg,

    /// tolerationSeconds of the default `cluster.karmada.io/not-ready:NoExecute` toleration
    /// added to policies in `auto` mode (PD-1.7; Karmada webhook flag of the same name,
    /// default 300).
    #[arg(long, env = "FLOTILLA_DEFAULT_NOT_READY_TOLERATION_SECONDS", default_value_t = DEFAULT_NO_EXECUTE_TOLERATION_SECONDS)]
    pub default_not_ready_toleration_seconds: i64,

    /// tolerationSeconds of the default `cluster.karmada.io/unreachable:NoExecute`
    /// toleration added to policies in `auto` mode (PD-1.7; Karmada webhook flag of the same
    /// name, default 300).
    #[arg(long, env = "FLOTILLA_DEFAULT_UNREACHABLE_TOLERATION_SECONDS", default_value_t = DEFAULT_NO_EXECUTE_TOLERATION_SECONDS)]
    pub default_unreachable_toleration_seconds: i64,

    /// Allow NoExecute taints in ClusterTaintPolicies (CH-16.1; Karmada webhook
    /// `--allow-no-execute-taint-policy`, default false there). Default: true with
    /// `--no-execute-taints policy` (where they are the only source of NoExecute taints),
    /// false with `auto`.
    #[arg(long, env = "FLOTILLA_ALLOW_NO_EXECUTE_TAINT_POLICY")]
    pub allow_no_execute_taint_policy: Option<bool>,

    /// Detector workers: workloads reconciled in parallel (a key is never reconciled twice at
    /// once). Their binding writes are group-committed (≤ 64 guarded writes per etcd
    /// transaction), so throughput follows the writes in flight: measured on etcd (debug
    /// build, 2000 workloads) 4 workers ≈ 340 bindings/s, 32 ≈ 1,560/s, 128 ≈ 3,250/s.
    /// Flotilla default 128 (A12: no fixed client limits; a worker is an idle task).
    #[arg(long, env = "FLOTILLA_DETECTOR_WORKERS", default_value_t = 128)]
    pub detector_workers: usize,

    /// How often a Watch with `allowBookmarks` receives a BOOKMARK (`30s`, `1m`); Kubernetes'
    /// watch cache sends one about every minute.
    #[arg(long, env = "FLOTILLA_WATCH_BOOKMARK_INTERVAL", default_value = "1m", value_parser = humantime::parse_duration)]
    pub watch_bookmark_interval: Duration,

    /// Where another control-plane service answers, as `NAME=ADDR` (`scheduler=10.0.0.5:7403`,
    /// `scheduler:50051` in docker-compose; repeat the flag, or comma-separate in the
    /// variable). The api forwards the dry-run RPCs of cluster-health, taint-manager,
    /// scheduler, graceful-eviction and work-executor there, so that the CLI's `explain` and
    /// `what-if` need only the api's address; `GetPeers` lists them. `flotilla up` sets them.
    #[arg(
        long = "peer",
        env = "FLOTILLA_PEERS",
        value_name = "NAME=ADDR",
        value_delimiter = ','
    )]
    pub peers: Vec<String>,
}

/// `NAME=ADDR` of `--peer`: a service name (`scheduler`) and a non-empty address.
fn parse_peer(peer: &str) -> Result<(&str, &str), &'static str> {
    let (name, addr) = peer
        .split_once('=')
        .ok_or("expected NAME=ADDR, e.g. scheduler=127.0.0.1:7403")?;
    let (name, addr) = (name.trim(), addr.trim());
    let valid_name = name.starts_with(|c: char| c.is_ascii_lowercase())
        && name
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-');
    if !valid_name {
        return Err("NAME must be a service name such as scheduler or cluster-health");
    }
    if addr.is_empty() || addr.contains(char::is_whitespace) {
        return Err("ADDR must be HOST:PORT or a URL, without spaces");
    }
    Ok((name, addr))
}

/// The validated configuration of the api service.
#[derive(Clone, Debug)]
pub struct Config {
    /// Admission (defaulting, limits, ClusterTaintPolicy NoExecute switch).
    pub admission: admission::Admission,
    /// The detector's election identity, lease TTL and workers.
    pub detector: detector::DetectorConfig,
    /// BOOKMARK period of watches that allow them.
    pub watch_bookmark_interval: Duration,
    /// gRPC request timeout (does not apply to watch streams' lifetime).
    pub grpc_timeout: Duration,
    /// Other services' addresses by name (`--peer`): `GetPeers` answers them, and the api
    /// forwards the controllers' dry-run RPCs there (`forward`).
    pub peers: BTreeMap<String, String>,
    /// Client TLS towards the peers.
    pub security: flotilla_runtime::SecurityArgs,
}

// === impl Args ===

impl Args {
    /// Checks the flags and builds the configuration (every problem is reported).
    pub fn validate(&self) -> Result<Config, Vec<String>> {
        let mut errors = Vec::new();
        for (flag, value) in [
            (
                "--default-not-ready-toleration-seconds",
                self.default_not_ready_toleration_seconds,
            ),
            (
                "--default-unreachable-toleration-seconds",
                self.default_unreachable_toleration_seconds,
            ),
        ] {
            if !(0..=ONE_YEAR_SECONDS).contains(&value) {
                errors.push(format!("{flag}: must be between 0 and {ONE_YEAR_SECONDS}"));
            }
        }
        if self.detector_workers == 0 {
            errors.push("--detector-workers: must be at least 1".into());
        }
        if self.watch_bookmark_interval < Duration::from_millis(10) {
            errors.push("--watch-bookmark-interval: must be at least 10ms".into());
        }
        let mut peers = BTreeMap::new();
        for peer in &self.peers {
            match parse_peer(peer) {
                Ok((name, addr)) => {
                    if peers.insert(name.to_owned(), addr.to_owned()).is_some() {
                        errors.push(format!("--peer: {name} is given twice"));
                    }
                }
                Err(e) => errors.push(format!("--peer {peer:?}: {e}")),
            }
        }
        if let Err(mut e) = forward::check_peers(&peers, &self.common.security) {
            errors.append(&mut e);
        }
        if !errors.is_empty() {
            return Err(errors);
        }
        let no_execute_taints = match self.no_execute_taints {
            NoExecuteTaintsArg::Auto => NoExecuteTaints::Auto,
            NoExecuteTaintsArg::Policy => NoExecuteTaints::Policy,
        };
        Ok(Config {
            admission: admission::Admission {
                defaulting: DefaultingOptions {
                    no_execute_taints,
                    not_ready_toleration_seconds: self.default_not_ready_toleration_seconds,
                    unreachable_toleration_seconds: self.default_unreachable_toleration_seconds,
                },
                limits: Limits::default(),
                allow_no_execute_taint_policy: self
                    .allow_no_execute_taint_policy
                    .unwrap_or(no_execute_taints == NoExecuteTaints::Policy),
            },
            detector: detector::DetectorConfig {
                identity: self.common.identity(),
                lease_ttl: self.common.lease_ttl,
                workers: self.detector_workers,
            },
            watch_bookmark_interval: self.watch_bookmark_interval,
            grpc_timeout: self.common.grpc_timeout,
            peers,
            security: self.common.security.clone(),
        })
    }

    /// Runs the service until SIGTERM/SIGINT: store from `--store`, gRPC on `--grpc-addr`,
    /// admin on `--admin-addr`.
    pub async fn run(self) -> anyhow::Result<()> {
        flotilla_runtime::service::run::<Api>(self).await
    }
}

/// The parts [`start`] returns.
#[derive(Debug)]
pub struct Started {
    /// The gRPC service, to add to a router.
    pub api: ApiService,
    /// The running detector.
    pub detector: detector::Detector,
}

/// Starts the detector on `store` and builds the gRPC service (its caches are registered
/// with `readiness`; everything stops on `shutdown`).
pub fn start(
    store: StoreRef,
    config: &Config,
    readiness: &Readiness,
    shutdown: &Shutdown,
) -> Started {
    let detector = detector::spawn(store.clone(), &config.detector, readiness, shutdown);
    let api = ApiService::new(ApiParts {
        recorder: flotilla_runtime::events::Recorder::spawn(store.clone(), "api", shutdown.clone()),
        objects: objects::Objects::new(store, config.admission.limits.clone()),
        admission: config.admission.clone(),
        bindings: detector.caches.bindings.clone(),
        shutdown: shutdown.clone(),
        bookmark_interval: config.watch_bookmark_interval,
        peers: config.peers.clone(),
    });
    Started { api, detector }
}

pub mod seed;
#[cfg(feature = "test-util")]
pub mod testing;

flotilla_runtime::service! {
    /// The api as a service (`flotilla_runtime::service`): the detector, and `flotilla.v1.Api`.
    pub struct Api {
        name: "api",
        grpc: SERVICE_NAME,
        flags: Args => Config,
        start: start_service,
    }
}

/// Starts Api: what `flotilla-api` runs on the parts of its runtime.
fn start_service(
    parts: &flotilla_runtime::service::Parts,
    config: Config,
) -> flotilla_runtime::service::Started {
    let started = start(
        parts.store.clone(),
        &config,
        &parts.readiness,
        &parts.shutdown,
    );
    let api = started.api;
    let detector = started.detector.task;
    let (peers, security) = (config.peers.clone(), config.security.clone());
    flotilla_runtime::service::Started::new(
        move |r| {
            let r = r.add_service(decode_limited!(ApiServer::new(api)));
            forward::routes(r, &peers, &security)
        },
        async move {
            detector.await.context("detector task")?;
            Ok(())
        },
    )
}
