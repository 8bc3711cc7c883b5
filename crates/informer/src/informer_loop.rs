//! [`InformerLoop`]: a reflector feeding a queue, and a pop loop applying what comes out.

use std::fmt;
use std::marker::PhantomData;
use std::sync::Arc;

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::atomic::{AtomicBool, Ordering};

use parking_lot::Mutex;
use tokio::sync::watch;

use informer_fifo::{DeletedObject, Delta, Deltas, Queue, QueueClosed};
use informer_reflector::{ListerWatcher, Reflector};
use informer_store::{Error, Result, Store};
use tokio_util::sync::CancellationToken;

use crate::handler::ResourceEventHandler;
use crate::pool::{DeliveryPool, Job, JobToken, Slot, Turn};

/// Applies one key's deltas, oldest first, to `store`, then tells `handler` (client-go's
/// `processDeltas`), with the object's key. The store is always updated before the handler
/// hears of the change.
///
/// * Sync, Replaced, Added, Updated: if the key is cached, update it and call
///   `on_update(key, old, new)`; otherwise add it and call `on_add(key, new, is_in_initial_list)`.
/// * Deleted: remove the key (a tombstone is applied by its key) and call
///   `on_delete(key, last_known, final_state_unknown)`: the final state the watch reported, or
///   for a tombstone the version that was cached. A deletion of a key the store did not hold is
///   not passed on: there was nothing to delete.
/// * ReplacedAll (a relist from an atomic in-order queue): the store's content is replaced
///   with the list in one step ([`ReflectorStore::replace`](informer_store::ReflectorStore::replace)),
///   so its readers see the old list or the new one, never a mix; then `on_delete(key, cached,
///   true)` for every cached key the list lacks, and `on_update`/`on_add` for every listed
///   object in list order, as if each had come as a Replaced delta. The end of a relist by page
///   deletes what no page listed, one key at a time.
/// * SyncAll (a resync from an atomic in-order queue): `on_update(key, obj, obj)` for every
///   cached object.
///
/// A version the store refuses (an index function failing or panicking on it) is never left
/// behind as a stale current one: the key's cached version, which that version superseded, is
/// removed and the handler hears `on_delete` with it (final state unknown). The next version
/// the store accepts adds the object back. Later deltas of the same key are still applied.
/// Returns the store's error for every refused delta (empty when all applied); the handler has
/// heard of exactly what the cache did.
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
        &HandlerSink(handler),
        store,
        key.as_deref(),
        deltas,
        is_in_initial_list,
        &mut refused,
    );
    refused
}

/// Where [`apply_deltas`] reports what the cache did.
pub(crate) trait Sink<K> {
    fn added(&self, key: &Arc<str>, obj: &Arc<K>, is_in_initial_list: bool);
    fn updated(&self, key: &Arc<str>, old: &Arc<K>, new: &Arc<K>);
    /// `prior` is the version the cache held; `obj` the last known state handed on.
    fn deleted(&self, key: &Arc<str>, obj: &Arc<K>, final_state_unknown: bool, prior: &Arc<K>);
}

/// A [`ResourceEventHandler`] as a [`Sink`].
struct HandlerSink<'a, H: ?Sized>(&'a H);

impl<K, H: ResourceEventHandler<K> + ?Sized> Sink<K> for HandlerSink<'_, H> {
    fn added(&self, key: &Arc<str>, obj: &Arc<K>, is_in_initial_list: bool) {
        self.0.on_add(key, obj, is_in_initial_list);
    }

    fn updated(&self, key: &Arc<str>, old: &Arc<K>, new: &Arc<K>) {
        self.0.on_update(key, old, new);
    }

    fn deleted(&self, key: &Arc<str>, obj: &Arc<K>, final_state_unknown: bool, _prior: &Arc<K>) {
        self.0.on_delete(key, obj, final_state_unknown);
    }
}

/// [`process_deltas`] on a key and deltas taken apart, pushing refusals onto `refused`.
pub(crate) fn apply_deltas<K, S, H>(
    sink: &H,
    store: &S,
    key: Option<&str>,
    deltas: impl Iterator<Item = Delta<K>>,
    is_in_initial_list: bool,
    refused: &mut Vec<Error>,
) where
    S: Store<K> + ?Sized,
    H: Sink<K> + ?Sized,
{
    let key: Option<Arc<str>> = key.map(Arc::from);
    for delta in deltas {
        apply_one(
            sink,
            store,
            key.as_ref(),
            delta,
            is_in_initial_list,
            refused,
        );
    }
}

/// Applies one delta of `key` (or of the whole collection), pushing refusals onto `refused`: a
/// refused version of one key is withdrawn.
pub(crate) fn apply_one<K, S, H>(
    sink: &H,
    store: &S,
    key: Option<&Arc<str>>,
    delta: Delta<K>,
    is_in_initial_list: bool,
    refused: &mut Vec<Error>,
) where
    S: Store<K> + ?Sized,
    H: Sink<K> + ?Sized,
{
    match delta {
        Delta::ReplacedAll(all) => {
            crate::apply::apply_replaced_all(sink, store, *all, is_in_initial_list, refused);
        }
        Delta::SyncAll => crate::apply::apply_sync_all(sink, store),
        delta => {
            if let Err(e) = apply_delta(sink, store, key, delta, is_in_initial_list) {
                withdraw(sink, store, key.map(|k| &**k).or(e.key()), &e);
                refused.push(e);
            }
        }
    }
}

