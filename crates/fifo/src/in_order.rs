//! [`InOrderFifo`]: every change kept and delivered in arrival order.

use std::collections::{HashMap, HashSet, VecDeque};
use std::fmt;
use std::sync::Arc;

use foldhash::fast::RandomState;
use informer_store::{KeyFunc, KnownObjects, ReflectorStore, ReplaceParts};

use crate::delta::{Delta, DeltaType, Deltas};
use crate::error::{Error, Result};
use crate::intake::Intake;
use crate::queue::{RefusalHandler, TransformFunc};
use crate::replaced_all::ReplacedAll;
use crate::shared::{FlightState, Guarded, Pending, Shared};

/// How an [`InOrderFifo`] is built, beyond its key function.
#[non_exhaustive]
pub struct InOrderFifoOptions<K> {
    /// The cache the consumer applies popped changes to: `replace` emits a tombstone for every
    /// cached key the new list lacks (and nothing queued names), and `resync` re-delivers it.
    /// Without it, `resync` does nothing. In [atomic](Self::atomic) mode the consumer does
    /// both against its own cache, and the queue reads this only to withdraw a refused version
    /// of a key (see [`Queue`](crate::Queue)).
    pub known_objects: Option<Arc<dyn KnownObjects<K>>>,
    /// Applied to every object as it enters (see [`TransformFunc`]).
    pub transform: Option<TransformFunc<K>>,
    /// Told about every refused object (see [`RefusalHandler`]); without one, refusals are
    /// logged through `tracing`.
    pub on_refused: Option<RefusalHandler>,
    /// Atomic mode (client-go's `AtomicEvents`): a `replace` is queued as one
    /// [`ReplacedAll`](Delta::ReplacedAll) change and a `resync` as one
    /// [`SyncAll`](Delta::SyncAll), which the consumer applies to its cache in one step
    /// (default: off, so a consumer popping by hand gets one object per delta; the informer
    /// turns it on).
    pub atomic: bool,
}

impl<K> Default for InOrderFifoOptions<K> {
    fn default() -> Self {
        Self {
            known_objects: None,
            transform: None,
            on_refused: None,
            atomic: false,
        }
    }
}

impl<K> InOrderFifoOptions<K> {
    /// Sets [`known_objects`](Self::known_objects).
    pub fn known_objects(mut self, known_objects: Arc<dyn KnownObjects<K>>) -> Self {
        self.known_objects = Some(known_objects);
        self
    }

    /// Sets [`transform`](Self::transform).
    pub fn transform(mut self, transform: TransformFunc<K>) -> Self {
        self.transform = Some(transform);
        self
    }

    /// Sets [`on_refused`](Self::on_refused).
    pub fn on_refused(mut self, handler: RefusalHandler) -> Self {
        self.on_refused = Some(handler);
        self
    }

    /// Sets [`atomic`](Self::atomic).
    pub fn atomic(mut self, atomic: bool) -> Self {
        self.atomic = atomic;
        self
    }
}

impl<K> fmt::Debug for InOrderFifoOptions<K> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("InOrderFifoOptions")
            .field("known_objects", &self.known_objects.is_some())
            .field("transform", &self.transform.is_some())
            .field("on_refused", &self.on_refused.is_some())
            .field("atomic", &self.atomic)
            .finish()
    }
}

