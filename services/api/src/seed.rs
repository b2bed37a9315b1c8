//! The seed objects of the demo (`flotilla up --demo`) and of the scenario tests: Karmada's
//! `samples/nginx` Deployment and a policy spreading it over member1 and member2.

use flotilla_proto::v1;

/// The seed Deployment: `default/nginx`, 3 replicas, 100m CPU and 128Mi per replica.
pub const NGINX_MANIFEST: &str = r#"{
  "apiVersion": "apps/v1",
  "kind": "Deployment",
  "metadata": {"name": "nginx", "namespace": "default", "labels": {"app": "nginx"}},
  "spec": {
    "replicas": 3,
    "selector": {"matchLabels": {"app": "nginx"}},
    "template": {
      "metadata": {"labels": {"app": "nginx"}},
      "spec": {"containers": [{"name": "nginx", "image": "nginx",
        "resources": {"requests": {"cpu": "100m", "memory": "128Mi"}}}]}
    }
  }
}"#;

/// The seed policy `default/nginx-propagation`: Deployment `nginx` to member1/member2,
/// Divided, static weights member1:1, member2:2.
pub fn seed_policy() -> v1::PropagationPolicy {
    weighted_deployments(
        "default",
        "nginx-propagation",
        "nginx",
        &[("member1", 1), ("member2", 2)],
    )
}

/// A PropagationPolicy `namespace/name` for the Deployment `deployment` (every Deployment of
/// the namespace when empty): Divided over the clusters of `weights` by their static weights.
pub fn weighted_deployments(
    namespace: &str,
    name: &str,
    deployment: &str,
    weights: &[(&str, i64)],
) -> v1::PropagationPolicy {
    let weight = |&(cluster, weight): &(&str, i64)| v1::StaticClusterWeight {
        target_cluster: Some(v1::ClusterAffinity {
            cluster_names: vec![cluster.into()],
            ..Default::default()
        }),
        weight,
    };
    v1::PropagationPolicy {
        metadata: object_meta(namespace, name),
        spec: Some(v1::PropagationSpec {
            resource_selectors: vec![deployment_selector(deployment)],
            placement: Some(v1::Placement {
                cluster_affinity: Some(v1::ClusterAffinity {
                    cluster_names: weights.iter().map(|(c, _)| (*c).into()).collect(),
                    ..Default::default()
                }),
                replica_scheduling: Some(v1::ReplicaSchedulingStrategy {
                    replica_scheduling_type: v1::ReplicaSchedulingType::Divided as i32,
                    replica_division_preference: v1::ReplicaDivisionPreference::Weighted as i32,
                    weight_preference: Some(v1::ClusterPreferences {
                        static_weight_list: weights.iter().map(weight).collect(),
                        dynamic_weight: 0,
                    }),
                }),
                ..Default::default()
            }),
            ..Default::default()
        }),
    }
}

/// The metadata of an object `namespace/name` (an empty namespace for a cluster-scoped one),
/// nothing else set.
pub fn object_meta(namespace: &str, name: &str) -> Option<v1::ObjectMeta> {
    Some(v1::ObjectMeta {
        name: name.into(),
        namespace: namespace.into(),
        ..Default::default()
    })
}

/// A selector of the Deployment `name` (every Deployment of the namespace when empty).
pub fn deployment_selector(name: &str) -> v1::ResourceSelector {
    v1::ResourceSelector {
        api_version: "apps/v1".into(),
        kind: "Deployment".into(),
        name: name.into(),
        ..Default::default()
    }
}
