//! The processor: fans every change out to the informer's consumers — synchronous handlers
//! (jobs on the delivery pool), async handlers (tokio tasks) and subscriptions (streams) —
//! each through a bounded buffer of its own that degrades to per-key coalescing when its
//! consumer falls behind.

use std::collections::{HashMap, VecDeque};
use std::fmt;
use std::ops::Range;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock, Weak};
use std::task::{Context, Poll};
use std::time::Duration;

use futures::task::AtomicWaker;
use informer_store::panic_message;
use parking_lot::Mutex;
use tokio::sync::watch;
use tokio::time::Instant;

use crate::handler::{Event, ResourceEventHandler};
use crate::lag::{LagHistogram, LagRecorder};
use crate::pool::{DeliveryPool, Job, JobToken, Slot, Turn};

/// What a consumer does when its handler panics.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum PanicPolicy {
    /// Report the panic through `tracing` and go on with the next notification (the default).
    /// An initial add that panicked still counts as handled for the handler's `has_synced`.
    #[default]
    Continue,
    /// Report the panic and stop this handler: it receives nothing more (its registration says
    /// [`is_stopped`](crate::HandlerRegistration::is_stopped)); other handlers go on.
    StopHandler,
    /// Report the panic and abort the process, as client-go does by default.
    Abort,
}

/// How many notifications a consumer's buffer holds by default before the consumer degrades
/// to per-key coalescing (see [`HandlerOptions::buffer`]).
pub const DEFAULT_BUFFER: usize = 1024;

/// How many notifications the processor gathers before it hands them to the consumers, if the
/// pop loop has not flushed them at the end of its batch first.
const MAX_BATCH: usize = 256;

/// How many notifications a synchronous handler handles in one turn on the pool before the
/// other jobs get theirs.
const TURN_BUDGET: usize = 256;

/// How many notifications a consumer takes out of its buffer under one acquisition of its lock.
const TAKE: usize = 64;

/// How a consumer is registered: its resync period and its buffer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HandlerOptions {
    resync: Option<Duration>,
    buffer: usize,
    name: Option<Arc<str>>,
}

impl Default for HandlerOptions {
    fn default() -> Self {
        Self {
            resync: None,
            buffer: DEFAULT_BUFFER,
            name: None,
        }
    }
}

impl HandlerOptions {
    /// The defaults: the informer's resync period, a buffer of [`DEFAULT_BUFFER`].
    pub fn new() -> Self {
        Self::default()
    }

    /// This consumer's own resync period (`Duration::ZERO`: none), under client-go's rules (see
    /// [`add_event_handler`](crate::SharedIndexInformer::add_event_handler)).
    pub fn resync_period(mut self, period: Duration) -> Self {
        self.resync = Some(period);
        self
    }

    /// How many notifications may wait for this consumer (at least 1). A consumer further
    /// behind than that does not hold the old versions alive: from then on each key that
    /// changes is kept once, as the version the consumer saw last and the latest one, and the
    /// consumer next receives one notification per such key — an update from the version it
    /// saw to the current one, or the deletion with the last known state; a key added and
    /// deleted meanwhile yields nothing. It returns to one notification per change once it has
    /// caught up (a key that changed and then went away: the update to the last version cached,
    /// then the deletion). Memory: at most `buffer` notifications plus one entry per key.
    pub fn buffer(mut self, notifications: usize) -> Self {
        self.buffer = notifications.max(1);
        self
    }

    /// A name for this consumer, for logs and metrics ([`HandlerRegistration::name`]); by
    /// default it is known by its registration number.
    pub fn name(mut self, name: impl Into<Arc<str>>) -> Self {
        self.name = Some(name.into());
        self
    }

    pub(crate) fn requested_resync(&self) -> Option<Duration> {
        self.resync
    }
}

/// Notifications handed to every consumer at once: one shared, read-only buffer, so sending a
/// change to N consumers neither clones its objects' `Arc`s N times nor has N threads contend
/// on their reference counts.
type Batch<K> = Arc<[Notification<K>]>;

/// One change, as queued for the consumers.
pub(crate) struct Notification<K> {
    event: Event<K>,
    /// For a deletion, the version the cache held (what every consumer saw last): the base a
    /// coalesced consumer's next update starts from if the key comes back.
    prior: Option<Arc<K>>,
}

impl<K> Notification<K> {
    pub(crate) fn add(key: Arc<str>, obj: Arc<K>, initial: bool) -> Self {
        Self {
            event: Event::Add { key, obj, initial },
            prior: None,
        }
    }

    pub(crate) fn update(key: Arc<str>, old: Arc<K>, new: Arc<K>) -> Self {
        Self {
            event: Event::Update { key, old, new },
            prior: None,
        }
    }

    pub(crate) fn delete(
        key: Arc<str>,
        obj: Arc<K>,
        final_state_unknown: bool,
        prior: Arc<K>,
    ) -> Self {
        Self {
            event: Event::Delete {
                key,
                obj,
                final_state_unknown,
            },
            prior: Some(prior),
        }
    }

    fn is_initial(&self) -> bool {
        matches!(self.event, Event::Add { initial: true, .. })
    }
}

/// Counters a consumer shares with its registration handle.
#[derive(Default)]
pub(crate) struct ListenerState {
    /// Initial adds queued for this consumer and not yet handled.
    pending_initial: AtomicUsize,
    /// Latched once the consumer has synced.
    synced: AtomicBool,
    /// The consumer has stopped (removed and drained, stopped by policy, dropped, or the
    /// informer stopped).
    stopped: AtomicBool,
    /// Stop without delivering what is buffered (the informer is shutting down).
    discard: AtomicBool,
    /// Notifications handled so far.
    delivered: AtomicUsize,
    /// Notifications and coalesced keys in the buffer.
    buffered: AtomicUsize,
    /// Notifications taken out of the buffer by the consumer and not yet handled.
    in_hand: AtomicUsize,
    /// Notifications taken into per-key coalescing so far.
    coalesced: AtomicUsize,
    /// Times the consumer fell behind its buffer.
    overflows: AtomicUsize,
    /// Handler panics caught so far.
    panics: AtomicUsize,
    /// How long the notifications it took had waited.
    lag: LagRecorder,
    /// The consumer's name, if it was given one.
    name: Option<Arc<str>>,
}

