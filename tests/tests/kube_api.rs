//! The Kubernetes API gateway (docs/kubernetes-api.md) with the real kubectl, over the real
//! service binaries on etcd: discovery of Karmada's groups with their short names, lists and
//! gets in the very form `flotilla get -o json` prints (one printer), a watch that follows a
//! new object, writes (client-side `kubectl apply`, create, replace, patch of each type,
//! delete) admitted by the api like `flotilla apply`'s, and errors as kube-apiserver's
//! `Status` answers, with nothing written.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use flotilla_tests::{
    Stack, Timers, binding_healthy, command_output, eventually, nginx_binding, targets,
};
use tokio::io::AsyncBufReadExt;

const T: Duration = Duration::from_secs(45);

/// The gateway in front of `stack`'s api, on a free loopback port: its `http://` URL.
async fn gateway(stack: &Stack) -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let channel = tonic::transport::Endpoint::from_shared(format!("http://{}", stack.addrs["api"]))
        .unwrap()
        .connect_lazy();
    let api = flotilla_proto::v1::api_client::ApiClient::new(channel);
    tokio::spawn(flotilla_kube::gateway::serve(
        listener,
        api,
        std::future::pending(),
    ));
    format!("http://{addr}")
}

/// The real kubectl against `server`: (success, stdout + stderr).
async fn kubectl(server: &str, args: &[&str]) -> (bool, String) {
    let mut command = tokio::process::Command::new("kubectl");
    command
        .arg(format!("--server={server}"))
        .arg("--request-timeout=20s")
        .args(args);
    command_output(&mut command).await
}

