//! Tests of the manifest reader: Karmada's documented YAML applies unchanged; bad documents
//! are reported with their index, kind/name, field and reason.

use super::*;

fn opts() -> ReadOptions {
    ReadOptions {
        namespace: "default".into(),
        namespace_explicit: false,
    }
}

fn read_ok(text: &str) -> Vec<Document> {
    let parsed = read("test.yaml", text, &opts());
    assert!(
        parsed.errors.is_empty(),
        "unexpected errors: {:#?}",
        parsed.errors
    );
    parsed.documents
}

/// Asserts that `text` contains every one of `parts`, naming the first one missing.
#[track_caller]
fn assert_has(text: &str, parts: &[&str]) {
    for part in parts {
        assert!(text.contains(part), "missing {part:?} in:\n{text}");
    }
}

/// The spec of the PropagationPolicy `doc` holds.
fn pp_spec(doc: &Document) -> &v1::PropagationSpec {
    let Object::PropagationPolicy(p) = &doc.object else {
        panic!("a PropagationPolicy: {:?}", doc.object)
    };
    p.spec.as_ref().unwrap()
}

/// The failover of a PropagationPolicy with this `spec` (YAML indented by two spaces).
fn failover_of(spec: &str) -> v1::FailoverBehavior {
    let docs = read_ok(&format!(
        "apiVersion: policy.karmada.io/v1alpha1\nkind: PropagationPolicy\nmetadata:\n  \
         name: failover\nspec:\n{spec}"
    ));
    pp_spec(&docs[0]).failover.clone().unwrap()
}

fn errors(text: &str) -> Vec<String> {
    let parsed = read("test.yaml", text, &opts());
    parsed.errors.iter().map(ToString::to_string).collect()
}

/// Karmada docs, failover-analysis.md, "Divided schedule type" (the seed scenario).
const DIVIDED: &str = include_str!("../../testdata/karmada-divided.yaml");

#[test]
fn karmada_divided_example_reads_as_the_seed_objects() {
    let docs = read_ok(DIVIDED);
    assert_eq!(docs.len(), 2);
    let Object::Workload(w) = &docs[0].object else {
        panic!("document 1 is a workload: {:?}", docs[0].object);
    };
    assert_eq!(
        (w.api_version.as_str(), w.kind.as_str()),
        ("apps/v1", "Deployment")
    );
    assert_eq!(docs[0].object.id(), ("default".into(), "nginx".into()));
    let manifest: serde_json::Value = serde_json::from_str(&w.manifest).unwrap();
    assert_eq!(manifest["spec"]["replicas"], 3);
    assert_eq!(manifest["metadata"]["namespace"], "default");
    let Object::PropagationPolicy(p) = &docs[1].object else {
        panic!("document 2 is a policy");
    };
    assert_eq!(
        docs[1].object.id(),
        ("default".into(), "nginx-propagation".into())
    );
    let placement = p.spec.as_ref().unwrap().placement.as_ref().unwrap();
    let rs = placement.replica_scheduling.as_ref().unwrap();
    assert_eq!(
        rs.replica_scheduling_type,
        v1::ReplicaSchedulingType::Divided as i32
    );
    let weights: Vec<(Vec<String>, i64)> = rs
        .weight_preference
        .as_ref()
        .unwrap()
        .static_weight_list
        .iter()
        .map(|w| {
            (
                w.target_cluster.as_ref().unwrap().cluster_names.clone(),
                w.weight,
            )
        })
        .collect();
    assert_eq!(
        weights,
        vec![
            (vec!["member1".to_owned()], 1),
            (vec!["member2".to_owned()], 2)
        ]
    );
    // The client sends what the user wrote; the api adds the defaults (PD-1).
    assert!(placement.cluster_tolerations.is_empty());
}

