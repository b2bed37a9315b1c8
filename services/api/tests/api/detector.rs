//! The detector: the seed workload, policy changes, precedence (PL-1..PL-4), conflicts.

use super::*;

async fn binding(client: &mut Client) -> Option<v1::ResourceBinding> {
    client
        .get_resource_binding(v1::GetResourceBindingRequest {
            namespace: "default".into(),
            name: "nginx-deployment".into(),
        })
        .await
        .ok()
        .map(Response::into_inner)
}

/// Waits until the nginx binding exists and `holds` for it (`what` names the wait); the
/// binding.
async fn binding_where(
    client: &Client,
    what: &str,
    holds: impl Fn(&v1::ResourceBinding) -> bool,
) -> v1::ResourceBinding {
    let holds = &holds;
    eventually(what, || {
        let mut c = client.clone();
        async move { binding(&mut c).await.filter(|b| holds(b)) }
    })
    .await
}

/// Waits until the nginx binding is gone (`what` names the wait).
async fn binding_gone(client: &Client, what: &str) {
    eventually(what, || {
        let mut c = client.clone();
        async move { binding(&mut c).await.is_none().then_some(()) }
    })
    .await;
}

#[tokio::test]
async fn detector_binds_the_seed_workload_and_follows_changes() {
    let (store, api, mut client) = setup().await;
    let typed = Typed::new(store.clone());
    let policy = accepted(client.create_propagation_policy(create_pp(seed_policy()))).await;
    let workload = accepted(client.create_workload(create_workload(nginx_workload()))).await;
    let b = binding_where(&client, "the binding", |_| true).await;
    let spec = b.spec.clone().unwrap();
    assert_eq!(
        spec.resource,
        Some(v1::ObjectReference {
            api_version: "apps/v1".into(),
            kind: "Deployment".into(),
            namespace: "default".into(),
            name: "nginx".into(),
            uid: workload.metadata.as_ref().unwrap().uid.clone(),
        })
    );
    assert_eq!(spec.replicas, 3);
    let req = spec.replica_requirements.unwrap().resource_request.unwrap();
    assert_eq!((req.cpu_millis, req.memory_bytes), (100, 128 << 20));
    let placement = spec.placement.clone().unwrap();
    assert_eq!(
        placement,
        policy.spec.as_ref().unwrap().placement.clone().unwrap()
    );
    assert_eq!(
        placement.cluster_affinity.unwrap().cluster_names,
        ["member1", "member2"]
    );
    let weights: Vec<i64> = placement
        .replica_scheduling
        .unwrap()
        .weight_preference
        .unwrap()
        .static_weight_list
        .iter()
        .map(|w| w.weight)
        .collect();
    assert_eq!(weights, [1, 2]);
    let tolerations: Vec<_> = placement
        .cluster_tolerations
        .iter()
        .map(|t| (t.key.as_str(), t.toleration_seconds))
        .collect();
    assert_eq!(
        tolerations,
        [
            ("cluster.karmada.io/not-ready", Some(300)),
            ("cluster.karmada.io/unreachable", Some(300))
        ]
    );
    assert_eq!(spec.scheduler_name, "default-scheduler");
    assert_eq!(policy_label(&b), "nginx-propagation");
    assert_eq!(
        b.metadata.as_ref().unwrap().labels[PERMANENT_ID_LABEL_POLICY],
        policy.metadata.as_ref().unwrap().labels[PERMANENT_ID_LABEL_POLICY]
    );
    assert_eq!(b.generation(), 1);

    // The scheduler writes its fields.
    let stored: v1::ResourceBinding = typed.get(&b.key()).await.unwrap().unwrap();
    let mut scheduled = stored.clone();
    scheduled.spec.as_mut().unwrap().clusters = vec![
        v1::TargetCluster {
            name: "member1".into(),
            replicas: 1,
        },
        v1::TargetCluster {
            name: "member2".into(),
            replicas: 2,
        },
    ];
    scheduled.status = Some(v1::ResourceBindingStatus {
        scheduler_observed_generation: 2,
        ..Default::default()
    });
    let scheduled = typed.update(&stored, scheduled).await.unwrap();
    assert_eq!(scheduled.generation(), 2);

    // A policy change re-syncs the binding (generation bumps), keeping the scheduler's fields.
    let mut changed = policy.clone();
    let list = static_weights(changed.spec.as_mut().unwrap().placement.as_mut().unwrap());
    list[0].weight = 2;
    list[1].weight = 1;
    accepted(
        client.update_propagation_policy(v1::UpdatePropagationPolicyRequest {
            propagation_policy: Some(changed),
        }),
    )
    .await;
    let b = binding_where(&client, "the new weights", |b| {
        b.spec
            .as_ref()
            .unwrap()
            .placement
            .as_ref()
            .unwrap()
            .replica_scheduling
            .as_ref()
            .unwrap()
            .weight_preference
            .as_ref()
            .unwrap()
            .static_weight_list[0]
            .weight
            == 2
    })
    .await;
    assert_eq!(b.generation(), 3);
    assert_eq!(
        b.spec.as_ref().unwrap().clusters.len(),
        2,
        "spec.clusters kept"
    );
    assert_eq!(
        b.status.as_ref().unwrap().scheduler_observed_generation,
        2,
        "status kept"
    );

    // A workload change (replicas) too.
    scale(&mut client, &workload, 5).await;
    let b = binding_where(&client, "5 replicas", |b| {
        b.spec.as_ref().unwrap().replicas == 5
    })
    .await;
    assert_eq!(b.generation(), 4);
    assert_eq!(b.spec.as_ref().unwrap().clusters.len(), 2);

    // The workload goes: so does its binding.
    accepted(client.delete_workload(flotilla_api::testing::delete_nginx())).await;
    binding_gone(&client, "the binding deleted").await;
    // the claim was recorded as an event on the binding (events are written in batches)
    eventually("the ApplyPolicySucceed event", || {
        let mut c = client.clone();
        async move {
            let events = accepted(c.list_events(v1::ListEventsRequest {
                involved_object_name: "nginx-deployment".into(),
                ..Default::default()
            }))
            .await;
            events
                .items
                .iter()
                .any(|e| e.reason == "ApplyPolicySucceed")
                .then_some(())
        }
    })
    .await;
    api.stop().await;
}

