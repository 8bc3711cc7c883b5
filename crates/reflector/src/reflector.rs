//! The [`Reflector`]: list, then watch, forever, keeping a store equal to the server's state.

use std::collections::HashMap;
use std::fmt;
use std::marker::PhantomData;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use futures::StreamExt;
use informer_store::{KeyFunc, ReflectorStore, ReplaceParts};
use parking_lot::RwLock;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::backoff::{Backoff, BackoffConfig};
use crate::error::{Error, ErrorKind};
use crate::lister_watcher::{
    ListPage, ListParams, ListSink, ListerWatcher, ResourceVersionMatch, WatchEvent, WatchParams,
    WatchStream,
};
use crate::observer::{EventType, ListOutcome, ListReason, ReflectorObserver, WatchEnd};

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
const VERY_SHORT_WATCH: Duration = Duration::from_secs(1);

/// The internal-error retry window is restarted when the last error is older than this.
const INTERNAL_ERROR_RESET: Duration = Duration::from_secs(60);

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
/// * **When a watch cannot start**: 429 waits for Retry-After (or a backoff delay) and
///   re-watches; connection refused backs off and re-watches; a too-large version relists at
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
/// * **Backoff** between list-and-watch cycles: see [`BackoffConfig`].
/// * **Resync**: with a resync period, [`ReflectorStore::resync`] is called on that period while
///   watching, when the [`ShouldResync`] callback (if any) agrees.
/// * **Streaming list** (optional, [`with_streaming_list`](Self::with_streaming_list)): the
///   initial state comes as a watch with `sendInitialEvents=true`, collected aside and handed to
///   `replace` at the initial-events-end bookmark; the same stream then goes on as the watch.
///   429 and connection refused wait and retry it, 410 Expired and a too-large version retry it
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
    lister_watcher: L,
    store: S,
    name: String,
    config: Config<K>,
    last_sync_resource_version: RwLock<String>,
    running: AtomicBool,
    streaming_fallbacks: AtomicU64,
    /// Since when no watch stream is open (`None` while one is).
    watch_down_since: parking_lot::Mutex<Option<Instant>>,
    _object: PhantomData<fn() -> K>,
}

/// Clears the running flag when a run ends, however it ends (a dropped future included).
struct Running<'a>(&'a AtomicBool);

impl Drop for Running<'_> {
    fn drop(&mut self) {
        self.0.store(false, Ordering::Release);
    }
}

struct Config<K> {
    resync_period: Option<Duration>,
    should_resync: Option<ShouldResync>,
    min_watch_timeout: Duration,
    backoff: BackoffConfig,
    page_size: Option<u32>,
    label_selector: Option<String>,
    field_selector: Option<String>,
    max_internal_error_retry: Duration,
    streaming_list_key: Option<KeyFunc<K>>,
    watch_error_handler: WatchErrorHandler,
    seed: Option<u64>,
    observer: Option<Arc<dyn ReflectorObserver>>,
    list_interner: Option<ListInterner<K>>,
    relist_by_page: bool,
}

/// Called on every listed object as its page arrives; returns the object to keep (see
/// [`Reflector::with_list_interner`]).
pub type ListInterner<K> = Arc<dyn Fn(Arc<K>) -> Arc<K> + Send + Sync>;

/// What a list has collected so far.
struct Listed<K> {
    items: Collected<K>,
    /// Objects listed (over every page).
    count: usize,
    /// The last page's resource version.
    resource_version: String,
}

/// A list's pages: concatenated, or handed to the store page by page.
enum Collected<K> {
    Whole(Vec<Arc<K>>),
    Parts(ReplaceParts<K>),
}