#[test]
fn karmada_documented_policies_apply_unchanged() {
    // failover-analysis.md: the webhook's default tolerations, written out.
    let tolerations = r#"
apiVersion: policy.karmada.io/v1alpha1
kind: PropagationPolicy
metadata:
  name: nginx-propagation
  namespace: default
spec:
  placement:
    clusterTolerations:
    - effect: NoExecute
      key: cluster.karmada.io/not-ready
      operator: Exists
      tolerationSeconds: 300
    - effect: NoExecute
      key: cluster.karmada.io/unreachable
      operator: Exists
      tolerationSeconds: 300
  resourceSelectors:
  - apiVersion: apps/v1
    kind: Deployment
    name: nginx
    namespace: default
"#;
    let docs = read_ok(tolerations);
    let tols = &pp_spec(&docs[0])
        .placement
        .as_ref()
        .unwrap()
        .cluster_tolerations;
    assert_eq!(tols.len(), 2);
    assert_eq!(tols[0].toleration_seconds, Some(300));
    assert_eq!(tols[0].effect, v1::TaintEffect::NoExecute as i32);
    assert_eq!(tols[0].operator, v1::TolerationOperator::Exists as i32);

    // failover-analysis.md: Duplicated with spread constraints.
    read_ok(
        r#"
apiVersion: policy.karmada.io/v1alpha1
kind: PropagationPolicy
metadata:
  name: nginx-propagation
spec:
  resourceSelectors:
    - apiVersion: apps/v1
      kind: Deployment
      name: nginx
  placement:
    clusterAffinity:
      clusterNames:
        - member1
        - member2
        - member3
        - member5
    spreadConstraints:
      - maxGroups: 2
        minGroups: 2
    replicaScheduling:
      replicaSchedulingType: Duplicated
"#,
    );

    // cluster-failover.md: purge mode and state preservation (a CRD kind as the workload).
    let failover = failover_of(
        r#"
  resourceSelectors:
    - apiVersion: flink.apache.org/v1beta1
      kind: FlinkDeployment
      name: flink-app
  failover:
    cluster:
      purgeMode: Directly
      statePreservation:
        rules:
          - aliasLabelName: application.karmada.io/cluster-failover-jobid
            jsonPath: "{ .jobStatus.jobID }"
  placement:
    clusterAffinity:
      clusterNames:
        - member1
        - member2
    spreadConstraints:
      - maxGroups: 1
        minGroups: 1
        spreadByField: cluster
"#,
    );
    let cluster = failover.cluster.as_ref().unwrap();
    assert_eq!(cluster.purge_mode, v1::PurgeMode::Directly as i32);

    // application-failover.md, with `propagateDeps: true` (Karmada's own validation requires
    // it for application failover, as ours does) and the deprecated spelling `Graciously`.
    let failover = failover_of(
        r#"
  propagateDeps: true
  resourceSelectors:
    - apiVersion: apps/v1
      kind: Deployment
      name: nginx
  failover:
    application:
      decisionConditions:
        tolerationSeconds: 300
      gracePeriodSeconds: 600
      purgeMode: Graciously
"#,
    );
    let app = failover.application.as_ref().unwrap();
    assert_eq!(app.purge_mode, v1::PurgeMode::Gracefully as i32);
    assert_eq!(app.grace_period_seconds, Some(600));
    assert_eq!(
        app.decision_conditions.as_ref().unwrap().toleration_seconds,
        Some(300)
    );
}

#[test]
fn karmada_cluster_taint_policy_example_applies() {
    // cluster-taint-management.md
    let docs = read_ok(
        r#"
apiVersion: policy.karmada.io/v1alpha1
kind: ClusterTaintPolicy
metadata:
  name: detect-cluster-notready
spec:
  targetClusters:
    clusterNames:
    - member1
    - member2
  addOnConditions:
  - conditionType: Ready
    operator: NotIn
    statusValues:
    - "True"
  removeOnConditions:
  - conditionType: Ready
    operator: In
    statusValues:
    - "True"
  taints:
  - key: not-ready
    effect: NoSchedule
  - key: not-ready
    effect: NoExecute
"#,
    );
    let Object::ClusterTaintPolicy(p, _) = &docs[0].object else {
        panic!()
    };
    let spec = p.spec.as_ref().unwrap();
    assert_eq!(spec.taints.len(), 2);
    assert_eq!(
        spec.add_on_conditions[0].operator,
        v1::SelectorOperator::NotIn as i32
    );
    assert_eq!(
        spec.add_on_conditions[0].status_values,
        vec![v1::ConditionStatus::True as i32]
    );
    // Unquoted True is YAML's boolean; it still means the status "True".
    let docs = read_ok(
        "apiVersion: policy.karmada.io/v1alpha1\nkind: ClusterTaintPolicy\nmetadata: {name: p}\n\
         spec:\n  addOnConditions: [{conditionType: Ready, operator: In, statusValues: [False]}]\n  \
         taints: [{key: k, effect: NoSchedule}]\n",
    );
    let Object::ClusterTaintPolicy(p, _) = &docs[0].object else {
        panic!()
    };
    assert_eq!(
        p.spec.as_ref().unwrap().add_on_conditions[0].status_values,
        vec![v1::ConditionStatus::False as i32]
    );
}

