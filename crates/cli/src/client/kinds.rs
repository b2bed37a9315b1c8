//! The kinds the client reads: their names and aliases, and one [`ApiObject`] impl per kind
//! that lists, gets and watches it through the api and renders its table row.

use std::future::Future;
use std::pin::Pin;

use crate::client::conn::Conn;
use flotilla_proto::Resource;
use flotilla_proto::v1;
use flotilla_proto::v1::api_client::ApiClient;
use futures::Stream;
use tonic::Status;

use super::output::{Named, age, named};
use super::words;

/// A kind named on the command line.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Kind {
    /// `clusters`, `cluster`.
    Cluster,
    /// `propagationpolicies`, `pp`.
    PropagationPolicy,
    /// `clusterpropagationpolicies`, `cpp`.
    ClusterPropagationPolicy,
    /// `clustertaintpolicies`, `ctp`.
    ClusterTaintPolicy,
    /// `overridepolicies`, `op`.
    OverridePolicy,
    /// `clusteroverridepolicies`, `cop`.
    ClusterOverridePolicy,
    /// `workloads` (every kind), or a workload kind such as `deployments`.
    Workload(Option<String>),
    /// `resourcebindings`, `bindings`, `rb`.
    ResourceBinding,
    /// `clusterresourcebindings`, `crb`: the bindings of cluster-scoped templates.
    ClusterResourceBinding,
    /// `works`.
    Work,
    /// `events`, `ev`.
    Event,
    /// A member's credentials Secret (`karmada-cluster/NAME`): applied and deleted, never
    /// read back.
    Credentials,
    /// `shards`: who holds which shard of each sharded service (not an object: `get` only).
    Shard,
}

/// The accepted spellings, for help texts.
pub const KIND_HELP: &str = "clusters, propagationpolicies (pp, policies), clusterpropagationpolicies \
    (cpp), clustertaintpolicies (ctp), overridepolicies (op), clusteroverridepolicies (cop), \
    workloads (or a workload kind: deployments (deploy), statefulsets (sts), daemonsets (ds), \
    replicasets (rs), jobs, configmaps (cm), secrets, services (svc), namespaces (ns), \
    serviceaccounts (sa), persistentvolumeclaims (pvc), roles, rolebindings, clusterroles, \
    clusterrolebindings, customresourcedefinitions (crd)), resourcebindings (bindings, rb), \
    clusterresourcebindings (crb), works, events (ev), shards";

// === impl Kind ===

impl Kind {
    /// Parses a kind or one of its aliases (case-insensitive, singular or plural).
    pub fn parse(text: &str) -> Result<Kind, String> {
        let lower = text.to_ascii_lowercase();
        Ok(match lower.as_str() {
            "cluster" | "clusters" => Kind::Cluster,
            "propagationpolicy" | "propagationpolicies" | "pp" | "policy" | "policies" => {
                Kind::PropagationPolicy
            }
            "clusterpropagationpolicy" | "clusterpropagationpolicies" | "cpp" => {
                Kind::ClusterPropagationPolicy
            }
            "clustertaintpolicy" | "clustertaintpolicies" | "ctp" => Kind::ClusterTaintPolicy,
            "overridepolicy" | "overridepolicies" | "op" => Kind::OverridePolicy,
            "clusteroverridepolicy" | "clusteroverridepolicies" | "cop" => {
                Kind::ClusterOverridePolicy
            }
            "workload" | "workloads" => Kind::Workload(None),
            "resourcebinding" | "resourcebindings" | "binding" | "bindings" | "rb" => {
                Kind::ResourceBinding
            }
            "clusterresourcebinding" | "clusterresourcebindings" | "crb" => {
                Kind::ClusterResourceBinding
            }
            "work" | "works" => Kind::Work,
            "event" | "events" | "ev" => Kind::Event,
            "shard" | "shards" => Kind::Shard,
            "deployment" | "deployments" | "deploy" => Kind::Workload(Some("Deployment".into())),
            "statefulset" | "statefulsets" | "sts" => Kind::Workload(Some("StatefulSet".into())),
            "daemonset" | "daemonsets" | "ds" => Kind::Workload(Some("DaemonSet".into())),
            "replicaset" | "replicasets" | "rs" => Kind::Workload(Some("ReplicaSet".into())),
            "job" | "jobs" => Kind::Workload(Some("Job".into())),
            "configmap" | "configmaps" | "cm" => Kind::Workload(Some("ConfigMap".into())),
            "secret" | "secrets" => Kind::Workload(Some("Secret".into())),
            "service" | "services" | "svc" => Kind::Workload(Some("Service".into())),
            "namespace" | "namespaces" | "ns" => Kind::Workload(Some("Namespace".into())),
            "serviceaccount" | "serviceaccounts" | "sa" => {
                Kind::Workload(Some("ServiceAccount".into()))
            }
            "persistentvolumeclaim" | "persistentvolumeclaims" | "pvc" => {
                Kind::Workload(Some("PersistentVolumeClaim".into()))
            }
            "role" | "roles" => Kind::Workload(Some("Role".into())),
            "rolebinding" | "rolebindings" => Kind::Workload(Some("RoleBinding".into())),
            "clusterrole" | "clusterroles" => Kind::Workload(Some("ClusterRole".into())),
            "clusterrolebinding" | "clusterrolebindings" => {
                Kind::Workload(Some("ClusterRoleBinding".into()))
            }
            "customresourcedefinition" | "customresourcedefinitions" | "crd" | "crds" => {
                Kind::Workload(Some("CustomResourceDefinition".into()))
            }
            _ => return Err(format!("unknown kind {text:?}; one of: {KIND_HELP}")),
        })
    }

