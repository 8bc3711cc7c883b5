//! [`DeltaFifo`]: a queue of keys, each with the changes not yet processed for it.

use std::collections::HashSet;
use std::fmt;
use std::sync::Arc;

use foldhash::fast::RandomState;
use informer_store::{KeyFunc, KnownObjects, ReflectorStore, ReplaceParts};

use crate::delta::{Delta, DeltaType};
use crate::error::{Error, Result};
use crate::intake::Intake;
use crate::keyed::{Keyed, SlotId};
use crate::queue::{RefusalHandler, TransformFunc};
use crate::shared::{Guarded, Pending, Shared};
use crate::tombstone::DeletedObject;

/// How a [`DeltaFifo`] is built, beyond its key function.
///
/// ```
/// use std::sync::Arc;
/// use informer_fifo::{transform_func, DeltaFifoOptions};
/// use informer_store::{key_func, ThreadSafeStore};
///
/// let cache = Arc::new(ThreadSafeStore::new(key_func(|s: &String| Ok(s.clone()))));
/// let options = DeltaFifoOptions::default()
///     .known_objects(cache)
///     .transform(transform_func(|s: Arc<String>| Ok(Arc::new(s.trim().to_owned()))));
/// assert!(options.emit_delta_type_replaced);
/// ```
#[non_exhaustive]
pub struct DeltaFifoOptions<K> {
    /// The cache the consumer applies popped changes to. With it, `replace` also emits a
    /// tombstone for every cached key the new list lacks, `delete` of a cached key is queued, and
    /// `resync` re-delivers the cache. Without it, `resync` does nothing.
    pub known_objects: Option<Arc<dyn KnownObjects<K>>>,
    /// Whether `replace` emits [`DeltaType::Replaced`] (the default) or [`DeltaType::Sync`].
    ///
    /// client-go defaults to `Sync` only to keep its deprecated constructor's behaviour; every
    /// informer it builds sets this option. `Replaced` lets a consumer tell a relist (which may
    /// carry new objects) from a resync (which never does), so it is the default here.
    pub emit_delta_type_replaced: bool,
    /// Applied to every object as it enters (see [`TransformFunc`]).
    pub transform: Option<TransformFunc<K>>,
    /// Told about every refused object (see [`RefusalHandler`]); without one, refusals are
    /// logged through `tracing`.
    pub on_refused: Option<RefusalHandler>,
}

impl<K> Default for DeltaFifoOptions<K> {
    fn default() -> Self {
        Self {
            known_objects: None,
            emit_delta_type_replaced: true,
            transform: None,
            on_refused: None,
        }
    }
}

impl<K> DeltaFifoOptions<K> {
    /// Sets [`known_objects`](Self::known_objects).
    pub fn known_objects(mut self, known_objects: Arc<dyn KnownObjects<K>>) -> Self {
        self.known_objects = Some(known_objects);
        self
    }

    /// Sets [`emit_delta_type_replaced`](Self::emit_delta_type_replaced).
    pub fn emit_delta_type_replaced(mut self, emit: bool) -> Self {
        self.emit_delta_type_replaced = emit;
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

impl<K> fmt::Debug for DeltaFifoOptions<K> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("DeltaFifoOptions")
            .field("known_objects", &self.known_objects.is_some())
            .field("emit_delta_type_replaced", &self.emit_delta_type_replaced)
            .field("transform", &self.transform.is_some())
            .field("on_refused", &self.on_refused.is_some())
            .finish()
    }
}

