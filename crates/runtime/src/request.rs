//! A reconcile's input: the key, and the state of its object.

use std::sync::Arc;

use tokio_util::sync::CancellationToken;

/// The state of the object a reconcile is for.
#[derive(Debug)]
pub enum Target<K> {
    /// The object as the cache has it now.
    Live(Arc<K>),
    /// The object is gone from the cache; its last known state, if the controller saw one.
    Deleted {
        /// The state the deletion carried.
        last_known: Option<Arc<K>>,
    },
}

/// One reconcile's input: the key, its object's state, and when to give up.
#[derive(Debug)]
pub struct Request<K> {
    /// The object's cache key (`namespace/name` for a namespaced Kubernetes object).
    pub key: Arc<str>,
    /// Its state.
    pub target: Target<K>,
    /// Cancelled when this reconcile should give up: the controller is stopping, or, behind a
    /// leader election, its term has ended (another replica may be leading already). Tie long
    /// work to it (`tokio::select!` on `cancel.cancelled()`), so that it stops with the term
    /// rather than when its future is dropped.
    pub cancel: CancellationToken,
    /// Sharded, for a key whose object is not known at all (neither cached nor a remembered
    /// deletion): the uid of the controller owner named by the related object whose change
    /// woke it, when it names one (an owner gone, woken by its orphaned child), or the uid of
    /// the deleted object whose earlier reconcile asked to run again (see docs/semantics.md,
    /// SH-18). The object this reconcile is for: the key may have been
    /// created again since, with another uid and in another shard, and be reconciled there at
    /// the same time, so clean up only what belonged to this uid. `None` otherwise.
    pub owner_uid: Option<Arc<str>>,
}

impl<K> Clone for Target<K> {
    fn clone(&self) -> Self {
        match self {
            Self::Live(obj) => Self::Live(Arc::clone(obj)),
            Self::Deleted { last_known } => Self::Deleted {
                last_known: last_known.clone(),
            },
        }
    }
}

impl<K> Clone for Request<K> {
    fn clone(&self) -> Self {
        Self {
            key: Arc::clone(&self.key),
            target: self.target.clone(),
            cancel: self.cancel.clone(),
            owner_uid: self.owner_uid.clone(),
        }
    }
}
