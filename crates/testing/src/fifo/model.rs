//! Reference models of [`DeltaFifo`] and [`InOrderFifo`] and a harness that checks the real
//! queues against them.
//!
//! The models are deliberately plain: the DeltaFifo is a `Vec<(key, Vec<Delta>)>` searched
//! linearly, the in-order FIFO a `Vec<(key, Delta)>`, the known objects a `BTreeMap`; each rule is
//! written out as client-go's documentation states it. [`run`] drives a model and the real queue
//! with the same operations, each fed by its own
//! cache that its pops are applied to (as a controller would), and panics at the first
//! difference: a write's result, a popped [`Deltas`] and its initial-list flag, the queued keys,
//! or `has_synced`.
//!
//! [`Op::PopDuring`] makes writes while a popped change is *in flight* (its `process` has not
//! returned, and the cache may or may not have it yet): the models then read the key in flight
//! as the cache will have it once the change is applied, and a resync skips it.
//!
//! The property test, the fuzz target (`fuzz/`) and the replay of the fuzz corpus all use this one
//! module, so they check the same thing; [`decode`] turns arbitrary bytes into a run.
//!
//! ```
//! use informer_testing::fifo::model::{decode, run};
//! let (config, ops) = decode(&[0b111, 0, 1, 3, 2, 0, 5, 4, 7, 2, 1]);
//! run(config, &ops);
//! ```

use std::collections::{BTreeMap, BTreeSet, HashSet, VecDeque};
use std::sync::{Arc, Mutex, PoisonError};

use informer_store::{KeyError, KnownObjects, ReplaceParts, key_func};

use informer_fifo::Error;

use informer_fifo::{
    DeletedObject, Delta, DeltaFifo, DeltaFifoOptions, DeltaType, Deltas, InOrderFifo,
    InOrderFifoOptions, Queue, QueueClosed, ReplacedAll, transform_func,
};

/// The object the model queues: keyed by `name` (an empty name is a key error).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Obj {
    /// The key; empty makes the key function fail.
    pub name: String,
    /// Distinguishes states of one key.
    pub version: u64,
    /// Makes the transform (when configured) fail.
    pub poison: bool,
}

/// What the transform adds to `version`: a transformed object is recognisable.
pub const TRANSFORMED: u64 = 1_000_000;

/// How the queue under test is configured.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Config {
    /// Give the queue a cache to read back.
    pub known_objects: bool,
    /// `replace` emits Replaced (else Sync).
    pub emit_replaced: bool,
    /// Install a transform that adds [`TRANSFORMED`] and fails on poisoned objects.
    pub transform: bool,
    /// Check [`InOrderFifo`] against [`InOrderModel`] instead of [`DeltaFifo`] against
    /// [`Model`].
    pub in_order: bool,
    /// With `in_order`: the queue's atomic mode (a relist is one `ReplacedAll`, a resync one
    /// `SyncAll`).
    pub atomic: bool,
}

/// One operation on the queue.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Op {
    /// `add`.
    Add(Obj),
    /// `update`.
    Update(Obj),
    /// `delete`.
    Delete(Obj),
    /// `replace` with this list; if parts were handed over since the last replace
    /// ([`ReplacePart`](Self::ReplacePart)), the list is the last part instead:
    /// `replace_part` with it, then `replace_parts_done`.
    Replace(Vec<Obj>),
    /// `replace_part` with this list: one more part of a replace in parts, which the next
    /// [`Replace`](Self::Replace) ends.
    ReplacePart(Vec<Obj>),
    /// `resync`.
    Resync,
    /// `pop`, if the model holds anything (a pop on an empty queue would block).
    Pop,
    /// `pop` (as [`Pop`](Self::Pop)), whose `process` makes `writes` (writes only: a pop from
    /// inside `process` is not allowed) while the popped change is in flight, and applies the
    /// change to the cache before them (`apply_first`) or after.
    PopDuring {
        /// Apply the popped change to the cache before the writes, not after.
        apply_first: bool,
        /// What `process` writes.
        writes: Vec<Op>,
    },
}

impl Op {
    /// Whether this is a write (not a pop).
    pub fn is_write(&self) -> bool {
        !matches!(self, Self::Pop | Self::PopDuring { .. })
    }
}

/// A change a model has handed over and whose `process` has not returned.
#[derive(Debug)]
struct InFlight {
    key: String,
    deltas: Vec<Delta<Obj>>,
    /// It counts towards the initial list.
    counted: bool,
}

impl InFlight {
    /// The key's object once the change is applied (none after a deletion).
    fn last(&self) -> Option<Arc<Obj>> {
        match self.deltas.last() {
            Some(Delta::Deleted(_)) | None => None,
            Some(delta) => delta.object().cloned(),
        }
    }
}

/// The known objects as they will be once the change in flight is applied.
fn known_get(
    config: Config,
    known: &BTreeMap<String, Arc<Obj>>,
    in_flight: Option<&InFlight>,
    key: &str,
) -> Option<Arc<Obj>> {
    if !config.known_objects {
        return None;
    }
    match in_flight {
        Some(flying) if flying.key == key => flying.last(),
        _ => known.get(key).cloned(),
    }
}

