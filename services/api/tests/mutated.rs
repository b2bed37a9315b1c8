//! Mutated requests against the api's writing RPCs (and a list), over real gRPC (the api on
//! the in-memory store). Valid requests are mutated two ways: field by field through their
//! descriptors (any field at any depth set to an empty, huge, non-ASCII, negative,
//! out-of-range or random value, lists grown, maps filled, messages dropped), and byte by byte
//! (flipped, cut, inserted, dropped, repeated; what still decodes is sent). The api must
//! answer every one with a clear code (INVALID_ARGUMENT for bad input, or a conflict or
//! not-found), never INTERNAL or UNKNOWN, must not panic, and must keep serving.
//!
//! A fixed seed and 48 cases per RPC in CI; `FLOTILLA_PROPTEST_CASES=N` runs more.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;

use flotilla_api::testing::{self, cluster, nginx_workload, seed_policy};
use flotilla_proto::fuzz::{clear, mutate, mutate_field};
use flotilla_proto::v1::{self, api_client::ApiClient};
use flotilla_store::{MemStore, StoreRef};
use proptest::prelude::*;
use proptest::test_runner::{RngAlgorithm, TestRng, TestRunner};
use prost::Message;
use prost_reflect::{DescriptorPool, DynamicMessage};
use rand::SeedableRng;
use tonic::Code;
use tonic::transport::Channel;

/// Runs mutated copies of `valid` (a `flotilla.v1.<name>Request`) through `call` on a
/// blocking runtime; returns how many were sent.
fn fuzz<R, F, Fut>(rt: &tokio::runtime::Runtime, name: &str, valid: R, call: F) -> usize
where
    R: Message + Default,
    F: Fn(R) -> Fut,
    Fut: std::future::Future<Output = Result<(), tonic::Status>>,
{
    let config = flotilla_core::testing::proptest_config(48);
    // a fixed seed per RPC: a failure is replayed by running the test again
    let mut seed = [0u8; 32];
    for (i, b) in name.bytes().enumerate() {
        seed[i % 32] ^= b;
    }
    let mut runner =
        TestRunner::new_with_rng(config, TestRng::from_seed(RngAlgorithm::ChaCha, &seed));
    let encoded = valid.encode_to_vec();
    let pool = DescriptorPool::decode(flotilla_proto::FILE_DESCRIPTOR_SET).unwrap();
    let descriptor = pool
        .get_message_by_name(&format!("flotilla.v1.{name}Request"))
        .unwrap_or_else(|| panic!("flotilla.v1.{name}Request"));
    let sent = std::cell::Cell::new(0usize);
    let strategy = (
        any::<u64>(),
        1usize..6,
        proptest::collection::vec(any::<(u8, usize, u8)>(), 1..4),
    );
    let result = runner.run(&strategy, |(seed, fields, mutations)| {
        // field by field
        let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
        let mut dynamic = DynamicMessage::decode(descriptor.clone(), encoded.as_slice()).unwrap();
        for _ in 0..fields {
            mutate_field(&mut dynamic, &mut rng, 0);
        }
        let request = R::decode(dynamic.encode_to_vec().as_slice()).unwrap();
        sent.set(sent.get() + 1);
        let request_text = format!("{dynamic:?}");
        if let Err(status) = rt.block_on(call(request)) {
            prop_assert!(
                clear(status.code()),
                "{name}: answered {status:?} to field seed {seed}: {}",
                request_text.chars().take(800).collect::<String>()
            );
        }
        // byte by byte: what still decodes
        let bytes = mutate(encoded.clone(), &mutations);
        if let Ok(request) = R::decode(bytes.as_slice()) {
            sent.set(sent.get() + 1);
            if let Err(status) = rt.block_on(call(request)) {
                prop_assert!(
                    clear(status.code()),
                    "{name}: answered {status:?} to {mutations:?}"
                );
            }
        }
        Ok(())
    });
    if let Err(e) = result {
        panic!("{name}: {e}");
    }
    sent.get()
}

/// A blocking runtime and the api on an in-memory store in it, with a client.
fn serve() -> (
    tokio::runtime::Runtime,
    StoreRef,
    testing::TestApi,
    ApiClient<Channel>,
) {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let store: StoreRef = Arc::new(MemStore::new());
    let api = rt.block_on(testing::serve(store.clone(), testing::config()));
    let client = rt.block_on(api.client());
    (rt, store, api, client)
}

