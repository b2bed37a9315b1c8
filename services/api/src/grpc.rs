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
use flotilla_runtime::authz::confine;
use flotilla_runtime::reflector::Cache;
use tonic::{Request, Response, Status};

use crate::admission::Admission;
use crate::error::Error;
use crate::objects::{NoHold, Objects};
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
}

mod apply;
mod crud;

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

/// A Workload as a viewer sees it: a Secret template's `data` and `stringData` keep their
/// keys with empty values; every other kind is unchanged.
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

fn ok<T>(value: std::result::Result<T, Error>) -> Result<T> {
    value.map(Response::new).map_err(Status::from)
}

/// Writes `impl Api for ApiService` from one row per handler: `name(Request) -> Response =>
/// body;`, where the body is an expression of `Result<Response, Error>` over `$api` (the
/// service) and `$req` (the request's message), and one row per watch: `name(Request) ->
/// StreamType(WatchResponse);`. Hand-written items follow the rows.
macro_rules! api_service {
    (
        |$api:ident, $req:ident|
        unary {
            $($name:ident($request:ident) -> $response:ident => $body:expr;)*
        }
        watch {
            $($watch:ident($wrequest:ident) -> $stream:ident($wresponse:ident);)*
        }
        $($rest:tt)*
    ) => {
        #[tonic::async_trait]
        impl Api for ApiService {
            $(async fn $name(&self, request: Request<v1::$request>) -> Result<v1::$response> {
                let $api = self;
                let $req = request.into_inner();
                ok($body)
            })*

            $(type $stream = WatchResponseStream<v1::$wresponse>;

            async fn $watch(&self, request: Request<v1::$wrequest>) -> Result<Self::$stream> {
                ok(self.watch(request.into_inner()).await)
            })*

            $($rest)*
        }
    };
}

