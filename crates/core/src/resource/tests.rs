use serde_json::json;

use super::*;

#[test]
fn rm_1_group_of_api_version() {
    for (api_version, want) in [
        ("apps/v1", "apps"),
        ("v1", ""),
        ("networking.istio.io/v1beta1", "networking.istio.io"),
        ("", ""),
    ] {
        assert_eq!(group(api_version), want, "{api_version}");
    }
}

#[test]
fn rm_1_kind_segment_names_the_group() {
    for (group, kind, segment) in [
        ("apps", "Deployment", "Deployment.apps"),
        ("", "ConfigMap", "ConfigMap"),
        (
            "gateway.networking.k8s.io",
            "Gateway",
            "Gateway.gateway.networking.k8s.io",
        ),
        (
            "networking.istio.io",
            "Gateway",
            "Gateway.networking.istio.io",
        ),
    ] {
        assert_eq!(kind_segment(group, kind), segment);
        assert_eq!(split_kind_segment(segment), (kind, group));
    }
}

#[test]
fn rm_1_a_bare_kind_resolves_to_its_builtin_group() {
    for (typed, want) in [
        ("Deployment", "Deployment.apps"),
        ("Job", "Job.batch"),
        ("ConfigMap", "ConfigMap"),
        ("Widget", "Widget"),
        ("Deployment.example.com", "Deployment.example.com"),
    ] {
        assert_eq!(resolve_kind_segment(typed), want, "{typed}");
    }
}

#[test]
fn rm_1_binding_name_suffix_only_on_collision() {
    assert_eq!(
        binding_name("clash", "apps", "Deployment", false),
        "clash-deployment"
    );
    let a = binding_name("clash", "example.com", "Deployment", true);
    let b = binding_name("clash", "apps", "Deployment", true);
    assert!(a.starts_with("clash-deployment-") && a.len() == "clash-deployment-".len() + 5);
    assert_ne!(a, b, "groups get different suffixes");
    // stable: the same input always gives the same name
    assert_eq!(a, binding_name("clash", "example.com", "Deployment", true));
    assert_eq!(group_suffix("example.com"), group_suffix("example.com"));
}

#[test]
fn cr_2_builtin_cluster_scoped_kinds() {
    for (api_version, kind, want) in [
        ("v1", "Namespace", Scope::Cluster),
        (
            "rbac.authorization.k8s.io/v1",
            "ClusterRole",
            Scope::Cluster,
        ),
        (
            "rbac.authorization.k8s.io/v1",
            "ClusterRoleBinding",
            Scope::Cluster,
        ),
        (
            "apiextensions.k8s.io/v1",
            "CustomResourceDefinition",
            Scope::Cluster,
        ),
        ("storage.k8s.io/v1", "StorageClass", Scope::Cluster),
        ("rbac.authorization.k8s.io/v1", "Role", Scope::Namespaced),
        ("apps/v1", "Deployment", Scope::Namespaced),
        ("v1", "ConfigMap", Scope::Namespaced),
        // a custom resource is namespaced, whatever its name says
        ("example.com/v1", "Namespace", Scope::Namespaced),
        ("example.com/v1", "ClusterWidget", Scope::Namespaced),
    ] {
        assert_eq!(scope_of(api_version, kind), want, "{api_version} {kind}");
    }
}

fn deps(manifest: serde_json::Value) -> Vec<(&'static str, String)> {
    dependencies(&manifest)
        .into_iter()
        .map(|d| (d.kind, d.name))
        .collect()
}

