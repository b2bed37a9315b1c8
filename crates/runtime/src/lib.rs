//! `flotilla-runtime`: the controller machinery every Flotilla service runs on, in the shape
//! of kube-runtime, over the [`flotilla_store::Store`] instead of a Kubernetes API server.
//!
//! ```text
//!                       Arc<dyn Store>  (etcd or MemStore, from CommonArgs::connect_store)
//!                             │ range (paged, one revision) + watch(from rev+1)
//!   watcher::watcher ─────────┴─► Event::{Init, InitApply, InitDone, Apply, Delete}
//!     re-list on Compacted, back-off forever, never back in revision
//!        │
//!   reflector::reflect(Writer) ──► Cache<K> { get, list, by_index, revision, ready }
//!        │                              │ readers: reconcilers, gRPC handlers, /readyz
//!        │ mapper: Fn(&Event) -> Vec<key>
//!        ▼
//!   queue::WorkQueue<key>  de-dup, add_after (earliest wins), per-key back-off, metrics
//!        │ next()
//!        ▼                                 leader::LeaderElector ── Some(Leadership)/None
//!   controller::Controller × N workers ◄── runs only while leader
//!        reconcile(key, ctx) -> Result<Action, E>;  error_policy(&key, &E, &ctx) -> Action
//!        writes through leader::FencedStore: every Txn also compares
//!        create_revision(leader key) == fencing revision  (I8)
//!        batch::BatchWriter<R>: concurrent CAS writes group-committed with update_many
//!        (≤ 64 per Txn), each caller answered with its own result
//!
//!   bootstrap: args::CommonArgs (clap, env FLOTILLA_*), telemetry (tracing, Prometheus),
//!   server::GrpcServer (health + reflection v1/v1alpha + timeout + decode limit),
//!   admin::serve_admin (/metrics, /livez, /readyz), shutdown::Shutdown (SIGTERM/SIGINT)
//! ```
//!
//! Every part can be used and tested on its own: the reflector and the queue need no I/O,
//! and everything that touches the store works on `MemStore` under `tokio::time::pause()`.

#![forbid(unsafe_code)]
#![deny(missing_docs)]

#[macro_use]
mod macros;

pub mod admin;
pub mod args;
pub mod authz;
pub mod backoff;
pub mod batch;
pub mod bootstrap;
pub mod cas;
pub mod clock;
pub mod controller;
pub mod elected;
pub mod events;
pub mod filter;
pub mod leader;
pub mod queue;
pub mod reflector;
pub mod rpc;
pub mod security;
pub mod server;
pub mod service;
pub mod shards;
pub mod shutdown;
pub mod status;
pub mod telemetry;
#[cfg(feature = "test-util")]
pub mod testing;
pub mod tls;
pub mod trace;
pub mod watcher;

pub use crate::args::{CommonArgs, StoreKind};
#[doc(hidden)]
pub use mimalloc::MiMalloc;

/// Makes mimalloc the allocator of the binary that invokes it (every Flotilla binary does, in
/// its `main.rs`). glibc malloc's arena locks and consolidation cost about a third of the CPU
/// of a 10,000-binding failover with every service in one process, and about as much in each
/// service's own process (`flotilla bench failover --processes`); musl's, in the static
/// images, is slower still.
#[macro_export]
macro_rules! global_allocator {
    () => {
        #[global_allocator]
        static ALLOCATOR: $crate::MiMalloc = $crate::MiMalloc;
    };
}
pub use crate::authz::{Caller, Principal};
pub use crate::backoff::Backoff;
pub use crate::batch::{BatchConfig, BatchWriter};
pub use crate::bootstrap::{BootstrapError, Runtime};
pub use crate::clock::{Clock, ManualClock};
pub use crate::controller::{Action, Controller, Gate};
pub use crate::elected::{Elected, Following, Replica, Sharding, Writes};
pub use crate::events::{EventType, Recorder, Regarding, now};
pub use crate::filter::{Change, ChangeFilter, Digest};
pub use crate::leader::{ElectionConfig, Fence, FencedStore, LeaderElector};
pub use crate::queue::{QueueConfig, QueueItem, Reason, WorkQueue};
pub use crate::reflector::{Cache, CacheBarrier, Revisioned, Writer, reflect, reflect_watch};
pub use crate::security::{AuthLayer, AuthTokens, SecurityArgs};
pub use crate::server::{GrpcConfig, GrpcServer, Readiness};
pub use crate::shards::{Held, ShardConfig, ShardFencedStore, ShardKeyFn, ShardOwner};
pub use crate::shutdown::{EXIT_WITH_PARENT_ENV, Shutdown};
pub use crate::status::{IntoStatus, ServiceError};
pub use crate::watcher::{Event, Object, WatcherConfig, shared_watcher, watcher};

/// tonic, for [`unary_service!`]'s expansion in the services' crates.
#[doc(hidden)]
pub use tonic as __tonic;
