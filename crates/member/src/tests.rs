//! The client against a stub API server that records what it is asked.

use std::sync::{Arc, Mutex};

use axum::Router;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, Method, StatusCode};
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};

use super::*;

#[derive(Clone, Debug)]
struct Seen {
    method: Method,
    uri: String,
    authorization: String,
    content_type: String,
    body: String,
}

#[derive(Clone, Default)]
struct Stub {
    seen: Arc<Mutex<Vec<Seen>>>,
    /// Answer every apply with this code (0: 200 with the body echoed).
    apply_code: Arc<Mutex<u16>>,
}

impl Stub {
    /// The first request seen with `method`, and its body as JSON.
    fn first(&self, method: Method) -> (Seen, Value) {
        let seen = self.seen.lock().expect("lock").clone();
        let found = seen
            .into_iter()
            .find(|s| s.method == method)
            .unwrap_or_else(|| panic!("a {method}"));
        let body = serde_json::from_str(&found.body).expect("json body");
        (found, body)
    }
}

fn status(code: u16, reason: &str) -> Response {
    let body = json!({"kind": "Status", "apiVersion": "v1", "status": "Failure",
                      "reason": reason, "message": format!("stub says {reason}"), "code": code});
    (
        StatusCode::from_u16(code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR),
        [("content-type", "application/json")],
        body.to_string(),
    )
        .into_response()
}

async fn handle(
    State(stub): State<Stub>,
    method: Method,
    uri: axum::http::Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let content_type = headers
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_owned();
    let body = String::from_utf8_lossy(&body).into_owned();
    let authorization = headers
        .get("authorization")
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_owned();
    stub.seen.lock().expect("lock").push(Seen {
        method: method.clone(),
        uri: uri.to_string(),
        authorization,
        content_type,
        body: body.clone(),
    });
    let json = |v: Value| ([("content-type", "application/json")], v.to_string()).into_response();
    let path = uri.path();
    match (method, path) {
        (Method::GET, "/apis/apps/v1") => json(json!({
        "kind": "APIResourceList", "groupVersion": "apps/v1",
        "resources": [
            {"name": "deployments", "singularName": "deployment", "namespaced": true,
             "kind": "Deployment", "verbs": ["get", "list", "patch", "delete"]},
            {"name": "deployments/status", "singularName": "", "namespaced": true,
             "kind": "Deployment", "verbs": ["get"]},
        ]})),
        (Method::GET, "/api/v1") => json(json!({
        "kind": "APIResourceList", "groupVersion": "v1",
        "resources": [
            {"name": "namespaces", "singularName": "namespace", "namespaced": false,
             "kind": "Namespace", "verbs": ["get", "list", "patch", "delete"]},
        ]})),
        (Method::GET, "/readyz") => (StatusCode::NOT_FOUND, "404 page not found").into_response(),
        (Method::GET, "/healthz") => "ok".into_response(),
        (Method::GET, "/hang") => {
            tokio::time::sleep(Duration::from_secs(60)).await;
            "late".into_response()
        }
        (Method::PATCH, _) => {
            let code = *stub.apply_code.lock().expect("lock");
            if code != 0 {
                return status(code, "Conflict");
            }
            let mut object: Value = serde_json::from_str(&body).unwrap_or(json!({}));
            object["metadata"]["resourceVersion"] = json!("7");
            object["status"] = json!({"observedGeneration": 1});
            json(object)
        }
        (Method::DELETE, p) if p.ends_with("/gone") => status(404, "NotFound"),
        (Method::DELETE, _) => json(json!({"kind": "Status", "status": "Success"})),
        // two pages: the first names a continue token
        (Method::GET, "/apis/apps/v1/deployments") if !uri.to_string().contains("continue=") => {
            json(json!({
            "kind": "DeploymentList", "apiVersion": "apps/v1",
            "metadata": {"resourceVersion": "9", "continue": "page2"},
            "items": [{"metadata": {"name": "web", "namespace": "default"},
                       "spec": {"replicas": 1},
                       "status": {"readyReplicas": 1}}]}))
        }
        (Method::GET, "/apis/apps/v1/deployments") => json(json!({
            "kind": "DeploymentList", "apiVersion": "apps/v1", "metadata": {"resourceVersion": "9"},
            "items": [{"metadata": {"name": "api", "namespace": "default"},
                       "spec": {"replicas": 2},
                       "status": {"readyReplicas": 0}}]})),
        _ => status(404, "NotFound"),
    }
}

