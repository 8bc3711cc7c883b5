//! [`Journal`]: a handler that replays its notifications over an empty map as they arrive,
//! checking each against the view built so far, and [`WriteLog`]: every write the run made to
//! the server, to check notifications against.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::{Duration, Instant};

use informer::ResourceEventHandler;
use k8s_openapi::api::core::v1::Pod;
use parking_lot::Mutex;

use crate::record::CallLog;

/// A pod's cache key, `namespace/name`.
pub fn key_of(pod: &Pod) -> String {
    format!(
        "{}/{}",
        pod.metadata.namespace.as_deref().unwrap_or_default(),
        pod.metadata.name.as_deref().unwrap_or_default()
    )
}

/// A pod's resource version as the revision it names (0 if it has none or names none).
pub fn rv_of(pod: &Pod) -> u64 {
    revision_of(pod.metadata.resource_version.as_deref())
}

/// The revision a resource version of the simulator names: decimal, or `x` and hex with
/// `Config::opaque_resource_versions` (0 for none). Only the checks read versions as numbers,
/// to order what they saw; the stack under test passes them back as it got them.
pub fn revision_of(rv: Option<&str>) -> u64 {
    rv.and_then(|rv| match rv.strip_prefix('x') {
        Some(hex) => u64::from_str_radix(hex, 16).ok(),
        None => rv.parse().ok(),
    })
    .unwrap_or(0)
}

/// One notification, as far as the checks need it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Note {
    /// `on_add` (not from the initial list).
    Add {
        /// The key.
        key: String,
        /// The object's resource version.
        rv: u64,
    },
    /// `on_update` with a new resource version.
    Update {
        /// The key.
        key: String,
        /// The new object's resource version.
        rv: u64,
    },
    /// `on_delete` with the final state.
    Delete {
        /// The key.
        key: String,
        /// The final state's resource version (the deletion's).
        rv: u64,
    },
    /// `on_delete` with a tombstone: the final state was missed.
    Tombstone {
        /// The key.
        key: String,
        /// The last known state's resource version, if the tombstone has one.
        last_rv: Option<u64>,
        /// How many lists the informer had started when the tombstone arrived.
        lists_before: u64,
    },
}

#[derive(Debug, Default)]
struct JournalState {
    view: HashMap<String, u64>,
    violations: Vec<String>,
    notes: Vec<Note>,
    notifications: u64,
    tombstones: u64,
    seen: Vec<(u64, Instant)>,
}

/// How a [`Journal`] behaves.
#[derive(Debug, Clone, Default)]
pub struct JournalOptions {
    /// Sleep this long in every notification (a slow handler).
    pub delay: Duration,
    /// Keep every [`Note`] (for checking against the [`WriteLog`]).
    pub keep_notes: bool,
    /// Record when each change was seen (for handler lag).
    pub record_times: bool,
}

/// A handler that keeps its own view of the collection (key → resource version) by replaying
/// its notifications, and records each one that does not fit the view: an add of a key it
/// already has, an update whose old side is not what it last saw, a delete of a key it does not
/// have, a tombstone whose last state is not what it last saw.
#[derive(Debug)]
pub struct Journal {
    name: String,
    options: JournalOptions,
    lists: Arc<CallLog>,
    state: Mutex<JournalState>,
}

/// At most this many violations are kept per journal.
const MAX_VIOLATIONS: usize = 20;

impl Journal {
    /// A journal named `name` (for reports); `lists` tells how many lists the informer made.
    pub fn new(name: impl Into<String>, lists: Arc<CallLog>, options: JournalOptions) -> Self {
        Self {
            name: name.into(),
            options,
            lists,
            state: Mutex::default(),
        }
    }

    /// The journal's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The replayed view, sorted.
    pub fn view(&self) -> BTreeMap<String, u64> {
        self.state
            .lock()
            .view
            .iter()
            .map(|(k, v)| (k.clone(), *v))
            .collect()
    }

