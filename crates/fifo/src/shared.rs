//! The part both queues share: the lock, the wake-up, the sync accounting, the record of the
//! changes in flight, and the pop.
//!
//! A pop takes up to `max` changes off the queue under the lock, records them as *in flight*,
//! releases the lock, hands them to `process` one by one, then takes the lock again to clear the
//! record. Poppers take turns (the `popping` flag), so changes are never processed concurrently
//! and each key's changes are processed in order. While a change is in flight the consumer's
//! cache does not have it yet, so the queue's rules that read the cache back consult the record
//! first: see [`InFlight`].

use std::collections::VecDeque;
use std::fmt;
use std::hash::BuildHasher;
use std::sync::Arc;
use std::task::Waker;

use foldhash::fast::RandomState;
use hashbrown::{HashMap, HashSet};

use crate::delta::{Delta, Deltas};
use crate::queue::{QueueClosed, ReadyHook};
use crate::sync::{Condvar, Mutex, MutexGuard};

/// What a queue keeps pending; [`Shared`] takes changes off its front.
pub(crate) trait Pending<K> {
    /// Removes and returns the next change, if any.
    fn take_front(&mut self) -> Option<Deltas<K>>;

    /// How many entries are pending.
    fn len(&self) -> usize;

    /// Puts back at the front a change that was taken off the front and never handed over (its
    /// `process` call never came: an earlier one in the batch panicked). A queue that keeps one
    /// entry per key merges what was queued for the key meanwhile behind it, and returns the
    /// position (0 = front) that entry had.
    fn put_front(&mut self, deltas: Deltas<K>) -> Option<usize>;

    /// Changes written so far, and how many of them joined a key already queued.
    fn written(&self) -> (u64, u64);
}

/// In-flight records kept (with their key buffers) once a batch is over; a larger batch gives
/// the excess back.
const KEEP_IN_FLIGHT: usize = 1024;

/// One change taken off the queue and not processed yet.
struct Flying<K> {
    /// What the change is about: one key, or the whole collection.
    scope: Scope,
    /// The key (a buffer reused from batch to batch, so that a pop allocates nothing).
    key: String,
    hash: u64,
    /// The key's state once the change is applied: the newest object, or `None` if the newest
    /// delta is a deletion.
    last: Option<Arc<K>>,
    /// Whether the change counts towards the initial list (see [`Guarded::has_synced`]).
    counted: bool,
}

/// What a change in flight is about.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Scope {
    /// One key's change.
    Key,
    /// A relist of the whole collection ([`Delta::ReplacedAll`]): every key's state once it is
    /// applied depends on the cache it is applied to.
    ReplacedAll,
    /// A resync of the whole cache ([`Delta::SyncAll`]): no key's state changes.
    SyncAll,
}

/// A key's state as the changes in flight leave it.
pub(crate) enum FlightState<'a, K> {
    /// No change in flight is about the key.
    NotInFlight,
    /// Its newest change in flight leaves this: its object, or `None` after a deletion.
    Latest(Option<&'a Arc<K>>),
    /// A relist of the whole collection in flight decides it (its newest change in flight).
    WholeCollection,
}

/// The changes a pop has taken off the queue and whose `process` has not returned yet, in the
/// order they were taken.
///
/// The consumer's cache (the queue's known objects) does not reflect them yet, or only in part,
/// so the queue reads a key in flight from here instead, as if its change were already applied:
/// its newest object, or absent if its newest delta is a deletion. Since the record is cleared
/// under the lock only once `process` has returned, a write that holds the lock sees each key
/// either in flight (and ignores the cache for it) or fully applied to the cache.
pub(crate) struct InFlight<K> {
    hasher: RandomState,
    /// `flying[..len]` are in flight; the rest are spare buffers.
    flying: Vec<Flying<K>>,
    len: usize,
    /// How many of the changes in flight count towards the initial list.
    counted: usize,
}

impl<K> InFlight<K> {
    fn new() -> Self {
        Self {
            hasher: RandomState::default(),
            flying: Vec::new(),
            len: 0,
            counted: 0,
        }
    }

    fn active(&self) -> &[Flying<K>] {
        &self.flying[..self.len]
    }

