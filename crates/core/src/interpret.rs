//! The default interpreter's reading of an object as a member cluster returns it (IN-3):
//! its health and its replica counts, from `metadata.generation`, `spec` and `status`.
//!
//! ```text
//!   member object ──health()──► Healthy | Unhealthy | Unknown
//!                 ──ready_replicas()──► status.readyReplicas (0 when absent)
//! ```
//!
//! The rules are Karmada's default health interpreter, kind by kind (docs/rules.md, IN-3). A
//! kind without a rule is Healthy once it exists, as Karmada treats a kind without a health
//! hook; an object whose fields have the wrong type is Unknown (Karmada: the conversion to the
//! typed object fails).

use serde_json::Value;

use crate::resource::group;
use crate::types::ResourceHealth;

/// A field that is absent reads as Kubernetes' zero value; one of the wrong type is an error.
struct Fields<'a>(&'a Value);

impl Fields<'_> {
    fn int(&self, pointer: &str) -> Result<i64, ()> {
        match self.0.pointer(pointer) {
            None | Some(Value::Null) => Ok(0),
            Some(v) => v.as_i64().ok_or(()),
        }
    }

    /// An optional integer (`spec.replicas`: absent means "not set", not 0).
    fn opt_int(&self, pointer: &str) -> Result<Option<i64>, ()> {
        match self.0.pointer(pointer) {
            None | Some(Value::Null) => Ok(None),
            Some(v) => v.as_i64().map(Some).ok_or(()),
        }
    }

    fn str(&self, pointer: &str) -> Result<&str, ()> {
        match self.0.pointer(pointer) {
            None | Some(Value::Null) => Ok(""),
            Some(v) => v.as_str().ok_or(()),
        }
    }

    fn array(&self, pointer: &str) -> Result<&[Value], ()> {
        match self.0.pointer(pointer) {
            None | Some(Value::Null) => Ok(&[]),
            Some(v) => v.as_array().map(Vec::as_slice).ok_or(()),
        }
    }
}

/// The health of `object` (a member's copy, with `status`) by its kind (IN-3).
pub fn health(object: &Value) -> ResourceHealth {
    let f = Fields(object);
    let (Ok(api_version), Ok(kind)) = (f.str("/apiVersion"), f.str("/kind")) else {
        return ResourceHealth::Unknown;
    };
    let verdict = match (group(api_version), kind) {
        ("apps", "Deployment" | "StatefulSet") => rollout_done(&f),
        ("apps", "ReplicaSet") => replica_set(&f),
        ("apps", "DaemonSet") => daemon_set(&f),
        ("", "Service") => service(&f),
        ("networking.k8s.io", "Ingress") => has_ingress(&f),
        ("", "PersistentVolumeClaim") => f.str("/status/phase").map(|p| p == "Bound"),
        ("", "Pod") => pod(&f),
        ("policy", "PodDisruptionBudget") => pdb(&f),
        // No health rule for the kind: healthy once it exists (Karmada: no InterpretHealth
        // hook).
        _ => Ok(true),
    };
    match verdict {
        Ok(true) => ResourceHealth::Healthy,
        Ok(false) => ResourceHealth::Unhealthy,
        Err(()) => ResourceHealth::Unknown,
    }
}

/// IN-1: the field of `spec` Karmada's default interpreter reads and revises a kind's
/// replicas in, keyed by apiVersion and kind as Karmada registers its hooks: `apps/v1`
/// Deployment, StatefulSet and ReplicaSet (`replicas`), `batch/v1` Job (`parallelism`). A kind
/// of the same name in another group (a custom resource whose kind is `Deployment`) has none.
pub fn replica_field(api_version: &str, kind: &str) -> Option<&'static str> {
    match (api_version, kind) {
        ("apps/v1", "Deployment" | "StatefulSet" | "ReplicaSet") => Some("replicas"),
        ("batch/v1", "Job") => Some("parallelism"),
        _ => None,
    }
}

