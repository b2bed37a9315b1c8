//! Cluster health: probe interpretation (CH-2, CH-3), flap damping (CH-4, A9), condition
//! bookkeeping (CH-5.5) and the health monitor for clusters that report by heartbeat (CH-9).

use std::time::Duration;

use crate::time::Time;
use crate::types::{CONDITION_READY, Condition, ConditionStatus, SyncMode};

/// What one HTTP probe answered.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ProbeResponse {
    /// The server answered with this HTTP status.
    Status(u16),
    /// No answer (connection refused, timeout, TLS error…).
    Error,
}

/// The outcome of probing a member (CH-2).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ProbeOutcome {
    /// The member answered at all.
    pub online: bool,
    /// It answered 200.
    pub healthy: bool,
}

/// CH-2.2: whether the `/healthz` fallback must be tried after this `/readyz` answer.
pub fn needs_healthz_fallback(readyz: ProbeResponse) -> bool {
    readyz == ProbeResponse::Status(404)
}

/// CH-2: interpret `/readyz` (and `/healthz` when readyz answered 404).
pub fn interpret_probe(readyz: ProbeResponse, healthz: Option<ProbeResponse>) -> ProbeOutcome {
    let answer = match (readyz, healthz) {
        (r, Some(h)) if needs_healthz_fallback(r) => h,
        (r, _) => r,
    };
    match answer {
        ProbeResponse::Error => ProbeOutcome {
            online: false,
            healthy: false,
        },
        ProbeResponse::Status(200) => ProbeOutcome {
            online: true,
            healthy: true,
        },
        ProbeResponse::Status(_) => ProbeOutcome {
            online: true,
            healthy: false,
        },
    }
}

/// CH-3: the Ready condition a probe outcome implies (without a transition time).
pub fn observed_ready_condition(outcome: ProbeOutcome) -> Condition {
    let (status, reason, message) = match outcome {
        ProbeOutcome { online: false, .. } => (
            ConditionStatus::False,
            "ClusterNotReachable",
            "cluster is not reachable",
        ),
        ProbeOutcome {
            online: true,
            healthy: false,
        } => (
            ConditionStatus::False,
            "ClusterNotReady",
            "cluster is reachable but health endpoint responded without ok",
        ),
        ProbeOutcome {
            online: true,
            healthy: true,
        } => (
            ConditionStatus::True,
            "ClusterReady",
            "cluster is healthy and ready to accept workloads",
        ),
    };
    Condition {
        type_: CONDITION_READY.into(),
        status,
        reason: reason.into(),
        message: message.into(),
        last_transition_time: None,
    }
}

/// The per-cluster memory of CH-4 (kept by cluster-health, lost on restart).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ThresholdState {
    /// The last observed Ready status.
    pub observed: ConditionStatus,
    /// When the observation changed to `observed`; `None` for the first sighting.
    pub since: Option<Time>,
}

/// Thresholds of CH-4 (`--cluster-success-threshold`, `--cluster-failure-threshold`, 30s each).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Thresholds {
    /// How long a cluster must look healthy before it is marked Ready again.
    pub success: Duration,
    /// How long a cluster must look unhealthy before it is marked not Ready.
    pub failure: Duration,
}

impl Default for Thresholds {
    fn default() -> Self {
        Thresholds {
            success: Duration::from_secs(30),
            failure: Duration::from_secs(30),
        }
    }
}

