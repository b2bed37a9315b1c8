//! Sharded controllers under faults: three replicas each of the scheduler and the work
//! executor split 32 shards (`--shards 32`) while 2 of 5 members fail, and one replica is
//! killed, frozen past its lease, or added mid-failover. Every revision is recorded and
//! checked as the fault suite does, with I8 across shards: every scheduling decision and
//! every Work write carries the stamp of its shard's holder at that moment, in its term
//! (docs/reliability.md).
//!
//! | scenario | fault | promise |
//! |---|---|---|
//! | `sharded_replica_killed_mid_failover` | a random replica SIGKILLed | its shards taken within the lease; I8 across shards; nothing lost (every binding on the healthy members); I1, I4, I5, I11, I12, I9, I3, I2, I6 |
//! | `sharded_replica_frozen_past_its_lease` | a random replica SIGSTOPped for 1.5–2.3 leases, then thawed | nothing written from its stale shards (I8 across shards); the same |
//! | `sharded_replica_added_mid_failover` | a third replica of each joins | shards move during the work; the same |
//! | `sharded_mass_failure_is_one_brake` | every member unreachable, then healed a moment apart; two taint-manager replicas | the fleet-wide brake stays one decision: no eviction at all (I10); I8 across shards; I9 none, I3 |

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::time::Duration;

use flotilla_proto::v1;
use flotilla_store::testing::EtcdServer;
use flotilla_tests::history::{Expect, check};
use flotilla_tests::{
    ApiClient, Stack, Timers, binding_healthy, cluster_names, eventually, nginx_policy, set_fault,
    target_names, tasks,
};
use rand::{Rng, SeedableRng};

const T: Duration = Duration::from_secs(90);
// 32 shards for 3 replicas: at least 4 per replica (docs/operations.md, "Scaling out"), so
// that every replica holds some with near certainty and the spread check below is not luck.
const SHARDS: u32 = 32;
const BINDINGS: usize = 24;
const SHARDED: [&str; 2] = ["scheduler", "work-executor"];
const ALL: [&str; 5] = ["member1", "member2", "member3", "member4", "member5"];