/// WE-4.2: the completions of a `batch/v1` Job divided over its target clusters, as Karmada's
/// binding controller does (`divideReplicasByJobCompletions`): `completions` spread with the
/// targets' replicas as weights by the dispenser (SC-15.5, smaller name first on a tie). Each
/// cluster then runs its share instead of the whole count. Only for a binding that divides
/// its replicas (Divided, replicas > 0); the caller decides that.
pub fn divide_job_completions(completions: i32, targets: &[(&str, i32)]) -> Vec<(String, i32)> {
    let weights: Vec<(String, i64)> = targets
        .iter()
        .map(|(name, replicas)| ((*name).to_owned(), i64::from(*replicas)))
        .collect();
    crate::scheduler::webster::dispense(
        completions,
        &weights,
        &[],
        crate::scheduler::webster::TieBreak::NameAscending,
    )
    .into_iter()
    .map(|t| (t.name, t.replicas))
    .collect()
}

/// Ready replicas the object reports (`status.readyReplicas`; 0 when absent or unreadable).
pub fn ready_replicas(object: &Value) -> i32 {
    Fields(object)
        .int("/status/readyReplicas")
        .ok()
        .and_then(|n| i32::try_from(n).ok())
        .unwrap_or(0)
}

/// Where a member object stood when it was read: the `metadata` that orders its versions.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Stand {
    /// `metadata.uid` ("" when unknown).
    pub uid: String,
    /// `metadata.generation`; `None` for a kind that keeps none (a ConfigMap).
    pub generation: Option<i64>,
    /// `metadata.resourceVersion` ("" when unknown).
    pub resource_version: String,
}

impl Stand {
    /// The stand of `object` (its `metadata`).
    pub fn of(object: &Value) -> Self {
        let meta = object.get("metadata");
        let s = |k: &str| {
            meta.and_then(|m| m.get(k))
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_owned()
        };
        Self {
            uid: s("uid"),
            generation: meta
                .and_then(|m| m.get("generation"))
                .and_then(Value::as_i64)
                .filter(|g| *g > 0),
            resource_version: s("resourceVersion"),
        }
    }
}

/// WE-7.1: whether a `reading` of a member object may describe the Work generation whose apply
/// returned the object at `applied`, i.e. whether the reading is not older than that apply.
///
/// A watch cache, a lagging list or a report in flight can hand over the object as it was
/// before the apply: its health and ready replicas describe the previous spec, and stamping
/// them with the new Work generation is how an old copy was once deleted while its
/// replacement ran 3 of 4 replicas. So a reading counts only when:
/// - it is of the same object (`uid`); another object counts only when its resourceVersion is
///   known to be later (the applied one was deleted and re-created since);
/// - its `metadata.generation` is at least the applied one (its spec is the applied spec or a
///   later one; the health rules then check that `status.observedGeneration` caught up);
/// - its `resourceVersion` is at least the applied one, when both are numbers. Kubernetes
///   calls resourceVersion opaque; every API server in practice writes etcd's revision there
///   (so does member-sim), and client-go's own watch cache compares them as numbers. When one
///   is not a number, the generation alone decides, and for a kind without a generation only
///   the applied version itself counts.
pub fn reading_counts(applied: &Stand, reading: &Stand) -> bool {
    let later = match (
        applied.resource_version.parse::<u64>(),
        reading.resource_version.parse::<u64>(),
    ) {
        (Ok(a), Ok(r)) => Some(r >= a),
        _ => None,
    };
    if !applied.uid.is_empty() && !reading.uid.is_empty() && applied.uid != reading.uid {
        return later == Some(true) && applied.resource_version != reading.resource_version;
    }
    match applied.generation {
        Some(g) => reading.generation.is_some_and(|r| r >= g) && later != Some(false),
        None => later.unwrap_or(applied.resource_version == reading.resource_version),
    }
}

fn current_generation(f: &Fields<'_>) -> Result<bool, ()> {
    Ok(f.int("/status/observedGeneration")? == f.int("/metadata/generation")?)
}

/// Deployment and StatefulSet: the controller saw the current generation, every desired
/// replica is updated, and every updated one is available.
fn rollout_done(f: &Fields<'_>) -> Result<bool, ()> {
    let updated = f.int("/status/updatedReplicas")?;
    Ok(current_generation(f)?
        && f.opt_int("/spec/replicas")?.is_none_or(|r| updated >= r)
        && f.int("/status/availableReplicas")? >= updated)
}

fn replica_set(f: &Fields<'_>) -> Result<bool, ()> {
    Ok(current_generation(f)?
        && f.opt_int("/spec/replicas")?
            .is_none_or(|r| f.int("/status/availableReplicas").is_ok_and(|a| a >= r)))
}

