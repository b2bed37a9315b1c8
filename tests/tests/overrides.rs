//! OverridePolicy through a failover, on real processes and etcd, the policies applied from
//! Karmada YAML with the real `flotilla` CLI (OV-1..OV-5), the whole history recorded.
//!
//! Deployment `web` (3 replicas, Divided + Aggregated: all on member1, whose capacity beats
//! member2's) has an OverridePolicy with one rule per cluster: member1 gets the `eu` registry
//! and `--region=eu`, member2 the `us` registry and `--region=us`. member1 turns unhealthy:
//! the failover moves `web` to member2.
//!
//! Checked:
//! - before: the Work on member1 carries member1's overrides and the applied-overrides record;
//! - after: the Work on member2 carries member2's overrides, not member1's;
//! - a policy change re-renders the Work; a rule that cannot apply (a `replace` of a missing
//!   path, after a labelsOverrider of the same rule) leaves the Work exactly as it was and the
//!   binding says why (`OverridesApplied=False`); deleting the policy renders the plain
//!   template again;
//! - on every revision of the history: no Work on member2 ever carried member1's registry or
//!   the other way round, and no Work ever carried the failing rule's label (never
//!   half-patched); plus the general invariants of the fault suite.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use flotilla_proto::v1;
use flotilla_tests::history::Change;
use flotilla_tests::{
    ApiClient, EtcdServer, Stack, Timers, binding_condition, binding_healthy, eventually,
    get_binding, list_works, set_fault, targets, tasks, work_cluster, work_deleting,
};

const T: Duration = Duration::from_secs(45);

/// The Deployment `web`, up to the `---` before its PropagationPolicy (see [`app`]).
const DEPLOYMENT: &str = r#"
apiVersion: apps/v1
kind: Deployment
metadata:
  name: web
  namespace: default
  labels: {app: web}
spec:
  replicas: 3
  selector:
    matchLabels: {app: web}
  template:
    metadata:
      labels: {app: web}
    spec:
      containers:
        - name: web
          image: docker.io/library/nginx:1.27
          args: ["--port=80"]
---
"#;

/// The placement of the PropagationPolicy `web`: Aggregated over member1 and member2.
const PLACEMENT: &str = r#"  placement:
    clusterAffinity:
      clusterNames: [member1, member2]
    replicaScheduling:
      replicaSchedulingType: Divided
      replicaDivisionPreference: Aggregated
"#;

/// The Deployment `web` and its PropagationPolicy.
fn app() -> String {
    DEPLOYMENT.to_owned() + &web_policy("PropagationPolicy", "web", PLACEMENT)
}

/// A Karmada policy `default/<name>` of `kind` selecting the Deployment `web`; `rest` follows
/// its resourceSelectors.
fn web_policy(kind: &str, name: &str, rest: &str) -> String {
    format!(
        r#"apiVersion: policy.karmada.io/v1alpha1
kind: {kind}
metadata:
  name: {name}
  namespace: default
spec:
  resourceSelectors:
    - apiVersion: apps/v1
      kind: Deployment
      name: web
{rest}"#
    )
}

/// Karmada's own shape, unchanged: one rule per region's cluster.
fn override_policy(us_tag: &str, failing_rule: bool) -> String {
    let failing = if failing_rule {
        r#"
    - targetCluster:
        clusterNames: [member2]
      overriders:
        labelsOverrider:
          - operator: add
            value: {half: patched}
        plaintext:
          - path: /spec/nonexistent
            operator: replace
            value: 1"#
    } else {
        ""
    };
    let rules = format!(
        r#"  overrideRules:
    - targetCluster:
        clusterNames: [member1]
      overriders:
        imageOverrider:
          - component: Registry
            operator: replace
            value: eu.registry.example.com
        argsOverrider:
          - containerName: web
            operator: add
            value: ["--region=eu"]
    - targetCluster:
        clusterNames: [member2]
      overriders:
        imageOverrider:
          - component: Registry
            operator: replace
            value: us.registry.example.com
          - component: Tag
            operator: replace
            value: "{us_tag}"
        argsOverrider:
          - containerName: web
            operator: add
            value: ["--region=us"]{failing}
"#
    );
    format!("\n{}", web_policy("OverridePolicy", "regional", &rules))
}

