//! One binding's scheduling decision, shared by the controller and the dry-run `Simulate` RPC
//! so that both run the very same rules.
//!
//! ```text
//!   core ResourceBinding + cluster snapshot
//!     └─► decide()   SC-3 needs_scheduling ──► SC-5..SC-19 schedule()   (pure, no clock)
//!           └─► Decision { Deleting | MissingPlacement | Unchanged | Scheduled | Failed }
//!   wire ResourceBinding (as read) + Decision + now
//!     └─► plan_write()  SC-4: spec.clusters, Scheduled condition, observed generation,
//!                       appliedPlacement, affinity name, lastScheduledTime
//!           └─► Some(new wire binding) only when something changed
//! ```
//!
//! The write plan edits the **wire** object as read, field by field, so that fields other
//! writers own (tasks, aggregated status, `requiredBy` details the domain does not model) are
//! carried over untouched; the compare-and-swap on the read revision makes that safe (I5).

use std::fmt::Write as _;

use flotilla_core::Time;
use flotilla_core::graceful::{AssessOptions, TaskVerdict, Timeouts, task_verdict};
use flotilla_core::scheduler::failback::{
    Failback, departure_tasks_for, failback, failback_clusters_after,
};
use flotilla_core::scheduler::{
    DivideError, ScheduleDecision, ScheduleError, ScheduleInput, ScheduleOptions, ScheduleOutcome,
    ScheduleTrigger, application_failover_clusters_after, forgets_failed_over, needs_scheduling,
    schedule,
};
use flotilla_core::types::{
    CONDITION_SCHEDULED, Cluster, Condition, ConditionStatus, ResourceBinding, TargetCluster,
};
use flotilla_proto::convert::time_to_timestamp;
use flotilla_proto::v1;
use flotilla_store::typed::prepare_generation;

/// Karmada's message of a successful `Scheduled` condition (SC-4.1).
pub const SUCCESS_MESSAGE: &str = "Binding has been scheduled successfully.";
/// Reason of a successful `Scheduled` condition (SC-4.1).
pub const REASON_SUCCESS: &str = "Success";
/// Reason of `Scheduled=False` when the result places only the replicas that fit (SC-4.6).
pub const REASON_INSUFFICIENT_CAPACITY: &str = "InsufficientCapacity";
/// Event reason of a successful scheduling decision.
pub const EVENT_SCHEDULED: &str = "Scheduled";
/// Event reason of a failed scheduling decision.
pub const EVENT_SCHEDULE_FAILED: &str = "ScheduleFailed";

/// What the rules decided for one binding.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Decision {
    /// SC-3.1: the binding is being deleted; nothing to do.
    Deleting,
    /// SC-3.1: the binding has no placement; nothing can be scheduled until it gets one.
    MissingPlacement,
    /// SC-3.7: no scheduling needed; `Some(g)` bumps the observed generation to `g`.
    Unchanged {
        /// The generation to record as observed, when it differs.
        bump_observed_generation: Option<i64>,
        /// A11: recovered clusters whose stabilisation window ends later, with its end.
        failback_pending: Vec<(String, Time)>,
    },
    /// The pipeline ran and produced a result.
    Scheduled {
        /// Why it ran (`None` when forced by a dry run).
        trigger: Option<ScheduleTrigger>,
        /// The result.
        outcome: ScheduleOutcome,
        /// A6: evicted clusters scheduled again because they recovered while no other
        /// cluster replaced them; their eviction tasks end in the same write.
        reinstated: Vec<String>,
    },
    /// The pipeline ran and failed.
    Failed {
        /// Why it ran (`None` when forced by a dry run).
        trigger: Option<ScheduleTrigger>,
        /// What went wrong (SC-4.2..SC-4.4).
        error: ScheduleError,
    },
}

// === impl Decision ===

impl Decision {
    /// The trigger that made the pipeline run, if it ran for one.
    pub fn trigger(&self) -> Option<&ScheduleTrigger> {
        match self {
            Decision::Scheduled { trigger, .. } | Decision::Failed { trigger, .. } => {
                trigger.as_ref()
            }
            _ => None,
        }
    }

    /// Whether a failure should be retried with back-off: SC-4.2 (`Unschedulable`, capacity)
    /// and SC-4.4 (other errors). A FitError (SC-4.3) waits for a change instead.
    pub fn retry_with_backoff(&self) -> bool {
        match self {
            Decision::Failed { error, .. } => !error.clears_result(),
            // SC-4.6: a short result is not retried on a timer: a summary read seconds after
            // the write may not count the new pods yet and would place more than fits. It
            // runs again when a cluster gets more room (SC-2.6) or anything else triggers.
            _ => false,
        }
    }
}