fn daemon_set(f: &Fields<'_>) -> Result<bool, ()> {
    let updated = f.int("/status/updatedNumberScheduled")?;
    Ok(current_generation(f)?
        && updated >= f.int("/status/desiredNumberScheduled")?
        && f.int("/status/numberAvailable")? >= updated)
}

/// A Service is healthy unless it is a LoadBalancer still waiting for its ingress.
fn service(f: &Fields<'_>) -> Result<bool, ()> {
    if f.str("/spec/type")? != "LoadBalancer" {
        return Ok(true);
    }
    has_ingress(f)
}

fn has_ingress(f: &Fields<'_>) -> Result<bool, ()> {
    Ok(f.array("/status/loadBalancer/ingress")?.iter().any(|i| {
        let set = |k: &str| {
            i.get(k)
                .and_then(Value::as_str)
                .is_some_and(|s| !s.is_empty())
        };
        set("ip") || set("hostname")
    }))
}

fn pdb(f: &Fields<'_>) -> Result<bool, ()> {
    Ok(f.int("/status/currentHealthy")? >= f.int("/status/desiredHealthy")?)
}

/// A Pod is healthy when it succeeded, or runs with its Ready condition True.
fn pod(f: &Fields<'_>) -> Result<bool, ()> {
    match f.str("/status/phase")? {
        "Succeeded" => Ok(true),
        "Running" => Ok(f.array("/status/conditions")?.iter().any(|c| {
            c.get("type").and_then(Value::as_str) == Some("Ready")
                && c.get("status").and_then(Value::as_str) == Some("True")
        })),
        _ => Ok(false),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    use ResourceHealth::{Healthy, Unhealthy, Unknown};

    fn obj(api_version: &str, kind: &str, generation: i64, spec: Value, status: Value) -> Value {
        json!({"apiVersion": api_version, "kind": kind,
               "metadata": {"name": "x", "generation": generation},
               "spec": spec, "status": status})
    }

    /// IN-1: the replica field by apiVersion and kind; another group's kind of the same name
    /// has none.
    #[test]
    fn in_1_replica_fields_by_api_version_and_kind() {
        for kind in ["Deployment", "StatefulSet", "ReplicaSet"] {
            assert_eq!(replica_field("apps/v1", kind), Some("replicas"), "{kind}");
        }
        assert_eq!(replica_field("batch/v1", "Job"), Some("parallelism"));
        // no replicas: other kinds, and the same kinds in another group or version
        let none = [
            ("apps/v1", "DaemonSet"),
            ("v1", "ConfigMap"),
            ("example.com/v1", "Deployment"),
            ("example.com/v1", "Job"),
            ("apps/v1beta1", "Deployment"),
        ];
        for (api_version, kind) in none {
            assert_eq!(
                replica_field(api_version, kind),
                None,
                "{api_version} {kind}"
            );
        }
    }

    /// WE-4.2: completions divided by the targets' replicas as weights (the dispenser, ties to
    /// the smaller name); the shares add up to the completions.
    #[test]
    fn we_4_2_job_completions_divided_by_the_targets_replicas() {
        let cases: [(i32, &[(&str, i32)], &[(&str, i32)]); 5] = [
            (10, &[("m1", 1), ("m2", 2)], &[("m1", 3), ("m2", 7)]),
            (
                6,
                &[("m1", 2), ("m2", 2), ("m3", 2)],
                &[("m1", 2), ("m2", 2), ("m3", 2)],
            ),
            (1, &[("m1", 1), ("m2", 1)], &[("m1", 1), ("m2", 0)]),
            (5, &[("m2", 1), ("m1", 1)], &[("m1", 3), ("m2", 2)]),
            (4, &[("m1", 3)], &[("m1", 4)]),
        ];
        for (completions, targets, want) in cases {
            let mut got = divide_job_completions(completions, targets);
            got.sort();
            let want: Vec<(String, i32)> =
                want.iter().map(|(n, c)| ((*n).to_owned(), *c)).collect();
            assert_eq!(got, want, "{completions} over {targets:?}");
            assert_eq!(got.iter().map(|(_, c)| c).sum::<i32>(), completions);
        }
    }

    /// WE-7.1: a reading counts for the applied generation only when it is not older than the
    /// apply: same object, generation and (numeric) resourceVersion at least the applied ones.
    #[test]
    fn we_7_1_a_reading_counts_only_from_the_applied_version_on() {
        let stand = |uid: &str, generation: Option<i64>, rv: &str| Stand {
            uid: uid.into(),
            generation,
            resource_version: rv.into(),
        };
        let applied = stand("u1", Some(4), "120");
        let cases = [
            ("the apply's own answer", stand("u1", Some(4), "120"), true),
            ("a later status write", stand("u1", Some(4), "131"), true),
            ("a later spec", stand("u1", Some(5), "140"), true),
            (
                "the watch cache before the apply",
                stand("u1", Some(3), "118"),
                false,
            ),
            (
                "an older generation at a later version",
                stand("u1", Some(3), "125"),
                false,
            ),
            (
                "the same generation, an earlier version",
                stand("u1", Some(4), "119"),
                false,
            ),
            ("no generation read", stand("u1", None, "130"), false),
            ("re-created since, later", stand("u2", Some(1), "150"), true),
            (
                "another object, earlier",
                stand("u0", Some(9), "100"),
                false,
            ),
            (
                "an unknown uid is the same object",
                stand("", Some(4), "121"),
                true,
            ),
        ];
        for (what, reading, want) in cases {
            assert_eq!(reading_counts(&applied, &reading), want, "{what}");
        }
        // opaque versions: the generation decides; without one only the applied version
        let opaque = stand("u1", Some(4), "abc");
        assert!(reading_counts(&opaque, &stand("u1", Some(4), "xyz")));
        assert!(!reading_counts(&opaque, &stand("u1", Some(3), "xyz")));
        let config_map = stand("u1", None, "abc");
        assert!(reading_counts(&config_map, &stand("u1", None, "abc")));
        assert!(!reading_counts(&config_map, &stand("u1", None, "abd")));
        let numeric_cm = stand("u1", None, "50");
        assert!(reading_counts(&numeric_cm, &stand("u1", None, "51")));
        assert!(!reading_counts(&numeric_cm, &stand("u1", None, "49")));
        // another object whose version cannot be ordered never counts
        assert!(!reading_counts(&opaque, &stand("u2", Some(7), "xyz")));
    }

    #[test]
    fn we_7_1_stand_of_an_object() {
        let o =
            serde_json::json!({"metadata": {"uid": "u", "generation": 3, "resourceVersion": "77"}});
        assert_eq!(
            Stand::of(&o),
            Stand {
                uid: "u".into(),
                generation: Some(3),
                resource_version: "77".into()
            }
        );
        // generation 0 or absent: none kept
        let cm = serde_json::json!({"metadata": {"resourceVersion": "5", "generation": 0}});
        assert_eq!(Stand::of(&cm).generation, None);
    }

    #[test]
    fn in_3_workload_health_table() {
        let deploy = |generation, spec: Value, status: Value| {
            obj("apps/v1", "Deployment", generation, spec, status)
        };
        // A Deployment at `generation` for 3 replicas whose status reports observedGeneration,
        // updatedReplicas and availableReplicas.
        let deploy3 = |generation, observed: i64, updated: i64, available: i64| {
            let status = json!({"observedGeneration": observed, "updatedReplicas": updated, "availableReplicas": available});
            deploy(generation, json!({"replicas": 3}), status)
        };
        let cases = [
            ("all updated and available", deploy3(2, 2, 3, 3), Healthy),
            (
                "controller has not seen the generation",
                deploy3(3, 2, 3, 3),
                Unhealthy,
            ),
            ("rollout not finished", deploy3(2, 2, 2, 2), Unhealthy),
            ("updated but not available", deploy3(2, 2, 3, 1), Unhealthy),
            (
                "no status yet, no generation",
                json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "x"}, "spec": {"replicas": 1}}),
                Unhealthy,
            ),
            (
                "zero replicas, fresh",
                json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "x"}, "spec": {"replicas": 0}}),
                Healthy,
            ),
            (
                "replicas of the wrong type",
                deploy(
                    1,
                    json!({"replicas": "3"}),
                    json!({"observedGeneration": 1}),
                ),
                Unknown,
            ),
            (
                "statefulset as deployment",
                obj(
                    "apps/v1",
                    "StatefulSet",
                    1,
                    json!({"replicas": 2}),
                    json!({"observedGeneration": 1, "updatedReplicas": 2, "availableReplicas": 2}),
                ),
                Healthy,
            ),
            (
                "replicaset counts available against desired",
                obj(
                    "apps/v1",
                    "ReplicaSet",
                    1,
                    json!({"replicas": 2}),
                    json!({"observedGeneration": 1, "availableReplicas": 1}),
                ),
                Unhealthy,
            ),
            (
                "daemonset all scheduled and available",
                obj(
                    "apps/v1",
                    "DaemonSet",
                    4,
                    json!({}),
                    json!({"observedGeneration": 4, "desiredNumberScheduled": 5, "updatedNumberScheduled": 5, "numberAvailable": 5}),
                ),
                Healthy,
            ),
            (
                "daemonset still rolling",
                obj(
                    "apps/v1",
                    "DaemonSet",
                    4,
                    json!({}),
                    json!({"observedGeneration": 4, "desiredNumberScheduled": 5, "updatedNumberScheduled": 4, "numberAvailable": 4}),
                ),
                Unhealthy,
            ),
        ];
        for (name, object, want) in cases {
            assert_eq!(health(&object), want, "{name}");
        }
    }

    #[test]
    fn in_3_other_kinds_table() {
        let service =
            |ty: &str| json!({"apiVersion": "v1", "kind": "Service", "spec": {"type": ty}});
        let pvc = |phase: &str| json!({"apiVersion": "v1", "kind": "PersistentVolumeClaim", "status": {"phase": phase}});
        // A Pod in `phase`, with a Ready condition of status `ready` when given.
        let pod = |phase: &str, ready: Option<&str>| {
            let mut status = json!({"phase": phase});
            if let Some(ready) = ready {
                status["conditions"] = json!([{"type": "Ready", "status": ready}]);
            }
            json!({"apiVersion": "v1", "kind": "Pod", "status": status})
        };
        let cases = [
            ("ClusterIP service", service("ClusterIP"), Healthy),
            ("LB without ingress", service("LoadBalancer"), Unhealthy),
            (
                "LB with an ip",
                json!({"apiVersion": "v1", "kind": "Service", "spec": {"type": "LoadBalancer"}, "status": {"loadBalancer": {"ingress": [{"ip": "10.0.0.1"}]}}}),
                Healthy,
            ),
            (
                "ingress with a hostname",
                json!({"apiVersion": "networking.k8s.io/v1", "kind": "Ingress", "status": {"loadBalancer": {"ingress": [{"hostname": "a.example"}]}}}),
                Healthy,
            ),
            (
                "ingress without",
                json!({"apiVersion": "networking.k8s.io/v1", "kind": "Ingress"}),
                Unhealthy,
            ),
            ("pvc bound", pvc("Bound"), Healthy),
            ("pvc pending", pvc("Pending"), Unhealthy),
            ("pod succeeded", pod("Succeeded", None), Healthy),
            (
                "pod running and ready",
                pod("Running", Some("True")),
                Healthy,
            ),
            (
                "pod running, not ready",
                pod("Running", Some("False")),
                Unhealthy,
            ),
            (
                "pdb",
                json!({"apiVersion": "policy/v1", "kind": "PodDisruptionBudget", "status": {"currentHealthy": 2, "desiredHealthy": 3}}),
                Unhealthy,
            ),
            (
                "configmap has no rule",
                json!({"apiVersion": "v1", "kind": "ConfigMap"}),
                Healthy,
            ),
            (
                "a job has no rule in Karmada",
                json!({"apiVersion": "batch/v1", "kind": "Job", "status": {"failed": 1}}),
                Healthy,
            ),
            (
                "custom resource",
                json!({"apiVersion": "example.io/v1", "kind": "Widget"}),
                Healthy,
            ),
            ("no kind", json!({"apiVersion": 3}), Unknown),
        ];
        for (name, object, want) in cases {
            assert_eq!(health(&object), want, "{name}");
        }
    }

    #[test]
    fn in_4_ready_replicas_read_from_status() {
        assert_eq!(ready_replicas(&json!({"status": {"readyReplicas": 4}})), 4);
        assert_eq!(ready_replicas(&json!({"status": {}})), 0);
        assert_eq!(
            ready_replicas(&json!({"status": {"readyReplicas": "x"}})),
            0
        );
    }
}