async fn serve(stub: Stub) -> String {
    let app = Router::new().fallback(handle).with_state(stub);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = listener.local_addr().expect("addr");
    tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    format!("http://{addr}")
}

fn member(endpoint: &str, timeout: Duration) -> Member {
    Member::new(
        &Target::plain(endpoint),
        timeout,
        Arc::new(Semaphore::new(4)),
    )
    .expect("member")
}

fn deployment(name: &str) -> Value {
    json!({"apiVersion": "apps/v1", "kind": "Deployment",
           "metadata": {"name": name, "namespace": "shop"}, "spec": {"replicas": 2}})
}

#[tokio::test]
async fn apply_is_a_forced_server_side_apply_and_discovery_is_cached() {
    let stub = Stub::default();
    let m = member(&serve(stub.clone()).await, Duration::from_secs(5));
    let object = m.apply(&deployment("web")).await.expect("apply");
    assert_eq!(object["metadata"]["resourceVersion"], "7");
    m.apply(&deployment("api")).await.expect("apply");
    let seen = stub.seen.lock().expect("lock").clone();
    let discoveries = seen.iter().filter(|s| s.uri == "/apis/apps/v1").count();
    assert_eq!(discoveries, 1, "one discovery for two applies: {seen:?}");
    let (patch, body) = stub.first(Method::PATCH);
    assert!(
        patch
            .uri
            .starts_with("/apis/apps/v1/namespaces/shop/deployments/web?"),
        "{}",
        patch.uri
    );
    assert!(patch.uri.contains("fieldManager=flotilla"), "{}", patch.uri);
    assert!(patch.uri.contains("force=true"), "{}", patch.uri);
    assert_eq!(patch.content_type, "application/apply-patch+yaml");
    assert_eq!(body["spec"]["replicas"], 2);
}

#[tokio::test]
async fn cluster_scoped_kinds_apply_without_a_namespace() {
    let stub = Stub::default();
    let m = member(&serve(stub.clone()).await, Duration::from_secs(5));
    let ns = json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "shop"}});
    m.apply(&ns).await.expect("apply");
    let seen = stub.seen.lock().expect("lock").clone();
    assert!(
        seen.iter()
            .any(|s| s.method == Method::PATCH && s.uri.starts_with("/api/v1/namespaces/shop?")),
        "{seen:?}"
    );
}

#[tokio::test]
async fn an_unknown_kind_is_refused_after_one_rediscovery() {
    let stub = Stub::default();
    let m = member(&serve(stub.clone()).await, Duration::from_secs(5));
    let widget = json!({"apiVersion": "apps/v1", "kind": "Widget", "metadata": {"name": "w"}});
    let err = m.apply(&widget).await.expect_err("unknown kind");
    assert!(matches!(err, MemberError::UnknownKind { .. }), "{err}");
    // a group version the member does not serve at all
    let crd = json!({"apiVersion": "example.io/v1", "kind": "Widget", "metadata": {"name": "w"}});
    let err = m.apply(&crd).await.expect_err("unknown group");
    assert!(matches!(err, MemberError::UnknownKind { .. }), "{err}");
}

#[tokio::test]
async fn conflicts_and_errors_keep_their_code() {
    let stub = Stub::default();
    *stub.apply_code.lock().expect("lock") = 409;
    let m = member(&serve(stub.clone()).await, Duration::from_secs(5));
    let err = m.apply(&deployment("web")).await.expect_err("conflict");
    assert_eq!(err.code(), Some(409), "{err}");
    assert!(err.to_string().contains("Conflict"), "{err}");
}

