//! `flotilla.v1.Api`: CRUD and watch over the store, every handler being convert → admit
//! (default + validate) → guarded write → convert, with errors mapped in one place
//! (`impl From<Error> for tonic::Status`).
//!
//! Get, List, Watch and Delete are generic over what a request names or covers
//! ([`crate::requests`]); Create and Update differ by kind only in their admission.
//!
//! Field paths in INVALID_ARGUMENT details are relative to the object in the request
//! (`metadata.name`, `spec.taints[0].effect`), or to the request itself for its own fields
//! (`pageSize`, `labelSelector`, `resourceVersion`, `name`).

use std::sync::Arc;
use std::time::Duration;

use flotilla_proto::v1::{self, api_server::Api};
use flotilla_runtime::Shutdown;
use flotilla_runtime::reflector::Cache;
use tonic::{Request, Response, Status};

use crate::admission::Admission;
use crate::objects::Objects;
use crate::watch::WatchResponseStream;

type Result<T> = std::result::Result<Response<T>, Status>;

/// The Api service.
#[derive(Clone, Debug)]
pub struct ApiService {
    inner: Arc<ApiParts>,
}

/// What an [`ApiService`] serves from.
#[derive(Debug)]
pub struct ApiParts {
    /// The objects it reads and writes.
    pub objects: Objects,
    /// The admission of every write.
    pub admission: Admission,
    /// A synced cache of the bindings indexed by cluster (the detector's).
    pub bindings: Cache<v1::ResourceBinding>,
    /// Watches end on it.
    pub shutdown: Shutdown,
    /// How often a watch that allows bookmarks gets one.
    pub bookmark_interval: Duration,
    /// Other services' addresses (`--peer`), for `GetPeers`.
    pub peers: std::collections::BTreeMap<String, String>,
    /// Records the events of the api's own writes (a released eviction task).
    pub recorder: flotilla_runtime::events::Recorder,
}

mod apply;
mod crud;
mod handlers;

/// Whether the caller is a viewer, who may read Workloads but not the values of Secret
/// templates among them (docs/design.md §9).
fn viewer(extensions: &http::Extensions) -> bool {
    matches!(
        extensions.get::<flotilla_runtime::Caller>(),
        Some(flotilla_runtime::Caller(
            flotilla_runtime::Principal::Viewer
        ))
    )
}

/// kubectl's annotation of what a client-side apply applied last.
const LAST_APPLIED: &str = "kubectl.kubernetes.io/last-applied-configuration";

/// A Workload as a viewer sees it: a Secret template's `data` and `stringData` keep their
/// keys with empty values, and kubectl's last-applied annotation is emptied; every other
/// kind is unchanged.
pub fn redact_workload(mut workload: v1::Workload) -> v1::Workload {
    if workload.kind != "Secret" {
        return workload;
    }
    if let Ok(mut manifest) = serde_json::from_str::<serde_json::Value>(&workload.manifest) {
        for field in ["data", "stringData"] {
            if let Some(values) = manifest.get_mut(field).and_then(|v| v.as_object_mut()) {
                for value in values.values_mut() {
                    *value = serde_json::Value::String(String::new());
                }
            }
        }
        // client-side `kubectl apply` keeps the whole applied object, values and all, in
        // this annotation
        if let Some(last) = manifest
            .pointer_mut("/metadata/annotations")
            .and_then(|a| a.as_object_mut())
            .and_then(|a| a.get_mut(LAST_APPLIED))
        {
            *last = serde_json::Value::String(String::new());
        }
        workload.manifest = manifest.to_string();
    } else {
        workload.manifest = "{}".to_owned();
    }
    workload
}

/// A Secret as the api answers it: its keys with empty values (S4: no credential leaves the
/// store through the api; the services that call members read it from the store).
pub fn redact(mut secret: v1::Secret) -> v1::Secret {
    for value in secret.data.values_mut() {
        value.clear();
    }
    secret
}

