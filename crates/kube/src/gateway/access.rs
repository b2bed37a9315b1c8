//! What a caller may do, asked the Kubernetes way (docs/kubernetes-api.md "Identity"):
//!
//! ```text
//!   kubectl auth can-i VERB RESOURCE  ── POST selfsubjectaccessreviews ──┐
//!   kubectl auth can-i --list         ── POST selfsubjectrulesreviews ───┤  the api's methods each
//!   kubectl auth whoami               ── POST selfsubjectreviews ────────┤  request would call
//!                                                                         ▼
//!                                          Api.ReviewAccess, with the caller's own token:
//!                                          the method table every gRPC call meets
//! ```
//!
//! The gateway decides nothing here either: it names the gRPC methods its own handler of
//! that request would call ([`methods`]: a `patch` reads and then applies, a `deletecollection`
//! lists and then deletes), and the api answers for the caller's principal. So `can-i` says
//! yes exactly when the request would get past authorization.

use axum::http::StatusCode;
use axum::response::Response;
use flotilla_proto::v1;
use flotilla_proto::v1::api_client::ApiClient;
use serde_json::{Value, json};
use tonic::transport::Channel;

use super::write::invalid;
use super::{KINDS, Kind, KindInfo, Req, from_status, reply, request, verbs};

const API: &str = "/flotilla.v1.Api/";

/// The paths the gateway answers to every caller (discovery, `/version`, OpenAPI).
const PUBLIC_PATHS: &[&str] = &[
    "/api",
    "/api/*",
    "/apis",
    "/apis/*",
    "/openapi",
    "/openapi/*",
    "/version",
];

/// The api's methods of `kind`: (get, list, watch, delete). A Work is read through its list
/// (its Kubernetes name does not say the binding's namespace the api keys it by).
fn reads(
    kind: Kind,
) -> Option<(
    &'static str,
    &'static str,
    &'static str,
    Option<&'static str>,
)> {
    Some(match kind {
        Kind::Cluster => (
            "GetCluster",
            "ListClusters",
            "WatchClusters",
            Some("DeleteCluster"),
        ),
        Kind::PropagationPolicy => (
            "GetPropagationPolicy",
            "ListPropagationPolicies",
            "WatchPropagationPolicies",
            Some("DeletePropagationPolicy"),
        ),
        Kind::ClusterPropagationPolicy => (
            "GetClusterPropagationPolicy",
            "ListClusterPropagationPolicies",
            "WatchClusterPropagationPolicies",
            Some("DeleteClusterPropagationPolicy"),
        ),
        Kind::OverridePolicy => (
            "GetOverridePolicy",
            "ListOverridePolicies",
            "WatchOverridePolicies",
            Some("DeleteOverridePolicy"),
        ),
        Kind::ClusterOverridePolicy => (
            "GetClusterOverridePolicy",
            "ListClusterOverridePolicies",
            "WatchClusterOverridePolicies",
            Some("DeleteClusterOverridePolicy"),
        ),
        Kind::ClusterTaintPolicy => (
            "GetClusterTaintPolicy",
            "ListClusterTaintPolicies",
            "WatchClusterTaintPolicies",
            Some("DeleteClusterTaintPolicy"),
        ),
        Kind::ResourceBinding | Kind::ClusterResourceBinding => (
            "GetResourceBinding",
            "ListResourceBindings",
            "WatchResourceBindings",
            None,
        ),
        Kind::Template => (
            "GetWorkload",
            "ListWorkloads",
            "WatchWorkloads",
            Some("DeleteWorkload"),
        ),
        Kind::Work => ("ListWorks", "ListWorks", "WatchWorks", None),
        Kind::Event => ("GetEvent", "ListEvents", "WatchEvents", None),
        Kind::AccessReview | Kind::RulesReview | Kind::UserReview => return None,
    })
}

