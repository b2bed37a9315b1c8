//! `flotilla.v1.Api`: CRUD and watch over the store, every handler being convert → admit
//! (default + validate) → guarded write → convert, with errors mapped in one place
//! (`impl From<Error> for tonic::Status`).
//!
//! Field paths in INVALID_ARGUMENT details are relative to the object in the request
//! (`metadata.name`, `spec.taints[0].effect`), or to the request itself for its own fields
//! (`pageSize`, `labelSelector`, `resourceVersion`, `name`).

use std::sync::Arc;
use std::time::Duration;

use flotilla_core::validation::{FieldPath, check_cluster_name, check_dns1123_label};
use flotilla_proto::Resource;
use flotilla_proto::v1::{self, api_server::Api};
use flotilla_runtime::Shutdown;
use flotilla_runtime::reflector::Cache;
use flotilla_store::typed::{
    Stored, namespaced_key, work_key, workload_key, works_on_cluster_prefix,
};
use flotilla_store::{RangeRequest, StoreRef};
use tonic::{Request, Response, Status};

use crate::admission::Admission;
use crate::detector::BY_CLUSTER;
use crate::error::Error;
use crate::kinds::ApiKind;
use crate::objects::{
    AsyncHold, ListParams, NoHold, Objects, Page, carry_server_meta, reset_for_create,
};
use crate::selector::Selector;
use crate::watch::{ValueFilter, WatchResponseStream, WatchSpec, watch};

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
}

// ---------------------------------------------------------------------------------------
// Request checks
// ---------------------------------------------------------------------------------------

/// A name used in a key: required and free of `/`.
fn key_part<'a>(value: &'a str, field: &str) -> std::result::Result<&'a str, Error> {
    if value.is_empty() {
        return Err(Error::required(field, "required"));
    }
    if value.contains('/') || value.chars().any(char::is_control) {
        return Err(Error::invalid(
            field,
            format!("{value:?} is not a valid name"),
        ));
    }
    Ok(value)
}

/// An optional namespace filter: empty, or a DNS-1123 label.
fn namespace_filter(value: &str, field: &str) -> std::result::Result<(), Error> {
    if value.is_empty() {
        return Ok(());
    }
    check_dns1123_label(value).map_err(|e| Error::Invalid(vec![e.at(&FieldPath::new(field))]))
}

/// An optional cluster filter: empty, or a cluster name.
fn cluster_filter(value: &str, field: &str) -> std::result::Result<(), Error> {
    if value.is_empty() {
        return Ok(());
    }
    check_cluster_name(value).map_err(|e| Error::Invalid(vec![e.at(&FieldPath::new(field))]))
}

/// `prefix` plus `namespace/` when a namespace is given.
fn under(prefix: &str, namespace: &str) -> String {
    if namespace.is_empty() {
        prefix.to_owned()
    } else {
        format!("{prefix}{namespace}/")
    }
}

fn meta_of<R: Resource>(obj: &Option<R>) -> (String, String, i64, String) {
    let meta = obj
        .as_ref()
        .and_then(|o| o.meta())
        .cloned()
        .unwrap_or_default();
    (meta.namespace, meta.name, meta.resource_version, meta.uid)
}

fn binding_involves(b: &v1::ResourceBinding, cluster: &str) -> bool {
    b.spec.as_ref().is_some_and(|s| {
        s.clusters.iter().any(|t| t.name == cluster)
            || s.graceful_eviction_tasks
                .iter()
                .any(|t| t.from_cluster == cluster)
    })
}

/// A DeleteCluster is only a mark while bindings or Works still reference the cluster
/// (A2 / CH-15: cluster-health then adds `cluster.karmada.io/terminating:NoExecute` and
/// removes the cluster once nothing references it).
struct ClusterHold {
    bindings: Cache<v1::ResourceBinding>,
    store: StoreRef,
}

impl AsyncHold<v1::Cluster> for ClusterHold {
    async fn hold(&self, current: &v1::Cluster) -> std::result::Result<bool, Error> {
        let name = current.name();
        // An unsynced cache would say "unreferenced" for every cluster.
        self.bindings.wait_until_ready().await;
        if !self.bindings.index_keys(BY_CLUSTER, name).is_empty() {
            return Ok(true);
        }
        let works = self
            .store
            .range(RangeRequest::prefix(works_on_cluster_prefix(name)).with_limit(1))
            .await?;
        Ok(!works.kvs.is_empty())
    }
}

