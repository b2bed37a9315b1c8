//! Flotilla against REAL Kubernetes API servers as members (docs/real-kubernetes.md):
//! kube-apiserver, kube-controller-manager and kube-scheduler 1.20.2, built from Debian's
//! source by scripts/kube-build.sh, each member on the test etcd under its own prefix, with
//! member-sim in node mode playing nodes and kubelet and holding the faults (a TCP proxy).
//!
//! One scenario, three members (each started as the README's "Joining a real cluster" says):
//! - member1 and member2 are Push clusters joined with `flotilla join --kubeconfig`, from a
//!   ServiceAccount token made by `kubectl create token` and the CA from the kubeconfig;
//! - member3 is a Pull cluster: `flotilla-agent` next to it with that token and CA.
//!
//! Checked, in order:
//! 1. cluster-health reads each member's `/readyz`, version (v1.20.2), API enablements and a
//!    capacity summary made from the real Nodes and Pods;
//! 2. Deployment `web` with a ConfigMap and a Secret (propagateDeps) and an OverridePolicy
//!    lands on member1 (Aggregated: member1 has the most room), its deps beside it, turns
//!    Healthy from the status the REAL Deployment controller writes, and carries member1's
//!    override; the manifest carried server-set metadata (`resourceVersion`, `uid`,
//!    `managedFields`, `status`, as `kubectl get -o yaml` exports it) that a real API server
//!    refuses in an apply, and it applied;
//! 3. a CRD (cluster-scoped) goes to every member, and a custom resource of it to member3
//!    through the agent;
//! 4. an edit with kubectl on member1 (another field manager): what it sets that Flotilla
//!    does not manage stays; what Flotilla manages is taken back at its next apply;
//! 5. member1 becomes unreachable: `web` moves to member2, the graceful eviction waits for
//!    member2's REAL health, the copy on member1 stays while it is cut off and is deleted,
//!    deps included, once it is back;
//! 6. Deployment `api` on member3 (Pull) moves to member2 when member3 becomes unreachable;
//!    the agent deletes the old copy once member3 is back;
//! 7. deleting a policy keeps the member copies (PL-1); deleting the workload removes them.
//!
//! Every etcd revision of the control plane is recorded and checked against the fault
//! suite's invariants (I1–I12, docs/reliability.md).

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use flotilla_core::testing::policy_yaml;
use flotilla_proto::v1;
use flotilla_tests::kube::RealMember;
use flotilla_tests::{
    ApiClient, EtcdServer, Process, Stack, Timers, api_client, binding_condition, binding_healthy,
    eventually, get_binding, get_cluster, history, set_fault_at, targets, tasks,
    wait_clusters_ready,
};

const T: Duration = Duration::from_secs(90);

/// The real CLI against the stack's api: its output, asserting success.
async fn flotilla(stack: &Stack, args: &[&str]) -> String {
    stack.cli_ok(args).await
}

async fn apply(stack: &Stack, dir: &Path, file: &str, yaml: &str) -> String {
    let path = dir.join(file);
    std::fs::write(&path, yaml).unwrap();
    flotilla(stack, &["apply", "-f", path.to_str().unwrap()]).await
}

/// A shell command, asserting success; its stdout.
async fn sh(dir: &Path, script: &str) -> String {
    let out = tokio::process::Command::new("bash")
        .args(["-euo", "pipefail", "-c", script])
        .current_dir(dir)
        .output()
        .await
        .unwrap();
    flotilla_tests::success_stdout(script, out)
}

/// The README's credential steps ("Joining a real cluster"), with `{ctx}` for the kubeconfig
/// context flags and `{name}` for the member's name;
/// [`readme_joining_steps_are_the_ones_tested`] holds the README to them.
const CREDENTIAL_STEPS: [&str; 4] = [
    "kubectl {ctx} create serviceaccount flotilla -n kube-system",
    "kubectl {ctx} create clusterrolebinding flotilla --clusterrole=cluster-admin --serviceaccount=kube-system:flotilla",
    "kubectl {ctx} create token flotilla -n kube-system --duration=24h > {name}.token",
    "kubectl {ctx} config view --raw --minify -o jsonpath='{.clusters[0].cluster.certificate-authority-data}' | base64 -d > {name}-ca.pem",
];
/// The README's way to read the member's server.
const SERVER_STEP: &str =
    "kubectl {ctx} config view --minify -o jsonpath='{.clusters[0].cluster.server}'";
/// The README's Push steps, `{server}` for the server read by [`SERVER_STEP`].
const PUSH_STEPS: [&str; 3] = [
    "kubectl config set-cluster {name} --kubeconfig={name}.kubeconfig --server={server} --certificate-authority={name}-ca.pem --embed-certs",
    "kubectl config set-credentials flotilla --kubeconfig={name}.kubeconfig --token=\"$(cat {name}.token)\"",
    "kubectl config set-context {name} --kubeconfig={name}.kubeconfig --cluster={name} --user=flotilla",
];
/// The README's join.
const JOIN_STEP: &str = "flotilla join {name} --kubeconfig {name}.kubeconfig --context {name}";

fn render(step: &str, ctx: &str, name: &str, server: &str) -> String {
    step.replace("{ctx}", ctx)
        .replace("{name}", name)
        .replace("{server}", server)
}

/// The README shows exactly the steps the scenario runs (for `--context $CTX`, member1 and
/// `$SERVER`).
#[test]
fn readme_joining_steps_are_the_ones_tested() {
    let readme = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../README.md"))
        .expect("README.md");
    let steps = CREDENTIAL_STEPS
        .iter()
        .chain(&PUSH_STEPS)
        .chain([&JOIN_STEP]);
    for step in steps {
        let line = render(step, "--context $CTX", "member1", "$SERVER");
        assert!(
            readme.contains(&line),
            "README.md lacks the tested step:\n{line}"
        );
    }
    let server = format!(
        "SERVER=$({})",
        render(SERVER_STEP, "--context $CTX", "", "")
    );
    assert!(readme.contains(&server), "README.md lacks:\n{server}");
}

/// The README's credential steps for `member` (its kubeconfig context is the member's name):
/// leaves `<name>.token` and `<name>-ca.pem` in `dir` and returns the server.
async fn readme_credentials(dir: &Path, member: &RealMember) -> String {
    let ctx = format!(
        "--kubeconfig {} --context {}",
        member.kubeconfig.display(),
        member.name
    );
    let script: Vec<String> = CREDENTIAL_STEPS
        .iter()
        .map(|s| render(s, &ctx, &member.name, ""))
        .collect();
    sh(dir, &script.join("\n")).await;
    sh(dir, &render(SERVER_STEP, &ctx, "", "")).await
}

/// The README's Push steps: a kubeconfig of the ServiceAccount token, and `flotilla join`.
async fn readme_join(stack: &Stack, dir: &Path, member: &RealMember) {
    let server = readme_credentials(dir, member).await;
    let name = &member.name;
    let script: Vec<String> = PUSH_STEPS
        .iter()
        .map(|s| render(s, "", name, server.trim()))
        .collect();
    sh(dir, &script.join("\n")).await;
    let join = render(JOIN_STEP, "", name, "");
    let kubeconfig = dir.join(format!("{name}.kubeconfig"));
    let kubeconfig = kubeconfig.to_str().unwrap();
    // the README's join, with the kubeconfig's full path and the stack's api
    let args: Vec<&str> = join
        .split_whitespace()
        .skip(1)
        .map(|a| {
            if a.ends_with(".kubeconfig") {
                kubeconfig
            } else {
                a
            }
        })
        .collect();
    let out = flotilla(stack, &args).await;
    assert!(
        out.contains(&format!("secret/karmada-cluster/{name}")),
        "{out}"
    );
}

/// The README's Pull steps: the Cluster in Pull mode, and `flotilla-agent` beside the member.
async fn readme_pull(stack: &Stack, dir: &Path, member: &RealMember) -> Process {
    let server = readme_credentials(dir, member).await;
    let name = &member.name;
    apply(
        stack,
        dir,
        &format!("{name}-cluster.yaml"),
        &format!(
            "apiVersion: cluster.karmada.io/v1alpha1\nkind: Cluster\nmetadata: {{name: {name}}}\nspec: {{syncMode: Pull}}\n"
        ),
    )
    .await;
    Process::spawn_with_env(
        dir,
        &format!("{name}-agent"),
        "flotilla-agent",
        &[
            format!("--cluster={name}"),
            format!("--member={}", server.trim()),
            format!(
                "--member-ca={}",
                dir.join(format!("{name}-ca.pem")).display()
            ),
            format!(
                "--member-token-file={}",
                dir.join(format!("{name}.token")).display()
            ),
            format!("--api={}", stack.addrs["api"]),
            format!("--cluster-health={}", stack.addrs["cluster-health"]),
            format!("--work-executor={}", stack.addrs["work-executor"]),
            "--heartbeat-interval=200ms".into(),
            "--status-interval=200ms".into(),
        ],
        &[("FLOTILLA_LOG".into(), "info,flotilla_agent=debug".into())],
    )
}

