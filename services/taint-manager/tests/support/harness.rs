//! Builders and a harness shared by the taint-manager tests (included with `#[path]`): the
//! binding-controller support of `flotilla_runtime::testing`, on the taint manager.
#![allow(dead_code, unused_imports)]

use std::time::Duration;

pub use flotilla_runtime::testing::bindings::*;
pub use flotilla_runtime::testing::{Harness, Interpose, env_or, eventually};
use flotilla_taint_manager::Config;
pub use flotilla_taint_manager::TaintManager;

pub fn test_config() -> Config {
    let mut c = Config::new("test");
    c.lease_ttl = Duration::from_secs(5);
    c
}