    fn record(&mut self, deltas: &Deltas<K>, counted: bool) {
        let key = deltas.key().unwrap_or_default();
        let hash = self.hasher.hash_one(key);
        let scope = match deltas.newest() {
            Delta::ReplacedAll(_) => Scope::ReplacedAll,
            Delta::SyncAll => Scope::SyncAll,
            _ => Scope::Key,
        };
        let last = match deltas.newest() {
            Delta::Deleted(_) => None,
            newest => newest.object().cloned(),
        };
        if self.len == self.flying.len() {
            self.flying.push(Flying {
                scope: Scope::Key,
                key: String::new(),
                hash: 0,
                last: None,
                counted: false,
            });
        }
        let flying = &mut self.flying[self.len];
        flying.scope = scope;
        flying.key.clear();
        flying.key.push_str(key);
        flying.hash = hash;
        flying.last = last;
        flying.counted = counted;
        self.len += 1;
        if counted {
            self.counted += 1;
        }
    }

    fn clear(&mut self) {
        for flying in &mut self.flying[..self.len] {
            flying.last = None;
        }
        self.len = 0;
        self.counted = 0;
        if self.flying.len() > KEEP_IN_FLIGHT {
            self.flying.truncate(KEEP_IN_FLIGHT);
            self.flying.shrink_to_fit();
        }
    }

    /// Counts every change in flight towards the initial list; returns how many are in flight.
    fn count_all(&mut self) -> usize {
        for flying in &mut self.flying[..self.len] {
            flying.counted = true;
        }
        self.counted = self.len;
        self.len
    }

    /// How many of the first `n` changes in flight count towards the initial list.
    fn counted_among_first(&self, n: usize) -> usize {
        self.active()[..n].iter().filter(|f| f.counted).count()
    }

    /// How many changes are in flight.
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    /// `key`'s state once its changes in flight are applied: `None` if none is in flight (or
    /// a whole-collection change decides it: see [`lookup`](Self::lookup)); `Some(None)` if the
    /// newest is a deletion; else `Some` of its newest object.
    pub(crate) fn get(&self, key: &str) -> Option<Option<&Arc<K>>> {
        match self.lookup(key) {
            FlightState::Latest(last) => Some(last),
            FlightState::NotInFlight | FlightState::WholeCollection => None,
        }
    }

    /// `key`'s state once its changes in flight are applied, newest change first: a change of
    /// the key, or a relist of the whole collection (a resync of the whole cache changes no
    /// state and is passed over).
    pub(crate) fn lookup(&self, key: &str) -> FlightState<'_, K> {
        if self.len == 0 {
            return FlightState::NotInFlight;
        }
        let hash = self.hasher.hash_one(key);
        let newest = self.active().iter().rev().find(|f| match f.scope {
            Scope::Key => f.hash == hash && f.key == key,
            Scope::ReplacedAll => true,
            Scope::SyncAll => false,
        });
        match newest {
            None => FlightState::NotInFlight,
            Some(f) if f.scope == Scope::ReplacedAll => FlightState::WholeCollection,
            Some(f) => FlightState::Latest(f.last.as_ref()),
        }
    }

    /// The keys in flight, for membership tests in bulk (allocates nothing when none is).
    pub(crate) fn keys(&self) -> HashSet<&str, RandomState> {
        self.keyed().map(|f| f.key.as_str()).collect()
    }

    /// The changes in flight that are about one key.
    fn keyed(&self) -> impl Iterator<Item = &Flying<K>> {
        self.active().iter().filter(|f| f.scope == Scope::Key)
    }

    /// Every key in flight once, in the order its first change was taken, with its state once
    /// applied (see [`get`](Self::get)).
    pub(crate) fn latest(&self) -> Vec<(&str, Option<&Arc<K>>)> {
        let mut at: HashMap<&str, usize, RandomState> = HashMap::default();
        let mut out: Vec<(&str, Option<&Arc<K>>)> = Vec::new();
        for flying in self.keyed() {
            let state = flying.last.as_ref();
            match at.get(flying.key.as_str()) {
                Some(&i) => out[i].1 = state,
                None => {
                    at.insert(&flying.key, out.len());
                    out.push((&flying.key, state));
                }
            }
        }
        out
    }
}

