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
use crate::error::Error;
use crate::objects::{NoHold, Objects, reset_for_create};
use crate::watch::WatchResponseStream;

type Result<T> = std::result::Result<Response<T>, Status>;

/// The Api service.
#[derive(Clone, Debug)]
pub struct ApiService {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    objects: Objects,
    admission: Admission,
    bindings: Cache<v1::ResourceBinding>,
    shutdown: Shutdown,
    bookmark_interval: Duration,
    /// Other services' addresses (`--peer`), for `GetPeers`.
    peers: std::collections::BTreeMap<String, String>,
}

mod apply;
mod crud;

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

#[tonic::async_trait]
impl Api for ApiService {
    // --- Cluster

    async fn create_cluster(
        &self,
        request: Request<v1::CreateClusterRequest>,
    ) -> Result<v1::Cluster> {
        ok(self
            .create_cluster_admitted(request.into_inner().cluster)
            .await)
    }

    async fn get_cluster(&self, request: Request<v1::GetClusterRequest>) -> Result<v1::Cluster> {
        ok(self.get(request.into_inner()).await)
    }

    async fn list_clusters(
        &self,
        request: Request<v1::ListClustersRequest>,
    ) -> Result<v1::ListClustersResponse> {
        ok(self.list(request.into_inner()).await)
    }

    async fn update_cluster(
        &self,
        request: Request<v1::UpdateClusterRequest>,
    ) -> Result<v1::Cluster> {
        let req = request.into_inner();
        let admit = |current: &v1::Cluster, new| self.admission().cluster_update(current, new);
        ok(self.update(req.cluster, "cluster", false, admit).await)
    }

    async fn delete_cluster(
        &self,
        request: Request<v1::DeleteClusterRequest>,
    ) -> Result<v1::DeleteClusterResponse> {
        ok(self.delete_cluster_held(request.into_inner()).await)
    }

    type WatchClustersStream = WatchResponseStream<v1::WatchClustersResponse>;

    async fn watch_clusters(
        &self,
        request: Request<v1::WatchClustersRequest>,
    ) -> Result<Self::WatchClustersStream> {
        ok(self.watch(request.into_inner()).await)
    }

    // --- PropagationPolicy

    async fn create_propagation_policy(
        &self,
        request: Request<v1::CreatePropagationPolicyRequest>,
    ) -> Result<v1::PropagationPolicy> {
        let req = request.into_inner();
        ok(async {
            let mut policy = req.propagation_policy;
            if let Some(p) = policy.as_mut() {
                reset_for_create(p)?;
            }
            let policy = self.admission().propagation_policy(policy, None)?;
            self.objects().create(policy).await
        }
        .await)
    }

    async fn get_propagation_policy(
        &self,
        request: Request<v1::GetPropagationPolicyRequest>,
    ) -> Result<v1::PropagationPolicy> {
        ok(self.get(request.into_inner()).await)
    }

    async fn list_propagation_policies(
        &self,
        request: Request<v1::ListPropagationPoliciesRequest>,
    ) -> Result<v1::ListPropagationPoliciesResponse> {
        ok(self.list(request.into_inner()).await)
    }

    async fn update_propagation_policy(
        &self,
        request: Request<v1::UpdatePropagationPolicyRequest>,
    ) -> Result<v1::PropagationPolicy> {
        let req = request.into_inner();
        let admit = |current: &v1::PropagationPolicy, new| {
            self.admission()
                .propagation_policy(Some(new), Some(current))
        };
        ok(self
            .update(req.propagation_policy, "propagationPolicy", true, admit)
            .await)
    }

    async fn delete_propagation_policy(
        &self,
        request: Request<v1::DeletePropagationPolicyRequest>,
    ) -> Result<v1::DeletePropagationPolicyResponse> {
        ok(self.delete(request.into_inner(), NoHold).await)
    }

    type WatchPropagationPoliciesStream = WatchResponseStream<v1::WatchPropagationPoliciesResponse>;

    async fn watch_propagation_policies(
        &self,
        request: Request<v1::WatchPropagationPoliciesRequest>,
    ) -> Result<Self::WatchPropagationPoliciesStream> {
        ok(self.watch(request.into_inner()).await)
    }

    // --- ClusterPropagationPolicy

