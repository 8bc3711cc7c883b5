//! What the informers tell a controller: the handlers that turn changes into queued keys (at a
//! priority that tells real changes from the initial list and resyncs), and their
//! registrations.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use informer::{
    HandlerOptions, HandlerRegistration, InformerError, ResourceEventHandler, ShardBy,
    SharedIndexInformer,
};
use informer_store::{SharedIdentity, catch_panic};
use informer_workqueue::{LOW_PRIORITY, WorkQueue};
use parking_lot::{Mutex, RwLock};

use crate::Expectations;
use crate::deleted::Deleted;
use crate::shards::{Arrivals, Placement, ShardSlot};

/// Queues a key at a priority; sharded, with the shard of the object that woke it.
type Keys = Arc<dyn Fn(&str, i32, Option<&Placement>) + Send + Sync>;

/// A change of an informer's object, as far as its key's priority goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Change {
    /// An object appeared: in the initial list (or the snapshot a late handler gets), or new.
    Added { initial: bool },
    /// An object was updated: `unchanged` for a resync or an unchanged object relisted (the
    /// same object, or the same resource version, on both sides).
    Updated { unchanged: bool },
    /// An object went away.
    Deleted,
}

/// The priority a change queues its key at (controller-runtime's): what the initial list and
/// resyncs bring at [`LOW_PRIORITY`], behind every real change, at 0. A priority queue hands
/// out the higher first; a first-in-first-out queue ignores it.
pub(crate) fn priority(change: Change) -> i32 {
    match change {
        Change::Added { initial: true } | Change::Updated { unchanged: true } => LOW_PRIORITY,
        Change::Added { initial: false } | Change::Updated { unchanged: false } => 0,
        Change::Deleted => 0,
    }
}

/// The change an update of `old` to `new` is: unchanged if they are the same object (a
/// resync) or at the same resource version (an unchanged object relisted). A panicking
/// resource-version function makes it a real change (the informer counts and logs it).
fn updated<K: 'static>(identity: &SharedIdentity<K>, old: &Arc<K>, new: &Arc<K>) -> Change {
    let unchanged = Arc::ptr_eq(old, new)
        || catch_panic(|| {
            matches!(
                (identity.resource_version(old), identity.resource_version(new)),
                (Some(a), Some(b)) if a == b
            )
        })
        .unwrap_or(false);
    Change::Updated { unchanged }
}

/// Decides whether an update of a main object (old, new) is worth a reconcile.
pub(crate) type UpdatePredicate<K> = Arc<dyn Fn(&K, &K) -> bool + Send + Sync>;

/// A controller's registration on one of its informers, for the sync wait; dropping it
/// removes the handler from the informer (on stop, on a failed start, or with a controller
/// that never ran).
pub(crate) struct Watched {
    pub(crate) registration: HandlerRegistration,
    pub(crate) remove: Box<dyn Fn() + Send + Sync>,
}

impl Watched {
    /// Registers `handler` on `informer`, remembering how to remove it.
    pub(crate) fn register<C: Send + Sync + 'static>(
        informer: &Arc<SharedIndexInformer<C>>,
        handler: impl ResourceEventHandler<C> + 'static,
    ) -> Result<Self, InformerError> {
        let registration = informer.add_event_handler(handler, HandlerOptions::new())?;
        let (informer, handle) = (Arc::clone(informer), registration.clone());
        Ok(Self {
            registration,
            remove: Box::new(move || {
                let _ = informer.remove_event_handler(&handle);
            }),
        })
    }
}

impl Drop for Watched {
    fn drop(&mut self) {
        (self.remove)();
    }
}

/// Queues the key of every change of the main informer's objects while reconciling, and
/// keeps the last known state of the deleted ones for their reconcile.
pub(crate) struct MainHandler<K> {
    pub(crate) queue: WorkQueue<Arc<str>>,
    /// The main informer's: tells a resync from a change.
    pub(crate) identity: SharedIdentity<K>,
    /// Which updates are queued (all without one).
    pub(crate) predicate: Arc<RwLock<Option<UpdatePredicate<K>>>>,
    pub(crate) deleted: Arc<Mutex<Deleted<K>>>,
    pub(crate) reconciling: Arc<AtomicBool>,
    /// The expectations of `owns_expecting`: a deleted object's are dropped with it.
    pub(crate) expectations: Arc<Mutex<Vec<Expectations>>>,
    /// Sharded: only the changes of objects in the shards held are queued.
    pub(crate) sharding: ShardSlot,
    /// Sharded: which adds are a shard's objects arriving.
    pub(crate) arrivals: Arc<Arrivals>,
}

