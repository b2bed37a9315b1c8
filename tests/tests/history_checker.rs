//! The fault suite's invariant checker on hand-written histories: each check must find the
//! violation it exists for, and must not find one in the legitimate variant next to it. (A
//! checker that never fires would let every fault scenario pass.)

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::{Duration, Instant};

use flotilla_proto::v1;
use flotilla_tests::history::{Change, Entry, Expect, Report, check};

const B: &str = "bindings/default/nginx";

/// Builds a history one change at a time, each `after` the start.
struct History {
    start: Instant,
    revision: i64,
    entries: Vec<Entry>,
}

impl History {
    fn new() -> Self {
        History {
            start: Instant::now(),
            revision: 0,
            entries: Vec::new(),
        }
    }

    fn push(&mut self, after: Duration, key: &str, change: Change) {
        self.revision += 1;
        self.entries.push(Entry {
            revision: self.revision,
            key: key.to_owned(),
            change,
            at: self.start + after,
        });
    }

    fn cluster(&mut self, after: Duration, c: v1::Cluster) {
        let key = format!("clusters/{}", c.metadata.as_ref().unwrap().name);
        self.push(after, &key, Change::Cluster(Box::new(c)));
    }

    fn binding(&mut self, after: Duration, b: v1::ResourceBinding) {
        self.push(after, B, Change::Binding(Box::new(b)));
    }

    fn work(&mut self, after: Duration, w: v1::Work) {
        let cluster = w.spec.as_ref().unwrap().cluster.clone();
        self.push(
            after,
            &format!("works/{cluster}/nginx"),
            Change::Work(Box::new(w)),
        );
    }

    fn check(&self, expect: &Expect) -> Report {
        check(&self.entries, expect)
    }
}

fn secs(s: u64) -> Duration {
    Duration::from_secs(s)
}

fn meta(name: &str, generation: i64) -> Option<v1::ObjectMeta> {
    Some(v1::ObjectMeta {
        name: name.into(),
        namespace: "default".into(),
        generation,
        ..Default::default()
    })
}

fn cluster(name: &str, no_execute: bool) -> v1::Cluster {
    let taints = if no_execute {
        vec![v1::Taint {
            key: "cluster.karmada.io/not-ready".into(),
            effect: v1::TaintEffect::NoExecute as i32,
            ..Default::default()
        }]
    } else {
        Vec::new()
    };
    v1::Cluster {
        metadata: meta(name, 1),
        spec: Some(v1::ClusterSpec {
            taints,
            ..Default::default()
        }),
        ..Default::default()
    }
}

/// A Divided binding of 3 replicas: `targets` (cluster, replicas), eviction tasks from
/// `tasks`, tolerating not-ready for `toleration` seconds.
fn binding(
    generation: i64,
    targets: &[(&str, i32)],
    tasks: &[&str],
    toleration: i64,
) -> v1::ResourceBinding {
    v1::ResourceBinding {
        metadata: meta("nginx", generation),
        spec: Some(v1::ResourceBindingSpec {
            replicas: 3,
            placement: Some(v1::Placement {
                cluster_tolerations: vec![v1::Toleration {
                    key: "cluster.karmada.io/not-ready".into(),
                    operator: v1::TolerationOperator::Exists as i32,
                    effect: v1::TaintEffect::NoExecute as i32,
                    toleration_seconds: Some(toleration),
                    ..Default::default()
                }],
                replica_scheduling: Some(v1::ReplicaSchedulingStrategy {
                    replica_scheduling_type: v1::ReplicaSchedulingType::Divided as i32,
                    ..Default::default()
                }),
                ..Default::default()
            }),
            clusters: v1::TargetCluster::from_pairs(targets),
            graceful_eviction_tasks: tasks
                .iter()
                .map(|c| v1::GracefulEvictionTask {
                    from_cluster: (*c).into(),
                    purge_mode: v1::PurgeMode::Gracefully as i32,
                    producer: "TaintManager".into(),
                    ..Default::default()
                })
                .collect(),
            ..Default::default()
        }),
        ..Default::default()
    }
}

