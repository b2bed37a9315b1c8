//! A11 (Flotilla): failback. Karmada never moves replicas back to a cluster they were evicted
//! from (SC-3.8, #1189, #7441). A policy may opt in with
//! `failover.cluster.failback.stabilizationWindowSeconds`:
//!
//! ```text
//!   taint-manager evicts member1 ──► scheduler refills elsewhere, remembers member1 in
//!                                    status.failbackClusters (failback_clusters_after)
//!   member1 Ready=True and untainted since T ──► at T + window: Failback trigger (failback)
//!   ──► the placement's preference is recomputed (Fresh); a cluster the result leaves is not
//!       dropped but given a graceful task (failback_tasks), so its copy serves until the new
//!       one is healthy — the same path as an eviction
//! ```
//!
//! Without the field, nothing is remembered and nothing moves back.

use crate::time::Time;
use crate::types::{
    Cluster, ConditionStatus, GracefulEvictionTask, PRODUCER_TAINT_MANAGER, PurgeMode,
    ResourceBinding, TargetCluster,
};

/// Producer of a failback task, and of a departure task (WE-10.7).
pub const PRODUCER_FAILBACK: &str = "Scheduler";
/// Reason of a failback task.
pub const REASON_FAILBACK: &str = "Failback";

/// Where a binding stands on failback.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Failback {
    /// Nothing to fail back to (not configured, or no evicted cluster has recovered).
    None,
    /// An evicted cluster has recovered; its window ends at `due`.
    Pending {
        /// The clusters waiting, with the end of each one's window.
        clusters: Vec<(String, Time)>,
    },
    /// These clusters have been Ready and untainted for the whole window: recompute now.
    Due(Vec<String>),
}

/// The policy's stabilisation window, if failback is on.
pub fn window_seconds(binding: &ResourceBinding) -> Option<i64> {
    binding
        .spec
        .failover
        .as_ref()?
        .cluster
        .as_ref()?
        .failback_stabilization_window_seconds
}

/// When `cluster` became Ready and untainted, if it is both now (and not being deleted). The
/// Ready condition's transition time is the start: a taint removed later than that is
/// covered only in that the cluster must be untainted when the window ends.
fn recovered_since(cluster: &Cluster) -> Option<Time> {
    if cluster.meta.deletion_timestamp.is_some() || !cluster.spec.taints.is_empty() {
        return None;
    }
    let ready = cluster.ready()?;
    (ready.status == ConditionStatus::True).then_some(ready.last_transition_time?)
}

/// A11: whether `binding` should fail back now, later, or not at all. A remembered cluster
/// counts once it is Ready=True and untainted, no longer a target, and has no eviction task.
pub fn failback(binding: &ResourceBinding, clusters: &[Cluster], now: Time) -> Failback {
    let Some(window) = window_seconds(binding) else {
        return Failback::None;
    };
    let mut due = Vec::new();
    let mut pending = Vec::new();
    for name in &binding.status.failback_clusters {
        let busy = binding.spec.clusters.iter().any(|t| &t.name == name)
            || binding
                .spec
                .graceful_eviction_tasks
                .iter()
                .any(|t| &t.from_cluster == name);
        if busy {
            continue;
        }
        let Some(since) = clusters
            .iter()
            .find(|c| c.name() == name)
            .and_then(recovered_since)
        else {
            continue;
        };
        let at = since.plus_secs(window);
        if at <= now {
            due.push(name.clone());
        } else {
            pending.push((name.clone(), at));
        }
    }
    if !due.is_empty() {
        Failback::Due(due)
    } else if !pending.is_empty() {
        Failback::Pending { clusters: pending }
    } else {
        Failback::None
    }
}

/// A11: the clusters to remember after a schedule of `binding` that results in `targets`:
/// those remembered before and those the taint manager has evicted it from (its tasks),
/// minus the new targets and minus `failed_back` (the clusters a Failback schedule just
/// considered). Empty when failback is off. Sorted.
pub fn failback_clusters_after(
    binding: &ResourceBinding,
    targets: &[TargetCluster],
    failed_back: &[String],
) -> Vec<String> {
    if window_seconds(binding).is_none() {
        return Vec::new();
    }
    remembered_evictions(
        &binding.status.failback_clusters,
        binding,
        PRODUCER_TAINT_MANAGER,
        targets,
        failed_back,
    )
}

