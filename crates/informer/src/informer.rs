//! [`SharedIndexInformer`]: a cache of one resource, kept by a reflector, shared by many handlers.

use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use informer_fifo::{
    DeltaFifo, DeltaFifoOptions, Deltas, InOrderFifo, InOrderFifoOptions, Queue, RefusalHandler,
    TransformFunc,
};
use informer_reflector::{BoxListerWatcher, ListerWatcher, Reflector, WatchErrorHandler};
use informer_store::{
    Identity, Index, Indexer, Indexers, KeyFunc, Lister, SharedIdentity, Store, catch_panic,
    identity_key_func,
};
use parking_lot::Mutex;
use tokio_util::sync::CancellationToken;

use crate::builder::InformerBuilder;
use crate::handler::{AsyncResourceEventHandler, ResourceEventHandler};
use crate::informer_loop::{InformerLoop, ProcessDeltas, Sink, apply_deltas};
use crate::processor::{
    Consumer, Cursor, HandlerOptions, HandlerRegistration, ListenerState, Notification, Processor,
    Upstream,
};
use crate::subscription::{Subscription, drive_async_handler};

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
    /// client-go's DeltaFIFO: per-key coalescing, relist deletions as tombstones (the default).
    DeltaFifo,
    /// The in-order FIFO: every event delivered in arrival order, nothing coalesced.
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

struct Settings<K> {
    lister_watcher: Option<BoxListerWatcher<K>>,
    default_resync: Duration,
    resync_check_period: Duration,
    transform: Option<TransformFunc<K>>,
    watch_error_handler: Option<WatchErrorHandler>,
    queue_kind: QueueKind<K>,
    reflector_config: Option<ReflectorConfig<K>>,
    streaming_list: bool,
    relist_by_page: bool,
}

/// When [`SharedIndexInformer::health`] reports a stall.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HealthOptions {
    /// Changes waiting (queued, or one being processed) with none processed for this long, as
    /// seen across health checks: the pop loop is stuck (default 60 s).
    pub stalled_after: Duration,
    /// No watch open for this long: the reflector cannot get back to the server (default 60 s,
    /// twice the default backoff cap).
    pub watch_down_after: Duration,
}

impl Default for HealthOptions {
    fn default() -> Self {
        Self {
            stalled_after: Duration::from_secs(60),
            watch_down_after: Duration::from_secs(60),
        }
    }
}

/// Something wrong with a running informer (see [`SharedIndexInformer::health`]).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Problem {
    /// The informer has stopped.
    Stopped,
    /// A consumer stopped while the informer runs (its panic policy stopped it).
    HandlerStopped {
        /// The consumer's registration number.
        handler: u64,
    },
    /// Changes are waiting and none has been processed for a while.
    NoProgress {
        /// Keys queued (not counting a batch being processed).
        queued: usize,
        /// Since a health check last saw a change processed (or the start).
        stalled_for: Duration,
    },
    /// No watch has been open for a while.
    WatchDown {
        /// Since the last watch ended (or the start).
        down_for: Duration,
    },
}

impl fmt::Display for Problem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Stopped => write!(f, "stopped"),
            Self::HandlerStopped { handler } => write!(f, "handler {handler} stopped"),
            Self::NoProgress {
                queued,
                stalled_for,
            } => write!(
                f,
                "{queued} keys queued and nothing processed for {stalled_for:.1?}"
            ),
            Self::WatchDown { down_for } => write!(f, "no watch open for {down_for:.1?}"),
        }
    }
}

/// An informer's health (see [`SharedIndexInformer::health`]).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Health {
    /// The informer's name.
    pub name: String,
    /// Whether it has synced.
    pub synced: bool,
    /// What is wrong, if anything.
    pub problems: Vec<Problem>,
}

impl Health {
    /// Nothing is wrong (a liveness check).
    pub fn is_live(&self) -> bool {
        self.problems.is_empty()
    }

    /// Synced and nothing is wrong (a readiness check).
    pub fn is_ready(&self) -> bool {
        self.synced && self.is_live()
    }
}

impl fmt::Display for Health {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}: {}",
            self.name,
            if self.synced { "synced" } else { "not synced" }
        )?;
        for problem in &self.problems {
            write!(f, "; {problem}")?;
        }
        Ok(())
    }
}