/// The ConfigMap, Secret and Deployment `web`, the Deployment as `kubectl get -o yaml`
/// exports it from another cluster (server-set metadata and status included), and its
/// policies: Aggregated over member1 and member2 with its dependencies, and an
/// OverridePolicy labelling each cluster's copy with its region.
fn web(replicas: u32, exported_from: &str) -> String {
    format!(
        r#"apiVersion: v1
kind: ConfigMap
metadata: {{name: web-config, namespace: default}}
data: {{greeting: hello}}
---
apiVersion: v1
kind: Secret
metadata: {{name: web-secret, namespace: default}}
type: Opaque
stringData: {{password: not-a-real-secret}}
---
apiVersion: apps/v1
kind: Deployment
metadata:
  name: web
  namespace: default
  labels: {{app: web}}
  uid: 5a0c2d3e-0000-4000-8000-{exported_from}
  resourceVersion: "918273"
  generation: 7
  creationTimestamp: "2026-01-01T00:00:00Z"
  managedFields:
    - manager: kubectl-client-side-apply
      operation: Update
      apiVersion: apps/v1
spec:
  replicas: {replicas}
  selector:
    matchLabels: {{app: web}}
  template:
    metadata:
      labels: {{app: web}}
    spec:
      containers:
        - name: web
          image: docker.io/library/nginx:1.27
          envFrom:
            - configMapRef: {{name: web-config}}
            - secretRef: {{name: web-secret}}
status:
  replicas: 3
  readyReplicas: 3
---
apiVersion: policy.karmada.io/v1alpha1
kind: PropagationPolicy
metadata: {{name: web, namespace: default}}
spec:
  propagateDeps: true
  resourceSelectors:
    - {{apiVersion: apps/v1, kind: Deployment, name: web}}
  placement:
    clusterAffinity:
      clusterNames: [member1, member2]
    replicaScheduling:
      replicaSchedulingType: Divided
      replicaDivisionPreference: Aggregated
---
apiVersion: policy.karmada.io/v1alpha1
kind: OverridePolicy
metadata: {{name: regions, namespace: default}}
spec:
  resourceSelectors:
    - {{apiVersion: apps/v1, kind: Deployment, name: web}}
  overrideRules:
    - targetCluster: {{clusterNames: [member1]}}
      overriders:
        labelsOverrider: [{{operator: add, value: {{region: eu}}}}]
    - targetCluster: {{clusterNames: [member2]}}
      overriders:
        labelsOverrider: [{{operator: add, value: {{region: us}}}}]
"#
    )
}

/// Deployment `api` on member3 (Pull) first: Aggregated over member3 and member2.
fn api_yaml() -> String {
    let policy = policy_yaml(
        "api",
        &[["apps/v1", "Deployment", "api"]],
        &["member3", "member2"],
        "{replicaSchedulingType: Divided, replicaDivisionPreference: Aggregated}",
    );
    format!("{API_DEPLOYMENT}---\n{policy}")
}

/// The Deployment of [`api_yaml`].
const API_DEPLOYMENT: &str = r#"apiVersion: apps/v1
kind: Deployment
metadata: {name: api, namespace: default, labels: {app: api}}
spec:
  replicas: 2
  selector:
    matchLabels: {app: api}
  template:
    metadata:
      labels: {app: api}
    spec:
      containers:
        - {name: api, image: docker.io/library/nginx:1.27}
"#;

/// A CRD (cluster-scoped) for every member.
const CRD: &str = r#"apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata: {name: crontabs.stable.example.com}
spec:
  group: stable.example.com
  scope: Namespaced
  names: {plural: crontabs, singular: crontab, kind: CronTab, shortNames: [ct]}
  versions:
    - name: v1
      served: true
      storage: true
      schema:
        openAPIV3Schema:
          type: object
          properties:
            spec:
              type: object
              properties:
                cronSpec: {type: string}
                image: {type: string}
---
apiVersion: policy.karmada.io/v1alpha1
kind: ClusterPropagationPolicy
metadata: {name: crontab-crd}
spec:
  resourceSelectors:
    - {apiVersion: apiextensions.k8s.io/v1, kind: CustomResourceDefinition, name: crontabs.stable.example.com}
  placement:
    clusterAffinity:
      clusterNames: [member1, member2, member3]
"#;

/// A custom resource of the CRD, for member3.
fn crontab() -> String {
    let policy = policy_yaml(
        "nightly",
        &[["stable.example.com/v1", "CronTab", "nightly"]],
        &["member3"],
        "",
    );
    format!(
        r#"apiVersion: stable.example.com/v1
kind: CronTab
metadata: {{name: nightly, namespace: default}}
spec: {{cronSpec: "0 3 * * *", image: backup:1}}
---
{policy}"#
    )
}

/// Whether the member serves `kind` in `group_version`, as the Cluster's status says.
async fn serves(api: &ApiClient, cluster: &str, group_version: &str, kind: &str) -> bool {
    get_cluster(api, cluster).await.is_some_and(|c| {
        c.status.as_ref().is_some_and(|s| {
            s.api_enablements.iter().any(|e| {
                e.group_version == group_version && e.resources.iter().any(|r| r.kind == kind)
            })
        })
    })
}

/// `.spec.replicas`, `.status.readyReplicas` and the labels of Deployment `name` on `m`.
async fn deployment(
    m: &RealMember,
    name: &str,
) -> Option<(i64, i64, serde_json::Map<String, serde_json::Value>)> {
    let d = m.get_json(&["deployment", name, "-n", "default"]).await?;
    Some((
        d["spec"]["replicas"].as_i64().unwrap_or(-1),
        d["status"]["readyReplicas"].as_i64().unwrap_or(0),
        d["metadata"]["labels"]
            .as_object()
            .cloned()
            .unwrap_or_default(),
    ))
}