    /// Compares the view with `expected` under the journal's lock, without copying it (a copy
    /// of a large view would hold the handler up for longer); at most `limit` differences.
    pub fn diff(&self, expected: &BTreeMap<String, u64>, limit: usize) -> Vec<String> {
        let state = self.state.lock();
        let mut found = Vec::new();
        for (key, rv) in expected {
            match state.view.get(key) {
                None => found.push(format!("{key} missing (expected at {rv})")),
                Some(seen) if seen != rv => {
                    found.push(format!("{key} at {seen}, expected at {rv}"))
                }
                Some(_) => {}
            }
            if found.len() >= limit {
                return found;
            }
        }
        if state.view.len() + found.len() != expected.len() {
            for key in state.view.keys().filter(|k| !expected.contains_key(*k)) {
                found.push(format!("{key} present, expected absent"));
                if found.len() >= limit {
                    break;
                }
            }
        }
        found
    }

    /// Notifications that did not fit the view.
    pub fn violations(&self) -> Vec<String> {
        self.state.lock().violations.clone()
    }

    /// The notes kept (with [`JournalOptions::keep_notes`]).
    pub fn notes(&self) -> Vec<Note> {
        self.state.lock().notes.clone()
    }

    /// Notifications received.
    pub fn notifications(&self) -> u64 {
        self.state.lock().notifications
    }

    /// Tombstones received.
    pub fn tombstones(&self) -> u64 {
        self.state.lock().tombstones
    }

    /// `(resource version, when seen)` of every change (with [`JournalOptions::record_times`]).
    pub fn take_times(&self) -> Vec<(u64, Instant)> {
        std::mem::take(&mut self.state.lock().seen)
    }

    fn with_state(&self, f: impl FnOnce(&mut JournalState, &str)) {
        if !self.options.delay.is_zero() {
            std::thread::sleep(self.options.delay);
        }
        let mut state = self.state.lock();
        state.notifications += 1;
        f(&mut state, &self.name);
    }
}

impl JournalState {
    /// A notification's key must be its object's.
    fn check_key(&mut self, name: &str, key: &str, obj: &Pod) {
        let own = key_of(obj);
        if key != own {
            self.violation(format!("{name}: a notification for {key} carries {own}"));
        }
    }

    fn violation(&mut self, message: String) {
        if self.violations.len() < MAX_VIOLATIONS {
            self.violations.push(message);
        }
    }

    fn note(&mut self, options: &JournalOptions, note: Note, rv: Option<u64>) {
        if options.record_times
            && let Some(rv) = rv
        {
            self.seen.push((rv, Instant::now()));
        }
        if options.keep_notes {
            self.notes.push(note);
        }
    }
}

impl ResourceEventHandler<Pod> for Journal {
    fn on_add(&self, key: &str, obj: &Arc<Pod>, is_in_initial_list: bool) {
        self.with_state(|state, name| {
            let rv = rv_of(obj);
            state.check_key(name, key, obj);
            if let Some(had) = state.view.insert(key.to_owned(), rv) {
                state.violation(format!("{name}: add of {key}@{rv}, already seen at {had}"));
            }
            if !is_in_initial_list {
                state.note(
                    &self.options,
                    Note::Add {
                        key: key.to_owned(),
                        rv,
                    },
                    Some(rv),
                );
            }
        });
    }

    fn on_update(&self, key: &str, old: &Arc<Pod>, new: &Arc<Pod>) {
        self.with_state(|state, name| {
            let (old_rv, rv) = (rv_of(old), rv_of(new));
            state.check_key(name, key, new);
            match state.view.insert(key.to_owned(), rv) {
                Some(had) if had == old_rv => {}
                had => state.violation(format!(
                    "{name}: update of {key} from {old_rv} to {rv}, but the view had {had:?}"
                )),
            }
            if old_rv != rv {
                state.note(
                    &self.options,
                    Note::Update {
                        key: key.to_owned(),
                        rv,
                    },
                    Some(rv),
                );
            }
        });
    }

