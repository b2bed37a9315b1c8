//! The Works half of the agent: one task owns the state (no locks). It follows its cluster's
//! Works on the api, applies and deletes them on the member through the Kubernetes API, and
//! reports each Work's status when it changes.

use std::collections::{BTreeSet, HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use flotilla_member::{ManagedWatch, Member, MemberError, ObjectRef};
use flotilla_proto::v1;
use flotilla_proto::v1::api_client::ApiClient;
use flotilla_proto::v1::work_executor_client::WorkExecutorClient;
use flotilla_runtime::Shutdown;
use flotilla_runtime::backoff::{Backoff, BackoffState};
use flotilla_store::typed::now_timestamp;
use futures::StreamExt;
use serde_json::Value;
use tonic::Code;
use tonic::transport::Channel;

use crate::{Config, StatusSource, Token, authorize};

/// A change the member's watches saw: an object, or a kind's first list (`None`).
type MemberChange = Option<ObjectRef>;

/// Status reports in flight at once.
const REPORT_CONCURRENCY: usize = 16;

/// What the agent did with one Work.
#[derive(Clone, Debug, PartialEq)]
enum Outcome {
    /// Applied on the member.
    Applied,
    /// Could not be applied (retried every status interval).
    Failed(String),
    /// Dispatching suspended: nothing applied, nothing reported (WE-6.5).
    Suspended,
    /// The Work is being deleted; the member object was removed (or preserved).
    Deleted,
    /// The Work is being deleted; the member did not delete the object yet (retried).
    DeleteFailed(String),
}

#[derive(Clone, Debug)]
struct Tracked {
    uid: String,
    generation: i64,
    /// The manifest to (re-)apply.
    manifest: String,
    resource: Option<ObjectRef>,
    preserve: bool,
    /// PL-7: `conflictResolution: Abort`: a member object Flotilla did not create is left
    /// alone.
    only_ours: bool,
    outcome: Outcome,
    since: prost_types::Timestamp,
    reported: Option<Report>,
    /// What the member answered to the apply of `generation`: the object as it stood right
    /// after it (WE-7.1). A watch may still hold the object from before the apply; until it
    /// catches up, this answer is the only reading that describes `generation`.
    applied: Option<v1::ManifestStatus>,
    /// Whether the watch said anything of the object itself since that apply (so that its
    /// absence from the watch's cache means the member lost it, not that the watch is behind).
    heard: bool,
    /// Whether a reading of the member that counts for `generation` has been reported: from
    /// then on the apply's answer is old news, and without a reading the last report stands.
    confirmed: bool,
}

/// What a status report of an applied Work is made from.
#[derive(Debug)]
enum Reading<'a> {
    /// The apply's own answer, standing in until the member's readings catch up.
    Of(&'a v1::ManifestStatus),
    /// The member's object, not older than the apply of the Work's generation.
    Counted(&'a v1::ManifestStatus),
    /// The member does not have the object.
    Missing,
    /// Nothing to report from.
    None,
}

/// WE-7.1: the reading a report of `t`'s generation may use. `observed` is what the member's
/// objects say (`None`: no reading), and in it the object of `t` (`Some(None)`: absent).
///
/// A watch hands over its cache, which can still hold the object as it was before the agent
/// applied the Work's generation (its event is in flight): its health and ready replicas are
/// the previous spec's. Such a reading is never reported as the new generation's; until the
/// watch catches up the apply's own answer stands in (the object right after the apply: a
/// scale-up shows its new spec, not yet observed, so it is not Healthy).
///
/// `listed`: the reading is a list made after every apply (`--status-source=list`), so an
/// object absent from it is absent from the member.
fn reading_for<'a>(
    t: &'a Tracked,
    observed: Option<Option<&'a v1::ManifestStatus>>,
    listed: bool,
) -> Reading<'a> {
    use flotilla_core::interpret::reading_counts;
    use flotilla_member::status::stand;
    // the apply's answer stands in only until a reading that counts was reported
    let answer = t.applied.as_ref().filter(|_| !t.confirmed);
    match (observed, t.applied.as_ref()) {
        (Some(Some(m)), Some(a)) if !reading_counts(&stand(a), &stand(m)) => {
            answer.map_or(Reading::None, Reading::Of)
        }
        (Some(Some(m)), _) => Reading::Counted(m),
        // the watch has not seen the object the apply created yet
        (Some(None), Some(_)) if !t.heard && !t.confirmed && !listed => {
            answer.map_or(Reading::None, Reading::Of)
        }
        (Some(None), _) => Reading::Missing,
        (None, _) => answer.map_or(Reading::None, Reading::Of),
    }
}