/// PL-4 for a workload no policy claims yet, and PL-1 on each deletion: every policy exists
/// before the workload, so the best one claims it; deleting the claiming policy detaches the
/// binding (kept, with its targets) and the best remaining policy claims it again.
#[tokio::test]
async fn detector_pl4_precedence_and_pl1_detach_on_each_policy_deletion() {
    let (_store, api, mut client) = setup().await;
    let observer = client.clone();
    let claimed_by = move |want: &'static str| {
        let client = observer.clone();
        async move { binding_where(&client, want, |b| policy_label(b) == want).await }
    };
    accepted(
        client.create_cluster_propagation_policy(v1::CreateClusterPropagationPolicyRequest {
            cluster_propagation_policy: Some(v1::ClusterPropagationPolicy {
                metadata: named("all-deployments"),
                spec: Some(kind_only("cpp", 100)),
            }),
        }),
    )
    .await;
    let mut by_label = kind_only("b-label", 0);
    by_label.resource_selectors[0].label_selector = Some(v1::LabelSelector {
        match_labels: [("app".to_owned(), "nginx".to_owned())].into(),
        match_expressions: vec![],
    });
    let mut by_name = kind_only("z-name", 0);
    by_name.resource_selectors[0].name = "nginx".into();
    for (name, spec) in [
        ("a-kind", kind_only("a-kind", 0)),
        ("b-label", by_label),
        ("z-name", by_name),
        ("high", kind_only("high", 10)),
    ] {
        accepted(client.create_propagation_policy(create_pp(pp(name, spec)))).await;
    }
    accepted(client.create_workload(create_workload(nginx_workload()))).await;
    // the highest priority wins over specificity
    let b = claimed_by("high").await;
    assert_eq!(
        testing::affinity_names(b.spec.unwrap().placement),
        ["high-cluster"]
    );
    // then, one deletion at a time: a name is more specific than a label selector, which is
    // more specific than kind-only; namespaced policies win over cluster-wide ones
    for (delete, next) in [
        ("high", "z-name"),
        ("z-name", "b-label"),
        ("b-label", "a-kind"),
        ("a-kind", "all-deployments"),
    ] {
        accepted(
            client.delete_propagation_policy(v1::DeletePropagationPolicyRequest {
                namespace: "default".into(),
                name: delete.into(),
                preconditions: None,
            }),
        )
        .await;
        claimed_by(next).await;
    }
    let b = binding(&mut client).await.unwrap();
    assert!(
        !b.metadata
            .as_ref()
            .unwrap()
            .labels
            .contains_key(LABEL_POLICY_NAME),
        "no stale namespaced policy label"
    );
    // no policy at all: the binding stays, detached (PL-1), until the workload goes (PL-2)
    accepted(
        client.delete_cluster_propagation_policy(v1::DeleteClusterPropagationPolicyRequest {
            name: "all-deployments".into(),
            preconditions: None,
        }),
    )
    .await;
    let detached = claimed_by("").await;
    assert_eq!(
        testing::affinity_names(detached.spec.unwrap().placement),
        ["cpp-cluster"],
        "the last placement is kept"
    );
    accepted(client.delete_workload(flotilla_api::testing::delete_nginx())).await;
    binding_gone(&client, "the binding deleted with its workload").await;
    api.stop().await;
}

