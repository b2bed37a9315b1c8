//! The fault suite's recorder and invariant checker.
//!
//! ```text
//!   HistoryRecorder::start(store, from) ── watch every key of the stack's namespace from
//!        `from` (the revision before the stack's first write), reconnecting from last + 1
//!        when the watch breaks (etcd killed or paused) ──► Vec<Entry> (revision order)
//!   check(&history, &expect) ── replays the entries, keeping clusters, bindings and Works as
//!        they were at each revision, and reports every violation with its evidence
//! ```
//!
//! The invariants checked on every revision (the ids are those of `docs/reliability.md`):
//! - **I1** a Work is marked for deletion (or deleted) while its binding still exists with no
//!   target cluster — the only copy goes (Karmada #7455) — unless a Directly task asked for it;
//! - **I4** a cluster is both a target and an eviction task of one binding, or two tasks name
//!   the same cluster;
//! - **I11** an eviction (a cluster leaving `spec.clusters` with a new TaintManager task)
//!   commits while that cluster carries no NoExecute taint;
//! - **I9** (when the scenario says every member stays healthy) a member is ever written with
//!   Ready other than True, or with a NoExecute taint;
//! - **I10** (when the scenario forbids them) any eviction at all;
//! - **I1** (full form) a Work goes while an eviction task of its binding for its cluster,
//!   other than a Directly one, still protects it;
//! - **I5** an eviction task disappears from a live binding only through the graceful-eviction
//!   rule: its cluster is scheduled again (A6, F9), `suppressDeletion` was set to false, its
//!   grace period elapsed on the recorder's clock, or every target of the version it was
//!   removed from reported Healthy for that version's generation (or, WE-8.6, the removing
//!   version itself says so for its own generation, over the same targets);
//! - **I1b** a Work status says Healthy for the Work's current generation only with at least
//!   the Work's replicas ready (a reading of the member from before the apply, stamped with the
//!   new generation, once said Healthy with 3 of 4); and a task that ends on the replacement's
//!   health ends only while each target's Work is so backed (`unbacked_health`);
//! - **I2** (during an eviction) no task ends on health while the binding reports
//!   unschedulable replicas (SC-4.6, GE-4.7): the old copy covers what found no room;
//! - **I12** an eviction from a cluster happens no earlier than the first moment the recorder
//!   saw the NoExecute taint that caused it, plus the binding's toleration of it;
//! - **I3** at the end: every target, task and `requiredBy` cluster of a live binding has a
//!   live Work, and every live Work has a live binding that names its cluster;
//! - **I2** at the end: a Divided binding's targets carry its replicas exactly (less its
//!   `unschedulableReplicas`, SC-4.6), a Duplicated
//!   binding's every target carries all of them;
//! - **I6** at the end: no task of a binding with a target outlived its grace period by more
//!   than [`TASK_SLACK`].
//! - **I8 across shards** (when the scenario names its sharded services): every scheduling
//!   decision and every Work write carries the stamp of its shard's holder at that moment, in
//!   its term, and no shard is claimed while held (`check_shards`).
//!
//! Times are the recorder's receive times (one clock, the test's), so a service with a skewed
//! wall clock cannot hide an early decision. I7 and a leader's I8 are not visible in a history
//! (which leader wrote a revision is not recorded); the F3 and F5 scenarios assert them
//! directly. A sharded replica's writes stamp its shard's owner key, so there I8 is checked.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use flotilla_proto::v1;
use flotilla_store::{EtcdStore, Event, Revision, Store, WatchEvent};

/// What one revision did to one key.
#[derive(Clone, Debug)]
pub enum Change {
    /// A Cluster was written.
    Cluster(Box<v1::Cluster>),
    /// A binding was written.
    Binding(Box<v1::ResourceBinding>),
    /// A Work was written.
    Work(Box<v1::Work>),
    /// The key was deleted.
    Deleted,
    /// A shard's owner key (`shards/<service>/owners/<NNNN>`) was written: claimed (its
    /// create revision is this revision) or stamped by a fenced write.
    ShardOwner {
        /// The holder's identity.
        owner: String,
        /// The holder's lease.
        lease: i64,
        /// The key's create revision: the holder's term.
        create_revision: Revision,
    },
    /// Anything else (events, leases, heartbeats, workloads, policies).
    Other,
}

/// One recorded change.
#[derive(Clone, Debug)]
pub struct Entry {
    /// The etcd revision of the change.
    pub revision: Revision,
    /// The key, in the stack's namespace.
    pub key: String,
    /// What happened.
    pub change: Change,
    /// When the recorder received it (the test's clock: one authority for timing checks).
    pub at: std::time::Instant,
}

/// Records every change of a stack's namespace until stopped.
pub struct HistoryRecorder {
    entries: Arc<Mutex<Vec<Entry>>>,
    task: tokio::task::JoinHandle<()>,
}