/// A snapshot of an informer, from [`SharedIndexInformer::stats`].
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct InformerStats {
    /// The informer's name.
    pub name: String,
    /// Whether it has been started.
    pub started: bool,
    /// Whether it has synced.
    pub synced: bool,
    /// Whether it has stopped.
    pub stopped: bool,
    /// Objects in its cache.
    pub objects: usize,
    /// Each index, by name, with its number of distinct values.
    pub indexes: Vec<(String, usize)>,
    /// The queue's counts (zero before the informer runs).
    pub queue: informer_fifo::QueueCounts,
    /// Deltas refused ([`SharedIndexInformer::refused_deltas`]).
    pub refused_deltas: u64,
    /// The same by reason, every reason listed ([`SharedIndexInformer::refused_deltas_by`]).
    pub refused_by_reason: Vec<(RefusalReason, u64)>,
    /// Panics caught on the informer's own path ([`SharedIndexInformer::caught_panics`]).
    pub caught_panics: u64,
    /// Its consumers now, each with its counters (buffered, delivered, coalesced, lag,
    /// panics).
    pub handlers: Vec<HandlerRegistration>,
}

/// Why the queue or the cache refused an object (the label of
/// [`SharedIndexInformer::refused_deltas_by`] and of the `informer_refused_deltas_total`
/// metric).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum RefusalReason {
    /// The key function failed or panicked (the queue's, or the cache's).
    Key,
    /// The transform failed or panicked.
    Transform,
    /// An index function failed or panicked.
    Index,
    /// The queue or the cache refused it for another reason (a store of your own).
    Other,
    /// Applying the change panicked outside the user functions caught where they run.
    Panic,
}

impl RefusalReason {
    /// Every reason, in a fixed order.
    pub const ALL: [Self; 5] = [
        Self::Key,
        Self::Transform,
        Self::Index,
        Self::Other,
        Self::Panic,
    ];

    /// The reason as a metric label: `key`, `transform`, `index`, `other`, `panic`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Key => "key",
            Self::Transform => "transform",
            Self::Index => "index",
            Self::Other => "other",
            Self::Panic => "panic",
        }
    }

    fn of_queue(error: &informer_fifo::Error) -> Self {
        match error {
            informer_fifo::Error::Key(_) => Self::Key,
            informer_fifo::Error::Transform { .. } => Self::Transform,
            _ => Self::Other,
        }
    }

    fn of_cache(error: &informer_store::Error) -> Self {
        match error {
            informer_store::Error::Key(_) => Self::Key,
            informer_store::Error::IndexFunc { .. } => Self::Index,
            _ => Self::Other,
        }
    }
}

/// What an informer counts about the input it could not take.
#[derive(Debug, Default)]
struct Counters {
    /// Refusals, by [`RefusalReason`] (in the order of [`RefusalReason::ALL`]).
    refused: [AtomicU64; RefusalReason::ALL.len()],
    panics: AtomicU64,
    /// Changes processed (applied and distributed), and whether one is being processed now.
    processed: AtomicU64,
    processing: AtomicBool,
    /// The processed count a health check last saw change, and when.
    progress_seen: Mutex<Option<(u64, tokio::time::Instant)>>,
    /// When the informer started running.
    started_at: Mutex<Option<tokio::time::Instant>>,
}

impl Counters {
    fn refuse(&self, reason: RefusalReason) {
        self.refused[reason as usize].fetch_add(1, Ordering::Relaxed);
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
    name: Arc<str>,
    identity: SharedIdentity<K>,
    /// The identity's key, as the cache, the queue and the reflector file objects by.
    key_func: KeyFunc<K>,
    indexer: Arc<dyn Indexer<K>>,
    processor: Arc<Processor<K>>,
    settings: Mutex<Settings<K>>,
    /// Held while deltas are applied and distributed, and while a late handler takes its
    /// snapshot: nothing is missed or repeated between the two.
    block_deltas: Arc<Mutex<()>>,
    /// The queue, once running; read by `has_synced` (the informer's and its registrations').
    queue: Arc<Mutex<Option<Arc<dyn Queue<K>>>>>,
    /// Synced and stopped, and the signal every wait is woken by.
    upstream: Arc<Upstream>,
    counters: Arc<Counters>,
    /// The reflector, once running (its last synced version, its watch state).
    reflector: Mutex<Option<Arc<InformerReflector<K>>>>,
    started: AtomicBool,
}

impl<K> fmt::Debug for SharedIndexInformer<K> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SharedIndexInformer")
            .field("name", &self.name)
            .field("cached", &self.indexer.len())
            .field("processor", &self.processor)
            .field("started", &self.started.load(Ordering::Relaxed))
            .field("stopped", &self.upstream.is_stopped())
            .finish_non_exhaustive()
    }
}