    async fn create_cluster_propagation_policy(
        &self,
        request: Request<v1::CreateClusterPropagationPolicyRequest>,
    ) -> Result<v1::ClusterPropagationPolicy> {
        let req = request.into_inner();
        ok(async {
            let mut policy = req.cluster_propagation_policy;
            if let Some(p) = policy.as_mut() {
                reset_for_create(p)?;
            }
            let policy = self.admission().cluster_propagation_policy(policy, None)?;
            self.objects().create(policy).await
        }
        .await)
    }

    async fn get_cluster_propagation_policy(
        &self,
        request: Request<v1::GetClusterPropagationPolicyRequest>,
    ) -> Result<v1::ClusterPropagationPolicy> {
        ok(self.get(request.into_inner()).await)
    }

    async fn list_cluster_propagation_policies(
        &self,
        request: Request<v1::ListClusterPropagationPoliciesRequest>,
    ) -> Result<v1::ListClusterPropagationPoliciesResponse> {
        ok(self.list(request.into_inner()).await)
    }

    async fn update_cluster_propagation_policy(
        &self,
        request: Request<v1::UpdateClusterPropagationPolicyRequest>,
    ) -> Result<v1::ClusterPropagationPolicy> {
        let req = request.into_inner();
        let admit = |current: &v1::ClusterPropagationPolicy, new| {
            self.admission()
                .cluster_propagation_policy(Some(new), Some(current))
        };
        let policy = req.cluster_propagation_policy;
        ok(self
            .update(policy, "clusterPropagationPolicy", false, admit)
            .await)
    }

    async fn delete_cluster_propagation_policy(
        &self,
        request: Request<v1::DeleteClusterPropagationPolicyRequest>,
    ) -> Result<v1::DeleteClusterPropagationPolicyResponse> {
        ok(self.delete(request.into_inner(), NoHold).await)
    }

    type WatchClusterPropagationPoliciesStream =
        WatchResponseStream<v1::WatchClusterPropagationPoliciesResponse>;

    async fn watch_cluster_propagation_policies(
        &self,
        request: Request<v1::WatchClusterPropagationPoliciesRequest>,
    ) -> Result<Self::WatchClusterPropagationPoliciesStream> {
        ok(self.watch(request.into_inner()).await)
    }

    // --- Secret (member credentials): values are accepted, stored, and never answered

    async fn create_secret(&self, request: Request<v1::CreateSecretRequest>) -> Result<v1::Secret> {
        let mut secret = request.into_inner().secret;
        ok(async {
            if let Some(s) = secret.as_mut() {
                reset_for_create(s)?;
            }
            let secret = self.admission().secret(secret)?;
            self.objects().create(secret).await.map(redact)
        }
        .await)
    }

    async fn get_secret(&self, request: Request<v1::GetSecretRequest>) -> Result<v1::Secret> {
        ok(self.get(request.into_inner()).await.map(redact))
    }

    async fn list_secrets(
        &self,
        request: Request<v1::ListSecretsRequest>,
    ) -> Result<v1::ListSecretsResponse> {
        ok(self.list(request.into_inner()).await.map(|mut page| {
            page.items = page.items.into_iter().map(redact).collect();
            page
        }))
    }

    async fn update_secret(&self, request: Request<v1::UpdateSecretRequest>) -> Result<v1::Secret> {
        let admit = |_: &v1::Secret, new| self.admission().secret(Some(new));
        ok(self
            .update(request.into_inner().secret, "secret", true, admit)
            .await
            .map(redact))
    }

    async fn delete_secret(
        &self,
        request: Request<v1::DeleteSecretRequest>,
    ) -> Result<v1::DeleteSecretResponse> {
        ok(self
            .delete(request.into_inner(), NoHold)
            .await
            .map(|mut r| {
                r.secret = r.secret.map(redact);
                r
            }))
    }

    // --- OverridePolicy and ClusterOverridePolicy (OV-1 admission)

    async fn create_override_policy(
        &self,
        request: Request<v1::CreateOverridePolicyRequest>,
    ) -> Result<v1::OverridePolicy> {
        ok(self
            .create_override(request.into_inner().override_policy, false)
            .await)
    }

    async fn get_override_policy(
        &self,
        request: Request<v1::GetOverridePolicyRequest>,
    ) -> Result<v1::OverridePolicy> {
        ok(self.get(request.into_inner()).await)
    }

    async fn list_override_policies(
        &self,
        request: Request<v1::ListOverridePoliciesRequest>,
    ) -> Result<v1::ListOverridePoliciesResponse> {
        ok(self.list(request.into_inner()).await)
    }

