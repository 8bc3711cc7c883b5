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

/// A line each reconcile's start and end is told as (a replica in a process of its own).
type Echo = Box<dyn Fn(&str) + Send + Sync>;

/// Every reconcile of a run, shared by the replicas (in one process), or filled from their
/// reports (replicas in processes of their own, see [`Ledger::echoing`] and [`Line`]).
pub struct Ledger {
    /// `None`: the wall clock (shared by the processes of one machine).
    epoch: Option<Instant>,
    entries: Mutex<Vec<Entry>>,
    echo: Option<Echo>,
}

impl fmt::Debug for Ledger {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Ledger")
            .field("entries", &self.entries.lock().len())
            .field("echoing", &self.echo.is_some())
            .finish()
    }
}

impl Default for Ledger {
    fn default() -> Self {
        Self {
            epoch: Some(Instant::now()),
            entries: Mutex::default(),
            echo: None,
        }
    }
}

impl Ledger {
    /// A ledger on the wall clock that tells `echo` a [`Line`] for every reconcile's start and
    /// end: what a replica in a process of its own reports to the run.
    pub fn echoing(echo: impl Fn(&str) + Send + Sync + 'static) -> Self {
        Self {
            epoch: None,
            entries: Mutex::default(),
            echo: Some(Box::new(echo)),
        }
    }

    /// Nanoseconds on the ledger's clock now.
    pub fn now(&self) -> u64 {
        match self.epoch {
            Some(epoch) => u64::try_from(epoch.elapsed().as_nanos()).unwrap_or(u64::MAX),
            None => wall_now(),
        }
    }

    /// Records a reconcile beginning now; it ends when the returned guard is dropped (also when
    /// the reconcile is cancelled, or its replica killed).
    pub fn begin(
        self: &Arc<Self>,
        replica: &str,
        key: &str,
        uid: Option<String>,
        saw: Saw,
    ) -> Open {
        let mut entries = self.entries.lock();
        let entry = Entry {
            replica: replica.to_owned(),
            key: key.to_owned(),
            uid,
            saw,
            begun: self.now(),
            ended: None,
        };
        let index = entries.len();
        if let Some(echo) = &self.echo {
            echo(&Line::Begin(index, entry.clone()).to_string());
        }
        entries.push(entry);
        Open {
            ledger: Arc::clone(self),
            index,
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
        if let Some(entry) = self.entries.lock().get_mut(index)
            && entry.ended.is_none()
        {
            entry.ended = Some(at);
            if let Some(echo) = &self.echo {
                echo(&Line::End(index, at).to_string());
            }
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

/// Nanoseconds since the Unix epoch on the wall clock.
pub fn wall_now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX))
}

/// A reconcile's start or end as one line of text, as a replica process reports it:
/// `begin <index> <replica> <key> <uid or -> <revision or deleted> <ns>`, `end <index> <ns>`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Line {
    /// The reconcile with this index (in the replica's own ledger) began (`ended` is `None`).
    Begin(usize, Entry),
    /// The reconcile with this index ended at this instant.
    End(usize, u64),
}

impl fmt::Display for Line {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Line::Begin(index, e) => {
                let saw = match e.saw {
                    Saw::Live(rv) => rv.to_string(),
                    Saw::Deleted => "deleted".to_owned(),
                };
                let uid = e.uid.as_deref().unwrap_or("-");
                write!(
                    f,
                    "begin {index} {} {} {uid} {saw} {}",
                    e.replica, e.key, e.begun
                )
            }
            Line::End(index, at) => write!(f, "end {index} {at}"),
        }
    }
}

impl std::str::FromStr for Line {
    type Err = String;

    fn from_str(line: &str) -> Result<Self, String> {
        let bad = || format!("not a ledger line: {line:?}");
        let parts: Vec<&str> = line.split(' ').collect();
        let number = |s: &str| s.parse::<u64>().map_err(|_| bad());
        match parts.as_slice() {
            ["begin", index, replica, key, uid, saw, begun] => Ok(Line::Begin(
                index.parse().map_err(|_| bad())?,
                Entry {
                    replica: (*replica).to_owned(),
                    key: (*key).to_owned(),
                    uid: (*uid != "-").then(|| (*uid).to_owned()),
                    saw: match *saw {
                        "deleted" => Saw::Deleted,
                        rv => Saw::Live(number(rv)?),
                    },
                    begun: number(begun)?,
                    ended: None,
                },
            )),
            ["end", index, at] => Ok(Line::End(index.parse().map_err(|_| bad())?, number(at)?)),
            _ => Err(bad()),
        }
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
                "{key} (uid {uid}): its last reconcile, by {}, saw {:?}, not its final version \
                 {rv}; the key's last reconciles: {}",
                entry.replica,
                entry.saw,
                history(entries, key)
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

/// The last reconciles of `key`, oldest first: who ran each, for which uid, what it saw, and
/// when (milliseconds on the ledger's clock), to tell how a wrong last reconcile came about.
fn history(entries: &[Entry], key: &str) -> String {
    const SHOWN: usize = 6;
    let mut of_key: Vec<&Entry> = entries.iter().filter(|e| e.key == key).collect();
    of_key.sort_by_key(|e| e.begun);
    let ms = |ns: u64| ns / 1_000_000;
    let told: Vec<String> = of_key[of_key.len().saturating_sub(SHOWN)..]
        .iter()
        .map(|e| {
            let ended = e
                .ended
                .map_or("running".to_owned(), |t| format!("{} ms", ms(t)));
            let uid = e.uid.as_deref().unwrap_or("none");
            format!(
                "[{} uid {uid} saw {:?} at {}–{ended}]",
                e.replica,
                e.saw,
                ms(e.begun)
            )
        })
        .collect();
    told.join(" ")
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
        let good = finals(
            &[old.clone(), old_gone, stale.clone(), fresh.clone()],
            &live,
        );
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
    fn lines_read_back_as_written_and_an_echoing_ledger_tells_both_ends() {
        let told = Arc::new(Mutex::new(Vec::new()));
        let ledger = Arc::new(Ledger::echoing({
            let told = Arc::clone(&told);
            move |line| told.lock().push(line.to_owned())
        }));
        drop(ledger.begin("r0", "ns/p", Some("u1".into()), Saw::Live(7)));
        drop(ledger.begin("r0", "ns/q", None, Saw::Deleted));
        let lines: Vec<Line> = told.lock().iter().map(|l| l.parse().unwrap()).collect();
        assert_eq!(lines.len(), 4);
        let entries = ledger.entries();
        assert_eq!(
            lines[0],
            Line::Begin(
                0,
                Entry {
                    ended: None,
                    ..entries[0].clone()
                }
            )
        );
        assert_eq!(lines[1], Line::End(0, entries[0].ended.unwrap()));
        assert_eq!(
            lines[2],
            Line::Begin(
                1,
                Entry {
                    ended: None,
                    ..entries[1].clone()
                }
            )
        );
        assert!(
            entries[0].begun > 1_600_000_000_000_000_000,
            "the wall clock"
        );
        assert!("begin 1 r0".parse::<Line>().is_err());
        assert!("end x 5".parse::<Line>().is_err());
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