/// CH-4: damp True ↔ not-True flips of the Ready condition.
///
/// `state` is the memory from the previous call (`None` on first sight), `current` the
/// Ready condition stored on the Cluster. Returns the new memory and the condition to
/// write. At exactly `since + threshold` the observation wins; a single contrary
/// observation restarts the window; False ↔ Unknown passes straight through. A9: the
/// same damping applies to probes and heartbeats alike.
pub fn adjust_ready_condition(
    state: Option<ThresholdState>,
    current: Option<&Condition>,
    observed: Condition,
    now: Time,
    thresholds: Thresholds,
) -> (ThresholdState, Condition) {
    let Some(mut state) = state else {
        // CH-4.1: first sight, no damping.
        return (
            ThresholdState {
                observed: observed.status,
                since: None,
            },
            observed,
        );
    };
    let Some(current) = current else {
        // CH-4.2: the object has no Ready condition yet; memory untouched.
        return (state, observed);
    };
    if state.observed != observed.status {
        state = ThresholdState {
            observed: observed.status,
            since: Some(now),
        };
    }
    let threshold = if observed.status == ConditionStatus::True {
        thresholds.success
    } else {
        thresholds.failure
    };
    let flips =
        (observed.status == ConditionStatus::True) != (current.status == ConditionStatus::True);
    let window_open = match state.since {
        Some(since) => now < since + threshold,
        None => false,
    };
    if flips && window_open {
        (state, current.clone())
    } else {
        (state, observed)
    }
}

/// The time at which [`adjust_ready_condition`] would let a pending flip through; lets the
/// service requeue exactly then.
pub fn threshold_deadline(
    state: ThresholdState,
    current: Option<&Condition>,
    thresholds: Thresholds,
) -> Option<Time> {
    let current = current?;
    let since = state.since?;
    let flips =
        (state.observed == ConditionStatus::True) != (current.status == ConditionStatus::True);
    if !flips {
        return None;
    }
    let threshold = if state.observed == ConditionStatus::True {
        thresholds.success
    } else {
        thresholds.failure
    };
    Some(since + threshold)
}

/// CH-5.5: put `new` into `conditions`, keeping `last_transition_time` unless the status
/// changed. Returns whether anything changed (so the caller writes only on change).
pub fn set_condition(conditions: &mut Vec<Condition>, mut new: Condition, now: Time) -> bool {
    match conditions.iter_mut().find(|c| c.type_ == new.type_) {
        Some(existing) => {
            new.last_transition_time = if existing.status == new.status {
                existing.last_transition_time
            } else {
                Some(now)
            };
            if *existing == new {
                return false;
            }
            *existing = new;
            true
        }
        None => {
            new.last_transition_time = Some(now);
            conditions.push(new);
            true
        }
    }
}

/// Grace periods of the health monitor (CH-9.1).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MonitorGrace {
    /// `--cluster-startup-grace-period` (60s): allowed before a first status is posted.
    pub startup: Duration,
    /// `--cluster-monitor-grace-period` (40s): allowed between heartbeats.
    pub monitor: Duration,
}

impl Default for MonitorGrace {
    fn default() -> Self {
        MonitorGrace {
            startup: Duration::from_secs(60),
            monitor: Duration::from_secs(40),
        }
    }
}

/// The health monitor's memory of one cluster (CH-9).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MonitorEntry {
    /// Last time the cluster was heard from.
    pub probe_timestamp: Time,
    /// The Ready condition as last seen on the object.
    pub saved_ready: Option<Condition>,
    /// The last heartbeat (lease renew) time seen.
    pub last_heartbeat: Option<Time>,
}

/// The monitor's verdict for one cluster.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MonitorOutcome {
    /// The memory to keep.
    pub entry: MonitorEntry,
    /// A Ready condition to write, when it must change to Unknown (CH-9.5).
    pub write: Option<Condition>,
}