/// SC-3 then SC-5..SC-19: decide about `binding` against the cluster snapshot. With `force`
/// the pipeline runs even when SC-3 says nothing changed (the dry run's `force`).
pub fn decide(
    binding: &ResourceBinding,
    clusters: &[Cluster],
    options: ScheduleOptions,
    force: bool,
    now: Time,
) -> Decision {
    let trigger = match needs_scheduling(binding, clusters) {
        ScheduleDecision::Deleting => return Decision::Deleting,
        ScheduleDecision::MissingPlacement => return Decision::MissingPlacement,
        ScheduleDecision::NoSchedule {
            bump_observed_generation,
        } => match failback(binding, clusters, now) {
            // A11: only when nothing else calls for a schedule
            Failback::Due(clusters) => Some(ScheduleTrigger::Failback { clusters }),
            pending if !force => {
                return Decision::Unchanged {
                    bump_observed_generation,
                    failback_pending: match pending {
                        Failback::Pending { clusters } => clusters,
                        _ => Vec::new(),
                    },
                };
            }
            _ => None,
        },
        ScheduleDecision::Schedule(trigger) => Some(trigger),
    };
    let mut input = match ScheduleInput::from_binding(binding, clusters) {
        Ok(input) => input,
        Err(_) => return Decision::MissingPlacement,
    };
    input.options = options;
    input.fresh = matches!(trigger, Some(ScheduleTrigger::Failback { .. }));
    // SC-6.7: a changed placement or a requested reschedule forgets them
    if forgets_failed_over(trigger.as_ref()) {
        input.failed_over = &[];
    }
    let result = schedule(&input);
    let replaced = matches!(&result, Ok(outcome) if !outcome.targets.is_empty());
    let short = match &result {
        Ok(outcome) => outcome.unschedulable_replicas,
        Err(_) => i32::MAX,
    };
    // SC-4.6: a result short of replicas may also take back a recovered cluster
    if !replaced || short > 0 {
        // A6 (Flotilla; Karmada #5803): a task never sticks. When nothing replaced an
        // evicted cluster and that cluster is Ready and untainted again, it may be scheduled
        // again; the scheduler then ends its task in the same write, so the cluster is never
        // both a target and a task (I4) and its Work is never orphaned in between (I1).
        let recovered = recovered_task_clusters(binding, clusters);
        if !recovered.is_empty() {
            let remaining: Vec<_> = binding
                .spec
                .graceful_eviction_tasks
                .iter()
                .filter(|t| !recovered.contains(&t.from_cluster))
                .cloned()
                .collect();
            let mut again = input;
            again.eviction_tasks = &remaining;
            if let Ok(outcome) = schedule(&again) {
                let reinstated: Vec<String> = outcome
                    .targets
                    .iter()
                    .filter(|t| recovered.contains(&t.name))
                    .map(|t| t.name.clone())
                    .collect();
                if !reinstated.is_empty() && outcome.unschedulable_replicas < short {
                    return Decision::Scheduled {
                        trigger,
                        outcome,
                        reinstated,
                    };
                }
            }
        }
    }
    match result {
        Ok(outcome) => Decision::Scheduled {
            trigger,
            outcome,
            reinstated: Vec::new(),
        },
        Err(error) => Decision::Failed { trigger, error },
    }
}

/// A6: the clusters of the binding's eviction tasks that are back: present, not being
/// deleted, Ready=True and without any taint.
pub fn recovered_task_clusters(binding: &ResourceBinding, clusters: &[Cluster]) -> Vec<String> {
    binding
        .spec
        .graceful_eviction_tasks
        .iter()
        .filter(|t| {
            clusters.iter().any(|c| {
                c.name() == t.from_cluster
                    && c.meta.deletion_timestamp.is_none()
                    && c.spec.taints.is_empty()
                    && c.ready().is_some_and(|r| r.status == ConditionStatus::True)
            })
        })
        .map(|t| t.from_cluster.clone())
        .collect()
}

/// A trigger's name, e.g. `ReplicasChanged`.
pub fn trigger_name(trigger: &ScheduleTrigger) -> &'static str {
    match trigger {
        ScheduleTrigger::PlacementChanged => "PlacementChanged",
        ScheduleTrigger::ReplicasChanged => "ReplicasChanged",
        ScheduleTrigger::RescheduleRequested => "RescheduleRequested",
        ScheduleTrigger::NonWorkloadOrDuplicated => "NonWorkloadOrDuplicated",
        ScheduleTrigger::TargetClusterDeleting { .. } => "TargetClusterDeleting",
        ScheduleTrigger::TargetClusterMissing { .. } => "TargetClusterMissing",
        ScheduleTrigger::Failback { .. } => "Failback",
    }
}

/// A trigger explained in one line, citing its rule.
pub fn trigger_reason(trigger: &ScheduleTrigger) -> String {
    match trigger {
        ScheduleTrigger::PlacementChanged => {
            "SC-3.2: the placement differs from the one last applied".to_owned()
        }
        ScheduleTrigger::ReplicasChanged => {
            "SC-3.3: the result no longer adds up to spec.replicas (e.g. an eviction removed a target)"
                .to_owned()
        }
        ScheduleTrigger::RescheduleRequested => {
            "SC-3.4: a reschedule was requested after the last schedule (Fresh mode)".to_owned()
        }
        ScheduleTrigger::NonWorkloadOrDuplicated => {
            "SC-3.5: non-workloads and Duplicated workloads are always rescheduled".to_owned()
        }
        ScheduleTrigger::TargetClusterDeleting { cluster } => {
            format!("SC-3.6: target cluster {cluster} is being deleted")
        }
        ScheduleTrigger::TargetClusterMissing { cluster } => {
            format!("SC-3.6: target cluster {cluster} no longer exists")
        }
        ScheduleTrigger::Failback { clusters } => format!(
            "A11: {} has been Ready and untainted for the policy's stabilisation window; the \
             placement's preference is recomputed (Fresh), and a cluster the result leaves \
             keeps its copy through a graceful task until the new one is healthy",
            clusters.join(", ")
        ),
    }
}