#[tokio::test]
async fn delete_propagates_in_the_background_and_absent_is_not_an_error() {
    let stub = Stub::default();
    let m = member(&serve(stub.clone()).await, Duration::from_secs(5));
    let r = ObjectRef::of(&deployment("web")).expect("ref");
    assert!(m.delete(&r).await.expect("delete"));
    let gone = ObjectRef::of(&deployment("gone")).expect("ref");
    assert!(!m.delete(&gone).await.expect("already absent"));
    let (_, body) = stub.first(Method::DELETE);
    assert_eq!(body["propagationPolicy"], "Background", "{body}");
}

#[tokio::test]
async fn list_managed_selects_by_the_binding_label() {
    let stub = Stub::default();
    let m = member(&serve(stub.clone()).await, Duration::from_secs(5));
    let items = m.list_managed("apps/v1", "Deployment").await.expect("list");
    let names: Vec<&str> = items
        .iter()
        .filter_map(|i| i["metadata"]["name"].as_str())
        .collect();
    assert_eq!(names, ["web", "api"], "both pages");
    assert_eq!(items[0]["kind"], "Deployment");
    assert_eq!(status::manifest_status(&items[0]).ready_replicas, 1);
    let seen = stub.seen.lock().expect("lock").clone();
    let lists: Vec<&Seen> = seen
        .iter()
        .filter(|s| s.uri.starts_with("/apis/apps/v1/deployments"))
        .collect();
    assert_eq!(lists.len(), 2, "{lists:?}");
    for list in &lists {
        assert!(
            list.uri
                .contains("labelSelector=resourcebinding.karmada.io%2Fpermanent-id")
                && list.uri.contains(&format!("limit={LIST_PAGE}")),
            "paged and selected by the label: {list:?}"
        );
    }
    assert!(lists[1].uri.contains("continue=page2"), "{lists:?}");
}

#[test]
fn apply_bodies_carry_no_server_set_metadata_nor_status() {
    // as `kubectl get deploy web -o yaml` exports it from another cluster
    let exported = json!({"apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": "web", "namespace": "shop", "labels": {"app": "web"},
                     "annotations": {"a": "b"}, "finalizers": ["x/y"],
                     "managedFields": [{"manager": "kubectl"}], "resourceVersion": "42",
                     "uid": "u-1", "creationTimestamp": "2026-01-01T00:00:00Z",
                     "generation": 3, "selfLink": "/apis/apps/v1/x",
                     "deletionTimestamp": "2026-01-02T00:00:00Z",
                     "deletionGracePeriodSeconds": 30},
        "spec": {"replicas": 2}, "status": {"readyReplicas": 2}});
    let body = apply_body(&exported);
    assert_eq!(
        *body,
        json!({"apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "web", "namespace": "shop", "labels": {"app": "web"},
                         "annotations": {"a": "b"}, "finalizers": ["x/y"]},
            "spec": {"replicas": 2}})
    );
    // a clean manifest is sent as it is, not copied
    let clean = deployment("web");
    assert!(matches!(apply_body(&clean), std::borrow::Cow::Borrowed(_)));
}

#[tokio::test]
async fn apply_sends_the_body_without_server_set_metadata() {
    let stub = Stub::default();
    let m = member(&serve(stub.clone()).await, Duration::from_secs(5));
    let mut manifest = deployment("web");
    manifest["metadata"]["resourceVersion"] = json!("42");
    manifest["metadata"]["managedFields"] = json!([{"manager": "kubectl"}]);
    manifest["status"] = json!({"replicas": 9});
    m.apply(&manifest).await.expect("apply");
    let (patch, body) = stub.first(Method::PATCH);
    assert_eq!(body, deployment("web"), "{}", patch.body);
}

