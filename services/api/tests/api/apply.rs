//! `GetPeers`, and `Apply`: admission of everything first, writes all or nothing.

use super::*;

/// `--peer NAME=ADDR` is what `GetPeers` answers (the CLI's `explain` finds the dry-run
/// services this way); malformed or repeated peers are refused, each naming the flag.
#[tokio::test]
async fn get_peers_answers_the_peer_flags_and_bad_peers_are_refused() {
    use clap::Parser as _;
    let parse = |peers: &[&str]| {
        let mut argv = vec!["flotilla-api", "--store", "mem", "--identity", "t"];
        for p in peers {
            argv.extend(["--peer", p]);
        }
        flotilla_api::Args::try_parse_from(argv)
            .expect("parses")
            .validate()
    };
    for (bad, why) in [
        ("scheduler", "expected NAME=ADDR"),
        ("Scheduler=1.2.3.4:5", "NAME must be a service name"),
        ("scheduler=", "ADDR must be"),
        ("scheduler=a b", "ADDR must be"),
    ] {
        let errors = parse(&[bad]).expect_err(bad);
        assert!(
            errors
                .iter()
                .any(|e| e.starts_with("--peer") && e.contains(why)),
            "{bad}: {errors:?}"
        );
    }
    let twice = parse(&["scheduler=a:1", "scheduler=b:2"]).expect_err("twice");
    assert!(
        twice.iter().any(|e| e.contains("scheduler is given twice")),
        "{twice:?}"
    );

    let mut config = testing::config();
    config.peers = parse(&["scheduler=127.0.0.1:7403", "cluster-health=http://h:1"])
        .expect("valid")
        .peers;
    let store: StoreRef = Arc::new(MemStore::new());
    let api = testing::serve(store, config).await;
    let peers = api
        .client()
        .await
        .get_peers(v1::GetPeersRequest {})
        .await
        .expect("GetPeers")
        .into_inner()
        .peers;
    assert_eq!(peers.len(), 2, "{peers:?}");
    assert_eq!(peers["scheduler"], "127.0.0.1:7403");
    assert_eq!(peers["cluster-health"], "http://h:1");
    api.stop().await;
}

