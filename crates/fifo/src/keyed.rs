//! The DeltaFIFO's pending changes: per key, in key arrival order.
//!
//! Slots hold `(hash, deltas)`, the deltas carrying their key; a `HashTable` of slot numbers finds
//! a key's slot, and the FIFO is a ring of slot numbers. The table holds 4-byte slot numbers, not
//! keys, so it stays small and cache-resident; a pop removes its table entry by slot number with
//! the stored hash, without hashing or comparing the key again. The key `String` the key function
//! produced is moved into its slot and out again with the popped deltas, never copied.

use std::collections::VecDeque;
use std::hash::BuildHasher;

use foldhash::fast::RandomState;
use hashbrown::HashTable;

use crate::delta::{Delta, Deltas};
use crate::shared::Pending;

/// The index of a slot.
pub(crate) type SlotId = u32;

struct Slot<K> {
    hash: u64,
    /// `None` when the slot is free; otherwise keyed ([`Deltas::key`] is `Some`).
    deltas: Option<Deltas<K>>,
}

impl<K> Slot<K> {
    fn key(&self) -> Option<&str> {
        self.deltas.as_ref()?.key()
    }
}

pub(crate) struct Keyed<K> {
    hasher: RandomState,
    /// Slot numbers of the queued keys, found by key.
    table: HashTable<SlotId>,
    slots: Vec<Slot<K>>,
    free: Vec<SlotId>,
    /// Slot numbers in key arrival order; each queued key once.
    queue: VecDeque<SlotId>,
}

impl<K> Keyed<K> {
    pub(crate) fn new() -> Self {
        Self {
            hasher: RandomState::default(),
            table: HashTable::new(),
            slots: Vec::new(),
            free: Vec::new(),
            queue: VecDeque::new(),
        }
    }

    fn find(&self, hash: u64, key: &str) -> Option<SlotId> {
        let slots = &self.slots;
        self.table
            .find(hash, |&id| slots[id as usize].key() == Some(key))
            .copied()
    }

    /// Whether `key` has queued deltas.
    pub(crate) fn contains(&self, key: &str) -> bool {
        self.find(self.hasher.hash_one(key), key).is_some()
    }

    /// Appends `delta` to the deltas of `key`, queueing the key at the back if it is new.
    pub(crate) fn queue_delta(&mut self, key: String, delta: Delta<K>) {
        let hash = self.hasher.hash_one(key.as_str());
        match self.find(hash, &key) {
            Some(id) => self.push_to(id, delta),
            None => {
                let slot = Slot {
                    hash,
                    deltas: Some(Deltas::keyed(key, delta)),
                };
                let id = match self.free.pop() {
                    Some(id) => {
                        self.slots[id as usize] = slot;
                        id
                    }
                    None => {
                        let id = SlotId::try_from(self.slots.len())
                            .expect("fewer than 2^32 keys queued at once");
                        self.slots.push(slot);
                        id
                    }
                };
                let slots = &self.slots;
                self.table
                    .insert_unique(hash, id, |&id| slots[id as usize].hash);
                self.queue.push_back(id);
            }
        }
    }

    /// Appends `delta` to the deltas of the queued key in slot `id`, then deduplicates.
    pub(crate) fn push_to(&mut self, id: SlotId, delta: Delta<K>) {
        if let Some(deltas) = self.slots[id as usize].deltas.as_mut() {
            deltas.push(delta);
            deltas.dedup_newest();
        }
    }

    /// The queued keys in order: slot, key and deltas.
    pub(crate) fn queued(&self) -> impl Iterator<Item = (SlotId, &str, &Deltas<K>)> {
        self.queue.iter().filter_map(|&id| {
            let deltas = self.slots[id as usize].deltas.as_ref()?;
            Some((id, deltas.key()?, deltas))
        })
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.queue.is_empty()
    }
}

impl<K> Pending<K> for Keyed<K> {
    fn take_front(&mut self) -> Option<Deltas<K>> {
        let id = self.queue.pop_front()?;
        let slot = &mut self.slots[id as usize];
        let deltas = slot.deltas.take();
        let hash = slot.hash;
        if let Ok(entry) = self.table.find_entry(hash, |&other| other == id) {
            entry.remove();
        }
        if self.queue.is_empty() {
            // Every slot is free: start again from slot 0, so slots stay dense and in order.
            self.slots.clear();
            self.free.clear();
        } else {
            self.free.push(id);
        }
        // Every queued slot holds deltas; `None` would only mean a broken invariant.
        deltas
    }

    fn len(&self) -> usize {
        self.queue.len()
    }
}
