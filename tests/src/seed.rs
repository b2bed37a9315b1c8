//! Creating the seed objects: the nginx workload, its policy, clusters.

use flotilla_core::testing::deployment_yaml;
use flotilla_proto::v1;

use crate::*;

// ---------------------------------------------------------------------------------------
// Creating the seed objects
// ---------------------------------------------------------------------------------------

/// Creates the seed workload `default/nginx` (3 replicas) and `policy`.
pub async fn create_nginx(api: &ApiClient, policy: v1::PropagationPolicy) {
    api.clone()
        .create_workload(v1::CreateWorkloadRequest {
            workload: Some(flotilla_api::testing::nginx_workload()),
        })
        .await
        .expect("create workload");
    try_create_policy(api, policy).await.expect("create policy");
}

/// Creates a Pull Cluster `name` (region `eu`, label `env=test`) through the api.
pub async fn create_pull_cluster(api: &ApiClient, name: &str) {
    // The Push fixture without an endpoint, in Pull mode.
    let mut cluster = flotilla_api::testing::cluster(name, "");
    cluster
        .spec
        .as_mut()
        .expect("a fixture cluster has a spec")
        .sync_mode = v1::SyncMode::Pull as i32;
    create_cluster(api, cluster).await;
}

/// Creates `cluster` through the api (panics, naming it, if the api refuses).
pub async fn create_cluster(api: &ApiClient, cluster: v1::Cluster) {
    let name = cluster.metadata.clone().unwrap_or_default().name;
    try_create_cluster(api, cluster)
        .await
        .unwrap_or_else(|e| panic!("create cluster {name}: {e}"));
}

/// `pub async fn $name(api, object) -> Result<Item, Status>`: creates an object through the
/// api (the stored object or the api's error), for each `$name = $rpc($request { $field })
/// -> $item;` row.
macro_rules! try_create {
    ($($name:ident = $rpc:ident($request:ident { $field:ident }) -> $item:ident;)*) => {$(
        #[doc = concat!(
            "Creates a ",
            stringify!($item),
            " through the api: the stored one or the error."
        )]
        pub async fn $name(api: &ApiClient, object: v1::$item) -> Result<v1::$item, tonic::Status> {
            let request = v1::$request { $field: Some(object) };
            Ok(api.clone().$rpc(request).await?.into_inner())
        }
    )*};
}

try_create! {
    try_create_cluster = create_cluster(CreateClusterRequest { cluster }) -> Cluster;
    try_create_policy =
        create_propagation_policy(CreatePropagationPolicyRequest { propagation_policy })
        -> PropagationPolicy;
}

/// The seed policy (Deployment `default/nginx`) with another placement and failover
/// behaviour.
pub fn nginx_policy(
    placement: v1::Placement,
    failover: Option<v1::FailoverBehavior>,
) -> v1::PropagationPolicy {
    let mut policy = flotilla_api::testing::seed_policy();
    let spec = policy.spec.as_mut().expect("seed policy has a spec");
    spec.placement = Some(placement);
    spec.propagate_deps = failover.as_ref().is_some_and(|f| f.application.is_some());
    spec.failover = failover;
    policy
}

/// Replicas divided over member1 and member2 by `preference` (Aggregated or Weighted).
pub fn divided_over_members(preference: v1::ReplicaDivisionPreference) -> v1::Placement {
    v1::Placement {
        cluster_affinity: Some(cluster_names(&["member1", "member2"])),
        replica_scheduling: Some(v1::ReplicaSchedulingStrategy {
            replica_scheduling_type: v1::ReplicaSchedulingType::Divided as i32,
            replica_division_preference: preference as i32,
            ..Default::default()
        }),
        ..Default::default()
    }
}

/// A cluster affinity naming clusters.
pub fn cluster_names(names: &[&str]) -> v1::ClusterAffinity {
    v1::ClusterAffinity {
        cluster_names: names.iter().map(|n| n.to_string()).collect(),
        ..Default::default()
    }
}

/// The YAML of Deployment `name` (6 nginx replicas, in `default`) and its PropagationPolicy,
/// which Divides it over the clusters of `weights` by those static weights; `policy_tail` is
/// more of the policy's spec, indented by two spaces (e.g. a `failover:`), or empty.
pub fn weighted_yaml(name: &str, weights: &[(&str, i64)], policy_tail: &str) -> String {
    let clusters = weights
        .iter()
        .map(|(c, _)| *c)
        .collect::<Vec<_>>()
        .join(", ");
    let weights: String = weights
        .iter()
        .map(|(c, w)| {
            format!("        - targetCluster: {{clusterNames: [{c}]}}\n          weight: {w}\n")
        })
        .collect();
    let deployment = deployment_yaml(name, Some("default"), 6, name, "nginx");
    format!(
        r#"{deployment}---
apiVersion: policy.karmada.io/v1alpha1
kind: PropagationPolicy
metadata: {{name: {name}, namespace: default}}
spec:
  resourceSelectors: [{{apiVersion: apps/v1, kind: Deployment, name: {name}}}]
  placement:
    clusterAffinity: {{clusterNames: [{clusters}]}}
    replicaScheduling:
      replicaSchedulingType: Divided
      replicaDivisionPreference: Weighted
      weightPreference:
        staticWeightList:
{weights}{policy_tail}"#
    )
}

/// Changes the nginx template's replicas from `from` to `to` through the api: read, change,
/// update on the version read, and again on a conflict (the work executor writes the
/// template's aggregated status, which moves its resourceVersion, as a user's client meets
/// on kube-apiserver).
pub async fn scale_nginx(api: &ApiClient, from: i32, to: i32) {
    for _ in 0..20 {
        let w = api
            .clone()
            .get_workload(flotilla_api::testing::get_nginx())
            .await
            .unwrap()
            .into_inner();
        let mut changed = w.clone();
        changed.manifest = changed.manifest.replace(
            &format!("\"replicas\": {from}"),
            &format!("\"replicas\": {to}"),
        );
        assert_ne!(
            changed.manifest, w.manifest,
            "the template had {from} replicas"
        );
        match api
            .clone()
            .update_workload(v1::UpdateWorkloadRequest {
                workload: Some(changed),
            })
            .await
        {
            Ok(_) => return,
            Err(s) if s.code() == tonic::Code::Aborted => continue,
            Err(s) => panic!("scaling nginx: {s:?}"),
        }
    }
    panic!("scaling nginx: still conflicting after 20 attempts");
}
