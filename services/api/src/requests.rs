//! What the Api's requests say, kind by kind: the key a Get or Delete names, and the prefix
//! and value filter a List or Watch covers. The handlers in `grpc` are generic over these
//! traits, so adding a kind takes one line per request type here (plus its Create and Update,
//! which admission makes kind-specific).
//!
//! Field paths in INVALID_ARGUMENT details are relative to the request (`name`,
//! `namespace`, `cluster`).

use std::sync::Arc;

use flotilla_core::resource;
use flotilla_core::validation::{FieldPath, check_cluster_name, check_dns1123_label};
use flotilla_proto::Resource;
use flotilla_proto::v1;
use flotilla_store::typed::{
    Stored, namespaced_key, work_key, workload_key_of_segment, works_on_cluster_prefix,
};

use crate::error::Error;
use crate::kinds::ApiKind;
use crate::objects::{ListParams, Page};
use crate::watch::ValueFilter;

/// A request that names one object (Get, Delete).
pub trait Named {
    /// The kind it names.
    type Kind: ApiKind;
    /// The object's store key, after checking the request's name fields.
    fn key(&self) -> Result<String, Error>;
}

/// A Delete request.
pub trait DeleteRequest: Named {
    /// What the call answers.
    type Response;
    /// The caller's preconditions.
    fn preconditions(&self) -> Option<&v1::Preconditions>;
    /// The answer: the object after the call, and whether it is gone.
    fn respond(object: Self::Kind, deleted: bool) -> Self::Response;
}

/// The objects a List or Watch covers: a key prefix, and a filter on values where the prefix
/// cannot narrow enough.
pub struct Scope<R> {
    /// The key prefix.
    pub prefix: String,
    /// Only objects passing this; `None`: every object under the prefix.
    pub filter: Option<ValueFilter<R>>,
}

/// A List or Watch request.
pub trait Covers {
    /// The kind it lists or watches.
    type Kind: ApiKind;
    /// What it covers, after checking the request's filter fields.
    fn scope(&self) -> Result<Scope<Self::Kind>, Error>;
    /// Its label selector.
    fn label_selector(&self) -> &str;
}

/// A List request.
pub trait ListRequest: Covers {
    /// What the call answers.
    type Response;
    /// Its paging and label selector.
    fn params(&self) -> ListParams<'_>;
    /// The answer for one page.
    fn respond(page: Page<Self::Kind>) -> Self::Response;
}

/// A Watch request.
pub trait WatchRequest: Covers {
    /// The revision to send changes after (0: the current state first).
    fn resource_version(&self) -> i64;
    /// Whether the caller wants bookmarks.
    fn allow_bookmarks(&self) -> bool;
}

// ---------------------------------------------------------------------------------------
// Checks
// ---------------------------------------------------------------------------------------

/// A name used in a key: required and free of `/`.
pub fn key_part<'a>(value: &'a str, field: &str) -> Result<&'a str, Error> {
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
fn namespace_filter(value: &str) -> Result<(), Error> {
    if value.is_empty() {
        return Ok(());
    }
    check_dns1123_label(value).map_err(|e| Error::Invalid(vec![e.at(&FieldPath::new("namespace"))]))
}

/// An optional cluster filter: empty, or a cluster name.
fn cluster_filter(value: &str) -> Result<(), Error> {
    if value.is_empty() {
        return Ok(());
    }
    check_cluster_name(value).map_err(|e| Error::Invalid(vec![e.at(&FieldPath::new("cluster"))]))
}

/// `prefix` plus `namespace/` when a namespace is given.
fn under(prefix: &str, namespace: &str) -> String {
    if namespace.is_empty() {
        prefix.to_owned()
    } else {
        format!("{prefix}{namespace}/")
    }
}

// ---------------------------------------------------------------------------------------
// Scopes of the kinds
// ---------------------------------------------------------------------------------------

fn everything<R: ApiKind>() -> Result<Scope<R>, Error> {
    Ok(Scope {
        prefix: R::PREFIX.to_owned(),
        filter: None,
    })
}

fn in_namespace<R: ApiKind>(namespace: &str) -> Result<Scope<R>, Error> {
    namespace_filter(namespace)?;
    Ok(Scope {
        prefix: under(R::PREFIX, namespace),
        filter: None,
    })
}

