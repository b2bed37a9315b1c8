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

/// A Deployment as YAML: `name` (in `namespace`, if any) of `replicas` pods labelled
/// `app: <name>`, each one container `container` of `image`.
pub fn deployment_yaml(
    name: &str,
    namespace: Option<&str>,
    replicas: u32,
    container: &str,
    image: &str,
) -> String {
    let namespace = namespace.map(|ns| format!(", namespace: {ns}"));
    format!(
        "apiVersion: apps/v1
kind: Deployment
metadata: {{name: {name}{}}}
spec:
  replicas: {replicas}
  selector: {{matchLabels: {{app: {name}}}}}
  template:
    metadata: {{labels: {{app: {name}}}}}
    spec:
      containers: [{{name: {container}, image: {image}}}]
",
        namespace.unwrap_or_default()
    )
}

/// A PropagationPolicy as YAML: `name` in namespace `default`, selecting each
/// `[apiVersion, kind, name]` of `selectors`, placed on `clusters`, and with
/// `replicaScheduling` the flow mapping `scheduling` (none if empty, e.g.
/// `"{replicaSchedulingType: Duplicated}"`).
pub fn policy_yaml(
    name: &str,
    selectors: &[[&str; 3]],
    clusters: &[&str],
    scheduling: &str,
) -> String {
    let selectors: String = selectors
        .iter()
        .map(|[api_version, kind, name]| {
            format!("  - {{apiVersion: {api_version}, kind: {kind}, name: {name}}}\n")
        })
        .collect();
    let scheduling = if scheduling.is_empty() {
        String::new()
    } else {
        format!("    replicaScheduling: {scheduling}\n")
    };
    format!(
        "apiVersion: policy.karmada.io/v1alpha1
kind: PropagationPolicy
metadata: {{name: {name}, namespace: default}}
spec:
  resourceSelectors:
{selectors}  placement:
    clusterAffinity: {{clusterNames: [{}]}}
{scheduling}",
        clusters.join(", ")
    )
}

/// A `fieldOverrider` (the overriders' YAML) setting `/log/level` of the YAML document in
/// `/data/config.yaml` to `debug`, each line indented by `indent` spaces.
pub fn log_level_field_overrider(indent: usize) -> String {
    [
        "fieldOverrider:",
        "  - fieldPath: /data/config.yaml",
        "    yaml:",
        "      - subPath: /log/level",
        "        operator: replace",
        "        value: debug",
    ]
    .iter()
    .map(|line| format!("{:indent$}{line}\n", ""))
    .collect()
}
