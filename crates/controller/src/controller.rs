//! [`Controller`]: a reflector feeding a queue, and a pop loop applying what comes out.

use std::fmt;
use std::marker::PhantomData;
use std::sync::Arc;

use std::sync::atomic::{AtomicBool, Ordering};

use informer_fifo::{DeletedFinalStateUnknown, DeletedObject, Delta, Deltas, Queue, QueueClosed};
use informer_reflector::{ListerWatcher, Reflector};
use informer_store::{Error, Result, Store};
use tokio_util::sync::CancellationToken;

use crate::handler::ResourceEventHandler;
use crate::thread::Joinable;

/// Applies one key's deltas, oldest first, to `store`, then tells `handler` (client-go's
/// `processDeltas`). The store is always updated before the handler hears of the change.
///
/// * Sync, Replaced, Added, Updated: if the key is cached, update it and call
///   `on_update(old, new)`; otherwise add it and call `on_add(new, is_in_initial_list)`.
/// * Deleted: remove the key (a tombstone is applied by its key) and call `on_delete`.
///
/// A version the store refuses (an index function failing or panicking on it) is never left
/// behind as a stale current one: the key's cached version, which that version superseded, is
/// removed and the handler hears `on_delete` with a tombstone carrying it. The next version the
/// store accepts adds the object back. Later deltas of the same key are still applied. Returns
/// the store's error for every refused delta (empty when all applied); the handler has heard
/// of exactly what the cache did.
///
/// When the deltas carry their key ([`Deltas::key`], set by this stack's queues), the store is
/// written by that key and the key function does not run again: the queue and the store must
/// use the same key function — as they must anyway, since the queue reads the store back by key.
#[must_use = "the refused deltas are returned, to be counted and logged"]
pub fn process_deltas<K, S, H>(
    handler: &H,
    store: &S,
    deltas: Deltas<K>,
    is_in_initial_list: bool,
) -> Vec<Error>
where
    S: Store<K> + ?Sized,
    H: ResourceEventHandler<K> + ?Sized,
{
    let (key, deltas) = deltas.into_parts();
    let mut refused = Vec::new();
    apply_deltas(
        handler,
        store,
        key.as_deref(),
        deltas,
        is_in_initial_list,
        &mut refused,
    );
    refused
}

/// [`process_deltas`] on a key and deltas taken apart, pushing refusals onto `refused`.
pub(crate) fn apply_deltas<K, S, H>(
    handler: &H,
    store: &S,
    key: Option<&str>,
    deltas: impl Iterator<Item = Delta<K>>,
    is_in_initial_list: bool,
    refused: &mut Vec<Error>,
) where
    S: Store<K> + ?Sized,
    H: ResourceEventHandler<K> + ?Sized,
{
    for delta in deltas {
        if let Err(e) = apply_delta(handler, store, key, delta, is_in_initial_list) {
            withdraw(handler, store, key.or(e.key()), &e);
            refused.push(e);
        }
    }
}

/// A version of `key` was refused: remove the version it superseded and tell the handler.
fn withdraw<K, S, H>(handler: &H, store: &S, key: Option<&str>, error: &Error)
where
    S: Store<K> + ?Sized,
    H: ResourceEventHandler<K> + ?Sized,
{
    let Some(key) = key else {
        // A key function failure: nothing tells which entry the object had.
        return;
    };
    match store.delete_by_key(key) {
        Ok(Some(stale)) => handler.on_delete(DeletedObject::Tombstone(Box::new(
            DeletedFinalStateUnknown {
                key: key.to_owned(),
                obj: Some(stale),
            },
        ))),
        Ok(None) => {}
        Err(e) => {
            tracing::error!(key, error = %e, refused = %error, "could not withdraw a stale version");
        }
    }
}

fn apply_delta<K, S, H>(
    handler: &H,
    store: &S,
    key: Option<&str>,
    delta: Delta<K>,
    is_in_initial_list: bool,
) -> Result<()>
where
    S: Store<K> + ?Sized,
    H: ResourceEventHandler<K> + ?Sized,
{
    match delta {
        Delta::Sync(obj) | Delta::Replaced(obj) | Delta::Added(obj) | Delta::Updated(obj) => {
            let old = match key {
                Some(key) => store.upsert_with_key(key, Arc::clone(&obj))?,
                None => store.upsert(Arc::clone(&obj))?,
            };
            match old {
                Some(old) => handler.on_update(&old, &obj),
                None => handler.on_add(&obj, is_in_initial_list),
            }
        }
        Delta::Deleted(deleted) => {
            match (deleted.tombstone(), key) {
                (Some(tombstone), _) => {
                    store.delete_by_key(&tombstone.key)?;
                }
                (None, Some(key)) => {
                    store.delete_by_key(key)?;
                }
                (None, None) => {
                    if let Some(obj) = deleted.object() {
                        store.delete(Arc::clone(obj))?;
                    }
                }
            }
            handler.on_delete(deleted);
        }
    }
    Ok(())
}

/// How many changes the pop loop takes off the queue under one acquisition of its lock.
pub const POP_BATCH: usize = 64;

