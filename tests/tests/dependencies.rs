//! Dependencies and cluster-scoped templates through a failover, on real processes and etcd
//! (DEP-1..DEP-3, CR-2..CR-4), with the whole history recorded and checked.
//!
//! Deployment `web` (3 replicas, Divided + Aggregated: all on member1, whose capacity beats
//! member2's) refers to ConfigMap `web-config` (envFrom) and Secret `web-secret` (a volume);
//! its policy says `propagateDeps: true`. A ClusterRole `web-reader` is claimed by a
//! ClusterPropagationPolicy for both members. member1 turns unhealthy (reachable, `/readyz`
//! 500): the not-ready NoExecute taint evicts both bindings from member1 with graceful tasks.
//!
//! Checked:
//! - before: attached bindings for the ConfigMap and the Secret name `web-deployment` with
//!   member1; their Works exist on member1; the ClusterRole has a ClusterResourceBinding
//!   (empty namespace) whose Works carry no `metadata.namespace`;
//! - after: web runs on member2; the dependencies' `requiredBy` names member2 only, their
//!   Works on member1 are marked for deletion and those on member2 are live; the
//!   ClusterResourceBinding was evicted from member1 like any binding (CR-3);
//! - on every revision of the history: a dependency's Work on a cluster is never marked for
//!   deletion while `web`'s binding still has that cluster as a target or an eviction task
//!   (the old copy keeps its ConfigMap and Secret as long as it may run), plus the general
//!   invariants of the fault suite (`flotilla_tests::history`).

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use flotilla_proto::v1;
use flotilla_tests::history::Change;
use flotilla_tests::{
    ApiClient, EtcdServer, Stack, Timers, binding_healthy, divided_over_members, eventually,
    get_binding, list_works, set_fault, targets, tasks, work_cluster, work_deleting,
};

const T: Duration = Duration::from_secs(45);

const WEB: &str = r#"{"apiVersion":"apps/v1","kind":"Deployment","metadata":{"name":"web","namespace":"default","labels":{"app":"web"}},
 "spec":{"replicas":3,"selector":{"matchLabels":{"app":"web"}},"template":{"metadata":{"labels":{"app":"web"}},
 "spec":{"containers":[{"name":"web","image":"nginx:1.27","envFrom":[{"configMapRef":{"name":"web-config"}}],
 "volumeMounts":[{"name":"tls","mountPath":"/tls"}]}],"volumes":[{"name":"tls","secret":{"secretName":"web-secret"}}]}}}}"#;
const CONFIG: &str = r#"{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"web-config","namespace":"default"},"data":{"MODE":"prod"}}"#;
const SECRET: &str = r#"{"apiVersion":"v1","kind":"Secret","metadata":{"name":"web-secret","namespace":"default"},"data":{"tls.key":"eA=="}}"#;
const ROLE: &str = r#"{"apiVersion":"rbac.authorization.k8s.io/v1","kind":"ClusterRole","metadata":{"name":"web-reader"},"rules":[{"apiGroups":[""],"resources":["configmaps"],"verbs":["get"]}]}"#;

const PARENT: &str = "bindings/default/web-deployment";
const DEPENDENCIES: [&str; 2] = [
    "bindings/default/web-config-configmap",
    "bindings/default/web-secret-secret",
];
const CRB: &str = "bindings//web-reader-clusterrole";

fn placement(aggregated: bool) -> v1::Placement {
    divided_over_members(if aggregated {
        v1::ReplicaDivisionPreference::Aggregated
    } else {
        v1::ReplicaDivisionPreference::Weighted
    })
}

async fn apply(api: &ApiClient, objects: Vec<v1::apply_object::Object>) {
    api.clone()
        .apply(v1::ApplyRequest {
            objects: objects
                .into_iter()
                .map(|o| v1::ApplyObject { object: Some(o) })
                .collect(),
            dry_run: false,
            ..Default::default()
        })
        .await
        .expect("apply");
}

fn workload(manifest: &str) -> v1::apply_object::Object {
    v1::apply_object::Object::Workload(v1::Workload {
        manifest: manifest.into(),
        ..Default::default()
    })
}