/// Workloads of a namespace and kind: the key narrows to both when both are given.
fn workloads(namespace: &str, kind: &str) -> Result<Scope<v1::Workload>, Error> {
    namespace_filter(namespace)?;
    if kind.is_empty() {
        return in_namespace(namespace);
    }
    key_part(kind, "kind")?;
    // `Kind.group` names one kind (RM-1); a bare `Deployment` every group's Deployments, so
    // that a user who does not know the group still finds them all.
    if kind.contains('.') && !namespace.is_empty() {
        return Ok(Scope {
            prefix: format!("{}{namespace}/{kind}/", v1::Workload::PREFIX),
            filter: None,
        });
    }
    let kind = kind.to_owned();
    Ok(Scope {
        prefix: under(v1::Workload::PREFIX, namespace),
        filter: Some(Arc::new(move |w: &v1::Workload| {
            resource::kind_segment(resource::group(&w.api_version), &w.kind) == kind
                || w.kind == kind
        })),
    })
}

/// Whether `b` targets `cluster` or has an eviction task for it.
fn binding_involves(b: &v1::ResourceBinding, cluster: &str) -> bool {
    b.spec.as_ref().is_some_and(|s| {
        s.clusters.iter().any(|t| t.name == cluster)
            || s.graceful_eviction_tasks
                .iter()
                .any(|t| t.from_cluster == cluster)
    })
}

/// Bindings of a namespace (or all), or only the ClusterResourceBindings (`bindings//…`).
fn bindings(
    namespace: &str,
    cluster: &str,
    cluster_scoped: bool,
) -> Result<Scope<v1::ResourceBinding>, Error> {
    let mut scope = in_namespace(namespace)?;
    if cluster_scoped {
        if !namespace.is_empty() {
            return Err(Error::invalid(
                "namespace",
                "ClusterResourceBindings have no namespace: leave it empty with clusterScoped",
            ));
        }
        scope.prefix = format!("{}/", v1::ResourceBinding::PREFIX);
    }
    cluster_filter(cluster)?;
    if !cluster.is_empty() {
        let cluster = cluster.to_owned();
        scope.filter = Some(Arc::new(move |b: &v1::ResourceBinding| {
            binding_involves(b, &cluster)
        }));
    }
    Ok(scope)
}

/// The Works of a cluster (and namespace): the key narrows to the cluster; without one the
/// namespace is filtered by value.
fn works(namespace: &str, cluster: &str) -> Result<Scope<v1::Work>, Error> {
    namespace_filter(namespace)?;
    cluster_filter(cluster)?;
    if !cluster.is_empty() {
        return Ok(Scope {
            prefix: under(&works_on_cluster_prefix(cluster), namespace),
            filter: None,
        });
    }
    let namespace = namespace.to_owned();
    Ok(Scope {
        prefix: v1::Work::PREFIX.to_owned(),
        filter: (!namespace.is_empty())
            .then(|| Arc::new(move |w: &v1::Work| w.namespace() == namespace) as ValueFilter<_>),
    })
}

/// Events of a namespace about an involved object (kind and/or name).
fn events(namespace: &str, kind: &str, name: &str) -> Result<Scope<v1::Event>, Error> {
    let mut scope = in_namespace(namespace)?;
    if !kind.is_empty() || !name.is_empty() {
        let (kind, name) = (kind.to_owned(), name.to_owned());
        scope.filter = Some(Arc::new(move |e: &v1::Event| {
            let involved = e.involved_object.as_ref();
            (kind.is_empty() || involved.is_some_and(|o| o.kind == kind))
                && (name.is_empty() || involved.is_some_and(|o| o.name == name))
        }));
    }
    Ok(scope)
}

// ---------------------------------------------------------------------------------------
// The table
// ---------------------------------------------------------------------------------------

/// `Named` for a request type: `named!(Request => Kind, |request| key)`.
macro_rules! named {
    ($req:ty => $kind:ty, |$r:ident| $key:expr) => {
        impl Named for $req {
            type Kind = $kind;
            fn key(&self) -> Result<String, Error> {
                let $r = self;
                $key
            }
        }
    };
}

/// `DeleteRequest` for a request type answering `Response { <field>: Some(object), deleted }`.
macro_rules! delete {
    ($req:ty => $resp:ident . $field:ident) => {
        impl DeleteRequest for $req {
            type Response = v1::$resp;
            fn preconditions(&self) -> Option<&v1::Preconditions> {
                self.preconditions.as_ref()
            }
            fn respond(object: Self::Kind, deleted: bool) -> v1::$resp {
                v1::$resp {
                    $field: Some(object),
                    deleted,
                }
            }
        }
    };
}

