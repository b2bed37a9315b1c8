//! The fault suite: the real service binaries on a real etcd, seeded faults, and every
//! revision of the stack's etcd namespace recorded from before the first write and checked
//! against the invariants afterwards (`flotilla_tests::history`). Each scenario prints its
//! seed, the faults it injected, the invariants it checked and every violation with its
//! evidence; a violation fails the test.
//!
//! ```text
//!   FLOTILLA_FAULT_SEED=N   replay one schedule (the seed is printed by every run)
//!   FLOTILLA_SOAK=1         run every scenario over FLOTILLA_SOAK_SEEDS seeds (default 20)
//! ```
//!
//! | scenario | fault (docs/reliability.md) | promise beyond I1, I4, I5, I11, I12 (and I2, I3, I6 at the end) |
//! |---|---|---|
//! | `f1_etcd_pause`        | F1: etcd frozen for 3–6 s (longer than grace + timeout) | no member judged, no eviction (I9, I10), I3 |
//! | `f2_kill_mid_failover` | F2: a controller SIGKILLed during a failover, restarted | the healthy members untouched (I9), I3 |
//! | `f5_compacted_gap`     | F5: the work-executor cut off, Works changed, history compacted | every Work catches up (I3) |
//! | `f3_frozen_leaders_are_fenced` | F3: two replicas each of taint-manager and scheduler; the leaders SIGSTOPped past their lease mid-failover | no double eviction or lost task (I4); the failover completes; I3 |
//! | `f4_flapping_member_is_never_evicted` | F4: a member flaps faster than the failure threshold | never judged, nothing evicted (I9, I10) |
//! | `f7_concurrent_writers_lose_nothing` | F7: two replicas of three writers, 30 bindings, 3 of 5 members fail at once | I4 on every revision; every binding converges; I3 |
//! | `f9_recovery_before_toleration_evicts_nothing` | F9: a member tainted NoExecute heals before the 5 s toleration | no eviction (I10, I11); I3 |
//! | `f10_mass_failure`     | F10: every member fails, then they heal a moment apart | no eviction (I10), I3 |
//! | `f11_member_api_errors` | F11: the member's API fails, conflicts, loses replies | the Work says so; applied in the end; nothing created twice; I3 |
//! | `f6_clock_skew`        | F6: the taint-manager's wall clock minutes off (libfaketime) | no eviction before the toleration on the test's clock (I12); the task ends (I6); I3 |
//! | `f8_replacement_never_healthy` | F8: the replacement never turns healthy (pods never Ready, status unreadable) or there is none | the old copy goes at the grace period, not before (I1, I5); with no replacement it stays and the cluster is scheduled again (A6); no task outlives its grace (I6) |
//! | `pull_member_scaled_up_in_a_failover` | a Pull member's watch delivers events 0.4–1.5 s late while a failover scales its workload up (WE-7.1) | no Work is Healthy for a generation with fewer ready replicas than it asks, and no task ends on such health (I1b); the failover completes; I3 |
//! | `f1_etcd_member_lost_mid_failover` | one of three etcd members SIGKILLed mid-failover | the failover completes; no API call fails meanwhile; I9 for the healthy members, I3 |
//! | `f1_etcd_member_name_gone_mid_failover` | the same, members reached by host name and the lost one's name gone (as in compose) | the same |
//! | `f1_a_killed_member_that_refuses_connections_is_taken_out_of_use` | one of three etcd members SIGKILLed, requests going on | the client takes the member out of its balancer |

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::time::Duration;

use flotilla_proto::v1;
use flotilla_runtime::testing::TcpProxy;
use flotilla_store::Store;
use flotilla_store::testing::EtcdServer;
use flotilla_tests::history::{Expect, HistoryRecorder, check};
use flotilla_tests::{
    ApiClient, ApiLoad, Stack, Timers, api_client, binding_healthy, cluster_names, create_nginx,
    eventually, nginx_binding, nginx_policy, scale_nginx, set_fault, target_names, tasks,
    wait_clusters_ready,
};
use rand::{Rng, SeedableRng};

const T: Duration = Duration::from_secs(60);