    /// Parses kubectl's comma list of kinds (`pp,op`), in the order given, each once.
    pub fn parse_list(text: &str) -> Result<Vec<Kind>, String> {
        let mut kinds: Vec<Kind> = Vec::new();
        for part in text.split(',') {
            if part.is_empty() {
                return Err(format!("{text:?}: an empty kind in the list"));
            }
            let kind = Kind::parse(part)?;
            if !kinds.contains(&kind) {
                kinds.push(kind);
            }
        }
        Ok(kinds)
    }

    /// Whether objects of the kind live in a namespace (a workload kind: as Kubernetes
    /// scopes it, so `get namespaces` and `get clusterroles` list the cluster-wide ones).
    pub fn namespaced(&self) -> bool {
        match self {
            Kind::Cluster
            | Kind::ClusterPropagationPolicy
            | Kind::ClusterTaintPolicy
            | Kind::ClusterOverridePolicy
            | Kind::ClusterResourceBinding => false,
            Kind::Workload(Some(kind)) => {
                let segment = flotilla_core::resource::resolve_kind_segment(kind);
                let (kind, group) = flotilla_core::resource::split_kind_segment(&segment);
                flotilla_core::resource::scope(group, kind)
                    == flotilla_core::resource::Scope::Namespaced
            }
            _ => true,
        }
    }
}

/// What to list: namespace (`None` = every namespace), label selector and filters.
#[derive(Clone, Debug, Default)]
pub struct Scope {
    /// Only this namespace; `None` = all (`-A`).
    pub namespace: Option<String>,
    /// Kubernetes label selector (`-l`).
    pub label_selector: String,
    /// Bindings and Works: only those on this cluster.
    pub cluster: Option<String>,
    /// Workloads: only this kind.
    pub workload_kind: Option<String>,
    /// Bindings: only ClusterResourceBindings (`get crb`).
    pub cluster_scoped: bool,
    /// Only objects in a namespace: `get rb -A` lists ResourceBindings, not the
    /// ClusterResourceBindings the same list call returns, as kubectl's `-A` lists only the
    /// namespaced kind.
    pub namespaced_only: bool,
}

impl Scope {
    fn ns(&self) -> String {
        self.namespace.clone().unwrap_or_default()
    }

    /// Whether an object the server returned for this scope is shown
    /// ([`Scope::namespaced_only`]).
    pub fn shows<T: Resource>(&self, object: &T) -> bool {
        !self.namespaced_only || !object.namespace().is_empty()
    }
}

/// One page of a List call.
#[derive(Debug)]
pub struct Page<T> {
    /// The items.
    pub items: Vec<T>,
    /// Token of the next page; empty on the last.
    pub next: String,
    /// Store revision of the list.
    pub revision: i64,
}

/// One change of a Watch call.
#[derive(Debug)]
pub struct Change<T> {
    /// ADDED, MODIFIED, DELETED or BOOKMARK.
    pub kind: v1::WatchEventType,
    /// The object (absent for BOOKMARK).
    pub object: Option<T>,
    /// Store revision of the change.
    pub revision: i64,
}