api_service! {
    |api, req|
    unary {
    // --- Cluster
    create_cluster(CreateClusterRequest) -> Cluster =>
        api.create_cluster_admitted(req.cluster).await;
    get_cluster(GetClusterRequest) -> Cluster => api.get(req).await;
    list_clusters(ListClustersRequest) -> ListClustersResponse => api.list(req).await;
    update_cluster(UpdateClusterRequest) -> Cluster => {
        let admit = |current: &v1::Cluster, new| api.admission().cluster_update(current, new);
        api.update(req.cluster, "cluster", false, admit).await
    };
    delete_cluster(DeleteClusterRequest) -> DeleteClusterResponse =>
        api.delete_cluster_held(req).await;

    // --- PropagationPolicy and ClusterPropagationPolicy (PD-1/PD-2 admission)
    create_propagation_policy(CreatePropagationPolicyRequest) -> PropagationPolicy => {
        let admit = |p| api.admission().propagation_policy(p, None, false);
        api.create_with(req.propagation_policy, admit).await
    };
    get_propagation_policy(GetPropagationPolicyRequest) -> PropagationPolicy => api.get(req).await;
    list_propagation_policies(ListPropagationPoliciesRequest) -> ListPropagationPoliciesResponse =>
        api.list(req).await;
    update_propagation_policy(UpdatePropagationPolicyRequest) -> PropagationPolicy => {
        let admit = |current: &v1::PropagationPolicy, new| {
            api.admission().propagation_policy(Some(new), Some(current), false)
        };
        api.update(req.propagation_policy, "propagationPolicy", true, admit).await
    };
    delete_propagation_policy(DeletePropagationPolicyRequest) -> DeletePropagationPolicyResponse =>
        api.delete(req, NoHold).await;
    create_cluster_propagation_policy(CreateClusterPropagationPolicyRequest)
        -> ClusterPropagationPolicy => {
        let admit = |p| api.admission().propagation_policy(p, None, true);
        api.create_with(req.cluster_propagation_policy, admit).await
    };
    get_cluster_propagation_policy(GetClusterPropagationPolicyRequest)
        -> ClusterPropagationPolicy => api.get(req).await;
    list_cluster_propagation_policies(ListClusterPropagationPoliciesRequest)
        -> ListClusterPropagationPoliciesResponse => api.list(req).await;
    update_cluster_propagation_policy(UpdateClusterPropagationPolicyRequest)
        -> ClusterPropagationPolicy => {
        let admit = |current: &v1::ClusterPropagationPolicy, new| {
            api.admission().propagation_policy(Some(new), Some(current), true)
        };
        let policy = req.cluster_propagation_policy;
        api.update(policy, "clusterPropagationPolicy", false, admit).await
    };
    delete_cluster_propagation_policy(DeleteClusterPropagationPolicyRequest)
        -> DeleteClusterPropagationPolicyResponse => api.delete(req, NoHold).await;

    // --- Secret (member credentials): values are accepted, stored, and never answered
    create_secret(CreateSecretRequest) -> Secret => {
        let admit = |s| api.admission().secret(s);
        api.create_with(req.secret, admit).await.map(redact)
    };
    get_secret(GetSecretRequest) -> Secret => api.get(req).await.map(redact);
    list_secrets(ListSecretsRequest) -> ListSecretsResponse => {
        api.list(req).await.map(|mut page: v1::ListSecretsResponse| {
            page.items = page.items.into_iter().map(redact).collect();
            page
        })
    };
    update_secret(UpdateSecretRequest) -> Secret => {
        let admit = |_: &v1::Secret, new| api.admission().secret(Some(new));
        api.update(req.secret, "secret", true, admit).await.map(redact)
    };
    delete_secret(DeleteSecretRequest) -> DeleteSecretResponse => {
        api.delete(req, NoHold).await.map(|mut r: v1::DeleteSecretResponse| {
            r.secret = r.secret.map(redact);
            r
        })
    };

    // --- OverridePolicy and ClusterOverridePolicy (OV-1 admission)
    create_override_policy(CreateOverridePolicyRequest) -> OverridePolicy =>
        api.create_override(req.override_policy, false).await;
    get_override_policy(GetOverridePolicyRequest) -> OverridePolicy => api.get(req).await;
    list_override_policies(ListOverridePoliciesRequest) -> ListOverridePoliciesResponse =>
        api.list(req).await;
    update_override_policy(UpdateOverridePolicyRequest) -> OverridePolicy =>
        api.update_override(req.override_policy, false).await;
    delete_override_policy(DeleteOverridePolicyRequest) -> DeleteOverridePolicyResponse =>
        api.delete(req, NoHold).await;
    create_cluster_override_policy(CreateClusterOverridePolicyRequest) -> ClusterOverridePolicy =>
        api.create_override(req.cluster_override_policy, true).await;
    get_cluster_override_policy(GetClusterOverridePolicyRequest) -> ClusterOverridePolicy =>
        api.get(req).await;
    list_cluster_override_policies(ListClusterOverridePoliciesRequest)
        -> ListClusterOverridePoliciesResponse => api.list(req).await;
    update_cluster_override_policy(UpdateClusterOverridePolicyRequest) -> ClusterOverridePolicy =>
        api.update_override(req.cluster_override_policy, true).await;
    delete_cluster_override_policy(DeleteClusterOverridePolicyRequest)
        -> DeleteClusterOverridePolicyResponse => api.delete(req, NoHold).await;

    // --- ClusterTaintPolicy (CH-16: checked against the other stored ones)
    create_cluster_taint_policy(CreateClusterTaintPolicyRequest) -> ClusterTaintPolicy =>
        api.create_cluster_taint_policy_admitted(req.cluster_taint_policy).await;
    get_cluster_taint_policy(GetClusterTaintPolicyRequest) -> ClusterTaintPolicy =>
        api.get(req).await;
    list_cluster_taint_policies(ListClusterTaintPoliciesRequest)
        -> ListClusterTaintPoliciesResponse => api.list(req).await;
    update_cluster_taint_policy(UpdateClusterTaintPolicyRequest) -> ClusterTaintPolicy =>
        api.update_cluster_taint_policy_admitted(req.cluster_taint_policy).await;
    delete_cluster_taint_policy(DeleteClusterTaintPolicyRequest)
        -> DeleteClusterTaintPolicyResponse => api.delete(req, NoHold).await;

    // --- Workload
    create_workload(CreateWorkloadRequest) -> Workload => {
        let admit = |w| api.admission().workload(w);
        api.create_with(req.workload, admit).await
    };
    update_workload(UpdateWorkloadRequest) -> Workload =>
        api.update_workload_admitted(req.workload).await;
    delete_workload(DeleteWorkloadRequest) -> DeleteWorkloadResponse =>
        api.delete(req, NoHold).await;

    // --- read-only kinds: the detector and the controllers write them
    get_resource_binding(GetResourceBindingRequest) -> ResourceBinding => api.get(req).await;
    list_resource_bindings(ListResourceBindingsRequest) -> ListResourceBindingsResponse =>
        api.list(req).await;
    get_event(GetEventRequest) -> Event => api.get(req).await;
    list_events(ListEventsRequest) -> ListEventsResponse => api.list(req).await;

    // --- Apply (many objects in one request)
    apply(ApplyRequest) -> ApplyResponse => api.apply_objects(req).await;
    }

    watch {
        watch_clusters(WatchClustersRequest) -> WatchClustersStream(WatchClustersResponse);
        watch_propagation_policies(WatchPropagationPoliciesRequest)
            -> WatchPropagationPoliciesStream(WatchPropagationPoliciesResponse);
        watch_cluster_propagation_policies(WatchClusterPropagationPoliciesRequest)
            -> WatchClusterPropagationPoliciesStream(WatchClusterPropagationPoliciesResponse);
        watch_override_policies(WatchOverridePoliciesRequest)
            -> WatchOverridePoliciesStream(WatchOverridePoliciesResponse);
        watch_cluster_override_policies(WatchClusterOverridePoliciesRequest)
            -> WatchClusterOverridePoliciesStream(WatchClusterOverridePoliciesResponse);
        watch_cluster_taint_policies(WatchClusterTaintPoliciesRequest)
            -> WatchClusterTaintPoliciesStream(WatchClusterTaintPoliciesResponse);
        watch_resource_bindings(WatchResourceBindingsRequest)
            -> WatchResourceBindingsStream(WatchResourceBindingsResponse);
        watch_events(WatchEventsRequest) -> WatchEventsStream(WatchEventsResponse);
    }

    // Workloads: a viewer reads Secret templates without their values.
    async fn get_workload(&self, request: Request<v1::GetWorkloadRequest>) -> Result<v1::Workload> {
        let hide = viewer(request.extensions());
        let workload = ok(self.get(request.into_inner()).await)?;
        Ok(if hide {
            workload.map(redact_workload)
        } else {
            workload
        })
    }

    async fn list_workloads(
        &self,
        request: Request<v1::ListWorkloadsRequest>,
    ) -> Result<v1::ListWorkloadsResponse> {
        let hide = viewer(request.extensions());
        let mut list = ok(self.list(request.into_inner()).await)?;
        if hide {
            let page = list.get_mut();
            page.items = std::mem::take(&mut page.items)
                .into_iter()
                .map(redact_workload)
                .collect();
        }
        Ok(list)
    }

    type WatchWorkloadsStream = WatchResponseStream<v1::WatchWorkloadsResponse>;

    async fn watch_workloads(
        &self,
        request: Request<v1::WatchWorkloadsRequest>,
    ) -> Result<Self::WatchWorkloadsStream> {
        use futures::StreamExt as _;
        let hide = viewer(request.extensions());
        let stream = ok(self.watch(request.into_inner()).await)?;
        if !hide {
            return Ok(stream);
        }
        let redacted = stream.into_inner().map(|item| {
            item.map(|mut event| {
                event.object = event.object.map(redact_workload);
                event
            })
        });
        Ok(Response::new(Box::pin(redacted)))
    }

    // Works carry their manifests, Secrets among them: an agent reads only its own
    // cluster's (the method table lets agents through, `confine` narrows them; docs/design.md
    // §9).
    async fn get_work(&self, request: Request<v1::GetWorkRequest>) -> Result<v1::Work> {
        confine(request.extensions(), &request.get_ref().cluster)?;
        ok(self.get(request.into_inner()).await)
    }

    async fn list_works(
        &self,
        request: Request<v1::ListWorksRequest>,
    ) -> Result<v1::ListWorksResponse> {
        confine(request.extensions(), &request.get_ref().cluster)?;
        ok(self.list(request.into_inner()).await)
    }

    type WatchWorksStream = WatchResponseStream<v1::WatchWorksResponse>;

    async fn watch_works(
        &self,
        request: Request<v1::WatchWorksRequest>,
    ) -> Result<Self::WatchWorksStream> {
        confine(request.extensions(), &request.get_ref().cluster)?;
        ok(self.watch(request.into_inner()).await)
    }

    async fn get_peers(
        &self,
        _request: Request<v1::GetPeersRequest>,
    ) -> Result<v1::GetPeersResponse> {
        Ok(Response::new(v1::GetPeersResponse {
            peers: self.inner.peers.clone().into_iter().collect(),
        }))
    }
}
