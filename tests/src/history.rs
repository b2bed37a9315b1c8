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
//! - **I3** at the end: every target and task cluster of a live binding has a live Work, and
//!   every live Work has a live binding that names its cluster.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

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
    /// I3 at the end (the scenario waited for convergence).
    pub converged: bool,
}

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
}

fn targets(b: &v1::ResourceBinding) -> BTreeSet<String> {
    b.spec
        .iter()
        .flat_map(|s| s.clusters.iter().map(|t| t.name.clone()))
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

/// Replays `history` and checks the invariants (see the module docs).
pub fn check(history: &[Entry], expect: &Expect) -> Report {
    let mut report = Report {
        checked: vec!["I1", "I4", "I11"],
        ..Default::default()
    };
    if !expect.healthy_members.is_empty() {
        report.checked.push("I9");
    }
    if expect.no_evictions {
        report.checked.push("I10");
    }
    if expect.converged {
        report.checked.push("I3");
    }
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
                bindings.insert(e.key.clone(), (**b).clone());
            }
            Change::Work(w) => {
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
                } else if let Some(w) = works.remove(&e.key)
                    && !deleting(w.metadata.as_ref())
                {
                    only_copy_check(&mut report, &bindings, &w, &e.key, e.revision);
                }
            }
            Change::Other => {}
        }
    }
    report.revisions = revisions.len();
    if expect.converged {
        for (key, b) in &bindings {
            if deleting(b.metadata.as_ref()) {
                continue;
            }
            let needed: BTreeSet<String> = targets(b)
                .into_iter()
                .chain(tasks(b).iter().map(|t| t.from_cluster.clone()))
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
                targets(b).contains(&c) || tasks(b).iter().any(|t| t.from_cluster == c)
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
    report
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
        eprintln!("    violations: {}", self.violations.len());
        for v in &self.violations {
            eprintln!("      {v}");
        }
    }
}
