//! Half-open ranges of the 64-bit hash space, and its split into equal shards.

use std::fmt;

use crate::RangeError;

/// 2^64, the exclusive end of the hash space: written `0x10000000000000000` in a selector.
pub const HASH_SPACE_END: u128 = 1 << 64;

/// The hashes `start <= h < end`: a half-open range of the 64-bit hash space, never empty.
///
/// The end is a `u128` so that a range can reach the top of the space: `end` is at most
/// [`HASH_SPACE_END`] (2^64), which selectors write as `'0x10000000000000000'`.
///
/// ```
/// use informer_shard::{ShardRange, HASH_SPACE_END};
///
/// let upper = ShardRange::new(0x8000_0000_0000_0000, HASH_SPACE_END)?;
/// assert!(upper.contains(u64::MAX));
/// assert!(!upper.contains(0x7fff_ffff_ffff_ffff));
/// assert_eq!(upper, ShardRange::from_start(0x8000_0000_0000_0000));
/// # Ok::<(), informer_shard::RangeError>(())
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ShardRange {
    start: u64,
    end: u128,
}

impl ShardRange {
    /// The whole hash space, `[0, 2^64)`.
    pub const FULL: ShardRange = ShardRange {
        start: 0,
        end: HASH_SPACE_END,
    };

    /// `[start, end)`; an error when it is empty or `end` is above 2^64.
    pub fn new(start: u64, end: u128) -> Result<Self, RangeError> {
        if end > HASH_SPACE_END {
            return Err(RangeError::BeyondHashSpace { end });
        }
        if u128::from(start) >= end {
            return Err(RangeError::Empty { start, end });
        }
        Ok(ShardRange { start, end })
    }

    /// `[start, 2^64)`: from `start` to the top of the hash space.
    pub fn from_start(start: u64) -> Self {
        ShardRange {
            start,
            end: HASH_SPACE_END,
        }
    }

    /// The inclusive start.
    pub fn start(self) -> u64 {
        self.start
    }

    /// The exclusive end, at most 2^64.
    pub fn end(self) -> u128 {
        self.end
    }

    /// Whether `hash` falls in the range.
    pub fn contains(self, hash: u64) -> bool {
        hash >= self.start && u128::from(hash) < self.end
    }

    /// Shard `index` of `count` equal contiguous shards, numbered from 0 up the hash space.
    ///
    /// Each shard spans `floor(2^64 / count)` hashes and the last one also takes what the
    /// division leaves over (fewer than `count` hashes), the split kube-apiserver's own tests
    /// of the feature use. For a power of two the shards are exactly equal.
    ///
    /// ```
    /// use informer_shard::ShardRange;
    ///
    /// let second = ShardRange::shard(1, 4)?;
    /// assert_eq!((second.start(), second.end()), (0x4000_0000_0000_0000, 0x8000_0000_0000_0000));
    /// assert_eq!(ShardRange::shard(0, 1)?, ShardRange::FULL);
    /// # Ok::<(), informer_shard::RangeError>(())
    /// ```
    pub fn shard(index: u32, count: u32) -> Result<Self, RangeError> {
        if count == 0 {
            return Err(RangeError::NoShards);
        }
        if index >= count {
            return Err(RangeError::NoSuchShard { index, count });
        }
        let span = HASH_SPACE_END / u128::from(count);
        let start = span * u128::from(index);
        let end = if index + 1 == count {
            HASH_SPACE_END
        } else {
            start + span
        };
        // `start < 2^64` because `index < count`, so the conversion cannot fail.
        let start = u64::try_from(start).map_err(|_| RangeError::NoSuchShard { index, count })?;
        ShardRange::new(start, end)
    }

    /// The index of the shard of `count` ([`ShardRange::shard`]) that holds `hash`.
    ///
    /// ```
    /// use informer_shard::ShardRange;
    ///
    /// assert_eq!(ShardRange::index_of(0x4000_0000_0000_0000, 4)?, 1);
    /// assert_eq!(ShardRange::index_of(u64::MAX, 3)?, 2);
    /// # Ok::<(), informer_shard::RangeError>(())
    /// ```
    pub fn index_of(hash: u64, count: u32) -> Result<u32, RangeError> {
        if count == 0 {
            return Err(RangeError::NoShards);
        }
        let span = HASH_SPACE_END / u128::from(count);
        // The last shard also holds the remainder of the division.
        let index = (u128::from(hash) / span).min(u128::from(count - 1));
        Ok(u32::try_from(index).unwrap_or(count - 1))
    }

    /// The `count` shards of [`ShardRange::shard`], in order: contiguous, disjoint, covering
    /// the whole hash space.
    pub fn split(count: u32) -> Result<Vec<Self>, RangeError> {
        (0..count.max(1))
            .map(|index| ShardRange::shard(index, count))
            .collect()
    }