/// One status report of a Work (compared with the last one sent, to send only changes).
#[derive(Clone, Debug, PartialEq)]
struct Report {
    status: Option<v1::WorkStatus>,
    manifest_deleted: bool,
}

type WorkId = (String, String);

/// The Works half of the agent.
pub struct WorkAgent {
    member: Arc<Member>,
    cluster: String,
    token: Option<Token>,
    status_interval: Duration,
    executor: WorkExecutorClient<Channel>,
    works: HashMap<WorkId, Tracked>,
    dirty: HashSet<WorkId>,
    source: StatusSource,
    /// `--status-source=watch`: one watch per (apiVersion, kind) the applied Works hold.
    watches: HashMap<(String, String), ManagedWatch>,
    /// Where the watches send what changed.
    changes: tokio::sync::mpsc::UnboundedSender<MemberChange>,
    changes_rx: Option<tokio::sync::mpsc::UnboundedReceiver<MemberChange>>,
}

impl WorkAgent {
    /// An agent applying on `member`, reporting through `executor`.
    pub fn new(member: Arc<Member>, config: &Config, executor: Channel) -> Self {
        let (changes, changes_rx) = tokio::sync::mpsc::unbounded_channel();
        Self {
            member,
            cluster: config.cluster.clone(),
            token: config.token.clone(),
            status_interval: config.status_interval,
            executor: WorkExecutorClient::new(executor),
            works: HashMap::new(),
            dirty: HashSet::new(),
            source: config.status_source,
            watches: HashMap::new(),
            changes,
            changes_rx: Some(changes_rx),
        }
    }

    /// Watches the cluster's Works until `shutdown`, resuming the watch after failures.
    pub async fn run(mut self, mut api: ApiClient<Channel>, shutdown: Shutdown) {
        let mut backoff = BackoffState::new(
            Backoff::new(Duration::from_millis(100), Duration::from_secs(10)).with_jitter(true),
        );
        let mut revision: i64 = 0;
        let mut tick = tokio::time::interval(self.status_interval);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let Some(mut changes) = self.changes_rx.take() else {
            return;
        };
        loop {
            let mut request = tonic::Request::new(v1::WatchWorksRequest {
                namespace: String::new(),
                cluster: self.cluster.clone(),
                label_selector: String::new(),
                resource_version: revision,
                allow_bookmarks: true,
            });
            authorize(&mut request, &self.cluster, self.token.as_ref());
            let opened = tokio::select! {
                () = shutdown.triggered() => return,
                opened = api.watch_works(request) => opened,
            };
            let mut stream = match opened {
                Ok(resp) => resp.into_inner(),
                Err(status) => {
                    if status.code() == Code::OutOfRange {
                        revision = 0;
                    }
                    let delay = backoff.next_delay();
                    tracing::warn!(cluster = %self.cluster, %status, ?delay, "cannot watch works");
                    tokio::select! {
                        () = shutdown.triggered() => return,
                        () = tokio::time::sleep(delay) => {}
                    }
                    continue;
                }
            };
            tracing::info!(cluster = %self.cluster, from = revision, "watching works");
            // From revision 0 the server lists first: Works missing from that list are gone.
            let mut listing: Option<HashSet<WorkId>> = (revision == 0).then(HashSet::new);
            loop {
                let mut scan = false;
                tokio::select! {
                    () = shutdown.triggered() => return,
                    msg = stream.message() => match msg {
                        Ok(Some(ev)) => {
                            backoff.reset();
                            revision = revision.max(ev.resource_version);
                            self.handle_event(ev, &mut listing).await;
                        }
                        Ok(None) => {
                            tracing::info!(cluster = %self.cluster, "works watch ended; resuming");
                            break;
                        }
                        Err(status) => {
                            if status.code() == Code::OutOfRange {
                                revision = 0;
                            }
                            tracing::warn!(cluster = %self.cluster, %status, "works watch failed; resuming");
                            break;
                        }
                    },
                    _ = tick.tick() => scan = true,
                    Some(change) = changes.recv() => {
                        // a failover's burst arrives together: one pass over the Works for all
                        let mut batch = vec![change];
                        while let Ok(more) = changes.try_recv() {
                            batch.push(more);
                        }
                        self.member_changed(&batch);
                    }
                }
                if scan {
                    self.retry_failed().await;
                }
                self.report(scan).await;
            }
            drop(stream);
            let delay = backoff.next_delay();
            tokio::select! {
                () = shutdown.triggered() => return,
                () = tokio::time::sleep(delay) => {}
            }
        }
    }

