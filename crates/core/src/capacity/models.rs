//! Karmada's resource models (CustomizedClusterResourceModeling, ES-4 in docs/rules.md): a
//! cluster declares grades of node size, cluster-health counts its nodes per grade, and the
//! estimator counts replicas per grade instead of over the cluster's sum, so that free
//! resources split over many small nodes are not taken for room on one large node.
//!
//! ```text
//!   spec.resourceModels   grade 0: cpu [0,1)  memory [0,4Gi)
//!                         grade 1: cpu [1,2)  memory [4Gi,16Gi)      ← a node with 1.5 CPU
//!                         grade 2: cpu [2,∞)  memory [16Gi,∞)          and 8Gi free
//!   status…allocatableModelings  [{grade 0, count 3}, {grade 1, count 1}, {grade 2, count 0}]
//!   a replica of 1 CPU: first grade whose min ≥ 1 CPU is grade 1 → 1 node × (1 CPU / 1) = 1
//! ```

use super::{PODS, ResourceList};

/// One grade of a cluster's resource models, amounts parsed (cpu in millicores).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ResourceModel {
    /// The grade.
    pub grade: u32,
    /// One range per resource, in the same order in every grade.
    pub ranges: Vec<ModelRange>,
}

/// The range [min, max) of one resource in a grade.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ModelRange {
    /// The resource.
    pub name: String,
    /// Inclusive lower bound.
    pub min: i64,
    /// Exclusive upper bound (`i64::MAX`: unbounded).
    pub max: i64,
}

/// How many of a cluster's nodes are of one grade.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct AllocatableModeling {
    /// The grade.
    pub grade: u32,
    /// Nodes of it.
    pub count: i64,
}

/// ES-4.1, as Karmada's registry does on create and update: models sorted by grade, the first
/// grade's mins 0 and the last grade's maxes unbounded.
pub fn standardize(models: &mut [ResourceModel]) {
    models.sort_by_key(|m| m.grade);
    if let Some(first) = models.first_mut() {
        for r in &mut first.ranges {
            r.min = 0;
        }
    }
    if let Some(last) = models.last_mut() {
        for r in &mut last.ranges {
            r.max = i64::MAX;
        }
    }
}

/// ES-4.2: the position of the grade a node with `free` resources is of: per resource of the
/// models, the last grade whose min is at most what is free (a resource the node lacks is 0
/// free), and the least of those over the resources. `None` when something free is below
/// the first grade (an over-committed node).
pub fn grade_of(models: &[ResourceModel], free: &ResourceList) -> Option<usize> {
    let first = models.first()?;
    let mut index = models.len() - 1;
    for (j, range) in first.ranges.iter().enumerate() {
        let have = free.get(&range.name).copied().unwrap_or(0);
        let at = models
            .iter()
            .rposition(|m| m.ranges.get(j).is_some_and(|r| r.min <= have))?;
        index = index.min(at);
    }
    Some(index)
}

/// ES-4.2: nodes per grade, in the models' order, from each node's free resources
/// (allocatable minus the requests of its unfinished pods; its free `pods` among them). A
/// node with no pod free is not counted (Flotilla: Karmada stops counting at the first such
/// node, leaving the later ones out too).
pub fn allocatable_modelings<'a>(
    models: &[ResourceModel],
    nodes_free: impl IntoIterator<Item = &'a ResourceList>,
) -> Vec<AllocatableModeling> {
    let mut out: Vec<AllocatableModeling> = models
        .iter()
        .map(|m| AllocatableModeling {
            grade: m.grade,
            count: 0,
        })
        .collect();
    for free in nodes_free {
        if free.get(PODS).copied().unwrap_or(0) <= 0 {
            continue;
        }
        if let Some(i) = grade_of(models, free) {
            out[i].count += 1;
        }
    }
    out
}

/// ES-4.3: how many replicas requesting `requests` the nodes counted in `modelings` hold, as
/// Karmada's general estimator counts them from the models. `None` when a requested resource
/// is not in the models (the estimator then falls back to the summary, ES-2.3). Otherwise
/// the first grade whose min covers each request, the latest of those over the resources,
/// and from it on every grade's nodes × the replicas its min holds (at least 1). A request
/// larger than every grade's min gives 0. The pods still allowed bound it (the caller).
pub fn replicas_by_models(
    models: &[ResourceModel],
    modelings: &[AllocatableModeling],
    requests: &ResourceList,
) -> Option<(i64, u32)> {
    let first = models.first()?;
    let mut from = 0usize;
    for (name, &request) in requests.iter().filter(|(n, a)| **a > 0 && *n != PODS) {
        let j = first.ranges.iter().position(|r| &r.name == name)?;
        match models
            .iter()
            .position(|m| m.ranges.get(j).is_some_and(|r| r.min >= request))
        {
            Some(i) => from = from.max(i),
            None => return Some((0, models.last().map_or(0, |m| m.grade))),
        }
    }
    let mut total = 0i64;
    for (i, model) in models.iter().enumerate().skip(from) {
        let count = modelings.get(i).map_or(0, |m| m.count);
        if count <= 0 {
            continue;
        }
        let per_node = requests
            .iter()
            .filter(|(n, a)| **a > 0 && *n != PODS)
            .filter_map(|(name, &request)| {
                let j = first.ranges.iter().position(|r| &r.name == name)?;
                Some(model.ranges.get(j).map_or(0, |r| r.min) / request)
            })
            .min()
            .unwrap_or(1)
            .max(1);
        total = total.saturating_add(count.saturating_mul(per_node));
    }
    Some((total, models.get(from).map_or(0, |m| m.grade)))
}

