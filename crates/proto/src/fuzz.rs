//! Bad-input generators for property tests of gRPC admission (feature `test-util`): requests
//! mutated field by field through their descriptors, and byte by byte, plus a codec that
//! sends raw bytes to any method so that every RPC can be reached without its generated
//! client. Used by the api's mutated-request test and the every-RPC scenario.

use bytes::{Buf, BufMut};
use prost_reflect::{DynamicMessage, FieldDescriptor, Kind, MapKey, ReflectMessage, Value};
use rand::Rng;
use tonic::Code;
use tonic::Status;
use tonic::codec::{Codec, DecodeBuf, Decoder, EncodeBuf, Encoder};

/// One byte-level mutation: (kind, position, byte).
pub type Mutation = (u8, usize, u8);

/// Applies `mutations` to `bytes`.
pub fn mutate(mut bytes: Vec<u8>, mutations: &[Mutation]) -> Vec<u8> {
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
pub const STRINGS: &[&str] = &[
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
pub fn random_value(kind: &Kind, rng: &mut impl Rng) -> Value {
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
pub fn random_string(rng: &mut impl Rng) -> String {
    match rng.random_range(0..4) {
        0 => "a".repeat(rng.random_range(64..70_000)),
        1 => (0..rng.random_range(1..40))
            .map(|_| char::from(rng.random_range(32u8..127)))
            .collect(),
        _ => STRINGS[rng.random_range(0..STRINGS.len())].to_owned(),
    }
}

/// A map key of `kind`.
pub fn random_key(kind: &Kind, rng: &mut impl Rng) -> MapKey {
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
pub fn mutate_field(msg: &mut DynamicMessage, rng: &mut impl Rng, depth: usize) {
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
pub fn clear(code: Code) -> bool {
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

/// A codec that sends and receives messages as raw bytes, for calling any method by path
/// (`tonic::client::Grpc::unary` / `server_streaming`).
#[derive(Clone, Copy, Debug, Default)]
pub struct RawCodec;

/// The raw codec's encoder and decoder.
#[derive(Clone, Copy, Debug, Default)]
pub struct Raw;

impl Codec for RawCodec {
    type Encode = Vec<u8>;
    type Decode = Vec<u8>;
    type Encoder = Raw;
    type Decoder = Raw;

    fn encoder(&mut self) -> Raw {
        Raw
    }

    fn decoder(&mut self) -> Raw {
        Raw
    }
}

impl Encoder for Raw {
    type Item = Vec<u8>;
    type Error = Status;

    fn encode(&mut self, item: Vec<u8>, dst: &mut EncodeBuf<'_>) -> Result<(), Status> {
        dst.put_slice(&item);
        Ok(())
    }
}

impl Decoder for Raw {
    type Item = Vec<u8>;
    type Error = Status;

    fn decode(&mut self, src: &mut DecodeBuf<'_>) -> Result<Option<Vec<u8>>, Status> {
        let bytes = src.copy_to_bytes(src.remaining());
        Ok(Some(bytes.to_vec()))
    }
}
