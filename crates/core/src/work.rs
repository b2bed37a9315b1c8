//! The work executor's decisions: which clusters keep a Work (WE-2), what a sync does
//! (WE-3), Work names (WE-5) and the binding's aggregated status (WE-8).

use std::collections::BTreeSet;
use std::time::Duration;

use crate::types::{
    AggregatedStatusItem, PurgeMode, ResourceBindingSpec, ResourceHealth, TargetCluster,
};

/// WE-3.2: how long to wait before looking again while Directly-purged Works are going away.
pub const DIRECTLY_PURGE_RECHECK: Duration = Duration::from_secs(5);

/// WE-2: the clusters that keep a Work: targets, `requiredBy` clusters, and the clusters of
/// eviction tasks whose purge mode is not Directly.
pub fn kept_clusters(spec: &ResourceBindingSpec) -> BTreeSet<String> {
    let mut kept: BTreeSet<String> = spec.clusters.iter().map(|t| t.name.clone()).collect();
    kept.extend(spec.required_by_clusters.iter().cloned());
    kept.extend(
        spec.graceful_eviction_tasks
            .iter()
            .filter(|t| t.purge_mode != PurgeMode::Directly)
            .map(|t| t.from_cluster.clone()),
    );
    kept
}

/// What one sync of a binding's Works must do (WE-3).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct WorkPlan {
    /// WE-3.1: Works to delete (clusters not in the kept set).
    pub delete: Vec<String>,
    /// WE-3.2: Directly-purged Works still exist there; create/update nothing until they
    /// are gone, and look again after [`DIRECTLY_PURGE_RECHECK`].
    pub wait_for_directly: Vec<String>,
    /// WE-3.4: Works to create or update, with the replicas for each cluster.
    pub ensure: Vec<TargetCluster>,
    /// WE-3.5: Works held by Gracefully/Never tasks: neither deleted nor updated.
    pub hold: Vec<String>,
}

/// WE-3: plan a sync from the binding spec and the clusters that currently have a Work of
/// this binding (`existing`, deleting ones included).
pub fn plan_works(spec: &ResourceBindingSpec, existing: &[String]) -> WorkPlan {
    let kept = kept_clusters(spec);
    let mut plan = WorkPlan {
        delete: existing
            .iter()
            .filter(|c| !kept.contains(*c))
            .cloned()
            .collect(),
        ..Default::default()
    };
    plan.delete.sort();
    plan.delete.dedup();
    plan.wait_for_directly = spec
        .graceful_eviction_tasks
        .iter()
        .filter(|t| t.purge_mode == PurgeMode::Directly && existing.contains(&t.from_cluster))
        .map(|t| t.from_cluster.clone())
        .collect();
    plan.hold = spec
        .graceful_eviction_tasks
        .iter()
        .filter(|t| t.purge_mode != PurgeMode::Directly)
        .map(|t| t.from_cluster.clone())
        .collect();
    if !plan.wait_for_directly.is_empty() {
        return plan;
    }
    // WE-3.4: spec.clusters first, then requiredBy clusters (replicas 0), deduplicated; a
    // cluster held by a task is never updated (A7 keeps the two sets disjoint anyway).
    let mut seen = BTreeSet::new();
    for target in &spec.clusters {
        if !plan.hold.contains(&target.name) && seen.insert(target.name.clone()) {
            plan.ensure.push(target.clone());
        }
    }
    for cluster in &spec.required_by_clusters {
        if !plan.hold.contains(cluster) && seen.insert(cluster.clone()) {
            plan.ensure.push(TargetCluster::new(cluster.clone(), 0));
        }
    }
    plan
}

fn fnv32a(bytes: &[u8]) -> u32 {
    bytes.iter().fold(0x811c_9dc5_u32, |h, b| {
        (h ^ u32::from(*b)).wrapping_mul(0x0100_0193)
    })
}

/// Karmada's `SafeEncodeString`: each character becomes one of 27 characters that cannot
/// spell words.
fn safe_encode(s: &str) -> String {
    const ALPHABET: &[u8; 27] = b"bcdfghjklmnpqrstvwxz2456789";
    s.chars()
        .map(|c| char::from(ALPHABET[(c as usize) % ALPHABET.len()]))
        .collect()
}

/// FNV-1a (32 bit) of a string; shared by Work names and the Webster UID tie-break.
pub fn fnv32a_str(s: &str) -> u32 {
    fnv32a(s.as_bytes())
}