/// The api's methods the gateway's handler of `verb` on `kind` (its `subresource`, if any)
/// calls; `Err` says why the request is not served at all.
pub(super) fn methods(
    info: &KindInfo,
    verb: &str,
    subresource: &str,
) -> Result<Vec<&'static str>, String> {
    let Some((get, list, watch, delete)) = reads(info.kind) else {
        return Err(format!("{} is only created (POST)", info.plural));
    };
    let served = verbs(info.kind);
    let one = |verb: &str| -> Result<Vec<&'static str>, String> {
        if !served.iter().any(|v| v == verb) {
            return Err(format!(
                "{verb} of {} is not served ({})",
                info.plural,
                if matches!(info.kind, Kind::Work | Kind::Event)
                    || matches!(
                        info.kind,
                        Kind::ResourceBinding | Kind::ClusterResourceBinding
                    )
                {
                    "Flotilla's controllers write them"
                } else {
                    "served: get, list, watch, create, update, patch, delete, deletecollection"
                }
            ));
        }
        Ok(match verb {
            "get" => vec![get],
            "list" => vec![list],
            "watch" => vec![watch],
            // a create answers with the object as read after the write
            "create" => vec!["Apply", get],
            "update" | "patch" => vec![get, "Apply"],
            "delete" => delete.into_iter().collect(),
            "deletecollection" => std::iter::once(list).chain(delete).collect(),
            other => return Err(format!("{other} of {} is not served", info.plural)),
        })
    };
    match (subresource, verb) {
        ("", "*") => {
            let mut all = Vec::new();
            for v in &served {
                for m in one(v)? {
                    if !all.contains(&m) {
                        all.push(m);
                    }
                }
            }
            Ok(all)
        }
        ("", verb) => one(verb),
        ("status", "get") => Ok(vec![get]),
        ("status", verb) => Err(format!(
            "{verb} of {}/status is not served (a status is written by Flotilla's controllers)",
            info.plural
        )),
        (other, _) => Err(format!(
            "the subresource {other} of {} is not served",
            info.plural
        )),
    }
}

/// The cluster a Work in `namespace` is for (`karmada-es-<cluster>`), "" for any other.
pub(super) fn work_cluster(namespace: &str) -> &str {
    namespace
        .strip_prefix(crate::form::EXECUTION_NAMESPACE_PREFIX)
        .unwrap_or_default()
}

/// The kinds `group` and `resource` name (`*` for every one).
fn kinds_named(group: &str, resource: &str) -> Vec<&'static KindInfo> {
    KINDS
        .iter()
        .filter(|k| reads(k.kind).is_some())
        .filter(|k| {
            let g = k.group_version.split_once('/').map_or("", |(g, _)| g);
            (group == "*" || g == group)
                && (resource == "*" || k.plural == resource || k.short_names.contains(&resource))
        })
        .collect()
}

/// The caller's answers to `questions` (method, cluster), by the api.
async fn ask(
    mut api: ApiClient<Channel>,
    req: &Req,
    questions: Vec<(String, String)>,
) -> Result<v1::ReviewAccessResponse, Response> {
    let questions = questions
        .into_iter()
        .map(|(method, cluster)| v1::AccessQuestion { method, cluster })
        .collect();
    api.review_access(request(v1::ReviewAccessRequest { questions }, &req.headers))
        .await
        .map(tonic::Response::into_inner)
        .map_err(|s| from_status(&s))
}

/// The `POST` of a review kind: its answer, 201 as kube-apiserver gives it.
pub(super) async fn review(api: ApiClient<Channel>, req: &Req, body: &Value) -> Response {
    let go = async {
        let api_version = body.get("apiVersion").and_then(Value::as_str).unwrap_or("");
        let kind = body.get("kind").and_then(Value::as_str).unwrap_or("");
        if api_version != req.group_version() || kind != req.name() {
            return Err(invalid(
                req,
                "",
                &[(
                    "apiVersion".to_owned(),
                    format!(
                        "expected apiVersion {} and kind {}, got {api_version:?} and {kind:?}",
                        req.group_version(),
                        req.name()
                    ),
                )],
            ));
        }
        let spec = body.get("spec").cloned().unwrap_or_else(|| json!({}));
        let status = match req.kind {
            Kind::AccessReview => access_review(api, req, &spec).await?,
            Kind::RulesReview => rules_review(api, req, &spec).await?,
            _ => {
                let who = ask(api, req, Vec::new()).await?;
                json!({"userInfo": {"username": who.principal, "groups": ["system:authenticated"]}})
            }
        };
        let mut answer = json!({
            "apiVersion": req.group_version(),
            "kind": req.name(),
            "metadata": {"creationTimestamp": null},
            "status": status,
        });
        if req.kind != Kind::UserReview {
            answer["spec"] = spec;
        }
        Ok(reply(StatusCode::CREATED, &answer))
    };
    go.await.unwrap_or_else(|failed| failed)
}