/// A stream of watch changes.
pub type Changes<T> = Pin<Box<dyn Stream<Item = Result<Change<T>, Status>> + Send>>;

type Api = ApiClient<Conn>;

/// A kind the api serves: how to list, get and watch it ([`api_object!`] writes these from
/// the names of its RPCs), and its table row ([`Columns`]). Adding a kind is one
/// `api_object!` and one `impl Columns`.
pub trait ApiObject: Columns + Resource + Named + Send + Sync + 'static {
    /// Lower-case singular name for `-o name` and messages, e.g. `propagationpolicy`.
    const NAME: &'static str;

    /// One page of objects in `scope`.
    fn list(
        api: &mut Api,
        scope: &Scope,
        page_token: String,
    ) -> impl Future<Output = Result<Page<Self>, Status>> + Send;

    /// The objects called `name` in `scope` (normally zero or one).
    fn get_named(
        api: &mut Api,
        scope: &Scope,
        name: &str,
    ) -> impl Future<Output = Result<Vec<Self>, Status>> + Send;

    /// Changes in `scope` after `revision`.
    fn watch(
        api: &mut Api,
        scope: &Scope,
        revision: i64,
    ) -> impl Future<Output = Result<Changes<Self>, Status>> + Send;
}

/// How a kind prints as a table.
pub trait Columns: Sized {
    /// Table headers.
    fn headers(wide: bool) -> Vec<&'static str>;

    /// The table row of this object.
    fn row(&self, now: &prost_types::Timestamp, wide: bool) -> Vec<String>;

    /// Orders a listing for display (default: as listed, i.e. by key).
    fn sort(_items: &mut [Self]) {}
}

/// The value of a request field named after a [`Scope`] field.
macro_rules! scope_field {
    (namespace, $scope:ident) => {
        $scope.ns()
    };
    (label_selector, $scope:ident) => {
        $scope.label_selector.clone()
    };
    (cluster, $scope:ident) => {
        $scope.cluster.clone().unwrap_or_default()
    };
    (kind, $scope:ident) => {
        $scope.workload_kind.clone().unwrap_or_default()
    };
    (cluster_scoped, $scope:ident) => {
        $scope.cluster_scoped
    };
}

/// `impl ApiObject` for a kind from its RPCs, and [`Named`] for the kind and its list
/// response: each request lists the fields it takes from the [`Scope`] (`namespace`,
/// `label_selector`, `cluster`, `kind`); paging, revisions and bookmarks are filled in. `get`
/// is either the Get RPC (a missing object is an empty list) or an async function of `(api,
/// scope, name)` for kinds whose names need more (`@get_named` is the arms' own).
macro_rules! api_object {
    (
        v1::$ty:ident: $name:literal, $list_resp:ident,
        list: $list:ident($list_req:ident { $($lf:ident),* }),
        watch: $watch:ident($watch_req:ident { $($wf:ident),* }),
        get: $get:ident($get_req:ident { $($gf:ident),* }),
    ) => {
        api_object! {
            v1::$ty: $name, $list_resp,
            list: $list($list_req { $($lf),* }),
            watch: $watch($watch_req { $($wf),* }),
            @get_named(api, scope, name) {
                let _ = &scope;
                not_found_is_empty(
                    api.$get(v1::$get_req {
                        $($gf: scope_field!($gf, scope),)*
                        name: name.into(),
                    })
                    .await,
                )
            },
        }
    };
    (
        v1::$ty:ident: $name:literal, $list_resp:ident,
        list: $list:ident($list_req:ident { $($lf:ident),* }),
        watch: $watch:ident($watch_req:ident { $($wf:ident),* }),
        get: $get_named:path,
    ) => {
        api_object! {
            v1::$ty: $name, $list_resp,
            list: $list($list_req { $($lf),* }),
            watch: $watch($watch_req { $($wf),* }),
            @get_named(api, scope, name) { $get_named(api, scope, name).await },
        }
    };
    (
        v1::$ty:ident: $name:literal, $list_resp:ident,
        list: $list:ident($list_req:ident { $($lf:ident),* }),
        watch: $watch:ident($watch_req:ident { $($wf:ident),* }),
        @get_named($api:ident, $scope:ident, $n:ident) $get:block,
    ) => {
        named!($ty, $list_resp);

        #[allow(clippy::needless_update)] // requests take `..Default::default()` whatever they hold
        impl ApiObject for v1::$ty {
            const NAME: &'static str = $name;

            async fn list(api: &mut Api, scope: &Scope, page_token: String) -> Result<Page<Self>, Status> {
                let r = api
                    .$list(v1::$list_req {
                        $($lf: scope_field!($lf, scope),)*
                        page_token,
                        ..Default::default()
                    })
                    .await?
                    .into_inner();
                Ok(Page {
                    items: r.items,
                    next: r.next_page_token,
                    revision: r.resource_version,
                })
            }

            async fn get_named($api: &mut Api, $scope: &Scope, $n: &str) -> Result<Vec<Self>, Status> $get

            async fn watch(api: &mut Api, scope: &Scope, revision: i64) -> Result<Changes<Self>, Status> {
                let s = api
                    .$watch(v1::$watch_req {
                        $($wf: scope_field!($wf, scope),)*
                        resource_version: revision,
                        allow_bookmarks: false,
                        ..Default::default()
                    })
                    .await?
                    .into_inner();
                Ok(changes!(s))
            }
        }
    };
}