impl<K> Listed<K> {
    /// Forgets the pages so far (a list that starts again).
    fn restart(&mut self) {
        self.count = 0;
        match &mut self.items {
            Collected::Whole(all) => all.clear(),
            Collected::Parts(parts) => parts.restart(),
        }
    }
}

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
            },
            last_sync_resource_version: RwLock::new(String::new()),
            running: AtomicBool::new(false),
            streaming_fallbacks: AtomicU64::new(0),
            watch_down_since: parking_lot::Mutex::new(Some(Instant::now())),
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

    /// Gets the initial state as a streaming list (`sendInitialEvents=true`), falling back to a
    /// list when the server refuses. `key` files the objects of the initial state while it is
    /// collected; it must be the store's key function.
    pub fn with_streaming_list(mut self, key: KeyFunc<K>) -> Self {
        self.config.streaming_list_key = Some(key);
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
    pub fn with_list_interner(mut self, interner: ListInterner<K>) -> Self {
        self.config.list_interner = Some(interner);
        self
    }

    /// Hands each page of a list to the store as it arrives ([`ReflectorStore::replace_part`],
    /// then [`ReflectorStore::replace_parts_done`] after the last page) instead of collecting
    /// every page and calling [`ReflectorStore::replace`] once. A queue that is already populated
    /// applies each page at once, so the objects a relist replaces are freed while the rest of
    /// the list arrives: the relist's peak memory is the cache and a few pages, not two copies of
    /// the collection. The first list, and a store that cannot apply parts, still replace at
    /// once. Off by default (client-go collects the whole list).
    ///
    /// What changes for the consumer: the listed objects of a relist are delivered while it is
    /// still listing, the deletions of what it lacks after its last page (as with one
    /// `replace`); and a relist that fails after some pages leaves those pages applied (each
    /// object a version the server listed) with nothing deleted, until the next list succeeds.
    /// A page longer than the page size (a server that ignores the limit and answers with
    /// everything) is handed to the store a page size at a time as its objects are decoded
    /// ([`ListSink`]). A streaming list ([`with_streaming_list`](Self::with_streaming_list))
    /// still replaces at once, at its end bookmark.
    pub fn with_relist_by_page(mut self, enabled: bool) -> Self {
        self.config.relist_by_page = enabled;
        self
    }

    /// Lists one page into `listed`, its objects through the interner if there is one: kept
    /// with the pages before, or, listing by page, handed to the store in batches of a page size
    /// as they are decoded (a server that answers with one response of everything still has it
    /// applied a page at a time), then what is left of the page. Returns the page, its objects
    /// taken out.
    async fn list_page(
        &self,
        params: &ListParams,
        listed: &mut Listed<K>,
    ) -> Result<ListPage<K>, Error> {
        let intern = self.config.list_interner.as_ref();
        let parts = match &mut listed.items {
            Collected::Whole(all) => {
                let mut sink = ListSink::new().interning(intern);
                let mut page = self.lister_watcher.list_into(params, &mut sink).await?;
                self.observe_response();
                listed.count += page.items.len();
                let items = std::mem::take(&mut page.items);
                if all.is_empty() {
                    *all = items;
                } else {
                    all.extend(items);
                }
                return Ok(page);
            }
            Collected::Parts(parts) => parts,
        };
        let store = &self.store;
        let to_store = |e| Error::Store(Box::new(e));
        let mut hand_over = |batch: Vec<Arc<K>>| store.replace_part(batch, parts).map_err(to_store);
        let every = self.config.page_size.unwrap_or(DEFAULT_PAGE_SIZE) as usize;
        let mut sink = ListSink::new()
            .interning(intern)
            .handing_over(every, &mut hand_over);
        let page = self.lister_watcher.list_into(params, &mut sink).await;
        listed.count += sink.handed_over();
        drop(sink);
        let mut page = page?;
        self.observe_response();
        let rest = std::mem::take(&mut page.items);
        listed.count += rest.len();
        if !rest.is_empty() {
            store.replace_part(rest, parts).map_err(to_store)?;
        }
        Ok(page)
    }

    /// Tells the observer the encoding of the response just read (a list page, a watch
    /// opened), if the lister-watcher tells it.
    fn observe_response(&self) {
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

    fn set_watching(&self, watching: bool) {
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
            if let Err(err) = cycle {
                state.list_reason = ListReason::after(err.kind());
                (self.config.watch_error_handler)(&err);
                self.warn_if_down_long(started, &mut warned_outage, &err);
            }
            let delay = state.backoff_delay();
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
        let mut stream = None;
        if let Some(key) = &self.config.streaming_list_key {
            match self.streaming_list(state, key).await {
                Ok(s) => stream = Some(s),
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
    /// reflector as a warning with the server's answer (a server that cannot stream lists, e.g.
    /// on etcd 3.4, says why), every later one at debug level.
    fn note_streaming_fallback(&self, err: &Error) {
        let before = self.streaming_fallbacks.fetch_add(1, Ordering::Relaxed);
        if before == 0 {
            tracing::warn!(reflector = %self.name, error = %err, "the server refused a streaming list; falling back to list (further fallbacks are logged at debug level)");
        } else {
            tracing::debug!(reflector = %self.name, error = %err, "streaming list failed, falling back to list");
        }
    }

    fn set_last_sync_resource_version(&self, rv: &str) {
        let mut last = self.last_sync_resource_version.write();
        if *last != rv {
            rv.clone_into(&mut last);
            drop(last);
            if let Some(observer) = &self.config.observer {
                observer.synced_to(rv);
            }
        }
    }

    fn selectors(&self) -> (Option<String>, Option<String>) {
        (
            self.config.label_selector.clone(),
            self.config.field_selector.clone(),
        )
    }

    /// The list: at `"0"` the first time, at the last synced version after that, at `""` once
    /// that version is known to be unavailable.
    async fn list(&self, state: &mut RunState) -> Result<(), Error> {
        let rv = state.relist_resource_version(&self.last_sync_resource_version());
        let begun = Instant::now();
        let listed = match self.paginated_list(rv).await {
            Ok(listed) => listed,
            Err(err @ Error::Store(_)) => return Err(err),
            Err(err) => {
                state.observe_list(false, begun, Err(err.kind()));
                match state.react(&err, Step::List) {
                    Reaction::ReadLatest => {
                        tracing::debug!(reflector = %self.name, error = %err, "list at a version the server no longer has, listing the latest state");
                        state.rv_unavailable = true;
                        state.list_reason = ListReason::after(err.kind());
                        let rv = state.relist_resource_version(&self.last_sync_resource_version());
                        let begun = Instant::now();
                        // A failure of this second list ends the cycle, whatever it is.
                        match self.paginated_list(rv).await {
                            Ok(listed) => listed,
                            Err(err @ Error::Store(_)) => return Err(err),
                            Err(e) => {
                                state.observe_list(false, begun, Err(e.kind()));
                                return Err(Error::List(Box::new(e)));
                            }
                        }
                    }
                    reaction => return Err(state.fail(reaction, Error::List(Box::new(err)))),
                }
            }
        };
        state.observe_list(false, begun, Ok(listed.count));
        state.rv_unavailable = false;
        if listed.resource_version.is_empty() {
            return Err(Error::List(Box::new(Error::decode(
                "list response without a resourceVersion",
            ))));
        }
        tracing::debug!(reflector = %self.name, items = listed.count, resource_version = %listed.resource_version, "listed");
        let result = match listed.items {
            Collected::Whole(items) => self.store.replace(items, listed.resource_version.clone()),
            Collected::Parts(parts) => self
                .store
                .replace_parts_done(parts, listed.resource_version.clone()),
        };
        result.map_err(|e| Error::Store(Box::new(e)))?;
        self.set_last_sync_resource_version(&listed.resource_version);
        Ok(())
    }

    /// All pages of one list (client-go's pager): concatenated, or handed to the store page by
    /// page with [`with_relist_by_page`](Self::with_relist_by_page). A store's failure on a
    /// page is returned as [`Error::Store`].
    async fn paginated_list(&self, rv: String) -> Result<Listed<K>, Error> {
        // Every list asks for pages: a server with its watch cache on ignores the limit for lists
        // at "0" or at a version, but one without it (or any server that pages) would otherwise
        // read the whole collection into one response.
        let limit = Some(self.config.page_size.unwrap_or(DEFAULT_PAGE_SIZE));
        // With a limit, a list at a version and no match would be read at exactly that version
        // (and fail with 410 once it is compacted): ask for "not older than" explicitly, which is
        // what a list at a version means to the reflector.
        let resource_version_match =
            (!rv.is_empty() && rv != "0").then_some(ResourceVersionMatch::NotOlderThan);
        let (label_selector, field_selector) = self.selectors();
        let first = ListParams {
            label_selector,
            field_selector,
            limit,
            continue_token: None,
            resource_version: rv,
            resource_version_match,
        };
        let mut listed = Listed {
            items: if self.config.relist_by_page {
                Collected::Parts(ReplaceParts::new())
            } else {
                Collected::Whole(Vec::new())
            },
            count: 0,
            resource_version: String::new(),
        };
        let mut page = self.list_page(&first, &mut listed).await?;
        loop {
            listed.resource_version = page.resource_version;
            let Some(token) = page.continue_token else {
                return Ok(listed);
            };
            let next = ListParams {
                continue_token: Some(token),
                resource_version: String::new(),
                resource_version_match: None,
                ..first.clone()
            };
            match self.list_page(&next, &mut listed).await {
                Ok(more) => page = more,
                Err(err) => match react(err.kind(), Step::ListPage, || false) {
                    Reaction::ListWhole => {
                        tracing::debug!(reflector = %self.name, "continue token expired, listing everything at once");
                        let full = ListParams {
                            limit: None,
                            continue_token: None,
                            ..first.clone()
                        };
                        // The pages so far were of another snapshot: only this list counts.
                        listed.restart();
                        let whole = self.list_page(&full, &mut listed).await?;
                        listed.resource_version = whole.resource_version;
                        return Ok(listed);
                    }
                    // The list's own failure: its caller reacts to it as a list error.
                    _ => return Err(err),
                },
            }
        }
    }

    /// The initial state as a streaming list. On success returns the open stream, positioned
    /// just after the initial-events-end bookmark.
    async fn streaming_list(
        &self,
        state: &mut RunState,
        key: &KeyFunc<K>,
    ) -> Result<WatchStream<K>, Error> {
        loop {
            let rv = if state.rv_unavailable {
                String::new()
            } else {
                self.last_sync_resource_version()
            };
            let (label_selector, field_selector) = self.selectors();
            let params = WatchParams {
                label_selector,
                field_selector,
                resource_version: rv,
                resource_version_match: Some(ResourceVersionMatch::NotOlderThan),
                timeout: Some(state.watch_timeout()),
                allow_bookmarks: true,
                send_initial_events: true,
            };
            let begun = Instant::now();
            let opened = self.lister_watcher.watch(&params).await;
            if opened.is_ok() {
                self.observe_response();
            }
            let failure = match opened {
                Ok(mut stream) => match self.collect_initial_events(&mut stream, key).await {
                    Ok(Some((items, rv))) => {
                        state.observe_list(true, begun, Ok(items.len()));
                        state.rv_unavailable = false;
                        tracing::debug!(reflector = %self.name, items = items.len(), resource_version = %rv, "streamed the initial list");
                        self.store
                            .replace(items, rv.clone())
                            .map_err(|e| Error::Store(Box::new(e)))?;
                        self.set_last_sync_resource_version(&rv);
                        return Ok(stream);
                    }
                    Ok(None) => {
                        // The stream ended before the end bookmark: start again, after a delay so
                        // that a server which closes at once cannot make us spin.
                        tracing::debug!(reflector = %self.name, "streaming list ended before its end bookmark, retrying");
                        let delay = state.backoff_delay();
                        tokio::time::sleep(delay).await;
                        continue;
                    }
                    Err(err) => err,
                },
                Err(err) => err,
            };
            state.observe_list(true, begun, Err(failure.kind()));
            match state.react(&failure, Step::StreamingList) {
                Reaction::Retry { after } => {
                    tracing::debug!(reflector = %self.name, error = %failure, "streaming list failed, retrying");
                    state.wait(after).await;
                }
                Reaction::ReadLatest => {
                    tracing::debug!(reflector = %self.name, error = %failure, "streaming list from a version the server no longer has, streaming the latest state");
                    state.rv_unavailable = true;
                    state.list_reason = ListReason::after(failure.kind());
                }
                // The caller falls back to a list, in the same cycle.
                reaction => {
                    return Err(state.fail(reaction, Error::StreamingList(Box::new(failure))));
                }
            }
        }
    }

    /// Reads the initial events of a streaming list into a temporary set; `None` if the stream
    /// ended before the end bookmark.
    async fn collect_initial_events(
        &self,
        stream: &mut WatchStream<K>,
        key: &KeyFunc<K>,
    ) -> Result<Option<(Vec<Arc<K>>, String)>, Error> {
        let mut initial: HashMap<String, Arc<K>> = HashMap::new();
        while let Some(event) = stream.next().await {
            match event? {
                WatchEvent::Added { object, .. } | WatchEvent::Modified { object, .. } => {
                    match key(&object) {
                        Ok(k) => {
                            let object = match &self.config.list_interner {
                                Some(intern) => intern(object),
                                None => object,
                            };
                            initial.insert(k, object);
                        }
                        Err(err) => {
                            tracing::warn!(reflector = %self.name, error = %err, "skipping an object of the initial state without a key");
                        }
                    }
                }
                WatchEvent::Deleted { object, .. } => {
                    if let Ok(k) = key(&object) {
                        initial.remove(&k);
                    }
                }
                WatchEvent::Bookmark {
                    resource_version,
                    initial_events_end: true,
                } => {
                    return Ok(Some((initial.into_values().collect(), resource_version)));
                }
                WatchEvent::Bookmark { .. } => {}
                WatchEvent::Error(status) => return Err(Error::Api(status)),
            }
        }
        Ok(None)
    }

    /// Watches until a watch ends in a way that needs a relist (`Ok`) or fails (`Err`).
    ///
    /// `stream` is an already-open stream (from a streaming list) and whether its events'
    /// versions may be used from the start.
    async fn watch(
        &self,
        state: &mut RunState,
        mut stream: Option<(WatchStream<K>, bool)>,
    ) -> Result<(), Error> {
        loop {
            let (stream, propagate_from_start) = match stream.take() {
                Some(open) => open,
                None => {
                    let rv = self.last_sync_resource_version();
                    let propagate = !(rv.is_empty() || rv == "0");
                    let (label_selector, field_selector) = self.selectors();
                    let params = WatchParams {
                        label_selector,
                        field_selector,
                        resource_version: rv,
                        resource_version_match: None,
                        timeout: Some(state.watch_timeout()),
                        allow_bookmarks: true,
                        send_initial_events: false,
                    };
                    match self.lister_watcher.watch(&params).await {
                        Ok(s) => {
                            self.observe_response();
                            if let Some(observer) = &self.config.observer {
                                observer.watch_started();
                            }
                            (s, propagate)
                        }
                        Err(err) => match state.react(&err, Step::WatchStart) {
                            Reaction::Retry { after } => {
                                tracing::debug!(reflector = %self.name, error = %err, "watch refused, retrying");
                                state.wait(after).await;
                                continue;
                            }
                            reaction => return Err(state.fail(reaction, err)),
                        },
                    }
                }
            };

            let started = Instant::now();
            let mut events = 0_u64;
            self.set_watching(true);
            let end = self
                .handle_watch(stream, propagate_from_start, &mut events)
                .await;
            self.set_watching(false);
            if started.elapsed() >= HEALTHY_WATCH {
                // The server was back and serving: the next failure is a new outage.
                state.backoff.reset();
            }
            if let Some(observer) = &self.config.observer {
                observer.watch_ended(match &end {
                    Ok(()) if events == 0 && started.elapsed() < VERY_SHORT_WATCH => {
                        WatchEnd::VeryShort
                    }
                    Ok(()) => WatchEnd::Closed,
                    Err(Error::Transport(_)) => WatchEnd::Broken,
                    Err(err) => WatchEnd::Error(err.kind()),
                });
            }
            let end = match end {
                // A transport failure mid-stream loses nothing that was applied: resume like a
                // clean close.
                Err(Error::Transport(err)) => {
                    tracing::debug!(reflector = %self.name, error = %err, "watch stream broke, resuming");
                    Ok(())
                }
                other => other,
            };
            match end {
                Ok(()) if events == 0 && started.elapsed() < VERY_SHORT_WATCH => {
                    return Err(Error::VeryShortWatch);
                }
                Ok(()) => {
                    tracing::trace!(reflector = %self.name, events, "watch closed, resuming");
                }
                Err(err) => match state.react(&err, Step::WatchEnd) {
                    Reaction::Retry { after } => {
                        tracing::debug!(reflector = %self.name, error = %err, "watch ended with an error, re-watching");
                        state.wait(after).await;
                    }
                    reaction => return Err(state.fail(reaction, err)),
                },
            }
        }
    }

    /// Applies the events of one watch stream until it ends, resyncing on the timer meanwhile.
    async fn handle_watch(
        &self,
        mut stream: WatchStream<K>,
        propagate_from_start: bool,
        events: &mut u64,
    ) -> Result<(), Error> {
        let mut past_initial = false;
        let mut resync = self
            .config
            .resync_period
            .map(|period| Box::pin(tokio::time::sleep(period)));
        loop {
            let event = match &mut resync {
                Some(timer) => tokio::select! {
                    event = stream.next() => event,
                    () = timer.as_mut() => {
                        if self.config.should_resync.as_ref().is_none_or(|f| f()) {
                            tracing::trace!(reflector = %self.name, "resync");
                            self.store.resync().map_err(|e| Error::Store(Box::new(e)))?;
                        }
                        if let Some(period) = self.config.resync_period {
                            timer.as_mut().reset(Instant::now() + period);
                        }
                        continue;
                    }
                },
                None => stream.next().await,
            };
            let Some(event) = event else {
                return Ok(());
            };
            let event = event?;
            if let Some(observer) = &self.config.observer {
                observer.event(match &event {
                    WatchEvent::Added { .. } => EventType::Added,
                    WatchEvent::Modified { .. } => EventType::Modified,
                    WatchEvent::Deleted { .. } => EventType::Deleted,
                    WatchEvent::Bookmark { .. } => EventType::Bookmark,
                    WatchEvent::Error(_) => EventType::Error,
                });
            }
            let written = match &event {
                WatchEvent::Added { object, .. } => self.store.add(object.clone()),
                WatchEvent::Modified { object, .. } => {
                    past_initial = true;
                    self.store.update(object.clone())
                }
                WatchEvent::Deleted { object, .. } => {
                    past_initial = true;
                    self.store.delete(object.clone())
                }
                WatchEvent::Bookmark {
                    resource_version, ..
                } => {
                    past_initial = true;
                    self.store.bookmark(resource_version)
                }
                WatchEvent::Error(status) => return Err(Error::Api(status.clone())),
            };
            if let Err(err) = written {
                // Not a reason to relist; the store reports (and counts) what it refuses.
                tracing::debug!(reflector = %self.name, event = event.type_name(), error = %err, "store refused a watch event");
            }
            if (propagate_from_start || past_initial)
                && let Some(rv) = event.resource_version().filter(|rv| !rv.is_empty())
            {
                self.set_last_sync_resource_version(rv);
            }
            *events += 1;
        }
    }
}

/// Where an error reached the reflector: each step has its own column in [`react`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Step {
    /// A list: its first page, at the version [`RunState::relist_resource_version`] picks.
    List,
    /// A continue page of a paginated list.
    ListPage,
    /// The request of a streaming list, or its stream before the initial-events-end bookmark.
    StreamingList,
    /// The request that opens a watch.
    WatchStart,
    /// An open watch stream that ended with an error (an `ERROR` event, an undecodable line, a
    /// failed resync). A clean close, a transport failure mid-stream and a very short watch are
    /// not errors of the stream: [`Reflector::watch`] handles them before asking.
    WatchEnd,
}

/// What the reflector does about an error, as [`react`] decides it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Reaction {
    /// Send the same request again after the delay: a watch re-watches from the last version
    /// (no relist), a streaming list streams again.
    Retry {
        /// How long to wait first.
        after: Delay,
    },
    /// The version asked for is gone: mark it unavailable and read again at once, in the same
    /// cycle, from `""` (a consistent read) — a list once more, or a streaming list.
    ReadLatest,
    /// A continue token expired: one full list at the original version, without a limit.
    ListWhole,
    /// Give up on the step with the error. A list or a watch ends the cycle (the watch error
    /// handler, a backoff delay, a relist); a streaming list falls back to a list in the same
    /// cycle.
    Fail {
        /// The version the next list asks for.
        relist_at: RelistAt,
    },
}

/// How long a [`Reaction::Retry`] waits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Delay {
    /// Not at all.
    None,
    /// A backoff delay.
    Backoff,
    /// The server's Retry-After, or a backoff delay without one.
    RetryAfter(Option<Duration>),
}

/// The version the list after a [`Reaction::Fail`] asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum RelistAt {
    /// Whatever [`RunState::relist_resource_version`] picks: the last synced version (`"0"`
    /// before the first sync), or `""` if it was already marked unavailable.
    LastSynced,
    /// `""`: the version is marked unavailable now.
    Latest,
}