async fn kubectl_ok(server: &str, args: &[&str]) -> String {
    let (ok, out) = kubectl(server, args).await;
    assert!(ok, "kubectl {args:?}: {out}");
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_reads_karmadas_kinds_through_the_kubernetes_api() {
    let mut stack = Stack::start(Timers::fast()).await;
    let api = stack.ready_unequal_members(T).await;
    let server = gateway(&stack).await;
    flotilla_tests::create_nginx(&api, flotilla_api::testing::seed_policy()).await;
    eventually(T, "nginx {member1:1, member2:2} healthy", || async {
        let b = nginx_binding(&api).await?;
        let want = [("member1".to_owned(), 1), ("member2".to_owned(), 2)];
        (targets(&b) == want && binding_healthy(&b)).then_some(())
    })
    .await;

    // aggregated discovery: kubectl learns every group's resources from /api and /apis
    // alone (two requests), not one request per group version
    let cache = tempfile::tempdir().unwrap();
    let cache_dir = format!("--cache-dir={}", cache.path().display());
    let traced = kubectl_ok(&server, &[&cache_dir, "-v=6", "get", "pp", "-A"]).await;
    let asked: Vec<&str> = traced
        .lines()
        .filter_map(|l| l.split(" GET ").nth(1))
        .map(|l| l.split(['?', ' ']).next().unwrap_or_default())
        .collect();
    assert!(
        asked.contains(&format!("{server}/apis").as_str()),
        "kubectl asked: {asked:?}"
    );
    // (kubectls before aggregated discovery, such as Debian's 1.20, ask each group
    // version's document, which the gateway serves as well: the get above succeeded)
    let per_group = asked
        .iter()
        .any(|a| a.ends_with("/apis/policy.karmada.io/v1alpha1"));
    if flotilla_tests::kube::kubectl_minor() >= 30 {
        assert!(
            !per_group,
            "a group version's document was asked for: {asked:?}"
        );
    } else {
        assert!(
            per_group,
            "kubectl 1.{} asked: {asked:?}",
            flotilla_tests::kube::kubectl_minor()
        );
    }

    // discovery: Karmada's groups, kinds and short names, complete (no error)
    let resources = kubectl_ok(&server, &["api-resources", "--no-headers"]).await;
    for want in [
        [
            "propagationpolicies",
            "pp",
            "policy.karmada.io/v1alpha1",
            "true",
            "PropagationPolicy",
        ],
        [
            "resourcebindings",
            "rb",
            "work.karmada.io/v1alpha2",
            "true",
            "ResourceBinding",
        ],
        [
            "clusteroverridepolicies",
            "cop",
            "policy.karmada.io/v1alpha1",
            "false",
            "ClusterOverridePolicy",
        ],
    ] {
        let line = resources
            .lines()
            .find(|l| l.split_whitespace().next() == Some(want[0]))
            .unwrap_or_else(|| panic!("{} in api-resources: {resources}", want[0]));
        let words: Vec<&str> = line.split_whitespace().collect();
        assert_eq!(words, want, "{line}");
    }
    assert!(!resources.contains("error"), "{resources}");

    // lists and gets: the objects `flotilla get -o json` prints, byte for byte the same form
    let clusters = kubectl_ok(&server, &["get", "clusters", "-o", "name"]).await;
    assert_eq!(
        clusters.lines().collect::<Vec<_>>(),
        [
            "cluster.cluster.karmada.io/member1",
            "cluster.cluster.karmada.io/member2"
        ]
    );
    let policy_name = "nginx-propagation";
    let by_kubectl: serde_json::Value = serde_json::from_str(
        &kubectl_ok(
            &server,
            &["get", "pp", policy_name, "-n", "default", "-o", "json"],
        )
        .await,
    )
    .unwrap();
    let by_flotilla: serde_json::Value = serde_json::from_str(
        &stack
            .cli_ok(&["get", "pp", policy_name, "-n", "default", "-o", "json"])
            .await,
    )
    .unwrap();
    let by_flotilla = by_flotilla["items"].get(0).cloned().unwrap_or(by_flotilla);
    assert_eq!(by_kubectl, by_flotilla, "one printer, one form");
    assert_eq!(
        by_kubectl["metadata"]["resourceVersion"]
            .as_str()
            .map(|s| !s.is_empty()),
        Some(true)
    );
    let placed = kubectl_ok(
        &server,
        &[
            "get",
            "rb",
            "nginx-deployment",
            "-n",
            "default",
            "-o",
            "jsonpath={.spec.clusters[*].name}",
        ],
    )
    .await;
    assert_eq!(placed.trim(), "member1 member2");
    // kubectl's own printing, from Table responses: Karmada's printer columns
    let printed = |out: String| -> Vec<Vec<String>> {
        out.lines()
            .map(|l| l.split_whitespace().map(str::to_owned).collect())
            .collect()
    };
    let rb = printed(kubectl_ok(&server, &["get", "rb", "-n", "default"]).await);
    assert_eq!(
        rb[0],
        ["NAME", "SCHEDULED", "FULLYAPPLIED", "AGE"],
        "{rb:?}"
    );
    assert_eq!(rb[1][..3], ["nginx-deployment", "True", "True"], "{rb:?}");
    let clusters = printed(kubectl_ok(&server, &["get", "clusters"]).await);
    assert_eq!(
        clusters[0],
        ["NAME", "VERSION", "MODE", "READY", "AGE"],
        "{clusters:?}"
    );
    assert!(
        clusters[1][0] == "member1"
            && clusters[1].contains(&"Push".to_owned())
            && clusters[1].contains(&"True".to_owned()),
        "{clusters:?}"
    );
    let wide = printed(kubectl_ok(&server, &["get", "clusters", "-o", "wide"]).await);
    assert!(
        wide[0].ends_with(&["API-ENDPOINT".to_owned(), "PROXY-URL".to_owned()]),
        "{wide:?}"
    );
    let pp = printed(kubectl_ok(&server, &["get", "pp", "-A"]).await);
    assert_eq!(
        pp[0],
        [
            "NAMESPACE",
            "NAME",
            "CONFLICT-RESOLUTION",
            "PRIORITY",
            "AGE"
        ],
        "{pp:?}"
    );
    assert_eq!(pp[1][..2], ["default", "nginx-propagation"], "{pp:?}");
    let sorted = printed(
        kubectl_ok(
            &server,
            &[
                "get",
                "clusters",
                "--sort-by=.metadata.name",
                "--no-headers",
            ],
        )
        .await,
    );
    assert_eq!(
        sorted.iter().map(|r| r[0].as_str()).collect::<Vec<_>>(),
        ["member1", "member2"]
    );
    let all = kubectl_ok(&server, &["get", "pp,rb", "-A", "-o", "name"]).await;
    assert!(
        all.contains("propagationpolicy.policy.karmada.io/nginx-propagation"),
        "{all}"
    );
    assert!(
        all.contains("resourcebinding.work.karmada.io/nginx-deployment"),
        "{all}"
    );
    let selected = kubectl_ok(&server, &["get", "pp", "-A", "-l", "nope=1", "-o", "name"]).await;
    assert!(
        selected.trim().is_empty(),
        "a label selector that matches nothing: {selected}"
    );

    // a watch from the list's version follows a policy created afterwards
    let mut watch = tokio::process::Command::new("kubectl")
        .arg(format!("--server={server}"))
        .args(["get", "cpp", "-w", "-o", "name"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let mut lines = tokio::io::BufReader::new(watch.stdout.take().unwrap()).lines();
    tokio::time::sleep(Duration::from_secs(1)).await;
    let mut cpp = flotilla_api::testing::seed_policy();
    cpp.metadata.as_mut().unwrap().name = "everywhere".into();
    cpp.metadata.as_mut().unwrap().namespace = String::new();
    api.clone()
        .create_cluster_propagation_policy(
            flotilla_proto::v1::CreateClusterPropagationPolicyRequest {
                cluster_propagation_policy: Some(flotilla_proto::v1::ClusterPropagationPolicy {
                    metadata: cpp.metadata.clone(),
                    spec: cpp.spec.clone(),
                }),
            },
        )
        .await
        .unwrap();
    let seen = tokio::time::timeout(T, async {
        while let Ok(Some(line)) = lines.next_line().await {
            if line.contains("everywhere") {
                return line;
            }
        }
        String::new()
    })
    .await
    .expect("the watch shows the new ClusterPropagationPolicy");
    assert_eq!(
        seen,
        "clusterpropagationpolicy.policy.karmada.io/everywhere"
    );
    drop(watch);

    // kubectl explain reads the OpenAPI v3 documents: field names and descriptions of
    // Karmada's kinds, enum values included; a kind without a schema says so
    let out = kubectl_ok(&server, &["explain", "pp.spec.placement"]).await;
    for field in [
        "clusterAffinity",
        "clusterAffinities",
        "clusterTolerations",
        "replicaScheduling",
        "spreadConstraints",
    ] {
        assert!(
            out.contains(field),
            "explain pp.spec.placement lacks {field}: {out}"
        );
    }
    let out = kubectl_ok(
        &server,
        &[
            "explain",
            "pp.spec.placement.replicaScheduling.replicaSchedulingType",
        ],
    )
    .await;
    assert!(
        out.contains("Duplicated") && out.contains("Divided"),
        "{out}"
    );
    let out = kubectl_ok(&server, &["explain", "clusters.spec.taints"]).await;
    assert!(out.contains("effect") && out.contains("NoExecute"), "{out}");
    let out = kubectl_ok(&server, &["explain", "op.spec.overrideRules.overriders"]).await;
    assert!(
        out.contains("plaintext") && out.contains("imageOverrider"),
        "{out}"
    );
    let (ok, out) = kubectl(&server, &["explain", "pp.spec.noSuchField"]).await;
    assert!(
        !ok && out.contains("noSuchField"),
        "an unknown field is an error: {out}"
    );
    // and the v2 document, in the protobuf form client-go reads (older kubectls, Argo CD):
    // the same schemas through kube-openapi's v2 reader (kubectls before 1.27 read only v2,
    // and have no --output for explain)
    let explain_v2: Vec<&str> = if flotilla_tests::kube::kubectl_minor() >= 27 {
        vec!["explain", "--output=plaintext-openapiv2"]
    } else {
        vec!["explain"]
    };
    let out = kubectl_ok(
        &server,
        &[&explain_v2[..], &["pp.spec.placement.replicaScheduling"]].concat(),
    )
    .await;
    assert!(
        out.contains("KIND:     PropagationPolicy")
            && out.contains("replicaSchedulingType\t<string>")
            && out.contains("`\"Divided\"`"),
        "{out}"
    );
    let out = kubectl_ok(
        &server,
        &[&explain_v2[..], &["clusters.spec.taints"]].concat(),
    )
    .await;
    assert!(
        out.contains("<[]Object>") && out.contains("NoExecute"),
        "{out}"
    );
    let v2: serde_json::Value =
        serde_json::from_str(&kubectl_ok(&server, &["get", "--raw", "/openapi/v2"]).await).unwrap();
    assert_eq!(v2["swagger"], "2.0", "JSON when JSON is asked for");

    // errors as kube-apiserver answers them, and writes refused with what to do instead
    let (ok, out) = kubectl(
        &server,
        &[
            "get",
            "--raw",
            "/apis/work.karmada.io/v1alpha2/resourcebindings/nginx-deployment",
        ],
    )
    .await;
    assert!(
        !ok && out.contains("NotFound"),
        "a namespaced object needs its namespace: {out}"
    );
    let (ok, out) = kubectl(&server, &["get", "pp", "nope", "-n", "default"]).await;
    assert!(!ok && out.contains("NotFound"), "{out}");
    let (ok, out) = kubectl(
        &server,
        &["delete", "rb", "nginx-deployment", "-n", "default"],
    )
    .await;
    assert!(
        !ok && out.contains("MethodNotAllowed") && out.contains("flotilla release"),
        "bindings are the controllers' to write: {out}"
    );
    let (ok, out) = kubectl(
        &server,
        &["get", "pp", "-A", "--field-selector", "spec.x=1"],
    )
    .await;
    assert!(
        !ok && out.contains("BadRequest") && out.contains("spec.x"),
        "{out}"
    );
    let still = kubectl_ok(
        &server,
        &["get", "pp", policy_name, "-n", "default", "-o", "name"],
    )
    .await;
    assert_eq!(
        still.trim(),
        "propagationpolicy.policy.karmada.io/nginx-propagation",
        "nothing deleted"
    );

    // Works, in Karmada's execution namespaces and shape; read-only
    let works = kubectl_ok(&server, &["get", "works", "-A", "--no-headers"]).await;
    let mut rows: Vec<Vec<&str>> = works
        .lines()
        .map(|l| l.split_whitespace().take(4).collect())
        .collect();
    rows.sort();
    let work_name = rows.first().map(|r| r[1].to_owned()).unwrap_or_default();
    assert_eq!(
        rows,
        [
            [
                "karmada-es-member1",
                work_name.as_str(),
                "Deployment",
                "True"
            ],
            [
                "karmada-es-member2",
                work_name.as_str(),
                "Deployment",
                "True"
            ],
        ],
        "NAMESPACE NAME WORKLOAD-KIND APPLIED: {works}"
    );
    let work: serde_json::Value = serde_json::from_str(
        &kubectl_ok(
            &server,
            &[
                "get",
                "work",
                &work_name,
                "-n",
                "karmada-es-member2",
                "-o",
                "json",
            ],
        )
        .await,
    )
    .unwrap();
    assert_eq!(work["apiVersion"], "work.karmada.io/v1alpha1", "{work}");
    assert_eq!(
        work["spec"]["workload"]["manifests"][0]["spec"]["replicas"], 2,
        "member2's share of the replicas, in Karmada's place: {work}"
    );
    let (ok, out) = kubectl(&server, &["get", "work", &work_name, "-n", "default"]).await;
    assert!(
        !ok && out.contains("NotFound") && out.contains("karmada-es-"),
        "{out}"
    );
    let (ok, out) = kubectl(
        &server,
        &["delete", "work", &work_name, "-n", "karmada-es-member2"],
    )
    .await;
    assert!(
        !ok && out.contains("MethodNotAllowed") && out.contains("work executor"),
        "{out}"
    );
    assert!(
        kubectl_ok(
            &server,
            &["get", "works", "-n", "karmada-es-member2", "-o", "name"]
        )
        .await
        .contains(&work_name),
        "nothing deleted"
    );
    // Events, as kubectl prints them, selected by their involved object
    let events = kubectl_ok(
        &server,
        &[
            "get",
            "events",
            "-A",
            "--field-selector",
            "involvedObject.kind=ResourceBinding",
        ],
    )
    .await;
    let header: Vec<&str> = events
        .lines()
        .next()
        .unwrap_or_default()
        .split_whitespace()
        .collect();
    assert_eq!(
        header,
        [
            "NAMESPACE",
            "LAST",
            "SEEN",
            "TYPE",
            "REASON",
            "OBJECT",
            "MESSAGE"
        ],
        "{events}"
    );
    assert!(
        events.lines().skip(1).count() > 0
            && events
                .lines()
                .skip(1)
                .all(|l| l.contains("resourcebinding/")),
        "only the bindings' events: {events}"
    );
    // `/status`: read as the object; the controllers write it (kubectl 1.24+ has
    // --subresource; older ones read it raw, and curl sends the patch)
    if flotilla_tests::kube::kubectl_minor() < 24 {
        let raw = kubectl_ok(
            &server,
            &[
                "get",
                "--raw",
                "/apis/cluster.karmada.io/v1alpha1/clusters/member1/status",
            ],
        )
        .await;
        let object: serde_json::Value = serde_json::from_str(&raw).unwrap();
        assert_eq!(object["status"]["conditions"][0]["type"], "Ready", "{raw}");
        let mut curl = tokio::process::Command::new("curl");
        curl.args([
            "-s",
            "-X",
            "PATCH",
            "-H",
            "Content-Type: application/merge-patch+json",
            "-d",
            r#"{"status":{"kubernetesVersion":"x"}}"#,
            &format!("{server}/apis/cluster.karmada.io/v1alpha1/clusters/member1/status"),
        ]);
        let (_, out) = command_output(&mut curl).await;
        assert!(
            out.contains("MethodNotAllowed") && out.contains("controllers"),
            "{out}"
        );
        return;
    }
    let status = kubectl_ok(
        &server,
        &[
            "get",
            "cluster",
            "member1",
            "--subresource=status",
            "-o",
            "jsonpath={.status.conditions[0].type}",
        ],
    )
    .await;
    assert_eq!(status, "Ready");
    let (ok, out) = kubectl(
        &server,
        &[
            "patch",
            "cluster",
            "member1",
            "--subresource=status",
            "--type=merge",
            "-p",
            r#"{"status":{"kubernetesVersion":"x"}}"#,
        ],
    )
    .await;
    assert!(
        !ok && out.contains("MethodNotAllowed") && out.contains("controllers"),
        "{out}"
    );
}

/// Identity through the gateway is the api's: a caller without a token is refused 401, an
/// agent's token reaches nothing beyond what it reaches over gRPC (403 naming it), a viewer
/// reads.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_gateway_passes_the_callers_identity_to_the_api() {
    let dir = tempfile::tempdir().unwrap();
    let tokens = dir.path().join("tokens");
    let token = |p: &str| format!("{p}-{:016x}", rand::random::<u64>());
    let (admin, viewer, agent) = (token("admin"), token("viewer"), token("edge1"));
    let line = |t: &str, p: &str| {
        flotilla_runtime::security::tokens_line(t, &flotilla_runtime::Principal::parse(p).unwrap())
    };
    std::fs::write(
        &tokens,
        [
            line(&admin, "admin"),
            line(&viewer, "viewer"),
            line(&agent, "agent:edge1"),
        ]
        .concat(),
    )
    .unwrap();
    let stack = Stack::start_with_env(
        Timers::fast(),
        vec![(
            "FLOTILLA_AUTH_TOKENS_FILE".into(),
            tokens.display().to_string(),
        )],
    )
    .await;
    let server = gateway(&stack).await;
    // kubectl sends no bearer token over plain HTTP (client-go keeps credentials off an
    // unencrypted connection), and the gateway serves no TLS yet: curl sends the header as
    // any HTTP client may
    let curl = |token: Option<String>, path: &'static str| {
        let url = format!("{server}{path}");
        async move {
            let mut command = tokio::process::Command::new("curl");
            command.args(["-s", "-w", "\n%{http_code}", &url]);
            if let Some(t) = token {
                command.args(["-H", &format!("Authorization: Bearer {t}")]);
            }
            let (ok, out) = command_output(&mut command).await;
            assert!(ok, "curl {url}: {out}");
            let (body, code) = out.trim_end().rsplit_once('\n').unwrap_or(("", ""));
            (
                code.to_owned(),
                serde_json::from_str::<serde_json::Value>(body).unwrap_or_default(),
            )
        }
    };
    let clusters = "/apis/cluster.karmada.io/v1alpha1/clusters";
    let policies = "/apis/policy.karmada.io/v1alpha1/propagationpolicies";
    let (code, status) = curl(None, clusters).await;
    assert_eq!(
        (code.as_str(), status["reason"].as_str()),
        ("401", Some("Unauthorized")),
        "{status}"
    );
    let (code, status) = curl(Some("not-a-token".into()), clusters).await;
    assert_eq!(code, "401", "{status}");
    assert!(
        status["message"]
            .as_str()
            .unwrap_or_default()
            .contains("invalid bearer token"),
        "{status}"
    );
    let (code, status) = curl(Some(agent.clone()), policies).await;
    assert_eq!(
        (code.as_str(), status["reason"].as_str()),
        ("403", Some("Forbidden")),
        "{status}"
    );
    assert!(
        status["message"]
            .as_str()
            .unwrap_or_default()
            .contains("agent:edge1"),
        "the refusal names the principal: {status}"
    );
    for token in [&viewer, &admin] {
        let (code, list) = curl(Some(token.clone()), clusters).await;
        assert_eq!(
            (code.as_str(), list["kind"].as_str()),
            ("200", Some("ClusterList")),
            "{list}"
        );
    }
    // and kubectl, which cannot send its token here, is refused like any caller without one
    let (ok, out) = kubectl(&server, &["get", "clusters"]).await;
    assert!(
        !ok && out.contains("You must be logged in"),
        "kubectl without a token: {out}"
    );

    // over TLS kubectl sends its token: the same principals, the same refusals
    let certs = dir.path().join("certs");
    flotilla_runtime::testing::grpc::dev_certs(&certs, &[]);
    let tls = flotilla_runtime::tls::ServerTls::load(flotilla_runtime::tls::ServerTlsFiles {
        cert: certs.join("api.pem"),
        key: certs.join("api-key.pem"),
        client_ca: None,
        client_cert_optional: false,
    })
    .unwrap();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let secure = format!("https://{}", listener.local_addr().unwrap());
    let channel = tonic::transport::Endpoint::from_shared(format!("http://{}", stack.addrs["api"]))
        .unwrap()
        .connect_lazy();
    tokio::spawn(flotilla_kube::gateway::serve_tls(
        listener,
        tls,
        flotilla_proto::v1::api_client::ApiClient::new(channel),
        std::future::pending(),
    ));
    let ca = format!("--certificate-authority={}", certs.join("ca.pem").display());
    let (ok, out) = kubectl(
        &secure,
        &[&ca, "--token", &viewer, "get", "clusters", "-o", "name"],
    )
    .await;
    assert!(
        ok && out.trim().is_empty(),
        "a viewer reads over TLS: {out}"
    );
    // writes meet the api's method table too: a viewer's create and delete are refused
    // naming it, an admin's go through
    let policy = dir.path().join("web.yaml");
    std::fs::write(&policy, POLICY).unwrap();
    let policy = policy.to_str().unwrap();
    for verb in [
        &["create", "-f", policy][..],
        &["delete", "pp", "web", "-n", "default"][..],
    ] {
        let mut args = vec![ca.as_str(), "--token", viewer.as_str()];
        args.extend_from_slice(verb);
        let (ok, out) = kubectl(&secure, &args).await;
        assert!(
            !ok && out.contains("Forbidden") && out.contains("viewer"),
            "a viewer's {verb:?}: {out}"
        );
    }
    let (ok, out) = kubectl(
        &secure,
        &[
            &ca, "--token", &admin, "create", "-f", policy, "-n", "default",
        ],
    )
    .await;
    assert!(ok && out.contains("created"), "an admin creates: {out}");
    let (ok, out) = kubectl(&secure, &[&ca, "--token", &agent, "get", "pp", "-A"]).await;
    assert!(
        !ok && out.contains("Forbidden") && out.contains("agent:edge1"),
        "an agent lists no policies, kubectl says why: {out}"
    );
    let (ok, out) = kubectl(&secure, &[&ca, "--token", "not-a-token", "get", "clusters"]).await;
    assert!(
        !ok && out.contains("You must be logged in") && out.contains("invalid bearer token"),
        "a wrong token over TLS: {out}"
    );
    let (ok, out) = kubectl(&secure, &["--token", &viewer, "get", "clusters"]).await;
    assert!(
        !ok && out.contains("certificate"),
        "an unknown CA is refused: {out}"
    );

    // a Secret template: the admin applies it (kubectl keeps the whole applied object in its
    // last-applied annotation) and reads its value; a viewer reads its keys only
    let value = format!("s3cr3t-{:08x}", rand::random::<u32>());
    let encoded =
        base64::Engine::encode(&base64::engine::general_purpose::STANDARD, value.as_bytes());
    let secret = dir.path().join("secret.yaml");
    std::fs::write(
        &secret,
        format!(
            "apiVersion: v1\nkind: Secret\nmetadata: {{name: db}}\ntype: Opaque\ndata: {{password: {encoded}}}\n"
        ),
    )
    .unwrap();
    let secret = secret.to_str().unwrap();
    let (ok, out) = kubectl(
        &secure,
        &[
            &ca, "--token", &admin, "apply", "-f", secret, "-n", "default",
        ],
    )
    .await;
    assert!(ok && out.contains("secret/db created"), "{out}");
    let (ok, out) = kubectl(
        &secure,
        &[
            &ca,
            "--token",
            &admin,
            "get",
            "secret",
            "db",
            "-n",
            "default",
            "-o",
            "jsonpath={.data.password}",
        ],
    )
    .await;
    assert_eq!(
        (ok, out.trim()),
        (true, encoded.as_str()),
        "the admin reads it"
    );
    let (ok, out) = kubectl(
        &secure,
        &[&ca, "--token", &viewer, "get", "secrets", "-n", "default"],
    )
    .await;
    assert!(
        ok && out.contains("db") && out.contains("Opaque"),
        "a viewer lists it: {out}"
    );
    let (ok, out) = kubectl(
        &secure,
        &[
            &ca, "--token", &viewer, "get", "secret", "db", "-n", "default", "-o", "yaml",
        ],
    )
    .await;
    assert!(
        ok && out.contains("password"),
        "a viewer sees the key: {out}"
    );
    assert!(
        !out.contains(&encoded) && !out.contains(&value),
        "a viewer never sees the value, nor in the last-applied annotation: {out}"
    );

    // kubectl auth can-i and whoami: the api's answer for the caller's own principal, and
    // what it says is what the request then meets
    let as_ = |token: &str, args: &[&str]| {
        let mut all = vec![ca.clone(), "--token".to_owned(), token.to_owned()];
        all.extend(args.iter().map(|a| (*a).to_owned()));
        let secure = secure.clone();
        async move {
            let args: Vec<&str> = all.iter().map(String::as_str).collect();
            kubectl(&secure, &args).await
        }
    };
    for (token, question, allowed, words) in [
        (&admin, &["create", "pp", "-n", "default"][..], true, "yes"),
        (
            &admin,
            &["delete", "deployments", "-n", "default"],
            true,
            "yes",
        ),
        (&viewer, &["list", "clusters"], true, "yes"),
        (&viewer, &["get", "rb", "-n", "default"], true, "yes"),
        (
            &viewer,
            &["create", "pp", "-n", "default"],
            false,
            "viewer may not call /flotilla.v1.Api/Apply",
        ),
        (
            &viewer,
            &["patch", "clusters"],
            false,
            "viewer may not call /flotilla.v1.Api/Apply",
        ),
        (
            &viewer,
            &["list", "works", "-n", "karmada-es-edge1"],
            false,
            "viewer may not call /flotilla.v1.Api/ListWorks",
        ),
        (
            &agent,
            &["list", "works", "-n", "karmada-es-edge1"],
            true,
            "yes",
        ),
        (
            &agent,
            &["watch", "works", "-n", "karmada-es-edge1"],
            true,
            "yes",
        ),
        (
            &agent,
            &["list", "works", "-n", "karmada-es-edge2"],
            false,
            "its own cluster only, not for cluster \"edge2\"",
        ),
        (
            &agent,
            &["list", "pp", "-A"],
            false,
            "agent:edge1 may not call /flotilla.v1.Api/ListPropagationPolicies",
        ),
        (
            &admin,
            &["create", "rb", "-n", "default"],
            false,
            "controllers write them",
        ),
        (
            &admin,
            &["update", "clusters", "--subresource=status"],
            false,
            "not served",
        ),
    ] {
        let mut args = vec!["auth", "can-i"];
        args.extend_from_slice(question);
        let (ok, out) = as_(token, &args).await;
        assert_eq!(ok, allowed, "can-i {question:?}: {out}");
        assert!(
            out.contains(words),
            "can-i {question:?}: {out:?} lacks {words:?}"
        );
    }
    let (ok, out) = as_(&agent, &["get", "works", "-n", "karmada-es-edge1"]).await;
    assert!(
        ok && out.contains("No resources found"),
        "as can-i said: {out}"
    );
    let (ok, out) = as_(&agent, &["get", "works", "-n", "karmada-es-edge2"]).await;
    assert!(!ok && out.contains("Forbidden"), "as can-i said: {out}");
    let (ok, out) = as_(&viewer, &["auth", "can-i", "--list"]).await;
    assert!(ok, "{out}");
    let rule = |resource: &str| {
        out.lines()
            .find(|l| l.split_whitespace().next() == Some(resource))
            .map(|l| l.split_whitespace().skip(3).collect::<Vec<_>>().join(" "))
    };
    assert_eq!(
        rule("clusters.cluster.karmada.io").as_deref(),
        Some("[get list watch]"),
        "{out}"
    );
    assert_eq!(
        rule("works.work.karmada.io"),
        None,
        "a viewer reads no Work: {out}"
    );
    if flotilla_tests::kube::kubectl_minor() >= 28 {
        let (ok, out) = as_(&agent, &["auth", "whoami"]).await;
        assert!(ok && out.contains("agent:edge1"), "{out}");
    } else {
        println!(
            "NOT RUN: `kubectl auth whoami` (kubectl 1.28+; this is 1.{})",
            flotilla_tests::kube::kubectl_minor()
        );
    }
    let (ok, out) = as_("not-a-token", &["auth", "can-i", "list", "clusters"]).await;
    assert!(!ok && out.contains("invalid bearer token"), "{out}");

    // a CRD's kind is served only to a caller the api lets read CRDs: the admin applies one
    // and discovers its kind; the agent (who may list no templates) neither discovers it
    // nor reaches it by its path
    let crds = dir.path().join("crds.yaml");
    std::fs::write(&crds, FLINK_CRD).unwrap();
    let crds = crds.to_str().unwrap();
    let cache = |who: &str| format!("--cache-dir={}", dir.path().join(who).display());
    let (ok, out) = as_(&admin, &[&cache("admin"), "apply", "-f", crds]).await;
    assert!(
        ok && out.contains("created"),
        "the admin applies a CRD: {out}"
    );
    let (ok, out) = as_(&admin, &[&cache("admin"), "api-resources", "-o", "name"]).await;
    assert!(
        ok && out
            .lines()
            .any(|l| l == "flinkdeployments.flink.apache.org"),
        "the admin discovers the CRD's kind: {out}"
    );
    let (ok, out) = as_(&agent, &[&cache("agent"), "api-resources", "-o", "name"]).await;
    assert!(
        out.lines().any(|l| l == "clusters.cluster.karmada.io")
            && !out.contains("flinkdeployments"),
        "the agent discovers the built-in kinds and not the CRD's ({ok}): {out}"
    );
    let flink = "/apis/flink.apache.org/v1beta1/namespaces/default/flinkdeployments";
    let (code, status) = curl(Some(agent.clone()), flink).await;
    assert_eq!(
        code, "404",
        "the agent does not reach the kind by path: {status}"
    );
    let (code, list) = curl(Some(admin.clone()), flink).await;
    assert_eq!(
        (code.as_str(), list["kind"].as_str()),
        ("200", Some("FlinkDeploymentList")),
        "the admin lists it: {list}"
    );
}

const POLICY: &str = "apiVersion: policy.karmada.io/v1alpha1
kind: PropagationPolicy
metadata:
  name: web
  labels: {team: shop}
spec:
  priority: 1
  resourceSelectors: [{apiVersion: apps/v1, kind: Deployment, name: web}]
  placement:
    clusterAffinity: {clusterNames: [member1, member2]}
";

/// The `spec` of the PropagationPolicy `web`, through the gateway.
async fn web_spec(server: &str) -> serde_json::Value {
    let out = kubectl_ok(server, &["get", "pp", "web", "-n", "default", "-o", "json"]).await;
    serde_json::from_str::<serde_json::Value>(&out).unwrap()["spec"].clone()
}

/// Writes with the real kubectl: client-side apply creates, then configures with a JSON merge
/// patch (a removed label is removed: kubectl's last-applied annotation is kept), then
/// writes nothing; create of an existing object, a stale replace and an invalid patch are
/// refused as kube-apiserver refuses them, with nothing written; JSON and merge patches;
/// delete. Bad bodies (not JSON, another kind, unknown fields, too large) get a clear Status.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_writes_karmadas_kinds_through_the_kubernetes_api() {
    let stack = Stack::start(Timers::fast()).await;
    let server = gateway(&stack).await;
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("web.yaml");
    let file = file.to_str().unwrap();
    std::fs::write(file, POLICY).unwrap();

    let out = kubectl_ok(&server, &["apply", "-f", file, "-n", "default"]).await;
    assert_eq!(
        out.trim(),
        "propagationpolicy.policy.karmada.io/web created"
    );
    assert_eq!(web_spec(&server).await["priority"], 1);
    // as flotilla reads it: the same object through both doors
    let by_flotilla = stack
        .cli_ok(&["get", "pp", "web", "-n", "default", "-o", "json"])
        .await;
    assert!(by_flotilla.contains("\"web\""), "{by_flotilla}");

    // a change: configured (kubectl sends a merge patch); a label dropped from the file goes
    std::fs::write(
        file,
        POLICY
            .replace("priority: 1", "priority: 4")
            .replace("  labels: {team: shop}\n", ""),
    )
    .unwrap();
    let out = kubectl_ok(&server, &["apply", "-f", file, "-n", "default"]).await;
    assert_eq!(
        out.trim(),
        "propagationpolicy.policy.karmada.io/web configured"
    );
    assert_eq!(web_spec(&server).await["priority"], 4);
    let labels = kubectl_ok(
        &server,
        &[
            "get",
            "pp",
            "web",
            "-n",
            "default",
            "-o",
            "jsonpath={.metadata.labels}",
        ],
    )
    .await;
    assert!(
        !labels.contains("team"),
        "the dropped label is gone: {labels}"
    );
    // the same file again writes nothing (kubectl still says "configured": the api defaults
    // each resourceSelector's namespace, as Karmada's webhook does, so kubectl's merge patch
    // sends the list again and the api finds it unchanged)
    let version = || async {
        kubectl_ok(
            &server,
            &[
                "get",
                "pp",
                "web",
                "-n",
                "default",
                "-o",
                "jsonpath={.metadata.resourceVersion}",
            ],
        )
        .await
    };
    let was = version().await;
    kubectl_ok(&server, &["apply", "-f", file, "-n", "default"]).await;
    assert_eq!(version().await, was, "an unchanged apply writes nothing");

    // create of what exists: AlreadyExists
    let (ok, out) = kubectl(&server, &["create", "-f", file, "-n", "default"]).await;
    assert!(!ok && out.contains("AlreadyExists"), "{out}");

    // a JSON patch and a merge patch
    kubectl_ok(
        &server,
        &[
            "patch",
            "pp",
            "web",
            "-n",
            "default",
            "--type=json",
            "-p",
            r#"[{"op":"replace","path":"/spec/priority","value":7}]"#,
        ],
    )
    .await;
    assert_eq!(web_spec(&server).await["priority"], 7);
    kubectl_ok(
        &server,
        &[
            "patch",
            "pp",
            "web",
            "-n",
            "default",
            "--type=merge",
            "-p",
            r#"{"spec":{"priority":8}}"#,
        ],
    )
    .await;
    assert_eq!(web_spec(&server).await["priority"], 8);

    // refused, nothing written: an unknown field (422 naming it), a value the api's
    // validation refuses, a failed JSON patch test, a strategic merge patch (415, as for
    // custom kinds on kube-apiserver)
    let before = web_spec(&server).await;
    let (ok, out) = kubectl(
        &server,
        &[
            "patch",
            "pp",
            "web",
            "-n",
            "default",
            "--type=merge",
            "-p",
            r#"{"spec":{"bogus":1}}"#,
        ],
    )
    .await;
    assert!(
        !ok && out.contains("is invalid") && out.contains("bogus"),
        "{out}"
    );
    let (ok, out) = kubectl(
        &server,
        &[
            "patch",
            "pp",
            "web",
            "-n",
            "default",
            "--type=merge",
            "-p",
            r#"{"spec":{"placement":{"replicaScheduling":{"replicaSchedulingType":"Sideways"}}}}"#,
        ],
    )
    .await;
    assert!(
        !ok && out.contains("is invalid") && out.contains("replicaSchedulingType"),
        "{out}"
    );
    let (ok, out) = kubectl(
        &server,
        &[
            "patch",
            "pp",
            "web",
            "-n",
            "default",
            "--type=json",
            "-p",
            r#"[{"op":"test","path":"/spec/priority","value":99}]"#,
        ],
    )
    .await;
    assert!(!ok && out.contains("JSON patch failed"), "{out}");
    let (ok, out) = kubectl(
        &server,
        &[
            "patch",
            "pp",
            "web",
            "-n",
            "default",
            "--type=strategic",
            "-p",
            r#"{"spec":{"priority":2}}"#,
        ],
    )
    .await;
    // kubectl 1.32 refuses it itself (the kind is not built in); kubectl 1.20 sends it and
    // prints the gateway's 415, as kube-apiserver answers for a custom kind
    assert!(
        !ok && (out.contains("strategic-merge-patch+json is not supported")
            || out.contains("(UnsupportedMediaType)")),
        "{out}"
    );
    assert_eq!(web_spec(&server).await, before, "nothing written");

    // replace on a stale resourceVersion: Conflict; on the current one: replaced
    let current: serde_json::Value = serde_json::from_str(
        &kubectl_ok(
            &server,
            &["get", "pp", "web", "-n", "default", "-o", "json"],
        )
        .await,
    )
    .unwrap();
    let rv: i64 = current["metadata"]["resourceVersion"]
        .as_str()
        .unwrap()
        .parse()
        .unwrap();
    let mut stale = current.clone();
    stale["metadata"]["resourceVersion"] = (rv - 1).to_string().into();
    stale["spec"]["priority"] = 9.into();
    let stale_file = dir.path().join("stale.json");
    std::fs::write(&stale_file, stale.to_string()).unwrap();
    let stale_file = stale_file.to_str().unwrap();
    let (ok, out) = kubectl(&server, &["replace", "-f", stale_file]).await;
    assert!(!ok && out.contains("Conflict"), "{out}");
    assert_eq!(web_spec(&server).await, before);
    stale["metadata"]["resourceVersion"] = rv.to_string().into();
    std::fs::write(stale_file, stale.to_string()).unwrap();
    let out = kubectl_ok(&server, &["replace", "-f", stale_file]).await;
    assert!(out.contains("replaced"), "{out}");
    assert_eq!(web_spec(&server).await["priority"], 9);

    // bad bodies, straight to the API: each a clear Status, nothing stored
    let post = |body: Vec<u8>, content_type: &'static str| {
        let url = format!(
            "{server}/apis/policy.karmada.io/v1alpha1/namespaces/default/propagationpolicies"
        );
        let body_file = dir.path().join(format!("body-{}", rand::random::<u32>()));
        std::fs::write(&body_file, body).unwrap();
        async move {
            let mut command = tokio::process::Command::new("curl");
            command.args([
                "-s",
                "-w",
                "\n%{http_code}",
                "-X",
                "POST",
                "-H",
                &format!("Content-Type: {content_type}"),
                "--data-binary",
                &format!("@{}", body_file.display()),
                &url,
            ]);
            let (ok, out) = command_output(&mut command).await;
            assert!(ok, "curl: {out}");
            let (body, code) = out.trim_end().rsplit_once('\n').unwrap_or(("", ""));
            (
                code.to_owned(),
                serde_json::from_str::<serde_json::Value>(body).unwrap_or_default(),
            )
        }
    };
    let named = |name: &str| POLICY.replace("name: web\n", &format!("name: {name}\n"));
    let as_json = |yaml: &str| {
        serde_json::to_vec(&serde_norway::from_str::<serde_json::Value>(yaml).unwrap()).unwrap()
    };
    for (body, content_type, code, says) in [
        (
            b"{not json".to_vec(),
            "application/json",
            "400",
            "not valid JSON",
        ),
        (
            b"apiVersion: [".to_vec(),
            "application/yaml",
            "400",
            "not valid YAML",
        ),
        (
            as_json(&named("other").replace("policy.karmada.io/v1alpha1", "policy.karmada.io/v1")),
            "application/json",
            "400",
            "does not match the expected API version",
        ),
        (
            as_json(&named("other").replace("kind: PropagationPolicy", "kind: OverridePolicy")),
            "application/json",
            "400",
            "does not match the expected kind",
        ),
        (
            as_json(
                &named("other").replace("  priority: 1\n", "  priority: 1\n  surprise: true\n"),
            ),
            "application/json",
            "422",
            "surprise",
        ),
        (
            as_json(
                &named("other")
                    .replace("  name: other\n", "  name: other\n  namespace: elsewhere\n"),
            ),
            "application/json",
            "400",
            "does not match the namespace",
        ),
        (
            {
                let mut big = serde_norway::from_str::<serde_json::Value>(&named("other")).unwrap();
                big["metadata"]["annotations"] = serde_json::json!({"x": "y".repeat(4 << 20)});
                serde_json::to_vec(&big).unwrap()
            },
            "application/json",
            "413",
            "larger than 3 MiB",
        ),
        (
            format!("{}1{}", "[".repeat(100_000), "]".repeat(100_000)).into_bytes(),
            "application/json",
            "400",
            "not valid JSON",
        ),
    ] {
        let (got, status) = post(body, content_type).await;
        assert_eq!(got, code, "{says}: {status}");
        assert!(
            status["kind"] == "Status"
                && status["message"]
                    .as_str()
                    .unwrap_or_default()
                    .contains(says),
            "{says}: {status}"
        );
    }
    let (ok, out) = kubectl(&server, &["get", "pp", "other", "-n", "default"]).await;
    assert!(!ok && out.contains("NotFound"), "nothing stored: {out}");

    // a JSON patch that doubles the object sixty times is refused before it is made
    let doubling: Vec<serde_json::Value> = (0..60)
        .map(|i| serde_json::json!({"op": "copy", "from": "", "path": format!("/spec/x{i}")}))
        .collect();
    let doubling = serde_json::to_string(&doubling).unwrap();
    let (ok, out) = kubectl(
        &server,
        &[
            "patch",
            "pp",
            "web",
            "-n",
            "default",
            "--type=json",
            "-p",
            &doubling,
        ],
    )
    .await;
    assert!(!ok && out.contains("larger than 3 MiB"), "{out}");
    // impersonation is not the gateway's to grant; writes need a namespace in the path
    let (ok, out) = kubectl(&server, &["--as=someone", "get", "pp", "-A"]).await;
    assert!(!ok && out.contains("impersonation"), "{out}");
    let (code, status) = {
        let url = format!("{server}/apis/policy.karmada.io/v1alpha1/propagationpolicies");
        let mut command = tokio::process::Command::new("curl");
        command.args(["-s", "-w", "\n%{http_code}", "-X", "DELETE", &url]);
        let (_, out) = command_output(&mut command).await;
        let (body, code) = out.trim_end().rsplit_once('\n').unwrap_or(("", ""));
        (code.to_owned(), body.to_owned())
    };
    assert_eq!(
        code, "404",
        "a delete of every namespace's policies: {status}"
    );
    // a template's unknown field: kubectl asks for strict validation, so it is refused
    let deployment = dir.path().join("typo.yaml");
    std::fs::write(
        &deployment,
        "apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: typo}\nspec:\n  replicass: 2\n  \
         selector: {matchLabels: {app: t}}\n  template:\n    metadata: {labels: {app: t}}\n    \
         spec: {containers: [{name: t, image: nginx}]}\n",
    )
    .unwrap();
    let (ok, out) = kubectl(
        &server,
        &["apply", "-f", deployment.to_str().unwrap(), "-n", "default"],
    )
    .await;
    if flotilla_tests::kube::kubectl_minor() >= 25 {
        assert!(!ok && out.contains("replicass"), "{out}");
        let (ok, out) = kubectl(&server, &["get", "deploy", "typo", "-n", "default"]).await;
        assert!(!ok && out.contains("NotFound"), "{out}");
    } else {
        // kubectls before 1.25 ask for no server-side field validation, and validate on the
        // client from the OpenAPI v2 schemas, where Flotilla's templates are open objects:
        // the gateway then answers as kube-apiserver's default (Warn) does, and says which
        // field it did not know (a difference docs/kubernetes-api.md names)
        assert!(
            ok && out.contains("unknown field 'spec.replicass'"),
            "kubectl 1.{}: {out}",
            flotilla_tests::kube::kubectl_minor()
        );
        kubectl_ok(&server, &["delete", "deploy", "typo", "-n", "default"]).await;
    }

    // delete
    let out = kubectl_ok(&server, &["delete", "-f", file, "-n", "default"]).await;
    assert_eq!(
        out.trim(),
        "propagationpolicy.policy.karmada.io \"web\" deleted"
    );
    let (ok, out) = kubectl(&server, &["get", "pp", "web", "-n", "default"]).await;
    assert!(!ok && out.contains("NotFound"), "{out}");
}

