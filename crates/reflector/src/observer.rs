//! What a reflector tells an observer as it works: the hooks a metrics layer records.
//!
//! A [`ReflectorObserver`] set with [`Reflector::with_observer`](crate::Reflector::with_observer)
//! is called at every list, response (with its encoding), watch start and end, event,
//! resourceVersion change, backoff wait and `429`. Every method does nothing by default; without an observer the reflector pays one
//! branch per event.

use std::time::Duration;

use crate::availability::Availability;
use crate::error::ErrorKind;
use crate::sharding::ServerFiltering;

/// Why a list ran.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ListReason {
    /// The first list of the run.
    Initial,
    /// The version asked for is gone (410 Expired): the list before it, or the watch that ended,
    /// was told so.
    Expired,
    /// The version asked for is ahead of the server ("Too large resource version").
    TooLargeResourceVersion,
    /// An error ended the previous cycle (a failed list or watch, a very short watch).
    Error,
}

impl ListReason {
    /// A short label: `initial`, `expired`, `too_large`, `error`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Initial => "initial",
            Self::Expired => "expired",
            Self::TooLargeResourceVersion => "too_large",
            Self::Error => "error",
        }
    }

    /// The reason for the list that follows an error of kind `kind`.
    pub(crate) fn after(kind: ErrorKind) -> Self {
        match kind {
            ErrorKind::Expired => Self::Expired,
            ErrorKind::TooLargeResourceVersion => Self::TooLargeResourceVersion,
            _ => Self::Error,
        }
    }
}

/// One list, as it ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct ListOutcome {
    /// Why it ran.
    pub reason: ListReason,
    /// A streaming list (a watch with `sendInitialEvents`), not a paginated list.
    pub streaming: bool,
    /// From the first request to the last page (or the end bookmark).
    pub duration: Duration,
    /// The objects listed, or the kind of error it failed with.
    pub result: Result<usize, ErrorKind>,
}

/// How a watch stream ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum WatchEnd {
    /// The server closed it cleanly (its timeout): the reflector re-watches.
    Closed,
    /// The connection broke mid-stream: the reflector re-watches from the last version.
    Broken,
    /// It closed with no event within a second (client-go's "very short watch"): a relist.
    VeryShort,
    /// An `ERROR` event, an undecodable line or a failed resync, of this kind.
    Error(ErrorKind),
}

impl WatchEnd {
    /// A short label: `closed`, `broken`, `very_short`, `error`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Closed => "closed",
            Self::Broken => "broken",
            Self::VeryShort => "very_short",
            Self::Error(_) => "error",
        }
    }
}

/// The type of a watch event.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum EventType {
    /// `ADDED`.
    Added,
    /// `MODIFIED`.
    Modified,
    /// `DELETED`.
    Deleted,
    /// `BOOKMARK`.
    Bookmark,
    /// `ERROR`.
    Error,
}

impl EventType {
    /// The type as the API server spells it: `ADDED`, `MODIFIED`, ….
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Added => "ADDED",
            Self::Modified => "MODIFIED",
            Self::Deleted => "DELETED",
            Self::Bookmark => "BOOKMARK",
            Self::Error => "ERROR",
        }
    }
}

/// Told of a reflector's work, synchronously, on its task: keep every method short.
pub trait ReflectorObserver: Send + Sync + 'static {
    /// A list ended (paginated or streaming).
    fn list(&self, outcome: ListOutcome) {
        let _ = outcome;
    }
    /// A list page, or a watch (a streaming list's too), was read in `encoding`, as the
    /// lister-watcher tells it ([`ListerWatcher::last_encoding`]): once per page that succeeded
    /// and per watch opened, never when the lister-watcher does not tell.
    ///
    /// [`ListerWatcher::last_encoding`]: crate::ListerWatcher::last_encoding
    fn response(&self, encoding: &'static str) {
        let _ = encoding;
    }
    /// A watch request was answered with a stream; a streaming list's stream is told once its
    /// initial state is in and it goes on as the watch (its end is told as any watch's).
    fn watch_started(&self) {}
    /// A watch stream ended.
    fn watch_ended(&self, end: WatchEnd) {
        let _ = end;
    }
    /// A watch event arrived (before it is applied to the store).
    fn event(&self, event: EventType) {
        let _ = event;
    }
    /// The last synced resourceVersion moved (a list, or an event past the initial state).
    fn synced_to(&self, resource_version: &str) {
        let _ = resource_version;
    }
    /// The reflector waits `delay` before a retry or the next cycle.
    fn backoff(&self, delay: Duration) {
        let _ = delay;
    }
    /// The server answered `429 Too Many Requests`.
    fn throttled(&self) {}
    /// A list of a sharded reflector ended ([`Reflector::with_shards`](crate::Reflector::with_shards)):
    /// whether the server filtered it by the shard selector sent (its `metadata.shardInfo`),
    /// [`Unknown`](ServerFiltering::Unknown) after a streaming list or when no selector was
    /// sent. Told once per list.
    fn shard_filtering(&self, filtering: ServerFiltering) {
        let _ = filtering;
    }
    /// The resource became served (a list succeeded) or not served (a list answered `404`);
    /// told once per change.
    fn availability(&self, availability: Availability) {
        let _ = availability;
    }
    /// The informer this reflector belongs to was removed for good (from its factory, which
    /// tells this after its run has ended): an observer that keeps series per informer drops
    /// them, so that a removed informer leaves none behind. Not told on a plain stop.
    fn retired(&self) {}
}
