//! What can stop a controller's run.

use informer::InformerError;

/// Errors of [`Controller::run`](crate::Controller::run).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RuntimeError {
    /// An informer the controller reads from stopped before it synced.
    #[error("an informer stopped before it synced")]
    NotSynced,
    /// Registering a handler on an informer failed.
    #[error("registering a handler: {0}")]
    Informer(#[from] InformerError),
}
