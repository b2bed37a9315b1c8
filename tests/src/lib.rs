//! Test harness for Flotilla's scenario tests: a real etcd (from
//! [`flotilla_store::testing`]) and the real service binaries as child processes on free
//! loopback ports.
//!
//! ```text
//!   EtcdServer ──► etcd (container, binary, or FLOTILLA_ETCD_ENDPOINTS)
//!   Stack::start ─► flotilla-api, flotilla-cluster-health, flotilla-taint-manager,
//!                   flotilla-scheduler, flotilla-graceful-eviction, flotilla-work-executor
//!                   (each with its own --etcd-prefix namespace, so tests share one etcd)
//!   Stack::member ─► flotilla-member-sim (push or pull), faults by RPC
//! ```
//!
//! Service binaries are found next to the test executable's directory
//! (`target/<profile>/flotilla-<service>`); `scripts/test.sh` builds them first
//! (`cargo build --workspace --bins`). A missing binary fails the test with that hint.
//!
//! Helpers shared by the scenarios: reading clusters, bindings (targets, tasks, conditions,
//! aggregated status) and Works through the api; waiting for clusters to be Ready or tainted;
//! [`Recorder`]s that keep every change of an api watch (so that "never happened" is checked
//! on the whole history, not on polls); and a store client in the stack's etcd namespace.
//!
//! Every test is its own process under nextest and every [`Stack`] its own etcd namespace, so
//! tests run in parallel; they mostly wait on (compressed) timers, so more test threads than
//! cores pay off, and with `FLOTILLA_ETCD_ENDPOINTS` they share one etcd instead of starting
//! one each:
//!
//! ```text
//! FLOTILLA_ETCD_ENDPOINTS=http://127.0.0.1:2379 cargo nextest run -p flotilla-tests --test-threads 4
//! ```

#![allow(clippy::unwrap_used, clippy::expect_used)]

pub mod history;
pub mod kube;

mod etcd;
mod process;
mod reads;
mod recorder;
mod seed;
mod stack;

pub use etcd::*;
pub use flotilla_store::testing::EtcdServer;
pub use process::*;
pub use reads::*;
pub use recorder::*;
pub use seed::*;
pub use stack::*;