    async fn handle_event(
        &mut self,
        ev: v1::WatchWorksResponse,
        listing: &mut Option<HashSet<WorkId>>,
    ) {
        let kind = v1::WatchEventType::try_from(ev.r#type).unwrap_or_default();
        match kind {
            v1::WatchEventType::Added | v1::WatchEventType::Modified => {
                if let Some(work) = ev.object {
                    if let (Some(seen), Some(meta)) = (listing.as_mut(), work.metadata.as_ref()) {
                        seen.insert((meta.namespace.clone(), meta.name.clone()));
                    }
                    self.apply_work(work).await;
                }
            }
            v1::WatchEventType::Deleted => {
                if let Some(meta) = ev.object.and_then(|w| w.metadata) {
                    self.forget(&(meta.namespace, meta.name)).await;
                }
            }
            v1::WatchEventType::Bookmark => {
                if let Some(seen) = listing.take() {
                    let gone: Vec<_> = self
                        .works
                        .keys()
                        .filter(|k| !seen.contains(*k))
                        .cloned()
                        .collect();
                    for id in gone {
                        self.forget(&id).await;
                    }
                }
            }
            v1::WatchEventType::Unspecified => {}
        }
    }

    /// Applies `manifest` on the member: the object it names, or why not. With `only_ours`
    /// (PL-7) an object the member has that Flotilla did not create is left alone (the
    /// agent keeps no record across restarts, so it checks before every apply).
    /// The member's answer is the object as it stood right after the apply.
    async fn apply_manifest(
        &self,
        manifest: &str,
        only_ours: bool,
    ) -> Result<(ObjectRef, v1::ManifestStatus), String> {
        let object: Value = serde_json::from_str(manifest)
            .map_err(|e| format!("the Work's manifest is not JSON: {e}"))?;
        let r = ObjectRef::of(&object).map_err(|e| e.to_string())?;
        let applied = if only_ours {
            self.member.apply_if_ours(&object).await
        } else {
            self.member.apply(&object).await
        };
        applied
            .map(|answer| (r, flotilla_member::status::manifest_status(&answer)))
            .map_err(|e| e.to_string())
    }

    /// The object `manifest` names when the member holds it as applied by Flotilla for this
    /// Work (its permanent-id label equals the manifest's); `None` when absent or not ours
    /// (an object someone else made under the same name is never deleted, as Karmada's
    /// execution controller checks the same label before it deletes).
    async fn applied_object(&self, manifest: &str) -> Result<Option<ObjectRef>, String> {
        let Ok(object) = serde_json::from_str::<Value>(manifest) else {
            return Ok(None);
        };
        let Ok(r) = ObjectRef::of(&object) else {
            return Ok(None);
        };
        let label = |o: &Value, key: &str| {
            o.pointer("/metadata/labels")
                .and_then(|l| l.get(key))
                .and_then(Value::as_str)
                .map(str::to_owned)
        };
        let keys = [
            flotilla_member::MANAGED_LABEL,
            flotilla_member::MANAGED_LABEL_CLUSTER,
        ];
        let Some((key, id)) = keys
            .into_iter()
            .find_map(|k| label(&object, k).map(|v| (k, v)))
        else {
            return Ok(None);
        };
        match self.member.get(&r).await {
            Ok(Some(on_member)) if label(&on_member, key).as_deref() == Some(id.as_str()) => {
                Ok(Some(r))
            }
            Ok(_) | Err(MemberError::UnknownKind { .. }) => Ok(None),
            Err(e) => Err(e.to_string()),
        }
    }

    /// Deletes an object unless the Work preserves it; `Err` when the member did not.
    async fn delete_object(&self, r: &ObjectRef) -> Result<(), MemberError> {
        self.member.delete(r).await.map(|_| ())
    }

    /// A Work was added or changed: apply it when its generation moved (WE-6), delete its
    /// object when it is being deleted (WE-6.1, 6.2).
    async fn apply_work(&mut self, work: v1::Work) {
        let meta = work.metadata.unwrap_or_default();
        let spec = work.spec.unwrap_or_default();
        if spec.cluster != self.cluster {
            tracing::debug!(work = %meta.name, cluster = %spec.cluster, "a Work of another cluster; ignored");
            return;
        }
        let id = (meta.namespace.clone(), meta.name.clone());
        let deleting = meta.deletion_timestamp.is_some();
        if let Some(t) = self.works.get(&id)
            && t.uid == meta.uid
            && t.generation == meta.generation
            && matches!(t.outcome, Outcome::Deleted | Outcome::DeleteFailed(_)) == deleting
        {
            // A status-only change (our own report, typically): nothing to do.
            return;
        }
        let previous = self.works.remove(&id);
        let mut tracked = Tracked {
            uid: meta.uid.clone(),
            generation: meta.generation,
            manifest: spec.manifest.clone(),
            resource: previous.as_ref().and_then(|p| p.resource.clone()),
            preserve: spec.preserve_resources_on_deletion,
            only_ours: spec.conflict_resolution != v1::ConflictResolution::Overwrite as i32,
            outcome: Outcome::Suspended,
            since: now_timestamp(),
            reported: previous.as_ref().and_then(|p| p.reported.clone()),
            applied: None,
            heard: false,
            confirmed: false,
        };
        if deleting && tracked.resource.is_none() && !tracked.preserve {
            // Nothing tracked: the agent restarted since it applied this Work (its record
            // lives in memory only). The Work's manifest names the object; it is ours when
            // the member's copy carries the manifest's permanent-id label.
            match self.applied_object(&spec.manifest).await {
                Ok(r) => tracked.resource = r,
                Err(e) => tracked.outcome = Outcome::DeleteFailed(e),
            }
        }
        if deleting && matches!(tracked.outcome, Outcome::DeleteFailed(_)) {
            // the member could not be read: retried at the next status interval, with the
            // manifest kept for that
        } else if deleting {
            tracked.outcome = match tracked.resource.clone() {
                Some(r) if !tracked.preserve => match self.delete_object(&r).await {
                    Ok(()) => {
                        tracked.resource = None;
                        Outcome::Deleted
                    }
                    Err(e) => Outcome::DeleteFailed(e.to_string()),
                },
                _ => Outcome::Deleted,
            };
        } else if spec.suspend_dispatching {
            tracked.outcome = Outcome::Suspended;
        } else {
            match self.apply_manifest(&spec.manifest, tracked.only_ours).await {
                Ok((r, answer)) => {
                    if let Some(old) = tracked.resource.take()
                        && old != r
                        && let Err(e) = self.delete_object(&old).await
                    {
                        tracing::warn!(work = %meta.name, error = %e, "cannot delete the object the Work named before");
                    }
                    tracked.resource = Some(r);
                    tracked.applied = Some(answer);
                    tracked.outcome = Outcome::Applied;
                }
                Err(e) => tracked.outcome = Outcome::Failed(e),
            }
        }
        if let Some(p) = &previous
            && p.outcome == tracked.outcome
        {
            tracked.since = p.since;
        }
        tracing::debug!(work = %meta.name, namespace = %meta.namespace, generation = meta.generation, outcome = ?tracked.outcome, "work handled");
        self.works.insert(id.clone(), tracked);
        self.dirty.insert(id);
    }

    /// Applies failed Works and deletes not-yet-deleted objects again.
    async fn retry_failed(&mut self) {
        let ids: Vec<WorkId> = self
            .works
            .iter()
            .filter(|(_, t)| matches!(t.outcome, Outcome::Failed(_) | Outcome::DeleteFailed(_)))
            .map(|(id, _)| id.clone())
            .collect();
        for id in ids {
            let Some(t) = self.works.get(&id).cloned() else {
                continue;
            };
            let outcome = match &t.outcome {
                Outcome::Failed(_) => match self.apply_manifest(&t.manifest, t.only_ours).await {
                    Ok((r, answer)) => {
                        if let Some(w) = self.works.get_mut(&id) {
                            w.resource = Some(r);
                            w.applied = Some(answer);
                            w.heard = false;
                            w.confirmed = false;
                        }
                        Outcome::Applied
                    }
                    Err(e) => Outcome::Failed(e),
                },
                Outcome::DeleteFailed(_) => {
                    let resource = match &t.resource {
                        Some(r) => Ok(Some(r.clone())),
                        None if t.preserve => Ok(None),
                        // not known since a restart: the member's copy decides (as above)
                        None => self.applied_object(&t.manifest).await,
                    };
                    match resource {
                        Ok(Some(r)) => match self.delete_object(&r).await {
                            Ok(()) => {
                                if let Some(w) = self.works.get_mut(&id) {
                                    w.resource = None;
                                }
                                Outcome::Deleted
                            }
                            Err(e) => Outcome::DeleteFailed(e.to_string()),
                        },
                        Ok(None) => Outcome::Deleted,
                        Err(e) => Outcome::DeleteFailed(e),
                    }
                }
                other => other.clone(),
            };
            if let Some(w) = self.works.get_mut(&id)
                && w.outcome != outcome
            {
                w.outcome = outcome;
                w.since = now_timestamp();
                self.dirty.insert(id);
            }
        }
    }

    /// A Work is gone: delete its object unless it asked to be preserved.
    async fn forget(&mut self, id: &WorkId) {
        if let Some(t) = self.works.remove(id)
            && let Some(r) = t.resource
            && !t.preserve
            && let Err(e) = self.delete_object(&r).await
        {
            tracing::warn!(work = %id.1, error = %e, "cannot delete the object of a vanished Work");
        }
        self.dirty.remove(id);
    }

    /// The (apiVersion, kind) of every applied object.
    fn applied_kinds(&self) -> BTreeSet<(String, String)> {
        self.works
            .values()
            .filter(|t| t.outcome == Outcome::Applied)
            .filter_map(|t| t.resource.as_ref())
            .map(|r| (r.api_version.clone(), r.kind.clone()))
            .collect()
    }

    /// The watches saw `changes`: the Works of those objects (of every applied object, after
    /// a kind's first list) are reported again if their status moved.
    fn member_changed(&mut self, changes: &[MemberChange]) {
        let all = changes.iter().any(Option::is_none);
        let objects: HashSet<&ObjectRef> = changes.iter().flatten().collect();
        for (id, t) in &mut self.works {
            let own = t.resource.as_ref().is_some_and(|r| objects.contains(r));
            if t.outcome == Outcome::Applied && (all || own) {
                // only an event of the object itself says the watch has seen it since the
                // apply; a kind's (re-)list says nothing of one object still in flight
                t.heard |= own;
                self.dirty.insert(id.clone());
            }
        }
    }

    /// The member's objects of every kind the applied Works hold, by identity; `None` when
    /// the member could not be read (or, by watch, a kind's first list has not arrived).
    async fn observe(&mut self) -> Option<HashMap<ObjectRef, v1::ManifestStatus>> {
        if self.source == StatusSource::List {
            return self.observe_by_list().await;
        }
        let kinds = self.applied_kinds();
        let mut out = HashMap::new();
        let mut complete = true;
        for kind in kinds {
            if !self.watches.contains_key(&kind) {
                match self
                    .member
                    .watch_managed(&kind.0, &kind.1, self.changes.clone())
                    .await
                {
                    Ok(w) => {
                        self.watches.insert(kind.clone(), w);
                    }
                    Err(MemberError::UnknownKind { .. }) => continue,
                    Err(error) => {
                        tracing::debug!(cluster = %self.cluster, %error, "cannot watch the member's objects");
                        return None;
                    }
                }
            }
            let Some(watch) = self.watches.get(&kind) else {
                continue;
            };
            if !watch.is_ready() {
                // its first list reports in as a change
                complete = false;
                continue;
            }
            for o in watch.objects() {
                if let Ok(r) = ObjectRef::of(&o) {
                    out.insert(r, flotilla_member::status::manifest_status(&o));
                }
            }
        }
        complete.then_some(out)
    }

    /// [`WorkAgent::observe`] by one list per kind (`--status-source=list`).
    async fn observe_by_list(&self) -> Option<HashMap<ObjectRef, v1::ManifestStatus>> {
        let kinds = self.applied_kinds();
        let mut out = HashMap::new();
        for (api_version, kind) in kinds {
            match self.member.list_managed(&api_version, &kind).await {
                Ok(objects) => {
                    for o in objects {
                        if let Ok(r) = ObjectRef::of(&o) {
                            out.insert(r, flotilla_member::status::manifest_status(&o));
                        }
                    }
                }
                Err(MemberError::UnknownKind { .. }) => {}
                Err(error) => {
                    tracing::debug!(cluster = %self.cluster, %error, "cannot read the member's objects");
                    return None;
                }
            }
        }
        Some(out)
    }

    /// What to report for a tracked Work, and whether it is made from a reading of the member
    /// that counts for its generation (WE-7.1); `None` when nothing is reported.
    fn report_of(
        &self,
        t: &Tracked,
        observed: Option<&HashMap<ObjectRef, v1::ManifestStatus>>,
    ) -> Option<(Report, bool)> {
        let mut counted = false;
        let condition = |ok: bool, reason: &str, message: String| v1::Condition {
            r#type: "Applied".into(),
            status: if ok {
                v1::ConditionStatus::True
            } else {
                v1::ConditionStatus::False
            }
            .into(),
            reason: reason.into(),
            message,
            last_transition_time: Some(t.since),
        };
        let failed = |message: String| v1::WorkStatus {
            conditions: vec![condition(false, "AppliedFailed", message.clone())],
            applied: false,
            applied_message: message,
            health: v1::ResourceHealth::Unknown.into(),
            ready_replicas: 0,
            resource_status: String::new(),
            observed_generation: t.generation,
            ..Default::default()
        };
        let status = match &t.outcome {
            // nothing to say until the member deleted it
            Outcome::Suspended | Outcome::DeleteFailed(_) => return None,
            // WE-6.2 on the agent's side: the object is gone (or preserved, WE-6.1), so the
            // work executor may release the Work.
            Outcome::Deleted => {
                return Some((
                    Report {
                        status: None,
                        manifest_deleted: true,
                    },
                    false,
                ));
            }
            Outcome::Failed(e) => failed(format!("Failed to apply all manifests (0/1): {e}")),
            Outcome::Applied => {
                let r = t.resource.as_ref()?;
                let listed = self.source == StatusSource::List;
                let reading = reading_for(t, observed.map(|o| o.get(r)), listed);
                counted = matches!(reading, Reading::Counted(_));
                match reading {
                    Reading::Of(m) | Reading::Counted(m) => {
                        let mut status = v1::WorkStatus {
                            conditions: vec![condition(
                                true,
                                "AppliedSuccessful",
                                "Manifest has been successfully applied".into(),
                            )],
                            applied: true,
                            applied_message: String::new(),
                            health: m.health,
                            ready_replicas: m.ready_replicas,
                            resource_status: m.status.clone(),
                            observed_generation: t.generation,
                            ..Default::default()
                        };
                        if let Some(answer) = &t.applied {
                            flotilla_member::status::record_applied_stand(&mut status, answer);
                        }
                        status
                    }
                    Reading::Missing => failed(format!(
                        "{} {}/{} is not on the member",
                        r.kind, r.namespace, r.name
                    )),
                    // without a reading, the last report stands
                    Reading::None => return None,
                }
            }
        };
        Some((
            Report {
                status: Some(status),
                manifest_deleted: false,
            },
            counted,
        ))
    }

    /// Reports the Works whose status differs from the last one reported: the changed ones,
    /// or on a `scan` every Work (with the member's objects read afresh).
    async fn report(&mut self, scan: bool) {
        let candidates: Vec<WorkId> = if scan {
            self.dirty.clear();
            self.works.keys().cloned().collect()
        } else {
            self.dirty.drain().collect()
        };
        if candidates.is_empty() {
            return;
        }
        let needs_reading = candidates.iter().any(|id| {
            self.works
                .get(id)
                .is_some_and(|t| t.outcome == Outcome::Applied)
        });
        let observed = if needs_reading {
            self.observe().await
        } else {
            None
        };
        let mut requests = Vec::new();
        let mut confirmed = Vec::new();
        for id in candidates {
            let Some(t) = self.works.get(&id) else {
                continue;
            };
            let Some((report, counted)) = self.report_of(t, observed.as_ref()) else {
                continue;
            };
            if t.reported.as_ref() == Some(&report) {
                if counted {
                    confirmed.push(id.clone());
                }
                continue;
            }
            let mut request = tonic::Request::new(v1::ReportWorkStatusRequest {
                work: Some(v1::WorkKey {
                    cluster: self.cluster.clone(),
                    namespace: id.0.clone(),
                    name: id.1.clone(),
                }),
                work_uid: t.uid.clone(),
                status: report.status.clone(),
                manifest_deleted: report.manifest_deleted,
            });
            authorize(&mut request, &self.cluster, self.token.as_ref());
            requests.push((id.clone(), (report, counted), request));
        }
        for id in confirmed {
            if let Some(t) = self.works.get_mut(&id) {
                t.confirmed = true;
            }
        }
        if requests.is_empty() {
            return;
        }
        let client = self.executor.clone();
        let results: Vec<_> = futures::stream::iter(requests)
            .map(|(id, report, req)| {
                let mut client = client.clone();
                async move {
                    let res = client.report_work_status(req).await;
                    (id, report, res)
                }
            })
            .buffer_unordered(REPORT_CONCURRENCY)
            .collect()
            .await;
        let mut failures = 0usize;
        for (id, report, res) in results {
            let done = match res {
                Ok(_) => true,
                // The Work changed or vanished meanwhile: the watch brings the news.
                Err(s)
                    if matches!(
                        s.code(),
                        Code::Aborted
                            | Code::NotFound
                            | Code::FailedPrecondition
                            | Code::InvalidArgument
                    ) =>
                {
                    tracing::debug!(work = %id.1, status = %s, "status report refused");
                    true
                }
                Err(s) => {
                    if failures == 0 {
                        tracing::warn!(work = %id.1, status = %s, "status report failed; retried at the next scan");
                    }
                    failures += 1;
                    false
                }
            };
            if done && let Some(t) = self.works.get_mut(&id) {
                let (report, counted) = report;
                t.reported = Some(report);
                t.confirmed |= counted;
            }
        }
    }
}
