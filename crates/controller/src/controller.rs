//! [`Controller`]: a reflector feeding a queue, and a pop loop applying what comes out.

use std::fmt;
use std::sync::Arc;

use informer_fifo::{Delta, Deltas, Queue, QueueClosed};
use informer_reflector::{ListerWatcher, Reflector};
use informer_store::{Result, Store};
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
/// A delta the store refuses (an index function failing on the object) is skipped: the cache
/// keeps what it had for that key, the handler is not told, and the later deltas of the same
/// key are still applied, so one bad version never hides the good ones after it. The first
/// such error is returned once every delta has been tried; the handler has heard of exactly
/// the deltas that were applied.
///
/// When the deltas carry their key ([`Deltas::key`], set by this stack's queues), the store is
/// written by that key and the key function does not run again: the queue and the store must
/// use the same key function — as they must anyway, since the queue reads the store back by key.
pub fn process_deltas<K, S, H>(
    handler: &H,
    store: &S,
    deltas: Deltas<K>,
    is_in_initial_list: bool,
) -> Result<()>
where
    S: Store<K> + ?Sized,
    H: ResourceEventHandler<K> + ?Sized,
{
    let (key, deltas) = deltas.into_parts();
    let mut first_error = None;
    for delta in deltas {
        if let Err(e) = apply_delta(handler, store, key.as_deref(), delta, is_in_initial_list) {
            first_error.get_or_insert(e);
        }
    }
    first_error.map_or(Ok(()), Err)
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
    /// key. On stop the queue is closed, the pop loop drains it and ends, and this returns once
    /// its thread has been joined.
    pub async fn run<P>(&self, stop: CancellationToken, process: P) -> std::io::Result<()>
    where
        P: ProcessDeltas<K>,
    {
        let pop = spawn_pop_loop(Arc::clone(&self.queue), process)?;
        self.reflector.run(stop).await;
        self.queue.close();
        pop.join().await;
        Ok(())
    }
}

fn spawn_pop_loop<K, Q, P>(queue: Arc<Q>, mut process: P) -> std::io::Result<Joinable>
where
    K: Send + Sync + 'static,
    Q: Queue<K> + ?Sized + 'static,
    P: ProcessDeltas<K>,
{
    Joinable::spawn("informer-pop".to_owned(), move || {
        while queue.pop_batch(POP_BATCH, &mut |deltas, initial| {
            process.process(deltas, initial)
        }) != Err(QueueClosed)
        {
            process.end_batch();
        }
    })
}
