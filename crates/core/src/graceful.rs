//! Graceful eviction (GE-2..GE-6) and application failover (GE-8, A10).
//!
//! Flotilla deviates from Karmada in one deliberate way (A6): an **empty placement is never
//! healthy**. While a binding has no target cluster its tasks are kept — the old copy keeps
//! serving — and the task's grace period counts from when a replacement was placed
//! (`status.lastScheduledTime`) if that is later than the task's creation. Karmada removes
//! such tasks at once (GE-5.1, issue #7455).

use std::collections::BTreeMap;
use std::time::Duration;

use crate::time::Time;
use crate::types::{AggregatedStatusItem, GracefulEvictionTask, ResourceHealth, TargetCluster};

/// Which tasks can time out for the caller of [`task_verdict`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Timeouts {
    /// Every task: after its own grace period, or after this default
    /// (`--graceful-eviction-timeout`, 10m). Graceful eviction judges this way.
    Default(Duration),
    /// Only tasks with their own grace period: the caller does not hold the default, which
    /// is graceful eviction's flag (the work executor and the scheduler).
    OwnOnly,
}

/// Inputs of [`task_verdict`] and [`assess_tasks`] besides the tasks (GE-2.1): everything
/// a writer of `gracefulEvictionTasks` must know to decide whether a task may end.
#[derive(Clone, Copy, Debug)]
pub struct AssessOptions<'a> {
    /// The injected clock.
    pub now: Time,
    /// Which tasks time out, and after what.
    pub timeouts: Timeouts,
    /// The binding's `spec.clusters` as the caller's write leaves them.
    pub schedule_result: &'a [TargetCluster],
    /// The binding's `status.aggregatedStatus`.
    pub observed_status: &'a [AggregatedStatusItem],
    /// `status.schedulerObservedGeneration == metadata.generation`.
    pub has_scheduled: bool,
    /// `observed_status` was computed for the binding's current generation (Flotilla, I1a):
    /// health collected for an older placement never releases a task. Karmada has no such
    /// guard; its status can lag the placement by one update.
    pub observed_status_current: bool,
    /// `status.lastScheduledTime`: when the scheduler last placed replicas (A6).
    pub last_scheduled: Option<Time>,
    /// `status.unschedulableReplicas` (SC-4.6, A16): replicas the result could not hold. A
    /// replacement that is short of replicas never releases a task on health (GE-4.7).
    pub unschedulable_replicas: i32,
}

/// Why a task was removed or kept.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TaskVerdict {
    /// GE-3.1: the task had no creationTimestamp; stamped now, not assessed this round.
    Stamped,
    /// GE-4.1: suppressDeletion=true keeps it until a human flips it.
    Suppressed,
    /// GE-4.1: suppressDeletion=false removes it now.
    Released,
    /// GE-4.2: its grace period elapsed.
    TimedOut,
    /// GE-4.3: every target of the binding reports Healthy.
    ReplacementHealthy,
    /// A6: the binding has no target; the old copy keeps serving.
    NoReplacement,
    /// GE-4.4: waiting for the new targets to become healthy.
    Waiting,
    /// GE-4.7 (Flotilla, A16): the new targets hold only part of the replicas (the rest
    /// had no room); the old copy serves until the rest is placed or the task times out.
    ReplacementShort,
    /// GE-4.6 (A6, I4): the task's cluster is a target again (it recovered and the scheduler
    /// placed replicas on it); a cluster is never both a target and a task.
    Rescheduled,
}

impl TaskVerdict {
    /// Whether the task is removed.
    pub fn removes(self) -> bool {
        matches!(
            self,
            TaskVerdict::Released
                | TaskVerdict::TimedOut
                | TaskVerdict::ReplacementHealthy
                | TaskVerdict::Rescheduled
        )
    }
}

/// The result of [`assess_tasks`].
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Assessment {
    /// Tasks to keep (with creationTimestamp stamped where it was missing).
    pub kept: Vec<GracefulEvictionTask>,
    /// Clusters of the removed tasks, in task order.
    pub evicted: Vec<String>,
    /// The verdict for every input task, in order (for events and `Assess`).
    pub verdicts: Vec<(String, TaskVerdict)>,
}

