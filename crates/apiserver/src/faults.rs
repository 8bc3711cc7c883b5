//! Fault injection: the ways a real API server misbehaves (the public descriptions of faults),
//! and the faults a running server is showing now. The [`Faults`](crate::Faults) handle that
//! injects them is in `fault_control`.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use serde_json::Value;

use crate::config::ExpiredWatch;
use crate::status::StatusError;

/// The kind of request a [`Failure`] applies to.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Verb {
    /// `GET` of a collection without `watch`.
    List,
    /// `GET` of a collection with `watch`.
    Watch,
    /// `GET` of one object.
    Get,
    /// `POST`.
    Create,
    /// `PUT`.
    Update,
    /// `PATCH`.
    Patch,
    /// `DELETE`.
    Delete,
    /// Any resource request (discovery is never failed).
    Any,
}

impl Verb {
    fn covers(self, verb: Verb) -> bool {
        self == Verb::Any || self == verb
    }
}

/// A canned failure response.
#[derive(Clone, Debug, PartialEq)]
pub enum Failure {
    /// A JSON `Status` body with its code; `Retry-After` is set from
    /// `details.retryAfterSeconds`, as kube-apiserver does.
    Status(StatusError),
    /// A plain-text body (what priority-and-fairness and the shutdown filter send).
    PlainText {
        /// HTTP status code.
        code: u16,
        /// Body text.
        body: String,
        /// `Retry-After` header, in seconds.
        retry_after: Option<u32>,
        /// Add `Connection: close`.
        close: bool,
    },
}

impl Failure {
    /// `429` in JSON with `retryAfterSeconds` and `Retry-After` (the watch cache not ready).
    pub fn too_many_requests(retry_after: u32) -> Self {
        Failure::Status(StatusError::too_many_requests(
            "storage is (re)initializing",
            retry_after,
        ))
    }

    /// Plain-text `429` from priority and fairness.
    pub fn throttled(retry_after: u32) -> Self {
        Failure::PlainText {
            code: 429,
            body: "Too many requests, please try again later.\n".into(),
            retry_after: Some(retry_after),
            close: false,
        }
    }

    /// Plain-text `429` of a server shutting down, with `Connection: close`.
    pub fn shutting_down() -> Self {
        Failure::PlainText {
            code: 429,
            body: "The apiserver is shutting down, please try again later.\n".into(),
            retry_after: Some(5),
            close: true,
        }
    }

    /// `500 InternalError` with the given cause.
    pub fn internal(cause: &str) -> Self {
        Failure::Status(StatusError::internal(cause))
    }

    /// `503 ServiceUnavailable`.
    pub fn unavailable() -> Self {
        Failure::Status(StatusError::custom(
            503,
            "ServiceUnavailable",
            "the server is currently unable to handle the request",
        ))
    }
}

/// What one isolated client gets (see [`Faults::isolate`](crate::Faults::isolate)).
#[derive(Clone, Debug, PartialEq)]
pub enum Isolation {
    /// Every request of the client is answered with this failure, and its open watches are
    /// cut (the connection is dropped, without the chunked terminator).
    Fail(Failure),
    /// Every request of the client gets no response until the client is healed, and its open
    /// watches deliver nothing until then. Other clients are not slowed, and a shutdown or
    /// restart drops the held connections.
    Hang,
}

/// A slowed-down watch stream: each write is cut into pieces of `chunk_bytes`, with `delay`
/// before each piece.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SlowStream {
    /// Bytes per write (at least 1).
    pub chunk_bytes: usize,
    /// Pause before each write.
    pub delay: Duration,
}

/// What a list page says in `metadata.remainingItemCount` (see
/// [`Faults::set_remaining_item_count`](crate::Faults::set_remaining_item_count)). The count is
/// only ever a hint: a client must page on `continue` alone.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum RemainingItemCount {
    /// The number of items after the page, as kube-apiserver counts them (the default).
    #[default]
    Exact,
    /// No count, as from a server or proxy that does not send one.
    Omitted,
    /// The exact count plus this (negative values can make it negative), as from a count
    /// taken while objects were being created or deleted.
    Off(i64),
}

/// A message to every open watch.
#[derive(Clone, Debug)]
pub(crate) enum Control {
    /// Abort the connection (no chunked terminator).
    Drop,
    /// Write half an event, then abort the connection.
    DropMidEvent,
    /// End the body cleanly.
    Close,
    /// Send `{"type":"ERROR","object":<object>}` and end cleanly.
    Error(Arc<Value>),
    /// Write half an event, then end cleanly.
    Torn,
    /// Write a line that is not JSON, then keep going.
    Garbage,
    /// Send the last delivered event again.
    Duplicate,
}

#[derive(Debug, Default)]
pub(crate) struct FaultState {
    pub(crate) latency: Duration,
    pub(crate) slow_stream: Option<SlowStream>,
    pub(crate) bookmarks_off: bool,
    pub(crate) expired_watch: Option<ExpiredWatch>,
    pub(crate) unavailable: Option<u32>,
    pub(crate) cache_lag: u64,
    pub(crate) remaining_item_count: RemainingItemCount,
    pub(crate) failures: Vec<(Verb, usize, Failure)>,
    /// Isolated clients, by identity (bearer token, else `User-Agent`).
    pub(crate) isolated: HashMap<String, Isolation>,
    /// How many restarts there have been: a held request dropped by one sees it change.
    pub(crate) restarts: u64,
}

impl FaultState {
    /// Takes the failure for the next request of `verb`, if one is queued.
    pub(crate) fn take_failure(&mut self, verb: Verb) -> Option<Failure> {
        let i = self
            .failures
            .iter()
            .position(|(v, n, _)| v.covers(verb) && *n > 0)?;
        let entry = &mut self.failures[i];
        entry.1 -= 1;
        let failure = entry.2.clone();
        if entry.1 == 0 {
            self.failures.remove(i);
        }
        Some(failure)
    }
}
