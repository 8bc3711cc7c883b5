//! The [`Reflector`]: list, then watch, forever, keeping a store equal to the server's state.

use std::fmt;
use std::marker::PhantomData;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use informer_store::{KeyFunc, ReflectorStore};
use parking_lot::RwLock;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::availability::{AvailabilityState, NotServedStep, is_list_not_found};
use crate::backoff::BackoffConfig;
use crate::error::{Error, ErrorKind};
use crate::lister_watcher::ListerWatcher;
use crate::observer::{ListReason, ReflectorObserver};
use crate::reaction::RunState;
use crate::sharding::ShardState;

/// The page size of a paginated list when none is configured (client-go's pager default).
pub const DEFAULT_PAGE_SIZE: u32 = 500;

/// The shortest server-side watch timeout the reflector asks for by default; each watch asks for
/// a random timeout in `[min, 2·min)`.
pub const DEFAULT_MIN_WATCH_TIMEOUT: Duration = Duration::from_secs(5 * 60);

/// A watch that has stayed open this long counts as a recovery: whatever ends it, the next
/// backoff delay starts again from [`BackoffConfig::initial`].
///
/// Ten seconds is long enough that a server which accepts watches and then fails them at once
/// (or after a burst of events) still sees the delays grow, and short enough that any recovery
/// between two outages of a restarting server is noticed.
pub const HEALTHY_WATCH: Duration = Duration::from_secs(10);

/// How long a running reflector may go without a watch before a failed cycle is logged at WARN
/// (once per outage, whatever the watch error handler does): errors it recovers from are logged
/// at DEBUG, but one that keeps it from the server this long is a person's business. Twice the
/// default backoff cap, as the informer's health check.
pub const WATCH_DOWN_WARNING: Duration = Duration::from_secs(60);

/// A watch that ends sooner than this with no event is an error.
pub(crate) const VERY_SHORT_WATCH: Duration = Duration::from_secs(1);

/// The internal-error retry window is restarted when the last error is older than this.
pub(crate) const INTERNAL_ERROR_RESET: Duration = Duration::from_secs(60);

/// Decides, each time the resync timer fires, whether to resync now.
pub type ShouldResync = Arc<dyn Fn() -> bool + Send + Sync>;

/// Called with every error that ends a list-and-watch cycle (before the backoff delay).
pub type WatchErrorHandler = Arc<dyn Fn(&Error) + Send + Sync>;

