//! A reconcile's input: the key, and the state of its object.

use std::sync::Arc;

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

/// One reconcile's input: the key and its object's state.
#[derive(Debug)]
pub struct Request<K> {
    /// The object's cache key (`namespace/name` for a namespaced Kubernetes object).
    pub key: Arc<str>,
    /// Its state.
    pub target: Target<K>,
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
        }
    }
}