/// A recorded stack on a fresh etcd for real members, with timers for real API servers;
/// returns it with the etcd endpoints the members use too.
async fn real_stack() -> (Stack, history::HistoryRecorder, String) {
    let etcd = EtcdServer::start().await;
    let etcd_endpoints = etcd.endpoints().join(",");
    let timers = Timers::fast()
        // a real status collection is discovery + nodes + pods: not every 200 ms
        .set("cluster-health", "cluster-status-update-frequency", "1s")
        // kube-apiservers, their controllers and the rest of the suite share 2 cores:
        // a /readyz took longer than 2 s under the full suite once (member2 judged
        // unreachable, an I9 violation), never alone
        .set("cluster-health", "probe-timeout", "5s")
        // and a probe that failed once under that load (member2, never faulted, judged
        // unreachable for 2 s: an I9 violation in a full-suite run) is not yet a failure:
        // member1's real fault lasts far longer than this
        .set("cluster-health", "cluster-failure-threshold", "5s");
    let (stack, recorder) = Stack::start_recorded(etcd, timers).await;
    (stack, recorder, etcd_endpoints)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn flotilla_on_real_kubernetes_members() {
    let (stack, recorder, etcd_endpoints) = real_stack().await;
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    // member1 has the most room for `web`, member3 for `api`: Aggregated picks them first
    let (m1, m2, m3) = tokio::join!(
        RealMember::start(d, "member1", &etcd_endpoints, 2, 20, "1s"),
        RealMember::start(d, "member2", &etcd_endpoints, 2, 10, "1s"),
        RealMember::start(d, "member3", &etcd_endpoints, 1, 30, "1s"),
    );
    let api = api_client(&stack).await;

    // joined as the README says
    readme_join(&stack, d, &m1).await;
    readme_join(&stack, d, &m2).await;
    let _agent = readme_pull(&stack, d, &m3).await;
    wait_clusters_ready(&api, &["member1", "member2", "member3"], T).await;

    // 1. what cluster-health reads of a real member
    for (m, pods) in [(&m1, 20), (&m2, 10), (&m3, 30)] {
        let c = eventually(T, "a capacity summary from the real nodes", || async {
            let c = get_cluster(&api, &m.name).await?;
            c.status
                .as_ref()?
                .resource_summary
                .as_ref()?
                .allocatable_replicas?;
            Some(c)
        })
        .await;
        let status = c.status.unwrap();
        assert_eq!(status.kubernetes_version, "v1.20.2", "{}", m.name);
        assert!(
            serves(&api, &m.name, "apps/v1", "Deployment").await
                && serves(&api, &m.name, "v1", "ConfigMap").await,
            "{}: {:?}",
            m.name,
            status.api_enablements
        );
        let summary = status.resource_summary.unwrap();
        assert_eq!(
            summary.allocatable_replicas,
            Some(pods),
            "{}: {summary:?}",
            m.name
        );
        let joined = m.kubectl_ok(&["get", "nodes", "-o", "name"]).await;
        assert!(
            joined.contains(&format!("node/{}-node-1", m.name)),
            "{joined}"
        );
    }

    // 1b. ES-3 on a real member: a pod that no node can take (the real kube-scheduler
    // leaves it Pending, without a node) is allocating, with its requests; gone, it is not
    let stuck = d.join("stuck.yaml");
    std::fs::write(
        &stuck,
        "apiVersion: v1\nkind: Pod\nmetadata: {name: stuck, namespace: default}\nspec:\n  \
         nodeSelector: {no-such-node: \"true\"}\n  containers:\n  - name: main\n    \
         image: nginx\n    resources: {requests: {cpu: 250m, memory: 64Mi}}\n",
    )
    .unwrap();
    let stuck = stuck.to_str().unwrap();
    m2.kubectl_ok(&["apply", "-f", stuck]).await;
    let allocating = |want_pods: i64| {
        let api = &api;
        async move {
            eventually(T, "member2's allocating pods", || async {
                let c = get_cluster(api, "member2").await?;
                let a = c.status?.resource_summary?.allocating?;
                (a.pods == want_pods).then_some(a)
            })
            .await
        }
    };
    let a = allocating(1).await;
    assert_eq!((a.cpu_millis, a.memory_bytes), (250, 64 << 20), "{a:?}");
    m2.kubectl_ok(&["delete", "-f", stuck, "--wait=true"]).await;
    let a = allocating(0).await;
    assert_eq!(a.cpu_millis, 0, "{a:?}");

    // 2. a Deployment with its ConfigMap and Secret, healthy from the real controllers
    let out = apply(&stack, d, "web.yaml", &web(3, "000000000001")).await;
    assert!(out.contains("deployment/web created"), "{out}");
    eventually(T, "web on member1, healthy", || async {
        let b = get_binding(&api, "default", "web-deployment").await?;
        (targets(&b) == [("member1".into(), 3)] && binding_healthy(&b)).then_some(())
    })
    .await;
    let (replicas, ready, labels) = deployment(&m1, "web").await.expect("web on member1");
    assert_eq!(
        (replicas, ready),
        (3, 3),
        "readyReplicas as the REAL controller wrote it"
    );
    assert_eq!(labels.get("region").and_then(|v| v.as_str()), Some("eu"));
    assert!(
        labels.contains_key("resourcebinding.karmada.io/permanent-id"),
        "{labels:?}"
    );
    let d1 = m1
        .get_json(&[
            "deployment",
            "web",
            "-n",
            "default",
            "--show-managed-fields",
        ])
        .await
        .unwrap();
    let managers: Vec<&str> = d1["metadata"]["managedFields"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|f| f["manager"].as_str())
        .collect();
    assert!(managers.contains(&"flotilla"), "{managers:?}");
    assert_ne!(
        d1["metadata"]["uid"], "5a0c2d3e-0000-4000-8000-000000000001",
        "the exported uid was not sent"
    );
    for dep in [["configmap", "web-config"], ["secret", "web-secret"]] {
        assert!(
            m1.get_json(&[dep[0], dep[1], "-n", "default"])
                .await
                .is_some(),
            "{dep:?} propagated with web (propagateDeps)"
        );
    }
    assert!(deployment(&m2, "web").await.is_none());

    // 3. a CRD everywhere, then a custom resource through the agent
    apply(&stack, d, "crd.yaml", CRD).await;
    for m in [&m1, &m2, &m3] {
        eventually(T, "the CRD on every member", || async {
            m.get_json(&["crd", "crontabs.stable.example.com"])
                .await
                .map(|_| ())
        })
        .await;
    }
    eventually(T, "member3 reports the new kind", || async {
        serves(&api, "member3", "stable.example.com/v1", "CronTab")
            .await
            .then_some(())
    })
    .await;
    apply(&stack, d, "crontab.yaml", &crontab()).await;
    let ct = eventually(
        T,
        "the CronTab on member3 (applied by the agent)",
        || async { m3.get_json(&["crontab", "nightly", "-n", "default"]).await },
    )
    .await;
    assert_eq!(ct["spec"]["cronSpec"], "0 3 * * *");

    // 4. kubectl on member1 (another field manager)
    m1.kubectl_ok(&[
        "scale",
        "deployment",
        "web",
        "-n",
        "default",
        "--replicas=5",
    ])
    .await;
    m1.kubectl_ok(&["label", "deployment", "web", "-n", "default", "team=blue"])
        .await;
    // Flotilla's next apply (the template changes) takes back what it manages, and leaves
    // what only kubectl set
    apply(&stack, d, "web.yaml", &web(4, "000000000002")).await;
    eventually(T, "member1's replicas are Flotilla's again", || async {
        let (replicas, ready, labels) = deployment(&m1, "web").await?;
        (replicas == 4 && ready == 4).then_some(labels)
    })
    .await
    .get("team")
    .filter(|v| v.as_str() == Some("blue"))
    .expect("kubectl's own label stays");

    // 5. member1 unreachable: web moves to member2 (Push)
    set_fault_at(&m1.control_addr, v1::FaultMode::Unreachable).await;
    failed_over(
        &api,
        "web-deployment",
        ("member2", 4),
        "web on member2, healthy, the task done",
    )
    .await;
    let (_, ready, labels) = deployment(&m2, "web").await.expect("web on member2");
    assert_eq!(ready, 4);
    assert_eq!(labels.get("region").and_then(|v| v.as_str()), Some("us"));
    assert!(
        deployment(&m1, "web").await.is_some(),
        "the copy on the cut-off member1 cannot be deleted yet"
    );
    set_fault_at(&m1.control_addr, v1::FaultMode::Healthy).await;
    eventually(
        T,
        "the old copy and its deps deleted from member1",
        || async {
            let gone = deployment(&m1, "web").await.is_none()
                && m1
                    .get_json(&["configmap", "web-config", "-n", "default"])
                    .await
                    .is_none();
            gone.then_some(())
        },
    )
    .await;

    // 6. the Pull cluster fails over
    apply(&stack, d, "api.yaml", &api_yaml()).await;
    eventually(T, "api on member3 (Pull), healthy", || async {
        let b = get_binding(&api, "default", "api-deployment").await?;
        (targets(&b) == [("member3".into(), 2)] && binding_healthy(&b)).then_some(())
    })
    .await;
    assert_eq!(deployment(&m3, "api").await.map(|d| d.1), Some(2));
    set_fault_at(&m3.control_addr, v1::FaultMode::Unreachable).await;
    failed_over(&api, "api-deployment", ("member2", 2), "api on member2").await;
    set_fault_at(&m3.control_addr, v1::FaultMode::Healthy).await;
    eventually(T, "the agent deleted api from member3", || async {
        deployment(&m3, "api").await.is_none().then_some(())
    })
    .await;
    // (everything else on member3 was evicted with it, the CRD and the CronTab included:
    // cluster failover evicts every binding from a NoExecute-tainted cluster, as Karmada's)

    // 7. deleting the policy keeps the copy (PL-1); deleting the workload removes it
    flotilla(&stack, &["delete", "pp", "api"]).await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert!(
        deployment(&m2, "api").await.is_some(),
        "a detached binding keeps its member copies"
    );
    flotilla(&stack, &["delete", "deployment", "api"]).await;
    eventually(T, "api deleted from member2", || async {
        deployment(&m2, "api").await.is_none().then_some(())
    })
    .await;

    // member2 never fails (I9); everything settled (I2, I3, I6 at the end)
    let expect = history::Expect {
        healthy_members: vec!["member2".into()],
        converged: true,
        ..Default::default()
    };
    let faults = [
        "member1 unreachable (TCP proxy), then healed".to_owned(),
        "member3 (Pull) unreachable, then healed".to_owned(),
    ];
    stack
        .verdict(recorder, "real_members", 0, &faults, &expect)
        .await;
    drop((m1, m2, m3));
}

/// One member API server under test: Flotilla's client of it and a raw kube-rs client.
struct Side {
    what: &'static str,
    member: flotilla_member::Member,
    raw: kube::Client,
}

/// A raw server-side apply of `body` (bypassing `flotilla_member::apply_body`) as `manager`:
/// the HTTP code of a refusal, 0 on success.
async fn raw_apply(side: &Side, body: serde_json::Value, manager: &str, force: bool) -> u16 {
    let resource =
        kube::api::ApiResource::from_gvk(&kube::api::GroupVersionKind::gvk("", "v1", "ConfigMap"));
    let api: kube::Api<kube::api::DynamicObject> =
        kube::Api::namespaced_with(side.raw.clone(), "default", &resource);
    let mut params = kube::api::PatchParams::apply(manager);
    params.force = force;
    let name = body["metadata"]["name"].as_str().unwrap().to_owned();
    match api
        .patch(&name, &params, &kube::api::Patch::Apply(&body))
        .await
    {
        Ok(_) => 0,
        Err(kube::Error::Api(s)) => s.code,
        Err(e) => panic!("{}: {e}", side.what),
    }
}

fn config_map(name: &str, data: serde_json::Value) -> serde_json::Value {
    serde_json::json!({"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": name, "namespace": "default",
                     "labels": {"resourcebinding.karmada.io/permanent-id": "p-1"}},
        "data": data})
}