fn decode(kv: &flotilla_store::KeyValue) -> Change {
    let k = kv.key.as_str();
    if k.starts_with("shards/") && k.contains("/owners/") {
        return Change::ShardOwner {
            owner: String::from_utf8_lossy(&kv.value).into_owned(),
            lease: kv.lease.map_or(0, |l| l.0),
            create_revision: kv.create_revision,
        };
    }
    let typed = || -> Option<Change> {
        if k.starts_with("clusters/") {
            return flotilla_store::typed::decode::<v1::Cluster>(kv)
                .ok()
                .map(|c| Change::Cluster(Box::new(c)));
        }
        if k.starts_with("bindings/") {
            return flotilla_store::typed::decode::<v1::ResourceBinding>(kv)
                .ok()
                .map(|b| Change::Binding(Box::new(b)));
        }
        if k.starts_with("works/") {
            return flotilla_store::typed::decode::<v1::Work>(kv)
                .ok()
                .map(|w| Change::Work(Box::new(w)));
        }
        None
    };
    typed().unwrap_or(Change::Other)
}

impl HistoryRecorder {
    /// Starts recording `store` (a namespaced client) from revision `from`.
    pub fn start(store: EtcdStore, from: Revision) -> Self {
        let entries: Arc<Mutex<Vec<Entry>>> = Arc::default();
        let sink = entries.clone();
        let task = tokio::spawn(async move {
            let mut next = from;
            loop {
                let mut stream = match store.watch("", Some(next)).await {
                    Ok(s) => s,
                    Err(e) => {
                        if matches!(e, flotilla_store::StoreError::Compacted { .. }) {
                            panic!("the history recorder fell behind a compaction at {next}: {e}");
                        }
                        tokio::time::sleep(Duration::from_millis(100)).await;
                        continue;
                    }
                };
                while let Some(item) = stream.next().await {
                    match item {
                        Ok(WatchEvent::Batch(batch)) => {
                            if batch.revision < next {
                                continue;
                            }
                            let mut out = sink.lock().unwrap();
                            let at = std::time::Instant::now();
                            for ev in batch.events {
                                let (key, change) = match ev {
                                    Event::Put(kv) => {
                                        let change = decode(&kv);
                                        (kv.key, change)
                                    }
                                    Event::Delete { key, .. } => (key, Change::Deleted),
                                };
                                out.push(Entry {
                                    revision: batch.revision,
                                    key,
                                    change,
                                    at,
                                });
                            }
                            next = batch.revision + 1;
                        }
                        Ok(WatchEvent::Progress { .. }) => {}
                        Err(_) => break,
                    }
                }
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        });
        HistoryRecorder { entries, task }
    }

    /// The revision recorded last (0: none yet).
    pub fn last_revision(&self) -> Revision {
        self.entries
            .lock()
            .unwrap()
            .last()
            .map_or(0, |e| e.revision)
    }

    /// Everything recorded so far (the recorder goes on).
    pub fn snapshot(&self) -> Vec<Entry> {
        self.entries.lock().unwrap().clone()
    }

    /// For a converged scenario (`expect.converged`): waits, within a bound, until the end state
    /// holds for the Works too (I3, I2). The scenario waited for its bindings to settle, and
    /// their Works follow a write later (an ended task's Work is marked deleting by the work
    /// executor's next sync, WE-8.6). A Work that never converges is still reported by
    /// [`check`] afterwards.
    pub async fn settle(&self, expect: &Expect) {
        if !expect.converged {
            return;
        }
        let settled = |h: &[Entry]| {
            check(h, expect)
                .violations
                .iter()
                .all(|v| !matches!(v.invariant, "I3" | "I2"))
        };
        let deadline = std::time::Instant::now() + Duration::from_secs(15);
        while !settled(&self.snapshot()) && std::time::Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// Waits until everything up to `revision` was recorded, then stops.
    pub async fn stop_at(self, revision: Revision) -> Vec<Entry> {
        for _ in 0..200 {
            if self.last_revision() >= revision {
                break;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        self.task.abort();
        self.entries.lock().unwrap().clone()
    }
}

/// What a scenario promises beyond the invariants that always hold.
#[derive(Clone, Debug, Default)]
pub struct Expect {
    /// I9: these members never fail, so they must never be written as anything but Ready
    /// and untainted by NoExecute.
    pub healthy_members: Vec<String>,
    /// I10: no eviction at all may happen.
    pub no_evictions: bool,
    /// I3, I2 and I6 at the end (the scenario waited for convergence).
    pub converged: bool,
    /// The graceful-eviction default timeout the stack runs with (I5, I6); `None`:
    /// [`crate::DEFAULT_GRACE`], what [`crate::Timers::fast`] gives it.
    pub grace: Option<Duration>,
    /// I8 across shards: the services running sharded, with their shard counts
    /// (`scheduler`, `work-executor`).
    pub sharded: Vec<(String, u32)>,
}

/// How much later than its deadline a task may end (I6): a graceful-eviction reconcile and the
/// watch deliveries around it on a loaded 2-core machine.
pub const TASK_SLACK: Duration = Duration::from_secs(5);

/// How much earlier than the recorder's clock says a timed decision may appear: the recorder
/// receives the taint or task slightly after the service wrote it.
const CLOCK_SLACK: Duration = Duration::from_millis(300);

/// One broken promise, with its evidence.
#[derive(Clone, Debug)]
pub struct Violation {
    /// The invariant id.
    pub invariant: &'static str,
    /// The key concerned.
    pub key: String,
    /// The revision at which it happened (0: the final state).
    pub revision: Revision,
    /// What happened.
    pub what: String,
}

impl std::fmt::Display for Violation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} at revision {} on {}: {}",
            self.invariant, self.revision, self.key, self.what
        )
    }
}