/// Everything behind the lock.
pub(crate) struct Guarded<K, S> {
    pub(crate) pending: S,
    /// A write or a replace has happened.
    pub(crate) populated: bool,
    /// What the first replace queued and is not processed yet (changes in flight included:
    /// the count falls once their `process` has returned).
    pub(crate) initial_population_count: usize,
    pub(crate) closed: bool,
    /// The changes taken off the queue whose `process` has not returned yet.
    pub(crate) in_flight: InFlight<K>,
    /// A pop is handing changes over: the other poppers wait for their turn.
    popping: bool,
    /// The thread of that pop, to turn a pop from inside `process` into a panic instead of a
    /// deadlock. (loom runs its threads on one OS thread: not tracked there.)
    #[cfg(not(informer_loom))]
    popper: Option<std::thread::ThreadId>,
    /// The buffer a batch is taken into, kept from batch to batch.
    batch: VecDeque<(Deltas<K>, bool)>,
    hook: Option<ReadyHook>,
    /// A producer waiting for the pending entries to be at most this many
    /// ([`Shared::backlog_waking`]).
    backlog_waiter: Option<(usize, Waker)>,
    /// Entries handed to `process` so far.
    popped: u64,
}

impl<K, S> Guarded<K, S> {
    pub(crate) fn has_synced(&self) -> bool {
        self.populated && self.initial_population_count == 0
    }

    /// Records a replace: the first one sets the initial list to `count` entries.
    pub(crate) fn replaced(&mut self, count: usize) {
        if !self.populated {
            self.populated = true;
            // Nothing in flight counts yet: the queue was not populated when it was taken.
            self.initial_population_count = count;
        }
    }

    /// Records the end of a replace applied in parts. If it is the first, the initial list is
    /// everything queued or in flight now: its parts were queued (and may be processed
    /// already) before the queue was populated, and `has_synced` waits for what is left of
    /// them, and of the deletions the end queued.
    pub(crate) fn replaced_in_parts(&mut self)
    where
        S: Pending<K>,
    {
        if !self.populated {
            self.populated = true;
            self.initial_population_count = self.pending.len() + self.in_flight.count_all();
        }
    }

    /// Panics if the calling thread is the one processing a batch: its pop would wait for
    /// itself forever.
    fn check_not_reentrant(&self) {
        #[cfg(not(informer_loom))]
        if self.popper == Some(std::thread::current().id()) {
            panic!("a queue's pop was called from inside its own `process`, which would deadlock");
        }
    }

    fn start_popping(&mut self) {
        self.popping = true;
        #[cfg(not(informer_loom))]
        {
            self.popper = Some(std::thread::current().id());
        }
    }

    fn stop_popping(&mut self) {
        self.popping = false;
        #[cfg(not(informer_loom))]
        {
            self.popper = None;
        }
    }
}

/// The lock and the condition variable `pop` waits on.
pub(crate) struct Shared<K, S> {
    state: Mutex<Guarded<K, S>>,
    ready: Condvar,
}

impl<K, S> Shared<K, S> {
    pub(crate) fn new(pending: S) -> Self {
        Self {
            state: Mutex::new(Guarded {
                pending,
                populated: false,
                initial_population_count: 0,
                closed: false,
                in_flight: InFlight::new(),
                popping: false,
                #[cfg(not(informer_loom))]
                popper: None,
                batch: VecDeque::new(),
                hook: None,
                backlog_waiter: None,
                popped: 0,
            }),
            ready: Condvar::new(),
        }
    }

