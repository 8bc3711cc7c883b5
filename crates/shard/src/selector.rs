//! The selector: a hashed field and the ranges ORed together.

use std::fmt;
use std::str::FromStr;

use crate::range::hex;
use crate::{ParseError, RangeError, ShardRange, hash};

/// A field kube-apiserver can hash for sharding (v1.36: these two).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum ShardField {
    /// `object.metadata.uid`: spreads objects evenly, whatever their namespace.
    Uid,
    /// `object.metadata.namespace`: keeps a namespace's objects together (`""` for
    /// cluster-scoped objects, which all land in the same shard).
    Namespace,
}

impl ShardField {
    /// The path a selector names the field by (`object.metadata.uid`).
    pub fn path(self) -> &'static str {
        match self {
            ShardField::Uid => "object.metadata.uid",
            ShardField::Namespace => "object.metadata.namespace",
        }
    }

    /// The field named by `path`, if it is one that can be hashed.
    pub fn from_path(path: &str) -> Option<Self> {
        [ShardField::Uid, ShardField::Namespace]
            .into_iter()
            .find(|f| f.path() == path)
    }

    /// The field's name inside `metadata` (`uid`, `namespace`).
    pub fn metadata_key(self) -> &'static str {
        match self {
            ShardField::Uid => "uid",
            ShardField::Namespace => "namespace",
        }
    }
}

impl fmt::Display for ShardField {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.path())
    }
}

/// A `shardSelector`: the objects whose [`hash`] of `field` falls in one of the ranges.
///
/// Written (and parsed) as kube-apiserver takes it:
/// `shardRange(object.metadata.uid, '0x0000000000000000', '0x8000000000000000') || …`.
/// The ranges keep the order they were given in, so that parsing what [`Display`](fmt::Display)
/// writes gives the selector back; they may touch or overlap.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ShardSelector {
    field: ShardField,
    ranges: Vec<ShardRange>,
}

impl ShardSelector {
    /// The objects whose `field` hashes into one of `ranges` (at least one).
    pub fn new(
        field: ShardField,
        ranges: impl IntoIterator<Item = ShardRange>,
    ) -> Result<Self, RangeError> {
        let ranges: Vec<ShardRange> = ranges.into_iter().collect();
        if ranges.is_empty() {
            return Err(RangeError::NoRanges);
        }
        Ok(ShardSelector { field, ranges })
    }

    /// The union of shards `shards` of `count` equal ones ([`ShardRange::shard`]), adjacent
    /// shards merged into one range, in hash order: what a replica that owns those shards
    /// lists and watches.
    ///
    /// ```
    /// use informer_shard::{ShardField, ShardSelector};
    ///
    /// let owned = ShardSelector::for_shards(ShardField::Uid, 4, [3, 0, 1])?;
    /// assert_eq!(
    ///     owned.to_string(),
    ///     "shardRange(object.metadata.uid, '0x0000000000000000', '0x8000000000000000') || \
    ///      shardRange(object.metadata.uid, '0xc000000000000000', '0x10000000000000000')"
    /// );
    /// # Ok::<(), informer_shard::RangeError>(())
    /// ```
    pub fn for_shards(
        field: ShardField,
        count: u32,
        shards: impl IntoIterator<Item = u32>,
    ) -> Result<Self, RangeError> {
        let mut ranges = shards
            .into_iter()
            .map(|index| ShardRange::shard(index, count))
            .collect::<Result<Vec<_>, _>>()?;
        ranges.sort();
        let mut merged: Vec<ShardRange> = Vec::with_capacity(ranges.len());
        for range in ranges {
            if let Some(last) = merged.last_mut()
                && let Some(wider) = last.merged(range)
            {
                *last = wider;
            } else {
                merged.push(range);
            }
        }
        ShardSelector::new(field, merged)
    }

    /// The empty shard set: [`matches`](Self::matches) nothing, [`ranges`](Self::ranges) is
    /// empty. What a replica that owns no shard caches.
    ///
    /// A `shardSelector` cannot say "nothing" to a server (an empty one means everything), so
    /// this one is written (by [`Display`](fmt::Display)) as the narrowest range there is, the
    /// single hash 0: a server applying it sends (practically) nothing, and the client-side
    /// filter drops even that. It is the one selector that parsing what it writes does not give
    /// back.
    ///
    /// ```
    /// use informer_shard::{ShardField, ShardSelector};
    ///
    /// let none = ShardSelector::none(ShardField::Uid);
    /// assert!(none.is_none() && none.ranges().is_empty());
    /// assert!(!none.matches("") && !none.matches_hash(0));
    /// assert_eq!(
    ///     none.to_string(),
    ///     "shardRange(object.metadata.uid, '0x0000000000000000', '0x0000000000000001')"
    /// );
    /// ```
    pub fn none(field: ShardField) -> Self {
        ShardSelector {
            field,
            ranges: Vec::new(),
        }
    }

    /// Whether this is the empty shard set ([`none`](Self::none)).
    pub fn is_none(&self) -> bool {
        self.ranges.is_empty()
    }