/// `ListRequest` and `WatchRequest` for a kind's two request types, both covering
/// `|request| scope`.
macro_rules! covers {
    ($list:ident, $resp:ident, $watch:ident => $kind:ty, |$r:ident| $scope:expr) => {
        covers!(@covers v1::$list => $kind, |$r| $scope);
        covers!(@covers v1::$watch => $kind, |$r| $scope);
        impl ListRequest for v1::$list {
            type Response = v1::$resp;
            fn params(&self) -> ListParams<'_> {
                ListParams {
                    page_size: self.page_size,
                    page_token: &self.page_token,
                    label_selector: &self.label_selector,
                }
            }
            fn respond(page: Page<$kind>) -> v1::$resp {
                v1::$resp {
                    items: page.items,
                    next_page_token: page.next_page_token,
                    resource_version: page.resource_version,
                }
            }
        }
        impl WatchRequest for v1::$watch {
            fn resource_version(&self) -> i64 {
                self.resource_version
            }
            fn allow_bookmarks(&self) -> bool {
                self.allow_bookmarks
            }
        }
    };
    (@covers $req:ty => $kind:ty, |$r:ident| $scope:expr) => {
        impl Covers for $req {
            type Kind = $kind;
            fn scope(&self) -> Result<Scope<$kind>, Error> {
                let $r = self;
                $scope
            }
            fn label_selector(&self) -> &str {
                &self.label_selector
            }
        }
    };
}

fn cluster_scoped<R: ApiKind>(name: &str) -> Result<String, Error> {
    Ok(format!("{}{}", R::PREFIX, key_part(name, "name")?))
}

fn namespaced<R: ApiKind>(namespace: &str, name: &str) -> Result<String, Error> {
    Ok(namespaced_key(
        R::PREFIX,
        key_part(namespace, "namespace")?,
        key_part(name, "name")?,
    ))
}

/// The key of the workload a Get/Delete names. `kind` is `Kind.group` (`Deployment.apps`,
/// `Gateway.networking.istio.io`) or a bare kind, which means the built-in kind of that name
/// (`Deployment` → `Deployment.apps`) or else the core group. The namespace of a cluster-scoped
/// kind is ignored, as kubectl ignores `-n` for them.
pub fn workload(namespace: &str, kind: &str, name: &str) -> Result<String, Error> {
    let segment = resource::resolve_kind_segment(key_part(kind, "kind")?);
    let (bare, group) = resource::split_kind_segment(&segment);
    let namespace = match resource::scope(group, bare) {
        resource::Scope::Cluster => "",
        resource::Scope::Namespaced => key_part(namespace, "namespace")?,
    };
    Ok(workload_key_of_segment(
        namespace,
        &segment,
        key_part(name, "name")?,
    ))
}

named!(v1::GetClusterRequest => v1::Cluster, |r| cluster_scoped::<v1::Cluster>(&r.name));
named!(v1::DeleteClusterRequest => v1::Cluster, |r| cluster_scoped::<v1::Cluster>(&r.name));
delete!(v1::DeleteClusterRequest => DeleteClusterResponse.cluster);
covers!(ListClustersRequest, ListClustersResponse, WatchClustersRequest => v1::Cluster,
    |_r| everything());

named!(v1::GetPropagationPolicyRequest => v1::PropagationPolicy,
    |r| namespaced::<v1::PropagationPolicy>(&r.namespace, &r.name));
named!(v1::DeletePropagationPolicyRequest => v1::PropagationPolicy,
    |r| namespaced::<v1::PropagationPolicy>(&r.namespace, &r.name));
delete!(v1::DeletePropagationPolicyRequest => DeletePropagationPolicyResponse.propagation_policy);
covers!(ListPropagationPoliciesRequest, ListPropagationPoliciesResponse,
    WatchPropagationPoliciesRequest => v1::PropagationPolicy, |r| in_namespace(&r.namespace));

named!(v1::GetClusterPropagationPolicyRequest => v1::ClusterPropagationPolicy,
    |r| cluster_scoped::<v1::ClusterPropagationPolicy>(&r.name));
named!(v1::DeleteClusterPropagationPolicyRequest => v1::ClusterPropagationPolicy,
    |r| cluster_scoped::<v1::ClusterPropagationPolicy>(&r.name));
delete!(v1::DeleteClusterPropagationPolicyRequest
    => DeleteClusterPropagationPolicyResponse.cluster_propagation_policy);
covers!(ListClusterPropagationPoliciesRequest, ListClusterPropagationPoliciesResponse,
    WatchClusterPropagationPoliciesRequest => v1::ClusterPropagationPolicy, |_r| everything());

named!(v1::GetOverridePolicyRequest => v1::OverridePolicy,
    |r| namespaced::<v1::OverridePolicy>(&r.namespace, &r.name));
named!(v1::DeleteOverridePolicyRequest => v1::OverridePolicy,
    |r| namespaced::<v1::OverridePolicy>(&r.namespace, &r.name));