/// The member-side checks, run the same on member-sim's API server and on a real one: what
/// Flotilla relies on must answer alike. Returns what each step answered, for comparing.
async fn member_behaviour(side: &Side) -> Vec<String> {
    use flotilla_member::{MemberError, ObjectRef};
    let mut seen = Vec::new();
    let w = side.what;
    let version = side.member.version().await.unwrap();
    assert!(version.starts_with("v1."), "{w}: {version}");
    let apis = side.member.api_enablements().await.unwrap();
    for (gv, kind) in [("apps/v1", "Deployment"), ("v1", "ConfigMap")] {
        assert!(
            apis.iter()
                .any(|e| e.group_version == gv && e.resources.iter().any(|r| r.kind == kind)),
            "{w}: {gv} {kind} in {apis:?}"
        );
    }
    let (probe, message) = side.member.probe().await;
    assert!(probe.online && probe.healthy, "{w}: {message}");

    // discovery as kubectl reads it: `kubectl get deploy`, `kubectl get all`
    for (gv, plurals) in [
        (
            "v1",
            &[
                "configmaps",
                "secrets",
                "services",
                "namespaces",
                "serviceaccounts",
                "persistentvolumeclaims",
                "pods",
                "nodes",
            ][..],
        ),
        (
            "apps/v1",
            &["deployments", "statefulsets", "replicasets", "daemonsets"],
        ),
        ("batch/v1", &["jobs"]),
        ("apiextensions.k8s.io/v1", &["customresourcedefinitions"]),
        ("rbac.authorization.k8s.io/v1", &["clusterroles", "roles"]),
    ] {
        let list = if gv == "v1" {
            side.raw.list_core_api_resources(gv).await
        } else {
            side.raw.list_api_group_resources(gv).await
        }
        .unwrap_or_else(|e| panic!("{w}: discovery of {gv}: {e}"));
        for plural in plurals {
            let r = list
                .resources
                .iter()
                .find(|r| r.name == *plural)
                .unwrap_or_else(|| panic!("{w}: {gv} lacks {plural}"));
            seen.push(format!(
                "{gv} {plural}: kind {}, namespaced {}, short names {:?}, categories {:?}",
                r.kind,
                r.namespaced,
                r.short_names.clone().unwrap_or_default(),
                r.categories.clone().unwrap_or_default()
            ));
        }
    }

    // Flotilla's apply, then the object as the member keeps it
    let applied = side
        .member
        .apply(&config_map("conf", serde_json::json!({"x": "1"})))
        .await
        .unwrap();
    let meta = &applied["metadata"];
    assert!(
        meta["uid"].as_str().is_some_and(|u| !u.is_empty())
            && meta["resourceVersion"].as_str().is_some(),
        "{w}: {applied}"
    );
    let r = ObjectRef::of(&applied).unwrap();
    let got = side.member.get(&r).await.unwrap().unwrap();
    assert_eq!(got["data"]["x"], "1", "{w}");
    let uid = meta["uid"].as_str().unwrap().to_owned();

    // what a server refuses in an apply body
    let edits: [(&str, &str, serde_json::Value); 5] = [
        (
            "managedFields",
            "conf",
            serde_json::json!([{"manager": "kubectl"}]),
        ),
        ("uid", "conf", "not-its-uid".into()),
        ("uid", "conf", uid.into()),
        ("resourceVersion", "conf", "1".into()),
        ("resourceVersion", "fresh", "1".into()),
    ];
    let labels = [
        "managedFields",
        "wrong uid",
        "its own uid",
        "stale resourceVersion",
        "resourceVersion on create",
    ];
    for ((field, name, value), label) in edits.into_iter().zip(labels) {
        let mut body = config_map(name, serde_json::json!({"x": "1"}));
        body["metadata"][field] = value;
        seen.push(format!(
            "{label}: {}",
            raw_apply(side, body, "flotilla", true).await
        ));
    }
    // the same apply through Flotilla's client is taken: it sends no server-set metadata
    let mut exported = got.clone();
    exported["metadata"]["managedFields"] = serde_json::json!([{"manager": "kubectl"}]);
    exported["metadata"]["resourceVersion"] = "1".into();
    exported["metadata"]["uid"] = "from-another-cluster".into();
    side.member.apply(&exported).await.unwrap();

    // another field manager
    let theirs = config_map("conf", serde_json::json!({"x": "9"}));
    seen.push(format!(
        "kubectl changes flotilla's field: {}",
        raw_apply(side, theirs, "kubectl", false).await
    ));
    let theirs = config_map("conf", serde_json::json!({"x": "9"}));
    seen.push(format!(
        "kubectl forces it: {}",
        raw_apply(side, theirs, "kubectl", true).await
    ));
    side.member
        .apply(&config_map("conf", serde_json::json!({"x": "2"})))
        .await
        .unwrap();
    let got = side.member.get(&r).await.unwrap().unwrap();
    seen.push(format!("flotilla forces x back: {}", got["data"]["x"]));

    // lists by the label, delete, unknown kinds
    let listed = side.member.list_managed("v1", "ConfigMap").await.unwrap();
    let mut names: Vec<&str> = listed
        .iter()
        .filter_map(|o| o["metadata"]["name"].as_str())
        .collect();
    names.sort_unstable();
    seen.push(format!("listed: {names:?}"));
    seen.push(format!(
        "delete: {:?}",
        side.member.delete(&r).await.unwrap()
    ));
    seen.push(format!(
        "delete again: {:?}",
        side.member.delete(&r).await.unwrap()
    ));
    seen.push(format!(
        "get deleted: {:?}",
        side.member.get(&r).await.unwrap()
    ));
    let nope = serde_json::json!({"apiVersion": "example.com/v1", "kind": "Nope",
                                  "metadata": {"name": "n", "namespace": "default"}});
    let unknown = side.member.apply(&nope).await.unwrap_err();
    assert!(
        matches!(unknown, MemberError::UnknownKind { .. }),
        "{w}: {unknown}"
    );
    seen
}

/// The same member-side checks against member-sim's simulated API server and against a real
/// kube-apiserver; they must answer alike (where they did not, member-sim was made to match:
/// it now refuses server-set metadata as the real server does).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn member_sim_answers_like_a_real_api_server() {
    let etcd = EtcdServer::start().await;
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let real = RealMember::start(d, "real", &etcd.endpoints().join(","), 1, 10, "1s").await;
    let token = format!("sim-{:016x}", rand::random::<u64>());
    std::fs::write(d.join("sim.token"), &token).unwrap();
    let (listen, _sim) = standalone_sim(
        d,
        &[format!("--token-file={}", d.join("sim.token").display())],
    )
    .await;
    let timeout = Duration::from_secs(10);
    let side = |what: &'static str, target: flotilla_member::Target| Side {
        what,
        member: member_client(&target, timeout),
        raw: flotilla_member::kube_client(&target, timeout).unwrap(),
    };
    let mut sim_target = flotilla_member::Target::plain(format!("http://{listen}"));
    sim_target.token = Some(token);
    let real_target = real.admin_target();
    let on_sim = member_behaviour(&side("member-sim", sim_target)).await;
    let on_real = member_behaviour(&side("kube-apiserver", real_target)).await;
    assert_eq!(on_sim, on_real, "member-sim differs from a real API server");
    // and what they both said is what a real server says
    let discovery = on_real
        .iter()
        .filter(|l| l.contains(" short names "))
        .count();
    assert_eq!(discovery, 16, "one line per resource looked up");
    assert!(
        on_real.contains(
            &"apps/v1 deployments: kind Deployment, namespaced true, short names [\"deploy\"], \
              categories [\"all\"]"
                .to_owned()
        ),
        "{on_real:#?}"
    );
    assert_eq!(
        on_real[discovery..],
        [
            "managedFields: 400",
            "wrong uid: 422",
            "its own uid: 0",
            "stale resourceVersion: 409",
            "resourceVersion on create: 0",
            "kubectl changes flotilla's field: 409",
            "kubectl forces it: 0",
            "flotilla forces x back: \"2\"",
            "listed: [\"conf\", \"fresh\"]",
            "delete: true",
            "delete again: false",
            "get deleted: None",
        ]
    );
}

/// CPU seconds (user + system) of process `pid` (`self` for this one), from /proc.
fn cpu_seconds(pid: &str) -> f64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    // the fields after the command name (which may hold spaces) start at state, field 3
    let rest = stat.rsplit_once(')').map_or("", |(_, r)| r);
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let ticks = |i: usize| {
        fields
            .get(i)
            .and_then(|f| f.parse::<f64>().ok())
            .unwrap_or(0.0)
    };
    // utime and stime are fields 14 and 15, i.e. 11 and 12 after the state
    (ticks(11) + ticks(12)) / 100.0
}

