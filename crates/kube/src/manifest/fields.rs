//! Unknown fields inside the workload kinds Flotilla knows, reported as warnings the way
//! `kubectl apply` does with strict field validation in Warn mode (`unknown field
//! "spec.replica"`): a typo must not pass in silence and run the Deployment with one replica.
//!
//! The known fields are those of the Kubernetes API (apps/v1 Deployment, StatefulSet,
//! DaemonSet, ReplicaSet; batch/v1 Job; v1 Pod) at the levels where a typo changes what
//! runs: the object, its spec, the pod template and its spec, and each container. Deeper
//! levels (probes, volumes, affinity, …) and other kinds are not checked.

use serde_json::Value;

const OBJECT: &[&str] = &["apiVersion", "kind", "metadata", "spec", "status"];

const OBJECT_META: &[&str] = &[
    "name",
    "generateName",
    "namespace",
    "selfLink",
    "uid",
    "resourceVersion",
    "generation",
    "creationTimestamp",
    "deletionTimestamp",
    "deletionGracePeriodSeconds",
    "labels",
    "annotations",
    "ownerReferences",
    "finalizers",
    "managedFields",
];

const DEPLOYMENT_SPEC: &[&str] = &[
    "replicas",
    "selector",
    "template",
    "strategy",
    "minReadySeconds",
    "revisionHistoryLimit",
    "paused",
    "progressDeadlineSeconds",
];

const STATEFUL_SET_SPEC: &[&str] = &[
    "replicas",
    "selector",
    "template",
    "volumeClaimTemplates",
    "serviceName",
    "podManagementPolicy",
    "updateStrategy",
    "revisionHistoryLimit",
    "minReadySeconds",
    "persistentVolumeClaimRetentionPolicy",
    "ordinals",
];

const DAEMON_SET_SPEC: &[&str] = &[
    "selector",
    "template",
    "updateStrategy",
    "minReadySeconds",
    "revisionHistoryLimit",
];

const REPLICA_SET_SPEC: &[&str] = &["replicas", "minReadySeconds", "selector", "template"];

const JOB_SPEC: &[&str] = &[
    "parallelism",
    "completions",
    "activeDeadlineSeconds",
    "podFailurePolicy",
    "successPolicy",
    "backoffLimit",
    "backoffLimitPerIndex",
    "maxFailedIndexes",
    "selector",
    "manualSelector",
    "template",
    "ttlSecondsAfterFinished",
    "completionMode",
    "suspend",
    "podReplacementPolicy",
    "managedBy",
];

const POD_TEMPLATE: &[&str] = &["metadata", "spec"];

const POD_SPEC: &[&str] = &[
    "volumes",
    "initContainers",
    "containers",
    "ephemeralContainers",
    "restartPolicy",
    "terminationGracePeriodSeconds",
    "activeDeadlineSeconds",
    "dnsPolicy",
    "nodeSelector",
    "serviceAccountName",
    "serviceAccount",
    "automountServiceAccountToken",
    "nodeName",
    "hostNetwork",
    "hostPID",
    "hostIPC",
    "shareProcessNamespace",
    "securityContext",
    "imagePullSecrets",
    "hostname",
    "subdomain",
    "affinity",
    "schedulerName",
    "tolerations",
    "hostAliases",
    "priorityClassName",
    "priority",
    "dnsConfig",
    "readinessGates",
    "runtimeClassName",
    "enableServiceLinks",
    "preemptionPolicy",
    "overhead",
    "topologySpreadConstraints",
    "setHostnameAsFQDN",
    "os",
    "hostUsers",
    "schedulingGates",
    "resourceClaims",
    "resources",
];

const CONTAINER: &[&str] = &[
    "name",
    "image",
    "command",
    "args",
    "workingDir",
    "ports",
    "envFrom",
    "env",
    "resources",
    "resizePolicy",
    "restartPolicy",
    "volumeMounts",
    "volumeDevices",
    "livenessProbe",
    "readinessProbe",
    "startupProbe",
    "lifecycle",
    "terminationMessagePath",
    "terminationMessagePolicy",
    "imagePullPolicy",
    "securityContext",
    "stdin",
    "stdinOnce",
    "tty",
];

