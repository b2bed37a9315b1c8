//! State preservation (TM-10, GE-8.6) and its injection into the new copy (WE-4.5).
//!
//! ```text
//!   eviction of cluster C (taint manager or application failover), with statePreservation
//!     └─ C's last collected status (aggregatedStatus[C].status, JSON) ─► each rule's JSONPath
//!        ─► task.preservedLabelState {aliasLabelName → value}  (none collected: postpone)
//!   rendering a Work for target T (work executor)
//!     └─ injected_labels: one target only, the newest task purged Directly, T not among
//!        the task's clustersBeforeFailover ─► the labels are merged into the manifest
//! ```
//!
//! The JSONPath dialect is the subset of Kubernetes' JSONPath template that a single value
//! needs: `{.field.field[0]['dotted.key']}` (with or without the braces and a leading `$`).
//! Filters, wildcards, slices and ranges are refused when the policy is admitted, rather than
//! evaluated differently from Karmada.

use std::collections::BTreeMap;

use serde_json::Value;
use thiserror::Error;

use crate::types::{
    AggregatedStatusItem, GracefulEvictionTask, PurgeMode, ResourceBinding, ResourceBindingSpec,
    StatePreservationRule,
};

/// One step of a JSONPath.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Step {
    /// `.name` or `['name']`.
    Field(String),
    /// `[n]`.
    Index(usize),
}

/// Why a JSONPath or a preserved state could not be had.
#[derive(Clone, Debug, PartialEq, Eq, Error)]
pub enum PreserveError {
    /// TM-10.2: the evicted cluster's status has not been collected yet.
    #[error("the application status has not yet been collected from cluster {0}")]
    NotCollected(String),
    /// The collected status is not JSON.
    #[error("the status collected from cluster {cluster} is not JSON: {error}")]
    BadStatus {
        /// The cluster.
        cluster: String,
        /// The parser's message.
        error: String,
    },
    /// TM-10.1: a path names nothing in the status.
    #[error("jsonPath {path:?} of label {label:?}: {reason}")]
    Path {
        /// The rule's label.
        label: String,
        /// The rule's path.
        path: String,
        /// What went wrong.
        reason: String,
    },
    /// TM-10.3 (Flotilla): the value cannot be a label value.
    #[error(
        "jsonPath {path:?} of label {label:?} gives {value:?}, which is not a valid label value"
    )]
    InvalidLabelValue {
        /// The rule's label.
        label: String,
        /// The rule's path.
        path: String,
        /// The value found.
        value: String,
    },
}

/// Parses a JSONPath of the supported subset (see the module docs).
pub fn parse_json_path(path: &str) -> Result<Vec<Step>, String> {
    let mut text = path.trim();
    if let Some(inner) = text.strip_prefix('{') {
        text = inner
            .strip_suffix('}')
            .ok_or_else(|| "a '{' without its closing '}'".to_owned())?
            .trim();
    }
    text = text.strip_prefix('$').unwrap_or(text);
    if text.is_empty() {
        return Err("names no field".to_owned());
    }
    let chars: Vec<char> = text.chars().collect();
    let mut steps = Vec::new();
    let mut i = 0;
    while i < chars.len() {
        match chars[i] {
            '.' => {
                let start = i + 1;
                let mut end = start;
                while end < chars.len()
                    && (chars[end].is_alphanumeric() || "_-".contains(chars[end]))
                {
                    end += 1;
                }
                if end == start {
                    return Err(format!(
                        "expected a field name after '.' at offset {i} (filters, wildcards \
                         and recursive descent are not supported)"
                    ));
                }
                steps.push(Step::Field(chars[start..end].iter().collect()));
                i = end;
            }
            '[' => {
                let close = chars[i..]
                    .iter()
                    .position(|c| *c == ']')
                    .map(|p| p + i)
                    .ok_or_else(|| format!("a '[' without its ']' at offset {i}"))?;
                let inner: String = chars[i + 1..close].iter().collect();
                let inner = inner.trim();
                let quoted = ['\'', '"'].iter().find_map(|q| {
                    inner
                        .strip_prefix(*q)
                        .and_then(|rest| rest.strip_suffix(*q))
                });
                if let Some(name) = quoted {
                    steps.push(Step::Field(name.to_owned()));
                } else if let Ok(n) = inner.parse::<usize>() {
                    steps.push(Step::Index(n));
                } else {
                    return Err(format!(
                        "[{inner}] is not supported: only an index ([0]) or a quoted field \
                         (['name'])"
                    ));
                }
                i = close + 1;
            }
            c if c.is_whitespace() => i += 1,
            c => return Err(format!("unexpected {c:?} at offset {i}")),
        }
    }
    Ok(steps)
}

