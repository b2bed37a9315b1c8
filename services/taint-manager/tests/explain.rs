//! `TaintManager.Explain` in process on 127.0.0.1:0: table cases and bad requests.

use std::time::Duration;

use crate::support::*;
use flotilla_core::Time;
use flotilla_core::types::{
    ClusterFailoverBehavior, FailoverBehavior, PurgeMode, ResourceBinding, TAINT_NOT_READY,
    TAINT_UNREACHABLE, Toleration, TolerationOperator,
};
use flotilla_proto::convert::time_to_timestamp;
use flotilla_proto::v1;
use flotilla_proto::v1::taint_manager_client::TaintManagerClient;
use flotilla_runtime::Shutdown;
use flotilla_runtime::testing::grpc::{assert_invalid_field, serve_loopback};
use tonic::Code;
use tonic::transport::Channel;

async fn serve() -> (TaintManagerClient<Channel>, Shutdown) {
    let (url, shutdown) =
        serve_loopback(|s| s.add_service(flotilla_taint_manager::grpc::server())).await;
    (TaintManagerClient::connect(url).await.unwrap(), shutdown)
}

const NOW: i64 = 1_000_000;

fn tainted(taints: Vec<flotilla_core::types::Taint>) -> v1::Cluster {
    let mut c = cluster("member1", true);
    c.spec.get_or_insert_with(Default::default).taints =
        taints.into_iter().map(Into::into).collect();
    c
}

fn request(cluster: v1::Cluster, binding: v1::ResourceBinding) -> v1::ExplainRequest {
    v1::ExplainRequest {
        cluster: Some(cluster),
        binding: Some(binding),
        options: None,
        now: Some(time_to_timestamp(Time::from_secs(NOW))),
    }
}

fn decision(r: &v1::ExplainResponse) -> v1::EvictionDecision {
    v1::EvictionDecision::try_from(r.decision).unwrap()
}

fn seconds(seconds: i64) -> prost_types::Duration {
    prost_types::Duration { seconds, nanos: 0 }
}

/// The answer to `req` (it must succeed).
async fn explain(
    client: &mut TaintManagerClient<Channel>,
    req: v1::ExplainRequest,
) -> v1::ExplainResponse {
    client.explain(req).await.unwrap().into_inner()
}

#[tokio::test]
async fn explain_table() {
    let (mut client, shutdown) = serve().await;
    let added = Time::from_secs(NOW - 100);
    let on = |tols| binding("b", &[("member1", 2), ("member2", 1)], tols);
    let down = || tainted(vec![not_ready_taint(added)]);

    // untolerated → evict now, with the task that would be appended
    let r = explain(&mut client, request(down(), on(vec![]))).await;
    assert_eq!(decision(&r), v1::EvictionDecision::EvictNow);
    let task = r.task.expect("task");
    assert_eq!(
        (
            task.from_cluster.as_str(),
            task.producer.as_str(),
            task.reason.as_str(),
            task.replicas
        ),
        ("member1", "TaintManager", "TaintUntolerated", Some(2))
    );
    assert_eq!(task.purge_mode, v1::PurgeMode::Gracefully as i32);
    assert!(r.tolerations[0].toleration.is_none(), "untolerated");

    // tolerated 300 s, added 100 s ago → evict after 200 s
    let r = explain(
        &mut client,
        request(down(), on(vec![tolerate(TAINT_NOT_READY, Some(300))])),
    )
    .await;
    assert_eq!(decision(&r), v1::EvictionDecision::EvictAfter);
    assert_eq!(r.evict_after, Some(seconds(200)));
    assert_eq!(
        r.evict_at,
        Some(time_to_timestamp(Time::from_secs(NOW + 200)))
    );
    assert_eq!(
        r.tolerations[0].expires_at,
        Some(time_to_timestamp(Time::from_secs(NOW + 200)))
    );
    assert!(r.task.is_none());

    // TM-8.4: two taints, the earliest toleration to run out wins
    let r = explain(
        &mut client,
        request(
            tainted(vec![
                not_ready_taint(added),
                no_execute(TAINT_UNREACHABLE, added),
            ]),
            on(vec![
                tolerate(TAINT_NOT_READY, Some(120)),
                tolerate(TAINT_UNREACHABLE, Some(110)),
            ]),
        ),
    )
    .await;
    assert_eq!(r.evict_after, Some(seconds(10)));
    assert_eq!(r.tolerations.len(), 2);

    // toleration time over → evict now
    let r = explain(
        &mut client,
        request(down(), on(vec![tolerate(TAINT_NOT_READY, Some(100))])),
    )
    .await;
    assert_eq!(decision(&r), v1::EvictionDecision::EvictNow);

    // tolerated forever
    let r = explain(
        &mut client,
        request(down(), on(vec![tolerate(TAINT_NOT_READY, None)])),
    )
    .await;
    assert_eq!(decision(&r), v1::EvictionDecision::Tolerate);

    // not a target → not applicable
    let r = explain(
        &mut client,
        request(down(), binding("b", &[("member2", 1)], vec![])),
    )
    .await;
    assert_eq!(decision(&r), v1::EvictionDecision::NotApplicable);

    // eviction disabled → not applicable
    let mut req = request(down(), on(vec![]));
    req.options = Some(v1::TaintManagerOptions {
        no_execute_taint_eviction: Some(false),
        default_purge_mode: 0,
    });
    let r = explain(&mut client, req).await;
    assert_eq!(decision(&r), v1::EvictionDecision::NotApplicable);

    // TM-9: failover.cluster.purgeMode Directly wins over the flag
    let mut b = ResourceBinding::try_from(on(vec![])).unwrap();
    b.spec.failover = Some(FailoverBehavior {
        cluster: Some(ClusterFailoverBehavior {
            purge_mode: Some(PurgeMode::Directly),
            ..Default::default()
        }),
        application: None,
    });
    let r = explain(&mut client, request(down(), b.into())).await;
    assert_eq!(r.purge_mode, v1::PurgeMode::Directly as i32);
    assert_eq!(r.task.unwrap().purge_mode, v1::PurgeMode::Directly as i32);

    // TM-9: flag Directly for a binding without failover.cluster
    let mut req = request(down(), on(vec![]));
    req.options = Some(v1::TaintManagerOptions {
        no_execute_taint_eviction: None,
        default_purge_mode: v1::PurgeMode::Directly as i32,
    });
    let r = explain(&mut client, req).await;
    assert_eq!(r.purge_mode, v1::PurgeMode::Directly as i32);

    // A3: no applied placement → FAILED_PRECONDITION
    let mut b = on(vec![]);
    b.status.as_mut().unwrap().applied_placement = None;
    let err = client.explain(request(down(), b)).await.unwrap_err();
    assert_eq!(err.code(), Code::FailedPrecondition, "{err}");
    shutdown.trigger();
}