delete!(v1::DeleteOverridePolicyRequest => DeleteOverridePolicyResponse.override_policy);
covers!(ListOverridePoliciesRequest, ListOverridePoliciesResponse,
    WatchOverridePoliciesRequest => v1::OverridePolicy, |r| in_namespace(&r.namespace));

named!(v1::GetClusterOverridePolicyRequest => v1::ClusterOverridePolicy,
    |r| cluster_scoped::<v1::ClusterOverridePolicy>(&r.name));
named!(v1::DeleteClusterOverridePolicyRequest => v1::ClusterOverridePolicy,
    |r| cluster_scoped::<v1::ClusterOverridePolicy>(&r.name));
delete!(v1::DeleteClusterOverridePolicyRequest
    => DeleteClusterOverridePolicyResponse.cluster_override_policy);
covers!(ListClusterOverridePoliciesRequest, ListClusterOverridePoliciesResponse,
    WatchClusterOverridePoliciesRequest => v1::ClusterOverridePolicy, |_r| everything());

named!(v1::GetSecretRequest => v1::Secret,
    |r| namespaced::<v1::Secret>(&r.namespace, &r.name));
named!(v1::DeleteSecretRequest => v1::Secret,
    |r| namespaced::<v1::Secret>(&r.namespace, &r.name));
delete!(v1::DeleteSecretRequest => DeleteSecretResponse.secret);
covers!(@covers v1::ListSecretsRequest => v1::Secret, |r| in_namespace(&r.namespace));
impl ListRequest for v1::ListSecretsRequest {
    type Response = v1::ListSecretsResponse;
    fn params(&self) -> ListParams<'_> {
        ListParams {
            page_size: self.page_size,
            page_token: &self.page_token,
            label_selector: &self.label_selector,
        }
    }
    fn respond(page: Page<v1::Secret>) -> v1::ListSecretsResponse {
        v1::ListSecretsResponse {
            items: page.items,
            next_page_token: page.next_page_token,
            resource_version: page.resource_version,
        }
    }
}

named!(v1::GetClusterTaintPolicyRequest => v1::ClusterTaintPolicy,
    |r| cluster_scoped::<v1::ClusterTaintPolicy>(&r.name));
named!(v1::DeleteClusterTaintPolicyRequest => v1::ClusterTaintPolicy,
    |r| cluster_scoped::<v1::ClusterTaintPolicy>(&r.name));
delete!(v1::DeleteClusterTaintPolicyRequest
    => DeleteClusterTaintPolicyResponse.cluster_taint_policy);
covers!(ListClusterTaintPoliciesRequest, ListClusterTaintPoliciesResponse,
    WatchClusterTaintPoliciesRequest => v1::ClusterTaintPolicy, |_r| everything());

named!(v1::GetWorkloadRequest => v1::Workload, |r| workload(&r.namespace, &r.kind, &r.name));
named!(v1::DeleteWorkloadRequest => v1::Workload, |r| workload(&r.namespace, &r.kind, &r.name));
delete!(v1::DeleteWorkloadRequest => DeleteWorkloadResponse.workload);
covers!(ListWorkloadsRequest, ListWorkloadsResponse, WatchWorkloadsRequest => v1::Workload,
    |r| workloads(&r.namespace, &r.kind));

/// The key of a binding; an empty namespace names a ClusterResourceBinding (the binding of a
/// cluster-scoped template).
pub fn binding_key(namespace: &str, name: &str) -> Result<String, Error> {
    Ok(namespaced_key(
        v1::ResourceBinding::PREFIX,
        namespace,
        key_part(name, "name")?,
    ))
}

named!(v1::GetResourceBindingRequest => v1::ResourceBinding,
    |r| binding_key(&r.namespace, &r.name));
covers!(ListResourceBindingsRequest, ListResourceBindingsResponse,
    WatchResourceBindingsRequest => v1::ResourceBinding,
    |r| bindings(&r.namespace, &r.cluster, r.cluster_scoped));

// An empty namespace names the Work of a ClusterResourceBinding.
named!(v1::GetWorkRequest => v1::Work, |r| Ok(work_key(
    key_part(&r.cluster, "cluster")?,
    &r.namespace,
    key_part(&r.name, "name")?,
)));
covers!(ListWorksRequest, ListWorksResponse, WatchWorksRequest => v1::Work,
    |r| works(&r.namespace, &r.cluster));

named!(v1::GetEventRequest => v1::Event, |r| namespaced::<v1::Event>(&r.namespace, &r.name));
covers!(ListEventsRequest, ListEventsResponse, WatchEventsRequest => v1::Event,
    |r| events(&r.namespace, &r.involved_object_kind, &r.involved_object_name));
