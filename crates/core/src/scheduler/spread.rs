//! SC-10..SC-13: spread-constraint selection (`SelectBestClusters`).
//!
//! ```text
//!   sorted candidates ──► no constraint / static weight ──► all (SC-10.1)
//!                    └──► region constraint ──► region groups (SC-13 score) ──► DFS (SC-12)
//!                    └──► cluster constraint ──► first n, swap for capacity (SC-11)
//! ```

use std::collections::BTreeMap;

use thiserror::Error;

use super::score::{ClusterDetail, compare_clusters};
use crate::types::{
    Placement, ReplicaDivisionPreference, ReplicaSchedulingType, SpreadConstraint, SpreadField,
};

/// Why no cluster set satisfies the spread constraints. Messages are Karmada's.
#[derive(Clone, Debug, PartialEq, Eq, Error)]
pub enum SpreadError {
    /// SC-11.1.
    #[error("the number of feasible clusters is less than spreadConstraint.MinGroups")]
    FewerClustersThanMinGroups {
        /// Feasible clusters.
        feasible: usize,
        /// The cluster constraint's minGroups.
        min_groups: i32,
    },
    /// SC-11.5: even the best swap leaves the picked clusters short of capacity.
    #[error("no enough resource when selecting {selected} clusters")]
    NotEnoughResource {
        /// How many clusters were picked.
        selected: usize,
        /// Replicas needed.
        need: i64,
    },
    /// SC-11.2: maxGroups is 0 (unset; Karmada does not default it, PR #4617 open), so no
    /// cluster is picked and scheduling fails.
    #[error("no cluster selected: spreadConstraint.MaxGroups is {max_groups}")]
    NoClusterSelected {
        /// The cluster constraint's maxGroups.
        max_groups: i32,
    },
    /// SC-12.1.
    #[error("the number of feasible region is less than spreadConstraint.MinGroups")]
    FewerRegionsThanMinGroups {
        /// Feasible regions.
        regions: usize,
        /// The region constraint's minGroups.
        min_groups: i32,
    },
    /// SC-12.5: no region combination satisfies both constraints.
    #[error("the number of clusters is less than the cluster spreadConstraint.MinGroups")]
    NoRegionCombination,
    /// SC-10.3: zone/provider/label constraints without a region or cluster constraint.
    #[error("just support cluster and region spread constraint")]
    UnsupportedConstraint,
}

/// How many replicas the selection must be able to hold (SC-10.2). Replaces Karmada's −1.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NeedReplicas {
    /// Capacity is not checked (nil replicaScheduling or Duplicated).
    IgnoreCapacity,
    /// The picked clusters' available replicas must add up to at least this.
    AtLeast(i64),
}

/// A group (a region, or a cluster in by-cluster terms) for the DFS of SC-12.3.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GroupInfo {
    /// Group name.
    pub name: String,
    /// What counts towards the target (clusters in the region).
    pub value: i64,
    /// The group's score (SC-13).
    pub weight: i64,
}

/// A region with its score (SC-13) and its clusters in SC-9 order.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RegionGroup<'a> {
    /// Region name.
    pub name: String,
    /// SC-13 group score.
    pub score: i64,
    /// The region's clusters, sorted per SC-9.
    pub clusters: Vec<ClusterDetail<'a>>,
}

/// Whether the placement is Duplicated for grouping purposes: no replicaScheduling, or
/// type Duplicated (PD-2).
fn is_duplicated(placement: &Placement) -> bool {
    placement
        .replica_scheduling
        .as_ref()
        .is_none_or(|r| r.replica_scheduling_type == ReplicaSchedulingType::Duplicated)
}

/// SC-10.1: the static-weight strategy ignores spread constraints: Divided + Weighted (an
/// empty preference is Weighted, PD-1.3) with a nil weightPreference, or with a non-empty
/// staticWeightList and no dynamicWeight.
pub fn spread_ignored_for_static_weight(placement: &Placement) -> bool {
    let Some(rs) = &placement.replica_scheduling else {
        return false;
    };
    if rs.replica_scheduling_type != ReplicaSchedulingType::Divided
        || rs.replica_division_preference == Some(ReplicaDivisionPreference::Aggregated)
    {
        return false;
    }
    match &rs.weight_preference {
        None => true,
        Some(w) => !w.static_weight_list.is_empty() && w.dynamic_weight.is_none(),
    }
}

