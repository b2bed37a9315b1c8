//! Seed scenario, Divided (issue 4): member1 (weight 1) and member2 (weight 2), 3 replicas →
//! {member1:1, member2:2}; member1 becomes unreachable → NoSchedule taint after the failure
//! threshold, NoExecute after the eviction timeout, eviction after the toleration →
//! {member2:3}. The Work on member1 stays while member2's new replicas are not Ready, the
//! eviction task is removed once they are, and member1's Work is deleted only after member1
//! answers again. Recovery does not move replicas back.
//!
//! Real processes: etcd, the six control-plane services and two member-sims.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use flotilla_api::testing::{cluster, nginx_workload, seed_policy};
use flotilla_proto::v1;
use flotilla_tests::{Stack, Timers, api_client, eventually, get_cluster, set_fault, targets};

const T: Duration = Duration::from_secs(60);

fn tasks(b: &v1::ResourceBinding) -> Vec<String> {
    b.spec
        .as_ref()
        .map(|s| {
            s.graceful_eviction_tasks
                .iter()
                .map(|t| t.from_cluster.clone())
                .collect()
        })
        .unwrap_or_default()
}

fn has_taint(c: &v1::Cluster, key: &str, effect: v1::TaintEffect) -> bool {
    c.spec.as_ref().is_some_and(|s| {
        s.taints
            .iter()
            .any(|t| t.key == key && t.effect == effect as i32)
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn seed_divided_failover_and_recovery() {
    let mut stack = Stack::start(Timers::fast()).await;
    let mut members = vec![];
    for name in ["member1", "member2"] {
        let addr = stack
            .start_member(name, &["--pod-startup-delay=500ms"])
            .await;
        members.push((name, addr));
    }
    let mut api = api_client(&stack).await;
    for (name, addr) in &members {
        api.create_cluster(v1::CreateClusterRequest {
            cluster: Some(cluster(name, &format!("http://{addr}"))),
        })
        .await
        .unwrap();
    }
    // Wait until both members are Ready and untainted, so the first schedule sees both.
    for name in ["member1", "member2"] {
        eventually(T, &format!("{name} Ready"), || {
            let mut api = api.clone();
            async move {
                let c = api
                    .get_cluster(v1::GetClusterRequest { name: name.into() })
                    .await
                    .ok()?
                    .into_inner();
                let ready =
                    c.status.as_ref()?.conditions.iter().any(|c| {
                        c.r#type == "Ready" && c.status == v1::ConditionStatus::True as i32
                    });
                (ready && c.spec.as_ref()?.taints.is_empty()).then_some(())
            }
        })
        .await;
    }
    api.create_workload(v1::CreateWorkloadRequest {
        workload: Some(nginx_workload()),
    })
    .await
    .unwrap();
    api.create_propagation_policy(v1::CreatePropagationPolicyRequest {
        propagation_policy: Some(seed_policy()),
    })
    .await
    .unwrap();

    let get_binding = |mut api: flotilla_tests::ApiClient| async move {
        api.get_resource_binding(v1::GetResourceBindingRequest {
            namespace: "default".into(),
            name: "nginx-deployment".into(),
        })
        .await
        .ok()
        .map(|r| r.into_inner())
    };
    let work_clusters = |mut api: flotilla_tests::ApiClient| async move {
        let works = api
            .list_works(v1::ListWorksRequest::default())
            .await
            .unwrap()
            .into_inner()
            .items;
        let mut clusters: Vec<String> = works
            .iter()
            .filter_map(|w| w.spec.as_ref().map(|s| s.cluster.clone()))
            .collect();
        clusters.sort();
        clusters
    };

    // Scheduled by weight, applied, healthy.
    eventually(T, "binding {member1:1, member2:2} and healthy", || {
        let api = api.clone();
        async move {
            let b = get_binding(api).await?;
            let healthy = b
                .status
                .as_ref()?
                .aggregated_status
                .iter()
                .filter(|i| i.health == v1::ResourceHealth::Healthy as i32)
                .count();
            (targets(&b) == vec![("member1".into(), 1), ("member2".into(), 2)] && healthy == 2)
                .then_some(())
        }
    })
    .await;
    assert_eq!(work_clusters(api.clone()).await, vec!["member1", "member2"]);

    // member1 stops answering.
    set_fault(&stack.members["member1"], v1::FaultMode::Unreachable).await;

    // NoSchedule first (after the failure threshold), then NoExecute (after the eviction timeout).
    for (what, effect) in [
        ("member1 not-ready:NoSchedule", v1::TaintEffect::NoSchedule),
        ("member1 not-ready:NoExecute", v1::TaintEffect::NoExecute),
    ] {
        eventually(T, what, || async {
            let c = get_cluster(&api, "member1").await?;
            has_taint(&c, "cluster.karmada.io/not-ready", effect).then_some(())
        })
        .await;
    }

    // Eviction: {member2:3}. Whenever the task for member1 exists, member1's Work must too (I1).
    let saw_task = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    eventually(
        T,
        "binding {member2:3} with the eviction task finished",
        || {
            let api = api.clone();
            let saw_task = saw_task.clone();
            async move {
                let b = get_binding(api.clone()).await?;
                if tasks(&b).contains(&"member1".to_string()) {
                    saw_task.store(true, std::sync::atomic::Ordering::SeqCst);
                    assert!(
                        work_clusters(api).await.contains(&"member1".to_string()),
                        "member1's Work vanished while its eviction task still exists (I1)"
                    );
                    return None;
                }
                (targets(&b) == vec![("member2".into(), 3)]
                    && saw_task.load(std::sync::atomic::Ordering::SeqCst))
                .then_some(())
            }
        },
    )
    .await;

    // The task is gone because member2 reports 3 Ready replicas (not by timeout: 60 s).
    let b = get_binding(api.clone()).await.unwrap();
    let m2 = b
        .status
        .as_ref()
        .unwrap()
        .aggregated_status
        .iter()
        .find(|i| i.cluster_name == "member2")
        .unwrap();
    assert_eq!(m2.health, v1::ResourceHealth::Healthy as i32);
    assert_eq!(m2.ready_replicas, 3);

    // member1 is still unreachable: its Work waits (finalizer) instead of disappearing.
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert!(
        work_clusters(api.clone())
            .await
            .contains(&"member1".to_string()),
        "member1's Work was removed while member1 was unreachable"
    );

    // member1 answers again → its Work is deleted on the member and in the store.
    set_fault(&stack.members["member1"], v1::FaultMode::Healthy).await;
    eventually(T, "member1's Work deleted after it answers again", || {
        let api = api.clone();
        async move { (work_clusters(api).await == vec!["member2"]).then_some(()) }
    })
    .await;

    // Recovery does not move replicas back (SC-3.8): member1 turns Ready, taints go, result stays.
    eventually(T, "member1 taints removed", || async {
        let c = get_cluster(&api, "member1").await?;
        c.spec.as_ref()?.taints.is_empty().then_some(())
    })
    .await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    let b = get_binding(api.clone()).await.unwrap();
    assert_eq!(targets(&b), vec![("member2".into(), 3)]);
    assert!(tasks(&b).is_empty());
    drop(stack.members.remove("member1"));
}
