//! Whether the server serves the reflector's resource: a list answered `404 NotFound` (the
//! reflector only ever asks for collections, so a 404 means the collection itself is not
//! served: a custom resource whose CRD is not installed yet, or was deleted) makes the
//! resource *not served*; the next list that succeeds makes it served again.
//!
//! While it is not served the reflector lists again on a calm cadence ([`NOT_SERVED_POLL`]),
//! not on the growing backoff: the list is the cheapest question that tells when the resource
//! appears (one request, answered from the server's routing table before any storage is
//! read), and it is the request the reflector must make anyway once it does, so nothing else
//! (a watch of discovery) needs to run beside it.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use informer_store::ReflectorStore;
use parking_lot::Mutex;
use tokio::sync::watch;
use tokio::time::Instant;

use crate::error::{Error, ErrorKind};
use crate::lister_watcher::ListerWatcher;
use crate::reflector::Reflector;

/// How often a reflector whose resource is not served lists again (each wait up to 20 %
/// longer, so that many informers waiting for one resource do not ask in step).
pub const NOT_SERVED_POLL: Duration = Duration::from_secs(5);

/// Whether the server serves a reflector's resource, as its lists found it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Availability {
    /// No list has been answered yet.
    Unknown,
    /// The last list was answered: the resource is served.
    Served,
    /// The last list was answered `404 NotFound`: the server does not serve the resource (its
    /// CRD is not installed, or was deleted; or its group version is wrong). The reflector
    /// lists again every [`NOT_SERVED_POLL`] until it is.
    NotServed,
}

impl Availability {
    /// A short label: `unknown`, `served`, `not_served`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Unknown => "unknown",
            Self::Served => "served",
            Self::NotServed => "not_served",
        }
    }
}

/// What a reflector keeps about the availability of its resource.
pub(crate) struct AvailabilityState {
    /// The current availability, for whoever waits on it (see
    /// [`Reflector::with_availability_sender`]).
    signal: watch::Sender<Availability>,
    /// Since when the resource has not been served (`None` while it is, or before a list).
    not_served_since: Mutex<Option<Instant>>,
    /// A list has succeeded at least once (the cache holds the resource's objects).
    ever_served: AtomicBool,
    /// Stop the run when the resource stops being served, instead of waiting for it.
    pub(crate) stop_when_gone: bool,
}

impl Default for AvailabilityState {
    fn default() -> Self {
        Self {
            signal: watch::Sender::new(Availability::Unknown),
            not_served_since: Mutex::new(None),
            ever_served: AtomicBool::new(false),
            stop_when_gone: false,
        }
    }
}

/// What the reflector does after a list answered 404.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum NotServedStep {
    /// Wait for the resource, listing on the calm cadence.
    Wait,
    /// The resource was served and is gone: end the run (the caller chose so).
    Stop,
}

impl<K, L, S> Reflector<K, L, S>
where
    K: Send + Sync + 'static,
    L: ListerWatcher<K>,
    S: ReflectorStore<K>,
{
    /// Sends every change of the resource's [`Availability`] to `sender` (replacing the
    /// reflector's own channel): a factory or health check that must know about it before
    /// the reflector runs holds the receiver.
    pub fn with_availability_sender(mut self, sender: watch::Sender<Availability>) -> Self {
        sender.send_replace(*self.availability.signal.borrow());
        self.availability.signal = sender;
        self
    }

    /// Ends [`run`](Self::run) when the resource stops being served (a list answered 404
    /// after one that succeeded: its CRD was deleted), instead of waiting for it to come back,
    /// which is the default. A resource not served from the start is waited for either way.
    pub fn with_stop_when_not_served(mut self, stop: bool) -> Self {
        self.availability.stop_when_gone = stop;
        self
    }

    /// Lists a resource that is not served again every `period` (each wait up to 20 % longer)
    /// instead of every [`NOT_SERVED_POLL`]: shorter to see a CRD installed sooner, longer
    /// to ask a server less often. Zero is taken as one millisecond.
    pub fn with_not_served_poll(mut self, period: Duration) -> Self {
        self.config.not_served_poll = period.max(Duration::from_millis(1));
        self
    }

    /// Whether the server serves the resource, as the last list found.
    pub fn availability(&self) -> Availability {
        *self.availability.signal.borrow()
    }

    /// A receiver of every change of [`availability`](Self::availability).
    pub fn subscribe_availability(&self) -> watch::Receiver<Availability> {
        self.availability.signal.subscribe()
    }

    /// Since when the resource has not been served; `None` while it is (or before a list).
    pub fn not_served_since(&self) -> Option<Instant> {
        *self.availability.not_served_since.lock()
    }

    /// A list was answered: the resource is served.
    pub(crate) fn mark_served(&self) {
        self.availability.ever_served.store(true, Ordering::Relaxed);
        *self.availability.not_served_since.lock() = None;
        let was = self.availability.signal.send_replace(Availability::Served);
        if was == Availability::NotServed {
            tracing::info!(reflector = %self.name, "the server serves the resource now; listing it");
        }
        if was != Availability::Served {
            self.observe_availability(Availability::Served);
        }
    }

    /// A list was answered `404 NotFound` (`err`): the resource is not served. The first
    /// answer of a spell is logged at INFO, naming the resource; the later ones are the watch
    /// error handler's (DEBUG by default). A resource that was served and is gone has its
    /// cached objects deleted (an empty replace: the consumers hear a deletion of each), or,
    /// with [`with_stop_when_not_served`](Self::with_stop_when_not_served), the run ends.
    pub(crate) fn mark_not_served(&self, err: &Error) -> NotServedStep {
        // Only the run writes the signal: what it holds now is what it held before this list.
        if *self.availability.signal.borrow() == Availability::NotServed {
            return NotServedStep::Wait;
        }
        // Since when, before the signal: whoever it wakes finds both.
        self.availability
            .not_served_since
            .lock()
            .get_or_insert_with(Instant::now);
        self.availability
            .signal
            .send_replace(Availability::NotServed);
        self.observe_availability(Availability::NotServed);
        let poll = NOT_SERVED_POLL.as_secs();
        if !self.availability.ever_served.load(Ordering::Relaxed) {
            tracing::info!(reflector = %self.name, error = %err, "the server does not serve this resource (yet); waiting for it, listing again every {poll}s");
            return NotServedStep::Wait;
        }
        if self.availability.stop_when_gone {
            tracing::info!(reflector = %self.name, error = %err, "the server no longer serves this resource; stopping, as configured");
            return NotServedStep::Stop;
        }
        tracing::info!(reflector = %self.name, error = %err, "the server no longer serves this resource; deleting its cached objects and waiting for it, listing again every {poll}s");
        let last = self.last_sync_resource_version();
        if let Err(e) = self.store.replace(Vec::new(), last) {
            tracing::warn!(reflector = %self.name, error = %e, "the store refused to delete the objects of a resource no longer served");
        }
        NotServedStep::Wait
    }

    fn observe_availability(&self, availability: Availability) {
        if let Some(observer) = &self.config.observer {
            observer.availability(availability);
        }
    }
}

/// Whether `err`, which ended a cycle, is a list's `404 NotFound`: the server's word that it
/// does not serve the resource. A 404 at the start of a watch is not taken as that word; the
/// list that follows it decides.
pub(crate) fn is_list_not_found(err: &Error) -> bool {
    matches!(err, Error::List(_)) && err.kind() == ErrorKind::NotServed
}