/// The value at `steps` in `value`, as Kubernetes' JSONPath prints one: a string as it is,
/// other scalars as JSON text, objects and lists as JSON.
fn lookup(value: &Value, steps: &[Step]) -> Result<String, String> {
    let mut at = value;
    for step in steps {
        at = match (step, at) {
            (Step::Field(name), Value::Object(map)) => map
                .get(name)
                .ok_or_else(|| format!("{name} is not found"))?,
            (Step::Index(n), Value::Array(list)) => list
                .get(*n)
                .ok_or_else(|| format!("index {n} is out of range"))?,
            (Step::Field(name), _) => return Err(format!("{name} is not found (not an object)")),
            (Step::Index(n), _) => return Err(format!("index {n} of something not a list")),
        };
    }
    Ok(match at {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    })
}

/// TM-10.1: the preserved label state of `rules` over the status collected from `cluster`
/// (`status` is the JSON text of `aggregatedStatus[cluster].status`, empty when none was
/// collected). `Ok` with an empty map when there are no rules.
pub fn preserved_label_state(
    rules: &[StatePreservationRule],
    cluster: &str,
    status: &str,
) -> Result<BTreeMap<String, String>, PreserveError> {
    let mut out = BTreeMap::new();
    if rules.is_empty() {
        return Ok(out);
    }
    if status.trim().is_empty() {
        return Err(PreserveError::NotCollected(cluster.to_owned()));
    }
    let value: Value = serde_json::from_str(status).map_err(|e| PreserveError::BadStatus {
        cluster: cluster.to_owned(),
        error: e.to_string(),
    })?;
    for rule in rules {
        let path_error = |reason: String| PreserveError::Path {
            label: rule.alias_label_name.clone(),
            path: rule.json_path.clone(),
            reason,
        };
        let steps = parse_json_path(&rule.json_path).map_err(path_error)?;
        let found = lookup(&value, &steps).map_err(path_error)?;
        if crate::validation::check_label_value(&found).is_err() {
            return Err(PreserveError::InvalidLabelValue {
                label: rule.alias_label_name.clone(),
                path: rule.json_path.clone(),
                value: found,
            });
        }
        out.insert(rule.alias_label_name.clone(), found);
    }
    Ok(out)
}

/// TM-10 / GE-8.6: the preserved label state of an eviction of `cluster` from a binding
/// whose aggregated status is `observed`: [`preserved_label_state`] over the status last
/// collected from that cluster.
pub fn state_for_eviction(
    rules: &[StatePreservationRule],
    observed: &[AggregatedStatusItem],
    cluster: &str,
) -> Result<BTreeMap<String, String>, PreserveError> {
    let collected = observed
        .iter()
        .find(|i| i.cluster_name == cluster)
        .map_or("", |i| i.status.as_str());
    preserved_label_state(rules, cluster, collected)
}

/// TM-10: [`state_for_eviction`] with the rules of `failover.cluster`.
pub fn cluster_failover_state(
    binding: &ResourceBinding,
    cluster: &str,
) -> Result<BTreeMap<String, String>, PreserveError> {
    let rules = binding
        .spec
        .failover
        .as_ref()
        .and_then(|f| f.cluster.as_ref())
        .map_or(&[][..], |c| c.state_preservation.as_slice());
    state_for_eviction(rules, &binding.status.aggregated_status, cluster)
}

/// WE-4.5: the labels to merge into the manifest rendered for `target`, as Karmada's binding
/// controller injects them: only when the binding has one target (a move from one cluster
/// to another), only from its newest task, only when that task was purged Directly and only
/// for a target that did not run the application before the failover. `None` otherwise, or
/// when the task preserved nothing.
pub fn injected_labels<'a>(
    spec: &'a ResourceBindingSpec,
    target: &str,
) -> Option<&'a BTreeMap<String, String>> {
    if spec.clusters.len() > 1 {
        return None;
    }
    let task: &GracefulEvictionTask = spec.graceful_eviction_tasks.last()?;
    (injects(
        spec.clusters.len(),
        task.purge_mode == PurgeMode::Directly,
        &task.clusters_before_failover,
        target,
    ) && !task.preserved_label_state.is_empty())
    .then_some(&task.preserved_label_state)
}

