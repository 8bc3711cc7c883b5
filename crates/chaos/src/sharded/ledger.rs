//! The ledger of a sharded run: every reconcile of every replica, with the key, the object it
//! acted for, what it saw of the pod, and when it began and ended, on one clock; and the checks
//! over it once the churn is over.

use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::sync::Arc;
use std::time::Instant;

use parking_lot::Mutex;

/// What a reconcile saw of its pod.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Saw {
    /// The pod, at this resource version (its revision).
    Live(u64),
    /// The pod's deletion.
    Deleted,
}

/// One reconcile.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    /// The replica that ran it.
    pub replica: String,
    /// The key, `namespace/name`.
    pub key: String,
    /// The UID of the pod it acted for: the cached pod's, the deleted pod's last known one, or
    /// the owner of the key's child in the cache (`None`: none of these known).
    pub uid: Option<String>,
    /// What it saw of the pod.
    pub saw: Saw,
    /// When it began, in nanoseconds on the ledger's clock.
    pub begun: u64,
    /// When it ended (finished, failed or dropped); `None` while it runs, or if its process was
    /// killed before it could say (see [`Ledger::close_replica`]).
    pub ended: Option<u64>,
}

/// Every reconcile of a run, shared by the replicas (in one process), or filled from their
/// reports (replicas in processes of their own).
#[derive(Debug)]
pub struct Ledger {
    epoch: Instant,
    entries: Mutex<Vec<Entry>>,
}

impl Default for Ledger {
    fn default() -> Self {
        Self {
            epoch: Instant::now(),
            entries: Mutex::default(),
        }
    }
}

impl Ledger {
    /// Nanoseconds on the ledger's clock now.
    pub fn now(&self) -> u64 {
        u64::try_from(self.epoch.elapsed().as_nanos()).unwrap_or(u64::MAX)
    }

    /// Records a reconcile beginning now; it ends when the returned guard is dropped (also when
    /// the reconcile is cancelled, or its replica killed).
    pub fn begin(self: &Arc<Self>, replica: &str, key: &str, uid: Option<String>, saw: Saw) -> Open {
        let mut entries = self.entries.lock();
        entries.push(Entry {
            replica: replica.to_owned(),
            key: key.to_owned(),
            uid,
            saw,
            begun: self.now(),
            ended: None,
        });
        Open {
            ledger: Arc::clone(self),
            index: entries.len() - 1,
        }
    }

    /// Adds a reconcile reported whole (or begun only) by a replica elsewhere; returns its index.
    pub fn push(&self, entry: Entry) -> usize {
        let mut entries = self.entries.lock();
        entries.push(entry);
        entries.len() - 1
    }

    /// Ends the reconcile at `index` at `at`.
    pub fn end(&self, index: usize, at: u64) {
        if let Some(entry) = self.entries.lock().get_mut(index) {
            entry.ended.get_or_insert(at);
        }
    }

    /// Ends every reconcile of `replica` still open at `at`: its process died then.
    pub fn close_replica(&self, replica: &str, at: u64) {
        for entry in self.entries.lock().iter_mut() {
            if entry.replica == replica && entry.ended.is_none() {
                entry.ended = Some(at);
            }
        }
    }

    /// A copy of every entry so far.
    pub fn entries(&self) -> Vec<Entry> {
        self.entries.lock().clone()
    }

    /// How many reconciles were recorded.
    pub fn len(&self) -> usize {
        self.entries.lock().len()
    }

    /// Whether none was.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// A reconcile under way: ends its entry when dropped.
#[derive(Debug)]
pub struct Open {
    ledger: Arc<Ledger>,
    index: usize,
}

impl Drop for Open {
    fn drop(&mut self) {
        self.ledger.end(self.index, self.ledger.now());
    }
}

/// Two reconciles of one object by two replicas at overlapping times.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Overlap {
    /// The key.
    pub key: String,
    /// The first reconcile (by start).
    pub first: Entry,
    /// The one that began before the first had ended.
    pub second: Entry,
}

