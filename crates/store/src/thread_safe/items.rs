//! The objects of a [`ThreadSafeStore`](super::ThreadSafeStore): a slot array (key and `Arc<K>`
//! per slot, freed slots reused) and a hash table from keys to slots.

use std::hash::BuildHasher;
use std::sync::Arc;

use foldhash::fast::RandomState;
use hashbrown::HashTable;

use crate::value_index::SlotId;

/// One stored object and its key.
pub(super) struct Slot<K> {
    pub(super) key: Box<str>,
    pub(super) obj: Arc<K>,
}

/// The objects: a slot array plus a key → slot table.
pub(super) struct Items<K> {
    pub(super) slots: Vec<Option<Slot<K>>>,
    free: Vec<SlotId>,
    table: HashTable<SlotId>,
    hasher: RandomState,
}

impl<K> Items<K> {
    pub(super) fn with_capacity(capacity: usize) -> Self {
        Self {
            slots: Vec::with_capacity(capacity),
            free: Vec::new(),
            table: HashTable::with_capacity(capacity),
            hasher: RandomState::default(),
        }
    }

    pub(super) fn len(&self) -> usize {
        self.table.len()
    }

    pub(super) fn hash(&self, key: &str) -> u64 {
        self.hasher.hash_one(key)
    }

    fn find(&self, key: &str) -> Option<SlotId> {
        self.find_hashed(self.hasher.hash_one(key), key)
    }

    pub(super) fn find_hashed(&self, hash: u64, key: &str) -> Option<SlotId> {
        let slots = &self.slots;
        self.table
            .find(hash, |&id| slot_key(slots, id) == key)
            .copied()
    }

    pub(super) fn slot(&self, id: SlotId) -> Option<&Slot<K>> {
        self.slots.get(id as usize)?.as_ref()
    }

    pub(super) fn get(&self, key: &str) -> Option<&Arc<K>> {
        self.find(key).and_then(|id| self.slot(id)).map(|s| &s.obj)
    }

    /// The slot [`insert_new`](Self::insert_new) will use next.
    pub(super) fn next_id(&self) -> SlotId {
        self.free
            .last()
            .copied()
            .unwrap_or(self.slots.len() as SlotId)
    }

    /// Stores `obj` in a fresh slot under `key`, which must not be present.
    /// `hash` is `key`'s hash (see [`Items::hash`]).
    pub(super) fn insert_new(&mut self, hash: u64, key: Box<str>, obj: Arc<K>) -> SlotId {
        let slot = Some(Slot { key, obj });
        let id = match self.free.pop() {
            Some(id) => {
                self.slots[id as usize] = slot;
                id
            }
            None => {
                // More than u32::MAX objects in one cache is not a supported size.
                let id = SlotId::try_from(self.slots.len()).expect("fewer than 2^32 objects");
                self.slots.push(slot);
                id
            }
        };
        let (slots, hasher) = (&self.slots, &self.hasher);
        self.table
            .insert_unique(hash, id, |&id| hasher.hash_one(slot_key(slots, id)));
        id
    }

    /// Removes `key`; returns its slot number and object.
    pub(super) fn remove(&mut self, key: &str) -> Option<(SlotId, Arc<K>)> {
        let hash = self.hasher.hash_one(key);
        let slots = &self.slots;
        let (id, _) = self
            .table
            .find_entry(hash, |&id| slot_key(slots, id) == key)
            .ok()?
            .remove();
        let slot = self.slots.get_mut(id as usize)?.take()?;
        self.free.push(id);
        Some((id, slot.obj))
    }

    pub(super) fn iter(&self) -> impl Iterator<Item = (SlotId, &Slot<K>)> {
        self.slots
            .iter()
            .enumerate()
            .filter_map(|(id, s)| Some((id as SlotId, s.as_ref()?)))
    }

    /// The objects in slots `ids`, shared.
    ///
    /// In two passes: first the object pointers are gathered (plain loads, which the CPU
    /// overlaps), then the reference counts are incremented. Done in one pass, each atomic
    /// increment waits for its own cache miss before the next load can start.
    pub(super) fn objects<'a>(&'a self, ids: impl IntoIterator<Item = &'a SlotId>) -> Vec<Arc<K>> {
        let found: Vec<&Arc<K>> = ids
            .into_iter()
            .filter_map(|&id| self.slot(id))
            .map(|s| &s.obj)
            .collect();
        found.into_iter().map(Arc::clone).collect()
    }
}

fn slot_key<K>(slots: &[Option<Slot<K>>], id: SlotId) -> &str {
    slots
        .get(id as usize)
        .and_then(Option::as_ref)
        .map_or("", |s| &s.key)
}