#[test]
fn clusters_read_in_both_api_groups() {
    let docs = read_ok(
        r#"
apiVersion: flotilla.io/v1alpha1
kind: Cluster
metadata:
  name: member1
  labels: {env: prod}
spec:
  apiEndpoint: http://127.0.0.1:7411
  syncMode: Pull
  region: eu-west
  zones: [eu-west-1a]
  provider: sim
  taints:
  - key: maintenance
    value: "true"
    effect: NoSchedule
---
apiVersion: cluster.karmada.io/v1alpha1
kind: Cluster
metadata:
  name: member2
spec:
  apiEndpoint: https://member2.example:6443
  syncMode: Push
  secretRef: {namespace: karmada-cluster, name: member2}
  insecureSkipTLSVerification: true
  zone: z1
"#,
    );
    let Object::Cluster(c) = &docs[0].object else {
        panic!()
    };
    let spec = c.spec.as_ref().unwrap();
    assert_eq!(spec.sync_mode, v1::SyncMode::Pull as i32);
    assert_eq!(spec.zones, vec!["eu-west-1a"]);
    assert_eq!(spec.taints[0].effect, v1::TaintEffect::NoSchedule as i32);
    assert_eq!(c.metadata.as_ref().unwrap().labels["env"], "prod");
    assert!(c.status.is_none());
    let Object::Cluster(c) = &docs[1].object else {
        panic!()
    };
    assert_eq!(c.spec.as_ref().unwrap().zones, vec!["z1"]);
    // Karmada's spelling is accepted (and ignored with a warning, like secretRef); the
    // camelCase one Flotilla used to expect is not Karmada's and is refused
    let camel = read(
        "c.yaml",
        "apiVersion: cluster.karmada.io/v1alpha1\nkind: Cluster\nmetadata: {name: m}\nspec:\n  \
         apiEndpoint: https://m:6443\n  insecureSkipTlsVerification: true\n",
        &opts(),
    );
    assert_eq!(camel.errors.len(), 1, "{:?}", camel.errors);
    assert!(
        camel.errors[0]
            .to_string()
            .contains("insecureSkipTlsVerification"),
        "{}",
        camel.errors[0]
    );
    let parsed = read("c.yaml", &serde_norway::to_string(&"x").unwrap(), &opts());
    assert_eq!(parsed.errors.len(), 1, "a scalar is not an object");
}