/// What a controller's pop loop does with the changes it pops.
///
/// Any `FnMut(Deltas<K>, bool)` closure is one (it ignores batch ends).
pub trait ProcessDeltas<K>: Send + 'static {
    /// Handles one key's deltas; runs with the queue's lock held (see [`Queue::pop`]).
    fn process(&mut self, deltas: Deltas<K>, is_in_initial_list: bool);

    /// Called after each batch of up to [`POP_BATCH`] pops, with the queue's lock released,
    /// before the loop waits for more: where buffered work is flushed. The default does nothing.
    fn end_batch(&mut self) {}
}

impl<K, F> ProcessDeltas<K> for F
where
    F: FnMut(Deltas<K>, bool) + Send + 'static,
{
    fn process(&mut self, deltas: Deltas<K>, is_in_initial_list: bool) {
        self(deltas, is_in_initial_list);
    }
}

/// A reflector feeding a queue, and a pop loop (on its own thread) handing what comes out to a
/// process function (client-go's `controller`).
///
/// The controller knows its queue only as a [`Queue`] and its source only as a
/// [`ListerWatcher`]: any implementation of either fits.
pub struct Controller<K, L, Q: ?Sized> {
    queue: Arc<Q>,
    reflector: Arc<Reflector<K, L, Arc<Q>>>,
}

impl<K, L, Q: ?Sized> fmt::Debug for Controller<K, L, Q> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Controller")
            .field("reflector", &self.reflector)
            .finish_non_exhaustive()
    }
}

impl<K, L, Q> Controller<K, L, Q>
where
    K: Send + Sync + 'static,
    L: ListerWatcher<K> + 'static,
    Q: Queue<K> + ?Sized + 'static,
{
    /// A controller over `reflector`, which must write into `queue`.
    pub fn new(queue: Arc<Q>, reflector: Reflector<K, L, Arc<Q>>) -> Self {
        Self {
            queue,
            reflector: Arc::new(reflector),
        }
    }

    /// The queue.
    pub fn queue(&self) -> &Arc<Q> {
        &self.queue
    }

    /// The reflector.
    pub fn reflector(&self) -> &Arc<Reflector<K, L, Arc<Q>>> {
        &self.reflector
    }

    /// Whether the queue has delivered the whole first list (see [`Queue::has_synced`]).
    pub fn has_synced(&self) -> bool {
        self.queue.has_synced()
    }

    /// The resource version the reflector last synced to (`""` before the first list).
    pub fn last_sync_resource_version(&self) -> String {
        self.reflector.last_sync_resource_version()
    }

    /// Runs until `stop` is cancelled: the reflector on this task, the pop loop on its own
    /// thread popping in batches ([`Queue::pop_batch`]) and calling `process` for every popped
    /// key.
    ///
    /// On stop the queue is closed and the pop loop ends after the change it is processing:
    /// what is still queued is dropped unprocessed, so stopping takes no longer with a long
    /// queue. This returns once the pop thread has been joined.
    ///
    /// If `process` panics, the pop loop ends, the reflector is stopped, and the panic is
    /// resumed out of this call at once (as client-go's controller crashes): a controller never
    /// goes on listing into a queue nobody pops.
    ///
    /// Dropping the future (a `select!`, a timeout, an aborted task, a runtime shut down) does
    /// the same clean-up without waiting: the queue is closed and the pop thread ends by
    /// itself.
    pub async fn run<P>(&self, stop: CancellationToken, process: P) -> std::io::Result<()>
    where
        P: ProcessDeltas<K>,
    {
        let stopping = Arc::new(AtomicBool::new(false));
        let mut pop = spawn_pop_loop(
            format!("informer-pop {}", self.reflector.name()),
            Arc::clone(&self.queue),
            process,
            Arc::clone(&stopping),
        )?;
        let guard = StopOnDrop {
            queue: &*self.queue,
            stopping,
            _object: PhantomData,
        };
        tokio::select! {
            () = self.reflector.run(stop) => {}
            // The pop loop only ends by itself when `process` panicked.
            () = pop.finished() => {}
        }
        drop(guard);
        pop.join().await;
        Ok(())
    }
}

/// Closes the queue and tells the pop loop to stop, when a run ends however it ends.
struct StopOnDrop<'a, K, Q: Queue<K> + ?Sized> {
    queue: &'a Q,
    stopping: Arc<AtomicBool>,
    _object: PhantomData<fn(K)>,
}

impl<K, Q: Queue<K> + ?Sized> Drop for StopOnDrop<'_, K, Q> {
    fn drop(&mut self) {
        self.stopping.store(true, Ordering::Release);
        // Closing wakes a pop blocked on an empty queue.
        self.queue.close();
    }
}

fn spawn_pop_loop<K, Q, P>(
    name: String,
    queue: Arc<Q>,
    mut process: P,
    stopping: Arc<AtomicBool>,
) -> std::io::Result<Joinable>
where
    K: Send + Sync + 'static,
    Q: Queue<K> + ?Sized + 'static,
    P: ProcessDeltas<K>,
{
    Joinable::spawn(name, move || {
        while !stopping.load(Ordering::Acquire) {
            let popped = queue.pop_batch(POP_BATCH, &mut |deltas, initial| {
                // Once stopping, what is popped is dropped: nobody will read the cache.
                if !stopping.load(Ordering::Acquire) {
                    process.process(deltas, initial);
                }
            });
            if popped == Err(QueueClosed) {
                break;
            }
            process.end_batch();
        }
    })
}