/// Lists every page.
pub async fn list_all<T: ApiObject>(api: &mut Api, scope: &Scope) -> Result<(Vec<T>, i64), Status> {
    let mut items = Vec::new();
    let mut token = String::new();
    let mut revision = 0;
    loop {
        let page = T::list(api, scope, token).await?;
        if revision == 0 {
            revision = page.revision;
        }
        items.extend(page.items.into_iter().filter(|o| scope.shows(o)));
        if page.next.is_empty() {
            return Ok((items, revision));
        }
        token = page.next;
    }
}

fn meta_of<T: Resource>(obj: &T) -> (&str, &str, Option<&prost_types::Timestamp>) {
    let meta = obj.meta();
    (
        obj.namespace(),
        obj.name(),
        meta.and_then(|m| m.creation_timestamp.as_ref()),
    )
}

fn not_found_is_empty<T>(r: Result<tonic::Response<T>, Status>) -> Result<Vec<T>, Status> {
    match r {
        Ok(resp) => Ok(vec![resp.into_inner()]),
        Err(s) if s.code() == tonic::Code::NotFound => Ok(vec![]),
        Err(s) => Err(s),
    }
}

macro_rules! changes {
    ($stream:expr) => {{
        let stream = $stream;
        let mapped = futures::StreamExt::map(stream, |item| {
            item.map(|resp| Change {
                kind: v1::WatchEventType::try_from(resp.r#type)
                    .unwrap_or(v1::WatchEventType::Unspecified),
                object: resp.object,
                revision: resp.resource_version,
            })
        });
        Box::pin(mapped) as Changes<_>
    }};
}

// ---------------------------------------------------------------------------------------
// Cluster
// ---------------------------------------------------------------------------------------

/// `READY` of a cluster: the status of its Ready condition.
pub fn cluster_ready(c: &v1::Cluster) -> String {
    c.status
        .as_ref()
        .map(|s| words::condition_word(&s.conditions, "Ready"))
        .unwrap_or_else(|| "-".into())
}

api_object! {
    v1::Cluster: "cluster", ListClustersResponse,
    list: list_clusters(ListClustersRequest { label_selector }),
    watch: watch_clusters(WatchClustersRequest { label_selector }),
    get: get_cluster(GetClusterRequest {}),
}

impl Columns for v1::Cluster {
    fn headers(wide: bool) -> Vec<&'static str> {
        let mut h = vec!["NAME", "MODE", "READY", "TAINTS", "AGE"];
        if wide {
            h.extend(["ENDPOINT", "REGION", "ZONES", "ALLOCATABLE"]);
        }
        h
    }

    fn row(&self, now: &prost_types::Timestamp, wide: bool) -> Vec<String> {
        let (_, name, created) = meta_of(self);
        let spec = self.spec.clone().unwrap_or_default();
        let mut row = vec![
            name.to_owned(),
            words::sync_mode(spec.sync_mode).to_owned(),
            cluster_ready(self),
            words::list_or_none(spec.taints.iter().map(words::taint)),
            age(created, now),
        ];
        if wide {
            let allocatable = self
                .status
                .as_ref()
                .and_then(|s| s.resource_summary.as_ref())
                .and_then(|r| r.allocatable_replicas)
                .map_or_else(|| "-".to_owned(), |n| n.to_string());
            row.extend([
                spec.api_endpoint.clone(),
                spec.region.clone(),
                words::list_or_none(&spec.zones),
                allocatable,
            ]);
        }
        row
    }
}

