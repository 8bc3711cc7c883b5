//! One secondary index's data: indexed value → the slots that yield it, and, per slot, the values
//! it is filed under.
//!
//! The per-slot record is what makes writes cheap: an update compares the new object's values
//! with the recorded ones (a string comparison, no hashing, and no call of the index function on
//! the old object), and a delete finds the entries to clean up without computing anything.
//!
//! Layout:
//! * values are numbered ([`ValueId`]); `entries[id]` holds the value, its hash and its members;
//! * a `HashTable` of value numbers finds a value by string, hashed once per lookup;
//! * `by_slot[slot]` is one `u32` per slot: [`NO_VALUE`], one value number, or [`MANY_VALUES`]
//!   (the values are then in the `many` map; objects rarely yield more than one value);
//! * members are a sorted `Vec` of slot numbers (4 bytes each, iterated in slot order), switched
//!   to a hash set past [`FEW_MAX`] members so that adding and removing stay O(1) in a huge set.

use std::borrow::Cow;
use std::collections::HashMap;
use std::hash::BuildHasher;

use foldhash::fast::RandomState;
use hashbrown::{HashSet, HashTable};
use smallvec::SmallVec;

use crate::index::IndexValues;

/// The position of an object in the store's slot array.
pub(crate) type SlotId = u32;

/// The number of an indexed value within one index.
type ValueId = u32;

/// `by_slot` marker: the slot yields no value (or is free).
const NO_VALUE: u32 = u32::MAX;
/// `by_slot` marker: the slot yields several values, recorded in `many`.
const MANY_VALUES: u32 = u32::MAX - 1;

/// The most members kept as a sorted vector; one more switches the set to a hash set. A removal
/// from the vector moves up to this many 4-byte numbers (8 KiB at most).
pub(crate) const FEW_MAX: usize = 2048;

/// The slots filed under one value. Never empty while its value is in the index.
#[derive(Debug)]
enum Members {
    /// Sorted, no duplicates.
    Few(Vec<SlotId>),
    Many(HashSet<SlotId, RandomState>),
}

impl Members {
    fn one(id: SlotId) -> Self {
        Self::Few(vec![id])
    }

    fn insert(&mut self, id: SlotId) {
        match self {
            Self::Few(ids) => {
                // Slots are mostly filled in increasing order: try the end first.
                match ids.last() {
                    Some(&last) if last < id => ids.push(id),
                    _ => {
                        if let Err(at) = ids.binary_search(&id) {
                            ids.insert(at, id);
                        }
                    }
                }
                if ids.len() > FEW_MAX {
                    *self = Self::Many(ids.iter().copied().collect());
                }
            }
            Self::Many(ids) => {
                ids.insert(id);
            }
        }
    }

    fn remove(&mut self, id: SlotId) {
        match self {
            Self::Few(ids) => {
                if let Ok(at) = ids.binary_search(&id) {
                    ids.remove(at);
                }
            }
            Self::Many(ids) => {
                ids.remove(&id);
                if ids.len() <= FEW_MAX / 2 {
                    let mut few: Vec<SlotId> = ids.iter().copied().collect();
                    few.sort_unstable();
                    *self = Self::Few(few);
                }
            }
        }
    }

    fn len(&self) -> usize {
        match self {
            Self::Few(ids) => ids.len(),
            Self::Many(ids) => ids.len(),
        }
    }

    fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn iter(&self) -> MembersIter<'_> {
        match self {
            Self::Few(ids) => MembersIter::Few(ids.iter()),
            Self::Many(ids) => MembersIter::Many(ids.iter()),
        }
    }
}

/// The slots of one value, in slot order for small sets, in no particular order for large ones.
pub(crate) enum MembersIter<'a> {
    Few(std::slice::Iter<'a, SlotId>),
    Many(hashbrown::hash_set::Iter<'a, SlotId>),
}

impl<'a> Iterator for MembersIter<'a> {
    type Item = &'a SlotId;

    fn next(&mut self) -> Option<&'a SlotId> {
        match self {
            Self::Few(it) => it.next(),
            Self::Many(it) => it.next(),
        }
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        match self {
            Self::Few(it) => it.size_hint(),
            Self::Many(it) => it.size_hint(),
        }
    }
}

