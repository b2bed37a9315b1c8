//! The taint manager's decisions (TM-3, TM-6, TM-7, TM-9, TM-11) and the eviction rate
//! with its mass-failure brake (A8).

use std::collections::BTreeMap;
use std::time::Duration;

use thiserror::Error;

use crate::time::Time;
use crate::toleration::{TolerationTime, matching_tolerations, min_toleration_time};
use crate::types::{
    FailoverBehavior, GracefulEvictionTask, PRODUCER_TAINT_MANAGER, Placement, PurgeMode,
    REASON_TAINT_UNTOLERATED, ResourceBindingSpec, Taint, TaintEffect, Toleration,
};

/// What to do with a binding on a cluster with NoExecute taints (TM-7), replacing Karmada's
/// `(bool, time.Duration /* -1 = forever */)`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum EvictionDecision {
    /// The taints are tolerated forever (or there are none): nothing to do.
    Tolerate,
    /// Tolerated for now; look again after this long.
    EvictAfter(Duration),
    /// Evict now.
    EvictNow,
}

/// Why a decision could not be made.
#[derive(Clone, Debug, PartialEq, Eq, Error)]
pub enum EvictionError {
    /// TM-7.1: the binding has no applied placement to read tolerations from (A3). The
    /// scheduler has not placed it yet; retry later.
    #[error("binding has no applied placement")]
    NoAppliedPlacement,
}

/// The tolerations TM-7 used for its decision, for `Explain`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EvictionExplanation {
    /// The decision.
    pub decision: EvictionDecision,
    /// The NoExecute taints considered.
    pub taints: Vec<Taint>,
    /// The toleration used for each taint, in taint order (empty when not all tolerated).
    pub used: Vec<Toleration>,
    /// The first taint no toleration covers, if any.
    pub untolerated: Option<Taint>,
}

/// TM-7 `needEviction`: decide from a cluster's taints and the placement the scheduler last
/// applied (A3: never the live policy). `taints` may contain any effect; only NoExecute
/// taints count.
pub fn need_eviction(
    taints: &[Taint],
    applied_placement: Option<&Placement>,
    now: Time,
) -> Result<EvictionExplanation, EvictionError> {
    let placement = applied_placement.ok_or(EvictionError::NoAppliedPlacement)?;
    let no_execute: Vec<Taint> = taints
        .iter()
        .filter(|t| t.effect == TaintEffect::NoExecute)
        .cloned()
        .collect();
    if no_execute.is_empty() {
        return Ok(EvictionExplanation {
            decision: EvictionDecision::Tolerate,
            taints: no_execute,
            used: vec![],
            untolerated: None,
        });
    }
    match matching_tolerations(&no_execute, &placement.cluster_tolerations) {
        Err(untolerated) => Ok(EvictionExplanation {
            decision: EvictionDecision::EvictNow,
            taints: no_execute,
            used: vec![],
            untolerated: Some(untolerated),
        }),
        Ok(used) => {
            let decision = match min_toleration_time(&no_execute, &used, now) {
                TolerationTime::Forever => EvictionDecision::Tolerate,
                TolerationTime::Expired => EvictionDecision::EvictNow,
                TolerationTime::Remaining(d) => EvictionDecision::EvictAfter(d),
            };
            let used = used.into_iter().cloned().collect();
            Ok(EvictionExplanation {
                decision,
                taints: no_execute,
                used,
                untolerated: None,
            })
        }
    }
}

/// TM-3: when to enqueue a (cluster, binding) pair; `None` = not at all.
///
/// A missing applied placement enqueues at once (fail-safe: processing then reports the
/// error and retries).
pub fn enqueue_delay(
    taints: &[Taint],
    applied_placement: Option<&Placement>,
    now: Time,
) -> Option<Duration> {
    match need_eviction(taints, applied_placement, now) {
        Err(EvictionError::NoAppliedPlacement) => Some(Duration::ZERO),
        Ok(e) => match e.decision {
            EvictionDecision::Tolerate => None,
            EvictionDecision::EvictNow => Some(Duration::ZERO),
            EvictionDecision::EvictAfter(d) => Some(d),
        },
    }
}

