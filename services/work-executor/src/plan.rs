//! The binding controller's decision, as a pure function of (binding, template, its Works):
//! which Works to mark deleting, create and update (WE-1..WE-5), and the aggregated status
//! to write (WE-8). The controller executes it; the `Plan` RPC returns it.

use std::borrow::Borrow;
use std::collections::{BTreeMap, BTreeSet};

use flotilla_core::Time;
use flotilla_core::graceful::{AssessOptions, TaskVerdict, Timeouts, assess_tasks};
use flotilla_core::moves::{MoveHold, MoveInput, WorkReplicas, hold_shrinks};
use flotilla_core::types::{self as domain, CONDITION_FULLY_APPLIED};
use flotilla_core::work::{aggregate_status, kept_clusters, plan_works};
use flotilla_proto::Resource as _;
use flotilla_proto::v1;
use flotilla_store::typed::{Stored, prepare_generation};

use crate::render::{
    Overrides, RenderError, expected_work_key, is_deleting, merge_update, needs_update,
    observation, owned_meta_current, render_inputs, render_work_with, set_condition, work_cluster,
};

/// The binding condition saying whether the override policies applied to every target
/// (Flotilla's: Karmada reports a failure only as an event). Written once a policy failed, and
/// kept (True) after.
pub const CONDITION_OVERRIDES_APPLIED: &str = "OverridesApplied";
/// Its reason when a policy could not apply (Karmada's event reason).
pub const REASON_OVERRIDE_FAILED: &str = "ApplyOverridePolicyFailed";
/// Its reason when every policy applied (Karmada's event reason).
pub const REASON_OVERRIDE_SUCCEEDED: &str = "ApplyOverridePolicySucceed";

/// `FullyApplied` reason when every kept cluster applied its Work (Karmada's).
pub const REASON_FULLY_APPLIED: &str = "FullyAppliedSuccess";
/// `FullyApplied` reason otherwise (Karmada's).
pub const REASON_NOT_FULLY_APPLIED: &str = "FullyAppliedFailed";

/// What one sync of a binding must do.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Decision {
    /// WE-2: clusters whose Works are kept.
    pub kept: BTreeSet<String>,
    /// WE-3.1 / WE-1: Works that must go (orphans, Works of a deleting or vanished binding,
    /// stale names), deleting ones included.
    pub orphans: Vec<v1::Work>,
    /// Of those, the ones not marked deleting yet: mark them now.
    pub mark_deleting: Vec<v1::Work>,
    /// WE-3.2: clusters of Directly tasks whose Works still exist.
    pub waiting_for: Vec<String>,
    /// WE-3.5: clusters held by Gracefully/Never tasks.
    pub held: Vec<String>,
    /// WE-3.4: Works to create.
    pub create: Vec<v1::Work>,
    /// WE-3.4: Works to update: (as stored, as it should be).
    pub update: Vec<(v1::Work, v1::Work)>,
    /// WE-3.4: the keys of the Works already as they should be (#31: named, not cloned:
    /// the controller only counts them; the dry run looks them up in its own Works).
    pub unchanged: Vec<String>,
    /// Targets whose Work is still being deleted: created once it is gone.
    pub waiting_deletion: Vec<String>,
    /// WE-3.3: the template is missing: nothing ensured, no retry until it appears.
    pub workload_missing: bool,
    /// Targets whose Work could not be rendered, with why.
    pub render_errors: Vec<(String, String)>,
    /// Of those, the targets whose override policies could not apply (OV-2): their Works
    /// are left as they were.
    pub override_errors: Vec<(String, String)>,
    /// WE-10: the shrinks held until the growing side is Ready (make before break).
    pub moves: MoveHold,
    /// Why, one line per rule that applied.
    pub reasons: Vec<String>,
    /// #31: the Work key and rendering inputs ([`render_inputs`]) of every target whose Work
    /// is (unchanged) or is about to be (created, updated) as those inputs render it; the
    /// controller remembers them once the Works are written ([`Rendered`]). Targets rendered
    /// with override policies in scope are not listed: they are always rendered.
    pub rendered: Vec<(String, u64)>,
    /// #31: of the targets, how many were taken as unchanged from the render memory without
    /// rendering them.
    pub remembered: usize,
}

/// #31, render memory: what the binding controller remembers of one Work it rendered, or
/// found as rendered. The digest of the rendering inputs, and the Work at which it matched
/// them, named by its uid and generation. Each write of a Work's spec moves its generation,
/// whoever writes it. Status writes, which status collection makes all through a failover,
/// leave the generation alone. So while neither the inputs nor the generation moved, the
/// Work's spec is still what those inputs render, and the sync skips the render (parse,
/// revise, label, serialise) and the comparison. The metadata the binding controller owns
/// (labels, finalizer, the applied-overrides annotations) is not covered by the generation;
/// it is checked directly ([`owned_meta_current`]), which is cheap.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Rendered {
    /// [`render_inputs`] when the Work matched.
    pub inputs: u64,
    /// A digest of the Work's `metadata.uid` (a re-created Work is another Work).
    pub work_uid: u64,
    /// The Work's `metadata.generation`.
    pub work_generation: i64,
}

impl Rendered {
    /// The memory of `work` as rendered from `inputs`.
    pub fn of(work: &v1::Work, inputs: u64) -> Self {
        let meta = work.metadata.as_ref();
        Rendered {
            inputs,
            work_uid: digest(meta.map_or("", |m| m.uid.as_str())),
            work_generation: meta.map_or(0, |m| m.generation),
        }
    }
}

/// One binding's render memory, by Work key.
pub type RenderMemo = BTreeMap<String, Rendered>;

fn digest(s: &str) -> u64 {
    use std::hash::{Hash, Hasher};
    let mut h = std::collections::hash_map::DefaultHasher::new();
    s.hash(&mut h);
    h.finish()
}

/// How replica moves between clusters are made before they break (WE-10).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MoveSettings {
    /// The clock reading the hold's timeout is judged by.
    pub now: Time,
    /// The longest a shrink waits for the growing side (zero: shrinks proceed at once, as
    /// in Karmada).
    pub timeout: std::time::Duration,
}

impl MoveSettings {
    /// Shrinks proceed at once (no hold).
    pub const OFF: MoveSettings = MoveSettings {
        now: Time::EPOCH,
        timeout: std::time::Duration::ZERO,
    };
}

impl Decision {
    /// WE-3.2: Work creation and updates wait for Directly-purged Works.
    pub fn blocked(&self) -> bool {
        !self.waiting_for.is_empty()
    }

    /// Whether the Works match the binding's current generation after this sync, so that
    /// the aggregated status may be stamped with it (I1a). Not while WE-3.2 blocks the sync:
    /// a target's Work then still has the replicas of the older placement (e.g. member2 at 2
    /// of a new 3) and reports Healthy for them, which must not release the Directly task —
    /// graceful eviction would drop it, and WE-3.2 would stop waiting for the old Work
    /// (found by the `purge_modes` scenario).
    pub fn works_current(&self) -> bool {
        !self.blocked()
    }

    /// Every Work that should exist after this sync (created, updated, and the unchanged
    /// ones among `works`, the Works the decision was made on).
    pub fn desired<'a, W: Borrow<v1::Work>>(
        &'a self,
        works: &'a [W],
    ) -> impl Iterator<Item = &'a v1::Work> {
        let unchanged = works
            .iter()
            .map(Borrow::borrow)
            .filter(|w| self.unchanged.iter().any(|k| *k == w.key()));
        self.create
            .iter()
            .chain(self.update.iter().map(|(_, new)| new))
            .chain(unchanged)
    }
}

/// Decides a binding's sync without override policies (see [`decide_with`]).
pub fn decide<W: Borrow<v1::Work>>(
    binding: Option<&v1::ResourceBinding>,
    spec: &domain::ResourceBindingSpec,
    workload: Option<&v1::Workload>,
    works: &[W],
) -> Decision {
    decide_with(
        binding,
        spec,
        workload,
        works,
        &Overrides::default(),
        &MoveSettings::OFF,
    )
}

