//! One binding's graceful-eviction step as a pure function of the binding, the application
//! failover memory and `now`: the controller and the `Assess` RPC both call [`plan`].
//!
//! ```text
//!   binding ──► GE-8 assess_application_failover (controller only: needs memory)
//!           │      └─ evict Unhealthy clusters: graceful_evict_cluster (A10, §1.8 producer)
//!           ──► GE-3 assess_tasks (stamp, keep, remove; A6 empty placement never healthy)
//!           ──► A6 ReplacementPending condition (tasks kept while spec.clusters is empty)
//!           ──► GE-6 next retry (min with GE-8's)
//! ```

use std::collections::BTreeMap;
use std::time::Duration;

use flotilla_core::Time;
use flotilla_core::eviction::{EvictOptions, graceful_evict_cluster};
use flotilla_core::graceful::{
    AssessOptions, Assessment, Collection, TaskVerdict, Timeouts, assess_application_failover,
    assess_tasks, confirm_by_collection, next_retry,
};
use flotilla_core::health::set_condition;
use flotilla_core::preserve::state_for_eviction;
use flotilla_core::types::{
    CONDITION_REPLACEMENT_PENDING, Condition, ConditionStatus, GracefulEvictionTask,
    PRODUCER_APPLICATION_FAILOVER, PurgeMode, REASON_APPLICATION_FAILURE, ResourceBinding,
    TargetCluster,
};

/// Reason of `ReplacementPending=True` (A6).
pub const REASON_NO_REPLACEMENT_FITS: &str = "NoReplacementFits";
/// Reason of `ReplacementPending=False` once a target exists again (A6).
pub const REASON_REPLACEMENT_SCHEDULED: &str = "ReplacementScheduled";
/// Reason of `ReplacementPending=False` once no task is left.
pub const REASON_NO_EVICTION_PENDING: &str = "NoEvictionPending";

/// PD-2: `decisionConditions.tolerationSeconds` when unset.
const DEFAULT_APP_TOLERATION_SECONDS: i64 = 300;
/// PD-1.5: application failover `gracePeriodSeconds` for Gracefully when unset.
const DEFAULT_APP_GRACE_PERIOD_SECONDS: i64 = 600;
/// TM-10.2: how soon an eviction postponed for its preserved state is tried again.
pub const STATE_RETRY: Duration = Duration::from_secs(1);
/// The shortest timed requeue, so that a deadline of "now" never spins.
const MIN_REQUEUE: Duration = Duration::from_millis(10);

/// What one step does to a binding.
#[derive(Clone, Debug, PartialEq)]
pub struct Plan {
    /// `spec.clusters` after application failover.
    pub clusters: Vec<TargetCluster>,
    /// `spec.gracefulEvictionTasks` after the step (stamped, removed, appended).
    pub tasks: Vec<GracefulEvictionTask>,
    /// `status.conditions` after the step.
    pub conditions: Vec<Condition>,
    /// The GE-3 assessment of the tasks (after application failover appended its own).
    pub assessment: Assessment,
    /// GE-8: clusters evicted by application failover in this step.
    pub app_evicted: Vec<String>,
    /// TM-10.2 / GE-8.6: clusters whose eviction is due but postponed because their state
    /// cannot be preserved yet, with why (looked at again after [`STATE_RETRY`]).
    pub app_postponed: Vec<(String, String)>,
    /// GE-8: the memory to keep for this binding (`None`: drop it).
    pub app_memory: Option<BTreeMap<String, Time>>,
    /// When to run again for a timeout or an application failover deadline.
    pub requeue: Option<Duration>,
    /// Whether `ReplacementPending` is now True (A6).
    pub replacement_pending: bool,
    /// Whether the spec changes (a write is needed).
    pub spec_changed: bool,
    /// Whether the status changes (a write is needed).
    pub status_changed: bool,
    /// `hasScheduled` as used (GE-2.1; false after an application failover eviction in the
    /// same step, because that write bumps the generation).
    pub has_scheduled: bool,
}

impl Plan {
    /// Whether the binding must be written.
    pub fn changed(&self) -> bool {
        self.spec_changed || self.status_changed
    }
}

fn min_opt(a: Option<Duration>, b: Option<Duration>) -> Option<Duration> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

