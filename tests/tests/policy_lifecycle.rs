//! Policy lifecycle on real processes and etcd (PL-1, PL-2): deleting the
//! PropagationPolicy of a running workload detaches its binding — the binding, its Works and
//! the member copies stay, with every replica Ready — and deleting the workload then removes
//! them all.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use flotilla_api::claim::{LABEL_POLICY_NAME, LABEL_POLICY_NAMESPACE};
use flotilla_api::testing::seed_policy;
use flotilla_proto::v1;
use flotilla_tests::{
    Stack, Timers, binding_healthy, create_nginx, eventually, list_works, member_status,
    nginx_binding, targets,
};

const T: Duration = Duration::from_secs(30);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pl_1_deleting_the_policy_keeps_the_workload_on_its_members() {
    let (stack, api) = Stack::with_two_members(Timers::fast(), T).await;
    create_nginx(&api, seed_policy()).await;
    let placed = vec![("member1".to_string(), 1), ("member2".to_string(), 2)];
    eventually(T, "binding {member1:1, member2:2} and healthy", || async {
        let b = nginx_binding(&api).await?;
        (targets(&b) == placed && binding_healthy(&b)).then_some(())
    })
    .await;
    let works_before = list_works(&api).await;
    assert_eq!(works_before.len(), 2, "one Work per member");

    // `flotilla delete pp nginx-propagation`
    api.clone()
        .delete_propagation_policy(v1::DeletePropagationPolicyRequest {
            namespace: "default".into(),
            name: "nginx-propagation".into(),
            preconditions: None,
        })
        .await
        .unwrap();
    let detached = eventually(T, "the binding detached from its policy", || async {
        let b = nginx_binding(&api).await?;
        let labels = &b.metadata.as_ref()?.labels;
        (!labels.contains_key(LABEL_POLICY_NAME) && !labels.contains_key(LABEL_POLICY_NAMESPACE))
            .then_some(b)
    })
    .await;
    assert_eq!(targets(&detached), placed, "the placement stays");
    // Give every controller time to act on the detach, then check nothing was taken away.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let b = nginx_binding(&api).await.expect("the binding stays");
    assert!(binding_healthy(&b), "still healthy: {b:?}");
    let works_after = list_works(&api).await;
    assert_eq!(works_after.len(), 2, "the Works stay: {works_after:?}");
    for (before, after) in works_before.iter().zip(&works_after) {
        assert_eq!(
            before.metadata.as_ref().map(|m| &m.name),
            after.metadata.as_ref().map(|m| &m.name)
        );
        assert!(
            after
                .metadata
                .as_ref()
                .is_some_and(|m| m.deletion_timestamp.is_none()),
            "not being deleted"
        );
    }
    for (member, replicas) in [("member1", 1), ("member2", 2)] {
        let status = member_status(&stack.members[member]).await;
        assert_eq!(status.manifests, 1, "{member} keeps its copy");
        assert_eq!(status.ready_replicas, replicas, "{member} replicas Ready");
    }

    // PL-2: deleting the workload removes the binding, the Works and the member copies.
    api.clone()
        .delete_workload(flotilla_api::testing::delete_nginx())
        .await
        .unwrap();
    eventually(T, "binding, Works and member copies gone", || async {
        let gone = nginx_binding(&api).await.is_none() && list_works(&api).await.is_empty();
        let mut empty = true;
        for member in ["member1", "member2"] {
            empty &= member_status(&stack.members[member]).await.manifests == 0;
        }
        (gone && empty).then_some(())
    })
    .await;
    drop(stack);
}