fn is_in_flight(in_flight: Option<&InFlight>, key: &str) -> bool {
    in_flight.is_some_and(|flying| flying.key == key)
}

/// Why a write failed, as far as the comparison cares.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Failure {
    /// A key function error.
    Key,
    /// A transform error.
    Transform,
    /// Anything else (never expected).
    Other,
}

fn failure(result: Result<(), Error>) -> Result<(), Failure> {
    result.map_err(|e| match e {
        Error::Key(_) => Failure::Key,
        Error::Transform { .. } => Failure::Transform,
        _ => Failure::Other,
    })
}

/// The transform of the model runs: adds [`TRANSFORMED`], fails on poisoned objects.
fn transform(config: Config, obj: &Obj) -> Result<Arc<Obj>, Failure> {
    if !config.transform {
        return Ok(Arc::new(obj.clone()));
    }
    if obj.poison {
        return Err(Failure::Transform);
    }
    let mut obj = obj.clone();
    obj.version += TRANSFORMED;
    Ok(Arc::new(obj))
}

/// The reference model of [`DeltaFifo`]: a `Vec` of `(key, deltas)` plus the known objects.
#[derive(Debug, Default)]
pub struct Model {
    config: Config,
    queue: Vec<(String, Vec<Delta<Obj>>)>,
    known: BTreeMap<String, Arc<Obj>>,
    in_flight: Option<InFlight>,
    populated: bool,
    initial: usize,
    parts: Option<Parts>,
}

impl Model {
    /// An empty model.
    pub fn new(config: Config) -> Self {
        Self {
            config,
            ..Self::default()
        }
    }

    fn key(obj: &Obj) -> Result<String, Failure> {
        if obj.name.is_empty() {
            Err(Failure::Key)
        } else {
            Ok(obj.name.clone())
        }
    }

    fn transform(&self, obj: &Obj) -> Result<Arc<Obj>, Failure> {
        transform(self.config, obj)
    }

    fn queued(&self, key: &str) -> bool {
        self.queue.iter().any(|(k, _)| k == key)
    }

    fn known_get(&self, key: &str) -> Option<Arc<Obj>> {
        known_get(self.config, &self.known, self.in_flight.as_ref(), key)
    }

    fn push(&mut self, key: &str, delta: Delta<Obj>) {
        match self.queue.iter_mut().find(|(k, _)| k == key) {
            None => self.queue.push((key.to_owned(), vec![delta])),
            Some((_, deltas)) => {
                deltas.push(delta);
                let n = deltas.len();
                if let [.., Delta::Deleted(older), Delta::Deleted(_)] = deltas.as_slice() {
                    if older.is_tombstone() {
                        deltas.remove(n - 2);
                    } else {
                        deltas.remove(n - 1);
                    }
                }
            }
        }
    }

    /// A refused version of `key`: a tombstone with the last known state, if there is one.
    fn withdraw(&mut self, key: &str, failure: Failure) -> Result<(), Failure> {
        let last = match self.queue.iter().find(|(k, _)| k == key) {
            Some((_, deltas)) => Some(deltas.last().and_then(|d| d.object()).cloned()),
            None => self.known_get(key).map(Some),
        };
        if let Some(last) = last {
            self.populated = true;
            self.push(key, Delta::tombstone(key, last));
        }
        Err(failure)
    }

    /// `add` (`kind` Added) or `update` (`kind` Updated).
    pub fn write(&mut self, kind: DeltaType, obj: &Obj) -> Result<(), Failure> {
        let key = Self::key(obj)?;
        let obj = match self.transform(obj) {
            Ok(obj) => obj,
            Err(failure) => return self.withdraw(&key, failure),
        };
        self.populated = true;
        self.push(&key, Delta::new(kind, obj));
        Ok(())
    }

    /// `delete`.
    pub fn delete(&mut self, obj: &Obj) -> Result<(), Failure> {
        let key = Self::key(obj)?;
        let known = self.known_get(&key).is_some();
        if !self.queued(&key) && !known {
            self.populated = true;
            return Ok(());
        }
        let obj = match self.transform(obj) {
            Ok(obj) => obj,
            Err(failure) => return self.withdraw(&key, failure),
        };
        self.populated = true;
        self.push(&key, Delta::Deleted(DeletedObject::Object(obj)));
        Ok(())
    }

    /// `replace`.
    pub fn replace(&mut self, list: &[Obj]) -> Result<(), Failure> {
        // Refused objects are left out; the rest of the list applies.
        let listed: Vec<_> = list
            .iter()
            .filter_map(|obj| Some((Self::key(obj).ok()?, self.transform(obj).ok()?)))
            .collect();
        let new_keys: BTreeSet<String> = listed.iter().map(|(k, _)| k.clone()).collect();
        let deletions = self.unlisted(&new_keys);
        let kind = self.listed_kind();
        for (key, obj) in listed {
            self.push(&key, Delta::new(kind, obj));
        }
        let count = new_keys.len() + deletions.len();
        for (key, obj) in deletions {
            self.push(&key, Delta::tombstone(key.as_str(), obj));
        }
        if !self.populated {
            self.populated = true;
            self.initial = count;
        }
        Ok(())
    }

