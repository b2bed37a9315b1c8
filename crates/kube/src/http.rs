//! What every Kubernetes API server of Flotilla's shares (member-sim's simulated cluster and
//! the gateway in front of the api): `Status` failures, `/version`, the discovery documents,
//! request paths, query strings and watch event lines, as kube-apiserver writes them.

use serde_json::{Value, json};

/// A Kubernetes `Status` failure: `code` (HTTP) with `reason` (`NotFound`, `Conflict`…).
pub fn status(code: u16, reason: &str, message: &str) -> Value {
    json!({
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": message,
        "reason": reason,
        "code": code,
    })
}

/// A `Success` Status (what a delete answers once the object is gone), with its details.
pub fn success(details: Value) -> Value {
    json!({
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Success",
        "details": details,
        "code": 200,
    })
}

/// The `/version` document of a server answering as Kubernetes `major.minor`.
pub fn version(major: &str, minor: &str, git_version: &str) -> Value {
    json!({
        "major": major,
        "minor": minor,
        "gitVersion": git_version,
        "gitCommit": "",
        "gitTreeState": "clean",
        "buildDate": "2026-01-01T00:00:00Z",
        "goVersion": "go1.24",
        "compiler": "gc",
        "platform": "linux/amd64",
    })
}

/// `/api`: the core group's versions.
pub fn api_versions() -> Value {
    json!({
        "kind": "APIVersions",
        "versions": ["v1"],
        "serverAddressByClientCIDRs": [],
    })
}

/// `/apis`: the named groups of `group_versions` (`apps/v1`…; `v1`, the core group, is not
/// one), in order, each with its versions; the first version named is the preferred one.
pub fn api_groups<S: AsRef<str>>(group_versions: &[S]) -> Value {
    let mut groups: Vec<(String, Vec<Value>)> = Vec::new();
    for (group, version) in group_versions
        .iter()
        .filter_map(|gv| gv.as_ref().split_once('/'))
    {
        let gv = json!({"groupVersion": format!("{group}/{version}"), "version": version});
        match groups.iter_mut().find(|(name, _)| name == group) {
            Some((_, versions)) => versions.push(gv),
            None => groups.push((group.to_owned(), vec![gv])),
        }
    }
    let groups: Vec<Value> = groups
        .into_iter()
        .map(|(name, versions)| {
            let preferred = versions.first().cloned().unwrap_or(Value::Null);
            json!({"name": name, "versions": versions, "preferredVersion": preferred})
        })
        .collect();
    json!({"kind": "APIGroupList", "apiVersion": "v1", "groups": groups})
}

/// One resource a server serves, as discovery lists it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Served {
    /// The path segment: `deployments`, `propagationpolicies`.
    pub plural: String,
    /// `Deployment`.
    pub kind: String,
    /// Whether its objects live in namespaces.
    pub namespaced: bool,
    /// `kubectl get pp`: the short names.
    pub short_names: Vec<String>,
    /// `kubectl get all`: the categories it belongs to.
    pub categories: Vec<String>,
    /// The verbs served (`get`, `list`, `watch`…).
    pub verbs: Vec<String>,
}

impl Served {
    /// `resource` with its short names and categories, each left out when empty, as a real
    /// server writes them (in both discovery shapes).
    fn with_lists(&self, mut resource: Value) -> Value {
        if !self.short_names.is_empty() {
            resource["shortNames"] = json!(self.short_names);
        }
        if !self.categories.is_empty() {
            resource["categories"] = json!(self.categories);
        }
        resource
    }
}

/// `/apis/{group}/{version}` (or `/api/v1`): the resources of `group_version`.
pub fn resource_list(group_version: &str, served: &[Served]) -> Value {
    let resources: Vec<Value> = served
        .iter()
        .map(|r| {
            let resource = json!({
                "name": r.plural,
                "singularName": r.kind.to_ascii_lowercase(),
                "namespaced": r.namespaced,
                "kind": r.kind,
                "verbs": r.verbs,
            });
            r.with_lists(resource)
        })
        .collect();
    json!({
        "kind": "APIResourceList",
        "apiVersion": "v1",
        "groupVersion": group_version,
        "resources": resources,
    })
}