/// A queue that keeps every change, in arrival order, with no coalescing (client-go's
/// `RealFIFO`, with its `UnlockWhileProcessing` behaviour: `process` runs with the lock
/// released). It has two modes:
///
/// * **Atomic** ([`InOrderFifoOptions::atomic`]; the informer's default queue, as client-go's
///   `AtomicFIFO`): a `replace` is queued as one [`ReplacedAll`](Delta::ReplacedAll) change
///   holding the list, and a `resync` as one [`SyncAll`](Delta::SyncAll) (one after another
///   with nothing between is one). The consumer applies each to its cache in one step, in
///   order: it finds the deletions against its cache as it is then, so readers of the cache see
///   the old list or the new one, never a mix. A list by page
///   ([`ReflectorStore::replace_part`]) still queues its pages as
///   [`Replaced`](DeltaType::Replaced) events as they arrive, and ends with a
///   [`ReplacedAll`](Delta::ReplacedAll) that deletes what no page listed
///   ([`ReplacedAll::is_by_pages`]). The rules below for writes hold in both modes; a refused
///   version reads the key's state through any whole-collection change queued (or in flight:
///   then it is unknown, and a tombstone without an object is queued for the consumer to
///   resolve).
/// * **Non-atomic** (the default of [`InOrderFifoOptions`]), which reads the cache back as
///   [`KnownObjects`], as follows.
///
/// * Every write is one event; `pop` delivers one event at a time (a [`Deltas`] of length one),
///   in the order the writes were made. Nothing is merged or deduplicated.
/// * `delete` is always queued, even for a key the queue has never seen.
/// * `replace(list)` queues the deletions first, then a [`Replaced`](DeltaType::Replaced) event
///   for every listed object in list order. The deletions: for each queued key the list lacks,
///   in order of first appearance, a tombstone carrying its last queued object, unless its last
///   event is already a deletion; then for each known key the list lacks that nothing queued
///   names, a tombstone with the cache's object.
/// * `resync` queues [`Sync`](DeltaType::Sync) for each known key that nothing queued names.
/// * An event popped whose `process` has not returned is *in flight* (see
///   [`Queue`](crate::Queue)): for a key with nothing queued, the rules above read its last
///   event in flight (a batch may hold several) as the cache will have it once applied. So
///   `replace` tombstones it, if the list lacks it, with that event's object (first among the
///   known keys), unless that event is a deletion; `resync` skips it.
/// * An object whose key function or transform fails (or panics) is refused as the
///   [`Queue`](crate::Queue) contract says: a refused write of a key whose last queued event (or,
///   with nothing queued, its last event in flight, else the cache) holds an object queues a
///   tombstone for it instead; `replace` leaves the refused objects out of the list and applies
///   the rest.
/// * The first `replace` counts the whole queue as the initial list: `has_synced` turns true once
///   everything queued up to and including it has been popped and processed. As in client-go,
///   the count falls after `process` returns (a panicking event still counts as popped).
///
/// Use it when a consumer must see every intermediate state (audit, event forwarding); use
/// [`DeltaFifo`](crate::DeltaFifo) to let a slow consumer skip ahead per key.
///
/// ```
/// use std::sync::Arc;
/// use informer_fifo::{InOrderFifo, QueueExt};
/// use informer_store::{key_func, ReflectorStore};
///
/// let fifo = InOrderFifo::new(key_func(|o: &(&str, u32)| Ok(o.0.to_owned())));
/// fifo.add(Arc::new(("a", 1))).unwrap();
/// fifo.add(Arc::new(("b", 1))).unwrap();
/// fifo.update(Arc::new(("a", 2))).unwrap();
/// let mut order = Vec::new();
/// while !fifo.is_empty() {
///     fifo.pop_with(|d, _| order.push(*d.newest().object().unwrap().as_ref())).unwrap();
/// }
/// assert_eq!(order, [("a", 1), ("b", 1), ("a", 2)]);
/// ```
pub struct InOrderFifo<K> {
    intake: Intake<K>,
    shared: Shared<K, Log<K>>,
    atomic: bool,
}

/// Every event not yet popped, oldest first, with its key; and how many were written.
struct Log<K>(VecDeque<(String, Delta<K>)>, u64);

impl<K> Log<K> {
    fn push(&mut self, key: String, delta: Delta<K>) {
        self.1 += 1;
        self.0.push_back((key, delta));
    }

    /// Queues a change of the whole collection (under an empty key), counting `written`
    /// objects.
    fn push_whole(&mut self, delta: Delta<K>, written: u64) {
        self.1 += written;
        self.0.push_back((String::new(), delta));
    }
}

