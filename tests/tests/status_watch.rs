//! WE-7.2: the member's status reaches the Works by watch, as it changes. The work-executor's
//! periodic collection is set to an hour, and the pods start a second after each apply (so
//! the apply's own answer says "not Ready yet"): the binding still turns Healthy within
//! seconds, then follows a scale-up the same way. Without the watch it would wait an hour.
//!
//! Real processes: etcd, the six control-plane services and two member-sims.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use flotilla_proto::v1;
use flotilla_tests::{
    Stack, Timers, api_client, binding_healthy, cluster_names, create_nginx, eventually,
    nginx_binding, nginx_policy, wait_clusters_ready,
};

const T: Duration = Duration::from_secs(30);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn we_7_2_status_arrives_by_watch_not_by_the_next_collection() {
    let timers = Timers::fast().set("work-executor", "status-sync-period", "1h");
    let mut stack = Stack::start(timers).await;
    let all = ["member1", "member2"];
    for m in all {
        stack.start_member(m, &["--pod-startup-delay=1s"]).await;
    }
    let api = api_client(&stack).await;
    stack.create_push_clusters(&api, &all).await;
    wait_clusters_ready(&api, &all, T).await;
    let placement = v1::Placement {
        cluster_affinity: Some(cluster_names(&all)),
        replica_scheduling: Some(v1::ReplicaSchedulingStrategy {
            replica_scheduling_type: v1::ReplicaSchedulingType::Duplicated as i32,
            ..Default::default()
        }),
        ..Default::default()
    };
    create_nginx(&api, nginx_policy(placement, None)).await;
    eventually(
        T,
        "nginx Healthy on both members (pushed by watch)",
        || async {
            let b = nginx_binding(&api).await?;
            binding_healthy(&b).then_some(())
        },
    )
    .await;

    // A scale-up: the apply answers with the new generation not Ready yet, and only the
    // watch can tell that it became Ready.
    let w = api
        .clone()
        .get_workload(v1::GetWorkloadRequest {
            namespace: "default".into(),
            kind: "Deployment".into(),
            name: "nginx".into(),
        })
        .await
        .unwrap()
        .into_inner();
    let mut scaled = w.clone();
    let manifest: serde_json::Value = serde_json::from_str(&w.manifest).unwrap();
    let replicas = manifest["spec"]["replicas"].as_i64().unwrap();
    let mut manifest = manifest;
    manifest["spec"]["replicas"] = serde_json::json!(replicas + 2);
    scaled.manifest = manifest.to_string();
    api.clone()
        .update_workload(v1::UpdateWorkloadRequest {
            workload: Some(scaled),
        })
        .await
        .unwrap();
    let want = i32::try_from(replicas + 2).unwrap();
    eventually(
        T,
        "nginx Healthy with the new replicas everywhere",
        || async {
            let b = nginx_binding(&api).await?;
            let status = b.status.as_ref()?;
            let all_scaled = status.aggregated_status.len() == 2
                && status
                    .aggregated_status
                    .iter()
                    .all(|i| i.ready_replicas == want);
            (binding_healthy(&b) && all_scaled).then_some(())
        },
    )
    .await;
}
