//! [`SharedInformerFactory`]: one informer per resource and selection, shared by every caller.

use std::any::{Any, TypeId, type_name};
use std::collections::HashMap;
use std::fmt;
use std::hash::Hash;
use std::sync::Arc;
use std::time::Duration;

use informer::{HealthOptions, InformerBuilder, InformerStats, SharedIndexInformer};
use informer_reflector::{Availability, ListerWatcher, ReflectorObserver};
use informer_store::{Identity, Lister, SharedIdentity, identity_key_func};
use parking_lot::Mutex;
use tokio::runtime::Handle;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use crate::entry::{DynamicKey, Entry, Key, Runnable, describe};
use crate::error::FactoryError;
use crate::options::InformerOptions;
use crate::source::{DynamicListerWatcherSource, ListerWatcherSource, Selection};
pub(crate) use crate::state::{State, failure};
use crate::stats::{FactoryHealth, FactoryStats};
use crate::sync_report::InformerStatus;

/// The informer a factory over source `S` hands out for resource `R`.
pub type FactoryInformer<S, R> = SharedIndexInformer<<S as ListerWatcherSource<R>>::Object>;

/// Adjusts a new informer of one resource before it is stored (see
/// [`SharedInformerFactory::configure`]).
type Configure<O> = Arc<dyn Fn(InformerBuilder<O>) -> InformerBuilder<O> + Send + Sync>;

/// The parts of a new informer that come from the source.
struct Parts<L, O> {
    lister_watcher: L,
    identity: SharedIdentity<O>,
}

/// Makes the reflector observer of an informer, by its name.
type ReflectorObservers = Arc<dyn Fn(&str) -> Arc<dyn ReflectorObserver> + Send + Sync>;

/// Hands out one [`SharedIndexInformer`] per resource type and selection, however many callers
/// ask, and starts, syncs and stops them together (client-go's `SharedInformerFactory`).
///
/// The factory gets lister-watchers from a [`ListerWatcherSource`] and knows nothing else about
/// the server: `informer-kube`'s `KubeInformerFactory` is this factory over a `kube::Client`.
///
/// * [`informer`](Self::informer) / [`informer_with`](Self::informer_with) return the
///   shared informer of a resource, creating it on first request. Register handlers and
///   indexes on it before or after [`start`](Self::start).
/// * [`start`](Self::start) runs every informer requested so far that is not running yet, on
///   the current tokio runtime; call it again after requesting more.
/// * [`wait_for_cache_sync`](Self::wait_for_cache_sync) waits, with or without a timeout, for
///   the started informers' first lists, and reports which synced.
/// * [`remove`](Self::remove) stops one informer and lets it go (the next request creates a
///   new one).
/// * [`shutdown`](Self::shutdown) stops every informer and waits until each has ended its pop
///   job and handlers. Dropping the factory stops them without waiting.
///
/// See the [crate documentation](crate) for an example.
pub struct SharedInformerFactory<S> {
    source: S,
    defaults: Selection,
    default_resync: Duration,
    streaming_list: bool,
    relist_by_page: bool,
    stop_when_not_served: bool,
    configure: HashMap<TypeId, Arc<dyn Any + Send + Sync>>,
    runtime: Option<Handle>,
    reflector_observers: Option<ReflectorObservers>,
    stop: CancellationToken,
    pub(crate) state: Arc<Mutex<State>>,
    /// Held by `shutdown` while it waits, so a concurrent call waits too.
    shutdown_lock: tokio::sync::Mutex<()>,
}

impl<S> fmt::Debug for SharedInformerFactory<S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let state = self.state.lock();
        f.debug_struct("SharedInformerFactory")
            .field("defaults", &self.defaults)
            .field("default_resync", &self.default_resync)
            .field(
                "informers",
                &state
                    .entries
                    .iter()
                    .map(Entry::describe)
                    .collect::<Vec<_>>(),
            )
            .field("shutting_down", &state.shutting_down)
            .finish_non_exhaustive()
    }
}

impl<S> Drop for SharedInformerFactory<S> {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}