impl<K: Send + Sync + 'static> MainHandler<K> {
    /// Whether a change of `obj` is this controller's to queue: always unsharded; sharded,
    /// when its shard's term has begun (before, the term's beginning queues what is cached).
    fn in_served_shard(&self, obj: &K) -> bool {
        match &*self.sharding.read() {
            None => true,
            Some(sharded) => sharded.serves_object(&self.identity, obj),
        }
    }

    /// Whether an add of `obj` is this controller's to queue: always unsharded; sharded, when
    /// its shard's term has begun and `obj` was not in the cache yet when it began (the
    /// beginning queued what the cache held; this add's notification came after). The shard
    /// is computed once.
    fn queues_add(&self, obj: &K) -> bool {
        match &*self.sharding.read() {
            None => true,
            Some(sharded) => {
                let shard = sharded.shard_of(&self.identity, obj);
                sharded.serves_shard(shard)
                    && !self
                        .arrivals
                        .queued_at_begin(shard, self.identity.resource_version(obj))
            }
        }
    }

    /// Whether a deletion of `obj` is this controller's to remember: always unsharded;
    /// sharded, when its shard's term is held, begun or not (a term's beginning queues the
    /// shard's remembered deletions).
    fn in_held_shard(&self, obj: &K) -> bool {
        match &*self.sharding.read() {
            None => true,
            Some(sharded) => sharded.holds_object(&self.identity, obj),
        }
    }
}

impl<K: Send + Sync + 'static> ResourceEventHandler<K> for MainHandler<K> {
    fn on_add(&self, key: &str, obj: &Arc<K>, initial: bool) {
        self.deleted.lock().recreated(key);
        if self.reconciling.load(Ordering::Acquire) && self.queues_add(obj) {
            let arrival = (!initial)
                .then(|| self.arrivals.priority(self.identity.resource_version(obj)))
                .flatten();
            let priority = arrival.unwrap_or(priority(Change::Added { initial }));
            self.queue.add_probed(key, priority, || Arc::from(key));
        }
    }

    fn on_update(&self, key: &str, old: &Arc<K>, new: &Arc<K>) {
        if let Some(predicate) = &*self.predicate.read()
            && !predicate(old, new)
        {
            return;
        }
        if self.reconciling.load(Ordering::Acquire) && self.in_served_shard(new) {
            let priority = priority(updated(&self.identity, old, new));
            // Most updates find their key waiting already: no allocation for those.
            self.queue.add_probed(key, priority, || Arc::from(key));
        }
    }

    fn on_delete(&self, key: &str, obj: &Arc<K>, _final_state_unknown: bool) {
        for e in self.expectations.lock().iter() {
            e.forget(key);
        }
        if !self.in_held_shard(obj) {
            // Sharded, out of the shards held: the object left the cache with its shard (the
            // relist of a smaller shard set), or went in a shard this replica no longer owns.
            // Not a deletion to reconcile here.
            return;
        }
        let key: Arc<str> = Arc::from(key);
        let reconciling = self.reconciling.load(Ordering::Acquire);
        self.deleted
            .lock()
            .record(Arc::clone(&key), Arc::clone(obj), !reconciling);
        if reconciling && self.in_served_shard(obj) {
            self.queue.add_with_priority(key, priority(Change::Deleted));
        }
    }
}

/// Maps a related object's changes to keys of the main informer.
pub(crate) struct Related<C, F> {
    map: F,
    /// The related informer's: tells a child's resync from a change.
    identity: SharedIdentity<C>,
    /// An update also wakes the keys of the old version (an owner a child left).
    both_sides: bool,
    enqueue: Keys,
    /// Lowered for each owner before it is woken: creations on add, deletions on delete.
    expectations: Option<Expectations>,
    /// Sharded: which adds are a shard's objects arriving.
    arrivals: Arc<Arrivals>,
    /// Sharded: the shard assignment, to place the keys woken (see [`Sharded::place`](crate::shards::Sharded::place)).
    sharding: ShardSlot,
    /// How the related informer hashes its objects.
    by: ShardBy,
    _object: std::marker::PhantomData<fn(&C)>,
}

impl<C, F> Related<C, F> {
    /// Queues the keys `map` returns on `queue`, while `reconciling`, at the priority of the
    /// related object's change; sharded, each placed in the related object's shard.
    pub(crate) fn new(
        map: F,
        identity: SharedIdentity<C>,
        both_sides: bool,
        expectations: Option<Expectations>,
        (queue, reconciling): (WorkQueue<Arc<str>>, Arc<AtomicBool>),
        (arrivals, sharding, by): (Arc<Arrivals>, ShardSlot, ShardBy),
    ) -> Self {
        let slot = Arc::clone(&sharding);
        let enqueue: Keys = Arc::new(move |k: &str, priority: i32, placed: Option<&Placement>| {
            // Standing by, nothing is queued: a term queues every cached key.
            if reconciling.load(Ordering::Acquire) {
                if let (Some(placement), Some(sharded)) = (placed, &*slot.read()) {
                    sharded.place(k, placement);
                }
                queue.add_probed(k, priority, || Arc::from(k));
            }
        });
        Self {
            map,
            identity,
            both_sides,
            enqueue,
            expectations,
            arrivals,
            sharding,
            by,
            _object: std::marker::PhantomData,
        }
    }