/// A MemStore for detector tests, and the api's admission.
fn detector_store() -> (Typed, flotilla_api::admission::Admission) {
    let store: StoreRef = Arc::new(MemStore::new());
    (Typed::new(store), testing::config().admission)
}

/// `policy`, admitted and stored.
async fn create_policy(
    typed: &Typed,
    admission: &flotilla_api::admission::Admission,
    policy: v1::PropagationPolicy,
) -> v1::PropagationPolicy {
    typed
        .create(
            admission
                .propagation_policy(Some(policy), None, false)
                .unwrap(),
            None,
        )
        .await
        .unwrap()
}

/// The seed workload's binding as stored (it must exist).
async fn stored_binding(typed: &Typed) -> v1::ResourceBinding {
    typed
        .get("bindings/default/nginx-deployment")
        .await
        .unwrap()
        .expect("the binding exists")
}

/// The seed workload stored beside `policy`, the detector's caches holding both (and no
/// binding yet), and a detector context over `typed`.
async fn detector_on(
    typed: &Typed,
    admission: &flotilla_api::admission::Admission,
    policy: &v1::PropagationPolicy,
) -> (v1::Workload, CacheWriters, Arc<Ctx>) {
    let workload = typed
        .create(admission.workload(Some(nginx_workload())).unwrap(), None)
        .await
        .unwrap();
    let mut writers = CacheWriters::new();
    apply_list(
        &mut writers.policies,
        vec![(policy.key(), policy.resource_version(), policy.clone())],
    );
    apply_list(
        &mut writers.workloads,
        vec![(
            workload.key(),
            workload.resource_version(),
            workload.clone(),
        )],
    );
    apply_list(&mut writers.cluster_policies, vec![]);
    apply_list(&mut writers.bindings, vec![]);
    let ctx = Arc::new(Ctx::new(
        writers.caches(),
        typed.clone(),
        BatchWriter::spawn(typed.store().clone(), flotilla_runtime::Shutdown::new()),
        Recorder::disabled("test"),
    ));
    (workload, writers, ctx)
}

/// PL-3: a workload claimed by a low-priority policy keeps it when a higher-priority policy
/// that also matches is created (Karmada's `preemption: Never`): the reconcile that follows
/// the new policy writes nothing.
/// The seed workload claimed by the priority-1 policy `low`, the detector's caches holding
/// the policy, the workload and the binding.
struct Claimed {
    typed: Typed,
    admission: flotilla_api::admission::Admission,
    low: v1::PropagationPolicy,
    workload: v1::Workload,
    writers: CacheWriters,
    ctx: Arc<Ctx>,
    claimed: v1::ResourceBinding,
}