/// SC-10.2: the replicas the selection must hold.
pub fn need_replicas(placement: &Placement, replicas: i32) -> NeedReplicas {
    if is_duplicated(placement) {
        NeedReplicas::IgnoreCapacity
    } else {
        NeedReplicas::AtLeast(i64::from(replicas))
    }
}

/// SC-13: the score of a group (region, zone or provider) of clusters in SC-9 order.
///
/// Duplicated: `valid × 1000 + Σscore(valid) / valid` over clusters whose available replicas
/// cover `replicas` (0 when none). Divided: target = ⌈replicas / field_min_groups⌉; walk the
/// clusters accumulating until at least max(cluster_min_groups, field_min_groups) clusters
/// and the target are reached; short → `Σavailable × 1000 + Σscore / #clusters`, else
/// `target × 1000 + Σscore / count` (integer division). A field minGroups below 1 counts as
/// 1 (PD-1.2 defaults it to 1; Karmada would divide by zero).
pub fn group_score(
    clusters: &[ClusterDetail<'_>],
    replicas: i32,
    duplicated: bool,
    field_min_groups: i32,
    cluster_min_groups: i32,
) -> i64 {
    const WEIGHT_UNIT: i64 = 1000;
    let replicas = i64::from(replicas);
    if duplicated {
        let valid: Vec<&ClusterDetail<'_>> = clusters
            .iter()
            .filter(|c| c.available_replicas >= replicas)
            .collect();
        if valid.is_empty() {
            return 0;
        }
        let count = valid.len() as i64;
        let sum: i64 = valid.iter().map(|c| c.score).sum();
        return count * WEIGHT_UNIT + sum / count;
    }
    if clusters.is_empty() {
        return 0;
    }
    let field_min = i64::from(field_min_groups.max(1));
    let target = (replicas + field_min - 1).div_euclid(field_min);
    let cluster_min = i64::from(cluster_min_groups).max(field_min);
    let (mut available, mut score, mut count) = (0i64, 0i64, 0i64);
    for c in clusters {
        available = available.saturating_add(c.available_replicas);
        score += c.score;
        count += 1;
        if count >= cluster_min && available >= target {
            break;
        }
    }
    if available < target {
        available.saturating_mul(WEIGHT_UNIT) + score / clusters.len() as i64
    } else {
        target.saturating_mul(WEIGHT_UNIT) + score / count
    }
}

/// One feasible combination of groups found by the DFS.
#[derive(Clone, Debug)]
struct Path {
    /// Discovery order, 1-based.
    id: usize,
    /// Indices into the sorted groups, re-sorted by weight desc, name asc.
    members: Vec<usize>,
    weight: i64,
    value: i64,
}

/// SC-12.3/SC-12.4: Karmada's `selectGroups`: the best combination of between `min` and
/// `max` groups whose values add up to at least `target`, in chosen order (weight desc,
/// name asc); `None` when there is none.
///
/// Groups are explored sorted by value asc, weight desc, name asc; a path is recorded as soon
/// as it qualifies (it stops growing) and pruned at `max`. The best path has the largest
/// weight, then the largest value, then the smallest id; then every later-ranked path that
/// is a strict prefix of the current best replaces it. (When there are exactly `min` groups
/// this explores only the full set, as SC-12.3 says.)
pub fn select_groups(
    groups: &[GroupInfo],
    min: i32,
    max: i32,
    target: i64,
) -> Option<Vec<GroupInfo>> {
    if groups.is_empty() {
        return None;
    }
    let mut sorted: Vec<&GroupInfo> = groups.iter().collect();
    sorted.sort_by(|a, b| {
        a.value
            .cmp(&b.value)
            .then_with(|| b.weight.cmp(&a.weight))
            .then_with(|| a.name.cmp(&b.name))
    });

    struct Search<'g> {
        groups: Vec<&'g GroupInfo>,
        min: i64,
        max: i64,
        target: i64,
        paths: Vec<Path>,
        stack: Vec<usize>,
    }

    impl Search<'_> {
        fn dfs(&mut self, sum: i64, begin: usize) {
            let len = self.stack.len() as i64;
            if sum >= self.target && len >= self.min && len <= self.max {
                let mut members = self.stack.clone();
                members.sort_by(|&a, &b| {
                    let (ga, gb) = (self.groups[a], self.groups[b]);
                    gb.weight
                        .cmp(&ga.weight)
                        .then_with(|| ga.name.cmp(&gb.name))
                });
                self.paths.push(Path {
                    id: self.paths.len() + 1,
                    weight: members.iter().map(|&i| self.groups[i].weight).sum(),
                    value: members.iter().map(|&i| self.groups[i].value).sum(),
                    members,
                });
                return;
            }
            if len >= self.max {
                return;
            }
            for i in begin..self.groups.len() {
                self.stack.push(i);
                let value = self.groups[i].value;
                self.dfs(sum.saturating_add(value), i + 1);
                self.stack.pop();
            }
        }
    }

    let mut search = Search {
        groups: sorted,
        min: i64::from(min),
        max: i64::from(max),
        target,
        paths: Vec::new(),
        stack: Vec::new(),
    };
    search.dfs(0, 0);
    let Search {
        groups: sorted,
        mut paths,
        ..
    } = search;
    paths.sort_by(|a, b| {
        b.weight
            .cmp(&a.weight)
            .then_with(|| b.value.cmp(&a.value))
            .then_with(|| a.id.cmp(&b.id))
    });
    let mut ranked = paths.into_iter();
    let mut best = ranked.next()?;
    for candidate in ranked {
        let is_strict_prefix = candidate.members.len() < best.members.len()
            && candidate
                .members
                .iter()
                .zip(&best.members)
                .all(|(&c, &b)| sorted[c].name == sorted[b].name);
        if is_strict_prefix {
            best = candidate;
        }
    }
    Some(best.members.iter().map(|&i| sorted[i].clone()).collect())
}