fn deployment_manifest(name: &str) -> serde_json::Value {
    serde_json::json!({"apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": name, "namespace": "default",
                     "labels": {"resourcebinding.karmada.io/permanent-id": name}},
        "spec": {"replicas": 1, "selector": {"matchLabels": {"app": name}},
                 "template": {"metadata": {"labels": {"app": name}},
                              "spec": {"containers": [{"name": "c", "image": "nginx"}]}}}})
}

/// Until a watch says something changed (at most `period`), or `period` when listing.
async fn wait(
    rx: &mut tokio::sync::mpsc::UnboundedReceiver<Option<flotilla_member::ObjectRef>>,
    watching: bool,
    period: Duration,
) {
    if watching {
        let _ = tokio::time::timeout(period, rx.recv()).await;
    } else {
        tokio::time::sleep(period).await;
    }
}

/// One way of reading status, measured: `n` Deployments applied at once, the seconds until
/// the client saw all of them Ready, the mean seconds until it saw a change to one object
/// (ten changes), then `idle` seconds of following them unchanged, with the CPU seconds of
/// this process (the client) and of the server meanwhile.
async fn measure_status(
    member: &flotilla_member::Member,
    server_pid: &str,
    prefix: &str,
    n: usize,
    by_watch: bool,
    idle: Duration,
) -> (f64, f64, f64, f64) {
    use flotilla_member::status::manifest_status;
    let names: Vec<String> = (0..n).map(|i| format!("{prefix}-{i:03}")).collect();
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    let watch = if by_watch {
        Some(
            member
                .watch_managed("apps/v1", "Deployment", tx)
                .await
                .unwrap(),
        )
    } else {
        None
    };
    let start = std::time::Instant::now();
    for name in &names {
        member.apply(&deployment_manifest(name)).await.unwrap();
    }
    let period = Duration::from_secs(1); // the agent's default --status-interval
    let read = || async {
        let objects = match &watch {
            Some(w) => w.objects(),
            None => member.list_managed("apps/v1", "Deployment").await.unwrap(),
        };
        objects
            .iter()
            .filter(|o| {
                o["metadata"]["name"]
                    .as_str()
                    .is_some_and(|n| n.starts_with(prefix))
                    && manifest_status(o).ready_replicas == 1
            })
            .count()
    };
    let watching = watch.is_some();
    while read().await < n {
        wait(&mut rx, watching, period).await;
        assert!(
            start.elapsed() < Duration::from_secs(120),
            "not Ready in 2 min"
        );
    }
    let ready = start.elapsed().as_secs_f64();
    // detection latency: one object relabelled at a time, until the client sees it
    let mut seen_after = Vec::new();
    // a list runs on its period, whenever the change came (as the agent's --status-interval)
    let mut tick = tokio::time::interval(period);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    for round in 0..10 {
        let name = &names[round % n];
        let mut m = deployment_manifest(name);
        m["metadata"]["labels"]["round"] = format!("r{round}").into();
        member.apply(&m).await.unwrap();
        let t0 = std::time::Instant::now();
        loop {
            let objects = match &watch {
                Some(w) => w.objects(),
                None => {
                    tick.tick().await;
                    member.list_managed("apps/v1", "Deployment").await.unwrap()
                }
            };
            let seen = objects.iter().any(|o| {
                o["metadata"]["name"] == name.as_str()
                    && o["metadata"]["labels"]["round"] == format!("r{round}").as_str()
            });
            if seen {
                break;
            }
            if watching {
                wait(&mut rx, watching, period).await;
            }
        }
        seen_after.push(t0.elapsed().as_secs_f64());
        // the next change comes at an unrelated moment of the list period
        tokio::time::sleep(Duration::from_millis(137 * (round as u64 % 7))).await;
    }
    let latency = seen_after.iter().sum::<f64>() / seen_after.len() as f64;
    let (client0, server0) = (cpu_seconds("self"), cpu_seconds(server_pid));
    let idle_start = std::time::Instant::now();
    while idle_start.elapsed() < idle {
        let _ = read().await;
        wait(&mut rx, watching, period).await;
    }
    let client = cpu_seconds("self") - client0;
    let server = cpu_seconds(server_pid) - server0;
    for name in &names {
        let r = flotilla_member::ObjectRef::of(&deployment_manifest(name)).unwrap();
        member.delete(&r).await.unwrap();
    }
    (ready, latency, client, server)
}

/// Status by list against status by watch, on member-sim and on a real kube-apiserver: run
/// by hand (`cargo nextest run -p flotilla-tests --run-ignored only status_by --no-capture`);
/// the figures are in docs/real-kubernetes.md.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "measurement; run by hand with --run-ignored only --no-capture"]
async fn status_by_list_and_by_watch_measured() {
    let n: usize = std::env::var("FLOTILLA_STATUS_OBJECTS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(100);
    let idle = Duration::from_secs(20);
    let etcd = EtcdServer::start().await;
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let real = RealMember::start(d, "real", &etcd.endpoints().join(","), 2, 400, "1s").await;
    let (listen, sim) = standalone_sim(
        d,
        &["--capacity=400".into(), "--pod-startup-delay=1s".into()],
    )
    .await;
    let timeout = Duration::from_secs(10);
    let sim_member = member_client(
        &flotilla_member::Target::plain(format!("http://{listen}")),
        timeout,
    );
    let real_target = real.admin_target();
    let real_member = member_client(&real_target, timeout);
    let sim_pid = sim.pid().unwrap().to_string();
    let api_pid = real.processes[0].pid().unwrap().to_string();
    println!(
        "status of {n} Deployments (pods Ready 1 s after binding), then {} s unchanged; the list period is 1 s",
        idle.as_secs()
    );
    println!(
        "{:<16} {:<6} {:>14} {:>16} {:>20} {:>20}",
        "server",
        "by",
        "all Ready (s)",
        "change seen (s)",
        "client CPU idle (s)",
        "server CPU idle (s)"
    );
    for (server, member, pid) in [
        ("member-sim", &sim_member, &sim_pid),
        ("kube-apiserver", &real_member, &api_pid),
    ] {
        // what the server spends with nobody reading (its controllers, node heartbeats)
        let base = cpu_seconds(pid);
        tokio::time::sleep(idle).await;
        let base = cpu_seconds(pid) - base;
        println!(
            "{server:<16} {:<6} {:>14} {:>16} {:>20} {base:>20.2}",
            "none", "-", "-", "-"
        );
        for (by, watch) in [("list", false), ("watch", true)] {
            let prefix = format!("m-{by}");
            let (ready, seen, client, server_cpu) =
                measure_status(member, pid, &prefix, n, watch, idle).await;
            println!(
                "{server:<16} {by:<6} {ready:>14.2} {seen:>16.3} {client:>20.2} {server_cpu:>20.2}"
            );
            // the deletions settle before the next measurement
            tokio::time::sleep(Duration::from_secs(10)).await;
        }
    }
}

/// Deployment `moving` (6 replicas) Divided by static weights (`(cluster, weight)`), with
/// failback after 2 s.
fn moving(weights: &[(&str, i64)]) -> String {
    flotilla_tests::weighted_yaml(
        "moving",
        weights,
        "  failover:\n    cluster:\n      failback: {stabilizationWindowSeconds: 2}\n",
    )
}

/// A phase of the real-member availability test: its name, what starts it, where it
/// settles, the member cut off, the members counted, and the plan's Ready replicas.
type RealPhase<'a> = (
    &'static str,
    RealMove,
    &'a [(&'a str, i32)],
    Option<&'a str>,
    &'a [&'a str],
    i32,
);

/// What starts a phase of the real-member availability test.
enum RealMove {
    Weights(&'static [(&'static str, i64)]),
    Fault(v1::FaultMode),
}