/// The instant a stamped task times out (GE-4.2 with A6: the grace period counts from when a
/// replacement was placed, if later than the task's creation); `None` for suppressed tasks.
pub fn task_deadline(
    task: &GracefulEvictionTask,
    now: Time,
    default_timeout: Duration,
    last_scheduled: Option<Time>,
) -> Option<Time> {
    if task.suppress_deletion.is_some() {
        return None;
    }
    let created = task.creation_timestamp.unwrap_or(now);
    let start = match last_scheduled {
        Some(placed) if placed > created => placed,
        _ => created,
    };
    let timeout = match task.grace_period_seconds {
        Some(secs) => Duration::from_secs(u64::try_from(secs).unwrap_or(0)),
        None => default_timeout,
    };
    Some(start + timeout)
}

/// GE-8 options of an application-failover eviction: producer and reason of §1.8, and the
/// purge mode (Gracefully → gracePeriodSeconds; Never → suppressDeletion=true; Directly).
fn app_failover_options(
    app: &flotilla_core::types::ApplicationFailoverBehavior,
    cluster: &str,
    toleration_seconds: i64,
) -> EvictOptions {
    let purge_mode = app.purge_mode.unwrap_or(PurgeMode::Gracefully);
    EvictOptions {
        purge_mode,
        producer: PRODUCER_APPLICATION_FAILOVER.into(),
        reason: REASON_APPLICATION_FAILURE.into(),
        message: format!(
            "the application on cluster {cluster} was Unhealthy for more than \
             {toleration_seconds}s"
        ),
        grace_period_seconds: (purge_mode == PurgeMode::Gracefully).then(|| {
            app.grace_period_seconds
                .unwrap_or(DEFAULT_APP_GRACE_PERIOD_SECONDS)
        }),
        suppress_deletion: (purge_mode == PurgeMode::Never).then_some(true),
        record_clusters_before_failover: !app.state_preservation.is_empty(),
        preserved_label_state: BTreeMap::new(),
        trace_context: String::new(),
        // GE-3.1 stamps it in the very write that appends it (the assessment runs after)
        created: None,
    }
}

/// What application failover (GE-8) reads besides the binding.
#[derive(Clone, Copy)]
pub struct AppInputs<'a> {
    /// The binding's memory: cluster → first seen Unhealthy.
    pub memory: &'a BTreeMap<String, Time>,
    /// GE-8.7: the status collector's last pass over a cluster.
    pub collected: &'a dyn Fn(&str) -> Option<Collection>,
}