fn owned(list: &[(&'static str, &str)]) -> Vec<(&'static str, String)> {
    list.iter().map(|(k, n)| (*k, (*n).to_owned())).collect()
}

#[test]
fn dep_1_pod_template_references() {
    let pod = json!({
        "serviceAccountName": "runner",
        "imagePullSecrets": [{"name": "registry"}],
        "volumes": [
            {"name": "a", "configMap": {"name": "cm-volume"}},
            {"name": "b", "secret": {"secretName": "secret-volume"}},
            {"name": "c", "persistentVolumeClaim": {"claimName": "data"}},
            {"name": "d", "projected": {"sources": [
                {"configMap": {"name": "cm-projected"}},
                {"secret": {"name": "secret-projected"}},
                {"serviceAccountToken": {"path": "token"}}
            ]}},
            {"name": "e", "emptyDir": {}}
        ],
        "initContainers": [{"name": "init", "envFrom": [{"secretRef": {"name": "init-env"}}]}],
        "containers": [{
            "name": "app",
            "env": [
                {"name": "A", "valueFrom": {"configMapKeyRef": {"name": "cm-key", "key": "a"}}},
                {"name": "B", "valueFrom": {"secretKeyRef": {"name": "secret-key", "key": "b"}}},
                {"name": "C", "value": "plain"}
            ],
            "envFrom": [{"configMapRef": {"name": "cm-env"}}, {"configMapRef": {"name": "cm-env"}}]
        }],
        "ephemeralContainers": [{"name": "debug", "envFrom": [{"configMapRef": {"name": "cm-debug"}}]}]
    });
    let want = owned(&[
        ("ConfigMap", "cm-debug"),
        ("ConfigMap", "cm-env"),
        ("ConfigMap", "cm-key"),
        ("ConfigMap", "cm-projected"),
        ("ConfigMap", "cm-volume"),
        ("PersistentVolumeClaim", "data"),
        ("Secret", "init-env"),
        ("Secret", "registry"),
        ("Secret", "secret-key"),
        ("Secret", "secret-projected"),
        ("Secret", "secret-volume"),
        ("ServiceAccount", "runner"),
    ]);
    // where the pod spec stands in the workload kinds with a pod template
    let template = "/spec/template/spec";
    for (api_version, kind, wrap) in [
        ("apps/v1", "Deployment", template),
        ("apps/v1", "StatefulSet", template),
        ("apps/v1", "DaemonSet", template),
        ("apps/v1", "ReplicaSet", template),
        ("batch/v1", "Job", template),
        (
            "batch/v1",
            "CronJob",
            "/spec/jobTemplate/spec/template/spec",
        ),
        ("v1", "Pod", "/spec"),
    ] {
        let mut manifest =
            json!({"apiVersion": api_version, "kind": kind, "metadata": {"name": "x"}});
        // build the nesting of the pod spec for this kind
        let mut at = &mut manifest;
        let parts: Vec<&str> = wrap.trim_start_matches('/').split('/').collect();
        for (i, part) in parts.iter().enumerate() {
            let value = if i + 1 == parts.len() {
                pod.clone()
            } else {
                json!({})
            };
            at = at
                .as_object_mut()
                .expect("object")
                .entry(*part)
                .or_insert(value);
        }
        assert_eq!(deps(manifest), want, "{kind}");
    }
}

#[test]
fn dep_1_default_service_account_and_other_kinds_have_none() {
    let default_sa = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"},
        "spec": {"serviceAccountName": "default", "containers": [{"name": "c"}]}});
    assert_eq!(deps(default_sa), vec![]);
    let config_map = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"},
        "data": {"volumes": "x"}});
    assert_eq!(deps(config_map), vec![]);
    // a pod template under a custom kind is not interpreted (no customised interpreter)
    let custom = json!({"apiVersion": "example.com/v1", "kind": "Deployment",
        "spec": {"template": {"spec": {"serviceAccountName": "runner"}}}});
    assert_eq!(deps(custom), vec![]);
}

#[test]
fn dep_1_stateful_set_claim_templates_are_not_dependencies() {
    let sts = json!({"apiVersion": "apps/v1", "kind": "StatefulSet", "metadata": {"name": "db"},
    "spec": {
        "volumeClaimTemplates": [{"metadata": {"name": "data"}}],
        "template": {"spec": {"volumes": [
            {"name": "a", "persistentVolumeClaim": {"claimName": "data"}},
            {"name": "b", "persistentVolumeClaim": {"claimName": "shared"}}
        ]}}
    }});
    assert_eq!(deps(sts), owned(&[("PersistentVolumeClaim", "shared")]));
}

#[test]
fn rm_1_qualified_kind_only_where_a_bare_kind_means_another_group() {
    for (group, kind, want) in [
        ("apps", "Deployment", "Deployment"),
        ("", "ConfigMap", "ConfigMap"),
        ("example.com", "Deployment", "Deployment.example.com"),
        ("example.com", "Widget", "Widget.example.com"),
    ] {
        assert_eq!(qualified_kind(group, kind), want, "{group} {kind}");
    }
}

/// CR-5: Karmada's own API objects are refused as templates, by name and with what to do
/// instead; everything else, custom groups that merely contain "karmada" included, is a
/// template.
#[test]
fn cr_5_karmadas_own_api_objects_are_no_templates() {
    for (api_version, kind, says) in [
        (
            "autoscaling.karmada.io/v1alpha1",
            "FederatedHPA",
            "HorizontalPodAutoscaler",
        ),
        (
            "autoscaling.karmada.io/v1alpha1",
            "CronFederatedHPA",
            "HorizontalPodAutoscaler",
        ),
        (
            "networking.karmada.io/v1alpha1",
            "MultiClusterService",
            "Service",
        ),
        (
            "networking.karmada.io/v1alpha1",
            "MultiClusterIngress",
            "Ingress",
        ),
        (
            "policy.karmada.io/v1alpha1",
            "FederatedResourceQuota",
            "ResourceQuota",
        ),
        (
            "config.karmada.io/v1alpha1",
            "ResourceInterpreterCustomization",
            "interpreter",
        ),
        (
            "config.karmada.io/v1alpha1",
            "ResourceInterpreterWebhookConfiguration",
            "interpreter",
        ),
        (
            "apps.karmada.io/v1alpha1",
            "WorkloadRebalancer",
            "flotilla reschedule",
        ),
        ("work.karmada.io/v1alpha1", "Work", "controllers"),
        (
            "search.karmada.io/v1alpha1",
            "ResourceRegistry",
            "does not carry",
        ),
        ("remedy.karmada.io/v1alpha1", "Remedy", "does not carry"),
    ] {
        let why = not_a_template(api_version, kind)
            .unwrap_or_else(|| panic!("{kind} of {api_version} is refused"));
        assert!(
            why.starts_with(&format!("{kind} of {api_version}")),
            "{why}"
        );
        assert!(why.contains(says), "{kind}: {why}");
    }
    for (api_version, kind) in [
        ("apps/v1", "Deployment"),
        ("v1", "ConfigMap"),
        ("example.com/v1", "Widget"),
        ("notkarmada.io/v1", "Widget"),
        ("karmada.example.com/v1", "Widget"),
        ("autoscaling/v2", "HorizontalPodAutoscaler"),
    ] {
        assert_eq!(
            not_a_template(api_version, kind),
            None,
            "{api_version} {kind}"
        );
    }
}
