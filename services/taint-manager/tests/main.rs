//! The integration tests of this crate, linked into one test binary (one binary per crate
//! instead of one per file keeps the build's disk use and link time down).

mod etcd;
mod eviction;
mod explain;
mod scale;
#[path = "support/harness.rs"]
mod support;
