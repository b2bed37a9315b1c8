//! The api against a real etcd (under a key prefix of its own): CRUD with optimistic
//! concurrency, rejected input that writes nothing, a watch, and the detector binding the
//! seed workload.

#![allow(clippy::unwrap_used, clippy::expect_used)] // tests

use std::sync::Arc;
use std::time::Duration;

use flotilla_api::testing::{self, cluster, labelled, nginx_workload, seed_policy};
use flotilla_proto::Resource;
use flotilla_proto::v1::{self, WatchEventType};
use flotilla_store::StoreRef;
use flotilla_store::testing::EtcdServer;
use tonic::Code;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn api_and_detector_on_real_etcd() {
    let etcd = EtcdServer::start().await;
    let store: StoreRef = Arc::new(etcd.store("api").await);
    let api = testing::serve(store.clone(), testing::config()).await;
    let mut client = api.client().await;

    let mut watch = testing::watch_clusters(&mut client).await;
    let bookmark = testing::next_message(&mut watch).await;
    assert_eq!(bookmark.r#type, WatchEventType::Bookmark as i32);

    let c = client
        .create_cluster(v1::CreateClusterRequest {
            cluster: Some(cluster("member1", "http://127.0.0.1:1")),
        })
        .await
        .unwrap()
        .into_inner();
    let added = testing::next_message(&mut watch).await;
    assert_eq!(added.r#type, WatchEventType::Added as i32);
    assert_eq!(added.resource_version, c.resource_version());

    let first = labelled(&c, "a", "1");
    client
        .update_cluster(v1::UpdateClusterRequest {
            cluster: Some(first),
        })
        .await
        .unwrap();
    let stale = labelled(&c, "b", "2");
    let err = client
        .update_cluster(v1::UpdateClusterRequest {
            cluster: Some(stale),
        })
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::Aborted);

    let before = store.list("clusters/", 0).await.unwrap().0;
    let mut bad = cluster(&"x".repeat(49), "http://127.0.0.1:1");
    bad.spec.as_mut().unwrap().taints.push(v1::Taint {
        key: "example.com/soft".into(),
        effect: v1::TaintEffect::PreferNoSchedule as i32,
        ..Default::default()
    });
    let err = client
        .create_cluster(v1::CreateClusterRequest { cluster: Some(bad) })
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::InvalidArgument);
    assert!(
        err.message().contains("metadata.name") && err.message().contains("spec.taints[0].effect")
    );
    assert_eq!(
        store.list("clusters/", 0).await.unwrap().0,
        before,
        "nothing written"
    );

    client
        .create_propagation_policy(v1::CreatePropagationPolicyRequest {
            propagation_policy: Some(seed_policy()),
        })
        .await
        .unwrap();
    client
        .create_workload(v1::CreateWorkloadRequest {
            workload: Some(nginx_workload()),
        })
        .await
        .unwrap();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    let binding = loop {
        if let Ok(b) = client
            .get_resource_binding(v1::GetResourceBindingRequest {
                namespace: "default".into(),
                name: "nginx-deployment".into(),
            })
            .await
        {
            break b.into_inner();
        }
        assert!(tokio::time::Instant::now() < deadline, "no binding in 20 s");
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    let spec = binding.spec.unwrap();
    assert_eq!(spec.replicas, 3);
    assert_eq!(
        testing::affinity_names(spec.placement),
        ["member1", "member2"]
    );
    api.stop().await;
}

/// Detector throughput on real etcd: N workloads exist, then one ClusterPropagationPolicy
/// claims them all; prints how long until every binding exists (not asserted: timings are
/// never asserted in tests). `cargo test -p flotilla-api --test integration etcd:: -- --ignored --nocapture`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "measurement; run by hand"]
async fn measure_detector_throughput_on_etcd() {
    use flotilla_store::typed::Typed;
    const N: usize = 2000;
    let etcd = EtcdServer::start().await;
    let store: StoreRef = Arc::new(etcd.store("api-bench").await);
    let admission = testing::config().admission;
    let typed = Typed::new(store.clone());
    let mut creates = Vec::new();
    for i in 0..N {
        let mut w = nginx_workload();
        w.manifest = w
            .manifest
            .replace("\"name\": \"nginx\"", &format!("\"name\": \"nginx-{i}\""));
        creates.push(admission.workload(Some(w)).unwrap());
    }
    let chunks: Vec<Vec<v1::Workload>> = creates.chunks(N / 16).map(<[_]>::to_vec).collect();
    let mut tasks = Vec::new();
    for chunk in chunks {
        let typed = typed.clone();
        tasks.push(tokio::spawn(async move {
            for w in chunk {
                typed.create(w, None).await.unwrap();
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    let workers: usize = std::env::var("DETECTOR_WORKERS")
        .ok()
        .and_then(|w| w.parse().ok())
        .unwrap_or(128);
    let mut config = testing::config();
    config.detector.workers = workers;
    let api = testing::serve(store.clone(), config).await;
    let mut client = api.client().await;
    let start = std::time::Instant::now();
    client
        .create_cluster_propagation_policy(v1::CreateClusterPropagationPolicyRequest {
            cluster_propagation_policy: Some(v1::ClusterPropagationPolicy {
                metadata: Some(v1::ObjectMeta {
                    name: "all".into(),
                    ..Default::default()
                }),
                spec: Some(v1::PropagationSpec {
                    resource_selectors: vec![testing::deployment_selector("")],
                    ..Default::default()
                }),
            }),
        })
        .await
        .unwrap();
    loop {
        let (kvs, _) = store.list("bindings/", 0).await.unwrap();
        if kvs.len() == N {
            break;
        }
        assert!(
            start.elapsed() < Duration::from_secs(120),
            "{} of {N}",
            kvs.len()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let elapsed = start.elapsed();
    println!(
        "detector: {N} bindings created in {elapsed:?} ({:.0} bindings/s, {workers} workers)",
        N as f64 / elapsed.as_secs_f64()
    );
    api.stop().await;
}