/// `b` with every target reported Healthy for its generation.
fn healthy(mut b: v1::ResourceBinding) -> v1::ResourceBinding {
    let generation = b.metadata.as_ref().unwrap().generation;
    let items = b
        .spec
        .as_ref()
        .unwrap()
        .clusters
        .iter()
        .map(|t| v1::AggregatedStatusItem {
            cluster_name: t.name.clone(),
            health: v1::ResourceHealth::Healthy as i32,
            ..Default::default()
        })
        .collect();
    b.status = Some(v1::ResourceBindingStatus {
        aggregated_status: items,
        aggregated_status_observed_generation: generation,
        ..Default::default()
    });
    b
}

fn work(cluster: &str, deleting: bool) -> v1::Work {
    v1::Work {
        metadata: Some(v1::ObjectMeta {
            name: "nginx".into(),
            namespace: cluster.into(),
            deletion_timestamp: deleting.then(prost_types::Timestamp::default),
            ..Default::default()
        }),
        spec: Some(v1::WorkSpec {
            cluster: cluster.into(),
            binding: Some(v1::BindingReference {
                namespace: "default".into(),
                name: "nginx".into(),
                ..Default::default()
            }),
            ..Default::default()
        }),
        ..Default::default()
    }
}

fn found(report: &Report, invariant: &str) -> usize {
    report
        .violations
        .iter()
        .filter(|v| v.invariant == invariant)
        .count()
}

fn grace(s: u64) -> Expect {
    Expect {
        grace: Some(secs(s)),
        ..Default::default()
    }
}

/// member1 tainted at 0 s and the binding evicted from it at `evicted_at`; tolerated 5 s.
fn eviction_at(evicted_at: Duration) -> History {
    let mut h = History::new();
    h.binding(secs(0), binding(1, &[("member1", 3)], &[], 5));
    h.cluster(secs(0), cluster("member1", true));
    h.binding(evicted_at, binding(2, &[("member2", 3)], &["member1"], 5));
    h
}

#[test]
fn i12_an_eviction_before_the_toleration_ran_out_is_found() {
    let early = eviction_at(secs(2)).check(&grace(60));
    assert_eq!(found(&early, "I12"), 1, "{:?}", early.violations);
    let on_time = eviction_at(secs(5)).check(&grace(60));
    assert_eq!(found(&on_time, "I12"), 0, "{:?}", on_time.violations);
}

#[test]
fn i12_a_taint_that_went_away_and_came_back_restarts_the_toleration() {
    let mut h = History::new();
    h.binding(secs(0), binding(1, &[("member1", 3)], &[], 5));
    h.cluster(secs(0), cluster("member1", true));
    h.cluster(secs(4), cluster("member1", false));
    h.cluster(secs(5), cluster("member1", true));
    h.binding(secs(6), binding(2, &[("member2", 3)], &["member1"], 5));
    let r = h.check(&grace(60));
    assert_eq!(found(&r, "I12"), 1, "{:?}", r.violations);
}

/// An eviction at 5 s, then the task removed from `removed` (a binding version) at `at`.
fn task_removed(at: Duration, before: v1::ResourceBinding, after: v1::ResourceBinding) -> Report {
    let mut h = eviction_at(secs(5));
    h.binding(secs(5) + Duration::from_millis(100), before);
    h.binding(at, after);
    h.check(&grace(10))
}

#[test]
fn i5_a_task_removed_early_without_a_healthy_replacement_is_found() {
    let before = binding(2, &[("member2", 3)], &["member1"], 5);
    let r = task_removed(secs(8), before, binding(2, &[("member2", 3)], &[], 5));
    assert_eq!(found(&r, "I5"), 1, "{:?}", r.violations);
}