    fn on_delete(&self, key: &str, obj: &Arc<Pod>, final_state_unknown: bool) {
        self.with_state(|state, name| {
            state.check_key(name, key, obj);
            let rv = rv_of(obj);
            let had = state.view.remove(key);
            if final_state_unknown {
                state.tombstones += 1;
                // The last known state is the cache's last version: what this handler saw, or
                // (if it had fallen behind and coalesced) a later one, never an earlier one.
                if had.is_none_or(|had| had > rv) {
                    state.violation(format!(
                        "{name}: tombstone of {key} with last state {rv}, the view had {had:?}"
                    ));
                }
                let lists_before = self.lists.lists();
                state.note(
                    &self.options,
                    Note::Tombstone {
                        key: key.to_owned(),
                        last_rv: Some(rv),
                        lists_before,
                    },
                    None,
                );
            } else {
                if had.is_none() {
                    state.violation(format!("{name}: delete of {key}@{rv}, not in the view"));
                }
                state.note(
                    &self.options,
                    Note::Delete {
                        key: key.to_owned(),
                        rv,
                    },
                    Some(rv),
                );
            }
        });
    }
}

/// What a write did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WriteKind {
    /// Created or updated; `gold` tells whether the pod matches the selector afterwards.
    Upsert {
        /// Matches the selector.
        gold: bool,
    },
    /// Deleted.
    Delete,
}

/// One write to the server.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Write {
    /// The revision it took.
    pub rv: u64,
    /// What it did.
    pub kind: WriteKind,
    /// When it was issued.
    pub at: Instant,
}

/// Every write of a run, per key.
#[derive(Debug, Default)]
pub struct WriteLog {
    writes: Mutex<HashMap<String, Vec<Write>>>,
}

impl WriteLog {
    /// Records a write.
    pub fn record(&self, key: String, write: Write) {
        self.writes.lock().entry(key).or_default().push(write);
    }

    /// Writes recorded.
    pub fn len(&self) -> usize {
        self.writes.lock().values().map(Vec::len).sum()
    }

    /// Whether nothing was written.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// When each revision was written.
    pub fn times(&self) -> HashMap<u64, Instant> {
        self.writes
            .lock()
            .values()
            .flatten()
            .map(|w| (w.rv, w.at))
            .collect()
    }

