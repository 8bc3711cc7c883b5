//! The processor: one buffered listener per handler, each with its own worker thread.

use std::fmt;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::time::Duration;

use crossbeam_channel::{Receiver, Sender};
use informer_fifo::DeletedObject;
use informer_store::panic_message;
use parking_lot::Mutex;
use tokio::sync::watch;
use tokio::time::Instant;

use crate::handler::ResourceEventHandler;
use crate::thread::Joinable;

/// What a listener's worker does when its handler panics.
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

/// How many notifications the processor buffers before it hands them to the listeners, if the
/// pop loop has not flushed them at the end of its batch first.
const MAX_BATCH: usize = 256;

/// Notifications handed to every listener at once: one shared, read-only buffer, so sending a
/// change to N handlers neither clones its objects' `Arc`s N times nor has N threads contend
/// on their reference counts; each handler reads the objects by reference.
type Batch<K> = Arc<[Notification<K>]>;

/// One change, as queued for a handler.
pub(crate) enum Notification<K> {
    Add(Arc<K>, bool),
    Update(Arc<K>, Arc<K>),
    Delete(DeletedObject<K>),
}

impl<K> Clone for Notification<K> {
    fn clone(&self) -> Self {
        match self {
            Self::Add(o, initial) => Self::Add(Arc::clone(o), *initial),
            Self::Update(old, new) => Self::Update(Arc::clone(old), Arc::clone(new)),
            Self::Delete(d) => Self::Delete(d.clone()),
        }
    }
}

/// State a listener shares with its registration handle.
pub(crate) struct ListenerState {
    /// Initial adds queued for this handler and not yet handled.
    pending_initial: AtomicUsize,
    /// Latched once the handler has synced.
    synced: AtomicBool,
    /// The worker has stopped (removed, stopped by policy, or informer stopped).
    stopped: AtomicBool,
    /// Stop without delivering what is buffered (the informer is shutting down).
    discard: AtomicBool,
    /// Notifications handled so far.
    delivered: AtomicUsize,
    /// Notifications buffered and not yet handled.
    queued: AtomicUsize,
    /// Handler panics caught so far.
    panics: AtomicUsize,
}

impl ListenerState {
    fn new() -> Self {
        Self {
            pending_initial: AtomicUsize::new(0),
            synced: AtomicBool::new(false),
            stopped: AtomicBool::new(false),
            discard: AtomicBool::new(false),
            delivered: AtomicUsize::new(0),
            queued: AtomicUsize::new(0),
            panics: AtomicUsize::new(0),
        }
    }
}

/// An informer's readiness, shared with its handlers' registrations: whether it has synced,
/// whether it has stopped, and a signal sent on every change of either or of a handler's own
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

/// What [`add_event_handler`](crate::SharedIndexInformer::add_event_handler) returns: the
/// handler's identity (which names its informer) and its own sync state.
#[derive(Clone)]
pub struct HandlerRegistration {
    id: u64,
    informer: u64,
    state: Arc<ListenerState>,
    upstream: Arc<Upstream>,
}

impl fmt::Debug for HandlerRegistration {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("HandlerRegistration")
            .field("id", &self.id)
            .field("has_synced", &self.has_synced())
            .field("backlog", &self.backlog())
            .finish()
    }
}

impl HandlerRegistration {
    /// Whether this handler has seen the whole initial state: the informer has synced and the
    /// handler has handled every initial add queued for it (for a handler added late, its
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

    /// Notifications buffered for this handler and not yet handled.
    pub fn backlog(&self) -> usize {
        self.state.queued.load(Ordering::Acquire)
    }

    /// Notifications this handler has handled (panicked ones included).
    pub fn delivered(&self) -> usize {
        self.state.delivered.load(Ordering::Acquire)
    }

    /// Panics caught in this handler.
    pub fn panics(&self) -> usize {
        self.state.panics.load(Ordering::Acquire)
    }

    /// Whether this handler's worker has stopped: removed and drained, stopped after a panic
    /// under [`PanicPolicy::StopHandler`], or the informer has stopped.
    pub fn is_stopped(&self) -> bool {
        self.state.stopped.load(Ordering::Acquire)
    }

    /// Waits until this handler [has synced](Self::has_synced): woken by the change itself,
    /// cancel-safe. Returns `false` instead if the handler or its informer stops first.
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

    /// Waits until this handler's worker has stopped and none of its code runs any more
    /// (client-go's `ShutDownEventHandler` wait): after
    /// [`remove_event_handler`](crate::SharedIndexInformer::remove_event_handler), once what
    /// was buffered for it has been handled; after the informer stops, once its current
    /// notification returns. Cancel-safe.
    pub async fn stopped(&self) {
        self.upstream.wait(|| self.is_stopped(), || false).await;
    }