#[test]
fn i5_a_task_removed_for_a_legitimate_reason_is_not_a_violation() {
    let before = || binding(2, &[("member2", 3)], &["member1"], 5);
    let after = || binding(2, &[("member2", 3)], &[], 5);
    // the grace period (10 s from 5 s) elapsed
    let r = task_removed(secs(16), before(), after());
    assert_eq!(found(&r, "I5"), 0, "timed out: {:?}", r.violations);
    // every target reported Healthy for the generation
    let r = task_removed(secs(8), healthy(before()), after());
    assert_eq!(found(&r, "I5"), 0, "healthy: {:?}", r.violations);
    // healthy, but for an older generation: not a reason
    let mut stale = healthy(before());
    stale.metadata.as_mut().unwrap().generation = 3;
    let r = task_removed(secs(8), stale, after());
    assert_eq!(found(&r, "I5"), 1, "stale health: {:?}", r.violations);
    // the cluster was scheduled again (A6)
    let r = task_removed(secs(8), before(), binding(3, &[("member1", 3)], &[], 5));
    assert_eq!(found(&r, "I5"), 0, "reinstated: {:?}", r.violations);
    // WE-8.6: the removing version proves it, for its own generation, over the same targets
    let ended = || healthy(binding(3, &[("member2", 3)], &[], 5));
    let r = task_removed(secs(8), before(), ended());
    assert_eq!(
        found(&r, "I5"),
        0,
        "ended by the status write: {:?}",
        r.violations
    );
    // ... but not for an older generation
    let mut stale = ended();
    stale
        .status
        .as_mut()
        .unwrap()
        .aggregated_status_observed_generation = 2;
    let r = task_removed(secs(8), before(), stale);
    assert_eq!(
        found(&r, "I5"),
        1,
        "stale proof in the removal: {:?}",
        r.violations
    );
    // ... nor over other targets than the version before had
    let moved = healthy(binding(3, &[("member3", 3)], &[], 5));
    let r = task_removed(secs(8), before(), moved);
    assert_eq!(
        found(&r, "I5"),
        1,
        "proof over new targets: {:?}",
        r.violations
    );
}

/// `cluster`'s Work of an apps/v1 Deployment of `replicas` at `generation`, whose status says
/// `health` for `observed` with `ready` replicas ready.
fn reported(
    cluster: &str,
    generation: i64,
    replicas: i32,
    observed: i64,
    health: v1::ResourceHealth,
    ready: i32,
) -> v1::Work {
    let mut w = work(cluster, false);
    w.metadata.as_mut().unwrap().generation = generation;
    let spec = w.spec.as_mut().unwrap();
    spec.replicas = Some(replicas);
    spec.resource = Some(v1::ObjectReference {
        api_version: "apps/v1".into(),
        kind: "Deployment".into(),
        namespace: "default".into(),
        name: "nginx".into(),
        ..Default::default()
    });
    w.status = Some(v1::WorkStatus {
        applied: true,
        observed_generation: observed,
        health: health as i32,
        ready_replicas: ready,
        ..Default::default()
    });
    w
}

/// I1b: a Work status that says Healthy for its generation with fewer ready replicas than the
/// Work asks for is found, and so is the task removal that trusted it (the Pull agent once
/// reported its watch cache's pre-apply object this way); the same history with the replicas
/// ready, or with the Healthy report for the older generation, is fine.
#[test]
fn i1b_health_without_the_ready_replicas_behind_it_is_found() {
    use v1::ResourceHealth::{Healthy, Unhealthy};
    let before = || healthy(binding(2, &[("member2", 3)], &["member1"], 5));
    let after = || binding(2, &[("member2", 3)], &[], 5);
    let run = |w: v1::Work| {
        let mut h = eviction_at(secs(5));
        h.work(secs(6), w);
        h.binding(secs(6) + Duration::from_millis(100), before());
        h.binding(secs(8), after());
        h.check(&grace(10))
    };
    // the bug: generation 2 (3 replicas) reported Healthy with the 2 ready of generation 1
    let r = run(reported("member2", 2, 3, 2, Healthy, 2));
    assert_eq!(
        found(&r, "I1b"),
        2,
        "the status and the removal: {:?}",
        r.violations
    );
    assert!(r.checked.contains(&"I1b"));
    // backed: all 3 ready
    let r = run(reported("member2", 2, 3, 2, Healthy, 3));
    assert_eq!(found(&r, "I1b"), 0, "{:?}", r.violations);
    // not yet ready and saying so
    let r = run(reported("member2", 2, 3, 2, Unhealthy, 2));
    assert_eq!(found(&r, "I1b"), 0, "{:?}", r.violations);
    // Healthy for the older generation: not a claim about generation 2
    let r = run(reported("member2", 2, 3, 1, Healthy, 2));
    assert_eq!(found(&r, "I1b"), 0, "{:?}", r.violations);
    // a kind whose replicas are no ready count (a Job's parallelism) is not judged
    let mut job = reported("member2", 2, 3, 2, Healthy, 0);
    job.spec.as_mut().unwrap().resource.as_mut().unwrap().kind = "Job".into();
    job.spec
        .as_mut()
        .unwrap()
        .resource
        .as_mut()
        .unwrap()
        .api_version = "batch/v1".into();
    let r = run(job);
    assert_eq!(found(&r, "I1b"), 0, "{:?}", r.violations);
}

