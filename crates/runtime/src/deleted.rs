//! The last known states of deleted main objects, kept for their reconciles, and the bounded
//! memory of those seen while standing by.

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;

/// How many deletions a controller standing by remembers by default (see
/// [`Controller::standby_deletions`](crate::Controller::standby_deletions)).
pub const STANDBY_DELETIONS: usize = 10_000;

/// The last known states of deleted main objects, kept for their reconciles.
///
/// While the controller stands by (an election, not leading), nothing is queued: a term queues
/// every cached key when it begins. Deletions are the exception, since the cache no longer has
/// them: the latest `limit` seen while standing by are remembered (oldest first in `standby`),
/// and queued when a term begins; older ones are forgotten and counted, so that a standby
/// replica's memory stays bounded however long it waits.
pub(crate) struct Deleted<K> {
    /// Per key, its last known state and the number of the deletion that recorded it.
    states: HashMap<Arc<str>, (Arc<K>, u64)>,
    /// The deletions recorded while standing by, oldest first (an entry whose key was added
    /// again or deleted again since is stale, and skipped when it comes up).
    standby: VecDeque<(Arc<str>, u64)>,
    /// Deletions recorded so far (each gets the next number).
    recorded: u64,
    /// At most this many deletions are remembered while standing by.
    pub(crate) limit: usize,
    /// Deletions forgotten over `limit` since the last term began.
    forgotten: u64,
}

impl<K> Deleted<K> {
    pub(crate) fn new() -> Self {
        Self {
            states: HashMap::new(),
            standby: VecDeque::new(),
            recorded: 0,
            limit: STANDBY_DELETIONS,
            forgotten: 0,
        }
    }

    /// Records `key`'s last known state; while standing by, within the limit.
    pub(crate) fn record(&mut self, key: Arc<str>, obj: Arc<K>, standing_by: bool) {
        self.recorded += 1;
        let n = self.recorded;
        if standing_by {
            self.standby.push_back((Arc::clone(&key), n));
        }
        self.states.insert(key, (obj, n));
        while self.standby.len() > self.limit {
            let Some((old, m)) = self.standby.pop_front() else {
                break;
            };
            if self.states.get(&old).is_some_and(|(_, at)| *at == m) {
                self.states.remove(&old);
                self.forgotten += 1;
            }
        }
    }

    /// `key`'s last known state, if remembered.
    pub(crate) fn get(&self, key: &str) -> Option<Arc<K>> {
        self.states.get(key).map(|(obj, _)| Arc::clone(obj))
    }

    /// Every deletion remembered, with its last known state.
    pub(crate) fn remembered(&self) -> Vec<(Arc<str>, Arc<K>)> {
        let states = self.states.iter();
        states
            .map(|(k, (obj, _))| (Arc::clone(k), Arc::clone(obj)))
            .collect()
    }

    /// `key` exists again: its deletion's state is no longer the one to reconcile.
    pub(crate) fn recreated(&mut self, key: &str) {
        self.states.remove(key);
    }

    /// Forgets `key`'s state if it is still `then` (a later deletion keeps its own).
    pub(crate) fn reconciled(&mut self, key: &str, then: &Arc<K>) {
        if self
            .states
            .get(key)
            .is_some_and(|(now, _)| Arc::ptr_eq(now, then))
        {
            self.states.remove(key);
        }
    }

    /// A term begins: every remembered deletion is to be queued, and the count of the
    /// forgotten ones starts again. Returns the keys and how many were forgotten.
    pub(crate) fn term_begins(&mut self) -> (Vec<Arc<str>>, u64) {
        self.standby.clear();
        let keys = self.states.keys().cloned().collect();
        (keys, std::mem::take(&mut self.forgotten))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn standing_by_keeps_the_latest_deletions_and_counts_the_rest() {
        let mut d = Deleted::<u32>::new();
        d.limit = 2;
        let rec = |d: &mut Deleted<u32>, k: &str, v: u32, standing_by: bool| {
            d.record(Arc::from(k), Arc::new(v), standing_by);
        };
        // While reconciling: no limit.
        for (k, v) in [("r1", 1), ("r2", 2), ("r3", 3)] {
            rec(&mut d, k, v, false);
        }
        // Standing by: a, then a again (its first entry goes stale), b, c.
        rec(&mut d, "a", 10, true);
        rec(&mut d, "a", 11, true);
        rec(&mut d, "b", 20, true);
        // a's stale entry leaves the window without counting; a's latest stays.
        assert_eq!(d.forgotten, 0);
        assert_eq!(d.get("a").as_deref(), Some(&11));
        rec(&mut d, "c", 30, true);
        // a's latest is the oldest of three: forgotten, counted.
        assert_eq!(d.forgotten, 1);
        assert_eq!(d.get("a"), None);
        // Re-added (the key's entry removed): its window entry goes stale, not counted.
        d.states.remove("b");
        rec(&mut d, "e", 50, true);
        assert_eq!(d.forgotten, 1);
        // The deletions from the term are kept whatever the window.
        assert_eq!(d.get("r1").as_deref(), Some(&1));
        let (mut keys, forgotten) = d.term_begins();
        keys.sort();
        let keys: Vec<&str> = keys.iter().map(|k| &**k).collect();
        assert_eq!(keys, ["c", "e", "r1", "r2", "r3"]);
        assert_eq!(forgotten, 1);
        assert_eq!((d.forgotten, d.standby.len()), (0, 0));
        // Reconciled: only the state it was given is forgotten.
        let c = d.get("c").expect("c");
        rec(&mut d, "c", 31, false);
        d.reconciled("c", &c);
        assert_eq!(d.get("c").as_deref(), Some(&31));
        let c = d.get("c").expect("c");
        d.reconciled("c", &c);
        assert_eq!(d.get("c"), None);
    }
}
