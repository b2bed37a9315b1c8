//! WE-10 (Flotilla): make before break for replica moves between clusters.
//!
//! When a new placement lowers one cluster's replicas and raises another's (a failback, a
//! weight or spread change, dynamic weighting after capacity moved), Karmada writes the new split at once: the shrinking cluster scales down while
//! the growing one's new replicas are still starting. Here the shrinking cluster's Work keeps
//! replicas it already runs (its *surplus*) for as long as the growing clusters still lack
//! Ready replicas that can come: the surplus kept is at most the Ready replicas still missing
//! on the growing side. As those become Ready (as their Works' status reports them), the
//! surplus is released step by step, so the Ready total never falls below the plan's, as a
//! Deployment's rolling update with `maxUnavailable: 0` does within one cluster.
//!
//! - The binding's spec keeps saying where replicas are meant to be; only the shrinking
//!   Works are rendered with more.
//! - A hold never grows a Work: it keeps at most what the Work already asks for, so it never
//!   asks a cluster for more than it runs.
//! - The growing side's missing replicas count only as far as they fit: a growing cluster's
//!   new request beyond its allocatable replicas (the capacity summary dynamic weighting
//!   uses) cannot become Ready soon, so the part of the shrink it would hold proceeds at
//!   once (WE-10.3).
//! - A timeout bounds the hold, counted from the placement's last scheduling (WE-10.4).
//! - Failover keeps its own rule: an evicted cluster is an eviction task, not a target, and
//!   its Work is held (or deleted) by graceful eviction; nothing here waits for it. Only
//!   clusters that stay targets are held here (WE-10.1): a cluster that is no target any
//!   more may be one whose eviction task just timed out, and holding it again would undo
//!   that timeout. A cluster that a schedule drops gets a graceful task from the scheduler
//!   in the same write instead (WE-10.7), so its departure is make before break too.
//!
//! Pure: the caller passes the clock reading and every observation.

use std::collections::BTreeMap;
use std::time::Duration;

use crate::Time;
use crate::types::TargetCluster;

/// One existing Work of the binding, as the hold sees it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WorkReplicas {
    /// Its cluster.
    pub cluster: String,
    /// The replicas its spec asks for now (`None`: the kind has no replicas).
    pub replicas: Option<i32>,
    /// The Ready replicas its status reports (0 when it reports none).
    pub ready: i32,
}

/// The inputs of one decision.
#[derive(Clone, Debug)]
pub struct MoveInput<'a> {
    /// The binding's targets (spec `clusters`): where replicas are meant to be.
    pub targets: &'a [TargetCluster],
    /// The binding's Works that are not being deleted, whose clusters are not held by an
    /// eviction task (those follow graceful eviction's rules).
    pub works: &'a [WorkReplicas],
    /// Each target cluster's allocatable replicas, where its status reports them.
    pub room: &'a BTreeMap<String, i64>,
    /// When the placement was last scheduled (the binding's `lastScheduledTime`).
    pub since: Option<Time>,
    /// How long a hold may last; zero turns holding off.
    pub timeout: Duration,
    /// The clock reading.
    pub now: Time,
}

/// What the hold decided.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct MoveHold {
    /// Cluster → the replicas its Work keeps (more than its target). Clusters not named here
    /// get their target.
    pub keep: BTreeMap<String, i32>,
    /// Growing clusters still missing Ready replicas: (cluster, ready, target).
    pub waiting_on: Vec<(String, i32, i32)>,
    /// Growing clusters whose new request does not fit: (cluster, replicas asked beyond the
    /// Work's current request, allocatable replicas).
    pub does_not_fit: Vec<(String, i32, i64)>,
    /// Since when the move has been held: the placement's last scheduling (`None` when
    /// nothing is held).
    pub since: Option<Time>,
    /// When the hold ends at the latest (`None` when nothing is held).
    pub deadline: Option<Time>,
    /// Whether a hold would apply but its time is up (WE-10.4).
    pub timed_out: bool,
}

impl MoveHold {
    /// Whether some Work keeps more than its target.
    pub fn holds(&self) -> bool {
        !self.keep.is_empty()
    }