/// Karmada's nginx sample with kubectl only, against the Kubernetes API: `kubectl apply -f`
/// of the Deployment and its PropagationPolicy places it on the members; `kubectl get rb`
/// shows where; a changed image applied again (kubectl sends a strategic merge patch, with
/// its `$setElementOrder` directives) reaches the template and the members; `kubectl
/// delete -f` removes both and the members' copies; applied again server-side, a member's
/// failure is followed with `kubectl get rb -w`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn karmadas_nginx_sample_with_kubectl_only() {
    let mut stack = Stack::start(Timers::fast()).await;
    let api = stack.ready_unequal_members(T).await;
    let server = gateway(&stack).await;
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("nginx.yaml");
    let file = file.to_str().unwrap();
    let seed = include_str!("../../docker/compose/seed.yaml");
    std::fs::write(file, seed).unwrap();

    let out = kubectl_ok(&server, &["apply", "-f", file, "-n", "default"]).await;
    assert!(
        out.contains("deployment.apps/nginx created")
            && out.contains("propagationpolicy.policy.karmada.io/nginx-propagation created"),
        "{out}"
    );
    eventually(T, "nginx {member1:1, member2:2} healthy", || async {
        let b = nginx_binding(&api).await?;
        let want = [("member1".to_owned(), 1), ("member2".to_owned(), 2)];
        (targets(&b) == want && binding_healthy(&b)).then_some(())
    })
    .await;
    let placed = kubectl_ok(
        &server,
        &[
            "get",
            "rb",
            "nginx-deployment",
            "-n",
            "default",
            "-o",
            "jsonpath={.spec.clusters[*].name}",
        ],
    )
    .await;
    assert_eq!(placed.trim(), "member1 member2");
    // the template's status, aggregated from the members' copies (IN-4): kubectl prints
    // READY 3/3 and rollout status finds every member on the template's generation (IN-7)
    let ready = eventually(T, "kubectl get deploy nginx: READY 3/3", || async {
        let (ok, out) = kubectl(&server, &["get", "deploy", "nginx", "-n", "default"]).await;
        let rows: Vec<Vec<String>> = out
            .lines()
            .map(|l| l.split_whitespace().map(str::to_owned).collect())
            .collect();
        (ok && rows.len() == 2 && rows[1][1] == "3/3").then_some(rows)
    })
    .await;
    assert_eq!(
        ready[0],
        ["NAME", "READY", "UP-TO-DATE", "AVAILABLE", "AGE"]
    );
    assert_eq!(ready[1][..4], ["nginx", "3/3", "3", "3"]);
    let rolled = kubectl_ok(
        &server,
        &[
            "rollout",
            "status",
            "deploy/nginx",
            "-n",
            "default",
            "--timeout=40s",
        ],
    )
    .await;
    assert!(rolled.contains("successfully rolled out"), "{rolled}");
    // the template as kube-apiserver returns it: the manifest with the server's metadata
    let template: serde_json::Value = serde_json::from_str(
        &kubectl_ok(
            &server,
            &["get", "deploy", "nginx", "-n", "default", "-o", "json"],
        )
        .await,
    )
    .unwrap();
    assert_eq!(template["spec"]["replicas"], 3);
    assert!(
        template["metadata"]["resourceVersion"].is_string()
            && template["metadata"]["uid"].is_string(),
        "{template}"
    );
    let listed = kubectl_ok(&server, &["get", "deploy", "-A", "-o", "name"]).await;
    assert_eq!(listed.trim(), "deployment.apps/nginx");

    // a new image: kubectl computes a strategic merge patch from its last-applied annotation
    std::fs::write(file, seed.replace("image: nginx}", "image: nginx:1.27}")).unwrap();
    let out = kubectl_ok(&server, &["apply", "-f", file, "-n", "default"]).await;
    assert!(out.contains("deployment.apps/nginx configured"), "{out}");
    let image = kubectl_ok(
        &server,
        &[
            "get",
            "deploy",
            "nginx",
            "-n",
            "default",
            "-o",
            "jsonpath={.spec.template.spec.containers[0].image}",
        ],
    )
    .await;
    assert_eq!(image.trim(), "nginx:1.27");
    // IN-7: rollout status returns only once every member's copy observed the new
    // generation, so both members run the new image by then
    let rolled = kubectl_ok(
        &server,
        &[
            "rollout",
            "status",
            "deploy/nginx",
            "-n",
            "default",
            "--timeout=40s",
        ],
    )
    .await;
    assert!(rolled.contains("successfully rolled out"), "{rolled}");
    for member in ["member1", "member2"] {
        let addr = stack.members[member].addr.clone();
        let (ok, out, _) = flotilla_tests::member_kubectl(
            &addr,
            &[
                "get",
                "deploy",
                "nginx",
                "-n",
                "default",
                "-o",
                "jsonpath={.spec.template.spec.containers[0].image}",
            ],
        )
        .await;
        assert!(
            ok && out.trim() == "nginx:1.27",
            "{member} once rolled out: {out}"
        );
    }
    let member2 = stack.members["member2"].addr.clone();
    eventually(T, "member2 runs the new image", || async {
        let (ok, out, _) = flotilla_tests::member_kubectl(
            &member2,
            &[
                "get",
                "deploy",
                "nginx",
                "-n",
                "default",
                "-o",
                "jsonpath={.spec.template.spec.containers[0].image}",
            ],
        )
        .await;
        (ok && out.trim() == "nginx:1.27").then_some(())
    })
    .await;
    // kubectl patch's default type is a strategic merge patch too
    kubectl_ok(
        &server,
        &["patch", "deploy", "nginx", "-n", "default", "-p", r#"{"spec":{"template":{"spec":{"containers":[{"name":"nginx","env":[{"name":"MODE","value":"blue"}]}]}}}}"#],
    )
    .await;
    let env = kubectl_ok(
        &server,
        &["get", "deploy", "nginx", "-n", "default", "-o", "jsonpath={.spec.template.spec.containers[0].env[0].value} {.spec.template.spec.containers[0].image}"],
    )
    .await;
    assert_eq!(
        env.trim(),
        "blue nginx:1.27",
        "merged into the container by its name"
    );

    // delete -f: the template and the policy go, and so do the members' copies
    let out = kubectl_ok(&server, &["delete", "-f", file, "-n", "default"]).await;
    assert!(out.contains("deployment.apps \"nginx\" deleted"), "{out}");
    for member in ["member1", "member2"] {
        let addr = stack.members[member].addr.clone();
        eventually(T, &format!("{member} no longer runs nginx"), || async {
            let (ok, out, _) =
                flotilla_tests::member_kubectl(&addr, &["get", "deploy", "-A", "-o", "name"]).await;
            (ok && !out.contains("nginx")).then_some(())
        })
        .await;
    }
    let (ok, out) = kubectl(&server, &["get", "deploy", "nginx", "-n", "default"]).await;
    assert!(!ok && out.contains("NotFound"), "{out}");

    // the same sample once more, server-side applied (as Argo CD and Flux apply)
    let out = kubectl_ok(
        &server,
        &["apply", "--server-side", "-f", file, "-n", "default"],
    )
    .await;
    assert!(
        out.contains("deployment.apps/nginx serverside-applied")
            && out.contains(
                "propagationpolicy.policy.karmada.io/nginx-propagation serverside-applied"
            ),
        "{out}"
    );
    eventually(T, "nginx placed and healthy again", || async {
        let b = nginx_binding(&api).await?;
        (!targets(&b).is_empty() && binding_healthy(&b)).then_some(())
    })
    .await;
    let managers = kubectl_ok(
        &server,
        &[
            "get",
            "deploy",
            "nginx",
            "-n",
            "default",
            flotilla_tests::kube::show_managed_fields(),
            "-o",
            "jsonpath={.metadata.managedFields[*].manager}/{.metadata.managedFields[*].operation}",
        ],
    )
    .await;
    assert_eq!(managers.trim(), "kubectl/Apply");

    // a failover, followed with `kubectl get rb -w`: member1 stops answering, and the watch
    // shows the binding leave it (an eviction task while member2 takes its replica), then
    // member2 alone
    let mut watcher = tokio::process::Command::new("kubectl")
        .arg(format!("--server={server}"))
        .args([
            "get",
            "rb",
            "nginx-deployment",
            "-n",
            "default",
            "-w",
            "-o",
            r#"jsonpath={.spec.clusters[*].name}={.spec.clusters[*].replicas}|{.spec.gracefulEvictionTasks[*].fromCluster}{"\n"}"#,
        ])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::inherit())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let mut lines = tokio::io::BufReader::new(watcher.stdout.take().unwrap()).lines();
    let first = tokio::time::timeout(T, lines.next_line())
        .await
        .expect("the watch prints the binding")
        .unwrap()
        .unwrap_or_default();
    assert_eq!(
        first, "member1 member2=1 2|",
        "where nginx runs before the fault"
    );
    flotilla_tests::set_fault(
        &stack.members["member1"],
        flotilla_proto::v1::FaultMode::Unreachable,
    )
    .await;
    let mut seen = vec![first];
    let moved = tokio::time::timeout(Duration::from_secs(90), async {
        while let Ok(Some(line)) = lines.next_line().await {
            let done = line == "member2=3|";
            seen.push(line);
            if done {
                return true;
            }
        }
        false
    })
    .await;
    assert_eq!(moved, Ok(true), "the watch followed the failover: {seen:?}");
    assert!(
        seen.iter().any(|l| l.ends_with("|member1")),
        "an eviction task from member1 was seen on the way: {seen:?}"
    );
    drop(lines);
    let _ = watcher.kill().await;
    flotilla_tests::set_fault(
        &stack.members["member1"],
        flotilla_proto::v1::FaultMode::Healthy,
    )
    .await;

    let out = kubectl_ok(&server, &["delete", "-f", file, "-n", "default"]).await;
    assert!(out.contains("deployment.apps \"nginx\" deleted"), "{out}");
}