/// Decides a binding's sync. `binding` is `None` when it no longer exists; `works` are the
/// Works found for it (any cluster, deleting ones included); `spec` is its converted spec;
/// `overrides` adapt each target's Work (OV-1..OV-3); `moves` says how shrinks wait for the
/// growing side (WE-10). Every target is rendered (no render memory).
pub fn decide_with<W: Borrow<v1::Work>>(
    binding: Option<&v1::ResourceBinding>,
    spec: &domain::ResourceBindingSpec,
    workload: Option<&v1::Workload>,
    works: &[W],
    overrides: &Overrides,
    moves: &MoveSettings,
) -> Decision {
    decide_remembering(
        binding,
        spec,
        workload,
        works,
        overrides,
        moves,
        &RenderMemo::new(),
    )
}

/// [`decide_with`], skipping the render of a target whose Work `memo` says is still as its
/// unchanged inputs render it ([`Rendered`]). The decision is the same as without the memory
/// as long as the memory is true; the test `render_memory_…` holds the two side by side.
pub fn decide_remembering<W: Borrow<v1::Work>>(
    binding: Option<&v1::ResourceBinding>,
    spec: &domain::ResourceBindingSpec,
    workload: Option<&v1::Workload>,
    works: &[W],
    overrides: &Overrides,
    moves: &MoveSettings,
    memo: &RenderMemo,
) -> Decision {
    // the caller's Works are shared (cache `Arc`s) or owned; only those a decision names
    // are cloned
    let works: Vec<&v1::Work> = works.iter().map(Borrow::borrow).collect();
    let mut d = Decision::default();
    let Some(binding) = binding.filter(|b| !is_deleting(b.metadata.as_ref())) else {
        // WE-1: a deleting (or vanished) binding loses every Work.
        d.reasons.push(if binding.is_some() {
            "WE-1: the binding is being deleted: every Work goes".into()
        } else {
            "WE-1: the binding is gone: every Work goes".into()
        });
        d.orphans = works.iter().map(|w| (*w).clone()).collect();
        d.mark_deleting = works
            .iter()
            .filter(|w| !is_deleting(w.metadata.as_ref()))
            .map(|w| (*w).clone())
            .collect();
        return d;
    };
    let existing: Vec<String> = works.iter().map(|w| work_cluster(w).to_owned()).collect();
    let plan = plan_works(spec, &existing);
    d.kept = flotilla_core::work::kept_clusters(spec);
    d.held.clone_from(&plan.hold);
    d.waiting_for.clone_from(&plan.wait_for_directly);
    // WE-10: shrinking targets keep the replicas they run until the growing side is Ready. Not while WE-3.2 blocks the sync (nothing is written then) or
    // the template is missing (nothing is rendered).
    if !d.blocked() && workload.is_some() {
        d.moves = move_hold(binding, spec, &works, overrides, moves);
    }
    let deleted: BTreeSet<&String> = plan.delete.iter().collect();
    let held: BTreeSet<&String> = plan.hold.iter().collect();
    for &w in &works {
        let cluster = work_cluster(w).to_owned();
        let orphan = deleted.contains(&cluster);
        // A Work of a kept, unheld cluster under another name than WE-5's (e.g. the template
        // was renamed) is stale: it goes too.
        let stale =
            !orphan && !held.contains(&cluster) && w.key() != expected_work_key(binding, &cluster);
        if orphan || stale {
            if !is_deleting(w.metadata.as_ref()) {
                d.mark_deleting.push(w.clone());
            }
            d.orphans.push(w.clone());
        }
    }
    if !plan.delete.is_empty() {
        d.reasons.push(format!(
            "WE-3.1: {} not in the kept set {:?}: their Works are deleted",
            plan.delete.join(", "),
            d.kept
        ));
    }
    if let Some(line) = d.moves.describe(&spec.clusters) {
        d.reasons.push(line);
    }
    if !plan.hold.is_empty() {
        d.reasons.push(format!(
            "WE-3.5: {} held by Gracefully/Never eviction tasks: their Works are neither deleted nor updated",
            plan.hold.join(", ")
        ));
    }
    if d.blocked() {
        d.reasons.push(format!(
            "WE-3.2: Directly-purged Works still exist on {}: nothing is created or updated until they are gone",
            plan.wait_for_directly.join(", ")
        ));
        return d;
    }
    let Some(workload) = workload else {
        d.workload_missing = true;
        d.reasons
            .push("WE-3.3: the resource template is missing: no Work is ensured".into());
        return d;
    };
    let by_key: BTreeMap<String, &v1::Work> = works.iter().map(|w| (w.key(), *w)).collect();
    // WE-10: a held cluster's Work is rendered with the replicas it keeps.
    let mut ensure = plan.ensure.clone();
    for t in &mut ensure {
        if let Some(&kept) = d.moves.keep.get(&t.name) {
            t.replicas = kept;
        }
    }
    for target in &ensure {
        let inputs = render_inputs(binding, workload, target, overrides);
        if let Some(inputs) = inputs {
            let key = expected_work_key(binding, &target.name);
            let remembered = by_key.get(&key).is_some_and(|existing| {
                !is_deleting(existing.metadata.as_ref())
                    && memo.get(&key) == Some(&Rendered::of(existing, inputs))
                    && owned_meta_current(existing, binding)
            });
            if remembered {
                d.remembered += 1;
                d.unchanged.push(key.clone());
                d.rendered.push((key, inputs));
                continue;
            }
        }
        let desired = match render_work_with(binding, workload, target, overrides) {
            Ok(w) => w,
            Err(e) => {
                if matches!(e, RenderError::Override(_)) {
                    d.override_errors.push((target.name.clone(), e.to_string()));
                }
                d.render_errors.push((target.name.clone(), e.to_string()));
                continue;
            }
        };
        let key = desired.key();
        match by_key.get(&key) {
            None => d.create.push(desired),
            Some(existing) if is_deleting(existing.metadata.as_ref()) => {
                d.waiting_deletion.push(target.name.clone());
                continue;
            }
            Some(existing) if needs_update(existing, &desired) => {
                d.update
                    .push(((*existing).clone(), merge_update(existing, &desired)));
            }
            Some(existing) => d.unchanged.push(existing.key()),
        }
        if let Some(inputs) = inputs {
            d.rendered.push((key, inputs));
        }
    }
    if !ensure.is_empty() {
        d.reasons.push(format!(
            "WE-3.4/WE-4: one Work per target ({}) with replicas revised: {} to create, {} to update, {} unchanged",
            ensure
                .iter()
                .map(|t| format!("{}:{}", t.name, t.replicas))
                .collect::<Vec<_>>()
                .join(", "),
            d.create.len(),
            d.update.len(),
            d.unchanged.len()
        ));
    }
    if !d.waiting_deletion.is_empty() {
        d.reasons.push(format!(
            "WE-6.3: the Works on {} are still being deleted; they are created again once gone",
            d.waiting_deletion.join(", ")
        ));
    }
    for (cluster, error) in &d.render_errors {
        d.reasons.push(format!(
            "WE-4: cannot render the Work for {cluster}: {error}"
        ));
    }
    d
}

/// WE-10: the hold over this binding's Works: every Work not being deleted and not held
/// by an eviction task (those keep graceful eviction's rules: failover holds nothing here).
fn move_hold(
    binding: &v1::ResourceBinding,
    spec: &domain::ResourceBindingSpec,
    works: &[&v1::Work],
    overrides: &Overrides,
    moves: &MoveSettings,
) -> MoveHold {
    if moves.timeout.is_zero() {
        return MoveHold::default();
    }
    let tasks: BTreeSet<&str> = spec
        .graceful_eviction_tasks
        .iter()
        .map(|t| t.from_cluster.as_str())
        .collect();
    let replicas: Vec<WorkReplicas> = works
        .iter()
        .filter(|w| !is_deleting(w.metadata.as_ref()) && !tasks.contains(work_cluster(w)))
        .map(|w| WorkReplicas {
            cluster: work_cluster(w).to_owned(),
            replicas: w.spec.as_ref().and_then(|s| s.replicas),
            ready: w.status.as_ref().map_or(0, |s| s.ready_replicas),
        })
        .collect();
    // how many more of this binding's replicas each cluster holds (ES-2, as SC-8 asks)
    let no_requests = flotilla_core::capacity::ResourceList::new();
    let requests = spec
        .replica_requirements
        .as_ref()
        .map_or(&no_requests, |r| &r.resource_request);
    let room: BTreeMap<String, i64> = overrides
        .clusters
        .iter()
        .filter_map(|(name, c)| {
            let summary = c.status.resource_summary.as_ref()?;
            Some((
                name.clone(),
                flotilla_core::capacity::max_replicas(
                    Some(summary),
                    &c.spec.resource_models,
                    requests,
                ),
            ))
        })
        .collect();
    let since = binding
        .status
        .as_ref()
        .and_then(|s| s.last_scheduled_time.as_ref())
        .and_then(|t| flotilla_proto::convert::timestamp_to_time(t).ok());
    hold_shrinks(&MoveInput {
        targets: &spec.clusters,
        works: &replicas,
        room: &room,
        since,
        timeout: moves.timeout,
        now: moves.now,
    })
}