#[derive(Debug)]
struct Entry {
    value: Box<str>,
    hash: u64,
    members: Members,
}

/// The values of one index and the slots filed under each (see the module documentation).
#[derive(Debug, Default)]
pub(crate) struct ValueIndex {
    hasher: RandomState,
    table: HashTable<ValueId>,
    /// `None` for a free value number.
    entries: Vec<Option<Entry>>,
    free: Vec<ValueId>,
    by_slot: Vec<u32>,
    many: HashMap<SlotId, Box<[ValueId]>, RandomState>,
}

/// The value numbers a slot is recorded under.
type Recorded = SmallVec<[ValueId; 2]>;

impl ValueIndex {
    fn entry(&self, id: ValueId) -> Option<&Entry> {
        self.entries.get(id as usize)?.as_ref()
    }

    fn value_of(&self, id: ValueId) -> &str {
        self.entry(id).map_or("", |e| &e.value)
    }

    fn find(&self, value: &str) -> Option<ValueId> {
        self.find_hashed(self.hasher.hash_one(value), value)
    }

    fn find_hashed(&self, hash: u64, value: &str) -> Option<ValueId> {
        let entries = &self.entries;
        self.table
            .find(hash, |&id| {
                entries[id as usize]
                    .as_ref()
                    .is_some_and(|e| *e.value == *value)
            })
            .copied()
    }

