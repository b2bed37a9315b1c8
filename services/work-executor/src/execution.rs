//! The execution controller for Push clusters (WE-6): applies a Work's manifest on its member
//! and records `Applied`; for a deleting Work, deletes the manifest on the member and only
//! then removes the Work (the execution finalizer, WE-6.2..6.4).
//!
//! ```text
//!   works ─────────────────┐
//!   clusters (readiness,   ├─► queue<work key> ─► reconcile_work
//!    deletion, endpoint) ──┘     not deleting: Ready? ApplyManifest → status (BatchWriter)
//!                                deleting:  cluster gone/deleting → release (WE-6.4)
//!                                           Ready → DELETE on the member → release (WE-6.2)
//!                                           not Ready → keep, look again (WE-6.3, #2989)
//! ```
//!
//! Pull clusters are served by their agent (`ReportWorkStatus`); here only their deleting
//! Works whose cluster is gone or deleting are released.

use std::sync::Arc;
use std::time::Duration;

use flotilla_proto::Resource;
use flotilla_proto::v1;
use flotilla_runtime::{Action, EventType, Recorder, Regarding};
use flotilla_store::ObjectKey;
use flotilla_store::StoreError;
use flotilla_store::typed::Stored;

use crate::controller::{Context, Error};
use crate::render::{
    EXECUTION_FINALIZER, applied_current, applied_status, cluster_is_pull, cluster_ready,
    failed_status, is_deleting, work_cluster, work_resource,
};
use flotilla_runtime::cas::Races;

/// The Work's binding, for events.
fn regarding(work: &v1::Work) -> Option<(String, String)> {
    let b = work.spec.as_ref()?.binding.as_ref()?;
    Some((b.namespace.clone(), b.name.clone()))
}

fn record(recorder: &Recorder, work: &v1::Work, type_: EventType, reason: &str, message: String) {
    if let Some((ns, name)) = regarding(work) {
        let trace = work.spec.as_ref().map_or("", |s| s.trace_context.as_str());
        recorder.record(
            Regarding::binding(&ns, &name),
            type_,
            reason,
            message,
            trace,
        );
    }
}

enum Step {
    Done(Action),
    /// Lost a CAS: re-read the Work and decide again.
    Conflict,
}

/// The parent of a Work's reconcile span: the span that wrote the Work during a failover
/// (`spec.traceContext`), as long as the Work is not applied yet and its binding still has
/// an eviction task; otherwise `None` (a trace of its own).
pub fn work_trace(key: &ObjectKey, ctx: &Context) -> Option<String> {
    let work = ctx.works.get(key)?;
    let trace = &work.spec.as_ref()?.trace_context;
    if trace.is_empty() {
        return None;
    }
    let applied = work
        .status
        .as_ref()
        .and_then(crate::render::applied_state)
        .unwrap_or(false);
    let binding = work.spec.as_ref()?.binding.as_ref()?;
    let binding = ctx.bindings.get(&crate::render::binding_key(
        &binding.namespace,
        &binding.name,
    ))?;
    (!applied && crate::controller::in_failover(&binding)).then(|| trace.clone())
}

/// Reconciles one Work key (`works/<cluster>/<ns>/<name>`).
pub async fn reconcile_work(key: ObjectKey, ctx: Arc<Context>) -> Result<Action, Error> {
    // shared with the cache: cloned only to write
    let first = ctx.works.get(&key);
    // The generation whose manifest this reconcile already applied (not re-applied after a
    // lost status write for the same generation).
    let mut applied: Option<(i64, v1::ManifestStatus)> = None;
    let mut races = Races::new(&key);
    let mut work = first;
    loop {
        let Some(w) = work else {
            return Ok(Action::await_change());
        };
        match step(&ctx, w, &mut applied).await? {
            Step::Done(action) => return Ok(action),
            Step::Conflict => {
                races.lost()?;
                work = ctx.typed.get(&key).await?.map(Arc::new);
            }
        }
    }
}

