//! Taint-set arithmetic (CH-12) and the taints a cluster's Ready condition implies
//! (CH-10, CH-11, CH-15 / A2).

use std::time::Duration;

use crate::time::Time;
use crate::types::{
    ConditionStatus, TAINT_NOT_READY, TAINT_TERMINATING, TAINT_UNREACHABLE, Taint, TaintEffect,
};

/// A requested change of a cluster's taints, identified by (key, effect).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TaintChange {
    /// Taints that must be present.
    pub add: Vec<Taint>,
    /// Taints that must be absent.
    pub remove: Vec<Taint>,
}

impl TaintChange {
    /// Whether the change asks for nothing.
    pub fn is_empty(&self) -> bool {
        self.add.is_empty() && self.remove.is_empty()
    }

    /// Merge another change into this one.
    pub fn extend(&mut self, other: TaintChange) {
        self.add.extend(other.add);
        self.remove.extend(other.remove);
    }
}

fn controller_taint(key: &str, effect: TaintEffect) -> Taint {
    Taint::new(key, effect, None)
}

/// CH-12 `SetCurrentClusterTaints`: apply `change` to `existing`.
///
/// Identity is (key, effect). Returns `None` when nothing changes (no write needed);
/// otherwise the existing taints minus the removed ones (original order), with the added
/// ones appended, each stamped `time_added = now`.
pub fn set_cluster_taints(
    existing: &[Taint],
    change: &TaintChange,
    now: Time,
) -> Option<Vec<Taint>> {
    let to_add: Vec<&Taint> = change
        .add
        .iter()
        .filter(|t| !existing.iter().any(|e| e.same_identity(t)))
        .collect();
    let removing = |e: &Taint| change.remove.iter().any(|r| r.same_identity(e));
    let any_removed = existing.iter().any(removing);
    if to_add.is_empty() && !any_removed {
        return None;
    }
    let mut out: Vec<Taint> = existing.iter().filter(|e| !removing(e)).cloned().collect();
    for t in to_add {
        // a taint requested twice in one change is added once
        if !out.iter().any(|o| o.same_identity(t)) {
            out.push(Taint {
                time_added: Some(now),
                ..t.clone()
            });
        }
    }
    Some(out)
}

/// CH-11: the NoSchedule taints implied by the Ready condition (`None` = no condition).
pub fn no_schedule_taints_for(ready: Option<ConditionStatus>) -> TaintChange {
    let not_ready = controller_taint(TAINT_NOT_READY, TaintEffect::NoSchedule);
    let unreachable = controller_taint(TAINT_UNREACHABLE, TaintEffect::NoSchedule);
    match ready {
        Some(ConditionStatus::False) => TaintChange {
            add: vec![not_ready],
            remove: vec![unreachable],
        },
        Some(ConditionStatus::Unknown) => TaintChange {
            add: vec![unreachable],
            remove: vec![not_ready],
        },
        Some(ConditionStatus::True) => TaintChange {
            add: vec![],
            remove: vec![not_ready, unreachable],
        },
        None => TaintChange {
            add: vec![not_ready],
            remove: vec![],
        },
    }
}

/// Input of CH-10: what the health monitor knows about a cluster's Ready condition.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ReadyObservation {
    /// The Ready status as observed at the start of the pass.
    pub status: ConditionStatus,
    /// When the monitor first saw the current Ready value (CH-10.4).
    pub ready_transition_seen: Time,
    /// The last time the cluster was heard from (probe or heartbeat, CH-9).
    pub probe_timestamp: Time,
}

