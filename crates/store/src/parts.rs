//! A replace delivered in parts: a relist applied page by page.

use std::collections::HashSet;
use std::fmt;
use std::sync::Arc;

/// What a [`ReflectorStore`](crate::ReflectorStore) keeps from one part of a replace to the
/// next, when a reflector hands it a list page by page
/// ([`replace_part`](crate::ReflectorStore::replace_part), then
/// [`replace_parts_done`](crate::ReflectorStore::replace_parts_done)).
///
/// An implementation does one of two things with the parts, decided on the first one and kept
/// for the rest: it **holds** them and replaces its whole content with them at the end (the
/// default, exactly [`replace`](crate::ReflectorStore::replace)), or it **applies** each part
/// as it comes and, at the end, deletes what no part listed. Applying lets the previous version
/// of each object be freed while the rest of the list is still arriving, so a relist does not
/// hold two generations of the collection; the keys listed so far are recorded here.
pub struct ReplaceParts<K> {
    held: Vec<Arc<K>>,
    listed: HashSet<String>,
    applying: Option<bool>,
}

impl<K> ReplaceParts<K> {
    /// An empty record: no part yet.
    pub fn new() -> Self {
        Self {
            held: Vec::new(),
            listed: HashSet::new(),
            applying: None,
        }
    }

    /// Whether the parts are applied as they come (`Some(true)`), held for the end
    /// (`Some(false)`), or not decided yet (`None`: no part so far).
    pub fn applying(&self) -> Option<bool> {
        self.applying
    }

    /// Decides, on the first part, whether the parts are applied; a later call changes nothing
    /// and returns the first decision.
    pub fn decide(&mut self, applying: bool) -> bool {
        *self.applying.get_or_insert(applying)
    }

    /// Holds `part` for the end, after the parts held before.
    pub fn hold(&mut self, part: Vec<Arc<K>>) {
        self.applying.get_or_insert(false);
        if self.held.is_empty() {
            self.held = part;
        } else {
            self.held.extend(part);
        }
    }

    /// Takes the objects held, in the order of their parts.
    pub fn take_held(&mut self) -> Vec<Arc<K>> {
        std::mem::take(&mut self.held)
    }

    /// The objects held, if the parts were held (or none came): what the end replaces the
    /// content with; the record itself if the parts were applied.
    pub fn into_held(self) -> Result<Vec<Arc<K>>, Self> {
        if self.applying == Some(true) {
            Err(self)
        } else {
            Ok(self.held)
        }
    }

    /// Records that an applied part listed `key`.
    pub fn note_listed(&mut self, key: &str) {
        if !self.listed.contains(key) {
            self.listed.insert(key.to_owned());
        }
    }

    /// Whether an applied part listed `key`.
    pub fn is_listed(&self, key: &str) -> bool {
        self.listed.contains(key)
    }

    /// Takes back the listing of `key` (a streaming list that reported the object deleted
    /// after a part listed it): an applied part's key stops counting as listed, so the end
    /// deletes it; a held object with that key (`key_of` tells each one's) is dropped.
    pub fn unlist(&mut self, key: &str, key_of: impl Fn(&K) -> Option<String>) {
        self.listed.remove(key);
        self.held
            .retain(|object| key_of(object).is_none_or(|held| held != key));
    }

    /// Takes the keys the applied parts listed, leaving none: for an implementation that ends a
    /// replace applied in parts by handing them on (a queue that leaves the deletions to its
    /// consumer).
    pub fn take_listed(&mut self) -> HashSet<String> {
        std::mem::take(&mut self.listed)
    }

    /// Forgets every part so far, as a list that starts again from its first page must: the
    /// objects held are dropped and the keys listed forgotten, so that the end deletes what
    /// the new list lacks. What was applied stays applied (each was a version the server
    /// listed), and whether parts are applied stays decided.
    pub fn restart(&mut self) {
        self.held = Vec::new();
        self.listed = HashSet::new();
    }
}

impl<K> Default for ReplaceParts<K> {
    fn default() -> Self {
        Self::new()
    }
}

impl<K> fmt::Debug for ReplaceParts<K> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ReplaceParts")
            .field("applying", &self.applying)
            .field("held", &self.held.len())
            .field("listed", &self.listed.len())
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn holding_keeps_the_parts_in_order_and_restart_forgets_them() {
        let mut parts = ReplaceParts::new();
        assert_eq!(parts.applying(), None);
        parts.hold(vec![Arc::new(1), Arc::new(2)]);
        parts.hold(vec![Arc::new(3)]);
        assert_eq!(parts.applying(), Some(false));
        assert!(!parts.decide(true), "the first decision stands");
        let held: Vec<i32> = parts.take_held().iter().map(|n| **n).collect();
        assert_eq!(held, [1, 2, 3]);
        parts.hold(vec![Arc::new(5)]);
        parts.restart();
        assert_eq!(
            parts.applying(),
            Some(false),
            "the decision outlives a restart"
        );
        parts.hold(vec![Arc::new(4)]);
        let held: Vec<i32> = parts.take_held().iter().map(|n| **n).collect();
        assert_eq!(held, [4]);
    }

    #[test]
    fn applying_records_each_key_once_and_restart_forgets_them() {
        let mut parts: ReplaceParts<()> = ReplaceParts::new();
        assert!(parts.decide(true));
        parts.note_listed("a");
        parts.note_listed("b");
        parts.note_listed("a");
        assert!(parts.is_listed("a") && parts.is_listed("b") && !parts.is_listed("c"));
        parts.restart();
        assert!(!parts.is_listed("a"));
        assert_eq!(parts.applying(), Some(true));
    }

    #[test]
    fn take_listed_hands_over_every_key_once() {
        let mut parts: ReplaceParts<()> = ReplaceParts::new();
        parts.decide(true);
        for key in ["a", "b", "a"] {
            parts.note_listed(key);
        }
        let mut taken: Vec<String> = parts.take_listed().into_iter().collect();
        taken.sort();
        assert_eq!(taken, ["a", "b"]);
        assert!(!parts.is_listed("a"), "taken, not copied");
    }

    #[test]
    fn unlist_takes_back_a_listed_key_and_drops_held_objects_with_it() {
        let mut applied: ReplaceParts<i32> = ReplaceParts::new();
        applied.decide(true);
        applied.note_listed("1");
        applied.note_listed("2");
        applied.unlist("1", |n| Some(n.to_string()));
        assert!(!applied.is_listed("1") && applied.is_listed("2"));

        let mut held = ReplaceParts::new();
        held.hold(vec![Arc::new(1), Arc::new(2), Arc::new(1), Arc::new(3)]);
        held.unlist("1", |n| (*n != 3).then(|| n.to_string()));
        let left: Vec<i32> = held.take_held().iter().map(|n| **n).collect();
        assert_eq!(
            left,
            [2, 3],
            "every object with the key, none without a key"
        );
    }
}