/// The seeds to run: `FLOTILLA_FAULT_SEED`, else a random one; with `FLOTILLA_SOAK=1`,
/// `FLOTILLA_SOAK_SEEDS` (default 20) seeds following it.
fn seeds() -> Vec<u64> {
    let first = std::env::var("FLOTILLA_FAULT_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(rand::random::<u32>) as u64;
    if std::env::var("FLOTILLA_SOAK").is_ok_and(|v| v == "1") {
        let n: u64 = std::env::var("FLOTILLA_SOAK_SEEDS")
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or(20);
        (0..n).map(|i| first + i).collect()
    } else {
        vec![first]
    }
}

/// A stack on `etcd` whose whole history is recorded.
async fn recorded(etcd: EtcdServer, timers: Timers) -> (Stack, HistoryRecorder) {
    Stack::start_recorded(etcd, timers).await
}

/// Stops recording at the current revision and checks the history; panics on a violation.
async fn verdict(
    stack: &Stack,
    recorder: HistoryRecorder,
    scenario: &str,
    seed: u64,
    faults: &[String],
    expect: &Expect,
) {
    stack
        .verdict(recorder, scenario, seed, faults, expect)
        .await;
}

/// What a scenario in which nothing may be evicted expects: `healthy` are never judged
/// anything but Ready, and the history converges.
fn nothing_evicted(healthy: &[&str]) -> Expect {
    Expect {
        healthy_members: healthy.iter().map(|s| s.to_string()).collect(),
        no_evictions: true,
        converged: true,
        grace: None,
        sharded: Vec::new(),
    }
}

/// What a failover onto `healthy` expects: [`nothing_evicted`], but evictions happen.
fn failover_onto(healthy: &[&str]) -> Expect {
    Expect {
        no_evictions: false,
        ..nothing_evicted(healthy)
    }
}

/// Creates nginx with a policy placing it by `placement` over `members`, and waits until it
/// is healthy on them.
async fn nginx_healthy_on(
    api: &ApiClient,
    members: &[&str],
    placement: fn(&[&str]) -> v1::Placement,
) {
    create_nginx(api, nginx_policy(placement(members), None)).await;
    healthy_on(api, members).await;
}

fn duplicated_on(names: &[&str]) -> v1::Placement {
    v1::Placement {
        cluster_affinity: Some(cluster_names(names)),
        replica_scheduling: Some(v1::ReplicaSchedulingStrategy {
            replica_scheduling_type: v1::ReplicaSchedulingType::Duplicated as i32,
            ..Default::default()
        }),
        ..Default::default()
    }
}

fn divided_on(names: &[&str]) -> v1::Placement {
    v1::Placement {
        cluster_affinity: Some(cluster_names(names)),
        replica_scheduling: Some(v1::ReplicaSchedulingStrategy {
            replica_scheduling_type: v1::ReplicaSchedulingType::Divided as i32,
            replica_division_preference: v1::ReplicaDivisionPreference::Weighted as i32,
            ..Default::default()
        }),
        ..Default::default()
    }
}

async fn healthy_on(api: &ApiClient, want: &[&str]) {
    let mut want: Vec<String> = want.iter().map(|s| s.to_string()).collect();
    want.sort();
    eventually(T, &format!("nginx healthy on {want:?}"), || {
        let want = want.clone();
        async move {
            let b = nginx_binding(api).await?;
            let mut got = target_names(&b);
            got.sort();
            (got == want && tasks(&b).is_empty() && binding_healthy(&b)).then_some(())
        }
    })
    .await;
}

/// A MemberSim client of the member's control address (faults, status).
async fn member_control(
    stack: &Stack,
    member: &str,
) -> v1::member_sim_client::MemberSimClient<tonic::transport::Channel> {
    v1::member_sim_client::MemberSimClient::connect(format!(
        "http://{}",
        stack.members[member].control_addr
    ))
    .await
    .unwrap()
}

/// Waits until there are `n` Works, each carrying `replicas` and applied at its generation.
async fn works_applied_with(api: &ApiClient, n: usize, replicas: i32) {
    eventually(
        T,
        &format!("{n} Works with {replicas} replicas, applied at their generation"),
        || async {
            let works = flotilla_tests::list_works(api).await;
            let done = works.len() == n
                && works.iter().all(|w| {
                    let generation = w.metadata.as_ref().map_or(0, |m| m.generation);
                    w.spec.as_ref().and_then(|s| s.replicas) == Some(replicas)
                        && w.status
                            .as_ref()
                            .is_some_and(|s| s.observed_generation == generation && s.applied)
                });
            done.then_some(())
        },
    )
    .await;
}

/// F1: etcd freezes for longer than the monitor grace period and the failover eviction
/// timeout together, while every member (two Push, one Pull) stays healthy. The control
/// plane's own blindness must not be charged to any member (A13): no Ready change, no taint,
/// no eviction.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn f1_etcd_pause() {
    for seed in seeds() {
        let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
        let (mut stack, recorder) = recorded(EtcdServer::dedicated().await, Timers::fast()).await;
        for m in ["member1", "member2"] {
            stack.start_member(m, &["--pod-startup-delay=200ms"]).await;
        }
        stack
            .start_pull_member("member3", &["--pod-startup-delay=200ms"])
            .await;
        let api = api_client(&stack).await;
        stack
            .create_push_clusters(&api, &["member1", "member2"])
            .await;
        flotilla_tests::create_pull_cluster(&api, "member3").await;
        let all = ["member1", "member2", "member3"];
        wait_clusters_ready(&api, &all, T).await;
        nginx_healthy_on(&api, &all, duplicated_on).await;

        let pause = Duration::from_millis(rng.random_range(3000..6000));
        stack.etcd.pause();
        tokio::time::sleep(pause).await;
        stack.etcd.resume();
        // a fresh grace period (2 s) and the success threshold (1 s) with room to spare
        tokio::time::sleep(Duration::from_secs(6)).await;
        healthy_on(&api, &all).await;
        let faults = vec![format!("etcd paused for {pause:?} (SIGSTOP … SIGCONT)")];
        let expect = nothing_evicted(&all);
        verdict(&stack, recorder, "f1_etcd_pause", seed, &faults, &expect).await;
    }
}