/// The reflector's reaction to an error of kind `kind` at `step`: the one table of client-go's
/// rules (`list()`, `watch()`, `watchList()`, `isWatchErrorRetriable`, `retryWithDeadline`), with
/// this crate's differences (docs/semantics.md, RL-5, RL-6, RL-9, RL-11, RL-12, RL-15).
///
/// `within_internal_error_window` is asked (and advances the window, RL-12) only for an internal
/// error at the end of a watch.
fn react(
    kind: ErrorKind,
    step: Step,
    within_internal_error_window: impl FnOnce() -> bool,
) -> Reaction {
    use ErrorKind as K;
    use Step as S;
    let relist = Reaction::Fail {
        relist_at: RelistAt::LastSynced,
    };
    match (step, kind) {
        // A list at a version the server no longer has (or not yet): read the latest state now.
        (S::List, K::Expired | K::TooLargeResourceVersion) => Reaction::ReadLatest,
        (S::List, _) => relist,

        // An expired continue token: the whole list at once; anything else fails the list.
        (S::ListPage, K::Expired) => Reaction::ListWhole,
        (S::ListPage, _) => relist,

        // A streaming list retries what a watch would retry, and restarts from "" when its
        // version is gone; anything else falls back to a list.
        (S::StreamingList, K::TooManyRequests { retry_after }) => Reaction::Retry {
            after: Delay::RetryAfter(retry_after),
        },
        (S::StreamingList, K::ConnectionRefused) => Reaction::Retry {
            after: Delay::Backoff,
        },
        (S::StreamingList, K::Expired | K::TooLargeResourceVersion) => Reaction::ReadLatest,
        (S::StreamingList, _) => relist,

        // Watch start: 429 and connection refused re-watch after a wait; a too-large version
        // relists at ""; anything else (410 included) relists at the last version.
        (S::WatchStart, K::TooManyRequests { retry_after }) => Reaction::Retry {
            after: Delay::RetryAfter(retry_after),
        },
        (S::WatchStart, K::ConnectionRefused) => Reaction::Retry {
            after: Delay::Backoff,
        },
        (S::WatchStart | S::WatchEnd, K::TooLargeResourceVersion) => Reaction::Fail {
            relist_at: RelistAt::Latest,
        },
        (S::WatchStart, _) => relist,

        // Watch end: 429 re-watches after a wait, an internal error at once while inside the
        // retry window; anything else (410 included) relists at the last version.
        (S::WatchEnd, K::TooManyRequests { retry_after }) => Reaction::Retry {
            after: Delay::RetryAfter(retry_after),
        },
        (S::WatchEnd, K::InternalError) if within_internal_error_window() => {
            Reaction::Retry { after: Delay::None }
        }
        (S::WatchEnd, _) => relist,
    }
}