/// CH-9: mark Pull clusters whose heartbeats stopped as `Ready=Unknown`.
///
/// `created` is the Cluster's creationTimestamp, `heartbeat` the last heartbeat received
/// (the lease renew time in Karmada). Push clusters stop after the bookkeeping (CH-9.3):
/// their probes write False themselves.
///
/// `observing_since` (A13, Flotilla's rule) is when the monitor last began to observe: its
/// start, or the end of an outage of its store. The grace period never counts from before it,
/// so the control plane's own blindness is never charged to a member (deliberate difference
/// from CH-9, which only has the start-up case through `probe = now` of a new entry).
#[allow(clippy::too_many_arguments)]
pub fn monitor_cluster(
    entry: Option<MonitorEntry>,
    sync_mode: SyncMode,
    ready: Option<&Condition>,
    created: Time,
    heartbeat: Option<Time>,
    now: Time,
    grace: MonitorGrace,
    observing_since: Time,
) -> MonitorOutcome {
    let grace_period = if ready.is_some() {
        grace.monitor
    } else {
        grace.startup
    };
    let mut entry = match entry {
        // CH-9.1 / 9.2: a new entry; with no Ready condition it starts at creation.
        None if ready.is_none() => MonitorEntry {
            probe_timestamp: created,
            saved_ready: None,
            last_heartbeat: None,
        },
        None => MonitorEntry {
            probe_timestamp: now,
            saved_ready: ready.cloned(),
            last_heartbeat: None,
        },
        Some(e) if e.saved_ready.as_ref() != ready => MonitorEntry {
            probe_timestamp: now,
            saved_ready: ready.cloned(),
            last_heartbeat: e.last_heartbeat,
        },
        Some(e) => e,
    };
    // A13: silence from before the monitor could observe (its own start, or the end of an
    // outage of its store) is not the member's: the grace period counts from then at the
    // earliest.
    if entry.probe_timestamp < observing_since {
        entry.probe_timestamp = observing_since;
    }
    if sync_mode == SyncMode::Push {
        return MonitorOutcome { entry, write: None };
    }
    // CH-9.4: a newer heartbeat refreshes the probe time, to when it was received (Flotilla;
    // Karmada: when the monitor noticed it, which its 5 s pass keeps close). The monitor
    // does not look at every heartbeat (CH-8), so "when noticed" could be a grace period
    // late, and the cluster would go Unknown that much later. Never before the monitor could
    // observe (A13).
    if let Some(hb) = heartbeat
        && entry.last_heartbeat.is_none_or(|saved| hb > saved)
    {
        entry.last_heartbeat = Some(hb);
        entry.probe_timestamp = hb.min(now).max(observing_since);
    }
    if now <= entry.probe_timestamp + grace_period {
        return MonitorOutcome { entry, write: None };
    }
    // CH-9.5
    let write = match ready {
        None => Some(Condition {
            type_: CONDITION_READY.into(),
            status: ConditionStatus::Unknown,
            reason: "ClusterStatusNeverUpdated".into(),
            message: "Cluster status controller never posted cluster status.".into(),
            last_transition_time: Some(now),
        }),
        Some(c) if c.status != ConditionStatus::Unknown => Some(Condition {
            type_: CONDITION_READY.into(),
            status: ConditionStatus::Unknown,
            reason: "ClusterStatusUnknown".into(),
            message: "Cluster status controller stopped posting cluster status.".into(),
            last_transition_time: Some(now),
        }),
        Some(_) => None,
    };
    MonitorOutcome { entry, write }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ConditionStatus::{False, True, Unknown};

    fn cond(status: ConditionStatus) -> Condition {
        Condition {
            type_: CONDITION_READY.into(),
            status,
            ..Default::default()
        }
    }

    #[test]
    fn ch_2_probe_interpretation_table() {
        use ProbeResponse::{Error, Status};
        let cases = [
            ("readyz 200", Status(200), None, true, true),
            ("readyz 500", Status(500), None, true, false),
            ("readyz error", Error, None, false, false),
            (
                "readyz 404 → healthz 200",
                Status(404),
                Some(Status(200)),
                true,
                true,
            ),
            (
                "readyz 404 → healthz error",
                Status(404),
                Some(Error),
                false,
                false,
            ),
            (
                "readyz 404 without fallback answer",
                Status(404),
                None,
                true,
                false,
            ),
            (
                "healthz ignored unless readyz is 404",
                Status(500),
                Some(Status(200)),
                true,
                false,
            ),
        ];
        for (name, r, h, online, healthy) in cases {
            assert_eq!(
                interpret_probe(r, h),
                ProbeOutcome { online, healthy },
                "{name}"
            );
        }
        assert!(needs_healthz_fallback(Status(404)));
        assert!(!needs_healthz_fallback(Status(500)));
    }

    #[test]
    fn ch_3_observed_condition_reasons() {
        let c = observed_ready_condition(ProbeOutcome {
            online: false,
            healthy: false,
        });
        assert_eq!(
            (c.status, c.reason.as_str()),
            (False, "ClusterNotReachable")
        );
        let c = observed_ready_condition(ProbeOutcome {
            online: true,
            healthy: false,
        });
        assert_eq!((c.status, c.reason.as_str()), (False, "ClusterNotReady"));
        let c = observed_ready_condition(ProbeOutcome {
            online: true,
            healthy: true,
        });
        assert_eq!((c.status, c.reason.as_str()), (True, "ClusterReady"));
    }

    #[test]
    fn ch_4_threshold_table() {
        let th = Thresholds::default();
        let t = Time::from_secs;
        let st = |observed, since: Option<i64>| ThresholdState {
            observed,
            since: since.map(Time::from_secs),
        };
        // (name, (state, current, observed, now), (want state, want status))
        type Input = (
            Option<ThresholdState>,
            Option<ConditionStatus>,
            ConditionStatus,
            i64,
        );
        let cases: [(&str, Input, (ThresholdState, ConditionStatus)); 5] = [
            (
                "4.1 first sight returns observed",
                (None, Some(True), False, 100),
                (st(False, None), False),
            ),
            (
                "4.2 no Ready on object returns observed, memory untouched",
                (Some(st(True, None)), None, False, 100),
                (st(True, None), False),
            ),
            (
                "4.6 False→Unknown is not damped",
                (Some(st(False, Some(100))), Some(False), Unknown, 101),
                (st(Unknown, Some(101)), Unknown),
            ),
            (
                "same status passes through",
                (Some(st(True, Some(5))), Some(True), True, 6),
                (st(True, Some(5)), True),
            ),
            (
                "first sighting memory (since = None) never damps",
                (Some(st(False, None)), Some(True), False, 1),
                (st(False, None), False),
            ),
        ];
        for (name, (state, current, observed, now), (want_state, want)) in cases {
            let current = current.map(cond);
            let (s, c) =
                adjust_ready_condition(state, current.as_ref(), cond(observed), t(now), th);
            assert_eq!((s, c.status), (want_state, want), "{name}");
        }
        // Each step feeds its state to the next: (case, now, want status). A failure seen at
        // 100 by a Ready cluster restarts the window and is damped until the threshold.
        let mut state = Some(st(True, None));
        for (name, now, want) in [
            ("4.3 change restarts the window and damps", 100, True),
            ("4.5 inside the window keeps current", 129, True),
            (
                "4.6 exactly at the threshold the observation wins",
                130,
                False,
            ),
        ] {
            let (s, c) = adjust_ready_condition(state, Some(&cond(True)), cond(False), t(now), th);
            assert_eq!((&s, c.status), (&st(False, Some(100)), want), "{name}");
            state = Some(s);
        }
        // A recovery seen at 200 after a failure at 0 is damped by the success threshold.
        let mut state = Some(st(False, Some(0)));
        for (name, now, want) in [
            ("recovery is damped by the success threshold", 200, False),
            ("recovery after the success threshold", 230, True),
        ] {
            let (s, c) = adjust_ready_condition(state, Some(&cond(False)), cond(True), t(now), th);
            assert_eq!((&s, c.status), (&st(True, Some(200)), want), "{name}");
            state = Some(s);
        }
    }

    #[test]
    fn ch_4_single_contrary_observation_restarts_window() {
        // A9 / I9: a blip shorter than the threshold produces no flip.
        let th = Thresholds::default();
        let current = cond(True);
        let mut state = Some(ThresholdState {
            observed: True,
            since: None,
        });
        for (now, obs) in [(0, False), (20, True), (25, False), (50, False)] {
            let (s, c) =
                adjust_ready_condition(state, Some(&current), cond(obs), Time::from_secs(now), th);
            assert_eq!(c.status, True, "damped at {now}");
            state = Some(s);
        }
        let (s, c) =
            adjust_ready_condition(state, Some(&current), cond(False), Time::from_secs(55), th);
        assert_eq!(c.status, False);
        assert_eq!(
            threshold_deadline(s, Some(&current), th),
            Some(Time::from_secs(55))
        );
    }

    #[test]
    fn ch_5_5_set_condition_keeps_transition_time() {
        let mut conds = vec![];
        assert!(set_condition(&mut conds, cond(True), Time::from_secs(1)));
        assert_eq!(conds[0].last_transition_time, Some(Time::from_secs(1)));
        // same status, same everything → no write
        assert!(!set_condition(&mut conds, cond(True), Time::from_secs(2)));
        // same status, new message → write, transition time kept
        let mut c = cond(True);
        c.message = "m".into();
        assert!(set_condition(&mut conds, c, Time::from_secs(3)));
        assert_eq!(conds[0].last_transition_time, Some(Time::from_secs(1)));
        // status change → transition time moves
        assert!(set_condition(&mut conds, cond(False), Time::from_secs(4)));
        assert_eq!(conds[0].last_transition_time, Some(Time::from_secs(4)));
        assert_eq!(conds.len(), 1);
    }

    #[test]
    fn ch_9_monitor_table() {
        let g = MonitorGrace::default();
        let t = Time::from_secs;
        let ready = cond(True);
        // monitor_cluster for a cluster created at 0, with the default grace, observed since
        // the epoch; the heartbeat and now in seconds.
        let monitor = |entry, mode, ready, heartbeat: Option<i64>, now| {
            monitor_cluster(
                entry,
                mode,
                ready,
                t(0),
                heartbeat.map(t),
                t(now),
                g,
                Time::EPOCH,
            )
        };
        // An entry that saw `ready` at 0, with no heartbeat.
        let saved = |ready: &Condition| MonitorEntry {
            probe_timestamp: t(0),
            saved_ready: Some(ready.clone()),
            last_heartbeat: None,
        };
        // Pull cluster, no Ready condition: startup grace from creation.
        let out = monitor(None, SyncMode::Pull, None, None, 60);
        assert_eq!(
            out.write, None,
            "exactly at creation + startup grace: not yet"
        );
        let out = monitor(Some(out.entry), SyncMode::Pull, None, None, 61);
        assert_eq!(
            out.write.as_ref().map(|c| (c.status, c.reason.as_str())),
            Some((Unknown, "ClusterStatusNeverUpdated"))
        );

        // Pull cluster with Ready=True, heartbeats stop.
        let out = monitor(None, SyncMode::Pull, Some(&ready), Some(0), 0);
        assert_eq!(out.write, None);
        let out2 = monitor(
            Some(out.entry.clone()),
            SyncMode::Pull,
            Some(&ready),
            Some(0),
            40,
        );
        assert_eq!(out2.write, None, "at probe + grace: not yet");
        let out3 = monitor(Some(out2.entry), SyncMode::Pull, Some(&ready), Some(0), 41);
        assert_eq!(
            out3.write.as_ref().map(|c| (c.status, c.reason.as_str())),
            Some((Unknown, "ClusterStatusUnknown"))
        );
        assert_eq!(
            out3.write.as_ref().and_then(|c| c.last_transition_time),
            Some(t(41))
        );

        // CH-9.4: a newer heartbeat refreshes the probe time, to when it was received.
        let out4 = monitor(
            Some(out.entry.clone()),
            SyncMode::Pull,
            Some(&ready),
            Some(30),
            35,
        );
        assert_eq!(out4.entry.probe_timestamp, t(30));
        let out5 = monitor(Some(out4.entry), SyncMode::Pull, Some(&ready), Some(30), 70);
        assert_eq!(out5.write, None, "at the heartbeat + grace: not yet");
        // Noticed late (the monitor does not look at every heartbeat, CH-8): the grace still
        // counts from the heartbeat, so silence since then is Unknown on time.
        let late = monitor(Some(out.entry), SyncMode::Pull, Some(&ready), Some(30), 65);
        assert_eq!(late.entry.probe_timestamp, t(30));
        let late = monitor(Some(late.entry), SyncMode::Pull, Some(&ready), Some(30), 71);
        assert_eq!(
            late.write.as_ref().map(|c| c.status),
            Some(Unknown),
            "40 s after the last heartbeat, not 40 s after it was noticed"
        );

        // Already Unknown → no write.
        let unknown = cond(Unknown);
        let e = saved(&unknown);
        assert_eq!(
            monitor(Some(e), SyncMode::Pull, Some(&unknown), None, 100).write,
            None
        );

        // Push clusters are never marked Unknown by the monitor (CH-9.3).
        let e = saved(&ready);
        assert_eq!(
            monitor(Some(e), SyncMode::Push, Some(&ready), None, 1000).write,
            None
        );

        // A changed condition resets the entry (probe = now).
        let e = saved(&cond(False));
        let out = monitor(Some(e), SyncMode::Pull, Some(&ready), None, 100);
        assert_eq!((out.entry.probe_timestamp, out.write), (t(100), None));
    }
}