/// SC-11: select by cluster. `clusters` must be in SC-9 order.
///
/// Fewer clusters than minGroups → error; n = min(#clusters, maxGroups) (maxGroups 0 → no
/// cluster → error); ignoring capacity → the first n; else start from the first n and,
/// walking the picks from last to first, swap a pick for the unpicked cluster with the most
/// available replicas strictly above the pick's (the swapped-out cluster goes back to the
/// end of the unpicked ones) until the picks hold `need`; still short → error.
pub fn select_clusters_by_cluster<'a>(
    constraint: &SpreadConstraint,
    clusters: &[ClusterDetail<'a>],
    need: NeedReplicas,
) -> Result<Vec<ClusterDetail<'a>>, SpreadError> {
    let total = clusters.len();
    if (total as i64) < i64::from(constraint.min_groups) {
        return Err(SpreadError::FewerClustersThanMinGroups {
            feasible: total,
            min_groups: constraint.min_groups,
        });
    }
    let n = usize::try_from(constraint.max_groups)
        .unwrap_or(0)
        .min(total);
    if n == 0 {
        return Err(SpreadError::NoClusterSelected {
            max_groups: constraint.max_groups,
        });
    }
    let mut picked: Vec<ClusterDetail<'a>> = clusters[..n].to_vec();
    let NeedReplicas::AtLeast(need) = need else {
        return Ok(picked);
    };
    let mut rest: Vec<ClusterDetail<'a>> = clusters[n..].to_vec();
    let holds = |picked: &[ClusterDetail<'_>]| {
        picked
            .iter()
            .fold(0i64, |acc, c| acc.saturating_add(c.available_replicas))
            >= need
    };
    let mut idx = n;
    while !holds(&picked) && idx > 0 {
        idx -= 1;
        let mut best: Option<usize> = None;
        let mut most = picked[idx].available_replicas;
        for (j, c) in rest.iter().enumerate() {
            if c.available_replicas > most {
                most = c.available_replicas;
                best = Some(j);
            }
        }
        if let Some(j) = best {
            let replacement = rest.remove(j);
            rest.push(std::mem::replace(&mut picked[idx], replacement));
        }
    }
    if holds(&picked) {
        Ok(picked)
    } else {
        Err(SpreadError::NotEnoughResource { selected: n, need })
    }
}