/// Turns the informer loop's changes into notifications for the processor.
struct Distributor<K> {
    processor: Arc<Processor<K>>,
    identity: SharedIdentity<K>,
    name: Arc<str>,
    counters: Arc<Counters>,
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
struct ApplyDeltas<K> {
    distributor: Distributor<K>,
    indexer: Arc<dyn Indexer<K>>,
    block_deltas: Arc<Mutex<()>>,
    upstream: Arc<Upstream>,
    /// Found synced at the end of a batch: the wait for it has been woken.
    synced: bool,
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
        let outcome = catch_panic(|| {
            apply_deltas(
                &self.distributor,
                &*self.indexer,
                key.as_deref(),
                deltas,
                is_in_initial_list,
                &mut refused,
            );
        });
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

    fn end_batch(&mut self) {
        self.distributor.processor.flush();
        if !self.synced && self.upstream.has_synced() {
            self.synced = true;
            self.upstream.notify();
        }
    }
}

/// Marks the informer stopped and stops its handlers when a run ends, however it ends: a run
/// future dropped mid-way (a `select!`, a timeout, an aborted task, a runtime shut down) leaves
/// no thread blocked and no wait hanging. The consumers are not waited for then: each ends
/// after the notification it is handling.
struct StopInformer<'a, K: Send + Sync + 'static> {
    informer: &'a SharedIndexInformer<K>,
}

/// An informer dropped (never run, or run and ended) stops its consumers: a registration's
/// `wait_for_sync` then returns `false` and its `stopped` returns, instead of waiting for a
/// run that can no longer come.
impl<K> Drop for SharedIndexInformer<K> {
    fn drop(&mut self) {
        self.upstream.mark_stopped();
        drop(self.processor.stop());
    }
}

impl<K: Send + Sync + 'static> Drop for StopInformer<'_, K> {
    fn drop(&mut self) {
        drop(self.informer.stop_handlers());
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
            settings: Mutex::new(Settings {
                lister_watcher: Some(b.lister_watcher),
                default_resync: b.resync,
                resync_check_period: b.resync,
                transform: b.transform,
                watch_error_handler: b.watch_error_handler,
                queue_kind: b.queue,
                reflector_config: b.reflector_config,
                streaming_list: b.streaming_list,
                relist_by_page: b.relist_by_page,
            }),
            block_deltas: Arc::new(Mutex::new(())),
            queue,
            upstream,
            counters: Arc::new(Counters::default()),
            reflector: Mutex::new(None),
            started: AtomicBool::new(false),
        }
    }

    /// The informer's name, as its log lines give it.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Objects (or versions of objects) the queue or the cache refused so far: a key function,
    /// index function or transform that failed or panicked on them. Each was logged with the
    /// informer's name and the object's key; none stops the informer, and none leaves a
    /// superseded version in the cache as if current (see
    /// [`process_deltas`](crate::process_deltas) and [`Queue`]).
    pub fn refused_deltas(&self) -> u64 {
        RefusalReason::ALL
            .iter()
            .map(|&r| self.refused_deltas_by(r))
            .sum()
    }

    /// [`refused_deltas`](Self::refused_deltas) for one reason.
    pub fn refused_deltas_by(&self, reason: RefusalReason) -> u64 {
        self.counters.refused[reason as usize].load(Ordering::Relaxed)
    }

    /// Panics caught in user code on the informer's own path (key, index, transform and
    /// resource-version functions) so far; each was logged. Handler panics are counted per
    /// handler ([`HandlerRegistration::panics`]).
    pub fn caught_panics(&self) -> u64 {
        self.counters.panics.load(Ordering::Relaxed)
    }

