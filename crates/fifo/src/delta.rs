//! Deltas: one change to one object, and the changes queued for one key.

use std::fmt;
use std::ops::Deref;
use std::sync::Arc;

use smallvec::SmallVec;

use crate::replaced_all::ReplacedAll;
use crate::tombstone::{DeletedFinalStateUnknown, DeletedObject};

/// The kind of a change.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum DeltaType {
    /// A watch reported the object as added.
    Added,
    /// A watch reported the object as modified.
    Updated,
    /// The object was deleted: reported by a watch, or found missing from a relist.
    Deleted,
    /// A relist reported the object (the queue's `emit_delta_type_replaced` option).
    Replaced,
    /// A resync re-delivered the cached object, or a relist reported it without the
    /// `emit_delta_type_replaced` option.
    Sync,
}

/// One change to one object, or (from an atomic [`InOrderFifo`](crate::InOrderFifo) only) to
/// the whole collection.
///
/// Only a [`Deleted`](Self::Deleted) delta can carry a tombstone: the type says so. The
/// whole-collection changes, [`ReplacedAll`](Self::ReplacedAll) and [`SyncAll`](Self::SyncAll),
/// carry no key and no single object ([`object`](Self::object) is `None`); their
/// [`delta_type`](Self::delta_type) is the kind of change they make to each object
/// ([`Replaced`](DeltaType::Replaced), [`Sync`](DeltaType::Sync)), and
/// [`is_whole_collection`](Self::is_whole_collection) tells them apart.
pub enum Delta<K> {
    /// See [`DeltaType::Added`].
    Added(Arc<K>),
    /// See [`DeltaType::Updated`].
    Updated(Arc<K>),
    /// See [`DeltaType::Deleted`].
    Deleted(DeletedObject<K>),
    /// See [`DeltaType::Replaced`].
    Replaced(Arc<K>),
    /// See [`DeltaType::Sync`].
    Sync(Arc<K>),
    /// A relist of the whole collection as one change: the consumer applies it to its cache in
    /// one step (see [`ReplacedAll`]). Only an atomic [`InOrderFifo`](crate::InOrderFifo)
    /// queues it.
    ReplacedAll(Box<ReplacedAll<K>>),
    /// A resync of the whole cache as one change: the consumer re-delivers every object its
    /// cache holds when the change comes up (see
    /// [`sync_all_changes`](crate::sync_all_changes)). Only an atomic
    /// [`InOrderFifo`](crate::InOrderFifo) queues it.
    SyncAll,
}

impl<K> Delta<K> {
    /// A delta of type `kind` for a live object.
    pub fn new(kind: DeltaType, obj: Arc<K>) -> Self {
        match kind {
            DeltaType::Added => Self::Added(obj),
            DeltaType::Updated => Self::Updated(obj),
            DeltaType::Deleted => Self::Deleted(DeletedObject::Object(obj)),
            DeltaType::Replaced => Self::Replaced(obj),
            DeltaType::Sync => Self::Sync(obj),
        }
    }

    /// A Deleted delta carrying a tombstone for `key`, with the last known state of the object
    /// if there is one.
    pub fn tombstone(key: impl Into<String>, obj: Option<Arc<K>>) -> Self {
        Self::Deleted(DeletedObject::from(DeletedFinalStateUnknown {
            key: key.into(),
            obj,
        }))
    }

    /// The kind of change.
    pub fn delta_type(&self) -> DeltaType {
        match self {
            Self::Added(_) => DeltaType::Added,
            Self::Updated(_) => DeltaType::Updated,
            Self::Deleted(_) => DeltaType::Deleted,
            Self::Replaced(_) => DeltaType::Replaced,
            Self::Sync(_) | Self::SyncAll => DeltaType::Sync,
            Self::ReplacedAll(_) => DeltaType::Replaced,
        }
    }

    /// The object; `None` for a tombstone that has no last known state and for a change of the
    /// whole collection.
    pub fn object(&self) -> Option<&Arc<K>> {
        match self {
            Self::Added(obj) | Self::Updated(obj) | Self::Replaced(obj) | Self::Sync(obj) => {
                Some(obj)
            }
            Self::Deleted(deleted) => deleted.object(),
            Self::ReplacedAll(_) | Self::SyncAll => None,
        }
    }

    /// Whether this changes the whole collection ([`ReplacedAll`](Self::ReplacedAll),
    /// [`SyncAll`](Self::SyncAll)) rather than one object.
    pub fn is_whole_collection(&self) -> bool {
        matches!(self, Self::ReplacedAll(_) | Self::SyncAll)
    }

    /// Whether this is a Deleted delta carrying a tombstone.
    pub fn is_tombstone(&self) -> bool {
        matches!(self, Self::Deleted(deleted) if deleted.is_tombstone())
    }
}