/// The mutable state of one [`Reflector::run`].
struct RunState {
    rv_unavailable: bool,
    /// Why the next list runs.
    list_reason: ListReason,
    observer: Option<Arc<dyn ReflectorObserver>>,
    backoff: Backoff,
    rng: fastrand::Rng,
    min_watch_timeout: Duration,
    internal_errors: InternalErrorWindow,
}

impl RunState {
    fn new<K>(config: &Config<K>) -> Self {
        Self {
            rv_unavailable: false,
            list_reason: ListReason::Initial,
            observer: config.observer.clone(),
            backoff: Backoff::new(config.backoff),
            rng: config
                .seed
                .map_or_else(fastrand::Rng::new, fastrand::Rng::with_seed),
            min_watch_timeout: config.min_watch_timeout,
            internal_errors: InternalErrorWindow {
                max: config.max_internal_error_retry,
                first: None,
                last: None,
            },
        }
    }

    fn relist_resource_version(&self, last: &str) -> String {
        if self.rv_unavailable {
            String::new()
        } else if last.is_empty() {
            "0".to_owned()
        } else {
            last.to_owned()
        }
    }

    fn backoff_delay(&mut self) -> Duration {
        let random = self.rng.f64();
        let delay = self.backoff.step(Instant::now(), random);
        if let Some(observer) = &self.observer {
            observer.backoff(delay);
        }
        delay
    }