    /// Whether the informer is synced and making progress, for readiness and liveness checks.
    ///
    /// Problems: it stopped; a consumer stopped while it runs (its panic policy); changes are
    /// waiting (queued or being processed) and none has been processed for
    /// [`stalled_after`](HealthOptions::stalled_after), as seen across health checks; no
    /// watch has been open for [`watch_down_after`](HealthOptions::watch_down_after). An
    /// informer not started yet has none (and is not synced).
    pub fn health(&self, options: &HealthOptions) -> Health
    where
        K: Send + Sync + 'static,
    {
        let mut problems = Vec::new();
        let now = tokio::time::Instant::now();
        if self.is_stopped() {
            problems.push(Problem::Stopped);
        } else if let Some(started) = *self.counters.started_at.lock() {
            problems.extend(
                self.processor
                    .registrations()
                    .iter()
                    .filter(|r| r.is_stopped())
                    .map(|r| Problem::HandlerStopped { handler: r.id() }),
            );
            let queued = self.queue.lock().as_ref().map_or(0, |q| q.len());
            let busy = self.counters.processing.load(Ordering::Relaxed);
            let processed = self.counters.processed.load(Ordering::Relaxed);
            let since = {
                let mut seen = self.counters.progress_seen.lock();
                match *seen {
                    Some((count, at)) if count == processed => at,
                    _ => {
                        // Progress since the last check (or the first check): from the start.
                        let at = if seen.is_none() { started } else { now };
                        *seen = Some((processed, at));
                        at
                    }
                }
            };
            let stalled_for = now.saturating_duration_since(since);
            if (queued > 0 || busy) && stalled_for >= options.stalled_after {
                problems.push(Problem::NoProgress {
                    queued,
                    stalled_for,
                });
            }
            let down = self.reflector.lock().as_ref().map(|r| r.watch_down_since());
            if let Some(since) = down.flatten() {
                let down_for = now.saturating_duration_since(since);
                if down_for >= options.watch_down_after {
                    problems.push(Problem::WatchDown { down_for });
                }
            }
        }
        Health {
            name: self.name.to_string(),
            synced: self.has_synced(),
            problems,
        }
    }

    /// A snapshot of the informer's state and counters, for metrics and health checks: cheap
    /// enough for every scrape (it reads counters, and counts each index's values).
    pub fn stats(&self) -> InformerStats
    where
        K: Send + Sync + 'static,
    {
        let indexes = self
            .indexer
            .get_indexers()
            .keys()
            .map(|name| {
                let values = self.indexer.list_index_func_values(name).len();
                (name.clone(), values)
            })
            .collect();
        InformerStats {
            name: self.name.to_string(),
            started: self.has_started(),
            synced: self.has_synced(),
            stopped: self.is_stopped(),
            objects: self.indexer.len(),
            indexes,
            queue: self
                .queue
                .lock()
                .as_ref()
                .map(|q| q.counts())
                .unwrap_or_default(),
            refused_deltas: self.refused_deltas(),
            refused_by_reason: RefusalReason::ALL
                .iter()
                .map(|&r| (r, self.refused_deltas_by(r)))
                .collect(),
            caught_panics: self.caught_panics(),
            handlers: self.processor.registrations(),
        }
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
        options: HandlerOptions,
    ) -> Result<HandlerRegistration, InformerError> {
        let (registration, _) = self.register(Consumer::Handler(Box::new(handler)), options)?;
        Ok(registration)
    }