/// ES-4.1: Karmada's `resourceModels` apply as its documentation writes them (quantities as
/// strings or numbers, grades in any order) and are stored standardized; models that leave a
/// gap between grades are refused at the field.
#[test]
fn es_4_1_karmada_resource_models_apply() {
    let cluster = |models: &str| {
        format!(
            "apiVersion: cluster.karmada.io/v1alpha1\nkind: Cluster\nmetadata: {{name: member1}}\n\
             spec:\n  apiEndpoint: https://member1:6443\n  resourceModels:\n{models}"
        )
    };
    let docs = read_ok(&cluster(
        "  - grade: 1
    ranges:
    - {name: cpu, min: 1, max: 2}
    - {name: memory, min: 4Gi, max: 16Gi}
  - grade: 0
    ranges:
    - {name: cpu, min: 0, max: 1}
    - {name: memory, min: 0, max: 4Gi}
  - grade: 2
    ranges:
    - {name: cpu, min: \"2\", max: \"4\"}
    - {name: memory, min: 16Gi, max: 32Gi}
",
    ));
    let Object::Cluster(c) = &docs[0].object else {
        panic!()
    };
    let models = &c.spec.as_ref().unwrap().resource_models;
    let grades: Vec<u32> = models.iter().map(|m| m.grade).collect();
    assert_eq!(grades, [0, 1, 2], "sorted by grade");
    assert_eq!(models[1].ranges[1].min, "4Gi");
    assert_eq!(
        models[2].ranges[0].max,
        flotilla_core::quantity::format("cpu", i64::MAX),
        "the last grade is unbounded"
    );
    let errs = errors(&cluster(
        "  - grade: 0
    ranges: [{name: cpu, min: 0, max: 1}]
  - grade: 1
    ranges: [{name: cpu, min: 2, max: 4}]
",
    ));
    assert!(
        errs.iter()
            .any(|e| e.contains("spec.resourceModels[1].ranges[0].min") && e.contains("gaps")),
        "{errs:#?}"
    );
    let errs = errors(&cluster(
        "  - grade: 0\n    ranges: [{name: cpu, min: 0, max: plenty}]\n",
    ));
    assert!(
        errs.iter()
            .any(|e| e.contains("resourceModels[0].ranges[0].max") && e.contains("quantity")),
        "{errs:#?}"
    );
}

/// A PropagationPolicy that tolerates a NoSchedule taint with tolerationSeconds.
const BAD_TOLERATION: &str = include_str!("../../testdata/toleration-seconds-on-no-schedule.yaml");

#[test]
fn toleration_seconds_on_no_schedule_names_document_field_and_reason() {
    let text = format!("{DIVIDED}---\n{BAD_TOLERATION}");
    let errs = errors(&text);
    assert_eq!(errs.len(), 1, "{errs:#?}");
    let e = &errs[0];
    assert_has(
        e,
        &[
            "document 3 (PropagationPolicy default/bad)",
            "spec.placement.clusterTolerations[0].effect",
            "tolerationSeconds",
        ],
    );
}

#[test]
fn unknown_and_unsupported_fields_are_errors() {
    let errs = errors(
        "apiVersion: policy.karmada.io/v1alpha1\nkind: PropagationPolicy\nmetadata: {name: p}\n\
         spec:\n  resourceSelectors: [{apiVersion: apps/v1, kind: Deployment}]\n  placement:\n    \
         clusterAfinity: {clusterNames: [member1]}\n",
    );
    assert_eq!(errs.len(), 1, "{errs:#?}");
    assert!(
        errs[0].contains("document 1 (PropagationPolicy default/p)"),
        "{}",
        errs[0]
    );
    assert!(errs[0].contains("spec.placement"), "{}", errs[0]);
    assert!(
        errs[0].contains("unknown field `clusterAfinity`"),
        "{}",
        errs[0]
    );

    let errs = errors(
        "apiVersion: policy.karmada.io/v1alpha1\nkind: PropagationPolicy\nmetadata: {name: p}\n\
         spec:\n  resourceSelectors: [{apiVersion: apps/v1, kind: Deployment}]\n  \
         preemption: Always\n  placement:\n    replicaScheduling: {replicaSchedulingType: Split}\n",
    );
    // The enum error stops the typed read; preemption is checked only on a typed document.
    assert_eq!(errs.len(), 1, "{errs:#?}");
    assert!(errs[0].contains("replicaSchedulingType"), "{}", errs[0]);
    assert!(errs[0].contains("unknown variant `Split`"), "{}", errs[0]);

    let errs = errors(
        "apiVersion: policy.karmada.io/v1alpha1\nkind: PropagationPolicy\nmetadata: {name: p}\n\
         spec:\n  resourceSelectors: [{apiVersion: apps/v1, kind: Deployment}]\n  \
         preemption: Sometimes\n  conflictResolution: Abort\n",
    );
    assert_eq!(errs.len(), 1, "{errs:#?}");
    assert!(errs[0].contains("spec.preemption"), "{}", errs[0]);

    let errs = errors(
        "apiVersion: policy.karmada.io/v1alpha1\nkind: FederatedResourceQuota\nmetadata: {name: o}\n",
    );
    assert!(
        errs[0].contains("kind: Unsupported value: \"FederatedResourceQuota\""),
        "{errs:#?}"
    );
    // OverridePolicy: Karmada's webhook rules, and misspelt overriders named
    let errs = errors(
        "apiVersion: policy.karmada.io/v1alpha1\nkind: OverridePolicy\nmetadata: {name: o}\n\
         spec:\n  targetCluster: {clusterNames: [m1]}\n  overrideRules:\n  - overriders:\n      \
         plaintext: [{path: /spec/replicas, operator: replace}]\n",
    );
    assert!(
        errs.iter().any(|e| e.contains("spec.targetCluster")
            && e.contains("overrideRules and targetCluster can't co-exist")),
        "{errs:#?}"
    );
    assert!(
        errs.iter()
            .any(|e| e.contains("spec.overrideRules[0].overriders.plaintext[0].value")),
        "{errs:#?}"
    );
    let errs = errors(
        "apiVersion: policy.karmada.io/v1alpha1\nkind: OverridePolicy\nmetadata: {name: o}\n\
         spec:\n  overrideRules:\n  - overriders:\n      imageOverride: []\n",
    );
    assert!(errs[0].contains("imageOverride"), "{errs:#?}");
    let errs = errors("kind: Deployment\nmetadata: {name: x}\n");
    assert!(errs[0].contains("apiVersion: Required value"), "{errs:#?}");
    let errs = errors("a: [1,\n");
    assert!(errs[0].contains("not valid YAML"), "{errs:#?}");
}

/// Karmada fields Flotilla does not carry yet are refused by name as "not supported yet",
/// with what to use instead where there is something; their default values are accepted.
#[test]
fn karmada_fields_not_carried_yet_are_refused_by_name() {
    let policy = |spec: &str| {
        format!(
            "apiVersion: policy.karmada.io/v1alpha1\nkind: PropagationPolicy\nmetadata: {{name: p}}\n\
             spec:\n  resourceSelectors: [{{apiVersion: apps/v1, kind: Deployment}}]\n{spec}"
        )
    };
    let cases = [
        (
            "  placement:\n    workloadAffinity: {affinity: {groupByLabelKey: app}}\n",
            "spec.placement.workloadAffinity",
        ),
        (
            "  placement:\n    clusterAffinities:\n    - affinityName: primary\n      \
             clusterNames: [member1]\n      overflowAffinities: [{clusterNames: [member2]}]\n",
            "spec.placement.clusterAffinities[0].overflowAffinities",
        ),
        (
            "  schedulePriority: {priorityClassSource: KubePriorityClass, priorityClassName: high}\n",
            "spec.schedulePriority",
        ),
        (
            "  dependentOverrides: [an-override]\n",
            "spec.dependentOverrides",
        ),
    ];
    for (spec, field) in cases {
        let errs = errors(&policy(spec));
        assert_eq!(errs.len(), 1, "{spec}: {errs:#?}");
        assert!(
            errs[0].contains(field) && errs[0].contains("not supported yet"),
            "{spec}: {}",
            errs[0]
        );
        assert!(
            !errs[0].contains("unknown field"),
            "not a typo: {}",
            errs[0]
        );
    }
    let errs = errors(&policy("  association: true\n"));
    assert!(
        errs[0].contains("spec.association") && errs[0].contains("use `propagateDeps: true`"),
        "{errs:#?}"
    );
    let errs = errors(&policy("  dependentOverrides: [an-override]\n"));
    assert!(
        !errs[0].contains("OverridePolicies are not supported"),
        "OverridePolicies are: {}",
        errs[0]
    );
    // each refusal says why and what to use instead
    for (spec, instead) in [
        ("  dependentOverrides: [o]\n", "in one file"),
        (
            "  schedulePriority: {priorityClassName: high}\n",
            "`preemption`",
        ),
        (
            "  placement:\n    workloadAffinity: {}\n",
            "spreadConstraints instead",
        ),
    ] {
        let errs = errors(&policy(spec));
        assert!(errs[0].contains(instead), "{spec}: {}", errs[0]);
    }
    // PL-7: Overwrite is carried; an unknown value is refused
    let docs = read_ok(&policy("  conflictResolution: Overwrite\n"));
    assert_eq!(
        pp_spec(&docs[0]).conflict_resolution,
        v1::ConflictResolution::Overwrite as i32
    );
    let errs = errors(&policy("  conflictResolution: Replace\n"));
    assert!(
        errs[0].contains("spec.conflictResolution") && errs[0].contains("`Overwrite`"),
        "{errs:#?}"
    );
    // their defaults are taken
    read_ok(&policy(
        "  conflictResolution: Abort\n  \
         dependentOverrides: []\n  placement:\n    clusterAffinities:\n    - affinityName: a\n      \
         clusterNames: [member1]\n      overflowAffinities: []\n",
    ));
}

#[test]
fn every_document_is_checked_and_namespaces_follow_kubectl() {
    let text = "apiVersion: policy.karmada.io/v1alpha1\nkind: PropagationPolicy\nmetadata: {name: a, namespace: other}\n\
         spec: {resourceSelectors: [{apiVersion: apps/v1, kind: Deployment}]}\n---\n\
         apiVersion: policy.karmada.io/v1alpha1\nkind: ClusterPropagationPolicy\nmetadata: {name: B_bad}\n\
         spec: {resourceSelectors: [{apiVersion: apps/v1, kind: Deployment}]}\n";
    let errs = errors(text);
    assert_eq!(errs.len(), 1, "{errs:#?}");
    assert!(
        errs[0].contains("document 2 (ClusterPropagationPolicy B_bad): metadata.name"),
        "{}",
        errs[0]
    );
    // An explicit -n must agree with the document's namespace.
    let parsed = read(
        "t.yaml",
        text,
        &ReadOptions {
            namespace: "default".into(),
            namespace_explicit: true,
        },
    );
    assert!(
        parsed
            .errors
            .iter()
            .any(|e| e.index == 1 && e.field == "metadata.namespace"),
        "{:#?}",
        parsed.errors
    );
}

#[test]
fn duplicates_and_taint_policy_conflicts_span_documents() {
    let ctp = |name: &str| {
        format!(
            "apiVersion: policy.karmada.io/v1alpha1\nkind: ClusterTaintPolicy\nmetadata: {{name: {name}}}\n\
             spec:\n  addOnConditions: [{{conditionType: Ready, operator: NotIn, statusValues: [\"True\"]}}]\n  \
             taints: [{{key: not-ready, effect: NoSchedule}}]\n"
        )
    };
    let text = format!("{}---\n{}---\n{}", ctp("a"), ctp("b"), ctp("a"));
    let parsed = read("t.yaml", &text, &opts());
    assert!(parsed.errors.is_empty(), "{:#?}", parsed.errors);
    let errs: Vec<String> = cross_check(&parsed.documents)
        .iter()
        .map(ToString::to_string)
        .collect();
    assert!(
        errs.iter()
            .any(|e| e.contains("document 3") && e.contains("Duplicate")),
        "{errs:#?}"
    );
    assert!(
        errs.iter()
            .any(|e| e.contains("document 2") && e.contains("spec.taints[0]")),
        "{errs:#?}"
    );
}

#[test]
fn a_typo_in_a_deployment_is_a_warning_naming_the_field() {
    let parsed = read(
        "d.yaml",
        "apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: nginx}\nspec:\n  replica: 3\n  \
         selector: {matchLabels: {app: nginx}}\n  template:\n    metadata: {labels: {app: nginx}}\n    \
         spec:\n      containers: [{name: nginx, image: nginx}]\n",
        &opts(),
    );
    assert!(parsed.errors.is_empty(), "{:?}", parsed.errors);
    assert_eq!(
        parsed.documents.len(),
        1,
        "the object still applies (Warn mode)"
    );
    assert_eq!(parsed.warnings.len(), 1, "{:?}", parsed.warnings);
    assert!(
        parsed.warnings[0].contains(r#"unknown field "spec.replica""#),
        "{}",
        parsed.warnings[0]
    );
}

#[test]
fn propagate_deps_is_accepted_and_carried_to_the_server() {
    let parsed = read(
        "pp.yaml",
        "apiVersion: policy.karmada.io/v1alpha1\nkind: PropagationPolicy\nmetadata: {name: p}\nspec:\n  \
         propagateDeps: true\n  resourceSelectors:\n  - {apiVersion: apps/v1, kind: Deployment, name: nginx}\n",
        &opts(),
    );
    assert!(parsed.errors.is_empty(), "{:?}", parsed.errors);
    assert!(parsed.warnings.is_empty(), "{:?}", parsed.warnings);
    let [doc] = parsed.documents.as_slice() else {
        panic!("one document: {:?}", parsed.documents.len())
    };
    assert!(pp_spec(doc).propagate_deps);
}

#[test]
fn failback_is_accepted_and_carried_to_the_server() {
    let parsed = read(
        "pp.yaml",
        "apiVersion: policy.karmada.io/v1alpha1\nkind: PropagationPolicy\nmetadata: {name: p}\nspec:\n  \
         resourceSelectors:\n  - {apiVersion: apps/v1, kind: Deployment, name: nginx}\n  failover:\n    \
         cluster:\n      failback: {stabilizationWindowSeconds: 600}\n",
        &opts(),
    );
    assert!(parsed.errors.is_empty(), "{:?}", parsed.errors);
    assert!(parsed.warnings.is_empty(), "{:?}", parsed.warnings);
    let failover = pp_spec(&parsed.documents[0]).failover.as_ref().unwrap();
    let cluster = failover.cluster.as_ref().unwrap();
    assert_eq!(
        cluster
            .failback
            .as_ref()
            .unwrap()
            .stabilization_window_seconds,
        600
    );
}

/// Karmada documents the mutations start from: the seed of docker-compose and a policy with
/// most placement fields.
const FUZZ_SEED: &str = include_str!("../../../../docker/compose/seed.yaml");

/// Mutates `text` line by line: lines dropped, duplicated, re-indented, their values replaced
/// by odd scalars, YAML syntax inserted.
fn mutate_yaml(text: &str, edits: &[(u8, usize, u8)]) -> String {
    const ODD: &[&str] = &[
        "",
        "~",
        "null",
        "-1",
        "1e400",
        "9223372036854775808",
        "[]",
        "{}",
        "\"\"",
        "'",
        "&a",
        "*a",
        "!!binary AAAA",
        "<<: *a",
        "? x",
        "💥",
        "0x1F",
        ".inf",
        "- - -",
        "|",
        ">-",
        "{a: [b, {c: d}]}",
        "2147483648",
        "true",
    ];
    let mut lines: Vec<String> = text.lines().map(str::to_owned).collect();
    for &(kind, at, pick) in edits {
        if lines.is_empty() {
            lines.push(String::new());
        }
        let at = at % lines.len();
        let odd = ODD[usize::from(pick) % ODD.len()];
        match kind % 6 {
            0 => {
                lines.remove(at);
            }
            1 => {
                let line = lines[at].clone();
                lines.insert(at, line);
            }
            2 => lines[at] = format!("  {}", lines[at]),
            3 => lines[at] = lines[at].trim_start().to_owned(),
            4 => {
                if let Some((key, _)) = lines[at].split_once(':') {
                    lines[at] = format!("{key}: {odd}");
                }
            }
            _ => lines.insert(at, odd.to_owned()),
        }
    }
    lines.join("\n")
}

proptest::proptest! {
    #![proptest_config(flotilla_core::testing::proptest_config(256))]

    /// Random and mutated YAML never panics the reader, and every problem it reports names
    /// its source and says what is wrong.
    #[test]
    fn random_and_mutated_yaml_read_safely(
        edits in proptest::collection::vec(proptest::prelude::any::<(u8, usize, u8)>(), 1..8),
        noise in ".{0,200}",
    ) {
        for text in [mutate_yaml(FUZZ_SEED, &edits), noise] {
            let parsed = read("fuzz.yaml", &text, &opts());
            for e in &parsed.errors {
                proptest::prop_assert_eq!(e.source.as_str(), "fuzz.yaml");
                proptest::prop_assert!(!e.reason.is_empty(), "{:?}", e);
            }
        }
    }
}

/// PL-6's field, carried by the one model: read, sent to the server, printed back by
/// `get -o yaml`, and read again the same.
/// PL-2, WE-6.1, WE-6.5: Karmada's `preserveResourcesOnDeletion` and `suspension` are read
/// into the policy's spec (and so reach the binding and its Works).
#[test]
fn preserve_resources_on_deletion_and_suspension_are_carried() {
    let docs = read_ok(
        "apiVersion: policy.karmada.io/v1alpha1\nkind: PropagationPolicy\nmetadata: {name: p}\n\
         spec:\n  resourceSelectors: [{apiVersion: apps/v1, kind: Deployment}]\n  \
         preserveResourcesOnDeletion: true\n  \
         suspension: {dispatchingOnClusters: {clusterNames: [member2]}}\n",
    );
    let spec = pp_spec(&docs[0]);
    assert!(spec.preserve_resources_on_deletion);
    let suspension = spec.suspension.clone().unwrap();
    assert_eq!(suspension.dispatching, None);
    assert_eq!(
        suspension.dispatching_on_clusters.unwrap().cluster_names,
        ["member2"]
    );
}

#[test]
fn activation_preference_is_carried_and_printed_back() {
    let text = "apiVersion: policy.karmada.io/v1alpha1\nkind: PropagationPolicy\nmetadata: {name: p}\nspec:\n  \
         activationPreference: Lazy\n  resourceSelectors:\n  - {apiVersion: apps/v1, kind: Deployment, name: nginx}\n";
    let docs = read_ok(text);
    let Object::PropagationPolicy(policy) = &docs[0].object else {
        panic!("a PropagationPolicy: {:?}", docs[0].object)
    };
    assert_eq!(
        pp_spec(&docs[0]).activation_preference,
        v1::ActivationPreference::Lazy as i32
    );
    let printed = crate::form::kubernetes(
        "flotilla.v1.PropagationPolicy",
        &prost::Message::encode_to_vec(policy),
    )
    .unwrap();
    assert_eq!(printed["spec"]["activationPreference"], "Lazy");
    let again = read_ok(&serde_json::to_string(&printed).unwrap());
    assert_eq!(pp_spec(&again[0]), pp_spec(&docs[0]));

    let errs = errors(&text.replace("Lazy", "Eager"));
    assert!(
        errs[0].contains("spec.activationPreference")
            && errs[0].contains("unknown variant `Eager`"),
        "{errs:#?}"
    );
}

#[test]
fn ge_9_1_a_binding_applies_only_to_release_a_held_task() {
    // what `get rb -o yaml` prints, with the guide's edit made to one task
    let binding = "apiVersion: work.karmada.io/v1alpha2\nkind: ResourceBinding\nmetadata:\n  \
                   name: nginx-deployment\n  namespace: apps\nspec:\n  clusters:\n  - name: \
                   member2\n    replicas: 3\n  gracefulEvictionTasks:\n  - fromCluster: member1\n    \
                   purgeMode: Never\n    suppressDeletion: false\n  - fromCluster: member3\n    \
                   purgeMode: Never\n    suppressDeletion: true\n";
    let parsed = read("rb.yaml", binding, &opts());
    assert!(parsed.errors.is_empty(), "{:?}", parsed.errors);
    assert!(parsed.documents.is_empty());
    assert_eq!(
        parsed.releases,
        [Release {
            source: "rb.yaml".into(),
            index: 1,
            word: "resourcebinding",
            namespace: "apps".into(),
            name: "nginx-deployment".into(),
            clusters: vec!["member1".into()],
        }]
    );
    // the rest of the binding is not applied, and the reader says so
    assert!(
        parsed
            .warnings
            .iter()
            .any(|w| w.contains("only gracefulEvictionTasks")),
        "{:?}",
        parsed.warnings
    );
    // a ClusterResourceBinding has no namespace
    let crb = binding
        .replace("kind: ResourceBinding", "kind: ClusterResourceBinding")
        .replace("  namespace: apps\n", "");
    let parsed = read("crb.yaml", &crb, &opts());
    assert_eq!(
        (
            parsed.releases[0].word,
            parsed.releases[0].namespace.as_str()
        ),
        ("clusterresourcebinding", "")
    );
    // nothing released: refused, naming the field and the way to release
    let held = binding.replace("suppressDeletion: false", "suppressDeletion: true");
    let errs = errors(&held);
    assert_eq!(errs.len(), 1, "{errs:?}");
    assert_has(
        &errs[0],
        &[
            "spec.gracefulEvictionTasks",
            "suppressDeletion: false",
            "flotilla release",
        ],
    );
    // Works stay the controllers' own
    let errs = errors(
        "apiVersion: work.karmada.io/v1alpha1\nkind: Work\nmetadata:\n  name: w\n  namespace: x\n",
    );
    assert_has(&errs[0], &["Works are written by Flotilla's controllers"]);
}

/// Oversized and deeply nested YAML is refused early with a clear error: nesting past the
/// parser's depth limit (flow and block style), and an alias bomb (each level refers to the
/// one before nine times, 9^12 nodes if expanded) — no stack overflow, no hang, no memory
/// blow-up.
#[test]
fn deeply_nested_and_expanding_yaml_is_refused_early() {
    let flow = format!(
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {{name: deep}}\ndata: {}{}",
        "[".repeat(100_000),
        "]".repeat(100_000)
    );
    let mut block = String::from("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: deep}\nx:\n");
    for depth in 1..1_000 {
        block.push_str(&" ".repeat(depth));
        block.push_str("- \n");
    }
    let mut bomb = String::from(
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: bomb}\na0: &a0 [x, x, x, x, x, x, x, x, x]\n",
    );
    for i in 1..12 {
        let refs = vec![format!("*a{}", i - 1); 9].join(", ");
        bomb.push_str(&format!("a{i}: &a{i} [{refs}]\n"));
    }
    for (what, text) in [("flow", flow), ("block", block), ("alias bomb", bomb)] {
        let parsed = read("deep.yaml", &text, &opts());
        assert!(parsed.documents.is_empty(), "{what}: read as a document");
        let e = parsed
            .errors
            .first()
            .unwrap_or_else(|| panic!("{what}: no error"));
        assert_eq!(e.source, "deep.yaml", "{what}");
        assert!(
            e.reason.contains("recursion")
                || e.reason.contains("nest")
                || e.reason.contains("repetition")
                || e.reason.contains("alias"),
            "{what}: {e:?}"
        );
    }
}

/// SC-3.4: a WorkloadRebalancer is refused by name with the command that does its work,
/// not read as a resource template to propagate.
#[test]
fn a_workload_rebalancer_is_refused_with_the_way_instead() {
    let parsed = read(
        "rebalancer.yaml",
        "apiVersion: apps.karmada.io/v1alpha1\nkind: WorkloadRebalancer\nmetadata: {name: demo}\n\
         spec:\n  workloads:\n  - {apiVersion: apps/v1, kind: Deployment, name: web, namespace: default}\n",
        &opts(),
    );
    assert!(parsed.documents.is_empty(), "{:?}", parsed.documents);
    let e = &parsed.errors[0];
    assert_eq!(e.field, "kind");
    assert!(e.reason.contains("flotilla reschedule"), "{e:?}");
}

/// CR-5: the rest of Karmada's API (a FederatedHPA, a ResourceInterpreterCustomization) is
/// refused by name with what to do instead, never read as a template to propagate.
#[test]
fn cr_5_karmada_kinds_flotilla_does_not_carry_are_refused_by_name() {
    for (doc, says) in [
        (
            "apiVersion: autoscaling.karmada.io/v1alpha1\nkind: FederatedHPA\nmetadata: {name: web, namespace: default}\n",
            "HorizontalPodAutoscaler",
        ),
        (
            "apiVersion: config.karmada.io/v1alpha1\nkind: ResourceInterpreterCustomization\nmetadata: {name: flink}\n",
            "interpreter",
        ),
    ] {
        let parsed = read("karmada.yaml", doc, &opts());
        assert!(parsed.documents.is_empty(), "{:?}", parsed.documents);
        let e = &parsed.errors[0];
        assert_eq!(e.field, "kind");
        assert!(e.reason.contains(says), "{e:?}");
    }
}

/// Regression: a template's finalizers stayed in its manifest (and so went to the members,
/// while a delete through the control plane did not wait for them), and an exported
/// object's server-set metadata and status were stored in the manifest. Finalizers now move
/// to the object's metadata; server-set fields and status are dropped.
#[test]
fn a_templates_finalizers_are_the_control_planes_and_server_fields_are_dropped() {
    let docs = read_ok(
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: c\n  finalizers: [example.com/keep]\n  \
         resourceVersion: \"42\"\n  uid: 1-2-3\n  creationTimestamp: \"2026-01-01T00:00:00Z\"\n\
         data: {a: b}\nstatus: {phase: x}\n",
    );
    let Object::Workload(w) = &docs[0].object else {
        panic!("a template: {:?}", docs[0].object)
    };
    assert_eq!(
        w.metadata.as_ref().unwrap().finalizers,
        ["example.com/keep"]
    );
    let manifest: serde_json::Value = serde_json::from_str(&w.manifest).unwrap();
    for gone in ["finalizers", "resourceVersion", "uid", "creationTimestamp"] {
        assert!(
            manifest["metadata"].get(gone).is_none(),
            "{gone}: {manifest}"
        );
    }
    assert!(manifest.get("status").is_none(), "{manifest}");
    assert_eq!(manifest["data"]["a"], "b");
    let errs = errors("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: c, finalizers: [1]}\n");
    assert!(
        errs.iter().any(|e| e.contains("metadata.finalizers[0]")),
        "{errs:?}"
    );
}