    async fn update_override_policy(
        &self,
        request: Request<v1::UpdateOverridePolicyRequest>,
    ) -> Result<v1::OverridePolicy> {
        ok(self
            .update_override(request.into_inner().override_policy, false)
            .await)
    }

    async fn delete_override_policy(
        &self,
        request: Request<v1::DeleteOverridePolicyRequest>,
    ) -> Result<v1::DeleteOverridePolicyResponse> {
        ok(self.delete(request.into_inner(), NoHold).await)
    }

    type WatchOverridePoliciesStream = WatchResponseStream<v1::WatchOverridePoliciesResponse>;

    async fn watch_override_policies(
        &self,
        request: Request<v1::WatchOverridePoliciesRequest>,
    ) -> Result<Self::WatchOverridePoliciesStream> {
        ok(self.watch(request.into_inner()).await)
    }

    async fn create_cluster_override_policy(
        &self,
        request: Request<v1::CreateClusterOverridePolicyRequest>,
    ) -> Result<v1::ClusterOverridePolicy> {
        let policy = request.into_inner().cluster_override_policy;
        ok(self.create_override(policy, true).await)
    }

    async fn get_cluster_override_policy(
        &self,
        request: Request<v1::GetClusterOverridePolicyRequest>,
    ) -> Result<v1::ClusterOverridePolicy> {
        ok(self.get(request.into_inner()).await)
    }

    async fn list_cluster_override_policies(
        &self,
        request: Request<v1::ListClusterOverridePoliciesRequest>,
    ) -> Result<v1::ListClusterOverridePoliciesResponse> {
        ok(self.list(request.into_inner()).await)
    }

    async fn update_cluster_override_policy(
        &self,
        request: Request<v1::UpdateClusterOverridePolicyRequest>,
    ) -> Result<v1::ClusterOverridePolicy> {
        let policy = request.into_inner().cluster_override_policy;
        ok(self.update_override(policy, true).await)
    }

    async fn delete_cluster_override_policy(
        &self,
        request: Request<v1::DeleteClusterOverridePolicyRequest>,
    ) -> Result<v1::DeleteClusterOverridePolicyResponse> {
        ok(self.delete(request.into_inner(), NoHold).await)
    }

    type WatchClusterOverridePoliciesStream =
        WatchResponseStream<v1::WatchClusterOverridePoliciesResponse>;

    async fn watch_cluster_override_policies(
        &self,
        request: Request<v1::WatchClusterOverridePoliciesRequest>,
    ) -> Result<Self::WatchClusterOverridePoliciesStream> {
        ok(self.watch(request.into_inner()).await)
    }

    // --- ClusterTaintPolicy

    async fn create_cluster_taint_policy(
        &self,
        request: Request<v1::CreateClusterTaintPolicyRequest>,
    ) -> Result<v1::ClusterTaintPolicy> {
        let policy = request.into_inner().cluster_taint_policy;
        ok(self.create_cluster_taint_policy_admitted(policy).await)
    }

    async fn get_cluster_taint_policy(
        &self,
        request: Request<v1::GetClusterTaintPolicyRequest>,
    ) -> Result<v1::ClusterTaintPolicy> {
        ok(self.get(request.into_inner()).await)
    }

    async fn list_cluster_taint_policies(
        &self,
        request: Request<v1::ListClusterTaintPoliciesRequest>,
    ) -> Result<v1::ListClusterTaintPoliciesResponse> {
        ok(self.list(request.into_inner()).await)
    }

    async fn update_cluster_taint_policy(
        &self,
        request: Request<v1::UpdateClusterTaintPolicyRequest>,
    ) -> Result<v1::ClusterTaintPolicy> {
        let policy = request.into_inner().cluster_taint_policy;
        ok(self.update_cluster_taint_policy_admitted(policy).await)
    }

    async fn delete_cluster_taint_policy(
        &self,
        request: Request<v1::DeleteClusterTaintPolicyRequest>,
    ) -> Result<v1::DeleteClusterTaintPolicyResponse> {
        ok(self.delete(request.into_inner(), NoHold).await)
    }

    type WatchClusterTaintPoliciesStream =
        WatchResponseStream<v1::WatchClusterTaintPoliciesResponse>;

