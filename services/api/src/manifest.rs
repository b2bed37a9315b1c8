//! What the api reads out of a Workload's manifest (the JSON text of a Kubernetes object):
//! its identity, its labels, its replicas and its per-replica requests (Karmada's default
//! resource interpreter does the same for Deployments).
//!
//! ```text
//!   manifest ──serde_json──► { apiVersion, kind, metadata{name,namespace,labels},
//!                              spec.replicas, spec.template.spec.{containers,initContainers}
//!                              [].resources.{requests,limits}, overhead }
//! ```

use std::collections::BTreeMap;

// IN-1, Karmada's default replica interpreter: the field each kind's replicas are read from
// (group/version and kind, as Karmada keys it). Every other kind has 0 replicas and no
// per-replica requirements (IN-2: not divided, it goes to every selected cluster), whatever
// its `spec.replicas` says (Karmada reads one only through a customised interpreter, which
// Flotilla does not have).
use flotilla_core::capacity;
use flotilla_core::interpret::replica_field;
use flotilla_core::types::ReplicaRequirements;
use flotilla_core::validation::{FieldError, FieldErrors, FieldPath};
use serde_json::{Map, Value};

/// `text` (a manifest `inspect` accepted) without `metadata.namespace` (CR-4: a cluster-scoped
/// object's manifest has none).
pub fn without_namespace(text: &str) -> String {
    match serde_json::from_str::<Value>(text) {
        Ok(mut value) => {
            if let Some(meta) = value.get_mut("metadata").and_then(Value::as_object_mut) {
                meta.remove("namespace");
            }
            value.to_string()
        }
        Err(_) => text.to_owned(),
    }
}

/// The facts read from a manifest.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Manifest {
    /// `apiVersion`.
    pub api_version: String,
    /// `kind`.
    pub kind: String,
    /// `metadata.name`.
    pub name: String,
    /// `metadata.namespace`, if set.
    pub namespace: Option<String>,
    /// `metadata.labels` (string values only).
    pub labels: BTreeMap<String, String>,
    /// IN-1: `spec.replicas` of Deployments, StatefulSets and ReplicaSets (default 1), a
    /// Job's `spec.parallelism` (default 1) capped at `spec.completions`, 1 for a Pod, else 0.
    pub replicas: i64,
    /// Per-replica requests of the pod template, for the kinds IN-1 reads replicas of.
    pub requirements: Option<ReplicaRequirements>,
}