    pub(crate) fn lock(&self) -> MutexGuard<'_, Guarded<K, S>> {
        self.state.lock()
    }

    /// After a write that queued something: releases the lock, wakes one `pop` (every `pop` if
    /// the write may have queued several entries), then tells the ready hook.
    pub(crate) fn queued(&self, state: MutexGuard<'_, Guarded<K, S>>, several: bool) {
        let hook = state.hook.clone();
        drop(state);
        if several {
            self.ready.notify_all();
        } else {
            self.ready.notify_one();
        }
        if let Some(hook) = hook {
            hook();
        }
    }

    /// Hands up to `max` entries (at least one) to `process`, in queue order; returns how many.
    ///
    /// With `block`, waits until an entry is pending (or the queue is closed and empty);
    /// without, returns `Ok(0)` at once if none is. Either way it waits for another pop's batch
    /// to be over first: poppers take turns.
    ///
    /// The entries are taken off the queue and recorded in flight under the lock, then handed
    /// over with the lock released; the record is cleared, and the initial count lowered, under
    /// the lock once the batch is over. A panicking `process` unwinds through [`Batch`], which
    /// does the same, drops the entry being processed and puts back the ones not handed over.
    pub(crate) fn pop_batch(
        &self,
        max: usize,
        process: &mut dyn FnMut(Deltas<K>, bool),
        block: bool,
    ) -> Result<usize, QueueClosed>
    where
        S: Pending<K>,
    {
        let mut guard = self.state.lock();
        loop {
            if guard.popping {
                guard.check_not_reentrant();
            } else if guard.pending.len() > 0 {
                break;
            } else if guard.closed {
                return Err(QueueClosed);
            } else if !block {
                return Ok(0);
            }
            guard = self.ready.wait(guard);
        }
        let state = &mut *guard;
        state.start_popping();
        let mut taken = std::mem::take(&mut state.batch);
        let max = max.max(1);
        while taken.len() < max {
            let Some(deltas) = state.pending.take_front() else {
                break;
            };
            // What the initial list still holds once the changes taken before are processed:
            // the flag is what `has_synced` would say then, as if they had been popped one by
            // one.
            let remaining = state
                .initial_population_count
                .saturating_sub(state.in_flight.counted);
            let is_in_initial_list = !(state.populated && remaining == 0);
            state.in_flight.record(&deltas, remaining > 0);
            taken.push_back((deltas, is_in_initial_list));
        }
        let waiter = match &state.backlog_waiter {
            Some((bound, _)) if state.pending.len() <= *bound => state.backlog_waiter.take(),
            _ => None,
        };
        drop(guard);
        if let Some((_, waker)) = waiter {
            waker.wake();
        }

        let mut batch = Batch {
            shared: self,
            taken,
            handed_over: 0,
        };
        while let Some((deltas, is_in_initial_list)) = batch.taken.pop_front() {
            // Counted before the call: a change whose `process` panics is dropped, not put back.
            batch.handed_over += 1;
            process(deltas, is_in_initial_list);
        }
        Ok(batch.handed_over)
    }

    pub(crate) fn has_synced(&self) -> bool {
        self.state.lock().has_synced()
    }

    /// How many entries are pending; if more than `bound`, `waker` is kept (in place of any
    /// other) and woken by the pop that leaves at most `bound`, or by the queue's close.
    pub(crate) fn backlog_waking(&self, bound: usize, waker: &Waker) -> usize
    where
        S: Pending<K>,
    {
        let mut state = self.state.lock();
        let pending = state.pending.len();
        if pending > bound {
            match &mut state.backlog_waiter {
                Some((kept, old)) if old.will_wake(waker) => *kept = bound,
                slot => *slot = Some((bound, waker.clone())),
            }
        }
        pending
    }

    /// The queue's counts now.
    pub(crate) fn counts(&self) -> crate::QueueCounts
    where
        S: Pending<K>,
    {
        let state = self.state.lock();
        let (written, coalesced) = state.pending.written();
        crate::QueueCounts {
            queued: state.pending.len(),
            written,
            coalesced,
            popped: state.popped,
        }
    }

    pub(crate) fn close(&self) {
        let mut state = self.state.lock();
        state.closed = true;
        let waiter = state.backlog_waiter.take();
        self.queued(state, true);
        if let Some((_, waker)) = waiter {
            waker.wake();
        }
    }

    pub(crate) fn is_closed(&self) -> bool {
        self.state.lock().closed
    }

    pub(crate) fn set_ready_hook(&self, hook: ReadyHook) {
        // The old hook is dropped outside the lock.
        let old = self.state.lock().hook.replace(hook);
        drop(old);
    }

    /// The shared fields of a queue's `Debug` output.
    pub(crate) fn debug_fields<'a, 'b: 'a, 'c>(
        &self,
        f: &'c mut fmt::DebugStruct<'a, 'b>,
    ) -> &'c mut fmt::DebugStruct<'a, 'b>
    where
        S: Pending<K>,
    {
        let state = self.state.lock();
        f.field("len", &state.pending.len())
            .field("in_flight", &state.in_flight.len())
            .field("populated", &state.populated)
            .field("initial_population_count", &state.initial_population_count)
            .field("closed", &state.closed)
            .field("ready_hook", &state.hook.is_some())
    }
}