/// What [`check`] found.
#[derive(Debug, Default)]
pub struct Report {
    /// Revisions replayed.
    pub revisions: usize,
    /// Invariants checked.
    pub checked: Vec<&'static str>,
    /// Evictions seen: (revision, binding, cluster).
    pub evictions: Vec<(Revision, String, String)>,
    /// Everything broken.
    pub violations: Vec<Violation>,
    /// I8 across shards: per sharded service, the replicas (leases) that wrote objects, and
    /// how many objects were written by a second replica after their shard moved.
    pub shard_writers: BTreeMap<String, (usize, usize)>,
}

fn targets(b: &v1::ResourceBinding) -> BTreeSet<String> {
    b.spec
        .iter()
        .flat_map(|s| s.clusters.iter().map(|t| t.name.clone()))
        .collect()
}

/// The clusters the bindings that require `b` are on (an attached binding's placement, DEP-2).
fn required_clusters(b: &v1::ResourceBinding) -> BTreeSet<String> {
    b.spec
        .iter()
        .flat_map(|s| s.required_by.iter())
        .flat_map(|r| r.clusters.iter().map(|t| t.name.clone()))
        .collect()
}

fn tasks(b: &v1::ResourceBinding) -> Vec<&v1::GracefulEvictionTask> {
    b.spec
        .iter()
        .flat_map(|s| s.graceful_eviction_tasks.iter())
        .collect()
}

fn has_no_execute(c: &v1::Cluster) -> bool {
    c.spec
        .iter()
        .flat_map(|s| s.taints.iter())
        .any(|t| t.effect == v1::TaintEffect::NoExecute as i32)
}

/// The NoExecute taints of a cluster, as (key, value).
fn no_execute_taints(c: &v1::Cluster) -> Vec<(String, String)> {
    c.spec
        .iter()
        .flat_map(|s| s.taints.iter())
        .filter(|t| t.effect == v1::TaintEffect::NoExecute as i32)
        .map(|t| (t.key.clone(), t.value.clone()))
        .collect()
}

/// The earliest moment after the NoExecute taint (key, value) appeared that `b` may be
/// evicted for it: `None` never (tolerated forever), `Some(0)` at once (no toleration
/// matches). Written from the Kubernetes toleration rules, independently of the
/// taint-manager's, and generous: the shortest finite toleration among all that match.
fn toleration_of(b: &v1::ResourceBinding, key: &str, value: &str) -> Option<Duration> {
    let tolerations = b
        .spec
        .as_ref()
        .and_then(|s| s.placement.as_ref())
        .map(|p| p.cluster_tolerations.as_slice())
        .unwrap_or_default();
    let mut matched = false;
    let mut shortest: Option<Duration> = None;
    for t in tolerations {
        let effect_ok = t.effect == v1::TaintEffect::Unspecified as i32
            || t.effect == v1::TaintEffect::NoExecute as i32;
        let exists = t.operator == v1::TolerationOperator::Exists as i32;
        let key_ok = t.key.is_empty() || t.key == key;
        let value_ok = exists || t.value == value;
        if !(effect_ok && key_ok && value_ok) {
            continue;
        }
        matched = true;
        if let Some(secs) = t.toleration_seconds {
            let d = Duration::from_secs(u64::try_from(secs).unwrap_or(0));
            shortest = Some(shortest.map_or(d, |s: Duration| s.min(d)));
        }
    }
    if matched {
        shortest
    } else {
        Some(Duration::ZERO)
    }
}

/// Whether every target of `b` reported Healthy for `b`'s current generation (GE-4.3 with
/// A6: an empty placement is never healthy).
fn replacement_healthy(b: &v1::ResourceBinding) -> bool {
    let generation = b.metadata.as_ref().map_or(0, |m| m.generation);
    let Some(status) = b.status.as_ref() else {
        return false;
    };
    let t = targets(b);
    !t.is_empty()
        && status.aggregated_status_observed_generation == generation
        && t.iter().all(|c| {
            status
                .aggregated_status
                .iter()
                .any(|i| &i.cluster_name == c && i.health == v1::ResourceHealth::Healthy as i32)
        })
}

/// WE-8.6: the version that removed the task carries the proof itself. The work executor's
/// status write ends the task it proves done: over the same targets as the version before,
/// every one of them reports Healthy in a status stamped with the removing version's own
/// generation.
fn ended_with_proof(prev: &v1::ResourceBinding, b: &v1::ResourceBinding) -> bool {
    targets(prev) == targets(b) && replacement_healthy(b)
}