    /// One line saying what is held and why, with the rule ids (for logs, status and the dry
    /// run); `None` when nothing is held or was cut short.
    pub fn describe(&self, targets: &[TargetCluster]) -> Option<String> {
        let target = |c: &str| {
            targets
                .iter()
                .find(|t| t.name == c)
                .map_or(0, |t| t.replicas)
        };
        let mut parts = Vec::new();
        if self.holds() {
            let kept: Vec<String> = self
                .keep
                .iter()
                .map(|(c, n)| format!("{c} keeps {n} (plan {})", target(c)))
                .collect();
            let waiting: Vec<String> = self
                .waiting_on
                .iter()
                .map(|(c, ready, want)| format!("{c} has {ready} of {want} Ready"))
                .collect();
            parts.push(format!(
                "WE-10.1: {} until {}",
                kept.join(", "),
                waiting.join(", ")
            ));
            match (self.since, self.deadline) {
                (Some(since), Some(deadline)) => parts.push(format!(
                    "WE-10.4: held since {since}, at the latest until {deadline}"
                )),
                (None, Some(deadline)) => {
                    parts.push(format!("WE-10.4: at the latest until {deadline}"));
                }
                _ => {}
            }
        }
        for (c, asked, room) in &self.does_not_fit {
            parts.push(format!(
                "WE-10.3: {c} is asked for {asked} more replicas but has room for {room}: the \
                 shrink that would wait for the rest proceeds now"
            ));
        }
        if self.timed_out {
            parts.push("WE-10.4: the move's hold timed out: the shrink proceeds".into());
        }
        (!parts.is_empty()).then(|| parts.join("; "))
    }
}