/// The official Python client (PyPI `kubernetes`, installed by scripts/test.sh): its
/// dynamic client discovers Karmada's kinds, creates, lists, watches, patches (merge and
/// JSON patch) and deletes a PropagationPolicy, deletes a collection by label, and reads
/// 409 and 422 Statuses as from
/// kube-apiserver (tests/kubeclient/dynamic.py says each step).
const PI_JOB: &str = r#"apiVersion: batch/v1
kind: Job
metadata: {name: pi, namespace: default}
spec:
  template:
    spec:
      restartPolicy: Never
      containers: [{name: pi, image: perl}]
---
apiVersion: policy.karmada.io/v1alpha1
kind: PropagationPolicy
metadata: {name: pi, namespace: default}
spec:
  resourceSelectors: [{apiVersion: batch/v1, kind: Job, name: pi}]
  placement:
    clusterAffinity: {clusterNames: [member1, member2]}
"#;

/// A Job's status on the template (IN-4): `kubectl wait --for=condition=Complete` returns
/// once every member's copy completed, and kubectl prints the summed completions.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_waits_for_a_propagated_job_to_complete() {
    let mut stack = Stack::start(Timers::fast()).await;
    stack.ready_unequal_members(T).await;
    let server = gateway(&stack).await;
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("pi.yaml");
    let file = file.to_str().unwrap();
    std::fs::write(file, PI_JOB).unwrap();
    kubectl_ok(&server, &["apply", "-f", file]).await;
    let waited = kubectl_ok(
        &server,
        &[
            "wait",
            "--for=condition=Complete",
            "job/pi",
            "-n",
            "default",
            "--timeout=40s",
        ],
    )
    .await;
    assert_eq!(waited.trim(), "job.batch/pi condition met");
    let status: serde_json::Value = serde_json::from_str(
        &kubectl_ok(
            &server,
            &[
                "get",
                "job",
                "pi",
                "-n",
                "default",
                "-o",
                "jsonpath={.status}",
            ],
        )
        .await,
    )
    .unwrap();
    assert_eq!(
        status["succeeded"], 2,
        "one completion on each member: {status}"
    );
    assert_eq!(status["conditions"][0]["reason"], "Completed", "{status}");
    let printed = kubectl_ok(
        &server,
        &["get", "job", "pi", "-n", "default", "--no-headers"],
    )
    .await;
    let row: Vec<&str> = printed.split_whitespace().collect();
    assert_eq!(row[..2], ["pi", "2/1"], "{printed}");
    // a user's write never sets the status: an apply of a status is dropped, the
    // aggregated one stays
    let (ok, out) = kubectl(
        &server,
        &[
            "patch",
            "job",
            "pi",
            "-n",
            "default",
            "--type=merge",
            "-p",
            r#"{"status":{"succeeded":9},"metadata":{"labels":{"x":"y"}}}"#,
        ],
    )
    .await;
    assert!(ok, "{out}");
    let after = kubectl_ok(
        &server,
        &[
            "get",
            "job",
            "pi",
            "-n",
            "default",
            "-o",
            "jsonpath={.status.succeeded} {.metadata.labels.x}",
        ],
    )
    .await;
    assert_eq!(after.trim(), "2 y");
}

