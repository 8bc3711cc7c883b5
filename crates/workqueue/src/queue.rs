//! [`WorkQueue`]: client-go's `util/workqueue` queue, delaying queue and rate-limiting queue in
//! one async type, handing items out first in, first out, or by priority and fair across
//! tenants.

use std::fmt;
use std::hash::Hash;
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use tokio::sync::Notify;
use tokio::time::Instant;

use crate::builder::WorkQueueBuilder;
use crate::metrics::{QueueStats, Source};
use crate::rate_limiter::RateLimiter;
use crate::state::{DEFAULT_PRIORITY, Started, State};

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
/// * **Order**: first in, first out; or, built with
///   [`priority`](WorkQueueBuilder::priority) (or [`priority_by`](WorkQueueBuilder::priority_by)),
///   by priority, fair across tenants: the highest priority first
///   ([`add_with_priority`](Self::add_with_priority); an item is raised, never lowered, and a
///   requeue keeps its priority), and within a priority the tenants (namespaces) in turn.
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
    pub(crate) inner: Arc<Inner<T>>,
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
            .field("queued", &state.order.len())
            .field("processing", &state.processing.len())
            .field("delayed", &state.delayed.len())
            .field("shutting_down", &state.shutting_down)
            .finish()
    }
}

pub(crate) struct Inner<T> {
    pub(crate) name: String,
    pub(crate) state: Mutex<State<T>>,
    /// Wakes a worker waiting in `get`.
    pub(crate) ready: Notify,
    /// Wakes `shut_down_with_drain` when the last item is done.
    pub(crate) drained: Notify,
    pub(crate) limiter: Box<dyn RateLimiter<T>>,
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
    /// A first-in-first-out queue with client-go's default controller rate limiter and no
    /// metrics.
    pub fn new() -> Self {
        Self::builder().build()
    }

    /// A builder: name, rate limiter, metrics, priority.
    pub fn builder() -> WorkQueueBuilder<T> {
        WorkQueueBuilder::new()
    }

    /// The queue's name.
    pub fn name(&self) -> &str {
        &self.inner.name
    }

    /// Whether the queue hands items out by priority, fair across tenants (built with
    /// [`priority`](WorkQueueBuilder::priority) or
    /// [`priority_by`](WorkQueueBuilder::priority_by)), rather than first in, first out.
    pub fn is_priority(&self) -> bool {
        self.inner.state.lock().order.is_fair()
    }

    /// Adds `item` unless it is waiting already. If a worker is processing it, it is queued
    /// again when that worker calls [`done`](Self::done). Ignored once shutting down. In a
    /// priority queue: at the default priority, 0 (see
    /// [`add_with_priority`](Self::add_with_priority)).
    pub fn add(&self, item: T) {
        self.add_with_priority(item, DEFAULT_PRIORITY);
    }

    /// [`add`](Self::add) at `priority`, in a priority queue (a first-in-first-out queue
    /// ignores the priority): higher priorities are handed out first (real changes at the
    /// default, 0; the initial list and resyncs at [`LOW_PRIORITY`](crate::LOW_PRIORITY)). An
    /// item waiting already is raised to `priority` if that is higher than its own, never
    /// lowered; an item being processed is queued again at its done with the highest priority
    /// it was added with meanwhile.
    pub fn add_with_priority(&self, item: T, priority: i32) {
        let mut state = self.inner.state.lock();
        if state.add(item, priority) {
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
        self.add_probed(probe, DEFAULT_PRIORITY, make);
    }

    /// [`add_with`](Self::add_with) at `priority` (see
    /// [`add_with_priority`](Self::add_with_priority)).
    pub fn add_probed<Q>(&self, probe: &Q, priority: i32, make: impl FnOnce() -> T)
    where
        T: std::borrow::Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        let mut state = self.inner.state.lock();
        if state.shutting_down {
            return;
        }
        if let Some((item, waiting)) = state.dirty.get_key_value(probe) {
            if state.order.is_fair() && priority > waiting.priority {
                let item = item.clone();
                state.raise(&item, priority);
            }
            return;
        }
        if state.add_new(make(), priority) {
            drop(state);
            self.inner.ready.notify_one();
        }
    }

    /// Adds `item` once `delay` has passed (at once for a zero delay). An item already delayed
    /// keeps the earlier of its two deadlines. Ignored once shutting down. In a priority
    /// queue the item keeps its priority: the highest it has in the queue (being processed,
    /// waiting or delayed), or the default for an item the queue does not hold.
    ///
    /// Any delay is valid. One that takes the deadline past the clock's range (less a second)
    /// means **never**: this call does not add the item (an earlier deadline it has stands).
    /// [`Duration::MAX`] is such a delay everywhere; on Linux the clock reaches about 292
    /// billion years, elsewhere it may end sooner. A rate limiter's "never" is
    /// `Duration::MAX` (see [`RateLimiter::when`]).
    pub fn add_after(&self, item: T, delay: Duration) {
        self.delay(item, delay, None);
    }

    /// [`add_after`](Self::add_after) at `priority` (see
    /// [`add_with_priority`](Self::add_with_priority)): an item already delayed keeps the
    /// earlier deadline and the higher priority.
    pub fn add_after_with_priority(&self, item: T, delay: Duration, priority: i32) {
        self.delay(item, delay, Some(priority));
    }

    /// Adds `item` after `delay`, at `priority` or, without one, at the item's own.
    fn delay(&self, item: T, delay: Duration, priority: Option<i32>) {
        let mut state = self.inner.state.lock();
        if state.shutting_down {
            return;
        }
        state.numbers.retries += 1;
        let priority = priority.unwrap_or_else(|| state.priority_of(&item));
        if delay.is_zero() {
            if state.add(item, priority) {
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
        if state.delay(item, deadline, priority) {
            drop(state);
            // A worker waiting may have to wake sooner now.
            self.inner.ready.notify_waiters();
        }
    }

    /// Adds `item` after the rate limiter's delay for it (client-go's `AddRateLimited`),
    /// keeping its priority as [`add_after`](Self::add_after) does.
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
                    (Some(now), state.promote(now))
                };
                if !state.drained
                    && let Some(item) = state.take(now)
                {
                    // Another worker may be waiting for the rest.
                    if state.order.len() > 0 {
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
        let requeued = state.done(item);
        let idle = state.shutting_down && state.processing.is_empty() && state.order.len() == 0;
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
        self.inner.state.lock().order.len()
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
            state.stop();
            state.shut_downs = state.shut_downs.wrapping_add(1);
        }
        self.inner.ready.notify_waiters();
        self.inner.drained.notify_waiters();
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
            state.stop();
            state.shut_downs
        };
        self.inner.ready.notify_waiters();
        loop {
            let drained = self.inner.drained.notified();
            tokio::pin!(drained);
            drained.as_mut().enable();
            {
                let mut state = self.inner.state.lock();
                if state.processing.is_empty() && state.order.len() == 0 {
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
    /// unless the queue was built with a [`MetricsProvider`](crate::MetricsProvider).
    pub fn stats(&self) -> QueueStats {
        self.inner.stats()
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
        for processing in state.processing.values_mut() {
            let started = &mut processing.started;
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