    /// Tells the observer of a list that ended; the next one, if any, is for the same reason
    /// unless something else ends the cycle.
    fn observe_list(&self, streaming: bool, begun: Instant, result: Result<usize, ErrorKind>) {
        if let Some(observer) = &self.observer {
            observer.list(ListOutcome {
                reason: self.list_reason,
                streaming,
                duration: begun.elapsed(),
                result,
            });
        }
    }

    /// A random timeout in `[min, 2·min)`, in whole seconds, at least one.
    fn watch_timeout(&mut self) -> Duration {
        let min = self.min_watch_timeout.as_secs_f64();
        let secs = min + self.rng.f64() * min;
        Duration::from_secs((secs as u64).max(1))
    }

    fn internal_error_should_retry(&mut self) -> bool {
        self.internal_errors.should_retry(Instant::now())
    }

    /// [`react`] to `err` at `step`, with this run's internal-error window.
    fn react(&mut self, err: &Error, step: Step) -> Reaction {
        let kind = err.kind();
        if let (ErrorKind::TooManyRequests { .. }, Some(observer)) = (kind, &self.observer) {
            observer.throttled();
        }
        react(kind, step, || self.internal_error_should_retry())
    }

    /// Waits out a [`Delay`] (no wait at all for [`Delay::None`]).
    async fn wait(&mut self, after: Delay) {
        let delay = match after {
            Delay::None => return,
            Delay::Backoff => self.backoff_delay(),
            Delay::RetryAfter(Some(retry_after)) => {
                if let Some(observer) = &self.observer {
                    observer.backoff(retry_after);
                }
                retry_after
            }
            Delay::RetryAfter(None) => self.backoff_delay(),
        };
        tracing::trace!(?delay, "waiting before the retry");
        tokio::time::sleep(delay).await;
    }

