//! `flotilla.v1.Scheduler/Simulate` in-process on 127.0.0.1:0: table cases (the seed
//! examples, an untolerated taint, SC-3.7, SC-4.3), bad input → INVALID_ARGUMENT with field
//! paths, and the whole service (`run_scheduler`, the service shape) on a MemStore.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;
use std::time::Duration;

use crate::common::*;
use flotilla_core::types::{
    ClusterAffinity, Placement, ResourceBinding, Taint, TaintEffect, Toleration, TolerationOperator,
};
use flotilla_proto::v1;
use flotilla_proto::v1::scheduler_client::SchedulerClient;
use flotilla_proto::v1::scheduler_server::SchedulerServer;
use flotilla_runtime::Shutdown;
use flotilla_runtime::testing::grpc::{serve_loopback, wait_serving};
use flotilla_scheduler::{Config, SchedulerService};
use flotilla_store::typed::Typed;
use flotilla_store::{MemStore, StoreRef};
use tonic::Code;
use tonic::transport::Channel;
use tonic_types::StatusExt;

async fn client() -> (SchedulerClient<Channel>, Shutdown) {
    let (url, shutdown) =
        serve_loopback(|s| s.add_service(SchedulerServer::new(SchedulerService::default()))).await;
    (SchedulerClient::connect(url).await.unwrap(), shutdown)
}

fn request(
    rb: ResourceBinding,
    clusters: Vec<flotilla_core::types::Cluster>,
) -> v1::SimulateRequest {
    v1::SimulateRequest {
        binding: Some(rb.into()),
        clusters: clusters.into_iter().map(Into::into).collect(),
        options: None,
        force: false,
        now: Some(prost_types::Timestamp {
            seconds: 1_700_000_100,
            nanos: 0,
        }),
    }
}

fn result(resp: &v1::SimulateResponse) -> Vec<(String, i32)> {
    resp.clusters
        .iter()
        .map(|t| (t.name.clone(), t.replicas))
        .collect()
}

fn pairs(list: &[(&str, i32)]) -> Vec<(String, i32)> {
    list.iter().map(|(n, r)| ((*n).to_owned(), *r)).collect()
}

fn verdict<'a>(resp: &'a v1::SimulateResponse, cluster: &str) -> &'a v1::ClusterFilterResult {
    resp.filter_results
        .iter()
        .find(|f| f.cluster == cluster)
        .unwrap_or_else(|| panic!("no filter result for {cluster}"))
}

/// A binding that was scheduled to `previous` with its placement applied (settled).
fn settled(mut rb: ResourceBinding, previous: &[(&str, i32)]) -> ResourceBinding {
    rb.meta.generation = 2;
    rb.status.scheduler_observed_generation = 2;
    rb.spec.clusters = targets(previous);
    rb.status.applied_placement = rb.spec.placement.clone();
    rb
}

/// [`settled`] on `previous`, then `cluster` evicted by the taint manager (with its task).
fn evicted(rb: ResourceBinding, previous: &[(&str, i32)], cluster: &str) -> ResourceBinding {
    let mut rb = settled(rb, previous);
    let replicas = rb
        .spec
        .clusters
        .iter()
        .find(|t| t.name == cluster)
        .map(|t| t.replicas);
    rb.spec.clusters.retain(|t| t.name != cluster);
    rb.spec
        .graceful_eviction_tasks
        .push(taint_task(cluster, replicas).try_into().unwrap());
    rb.meta.generation += 1;
    rb
}

