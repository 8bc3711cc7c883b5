//! The factory's errors.

use informer_controller::InformerError;

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
    #[error("informer for {informer} failed")]
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