/// The spec fields of a known workload kind, and whether its spec holds a pod template
/// (`None`: a kind whose fields are not checked).
fn spec_fields(api_version: &str, kind: &str) -> Option<(&'static [&'static str], bool)> {
    match (api_version, kind) {
        ("apps/v1", "Deployment") => Some((DEPLOYMENT_SPEC, true)),
        ("apps/v1", "StatefulSet") => Some((STATEFUL_SET_SPEC, true)),
        ("apps/v1", "DaemonSet") => Some((DAEMON_SET_SPEC, true)),
        ("apps/v1", "ReplicaSet") => Some((REPLICA_SET_SPEC, true)),
        ("batch/v1", "Job") => Some((JOB_SPEC, true)),
        ("v1", "Pod") => Some((POD_SPEC, false)),
        _ => None,
    }
}

/// The paths of the fields of `object` (a `api_version`/`kind` manifest as JSON) that its
/// kind does not have, e.g. `spec.replica` or `spec.template.spec.containers[0].imag`.
pub fn unknown_fields(api_version: &str, kind: &str, object: &Value) -> Vec<String> {
    let Some((spec_known, has_template)) = spec_fields(api_version, kind) else {
        return Vec::new();
    };
    let mut unknown = Vec::new();
    check(object, OBJECT, "", &mut unknown);
    check(&object["metadata"], OBJECT_META, "metadata.", &mut unknown);
    let spec = &object["spec"];
    check(spec, spec_known, "spec.", &mut unknown);
    let (pod_spec, prefix) = if has_template {
        let template = &spec["template"];
        check(template, POD_TEMPLATE, "spec.template.", &mut unknown);
        check(
            &template["metadata"],
            OBJECT_META,
            "spec.template.metadata.",
            &mut unknown,
        );
        let pod_spec = &template["spec"];
        check(pod_spec, POD_SPEC, "spec.template.spec.", &mut unknown);
        (pod_spec, "spec.template.spec.")
    } else {
        (spec, "spec.")
    };
    for list in ["containers", "initContainers"] {
        if let Some(containers) = pod_spec[list].as_array() {
            for (i, container) in containers.iter().enumerate() {
                check(
                    container,
                    CONTAINER,
                    &format!("{prefix}{list}[{i}]."),
                    &mut unknown,
                );
            }
        }
    }
    unknown
}

fn check(value: &Value, known: &[&str], prefix: &str, unknown: &mut Vec<String>) {
    if let Some(map) = value.as_object() {
        for key in map.keys() {
            if !known.contains(&key.as_str()) {
                unknown.push(format!("{prefix}{key}"));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn typos_in_known_kinds_are_named_with_their_path() {
        let deployment = serde_json::json!({
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": {"name": "nginx", "lables": {}},
            "spec": {
                "replica": 3,
                "selector": {},
                "template": {
                    "metadata": {"labels": {}},
                    "spec": {
                        "containers": [{"name": "nginx", "imag": "nginx"}],
                        "nodeSelecter": {}
                    }
                }
            }
        });
        assert_eq!(
            unknown_fields("apps/v1", "Deployment", &deployment),
            [
                "metadata.lables",
                "spec.replica",
                "spec.template.spec.nodeSelecter",
                "spec.template.spec.containers[0].imag",
            ]
        );
        let job = serde_json::json!({
            "spec": {"parallelism": 2, "completion": 4, "template": {"spec": {"containers": []}}}
        });
        assert_eq!(unknown_fields("batch/v1", "Job", &job), ["spec.completion"]);
        let pod =
            serde_json::json!({"spec": {"containers": [{"name": "a", "args": [], "port": 1}]}});
        assert_eq!(
            unknown_fields("v1", "Pod", &pod),
            ["spec.containers[0].port"]
        );
        // a correct object, and kinds whose fields are not known, pass
        let ok = serde_json::json!({
            "apiVersion": "apps/v1", "kind": "StatefulSet", "metadata": {"name": "db"},
            "spec": {"replicas": 1, "serviceName": "db", "template": {"spec": {"containers": [
                {"name": "db", "image": "postgres", "env": [], "resources": {}}]}}}
        });
        assert!(unknown_fields("apps/v1", "StatefulSet", &ok).is_empty());
        assert!(unknown_fields("example.com/v1", "Deployment", &deployment).is_empty());
    }
}