/// WE-4.5 on the parts of a binding: whether the newest task's preserved labels go into the
/// manifest for `target`, given how many targets the binding has and that task's purge mode
/// (whether it is Directly) and clusters before the failover (for callers holding the wire
/// form).
pub fn injects(targets: usize, directly: bool, before_failover: &[String], target: &str) -> bool {
    targets <= 1 && directly && !before_failover.iter().any(|c| c == target)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::types::TargetCluster;

    fn rule(label: &str, path: &str) -> StatePreservationRule {
        StatePreservationRule {
            alias_label_name: label.to_owned(),
            json_path: path.to_owned(),
        }
    }

    #[test]
    fn tm_10_1_json_paths_of_the_supported_subset() {
        use Step::*;
        let f = |s: &str| Field(s.to_owned());
        for (path, want) in [
            ("{ .replicas }", vec![f("replicas")]),
            ("{.jobStatus.id}", vec![f("jobStatus"), f("id")]),
            ("$.a[0].b", vec![f("a"), Index(0), f("b")]),
            (
                ".conditions[1]['last.key']",
                vec![f("conditions"), Index(1), f("last.key")],
            ),
            ("{$.a[\"b-c\"]}", vec![f("a"), f("b-c")]),
        ] {
            assert_eq!(parse_json_path(path), Ok(want), "{path}");
        }
        for bad in [
            "",
            "{}",
            "{.a",
            "{.a[*]}",
            "{..a}",
            "{.a[?(@.b==1)]}",
            "{.a[1:2]}",
            "{range .items[*]}",
            "a.b",
        ] {
            assert!(parse_json_path(bad).is_err(), "{bad:?} was accepted");
        }
    }

    #[test]
    fn tm_10_1_values_are_printed_as_kubernetes_jsonpath_prints_them() {
        let status = r#"{"replicas":3,"ready":true,"jobStatus":{"id":"job-42","epoch":"7"},
                         "list":["x","y"]}"#;
        let rules = [
            rule("app.io/replicas", "{ .replicas }"),
            rule("app.io/ready", "{.ready}"),
            rule("app.io/job", "{.jobStatus.id}"),
            rule("app.io/second", "{.list[1]}"),
        ];
        let got = preserved_label_state(&rules, "member1", status).unwrap();
        let want: BTreeMap<String, String> = [
            ("app.io/replicas", "3"),
            ("app.io/ready", "true"),
            ("app.io/job", "job-42"),
            ("app.io/second", "y"),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .collect();
        assert_eq!(got, want);
        assert_eq!(
            preserved_label_state(&[], "member1", ""),
            Ok(BTreeMap::new())
        );
    }

    #[test]
    fn tm_10_2_no_collected_status_or_a_missing_field_postpones() {
        let rules = [rule("app.io/job", "{.jobStatus.id}")];
        assert_eq!(
            preserved_label_state(&rules, "member1", ""),
            Err(PreserveError::NotCollected("member1".into()))
        );
        assert!(matches!(
            preserved_label_state(&rules, "member1", r#"{"replicas":1}"#),
            Err(PreserveError::Path { .. })
        ));
        assert!(matches!(
            preserved_label_state(&rules, "member1", "not json"),
            Err(PreserveError::BadStatus { .. })
        ));
    }

    #[test]
    fn tm_10_3_a_value_that_cannot_be_a_label_value_is_an_error() {
        let rules = [rule("app.io/job", "{.jobStatus}")];
        let status = r#"{"jobStatus":{"id":"a"}}"#;
        assert!(matches!(
            preserved_label_state(&rules, "member1", status),
            Err(PreserveError::InvalidLabelValue { .. })
        ));
    }

    #[test]
    fn we_4_5_labels_are_injected_only_into_a_single_new_target_after_a_directly_move() {
        let labels: BTreeMap<String, String> =
            [("app.io/job".to_owned(), "job-42".to_owned())].into();
        let task = |mode: PurgeMode, before: &[&str], state: &BTreeMap<String, String>| {
            GracefulEvictionTask {
                from_cluster: "member1".into(),
                purge_mode: mode,
                preserved_label_state: state.clone(),
                clusters_before_failover: before.iter().map(|c| (*c).to_owned()).collect(),
                ..Default::default()
            }
        };
        let spec = |targets: &[&str], tasks: Vec<GracefulEvictionTask>| ResourceBindingSpec {
            clusters: targets.iter().map(|c| TargetCluster::new(*c, 1)).collect(),
            graceful_eviction_tasks: tasks,
            ..Default::default()
        };
        let empty = BTreeMap::new();
        for (what, s, target, want) in [
            (
                "moved Directly to member2",
                spec(
                    &["member2"],
                    vec![task(PurgeMode::Directly, &["member1"], &labels)],
                ),
                "member2",
                true,
            ),
            (
                "member2 ran it before",
                spec(
                    &["member2"],
                    vec![task(PurgeMode::Directly, &["member1", "member2"], &labels)],
                ),
                "member2",
                false,
            ),
            (
                "Gracefully is not injected",
                spec(
                    &["member2"],
                    vec![task(PurgeMode::Gracefully, &["member1"], &labels)],
                ),
                "member2",
                false,
            ),
            (
                "two targets",
                spec(
                    &["member2", "member3"],
                    vec![task(PurgeMode::Directly, &["member1"], &labels)],
                ),
                "member2",
                false,
            ),
            (
                "nothing preserved",
                spec(
                    &["member2"],
                    vec![task(PurgeMode::Directly, &["member1"], &empty)],
                ),
                "member2",
                false,
            ),
            ("no task", spec(&["member2"], vec![]), "member2", false),
            (
                "only the newest task counts",
                spec(
                    &["member3"],
                    vec![
                        task(PurgeMode::Directly, &["member1"], &labels),
                        task(PurgeMode::Gracefully, &["member2"], &empty),
                    ],
                ),
                "member3",
                false,
            ),
        ] {
            assert_eq!(injected_labels(&s, target).is_some(), want, "{what}");
        }
    }
}