/// The aggregated discovery version a client's `Accept` header asks for first (`v2`, or
/// `v2beta1` as kubectl before 1.30 asks), `None` for the legacy documents. kubectl asks
/// `/api` and `/apis` for `application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList`
/// and takes every group's resources from that one answer.
pub fn aggregated_discovery_wanted(accept: &str) -> Option<&'static str> {
    for range in accept.split(',') {
        let mut parts = range.split(';').map(str::trim);
        if parts.next() != Some("application/json") {
            continue;
        }
        let (mut g, mut v, mut r#as) = ("", "", "");
        for param in parts {
            match param.split_once('=') {
                Some(("g", x)) => g = x,
                Some(("v", x)) => v = x,
                Some(("as", x)) => r#as = x,
                _ => {}
            }
        }
        if g != "apidiscovery.k8s.io" || r#as != "APIGroupDiscoveryList" {
            continue;
        }
        match v {
            "v2" => return Some("v2"),
            "v2beta1" => return Some("v2beta1"),
            _ => {}
        }
    }
    None
}

/// The `Content-Type` of an aggregated discovery answer of `version`.
pub fn aggregated_discovery_type(version: &str) -> String {
    format!("application/json;g=apidiscovery.k8s.io;v={version};as=APIGroupDiscoveryList")
}

/// `/api` or `/apis` as aggregated discovery (`APIGroupDiscoveryList` of `version`): every
/// group version of `served` (in order, so a group's first version is its preferred one)
/// with its resources. The core group is named "".
pub fn aggregated_discovery(version: &str, served: &[(String, Vec<Served>)]) -> Value {
    let mut groups: Vec<(String, Vec<Value>)> = Vec::new();
    for (group_version, resources) in served {
        let (group, v) = group_version
            .split_once('/')
            .unwrap_or(("", group_version.as_str()));
        let resources: Vec<Value> = resources
            .iter()
            .map(|r| {
                let resource = json!({
                    "resource": r.plural,
                    "responseKind": {"group": group, "version": v, "kind": r.kind},
                    "scope": if r.namespaced { "Namespaced" } else { "Cluster" },
                    "singularResource": r.kind.to_ascii_lowercase(),
                    "verbs": r.verbs,
                });
                r.with_lists(resource)
            })
            .collect();
        let entry = json!({"version": v, "resources": resources, "freshness": "Current"});
        match groups.iter_mut().find(|(name, _)| name == group) {
            Some((_, versions)) => versions.push(entry),
            None => groups.push((group.to_owned(), vec![entry])),
        }
    }
    let items: Vec<Value> = groups
        .into_iter()
        .map(|(name, versions)| {
            json!({"metadata": {"name": name, "creationTimestamp": null}, "versions": versions})
        })
        .collect();
    json!({
        "kind": "APIGroupDiscoveryList",
        "apiVersion": format!("apidiscovery.k8s.io/{version}"),
        "metadata": {},
        "items": items,
    })
}

/// What a request path names.
#[derive(Debug, PartialEq, Eq)]
pub enum Path<'a> {
    /// `/api`.
    ApiVersions,
    /// `/apis`.
    ApiGroups,
    /// `/api/v1` or `/apis/{group}/{version}`: a group version's resources.
    Resources(String),
    /// A collection or one object of a resource.
    Object {
        /// `v1`, `apps/v1`.
        group_version: String,
        /// `namespaces/{ns}/…`, if given.
        namespace: Option<&'a str>,
        /// The resource's path segment.
        resource: &'a str,
        /// The object's name (`None`: the collection).
        name: Option<&'a str>,
        /// `status` of `…/{name}/status`.
        subresource: Option<&'a str>,
    },
    /// Nothing this grammar knows.
    Unknown,
}