/// Lists and watches one collection through a [`ListerWatcher`] and writes every change into a
/// [`ReflectorStore`] (a store or a queue), forever, until stopped.
///
/// The behaviour is client-go's `tools/cache/reflector.go`:
///
/// * **List.** The first list asks for resource version `"0"` (any state, cheap, served from the
///   server's cache). Later lists ask for the last synced version (not older than it). Every
///   list asks for pages of [`DEFAULT_PAGE_SIZE`] (or [`with_page_size`](Self::with_page_size))
///   and follows `continue` to the last page. When a list fails with
///   410 Expired or a too-large version, the reflector at once lists again at `""` (a consistent
///   read). When a continue token expires, it makes one full list at the original version. The
///   result goes to [`ReflectorStore::replace`] with the list's resource version (or, with
///   [`with_relist_by_page`](Self::with_relist_by_page), page by page to
///   [`ReflectorStore::replace_part`]).
/// * **Watch** from the list's version, with bookmarks and a random server timeout in
///   `[min, 2·min)` (5–10 minutes by default). Each `ADDED` / `MODIFIED` / `DELETED` becomes
///   `add` / `update` / `delete`; a bookmark becomes [`ReflectorStore::bookmark`]. The resource
///   version of each event becomes the resume point — except the synthetic `ADDED` events that
///   open a watch started at `""` or `"0"`, whose versions are not ordered.
/// * **When a watch cannot start**: a server not ready (429, 503, connection refused) is asked
///   again after its Retry-After or on the readiness cadence (below); a too-large version relists at
///   `""`; anything else (410 Expired included) relists at the last version.
/// * **When a watch ends**: a clean close (or a transport failure mid-stream) resumes at once
///   from the last version, with no relist; a close within a second with no event is an error
///   ([`Error::VeryShortWatch`]); 429 waits for Retry-After (or a backoff delay) and re-watches;
///   an internal error re-watches at once while inside an optional retry window; a too-large
///   version relists at `""`; anything else (410 Expired included) relists at the last version.
/// * **Errors**: what the reflector does about an error depends only on its [`ErrorKind`] and
///   on the step it failed (a list, a continue page, a streaming list, a watch's start, a
///   watch's end), and one table in the source decides it for every step (the private function
///   `react` in `reflector.rs`); the bullets here and `docs/semantics.md` (RL-5, RL-6, RL-9,
///   RL-11, RL-15) describe that table.
/// * **Between cycles** the wait follows why the last one failed (docs/semantics.md, RL-23): a
///   410 relists at once (once until a watch is healthy again); a server not ready (429, 503,
///   connection refused, a streaming list closed before its end) is asked again after its
///   Retry-After or on a readiness cadence (250 ms, ×1.5 a step, at most 1.6 s, each up to 25 %
///   longer) that leaves the backoff alone, for up to a minute; anything else waits a backoff
///   delay (see [`BackoffConfig`]).
/// * **A resource not served** (a list answered `404 NotFound`: a CRD not installed yet, or
///   deleted) is waited for: the reflector lists again every
///   [`NOT_SERVED_POLL`](crate::NOT_SERVED_POLL) (5 s) without growing the backoff, says so
///   once at INFO and through [`availability`](Self::availability), and starts as soon as a
///   list succeeds. A resource that was served and goes away has its cached objects deleted
///   (one empty replace), or, with [`with_stop_when_not_served`](Self::with_stop_when_not_served),
///   ends the run.
/// * **Resync**: with a resync period, [`ReflectorStore::resync`] is called on that period while
///   watching, when the [`ShouldResync`] callback (if any) agrees.
/// * **Streaming list** (optional, [`with_streaming_list`](Self::with_streaming_list)): the
///   initial state comes as a watch with `sendInitialEvents=true`, collected aside and handed to
///   `replace` at the initial-events-end bookmark; the same stream then goes on as the watch.
///   A server not ready is asked again (as above), 410 Expired and a too-large version retry it
///   from `""`, anything else falls back to a list.
///
/// It stops promptly when its [`CancellationToken`] is cancelled: every wait and request is
/// abandoned, and no store write is ever left half-done (each write is one synchronous call).
///
/// # Example
///
/// ```
/// use std::sync::Arc;
/// use informer_reflector::{FakeListerWatcher, ListPage, Reflector};
/// use informer_store::{key_func, KnownObjects, ThreadSafeStore};
/// use tokio_util::sync::CancellationToken;
///
/// # #[tokio::main(flavor = "current_thread")] async fn main() {
/// let fake = Arc::new(FakeListerWatcher::new());
/// fake.push_list(ListPage::new(vec![Arc::new("a".to_string())], "7"));
/// let store = Arc::new(ThreadSafeStore::new(key_func(|s: &String| Ok(s.clone()))));
///
/// let reflector = Arc::new(Reflector::new(fake.clone(), store.clone()));
/// let stop = CancellationToken::new();
/// let task = tokio::spawn({
///     let (reflector, stop) = (reflector.clone(), stop.clone());
///     async move { reflector.run(stop).await }
/// });
/// fake.wait_for_requests(2).await; // the list, then the watch
/// assert_eq!(store.list_keys(), ["a"]);
/// assert_eq!(reflector.last_sync_resource_version(), "7");
/// stop.cancel();
/// task.await.unwrap();
/// # }
/// ```
pub struct Reflector<K, L, S> {
    pub(crate) lister_watcher: L,
    pub(crate) store: S,
    pub(crate) name: String,
    pub(crate) config: Config<K>,
    last_sync_resource_version: RwLock<String>,
    running: AtomicBool,
    streaming_fallbacks: AtomicU64,
    /// Since when no watch stream is open (`None` while one is).
    watch_down_since: parking_lot::Mutex<Option<Instant>>,
    /// Whether the server serves the resource.
    pub(crate) availability: AvailabilityState,
    /// The shard set it keeps, if any.
    pub(crate) shards: ShardState<K>,
    /// Some list has handed part of itself to the store (set by a first list too, even one
    /// that then failed): from then on the store may hold objects a list can be interned
    /// against.
    pub(crate) handed_parts: AtomicBool,
    _object: PhantomData<fn() -> K>,
}

/// Clears the running flag when a run ends, however it ends (a dropped future included).
struct Running<'a>(&'a AtomicBool);

impl Drop for Running<'_> {
    fn drop(&mut self) {
        self.0.store(false, Ordering::Release);
    }
}

