//! [`SharedIndexInformer`]: a cache of one resource, kept by a reflector, shared by many handlers.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use informer_fifo::{Queue, RefusalHandler, TransformFunc};
use informer_reflector::{BoxListerWatcher, ListerWatcher, Reflector, WatchErrorHandler};
use informer_store::{
    Identity, Index, Indexer, Indexers, KeyFunc, Lister, SharedIdentity, Store, identity_key_func,
};
use parking_lot::Mutex;

use crate::builder::InformerBuilder;
use crate::handler::{AsyncResourceEventHandler, ResourceEventHandler, ResourceEventHandlerExt};
use crate::health::Counters;
use crate::listener::Cursor;
use crate::options::HandlerOptions;
use crate::processor::{Consumer, Processor};
use crate::registration::{HandlerRegistration, Upstream};
use crate::subscription::{Subscription, drive_async_handler};
use crate::version::CacheVersion;

/// Builds the queue an informer runs on, from the informer's key function, its cache (the
/// queue's known objects), the transform and the informer's refusal handler (which counts and
/// logs what the queue refuses). See [`QueueKind::Custom`].
pub type QueueFactory<K> = Arc<
    dyn Fn(
            KeyFunc<K>,
            Arc<dyn Indexer<K>>,
            Option<TransformFunc<K>>,
            RefusalHandler,
        ) -> Arc<dyn Queue<K>>
        + Send
        + Sync,
>;

/// Adjusts the reflector before it runs (backoff, page size, selectors, streaming list...).
pub type ReflectorConfig<K> = Box<dyn FnOnce(InformerReflector<K>) -> InformerReflector<K> + Send>;

/// The reflector an informer runs: over its (boxed) lister-watcher, into its queue.
pub type InformerReflector<K> = Reflector<K, BoxListerWatcher<K>, Arc<dyn Queue<K>>>;

/// The minimum resync period of a handler (client-go's `minimumResyncPeriod`).
pub const MINIMUM_RESYNC_PERIOD: Duration = Duration::from_secs(1);

/// Which queue sits between the reflector and the cache.
#[non_exhaustive]
pub enum QueueKind<K> {
    /// client-go's DeltaFIFO: per-key coalescing, relist deletions as tombstones.
    DeltaFifo,
    /// The in-order FIFO in atomic mode (the default, as client-go 1.36's `RealFIFO` with
    /// `AtomicFIFO`): every event delivered in arrival order, nothing coalesced; a relist is
    /// one change, applied to the cache in one step (readers see the old list or the new one,
    /// never a mix), and a resync one change.
    InOrder,
    /// Any other queue.
    Custom(QueueFactory<K>),
}

impl<K> fmt::Debug for QueueKind<K> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::DeltaFifo => "DeltaFifo",
            Self::InOrder => "InOrder",
            Self::Custom(_) => "Custom",
        })
    }
}

/// Errors from an informer's configuration calls.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum InformerError {
    /// The informer has stopped: it takes no new handler or index.
    #[error("informer has stopped already")]
    Stopped,
    /// The cache refused the change (e.g. an index name conflict).
    #[error(transparent)]
    Store(#[from] informer_store::Error),
    /// An async handler was added outside a tokio runtime: there is nowhere to run it.
    #[error("an async handler needs a tokio runtime: add it from within one")]
    NoRuntime,
    /// The registration was made by another informer; nothing was removed.
    #[error("the handler registration belongs to another informer")]
    ForeignRegistration,
}

/// An informer's configuration, frozen when it was built (see [`InformerBuilder`]).
pub(crate) struct Config<K> {
    /// Every handler's default resync period.
    pub(crate) default_resync: Duration,
    pub(crate) transform: Option<TransformFunc<K>>,
    pub(crate) watch_error_handler: Option<WatchErrorHandler>,
    pub(crate) queue_kind: QueueKind<K>,
    pub(crate) streaming_list: bool,
    pub(crate) relist_by_page: bool,
}