/// One graceful-eviction step for `binding` at `now`. `app` is what application failover
/// reads (`None`: skip application failover, as the dry run does).
pub fn plan(
    binding: &ResourceBinding,
    app: Option<AppInputs<'_>>,
    default_timeout: Duration,
    now: Time,
) -> Plan {
    let status = &binding.status;
    let mut spec = binding.spec.clone();
    // GE-2.1
    let mut has_scheduled = status.scheduler_observed_generation == binding.meta.generation;

    // GE-8 (A10): application failover, for bindings that ask for it and report status.
    let mut app_evicted = Vec::new();
    let mut app_postponed = Vec::new();
    let mut app_requeue = None;
    let mut new_memory = None;
    if let Some(AppInputs { memory, collected }) = app
        && let Some(app) = spec.failover.as_ref().and_then(|f| f.application.clone())
        && !status.aggregated_status.is_empty()
    {
        let toleration = app
            .toleration_seconds
            .unwrap_or(DEFAULT_APP_TOLERATION_SECONDS);
        let task_clusters: Vec<String> = spec
            .graceful_eviction_tasks
            .iter()
            .map(|t| t.from_cluster.clone())
            .collect();
        let mut decision = assess_application_failover(
            memory,
            &status.aggregated_status,
            &spec.clusters,
            &task_clusters,
            toleration,
            now,
        );
        // GE-8.7: only on status collected during the period
        app_postponed = confirm_by_collection(&mut decision, memory, collected, toleration, now);
        let mut kept_memory = decision.memory;
        app_requeue = decision.requeue_after;
        for cluster in decision.evict {
            let mut opts = app_failover_options(&app, &cluster, toleration);
            // TM-10 / GE-8.6: the state is read from the status collected from the cluster;
            // without it the eviction waits (Karmada returns an error and retries).
            match state_for_eviction(&app.state_preservation, &status.aggregated_status, &cluster) {
                Ok(state) => {
                    opts.preserved_label_state = state;
                    graceful_evict_cluster(&mut spec, &cluster, &opts);
                    app_evicted.push(cluster);
                }
                Err(e) => {
                    if let Some(first) = memory.get(&cluster) {
                        kept_memory.insert(cluster.clone(), *first);
                    }
                    app_postponed.push((cluster, e.to_string()));
                    app_requeue = min_opt(app_requeue, Some(STATE_RETRY));
                }
            }
        }
        if !app_evicted.is_empty() {
            // The write bumps the generation: the scheduler has not seen it yet.
            has_scheduled = false;
        }
        new_memory = Some(kept_memory).filter(|m| !m.is_empty());
    }

    // GE-3 / GE-4 with A6.
    let opts = AssessOptions {
        now,
        timeouts: Timeouts::Default(default_timeout),
        schedule_result: &spec.clusters,
        observed_status: &status.aggregated_status,
        has_scheduled,
        // I1a: health counts only if it was aggregated for this very generation.
        observed_status_current: status.aggregated_status_observed_generation
            == binding.meta.generation,
        last_scheduled: status.last_scheduled_time,
        // GE-4.7: a replacement short of replicas keeps the old copy until its timeout
        unschedulable_replicas: status.unschedulable_replicas,
    };
    let assessment = assess_tasks(&spec.graceful_eviction_tasks, &opts);
    // GE-6; A6: with no target nothing times out, so only a binding change matters.
    let retry = if spec.clusters.is_empty() {
        None
    } else {
        next_retry(&assessment.kept, &opts)
    };
    let requeue = min_opt(retry, app_requeue).map(|d| d.max(MIN_REQUEUE));

    // A6: ReplacementPending while tasks are kept and nothing replaces them.
    let mut conditions = status.conditions.clone();
    let replacement_pending = !assessment.kept.is_empty() && spec.clusters.is_empty();
    if replacement_pending {
        let kept: Vec<&str> = assessment
            .kept
            .iter()
            .map(|t| t.from_cluster.as_str())
            .collect();
        set_condition(
            &mut conditions,
            Condition {
                type_: CONDITION_REPLACEMENT_PENDING.into(),
                status: ConditionStatus::True,
                reason: REASON_NO_REPLACEMENT_FITS.into(),
                message: format!(
                    "no target cluster fits; the workload keeps running on {} until a \
                     replacement is placed",
                    kept.join(", ")
                ),
                last_transition_time: None,
            },
            now,
        );
    } else if conditions
        .iter()
        .any(|c| c.type_ == CONDITION_REPLACEMENT_PENDING && c.status == ConditionStatus::True)
    {
        let (reason, message) = if spec.clusters.is_empty() {
            (REASON_NO_EVICTION_PENDING, "no eviction task is left")
        } else {
            (
                REASON_REPLACEMENT_SCHEDULED,
                "a replacement target has been placed",
            )
        };
        set_condition(
            &mut conditions,
            Condition {
                type_: CONDITION_REPLACEMENT_PENDING.into(),
                status: ConditionStatus::False,
                reason: reason.into(),
                message: message.into(),
                last_transition_time: None,
            },
            now,
        );
    }

    let tasks = assessment.kept.clone();
    let spec_changed =
        spec.clusters != binding.spec.clusters || tasks != binding.spec.graceful_eviction_tasks;
    let status_changed = conditions != status.conditions;
    Plan {
        clusters: spec.clusters,
        tasks,
        conditions,
        assessment,
        app_evicted,
        app_postponed,
        app_memory: new_memory,
        requeue,
        replacement_pending,
        spec_changed,
        status_changed,
        has_scheduled,
    }
}

