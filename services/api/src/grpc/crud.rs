//! The handlers' shared halves: [`ApiService`]'s generic Get, List, Watch, Delete and
//! Update over the request traits of [`crate::requests`], and the hold on a cluster's
//! deletion.

use std::sync::Arc;

use flotilla_core::overrides::OverridePolicy;
use flotilla_proto::Resource;
use flotilla_proto::v1;
use flotilla_runtime::reflector::Cache;
use flotilla_store::typed::Stored;
use flotilla_store::typed::{namespaced_key, works_on_cluster_prefix};
use flotilla_store::{RangeRequest, StoreRef};

use super::{ApiParts, ApiService};
use crate::admission::Admission;
use crate::detector::BY_CLUSTER;
use crate::error::Error;
use crate::kinds::ApiKind;
use crate::objects::{AsyncHold, Objects, carry_server_meta, reset_for_create};
use crate::requests::{DeleteRequest, ListRequest, Named, WatchRequest, key_part};
use crate::selector::Selector;
use crate::watch::{ValueFilter, WatchResponseStream, WatchSpec, watch};

pub(super) fn meta_of<R: Resource>(obj: &Option<R>) -> (String, String, i64, String) {
    let meta = obj
        .as_ref()
        .and_then(|o| o.meta())
        .cloned()
        .unwrap_or_default();
    (meta.namespace, meta.name, meta.resource_version, meta.uid)
}

/// A DeleteCluster is only a mark while bindings or Works still reference the cluster
/// (A2 / CH-15: cluster-health then adds `cluster.karmada.io/terminating:NoExecute` and
/// removes the cluster once nothing references it).
struct ClusterHold {
    bindings: Cache<v1::ResourceBinding>,
    store: StoreRef,
}

