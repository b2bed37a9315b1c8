//! Status collection for Push clusters (WE-7): every `--status-sync-period`, per Ready Push
//! cluster (bounded concurrency) ONE list per kind its Works hold, selected by the label every
//! applied object carries (`resourcebinding.karmada.io/permanent-id`); then the Works whose
//! member status changed (health by IN-3, ready replicas, status JSON) are written in batches
//! (`update_many`). A Work marked applied whose object the member no longer has is marked
//! not applied, so that the execution controller applies it again.
//!
//! ```text
//!   tick ─► Ready Push clusters ─► snapshot its Works (cache) ─► GET {kind}?labelSelector=…
//!           per kind ─► changed? ─► BatchWriter<Work> (update_many; a lost CAS is simply
//!           left to the next tick)
//! ```
//!
//! The Works are read *before* the call, so "applied but missing on the member" is judged on
//! a state that was applied before the member answered (no race with a concurrent apply).
//!
//! A pass parses and compares only what moved (#31). Every member object carries a
//! `resourceVersion` that changes whenever it does; the collector remembers, per Work, the
//! member's `resourceVersion` and the Work's own revision at which the two last agreed
//! ([`Seen`]). When neither moved, the object's `spec` and `status` are not even parsed
//! (the list keeps them as text, `Member::list_managed_lazily`). Any write to the Work, by
//! anyone, moves its revision and so makes the next pass look again. Every
//! [`FULL_PASS_EVERY`]th pass reads everything regardless. The memory is per process: a new
//! leader starts with a full pass.

use std::collections::{BTreeSet, HashMap};
use std::sync::{Arc, Mutex, PoisonError};

use flotilla_proto::Resource as _;
use flotilla_proto::v1;
use flotilla_runtime::{Gate, Shutdown};
use flotilla_store::typed::{Stored as _, Update, namespaced_key};
use futures::StreamExt;

use crate::controller::{Context, INDEX_CLUSTER};
use crate::render::{
    applied_state, cluster_endpoint, cluster_is_pull, cluster_ready, is_deleting,
    merge_member_status, missing_status, work_resource,
};

/// The state at which a Work's status and its member object last agreed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Seen {
    /// The member object's `metadata.uid`: another object of the same name (re-created, or
    /// on another member the cluster now points at) is another object.
    uid: String,
    /// The member object's `metadata.resourceVersion`.
    member: String,
    /// The Work's revision (`metadata.resourceVersion`) then.
    work: i64,
}

/// Every this many passes over a cluster, everything is read again whatever the memory says:
/// a member that moved an object's status without moving its `resourceVersion` (which a
/// Kubernetes API server never does) is corrected within this many periods.
pub const FULL_PASS_EVERY: u64 = 10;

/// [`Seen`] per cluster, then per Work key, with the cluster's pass count: each cluster's pass
/// replaces its own map, so Works that went away are forgotten with the next pass.
pub type SeenByCluster = Mutex<HashMap<String, (u64, HashMap<String, Seen>)>>;

/// What one pass did, for logs and tests.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SyncReport {
    /// Clusters asked.
    pub clusters: usize,
    /// Clusters that did not answer.
    pub failed: usize,
    /// Works whose status was written.
    pub updated: usize,
    /// Works whose write lost a CAS (retried next tick).
    pub conflicts: usize,
    /// Works skipped because neither they nor their member object changed since they last
    /// agreed (nothing parsed).
    pub unchanged: usize,
    /// Works skipped because the member's reading was older than their apply (WE-7.1).
    pub stale: usize,
}

/// Runs status collection every `config.status_sync_period` while this replica leads, or,
/// sharded, over the Works of the shards it holds.
pub async fn run(ctx: Arc<Context>, gate: Gate, shutdown: Shutdown) {
    let mut tick = tokio::time::interval(ctx.config.status_sync_period);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            () = shutdown.triggered() => return,
            _ = tick.tick() => {}
        }
        let active = match &gate {
            Gate::Always => true,
            Gate::Leader(leader) => leader.borrow().is_some(),
            Gate::Shards(held) => !held.borrow().terms.is_empty(),
        };
        if !active {
            continue;
        }
        let started = tokio::time::Instant::now();
        let report = sync_all(&ctx).await;
        metrics::histogram!("flotilla_work_executor_status_sync_seconds")
            .record(started.elapsed().as_secs_f64());
        if report.updated > 0 || report.failed > 0 {
            tracing::debug!(?report, "status collection pass");
        }
    }
}