impl Assessment {
    /// Whether the task list changed (a write is needed).
    pub fn changed(&self, before: &[GracefulEvictionTask]) -> bool {
        self.kept.as_slice() != before
    }
}

/// GE-4.3 (with A6): every cluster of a **non-empty** schedule result has a Healthy item.
pub fn placement_healthy(
    schedule_result: &[TargetCluster],
    observed: &[AggregatedStatusItem],
) -> bool {
    !schedule_result.is_empty()
        && schedule_result.iter().all(|target| {
            observed.iter().any(|item| {
                item.cluster_name == target.name && item.health == ResourceHealth::Healthy
            })
        })
}

fn task_timeout(task: &GracefulEvictionTask, timeouts: Timeouts) -> Option<Duration> {
    // GE-3.2: the task's own grace period, else the default — per task, no leaking.
    match (task.grace_period_seconds, timeouts) {
        (Some(secs), _) => Some(Duration::from_secs(u64::try_from(secs).unwrap_or(0))),
        (None, Timeouts::Default(default)) => Some(default),
        (None, Timeouts::OwnOnly) => None,
    }
}

/// The instant a task times out: its creation (or, A6, the time a replacement was placed
/// if that is later) plus its timeout; `None` when it does not time out for this caller.
fn task_deadline(
    task: &GracefulEvictionTask,
    created: Time,
    opts: &AssessOptions<'_>,
) -> Option<Time> {
    let start = match opts.last_scheduled {
        Some(placed) if placed > created => placed,
        _ => created,
    };
    task_timeout(task, opts.timeouts).map(|timeout| start + timeout)
}

/// May this eviction task end now? The one answer for every writer of
/// `gracefulEvictionTasks`: graceful eviction applies every removing verdict, the work
/// executor the [`TaskVerdict::ReplacementHealthy`] its own status write causes (WE-8.6), the
/// scheduler the [`TaskVerdict::Rescheduled`] its own placement causes (A6).
pub fn task_verdict(task: &GracefulEvictionTask, opts: &AssessOptions<'_>) -> TaskVerdict {
    if opts
        .schedule_result
        .iter()
        .any(|target| target.name == task.from_cluster)
    {
        return TaskVerdict::Rescheduled;
    }
    let Some(created) = task.creation_timestamp else {
        return TaskVerdict::Stamped;
    };
    match task.suppress_deletion {
        Some(true) => return TaskVerdict::Suppressed,
        Some(false) => return TaskVerdict::Released,
        None => {}
    }
    // A6: never remove the last serving copy while nothing replaces it.
    if opts.schedule_result.is_empty() {
        return TaskVerdict::NoReplacement;
    }
    if task_deadline(task, created, opts).is_some_and(|deadline| opts.now > deadline) {
        return TaskVerdict::TimedOut;
    }
    if opts.unschedulable_replicas > 0 {
        return TaskVerdict::ReplacementShort;
    }
    if opts.has_scheduled
        && opts.observed_status_current
        && placement_healthy(opts.schedule_result, opts.observed_status)
    {
        return TaskVerdict::ReplacementHealthy;
    }
    TaskVerdict::Waiting
}

/// GE-3 `assessEvictionTasks`: decide, task by task in order, which tasks to keep.
pub fn assess_tasks(tasks: &[GracefulEvictionTask], opts: &AssessOptions<'_>) -> Assessment {
    let mut out = Assessment::default();
    for task in tasks {
        let verdict = task_verdict(task, opts);
        out.verdicts.push((task.from_cluster.clone(), verdict));
        if verdict.removes() {
            out.evicted.push(task.from_cluster.clone());
        } else {
            let mut kept = task.clone();
            kept.creation_timestamp.get_or_insert(opts.now);
            out.kept.push(kept);
        }
    }
    out
}

/// GE-6 `nextRetry`: when to look again for timeouts; `None` = no timed requeue (no tasks,
/// or only suppressed ones). Healthy transitions arrive as binding updates (GE-6.5).
pub fn next_retry(tasks: &[GracefulEvictionTask], opts: &AssessOptions<'_>) -> Option<Duration> {
    tasks
        .iter()
        .filter(|t| t.suppress_deletion.is_none())
        .filter_map(|t| {
            let created = t.creation_timestamp.unwrap_or(opts.now);
            task_deadline(t, created, opts).map(|deadline| deadline.saturating_since(opts.now))
        })
        .min()
}