/// Where an informer is in its life, and the resync check period, which a handler added before
/// it runs may lower.
pub(crate) struct State<K> {
    pub(crate) life: Life<K>,
    pub(crate) resync_check_period: Duration,
}

/// An informer's life: it runs once.
pub(crate) enum Life<K> {
    /// Built and never run: what its run takes.
    Idle {
        lister_watcher: BoxListerWatcher<K>,
        reflector_config: Option<ReflectorConfig<K>>,
    },
    /// Running: its reflector, once built (its last synced version, its watch state).
    Running(Option<Arc<InformerReflector<K>>>),
    /// Its run has ended: the reflector it ran, if it got that far.
    Stopped(Option<Arc<InformerReflector<K>>>),
}

impl<K> Life<K> {
    pub(crate) fn has_started(&self) -> bool {
        !matches!(self, Life::Idle { .. })
    }

    pub(crate) fn reflector(&self) -> Option<&Arc<InformerReflector<K>>> {
        match self {
            Life::Idle { .. } => None,
            Life::Running(reflector) | Life::Stopped(reflector) => reflector.as_ref(),
        }
    }
}

/// One resource's cache, kept current by a reflector through a queue, and shared by any number
/// of handlers (client-go's `SharedIndexInformer`).
///
/// Build it with [`new`](Self::new), register handlers and indexes, then
/// [`run`](Self::run) it on a tokio runtime until a stop token is cancelled. Read the cache
/// through [`lister`](Self::lister), the one read handle; wait for the first full list
/// with [`wait_for_sync`](Self::wait_for_sync).
///
/// Each consumer — a synchronous [`ResourceEventHandler`], an [`AsyncResourceEventHandler`], a
/// [`Subscription`] — has a bounded buffer of its own: the pop loop never waits for a consumer,
/// a slow one delays nobody else, and one that falls behind coalesces per key instead of
/// holding old versions alive. Synchronous work (the pop loop, index functions, synchronous
/// handlers) runs on the shared [`DeliveryPool`](crate::DeliveryPool); async consumers run as tokio tasks.
pub struct SharedIndexInformer<K> {
    pub(crate) name: Arc<str>,
    pub(crate) identity: SharedIdentity<K>,
    /// The identity's key, as the cache, the queue and the reflector file objects by.
    pub(crate) key_func: KeyFunc<K>,
    pub(crate) indexer: Arc<dyn Indexer<K>>,
    pub(crate) processor: Arc<Processor<K>>,
    pub(crate) config: Config<K>,
    /// Its life, under the lock every registration takes, so that none is added between a
    /// stop and the stop of every consumer.
    pub(crate) state: Mutex<State<K>>,
    /// Held while deltas are applied and distributed, and while a late handler takes its
    /// snapshot: nothing is missed or repeated between the two.
    pub(crate) block_deltas: Arc<Mutex<()>>,
    /// The queue, once running; read by `has_synced` (the informer's and its registrations').
    pub(crate) queue: Arc<Mutex<Option<Arc<dyn Queue<K>>>>>,
    /// Synced and stopped, and the signal every wait is woken by.
    pub(crate) upstream: Arc<Upstream>,
    pub(crate) counters: Arc<Counters>,
    /// The version of the last change the cache applied.
    pub(crate) version: Arc<CacheVersion>,
    /// The shard set it caches (see [`set_shards`](Self::set_shards)).
    pub(crate) shards: crate::shards::Shards,
}

impl<K> fmt::Debug for SharedIndexInformer<K> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SharedIndexInformer")
            .field("name", &self.name)
            .field("cached", &self.indexer.len())
            .field("processor", &self.processor)
            .field(
                "started",
                &self.state.try_lock().map(|s| s.life.has_started()),
            )
            .field("stopped", &self.upstream.is_stopped())
            .finish_non_exhaustive()
    }
}