impl<S: Send + Sync + 'static> SharedInformerFactory<S> {
    /// A factory over `source`: all namespaces, no selectors, no resync, streaming lists.
    pub fn new(source: S) -> Self {
        Self {
            source,
            defaults: Selection::default(),
            default_resync: Duration::ZERO,
            streaming_list: true,
            relist_by_page: false,
            stop_when_not_served: false,
            configure: HashMap::new(),
            runtime: None,
            reflector_observers: None,
            stop: CancellationToken::new(),
            state: Arc::new(Mutex::new(State::default())),
            shutdown_lock: tokio::sync::Mutex::new(()),
        }
    }

    /// Every informer watches `namespace` only, unless its options say otherwise (`""`: all
    /// namespaces; client-go's `WithNamespace`).
    #[must_use]
    pub fn with_namespace(mut self, namespace: impl Into<String>) -> Self {
        self.defaults = std::mem::take(&mut self.defaults).namespace(namespace);
        self
    }

    /// Every informer is narrowed by these label and field selectors (`""`: none), unless its
    /// options say otherwise (client-go's `WithTweakListOptions`, for selectors).
    #[must_use]
    pub fn with_selectors(mut self, labels: impl Into<String>, fields: impl Into<String>) -> Self {
        self.defaults = std::mem::take(&mut self.defaults)
            .labels(labels)
            .fields(fields);
        self
    }

    /// The resync period of every informer (zero, the default: none); a type's own is set
    /// with [`configure`](Self::configure) (client-go's `WithCustomResyncConfig`), a
    /// consumer's own when it registers (`HandlerOptions::resync`).
    #[must_use]
    pub fn with_default_resync(mut self, period: Duration) -> Self {
        self.default_resync = period;
        self
    }

    /// Whether every informer gets its initial state, on the first list and every relist, as a
    /// streaming list (a watch with `sendInitialEvents=true`), falling back to list and watch
    /// where the server refuses, unless its type is [configured](Self::configure) otherwise.
    /// On by default, as client-go 1.35+'s informers (see
    /// [`InformerBuilder::streaming_list`](informer::InformerBuilder::streaming_list)).
    #[must_use]
    pub fn with_streaming_list(mut self, enabled: bool) -> Self {
        self.streaming_list = enabled;
        self
    }

    /// Every informer applies each page of a relist as it arrives, unless its type is
    /// [configured](Self::configure) otherwise: a relist's peak memory is then the cache and a few pages, not two copies of
    /// the collection (see
    /// [`InformerBuilder::relist_by_page`](informer::InformerBuilder::relist_by_page)
    /// for what else changes). Off by default.
    #[must_use]
    pub fn with_relist_by_page(mut self, enabled: bool) -> Self {
        self.relist_by_page = enabled;
        self
    }

    /// What an informer does when the server stops serving its resource after serving it
    /// (its CRD deleted: a list answered `404 NotFound`): by default (`false`) it deletes its
    /// cached objects (each consumer hears a deletion of each), reports the resource not
    /// served ([`InformerStatus::availability`], `Problem::NotServed` in its health) and
    /// waits for it, listing every few seconds, then lists and watches it again once it is
    /// served; with `true` it stops cleanly instead, its consumers with it, and stays in the
    /// factory, stopped, until [removed](Self::remove). A resource not served from the start
    /// is waited for either way. A type's own choice is made with [`configure`](Self::configure)
    /// (`informer.reflector_config(|r| r.with_stop_when_not_served(..))`), which has the last
    /// word.
    #[must_use]
    pub fn with_stop_when_not_served(mut self, stop: bool) -> Self {
        self.stop_when_not_served = stop;
        self
    }

    /// Gives the reflector of each informer created from now on the observer `observers`
    /// returns for the informer's name (see `informer_reflector::ReflectorObserver`): the hook
    /// a metrics layer installs.
    #[must_use]
    pub fn with_reflector_observers(
        mut self,
        observers: impl Fn(&str) -> Arc<dyn ReflectorObserver> + Send + Sync + 'static,
    ) -> Self {
        self.reflector_observers = Some(Arc::new(observers));
        self
    }

    /// A snapshot of every informer the factory holds (see `SharedIndexInformer::stats`), in
    /// the order they were first requested.
    pub fn stats(&self) -> Vec<InformerStats> {
        self.stats_handle().stats()
    }

    /// Whether every informer is synced and making progress (see
    /// `SharedIndexInformer::health`): for `/readyz` ([`FactoryHealth::is_ready`]) and
    /// `/livez` ([`FactoryHealth::is_live`]).
    pub fn health(&self, options: &HealthOptions) -> FactoryHealth {
        self.stats_handle().health(options)
    }

    /// A handle that reads [`stats`](Self::stats) and [`health`](Self::health) later, from anywhere (a metrics collector,
    /// a health endpoint), including informers requested after it was taken.
    pub fn stats_handle(&self) -> FactoryStats {
        FactoryStats {
            state: Arc::clone(&self.state),
        }
    }

    /// Runs informers on this runtime instead of the one `start` is called from.
    #[must_use]
    pub fn with_runtime(mut self, handle: Handle) -> Self {
        self.runtime = Some(handle);
        self
    }

    /// Adjusts each new informer of resource `R` before it is built, on its
    /// [`InformerBuilder`]: its resync period, streaming list, queue, reflector settings
    /// (backoff, page size), panic policy. It runs after the factory's defaults, so it has the
    /// last word; the informers of a resource named at run time are configured with
    /// [`configure_for`](Self::configure_for).
    ///
    /// ```
    /// # use informer_factory::{ListerWatcherSource, SharedInformerFactory};
    /// # fn doc<S: ListerWatcherSource<String> + Send + Sync>(factory: SharedInformerFactory<S>) {
    /// use informer::QueueKind;
    /// let factory = factory.configure::<String>(|informer| informer.queue(QueueKind::InOrder));
    /// # }
    /// ```
    #[must_use]
    pub fn configure<R>(
        mut self,
        f: impl Fn(InformerBuilder<S::Object>) -> InformerBuilder<S::Object> + Send + Sync + 'static,
    ) -> Self
    where
        R: ?Sized + 'static,
        S: ListerWatcherSource<R>,
    {
        let f: Configure<S::Object> = Arc::new(f);
        self.configure.insert(TypeId::of::<R>(), Arc::new(f));
        self
    }

    /// As [`configure`](Self::configure), for every informer of a resource named at run time
    /// by a value of type `P` (see [`informer_for`](Self::informer_for)).
    #[must_use]
    pub fn configure_for<P>(
        mut self,
        f: impl Fn(
            InformerBuilder<<S as DynamicListerWatcherSource<P>>::Object>,
        ) -> InformerBuilder<<S as DynamicListerWatcherSource<P>>::Object>
        + Send
        + Sync
        + 'static,
    ) -> Self
    where
        P: Clone + Eq + Hash + fmt::Display + Send + Sync + 'static,
        S: DynamicListerWatcherSource<P>,
    {
        let f: Configure<<S as DynamicListerWatcherSource<P>>::Object> = Arc::new(f);
        self.configure.insert(TypeId::of::<P>(), Arc::new(f));
        self
    }

    /// The configuration [`configure`](Self::configure) or
    /// [`configure_for`](Self::configure_for) gave the resource type `resource`, if any.
    fn configuration<O: 'static>(&self, resource: TypeId) -> Option<Configure<O>> {
        self.configure
            .get(&resource)
            .and_then(|c| c.downcast_ref::<Configure<O>>())
            .cloned()
    }

    /// The source the factory gets its lister-watchers from.
    pub fn source(&self) -> &S {
        &self.source
    }

    /// The selection an informer requested without options gets.
    pub fn default_selection(&self) -> &Selection {
        &self.defaults
    }

    /// The shared informer of resource `R` with the factory's defaults, created on first
    /// request (client-go's `InformerFor`).
    pub fn informer<R>(&self) -> Arc<FactoryInformer<S, R>>
    where
        R: ?Sized + 'static,
        S: ListerWatcherSource<R>,
    {
        self.informer_with::<R>(InformerOptions::new())
    }

    /// The shared informer of resource `R` with `options` over the factory's defaults.
    ///
    /// Requests with the same resource, selection and transform name share one informer; the
    /// first request's transform function and resync period are the ones it keeps. An
    /// informer requested after [`shutdown`](Self::shutdown) is never started.
    pub fn informer_with<R>(
        &self,
        options: InformerOptions<S::Object>,
    ) -> Arc<FactoryInformer<S, R>>
    where
        R: ?Sized + 'static,
        S: ListerWatcherSource<R>,
    {
        let key = self.key(TypeId::of::<R>(), None, &options);
        let configure = self.configuration(key.resource);
        self.get_or_create(
            key,
            type_name::<R>(),
            None,
            options,
            configure,
            |selection| Parts {
                lister_watcher: self.source.lister_watcher(selection),
                identity: self.source.identity(),
            },
        )
    }

    /// The shared informer of the resource named at run time by `resource`, with the
    /// factory's defaults, created on first request (client-go's dynamic factory's
    /// `ForResource`).
    ///
    /// Requests for equal resources share one informer; a different resource gets its own.
    pub fn informer_for<P>(
        &self,
        resource: &P,
    ) -> Arc<SharedIndexInformer<<S as DynamicListerWatcherSource<P>>::Object>>
    where
        P: Clone + Eq + Hash + fmt::Display + Send + Sync + 'static,
        S: DynamicListerWatcherSource<P>,
    {
        self.informer_for_with(resource, InformerOptions::new())
    }

    /// The shared informer of the resource named at run time by `resource`, with `options`
    /// over the factory's defaults.
    ///
    /// Shared as [`informer_with`](Self::informer_with) shares, per resource value,
    /// selection and transform name. [`configure_for::<P>`](Self::configure_for) adjusts the
    /// informers of every resource of type `P`.
    pub fn informer_for_with<P>(
        &self,
        resource: &P,
        options: InformerOptions<<S as DynamicListerWatcherSource<P>>::Object>,
    ) -> Arc<SharedIndexInformer<<S as DynamicListerWatcherSource<P>>::Object>>
    where
        P: Clone + Eq + Hash + fmt::Display + Send + Sync + 'static,
        S: DynamicListerWatcherSource<P>,
    {
        let dynamic = DynamicKey(Arc::new(resource.clone()));
        let key = self.key(TypeId::of::<P>(), Some(dynamic), &options);
        let configure = self.configuration(key.resource);
        self.get_or_create(
            key,
            type_name::<P>(),
            Some(resource.to_string()),
            options,
            configure,
            |selection| Parts {
                lister_watcher: self.source.lister_watcher(resource, selection),
                identity: self.source.identity(resource),
            },
        )
    }

    /// A typed lister on the shared informer of the resource named at run time by
    /// `resource`, with the factory's defaults (see [`lister`](Self::lister)).
    pub fn lister_for<P>(
        &self,
        resource: &P,
    ) -> Lister<<S as DynamicListerWatcherSource<P>>::Object>
    where
        P: Clone + Eq + Hash + fmt::Display + Send + Sync + 'static,
        S: DynamicListerWatcherSource<P>,
    {
        self.informer_for(resource).lister()
    }

    /// The key the informer of `resource` (and `dynamic`, for one named at run time) with
    /// `options` is shared under.
    pub(crate) fn key<O>(
        &self,
        resource: TypeId,
        dynamic: Option<DynamicKey>,
        options: &InformerOptions<O>,
    ) -> Key {
        Key {
            resource,
            dynamic,
            selection: options.selection(&self.defaults),
            transform: options.transform.as_ref().map(|(name, _)| name.clone()),
            cache: options.cache.as_ref().map(|(name, _)| name.clone()),
        }
    }

    /// The informer shared under `key`, or a new one built from `parts` and stored under it.
    fn get_or_create<O, L>(
        &self,
        key: Key,
        resource: &'static str,
        dynamic: Option<String>,
        options: InformerOptions<O>,
        configure: Option<Configure<O>>,
        parts: impl FnOnce(&Selection) -> Parts<L, O>,
    ) -> Arc<SharedIndexInformer<O>>
    where
        O: Send + Sync + 'static,
        L: ListerWatcher<O> + 'static,
    {
        let mut state = self.state.lock();
        if let Some(&i) = state.by_key.get(&key) {
            // The key holds the resource's TypeId, and the source fixes the object type for it.
            return Arc::clone(&state.entries[i].informer)
                .downcast::<SharedIndexInformer<O>>()
                .expect("an informer's type is determined by its key");
        }

        let selection = key.selection.clone();
        let described_transform = match (&key.transform, &key.cache) {
            (t, None) => t.clone(),
            (None, Some(c)) => Some(format!("none, cache={c}")),
            (Some(t), Some(c)) => Some(format!("{t}, cache={c}")),
        };
        let name = describe(
            dynamic.as_deref().unwrap_or(resource),
            &selection,
            described_transform.as_deref(),
        );
        let observer = self.reflector_observers.as_ref().map(|make| make(&name));
        let mut builder = self.builder(parts(&selection), options, observer.clone(), name);
        if let Some(shards) = &selection.shards {
            builder = builder.shards(shards.clone());
        }
        builder = builder.shard_by(selection.shard_by);
        if let Some(configure) = configure {
            builder = configure(builder);
        }
        let (availability, told) = watch::channel(Availability::Unknown);
        builder = builder.reflector_config(move |r| r.with_availability_sender(availability));
        let informer = Arc::new(builder.build());
        let id = state.next_id;
        state.next_id += 1;
        state.entries.push(Entry {
            id,
            resource,
            dynamic,
            selection,
            transform: key.transform.clone(),
            informer: Arc::clone(&informer) as Arc<dyn Any + Send + Sync>,
            runner: Arc::clone(&informer) as Arc<dyn Runnable>,
            started: false,
            stop: self.stop.child_token(),
            availability: told,
            observer,
        });
        let index = state.entries.len() - 1;
        state.by_key.insert(key, index);
        informer
    }

    /// The builder of a new informer named `name`, with the factory's defaults, `options`
    /// and the reflector observer `observer`.
    fn builder<O, L>(
        &self,
        parts: Parts<L, O>,
        options: InformerOptions<O>,
        observer: Option<Arc<dyn ReflectorObserver>>,
        name: String,
    ) -> InformerBuilder<O>
    where
        O: Send + Sync + 'static,
        L: ListerWatcher<O> + 'static,
    {
        let mut builder = match &options.cache {
            None => SharedIndexInformer::builder(parts.lister_watcher, parts.identity),
            Some((_, cache)) => {
                let cache = cache(
                    identity_key_func(&parts.identity),
                    parts.identity.indexers(),
                );
                SharedIndexInformer::builder(parts.lister_watcher, parts.identity).cache(cache)
            }
        }
        .resync(self.default_resync)
        .streaming_list(self.streaming_list)
        .relist_by_page(self.relist_by_page);
        if let Some(observer) = observer {
            builder = builder.reflector_config(move |r| r.with_observer(observer));
        }
        if self.stop_when_not_served {
            builder = builder.reflector_config(|r| r.with_stop_when_not_served(true));
        }
        builder = builder.name(name);
        if let Some((_, transform)) = options.transform {
            builder = builder.transform(transform);
        }
        builder
    }

    /// A typed lister on the shared informer of `R` with the factory's defaults (created if
    /// need be; it reads an empty cache until the informer is started and synced).
    pub fn lister<R>(&self) -> Lister<S::Object>
    where
        R: ?Sized + 'static,
        S: ListerWatcherSource<R>,
    {
        self.informer::<R>().lister()
    }

    /// Starts every informer requested so far that has not been started, each on its own task
    /// with a child of the factory's stop token, and returns how many it started. Idempotent;
    /// does not wait for anything (client-go's `Start`).
    ///
    /// Fails with [`FactoryError::NoRuntime`] outside a tokio runtime (unless the factory has
    /// one, see [`with_runtime`](Self::with_runtime)) and with [`FactoryError::ShutDown`]
    /// after [`shutdown`](Self::shutdown).
    pub fn start(&self) -> Result<usize, FactoryError> {
        let handle = match &self.runtime {
            Some(handle) => handle.clone(),
            None => Handle::try_current().map_err(|_| FactoryError::NoRuntime)?,
        };
        let mut state = self.state.lock();
        if state.shutting_down {
            return Err(FactoryError::ShutDown);
        }
        let State { entries, tasks, .. } = &mut *state;
        let mut started = 0;
        for entry in entries.iter_mut().filter(|e| !e.started) {
            entry.started = true;
            let run = Arc::clone(&entry.runner).run(entry.stop.clone());
            tasks.push((entry.id, entry.describe(), handle.spawn(run)));
            started += 1;
        }
        Ok(started)
    }

    /// Every informer the factory holds, in the order they were first requested.
    pub fn informers(&self) -> Vec<InformerStatus> {
        self.state
            .lock()
            .entries
            .iter()
            .map(Entry::status)
            .collect()
    }

    /// Stops every informer and waits until each has returned from its run, which it does
    /// only once its pop job and every handler of it have ended. Later calls to [`start`](Self::start) fail;
    /// concurrent and repeated calls wait for the same shutdown (client-go's `Shutdown`,
    /// which also stops the informers here rather than leaving that to the caller).
    ///
    /// Returns the first failure of an informer (every one is logged).
    pub async fn shutdown(&self) -> Result<(), FactoryError> {
        let _waiting = self.shutdown_lock.lock().await;
        let tasks = {
            let mut state = self.state.lock();
            state.shutting_down = true;
            std::mem::take(&mut state.tasks)
        };
        self.stop.cancel();
        let mut first = None;
        for (_, informer, task) in tasks {
            if let Some(failure) = failure(informer, task.await) {
                first.get_or_insert(failure);
            }
        }
        first.map_or(Ok(()), Err)
    }

    /// Whether [`shutdown`](Self::shutdown) has been called.
    pub fn is_shut_down(&self) -> bool {
        self.state.lock().shutting_down
    }
}