    /// The range covering both, when they touch or overlap.
    pub(crate) fn merged(self, other: ShardRange) -> Option<ShardRange> {
        let (low, high) = if self.start <= other.start {
            (self, other)
        } else {
            (other, self)
        };
        (u128::from(high.start) <= low.end).then(|| ShardRange {
            start: low.start,
            end: low.end.max(high.end),
        })
    }
}

/// `['0x…', '0x…')`, the bounds as a selector writes them.
impl fmt::Display for ShardRange {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "['{}', '{}')", hex(self.start.into()), hex(self.end))
    }
}

/// A bound as a selector writes it: `0x` and 16 lower-case digits, or 17 for 2^64.
pub(crate) fn hex(bound: u128) -> String {
    format!("0x{bound:016x}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_hash_falls_in_the_shard_index_of_names() {
        for count in [1, 2, 3, 7, 8, 4096] {
            for range in ShardRange::split(count).unwrap() {
                let index = ShardRange::index_of(range.start(), count).unwrap();
                assert_eq!(ShardRange::shard(index, count).unwrap(), range);
                let last = u64::try_from(range.end() - 1).unwrap();
                assert_eq!(ShardRange::index_of(last, count).unwrap(), index);
            }
        }
        assert_eq!(ShardRange::index_of(1, 0), Err(RangeError::NoShards));
    }

    #[test]
    fn ranges_are_half_open_and_never_empty() {
        let r = ShardRange::new(10, 20).unwrap();
        assert!(!r.contains(9));
        assert!(r.contains(10));
        assert!(r.contains(19));
        assert!(!r.contains(20));
        assert_eq!(
            ShardRange::new(5, 5),
            Err(RangeError::Empty { start: 5, end: 5 })
        );
        assert!(ShardRange::new(6, 5).is_err());
        assert_eq!(
            ShardRange::new(0, HASH_SPACE_END + 1),
            Err(RangeError::BeyondHashSpace {
                end: HASH_SPACE_END + 1
            })
        );
        assert!(ShardRange::FULL.contains(0) && ShardRange::FULL.contains(u64::MAX));
        assert!(ShardRange::from_start(u64::MAX).contains(u64::MAX));
    }

    #[test]
    fn bounds_are_written_with_sixteen_digits_or_seventeen_for_the_top() {
        assert_eq!(hex(0), "0x0000000000000000");
        assert_eq!(hex(0xc000_0000_0000_0000), "0xc000000000000000");
        assert_eq!(hex(HASH_SPACE_END), "0x10000000000000000");
        assert_eq!(
            ShardRange::FULL.to_string(),
            "['0x0000000000000000', '0x10000000000000000')"
        );
    }

    #[test]
    fn shards_tile_the_hash_space_in_order() {
        for count in [1u32, 2, 3, 4, 5, 7, 16, 1000, u32::MAX] {
            let first = ShardRange::shard(0, count).unwrap();
            let last = ShardRange::shard(count - 1, count).unwrap();
            assert_eq!(first.start(), 0, "{count}");
            assert_eq!(last.end(), HASH_SPACE_END, "{count}");
            let span = HASH_SPACE_END / u128::from(count);
            assert!(last.end() - u128::from(last.start()) - span < u128::from(count));
        }
        for count in [1u32, 2, 3, 5, 8, 13] {
            let shards = ShardRange::split(count).unwrap();
            assert_eq!(shards.len(), count as usize);
            for pair in shards.windows(2) {
                assert_eq!(pair[0].end(), u128::from(pair[1].start()), "{count}");
            }
        }
        assert_eq!(
            ShardRange::shard(1, 3).unwrap().start(),
            0x5555_5555_5555_5555
        );
        assert_eq!(ShardRange::shard(0, 0), Err(RangeError::NoShards));
        assert_eq!(
            ShardRange::shard(3, 3),
            Err(RangeError::NoSuchShard { index: 3, count: 3 })
        );
        assert_eq!(ShardRange::split(0), Err(RangeError::NoShards));
    }

    #[test]
    fn touching_or_overlapping_ranges_merge_and_apart_ones_do_not() {
        let a = ShardRange::new(0, 10).unwrap();
        let b = ShardRange::new(10, 20).unwrap();
        let c = ShardRange::new(15, 30).unwrap();
        let d = ShardRange::new(40, 50).unwrap();
        assert_eq!(a.merged(b), Some(ShardRange::new(0, 20).unwrap()));
        assert_eq!(b.merged(a), Some(ShardRange::new(0, 20).unwrap()));
        assert_eq!(b.merged(c), Some(ShardRange::new(10, 30).unwrap()));
        assert_eq!(a.merged(d), None);
    }
}