impl<K> SharedIndexInformer<K>
where
    K: Send + Sync + 'static,
{
    /// An informer over `lister_watcher`, whose objects `identity` keys (its cache starts with
    /// the identity's indexes), with every default of [`builder`](Self::builder).
    pub fn new(
        lister_watcher: impl ListerWatcher<K> + 'static,
        identity: impl Identity<K>,
    ) -> Self {
        Self::builder(lister_watcher, identity).build()
    }

    /// Builds an informer over `lister_watcher`, whose objects `identity` keys: its settings
    /// (resync, queue, cache, transform, reflector...) are chosen on the [`InformerBuilder`] and
    /// frozen by [`build`](InformerBuilder::build).
    pub fn builder(
        lister_watcher: impl ListerWatcher<K> + 'static,
        identity: impl Identity<K>,
    ) -> InformerBuilder<K> {
        InformerBuilder::new(lister_watcher, identity)
    }

    pub(crate) fn from_builder(b: InformerBuilder<K>, cache: Arc<dyn Indexer<K>>) -> Self {
        let queue: Arc<Mutex<Option<Arc<dyn Queue<K>>>>> = Arc::new(Mutex::new(None));
        let upstream = Arc::new(Upstream::new({
            let queue = Arc::clone(&queue);
            move || queue.lock().as_ref().is_some_and(|q| q.has_synced())
        }));
        let name = b.current_name();
        Self {
            name: name.into(),
            key_func: identity_key_func(&b.identity),
            identity: b.identity,
            indexer: cache,
            processor: Arc::new(Processor::new(
                b.panic_policy,
                Arc::clone(&upstream),
                b.pool,
            )),
            config: Config {
                default_resync: b.resync,
                transform: b.transform,
                watch_error_handler: b.watch_error_handler,
                queue_kind: b.queue,
                streaming_list: b.streaming_list,
                relist_by_page: b.relist_by_page,
            },
            state: Mutex::new(State {
                life: Life::Idle {
                    lister_watcher: b.lister_watcher,
                    reflector_config: b.reflector_config,
                },
                resync_check_period: b.resync,
            }),
            block_deltas: Arc::new(Mutex::new(())),
            queue,
            upstream,
            counters: Arc::new(Counters::default()),
            version: Arc::default(),
            shards: b.shards,
        }
    }

    /// The informer's name, as its log lines give it.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// What keys the informer's objects and gives their resource versions (a consumer tells a
    /// resync, an update to the same version, by it).
    pub fn identity(&self) -> &SharedIdentity<K> {
        &self.identity
    }

    /// Registers `handler`, a synchronous handler run on the informer's
    /// [`DeliveryPool`](crate::DeliveryPool), with `options` (its buffer, its resync period, a
    /// name; [`HandlerOptions::new`] for the defaults).
    ///
    /// If the informer is running, the handler first receives an add (with
    /// `is_in_initial_list = true`) for every cached object, then every later change: nothing is
    /// missed or repeated between that snapshot and the live stream.
    ///
    /// A resync period is taken under client-go's rules: one below [`MINIMUM_RESYNC_PERIOD`] is
    /// raised to it; one below the informer's check period lowers the check period if the
    /// informer has not started, and is raised to it if it has.
    pub fn add_event_handler(
        &self,
        handler: impl ResourceEventHandler<K> + 'static,
        mut options: HandlerOptions<K>,
    ) -> Result<HandlerRegistration, InformerError> {
        let handler: Box<dyn ResourceEventHandler<K>> = match options.filter.take() {
            Some(filter) => Box::new(handler.filtered(move |obj: &K| filter(obj))),
            None => Box::new(handler),
        };
        let (registration, _) = self.register(Consumer::Handler(handler), options)?;
        Ok(registration)
    }

    /// Registers an async handler, run as a tokio task of its own on the current runtime (one
    /// notification at a time, in order), with `options`. The same guarantees as
    /// [`add_event_handler`](Self::add_event_handler). Fails with
    /// [`InformerError::NoRuntime`] outside a tokio runtime.
    pub fn add_async_event_handler(
        &self,
        handler: impl AsyncResourceEventHandler<K> + 'static,
        options: HandlerOptions<K>,
    ) -> Result<HandlerRegistration, InformerError> {
        let runtime =
            tokio::runtime::Handle::try_current().map_err(|_| InformerError::NoRuntime)?;
        let (registration, cursor) = self.register(Consumer::Async, options)?;
        let handler: Arc<dyn AsyncResourceEventHandler<K>> = Arc::new(handler);
        let task = runtime.spawn(drive_async_handler(
            cursor,
            handler,
            self.processor.policy(),
            registration.id(),
            Arc::clone(&self.name),
        ));
        self.processor
            .set_task(registration.id(), task.abort_handle());
        Ok(registration)
    }

    /// A stream of this informer's changes (see [`Subscription`]), with `options` (a buffer
    /// bound, a resync period, a name): the cache's current state first, then every change.
    /// Dropping it unsubscribes.
    ///
    /// ```
    /// # use std::sync::Arc;
    /// # use std::time::Duration;
    /// # use futures::StreamExt;
    /// # use informer::{Event, HandlerOptions, SharedIndexInformer};
    /// # use informer_reflector::{FakeListerWatcher, ListPage};
    /// # use informer_store::{key_func, FnIdentity};
    /// # #[tokio::main(flavor = "current_thread")] async fn main() {
    /// let source = Arc::new(FakeListerWatcher::<String>::new());
    /// source.push_list(ListPage::new(vec![Arc::new("a".to_string())], "1"));
    /// let informer = Arc::new(SharedIndexInformer::new(
    ///     source, FnIdentity::new(key_func(|s: &String| Ok(s.clone()))),
    /// ));
    /// let mut events = informer.subscribe(HandlerOptions::new()).unwrap();
    /// let stop = tokio_util::sync::CancellationToken::new();
    /// let run = tokio::spawn({ let (i, s) = (informer.clone(), stop.clone()); async move { i.run(s).await } });
    /// let Some(Event::Add { key, initial, .. }) = events.next().await else { panic!() };
    /// assert_eq!((&*key, initial), ("a", true));
    /// stop.cancel();
    /// run.await.unwrap().unwrap();
    /// assert!(events.next().await.is_none(), "the stream ends when the informer stops");
    /// # }
    /// ```
    pub fn subscribe(&self, options: HandlerOptions<K>) -> Result<Subscription<K>, InformerError> {
        let (registration, cursor) = self.register(Consumer::Async, options)?;
        Ok(Subscription::new(cursor, registration))
    }

    /// Registers a consumer under client-go's resync rules, with the cache's snapshot if the
    /// informer is running.
    fn register(
        &self,
        consumer: Consumer<K>,
        options: HandlerOptions<K>,
    ) -> Result<(HandlerRegistration, Cursor<K>), InformerError> {
        let mut state = self.state.lock();
        if self.upstream.is_stopped() {
            return Err(InformerError::Stopped);
        }
        let started = state.life.has_started();
        let mut period = options
            .requested_resync()
            .unwrap_or(self.config.default_resync);
        if !period.is_zero() {
            if period < MINIMUM_RESYNC_PERIOD {
                tracing::warn!(
                    ?period,
                    "resync period too small, raised to {MINIMUM_RESYNC_PERIOD:?}"
                );
                period = MINIMUM_RESYNC_PERIOD;
            }
            if period < state.resync_check_period {
                if started {
                    tracing::warn!(
                        ?period,
                        check = ?state.resync_check_period,
                        "informer already started: resync period raised to its check period"
                    );
                    period = state.resync_check_period;
                } else {
                    state.resync_check_period = period;
                    self.processor.set_check_period(period);
                }
            }
        }
        let check = state.resync_check_period;
        // Hold the processing lock while the snapshot is queued, so no change slips between.
        // The pop loop waits for it, but no queue write does: the reflector reads on.
        let _block = self.block_deltas.lock();
        let snapshot = if started {
            self.indexer
                .list_keys()
                .into_iter()
                .filter_map(|key| {
                    let obj = self.indexer.get_by_key(&key)?;
                    Some((Arc::<str>::from(key), obj))
                })
                .collect()
        } else {
            Vec::new()
        };
        Ok(self
            .processor
            .add_listener(consumer, options, period, check, snapshot, &self.name))
    }

    /// Unregisters a handler. Idempotent: a registration already removed is ignored. A
    /// registration of another informer is refused with
    /// [`InformerError::ForeignRegistration`] and removes nothing.
    ///
    /// The handler stops receiving new notifications at once; what is already buffered for it
    /// is still delivered (client-go drops it), and then it ends. Await
    /// [`HandlerRegistration::stopped`] to know that none of its code runs any more (client-go's
    /// `ShutDownEventHandler`); the informer's shutdown also waits for it. Nothing is lost
    /// silently.
    pub fn remove_event_handler(
        &self,
        registration: &HandlerRegistration,
    ) -> Result<(), InformerError> {
        if registration.informer() != self.processor.id() {
            return Err(InformerError::ForeignRegistration);
        }
        let _block = self.block_deltas.lock();
        self.processor.remove_listener(registration.id());
        Ok(())
    }

    /// Whether the informer's queue has delivered the whole first list to the cache and to the
    /// handlers' buffers.
    pub fn has_synced(&self) -> bool {
        self.upstream.has_synced()
    }

    /// Waits until [`has_synced`](Self::has_synced), woken by the change itself (no polling);
    /// cancel-safe. Returns `true` once synced, or `false` if the informer stops first. Bound
    /// the wait with [`wait_for_sync_timeout`](Self::wait_for_sync_timeout).
    pub async fn wait_for_sync(&self) -> bool {
        self.upstream
            .wait(|| self.has_synced(), || self.upstream.is_stopped())
            .await
    }

    /// [`wait_for_sync`](Self::wait_for_sync), giving up (`false`) after `timeout`.
    pub async fn wait_for_sync_timeout(&self, timeout: Duration) -> bool {
        tokio::time::timeout(timeout, self.wait_for_sync())
            .await
            .unwrap_or(false)
    }

    /// The resource version the reflector last synced to; `""` before the informer runs.
    pub fn last_sync_resource_version(&self) -> String {
        self.state
            .lock()
            .life
            .reflector()
            .map_or_else(String::new, |r| r.last_sync_resource_version())
    }

    /// Adds indexes to the cache, before or after start; existing objects are indexed at once.
    pub fn add_indexers(&self, indexers: Indexers<K>) -> Result<(), InformerError> {
        if self.upstream.is_stopped() {
            return Err(InformerError::Stopped);
        }
        Ok(self.indexer.add_indexers(indexers)?)
    }

    /// Adds one index to the cache, before or after start (existing objects are indexed at
    /// once), and returns its typed handle for [`Lister::lookup`].
    pub fn add_index(
        &self,
        name: &str,
        func: informer_store::IndexFunc<K>,
    ) -> Result<Index<K>, InformerError> {
        if self.upstream.is_stopped() {
            return Err(InformerError::Stopped);
        }
        Ok(Index::register(&*self.indexer, name, func)?)
    }

    /// The typed handle of the index `name`, if the cache has it (one registered at
    /// construction, e.g. a Kubernetes informer's `namespace` index).
    pub fn index(&self, name: &str) -> Option<Index<K>> {
        Index::registered(&*self.indexer, name)
    }

    /// The read handle on the cache — the one way to read it: by key, by namespace and name,
    /// by selector, a namespace's view, index lookups. Cheap to clone; the same whether the
    /// informer came from a factory or was built by hand. Treat the objects as read-only.
    pub fn lister(&self) -> Lister<K> {
        Lister::new(Arc::clone(&self.indexer))
    }

    /// Whether [`run`](Self::run) has been called.
    pub fn has_started(&self) -> bool {
        self.state.lock().life.has_started()
    }

    /// Whether the informer has stopped (it never restarts).
    pub fn is_stopped(&self) -> bool {
        self.upstream.is_stopped()
    }
}