pub(crate) struct Config<K> {
    pub(crate) resync_period: Option<Duration>,
    pub(crate) should_resync: Option<ShouldResync>,
    pub(crate) min_watch_timeout: Duration,
    pub(crate) backoff: BackoffConfig,
    pub(crate) page_size: Option<u32>,
    pub(crate) label_selector: Option<String>,
    pub(crate) field_selector: Option<String>,
    pub(crate) max_internal_error_retry: Duration,
    streaming_list_key: Option<KeyFunc<K>>,
    watch_error_handler: WatchErrorHandler,
    pub(crate) seed: Option<u64>,
    pub(crate) observer: Option<Arc<dyn ReflectorObserver>>,
    pub(crate) list_interner: Option<ListInterner<K>>,
    pub(crate) relist_by_page: bool,
    pub(crate) not_served_poll: Duration,
}

/// Called on every listed object as its page arrives; returns the object to keep (see
/// [`Reflector::with_list_interner`]).
pub type ListInterner<K> = Arc<dyn Fn(Arc<K>) -> Arc<K> + Send + Sync>;

impl<K, L, S> fmt::Debug for Reflector<K, L, S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Reflector")
            .field("name", &self.name)
            .field(
                "last_sync_resource_version",
                &*self.last_sync_resource_version.read(),
            )
            .field("resync_period", &self.config.resync_period)
            .field("min_watch_timeout", &self.config.min_watch_timeout)
            .field("backoff", &self.config.backoff)
            .field("page_size", &self.config.page_size)
            .field("streaming_list", &self.config.streaming_list_key.is_some())
            .finish_non_exhaustive()
    }
}