/// The `Scheduled` condition a decision leads to (SC-4), or `None` when it writes none.
pub fn scheduled_condition(decision: &Decision, now: Time) -> Option<Condition> {
    let (status, reason, message) = match decision {
        // SC-4.6: placed, but not every replica: False, so that SC-2.6 requeues it when
        // room appears and a reader sees why
        Decision::Scheduled { outcome, .. } if !outcome.complete() => (
            ConditionStatus::False,
            REASON_INSUFFICIENT_CAPACITY.to_owned(),
            format!(
                "{} of {} replicas are unschedulable: {} The result places the rest.",
                outcome.unschedulable_replicas,
                outcome
                    .targets
                    .iter()
                    .map(|t| t.replicas)
                    .sum::<i32>()
                    .saturating_add(outcome.unschedulable_replicas),
                outcome.unschedulable_reason
            ),
        ),
        Decision::Scheduled { .. } => (
            ConditionStatus::True,
            REASON_SUCCESS.to_owned(),
            SUCCESS_MESSAGE.to_owned(),
        ),
        Decision::Failed { error, .. } => (
            ConditionStatus::False,
            error.condition_reason().to_owned(),
            error.to_string(),
        ),
        Decision::Deleting | Decision::MissingPlacement | Decision::Unchanged { .. } => {
            return None;
        }
    };
    Some(Condition {
        type_: CONDITION_SCHEDULED.to_owned(),
        status,
        reason,
        message,
        last_transition_time: Some(now),
    })
}

/// `member1:1, member2:2` (or `[]`), for logs and events.
pub fn format_targets<'a>(targets: impl IntoIterator<Item = (&'a str, i32)>) -> String {
    let mut out = String::new();
    for (i, (name, replicas)) in targets.into_iter().enumerate() {
        if i > 0 {
            out.push_str(", ");
        }
        let _ = write!(out, "{name}:{replicas}");
    }
    if out.is_empty() {
        out.push_str("[]");
    }
    out
}

/// [`format_targets`] of a wire result.
pub fn format_wire_targets(targets: &[v1::TargetCluster]) -> String {
    format_targets(targets.iter().map(|t| (t.name.as_str(), t.replicas)))
}

/// [`format_targets`] of a domain result.
pub fn format_core_targets(targets: &[TargetCluster]) -> String {
    format_targets(targets.iter().map(|t| (t.name.as_str(), t.replicas)))
}

/// Sets (or adds) `condition` on a wire condition list, keeping `lastTransitionTime` when the
/// status did not change (CH-5.5 semantics for every condition).
fn set_condition(conditions: &mut Vec<v1::Condition>, condition: Condition) {
    let mut wire = v1::Condition::from(condition);
    match conditions.iter_mut().find(|c| c.r#type == wire.r#type) {
        Some(existing) => {
            if existing.status == wire.status {
                wire.last_transition_time = existing.last_transition_time;
            }
            *existing = wire;
        }
        None => conditions.push(wire),
    }
}