/// Splits `/api/v1/...` or `/apis/{group}/{version}/...` as kube-apiserver routes them.
pub fn parse_path(path: &str) -> Path<'_> {
    let segments: Vec<&str> = path.trim_matches('/').split('/').collect();
    let (group_version, rest) = match segments.as_slice() {
        ["api"] => return Path::ApiVersions,
        ["apis"] => return Path::ApiGroups,
        ["api", "v1"] => return Path::Resources("v1".to_owned()),
        ["apis", group, version] => return Path::Resources(format!("{group}/{version}")),
        ["api", "v1", rest @ ..] => ("v1".to_owned(), rest),
        ["apis", group, version, rest @ ..] => (format!("{group}/{version}"), rest),
        _ => return Path::Unknown,
    };
    let object = |namespace, resource, name, subresource| Path::Object {
        group_version: group_version.clone(),
        namespace,
        resource,
        name,
        subresource,
    };
    match rest {
        ["namespaces", ns, resource] => object(Some(*ns), *resource, None, None),
        ["namespaces", ns, resource, name] => object(Some(*ns), *resource, Some(*name), None),
        ["namespaces", ns, resource, name, sub] => {
            object(Some(*ns), *resource, Some(*name), Some(*sub))
        }
        [resource] => object(None, *resource, None, None),
        [resource, name] => object(None, *resource, Some(*name), None),
        [resource, name, sub] => object(None, *resource, Some(*name), Some(*sub)),
        _ => Path::Unknown,
    }
}

/// `a=b&c=d%2Fe` as decoded pairs (`application/x-www-form-urlencoded`, as a Kubernetes API
/// server reads its query).
pub fn url_pairs(q: &str) -> Vec<(String, String)> {
    form_urlencoded::parse(q.as_bytes())
        .map(|(k, v)| (k.into_owned(), v.into_owned()))
        .collect()
}

