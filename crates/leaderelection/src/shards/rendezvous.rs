//! Rendezvous (highest-random-weight) hashing: the desired owner of a shard among the live
//! members is the one of highest weight for that shard.

/// The weight of member `identity` for shard `shard`: a 64-bit mix of the identity's FNV-1a
/// hash and the shard's index. It is part of the protocol — every replica of a controller must
/// compute the same — so it never changes.
pub fn shard_weight(identity: &str, shard: u32) -> u64 {
    mix(informer_shard::hash(identity) ^ mix(u64::from(shard)))
}

/// The desired owner of `shard` among `members`: the member of highest
/// [`shard_weight`], ties going to the smaller identity; `None` without members.
///
/// A member joining takes from each other member only the shards for which it now weighs the
/// most, and a member leaving gives each of its shards to the member that weighs the most
/// after it: only the shards that must move, move.
///
/// ```
/// use informer_leaderelection::desired_owner;
///
/// let before = ["replica-a", "replica-b"];
/// let after = ["replica-a", "replica-b", "replica-c"];
/// for shard in 0..16 {
///     let (old, new) = (desired_owner(before, shard), desired_owner(after, shard));
///     // A shard moves only to the member that joined.
///     assert!(old == new || new == Some("replica-c"));
/// }
/// assert_eq!(desired_owner([], 0), None);
/// ```
pub fn desired_owner<'a>(
    members: impl IntoIterator<Item = &'a str>,
    shard: u32,
) -> Option<&'a str> {
    members.into_iter().max_by(|a, b| {
        shard_weight(a, shard)
            .cmp(&shard_weight(b, shard))
            .then_with(|| b.cmp(a))
    })
}

/// SplitMix64's finalizer: spreads the bits of FNV-1a's hash, whose values for similar
/// identities (`replica-0`, `replica-1`) differ in few bits.
fn mix(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

#[cfg(test)]
mod tests {
    use super::desired_owner;

    fn owners(members: &[&str], count: u32) -> Vec<String> {
        (0..count)
            .map(|shard| {
                desired_owner(members.iter().copied(), shard)
                    .unwrap_or_default()
                    .to_owned()
            })
            .collect()
    }

    #[test]
    fn a_join_moves_shards_only_to_the_newcomer_and_a_leave_only_from_the_leaver() {
        let all = [
            "replica-0",
            "replica-1",
            "replica-2",
            "replica-3",
            "replica-4",
        ];
        for size in 1..all.len() {
            let before = owners(&all[..size], 256);
            let after = owners(&all[..=size], 256);
            let newcomer = all[size];
            let moved = before.iter().zip(&after).filter(|(b, a)| b != a).count();
            assert!(
                before
                    .iter()
                    .zip(&after)
                    .all(|(b, a)| b == a || a == newcomer)
            );
            // The newcomer takes about its fair share: 256 / (size + 1), within a wide margin.
            let fair = 256 / (size + 1);
            assert!(
                moved > fair / 2 && moved < fair * 2,
                "{moved} moved, {fair} fair"
            );
            // Leaving again gives the newcomer's shards back to exactly where they were.
            assert_eq!(owners(&all[..size], 256), before);
        }
    }

    #[test]
    fn the_shards_spread_over_the_members_and_the_order_of_members_does_not_matter() {
        let members = ["b", "a", "c"];
        let spread = owners(&members, 1024);
        for member in members {
            let n = spread.iter().filter(|o| *o == member).count();
            assert!((250..430).contains(&n), "{member} owns {n} of 1024");
        }
        assert_eq!(owners(&["c", "b", "a"], 1024), spread);
    }
}