#[cfg(test)]
mod tests {
    use informer_reflector::FakeListerWatcher;
    use informer_store::{FnIdentity, key_func};

    use super::*;
    use crate::handler::ResourceEventHandlerFuncs;

    fn informer(resync: Duration) -> SharedIndexInformer<String> {
        SharedIndexInformer::builder(
            FakeListerWatcher::new(),
            FnIdentity::new(key_func(|s: &String| Ok(s.clone()))),
        )
        .resync(resync)
        .build()
    }

    fn secs(s: u64) -> Duration {
        Duration::from_secs(s)
    }

    #[test]
    fn handler_resync_periods_follow_the_check_period_rules() {
        let i = informer(secs(10));
        i.add_event_handler(ResourceEventHandlerFuncs::new(), HandlerOptions::new())
            .unwrap(); // the default: 10 s
        i.add_event_handler(
            ResourceEventHandlerFuncs::new(),
            HandlerOptions::new().resync_period(secs(30)),
        )
        .unwrap();
        i.add_event_handler(
            ResourceEventHandlerFuncs::new(),
            HandlerOptions::new().resync_period(Duration::ZERO),
        )
        .unwrap();
        assert_eq!(
            i.processor.resync_periods(),
            [secs(10), secs(30), Duration::ZERO]
        );
        // Smaller than the check period before start: the check period comes down to it, and
        // every handler's period is recomputed against the new check period.
        i.add_event_handler(
            ResourceEventHandlerFuncs::new(),
            HandlerOptions::new().resync_period(secs(4)),
        )
        .unwrap();
        assert_eq!(i.state.lock().resync_check_period, secs(4));
        assert_eq!(
            i.processor.resync_periods(),
            [secs(10), secs(30), Duration::ZERO, secs(4)]
        );
        // Below the minimum: raised to one second (and the check period follows).
        i.add_event_handler(
            ResourceEventHandlerFuncs::new(),
            HandlerOptions::new().resync_period(Duration::from_millis(10)),
        )
        .unwrap();
        assert_eq!(i.processor.resync_periods()[4], MINIMUM_RESYNC_PERIOD);
        assert_eq!(i.state.lock().resync_check_period, MINIMUM_RESYNC_PERIOD);
    }