    fn listed_kind(&self) -> DeltaType {
        if self.config.emit_replaced {
            DeltaType::Replaced
        } else {
            DeltaType::Sync
        }
    }

    /// The keys a replace listing `new_keys` deletes, with their last object.
    fn unlisted(&self, new_keys: &BTreeSet<String>) -> Vec<(String, Option<Arc<Obj>>)> {
        let mut deletions = Vec::new();
        for (key, deltas) in &self.queue {
            if !new_keys.contains(key) {
                let newest = deltas.last().and_then(|d| d.object()).cloned();
                deletions.push((key.clone(), newest));
            }
        }
        if self.config.known_objects {
            // The key in flight first, as the cache will have it; then the cache's other keys.
            if let Some(flying) = &self.in_flight
                && let Some(last) = flying.last()
                && !new_keys.contains(&flying.key)
                && !self.queued(&flying.key)
            {
                deletions.push((flying.key.clone(), Some(last)));
            }
            for (key, obj) in &self.known {
                let in_flight = is_in_flight(self.in_flight.as_ref(), key);
                if !new_keys.contains(key) && !self.queued(key) && !in_flight {
                    deletions.push((key.clone(), Some(Arc::clone(obj))));
                }
            }
        }
        deletions
    }

    /// `replace_part`: queued as `replace` queues its list, the initial list's parts too.
    pub fn replace_part(&mut self, list: &[Obj]) -> Result<(), Failure> {
        Parts::start(&mut self.parts);
        let kind = self.listed_kind();
        for obj in list {
            let (Ok(key), Ok(obj)) = (Self::key(obj), self.transform(obj)) else {
                continue;
            };
            Parts::note(&mut self.parts, &key);
            self.push(&key, Delta::new(kind, obj));
        }
        Ok(())
    }

    /// `replace_parts_done`: with no part, `replace` of nothing; else the deletions of what no
    /// part listed, and, if it is the first, the initial list is everything queued or in
    /// flight.
    pub fn replace_parts_done(&mut self) -> Result<(), Failure> {
        let Some(parts) = self.parts.take() else {
            return self.replace(&[]);
        };
        for (key, obj) in self.unlisted(&parts.listed) {
            self.push(&key, Delta::tombstone(key.as_str(), obj));
        }
        let queued = self.queue.len();
        populate_from_parts(
            &mut self.populated,
            &mut self.initial,
            &mut self.in_flight,
            queued,
        );
        Ok(())
    }

    /// `resync`.
    pub fn resync(&mut self) {
        if !self.config.known_objects {
            return;
        }
        let known: Vec<_> = self
            .known
            .iter()
            .map(|(k, o)| (k.clone(), Arc::clone(o)))
            .collect();
        for (key, obj) in known {
            if !self.queued(&key) && !is_in_flight(self.in_flight.as_ref(), &key) {
                self.push(&key, Delta::Sync(obj));
            }
        }
    }

    /// `pop`: the front key's deltas and the initial-list flag, applied to the model's cache.
    pub fn pop(&mut self) -> Option<(Vec<Delta<Obj>>, bool)> {
        let popped = self.take()?;
        self.finish();
        Some(popped)
    }

    /// The first half of `pop`: hands over the front key's deltas, which are in flight until
    /// [`finish`](Self::finish).
    pub fn take(&mut self) -> Option<(Vec<Delta<Obj>>, bool)> {
        assert!(self.in_flight.is_none(), "one pop at a time");
        if self.queue.is_empty() {
            return None;
        }
        let initial = !self.has_synced();
        let (key, deltas) = self.queue.remove(0);
        self.in_flight = Some(InFlight {
            key,
            deltas: deltas.clone(),
            counted: self.initial > 0,
        });
        Some((deltas, initial))
    }

    /// The second half of `pop`: `process` returned; the change is applied to the model's cache.
    pub fn finish(&mut self) {
        if let Some(flying) = self.in_flight.take() {
            if flying.counted {
                self.initial -= 1;
            }
            for delta in &flying.deltas {
                apply(&mut self.known, &flying.key, delta);
            }
        }
    }

    /// `has_synced`.
    pub fn has_synced(&self) -> bool {
        self.populated && self.initial == 0
    }

    /// The queued keys, front first.
    pub fn queued_keys(&self) -> Vec<String> {
        self.queue.iter().map(|(k, _)| k.clone()).collect()
    }
}

/// The reference model of [`InOrderFifo`]: a list of `(key, delta)` events.
#[derive(Debug, Default)]
pub struct InOrderModel {
    config: Config,
    events: VecDeque<(String, Delta<Obj>)>,
    known: BTreeMap<String, Arc<Obj>>,
    in_flight: Option<InFlight>,
    populated: bool,
    initial: usize,
    parts: Option<Parts>,
}

