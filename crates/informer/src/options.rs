//! How a consumer is registered ([`HandlerOptions`]) and what its handler's panic means
//! ([`PanicPolicy`]).

use std::fmt;
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

/// Which objects a consumer sees (see [`HandlerOptions::filter`]).
pub type EventFilter<K> = Arc<dyn Fn(&K) -> bool + Send + Sync>;

/// How a consumer is registered, whatever its kind (a handler, an async handler, a stream): its
/// buffer, its resync period, its name, and a filter on the objects it sees.
pub struct HandlerOptions<K> {
    resync: Option<Duration>,
    pub(crate) buffer: usize,
    pub(crate) name: Option<Arc<str>>,
    pub(crate) filter: Option<EventFilter<K>>,
}

impl<K> Default for HandlerOptions<K> {
    fn default() -> Self {
        Self {
            resync: None,
            buffer: DEFAULT_BUFFER,
            name: None,
            filter: None,
        }
    }
}

impl<K> Clone for HandlerOptions<K> {
    fn clone(&self) -> Self {
        Self {
            resync: self.resync,
            buffer: self.buffer,
            name: self.name.clone(),
            filter: self.filter.clone(),
        }
    }
}

impl<K> fmt::Debug for HandlerOptions<K> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("HandlerOptions")
            .field("resync", &self.resync)
            .field("buffer", &self.buffer)
            .field("name", &self.name)
            .field("filter", &self.filter.is_some())
            .finish()
    }
}

impl<K> HandlerOptions<K> {
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

    /// Only objects for which `filter` holds (client-go's `FilteringResourceEventHandler`, for
    /// every kind of consumer): an add or a delete is delivered if its object (for a delete,
    /// the last known state) passes; an update whose both sides pass is an update, one whose
    /// new side only passes an add (the object entered the filtered set), one whose old side
    /// only passes a delete (it left). What it filters out counts as handled at once, so it
    /// never holds up the consumer's sync.
    pub fn filter(mut self, filter: impl Fn(&K) -> bool + Send + Sync + 'static) -> Self {
        self.filter = Some(Arc::new(filter));
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