    #[test]
    fn after_start_a_smaller_period_is_raised_to_the_check_period() {
        let i = informer(secs(10));
        i.state.lock().life = Life::Running(None);
        i.add_event_handler(
            ResourceEventHandlerFuncs::new(),
            HandlerOptions::new().resync_period(secs(3)),
        )
        .unwrap();
        assert_eq!(i.processor.resync_periods(), [secs(10)]);
        assert_eq!(i.state.lock().resync_check_period, secs(10));
    }

    /// As in client-go: with no default resync the check period is zero, which nothing lowers,
    /// so no handler resyncs.
    #[test]
    fn an_informer_without_resync_gives_no_handler_a_resync() {
        let i = informer(Duration::ZERO);
        i.add_event_handler(
            ResourceEventHandlerFuncs::new(),
            HandlerOptions::new().resync_period(secs(5)),
        )
        .unwrap();
        assert_eq!(i.processor.resync_periods(), [Duration::ZERO]);
        assert_eq!(i.state.lock().resync_check_period, Duration::ZERO);
    }

    /// `Display` carries the cause (the project's rule for every error type).
    #[test]
    fn informer_errors_display_their_cause() {
        let err = InformerError::from(informer_store::Error::IndexFunc {
            index: "node".into(),
            key: "a/x".into(),
            source: "no node".into(),
        });
        assert!(err.to_string().contains("no node"), "{err}");
    }
}
