//! Reading clusters, bindings and Works through the api, and waiting on them.

use std::time::Duration;

use flotilla_proto::v1;

use crate::*;

// ---------------------------------------------------------------------------------------
// Reading objects through the api
// ---------------------------------------------------------------------------------------

/// The condition of `type_` in `conditions`.
pub fn condition<'a>(conditions: &'a [v1::Condition], type_: &str) -> Option<&'a v1::Condition> {
    conditions.iter().find(|c| c.r#type == type_)
}

/// A cluster, or `None` if the api does not answer with it.
pub async fn get_cluster(api: &ApiClient, name: &str) -> Option<v1::Cluster> {
    api.clone()
        .get_cluster(v1::GetClusterRequest { name: name.into() })
        .await
        .ok()
        .map(|r| r.into_inner())
}

/// The status of a cluster's `Ready` condition (UNSPECIFIED when it has none).
pub fn ready_status(c: &v1::Cluster) -> v1::ConditionStatus {
    c.status
        .as_ref()
        .and_then(|s| condition(&s.conditions, "Ready"))
        .and_then(|c| v1::ConditionStatus::try_from(c.status).ok())
        .unwrap_or(v1::ConditionStatus::Unspecified)
}

/// Whether a cluster carries the taint (key, effect).
pub fn has_taint(c: &v1::Cluster, key: &str, effect: v1::TaintEffect) -> bool {
    c.spec.as_ref().is_some_and(|s| {
        s.taints
            .iter()
            .any(|t| t.key == key && t.effect == effect as i32)
    })
}

/// The cluster's taints as `key:Effect`.
pub fn taint_names(c: &v1::Cluster) -> Vec<String> {
    let taints = c.spec.as_ref().map_or(&[][..], |s| &s.taints);
    taints.iter().map(taint_name).collect()
}

/// A taint as `key:Effect` (the number of an effect the proto does not know).
fn taint_name(t: &v1::Taint) -> String {
    let effect = v1::TaintEffect::try_from(t.effect)
        .map_or_else(|_| t.effect.to_string(), |e| e.as_str_name().to_owned());
    format!("{}:{effect}", t.key)
}

/// Waits until every named cluster is Ready, untainted and reports its API enablements
/// (so that the first schedule sees all of them as candidates).
pub async fn wait_clusters_ready(api: &ApiClient, names: &[&str], timeout: Duration) {
    for name in names {
        eventually(timeout, &format!("{name} Ready and untainted"), || async {
            let c = get_cluster(api, name).await?;
            let status = c.status.as_ref()?;
            (ready_status(&c) == v1::ConditionStatus::True
                && !status.api_enablements.is_empty()
                && c.spec.as_ref()?.taints.is_empty())
            .then_some(())
        })
        .await;
    }
}

/// Waits until a cluster carries the taint (key, effect); returns the cluster.
pub async fn wait_taint(
    api: &ApiClient,
    name: &str,
    key: &str,
    effect: v1::TaintEffect,
    timeout: Duration,
) -> v1::Cluster {
    eventually(
        timeout,
        &format!("{name} tainted {key}:{}", effect.as_str_name()),
        || async {
            let c = get_cluster(api, name).await?;
            has_taint(&c, key, effect).then_some(c)
        },
    )
    .await
}

/// A binding, or `None` if absent.
pub async fn get_binding(
    api: &ApiClient,
    namespace: &str,
    name: &str,
) -> Option<v1::ResourceBinding> {
    api.clone()
        .get_resource_binding(v1::GetResourceBindingRequest {
            namespace: namespace.into(),
            name: name.into(),
        })
        .await
        .ok()
        .map(|r| r.into_inner())
}

/// The binding of the seed workload `default/nginx` (Deployment): `default/nginx-deployment`.
pub async fn nginx_binding(api: &ApiClient) -> Option<v1::ResourceBinding> {
    get_binding(api, "default", "nginx-deployment").await
}

/// Waits (up to `timeout`) until the seed binding satisfies `ready`; returns it.
pub async fn wait_nginx(
    api: &ApiClient,
    timeout: Duration,
    what: &str,
    ready: impl Fn(&v1::ResourceBinding) -> bool,
) -> v1::ResourceBinding {
    let ready = &ready;
    eventually(timeout, what, move || async move {
        let b = nginx_binding(api).await?;
        ready(&b).then_some(b)
    })
    .await
}

/// Waits (up to `timeout`) until the seed binding targets exactly `expected` (name, replicas,
/// sorted by name) and is healthy ([`binding_healthy`]); returns it.
pub async fn wait_nginx_healthy(
    api: &ApiClient,
    timeout: Duration,
    expected: &[(&str, i32)],
) -> v1::ResourceBinding {
    let what = format!("nginx on {expected:?}, healthy");
    wait_nginx(api, timeout, &what, |b| {
        targeted(b, expected) && binding_healthy(b)
    })
    .await
}

/// Whether `spec.clusters` is exactly `expected` (name, replicas, sorted by name).
pub fn targeted(b: &v1::ResourceBinding, expected: &[(&str, i32)]) -> bool {
    let targets = targets(b);
    targets
        .iter()
        .map(|(c, r)| (c.as_str(), *r))
        .eq(expected.iter().copied())
}

/// `spec.clusters` as sorted (name, replicas).
pub fn targets(b: &v1::ResourceBinding) -> Vec<(String, i32)> {
    b.target_pairs()
}

