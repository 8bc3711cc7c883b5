//! What can be wrong with a shard selector: [`ParseError`] for its text, [`RangeError`] for the
//! values a range or a split is built from.

use std::fmt;

use crate::ShardField;

/// Which bound of a `shardRange()` a literal is: the inclusive start or the exclusive end.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Bound {
    /// The second argument, the inclusive lower bound.
    Start,
    /// The third argument, the exclusive upper bound.
    End,
}

impl fmt::Display for Bound {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Bound::Start => "hexStart",
            Bound::End => "hexEnd",
        })
    }
}

/// A `shardSelector` string that is not one kube-apiserver accepts. The message names the
/// problem and where it is; the server answers `400 BadRequest` with it.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ParseError {
    /// Nothing but whitespace. (An empty parameter is no selector at all; only whitespace is
    /// refused.)
    #[error("the shard selector is blank: leave the parameter out to select every object")]
    Blank,
    /// A token where the grammar wants another.
    #[error("unexpected {found} at byte {position}: expected {expected}")]
    Unexpected {
        /// Byte offset of the token in the selector.
        position: usize,
        /// The token found (or "the end").
        found: String,
        /// What could have come there.
        expected: &'static str,
    },
    /// A quote that is never closed.
    #[error("the string literal opened at byte {position} is not closed")]
    UnterminatedString {
        /// Byte offset of the opening quote.
        position: usize,
    },
    /// A backslash inside a string literal: hex bounds never need one.
    #[error("escape sequences are not allowed in the string literal at byte {position}")]
    Escape {
        /// Byte offset of the opening quote.
        position: usize,
    },
    /// A call of a function other than `shardRange`.
    #[error("unsupported function {name:?}: a shard selector is shardRange() calls joined by ||")]
    UnsupportedFunction {
        /// The function called.
        name: String,
    },
    /// `shardRange` with other than three arguments.
    #[error("shardRange() takes 3 arguments (field, hexStart, hexEnd), not {count}")]
    ArgumentCount {
        /// How many it was given.
        count: usize,
    },
    /// A first argument that is not a field path.
    #[error("the first argument of shardRange() must be a field path such as object.metadata.uid")]
    NotAFieldPath,
    /// A field path that cannot be hashed.
    #[error(
        "unsupported field path {path:?}: only object.metadata.uid and object.metadata.namespace can be hashed"
    )]
    UnsupportedField {
        /// The path given.
        path: String,
    },
    /// A bound that is not a string literal (a number, a path, a call).
    #[error("{bound} must be a quoted hex string such as '0x8000000000000000'")]
    NotAString {
        /// Which bound.
        bound: Bound,
    },
    /// A bound without the `0x` prefix (`0X` is not it either).
    #[error("{bound} {literal:?} must start with '0x'")]
    MissingPrefix {
        /// Which bound.
        bound: Bound,
        /// The literal's value.
        literal: String,
    },
    /// `'0x'` alone.
    #[error("{bound} has no digits after '0x'")]
    NoDigits {
        /// Which bound.
        bound: Bound,
    },
    /// A character other than `0-9a-f` after the prefix (upper case included).
    #[error("{bound} {literal:?} has {ch:?}, which is not a lower-case hex digit")]
    NotHex {
        /// Which bound.
        bound: Bound,
        /// The literal's value.
        literal: String,
        /// The first offending character.
        ch: char,
    },
    /// Other than 16 digits, and not the 17-digit end of the hash space.
    #[error("{bound} {literal:?} must have exactly 16 hex digits{}", suggestion.as_ref().map(|s| format!(" ({s:?}?)")).unwrap_or_default())]
    DigitCount {
        /// Which bound.
        bound: Bound,
        /// The literal's value.
        literal: String,
        /// The literal padded to 16 digits, when it is shorter.
        suggestion: Option<String>,
    },
    /// 17 digits that are not `0x10000000000000000` (2^64, the only value above 64 bits).
    #[error(
        "{bound} {literal:?} is beyond the hash space: the one 17-digit bound is '0x10000000000000000'"
    )]
    BeyondHashSpace {
        /// Which bound.
        bound: Bound,
        /// The literal's value.
        literal: String,
    },
    /// A range whose start is not below its end.
    #[error("the range start {start} is not below its end {end}")]
    EmptyRange {
        /// The start literal.
        start: String,
        /// The end literal.
        end: String,
    },
    /// Ranges ORed together that hash different fields.
    #[error("every range must hash the same field, not both {first} and {other}")]
    MixedFields {
        /// The field of the first range.
        first: ShardField,
        /// The other field.
        other: ShardField,
    },
}

/// Values a [`ShardRange`](crate::ShardRange), a split or a
/// [`ShardSelector`](crate::ShardSelector) cannot be built from.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum RangeError {
    /// `start >= end`.
    #[error("the range [{start:#x}, {end:#x}) is empty")]
    Empty {
        /// The start asked for.
        start: u64,
        /// The end asked for.
        end: u128,
    },
    /// An end above 2^64.
    #[error("the range end {end:#x} is beyond 2^64, the end of the hash space")]
    BeyondHashSpace {
        /// The end asked for.
        end: u128,
    },
    /// A selector without a range.
    #[error("a shard selector needs at least one range")]
    NoRanges,
    /// A split into zero shards.
    #[error("the hash space cannot be split into 0 shards")]
    NoShards,
    /// A shard number not below the shard count.
    #[error("there is no shard {index} among {count} (they are numbered from 0)")]
    NoSuchShard {
        /// The shard asked for.
        index: u32,
        /// The number of shards.
        count: u32,
    },
}
