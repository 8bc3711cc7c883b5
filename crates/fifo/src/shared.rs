//! The part both queues share: the lock, the wake-up, the sync accounting and the blocking pop.

use std::fmt;

use crate::delta::Deltas;
use crate::queue::QueueClosed;
use crate::sync::{Condvar, Mutex, MutexGuard};

/// What a queue keeps pending; [`Shared`] takes changes off its front.
pub(crate) trait Pending<K> {
    /// Removes and returns the next change, if any.
    fn take_front(&mut self) -> Option<Deltas<K>>;

    /// How many entries are pending.
    fn len(&self) -> usize;
}

/// Everything behind the lock.
pub(crate) struct Guarded<S> {
    pub(crate) pending: S,
    /// A write or a replace has happened.
    pub(crate) populated: bool,
    /// What the first replace queued and is not popped yet.
    pub(crate) initial_population_count: usize,
    pub(crate) closed: bool,
}

impl<S> Guarded<S> {
    pub(crate) fn has_synced(&self) -> bool {
        self.populated && self.initial_population_count == 0
    }

    /// Records a replace: the first one sets the initial list to `count` entries.
    pub(crate) fn replaced(&mut self, count: usize) {
        if !self.populated {
            self.populated = true;
            self.initial_population_count = count;
        }
    }
}

/// The lock and the condition variable `pop` waits on.
pub(crate) struct Shared<S> {
    state: Mutex<Guarded<S>>,
    ready: Condvar,
}

impl<S> Shared<S> {
    pub(crate) fn new(pending: S) -> Self {
        Self {
            state: Mutex::new(Guarded {
                pending,
                populated: false,
                initial_population_count: 0,
                closed: false,
            }),
            ready: Condvar::new(),
        }
    }

    pub(crate) fn lock(&self) -> MutexGuard<'_, Guarded<S>> {
        self.state.lock()
    }

    /// Wakes one `pop`: after a write that queued one entry.
    pub(crate) fn notify_one(&self) {
        self.ready.notify_one();
    }

    /// Wakes every `pop`: after a write that may have queued several entries.
    pub(crate) fn notify_all(&self) {
        self.ready.notify_all();
    }

    /// Blocks until an entry is pending (or the queue is closed and empty), then hands up to
    /// `max` entries (at least one) to `process`, one at a time, under one acquisition of the
    /// lock. Returns how many were handed over.
    ///
    /// Each entry is removed and counted as popped before `process` runs, so a panicking
    /// `process` leaves the state consistent (the entries after it stay queued); the guard
    /// unlocks as the panic unwinds.
    pub(crate) fn pop_batch<K>(
        &self,
        max: usize,
        process: &mut dyn FnMut(Deltas<K>, bool),
    ) -> Result<usize, QueueClosed>
    where
        S: Pending<K>,
    {
        let mut state = self.state.lock();
        while state.pending.len() == 0 {
            if state.closed {
                return Err(QueueClosed);
            }
            state = self.ready.wait(state);
        }
        let mut popped = 0;
        while popped < max.max(1) {
            let Some(deltas) = state.pending.take_front() else {
                break;
            };
            let is_in_initial_list = !state.has_synced();
            if state.initial_population_count > 0 {
                state.initial_population_count -= 1;
            }
            popped += 1;
            process(deltas, is_in_initial_list);
        }
        Ok(popped)
    }

    pub(crate) fn has_synced(&self) -> bool {
        self.state.lock().has_synced()
    }

    pub(crate) fn close(&self) {
        self.state.lock().closed = true;
        self.ready.notify_all();
    }

    pub(crate) fn is_closed(&self) -> bool {
        self.state.lock().closed
    }

    /// The shared fields of a queue's `Debug` output.
    pub(crate) fn debug_fields<'a, 'b: 'a, 'c, K>(
        &self,
        f: &'c mut fmt::DebugStruct<'a, 'b>,
    ) -> &'c mut fmt::DebugStruct<'a, 'b>
    where
        S: Pending<K>,
    {
        let state = self.state.lock();
        f.field("len", &state.pending.len())
            .field("populated", &state.populated)
            .field("initial_population_count", &state.initial_population_count)
            .field("closed", &state.closed)
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
                self.shared.pop_batch(1, process).map(drop)
            }

            fn pop_batch(
                &self,
                max: usize,
                process: &mut dyn FnMut($crate::Deltas<K>, bool),
            ) -> Result<usize, $crate::QueueClosed> {
                self.shared.pop_batch(max, process)
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
        }
    };
}

pub(crate) use queue_via_shared;
