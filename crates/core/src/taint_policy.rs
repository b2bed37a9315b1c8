//! ClusterTaintPolicy (CH-16..CH-18): taints added and removed by cluster conditions.
//!
//! With `--no-execute-taints=policy` (A1) this is the only automatic source of NoExecute
//! taints, as in the latest Karmada. Policies have no time dimension (CH-19): delays come
//! from tolerations (TM-8) and the health thresholds (CH-4).

use crate::affinity::cluster_matches_affinity;
use crate::time::Time;
use crate::types::{
    Cluster, ClusterTaintPolicy, Condition, MatchCondition, SelectorOperator, Taint,
};

/// CH-18: whether every entry of `matches` holds on `conditions`.
///
/// An empty list never matches; a missing condition type never matches (even for NotIn);
/// operators other than In / NotIn never match.
pub fn conditions_match(conditions: &[Condition], matches: &[MatchCondition]) -> bool {
    if matches.is_empty() {
        return false;
    }
    matches.iter().all(|m| {
        let Some(cond) = conditions.iter().find(|c| c.type_ == m.condition_type) else {
            return false;
        };
        let listed = m.status_values.contains(&cond.status);
        match m.operator {
            SelectorOperator::In => listed,
            SelectorOperator::NotIn => !listed,
            SelectorOperator::Exists | SelectorOperator::DoesNotExist => false,
        }
    })
}

