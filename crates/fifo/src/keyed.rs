//! The DeltaFifo's pending changes: per key, in key arrival order.
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

/// Capacity (in keys) a drained queue keeps. Past it, the tables are shrunk when the queue
/// empties: an informer's first list can queue every object at once, and a queue that keeps
/// that peak forever costs about 90 bytes per cached object for nothing.
const KEEP_WHEN_EMPTY: usize = 1024;

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
    /// Deltas written, and those of them that joined a queued key.
    written: u64,
    coalesced: u64,
}

impl<K> Keyed<K> {
    pub(crate) fn new() -> Self {
        Self {
            hasher: RandomState::default(),
            table: HashTable::new(),
            slots: Vec::new(),
            free: Vec::new(),
            queue: VecDeque::new(),
            written: 0,
            coalesced: 0,
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

    /// The deltas queued for `key`, if any.
    pub(crate) fn get(&self, key: &str) -> Option<&Deltas<K>> {
        let id = self.find(self.hasher.hash_one(key), key)?;
        self.slots[id as usize].deltas.as_ref()
    }

    /// Appends `delta` to the deltas of `key`, queueing the key at the back if it is new.
    pub(crate) fn queue_delta(&mut self, key: String, delta: Delta<K>) {
        self.written += 1;
        let hash = self.hasher.hash_one(key.as_str());
        match self.find(hash, &key) {
            Some(id) => {
                self.coalesced += 1;
                self.push_to(id, delta);
            }
            None => {
                let id = self.insert(hash, Deltas::keyed(key, delta));
                self.queue.push_back(id);
            }
        }
    }

    /// Files `deltas` (keyed, and not queued yet) in a free slot; returns the slot.
    fn insert(&mut self, hash: u64, deltas: Deltas<K>) -> SlotId {
        let slot = Slot {
            hash,
            deltas: Some(deltas),
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
        id
    }

    /// A new `delta` for the queued key in slot `id` (counted as written and coalesced).
    pub(crate) fn push_queued(&mut self, id: SlotId, delta: Delta<K>) {
        self.written += 1;
        self.coalesced += 1;
        self.push_to(id, delta);
    }

    /// Appends `delta` to the deltas of the queued key in slot `id`, then deduplicates.
    fn push_to(&mut self, id: SlotId, delta: Delta<K>) {
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

    /// Gives back the memory of an empty queue's tables, down to [`KEEP_WHEN_EMPTY`] keys.
    fn shrink(&mut self) {
        debug_assert!(self.queue.is_empty() && self.table.is_empty());
        self.slots.shrink_to(KEEP_WHEN_EMPTY);
        self.free.shrink_to(KEEP_WHEN_EMPTY);
        self.queue.shrink_to(KEEP_WHEN_EMPTY);
        // Empty: the rehash closure is never called.
        self.table.shrink_to(KEEP_WHEN_EMPTY, |_| 0);
    }

    /// Capacity of the slot array (for tests).
    #[cfg(test)]
    fn slot_capacity(&self) -> usize {
        self.slots.capacity()
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
            if self.slots.capacity() > KEEP_WHEN_EMPTY {
                self.shrink();
            }
        } else {
            self.free.push(id);
        }
        // Every queued slot holds deltas; `None` would only mean a broken invariant.
        deltas
    }

    fn len(&self) -> usize {
        self.queue.len()
    }

    fn written(&self) -> (u64, u64) {
        (self.written, self.coalesced)
    }

    fn put_front(&mut self, deltas: Deltas<K>) -> Option<usize> {
        let hash = self.hasher.hash_one(deltas.key().unwrap_or_default());
        let Some(id) = self.find(hash, deltas.key().unwrap_or_default()) else {
            let id = self.insert(hash, deltas);
            self.queue.push_front(id);
            return None;
        };
        // The key was queued again meanwhile: its newer deltas go behind the ones put back, as
        // if they had been queued behind them (deduplicated the same way), at the front.
        let at = self.queue.iter().position(|&other| other == id)?;
        self.queue.remove(at);
        self.queue.push_front(id);
        let newer = self.slots[id as usize].deltas.replace(deltas);
        if let Some(newer) = newer {
            let (_, newer) = newer.into_parts();
            for delta in newer {
                self.push_to(id, delta);
            }
        }
        Some(at)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::delta::DeltaType;
    use std::sync::Arc;

    #[test]
    fn a_drained_queue_gives_back_its_peak_capacity() {
        let mut keyed = Keyed::new();
        for i in 0..10_000u32 {
            keyed.queue_delta(i.to_string(), Delta::new(DeltaType::Added, Arc::new(i)));
        }
        assert!(keyed.slot_capacity() >= 10_000);
        let mut popped = 0;
        while let Some(d) = keyed.take_front() {
            assert_eq!(d.key(), Some(popped.to_string().as_str()));
            popped += 1;
        }
        assert_eq!(popped, 10_000);
        assert!(keyed.slot_capacity() <= KEEP_WHEN_EMPTY);
        assert!(keyed.table.capacity() <= 2 * KEEP_WHEN_EMPTY);

        // And it still works.
        keyed.queue_delta("a".into(), Delta::new(DeltaType::Added, Arc::new(1)));
        assert!(keyed.contains("a"));
        assert_eq!(
            keyed.take_front().and_then(|d| d.key().map(str::to_owned)),
            Some("a".into())
        );
    }

    #[test]
    fn put_front_merges_what_was_queued_meanwhile_behind_the_deltas_put_back() {
        let mut keyed = Keyed::new();
        for key in ["a", "b", "c"] {
            keyed.queue_delta(key.into(), Delta::new(DeltaType::Added, Arc::new(1)));
        }
        let a = keyed.take_front().unwrap();
        let b = keyed.take_front().unwrap();
        // Meanwhile b is queued again, behind c.
        keyed.queue_delta("b".into(), Delta::new(DeltaType::Deleted, Arc::new(2)));
        keyed.queue_delta("b".into(), Delta::new(DeltaType::Deleted, Arc::new(3)));
        assert_eq!(keyed.put_front(b), Some(1), "b's entry was second");
        assert_eq!(keyed.put_front(a), None);
        let order: Vec<(String, Vec<DeltaType>)> = std::iter::from_fn(|| keyed.take_front())
            .map(|d| {
                let types = d.iter().map(Delta::delta_type).collect();
                (d.key().unwrap().to_owned(), types)
            })
            .collect();
        assert_eq!(
            order,
            [
                ("a".into(), vec![DeltaType::Added]),
                // The two deletes were already deduplicated; b keeps one entry, at the front.
                ("b".into(), vec![DeltaType::Added, DeltaType::Deleted]),
                ("c".into(), vec![DeltaType::Added]),
            ]
        );
    }

    #[test]
    fn a_small_queue_keeps_its_capacity_when_it_drains() {
        let mut keyed = Keyed::new();
        for i in 0..100u32 {
            keyed.queue_delta(i.to_string(), Delta::new(DeltaType::Added, Arc::new(i)));
        }
        let before = keyed.slot_capacity();
        while keyed.take_front().is_some() {}
        assert_eq!(keyed.slot_capacity(), before);
    }
}