/// A SelfSubjectAccessReview's status: allowed when every method the request would call is.
async fn access_review(
    api: ApiClient<Channel>,
    req: &Req,
    spec: &Value,
) -> Result<Value, Response> {
    let text = |v: &Value, key: &str| {
        v.get(key)
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_owned()
    };
    let (resource, non_resource) = (
        spec.get("resourceAttributes"),
        spec.get("nonResourceAttributes"),
    );
    let attributes = match (resource, non_resource) {
        (Some(r), None) if r.is_object() => r,
        (None, Some(n)) if n.is_object() => {
            let (path, verb) = (text(n, "path"), text(n, "verb"));
            let public = verb == "get"
                && PUBLIC_PATHS.iter().any(|p| match p.strip_suffix('*') {
                    Some(prefix) => path.starts_with(prefix),
                    None => path == *p,
                });
            return Ok(if public {
                json!({"allowed": true, "reason": "the gateway answers discovery, /version and OpenAPI to every caller"})
            } else {
                json!({"allowed": false, "reason": format!("{verb} {path:?} is not served")})
            });
        }
        _ => {
            return Err(invalid(
                req,
                "",
                &[(
                    "spec.resourceAttributes".to_owned(),
                    "exactly one of nonResourceAttributes or resourceAttributes must be specified"
                        .to_owned(),
                )],
            ));
        }
    };
    let (verb, group, plural, namespace, subresource) = (
        text(attributes, "verb"),
        text(attributes, "group"),
        text(attributes, "resource"),
        text(attributes, "namespace"),
        text(attributes, "subresource"),
    );
    let kinds = kinds_named(&group, &plural);
    if kinds.is_empty() {
        return Ok(json!({"allowed": false, "reason": format!(
            "the resource {plural:?} of the group {group:?} is not served"
        )}));
    }
    let mut questions = Vec::new();
    for info in &kinds {
        let methods = match methods(info, &verb, &subresource) {
            Ok(m) => m,
            Err(why) => return Ok(json!({"allowed": false, "reason": why})),
        };
        let cluster = if info.kind == Kind::Work {
            work_cluster(&namespace)
        } else {
            ""
        };
        for m in methods {
            let q = (format!("{API}{m}"), cluster.to_owned());
            if !questions.contains(&q) {
                questions.push(q);
            }
        }
    }
    if questions.is_empty() {
        return Ok(
            json!({"allowed": false, "reason": format!("{verb} of {plural} calls nothing that is served")}),
        );
    }
    let answers = ask(api, req, questions).await?.answers;
    Ok(match answers.iter().find(|a| !a.allowed) {
        Some(denied) => json!({"allowed": false, "reason": denied.reason}),
        None => {
            json!({"allowed": true, "reason": answers.first().map(|a| a.reason.clone()).unwrap_or_default()})
        }
    })
}

