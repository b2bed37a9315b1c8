//! The integration tests of this crate, linked into one test binary (one binary per crate
//! instead of one per file keeps the build's disk use and link time down).

mod application_failover;
mod availability;
mod bad_input;
mod compose;
mod conflict_resolution;
mod credentials;
mod dependencies;
mod docs_ids;
mod every_rpc;
mod failback;
mod faults;
mod grpcurl;
mod history_checker;
mod interpreter;
mod kube_api;
mod kubectl;
mod least_privilege;
mod no_replacement;
mod observability;
mod overrides;
mod policy_lifecycle;
mod pull_cluster;
mod purge_modes;
mod real_members;
mod recovery_before_toleration;
mod seed_divided;
mod seed_duplicated;
mod sharding;
