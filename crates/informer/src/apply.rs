//! What the informer loop does with each popped change: apply it to the cache, then hand it to
//! the processor as a notification (a resync, same resource version, only to the consumers due
//! one).

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::sync::atomic::Ordering;

use informer_fifo::{Delta, Deltas, Queue, ReplacedAll};
use informer_store::{Error, Identity, Indexer, SharedIdentity, Store, catch_panic};
use parking_lot::Mutex;

use crate::buffer::Notification;
use crate::health::{Counters, RefusalReason};
use crate::informer_loop::{ProcessDeltas, Sink, apply_deltas, apply_one};
use crate::processor::Processor;
use crate::registration::Upstream;
use crate::shards::ListedShards;
use crate::version::{CacheVersion, VersionOf};

/// Turns the informer loop's changes into notifications for the processor.
pub(crate) struct Distributor<K> {
    pub(crate) processor: Arc<Processor<K>>,
    pub(crate) identity: SharedIdentity<K>,
    pub(crate) name: Arc<str>,
    pub(crate) counters: Arc<Counters>,
}

impl<K: 'static> Distributor<K> {
    /// Whether an update is a resync: the same resource version on both sides. A panicking
    /// resource-version function is caught and counted, and the update is taken as a real one.
    fn is_sync(&self, old: &K, new: &K) -> bool {
        let same = catch_panic(|| {
            match (
                self.identity.resource_version(old),
                self.identity.resource_version(new),
            ) {
                (Some(a), Some(b)) => a == b,
                _ => false,
            }
        });
        same.unwrap_or_else(|panicked| {
            self.counters.panics.fetch_add(1, Ordering::Relaxed);
            tracing::error!(informer = %self.name, %panicked, "the resource-version function panicked; taking the change as an update");
            false
        })
    }
}

impl<K: Send + Sync + 'static> Sink<K> for Distributor<K> {
    fn added(&self, key: &Arc<str>, obj: &Arc<K>, is_in_initial_list: bool) {
        self.processor.distribute(
            Notification::add(Arc::clone(key), Arc::clone(obj), is_in_initial_list),
            false,
        );
    }

    fn updated(&self, key: &Arc<str>, old: &Arc<K>, new: &Arc<K>) {
        // Same version on both sides: a resync, or a relist of an unchanged object.
        let is_sync = self.is_sync(old, new);
        self.processor.distribute(
            Notification::update(Arc::clone(key), Arc::clone(old), Arc::clone(new)),
            is_sync,
        );
    }

    fn deleted(&self, key: &Arc<str>, obj: &Arc<K>, final_state_unknown: bool, prior: &Arc<K>) {
        self.processor.distribute(
            Notification::delete(
                Arc::clone(key),
                Arc::clone(obj),
                final_state_unknown,
                Arc::clone(prior),
            ),
            false,
        );
    }
}

/// The informer's pop loop: applies each change to the cache, queues its notifications, and
/// hands them to the handlers at the end of each batch.
pub(crate) struct ApplyDeltas<K> {
    pub(crate) distributor: Distributor<K>,
    pub(crate) indexer: Arc<dyn Indexer<K>>,
    pub(crate) block_deltas: Arc<Mutex<()>>,
    pub(crate) upstream: Arc<Upstream>,
    /// The cache's version: each pop's last change moves it.
    pub(crate) version: Arc<CacheVersion>,
    /// Found synced at the end of a batch: the wait for it has been woken.
    pub(crate) synced: bool,
    /// The shard set of the last list queued, published once applied, and the queue.
    pub(crate) listed: (Arc<ListedShards>, Arc<dyn Queue<K>>),
}

impl<K: Send + Sync + 'static> ApplyDeltas<K> {
    /// Moves the cache's version; a panicking resource-version function is caught and counted,
    /// and leaves the version where it was.
    fn record_version(&self, to: VersionOf<K>) {
        let identity = &*self.distributor.identity;
        if let Err(panicked) = catch_panic(|| to.record(identity, &self.version)) {
            let distributor = &self.distributor;
            distributor.counters.panics.fetch_add(1, Ordering::Relaxed);
            tracing::error!(informer = %distributor.name, %panicked, "the resource-version function panicked; the cache's version stays where it was");
        }
    }
}