impl<K> Pending<K> for Log<K> {
    fn take_front(&mut self) -> Option<Deltas<K>> {
        self.0.pop_front().map(|(key, delta)| {
            if delta.is_whole_collection() {
                Deltas::new(delta)
            } else {
                Deltas::keyed(key, delta)
            }
        })
    }

    fn len(&self) -> usize {
        self.0.len()
    }

    fn written(&self) -> (u64, u64) {
        // Every event is its own entry: nothing coalesces.
        (self.1, 0)
    }

    fn put_front(&mut self, deltas: Deltas<K>) -> Option<usize> {
        // One event per `Deltas` (this queue never merges); several would go back in order.
        let (key, deltas) = deltas.into_parts();
        let key = key.unwrap_or_default();
        let mut deltas: Vec<Delta<K>> = deltas.collect();
        while let Some(delta) = deltas.pop() {
            self.0.push_front((key.clone(), delta));
        }
        None
    }
}

impl<K: Send + Sync + 'static> InOrderFifo<K> {
    /// A queue with no known objects and no transform.
    pub fn new(key_func: KeyFunc<K>) -> Self {
        Self::with_options(key_func, InOrderFifoOptions::default())
    }

    /// A queue with the given options.
    pub fn with_options(key_func: KeyFunc<K>, options: InOrderFifoOptions<K>) -> Self {
        Self {
            intake: Intake {
                key_func,
                known_objects: options.known_objects,
                transform: options.transform,
                on_refused: options.on_refused,
            },
            shared: Shared::new(Log(VecDeque::new(), 0)),
            atomic: options.atomic,
        }
    }

    /// Whether the queue is in atomic mode (see [`InOrderFifoOptions::atomic`]).
    pub fn is_atomic(&self) -> bool {
        self.atomic
    }

    /// The number of events queued.
    pub fn len(&self) -> usize {
        self.shared.lock().pending.0.len()
    }

    /// Whether nothing is queued.
    pub fn is_empty(&self) -> bool {
        self.shared.lock().pending.0.is_empty()
    }

    /// The key of every queued event, in the order `pop` will deliver them (an empty key for a
    /// change of the whole collection).
    pub fn queued_keys(&self) -> Vec<String> {
        let state = self.shared.lock();
        state.pending.0.iter().map(|(key, _)| key.clone()).collect()
    }

    fn push(&self, kind: DeltaType, obj: Arc<K>) -> Result<()> {
        let key = self.intake.key(&obj)?;
        let obj = match self.intake.transform(&key, obj) {
            Ok(obj) => obj,
            Err(err) => return Err(self.withdraw(key, err)),
        };
        let mut state = self.shared.lock();
        state.populated = true;
        state.pending.push(key, Delta::new(kind, obj));
        self.shared.queued(state, false);
        Ok(())
    }
}

