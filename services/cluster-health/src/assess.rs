//! The decision for one cluster at one instant: observation → Ready condition → taints.
//! Pure (no I/O, no clock); the controller and the `Assess` RPC both call [`assess`].
//!
//! ```text
//!   observation (probe, or the probe of a fresh heartbeat)
//!     └─ CH-3 observed_ready_condition ─ CH-4 adjust_ready_condition (threshold memory, A9)
//!          └─ CH-5.5 set_condition (write only on change); CH-5.2/5.3 collected status
//!   CH-9 monitor_cluster (Pull: Ready=Unknown after the grace period without heartbeats)
//!   taints: CH-11 NoSchedule + CH-10 NoExecute (auto mode, A1) + CH-15 terminating (A2)
//!           ─ CH-12 set_cluster_taints ─ CH-16..18 apply_taint_policies
//!   requeue: the earliest of the CH-4 threshold, the CH-10 timeout and the CH-9 grace
//! ```

use std::time::Duration;

use flotilla_core::Time;
use flotilla_core::health::{
    MonitorEntry, MonitorGrace, ProbeOutcome, ThresholdState, Thresholds, adjust_ready_condition,
    monitor_cluster, observed_ready_condition, set_condition, threshold_deadline,
};
use flotilla_core::taint::{
    ReadyObservation, no_execute_deadline, no_execute_taints_for, no_schedule_taints_for,
    set_cluster_taints, terminating_taint_for,
};
use flotilla_core::taint_policy::apply_taint_policies;
use flotilla_core::types::{
    CONDITION_READY, Cluster, ClusterTaintPolicy, Condition, ConditionStatus, SyncMode, Taint,
    TaintEffect, find_condition,
};
use flotilla_proto::ConvertError;
use flotilla_proto::v1;

/// The condition type CH-5.3 sets when the member's API enablements were collected.
pub const CONDITION_COMPLETE_API_ENABLEMENTS: &str = "CompleteAPIEnablements";

/// Who adds NoExecute taints on failure (A1, `--no-execute-taints`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum NoExecuteTaints {
    /// cluster-health adds `not-ready`/`unreachable` NoExecute after
    /// `--failover-eviction-timeout` (Karmada v1.5, CH-10): failover out of the box.
    #[default]
    Auto,
    /// Only ClusterTaintPolicies (CH-16..18) and operators add NoExecute taints (Karmada
    /// latest).
    Policy,
}

/// The timers and switches of the rules (flags of the service).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Options {
    /// `--cluster-success-threshold` / `--cluster-failure-threshold` (30s each, CH-4).
    pub thresholds: Thresholds,
    /// `--cluster-startup-grace-period` (60s) / `--cluster-monitor-grace-period` (40s), CH-9.
    pub grace: MonitorGrace,
    /// `--failover-eviction-timeout` (5m, CH-10).
    pub failover_eviction_timeout: Duration,
    /// `--no-execute-taints` (A1).
    pub no_execute: NoExecuteTaints,
    /// `--cluster-monitor-period` (5s, CH-8): how often the store's own health is checked (the
    /// pulse, A13). A Pull cluster is looked at its deadlines and at least once per monitor
    /// grace period, not every monitor period (CH-8).
    pub monitor_period: Duration,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            thresholds: Thresholds::default(),
            grace: MonitorGrace::default(),
            failover_eviction_timeout: Duration::from_secs(300),
            no_execute: NoExecuteTaints::Auto,
            monitor_period: Duration::from_secs(5),
        }
    }
}

/// What cluster-health remembers of one cluster between evaluations (lost on restart, as in
/// Karmada, except what the heartbeat record and the stored conditions carry).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Memory {
    /// CH-4 threshold memory.
    pub threshold: Option<ThresholdState>,
    /// CH-9 monitor memory.
    pub monitor: Option<MonitorEntry>,
}

/// What the member last told us: a Push probe, or the probe carried by a heartbeat.
#[derive(Clone, Debug, PartialEq)]
pub struct Observation {
    /// CH-2 outcome.
    pub outcome: ProbeOutcome,
    /// Details (e.g. the error or HTTP status).
    pub message: String,
    /// The status collected from a healthy member (CH-5.2): API enablements, version,
    /// resource summary. `None` when not collected (or collection failed).
    pub collected: Option<v1::ClusterStatus>,
}