#[tokio::test]
async fn simulate_table() {
    let (mut client, _stop) = client().await;
    let not_ready_exec = not_ready(TaintEffect::NoExecute);
    struct Case {
        name: &'static str,
        req: v1::SimulateRequest,
        check: Box<dyn Fn(&v1::SimulateResponse)>,
    }
    let two = || vec![cluster("member1"), cluster("member2")];
    let four = || {
        ["member1", "member2", "member3", "member5"]
            .into_iter()
            .map(cluster)
            .collect::<Vec<_>>()
    };
    let cases = vec![
        Case {
            name: "seed (b) first schedule: static weights 1:2 over 3 replicas",
            req: request(binding("nginx", divided_static_placement(), 3), two()),
            check: Box::new(|r| {
                assert!(r.needs_scheduling);
                assert_eq!(r.trigger, "PlacementChanged");
                assert_eq!(result(r), pairs(&[("member1", 1), ("member2", 2)]));
                assert_eq!(r.strategy, "StaticWeight");
                let cond = r.scheduled_condition.as_ref().unwrap();
                assert_eq!(cond.reason, "Success");
                assert!(r.filter_results.iter().all(|f| f.feasible));
                assert_eq!(r.scores.len(), 2);
            }),
        },
        Case {
            name: "seed (b) member1 evicted: everything to member2",
            req: request(
                evicted(
                    binding("nginx", divided_static_placement(), 3),
                    &[("member1", 1), ("member2", 2)],
                    "member1",
                ),
                vec![
                    tainted("member1", not_ready_exec.clone()),
                    cluster("member2"),
                ],
            ),
            check: Box::new(|r| {
                assert_eq!(r.trigger, "ReplicasChanged");
                assert_eq!(result(r), pairs(&[("member2", 3)]));
                let m1 = verdict(r, "member1");
                assert!(!m1.feasible);
                assert_eq!(m1.filter, "TaintToleration");
                assert_eq!(
                    m1.reason,
                    "cluster(s) had untolerated taint {cluster.karmada.io/not-ready:NoExecute}"
                );
                assert_eq!(r.selected_clusters, vec!["member2".to_owned()]);
                let score = &r.scores[0];
                assert_eq!((score.cluster.as_str(), score.score), ("member2", 100));
            }),
        },
        Case {
            name: "seed (a) Duplicated spread 2..2, member2 evicted: member1 kept + member3",
            req: request(
                evicted(
                    binding("nginx", duplicated_spread_placement(), 2),
                    &[("member1", 2), ("member2", 2)],
                    "member2",
                ),
                {
                    let mut c = four();
                    c[1] = tainted("member2", not_ready_exec.clone());
                    c
                },
            ),
            check: Box::new(|r| {
                assert_eq!(r.trigger, "NonWorkloadOrDuplicated");
                assert_eq!(result(r), pairs(&[("member1", 2), ("member3", 2)]));
                assert_eq!(r.strategy, "Duplicated");
                assert_eq!(
                    r.selected_clusters,
                    vec!["member1".to_owned(), "member3".to_owned()]
                );
            }),
        },
        Case {
            name: "an untolerated NoSchedule taint keeps a new cluster out; a toleration lets it in",
            req: request(
                binding("web", divided_static_placement(), 3),
                vec![
                    cluster("member1"),
                    tainted(
                        "member2",
                        Taint {
                            value: "true".into(),
                            ..Taint::new("dedicated", TaintEffect::NoSchedule, None)
                        },
                    ),
                ],
            ),
            check: Box::new(|r| {
                let m2 = verdict(r, "member2");
                assert_eq!(m2.filter, "TaintToleration");
                assert_eq!(
                    m2.reason,
                    "cluster(s) had untolerated taint {dedicated=true:NoSchedule}"
                );
                assert_eq!(result(r), pairs(&[("member1", 3)]));
            }),
        },
        Case {
            name: "tolerated taint",
            req: request(
                binding(
                    "web",
                    Placement {
                        cluster_tolerations: vec![Toleration {
                            key: "dedicated".into(),
                            operator: TolerationOperator::Exists,
                            ..Default::default()
                        }],
                        ..divided_static_placement()
                    },
                    3,
                ),
                vec![
                    cluster("member1"),
                    tainted(
                        "member2",
                        Taint::new("dedicated", TaintEffect::NoSchedule, None),
                    ),
                ],
            ),
            check: Box::new(|r| {
                assert!(verdict(r, "member2").feasible);
                assert_eq!(result(r), pairs(&[("member1", 1), ("member2", 2)]));
            }),
        },
        Case {
            name: "SC-3.7 settled: no scheduling, the result stays",
            req: request(
                settled(
                    binding("nginx", divided_static_placement(), 3),
                    &[("member1", 1), ("member2", 2)],
                ),
                two(),
            ),
            check: Box::new(|r| {
                assert!(!r.needs_scheduling);
                assert_eq!(r.trigger, "");
                assert_eq!(result(r), pairs(&[("member1", 1), ("member2", 2)]));
                assert!(r.scheduled_condition.is_none());
                assert!(r.reasons.iter().any(|l| l.starts_with("SC-3.7")));
                assert_eq!(r.filter_results.len(), 2, "explained anyway");
            }),
        },
        Case {
            name: "SC-4.3 FitError: empty result, NoClusterFit",
            req: request(
                binding(
                    "only9",
                    Placement {
                        cluster_affinity: Some(ClusterAffinity {
                            cluster_names: vec!["member9".into()],
                            ..Default::default()
                        }),
                        ..divided_static_placement()
                    },
                    3,
                ),
                two(),
            ),
            check: Box::new(|r| {
                assert!(r.clusters.is_empty());
                let cond = r.scheduled_condition.as_ref().unwrap();
                assert_eq!(cond.reason, "NoClusterFit");
                assert_eq!(
                    cond.message,
                    "0/2 clusters are available: 2 cluster(s) did not match the placement cluster affinity constraint."
                );
                assert_eq!(verdict(r, "member1").filter, "ClusterAffinity");
            }),
        },
    ];
    for case in cases {
        let resp = client
            .simulate(case.req)
            .await
            .unwrap_or_else(|e| panic!("{}: {e}", case.name))
            .into_inner();
        eprintln!("case: {}", case.name);
        (case.check)(&resp);
    }
}