// === impl ApiService ===

impl ApiService {
    /// A service over `objects`, admitting with `admission`; `bindings` is a synced cache of
    /// the bindings indexed by cluster (the detector's); watches end on `shutdown`.
    pub fn new(
        objects: Objects,
        admission: Admission,
        bindings: Cache<v1::ResourceBinding>,
        shutdown: Shutdown,
        bookmark_interval: Duration,
    ) -> Self {
        ApiService {
            inner: Arc::new(Inner {
                objects,
                admission,
                bindings,
                shutdown,
                bookmark_interval,
            }),
        }
    }

    fn objects(&self) -> &Objects {
        &self.inner.objects
    }

    fn admission(&self) -> &Admission {
        &self.inner.admission
    }

    async fn list<R: ApiKind>(
        &self,
        prefix: &str,
        params: ListParams<'_>,
        filter: impl Fn(&R) -> bool,
    ) -> std::result::Result<Page<R>, Error> {
        self.objects().list(prefix, params, filter).await
    }

    async fn watch<R: ApiKind>(
        &self,
        prefix: String,
        resource_version: i64,
        allow_bookmarks: bool,
        label_selector: &str,
        extra: Option<ValueFilter<R>>,
    ) -> std::result::Result<WatchResponseStream<R::WatchResponse>, Error> {
        let selector = Selector::parse(label_selector, "labelSelector").map_err(Error::Invalid)?;
        let filter: Option<ValueFilter<R>> = match (selector.is_empty(), extra) {
            (true, extra) => extra,
            (false, extra) => Some(Arc::new(move |obj: &R| {
                obj.meta().is_some_and(|m| selector.matches(&m.labels))
                    && extra.as_ref().is_none_or(|f| f(obj))
            })),
        };
        watch(
            self.objects().store().clone(),
            WatchSpec {
                prefix,
                resource_version,
                filter,
                bookmarks: allow_bookmarks.then_some(self.inner.bookmark_interval),
            },
            self.inner.shutdown.clone(),
        )
        .await
    }

    async fn cluster_taint_policies(
        &self,
    ) -> std::result::Result<Vec<v1::ClusterTaintPolicy>, Error> {
        Ok(self
            .objects()
            .typed()
            .list::<v1::ClusterTaintPolicy>(None)
            .await?
            .0)
    }
}

fn ok<T>(value: std::result::Result<T, Error>) -> Result<T> {
    value.map(Response::new).map_err(Status::from)
}

#[tonic::async_trait]
impl Api for ApiService {
    // ---------------------------------------------------------------------------------
    // Cluster
    // ---------------------------------------------------------------------------------

    async fn create_cluster(
        &self,
        request: Request<v1::CreateClusterRequest>,
    ) -> Result<v1::Cluster> {
        let req = request.into_inner();
        ok(async {
            let mut cluster = self.admission().cluster(req.cluster)?;
            reset_for_create(&mut cluster)?;
            self.objects().create(cluster).await
        }
        .await)
    }

    async fn get_cluster(&self, request: Request<v1::GetClusterRequest>) -> Result<v1::Cluster> {
        let req = request.into_inner();
        ok(async {
            let name = key_part(&req.name, "name")?;
            self.objects()
                .get(&format!("{}{name}", v1::Cluster::PREFIX))
                .await
        }
        .await)
    }

    async fn list_clusters(
        &self,
        request: Request<v1::ListClustersRequest>,
    ) -> Result<v1::ListClustersResponse> {
        let req = request.into_inner();
        ok(async {
            let page = self
                .list::<v1::Cluster>(
                    v1::Cluster::PREFIX,
                    ListParams {
                        page_size: req.page_size,
                        page_token: &req.page_token,
                        label_selector: &req.label_selector,
                    },
                    |_| true,
                )
                .await?;
            Ok(v1::ListClustersResponse {
                items: page.items,
                next_page_token: page.next_page_token,
                resource_version: page.resource_version,
            })
        }
        .await)
    }