/// client-go's `DeltaFIFO`: a FIFO of keys, and per key the changes ([`Deltas`](crate::Deltas)) not yet popped.
///
/// * A key enters the queue once and keeps its place however many changes pile up for it
///   (no line-jumping); `pop` hands over all of them at once.
/// * Only the two newest deltas of a key are ever deduplicated, and only when both are
///   [`Deleted`](DeltaType::Deleted): the more informative one is kept (the older, unless it is a
///   tombstone).
/// * `delete` of a key that is neither queued nor in the known objects is ignored: the deletion
///   was already reported (by a relist) or never mattered.
/// * `replace(list)` queues [`Replaced`](DeltaType::Replaced) (or [`Sync`](DeltaType::Sync), by
///   option) for every listed object in list order; then a Deleted tombstone for every queued key
///   the list lacks, carrying the newest queued object (in queue order); then a Deleted tombstone
///   for every known key the list lacks that has nothing queued, carrying the cache's object.
/// * `resync` queues [`Sync`](DeltaType::Sync) with the cache's object for every known key with
///   nothing queued (a queued change is newer than the cache).
/// * A key popped whose `process` has not returned is *in flight* (see [`Queue`](crate::Queue)):
///   the rules above read it as the cache will have it once its deltas are applied. So a
///   `delete` of it is queued unless its newest delta is a deletion; `replace` tombstones it, if
///   the list lacks it and nothing is queued for it, with its newest object (first among the known
///   keys), unless its newest delta is a deletion; `resync` skips it.
/// * [`has_synced`](crate::Queue::has_synced) becomes true once everything the first `replace`
///   queued (deletions included) has been popped and processed (`process` returned), or at once
///   if a write comes before any `replace`.
/// * Keys and transforms are computed before anything is queued, outside the lock (a `delete`
///   checks the key, transforms outside the lock, then checks again: an ignored delete never runs
///   the transform). An object whose key function or transform fails (or panics) is refused as
///   the [`Queue`](crate::Queue) contract says: a refused `add`/`update`/`delete` of a cached (or
///   in-flight) or queued key queues a tombstone for it instead; `replace` leaves the refused
///   objects out of the list and applies the rest.
/// * If `process` panics in the middle of a batch, a key put back at the front that was queued
///   again meanwhile keeps one entry: the deltas put back, then the newer ones.
///
/// ```
/// use std::sync::Arc;
/// use informer_fifo::{DeltaFifo, DeltaType, Queue, QueueExt};
/// use informer_store::{key_func, ReflectorStore};
///
/// let fifo = DeltaFifo::new(key_func(|o: &(&str, u32)| Ok(o.0.to_owned())));
/// fifo.add(Arc::new(("a", 1))).unwrap();
/// fifo.add(Arc::new(("b", 1))).unwrap();
/// fifo.update(Arc::new(("a", 2))).unwrap(); // "a" keeps its place at the front
///
/// let types = fifo.pop_with(|deltas, _| deltas.iter().map(|d| d.delta_type()).collect::<Vec<_>>());
/// assert_eq!(types.unwrap(), [DeltaType::Added, DeltaType::Updated]);
/// let newest = fifo.pop_with(|deltas, _| deltas.newest().object().cloned());
/// assert_eq!(newest.unwrap().unwrap().0, "b");
/// assert!(fifo.is_empty());
/// ```
pub struct DeltaFifo<K> {
    intake: Intake<K>,
    emit_delta_type_replaced: bool,
    shared: Shared<K, Keyed<K>>,
}

