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

/// What [`Queue::pop`] returns once the queue is closed and drained.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, thiserror::Error)]
#[error("queue is closed")]
pub struct QueueClosed;

/// A queue of changes between a reflector and a controller (client-go's `Queue`).
///
/// **Writes.** The reflector-facing writes are [`ReflectorStore`]'s, so a reflector can feed a
/// queue or a plain store alike. A write is quick and never blocks on the consumer. Writes after
/// [`close`](Self::close) are accepted (as in client-go): they are queued and a draining `pop`
/// delivers them.
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
/// **Pop.** [`pop`](Self::pop) blocks until a change is ready, removes it from the queue, and
/// hands it to `process` together with `is_in_initial_list`: whether it belongs to the first
/// relist (the queue had not synced yet when it was popped). `process` runs **with the queue's
/// lock held**, so that no write can slip between taking a change off the queue and applying it to
/// the cache the queue reads back ([`KnownObjects`](informer_store::KnownObjects)); it must not
/// call back into the queue (that would deadlock) and should be quick. A [`Deltas`] is never
/// empty.
///
/// **Errors and panics in `process`.** The queue does not look at what `process` computes: the
/// change is consumed either way and never requeued (client-go removed requeueing in v0.33). Use
/// [`QueueExt::pop_with`] to get `process`'s result back. If `process` panics, the panic
/// propagates out of `pop`, the change being processed is dropped (as it would be after an
/// error), and the queue is left unlocked, consistent and usable.
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

    /// Like [`pop`](Self::pop), but hands over up to `max` changes (at least one) under one
    /// acquisition of the lock, one `process` call each, in queue order; returns how many.
    ///
    /// It blocks only for the first change: it never waits for a batch to fill. A consumer that
    /// buffers work per change (the informer's notifications) can flush once per batch. The
    /// default pops one change; both of this crate's queues pop up to `max`. If `process`
    /// panics, the changes not yet handed over stay queued.
    fn pop_batch(
        &self,
        max: usize,
        process: &mut dyn FnMut(Deltas<K>, bool),
    ) -> Result<usize, QueueClosed> {
        let _ = max;
        self.pop(process).map(|()| 1)
    }

    /// Whether the first relist has been fully popped, or a write came before any relist.
    ///
    /// Once true it stays true.
    fn has_synced(&self) -> bool;

    /// Closes the queue: wakes every blocked [`pop`](Self::pop). Idempotent.
    fn close(&self);

    /// Whether [`close`](Self::close) has been called.
    fn is_closed(&self) -> bool;
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
            fn has_synced(&self) -> bool { (**self).has_synced() }
            fn close(&self) { (**self).close() }
            fn is_closed(&self) -> bool { (**self).is_closed() }
        }
    )*};
}

forward_through!(Arc<T>, &T);
