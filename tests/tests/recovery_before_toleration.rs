//! Recovery beats toleration (I11, F9): the default NoExecute tolerations are 10 s (api
//! `--default-*-toleration-seconds=10`, PD-1.7). member1 stops answering until its
//! `not-ready:NoExecute` taint appears, then answers again well before the toleration ends.
//! The taints go, and even after the moment the toleration would have expired (taint
//! timeAdded + 10 s, plus a margin) no eviction task ever existed, `spec.clusters` never
//! changed, and no Work was written (every Work keeps its resourceVersion).
//!
//! The bindings and Works are recorded through api watches, so a task that existed only
//! briefly would be seen too.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::{Duration, SystemTime};

use flotilla_api::testing::seed_policy;
use flotilla_proto::v1;
use flotilla_tests::{
    Stack, Timers, binding_healthy, create_nginx, eventually, get_cluster, list_works,
    nginx_binding, record_bindings, record_works, resource_version, set_fault, targets, tasks,
    wait_taint, work_cluster,
};

const T: Duration = Duration::from_secs(30);
const TOLERATION_SECONDS: i64 = 10;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn recovery_before_toleration_evicts_nothing() {
    let timers = Timers::fast()
        .set(
            "api",
            "default-not-ready-toleration-seconds",
            &TOLERATION_SECONDS.to_string(),
        )
        .set(
            "api",
            "default-unreachable-toleration-seconds",
            &TOLERATION_SECONDS.to_string(),
        );
    let (stack, api) = Stack::with_two_members(timers, T).await;
    create_nginx(&api, seed_policy()).await;

    let placed = vec![("member1".to_string(), 1), ("member2".to_string(), 2)];
    let b = eventually(T, "binding {member1:1, member2:2} and healthy", || async {
        let b = nginx_binding(&api).await?;
        (targets(&b) == placed && binding_healthy(&b)).then_some(b)
    })
    .await;
    // The applied placement carries the defaulted 10 s NoExecute tolerations (A3, PD-1.7):
    // without the recovery, member1 would be evicted 10 s after its NoExecute taint.
    let tolerations = &b
        .status
        .as_ref()
        .unwrap()
        .applied_placement
        .as_ref()
        .expect("applied placement")
        .cluster_tolerations;
    for key in [
        "cluster.karmada.io/not-ready",
        "cluster.karmada.io/unreachable",
    ] {
        assert!(
            tolerations.iter().any(|t| t.key == key
                && t.effect == v1::TaintEffect::NoExecute as i32
                && t.toleration_seconds == Some(TOLERATION_SECONDS)),
            "no {TOLERATION_SECONDS}s toleration of {key}: {tolerations:?}"
        );
    }
    // Let the Work statuses settle (3 Ready replicas reported on both), then record.
    let works_before = eventually(T, "both Works report all replicas Ready", || async {
        let works = list_works(&api).await;
        (works.len() == 2
            && works.iter().all(|w| {
                let s = w.status.clone().unwrap_or_default();
                s.applied
                    && s.health == v1::ResourceHealth::Healthy as i32
                    && Some(s.ready_replicas) == w.spec.as_ref().and_then(|s| s.replicas)
            }))
        .then_some(works)
    })
    .await;
    let bindings = record_bindings(&api).await;
    let works = record_works(&api).await;

    // member1 stops answering until NoExecute appears, then answers again at once.
    set_fault(&stack.members["member1"], v1::FaultMode::Unreachable).await;
    let tainted = wait_taint(
        &api,
        "member1",
        "cluster.karmada.io/not-ready",
        v1::TaintEffect::NoExecute,
        T,
    )
    .await;
    set_fault(&stack.members["member1"], v1::FaultMode::Healthy).await;
    let time_added = tainted
        .spec
        .as_ref()
        .unwrap()
        .taints
        .iter()
        .find(|t| {
            t.key == "cluster.karmada.io/not-ready" && t.effect == v1::TaintEffect::NoExecute as i32
        })
        .and_then(|t| t.time_added)
        .expect("the NoExecute taint has a timeAdded");
    let expires = SystemTime::UNIX_EPOCH
        + Duration::from_secs(u64::try_from(time_added.seconds + TOLERATION_SECONDS).unwrap())
        + Duration::from_nanos(u64::try_from(time_added.nanos).unwrap());

    eventually(T, "member1's taints removed", || async {
        let c = get_cluster(&api, "member1").await?;
        c.spec.as_ref()?.taints.is_empty().then_some(())
    })
    .await;
    let healed = SystemTime::now();
    assert!(
        healed < expires,
        "the taints went only after the toleration expired: the scenario did not test I11"
    );

    // Past the instant the toleration would have expired, plus 3 s (the taint-manager acts
    // within one reconcile of it, I12).
    let wait = expires
        .duration_since(SystemTime::now())
        .unwrap_or_default()
        + Duration::from_secs(3);
    tokio::time::sleep(wait).await;

    // No task, ever; spec.clusters never changed.
    let versions = bindings.objects();
    assert!(!versions.is_empty());
    for b in &versions {
        assert!(
            tasks(b).is_empty(),
            "an eviction task appeared: {:?}",
            b.spec.as_ref().unwrap().graceful_eviction_tasks
        );
        assert_eq!(targets(b), placed, "spec.clusters changed");
    }
    let b = nginx_binding(&api).await.unwrap();
    assert_eq!(targets(&b), placed);
    assert!(tasks(&b).is_empty());

    // No Work was written: the same Works with the same resourceVersions, and no watch event
    // after the initial state.
    let changes: Vec<_> = works
        .seen()
        .into_iter()
        .filter(|s| s.kind != v1::WatchEventType::Added)
        .map(|s| (work_cluster(&s.object).to_owned(), s.kind, s.revision))
        .collect();
    assert!(changes.is_empty(), "Works changed: {changes:?}");
    let rv = |ws: &[v1::Work]| {
        let mut v: Vec<(String, i64)> = ws
            .iter()
            .map(|w| {
                (
                    work_cluster(w).to_owned(),
                    resource_version(w.metadata.as_ref()),
                )
            })
            .collect();
        v.sort();
        v
    };
    assert_eq!(rv(&list_works(&api).await), rv(&works_before));
}