// ---------------------------------------------------------------------------------------
// Policies
// ---------------------------------------------------------------------------------------

fn selectors(spec: Option<&v1::PropagationSpec>) -> String {
    selector_list(
        spec.map(|s| s.resource_selectors.as_slice())
            .unwrap_or_default(),
        "<none>",
    )
}

/// `Deployment/nginx,ConfigMap/*`; `empty` when there is none.
fn selector_list(list: &[v1::ResourceSelector], empty: &str) -> String {
    if list.is_empty() {
        return empty.into();
    }
    list.iter()
        .map(|r| {
            if r.name.is_empty() {
                format!("{}/*", r.kind)
            } else {
                format!("{}/{}", r.kind, r.name)
            }
        })
        .collect::<Vec<_>>()
        .join(",")
}

fn affinity_clusters(spec: Option<&v1::PropagationSpec>) -> String {
    let names = spec
        .and_then(|s| s.placement.as_ref())
        .and_then(|p| p.cluster_affinity.as_ref())
        .map(|a| a.cluster_names.clone())
        .unwrap_or_default();
    if names.is_empty() {
        "*".into()
    } else {
        names.join(",")
    }
}

api_object! {
    v1::PropagationPolicy: "propagationpolicy", ListPropagationPoliciesResponse,
    list: list_propagation_policies(ListPropagationPoliciesRequest { namespace, label_selector }),
    watch: watch_propagation_policies(WatchPropagationPoliciesRequest { namespace, label_selector }),
    get: get_propagation_policy(GetPropagationPolicyRequest { namespace }),
}

impl Columns for v1::PropagationPolicy {
    fn headers(_wide: bool) -> Vec<&'static str> {
        vec![
            "NAMESPACE",
            "NAME",
            "SELECTORS",
            "CLUSTERS",
            "REPLICAS",
            "AGE",
        ]
    }

    fn row(&self, now: &prost_types::Timestamp, _wide: bool) -> Vec<String> {
        let (ns, name, created) = meta_of(self);
        let spec = self.spec.as_ref();
        vec![
            ns.to_owned(),
            name.to_owned(),
            selectors(spec),
            affinity_clusters(spec),
            words::placement_type(spec.and_then(|s| s.placement.as_ref())),
            age(created, now),
        ]
    }
}

api_object! {
    v1::ClusterPropagationPolicy: "clusterpropagationpolicy", ListClusterPropagationPoliciesResponse,
    list: list_cluster_propagation_policies(ListClusterPropagationPoliciesRequest { label_selector }),
    watch: watch_cluster_propagation_policies(WatchClusterPropagationPoliciesRequest { label_selector }),
    get: get_cluster_propagation_policy(GetClusterPropagationPolicyRequest {}),
}

impl Columns for v1::ClusterPropagationPolicy {
    fn headers(_wide: bool) -> Vec<&'static str> {
        vec!["NAME", "SELECTORS", "CLUSTERS", "REPLICAS", "AGE"]
    }

    fn row(&self, now: &prost_types::Timestamp, _wide: bool) -> Vec<String> {
        let (_, name, created) = meta_of(self);
        let spec = self.spec.as_ref();
        vec![
            name.to_owned(),
            selectors(spec),
            affinity_clusters(spec),
            words::placement_type(spec.and_then(|s| s.placement.as_ref())),
            age(created, now),
        ]
    }
}

fn override_selectors(spec: Option<&v1::OverrideSpec>) -> String {
    selector_list(
        spec.map(|s| s.resource_selectors.as_slice())
            .unwrap_or_default(),
        "*",
    )
}