/// SC-4: the binding to write for `decision`, edited from `old` (the wire object as read), or
/// `None` when nothing would change — the scheduler never writes a no-op.
///
/// - SC-4.1 success: `spec.clusters` = the result, `status.appliedPlacement` = the placement
///   used (A3), the affinity term used (SC-19), `Scheduled=True/Success`, observed generation
///   = the generation being written (`prepare_generation` first, so graceful eviction's
///   `hasScheduled` holds exactly when this result is in place), `lastScheduledTime = now`.
///   A success that changes nothing else is not written, except for an explicit reschedule
///   request (SC-3.4), whose `lastScheduledTime` must move past the request.
/// - SC-4.2/SC-4.4 failure: only the condition; the previous result stays.
/// - SC-4.3 FitError: `spec.clusters = []`, `Scheduled=False/NoClusterFit`, applied placement
///   updated (SC-4.5), observed generation and affinity name kept (SC-19.3).
/// - SC-3.7: only `schedulerObservedGeneration`, when it differs.
pub fn plan_write(
    old: &v1::ResourceBinding,
    domain: &ResourceBinding,
    decision: &Decision,
    now: Time,
) -> Option<v1::ResourceBinding> {
    let mut new = old.clone();
    let placement = old.spec.as_ref().and_then(|s| s.placement.clone());
    match decision {
        Decision::Deleting | Decision::MissingPlacement => return None,
        Decision::Unchanged {
            bump_observed_generation,
            ..
        } => {
            let generation = (*bump_observed_generation)?;
            new.status
                .get_or_insert_with(Default::default)
                .scheduler_observed_generation = generation;
        }
        Decision::Scheduled {
            trigger,
            outcome,
            reinstated,
        } => {
            let spec = new.spec.get_or_insert_with(Default::default);
            spec.clusters = outcome
                .targets
                .iter()
                .cloned()
                .map(v1::TargetCluster::from)
                .collect();
            // A6: a reinstated cluster's eviction task ends with this write. Whether a task
            // may end is one function for every writer of tasks; the verdict this placement
            // causes is Rescheduled (its cluster is a target again). The status read is the
            // old placement's, so no health verdict is taken here (I1a).
            let ends = AssessOptions {
                now,
                timeouts: Timeouts::OwnOnly,
                schedule_result: &outcome.targets,
                observed_status: &domain.status.aggregated_status,
                has_scheduled: true,
                observed_status_current: false,
                last_scheduled: Some(now),
                unschedulable_replicas: outcome.unschedulable_replicas,
            };
            let ended: Vec<&str> = domain
                .spec
                .graceful_eviction_tasks
                .iter()
                .filter(|t| task_verdict(t, &ends) == TaskVerdict::Rescheduled)
                .map(|t| t.from_cluster.as_str())
                .collect();
            debug_assert!(reinstated.iter().all(|c| ended.contains(&c.as_str())));
            spec.graceful_eviction_tasks
                .retain(|t| !ended.contains(&t.from_cluster.as_str()));
            // A11, WE-10.7: no schedule drops a serving cluster at once: each one the result
            // leaves keeps its copy through a graceful task (I4: it is no longer a target)
            let failed_back: &[String] = match trigger {
                Some(ScheduleTrigger::Failback { clusters }) => clusters,
                _ => &[],
            };
            let new_tasks =
                departure_tasks_for(trigger.as_ref(), &domain.spec.clusters, &outcome.targets);
            for task in new_tasks {
                if !spec
                    .graceful_eviction_tasks
                    .iter()
                    .any(|o| o.from_cluster == task.from_cluster)
                {
                    spec.graceful_eviction_tasks.push(task.into());
                }
            }
            let remembered = failback_clusters_after(domain, &outcome.targets, failed_back);
            let failed_over = application_failover_clusters_after(
                domain,
                &outcome.targets,
                forgets_failed_over(trigger.as_ref()),
            );
            // The generation this write will carry: observed == generation exactly when the
            // written result reflects the written spec (SC-4.1, GE-2 hasScheduled).
            prepare_generation(old, &mut new);
            let generation = new.metadata.as_ref().map_or(0, |m| m.generation);
            let status = new.status.get_or_insert_with(Default::default);
            status.applied_placement = placement;
            status.scheduler_observing_affinity_name =
                outcome.affinity_name.clone().unwrap_or_default();
            status.scheduler_observed_generation = generation;
            status.failback_clusters = remembered;
            status.application_failover_clusters = failed_over;
            status.unschedulable_replicas = outcome.unschedulable_replicas;
            if let Some(condition) = scheduled_condition(decision, now) {
                set_condition(&mut status.conditions, condition);
            }
            let reschedule = matches!(
                trigger,
                Some(ScheduleTrigger::RescheduleRequested | ScheduleTrigger::Failback { .. })
            );
            if new == *old && !reschedule {
                return None;
            }
            new.status
                .get_or_insert_with(Default::default)
                .last_scheduled_time = Some(time_to_timestamp(now));
            return Some(new);
        }
        Decision::Failed { error, .. } => {
            // SC-4.6: the kept result lacks what it lacks; a FitError clears it (all of them)
            if matches!(
                error,
                ScheduleError::Unschedulable {
                    error: DivideError::InsufficientCapacity { .. },
                    ..
                } | ScheduleError::NoClusterFit(_)
            ) {
                let kept: i32 = if error.clears_result() {
                    0
                } else {
                    domain.spec.clusters.iter().map(|t| t.replicas).sum()
                };
                new.status
                    .get_or_insert_with(Default::default)
                    .unschedulable_replicas = domain.spec.replicas.saturating_sub(kept).max(0);
            }
            if error.clears_result() {
                new.spec
                    .get_or_insert_with(Default::default)
                    .clusters
                    .clear();
                new.status
                    .get_or_insert_with(Default::default)
                    .applied_placement = placement;
            }
            if let Some(condition) = scheduled_condition(decision, now) {
                set_condition(
                    &mut new.status.get_or_insert_with(Default::default).conditions,
                    condition,
                );
            }
        }
    }
    (new != *old).then_some(new)
}

#[cfg(test)]
mod tests {
    use flotilla_core::scheduler::{DivideError, FitError};
    use flotilla_core::types::{
        ObjectReference, Placement, ReplicaSchedulingStrategy, ReplicaSchedulingType,
    };

    use super::*;

    fn cluster(name: &str) -> Cluster {
        Cluster::named(name).serving("apps/v1", &["Deployment"])
    }

