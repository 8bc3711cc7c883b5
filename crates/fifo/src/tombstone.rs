//! Tombstones: what a Deleted delta carries when the final state of an object is unknown.

use std::fmt;
use std::sync::Arc;

/// An object that was deleted while no watch was open, found missing from a relist.
///
/// The queue knows the key for sure; `obj` is the last state it (or the cache) knew, which may be
/// stale, or absent when neither had it. client-go calls this `DeletedFinalStateUnknown`.
pub struct DeletedFinalStateUnknown<K> {
    /// The key of the deleted object.
    pub key: String,
    /// The last known state of the object, if any.
    pub obj: Option<Arc<K>>,
}

impl<K> Clone for DeletedFinalStateUnknown<K> {
    fn clone(&self) -> Self {
        Self {
            key: self.key.clone(),
            obj: self.obj.clone(),
        }
    }
}

impl<K: fmt::Debug> fmt::Debug for DeletedFinalStateUnknown<K> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("DeletedFinalStateUnknown")
            .field("key", &self.key)
            .field("obj", &self.obj)
            .finish()
    }
}

impl<K: PartialEq> PartialEq for DeletedFinalStateUnknown<K> {
    fn eq(&self, other: &Self) -> bool {
        self.key == other.key && self.obj == other.obj
    }
}

impl<K: Eq> Eq for DeletedFinalStateUnknown<K> {}

/// The payload of a Deleted delta: the object as last seen on a watch, or a tombstone.
///
/// A watch DELETED event carries the object's final state ([`Object`](Self::Object)); a deletion
/// discovered by a relist carries a [`DeletedFinalStateUnknown`] ([`Tombstone`](Self::Tombstone)).
/// A consumer applies either by key: `Store::delete_by_key(key)`.
///
/// The tombstone is boxed: it is rare, and boxing keeps every [`Delta`](crate::Delta) two words
/// long, which matters for queues that hold millions of them.
pub enum DeletedObject<K> {
    /// The final state of the object, as the watch reported it.
    Object(Arc<K>),
    /// The object vanished while unobserved; only its key is certain.
    Tombstone(Box<DeletedFinalStateUnknown<K>>),
}

impl<K> DeletedObject<K> {
    /// The object: the final state, or the tombstone's last known state (which may be absent).
    pub fn object(&self) -> Option<&Arc<K>> {
        match self {
            Self::Object(obj) => Some(obj),
            Self::Tombstone(tombstone) => tombstone.obj.as_ref(),
        }
    }

    /// The tombstone, if this deletion was discovered by a relist.
    pub fn tombstone(&self) -> Option<&DeletedFinalStateUnknown<K>> {
        match self {
            Self::Object(_) => None,
            Self::Tombstone(tombstone) => Some(tombstone),
        }
    }

    /// Whether this is a tombstone.
    pub fn is_tombstone(&self) -> bool {
        matches!(self, Self::Tombstone(_))
    }
}

impl<K> Clone for DeletedObject<K> {
    fn clone(&self) -> Self {
        match self {
            Self::Object(obj) => Self::Object(Arc::clone(obj)),
            Self::Tombstone(tombstone) => Self::Tombstone(tombstone.clone()),
        }
    }
}

impl<K: fmt::Debug> fmt::Debug for DeletedObject<K> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Object(obj) => f.debug_tuple("Object").field(obj).finish(),
            Self::Tombstone(tombstone) => f.debug_tuple("Tombstone").field(tombstone).finish(),
        }
    }
}

impl<K: PartialEq> PartialEq for DeletedObject<K> {
    fn eq(&self, other: &Self) -> bool {
        match (self, other) {
            (Self::Object(a), Self::Object(b)) => a == b,
            (Self::Tombstone(a), Self::Tombstone(b)) => a == b,
            _ => false,
        }
    }
}

impl<K: Eq> Eq for DeletedObject<K> {}

impl<K> From<Arc<K>> for DeletedObject<K> {
    fn from(obj: Arc<K>) -> Self {
        Self::Object(obj)
    }
}

impl<K> From<DeletedFinalStateUnknown<K>> for DeletedObject<K> {
    fn from(tombstone: DeletedFinalStateUnknown<K>) -> Self {
        Self::Tombstone(Box::new(tombstone))
    }
}