impl InOrderModel {
    /// An empty model.
    pub fn new(config: Config) -> Self {
        Self {
            config,
            ..Self::default()
        }
    }

    fn admit(&self, obj: &Obj) -> Result<(String, Arc<Obj>), Failure> {
        let key = Model::key(obj)?;
        Ok((key, transform(self.config, obj)?))
    }

    /// `add`, `update` or `delete`: always one event; a refused version of a key whose latest
    /// state holds an object queues a tombstone instead.
    pub fn write(&mut self, kind: DeltaType, obj: &Obj) -> Result<(), Failure> {
        let key = Model::key(obj)?;
        let obj = match transform(self.config, obj) {
            Ok(obj) => obj,
            Err(failure) => {
                if let Some(last) = self.superseded(&key) {
                    self.populated = true;
                    self.events.push_back(tombstone(&key, last));
                }
                return Err(failure);
            }
        };
        self.populated = true;
        self.events.push_back((key, Delta::new(kind, obj)));
        Ok(())
    }

    /// The state a refused version of `key` supersedes: `Some` of what its tombstone carries,
    /// or `None` if there is nothing to withdraw. The events from the newest: the key's own (a
    /// deletion: nothing), a relist of the whole collection (listed: its last object; listed
    /// by an earlier page: look further; else deleted), a resync of the whole cache (look
    /// further); then, with known objects, the change in flight (a relist of the whole
    /// collection: unknown, a tombstone without an object) and the cache.
    fn superseded(&self, key: &str) -> Option<Option<Arc<Obj>>> {
        for (k, delta) in self.events.iter().rev() {
            match delta {
                Delta::ReplacedAll(all) => {
                    let listed = all.objects().iter().rev().find(|(k, _)| k == key);
                    match listed {
                        Some((_, obj)) => return Some(Some(Arc::clone(obj))),
                        None if all.listed_by_pages(key) => {}
                        None => return None,
                    }
                }
                Delta::SyncAll => {}
                _ if k != key => {}
                Delta::Deleted(_) => return None,
                delta => return Some(delta.object().cloned()),
            }
        }
        if let Some(flying) = &self.in_flight
            && self.config.known_objects
            && matches!(flying.deltas.last(), Some(Delta::ReplacedAll(_)))
        {
            return Some(None);
        }
        known_get(self.config, &self.known, self.in_flight.as_ref(), key).map(Some)
    }

    /// `replace`: in atomic mode one `ReplacedAll` of the admitted list; else deletions first,
    /// then Replaced in list order.
    pub fn replace(&mut self, list: &[Obj]) -> Result<(), Failure> {
        // Refused objects are left out; the rest of the list applies.
        let listed: Vec<_> = list.iter().filter_map(|obj| self.admit(obj).ok()).collect();
        if self.config.atomic {
            let all = ReplacedAll::new(listed, String::new());
            self.events
                .push_back((String::new(), Delta::ReplacedAll(Box::new(all))));
            if !self.populated {
                self.populated = true;
                self.initial = self.events.len();
            }
            return Ok(());
        }
        let listed_keys: BTreeSet<String> = listed.iter().map(|(k, _)| k.clone()).collect();
        let deletions = self.unlisted(&listed_keys);
        self.events.extend(deletions);
        for (key, obj) in listed {
            self.events.push_back((key, Delta::Replaced(obj)));
        }
        if !self.populated {
            self.populated = true;
            self.initial = self.events.len();
        }
        Ok(())
    }

    /// The tombstones of a replace listing `listed_keys`.
    fn unlisted(&self, listed_keys: &BTreeSet<String>) -> Vec<(String, Delta<Obj>)> {
        // Queued keys in order of first appearance, and the last event of each.
        let mut first_seen: Vec<&str> = Vec::new();
        let mut last: BTreeMap<&str, &Delta<Obj>> = BTreeMap::new();
        for (key, delta) in &self.events {
            if last.insert(key, delta).is_none() {
                first_seen.push(key);
            }
        }
        let mut deletions = Vec::new();
        for key in &first_seen {
            let last = last[key];
            if !listed_keys.contains(*key) && last.delta_type() != DeltaType::Deleted {
                deletions.push(tombstone(key, last.object().cloned()));
            }
        }
        if self.config.known_objects {
            let unlisted = |key: &str| !listed_keys.contains(key) && !last.contains_key(key);
            // The key in flight first, as the cache will have it; then the cache's other keys.
            if let Some(flying) = &self.in_flight
                && let Some(obj) = flying.last()
                && unlisted(&flying.key)
            {
                deletions.push(tombstone(&flying.key, Some(obj)));
            }
            for (key, obj) in &self.known {
                if unlisted(key) && !is_in_flight(self.in_flight.as_ref(), key) {
                    deletions.push(tombstone(key, Some(Arc::clone(obj))));
                }
            }
        }
        deletions
    }