/// CH-10 (Flotilla A1, `--no-execute-taints=auto`): the NoExecute taints implied by a
/// Ready condition that has stayed bad for longer than `eviction_timeout`
/// (`--failover-eviction-timeout`, default 5m).
///
/// Karmada v1.14 removed this; Flotilla keeps it as the out-of-the-box default (A1).
pub fn no_execute_taints_for(
    obs: ReadyObservation,
    now: Time,
    eviction_timeout: Duration,
) -> TaintChange {
    let not_ready = controller_taint(TAINT_NOT_READY, TaintEffect::NoExecute);
    let unreachable = controller_taint(TAINT_UNREACHABLE, TaintEffect::NoExecute);
    match obs.status {
        ConditionStatus::False if now > obs.ready_transition_seen + eviction_timeout => {
            TaintChange {
                add: vec![not_ready],
                remove: vec![unreachable],
            }
        }
        ConditionStatus::Unknown if now > obs.probe_timestamp + eviction_timeout => TaintChange {
            add: vec![unreachable],
            remove: vec![not_ready],
        },
        // CH-10.3: a Ready cluster loses both NoExecute taints, regardless of the gate.
        ConditionStatus::True => TaintChange {
            add: vec![],
            remove: vec![not_ready, unreachable],
        },
        _ => TaintChange::default(),
    }
}

/// The time at which [`no_execute_taints_for`] will add a taint, if the condition stays as
/// it is; lets the service requeue exactly then instead of polling.
pub fn no_execute_deadline(obs: ReadyObservation, eviction_timeout: Duration) -> Option<Time> {
    match obs.status {
        ConditionStatus::False => Some(obs.ready_transition_seen + eviction_timeout),
        ConditionStatus::Unknown => Some(obs.probe_timestamp + eviction_timeout),
        ConditionStatus::True => None,
    }
}

/// CH-15 / A2: a cluster being deleted gets `cluster.karmada.io/terminating:NoExecute`
/// so that its workloads are evicted gracefully before it goes away.
pub fn terminating_taint_for(deleting: bool) -> TaintChange {
    let t = controller_taint(TAINT_TERMINATING, TaintEffect::NoExecute);
    if deleting {
        TaintChange {
            add: vec![t],
            remove: vec![],
        }
    } else {
        TaintChange::default()
    }
}