#[cfg(test)]
mod more_tests {
    use super::*;
    use crate::taint::no_schedule_taints_for;

    #[test]
    fn ch_6_status_collection_failure_goes_through_the_failure_threshold() {
        // v1.18+ (issue #7408): a client-build failure is an ordinary False observation, damped
        // by CH-4 like any other.
        let failed = Condition {
            type_: CONDITION_READY.into(),
            status: ConditionStatus::False,
            reason: "StatusCollectionFailed".into(),
            ..Default::default()
        };
        let current = Condition {
            type_: CONDITION_READY.into(),
            status: ConditionStatus::True,
            ..Default::default()
        };
        let state = Some(ThresholdState {
            observed: ConditionStatus::True,
            since: None,
        });
        let (state, c) = adjust_ready_condition(
            state,
            Some(&current),
            failed.clone(),
            Time::from_secs(10),
            Thresholds::default(),
        );
        assert_eq!(c.status, ConditionStatus::True, "damped");
        let (_, c) = adjust_ready_condition(
            Some(state),
            Some(&current),
            failed,
            Time::from_secs(40),
            Thresholds::default(),
        );
        assert_eq!(
            (c.status, c.reason.as_str()),
            (ConditionStatus::False, "StatusCollectionFailed")
        );
    }

    #[test]
    fn ch_13_no_schedule_taints_do_not_depend_on_the_failover_mode() {
        // CH-13 / issue #5375: NoSchedule taints follow the condition whatever the
        // NoExecute mode (A1 auto or policy); the rule takes no mode at all.
        let change = no_schedule_taints_for(Some(ConditionStatus::False));
        assert_eq!(change.add.len(), 1);
        assert_eq!(change.add[0].effect, crate::types::TaintEffect::NoSchedule);
    }