    /// `replace_part`: queued as Replaced events, the initial list's parts too.
    pub fn replace_part(&mut self, list: &[Obj]) -> Result<(), Failure> {
        Parts::start(&mut self.parts);
        let listed: Vec<_> = list.iter().filter_map(|obj| self.admit(obj).ok()).collect();
        for (key, obj) in listed {
            Parts::note(&mut self.parts, &key);
            self.events.push_back((key, Delta::Replaced(obj)));
        }
        Ok(())
    }

    /// `replace_parts_done`: with no part, `replace` of nothing; else the tombstones of what
    /// the parts did not list after their own events (atomic: one `ReplacedAll` that deletes
    /// them), and, if it is the first, the initial list is everything queued or in flight.
    pub fn replace_parts_done(&mut self) -> Result<(), Failure> {
        let Some(parts) = self.parts.take() else {
            return self.replace(&[]);
        };
        if self.config.atomic {
            let listed: HashSet<String> = parts.listed.into_iter().collect();
            let end = ReplacedAll::after_pages(listed, String::new());
            self.events
                .push_back((String::new(), Delta::ReplacedAll(Box::new(end))));
        } else {
            let deletions = self.unlisted(&parts.listed);
            self.events.extend(deletions);
        }
        let queued = self.events.len();
        populate_from_parts(
            &mut self.populated,
            &mut self.initial,
            &mut self.in_flight,
            queued,
        );
        Ok(())
    }

    /// `resync`: in atomic mode one `SyncAll`, unless the newest event is one already.
    pub fn resync(&mut self) {
        if self.config.atomic {
            if !matches!(self.events.back(), Some((_, Delta::SyncAll))) {
                self.events.push_back((String::new(), Delta::SyncAll));
            }
            return;
        }
        if !self.config.known_objects {
            return;
        }
        let queued: BTreeSet<&str> = self.events.iter().map(|(k, _)| k.as_str()).collect();
        let in_flight = self.in_flight.as_ref();
        let syncs: Vec<_> = self
            .known
            .iter()
            .filter(|(key, _)| !queued.contains(key.as_str()) && !is_in_flight(in_flight, key))
            .map(|(key, obj)| (key.clone(), Delta::Sync(Arc::clone(obj))))
            .collect();
        drop(queued);
        self.events.extend(syncs);
    }

    /// `pop`: the oldest event and the initial-list flag, applied to the model's cache.
    pub fn pop(&mut self) -> Option<(Vec<Delta<Obj>>, bool)> {
        let popped = self.take()?;
        self.finish();
        Some(popped)
    }

    /// The first half of `pop`: hands over the oldest event, which is in flight until
    /// [`finish`](Self::finish).
    pub fn take(&mut self) -> Option<(Vec<Delta<Obj>>, bool)> {
        assert!(self.in_flight.is_none(), "one pop at a time");
        let initial = !self.has_synced();
        let (key, delta) = self.events.pop_front()?;
        self.in_flight = Some(InFlight {
            key,
            deltas: vec![delta.clone()],
            counted: self.initial > 0,
        });
        Some((vec![delta], initial))
    }

    /// The second half of `pop`: `process` returned; the event is applied to the model's cache.
    pub fn finish(&mut self) {
        if let Some(flying) = self.in_flight.take() {
            if flying.counted {
                self.initial -= 1;
            }
            for delta in &flying.deltas {
                apply(&mut self.known, &flying.key, delta);
            }
        }
    }

    /// `has_synced`.
    pub fn has_synced(&self) -> bool {
        self.populated && self.initial == 0
    }

    /// The key of every queued event, oldest first.
    pub fn queued_keys(&self) -> Vec<String> {
        self.events.iter().map(|(k, _)| k.clone()).collect()
    }
}

fn tombstone(key: &str, obj: Option<Arc<Obj>>) -> (String, Delta<Obj>) {
    (key.to_owned(), Delta::tombstone(key, obj))
}

/// A replace in parts, as a model keeps it between its parts: the keys its parts listed.
#[derive(Debug, Default)]
struct Parts {
    listed: BTreeSet<String>,
}

impl Parts {
    /// Starts a replace in parts in `slot` if none is under way.
    fn start(slot: &mut Option<Parts>) {
        slot.get_or_insert_with(Parts::default);
    }

    /// Records that a part listed `key`.
    fn note(slot: &mut Option<Parts>, key: &str) {
        if let Some(parts) = slot {
            parts.listed.insert(key.to_owned());
        }
    }
}

/// The end of a replace in parts for `has_synced`: the first makes the initial list the
/// `queued` entries and the change in flight.
fn populate_from_parts(
    populated: &mut bool,
    initial: &mut usize,
    in_flight: &mut Option<InFlight>,
    queued: usize,
) {
    if *populated {
        return;
    }
    *populated = true;
    *initial = queued;
    if let Some(flying) = in_flight {
        flying.counted = true;
        *initial += 1;
    }
}