/// A GitOps-style apply as Flux's kustomize-controller does it: a directory, server-side,
/// as one field manager; a second manager's conflicting change is refused (409, naming the
/// owner and the field) and writes nothing, and the owner's next apply still wins nothing
/// it did not ask for.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flux_style_directory_apply_and_a_second_managers_conflict() {
    let mut stack = Stack::start(Timers::fast()).await;
    stack.ready_unequal_members(T).await;
    let server = gateway(&stack).await;
    let dir = tempfile::tempdir().unwrap();
    let seed = include_str!("../../docker/compose/seed.yaml");
    let (deployment, policy) = seed.split_once("\n---\n").unwrap();
    std::fs::write(dir.path().join("deployment.yaml"), deployment).unwrap();
    std::fs::write(dir.path().join("policy.yaml"), policy).unwrap();
    let path = dir.path().to_str().unwrap();
    let flux = [
        "apply",
        "--server-side",
        "--field-manager=kustomize-controller",
        "-n",
        "default",
        "-f",
        path,
    ];
    let out = kubectl_ok(&server, &flux).await;
    assert!(
        out.contains("deployment.apps/nginx serverside-applied")
            && out.contains(
                "propagationpolicy.policy.karmada.io/nginx-propagation serverside-applied"
            ),
        "{out}"
    );
    let managers = kubectl_ok(
        &server,
        &[
            "get",
            "deploy",
            "nginx",
            "-n",
            "default",
            flotilla_tests::kube::show_managed_fields(),
            "-o",
            "jsonpath={.metadata.managedFields[*].manager}",
        ],
    )
    .await;
    assert_eq!(managers.trim(), "kustomize-controller");
    // (the template's resourceVersion moves with its aggregated status: its generation and
    // managers say whether a user's write changed it)
    let state = || async {
        kubectl_ok(
            &server,
            &["get", "deploy", "nginx", "-n", "default", flotilla_tests::kube::show_managed_fields(), "-o",
              "jsonpath={.metadata.generation} {.spec.replicas} {.metadata.managedFields[*].manager} {.metadata.managedFields[*].time}"],
        )
        .await
    };
    let version = state().await;

    // someone else applies another replica count: refused, nothing written
    let elsewhere = tempfile::tempdir().unwrap();
    let other = elsewhere.path().join("other.yaml");
    std::fs::write(&other, deployment.replace("replicas: 3", "replicas: 5")).unwrap();
    let (ok, out) = kubectl(
        &server,
        &[
            "apply",
            "--server-side",
            "--field-manager=hotfix",
            "-n",
            "default",
            "-f",
            other.to_str().unwrap(),
        ],
    )
    .await;
    assert!(
        !ok && out.contains("conflict")
            && out.contains("kustomize-controller")
            && out.contains(".spec.replicas"),
        "{out}"
    );
    assert_eq!(state().await, version, "nothing written");
    assert!(version.starts_with("1 3 kustomize-controller"), "{version}");
    // the directory again: unchanged, nothing written
    kubectl_ok(&server, &flux).await;
    tokio::time::sleep(Duration::from_millis(1100)).await;
    kubectl_ok(&server, &flux).await;
    assert_eq!(
        state().await,
        version,
        "an unchanged server-side apply writes nothing, a second later too"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_python_clients_dynamic_client_drives_karmadas_kinds() {
    let stack = Stack::start(Timers::fast()).await;
    let server = gateway(&stack).await;
    let dir = tempfile::tempdir().unwrap();
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/kubeclient/dynamic.py");
    let mut command = tokio::process::Command::new("python3");
    command
        .arg(script)
        .arg(&server)
        .arg(dir.path().join("discovery.json"));
    let (ok, out) = tokio::time::timeout(T, command_output(&mut command))
        .await
        .expect("the Python client finished");
    assert!(ok && out.trim_end().ends_with("OK"), "{out}");
    for step in [
        "discovered PropagationPolicy propagationpolicies namespaced=True",
        "discovered ResourceBinding short_names=['rb']",
        "create again: 409 AlreadyExists",
        "listed ['py']",
        "patched priority=6",
        "invalid patch: 422 Invalid causes=['spec.nonsense']",
        // a DELETED event carries the object's metadata only, not its last spec (a known
        // difference from kube-apiserver: docs/kubernetes-api.md)
        "watched [('MODIFIED', 'py', 5), ('MODIFIED', 'py', 6), ('DELETED', 'py', None)]",
        "deletecollection left ['c']",
        // resourceSelectors too: an atomic list (a CRD's lists are), and the api defaulted
        // each selector's namespace into the stored one, so the config's differs from it
        // (docs/kubernetes-api.md, "Server-side apply")
        "conflicting apply: 409 Conflict fields=['.spec.priority', '.spec.resourceSelectors']",
        "forced priority=9 managers=[('gitops', 'Apply'), ('py-other', 'Apply')]",
    ] {
        assert!(out.contains(step), "{step}: {out}");
    }
}

/// One server of the differential test: kubectl's arguments to reach it.
struct Server {
    name: &'static str,
    args: Vec<String>,
}

impl Server {
    async fn kubectl(&self, args: &[&str]) -> (bool, String) {
        let mut command = tokio::process::Command::new("kubectl");
        command
            .args(&self.args)
            .arg("--request-timeout=20s")
            .args(args);
        command_output(&mut command).await
    }

    /// What a step leaves to compare: the object's user fields and its managers (their
    /// times dropped), or `None` when it is not there.
    async fn state(&self, kind: &str, name: &str) -> serde_json::Value {
        let (ok, out) = self
            .kubectl(&[
                "get",
                kind,
                name,
                "-n",
                "default",
                "-o",
                "json",
                flotilla_tests::kube::show_managed_fields(),
            ])
            .await;
        if !ok {
            return serde_json::Value::Null;
        }
        let object: serde_json::Value = serde_json::from_str(&out).unwrap();
        // the real member's Deployment controller writes the status (a manager of its own);
        // a control plane has no such controller, Karmada's neither
        let managers: Vec<serde_json::Value> = object["metadata"]["managedFields"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|m| m["manager"] != "kube-controller-manager")
            .map(|m| {
                let mut m = m.clone();
                m.as_object_mut().unwrap().remove("time");
                m
            })
            .collect();
        serde_json::json!({
            "labels": object["metadata"]["labels"],
            "data": object["data"],
            "replicas": object["spec"]["replicas"],
            "image": object["spec"]["template"]["spec"]["containers"][0]["image"],
            "managedFields": managers,
        })
    }
}

/// The differential test: the same kubectl steps against a real kube-apiserver 1.20.2 and
/// against the gateway: server-side applies by two managers (Flux's `kustomize-controller`
/// and another), a conflict and its forced take-over, a manager that stops applying a
/// field, merge / JSON / strategic patches, replace and create. After every step both
/// must have answered alike (success, and kubectl's words) and hold the same fields with
/// the same managers. Every difference is printed before the test fails on it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_gateway_answers_server_side_apply_like_kube_apiserver() {
    let stack = Stack::start(Timers::fast()).await;
    let dir = tempfile::tempdir().unwrap();
    let etcd = stack.etcd.endpoints().join(",");
    let real =
        flotilla_tests::kube::RealMember::start(dir.path(), "real", &etcd, 1, 10, "1s").await;
    let gateway = Server {
        name: "gateway",
        args: vec![format!("--server={}", gateway(&stack).await)],
    };
    let real = Server {
        name: "kube-apiserver",
        args: vec![format!("--kubeconfig={}", real.direct_kubeconfig.display())],
    };
    let file = |name: &str, text: &str| {
        let path = dir.path().join(name);
        std::fs::write(&path, text).unwrap();
        path.display().to_string()
    };
    let cm = |data: &str| {
        format!(
            "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: c\n  labels: {{app: web}}\ndata: {data}\n"
        )
    };
    let flux = file("flux.yaml", &cm("{a: '1', b: '2'}"));
    let other = file("other.yaml", &cm("{a: '9'}"));
    let flux_less = file("flux-less.yaml", &cm("{a: '1'}"));
    let replaced = file(
        "replaced.yaml",
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: c\n  labels: {app: web, tier: front}\ndata: {a: '5', c: '3'}\n",
    );
    let deploy = |replicas: u32, image: &str| {
        format!(
            "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: nginx\n  labels: {{app: nginx}}\n\
             spec:\n  replicas: {replicas}\n  selector:\n    matchLabels: {{app: nginx}}\n  template:\n    \
             metadata:\n      labels: {{app: nginx}}\n    spec:\n      containers:\n      - name: nginx\n        \
             image: {image}\n        ports:\n        - containerPort: 80\n"
        )
    };
    let deploy_flux = file("deploy-flux.yaml", &deploy(2, "nginx:1.19"));
    let deploy_other = file("deploy-other.yaml", &deploy(5, "nginx:1.20"));
    let ssa = |manager: &'static str, path: &str, force: bool| {
        let mut args = vec![
            "apply".to_owned(),
            "--server-side".into(),
            format!("--field-manager={manager}"),
            "-n".into(),
            "default".into(),
            "-f".into(),
            path.to_owned(),
        ];
        if force {
            args.push("--force-conflicts".into());
        }
        args
    };
    let plain = |a: &[&str]| a.iter().map(|s| (*s).to_owned()).collect::<Vec<_>>();
    let steps: Vec<(&str, Vec<String>, (&str, &str))> = vec![
        (
            "flux applies",
            ssa("kustomize-controller", &flux, false),
            ("cm", "c"),
        ),
        (
            "flux applies the same again",
            ssa("kustomize-controller", &flux, false),
            ("cm", "c"),
        ),
        (
            "another manager's change conflicts",
            ssa("other", &other, false),
            ("cm", "c"),
        ),
        (
            "forced, it takes the field",
            ssa("other", &other, true),
            ("cm", "c"),
        ),
        (
            "flux's apply of a now conflicts",
            ssa("kustomize-controller", &flux_less, false),
            ("cm", "c"),
        ),
        (
            "flux forces, and b goes",
            ssa("kustomize-controller", &flux_less, true),
            ("cm", "c"),
        ),
        (
            "a merge patch (an Update)",
            plain(&[
                "patch",
                "cm",
                "c",
                "-n",
                "default",
                "--type=merge",
                "-p",
                r#"{"data":{"c":"3"}}"#,
            ]),
            ("cm", "c"),
        ),
        (
            "a JSON patch",
            plain(&[
                "patch",
                "cm",
                "c",
                "-n",
                "default",
                "--type=json",
                "-p",
                r#"[{"op":"add","path":"/data/d","value":"4"}]"#,
            ]),
            ("cm", "c"),
        ),
        (
            "a strategic merge patch",
            plain(&[
                "patch",
                "cm",
                "c",
                "-n",
                "default",
                "-p",
                r#"{"metadata":{"labels":{"patched":"yes"}}}"#,
            ]),
            ("cm", "c"),
        ),
        (
            "a replace",
            plain(&["replace", "-n", "default", "-f", &replaced]),
            ("cm", "c"),
        ),
        (
            "a create",
            plain(&["create", "cm", "d", "-n", "default", "--from-literal=x=y"]),
            ("cm", "d"),
        ),
        (
            "a Deployment applied",
            ssa("kustomize-controller", &deploy_flux, false),
            ("deploy", "nginx"),
        ),
        (
            "its replicas and image by another manager conflict",
            ssa("hpa", &deploy_other, false),
            ("deploy", "nginx"),
        ),
        (
            "forced",
            ssa("hpa", &deploy_other, true),
            ("deploy", "nginx"),
        ),
        (
            "delete",
            plain(&["delete", "cm", "c", "-n", "default"]),
            ("cm", "c"),
        ),
    ];
    let mut differences = Vec::new();
    for (what, args, (kind, name)) in &steps {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let (a, b) = tokio::join!(real.kubectl(&args), gateway.kubectl(&args));
        println!("{what}:\n  {}: {a:?}\n  {}: {b:?}", real.name, gateway.name);
        if a != b {
            differences.push(format!(
                "{what}: kubectl said\n  {a:?} on {}\n  {b:?} on {}",
                real.name, gateway.name
            ));
        }
        let (x, y) = tokio::join!(real.state(kind, name), gateway.state(kind, name));
        if x != y {
            differences.push(format!(
                "{what}: the {kind} is\n  {x} on {}\n  {y} on {}",
                real.name, gateway.name
            ));
        }
    }
    for d in &differences {
        println!("DIFFERENCE {d}");
    }
    assert!(
        differences.is_empty(),
        "{} differences (printed above)",
        differences.len()
    );
}