#[test]
fn i1_a_work_deleted_while_its_task_keeps_it_is_found() {
    let mut h = eviction_at(secs(5));
    h.work(secs(0), work("member1", false));
    h.work(secs(6), work("member1", true));
    let r = h.check(&grace(60));
    assert_eq!(found(&r, "I1"), 1, "{:?}", r.violations);
    // after the task went (timed out), the same deletion is fine
    let mut h = eviction_at(secs(5));
    h.work(secs(0), work("member1", false));
    h.binding(secs(70), binding(2, &[("member2", 3)], &[], 5));
    h.work(secs(70), work("member1", true));
    let r = h.check(&grace(60));
    assert_eq!(found(&r, "I1"), 0, "{:?}", r.violations);
}

#[test]
fn i2_and_i6_at_the_end() {
    let converged = |g| Expect {
        converged: true,
        grace: Some(secs(g)),
        ..Default::default()
    };
    // a Divided binding of 3 with 2 placed
    let mut h = History::new();
    h.binding(secs(0), binding(1, &[("member1", 2)], &[], 5));
    h.work(secs(0), work("member1", false));
    let r = h.check(&converged(60));
    assert_eq!(found(&r, "I2"), 1, "{:?}", r.violations);
    // a task alive 30 s at the end, with a 10 s grace period (and a target)
    let mut h = eviction_at(secs(5));
    h.work(secs(0), work("member1", false));
    h.work(secs(5), work("member2", false));
    h.push(secs(35), "events/x", Change::Other);
    let r = h.check(&converged(10));
    assert_eq!(found(&r, "I6"), 1, "{:?}", r.violations);
    assert_eq!(found(&r, "I2"), 0, "{:?}", r.violations);
    let r = h.check(&converged(60));
    assert_eq!(found(&r, "I6"), 0, "{:?}", r.violations);
}

// === I8 across shards ===

const OWNER: &str = "shards/work-executor/owners/0000";
const WORK: &str = "works/member1/default/nginx-abc";

/// A history of (revision, key, change), several changes per revision allowed.
fn at(changes: Vec<(i64, &str, Change)>) -> Vec<Entry> {
    let start = Instant::now();
    changes
        .into_iter()
        .map(|(revision, key, change)| Entry {
            revision,
            key: key.to_owned(),
            change,
            at: start + secs(u64::try_from(revision).unwrap()),
        })
        .collect()
}

fn owner(lease: i64, create_revision: i64) -> Change {
    Change::ShardOwner {
        owner: format!("replica-{lease}"),
        lease,
        create_revision,
    }
}

fn a_work() -> Change {
    Change::Work(Box::new(work("member1", false)))
}

fn sharded(service: &str) -> Expect {
    Expect {
        sharded: vec![(service.to_owned(), 1)],
        ..Default::default()
    }
}

fn i8_found(history: &[Entry], expect: &Expect) -> (usize, Report) {
    let r = check(history, expect);
    (found(&r, "I8"), r)
}

