//! The integration tests of this crate, linked into one test binary (one binary per crate
//! instead of one per file keeps the build's disk use and link time down).

mod bootstrap;
mod leader;
mod leader_etcd;
mod proxy;
mod security;
mod shards;
mod shards_etcd;
mod watch_support;
mod watcher;
mod watcher_etcd;