impl ListenerState {
    pub(crate) fn is_stopped(&self) -> bool {
        self.stopped.load(Ordering::Acquire)
    }
}

/// An informer's readiness, shared with its consumers' registrations: whether it has synced,
/// whether it has stopped, and a signal sent on every change of either or of a consumer's own
/// sync, which every wait is woken by.
pub(crate) struct Upstream {
    synced: Box<dyn Fn() -> bool + Send + Sync>,
    stopped: AtomicBool,
    progress: watch::Sender<()>,
}

impl Upstream {
    /// Readiness read through `synced`, not stopped.
    pub(crate) fn new(synced: impl Fn() -> bool + Send + Sync + 'static) -> Self {
        Self {
            synced: Box::new(synced),
            stopped: AtomicBool::new(false),
            progress: watch::Sender::new(()),
        }
    }

    pub(crate) fn has_synced(&self) -> bool {
        (self.synced)()
    }

    pub(crate) fn is_stopped(&self) -> bool {
        self.stopped.load(Ordering::Acquire)
    }

    /// Marks the informer stopped and wakes every wait.
    pub(crate) fn mark_stopped(&self) {
        self.stopped.store(true, Ordering::Release);
        self.notify();
    }

    /// Wakes every wait, to look at the state again.
    pub(crate) fn notify(&self) {
        self.progress.send_replace(());
    }

    /// Waits until `done` holds (`true`) or `gave_up` does (`false`), looking again on every
    /// signal. Cancel-safe: it holds nothing but a receiver.
    pub(crate) async fn wait(&self, done: impl Fn() -> bool, gave_up: impl Fn() -> bool) -> bool {
        // Subscribed before the first look, so no signal between a look and the wait is lost.
        let mut signals = self.progress.subscribe();
        loop {
            if done() {
                return true;
            }
            // The sender lives as long as `self`: `changed` never fails while it is borrowed.
            if gave_up() || signals.changed().await.is_err() {
                return done();
            }
        }
    }
}

/// Every processor's identity, so a registration names the informer it came from.
static NEXT_PROCESSOR: AtomicU64 = AtomicU64::new(0);

/// How far behind a consumer is, read through its registration.
trait Lag: Send + Sync {
    /// The age of the oldest notification still waiting for the consumer.
    fn lag(&self) -> Duration;
}

/// What registering a consumer returns: its identity (which names its informer), its own sync
/// state and its counters.
#[derive(Clone)]
pub struct HandlerRegistration {
    id: u64,
    informer: u64,
    state: Arc<ListenerState>,
    upstream: Arc<Upstream>,
    lag: Arc<dyn Lag>,
}

impl fmt::Debug for HandlerRegistration {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("HandlerRegistration")
            .field("id", &self.id)
            .field("has_synced", &self.has_synced())
            .field("buffered", &self.buffered())
            .field("coalesced", &self.coalesced())
            .finish()
    }
}

impl HandlerRegistration {
    /// Whether this consumer has seen the whole initial state: the informer has synced and the
    /// consumer has handled every initial add queued for it (for one added late, its
    /// snapshot). Once true, stays true.
    pub fn has_synced(&self) -> bool {
        if self.state.synced.load(Ordering::Acquire) {
            return true;
        }
        let synced =
            self.upstream.has_synced() && self.state.pending_initial.load(Ordering::Acquire) == 0;
        if synced {
            self.state.synced.store(true, Ordering::Release);
        }
        synced
    }

    /// Notifications (and coalesced keys) buffered for this consumer and not yet handled.
    pub fn buffered(&self) -> usize {
        self.state.buffered.load(Ordering::Acquire) + self.state.in_hand.load(Ordering::Acquire)
    }

    /// [`buffered`](Self::buffered), under its older name.
    pub fn backlog(&self) -> usize {
        self.buffered()
    }

    /// Notifications this consumer has handled (panicked ones included).
    pub fn delivered(&self) -> usize {
        self.state.delivered.load(Ordering::Acquire)
    }

    /// Notifications that reached this consumer's buffer while it was behind by more than its
    /// bound, and were taken into per-key coalescing.
    pub fn coalesced(&self) -> usize {
        self.state.coalesced.load(Ordering::Acquire)
    }

    /// How many times this consumer fell behind its buffer's bound.
    pub fn overflows(&self) -> usize {
        self.state.overflows.load(Ordering::Acquire)
    }

    /// The age of the oldest notification still waiting for this consumer (zero when it is
    /// caught up).
    pub fn lag(&self) -> Duration {
        self.lag.lag()
    }

    /// How long the notifications this consumer took had waited for it in its buffer, from
    /// their write to its take (client-go has no such figure; a slow consumer shows here
    /// before its buffer fills).
    pub fn lag_histogram(&self) -> LagHistogram {
        self.state.lag.snapshot()
    }

    /// Panics caught in this consumer's handler.
    pub fn panics(&self) -> usize {
        self.state.panics.load(Ordering::Acquire)
    }

    /// This registration's number, unique among its informer's consumers (in the order they
    /// registered).
    pub fn id(&self) -> u64 {
        self.id
    }

    /// The name given with [`HandlerOptions::name`], if any.
    pub fn name(&self) -> Option<&str> {
        self.state.name.as_deref()
    }

    /// Whether this consumer has stopped: removed and drained, stopped after a panic under
    /// [`PanicPolicy::StopHandler`], a subscription dropped, or the informer has stopped.
    pub fn is_stopped(&self) -> bool {
        self.state.stopped.load(Ordering::Acquire)
    }