    /// Checks the notes of an unfiltered handler against the writes: every add and update is a
    /// state the server had (and, with `selected`, one inside the selector); every delete with
    /// a final state is the write that removed the object (a delete, or with `selected` a
    /// relabel out of the selector); every tombstone stands for a removal the handler never
    /// saw — a removing write after the last state it had — and follows a relist.
    pub fn check_notes(&self, journal: &str, notes: &[Note], selected: bool) -> Vec<String> {
        let writes = self.writes.lock();
        let removes = |w: &Write| match w.kind {
            WriteKind::Delete => true,
            WriteKind::Upsert { gold } => selected && !gold,
        };
        let mut problems = Vec::new();
        let none = Vec::new();
        for note in notes {
            let problem = match note {
                Note::Add { key, rv } | Note::Update { key, rv } => {
                    let of_key = writes.get(key).unwrap_or(&none);
                    let ok = of_key.iter().any(|w| {
                        w.rv == *rv
                            && matches!(w.kind, WriteKind::Upsert { gold } if gold || !selected)
                    });
                    (!ok).then(|| format!("{journal}: {note:?} is not a state the server had"))
                }
                Note::Delete { key, rv } => {
                    let of_key = writes.get(key).unwrap_or(&none);
                    let ok = of_key.iter().any(|w| w.rv == *rv && removes(w));
                    (!ok).then(|| {
                        format!("{journal}: {note:?} does not match a removal on the server")
                    })
                }
                Note::Tombstone {
                    key,
                    last_rv,
                    lists_before,
                } => {
                    let of_key = writes.get(key).unwrap_or(&none);
                    let after = last_rv.unwrap_or(0);
                    if *lists_before < 2 {
                        Some(format!("{journal}: {note:?} before any relist"))
                    } else if !of_key.iter().any(|w| w.rv > after && removes(w)) {
                        Some(format!(
                            "{journal}: {note:?}, but the server never removed {key} after {after}"
                        ))
                    } else {
                        None
                    }
                }
            };
            if let Some(p) = problem
                && problems.len() < MAX_VIOLATIONS
            {
                problems.push(p);
            }
        }
        problems
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn revisions_are_read_from_decimal_and_opaque_versions() {
        assert_eq!(revision_of(Some("1234")), 1234);
        assert_eq!(revision_of(Some("x4d2")), 1234);
        assert_eq!(revision_of(Some("xzz")), 0);
        assert_eq!(revision_of(Some("")), 0);
        assert_eq!(revision_of(None), 0);
    }

    fn pod(ns: &str, name: &str, rv: u64) -> Arc<Pod> {
        let mut p = Pod::default();
        p.metadata.namespace = Some(ns.into());
        p.metadata.name = Some(name.into());
        p.metadata.resource_version = Some(rv.to_string());
        Arc::new(p)
    }

    fn journal() -> Journal {
        let options = JournalOptions {
            keep_notes: true,
            ..JournalOptions::default()
        };
        Journal::new("j", Arc::default(), options)
    }

    #[test]
    fn a_consistent_sequence_replays_to_the_final_view() {
        let j = journal();
        j.on_add("a/x", &pod("a", "x", 2), true);
        j.on_add("a/y", &pod("a", "y", 3), false);
        j.on_update("a/x", &pod("a", "x", 2), &pod("a", "x", 5));
        j.on_delete("a/y", &pod("a", "y", 6), false);
        assert!(j.violations().is_empty(), "{:?}", j.violations());
        assert_eq!(j.view(), BTreeMap::from([("a/x".to_owned(), 5)]));
        assert_eq!(j.notes().len(), 3, "initial adds are not notes");
    }

    #[test]
    fn a_stale_update_a_double_add_and_an_unknown_delete_are_violations() {
        let j = journal();
        j.on_add("a/x", &pod("a", "x", 2), false);
        j.on_add("a/x", &pod("a", "x", 3), false);
        j.on_update("a/x", &pod("a", "x", 2), &pod("a", "x", 4));
        j.on_delete("a/z", &pod("a", "z", 9), false);
        // A last known state older than what the handler saw.
        j.on_delete("a/x", &pod("a", "x", 1), true);
        // A key that is not the object's.
        j.on_add("a/w", &pod("a", "v", 1), false);
        assert_eq!(j.violations().len(), 5, "{:?}", j.violations());
        assert_eq!(j.tombstones(), 1);
    }

    #[test]
    fn notes_are_checked_against_the_writes() {
        let log = WriteLog::default();
        let at = Instant::now();
        let w = |rv, kind| Write { rv, kind, at };
        log.record("a/x".into(), w(2, WriteKind::Upsert { gold: true }));
        log.record("a/x".into(), w(3, WriteKind::Upsert { gold: false }));
        log.record("a/x".into(), w(4, WriteKind::Delete));
        let good = [
            Note::Add {
                key: "a/x".into(),
                rv: 2,
            },
            Note::Delete {
                key: "a/x".into(),
                rv: 4,
            },
        ];
        assert!(log.check_notes("j", &good, false).is_empty());
        // For the selector's informer the relabel out of it is the removal.
        let relabelled = [Note::Delete {
            key: "a/x".into(),
            rv: 3,
        }];
        assert!(log.check_notes("j", &relabelled, true).is_empty());
        assert_eq!(log.check_notes("j", &relabelled, false).len(), 1);
        let invented = [Note::Update {
            key: "a/x".into(),
            rv: 7,
        }];
        assert_eq!(log.check_notes("j", &invented, false).len(), 1);
        let early = Note::Tombstone {
            key: "a/x".into(),
            last_rv: Some(2),
            lists_before: 1,
        };
        assert_eq!(log.check_notes("j", &[early], false).len(), 1);
        let missed = Note::Tombstone {
            key: "a/x".into(),
            last_rv: Some(3),
            lists_before: 2,
        };
        assert!(log.check_notes("j", &[missed], false).is_empty());
        let never_removed = Note::Tombstone {
            key: "a/x".into(),
            last_rv: Some(4),
            lists_before: 2,
        };
        assert_eq!(log.check_notes("j", &[never_removed], false).len(), 1);
    }
}
