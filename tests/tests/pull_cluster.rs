//! A Pull cluster next to a Push one (the seed Divided policy, member1:1, member2:2).
//!
//! member1 is a member-sim with a `flotilla-agent` process next to it: the agent heartbeats to
//! cluster-health every 200 ms, watches its Works through `Api.WatchWorks`, applies them on
//! member1's Kubernetes API and reports their status through
//! `WorkExecutor.ReportWorkStatus`; member2 is pushed to. The workload lands on both, the
//! agent applies member1's Work (the control plane never calls member1) and its reported
//! status makes the binding healthy.
//!
//! The agent process is then killed: heartbeats stop → `Ready=Unknown`
//! (`ClusterStatusUnknown`) once the monitor grace period (2 s) passes (CH-9.5) →
//! `unreachable:NoSchedule` (CH-11.2) → `unreachable:NoExecute` after the eviction timeout
//! (CH-10.2) → eviction after the 1 s default toleration → {member2:3}.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use flotilla_api::testing::seed_policy;
use flotilla_proto::v1;
use flotilla_tests::{
    Stack, Timers, api_client, binding_healthy, cluster_work, create_nginx, create_pull_cluster,
    eventually, get_cluster, member_status, nginx_binding, ready_status, status_item, targets,
    tasks, wait_clusters_ready, wait_taint, work_clusters,
};

const T: Duration = Duration::from_secs(30);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pull_cluster_applies_reports_and_fails_over() {
    let mut stack = Stack::start(Timers::fast()).await;
    stack
        .start_pull_member("member1", &["--pod-startup-delay=200ms"])
        .await;
    stack
        .start_member("member2", &["--pod-startup-delay=200ms"])
        .await;
    let api = api_client(&stack).await;
    stack.create_push_clusters(&api, &["member2"]).await;
    create_pull_cluster(&api, "member1").await;
    // The Pull cluster turns Ready from its heartbeats alone (status, API enablements).
    wait_clusters_ready(&api, &["member1", "member2"], T).await;
    create_nginx(&api, seed_policy()).await;

    eventually(T, "binding {member1:1, member2:2} and healthy", || async {
        let b = nginx_binding(&api).await?;
        (targets(&b) == [("member1".into(), 1), ("member2".into(), 2)] && binding_healthy(&b))
            .then_some(())
    })
    .await;
    // The agent applied member1's Work and reported its status.
    let w = cluster_work(&api, "member1").await.expect("member1's Work");
    let s = w.status.as_ref().expect("the agent reported a status");
    assert!(s.applied, "{s:?}");
    assert_eq!(s.ready_replicas, 1);
    assert_eq!(s.health, v1::ResourceHealth::Healthy as i32);
    assert_eq!(
        s.observed_generation,
        w.metadata.as_ref().unwrap().generation
    );
    let m1 = member_status(&stack.members["member1"]).await;
    assert_eq!((m1.manifests, m1.replicas, m1.ready_replicas), (1, 1, 1));
    let b = nginx_binding(&api).await.unwrap();
    assert!(status_item(&b, "member1").unwrap().applied);

    // The agent dies (the member itself keeps running).
    let member1 = stack.members.get_mut("member1").unwrap();
    let agent = member1.agent.as_mut().expect("member1's agent");
    agent.kill().await;
    // its credential for the member never reached its (debug-level) log
    let log = agent.log();
    let token = member1.agent_token.clone().unwrap();
    assert!(log.contains("flotilla-agent starting"), "{log}");
    assert!(
        log.contains("watching works"),
        "the log is the agent's: {log}"
    );
    assert!(
        !log.contains(&token),
        "the member token leaked into the agent's log"
    );

    let c = eventually(T, "member1 Ready=Unknown", || async {
        let c = get_cluster(&api, "member1").await?;
        (ready_status(&c) == v1::ConditionStatus::Unknown).then_some(c)
    })
    .await;
    let ready = flotilla_tests::condition(&c.status.as_ref().unwrap().conditions, "Ready")
        .unwrap()
        .clone();
    assert_eq!(ready.reason, "ClusterStatusUnknown");
    for effect in [v1::TaintEffect::NoSchedule, v1::TaintEffect::NoExecute] {
        wait_taint(&api, "member1", "cluster.karmada.io/unreachable", effect, T).await;
    }

    eventually(T, "failover to {member2:3}, healthy, task done", || async {
        let b = nginx_binding(&api).await?;
        (targets(&b) == [("member2".into(), 3)] && binding_healthy(&b) && tasks(&b).is_empty())
            .then_some(())
    })
    .await;
    // member1's Work waits for an agent that could delete the manifest (the finalizer is
    // released only by the agent, or when the cluster is deleted).
    assert!(
        work_clusters(&api).await.contains(&"member1".to_string()),
        "member1's Work vanished while nobody could delete its manifest"
    );
    let m2 = member_status(&stack.members["member2"]).await;
    assert_eq!((m2.replicas, m2.ready_replicas), (3, 3));
}
