//! The store layer's errors.

use crate::key::KeyError;

/// A boxed error returned by user-supplied functions (index functions, transforms).
pub type BoxError = Box<dyn std::error::Error + Send + Sync + 'static>;

/// Everything a [`Store`](crate::Store) or [`Indexer`](crate::Indexer) operation can fail with.
///
/// Every failing operation leaves the store exactly as it was: an error is never a half-applied
/// change. Like every error of this project, its `Display` carries its cause (and `source()`
/// returns it too, for downcasting).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The key function could not produce a key for an object.
    #[error(transparent)]
    Key(#[from] KeyError),

    /// An index function failed (or panicked: the source is then a
    /// [`Panicked`](crate::Panicked)) for the object stored (or about to be stored) under `key`.
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

    /// A [`CompactStore`](crate::CompactStore)'s codec could not encode or decode an object.
    #[error("object {key:?} could not be encoded or decoded: {source}")]
    Codec {
        /// The object's key.
        key: String,
        /// The codec's error.
        #[source]
        source: BoxError,
    },
}

impl Error {
    /// The key of the object the error is about, when the error names one.
    pub fn key(&self) -> Option<&str> {
        match self {
            Self::IndexFunc { key, .. } | Self::Codec { key, .. } => Some(key),
            _ => None,
        }
    }

    /// Whether the error stands for a panic caught in a user function.
    pub fn is_panic(&self) -> bool {
        match self {
            Self::Key(key) => matches!(key, KeyError::Panicked(_)),
            Self::IndexFunc { source, .. } => source.is::<crate::Panicked>(),
            _ => false,
        }
    }
}

/// `Result` with this crate's [`Error`] as the default error type.
pub type Result<T, E = Error> = std::result::Result<T, E>;
