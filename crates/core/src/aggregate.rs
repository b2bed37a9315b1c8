//! A resource template's `status`, aggregated from its members' copies (IN-4), with the
//! generation semantics of Karmada v1.11 and later (IN-7).
//!
//! ```text
//!   members' status (one per cluster, from the binding's Works)
//!        ──aggregate_status(kind, template generation, old status)──► the template's status
//! ```
//!
//! Kind by kind, as Karmada's default interpreter aggregates (docs/rules.md, IN-4):
//! Deployment, StatefulSet and DaemonSet sum their counters; Job sums its counters and is
//! Complete once every member's copy is, Failed once one failed; a LoadBalancer Service and an
//! Ingress collect their load-balancer ingresses (a member's without a hostname is named
//! after its cluster); a Pod takes the worst phase; a PersistentVolumeClaim is Bound only when
//! every copy is, Lost when one is; a PodDisruptionBudget sums its counts. Every other kind
//! keeps no status on the template.
//!
//! IN-7: a Deployment's, StatefulSet's or DaemonSet's `observedGeneration` moves to the
//! template's generation only once every member's copy has observed the generation sent
//! ([`MemberStatus::observed`]); until then it keeps the value it had, so `kubectl rollout
//! status` and Argo CD wait for every member.
//!
//! Pure: the caller gives the time a new condition is stamped with (a condition that holds
//! already keeps its times, so an unchanged aggregation is an unchanged status).

use serde_json::{Map, Value, json};

use crate::resource::group;

/// One member's copy of the template, as its Work reports it.
#[derive(Clone, Copy, Debug)]
pub struct MemberStatus<'a> {
    /// The member cluster.
    pub cluster: &'a str,
    /// The member object's `status` (`None` while not collected).
    pub status: Option<&'a Value>,
    /// Whether this copy has observed the template generation aggregated for: its Work was
    /// rendered from that generation, the Work's status describes the Work as it is, and the
    /// member's controller observed the object's own generation.
    pub observed: bool,
}

/// Whether `kind` of `api_version` keeps an aggregated status on its template (IN-4).
pub fn aggregates(api_version: &str, kind: &str) -> bool {
    matches!(
        (group(api_version), kind),
        ("apps", "Deployment" | "StatefulSet" | "DaemonSet")
            | ("batch", "Job")
            | ("", "Service" | "Pod" | "PersistentVolumeClaim")
            | ("networking.k8s.io", "Ingress")
            | ("policy", "PodDisruptionBudget")
    )
}