/// A version of `key` was refused: remove the version it superseded and tell the handler.
fn withdraw<K, S, H>(sink: &H, store: &S, key: Option<&str>, error: &Error)
where
    S: Store<K> + ?Sized,
    H: Sink<K> + ?Sized,
{
    let Some(key) = key else {
        // A key function failure: nothing tells which entry the object had.
        return;
    };
    match store.delete_by_key(key) {
        Ok(Some(stale)) => sink.deleted(&Arc::from(key), &stale, true, &stale),
        Ok(None) => {}
        Err(e) => {
            tracing::error!(key, error = %e, refused = %error, "could not withdraw a stale version");
        }
    }
}

fn apply_delta<K, S, H>(
    sink: &H,
    store: &S,
    key: Option<&Arc<str>>,
    delta: Delta<K>,
    is_in_initial_list: bool,
) -> Result<()>
where
    S: Store<K> + ?Sized,
    H: Sink<K> + ?Sized,
{
    match delta {
        Delta::Sync(obj) | Delta::Replaced(obj) | Delta::Added(obj) | Delta::Updated(obj) => {
            let key = match key {
                Some(key) => Arc::clone(key),
                None => Arc::from(store.key_of(&obj)?),
            };
            match store.upsert_with_key(&key, Arc::clone(&obj))? {
                Some(old) => sink.updated(&key, &old, &obj),
                None => sink.added(&key, &obj, is_in_initial_list),
            }
        }
        // Dispatched by `apply_one` before they get here: nothing of one key to apply.
        Delta::ReplacedAll(_) | Delta::SyncAll => {}
        Delta::Deleted(deleted) => {
            let key: Arc<str> = match (deleted.tombstone(), key, deleted.object()) {
                (Some(tombstone), _, _) => Arc::from(tombstone.key.as_str()),
                (None, Some(key), _) => Arc::clone(key),
                (None, None, Some(obj)) => Arc::from(store.key_of(obj)?),
                (None, None, None) => return Ok(()),
            };
            let Some(prior) = store.delete_by_key(&key)? else {
                // Not cached: nothing to delete, nothing to tell.
                return Ok(());
            };
            match &deleted {
                DeletedObject::Object(obj) => sink.deleted(&key, obj, false, &prior),
                DeletedObject::Tombstone(_) => sink.deleted(&key, &prior, true, &prior),
            }
        }
    }
    Ok(())
}

/// How many changes the pop loop takes off the queue under one acquisition of its lock (as
/// client-go's `RealFIFO` batch size). A change of the whole collection counts as one.
pub const POP_BATCH: usize = 1000;

/// What an informer loop's pop does with the changes it pops.
///
/// Any `FnMut(Deltas<K>, bool)` closure is one (it ignores batch ends).
pub trait ProcessDeltas<K>: Send + 'static {
    /// Handles one key's deltas. Runs on the loop's [`DeliveryPool`], with the queue's
    /// lock released (see [`Queue::pop`]): the reflector goes on writing meanwhile.
    fn process(&mut self, deltas: Deltas<K>, is_in_initial_list: bool);

    /// Called before each round of pops, before anything is taken off the queue. The default
    /// does nothing.
    fn begin_batch(&mut self) {}

    /// Called after each round of up to [`POP_BATCH`] pops, even one that popped nothing (the
    /// queue's ready hook woke the loop for a write that queued nothing, such as an empty
    /// list that made the queue synced): where buffered work is flushed and a sync noticed.
    /// The default does nothing.
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

/// A reflector feeding a queue, and a pop loop handing what comes out to a process function
/// (client-go's `controller`). The pop loop is a job on a [`DeliveryPool`] (the process-wide
/// one unless [`with_pool`](Self::with_pool) gives another), woken by the queue's writes: no
/// thread of its own, none blocked on an empty queue.
///
/// The loop knows its queue only as a [`Queue`] and its source only as a
/// [`ListerWatcher`]: any implementation of either fits.
pub struct InformerLoop<K, L, Q: ?Sized> {
    queue: Arc<Q>,
    reflector: Arc<Reflector<K, L, Arc<Q>>>,
    /// `None`: the process-wide pool, started when the loop first runs.
    pool: Option<Arc<DeliveryPool>>,
}

impl<K, L, Q: ?Sized> fmt::Debug for InformerLoop<K, L, Q> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("InformerLoop")
            .field("reflector", &self.reflector)
            .finish_non_exhaustive()
    }
}

