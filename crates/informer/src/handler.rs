//! [`ResourceEventHandler`]: what users implement to hear about changes, and its adapters.

use std::fmt;
use std::marker::PhantomData;
use std::sync::Arc;

/// One change of an informer's cache, as a [`Subscription`](crate::Subscription) yields it and an
/// [`AsyncResourceEventHandler`] receives it. Every event carries the object's key (the cache's
/// key: `namespace/name` for a namespaced Kubernetes object); cloning one clones `Arc`s only.
#[derive(Debug)]
#[non_exhaustive]
pub enum Event<K> {
    /// An object appeared. `initial` is true for the objects of the first list, and for the
    /// snapshot a consumer that joins later receives.
    Add {
        /// The object's key.
        key: Arc<str>,
        /// The object as cached.
        obj: Arc<K>,
        /// Part of the initial state.
        initial: bool,
    },
    /// An object changed, from `old` (the version this consumer saw last) to `new`; also sent
    /// with both at the same resource version on a resync, to consumers whose resync is due.
    Update {
        /// The object's key.
        key: Arc<str>,
        /// The version the consumer saw last.
        old: Arc<K>,
        /// The version now cached.
        new: Arc<K>,
    },
    /// An object went away. `obj` is its last known state: the final state the watch reported,
    /// or, if the deletion was found by a relist (`final_state_unknown`), the version cached
    /// before it.
    Delete {
        /// The object's key.
        key: Arc<str>,
        /// The last known state.
        obj: Arc<K>,
        /// The deletion was inferred (a relist no longer had the object, or a version of it was
        /// refused): `obj` is the last version cached, not the final one.
        final_state_unknown: bool,
    },
}

impl<K> Clone for Event<K> {
    fn clone(&self) -> Self {
        match self {
            Self::Add { key, obj, initial } => Self::Add {
                key: Arc::clone(key),
                obj: Arc::clone(obj),
                initial: *initial,
            },
            Self::Update { key, old, new } => Self::Update {
                key: Arc::clone(key),
                old: Arc::clone(old),
                new: Arc::clone(new),
            },
            Self::Delete {
                key,
                obj,
                final_state_unknown,
            } => Self::Delete {
                key: Arc::clone(key),
                obj: Arc::clone(obj),
                final_state_unknown: *final_state_unknown,
            },
        }
    }
}

impl<K> Event<K> {
    /// The object's key.
    pub fn key(&self) -> &str {
        match self {
            Self::Add { key, .. } | Self::Update { key, .. } | Self::Delete { key, .. } => key,
        }
    }

    /// The object as of this event: the added or new version, or the last known state of a
    /// deleted one.
    pub fn object(&self) -> &Arc<K> {
        match self {
            Self::Add { obj, .. } | Self::Delete { obj, .. } => obj,
            Self::Update { new, .. } => new,
        }
    }

    /// Whether this is a deletion.
    pub fn is_delete(&self) -> bool {
        matches!(self, Self::Delete { .. })
    }

    /// Hands this event to the matching method of a synchronous handler.
    pub fn dispatch<H: ResourceEventHandler<K> + ?Sized>(&self, handler: &H) {
        match self {
            Self::Add { key, obj, initial } => handler.on_add(key, obj, *initial),
            Self::Update { key, old, new } => handler.on_update(key, old, new),
            Self::Delete {
                key,
                obj,
                final_state_unknown,
            } => handler.on_delete(key, obj, *final_state_unknown),
        }
    }
}

/// Receives the changes of an informer's cache (client-go's `ResourceEventHandler`), each with
/// the object's key.
///
/// Every method defaults to doing nothing: implement the ones you need. Handlers run on the
/// informers' shared delivery pool, a few threads for every informer and handler (one
/// blocked in a handler for long gets a spare, so it delays no other handler); each handler
/// receives its notifications one at a time, in the order the cache applied them, after the
/// cache has been updated. A handler must treat the objects as read-only. For async code, use
/// [`AsyncResourceEventHandler`] or a [`Subscription`](crate::Subscription) instead.
///
/// * `on_add(key, obj, is_in_initial_list)`: an object appeared. `is_in_initial_list` is true
///   for the objects of the first list, and for the snapshot a handler added later receives.
/// * `on_update(key, old, new)`: an object changed; also delivered with `old` and `new` at the
///   same resource version on a resync, to handlers whose resync period is due.
/// * `on_delete(key, obj, final_state_unknown)`: an object went away; `obj` is its last known
///   state (see [`Event::Delete`]), the same shape whether the watch reported the deletion or
///   a relist found it.
///
/// A handler that falls behind by more than its buffer (see
/// [`HandlerOptions::buffer`](crate::HandlerOptions::buffer)) receives, for each key that
/// changed meanwhile, one notification from the version it saw last to the latest one (see
/// `docs/semantics.md`): never stale, never more memory than one version per key.
pub trait ResourceEventHandler<K>: Send + Sync {
    /// An object was added.
    fn on_add(&self, key: &str, obj: &Arc<K>, is_in_initial_list: bool) {
        let _ = (key, obj, is_in_initial_list);
    }