/// The target names of `spec.clusters`, sorted.
pub fn target_names(b: &v1::ResourceBinding) -> Vec<String> {
    targets(b).into_iter().map(|(n, _)| n).collect()
}

/// The eviction tasks of a binding.
pub fn eviction_tasks(b: &v1::ResourceBinding) -> Vec<v1::GracefulEvictionTask> {
    b.spec
        .as_ref()
        .map(|s| s.graceful_eviction_tasks.clone())
        .unwrap_or_default()
}

/// The `fromCluster` of every eviction task of a binding.
pub fn tasks(b: &v1::ResourceBinding) -> Vec<String> {
    eviction_tasks(b)
        .into_iter()
        .map(|t| t.from_cluster)
        .collect()
}

/// A condition of a binding's status.
pub fn binding_condition<'a>(b: &'a v1::ResourceBinding, type_: &str) -> Option<&'a v1::Condition> {
    condition(&b.status.as_ref()?.conditions, type_)
}

/// The aggregated status item of one cluster.
pub fn status_item<'a>(
    b: &'a v1::ResourceBinding,
    cluster: &str,
) -> Option<&'a v1::AggregatedStatusItem> {
    b.status
        .as_ref()?
        .aggregated_status
        .iter()
        .find(|i| i.cluster_name == cluster)
}

/// Whether every target of the binding reports Healthy with all its replicas Ready, in
/// status aggregated for the binding's current generation.
pub fn binding_healthy(b: &v1::ResourceBinding) -> bool {
    let (Some(status), Some(meta)) = (b.status.as_ref(), b.metadata.as_ref()) else {
        return false;
    };
    let t = targets(b);
    !t.is_empty()
        && status.aggregated_status_observed_generation == meta.generation
        && t.iter().all(|(cluster, replicas)| {
            status_item(b, cluster).is_some_and(|i| {
                i.health == v1::ResourceHealth::Healthy as i32 && i.ready_replicas == *replicas
            })
        })
}

/// The cluster of a Work.
pub fn work_cluster(w: &v1::Work) -> &str {
    w.spec.as_ref().map_or("", |s| s.cluster.as_str())
}

/// Whether a Work is marked for deletion.
pub fn work_deleting(w: &v1::Work) -> bool {
    w.metadata
        .as_ref()
        .is_some_and(|m| m.deletion_timestamp.is_some())
}

/// The resourceVersion of an object's metadata.
pub fn resource_version(meta: Option<&v1::ObjectMeta>) -> i64 {
    meta.map_or(0, |m| m.resource_version)
}

/// `pub async fn $name(api) -> Vec<Item>`: every object of a kind (one unpaged List), for
/// each `$name = $rpc($request) -> $item;` row.
macro_rules! list_every {
    ($($name:ident = $rpc:ident($request:ident) -> $item:ident;)*) => {$(
        #[doc = concat!("Every ", stringify!($item), " in the stack (one unpaged List).")]
        pub async fn $name(api: &ApiClient) -> Vec<v1::$item> {
            let list = api.clone().$rpc(v1::$request::default()).await;
            list.unwrap().into_inner().items
        }
    )*};
}

list_every! {
    list_bindings = list_resource_bindings(ListResourceBindingsRequest) -> ResourceBinding;
    list_works = list_works(ListWorksRequest) -> Work;
    list_clusters = list_clusters(ListClustersRequest) -> Cluster;
    list_policies = list_propagation_policies(ListPropagationPoliciesRequest) -> PropagationPolicy;
    list_workloads = list_workloads(ListWorkloadsRequest) -> Workload;
    list_taint_policies = list_cluster_taint_policies(ListClusterTaintPoliciesRequest)
        -> ClusterTaintPolicy;
}

/// The names of `objects`, in order.
pub fn names<R: flotilla_proto::Resource>(objects: &[R]) -> Vec<String> {
    objects.iter().map(|o| o.name().to_owned()).collect()
}

/// `pub async fn $name(api, namespace, name) -> Result<Item, Status>`: one namespaced object.
macro_rules! get_namespaced {
    ($(#[$doc:meta])* $name:ident = $rpc:ident($request:ident) -> $item:ident) => {
        $(#[$doc])*
        pub async fn $name(
            api: &ApiClient,
            namespace: &str,
            name: &str,
        ) -> Result<v1::$item, tonic::Status> {
            let request = v1::$request {
                namespace: namespace.into(),
                name: name.into(),
            };
            Ok(api.clone().$rpc(request).await?.into_inner())
        }
    };
}

get_namespaced!(
    /// A PropagationPolicy, or the api's error.
    get_policy = get_propagation_policy(GetPropagationPolicyRequest) -> PropagationPolicy
);
get_namespaced!(
    /// A Secret (its values blanked, as the api answers), or the api's error.
    get_secret = get_secret(GetSecretRequest) -> Secret
);

/// The Work of one cluster (the scenarios propagate one workload), if any.
pub async fn cluster_work(api: &ApiClient, cluster: &str) -> Option<v1::Work> {
    list_works(api)
        .await
        .into_iter()
        .find(|w| work_cluster(w) == cluster)
}

/// The clusters that have a Work, sorted.
pub async fn work_clusters(api: &ApiClient) -> Vec<String> {
    let mut clusters: Vec<String> = list_works(api)
        .await
        .iter()
        .map(|w| work_cluster(w).to_owned())
        .collect();
    clusters.sort();
    clusters
}