#[cfg(test)]
mod tests {
    use super::*;

    const GI: i64 = 1 << 30;

    fn l(pairs: &[(&str, i64)]) -> ResourceList {
        pairs.iter().map(|(k, v)| ((*k).to_owned(), *v)).collect()
    }

    /// Karmada's default grades 0..=3 for cpu and memory (its first four).
    fn models() -> Vec<ResourceModel> {
        let bounds = [
            (0, 1000, 0, 4 * GI),
            (1000, 2000, 4 * GI, 16 * GI),
            (2000, 4000, 16 * GI, 32 * GI),
            (4000, i64::MAX, 32 * GI, i64::MAX),
        ];
        bounds
            .iter()
            .enumerate()
            .map(|(g, &(c0, c1, m0, m1))| ResourceModel {
                grade: g as u32,
                ranges: vec![
                    ModelRange {
                        name: "cpu".into(),
                        min: c0,
                        max: c1,
                    },
                    ModelRange {
                        name: "memory".into(),
                        min: m0,
                        max: m1,
                    },
                ],
            })
            .collect()
    }

    #[test]
    fn es_4_1_standardize_sorts_and_opens_the_ends() {
        let mut m = models();
        m.reverse();
        m[3].ranges[0].min = 500;
        m[0].ranges[1].max = 64 * GI;
        standardize(&mut m);
        assert_eq!(m.iter().map(|m| m.grade).collect::<Vec<_>>(), [0, 1, 2, 3]);
        assert_eq!(m[0].ranges[0].min, 0, "the first grade starts at 0");
        assert_eq!(m[3].ranges[1].max, i64::MAX, "the last grade is unbounded");
    }

    #[test]
    fn es_4_2_a_node_is_of_the_least_grade_its_resources_reach() {
        let m = models();
        for (case, free, want) in [
            (
                "3 CPU, 40Gi: cpu reaches 2, memory 3",
                l(&[("cpu", 3000), ("memory", 40 * GI)]),
                Some(2),
            ),
            (
                "1.5 CPU, 8Gi",
                l(&[("cpu", 1500), ("memory", 8 * GI)]),
                Some(1),
            ),
            ("huge", l(&[("cpu", 64_000), ("memory", 512 * GI)]), Some(3)),
            (
                "no memory listed: 0 free, grade 0",
                l(&[("cpu", 8000)]),
                Some(0),
            ),
            ("over-committed", l(&[("cpu", -500), ("memory", GI)]), None),
        ] {
            assert_eq!(grade_of(&m, &free), want, "{case}");
        }
        let nodes = [
            l(&[("cpu", 3000), ("memory", 40 * GI), ("pods", 10)]),
            l(&[("cpu", 3500), ("memory", 20 * GI), ("pods", 1)]),
            l(&[("cpu", 900), ("memory", GI), ("pods", 5)]),
            l(&[("cpu", 8000), ("memory", 64 * GI), ("pods", 0)]),
        ];
        let counts: Vec<(u32, i64)> = allocatable_modelings(&m, &nodes)
            .iter()
            .map(|a| (a.grade, a.count))
            .collect();
        assert_eq!(
            counts,
            [(0, 1), (1, 0), (2, 2), (3, 0)],
            "a node without a free pod is not counted"
        );
    }

    #[test]
    fn es_4_3_replicas_by_the_models() {
        let m = models();
        // 8 nodes of grade 0 (say 0.9 CPU free each), 1 of grade 2
        let counts = |c: [i64; 4]| -> Vec<AllocatableModeling> {
            c.iter()
                .enumerate()
                .map(|(g, &count)| AllocatableModeling {
                    grade: g as u32,
                    count,
                })
                .collect()
        };
        let fragmented = counts([8, 0, 1, 0]);
        for (case, requests, want) in [
            (
                "2 CPU: only grade ≥ 2 (min 2 CPU) holds one; 8 small nodes hold none",
                l(&[("cpu", 2000)]),
                Some((1, 2)),
            ),
            (
                "500m: first grade whose min ≥ 500m is 1; grade 2 holds 4 per node",
                l(&[("cpu", 500)]),
                Some((4, 1)),
            ),
            (
                "cpu and memory: the later grade wins (memory 20Gi → grade 3)",
                l(&[("cpu", 500), ("memory", 20 * GI)]),
                Some((0, 3)),
            ),
            (
                "more than any grade's min: 0",
                l(&[("cpu", 5000)]),
                Some((0, 3)),
            ),
            (
                "a resource the models lack: no answer (fall back to the summary)",
                l(&[("cpu", 500), ("nvidia.com/gpu", 1)]),
                None,
            ),
            (
                "no requests: every counted node, one each",
                l(&[]),
                Some((9, 0)),
            ),
        ] {
            assert_eq!(
                replicas_by_models(&m, &fragmented, &requests),
                want,
                "{case}"
            );
        }
        assert_eq!(
            replicas_by_models(&[], &fragmented, &l(&[("cpu", 1)])),
            None
        );
    }
}
