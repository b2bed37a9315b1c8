//! `flotilla-proto`: Flotilla's gRPC contract (package `flotilla.v1`) and the conversions
//! between its wire types and `flotilla-core`'s domain types.
//!
//! ```text
//!   proto/flotilla/v1/*.proto ──protox + tonic-prost-build (build.rs)──► v1::* messages,
//!                                                                       clients, servers
//!                                                                       FILE_DESCRIPTOR_SET
//!   v1::Cluster ◄──From── flotilla_core::types::Cluster
//!   v1::Cluster ──TryFrom (ConvertError{field: "spec.taints[2].effect", ..})──► core
//!   Resource: KIND + metadata access, used by the store's typed layer
//! ```
//!
//! Controllers decide on core types; everything that crosses a process boundary or is stored
//! is a `v1` message. Convert at the edge with [`From`] (core → wire, infallible) and
//! [`TryFrom`] (wire → core, rejecting unknown or unspecified enums and malformed
//! timestamps); see [`convert`].

pub mod convert;
#[cfg(feature = "test-util")]
pub mod fuzz;
pub mod resource;

pub use convert::ConvertError;
pub use resource::Resource;

/// Generated messages, enums, clients (`*_client`) and servers (`*_server`) of package
/// `flotilla.v1`. The documentation of each item is the comment in the `.proto` file.
pub mod v1 {
    #![allow(missing_docs, clippy::all, clippy::unwrap_used)]
    include!(concat!(env!("OUT_DIR"), "/flotilla.v1.rs"));
}

/// The encoded `google.protobuf.FileDescriptorSet` of every `flotilla.v1` file and its
/// imports (`google/protobuf/timestamp.proto`, `duration.proto`), with source comments.
///
/// Register it with `tonic_reflection` (both `build_v1()` and `build_v1alpha()`, see
/// docs/design.md §8) so that `grpcurl list` and `describe` work on every service.
pub const FILE_DESCRIPTOR_SET: &[u8] =
    include_bytes!(concat!(env!("OUT_DIR"), "/flotilla_v1_descriptor.bin"));
