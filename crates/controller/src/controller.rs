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
    let mut first_error = None;
    for delta in deltas {
        if let Err(e) = apply_delta(handler, store, delta, is_in_initial_list) {
            first_error.get_or_insert(e);
        }
    }
    first_error.map_or(Ok(()), Err)
}

fn apply_delta<K, S, H>(
    handler: &H,
    store: &S,
    delta: Delta<K>,
    is_in_initial_list: bool,
) -> Result<()>
where
    S: Store<K> + ?Sized,
    H: ResourceEventHandler<K> + ?Sized,
{
    match delta {
        Delta::Sync(obj) | Delta::Replaced(obj) | Delta::Added(obj) | Delta::Updated(obj) => {
            match store.upsert(Arc::clone(&obj))? {
                Some(old) => handler.on_update(&old, &obj),
                None => handler.on_add(&obj, is_in_initial_list),
            }
        }
        Delta::Deleted(deleted) => {
            match deleted.tombstone() {
                Some(tombstone) => {
                    store.delete_by_key(&tombstone.key)?;
                }
                None => {
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
    /// thread calling `process` for every popped key. On stop the queue is closed, the pop loop
    /// drains it and ends, and this returns once its thread has been joined.
    pub async fn run<P>(&self, stop: CancellationToken, process: P) -> std::io::Result<()>
    where
        P: FnMut(Deltas<K>, bool) + Send + 'static,
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
    P: FnMut(Deltas<K>, bool) + Send + 'static,
{
    Joinable::spawn("informer-pop".to_owned(), move || {
        while queue.pop(&mut process) != Err(QueueClosed) {}
    })
}