impl<K: Send + Sync + 'static> DeltaFifo<K> {
    /// A queue with the default options: no known objects, `replace` emits Replaced, no
    /// transform.
    pub fn new(key_func: KeyFunc<K>) -> Self {
        Self::with_options(key_func, DeltaFifoOptions::default())
    }

    /// A queue with the given options.
    pub fn with_options(key_func: KeyFunc<K>, options: DeltaFifoOptions<K>) -> Self {
        Self {
            intake: Intake {
                key_func,
                known_objects: options.known_objects,
                transform: options.transform,
                on_refused: options.on_refused,
            },
            emit_delta_type_replaced: options.emit_delta_type_replaced,
            shared: Shared::new(Keyed::new()),
        }
    }

    /// The key function.
    pub fn key_func(&self) -> &KeyFunc<K> {
        &self.intake.key_func
    }

    /// The transform, if any (a reflector may apply it to objects it keeps aside).
    pub fn transform(&self) -> Option<&TransformFunc<K>> {
        self.intake.transform.as_ref()
    }

    /// The number of keys queued.
    pub fn len(&self) -> usize {
        self.shared.lock().pending.len()
    }

    /// Whether nothing is queued.
    pub fn is_empty(&self) -> bool {
        self.shared.lock().pending.is_empty()
    }

    /// The queued keys, in the order `pop` will deliver them.
    pub fn queued_keys(&self) -> Vec<String> {
        let state = self.shared.lock();
        state
            .pending
            .queued()
            .map(|(_, key, _)| key.to_owned())
            .collect()
    }

    /// Add and Update: key and transform outside the lock, then queue.
    fn queue_live(&self, kind: DeltaType, obj: Arc<K>) -> Result<()> {
        let key = self.intake.key(&obj)?;
        let obj = match self.intake.transform(&key, obj) {
            Ok(obj) => obj,
            Err(err) => return Err(self.withdraw(key, err)),
        };
        let mut state = self.shared.lock();
        state.populated = true;
        state.pending.queue_delta(key, Delta::new(kind, obj));
        self.shared.queued(state, false);
        Ok(())
    }

    /// A version of `key` was refused (`err`): if the key is queued or cached (or in flight, as
    /// the cache will have it), queue a tombstone with its last known state, so the superseded
    /// version is not kept as current. Reports the refusal and hands the error back.
    fn withdraw(&self, key: String, err: Error) -> Error {
        let mut state = self.shared.lock();
        let last = match state.pending.get(&key) {
            Some(deltas) => Some(deltas.newest().object().cloned()),
            None => self.intake.known(&state.in_flight, &key).map(Some),
        };
        match last {
            Some(last) => {
                state.populated = true;
                let tombstone = Delta::tombstone(key.as_str(), last);
                state.pending.queue_delta(key, tombstone);
                self.shared.queued(state, false);
            }
            None => drop(state),
        }
        self.intake.refuse(err)
    }

    /// The delta type a replace queues listed objects with.
    fn listed_kind(&self) -> DeltaType {
        if self.emit_delta_type_replaced {
            DeltaType::Replaced
        } else {
            DeltaType::Sync
        }
    }

    /// What a replace deletes: every key the list lacks (`is_listed` says which it has), queued
    /// or known.
    fn unlisted(
        &self,
        state: &Guarded<K, Keyed<K>>,
        is_listed: &dyn Fn(&str) -> bool,
    ) -> Unlisted<K> {
        // Queued keys the list lacks, with the newest object queued for them, in queue order.
        let queued: Vec<(SlotId, Delta<K>)> = state
            .pending
            .queued()
            .filter(|(_, key, _)| !is_listed(key))
            .map(|(slot, key, deltas)| {
                (
                    slot,
                    Delta::tombstone(key, deltas.newest().object().cloned()),
                )
            })
            .collect();
        // Known keys the list lacks and nothing is queued for: first the keys in flight, as
        // the cache will have them (with their newest object, unless it is a deletion), then
        // the cache's other keys, with the cache's object.
        let known: Vec<(String, Delta<K>)> = match &self.intake.known_objects {
            None => Vec::new(),
            Some(known) => {
                let unlisted = |key: &str| !is_listed(key) && !state.pending.contains(key);
                let mut deletions: Vec<(String, Delta<K>)> = state
                    .in_flight
                    .latest()
                    .into_iter()
                    .filter(|(key, _)| unlisted(key))
                    .filter_map(|(key, last)| {
                        let last = Arc::clone(last?);
                        Some((key.to_owned(), Delta::tombstone(key, Some(last))))
                    })
                    .collect();
                let in_flight = state.in_flight.keys();
                deletions.extend(
                    known
                        .list_keys()
                        .into_iter()
                        .filter(|key| unlisted(key) && !in_flight.contains(key.as_str()))
                        .map(|key| {
                            let delta = Delta::tombstone(key.as_str(), known.get_by_key(&key));
                            (key, delta)
                        }),
                );
                deletions
            }
        };
        Unlisted { queued, known }
    }

    /// Whether a delete of `key` has nothing to tell the consumer: the key is neither queued nor
    /// known (a key in flight counts as known unless its newest change is a deletion).
    fn ignores_delete(&self, state: &Guarded<K, Keyed<K>>, key: &str) -> bool {
        !state.pending.contains(key) && self.intake.known(&state.in_flight, key).is_none()
    }
}