impl<K, L, Q> InformerLoop<K, L, Q>
where
    K: Send + Sync + 'static,
    L: ListerWatcher<K> + 'static,
    Q: Queue<K> + ?Sized + 'static,
{
    /// A loop over `reflector`, which must write into `queue`.
    pub fn new(queue: Arc<Q>, reflector: Reflector<K, L, Arc<Q>>) -> Self {
        Self {
            queue,
            reflector: Arc::new(reflector),
            pool: None,
        }
    }

    /// The same loop, popping on `pool`.
    pub fn with_pool(mut self, pool: Arc<DeliveryPool>) -> Self {
        self.pool = Some(pool);
        self
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

    /// Runs until `stop` is cancelled: the reflector on this task, the pop loop as a job on
    /// the pool, popping in batches ([`Queue::try_pop_batch`]) whenever the queue has changes
    /// and calling `process` for every popped key.
    ///
    /// On stop the queue is closed and the pop loop ends after the change it is processing:
    /// what is still queued is dropped unprocessed, so stopping takes no longer with a long
    /// queue. This returns once the pop loop has ended.
    ///
    /// If `process` panics, the pop loop ends, the reflector is stopped, and the panic is
    /// resumed out of this call at once (as client-go's controller crashes): a loop never
    /// goes on listing into a queue nobody pops.
    ///
    /// Dropping the future (a `select!`, a timeout, an aborted task, a runtime shut down) does
    /// the same clean-up without waiting: the queue is closed and the pop loop ends by itself.
    pub async fn run<P>(&self, stop: CancellationToken, process: P)
    where
        P: ProcessDeltas<K>,
    {
        let pool = Arc::clone(self.pool.as_ref().unwrap_or_else(|| DeliveryPool::global()));
        let stopping = Arc::new(AtomicBool::new(false));
        let (finished, mut ended) = watch::channel(false);
        let pop = Arc::new(PopJob {
            slot: Slot::new(),
            queue: Arc::clone(&self.queue),
            process: Mutex::new(process),
            stopping: Arc::clone(&stopping),
            finished,
            panic: Mutex::new(None),
            _alive: pool.track(),
            _object: PhantomData,
        });
        let job: Arc<dyn Job> = pop.clone();
        let weak = Arc::downgrade(&job);
        // Weak handles only: a queue that outlives the run keeps neither alive.
        let hook_pool = Arc::downgrade(&pool);
        self.queue.set_ready_hook(Arc::new(move || {
            if let (Some(job), Some(pool)) = (weak.upgrade(), hook_pool.upgrade()) {
                pool.schedule(&job);
            }
        }));
        // Whatever was queued before the hook was in place.
        pool.schedule(&job);
        let guard = StopOnDrop {
            queue: &*self.queue,
            stopping,
            _object: PhantomData,
        };
        tokio::select! {
            () = self.reflector.run(stop) => {}
            // The pop loop only ends by itself when `process` panicked.
            _ = ended.wait_for(|done| *done) => {}
        }
        drop(guard);
        // The sender lives in `pop`, which this holds: the wait ends when the job does.
        let _ = ended.wait_for(|done| *done).await;
        let panic = pop.panic.lock().take();
        if let Some(panic) = panic {
            std::panic::resume_unwind(panic);
        }
    }
}

/// The pop loop, as a job on the pool: each turn pops one batch.
struct PopJob<K, Q: ?Sized, P> {
    slot: Slot,
    queue: Arc<Q>,
    process: Mutex<P>,
    stopping: Arc<AtomicBool>,
    /// Set once the job is done.
    finished: watch::Sender<bool>,
    /// What `process` panicked with, to resume out of `run`.
    panic: Mutex<Option<Box<dyn std::any::Any + Send>>>,
    _alive: JobToken,
    _object: PhantomData<fn(K)>,
}

impl<K, Q: ?Sized, P> PopJob<K, Q, P> {
    fn finish(&self) -> Turn {
        self.finished.send_replace(true);
        Turn::Done
    }
}

impl<K, Q, P> Job for PopJob<K, Q, P>
where
    K: Send + Sync + 'static,
    Q: Queue<K> + ?Sized + 'static,
    P: ProcessDeltas<K>,
{
    fn run(&self) -> Turn {
        if self.stopping.load(Ordering::Acquire) {
            return self.finish();
        }
        let mut process = self.process.lock();
        let stopping = &self.stopping;
        let popped = catch_unwind(AssertUnwindSafe(|| {
            process.begin_batch();
            let popped = self.queue.try_pop_batch(POP_BATCH, &mut |deltas, initial| {
                // Once stopping, what is popped is dropped: nobody will read the cache.
                if !stopping.load(Ordering::Acquire) {
                    process.process(deltas, initial);
                }
            });
            // After every round, even one that popped nothing: a write that made the queue
            // synced without queueing anything (an empty first list) is seen there.
            process.end_batch();
            popped
        }));
        match popped {
            Ok(Ok(n)) if n >= POP_BATCH => Turn::More,
            Ok(Ok(_)) => Turn::Idle,
            Ok(Err(QueueClosed)) => self.finish(),
            Err(panic) => {
                *self.panic.lock() = Some(panic);
                self.finish()
            }
        }
    }

    fn slot(&self) -> &Slot {
        &self.slot
    }

    fn panicked(&self, message: &str) {
        tracing::error!(panic = message, "the pop loop panicked");
        self.finished.send_replace(true);
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
        // Closing calls the ready hook: the pop job runs, sees the stop and ends.
        self.queue.close();
    }
}
