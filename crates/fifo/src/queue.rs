//! The `Queue` contract: what the controller consumes, and what a reflector feeds.

use std::sync::Arc;

use informer_store::{BoxError, ReflectorStore};

use crate::error::Error;

use crate::delta::Deltas;

/// Turns an object into the form the queue keeps, as it enters the queue (client-go's
/// `TransformFunc`): typically it strips fields nobody reads, to save memory.
///
/// It is applied to objects from `add`, `update`, `delete` and `replace`; never to tombstones and
/// never to the objects a `resync` re-delivers from the cache (they were transformed on their way
/// in). An error (or a panic, which the queue catches) refuses the object: see [`Queue`] for what
/// a refusal does.
pub type TransformFunc<K> = Arc<dyn Fn(Arc<K>) -> Result<Arc<K>, BoxError> + Send + Sync>;

/// Told about every object a queue refuses: a key function or transform that failed or
/// panicked, in any write, `replace` included. Without one a queue logs each refusal through
/// `tracing` at warn level. An informer installs one that counts and logs with its name.
pub type RefusalHandler = Arc<dyn Fn(&Error) + Send + Sync>;

/// Wraps a closure as a [`TransformFunc`].
pub fn transform_func<K, F>(f: F) -> TransformFunc<K>
where
    F: Fn(Arc<K>) -> Result<Arc<K>, BoxError> + Send + Sync + 'static,
{
    Arc::new(f)
}

/// Told when a queue may have a change ready or has become synced: after every write that
/// queued something (`add`, `update`, `delete`, `resync`, the tombstone of a refused object),
/// after every `replace` (an empty one queues nothing but makes the queue synced) and after
/// [`close`](Queue::close). It is called on the writer's thread, without the queue's lock held,
/// and may be called spuriously (nothing ready, or already popped).
///
/// It lets a consumer run its pop loop as a job on a shared thread pool, popping with
/// [`Queue::try_pop_batch`] until nothing is ready, instead of a thread blocked in
/// [`Queue::pop`] per queue. It should only schedule that job: it may be called from inside a
/// `process` (a write made there), where a pop would panic.
///
/// ```
/// use std::sync::{mpsc, Arc, Mutex};
/// use informer_fifo::{DeltaFifo, Queue};
/// use informer_store::{key_func, ReflectorStore};
///
/// let fifo = Arc::new(DeltaFifo::new(key_func(|s: &String| Ok(s.clone()))));
/// // The "thread pool": a channel of jobs to run.
/// let (jobs, pool) = mpsc::channel::<()>();
/// let jobs = Mutex::new(jobs);
/// fifo.set_ready_hook(Arc::new(move || drop(jobs.lock().unwrap().send(()))));
///
/// fifo.add(Arc::new("a".to_string())).unwrap();
/// fifo.add(Arc::new("b".to_string())).unwrap();
/// // A job pops what is ready, without ever waiting for more.
/// let mut seen = Vec::new();
/// while pool.try_recv().is_ok() {
///     while fifo.try_pop_batch(16, &mut |d, _| seen.push(d.key().unwrap().to_owned())) != Ok(0) {}
/// }
/// assert_eq!(seen, ["a", "b"]);
/// ```
pub type ReadyHook = Arc<dyn Fn() + Send + Sync>;

/// What [`Queue::pop`] returns once the queue is closed and drained.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, thiserror::Error)]
#[error("queue is closed")]
pub struct QueueClosed;