impl<K: Send + Sync + 'static> ProcessDeltas<K> for ApplyDeltas<K> {
    fn process(&mut self, deltas: Deltas<K>, is_in_initial_list: bool) {
        let _block = self.block_deltas.lock();
        let counters = &self.distributor.counters;
        counters.processing.store(true, Ordering::Relaxed);
        let (key, deltas) = deltas.into_parts();
        let mut refused = Vec::new();
        // User code on this path (index functions, the resource-version function) is caught
        // where it runs; this catches whatever else panics (a custom store), so the pop loop
        // never dies and the cache never silently freezes.
        let mut moved = None;
        let outcome = catch_panic(|| {
            let deltas = deltas.inspect(|delta| {
                if let Some(to) = VersionOf::of(delta) {
                    moved = Some(to);
                }
            });
            apply_deltas(
                &self.distributor,
                &*self.indexer,
                key.as_deref(),
                deltas,
                is_in_initial_list,
                &mut refused,
            );
        });
        // A refused change moves it too: it was received, and the version it would have
        // replaced is withdrawn (SI-7).
        if let Some(to) = moved {
            self.record_version(to);
        }
        counters.processed.fetch_add(1, Ordering::Relaxed);
        counters.processing.store(false, Ordering::Relaxed);
        let name = &self.distributor.name;
        for error in &refused {
            counters.refuse(RefusalReason::of_cache(error));
            if error.is_panic() {
                counters.panics.fetch_add(1, Ordering::Relaxed);
            }
            tracing::warn!(informer = %name, key = key.as_deref().or(error.key()), %error, "the cache refused a change; its stale version was withdrawn");
        }
        if let Err(panicked) = outcome {
            counters.refuse(RefusalReason::Panic);
            counters.panics.fetch_add(1, Ordering::Relaxed);
            tracing::error!(informer = %name, key = key.as_deref(), %panicked, "applying a change panicked; it was dropped");
        }
    }

    fn begin_batch(&mut self) {
        self.listed.0.begin_batch();
    }

    fn end_batch(&mut self) {
        self.listed.0.end_batch(&*self.listed.1);
        self.distributor.processor.flush();
        if !self.synced && self.upstream.has_synced() {
            self.synced = true;
            self.upstream.notify();
        } else if self.version.take_moved() {
            self.upstream.notify();
        }
    }
}

/// Applies a relist of the whole collection (client-go's `handleReplacedAllDelta`): the
/// store's content becomes the list in one step (its `replace`, atomic under the store's
/// lock), so a reader sees the old list or the new one, never a mix. Then the sink hears, as
/// if each object had come as its own delta: a deletion (final state unknown, with the cached
/// object) for every cached key the list lacks, in the store's key order, then an update (the
/// cached or the previously listed version as the old one) or an add for every listed object,
/// in list order.
///
/// The pop loop is the store's only writer, so what is read before the swap is what it
/// replaces. A list the store refuses as a whole (an index function failing on one object) is
/// applied object by object instead, each refused object withdrawn (`refused`), the rest
/// applied. The end of a list by page deletes what no page listed, key by key (that mode
/// gives up the one step for its lower peak memory), and records the list's version.
pub(crate) fn apply_replaced_all<K, S, H>(
    sink: &H,
    store: &S,
    all: ReplacedAll<K>,
    is_in_initial_list: bool,
    refused: &mut Vec<Error>,
) where
    S: Store<K> + ?Sized,
    H: Sink<K> + ?Sized,
{
    if all.is_by_pages() {
        apply_changes(sink, store, &all, is_in_initial_list, refused);
        // The pages carried no version: the cache is at the list's from its end on.
        if let Err(err) = store.bookmark(all.resource_version()) {
            tracing::debug!(error = %err, "the cache did not record the list's version");
        }
        return;
    }
    let listed: HashSet<&str> = all.objects().iter().map(|(k, _)| k.as_str()).collect();
    let unique = listed.len() == all.objects().len();
    let deleted: Vec<(Arc<str>, Arc<K>)> = store
        .list_keys()
        .into_iter()
        .filter(|key| !listed.contains(key.as_str()))
        .filter_map(|key| store.get_by_key(&key).map(|obj| (Arc::from(key), obj)))
        .collect();
    drop(listed);
    let olds: Vec<Option<Arc<K>>> = all
        .objects()
        .iter()
        .map(|(key, _)| store.get_by_key(key))
        .collect();
    let list: Vec<Arc<K>> = all.objects().iter().map(|(_, o)| Arc::clone(o)).collect();
    if store
        .replace(list, all.resource_version().to_owned())
        .is_err()
    {
        return apply_changes(sink, store, &all, is_in_initial_list, refused);
    }
    for (key, prior) in &deleted {
        sink.deleted(key, prior, true, prior);
    }
    // A key listed twice: its second object replaces its first (the store kept the last).
    let mut earlier: HashMap<&str, &Arc<K>> = HashMap::new();
    for ((key, obj), old) in all.objects().iter().zip(&olds) {
        let old = match unique {
            true => old.as_ref(),
            false => earlier.insert(key.as_str(), obj).or(old.as_ref()),
        };
        let key: Arc<str> = Arc::from(key.as_str());
        match old {
            Some(old) => sink.updated(&key, old, obj),
            None => sink.added(&key, obj, is_in_initial_list),
        }
    }
}

/// Applies a whole-collection change as the per-object deltas it stands for, one at a time.
fn apply_changes<K, S, H>(
    sink: &H,
    store: &S,
    all: &ReplacedAll<K>,
    is_in_initial_list: bool,
    refused: &mut Vec<Error>,
) where
    S: Store<K> + ?Sized,
    H: Sink<K> + ?Sized,
{
    for (key, delta) in all.changes(store) {
        let key: Arc<str> = Arc::from(key);
        apply_one(sink, store, Some(&key), delta, is_in_initial_list, refused);
    }
}

/// Applies a resync of the whole cache (client-go's `SyncAll`): an update of every cached
/// object to itself.
pub(crate) fn apply_sync_all<K, S, H>(sink: &H, store: &S)
where
    S: Store<K> + ?Sized,
    H: Sink<K> + ?Sized,
{
    for (key, delta) in informer_fifo::sync_all_changes(store) {
        if let Delta::Sync(obj) = delta {
            sink.updated(&Arc::from(key), &obj, &obj);
        }
    }
}
