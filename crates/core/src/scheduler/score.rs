//! SC-7 scores, SC-8 available replicas and SC-9 cluster ordering.

use std::cmp::Ordering;

use crate::capacity::{self, ResourceList};
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
/// the general estimator over the cluster's resource summary (ES-2): the pods still
/// allowed, bounded by each resource one replica requests. Flotilla: a cluster whose summary
/// has not been collected yet has no estimate and falls back to `spec.replicas`, like
/// Karmada's leftover `MaxInt32` (Karmada's general estimator answers 0 there); a Ready
/// member always has one (CH-5.2), so this only holds until the first collection.
pub fn allocatable_replicas(
    cluster: &Cluster,
    replicas: i32,
    is_workload: bool,
    requests: &ResourceList,
) -> i64 {
    if !is_workload {
        return UNLIMITED_REPLICAS;
    }
    match &cluster.status.resource_summary {
        Some(summary) => {
            capacity::max_replicas(Some(summary), &cluster.spec.resource_models, requests)
        }
        None => i64::from(replicas),
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
    /// Score and capacity of one feasible cluster (SC-7, SC-8) for `demand`.
    pub fn new(cluster: &'a Cluster, previous: &[TargetCluster], demand: &Demand<'_>) -> Self {
        let allocatable = allocatable_replicas(
            cluster,
            demand.replicas,
            demand.is_workload,
            demand.requests,
        );
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

/// What the binding asks of each cluster's capacity (SC-8): its replicas, whether it is a
/// workload (SC-14.1), and what one replica requests (ES-1).
#[derive(Clone, Copy, Debug)]
pub struct Demand<'a> {
    /// `spec.replicas`.
    pub replicas: i32,
    /// Whether the binding is a workload (SC-14.1); non-workloads are not estimated.
    pub is_workload: bool,
    /// `spec.replicaRequirements.resourceRequest` (empty when none).
    pub requests: &'a ResourceList,
}

/// SC-7/SC-8/SC-9: details of the feasible clusters, sorted per SC-9.
pub fn cluster_details<'a>(
    feasible: &[&'a Cluster],
    previous: &[TargetCluster],
    demand: &Demand<'_>,
) -> Vec<ClusterDetail<'a>> {
    let mut details: Vec<ClusterDetail<'a>> = feasible
        .iter()
        .map(|c| ClusterDetail::new(c, previous, demand))
        .collect();
    details.sort_by(compare_clusters);
    details
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::capacity::Summary;
    use crate::types::ObjectMeta;

    /// A summary of `pods` free pods and nothing else (what the scheduler tests need).
    pub(crate) fn pods_only(pods: i64) -> Summary {
        Summary::with_pods(pods)
    }

    /// A cluster `name` with room for `allocatable` more pods; `None`: no summary yet.
    pub(crate) fn cluster(name: &str, allocatable: Option<i64>) -> Cluster {
        let mut c = Cluster {
            meta: ObjectMeta {
                name: name.to_owned(),
                ..Default::default()
            },
            ..Default::default()
        };
        c.status.resource_summary = allocatable.map(pods_only);
        c
    }

    fn list(pairs: &[(&str, i64)]) -> ResourceList {
        pairs.iter().map(|(k, v)| ((*k).to_owned(), *v)).collect()
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
            summary: Option<Summary>,
            replicas: i32,
            workload: bool,
            requests: ResourceList,
            previous: Vec<TargetCluster>,
            want_allocatable: i64,
            want_available: i64,
        }
        let cpu8 = Summary {
            allocatable: list(&[("cpu", 8000), ("memory", 32 << 30), ("pods", 110)]),
            allocated: list(&[("cpu", 2500), ("memory", 4 << 30), ("pods", 10)]),
            allocating: list(&[("cpu", 500), ("pods", 1)]),
            ..Default::default()
        };
        let case = |name, summary, requests| Case {
            name,
            summary,
            replicas: 3,
            workload: true,
            requests,
            previous: vec![],
            want_allocatable: 0,
            want_available: 0,
        };
        let cases = [
            Case {
                want_allocatable: 7,
                want_available: 7,
                ..case("pods only", Some(pods_only(7)), list(&[]))
            },
            Case {
                want_allocatable: 99,
                want_available: 99,
                ..case(
                    "no requests → the pods still allowed",
                    Some(cpu8.clone()),
                    list(&[]),
                )
            },
            Case {
                // (8000 − 2500 − 500) / 1000 = 5 < 99 pods
                want_allocatable: 5,
                want_available: 5,
                ..case("cpu bounds it", Some(cpu8.clone()), list(&[("cpu", 1000)]))
            },
            Case {
                // memory: 28 GiB free / 10 GiB = 2; cpu: 5000 / 100 = 50
                want_allocatable: 2,
                want_available: 2,
                ..case(
                    "the least resource wins",
                    Some(cpu8.clone()),
                    list(&[("cpu", 100), ("memory", 10 << 30)]),
                )
            },
            case(
                "a resource the cluster lacks → 0",
                Some(cpu8.clone()),
                list(&[("cpu", 100), ("nvidia.com/gpu", 1)]),
            ),
            Case {
                want_allocatable: 3,
                want_available: 3,
                ..case(
                    "no summary yet → spec.replicas",
                    None,
                    list(&[("cpu", 1000)]),
                )
            },
            case("zero capacity", Some(pods_only(0)), list(&[])),
            Case {
                replicas: 9,
                previous: vec![TargetCluster::new("m1", 6), TargetCluster::new("m2", 1)],
                want_allocatable: 4,
                want_available: 10,
                ..case("plus assigned", Some(pods_only(4)), list(&[]))
            },
            Case {
                replicas: 0,
                workload: false,
                want_allocatable: UNLIMITED_REPLICAS,
                want_available: UNLIMITED_REPLICAS,
                ..case("non-workload keeps MaxInt32", Some(pods_only(4)), list(&[]))
            },
        ];
        for c in cases {
            let mut cl = cluster("m1", None);
            cl.status.resource_summary = c.summary;
            let demand = Demand {
                replicas: c.replicas,
                is_workload: c.workload,
                requests: &c.requests,
            };
            let d = ClusterDetail::new(&cl, &c.previous, &demand);
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
        let none = ResourceList::new();
        let demand = Demand {
            replicas: 1,
            is_workload: true,
            requests: &none,
        };
        let got = cluster_details(&[&a, &b, &c, &d], &prev, &demand);
        let names: Vec<&str> = got.iter().map(|d| d.name()).collect();
        // d scores 100; b and c tie on score and capacity → name; a has least capacity.
        assert_eq!(names, ["d", "b", "c", "a"]);
        assert!(cluster_details(&[], &prev, &demand).is_empty());
    }
}