/// WE-8: the aggregated status items (sorted by cluster, with each manifest's status JSON)
/// and the `FullyApplied` condition, from the binding's current Works.
pub fn aggregate<W: Borrow<v1::Work>>(
    spec: &domain::ResourceBindingSpec,
    works: &[W],
    previous: &[v1::Condition],
    now: Time,
) -> (Vec<v1::AggregatedStatusItem>, v1::Condition) {
    let works: Vec<&v1::Work> = works.iter().map(Borrow::borrow).collect();
    let observations: Vec<_> = works.iter().map(|w| observation(w)).collect();
    let (items, fully_applied) = aggregate_status(spec, &observations);
    let status_json: BTreeMap<&str, &str> = works
        .iter()
        .filter(|w| !is_deleting(w.metadata.as_ref()))
        .map(|w| {
            (
                work_cluster(w),
                w.status.as_ref().map_or("", |s| s.resource_status.as_str()),
            )
        })
        .collect();
    let items = items
        .into_iter()
        .map(|item| {
            let json = if item.applied {
                status_json
                    .get(item.cluster_name.as_str())
                    .map(|s| (*s).to_owned())
                    .unwrap_or_default()
            } else {
                String::new()
            };
            let mut wire = v1::AggregatedStatusItem::from(item);
            wire.status = json;
            wire
        })
        .collect();
    let mut conditions = previous.to_vec();
    if fully_applied {
        set_condition(
            &mut conditions,
            CONDITION_FULLY_APPLIED,
            v1::ConditionStatus::True,
            REASON_FULLY_APPLIED,
            "All works have been successfully applied",
            now,
        );
    } else {
        set_condition(
            &mut conditions,
            CONDITION_FULLY_APPLIED,
            v1::ConditionStatus::False,
            REASON_NOT_FULLY_APPLIED,
            "Failed to apply all works, see status.aggregatedStatus for details",
            now,
        );
    }
    let condition = conditions
        .into_iter()
        .find(|c| c.r#type == CONDITION_FULLY_APPLIED)
        .unwrap_or_default();
    (items, condition)
}

/// The `OverridesApplied` condition after a sync: False naming each cluster whose override
/// policies could not apply, True once they all do again; `None` while no policy ever failed
/// (the condition is not written at all then).
pub fn overrides_condition(
    previous: &[v1::Condition],
    errors: &[(String, String)],
    now: Time,
) -> Option<v1::Condition> {
    let had = previous
        .iter()
        .any(|c| c.r#type == CONDITION_OVERRIDES_APPLIED);
    if errors.is_empty() && !had {
        return None;
    }
    let mut conditions = previous.to_vec();
    if errors.is_empty() {
        set_condition(
            &mut conditions,
            CONDITION_OVERRIDES_APPLIED,
            v1::ConditionStatus::True,
            REASON_OVERRIDE_SUCCEEDED,
            "every override policy applied",
            now,
        );
    } else {
        let message = errors
            .iter()
            .map(|(cluster, e)| format!("{cluster}: {e} (its Work is left as it was)"))
            .collect::<Vec<_>>()
            .join("; ");
        set_condition(
            &mut conditions,
            CONDITION_OVERRIDES_APPLIED,
            v1::ConditionStatus::False,
            REASON_OVERRIDE_FAILED,
            &message,
            now,
        );
    }
    conditions
        .into_iter()
        .find(|c| c.r#type == CONDITION_OVERRIDES_APPLIED)
}

/// `binding` (or `update`, the status write already decided) with the `OverridesApplied`
/// condition set to `condition`; `None` when nothing changes.
pub fn with_overrides_condition(
    binding: &v1::ResourceBinding,
    update: Option<v1::ResourceBinding>,
    condition: Option<v1::Condition>,
) -> Option<v1::ResourceBinding> {
    with_condition(binding, update, condition)
}

/// `binding` (or `update`, the status write already decided) with `condition` in place of
/// the condition of its type; `update` unchanged when it is already there or `None`.
pub fn with_condition(
    binding: &v1::ResourceBinding,
    update: Option<v1::ResourceBinding>,
    condition: Option<v1::Condition>,
) -> Option<v1::ResourceBinding> {
    let Some(condition) = condition else {
        return update;
    };
    let base = update.as_ref().unwrap_or(binding);
    let current = base
        .status
        .as_ref()
        .and_then(|s| s.conditions.iter().find(|c| c.r#type == condition.r#type));
    if current == Some(&condition) {
        return update;
    }
    let mut out = update.unwrap_or_else(|| binding.clone());
    let status = out.status.get_or_insert_with(Default::default);
    let type_ = condition.r#type.clone();
    put_condition(status, &type_, condition);
    Some(out)
}

/// The binding condition saying whether a replica move is held (WE-10, Flotilla's): True
/// while a shrinking cluster keeps replicas for a growing one, False once the move is made.
/// Written once a move was ever held.
pub const CONDITION_REPLICAS_HELD: &str = "ReplicasHeld";
/// Its reason while a shrink waits for the growing side's Ready replicas.
pub const REASON_WAITING_FOR_READY: &str = "WaitingForReadyReplicas";
/// Its reason once every held shrink went ahead because the growing side is Ready.
pub const REASON_MOVE_MADE: &str = "ReplicasReady";
/// Its reason when the hold timed out (WE-10.4).
pub const REASON_MOVE_TIMED_OUT: &str = "HoldTimedOut";
/// Its reason when nothing is held because the growth does not fit (WE-10.3).
pub const REASON_SURGE_DOES_NOT_FIT: &str = "SurgeDoesNotFit";

/// The `ReplicasHeld` condition after a sync (WE-10): `None` while no move was ever held
/// and none is now (the condition is not written at all then).
pub fn moves_condition(
    previous: &[v1::Condition],
    hold: &MoveHold,
    targets: &[domain::TargetCluster],
    now: Time,
) -> Option<v1::Condition> {
    let had = previous.iter().any(|c| c.r#type == CONDITION_REPLICAS_HELD);
    let line = hold.describe(targets);
    if !had && !hold.holds() && hold.does_not_fit.is_empty() {
        return None;
    }
    let (status, reason, message) = if hold.holds() {
        (
            v1::ConditionStatus::True,
            REASON_WAITING_FOR_READY,
            line.unwrap_or_default(),
        )
    } else if hold.timed_out {
        (
            v1::ConditionStatus::False,
            REASON_MOVE_TIMED_OUT,
            line.unwrap_or_default(),
        )
    } else if !hold.does_not_fit.is_empty() {
        (
            v1::ConditionStatus::False,
            REASON_SURGE_DOES_NOT_FIT,
            line.unwrap_or_default(),
        )
    } else {
        (
            v1::ConditionStatus::False,
            REASON_MOVE_MADE,
            "no replicas are held: the growing clusters report their replicas Ready (WE-10.1)"
                .to_owned(),
        )
    };
    let mut conditions = previous.to_vec();
    set_condition(
        &mut conditions,
        CONDITION_REPLICAS_HELD,
        status,
        reason,
        &message,
        now,
    );
    conditions
        .into_iter()
        .find(|c| c.r#type == CONDITION_REPLICAS_HELD)
}

/// Puts `condition` in place of the status' condition of type `type_`, or adds it.
fn put_condition(status: &mut v1::ResourceBindingStatus, type_: &str, condition: v1::Condition) {
    match status.conditions.iter_mut().find(|c| c.r#type == type_) {
        Some(c) => *c = condition,
        None => status.conditions.push(condition),
    }
}

/// The binding with `items` and `condition` written into its status, or `None` when they are
/// already there (nothing to write). Only the fields the work executor owns change.
///
/// `works_current` says whether the Works were synced to the binding's current generation in
/// this pass (see [`Decision::works_current`]); only then is the status stamped with that
/// generation.
pub fn with_aggregated_status(
    binding: &v1::ResourceBinding,
    items: Vec<v1::AggregatedStatusItem>,
    condition: v1::Condition,
    works_current: bool,
) -> Option<v1::ResourceBinding> {
    let status = binding.status.clone().unwrap_or_default();
    let current = status
        .conditions
        .iter()
        .find(|c| c.r#type == CONDITION_FULLY_APPLIED);
    // I1a: the status is stamped with the binding generation it was computed for, so graceful
    // eviction never trusts health collected for an older placement. Works that were not
    // synced to this generation (WE-3.2 blocked the sync) still describe the older placement:
    // the stamp stays where it was.
    let generation = if works_current {
        binding.metadata.as_ref().map_or(0, |m| m.generation)
    } else {
        status.aggregated_status_observed_generation
    };
    if status.aggregated_status == items
        && current == Some(&condition)
        && status.aggregated_status_observed_generation == generation
    {
        return None;
    }
    let mut out = binding.clone();
    let status = out.status.get_or_insert_with(Default::default);
    status.aggregated_status = items;
    status.aggregated_status_observed_generation = generation;
    put_condition(status, CONDITION_FULLY_APPLIED, condition);
    Some(out)
}

/// Why a binding's status write waits (WE-8.5): a write that is sure to come re-queues the
/// binding, and the status is written once then instead of twice.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Hold {
    /// Only the stamp would move, and the scheduler has not observed this generation yet:
    /// its write (a new placement or its bookkeeping) re-queues the binding.
    SchedulerPending,
    /// The Work for this cluster was written for a newer generation than its status
    /// describes, and its member answers: the execution controller (or the cluster's agent)
    /// writes its status next, which re-queues the binding.
    WorkInFlight(String),
}

/// WE-8.5 (Flotilla): whether the status write from `binding` to `update` can wait, given
/// the binding's Works and `answers(cluster)`: whether that cluster's member is expected to
/// report on its Work (the cluster is Ready). `None`: write now.
///
/// Karmada writes the aggregated status on every pass; holding these two kinds of writes
/// saves a binding version per evicted binding each (docs/rules.md, WE-8.5) without ever
/// stamping older health with a newer generation (I1a): a held write leaves the old stamp.
pub fn hold_status<W: Borrow<v1::Work>>(
    binding: &v1::ResourceBinding,
    update: &v1::ResourceBinding,
    works: &[W],
    answers: impl Fn(&str) -> bool,
) -> Option<Hold> {
    let generation = binding.metadata.as_ref().map_or(0, |m| m.generation);
    // Read in place: this runs before every binding status write.
    let none = v1::ResourceBindingStatus::default();
    let old = binding.status.as_ref().unwrap_or(&none);
    let new = update.status.as_ref().unwrap_or(&none);
    let placed = binding.spec.as_ref().is_some_and(|s| s.placement.is_some());
    let stamp_only = old.aggregated_status == new.aggregated_status
        && old.conditions == new.conditions
        && old.aggregated_status_observed_generation != new.aggregated_status_observed_generation;
    if placed && stamp_only && old.scheduler_observed_generation != generation {
        return Some(Hold::SchedulerPending);
    }
    works.iter().map(Borrow::borrow).find_map(|w: &v1::Work| {
        let suspended = w.spec.as_ref().is_some_and(|s| s.suspend_dispatching);
        let observed = w.status.as_ref().map_or(0, |s| s.observed_generation);
        let cluster = work_cluster(w);
        (!is_deleting(w.metadata.as_ref())
            && !suspended
            && observed < w.generation()
            && answers(cluster))
        .then(|| Hold::WorkInFlight(cluster.to_owned()))
    })
}

/// WE-8.6 (Flotilla): the eviction tasks that the status write `new` proves done, ended in
/// that same write.
///
/// Graceful eviction removes a task once the binding's aggregated status, collected for its
/// current generation, shows every new target Healthy (GE-4.3). That status is this
/// controller's own write, so it applies the same assessment (`assess_tasks`, the very
/// function graceful eviction decides with) to the binding as its write would leave it, and
/// removes the tasks judged `ReplacementHealthy` there and then. The write then describes the
/// binding after the removal: the evicted clusters' Works no longer count (their next sync
/// marks them deleting), and the status is stamped with the generation the removal bumps to.
/// In a failover this saves the separate task removal of graceful eviction and the status
/// write that followed it (two binding versions per binding). Graceful eviction keeps every
/// other verdict: new tasks without a creation time (GE-3.1), suppression, timeouts, A6.
///
/// Returns the binding to write and the clusters whose tasks ended (empty: `new` unchanged).
pub fn end_healthy_tasks<W: Borrow<v1::Work>>(
    old: &v1::ResourceBinding,
    mut new: v1::ResourceBinding,
    works: &[W],
    now: Time,
) -> (v1::ResourceBinding, Vec<String>) {
    if new
        .spec
        .as_ref()
        .is_none_or(|s| s.graceful_eviction_tasks.is_empty())
    {
        return (new, Vec::new());
    }
    let Ok(binding) = domain::ResourceBinding::try_from(new.clone()) else {
        return (new, Vec::new());
    };
    let generation = binding.meta.generation;
    let status = &binding.status;
    let opts = AssessOptions {
        now,
        // The default grace period is graceful eviction's flag; this write ends only the
        // tasks its own status makes ReplacementHealthy (below).
        timeouts: Timeouts::OwnOnly,
        schedule_result: &binding.spec.clusters,
        observed_status: &status.aggregated_status,
        has_scheduled: status.scheduler_observed_generation == generation,
        observed_status_current: status.aggregated_status_observed_generation == generation,
        last_scheduled: status.last_scheduled_time,
        unschedulable_replicas: status.unschedulable_replicas,
    };
    let ended: Vec<String> = assess_tasks(&binding.spec.graceful_eviction_tasks, &opts)
        .verdicts
        .into_iter()
        .filter(|(_, verdict)| *verdict == TaskVerdict::ReplacementHealthy)
        .map(|(cluster, _)| cluster)
        .collect();
    if ended.is_empty() {
        return (new, Vec::new());
    }
    let mut spec = binding.spec;
    spec.graceful_eviction_tasks
        .retain(|t| !ended.contains(&t.from_cluster));
    if let Some(wire) = new.spec.as_mut() {
        wire.graceful_eviction_tasks
            .retain(|t| !ended.contains(&t.from_cluster));
    }
    // The status of the binding after the removal: only the Works it still keeps.
    let kept = kept_clusters(&spec);
    let works: Vec<&v1::Work> = works
        .iter()
        .map(Borrow::borrow)
        .filter(|w| kept.contains(work_cluster(w)))
        .collect();
    let previous = old
        .status
        .as_ref()
        .map(|s| s.conditions.as_slice())
        .unwrap_or_default();
    let (items, condition) = aggregate(&spec, &works, previous, now);
    prepare_generation(old, &mut new);
    let generation = new.generation();
    let status = new.status.get_or_insert_with(Default::default);
    status.aggregated_status = items;
    status.aggregated_status_observed_generation = generation;
    put_condition(status, CONDITION_FULLY_APPLIED, condition);
    (new, ended)
}

#[cfg(test)]
pub(crate) mod tests {
    #![allow(clippy::unwrap_used)]

    use flotilla_core::types::PurgeMode;

    use flotilla_core::overrides::{
        OverridePolicy, OverrideRule, OverrideSpec, Overriders, PatchOperation,
    };

    use super::*;
    use crate::render::{
        ANNOTATION_APPLIED_OVERRIDES, EXECUTION_FINALIZER, applied_status, render_work,
    };

    fn binding(clusters: &[(&str, i32)], tasks: &[(&str, PurgeMode)]) -> v1::ResourceBinding {
        nginx_binding("uid-1", "", clusters, tasks)
    }

    /// The nginx Deployment's binding `uid` (its template's uid `workload_uid`), 3 replicas
    /// placed on `clusters`, with graceful-eviction `tasks` (also the render tests' binding).
    pub(crate) fn nginx_binding(
        uid: &str,
        workload_uid: &str,
        clusters: &[(&str, i32)],
        tasks: &[(&str, PurgeMode)],
    ) -> v1::ResourceBinding {
        let spec = domain::ResourceBindingSpec {
            resource: domain::ObjectReference {
                api_version: "apps/v1".into(),
                kind: "Deployment".into(),
                namespace: "default".into(),
                name: "nginx".into(),
                uid: workload_uid.into(),
            },
            replicas: 3,
            clusters: clusters
                .iter()
                .map(|(n, r)| domain::TargetCluster::new(*n, *r))
                .collect(),
            graceful_eviction_tasks: tasks
                .iter()
                .map(|(c, m)| domain::GracefulEvictionTask {
                    from_cluster: (*c).into(),
                    purge_mode: *m,
                    reason: "TaintUntolerated".into(),
                    producer: "TaintManager".into(),
                    ..Default::default()
                })
                .collect(),
            ..Default::default()
        };
        v1::ResourceBinding {
            metadata: Some(v1::ObjectMeta {
                name: "nginx-deployment".into(),
                namespace: "default".into(),
                uid: uid.into(),
                ..Default::default()
            }),
            spec: Some(spec.into()),
            status: None,
        }
    }

    fn spec_of(b: &v1::ResourceBinding) -> domain::ResourceBindingSpec {
        b.spec.clone().unwrap().try_into().unwrap()
    }

    fn workload() -> v1::Workload {
        v1::Workload {
            kind: "Deployment".into(),
            manifest: r#"{"apiVersion":"apps/v1","kind":"Deployment","spec":{"replicas":3}}"#
                .into(),
            replicas: 3,
            ..Default::default()
        }
    }

    /// member1 evicted with `mode` from {member1: 1, member2: 2}: the Works of that placement
    /// and the binding that now targets {member2: 3}.
    fn evicted(mode: PurgeMode) -> (Vec<v1::Work>, v1::ResourceBinding) {
        let old = binding(&[("member1", 1), ("member2", 2)], &[]);
        let works = works_for(&old, &[("member1", 1), ("member2", 2)]);
        (works, binding(&[("member2", 3)], &[("member1", mode)]))
    }

    /// `b` scheduled at `at` (its `lastScheduledTime`), for WE-10's timeout.
    fn scheduled_at(mut b: v1::ResourceBinding, at: Time) -> v1::ResourceBinding {
        b.status
            .get_or_insert_with(Default::default)
            .last_scheduled_time = Some(flotilla_proto::convert::time_to_timestamp(at));
        b
    }

    fn with_ready(mut w: v1::Work, ready: i32) -> v1::Work {
        w.status.get_or_insert_with(Default::default).ready_replicas = ready;
        w
    }

    /// The decision for `works` under `after` (the seed workload, no overrides) at `moves`.
    fn decide_moves(
        after: &v1::ResourceBinding,
        works: &[v1::Work],
        moves: &MoveSettings,
    ) -> Decision {
        decide_with(
            Some(after),
            &spec_of(after),
            Some(&workload()),
            works,
            &Overrides::default(),
            moves,
        )
    }

    fn replicas_of<'a>(d: &'a Decision, works: &'a [v1::Work]) -> Vec<(&'a str, i32)> {
        let mut out: Vec<(&str, i32)> = d
            .desired(works)
            .map(|w| (work_cluster(w), w.spec.as_ref().unwrap().replicas.unwrap()))
            .collect();
        out.sort();
        out
    }

    #[test]
    fn we_10_a_failback_scales_the_old_clusters_down_only_as_the_returning_one_is_ready() {
        let t0 = Time::from_secs(1_000);
        let moves = MoveSettings {
            now: t0 + std::time::Duration::from_secs(5),
            timeout: std::time::Duration::from_secs(600),
        };
        let before = binding(&[("member2", 3), ("member3", 3)], &[]);
        let after = scheduled_at(
            binding(&[("member1", 2), ("member2", 2), ("member3", 2)], &[]),
            t0,
        );
        let old_works: Vec<v1::Work> = works_for(&before, &[("member2", 3), ("member3", 3)])
            .into_iter()
            .map(|w| with_ready(w, 3))
            .collect();
        // member1 not there yet: member2 and member3 keep 3 each; member1 is created with 2
        let d = decide_moves(&after, &old_works, &moves);
        assert_eq!(
            replicas_of(&d, &old_works),
            [("member1", 2), ("member2", 3), ("member3", 3)]
        );
        assert!(d.moves.holds());
        assert!(
            d.reasons.iter().any(|r| r.starts_with("WE-10.1")),
            "{:?}",
            d.reasons
        );
        // member1 reports 1 Ready: one of the two surplus replicas goes
        let mut works = old_works.clone();
        works.push(with_ready(
            works_for(&after, &[("member1", 2)]).remove(0),
            1,
        ));
        let d = decide_moves(&after, &works, &moves);
        assert_eq!(
            replicas_of(&d, &works),
            [("member1", 2), ("member2", 3), ("member3", 2)]
        );
        // both Ready: the new split
        works[2] = with_ready(works[2].clone(), 2);
        let d = decide_moves(&after, &works, &moves);
        assert!(!d.moves.holds());
        assert!(replicas_of(&d, &works).iter().all(|(_, n)| *n == 2));
        // the hold is off: Karmada's at-once split
        let d = decide_moves(&after, &old_works, &MoveSettings::OFF);
        assert!(replicas_of(&d, &old_works).iter().all(|(_, n)| *n == 2));
        // past the timeout: the split proceeds, and the reason says why
        let late = MoveSettings {
            now: t0 + std::time::Duration::from_secs(600),
            ..moves
        };
        let d = decide_moves(&after, &old_works, &late);
        assert!(replicas_of(&d, &old_works).iter().all(|(_, n)| *n == 2));
        assert!(d.reasons.iter().any(|r| r.contains("WE-10.4")));
    }

    #[test]
    fn we_10_1_a_cluster_leaving_the_placement_is_not_held() {
        let t0 = Time::from_secs(1_000);
        let moves = MoveSettings {
            now: t0,
            timeout: std::time::Duration::from_secs(600),
        };
        let before = binding(&[("member1", 3)], &[]);
        let after = scheduled_at(binding(&[("member2", 3)], &[]), t0);
        let works: Vec<v1::Work> = works_for(&before, &[("member1", 3)])
            .into_iter()
            .map(|w| with_ready(w, 3))
            .collect();
        let d = decide_moves(&after, &works, &moves);
        // (it may be a cluster whose eviction task just timed out: holding it again would
        // undo that timeout)
        assert!(!d.moves.holds(), "{:?}", d.moves);
        assert_eq!(d.mark_deleting.len(), 1);
    }

    #[test]
    fn we_10_failover_holds_nothing_for_the_evicted_cluster() {
        let (works, mut after) = evicted(PurgeMode::Gracefully);
        after = scheduled_at(after, Time::from_secs(1_000));
        let d = decide_moves(
            &after,
            &works,
            &MoveSettings {
                now: Time::from_secs(1_001),
                timeout: std::time::Duration::from_secs(600),
            },
        );
        assert!(!d.moves.holds(), "{:?}", d.moves);
        assert_eq!(d.held, vec!["member1".to_owned()]);
    }

    /// A Work status: applied for generation 1 at `now`, Healthy.
    fn applied_healthy(now: Time) -> v1::WorkStatus {
        let mut s = applied_status(None, 1, None, now);
        s.health = v1::ResourceHealth::Healthy as i32;
        s
    }

    fn works_for(b: &v1::ResourceBinding, targets: &[(&str, i32)]) -> Vec<v1::Work> {
        targets
            .iter()
            .map(|(c, r)| {
                let mut w =
                    render_work(b, &workload(), &domain::TargetCluster::new(*c, *r)).unwrap();
                w.metadata.as_mut().unwrap().generation = 1;
                w
            })
            .collect()
    }

    #[test]
    fn we_8_5_status_writes_that_wait() {
        let now = Time::from_millis(1_000);
        let placed = |generation: i64, scheduler_observed: i64, stamp: i64| {
            let mut b = binding(&[("member2", 3)], &[("member1", PurgeMode::Gracefully)]);
            let spec = b.spec.as_mut().unwrap();
            spec.placement = Some(v1::Placement::default());
            b.metadata.as_mut().unwrap().generation = generation;
            b.status = Some(v1::ResourceBindingStatus {
                scheduler_observed_generation: scheduler_observed,
                aggregated_status_observed_generation: stamp,
                ..Default::default()
            });
            b
        };
        let stamped = |b: &v1::ResourceBinding, stamp: i64| {
            let mut u = b.clone();
            u.status
                .as_mut()
                .unwrap()
                .aggregated_status_observed_generation = stamp;
            u
        };
        let with_item = |b: &v1::ResourceBinding| {
            let mut u = stamped(b, b.metadata.as_ref().unwrap().generation);
            u.status
                .as_mut()
                .unwrap()
                .aggregated_status
                .push(v1::AggregatedStatusItem {
                    cluster_name: "member2".into(),
                    ..Default::default()
                });
            u
        };
        // Works: member2's applied for its generation 1, or written for generation 2 and
        // not answered yet; member1's (held by the task) applied.
        let answered = {
            let mut w = works_for(&placed(1, 1, 1), &[("member1", 1), ("member2", 2)]);
            for w in &mut w {
                w.status = Some(applied_status(None, 1, None, now));
            }
            w
        };
        let in_flight = {
            let mut w = answered.clone();
            w[1].metadata.as_mut().unwrap().generation = 2;
            w
        };
        let everyone = |_: &str| true;
        let nobody = |_: &str| false;
        // The hold of a binding at generation 2 (stamped 1) the scheduler has observed up to
        // `seen`, whose update moves only the stamp or also changes the items.
        let hold = |seen: i64, items_change: bool, works: &[v1::Work], ready: bool| {
            let b = placed(2, seen, 1);
            let update = if items_change {
                with_item(&b)
            } else {
                stamped(&b, 2)
            };
            if ready {
                hold_status(&b, &update, works, everyone)
            } else {
                hold_status(&b, &update, works, nobody)
            }
        };
        // every Work answered, every cluster Ready: (case, seen, items change, expected hold)
        for (name, seen, items_change, want) in [
            (
                "only the stamp moves, the scheduler has not seen generation 2 → wait",
                1,
                false,
                Some(Hold::SchedulerPending),
            ),
            (
                "only the stamp moves, the scheduler has seen it → write",
                2,
                false,
                None,
            ),
            (
                "the items change while the scheduler is pending → write",
                1,
                true,
                None,
            ),
        ] {
            assert_eq!(hold(seen, items_change, &answered, true), want, "{name}");
        }
        // member2's Work written for generation 2 and not answered yet, the scheduler has seen
        // it, the items change: (case, clusters Ready, expected hold)
        for (name, ready, want) in [
            (
                "a Work written for a newer generation, its member answers → wait",
                true,
                Some(Hold::WorkInFlight("member2".into())),
            ),
            (
                "the same Work on a cluster that is not Ready → write (nobody will answer)",
                false,
                None,
            ),
        ] {
            assert_eq!(hold(2, true, &in_flight, ready), want, "{name}");
        }
        // A Work being deleted or suspended is not waited for.
        let mut deleting = in_flight.clone();
        deleting[1].metadata.as_mut().unwrap().deletion_timestamp =
            Some(flotilla_proto::convert::time_to_timestamp(now));
        let b = placed(2, 2, 1);
        assert_eq!(hold_status(&b, &with_item(&b), &deleting, everyone), None);
        let mut suspended = in_flight.clone();
        suspended[1].spec.as_mut().unwrap().suspend_dispatching = true;
        assert_eq!(hold_status(&b, &with_item(&b), &suspended, everyone), None);
    }

    #[test]
    fn fresh_binding_creates_one_work_per_target() {
        let b = binding(&[("member1", 1), ("member2", 2)], &[]);
        let d = decide::<v1::Work>(Some(&b), &spec_of(&b), Some(&workload()), &[]);
        assert_eq!(d.create.len(), 2);
        assert!(d.mark_deleting.is_empty() && !d.blocked());
        let clusters: Vec<_> = d.create.iter().map(work_cluster).collect();
        assert_eq!(clusters, vec!["member1", "member2"]);
        assert_eq!(d.create[1].spec.as_ref().unwrap().replicas, Some(2));
    }

    #[test]
    fn we_3_5_gracefully_task_holds_its_work_untouched() {
        let (works, b) = evicted(PurgeMode::Gracefully);
        let d = decide(Some(&b), &spec_of(&b), Some(&workload()), &works);
        assert!(d.mark_deleting.is_empty());
        assert_eq!(d.held, vec!["member1"]);
        assert_eq!(d.update.len(), 1);
        assert_eq!(work_cluster(&d.update[0].1), "member2");
        assert_eq!(d.update[0].1.spec.as_ref().unwrap().replicas, Some(3));
    }

    #[test]
    fn we_3_2_directly_task_deletes_first_and_blocks() {
        let (works, b) = evicted(PurgeMode::Directly);
        let d = decide(Some(&b), &spec_of(&b), Some(&workload()), &works);
        assert_eq!(d.mark_deleting.len(), 1);
        assert_eq!(work_cluster(&d.mark_deleting[0]), "member1");
        assert!(d.blocked());
        assert!(d.update.is_empty() && d.create.is_empty());
        // once member1's Work is gone, member2 is updated
        let d = decide(Some(&b), &spec_of(&b), Some(&workload()), &works[1..]);
        assert!(!d.blocked());
        assert_eq!(d.update.len(), 1);
    }

    #[test]
    fn i1a_blocked_sync_keeps_the_status_generation() {
        // {member1:1, member2:2} at generation 2, then member1 evicted Directly: generation 3
        // targets {member2:3}, but member2's Work still has 2 replicas (2/2 Ready, Healthy).
        let (mut works, mut b) = evicted(PurgeMode::Directly);
        let stamp = |b: &v1::ResourceBinding| {
            b.status
                .as_ref()
                .unwrap()
                .aggregated_status_observed_generation
        };
        let now = Time::from_millis(1_000);
        for w in &mut works {
            w.status = Some(applied_healthy(now));
        }
        b.metadata.as_mut().unwrap().generation = 3;
        b.status = Some(v1::ResourceBindingStatus {
            aggregated_status_observed_generation: 2,
            ..Default::default()
        });
        let d = decide(Some(&b), &spec_of(&b), Some(&workload()), &works);
        assert!(d.blocked() && !d.works_current());
        let (items, cond) = aggregate(&spec_of(&b), &works[1..], &[], now);
        assert_eq!(items[0].health, v1::ResourceHealth::Healthy as i32);
        let written = with_aggregated_status(&b, items.clone(), cond.clone(), d.works_current())
            .expect("the items are written");
        assert_eq!(
            stamp(&written),
            2,
            "a blocked sync must not claim its status is for generation 3"
        );
        // Once member1's Work is gone the sync goes through and the stamp moves.
        let d = decide(Some(&b), &spec_of(&b), Some(&workload()), &works[1..]);
        assert!(d.works_current());
        let written = with_aggregated_status(&b, items, cond, d.works_current()).unwrap();
        assert_eq!(stamp(&written), 3);
    }

    #[test]
    fn we_1_deleting_binding_loses_every_work() {
        let mut b = binding(&[("member1", 1)], &[]);
        let works = works_for(&b, &[("member1", 1)]);
        b.metadata.as_mut().unwrap().deletion_timestamp = Some(Default::default());
        let d = decide(Some(&b), &spec_of(&b), Some(&workload()), &works);
        assert_eq!(d.mark_deleting.len(), 1);
        assert!(d.create.is_empty());
        let d = decide(None, &spec_of(&b), None, &works);
        assert_eq!(d.orphans.len(), 1);
    }

    #[test]
    fn we_3_3_missing_template_ensures_nothing() {
        let b = binding(&[("member1", 1)], &[]);
        let d = decide::<v1::Work>(Some(&b), &spec_of(&b), None, &[]);
        assert!(d.workload_missing && d.create.is_empty());
    }

    #[test]
    fn deleting_work_of_a_target_waits() {
        let b = binding(&[("member1", 1)], &[]);
        let mut works = works_for(&b, &[("member1", 1)]);
        works[0].metadata.as_mut().unwrap().deletion_timestamp = Some(Default::default());
        let d = decide(Some(&b), &spec_of(&b), Some(&workload()), &works);
        assert_eq!(d.waiting_deletion, vec!["member1"]);
        assert!(d.create.is_empty() && d.update.is_empty());
        assert_eq!(
            works[0].metadata.as_ref().unwrap().finalizers,
            vec![EXECUTION_FINALIZER.to_string()]
        );
    }

    #[test]
    fn we_8_aggregation_with_fully_applied() {
        let b = binding(&[("member1", 1), ("member2", 2)], &[]);
        let mut works = works_for(&b, &[("member2", 2), ("member1", 1)]);
        let now = Time::from_millis(1_000);
        for w in &mut works {
            let mut s = applied_healthy(now);
            s.resource_status = r#"{"readyReplicas":1}"#.into();
            w.status = Some(s);
        }
        let (items, cond) = aggregate(&spec_of(&b), &works, &[], now);
        assert_eq!(items[0].cluster_name, "member1");
        assert_eq!(items[0].status, r#"{"readyReplicas":1}"#);
        assert_eq!(items[1].health, v1::ResourceHealth::Healthy as i32);
        assert_eq!(cond.status, v1::ConditionStatus::True as i32);
        assert_eq!(cond.reason, REASON_FULLY_APPLIED);
        let written = with_aggregated_status(&b, items.clone(), cond.clone(), true).unwrap();
        assert!(
            with_aggregated_status(&written, items, cond, true).is_none(),
            "unchanged status is not rewritten"
        );
        // one Work missing → not fully applied
        let (_, cond) = aggregate(&spec_of(&b), &works[..1], &[], now);
        assert_eq!(cond.status, v1::ConditionStatus::False as i32);
    }

    /// WE-8.6: the status write that shows every new target Healthy, for the generation the
    /// scheduler observed, ends a stamped task in the same write: the binding leaves it
    /// without the task, stamped with the generation the removal bumps to, and aggregated
    /// over the Works it still keeps. Anything graceful eviction would not remove as
    /// `ReplacementHealthy` stays.
    #[test]
    fn we_8_6_the_write_that_proves_the_replacement_healthy_ends_the_task() {
        let now = Time::from_millis(50_000);
        let healthy_works = || {
            let (mut works, _) = evicted(PurgeMode::Gracefully);
            for w in &mut works {
                w.status = Some(applied_healthy(now));
            }
            works
        };
        let evicted_at = |b: &mut v1::ResourceBinding, created: Option<Time>| {
            let meta = b.metadata.as_mut().unwrap();
            meta.generation = 3;
            meta.resource_version = 40;
            let task = &mut b.spec.as_mut().unwrap().graceful_eviction_tasks[0];
            task.creation_timestamp = created.map(flotilla_proto::convert::time_to_timestamp);
            b.status = Some(v1::ResourceBindingStatus {
                scheduler_observed_generation: 3,
                ..Default::default()
            });
        };
        let status_write = |b: &v1::ResourceBinding, works: &[v1::Work]| {
            let (items, cond) = aggregate(&spec_of(b), works, &[], now);
            with_aggregated_status(b, items, cond, true).unwrap()
        };

        let (_, mut b) = evicted(PurgeMode::Gracefully);
        evicted_at(&mut b, Some(Time::from_millis(10_000)));
        let works = healthy_works();
        let (new, ended) = end_healthy_tasks(&b, status_write(&b, &works), &works, now);
        assert_eq!(ended, vec!["member1".to_owned()]);
        assert!(
            new.spec
                .as_ref()
                .unwrap()
                .graceful_eviction_tasks
                .is_empty()
        );
        assert_eq!(new.generation(), 4, "the removal bumps the generation");
        let status = new.status.as_ref().unwrap();
        assert_eq!(status.aggregated_status_observed_generation, 4);
        let clusters: Vec<&str> = status
            .aggregated_status
            .iter()
            .map(|i| i.cluster_name.as_str())
            .collect();
        assert_eq!(
            clusters,
            ["member2"],
            "the evicted cluster's Work no longer counts"
        );
        let fully = status
            .conditions
            .iter()
            .find(|c| c.r#type == CONDITION_FULLY_APPLIED)
            .unwrap();
        assert_eq!(fully.status, v1::ConditionStatus::True as i32);
        assert_eq!(
            status.scheduler_observed_generation, 3,
            "the scheduler's own"
        );

        // what stays for graceful eviction (or for later)
        type Edit = fn(&mut v1::ResourceBinding, &mut Vec<v1::Work>);
        let kept: [(&str, Edit); 5] = [
            ("GE-3.1: a task without a creation time", |b, _| {
                b.spec.as_mut().unwrap().graceful_eviction_tasks[0].creation_timestamp = None
            }),
            ("the scheduler has not observed the generation", |b, _| {
                b.status.as_mut().unwrap().scheduler_observed_generation = 2
            }),
            ("the replacement is not Healthy yet", |_, works| {
                for w in works.iter_mut() {
                    w.status.as_mut().unwrap().health = v1::ResourceHealth::Unhealthy as i32;
                }
            }),
            ("GE-4.1: suppressDeletion", |b, _| {
                b.spec.as_mut().unwrap().graceful_eviction_tasks[0].suppress_deletion = Some(true)
            }),
            ("A6: no target left", |b, _| {
                b.spec.as_mut().unwrap().clusters.clear()
            }),
        ];
        for (name, edit) in kept {
            let (_, mut b) = evicted(PurgeMode::Gracefully);
            evicted_at(&mut b, Some(Time::from_millis(10_000)));
            let mut works = healthy_works();
            edit(&mut b, &mut works);
            let write = status_write(&b, &works);
            let (new, ended) = end_healthy_tasks(&b, write.clone(), &works, now);
            assert!(ended.is_empty(), "{name}: {ended:?}");
            assert_eq!(new, write, "{name}: the write is left as it was");
        }
    }

    fn replace_policy(path: &str, value: i64) -> Overrides {
        Overrides {
            policies: vec![OverridePolicy {
                meta: domain::ObjectMeta {
                    name: "regional".into(),
                    namespace: "default".into(),
                    ..Default::default()
                },
                spec: OverrideSpec {
                    resource_selectors: Vec::new(),
                    override_rules: vec![OverrideRule {
                        target_cluster: None,
                        overriders: Overriders {
                            plaintext: vec![PatchOperation {
                                path: path.into(),
                                operator: flotilla_core::overrides::Operator::Replace,
                                value: Some(value.into()),
                            }],
                            ..Default::default()
                        },
                    }],
                },
            }],
            clusters: Default::default(),
        }
    }

    #[test]
    fn ov_2_overrides_render_into_the_work_and_a_failure_leaves_it_as_it_was() {
        let b = binding(&[("m1", 2)], &[]);
        let works = works_for(&b, &[("m1", 2)]);
        let mut wl = workload();
        wl.metadata = Some(v1::ObjectMeta {
            name: "nginx".into(),
            namespace: "default".into(),
            ..Default::default()
        });
        wl.api_version = "apps/v1".into();

        // m1's decision under a policy that replaces `path` with 5
        let replacing = |path| {
            decide_with(
                Some(&b),
                &spec_of(&b),
                Some(&wl),
                &works,
                &replace_policy(path, 5),
                &MoveSettings::OFF,
            )
        };

        // a policy that applies: the Work is updated, with the record of what applied
        let d = replacing("/spec/replicas");
        assert!(d.override_errors.is_empty(), "{:?}", d.override_errors);
        let (_, new) = &d.update[0];
        let manifest: serde_json::Value =
            serde_json::from_str(&new.spec.as_ref().unwrap().manifest).unwrap();
        assert_eq!(
            manifest["spec"]["replicas"], 5,
            "overrides apply after the replica revision"
        );
        let record = &new.metadata.as_ref().unwrap().annotations[ANNOTATION_APPLIED_OVERRIDES];
        let record: serde_json::Value = serde_json::from_str(record).unwrap();
        assert_eq!(record[0]["policyName"], "regional");
        assert_eq!(
            record[0]["overriders"]["plaintext"][0]["path"],
            "/spec/replicas"
        );

        // a policy that cannot apply: nothing written for m1, and the binding is told why
        let d = replacing("/spec/nope");
        assert!(d.create.is_empty() && d.update.is_empty() && d.unchanged.is_empty());
        assert!(d.mark_deleting.is_empty(), "the old Work is kept");
        assert_eq!(d.override_errors.len(), 1);
        assert!(
            d.override_errors[0]
                .1
                .contains("OverridePolicy default/regional"),
            "{:?}",
            d.override_errors
        );
        let cond = overrides_condition(&[], &d.override_errors, Time::from_millis(1)).unwrap();
        assert_eq!(cond.status, v1::ConditionStatus::False as i32);
        assert_eq!(cond.reason, REASON_OVERRIDE_FAILED);
        assert!(
            cond.message.contains("m1: ") && cond.message.contains("/spec/nope"),
            "{}",
            cond.message
        );
        let updated = with_overrides_condition(&b, None, Some(cond.clone())).unwrap();
        assert!(
            with_overrides_condition(&updated, None, Some(cond.clone())).is_none(),
            "written once"
        );

        // fixed: True again; never failed: no condition at all
        let fixed = overrides_condition(&[cond], &[], Time::from_millis(2)).unwrap();
        assert_eq!(fixed.status, v1::ConditionStatus::True as i32);
        assert!(overrides_condition(&[], &[], Time::from_millis(2)).is_none());
    }

    /// `d`'s creates as the store keeps them once written (a uid, generation 1).
    fn committed(d: &Decision) -> Vec<v1::Work> {
        d.create
            .iter()
            .enumerate()
            .map(|(i, w)| {
                let mut w = w.clone();
                let m = w.metadata.get_or_insert_with(Default::default);
                m.uid = format!("work-{i}");
                m.generation = 1;
                m.resource_version = 10 + i as i64;
                w
            })
            .collect()
    }

    /// What the controller remembers after `d` committed as `works`.
    fn memo_of(d: &Decision, works: &[v1::Work]) -> RenderMemo {
        d.rendered
            .iter()
            .filter_map(|(k, inputs)| {
                let w = works.iter().find(|w| w.key() == *k)?;
                Some((k.clone(), Rendered::of(w, *inputs)))
            })
            .collect()
    }

    #[test]
    fn render_memory_renders_again_exactly_when_an_input_or_the_work_moved() {
        let mut b = binding(&[("member1", 1), ("member2", 2)], &[]);
        b.metadata.as_mut().unwrap().generation = 1;
        let wl = workload();
        let first = decide(Some(&b), &spec_of(&b), Some(&wl), &Vec::<v1::Work>::new());
        assert_eq!((first.create.len(), first.rendered.len()), (2, 2));
        let works = committed(&first);
        let memo = memo_of(&first, &works);
        // A template that cannot render, at the same revision: a target the memory covers is
        // not rendered at all, so the error shows exactly which targets were rendered.
        let mut broken = wl.clone();
        broken.manifest = "[]".into();
        let rendered = |b: &v1::ResourceBinding,
                        wl: &v1::Workload,
                        works: &[v1::Work],
                        overrides: &Overrides| {
            let d = decide_remembering(
                Some(b),
                &spec_of(b),
                Some(wl),
                works,
                overrides,
                &MoveSettings::OFF,
                &memo,
            );
            let mut clusters: Vec<String> = d.render_errors.into_iter().map(|(c, _)| c).collect();
            clusters.sort();
            clusters
        };
        type Edit =
            fn(&mut v1::ResourceBinding, &mut v1::Workload, &mut Vec<v1::Work>, &mut Overrides);
        let cases: Vec<(&str, Edit, &[&str])> = vec![
            ("nothing moved", |_, _, _, _| {}, &[]),
            (
                "status collection wrote member1's status (revision, not generation)",
                |_, _, w, _| {
                    let m = w[0].metadata.as_mut().unwrap();
                    m.resource_version += 100;
                    w[0].status = Some(applied_healthy(Time::from_millis(5)));
                },
                &[],
            ),
            (
                "the binding's status was written (revision, not generation)",
                |b, _, _, _| {
                    b.metadata.as_mut().unwrap().resource_version = 77;
                    b.status = Some(v1::ResourceBindingStatus {
                        scheduler_observed_generation: 1,
                        ..Default::default()
                    });
                },
                &[],
            ),
            (
                "the binding's spec moved (generation 2)",
                |b, _, _, _| {
                    b.metadata.as_mut().unwrap().generation = 2;
                },
                &["member1", "member2"],
            ),
            (
                "the template's manifest was written (its generation)",
                |_, wl, _, _| {
                    let m = wl.metadata.get_or_insert_with(Default::default);
                    m.resource_version = 9;
                    m.generation = 2;
                },
                &["member1", "member2"],
            ),
            (
                "the template's aggregated status was written (revision, not generation)",
                |_, wl, _, _| {
                    wl.metadata
                        .get_or_insert_with(Default::default)
                        .resource_version = 9;
                    wl.status = r#"{"replicas":3}"#.into();
                },
                &[],
            ),
            (
                "member2's replicas changed",
                |b, _, _, _| {
                    b.spec.as_mut().unwrap().clusters[1].replicas = 3;
                },
                &["member2"],
            ),
            (
                "someone wrote member1's Work spec (its generation)",
                |_, _, w, _| {
                    w[0].metadata.as_mut().unwrap().generation = 2;
                },
                &["member1"],
            ),
            (
                "member1's Work was re-created (its uid)",
                |_, _, w, _| {
                    w[0].metadata.as_mut().unwrap().uid = "work-again".into();
                },
                &["member1"],
            ),
            (
                "member1's Work lost its binding label (metadata only)",
                |_, _, w, _| {
                    w[0].metadata
                        .as_mut()
                        .unwrap()
                        .labels
                        .remove(crate::render::LABEL_BINDING_NAME);
                },
                &["member1"],
            ),
            (
                "member2's Work lost the execution finalizer",
                |_, _, w, _| {
                    w[1].metadata.as_mut().unwrap().finalizers.clear();
                },
                &["member2"],
            ),
            (
                "an override policy is in scope: always rendered",
                |_, _, _, o| {
                    *o = replace_policy("/spec/replicas", 5);
                },
                &["member1", "member2"],
            ),
        ];
        for (name, edit, want) in cases {
            let (mut b, mut wl, mut works, mut overrides) = (
                b.clone(),
                broken.clone(),
                works.clone(),
                Overrides::default(),
            );
            edit(&mut b, &mut wl, &mut works, &mut overrides);
            assert_eq!(
                rendered(&b, &wl, &works, &overrides),
                want,
                "{name}: targets rendered"
            );
            // with a template that renders, the memory never changes the decision
            let mut wl = wl.clone();
            wl.manifest.clone_from(&workload().manifest);
            let with = decide_remembering(
                Some(&b),
                &spec_of(&b),
                Some(&wl),
                &works,
                &overrides,
                &MoveSettings::OFF,
                &memo,
            );
            let without = decide_with(
                Some(&b),
                &spec_of(&b),
                Some(&wl),
                &works,
                &overrides,
                &MoveSettings::OFF,
            );
            let remembered = 2 - want.len();
            assert_eq!(with.remembered, remembered, "{name}: taken from the memory");
            assert_eq!(
                Decision {
                    remembered: 0,
                    ..with
                },
                without,
                "{name}: same decision as without the memory"
            );
        }
        // A Work being deleted is never taken as rendered: its target waits for it to go.
        let mut deleting = works.clone();
        deleting[0].metadata.as_mut().unwrap().deletion_timestamp = Some(
            flotilla_proto::convert::time_to_timestamp(Time::from_millis(1)),
        );
        let d = decide_remembering(
            Some(&b),
            &spec_of(&b),
            Some(&wl),
            &deleting,
            &Overrides::default(),
            &MoveSettings::OFF,
            &memo,
        );
        assert_eq!(d.waiting_deletion, vec!["member1".to_owned()]);
        assert_eq!(d.rendered.len(), 1, "only member2's Work is remembered");
    }
}
