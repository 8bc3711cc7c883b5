//! One consumer's end of the processor: its buffer and counters, how it is woken, and how it
//! reads — a synchronous handler's job on the pool, or a cursor for async code.

use std::ops::Range;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::atomic::Ordering;
use std::sync::{Arc, OnceLock, Weak};
use std::task::{Context, Poll};
use std::time::Duration;

use futures::task::AtomicWaker;
use informer_store::panic_message;
use parking_lot::Mutex;

use crate::buffer::{Batch, Buffer, Taken};
use crate::handler::{Event, ResourceEventHandler, filter_event};
use crate::options::{EventFilter, PanicPolicy, after_panic};
use crate::pool::{DeliveryPool, Job, JobToken, Slot, Turn};
use crate::registration::{Lag, ListenerState, Upstream};

/// How many notifications a synchronous handler handles in one turn on the pool before the
/// other jobs get theirs.
const TURN_BUDGET: usize = 256;

/// How many notifications a consumer takes out of its buffer under one acquisition of its lock.
const TAKE: usize = 64;

/// How a consumer is woken when something is buffered for it.
pub(crate) enum Wake {
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
    pub(crate) state: Arc<ListenerState>,
    pub(crate) buffer: Mutex<Buffer<K>>,
    pub(crate) wake: Wake,
    pub(crate) upstream: Arc<Upstream>,
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
    pub(crate) fn push(&self, batch: &Batch<K>) {
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

    pub(crate) fn wake(&self) {
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
    pub(crate) fn close(&self) {
        self.buffer.lock().closed = true;
        self.wake();
    }

    /// Stops at once: what is buffered is dropped.
    pub(crate) fn discard(&self) {
        self.state.discard.store(true, Ordering::Release);
        self.buffer.lock().close_and_clear();
        self.state.buffered.store(0, Ordering::Release);
        self.wake();
    }

    fn is_discarded(&self) -> bool {
        self.state.discard.load(Ordering::Acquire)
    }

    /// The consumer has ended: nothing of it runs any more.
    pub(crate) fn mark_stopped(&self) {
        self.buffer.lock().close_and_clear();
        self.state.buffered.store(0, Ordering::Release);
        self.state.in_hand.store(0, Ordering::Release);
        self.state.stopped.store(true, Ordering::Release);
        self.upstream.notify();
    }

    pub(crate) fn is_stopped(&self) -> bool {
        self.state.stopped.load(Ordering::Acquire)
    }
}

/// A synchronous handler, run on the delivery pool.
pub(crate) struct HandlerJob<K> {
    pub(crate) id: u64,
    pub(crate) slot: Slot,
    pub(crate) listener: Arc<Listener<K>>,
    pub(crate) handler: Box<dyn ResourceEventHandler<K>>,
    pub(crate) policy: PanicPolicy,
    pub(crate) informer: Arc<str>,
    pub(crate) _alive: JobToken,
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
                let going_on =
                    after_panic(self.policy, self.id, &self.informer, panic_message(&*panic));
                if !going_on {
                    state.failed.store(true, Ordering::Release);
                }
                going_on
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
        self.listener.state.failed.store(true, Ordering::Release);
        self.listener.mark_stopped();
    }
}

/// Reads a listener's notifications one at a time from async code.
pub(crate) struct Cursor<K> {
    pub(crate) listener: Arc<Listener<K>>,
    pub(crate) run: Option<(Batch<K>, Range<usize>)>,
    /// Only objects this filter passes reach the consumer.
    pub(crate) filter: Option<EventFilter<K>>,
}

impl<K> Cursor<K> {
    /// The next event and the initial adds it stands for; `None` once the consumer has ended.
    pub(crate) fn poll_next(&mut self, cx: &mut Context<'_>) -> Poll<Option<(Event<K>, usize)>> {
        loop {
            let (event, initials) = match self.poll_any(cx) {
                Poll::Ready(Some(next)) => next,
                other => return other,
            };
            let Some(filter) = &self.filter else {
                return Poll::Ready(Some((event, initials)));
            };
            match filter_event(event, &**filter) {
                Some(event) => return Poll::Ready(Some((event, initials))),
                // Filtered out: handled as far as the consumer's sync is concerned.
                None => self.listener.handled(initials),
            }
        }
    }

    /// The next event, filter aside.
    fn poll_any(&mut self, cx: &mut Context<'_>) -> Poll<Option<(Event<K>, usize)>> {
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

    /// The consumer's panic policy stops it (it is marked stopped as its task ends).
    pub(crate) fn failed(&self) {
        self.listener.state.failed.store(true, Ordering::Release);
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