/// The two models behind one interface, for [`run`].
trait Reference {
    fn write(&mut self, kind: DeltaType, obj: &Obj) -> Result<(), Failure>;
    fn delete(&mut self, obj: &Obj) -> Result<(), Failure>;
    fn replace(&mut self, list: &[Obj]) -> Result<(), Failure>;
    fn replace_part(&mut self, list: &[Obj]) -> Result<(), Failure>;
    fn replace_parts_done(&mut self) -> Result<(), Failure>;
    fn in_parts(&self) -> bool;
    fn resync(&mut self);
    fn take(&mut self) -> Option<(Vec<Delta<Obj>>, bool)>;
    fn finish(&mut self);
    fn has_synced(&self) -> bool;
    fn queued_keys(&self) -> Vec<String>;
    fn known(&self) -> &BTreeMap<String, Arc<Obj>>;
}

macro_rules! reference {
    ($model:ty, |$m:ident, $obj:ident| $delete:expr) => {
        impl Reference for $model {
            fn write(&mut self, kind: DeltaType, obj: &Obj) -> Result<(), Failure> {
                <$model>::write(self, kind, obj)
            }
            fn delete(&mut self, $obj: &Obj) -> Result<(), Failure> {
                let $m = self;
                $delete
            }
            fn replace(&mut self, list: &[Obj]) -> Result<(), Failure> {
                <$model>::replace(self, list)
            }
            fn replace_part(&mut self, list: &[Obj]) -> Result<(), Failure> {
                <$model>::replace_part(self, list)
            }
            fn replace_parts_done(&mut self) -> Result<(), Failure> {
                <$model>::replace_parts_done(self)
            }
            fn in_parts(&self) -> bool {
                self.parts.is_some()
            }
            fn resync(&mut self) {
                <$model>::resync(self)
            }
            fn take(&mut self) -> Option<(Vec<Delta<Obj>>, bool)> {
                <$model>::take(self)
            }
            fn finish(&mut self) {
                <$model>::finish(self)
            }
            fn has_synced(&self) -> bool {
                <$model>::has_synced(self)
            }
            fn queued_keys(&self) -> Vec<String> {
                <$model>::queued_keys(self)
            }
            fn known(&self) -> &BTreeMap<String, Arc<Obj>> {
                &self.known
            }
        }
    };
}

reference!(Model, |m, obj| Model::delete(m, obj));
reference!(InOrderModel, |m, obj| m.write(DeltaType::Deleted, obj));

/// What a controller does with a popped delta: write it to the cache, or remove the key; a
/// relist of the whole collection makes the cache the list (keeping what earlier pages of a
/// relist by page listed); a resync of the whole cache changes nothing.
fn apply(cache: &mut BTreeMap<String, Arc<Obj>>, key: &str, delta: &Delta<Obj>) {
    match delta {
        Delta::Deleted(_) => {
            cache.remove(key);
        }
        Delta::Added(o) | Delta::Updated(o) | Delta::Replaced(o) | Delta::Sync(o) => {
            cache.insert(key.to_owned(), Arc::clone(o));
        }
        Delta::ReplacedAll(all) => {
            cache.retain(|key, _| all.listed_by_pages(key));
            for (key, o) in all.objects() {
                cache.insert(key.clone(), Arc::clone(o));
            }
        }
        Delta::SyncAll => {}
    }
}

/// The real queue's cache: a map its pops are applied to, read back as `KnownObjects`.
#[derive(Debug, Default)]
struct Cache(Mutex<BTreeMap<String, Arc<Obj>>>);

impl Cache {
    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeMap<String, Arc<Obj>>> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl KnownObjects<Obj> for Cache {
    fn list_keys(&self) -> Vec<String> {
        self.lock().keys().cloned().collect()
    }

    fn get_by_key(&self, key: &str) -> Option<Arc<Obj>> {
        self.lock().get(key).cloned()
    }
}

/// The queue under test, and the replace in parts it is in, if any.
struct Real {
    queue: RealQueue,
    parts: Mutex<Option<ReplaceParts<Obj>>>,
}

enum RealQueue {
    Delta(DeltaFifo<Obj>),
    InOrder(InOrderFifo<Obj>),
}

impl Real {
    fn new(config: Config, cache: &Arc<Cache>) -> Self {
        let known = config
            .known_objects
            .then(|| Arc::clone(cache) as Arc<dyn KnownObjects<Obj>>);
        let transform = config.transform.then(|| {
            transform_func(|o: Arc<Obj>| {
                if o.poison {
                    return Err("poisoned".into());
                }
                let mut o = (*o).clone();
                o.version += TRANSFORMED;
                Ok(Arc::new(o))
            })
        });
        let key = key_func(|o: &Obj| {
            if o.name.is_empty() {
                Err(KeyError::MissingName)
            } else {
                Ok(o.name.clone())
            }
        });
        if config.in_order {
            let mut options = InOrderFifoOptions::default().atomic(config.atomic);
            options.known_objects = known;
            options.transform = transform;
            options.on_refused = None;
            Self::of(RealQueue::InOrder(InOrderFifo::with_options(key, options)))
        } else {
            let mut options =
                DeltaFifoOptions::default().emit_delta_type_replaced(config.emit_replaced);
            options.known_objects = known;
            options.transform = transform;
            Self::of(RealQueue::Delta(DeltaFifo::with_options(key, options)))
        }
    }