/// The gateway as its own process (`flotilla gateway`, docker-compose's `kube-gateway`), with
/// the TLS and token `flotilla credentials init` makes and the kubeconfig `flotilla
/// credentials kubeconfig` prints: kubectl reaches the api as the admin, and nothing without
/// the token.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_gateway_process_serves_kubectl_with_the_credentials_init_made() {
    let dir = tempfile::tempdir().unwrap();
    let creds = dir.path().join("credentials");
    let flotilla = flotilla_tests::bin_path("flotilla");
    let out = std::process::Command::new(&flotilla)
        .args(["credentials", "init"])
        .arg(&creds)
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let stack = Stack::start_with_env(
        Timers::fast(),
        vec![(
            "FLOTILLA_AUTH_TOKENS_FILE".into(),
            creds.join("tokens").display().to_string(),
        )],
    )
    .await;
    let port = flotilla_tests::free_port();
    let mut gateway = tokio::process::Command::new(&flotilla)
        .args(["gateway", "--server", &stack.addrs["api"]])
        .args(["--listen", &format!("127.0.0.1:{port}")])
        .arg("--kube-tls-cert")
        .arg(creds.join("kube.pem"))
        .arg("--kube-tls-key")
        .arg(creds.join("kube-key.pem"))
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let server = format!("https://127.0.0.1:{port}");
    let out = std::process::Command::new(&flotilla)
        .args(["credentials", "kubeconfig"])
        .arg(&creds)
        .args(["--server", &server])
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let kubeconfig = dir.path().join("kubeconfig");
    std::fs::write(&kubeconfig, &out.stdout).unwrap();
    let with_config = |args: Vec<String>| {
        let kubeconfig = kubeconfig.clone();
        async move {
            let mut command = tokio::process::Command::new("kubectl");
            command
                .arg(format!("--kubeconfig={}", kubeconfig.display()))
                .arg("--request-timeout=20s")
                .args(args);
            command_output(&mut command).await
        }
    };
    let args = |a: &[&str]| a.iter().map(|s| (*s).to_owned()).collect::<Vec<_>>();
    eventually(T, "kubectl through the gateway process", || async {
        let (ok, _) = with_config(args(&["get", "clusters"])).await;
        ok.then_some(())
    })
    .await;
    let policy = dir.path().join("web.yaml");
    std::fs::write(&policy, POLICY).unwrap();
    let policy = policy.display().to_string();
    let (ok, out) = with_config(args(&["create", "-f", &policy, "-n", "default"])).await;
    assert!(ok && out.contains("created"), "the admin writes: {out}");
    let (ok, out) = with_config(args(&["get", "pp", "-A", "-o", "name"])).await;
    assert_eq!(
        (ok, out.trim()),
        (true, "propagationpolicy.policy.karmada.io/web"),
        "{out}"
    );
    if flotilla_tests::kube::kubectl_minor() >= 28 {
        let (ok, out) = with_config(args(&["auth", "whoami"])).await;
        assert!(ok && out.contains("admin"), "{out}");
    } else {
        println!(
            "NOT RUN: `kubectl auth whoami` (kubectl 1.28+; this is 1.{})",
            flotilla_tests::kube::kubectl_minor()
        );
    }
    // the CA alone, without the token: the api refuses
    let ca = format!(
        "--certificate-authority={}",
        creds.join("kube-ca.pem").display()
    );
    let (ok, out) = kubectl(&server, &[&ca, "--token", "wrong", "get", "clusters"]).await;
    assert!(!ok && out.contains("invalid bearer token"), "{out}");
    assert!(
        gateway.try_wait().unwrap().is_none(),
        "the gateway keeps serving"
    );
    let _ = gateway.kill().await;
}

