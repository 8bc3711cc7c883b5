//! [`ResourceEventHandler`]: what users implement to hear about changes, and its adapters.

use std::fmt;
use std::marker::PhantomData;
use std::sync::Arc;

use informer_fifo::DeletedObject;

/// Receives the changes of an informer's cache (client-go's `ResourceEventHandler`).
///
/// Every method defaults to doing nothing: implement the ones you need. Each handler runs on its
/// own worker thread and receives notifications in the order the cache applied them, after the
/// cache has been updated. A handler must treat the objects as read-only.
///
/// * `on_add(obj, is_in_initial_list)`: an object appeared. `is_in_initial_list` is true for the
///   objects of the first list, and for the snapshot a handler added later receives.
/// * `on_update(old, new)`: an object changed; also delivered with `old` and `new` at the same
///   resource version on a resync, to handlers whose resync period is due.
/// * `on_delete(obj)`: an object went away; if the deletion was discovered by a relist the
///   final state is unknown and `obj` is a tombstone (key plus last known state).
pub trait ResourceEventHandler<K>: Send + Sync {
    /// An object was added.
    fn on_add(&self, obj: &Arc<K>, is_in_initial_list: bool) {
        let _ = (obj, is_in_initial_list);
    }

    /// An object was updated.
    fn on_update(&self, old: &Arc<K>, new: &Arc<K>) {
        let _ = (old, new);
    }

    /// An object was deleted.
    fn on_delete(&self, obj: DeletedObject<K>) {
        let _ = obj;
    }
}

macro_rules! forward_through {
    ($($ptr:ident),*) => {$(
        impl<K, H: ResourceEventHandler<K> + ?Sized> ResourceEventHandler<K> for $ptr<H> {
            fn on_add(&self, obj: &Arc<K>, is_in_initial_list: bool) {
                (**self).on_add(obj, is_in_initial_list)
            }
            fn on_update(&self, old: &Arc<K>, new: &Arc<K>) {
                (**self).on_update(old, new)
            }
            fn on_delete(&self, obj: DeletedObject<K>) {
                (**self).on_delete(obj)
            }
        }
    )*};
}

forward_through!(Arc, Box);

type AddFn<K> = Box<dyn Fn(&Arc<K>, bool) + Send + Sync>;
type UpdateFn<K> = Box<dyn Fn(&Arc<K>, &Arc<K>) + Send + Sync>;
type DeleteFn<K> = Box<dyn Fn(DeletedObject<K>) + Send + Sync>;

/// A handler made of closures; the ones not set do nothing.
///
/// ```
/// use std::sync::Arc;
/// use std::sync::atomic::{AtomicUsize, Ordering};
/// use informer_controller::{ResourceEventHandler, ResourceEventHandlerFuncs};
///
/// let adds = Arc::new(AtomicUsize::new(0));
/// let counter = adds.clone();
/// let handler = ResourceEventHandlerFuncs::new()
///     .with_add(move |_obj: &Arc<String>, _initial| { counter.fetch_add(1, Ordering::Relaxed); });
/// handler.on_add(&Arc::new("x".to_string()), true);
/// handler.on_update(&Arc::new("x".to_string()), &Arc::new("y".to_string())); // not set: no-op
/// assert_eq!(adds.load(Ordering::Relaxed), 1);
/// ```
pub struct ResourceEventHandlerFuncs<K> {
    add: Option<AddFn<K>>,
    update: Option<UpdateFn<K>>,
    delete: Option<DeleteFn<K>>,
}

impl<K> Default for ResourceEventHandlerFuncs<K> {
    fn default() -> Self {
        Self {
            add: None,
            update: None,
            delete: None,
        }
    }
}

impl<K> fmt::Debug for ResourceEventHandlerFuncs<K> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ResourceEventHandlerFuncs")
            .field("on_add", &self.add.is_some())
            .field("on_update", &self.update.is_some())
            .field("on_delete", &self.delete.is_some())
            .finish()
    }
}

impl<K> ResourceEventHandlerFuncs<K> {
    /// A handler that does nothing yet.
    pub fn new() -> Self {
        Self::default()
    }