async fn claimed_by_low() -> Claimed {
    let (typed, admission) = detector_store();
    let low = create_policy(&typed, &admission, pp("low", kind_only("low", 1))).await;
    let (workload, mut writers, ctx) = detector_on(&typed, &admission, &low).await;
    reconcile(workload.key(), ctx.clone()).await.unwrap();
    let claimed: v1::ResourceBinding = stored_binding(&typed).await;
    assert_eq!(policy_label(&claimed), "low");
    apply_list(
        &mut writers.bindings,
        vec![(claimed.key(), claimed.resource_version(), claimed.clone())],
    );
    Claimed {
        typed,
        admission,
        low,
        workload,
        writers,
        ctx,
        claimed,
    }
}

#[tokio::test]
async fn detector_pl3_a_claimed_workload_stays_with_its_policy() {
    let Claimed {
        typed,
        admission,
        low,
        workload,
        mut writers,
        ctx,
        claimed,
    } = claimed_by_low().await;
    // a priority-50 policy naming the workload arrives
    let mut by_name = kind_only("high", 50);
    by_name.resource_selectors[0].name = "nginx".into();
    let high = create_policy(&typed, &admission, pp("high", by_name)).await;
    apply_stored(&mut writers.policies, &high);
    reconcile(workload.key(), ctx.clone()).await.unwrap();
    let after: v1::ResourceBinding = stored_binding(&typed).await;
    assert_eq!(policy_label(&after), "low", "not preempted");
    assert_eq!(
        after.resource_version(),
        claimed.resource_version(),
        "nothing written"
    );
    // once the claiming policy is gone, the other one claims it (PL-1, then PL-4)
    typed
        .delete(&low.key(), Some(low.resource_version()))
        .await
        .unwrap();
    writers.policies.apply_watcher_event(&Event::Delete {
        key: low.key(),
        revision: low.resource_version() + 10,
    });
    reconcile(workload.key(), ctx).await.unwrap();
    let taken: v1::ResourceBinding = stored_binding(&typed).await;
    assert_eq!(policy_label(&taken), "high");
}

#[tokio::test]
async fn detector_pl3_preemption_always_takes_a_claimed_workload() {
    let Claimed {
        typed,
        admission,
        low: _,
        workload,
        mut writers,
        ctx,
        claimed: _,
    } = claimed_by_low().await;
    // a priority-50 policy with `preemption: Always` arrives: it takes the workload
    let mut preempting = kind_only("high", 50);
    preempting.preemption = v1::Preemption::Always as i32;
    let high = create_policy(&typed, &admission, pp("high", preempting)).await;
    apply_stored(&mut writers.policies, &high);
    reconcile(workload.key(), ctx).await.unwrap();
    let taken: v1::ResourceBinding = stored_binding(&typed).await;
    assert_eq!(policy_label(&taken), "high", "preempted");
    assert_eq!(
        testing::affinity_names(taken.spec.unwrap().placement),
        ["high-cluster"],
        "the new policy's placement"
    );
}

/// Tells the cache `writer` feeds that `object` was written, as its watch would.
fn apply_stored<K: Stored + Clone + Send + Sync + 'static>(
    writer: &mut flotilla_runtime::Writer<K>,
    object: &K,
) {
    writer.apply_watcher_event(&Event::Apply(Object {
        key: object.key(),
        revision: object.resource_version(),
        value: Arc::new(object.clone()),
    }));
}

fn apply_list<K: Send + Sync + 'static>(
    writer: &mut flotilla_runtime::Writer<K>,
    objects: Vec<(String, i64, K)>,
) {
    writer.apply_watcher_event(&Event::Init { revision: 1 });
    for (key, revision, value) in objects {
        writer.apply_watcher_event(&Event::InitApply(Object {
            key,
            revision,
            value: Arc::new(value),
        }));
    }
    writer.apply_watcher_event(&Event::InitDone { revision: 1 });
}