impl<K: Send + Sync + 'static> ReflectorStore<K> for DeltaFifo<K> {
    type Error = Error;

    fn add(&self, obj: Arc<K>) -> Result<()> {
        self.queue_live(DeltaType::Added, obj)
    }

    fn update(&self, obj: Arc<K>) -> Result<()> {
        self.queue_live(DeltaType::Updated, obj)
    }

    fn delete(&self, obj: Arc<K>) -> Result<()> {
        let key = self.intake.key(&obj)?;
        let mut state = self.shared.lock();
        if self.ignores_delete(&state, &key) {
            // Already reported (by a relist), or never seen: nothing to tell the consumer.
            state.populated = true;
            return Ok(());
        }
        let obj = if self.intake.transform.is_some() {
            // Transformed outside the lock, after the check, so an ignored delete never runs it;
            // checked again once transformed, as the key may have been popped and deleted
            // meanwhile.
            drop(state);
            let obj = match self.intake.transform(&key, obj) {
                Ok(obj) => obj,
                Err(err) => return Err(self.withdraw(key, err)),
            };
            state = self.shared.lock();
            if self.ignores_delete(&state, &key) {
                state.populated = true;
                return Ok(());
            }
            obj
        } else {
            obj
        };
        state.populated = true;
        state
            .pending
            .queue_delta(key, Delta::Deleted(DeletedObject::Object(obj)));
        self.shared.queued(state, false);
        Ok(())
    }

    fn replace(&self, list: Vec<Arc<K>>, _resource_version: String) -> Result<()> {
        // Every key and transform first, outside the lock; refused objects are left out.
        let listed = self.intake.admit_listed(list);
        let new_keys: HashSet<&str, RandomState> =
            listed.iter().map(|(key, _)| key.as_str()).collect();
        let unique_listed = new_keys.len();

        let mut state = self.shared.lock();
        let unlisted = self.unlisted(&state, &|key| new_keys.contains(key));
        drop(new_keys);

        let kind = self.listed_kind();
        for (key, obj) in listed {
            state.pending.queue_delta(key, Delta::new(kind, obj));
        }
        let deletions = unlisted.queue(&mut state);
        state.replaced(unique_listed + deletions);
        self.shared.queued(state, true);
        Ok(())
    }

    fn replace_part(&self, part: Vec<Arc<K>>, parts: &mut ReplaceParts<K>) -> Result<()> {
        let Some(listed) = self.intake.admit_part(part, parts) else {
            return Ok(());
        };
        let kind = self.listed_kind();
        let mut state = self.shared.lock();
        for (key, obj) in listed {
            state.pending.queue_delta(key, Delta::new(kind, obj));
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
        let parts = match parts.into_held() {
            Ok(held) => return self.replace(held, resource_version),
            Err(applied) => applied,
        };
        let mut state = self.shared.lock();
        let unlisted = self.unlisted(&state, &|key| parts.is_listed(key));
        unlisted.queue(&mut state);
        state.replaced_in_parts();
        self.shared.queued(state, true);
        Ok(())
    }

    fn resync(&self) -> Result<()> {
        let Some(known) = &self.intake.known_objects else {
            return Ok(());
        };
        let mut state = self.shared.lock();
        let mut syncs = Vec::new();
        {
            let in_flight = state.in_flight.keys();
            for key in known.list_keys() {
                // A queued change is newer than the cache, and so is one in flight (the cache
                // does not have it yet): re-delivering the cache would go back in time.
                if state.pending.contains(&key) || in_flight.contains(key.as_str()) {
                    continue;
                }
                if let Some(obj) = known.get_by_key(&key) {
                    syncs.push((key, obj));
                }
            }
        }
        if syncs.is_empty() {
            return Ok(());
        }
        for (key, obj) in syncs {
            state.pending.queue_delta(key, Delta::Sync(obj));
        }
        self.shared.queued(state, true);
        Ok(())
    }
}

/// The tombstones a replace queues for the keys its list lacks.
struct Unlisted<K> {
    /// For queued keys, at their place in the queue.
    queued: Vec<(SlotId, Delta<K>)>,
    /// For keys only the cache (or a change in flight) has, at the end.
    known: Vec<(String, Delta<K>)>,
}

impl<K> Unlisted<K> {
    /// Queues the tombstones; returns how many.
    fn queue(self, state: &mut Guarded<K, Keyed<K>>) -> usize {
        let deletions = self.queued.len() + self.known.len();
        // Listing cannot reuse the slot of a queued key: the slot numbers are still valid.
        for (slot, delta) in self.queued {
            state.pending.push_queued(slot, delta);
        }
        for (key, delta) in self.known {
            state.pending.queue_delta(key, delta);
        }
        deletions
    }
}

crate::shared::queue_via_shared!(DeltaFifo);

impl<K> fmt::Debug for DeltaFifo<K> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.shared
            .debug_fields(&mut f.debug_struct("DeltaFifo"))
            .field("intake", &self.intake)
            .field("emit_delta_type_replaced", &self.emit_delta_type_replaced)
            .finish()
    }
}