fn ok<T, E: Into<Status>>(value: std::result::Result<T, E>) -> Result<T> {
    value.map(Response::new).map_err(Into::into)
}

/// Writes `impl Api for ApiService` from one row per RPC, each of which only routes: `name(Request)
/// -> Response => method(req);` calls `self.method` with the request's message,
/// `method(req.field, args…)` with one field of it (and constant arguments), and
/// `method(request)` with the whole `tonic::Request` (for handlers that read the caller's
/// identity from its extensions). A watch row names its stream type and response message
/// too. Every handler is an ordinary method of [`ApiService`] (`grpc/crud.rs`,
/// `grpc/handlers.rs`, `grpc/apply.rs`).
macro_rules! api_service {
    (
        unary {
            $($name:ident($request:ident) -> $response:ident => $method:ident($($args:tt)*);)*
        }
        watch {
            $($watch:ident($wrequest:ident) -> $stream:ident($wresponse:ident)
                => $wmethod:ident($($wargs:tt)*);)*
        }
    ) => {
        #[tonic::async_trait]
        impl Api for ApiService {
            $(async fn $name(&self, request: Request<v1::$request>) -> Result<v1::$response> {
                ok(route!(self, request, $method($($args)*)))
            })*

            $(type $stream = WatchResponseStream<v1::$wresponse>;

            async fn $watch(&self, request: Request<v1::$wrequest>) -> Result<Self::$stream> {
                ok(route!(self, request, $wmethod($($wargs)*)))
            })*
        }
    };
}

/// One row's call (see [`api_service!`]).
macro_rules! route {
    ($service:ident, $request:ident, $method:ident(request)) => {
        $service.$method($request).await
    };
    ($service:ident, $request:ident, $method:ident(req $(.$field:ident)? $(, $arg:expr)*)) => {
        $service.$method($request.into_inner()$(.$field)? $(, $arg)*).await
    };
}

