//! Toleration algebra (TM-8), with Kubernetes semantics. The comparison operators Lt/Gt
//! are not supported (validation rejects them before they get here).

use std::time::Duration;

use crate::time::Time;
use crate::types::{Taint, Toleration, TolerationOperator};

/// How long a set of taints is tolerated (TM-8.3). Replaces Karmada's `-1 / 0 / d` sentinels.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TolerationTime {
    /// Tolerated forever (no taint, or no finite trigger).
    Forever,
    /// Not tolerated any longer: the earliest trigger is now or in the past.
    Expired,
    /// Tolerated for this much longer.
    Remaining(Duration),
}

/// TM-8.1: whether `tol` tolerates `taint`.
///
/// An empty toleration effect matches every effect; an empty key matches every key (valid
/// only with `Exists`); `Exists` ignores the value; `Equal` compares values exactly.
pub fn tolerates(tol: &Toleration, taint: &Taint) -> bool {
    if let Some(effect) = tol.effect
        && effect != taint.effect
    {
        return false;
    }
    if !tol.key.is_empty() && tol.key != taint.key {
        return false;
    }
    match tol.operator {
        TolerationOperator::Exists => true,
        TolerationOperator::Equal => tol.value == taint.value,
    }
}

/// TM-8.2: for each taint in order, the first toleration that tolerates it.
///
/// `Ok(used)` when every taint is tolerated (`used[i]` tolerates `taints[i]`); no taints →
/// `Ok(vec![])`. `Err(taint)` names the first taint no toleration covers.
pub fn matching_tolerations<'t>(
    taints: &[Taint],
    tolerations: &'t [Toleration],
) -> Result<Vec<&'t Toleration>, Taint> {
    let mut used = Vec::with_capacity(taints.len());
    for taint in taints {
        match tolerations.iter().find(|tol| tolerates(tol, taint)) {
            Some(tol) => used.push(tol),
            None => return Err(taint.clone()),
        }
    }
    Ok(used)
}

