//! Builders shared by the unit tests of several modules (test-only).

use crate::Time;
use crate::types::{Taint, TaintEffect, TargetCluster};

/// A taint with a value, added at `added` seconds (if any).
pub(crate) fn taint(key: &str, value: &str, effect: TaintEffect, added: Option<i64>) -> Taint {
    Taint {
        value: value.into(),
        ..Taint::new(key, effect, added.map(Time::from_secs))
    }
}

/// Target clusters from `(name, replicas)` pairs.
pub(crate) fn tc(list: &[(&str, i32)]) -> Vec<TargetCluster> {
    list.iter()
        .map(|(n, r)| TargetCluster::new(*n, *r))
        .collect()
}
