//! Member credentials as Karmada keeps them: a Push cluster whose API server requires a
//! bearer token is joined with `flotilla join --kubeconfig` (the real CLI), which stores the
//! token in the Secret `karmada-cluster/member1` and names it in the Cluster's `secretRef`.
//! cluster-health reads the member's status and the work-executor applies to it with that
//! token; a cluster whose `secretRef` names a missing Secret is not Ready, and cluster-health
//! says which Secret is missing. The token never shows in any service's log (at debug level), in the
//! api's answers (`GetSecret` answers keys only), nor in `flotilla get`/`describe` output.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use flotilla_proto::v1;
use flotilla_tests::{
    EtcdServer, Stack, Timers, api_client, binding_healthy, create_cluster, eventually,
    get_cluster, get_secret, nginx_binding, ready_status, targets, wait_clusters_ready,
};

const T: Duration = Duration::from_secs(45);

/// The real CLI against the stack's api: (success, stdout + stderr).
async fn flotilla(stack: &Stack, args: &[&str]) -> (bool, String) {
    stack.cli(args).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_token_in_a_secret_reaches_the_member_and_nothing_else() {
    // every service logs at debug level: a leak would show
    let mut stack = Stack::start_on(
        EtcdServer::start().await,
        Timers::fast(),
        vec![("FLOTILLA_LOG".into(), "debug".into())],
    )
    .await;
    let dir = tempfile::tempdir().unwrap();
    let token = format!("member1-token-{:016x}", rand::random::<u64>());
    let token_file = dir.path().join("token");
    std::fs::write(&token_file, &token).unwrap();
    let token_flag = format!("--token-file={}", token_file.display());
    let addr = stack
        .start_member("member1", &["--pod-startup-delay=200ms", &token_flag])
        .await;
    let kubeconfig = dir.path().join("kubeconfig");
    std::fs::write(
        &kubeconfig,
        format!(
            "apiVersion: v1\nkind: Config\ncurrent-context: m1\n\
             clusters:\n- name: m1\n  cluster: {{server: \"http://{addr}\"}}\n\
             contexts:\n- name: m1\n  context: {{cluster: m1, user: u1}}\n\
             users:\n- name: u1\n  user: {{token: {token}}}\n"
        ),
    )
    .unwrap();
    let api = api_client(&stack).await;

    // a Secret that does not exist: the cluster cannot be reached, and says why
    let mut broken = flotilla_api::testing::cluster("broken", &format!("http://{addr}"));
    broken.spec.as_mut().unwrap().secret_ref = Some(v1::SecretReference {
        namespace: "karmada-cluster".into(),
        name: "nope".into(),
    });
    create_cluster(&api, broken).await;

    let kubeconfig_flag = kubeconfig.display().to_string();
    let (ok, out) = flotilla(
        &stack,
        &["join", "member1", "--kubeconfig", &kubeconfig_flag],
    )
    .await;
    assert!(ok, "{out}");
    assert!(out.contains("secret/karmada-cluster/member1"), "{out}");
    assert!(!out.contains(&token), "join printed the token: {out}");

    // status needs the token (discovery, nodes and pods answer 401 without it)
    wait_clusters_ready(&api, &["member1"], T).await;
    let c = get_cluster(&api, "member1").await.unwrap();
    let status = c.status.as_ref().unwrap();
    assert!(
        status.resource_summary.is_some() && !status.api_enablements.is_empty(),
        "collected with the token: {status:?}"
    );
    eventually(T, "broken: not Ready, the missing Secret named", || async {
        let c = get_cluster(&api, "broken").await?;
        let named = stack.services["cluster-health"]
            .log()
            .contains("its secretRef karmada-cluster/nope does not exist");
        (ready_status(&c) == v1::ConditionStatus::False && named).then_some(())
    })
    .await;
    api.clone()
        .delete_cluster(v1::DeleteClusterRequest {
            name: "broken".into(),
            preconditions: None,
        })
        .await
        .unwrap();

    // the work-executor applies with the token
    flotilla_tests::create_nginx(&api, flotilla_api::testing::seed_policy()).await;
    eventually(T, "nginx on member1, healthy", || async {
        let b = nginx_binding(&api).await?;
        (targets(&b) == [("member1".to_owned(), 3)] && binding_healthy(&b)).then_some(())
    })
    .await;

    // the api never answers a value
    let secret = get_secret(&api, "karmada-cluster", "member1")
        .await
        .unwrap();
    assert!(secret.data.contains_key("token"), "{secret:?}");
    assert!(
        secret.data.values().all(Vec::is_empty),
        "values are never answered"
    );

    // nor does any output
    for args in [
        &["get", "clusters", "-o", "yaml"][..],
        &["describe", "cluster", "member1"],
        &["get", "events", "-A"],
        &["get", "works", "-A", "-o", "yaml"],
    ] {
        let (ok, out) = flotilla(&stack, args).await;
        assert!(ok, "{args:?}: {out}");
        assert!(!out.contains(&token), "{args:?} printed the token");
    }
    let (_, out) = flotilla(&stack, &["get", "clusters", "member1", "-o", "yaml"]).await;
    assert!(out.contains("secretRef"), "{out}");
    // nor any log
    for (name, process) in &stack.services {
        let log = process.log();
        assert!(!log.is_empty(), "{name} logged nothing");
        assert!(!log.contains(&token), "{name}'s log holds the token");
    }
}