/// GE-8.7: whether any of `works` belongs to a binding with application failover, whose
/// graceful eviction needs to know when the cluster's status was last collected.
fn watched_for_application_failover(ctx: &Context, works: &[Arc<v1::Work>]) -> bool {
    works.iter().any(|w| {
        w.spec
            .as_ref()
            .and_then(|s| s.binding.as_ref())
            .and_then(|b| {
                ctx.bindings.get(&namespaced_key(
                    v1::ResourceBinding::PREFIX,
                    &b.namespace,
                    &b.name,
                ))
            })
            .is_some_and(|b| {
                b.spec
                    .as_ref()
                    .and_then(|s| s.failover.as_ref())
                    .is_some_and(|f| f.application.is_some())
            })
    })
}

/// GE-8.7: records a pass over `cluster` that began at `started` and has written what it
/// changed (`statuscollections/<cluster>`, a compare-and-swap through the leader-fenced
/// store). A failure is left to the next pass: graceful eviction then only waits longer.
async fn record_collection(ctx: &Context, cluster: &str, started: flotilla_core::Time) {
    use flotilla_proto::convert::time_to_timestamp;
    // Sharded, a pass covers only the Works of this replica's shards, so it cannot say the
    // cluster's status was collected: no record (docs/design.md §10; graceful eviction then
    // waits for health or its timeout, as before any record).
    if ctx.sharded() {
        return;
    }
    let key = format!("{}{cluster}", v1::StatusCollection::PREFIX);
    let mark = |meta: Option<v1::ObjectMeta>| v1::StatusCollection {
        metadata: Some(meta.unwrap_or_else(|| v1::ObjectMeta {
            name: cluster.to_owned(),
            ..Default::default()
        })),
        started_at: Some(time_to_timestamp(started)),
        finished_at: Some(time_to_timestamp(ctx.clock.now())),
        period: prost_types::Duration::try_from(ctx.config.status_sync_period).ok(),
    };
    let written = match ctx.typed.get::<v1::StatusCollection>(&key).await {
        Ok(Some(old)) => {
            let new = mark(old.metadata.clone());
            ctx.typed.update(&old, new).await.map(drop)
        }
        Ok(None) => ctx.typed.create(mark(None), None).await.map(drop),
        Err(e) => Err(e),
    };
    if let Err(error) = written {
        tracing::debug!(cluster, %error, "status collection not recorded");
    }
}

/// One pass over every Ready Push cluster.
pub async fn sync_all(ctx: &Context) -> SyncReport {
    // GE-8.7: a Ready Pull cluster's agent reports as its watches see changes: its status
    // is being collected while the work executor takes the reports
    let started = ctx.clock.now();
    for pull in ctx
        .clusters
        .list()
        .into_iter()
        .filter(|c| cluster_is_pull(c) && cluster_ready(c) && !is_deleting(c.metadata.as_ref()))
    {
        let name = pull.metadata.as_ref().map_or("", |m| m.name.as_str());
        if watched_for_application_failover(ctx, &ctx.works.by_index(INDEX_CLUSTER, name)) {
            record_collection(ctx, name, started).await;
        }
    }
    let clusters: Vec<Arc<v1::Cluster>> = ctx
        .clusters
        .list()
        .into_iter()
        .filter(|c| {
            !cluster_is_pull(c)
                && cluster_ready(c)
                && !is_deleting(c.metadata.as_ref())
                && !cluster_endpoint(c).is_empty()
        })
        .collect();
    {
        // forget the clusters no longer collected
        let mut seen = ctx
            .status_seen
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        seen.retain(|name, _| clusters.iter().any(|c| c.name() == name));
    }
    let reports: Vec<SyncReport> = futures::stream::iter(clusters)
        .map(|c| async move { sync_cluster(ctx, &c).await })
        .buffer_unordered(ctx.config.member_concurrency.max(1))
        .collect()
        .await;
    reports
        .into_iter()
        .fold(SyncReport::default(), |a, r| SyncReport {
            clusters: a.clusters + r.clusters,
            failed: a.failed + r.failed,
            updated: a.updated + r.updated,
            conflicts: a.conflicts + r.conflicts,
            unchanged: a.unchanged + r.unchanged,
            stale: a.stale + r.stale,
        })
}