/// CH-17: apply every policy to one cluster's taints. Policies are processed in creation
/// order (oldest first, then name); a policy whose `targetClusters` does not match is
/// skipped. Returns the new taint list, or `None` when nothing changes (no write).
pub fn apply_taint_policies(
    cluster: &Cluster,
    policies: &[ClusterTaintPolicy],
    now: Time,
) -> Option<Vec<Taint>> {
    let mut ordered: Vec<&ClusterTaintPolicy> = policies.iter().collect();
    ordered.sort_by(|a, b| {
        (a.meta.creation_timestamp, &a.meta.name).cmp(&(b.meta.creation_timestamp, &b.meta.name))
    });
    let mut taints = cluster.spec.taints.clone();
    let conditions = &cluster.status.conditions;
    for policy in ordered {
        if let Some(target) = &policy.target_clusters
            && !cluster_matches_affinity(cluster, target)
        {
            continue;
        }
        // CH-17.3: add the absent ones (by key, effect); existing ones are untouched.
        if conditions_match(conditions, &policy.add_on_conditions) {
            for spec in &policy.taints {
                if !taints
                    .iter()
                    .any(|t| t.key == spec.key && t.effect == spec.effect)
                {
                    taints.push(Taint {
                        key: spec.key.clone(),
                        value: spec.value.clone(),
                        effect: spec.effect,
                        time_added: Some(now),
                        trace_context: String::new(),
                    });
                }
            }
        }
        // CH-17.4: then remove the first equal one for each policy taint.
        if conditions_match(conditions, &policy.remove_on_conditions) {
            for spec in &policy.taints {
                if let Some(pos) = taints
                    .iter()
                    .position(|t| t.key == spec.key && t.effect == spec.effect)
                {
                    taints.remove(pos);
                }
            }
        }
    }
    (taints != cluster.spec.taints).then_some(taints)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::types::{
        CONDITION_READY, ClusterAffinity, ConditionStatus, ObjectMeta, TAINT_NOT_READY,
        TaintEffect, TaintSpec,
    };
    use ConditionStatus::{False, True, Unknown};

    fn ready(status: ConditionStatus) -> Condition {
        Condition {
            type_: CONDITION_READY.into(),
            status,
            ..Default::default()
        }
    }

    fn m(op: SelectorOperator, values: &[ConditionStatus]) -> MatchCondition {
        MatchCondition {
            condition_type: CONDITION_READY.into(),
            operator: op,
            status_values: values.to_vec(),
        }
    }

    #[test]
    fn ch_18_condition_matching_table() {
        use SelectorOperator::*;
        let other = MatchCondition {
            condition_type: "Other".into(),
            operator: NotIn,
            status_values: vec![True],
        };
        let cases = [
            (
                "empty list never matches",
                vec![ready(False)],
                vec![],
                false,
            ),
            (
                "In matches",
                vec![ready(False)],
                vec![m(In, &[False, Unknown])],
                true,
            ),
            (
                "In misses",
                vec![ready(True)],
                vec![m(In, &[False, Unknown])],
                false,
            ),
            (
                "NotIn matches",
                vec![ready(True)],
                vec![m(NotIn, &[False])],
                true,
            ),
            (
                "missing type never matches, even NotIn",
                vec![ready(True)],
                vec![other],
                false,
            ),
            (
                "entries are ANDed",
                vec![ready(False)],
                vec![m(In, &[False]), m(NotIn, &[False])],
                false,
            ),
            (
                "unknown operator never matches",
                vec![ready(False)],
                vec![m(Exists, &[False])],
                false,
            ),
        ];
        for (name, conds, matches, want) in cases {
            assert_eq!(conditions_match(&conds, &matches), want, "{name}");
        }
    }

    fn policy(name: &str, created: i64, target: Option<ClusterAffinity>) -> ClusterTaintPolicy {
        ClusterTaintPolicy {
            meta: ObjectMeta {
                name: name.into(),
                creation_timestamp: Some(Time::from_secs(created)),
                ..Default::default()
            },
            target_clusters: target,
            add_on_conditions: vec![m(SelectorOperator::In, &[False, Unknown])],
            remove_on_conditions: vec![m(SelectorOperator::In, &[True])],
            taints: vec![TaintSpec {
                key: TAINT_NOT_READY.into(),
                value: String::new(),
                effect: TaintEffect::NoExecute,
            }],
        }
    }

    fn cluster(name: &str, status: ConditionStatus, taints: Vec<Taint>) -> Cluster {
        let mut c = Cluster::default();
        c.meta.name = name.into();
        c.status.conditions = vec![ready(status)];
        c.spec.taints = taints;
        c
    }

    #[test]
    fn ch_17_apply_policies() {
        let now = Time::from_secs(9);
        let p = policy("p", 1, None);
        // CH-19 typical policy: Ready False → NoExecute taint with timeAdded = now
        let got =
            apply_taint_policies(&cluster("m1", False, vec![]), std::slice::from_ref(&p), now)
                .unwrap();
        assert_eq!(
            got,
            vec![Taint::new(
                TAINT_NOT_READY,
                TaintEffect::NoExecute,
                Some(now)
            )]
        );
        // present already → unchanged (value and time untouched)
        let existing = Taint {
            value: "x".into(),
            ..Taint::new(
                TAINT_NOT_READY,
                TaintEffect::NoExecute,
                Some(Time::from_secs(1)),
            )
        };
        assert_eq!(
            apply_taint_policies(
                &cluster("m1", False, vec![existing.clone()]),
                std::slice::from_ref(&p),
                now
            ),
            None
        );
        // Ready True → removed
        assert_eq!(
            apply_taint_policies(
                &cluster("m1", True, vec![existing]),
                std::slice::from_ref(&p),
                now
            ),
            Some(vec![])
        );
        // non-matching target → skipped
        let only_m2 = policy(
            "q",
            1,
            Some(ClusterAffinity {
                cluster_names: vec!["m2".into()],
                ..Default::default()
            }),
        );
        assert_eq!(
            apply_taint_policies(&cluster("m1", False, vec![]), &[only_m2], now),
            None
        );
        // a NoSchedule taint with the same key is a different identity
        let ns = Taint::new(TAINT_NOT_READY, TaintEffect::NoSchedule, None);
        let got = apply_taint_policies(&cluster("m1", False, vec![ns.clone()]), &[p], now).unwrap();
        assert_eq!(got.len(), 2);
        assert_eq!(got[0], ns);
    }

    #[test]
    fn ch_17_2_creation_order() {
        // The older policy adds; the newer one's removal (matching the same condition) then
        // removes it in the same pass: order is observable.
        let now = Time::from_secs(5);
        let mut adder = policy("adder", 1, None);
        adder.remove_on_conditions = vec![];
        let mut remover = policy("remover", 2, None);
        remover.add_on_conditions = vec![];
        remover.remove_on_conditions = vec![m(SelectorOperator::In, &[False])];
        let c = cluster("m1", False, vec![]);
        assert_eq!(
            apply_taint_policies(&c, &[remover.clone(), adder.clone()], now),
            None
        );
        // reversed creation: removal first (nothing to remove), then add
        remover.meta.creation_timestamp = Some(Time::from_secs(0));
        adder.meta.creation_timestamp = Some(Time::from_secs(3));
        assert_eq!(
            apply_taint_policies(&c, &[adder, remover], now).map(|t| t.len()),
            Some(1)
        );
    }
}
