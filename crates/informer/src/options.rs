//! How a consumer is registered ([`HandlerOptions`]) and what its handler's panic means
//! ([`PanicPolicy`]).

use std::sync::Arc;
use std::time::Duration;

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

/// How a consumer is registered: its resync period and its buffer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HandlerOptions {
    resync: Option<Duration>,
    pub(crate) buffer: usize,
    pub(crate) name: Option<Arc<str>>,
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

    /// A name for this consumer, for logs and metrics ([`HandlerRegistration::name`](crate::HandlerRegistration::name)); by
    /// default it is known by its registration number.
    pub fn name(mut self, name: impl Into<Arc<str>>) -> Self {
        self.name = Some(name.into());
        self
    }

    pub(crate) fn requested_resync(&self) -> Option<Duration> {
        self.resync
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