/// Reads a manifest. Every problem is reported, at `manifest.<json path>`.
pub fn inspect(text: &str) -> Result<Manifest, FieldErrors> {
    let root = FieldPath::new("manifest");
    let value: Value = serde_json::from_str(text).map_err(|e| {
        vec![FieldError::invalid(
            &root,
            format!("must be the JSON text of a Kubernetes object: {e}"),
        )]
    })?;
    let Value::Object(obj) = value else {
        return Err(vec![FieldError::invalid(
            &root,
            "must be a JSON object (a Kubernetes object)",
        )]);
    };
    let mut errs = FieldErrors::new();
    let mut manifest = Manifest {
        api_version: required_string(&obj, "apiVersion", &root, &mut errs),
        kind: required_string(&obj, "kind", &root, &mut errs),
        ..Manifest::default()
    };
    let meta_path = root.child("metadata");
    match obj.get("metadata") {
        Some(Value::Object(meta)) => {
            manifest.name = required_string(meta, "name", &meta_path, &mut errs);
            match meta.get("namespace") {
                None | Some(Value::Null) => {}
                Some(Value::String(ns)) => manifest.namespace = Some(ns.clone()),
                Some(_) => errs.push(FieldError::invalid(
                    &meta_path.child("namespace"),
                    "must be a string",
                )),
            }
            match meta.get("labels") {
                None | Some(Value::Null) => {}
                Some(Value::Object(labels)) => {
                    for (k, v) in labels {
                        match v {
                            Value::String(s) => {
                                manifest.labels.insert(k.clone(), s.clone());
                            }
                            _ => errs.push(FieldError::invalid(
                                &meta_path.child("labels").key(k),
                                "label values must be strings",
                            )),
                        }
                    }
                }
                Some(_) => errs.push(FieldError::invalid(
                    &meta_path.child("labels"),
                    "must be an object",
                )),
            }
        }
        None => errs.push(FieldError::required(
            &meta_path.child("name"),
            "a Kubernetes object needs metadata.name",
        )),
        Some(_) => errs.push(FieldError::invalid(&meta_path, "must be an object")),
    }

    let spec_path = root.child("spec");
    let spec = obj.get("spec").and_then(Value::as_object);
    let is_pod = manifest.api_version == "v1" && manifest.kind == "Pod";
    let field = replica_field(&manifest.api_version, &manifest.kind);
    let read_int = |name: &str, errs: &mut FieldErrors| -> Option<i64> {
        match spec.and_then(|s| s.get(name)) {
            None | Some(Value::Null) => None,
            Some(v) => v.as_i64().or_else(|| {
                errs.push(FieldError::invalid(
                    &spec_path.child(name),
                    "must be an integer",
                ));
                Some(0)
            }),
        }
    };
    manifest.replicas = match field {
        // a Pod is one replica
        None if is_pod => 1,
        None => 0,
        Some(field) => {
            let replicas = read_int(field, &mut errs).unwrap_or(1);
            if field == "parallelism" {
                // a Job never runs more pods at once than it has completions left
                read_int("completions", &mut errs).map_or(replicas, |c| replicas.min(c))
            } else {
                replicas
            }
        }
    };
    // The pod spec: a Pod's own spec, else the pod template's.
    let (pod_spec, pod_path) = if is_pod {
        (spec, spec_path.clone())
    } else {
        let template = spec_path.child("template").child("spec");
        (
            spec.and_then(|s| s.get("template"))
                .and_then(Value::as_object)
                .and_then(|t| t.get("spec"))
                .and_then(Value::as_object),
            template,
        )
    };
    if let Some(pod) = pod_spec.filter(|_| field.is_some() || is_pod) {
        manifest.requirements = Some(pod_requests(pod, &pod_path, &mut errs));
    }
    if errs.is_empty() {
        Ok(manifest)
    } else {
        Err(errs)
    }
}

fn required_string(
    obj: &Map<String, Value>,
    name: &str,
    path: &FieldPath,
    errs: &mut FieldErrors,
) -> String {
    match obj.get(name) {
        Some(Value::String(s)) if !s.is_empty() => s.clone(),
        Some(Value::String(_)) | None | Some(Value::Null) => {
            errs.push(FieldError::required(
                &path.child(name),
                format!("a Kubernetes object needs {name}"),
            ));
            String::new()
        }
        Some(_) => {
            errs.push(FieldError::invalid(&path.child(name), "must be a string"));
            String::new()
        }
    }
}

/// What one replica of the pod requests (ES-1, `flotilla_core::capacity::replica_requests`:
/// containers summed, raised to the largest init container, plus the overhead, a limit
/// standing in for a missing request). Every quantity of a counted resource in `requests`,
/// `limits` and `overhead` must parse; each that does not is reported at its path.
fn pod_requests(
    pod: &Map<String, Value>,
    path: &FieldPath,
    errs: &mut FieldErrors,
) -> ReplicaRequirements {
    for list in ["containers", "initContainers"] {
        let list_path = path.child(list);
        match pod.get(list) {
            None | Some(Value::Null) => {}
            Some(Value::Array(items)) => {
                for (i, container) in items.iter().enumerate() {
                    let resources = container.get("resources");
                    for part in ["requests", "limits"] {
                        check_quantities(
                            resources.and_then(|r| r.get(part)),
                            &list_path.index(i).child("resources").child(part),
                            errs,
                        );
                    }
                }
            }
            Some(_) => errs.push(FieldError::invalid(&list_path, "must be an array")),
        }
    }
    check_quantities(pod.get("overhead"), &path.child("overhead"), errs);
    ReplicaRequirements {
        resource_request: capacity::replica_requests(&Value::Object(pod.clone())),
    }
}