    /// Waits until this consumer [has synced](Self::has_synced): woken by the change itself,
    /// cancel-safe. Returns `false` instead if the consumer or its informer stops first.
    /// Bound the wait with [`wait_for_sync_timeout`](Self::wait_for_sync_timeout) or
    /// `tokio::time::timeout`.
    pub async fn wait_for_sync(&self) -> bool {
        self.upstream
            .wait(
                || self.has_synced(),
                || self.is_stopped() || self.upstream.is_stopped(),
            )
            .await
    }

    /// [`wait_for_sync`](Self::wait_for_sync), giving up (`false`) after `timeout`.
    pub async fn wait_for_sync_timeout(&self, timeout: Duration) -> bool {
        tokio::time::timeout(timeout, self.wait_for_sync())
            .await
            .unwrap_or(false)
    }

    /// Waits until this consumer has stopped and none of its code runs any more (client-go's
    /// `ShutDownEventHandler` wait): after
    /// [`remove_event_handler`](crate::SharedIndexInformer::remove_event_handler), once what
    /// was buffered for it has been handled; after the informer stops, once its current
    /// notification returns. Cancel-safe.
    pub async fn stopped(&self) {
        self.upstream.wait(|| self.is_stopped(), || false).await;
    }

    pub(crate) fn informer(&self) -> u64 {
        self.informer
    }
}

/// A run of notifications waiting in a consumer's buffer: `batch[next..end]`.
struct Segment<K> {
    batch: Batch<K>,
    next: usize,
    end: usize,
    since: std::time::Instant,
    /// A late consumer's snapshot: the cache's current state, not old versions, so not held
    /// against the bound.
    exempt: bool,
}

/// What a coalesced key's consumer will see.
enum Latest<K> {
    Present(Arc<K>),
    Deleted {
        obj: Arc<K>,
        final_state_unknown: bool,
        /// The version the cache held when the key was deleted.
        prior: Arc<K>,
    },
}

/// One key a lagging consumer has not seen the latest of.
struct Coalesced<K> {
    /// The version the consumer saw last (`None`: it does not know the key).
    base: Option<Arc<K>>,
    latest: Latest<K>,
    /// An add from the initial state is part of it.
    initial: bool,
    /// Initial adds taken into this entry, handled when it is.
    initials: usize,
    since: std::time::Instant,
}

impl<K> Coalesced<K> {
    /// The notifications this entry amounts to: none, one, or for a key the consumer knew
    /// that changed and then went away, the update from the version it saw to the last one
    /// cached, then the deletion — so that a consumer judging objects (a filter) sees the
    /// state the deletion starts from, never a deletion of a version it did not see.
    fn into_events(self, key: Arc<str>) -> Option<(Event<K>, Option<Event<K>>)> {
        match (self.base, self.latest) {
            (None, Latest::Present(obj)) => Some((
                Event::Add {
                    key,
                    obj,
                    initial: self.initial,
                },
                None,
            )),
            (Some(old), Latest::Present(new)) => Some((Event::Update { key, old, new }, None)),
            (
                Some(old),
                Latest::Deleted {
                    obj,
                    final_state_unknown,
                    prior,
                },
            ) => {
                let delete = Event::Delete {
                    key: Arc::clone(&key),
                    obj,
                    final_state_unknown,
                };
                if Arc::ptr_eq(&old, &prior) {
                    Some((delete, None))
                } else {
                    let update = Event::Update {
                        key,
                        old,
                        new: prior,
                    };
                    Some((update, Some(delete)))
                }
            }
            (None, Latest::Deleted { .. }) => None,
        }
    }
}

/// A consumer's buffer: notifications in order up to its bound, then one entry per key.
struct Buffer<K> {
    capacity: usize,
    segments: VecDeque<Segment<K>>,
    /// Notifications in `segments`.
    queued: usize,
    /// Of which the snapshot's, not held against the bound.
    exempt: usize,
    /// Behind its bound: every new notification goes to `coalesced` until it has caught up.
    coalescing: bool,
    order: VecDeque<Arc<str>>,
    coalesced: HashMap<Arc<str>, Coalesced<K>>,
    /// The second notification of a coalesced key (see [`Coalesced::into_events`]), handed out
    /// next.
    then: Option<(Event<K>, std::time::Instant)>,
    /// Takes nothing more: removed, stopped or dropped.
    closed: bool,
}

/// What a consumer takes out of its buffer.
enum Taken<K> {
    /// Notifications in order, shared with the other consumers.
    Run(Batch<K>, Range<usize>),
    /// One coalesced key, and the initial adds it stands for.
    One(Event<K>, usize),
    /// Nothing now.
    Empty,
    /// Nothing ever again: closed and drained.
    Finished,
}

impl<K> Buffer<K> {
    fn new(capacity: usize) -> Self {
        Self {
            capacity,
            segments: VecDeque::new(),
            queued: 0,
            exempt: 0,
            coalescing: false,
            order: VecDeque::new(),
            coalesced: HashMap::new(),
            then: None,
            closed: false,
        }
    }

    fn buffered(&self) -> usize {
        self.queued + self.coalesced.len() + usize::from(self.then.is_some())
    }

    fn push(&mut self, batch: &Batch<K>, state: &ListenerState) {
        let now = std::time::Instant::now();
        let len = batch.len();
        let mut from = 0;
        if !self.coalescing {
            // What the consumer has taken out and not started yet counts against the bound too.
            let in_hand = state.in_hand.load(Ordering::Acquire);
            let room = self
                .capacity
                .saturating_sub(self.queued - self.exempt + in_hand);
            let fits = len.min(room);
            if fits > 0 {
                self.segments.push_back(Segment {
                    batch: Arc::clone(batch),
                    next: 0,
                    end: fits,
                    since: now,
                    exempt: false,
                });
                self.queued += fits;
            }
            if fits == len {
                return;
            }
            from = fits;
            self.coalescing = true;
            state.overflows.fetch_add(1, Ordering::Relaxed);
        }
        state.coalesced.fetch_add(len - from, Ordering::Relaxed);
        for n in &batch[from..] {
            self.absorb(n, now);
        }
    }