#[test]
fn mutated_requests_get_clear_answers() {
    let (rt, _, api, client) = serve();

    let mut sent = Vec::new();
    sent.push(fuzz(
        &rt,
        "CreateCluster",
        v1::CreateClusterRequest {
            cluster: Some(cluster("c1", "http://127.0.0.1:1")),
        },
        |r| {
            let mut c = client.clone();
            async move { c.create_cluster(r).await.map(drop) }
        },
    ));
    sent.push(fuzz(
        &rt,
        "UpdateCluster",
        v1::UpdateClusterRequest {
            cluster: Some(cluster("c1", "http://127.0.0.1:2")),
        },
        |r| {
            let mut c = client.clone();
            async move { c.update_cluster(r).await.map(drop) }
        },
    ));
    sent.push(fuzz(
        &rt,
        "CreatePropagationPolicy",
        v1::CreatePropagationPolicyRequest {
            propagation_policy: Some(seed_policy()),
        },
        |r| {
            let mut c = client.clone();
            async move { c.create_propagation_policy(r).await.map(drop) }
        },
    ));
    sent.push(fuzz(
        &rt,
        "CreateWorkload",
        v1::CreateWorkloadRequest {
            workload: Some(nginx_workload()),
        },
        |r| {
            let mut c = client.clone();
            async move { c.create_workload(r).await.map(drop) }
        },
    ));
    sent.push(fuzz(
        &rt,
        "Apply",
        v1::ApplyRequest {
            objects: vec![
                v1::ApplyObject {
                    object: Some(v1::apply_object::Object::Workload(nginx_workload())),
                },
                v1::ApplyObject {
                    object: Some(v1::apply_object::Object::PropagationPolicy(seed_policy())),
                },
            ],
            dry_run: false,
            ..Default::default()
        },
        |r| {
            let mut c = client.clone();
            async move { c.apply(r).await.map(drop) }
        },
    ));
    sent.push(fuzz(
        &rt,
        "ListWorkloads",
        v1::ListWorkloadsRequest {
            namespace: "default".into(),
            label_selector: "app=nginx,tier!=db".into(),
            page_size: 10,
            ..Default::default()
        },
        |r| {
            let mut c = client.clone();
            async move { c.list_workloads(r).await.map(drop) }
        },
    ));
    // most mutations still decode: the api saw many of them
    assert!(
        sent.iter().all(|n| *n > 0),
        "every RPC got mutated requests: {sent:?}"
    );
    // and it still serves
    let mut c = client.clone();
    rt.block_on(c.list_clusters(v1::ListClustersRequest::default()))
        .expect("the api still answers");
    rt.block_on(api.stop());
}

/// Oversized and deeply nested inputs are refused early and clearly: a manifest nested past
/// the JSON reader's depth limit, a request over the gRPC size limit, and a huge label
/// selector. None reaches the store, and the api keeps serving.
#[test]
fn oversized_and_deeply_nested_inputs_are_refused_early() {
    let (rt, store, api, mut client) = serve();
    let deep = |open: &str, close: &str| {
        format!(
            r#"{{"apiVersion":"apps/v1","kind":"Deployment","metadata":{{"name":"deep","namespace":"default"}},"spec":{{"x":{}{}}}}}"#,
            open.repeat(50_000),
            close.repeat(50_000)
        )
    };
    for (what, manifest) in [
        ("nested lists", deep("[", "]")),
        ("nested objects", deep(r#"{"a":"#, "}")),
    ] {
        let status = rt
            .block_on(client.create_workload(v1::CreateWorkloadRequest {
                workload: Some(v1::Workload {
                    manifest,
                    ..Default::default()
                }),
            }))
            .expect_err(what);
        assert_eq!(status.code(), Code::InvalidArgument, "{what}: {status:?}");
        assert!(
            status.message().contains("recursion") || status.message().contains("nest"),
            "{what}: {}",
            status.message()
        );
        assert!(status.message().len() <= 2048, "{what}: message not cut");
    }
    // over the gRPC limit (1.5 MiB): refused by the server before decoding, with tonic's
    // OUT_OF_RANGE
    let status = rt
        .block_on(client.create_workload(v1::CreateWorkloadRequest {
            workload: Some(v1::Workload {
                manifest: "x".repeat(2 * 1024 * 1024),
                ..Default::default()
            }),
        }))
        .expect_err("2 MiB");
    assert_eq!(status.code(), Code::OutOfRange, "{status:?}");
    let status = rt
        .block_on(client.list_workloads(v1::ListWorkloadsRequest {
            namespace: "default".into(),
            label_selector: "a=b,".repeat(200_000),
            ..Default::default()
        }))
        .expect_err("huge selector");
    assert_eq!(status.code(), Code::InvalidArgument, "{status:?}");
    // a watch from the last revision there can be (it overflowed the next one's number)
    let status = rt
        .block_on(client.watch_clusters(v1::WatchClustersRequest {
            resource_version: i64::MAX,
            ..Default::default()
        }))
        .expect_err("a watch past every revision");
    assert_eq!(status.code(), Code::InvalidArgument, "{status:?}");
    assert!(status.message().contains("resourceVersion"), "{status:?}");
    // nothing was written, and the api still serves
    let (kvs, _) = rt.block_on(store.list("", 0)).unwrap();
    assert!(
        kvs.iter().all(|kv| !kv.key.contains("deep")),
        "a refused manifest reached the store"
    );
    rt.block_on(client.list_clusters(v1::ListClustersRequest::default()))
        .expect("the api still answers");
    rt.block_on(api.stop());
}