    #[test]
    fn a13_grace_counts_from_when_observation_resumed() {
        let g = MonitorGrace::default(); // monitor 40s
        let t = Time::from_secs;
        let ready = Condition {
            type_: CONDITION_READY.into(),
            status: ConditionStatus::True,
            ..Default::default()
        };
        let entry = |probe: i64| MonitorEntry {
            probe_timestamp: t(probe),
            saved_ready: Some(ready.clone()),
            last_heartbeat: Some(t(probe)),
        };
        // (last heard, observing since, now) → Unknown written?
        let cases = [
            // no outage: 41s of silence is past the 40s grace
            (0, 0, 41, true),
            // the store was down until 30s: the silence before counts from 30s
            (0, 30, 41, false),
            (0, 30, 70, false),
            (0, 30, 71, true),
            // an outage that ended before the last heartbeat changes nothing
            (20, 10, 61, true),
        ];
        for (heard, since, now, unknown) in cases {
            let out = monitor_cluster(
                Some(entry(heard)),
                SyncMode::Pull,
                Some(&ready),
                t(0),
                Some(t(heard)),
                t(now),
                g,
                t(since),
            );
            assert_eq!(
                out.write.is_some(),
                unknown,
                "heard {heard}, observing since {since}, now {now}"
            );
            assert!(out.entry.probe_timestamp >= t(since));
        }
    }
}