async fn step(
    ctx: &Context,
    work: Arc<v1::Work>,
    applied: &mut Option<(i64, v1::ManifestStatus)>,
) -> Result<Step, Error> {
    let cluster_name = work_cluster(&work).to_owned();
    let cluster_key = format!("{}{cluster_name}", v1::Cluster::PREFIX);
    let mut cluster = ctx.clusters.get(&cluster_key);
    if cluster.is_none() && is_deleting(work.metadata.as_ref()) {
        // Releasing a Work because its cluster is gone leaves the member objects behind:
        // make sure it is gone, not just missing from a lagging cache.
        cluster = ctx
            .typed
            .get::<v1::Cluster>(&cluster_key)
            .await?
            .map(Arc::new);
    }
    let recheck = Action::requeue(ctx.config.not_ready_recheck);
    if is_deleting(work.metadata.as_ref()) {
        let ours = work
            .metadata
            .as_ref()
            .is_some_and(|m| m.finalizers.iter().any(|f| f == EXECUTION_FINALIZER));
        let preserve = work
            .spec
            .as_ref()
            .is_some_and(|s| s.preserve_resources_on_deletion);
        let release_reason = match cluster.as_deref() {
            _ if !ours => Some("no execution finalizer"),
            None => Some("its cluster no longer exists"),
            Some(c) if is_deleting(c.metadata.as_ref()) => {
                Some("its cluster is being deleted (WE-6.4)")
            }
            Some(_) if preserve => {
                Some("preserveResourcesOnDeletion keeps the member object (WE-6.1)")
            }
            Some(_) => None,
        };
        if let Some(reason) = release_reason {
            return release(ctx, &work, reason).await;
        }
        let Some(cluster) = cluster else {
            return Ok(Step::Done(Action::await_change()));
        };
        if cluster_is_pull(&cluster) {
            // The agent deletes it and reports `manifestDeleted` (ReportWorkStatus).
            return Ok(Step::Done(Action::await_change()));
        }
        if !cluster_ready(&cluster) {
            // WE-6.3 (#2989): the finalizer keeps the Work until the member answers again.
            tracing::debug!(work = %work.key(), cluster = %cluster_name, "cluster not Ready; deletion waits (WE-6.3)");
            return Ok(Step::Done(recheck));
        }
        let resource = work_resource(&work);
        if let Err(e) = crate::member::delete(&ctx.members, &ctx.secrets, &cluster, &resource).await
        {
            record(
                &ctx.recorder,
                &work,
                EventType::Warning,
                "CleanupWorkFailed",
                format!("cannot delete the manifest on {cluster_name}: {e}"),
            );
            return Err(e.into());
        }
        return release(ctx, &work, "the member deleted the manifest (WE-6.2)").await;
    }

    let Some(cluster) = cluster else {
        // The cluster's creation queues its Works.
        return Ok(Step::Done(Action::await_change()));
    };
    let default_spec = v1::WorkSpec::default();
    let spec = work.spec.as_ref().unwrap_or(&default_spec);
    if spec.suspend_dispatching
        || cluster_is_pull(&cluster)
        || is_deleting(cluster.metadata.as_ref())
    {
        return Ok(Step::Done(Action::await_change()));
    }
    if !cluster_ready(&cluster) {
        // WE-6.5: nothing is applied to a cluster that is not Ready.
        return Ok(Step::Done(recheck));
    }
    if applied_current(&work) {
        return Ok(Step::Done(Action::await_change()));
    }
    let generation = work.generation();
    let now = ctx.clock.now();
    let outcome = match applied.take() {
        Some((g, resp)) if g == generation => Ok(resp),
        _ => {
            // PL-7: with Abort, a Work never applied yet must not take over a member object
            // Flotilla did not create (once applied, the object carries its label)
            let only_ours = spec.conflict_resolution != v1::ConflictResolution::Overwrite as i32
                && work
                    .status
                    .as_ref()
                    .is_none_or(|s| crate::render::applied_state(s) != Some(true));
            crate::member::apply(
                &ctx.members,
                &ctx.secrets,
                &cluster,
                &spec.manifest,
                only_ours,
            )
            .await
        }
    };
    let (status, failure) = match &outcome {
        Ok(member) => (
            applied_status(work.status.as_ref(), generation, Some(member), now),
            None,
        ),
        Err(e) => (
            failed_status(work.status.as_ref(), generation, &e.to_string(), now),
            Some(e.to_string()),
        ),
    };
    let mut new = (*work).clone();
    new.status = Some(status);
    match ctx.work_writer.update(work.clone(), new).await {
        Ok(_) => {}
        Err(e) if e.is_conflict() => {
            if let Ok(resp) = outcome {
                *applied = Some((generation, resp));
            }
            return Ok(Step::Conflict);
        }
        Err(StoreError::NotFound { .. }) => return Ok(Step::Done(Action::await_change())),
        Err(e) => return Err(e.into()),
    }
    match (outcome, failure) {
        (Ok(_), _) => {
            tracing::debug!(work = %work.key(), cluster = %cluster_name, generation, "applied (WE-6.5)");
            Ok(Step::Done(Action::await_change()))
        }
        (Err(e), Some(message)) => {
            record(
                &ctx.recorder,
                &work,
                EventType::Warning,
                "ApplyWorkFailed",
                format!("cannot apply the Work on {cluster_name}: {message}"),
            );
            Err(e.into())
        }
        (Err(e), None) => Err(e.into()),
    }
}

/// Removes a deleting Work: its finalizer is done (the key goes unless another finalizer
/// remains, in which case only ours is dropped).
async fn release(ctx: &Context, work: &v1::Work, reason: &str) -> Result<Step, Error> {
    let key = work.key();
    let others: Vec<String> = work
        .metadata
        .as_ref()
        .map(|m| {
            m.finalizers
                .iter()
                .filter(|f| *f != EXECUTION_FINALIZER)
                .cloned()
                .collect()
        })
        .unwrap_or_default();
    let result = if others.is_empty() {
        ctx.typed
            .delete(&key, Some(work.resource_version()))
            .await
            .map(|_| ())
    } else {
        let mut new = work.clone();
        if let Some(m) = new.metadata.as_mut() {
            m.finalizers = others;
        }
        ctx.work_writer.update(work.clone(), new).await.map(|_| ())
    };
    match result {
        Ok(()) => {
            let cluster = work_cluster(work);
            let binding = regarding(work)
                .map(|(ns, n)| format!("{ns}/{n}"))
                .unwrap_or_default();
            tracing::info!(work = %key, cluster, binding, reason, "Work removed");
            record(
                &ctx.recorder,
                work,
                EventType::Normal,
                "WorkDeleted",
                format!("Work on {cluster} removed: {reason}"),
            );
            Ok(Step::Done(Action::await_change()))
        }
        Err(e) if e.is_conflict() => Ok(Step::Conflict),
        Err(StoreError::NotFound { .. }) => Ok(Step::Done(Action::await_change())),
        Err(e) => Err(e.into()),
    }
}

/// Error policy: member and store failures are retried after at least a second (the queue's
/// per-key back-off grows from there); CAS contention at once.
pub fn error_policy(_key: &ObjectKey, error: &Error, _ctx: &Context) -> Action {
    match error {
        Error::Contended(_) => Action::requeue(Duration::from_millis(10)),
        _ => Action::requeue(Duration::from_secs(1)),
    }
}
