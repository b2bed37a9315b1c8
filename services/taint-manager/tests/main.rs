//! The integration tests of this crate, linked into one test binary (one binary per crate
//! instead of one per file keeps the build's disk use and link time down).

// Test code unwraps and panics: one allowance for every module of this binary.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod etcd;
mod eviction;
mod explain;
mod scale;
#[path = "support/harness.rs"]
mod support;
