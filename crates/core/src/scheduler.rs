//! The scheduler rules (SC-1..SC-19) as pure functions.
//!
//! ```text
//!   binding/cluster events ──► trigger (SC-1/2/3) ──► needs_scheduling? ──► schedule()
//!
//!   schedule(ScheduleInput)                                   ScheduleOutcome / ScheduleError
//!     ├─ filter   (SC-5/6)   APIEnablement, TaintToleration, ClusterAffinity,
//!     │                      SpreadConstraint, ClusterEviction  ──► per-cluster verdicts
//!     ├─ score    (SC-7/8/9) locality score, allocatable/available replicas, ordering
//!     ├─ spread   (SC-10..13) by cluster (swap for capacity) or by region (DFS + group score)
//!     ├─ divide   (SC-14..17) Duplicated / StaticWeight / DynamicWeight / Aggregated,
//!     │                      Steady or Fresh, over
//!     │   webster (SC-15)    Sainte-Laguë with the UID tie-break
//!     └─ ClusterAffinities (SC-19): terms tried from the observed one upward
//! ```
//!
//! Flotilla's choices, where it differs from Karmada:
//! * A5: only the latest division (Webster + UID tie-break, Steady mode); the legacy
//!   division of SC-18 is not implemented.
//! * A11: failback is opt-in and lives outside these rules; without it a Divided workload is
//!   never moved back to a recovered cluster on its own (SC-3.8).
//! * The applied placement is a typed status field, not an annotation (SC-3.2).
//! * Webster compares priorities exactly instead of in `float64` (U-3).
//! * SC-20 (overflowAffinities) is not implemented: the domain types have no overflow
//!   terms, so every cluster has overflow order 0 in SC-9.

pub mod divide;
pub mod failback;
pub mod filter;
pub mod schedule;
pub mod score;
pub mod spread;
pub mod trigger;
pub mod webster;

#[cfg(test)]
mod tests;

pub use divide::{AssignmentMode, AssignmentStrategy, DivideError};
pub use filter::{FilterPlugin, FilterVerdict, UnfitReason};
pub use schedule::{
    ClusterDiagnostic, FitError, ScheduleError, ScheduleInput, ScheduleOptions, ScheduleOutcome,
    application_failover_clusters_after, forgets_failed_over, schedule,
};
pub use spread::SpreadError;
pub use trigger::{ScheduleDecision, ScheduleTrigger, needs_scheduling};
pub use webster::TieBreak;