impl<K, L, S> Reflector<K, L, S>
where
    K: Send + Sync + 'static,
    L: ListerWatcher<K>,
    S: ReflectorStore<K>,
{
    /// A reflector that fills `store` from `lister_watcher`, with client-go's defaults: no resync,
    /// watch timeouts in [5, 10) minutes, pages of 500, the default [`BackoffConfig`], list and
    /// watch (no streaming list), and a watch error handler that logs through `tracing`.
    pub fn new(lister_watcher: L, store: S) -> Self {
        Self {
            lister_watcher,
            store,
            name: std::any::type_name::<K>().to_owned(),
            config: Config {
                resync_period: None,
                should_resync: None,
                min_watch_timeout: DEFAULT_MIN_WATCH_TIMEOUT,
                backoff: BackoffConfig::default(),
                page_size: None,
                label_selector: None,
                field_selector: None,
                max_internal_error_retry: Duration::ZERO,
                streaming_list_key: None,
                watch_error_handler: Arc::new(default_watch_error_handler),
                seed: None,
                observer: None,
                list_interner: None,
                relist_by_page: false,
                not_served_poll: crate::availability::NOT_SERVED_POLL,
            },
            last_sync_resource_version: RwLock::new(String::new()),
            running: AtomicBool::new(false),
            streaming_fallbacks: AtomicU64::new(0),
            watch_down_since: parking_lot::Mutex::new(Some(Instant::now())),
            availability: AvailabilityState::default(),
            shards: ShardState::default(),
            handed_parts: AtomicBool::new(false),
            _object: PhantomData,
        }
    }

    /// Names the reflector in its log lines (default: the object type's name).
    pub fn with_name(mut self, name: impl Into<String>) -> Self {
        self.name = name.into();
        self
    }

    /// Calls [`ReflectorStore::resync`] every `period` while watching; zero disables it.
    pub fn with_resync_period(mut self, period: Duration) -> Self {
        self.config.resync_period = (!period.is_zero()).then_some(period);
        self
    }

    /// Asks `should_resync` each time the resync timer fires; a resync happens only if it says
    /// yes.
    pub fn with_should_resync(
        mut self,
        should_resync: impl Fn() -> bool + Send + Sync + 'static,
    ) -> Self {
        self.config.should_resync = Some(Arc::new(should_resync));
        self
    }

    /// Each watch asks the server for a random timeout in `[min, 2·min)` (whole seconds, at least
    /// one). client-go only lets this grow beyond 5 minutes; here any value is accepted, so tests
    /// and simulators can use short watches.
    pub fn with_min_watch_timeout(mut self, min: Duration) -> Self {
        self.config.min_watch_timeout = min;
        self
    }

    /// Replaces the backoff between list-and-watch cycles and between retried watches.
    pub fn with_backoff(mut self, backoff: BackoffConfig) -> Self {
        self.config.backoff = backoff;
        self
    }

    /// Uses pages of `page_size` for every list (client-go's `WatchListPageSize`); without it,
    /// or with zero, pages of [`DEFAULT_PAGE_SIZE`]. Every list sends the limit, at `"0"` and at a
    /// version too: a server whose watch cache serves such lists ignores it, and any other
    /// server pages instead of reading the whole collection into one response.
    pub fn with_page_size(mut self, page_size: u32) -> Self {
        self.config.page_size = (page_size != 0).then_some(page_size);
        self
    }

    /// Sends this label selector on every list and watch.
    pub fn with_label_selector(mut self, selector: impl Into<String>) -> Self {
        self.config.label_selector = Some(selector.into());
        self
    }

    /// Sends this field selector on every list and watch.
    pub fn with_field_selector(mut self, selector: impl Into<String>) -> Self {
        self.config.field_selector = Some(selector.into());
        self
    }

    /// Re-watches (instead of relisting) after internal errors for up to `window` from the first
    /// of a series (client-go's `MaxInternalErrorRetryDuration`; zero, the default, disables it).
    pub fn with_max_internal_error_retry(mut self, window: Duration) -> Self {
        self.config.max_internal_error_retry = window;
        self
    }

    /// Gets the initial state as a streaming list (`sendInitialEvents=true`), for the first
    /// list and every relist, falling back to a list when the server refuses. `key` files the
    /// objects of the initial state while it is collected; it must be the store's key function.
    ///
    /// A lister-watcher that cannot serve streaming lists
    /// ([`ListerWatcher::supports_streaming_list`] `false`, as a test fake) keeps the reflector
    /// on list and watch: the setting is then ignored (logged at debug level).
    pub fn with_streaming_list(mut self, key: KeyFunc<K>) -> Self {
        if self.lister_watcher.supports_streaming_list() {
            self.config.streaming_list_key = Some(key);
        } else {
            tracing::debug!(reflector = %self.name, "the lister-watcher cannot serve streaming lists; listing and watching instead");
        }
        self
    }

    /// Replaces the handler called with every error that ends a list-and-watch cycle.
    pub fn with_watch_error_handler(
        mut self,
        handler: impl Fn(&Error) + Send + Sync + 'static,
    ) -> Self {
        self.config.watch_error_handler = Arc::new(handler);
        self
    }

    /// Tells `observer` of every list, watch, event, resourceVersion change, backoff wait and
    /// 429 (see [`ReflectorObserver`]): the hooks of a metrics layer.
    pub fn with_observer(mut self, observer: Arc<dyn ReflectorObserver>) -> Self {
        self.config.observer = Some(observer);
        self
    }

    /// Passes every listed object, as its page (or streamed initial event) arrives, through
    /// `interner`, and keeps what it returns. An informer uses it to keep the object it has
    /// cached already when a relist brings the same version of it: a relist after a 410 then
    /// holds, at its peak, the old cache and the objects that changed, not two copies of the
    /// collection (client-go holds both). The interner must return an object equal to the one
    /// it is given.
    ///
    /// A list made before anything has been handed to the store (the first list) is not
    /// passed through it: the store holds nothing of this reflector's to keep, and on the
    /// first sync a lookup per object would only cost time.
    pub fn with_list_interner(mut self, interner: ListInterner<K>) -> Self {
        self.config.list_interner = Some(interner);
        self
    }

    /// Hands each page of every relist to the store as it arrives ([`ReflectorStore::replace_part`],
    /// then [`ReflectorStore::replace_parts_done`] after the last page) instead of collecting
    /// every page and calling [`ReflectorStore::replace`] once. A queue applies each page at
    /// once, so the objects a relist replaces are freed while the rest of the list arrives: the
    /// relist's peak memory is the cache and a few pages, not two copies of the collection. A
    /// store that cannot apply parts still replaces at once. Off by default (client-go collects
    /// the whole list).
    ///
    /// The first list (until a list has succeeded), and the first streaming list, go by page
    /// whatever this says: nothing is cached yet, so there is nothing to replace atomically,
    /// and a queue counts as synced only at the end (client-go collects the whole first list:
    /// its peak is the list decoded, where ours is what its consumer keeps of it and a page).
    ///
    /// What changes for the consumer: the listed objects of a relist are delivered while it is
    /// still listing, the deletions of what it lacks after its last page (as with one
    /// `replace`); and a relist that fails after some pages leaves those pages applied (each
    /// object a version the server listed) with nothing deleted, until the next list succeeds.
    /// A page longer than the page size (a server that ignores the limit and answers with
    /// everything) is handed to the store a page size at a time as its objects are decoded
    /// ([`ListSink`](crate::ListSink)). A streaming list ([`with_streaming_list`](Self::with_streaming_list))
    /// is handed over a quarter of a page size of initial events at a time, and ended at its
    /// end bookmark.
    pub fn with_relist_by_page(mut self, enabled: bool) -> Self {
        self.config.relist_by_page = enabled;
        self
    }

    /// Tells the observer the encoding of the response just read (a list page, a watch
    /// opened), if the lister-watcher tells it.
    pub(crate) fn observe_response(&self) {
        if let Some(observer) = &self.config.observer
            && let Some(encoding) = self.lister_watcher.last_encoding()
        {
            observer.response(encoding);
        }
    }

    /// Seeds the random numbers (backoff jitter, watch timeouts), making a run reproducible.
    pub fn with_seed(mut self, seed: u64) -> Self {
        self.config.seed = Some(seed);
        self
    }

    /// The resource version of the last list, or of the last watch event or bookmark applied
    /// (`""` before the first list). It is not synchronised with the store.
    pub fn last_sync_resource_version(&self) -> String {
        self.last_sync_resource_version.read().clone()
    }

    /// How many times a streaming list failed and this reflector fell back to a list (0 without
    /// [`with_streaming_list`](Self::with_streaming_list)). Only the first fallback is logged
    /// as a warning.
    pub fn streaming_fallbacks(&self) -> u64 {
        self.streaming_fallbacks.load(Ordering::Relaxed)
    }

    /// Since when the reflector has had no watch stream open (listing, backing off, or not
    /// running); `None` while a watch (or a streaming list's stream) is open. A health check
    /// reads it: a watch not re-established for longer than the backoff cap is a stall.
    pub fn watch_down_since(&self) -> Option<Instant> {
        *self.watch_down_since.lock()
    }

    pub(crate) fn set_watching(&self, watching: bool) {
        let mut since = self.watch_down_since.lock();
        match (watching, *since) {
            (true, _) => *since = None,
            (false, None) => *since = Some(Instant::now()),
            (false, Some(_)) => {}
        }
    }

    /// The store the reflector writes to.
    pub fn store(&self) -> &S {
        &self.store
    }

    /// The name used in log lines.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Lists and watches until `stop` is cancelled, recovering from every error.
    ///
    /// Errors that end a cycle go to the watch error handler; then the reflector waits a backoff
    /// delay and lists again. A reflector runs once at a time: a second `run` while one is
    /// going returns at once (with a warning), so two loops never write the same store.
    pub async fn run(&self, stop: CancellationToken) {
        if self.running.swap(true, Ordering::AcqRel) {
            tracing::warn!(reflector = %self.name, "already running; ignoring a second run");
            return;
        }
        let _running = Running(&self.running);
        let mut state = RunState::new(&self.config);
        tracing::debug!(reflector = %self.name, "starting");
        let started = Instant::now();
        let mut warned_outage = None;
        loop {
            let cycle = tokio::select! {
                biased;
                () = stop.cancelled() => break,
                cycle = self.list_and_watch(&mut state) => cycle,
            };
            let delay = match cycle {
                Ok(()) => state.backoff_delay(),
                Err(err) => {
                    state.list_reason = ListReason::after(err.kind());
                    (self.config.watch_error_handler)(&err);
                    if !is_list_not_found(&err) {
                        self.warn_if_down_long(started, &mut warned_outage, &err);
                    } else if self.mark_not_served(&err) == NotServedStep::Stop {
                        break;
                    }
                    cycle_delay(&mut state, err.kind())
                }
            };
            tokio::select! {
                biased;
                () = stop.cancelled() => break,
                () = tokio::time::sleep(delay) => {}
            }
        }
        tracing::debug!(reflector = %self.name, "stopped");
    }

    /// Logs at WARN, once per outage, a failed cycle after [`WATCH_DOWN_WARNING`] without a
    /// watch (counted from `started` at the earliest). `warned` holds the outage already told.
    fn warn_if_down_long(&self, started: Instant, warned: &mut Option<Instant>, err: &Error) {
        let Some(since) = self.watch_down_since() else {
            return;
        };
        let down = since.max(started).elapsed();
        if down >= WATCH_DOWN_WARNING && *warned != Some(since) {
            *warned = Some(since);
            tracing::warn!(
                reflector = %self.name,
                error = %err,
                "no watch for {}s: the cache is not following the server; still retrying",
                down.as_secs()
            );
        }
    }

    /// One cycle: the initial state (streaming list or list), then watches until one ends in a
    /// way that needs a relist.
    async fn list_and_watch(&self, state: &mut RunState) -> Result<(), Error> {
        loop {
            self.begin_shard_cycle();
            self.list_and_watch_once(state).await?;
            if !self.shards_changed() {
                return Ok(());
            }
            tracing::debug!(reflector = %self.name, "the shard set changed, relisting");
        }
    }

    /// One list (or streaming list) and the watches after it, with the shard set taken.
    async fn list_and_watch_once(&self, state: &mut RunState) -> Result<(), Error> {
        let mut stream = None;
        if let Some(key) = &self.config.streaming_list_key {
            match self.streaming_list(state, key).await {
                Ok(s) => stream = Some(s),
                // Not a refusal of streaming: the list that follows tells whether it is served.
                Err(err) if err.kind() == ErrorKind::NotServed => {}
                Err(err) => self.note_streaming_fallback(&err),
            }
        }
        let propagate_from_start = stream.is_some();
        if stream.is_none() {
            self.list(state).await?;
        }
        self.watch(state, stream.map(|s| (s, propagate_from_start)))
            .await
    }

    /// Counts a fallback from a streaming list to a list, and logs it: the first one of this
    /// reflector at info level with the server's answer (a server that cannot stream lists, e.g.
    /// on etcd 3.4, says why; the fallback is the recovery, nothing for a user to do), every
    /// later one at debug level.
    fn note_streaming_fallback(&self, err: &Error) {
        let before = self.streaming_fallbacks.fetch_add(1, Ordering::Relaxed);
        if before == 0 {
            tracing::info!(reflector = %self.name, error = %err, "the server refused a streaming list; falling back to list (further fallbacks are logged at debug level)");
        } else {
            tracing::debug!(reflector = %self.name, error = %err, "streaming list failed, falling back to list");
        }
    }

    pub(crate) fn set_last_sync_resource_version(&self, rv: &str) {
        let mut last = self.last_sync_resource_version.write();
        if *last != rv {
            rv.clone_into(&mut last);
            drop(last);
            if let Some(observer) = &self.config.observer {
                observer.synced_to(rv);
            }
        }
    }
}