/// TM-9: the purge mode of a taint eviction. The binding's `failover.cluster.purgeMode`
/// wins (empty → Gracefully); otherwise the controller flag
/// (`--no-execute-taint-eviction-purge-mode`), where only Directly stays Directly.
pub fn resolve_purge_mode(failover: Option<&FailoverBehavior>, flag: PurgeMode) -> PurgeMode {
    match failover.and_then(|f| f.cluster.as_ref()) {
        Some(cluster) => match cluster.purge_mode {
            Some(PurgeMode::Directly) => PurgeMode::Directly,
            _ => PurgeMode::Gracefully,
        },
        None => match flag {
            PurgeMode::Directly => PurgeMode::Directly,
            _ => PurgeMode::Gracefully,
        },
    }
}

/// Options of [`graceful_evict_cluster`] (TM-11).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EvictOptions {
    /// Purge mode of the task.
    pub purge_mode: PurgeMode,
    /// Producer (§1.8).
    pub producer: String,
    /// Reason (§1.8).
    pub reason: String,
    /// Message.
    pub message: String,
    /// Per-task grace period.
    pub grace_period_seconds: Option<i64>,
    /// Suppress deletion (Never).
    pub suppress_deletion: Option<bool>,
    /// Record the current targets in `clusters_before_failover`.
    pub record_clusters_before_failover: bool,
    /// TM-10: the preserved label state to record on the task.
    pub preserved_label_state: BTreeMap<String, String>,
    /// W3C trace context to carry to the next service.
    pub trace_context: String,
    /// The task's creation time. Flotilla: the producer stamps it when it appends the task
    /// (TM-11.4), so that graceful eviction need not write the binding again only to stamp
    /// it (GE-3.1 still stamps a task that arrives without one). `None` leaves it to GE-3.1,
    /// as Karmada does.
    pub created: Option<Time>,
}

impl EvictOptions {
    /// The options of a taint-manager eviction (§1.8: producer TaintManager, reason
    /// TaintUntolerated), its task created at `now`.
    pub fn taint_manager(purge_mode: PurgeMode, message: impl Into<String>, now: Time) -> Self {
        EvictOptions {
            purge_mode,
            producer: PRODUCER_TAINT_MANAGER.into(),
            reason: REASON_TAINT_UNTOLERATED.into(),
            message: message.into(),
            grace_period_seconds: None,
            suppress_deletion: None,
            record_clusters_before_failover: false,
            preserved_label_state: BTreeMap::new(),
            trace_context: String::new(),
            created: Some(now),
        }
    }
}

/// The result of [`graceful_evict_cluster`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EvictOutcome {
    /// TM-11.1: the cluster is not a target; nothing changed.
    NotTargeted,
    /// The cluster was removed and a task appended.
    Evicted,
    /// TM-11.3: removed from the targets; a task for it already existed (A7: never two).
    RemovedTaskExisted,
}

/// TM-11 `GracefulEvictCluster`: move `cluster` from `spec.clusters` to a graceful eviction
/// task. One CAS write of the whole binding carries both changes (docs/design.md §3), so a
/// cluster is never both a target and a task (A7).
pub fn graceful_evict_cluster(
    spec: &mut ResourceBindingSpec,
    cluster: &str,
    opts: &EvictOptions,
) -> EvictOutcome {
    let Some(pos) = spec.clusters.iter().position(|t| t.name == cluster) else {
        return EvictOutcome::NotTargeted;
    };
    let before: Vec<String> = if opts.record_clusters_before_failover {
        spec.clusters.iter().map(|t| t.name.clone()).collect()
    } else {
        vec![]
    };
    let removed = spec.clusters.remove(pos);
    if spec
        .graceful_eviction_tasks
        .iter()
        .any(|t| t.from_cluster == cluster)
    {
        return EvictOutcome::RemovedTaskExisted;
    }
    spec.graceful_eviction_tasks.push(GracefulEvictionTask {
        from_cluster: cluster.to_string(),
        purge_mode: opts.purge_mode,
        replicas: (removed.replicas > 0).then_some(removed.replicas),
        reason: opts.reason.clone(),
        message: opts.message.clone(),
        producer: opts.producer.clone(),
        grace_period_seconds: opts.grace_period_seconds,
        suppress_deletion: opts.suppress_deletion,
        preserved_label_state: opts.preserved_label_state.clone(),
        clusters_before_failover: before,
        creation_timestamp: opts.created,
        trace_context: opts.trace_context.clone(),
    });
    EvictOutcome::Evicted
}

