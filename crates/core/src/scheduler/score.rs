//! SC-7 scores, SC-8 available replicas and SC-9 cluster ordering.

use std::cmp::Ordering;

use crate::types::{Cluster, TargetCluster};

/// The score of a cluster that already runs the binding (ClusterLocality, SC-7).
pub const MAX_CLUSTER_SCORE: i64 = 100;
/// The lowest score (ClusterAffinity always scores it, SC-7).
pub const MIN_CLUSTER_SCORE: i64 = 0;
/// Karmada's "no estimate" capacity: `MaxInt32` (SC-8). Only non-workloads keep it.
pub const UNLIMITED_REPLICAS: i64 = i32::MAX as i64;

/// SC-7 ClusterLocality: 100 when the cluster is in the current result, else 0 (so 0 for
/// every cluster while the result is empty).
pub fn cluster_locality_score(cluster: &str, previous: &[TargetCluster]) -> i64 {
    if previous.iter().any(|t| t.name == cluster) {
        MAX_CLUSTER_SCORE
    } else {
        MIN_CLUSTER_SCORE
    }
}

/// SC-7: the sum of the score plugins: ClusterLocality plus ClusterAffinity (always 0), so
/// every score is 0 or 100, which makes selection sticky.
pub fn score_cluster(cluster: &str, previous: &[TargetCluster]) -> i64 {
    cluster_locality_score(cluster, previous) + MIN_CLUSTER_SCORE
}

/// Replicas of `cluster` in `previous` (0 when absent).
pub fn assigned_replicas(cluster: &str, previous: &[TargetCluster]) -> i64 {
    previous
        .iter()
        .filter(|t| t.name == cluster)
        .map(|t| i64::from(t.replicas))
        .sum()
}

/// SC-8 `AllocatableReplicas`: how many more replicas fit on the cluster.
///
/// Non-workloads keep Karmada's initial `MaxInt32` ([`UNLIMITED_REPLICAS`]). Workloads take
/// `status.allocatable_replicas` (Flotilla's single estimator); no estimate (`None`) or a
/// negative one (Karmada ignores −1 results) falls back to `spec.replicas`, like Karmada's
/// leftover `MaxInt32`.
pub fn allocatable_replicas(cluster: &Cluster, replicas: i32, is_workload: bool) -> i64 {
    if !is_workload {
        return UNLIMITED_REPLICAS;
    }
    match cluster.status.allocatable_replicas {
        Some(n) if n >= 0 => n,
        _ => i64::from(replicas),
    }
}

/// What the selection and division steps know about a feasible cluster.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ClusterDetail<'a> {
    /// The cluster.
    pub cluster: &'a Cluster,
    /// SC-7 score.
    pub score: i64,
    /// SC-8 allocatable replicas.
    pub allocatable_replicas: i64,
    /// SC-8 available replicas: allocatable plus the replicas already assigned here.
    pub available_replicas: i64,
}

// === impl ClusterDetail ===

impl<'a> ClusterDetail<'a> {
    /// Score and capacity of one feasible cluster (SC-7, SC-8).
    pub fn new(
        cluster: &'a Cluster,
        previous: &[TargetCluster],
        replicas: i32,
        is_workload: bool,
    ) -> Self {
        let allocatable = allocatable_replicas(cluster, replicas, is_workload);
        ClusterDetail {
            cluster,
            score: score_cluster(cluster.name(), previous),
            allocatable_replicas: allocatable,
            available_replicas: allocatable
                .saturating_add(assigned_replicas(cluster.name(), previous)),
        }
    }

    /// The cluster's name.
    pub fn name(&self) -> &'a str {
        self.cluster.name()
    }
}

/// SC-9: the order used everywhere: overflow order ascending (always 0 here: Flotilla has no
/// overflow affinities, see SC-20), score descending, available replicas descending, name
/// ascending.
pub fn compare_clusters(a: &ClusterDetail<'_>, b: &ClusterDetail<'_>) -> Ordering {
    b.score
        .cmp(&a.score)
        .then_with(|| b.available_replicas.cmp(&a.available_replicas))
        .then_with(|| a.name().cmp(b.name()))
}