/// `member1:plaintext,args member2:image`: per rule, its clusters and overrider kinds.
pub fn override_rules(spec: Option<&v1::OverrideSpec>) -> String {
    words::list_or_none(
        spec.map(|s| s.override_rules.as_slice())
            .unwrap_or_default()
            .iter()
            .map(|r| {
                let clusters = r.target_cluster.as_ref().map_or_else(
                    || "*".to_owned(),
                    |a| {
                        if a.cluster_names.is_empty() {
                            "selected".to_owned()
                        } else {
                            a.cluster_names.join("+")
                        }
                    },
                );
                format!(
                    "{clusters}:{}",
                    words::overrider_kinds(r.overriders.as_ref())
                )
            }),
    )
}

api_object! {
    v1::OverridePolicy: "overridepolicy", ListOverridePoliciesResponse,
    list: list_override_policies(ListOverridePoliciesRequest { namespace, label_selector }),
    watch: watch_override_policies(WatchOverridePoliciesRequest { namespace, label_selector }),
    get: get_override_policy(GetOverridePolicyRequest { namespace }),
}

impl Columns for v1::OverridePolicy {
    fn headers(_wide: bool) -> Vec<&'static str> {
        vec!["NAMESPACE", "NAME", "SELECTORS", "RULES", "AGE"]
    }

    fn row(&self, now: &prost_types::Timestamp, _wide: bool) -> Vec<String> {
        let (ns, name, created) = meta_of(self);
        let spec = self.spec.as_ref();
        vec![
            ns.to_owned(),
            name.to_owned(),
            override_selectors(spec),
            override_rules(spec),
            age(created, now),
        ]
    }
}

api_object! {
    v1::ClusterOverridePolicy: "clusteroverridepolicy", ListClusterOverridePoliciesResponse,
    list: list_cluster_override_policies(ListClusterOverridePoliciesRequest { label_selector }),
    watch: watch_cluster_override_policies(WatchClusterOverridePoliciesRequest { label_selector }),
    get: get_cluster_override_policy(GetClusterOverridePolicyRequest {}),
}

impl Columns for v1::ClusterOverridePolicy {
    fn headers(_wide: bool) -> Vec<&'static str> {
        vec!["NAME", "SELECTORS", "RULES", "AGE"]
    }

    fn row(&self, now: &prost_types::Timestamp, _wide: bool) -> Vec<String> {
        let (_, name, created) = meta_of(self);
        let spec = self.spec.as_ref();
        vec![
            name.to_owned(),
            override_selectors(spec),
            override_rules(spec),
            age(created, now),
        ]
    }
}

/// `Ready NotIn [True]`.
pub fn match_conditions(conds: &[v1::MatchCondition]) -> String {
    words::list_or_none(conds.iter().map(|c| {
        let values: Vec<&str> = c
            .status_values
            .iter()
            .map(|v| words::condition_status(*v))
            .collect();
        format!(
            "{} {} [{}]",
            c.condition_type,
            words::selector_operator(c.operator),
            values.join(" ")
        )
    }))
}

api_object! {
    v1::ClusterTaintPolicy: "clustertaintpolicy", ListClusterTaintPoliciesResponse,
    list: list_cluster_taint_policies(ListClusterTaintPoliciesRequest { label_selector }),
    watch: watch_cluster_taint_policies(WatchClusterTaintPoliciesRequest { label_selector }),
    get: get_cluster_taint_policy(GetClusterTaintPolicyRequest {}),
}

impl Columns for v1::ClusterTaintPolicy {
    fn headers(_wide: bool) -> Vec<&'static str> {
        vec!["NAME", "TAINTS", "ADD-ON", "REMOVE-ON", "AGE"]
    }

    fn row(&self, now: &prost_types::Timestamp, _wide: bool) -> Vec<String> {
        let (_, name, created) = meta_of(self);
        let spec = self.spec.clone().unwrap_or_default();
        vec![
            name.to_owned(),
            words::list_or_none(spec.taints.iter().map(words::taint_spec)),
            match_conditions(&spec.add_on_conditions),
            match_conditions(&spec.remove_on_conditions),
            age(created, now),
        ]
    }
}

// ---------------------------------------------------------------------------------------
// Workload
// ---------------------------------------------------------------------------------------

api_object! {
    v1::Workload: "workload", ListWorkloadsResponse,
    list: list_workloads(ListWorkloadsRequest { namespace, kind, label_selector }),
    watch: watch_workloads(WatchWorkloadsRequest { namespace, kind, label_selector }),
    get: workloads_named,
}