fn seed() -> u64 {
    std::env::var("FLOTILLA_FAULT_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(rand::random::<u32>) as u64
}

#[derive(Clone, Copy, Debug)]
enum Fault {
    Kill,
    Freeze,
    Add,
}

fn divided_on_all() -> v1::Placement {
    v1::Placement {
        cluster_affinity: Some(cluster_names(&ALL)),
        replica_scheduling: Some(v1::ReplicaSchedulingStrategy {
            replica_scheduling_type: v1::ReplicaSchedulingType::Divided as i32,
            replica_division_preference: v1::ReplicaDivisionPreference::Weighted as i32,
            ..Default::default()
        }),
        ..Default::default()
    }
}

/// `BINDINGS` Deployments under one policy dividing them over every member.
async fn create_workloads(api: &ApiClient) {
    let mut policy = nginx_policy(divided_on_all(), None);
    if let Some(spec) = policy.spec.as_mut() {
        for s in &mut spec.resource_selectors {
            s.name.clear();
        }
    }
    api.clone()
        .create_propagation_policy(v1::CreatePropagationPolicyRequest {
            propagation_policy: Some(policy),
        })
        .await
        .unwrap();
    for i in 0..BINDINGS {
        let mut w = flotilla_api::testing::nginx_workload();
        w.manifest = w.manifest.replace(
            "{\"name\": \"nginx\", \"namespace\"",
            &format!("{{\"name\": \"web-{i}\", \"namespace\""),
        );
        api.clone()
            .create_workload(v1::CreateWorkloadRequest { workload: Some(w) })
            .await
            .unwrap();
    }
}

/// Waits until every binding is healthy, with no task, on `members` (all of them, or any
/// of them when `exactly` is false).
async fn all_on(api: &ApiClient, members: &[String], exactly: bool, what: &str) {
    eventually(T, what, || async {
        let bindings = flotilla_tests::list_bindings(api).await;
        let done = bindings.len() == BINDINGS
            && bindings.iter().all(|b| {
                let mut t = target_names(b);
                t.sort();
                let placed = if exactly {
                    t == members
                } else {
                    !t.is_empty() && t.iter().all(|c| members.contains(c))
                };
                placed && tasks(b).is_empty() && binding_healthy(b)
            });
        done.then_some(())
    })
    .await;
}

async fn sharded_failover(scenario: &str, fault: Fault) {
    let seed = seed();
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    let shards = SHARDS.to_string();
    let timers =
        Timers::fast()
            .set("scheduler", "shards", &shards)
            .set("work-executor", "shards", &shards);
    let (mut stack, recorder) = Stack::start_recorded(EtcdServer::start().await, timers).await;
    // three replicas of each, or two when the third joins mid-failover
    let extra = if matches!(fault, Fault::Add) { 1 } else { 2 };
    for s in SHARDED {
        for _ in 0..extra {
            stack.start_replica(s).await;
        }
    }
    let api = stack
        .ready_push_members(&ALL, &["--pod-startup-delay=200ms"], T)
        .await;
    create_workloads(&api).await;
    let every: Vec<String> = ALL.iter().map(|s| s.to_string()).collect();
    all_on(&api, &every, false, "every binding placed and healthy").await;

    let failing: Vec<&str> = {
        let mut names = ALL.to_vec();
        for i in (1..names.len()).rev() {
            names.swap(i, rng.random_range(0..=i));
        }
        names[..2].to_vec()
    };
    let healthy: Vec<String> = ALL
        .iter()
        .filter(|m| !failing.contains(m))
        .map(|m| m.to_string())
        .collect();
    for m in &failing {
        set_fault(&stack.members[*m], v1::FaultMode::Unreachable).await;
    }
    let after = Duration::from_millis(rng.random_range(0..3000));
    tokio::time::sleep(after).await;
    let service = SHARDED[rng.random_range(0..SHARDED.len())];
    let replica = match rng.random_range(0..3) {
        0 => service.to_owned(),
        i => format!("{service}-{}", i + 1),
    };
    let what = match fault {
        Fault::Kill => {
            stack.kill_service(&replica).await;
            format!("{replica} SIGKILLed {after:?} after the members failed")
        }
        Fault::Freeze => {
            // the lease is 3 s: 1.5 to 2.3 of it
            let frozen_for = Duration::from_millis(rng.random_range(4500..7000));
            stack.services[&replica].freeze(true);
            tokio::time::sleep(frozen_for).await;
            stack.services[&replica].freeze(false);
            format!("{replica} frozen {after:?} after the members failed, for {frozen_for:?}")
        }
        Fault::Add => {
            for s in SHARDED {
                stack.start_replica(s).await;
            }
            format!("a third replica of each added {after:?} after the members failed")
        }
    };
    // 3 replicas divided over the 3 healthy members: one on each
    all_on(
        &api,
        &healthy,
        true,
        "every binding on the three healthy members",
    )
    .await;
    let faults = vec![
        format!("{failing:?} unreachable at once, {BINDINGS} bindings"),
        format!("three replicas each of {SHARDED:?} over {SHARDS} shards"),
        what,
    ];
    let expect = Expect {
        healthy_members: healthy,
        no_evictions: false,
        converged: true,
        grace: None,
        sharded: SHARDED.iter().map(|s| (s.to_string(), SHARDS)).collect(),
    };
    let history = stack
        .verdict(recorder, scenario, seed, &faults, &expect)
        .await;
    // The work really was spread: more than one replica of each wrote.
    let report = check(&history, &expect);
    for s in SHARDED {
        let (writers, _) = report.shard_writers[s];
        assert!(
            writers >= 2,
            "{scenario}: only {writers} replica(s) of {s} wrote objects; sharding did not spread the work"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sharded_replica_killed_mid_failover() {
    sharded_failover("sharded_replica_killed_mid_failover", Fault::Kill).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sharded_replica_frozen_past_its_lease() {
    sharded_failover("sharded_replica_frozen_past_its_lease", Fault::Freeze).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sharded_replica_added_mid_failover() {
    sharded_failover("sharded_replica_added_mid_failover", Fault::Add).await;
}

/// Each binding's name with its sorted target clusters.
fn placements(bindings: &[v1::ResourceBinding]) -> std::collections::BTreeMap<String, Vec<String>> {
    bindings
        .iter()
        .map(|b| {
            let mut t = target_names(b);
            t.sort();
            (
                b.metadata
                    .as_ref()
                    .map(|m| m.name.clone())
                    .unwrap_or_default(),
                t,
            )
        })
        .collect()
}

/// F10 with sharded replicas: every member fails at once, past every timer, then they heal a
/// moment apart. The taint manager's disruption mode is computed over the whole fleet by its
/// one elected replica (two run), so the scheduler's and work executor's shards change
/// nothing about it: no eviction at all (I10), and the placements stay as they were.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sharded_mass_failure_is_one_brake() {
    let scenario = "sharded_mass_failure_is_one_brake";
    let seed = seed();
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    let shards = SHARDS.to_string();
    let timers =
        Timers::fast()
            .set("scheduler", "shards", &shards)
            .set("work-executor", "shards", &shards);
    let (mut stack, recorder) = Stack::start_recorded(EtcdServer::start().await, timers).await;
    for s in SHARDED {
        for _ in 0..2 {
            stack.start_replica(s).await;
        }
    }
    stack.start_replica("taint-manager").await;
    let api = stack
        .ready_push_members(&ALL, &["--pod-startup-delay=200ms"], T)
        .await;
    create_workloads(&api).await;
    let every: Vec<String> = ALL.iter().map(|s| s.to_string()).collect();
    all_on(&api, &every, false, "every binding placed and healthy").await;
    let before = placements(&flotilla_tests::list_bindings(&api).await);

    for m in ALL {
        set_fault(&stack.members[m], v1::FaultMode::Unreachable).await;
    }
    // past the failure threshold, the NoExecute timeout and the default toleration
    let down = Duration::from_millis(rng.random_range(5000..7000));
    tokio::time::sleep(down).await;
    let first = rng.random_range(1..ALL.len());
    let gap = Duration::from_millis(rng.random_range(50..1500));
    for m in &ALL[..first] {
        set_fault(&stack.members[*m], v1::FaultMode::Healthy).await;
    }
    tokio::time::sleep(gap).await;
    for m in &ALL[first..] {
        set_fault(&stack.members[*m], v1::FaultMode::Healthy).await;
    }
    flotilla_tests::wait_clusters_ready(&api, &ALL, T).await;
    eventually(T, "every binding healthy where it was", || async {
        let bindings = flotilla_tests::list_bindings(&api).await;
        let settled: Vec<v1::ResourceBinding> = bindings
            .into_iter()
            .filter(|b| tasks(b).is_empty() && binding_healthy(b))
            .collect();
        let now = placements(&settled);
        (now == before).then_some(())
    })
    .await;
    let faults = vec![
        format!("all 5 members unreachable for {down:?}"),
        format!(
            "{first} healed, the other {} {gap:?} later",
            ALL.len() - first
        ),
        format!("three replicas each of {SHARDED:?} over {SHARDS} shards, two taint-managers"),
    ];
    let expect = Expect {
        healthy_members: Vec::new(),
        no_evictions: true,
        converged: true,
        grace: None,
        sharded: SHARDED.iter().map(|s| (s.to_string(), SHARDS)).collect(),
    };
    stack
        .verdict(recorder, scenario, seed, &faults, &expect)
        .await;
}