/// WE-10: which shrinking Works keep their surplus, and how much.
pub fn hold_shrinks(input: &MoveInput<'_>) -> MoveHold {
    let mut out = MoveHold::default();
    let target = |c: &str| {
        input
            .targets
            .iter()
            .find(|t| t.name == c)
            .map(|t| t.replicas.max(0))
    };
    // WE-10.1: a shrink is a Work asking for more than its cluster's target; a cluster that
    // is no target is not held. Works without replicas (a ConfigMap) never shrink.
    let mut surplus: BTreeMap<&str, (i32, i32)> = BTreeMap::new(); // cluster → (target, surplus)
    for w in input.works {
        let Some(asked) = w.replicas else { continue };
        let Some(planned) = target(&w.cluster) else {
            continue;
        };
        if asked > planned {
            surplus.insert(&w.cluster, (planned, asked - planned));
        }
    }
    if surplus.is_empty() {
        return out;
    }
    // WE-10.2: the Ready replicas the growing side still misses, as far as they fit
    // (WE-10.3).
    let mut missing = 0i64;
    for t in input.targets {
        if surplus.contains_key(t.name.as_str()) || t.replicas <= 0 {
            continue;
        }
        let work = input.works.iter().find(|w| w.cluster == t.name);
        let ready = work.map_or(0, |w| w.ready.clamp(0, t.replicas));
        let unready = t.replicas - ready;
        if unready == 0 {
            continue;
        }
        let asked_now = work.and_then(|w| w.replicas).unwrap_or(0).max(0);
        let new_ask = (t.replicas - asked_now).max(0);
        let unfit = match input.room.get(&t.name) {
            Some(&room) if i64::from(new_ask) > room.max(0) => {
                out.does_not_fit
                    .push((t.name.clone(), new_ask, room.max(0)));
                i64::from(new_ask) - room.max(0)
            }
            _ => 0,
        };
        let fits = (i64::from(unready) - unfit).max(0);
        if fits > 0 {
            out.waiting_on.push((t.name.clone(), ready, t.replicas));
            missing += fits;
        }
    }
    if missing == 0 {
        return out;
    }
    // WE-10.4: bounded by the timeout from the last scheduling.
    let Some(since) = input.since.filter(|_| !input.timeout.is_zero()) else {
        return out;
    };
    let deadline = since + input.timeout;
    if input.now >= deadline {
        out.timed_out = true;
        out.waiting_on.clear();
        return out;
    }
    // Keep as much surplus as is missing, cluster by cluster in name order (deterministic:
    // every replica of the controller and the dry run decide alike).
    let mut left = missing;
    for (cluster, (planned, extra)) in surplus {
        if left <= 0 {
            break;
        }
        let kept = i64::from(extra).min(left);
        left -= kept;
        let kept = i32::try_from(kept).unwrap_or(extra);
        out.keep.insert(cluster.to_owned(), planned + kept);
    }
    out.since = Some(since);
    out.deadline = Some(deadline);
    out
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    fn targets(t: &[(&str, i32)]) -> Vec<TargetCluster> {
        t.iter().map(|(c, n)| TargetCluster::new(*c, *n)).collect()
    }

    fn works(w: &[(&str, i32, i32)]) -> Vec<WorkReplicas> {
        w.iter()
            .map(|(c, asked, ready)| WorkReplicas {
                cluster: (*c).to_owned(),
                replicas: Some(*asked),
                ready: *ready,
            })
            .collect()
    }

    const T0: i64 = 1_000_000;

    fn decide(
        t: &[(&str, i32)],
        w: &[(&str, i32, i32)],
        room: &[(&str, i64)],
        elapsed: u64,
    ) -> MoveHold {
        let targets = targets(t);
        let works = works(w);
        let room: BTreeMap<String, i64> = room.iter().map(|(c, r)| ((*c).to_owned(), *r)).collect();
        hold_shrinks(&MoveInput {
            targets: &targets,
            works: &works,
            room: &room,
            since: Some(Time::from_millis(T0)),
            timeout: Duration::from_secs(600),
            now: Time::from_millis(T0) + Duration::from_secs(elapsed),
        })
    }

    fn keep(h: &MoveHold) -> Vec<(&str, i32)> {
        h.keep.iter().map(|(c, n)| (c.as_str(), *n)).collect()
    }

    #[test]
    fn we_10_1_failback_keeps_the_old_split_until_the_returning_cluster_is_ready() {
        // 6 replicas, failed back from 3:3 on member2/3 to 2:2:2.
        let t = [("member1", 2), ("member2", 2), ("member3", 2)];
        // member1's Work just created, nothing Ready: both shrinks held in full
        let h = decide(&t, &[("member2", 3, 3), ("member3", 3, 3)], &[], 1);
        assert_eq!(keep(&h), vec![("member2", 3), ("member3", 3)]);
        assert_eq!(h.waiting_on, vec![("member1".to_owned(), 0, 2)]);
        assert_eq!(h.since, Some(Time::from_millis(T0)));
        let line = h.describe(&targets(&t)).unwrap();
        assert!(
            line.contains(
                "member2 keeps 3 (plan 2), member3 keeps 3 (plan 2) until member1 has 0 of 2 Ready"
            ) && line.contains("held since"),
            "{line}"
        );
        assert_eq!(
            h.deadline,
            Some(Time::from_millis(T0) + Duration::from_secs(600))
        );
        // one Ready on member1: one replica of the surplus goes (name order: member3's)
        let h = decide(
            &t,
            &[("member1", 2, 1), ("member2", 3, 3), ("member3", 3, 3)],
            &[],
            2,
        );
        assert_eq!(keep(&h), vec![("member2", 3)]);
        // both Ready: nothing held
        let h = decide(
            &t,
            &[("member1", 2, 2), ("member2", 3, 3), ("member3", 2, 2)],
            &[],
            3,
        );
        assert!(!h.holds(), "{h:?}");
        assert!(h.describe(&targets(&t)).is_none());
    }

    #[test]
    fn we_10_1_table() {
        struct Case {
            name: &'static str,
            targets: &'static [(&'static str, i32)],
            works: &'static [(&'static str, i32, i32)],
            keep: &'static [(&'static str, i32)],
        }
        let cases = [
            Case {
                name: "weight change 4:2 -> 2:4, m2 not Ready yet: m1 keeps 4",
                targets: &[("m1", 2), ("m2", 4)],
                works: &[("m1", 4, 4), ("m2", 2, 2)],
                keep: &[("m1", 4)],
            },
            Case {
                name: "weight change, m2 has 3 of 4: m1 keeps 3",
                targets: &[("m1", 2), ("m2", 4)],
                works: &[("m1", 4, 4), ("m2", 4, 3)],
                keep: &[("m1", 3)],
            },
            Case {
                name: "scale down without growth: nothing held",
                targets: &[("m1", 1), ("m2", 1)],
                works: &[("m1", 2, 2), ("m2", 2, 2)],
                keep: &[],
            },
            Case {
                name: "scale up only: nothing shrinks",
                targets: &[("m1", 3), ("m2", 3)],
                works: &[("m1", 2, 2), ("m2", 2, 2)],
                keep: &[],
            },
            Case {
                name: "a cluster that is no target any more is not held (WE-3.1 deletes it)",
                targets: &[("m2", 3)],
                works: &[("m1", 3, 3)],
                keep: &[],
            },
            Case {
                name: "the surplus kept never exceeds what is missing",
                targets: &[("m1", 1), ("m3", 1)],
                works: &[("m1", 3, 3)],
                keep: &[("m1", 2)],
            },
        ];
        for c in cases {
            let h = decide(c.targets, c.works, &[], 10);
            assert_eq!(keep(&h), c.keep.to_vec(), "{}", c.name);
        }
    }

    #[test]
    fn we_10_1_works_without_replicas_never_hold() {
        let t = targets(&[("m1", 0), ("m2", 1)]);
        let w = vec![WorkReplicas {
            cluster: "m1".into(),
            replicas: None,
            ready: 0,
        }];
        let h = hold_shrinks(&MoveInput {
            targets: &t,
            works: &w,
            room: &BTreeMap::new(),
            since: Some(Time::from_millis(T0)),
            timeout: Duration::from_secs(600),
            now: Time::from_millis(T0),
        });
        assert!(!h.holds());
    }

    #[test]
    fn we_10_3_a_growth_that_does_not_fit_is_not_waited_for() {
        // m2 grows 2 -> 4 but has room for 1: only one replica of m1's shrink waits.
        let h = decide(
            &[("m1", 2), ("m2", 4)],
            &[("m1", 4, 4), ("m2", 2, 2)],
            &[("m2", 1)],
            1,
        );
        assert_eq!(keep(&h), vec![("m1", 3)]);
        assert_eq!(h.does_not_fit, vec![("m2".to_owned(), 2, 1)]);
        let line = h.describe(&targets(&[("m1", 2), ("m2", 4)])).unwrap();
        assert!(
            line.contains("WE-10.3") && line.contains("m1 keeps 3"),
            "{line}"
        );
        // no room at all: nothing waits
        let h = decide(
            &[("m1", 2), ("m2", 4)],
            &[("m1", 4, 4), ("m2", 2, 2)],
            &[("m2", 0)],
            1,
        );
        assert!(!h.holds());
        // once asked (the Work already requests 4), its own pods use the room: they count
        let h = decide(
            &[("m1", 2), ("m2", 4)],
            &[("m1", 4, 4), ("m2", 4, 2)],
            &[("m2", 0)],
            1,
        );
        assert_eq!(keep(&h), vec![("m1", 4)]);
    }

    #[test]
    fn we_10_4_the_hold_ends_at_the_timeout_or_when_turned_off() {
        let t = [("m1", 2), ("m2", 4)];
        let w = [("m1", 4, 4), ("m2", 4, 0)];
        let h = decide(&t, &w, &[], 599);
        assert!(h.holds());
        let h = decide(&t, &w, &[], 600);
        assert!(!h.holds() && h.timed_out, "{h:?}");
        assert!(h.describe(&targets(&t)).unwrap().contains("WE-10.4"));
        // zero timeout: holding is off
        let targets = targets(&t);
        let works = works(&w);
        let h = hold_shrinks(&MoveInput {
            targets: &targets,
            works: &works,
            room: &BTreeMap::new(),
            since: Some(Time::from_millis(T0)),
            timeout: Duration::ZERO,
            now: Time::from_millis(T0),
        });
        assert!(!h.holds() && !h.timed_out);
    }
}