#[tokio::test]
async fn a_rotated_token_file_is_read_again() {
    let stub = Stub::default();
    let endpoint = serve(stub.clone()).await;
    let dir = std::env::temp_dir().join(format!("flotilla-member-token-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("dir");
    let file = dir.join("token");
    // as `kubectl create token ... > file` writes it: with a newline
    std::fs::write(&file, "first-token\n").expect("write");
    let mut target = Target::plain(endpoint);
    target.token_file = Some(file.clone());
    let mut m =
        Member::new(&target, Duration::from_secs(5), Arc::new(Semaphore::new(4))).expect("member");
    m.token_reload = Duration::from_millis(50);
    m.version().await.ok();
    std::fs::write(&file, "second-token\n").expect("write");
    tokio::time::sleep(Duration::from_millis(100)).await;
    m.version().await.ok();
    // a file that vanished keeps the last token
    std::fs::remove_file(&file).expect("remove");
    tokio::time::sleep(Duration::from_millis(100)).await;
    m.version().await.ok();
    let seen: Vec<String> = stub
        .seen
        .lock()
        .expect("lock")
        .iter()
        .map(|s| s.authorization.clone())
        .collect();
    assert_eq!(
        seen,
        [
            "Bearer first-token",
            "Bearer second-token",
            "Bearer second-token"
        ]
    );
    let debug = format!("{m:?}{target:?}");
    assert!(
        !debug.contains("first-token") && !debug.contains("second-token"),
        "no token value in Debug: {debug}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test]
async fn raw_gets_report_the_code_and_a_hang_times_out() {
    let m = member(&serve(Stub::default()).await, Duration::from_millis(300));
    assert_eq!(m.get_raw("/readyz").await.expect("answer").0, 404);
    assert_eq!(
        m.get_raw("/healthz").await.expect("answer"),
        (200, "ok".to_owned())
    );
    let err = m.get_raw("/hang").await.expect_err("hang");
    assert!(matches!(err, MemberError::Timeout { .. }), "{err}");
}

#[test]
fn targets_never_print_their_credentials() {
    let t = Target {
        token: Some("s3cr3t-token".into()),
        client_cert_pem: Some((b"CERT".to_vec(), b"KEY-MATERIAL".to_vec())),
        ..Target::plain("https://member:6443")
    };
    let printed = format!("{t:?}");
    assert!(!printed.contains("s3cr3t"), "{printed}");
    assert!(!printed.contains("KEY-MATERIAL"), "{printed}");
    assert!(printed.contains("https://member:6443"), "{printed}");
}

#[test]
fn bad_targets_are_refused_clearly() {
    let sem = Arc::new(Semaphore::new(1));
    let err = Member::new(
        &Target::plain("member:6443"),
        Duration::from_secs(1),
        sem.clone(),
    )
    .expect_err("no scheme");
    assert!(err.to_string().contains("http:// and https://"), "{err}");
    let t = Target {
        ca_pem: Some(b"not pem".to_vec()),
        ..Target::plain("https://member:6443")
    };
    let err = Member::new(&t, Duration::from_secs(1), sem).expect_err("bad CA");
    assert!(err.to_string().contains("CA bundle"), "{err}");
}

/// A listed object keeps its `spec` and `status` as text until asked; one nested past the
/// JSON reader's depth limit is refused when it is parsed, never read as an object without
/// that part (which status collection would record as an empty status).
#[test]
fn a_listed_object_too_deep_to_parse_is_refused_not_emptied() {
    let listed = |status: &str| {
        let text = format!(
            r#"{{"metadata":{{"name":"web","namespace":"default","uid":"u1",
                 "resourceVersion":"7"}},"spec":{{"replicas":2}},"status":{status}}}"#
        );
        Listed {
            item: serde_json::from_str(&text).unwrap(),
            api_version: "apps/v1".into(),
            kind: "Deployment".into(),
        }
    };
    let shallow = listed(r#"{"readyReplicas":2}"#);
    assert_eq!(
        (shallow.uid(), shallow.resource_version(), shallow.name()),
        ("u1", "7", "web")
    );
    let value = shallow.value().unwrap();
    assert_eq!(value["status"]["readyReplicas"], 2);
    assert_eq!(value["metadata"]["resourceVersion"], "7");
    assert_eq!(value["kind"], "Deployment");

    let deep = format!("{}{}", "[".repeat(200), "]".repeat(200));
    let error = listed(&deep).value().unwrap_err().to_string();
    assert!(error.contains("Deployment default/web: status"), "{error}");
}