#[tokio::test]
async fn simulate_force_runs_the_pipeline_on_a_settled_binding() {
    let (mut client, _stop) = client().await;
    let rb = settled(
        binding("nginx", divided_static_placement(), 3),
        &[("member1", 1), ("member2", 2)],
    );
    let mut req = request(rb, vec![cluster("member1"), cluster("member2")]);
    req.force = true;
    let resp = client.simulate(req).await.unwrap().into_inner();
    assert!(!resp.needs_scheduling, "no trigger fired");
    assert_eq!(result(&resp), pairs(&[("member1", 1), ("member2", 2)]));
    assert_eq!(resp.mode, "Steady");
}

#[tokio::test]
async fn bad_simulate_input_is_invalid_argument_with_field_paths() {
    let (mut client, _stop) = client().await;
    let good = || {
        request(
            binding("nginx", divided_static_placement(), 3),
            vec![cluster("member1")],
        )
    };
    let cases: Vec<(&str, v1::SimulateRequest, Vec<&str>)> = vec![
        (
            "no binding",
            v1::SimulateRequest::default(),
            vec!["binding"],
        ),
        (
            "negative replicas",
            {
                let mut r = good();
                r.binding.as_mut().unwrap().spec.as_mut().unwrap().replicas = -1;
                r
            },
            vec!["binding.spec.replicas"],
        ),
        (
            "no placement",
            {
                let mut r = good();
                r.binding.as_mut().unwrap().spec.as_mut().unwrap().placement = None;
                r
            },
            vec!["binding.spec.placement"],
        ),
        (
            "unset taint effect",
            {
                let mut r = good();
                r.clusters[0].spec.as_mut().unwrap().taints.push(v1::Taint {
                    key: "k".into(),
                    ..Default::default()
                });
                r
            },
            vec!["clusters[0].spec.taints[0].effect"],
        ),
        (
            "duplicate cluster and negative capacity",
            {
                let mut r = good();
                let mut dup = r.clusters[0].clone();
                dup.status
                    .get_or_insert_with(Default::default)
                    .resource_summary = Some(v1::ResourceSummary {
                    allocatable_replicas: Some(-3),
                    ..Default::default()
                });
                r.clusters.push(dup);
                r
            },
            vec![
                "clusters[1].status.resourceSummary.allocatableReplicas",
                "clusters[1].metadata.name",
            ],
        ),
        (
            "bad time",
            {
                let mut r = good();
                r.now = Some(prost_types::Timestamp {
                    seconds: 0,
                    nanos: -1,
                });
                r
            },
            vec!["now"],
        ),
    ];
    for (name, req, fields) in cases {
        let status = client.simulate(req).await.expect_err(name);
        assert_eq!(status.code(), Code::InvalidArgument, "{name}: {status:?}");
        let bad = status
            .get_details_bad_request()
            .unwrap_or_else(|| panic!("{name}: no BadRequest details"));
        let got: Vec<&str> = bad
            .field_violations
            .iter()
            .map(|v| v.field.as_str())
            .collect();
        for f in fields {
            assert!(got.contains(&f), "{name}: want {f} in {got:?}");
            assert!(status.message().contains(f), "{name}: {}", status.message());
        }
    }
}

/// The whole service on a MemStore: health turns SERVING once the caches synced, Simulate
/// answers, and the controller (leader-elected on the same store) schedules a binding.
#[tokio::test]
async fn the_service_serves_and_schedules() {
    let store: StoreRef = Arc::new(MemStore::new());
    let typed = Typed::new(store.clone());
    create_cluster(&typed, cluster("member1")).await;
    create_cluster(&typed, cluster("member2")).await;
    let config = Config {
        lease_ttl: Duration::from_secs(2),
        ..Config::default()
    };
    let (shutdown, service, url) = spawn_scheduler(store.clone(), config, true).await;
    wait_serving(&url, "flotilla.v1.Scheduler", Duration::from_secs(10)).await;
    let channel = Channel::from_shared(url).unwrap().connect().await.unwrap();

    let mut client = SchedulerClient::new(channel);
    let resp = client
        .simulate(request(
            binding("nginx", divided_static_placement(), 3),
            vec![cluster("member1"), cluster("member2")],
        ))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(result(&resp), pairs(&[("member1", 1), ("member2", 2)]));

    let key = create_binding_key(&typed, binding("nginx", divided_static_placement(), 3)).await;
    let rb = wait_binding(&typed, &key, "scheduled by the leader", |rb| {
        !rb.spec.clusters.is_empty()
    })
    .await;
    assert_eq!(rb.spec.clusters, targets(&[("member1", 1), ("member2", 2)]));
    let (leaders, _) = store.list("leases/scheduler/", 0).await.unwrap();
    assert_eq!(leaders.len(), 1, "one candidate, leading");

    stop_task(
        &shutdown,
        Duration::from_secs(10),
        service,
        "stops on shutdown",
    )
    .await;
}