    async fn watch_cluster_taint_policies(
        &self,
        request: Request<v1::WatchClusterTaintPoliciesRequest>,
    ) -> Result<Self::WatchClusterTaintPoliciesStream> {
        ok(self.watch(request.into_inner()).await)
    }

    // --- Workload

    async fn create_workload(
        &self,
        request: Request<v1::CreateWorkloadRequest>,
    ) -> Result<v1::Workload> {
        let req = request.into_inner();
        ok(async {
            let mut workload = req.workload;
            if let Some(w) = workload.as_mut() {
                reset_for_create(w)?;
            }
            let workload = self.admission().workload(workload)?;
            self.objects().create(workload).await
        }
        .await)
    }

    async fn get_workload(&self, request: Request<v1::GetWorkloadRequest>) -> Result<v1::Workload> {
        ok(self.get(request.into_inner()).await)
    }

    async fn list_workloads(
        &self,
        request: Request<v1::ListWorkloadsRequest>,
    ) -> Result<v1::ListWorkloadsResponse> {
        ok(self.list(request.into_inner()).await)
    }

    async fn update_workload(
        &self,
        request: Request<v1::UpdateWorkloadRequest>,
    ) -> Result<v1::Workload> {
        ok(self
            .update_workload_admitted(request.into_inner().workload)
            .await)
    }

    async fn delete_workload(
        &self,
        request: Request<v1::DeleteWorkloadRequest>,
    ) -> Result<v1::DeleteWorkloadResponse> {
        ok(self.delete(request.into_inner(), NoHold).await)
    }

    type WatchWorkloadsStream = WatchResponseStream<v1::WatchWorkloadsResponse>;

    async fn watch_workloads(
        &self,
        request: Request<v1::WatchWorkloadsRequest>,
    ) -> Result<Self::WatchWorkloadsStream> {
        ok(self.watch(request.into_inner()).await)
    }

    // --- read-only kinds: the detector and the controllers write them

    async fn get_resource_binding(
        &self,
        request: Request<v1::GetResourceBindingRequest>,
    ) -> Result<v1::ResourceBinding> {
        ok(self.get(request.into_inner()).await)
    }

    async fn list_resource_bindings(
        &self,
        request: Request<v1::ListResourceBindingsRequest>,
    ) -> Result<v1::ListResourceBindingsResponse> {
        ok(self.list(request.into_inner()).await)
    }

    type WatchResourceBindingsStream = WatchResponseStream<v1::WatchResourceBindingsResponse>;

    async fn watch_resource_bindings(
        &self,
        request: Request<v1::WatchResourceBindingsRequest>,
    ) -> Result<Self::WatchResourceBindingsStream> {
        ok(self.watch(request.into_inner()).await)
    }

    async fn get_work(&self, request: Request<v1::GetWorkRequest>) -> Result<v1::Work> {
        ok(self.get(request.into_inner()).await)
    }

    async fn list_works(
        &self,
        request: Request<v1::ListWorksRequest>,
    ) -> Result<v1::ListWorksResponse> {
        ok(self.list(request.into_inner()).await)
    }

    type WatchWorksStream = WatchResponseStream<v1::WatchWorksResponse>;

    async fn watch_works(
        &self,
        request: Request<v1::WatchWorksRequest>,
    ) -> Result<Self::WatchWorksStream> {
        ok(self.watch(request.into_inner()).await)
    }

    async fn apply(&self, request: Request<v1::ApplyRequest>) -> Result<v1::ApplyResponse> {
        ok(self.apply_objects(request.into_inner()).await)
    }

    async fn get_peers(
        &self,
        _request: Request<v1::GetPeersRequest>,
    ) -> Result<v1::GetPeersResponse> {
        Ok(Response::new(v1::GetPeersResponse {
            peers: self.inner.peers.clone().into_iter().collect(),
        }))
    }

    async fn get_event(&self, request: Request<v1::GetEventRequest>) -> Result<v1::Event> {
        ok(self.get(request.into_inner()).await)
    }

    async fn list_events(
        &self,
        request: Request<v1::ListEventsRequest>,
    ) -> Result<v1::ListEventsResponse> {
        ok(self.list(request.into_inner()).await)
    }

    type WatchEventsStream = WatchResponseStream<v1::WatchEventsResponse>;

    async fn watch_events(
        &self,
        request: Request<v1::WatchEventsRequest>,
    ) -> Result<Self::WatchEventsStream> {
        ok(self.watch(request.into_inner()).await)
    }
}
