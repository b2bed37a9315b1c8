//! SC-15: Webster (Sainte-Laguë) apportionment and the replica dispenser built on it.
//!
//! Flotilla follows Karmada's latest division (A5): one seat at a time to the party with the
//! largest `votes / (2·seats + 1)`. Deviation (allowed by U-3): priorities are compared
//! exactly (`va·(2sb+1)` vs `vb·(2sa+1)` in 128-bit integers) instead of as `float64`
//! quotients, so the two can differ only where float rounding would have made two different
//! priorities look equal.

use std::cmp::Ordering;
use std::collections::{BTreeMap, BinaryHeap};

use crate::types::TargetCluster;

/// One party of a Webster apportionment: a cluster with its weight and its seats (replicas).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Party {
    /// Party (cluster) name.
    pub name: String,
    /// Votes (weight).
    pub votes: i64,
    /// Seats (replicas) after the allocation.
    pub seats: i32,
}

/// How two parties with the same Webster priority are ordered (SC-15.3). In every mode the
/// party with fewer seats wins first; the name decides last.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum TieBreak {
    /// Smaller name wins: Karmada's default, and the dispenser's choice for an empty UID or
    /// an even `fnv32a(UID)`.
    #[default]
    NameAscending,
    /// Larger name wins: the dispenser's choice for an odd `fnv32a(UID)`, so that across many
    /// workloads the remainders do not all land on the alphabetically first cluster.
    NameDescending,
}

impl TieBreak {
    /// SC-15.3: the dispenser's tie-break for a workload: name ascending when `uid` is empty
    /// or `fnv32a(uid)` is even, descending when it is odd.
    pub fn for_uid(uid: &str) -> Self {
        if uid.is_empty() || fnv32a(uid.as_bytes()).is_multiple_of(2) {
            TieBreak::NameAscending
        } else {
            TieBreak::NameDescending
        }
    }
}

/// 32-bit FNV-1a (Go's `hash/fnv.New32a`), used for the UID tie-break (SC-15.3).
pub fn fnv32a(bytes: &[u8]) -> u32 {
    const OFFSET_BASIS: u32 = 2_166_136_261;
    const PRIME: u32 = 16_777_619;
    bytes.iter().fold(OFFSET_BASIS, |hash, b| {
        (hash ^ u32::from(*b)).wrapping_mul(PRIME)
    })
}

/// A party in the priority queue; `Ord` says which party gets the next seat (greater wins).
struct Contender<'n> {
    name: &'n str,
    votes: i64,
    seats: i32,
    tie: TieBreak,
}

impl Contender<'_> {
    /// `2·seats + 1`, the Sainte-Laguë divisor.
    fn divisor(&self) -> i128 {
        2 * i128::from(self.seats) + 1
    }
}

// === impl Contender ===

impl Ord for Contender<'_> {
    fn cmp(&self, other: &Self) -> Ordering {
        // SC-15.2: larger votes / (2·seats + 1) wins, compared exactly (U-3).
        let lhs = i128::from(self.votes) * other.divisor();
        let rhs = i128::from(other.votes) * self.divisor();
        lhs.cmp(&rhs)
            // SC-15.3: on a tie, fewer seats wins ...
            .then_with(|| other.seats.cmp(&self.seats))
            // ... then the name, in the tie-break's direction.
            .then_with(|| match self.tie {
                TieBreak::NameAscending => other.name.cmp(self.name),
                TieBreak::NameDescending => self.name.cmp(other.name),
            })
    }
}

impl PartialOrd for Contender<'_> {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl PartialEq for Contender<'_> {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other) == Ordering::Equal
    }
}

impl Eq for Contender<'_> {}