/// F2: during a failover (member1 unreachable), one controller is SIGKILLed at a seeded
/// moment and restarted after a seeded pause. The failover completes, the healthy members are
/// never judged, and every binding ends with exactly the Works it needs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn f2_kill_mid_failover() {
    const VICTIMS: [&str; 5] = [
        "cluster-health",
        "taint-manager",
        "scheduler",
        "graceful-eviction",
        "work-executor",
    ];
    for seed in seeds() {
        let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
        let (mut stack, recorder) = recorded(EtcdServer::start().await, Timers::fast()).await;
        let all = ["member1", "member2", "member3"];
        let api = stack
            .ready_push_members(&all, &["--pod-startup-delay=200ms"], T)
            .await;
        nginx_healthy_on(&api, &all, divided_on).await;

        let victim = VICTIMS[rng.random_range(0..VICTIMS.len())];
        let kill_after = Duration::from_millis(rng.random_range(0..4000));
        let down_for = Duration::from_millis(rng.random_range(200..3000));
        set_fault(&stack.members["member1"], v1::FaultMode::Unreachable).await;
        tokio::time::sleep(kill_after).await;
        stack.kill_service(victim).await;
        tokio::time::sleep(down_for).await;
        stack.start_service(victim);
        healthy_on(&api, &["member2", "member3"]).await;
        let faults = vec![
            "member1 unreachable".to_owned(),
            format!("{victim} SIGKILLed {kill_after:?} later, restarted after {down_for:?}"),
        ];
        let expect = failover_onto(&["member2", "member3"]);
        verdict(
            &stack,
            recorder,
            "f2_kill_mid_failover",
            seed,
            &faults,
            &expect,
        )
        .await;
    }
}

/// F5: the work-executor's link to etcd is cut; meanwhile the workload changes (every Work
/// must move to generation 2) and the history is compacted past the gap. After the link
/// heals the work-executor re-lists, and every Work catches up — before the fix a re-listed
/// binding was reconciled against the cache of before the gap, seen as done, and dropped.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn f5_compacted_gap() {
    for seed in seeds() {
        let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
        let (mut stack, recorder) = recorded(EtcdServer::dedicated().await, Timers::fast()).await;
        let upstream: std::net::SocketAddr = stack.etcd.endpoints()[0]
            .trim_start_matches("http://")
            .parse()
            .unwrap();
        let proxy = TcpProxy::start(upstream).await.unwrap();
        stack
            .restart_service_via("work-executor", &proxy.url())
            .await;
        let all = ["member1", "member2"];
        let api = stack
            .ready_push_members(&all, &["--pod-startup-delay=200ms"], T)
            .await;
        nginx_healthy_on(&api, &all, duplicated_on).await;

        proxy.cut().await;
        let cut_for = Duration::from_millis(rng.random_range(500..3000));
        scale_nginx(&api, 3, 5).await;
        // let the api and scheduler move the binding on, then compact the gap away
        tokio::time::sleep(cut_for).await;
        let store = stack.store().await;
        let rev = store.current_revision().await.unwrap();
        store.compact(rev).await.unwrap();
        proxy.restore();

        works_applied_with(&api, 2, 5).await;
        healthy_on(&api, &all).await;
        let faults = vec![format!(
            "work-executor cut off from etcd for {cut_for:?}+, workload changed, history compacted at {rev}"
        )];
        let expect = nothing_evicted(&all);
        // the recorder's own watch is live, so the compaction did not cut it
        verdict(&stack, recorder, "f5_compacted_gap", seed, &faults, &expect).await;
    }
}

/// F10: every member fails at once (the brake halts evictions), then they heal a seeded
/// moment apart. Leaving the full disruption must release no herd (A8): the members that come
/// back last lose nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn f10_mass_failure() {
    for seed in seeds() {
        let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
        let (mut stack, recorder) = recorded(EtcdServer::start().await, Timers::fast()).await;
        let all = ["member1", "member2", "member3", "member4", "member5"];
        let api = stack
            .ready_push_members(&all, &["--pod-startup-delay=200ms"], T)
            .await;
        nginx_healthy_on(&api, &all, duplicated_on).await;

        for m in all {
            set_fault(&stack.members[m], v1::FaultMode::Unreachable).await;
        }
        // past the failure threshold, the NoExecute timeout and the default toleration
        let down = Duration::from_millis(rng.random_range(5000..7000));
        tokio::time::sleep(down).await;
        let first = rng.random_range(1..all.len());
        let gap = Duration::from_millis(rng.random_range(50..1500));
        for m in &all[..first] {
            set_fault(&stack.members[*m], v1::FaultMode::Healthy).await;
        }
        tokio::time::sleep(gap).await;
        for m in &all[first..] {
            set_fault(&stack.members[*m], v1::FaultMode::Healthy).await;
        }
        wait_clusters_ready(&api, &all, T).await;
        healthy_on(&api, &all).await;
        let faults = vec![
            format!("all 5 members unreachable for {down:?}"),
            format!(
                "{first} healed, the other {} {gap:?} later",
                all.len() - first
            ),
        ];
        let expect = nothing_evicted(&[]);
        verdict(&stack, recorder, "f10_mass_failure", seed, &faults, &expect).await;
    }
}