const FLINK_CRD: &str = r#"apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: flinkdeployments.flink.apache.org
spec:
  group: flink.apache.org
  scope: Namespaced
  names: {kind: FlinkDeployment, plural: flinkdeployments, singular: flinkdeployment, shortNames: [flinkdep]}
  versions:
  - name: v1beta1
    served: true
    storage: true
    schema: {openAPIV3Schema: {type: object, x-kubernetes-preserve-unknown-fields: true}}
    additionalPrinterColumns:
    - {name: Image, type: string, jsonPath: .spec.image}
    - {name: JM, type: integer, jsonPath: .spec.jobManager.replicas}
    - {name: Age, type: date, jsonPath: .metadata.creationTimestamp}
    - {name: Mode, type: string, jsonPath: .spec.mode, priority: 1}
---
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: globalthings.example.io
spec:
  group: example.io
  scope: Cluster
  names: {kind: GlobalThing, plural: globalthings}
  versions:
  - {name: v1, served: true, storage: true}
---
# as with Karmada, the CRD goes to the members first: a cluster is a fit for a FlinkDeployment
# once its apiEnablements list the kind
apiVersion: policy.karmada.io/v1alpha1
kind: ClusterPropagationPolicy
metadata: {name: flink-crd}
spec:
  resourceSelectors:
  - {apiVersion: apiextensions.k8s.io/v1, kind: CustomResourceDefinition, name: flinkdeployments.flink.apache.org}
  placement:
    clusterAffinity: {clusterNames: [member1]}
"#;

const WORDCOUNT: &str = r#"apiVersion: flink.apache.org/v1beta1
kind: FlinkDeployment
metadata: {name: wordcount, namespace: default}
spec: {image: "flink:1.17", jobManager: {replicas: 1}}
---
apiVersion: policy.karmada.io/v1alpha1
kind: PropagationPolicy
metadata: {name: flink, namespace: default}
spec:
  resourceSelectors:
  - {apiVersion: flink.apache.org/v1beta1, kind: FlinkDeployment, name: wordcount}
  placement:
    clusterAffinity: {clusterNames: [member1]}
"#;