/// A concurrent writer changes the binding between the detector's read (a stale cache)
/// and its write: the CAS fails, the detector re-reads and re-decides, and neither update
/// is lost (I5).
#[tokio::test]
async fn detector_rereads_after_a_conflict_and_loses_no_update() {
    let (typed, admission) = detector_store();
    let policy = create_policy(&typed, &admission, seed_policy()).await;
    let (workload, mut writers, ctx) = detector_on(&typed, &admission, &policy).await;
    reconcile(workload.key(), ctx.clone()).await.unwrap();
    let b1: v1::ResourceBinding = stored_binding(&typed).await;
    apply_list(
        &mut writers.bindings,
        vec![(b1.key(), b1.resource_version(), b1.clone())],
    );
    // the scheduler writes spec.clusters; the detector's cache still has b1
    let mut b2 = b1.clone();
    b2.spec.as_mut().unwrap().clusters = v1::TargetCluster::from_pairs(&[("member1", 3)]);
    typed.update(&b1, b2).await.unwrap();
    // the policy changes (store and cache)
    let mut changed = policy.clone();
    changed
        .spec
        .as_mut()
        .unwrap()
        .placement
        .as_mut()
        .unwrap()
        .cluster_affinity
        .as_mut()
        .unwrap()
        .cluster_names
        .push("member3".into());
    let changed = typed.update(&policy, changed).await.unwrap();
    apply_stored(&mut writers.policies, &changed);
    reconcile(workload.key(), ctx).await.unwrap();
    let b3: v1::ResourceBinding = stored_binding(&typed).await;
    let spec = b3.spec.unwrap();
    assert_eq!(spec.clusters.len(), 1, "the scheduler's write survives");
    assert_eq!(
        testing::affinity_names(spec.placement),
        ["member1", "member2", "member3"],
        "the detector's write lands"
    );
}

/// The first static weight of a binding's placement.
fn first_weight(b: &v1::ResourceBinding) -> i64 {
    let mut placement = b.spec.clone().unwrap().placement.unwrap();
    static_weights(&mut placement)[0].weight
}

/// PL-6: a Lazy policy's change waits for each template's next change; a policy without it
/// reaches its templates at once. The non-Lazy policy is updated after the Lazy one, on the
/// same watch, so once its binding shows the change the detector has seen both.
#[tokio::test]
async fn detector_pl6_a_lazy_policy_change_waits_for_the_template_to_change() {
    let (_store, api, mut client) = setup().await;
    let mut lazy = seed_policy();
    lazy.spec.as_mut().unwrap().activation_preference = v1::ActivationPreference::Lazy as i32;
    let lazy = accepted(client.create_propagation_policy(create_pp(lazy))).await;
    let mut eager = seed_policy();
    eager.metadata.as_mut().unwrap().name = "web-propagation".into();
    eager.spec.as_mut().unwrap().resource_selectors[0].name = "web".into();
    let eager = accepted(client.create_propagation_policy(create_pp(eager))).await;
    let nginx = accepted(client.create_workload(create_workload(nginx_workload()))).await;
    let web = v1::Workload {
        manifest: NGINX_MANIFEST.replace(
            "\"name\": \"nginx\", \"namespace\"",
            "\"name\": \"web\", \"namespace\"",
        ),
        ..Default::default()
    };
    accepted(client.create_workload(create_workload(web))).await;
    let reader = client.clone();
    let named = |name: &'static str, weight: i64| {
        let client = reader.clone();
        async move {
            eventually(&format!("{name} with weight {weight}"), || {
                let mut c = client.clone();
                async move {
                    c.get_resource_binding(v1::GetResourceBindingRequest {
                        namespace: "default".into(),
                        name: format!("{name}-deployment"),
                    })
                    .await
                    .ok()
                    .map(Response::into_inner)
                    .filter(|b| first_weight(b) == weight)
                }
            })
            .await
        }
    };
    let before = named("nginx", 1).await;
    named("web", 1).await;

    for policy in [lazy, eager] {
        let mut changed = policy;
        static_weights(changed.spec.as_mut().unwrap().placement.as_mut().unwrap())[0].weight = 5;
        accepted(
            client.update_propagation_policy(v1::UpdatePropagationPolicyRequest {
                propagation_policy: Some(changed),
            }),
        )
        .await;
    }
    named("web", 5).await;
    let held = named("nginx", 1).await;
    assert_eq!(
        held.resource_version(),
        before.resource_version(),
        "the Lazy policy's binding is untouched"
    );

    // the template changes: now the policy as it is reaches it
    scale(&mut client, &nginx, 4).await;
    let b = named("nginx", 5).await;
    assert_eq!(b.spec.unwrap().replicas, 4);
    api.stop().await;
}