/// WE-5: the Work name for a template, identical to Karmada's `GenerateWorkName`: the
/// template name (`:` → `.`) lower-cased, a dash, and the safe-encoded decimal FNV-1a hash of
/// `namespace-name-kind` lower-cased (`namespace-` omitted for cluster-scoped kinds).
pub fn work_name(namespace: &str, name: &str, kind: &str) -> String {
    let name = name.replace(':', ".");
    let seed = if namespace.is_empty() {
        format!("{name}-{kind}")
    } else {
        format!("{namespace}-{name}-{kind}")
    };
    let hash = fnv32a(seed.to_lowercase().as_bytes());
    format!("{}-{}", name.to_lowercase(), safe_encode(&hash.to_string()))
}

/// What the work executor knows about one Work of a binding (WE-8 input).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct WorkObservation {
    /// The Work's cluster.
    pub cluster: String,
    /// The Work is being deleted.
    pub deleting: bool,
    /// The `Applied` condition: `None` = missing or Unknown.
    pub applied: Option<bool>,
    /// Apply error message.
    pub applied_message: String,
    /// Health of the manifest on the member (WE-7: kinds without a health notion are
    /// Healthy; the member reports it).
    pub health: ResourceHealth,
    /// Ready replicas reported by the member.
    pub ready_replicas: i32,
}