/// Inputs of [`assess`].
#[derive(Clone, Debug)]
pub struct Inputs<'a> {
    /// The stored cluster.
    pub cluster: &'a v1::Cluster,
    /// The latest observation; `None` when there is none.
    pub observation: Option<&'a Observation>,
    /// Pull: when the last heartbeat was recorded.
    pub last_heartbeat: Option<Time>,
    /// Overrides the start of the CH-10.1 timeout (default: the Ready condition's
    /// lastTransitionTime).
    pub ready_transition: Option<Time>,
    /// The memory from the previous evaluation.
    pub memory: Memory,
    /// A13: when this replica last began to observe (its start, or the end of an outage of
    /// its store). No grace period counts from before it. `Time::EPOCH` for a dry run that
    /// assumes uninterrupted observation.
    pub observing_since: Time,
    /// Every ClusterTaintPolicy.
    pub policies: &'a [ClusterTaintPolicy],
    /// Timers and switches.
    pub options: &'a Options,
    /// Evaluation time.
    pub now: Time,
}

/// What [`assess`] decided.
#[derive(Clone, Debug, PartialEq)]
pub struct Decision {
    /// The cluster's status after the decision (conditions, collected fields).
    pub status: v1::ClusterStatus,
    /// The Ready condition after the decision.
    pub ready: Option<Condition>,
    /// Whether `status` differs from the stored one.
    pub status_changed: bool,
    /// CH-5.2: the member is online, healthy and Ready, so its status is collected.
    pub collect: bool,
    /// The taints after the decision.
    pub taints: Vec<Taint>,
    /// Whether `taints` differ from the stored ones.
    pub taints_changed: bool,
    /// Taints added (by key and effect).
    pub added: Vec<Taint>,
    /// Taints removed (by key and effect).
    pub removed: Vec<Taint>,
    /// The memory to keep.
    pub memory: Memory,
    /// When to evaluate again without new input; `None` = only on new input.
    pub requeue_after: Option<Duration>,
    /// Why, one line per rule that applied.
    pub reasons: Vec<String>,
}

fn same_condition_set(a: &[Condition], b: &[Condition]) -> bool {
    a.len() == b.len() && a.iter().all(|c| b.contains(c))
}

fn taint_str(t: &Taint) -> String {
    if t.value.is_empty() {
        format!("{}:{}", t.key, t.effect.as_str())
    } else {
        format!("{}={}:{}", t.key, t.value, t.effect.as_str())
    }
}

fn has_taint(taints: &[Taint], key: &str, effect: TaintEffect) -> bool {
    taints.iter().any(|t| t.key == key && t.effect == effect)
}