/// SC-7/SC-8/SC-9: details of the feasible clusters, sorted per SC-9.
pub fn cluster_details<'a>(
    feasible: &[&'a Cluster],
    previous: &[TargetCluster],
    replicas: i32,
    is_workload: bool,
) -> Vec<ClusterDetail<'a>> {
    let mut details: Vec<ClusterDetail<'a>> = feasible
        .iter()
        .map(|c| ClusterDetail::new(c, previous, replicas, is_workload))
        .collect();
    details.sort_by(compare_clusters);
    details
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::types::ObjectMeta;

    pub(crate) fn cluster(name: &str, allocatable: Option<i64>) -> Cluster {
        let mut c = Cluster {
            meta: ObjectMeta {
                name: name.to_owned(),
                ..Default::default()
            },
            ..Default::default()
        };
        c.status.allocatable_replicas = allocatable;
        c
    }

    #[test]
    fn sc_7_cluster_locality_score() {
        let prev = [TargetCluster::new("m1", 2)];
        assert_eq!(score_cluster("m1", &prev), 100);
        assert_eq!(score_cluster("m2", &prev), 0);
        assert_eq!(score_cluster("m1", &[]), 0, "empty result → 0 for everyone");
        let zero = [TargetCluster::new("m1", 0)];
        assert_eq!(
            score_cluster("m1", &zero),
            100,
            "a 0-replica target is still in the result"
        );
    }

    #[test]
    fn sc_8_available_replicas() {
        struct Case {
            name: &'static str,
            allocatable: Option<i64>,
            replicas: i32,
            workload: bool,
            previous: Vec<TargetCluster>,
            want_allocatable: i64,
            want_available: i64,
        }
        let cases = [
            Case {
                name: "estimate",
                allocatable: Some(7),
                replicas: 3,
                workload: true,
                previous: vec![],
                want_allocatable: 7,
                want_available: 7,
            },
            Case {
                name: "no estimate → spec.replicas",
                allocatable: None,
                replicas: 3,
                workload: true,
                previous: vec![],
                want_allocatable: 3,
                want_available: 3,
            },
            Case {
                name: "-1 ignored → spec.replicas",
                allocatable: Some(-1),
                replicas: 5,
                workload: true,
                previous: vec![],
                want_allocatable: 5,
                want_available: 5,
            },
            Case {
                name: "zero capacity",
                allocatable: Some(0),
                replicas: 5,
                workload: true,
                previous: vec![],
                want_allocatable: 0,
                want_available: 0,
            },
            Case {
                name: "plus assigned",
                allocatable: Some(4),
                replicas: 9,
                workload: true,
                previous: vec![TargetCluster::new("m1", 6), TargetCluster::new("m2", 1)],
                want_allocatable: 4,
                want_available: 10,
            },
            Case {
                name: "non-workload keeps MaxInt32",
                allocatable: Some(4),
                replicas: 0,
                workload: false,
                previous: vec![],
                want_allocatable: UNLIMITED_REPLICAS,
                want_available: UNLIMITED_REPLICAS,
            },
        ];
        for c in cases {
            let cl = cluster("m1", c.allocatable);
            let d = ClusterDetail::new(&cl, &c.previous, c.replicas, c.workload);
            assert_eq!(d.allocatable_replicas, c.want_allocatable, "{}", c.name);
            assert_eq!(d.available_replicas, c.want_available, "{}", c.name);
        }
    }

    #[test]
    fn sc_9_cluster_ordering() {
        let a = cluster("a", Some(1));
        let b = cluster("b", Some(5));
        let c = cluster("c", Some(5));
        let d = cluster("d", Some(0));
        let prev = [TargetCluster::new("d", 0)];
        let got = cluster_details(&[&a, &b, &c, &d], &prev, 1, true);
        let names: Vec<&str> = got.iter().map(|d| d.name()).collect();
        // d scores 100; b and c tie on score and capacity → name; a has least capacity.
        assert_eq!(names, ["d", "b", "c", "a"]);
        assert!(cluster_details(&[], &prev, 1, true).is_empty());
    }
}