/// F11: member1's API fails a seeded share of its calls — 500s, 409 conflicts, applies whose
/// reply is lost, status reads that fail — while the workload is placed and then changed.
/// The work-executor retries with back-off, a failed apply shows on the Work's status (seen in
/// the recorded history), every Work ends applied at its generation, and nothing is created
/// twice on the member.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn f11_member_api_errors() {
    for seed in seeds() {
        let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
        let (mut stack, recorder) = recorded(EtcdServer::start().await, Timers::fast()).await;
        let all = ["member1", "member2"];
        let api = stack
            .ready_push_members(&all, &["--pod-startup-delay=200ms"], T)
            .await;
        let errors = v1::ApiErrors {
            apply_error_percent: rng.random_range(10..30),
            apply_conflict_percent: rng.random_range(5..20),
            apply_lost_reply_percent: rng.random_range(10..30),
            apply_timeout_percent: 0,
            delete_error_percent: rng.random_range(10..40),
            status_error_percent: rng.random_range(10..40),
            seed,
        };
        let mut control = member_control(&stack, "member1").await;
        // First every apply fails: the Work must say so.
        control
            .set_fault(v1::SetFaultRequest {
                mode: v1::FaultMode::Healthy as i32,
                api_errors: Some(v1::ApiErrors {
                    apply_error_percent: 100,
                    ..Default::default()
                }),
                watch_delay_ms: 0,
            })
            .await
            .unwrap();
        create_nginx(&api, nginx_policy(duplicated_on(&all), None)).await;
        let message = eventually(T, "member1's Work reports the failed apply", || async {
            let w = flotilla_tests::cluster_work(&api, "member1").await?;
            let s = w.status?;
            (!s.applied && s.applied_message.contains("injected")).then_some(s.applied_message)
        })
        .await;
        eprintln!("member1's Work while its API fails: {message}");
        // Then the seeded mix.
        control
            .set_fault(v1::SetFaultRequest {
                mode: v1::FaultMode::Healthy as i32,
                api_errors: Some(errors),
                watch_delay_ms: 0,
            })
            .await
            .unwrap();
        healthy_on(&api, &all).await;
        // a change: every Work moves to generation 2 through the same errors
        scale_nginx(&api, 3, 4).await;
        works_applied_with(&api, 2, 4).await;
        healthy_on(&api, &all).await;
        // (status reads fail at the seeded rate too)
        let status = eventually(T, "member1's status", || {
            let mut control = control.clone();
            async move {
                control
                    .get_stats(v1::GetStatsRequest {})
                    .await
                    .ok()
                    .map(tonic::Response::into_inner)
            }
        })
        .await;
        assert_eq!(
            (status.manifests, status.creates),
            (1, 1),
            "one object on member1, created once"
        );
        let faults = vec![format!(
            "member1's API: {}% 500s, {}% conflicts, {}% lost replies on apply; {}% failed deletes; \
             {}% failed status reads ({} errors injected)",
            errors.apply_error_percent,
            errors.apply_conflict_percent,
            errors.apply_lost_reply_percent,
            errors.delete_error_percent,
            errors.status_error_percent,
            status.injected_errors
        )];
        let expect = nothing_evicted(&all);
        verdict(
            &stack,
            recorder,
            "f11_member_api_errors",
            seed,
            &faults,
            &expect,
        )
        .await;
    }
}

/// A three-member etcd cluster loses one member (a seeded one, perhaps the leader) in the
/// middle of a failover: nothing is lost and the failover completes once etcd has elected.
/// The member's address stays resolvable (connections to it are refused).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn f1_etcd_member_lost_mid_failover() {
    etcd_member_lost_mid_failover("f1_etcd_member_lost_mid_failover", false).await;
}

/// As [`f1_etcd_member_lost_mid_failover`], with every member reached by a host name and the
/// lost member's name gone with it, as a dead container's or pod's name is in compose and a
/// StatefulSet (found there: a fifth of the API's requests failed with `dns error`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn f1_etcd_member_name_gone_mid_failover() {
    etcd_member_lost_mid_failover("f1_etcd_member_name_gone_mid_failover", true).await;
}

/// Regression (the member-loss scenario under `stress-ng --cpu 2`, seed 393355757): a killed
/// member reached by address refuses connections, and the client's balancer kept choosing it,
/// because it fails at once and so never has a request pending: a write's sixteen attempts all
/// went to it 6 s after the loss, and the API call failed. Now a refused connection has every
/// endpoint probed at once, and the killed member is taken out of use.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn f1_a_killed_member_that_refuses_connections_is_taken_out_of_use() {
    let mut etcd = flotilla_tests::EtcdCluster::start(3).await;
    let config = flotilla_store::etcd::EtcdConfig::new(etcd.endpoints.clone());
    let store = flotilla_store::etcd::EtcdStore::connect(config)
        .await
        .expect("connect to the cluster");
    assert!(store.endpoints_out().is_empty(), "every member is usable");
    etcd.kill(2);
    let killed = etcd.endpoints[2].clone();
    // requests keep going; one the balancer sends to the killed member cannot connect
    eventually(
        Duration::from_secs(20),
        "the killed member is out of use",
        || async {
            store
                .current_revision()
                .await
                .expect("with a quorum left, every request is answered");
            store.endpoints_out().contains(&killed).then_some(())
        },
    )
    .await;
    assert_eq!(
        store.endpoints_out(),
        vec![killed],
        "only the killed member"
    );
}

