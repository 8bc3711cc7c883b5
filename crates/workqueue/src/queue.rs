//! [`WorkQueue`]: client-go's `util/workqueue` queue, delaying queue and rate-limiting queue in
//! one async type.

use std::collections::{BTreeMap, HashMap, VecDeque};

use foldhash::fast::RandomState;
use std::fmt;
use std::hash::Hash;
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use tokio::sync::Notify;
use tokio::time::Instant;

use crate::metrics::{MetricsProvider, Numbers, QueueHandle, QueueStats, Sampler, Source, Stamp};
use crate::rate_limiter::{RateLimiter, default_controller_rate_limiter};

/// How far from the end of the clock's range a deadline must be: the timer rounds a
/// deadline up (tokio: by up to a millisecond), which must not overflow the clock.
const CLOCK_END_MARGIN: Duration = Duration::from_secs(1);

/// A work queue of keys (client-go's rate-limiting `workqueue`), for any number of async
/// workers.
///
/// * **Each item once.** [`add`](Self::add) of an item that is already waiting does nothing;
///   an item added while a worker processes it is processed again after that worker's
///   [`done`](Self::done) — never by two workers at once.
/// * **Workers** loop on [`get`](Self::get) (`None` once the queue is shut down and empty),
///   process the item, and call [`done`](Self::done) with it.
/// * **Delays**: [`add_after`](Self::add_after) adds an item once a delay has passed (a waiting
///   item's earlier deadline wins; a delay past the clock's range means never);
///   [`add_rate_limited`](Self::add_rate_limited) delays it by
///   the [`RateLimiter`] (client-go's default: per-item exponential backoff from 5 ms up to
///   1,000 s, and an overall 10 per second with a burst of 100), and
///   [`forget`](Self::forget) clears its failures once it succeeds.
/// * **Shutdown**: [`shut_down`](Self::shut_down) stops taking items (adds are ignored, delayed
///   items are dropped); workers get what is still queued, then `None`.
///   [`shut_down_with_drain`](Self::shut_down_with_drain) also waits until every queued and
///   in-flight item is done, unless a `shut_down` meanwhile releases it.
///
/// Cheap to clone: clones share the queue.
///
/// ```
/// use informer_workqueue::WorkQueue;
///
/// # #[tokio::main(flavor = "current_thread")] async fn main() {
/// let queue = WorkQueue::<String>::new();
/// queue.add("ns/a".to_string());
/// queue.add("ns/a".to_string()); // already waiting: once
/// queue.add("ns/b".to_string());
/// assert_eq!(queue.len(), 2);
/// let item = queue.get().await.unwrap();
/// queue.add(item.clone()); // while it is processed: again after done
/// queue.done(&item);
/// assert_eq!(queue.len(), 2);
/// queue.shut_down();
/// assert!(queue.get().await.is_some()); // what is queued is still handed out
/// # }
/// ```
pub struct WorkQueue<T> {
    inner: Arc<Inner<T>>,
}

impl<T> Clone for WorkQueue<T> {
    fn clone(&self) -> Self {
        Self {
            inner: Arc::clone(&self.inner),
        }
    }
}

impl<T> fmt::Debug for WorkQueue<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let state = self.inner.state.lock();
        f.debug_struct("WorkQueue")
            .field("name", &self.inner.name)
            .field("queued", &state.queue.len())
            .field("processing", &state.processing.len())
            .field("delayed", &state.delayed.len())
            .field("shutting_down", &state.shutting_down)
            .finish()
    }
}

struct Inner<T> {
    name: String,
    state: Mutex<State<T>>,
    /// Wakes a worker waiting in `get`.
    ready: Notify,
    /// Wakes `shut_down_with_drain` when the last item is done.
    drained: Notify,
    limiter: Box<dyn RateLimiter<T>>,
}

/// Whether, and since when, an item is being processed.
#[derive(Debug, Clone, Copy)]
enum Started {
    /// Not timed (no provider, or not in the sample).
    Untimed,
    /// Timed from its get.
    Timed(Stamp),
    /// Not timed, but seen in progress by a read of the stats at this instant.
    Seen(Instant),
}

struct State<T> {
    /// Items to hand out, in order.
    queue: VecDeque<T>,
    /// Items waiting (queued, or to be queued again when their processing is done), with when
    /// each was added if it is timed.
    dirty: HashMap<T, Option<Stamp>, RandomState>,
    /// Items being processed.
    processing: HashMap<T, Started, RandomState>,
    /// Delayed items by deadline (the sequence number breaks ties).
    timeline: BTreeMap<(Instant, u64), T>,
    /// Each delayed item's place in the timeline.
    delayed: HashMap<T, (Instant, u64), RandomState>,
    next_seq: u64,
    shutting_down: bool,
    /// A drain has completed: nothing more is handed out.
    drained: bool,
    /// How many times `shut_down` was called: a drain that began before the last call
    /// returns without waiting any longer.
    shut_downs: u64,
    sampler: Sampler,
    numbers: Numbers,
}