/// The template's status aggregated from `members` (IN-4, IN-7): `template` is the template
/// in its Kubernetes form (its `spec` is read where a kind needs it), `generation` its
/// generation, `old` the status it has now, `now` the RFC 3339 time a new condition gets.
/// `None` for a kind that keeps no aggregated status.
pub fn aggregate_status(
    api_version: &str,
    kind: &str,
    template: &Value,
    generation: i64,
    old: Option<&Value>,
    members: &[MemberStatus<'_>],
    now: &str,
) -> Option<Value> {
    let empty = Map::new();
    let old_map = old.and_then(Value::as_object).unwrap_or(&empty);
    let status = match (group(api_version), kind) {
        ("apps", "Deployment") => counters(
            old_map,
            members,
            generation,
            &[
                ("replicas", true),
                ("readyReplicas", true),
                ("updatedReplicas", true),
                ("availableReplicas", true),
                ("unavailableReplicas", true),
            ],
        ),
        ("apps", "StatefulSet") => counters(
            old_map,
            members,
            generation,
            &[
                ("availableReplicas", false),
                ("currentReplicas", true),
                ("readyReplicas", true),
                ("replicas", false),
                ("updatedReplicas", true),
            ],
        ),
        ("apps", "DaemonSet") => counters(
            old_map,
            members,
            generation,
            &[
                ("currentNumberScheduled", false),
                ("desiredNumberScheduled", false),
                ("numberAvailable", true),
                ("numberMisscheduled", false),
                ("numberReady", false),
                ("updatedNumberScheduled", true),
                ("numberUnavailable", true),
            ],
        ),
        ("batch", "Job") => job(old_map, members, now),
        ("", "Service") => {
            if template.pointer("/spec/type").and_then(Value::as_str) != Some("LoadBalancer") {
                return Some(Value::Object(old_map.clone()));
            }
            json!({"loadBalancer": {"ingress": ingresses(members)}})
        }
        ("networking.k8s.io", "Ingress") => {
            json!({"loadBalancer": {"ingress": ingresses(members)}})
        }
        ("", "Pod") => pod(members),
        ("", "PersistentVolumeClaim") => pvc(members),
        ("policy", "PodDisruptionBudget") => pdb(members),
        _ => return None,
    };
    Some(status)
}

fn int(status: Option<&Value>, field: &str) -> i64 {
    status
        .and_then(|s| s.get(field))
        .and_then(Value::as_i64)
        .unwrap_or(0)
}

/// Summed counters over the old status (its other fields kept), with IN-7's
/// `observedGeneration`. `omit_zero`: Kubernetes omits the field when it is 0.
fn counters(
    old: &Map<String, Value>,
    members: &[MemberStatus<'_>],
    generation: i64,
    fields: &[(&str, bool)],
) -> Value {
    let mut status = old.clone();
    for (field, omit_zero) in fields {
        let sum: i64 = members.iter().map(|m| int(m.status, field)).sum();
        if sum == 0 && *omit_zero {
            status.remove(*field);
        } else {
            status.insert((*field).into(), json!(sum));
        }
    }
    // IN-7: every member observed the generation sent, or the old value stays
    if members.iter().all(|m| m.observed) {
        status.insert("observedGeneration".into(), json!(generation));
    }
    Value::Object(status)
}

fn condition_true(status: Option<&Value>, kind: &str) -> bool {
    status
        .and_then(|s| s.get("conditions"))
        .and_then(Value::as_array)
        .is_some_and(|cs| {
            cs.iter().any(|c| {
                c.get("type").and_then(Value::as_str) == Some(kind)
                    && c.get("status").and_then(Value::as_str) == Some("True")
            })
        })
}

/// A condition as the old status has it (same type, status, reason and message: its times
/// kept), else stamped `now`.
fn condition(
    old: &Map<String, Value>,
    kind: &str,
    reason: &str,
    message: &str,
    now: &str,
) -> Value {
    let same = old
        .get("conditions")
        .and_then(Value::as_array)
        .and_then(|cs| {
            cs.iter().find(|c| {
                c.get("type").and_then(Value::as_str) == Some(kind)
                    && c.get("status").and_then(Value::as_str) == Some("True")
                    && c.get("reason").and_then(Value::as_str) == Some(reason)
                    && c.get("message").and_then(Value::as_str) == Some(message)
            })
        });
    same.cloned().unwrap_or_else(|| {
        json!({
            "type": kind,
            "status": "True",
            "lastProbeTime": now,
            "lastTransitionTime": now,
            "reason": reason,
            "message": message,
        })
    })
}

/// An RFC 3339 time of a status (`startTime`, `completionTime`): they sort as text.
fn time<'a>(status: Option<&'a Value>, field: &str) -> Option<&'a str> {
    status.and_then(|s| s.get(field)).and_then(Value::as_str)
}