/// SC-15: allocate `new_seats` seats with the Webster method.
///
/// Parties are the union of `initial` (seats already held; votes 0 unless also in `votes`)
/// and `votes` (SC-15.1); a name given twice keeps its last entry. Each seat goes to the
/// largest `votes / (2·seats + 1)` (SC-15.2), ties per `tie` (SC-15.3). The result lists
/// every party, including those with 0 seats, sorted by name; no parties → empty
/// (SC-15.4). Negative seat counts in `initial` and negative `new_seats` count as 0.
///
/// The loop is one heap operation per seat, like Karmada's; replica counts are `i32`.
pub fn allocate_webster_seats(
    new_seats: i32,
    votes: &[(String, i64)],
    initial: &[(String, i32)],
    tie: TieBreak,
) -> Vec<Party> {
    let mut parties: BTreeMap<&str, (i64, i32)> = BTreeMap::new();
    for (name, seats) in initial {
        parties.insert(name.as_str(), (0, (*seats).max(0)));
    }
    for (name, v) in votes {
        parties.entry(name.as_str()).or_insert((0, 0)).0 = *v;
    }
    if parties.is_empty() {
        return Vec::new();
    }
    let mut heap: BinaryHeap<Contender<'_>> = parties
        .iter()
        .map(|(name, (votes, seats))| Contender {
            name,
            votes: *votes,
            seats: *seats,
            tie,
        })
        .collect();
    for _ in 0..new_seats.max(0) {
        if let Some(mut top) = heap.pop() {
            top.seats = top.seats.saturating_add(1);
            heap.push(top);
        }
    }
    let mut result: Vec<Party> = heap
        .into_iter()
        .map(|c| Party {
            name: c.name.to_owned(),
            votes: c.votes,
            seats: c.seats,
        })
        .collect();
    result.sort_by(|a, b| a.name.cmp(&b.name));
    result
}