// ---------------------------------------------------------------------------------------
// GE-8 application failover
// ---------------------------------------------------------------------------------------

/// The result of [`assess_application_failover`].
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct AppFailoverDecision {
    /// The memory to keep: cluster → first time it was seen Unhealthy.
    pub memory: BTreeMap<String, Time>,
    /// Clusters to evict now.
    pub evict: Vec<String>,
    /// When to look again (the minimum remaining whole seconds), if anything is pending.
    pub requeue_after: Option<Duration>,
}

/// GE-8.2..8.5: track Unhealthy clusters of a binding and decide which to evict.
///
/// `memory` is the previous `{cluster → firstUnhealthyTime}`; `targets` the binding's
/// current targets; `task_clusters` clusters that already have a task (skipped). Healthy or
/// Unknown items and clusters no longer targeted are forgotten — so Unknown resets the timer
/// (issue #7431, accepted Karmada behaviour kept here).
pub fn assess_application_failover(
    memory: &BTreeMap<String, Time>,
    observed: &[AggregatedStatusItem],
    targets: &[TargetCluster],
    task_clusters: &[String],
    toleration_seconds: i64,
    now: Time,
) -> AppFailoverDecision {
    let toleration = Duration::from_secs(u64::try_from(toleration_seconds).unwrap_or(0));
    let mut out = AppFailoverDecision::default();
    for item in observed {
        let cluster = &item.cluster_name;
        if item.health != ResourceHealth::Unhealthy
            || task_clusters.contains(cluster)
            || !targets.iter().any(|t| &t.name == cluster)
        {
            continue;
        }
        match memory.get(cluster) {
            None => {
                out.memory.insert(cluster.clone(), now);
                out.requeue_after =
                    Some(out.requeue_after.map_or(toleration, |r| r.min(toleration)));
            }
            Some(&first) => {
                let deadline = first + toleration;
                if now > deadline {
                    out.evict.push(cluster.clone());
                } else {
                    out.memory.insert(cluster.clone(), first);
                    let left =
                        Duration::from_secs(crate::time::ceil_secs(deadline.saturating_since(now)));
                    out.requeue_after = Some(out.requeue_after.map_or(left, |r| r.min(left)));
                }
            }
        }
    }
    out
}

/// A status collector's last pass over a cluster (`statuscollections/<cluster>`, GE-8.7).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Collection {
    /// When the pass began asking the member.
    pub started: Time,
    /// When it had written every status it changed.
    pub finished: Time,
    /// How often the collector passes (`--status-sync-period`).
    pub period: Duration,
}

/// GE-8.7: how long after a pass graceful eviction trusts that the bindings show what it
/// wrote (the work executor aggregates a Work's status into its binding within
/// milliseconds of writing it; this is that step's allowance), at most half a period, so
/// that passes in quick succession still leave a moment when the last one has settled.
pub const COLLECTION_SETTLE: Duration = Duration::from_millis(500);
/// GE-8.7: how soon a postponed application failover looks again.
pub const COLLECTION_RETRY: Duration = Duration::from_secs(1);

impl Collection {
    /// Whether the collector is still watching at `now`: its last pass finished within two
    /// periods (and a second).
    pub fn current(&self, now: Time) -> bool {
        now <= self.finished + self.period * 2 + Duration::from_secs(1)
    }

    /// When the bindings show what this pass wrote: [`COLLECTION_SETTLE`] (at most half a
    /// period) after it finished.
    pub fn settled(&self) -> Time {
        self.finished + COLLECTION_SETTLE.min(self.period / 2)
    }
}

