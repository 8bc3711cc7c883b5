//! Shard selectors of Kubernetes' server-side sharded list and watch (KEP-5866, alpha in
//! v1.36 behind the `ShardedListAndWatch` feature gate).
//!
//! A controller scaled out to N replicas can ask the API server for its part of a collection
//! only: each list and watch carries a `shardSelector` such as
//! `shardRange(object.metadata.uid, '0x0000000000000000', '0x8000000000000000')`, and the server
//! sends only the objects whose hashed field falls in one of the ranges. This crate is the
//! client's and the simulator's shared piece of it, with no dependency on kube: the [`hash`]
//! exactly as the server computes it, [`ShardRange`] and [`ShardSelector`] (parsed and written
//! in the server's grammar), and the split of the hash space into equal shards
//! ([`ShardRange::shard`], [`ShardSelector::for_shards`]) that a shard assignment builds on.
//!
//! # Example
//!
//! ```
//! use informer_shard::{ShardField, ShardRange, ShardSelector};
//!
//! // Replica 1 of 2 owns the upper half of the hash space.
//! let mine = ShardSelector::for_shards(ShardField::Uid, 2, [1])?;
//! assert_eq!(
//!     mine.to_string(),
//!     "shardRange(object.metadata.uid, '0x8000000000000000', '0x10000000000000000')"
//! );
//! // What a server (or a client filtering by itself) decides for an object:
//! let uid = "8f0a5d4e-2c1b-4f7e-9a6d-3b2c1d0e9f8a";
//! assert_eq!(mine.matches(uid), informer_shard::hash(uid) >= 1 << 63);
//!
//! // Selectors parse as the API server parses them, and write themselves back the same way.
//! let text = "shardRange(object.metadata.namespace, '0x0000000000000000', '0x4000000000000000') \
//!             || shardRange(object.metadata.namespace, '0xc000000000000000', '0x10000000000000000')";
//! let parsed: ShardSelector = text.parse()?;
//! assert_eq!(parsed.ranges()[1], ShardRange::from_start(0xc000_0000_0000_0000));
//! assert_eq!(parsed.to_string(), text.replace("             ", ""));
//!
//! // A malformed one is refused with the reason (the server answers 400 with it).
//! let err = "shardRange(object.metadata.uid, '0x0', '0x8000000000000000')"
//!     .parse::<ShardSelector>()
//!     .unwrap_err();
//! assert!(err.to_string().contains("exactly 16 hex digits"));
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! # The semantics, as kube-apiserver v1.36 has them
//!
//! * **Hash**: 64-bit FNV-1a over the bytes of the field's value as the object stores it (the
//!   UID string as written, hyphens included; the namespace name; `""` for a cluster-scoped
//!   object's namespace). Ranges compare the hash as an unsigned number. Random (v4) UIDs
//!   spread evenly; but FNV-1a's top bits depend little on a value's last bytes, so values that
//!   differ only at their end (`team-1`, `team-2`, ...) can crowd into a few ranges.
//! * **Fields**: `object.metadata.uid` and `object.metadata.namespace` only (CEL paths rooted at
//!   `object`, not field-selector paths). All ranges of one selector hash the same field.
//! * **Ranges**: half-open, `[start, end)`; `start < end`. Each bound is a quoted string of
//!   `0x` and exactly 16 lower-case hex digits; the end of the space, 2^64, is the one 17-digit
//!   bound `'0x10000000000000000'`. `'0x0'`, upper-case digits and `0X` are refused.
//! * **Grammar**: a CEL expression that is one `shardRange(field, start, end)` call or several
//!   joined by `||` (overlapping ranges allowed), with any whitespace between tokens; no other
//!   function or operator:
//!
//!   ```text
//!   selector := term ( "||" term )*
//!   term     := "(" selector ")" | "shardRange" "(" path "," bound "," bound ")"
//!   path     := "object.metadata.uid" | "object.metadata.namespace"
//!   bound    := '0x' and 16 lower-case hex digits, or '0x10000000000000000' (either quote)
//!   ```
//! * **Absent / empty**: no `shardSelector` (or an empty one) selects everything; one of only
//!   whitespace is refused.
//! * **Errors**: a malformed selector fails the list or watch with `400 BadRequest`, the
//!   message naming the problem ([`ParseError`]).
//! * **Support**: a server that applied the selector says so in the list's metadata,
//!   `metadata.shardInfo.selector` (the selector it applied, in the form [`ShardSelector`]
//!   writes); without `shardInfo` the list is the whole, unfiltered collection (an older server,
//!   or the feature gate off), and a client must filter by itself ([`ShardSelector::matches`]).
//! * The selector is ANDed with the label and field selectors; a paginated list keeps it across
//!   pages (send it with every `continue`); a watch sends only the events of matching objects
//!   (bookmarks are not filtered). The two hashable fields never change on an object, so an
//!   object never moves between shards.
//!
//! Sources: the KEP (kubernetes/enhancements, `keps/sig-api-machinery/5866-server-side-sharded-list-and-watch`),
//! the API reference of `ListOptions.shardSelector` and `ShardInfo`, the v1.36 blog post
//! "Server-Side Sharded List and Watch", and kube-apiserver's `sharding` packages and their
//! integration tests.
//!
//! # Where this differs from kube-apiserver
//!
//! The server parses the selector with a full CEL parser. Here only the CEL that the server then
//! accepts is understood; the forms that could only be refused there anyway are refused with a
//! different message, and a few CEL spellings of a valid selector are refused here: escape
//! sequences, raw (`r'…'`) and triple-quoted string literals, and comments.

mod error;
mod parse;
mod range;
mod selector;

pub use error::{Bound, ParseError, RangeError};
pub use range::{HASH_SPACE_END, ShardRange};
pub use selector::{ShardField, ShardSelector};

/// FNV-1a's 64-bit offset basis.
const FNV_OFFSET_BASIS: u64 = 0xcbf2_9ce4_8422_2325;
/// FNV-1a's 64-bit prime.
const FNV_PRIME: u64 = 0x0000_0100_0000_01b3;

/// The 64-bit FNV-1a hash of `value`'s bytes: the hash the API server shards by.
///
/// ```
/// assert_eq!(informer_shard::hash(""), 0xcbf2_9ce4_8422_2325);
/// assert_eq!(informer_shard::hash("a"), 0xaf63_dc4c_8601_ec8c);
/// ```
pub fn hash(value: &str) -> u64 {
    value.bytes().fold(FNV_OFFSET_BASIS, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(FNV_PRIME)
    })
}

#[cfg(test)]
mod tests {
    use super::hash;

    /// Test vectors of the FNV reference (Landon Curt Noll's `test_fnv.c`, FNV-1a 64).
    #[test]
    fn the_hash_is_fnv_1a_64() {
        for (input, expected) in [
            ("", 0xcbf2_9ce4_8422_2325),
            ("a", 0xaf63_dc4c_8601_ec8c),
            ("b", 0xaf63_df4c_8601_f1a5),
            ("foo", 0xdcb2_7518_fed9_d577),
            ("foobar", 0x8594_4171_f739_67e8),
        ] {
            assert_eq!(hash(input), expected, "{input:?}");
        }
    }
}