    fn of(queue: RealQueue) -> Self {
        Self {
            queue,
            parts: Mutex::new(None),
        }
    }

    /// `replace_part`, in the replace in parts under way (or a new one).
    fn replace_part(&self, list: Vec<Arc<Obj>>) -> Result<(), Error> {
        let mut parts = self.parts.lock().unwrap_or_else(PoisonError::into_inner);
        let parts = parts.get_or_insert_with(ReplaceParts::new);
        self.queue().replace_part(list, parts)
    }

    /// `replace_parts_done` of the replace in parts under way (or of an empty one).
    fn replace_parts_done(&self) -> Result<(), Error> {
        let parts = self
            .parts
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take();
        self.queue()
            .replace_parts_done(parts.unwrap_or_default(), String::new())
    }

    fn queue(&self) -> &dyn Queue<Obj> {
        match &self.queue {
            RealQueue::Delta(q) => q,
            RealQueue::InOrder(q) => q,
        }
    }

    fn queued_keys(&self) -> Vec<String> {
        match &self.queue {
            RealQueue::Delta(q) => q.queued_keys(),
            RealQueue::InOrder(q) => q.queued_keys(),
        }
    }

    fn is_empty(&self) -> bool {
        match &self.queue {
            RealQueue::Delta(q) => q.is_empty(),
            RealQueue::InOrder(q) => q.is_empty(),
        }
    }
}

/// What the real queue's consumer does with popped deltas: applies them to its cache.
fn apply_popped(cache: &Cache, deltas: &Deltas<Obj>) {
    let key = match deltas.newest() {
        Delta::Deleted(DeletedObject::Tombstone(t)) => t.key.clone(),
        d => d.object().map(|o| o.name.clone()).unwrap_or_default(),
    };
    let mut cache = cache.lock();
    for delta in deltas.iter() {
        apply(&mut cache, &key, delta);
    }
}

fn pop_real(fifo: &dyn Queue<Obj>, cache: &Cache) -> Result<(Vec<Delta<Obj>>, bool), QueueClosed> {
    let mut out = None;
    fifo.pop(&mut |deltas: Deltas<Obj>, initial| {
        apply_popped(cache, &deltas);
        out = Some((deltas.into_vec(), initial));
    })?;
    Ok(out.expect("pop returned Ok, so process ran"))
}

/// Runs `ops` on the model and on a real queue (a [`DeltaFifo`], or an [`InOrderFifo`] if
/// `config.in_order`); panics at the first difference.
///
/// After the last operation both are closed and drained, and must agree to the end.
pub fn run(config: Config, ops: &[Op]) {
    if config.in_order {
        check(config, ops, InOrderModel::new(config));
    } else {
        check(config, ops, Model::new(config));
    }
}

fn check(config: Config, ops: &[Op], mut model: impl Reference) {
    let cache = Arc::new(Cache::default());
    let real = Real::new(config, &cache);
    for (step, op) in ops.iter().enumerate() {
        run_op(&mut model, &real, &cache, op, &format!("step {step}"));
    }
    let fifo = real.queue();
    fifo.close();
    while let Some(expected) = model.take() {
        model.finish();
        assert_eq!(pop_real(fifo, &cache), Ok(expected), "drain after close");
    }
    assert_eq!(
        pop_real(fifo, &cache),
        Err(QueueClosed),
        "closed and drained"
    );
    assert_eq!(&*cache.lock(), model.known(), "both caches end the same");
}

/// Runs one operation on the model and the real queue, and compares.
fn run_op<M: Reference>(model: &mut M, real: &Real, cache: &Cache, op: &Op, at: &str) {
    let fifo = real.queue();
    match op {
        Op::Add(o) => assert_eq!(
            failure(fifo.add(Arc::new(o.clone()))),
            model.write(DeltaType::Added, o),
            "{at}: {op:?}"
        ),
        Op::Update(o) => assert_eq!(
            failure(fifo.update(Arc::new(o.clone()))),
            model.write(DeltaType::Updated, o),
            "{at}: {op:?}"
        ),
        Op::Delete(o) => assert_eq!(
            failure(fifo.delete(Arc::new(o.clone()))),
            model.delete(o),
            "{at}: {op:?}"
        ),
        Op::Replace(list) if model.in_parts() => {
            let objects = list.iter().cloned().map(Arc::new).collect();
            assert_eq!(
                failure(real.replace_part(objects)),
                model.replace_part(list),
                "{at}: {op:?} (the last part)"
            );
            assert_eq!(
                failure(real.replace_parts_done()),
                model.replace_parts_done(),
                "{at}: {op:?} (done)"
            );
        }
        Op::Replace(list) => assert_eq!(
            failure(fifo.replace(list.iter().cloned().map(Arc::new).collect(), String::new())),
            model.replace(list),
            "{at}: {op:?}"
        ),
        Op::ReplacePart(list) => assert_eq!(
            failure(real.replace_part(list.iter().cloned().map(Arc::new).collect())),
            model.replace_part(list),
            "{at}: {op:?}"
        ),
        Op::Resync => {
            fifo.resync().expect("resync never fails");
            model.resync();
        }
        Op::Pop => match model.take() {
            None => assert!(real.is_empty(), "{at}: the model is empty"),
            Some(expected) => {
                model.finish();
                assert_eq!(pop_real(fifo, cache), Ok(expected), "{at}: pop");
            }
        },
        Op::PopDuring {
            apply_first,
            writes,
        } => {
            assert!(
                writes.iter().all(Op::is_write),
                "{at}: only writes while a pop is in flight"
            );
            match model.take() {
                None => assert!(real.is_empty(), "{at}: the model is empty"),
                Some(expected) => {
                    let mut popped = None;
                    fifo.pop(&mut |deltas: Deltas<Obj>, initial| {
                        if *apply_first {
                            apply_popped(cache, &deltas);
                        }
                        for (i, write) in writes.iter().enumerate() {
                            let at = format!("{at}, write {i} with {expected:?} in flight");
                            run_op(model, real, cache, write, &at);
                        }
                        if !*apply_first {
                            apply_popped(cache, &deltas);
                        }
                        popped = Some((deltas.into_vec(), initial));
                    })
                    .expect("the model holds something, so the queue does");
                    model.finish();
                    assert_eq!(popped, Some(expected), "{at}: pop");
                }
            }
        }
    }
    assert_eq!(
        real.queued_keys(),
        model.queued_keys(),
        "{at}: {op:?}: queued keys"
    );
    assert_eq!(
        fifo.has_synced(),
        model.has_synced(),
        "{at}: {op:?}: has_synced"
    );
}

const NAMES: [&str; 6] = ["a", "b", "c", "d", "e", ""];

/// Decodes arbitrary bytes into a configuration and a sequence of operations.
///
/// The first byte is the configuration (bit 0: known objects, bit 1: emit Replaced, bit 2:
/// transform, bit 3: the in-order FIFO instead of the DeltaFifo, bit 4: its atomic mode). Then each operation is one byte
/// (`% 8`: add, update, delete, replace, resync, two kinds of pop, and a pop with writes while
/// its change is in flight), followed by one byte per object (`% 6` picks the key, one of five
/// names or the empty, failing one; `>= 240` poisons it for the transform); a replace first
/// reads its list length (`% 6`; a length byte `>= 192` makes it one part of a replace in
/// parts, which the next replace ends); a pop with writes reads one byte (bit 0: apply the change
/// before the writes; `>> 1 % 4`: how many writes), then each write as an operation whose byte
/// is taken `% 5` (writes only). Versions count up from 1 in object order. Missing bytes end the
/// run.
pub fn decode(data: &[u8]) -> (Config, Vec<Op>) {
    let mut bytes = data.iter().copied();
    let Some(first) = bytes.next() else {
        return (Config::default(), Vec::new());
    };
    let config = Config {
        known_objects: first & 1 != 0,
        emit_replaced: first & 2 != 0,
        transform: first & 4 != 0,
        in_order: first & 8 != 0,
        atomic: first & 16 != 0,
    };
    let mut decoder = Decoder { bytes, version: 0 };
    let mut ops = Vec::new();
    while let Some(code) = decoder.bytes.next() {
        let Some(op) = decoder.op(code % 8) else {
            break;
        };
        ops.push(op);
    }
    (config, ops)
}

struct Decoder<I> {
    bytes: I,
    version: u64,
}

impl<I: Iterator<Item = u8>> Decoder<I> {
    fn object(&mut self, byte: u8) -> Obj {
        self.version += 1;
        Obj {
            name: NAMES[usize::from(byte) % NAMES.len()].to_owned(),
            version: self.version,
            poison: byte >= 240,
        }
    }

    /// The operation of `code` (`0..8`), with the bytes it reads; `None` if they are missing.
    fn op(&mut self, code: u8) -> Option<Op> {
        Some(match code {
            0..=2 => {
                let byte = self.bytes.next()?;
                let o = self.object(byte);
                match code {
                    0 => Op::Add(o),
                    1 => Op::Update(o),
                    _ => Op::Delete(o),
                }
            }
            3 => {
                let len = self.bytes.next()?;
                let mut list = Vec::new();
                for _ in 0..usize::from(len) % 6 {
                    let Some(byte) = self.bytes.next() else {
                        break;
                    };
                    list.push(self.object(byte));
                }
                if len >= 192 {
                    Op::ReplacePart(list)
                } else {
                    Op::Replace(list)
                }
            }
            4 => Op::Resync,
            5 | 6 => Op::Pop,
            _ => {
                let byte = self.bytes.next()?;
                let mut writes = Vec::new();
                for _ in 0..(byte >> 1) % 4 {
                    let code = self.bytes.next()?;
                    writes.push(self.op(code % 5)?);
                }
                Op::PopDuring {
                    apply_first: byte & 1 != 0,
                    writes,
                }
            }
        })
    }
}