/// `Apply` (#12 item 7): every object admitted first, then all written in one transaction;
/// a file with one object the server refuses writes nothing, and the refusal names
/// `objects[i]`. Applying the same objects again changes nothing; a change is `configured`.
#[tokio::test]
async fn apply_admits_everything_first_and_writes_all_or_nothing() {
    let (store, api, client) = setup().await;
    let cm = v1::Workload {
        manifest: r#"{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"settings","namespace":"default"},"data":{"a":"b"}}"#.into(),
        ..Default::default()
    };
    let objects = |policy: v1::PropagationPolicy| {
        vec![
            v1::ApplyObject {
                object: Some(v1::apply_object::Object::Workload(cm.clone())),
            },
            v1::ApplyObject {
                object: Some(v1::apply_object::Object::Workload(nginx_workload())),
            },
            v1::ApplyObject {
                object: Some(v1::apply_object::Object::PropagationPolicy(policy)),
            },
        ]
    };
    let apply = |objects: Vec<v1::ApplyObject>, dry_run: bool| {
        let mut c = client.clone();
        async move {
            c.apply(v1::ApplyRequest {
                objects,
                dry_run,
                ..Default::default()
            })
            .await
            .map(Response::into_inner)
        }
    };
    let actions = |r: &v1::ApplyResponse| -> Vec<String> {
        r.outcomes
            .iter()
            .map(|o| format!("{} {} {}", o.kind, o.name, o.action))
            .collect()
    };

    // A refused object (a ClusterTaintPolicy with NoExecute, not allowed by default) after
    // valid ones: nothing is written.
    let before = snapshot(&store).await;
    let mut refused = objects(seed_policy());
    let mut ctp = flotilla_runtime::testing::bindings::taint_policy_on_not_ready(
        "no-execute",
        "example.com/down",
        v1::TaintEffect::NoExecute,
    );
    ctp.metadata.as_mut().unwrap().namespace.clear();
    refused.push(v1::ApplyObject {
        object: Some(v1::apply_object::Object::ClusterTaintPolicy(ctp)),
    });
    let status = apply(refused, false).await.unwrap_err();
    assert_eq!(status.code(), Code::InvalidArgument, "{status:?}");
    let fields = bad_fields(&status);
    assert!(
        fields.iter().all(|f| f.starts_with("objects[3].")) && !fields.is_empty(),
        "{fields:?}"
    );
    assert_eq!(snapshot(&store).await, before, "nothing half-written");

    // A dry run says what would happen and writes nothing.
    let dry = apply(objects(seed_policy()), true).await.unwrap();
    assert_eq!(
        actions(&dry),
        [
            "Workload settings created",
            "Workload nginx created",
            "PropagationPolicy nginx-propagation created"
        ]
    );
    assert_eq!(snapshot(&store).await, before);

    // All three in one transaction: one revision (the detector writes the binding after).
    let done = apply(objects(seed_policy()), false).await.unwrap();
    assert_eq!(actions(&done), actions(&dry));
    let after = snapshot(&store).await;
    let new_revisions: std::collections::HashSet<i64> = after
        .iter()
        .filter(|(k, _)| k.starts_with("workloads/") || k.starts_with("policies/"))
        .map(|(_, rv)| *rv)
        .collect();
    assert_eq!(
        new_revisions,
        std::collections::HashSet::from([done.resource_version]),
        "{after:?}"
    );

    // Again: unchanged; a changed policy: configured, the others unchanged.
    let again = apply(objects(seed_policy()), false).await.unwrap();
    assert!(
        again.outcomes.iter().all(|o| o.action == "unchanged"),
        "{again:?}"
    );
    let mut changed = seed_policy();
    changed.spec.as_mut().unwrap().priority = 5;
    let configured = apply(objects(changed), false).await.unwrap();
    assert_eq!(
        actions(&configured),
        [
            "Workload settings unchanged",
            "Workload nginx unchanged",
            "PropagationPolicy nginx-propagation configured"
        ]
    );

    // The same object twice in one request is refused.
    let mut twice = objects(seed_policy());
    twice.push(twice[0].clone());
    let status = apply(twice, false).await.unwrap_err();
    assert_eq!(bad_fields(&status), ["objects[3]"], "{status:?}");
    api.stop().await;
}