/// GE-8.7 (Flotilla): application failover acts only on status collected during the
/// unhealthy period. Applied to a [`assess_application_failover`] decision (whose `previous`
/// memory it was made from), with `collected` answering the last pass over a cluster:
/// - a tracked cluster whose collector is not current (no pass within two periods) is
///   forgotten: its period counts again from when observation resumes, as Unknown resets it
///   (GE-8.5) and as A13 has it for clusters;
/// - a due eviction waits for a pass that began after the toleration ran out and has
///   [`Collection::settled`], keeping its first-seen time meanwhile.
///
/// Returns the clusters held back, with why; the decision's requeue is brought forward to
/// [`COLLECTION_RETRY`] when any is.
pub fn confirm_by_collection(
    decision: &mut AppFailoverDecision,
    previous: &BTreeMap<String, Time>,
    collected: impl Fn(&str) -> Option<Collection>,
    toleration_seconds: i64,
    now: Time,
) -> Vec<(String, String)> {
    let toleration = Duration::from_secs(u64::try_from(toleration_seconds).unwrap_or(0));
    let mut held = Vec::new();
    let blind = |cluster: &str| {
        format!(
            "no status has been collected from cluster {cluster} lately (is the work executor \
             running?); the unhealthy period counts again from when it is"
        )
    };
    decision.memory.retain(|cluster, _| {
        let current = collected(cluster).is_some_and(|c| c.current(now));
        if !current {
            held.push((cluster.clone(), blind(cluster)));
        }
        current
    });
    let mut evict = Vec::new();
    for cluster in std::mem::take(&mut decision.evict) {
        let first = previous.get(&cluster).copied().unwrap_or(now);
        let deadline = first + toleration;
        match collected(&cluster) {
            Some(c) if !c.current(now) => held.push((cluster.clone(), blind(&cluster))),
            Some(c) if c.started > deadline && now >= c.settled() => {
                evict.push(cluster);
            }
            Some(c) if c.started > deadline => {
                // look again the moment it has settled
                let wait = c.settled().saturating_since(now);
                decision.requeue_after = Some(decision.requeue_after.map_or(wait, |r| r.min(wait)));
                held.push((
                    cluster.clone(),
                    format!(
                        "waiting for the last status collected from cluster {cluster} to settle"
                    ),
                ));
                decision.memory.insert(cluster, first);
            }
            found => {
                held.push((
                    cluster.clone(),
                    format!(
                        "waiting for status collected from cluster {cluster} after the \
                         toleration ran out{}",
                        if found.is_none() {
                            " (none collected yet)"
                        } else {
                            ""
                        }
                    ),
                ));
                if found.is_some() {
                    decision.memory.insert(cluster, first);
                }
            }
        }
    }
    decision.evict = evict;
    if !held.is_empty() {
        decision.requeue_after = Some(
            decision
                .requeue_after
                .map_or(COLLECTION_RETRY, |r| r.min(COLLECTION_RETRY)),
        );
    }
    held
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::types::PurgeMode;
    use proptest::prelude::*;

    #[test]
    fn ge_8_7_application_failover_acts_only_on_status_collected_during_the_period() {
        let targets = [TargetCluster::new("m1", 1), TargetCluster::new("m2", 1)];
        let t = Time::from_secs;
        let unhealthy = [item("m1", ResourceHealth::Unhealthy)];
        let first = BTreeMap::from([("m1".to_owned(), t(10))]);
        let pass = |started: i64, finished: i64| Collection {
            started: t(started),
            finished: t(finished),
            period: Duration::from_secs(2),
        };
        let run = |memory: &BTreeMap<String, Time>, now: i64, c: Option<Collection>| {
            let mut d = assess_application_failover(memory, &unhealthy, &targets, &[], 3, t(now));
            let held = confirm_by_collection(&mut d, memory, |_| c, 3, t(now));
            (d, held)
        };
        // due (first seen 10, toleration 3) with a pass that began after 13 and settled
        let (d, held) = run(&first, 15, Some(pass(14, 14)));
        assert_eq!(
            (d.evict.as_slice(), held.len()),
            (&["m1".to_owned()][..], 0)
        );
        // the last pass began before the deadline: wait, first-seen kept, look again soon
        let (d, held) = run(&first, 15, Some(pass(12, 13)));
        assert!(d.evict.is_empty());
        assert_eq!(d.memory.get("m1"), Some(&t(10)));
        assert_eq!(d.requeue_after, Some(COLLECTION_RETRY));
        assert!(held[0].1.contains("after the toleration"), "{held:?}");
        // a pass after the deadline but not settled yet: wait
        let (d, _) = run(&first, 15, Some(pass(14, 15)));
        assert!(d.evict.is_empty());
        // the collector stopped (last pass long ago): forgotten, not evicted
        let (d, held) = run(&first, 20, Some(pass(11, 11)));
        assert!(d.evict.is_empty() && d.memory.is_empty());
        assert!(held[0].1.contains("lately"), "{held:?}");
        // nothing ever collected: not evicted
        let (d, _) = run(&first, 15, None);
        assert!(d.evict.is_empty());
        // tracking while blind: forgotten, so the period restarts when observation resumes
        let (d, _) = run(&first, 12, Some(pass(4, 5)));
        assert!(d.memory.is_empty());
        let (d, _) = run(&BTreeMap::new(), 12, Some(pass(11, 11)));
        assert_eq!(d.memory.get("m1"), Some(&t(12)));
    }

    fn task(cluster: &str, created: Option<i64>) -> GracefulEvictionTask {
        GracefulEvictionTask {
            from_cluster: cluster.into(),
            purge_mode: PurgeMode::Gracefully,
            creation_timestamp: created.map(Time::from_secs),
            ..Default::default()
        }
    }

    fn item(cluster: &str, health: ResourceHealth) -> AggregatedStatusItem {
        AggregatedStatusItem::applied(cluster, health)
    }

    pub(super) fn opts<'a>(
        now: i64,
        result: &'a [TargetCluster],
        status: &'a [AggregatedStatusItem],
        scheduled: bool,
    ) -> AssessOptions<'a> {
        AssessOptions {
            now: Time::from_secs(now),
            timeouts: Timeouts::Default(Duration::from_secs(600)),
            schedule_result: result,
            observed_status: status,
            has_scheduled: scheduled,
            observed_status_current: true,
            last_scheduled: None,
            unschedulable_replicas: 0,
        }
    }

    #[test]
    fn ge_4_single_task_table() {
        let m2 = [TargetCluster::new("m2", 3)];
        let m1 = [TargetCluster::new("m1", 3)];
        let healthy = [item("m2", ResourceHealth::Healthy)];
        let unhealthy = [item("m2", ResourceHealth::Unhealthy)];
        let unknown = [item("m2", ResourceHealth::Unknown)];
        // A task stamped at time 0.
        let stamped = || task("m1", Some(0));
        let with = |f: fn(&mut GracefulEvictionTask)| {
            let mut t = stamped();
            f(&mut t);
            t
        };
        // Options for a binding scheduled onto m2, whose status is `status` at `now`.
        let at = |now, status| opts(now, &m2, status, true);
        use TaskVerdict::*;
        // (case, (task, options, verdict))
        let cases: Vec<(&str, (GracefulEvictionTask, AssessOptions<'_>, TaskVerdict))> = vec![
            (
                "3.1 unstamped is stamped, kept",
                (task("m1", None), at(10, &healthy), Stamped),
            ),
            (
                "4.1 suppress true keeps forever",
                (
                    with(|t| t.suppress_deletion = Some(true)),
                    at(10_000, &healthy),
                    Suppressed,
                ),
            ),
            (
                "4.1 suppress false removes",
                (
                    with(|t| t.suppress_deletion = Some(false)),
                    opts(1, &m2, &unhealthy, false),
                    Released,
                ),
            ),
            (
                "4.2 exactly at the timeout → kept",
                (stamped(), at(600, &unhealthy), Waiting),
            ),
            (
                "4.2 after the timeout → removed",
                (stamped(), at(601, &unhealthy), TimedOut),
            ),
            (
                "4.2 per-task grace period",
                (
                    with(|t| t.grace_period_seconds = Some(30)),
                    at(31, &unhealthy),
                    TimedOut,
                ),
            ),
            (
                "4.3 healthy and scheduled → removed",
                (stamped(), at(5, &healthy), ReplacementHealthy),
            ),
            (
                "4.3 healthy but not scheduled → kept",
                (stamped(), opts(5, &m2, &healthy, false), Waiting),
            ),
            (
                "I1a healthy status of an older generation → kept",
                (
                    stamped(),
                    AssessOptions {
                        observed_status_current: false,
                        ..at(5, &healthy)
                    },
                    Waiting,
                ),
            ),
            (
                "4.7 healthy but short of replicas → kept",
                (
                    stamped(),
                    AssessOptions {
                        unschedulable_replicas: 3,
                        ..at(5, &healthy)
                    },
                    ReplacementShort,
                ),
            ),
            (
                "4.7 short of replicas still times out",
                (
                    stamped(),
                    AssessOptions {
                        unschedulable_replicas: 3,
                        ..at(601, &healthy)
                    },
                    TimedOut,
                ),
            ),
            (
                "5.3 Unknown blocks removal",
                (stamped(), at(5, &unknown), Waiting),
            ),
            (
                "missing status item blocks removal",
                (stamped(), opts(5, &m2, &[], true), Waiting),
            ),
            (
                "A6 empty placement is never healthy",
                (stamped(), opts(5, &[], &[], true), NoReplacement),
            ),
            (
                "A6 empty placement keeps even past the timeout",
                (stamped(), opts(10_000, &[], &[], true), NoReplacement),
            ),
            (
                "A6 I4 its cluster is a target again",
                (stamped(), opts(5, &m1, &[], true), Rescheduled),
            ),
            (
                "A6 I4 a target again even while suppressed",
                (
                    with(|t| t.suppress_deletion = Some(true)),
                    opts(5, &m1, &[], true),
                    Rescheduled,
                ),
            ),
            (
                "timeouts own only: no default, past it → kept",
                (
                    stamped(),
                    AssessOptions {
                        timeouts: Timeouts::OwnOnly,
                        ..at(10_000, &unhealthy)
                    },
                    Waiting,
                ),
            ),
            (
                "timeouts own only: the task's own grace period still ends it",
                (
                    with(|t| t.grace_period_seconds = Some(30)),
                    AssessOptions {
                        timeouts: Timeouts::OwnOnly,
                        ..at(31, &unhealthy)
                    },
                    TimedOut,
                ),
            ),
        ];
        for (name, (t, o, want)) in cases {
            let a = assess_tasks(std::slice::from_ref(&t), &o);
            assert_eq!(a.verdicts, vec![("m1".to_string(), want)], "{name}");
            assert_eq!(a.evicted.is_empty(), !want.removes(), "{name}");
        }
    }

    #[test]
    fn ge_3_per_task_timeout_does_not_leak() {
        // v1.6–v1.16 leaked one task's grace period into the next (GE-3.2).
        let mut short = task("a", Some(0));
        short.grace_period_seconds = Some(10);
        let default = task("b", Some(0));
        let m2 = [TargetCluster::new("m2", 1)];
        let a = assess_tasks(&[short, default], &opts(11, &m2, &[], true));
        assert_eq!(a.evicted, vec!["a".to_string()]);
        assert_eq!(a.kept.len(), 1);
        assert_eq!(a.kept[0].from_cluster, "b");
    }

    #[test]
    fn ge_3_stamps_missing_creation_and_reports_change() {
        let tasks = [task("a", None), task("b", Some(1))];
        let m2 = [TargetCluster::new("m2", 1)];
        let a = assess_tasks(&tasks, &opts(7, &m2, &[], true));
        assert_eq!(a.kept[0].creation_timestamp, Some(Time::from_secs(7)));
        assert!(a.changed(&tasks));
        let again = assess_tasks(&a.kept, &opts(8, &m2, &[], true));
        assert!(!again.changed(&a.kept));
    }

    #[test]
    fn a6_grace_counts_from_replacement_placement() {
        let m2 = [TargetCluster::new("m2", 1)];
        let mut o = opts(700, &m2, &[], true);
        o.last_scheduled = Some(Time::from_secs(500));
        // created at 0, default 600 s; replacement placed at 500 → deadline 1100
        assert_eq!(
            assess_tasks(&[task("m1", Some(0))], &o).verdicts[0].1,
            TaskVerdict::Waiting
        );
        o.now = Time::from_secs(1101);
        assert_eq!(
            assess_tasks(&[task("m1", Some(0))], &o).verdicts[0].1,
            TaskVerdict::TimedOut
        );
    }

    #[test]
    fn ge_6_next_retry_table() {
        let m2 = [TargetCluster::new("m2", 1)];
        let o = opts(100, &m2, &[], true);
        assert_eq!(next_retry(&[], &o), None, "6.1 no tasks");
        let mut suppressed = task("s", Some(0));
        suppressed.suppress_deletion = Some(true);
        assert_eq!(
            next_retry(std::slice::from_ref(&suppressed), &o),
            None,
            "6.3 only suppressed"
        );
        let mut short = task("a", Some(50));
        short.grace_period_seconds = Some(60);
        let tasks = [suppressed, task("b", Some(0)), short];
        assert_eq!(
            next_retry(&tasks, &o),
            Some(Duration::from_secs(10)),
            "6.2 min remaining"
        );
        let overdue = [task("c", Some(0))];
        assert_eq!(
            next_retry(&overdue, &opts(1000, &m2, &[], true)),
            Some(Duration::ZERO)
        );
    }

    #[test]
    fn ge_8_application_failover_table() {
        let targets = [TargetCluster::new("m1", 1), TargetCluster::new("m2", 1)];
        let t = Time::from_secs;
        let unhealthy = [item("m1", ResourceHealth::Unhealthy)];
        // 8.4 first sight: remember, requeue after tolerationSeconds
        let d =
            assess_application_failover(&BTreeMap::new(), &unhealthy, &targets, &[], 300, t(10));
        assert_eq!(d.memory.get("m1"), Some(&t(10)));
        assert_eq!(
            (d.evict.len(), d.requeue_after),
            (0, Some(Duration::from_secs(300)))
        );
        // still within: requeue after the remaining whole seconds
        let d2 = assess_application_failover(
            &d.memory,
            &unhealthy,
            &targets,
            &[],
            300,
            Time::from_millis(109_500),
        );
        assert_eq!(
            (d2.evict.len(), d2.requeue_after),
            (0, Some(Duration::from_secs(201)))
        );
        // exactly at first + toleration: not yet
        let d3 = assess_application_failover(&d.memory, &unhealthy, &targets, &[], 300, t(310));
        assert!(d3.evict.is_empty());
        // after: evict and forget
        let d4 = assess_application_failover(&d.memory, &unhealthy, &targets, &[], 300, t(311));
        assert_eq!(d4.evict, vec!["m1".to_string()]);
        assert!(d4.memory.is_empty());
        // 8.5 Unknown resets the timer (#7431)
        let unknown = [item("m1", ResourceHealth::Unknown)];
        assert!(
            assess_application_failover(&d.memory, &unknown, &targets, &[], 300, t(200))
                .memory
                .is_empty()
        );
        // already in a task, or not targeted → ignored
        assert!(
            assess_application_failover(
                &d.memory,
                &unhealthy,
                &targets,
                &["m1".into()],
                300,
                t(311)
            )
            .evict
            .is_empty()
        );
        assert!(
            assess_application_failover(&d.memory, &unhealthy, &targets[1..], &[], 300, t(311))
                .evict
                .is_empty()
        );
        // tolerationSeconds 0: first sight only records; next look evicts
        let d5 = assess_application_failover(&BTreeMap::new(), &unhealthy, &targets, &[], 0, t(10));
        assert!(d5.evict.is_empty());
        assert_eq!(
            assess_application_failover(
                &d5.memory,
                &unhealthy,
                &targets,
                &[],
                0,
                Time::from_millis(10_001)
            )
            .evict
            .len(),
            1
        );
    }

    fn arb_task() -> impl Strategy<Value = GracefulEvictionTask> {
        (
            "[a-d]",
            prop::option::of(0i64..1000),
            prop::option::of(prop::bool::ANY),
            prop::option::of(1i64..900),
        )
            .prop_map(|(c, created, suppress, grace)| {
                let mut t = task(&c, created);
                t.suppress_deletion = suppress;
                if suppress.is_none() {
                    t.grace_period_seconds = grace;
                }
                t
            })
    }

    proptest! {
        /// A6 / I1: with an empty placement, no task is ever removed except by an explicit
        /// suppressDeletion=false from a human.
        #[test]
        fn a6_empty_placement_never_removes_a_task(
            tasks in prop::collection::vec(arb_task(), 0..6),
            now in 0i64..100_000,
            scheduled in prop::bool::ANY,
        ) {
            let status = [item("m9", ResourceHealth::Healthy)];
            let a = assess_tasks(&tasks, &opts(now, &[], &status, scheduled));
            for (cluster, verdict) in &a.verdicts {
                if verdict.removes() {
                    prop_assert_eq!(*verdict, TaskVerdict::Released, "{} removed", cluster);
                }
            }
            prop_assert_eq!(a.kept.len() + a.evicted.len(), tasks.len());
        }
    }
}