impl fmt::Display for Overlap {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let span = |e: &Entry| match e.ended {
            Some(end) => format!("{}..{} ns", e.begun, end),
            None => format!("{}.. ns (never ended)", e.begun),
        };
        write!(
            f,
            "{}: reconciled by {} ({}, uid {:?}) and by {} ({}, uid {:?}) at overlapping times",
            self.key,
            self.first.replica,
            span(&self.first),
            self.first.uid,
            self.second.replica,
            span(&self.second),
            self.second.uid
        )
    }
}

/// Whether two reconciles act for the same object: the same UID, or one of them not known.
fn same_object(a: &Entry, b: &Entry) -> bool {
    match (&a.uid, &b.uid) {
        (Some(a), Some(b)) => a == b,
        _ => true,
    }
}

/// Every pair of reconciles of one key by two different replicas whose spans overlap, for the
/// same object. A pod deleted and created again under its name is another object, with
/// another UID and so another shard: its reconciles may run beside the old one's cleanup.
/// An entry that never ended overlaps everything after its start.
pub fn overlaps(entries: &[Entry]) -> Vec<Overlap> {
    let mut by_key: BTreeMap<&str, Vec<&Entry>> = BTreeMap::new();
    for entry in entries {
        by_key.entry(&entry.key).or_default().push(entry);
    }
    let mut found = Vec::new();
    for (key, mut list) in by_key {
        list.sort_by_key(|e| e.begun);
        for (i, first) in list.iter().enumerate() {
            let end = first.ended.unwrap_or(u64::MAX);
            for second in &list[i + 1..] {
                if second.begun >= end {
                    break;
                }
                if second.replica != first.replica && same_object(first, second) {
                    found.push(Overlap {
                        key: key.to_owned(),
                        first: (*first).clone(),
                        second: (*second).clone(),
                    });
                }
            }
        }
    }
    found
}

/// What the final-version check found.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Finals {
    /// Live pods whose last reconcile saw their final resource version.
    pub live: usize,
    /// Pods gone whose last reconcile saw their deletion.
    pub deleted: usize,
    /// Pods gone whose deletion no reconcile saw: a pod deleted while its shard moved, that
    /// had left nothing on the server to wake its key (the convergence check holds them to
    /// that).
    pub unseen_deletions: usize,
    /// What is wrong.
    pub problems: Vec<String>,
}