    pub(crate) fn id(&self) -> u64 {
        self.id
    }

    pub(crate) fn informer(&self) -> u64 {
        self.informer
    }
}

struct Listener<K> {
    id: u64,
    tx: Sender<Batch<K>>,
    state: Arc<ListenerState>,
    /// The period asked for; `Duration::ZERO` = no resync.
    requested_resync: Duration,
    /// The period in force (see [`determine_resync_period`]).
    resync_period: Duration,
    next_resync: Instant,
    /// Whether resync (same-version) updates go to this listener now.
    syncing: bool,
    worker: Option<Joinable>,
}

impl<K> Listener<K> {
    fn is_stopped(&self) -> bool {
        // Stopped by its panic policy: nobody will read what is sent.
        self.state.stopped.load(Ordering::Acquire)
    }

    fn send(&self, batch: &Batch<K>) {
        if self.is_stopped() {
            return;
        }
        self.state.queued.fetch_add(batch.len(), Ordering::AcqRel);
        let _ = self.tx.send(Arc::clone(batch));
    }
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

/// Fans notifications out to every listener.
pub(crate) struct Processor<K> {
    id: u64,
    inner: Mutex<Inner<K>>,
    policy: PanicPolicy,
    upstream: Arc<Upstream>,
}

struct Inner<K> {
    listeners: Vec<Listener<K>>,
    /// Removed listeners whose workers may still be handling what was buffered for them.
    removed: Vec<(Arc<ListenerState>, Joinable)>,
    next_id: u64,
    /// Notifications for every listener, not handed over yet (see [`Processor::flush`]).
    pending: Vec<Notification<K>>,
}

impl<K> Inner<K> {
    /// Hands the pending notifications to every listener, as one shared batch.
    fn flush(&mut self) {
        if self.pending.is_empty() {
            return;
        }
        if self.listeners.is_empty() {
            self.pending.clear();
            return;
        }
        let batch: Batch<K> = self.pending.drain(..).collect();
        for l in &self.listeners {
            l.send(&batch);
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

impl<K: Send + Sync + 'static> Processor<K> {
    pub(crate) fn new(policy: PanicPolicy, upstream: Arc<Upstream>) -> Self {
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
        }
    }

    /// This processor's identity, which its registrations carry.
    pub(crate) fn id(&self) -> u64 {
        self.id
    }

    /// Registers `handler` and starts its worker. `initial` objects are queued to it first, as
    /// initial adds, before any later notification can be (the caller holds the processing
    /// lock).
    pub(crate) fn add_listener(
        &self,
        handler: Box<dyn ResourceEventHandler<K>>,
        requested_resync: Duration,
        check_period: Duration,
        initial: Vec<Arc<K>>,
        informer: &str,
    ) -> std::io::Result<HandlerRegistration> {
        let (tx, rx) = crossbeam_channel::unbounded();
        let state = Arc::new(ListenerState::new());
        state
            .pending_initial
            .store(initial.len(), Ordering::Release);
        state.queued.store(initial.len(), Ordering::Release);
        if !initial.is_empty() {
            let snapshot: Batch<K> = initial
                .into_iter()
                .map(|obj| Notification::Add(obj, true))
                .collect();
            // The receiver is alive (owned below), so this cannot fail.
            let _ = tx.send(snapshot);
        }
        let mut inner = self.inner.lock();
        // What was distributed before this listener existed goes to the others only: its
        // snapshot already holds those changes.
        inner.flush();
        let id = inner.next_id;
        inner.next_id += 1;
        let worker_state = Arc::clone(&state);
        let policy = self.policy;
        let upstream = Arc::clone(&self.upstream);
        // `informer-` first: the OS shows 15 bytes of a thread's name; the rest names the
        // informer in panics, debuggers and `std::thread::current().name()`.
        let worker = Joinable::spawn(format!("informer-handler-{id} {informer}"), move || {
            run_listener(id, handler, rx, worker_state, policy, &upstream)
        })?;
        let resync_period = determine_resync_period(requested_resync, check_period);
        inner.listeners.push(Listener {
            id,
            tx,
            state: Arc::clone(&state),
            requested_resync,
            resync_period,
            next_resync: Instant::now() + resync_period,
            syncing: true,
            worker: Some(worker),
        });
        Ok(HandlerRegistration {
            id,
            informer: self.id,
            state,
            upstream: Arc::clone(&self.upstream),
        })
    }

    /// Unregisters listener `id`: it handles what is already buffered, then its worker exits.
    /// The worker is kept until [`stop`](Self::stop), which joins it. Unknown ids (already
    /// removed) are ignored.
    pub(crate) fn remove_listener(&self, id: u64) {
        let mut inner = self.inner.lock();
        // What was distributed before the removal is still delivered to it.
        inner.flush();
        // Workers of earlier removals that have finished need no joining.
        inner.removed.retain(|(_, worker)| !worker.is_finished());
        let Some(at) = inner.listeners.iter().position(|l| l.id == id) else {
            return;
        };
        let mut listener = inner.listeners.remove(at);
        // Dropping the sender (with the listener) ends the worker once the buffer is drained.
        if let Some(worker) = listener.worker.take() {
            inner.removed.push((Arc::clone(&listener.state), worker));
        }
    }

    /// Sends `n` to every listener, or, for a resync (`is_sync`), to those whose resync is due.
    ///
    /// A notification for every listener is buffered until [`flush`](Self::flush) (or until
    /// [`MAX_BATCH`] are buffered); a resync goes out at once, after what is buffered, to the
    /// listeners it is for. An initial add is counted against each listener's sync at once, so
    /// a handler never reports synced while one is buffered.
    pub(crate) fn distribute(&self, n: Notification<K>, is_sync: bool) {
        let mut inner = self.inner.lock();
        if is_sync {
            inner.flush();
            let mut wanted = inner.listeners.iter().filter(|l| l.syncing).peekable();
            if wanted.peek().is_some() {
                let batch: Batch<K> = Arc::new([n]);
                wanted.for_each(|l| l.send(&batch));
            }
            return;
        }
        if let Notification::Add(_, true) = n {
            for l in inner.listeners.iter().filter(|l| !l.is_stopped()) {
                l.state.pending_initial.fetch_add(1, Ordering::AcqRel);
            }
        }
        inner.pending.push(n);
        if inner.pending.len() >= MAX_BATCH {
            inner.flush();
        }
    }

    /// Hands every buffered notification to the listeners.
    pub(crate) fn flush(&self) {
        self.inner.lock().flush();
    }

    /// Decides which listeners take the next resync (client-go's `shouldResync`): those whose
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

    /// Recomputes every listener's period after the check period changed (before start).
    pub(crate) fn set_check_period(&self, check: Duration) {
        let now = Instant::now();
        let mut inner = self.inner.lock();
        for l in &mut inner.listeners {
            l.resync_period = determine_resync_period(l.requested_resync, check);
            l.next_resync = now + l.resync_period;
        }
    }

    /// Stops every listener, removed ones included, without delivering what is buffered
    /// (each worker ends after the notification it is handling); returns their workers.
    pub(crate) fn stop(&self) -> Vec<Joinable> {
        let mut inner = self.inner.lock();
        inner.pending.clear();
        let mut workers: Vec<Joinable> = inner
            .listeners
            .drain(..)
            .filter_map(|mut l| {
                l.state.discard.store(true, Ordering::Release);
                l.worker.take()
            })
            .collect();
        for (state, worker) in inner.removed.drain(..) {
            state.discard.store(true, Ordering::Release);
            workers.push(worker);
        }
        workers
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

fn run_listener<K>(
    id: u64,
    handler: Box<dyn ResourceEventHandler<K>>,
    rx: Receiver<Batch<K>>,
    state: Arc<ListenerState>,
    policy: PanicPolicy,
    upstream: &Upstream,
) {
    'batches: while let Ok(batch) = rx.recv() {
        for n in batch.iter() {
            state.queued.fetch_sub(1, Ordering::AcqRel);
            if state.discard.load(Ordering::Acquire) {
                break 'batches;
            }
            let initial = matches!(n, Notification::Add(_, true));
            let outcome = catch_unwind(AssertUnwindSafe(|| match n {
                Notification::Add(obj, is_in_initial_list) => {
                    handler.on_add(obj, *is_in_initial_list)
                }
                Notification::Update(old, new) => handler.on_update(old, new),
                Notification::Delete(obj) => handler.on_delete(obj.clone()),
            }));
            if initial && state.pending_initial.fetch_sub(1, Ordering::AcqRel) == 1 {
                // The last initial add: this handler may have synced now.
                upstream.notify();
            }
            state.delivered.fetch_add(1, Ordering::AcqRel);
            if let Err(panic) = outcome {
                state.panics.fetch_add(1, Ordering::AcqRel);
                let message = panic_message(&*panic);
                match policy {
                    PanicPolicy::Continue => {
                        tracing::error!(
                            handler = id,
                            panic = message,
                            "event handler panicked; going on"
                        );
                    }
                    PanicPolicy::StopHandler => {
                        tracing::error!(
                            handler = id,
                            panic = message,
                            "event handler panicked; stopping it"
                        );
                        break 'batches;
                    }
                    PanicPolicy::Abort => {
                        tracing::error!(
                            handler = id,
                            panic = message,
                            "event handler panicked; aborting"
                        );
                        std::process::abort();
                    }
                }
            }
        }
    }
    state.stopped.store(true, Ordering::Release);
    upstream.notify();
}