    /// Takes one notification into its key's entry.
    fn absorb(&mut self, n: &Notification<K>, now: std::time::Instant) {
        let initial = usize::from(n.is_initial());
        let key = match &n.event {
            Event::Add { key, .. } | Event::Update { key, .. } | Event::Delete { key, .. } => key,
        };
        let latest = match &n.event {
            Event::Add { obj, .. } | Event::Update { new: obj, .. } => {
                Latest::Present(Arc::clone(obj))
            }
            Event::Delete {
                obj,
                final_state_unknown,
                ..
            } => Latest::Deleted {
                obj: Arc::clone(obj),
                final_state_unknown: *final_state_unknown,
                prior: n.prior.clone().unwrap_or_else(|| Arc::clone(obj)),
            },
        };
        if let Some(entry) = self.coalesced.get_mut(&**key) {
            entry.latest = latest;
            entry.initials += initial;
            if let Event::Add { initial, .. } = n.event {
                entry.initial = initial;
            }
            return;
        }
        let (base, initial_flag) = match &n.event {
            Event::Add { initial, .. } => (None, *initial),
            Event::Update { old, .. } => (Some(Arc::clone(old)), false),
            Event::Delete { obj, .. } => (
                Some(n.prior.clone().unwrap_or_else(|| Arc::clone(obj))),
                false,
            ),
        };
        self.order.push_back(Arc::clone(key));
        self.coalesced.insert(
            Arc::clone(key),
            Coalesced {
                base,
                latest,
                initial: initial_flag,
                initials: initial,
                since: now,
            },
        );
    }

    /// Takes up to `max` notifications in order, or one coalesced key. Initial adds of keys
    /// that came to nothing are returned in `dropped_initials`, handled at once; `since` is set
    /// to when what is taken was written.
    fn take(
        &mut self,
        max: usize,
        dropped_initials: &mut usize,
        since: &mut Option<std::time::Instant>,
    ) -> Taken<K> {
        if let Some((event, at)) = self.then.take() {
            *since = Some(at);
            return Taken::One(event, 0);
        }
        if let Some(segment) = self.segments.front_mut() {
            let start = segment.next;
            let end = segment.end.min(start + max.max(1));
            segment.next = end;
            let batch = Arc::clone(&segment.batch);
            *since = Some(segment.since);
            if segment.exempt {
                self.exempt -= end - start;
            }
            if end == segment.end {
                self.segments.pop_front();
            }
            self.queued -= end - start;
            return Taken::Run(batch, start..end);
        }
        while let Some(key) = self.order.pop_front() {
            let Some(entry) = self.coalesced.remove(&key) else {
                continue;
            };
            let initials = entry.initials;
            let at = entry.since;
            match entry.into_events(key) {
                Some((event, then)) => {
                    self.then = then.map(|then| (then, at));
                    *since = Some(at);
                    return Taken::One(event, initials);
                }
                None => *dropped_initials += initials,
            }
        }
        // Caught up: back to one notification per change.
        self.coalescing = false;
        if self.closed {
            Taken::Finished
        } else {
            Taken::Empty
        }
    }

    /// Drops everything buffered and takes nothing more.
    fn close_and_clear(&mut self) {
        self.closed = true;
        self.segments.clear();
        self.queued = 0;
        self.exempt = 0;
        self.order.clear();
        self.coalesced.clear();
        self.then = None;
    }

    fn oldest(&self) -> Option<std::time::Instant> {
        let segment = self.segments.front().map(|s| s.since);
        let key = self
            .order
            .iter()
            .find_map(|k| self.coalesced.get(k).map(|c| c.since));
        match (segment, key) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }
}

/// How a consumer is woken when something is buffered for it.
enum Wake {
    /// A synchronous handler: its job on the pool.
    Job {
        pool: Arc<DeliveryPool>,
        job: OnceLock<Weak<dyn Job>>,
    },
    /// An async consumer: its task's waker.
    Task(AtomicWaker),
}

/// One consumer's buffer and counters, shared by the processor and the consumer.
pub(crate) struct Listener<K> {
    state: Arc<ListenerState>,
    buffer: Mutex<Buffer<K>>,
    wake: Wake,
    upstream: Arc<Upstream>,
}

impl<K> Lag for Listener<K>
where
    K: Send + Sync,
{
    fn lag(&self) -> Duration {
        self.buffer
            .lock()
            .oldest()
            .map_or(Duration::ZERO, |since| since.elapsed())
    }
}

impl<K> Listener<K> {
    fn push(&self, batch: &Batch<K>) {
        {
            let mut buffer = self.buffer.lock();
            if buffer.closed {
                return;
            }
            buffer.push(batch, &self.state);
            self.state
                .buffered
                .store(buffer.buffered(), Ordering::Release);
        }
        self.wake();
    }

    fn wake(&self) {
        match &self.wake {
            Wake::Job { pool, job } => {
                if let Some(job) = job.get().and_then(Weak::upgrade) {
                    pool.schedule(&job);
                }
            }
            Wake::Task(waker) => waker.wake(),
        }
    }

    fn take(&self, max: usize) -> Taken<K> {
        let mut dropped = 0;
        let mut since = None;
        let taken = {
            let mut buffer = self.buffer.lock();
            let taken = buffer.take(max, &mut dropped, &mut since);
            let in_hand = match &taken {
                Taken::Run(_, range) => range.len(),
                Taken::One(..) => 1,
                Taken::Empty | Taken::Finished => 0,
            };
            if let Some(since) = since
                && in_hand > 0
            {
                self.state.lag.record(since.elapsed(), in_hand as u64);
            }
            self.state.in_hand.fetch_add(in_hand, Ordering::AcqRel);
            self.state
                .buffered
                .store(buffer.buffered(), Ordering::Release);
            taken
        };
        self.handled_initials(dropped);
        taken
    }

    /// Like [`take`](Self::take), registering `cx`'s waker if nothing is there.
    fn poll_take(&self, max: usize, cx: &mut Context<'_>) -> Taken<K> {
        if let Wake::Task(waker) = &self.wake {
            waker.register(cx.waker());
        }
        self.take(max)
    }