/// An update whose only difference is a manager's time writes nothing and keeps the stored
/// time; a real change takes the new time. (Regression: the Kubernetes API gateway stamps the
/// writer's entry before this service defaults a resource selector's namespace, so two
/// applies of the same file a second apart wrote a new revision.)
#[tokio::test]
async fn an_update_that_changes_only_a_managers_time_writes_nothing() {
    let (store, api, client) = setup().await;
    let entry = |seconds: i64| v1::ManagedFieldsEntry {
        manager: "kubectl-client-side-apply".into(),
        operation: "Update".into(),
        api_version: "policy.karmada.io/v1alpha1".into(),
        time: Some(prost_types::Timestamp { seconds, nanos: 0 }),
        fields_type: "FieldsV1".into(),
        fields_v1: r#"{"f:spec":{"f:priority":{}}}"#.into(),
        subresource: String::new(),
    };
    let policy = |priority: i32, seconds: i64| {
        let mut p = seed_policy();
        let meta = p.metadata.as_mut().unwrap();
        meta.managed_fields = vec![entry(seconds)];
        let spec = p.spec.as_mut().unwrap();
        spec.priority = priority;
        // left to the server's defaulting, as kubectl's merge patch leaves it
        for s in &mut spec.resource_selectors {
            s.namespace.clear();
        }
        p
    };
    let write = |p: v1::PropagationPolicy, mode: v1::ApplyMode| {
        let mut c = client.clone();
        async move {
            c.apply(v1::ApplyRequest {
                objects: vec![v1::ApplyObject {
                    object: Some(v1::apply_object::Object::PropagationPolicy(p)),
                }],
                mode: mode as i32,
                ..Default::default()
            })
            .await
            .expect("applied")
            .into_inner()
        }
    };
    let stored = |store: StoreRef| async move {
        let got = store
            .get("policies/default/nginx-propagation")
            .await
            .expect("read")
            .expect("stored");
        let p: v1::PropagationPolicy = flotilla_store::typed::decode(&got).expect("decodes");
        (got.mod_revision, p)
    };
    write(policy(1, 1_000), v1::ApplyMode::Create).await;
    let (rv, _) = stored(store.clone()).await;

    let again = write(policy(1, 1_007), v1::ApplyMode::Update).await;
    assert_eq!(again.outcomes[0].action, "unchanged", "{again:?}");
    let (rv_again, p) = stored(store.clone()).await;
    assert_eq!(rv_again, rv, "nothing written");
    let time = |p: &v1::PropagationPolicy| p.metadata.as_ref().unwrap().managed_fields[0].time;
    assert_eq!(time(&p).unwrap().seconds, 1_000, "the stored time stays");

    let changed = write(policy(4, 1_009), v1::ApplyMode::Update).await;
    assert_eq!(changed.outcomes[0].action, "configured", "{changed:?}");
    let (rv_changed, p) = stored(store.clone()).await;
    assert!(rv_changed > rv);
    assert_eq!(
        time(&p).unwrap().seconds,
        1_009,
        "a real change takes the new time"
    );
    api.stop().await;
}