    /// A selector of ranges already checked to be at least one.
    pub(crate) fn from_parts(field: ShardField, ranges: Vec<ShardRange>) -> Self {
        ShardSelector { field, ranges }
    }

    /// The field hashed.
    pub fn field(&self) -> ShardField {
        self.field
    }

    /// The ranges, ORed.
    pub fn ranges(&self) -> &[ShardRange] {
        &self.ranges
    }

    /// Whether an object whose field is `value` is selected: its [`hash`] is in a range.
    pub fn matches(&self, value: &str) -> bool {
        self.matches_hash(hash(value))
    }

    /// Whether a hash is in one of the ranges.
    pub fn matches_hash(&self, hash: u64) -> bool {
        self.ranges.iter().any(|r| r.contains(hash))
    }

    /// Whether every hash of `range` is selected: the ranges, together, cover it (however
    /// they overlap or touch). What tells whether a cache listed at this set holds a whole
    /// shard.
    ///
    /// ```
    /// use informer_shard::{ShardField, ShardRange, ShardSelector};
    ///
    /// let owned = ShardSelector::for_shards(ShardField::Uid, 4, [1, 2])?;
    /// assert!(owned.covers(ShardRange::shard(2, 4)?));
    /// assert!(owned.covers(ShardRange::new(0x4000_0000_0000_0000, 0xc000_0000_0000_0000)?));
    /// assert!(!owned.covers(ShardRange::shard(3, 4)?));
    /// assert!(!ShardSelector::none(ShardField::Uid).covers(ShardRange::shard(0, 4)?));
    /// # Ok::<(), informer_shard::RangeError>(())
    /// ```
    pub fn covers(&self, range: ShardRange) -> bool {
        let mut sorted: Vec<ShardRange> = self.ranges.clone();
        sorted.sort();
        // The first hash of `range` not yet known to be selected.
        let mut next = u128::from(range.start());
        for r in sorted {
            if u128::from(r.start()) > next {
                // A gap: the ranges after this one start later still.
                break;
            }
            next = next.max(r.end());
            if next >= range.end() {
                return true;
            }
        }
        false
    }
}

/// The form kube-apiserver accepts and echoes in `ListMeta.shardInfo.selector`: each range as
/// `shardRange(<path>, '0x<16 digits>', '0x<16 digits>')` (17 for 2^64), joined by ` || `.
///
/// The empty set ([`ShardSelector::none`]) is written as the single hash 0, the narrowest
/// range a server takes.
impl fmt::Display for ShardSelector {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.ranges.is_empty() {
            return write!(f, "shardRange({}, '{}', '{}')", self.field, hex(0), hex(1));
        }
        for (i, range) in self.ranges.iter().enumerate() {
            if i > 0 {
                f.write_str(" || ")?;
            }
            write!(
                f,
                "shardRange({}, '{}', '{}')",
                self.field,
                hex(range.start().into()),
                hex(range.end())
            )?;
        }
        Ok(())
    }
}

/// Parses the `shardSelector` grammar as kube-apiserver v1.36 does (see the crate docs); a
/// malformed selector is a [`ParseError`] naming the problem.
impl FromStr for ShardSelector {
    type Err = ParseError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        crate::parse::parse(s)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fields_are_named_by_their_object_rooted_paths() {
        for field in [ShardField::Uid, ShardField::Namespace] {
            assert_eq!(ShardField::from_path(field.path()), Some(field));
        }
        assert_eq!(ShardField::from_path("metadata.uid"), None);
        assert_eq!(ShardField::from_path("object.metadata.name"), None);
        assert_eq!(ShardField::Namespace.metadata_key(), "namespace");
    }

    #[test]
    fn a_selector_matches_the_hashes_in_any_of_its_ranges() {
        let low = ShardRange::new(0, 0x4000_0000_0000_0000).unwrap();
        let high = ShardRange::from_start(0xc000_0000_0000_0000);
        let s = ShardSelector::new(ShardField::Uid, [low, high]).unwrap();
        assert!(s.matches_hash(0));
        assert!(!s.matches_hash(0x8000_0000_0000_0000));
        assert!(s.matches_hash(u64::MAX));
        // FNV-1a of "" is 0xcbf29ce484222325: in the high range.
        assert!(s.matches(""));
        // and of "a" 0xaf63dc4c8601ec8c: in neither.
        assert!(!s.matches("a"));
        assert_eq!(
            ShardSelector::new(ShardField::Uid, []),
            Err(RangeError::NoRanges)
        );
    }

    #[test]
    fn owned_shards_merge_when_adjacent() {
        let all = ShardSelector::for_shards(ShardField::Namespace, 3, [2, 1, 0, 1]).unwrap();
        assert_eq!(all.ranges(), &[ShardRange::FULL]);
        let apart = ShardSelector::for_shards(ShardField::Uid, 8, [1, 5, 6]).unwrap();
        assert_eq!(apart.ranges().len(), 2);
        assert_eq!(
            ShardSelector::for_shards(ShardField::Uid, 2, []),
            Err(RangeError::NoRanges)
        );
        assert!(ShardSelector::for_shards(ShardField::Uid, 2, [2]).is_err());
    }
}