/// Builds a [`WorkQueue`] with a name, a rate limiter and metrics.
pub struct WorkQueueBuilder<T> {
    name: String,
    limiter: Option<Box<dyn RateLimiter<T>>>,
    metrics: Option<Arc<dyn MetricsProvider>>,
}

impl<T> fmt::Debug for WorkQueueBuilder<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("WorkQueueBuilder")
            .field("name", &self.name)
            .field("limiter", &self.limiter.is_some())
            .field("metrics", &self.metrics.is_some())
            .finish()
    }
}

impl<T> WorkQueueBuilder<T>
where
    T: Clone + Eq + Hash + Send + Sync + 'static,
{
    /// The queue's name, given to the metrics provider.
    pub fn name(mut self, name: impl Into<String>) -> Self {
        self.name = name.into();
        self
    }

    /// The rate limiter of [`add_rate_limited`](WorkQueue::add_rate_limited) (default:
    /// [`default_controller_rate_limiter`]).
    pub fn rate_limiter(mut self, limiter: impl RateLimiter<T> + 'static) -> Self {
        self.limiter = Some(Box::new(limiter));
        self
    }

    /// Who reads the queue's metrics (default: no one). With a provider the queue times its
    /// items (a sample of them at high rates: see the [`metrics`](crate::metrics) module).
    pub fn metrics(mut self, provider: Arc<dyn MetricsProvider>) -> Self {
        self.metrics = Some(provider);
        self
    }

    /// The queue.
    pub fn build(self) -> WorkQueue<T> {
        let inner = Arc::new(Inner {
            name: self.name,
            state: Mutex::new(State {
                queue: VecDeque::new(),
                dirty: HashMap::default(),
                processing: HashMap::default(),
                timeline: BTreeMap::new(),
                delayed: HashMap::default(),
                next_seq: 0,
                shutting_down: false,
                drained: false,
                shut_downs: 0,
                sampler: Sampler::new(self.metrics.is_some()),
                numbers: Numbers::default(),
            }),
            ready: Notify::new(),
            drained: Notify::new(),
            limiter: self
                .limiter
                .unwrap_or_else(|| Box::new(default_controller_rate_limiter())),
        });
        if let Some(provider) = self.metrics {
            let weak = Arc::downgrade(&inner);
            let source: std::sync::Weak<dyn Source> = weak;
            provider.register(QueueHandle::new(inner.name.clone(), source));
        }
        WorkQueue { inner }
    }
}

impl<T> Source for Inner<T>
where
    T: Clone + Eq + Hash + Send + Sync + 'static,
{
    fn stats(&self) -> QueueStats {
        let mut state = self.state.lock();
        let now = Instant::now();
        let (mut unfinished, mut longest) = (0.0, 0.0f64);
        for started in state.processing.values_mut() {
            let since = match *started {
                Started::Timed(stamp) => stamp.at,
                Started::Seen(at) => at,
                Started::Untimed => {
                    *started = Started::Seen(now);
                    now
                }
            };
            let age = now.saturating_duration_since(since).as_secs_f64();
            unfinished += age;
            longest = longest.max(age);
        }
        QueueStats {
            name: self.name.clone(),
            depth: state.dirty.len(),
            in_flight: state.processing.len(),
            adds: state.numbers.adds,
            retries: state.numbers.retries,
            queue_duration: state.numbers.queue_duration.clone(),
            work_duration: state.numbers.work_duration.clone(),
            timed: state.numbers.timed,
            unfinished_work_seconds: unfinished,
            longest_running_processor_seconds: longest,
        }
    }
}

impl<T> Default for WorkQueue<T>
where
    T: Clone + Eq + Hash + Send + Sync + 'static,
{
    fn default() -> Self {
        Self::new()
    }
}