/// I1b: `Some(what)` when `w`'s status says Healthy for the Work's current generation with
/// fewer ready replicas than the Work asks for. Only for the kinds whose health means their
/// replicas are available (`apps/v1` Deployment, StatefulSet, ReplicaSet: IN-3); a Job's
/// `parallelism` is not a count of ready pods.
fn unbacked_health(w: &v1::Work) -> Option<String> {
    let spec = w.spec.as_ref()?;
    let resource = spec.resource.as_ref()?;
    let counted = resource.api_version == "apps/v1"
        && matches!(
            resource.kind.as_str(),
            "Deployment" | "StatefulSet" | "ReplicaSet"
        );
    let replicas = spec.replicas?;
    let status = w.status.as_ref()?;
    let generation = w.metadata.as_ref().map_or(0, |m| m.generation);
    (counted
        && status.observed_generation == generation
        && status.health == v1::ResourceHealth::Healthy as i32
        && status.ready_replicas < replicas)
        .then(|| {
            format!(
                "says Healthy for generation {generation} with {} of its {replicas} replicas ready",
                status.ready_replicas
            )
        })
}

fn ready(c: &v1::Cluster) -> Option<i32> {
    c.status.as_ref().and_then(|s| {
        s.conditions
            .iter()
            .find(|c| c.r#type == "Ready")
            .map(|c| c.status)
    })
}

fn deleting(meta: Option<&v1::ObjectMeta>) -> bool {
    meta.is_some_and(|m| m.deletion_timestamp.is_some())
}

fn work_binding(w: &v1::Work) -> Option<String> {
    let b = w.spec.as_ref()?.binding.as_ref()?;
    Some(format!("bindings/{}/{}", b.namespace, b.name))
}

fn work_cluster(w: &v1::Work) -> String {
    w.spec.as_ref().map_or(String::new(), |s| s.cluster.clone())
}

/// The shard of an object a sharded service writes (SH-1 over the key the service shards
/// by): the scheduler a binding by `<ns>/<name>`; the work executor a Work by
/// `<ns>/<template name>` (its name without the WE-5 hash) and a binding by its namespace and
/// template name (`change`). `None`: not an object the service's shards cover.
fn sharded_object(service: &str, key: &str, change: &Change, shards: u32) -> Option<u32> {
    let shard_key = match service {
        "scheduler" => key.strip_prefix("bindings/")?.to_owned(),
        "work-executor" => {
            if let Some(rest) = key.strip_prefix("works/") {
                let (namespace, name) = rest.split_once('/')?.1.split_once('/')?;
                format!("{namespace}/{}", name.rsplit_once('-')?.0)
            } else {
                let Change::Binding(b) = change else {
                    return None;
                };
                let namespace = key.strip_prefix("bindings/")?.split_once('/')?.0;
                let name = b.spec.as_ref()?.resource.as_ref()?.name.as_str();
                format!("{namespace}/{}", name.replace(':', ".").to_lowercase())
            }
        }
        _ => return None,
    };
    Some(flotilla_core::shard::shard_of(&shard_key, shards))
}

/// Whether a binding's version `b` carries the work executor's aggregation over `prev`: only
/// it writes the aggregated status.
fn executor_wrote(prev: Option<&v1::ResourceBinding>, b: &v1::ResourceBinding) -> bool {
    let fields = |b: &v1::ResourceBinding| {
        b.status.as_ref().map(|s| {
            (
                s.aggregated_status.clone(),
                s.aggregated_status_observed_generation,
            )
        })
    };
    let now = fields(b);
    prev.map(fields) != Some(now.clone())
        && now.is_some_and(|(items, generation)| !items.is_empty() || generation != 0)
}

/// Whether a binding's version `b` carries a scheduling decision over `prev`: only the
/// scheduler writes its observed generation and the last scheduled time.
fn scheduler_wrote(prev: Option<&v1::ResourceBinding>, b: &v1::ResourceBinding) -> bool {
    let fields = |b: &v1::ResourceBinding| {
        b.status
            .as_ref()
            .map(|s| (s.scheduler_observed_generation, s.last_scheduled_time))
    };
    prev.map(fields) != Some(fields(b)) && fields(b).is_some_and(|(g, t)| g != 0 || t.is_some())
}

/// I8 across shards, for `service` with `shards` shards:
/// - every object the service writes (a scheduling decision on a binding; any Work write) is
///   in a revision that also stamps its shard's owner key;
/// - that stamp is by the shard's holder at that moment, in its term (the owner key's create
///   revision is the one it was claimed with);
/// - a stamp never re-creates an owner key (a released or expired holder writing late);
/// - a shard is never claimed while its owner key exists.
fn check_shards(history: &[Entry], service: &str, shards: u32, report: &mut Report) {
    let owners_prefix = format!("shards/{service}/owners/");
    // shard -> (lease, term) of the current holder
    let mut holder: BTreeMap<u32, (i64, Revision)> = BTreeMap::new();
    let mut bindings: BTreeMap<String, v1::ResourceBinding> = BTreeMap::new();
    // object -> the leases that wrote it, in order
    let mut writers: BTreeMap<String, Vec<i64>> = BTreeMap::new();
    let mut leases = BTreeSet::new();
    let mut i = 0;
    while i < history.len() {
        let revision = history[i].revision;
        let mut j = i;
        while j < history.len() && history[j].revision == revision {
            j += 1;
        }
        let entries = &history[i..j];
        i = j;
        // stamps and claims of this revision: shard -> (lease, term, claimed now)
        let mut stamps: BTreeMap<u32, (i64, Revision, bool)> = BTreeMap::new();
        for e in entries {
            let Some(shard) = e
                .key
                .strip_prefix(&owners_prefix)
                .and_then(|s| s.parse::<u32>().ok())
            else {
                continue;
            };
            match &e.change {
                Change::ShardOwner {
                    lease,
                    create_revision,
                    owner,
                } => {
                    let created = *create_revision == revision;
                    if created && let Some((held_by, term)) = holder.get(&shard) {
                        report.violations.push(Violation {
                            invariant: "I8",
                            key: e.key.clone(),
                            revision,
                            what: format!(
                                "shard {shard} of {service} claimed by {owner} (lease {lease:x}) while lease {held_by:x} held it since {term}"
                            ),
                        });
                    }
                    if !created && holder.get(&shard) != Some(&(*lease, *create_revision)) {
                        report.violations.push(Violation {
                            invariant: "I8",
                            key: e.key.clone(),
                            revision,
                            what: format!(
                                "a stamp of shard {shard} by {owner} (lease {lease:x}, term {create_revision}) while the holder was {:?}",
                                holder.get(&shard)
                            ),
                        });
                    }
                    stamps.insert(shard, (*lease, *create_revision, created));
                }
                Change::Deleted => {
                    holder.remove(&shard);
                }
                _ => {}
            }
        }
        for e in entries {
            // (a deleted binding: its last version names its template)
            let change = match (&e.change, bindings.get(&e.key)) {
                (Change::Deleted, Some(b)) if service == "work-executor" => {
                    Change::Binding(Box::new(b.clone()))
                }
                (c, _) => c.clone(),
            };
            let Some(shard) = sharded_object(service, &e.key, &change, shards) else {
                if matches!(e.change, Change::Deleted) {
                    bindings.remove(&e.key);
                }
                continue;
            };
            let written = match (&e.change, service) {
                (Change::Binding(b), "scheduler") => {
                    let wrote = scheduler_wrote(bindings.get(&e.key), b);
                    bindings.insert(e.key.clone(), (**b).clone());
                    wrote
                }
                (Change::Binding(b), "work-executor") => {
                    let wrote = executor_wrote(bindings.get(&e.key), b);
                    bindings.insert(e.key.clone(), (**b).clone());
                    wrote
                }
                (Change::Deleted, _) if e.key.starts_with("bindings/") => {
                    bindings.remove(&e.key);
                    false
                }
                (Change::Work(_) | Change::Deleted, "work-executor") => true,
                _ => false,
            };
            if !written {
                continue;
            }
            match stamps.get(&shard) {
                Some((lease, _, false)) => {
                    leases.insert(*lease);
                    writers.entry(e.key.clone()).or_default().push(*lease);
                }
                Some((lease, term, true)) => report.violations.push(Violation {
                    invariant: "I8",
                    key: e.key.clone(),
                    revision,
                    what: format!(
                        "written by lease {lease:x} in the revision that (re-)created the owner key of shard {shard} (term {term}): a write from a replica that no longer held it"
                    ),
                }),
                None => report.violations.push(Violation {
                    invariant: "I8",
                    key: e.key.clone(),
                    revision,
                    what: format!("{service} wrote it without a stamp of its shard {shard}"),
                }),
            }
        }
        for (shard, (lease, term, created)) in stamps {
            if created {
                holder.insert(shard, (lease, term));
            }
        }
    }
    let moved = writers
        .values()
        .filter(|w| w.windows(2).any(|p| p[0] != p[1]))
        .count();
    report
        .shard_writers
        .insert(service.to_owned(), (leases.len(), moved));
}

/// Replays `history` and checks the invariants (see the module docs).
pub fn check(history: &[Entry], expect: &Expect) -> Report {
    let mut report = Report {
        checked: vec!["I1", "I1b", "I4", "I5", "I11", "I12"],
        ..Default::default()
    };
    if !expect.healthy_members.is_empty() {
        report.checked.push("I9");
    }
    if expect.no_evictions {
        report.checked.push("I10");
    }
    if expect.converged {
        report.checked.extend(["I3", "I2", "I6"]);
    }
    let grace = expect.grace.unwrap_or(crate::DEFAULT_GRACE);
    let task_grace = |t: &v1::GracefulEvictionTask| {
        t.grace_period_seconds.map_or(grace, |s| {
            Duration::from_secs(u64::try_from(s).unwrap_or(0))
        })
    };
    // when the recorder first saw each current NoExecute taint (cluster, key, value) and each
    // current task (binding, cluster)
    let mut taint_seen: BTreeMap<(String, String, String), Instant> = BTreeMap::new();
    let mut task_seen: BTreeMap<(String, String), Instant> = BTreeMap::new();
    let mut clusters: BTreeMap<String, v1::Cluster> = BTreeMap::new();
    let mut bindings: BTreeMap<String, v1::ResourceBinding> = BTreeMap::new();
    let mut works: BTreeMap<String, v1::Work> = BTreeMap::new();
    let mut revisions = BTreeSet::new();
    let violation = |report: &mut Report, invariant, key: &str, revision, what: String| {
        report.violations.push(Violation {
            invariant,
            key: key.to_owned(),
            revision,
            what,
        });
    };
    for e in history {
        revisions.insert(e.revision);
        match &e.change {
            Change::Cluster(c) => {
                let name = e.key.trim_start_matches("clusters/").to_owned();
                if expect.healthy_members.contains(&name) && ready(c).is_some() {
                    if ready(c) != Some(v1::ConditionStatus::True as i32) {
                        violation(
                            &mut report,
                            "I9",
                            &e.key,
                            e.revision,
                            format!(
                                "a member that never failed was written Ready={:?}",
                                ready(c)
                            ),
                        );
                    }
                    if has_no_execute(c) {
                        violation(
                            &mut report,
                            "I9",
                            &e.key,
                            e.revision,
                            "a member that never failed was tainted NoExecute".into(),
                        );
                    }
                }
                let now: Vec<(String, String)> = no_execute_taints(c);
                taint_seen
                    .retain(|(cl, k, v), _| cl != &name || now.contains(&(k.clone(), v.clone())));
                for (k, v) in now {
                    taint_seen.entry((name.clone(), k, v)).or_insert(e.at);
                }
                clusters.insert(name, (**c).clone());
            }
            Change::Binding(b) => {
                let t = targets(b);
                let task_list = tasks(b);
                let mut seen = BTreeSet::new();
                for task in &task_list {
                    if t.contains(&task.from_cluster) {
                        violation(
                            &mut report,
                            "I4",
                            &e.key,
                            e.revision,
                            format!("{} is a target and an eviction task", task.from_cluster),
                        );
                    }
                    if !seen.insert(task.from_cluster.clone()) {
                        violation(
                            &mut report,
                            "I4",
                            &e.key,
                            e.revision,
                            format!("two eviction tasks for {}", task.from_cluster),
                        );
                    }
                }
                let previous = bindings.get(&e.key);
                let old_tasks: BTreeSet<String> = previous
                    .map(|p| tasks(p).iter().map(|t| t.from_cluster.clone()).collect())
                    .unwrap_or_default();
                let old_targets = previous.map(targets).unwrap_or_default();
                for task in &task_list {
                    let new_eviction = !old_tasks.contains(&task.from_cluster)
                        && old_targets.contains(&task.from_cluster)
                        && task.producer == "TaintManager";
                    if !new_eviction {
                        continue;
                    }
                    report
                        .evictions
                        .push((e.revision, e.key.clone(), task.from_cluster.clone()));
                    if let Some(c) = clusters.get(&task.from_cluster) {
                        early_eviction_check(&mut report, &taint_seen, b, c, &task.from_cluster, e);
                    }
                    let tainted = clusters.get(&task.from_cluster).is_some_and(has_no_execute);
                    if !tainted {
                        violation(
                            &mut report,
                            "I11",
                            &e.key,
                            e.revision,
                            format!(
                                "evicted from {} which carries no NoExecute taint at this revision",
                                task.from_cluster
                            ),
                        );
                    }
                    if expect.no_evictions {
                        violation(
                            &mut report,
                            "I10",
                            &e.key,
                            e.revision,
                            format!(
                                "evicted from {} although no eviction may happen",
                                task.from_cluster
                            ),
                        );
                    }
                }
                // I5: every task that went, went through the graceful-eviction rule
                if let Some(prev) = previous {
                    let live: BTreeSet<&str> =
                        task_list.iter().map(|t| t.from_cluster.as_str()).collect();
                    for gone in tasks(prev)
                        .into_iter()
                        .filter(|t| !live.contains(t.from_cluster.as_str()))
                    {
                        let since = task_seen
                            .get(&(e.key.clone(), gone.from_cluster.clone()))
                            .copied();
                        let timed_out = since.is_some_and(|s| {
                            e.at.duration_since(s) + CLOCK_SLACK >= task_grace(gone)
                        });
                        let justified = t.contains(&gone.from_cluster)
                            || gone.suppress_deletion == Some(false)
                            || timed_out
                            || replacement_healthy(prev)
                            || ended_with_proof(prev, b);
                        let by_health = !t.contains(&gone.from_cluster)
                            && gone.suppress_deletion != Some(false)
                            && !timed_out
                            && (replacement_healthy(prev) || ended_with_proof(prev, b));
                        let short = |x: &v1::ResourceBinding| {
                            x.status.as_ref().map_or(0, |s| s.unschedulable_replicas)
                        };
                        if by_health && (short(prev) > 0 || short(b) > 0) {
                            // I2 (GE-4.7): the old copy covers what the replacement lacks
                            violation(
                                &mut report,
                                "I2",
                                &e.key,
                                e.revision,
                                format!(
                                    "the eviction task for {} ended on health while {} \
                                     replicas had no room",
                                    gone.from_cluster,
                                    short(prev).max(short(b))
                                ),
                            );
                        }
                        if by_health {
                            // I1b: the health it ended on is backed by ready replicas
                            for cluster in targets(b) {
                                let unbacked = works.values().find_map(|w| {
                                    (work_binding(w).as_deref() == Some(e.key.as_str())
                                        && work_cluster(w) == cluster
                                        && !deleting(w.metadata.as_ref()))
                                    .then(|| unbacked_health(w))
                                    .flatten()
                                });
                                if let Some(what) = unbacked {
                                    violation(
                                        &mut report,
                                        "I1b",
                                        &e.key,
                                        e.revision,
                                        format!(
                                            "the eviction task for {} ended on the health of \
                                             {cluster}, whose Work {what}",
                                            gone.from_cluster
                                        ),
                                    );
                                }
                            }
                        }
                        if !justified {
                            violation(
                                &mut report,
                                "I5",
                                &e.key,
                                e.revision,
                                format!(
                                    "the eviction task for {} was removed {:?} after it appeared \
                                     (grace {:?}), with the replacement not healthy and the \
                                     cluster not scheduled again",
                                    gone.from_cluster,
                                    since.map(|s| e.at.duration_since(s)),
                                    task_grace(gone)
                                ),
                            );
                        }
                    }
                }
                task_seen.retain(|(bk, c), _| {
                    bk != &e.key || task_list.iter().any(|t| &t.from_cluster == c)
                });
                for task in &task_list {
                    task_seen
                        .entry((e.key.clone(), task.from_cluster.clone()))
                        .or_insert(e.at);
                }
                bindings.insert(e.key.clone(), (**b).clone());
            }
            Change::Work(w) => {
                if let Some(what) = unbacked_health(w) {
                    violation(
                        &mut report,
                        "I1b",
                        &e.key,
                        e.revision,
                        format!("the Work {what}"),
                    );
                }
                let newly_deleting = deleting(w.metadata.as_ref())
                    && !works
                        .get(&e.key)
                        .is_some_and(|old| deleting(old.metadata.as_ref()));
                if newly_deleting {
                    only_copy_check(&mut report, &bindings, w, &e.key, e.revision);
                }
                works.insert(e.key.clone(), (**w).clone());
            }
            Change::Deleted => {
                if e.key.starts_with("clusters/") {
                    clusters.remove(e.key.trim_start_matches("clusters/"));
                } else if e.key.starts_with("bindings/") {
                    bindings.remove(&e.key);
                    task_seen.retain(|(bk, _), _| bk != &e.key);
                } else if let Some(w) = works.remove(&e.key)
                    && !deleting(w.metadata.as_ref())
                {
                    only_copy_check(&mut report, &bindings, &w, &e.key, e.revision);
                }
            }
            Change::Other | Change::ShardOwner { .. } => {}
        }
    }
    report.revisions = revisions.len();
    if !expect.sharded.is_empty() {
        report.checked.push("I8");
        for (service, shards) in &expect.sharded {
            check_shards(history, service, *shards, &mut report);
        }
    }
    if expect.converged {
        for (key, b) in &bindings {
            if deleting(b.metadata.as_ref()) {
                continue;
            }
            let needed: BTreeSet<String> = targets(b)
                .into_iter()
                .chain(tasks(b).iter().map(|t| t.from_cluster.clone()))
                .chain(required_clusters(b))
                .collect();
            for cluster in needed {
                let has = works.values().any(|w| {
                    work_binding(w).as_deref() == Some(key.as_str())
                        && work_cluster(w) == cluster
                        && !deleting(w.metadata.as_ref())
                });
                if !has {
                    violation(
                        &mut report,
                        "I3",
                        key,
                        0,
                        format!("no live Work on {cluster} at the end"),
                    );
                }
            }
        }
        for (key, w) in &works {
            if deleting(w.metadata.as_ref()) {
                continue;
            }
            let owner = work_binding(w).and_then(|b| bindings.get(&b));
            let wanted = owner.is_some_and(|b| {
                let c = work_cluster(w);
                targets(b).contains(&c)
                    || tasks(b).iter().any(|t| t.from_cluster == c)
                    || required_clusters(b).contains(&c)
            });
            if !wanted {
                violation(
                    &mut report,
                    "I3",
                    key,
                    0,
                    "a live Work that no binding wants at the end".into(),
                );
            }
        }
    }
    if expect.converged {
        let end = history.last().map(|e| e.at);
        for (key, b) in &bindings {
            if deleting(b.metadata.as_ref()) {
                continue;
            }
            replicas_check(&mut report, key, b);
            let Some(end) = end else { continue };
            if targets(b).is_empty() {
                continue; // A6: the task keeps the only copy
            }
            for task in tasks(b) {
                if task.suppress_deletion == Some(true) {
                    continue;
                }
                let Some(since) = task_seen.get(&(key.clone(), task.from_cluster.clone())) else {
                    continue;
                };
                let age = end.duration_since(*since);
                if age > task_grace(task) + TASK_SLACK {
                    violation(
                        &mut report,
                        "I6",
                        key,
                        0,
                        format!(
                            "the eviction task for {} is {age:?} old at the end, past its grace \
                             period of {:?}",
                            task.from_cluster,
                            task_grace(task)
                        ),
                    );
                }
            }
        }
    }
    report
}

/// I12: an eviction of `b` from `cluster` (recorded as `e`) comes no earlier than the first
/// sight of one of the cluster's NoExecute taints plus the binding's toleration of it.
fn early_eviction_check(
    report: &mut Report,
    taint_seen: &BTreeMap<(String, String, String), Instant>,
    b: &v1::ResourceBinding,
    c: &v1::Cluster,
    cluster: &str,
    e: &Entry,
) {
    let earliest = no_execute_taints(c)
        .into_iter()
        .filter_map(|(k, v)| {
            let seen = taint_seen.get(&(cluster.to_owned(), k.clone(), v.clone()))?;
            toleration_of(b, &k, &v).map(|wait| *seen + wait)
        })
        .min();
    let what = match earliest {
        // (no NoExecute taint at all is I11's finding)
        None if !has_no_execute(c) => return,
        None => format!("evicted from {cluster}, whose NoExecute taints it tolerates forever"),
        Some(at) if e.at + CLOCK_SLACK >= at => return,
        Some(at) => format!(
            "evicted from {cluster} {:?} before its toleration of the NoExecute taint ran out",
            at.duration_since(e.at)
        ),
    };
    report.violations.push(Violation {
        invariant: "I12",
        key: e.key.clone(),
        revision: e.revision,
        what,
    });
}

/// I2 after convergence: Divided targets carry the binding's replicas exactly, less those
/// the scheduler reports unschedulable for lack of room (SC-4.6); Duplicated targets each
/// carry all of them.
fn replicas_check(report: &mut Report, key: &str, b: &v1::ResourceBinding) {
    let Some(spec) = b.spec.as_ref() else { return };
    if spec.replicas == 0 || spec.clusters.is_empty() {
        return;
    }
    let divided = spec
        .placement
        .as_ref()
        .and_then(|p| p.replica_scheduling.as_ref())
        .is_some_and(|r| r.replica_scheduling_type == v1::ReplicaSchedulingType::Divided as i32);
    let placed: Vec<i32> = spec.clusters.iter().map(|t| t.replicas).collect();
    // SC-4.6: a result short of room says how many replicas it lacks
    let short = b.status.as_ref().map_or(0, |s| s.unschedulable_replicas);
    let ok = if divided {
        placed.iter().sum::<i32>() + short == spec.replicas
    } else {
        placed.iter().all(|r| *r == spec.replicas)
    };
    if !ok {
        report.violations.push(Violation {
            invariant: "I2",
            key: key.to_owned(),
            revision: 0,
            what: format!(
                "{} binding of {} replicas placed as {:?} at the end",
                if divided { "a Divided" } else { "a Duplicated" },
                spec.replicas,
                spec.clusters
                    .iter()
                    .map(|t| format!("{}:{}", t.name, t.replicas))
                    .collect::<Vec<_>>()
            ),
        });
    }
}

/// I1: the Work `w` goes (marked or deleted) at `revision`: its binding, if it still exists,
/// must keep a copy somewhere — a target cluster — unless a Directly task for its cluster
/// asked for it.
fn only_copy_check(
    report: &mut Report,
    bindings: &BTreeMap<String, v1::ResourceBinding>,
    w: &v1::Work,
    key: &str,
    revision: Revision,
) {
    let Some(b) = work_binding(w).and_then(|k| bindings.get(&k)) else {
        return;
    };
    if deleting(b.metadata.as_ref()) {
        return;
    }
    let cluster = work_cluster(w);
    let directly = tasks(b)
        .iter()
        .any(|t| t.from_cluster == cluster && t.purge_mode == v1::PurgeMode::Directly as i32);
    if !directly && tasks(b).iter().any(|t| t.from_cluster == cluster) {
        report.violations.push(Violation {
            invariant: "I1",
            key: key.to_owned(),
            revision,
            what: format!("the Work on {cluster} goes while an eviction task still keeps it"),
        });
        return;
    }
    let replicas = b.spec.as_ref().map_or(0, |s| s.replicas);
    if targets(b).is_empty() && replicas > 0 && !directly {
        report.violations.push(Violation {
            invariant: "I1",
            key: key.to_owned(),
            revision,
            what: format!("the Work on {cluster} goes while its binding has no target cluster"),
        });
    }
}

impl Report {
    /// Prints the summary: faults, invariants, violations with evidence.
    pub fn print(&self, scenario: &str, seed: u64, faults: &[String]) {
        eprintln!(
            "=== fault scenario {scenario} (seed {seed}; FLOTILLA_FAULT_SEED={seed} reproduces the schedule)"
        );
        eprintln!("    faults injected: {}", faults.join("; "));
        eprintln!(
            "    invariants checked over {} revisions: {}",
            self.revisions,
            self.checked.join(", ")
        );
        eprintln!("    evictions: {}", self.evictions.len());
        for (service, (replicas, moved)) in &self.shard_writers {
            eprintln!(
                "    {service}: {replicas} replicas wrote objects; {moved} objects were written by a second replica after their shard moved"
            );
        }
        eprintln!("    violations: {}", self.violations.len());
        for v in &self.violations {
            eprintln!("      {v}");
        }
    }
}