    fn duplicated(replicas: i32, targets: &[&str]) -> ResourceBinding {
        let mut rb = ResourceBinding::default();
        rb.meta.name = "nginx-deployment".to_owned();
        rb.meta.namespace = "default".to_owned();
        rb.meta.generation = 1;
        rb.spec.resource = ObjectReference {
            api_version: "apps/v1".to_owned(),
            kind: "Deployment".to_owned(),
            namespace: "default".to_owned(),
            name: "nginx".to_owned(),
            uid: String::new(),
        };
        rb.spec.replicas = replicas;
        rb.spec.placement = Some(Placement {
            replica_scheduling: Some(ReplicaSchedulingStrategy {
                replica_scheduling_type: ReplicaSchedulingType::Duplicated,
                ..Default::default()
            }),
            ..Default::default()
        });
        rb.spec.clusters = targets
            .iter()
            .map(|n| TargetCluster::new(*n, replicas))
            .collect();
        rb
    }

    /// [`decide`] with the default options, not forced, at `now`.
    fn decide_at(rb: &ResourceBinding, clusters: &[Cluster], now: Time) -> Decision {
        decide(rb, clusters, ScheduleOptions::default(), false, now)
    }

    /// The taint manager's graceful eviction task from `cluster`.
    fn taint_task(cluster: &str) -> flotilla_core::types::GracefulEvictionTask {
        flotilla_core::types::GracefulEvictionTask {
            from_cluster: cluster.into(),
            purge_mode: flotilla_core::types::PurgeMode::Gracefully,
            producer: "TaintManager".into(),
            reason: "TaintUntolerated".into(),
            ..Default::default()
        }
    }

    /// Each task's (cluster, producer, reason, replicas).
    fn task_origins(spec: &v1::ResourceBindingSpec) -> Vec<(&str, &str, &str, Option<i32>)> {
        spec.graceful_eviction_tasks
            .iter()
            .map(|t| {
                (
                    t.from_cluster.as_str(),
                    t.producer.as_str(),
                    t.reason.as_str(),
                    t.replicas,
                )
            })
            .collect()
    }

    fn domain(b: &v1::ResourceBinding) -> ResourceBinding {
        ResourceBinding::try_from(b.clone()).expect("a valid binding")
    }