/// A file of more objects than one transaction holds (128) is admitted whole, then written in
/// transactions of 128, in order; a refused object among them still writes nothing.
#[tokio::test]
async fn apply_writes_a_large_file_in_transactions_of_128() {
    let (store, api, mut client) = setup().await;
    let config_map = |i: usize| v1::ApplyObject {
        object: Some(v1::apply_object::Object::Workload(v1::Workload {
            manifest: format!(
                r#"{{"apiVersion":"v1","kind":"ConfigMap","metadata":{{"name":"cm-{i}","namespace":"default"}},"data":{{}}}}"#
            ),
            ..Default::default()
        })),
    };
    let mut objects: Vec<v1::ApplyObject> = (0..200).map(config_map).collect();
    // one bad object at the end: nothing is written
    let before = snapshot(&store).await;
    objects.push(v1::ApplyObject {
        object: Some(v1::apply_object::Object::Workload(v1::Workload {
            manifest: "{not json".into(),
            ..Default::default()
        })),
    });
    let status = client
        .apply(v1::ApplyRequest {
            objects: objects.clone(),
            dry_run: false,
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert!(
        bad_fields(&status)
            .iter()
            .all(|f| f.starts_with("objects[200]")),
        "{status:?}"
    );
    assert_eq!(snapshot(&store).await, before);
    objects.pop();
    let done = accepted(client.apply(v1::ApplyRequest {
        objects,
        dry_run: false,
        ..Default::default()
    }))
    .await;
    assert_eq!(done.outcomes.len(), 200);
    assert!(done.outcomes.iter().all(|o| o.action == "created"));
    let revisions: std::collections::BTreeSet<i64> = snapshot(&store)
        .await
        .into_iter()
        .filter(|(k, _)| k.starts_with("workloads/default/ConfigMap/cm-"))
        .map(|(_, rv)| rv)
        .collect();
    assert_eq!(revisions.len(), 2, "128 + 72 objects: two transactions");
    assert_eq!(revisions.last(), Some(&done.resource_version));
    api.stop().await;
}

/// `Apply` with a mode, as the Kubernetes API's verbs use it: `CREATE` refuses a stored
/// object (ALREADY_EXISTS) and a resourceVersion; `UPDATE` refuses a missing object
/// (NOT_FOUND) and a stale resourceVersion (ABORTED), and replaces the finalizers with the
/// object's own; each refusal writes nothing; an unknown mode is refused.
#[tokio::test]
async fn apply_modes_create_only_and_replace_only() {
    let (store, api, client) = setup().await;
    let call = |object: v1::PropagationPolicy, mode: v1::ApplyMode| {
        let mut c = client.clone();
        async move {
            c.apply(v1::ApplyRequest {
                objects: vec![v1::ApplyObject {
                    object: Some(v1::apply_object::Object::PropagationPolicy(object)),
                }],
                dry_run: false,
                mode: mode as i32,
            })
            .await
            .map(Response::into_inner)
        }
    };
    let get = || {
        let mut c = client.clone();
        async move {
            c.get_propagation_policy(v1::GetPropagationPolicyRequest {
                namespace: "default".into(),
                name: "nginx-propagation".into(),
            })
            .await
            .unwrap()
            .into_inner()
        }
    };
    // Replace-only of a missing object: NOT_FOUND, nothing written.
    let before = snapshot(&store).await;
    let status = call(seed_policy(), v1::ApplyMode::Update)
        .await
        .unwrap_err();
    assert_eq!(status.code(), Code::NotFound, "{status:?}");
    assert_eq!(snapshot(&store).await, before);
    // Create-only with a resourceVersion: refused, naming the field.
    let mut with_rv = seed_policy();
    with_rv.metadata.as_mut().unwrap().resource_version = 7;
    let status = call(with_rv, v1::ApplyMode::Create).await.unwrap_err();
    assert_eq!(bad_fields(&status), ["objects[0].metadata.resourceVersion"]);
    // Create-only: created once, then ALREADY_EXISTS.
    let mut with_finalizer = seed_policy();
    with_finalizer
        .metadata
        .as_mut()
        .unwrap()
        .finalizers
        .push("example.com/keep".into());
    let done = call(with_finalizer, v1::ApplyMode::Create).await.unwrap();
    assert_eq!(done.outcomes[0].action, "created");
    let stored = get().await;
    let status = call(seed_policy(), v1::ApplyMode::Create)
        .await
        .unwrap_err();
    assert_eq!(status.code(), Code::AlreadyExists, "{status:?}");
    // Replace-only with a stale resourceVersion: ABORTED, nothing written.
    let mut stale = seed_policy();
    stale.spec.as_mut().unwrap().priority = 3;
    stale.metadata.as_mut().unwrap().resource_version =
        stored.metadata.as_ref().unwrap().resource_version - 1;
    let before = snapshot(&store).await;
    let status = call(stale.clone(), v1::ApplyMode::Update)
        .await
        .unwrap_err();
    assert_eq!(status.code(), Code::Aborted, "{status:?}");
    assert_eq!(snapshot(&store).await, before);
    // With the stored one: configured, and the finalizers are the object's (none).
    stale.metadata.as_mut().unwrap().resource_version =
        stored.metadata.as_ref().unwrap().resource_version;
    let done = call(stale, v1::ApplyMode::Update).await.unwrap();
    assert_eq!(done.outcomes[0].action, "configured");
    let replaced = get().await;
    assert_eq!(replaced.spec.as_ref().unwrap().priority, 3);
    assert!(
        replaced.metadata.as_ref().unwrap().finalizers.is_empty(),
        "{replaced:?}"
    );
    // An unknown mode.
    let mut c = client.clone();
    let status = c
        .apply(v1::ApplyRequest {
            objects: vec![],
            dry_run: false,
            mode: 9,
        })
        .await
        .unwrap_err();
    assert_eq!(bad_fields(&status), ["mode"], "{status:?}");
    api.stop().await;
}