    /// An object was updated.
    fn on_update(&self, key: &str, old: &Arc<K>, new: &Arc<K>) {
        let _ = (key, old, new);
    }

    /// An object was deleted; `obj` is its last known state.
    fn on_delete(&self, key: &str, obj: &Arc<K>, final_state_unknown: bool) {
        let _ = (key, obj, final_state_unknown);
    }
}

macro_rules! forward_through {
    ($($ptr:ident),*) => {$(
        impl<K, H: ResourceEventHandler<K> + ?Sized> ResourceEventHandler<K> for $ptr<H> {
            fn on_add(&self, key: &str, obj: &Arc<K>, is_in_initial_list: bool) {
                (**self).on_add(key, obj, is_in_initial_list)
            }
            fn on_update(&self, key: &str, old: &Arc<K>, new: &Arc<K>) {
                (**self).on_update(key, old, new)
            }
            fn on_delete(&self, key: &str, obj: &Arc<K>, final_state_unknown: bool) {
                (**self).on_delete(key, obj, final_state_unknown)
            }
        }
    )*};
}

forward_through!(Arc, Box);

/// An event handler whose methods are `async` (see [`ResourceEventHandler`] for what each
/// receives). It runs as a tokio task of its own, one notification at a time, in order; it
/// holds no thread while it awaits. Register it with
/// [`add_async_event_handler`](crate::SharedIndexInformer::add_async_event_handler), from
/// inside a tokio runtime.
///
/// ```
/// use std::sync::Arc;
/// use informer::AsyncResourceEventHandler;
///
/// struct Echo;
///
/// #[informer::async_trait]
/// impl AsyncResourceEventHandler<String> for Echo {
///     async fn on_add(&self, key: Arc<str>, obj: Arc<String>, _initial: bool) {
///         tokio::task::yield_now().await; // any async work
///         println!("{key}: {obj}");
///     }
/// }
/// ```
#[async_trait::async_trait]
pub trait AsyncResourceEventHandler<K: Send + Sync + 'static>: Send + Sync {
    /// An object was added.
    async fn on_add(&self, key: Arc<str>, obj: Arc<K>, is_in_initial_list: bool) {
        let _ = (key, obj, is_in_initial_list);
    }

    /// An object was updated.
    async fn on_update(&self, key: Arc<str>, old: Arc<K>, new: Arc<K>) {
        let _ = (key, old, new);
    }

    /// An object was deleted; `obj` is its last known state.
    async fn on_delete(&self, key: Arc<str>, obj: Arc<K>, final_state_unknown: bool) {
        let _ = (key, obj, final_state_unknown);
    }
}

macro_rules! forward_async_through {
    ($($ptr:ident),*) => {$(
        #[async_trait::async_trait]
        impl<K, H> AsyncResourceEventHandler<K> for $ptr<H>
        where
            K: Send + Sync + 'static,
            H: AsyncResourceEventHandler<K> + ?Sized,
        {
            async fn on_add(&self, key: Arc<str>, obj: Arc<K>, is_in_initial_list: bool) {
                (**self).on_add(key, obj, is_in_initial_list).await
            }
            async fn on_update(&self, key: Arc<str>, old: Arc<K>, new: Arc<K>) {
                (**self).on_update(key, old, new).await
            }
            async fn on_delete(&self, key: Arc<str>, obj: Arc<K>, final_state_unknown: bool) {
                (**self).on_delete(key, obj, final_state_unknown).await
            }
        }
    )*};
}

forward_async_through!(Arc, Box);