/// A batch being handed over; ends it when dropped, after the last `process` returned or as a
/// panic unwinds out of one.
struct Batch<'a, K, S: Pending<K>> {
    shared: &'a Shared<K, S>,
    /// The entries not handed over yet (the front first), with their initial-list flags.
    taken: VecDeque<(Deltas<K>, bool)>,
    /// How many entries were handed to `process` (the one it panicked on included).
    handed_over: usize,
}

impl<K, S: Pending<K>> Drop for Batch<'_, K, S> {
    fn drop(&mut self) {
        let mut guard = self.shared.state.lock();
        let state = &mut *guard;
        // The entries handed over are processed (or dropped by a panic): their count falls.
        state.popped += self.handed_over as u64;
        let processed = state.in_flight.counted_among_first(self.handed_over);
        state.initial_population_count = state.initial_population_count.saturating_sub(processed);
        if !self.taken.is_empty() {
            // `process` panicked: the entries never handed over go back to the front, in order.
            // The initial list is the front of the queue: the entries it counts (in flight or
            // queued) are the first `initial_population_count`. Keep it so: while it is not
            // empty, every entry put back at the front counts; one it absorbs (a later entry of
            // the same key) that counted stops counting.
            let counting = state.initial_population_count > 0;
            let put_back_counted = state.in_flight.counted - processed;
            let mut counted_queued = state
                .initial_population_count
                .saturating_sub(put_back_counted);
            while let Some((deltas, _)) = self.taken.pop_back() {
                let absorbed = state.pending.put_front(deltas);
                if counting {
                    if absorbed.is_some_and(|at| at < counted_queued) {
                        counted_queued -= 1;
                    }
                    counted_queued += 1;
                }
            }
            if counting {
                state.initial_population_count = counted_queued;
            }
        }
        state.in_flight.clear();
        state.stop_popping();
        // The buffer (now empty) serves the next batch.
        state.batch = std::mem::take(&mut self.taken);
        drop(guard);
        // Another popper may be waiting for its turn.
        self.shared.ready.notify_all();
    }
}

/// Implements [`Queue`](crate::Queue) for a queue type whose `shared` field is a [`Shared`].
macro_rules! queue_via_shared {
    ($queue:ident) => {
        impl<K: Send + Sync + 'static> $crate::Queue<K> for $queue<K> {
            fn pop(
                &self,
                process: &mut dyn FnMut($crate::Deltas<K>, bool),
            ) -> Result<(), $crate::QueueClosed> {
                self.shared.pop_batch(1, process, true).map(drop)
            }

            fn pop_batch(
                &self,
                max: usize,
                process: &mut dyn FnMut($crate::Deltas<K>, bool),
            ) -> Result<usize, $crate::QueueClosed> {
                self.shared.pop_batch(max, process, true)
            }

            fn try_pop_batch(
                &self,
                max: usize,
                process: &mut dyn FnMut($crate::Deltas<K>, bool),
            ) -> Result<usize, $crate::QueueClosed> {
                self.shared.pop_batch(max, process, false)
            }

            fn set_ready_hook(&self, hook: $crate::ReadyHook) {
                self.shared.set_ready_hook(hook);
            }

            fn has_synced(&self) -> bool {
                self.shared.has_synced()
            }

            fn close(&self) {
                self.shared.close();
            }

            fn is_closed(&self) -> bool {
                self.shared.is_closed()
            }

            fn len(&self) -> usize {
                $queue::len(self)
            }

            fn counts(&self) -> $crate::QueueCounts {
                self.shared.counts()
            }
        }
    };
}

pub(crate) use queue_via_shared;