/// The real CLI against the stack's api.
async fn flotilla(stack: &Stack, args: &[&str]) -> String {
    stack.cli_ok(args).await
}

/// `flotilla explain binding` of `web`, the dry-run services named by flag.
async fn explain(stack: &Stack) -> String {
    let flags: Vec<String> = [
        "scheduler",
        "taint-manager",
        "graceful-eviction",
        "work-executor",
        "cluster-health",
    ]
    .iter()
    .flat_map(|s| [format!("--{s}"), format!("http://{}", stack.addrs[*s])])
    .collect();
    let mut args = vec!["explain", "binding", "default/web-deployment"];
    args.extend(flags.iter().map(String::as_str));
    flotilla(stack, &args).await
}

async fn apply_yaml(stack: &Stack, dir: &std::path::Path, name: &str, yaml: &str) -> String {
    let path = dir.join(name);
    std::fs::write(&path, yaml).unwrap();
    flotilla(stack, &["apply", "-f", path.to_str().unwrap()]).await
}

/// `flotilla apply` of [`override_policy`] with `tag` (and the rule that cannot apply when
/// `broken`), always as `op.yaml`.
async fn apply_override(stack: &Stack, dir: &std::path::Path, tag: &str, broken: bool) -> String {
    apply_yaml(stack, dir, "op.yaml", &override_policy(tag, broken)).await
}

/// The live (not deleting) Work of `web` on `cluster`: (container image, args, annotations,
/// generation; status writes do not change it).
async fn web_work(
    api: &ApiClient,
    cluster: &str,
) -> Option<(
    String,
    Vec<String>,
    std::collections::BTreeMap<String, String>,
    i64,
)> {
    let work = list_works(api).await.into_iter().find(|w| {
        work_cluster(w) == cluster
            && !work_deleting(w)
            && w.spec
                .as_ref()
                .and_then(|s| s.binding.as_ref())
                .is_some_and(|b| b.name == "web-deployment")
    })?;
    let manifest: serde_json::Value = serde_json::from_str(&work.spec.as_ref()?.manifest).ok()?;
    let container = &manifest["spec"]["template"]["spec"]["containers"][0];
    let args = container["args"]
        .as_array()?
        .iter()
        .filter_map(|a| a.as_str().map(str::to_owned))
        .collect();
    let meta = work.metadata?;
    Some((
        container["image"].as_str()?.to_owned(),
        args,
        meta.annotations,
        meta.generation,
    ))
}

