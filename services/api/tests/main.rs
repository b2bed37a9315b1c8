//! The integration tests of this crate, linked into one test binary (one binary per crate
//! instead of one per file keeps the build's disk use and link time down).

mod api;
mod etcd;
mod mutated;