/// The member-loss scenario on `etcd`: besides the history's invariants, steady API use (reads
/// and writes, [`ApiLoad`]) from before the loss until the failover is over sees no failed
/// call, and every service's watches and leadership carry on (the history checker's I3 and
/// convergence need them).
async fn etcd_member_lost_mid_failover(scenario: &str, by_name: bool) {
    for seed in seeds() {
        let mut etcd = if by_name {
            flotilla_tests::EtcdCluster::start_named(3).await
        } else {
            flotilla_tests::EtcdCluster::start(3).await
        };
        let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
        let (mut stack, recorder) = recorded(etcd.server(), Timers::fast()).await;
        let all = ["member1", "member2", "member3"];
        let api = stack
            .ready_push_members(&all, &["--pod-startup-delay=200ms"], T)
            .await;
        nginx_healthy_on(&api, &all, divided_on).await;

        let load = ApiLoad::start(&api, &format!("{seed}"));
        let victim = rng.random_range(0..3);
        let after = Duration::from_millis(rng.random_range(0..3000));
        set_fault(&stack.members["member1"], v1::FaultMode::Unreachable).await;
        tokio::time::sleep(after).await;
        etcd.kill(victim);
        if by_name {
            etcd.forget_name(victim);
        }
        healthy_on(&api, &["member2", "member3"]).await;
        tokio::time::sleep(Duration::from_secs(2)).await;
        let load = load.stop().await;
        let lost = if by_name {
            "SIGKILLed and its name gone"
        } else {
            "SIGKILLed"
        };
        let faults = vec![
            "member1 unreachable".to_owned(),
            format!("etcd member e{victim} of 3 {lost} {after:?} later"),
            format!("steady API use meanwhile: {load}"),
        ];
        eprintln!("{scenario}: {load}");
        let expect = failover_onto(&["member2", "member3"]);
        verdict(&stack, recorder, scenario, seed, &faults, &expect).await;
        assert!(
            load.failures.is_empty(),
            "{scenario} (seed {seed}): with a quorum left, no API call may fail: {load}"
        );
    }
}

/// Debian's libfaketime (package `faketime`), which skews the wall clock of a dynamically
/// linked program.
const LIBFAKETIME: &str = "/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1";

/// F6: the taint-manager's wall clock runs minutes ahead of (or behind) cluster-health's, which
/// stamps the NoExecute taints. No eviction may come before the toleration (5 s here) has
/// passed since the taint appeared — measured by the test's own clock on the recorded history
/// (I12) — and the failover must still finish, its task ending (I6).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn f6_clock_skew() {
    assert!(
        std::path::Path::new(LIBFAKETIME).exists(),
        "{LIBFAKETIME} is missing: install Debian's faketime (scripts/test.sh does)"
    );
    const TOLERATION: Duration = Duration::from_secs(5);
    for seed in seeds() {
        let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
        let skew: i64 = rng.random_range(120..600) * if rng.random_bool(0.5) { 1 } else { -1 };
        let timers = Timers::fast()
            .set("api", "default-not-ready-toleration-seconds", "5")
            .set("api", "default-unreachable-toleration-seconds", "5");
        let (mut stack, recorder) = recorded(EtcdServer::start().await, timers).await;
        stack
            .restart_service_with_env(
                "taint-manager",
                vec![
                    ("LD_PRELOAD".into(), LIBFAKETIME.into()),
                    ("FAKETIME".into(), format!("{skew:+}s")),
                    ("FAKETIME_DONT_FAKE_MONOTONIC".into(), "1".into()),
                ],
            )
            .await;
        let all = ["member1", "member2", "member3"];
        let api = stack
            .ready_push_members(&all, &["--pod-startup-delay=200ms"], T)
            .await;
        nginx_healthy_on(&api, &all, divided_on).await;

        set_fault(&stack.members["member1"], v1::FaultMode::Unreachable).await;
        healthy_on(&api, &["member2", "member3"]).await;
        let expect = failover_onto(&["member2", "member3"]);
        recorder.settle(&expect).await;
        let until = stack.store().await.current_revision().await.unwrap();
        let history = recorder.stop_at(until).await;
        // I12 on the test's clock: the first NoExecute on member1 → the eviction from it
        let tainted_at = history.iter().find_map(|e| match &e.change {
            flotilla_tests::history::Change::Cluster(c)
                if e.key == "clusters/member1"
                    && c.spec
                        .iter()
                        .flat_map(|s| s.taints.iter())
                        .any(|t| t.effect == v1::TaintEffect::NoExecute as i32) =>
            {
                Some(e.at)
            }
            _ => None,
        });
        let report = check(&history, &expect);
        let faults = vec![
            format!("the taint-manager's wall clock {skew:+} s (libfaketime)"),
            "member1 unreachable".to_owned(),
        ];
        report.print("f6_clock_skew", seed, &faults);
        assert!(report.violations.is_empty(), "{:?}", report.violations);
        let tainted_at = tainted_at.expect("member1 got a NoExecute taint");
        let evicted_at = history
            .iter()
            .find(|e| {
                report
                    .evictions
                    .iter()
                    .any(|(rev, _, c)| *rev == e.revision && c == "member1")
            })
            .map(|e| e.at)
            .expect("the binding was evicted from member1");
        let waited = evicted_at.duration_since(tainted_at);
        eprintln!("    NoExecute → eviction: {waited:?} (toleration {TOLERATION:?})");
        assert!(
            waited + Duration::from_millis(300) >= TOLERATION,
            "I12: evicted {waited:?} after the taint, before the {TOLERATION:?} toleration"
        );
    }
}