    /// Registers an async handler, run as a tokio task of its own on the current runtime (one
    /// notification at a time, in order), with `options`. The same guarantees as
    /// [`add_event_handler`](Self::add_event_handler). Fails with
    /// [`InformerError::NoRuntime`] outside a tokio runtime.
    pub fn add_async_event_handler(
        &self,
        handler: impl AsyncResourceEventHandler<K> + 'static,
        options: HandlerOptions,
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
    pub fn subscribe(&self, options: HandlerOptions) -> Result<Subscription<K>, InformerError> {
        let (registration, cursor) = self.register(Consumer::Async, options)?;
        Ok(Subscription::new(cursor, registration))
    }

    /// Registers a consumer under client-go's resync rules, with the cache's snapshot if the
    /// informer is running.
    fn register(
        &self,
        consumer: Consumer<K>,
        options: HandlerOptions,
    ) -> Result<(HandlerRegistration, Cursor<K>), InformerError> {
        let mut settings = self.settings.lock();
        if self.upstream.is_stopped() {
            return Err(InformerError::Stopped);
        }
        let mut period = options
            .requested_resync()
            .unwrap_or(settings.default_resync);
        if !period.is_zero() {
            if period < MINIMUM_RESYNC_PERIOD {
                tracing::warn!(
                    ?period,
                    "resync period too small, raised to {MINIMUM_RESYNC_PERIOD:?}"
                );
                period = MINIMUM_RESYNC_PERIOD;
            }
            if period < settings.resync_check_period {
                if self.started.load(Ordering::Acquire) {
                    tracing::warn!(
                        ?period,
                        check = ?settings.resync_check_period,
                        "informer already started: resync period raised to its check period"
                    );
                    period = settings.resync_check_period;
                } else {
                    settings.resync_check_period = period;
                    self.processor.set_check_period(period);
                }
            }
        }
        let check = settings.resync_check_period;
        // Hold the processing lock while the snapshot is queued, so no change slips between.
        // The pop loop waits for it, but no queue write does: the reflector reads on.
        let _block = self.block_deltas.lock();
        let snapshot = if self.started.load(Ordering::Acquire) {
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
        self.reflector
            .lock()
            .as_ref()
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
        self.started.load(Ordering::Acquire)
    }

    /// Whether the informer has stopped (it never restarts).
    pub fn is_stopped(&self) -> bool {
        self.upstream.is_stopped()
    }

    /// Runs the informer until `stop` is cancelled, then shuts everything down promptly: the
    /// watch ends, the queue is closed and what is still queued is dropped (stopping takes no
    /// longer with a long queue), every consumer — removed ones included — stops: a handler after
    /// the notification it is handling, an async handler's task at its next await, a
    /// subscription at once (what is still buffered is dropped, as in client-go). This returns
    /// once the pop job and every handler have ended. A second call returns at once.
    ///
    /// Dropping this future instead (a `select!`, a timeout, an aborted task, a runtime shut
    /// down) cleans up the same way without waiting: the queue is closed, the consumers are
    /// stopped, the informer is marked stopped and every wait for it returns.
    pub async fn run(&self, stop: CancellationToken) -> Result<(), InformerError> {
        let (lister_watcher, queue, reflector_config, check, error_handler, lists, transformed) = {
            let mut settings = self.settings.lock();
            if self.started.swap(true, Ordering::AcqRel) {
                tracing::warn!(informer = %self.name, "the informer has already been started; it runs only once");
                return Ok(());
            }
            let Some(lister_watcher) = settings.lister_watcher.take() else {
                return Ok(());
            };
            let known = Arc::clone(&self.indexer);
            let transform = settings.transform.clone();
            let transformed = transform.is_some();
            let on_refused = self.refusal_handler();
            let queue: Arc<dyn Queue<K>> = match &settings.queue_kind {
                QueueKind::DeltaFifo => {
                    let mut options = DeltaFifoOptions::default()
                        .known_objects(known)
                        .emit_delta_type_replaced(true)
                        .on_refused(on_refused);
                    if let Some(t) = transform {
                        options = options.transform(t);
                    }
                    Arc::new(DeltaFifo::with_options(Arc::clone(&self.key_func), options))
                }
                QueueKind::InOrder => {
                    let mut options = InOrderFifoOptions::default()
                        .known_objects(known)
                        .on_refused(on_refused);
                    if let Some(t) = transform {
                        options = options.transform(t);
                    }
                    Arc::new(InOrderFifo::with_options(
                        Arc::clone(&self.key_func),
                        options,
                    ))
                }
                QueueKind::Custom(make) => {
                    make(Arc::clone(&self.key_func), known, transform, on_refused)
                }
            };
            (
                lister_watcher,
                queue,
                settings.reflector_config.take(),
                settings.resync_check_period,
                settings.watch_error_handler.clone(),
                (settings.streaming_list, settings.relist_by_page),
                transformed,
            )
        };
        // From here on, however the run ends, the informer ends stopped.
        let _stop = StopInformer { informer: self };
        *self.queue.lock() = Some(Arc::clone(&queue));

        let processor = Arc::clone(&self.processor);
        let mut reflector = Reflector::new(lister_watcher, Arc::clone(&queue))
            .with_name(self.name.to_string())
            .with_should_resync(move || processor.should_resync(tokio::time::Instant::now()));
        if !check.is_zero() {
            reflector = reflector.with_resync_period(check);
        }
        if let Some(handler) = error_handler {
            reflector = reflector.with_watch_error_handler(move |e| handler(e));
        }
        let (streaming, by_page) = lists;
        if streaming {
            reflector = reflector.with_streaming_list(Arc::clone(&self.key_func));
        }
        reflector = reflector.with_relist_by_page(by_page);
        if !transformed {
            reflector = reflector.with_list_interner(self.list_interner());
        }
        if let Some(config) = reflector_config {
            reflector = config(reflector);
        }
        let pop_loop = InformerLoop::new(Arc::clone(&queue), reflector)
            .with_pool(Arc::clone(self.processor.pool()));
        let reflector = Arc::clone(pop_loop.reflector());
        *self.reflector.lock() = Some(reflector);
        *self.counters.started_at.lock() = Some(tokio::time::Instant::now());

        let distributor = Distributor {
            processor: Arc::clone(&self.processor),
            identity: Arc::clone(&self.identity),
            name: Arc::clone(&self.name),
            counters: Arc::clone(&self.counters),
        };
        let apply = ApplyDeltas {
            distributor,
            indexer: Arc::clone(&self.indexer),
            block_deltas: Arc::clone(&self.block_deltas),
            upstream: Arc::clone(&self.upstream),
            synced: false,
        };
        // Every log line of the run (the reflector's included) carries the informer's name.
        let span = tracing::info_span!("informer", name = %self.name);
        tracing::Instrument::instrument(pop_loop.run(stop, apply), span).await;

        let consumers = self.stop_handlers();
        self.upstream
            .wait(|| consumers.iter().all(|c| c.is_stopped()), || false)
            .await;
        Ok(())
    }

    /// Marks the informer stopped and stops every consumer; returns their states, to wait for.
    /// Under the settings lock, so no consumer can be added in between and never be stopped.
    fn stop_handlers(&self) -> Vec<Arc<ListenerState>> {
        let _settings = self.settings.lock();
        self.upstream.mark_stopped();
        self.processor.stop()
    }

    /// The reflector's list interner: a listed object whose key and resourceVersion are those of
    /// the object cached is replaced by the cached one (the same version of the same object), so
    /// a relist does not hold two copies of what did not change. Not used with a transform: the
    /// cached object is the transformed one, and the queue would transform it again.
    fn list_interner(&self) -> informer_reflector::ListInterner<K> {
        let (key_func, indexer) = (Arc::clone(&self.key_func), Arc::clone(&self.indexer));
        let identity = Arc::clone(&self.identity);
        Arc::new(move |listed: Arc<K>| {
            // User functions: a panic here keeps the listed object (the queue then refuses it
            // and counts the panic, as it would without the interner).
            let same = informer_store::catch_panic(|| {
                let key = key_func(&listed).ok()?;
                let cached = indexer.get_by_key(&key)?;
                let v = identity.resource_version(&cached)?;
                (Some(v) == identity.resource_version(&listed)).then_some(cached)
            });
            match same {
                Ok(Some(cached)) => cached,
                _ => listed,
            }
        })
    }

    /// Counts and logs, with the informer's name and the key, every object the queue refuses.
    fn refusal_handler(&self) -> RefusalHandler {
        let counters = Arc::clone(&self.counters);
        let name = Arc::clone(&self.name);
        Arc::new(move |error: &informer_fifo::Error| {
            counters.refuse(RefusalReason::of_queue(error));
            if error.is_panic() {
                counters.panics.fetch_add(1, Ordering::Relaxed);
            }
            tracing::warn!(informer = %name, key = error.key(), %error, "the queue refused an object");
        })
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
        assert_eq!(i.settings.lock().resync_check_period, secs(4));
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
        assert_eq!(i.settings.lock().resync_check_period, MINIMUM_RESYNC_PERIOD);
    }

    #[test]
    fn after_start_a_smaller_period_is_raised_to_the_check_period() {
        let i = informer(secs(10));
        i.started.store(true, Ordering::Release);
        i.add_event_handler(
            ResourceEventHandlerFuncs::new(),
            HandlerOptions::new().resync_period(secs(3)),
        )
        .unwrap();
        assert_eq!(i.processor.resync_periods(), [secs(10)]);
        assert_eq!(i.settings.lock().resync_check_period, secs(10));
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
        assert_eq!(i.settings.lock().resync_check_period, Duration::ZERO);
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