impl<K: Send + Sync + 'static> InOrderFifo<K> {
    /// A version of `key` was refused (`err`): if the key's latest state (its last queued event,
    /// else the cache, as it will be once the changes in flight are applied) holds an object,
    /// queue a tombstone with it, so the superseded version is not kept as current. Reports the
    /// refusal and hands the error back.
    fn withdraw(&self, key: String, err: Error) -> Error {
        let mut state = self.shared.lock();
        match self.superseded(&state, &key) {
            Some(last) => {
                state.populated = true;
                let tombstone = Delta::tombstone(key.as_str(), last);
                state.pending.push(key, tombstone);
                self.shared.queued(state, false);
            }
            None => drop(state),
        }
        self.intake.refuse(err)
    }

    /// The state a refused version of `key` supersedes, newest first: its last queued event, a
    /// relist of the whole collection queued (a resync of the whole cache changes nothing);
    /// else, with known objects, its changes in flight, then the cache. `Some` of what the
    /// tombstone withdrawing it carries (`None` inside: the state is decided by a relist in
    /// flight, so the consumer resolves the tombstone against its cache), or `None` if there
    /// is nothing to withdraw.
    fn superseded(&self, state: &Guarded<K, Log<K>>, key: &str) -> Option<Option<Arc<K>>> {
        for (k, delta) in state.pending.0.iter().rev() {
            match delta {
                Delta::ReplacedAll(all) => {
                    if let Some(listed) = all.state_of(key) {
                        return listed.map(|obj| Some(Arc::clone(obj)));
                    }
                }
                Delta::SyncAll => {}
                _ if k != key => {}
                Delta::Deleted(_) => return None,
                delta => return Some(delta.object().cloned()),
            }
        }
        let known = self.intake.known_objects.as_ref()?;
        match state.in_flight.lookup(key) {
            FlightState::Latest(last) => last.map(|obj| Some(Arc::clone(obj))),
            FlightState::WholeCollection => Some(None),
            FlightState::NotInFlight => known.get_by_key(key).map(Some),
        }
    }

    /// Queues a relist of the whole collection as one change (atomic mode).
    fn replace_all(&self, listed: Vec<(String, Arc<K>)>, resource_version: String) {
        let written = listed.len() as u64;
        let all = ReplacedAll::new(listed, resource_version);
        let mut state = self.shared.lock();
        state
            .pending
            .push_whole(Delta::ReplacedAll(Box::new(all)), written);
        let queued = state.pending.0.len();
        state.replaced(queued);
        self.shared.queued(state, true);
    }
}

impl<K: Send + Sync + 'static> InOrderFifo<K> {
    /// The tombstones a replace queues for every key its list lacks (`is_listed` says which it
    /// has): queued keys whose last event is not a deletion, with their last object, in order
    /// of first appearance; then keys in flight, as the cache will have them; then the cache's
    /// other keys.
    fn unlisted(
        &self,
        state: &Guarded<K, Log<K>>,
        is_listed: &dyn Fn(&str) -> bool,
    ) -> Vec<(String, Delta<K>)> {
        // The last event of each queued key, keys in order of first appearance.
        let mut last: HashMap<&str, usize, RandomState> = HashMap::default();
        let mut order = Vec::new();
        for (i, (key, _)) in state.pending.0.iter().enumerate() {
            if last.insert(key.as_str(), i).is_none() {
                order.push(key.as_str());
            }
        }
        let mut deletions = Vec::new();
        for key in order.iter().filter(|key| !is_listed(key)) {
            let delta = &state.pending.0[last[key]].1;
            if delta.delta_type() != DeltaType::Deleted {
                deletions.push((
                    (*key).to_owned(),
                    Delta::tombstone(*key, delta.object().cloned()),
                ));
            }
        }
        if let Some(known) = &self.intake.known_objects {
            let unlisted = |key: &str| !is_listed(key) && !last.contains_key(key);
            // The keys in flight, as the cache will have them: their newest object, unless
            // their newest event is a deletion.
            for (key, newest) in state.in_flight.latest() {
                if let (true, Some(obj)) = (unlisted(key), newest) {
                    let delta = Delta::tombstone(key, Some(Arc::clone(obj)));
                    deletions.push((key.to_owned(), delta));
                }
            }
            let in_flight = state.in_flight.keys();
            for key in known.list_keys() {
                if unlisted(&key) && !in_flight.contains(key.as_str()) {
                    let obj = known.get_by_key(&key);
                    let delta = Delta::tombstone(key.as_str(), obj);
                    deletions.push((key, delta));
                }
            }
        }
        deletions
    }
}