fn job(old: &Map<String, Value>, members: &[MemberStatus<'_>], now: &str) -> Value {
    let old_status = Value::Object(old.clone());
    // a finished Job's status never changes again
    if condition_true(Some(&old_status), "Complete") || condition_true(Some(&old_status), "Failed")
    {
        return old_status;
    }
    let collected: Vec<&MemberStatus<'_>> = members.iter().filter(|m| m.status.is_some()).collect();
    let mut status = Map::new();
    for field in ["active", "succeeded", "failed"] {
        let sum: i64 = collected.iter().map(|m| int(m.status, field)).sum();
        if sum != 0 {
            status.insert(field.into(), json!(sum));
        }
    }
    let failed: Vec<&str> = collected
        .iter()
        .filter(|m| condition_true(m.status, "Failed"))
        .map(|m| m.cluster)
        .collect();
    let complete = collected
        .iter()
        .filter(|m| condition_true(m.status, "Complete"))
        .count();
    let mut conditions = Vec::new();
    if !failed.is_empty() {
        let message = format!(
            "Job executed failed in member clusters {}",
            failed.join(",")
        );
        conditions.push(condition(old, "Failed", "JobFailed", &message, now));
    }
    // every member's copy, not only those collected: a Job is complete once all are
    if complete > 0 && complete == members.len() {
        conditions.push(condition(
            old,
            "Complete",
            "Completed",
            "Job completed",
            now,
        ));
    }
    if !conditions.is_empty() {
        status.insert("conditions".into(), Value::Array(conditions));
    }
    let all_have = |field: &str| {
        !members.is_empty() && members.iter().all(|m| time(m.status, field).is_some())
    };
    let start = old.get("startTime").cloned().or_else(|| {
        all_have("startTime")
            .then(|| {
                members
                    .iter()
                    .filter_map(|m| time(m.status, "startTime"))
                    .min()
            })
            .flatten()
            .map(|t| json!(t))
    });
    if let Some(start) = start {
        status.insert("startTime".into(), start);
    }
    if all_have("completionTime")
        && let Some(last) = members
            .iter()
            .filter_map(|m| time(m.status, "completionTime"))
            .max()
    {
        status.insert("completionTime".into(), json!(last));
    }
    Value::Object(status)
}

fn ingresses(members: &[MemberStatus<'_>]) -> Vec<Value> {
    let mut out = Vec::new();
    for m in members {
        let Some(list) = m
            .status
            .and_then(|s| s.pointer("/loadBalancer/ingress"))
            .and_then(Value::as_array)
        else {
            continue;
        };
        for ingress in list {
            let mut ingress = ingress.clone();
            if let Some(map) = ingress.as_object_mut()
                && map
                    .get("hostname")
                    .and_then(Value::as_str)
                    .is_none_or(str::is_empty)
            {
                map.insert("hostname".into(), json!(m.cluster));
            }
            out.push(ingress);
        }
    }
    out
}

fn phase(status: Option<&Value>) -> &str {
    status
        .and_then(|s| s.get("phase"))
        .and_then(Value::as_str)
        .unwrap_or("")
}

fn pod(members: &[MemberStatus<'_>]) -> Value {
    let mut phases = Vec::new();
    let (mut containers, mut inits) = (Vec::new(), Vec::new());
    for m in members {
        let Some(status) = m.status else {
            // not collected yet: pending, so that it holds the aggregate back
            phases.push("Pending");
            continue;
        };
        phases.push(phase(Some(status)));
        for (field, out) in [
            ("containerStatuses", &mut containers),
            ("initContainerStatuses", &mut inits),
        ] {
            for c in status
                .get(field)
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
            {
                let mut kept = Map::new();
                kept.insert(
                    "ready".into(),
                    c.get("ready").cloned().unwrap_or(json!(false)),
                );
                if let Some(state) = c.get("state") {
                    kept.insert("state".into(), state.clone());
                }
                out.push(Value::Object(kept));
            }
        }
    }
    let mut status = Map::new();
    // worst first: Failed, Pending, Running, Succeeded
    if let Some(p) = ["Failed", "Pending", "Running", "Succeeded"]
        .into_iter()
        .find(|p| phases.contains(p))
    {
        status.insert("phase".into(), json!(p));
    }
    if !containers.is_empty() {
        status.insert("containerStatuses".into(), Value::Array(containers));
    }
    if !inits.is_empty() {
        status.insert("initContainerStatuses".into(), Value::Array(inits));
    }
    Value::Object(status)
}

fn pvc(members: &[MemberStatus<'_>]) -> Value {
    let mut aggregated = "Bound";
    for m in members.iter().filter(|m| m.status.is_some()) {
        match phase(m.status) {
            "Lost" => {
                aggregated = "Lost";
                break;
            }
            "Bound" => {}
            other => aggregated = other,
        }
    }
    json!({ "phase": aggregated })
}

fn pdb(members: &[MemberStatus<'_>]) -> Value {
    let mut status = Map::new();
    for field in [
        "currentHealthy",
        "desiredHealthy",
        "expectedPods",
        "disruptionsAllowed",
    ] {
        let sum: i64 = members.iter().map(|m| int(m.status, field)).sum();
        status.insert(field.into(), json!(sum));
    }
    let mut disrupted = Map::new();
    for m in members {
        if let Some(pods) = m
            .status
            .and_then(|s| s.get("disruptedPods"))
            .and_then(Value::as_object)
        {
            for (pod, at) in pods {
                disrupted.insert(format!("{}/{pod}", m.cluster), at.clone());
            }
        }
    }
    if !disrupted.is_empty() {
        status.insert("disruptedPods".into(), Value::Object(disrupted));
    }
    Value::Object(status)
}

#[cfg(test)]
mod tests;