/// The NoExecute taints of a cluster (input of TM-2/TM-7).
pub fn no_execute_taints(taints: &[Taint]) -> Vec<Taint> {
    taints
        .iter()
        .filter(|t| t.effect == TaintEffect::NoExecute)
        .cloned()
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use ConditionStatus::{False, True, Unknown};
    use TaintEffect::{NoExecute, NoSchedule};

    use crate::test_support::taint as t;

    fn change(add: Vec<Taint>, remove: Vec<Taint>) -> TaintChange {
        TaintChange { add, remove }
    }

    #[test]
    fn ch_12_set_cluster_taints_table() {
        let now = Time::from_secs(50);
        let a = t("a", "", NoSchedule, Some(1));
        let b = t("b", "", NoExecute, Some(2));
        let cases: Vec<(&str, Vec<Taint>, TaintChange, Option<Vec<Taint>>)> = vec![
            (
                "nothing requested → unchanged",
                vec![a.clone()],
                TaintChange::default(),
                None,
            ),
            (
                "add present (value ignored) → unchanged",
                vec![a.clone()],
                change(vec![t("a", "other", NoSchedule, None)], vec![]),
                None,
            ),
            (
                "remove absent → unchanged",
                vec![a.clone()],
                change(vec![], vec![t("a", "", NoExecute, None)]),
                None,
            ),
            (
                "add appends with timeAdded = now",
                vec![a.clone()],
                change(vec![t("b", "", NoExecute, None)], vec![]),
                Some(vec![a.clone(), t("b", "", NoExecute, Some(50))]),
            ),
            (
                "remove keeps order of the rest",
                vec![a.clone(), b.clone(), t("c", "", NoSchedule, Some(3))],
                change(vec![], vec![t("b", "x", NoExecute, None)]),
                Some(vec![a.clone(), t("c", "", NoSchedule, Some(3))]),
            ),
            (
                "swap: remove one, add another",
                vec![a.clone()],
                change(vec![t("b", "", NoSchedule, None)], vec![a.clone()]),
                Some(vec![t("b", "", NoSchedule, Some(50))]),
            ),
            (
                "same taint requested twice is added once",
                vec![],
                change(vec![b.clone(), b.clone()], vec![]),
                Some(vec![t("b", "", NoExecute, Some(50))]),
            ),
            (
                "empty list stays empty",
                vec![],
                TaintChange::default(),
                None,
            ),
        ];
        for (name, existing, change, want) in cases {
            assert_eq!(set_cluster_taints(&existing, &change, now), want, "{name}");
        }
    }

    #[test]
    fn ch_11_no_schedule_taints_by_condition() {
        let nr = t(TAINT_NOT_READY, "", NoSchedule, None);
        let ur = t(TAINT_UNREACHABLE, "", NoSchedule, None);
        assert_eq!(
            no_schedule_taints_for(Some(False)),
            change(vec![nr.clone()], vec![ur.clone()])
        );
        assert_eq!(
            no_schedule_taints_for(Some(Unknown)),
            change(vec![ur.clone()], vec![nr.clone()])
        );
        assert_eq!(
            no_schedule_taints_for(Some(True)),
            change(vec![], vec![nr.clone(), ur])
        );
        assert_eq!(no_schedule_taints_for(None), change(vec![nr], vec![]));
    }

    #[test]
    fn ch_10_no_execute_taints_after_timeout() {
        let timeout = Duration::from_secs(300);
        let nr = t(TAINT_NOT_READY, "", NoExecute, None);
        let ur = t(TAINT_UNREACHABLE, "", NoExecute, None);
        let obs = |status, seen: i64, probe: i64| ReadyObservation {
            status,
            ready_transition_seen: Time::from_secs(seen),
            probe_timestamp: Time::from_secs(probe),
        };
        let nothing = TaintChange::default;
        let not_ready = || change(vec![nr.clone()], vec![ur.clone()]);
        let unreachable = || change(vec![ur.clone()], vec![nr.clone()]);
        let cleared = || change(vec![], vec![nr.clone(), ur.clone()]);
        // (case, (observation, now in seconds, taint change))
        let cases = [
            (
                "False before the timeout → nothing",
                (obs(False, 0, 0), 299, nothing()),
            ),
            (
                "False exactly at the timeout → nothing (strictly after)",
                (obs(False, 0, 0), 300, nothing()),
            ),
            (
                "False after the timeout → not-ready",
                (obs(False, 0, 0), 301, not_ready()),
            ),
            // Unknown is timed from the last probe, not the transition
            (
                "Unknown, recent probe → nothing",
                (obs(Unknown, 0, 100), 301, nothing()),
            ),
            (
                "Unknown after the timeout → unreachable",
                (obs(Unknown, 0, 0), 301, unreachable()),
            ),
            ("True → remove both", (obs(True, 0, 0), 1, cleared())),
        ];
        for (name, (o, now, want)) in cases {
            let got = no_execute_taints_for(o, Time::from_secs(now), timeout);
            assert_eq!(got, want, "{name}");
        }
        assert_eq!(
            no_execute_deadline(obs(False, 10, 0), timeout),
            Some(Time::from_secs(310))
        );
        assert_eq!(
            no_execute_deadline(obs(Unknown, 10, 20), timeout),
            Some(Time::from_secs(320))
        );
        assert_eq!(no_execute_deadline(obs(True, 10, 20), timeout), None);
    }

    #[test]
    fn ch_15_terminating_taint_on_deletion() {
        assert_eq!(
            terminating_taint_for(true).add,
            vec![t(TAINT_TERMINATING, "", NoExecute, None)]
        );
        assert!(terminating_taint_for(false).is_empty());
        let all = [t("a", "", NoSchedule, None), t("b", "", NoExecute, None)];
        assert_eq!(no_execute_taints(&all), vec![t("b", "", NoExecute, None)]);
    }
}