#[tokio::test]
async fn explain_rejects_bad_requests_naming_the_field() {
    let (mut client, shutdown) = serve().await;
    let added = Time::from_secs(NOW);
    let good = || {
        request(
            tainted(vec![not_ready_taint(added)]),
            binding("b", &[("member1", 1)], vec![]),
        )
    };

    let mut cases: Vec<(&str, v1::ExplainRequest, &str)> = Vec::new();
    let mut r = good();
    r.cluster = None;
    cases.push(("missing cluster", r, "cluster"));
    let mut r = good();
    r.binding = None;
    cases.push(("missing binding", r, "binding"));
    let mut r = good();
    r.cluster.as_mut().unwrap().spec.as_mut().unwrap().taints[0].effect = 99;
    cases.push(("unknown taint effect", r, "cluster.spec.taints[0].effect"));
    let mut r = good();
    r.options = Some(v1::TaintManagerOptions {
        no_execute_taint_eviction: None,
        default_purge_mode: v1::PurgeMode::Never as i32,
    });
    cases.push(("purge mode Never", r, "options.defaultPurgeMode"));
    let mut r = good();
    let bad_tol = Toleration {
        key: TAINT_NOT_READY.into(),
        operator: TolerationOperator::Exists,
        value: "x".into(),
        effect: None,
        toleration_seconds: None,
    };
    r.binding
        .as_mut()
        .unwrap()
        .status
        .as_mut()
        .unwrap()
        .applied_placement = Some(
        flotilla_core::types::Placement {
            cluster_tolerations: vec![bad_tol],
            ..Default::default()
        }
        .into(),
    );
    cases.push((
        "Exists with a value",
        r,
        "binding.status.appliedPlacement.clusterTolerations[0].operator",
    ));
    let mut r = good();
    r.binding.as_mut().unwrap().spec.as_mut().unwrap().clusters[0].name = "Not_A_Name".into();
    cases.push(("bad cluster name", r, "binding.spec.clusters[0].name"));
    let mut r = good();
    r.now = Some(prost_types::Timestamp {
        seconds: 0,
        nanos: -1,
    });
    cases.push(("bad now", r, "now"));

    for (name, req, field) in cases {
        let err = client.explain(req).await.expect_err(name);
        assert_invalid_field(name, &err, field);
    }
    shutdown.trigger();
    tokio::time::sleep(Duration::from_millis(10)).await;
}
