//! `GracefulEviction.Assess` in process on 127.0.0.1:0: table cases and bad requests.

use std::time::Duration;

use crate::support::*;
use flotilla_core::Time;
use flotilla_core::types::ResourceHealth::{Healthy, Unhealthy, Unknown};
use flotilla_core::types::{GracefulEvictionTask, ResourceBinding};
use flotilla_proto::convert::time_to_timestamp;
use flotilla_proto::v1;
use flotilla_proto::v1::graceful_eviction_client::GracefulEvictionClient;
use flotilla_runtime::Shutdown;
use flotilla_runtime::testing::grpc::{assert_invalid_field, serve_loopback};
use tonic::transport::Channel;

async fn serve() -> (GracefulEvictionClient<Channel>, Shutdown) {
    let (url, shutdown) = serve_loopback(|s| {
        s.add_service(flotilla_graceful_eviction::grpc::server(
            Duration::from_secs(600),
        ))
    })
    .await;
    (
        GracefulEvictionClient::connect(url).await.unwrap(),
        shutdown,
    )
}

const NOW: i64 = 1_000_000;

fn at(secs: i64) -> Time {
    Time::from_secs(secs)
}

fn request(binding: v1::ResourceBinding) -> v1::GracefulEvictionAssessRequest {
    v1::GracefulEvictionAssessRequest {
        binding: Some(binding),
        graceful_eviction_timeout: None,
        now: Some(time_to_timestamp(at(NOW))),
    }
}

fn outcomes(r: &v1::GracefulEvictionAssessResponse) -> Vec<v1::TaskOutcome> {
    r.assessments
        .iter()
        .map(|a| v1::TaskOutcome::try_from(a.outcome).unwrap())
        .collect()
}

fn with(f: impl Fn(&mut GracefulEvictionTask)) -> GracefulEvictionTask {
    let mut t = task("member1", Some(at(NOW - 100)));
    f(&mut t);
    t
}