async fn sync_cluster(ctx: &Context, cluster: &v1::Cluster) -> SyncReport {
    let name = cluster.metadata.as_ref().map_or("", |m| m.name.as_str());
    let mut works = ctx.works.by_index(INDEX_CLUSTER, name);
    works.retain(|w| ctx.collects(w));
    let mut report = SyncReport {
        clusters: 1,
        ..Default::default()
    };
    if works.is_empty() {
        return report;
    }
    let started = ctx.clock.now();
    let watched = watched_for_application_failover(ctx, &works);
    let target = crate::member::target_of(&ctx.secrets, cluster);
    let member = match target.and_then(|t| ctx.members.member(name, &t)) {
        Ok(m) => m,
        Err(error) => {
            tracing::debug!(cluster = name, %error, "status collection failed");
            report.failed = 1;
            return report;
        }
    };
    // one list per kind the cluster's Works hold
    let kinds: BTreeSet<(String, String)> = works
        .iter()
        .filter_map(|w| w.spec.as_ref()?.resource.as_ref())
        .map(|r| (r.api_version.clone(), r.kind.clone()))
        .collect();
    let mut objects = Vec::new();
    for (api_version, kind) in &kinds {
        match member.list_managed_lazily(api_version, kind).await {
            Ok(list) => objects.extend(list),
            // the member stopped serving the kind: its objects are gone
            Err(flotilla_member::MemberError::UnknownKind { .. }) => {}
            Err(error) => {
                tracing::debug!(cluster = name, %error, "status collection failed");
                report.failed = 1;
                return report;
            }
        }
    }
    let by_identity: HashMap<(&str, &str, &str), &flotilla_member::Listed> = objects
        .iter()
        .map(|o| ((o.namespace(), o.kind(), o.name()), o))
        .collect();
    let (passes, mut before) = ctx
        .status_seen
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .remove(name)
        .unwrap_or_default();
    if passes % FULL_PASS_EVERY == FULL_PASS_EVERY - 1 {
        before.clear();
    }
    let mut seen: HashMap<String, Seen> = HashMap::with_capacity(before.len());
    let now = ctx.clock.now();
    let mut updates = Vec::new();
    // per update, what the Work will have seen once it lands
    let mut landing: Vec<Option<Seen>> = Vec::new();
    for work in works {
        if is_deleting(work.metadata.as_ref()) {
            continue;
        }
        let Some(status) = work.status.as_ref() else {
            continue;
        };
        if applied_state(status) != Some(true) {
            continue;
        }
        let resource = work_resource(&work);
        let found = by_identity
            .get(&(
                resource.namespace.as_str(),
                resource.kind.as_str(),
                resource.name.as_str(),
            ))
            .copied();
        let key = work.key();
        let new_status = match found {
            Some(object) => {
                let now_seen = Seen {
                    uid: object.uid().to_owned(),
                    member: object.resource_version().to_owned(),
                    work: work.resource_version(),
                };
                // a member that sends no resourceVersion is read every time
                if !now_seen.member.is_empty() && before.get(&key) == Some(&now_seen) {
                    report.unchanged += 1;
                    seen.insert(key, now_seen);
                    continue;
                }
                // WE-7.1: a reading older than the apply of the status's generation (a list
                // that raced the apply) says nothing about that generation; the next pass
                // looks again
                if let Some(applied) = flotilla_member::status::applied_stand(status)
                    && !flotilla_core::interpret::reading_counts(&applied, &object.stand())
                {
                    tracing::debug!(cluster = name, work = %key, member_version = object.resource_version(), applied_version = %applied.resource_version, "member reading older than the apply; skipped (WE-7.1)");
                    report.stale += 1;
                    continue;
                }
                let member_status = match object.value() {
                    Ok(value) => flotilla_member::status::manifest_status(&value),
                    Err(error) => {
                        // left as it was, and looked at again next pass
                        tracing::debug!(cluster = name, work = %key, %error, "member object unreadable");
                        continue;
                    }
                };
                let mut s = status.clone();
                if !merge_member_status(&mut s, &member_status) {
                    if !now_seen.member.is_empty() {
                        seen.insert(key, now_seen);
                    }
                    continue;
                }
                landing.push(Some(now_seen).filter(|s| !s.member.is_empty()));
                s
            }
            None => {
                landing.push(None);
                missing_status(status, now)
            }
        };
        let mut new = (*work).clone();
        new.status = Some(new_status);
        updates.push(Update::new(work.clone(), new));
    }
    for (result, member) in ctx
        .work_writer
        .update_all(updates)
        .await
        .into_iter()
        .zip(landing)
    {
        match result {
            Ok(written) => {
                report.updated += 1;
                if let Some(mut agreed) = member {
                    agreed.work = written.resource_version();
                    seen.insert(written.key(), agreed);
                }
            }
            Err(e) if e.is_conflict() => report.conflicts += 1,
            Err(e) => {
                tracing::debug!(cluster = name, error = %e, "status write failed");
                report.conflicts += 1;
            }
        }
    }
    ctx.status_seen
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .insert(name.to_owned(), (passes.wrapping_add(1), seen));
    // GE-8.7: only a pass whose every status landed counts as a collection (a reading skipped
    // as older than its apply, WE-7.1, refreshed nothing)
    if report.conflicts == 0 && report.stale == 0 && watched {
        record_collection(ctx, name, started).await;
    }
    report
}