    async fn update_cluster(
        &self,
        request: Request<v1::UpdateClusterRequest>,
    ) -> Result<v1::Cluster> {
        let req = request.into_inner();
        ok(async {
            let (_, name, rv, uid) = meta_of(&req.cluster);
            let name = key_part(&name, "metadata.name")?;
            let Some(cluster) = req.cluster else {
                return Err(Error::required("cluster", "the object is required"));
            };
            self.objects()
                .update(
                    &format!("{}{name}", v1::Cluster::PREFIX),
                    rv,
                    &uid,
                    |current: &v1::Cluster| {
                        let mut new = cluster.clone();
                        carry_server_meta(current, &mut new);
                        self.admission().cluster_update(current, new)
                    },
                )
                .await
        }
        .await)
    }

    async fn delete_cluster(
        &self,
        request: Request<v1::DeleteClusterRequest>,
    ) -> Result<v1::DeleteClusterResponse> {
        let req = request.into_inner();
        ok(async {
            let name = key_part(&req.name, "name")?;
            let hold = ClusterHold {
                bindings: self.inner.bindings.clone(),
                store: self.objects().store().clone(),
            };
            let (cluster, deleted) = self
                .objects()
                .delete(
                    &format!("{}{name}", v1::Cluster::PREFIX),
                    req.preconditions.as_ref(),
                    hold,
                )
                .await?;
            if !deleted {
                tracing::info!(
                    cluster = name,
                    "cluster marked for deletion: bindings or Works still reference it"
                );
            }
            Ok(v1::DeleteClusterResponse {
                cluster: Some(cluster),
                deleted,
            })
        }
        .await)
    }

    type WatchClustersStream = WatchResponseStream<v1::WatchClustersResponse>;

    async fn watch_clusters(
        &self,
        request: Request<v1::WatchClustersRequest>,
    ) -> Result<Self::WatchClustersStream> {
        let req = request.into_inner();
        ok(self
            .watch::<v1::Cluster>(
                v1::Cluster::PREFIX.to_owned(),
                req.resource_version,
                req.allow_bookmarks,
                &req.label_selector,
                None,
            )
            .await)
    }