/// Make before break (WE-10) on REAL API servers: the Ready replicas the real Deployment
/// controllers report, each member's `readyReplicas` sampled with the real kubectl
/// throughout, never fall below the plan while replicas move: weight changes (3:3 -> 2:4 ->
/// 4:2 -> 3:3), a failover of member1 (the plan: member2's share), its failback, and member2
/// leaving the affinity (WE-10.7). The history is checked too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn we_10_weight_changes_keep_the_real_ready_replicas_at_the_plan() {
    let (stack, recorder, etcd_endpoints) = real_stack().await;
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let (m1, m2) = tokio::join!(
        RealMember::start(d, "member1", &etcd_endpoints, 1, 20, "1s"),
        RealMember::start(d, "member2", &etcd_endpoints, 1, 20, "1s"),
    );
    let api = api_client(&stack).await;
    readme_join(&stack, d, &m1).await;
    readme_join(&stack, d, &m2).await;
    wait_clusters_ready(&api, &["member1", "member2"], T).await;

    // (spec.replicas, readyReplicas) of `moving` on a member, None when it is not there
    let ready = |m: &RealMember| {
        let m = (m.name.clone(), m.direct_kubeconfig.clone());
        async move {
            let mut command = tokio::process::Command::new("kubectl");
            command
                .arg(format!("--kubeconfig={}", m.1.display()))
                .args([
                    "get",
                    "deployment",
                    "moving",
                    "-n",
                    "default",
                    "-o",
                    "jsonpath={.spec.replicas} {.status.readyReplicas}",
                ]);
            let (ok, out) = flotilla_tests::command_output(&mut command).await;
            if !ok {
                return None;
            }
            let mut f = out.split_whitespace().map(|v| v.parse::<i32>().ok());
            let replicas = f.next().flatten()?;
            let ready = f.next().flatten().unwrap_or(0);
            Some((replicas, ready))
        }
    };
    let members = [&m1, &m2];
    // settled: the binding targets `want`, healthy with no task, every member in `want`
    // runs exactly its share Ready, and a reachable member out of it runs no copy
    let settled = |want: &[(&str, i32)], cut_off: Option<&str>, sample: &[Option<(i32, i32)>]| {
        members
            .iter()
            .zip(sample)
            .all(|(m, got)| match want.iter().find(|(c, _)| *c == m.name) {
                Some((_, n)) => *got == Some((*n, *n)),
                None => cut_off == Some(m.name.as_str()) || got.is_none(),
            })
    };
    apply(
        &stack,
        d,
        "moving.yaml",
        &moving(&[("member1", 1), ("member2", 1)]),
    )
    .await;
    eventually(T, "moving at 3:3", || async {
        let (a, b) = tokio::join!(ready(&m1), ready(&m2));
        settled(&[("member1", 3), ("member2", 3)], None, &[a, b]).then_some(())
    })
    .await;

    let both: &[&str] = &["member1", "member2"];
    // (phase, what starts it, where it settles, the member cut off, members counted, plan)
    let phases: [RealPhase<'_>; 6] = [
        (
            "weight 2:4",
            RealMove::Weights(&[("member1", 1), ("member2", 2)]),
            &[("member1", 2), ("member2", 4)],
            None,
            both,
            6,
        ),
        (
            "weight 4:2",
            RealMove::Weights(&[("member1", 2), ("member2", 1)]),
            &[("member1", 4), ("member2", 2)],
            None,
            both,
            6,
        ),
        (
            "weight 3:3",
            RealMove::Weights(&[("member1", 1), ("member2", 1)]),
            &[("member1", 3), ("member2", 3)],
            None,
            both,
            6,
        ),
        // member1's share is gone: member2 must keep its 3
        (
            "failover",
            RealMove::Fault(v1::FaultMode::Unreachable),
            &[("member2", 6)],
            Some("member1"),
            &["member2"],
            3,
        ),
        (
            "failback",
            RealMove::Fault(v1::FaultMode::Healthy),
            &[("member1", 3), ("member2", 3)],
            None,
            both,
            6,
        ),
        (
            "member2 leaves",
            RealMove::Weights(&[("member1", 1)]),
            &[("member1", 6)],
            None,
            both,
            6,
        ),
    ];
    let mut figures = Vec::new();
    for (name, step, want, cut_off, counted, plan) in phases {
        let started = std::time::Instant::now();
        match step {
            RealMove::Weights(w) => {
                apply(&stack, d, "moving.yaml", &moving(w)).await;
            }
            RealMove::Fault(mode) => set_fault_at(&m1.control_addr, mode).await,
        }
        let (mut least, mut samples) = (i32::MAX, 0);
        loop {
            assert!(started.elapsed() < T, "{name}: never settled at {want:?}");
            let (a, b) = tokio::join!(ready(&m1), ready(&m2));
            let sample = [a, b];
            samples += 1;
            let total: i32 = members
                .iter()
                .zip(&sample)
                .filter(|(m, _)| counted.contains(&m.name.as_str()))
                .map(|(_, got)| got.map_or(0, |g| g.1))
                .sum();
            least = least.min(total);
            if settled(want, cut_off, &sample) {
                let b = get_binding(&api, "default", "moving-deployment").await;
                let want_targets: Vec<(String, i32)> =
                    want.iter().map(|(c, n)| ((*c).to_owned(), *n)).collect();
                if b.is_some_and(|b| {
                    targets(&b) == want_targets && binding_healthy(&b) && tasks(&b).is_empty()
                }) {
                    break;
                }
            }
        }
        println!(
            "real members, {name}: least Ready {least} (plan {plan}) over {samples} samples, \
             settled after {:?}",
            started.elapsed()
        );
        figures.push((name, least, plan, samples));
    }
    for (name, least, plan, samples) in figures {
        assert!(samples >= 3, "{name}: too few samples: {samples}");
        assert!(
            least >= plan,
            "{name}: the real Ready replicas fell to {least}, below the plan's {plan}"
        );
    }

    let expect = history::Expect {
        healthy_members: vec!["member2".into()],
        converged: true,
        ..Default::default()
    };
    let faults = ["member1 unreachable, then healthy".to_owned()];
    stack
        .verdict(recorder, "real_members moves", 0, &faults, &expect)
        .await;
    drop((m1, m2));
}

/// A member-sim of its own (`--name=sim`, with `extra` flags) in `dir`, serving once this
/// returns: its Kubernetes API address and its process.
async fn standalone_sim(dir: &Path, extra: &[String]) -> (String, Process) {
    let listen = format!("127.0.0.1:{}", flotilla_tests::free_port());
    let control = format!("127.0.0.1:{}", flotilla_tests::free_port());
    let mut args = vec![
        "--name=sim".into(),
        format!("--listen={listen}"),
        format!("--control-listen={control}"),
    ];
    args.extend_from_slice(extra);
    let sim = Process::spawn(dir, "member-sim", "flotilla-member-sim", &args);
    flotilla_tests::wait_serving(&control, Duration::from_secs(20)).await;
    (listen, sim)
}

/// A member client of `target` (calls time out after `timeout`, at most 8 at once).
fn member_client(target: &flotilla_member::Target, timeout: Duration) -> flotilla_member::Member {
    flotilla_member::Member::new(
        target,
        timeout,
        std::sync::Arc::new(tokio::sync::Semaphore::new(8)),
    )
    .unwrap()
}

/// Waits until binding `default/name` targets only `to` (cluster, replicas), is healthy and
/// has no graceful-eviction task left (`what` names the wait).
async fn failed_over(api: &flotilla_tests::ApiClient, name: &str, to: (&str, i32), what: &str) {
    let want = [(to.0.to_owned(), to.1)];
    eventually(T, what, || async {
        let b = get_binding(api, "default", name).await?;
        (targets(&b) == want && binding_healthy(&b) && tasks(&b).is_empty()).then_some(())
    })
    .await;
}

/// WE-7.1 on REAL API servers: a failover scales a Deployment up on a Pull member whose watch
/// events member-sim's proxy holds back (1.2 s), so the agent's watch cache still holds the
/// Deployment of before each apply. The real Deployment controller writes its status; the
/// history must show no Work Healthy for its generation with fewer ready replicas than it
/// asks, and no task ended on such health (I1b), and the failover completes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn we_7_1_a_pull_member_scaled_up_in_a_failover_reports_no_stale_health() {
    let (stack, recorder, etcd_endpoints) = real_stack().await;
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let (m1, m2, m3) = tokio::join!(
        RealMember::start(d, "member1", &etcd_endpoints, 1, 20, "1500ms"),
        RealMember::start(d, "member2", &etcd_endpoints, 1, 20, "1500ms"),
        RealMember::start(d, "member3", &etcd_endpoints, 1, 20, "1500ms"),
    );
    let api = api_client(&stack).await;
    readme_join(&stack, d, &m1).await;
    readme_join(&stack, d, &m2).await;
    let agent = readme_pull(&stack, d, &m3).await;
    let all = ["member1", "member2", "member3"];
    wait_clusters_ready(&api, &all, T).await;
    let weights = [("member1", 1), ("member2", 1), ("member3", 1)];
    apply(
        &stack,
        d,
        "scaled.yaml",
        &flotilla_tests::weighted_yaml("scaled", &weights, ""),
    )
    .await;
    let settled = |want: Vec<(String, i32)>| {
        let api = api.clone();
        async move {
            let b = get_binding(&api, "default", "scaled-deployment").await?;
            (targets(&b) == want && binding_healthy(&b) && tasks(&b).is_empty()).then_some(())
        }
    };
    let spread = |w: &[(&str, i32)]| -> Vec<(String, i32)> {
        w.iter().map(|(c, n)| ((*c).to_owned(), *n)).collect()
    };
    let start = spread(&[("member1", 2), ("member2", 2), ("member3", 2)]);
    eventually(T, "scaled at 2:2:2, healthy", || settled(start.clone())).await;

    flotilla_tests::control_client(&m3.control_addr)
        .await
        .set_fault(v1::SetFaultRequest {
            mode: v1::FaultMode::Healthy as i32,
            api_errors: None,
            watch_delay_ms: 1200,
        })
        .await
        .unwrap();
    set_fault_at(&m1.control_addr, v1::FaultMode::Unreachable).await;
    let end = spread(&[("member2", 3), ("member3", 3)]);
    eventually(
        T,
        "scaled at 3:3 on member2 and member3, healthy, no task",
        || settled(end.clone()),
    )
    .await;
    let on_member3 = m3
        .get_json(&["deployment", "scaled", "-n", "default"])
        .await
        .expect("the Deployment on member3");
    assert_eq!(on_member3["spec"]["replicas"], 3, "member3 was scaled up");
    assert!(
        agent.log().contains("watching works"),
        "the agent served member3: {}",
        agent.log()
    );
    let expect = history::Expect {
        healthy_members: vec!["member2".into(), "member3".into()],
        converged: true,
        ..Default::default()
    };
    let faults = [
        "member3 (Pull) watch events held 1.2 s by its proxy".to_owned(),
        "member1 unreachable: its replicas move to member2 and member3".to_owned(),
    ];
    stack
        .verdict(recorder, "real_members pull scale-up", 0, &faults, &expect)
        .await;
    drop((m1, m2, m3, agent));
}