    /// One notification taken out is being handled now: it is no longer waiting.
    fn started(&self) {
        self.state.in_hand.fetch_sub(1, Ordering::AcqRel);
    }

    /// One notification has been handled, standing for `initials` initial adds.
    fn handled(&self, initials: usize) {
        self.state.delivered.fetch_add(1, Ordering::AcqRel);
        self.handled_initials(initials);
    }

    /// `n` initial adds have been handled: the consumer may have synced.
    fn handled_initials(&self, n: usize) {
        if n > 0 && self.state.pending_initial.fetch_sub(n, Ordering::AcqRel) == n {
            self.upstream.notify();
        }
    }

    /// No more notifications: what is buffered is still delivered, then the consumer ends.
    fn close(&self) {
        self.buffer.lock().closed = true;
        self.wake();
    }

    /// Stops at once: what is buffered is dropped.
    fn discard(&self) {
        self.state.discard.store(true, Ordering::Release);
        self.buffer.lock().close_and_clear();
        self.state.buffered.store(0, Ordering::Release);
        self.wake();
    }

    fn is_discarded(&self) -> bool {
        self.state.discard.load(Ordering::Acquire)
    }

    /// The consumer has ended: nothing of it runs any more.
    fn mark_stopped(&self) {
        self.buffer.lock().close_and_clear();
        self.state.buffered.store(0, Ordering::Release);
        self.state.in_hand.store(0, Ordering::Release);
        self.state.stopped.store(true, Ordering::Release);
        self.upstream.notify();
    }

    fn is_stopped(&self) -> bool {
        self.state.stopped.load(Ordering::Acquire)
    }
}

/// What a handler's panic means for it: whether it goes on.
pub(crate) fn after_panic(policy: PanicPolicy, id: u64, informer: &str, message: &str) -> bool {
    match policy {
        PanicPolicy::Continue => {
            tracing::error!(
                informer,
                handler = id,
                panic = message,
                "event handler panicked; going on"
            );
            true
        }
        PanicPolicy::StopHandler => {
            tracing::error!(
                informer,
                handler = id,
                panic = message,
                "event handler panicked; stopping it"
            );
            false
        }
        PanicPolicy::Abort => {
            tracing::error!(
                informer,
                handler = id,
                panic = message,
                "event handler panicked; aborting"
            );
            std::process::abort();
        }
    }
}

/// A synchronous handler, run on the delivery pool.
struct HandlerJob<K> {
    id: u64,
    slot: Slot,
    listener: Arc<Listener<K>>,
    handler: Box<dyn ResourceEventHandler<K>>,
    policy: PanicPolicy,
    informer: Arc<str>,
    _alive: JobToken,
}

impl<K: Send + Sync + 'static> HandlerJob<K> {
    /// Handles one event; false if the handler must stop.
    fn deliver(&self, event: &Event<K>, initials: usize) -> bool {
        self.listener.started();
        let outcome = catch_unwind(AssertUnwindSafe(|| event.dispatch(&*self.handler)));
        self.listener.handled(initials);
        let state = &self.listener.state;
        match outcome {
            Ok(()) => true,
            Err(panic) => {
                state.panics.fetch_add(1, Ordering::AcqRel);
                after_panic(self.policy, self.id, &self.informer, panic_message(&*panic))
            }
        }
    }

    fn finish(&self) -> Turn {
        self.listener.mark_stopped();
        Turn::Done
    }
}

impl<K: Send + Sync + 'static> Job for HandlerJob<K> {
    fn run(&self) -> Turn {
        let mut budget = TURN_BUDGET;
        loop {
            if self.listener.is_discarded() {
                return self.finish();
            }
            match self.listener.take(budget.min(TAKE)) {
                Taken::Run(batch, range) => {
                    for n in &batch[range] {
                        if self.listener.is_discarded() {
                            return self.finish();
                        }
                        if !self.deliver(&n.event, usize::from(n.is_initial())) {
                            return self.finish();
                        }
                        budget -= 1;
                    }
                }
                Taken::One(event, initials) => {
                    if !self.deliver(&event, initials) {
                        return self.finish();
                    }
                    budget -= 1;
                }
                Taken::Empty => return Turn::Idle,
                Taken::Finished => return self.finish(),
            }
            if budget == 0 {
                return Turn::More;
            }
        }
    }

    fn slot(&self) -> &Slot {
        &self.slot
    }

    fn panicked(&self, message: &str) {
        tracing::error!(informer = %self.informer, handler = self.id, panic = message, "event delivery panicked; the handler is stopped");
        self.listener.mark_stopped();
    }
}

/// Reads a listener's notifications one at a time from async code.
pub(crate) struct Cursor<K> {
    listener: Arc<Listener<K>>,
    run: Option<(Batch<K>, Range<usize>)>,
}

impl<K> Cursor<K> {
    /// The next event and the initial adds it stands for; `None` once the consumer has ended.
    pub(crate) fn poll_next(&mut self, cx: &mut Context<'_>) -> Poll<Option<(Event<K>, usize)>> {
        loop {
            if self.listener.is_discarded() {
                self.run = None;
                return Poll::Ready(None);
            }
            if let Some((batch, range)) = &mut self.run {
                if let Some(i) = range.next() {
                    let n = &batch[i];
                    self.listener.started();
                    return Poll::Ready(Some((n.event.clone(), usize::from(n.is_initial()))));
                }
                self.run = None;
            }
            match self.listener.poll_take(TAKE, cx) {
                Taken::Run(batch, range) => self.run = Some((batch, range)),
                Taken::One(event, initials) => {
                    self.listener.started();
                    return Poll::Ready(Some((event, initials)));
                }
                Taken::Empty => return Poll::Pending,
                Taken::Finished => return Poll::Ready(None),
            }
        }
    }

    /// The event last returned has been handled; it stood for `initials` initial adds.
    pub(crate) fn handled(&self, initials: usize) {
        self.listener.handled(initials);
    }

    pub(crate) fn panicked(&self) {
        self.listener.state.panics.fetch_add(1, Ordering::AcqRel);
    }

