//! cluster-health against a real etcd (never skipped: a missing etcd fails the test): a Push
//! member goes Ready, then unreachable → False + not-ready:NoSchedule; a Pull cluster's
//! heartbeat is recorded in etcd and makes it Ready.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::sync::Arc;
use std::time::Duration;

use crate::support::*;
use flotilla_cluster_health::NoExecuteTaints;
use flotilla_member_sim::Fault;
use flotilla_proto::v1;
use flotilla_proto::v1::cluster_health_client::ClusterHealthClient;
use flotilla_store::StoreRef;
use flotilla_store::testing::EtcdServer;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn push_and_pull_health_on_etcd() {
    let etcd = EtcdServer::start().await;
    let store: StoreRef = Arc::new(etcd.store("cluster-health").await);
    let m = Member::start("m1", 30, None).await;
    let h = Health::with_mode(store.clone(), NoExecuteTaints::Auto);
    let addr = h.serve_grpc().await;
    create(&store, cluster("m1", v1::SyncMode::Push, &m.endpoint())).await;
    create(&store, cluster("p1", v1::SyncMode::Pull, "")).await;

    let c = until_ready_untainted(&store, "m1", "Ready on etcd").await;
    assert_eq!(allocatable_replicas(&c), Some(30));

    m.sim.set_fault(Fault::Unreachable);
    let c = until_ready_is(
        &store,
        "m1",
        "not Ready on etcd",
        v1::ConditionStatus::False,
    )
    .await;
    assert_eq!(ready(&c).unwrap().1, "ClusterNotReachable");
    assert_eq!(taints(&c), vec![NR_NS]);

    // a Pull heartbeat through gRPC lands in etcd and drives the condition
    let mut client = ClusterHealthClient::connect(format!("http://{addr}"))
        .await
        .unwrap();
    client
        .heartbeat(v1::HeartbeatRequest {
            cluster_name: "p1".into(),
            cluster_uid: String::new(),
            probe: Some(v1::ProbeResult {
                online: true,
                healthy: true,
                message: "ok".into(),
            }),
            status: None,
            sent_at: None,
        })
        .await
        .unwrap();
    assert!(store.get("heartbeats/p1").await.unwrap().is_some());
    until_ready_is(
        &store,
        "p1",
        "Pull cluster Ready on etcd",
        v1::ConditionStatus::True,
    )
    .await;
    // ... and, with no more heartbeats, Unknown after the grace period
    let c = until_ready_is(
        &store,
        "p1",
        "Pull cluster Unknown on etcd",
        v1::ConditionStatus::Unknown,
    )
    .await;
    assert_eq!(taints(&c), vec![UR_NS]);
    m.sim.set_fault(Fault::Healthy);
    tokio::time::timeout(Duration::from_secs(10), h.stop())
        .await
        .unwrap();
}
