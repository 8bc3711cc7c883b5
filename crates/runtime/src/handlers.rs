//! What the informers tell a controller: the handlers that turn changes into queued keys, and
//! their registrations.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use informer::{
    HandlerOptions, HandlerRegistration, InformerError, ResourceEventHandler, SharedIndexInformer,
};
use informer_workqueue::WorkQueue;
use parking_lot::{Mutex, RwLock};

use crate::Expectations;
use crate::deleted::Deleted;

type Keys = Arc<dyn Fn(&str) + Send + Sync>;

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
    /// Which updates are queued (all without one).
    pub(crate) predicate: Arc<RwLock<Option<UpdatePredicate<K>>>>,
    pub(crate) deleted: Arc<Mutex<Deleted<K>>>,
    pub(crate) reconciling: Arc<AtomicBool>,
    /// The expectations of `owns_expecting`: a deleted object's are dropped with it.
    pub(crate) expectations: Arc<Mutex<Vec<Expectations>>>,
}

impl<K: Send + Sync + 'static> ResourceEventHandler<K> for MainHandler<K> {
    fn on_add(&self, key: &str, _obj: &Arc<K>, _initial: bool) {
        self.deleted.lock().recreated(key);
        if self.reconciling.load(Ordering::Acquire) {
            self.queue.add_with(key, || Arc::from(key));
        }
    }

    fn on_update(&self, key: &str, old: &Arc<K>, new: &Arc<K>) {
        if let Some(predicate) = &*self.predicate.read()
            && !predicate(old, new)
        {
            return;
        }
        if self.reconciling.load(Ordering::Acquire) {
            // Most updates find their key waiting already: no allocation for those.
            self.queue.add_with(key, || Arc::from(key));
        }
    }

    fn on_delete(&self, key: &str, obj: &Arc<K>, _final_state_unknown: bool) {
        for e in self.expectations.lock().iter() {
            e.forget(key);
        }
        let key: Arc<str> = Arc::from(key);
        let reconciling = self.reconciling.load(Ordering::Acquire);
        self.deleted
            .lock()
            .record(Arc::clone(&key), Arc::clone(obj), !reconciling);
        if reconciling {
            self.queue.add(key);
        }
    }
}

/// Maps a related object's changes to keys of the main informer.
pub(crate) struct Related<C, F> {
    map: F,
    /// An update also wakes the keys of the old version (an owner a child left).
    both_sides: bool,
    enqueue: Keys,
    /// Lowered for each owner before it is woken: creations on add, deletions on delete.
    expectations: Option<Expectations>,
    _object: std::marker::PhantomData<fn(&C)>,
}

impl<C, F> Related<C, F> {
    /// Queues the keys `map` returns on `queue`, while `reconciling`.
    pub(crate) fn new(
        map: F,
        both_sides: bool,
        expectations: Option<Expectations>,
        queue: WorkQueue<Arc<str>>,
        reconciling: Arc<AtomicBool>,
    ) -> Self {
        let enqueue: Keys = Arc::new(move |k: &str| {
            // Standing by, nothing is queued: a term queues every cached key.
            if reconciling.load(Ordering::Acquire) {
                queue.add_with(k, || Arc::from(k));
            }
        });
        Self {
            map,
            both_sides,
            enqueue,
            expectations,
            _object: std::marker::PhantomData,
        }
    }
}

impl<C, F> ResourceEventHandler<C> for Related<C, F>
where
    C: Send + Sync + 'static,
    F: Fn(&C) -> Vec<String> + Send + Sync,
{
    fn on_add(&self, _key: &str, obj: &Arc<C>, _initial: bool) {
        for k in (self.map)(obj) {
            if let Some(e) = &self.expectations {
                e.creation_observed(&k);
            }
            (self.enqueue)(&k);
        }
    }

    fn on_update(&self, _key: &str, old: &Arc<C>, new: &Arc<C>) {
        let mut keys = (self.map)(new);
        if self.both_sides {
            for k in (self.map)(old) {
                if !keys.contains(&k) {
                    keys.push(k);
                }
            }
        }
        keys.iter().for_each(|k| (self.enqueue)(k));
    }

    fn on_delete(&self, key: &str, obj: &Arc<C>, _final_state_unknown: bool) {
        for k in (self.map)(obj) {
            if let Some(e) = &self.expectations {
                e.deletion_of_observed(&k, key);
            }
            (self.enqueue)(&k);
        }
    }
}