/// A queue of changes between a reflector and a controller (client-go's `Queue`).
///
/// **Writes.** The reflector-facing writes are [`ReflectorStore`]'s, so a reflector can feed a
/// queue or a plain store alike. A write is quick and never waits on the consumer: key
/// functions and transforms run before the queue's lock is taken, and the lock is never held
/// while `process` runs. Writes after [`close`](Self::close) are accepted (as in client-go):
/// they are queued and a draining `pop` delivers them. After a write that queued something, and
/// after a `replace` (even an empty one, which makes the queue synced), the [`ReadyHook`] is
/// told: a consumer that pops on a pool learns of the sync there.
///
/// **Refused objects.** A key function or transform that fails or panics refuses that one
/// object, which is reported to the queue's [`RefusalHandler`] and never stalls the queue:
///
/// * an `add`, `update` or `delete` returns the error; if the refused object's key is known
///   (only the transform failed) and the key is cached or queued, a tombstone deletion carrying
///   the last known state is queued for it, so the consumer never keeps a superseded version as
///   if it were current; the next accepted version adds the object back;
/// * a `replace` applies the rest of its list: a refused object counts as absent from it, so a
///   cached version of it is deleted with a tombstone like any object the list lacks;
/// * a key function failure leaves nothing to withdraw (the queue cannot tell which key the
///   object had); a relist removes a stale entry, since its key is then absent from the list.
///
/// **Pop.** [`pop`](Self::pop) blocks until a change is ready, takes it off the queue, and
/// hands it to `process` together with `is_in_initial_list`: whether it belongs to the first
/// relist (the queue had not synced yet when it was taken). `process` runs **with the queue's
/// lock released**, so a slow `process` (applying the change to the cache runs the user's index
/// functions) never holds up the reflector's writes. A [`Deltas`] is never empty.
///
/// * Poppers take turns: a pop waits for another pop's batch to be over before it takes
///   anything, so changes are never processed concurrently and each key's changes are
///   processed in order.
/// * A change is *in flight* from the moment it is taken off the queue until its `process`
///   returns. The cache the queue reads back ([`KnownObjects`](informer_store::KnownObjects))
///   does not have it yet, so for a key in flight the queue's rules read its newest in-flight
///   change instead, as the cache will be once it is applied (the key is cached with that
///   object, or absent if it is a deletion): a `replace` whose list lacks the key tombstones it
///   with that object; a `delete` of it is not ignored as unknown; a refused version of it is
///   withdrawn with that object; and a `resync` skips it, as it skips queued keys, since the
///   cache holds an older version. Without known objects there is no cache to read and these
///   rules are as without a change in flight.
/// * [`has_synced`](Self::has_synced) turns true only once `process` has returned for the last
///   change of the first relist, so whoever sees it true finds that change in the cache. A
///   first relist delivered in parts ([`ReflectorStore::replace_part`]) is queued part by part
///   and may be processed while it arrives, but it ends only with
///   [`replace_parts_done`](ReflectorStore::replace_parts_done): `has_synced` waits for that
///   end and then for every change queued or in flight.
/// * `process` may call the queue's writes (and [`has_synced`](Self::has_synced),
///   [`close`](Self::close)); it must not pop from the same queue: its pop would wait for its own
///   batch to end (this crate's queues panic instead of deadlocking).
///
/// **Errors and panics in `process`.** The queue does not look at what `process` computes: the
/// change is consumed either way and never requeued (client-go removed requeueing in v0.33). Use
/// [`QueueExt::pop_with`] to get `process`'s result back. If `process` panics, the panic
/// propagates out of the pop, the change being processed is dropped (as it would be after an
/// error, and counted as popped towards [`has_synced`](Self::has_synced)), the changes of the
/// batch not handed over yet go back to the front of the queue in order, nothing is left in
/// flight, and the queue is consistent and usable.
///
/// **Close.** After [`close`](Self::close), every blocked `pop` wakes; `pop` keeps delivering
/// what is queued and returns [`QueueClosed`] only once the queue is empty.
///
/// The trait is object-safe: the controller can hold an `Arc<dyn Queue<K>>`.
pub trait Queue<K>: ReflectorStore<K, Error = Error> {
    /// Blocks until a change is ready, then hands it to `process` (see the trait docs).
    ///
    /// Returns [`QueueClosed`] if the queue is closed and empty.
    fn pop(&self, process: &mut dyn FnMut(Deltas<K>, bool)) -> Result<(), QueueClosed>;

    /// Like [`pop`](Self::pop), but takes up to `max` ready changes (at least one) off the queue
    /// in one acquisition of the lock, then hands them over with the lock released, one
    /// `process` call each, in queue order; returns how many.
    ///
    /// It blocks only for the first change: it never waits for a batch to fill. A consumer that
    /// buffers work per change (the informer's notifications) can flush once per batch. The
    /// changes stay in flight until the batch is over. The default pops one change; both of
    /// this crate's queues pop up to `max`. If `process` panics, the changes not handed over yet
    /// go back to the front of the queue.
    fn pop_batch(
        &self,
        max: usize,
        process: &mut dyn FnMut(Deltas<K>, bool),
    ) -> Result<usize, QueueClosed> {
        let _ = max;
        self.pop(process).map(|()| 1)
    }