/// SC-15.5: Karmada's dispenser. Divides `num_replicas` by `weights` with Webster and adds
/// the result onto `init` (entries of `init` first, in order, then new clusters by name).
///
/// Guards: `num_replicas == 0` with a non-empty `init` → `init` unchanged; a weight sum of 0
/// → `init` unchanged. The Webster run starts from zero seats: `init` is merged afterwards,
/// it does not weigh on the priorities (this is what makes SC-17.6 come out as
/// `{m1:7, m3:7, m4:10}`). Clusters may come out with 0 replicas; the caller drops them
/// (SC-14.4).
pub fn dispense(
    num_replicas: i32,
    weights: &[(String, i64)],
    init: &[TargetCluster],
    tie: TieBreak,
) -> Vec<TargetCluster> {
    let mut result = init.to_vec();
    if num_replicas == 0 && !init.is_empty() {
        return result;
    }
    let sum = weights
        .iter()
        .fold(0i64, |acc, (_, w)| acc.saturating_add(*w));
    if sum == 0 {
        return result;
    }
    for party in allocate_webster_seats(num_replicas, weights, &[], tie) {
        match result.iter_mut().find(|t| t.name == party.name) {
            Some(existing) => existing.replicas = existing.replicas.saturating_add(party.seats),
            None => result.push(TargetCluster::new(party.name, party.seats)),
        }
    }
    result
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn votes(list: &[(&str, i64)]) -> Vec<(String, i64)> {
        list.iter().map(|(n, v)| ((*n).to_owned(), *v)).collect()
    }

    fn seats(parties: &[Party]) -> Vec<(&str, i32)> {
        parties.iter().map(|p| (p.name.as_str(), p.seats)).collect()
    }

    #[test]
    fn sc_15_webster_classic_sainte_lague_rounds() {
        // Karmada's webstermethod_test.go table (the Wikipedia Sainte-Laguë example). Round 6
        // is a tie (A 100000/5 = D 20000/1): fewer seats wins, so D goes first.
        let v = votes(&[
            ("PartyA", 100_000),
            ("PartyB", 80_000),
            ("PartyC", 30_000),
            ("PartyD", 20_000),
        ]);
        let want = [
            (1, [1, 0, 0, 0]),
            (2, [1, 1, 0, 0]),
            (3, [2, 1, 0, 0]),
            (4, [2, 1, 1, 0]),
            (5, [2, 2, 1, 0]),
            (6, [2, 2, 1, 1]),
            (7, [3, 2, 1, 1]),
            (8, [3, 3, 1, 1]),
        ];
        for (n, expected) in want {
            let got = allocate_webster_seats(n, &v, &[], TieBreak::NameAscending);
            let got: Vec<i32> = got.iter().map(|p| p.seats).collect();
            assert_eq!(got, expected, "round {n}");
        }
        let ex = allocate_webster_seats(
            4,
            &votes(&[("Alpha", 1200), ("Beta", 900), ("Gamma", 400)]),
            &[],
            TieBreak::default(),
        );
        assert_eq!(seats(&ex), [("Alpha", 2), ("Beta", 1), ("Gamma", 1)]);
    }

    #[test]
    fn sc_15_webster_edge_cases_from_karmada_table() {
        fn ab<T>(a: T, b: T) -> Vec<(&'static str, T)> {
            vec![("PartyA", a), ("PartyB", b)]
        }
        type Votes = Vec<(&'static str, i64)>;
        type Seats = Vec<(&'static str, i32)>;
        let allocate = |seats, votes_of: &Votes, initial: &Seats, tie| {
            let initial: Vec<(String, i32)> =
                initial.iter().map(|(n, s)| ((*n).to_owned(), *s)).collect();
            allocate_webster_seats(seats, &votes(votes_of), &initial, tie)
        };
        // (case, seats, votes, initial seats, want), ties broken by name ascending (the default)
        let cases: [(&str, i32, Votes, Seats, Seats); 9] = [
            ("sc_15_4 no parties → empty", 1, vec![], vec![], vec![]),
            ("no parties, no seats", 0, vec![], vec![], vec![]),
            (
                "zero seats lists every party with 0",
                0,
                ab(100, 200),
                vec![],
                ab(0, 0),
            ),
            ("larger votes wins", 1, ab(1, 2), vec![], ab(0, 1)),
            ("sc_15_3 tie → fewer seats", 1, ab(0, 0), ab(2, 1), ab(2, 2)),
            (
                "sc_15_3 tie (3/3 = 1/1) → fewer seats",
                1,
                ab(3, 1),
                ab(1, 0),
                ab(1, 1),
            ),
            (
                "initial-only party with no votes gets nothing new",
                2,
                vec![("NewParty1", 1), ("NewParty2", 1)],
                vec![("OldParty", 0)],
                vec![("NewParty1", 1), ("NewParty2", 1), ("OldParty", 0)],
            ),
            (
                "old and new parties compete",
                2,
                vec![("OldParty", 1), ("NewParty", 1)],
                vec![("OldParty", 1)],
                vec![("NewParty", 2), ("OldParty", 1)],
            ),
            (
                "initial party not voted keeps its seats",
                2,
                vec![("PartyA", 100)],
                vec![("PartyB", 3)],
                ab(2, 3),
            ),
        ];
        for (name, n, votes_of, initial, want) in cases {
            let got = allocate(n, &votes_of, &initial, TieBreak::default());
            assert_eq!(seats(&got), want, "{name}");
        }
        // A tie at 1 seat between PartyA and PartyB, no initial seats, broken by name.
        for (name, tie, want) in [
            (
                "sc_15_3 tie → smaller name",
                TieBreak::NameAscending,
                ab(1, 0),
            ),
            (
                "sc_15_3 tie → larger name when descending",
                TieBreak::NameDescending,
                ab(0, 1),
            ),
        ] {
            let got = allocate(1, &ab(1, 1), &Seats::new(), tie);
            assert_eq!(seats(&got), want, "{name}");
        }
    }

    #[test]
    fn sc_15_6_webster_example_a2_b1() {
        let v = votes(&[("A", 2), ("B", 1)]);
        for (n, want) in [
            (1, [("A", 1), ("B", 0)]),
            (2, [("A", 1), ("B", 1)]),
            (3, [("A", 2), ("B", 1)]),
        ] {
            let got = allocate_webster_seats(n, &v, &[], TieBreak::default());
            assert_eq!(seats(&got), want, "{n} replicas");
        }
    }

    #[test]
    fn sc_15_3_fnv32a_and_uid_parity() {
        // Go's hash/fnv reference values.
        assert_eq!(fnv32a(b""), 0x811c_9dc5);
        assert_eq!(fnv32a(b"a"), 0xe40c_292c);
        assert_eq!(fnv32a(b"foobar"), 0xbf9c_f968);
        assert_eq!(TieBreak::for_uid(""), TieBreak::NameAscending);
        // fnv32a("a") = 0xe40c292c is even, fnv32a("foobar") = 0xbf9cf968 is even,
        // fnv32a("b") = 0xe70c2de5 is odd.
        assert_eq!(fnv32a(b"b"), 0xe70c_2de5);
        assert_eq!(TieBreak::for_uid("a"), TieBreak::NameAscending);
        assert_eq!(TieBreak::for_uid("b"), TieBreak::NameDescending);
    }

    #[test]
    fn sc_15_3_uid_even_odd_decides_the_remainder() {
        // 1:1 weights, 3 replicas: the third replica is a tie at equal seats.
        let w = votes(&[("member1", 1), ("member2", 1)]);
        let even = dispense(3, &w, &[], TieBreak::for_uid("a"));
        assert_eq!(
            even,
            [
                TargetCluster::new("member1", 2),
                TargetCluster::new("member2", 1)
            ]
        );
        let odd = dispense(3, &w, &[], TieBreak::for_uid("b"));
        assert_eq!(
            odd,
            [
                TargetCluster::new("member1", 1),
                TargetCluster::new("member2", 2)
            ]
        );
    }

    #[test]
    fn sc_15_5_dispenser_guards_and_merge() {
        let init = [TargetCluster::new("m1", 4)];
        let w = votes(&[("m1", 4), ("m3", 8), ("m4", 12)]);
        assert_eq!(
            dispense(0, &w, &init, TieBreak::default()),
            init,
            "0 replicas with init → no-op"
        );
        assert_eq!(
            dispense(5, &votes(&[("m1", 0)]), &init, TieBreak::default()),
            init,
            "zero weights → no-op"
        );
        assert_eq!(
            dispense(5, &[], &init, TieBreak::default()),
            init,
            "no weights → no-op"
        );
        let zero_no_init = dispense(0, &w, &[], TieBreak::default());
        assert!(
            zero_no_init.iter().all(|t| t.replicas == 0),
            "0 replicas without init lists zeros"
        );
        assert_eq!(
            dispense(20, &w, &init, TieBreak::default()),
            [
                TargetCluster::new("m1", 7),
                TargetCluster::new("m3", 7),
                TargetCluster::new("m4", 10)
            ],
            "SC-17.6: delta from zero, merged onto init"
        );
    }

    proptest! {
        #[test]
        fn sc_15_webster_conserves_seats_and_ignores_input_order(
            raw in proptest::collection::btree_map("[a-e][0-9]", 0i64..50, 1..6),
            n in 0i32..60,
            odd in any::<bool>(),
            rotate in 0usize..6,
        ) {
            let tie = if odd { TieBreak::NameDescending } else { TieBreak::NameAscending };
            let list: Vec<(String, i64)> = raw.into_iter().collect();
            let total: i64 = list.iter().map(|(_, v)| *v).sum();
            let a = allocate_webster_seats(n, &list, &[], tie);
            let mut shuffled = list.clone();
            shuffled.reverse();
            let k = rotate % shuffled.len();
            shuffled.rotate_left(k);
            let b = allocate_webster_seats(n, &shuffled, &[], tie);
            prop_assert_eq!(&a, &b);
            prop_assert_eq!(a.iter().map(|p| i64::from(p.seats)).sum::<i64>(), i64::from(n));
            if total > 0 {
                // Parties without votes never get a seat while others have votes.
                prop_assert!(a.iter().filter(|p| p.votes == 0).all(|p| p.seats == 0));
            }
        }

        #[test]
        fn sc_15_webster_is_house_monotone(
            raw in proptest::collection::btree_map("[a-e]", 1i64..40, 1..5),
            n in 0i32..40,
            extra in 0i32..20,
        ) {
            let list: Vec<(String, i64)> = raw.into_iter().collect();
            let small = allocate_webster_seats(n, &list, &[], TieBreak::default());
            let large = allocate_webster_seats(n + extra, &list, &[], TieBreak::default());
            for (s, l) in small.iter().zip(&large) {
                prop_assert!(l.seats >= s.seats, "{} went from {} to {}", s.name, s.seats, l.seats);
            }
        }
    }
}