/// SC-13 + SC-10.4: group the (SC-9 ordered) clusters by region and score each region.
/// Clusters without a region are left out (SC-6.5 already filtered them).
pub fn group_by_region<'a>(
    clusters: &[ClusterDetail<'a>],
    replicas: i32,
    duplicated: bool,
    region_min_groups: i32,
    cluster_min_groups: i32,
) -> Vec<RegionGroup<'a>> {
    let mut by_name: BTreeMap<&str, Vec<ClusterDetail<'a>>> = BTreeMap::new();
    for c in clusters {
        if !c.cluster.spec.region.is_empty() {
            by_name
                .entry(c.cluster.spec.region.as_str())
                .or_default()
                .push(*c);
        }
    }
    by_name
        .into_iter()
        .map(|(name, members)| RegionGroup {
            name: name.to_owned(),
            score: group_score(
                &members,
                replicas,
                duplicated,
                region_min_groups,
                cluster_min_groups,
            ),
            clusters: members,
        })
        .collect()
}

/// SC-12: select by region. `regions` carry their SC-13 scores and SC-9 ordered clusters.
///
/// Fewer regions than the region minGroups → error; choose regions with [`select_groups`]
/// (value = #clusters, target = the cluster minGroups); take the first cluster of each chosen
/// region (in chosen order), then fill up to min(#clusters of the chosen regions, cluster
/// maxGroups) with the remaining ones in SC-9 order. Capacity is not checked.
pub fn select_clusters_by_region<'a>(
    region_constraint: &SpreadConstraint,
    cluster_constraint: &SpreadConstraint,
    regions: &[RegionGroup<'a>],
) -> Result<Vec<ClusterDetail<'a>>, SpreadError> {
    if (regions.len() as i64) < i64::from(region_constraint.min_groups) {
        return Err(SpreadError::FewerRegionsThanMinGroups {
            regions: regions.len(),
            min_groups: region_constraint.min_groups,
        });
    }
    let groups: Vec<GroupInfo> = regions
        .iter()
        .map(|r| GroupInfo {
            name: r.name.clone(),
            value: r.clusters.len() as i64,
            weight: r.score,
        })
        .collect();
    let chosen = select_groups(
        &groups,
        region_constraint.min_groups,
        region_constraint.max_groups,
        i64::from(cluster_constraint.min_groups),
    )
    .ok_or(SpreadError::NoRegionCombination)?;

    let mut selected = Vec::new();
    let mut remaining = Vec::new();
    for group in &chosen {
        if let Some(region) = regions.iter().find(|r| r.name == group.name)
            && let Some((first, others)) = region.clusters.split_first()
        {
            selected.push(*first);
            remaining.extend_from_slice(others);
        }
    }
    let total = selected.len() + remaining.len();
    let need = usize::try_from(cluster_constraint.max_groups)
        .unwrap_or(0)
        .min(total);
    let rest = need.saturating_sub(selected.len());
    remaining.sort_by(compare_clusters);
    selected.extend(remaining.into_iter().take(rest));
    Ok(selected)
}

