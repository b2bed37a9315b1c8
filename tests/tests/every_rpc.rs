//! Every public RPC's admission, across real processes on etcd: each method of each
//! Flotilla service in the compiled descriptors (the member simulator's control service, a
//! test double, aside) gets random requests built field by field from its descriptor, and
//! byte-mutated copies of them that still decode. Every answer must be a clear code
//! (INVALID_ARGUMENT for bad input, or a conflict or not-found), never INTERNAL, UNKNOWN or
//! a hang; afterwards every service still serves and the history of the stack's keys holds
//! the fault suite's invariants.
//!
//! A fixed seed and 12 cases per method in CI; `FLOTILLA_PROPTEST_CASES=N` runs more. A
//! failure names the method and the case, which the same seed replays.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeMap;
use std::time::Duration;

use flotilla_proto::fuzz::{Mutation, RawCodec, clear, mutate, mutate_field};
use flotilla_tests::{EtcdServer, Stack, Timers, serving};
use prost_reflect::{DescriptorPool, DynamicMessage, MethodDescriptor};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use tonic::transport::Channel;

/// The stack's process serving `service` (a full gRPC service name), from the services'
/// registry.
fn process_of(service: &str) -> Option<&'static str> {
    flotilla_suite::Service::ALL
        .into_iter()
        .find(|s| s.grpc_service() == service)
        .map(flotilla_suite::Service::name)
}

/// Sends `body` to `method` and returns the status of a refusal (`None` when it was answered,
/// or a stream opened and yielded a message or nothing within a moment).
async fn call(
    channel: &Channel,
    method: &MethodDescriptor,
    body: Vec<u8>,
) -> Option<tonic::Status> {
    let mut grpc = tonic::client::Grpc::new(channel.clone());
    grpc.ready().await.expect("the channel is ready");
    let path = format!("/{}/{}", method.parent_service().full_name(), method.name())
        .parse()
        .unwrap();
    let request = tonic::Request::new(body);
    if method.is_server_streaming() {
        match grpc.server_streaming(request, path, RawCodec).await {
            Err(status) => Some(status),
            Ok(response) => {
                let mut stream = response.into_inner();
                match tokio::time::timeout(Duration::from_millis(200), stream.message()).await {
                    Ok(Err(status)) => Some(status),
                    _ => None,
                }
            }
        }
    } else {
        grpc.unary(request, path, RawCodec).await.err()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_rpc_of_every_service_answers_bad_input_clearly() {
    let (stack, recorder) = Stack::start_recorded(EtcdServer::start().await, Timers::fast()).await;
    let pool = DescriptorPool::decode(flotilla_proto::FILE_DESCRIPTOR_SET).unwrap();
    let cases: usize = std::env::var("FLOTILLA_PROPTEST_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(12);
    let mut rng = StdRng::seed_from_u64(0x0f10_7111);
    let mut sent: BTreeMap<String, usize> = BTreeMap::new();
    let mut refused = 0usize;
    for service in pool.services() {
        let Some(process) = process_of(service.full_name()) else {
            assert_eq!(
                service.name(),
                "MemberSim",
                "a service without a process here"
            );
            continue;
        };
        let addr = &stack.addrs[process];
        let channel = tonic::transport::Endpoint::from_shared(format!("http://{addr}"))
            .unwrap()
            .timeout(Duration::from_secs(15))
            .connect()
            .await
            .unwrap();
        for method in service.methods() {
            let name = method.full_name().to_owned();
            for case in 0..cases {
                let mut message = DynamicMessage::new(method.input());
                for _ in 0..rng.random_range(1..8) {
                    mutate_field(&mut message, &mut rng, 0);
                }
                let mut body = prost::Message::encode_to_vec(&message);
                if case % 2 == 1 {
                    let mutations: Vec<Mutation> = (0..rng.random_range(1..4))
                        .map(|_| (rng.random(), rng.random_range(0..4096), rng.random()))
                        .collect();
                    let mutated = mutate(body.clone(), &mutations);
                    // a body that is not protobuf gets tonic's codec error before Flotilla
                    // runs (docs/design.md §9); only what still decodes is admission's
                    if DynamicMessage::decode(method.input(), mutated.as_slice()).is_ok() {
                        body = mutated;
                    }
                }
                *sent.entry(name.clone()).or_default() += 1;
                if let Some(status) = call(&channel, &method, body).await {
                    refused += 1;
                    assert!(
                        clear(status.code()),
                        "{name} case {case}: answered {:?}: {}\nrequest: {}",
                        status.code(),
                        status.message(),
                        format!("{message:?}").chars().take(800).collect::<String>()
                    );
                }
            }
        }
    }
    let methods = sent.len();
    assert!(
        methods >= 66,
        "every method was called: {methods} of them: {sent:?}"
    );
    assert!(
        refused > 0,
        "no request was refused: the generator makes no bad input"
    );
    for (process, addr) in &stack.addrs {
        assert!(serving(addr).await, "{process} stopped serving");
    }
    println!(
        "every rpc: {methods} methods, {} requests, {refused} refused clearly",
        sent.values().sum::<usize>()
    );
    let faults = ["random and mutated requests to every method".to_owned()];
    stack
        .verdict(
            recorder,
            "every rpc",
            0,
            &faults,
            &flotilla_tests::history::Expect::default(),
        )
        .await;
}