/// Checks that every pod on the server (`key → (uid, revision)`) was last reconciled at its
/// final version, and that every other object reconciled was last reconciled as deleted (or
/// never seen deleted: counted). Objects are told apart by UID; reconciles without one count
/// for the key's current pod if it has none live.
pub fn finals(entries: &[Entry], live: &HashMap<String, (String, u64)>) -> Finals {
    let mut last: BTreeMap<(&str, Option<&str>), &Entry> = BTreeMap::new();
    for entry in entries {
        let slot = last
            .entry((entry.key.as_str(), entry.uid.as_deref()))
            .or_insert(entry);
        if entry.begun >= slot.begun {
            *slot = entry;
        }
    }
    let mut out = Finals::default();
    for (key, (uid, rv)) in live {
        match last.get(&(key.as_str(), Some(uid.as_str()))) {
            Some(entry) if entry.saw == Saw::Live(*rv) => out.live += 1,
            Some(entry) => out.problems.push(format!(
                "{key} (uid {uid}): its last reconcile, by {}, saw {:?}, not its final version {rv}",
                entry.replica, entry.saw
            )),
            None => out
                .problems
                .push(format!("{key} (uid {uid}, at {rv}): never reconciled")),
        }
    }
    for ((key, uid), entry) in &last {
        let current = live.get(*key).map(|(u, _)| u.as_str());
        if uid.is_none() || current == *uid {
            continue;
        }
        match entry.saw {
            Saw::Deleted => out.deleted += 1,
            Saw::Live(_) => out.unseen_deletions += 1,
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(replica: &str, key: &str, uid: &str, saw: Saw, span: (u64, Option<u64>)) -> Entry {
        Entry {
            replica: replica.into(),
            key: key.into(),
            uid: (!uid.is_empty()).then(|| uid.to_owned()),
            saw,
            begun: span.0,
            ended: span.1,
        }
    }

    #[test]
    fn overlapping_reconciles_of_one_object_by_two_replicas_are_found() {
        let a = entry("r0", "ns/p", "u1", Saw::Live(3), (10, Some(20)));
        // Back to back, another replica: fine. The same replica overlapping: its own check's.
        let b = entry("r1", "ns/p", "u1", Saw::Live(3), (20, Some(30)));
        let c = entry("r1", "ns/p", "u1", Saw::Live(3), (25, Some(26)));
        assert!(overlaps(&[a.clone(), b.clone(), c]).is_empty());
        // Another object under the same name (recreated): fine.
        let d = entry("r2", "ns/p", "u2", Saw::Live(9), (15, Some(40)));
        assert!(overlaps(&[a.clone(), d]).is_empty());
        // Overlapping, or never ended, or of an unknown object: found.
        let e = entry("r2", "ns/p", "u1", Saw::Deleted, (19, Some(21)));
        let found = overlaps(&[a.clone(), b.clone(), e]);
        assert_eq!(found.len(), 2, "{found:?}");
        let killed = entry("r3", "ns/p", "u1", Saw::Live(3), (5, None));
        assert_eq!(overlaps(&[killed, b.clone()]).len(), 1);
        let unknown = entry("r3", "ns/p", "", Saw::Deleted, (12, Some(13)));
        assert_eq!(overlaps(&[a, unknown]).len(), 1);
        assert!(overlaps(&[b]).is_empty());
    }

    #[test]
    fn the_last_reconcile_of_each_object_must_have_seen_its_final_state() {
        let live = HashMap::from([("ns/p".to_owned(), ("u2".to_owned(), 9))]);
        let old = entry("r0", "ns/p", "u1", Saw::Live(3), (1, Some(2)));
        let old_gone = entry("r1", "ns/p", "u1", Saw::Deleted, (5, Some(6)));
        let stale = entry("r1", "ns/p", "u2", Saw::Live(7), (3, Some(4)));
        let fresh = entry("r2", "ns/p", "u2", Saw::Live(9), (4, Some(8)));
        let good = finals(&[old.clone(), old_gone, stale.clone(), fresh.clone()], &live);
        assert_eq!((good.live, good.deleted, good.unseen_deletions), (1, 1, 0));
        assert!(good.problems.is_empty(), "{:?}", good.problems);
        // The old pod's deletion unseen: counted, not a problem by itself.
        let unseen = finals(&[old, stale.clone(), fresh.clone()], &live);
        assert_eq!(unseen.unseen_deletions, 1);
        // The last reconcile of the live pod saw an older version, or none ran.
        let late_stale = entry("r1", "ns/p", "u2", Saw::Live(7), (9, Some(10)));
        assert_eq!(finals(&[fresh, late_stale], &live).problems.len(), 1);
        assert_eq!(finals(&[stale], &HashMap::new()).unseen_deletions, 1);
        assert_eq!(finals(&[], &live).problems.len(), 1);
    }

    #[test]
    fn a_guard_ends_its_entry_and_a_dead_replica_ends_all_of_its_own() {
        let ledger = Arc::new(Ledger::default());
        let open = ledger.begin("r0", "ns/p", None, Saw::Deleted);
        assert_eq!(ledger.entries()[0].ended, None);
        drop(open);
        assert!(ledger.entries()[0].ended.is_some());
        let i = ledger.push(entry("r1", "ns/q", "u", Saw::Live(1), (5, None)));
        ledger.close_replica("r1", 99);
        assert_eq!(ledger.entries()[i].ended, Some(99));
        assert_eq!(ledger.len(), 2);
    }
}