/// A list of clusters a binding was evicted from, after a schedule that results in
/// `targets`: `remembered` and the clusters of the binding's tasks made by `producer`, minus
/// the targets and minus `excluded`. Sorted, without repeats. What A11 (failback) and SC-6.7
/// (application failover) keep.
pub(crate) fn remembered_evictions(
    remembered: &[String],
    binding: &ResourceBinding,
    producer: &str,
    targets: &[TargetCluster],
    excluded: &[String],
) -> Vec<String> {
    let mut out: Vec<String> = remembered
        .iter()
        .cloned()
        .chain(
            binding
                .spec
                .graceful_eviction_tasks
                .iter()
                .filter(|t| t.producer == producer)
                .map(|t| t.from_cluster.clone()),
        )
        .filter(|c| !targets.iter().any(|t| &t.name == c) && !excluded.contains(c))
        .collect();
    out.sort();
    out.dedup();
    out
}

/// Reason of a departure task (WE-10.7): the cluster left the placement's result.
pub const REASON_PLACEMENT_CHANGED: &str = "PlacementChanged";

/// A11: the graceful tasks a Failback schedule adds for the clusters its result leaves, so
/// that their copies serve until the new targets are healthy (graceful eviction's rules then
/// end them, GE-4). A cluster that only loses some replicas keeps its target entry and needs
/// none.
pub fn failback_tasks(
    previous: &[TargetCluster],
    targets: &[TargetCluster],
    failed_back: &[String],
) -> Vec<GracefulEvictionTask> {
    departure_tasks(
        previous,
        targets,
        REASON_FAILBACK,
        &format!(
            "failback to {} after its stabilisation window (A11)",
            failed_back.join(", ")
        ),
    )
}

/// WE-10.7 (Flotilla): the graceful tasks a schedule adds for the clusters it drops from
/// the result while they still run replicas: a cluster leaving the affinity, one a
/// rebalance or a spread change gives nothing, one a Duplicated workload's new placement
/// leaves. Each keeps its copy until the new targets are healthy or graceful eviction's
/// timeout ends the task (GE-4), so a departure is make before break like a shrink
/// (WE-10.1). `trigger` decides:
/// - a failback uses its own reason (A11, [`failback_tasks`]);
/// - a target cluster being deleted or gone (SC-3.6) adds none: that cluster's copy goes
///   with it, and a schedule caused by it moves nothing else;
/// - every other trigger adds one per dropped cluster that had replicas. A cluster with no
///   replicas (a non-workload) serves nothing that a later copy would replace.
pub fn departure_tasks_for(
    trigger: Option<&crate::scheduler::trigger::ScheduleTrigger>,
    previous: &[TargetCluster],
    targets: &[TargetCluster],
) -> Vec<GracefulEvictionTask> {
    use crate::scheduler::trigger::ScheduleTrigger;
    match trigger {
        Some(ScheduleTrigger::Failback { clusters }) => failback_tasks(previous, targets, clusters),
        Some(
            ScheduleTrigger::TargetClusterDeleting { .. }
            | ScheduleTrigger::TargetClusterMissing { .. },
        ) => Vec::new(),
        _ => {
            let serving: Vec<TargetCluster> = previous
                .iter()
                .filter(|p| p.replicas > 0)
                .cloned()
                .collect();
            departure_tasks(
                &serving,
                targets,
                REASON_PLACEMENT_CHANGED,
                "the new placement leaves this cluster; its copy serves until the new \
                 targets are healthy (WE-10.7)",
            )
        }
    }
}