/// The workloads called `name`: `Kind/name` names the kind; otherwise every kind with that
/// name.
async fn workloads_named(
    api: &mut Api,
    scope: &Scope,
    name: &str,
) -> Result<Vec<v1::Workload>, Status> {
    let (kind, name) = match name.split_once('/') {
        Some((k, n)) => (Some(k.to_owned()), n),
        None => (scope.workload_kind.clone(), name),
    };
    if let Some(kind) = kind {
        return not_found_is_empty(
            api.get_workload(v1::GetWorkloadRequest {
                namespace: scope.ns(),
                kind,
                name: name.into(),
            })
            .await,
        );
    }
    let (items, _) = list_all::<v1::Workload>(api, scope).await?;
    Ok(items.into_iter().filter(|w| w.name() == name).collect())
}

impl Columns for v1::Workload {
    fn headers(_wide: bool) -> Vec<&'static str> {
        vec!["NAMESPACE", "KIND", "NAME", "REPLICAS", "AGE"]
    }

    fn row(&self, now: &prost_types::Timestamp, _wide: bool) -> Vec<String> {
        let (ns, name, created) = meta_of(self);
        vec![
            ns.to_owned(),
            self.kind.clone(),
            name.to_owned(),
            self.replicas.to_string(),
            age(created, now),
        ]
    }
}

// ---------------------------------------------------------------------------------------
// ResourceBinding
// ---------------------------------------------------------------------------------------

api_object! {
    v1::ResourceBinding: "resourcebinding", ListResourceBindingsResponse,
    list: list_resource_bindings(ListResourceBindingsRequest { namespace, cluster, label_selector, cluster_scoped }),
    watch: watch_resource_bindings(WatchResourceBindingsRequest { namespace, cluster, label_selector, cluster_scoped }),
    get: get_resource_binding(GetResourceBindingRequest { namespace }),
}

impl Columns for v1::ResourceBinding {
    fn headers(wide: bool) -> Vec<&'static str> {
        let mut h = vec![
            "NAMESPACE",
            "NAME",
            "SCHEDULED",
            "CLUSTERS",
            "TASKS",
            "FULLY-APPLIED",
            "AGE",
        ];
        if wide {
            h.extend(["RESOURCE", "REPLICAS", "GENERATION", "OBSERVED"]);
        }
        h
    }

    fn row(&self, now: &prost_types::Timestamp, wide: bool) -> Vec<String> {
        let (ns, name, created) = meta_of(self);
        let spec = self.spec.clone().unwrap_or_default();
        let status = self.status.clone().unwrap_or_default();
        let mut row = vec![
            ns.to_owned(),
            name.to_owned(),
            words::condition_word(&status.conditions, "Scheduled"),
            words::targets(&spec.clusters),
            words::list_or_none(
                spec.graceful_eviction_tasks
                    .iter()
                    .map(|t| t.from_cluster.as_str()),
            ),
            words::condition_word(&status.conditions, "FullyApplied"),
            age(created, now),
        ];
        if wide {
            let res = spec
                .resource
                .as_ref()
                .map(|r| format!("{}/{}", r.kind, r.name))
                .unwrap_or_default();
            row.extend([
                res,
                spec.replicas.to_string(),
                self.generation().to_string(),
                status.scheduler_observed_generation.to_string(),
            ]);
        }
        row
    }
}

// ---------------------------------------------------------------------------------------
// Work
// ---------------------------------------------------------------------------------------

api_object! {
    v1::Work: "work", ListWorksResponse,
    list: list_works(ListWorksRequest { namespace, cluster, label_selector }),
    watch: watch_works(WatchWorksRequest { namespace, cluster, label_selector }),
    get: works_named,
}

/// The Works called `name`: a Work's key has its cluster: `CLUSTER/NAME`, `--cluster`, or
/// every cluster.
async fn works_named(api: &mut Api, scope: &Scope, name: &str) -> Result<Vec<v1::Work>, Status> {
    let (cluster, name) = match name.split_once('/') {
        Some((c, n)) => (Some(c.to_owned()), n),
        None => (scope.cluster.clone(), name),
    };
    if let Some(cluster) = cluster {
        return not_found_is_empty(
            api.get_work(v1::GetWorkRequest {
                cluster,
                namespace: scope.ns(),
                name: name.into(),
            })
            .await,
        );
    }
    let (items, _) = list_all::<v1::Work>(api, scope).await?;
    Ok(items.into_iter().filter(|w| w.name() == name).collect())
}