/// One watch event line (`type` first, as kube-apiserver writes it), newline-terminated.
pub fn event_line(type_: &str, object: &Value) -> String {
    format!("{{\"type\":\"{type_}\",\"object\":{object}}}\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_as_kube_apiserver_routes_them() {
        assert_eq!(parse_path("/api"), Path::ApiVersions);
        assert_eq!(parse_path("/apis/"), Path::ApiGroups);
        assert_eq!(parse_path("/api/v1"), Path::Resources("v1".into()));
        assert_eq!(
            parse_path("/apis/policy.karmada.io/v1alpha1"),
            Path::Resources("policy.karmada.io/v1alpha1".into())
        );
        assert_eq!(
            parse_path(
                "/apis/policy.karmada.io/v1alpha1/namespaces/default/propagationpolicies/nginx"
            ),
            Path::Object {
                group_version: "policy.karmada.io/v1alpha1".into(),
                namespace: Some("default"),
                resource: "propagationpolicies",
                name: Some("nginx"),
                subresource: None,
            }
        );
        assert_eq!(
            parse_path("/apis/cluster.karmada.io/v1alpha1/clusters/member1/status"),
            Path::Object {
                group_version: "cluster.karmada.io/v1alpha1".into(),
                namespace: None,
                resource: "clusters",
                name: Some("member1"),
                subresource: Some("status"),
            }
        );
        assert_eq!(parse_path("/apis/a/b/c/d/e/f/g"), Path::Unknown);
        assert_eq!(parse_path("/openapi/v2"), Path::Unknown);
    }

    #[test]
    fn documents_have_kubernetes_shapes() {
        let s = status(404, "NotFound", "x not found");
        assert_eq!(
            (s["kind"].as_str(), s["code"].as_u64()),
            (Some("Status"), Some(404))
        );
        let groups = api_groups(&["v1", "apps/v1"]);
        assert_eq!(
            groups["groups"].as_array().map(Vec::len),
            Some(1),
            "v1 is no group"
        );
        let work = api_groups(&["work.karmada.io/v1alpha2", "work.karmada.io/v1alpha1"]);
        assert_eq!(
            work["groups"][0]["versions"].as_array().map(Vec::len),
            Some(2)
        );
        assert_eq!(work["groups"][0]["preferredVersion"]["version"], "v1alpha2");
        assert_eq!(
            groups["groups"][0]["preferredVersion"]["groupVersion"],
            "apps/v1"
        );
        let served = Served {
            plural: "propagationpolicies".into(),
            kind: "PropagationPolicy".into(),
            namespaced: true,
            short_names: vec!["pp".into()],
            categories: Vec::new(),
            verbs: vec!["get".into(), "list".into(), "watch".into()],
        };
        let list = resource_list("policy.karmada.io/v1alpha1", &[served]);
        assert_eq!(list["resources"][0]["shortNames"][0], "pp");
        assert!(list["resources"][0].get("categories").is_none());
        assert_eq!(
            url_pairs("labelSelector=a%3Db&watch=1"),
            [
                ("labelSelector".to_owned(), "a=b".to_owned()),
                ("watch".to_owned(), "1".to_owned())
            ]
        );
        assert_eq!(
            event_line("ADDED", &json!({"a": 1})),
            "{\"type\":\"ADDED\",\"object\":{\"a\":1}}\n"
        );
    }

    #[test]
    fn aggregated_discovery_is_served_when_the_client_asks_for_it() {
        let kubectl = "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList,\
                       application/json;g=apidiscovery.k8s.io;v=v2beta1;as=APIGroupDiscoveryList,\
                       application/json";
        assert_eq!(aggregated_discovery_wanted(kubectl), Some("v2"));
        assert_eq!(
            aggregated_discovery_wanted(
                "application/json;g=apidiscovery.k8s.io;v=v2beta1;as=APIGroupDiscoveryList"
            ),
            Some("v2beta1")
        );
        assert_eq!(aggregated_discovery_wanted("application/json, */*"), None);
        assert_eq!(
            aggregated_discovery_wanted(
                "application/json;g=apidiscovery.k8s.io;v=v3;as=APIGroupDiscoveryList"
            ),
            None
        );
        let pp = Served {
            plural: "propagationpolicies".into(),
            kind: "PropagationPolicy".into(),
            namespaced: true,
            short_names: vec!["pp".into()],
            categories: Vec::new(),
            verbs: vec!["get".into()],
        };
        let crb = Served {
            plural: "clusterresourcebindings".into(),
            kind: "ClusterResourceBinding".into(),
            namespaced: false,
            short_names: Vec::new(),
            categories: Vec::new(),
            verbs: vec!["list".into()],
        };
        let list = aggregated_discovery(
            "v2",
            &[
                ("policy.karmada.io/v1alpha1".into(), vec![pp]),
                ("work.karmada.io/v1alpha2".into(), vec![crb.clone()]),
                ("work.karmada.io/v1alpha1".into(), vec![crb]),
            ],
        );
        assert_eq!(list["apiVersion"], "apidiscovery.k8s.io/v2");
        assert_eq!(list["items"][0]["metadata"]["name"], "policy.karmada.io");
        let pp = &list["items"][0]["versions"][0]["resources"][0];
        assert_eq!(pp["scope"], "Namespaced");
        assert_eq!(pp["responseKind"]["kind"], "PropagationPolicy");
        assert_eq!(pp["shortNames"][0], "pp");
        let work = &list["items"][1]["versions"];
        assert_eq!(
            work.as_array().unwrap().len(),
            2,
            "one group, its versions in order"
        );
        assert_eq!(work[0]["version"], "v1alpha2");
        assert_eq!(work[0]["resources"][0]["scope"], "Cluster");
        let core = aggregated_discovery("v2", &[("v1".into(), Vec::new())]);
        assert_eq!(core["items"][0]["metadata"]["name"], "");
        assert_eq!(core["items"][0]["versions"][0]["version"], "v1");
    }
}