    /// The slots filed under `value`; `None` if no slot is.
    pub(crate) fn members(&self, value: &str) -> Option<MembersIter<'_>> {
        let id = self.find(value)?;
        self.entry(id).map(|e| e.members.iter())
    }

    /// Every value with at least one slot.
    pub(crate) fn values(&self) -> impl Iterator<Item = &str> {
        self.entries.iter().flatten().map(|e| &*e.value)
    }

    /// The values slot `slot` is recorded under.
    fn recorded(&self, slot: SlotId) -> Recorded {
        match self.by_slot.get(slot as usize).copied().unwrap_or(NO_VALUE) {
            NO_VALUE => Recorded::new(),
            MANY_VALUES => self
                .many
                .get(&slot)
                .map_or_else(Recorded::new, |ids| ids.iter().copied().collect()),
            id => std::iter::once(id).collect(),
        }
    }

    fn record(&mut self, slot: SlotId, ids: &[ValueId]) {
        let at = slot as usize;
        if self.by_slot.len() <= at {
            if ids.is_empty() {
                return;
            }
            self.by_slot.resize(at + 1, NO_VALUE);
        }
        let was_many = self.by_slot[at] == MANY_VALUES;
        self.by_slot[at] = match ids {
            [] => NO_VALUE,
            [id] => *id,
            _ => {
                self.many.insert(slot, ids.into());
                MANY_VALUES
            }
        };
        if was_many && ids.len() < 2 {
            self.many.remove(&slot);
        }
    }

    /// Files `slot` under `value`; returns the value's number.
    fn add_member(&mut self, value: Cow<'_, str>, slot: SlotId) -> ValueId {
        let hash = self.hasher.hash_one(&*value);
        if let Some(id) = self.find_hashed(hash, &value) {
            if let Some(entry) = self.entries[id as usize].as_mut() {
                entry.members.insert(slot);
            }
            return id;
        }
        let entry = Some(Entry {
            value: value.into_owned().into_boxed_str(),
            hash,
            members: Members::one(slot),
        });
        let id = match self.free.pop() {
            Some(id) => {
                self.entries[id as usize] = entry;
                id
            }
            None => {
                // Two numbers are markers; more distinct values than that is not a supported size.
                let id = ValueId::try_from(self.entries.len())
                    .ok()
                    .filter(|&id| id < MANY_VALUES)
                    .expect("fewer than 2^32 - 2 values in one index");
                self.entries.push(entry);
                id
            }
        };
        let entries = &self.entries;
        self.table.insert_unique(hash, id, |&id| {
            entries[id as usize].as_ref().map_or(0, |e| e.hash)
        });
        id
    }

    /// Takes `slot` out of value `id`, dropping the value if no slot is left under it.
    fn remove_member(&mut self, id: ValueId, slot: SlotId) {
        let Some(entry) = self.entries.get_mut(id as usize).and_then(Option::as_mut) else {
            return;
        };
        entry.members.remove(slot);
        if entry.members.is_empty() {
            let hash = entry.hash;
            if let Ok(found) = self.table.find_entry(hash, |&other| other == id) {
                found.remove();
            }
            self.entries[id as usize] = None;
            self.free.push(id);
        }
    }

    /// Files `slot` under exactly `values`, touching only the entries that change.
    pub(crate) fn set(&mut self, slot: SlotId, values: IndexValues<'_>) {
        let old = self.recorded(slot);
        // The usual update: one value, the same as before. No hashing, no write.
        if let ([id], [value]) = (old.as_slice(), values.as_slice())
            && self.value_of(*id) == &**value
        {
            return;
        }
        if old.is_empty() && values.is_empty() {
            return;
        }
        let mut new = Recorded::new();
        for value in values {
            match old.iter().find(|&&id| self.value_of(id) == &*value) {
                Some(&id) => new.push(id),
                None => new.push(self.add_member(value, slot)),
            }
        }
        new.sort_unstable();
        new.dedup();
        for &id in &old {
            if !new.contains(&id) {
                self.remove_member(id, slot);
            }
        }
        self.record(slot, &new);
    }

    /// Takes `slot` out of every value it is filed under.
    pub(crate) fn clear(&mut self, slot: SlotId) {
        for id in self.recorded(slot) {
            self.remove_member(id, slot);
        }
        self.record(slot, &[]);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn slots(index: &ValueIndex, value: &str) -> Vec<SlotId> {
        let mut ids: Vec<SlotId> = index
            .members(value)
            .into_iter()
            .flatten()
            .copied()
            .collect();
        ids.sort_unstable();
        ids
    }

    #[test]
    fn a_set_past_the_small_size_becomes_a_hash_set_and_back() {
        let mut index = ValueIndex::default();
        let n = FEW_MAX as SlotId + 10;
        // In reverse, so that every insert lands at the front of the sorted vector.
        for slot in (0..n).rev() {
            index.set(slot, IndexValues::one("v"));
        }
        assert_eq!(slots(&index, "v"), (0..n).collect::<Vec<_>>());
        for slot in 0..n - 3 {
            index.clear(slot);
        }
        assert_eq!(slots(&index, "v"), [n - 3, n - 2, n - 1]);
        for slot in n - 3..n {
            index.set(slot, IndexValues::none());
        }
        assert_eq!(index.values().count(), 0);
        assert!(index.table.is_empty());
    }

    #[test]
    fn values_are_recorded_per_slot_and_numbers_reused() {
        let mut index = ValueIndex::default();
        index.set(0, ["a", "b", "a"].into_iter().collect());
        index.set(1, IndexValues::one("b"));
        assert_eq!(slots(&index, "a"), [0]);
        assert_eq!(slots(&index, "b"), [0, 1]);
        index.set(0, ["c"].into_iter().collect());
        assert!(index.many.is_empty(), "a slot back to one value");
        assert_eq!(slots(&index, "a"), Vec::<SlotId>::new());
        assert_eq!(slots(&index, "b"), [1]);
        assert_eq!(slots(&index, "c"), [0]);
        let mut values: Vec<&str> = index.values().collect();
        values.sort_unstable();
        assert_eq!(values, ["b", "c"]);
        index.set(2, IndexValues::one("d"));
        assert_eq!(index.entries.len(), 3, "d took a's freed number");
        index.clear(2);
        index.clear(0);
        index.clear(1);
        index.clear(7);
        assert_eq!(index.values().count(), 0);
    }
}