impl Columns for v1::Work {
    fn headers(_wide: bool) -> Vec<&'static str> {
        vec![
            "NAMESPACE",
            "NAME",
            "CLUSTER",
            "APPLIED",
            "HEALTH",
            "READY",
            "DELETING",
            "AGE",
        ]
    }

    fn row(&self, now: &prost_types::Timestamp, _wide: bool) -> Vec<String> {
        let (ns, name, created) = meta_of(self);
        let spec = self.spec.clone().unwrap_or_default();
        let status = self.status.clone().unwrap_or_default();
        let deleting = self.meta().is_some_and(|m| m.deletion_timestamp.is_some());
        let ready = match spec.replicas {
            Some(r) => format!("{}/{r}", status.ready_replicas),
            None => "-".into(),
        };
        vec![
            ns.to_owned(),
            name.to_owned(),
            spec.cluster.clone(),
            status.applied.to_string(),
            match words::health(status.health) {
                "" => "-".to_owned(),
                h => h.to_owned(),
            },
            ready,
            deleting.to_string(),
            age(created, now),
        ]
    }
}

// ---------------------------------------------------------------------------------------
// Event
// ---------------------------------------------------------------------------------------

api_object! {
    v1::Event: "event", ListEventsResponse,
    list: list_events(ListEventsRequest { namespace, label_selector }),
    watch: watch_events(WatchEventsRequest { namespace, label_selector }),
    get: get_event(GetEventRequest { namespace }),
}

impl Columns for v1::Event {
    fn headers(_wide: bool) -> Vec<&'static str> {
        vec![
            "NAMESPACE",
            "LAST SEEN",
            "TYPE",
            "REASON",
            "OBJECT",
            "MESSAGE",
        ]
    }

    fn row(&self, now: &prost_types::Timestamp, _wide: bool) -> Vec<String> {
        let (ns, _, created) = meta_of(self);
        let seen = self.last_timestamp.as_ref().or(created);
        let object = self
            .involved_object
            .as_ref()
            .map(|o| format!("{}/{}", o.kind.to_ascii_lowercase(), o.name))
            .unwrap_or_default();
        let count = if self.count > 1 {
            format!(" (x{})", self.count)
        } else {
            String::new()
        };
        vec![
            ns.to_owned(),
            age(seen, now),
            words::event_type(self.r#type).to_owned(),
            self.reason.clone(),
            object,
            format!("{}{count}", self.message),
        ]
    }
}

#[cfg(test)]
mod tests {
    use super::Kind;

    /// kubectl's spellings of the kinds Karmada's guide lists, with their scopes: a
    /// cluster-wide workload kind lists without a namespace.
    #[test]
    fn kubectl_kind_names_and_their_scopes() {
        let cases = [
            ("ns", "Namespace", false),
            ("namespaces", "Namespace", false),
            ("clusterroles", "ClusterRole", false),
            ("clusterrolebinding", "ClusterRoleBinding", false),
            ("crd", "CustomResourceDefinition", false),
            ("roles", "Role", true),
            ("sa", "ServiceAccount", true),
            ("pvc", "PersistentVolumeClaim", true),
            ("deploy", "Deployment", true),
        ];
        for (typed, kind, namespaced) in cases {
            let parsed = Kind::parse(typed).expect(typed);
            assert_eq!(parsed, Kind::Workload(Some(kind.into())), "{typed}");
            assert_eq!(parsed.namespaced(), namespaced, "{typed}");
        }
        assert!(!Kind::Cluster.namespaced());
        assert!(Kind::Workload(None).namespaced());
    }

    /// `get pp,op`: a comma list, in order, each kind once; an empty or unknown entry is
    /// refused by name.
    #[test]
    fn comma_lists_of_kinds() {
        assert_eq!(
            Kind::parse_list("pp,op").unwrap(),
            [Kind::PropagationPolicy, Kind::OverridePolicy]
        );
        assert_eq!(
            Kind::parse_list("rb,bindings,crb").unwrap(),
            [Kind::ResourceBinding, Kind::ClusterResourceBinding]
        );
        assert!(Kind::parse_list("pp,").unwrap_err().contains("empty"));
        assert!(
            Kind::parse_list("pp,nope")
                .unwrap_err()
                .contains("unknown kind \"nope\"")
        );
    }
}
