//! The factory's errors.

use informer::InformerError;

/// Errors from [`SharedInformerFactory`](crate::SharedInformerFactory).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum FactoryError {
    /// `start` was called outside a tokio runtime and the factory was given no runtime handle
    /// (see [`with_runtime`](crate::SharedInformerFactory::with_runtime)).
    #[error(
        "no tokio runtime to start informers on: call start() inside a runtime, or give the factory a handle"
    )]
    NoRuntime,
    /// The factory has been shut down: it starts nothing any more.
    #[error("the informer factory has been shut down")]
    ShutDown,
    /// An informer's run ended with an error.
    #[error("informer for {informer} failed: {source}")]
    Informer {
        /// The informer: its resource type and selection.
        informer: String,
        /// What went wrong.
        #[source]
        source: InformerError,
    },
    /// An informer's task panicked.
    #[error("informer for {informer} panicked")]
    Panicked {
        /// The informer: its resource type and selection.
        informer: String,
    },
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The rule of every error type here: `Display` carries the cause, so logging `{err}` loses
    /// nothing (and `source()` still returns it).
    #[test]
    fn display_carries_the_cause() {
        let cause = informer_store::Error::IndexFunc {
            index: "node".into(),
            key: "a/x".into(),
            source: "no node name".into(),
        };
        let err = FactoryError::Informer {
            informer: "Pod (namespace=a)".into(),
            source: InformerError::Store(cause),
        };
        let shown = err.to_string();
        assert!(shown.contains("Pod (namespace=a)"), "{shown}");
        assert!(shown.contains("no node name"), "{shown}");
        assert!(std::error::Error::source(&err).is_some());
    }
}
