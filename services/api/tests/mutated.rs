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
use flotilla_proto::v1::{self, api_client::ApiClient};
use flotilla_store::{MemStore, StoreRef};
use proptest::prelude::*;
use proptest::test_runner::{RngAlgorithm, TestRng, TestRunner};
use prost::Message;
use prost_reflect::{
    DescriptorPool, DynamicMessage, FieldDescriptor, Kind, MapKey, ReflectMessage, Value,
};
use rand::{Rng, SeedableRng};
use tonic::Code;
use tonic::transport::Channel;

/// One byte-level mutation: (kind, position, byte).
type Mutation = (u8, usize, u8);

/// Applies `mutations` to `bytes`.
fn mutate(mut bytes: Vec<u8>, mutations: &[Mutation]) -> Vec<u8> {
    for &(kind, at, byte) in mutations {
        let len = bytes.len().max(1);
        let at = at % len;
        match kind % 5 {
            0 if !bytes.is_empty() => bytes[at] ^= byte | 1,
            1 => bytes.truncate(at),
            2 => bytes.insert(at.min(bytes.len()), byte),
            3 if !bytes.is_empty() => {
                bytes.remove(at);
            }
            _ => {
                // repeat a slice: a field given twice, a list grown
                let end = (at + usize::from(byte % 16) + 1).min(bytes.len());
                let slice = bytes[at.min(end)..end].to_vec();
                bytes.splice(end..end, slice);
            }
        }
    }
    bytes
}

/// Odd strings: empty, blank, huge, non-ASCII, path-like, control characters, upper case.
const STRINGS: &[&str] = &[
    "",
    " ",
    "UPPER_case",
    "名前",
    "../../etc/passwd",
    "a\u{0}b",
    "-leading-dash",
    "x.y/z:w",
    "key=value,other!=x",
    "💥",
];

/// A random value of `kind` (one element, for a list or map value): the kind's default,
/// then set through the typed accessors.
fn random_value(kind: &Kind, rng: &mut impl Rng) -> Value {
    let mut value = Value::default_value(kind);
    let pick = |rng: &mut dyn rand::RngCore, n: usize| rng.random_range(0..n);
    if let Some(s) = value.as_string_mut() {
        *s = random_string(rng);
    } else if let Some(b) = value.as_bytes_mut() {
        *b = (0..rng.random_range(0..300))
            .map(|_| rng.random::<u8>())
            .collect::<Vec<u8>>()
            .into();
    } else if let Some(b) = value.as_bool_mut() {
        *b = rng.random();
    } else if let Some(n) = value.as_i32_mut() {
        *n = [0, -1, 1, i32::MAX, i32::MIN, rng.random()][pick(rng, 6)];
    } else if let Some(n) = value.as_i64_mut() {
        *n = [0, -1, 1, i64::MAX, i64::MIN, rng.random()][pick(rng, 6)];
    } else if let Some(n) = value.as_u32_mut() {
        *n = [0, 1, u32::MAX, rng.random()][pick(rng, 4)];
    } else if let Some(n) = value.as_u64_mut() {
        *n = [0, 1, u64::MAX, rng.random()][pick(rng, 4)];
    } else if let Some(x) = value.as_f32_mut() {
        *x = [0.0, -1.0, f32::NAN, f32::INFINITY, 1e38][pick(rng, 5)];
    } else if let Some(x) = value.as_f64_mut() {
        *x = [0.0, -1.0, f64::NAN, f64::INFINITY, 1e308][pick(rng, 5)];
    } else if let Some(n) = value.as_enum_number_mut() {
        *n = [0, 1, 2, 99, -1][pick(rng, 5)];
    }
    value
}

/// A random string: an odd one, a random ASCII one, or one far too long.
fn random_string(rng: &mut impl Rng) -> String {
    match rng.random_range(0..4) {
        0 => "a".repeat(rng.random_range(64..70_000)),
        1 => (0..rng.random_range(1..40))
            .map(|_| char::from(rng.random_range(32u8..127)))
            .collect(),
        _ => STRINGS[rng.random_range(0..STRINGS.len())].to_owned(),
    }
}

/// A map key of `kind`.
fn random_key(kind: &Kind, rng: &mut impl Rng) -> MapKey {
    let mut key = MapKey::default_value(kind);
    if let Some(s) = key.as_string_mut() {
        *s = random_string(rng);
    } else if let Some(b) = key.as_bool_mut() {
        *b = rng.random();
    } else if let Some(n) = key.as_i32_mut() {
        *n = rng.random();
    } else if let Some(n) = key.as_i64_mut() {
        *n = rng.random();
    }
    key
}

/// Changes one field somewhere in `msg` (descending into set messages at random).
fn mutate_field(msg: &mut DynamicMessage, rng: &mut impl Rng, depth: usize) {
    let fields: Vec<FieldDescriptor> = msg.descriptor().fields().collect();
    if fields.is_empty() {
        return;
    }
    let field = fields[rng.random_range(0..fields.len())].clone();
    let kind = field.kind();
    // descend into a message that is there
    if depth < 8 && rng.random_bool(0.6) && msg.has_field(&field) {
        let pick = rng.random_range(0..usize::MAX);
        let value: &mut Value = msg.get_field_mut(&field);
        let inner: Option<&mut DynamicMessage> = match value {
            Value::Message(inner) => Some(inner),
            Value::List(items) if !items.is_empty() => {
                let i = pick % items.len();
                match &mut items[i] {
                    Value::Message(inner) => Some(inner),
                    _ => None,
                }
            }
            _ => None,
        };
        if let Some(inner) = inner {
            return mutate_field(inner, rng, depth + 1);
        }
    }
    if field.is_map() {
        let Kind::Message(entry) = &kind else { return };
        let (k, v) = (
            entry.map_entry_key_field().kind(),
            entry.map_entry_value_field().kind(),
        );
        if let Value::Map(map) = msg.get_field_mut(&field) {
            for _ in 0..rng.random_range(1..4) {
                map.insert(random_key(&k, rng), random_value(&v, rng));
            }
        }
    } else if field.is_list() {
        if let Value::List(items) = msg.get_field_mut(&field) {
            match rng.random_range(0..3) {
                0 => items.clear(),
                1 => {
                    let n = rng.random_range(1..300);
                    items.extend((0..n).map(|_| random_value(&kind, rng)));
                }
                _ => items.push(random_value(&kind, rng)),
            }
        }
    } else if matches!(kind, Kind::Message(_)) && rng.random_bool(0.5) {
        msg.clear_field(&field);
    } else {
        msg.set_field(&field, random_value(&kind, rng));
    }
}

/// The codes a bad request may get: a clear answer about it, never a server fault.
fn clear(code: Code) -> bool {
    matches!(
        code,
        Code::Ok
            | Code::InvalidArgument
            | Code::AlreadyExists
            | Code::NotFound
            | Code::FailedPrecondition
            | Code::Aborted
            | Code::OutOfRange
            | Code::ResourceExhausted
    )
}

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

#[test]
fn mutated_requests_get_clear_answers() {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let store: StoreRef = Arc::new(MemStore::new());
    let api = rt.block_on(testing::serve(store, testing::config()));
    let client: ApiClient<Channel> = rt.block_on(api.client());

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