/// TM-11.5 `RemoveCluster`: drop the target without a task. Returns whether it was there.
pub fn remove_cluster(spec: &mut ResourceBindingSpec, cluster: &str) -> bool {
    let before = spec.clusters.len();
    spec.clusters.retain(|t| t.name != cluster);
    spec.clusters.len() != before
}

// ---------------------------------------------------------------------------------------
// A8: eviction rate and mass-failure brake
// ---------------------------------------------------------------------------------------

/// Flags of A8.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct EvictionRateConfig {
    /// `--eviction-rate`: bindings per second while few clusters are unhealthy; `None` =
    /// unlimited (Flotilla's default, A12).
    pub primary_rate: Option<f64>,
    /// `--secondary-eviction-rate` (default 0.01/s) once at least `unhealthy_threshold` of
    /// the clusters are unhealthy.
    pub secondary_rate: f64,
    /// `--unhealthy-cluster-threshold` (default 0.55), a fraction of all clusters.
    pub unhealthy_threshold: f64,
}

impl Default for EvictionRateConfig {
    fn default() -> Self {
        EvictionRateConfig {
            primary_rate: None,
            secondary_rate: 0.01,
            unhealthy_threshold: 0.55,
        }
    }
}

/// Which rate applies now.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum EvictionRate {
    /// Few clusters are unhealthy: the primary rate (`None` = unlimited).
    Normal(Option<f64>),
    /// Many clusters are unhealthy: the secondary rate.
    Secondary(f64),
    /// Every cluster is unhealthy (or there are none): the control plane is the likelier one
    /// to be cut off, so nothing is evicted.
    Halted,
    /// A disruption ended a short while ago: the secondary rate holds for the stabilisation
    /// window, so that clusters coming back a moment later than the others lose nothing
    /// (A8, "no herd").
    Stabilising(f64),
}

impl EvictionRate {
    /// A short reason for metrics and events.
    pub fn reason(&self) -> &'static str {
        match self {
            EvictionRate::Normal(_) => "Normal",
            EvictionRate::Secondary(_) => "PartialDisruption",
            EvictionRate::Halted => "FullDisruption",
            EvictionRate::Stabilising(_) => "Stabilising",
        }
    }

    /// Evictions per second; `None` = unlimited; `Some(0.0)` = none.
    pub fn per_second(&self) -> Option<f64> {
        match *self {
            EvictionRate::Normal(r) => r,
            EvictionRate::Secondary(r) | EvictionRate::Stabilising(r) => Some(r),
            EvictionRate::Halted => Some(0.0),
        }
    }
}

/// A8: the eviction rate for a fleet of `total` clusters of which `unhealthy` are not Ready
/// (Kubernetes node-lifecycle style, beyond Karmada's fixed 0.5/s).
pub fn eviction_rate(total: usize, unhealthy: usize, cfg: &EvictionRateConfig) -> EvictionRate {
    if total == 0 || unhealthy >= total {
        return EvictionRate::Halted;
    }
    // Compare in integers where possible to avoid float edge effects at the threshold.
    let fraction = unhealthy as f64 / total as f64;
    if unhealthy > 0 && fraction >= cfg.unhealthy_threshold {
        EvictionRate::Secondary(cfg.secondary_rate)
    } else {
        EvictionRate::Normal(cfg.primary_rate)
    }
}

/// A8 "no herd": what the brake remembers between observations of the fleet.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct BrakeMemory {
    /// The rate the fleet's health called for at the last observation (`None`: never seen).
    pub observed: Option<EvictionRate>,
    /// Until when evictions stay at the secondary rate after a disruption ended.
    pub stabilising_until: Option<Time>,
    /// When the last disruption ended: the toleration clocks of NoExecute taints added before
    /// it restart there ([`restart_toleration_clocks`]).
    pub disruption_ended_at: Option<Time>,
    /// How disrupted the fleet was at the last observation (0 none, 1 partial, 2 full).
    pub level: u8,
}