async fn binding_at(api: &ApiClient, key: &str) -> Option<v1::ResourceBinding> {
    let (ns, name) = key
        .strip_prefix("bindings/")
        .and_then(|k| k.split_once('/'))
        .expect("a binding key");
    get_binding(api, ns, name).await
}

/// The clusters of a binding's `requiredBy` entries.
fn required(b: &v1::ResourceBinding) -> Vec<String> {
    let set: BTreeSet<String> = b
        .spec
        .iter()
        .flat_map(|s| &s.required_by)
        .flat_map(|r| r.clusters.iter().map(|c| c.name.clone()))
        .collect();
    set.into_iter().collect()
}

/// `(cluster, marked for deletion)` of every Work of the binding `key`.
async fn works_of(api: &ApiClient, key: &str) -> Vec<(String, bool)> {
    let mut out: Vec<(String, bool)> = list_works(api)
        .await
        .iter()
        .filter(|w| {
            w.spec
                .as_ref()
                .and_then(|s| s.binding.as_ref())
                .is_some_and(|b| format!("bindings/{}/{}", b.namespace, b.name) == key)
        })
        .map(|w| (work_cluster(w).to_owned(), work_deleting(w)))
        .collect();
    out.sort();
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dependencies_and_a_cluster_resource_binding_follow_a_failover() {
    let (mut stack, recorder) =
        Stack::start_recorded(EtcdServer::start().await, Timers::fast()).await;
    let api = stack.ready_unequal_members(T).await;

    let mut web_policy = flotilla_tests::nginx_policy(placement(true), None);
    {
        let spec = web_policy.spec.as_mut().unwrap();
        spec.resource_selectors[0].name = "web".into();
        spec.propagate_deps = true;
        web_policy.metadata.as_mut().unwrap().name = "web".into();
    }
    let mut role_policy_spec = web_policy.spec.clone().unwrap();
    role_policy_spec.propagate_deps = false;
    role_policy_spec.placement = Some(placement(false));
    role_policy_spec.resource_selectors = vec![v1::ResourceSelector {
        api_version: "rbac.authorization.k8s.io/v1".into(),
        kind: "ClusterRole".into(),
        ..Default::default()
    }];
    apply(
        &api,
        vec![
            workload(CONFIG),
            workload(SECRET),
            workload(WEB),
            workload(ROLE),
            v1::apply_object::Object::PropagationPolicy(web_policy),
            v1::apply_object::Object::ClusterPropagationPolicy(v1::ClusterPropagationPolicy {
                metadata: Some(v1::ObjectMeta {
                    name: "cluster-roles".into(),
                    ..Default::default()
                }),
                spec: Some(role_policy_spec),
            }),
        ],
    )
    .await;

    // Before the fault: web on member1, its dependencies with it, the ClusterRole on both.
    eventually(T, "web {member1:3} healthy", || async {
        let b = binding_at(&api, PARENT).await?;
        (targets(&b) == [("member1".into(), 3)] && binding_healthy(&b)).then_some(())
    })
    .await;
    for key in DEPENDENCIES {
        eventually(
            T,
            &format!("{key} required on member1, its Work there"),
            || async {
                let b = binding_at(&api, key).await?;
                let placed = b.spec.as_ref()?.placement.is_none();
                (placed
                    && required(&b) == ["member1"]
                    && works_of(&api, key).await == [("member1".to_owned(), false)])
                .then_some(())
            },
        )
        .await;
    }
    let crb = eventually(
        T,
        "the ClusterRole's ClusterResourceBinding on both",
        || async {
            let b = binding_at(&api, CRB).await?;
            (flotilla_tests::target_names(&b) == ["member1", "member2"]
                && works_of(&api, CRB).await.len() == 2)
                .then_some(b)
        },
    )
    .await;
    assert_eq!(
        crb.metadata.as_ref().unwrap().namespace,
        "",
        "cluster-scoped"
    );
    for w in list_works(&api).await.iter().filter(|w| {
        w.spec
            .as_ref()
            .and_then(|s| s.binding.as_ref())
            .is_some_and(|b| b.name == "web-reader-clusterrole")
    }) {
        assert_eq!(w.metadata.as_ref().unwrap().namespace, "");
        let manifest = &w.spec.as_ref().unwrap().manifest;
        assert!(!manifest.contains("\"namespace\""), "CR-4: {manifest}");
    }

    // The fault: member1 reachable but unhealthy → not-ready NoExecute taint → evictions.
    set_fault(&stack.members["member1"], v1::FaultMode::Unhealthy).await;
    eventually(T, "web {member2:3} healthy, no task left", || async {
        let b = binding_at(&api, PARENT).await?;
        (targets(&b) == [("member2".into(), 3)] && binding_healthy(&b) && tasks(&b).is_empty())
            .then_some(())
    })
    .await;
    for key in DEPENDENCIES {
        eventually(T, &format!("{key} follows web to member2"), || async {
            let b = binding_at(&api, key).await?;
            // member1 is not Ready: its Works are marked, and go once it is back (WE-6.3)
            (required(&b) == ["member2"]
                && works_of(&api, key).await
                    == [("member1".to_owned(), true), ("member2".to_owned(), false)])
            .then_some(())
        })
        .await;
    }
    eventually(
        T,
        "the ClusterResourceBinding evicted from member1",
        || async {
            let b = binding_at(&api, CRB).await?;
            (flotilla_tests::target_names(&b) == ["member2"]).then_some(())
        },
    )
    .await;

    // member1 recovers: the marked Works are removed from it.
    set_fault(&stack.members["member1"], v1::FaultMode::Healthy).await;
    for key in DEPENDENCIES {
        eventually(T, &format!("{key}'s Work on member1 gone"), || async {
            (works_of(&api, key).await == [("member2".to_owned(), false)]).then_some(())
        })
        .await;
    }
    let settled = tokio::time::timeout(T, async {
        loop {
            let b = binding_at(&api, CRB)
                .await
                .expect("the ClusterResourceBinding");
            let want: Vec<(String, bool)> = flotilla_tests::target_names(&b)
                .into_iter()
                .map(|c| (c, false))
                .collect();
            let works = works_of(&api, CRB).await;
            if tasks(&b).is_empty() && works == want {
                return;
            }
            eprintln!(
                "CRB targets {:?} tasks {:?} works {works:?}",
                targets(&b),
                tasks(&b)
            );
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
    })
    .await;
    assert!(
        settled.is_ok(),
        "the ClusterResourceBinding's Works never matched its targets"
    );
    let history = stack
        .verdict_member1_flapped(recorder, "dependencies", true)
        .await;

    // The dependency rule, on every revision: a dependency's Work on a cluster is not marked
    // while the parent still has that cluster as a target or an eviction task.
    let mut parent_clusters: BTreeSet<String> = BTreeSet::new();
    let mut marked: BTreeMap<String, bool> = BTreeMap::new();
    let mut violations = Vec::new();
    for e in &history {
        match &e.change {
            Change::Binding(b) if e.key.ends_with(PARENT) => {
                parent_clusters = targets(b)
                    .into_iter()
                    .map(|(c, _)| c)
                    .chain(tasks(b))
                    .collect();
            }
            Change::Work(w) => {
                let dependency = w
                    .spec
                    .as_ref()
                    .and_then(|s| s.binding.as_ref())
                    .is_some_and(|b| {
                        DEPENDENCIES
                            .contains(&format!("bindings/{}/{}", b.namespace, b.name).as_str())
                    });
                let was = marked
                    .insert(e.key.clone(), work_deleting(w))
                    .unwrap_or(false);
                if dependency
                    && work_deleting(w)
                    && !was
                    && parent_clusters.contains(work_cluster(w))
                {
                    violations.push(format!(
                        "revision {}: {} marked while web still has {} ({parent_clusters:?})",
                        e.revision,
                        e.key,
                        work_cluster(w)
                    ));
                }
            }
            _ => {}
        }
    }
    if !violations.is_empty() {
        stack.dump_logs();
    }
    assert!(violations.is_empty(), "{violations:#?}");
}
