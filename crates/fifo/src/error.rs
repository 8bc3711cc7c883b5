//! The queue layer's errors.

use informer_store::{BoxError, KeyError};

/// Why a queue refused an object (client-go's queues return the same two failures).
///
/// A refused `add`, `update` or `delete` returns it; a `replace` applies the rest of its list
/// and reports each refused object to the queue's [`RefusalHandler`](crate::RefusalHandler).
/// Its `Display` carries the cause.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The key function failed (or panicked) on the object: the queue cannot even tell which
    /// key it belongs to.
    #[error(transparent)]
    Key(#[from] KeyError),

    /// The transform failed (or panicked: the source is then a
    /// [`Panicked`](informer_store::Panicked)) on the object filed under `key`.
    #[error("transform failed for {key:?}: {source}")]
    Transform {
        /// The object's key.
        key: String,
        /// What the transform returned.
        #[source]
        source: BoxError,
    },
}

impl Error {
    /// The refused object's key, when it could be computed.
    pub fn key(&self) -> Option<&str> {
        match self {
            Self::Key(_) => None,
            Self::Transform { key, .. } => Some(key),
        }
    }

    /// Whether the error stands for a panic caught in the key function or the transform.
    pub fn is_panic(&self) -> bool {
        match self {
            Self::Key(key) => matches!(key, KeyError::Panicked(_)),
            Self::Transform { source, .. } => source.is::<informer_store::Panicked>(),
        }
    }
}

/// `Result` with this crate's [`Error`] as the default error type.
pub type Result<T, E = Error> = std::result::Result<T, E>;

#[cfg(test)]
mod tests {
    use super::*;

    /// `Display` carries the cause (the project's rule for every error type).
    #[test]
    fn display_carries_the_cause() {
        let err = Error::Transform {
            key: "ns/a".into(),
            source: "bad label".into(),
        };
        assert_eq!(err.to_string(), r#"transform failed for "ns/a": bad label"#);
        let err = Error::Key(KeyError::Panicked("boom".into()));
        assert_eq!(err.to_string(), "the key function panicked: boom");
        assert!(err.is_panic());
    }
}