/// A sentence for a verdict (events, logs, `Assess`).
pub fn describe(verdict: TaskVerdict) -> &'static str {
    match verdict {
        TaskVerdict::Stamped => "GE-3.1: new task, creationTimestamp stamped; assessed next time",
        TaskVerdict::Suppressed => {
            "GE-4.1: suppressDeletion=true keeps the old copy until a human decides"
        }
        TaskVerdict::Released => "GE-4.1: suppressDeletion=false releases the old copy",
        TaskVerdict::TimedOut => "GE-4.2: the grace period is over",
        TaskVerdict::ReplacementHealthy => "GE-4.3: every new target reports Healthy",
        TaskVerdict::NoReplacement => {
            "A6: the binding has no target cluster; the old copy keeps serving"
        }
        TaskVerdict::Waiting => {
            "GE-4.4: waiting for the new targets to become Healthy or the grace period to end"
        }
        TaskVerdict::Rescheduled => {
            "A6: the cluster is a target again; it is never both a target and a task"
        }
        TaskVerdict::ReplacementShort => {
            "GE-4.7: the new targets hold only part of the replicas (no room for the rest); \
             the old copy serves until the rest is placed and Healthy or the grace period ends"
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use flotilla_core::types::{
        AggregatedStatusItem, ApplicationFailoverBehavior, FailoverBehavior, ResourceHealth,
    };

    fn task(cluster: &str, created: Option<i64>) -> GracefulEvictionTask {
        GracefulEvictionTask {
            from_cluster: cluster.into(),
            purge_mode: PurgeMode::Gracefully,
            producer: "TaintManager".into(),
            reason: "TaintUntolerated".into(),
            creation_timestamp: created.map(Time::from_secs),
            ..Default::default()
        }
    }

    fn item(cluster: &str, health: ResourceHealth) -> AggregatedStatusItem {
        AggregatedStatusItem {
            cluster_name: cluster.into(),
            applied: true,
            health,
            ..Default::default()
        }
    }

    fn binding(
        clusters: &[&str],
        tasks: Vec<GracefulEvictionTask>,
        status: Vec<AggregatedStatusItem>,
    ) -> ResourceBinding {
        let mut b = ResourceBinding::default();
        b.meta.generation = 2;
        b.status.scheduler_observed_generation = 2;
        b.spec.clusters = clusters.iter().map(|c| TargetCluster::new(*c, 1)).collect();
        b.spec.graceful_eviction_tasks = tasks;
        b.status.aggregated_status = status;
        b
    }

    const TIMEOUT: Duration = Duration::from_secs(600);

    /// A binding on m1 (Unhealthy) and m2 (Healthy) with application failover `app`.
    fn unhealthy_m1(app: ApplicationFailoverBehavior) -> ResourceBinding {
        let mut b = binding(
            &["m1", "m2"],
            vec![],
            vec![
                item("m1", ResourceHealth::Unhealthy),
                item("m2", ResourceHealth::Healthy),
            ],
        );
        b.spec.failover = Some(FailoverBehavior {
            cluster: None,
            application: Some(app),
        });
        b
    }

    /// A pass that began just after 30 s and is current until 33.3 s (GE-8.7).
    fn collected(_: &str) -> Option<Collection> {
        Some(Collection {
            started: Time::from_millis(30_200),
            finished: Time::from_millis(30_300),
            period: Duration::from_secs(1),
        })
    }

    fn app(memory: &BTreeMap<String, Time>) -> Option<AppInputs<'_>> {
        Some(AppInputs {
            memory,
            collected: &collected,
        })
    }

    #[test]
    fn ge_3_1_stamps_and_requeues_at_the_deadline() {
        let b = binding(&["m2"], vec![task("m1", None)], vec![]);
        let p = plan(&b, None, TIMEOUT, Time::from_secs(100));
        assert_eq!(p.tasks[0].creation_timestamp, Some(Time::from_secs(100)));
        assert!(p.spec_changed);
        assert_eq!(p.requeue, Some(TIMEOUT));
    }

    #[test]
    fn a6_empty_placement_sets_and_clears_replacement_pending() {
        let b = binding(&[], vec![task("m1", Some(0))], vec![]);
        let p = plan(&b, None, TIMEOUT, Time::from_secs(10_000));
        assert_eq!(p.tasks.len(), 1, "kept past the timeout");
        assert!(p.replacement_pending);
        assert_eq!(p.requeue, None, "nothing times out without a target");
        let c = &p.conditions[0];
        assert_eq!(
            (c.type_.as_str(), c.status, c.reason.as_str()),
            (
                CONDITION_REPLACEMENT_PENDING,
                ConditionStatus::True,
                REASON_NO_REPLACEMENT_FITS
            )
        );
        assert!(c.message.contains("m1"), "{}", c.message);
        // a target appears: condition False, task waits for health
        let mut b2 = binding(&["m2"], vec![task("m1", Some(0))], vec![]);
        b2.status.conditions = p.conditions.clone();
        b2.status.last_scheduled_time = Some(Time::from_secs(10_000));
        let p2 = plan(&b2, None, TIMEOUT, Time::from_secs(10_001));
        assert!(!p2.replacement_pending);
        assert_eq!(p2.tasks.len(), 1);
        assert_eq!(p2.conditions[0].status, ConditionStatus::False);
        assert_eq!(p2.conditions[0].reason, REASON_REPLACEMENT_SCHEDULED);
        assert!(p2.status_changed && !p2.spec_changed);
    }

    #[test]
    fn ge_8_application_failover_evicts_with_producer_and_purge_mode() {
        let b = unhealthy_m1(ApplicationFailoverBehavior {
            toleration_seconds: Some(30),
            purge_mode: Some(PurgeMode::Never),
            ..Default::default()
        });
        let first = plan(&b, app(&BTreeMap::new()), TIMEOUT, Time::from_secs(0));
        assert!(first.app_evicted.is_empty());
        assert_eq!(first.requeue, Some(Duration::from_secs(30)));
        let memory = first.app_memory.clone().unwrap();
        let p = plan(&b, app(&memory), TIMEOUT, Time::from_secs(31));
        assert_eq!(p.app_evicted, vec!["m1".to_string()]);
        assert_eq!(p.clusters, vec![TargetCluster::new("m2", 1)]);
        let t = &p.tasks[0];
        assert_eq!(
            (
                t.producer.as_str(),
                t.reason.as_str(),
                t.suppress_deletion,
                t.grace_period_seconds,
                t.creation_timestamp
            ),
            (
                PRODUCER_APPLICATION_FAILOVER,
                REASON_APPLICATION_FAILURE,
                Some(true),
                None,
                Some(Time::from_secs(31))
            )
        );
        assert!(!p.has_scheduled);
        // Gracefully → gracePeriodSeconds default 600 (PD-1.5)
        let opts = app_failover_options(
            &ApplicationFailoverBehavior::default(),
            "m1",
            DEFAULT_APP_TOLERATION_SECONDS,
        );
        assert_eq!(
            (
                opts.purge_mode,
                opts.grace_period_seconds,
                opts.suppress_deletion
            ),
            (PurgeMode::Gracefully, Some(600), None)
        );
    }

    #[test]
    fn ge_8_6_state_is_preserved_on_the_task_or_the_eviction_waits_for_it() {
        let mut b = unhealthy_m1(ApplicationFailoverBehavior {
            toleration_seconds: Some(30),
            purge_mode: Some(PurgeMode::Directly),
            state_preservation: vec![flotilla_core::types::StatePreservationRule {
                alias_label_name: "app.io/epoch".into(),
                json_path: "{ .epoch }".into(),
            }],
            ..Default::default()
        });
        let memory = BTreeMap::from([("m1".to_owned(), Time::from_secs(0))]);
        // TM-10.2: m1's status was never collected: due, but postponed, memory kept
        let p = plan(&b, app(&memory), TIMEOUT, Time::from_secs(31));
        assert!(p.app_evicted.is_empty());
        assert_eq!(p.app_postponed.len(), 1, "{:?}", p.app_postponed);
        assert!(p.app_postponed[0].1.contains("not yet been collected"));
        assert_eq!(p.app_memory, Some(memory.clone()));
        assert_eq!(p.requeue, Some(STATE_RETRY));
        assert!(!p.spec_changed);
        // collected: evicted, the task carries the state and the targets before
        b.status.aggregated_status[0].status = r#"{"epoch":"7","replicas":1}"#.into();
        let p = plan(&b, app(&memory), TIMEOUT, Time::from_secs(32));
        assert_eq!(p.app_evicted, vec!["m1".to_string()]);
        let t = &p.tasks[0];
        assert_eq!(t.preserved_label_state["app.io/epoch"], "7");
        assert_eq!(t.clusters_before_failover, ["m1", "m2"]);
    }
}