    /// Sharded, the shard of the related object `obj`, which is its keys' (a child follows
    /// its controller owner: see [`Sharded::place`](crate::shards::Sharded::place)).
    fn shard(&self, obj: &C) -> Option<Placement>
    where
        C: 'static,
    {
        let sharding = self.sharding.read();
        Some(
            sharding
                .as_ref()?
                .placement_of(&self.identity, self.by, obj),
        )
    }
}

impl<C, F> ResourceEventHandler<C> for Related<C, F>
where
    C: Send + Sync + 'static,
    F: Fn(&C) -> Vec<String> + Send + Sync,
{
    fn on_add(&self, _key: &str, obj: &Arc<C>, initial: bool) {
        let arrival = (!initial)
            .then(|| self.arrivals.priority(self.identity.resource_version(obj)))
            .flatten();
        let priority = arrival.unwrap_or(priority(Change::Added { initial }));
        let shard = self.shard(obj);
        // In the cache when its shard's term began, which queued its keys (a related object
        // is in its keys' shard).
        let queued = shard.as_ref().is_some_and(|p| {
            self.arrivals
                .queued_at_begin(p.shard, self.identity.resource_version(obj))
        });
        for k in (self.map)(obj) {
            if let Some(e) = &self.expectations {
                e.creation_observed(&k);
            }
            if !queued {
                (self.enqueue)(&k, priority, shard.as_ref());
            }
        }
    }

    fn on_update(&self, _key: &str, old: &Arc<C>, new: &Arc<C>) {
        let priority = priority(updated(&self.identity, old, new));
        let shard = self.shard(new);
        let keys = (self.map)(new);
        keys.iter()
            .for_each(|k| (self.enqueue)(k, priority, shard.as_ref()));
        if self.both_sides {
            let shard = self.shard(old);
            for k in (self.map)(old) {
                if !keys.contains(&k) {
                    (self.enqueue)(&k, priority, shard.as_ref());
                }
            }
        }
    }

    fn on_delete(&self, key: &str, obj: &Arc<C>, _final_state_unknown: bool) {
        let shard = self.shard(obj);
        for k in (self.map)(obj) {
            if let Some(e) = &self.expectations {
                e.deletion_of_observed(&k, key);
            }
            (self.enqueue)(&k, priority(Change::Deleted), shard.as_ref());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The priority policy, whole: the initial list and resyncs low, every real change at 0.
    #[test]
    fn the_initial_list_and_resyncs_go_behind_real_changes() {
        let table = [
            (Change::Added { initial: true }, LOW_PRIORITY),
            (Change::Added { initial: false }, 0),
            (Change::Updated { unchanged: true }, LOW_PRIORITY),
            (Change::Updated { unchanged: false }, 0),
            (Change::Deleted, 0),
        ];
        for (change, want) in table {
            assert_eq!(priority(change), want, "{change:?}");
        }
    }

    /// A resync (the same object) and an unchanged relist (the same resource version) are
    /// unchanged; a new version, an object without versions, or a panicking version function
    /// is a change.
    #[test]
    fn an_update_is_unchanged_by_object_or_version() {
        use informer_store::{FnIdentity, key_func};
        type Obj = (u32, Option<String>);
        fn version(o: &Obj) -> Option<&str> {
            o.1.as_deref()
        }
        fn panics(_: &Obj) -> Option<&str> {
            panic!("no version")
        }
        let identity = |rv: fn(&Obj) -> Option<&str>| -> SharedIdentity<Obj> {
            Arc::new(
                FnIdentity::new(key_func(|o: &Obj| Ok(o.0.to_string())))
                    .with_resource_version(Arc::new(rv)),
            )
        };
        let versioned = identity(version);
        let at = |v: Option<&str>| Arc::new((1, v.map(String::from)));
        let (one, none) = (at(Some("1")), at(None));
        let unchanged = |unchanged| Change::Updated { unchanged };
        assert_eq!(updated(&versioned, &one, &one), unchanged(true));
        assert_eq!(updated(&versioned, &one, &at(Some("1"))), unchanged(true));
        assert_eq!(updated(&versioned, &one, &at(Some("2"))), unchanged(false));
        assert_eq!(updated(&versioned, &none, &at(None)), unchanged(false));
        assert_eq!(updated(&versioned, &none, &none), unchanged(true));
        let changed = updated(&identity(panics), &one, &at(Some("1")));
        assert_eq!(changed, unchanged(false));
    }
}