/// Evaluates the rules for one cluster. Errors only when the stored cluster does not convert.
pub fn assess(inputs: Inputs<'_>) -> Result<Decision, ConvertError> {
    let Inputs {
        cluster: wire,
        observation,
        last_heartbeat,
        ready_transition,
        memory,
        observing_since,
        policies,
        options,
        now,
    } = inputs;
    let cluster = Cluster::try_from(wire.clone())?;
    let mut reasons = Vec::new();
    let mut memory = memory;
    let mut conditions = cluster.status.conditions.clone();
    let current_ready = cluster.ready().cloned();
    let pull = cluster.spec.sync_mode == SyncMode::Pull;
    let grace = options.grace;

    // A Pull cluster's observation is the probe of its last heartbeat, valid only while that
    // heartbeat is within the grace period; after that only the monitor speaks (CH-9).
    let observation = match observation {
        Some(_) if pull && last_heartbeat.is_some_and(|hb| now > hb + grace.monitor) => {
            reasons.push(
                "CH-9: the last heartbeat is older than the monitor grace period; its probe is \
                 no longer an observation"
                    .to_owned(),
            );
            None
        }
        o => o,
    };

    let mut collect = false;
    let mut collected_changed = false;
    let mut status = wire.status.clone().unwrap_or_default();
    if let Some(o) = observation {
        // CH-3
        let observed = observed_ready_condition(o.outcome);
        reasons.push(format!(
            "CH-3: observed Ready={} ({}): {}",
            observed.status.as_str(),
            observed.reason,
            if o.message.is_empty() {
                &observed.message
            } else {
                &o.message
            }
        ));
        // CH-4 (A9: probes and heartbeats alike). Deliberate difference from CH-4.1: on
        // first sight of a cluster that already has a Ready condition the memory starts from
        // that condition, so that a restart or a new leader does not let a blip through
        // undamped (I9). Without a Ready condition CH-4.2 applies as in Karmada.
        let seeded = memory.threshold.or_else(|| {
            current_ready.as_ref().map(|r| ThresholdState {
                observed: r.status,
                since: None,
            })
        });
        let (state, adjusted) = adjust_ready_condition(
            seeded,
            current_ready.as_ref(),
            observed.clone(),
            now,
            options.thresholds,
        );
        memory.threshold = Some(state);
        if adjusted.status != observed.status {
            let until = threshold_deadline(state, current_ready.as_ref(), options.thresholds);
            reasons.push(format!(
                "CH-4: Ready stays {} until {} (the {} threshold has not passed since {})",
                adjusted.status.as_str(),
                until.map_or_else(|| "?".to_owned(), |t| t.to_string()),
                if observed.status == ConditionStatus::True {
                    "success"
                } else {
                    "failure"
                },
                state
                    .since
                    .map_or_else(|| "?".to_owned(), |t| t.to_string()),
            ));
        }
        // CH-5.2: collect only from an online, healthy member whose adjusted Ready is True.
        collect = o.outcome.online && o.outcome.healthy && adjusted.status == ConditionStatus::True;
        set_condition(&mut conditions, adjusted, now); // CH-5.5
        if collect && let Some(c) = &o.collected {
            // CH-5.3: Complete when something was collected, Empty otherwise.
            let complete = !c.api_enablements.is_empty();
            set_condition(
                &mut conditions,
                Condition {
                    type_: CONDITION_COMPLETE_API_ENABLEMENTS.into(),
                    status: if complete {
                        ConditionStatus::True
                    } else {
                        ConditionStatus::False
                    },
                    reason: if complete { "Complete" } else { "Empty" }.into(),
                    message: String::new(),
                    last_transition_time: None,
                },
                now,
            );
            if status.api_enablements != c.api_enablements
                || status.kubernetes_version != c.kubernetes_version
                || status.resource_summary != c.resource_summary
            {
                status.api_enablements = c.api_enablements.clone();
                status.kubernetes_version = c.kubernetes_version.clone();
                status.resource_summary = c.resource_summary.clone();
                collected_changed = true;
                reasons.push("CH-5.2: collected API enablements and resource summary".into());
            }
        }
    }

    // CH-9 monitor. A new entry of a Pull cluster starts at its last recorded heartbeat, so
    // that a newly elected replica that was watching all along does not grant a fresh grace
    // period to a cluster that has long been silent (deliberate difference from CH-9.2's
    // `probe = now`); but never before `observing_since` (A13): silence while this replica or
    // its store could not observe is not charged to the member.
    let ready_now = find_condition(&conditions, CONDITION_READY).cloned();
    let created = cluster.meta.creation_timestamp.unwrap_or(now);
    let entry = memory.monitor.take().or_else(|| {
        last_heartbeat.filter(|_| pull).map(|hb| MonitorEntry {
            probe_timestamp: hb.min(now),
            saved_ready: ready_now.clone(),
            last_heartbeat: Some(hb),
        })
    });
    let out = monitor_cluster(
        entry,
        cluster.spec.sync_mode,
        ready_now.as_ref(),
        created,
        last_heartbeat,
        now,
        grace,
        observing_since,
    );
    let mut entry = out.entry;
    if let Some(unknown) = out.write {
        reasons.push(format!(
            "CH-9.5: nothing heard since {} (grace {:?}): Ready=Unknown ({})",
            entry.probe_timestamp,
            if ready_now.is_some() {
                grace.monitor
            } else {
                grace.startup
            },
            unknown.reason
        ));
        set_condition(&mut conditions, unknown, now);
        // A9: silence is an observation too; a resumed heartbeat is damped by the success
        // threshold from now on.
        memory.threshold = Some(ThresholdState {
            observed: ConditionStatus::Unknown,
            since: Some(now),
        });
        entry.saved_ready = find_condition(&conditions, CONDITION_READY).cloned();
    }
    let probe_timestamp = entry.probe_timestamp;
    memory.monitor = Some(entry);

    let ready = find_condition(&conditions, CONDITION_READY).cloned();
    let conditions_changed = !same_condition_set(&conditions, &cluster.status.conditions);
    if conditions_changed {
        status.conditions = conditions
            .iter()
            .cloned()
            .map(v1::Condition::from)
            .collect();
    }
    let status_changed = conditions_changed || collected_changed;

    // Taints.
    let ready_status = ready.as_ref().map(|c| c.status);
    let mut change = no_schedule_taints_for(ready_status); // CH-11
    if !change.add.is_empty() {
        reasons.push(format!(
            "CH-11: Ready {} → {}",
            ready_status.map_or("missing", ConditionStatus::as_str),
            change
                .add
                .iter()
                .map(taint_str)
                .collect::<Vec<_>>()
                .join(", ")
        ));
    }
    let mut deadlines: Vec<Time> = Vec::new();
    if options.no_execute == NoExecuteTaints::Auto
        && let Some(r) = &ready
    {
        // CH-10 (A1): NoExecute once Ready has been bad for the failover eviction timeout.
        let obs = ReadyObservation {
            status: r.status,
            ready_transition_seen: ready_transition.or(r.last_transition_time).unwrap_or(now),
            probe_timestamp,
        };
        let mut no_execute = no_execute_taints_for(obs, now, options.failover_eviction_timeout);
        // A13: never from Ready to NoExecute in one step. When Ready turns bad in this very
        // evaluation, the NoExecute taint waits for the next one (after the first write of
        // the bad condition), so the taint-manager always sees the condition first.
        let turned = current_ready.as_ref().map(|c| c.status) != Some(r.status);
        if turned && !no_execute.add.is_empty() {
            reasons.push(format!(
                "A13: Ready turned {} in this step; the NoExecute taint waits for the next",
                r.status.as_str()
            ));
            no_execute.add.clear();
            deadlines.push(now + Duration::from_millis(1));
        }
        if !no_execute.add.is_empty() {
            reasons.push(format!(
                "CH-10: Ready={} for more than {:?} → {}",
                r.status.as_str(),
                options.failover_eviction_timeout,
                no_execute
                    .add
                    .iter()
                    .map(taint_str)
                    .collect::<Vec<_>>()
                    .join(", ")
            ));
        } else if let Some(at) = no_execute_deadline(obs, options.failover_eviction_timeout) {
            // strictly after the deadline (CH-10: now > transition + timeout)
            let at = at + Duration::from_millis(1);
            if at > now {
                deadlines.push(at);
            }
        }
        change.extend(no_execute);
    }
    let deleting = cluster.meta.deletion_timestamp.is_some();
    if deleting {
        reasons.push(
            "CH-15 / A2: the cluster is being deleted → cluster.karmada.io/terminating:NoExecute"
                .into(),
        );
    }
    change.extend(terminating_taint_for(deleting));
    let existing = &cluster.spec.taints;
    let mut taints = set_cluster_taints(existing, &change, now).unwrap_or_else(|| existing.clone());
    // CH-16..18 on the cluster as it will be (new conditions, controller taints applied).
    let mut view = cluster.clone();
    view.status.conditions = conditions;
    view.spec.taints = taints.clone();
    if let Some(t) = apply_taint_policies(&view, policies, now) {
        reasons.push("CH-17: ClusterTaintPolicies changed the taints".into());
        taints = t;
    }
    let added: Vec<Taint> = taints
        .iter()
        .filter(|t| !has_taint(existing, &t.key, t.effect))
        .cloned()
        .collect();
    let removed: Vec<Taint> = existing
        .iter()
        .filter(|t| !has_taint(&taints, &t.key, t.effect))
        .cloned()
        .collect();
    let taints_changed = taints != *existing;

    // When to look again: a pending CH-4 flip, the CH-10 timeout, the CH-9 grace period.
    if let (Some(state), Some(r)) = (memory.threshold, &ready)
        && observation.is_some()
        && let Some(at) = threshold_deadline(state, Some(r), options.thresholds)
        && at > now
    {
        deadlines.push(at);
    }
    if pull && ready_status != Some(ConditionStatus::Unknown) {
        let g = if ready.is_some() {
            grace.monitor
        } else {
            grace.startup
        };
        deadlines.push(probe_timestamp + g + Duration::from_millis(1));
    }
    let mut requeue_after = deadlines.iter().min().map(|t| t.saturating_since(now));
    if pull {
        // CH-8 (Flotilla): the deadlines above are met exactly, and every change of what a
        // cluster is judged from queues it (its object, its heartbeat's observation, the
        // policies), so a Pull cluster needs no look every monitor period: it gets one at
        // least every monitor grace period, as a safety net. A look every 5 s for each of
        // 1,000 clusters was most of an idle control plane's work (docs/rules.md, CH-8).
        let net = grace.monitor;
        requeue_after = Some(requeue_after.map_or(net, |d| d.min(net)));
    }
    let requeue_after = requeue_after.map(|d| d.max(Duration::from_millis(1)));

    Ok(Decision {
        status,
        ready,
        status_changed,
        collect,
        taints,
        taints_changed,
        added,
        removed,
        memory,
        requeue_after,
        reasons,
    })
}

/// A taint change as one line for logs and events: `+a:NoSchedule -b:NoExecute`.
pub fn describe_taint_change(added: &[Taint], removed: &[Taint]) -> String {
    added
        .iter()
        .map(|t| format!("+{}", taint_str(t)))
        .chain(removed.iter().map(|t| format!("-{}", taint_str(t))))
        .collect::<Vec<_>>()
        .join(" ")
}

#[cfg(test)]
mod tests;