impl<T> WorkQueue<T>
where
    T: Clone + Eq + Hash + Send + Sync + 'static,
{
    /// A queue with client-go's default controller rate limiter and no metrics.
    pub fn new() -> Self {
        Self::builder().build()
    }

    /// A builder: name, rate limiter, metrics.
    pub fn builder() -> WorkQueueBuilder<T> {
        WorkQueueBuilder {
            name: String::new(),
            limiter: None,
            metrics: None,
        }
    }

    /// The queue's name.
    pub fn name(&self) -> &str {
        &self.inner.name
    }

    /// Adds `item` unless it is waiting already. If a worker is processing it, it is queued
    /// again when that worker calls [`done`](Self::done). Ignored once shutting down.
    pub fn add(&self, item: T) {
        let mut state = self.inner.state.lock();
        if Self::add_locked(&mut state, item) {
            drop(state);
            self.inner.ready.notify_one();
        }
    }

    /// [`add`](Self::add) without building the item when it is waiting already: `probe` finds
    /// it (a `&str` for `Arc<str>` items), `make` builds it only if it must be added. For
    /// callers that add the same keys over and over (an event handler).
    pub fn add_with<Q>(&self, probe: &Q, make: impl FnOnce() -> T)
    where
        T: std::borrow::Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        let mut state = self.inner.state.lock();
        if state.shutting_down || state.dirty.contains_key(probe) {
            return;
        }
        if Self::add_new_locked(&mut state, make()) {
            drop(state);
            self.inner.ready.notify_one();
        }
    }

    /// Whether the add queued an item for a worker now.
    fn add_locked(state: &mut State<T>, item: T) -> bool {
        if state.shutting_down || state.dirty.contains_key(&item) {
            return false;
        }
        Self::add_new_locked(state, item)
    }

    /// [`add_locked`](Self::add_locked) for an item known not to be waiting, the queue not
    /// shutting down.
    fn add_new_locked(state: &mut State<T>, item: T) -> bool {
        state.numbers.adds += 1;
        let stamp = state.sampler.sample();
        state.dirty.insert(item.clone(), stamp);
        if state.processing.contains_key(&item) {
            return false;
        }
        state.queue.push_back(item);
        true
    }

    /// Adds `item` once `delay` has passed (at once for a zero delay). An item already delayed
    /// keeps the earlier of its two deadlines. Ignored once shutting down.
    ///
    /// Any delay is valid. One that takes the deadline past the clock's range (less a second)
    /// means **never**: this call does not add the item (an earlier deadline it has stands).
    /// [`Duration::MAX`] is such a delay everywhere; on Linux the clock reaches about 292
    /// billion years, elsewhere it may end sooner. A rate limiter's "never" is
    /// `Duration::MAX` (see [`RateLimiter::when`]).
    pub fn add_after(&self, item: T, delay: Duration) {
        let mut state = self.inner.state.lock();
        if state.shutting_down {
            return;
        }
        state.numbers.retries += 1;
        if delay.is_zero() {
            if Self::add_locked(&mut state, item) {
                drop(state);
                self.inner.ready.notify_one();
            }
            return;
        }
        let Some(deadline) = Instant::now()
            .checked_add(delay)
            .filter(|at| at.checked_add(CLOCK_END_MARGIN).is_some())
        else {
            // Past the clock's range: never.
            return;
        };
        if let Some(&(at, seq)) = state.delayed.get(&item) {
            if at <= deadline {
                return;
            }
            state.timeline.remove(&(at, seq));
        }
        let seq = state.next_seq;
        state.next_seq += 1;
        state.timeline.insert((deadline, seq), item.clone());
        state.delayed.insert(item, (deadline, seq));
        drop(state);
        // A worker waiting may have to wake sooner now.
        self.inner.ready.notify_waiters();
    }

    /// Adds `item` after the rate limiter's delay for it (client-go's `AddRateLimited`).
    pub fn add_rate_limited(&self, item: T) {
        let delay = self.inner.limiter.when(&item);
        self.add_after(item, delay);
    }

    /// Clears `item`'s failures in the rate limiter: call it when the item succeeded.
    pub fn forget(&self, item: &T) {
        self.inner.limiter.forget(item);
    }

    /// How many times the rate limiter has counted `item` as retried.
    pub fn num_requeues(&self, item: &T) -> usize {
        self.inner.limiter.num_requeues(item)
    }

    /// Moves the delayed items whose deadline has passed into the queue; the next deadline.
    fn promote(state: &mut State<T>, now: Instant) -> Option<Instant> {
        while let Some((&(at, seq), _)) = state.timeline.first_key_value() {
            if at > now {
                return Some(at);
            }
            let item = state
                .timeline
                .remove(&(at, seq))
                .expect("the first entry is there");
            state.delayed.remove(&item);
            Self::add_locked(state, item);
        }
        None
    }

    /// The next item to process, waiting for one; `None` once the queue is shut down and
    /// nothing is queued. Call [`done`](Self::done) with it when processed. Cancel-safe.
    pub async fn get(&self) -> Option<T> {
        loop {
            let ready = self.inner.ready.notified();
            tokio::pin!(ready);
            ready.as_mut().enable();
            let next_deadline = {
                let mut state = self.inner.state.lock();
                let (now, next) = if state.shutting_down || state.timeline.is_empty() {
                    (None, None)
                } else {
                    let now = Instant::now();
                    (Some(now), Self::promote(&mut state, now))
                };
                if !state.drained
                    && let Some(item) = state.queue.pop_front()
                {
                    let started = match state.dirty.remove(&item).flatten() {
                        Some(added) => {
                            let now = now.unwrap_or_else(Instant::now);
                            state.numbers.timed += 1;
                            state.numbers.queue_duration.observe(
                                now.saturating_duration_since(added.at),
                                added.weight.into(),
                            );
                            Started::Timed(Stamp {
                                at: now,
                                weight: added.weight,
                            })
                        }
                        None => Started::Untimed,
                    };
                    state.processing.insert(item.clone(), started);
                    // Another worker may be waiting for the rest.
                    if !state.queue.is_empty() {
                        self.inner.ready.notify_one();
                    }
                    return Some(item);
                }
                if state.shutting_down {
                    return None;
                }
                state.sampler.idle();
                next
            };
            match next_deadline {
                Some(at) => {
                    tokio::select! {
                        () = ready => {}
                        () = tokio::time::sleep_until(at) => {}
                    }
                }
                None => ready.await,
            }
        }
    }

    /// Marks `item` processed. If it was added again meanwhile, it is queued now.
    pub fn done(&self, item: &T) {
        let mut state = self.inner.state.lock();
        let Some(started) = state.processing.remove(item) else {
            return;
        };
        if let Started::Timed(stamp) = started {
            let took = Instant::now().saturating_duration_since(stamp.at);
            state
                .numbers
                .work_duration
                .observe(took, stamp.weight.into());
        }
        let requeued = state.dirty.contains_key(item);
        if requeued {
            state.queue.push_back(item.clone());
        }
        let idle = state.shutting_down && state.processing.is_empty() && state.queue.is_empty();
        drop(state);
        if requeued {
            self.inner.ready.notify_one();
        }
        if idle {
            self.inner.drained.notify_waiters();
        }
    }

    /// Items queued for a worker (client-go's `Len`; delayed items not included).
    pub fn len(&self) -> usize {
        self.inner.state.lock().queue.len()
    }

    /// Whether no item is queued for a worker.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Items being processed now.
    pub fn in_flight(&self) -> usize {
        self.inner.state.lock().processing.len()
    }

    /// Stops taking items: later adds are ignored and delayed items dropped; workers get what
    /// is queued, then `None`. Releases a [`shut_down_with_drain`](Self::shut_down_with_drain)
    /// that is waiting (client-go's `ShutDown`): it returns without waiting for the rest.
    pub fn shut_down(&self) {
        {
            let mut state = self.inner.state.lock();
            Self::stop_locked(&mut state);
            state.shut_downs = state.shut_downs.wrapping_add(1);
        }
        self.inner.ready.notify_waiters();
        self.inner.drained.notify_waiters();
    }

    /// Stops taking items and drops the delayed ones.
    fn stop_locked(state: &mut State<T>) {
        state.shutting_down = true;
        state.timeline.clear();
        state.delayed.clear();
    }

    /// [`shut_down`](Self::shut_down), then waits until every queued and in-flight item is
    /// done (the workers go on taking what is queued meanwhile). Once it returns so, `get`
    /// returns `None` and nothing more is processed. With no worker running it waits for
    /// ever: bound it with `tokio::time::timeout`. Cancel-safe.
    ///
    /// A [`shut_down`](Self::shut_down) called while it waits releases it (client-go's
    /// `ShutDown` does): it returns at once, without the items being done, and the queue is
    /// as after `shut_down` alone (workers still get what is queued, then `None`). A
    /// `shut_down` called before it began does not: it waits as usual.
    pub async fn shut_down_with_drain(&self) {
        let begun = {
            let mut state = self.inner.state.lock();
            Self::stop_locked(&mut state);
            state.shut_downs
        };
        self.inner.ready.notify_waiters();
        loop {
            let drained = self.inner.drained.notified();
            tokio::pin!(drained);
            drained.as_mut().enable();
            {
                let mut state = self.inner.state.lock();
                if state.processing.is_empty() && state.queue.is_empty() {
                    state.drained = true;
                    return;
                }
                if state.shut_downs != begun {
                    // Released by a `shut_down`.
                    return;
                }
            }
            drained.await;
        }
    }

    /// Whether [`shut_down`](Self::shut_down) has been called.
    pub fn is_shutting_down(&self) -> bool {
        self.inner.state.lock().shutting_down
    }

    /// The queue's numbers now (client-go's workqueue metric set). The durations are empty
    /// unless the queue was built with a [`MetricsProvider`].
    pub fn stats(&self) -> QueueStats {
        self.inner.stats()
    }
}