api_service! {
    unary {
        // --- Cluster
        create_cluster(CreateClusterRequest) -> Cluster => create_cluster_admitted(req.cluster);
        get_cluster(GetClusterRequest) -> Cluster => get(req);
        list_clusters(ListClustersRequest) -> ListClustersResponse => list(req);
        update_cluster(UpdateClusterRequest) -> Cluster => update_cluster_admitted(req.cluster);
        delete_cluster(DeleteClusterRequest) -> DeleteClusterResponse => delete_cluster_held(req);

        // --- PropagationPolicy and ClusterPropagationPolicy (PD-1/PD-2 admission)
        create_propagation_policy(CreatePropagationPolicyRequest) -> PropagationPolicy =>
            create_propagation_admitted(req.propagation_policy, false);
        get_propagation_policy(GetPropagationPolicyRequest) -> PropagationPolicy => get(req);
        list_propagation_policies(ListPropagationPoliciesRequest)
            -> ListPropagationPoliciesResponse => list(req);
        update_propagation_policy(UpdatePropagationPolicyRequest) -> PropagationPolicy =>
            update_propagation_admitted(req.propagation_policy, false);
        delete_propagation_policy(DeletePropagationPolicyRequest)
            -> DeletePropagationPolicyResponse => delete_now(req);
        create_cluster_propagation_policy(CreateClusterPropagationPolicyRequest)
            -> ClusterPropagationPolicy =>
            create_propagation_admitted(req.cluster_propagation_policy, true);
        get_cluster_propagation_policy(GetClusterPropagationPolicyRequest)
            -> ClusterPropagationPolicy => get(req);
        list_cluster_propagation_policies(ListClusterPropagationPoliciesRequest)
            -> ListClusterPropagationPoliciesResponse => list(req);
        update_cluster_propagation_policy(UpdateClusterPropagationPolicyRequest)
            -> ClusterPropagationPolicy =>
            update_propagation_admitted(req.cluster_propagation_policy, true);
        delete_cluster_propagation_policy(DeleteClusterPropagationPolicyRequest)
            -> DeleteClusterPropagationPolicyResponse => delete_now(req);

        // --- Secret (member credentials): values are accepted, stored, and never answered
        create_secret(CreateSecretRequest) -> Secret => create_secret_redacted(req.secret);
        get_secret(GetSecretRequest) -> Secret => get_secret_redacted(req);
        list_secrets(ListSecretsRequest) -> ListSecretsResponse => list_secrets_redacted(req);
        update_secret(UpdateSecretRequest) -> Secret => update_secret_redacted(req.secret);
        delete_secret(DeleteSecretRequest) -> DeleteSecretResponse => delete_secret_redacted(req);

        // --- OverridePolicy and ClusterOverridePolicy (OV-1 admission)
        create_override_policy(CreateOverridePolicyRequest) -> OverridePolicy =>
            create_override(req.override_policy, false);
        get_override_policy(GetOverridePolicyRequest) -> OverridePolicy => get(req);
        list_override_policies(ListOverridePoliciesRequest) -> ListOverridePoliciesResponse =>
            list(req);
        update_override_policy(UpdateOverridePolicyRequest) -> OverridePolicy =>
            update_override(req.override_policy, false);
        delete_override_policy(DeleteOverridePolicyRequest) -> DeleteOverridePolicyResponse =>
            delete_now(req);
        create_cluster_override_policy(CreateClusterOverridePolicyRequest)
            -> ClusterOverridePolicy => create_override(req.cluster_override_policy, true);
        get_cluster_override_policy(GetClusterOverridePolicyRequest) -> ClusterOverridePolicy =>
            get(req);
        list_cluster_override_policies(ListClusterOverridePoliciesRequest)
            -> ListClusterOverridePoliciesResponse => list(req);
        update_cluster_override_policy(UpdateClusterOverridePolicyRequest)
            -> ClusterOverridePolicy => update_override(req.cluster_override_policy, true);
        delete_cluster_override_policy(DeleteClusterOverridePolicyRequest)
            -> DeleteClusterOverridePolicyResponse => delete_now(req);

        // --- ClusterTaintPolicy (CH-16: checked against the other stored ones)
        create_cluster_taint_policy(CreateClusterTaintPolicyRequest) -> ClusterTaintPolicy =>
            create_cluster_taint_policy_admitted(req.cluster_taint_policy);
        get_cluster_taint_policy(GetClusterTaintPolicyRequest) -> ClusterTaintPolicy => get(req);
        list_cluster_taint_policies(ListClusterTaintPoliciesRequest)
            -> ListClusterTaintPoliciesResponse => list(req);
        update_cluster_taint_policy(UpdateClusterTaintPolicyRequest) -> ClusterTaintPolicy =>
            update_cluster_taint_policy_admitted(req.cluster_taint_policy);
        delete_cluster_taint_policy(DeleteClusterTaintPolicyRequest)
            -> DeleteClusterTaintPolicyResponse => delete_now(req);

        // --- Workload (a viewer reads Secret templates without their values)
        create_workload(CreateWorkloadRequest) -> Workload => create_workload_admitted(req.workload);
        get_workload(GetWorkloadRequest) -> Workload => get_workload_for_caller(request);
        list_workloads(ListWorkloadsRequest) -> ListWorkloadsResponse =>
            list_workloads_for_caller(request);
        update_workload(UpdateWorkloadRequest) -> Workload => update_workload_admitted(req.workload);
        delete_workload(DeleteWorkloadRequest) -> DeleteWorkloadResponse => delete_now(req);

        // --- Work (an agent reads only its own cluster's)
        get_work(GetWorkRequest) -> Work => get_work_confined(request);
        list_works(ListWorksRequest) -> ListWorksResponse => list_works_confined(request);

        // --- read-only kinds: the detector and the controllers write them
        get_resource_binding(GetResourceBindingRequest) -> ResourceBinding => get(req);
        list_resource_bindings(ListResourceBindingsRequest) -> ListResourceBindingsResponse =>
            list(req);
        // GE-9.1: the one field of a binding a person may change
        release_eviction_task(ReleaseEvictionTaskRequest) -> ResourceBinding =>
            release_eviction_task(request);
        reschedule_binding(RescheduleBindingRequest) -> ResourceBinding =>
            reschedule_binding(request);
        get_event(GetEventRequest) -> Event => get(req);
        list_events(ListEventsRequest) -> ListEventsResponse => list(req);

        // --- Apply (many objects in one request), and the peers the api forwards to
        apply(ApplyRequest) -> ApplyResponse => apply_objects(req);
        get_peers(GetPeersRequest) -> GetPeersResponse => peers(req);
        list_shards(ListShardsRequest) -> ListShardsResponse => shards(req);
        review_access(ReviewAccessRequest) -> ReviewAccessResponse => review_access(request);
    }

    watch {
        watch_clusters(WatchClustersRequest) -> WatchClustersStream(WatchClustersResponse)
            => watch(req);
        watch_propagation_policies(WatchPropagationPoliciesRequest)
            -> WatchPropagationPoliciesStream(WatchPropagationPoliciesResponse) => watch(req);
        watch_cluster_propagation_policies(WatchClusterPropagationPoliciesRequest)
            -> WatchClusterPropagationPoliciesStream(WatchClusterPropagationPoliciesResponse)
            => watch(req);
        watch_override_policies(WatchOverridePoliciesRequest)
            -> WatchOverridePoliciesStream(WatchOverridePoliciesResponse) => watch(req);
        watch_cluster_override_policies(WatchClusterOverridePoliciesRequest)
            -> WatchClusterOverridePoliciesStream(WatchClusterOverridePoliciesResponse)
            => watch(req);
        watch_cluster_taint_policies(WatchClusterTaintPoliciesRequest)
            -> WatchClusterTaintPoliciesStream(WatchClusterTaintPoliciesResponse) => watch(req);
        watch_resource_bindings(WatchResourceBindingsRequest)
            -> WatchResourceBindingsStream(WatchResourceBindingsResponse) => watch(req);
        watch_events(WatchEventsRequest) -> WatchEventsStream(WatchEventsResponse) => watch(req);
        watch_workloads(WatchWorkloadsRequest) -> WatchWorkloadsStream(WatchWorkloadsResponse)
            => watch_workloads_for_caller(request);
        watch_works(WatchWorksRequest) -> WatchWorksStream(WatchWorksResponse)
            => watch_works_confined(request);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A viewer's Secret template has its keys without values, in `data`, `stringData` and
    /// kubectl's last-applied annotation (which holds the whole applied Secret).
    #[test]
    fn a_viewers_secret_template_carries_no_value() {
        let manifest = serde_json::json!({
            "apiVersion": "v1", "kind": "Secret",
            "metadata": {"name": "db", "annotations": {
                LAST_APPLIED: r#"{"data":{"password":"czNjcmV0"}}"#, "team": "shop"}},
            "data": {"password": "czNjcmV0"}, "stringData": {"user": "admin"},
        });
        let workload = v1::Workload {
            kind: "Secret".into(),
            manifest: manifest.to_string(),
            ..Default::default()
        };
        let shown = redact_workload(workload);
        assert!(!shown.manifest.contains("czNjcmV0"), "{}", shown.manifest);
        assert!(!shown.manifest.contains("\"admin\""), "{}", shown.manifest);
        let shown: serde_json::Value = serde_json::from_str(&shown.manifest).unwrap();
        assert_eq!(shown["data"]["password"], "");
        assert_eq!(shown["metadata"]["annotations"]["team"], "shop");
        let other = v1::Workload {
            kind: "ConfigMap".into(),
            manifest: manifest.to_string(),
            ..Default::default()
        };
        assert_eq!(redact_workload(other).manifest, manifest.to_string());
    }
}