/// As on karmada-apiserver, applying a CRD makes its kind servable: kubectl discovers it
/// (with its short name), applies objects of it client- and server-side, and they are
/// templates the api propagates. A cluster-scoped CRD's kind is not served (Flotilla stores
/// custom kinds in namespaces only), and a deleted CRD's kind is gone from discovery.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crd_applied_with_kubectl_makes_its_kind_servable() {
    let (stack, _api) = Stack::with_two_members(Timers::fast(), T).await;
    let server = gateway(&stack).await;
    let dir = tempfile::tempdir().unwrap();
    // a cache of its own, so that discovery is asked again after each change of the CRDs
    let cache = format!("--cache-dir={}", dir.path().join("cache").display());
    let crds = dir.path().join("crds.yaml");
    std::fs::write(&crds, FLINK_CRD).unwrap();
    let crds = crds.to_str().unwrap();
    let cr = dir.path().join("wordcount.yaml");
    std::fs::write(&cr, WORDCOUNT).unwrap();
    let cr = cr.to_str().unwrap();

    let (ok, out) = kubectl(&server, &[&cache, "get", "flinkdep"]).await;
    assert!(
        !ok && out.contains("flinkdep"),
        "no such kind before its CRD: {out}"
    );
    kubectl_ok(&server, &[&cache, "apply", "-f", crds]).await;
    let crd_list = kubectl_ok(&server, &[&cache, "get", "crds", "-o", "name"]).await;
    assert!(
        crd_list.contains("flinkdeployments.flink.apache.org"),
        "{crd_list}"
    );
    let resources = kubectl_ok(&server, &[&cache, "api-resources", "--no-headers"]).await;
    let flink: Vec<&str> = resources
        .lines()
        .find(|l| l.starts_with("flinkdeployments "))
        .unwrap_or_else(|| panic!("FlinkDeployment is not discovered: {resources}"))
        .split_whitespace()
        .collect();
    assert_eq!(
        flink,
        [
            "flinkdeployments",
            "flinkdep",
            "flink.apache.org/v1beta1",
            "true",
            "FlinkDeployment"
        ]
    );
    assert!(
        !resources.contains("GlobalThing"),
        "a cluster-scoped custom kind is not served: {resources}"
    );

    // client-side apply (create, then a merge patch), server-side apply, get by short name
    let applied = kubectl_ok(&server, &[&cache, "apply", "-f", cr]).await;
    assert!(
        applied.contains("flinkdeployment.flink.apache.org/wordcount created"),
        "{applied}"
    );
    std::fs::write(cr, WORDCOUNT.replace("flink:1.17", "flink:1.18")).unwrap();
    let applied = kubectl_ok(&server, &[&cache, "apply", "-f", cr]).await;
    assert!(applied.contains("wordcount configured"), "{applied}");
    // (the FlinkDeployment alone: the policy's selectors were defaulted, so a second
    // manager's apply of them conflicts, as on karmada-apiserver with its webhook)
    let only_cr = dir.path().join("only-wordcount.yaml");
    let first = WORDCOUNT.split("---").next().unwrap();
    std::fs::write(&only_cr, first.replace("flink:1.17", "flink:1.18")).unwrap();
    let only_cr = only_cr.to_str().unwrap();
    let ssa = kubectl_ok(
        &server,
        &[
            &cache,
            "apply",
            "--server-side",
            "--field-manager=flux",
            "-f",
            only_cr,
        ],
    )
    .await;
    assert!(ssa.contains("wordcount serverside-applied"), "{ssa}");
    let image = kubectl_ok(
        &server,
        &[
            &cache,
            "get",
            "flinkdep",
            "wordcount",
            "-n",
            "default",
            "-o",
            "jsonpath={.spec.image}",
        ],
    )
    .await;
    assert_eq!(image, "flink:1.18");
    // printed with the CRD's additionalPrinterColumns, priority 1 with -o wide only
    let printed = kubectl_ok(&server, &[&cache, "get", "flinkdep", "-n", "default"]).await;
    let rows: Vec<Vec<&str>> = printed
        .lines()
        .map(|l| l.split_whitespace().collect())
        .collect();
    assert_eq!(rows[0], ["NAME", "IMAGE", "JM", "AGE"], "{printed}");
    assert_eq!(rows[1][..3], ["wordcount", "flink:1.18", "1"], "{printed}");
    let wide = kubectl_ok(
        &server,
        &[&cache, "get", "flinkdep", "-n", "default", "-o", "wide"],
    )
    .await;
    assert!(
        wide.lines().next().unwrap_or_default().ends_with("MODE"),
        "{wide}"
    );

    // the template is propagated as any other: a binding to member1
    let rb = eventually(T, "a binding of the FlinkDeployment to member1", || async {
        let (ok, out) = kubectl(
            &server,
            &[&cache, "get", "rb", "-n", "default", "-o", "jsonpath={range .items[*]}{.spec.resource.kind}={.spec.clusters[*].name}{\"\\n\"}{end}"],
        )
        .await;
        (ok && out.lines().any(|l| l == "FlinkDeployment=member1")).then_some(out)
    })
    .await;
    assert!(rb.contains("FlinkDeployment=member1"), "{rb}");

    // deleting the CRD takes its kind out of discovery
    kubectl_ok(
        &server,
        &[&cache, "delete", "crd", "flinkdeployments.flink.apache.org"],
    )
    .await;
    let (ok, out) = kubectl(&server, &[&cache, "get", "flinkdep", "-n", "default"]).await;
    assert!(
        !ok && out.contains("flinkdep"),
        "the kind went with its CRD: {out}"
    );
}

/// Client certificates at the gateway (`flotilla gateway --kube-client-ca`), as
/// kube-apiserver's `--client-ca-file`: the gateway verifies kubectl's certificate and calls
/// the api over mutual TLS with its own certificate (`service:kube-gateway`), naming the
/// caller's CN; the api gives the caller exactly the rights that CN's principal has over
/// gRPC. Without a credential the caller is nobody, a CN sent as a header by the client is
/// dropped, and a gateway whose certificate is not the gateway's refuses to start.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_with_a_client_certificate_is_the_principal_its_cn_names() {
    let dir = tempfile::tempdir().unwrap();
    let certs = dir.path().join("certs");
    flotilla_runtime::testing::grpc::dev_certs(
        &certs,
        &["service:kube-gateway", "viewer", "agent:edge1"],
    );
    let stranger = dir.path().join("stranger");
    flotilla_runtime::testing::grpc::dev_certs(&stranger, &["viewer"]);
    let pem = |name: &str| certs.join(name).display().to_string();

    // the api alone, over mutual TLS on a real etcd
    let etcd = flotilla_tests::EtcdServer::start().await;
    let api_port = flotilla_tests::free_port();
    let prefix = format!("/flotilla-test-{:016x}/", rand::random::<u64>());
    let _api = flotilla_tests::Process::spawn_with_env(
        dir.path(),
        "api",
        "flotilla-api",
        &[
            "--store=etcd".into(),
            format!("--etcd-endpoints={}", etcd.endpoints().join(",")),
            format!("--etcd-prefix={prefix}"),
            format!("--grpc-addr=127.0.0.1:{api_port}"),
            format!("--admin-addr=127.0.0.1:{}", flotilla_tests::free_port()),
            format!("--tls-cert={}", pem("api.pem")),
            format!("--tls-key={}", pem("api-key.pem")),
            format!("--tls-client-ca={}", pem("ca.pem")),
        ],
        &[],
    );
    let flotilla = flotilla_tests::bin_path("flotilla");
    let gateway_args = |cert: &str, port: u16| {
        let mut command = tokio::process::Command::new(&flotilla);
        command
            .args([
                "gateway",
                "--server",
                &format!("https://localhost:{api_port}"),
            ])
            .args(["--listen", &format!("127.0.0.1:{port}")])
            .args(["--tls-ca", &pem("ca.pem")])
            .args(["--tls-cert", &pem(&format!("{cert}.pem"))])
            .args(["--tls-key", &pem(&format!("{cert}-key.pem"))])
            .args(["--kube-tls-cert", &pem("service-kube-gateway.pem")])
            .args(["--kube-tls-key", &pem("service-kube-gateway-key.pem")])
            .args(["--kube-client-ca", &pem("ca.pem")])
            .kill_on_drop(true);
        command
    };

    // a gateway whose own certificate is not the gateway's would only ever answer 401
    let (ok, out) = command_output(&mut gateway_args("viewer", flotilla_tests::free_port())).await;
    assert!(
        !ok && out.contains("system:flotilla:viewer") && out.contains("service:kube-gateway"),
        "a wrong gateway certificate is refused at start: {out}"
    );

    let port = flotilla_tests::free_port();
    let _gateway = gateway_args("service-kube-gateway", port).spawn().unwrap();
    let server = format!("https://127.0.0.1:{port}");
    let ca = format!("--certificate-authority={}", pem("ca.pem"));
    let as_cert = |who: &str| {
        vec![
            ca.clone(),
            format!("--client-certificate={}", pem(&format!("{who}.pem"))),
            format!("--client-key={}", pem(&format!("{who}-key.pem"))),
        ]
    };
    let run = |who: &str, verb: &[&str]| {
        let mut args = as_cert(who);
        args.extend(verb.iter().map(|s| (*s).to_owned()));
        let server = server.clone();
        async move {
            let args: Vec<&str> = args.iter().map(String::as_str).collect();
            kubectl(&server, &args).await
        }
    };
    // the admin's certificate (cli.pem: CN system:flotilla:admin) writes
    eventually(T, "the gateway and the api serve", || async {
        run("cli", &["get", "clusters"]).await.0.then_some(())
    })
    .await;
    let policy = dir.path().join("web.yaml");
    std::fs::write(&policy, POLICY).unwrap();
    let policy = policy.to_str().unwrap();
    let (ok, out) = run("cli", &["create", "-f", policy, "-n", "default"]).await;
    assert!(
        ok && out.contains("created"),
        "an admin's certificate creates: {out}"
    );

    // a viewer's certificate reads, and its writes are refused naming it
    let (ok, out) = run("viewer", &["get", "pp", "-n", "default", "-o", "name"]).await;
    assert!(
        ok && out.contains("web"),
        "a viewer's certificate reads: {out}"
    );
    let (ok, out) = run("viewer", &["delete", "pp", "web", "-n", "default"]).await;
    assert!(
        !ok && out.contains("Forbidden") && out.contains("viewer"),
        "a viewer's certificate deletes nothing: {out}"
    );
    let (ok, out) = run("viewer", &["auth", "can-i", "create", "pp"]).await;
    assert!(
        !ok && out.starts_with("no") && out.contains("viewer may not"),
        "can-i for a viewer's certificate: {out}"
    );
    let (ok, out) = run("cli", &["auth", "can-i", "create", "pp"]).await;
    assert!(
        ok && out.trim() == "yes",
        "can-i for the admin's certificate: {out}"
    );
    // an agent's certificate reaches what the agent reaches over gRPC, no policies
    let (ok, out) = run("agent-edge1", &["get", "pp", "-A"]).await;
    assert!(
        !ok && out.contains("Forbidden") && out.contains("agent:edge1"),
        "an agent's certificate lists no policies: {out}"
    );

    // no credential at all: the gateway's own certificate is nobody; and a CN the client
    // sends as a header is dropped: still nobody (curl: kubectl would prompt for a password)
    for forged in [None, Some("x-flotilla-client-cn: system:flotilla:admin")] {
        let mut curl = tokio::process::Command::new("curl");
        curl.args(["-s", "-w", "\n%{http_code}", "--cacert", &pem("ca.pem")])
            .arg(format!(
                "{server}/apis/cluster.karmada.io/v1alpha1/clusters"
            ));
        if let Some(header) = forged {
            curl.args(["-H", header]);
        }
        let (ok, out) = command_output(&mut curl).await;
        assert!(
            ok && out.trim_end().ends_with("401") && out.contains("authenticates no caller"),
            "no credential ({forged:?}): {out}"
        );
    }
    // a certificate of another CA is refused at the handshake
    let (ok, out) = kubectl(
        &server,
        &[
            &ca,
            &format!(
                "--client-certificate={}",
                stranger.join("viewer.pem").display()
            ),
            &format!("--client-key={}", stranger.join("viewer-key.pem").display()),
            "get",
            "clusters",
        ],
    )
    .await;
    assert!(!ok, "another CA's certificate: {out}");
}
