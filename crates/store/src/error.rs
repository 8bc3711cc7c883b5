//! The store layer's errors.

use crate::key::KeyError;

/// A boxed error returned by user-supplied functions (index functions, transforms).
pub type BoxError = Box<dyn std::error::Error + Send + Sync + 'static>;

/// Everything a [`Store`](crate::Store) or [`Indexer`](crate::Indexer) operation can fail with.
///
/// Every failing operation leaves the store exactly as it was: an error is never a half-applied
/// change.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The key function could not produce a key for an object.
    #[error(transparent)]
    Key(#[from] KeyError),

    /// An index function failed for the object stored (or about to be stored) under `key`.
    ///
    /// client-go panics in this case; here the operation is refused and the store is unchanged.
    #[error("unable to calculate an index entry for key {key:?} on index {index:?}: {source}")]
    IndexFunc {
        /// The name of the index whose function failed.
        index: String,
        /// The key of the object being indexed.
        key: String,
        /// What the index function returned.
        #[source]
        source: BoxError,
    },

    /// A lookup named an index that is not registered.
    #[error("index with name {0:?} does not exist")]
    UnknownIndex(String),

    /// `add_indexers` was given names that are already registered; nothing was added.
    #[error("indexer conflict: {0:?}")]
    IndexerConflict(Vec<String>),

    /// A transform function (applied by a queue to objects as they enter) failed; nothing was
    /// queued.
    #[error("transform failed: {0}")]
    Transform(#[source] BoxError),

    /// A write was made to a queue or store that has been closed.
    #[error("store is closed")]
    Closed,
}

/// `Result` with this crate's [`Error`] as the default error type.
pub type Result<T, E = Error> = std::result::Result<T, E>;
