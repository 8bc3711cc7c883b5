//! The processor: fans every change out to the informer's consumers — synchronous handlers
//! (jobs on the delivery pool), async handlers (tokio tasks) and subscriptions (streams) —
//! each through a bounded buffer of its own that degrades to per-key coalescing when its
//! consumer falls behind.

use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use futures::task::AtomicWaker;
use parking_lot::Mutex;
use tokio::time::Instant;

use crate::buffer::{Batch, Buffer, Notification};
use crate::handler::ResourceEventHandler;
use crate::listener::{Cursor, HandlerJob, Listener, Wake};
use crate::options::{HandlerOptions, PanicPolicy};
use crate::pool::{DeliveryPool, Job, Slot};
use crate::registration::{HandlerRegistration, Lag, ListenerState, Upstream};

/// How many notifications the processor gathers before it hands them to the consumers, if the
/// pop loop has not flushed them at the end of its batch first.
const MAX_BATCH: usize = 256;

/// Every processor's identity, so a registration names the informer it came from.
static NEXT_PROCESSOR: AtomicU64 = AtomicU64::new(0);

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
    /// The ids of consumers their panic policy stopped, out of `listeners` since: for the
    /// informer's health.
    failed: Vec<u64>,
    next_id: u64,
    /// Notifications for every consumer, not handed over yet (see [`Processor::flush`]).
    pending: Vec<Notification<K>>,
}

impl<K> Inner<K> {
    /// Hands the pending notifications to every consumer, as one shared batch.
    fn flush(&mut self) {
        // Dropped subscriptions and handlers stopped by their policy take nothing more; the
        // latter stay a problem of the informer's health.
        let failed = &mut self.failed;
        self.listeners.retain(|l| {
            let stopped = l.listener.is_stopped();
            if stopped && l.listener.state.failed.load(Ordering::Acquire) {
                failed.push(l.id);
            }
            !stopped
        });
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
                failed: Vec::new(),
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
        options: HandlerOptions<K>,
        requested_resync: Duration,
        check_period: Duration,
        initial: Vec<(Arc<str>, Arc<K>)>,
        informer: &Arc<str>,
    ) -> (HandlerRegistration, Cursor<K>) {
        let state = Arc::new(ListenerState {
            name: options.name.clone(),
            ..ListenerState::default()
        });
        let initial_len = initial.len();
        let buffer = Buffer::with_snapshot(options.buffer, initial);
        state.pending_initial.store(initial_len, Ordering::Release);
        state.buffered.store(initial_len, Ordering::Release);
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
            Consumer::Handler(handler) => Some(self.handler_job(id, &listener, handler, informer)),
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
            filter: options.filter,
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

    /// A synchronous handler's job on the pool, which its listener wakes.
    fn handler_job(
        &self,
        id: u64,
        listener: &Arc<Listener<K>>,
        handler: Box<dyn ResourceEventHandler<K>>,
        informer: &Arc<str>,
    ) -> Arc<dyn Job> {
        let job: Arc<dyn Job> = Arc::new(HandlerJob {
            id,
            slot: Slot::new(),
            listener: Arc::clone(listener),
            handler,
            policy: self.policy,
            informer: Arc::clone(informer),
            _alive: self.pool().track(),
        });
        if let Wake::Job { job: weak, .. } = &listener.wake {
            let _ = weak.set(Arc::downgrade(&job));
        }
        job
    }

    /// The ids of the consumers their panic policy stopped (and not removed since), whether or
    /// not they have left the list of consumers yet.
    pub(crate) fn failed(&self) -> Vec<u64> {
        let inner = self.inner.lock();
        let listed = inner
            .listeners
            .iter()
            .filter(|l| l.listener.state.failed.load(Ordering::Acquire))
            .map(|l| l.id);
        listed.chain(inner.failed.iter().copied()).collect()
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
        // A consumer its panic policy stopped is no longer a problem once removed.
        inner.failed.retain(|failed| *failed != id);
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