#[cfg(test)]
mod edge_case_tests {
    //! GE-5 edge cases and GE-7 purge modes, as Flotilla decides them.
    use super::*;
    use crate::types::PurgeMode;
    use crate::work::kept_clusters;

    fn task(cluster: &str, mode: PurgeMode) -> GracefulEvictionTask {
        GracefulEvictionTask {
            from_cluster: cluster.into(),
            purge_mode: mode,
            creation_timestamp: Some(Time::from_secs(0)),
            ..Default::default()
        }
    }

    /// [`super::tests::opts`] for a binding that has been scheduled.
    fn opts<'a>(
        now: i64,
        result: &'a [TargetCluster],
        status: &'a [AggregatedStatusItem],
    ) -> AssessOptions<'a> {
        super::tests::opts(now, result, status, true)
    }

    #[test]
    fn ge_5_1_empty_result_is_not_vacuously_healthy() {
        // Karmada removes the task at once here (#7455); Flotilla keeps it (A6).
        assert!(!placement_healthy(&[], &[]));
        let a = assess_tasks(&[task("m1", PurgeMode::Gracefully)], &opts(1, &[], &[]));
        assert_eq!(a.verdicts[0].1, TaskVerdict::NoReplacement);
        assert!(a.evicted.is_empty());
    }

    #[test]
    fn ge_5_2_no_timeout_while_nothing_replaces_the_old_copy() {
        // After a FitError Karmada lets the task expire at its timeout; A6 keeps it.
        let a = assess_tasks(
            &[task("m1", PurgeMode::Gracefully)],
            &opts(100_000, &[], &[]),
        );
        assert_eq!(a.verdicts[0].1, TaskVerdict::NoReplacement);
    }

    #[test]
    fn ge_5_3_unknown_health_blocks_until_timeout() {
        let result = [TargetCluster::new("m2", 1)];
        let unknown = [AggregatedStatusItem {
            cluster_name: "m2".into(),
            health: ResourceHealth::Unknown,
            ..Default::default()
        }];
        for (now, want) in [(600, TaskVerdict::Waiting), (601, TaskVerdict::TimedOut)] {
            let tasks = [task("m1", PurgeMode::Gracefully)];
            let a = assess_tasks(&tasks, &opts(now, &result, &unknown));
            assert_eq!(a.verdicts[0].1, want, "at {now}s");
        }
    }

    #[test]
    fn ge_7_purge_modes_decide_which_old_works_stay() {
        // GE-7.1/7.2: Gracefully and Never keep the old Work while the task exists;
        // GE-7.3: Directly drops it at once (WE-2).
        for (mode, kept) in [
            (PurgeMode::Gracefully, true),
            (PurgeMode::Never, true),
            (PurgeMode::Directly, false),
        ] {
            let spec = crate::types::ResourceBindingSpec {
                clusters: vec![TargetCluster::new("m2", 3)],
                graceful_eviction_tasks: vec![task("m1", mode)],
                ..Default::default()
            };
            assert_eq!(kept_clusters(&spec).contains("m1"), kept, "{mode:?}");
        }
        // GE-7.2: Never is suppressDeletion=true: kept past any timeout
        let mut never = task("m1", PurgeMode::Never);
        never.suppress_deletion = Some(true);
        let result = [TargetCluster::new("m2", 1)];
        assert_eq!(
            assess_tasks(&[never], &opts(1_000_000, &result, &[])).verdicts[0].1,
            TaskVerdict::Suppressed
        );
    }
}