/// F3: two replicas of the taint-manager and the scheduler; during a failover the leader of
/// each is frozen (SIGSTOP) for longer than its lease, a standby takes over, and the old
/// leader is thawed. Its writes are fenced: no double eviction, no lost task (I4), and the
/// failover completes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn f3_frozen_leaders_are_fenced() {
    for seed in seeds() {
        let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
        let (mut stack, recorder) = recorded(EtcdServer::start().await, Timers::fast()).await;
        let replicated = ["taint-manager", "scheduler"];
        for s in replicated {
            stack.start_replica(s).await;
        }
        let all = ["member1", "member2", "member3"];
        let api = stack
            .ready_push_members(&all, &["--pod-startup-delay=200ms"], T)
            .await;
        nginx_healthy_on(&api, &all, divided_on).await;

        // the leaders now
        let mut frozen = Vec::new();
        for s in replicated {
            let second = format!("{s}-2");
            let leader = if stack.is_leader(&second).await {
                second
            } else {
                s.to_owned()
            };
            frozen.push(leader);
        }
        let after = Duration::from_millis(rng.random_range(0..2000));
        set_fault(&stack.members["member1"], v1::FaultMode::Unreachable).await;
        tokio::time::sleep(after).await;
        for name in &frozen {
            stack.services[name].freeze(true);
        }
        // the lease is 3 s: 1.5 of it and more
        let frozen_for = Duration::from_millis(rng.random_range(4500..7000));
        tokio::time::sleep(frozen_for).await;
        for name in &frozen {
            stack.services[name].freeze(false);
        }
        healthy_on(&api, &["member2", "member3"]).await;
        let faults = vec![
            "member1 unreachable".to_owned(),
            format!("leaders {frozen:?} frozen {after:?} later for {frozen_for:?}"),
        ];
        let expect = failover_onto(&["member2", "member3"]);
        verdict(
            &stack,
            recorder,
            "f3_frozen_leaders_are_fenced",
            seed,
            &faults,
            &expect,
        )
        .await;
    }
}

/// F4: member1 flaps (unreachable, then answering) with a period shorter than the failure
/// threshold (1 s) for several seconds. The damper must hold: member1 is never judged
/// anything but Ready, never tainted NoExecute, and nothing is evicted (I9).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn f4_flapping_member_is_never_evicted() {
    for seed in seeds() {
        let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
        let (mut stack, recorder) = recorded(EtcdServer::start().await, Timers::fast()).await;
        let all = ["member1", "member2"];
        let api = stack
            .ready_push_members(&all, &["--pod-startup-delay=200ms"], T)
            .await;
        nginx_healthy_on(&api, &all, duplicated_on).await;

        // down for less than the failure threshold, up for at least as long
        let down = Duration::from_millis(rng.random_range(200..600));
        let up = Duration::from_millis(rng.random_range(700..1000));
        let flaps = rng.random_range(4..8);
        for _ in 0..flaps {
            set_fault(&stack.members["member1"], v1::FaultMode::Unreachable).await;
            tokio::time::sleep(down).await;
            set_fault(&stack.members["member1"], v1::FaultMode::Healthy).await;
            tokio::time::sleep(up).await;
        }
        tokio::time::sleep(Duration::from_secs(2)).await;
        healthy_on(&api, &all).await;
        let faults = vec![format!(
            "member1 flapped {flaps} times: {down:?} unreachable, {up:?} answering"
        )];
        let expect = nothing_evicted(&all);
        verdict(
            &stack,
            recorder,
            "f4_flapping_member_is_never_evicted",
            seed,
            &faults,
            &expect,
        )
        .await;
    }
}

/// F9: member1 fails long enough to be tainted NoExecute, and comes back before the policy's
/// toleration (5 s) runs out: nothing may be evicted, no task created (I11), no Work touched.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn f9_recovery_before_toleration_evicts_nothing() {
    for seed in seeds() {
        let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
        let timers = Timers::fast()
            .set("api", "default-not-ready-toleration-seconds", "5")
            .set("api", "default-unreachable-toleration-seconds", "5");
        let (mut stack, recorder) = recorded(EtcdServer::start().await, timers).await;
        let all = ["member1", "member2", "member3"];
        let api = stack
            .ready_push_members(&all, &["--pod-startup-delay=200ms"], T)
            .await;
        nginx_healthy_on(&api, &all, divided_on).await;

        set_fault(&stack.members["member1"], v1::FaultMode::Unreachable).await;
        flotilla_tests::wait_taint(
            &api,
            "member1",
            "cluster.karmada.io/not-ready",
            v1::TaintEffect::NoExecute,
            T,
        )
        .await;
        // back well before the 5 s toleration ends (the success threshold is 1 s)
        let within = Duration::from_millis(rng.random_range(0..2000));
        tokio::time::sleep(within).await;
        set_fault(&stack.members["member1"], v1::FaultMode::Healthy).await;
        wait_clusters_ready(&api, &all, T).await;
        tokio::time::sleep(Duration::from_secs(2)).await;
        healthy_on(&api, &all).await;
        let faults = vec![format!(
            "member1 unreachable until tainted NoExecute, healed {within:?} later (toleration 5 s)"
        )];
        let expect = nothing_evicted(&["member2", "member3"]);
        verdict(
            &stack,
            recorder,
            "f9_recovery_before_toleration_evicts_nothing",
            seed,
            &faults,
            &expect,
        )
        .await;
    }
}