impl<K> Clone for Delta<K> {
    fn clone(&self) -> Self {
        match self {
            Self::Added(obj) => Self::Added(Arc::clone(obj)),
            Self::Updated(obj) => Self::Updated(Arc::clone(obj)),
            Self::Deleted(deleted) => Self::Deleted(deleted.clone()),
            Self::Replaced(obj) => Self::Replaced(Arc::clone(obj)),
            Self::Sync(obj) => Self::Sync(Arc::clone(obj)),
            Self::ReplacedAll(all) => Self::ReplacedAll(all.clone()),
            Self::SyncAll => Self::SyncAll,
        }
    }
}

impl<K: fmt::Debug> fmt::Debug for Delta<K> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut t = f.debug_tuple(match self {
            Self::Added(_) => "Added",
            Self::Updated(_) => "Updated",
            Self::Deleted(_) => "Deleted",
            Self::Replaced(_) => "Replaced",
            Self::Sync(_) => "Sync",
            Self::ReplacedAll(_) => "ReplacedAll",
            Self::SyncAll => "SyncAll",
        });
        match self {
            Self::Added(obj) | Self::Updated(obj) | Self::Replaced(obj) | Self::Sync(obj) => {
                t.field(obj)
            }
            Self::Deleted(deleted) => t.field(deleted),
            Self::ReplacedAll(all) => t.field(all),
            Self::SyncAll => &mut t,
        }
        .finish()
    }
}

impl<K: PartialEq> PartialEq for Delta<K> {
    fn eq(&self, other: &Self) -> bool {
        match (self, other) {
            (Self::Deleted(a), Self::Deleted(b)) => a == b,
            (Self::ReplacedAll(a), Self::ReplacedAll(b)) => a == b,
            (Self::SyncAll, Self::SyncAll) => true,
            (Self::Deleted(_) | Self::ReplacedAll(_) | Self::SyncAll, _)
            | (_, Self::Deleted(_) | Self::ReplacedAll(_) | Self::SyncAll) => false,
            _ => self.delta_type() == other.delta_type() && self.object() == other.object(),
        }
    }
}

impl<K: Eq> Eq for Delta<K> {}

/// The changes queued for one key, oldest first. Never empty.
///
/// `Deltas` derefs to a slice, so it can be iterated and indexed; [`oldest`](Self::oldest) and
/// [`newest`](Self::newest) need no `Option` because a `Deltas` always holds at least one delta.
/// A single delta (the usual case) is stored inline, without an allocation of its own.
///
/// A `Deltas` popped from one of this crate's queues also carries the key the queue filed it
/// under ([`key`](Self::key)), so the consumer can apply it to a cache without computing the key
/// again.
pub struct Deltas<K> {
    list: SmallVec<[Delta<K>; 1]>,
    key: Option<String>,
}

/// The error of building a [`Deltas`] from an empty list.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("0 length Deltas object")]
pub struct EmptyDeltas;

impl<K> Deltas<K> {
    /// Deltas holding one delta, with no key.
    pub fn new(first: Delta<K>) -> Self {
        let mut list = SmallVec::new();
        list.push(first);
        Self { list, key: None }
    }

    /// Deltas holding one delta, filed under `key`.
    pub(crate) fn keyed(key: String, first: Delta<K>) -> Self {
        let mut deltas = Self::new(first);
        deltas.key = Some(key);
        deltas
    }

    /// The key the queue filed these deltas under, if they came from a queue that records it
    /// (both of this crate's queues do). It is what the queue's key function returned for the
    /// objects, so a cache keyed by the same function can use it as is.
    pub fn key(&self) -> Option<&str> {
        self.key.as_deref()
    }

    /// The oldest delta.
    pub fn oldest(&self) -> &Delta<K> {
        &self.list[0]
    }

    /// The newest delta.
    pub fn newest(&self) -> &Delta<K> {
        &self.list[self.list.len() - 1]
    }

    /// The key (see [`key`](Self::key)) and the deltas, oldest first: both owned, so a
    /// consumer can apply the deltas by key without copying it.
    pub fn into_parts(self) -> (Option<String>, impl ExactSizeIterator<Item = Delta<K>>) {
        (self.key, self.list.into_iter())
    }

    /// The deltas, oldest first.
    pub fn into_vec(self) -> Vec<Delta<K>> {
        self.list.into_vec()
    }

    pub(crate) fn push(&mut self, delta: Delta<K>) {
        self.list.push(delta);
    }

    /// Collapses the two newest deltas into one when both are Deleted, keeping the more
    /// informative: the older one, unless the older is a tombstone. Nothing else is
    /// deduplicated.
    pub(crate) fn dedup_newest(&mut self) {
        let n = self.list.len();
        if n < 2 {
            return;
        }
        let (older, newer) = (&self.list[n - 2], &self.list[n - 1]);
        if let (Delta::Deleted(older), Delta::Deleted(_)) = (older, newer) {
            if older.is_tombstone() {
                self.list.swap_remove(n - 2);
            } else {
                self.list.pop();
            }
        }
    }
}

impl<K> Deref for Deltas<K> {
    type Target = [Delta<K>];

    fn deref(&self) -> &[Delta<K>] {
        &self.list
    }
}