/// A Gracefully-purged task, produced by the scheduler, for each cluster of `previous` that
/// `targets` leaves.
fn departure_tasks(
    previous: &[TargetCluster],
    targets: &[TargetCluster],
    reason: &str,
    message: &str,
) -> Vec<GracefulEvictionTask> {
    let before: Vec<String> = previous.iter().map(|t| t.name.clone()).collect();
    previous
        .iter()
        .filter(|p| !targets.iter().any(|t| t.name == p.name))
        .map(|p| GracefulEvictionTask {
            from_cluster: p.name.clone(),
            purge_mode: PurgeMode::Gracefully,
            replicas: Some(p.replicas),
            reason: reason.to_owned(),
            message: message.to_owned(),
            producer: PRODUCER_FAILBACK.to_owned(),
            clusters_before_failover: before.clone(),
            ..Default::default()
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::types::{
        ClusterFailoverBehavior, Condition, FailoverBehavior, ObjectMeta, Taint, TaintEffect,
    };

    fn cluster(name: &str, ready_since: Option<i64>, tainted: bool) -> Cluster {
        let mut c = Cluster {
            meta: ObjectMeta {
                name: name.to_owned(),
                ..Default::default()
            },
            ..Default::default()
        };
        if let Some(t) = ready_since {
            c.status.conditions.push(Condition {
                type_: "Ready".into(),
                status: ConditionStatus::True,
                reason: "ClusterReady".into(),
                message: String::new(),
                last_transition_time: Some(Time::from_secs(t)),
            });
        }
        if tainted {
            c.spec.taints.push(Taint {
                key: "cluster.karmada.io/not-ready".into(),
                value: String::new(),
                effect: TaintEffect::NoSchedule,
                time_added: None,
                trace_context: String::new(),
            });
        }
        c
    }

    fn binding(
        window: Option<i64>,
        remembered: &[&str],
        targets: &[(&str, i32)],
    ) -> ResourceBinding {
        let mut b = ResourceBinding::default();
        b.spec.failover = Some(FailoverBehavior {
            cluster: Some(ClusterFailoverBehavior {
                failback_stabilization_window_seconds: window,
                ..Default::default()
            }),
            ..Default::default()
        });
        b.status.failback_clusters = remembered.iter().map(|s| (*s).to_owned()).collect();
        b.spec.clusters = targets
            .iter()
            .map(|(n, r)| TargetCluster::new(*n, *r))
            .collect();
        b
    }

    #[test]
    fn a11_failback_after_the_window_only() {
        let now = Time::from_secs(1000);
        let names = |v: &[&str]| v.iter().map(|s| (*s).to_owned()).collect::<Vec<_>>();
        for (what, b, clusters, want) in [
            (
                "off: nothing moves back (SC-3.8)",
                binding(None, &["member1"], &[("member2", 3)]),
                vec![cluster("member1", Some(0), false)],
                Failback::None,
            ),
            (
                "recovered for the whole window",
                binding(Some(600), &["member1"], &[("member2", 3)]),
                vec![cluster("member1", Some(400), false)],
                Failback::Due(names(&["member1"])),
            ),
            (
                "recovered, window not over",
                binding(Some(600), &["member1"], &[("member2", 3)]),
                vec![cluster("member1", Some(500), false)],
                Failback::Pending {
                    clusters: vec![("member1".into(), Time::from_secs(1100))],
                },
            ),
            (
                "still tainted",
                binding(Some(600), &["member1"], &[("member2", 3)]),
                vec![cluster("member1", Some(0), true)],
                Failback::None,
            ),
            (
                "not Ready",
                binding(Some(600), &["member1"], &[("member2", 3)]),
                vec![cluster("member1", None, false)],
                Failback::None,
            ),
            (
                "already a target again",
                binding(Some(600), &["member1"], &[("member1", 1), ("member2", 2)]),
                vec![cluster("member1", Some(0), false)],
                Failback::None,
            ),
            (
                "gone from the snapshot",
                binding(Some(600), &["member1"], &[("member2", 3)]),
                vec![],
                Failback::None,
            ),
            (
                "nothing remembered",
                binding(Some(600), &[], &[("member2", 3)]),
                vec![cluster("member1", Some(0), false)],
                Failback::None,
            ),
        ] {
            assert_eq!(failback(&b, &clusters, now), want, "{what}");
        }
    }

    #[test]
    fn a11_evicted_clusters_are_remembered_only_with_failback_on() {
        let mut b = binding(Some(60), &["member3"], &[("member2", 3)]);
        b.spec.graceful_eviction_tasks = vec![
            GracefulEvictionTask {
                from_cluster: "member1".into(),
                producer: PRODUCER_TAINT_MANAGER.into(),
                ..Default::default()
            },
            GracefulEvictionTask {
                from_cluster: "member4".into(),
                producer: "resource-binding-application-failover-controller".into(),
                ..Default::default()
            },
        ];
        let targets = [TargetCluster::new("member2", 3)];
        assert_eq!(
            failback_clusters_after(&b, &targets, &[]),
            ["member1", "member3"],
            "taint-manager evictions only; application failover is not failed back"
        );
        assert_eq!(
            failback_clusters_after(&b, &targets, &["member3".to_owned()]),
            ["member1"],
            "a cluster a Failback schedule considered is forgotten"
        );
        let back = [TargetCluster::new("member1", 3)];
        assert_eq!(failback_clusters_after(&b, &back, &[]), ["member3"]);
        b.spec.failover = None;
        assert!(failback_clusters_after(&b, &targets, &[]).is_empty());
    }

    #[test]
    fn a11_a_cluster_the_failback_leaves_gets_a_graceful_task() {
        let previous = [
            TargetCluster::new("member2", 3),
            TargetCluster::new("member3", 1),
        ];
        let targets = [
            TargetCluster::new("member1", 3),
            TargetCluster::new("member3", 1),
        ];
        let tasks = failback_tasks(&previous, &targets, &["member1".to_owned()]);
        assert_eq!(tasks.len(), 1, "member3 stays a target: no task");
        let t = &tasks[0];
        assert_eq!(t.from_cluster, "member2");
        assert_eq!(t.purge_mode, PurgeMode::Gracefully);
        assert_eq!(t.replicas, Some(3));
        assert_eq!(
            (t.producer.as_str(), t.reason.as_str()),
            ("Scheduler", "Failback")
        );
        assert_eq!(t.clusters_before_failover, ["member2", "member3"]);
    }

    #[test]
    fn we_10_7_a_schedule_that_drops_a_serving_cluster_gives_it_a_task() {
        use crate::scheduler::trigger::ScheduleTrigger;
        let previous = [
            TargetCluster::new("member1", 2),
            TargetCluster::new("member2", 2),
            TargetCluster::new("member3", 0),
        ];
        let targets = [TargetCluster::new("member1", 4)];
        let deleting = ScheduleTrigger::TargetClusterDeleting {
            cluster: "member2".to_owned(),
        };
        let failback = ScheduleTrigger::Failback {
            clusters: vec!["member1".to_owned()],
        };
        // (trigger, the tasks' (cluster, reason, replicas))
        let table: [(Option<&ScheduleTrigger>, &[(&str, &str, Option<i32>)]); 6] = [
            (
                Some(&ScheduleTrigger::PlacementChanged),
                &[("member2", REASON_PLACEMENT_CHANGED, Some(2))],
            ),
            (
                Some(&ScheduleTrigger::RescheduleRequested),
                &[("member2", REASON_PLACEMENT_CHANGED, Some(2))],
            ),
            (
                Some(&ScheduleTrigger::NonWorkloadOrDuplicated),
                &[("member2", REASON_PLACEMENT_CHANGED, Some(2))],
            ),
            // the failback's own reason, and every dropped cluster (A11 as before)
            (
                Some(&failback),
                &[
                    ("member2", REASON_FAILBACK, Some(2)),
                    ("member3", REASON_FAILBACK, Some(0)),
                ],
            ),
            // a deleting target's schedule moves nothing else: no task
            (Some(&deleting), &[]),
            (None, &[("member2", REASON_PLACEMENT_CHANGED, Some(2))]),
        ];
        for (trigger, want) in table {
            let tasks = departure_tasks_for(trigger, &previous, &targets);
            let got: Vec<(&str, &str, Option<i32>)> = tasks
                .iter()
                .map(|t| (t.from_cluster.as_str(), t.reason.as_str(), t.replicas))
                .collect();
            assert_eq!(got, want, "{trigger:?}");
            for t in &tasks {
                assert_eq!(t.producer, PRODUCER_FAILBACK);
                assert_eq!(t.purge_mode, PurgeMode::Gracefully);
                assert!(t.clusters_before_failover.contains(&"member1".to_owned()));
            }
        }
        // a cluster that stays, with fewer replicas, is a shrink (WE-10.1), not a departure
        let shrink = [
            TargetCluster::new("member1", 3),
            TargetCluster::new("member2", 1),
        ];
        assert!(departure_tasks_for(None, &previous, &shrink).is_empty());
    }
}
