//! cluster-health end to end on a MemStore with in-process member-sims and compressed timers:
//! probes (CH-2..CH-5), damping (CH-4, I9), taints (CH-10, CH-11, CH-12), Pull heartbeats
//! (CH-9, A9), ClusterTaintPolicies (CH-16..18), deletion (A2, CH-15), conflicts (I5).

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::sync::Arc;
use std::time::Duration;

use crate::support::*;
use flotilla_cluster_health::NoExecuteTaints;
use flotilla_core::types::ConditionStatus as Observed;
use flotilla_member_sim::Fault;
use flotilla_proto::v1;
use flotilla_proto::v1::ConditionStatus::{False, True, Unknown};
use flotilla_store::typed::Typed;
use flotilla_store::{MemStore, StoreRef, WatchEvent};
use tokio::time::Instant;

fn mem() -> StoreRef {
    Arc::new(MemStore::new())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ch_3_push_member_becomes_ready_and_reports_its_status() {
    let store = mem();
    let h = Health::with_mode(store.clone(), NoExecuteTaints::Auto);
    let (_m, c) = ready_push_member(&store, "m1", 50).await;
    assert_eq!(ready(&c).unwrap().1, "ClusterReady");
    let status = c.status.clone().unwrap();
    assert!(
        status
            .api_enablements
            .iter()
            .any(|e| e.group_version == "apps/v1"
                && e.resources.iter().any(|r| r.kind == "Deployment")),
        "CH-5.2: the member's API enablements (SC-6.1 needs them)"
    );
    assert_eq!(
        allocatable_replicas(&c),
        Some(50),
        "allocatable replicas from the member's capacity"
    );
    assert!(!status.kubernetes_version.is_empty());
    assert_eq!(
        condition(&c, "CompleteAPIEnablements").unwrap().reason,
        "Complete",
        "CH-5.3"
    );
    h.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ch_4_unreachable_member_not_ready_after_the_threshold_then_no_execute_then_recovers() {
    let store = mem();
    let h = Health::with_mode(store.clone(), NoExecuteTaints::Auto);
    let (m, _) = ready_push_member(&store, "m1", 10).await;

    let cut = Instant::now();
    m.sim.set_fault(Fault::Unreachable);
    let c = until_ready_is(&store, "m1", "Ready=False ClusterNotReachable", False).await;
    assert_not_before(cut, 400, "CH-4: not before the failure threshold");
    assert_eq!(
        ready(&c).unwrap().1,
        "ClusterNotReachable",
        "CH-3.1: no answer means not reachable"
    );
    assert_eq!(taints(&c), vec![NR_NS], "CH-11.1");

    // CH-10 (A1 auto): NoExecute once False for longer than the eviction timeout
    let c = until_tainted(&store, "m1", NR_NE).await;
    assert_eq!(taints(&c), vec![NR_NS, NR_NE]);
    let since = timestamp_ms(&condition(&c, "Ready").unwrap().last_transition_time);
    let added = timestamp_ms(&c.spec.as_ref().unwrap().taints[1].time_added);
    assert!(
        added - since > 1200,
        "NoExecute strictly after the timeout: {}ms",
        added - since
    );

    // recovery: True after the success threshold, both taints gone (CH-11.3, CH-10.3)
    let healed = Instant::now();
    m.sim.set_fault(Fault::Healthy);
    let c = until_ready_untainted(&store, "m1", "Ready again without taints").await;
    assert_not_before(healed, 400, "CH-4: not before the success threshold");
    assert_eq!(ready(&c).unwrap().1, "ClusterReady");

    // decisions were recorded as events
    let (events, _) = store.list("events/", 0).await.unwrap();
    let reasons: Vec<String> = events
        .iter()
        .map(|kv| {
            flotilla_store::typed::decode::<v1::Event>(kv)
                .unwrap()
                .reason
        })
        .collect();
    for want in ["ClusterNotReachable", "TaintClusterSucceed", "ClusterReady"] {
        assert!(
            reasons.iter().any(|r| r == want),
            "event {want}: {reasons:?}"
        );
    }
    h.stop().await;
}

/// cluster-health in policy mode (no automatic NoExecute, A1) with a Ready Push member m1 that
/// then turns Unhealthy; returns them with the Ready=False cluster.
async fn unhealthy_member_in_policy_mode() -> (StoreRef, Health, Member, v1::Cluster) {
    let store = mem();
    let h = Health::with_mode(store.clone(), NoExecuteTaints::Policy);
    let (m, _) = ready_push_member(&store, "m1", 10).await;
    m.sim.set_fault(Fault::Unhealthy);
    let c = until_ready_is(&store, "m1", "Ready=False", False).await;
    (store, h, m, c)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ch_3_2_unhealthy_member_is_not_ready_but_reachable() {
    let (store, h, _m, c) = unhealthy_member_in_policy_mode().await;
    assert_eq!(ready(&c).unwrap().1, "ClusterNotReady");
    assert_eq!(taints(&c), vec![NR_NS]);
    // policy mode: no automatic NoExecute, even well after the eviction timeout (A1)
    tokio::time::sleep(Duration::from_millis(1800)).await;
    assert_eq!(taints(&get(&store, "m1").await.unwrap()), vec![NR_NS]);
    h.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn i9_a_blip_shorter_than_the_failure_threshold_never_taints() {
    let store = mem();
    let mut config = fast_config("test");
    config.options.thresholds.failure = Duration::from_millis(1500);
    let h = Health::start(store.clone(), config);
    let (m, _) = ready_push_member(&store, "m1", 10).await;
    let from = store.current_revision().await.unwrap() + 1;

    m.sim.set_fault(Fault::Unreachable);
    // wait until the failure was observed (the CH-4 window opened), then heal at once
    let ctx = h.started.context.clone();
    let observed = |what, status: Observed| {
        let ctx = ctx.clone();
        until(what, move || {
            let ctx = ctx.clone();
            async move {
                ctx.memory("m1")
                    .and_then(|m| m.threshold)
                    .is_some_and(|t| t.observed == status)
            }
        })
    };
    observed("a failed probe observed", Observed::False).await;
    m.sim.set_fault(Fault::Healthy);
    observed("a healthy probe observed again", Observed::True).await;
    tokio::time::sleep(Duration::from_millis(1600)).await;

    // every version of the cluster written since: Ready True, no taint
    let mut watch = store.watch("clusters/m1", Some(from)).await.unwrap();
    while let Ok(Some(Ok(WatchEvent::Batch(batch)))) =
        tokio::time::timeout(Duration::from_millis(200), watch.next()).await
    {
        for ev in batch.events {
            if let flotilla_store::Event::Put(kv) = ev {
                let c: v1::Cluster = flotilla_store::typed::decode(&kv).unwrap();
                assert!(is_ready(&c), "a blip flipped Ready: {c:?}");
                assert!(taints(&c).is_empty(), "a blip tainted: {c:?}");
            }
        }
    }
    assert!(is_ready(&get(&store, "m1").await.unwrap()));
    h.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ch_9_pull_heartbeats_stop_then_unknown_and_unreachable_taints_then_recover() {
    let store = mem();
    let h = Health::with_mode(store.clone(), NoExecuteTaints::Auto);
    let addr = h.serve_grpc().await.to_string();
    create(&store, cluster("p1", v1::SyncMode::Pull, "")).await;
    let mut m = Member::start("p1", 20, Some(addr)).await;
    let c = until_ready_untainted(&store, "p1", "Ready from heartbeats").await;
    assert_eq!(
        allocatable_replicas(&c),
        Some(20),
        "the status carried by the heartbeat"
    );
    let record = store.get("heartbeats/p1").await.unwrap();
    assert!(record.is_some(), "heartbeats are kept in the store");

    // the agent dies: heartbeats stop
    let cut = Instant::now();
    m.stop_agent();
    let c = until_ready_is(&store, "p1", "Ready=Unknown", Unknown).await;
    assert_not_before(cut, 500, "CH-9: not before the grace period");
    assert_eq!(ready(&c).unwrap().1, "ClusterStatusUnknown");
    assert_eq!(taints(&c), vec![UR_NS], "CH-11.2");
    let c = until_tainted(&store, "p1", UR_NE).await;
    assert_eq!(taints(&c), vec![UR_NS, UR_NE], "CH-10.2");

    m.start_agent();
    until_ready_untainted(&store, "p1", "Ready again, taints gone").await;
    h.stop().await;
}

/// A13: a replica that has just started could not observe before it started (when every
/// replica was down, no heartbeat could be recorded at all), so a long-silent Pull cluster
/// gets one fresh grace period, counted from the start, before it turns Unknown — the
/// Kubernetes node-lifecycle controller's behaviour after its own restart. It still turns
/// Unknown after that grace period, from the stored heartbeat's silence.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a13_ch_9_a_new_replica_counts_the_grace_period_from_its_start() {
    let store = mem();
    let mut c = cluster("p1", v1::SyncMode::Pull, "");
    let now = flotilla_runtime::now();
    c.status = Some(v1::ClusterStatus {
        conditions: vec![v1::Condition {
            r#type: "Ready".into(),
            status: True as i32,
            reason: "ClusterReady".into(),
            message: "cluster is healthy and ready to accept workloads".into(),
            last_transition_time: Some(flotilla_proto::convert::time_to_timestamp(
                now.plus_secs(-60),
            )),
        }],
        ..Default::default()
    });
    let c = create(&store, c).await;
    // the last heartbeat, recorded by a replica that is gone, 30s ago
    let last = now.plus_secs(-30);
    flotilla_cluster_health::heartbeat::record(
        &*store,
        &v1::HeartbeatRecord {
            cluster_name: "p1".into(),
            cluster_uid: c.metadata.unwrap().uid,
            renew_time: Some(flotilla_proto::convert::time_to_timestamp(last)),
            probe: Some(v1::ProbeResult {
                online: true,
                healthy: true,
                message: String::new(),
            }),
            status: None,
            sent_at: None,
        },
    )
    .await
    .unwrap();
    let started = flotilla_runtime::now();
    let h = Health::with_mode(store.clone(), NoExecuteTaints::Policy);
    let c = until_ready_is(&store, "p1", "Unknown", Unknown).await;
    assert_eq!(taints(&c), vec![UR_NS]);
    let since = h.started.context.observing().since;
    assert!(since >= started, "observation starts with the replica");
    let memory = h.started.context.memory("p1").unwrap();
    let probe = memory.monitor.unwrap().probe_timestamp;
    assert!(
        probe >= since && probe > last,
        "A13: the grace period runs from the start of observation ({since}), not from the \
         stored heartbeat ({last}): {probe}"
    );
    let became_unknown = ready_transition(&c);
    assert!(
        became_unknown.saturating_since(since) >= Duration::from_millis(600),
        "a full grace period after the start: {became_unknown} vs {since}"
    );
    h.stop().await;
}

/// A NoExecute taint `key` while Ready is False or Unknown, removed once it is True (CH-17).
fn taint_policy(name: &str, key: &str) -> v1::ClusterTaintPolicy {
    let mut policy = flotilla_runtime::testing::bindings::taint_policy_on_not_ready(
        name,
        key,
        v1::TaintEffect::NoExecute,
    );
    let spec = policy.spec.as_mut().unwrap();
    let mut ready_true = spec.add_on_conditions[0].clone();
    ready_true.status_values = vec![True as i32];
    spec.add_on_conditions[0].status_values.push(Unknown as i32);
    spec.remove_on_conditions = vec![ready_true];
    policy
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ch_17_cluster_taint_policy_adds_and_removes_its_taints() {
    let (store, h, m, _) = unhealthy_member_in_policy_mode().await;
    // a policy created while the cluster is down applies at once (CH-17.1: policy create)
    Typed::new(store.clone())
        .create(taint_policy("down", "example.com/down"), None)
        .await
        .unwrap();
    let c = until_tainted(&store, "m1", "example.com/down:NoExecute").await;
    assert_eq!(taints(&c), vec![NR_NS, "example.com/down:NoExecute"]);
    m.sim.set_fault(Fault::Healthy);
    until_ready_untainted(&store, "m1", "Ready, the policy removed its taint").await;
    h.stop().await;
}

fn binding(clusters: &[&str], tasks: &[&str]) -> v1::ResourceBinding {
    v1::ResourceBinding {
        metadata: Some(v1::ObjectMeta {
            name: "web-deployment".into(),
            namespace: "default".into(),
            ..Default::default()
        }),
        spec: Some(v1::ResourceBindingSpec {
            clusters: clusters
                .iter()
                .map(|c| v1::TargetCluster {
                    name: (*c).into(),
                    replicas: 1,
                })
                .collect(),
            graceful_eviction_tasks: v1::GracefulEvictionTask::from_clusters(tasks),
            ..Default::default()
        }),
        status: None,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a2_ch_15_deleting_cluster_is_tainted_terminating_and_removed_once_unreferenced() {
    let store = mem();
    let typed = Typed::new(store.clone());
    let h = Health::with_mode(store.clone(), NoExecuteTaints::Auto);
    let (_m, _) = ready_push_member(&store, "m1", 10).await;
    let b = typed.create(binding(&["m1"], &[]), None).await.unwrap();

    // the api marks the cluster for deletion (bindings still reference it)
    let c = get(&store, "m1").await.unwrap();
    let mut marked = c.clone();
    marked.metadata.as_mut().unwrap().deletion_timestamp = Some(
        flotilla_proto::convert::time_to_timestamp(flotilla_runtime::now()),
    );
    typed.update(&c, marked).await.unwrap();
    eventually(&store, "m1", "terminating:NoExecute (A2)", |c| {
        taints(c) == vec![TERMINATING]
    })
    .await;

    // the taint manager turned the target into an eviction task: still referenced
    let b = typed.update(&b, binding(&[], &["m1"])).await.unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(
        get(&store, "m1").await.is_some(),
        "an eviction task holds it"
    );

    // the task is gone: the cluster goes
    typed.update(&b, binding(&[], &[])).await.unwrap();
    until("the cluster removed (CH-15)", || {
        let store = store.clone();
        async move { get(&store, "m1").await.is_none() }
    })
    .await;
    assert!(
        h.started.context.memory("m1").is_none(),
        "its memory dropped"
    );
    h.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn i5_a_concurrent_writer_between_read_and_write_is_not_lost() {
    let inner = mem();
    let m = Member::start("m1", 10, None).await;
    // the api adds a user taint and a label right before cluster-health's first write
    let api = inner.clone();
    let store: StoreRef = Interpose::new(
        inner.clone(),
        "clusters/m1",
        Box::new(move || {
            let api = api.clone();
            Box::pin(async move {
                let typed = Typed::new(api);
                let c: v1::Cluster = typed.get("clusters/m1").await.unwrap().unwrap();
                let mut n = c.clone();
                n.metadata
                    .as_mut()
                    .unwrap()
                    .labels
                    .insert("tier".into(), "gold".into());
                n.spec.as_mut().unwrap().taints.push(v1::Taint {
                    key: "example.com/maintenance".into(),
                    value: String::new(),
                    effect: v1::TaintEffect::NoSchedule as i32,
                    time_added: None,
                    trace_context: String::new(),
                });
                typed.update(&c, n).await.unwrap();
            })
        }),
    );
    let interpose = store.clone();
    create(&inner, cluster("m1", v1::SyncMode::Push, &m.endpoint())).await;
    let h = Health::with_mode(store.clone(), NoExecuteTaints::Auto);
    let c = eventually(&inner, "m1", "Ready with the user's taint", |c| {
        is_ready(c) && taints(c) == vec!["example.com/maintenance:NoSchedule"]
    })
    .await;
    assert_eq!(
        c.metadata.unwrap().labels.get("tier").map(String::as_str),
        Some("gold"),
        "the concurrent writer's change survived"
    );
    drop(interpose);
    h.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn i8_only_the_leader_decides_and_a_successor_takes_over_with_damping() {
    let store = mem();
    let a = Health::start(store.clone(), fast_config("a"));
    let b = Health::start(store.clone(), fast_config("b"));
    let (m, _) = ready_push_member(&store, "m1", 10).await;
    let (leader, follower) = if a.started.context.memory("m1").is_some() {
        (a, b)
    } else {
        (b, a)
    };
    assert!(
        follower.started.context.memory("m1").is_none(),
        "only the leader reconciles (leases/cluster-health)"
    );
    // the leader resigns on shutdown; the follower takes over
    leader.stop().await;
    let cut = Instant::now();
    m.sim.set_fault(Fault::Unreachable);
    until_ready_is(&store, "m1", "Ready=False decided by the successor", False).await;
    assert_not_before(cut, 400, "the successor damps its first observation too");
    assert!(follower.started.context.memory("m1").is_some());
    follower.stop().await;
}

fn ready_transition(c: &v1::Cluster) -> flotilla_core::Time {
    let cond = condition(c, "Ready").unwrap();
    flotilla_core::Time::from_millis(timestamp_ms(&cond.last_transition_time))
}

/// Regression (fault suite, F1 / I9 / A13): an outage of cluster-health's store during which a
/// healthy Pull member's heartbeats cannot be recorded is not the member's silence. Before the
/// fix, right after the store came back, cluster-health wrote Ready=Unknown and the
/// `unreachable` NoSchedule AND NoExecute taints in one write (the grace period and the
/// eviction timeout both counted from the last heartbeat recorded before the outage), and the
/// taint-manager evicted every binding from a member that never failed. Checked on every
/// version of the cluster the store recorded, not on the end state.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn f1_a13_a_store_outage_is_never_charged_to_a_healthy_pull_member() {
    let inner: StoreRef = mem();
    let flaky = flotilla_runtime::testing::FlakyStore::new(inner.clone());
    let store: StoreRef = flaky.clone();
    let mut config = fast_config("test");
    config.lease_ttl = Duration::from_secs(30); // the leader stays leader through the pause
    let h = Health::start(store.clone(), config);
    let addr = h.serve_grpc().await.to_string();
    create(&inner, cluster("p1", v1::SyncMode::Pull, "")).await;
    let _m = Member::start("p1", 20, Some(addr)).await;
    until_ready_untainted(&inner, "p1", "Ready from heartbeats").await;
    let from = inner.current_revision().await.unwrap() + 1;

    // The store hangs for 2.5 s (a paused etcd): longer than the grace period (600 ms) and
    // the failover eviction timeout (1.2 s) together. The member keeps heartbeating all
    // along; nothing it sends can be recorded, and whatever was decided meanwhile commits
    // when the store comes back.
    flaky.pause();
    tokio::time::sleep(Duration::from_millis(2500)).await;
    flaky.resume();
    // Long enough after the outage for the old code's verdict and for a fresh grace period.
    tokio::time::sleep(Duration::from_millis(2500)).await;
    assert!(!h.started.context.observing().blind, "observing again");
    h.stop().await;

    let mut history = inner.watch("clusters/p1", Some(from)).await.unwrap();
    let until = inner.current_revision().await.unwrap();
    let mut versions = 0;
    while let Ok(Some(Ok(ev))) = tokio::time::timeout(
        Duration::from_millis(500),
        futures::StreamExt::next(&mut history),
    )
    .await
    {
        let WatchEvent::Batch(batch) = ev else {
            continue;
        };
        for e in batch.events {
            if let flotilla_store::Event::Put(kv) = e {
                versions += 1;
                let c: v1::Cluster = flotilla_store::typed::decode(&kv).unwrap();
                assert!(
                    is_ready(&c) && taints(&c).is_empty(),
                    "revision {}: the healthy member was judged {:?} with taints {:?}",
                    kv.mod_revision,
                    ready(&c),
                    taints(&c)
                );
            }
        }
        if batch.revision >= until {
            break;
        }
    }
    let _ = versions;
}