/// WE-8: the aggregated status items (sorted by cluster) and whether the binding is
/// `FullyApplied`.
pub fn aggregate_status(
    spec: &ResourceBindingSpec,
    works: &[WorkObservation],
) -> (Vec<AggregatedStatusItem>, bool) {
    let kept = kept_clusters(spec);
    let mut items: Vec<AggregatedStatusItem> = works
        .iter()
        .filter(|w| !w.deleting)
        .map(|w| match w.applied {
            Some(true) => AggregatedStatusItem {
                ready_replicas: w.ready_replicas,
                ..AggregatedStatusItem::applied(&w.cluster, w.health)
            },
            _ => AggregatedStatusItem {
                cluster_name: w.cluster.clone(),
                applied: false,
                applied_message: w.applied_message.clone(),
                health: ResourceHealth::Unknown,
                ready_replicas: 0,
                status: String::new(),
            },
        })
        .collect();
    items.sort_by(|a, b| a.cluster_name.cmp(&b.cluster_name));
    let fully_applied = !kept.is_empty()
        && items.len() == kept.len()
        && items
            .iter()
            .all(|i| i.applied && kept.contains(&i.cluster_name));
    (items, fully_applied)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::types::GracefulEvictionTask;

    fn spec(
        clusters: &[(&str, i32)],
        tasks: &[(&str, PurgeMode)],
        required: &[&str],
    ) -> ResourceBindingSpec {
        ResourceBindingSpec {
            clusters: clusters
                .iter()
                .map(|(n, r)| TargetCluster::new(*n, *r))
                .collect(),
            graceful_eviction_tasks: tasks
                .iter()
                .map(|(c, m)| GracefulEvictionTask {
                    from_cluster: (*c).into(),
                    purge_mode: *m,
                    ..Default::default()
                })
                .collect(),
            required_by_clusters: required.iter().map(|s| s.to_string()).collect(),
            ..Default::default()
        }
    }

    fn set(names: &[&str]) -> BTreeSet<String> {
        names.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn we_2_kept_clusters_table() {
        use PurgeMode::*;
        let cases = [
            ("targets only", spec(&[("a", 1)], &[], &[]), set(&["a"])),
            (
                "requiredBy added",
                spec(&[("a", 1)], &[], &["b"]),
                set(&["a", "b"]),
            ),
            (
                "Gracefully task kept",
                spec(&[("a", 1)], &[("m1", Gracefully)], &[]),
                set(&["a", "m1"]),
            ),
            (
                "Never task kept",
                spec(&[], &[("m1", Never)], &[]),
                set(&["m1"]),
            ),
            (
                "Directly task dropped",
                spec(&[("a", 1)], &[("m1", Directly)], &[]),
                set(&["a"]),
            ),
            ("empty", spec(&[], &[], &[]), set(&[])),
        ];
        for (name, s, want) in cases {
            assert_eq!(kept_clusters(&s), want, "{name}");
        }
    }

    #[test]
    fn we_3_plan_table() {
        use PurgeMode::*;
        let existing = |names: &[&str]| names.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        // orphans deleted, targets ensured
        let p = plan_works(&spec(&[("m2", 3)], &[], &[]), &existing(&["m1", "m2"]));
        assert_eq!(p.delete, vec!["m1"]);
        assert_eq!(p.ensure, vec![TargetCluster::new("m2", 3)]);
        // Gracefully task: held, not deleted, not ensured
        let p = plan_works(
            &spec(&[("m2", 3)], &[("m1", Gracefully)], &[]),
            &existing(&["m1", "m2"]),
        );
        assert_eq!(
            (p.delete.len(), p.hold.clone()),
            (0, vec!["m1".to_string()])
        );
        assert_eq!(p.ensure, vec![TargetCluster::new("m2", 3)]);
        // Directly task with its Work still present: delete it and wait, ensure nothing
        let p = plan_works(
            &spec(&[("m2", 3)], &[("m1", Directly)], &[]),
            &existing(&["m1", "m2"]),
        );
        assert_eq!(p.delete, vec!["m1"]);
        assert_eq!(p.wait_for_directly, vec!["m1"]);
        assert!(p.ensure.is_empty());
        // Directly task whose Work is gone: proceed
        let p = plan_works(
            &spec(&[("m2", 3)], &[("m1", Directly)], &[]),
            &existing(&["m2"]),
        );
        assert!(p.wait_for_directly.is_empty());
        assert_eq!(p.ensure, vec![TargetCluster::new("m2", 3)]);
        // requiredBy after targets, deduplicated
        let p = plan_works(&spec(&[("b", 1), ("a", 2)], &[], &["a", "c"]), &[]);
        assert_eq!(
            p.ensure,
            vec![
                TargetCluster::new("b", 1),
                TargetCluster::new("a", 2),
                TargetCluster::new("c", 0)
            ]
        );
    }

    #[test]
    fn we_5_work_names_match_karmada() {
        assert_eq!(
            work_name("default", "nginx", "Deployment"),
            "nginx-687f7fb96f"
        );
        assert_eq!(
            work_name("", "karmada-impersonator", "ClusterRole"),
            "karmada-impersonator-7cbb6bd5c9"
        );
        // ':' becomes '.', upper case is lowered
        let n = work_name("default", "system:Foo", "ClusterRole");
        assert!(n.starts_with("system.foo-"), "{n}");
        assert_eq!(fnv32a_str(""), 0x811c_9dc5);
    }

    #[test]
    fn we_8_aggregate_status_table() {
        use PurgeMode::*;
        let obs = |c: &str, applied: Option<bool>, health| WorkObservation {
            cluster: c.into(),
            applied,
            health,
            applied_message: if applied == Some(false) {
                "boom".into()
            } else {
                String::new()
            },
            ..Default::default()
        };
        let s = spec(&[("m2", 3)], &[("m1", Gracefully)], &[]);
        let works = [
            obs("m2", Some(true), ResourceHealth::Healthy),
            obs("m1", Some(true), ResourceHealth::Healthy),
        ];
        let (items, full) = aggregate_status(&s, &works);
        assert_eq!(
            items
                .iter()
                .map(|i| i.cluster_name.as_str())
                .collect::<Vec<_>>(),
            vec!["m1", "m2"],
            "sorted, evicted-but-kept included"
        );
        assert!(full);
        // 8.1 not applied → health Unknown, message kept
        let works = [
            obs("m2", Some(false), ResourceHealth::Healthy),
            obs("m1", None, ResourceHealth::Healthy),
        ];
        let (items, full) = aggregate_status(&s, &works);
        assert!(!full);
        assert!(
            items
                .iter()
                .all(|i| !i.applied && i.health == ResourceHealth::Unknown)
        );
        assert_eq!(items[1].applied_message, "boom");
        // deleting Works are skipped; missing Work → not fully applied
        let mut deleting = obs("m1", Some(true), ResourceHealth::Healthy);
        deleting.deleting = true;
        let (items, full) = aggregate_status(
            &s,
            &[obs("m2", Some(true), ResourceHealth::Healthy), deleting],
        );
        assert_eq!((items.len(), full), (1, false));
        // an item outside the kept set → not fully applied
        let (_, full) = aggregate_status(
            &spec(&[("m2", 1)], &[], &[]),
            &[obs("m9", Some(true), ResourceHealth::Healthy)],
        );
        assert!(!full);
        // 8.4 empty kept set is never fully applied
        assert!(!aggregate_status(&spec(&[], &[], &[]), &[]).1);
    }
}