    /// The consumer has ended.
    pub(crate) fn mark_stopped(&self) {
        self.listener.mark_stopped();
    }

    /// Marks the consumer ended when dropped.
    pub(crate) fn stop_guard(&self) -> StopGuard<K> {
        StopGuard(Arc::clone(&self.listener))
    }

    /// Stop taking notifications; what is buffered is dropped (a subscription dropped).
    pub(crate) fn unsubscribe(&self) {
        self.listener.discard();
        self.listener.mark_stopped();
    }
}

/// Marks a consumer ended when dropped: however an async handler's task ends.
pub(crate) struct StopGuard<K>(Arc<Listener<K>>);

impl<K> Drop for StopGuard<K> {
    fn drop(&mut self) {
        self.0.mark_stopped();
    }
}

/// What consumes a listener's notifications.
pub(crate) enum Consumer<K> {
    /// A synchronous handler, on the pool.
    Handler(Box<dyn ResourceEventHandler<K>>),
    /// An async consumer: the caller drives the returned [`Cursor`].
    Async,
}

struct Registered<K> {
    id: u64,
    listener: Arc<Listener<K>>,
    /// A synchronous handler's job (the listener holds it weakly).
    job: Option<Arc<dyn Job>>,
    /// An async handler's task, aborted when the informer stops.
    task: Option<tokio::task::AbortHandle>,
    /// The period asked for; `Duration::ZERO` = no resync.
    requested_resync: Duration,
    /// The period in force (see [`determine_resync_period`]).
    resync_period: Duration,
    next_resync: Instant,
    /// Whether resync (same-version) updates go to this consumer now.
    syncing: bool,
}

/// client-go's rule: no resync asked or none supported → none; less than the check period → the
/// check period.
pub(crate) fn determine_resync_period(requested: Duration, check: Duration) -> Duration {
    if requested.is_zero() || check.is_zero() {
        Duration::ZERO
    } else {
        requested.max(check)
    }
}

/// Fans notifications out to every consumer.
pub(crate) struct Processor<K> {
    id: u64,
    inner: Mutex<Inner<K>>,
    policy: PanicPolicy,
    upstream: Arc<Upstream>,
    /// The pool, or (until first needed) the process-wide one: building an informer starts
    /// no thread.
    pool: OnceLock<Arc<DeliveryPool>>,
}

struct Inner<K> {
    listeners: Vec<Registered<K>>,
    /// Removed consumers that may still be handling what was buffered for them.
    removed: Vec<Arc<Listener<K>>>,
    next_id: u64,
    /// Notifications for every consumer, not handed over yet (see [`Processor::flush`]).
    pending: Vec<Notification<K>>,
}

impl<K> Inner<K> {
    /// Hands the pending notifications to every consumer, as one shared batch.
    fn flush(&mut self) {
        // Dropped subscriptions and handlers stopped by their policy take nothing more.
        self.listeners.retain(|l| !l.listener.is_stopped());
        if self.pending.is_empty() {
            return;
        }
        if self.listeners.is_empty() {
            self.pending.clear();
            return;
        }
        let batch: Batch<K> = self.pending.drain(..).collect();
        for l in &self.listeners {
            l.listener.push(&batch);
        }
    }
}

impl<K> fmt::Debug for Processor<K> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Processor")
            .field("listeners", &self.inner.lock().listeners.len())
            .finish()
    }
}

impl<K> Processor<K> {
    /// Stops every consumer, removed ones included, without delivering what is buffered (a
    /// handler ends after the notification it is handling; an async handler's task is
    /// cancelled at its next await); returns their states, to wait for.
    pub(crate) fn stop(&self) -> Vec<Arc<ListenerState>> {
        let mut inner = self.inner.lock();
        inner.pending.clear();
        let mut states = Vec::new();
        for l in inner.listeners.drain(..) {
            l.listener.discard();
            if let Some(task) = &l.task {
                task.abort();
            }
            if let Some(job) = &l.job {
                self.pool
                    .get_or_init(|| Arc::clone(DeliveryPool::global()))
                    .schedule(job);
            } else if l.task.is_none() {
                // A subscription: no code of it runs here.
                l.listener.mark_stopped();
            }
            states.push(Arc::clone(&l.listener.state));
        }
        for l in inner.removed.drain(..) {
            l.discard();
            states.push(Arc::clone(&l.state));
        }
        states
    }
}

