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
use crate::shared::{Guarded, Pending, Shared};

/// How an [`InOrderFifo`] is built, beyond its key function.
#[non_exhaustive]
pub struct InOrderFifoOptions<K> {
    /// The cache the consumer applies popped changes to: `replace` emits a tombstone for every
    /// cached key the new list lacks (and nothing queued names), and `resync` re-delivers it.
    /// Without it, `resync` does nothing.
    pub known_objects: Option<Arc<dyn KnownObjects<K>>>,
    /// Applied to every object as it enters (see [`TransformFunc`]).
    pub transform: Option<TransformFunc<K>>,
    /// Told about every refused object (see [`RefusalHandler`]); without one, refusals are
    /// logged through `tracing`.
    pub on_refused: Option<RefusalHandler>,
}

impl<K> Default for InOrderFifoOptions<K> {
    fn default() -> Self {
        Self {
            known_objects: None,
            transform: None,
            on_refused: None,
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
}

impl<K> fmt::Debug for InOrderFifoOptions<K> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("InOrderFifoOptions")
            .field("known_objects", &self.known_objects.is_some())
            .field("transform", &self.transform.is_some())
            .field("on_refused", &self.on_refused.is_some())
            .finish()
    }
}

/// A queue that keeps every change, in arrival order, with no coalescing (the idea of client-go's
/// `RealFIFO`, in its non-atomic flavour, which reads the cache back as [`KnownObjects`], with
/// its `UnlockWhileProcessing` behaviour: `process` runs with the lock released).
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
}

/// Every event not yet popped, oldest first, with its key; and how many were written.
struct Log<K>(VecDeque<(String, Delta<K>)>, u64);

impl<K> Log<K> {
    fn push(&mut self, key: String, delta: Delta<K>) {
        self.1 += 1;
        self.0.push_back((key, delta));
    }
}

impl<K> Pending<K> for Log<K> {
    fn take_front(&mut self) -> Option<Deltas<K>> {
        self.0
            .pop_front()
            .map(|(key, delta)| Deltas::keyed(key, delta))
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
        }
    }

    /// The number of events queued.
    pub fn len(&self) -> usize {
        self.shared.lock().pending.0.len()
    }

    /// Whether nothing is queued.
    pub fn is_empty(&self) -> bool {
        self.shared.lock().pending.0.is_empty()
    }

    /// The key of every queued event, in the order `pop` will deliver them.
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
        let last = match state.pending.0.iter().rev().find(|(k, _)| *k == key) {
            Some((_, delta)) if delta.delta_type() == DeltaType::Deleted => None,
            Some((_, delta)) => Some(delta.object().cloned()),
            None => self.intake.known(&state.in_flight, &key).map(Some),
        };
        match last {
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

    fn replace(&self, list: Vec<Arc<K>>, _resource_version: String) -> Result<()> {
        let listed = self.intake.admit_listed(list);
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
        let Some(listed) = self
            .intake
            .admit_part(part, parts, || self.shared.lock().populated)
        else {
            return Ok(());
        };
        let mut state = self.shared.lock();
        for (key, obj) in listed {
            state.pending.push(key, Delta::Replaced(obj));
        }
        self.shared.queued(state, true);
        Ok(())
    }

    fn replace_parts_done(&self, parts: ReplaceParts<K>, resource_version: String) -> Result<()> {
        let parts = match parts.into_held() {
            Ok(held) => return self.replace(held, resource_version),
            Err(applied) => applied,
        };
        let mut state = self.shared.lock();
        // The deletions follow the listed objects here (a whole replace queues them first):
        // the listed ones may be processed already.
        let deletions = self.unlisted(&state, &|key| parts.is_listed(key));
        state.pending.0.extend(deletions);
        self.shared.queued(state, true);
        Ok(())
    }

    fn resync(&self) -> Result<()> {
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