#[test]
fn i8_across_shards_a_write_stamped_by_the_holder_in_its_term_is_fine() {
    // a claims at 1 and writes at 2; a releases at 3; b claims at 4 and writes at 5
    let h = at(vec![
        (1, OWNER, owner(0xa, 1)),
        (2, WORK, a_work()),
        (2, OWNER, owner(0xa, 1)),
        (3, OWNER, Change::Deleted),
        (4, OWNER, owner(0xb, 4)),
        (5, WORK, a_work()),
        (5, OWNER, owner(0xb, 4)),
    ]);
    let (n, r) = i8_found(&h, &sharded("work-executor"));
    assert_eq!(n, 0, "{:?}", r.violations);
    assert_eq!(
        r.shard_writers["work-executor"],
        (2, 1),
        "two writers, one object moved"
    );
    assert!(r.checked.contains(&"I8"));
}

#[test]
fn i8_across_shards_a_write_without_a_stamp_is_found() {
    let h = at(vec![(1, OWNER, owner(0xa, 1)), (2, WORK, a_work())]);
    assert_eq!(i8_found(&h, &sharded("work-executor")).0, 1);
    // the same Work write is nobody's business when the service is not sharded
    assert_eq!(i8_found(&h, &Expect::default()).0, 0);
}

#[test]
fn i8_across_shards_a_late_write_of_a_replica_that_lost_its_shard_is_found() {
    // a released; b holds it now; a's late stamp lands on b's key (unfenced write)
    let h = at(vec![
        (1, OWNER, owner(0xa, 1)),
        (2, OWNER, Change::Deleted),
        (3, OWNER, owner(0xb, 3)),
        (4, WORK, a_work()),
        (4, OWNER, owner(0xa, 3)),
    ]);
    assert_eq!(i8_found(&h, &sharded("work-executor")).0, 1);
    // a's late stamp re-creates a released key before anyone claims it
    let h = at(vec![
        (1, OWNER, owner(0xa, 1)),
        (2, OWNER, Change::Deleted),
        (3, WORK, a_work()),
        (3, OWNER, owner(0xa, 3)),
    ]);
    assert_eq!(i8_found(&h, &sharded("work-executor")).0, 1);
}

#[test]
fn i8_across_shards_a_claim_while_held_is_found() {
    let h = at(vec![(1, OWNER, owner(0xa, 1)), (2, OWNER, owner(0xb, 2))]);
    assert_eq!(i8_found(&h, &sharded("work-executor")).0, 1);
    // after the holder's key is gone (released or expired), a claim is fine
    let h = at(vec![
        (1, OWNER, owner(0xa, 1)),
        (2, OWNER, Change::Deleted),
        (3, OWNER, owner(0xb, 3)),
    ]);
    assert_eq!(i8_found(&h, &sharded("work-executor")).0, 0);
}

#[test]
fn i8_across_shards_only_the_schedulers_decisions_need_its_stamp() {
    const OWNER_S: &str = "shards/scheduler/owners/0000";
    let decided = |generation: i64| {
        let mut b = binding(generation, &[("member1", 3)], &[], 5);
        b.status = Some(v1::ResourceBindingStatus {
            scheduler_observed_generation: generation,
            ..Default::default()
        });
        Change::Binding(Box::new(b))
    };
    let h = at(vec![
        (1, OWNER_S, owner(0xa, 1)),
        // the api writes a binding: no scheduling fields, no stamp needed
        (2, B, Change::Binding(Box::new(binding(1, &[], &[], 5)))),
        // the scheduler decides, stamped
        (3, B, decided(1)),
        (3, OWNER_S, owner(0xa, 1)),
        // another service writes the binding, scheduling fields unchanged: no stamp needed
        (4, B, decided(1)),
    ]);
    assert_eq!(i8_found(&h, &sharded("scheduler")).0, 0);
    // a scheduling decision without the stamp
    let mut bad = h.clone();
    bad.push(at(vec![(5, B, decided(2))]).remove(0));
    assert_eq!(i8_found(&bad, &sharded("scheduler")).0, 1);
}