    /// Like [`pop_batch`](Self::pop_batch), but never waits for a change: `Ok(0)` if none is
    /// ready and the queue is open, [`QueueClosed`] if it is closed and empty. (It still takes
    /// its turn after another pop's batch, as every pop does.)
    ///
    /// With a [`ReadyHook`], a consumer pops on a thread pool: the hook schedules a job, and the
    /// job calls this until it returns `Ok(0)`.
    fn try_pop_batch(
        &self,
        max: usize,
        process: &mut dyn FnMut(Deltas<K>, bool),
    ) -> Result<usize, QueueClosed>;

    /// Installs the hook told whenever a change may have become ready (see [`ReadyHook`]);
    /// replaces any earlier one.
    fn set_ready_hook(&self, hook: ReadyHook);

    /// Whether the first relist has been fully processed (`process` returned for each of its
    /// changes), or a write came before any relist.
    ///
    /// Once true it stays true.
    fn has_synced(&self) -> bool;

    /// Closes the queue: wakes every blocked [`pop`](Self::pop) and tells the ready hook.
    /// Idempotent.
    fn close(&self);

    /// Whether [`close`](Self::close) has been called.
    fn is_closed(&self) -> bool;

    /// Keys with changes waiting to be popped (not counting a batch in flight).
    fn len(&self) -> usize;

    /// Whether no change is waiting.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// What the queue has taken and given so far (for metrics). A queue that does not count
    /// reports only its length.
    fn counts(&self) -> QueueCounts {
        QueueCounts {
            queued: self.len(),
            ..QueueCounts::default()
        }
    }
}

/// What a queue has taken and given (see [`Queue::counts`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub struct QueueCounts {
    /// Keys (or events) waiting now.
    pub queued: usize,
    /// Changes written so far (adds, updates, deletes, replaced and resynced objects).
    pub written: u64,
    /// Of those, the ones that joined a key already queued (coalesced into its deltas).
    pub coalesced: u64,
    /// Entries handed to `process` so far.
    pub popped: u64,
}

/// Conveniences on top of any [`Queue`].
pub trait QueueExt<K>: Queue<K> {
    /// Pops one change and returns what `process` returns: its error, typically.
    ///
    /// ```
    /// use std::sync::Arc;
    /// use informer_fifo::{DeltaFifo, Queue, QueueExt, QueueClosed};
    /// use informer_store::{key_func, ReflectorStore};
    ///
    /// let fifo = DeltaFifo::new(key_func(|s: &String| Ok(s.clone())));
    /// fifo.add(Arc::new("a".to_string())).unwrap();
    /// let n = fifo.pop_with(|deltas, _| deltas.len()).unwrap();
    /// assert_eq!(n, 1);
    /// fifo.close();
    /// assert_eq!(fifo.pop_with(|deltas, _| deltas.len()), Err(QueueClosed));
    /// ```
    fn pop_with<T, F>(&self, process: F) -> Result<T, QueueClosed>
    where
        F: FnOnce(Deltas<K>, bool) -> T,
    {
        let mut process = Some(process);
        let mut out = None;
        self.pop(&mut |deltas, is_in_initial_list| {
            if let Some(process) = process.take() {
                out = Some(process(deltas, is_in_initial_list));
            }
        })?;
        Ok(out.expect("Queue::pop returned Ok without calling process: a broken Queue impl"))
    }
}

impl<K, Q: Queue<K> + ?Sized> QueueExt<K> for Q {}

macro_rules! forward_through {
    ($($ptr:ty),*) => {$(
        impl<K, T: Queue<K> + ?Sized> Queue<K> for $ptr {
            fn pop(&self, process: &mut dyn FnMut(Deltas<K>, bool)) -> Result<(), QueueClosed> {
                (**self).pop(process)
            }
            fn pop_batch(
                &self,
                max: usize,
                process: &mut dyn FnMut(Deltas<K>, bool),
            ) -> Result<usize, QueueClosed> {
                (**self).pop_batch(max, process)
            }
            fn try_pop_batch(
                &self,
                max: usize,
                process: &mut dyn FnMut(Deltas<K>, bool),
            ) -> Result<usize, QueueClosed> {
                (**self).try_pop_batch(max, process)
            }
            fn set_ready_hook(&self, hook: ReadyHook) { (**self).set_ready_hook(hook) }
            fn has_synced(&self) -> bool { (**self).has_synced() }
            fn close(&self) { (**self).close() }
            fn is_closed(&self) -> bool { (**self).is_closed() }
            fn len(&self) -> usize { (**self).len() }
            fn counts(&self) -> QueueCounts { (**self).counts() }
        }
    )*};
}

forward_through!(Arc<T>, &T);