impl<K: Send + Sync + 'static> Processor<K> {
    pub(crate) fn new(
        policy: PanicPolicy,
        upstream: Arc<Upstream>,
        pool: Option<Arc<DeliveryPool>>,
    ) -> Self {
        Self {
            id: NEXT_PROCESSOR.fetch_add(1, Ordering::Relaxed),
            inner: Mutex::new(Inner {
                listeners: Vec::new(),
                removed: Vec::new(),
                next_id: 0,
                pending: Vec::new(),
            }),
            policy,
            upstream,
            pool: pool.map(OnceLock::from).unwrap_or_default(),
        }
    }

    /// This processor's identity, which its registrations carry.
    pub(crate) fn id(&self) -> u64 {
        self.id
    }

    pub(crate) fn policy(&self) -> PanicPolicy {
        self.policy
    }

    pub(crate) fn pool(&self) -> &Arc<DeliveryPool> {
        self.pool.get_or_init(|| Arc::clone(DeliveryPool::global()))
    }

    /// Registers a consumer. `initial` objects are queued to it first, as initial adds, before
    /// any later notification can be (the caller holds the processing lock). Returns the
    /// registration and the cursor an async consumer reads its notifications through (a
    /// handler's job reads them itself; its cursor is not needed).
    pub(crate) fn add_listener(
        &self,
        consumer: Consumer<K>,
        options: HandlerOptions,
        requested_resync: Duration,
        check_period: Duration,
        initial: Vec<(Arc<str>, Arc<K>)>,
        informer: &Arc<str>,
    ) -> (HandlerRegistration, Cursor<K>) {
        let state = Arc::new(ListenerState {
            name: options.name.clone(),
            ..ListenerState::default()
        });
        let mut buffer = Buffer::new(options.buffer);
        if !initial.is_empty() {
            state
                .pending_initial
                .store(initial.len(), Ordering::Release);
            let snapshot: Batch<K> = initial
                .into_iter()
                .map(|(key, obj)| Notification::add(key, obj, true))
                .collect();
            // The snapshot is the cache's current state, not old versions: it is not held
            // against the bound, which later notifications are.
            let len = snapshot.len();
            buffer.segments.push_back(Segment {
                batch: snapshot,
                next: 0,
                end: len,
                since: std::time::Instant::now(),
                exempt: true,
            });
            buffer.queued = len;
            buffer.exempt = len;
            state.buffered.store(len, Ordering::Release);
        }
        let wake = match consumer {
            Consumer::Handler(_) => Wake::Job {
                pool: Arc::clone(self.pool()),
                job: OnceLock::new(),
            },
            Consumer::Async => Wake::Task(AtomicWaker::new()),
        };
        let listener = Arc::new(Listener {
            state: Arc::clone(&state),
            buffer: Mutex::new(buffer),
            wake,
            upstream: Arc::clone(&self.upstream),
        });
        let mut inner = self.inner.lock();
        // What was distributed before this consumer existed goes to the others only: its
        // snapshot already holds those changes.
        inner.flush();
        let id = inner.next_id;
        inner.next_id += 1;
        let job = match consumer {
            Consumer::Handler(handler) => {
                let job: Arc<dyn Job> = Arc::new(HandlerJob {
                    id,
                    slot: Slot::new(),
                    listener: Arc::clone(&listener),
                    handler,
                    policy: self.policy,
                    informer: Arc::clone(informer),
                    _alive: self.pool().track(),
                });
                if let Wake::Job { job: weak, .. } = &listener.wake {
                    let _ = weak.set(Arc::downgrade(&job));
                }
                Some(job)
            }
            Consumer::Async => None,
        };
        let resync_period = determine_resync_period(requested_resync, check_period);
        inner.listeners.push(Registered {
            id,
            listener: Arc::clone(&listener),
            job,
            task: None,
            requested_resync,
            resync_period,
            next_resync: Instant::now() + resync_period,
            syncing: true,
        });
        drop(inner);
        // A snapshot waiting: start delivering it.
        listener.wake();
        let cursor = Cursor {
            listener: Arc::clone(&listener),
            run: None,
        };
        let registration = HandlerRegistration {
            id,
            informer: self.id,
            state,
            upstream: Arc::clone(&self.upstream),
            lag: listener,
        };
        (registration, cursor)
    }

    /// The registrations of the consumers registered now.
    pub(crate) fn registrations(&self) -> Vec<HandlerRegistration>
    where
        K: Send + Sync + 'static,
    {
        self.inner
            .lock()
            .listeners
            .iter()
            .map(|l| HandlerRegistration {
                id: l.id,
                informer: self.id,
                state: Arc::clone(&l.listener.state),
                upstream: Arc::clone(&self.upstream),
                lag: Arc::clone(&l.listener) as Arc<dyn Lag>,
            })
            .collect()
    }

    /// Records the task an async handler runs on, to abort it when the informer stops.
    pub(crate) fn set_task(&self, id: u64, task: tokio::task::AbortHandle) {
        let mut inner = self.inner.lock();
        // Stopped or removed meanwhile: the task ends by itself.
        if let Some(l) = inner.listeners.iter_mut().find(|l| l.id == id) {
            l.task = Some(task);
        }
    }

    /// Unregisters consumer `id`: it handles what is already buffered, then ends. Unknown ids
    /// (already removed) are ignored.
    pub(crate) fn remove_listener(&self, id: u64) {
        let mut inner = self.inner.lock();
        // What was distributed before the removal is still delivered to it.
        inner.flush();
        inner.removed.retain(|l| !l.is_stopped());
        let Some(at) = inner.listeners.iter().position(|l| l.id == id) else {
            return;
        };
        let removed = inner.listeners.remove(at);
        removed.listener.close();
        // A job queued or running holds itself; the listener's weak handle finds it until then.
        if let Some(job) = removed.job {
            self.pool().schedule(&job);
        }
        inner.removed.push(removed.listener);
    }

    /// Sends `n` to every consumer, or, for a resync (`is_sync`), to those whose resync is due.
    ///
    /// A notification for every consumer is buffered until [`flush`](Self::flush) (or until
    /// [`MAX_BATCH`] are buffered); a resync goes out at once, after what is buffered, to the
    /// consumers it is for. An initial add is counted against each consumer's sync at once, so
    /// a consumer never reports synced while one is buffered.
    pub(crate) fn distribute(&self, n: Notification<K>, is_sync: bool) {
        let mut inner = self.inner.lock();
        if is_sync {
            inner.flush();
            let mut wanted = inner.listeners.iter().filter(|l| l.syncing).peekable();
            if wanted.peek().is_some() {
                let batch: Batch<K> = Arc::new([n]);
                wanted.for_each(|l| l.listener.push(&batch));
            }
            return;
        }
        if n.is_initial() {
            for l in inner.listeners.iter().filter(|l| !l.listener.is_stopped()) {
                l.listener
                    .state
                    .pending_initial
                    .fetch_add(1, Ordering::AcqRel);
            }
        }
        inner.pending.push(n);
        if inner.pending.len() >= MAX_BATCH {
            inner.flush();
        }
    }

    /// Hands every buffered notification to the consumers.
    pub(crate) fn flush(&self) {
        self.inner.lock().flush();
    }

    /// Decides which consumers take the next resync (client-go's `shouldResync`): those whose
    /// period has elapsed, which then start a new period. True if any does.
    pub(crate) fn should_resync(&self, now: Instant) -> bool {
        let mut inner = self.inner.lock();
        let mut any = false;
        for l in &mut inner.listeners {
            l.syncing = !l.resync_period.is_zero() && now >= l.next_resync;
            if l.syncing {
                any = true;
                l.next_resync = now + l.resync_period;
            }
        }
        any
    }

    /// Recomputes every consumer's period after the check period changed (before start).
    pub(crate) fn set_check_period(&self, check: Duration) {
        let now = Instant::now();
        let mut inner = self.inner.lock();
        for l in &mut inner.listeners {
            l.resync_period = determine_resync_period(l.requested_resync, check);
            l.next_resync = now + l.resync_period;
        }
    }

    #[cfg(test)]
    pub(crate) fn resync_periods(&self) -> Vec<Duration> {
        self.inner
            .lock()
            .listeners
            .iter()
            .map(|l| l.resync_period)
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(k: &str) -> Arc<str> {
        Arc::from(k)
    }

    /// A model consumer: applies what it receives to a map, as a controller's view would.
    fn apply(view: &mut std::collections::BTreeMap<String, u32>, event: &Event<u32>) {
        match event {
            Event::Add { key, obj, .. } => {
                assert!(
                    view.insert(key.to_string(), **obj).is_none(),
                    "add of a known key {key}"
                );
            }
            Event::Update { key, old, new } => {
                let seen = view.insert(key.to_string(), **new);
                assert_eq!(seen, Some(**old), "update of {key} from a version not seen");
            }
            Event::Delete { key, .. } => {
                assert!(
                    view.remove(&**key).is_some(),
                    "delete of an unknown key {key}"
                );
            }
        }
    }

    fn drain(buffer: &mut Buffer<u32>, view: &mut std::collections::BTreeMap<String, u32>) {
        let mut dropped = 0;
        loop {
            match buffer.take(7, &mut dropped, &mut None) {
                Taken::Run(batch, range) => batch[range].iter().for_each(|n| apply(view, &n.event)),
                Taken::One(event, _) => apply(view, &event),
                Taken::Empty | Taken::Finished => return,
            }
        }
    }

    use proptest::prelude::*;

    /// Operations on a model cache of keys 0..8 with version numbers.
    fn ops() -> impl Strategy<Value = Vec<(u8, u8, bool)>> {
        prop::collection::vec((0u8..8, 0u8..3, any::<bool>()), 1..200)
    }

    proptest! {
        /// Whatever the bound and however far behind the consumer is, what it receives is a
        /// consistent stream (every update starts from the version it saw, no add of a known
        /// key, no delete of an unknown one), and once drained its view equals the cache.
        #[test]
        fn a_lagging_consumer_ends_equal_to_the_cache(capacity in 1usize..20, ops in ops()) {
            let state = ListenerState::default();
            let mut buffer = Buffer::new(capacity);
            let mut cache = std::collections::BTreeMap::<String, u32>::new();
            let mut view = std::collections::BTreeMap::<String, u32>::new();
            let mut version = 0u32;
            let mut pending = Vec::new();
            for (k, op, consume) in ops {
                let k = format!("k{k}");
                version += 1;
                let n = match (op, cache.get(&k).copied()) {
                    (0 | 1, None) => Notification::add(key(&k), Arc::new(version), false),
                    (0 | 1, Some(old)) => Notification::update(key(&k), Arc::new(old), Arc::new(version)),
                    (_, Some(old)) => Notification::delete(key(&k), Arc::new(old), false, Arc::new(old)),
                    (_, None) => continue,
                };
                match &n.event {
                    Event::Delete { .. } => { cache.remove(&k); }
                    e => { cache.insert(k.clone(), **e.object()); }
                }
                pending.push(n);
                if consume || pending.len() > 5 {
                    let batch: Batch<u32> = pending.drain(..).collect();
                    buffer.push(&batch, &state);
                    prop_assert!(buffer.queued <= capacity);
                    if consume {
                        // Takes a little only: stays behind.
                        let mut dropped = 0;
                        match buffer.take(1, &mut dropped, &mut None) {
                            Taken::Run(b, r) => b[r].iter().for_each(|n| apply(&mut view, &n.event)),
                            Taken::One(e, _) => apply(&mut view, &e),
                            Taken::Empty | Taken::Finished => {}
                        }
                    }
                }
            }
            let batch: Batch<u32> = pending.drain(..).collect();
            buffer.push(&batch, &state);
            drain(&mut buffer, &mut view);
            prop_assert_eq!(view, cache);
            prop_assert!(!buffer.coalescing, "back to normal delivery once caught up");
            prop_assert_eq!(buffer.coalesced.len(), 0);
        }
    }

    #[test]
    fn an_add_and_delete_while_behind_yields_nothing_and_the_rest_coalesces() {
        let state = ListenerState::default();
        let mut buffer = Buffer::new(1);
        let batch: Batch<u32> = vec![
            Notification::add(key("a"), Arc::new(1), false),
            Notification::add(key("b"), Arc::new(2), false),
            Notification::update(key("b"), Arc::new(2), Arc::new(3)),
            Notification::update(key("b"), Arc::new(3), Arc::new(4)),
            Notification::add(key("c"), Arc::new(5), false),
            Notification::delete(key("c"), Arc::new(5), false, Arc::new(5)),
        ]
        .into();
        buffer.push(&batch, &state);
        assert_eq!(buffer.queued, 1);
        assert_eq!(state.coalesced.load(Ordering::Relaxed), 5);
        assert_eq!(state.overflows.load(Ordering::Relaxed), 1);
        let mut dropped = 0;
        let mut got = Vec::new();
        loop {
            match buffer.take(10, &mut dropped, &mut None) {
                Taken::Run(b, r) => got.extend(b[r].iter().map(|n| n.event.clone())),
                Taken::One(e, _) => got.push(e),
                _ => break,
            }
        }
        let described: Vec<String> = got
            .iter()
            .map(|e| match e {
                Event::Add { key, obj, .. } => format!("add {key} {obj}"),
                Event::Update { key, old, new } => format!("update {key} {old}->{new}"),
                Event::Delete { key, obj, .. } => format!("delete {key} {obj}"),
            })
            .collect();
        // b was added while behind: its add carries the latest version; c came and went.
        assert_eq!(described, ["add a 1", "add b 4"]);
    }
}