/// F7: two replicas each of the taint-manager, the scheduler and graceful-eviction, 30
/// bindings, and three of five members failing at once: every binding is written by three
/// kinds of writer at once. No task may be lost or doubled and no cluster may be a target and
/// a task at once (I4); every binding converges on the two healthy members.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn f7_concurrent_writers_lose_nothing() {
    for seed in seeds() {
        let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
        // 3 of 5 unhealthy is 0.6: above the brake's default threshold (0.55), which would
        // slow the evictions to the secondary rate; this scenario is about concurrent writers
        let timers = Timers::fast().set("taint-manager", "unhealthy-cluster-threshold", "0.7");
        let (mut stack, recorder) = recorded(EtcdServer::start().await, timers).await;
        for s in ["taint-manager", "scheduler", "graceful-eviction"] {
            stack.start_replica(s).await;
        }
        let all = ["member1", "member2", "member3", "member4", "member5"];
        let api = stack
            .ready_push_members(&all, &["--pod-startup-delay=200ms"], T)
            .await;
        let mut policy = nginx_policy(divided_on(&all), None);
        // select every Deployment of the namespace: 30 workloads, 30 bindings
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
        const N: usize = 30;
        for i in 0..N {
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
        let failing: Vec<&str> = {
            let mut names = all.to_vec();
            for i in (1..names.len()).rev() {
                names.swap(i, rng.random_range(0..=i));
            }
            names[..3].to_vec()
        };
        eventually(T, "30 bindings placed and healthy", || async {
            let bindings = flotilla_tests::list_bindings(&api).await;
            (bindings.len() == N && bindings.iter().all(binding_healthy)).then_some(())
        })
        .await;
        for m in &failing {
            set_fault(&stack.members[*m], v1::FaultMode::Unreachable).await;
        }
        let healthy: Vec<String> = all
            .iter()
            .filter(|m| !failing.contains(m))
            .map(|m| m.to_string())
            .collect();
        eventually(T, "every binding on the two healthy members", || async {
            let bindings = flotilla_tests::list_bindings(&api).await;
            let done = bindings.len() == N
                && bindings.iter().all(|b| {
                    let mut t = target_names(b);
                    t.sort();
                    t == healthy && tasks(b).is_empty() && binding_healthy(b)
                });
            done.then_some(())
        })
        .await;
        let faults = vec![
            "two replicas each of taint-manager, scheduler and graceful-eviction".to_owned(),
            format!("{failing:?} unreachable at once, {N} bindings"),
        ];
        let expect = Expect {
            healthy_members: healthy.clone(),
            no_evictions: false,
            converged: true,
            grace: None,
            sharded: Vec::new(),
        };
        verdict(
            &stack,
            recorder,
            "f7_concurrent_writers_lose_nothing",
            seed,
            &faults,
            &expect,
        )
        .await;
    }
}