impl AsyncHold<v1::Cluster> for ClusterHold {
    async fn hold(&self, current: &v1::Cluster) -> Result<bool, Error> {
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

/// A policy kind and its cluster-wide twin, each a stored kind that converts to the one
/// domain type `D`: `PolicyKind<OverridePolicy>` for OverridePolicy and
/// ClusterOverridePolicy, `PolicyKind<PropagationPolicy>` for PropagationPolicy and
/// ClusterPropagationPolicy.
pub(super) trait PolicyKind<D>:
    ApiKind + TryInto<D, Error = flotilla_proto::convert::ConvertError> + From<D>
{
}

impl<K, D> PolicyKind<D> for K where
    K: ApiKind + TryInto<D, Error = flotilla_proto::convert::ConvertError> + From<D>
{
}

// === impl ApiService ===

impl ApiService {
    /// A service over `parts`.
    pub fn new(parts: ApiParts) -> Self {
        ApiService {
            inner: Arc::new(parts),
        }
    }

    pub(super) fn objects(&self) -> &Objects {
        &self.inner.objects
    }

    pub(super) fn admission(&self) -> &Admission {
        &self.inner.admission
    }

    pub(super) async fn get<Q: Named>(&self, request: Q) -> Result<Q::Kind, Error> {
        self.objects().get(&request.key()?).await
    }

    pub(super) async fn list<Q: ListRequest>(&self, request: Q) -> Result<Q::Response, Error> {
        let scope = request.scope()?;
        let filter = |o: &Q::Kind| scope.filter.as_ref().is_none_or(|f| f(o));
        let page = self
            .objects()
            .list(&scope.prefix, request.params(), filter)
            .await?;
        Ok(Q::respond(page))
    }

    pub(super) async fn watch<Q: WatchRequest>(
        &self,
        request: Q,
    ) -> Result<WatchResponseStream<<Q::Kind as ApiKind>::WatchResponse>, Error> {
        let scope = request.scope()?;
        let selector =
            Selector::parse(request.label_selector(), "labelSelector").map_err(Error::Invalid)?;
        let filter: Option<ValueFilter<Q::Kind>> = match (selector.is_empty(), scope.filter) {
            (true, extra) => extra,
            (false, extra) => Some(Arc::new(move |obj: &Q::Kind| {
                obj.meta().is_some_and(|m| selector.matches(&m.labels))
                    && extra.as_ref().is_none_or(|f| f(obj))
            })),
        };
        watch(
            self.objects().store().clone(),
            WatchSpec {
                prefix: scope.prefix,
                resource_version: request.resource_version(),
                filter,
                bookmarks: request
                    .allow_bookmarks()
                    .then_some(self.inner.bookmark_interval),
            },
            self.inner.shutdown.clone(),
        )
        .await
    }

    pub(super) async fn delete<Q: DeleteRequest>(
        &self,
        request: Q,
        hold: impl AsyncHold<Q::Kind>,
    ) -> Result<Q::Response, Error> {
        let (object, deleted) = self
            .objects()
            .delete(&request.key()?, request.preconditions(), hold)
            .await?;
        Ok(Q::respond(object, deleted))
    }

    /// An update of the object in a request (its `field`): the key from its metadata, then
    /// `admit(current, new)` on the stored object with the server's metadata carried over.
    pub(super) async fn update<R: ApiKind>(
        &self,
        object: Option<R>,
        field: &str,
        namespaced: bool,
        admit: impl Fn(&R, R) -> Result<R, Error>,
    ) -> Result<R, Error> {
        let (ns, name, rv, uid) = meta_of(&object);
        let key = if namespaced {
            let ns = key_part(&ns, "metadata.namespace")?;
            namespaced_key(R::PREFIX, ns, key_part(&name, "metadata.name")?)
        } else {
            format!("{}{}", R::PREFIX, key_part(&name, "metadata.name")?)
        };
        let Some(object) = object else {
            return Err(Error::required(field, "the object is required"));
        };
        self.objects()
            .update(&key, rv, &uid, |current: &R| {
                let mut new = object.clone();
                carry_server_meta(current, &mut new);
                admit(current, new)
            })
            .await
    }

    /// Create of a Cluster.
    pub(super) async fn create_cluster_admitted(
        &self,
        cluster: Option<v1::Cluster>,
    ) -> Result<v1::Cluster, Error> {
        let mut cluster = self.admission().cluster(cluster)?;
        reset_for_create(&mut cluster)?;
        self.objects().create(cluster).await
    }

    /// Delete of a Cluster: only a mark while bindings or Works reference it.
    pub(super) async fn delete_cluster_held(
        &self,
        request: v1::DeleteClusterRequest,
    ) -> Result<v1::DeleteClusterResponse, Error> {
        let hold = ClusterHold {
            bindings: self.inner.bindings.clone(),
            store: self.objects().store().clone(),
        };
        let answer = self.delete(request, hold).await;
        if let Ok(r) = &answer
            && !r.deleted
        {
            let name = r.cluster.as_ref().map_or("", |c| c.name());
            tracing::info!(
                cluster = name,
                "cluster marked for deletion: bindings or Works still reference it"
            );
        }
        answer
    }

    /// Create of an OverridePolicy or ClusterOverridePolicy (OV-1 admission).
    pub(super) async fn create_override<K: PolicyKind<OverridePolicy>>(
        &self,
        policy: Option<K>,
        cluster_wide: bool,
    ) -> Result<K, Error> {
        let admit = |p| self.admission().override_policy(p, cluster_wide);
        self.create_with(policy, admit).await
    }

    /// Create of an object: its server-owned metadata refused or cleared
    /// ([`reset_for_create`]), then `admit` (default and validate), then the guarded create.
    pub(super) async fn create_with<K: ApiKind>(
        &self,
        object: Option<K>,
        admit: impl FnOnce(Option<K>) -> Result<K, Error>,
    ) -> Result<K, Error> {
        let mut object = object;
        if let Some(o) = object.as_mut() {
            reset_for_create(o)?;
        }
        self.objects().create(admit(object)?).await
    }

    /// Update of an OverridePolicy or ClusterOverridePolicy.
    pub(super) async fn update_override<K: PolicyKind<OverridePolicy>>(
        &self,
        policy: Option<K>,
        cluster_wide: bool,
    ) -> Result<K, Error> {
        let admit = |_: &K, new| self.admission().override_policy(Some(new), cluster_wide);
        let fields = ["overridePolicy", "clusterOverridePolicy"];
        self.update_policy(policy, cluster_wide, fields, admit)
            .await
    }

    /// Update of a policy (`cluster_wide == false`; the request's field `fields[0]`) or of
    /// its cluster-wide twin (`fields[1]`).
    pub(super) async fn update_policy<K: ApiKind>(
        &self,
        policy: Option<K>,
        cluster_wide: bool,
        [field, cluster_field]: [&str; 2],
        admit: impl Fn(&K, K) -> Result<K, Error>,
    ) -> Result<K, Error> {
        let field = if cluster_wide { cluster_field } else { field };
        self.update(policy, field, !cluster_wide, admit).await
    }

    /// Create of a ClusterTaintPolicy, checked against the stored ones (CH-16).
    pub(super) async fn create_cluster_taint_policy_admitted(
        &self,
        policy: Option<v1::ClusterTaintPolicy>,
    ) -> Result<v1::ClusterTaintPolicy, Error> {
        let mut policy = policy;
        if let Some(p) = policy.as_mut() {
            reset_for_create(p)?;
        }
        let others = self.cluster_taint_policies().await?;
        let policy = self.admission().cluster_taint_policy(policy, &others)?;
        self.objects().create(policy).await
    }

    /// Update of a ClusterTaintPolicy, checked against the other stored ones (CH-16).
    pub(super) async fn update_cluster_taint_policy_admitted(
        &self,
        policy: Option<v1::ClusterTaintPolicy>,
    ) -> Result<v1::ClusterTaintPolicy, Error> {
        // the request's own checks before the listing that admission compares with
        let (_, name, _, _) = meta_of(&policy);
        key_part(&name, "metadata.name")?;
        if policy.is_none() {
            return Err(Error::required(
                "clusterTaintPolicy",
                "the object is required",
            ));
        }
        let others = self.cluster_taint_policies().await?;
        let admit = |_: &v1::ClusterTaintPolicy, new| {
            self.admission().cluster_taint_policy(Some(new), &others)
        };
        self.update(policy, "clusterTaintPolicy", false, admit)
            .await
    }

    /// Update of a workload: admission fills its identity in from the manifest, and the key
    /// needs it.
    pub(super) async fn update_workload_admitted(
        &self,
        workload: Option<v1::Workload>,
    ) -> Result<v1::Workload, Error> {
        let (_, _, rv, uid) = meta_of(&workload);
        let admitted = self.admission().workload(workload)?;
        key_part(admitted.name(), "metadata.name")?;
        key_part(&admitted.kind, "kind")?;
        self.objects()
            .update(&admitted.key(), rv, &uid, |current: &v1::Workload| {
                let mut new = admitted.clone();
                carry_server_meta(current, &mut new);
                new.status.clone_from(&current.status);
                Ok(new)
            })
            .await
    }

    pub(super) async fn cluster_taint_policies(
        &self,
    ) -> Result<Vec<v1::ClusterTaintPolicy>, Error> {
        Ok(self
            .objects()
            .typed()
            .list::<v1::ClusterTaintPolicy>(None)
            .await?
            .0)
    }
}