/// How disrupted a fleet is: 0 none, 1 partial (secondary rate), 2 full (halted). A fleet
/// with no judged cluster is not disrupted (it is halted only because there is nothing to
/// judge), so a joining fleet ends no disruption when its clusters turn Ready.
fn disruption_level(total: usize, unhealthy: usize, cfg: &EvictionRateConfig) -> u8 {
    match eviction_rate(total, unhealthy, cfg) {
        EvictionRate::Halted if total > 0 => 2,
        EvictionRate::Secondary(_) => 1,
        _ => 0,
    }
}

/// A8: records the fleet's health now: `total` clusters judged (with a Ready condition), of
/// which `unhealthy` are not Ready. Returns `true` when a disruption just ended — from full to
/// partial or none, or from partial to none: then the toleration clocks restart at `now` and
/// the secondary rate holds until `now + window` (the node-lifecycle controller's behaviour
/// when a zone leaves a disruption; Flotilla's A8).
pub fn observe_fleet(
    memory: &mut BrakeMemory,
    total: usize,
    unhealthy: usize,
    cfg: &EvictionRateConfig,
    now: Time,
    window: Duration,
) -> bool {
    let level = disruption_level(total, unhealthy, cfg);
    let ended = memory.level > level;
    memory.level = level;
    if ended {
        memory.disruption_ended_at = Some(now);
        memory.stabilising_until = Some(now + window);
    }
    memory.observed = Some(eviction_rate(total, unhealthy, cfg));
    ended
}

/// A8: the rate in force at `now`: halted before the fleet was seen; the secondary rate
/// (`Stabilising`) while a stabilisation window runs and the fleet alone would allow more.
pub fn effective_rate(memory: &BrakeMemory, now: Time, cfg: &EvictionRateConfig) -> EvictionRate {
    match memory.observed {
        None => EvictionRate::Halted,
        Some(EvictionRate::Normal(_) | EvictionRate::Stabilising(_))
            if memory.stabilising_until.is_some_and(|until| now < until) =>
        {
            EvictionRate::Stabilising(cfg.secondary_rate)
        }
        Some(rate) => rate,
    }
}

/// A8: toleration clocks restart when a disruption ends: a NoExecute taint added before
/// `ended_at` counts as added then (its `timeAdded` kept through the halt would otherwise
/// release every parked eviction at once). Taints added later, and taints without a
/// `timeAdded`, are unchanged.
pub fn restart_toleration_clocks(taints: &[Taint], ended_at: Option<Time>) -> Vec<Taint> {
    let Some(ended_at) = ended_at else {
        return taints.to_vec();
    };
    taints
        .iter()
        .map(|t| {
            let mut t = t.clone();
            if let Some(added) = t.time_added
                && added < ended_at
            {
                t.time_added = Some(ended_at);
            }
            t
        })
        .collect()
}

/// F6 / I12 (Flotilla's rule): toleration clocks run on the evaluator's own clock. A
/// NoExecute taint's `timeAdded` is written by cluster-health with *its* clock; comparing it
/// with the taint-manager's `now` would let a skewed clock evict early (or late). So each taint
/// counts as added when this replica first saw it (`first_seen`, read off the same clock as
/// `now`), or now if it has not been seen yet. A replica that starts after the taint was added
/// counts from its own start: a late eviction at worst, never an early one. (Karmada compares
/// the writer's `timeAdded` with the reader's clock, TM-8.3.)
pub fn local_toleration_clocks(
    taints: &[Taint],
    first_seen: impl Fn(&Taint) -> Option<Time>,
    now: Time,
) -> Vec<Taint> {
    taints
        .iter()
        .map(|t| {
            let mut t = t.clone();
            if t.effect == TaintEffect::NoExecute {
                t.time_added = Some(first_seen(&t).unwrap_or(now));
            }
            t
        })
        .collect()
}

/// A token bucket driven by the caller's clock (pure: `now` is passed in).
#[derive(Clone, Debug, PartialEq)]
pub struct TokenBucket {
    tokens: f64,
    last: Option<Time>,
}

impl Default for TokenBucket {
    fn default() -> Self {
        Self::new()
    }
}

// === impl TokenBucket ===

impl TokenBucket {
    /// A bucket that starts with one token.
    pub fn new() -> Self {
        TokenBucket {
            tokens: 1.0,
            last: None,
        }
    }