    /// Carries out a reaction that gives up on the step ([`Reaction::Fail`]) and returns the
    /// error to end it with.
    fn fail(&mut self, reaction: Reaction, err: Error) -> Error {
        debug_assert!(
            matches!(reaction, Reaction::Fail { .. }),
            "{reaction:?} is not a failure"
        );
        if let Reaction::Fail {
            relist_at: RelistAt::Latest,
        } = reaction
        {
            self.rv_unavailable = true;
        }
        err
    }
}

/// client-go's `retryWithDeadline` for internal errors: retry while the first error of the
/// current series is no older than `max`; a series ends after a minute without errors.
#[derive(Debug)]
struct InternalErrorWindow {
    max: Duration,
    first: Option<Instant>,
    last: Option<Instant>,
}

impl InternalErrorWindow {
    fn should_retry(&mut self, now: Instant) -> bool {
        if self.max.is_zero() {
            return false;
        }
        let first = match (self.first, self.last) {
            (Some(first), Some(last))
                if now.saturating_duration_since(last) < INTERNAL_ERROR_RESET =>
            {
                first
            }
            _ => now,
        };
        self.first = Some(first);
        self.last = Some(now);
        if now.saturating_duration_since(first) <= self.max {
            true
        } else {
            self.first = None;
            self.last = None;
            false
        }
    }
}