/// The default watch error handler: logs through `tracing`, at WARN what a person must act on
/// ([`Error::needs_action`]: credentials, permissions, a request the server refuses), at
/// DEBUG what the reflector recovers from by itself (a cut connection, a 410, a server
/// restarting) and a resource not served (`404`: the reflector waits for it, and says so once
/// at INFO), which the observer's metrics count. However it logs, a reflector that has had
/// no watch for [`WATCH_DOWN_WARNING`] says so at WARN, once per outage (not while its
/// resource is not served).
pub fn default_watch_error_handler(err: &Error) {
    let what = match err {
        _ if err.kind() == ErrorKind::Expired => "watch closed: resource version expired",
        Error::VeryShortWatch => "watch ended with an error",
        Error::List(_) => "failed to list",
        Error::StreamingList(_) => "failed to get the initial state",
        _ => "failed to watch",
    };
    if err.needs_action() && err.kind() != ErrorKind::NotServed {
        tracing::warn!(error = %err, "{what}; retrying, but the server will refuse until this is fixed");
    } else {
        tracing::debug!(error = %err, "{what}; retrying");
    }
}

/// The wait before the cycle after one that failed with an error of `kind`:
///
/// * a 410 is answered by the relist at once: the relist is the recovery (a restarted watch
///   cache starts at the current revision), not a failure to back off from; once until a watch
///   is healthy again, so that a 410 loop waits backoff delays;
/// * a server not ready (a refused connection, 503, 429) is asked again on the readiness
///   cadence (or after its Retry-After), without growing the backoff, for up to
///   `READY_PATIENCE`;
/// * a resource not served (404) is listed again on the calm cadence of
///   [`NOT_SERVED_POLL`](crate::NOT_SERVED_POLL), for as long as it takes, without growing
///   the backoff: the server answers, it only lacks the resource;
/// * anything else waits the next backoff delay.
fn cycle_delay(state: &mut RunState, kind: ErrorKind) -> Duration {
    match kind {
        ErrorKind::NotServed => state.not_served_delay(),
        ErrorKind::Expired if !state.relisted_at_once => {
            state.relisted_at_once = true;
            Duration::ZERO
        }
        ErrorKind::TooManyRequests { retry_after } => state.ready_delay(retry_after),
        ErrorKind::ConnectionRefused | ErrorKind::ServiceUnavailable => state.ready_delay(None),
        _ => state.backoff_delay(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::lister_watcher::{ListPage, ListParams, WatchEvent, WatchParams, WatchStream};
    use crate::observer::ListOutcome;

    /// What an observer heard of responses, lists and watch starts, in order.
    #[derive(Debug, Clone, PartialEq, Eq)]
    enum Heard {
        Response(&'static str),
        List(bool, Result<usize, ErrorKind>),
        WatchStarted,
    }

    #[derive(Default)]
    struct Ears(parking_lot::Mutex<Vec<Heard>>);

    impl ReflectorObserver for Ears {
        fn response(&self, encoding: &'static str) {
            self.0.lock().push(Heard::Response(encoding));
        }
        fn list(&self, outcome: ListOutcome) {
            self.0
                .lock()
                .push(Heard::List(outcome.streaming, outcome.result));
        }
        fn watch_started(&self) {
            self.0.lock().push(Heard::WatchStarted);
        }
    }

    /// A scripted lister-watcher that tells an encoding for every answer, a failed one too:
    /// `json` for lists, `protobuf` for watches.
    struct Telling {
        fake: crate::FakeListerWatcher<String>,
        last: parking_lot::Mutex<Option<&'static str>>,
    }

    impl ListerWatcher<String> for Telling {
        async fn list(&self, params: &ListParams) -> Result<ListPage<String>, Error> {
            let page = self.fake.list(params).await;
            *self.last.lock() = Some("json");
            page
        }

        async fn watch(&self, params: &WatchParams) -> Result<WatchStream<String>, Error> {
            let stream = self.fake.watch(params).await;
            *self.last.lock() = Some("protobuf");
            stream
        }

        fn last_encoding(&self) -> Option<&'static str> {
            *self.last.lock()
        }

        fn supports_streaming_list(&self) -> bool {
            self.fake.supports_streaming_list()
        }
    }

    /// Runs `reflector` until `done` holds, or an hour of its time (on the paused clock) has
    /// passed, then stops it.
    async fn run_until<L>(
        reflector: Reflector<String, L, Arc<informer_store::ThreadSafeStore<String>>>,
        done: impl Fn() -> bool,
    ) where
        L: ListerWatcher<String> + Send + Sync + 'static,
    {
        let reflector = Arc::new(reflector);
        let stop = CancellationToken::new();
        let task = tokio::spawn({
            let (reflector, stop) = (Arc::clone(&reflector), stop.clone());
            async move { reflector.run(stop).await }
        });
        for _ in 0..3_600_000 {
            if done() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        stop.cancel();
        task.await.expect("the reflector's task");
    }

    /// Runs a reflector over `lister_watcher` (boxed, as an informer keeps it) until `ears`
    /// heard `until` things, and returns what they heard.
    async fn heard(
        lister_watcher: impl ListerWatcher<String> + 'static,
        streaming: bool,
        until: usize,
    ) -> Vec<Heard> {
        let ears = Arc::new(Ears::default());
        let mut reflector = Reflector::new(
            crate::BoxListerWatcher::new(lister_watcher),
            Arc::new(informer_store::ThreadSafeStore::new(
                informer_store::key_func(|s: &String| Ok(s.clone())),
            )),
        )
        .with_seed(3)
        .with_observer(Arc::clone(&ears) as Arc<dyn ReflectorObserver>);
        if streaming {
            reflector =
                reflector.with_streaming_list(informer_store::key_func(|s: &String| Ok(s.clone())));
        }
        run_until(reflector, || ears.0.lock().len() >= until).await;
        ears.0.lock().clone()
    }

    fn one(name: &str) -> Arc<String> {
        Arc::new(name.to_owned())
    }

    #[tokio::test(start_paused = true)]
    async fn each_page_and_each_watch_opened_is_told_with_its_encoding_and_failures_are_not() {
        let fake = crate::FakeListerWatcher::new();
        fake.push_list_error(Error::Api(crate::Status::internal_error("boom")));
        fake.push_list(ListPage::new(vec![one("a"), one("b")], "10").with_continue("next"));
        fake.push_list(ListPage::new(vec![one("c")], "10"));
        fake.push_watch_error(Error::Api(crate::Status::internal_error("boom")));
        fake.push_list(ListPage::new(vec![one("a")], "12"));
        fake.push_watch(vec![crate::WatchStep::Hang]);
        let telling = Telling {
            fake,
            last: parking_lot::Mutex::new(None),
        };
        use Heard::*;
        assert_eq!(
            heard(telling, false, 7).await,
            [
                List(false, Err(ErrorKind::InternalError)),
                Response("json"),
                Response("json"),
                List(false, Ok(3)),
                Response("json"),
                List(false, Ok(1)),
                Response("protobuf"),
                WatchStarted,
            ]
        );
    }

    #[tokio::test(start_paused = true)]
    async fn the_watch_of_a_streaming_list_is_told_too() {
        let fake = crate::FakeListerWatcher::new().supporting_streaming_lists();
        fake.push_watch(vec![
            crate::WatchStep::Event(WatchEvent::added(one("a"), "5")),
            crate::WatchStep::Event(WatchEvent::initial_events_end("5")),
            crate::WatchStep::Hang,
        ]);
        let telling = Telling {
            fake,
            last: parking_lot::Mutex::new(None),
        };
        use Heard::*;
        assert_eq!(
            heard(telling, true, 3).await,
            [Response("protobuf"), List(true, Ok(1)), WatchStarted]
        );
    }

    /// Runs a reflector over `fake` until it has taken everything scripted, its interner
    /// counting the objects it is given; returns the count.
    async fn interned(fake: crate::FakeListerWatcher<String>, streaming: bool) -> usize {
        let fake = Arc::new(fake);
        let calls = Arc::new(AtomicU64::new(0));
        let counting = Arc::clone(&calls);
        let key = informer_store::key_func(|s: &String| Ok(s.clone()));
        let mut reflector = Reflector::new(
            Arc::clone(&fake),
            Arc::new(informer_store::ThreadSafeStore::new(key.clone())),
        )
        .with_seed(3)
        .with_list_interner(Arc::new(move |object| {
            counting.fetch_add(1, Ordering::Relaxed);
            object
        }));
        if streaming {
            reflector = reflector.with_streaming_list(key);
        }
        run_until(reflector, || fake.pending() == (0, 0)).await;
        assert_eq!(fake.pending(), (0, 0), "the script was not taken whole");
        calls.load(Ordering::Relaxed) as usize
    }

    #[tokio::test(start_paused = true)]
    async fn the_first_list_is_not_interned_and_the_lists_after_it_are() {
        let boom = || Error::Api(crate::Status::internal_error("boom"));
        let fake = crate::FakeListerWatcher::new();
        fake.push_list(ListPage::new(vec![one("a"), one("b")], "10"));
        fake.push_watch_error(boom());
        fake.push_list(ListPage::new(vec![one("a"), one("c"), one("d")], "12"));
        fake.push_watch(vec![crate::WatchStep::Hang]);
        assert_eq!(interned(fake, false).await, 3, "the relist's objects only");

        // A first list that fails after handing a page over: its retry may find that page
        // in the store, and is interned.
        let fake = crate::FakeListerWatcher::new();
        fake.push_list(ListPage::new(vec![one("a"), one("b")], "10").with_continue("next"));
        fake.push_list_error(boom());
        fake.push_list(ListPage::new(vec![one("a"), one("b"), one("c")], "11"));
        fake.push_watch(vec![crate::WatchStep::Hang]);
        assert_eq!(interned(fake, false).await, 3, "the retry's objects");

        let fake = crate::FakeListerWatcher::new().supporting_streaming_lists();
        fake.push_watch(vec![
            crate::WatchStep::Event(WatchEvent::added(one("a"), "5")),
            crate::WatchStep::Event(WatchEvent::added(one("b"), "5")),
            crate::WatchStep::Event(WatchEvent::initial_events_end("5")),
            crate::WatchStep::Fail(boom()),
        ]);
        fake.push_watch(vec![
            crate::WatchStep::Event(WatchEvent::added(one("a"), "6")),
            crate::WatchStep::Event(WatchEvent::initial_events_end("6")),
            crate::WatchStep::Hang,
        ]);
        assert_eq!(
            interned(fake, true).await,
            1,
            "the second streaming list's object"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_lister_watcher_that_does_not_tell_is_never_reported() {
        let fake = crate::FakeListerWatcher::new();
        fake.push_list(ListPage::new(vec![one("a")], "10"));
        fake.push_watch(vec![crate::WatchStep::Hang]);
        use Heard::*;
        assert_eq!(
            heard(fake, false, 2).await,
            [List(false, Ok(1)), WatchStarted]
        );
    }
}