const APPLIED: &str = "policy.karmada.io/applied-overrides";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn override_policy_follows_a_failover_per_cluster() {
    let (mut stack, recorder) =
        Stack::start_recorded(EtcdServer::start().await, Timers::fast()).await;
    let api = stack.ready_unequal_members(T).await;
    let dir = tempfile::tempdir().unwrap();
    apply_yaml(&stack, dir.path(), "app.yaml", &app()).await;
    let out = apply_override(&stack, dir.path(), "1.27", false).await;
    assert!(out.contains("overridepolicy/regional created"), "{out}");

    // before the fault: member1's overrides on member1's Work
    let (image, args, annotations, _) =
        eventually(T, "web on member1 with eu overrides", || async {
            let b = get_binding(&api, "default", "web-deployment").await?;
            let w = web_work(&api, "member1").await?;
            (targets(&b) == [("member1".into(), 3)]
                && binding_healthy(&b)
                && w.0.starts_with("eu."))
            .then_some(w)
        })
        .await;
    assert_eq!(image, "eu.registry.example.com/library/nginx:1.27");
    assert_eq!(args, ["--port=80", "--region=eu"]);
    let record: serde_json::Value = serde_json::from_str(&annotations[APPLIED]).unwrap();
    assert_eq!(record[0]["policyName"], "regional");
    assert_eq!(
        record[0]["overriders"]["imageOverrider"][0]["value"],
        "eu.registry.example.com"
    );
    let listed = flotilla(&stack, &["get", "op"]).await;
    assert!(
        listed.contains("regional") && listed.contains("member1:image,args"),
        "{listed}"
    );

    // the failover: member2's Work has member2's overrides
    set_fault(&stack.members["member1"], v1::FaultMode::Unhealthy).await;
    let (image, args, ..) = eventually(T, "web on member2 with us overrides", || async {
        let b = get_binding(&api, "default", "web-deployment").await?;
        let w = web_work(&api, "member2").await?;
        (targets(&b) == [("member2".into(), 3)] && binding_healthy(&b) && tasks(&b).is_empty())
            .then_some(w)
    })
    .await;
    assert_eq!(image, "us.registry.example.com/library/nginx:1.27");
    assert_eq!(
        args,
        ["--port=80", "--region=us"],
        "member2's args, not member1's"
    );

    // a policy change re-renders the Work
    apply_override(&stack, dir.path(), "1.28", false).await;
    let (.., generation) = eventually(T, "member2's Work re-rendered with tag 1.28", || async {
        let w = web_work(&api, "member2").await?;
        (w.0 == "us.registry.example.com/library/nginx:1.28").then_some(w)
    })
    .await;

    // a rule that cannot apply: the Work stays as it was, the binding says why
    apply_override(&stack, dir.path(), "1.29", true).await;
    let condition = eventually(T, "OverridesApplied=False on the binding", || async {
        let b = get_binding(&api, "default", "web-deployment").await?;
        let c = binding_condition(&b, "OverridesApplied")?.clone();
        (c.status == v1::ConditionStatus::False as i32).then_some(c)
    })
    .await;
    assert!(
        condition.message.contains("member2")
            && condition
                .message
                .contains("OverridePolicy default/regional")
            && condition.message.contains("/spec/nonexistent"),
        "{}",
        condition.message
    );
    let (image, _, _, generation_after) = web_work(&api, "member2").await.unwrap();
    assert_eq!(
        (image.as_str(), generation_after),
        ("us.registry.example.com/library/nginx:1.28", generation),
        "the Work is left exactly as it was"
    );
    let explained = explain(&stack).await;
    assert!(
        explained.contains("member2: cannot apply: OverridePolicy default/regional"),
        "{explained}"
    );
    let described = flotilla(&stack, &["describe", "rb", "web-deployment"]).await;
    assert!(described.contains("OverridesApplied"), "{described}");

    // deleting the policy renders the plain template again, and the binding recovers
    let out = flotilla(&stack, &["delete", "op", "regional"]).await;
    assert!(out.contains("deleted"), "{out}");
    let (_, args, annotations, _) = eventually(T, "member2's Work without overrides", || async {
        let w = web_work(&api, "member2").await?;
        (w.0 == "docker.io/library/nginx:1.27").then_some(w)
    })
    .await;
    assert_eq!(args, ["--port=80"]);
    assert!(!annotations.contains_key(APPLIED), "{annotations:?}");
    eventually(T, "OverridesApplied=True again", || async {
        let b = get_binding(&api, "default", "web-deployment").await?;
        let c = binding_condition(&b, "OverridesApplied")?;
        (c.status == v1::ConditionStatus::True as i32).then_some(())
    })
    .await;
    set_fault(&stack.members["member1"], v1::FaultMode::Healthy).await;

    let history = stack
        .verdict_member1_flapped(recorder, "overrides", false)
        .await;
    let mut violations = Vec::new();
    for e in &history {
        let Change::Work(w) = &e.change else { continue };
        let manifest = &w.spec.as_ref().unwrap().manifest;
        let cluster = work_cluster(w);
        if cluster == "member2"
            && (manifest.contains("eu.registry") || manifest.contains("region=eu"))
        {
            violations.push(format!(
                "rev {}: member2's Work carries member1's overrides",
                e.revision
            ));
        }
        if cluster == "member1"
            && (manifest.contains("us.registry") || manifest.contains("region=us"))
        {
            violations.push(format!(
                "rev {}: member1's Work carries member2's overrides",
                e.revision
            ));
        }
        if manifest.contains("\"half\"") {
            violations.push(format!(
                "rev {}: a half-patched manifest was written",
                e.revision
            ));
        }
    }
    assert!(violations.is_empty(), "{violations:#?}");
}