    #[test]
    fn sc_4_1_success_sets_result_placement_condition_and_observed_generation() {
        let rb = duplicated(2, &[]);
        let clusters = [cluster("member1")];
        let decision = decide_at(&rb, &clusters, Time::from_secs(0));
        let old = v1::ResourceBinding::from(rb.clone());
        let now = Time::from_secs(100);
        let new = plan_write(&old, &rb, &decision, now).expect("writes");
        let spec = new.spec.as_ref().unwrap();
        assert_eq!(
            spec.clusters,
            vec![v1::TargetCluster {
                name: "member1".into(),
                replicas: 2
            }]
        );
        let generation = new.metadata.as_ref().unwrap().generation;
        assert_eq!(generation, 2, "spec changed: generation bumped");
        let status = new.status.as_ref().unwrap();
        assert_eq!(status.scheduler_observed_generation, generation);
        assert_eq!(status.applied_placement, spec.placement);
        assert_eq!(status.last_scheduled_time, Some(time_to_timestamp(now)));
        let cond = &status.conditions[0];
        assert_eq!(
            (cond.r#type.as_str(), cond.reason.as_str()),
            ("Scheduled", "Success")
        );

        // The same decision again on the written object: nothing to write.
        let rb2 = ResourceBinding::try_from(new.clone()).unwrap();
        let again = decide_at(&rb2, &clusters, Time::from_secs(0));
        assert!(matches!(again, Decision::Scheduled { .. }), "SC-3.5");
        assert_eq!(plan_write(&new, &rb2, &again, Time::from_secs(200)), None);
    }

    /// Regression (Karmada #5803, I6, A6): the only cluster a policy allows is evicted (task
    /// kept, placement empty), then recovers. Before the fix the SC-6.6 filter kept it out
    /// for as long as the task existed, and the task existed because nothing replaced it:
    /// the binding stayed `Scheduled=False` for good.
    #[test]
    fn a6_a_recovered_evicted_cluster_with_no_replacement_is_scheduled_again() {
        use flotilla_core::types::{Taint, TaintEffect};
        let mut rb = duplicated(2, &[]);
        rb.spec.graceful_eviction_tasks.push(taint_task("member1"));
        let mut member1 = cluster("member1");
        member1.status.conditions.push(Condition {
            type_: "Ready".into(),
            status: ConditionStatus::True,
            ..Default::default()
        });
        // still tainted: no reinstatement, the binding stays unscheduled (A6 first half)
        let mut tainted = member1.clone();
        tainted.spec.taints.push(Taint::new(
            "cluster.karmada.io/not-ready",
            TaintEffect::NoExecute,
            None,
        ));
        let decision = decide_at(&rb, &[tainted], Time::from_secs(0));
        assert!(matches!(decision, Decision::Failed { .. }), "{decision:?}");
        // Ready and untainted: scheduled again and the task ends in the same write
        let decision = decide_at(&rb, &[member1], Time::from_secs(0));
        let Decision::Scheduled { reinstated, .. } = &decision else {
            panic!("{decision:?}");
        };
        assert_eq!(reinstated, &vec!["member1".to_owned()]);
        let old = v1::ResourceBinding::from(rb.clone());
        let new = plan_write(&old, &rb, &decision, Time::from_secs(10)).expect("writes");
        let spec = new.spec.as_ref().unwrap();
        assert_eq!(spec.clusters.len(), 1);
        assert_eq!(spec.clusters[0].name, "member1");
        assert!(spec.graceful_eviction_tasks.is_empty(), "the task ended");
    }

    #[test]
    fn sc_4_3_fit_error_clears_result_and_keeps_observed_generation() {
        let mut rb = duplicated(2, &["member1"]);
        rb.status.scheduler_observed_generation = 1;
        let old = v1::ResourceBinding::from(rb);
        let error = ScheduleError::NoClusterFit(FitError {
            num_all_clusters: 0,
            diagnostics: vec![],
        });
        let decision = Decision::Failed {
            trigger: None,
            error,
        };
        let new = plan_write(&old, &domain(&old), &decision, Time::from_secs(5)).expect("writes");
        assert!(new.spec.as_ref().unwrap().clusters.is_empty());
        let status = new.status.as_ref().unwrap();
        assert_eq!(status.scheduler_observed_generation, 1, "not bumped");
        assert_eq!(status.conditions[0].reason, "NoClusterFit");
        assert_eq!(status.last_scheduled_time, None);
        assert!(!decision.retry_with_backoff(), "SC-4.3: not retried");
    }

    /// SC-4.6, GE-4.7: a failover onto too little room writes what fits, says how many
    /// replicas are short and why, retries, and keeps the evicted cluster's task.
    #[test]
    fn sc_4_6_a_short_result_is_written_with_its_shortfall() {
        let mut rb = duplicated(12, &[]);
        let placement = rb.spec.placement.as_mut().expect("placement");
        placement.replica_scheduling = Some(ReplicaSchedulingStrategy {
            replica_scheduling_type: ReplicaSchedulingType::Divided,
            replica_division_preference: Some(
                flotilla_core::types::ReplicaDivisionPreference::Aggregated,
            ),
            weight_preference: None,
        });
        rb.status.applied_placement = rb.spec.placement.clone();
        rb.status.scheduler_observed_generation = 1;
        // member1 was evicted: its task is in place, its 6 replicas left the result
        rb.spec.clusters = vec![
            TargetCluster::new("member2", 3),
            TargetCluster::new("member3", 3),
        ];
        rb.spec.graceful_eviction_tasks = vec![flotilla_core::types::GracefulEvictionTask {
            creation_timestamp: Some(Time::from_secs(1)),
            ..taint_task("member1")
        }];
        let free = |name: &str, pods: i64| {
            let mut c = cluster(name);
            c.status.resource_summary = Some(flotilla_core::capacity::Summary::with_pods(pods));
            c
        };
        let clusters = vec![free("member2", 1), free("member3", 0)];
        let options = ScheduleOptions {
            place_what_fits: true,
            ..ScheduleOptions::default()
        };
        let decision = decide(&rb, &clusters, options, false, Time::from_secs(5));
        let Decision::Scheduled { outcome, .. } = &decision else {
            panic!("placed what fits: {decision:?}");
        };
        assert_eq!(outcome.unschedulable_replicas, 5);
        assert!(
            !decision.retry_with_backoff(),
            "a short result waits for room (SC-2.6), not a timer"
        );
        let old = v1::ResourceBinding::from(rb.clone());
        let new = plan_write(&old, &rb, &decision, Time::from_secs(5)).expect("writes");
        let spec = new.spec.as_ref().expect("spec");
        assert_eq!(format_wire_targets(&spec.clusters), "member2:4, member3:3");
        assert_eq!(spec.graceful_eviction_tasks.len(), 1, "the old copy stays");
        let status = new.status.as_ref().expect("status");
        assert_eq!(status.unschedulable_replicas, 5);
        let cond = &status.conditions[0];
        assert_eq!(
            (cond.status, cond.reason.as_str()),
            (v1::ConditionStatus::False as i32, "InsufficientCapacity")
        );
        assert!(
            cond.message
                .starts_with("5 of 12 replicas are unschedulable"),
            "{}",
            cond.message
        );
        // room appears: the rest is placed, the condition turns True, the count 0
        let after = domain(&new);
        let roomy = vec![free("member2", 10), free("member3", 0)];
        assert!(
            matches!(
                decide(&after, &roomy, options, false, Time::from_secs(9)),
                Decision::Unchanged { .. }
            ),
            "SC-3.3 counts a short result as in place: only new room runs it again"
        );
        // (the controller forces the run SC-2.6 queued)
        let decision = decide(&after, &roomy, options, true, Time::from_secs(9));
        let full = plan_write(&new, &after, &decision, Time::from_secs(9)).expect("writes");
        let status = full.status.as_ref().expect("status");
        assert_eq!(status.unschedulable_replicas, 0);
        assert_eq!(status.conditions[0].reason, "Success");
        assert_eq!(
            format_wire_targets(&full.spec.as_ref().expect("spec").clusters),
            "member2:9, member3:3"
        );
        // Karmada's behaviour with the switch off: the run fails, the result stays
        let off = decide(
            &rb,
            &clusters,
            ScheduleOptions::default(),
            false,
            Time::from_secs(5),
        );
        assert!(matches!(off, Decision::Failed { .. }), "{off:?}");
        let kept = plan_write(&old, &rb, &off, Time::from_secs(5)).expect("condition");
        assert_eq!(kept.spec, old.spec);
        assert_eq!(
            kept.status.as_ref().expect("status").unschedulable_replicas,
            6
        );
    }

    #[test]
    fn sc_4_2_unschedulable_keeps_result_and_keeps_transition_time() {
        let rb = duplicated(2, &["member1"]);
        let old = v1::ResourceBinding::from(rb);
        let decision = Decision::Failed {
            trigger: None,
            error: ScheduleError::Unschedulable {
                error: DivideError::InsufficientCapacity {
                    available: 1,
                    target: 2,
                },
                diagnostics: vec![],
            },
        };
        assert!(decision.retry_with_backoff());
        let first = plan_write(&old, &domain(&old), &decision, Time::from_secs(5)).expect("writes");
        assert_eq!(first.spec, old.spec, "previous result kept");
        let cond = &first.status.as_ref().unwrap().conditions[0];
        assert_eq!(cond.reason, "Unschedulable");
        assert_eq!(
            plan_write(&first, &domain(&first), &decision, Time::from_secs(9)),
            None,
            "same condition again: no write"
        );
    }

    #[test]
    fn sc_3_7_only_bumps_observed_generation() {
        let old = v1::ResourceBinding::from(duplicated(2, &["member1"]));
        let none = Decision::Unchanged {
            bump_observed_generation: None,
            failback_pending: vec![],
        };
        assert_eq!(plan_write(&old, &domain(&old), &none, Time::EPOCH), None);
        let bump = Decision::Unchanged {
            bump_observed_generation: Some(7),
            failback_pending: vec![],
        };
        let new = plan_write(&old, &domain(&old), &bump, Time::EPOCH).expect("writes");
        assert_eq!(
            new.status.as_ref().unwrap().scheduler_observed_generation,
            7
        );
        assert_eq!(new.spec, old.spec);
    }

    #[test]
    fn targets_format() {
        assert_eq!(format_targets([]), "[]");
        assert_eq!(
            format_core_targets(&[TargetCluster::new("a", 1), TargetCluster::new("b", 2)]),
            "a:1, b:2"
        );
    }

    /// A11: a binding the taint manager evicted from member1 (all 3 replicas now on member2,
    /// Divided + Aggregated), whose policy fails back after 60 s; member1 has the larger
    /// capacity and has been Ready and untainted since t = 1000 s.
    fn evicted_with_failback() -> (ResourceBinding, Vec<Cluster>) {
        use flotilla_core::types::{
            ClusterFailoverBehavior, FailoverBehavior, ReplicaDivisionPreference,
        };
        let mut rb = duplicated(3, &[]);
        rb.spec.placement = Some(Placement {
            replica_scheduling: Some(ReplicaSchedulingStrategy {
                replica_scheduling_type: ReplicaSchedulingType::Divided,
                replica_division_preference: Some(ReplicaDivisionPreference::Aggregated),
                weight_preference: None,
            }),
            ..Default::default()
        });
        rb.status.applied_placement = rb.spec.placement.clone();
        rb.status.scheduler_observed_generation = 1;
        rb.spec.clusters = vec![TargetCluster::new("member2", 3)];
        rb.spec.failover = Some(FailoverBehavior {
            cluster: Some(ClusterFailoverBehavior {
                failback_stabilization_window_seconds: Some(60),
                ..Default::default()
            }),
            ..Default::default()
        });
        rb.status.failback_clusters = vec!["member1".to_owned()];
        let ready = |name: &str, allocatable: i64| {
            let mut c = cluster(name);
            c.status.resource_summary =
                Some(flotilla_core::capacity::Summary::with_pods(allocatable));
            c.status.conditions.push(Condition {
                type_: "Ready".into(),
                status: ConditionStatus::True,
                last_transition_time: Some(Time::from_secs(1000)),
                ..Default::default()
            });
            c
        };
        (rb, vec![ready("member1", 10), ready("member2", 5)])
    }

    #[test]
    fn a11_failback_waits_for_the_window_then_moves_back_gracefully() {
        let (rb, clusters) = evicted_with_failback();
        // within the window: nothing moves; the pending failback is reported
        let early = decide_at(&rb, &clusters, Time::from_secs(1030));
        assert_eq!(
            early,
            Decision::Unchanged {
                bump_observed_generation: None,
                failback_pending: vec![("member1".to_owned(), Time::from_secs(1060))],
            }
        );
        // the window is over: a Fresh schedule prefers member1 again
        let now = Time::from_secs(1061);
        let due = decide_at(&rb, &clusters, now);
        let Decision::Scheduled {
            trigger, outcome, ..
        } = &due
        else {
            panic!("{due:?}");
        };
        assert_eq!(
            trigger,
            &Some(ScheduleTrigger::Failback {
                clusters: vec!["member1".to_owned()]
            })
        );
        assert_eq!(outcome.targets, vec![TargetCluster::new("member1", 3)]);
        let old = v1::ResourceBinding::from(rb.clone());
        let new = plan_write(&old, &rb, &due, now).expect("writes");
        let spec = new.spec.as_ref().unwrap();
        assert_eq!(spec.clusters.len(), 1);
        assert_eq!(spec.clusters[0].name, "member1");
        // member2 keeps its copy until member1's is healthy: a graceful task, not a drop
        assert_eq!(
            task_origins(spec),
            [("member2", "Scheduler", "Failback", Some(3))]
        );
        assert_eq!(
            spec.graceful_eviction_tasks[0].purge_mode,
            v1::PurgeMode::Gracefully as i32
        );
        assert!(
            new.status.as_ref().unwrap().failback_clusters.is_empty(),
            "member1 is no longer waited for"
        );
        // without the policy field nothing moves back (SC-3.8)
        let mut off = rb.clone();
        off.spec.failover = None;
        let decision = decide_at(&off, &clusters, now);
        assert!(
            matches!(decision, Decision::Unchanged { .. }),
            "{decision:?}"
        );
    }

    #[test]
    fn a11_a_taint_eviction_is_remembered_when_the_refill_is_written() {
        let (mut rb, clusters) = evicted_with_failback();
        rb.status.failback_clusters.clear();
        // the taint manager just took member1 out (2 of 3 replicas) with a task
        rb.spec.clusters = vec![TargetCluster::new("member2", 1)];
        rb.spec.graceful_eviction_tasks.push(taint_task("member1"));
        let mut tainted = clusters.clone();
        tainted[0]
            .spec
            .taints
            .push(flotilla_core::types::Taint::new(
                "cluster.karmada.io/not-ready",
                flotilla_core::types::TaintEffect::NoExecute,
                None,
            ));
        let now = Time::from_secs(2000);
        let refill = decide_at(&rb, &tainted, now);
        assert!(
            matches!(refill.trigger(), Some(ScheduleTrigger::ReplicasChanged)),
            "{refill:?}"
        );
        let old = v1::ResourceBinding::from(rb.clone());
        let new = plan_write(&old, &rb, &refill, now).expect("writes");
        assert_eq!(new.status.as_ref().unwrap().failback_clusters, ["member1"]);
    }

    /// Regression: a schedule caused by a deleting target (SC-3.6) drops that cluster at once;
    /// only a failback (A11) or another placement change (WE-10.7) adds departure tasks.
    #[test]
    fn a11_no_task_when_a_deleting_target_is_dropped() {
        let (mut rb, mut clusters) = evicted_with_failback();
        rb.spec.failover = None;
        rb.status.failback_clusters.clear();
        clusters[1].meta.deletion_timestamp = Some(Time::from_secs(5));
        let now = Time::from_secs(5000);
        let decision = decide_at(&rb, &clusters, now);
        assert!(
            matches!(
                decision.trigger(),
                Some(ScheduleTrigger::TargetClusterDeleting { .. })
            ),
            "{decision:?}"
        );
        let old = v1::ResourceBinding::from(rb.clone());
        let new = plan_write(&old, &rb, &decision, now).expect("writes");
        assert!(new.spec.unwrap().graceful_eviction_tasks.is_empty());
    }

    /// WE-10.7: a placement change that leaves a serving cluster gives it a graceful task in
    /// the same write, so its copy serves until the new targets are healthy; before, its
    /// Work was deleted at once (break before make).
    #[test]
    fn we_10_7_a_cluster_leaving_the_affinity_keeps_its_copy_through_a_task() {
        let mut rb = duplicated(3, &["member1", "member2"]);
        rb.spec.placement.as_mut().unwrap().cluster_affinity =
            Some(flotilla_core::types::ClusterAffinity {
                cluster_names: vec!["member1".to_owned()],
                ..Default::default()
            });
        let clusters = [cluster("member1"), cluster("member2")];
        let now = Time::from_secs(100);
        let decision = decide_at(&rb, &clusters, now);
        let old = v1::ResourceBinding::from(rb.clone());
        let new = plan_write(&old, &rb, &decision, now).expect("writes");
        let spec = new.spec.as_ref().unwrap();
        assert_eq!(
            spec.clusters,
            [v1::TargetCluster {
                name: "member1".into(),
                replicas: 3
            }]
        );
        assert_eq!(
            task_origins(spec),
            [("member2", "Scheduler", "PlacementChanged", Some(3))]
        );
        // written again on the result: member2 is no target, and nothing more is added
        let rb2 = domain(&new);
        let again = decide_at(&rb2, &clusters, Time::from_secs(200));
        if let Some(newer) = plan_write(&new, &rb2, &again, Time::from_secs(200)) {
            assert_eq!(newer.spec.unwrap().graceful_eviction_tasks.len(), 1);
        }
    }
}