/// SC-10 `SelectBestClusters`: pick the clusters to divide over. `clusters` are the feasible
/// clusters in SC-9 order.
pub fn select_best_clusters<'a>(
    placement: &Placement,
    clusters: &[ClusterDetail<'a>],
    replicas: i32,
) -> Result<Vec<ClusterDetail<'a>>, SpreadError> {
    // SC-10.1.
    if placement.spread_constraints.is_empty() || spread_ignored_for_static_weight(placement) {
        return Ok(clusters.to_vec());
    }
    let by_field = |field: SpreadField| {
        placement
            .spread_constraints
            .iter()
            .find(|c| c.spread_by_field == Some(field))
    };
    let cluster_constraint = by_field(SpreadField::Cluster).cloned().unwrap_or_default();
    // SC-10.3: region first, then cluster.
    if let Some(region_constraint) = by_field(SpreadField::Region) {
        let regions = group_by_region(
            clusters,
            replicas,
            is_duplicated(placement),
            region_constraint.min_groups,
            cluster_constraint.min_groups,
        );
        return select_clusters_by_region(region_constraint, &cluster_constraint, &regions);
    }
    if by_field(SpreadField::Cluster).is_some() {
        return select_clusters_by_cluster(
            &cluster_constraint,
            clusters,
            need_replicas(placement, replicas),
        );
    }
    Err(SpreadError::UnsupportedConstraint)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::types::{
        Cluster, ClusterPreferences, ObjectMeta, ReplicaSchedulingStrategy, StaticClusterWeight,
    };

    fn cluster(name: &str, region: &str) -> Cluster {
        let mut c = Cluster {
            meta: ObjectMeta {
                name: name.to_owned(),
                ..Default::default()
            },
            ..Default::default()
        };
        c.spec.region = region.to_owned();
        c
    }

    /// `member1` … `member{n}`, without a region.
    fn members(n: usize) -> Vec<Cluster> {
        (1..=n)
            .map(|i| cluster(&format!("member{i}"), ""))
            .collect()
    }

    fn detail(c: &Cluster, score: i64, available: i64) -> ClusterDetail<'_> {
        ClusterDetail {
            cluster: c,
            score,
            allocatable_replicas: available,
            available_replicas: available,
        }
    }

    /// Details of the first clusters of `cl`, all with `score`, one per `available` count.
    fn same_score<'a>(cl: &'a [Cluster], score: i64, available: &[i64]) -> Vec<ClusterDetail<'a>> {
        cl.iter()
            .zip(available)
            .map(|(c, a)| detail(c, score, *a))
            .collect()
    }

    /// Details of the first clusters of `cl`, one per `(score, available)`.
    fn details<'a>(cl: &'a [Cluster], list: &[(i64, i64)]) -> Vec<ClusterDetail<'a>> {
        cl.iter()
            .zip(list)
            .map(|(c, (score, available))| detail(c, *score, *available))
            .collect()
    }

    fn names(list: &[ClusterDetail<'_>]) -> Vec<String> {
        list.iter().map(|d| d.name().to_owned()).collect()
    }

    /// Assert that a selection picked the clusters `want` names, in order, or failed as it says.
    fn assert_picked(
        got: Result<Vec<ClusterDetail<'_>>, SpreadError>,
        want: Result<Vec<&str>, SpreadError>,
        case: &str,
    ) {
        let want = want.map(|v| v.into_iter().map(str::to_owned).collect::<Vec<_>>());
        assert_eq!(got.map(|s| names(&s)), want, "{case}");
    }

    fn constraint(field: SpreadField, min: i32, max: i32) -> SpreadConstraint {
        SpreadConstraint {
            spread_by_field: Some(field),
            min_groups: min,
            max_groups: max,
            ..Default::default()
        }
    }

    /// Groups from `(name, value, weight)`.
    fn groups(list: &[(&str, i64, i64)]) -> Vec<GroupInfo> {
        list.iter()
            .map(|(name, value, weight)| GroupInfo {
                name: (*name).to_owned(),
                value: *value,
                weight: *weight,
            })
            .collect()
    }

    /// The names of the groups [`select_groups`] picks.
    fn selected(groups: &[GroupInfo], min: i32, max: i32, target: i64) -> Option<Vec<String>> {
        select_groups(groups, min, max, target).map(|g| g.into_iter().map(|g| g.name).collect())
    }

    #[test]
    fn sc_12_3_select_groups_dfs_example() {
        // Karmada's DFS comment: groups 2,3,6,7, target 7, min = max = 2
        // → feasible [2,6] [2,7] [3,6] [3,7] [6,7]; weights make [3,7] best.
        let groups = groups(&[("g2", 2, 10), ("g3", 3, 40), ("g6", 6, 20), ("g7", 7, 30)]);
        assert_eq!(
            selected(&groups, 2, 2, 7),
            Some(vec!["g3".to_owned(), "g7".to_owned()]),
            "weight desc order"
        );
        assert_eq!(
            select_groups(&groups, 2, 2, 100),
            None,
            "target unreachable"
        );
        assert_eq!(select_groups(&[], 1, 1, 1), None, "no groups");
        assert_eq!(
            select_groups(&groups, 1, 0, 1),
            None,
            "max 0 prunes everything"
        );
    }

    #[test]
    fn sc_12_4_strict_prefix_of_best_wins() {
        // G1 → G2 → G3 ranks first, but [G1, G2] (also feasible, lighter) is its prefix.
        // min 2, max 3, target 2: values 1 each; DFS stops growing at length 2, so build a
        // case where a longer path is heavier: G3 has value 0 so [G1,G2,G3]... qualifies only
        // when reached through a non-qualifying prefix.
        let groups = groups(&[("G1", 1, 50), ("G2", 1, 40), ("G3", 0, 30), ("G4", 2, 10)]);
        // target 2, min 1, max 3. Sorted by value: G3(0), G1(1), G2(1), G4(2).
        // Paths: G3 G1 G2 (w120, id1), G3 G4 (w40), G1 G2 (w90), G1 G4, G2 G4, G4 (w10).
        // Best by weight: [G1, G2, G3] (sorted by weight); [G1, G2] is its strict prefix.
        assert_eq!(
            selected(&groups, 1, 3, 2),
            Some(vec!["G1".to_owned(), "G2".to_owned()])
        );
    }

    fn region<'a>(name: &str, score: i64, clusters: Vec<ClusterDetail<'a>>) -> RegionGroup<'a> {
        RegionGroup {
            name: name.to_owned(),
            score,
            clusters,
        }
    }

    #[test]
    fn sc_12_7_region_more_than_min_example() {
        let cl: Vec<Cluster> = (1..=8)
            .map(|i| {
                let r = match i {
                    1 => "R1",
                    2..=4 => "R2",
                    5 | 6 => "R3",
                    7 => "R4",
                    _ => "R5",
                };
                cluster(&format!("member{i}"), r)
            })
            .collect();
        let regions = vec![
            region("R1", 70, details(&cl, &[(70, 40)])),
            region("R2", 40, details(&cl[1..], &[(40, 40), (40, 40), (40, 40)])),
            region("R3", 60, details(&cl[4..], &[(60, 40), (50, 60)])),
            region("R4", 70, details(&cl[6..], &[(70, 100)])),
            region("R5", 50, details(&cl[7..], &[(50, 50)])),
        ];
        let got = select_clusters_by_region(
            &constraint(SpreadField::Region, 1, 3),
            &constraint(SpreadField::Cluster, 6, 8),
            &regions,
        )
        .map(|s| names(&s));
        assert_eq!(
            got,
            Ok(vec![
                "member1", "member5", "member2", "member6", "member3", "member4"
            ]
            .into_iter()
            .map(str::to_owned)
            .collect())
        );
    }

    #[test]
    fn sc_12_select_by_region_table() {
        // Cases from Karmada's select_clusters_by_region_test.go.
        let cl: Vec<Cluster> = members(10);
        let two_regions = || {
            vec![
                region("R1", 100, details(&cl, &[(100, 40), (80, 40)])),
                region("R2", 80, details(&cl[2..], &[(80, 40), (80, 40), (60, 40)])),
            ]
        };
        struct Case<'a> {
            name: &'static str,
            region: SpreadConstraint,
            cluster: SpreadConstraint,
            regions: Vec<RegionGroup<'a>>,
            want: Result<Vec<&'static str>, SpreadError>,
        }
        let cases = [
            Case {
                name: "higher score region",
                region: constraint(SpreadField::Region, 1, 1),
                cluster: constraint(SpreadField::Cluster, 2, 2),
                regions: two_regions(),
                want: Ok(vec!["member1", "member2"]),
            },
            Case {
                name: "region with enough clusters",
                region: constraint(SpreadField::Region, 1, 1),
                cluster: constraint(SpreadField::Cluster, 3, 3),
                regions: two_regions(),
                want: Ok(vec!["member3", "member4", "member5"]),
            },
            Case {
                name: "enough clusters and higher score",
                region: constraint(SpreadField::Region, 2, 2),
                cluster: constraint(SpreadField::Cluster, 4, 5),
                regions: vec![
                    region("R1", 90, details(&cl, &[(90, 40)])),
                    region("R2", 70, details(&cl[1..], &[(70, 40), (60, 40), (30, 40)])),
                    region("R3", 80, details(&cl[4..], &[(80, 40), (50, 60)])),
                    region(
                        "R4",
                        50,
                        details(&cl[6..], &[(50, 50), (40, 50), (10, 50), (0, 50)]),
                    ),
                ],
                want: Ok(vec!["member1", "member2", "member3", "member4"]),
            },
            Case {
                name: "sc_12_1 not enough regions",
                region: constraint(SpreadField::Region, 3, 3),
                cluster: constraint(SpreadField::Cluster, 3, 3),
                regions: two_regions(),
                want: Err(SpreadError::FewerRegionsThanMinGroups {
                    regions: 2,
                    min_groups: 3,
                }),
            },
            Case {
                name: "sc_12_5 not enough clusters",
                region: constraint(SpreadField::Region, 1, 1),
                cluster: constraint(SpreadField::Cluster, 4, 4),
                regions: two_regions(),
                want: Err(SpreadError::NoRegionCombination),
            },
            Case {
                name: "no more regions to replace",
                region: constraint(SpreadField::Region, 1, 1),
                cluster: constraint(SpreadField::Cluster, 3, 4),
                regions: vec![region("R1", 100, details(&cl, &[(100, 40), (80, 20)]))],
                want: Err(SpreadError::NoRegionCombination),
            },
            Case {
                name: "cluster maxGroups 0 keeps one cluster per region",
                region: constraint(SpreadField::Region, 2, 2),
                cluster: constraint(SpreadField::Cluster, 2, 0),
                regions: two_regions(),
                want: Ok(vec!["member1", "member3"]),
            },
        ];
        for case in cases {
            let got = select_clusters_by_region(&case.region, &case.cluster, &case.regions);
            assert_picked(got, case.want, case.name);
        }
    }

    #[test]
    fn sc_11_select_by_cluster() {
        // Karmada's doc comment: n = 2, need 80 → member1 and member3.
        let cl: Vec<Cluster> = members(4);
        let three = details(&cl, &[(60, 40), (50, 30), (40, 60)]);
        struct Case<'a> {
            name: &'static str,
            constraint: SpreadConstraint,
            clusters: Vec<ClusterDetail<'a>>,
            need: NeedReplicas,
            want: Result<Vec<&'static str>, SpreadError>,
        }
        let cases = [
            Case {
                name: "swap the last pick for capacity",
                constraint: constraint(SpreadField::Cluster, 1, 2),
                clusters: three.clone(),
                need: NeedReplicas::AtLeast(80),
                want: Ok(vec!["member1", "member3"]),
            },
            Case {
                name: "capacity exactly equal needs no swap",
                constraint: constraint(SpreadField::Cluster, 1, 2),
                clusters: three.clone(),
                need: NeedReplicas::AtLeast(70),
                want: Ok(vec!["member1", "member2"]),
            },
            Case {
                name: "ignore capacity → first n",
                constraint: constraint(SpreadField::Cluster, 1, 2),
                clusters: three.clone(),
                need: NeedReplicas::IgnoreCapacity,
                want: Ok(vec!["member1", "member2"]),
            },
            Case {
                name: "maxGroups above #clusters → all",
                constraint: constraint(SpreadField::Cluster, 1, 5),
                clusters: three.clone(),
                need: NeedReplicas::AtLeast(130),
                want: Ok(vec!["member1", "member2", "member3"]),
            },
            Case {
                name: "sc_11_5 still short",
                constraint: constraint(SpreadField::Cluster, 1, 2),
                clusters: three.clone(),
                need: NeedReplicas::AtLeast(101),
                want: Err(SpreadError::NotEnoughResource {
                    selected: 2,
                    need: 101,
                }),
            },
            Case {
                name: "sc_11_1 fewer than minGroups",
                constraint: constraint(SpreadField::Cluster, 4, 4),
                clusters: three.clone(),
                need: NeedReplicas::IgnoreCapacity,
                want: Err(SpreadError::FewerClustersThanMinGroups {
                    feasible: 3,
                    min_groups: 4,
                }),
            },
            Case {
                name: "sc_11_2 maxGroups 0 fails",
                constraint: constraint(SpreadField::Cluster, 1, 0),
                clusters: three.clone(),
                need: NeedReplicas::IgnoreCapacity,
                want: Err(SpreadError::NoClusterSelected { max_groups: 0 }),
            },
            Case {
                name: "two swaps, walking from the last pick",
                constraint: constraint(SpreadField::Cluster, 1, 2),
                clusters: details(&cl, &[(100, 10), (100, 10), (0, 50), (0, 45)]),
                need: NeedReplicas::AtLeast(95),
                want: Ok(vec!["member4", "member3"]),
            },
        ];
        for case in cases {
            let got = select_clusters_by_cluster(&case.constraint, &case.clusters, case.need);
            assert_picked(got, case.want, case.name);
        }
    }

    #[test]
    fn sc_13_group_score() {
        let cl: Vec<Cluster> = members(5);
        // Karmada's worked examples (replicas 50, Duplicated).
        let g1 = same_score(&cl, 100, &[60, 70, 40, 30, 10]);
        let g2 = same_score(&cl, 0, &[60, 60, 60, 60]);
        assert_eq!(group_score(&g1, 50, true, 1, 1), 2100);
        assert_eq!(group_score(&g2, 50, true, 1, 1), 4000);
        assert_eq!(group_score(&g1, 500, true, 1, 1), 0, "no valid cluster");
        // Divided: replicas 100, field minGroups 2, cluster minGroups 1 → target 50, cmg 2.
        let d1 = same_score(&cl, 100, &[10, 10, 10, 10, 5]);
        let d2 = same_score(&cl, 0, &[40, 30, 10, 10]);
        assert_eq!(group_score(&d1, 100, false, 2, 1), 45_100);
        assert_eq!(group_score(&d2, 100, false, 2, 1), 50_000);
        let d3 = same_score(&cl, 100, &[40, 40, 10, 10, 5]);
        let d4 = same_score(&cl, 0, &[100, 100, 10, 10]);
        assert_eq!(group_score(&d3, 100, false, 2, 1), 50_100);
        assert_eq!(group_score(&d4, 100, false, 2, 1), 50_000);
        assert_eq!(
            group_score(&d4, 101, false, 0, 0),
            101_000,
            "minGroups 0 counts as 1"
        );
        assert_eq!(group_score(&[], 10, false, 1, 1), 0, "empty group");
    }

    #[test]
    fn sc_10_1_static_weight_ignores_spread() {
        use ReplicaDivisionPreference::{Aggregated, Weighted};
        let divided =
            |pref: Option<ReplicaDivisionPreference>, w: Option<ClusterPreferences>| Placement {
                replica_scheduling: Some(ReplicaSchedulingStrategy {
                    replica_scheduling_type: ReplicaSchedulingType::Divided,
                    replica_division_preference: pref,
                    weight_preference: w,
                }),
                ..Default::default()
            };
        let ignored = |pref, w| spread_ignored_for_static_weight(&divided(pref, w));
        let stat = ClusterPreferences {
            static_weight_list: vec![StaticClusterWeight {
                weight: 1,
                ..Default::default()
            }],
            dynamic_weight: None,
        };
        let dynamic = ClusterPreferences {
            dynamic_weight: Some(crate::types::DynamicWeightFactor::AvailableReplicas),
            ..stat.clone()
        };
        assert!(ignored(Some(Weighted), None));
        assert!(ignored(None, None), "empty preference is Weighted");
        assert!(ignored(Some(Weighted), Some(stat)));
        assert!(!ignored(Some(Weighted), Some(dynamic)));
        assert!(!ignored(
            Some(Weighted),
            Some(ClusterPreferences::default())
        ));
        assert!(!ignored(Some(Aggregated), None));
        assert!(!spread_ignored_for_static_weight(&Placement::default()));
    }

    #[test]
    fn sc_10_select_best_clusters_dispatch() {
        let cl: Vec<Cluster> = vec![cluster("a", "r1"), cluster("b", "r2"), cluster("c", "r2")];
        let details = details(&cl, &[(100, 5), (0, 5), (0, 1)]);
        let mut p = Placement::default();
        assert_eq!(
            select_best_clusters(&p, &details, 3)
                .map(|s| names(&s))
                .map(|v| v.len()),
            Ok(3),
            "no constraints"
        );
        p.spread_constraints = vec![constraint(SpreadField::Zone, 1, 1)];
        assert_eq!(
            select_best_clusters(&p, &details, 3),
            Err(SpreadError::UnsupportedConstraint)
        );
        p.spread_constraints = vec![constraint(SpreadField::Cluster, 1, 2)];
        assert_eq!(
            select_best_clusters(&p, &details, 3).map(|s| names(&s)),
            Ok(vec!["a".to_owned(), "b".to_owned()])
        );
        p.spread_constraints = vec![
            constraint(SpreadField::Cluster, 2, 3),
            constraint(SpreadField::Region, 2, 2),
        ];
        assert_eq!(
            select_best_clusters(&p, &details, 3).map(|s| names(&s)),
            Ok(vec!["a".to_owned(), "b".to_owned(), "c".to_owned()]),
            "region constraint wins over cluster"
        );
        // SC-10.2: nil replicaScheduling ignores capacity.
        assert_eq!(
            need_replicas(&Placement::default(), 9),
            NeedReplicas::IgnoreCapacity
        );
    }
}
