//! What registering a consumer returns ([`HandlerRegistration`]) and the readiness it shares
//! with its informer: the consumer's own counters and sync, and the informer's synced and
//! stopped signal every wait is woken by.

use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use tokio::sync::watch;

use crate::lag::{LagHistogram, LagRecorder};

/// Counters a consumer shares with its registration handle.
#[derive(Default)]
pub(crate) struct ListenerState {
    /// Initial adds queued for this consumer and not yet handled.
    pub(crate) pending_initial: AtomicUsize,
    /// Latched once the consumer has synced.
    pub(crate) synced: AtomicBool,
    /// The consumer has stopped (removed and drained, stopped by policy, dropped, or the
    /// informer stopped).
    pub(crate) stopped: AtomicBool,
    /// Stop without delivering what is buffered (the informer is shutting down).
    pub(crate) discard: AtomicBool,
    /// Stopped by its panic policy, or by a panic in its delivery; set before `stopped`. A
    /// problem of the informer's health for as long as it runs.
    pub(crate) failed: AtomicBool,
    /// Notifications handled so far.
    pub(crate) delivered: AtomicUsize,
    /// Notifications and coalesced keys in the buffer.
    pub(crate) buffered: AtomicUsize,
    /// Notifications taken out of the buffer by the consumer and not yet handled.
    pub(crate) in_hand: AtomicUsize,
    /// Notifications taken into per-key coalescing so far.
    pub(crate) coalesced: AtomicUsize,
    /// Times the consumer fell behind its buffer.
    pub(crate) overflows: AtomicUsize,
    /// Handler panics caught so far.
    pub(crate) panics: AtomicUsize,
    /// How long the notifications it took had waited.
    pub(crate) lag: LagRecorder,
    /// The consumer's name, if it was given one.
    pub(crate) name: Option<Arc<str>>,
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

/// How far behind a consumer is, read through its registration.
pub(crate) trait Lag: Send + Sync {
    /// The age of the oldest notification still waiting for the consumer.
    fn lag(&self) -> Duration;
}

/// What registering a consumer returns: its identity (which names its informer), its own sync
/// state and its counters.
#[derive(Clone)]
pub struct HandlerRegistration {
    pub(crate) id: u64,
    pub(crate) informer: u64,
    pub(crate) state: Arc<ListenerState>,
    pub(crate) upstream: Arc<Upstream>,
    pub(crate) lag: Arc<dyn Lag>,
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

    /// The name given with [`HandlerOptions::name`](crate::HandlerOptions::name), if any.
    pub fn name(&self) -> Option<&str> {
        self.state.name.as_deref()
    }

    /// Whether this consumer has stopped: removed and drained, stopped after a panic under
    /// [`PanicPolicy::StopHandler`](crate::PanicPolicy::StopHandler), a subscription dropped, or the informer has stopped.
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