impl<K: Send + Sync + 'static> ReflectorStore<K> for InOrderFifo<K> {
    type Error = Error;

    fn add(&self, obj: Arc<K>) -> Result<()> {
        self.push(DeltaType::Added, obj)
    }

    fn update(&self, obj: Arc<K>) -> Result<()> {
        self.push(DeltaType::Updated, obj)
    }

    fn delete(&self, obj: Arc<K>) -> Result<()> {
        self.push(DeltaType::Deleted, obj)
    }

    fn replace(&self, list: Vec<Arc<K>>, resource_version: String) -> Result<()> {
        let listed = self.intake.admit_listed(list);
        if self.atomic {
            self.replace_all(listed, resource_version);
            return Ok(());
        }
        let new_keys: HashSet<&str, RandomState> =
            listed.iter().map(|(key, _)| key.as_str()).collect();

        let mut state = self.shared.lock();
        let deletions = self.unlisted(&state, &|key| new_keys.contains(key));
        drop(new_keys);

        state.pending.0.extend(deletions);
        for (key, obj) in listed {
            state.pending.push(key, Delta::Replaced(obj));
        }
        let queued = state.pending.0.len();
        state.replaced(queued);
        self.shared.queued(state, true);
        Ok(())
    }

    fn replace_part(&self, part: Vec<Arc<K>>, parts: &mut ReplaceParts<K>) -> Result<()> {
        let Some(listed) = self.intake.admit_part(part, parts) else {
            return Ok(());
        };
        let mut state = self.shared.lock();
        for (key, obj) in listed {
            state.pending.push(key, Delta::Replaced(obj));
        }
        self.shared.queued(state, true);
        Ok(())
    }

    fn backlog(&self) -> Option<usize> {
        Some(self.shared.lock().pending.len())
    }

    fn backlog_waking(&self, bound: usize, waker: &std::task::Waker) -> Option<usize> {
        Some(self.shared.backlog_waking(bound, waker))
    }

    fn replace_parts_done(&self, parts: ReplaceParts<K>, resource_version: String) -> Result<()> {
        let mut parts = match parts.into_held() {
            Ok(held) => return self.replace(held, resource_version),
            Err(applied) => applied,
        };
        let mut state = self.shared.lock();
        if self.atomic {
            // The consumer deletes what no page listed, against its cache as it is then.
            let end = ReplacedAll::after_pages(parts.take_listed(), resource_version);
            state
                .pending
                .push_whole(Delta::ReplacedAll(Box::new(end)), 0);
            state.replaced_in_parts();
            self.shared.queued(state, false);
            return Ok(());
        }
        // The deletions follow the listed objects here (a whole replace queues them first):
        // the listed ones may be processed already.
        let deletions = self.unlisted(&state, &|key| parts.is_listed(key));
        state.pending.0.extend(deletions);
        state.replaced_in_parts();
        self.shared.queued(state, true);
        Ok(())
    }

    fn resync(&self) -> Result<()> {
        if self.atomic {
            let mut state = self.shared.lock();
            // Two in a row would re-deliver the same cache: the one queued stands for both.
            if !matches!(state.pending.0.back(), Some((_, Delta::SyncAll))) {
                state.pending.push_whole(Delta::SyncAll, 0);
            }
            self.shared.queued(state, false);
            return Ok(());
        }
        let Some(known) = &self.intake.known_objects else {
            return Ok(());
        };
        let mut state = self.shared.lock();
        // A key queued or in flight has a change newer than the cache.
        let skipped: HashSet<&str, RandomState> = state
            .pending
            .0
            .iter()
            .map(|(key, _)| key.as_str())
            .chain(state.in_flight.keys())
            .collect();
        let syncs: Vec<_> = known
            .list_keys()
            .into_iter()
            .filter(|key| !skipped.contains(key.as_str()))
            .filter_map(|key| known.get_by_key(&key).map(|obj| (key, Delta::Sync(obj))))
            .collect();
        drop(skipped);
        if syncs.is_empty() {
            return Ok(());
        }
        state.pending.0.extend(syncs);
        self.shared.queued(state, true);
        Ok(())
    }
}

crate::shared::queue_via_shared!(InOrderFifo);

impl<K> fmt::Debug for InOrderFifo<K> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.shared
            .debug_fields(&mut f.debug_struct("InOrderFifo"))
            .field("intake", &self.intake)
            .finish()
    }
}