#[tokio::test]
async fn assess_table() {
    let (mut client, shutdown) = serve().await;
    type Case = (
        &'static str,
        v1::ResourceBinding,
        Option<Duration>,
        Vec<v1::TaskOutcome>,
        Vec<&'static str>,
    );
    let unscheduled = |mut b: v1::ResourceBinding| {
        b.status.as_mut().unwrap().scheduler_observed_generation = 0;
        b.metadata.as_mut().unwrap().generation = 3;
        b
    };
    let cases: Vec<Case> = vec![
        (
            "GE-3.1 unstamped → stamped",
            on_member2("b", task("member1", None), Some(Healthy)),
            None,
            vec![v1::TaskOutcome::Stamped],
            vec![],
        ),
        (
            "GE-4.3 healthy and scheduled → removed",
            on_member2("b", with(|_| {}), Some(Healthy)),
            None,
            vec![v1::TaskOutcome::RemovedHealthy],
            vec!["member1"],
        ),
        (
            "GE-4.3 healthy but not scheduled → kept",
            unscheduled(on_member2("b", with(|_| {}), Some(Healthy))),
            None,
            vec![v1::TaskOutcome::Kept],
            vec![],
        ),
        (
            "GE-5.3 Unknown → kept",
            on_member2("b", with(|_| {}), Some(Unknown)),
            None,
            vec![v1::TaskOutcome::Kept],
            vec![],
        ),
        (
            "GE-4.2 timed out with the request's timeout",
            on_member2("b", with(|_| {}), Some(Unhealthy)),
            Some(Duration::from_secs(60)),
            vec![v1::TaskOutcome::RemovedTimedOut],
            vec!["member1"],
        ),
        (
            "GE-3.2 per-task grace period",
            on_member2("b", with(|t| t.grace_period_seconds = Some(30)), None),
            None,
            vec![v1::TaskOutcome::RemovedTimedOut],
            vec!["member1"],
        ),
        (
            "GE-4.1 suppressDeletion=true → kept",
            on_member2(
                "b",
                with(|t| t.suppress_deletion = Some(true)),
                Some(Healthy),
            ),
            Some(Duration::from_secs(1)),
            vec![v1::TaskOutcome::KeptSuppressed],
            vec![],
        ),
        (
            "GE-4.1 suppressDeletion=false → removed",
            on_member2("b", with(|t| t.suppress_deletion = Some(false)), None),
            None,
            vec![v1::TaskOutcome::RemovedSuppressionLifted],
            vec!["member1"],
        ),
        (
            "A6 empty placement → kept past the timeout",
            evicting("b", &[], vec![with(|_| {})], vec![]),
            Some(Duration::from_secs(1)),
            vec![v1::TaskOutcome::KeptNoReplacement],
            vec![],
        ),
    ];
    for (name, binding, timeout, want, evicted) in cases {
        let mut req = request(binding);
        req.graceful_eviction_timeout =
            timeout.map(|d| prost_types::Duration::try_from(d).unwrap());
        let r = client.assess(req).await.unwrap().into_inner();
        assert_eq!(outcomes(&r), want, "{name}: {:?}", r.reasons);
        assert_eq!(r.evicted_clusters, evicted, "{name}");
        assert_eq!(r.kept_tasks.len() + r.evicted_clusters.len(), 1, "{name}");
        assert!(!r.reasons.is_empty(), "{name}");
    }

    // next retry and deadline: created 100 s ago, default timeout 600 s → 500 s left
    let r = client
        .assess(request(on_member2("b", with(|_| {}), None)))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(
        r.next_retry,
        Some(prost_types::Duration {
            seconds: 500,
            nanos: 0
        })
    );
    assert_eq!(
        r.assessments[0].deadline,
        Some(time_to_timestamp(at(NOW + 500)))
    );
    assert!(!r.changed);

    // A6: ReplacementPending in the would-be conditions, no timed retry
    let r = client
        .assess(request(evicting("b", &[], vec![with(|_| {})], vec![])))
        .await
        .unwrap()
        .into_inner();
    let c = r
        .conditions
        .iter()
        .find(|c| c.r#type == "ReplacementPending")
        .expect("condition");
    assert_eq!(c.status, v1::ConditionStatus::True as i32);
    assert_eq!(c.reason, "NoReplacementFits");
    assert_eq!(r.next_retry, None);
    shutdown.trigger();
}

#[tokio::test]
async fn assess_rejects_bad_requests_naming_the_field() {
    let (mut client, shutdown) = serve().await;
    let good = || request(on_member2("b", task("member1", None), None));
    let mut cases: Vec<(&str, v1::GracefulEvictionAssessRequest, &str)> = Vec::new();
    let mut r = good();
    r.binding = None;
    cases.push(("missing binding", r, "binding"));
    let mut r = good();
    r.graceful_eviction_timeout = Some(prost_types::Duration {
        seconds: -5,
        nanos: 0,
    });
    cases.push(("negative timeout", r, "gracefulEvictionTimeout"));
    // prost-types' own conversion panics negating i64::MIN (found by the every-RPC test)
    let mut r = good();
    r.graceful_eviction_timeout = Some(prost_types::Duration {
        seconds: i64::MIN,
        nanos: -1,
    });
    cases.push(("the most negative timeout", r, "gracefulEvictionTimeout"));
    let mut r = good();
    r.binding
        .as_mut()
        .unwrap()
        .spec
        .as_mut()
        .unwrap()
        .graceful_eviction_tasks[0]
        .purge_mode = 42;
    cases.push((
        "unknown purge mode",
        r,
        "binding.spec.gracefulEvictionTasks[0].purgeMode",
    ));
    let mut b = ResourceBinding::try_from(good().binding.unwrap()).unwrap();
    b.spec.graceful_eviction_tasks[0].reason = "not a valid reason!".into();
    cases.push((
        "bad reason",
        request(b.into()),
        "binding.spec.gracefulEvictionTasks[0].reason",
    ));
    let mut b = ResourceBinding::try_from(good().binding.unwrap()).unwrap();
    b.spec.graceful_eviction_tasks.push(task("member1", None));
    cases.push((
        "two tasks for one cluster",
        request(b.into()),
        "binding.spec.gracefulEvictionTasks[1].fromCluster",
    ));
    let mut b = ResourceBinding::try_from(good().binding.unwrap()).unwrap();
    b.spec.graceful_eviction_tasks[0].grace_period_seconds = Some(10);
    b.spec.graceful_eviction_tasks[0].suppress_deletion = Some(true);
    cases.push((
        "grace with suppress",
        request(b.into()),
        "binding.spec.gracefulEvictionTasks[0].gracePeriodSeconds",
    ));

    for (name, req, field) in cases {
        let err = client.assess(req).await.expect_err(name);
        assert_invalid_field(name, &err, field);
    }
    shutdown.trigger();
}