impl<K> TryFrom<Vec<Delta<K>>> for Deltas<K> {
    type Error = EmptyDeltas;

    fn try_from(deltas: Vec<Delta<K>>) -> Result<Self, EmptyDeltas> {
        if deltas.is_empty() {
            Err(EmptyDeltas)
        } else {
            Ok(Self {
                list: SmallVec::from_vec(deltas),
                key: None,
            })
        }
    }
}

impl<K> From<Deltas<K>> for Vec<Delta<K>> {
    fn from(deltas: Deltas<K>) -> Self {
        deltas.into_vec()
    }
}

impl<K> IntoIterator for Deltas<K> {
    type Item = Delta<K>;
    type IntoIter = smallvec::IntoIter<[Delta<K>; 1]>;

    fn into_iter(self) -> Self::IntoIter {
        self.list.into_iter()
    }
}

impl<'a, K> IntoIterator for &'a Deltas<K> {
    type Item = &'a Delta<K>;
    type IntoIter = std::slice::Iter<'a, Delta<K>>;

    fn into_iter(self) -> Self::IntoIter {
        self.list.iter()
    }
}

impl<K> Clone for Deltas<K> {
    fn clone(&self) -> Self {
        Self {
            list: self.list.clone(),
            key: self.key.clone(),
        }
    }
}

impl<K: fmt::Debug> fmt::Debug for Deltas<K> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list().entries(&self.list).finish()
    }
}

impl<K: PartialEq> PartialEq for Deltas<K> {
    fn eq(&self, other: &Self) -> bool {
        self.list == other.list
    }
}

impl<K: Eq> Eq for Deltas<K> {}

#[cfg(test)]
mod tests {
    use super::*;

    fn tombstone(key: &str, obj: Option<u32>) -> Delta<u32> {
        Delta::tombstone(key, obj.map(Arc::new))
    }

    #[test]
    fn a_delta_is_two_words() {
        assert_eq!(size_of::<Delta<u32>>(), 2 * size_of::<usize>());
    }

    fn deltas(list: Vec<Delta<u32>>) -> Deltas<u32> {
        let mut d = Deltas::try_from(list).unwrap();
        d.dedup_newest();
        d
    }

    #[test]
    fn oldest_and_newest_are_the_ends() {
        let d = Deltas::try_from(vec![
            Delta::Added(Arc::new(1)),
            Delta::Updated(Arc::new(2)),
            Delta::Sync(Arc::new(3)),
        ])
        .unwrap();
        assert_eq!(d.oldest(), &Delta::Added(Arc::new(1)));
        assert_eq!(d.newest(), &Delta::Sync(Arc::new(3)));
        assert_eq!(d.len(), 3);
    }

    #[test]
    fn empty_deltas_cannot_be_built() {
        assert_eq!(
            Deltas::<u32>::try_from(Vec::new()).unwrap_err(),
            EmptyDeltas
        );
    }

    #[test]
    fn dedup_keeps_the_older_of_two_deletes_when_it_is_not_a_tombstone() {
        let older = Delta::new(DeltaType::Deleted, Arc::new(1));
        let d = deltas(vec![older.clone(), tombstone("k", Some(2))]);
        assert_eq!(d.into_vec(), vec![older]);
    }

    #[test]
    fn dedup_keeps_the_newer_of_two_deletes_when_the_older_is_a_tombstone() {
        let newer = Delta::new(DeltaType::Deleted, Arc::new(2));
        let d = deltas(vec![tombstone("k", Some(1)), newer.clone()]);
        assert_eq!(d.into_vec(), vec![newer]);
        let newer = tombstone("k", None);
        let d = deltas(vec![tombstone("k", Some(1)), newer.clone()]);
        assert_eq!(d.into_vec(), vec![newer]);
    }

    #[test]
    fn dedup_looks_only_at_the_two_newest_deltas() {
        let list = vec![
            Delta::new(DeltaType::Deleted, Arc::new(1)),
            Delta::Added(Arc::new(2)),
            Delta::new(DeltaType::Deleted, Arc::new(3)),
        ];
        assert_eq!(deltas(list.clone()).into_vec(), list);
    }

    #[test]
    fn dedup_leaves_repeated_non_delete_deltas_alone() {
        for kind in [
            DeltaType::Added,
            DeltaType::Updated,
            DeltaType::Replaced,
            DeltaType::Sync,
        ] {
            let list = vec![Delta::new(kind, Arc::new(1)), Delta::new(kind, Arc::new(1))];
            assert_eq!(deltas(list.clone()).into_vec(), list, "{kind:?}");
        }
    }

    #[test]
    fn object_of_a_tombstone_is_its_last_known_state() {
        assert_eq!(tombstone("k", Some(7)).object(), Some(&Arc::new(7)));
        assert_eq!(tombstone("k", None).object(), None);
        assert!(tombstone("k", None).is_tombstone());
        assert!(!Delta::new(DeltaType::Deleted, Arc::new(1)).is_tombstone());
    }
}
