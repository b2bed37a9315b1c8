//! PL-7 `conflictResolution` on a real member's API: a Deployment `nginx` that someone created
//! on member1 with kubectl is not Flotilla's. With the default (Abort) the Work fails with a
//! message naming the object and the member's Deployment stays as it was; once the policy says
//! `Overwrite`, Flotilla takes it over (its labels and replicas).

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use flotilla_proto::v1;
use flotilla_tests::{
    Stack, Timers, cluster_names, cluster_work, create_nginx, eventually, member_kubectl,
    nginx_policy,
};

const T: Duration = Duration::from_secs(30);

/// member1's Deployment nginx as JSON, if it has one.
async fn on_member(addr: &str) -> Option<serde_json::Value> {
    let (ok, out, _) = member_kubectl(
        addr,
        &["get", "deploy", "nginx", "-n", "default", "-o", "json"],
    )
    .await;
    ok.then(|| serde_json::from_str(&out).ok()).flatten()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pl_7_abort_leaves_a_foreign_object_alone_and_overwrite_takes_it_over() {
    let mut stack = Stack::start(Timers::fast()).await;
    let addr = stack
        .start_member("member1", &["--pod-startup-delay=100ms"])
        .await;
    let api = stack.register_push_members(&["member1"], T).await;
    // someone else's Deployment, applied with kubectl (member-sim serves server-side apply)
    let file = std::env::temp_dir().join(format!("foreign-{}.yaml", std::process::id()));
    std::fs::write(
        &file,
        "apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: nginx, namespace: default}\n\
         spec:\n  replicas: 1\n  selector: {matchLabels: {app: other}}\n  template:\n    \
         metadata: {labels: {app: other}}\n    spec: {containers: [{name: c, image: busybox}]}\n",
    )
    .unwrap();
    let (ok, out, err) = member_kubectl(
        &addr,
        &[
            "apply",
            "--server-side",
            "--validate=false",
            "-f",
            file.to_str().unwrap(),
        ],
    )
    .await;
    let _ = std::fs::remove_file(&file);
    assert!(ok, "kubectl apply: {out}{err}");

    let placement = v1::Placement {
        cluster_affinity: Some(cluster_names(&["member1"])),
        ..Default::default()
    };
    let mut policy = nginx_policy(placement, None);
    create_nginx(&api, policy.clone()).await;
    // Abort (the default): the Work says why, and the member's object is untouched
    let message = eventually(T, "member1's Work refused", || async {
        let w = cluster_work(&api, "member1").await?;
        let status = w.status?;
        (!status.applied && !status.applied_message.is_empty()).then_some(status.applied_message)
    })
    .await;
    assert!(
        message.contains("Deployment default/nginx already exists")
            && message.contains("conflictResolution: Abort"),
        "{message}"
    );
    tokio::time::sleep(Duration::from_secs(1)).await;
    let d = on_member(&addr).await.expect("the kubectl Deployment");
    assert_eq!(d["spec"]["replicas"], 1, "Abort changed the object: {d}");
    assert!(
        d["metadata"]["labels"]
            .get(flotilla_member::managed_label(true))
            .is_none(),
        "Abort labelled the object as Flotilla's: {d}"
    );

    // Overwrite: taken over
    policy.spec.as_mut().unwrap().conflict_resolution = v1::ConflictResolution::Overwrite as i32;
    let stored = api
        .clone()
        .get_propagation_policy(v1::GetPropagationPolicyRequest {
            namespace: "default".into(),
            name: policy.metadata.as_ref().unwrap().name.clone(),
        })
        .await
        .unwrap()
        .into_inner();
    policy.metadata = stored.metadata;
    api.clone()
        .update_propagation_policy(v1::UpdatePropagationPolicyRequest {
            propagation_policy: Some(policy),
        })
        .await
        .unwrap();
    let d = eventually(T, "member1's Deployment taken over", || async {
        let d = on_member(&addr).await?;
        (d["spec"]["replicas"] == 3).then_some(d)
    })
    .await;
    assert!(
        d["metadata"]["labels"]
            .get(flotilla_member::managed_label(true))
            .is_some(),
        "{d}"
    );
    eventually(T, "member1's Work applied", || async {
        cluster_work(&api, "member1")
            .await?
            .status
            .filter(|s| s.applied)
            .map(|_| ())
    })
    .await;
}