/// A Deployment of `replicas` replicas requesting one CPU each, Divided by dynamic weights
/// (the replicas that still fit, SC-17) over member1 and member2.
fn crunch(replicas: u32) -> String {
    format!(
        r#"apiVersion: apps/v1
kind: Deployment
metadata: {{name: crunch, namespace: default, labels: {{app: crunch}}}}
spec:
  replicas: {replicas}
  selector: {{matchLabels: {{app: crunch}}}}
  template:
    metadata: {{labels: {{app: crunch}}}}
    spec:
      containers:
        - name: crunch
          image: busybox
          resources: {{requests: {{cpu: "1", memory: 64Mi}}}}
---
apiVersion: policy.karmada.io/v1alpha1
kind: PropagationPolicy
metadata: {{name: crunch, namespace: default}}
spec:
  resourceSelectors: [{{apiVersion: apps/v1, kind: Deployment, name: crunch}}]
  placement:
    clusterAffinity: {{clusterNames: [member1, member2]}}
    replicaScheduling:
      replicaSchedulingType: Divided
      replicaDivisionPreference: Weighted
      weightPreference: {{dynamicWeight: AvailableReplicas}}
"#
    )
}

/// ES-1/ES-2 on REAL API servers: replicas are divided by the CPU the members have free,
/// not by their free pods. member1 has 2 Nodes of 4 CPUs, member2 one Node of 2 CPUs, and
/// both room for 20 pods; 10 replicas requesting 1 CPU each go 8 to member1 and 2 to
/// member2 (by free pods they would go 5:5, and 3 would stay Pending on member2, where the
/// real kube-scheduler finds no CPU for them). Every replica becomes Ready, no pod on
/// either member is Pending, and the recorded history holds the fault suite's invariants.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn es_2_replicas_are_divided_by_the_free_cpu_of_real_members() {
    let (stack, recorder, etcd_endpoints) = real_stack().await;
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let (m1, m2) = tokio::join!(
        RealMember::start_sized(d, "member1", &etcd_endpoints, 2, 20, "1s", "4"),
        RealMember::start_sized(d, "member2", &etcd_endpoints, 1, 20, "1s", "2"),
    );
    let api = api_client(&stack).await;
    readme_join(&stack, d, &m1).await;
    readme_join(&stack, d, &m2).await;
    wait_clusters_ready(&api, &["member1", "member2"], T).await;
    // cluster-health reports the nodes' CPU (ES-3) before anything runs
    let cpu = eventually(T, "the members' CPU in their summaries", || async {
        let mut cpu = Vec::new();
        for name in ["member1", "member2"] {
            let c = get_cluster(&api, name).await?;
            let s = c.status?.resource_summary?;
            cpu.push(s.allocatable?.cpu_millis);
        }
        (cpu == [8000, 2000]).then_some(cpu)
    })
    .await;
    assert_eq!(cpu, [8000, 2000]);

    apply(&stack, d, "crunch.yaml", &crunch(10)).await;
    let binding = eventually(T, "crunch scheduled", || async {
        let b = get_binding(&api, "default", "crunch-deployment").await?;
        (!targets(&b).is_empty()).then_some(b)
    })
    .await;
    let split = targets(&binding);
    let requests = binding
        .spec
        .as_ref()
        .and_then(|s| s.replica_requirements.as_ref())
        .and_then(|r| r.resource_request.as_ref())
        .map(|r| (r.cpu_millis, r.memory_bytes));
    assert_eq!(requests, Some((1000, 64 << 20)), "ES-1 on the binding");
    assert_eq!(
        split,
        [("member1".to_owned(), 8), ("member2".to_owned(), 2)],
        "divided by free CPU (8:2), not by free pods (20:20)"
    );
    // every replica runs: the real Deployment controllers report them Ready
    eventually(T, "crunch Ready 8 and 2 on the members", || async {
        let (a, b) = tokio::join!(deployment(&m1, "crunch"), deployment(&m2, "crunch"));
        let (a, b) = (a?, b?);
        ((a.0, a.1, b.0, b.1) == (8, 8, 2, 2)).then_some(())
    })
    .await;
    for m in [&m1, &m2] {
        let pending = m
            .kubectl_ok(&[
                "get",
                "pods",
                "-n",
                "default",
                "--field-selector=status.phase=Pending",
                "-o",
                "name",
            ])
            .await;
        assert!(
            pending.trim().is_empty(),
            "{}: Pending pods: {pending}",
            m.name
        );
    }
    println!(
        "MEASURE real members, 10 replicas of 1 CPU over 8 and 2 free CPUs: placed {split:?}, \
         0 Pending"
    );

    let expect = history::Expect {
        healthy_members: vec!["member1".into(), "member2".into()],
        converged: true,
        ..Default::default()
    };
    stack
        .verdict(recorder, "real_members cpu", 0, &[], &expect)
        .await;
    drop((m1, m2));
}

/// ES-4 on REAL API servers: resource models see what a sum over nodes hides. member1 has
/// 4 Nodes of 2 CPUs (8 in all) and declares resource models, member2 one Node of 4 CPUs.
/// One replica requesting 3 CPUs fits no node of member1, though its CPUs add up to 8: by
/// the summed summary member1 would hold 2 and take the replica (to stay Pending there, as
/// the real kube-scheduler finds no node); counted by grade it holds none, and the replica
/// runs on member2.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn es_4_resource_models_keep_a_replica_off_fragmented_nodes() {
    let (stack, recorder, etcd_endpoints) = real_stack().await;
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let (m1, m2) = tokio::join!(
        RealMember::start_sized(d, "member1", &etcd_endpoints, 4, 20, "1s", "2"),
        RealMember::start_sized(d, "member2", &etcd_endpoints, 1, 20, "1s", "4"),
    );
    let api = api_client(&stack).await;
    readme_join(&stack, d, &m1).await;
    readme_join(&stack, d, &m2).await;
    wait_clusters_ready(&api, &["member1", "member2"], T).await;
    // member1's grades: [0, 2) CPUs, [2, 4), [4, ∞); memory [0, 16Gi), [16Gi, 32Gi),
    // [32Gi, ∞) (a requested resource the models lack would fall back to the summary,
    // ES-4.3, and the replica requests memory too)
    let mut member1 = get_cluster(&api, "member1").await.unwrap();
    let spec = member1.spec.get_or_insert_with(Default::default);
    let range = |name: &str, min: &str, max: &str| v1::ResourceModelRange {
        name: name.into(),
        min: min.into(),
        max: max.into(),
    };
    spec.resource_models = [
        ("0", "2", "0", "16Gi"),
        ("2", "4", "16Gi", "32Gi"),
        ("4", "8", "32Gi", "64Gi"),
    ]
    .iter()
    .enumerate()
    .map(|(g, (c0, c1, m0, m1))| v1::ResourceModel {
        grade: g as u32,
        ranges: vec![range("cpu", c0, c1), range("memory", m0, m1)],
    })
    .collect();
    api.clone()
        .update_cluster(v1::UpdateClusterRequest {
            cluster: Some(member1),
        })
        .await
        .expect("resource models apply");
    // cluster-health counts member1's 4 nodes (2 CPUs free each) in grade 1
    eventually(T, "member1's nodes counted by grade", || async {
        let c = get_cluster(&api, "member1").await?;
        let counts: Vec<(u32, i64)> = c
            .status?
            .resource_summary?
            .allocatable_modelings
            .iter()
            .map(|m| (m.grade, m.count))
            .collect();
        (counts == [(0, 0), (1, 4), (2, 0)]).then_some(())
    })
    .await;
    let stored = get_cluster(&api, "member1").await.unwrap();
    let last = &stored.spec.unwrap().resource_models[2].ranges[0];
    assert_ne!(last.max, "8", "the last grade is stored unbounded (ES-4.1)");

    let wide = crunch(1).replace(r#"cpu: "1""#, r#"cpu: "3""#);
    apply(&stack, d, "wide.yaml", &wide).await;
    let binding = eventually(T, "crunch scheduled", || async {
        let b = get_binding(&api, "default", "crunch-deployment").await?;
        (!targets(&b).is_empty()).then_some(b)
    })
    .await;
    assert_eq!(
        targets(&binding),
        [("member2".to_owned(), 1)],
        "by grade member1 holds no 3-CPU replica"
    );
    eventually(T, "crunch Ready on member2", || async {
        let d = deployment(&m2, "crunch").await?;
        (d.0 == 1 && d.1 == 1).then_some(())
    })
    .await;
    println!(
        "MEASURE real members, one 3-CPU replica, member1 4x2 CPUs with resource models, \
         member2 1x4: placed {:?}",
        targets(&binding)
    );
    let expect = history::Expect {
        healthy_members: vec!["member1".into(), "member2".into()],
        converged: true,
        ..Default::default()
    };
    stack
        .verdict(recorder, "real_members models", 0, &[], &expect)
        .await;
    drop((m1, m2));
}