/// F8: the graceful-eviction timeout passes while the new placement never becomes healthy.
/// The seed picks how the replacement fails: its pods never turn Ready, its status can never
/// be read, or the policy allows only the failed cluster (no replacement at all). The old
/// copy goes at the grace period and not before (I1 b, I5 on the history); with no
/// replacement the task and the Work stay past the grace period (A6) and the cluster is
/// scheduled again when it heals; no task outlives its grace (I6).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn f8_replacement_never_healthy() {
    #[derive(Clone, Copy, Debug)]
    enum Flavor {
        NeverReady,
        StatusUnreadable,
        NoReplacement,
    }
    for seed in seeds() {
        let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
        let flavor = [
            Flavor::NeverReady,
            Flavor::StatusUnreadable,
            Flavor::NoReplacement,
        ][rng.random_range(0..3)];
        let grace = Duration::from_secs(rng.random_range(3..7));
        let timers = Timers::fast().set(
            "graceful-eviction",
            "graceful-eviction-timeout",
            &format!("{}s", grace.as_secs()),
        );
        let (mut stack, recorder) = recorded(EtcdServer::start().await, timers).await;
        stack
            .start_member("member1", &["--pod-startup-delay=200ms"])
            .await;
        let member2_delay = match flavor {
            Flavor::NeverReady => "--pod-startup-delay=1h",
            _ => "--pod-startup-delay=200ms",
        };
        stack.start_member("member2", &[member2_delay]).await;
        let all = ["member1", "member2"];
        let api = api_client(&stack).await;
        stack.create_push_clusters(&api, &all).await;
        wait_clusters_ready(&api, &all, T).await;
        if let Flavor::StatusUnreadable = flavor {
            member_control(&stack, "member2")
                .await
                .set_fault(v1::SetFaultRequest {
                    mode: v1::FaultMode::Healthy as i32,
                    api_errors: Some(v1::ApiErrors {
                        status_error_percent: 100,
                        seed,
                        ..Default::default()
                    }),
                    watch_delay_ms: 0,
                })
                .await
                .unwrap();
        }
        let allowed: &[&str] = match flavor {
            Flavor::NoReplacement => &["member1"],
            _ => &all,
        };
        create_nginx(&api, nginx_policy(divided_on(allowed), None)).await;
        let mut want: Vec<String> = allowed.iter().map(|s| s.to_string()).collect();
        want.sort();
        eventually(T, "nginx placed, a Work on every target", || {
            let want = want.clone();
            let api = api.clone();
            async move {
                let b = nginx_binding(&api).await?;
                let mut got = target_names(&b);
                got.sort();
                let works = flotilla_tests::work_clusters(&api).await;
                (got == want && works == want).then_some(())
            }
        })
        .await;

        set_fault(&stack.members["member1"], v1::FaultMode::Unreachable).await;
        eventually(T, "member1 evicted (an eviction task for it)", || async {
            let b = nginx_binding(&api).await?;
            tasks(&b).contains(&"member1".to_owned()).then_some(())
        })
        .await;
        let task_at = std::time::Instant::now();
        match flavor {
            Flavor::NoReplacement => {
                // past the grace period the task and the only copy stay (A6)
                tokio::time::sleep(grace + Duration::from_secs(2)).await;
                let b = nginx_binding(&api).await.expect("the binding");
                assert_eq!(tasks(&b), vec!["member1".to_owned()], "A6 keeps the task");
                let w = flotilla_tests::cluster_work(&api, "member1")
                    .await
                    .expect("member1's Work stays");
                assert!(
                    w.metadata.and_then(|m| m.deletion_timestamp).is_none(),
                    "the only copy is never marked for deletion"
                );
            }
            _ => {
                eventually(T, "the task ends at its grace period", || async {
                    let b = nginx_binding(&api).await?;
                    tasks(&b).is_empty().then_some(())
                })
                .await;
                let waited = task_at.elapsed();
                eprintln!("    task → its end: {waited:?} (grace {grace:?})");
            }
        }
        set_fault(&stack.members["member1"], v1::FaultMode::Healthy).await;
        let end_targets: Vec<String> = match flavor {
            Flavor::NoReplacement => vec!["member1".into()],
            _ => vec!["member2".into()],
        };
        eventually(T, "the binding settles without a task", || {
            let end_targets = end_targets.clone();
            let api = api.clone();
            async move {
                let b = nginx_binding(&api).await?;
                let works = flotilla_tests::work_clusters(&api).await;
                (target_names(&b) == end_targets && tasks(&b).is_empty() && works == end_targets)
                    .then_some(())
            }
        })
        .await;
        let faults = vec![
            format!("the replacement never becomes healthy ({flavor:?}), grace {grace:?}"),
            "member1 unreachable, healed after the grace period".to_owned(),
        ];
        let expect = Expect {
            healthy_members: vec!["member2".into()],
            no_evictions: false,
            converged: true,
            grace: Some(grace),
            sharded: Vec::new(),
        };
        verdict(
            &stack,
            recorder,
            "f8_replacement_never_healthy",
            seed,
            &faults,
            &expect,
        )
        .await;
    }
}

/// WE-7.1 on the history: a failover moves replicas onto a Pull member whose watch delivers
/// events late (a loaded API server), so its agent's watch cache still holds the Deployment
/// of before each scale-up when it applies it. No Work may say Healthy for its generation with
/// fewer ready replicas than it asks for, and no eviction task may end on such health (I1b).
/// The old agent failed this on every seed: it reported the cached pre-apply object, Healthy
/// with 2 of 3 ready, stamped with the new generation, and the task ended on it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pull_member_scaled_up_in_a_failover() {
    for seed in seeds() {
        let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
        let (mut stack, recorder) = recorded(EtcdServer::start().await, Timers::fast()).await;
        let startup = format!("--pod-startup-delay={}ms", rng.random_range(300..1500));
        for m in ["member1", "member2"] {
            stack.start_member(m, &[startup.as_str()]).await;
        }
        stack
            .start_pull_member("member3", &[startup.as_str()])
            .await;
        let api = api_client(&stack).await;
        stack
            .create_push_clusters(&api, &["member1", "member2"])
            .await;
        flotilla_tests::create_pull_cluster(&api, "member3").await;
        let all = ["member1", "member2", "member3"];
        wait_clusters_ready(&api, &all, T).await;
        create_nginx(&api, nginx_policy(divided_on(&all), None)).await;
        // 6 replicas: 2 on each; after member1 fails, 3 on each of the others
        scale_nginx(&api, 3, 6).await;
        healthy_on(&api, &all).await;

        let watch_delay = rng.random_range(400..1500);
        member_control(&stack, "member3")
            .await
            .set_fault(v1::SetFaultRequest {
                mode: v1::FaultMode::Healthy as i32,
                api_errors: None,
                watch_delay_ms: watch_delay,
            })
            .await
            .unwrap();
        set_fault(&stack.members["member1"], v1::FaultMode::Unreachable).await;
        healthy_on(&api, &["member2", "member3"]).await;
        let works = flotilla_tests::list_works(&api).await;
        let on_member3 = works
            .iter()
            .find(|w| w.spec.as_ref().is_some_and(|s| s.cluster == "member3"))
            .and_then(|w| w.spec.as_ref()?.replicas);
        assert_eq!(on_member3, Some(3), "the failover scaled member3 up");
        let faults = vec![
            format!(
                "member3 (Pull) delivers watch events {watch_delay} ms late; pods start after {startup}"
            ),
            "member1 unreachable: its 2 replicas move to member2 and member3".to_owned(),
        ];
        let expect = failover_onto(&["member2", "member3"]);
        verdict(
            &stack,
            recorder,
            "pull_member_scaled_up_in_a_failover",
            seed,
            &faults,
            &expect,
        )
        .await;
    }
}
