//! Test support for the workspace's tests (feature `test-util`).

use proptest::test_runner::{Config, RngAlgorithm};

/// The settings every property test runs with: `default_cases` cases unless
/// `FLOTILLA_PROPTEST_CASES=N` asks for more (or fewer), the ChaCha generator, and no
/// failure files written into the source tree.
pub fn proptest_config(default_cases: u32) -> Config {
    Config {
        cases: std::env::var("FLOTILLA_PROPTEST_CASES")
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or(default_cases),
        failure_persistence: None,
        rng_algorithm: RngAlgorithm::ChaCha,
        ..Config::default()
    }
}
