//! The real `kubectl` against member-sim: a simulated member answers the Kubernetes API's
//! read side (discovery, lists and gets, namespaces), so what Flotilla applied to a member can
//! be looked at the way a platform team looks at a cluster.
//!
//! The seed (`nginx`, static weights member1:1, member2:2) is applied through the api; then,
//! on each member, `kubectl get namespaces`, `get deployments -A`, `get deployment -n` with a
//! jsonpath and `get` of a missing object are checked against what the Works said; then
//! `kubectl apply --server-side`, `get -w` (watch) and `delete -f` on a third member.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use flotilla_core::testing::deployment_yaml;
use flotilla_tests::{
    EtcdServer, Stack, Timers, binding_healthy, eventually, member_kubectl, nginx_binding, targets,
};

const T: Duration = Duration::from_secs(45);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_reads_what_flotilla_applied_to_a_member() {
    let mut stack = Stack::start_on(EtcdServer::start().await, Timers::fast(), Vec::new()).await;
    let api = stack.ready_unequal_members(T).await;
    flotilla_tests::create_nginx(&api, flotilla_api::testing::seed_policy()).await;
    eventually(T, "nginx {member1:1, member2:2} healthy", || async {
        let b = nginx_binding(&api).await?;
        let want = [("member1".to_owned(), 1), ("member2".to_owned(), 2)];
        (targets(&b) == want && binding_healthy(&b)).then_some(())
    })
    .await;

    for (member, replicas) in [("member1", "1"), ("member2", "2")] {
        let addr = stack.members[member].addr.clone();
        let (ok, out, err) = member_kubectl(&addr, &["get", "namespaces", "-o", "name"]).await;
        assert!(
            ok && out.contains("namespace/default"),
            "{member}: {out}{err}"
        );

        let (ok, out, err) = member_kubectl(&addr, &["get", "deployments", "-A"]).await;
        assert!(ok, "{member}: {err}");
        let row = out
            .lines()
            .find(|l| l.split_whitespace().nth(1) == Some("nginx"))
            .unwrap_or_else(|| panic!("{member}: no nginx row in\n{out}"));
        assert!(row.starts_with("default"), "{member}: {row}");

        // short names and categories, as from a real API server's discovery
        for (args, want) in [
            (["get", "deploy", "-A"], "nginx"),
            (["get", "all", "-A"], "deployment.apps/nginx"),
        ] {
            let (ok, out, err) = member_kubectl(&addr, &args).await;
            assert!(
                ok && out.contains(want),
                "{member}: kubectl {args:?}: {out}{err}"
            );
        }

        let (ok, out, err) = member_kubectl(
            &addr,
            &[
                "get",
                "deployment",
                "nginx",
                "-n",
                "default",
                "-o",
                "jsonpath={.spec.replicas}/{.status.readyReplicas}",
            ],
        )
        .await;
        assert!(ok, "{member}: {err}");
        assert_eq!(
            out,
            format!("{replicas}/{replicas}"),
            "{member}: the replicas Flotilla divided to it, all Ready"
        );

        let (ok, _, err) =
            member_kubectl(&addr, &["get", "deployment", "missing", "-n", "default"]).await;
        assert!(
            !ok && (err.contains("NotFound") || err.contains("not found")),
            "{member}: {err}"
        );
    }
    // nothing of nginx on a member it was not placed on: an empty list
    let addr = stack
        .start_member("member3", &["--pod-startup-delay=0s"])
        .await;
    let (ok, out, err) = member_kubectl(&addr, &["get", "deployments", "-A", "-o", "name"]).await;
    assert!(ok && out.trim().is_empty(), "{out}{err}");

    // server-side apply and delete (member-sim serves no OpenAPI: --validate=false)
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("api.yaml");
    std::fs::write(
        &file,
        deployment_yaml("api", Some("shop"), 2, "api", "nginx"),
    )
    .unwrap();
    let file = file.to_str().unwrap();
    // `get -w` lists, then follows the watch: the apply below shows up in it
    let watching = tokio::process::Command::new("kubectl")
        .env("KUBECONFIG", "/dev/null")
        .env("HOME", std::env::temp_dir())
        .arg(format!("--server=http://{addr}"))
        .args(["get", "deployments", "-n", "shop", "-w", "-o", "name"])
        .stdout(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    tokio::time::sleep(Duration::from_millis(500)).await;
    let (ok, out, err) = member_kubectl(
        &addr,
        &["apply", "--server-side", "--validate=false", "-f", file],
    )
    .await;
    assert!(
        ok && out.contains("deployment.apps/api serverside-applied"),
        "{out}{err}"
    );
    let watched = {
        let mut stdout = watching.stdout.unwrap();
        let mut buf = Vec::new();
        let _ = tokio::time::timeout(Duration::from_secs(3), async {
            use tokio::io::AsyncReadExt;
            let mut chunk = [0u8; 1024];
            while let Ok(n) = stdout.read(&mut chunk).await {
                if n == 0 {
                    break;
                }
                buf.extend_from_slice(&chunk[..n]);
                if String::from_utf8_lossy(&buf).contains("deployment.apps/api") {
                    break;
                }
            }
        })
        .await;
        String::from_utf8_lossy(&buf).into_owned()
    };
    assert!(
        watched.contains("deployment.apps/api"),
        "kubectl get -w saw the apply: {watched:?}"
    );
    let (ok, out, err) = member_kubectl(
        &addr,
        &[
            "get",
            "deployment",
            "api",
            "-n",
            "shop",
            "-o",
            "jsonpath={.spec.replicas}/{.metadata.generation}",
        ],
    )
    .await;
    assert!(ok && out == "2/1", "{out}{err}");
    let (ok, out, err) = member_kubectl(&addr, &["get", "namespaces", "-o", "name"]).await;
    assert!(ok && out.contains("namespace/shop"), "{out}{err}");
    let (ok, out, err) = member_kubectl(&addr, &["delete", "-f", file]).await;
    assert!(ok && out.contains("deleted"), "{out}{err}");
    let (ok, out, err) = member_kubectl(&addr, &["get", "deployments", "-A", "-o", "name"]).await;
    assert!(ok && out.trim().is_empty(), "{out}{err}");
}