/// A SelfSubjectRulesReview's status: for each served kind, the verbs whose every method the
/// caller may call, in `spec.namespace`, grouped by API group and verbs.
async fn rules_review(api: ApiClient<Channel>, req: &Req, spec: &Value) -> Result<Value, Response> {
    let namespace = spec
        .get("namespace")
        .and_then(Value::as_str)
        .unwrap_or_default();
    // (kind, verb, its questions' indexes)
    let mut questions: Vec<(String, String)> = Vec::new();
    let mut asked: Vec<(&'static KindInfo, String, Vec<usize>)> = Vec::new();
    for info in kinds_named("*", "*") {
        let cluster = if info.kind == Kind::Work {
            work_cluster(namespace)
        } else {
            ""
        };
        for verb in verbs(info.kind) {
            let Ok(methods) = methods(info, &verb, "") else {
                continue;
            };
            let mut indexes = Vec::new();
            for m in methods {
                let q = (format!("{API}{m}"), cluster.to_owned());
                let at = match questions.iter().position(|x| *x == q) {
                    Some(at) => at,
                    None => {
                        questions.push(q);
                        questions.len() - 1
                    }
                };
                indexes.push(at);
            }
            asked.push((info, verb, indexes));
        }
    }
    let answers = ask(api, req, questions).await?.answers;
    // group → resource → verbs allowed, in the order of KINDS
    let mut rules: Vec<(String, Vec<String>, Vec<&'static str>)> = Vec::new();
    let mut per_resource: Vec<(&'static KindInfo, Vec<String>)> = Vec::new();
    for (info, verb, indexes) in asked {
        if !indexes
            .iter()
            .all(|i| answers.get(*i).is_some_and(|a| a.allowed))
        {
            continue;
        }
        match per_resource
            .iter_mut()
            .find(|(k, _)| std::ptr::eq(*k, info))
        {
            Some((_, v)) => v.push(verb),
            None => per_resource.push((info, vec![verb])),
        }
    }
    for (info, verbs) in per_resource {
        let group = info
            .group_version
            .split_once('/')
            .map_or("", |(g, _)| g)
            .to_owned();
        match rules
            .iter_mut()
            .find(|(g, v, _)| *g == group && *v == verbs)
        {
            Some((_, _, resources)) => {
                if !resources.contains(&info.plural) {
                    resources.push(info.plural);
                }
            }
            None => rules.push((group, verbs, vec![info.plural])),
        }
    }
    let mut resource_rules: Vec<Value> = rules
        .into_iter()
        .map(|(group, verbs, resources)| {
            json!({"verbs": verbs, "apiGroups": [group], "resources": resources})
        })
        .collect();
    // every authenticated caller may ask about itself
    resource_rules.push(
        json!({"verbs": ["create"], "apiGroups": ["authorization.k8s.io"],
        "resources": ["selfsubjectaccessreviews", "selfsubjectrulesreviews"]}),
    );
    resource_rules.push(
        json!({"verbs": ["create"], "apiGroups": ["authentication.k8s.io"],
        "resources": ["selfsubjectreviews"]}),
    );
    Ok(json!({
        "resourceRules": resource_rules,
        "nonResourceRules": [{"verbs": ["get"], "nonResourceURLs": PUBLIC_PATHS}],
        "incomplete": false,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn info(plural: &str) -> &'static KindInfo {
        KINDS.iter().find(|k| k.plural == plural).unwrap()
    }

    /// The methods named are the ones the gateway's handlers call (see write.rs): a patch
    /// reads the object and applies, a deletecollection lists and deletes.
    #[test]
    fn each_verb_names_the_methods_its_handler_calls() {
        let pp = info("propagationpolicies");
        for (verb, want) in [
            ("get", vec!["GetPropagationPolicy"]),
            ("list", vec!["ListPropagationPolicies"]),
            ("watch", vec!["WatchPropagationPolicies"]),
            ("create", vec!["Apply", "GetPropagationPolicy"]),
            ("patch", vec!["GetPropagationPolicy", "Apply"]),
            ("update", vec!["GetPropagationPolicy", "Apply"]),
            ("delete", vec!["DeletePropagationPolicy"]),
            (
                "deletecollection",
                vec!["ListPropagationPolicies", "DeletePropagationPolicy"],
            ),
        ] {
            assert_eq!(methods(pp, verb, "").unwrap(), want, "{verb}");
        }
        let all = methods(pp, "*", "").unwrap();
        assert_eq!(all.len(), 5, "{all:?}");
        assert_eq!(
            methods(info("deployments"), "get", "").unwrap(),
            ["GetWorkload"]
        );
        assert_eq!(methods(info("works"), "get", "").unwrap(), ["ListWorks"]);
        assert_eq!(
            methods(info("clusters"), "get", "status").unwrap(),
            ["GetCluster"]
        );
        for (plural, verb, sub, words) in [
            ("resourcebindings", "create", "", "controllers write them"),
            ("works", "delete", "", "controllers write them"),
            ("events", "patch", "", "controllers write them"),
            (
                "clusters",
                "update",
                "status",
                "written by Flotilla's controllers",
            ),
            ("clusters", "get", "proxy", "subresource proxy"),
            ("propagationpolicies", "escalate", "", "not served"),
            ("selfsubjectaccessreviews", "get", "", "only created"),
        ] {
            let why = methods(info(plural), verb, sub).unwrap_err();
            assert!(why.contains(words), "{plural} {verb} {sub}: {why}");
        }
    }

    #[test]
    fn resources_are_named_as_kubectl_names_them() {
        assert_eq!(kinds_named("policy.karmada.io", "pp").len(), 1);
        assert_eq!(kinds_named("apps", "deployments").len(), 1);
        assert_eq!(kinds_named("", "configmaps").len(), 1);
        assert!(kinds_named("apps", "configmaps").is_empty());
        assert!(kinds_named("policy.karmada.io", "*").len() >= 5);
        assert!(
            kinds_named("*", "*")
                .iter()
                .all(|k| !k.plural.starts_with("selfsubject")),
            "the review kinds are not reviewed"
        );
        assert_eq!(work_cluster("karmada-es-member1"), "member1");
        assert_eq!(work_cluster("default"), "");
    }
}