/// The default watch error handler: logs through `tracing`, at WARN what a person must act on
/// ([`Error::needs_action`]: credentials, permissions, a resource the server does not serve), at
/// DEBUG what the reflector recovers from by itself (a cut connection, a 410, a server
/// restarting), which the observer's metrics count. However it logs, a reflector that has had
/// no watch for [`WATCH_DOWN_WARNING`] says so at WARN, once per outage.
pub fn default_watch_error_handler(err: &Error) {
    let what = match err {
        _ if err.kind() == ErrorKind::Expired => "watch closed: resource version expired",
        Error::VeryShortWatch => "watch ended with an error",
        Error::List(_) => "failed to list",
        Error::StreamingList(_) => "failed to get the initial state",
        _ => "failed to watch",
    };
    if err.needs_action() {
        tracing::warn!(error = %err, "{what}; retrying, but the server will refuse until this is fixed");
    } else {
        tracing::debug!(error = %err, "{what}; retrying");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_reaction_table() {
        use ErrorKind as K;
        use Step as S;
        let retry_after = K::TooManyRequests {
            retry_after: Some(Duration::from_secs(3)),
        };
        let relist = Reaction::Fail {
            relist_at: RelistAt::LastSynced,
        };
        let relist_latest = Reaction::Fail {
            relist_at: RelistAt::Latest,
        };
        let wait = |after| Reaction::Retry { after };
        let rows = [
            (S::List, K::Expired, Reaction::ReadLatest),
            (S::List, K::TooLargeResourceVersion, Reaction::ReadLatest),
            (S::List, retry_after, relist),
            (S::List, K::InternalError, relist),
            (S::ListPage, K::Expired, Reaction::ListWhole),
            (S::ListPage, K::TooLargeResourceVersion, relist),
            (S::StreamingList, K::Expired, Reaction::ReadLatest),
            (
                S::StreamingList,
                K::TooLargeResourceVersion,
                Reaction::ReadLatest,
            ),
            (
                S::StreamingList,
                retry_after,
                wait(Delay::RetryAfter(Some(Duration::from_secs(3)))),
            ),
            (S::StreamingList, K::ConnectionRefused, wait(Delay::Backoff)),
            (S::StreamingList, K::InternalError, relist),
            (S::WatchStart, K::Expired, relist),
            (S::WatchStart, K::TooLargeResourceVersion, relist_latest),
            (
                S::WatchStart,
                K::TooManyRequests { retry_after: None },
                wait(Delay::RetryAfter(None)),
            ),
            (S::WatchStart, K::ConnectionRefused, wait(Delay::Backoff)),
            (S::WatchStart, K::InternalError, relist),
            (S::WatchStart, K::Other, relist),
            (S::WatchEnd, K::Expired, relist),
            (S::WatchEnd, K::TooLargeResourceVersion, relist_latest),
            (
                S::WatchEnd,
                retry_after,
                wait(Delay::RetryAfter(Some(Duration::from_secs(3)))),
            ),
            (S::WatchEnd, K::ConnectionRefused, relist),
            (S::WatchEnd, K::Other, relist),
        ];
        for (step, kind, want) in rows {
            let got = react(kind, step, || {
                panic!("asked the window at {step:?} for {kind:?}")
            });
            assert_eq!(got, want, "{step:?}, {kind:?}");
        }
        assert_eq!(
            react(K::InternalError, S::WatchEnd, || true),
            wait(Delay::None)
        );
        assert_eq!(react(K::InternalError, S::WatchEnd, || false), relist);
    }

    #[test]
    fn internal_error_window_retries_only_within_its_duration() {
        let t0 = Instant::now();
        let mut w = InternalErrorWindow {
            max: Duration::from_secs(30),
            first: None,
            last: None,
        };
        assert!(w.should_retry(t0));
        assert!(w.should_retry(t0 + Duration::from_secs(20)));
        assert!(w.should_retry(t0 + Duration::from_secs(30)));
        assert!(!w.should_retry(t0 + Duration::from_secs(31)));
        // A new series starts after that.
        assert!(w.should_retry(t0 + Duration::from_secs(32)));
        // A quiet minute also starts a new series.
        assert!(w.should_retry(t0 + Duration::from_secs(100)));
        let mut off = InternalErrorWindow {
            max: Duration::ZERO,
            first: None,
            last: None,
        };
        assert!(!off.should_retry(t0));
    }

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
        let reflector = Arc::new(reflector);
        let stop = CancellationToken::new();
        let task = tokio::spawn({
            let (reflector, stop) = (Arc::clone(&reflector), stop.clone());
            async move { reflector.run(stop).await }
        });
        // On the paused clock: an hour of the reflector's time at most.
        for _ in 0..3_600_000 {
            if ears.0.lock().len() >= until {
                break;
            }
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        stop.cancel();
        task.await.expect("the reflector's task");
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
        let fake = crate::FakeListerWatcher::new();
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
            heard(telling, true, 2).await,
            [Response("protobuf"), List(true, Ok(1))]
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