/// `filler`, a Deployment of the member's own (not Flotilla's) with `replicas` replicas
/// requesting one CPU each: another workload that takes room on a member.
fn filler(replicas: u32) -> String {
    format!(
        r#"apiVersion: apps/v1
kind: Deployment
metadata: {{name: filler, namespace: default}}
spec:
  replicas: {replicas}
  selector: {{matchLabels: {{app: filler}}}}
  template:
    metadata: {{labels: {{app: filler}}}}
    spec:
      containers:
        - name: filler
          image: busybox
          resources: {{requests: {{cpu: "1"}}}}
"#
    )
}

/// `status.readyReplicas` of Deployment `name` in namespace default, straight from the API
/// server of `kubeconfig`; 0 when it is gone (member1's copy once its task ended) or the
/// look fails.
async fn ready_replicas(kubeconfig: &Path, name: &str) -> i64 {
    let out = tokio::process::Command::new("kubectl")
        .arg(format!("--kubeconfig={}", kubeconfig.display()))
        .args(["get", "deployment", name, "-n", "default"])
        .args(["-o", "jsonpath={.status.readyReplicas}"])
        .output()
        .await;
    out.ok()
        .filter(|o| o.status.success())
        .and_then(|o| String::from_utf8_lossy(&o.stdout).trim().parse().ok())
        .unwrap_or(0)
}

/// The Pending pods of namespace default on `m`, by name.
async fn pending_pods(m: &RealMember) -> String {
    m.kubectl_ok(&[
        "get",
        "pods",
        "-n",
        "default",
        "--field-selector=status.phase=Pending",
        "-o",
        "name",
    ])
    .await
}

/// SC-4.6 and GE-4.7 on REAL API servers: a failover onto too little CPU. member1 has 2
/// Nodes of 4 CPUs, member2 one Node of 8 CPUs of which a workload of its own (`filler`)
/// takes 4. 8 replicas of 1 CPU go 5:3 by free CPU. member1 becomes unreachable: member2
/// has room for 1 more, so the scheduler places that one and reports 4 unschedulable
/// (`Scheduled=False`, InsufficientCapacity), no pod on member2 is Pending, and member1's
/// copy keeps its eviction task (it is the one serving those 4). When `filler` scales down
/// on member2, the scheduler places the rest without anyone asking (SC-2.6), and member1's
/// task ends once the whole replacement is Ready. The Ready replicas over both members
/// never fall below the 8 asked for, and the recorded history holds the fault suite's
/// invariants (I2: no task ended on health while replicas had no room).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sc_4_6_a_failover_onto_too_little_cpu_places_what_fits_and_keeps_the_old_copy() {
    let (stack, recorder, etcd_endpoints) = real_stack().await;
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let (m1, m2) = tokio::join!(
        RealMember::start_sized(d, "member1", &etcd_endpoints, 2, 20, "1s", "4"),
        RealMember::start_sized(d, "member2", &etcd_endpoints, 1, 20, "1s", "8"),
    );
    let api = api_client(&stack).await;
    readme_join(&stack, d, &m1).await;
    readme_join(&stack, d, &m2).await;
    wait_clusters_ready(&api, &["member1", "member2"], T).await;
    std::fs::write(d.join("filler.yaml"), filler(4)).unwrap();
    let filler_file = d.join("filler.yaml").display().to_string();
    m2.kubectl_ok(&["apply", "-f", &filler_file]).await;
    eventually(
        T,
        "filler Ready on member2, its CPU in the summary",
        || async {
            let (_, ready, _) = deployment(&m2, "filler").await?;
            let c = get_cluster(&api, "member2").await?;
            let allocated = c.status?.resource_summary?.allocated?.cpu_millis;
            (ready == 4 && allocated == 4000).then_some(())
        },
    )
    .await;

    apply(&stack, d, "crunch.yaml", &crunch(8)).await;
    let settled = |want: Vec<(String, i32)>| {
        let api = api.clone();
        async move {
            let b = get_binding(&api, "default", "crunch-deployment").await?;
            (targets(&b) == want && binding_healthy(&b) && tasks(&b).is_empty()).then_some(b)
        }
    };
    let start = vec![("member1".to_owned(), 5), ("member2".to_owned(), 3)];
    eventually(T, "crunch at 5:3 (free CPU 8:4), healthy", || {
        settled(start.clone())
    })
    .await;

    // Ready crunch replicas over both members, sampled while the failover runs
    let sampling = Arc::new(std::sync::atomic::AtomicBool::new(true));
    let least = Arc::new(std::sync::Mutex::new((i64::MAX, 0usize)));
    let sampler = {
        let kubeconfigs = [m1.direct_kubeconfig.clone(), m2.direct_kubeconfig.clone()];
        let (sampling, least) = (sampling.clone(), least.clone());
        tokio::spawn(async move {
            while sampling.load(std::sync::atomic::Ordering::Relaxed) {
                let (a, b) = tokio::join!(
                    ready_replicas(&kubeconfigs[0], "crunch"),
                    ready_replicas(&kubeconfigs[1], "crunch")
                );
                let ready = a + b;
                {
                    let mut l = least.lock().unwrap();
                    *l = (l.0.min(ready), l.1 + 1);
                }
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        })
    };

    set_fault_at(&m1.control_addr, v1::FaultMode::Unreachable).await;
    let short = eventually(
        T,
        "what fits placed on member2, 4 unschedulable",
        || async {
            let b = get_binding(&api, "default", "crunch-deployment").await?;
            let status = b.status.as_ref()?;
            (targets(&b) == [("member2".to_owned(), 4)] && status.unschedulable_replicas == 4)
                .then_some(b)
        },
    )
    .await;
    let condition = binding_condition(&short, "Scheduled").expect("a Scheduled condition");
    assert_eq!(
        (condition.status, condition.reason.as_str()),
        (v1::ConditionStatus::False as i32, "InsufficientCapacity"),
        "{}",
        condition.message
    );
    assert!(
        condition
            .message
            .starts_with("4 of 8 replicas are unschedulable"),
        "{}",
        condition.message
    );
    assert_eq!(
        tasks(&short),
        ["member1"],
        "member1's copy keeps serving what has no room"
    );
    // member2 runs what was placed there: nothing Pending for lack of CPU
    eventually(T, "crunch 4 Ready on member2", || async {
        let (replicas, ready, _) = deployment(&m2, "crunch").await?;
        (replicas == 4 && ready == 4).then_some(())
    })
    .await;
    let pending = pending_pods(&m2).await;
    assert!(
        pending.trim().is_empty(),
        "member2: Pending pods: {pending}"
    );
    let b = get_binding(&api, "default", "crunch-deployment")
        .await
        .unwrap();
    assert_eq!(
        tasks(&b),
        ["member1"],
        "the task outlives a healthy short result"
    );

    // room appears on member2: its own workload scales down
    m2.kubectl_ok(&[
        "scale",
        "deployment/filler",
        "-n",
        "default",
        "--replicas=0",
    ])
    .await;
    let end = vec![("member2".to_owned(), 8)];
    let done = eventually(T, "the rest placed on member2, healthy, no task", || {
        settled(end.clone())
    })
    .await;
    assert_eq!(done.status.as_ref().unwrap().unschedulable_replicas, 0);
    let pending = pending_pods(&m2).await;
    assert!(
        pending.trim().is_empty(),
        "member2: Pending pods: {pending}"
    );
    sampling.store(false, std::sync::atomic::Ordering::Relaxed);
    sampler.await.unwrap();
    let (least, samples) = *least.lock().unwrap();
    println!(
        "MEASURE real members, failover of 5 of 8 one-CPU replicas onto 1 free CPU: placed \
         member2:4 with 4 unschedulable, 0 Pending; after the room appeared member2:8, 0 \
         Pending; least Ready over both members {least} (asked 8) over {samples} samples"
    );
    assert!(least >= 8, "the Ready replicas fell to {least} of 8");

    let expect = history::Expect {
        healthy_members: vec!["member2".into()],
        converged: true,
        ..Default::default()
    };
    let faults = ["member1 unreachable: its 5 replicas find room for 1 on member2".to_owned()];
    stack
        .verdict(recorder, "real_members too little cpu", 0, &faults, &expect)
        .await;
    drop((m1, m2));
}