    /// Sets the add closure.
    pub fn with_add(mut self, f: impl Fn(&Arc<K>, bool) + Send + Sync + 'static) -> Self {
        self.add = Some(Box::new(f));
        self
    }

    /// Sets the update closure.
    pub fn with_update(mut self, f: impl Fn(&Arc<K>, &Arc<K>) + Send + Sync + 'static) -> Self {
        self.update = Some(Box::new(f));
        self
    }

    /// Sets the delete closure.
    pub fn with_delete(mut self, f: impl Fn(DeletedObject<K>) + Send + Sync + 'static) -> Self {
        self.delete = Some(Box::new(f));
        self
    }
}

impl<K> ResourceEventHandler<K> for ResourceEventHandlerFuncs<K> {
    fn on_add(&self, obj: &Arc<K>, is_in_initial_list: bool) {
        if let Some(f) = &self.add {
            f(obj, is_in_initial_list);
        }
    }

    fn on_update(&self, old: &Arc<K>, new: &Arc<K>) {
        if let Some(f) = &self.update {
            f(old, new);
        }
    }

    fn on_delete(&self, obj: DeletedObject<K>) {
        if let Some(f) = &self.delete {
            f(obj);
        }
    }
}

/// Passes on only the changes of objects that satisfy a filter (client-go's
/// `FilteringResourceEventHandler`).
///
/// * add / delete: delivered if the object passes. A tombstone with no last known state cannot
///   be judged and is delivered (a missed deletion is worse than an extra one).
/// * update: both pass → update; only the new passes → `on_add(new, false)` (it entered the
///   filtered set); only the old passes → `on_delete(old)` (it left); neither → nothing.
pub struct FilteringResourceEventHandler<K, H, F> {
    filter: F,
    handler: H,
    _object: PhantomData<fn(&K)>,
}

impl<K, H: fmt::Debug, F> fmt::Debug for FilteringResourceEventHandler<K, H, F> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FilteringResourceEventHandler")
            .field("handler", &self.handler)
            .finish()
    }
}

impl<K, H, F> FilteringResourceEventHandler<K, H, F>
where
    H: ResourceEventHandler<K>,
    F: Fn(&K) -> bool + Send + Sync,
{
    /// `handler`, seeing only objects for which `filter` holds.
    pub fn new(filter: F, handler: H) -> Self {
        Self {
            filter,
            handler,
            _object: PhantomData,
        }
    }
}

impl<K, H, F> ResourceEventHandler<K> for FilteringResourceEventHandler<K, H, F>
where
    H: ResourceEventHandler<K>,
    F: Fn(&K) -> bool + Send + Sync,
{
    fn on_add(&self, obj: &Arc<K>, is_in_initial_list: bool) {
        if (self.filter)(obj) {
            self.handler.on_add(obj, is_in_initial_list);
        }
    }

    fn on_update(&self, old: &Arc<K>, new: &Arc<K>) {
        match ((self.filter)(old), (self.filter)(new)) {
            (true, true) => self.handler.on_update(old, new),
            (false, true) => self.handler.on_add(new, false),
            (true, false) => self
                .handler
                .on_delete(DeletedObject::Object(Arc::clone(old))),
            (false, false) => {}
        }
    }

    fn on_delete(&self, obj: DeletedObject<K>) {
        if obj.object().is_none_or(|o| (self.filter)(o)) {
            self.handler.on_delete(obj);
        }
    }
}

/// Combinators on any [`ResourceEventHandler`].
pub trait ResourceEventHandlerExt<K>: ResourceEventHandler<K> + Sized {
    /// This handler, seeing only objects for which `filter` holds (see
    /// [`FilteringResourceEventHandler`]).
    fn filtered<F>(self, filter: F) -> FilteringResourceEventHandler<K, Self, F>
    where
        F: Fn(&K) -> bool + Send + Sync,
    {
        FilteringResourceEventHandler::new(filter, self)
    }
}

impl<K, H: ResourceEventHandler<K>> ResourceEventHandlerExt<K> for H {}
