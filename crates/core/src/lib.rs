//! `flotilla-core`: Flotilla's domain types and the failover rules as pure functions.
//!
//! ```text
//!   Cluster status ──► health (CH-*) ──► taints ──► eviction (TM-*) ──► tasks
//!                                                                        │
//!   Placement + clusters ──► scheduler (SC-*) ──► spec.clusters ◄────────┘
//!                                                      │
//!   tasks + aggregated status ──► graceful (GE-*) ──► kept / evicted tasks
//!   binding ──► work (WE-*) ──► kept clusters, Work names, aggregated status
//! ```
//!
//! Nothing here reads a clock, does I/O or awaits: every time-dependent rule takes `now`.
//! Rule ids (CH-, TM-, SC-, GE-, WE-, PD-, RM-, CR-, DEP-, SH-) refer to docs/semantics.md and name the tests.

// Table tests use tuples of inputs and expectations; that is their point.
#![cfg_attr(test, allow(clippy::type_complexity))]

pub mod affinity;
pub mod aggregate;
pub mod capacity;
pub mod defaults;
pub mod eviction;
pub mod graceful;
pub mod health;
pub mod interpret;
pub mod moves;
pub mod overrides;
pub mod preserve;
pub mod quantity;
pub mod resource;
pub mod scheduler;
pub mod shard;
pub mod taint;
pub mod taint_policy;
#[cfg(test)]
mod test_support;
#[cfg(any(test, feature = "test-util"))]
pub mod testing;
pub mod time;
pub mod toleration;
pub mod types;
pub mod validation;
pub mod work;

pub use time::Time;