    /// A bucket with no token at `now`: the first one comes after `1 / rate` (the start of a
    /// stabilisation window).
    pub fn empty(now: Time) -> Self {
        TokenBucket {
            tokens: 0.0,
            last: Some(now),
        }
    }

    /// Take one token at `rate` per second with capacity `burst` (≥ 1). `Ok(())` if taken;
    /// otherwise `Err(wait)` with the time until the next token. A rate of `None` never
    /// limits; a rate of 0 never yields a token (`Err(Duration::MAX)`).
    pub fn try_take(&mut self, now: Time, rate: Option<f64>, burst: f64) -> Result<(), Duration> {
        let Some(rate) = rate else { return Ok(()) };
        let burst = burst.max(1.0);
        if let Some(last) = self.last {
            let elapsed = now.saturating_since(last).as_secs_f64();
            self.tokens = (self.tokens + elapsed * rate).min(burst);
        }
        self.last = Some(now);
        if self.tokens >= 1.0 {
            self.tokens -= 1.0;
            return Ok(());
        }
        if rate <= 0.0 {
            return Err(Duration::MAX);
        }
        Err(Duration::from_secs_f64((1.0 - self.tokens) / rate))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::types::{ClusterFailoverBehavior, TargetCluster, TolerationOperator};
    use proptest::prelude::*;

    fn ne(key: &str, added: Option<i64>) -> Taint {
        Taint::new(key, TaintEffect::NoExecute, added.map(Time::from_secs))
    }

    fn tol(key: &str, secs: Option<i64>) -> Toleration {
        Toleration {
            key: key.into(),
            operator: TolerationOperator::Exists,
            effect: Some(TaintEffect::NoExecute),
            toleration_seconds: secs,
            ..Default::default()
        }
    }

    fn placement(tols: Vec<Toleration>) -> Placement {
        Placement {
            cluster_tolerations: tols,
            ..Default::default()
        }
    }

    #[test]
    fn tm_7_need_eviction_table() {
        let now = Time::from_secs(1000);
        let ns = Taint::new("a", TaintEffect::NoSchedule, Some(Time::from_secs(0)));
        use EvictionDecision::{EvictAfter, EvictNow, Tolerate};
        let after = |secs| EvictAfter(Duration::from_secs(secs));
        // (case, (the one taint, the placement's tolerations, decision))
        let cases: Vec<(&str, (Taint, Vec<Toleration>, EvictionDecision))> = vec![
            (
                "7.3 no NoExecute taints → tolerate",
                (ns.clone(), vec![], Tolerate),
            ),
            (
                "7.4 untolerated → now",
                (ne("a", Some(990)), vec![tol("b", None)], EvictNow),
            ),
            (
                "7.4 no tolerations at all → now",
                (ne("a", Some(990)), vec![], EvictNow),
            ),
            (
                "7.5 forever",
                (ne("a", Some(990)), vec![tol("a", None)], Tolerate),
            ),
            (
                "7.5 tolerationSeconds 0 → now",
                (ne("a", Some(1000)), vec![tol("a", Some(0))], EvictNow),
            ),
            (
                "7.5 remaining",
                (ne("a", Some(990)), vec![tol("a", Some(300))], after(290)),
            ),
            (
                "taint without timeAdded never fires",
                (ne("a", None), vec![tol("a", Some(1))], Tolerate),
            ),
            (
                "expired exactly now",
                (ne("a", Some(700)), vec![tol("a", Some(300))], EvictNow),
            ),
        ];
        for (name, (taint, tols, want)) in cases {
            let decision = need_eviction(&[taint], Some(&placement(tols)), now).unwrap();
            assert_eq!(decision.decision, want, "{name}");
        }
        assert_eq!(
            need_eviction(&[ne("a", None)], None, now),
            Err(EvictionError::NoAppliedPlacement)
        );
        let e = need_eviction(
            &[ne("a", Some(990)), ne("b", None)],
            Some(&placement(vec![tol("a", None)])),
            now,
        )
        .unwrap();
        assert_eq!(e.untolerated, Some(ne("b", None)));
    }

    #[test]
    fn tm_3_enqueue_delay_table() {
        let now = Time::from_secs(100);
        assert_eq!(
            enqueue_delay(&[], Some(&placement(vec![])), now),
            None,
            "no taints → skip"
        );
        assert_eq!(
            enqueue_delay(&[ne("a", Some(0))], None, now),
            Some(Duration::ZERO),
            "no placement → now (fail-safe)"
        );
        assert_eq!(
            enqueue_delay(&[ne("a", Some(0))], Some(&placement(vec![])), now),
            Some(Duration::ZERO),
            "untolerated → now"
        );
        assert_eq!(
            enqueue_delay(
                &[ne("a", Some(50))],
                Some(&placement(vec![tol("a", Some(60))])),
                now
            ),
            Some(Duration::from_secs(10))
        );
        assert_eq!(
            enqueue_delay(
                &[ne("a", Some(50))],
                Some(&placement(vec![tol("a", None)])),
                now
            ),
            None,
            "forever → skip"
        );
    }

    #[test]
    fn tm_9_purge_mode_table() {
        let with = |m: Option<PurgeMode>| FailoverBehavior {
            cluster: Some(ClusterFailoverBehavior {
                purge_mode: m,
                ..Default::default()
            }),
            application: None,
        };
        let cases = [
            (
                "binding Directly wins over flag",
                Some(with(Some(PurgeMode::Directly))),
                PurgeMode::Gracefully,
                PurgeMode::Directly,
            ),
            (
                "binding empty → Gracefully even if flag Directly",
                Some(with(None)),
                PurgeMode::Directly,
                PurgeMode::Gracefully,
            ),
            (
                "binding Gracefully",
                Some(with(Some(PurgeMode::Gracefully))),
                PurgeMode::Directly,
                PurgeMode::Gracefully,
            ),
            (
                "no failover → flag Directly",
                None,
                PurgeMode::Directly,
                PurgeMode::Directly,
            ),
            (
                "no failover → flag Gracefully",
                None,
                PurgeMode::Gracefully,
                PurgeMode::Gracefully,
            ),
            (
                "no failover, flag Never → Gracefully",
                None,
                PurgeMode::Never,
                PurgeMode::Gracefully,
            ),
            (
                "failover without cluster → flag",
                Some(FailoverBehavior::default()),
                PurgeMode::Directly,
                PurgeMode::Directly,
            ),
        ];
        for (name, f, flag, want) in cases {
            assert_eq!(resolve_purge_mode(f.as_ref(), flag), want, "{name}");
        }
    }

    #[test]
    fn tm_11_graceful_evict_cluster() {
        let mut spec = ResourceBindingSpec {
            clusters: vec![
                TargetCluster::new("m1", 1),
                TargetCluster::new("m2", 2),
                TargetCluster::new("m3", 0),
            ],
            ..Default::default()
        };
        let opts =
            EvictOptions::taint_manager(PurgeMode::Gracefully, "untolerated", Time::from_secs(7));
        assert_eq!(
            graceful_evict_cluster(&mut spec, "m9", &opts),
            EvictOutcome::NotTargeted
        );
        assert_eq!(
            graceful_evict_cluster(&mut spec, "m2", &opts),
            EvictOutcome::Evicted
        );
        assert_eq!(
            spec.clusters,
            vec![TargetCluster::new("m1", 1), TargetCluster::new("m3", 0)]
        );
        let task = &spec.graceful_eviction_tasks[0];
        assert_eq!(
            (
                task.from_cluster.as_str(),
                task.replicas,
                task.producer.as_str(),
                task.reason.as_str(),
                task.creation_timestamp
            ),
            (
                "m2",
                Some(2),
                PRODUCER_TAINT_MANAGER,
                REASON_TAINT_UNTOLERATED,
                // TM-11.4 (Flotilla): stamped by the producer, not left for GE-3.1
                Some(Time::from_secs(7))
            )
        );
        // replicas copied only when > 0
        assert_eq!(
            graceful_evict_cluster(&mut spec, "m3", &opts),
            EvictOutcome::Evicted
        );
        assert_eq!(spec.graceful_eviction_tasks[1].replicas, None);
        // TM-11.3: an existing task for the cluster → no second task, but the target goes
        spec.clusters.push(TargetCluster::new("m2", 5));
        assert_eq!(
            graceful_evict_cluster(&mut spec, "m2", &opts),
            EvictOutcome::RemovedTaskExisted
        );
        assert_eq!(spec.graceful_eviction_tasks.len(), 2);
        assert!(!spec.clusters.iter().any(|t| t.name == "m2"));
        // clusters_before_failover
        let mut opts2 = opts.clone();
        opts2.record_clusters_before_failover = true;
        assert_eq!(
            graceful_evict_cluster(&mut spec, "m1", &opts2),
            EvictOutcome::Evicted
        );
        assert_eq!(
            spec.graceful_eviction_tasks[2].clusters_before_failover,
            vec!["m1".to_string()]
        );
        // TM-11.5
        spec.clusters.push(TargetCluster::new("m4", 1));
        assert!(remove_cluster(&mut spec, "m4"));
        assert!(!remove_cluster(&mut spec, "m4"));
    }

    #[test]
    fn a8_eviction_rate_table() {
        let cfg = EvictionRateConfig {
            primary_rate: Some(10.0),
            secondary_rate: 0.01,
            unhealthy_threshold: 0.55,
        };
        let cases = [
            ("no clusters → halted", 0, 0, EvictionRate::Halted),
            (
                "healthy fleet → primary",
                10,
                0,
                EvictionRate::Normal(Some(10.0)),
            ),
            (
                "one of ten → primary",
                10,
                1,
                EvictionRate::Normal(Some(10.0)),
            ),
            (
                "just under threshold",
                100,
                54,
                EvictionRate::Normal(Some(10.0)),
            ),
            (
                "exactly at the threshold → secondary",
                100,
                55,
                EvictionRate::Secondary(0.01),
            ),
            (
                "most unhealthy → secondary",
                10,
                9,
                EvictionRate::Secondary(0.01),
            ),
            ("all unhealthy → halted", 10, 10, EvictionRate::Halted),
            ("single cluster down → halted", 1, 1, EvictionRate::Halted),
        ];
        for (name, total, unhealthy, want) in cases {
            assert_eq!(eviction_rate(total, unhealthy, &cfg), want, "{name}");
        }
        assert_eq!(EvictionRate::Halted.per_second(), Some(0.0));
        assert_eq!(
            eviction_rate(3, 1, &EvictionRateConfig::default()).per_second(),
            None,
            "default primary unlimited"
        );
    }

    #[test]
    fn a8_token_bucket() {
        let mut b = TokenBucket::new();
        let t0 = Time::from_secs(0);
        assert_eq!(b.try_take(t0, None, 1.0), Ok(()));
        assert_eq!(b.try_take(t0, Some(2.0), 1.0), Ok(()));
        assert_eq!(
            b.try_take(t0, Some(2.0), 1.0),
            Err(Duration::from_millis(500))
        );
        assert_eq!(b.try_take(Time::from_millis(500), Some(2.0), 1.0), Ok(()));
        assert_eq!(
            b.try_take(Time::from_millis(500), Some(0.0), 1.0),
            Err(Duration::MAX)
        );
    }

    proptest! {
        /// I10: the brake never permits more than the secondary rate once the threshold is
        /// crossed, and nothing when every cluster is down.
        #[test]
        fn a8_brake_bounds(total in 0usize..200, unhealthy_pct in 0usize..=100) {
            let unhealthy = total * unhealthy_pct / 100;
            let cfg = EvictionRateConfig { primary_rate: Some(100.0), ..Default::default() };
            let r = eviction_rate(total, unhealthy, &cfg);
            if total == 0 || unhealthy == total {
                prop_assert_eq!(r, EvictionRate::Halted);
            } else if unhealthy as f64 / total as f64 >= cfg.unhealthy_threshold {
                prop_assert!(r.per_second().unwrap() <= cfg.secondary_rate);
            }
        }
    }

    #[test]
    fn a8_leaving_a_disruption_stabilises_then_returns_to_normal() {
        let cfg = EvictionRateConfig::default();
        let window = Duration::from_secs(60);
        let t = Time::from_secs;
        let mut m = BrakeMemory::default();
        assert_eq!(
            effective_rate(&m, t(0), &cfg),
            EvictionRate::Halted,
            "unseen fleet"
        );
        // (now, total judged, unhealthy) → (disruption ended?, rate in force)
        let steps = [
            // a joining fleet: nothing judged yet is halted, but no disruption ends when its
            // clusters turn Ready
            (0, 0, 0, false, EvictionRate::Halted),
            (1, 5, 0, false, EvictionRate::Normal(None)),
            (2, 5, 5, false, EvictionRate::Halted),
            // three of five come back: 2/5 < 0.55 would be Normal, but the window holds
            (10, 5, 2, true, EvictionRate::Stabilising(0.01)),
            (11, 5, 0, false, EvictionRate::Stabilising(0.01)),
            (69, 5, 0, false, EvictionRate::Stabilising(0.01)),
            (70, 5, 0, false, EvictionRate::Normal(None)),
            // partial → normal is the end of a disruption too
            (80, 5, 3, false, EvictionRate::Secondary(0.01)),
            (90, 5, 1, true, EvictionRate::Stabilising(0.01)),
            // a new full disruption inside the window halts
            (91, 5, 5, false, EvictionRate::Halted),
        ];
        for (now, total, unhealthy, ended, want) in steps {
            assert_eq!(
                observe_fleet(&mut m, total, unhealthy, &cfg, t(now), window),
                ended,
                "t={now}"
            );
            assert_eq!(effective_rate(&m, t(now), &cfg), want, "t={now}");
        }
        assert_eq!(m.disruption_ended_at, Some(t(90)));
    }

    #[test]
    fn a8_toleration_clocks_restart_when_a_disruption_ends() {
        let taints = vec![ne("a", Some(0)), ne("b", Some(200)), ne("c", None)];
        let restarted = restart_toleration_clocks(&taints, Some(Time::from_secs(100)));
        let added: Vec<Option<Time>> = restarted.iter().map(|t| t.time_added).collect();
        assert_eq!(
            added,
            vec![Some(Time::from_secs(100)), Some(Time::from_secs(200)), None]
        );
        assert_eq!(restart_toleration_clocks(&taints, None), taints);
        // the first token of a stabilisation window comes after 1 / rate
        let mut bucket = TokenBucket::empty(Time::from_secs(0));
        assert_eq!(
            bucket.try_take(Time::from_secs(0), Some(0.01), 1.0),
            Err(Duration::from_secs(100))
        );
        assert!(
            bucket
                .try_take(Time::from_secs(100), Some(0.01), 1.0)
                .is_ok()
        );
    }

    #[test]
    fn f6_toleration_clocks_run_on_the_evaluators_clock() {
        // cluster-health's clock is 300 s behind: its timeAdded looks 300 s old here
        let writer_added = Some(Time::from_secs(1_000));
        let taints = vec![
            ne("seen", writer_added.map(|t| t.as_millis() / 1000)),
            ne("unseen", writer_added.map(|t| t.as_millis() / 1000)),
            Taint::new("ns", TaintEffect::NoSchedule, writer_added),
        ];
        let now = Time::from_secs(1_310);
        let first_seen = |t: &Taint| (t.key == "seen").then_some(Time::from_secs(1_305));
        let local = local_toleration_clocks(&taints, first_seen, now);
        let added: Vec<Option<Time>> = local.iter().map(|t| t.time_added).collect();
        assert_eq!(
            added,
            vec![Some(Time::from_secs(1_305)), Some(now), writer_added],
            "NoExecute taints count from when they were first seen here; others untouched"
        );
        // with a 60 s toleration nothing is due yet, although the writer's clock says 310 s
        let placement = Placement {
            cluster_tolerations: vec![Toleration {
                key: "seen".into(),
                operator: TolerationOperator::Exists,
                effect: Some(TaintEffect::NoExecute),
                toleration_seconds: Some(60),
                ..Default::default()
            }],
            ..Default::default()
        };
        let on_writer_clock = need_eviction(&taints[..1], Some(&placement), now).unwrap();
        assert_eq!(
            on_writer_clock.decision,
            EvictionDecision::EvictNow,
            "the skew's verdict"
        );
        let on_own_clock = need_eviction(&local[..1], Some(&placement), now).unwrap();
        assert_eq!(
            on_own_clock.decision,
            EvictionDecision::EvictAfter(Duration::from_secs(55))
        );
    }
}