/// TM-8.3: the time left until the earliest of `taint.time_added + tol.toleration_seconds`
/// over every (used toleration, taint) pair where the toleration tolerates the taint.
///
/// A taint without `time_added` or a toleration without seconds never fires. Note that
/// Karmada picks the *earliest* trigger (TM-8.4), although its code comment says "latest".
pub fn min_toleration_time(taints: &[Taint], used: &[&Toleration], now: Time) -> TolerationTime {
    if taints.is_empty() {
        return TolerationTime::Forever;
    }
    if used.is_empty() {
        return TolerationTime::Expired;
    }
    let earliest = used
        .iter()
        .filter_map(|tol| tol.toleration_seconds.map(|secs| (tol, secs)))
        .flat_map(|(tol, secs)| {
            taints
                .iter()
                .filter(move |taint| tolerates(tol, taint))
                .filter_map(move |taint| taint.time_added.map(|added| added.plus_secs(secs)))
        })
        .min();
    match earliest {
        None => TolerationTime::Forever,
        Some(trigger) if trigger <= now => TolerationTime::Expired,
        Some(trigger) => TolerationTime::Remaining(trigger.saturating_since(now)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::types::TaintEffect::{NoExecute, NoSchedule};
    use proptest::prelude::*;

    use crate::test_support::taint;

    fn tol(
        key: &str,
        op: TolerationOperator,
        value: &str,
        effect: Option<crate::types::TaintEffect>,
        secs: Option<i64>,
    ) -> Toleration {
        Toleration {
            key: key.into(),
            operator: op,
            value: value.into(),
            effect,
            toleration_seconds: secs,
        }
    }

    use TolerationOperator::{Equal, Exists};

    #[test]
    fn tm_8_1_tolerates_table() {
        let t = taint("k", "v", NoExecute, None);
        let cases = [
            (
                "exists any key any effect",
                tol("", Exists, "", None, None),
                true,
            ),
            ("exists key matches", tol("k", Exists, "", None, None), true),
            ("exists other key", tol("x", Exists, "", None, None), false),
            ("equal same value", tol("k", Equal, "v", None, None), true),
            ("equal other value", tol("k", Equal, "w", None, None), false),
            (
                "equal empty value vs v",
                tol("k", Equal, "", None, None),
                false,
            ),
            (
                "effect matches",
                tol("k", Exists, "", Some(NoExecute), None),
                true,
            ),
            (
                "effect differs",
                tol("k", Exists, "", Some(NoSchedule), None),
                false,
            ),
            (
                "empty key equal matches any key with value",
                tol("", Equal, "v", None, None),
                true,
            ),
        ];
        for (name, tol, want) in cases {
            assert_eq!(tolerates(&tol, &t), want, "{name}");
        }
    }

    #[test]
    fn tm_8_2_matching_tolerations_table() {
        let t1 = taint("a", "", NoExecute, None);
        let t2 = taint("b", "", NoExecute, None);
        let first = tol("a", Exists, "", None, Some(10));
        let second = tol("a", Exists, "", None, Some(20));
        let for_b = tol("b", Exists, "", None, None);

        // no taints → all tolerated, nothing used
        assert_eq!(matching_tolerations(&[], &[]), Ok(vec![]));
        // taints but no tolerations → not tolerated
        assert_eq!(
            matching_tolerations(std::slice::from_ref(&t1), &[]),
            Err(t1.clone())
        );
        // first tolerating toleration is used, per taint, in taint order
        let tols = [first.clone(), second.clone(), for_b.clone()];
        let used = matching_tolerations(&[t1.clone(), t2.clone()], &tols).unwrap();
        assert_eq!(used, vec![&first, &for_b]);
        // one taint without a toleration → the whole set fails
        let tols = [first.clone()];
        assert_eq!(matching_tolerations(&[t1, t2.clone()], &tols), Err(t2));
    }

    #[test]
    fn tm_8_3_min_toleration_time_table() {
        let now = Time::from_secs(1000);
        let secs = |s: u64| TolerationTime::Remaining(Duration::from_secs(s));
        let k1 = taint("k1", "", NoExecute, Some(900));
        let k2 = taint("k2", "", NoExecute, Some(900));
        let t120 = tol("k1", Exists, "", None, Some(120));
        let t60 = tol("k2", Exists, "", None, Some(60));
        let forever = tol("k1", Exists, "", None, None);
        let zero = tol("k1", Exists, "", None, Some(0));
        let no_time = taint("k1", "", NoExecute, None);

        let cases: Vec<(&str, Vec<Taint>, Vec<&Toleration>, TolerationTime)> = vec![
            (
                "no taints → forever",
                vec![],
                vec![],
                TolerationTime::Forever,
            ),
            (
                "taints, no used tolerations → now",
                vec![k1.clone()],
                vec![],
                TolerationTime::Expired,
            ),
            // TM-8.4: earliest trigger wins (k2 at 900+60 = 960 < now → expired)
            (
                "earliest of two, already past",
                vec![k1.clone(), k2.clone()],
                vec![&t120, &t60],
                TolerationTime::Expired,
            ),
            ("remaining exact", vec![k1.clone()], vec![&t120], secs(20)),
            (
                "toleration without seconds never fires",
                vec![k1.clone()],
                vec![&forever],
                TolerationTime::Forever,
            ),
            (
                "taint without timeAdded never fires",
                vec![no_time.clone()],
                vec![&t120],
                TolerationTime::Forever,
            ),
            (
                "tolerationSeconds 0 expires at once",
                vec![taint("k1", "", NoExecute, Some(1000))],
                vec![&zero],
                TolerationTime::Expired,
            ),
            (
                "exactly at the trigger → expired",
                vec![taint("k1", "", NoExecute, Some(880))],
                vec![&t120],
                TolerationTime::Expired,
            ),
        ];
        for (name, taints, used, want) in cases {
            assert_eq!(min_toleration_time(&taints, &used, now), want, "{name}");
        }
        // one millisecond before the trigger the taint is still tolerated
        let t = taint("k1", "", NoExecute, Some(880));
        assert_eq!(
            min_toleration_time(&[t], &[&t120], Time::from_millis(999_999)),
            TolerationTime::Remaining(Duration::from_millis(1))
        );
        // TM-8.4 worked example: k1 120s, k2 60s, both added at 12:00 → 60s
        let noon = Time::from_secs(12 * 3600);
        let a = taint("k1", "", NoExecute, Some(12 * 3600));
        let b = taint("k2", "", NoExecute, Some(12 * 3600));
        assert_eq!(min_toleration_time(&[a, b], &[&t120, &t60], noon), secs(60));
    }

    fn arb_taint() -> impl Strategy<Value = Taint> {
        (
            "[ab]",
            "[xy]?",
            prop::bool::ANY,
            prop::option::of(0i64..100),
        )
            .prop_map(|(k, v, ne, t)| taint(&k, &v, if ne { NoExecute } else { NoSchedule }, t))
    }

    fn arb_tol() -> impl Strategy<Value = Toleration> {
        (
            "[ab]?",
            prop::bool::ANY,
            "[xy]?",
            prop::option::of(prop::bool::ANY),
            prop::option::of(0i64..100),
        )
            .prop_map(|(k, exists, v, eff, secs)| {
                let op = if exists || k.is_empty() {
                    Exists
                } else {
                    Equal
                };
                let v = if op == Exists { String::new() } else { v };
                let effect = eff.map(|ne| if ne { NoExecute } else { NoSchedule });
                tol(&k, op, &v, effect, secs)
            })
    }

    proptest! {
        /// Whether a taint set is tolerated does not depend on the order of the tolerations
        /// (the *used* toleration may differ, TM-8.2 takes the first).
        #[test]
        fn tm_8_2_tolerated_is_order_independent(
            taints in prop::collection::vec(arb_taint(), 0..4),
            mut tols in prop::collection::vec(arb_tol(), 0..5),
        ) {
            let before = matching_tolerations(&taints, &tols).is_ok();
            tols.reverse();
            prop_assert_eq!(before, matching_tolerations(&taints, &tols).is_ok());
        }

        /// The set of triggers does not depend on the order of the taints.
        #[test]
        fn tm_8_3_min_time_is_taint_order_independent(
            mut taints in prop::collection::vec(arb_taint(), 0..4),
            tols in prop::collection::vec(arb_tol(), 0..5),
            now in 0i64..200,
        ) {
            let used: Vec<&Toleration> = tols.iter().collect();
            let now = Time::from_secs(now);
            let before = min_toleration_time(&taints, &used, now);
            taints.reverse();
            prop_assert_eq!(before, min_toleration_time(&taints, &used, now));
        }
    }
}