    // ---------------------------------------------------------------------------------
    // PropagationPolicy
    // ---------------------------------------------------------------------------------

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
        let req = request.into_inner();
        ok(async {
            let ns = key_part(&req.namespace, "namespace")?;
            let name = key_part(&req.name, "name")?;
            self.objects()
                .get(&namespaced_key(v1::PropagationPolicy::PREFIX, ns, name))
                .await
        }
        .await)
    }

    async fn list_propagation_policies(
        &self,
        request: Request<v1::ListPropagationPoliciesRequest>,
    ) -> Result<v1::ListPropagationPoliciesResponse> {
        let req = request.into_inner();
        ok(async {
            namespace_filter(&req.namespace, "namespace")?;
            let page = self
                .list::<v1::PropagationPolicy>(
                    &under(v1::PropagationPolicy::PREFIX, &req.namespace),
                    ListParams {
                        page_size: req.page_size,
                        page_token: &req.page_token,
                        label_selector: &req.label_selector,
                    },
                    |_| true,
                )
                .await?;
            Ok(v1::ListPropagationPoliciesResponse {
                items: page.items,
                next_page_token: page.next_page_token,
                resource_version: page.resource_version,
            })
        }
        .await)
    }

    async fn update_propagation_policy(
        &self,
        request: Request<v1::UpdatePropagationPolicyRequest>,
    ) -> Result<v1::PropagationPolicy> {
        let req = request.into_inner();
        ok(async {
            let (ns, name, rv, uid) = meta_of(&req.propagation_policy);
            let ns = key_part(&ns, "metadata.namespace")?;
            let name = key_part(&name, "metadata.name")?;
            let Some(policy) = req.propagation_policy else {
                return Err(Error::required(
                    "propagationPolicy",
                    "the object is required",
                ));
            };
            self.objects()
                .update(
                    &namespaced_key(v1::PropagationPolicy::PREFIX, ns, name),
                    rv,
                    &uid,
                    |current: &v1::PropagationPolicy| {
                        let mut new = policy.clone();
                        carry_server_meta(current, &mut new);
                        self.admission()
                            .propagation_policy(Some(new), Some(current))
                    },
                )
                .await
        }
        .await)
    }

    async fn delete_propagation_policy(
        &self,
        request: Request<v1::DeletePropagationPolicyRequest>,
    ) -> Result<v1::DeletePropagationPolicyResponse> {
        let req = request.into_inner();
        ok(async {
            let ns = key_part(&req.namespace, "namespace")?;
            let name = key_part(&req.name, "name")?;
            let (policy, deleted) = self
                .objects()
                .delete(
                    &namespaced_key(v1::PropagationPolicy::PREFIX, ns, name),
                    req.preconditions.as_ref(),
                    NoHold,
                )
                .await?;
            Ok(v1::DeletePropagationPolicyResponse {
                propagation_policy: Some(policy),
                deleted,
            })
        }
        .await)
    }

    type WatchPropagationPoliciesStream = WatchResponseStream<v1::WatchPropagationPoliciesResponse>;

    async fn watch_propagation_policies(
        &self,
        request: Request<v1::WatchPropagationPoliciesRequest>,
    ) -> Result<Self::WatchPropagationPoliciesStream> {
        let req = request.into_inner();
        ok(async {
            namespace_filter(&req.namespace, "namespace")?;
            self.watch::<v1::PropagationPolicy>(
                under(v1::PropagationPolicy::PREFIX, &req.namespace),
                req.resource_version,
                req.allow_bookmarks,
                &req.label_selector,
                None,
            )
            .await
        }
        .await)
    }

    // ---------------------------------------------------------------------------------
    // ClusterPropagationPolicy
    // ---------------------------------------------------------------------------------

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
        let req = request.into_inner();
        ok(async {
            let name = key_part(&req.name, "name")?;
            self.objects()
                .get(&format!("{}{name}", v1::ClusterPropagationPolicy::PREFIX))
                .await
        }
        .await)
    }

    async fn list_cluster_propagation_policies(
        &self,
        request: Request<v1::ListClusterPropagationPoliciesRequest>,
    ) -> Result<v1::ListClusterPropagationPoliciesResponse> {
        let req = request.into_inner();
        ok(async {
            let page = self
                .list::<v1::ClusterPropagationPolicy>(
                    v1::ClusterPropagationPolicy::PREFIX,
                    ListParams {
                        page_size: req.page_size,
                        page_token: &req.page_token,
                        label_selector: &req.label_selector,
                    },
                    |_| true,
                )
                .await?;
            Ok(v1::ListClusterPropagationPoliciesResponse {
                items: page.items,
                next_page_token: page.next_page_token,
                resource_version: page.resource_version,
            })
        }
        .await)
    }

    async fn update_cluster_propagation_policy(
        &self,
        request: Request<v1::UpdateClusterPropagationPolicyRequest>,
    ) -> Result<v1::ClusterPropagationPolicy> {
        let req = request.into_inner();
        ok(async {
            let (_, name, rv, uid) = meta_of(&req.cluster_propagation_policy);
            let name = key_part(&name, "metadata.name")?;
            let Some(policy) = req.cluster_propagation_policy else {
                return Err(Error::required(
                    "clusterPropagationPolicy",
                    "the object is required",
                ));
            };
            self.objects()
                .update(
                    &format!("{}{name}", v1::ClusterPropagationPolicy::PREFIX),
                    rv,
                    &uid,
                    |current: &v1::ClusterPropagationPolicy| {
                        let mut new = policy.clone();
                        carry_server_meta(current, &mut new);
                        self.admission()
                            .cluster_propagation_policy(Some(new), Some(current))
                    },
                )
                .await
        }
        .await)
    }

    async fn delete_cluster_propagation_policy(
        &self,
        request: Request<v1::DeleteClusterPropagationPolicyRequest>,
    ) -> Result<v1::DeleteClusterPropagationPolicyResponse> {
        let req = request.into_inner();
        ok(async {
            let name = key_part(&req.name, "name")?;
            let (policy, deleted) = self
                .objects()
                .delete(
                    &format!("{}{name}", v1::ClusterPropagationPolicy::PREFIX),
                    req.preconditions.as_ref(),
                    NoHold,
                )
                .await?;
            Ok(v1::DeleteClusterPropagationPolicyResponse {
                cluster_propagation_policy: Some(policy),
                deleted,
            })
        }
        .await)
    }

    type WatchClusterPropagationPoliciesStream =
        WatchResponseStream<v1::WatchClusterPropagationPoliciesResponse>;

    async fn watch_cluster_propagation_policies(
        &self,
        request: Request<v1::WatchClusterPropagationPoliciesRequest>,
    ) -> Result<Self::WatchClusterPropagationPoliciesStream> {
        let req = request.into_inner();
        ok(self
            .watch::<v1::ClusterPropagationPolicy>(
                v1::ClusterPropagationPolicy::PREFIX.to_owned(),
                req.resource_version,
                req.allow_bookmarks,
                &req.label_selector,
                None,
            )
            .await)
    }

    // ---------------------------------------------------------------------------------
    // ClusterTaintPolicy
    // ---------------------------------------------------------------------------------

    async fn create_cluster_taint_policy(
        &self,
        request: Request<v1::CreateClusterTaintPolicyRequest>,
    ) -> Result<v1::ClusterTaintPolicy> {
        let req = request.into_inner();
        ok(async {
            let mut policy = req.cluster_taint_policy;
            if let Some(p) = policy.as_mut() {
                reset_for_create(p)?;
            }
            let others = self.cluster_taint_policies().await?;
            let policy = self.admission().cluster_taint_policy(policy, &others)?;
            self.objects().create(policy).await
        }
        .await)
    }

    async fn get_cluster_taint_policy(
        &self,
        request: Request<v1::GetClusterTaintPolicyRequest>,
    ) -> Result<v1::ClusterTaintPolicy> {
        let req = request.into_inner();
        ok(async {
            let name = key_part(&req.name, "name")?;
            self.objects()
                .get(&format!("{}{name}", v1::ClusterTaintPolicy::PREFIX))
                .await
        }
        .await)
    }

    async fn list_cluster_taint_policies(
        &self,
        request: Request<v1::ListClusterTaintPoliciesRequest>,
    ) -> Result<v1::ListClusterTaintPoliciesResponse> {
        let req = request.into_inner();
        ok(async {
            let page = self
                .list::<v1::ClusterTaintPolicy>(
                    v1::ClusterTaintPolicy::PREFIX,
                    ListParams {
                        page_size: req.page_size,
                        page_token: &req.page_token,
                        label_selector: &req.label_selector,
                    },
                    |_| true,
                )
                .await?;
            Ok(v1::ListClusterTaintPoliciesResponse {
                items: page.items,
                next_page_token: page.next_page_token,
                resource_version: page.resource_version,
            })
        }
        .await)
    }

    async fn update_cluster_taint_policy(
        &self,
        request: Request<v1::UpdateClusterTaintPolicyRequest>,
    ) -> Result<v1::ClusterTaintPolicy> {
        let req = request.into_inner();
        ok(async {
            let (_, name, rv, uid) = meta_of(&req.cluster_taint_policy);
            let name = key_part(&name, "metadata.name")?;
            let Some(policy) = req.cluster_taint_policy else {
                return Err(Error::required(
                    "clusterTaintPolicy",
                    "the object is required",
                ));
            };
            let others = self.cluster_taint_policies().await?;
            self.objects()
                .update(
                    &format!("{}{name}", v1::ClusterTaintPolicy::PREFIX),
                    rv,
                    &uid,
                    |current: &v1::ClusterTaintPolicy| {
                        let mut new = policy.clone();
                        carry_server_meta(current, &mut new);
                        self.admission().cluster_taint_policy(Some(new), &others)
                    },
                )
                .await
        }
        .await)
    }

    async fn delete_cluster_taint_policy(
        &self,
        request: Request<v1::DeleteClusterTaintPolicyRequest>,
    ) -> Result<v1::DeleteClusterTaintPolicyResponse> {
        let req = request.into_inner();
        ok(async {
            let name = key_part(&req.name, "name")?;
            let (policy, deleted) = self
                .objects()
                .delete(
                    &format!("{}{name}", v1::ClusterTaintPolicy::PREFIX),
                    req.preconditions.as_ref(),
                    NoHold,
                )
                .await?;
            Ok(v1::DeleteClusterTaintPolicyResponse {
                cluster_taint_policy: Some(policy),
                deleted,
            })
        }
        .await)
    }

    type WatchClusterTaintPoliciesStream =
        WatchResponseStream<v1::WatchClusterTaintPoliciesResponse>;

    async fn watch_cluster_taint_policies(
        &self,
        request: Request<v1::WatchClusterTaintPoliciesRequest>,
    ) -> Result<Self::WatchClusterTaintPoliciesStream> {
        let req = request.into_inner();
        ok(self
            .watch::<v1::ClusterTaintPolicy>(
                v1::ClusterTaintPolicy::PREFIX.to_owned(),
                req.resource_version,
                req.allow_bookmarks,
                &req.label_selector,
                None,
            )
            .await)
    }

    // ---------------------------------------------------------------------------------
    // Workload
    // ---------------------------------------------------------------------------------

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
        let req = request.into_inner();
        ok(async {
            let ns = key_part(&req.namespace, "namespace")?;
            let kind = key_part(&req.kind, "kind")?;
            let name = key_part(&req.name, "name")?;
            self.objects().get(&workload_key(ns, kind, name)).await
        }
        .await)
    }

    async fn list_workloads(
        &self,
        request: Request<v1::ListWorkloadsRequest>,
    ) -> Result<v1::ListWorkloadsResponse> {
        let req = request.into_inner();
        ok(async {
            namespace_filter(&req.namespace, "namespace")?;
            if !req.kind.is_empty() {
                key_part(&req.kind, "kind")?;
            }
            let prefix = match (req.namespace.is_empty(), req.kind.is_empty()) {
                (false, false) => {
                    format!("{}{}/{}/", v1::Workload::PREFIX, req.namespace, req.kind)
                }
                _ => under(v1::Workload::PREFIX, &req.namespace),
            };
            let kind = req.kind.clone();
            let page = self
                .list::<v1::Workload>(
                    &prefix,
                    ListParams {
                        page_size: req.page_size,
                        page_token: &req.page_token,
                        label_selector: &req.label_selector,
                    },
                    |w| kind.is_empty() || w.kind == kind,
                )
                .await?;
            Ok(v1::ListWorkloadsResponse {
                items: page.items,
                next_page_token: page.next_page_token,
                resource_version: page.resource_version,
            })
        }
        .await)
    }

    async fn update_workload(
        &self,
        request: Request<v1::UpdateWorkloadRequest>,
    ) -> Result<v1::Workload> {
        let req = request.into_inner();
        ok(async {
            let (_, _, rv, uid) = meta_of(&req.workload);
            // Admission fills the identity in from the manifest; the key needs it.
            let admitted = self.admission().workload(req.workload)?;
            let ns = key_part(admitted.namespace(), "metadata.namespace")?.to_owned();
            let name = key_part(admitted.name(), "metadata.name")?.to_owned();
            let kind = key_part(&admitted.kind, "kind")?.to_owned();
            self.objects()
                .update(
                    &workload_key(&ns, &kind, &name),
                    rv,
                    &uid,
                    |current: &v1::Workload| {
                        let mut new = admitted.clone();
                        carry_server_meta(current, &mut new);
                        Ok(new)
                    },
                )
                .await
        }
        .await)
    }

    async fn delete_workload(
        &self,
        request: Request<v1::DeleteWorkloadRequest>,
    ) -> Result<v1::DeleteWorkloadResponse> {
        let req = request.into_inner();
        ok(async {
            let ns = key_part(&req.namespace, "namespace")?;
            let kind = key_part(&req.kind, "kind")?;
            let name = key_part(&req.name, "name")?;
            let (workload, deleted) = self
                .objects()
                .delete(
                    &workload_key(ns, kind, name),
                    req.preconditions.as_ref(),
                    NoHold,
                )
                .await?;
            Ok(v1::DeleteWorkloadResponse {
                workload: Some(workload),
                deleted,
            })
        }
        .await)
    }

    type WatchWorkloadsStream = WatchResponseStream<v1::WatchWorkloadsResponse>;

    async fn watch_workloads(
        &self,
        request: Request<v1::WatchWorkloadsRequest>,
    ) -> Result<Self::WatchWorkloadsStream> {
        let req = request.into_inner();
        ok(async {
            namespace_filter(&req.namespace, "namespace")?;
            if !req.kind.is_empty() {
                key_part(&req.kind, "kind")?;
            }
            let prefix = match (req.namespace.is_empty(), req.kind.is_empty()) {
                (false, false) => {
                    format!("{}{}/{}/", v1::Workload::PREFIX, req.namespace, req.kind)
                }
                _ => under(v1::Workload::PREFIX, &req.namespace),
            };
            let extra: Option<ValueFilter<v1::Workload>> =
                if req.kind.is_empty() || !req.namespace.is_empty() {
                    None
                } else {
                    let kind = req.kind.clone();
                    Some(Arc::new(move |w: &v1::Workload| w.kind == kind))
                };
            self.watch(
                prefix,
                req.resource_version,
                req.allow_bookmarks,
                &req.label_selector,
                extra,
            )
            .await
        }
        .await)
    }

    // ---------------------------------------------------------------------------------
    // ResourceBinding (read-only: the detector and the controllers write them)
    // ---------------------------------------------------------------------------------

    async fn get_resource_binding(
        &self,
        request: Request<v1::GetResourceBindingRequest>,
    ) -> Result<v1::ResourceBinding> {
        let req = request.into_inner();
        ok(async {
            let ns = key_part(&req.namespace, "namespace")?;
            let name = key_part(&req.name, "name")?;
            self.objects()
                .get(&namespaced_key(v1::ResourceBinding::PREFIX, ns, name))
                .await
        }
        .await)
    }

    async fn list_resource_bindings(
        &self,
        request: Request<v1::ListResourceBindingsRequest>,
    ) -> Result<v1::ListResourceBindingsResponse> {
        let req = request.into_inner();
        ok(async {
            namespace_filter(&req.namespace, "namespace")?;
            cluster_filter(&req.cluster, "cluster")?;
            let cluster = req.cluster.clone();
            let page = self
                .list::<v1::ResourceBinding>(
                    &under(v1::ResourceBinding::PREFIX, &req.namespace),
                    ListParams {
                        page_size: req.page_size,
                        page_token: &req.page_token,
                        label_selector: &req.label_selector,
                    },
                    |b| cluster.is_empty() || binding_involves(b, &cluster),
                )
                .await?;
            Ok(v1::ListResourceBindingsResponse {
                items: page.items,
                next_page_token: page.next_page_token,
                resource_version: page.resource_version,
            })
        }
        .await)
    }

    type WatchResourceBindingsStream = WatchResponseStream<v1::WatchResourceBindingsResponse>;

    async fn watch_resource_bindings(
        &self,
        request: Request<v1::WatchResourceBindingsRequest>,
    ) -> Result<Self::WatchResourceBindingsStream> {
        let req = request.into_inner();
        ok(async {
            namespace_filter(&req.namespace, "namespace")?;
            cluster_filter(&req.cluster, "cluster")?;
            let extra: Option<ValueFilter<v1::ResourceBinding>> = if req.cluster.is_empty() {
                None
            } else {
                let cluster = req.cluster.clone();
                Some(Arc::new(move |b: &v1::ResourceBinding| {
                    binding_involves(b, &cluster)
                }))
            };
            self.watch(
                under(v1::ResourceBinding::PREFIX, &req.namespace),
                req.resource_version,
                req.allow_bookmarks,
                &req.label_selector,
                extra,
            )
            .await
        }
        .await)
    }

    // ---------------------------------------------------------------------------------
    // Work (read-only here; pull agents watch their cluster's)
    // ---------------------------------------------------------------------------------

    async fn get_work(&self, request: Request<v1::GetWorkRequest>) -> Result<v1::Work> {
        let req = request.into_inner();
        ok(async {
            let cluster = key_part(&req.cluster, "cluster")?;
            let ns = key_part(&req.namespace, "namespace")?;
            let name = key_part(&req.name, "name")?;
            self.objects().get(&work_key(cluster, ns, name)).await
        }
        .await)
    }

    async fn list_works(
        &self,
        request: Request<v1::ListWorksRequest>,
    ) -> Result<v1::ListWorksResponse> {
        let req = request.into_inner();
        ok(async {
            namespace_filter(&req.namespace, "namespace")?;
            cluster_filter(&req.cluster, "cluster")?;
            let (prefix, ns) = works_prefix(&req.cluster, &req.namespace);
            let page = self
                .list::<v1::Work>(
                    &prefix,
                    ListParams {
                        page_size: req.page_size,
                        page_token: &req.page_token,
                        label_selector: &req.label_selector,
                    },
                    |w| ns.as_ref().is_none_or(|ns| w.namespace() == ns),
                )
                .await?;
            Ok(v1::ListWorksResponse {
                items: page.items,
                next_page_token: page.next_page_token,
                resource_version: page.resource_version,
            })
        }
        .await)
    }

    type WatchWorksStream = WatchResponseStream<v1::WatchWorksResponse>;

    async fn watch_works(
        &self,
        request: Request<v1::WatchWorksRequest>,
    ) -> Result<Self::WatchWorksStream> {
        let req = request.into_inner();
        ok(async {
            namespace_filter(&req.namespace, "namespace")?;
            cluster_filter(&req.cluster, "cluster")?;
            let (prefix, ns) = works_prefix(&req.cluster, &req.namespace);
            let extra: Option<ValueFilter<v1::Work>> = ns.map(|ns| {
                Arc::new(move |w: &v1::Work| w.namespace() == ns) as ValueFilter<v1::Work>
            });
            self.watch(
                prefix,
                req.resource_version,
                req.allow_bookmarks,
                &req.label_selector,
                extra,
            )
            .await
        }
        .await)
    }

    // ---------------------------------------------------------------------------------
    // Event (read-only)
    // ---------------------------------------------------------------------------------

    async fn get_event(&self, request: Request<v1::GetEventRequest>) -> Result<v1::Event> {
        let req = request.into_inner();
        ok(async {
            let ns = key_part(&req.namespace, "namespace")?;
            let name = key_part(&req.name, "name")?;
            self.objects()
                .get(&namespaced_key(v1::Event::PREFIX, ns, name))
                .await
        }
        .await)
    }

    async fn list_events(
        &self,
        request: Request<v1::ListEventsRequest>,
    ) -> Result<v1::ListEventsResponse> {
        let req = request.into_inner();
        ok(async {
            namespace_filter(&req.namespace, "namespace")?;
            let filter = involved_filter(&req.involved_object_kind, &req.involved_object_name);
            let page = self
                .list::<v1::Event>(
                    &under(v1::Event::PREFIX, &req.namespace),
                    ListParams {
                        page_size: req.page_size,
                        page_token: &req.page_token,
                        label_selector: &req.label_selector,
                    },
                    |e| filter.as_ref().is_none_or(|f| f(e)),
                )
                .await?;
            Ok(v1::ListEventsResponse {
                items: page.items,
                next_page_token: page.next_page_token,
                resource_version: page.resource_version,
            })
        }
        .await)
    }

    type WatchEventsStream = WatchResponseStream<v1::WatchEventsResponse>;

    async fn watch_events(
        &self,
        request: Request<v1::WatchEventsRequest>,
    ) -> Result<Self::WatchEventsStream> {
        let req = request.into_inner();
        ok(async {
            namespace_filter(&req.namespace, "namespace")?;
            self.watch(
                under(v1::Event::PREFIX, &req.namespace),
                req.resource_version,
                req.allow_bookmarks,
                &req.label_selector,
                involved_filter(&req.involved_object_kind, &req.involved_object_name),
            )
            .await
        }
        .await)
    }
}

/// The prefix of the Works of `cluster` (and `namespace`), and the namespace still to
/// filter by value when no cluster narrows the prefix.
fn works_prefix(cluster: &str, namespace: &str) -> (String, Option<String>) {
    if cluster.is_empty() {
        let ns = (!namespace.is_empty()).then(|| namespace.to_owned());
        (v1::Work::PREFIX.to_owned(), ns)
    } else {
        (under(&works_on_cluster_prefix(cluster), namespace), None)
    }
}

fn involved_filter(kind: &str, name: &str) -> Option<ValueFilter<v1::Event>> {
    if kind.is_empty() && name.is_empty() {
        return None;
    }
    let (kind, name) = (kind.to_owned(), name.to_owned());
    Some(Arc::new(move |e: &v1::Event| {
        let involved = e.involved_object.as_ref();
        (kind.is_empty() || involved.is_some_and(|o| o.kind == kind))
            && (name.is_empty() || involved.is_some_and(|o| o.name == name))
    }))
}