/// Each counted resource of a resource list (ES-1.4) must be a quantity, as Kubernetes
/// admits it; names no replica requests are left to the member to judge.
fn check_quantities(map: Option<&Value>, path: &FieldPath, errs: &mut FieldErrors) {
    let Some(map) = map.filter(|m| !m.is_null()) else {
        return;
    };
    let Some(map) = map.as_object() else {
        errs.push(FieldError::invalid(path, "must be an object of quantities"));
        return;
    };
    for (name, q) in map.iter().filter(|(n, _)| capacity::is_counted(n)) {
        let text = match q {
            Value::String(s) => s.clone(),
            Value::Number(n) => n.to_string(),
            _ => {
                errs.push(FieldError::invalid(
                    &path.child(name),
                    "must be a quantity such as \"100m\" or \"128Mi\"",
                ));
                continue;
            }
        };
        match capacity::amount(name, &text) {
            Ok(a) if a < 0 => errs.push(FieldError::invalid(
                &path.child(name),
                format!("must be greater than or equal to 0 (got {text:?})"),
            )),
            Ok(_) => {}
            Err(msg) => errs.push(FieldError::invalid(&path.child(name), msg)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The seed workload of the scenario tests.
    const NGINX: &str = r#"{
      "apiVersion": "apps/v1", "kind": "Deployment",
      "metadata": {"name": "nginx", "namespace": "default", "labels": {"app": "nginx"}},
      "spec": {"replicas": 3, "template": {"spec": {"containers": [
        {"name": "nginx", "image": "nginx", "resources": {"requests": {"cpu": "100m", "memory": "128Mi"}}},
        {"name": "sidecar", "image": "x", "resources": {"requests": {"cpu": 0.5, "memory": "1Gi"}}}
      ]}}}
    }"#;

    #[test]
    fn reads_identity_replicas_and_summed_requests() {
        let m = inspect(NGINX).unwrap();
        assert_eq!(m.api_version, "apps/v1");
        assert_eq!(m.kind, "Deployment");
        assert_eq!(m.name, "nginx");
        assert_eq!(m.namespace.as_deref(), Some("default"));
        assert_eq!(m.labels.get("app").map(String::as_str), Some("nginx"));
        assert_eq!(m.replicas, 3);
        assert_eq!(
            m.requirements,
            Some(ReplicaRequirements::of(&[
                ("cpu", 600),
                ("memory", (128 << 20) + (1 << 30))
            ]))
        );
    }

    #[test]
    fn in_1_in_2_replicas_by_kind_as_karmadas_default_interpreter() {
        let pod_template =
            r#""template":{"spec":{"containers":[{"resources":{"requests":{"cpu":"1"}}}]}}"#;
        for (api_version, kind, spec, replicas, requirements) in [
            ("apps/v1", "Deployment", "{}".to_owned(), 1, false),
            (
                "apps/v1",
                "Deployment",
                r#"{"replicas":4}"#.to_owned(),
                4,
                false,
            ),
            (
                "apps/v1",
                "StatefulSet",
                format!("{{{pod_template}}}"),
                1,
                true,
            ),
            (
                "apps/v1",
                "ReplicaSet",
                r#"{"replicas":0}"#.to_owned(),
                0,
                false,
            ),
            // a Job's parallelism (default 1), capped at its completions
            ("batch/v1", "Job", format!("{{{pod_template}}}"), 1, true),
            (
                "batch/v1",
                "Job",
                r#"{"parallelism":5}"#.to_owned(),
                5,
                false,
            ),
            (
                "batch/v1",
                "Job",
                r#"{"parallelism":5,"completions":3}"#.to_owned(),
                3,
                false,
            ),
            (
                "batch/v1",
                "Job",
                r#"{"parallelism":2,"completions":8}"#.to_owned(),
                2,
                false,
            ),
            // IN-2: no replicas, not divided, whatever it says
            (
                "apps/v1",
                "DaemonSet",
                format!("{{{pod_template}}}"),
                0,
                false,
            ),
            ("v1", "ConfigMap", "{}".to_owned(), 0, false),
            (
                "example.com/v1",
                "Deployment",
                r#"{"replicas":3}"#.to_owned(),
                0,
                false,
            ),
        ] {
            let text = format!(
                r#"{{"apiVersion":"{api_version}","kind":"{kind}","metadata":{{"name":"a"}},"spec":{spec}}}"#
            );
            let m = inspect(&text).unwrap();
            assert_eq!(
                (m.replicas, m.requirements.is_some()),
                (replicas, requirements),
                "{api_version} {kind} {spec}"
            );
        }
        // a Pod is one replica, with its own spec's requests
        let pod = r#"{"apiVersion":"v1","kind":"Pod","metadata":{"name":"a"},
          "spec":{"containers":[{"resources":{"requests":{"cpu":"250m"}}}]}}"#;
        let m = inspect(pod).unwrap();
        assert_eq!(m.replicas, 1);
        assert_eq!(
            m.requirements.unwrap(),
            ReplicaRequirements::of(&[("cpu", 250)])
        );
    }

    #[test]
    fn init_containers_raise_the_request() {
        let m = r#"{"apiVersion":"apps/v1","kind":"Deployment","metadata":{"name":"a"},
          "spec":{"template":{"spec":{
            "containers":[{"resources":{"requests":{"cpu":"100m"}}}],
            "initContainers":[{"resources":{"requests":{"cpu":"2","memory":"1Mi"}}}]}}}}"#;
        let r = inspect(m).unwrap().requirements.unwrap();
        assert_eq!(
            r,
            ReplicaRequirements::of(&[("cpu", 2000), ("memory", 1 << 20)])
        );
    }

    /// ES-1 as the api admits a template: a limit stands in for a missing request, the
    /// overhead is added, extended resources are kept and other names dropped.
    #[test]
    fn es_1_limits_overhead_and_extended_resources() {
        let m = r#"{"apiVersion":"apps/v1","kind":"Deployment","metadata":{"name":"a"},
          "spec":{"template":{"spec":{
            "containers":[{"resources":{"limits":{"cpu":"2","nvidia.com/gpu":"1"},
                                        "requests":{"memory":"1Gi","storage":"9Gi"}}}],
            "overhead":{"cpu":"250m"}}}}}"#;
        let r = inspect(m).unwrap().requirements.unwrap();
        assert_eq!(
            r,
            ReplicaRequirements::of(&[("cpu", 2250), ("memory", 1 << 30), ("nvidia.com/gpu", 1)])
        );
        let bad = r#"{"apiVersion":"apps/v1","kind":"Deployment","metadata":{"name":"a"},
          "spec":{"template":{"spec":{
            "containers":[{"resources":{"limits":{"nvidia.com/gpu":"one"}}}],
            "overhead":{"cpu":"-1"}}}}}"#;
        let fields: Vec<String> = inspect(bad)
            .unwrap_err()
            .into_iter()
            .map(|e| e.field)
            .collect();
        assert_eq!(
            fields,
            [
                "manifest.spec.template.spec.containers[0].resources.limits.nvidia.com/gpu",
                "manifest.spec.template.spec.overhead.cpu"
            ]
        );
    }

    #[test]
    fn problems_are_reported_at_their_json_path() {
        let fields = |text: &str| -> Vec<String> {
            inspect(text)
                .unwrap_err()
                .into_iter()
                .map(|e| e.field)
                .collect()
        };
        assert_eq!(fields("{not json"), ["manifest"]);
        assert_eq!(fields("[1]"), ["manifest"]);
        assert_eq!(
            fields(r#"{"kind":"Deployment","metadata":{}}"#),
            ["manifest.apiVersion", "manifest.metadata.name"]
        );
        assert_eq!(
            fields(
                r#"{"apiVersion":"apps/v1","kind":"Deployment","metadata":{"name":"a"},
                "spec":{"replicas":"3","template":{"spec":{"containers":[
                {"resources":{"requests":{"cpu":"lots"}}}]}}}}"#
            ),
            [
                "manifest.spec.replicas",
                "manifest.spec.template.spec.containers[0].resources.requests.cpu"
            ]
        );
    }
}