type AddFn<K> = Box<dyn Fn(&str, &Arc<K>, bool) + Send + Sync>;
type UpdateFn<K> = Box<dyn Fn(&str, &Arc<K>, &Arc<K>) + Send + Sync>;
type DeleteFn<K> = Box<dyn Fn(&str, &Arc<K>, bool) + Send + Sync>;

/// A handler made of closures; the ones not set do nothing.
///
/// ```
/// use std::sync::Arc;
/// use std::sync::atomic::{AtomicUsize, Ordering};
/// use informer::{ResourceEventHandler, ResourceEventHandlerFuncs};
///
/// let adds = Arc::new(AtomicUsize::new(0));
/// let counter = adds.clone();
/// let handler = ResourceEventHandlerFuncs::new()
///     .with_add(move |_key, _obj: &Arc<String>, _initial| { counter.fetch_add(1, Ordering::Relaxed); });
/// handler.on_add("x", &Arc::new("x".to_string()), true);
/// handler.on_update("x", &Arc::new("x".to_string()), &Arc::new("y".to_string())); // not set: no-op
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

    /// Sets the add closure: `(key, obj, is_in_initial_list)`.
    pub fn with_add(mut self, f: impl Fn(&str, &Arc<K>, bool) + Send + Sync + 'static) -> Self {
        self.add = Some(Box::new(f));
        self
    }

    /// Sets the update closure: `(key, old, new)`.
    pub fn with_update(
        mut self,
        f: impl Fn(&str, &Arc<K>, &Arc<K>) + Send + Sync + 'static,
    ) -> Self {
        self.update = Some(Box::new(f));
        self
    }

    /// Sets the delete closure: `(key, last_known, final_state_unknown)`.
    pub fn with_delete(mut self, f: impl Fn(&str, &Arc<K>, bool) + Send + Sync + 'static) -> Self {
        self.delete = Some(Box::new(f));
        self
    }
}

impl<K> ResourceEventHandler<K> for ResourceEventHandlerFuncs<K> {
    fn on_add(&self, key: &str, obj: &Arc<K>, is_in_initial_list: bool) {
        if let Some(f) = &self.add {
            f(key, obj, is_in_initial_list);
        }
    }

    fn on_update(&self, key: &str, old: &Arc<K>, new: &Arc<K>) {
        if let Some(f) = &self.update {
            f(key, old, new);
        }
    }

    fn on_delete(&self, key: &str, obj: &Arc<K>, final_state_unknown: bool) {
        if let Some(f) = &self.delete {
            f(key, obj, final_state_unknown);
        }
    }
}

/// Passes on only the changes of objects that satisfy a filter (client-go's
/// `FilteringResourceEventHandler`).
///
/// * add / delete: delivered if the object (for a delete, its last known state) passes.
/// * update: both pass → update; only the new passes → `on_add(new, false)` (it entered the
///   filtered set); only the old passes → `on_delete(old, false)` (it left); neither → nothing.
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
    fn on_add(&self, key: &str, obj: &Arc<K>, is_in_initial_list: bool) {
        if (self.filter)(obj) {
            self.handler.on_add(key, obj, is_in_initial_list);
        }
    }

    fn on_update(&self, key: &str, old: &Arc<K>, new: &Arc<K>) {
        match ((self.filter)(old), (self.filter)(new)) {
            (true, true) => self.handler.on_update(key, old, new),
            (false, true) => self.handler.on_add(key, new, false),
            (true, false) => self.handler.on_delete(key, old, false),
            (false, false) => {}
        }
    }

    fn on_delete(&self, key: &str, obj: &Arc<K>, final_state_unknown: bool) {
        if (self.filter)(obj) {
            self.handler.on_delete(key, obj, final_state_unknown);
        }
    }
}

/// `event` as a consumer that sees only objects for which `filter` holds receives it (the rules
/// of [`FilteringResourceEventHandler`]); `None` if it sees nothing of it.
pub(crate) fn filter_event<K>(event: Event<K>, filter: &dyn Fn(&K) -> bool) -> Option<Event<K>> {
    match event {
        Event::Add { ref obj, .. } | Event::Delete { ref obj, .. } => filter(obj).then_some(event),
        Event::Update { key, old, new } => match (filter(&old), filter(&new)) {
            (true, true) => Some(Event::Update { key, old, new }),
            (false, true) => Some(Event::Add {
                key,
                obj: new,
                initial: false,
            }),
            (true, false) => Some(Event::Delete {
                key,
                obj: old,
                final_state_unknown: false,
            }),
            (false, false) => None,
        },
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
