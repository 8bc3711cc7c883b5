//! What can stop a controller's run.

use informer::InformerError;

/// Errors of [`Controller::run`](crate::Controller::run).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RuntimeError {
    /// An informer the controller reads from stopped before it synced.
    #[error("an informer stopped before it synced")]
    NotSynced,
    /// A controller was both [`sharded`](crate::Controller::sharded) and in a
    /// [`leader_election`](crate::Controller::leader_election): it is one or the other.
    #[error("a controller is either sharded or in a leader election, not both")]
    ShardedAndElected,
    /// A sharded controller hashing uids [`owns`](crate::Controller::owns) an informer whose
    /// objects are hashed by their own uid, not their owner's: it would not cache the children
    /// of its owners. Build the informer with `shard_by(ShardBy::Owner)`.
    #[error("the sharded controller's child informer {informer} must be built with ShardBy::Owner")]
    ChildrenNotByOwner {
        /// The informer's name.
        informer: String,
    },
    /// Registering a handler on an informer failed.
    #[error("registering a handler: {0}")]
    Informer(#[from] InformerError),
}
