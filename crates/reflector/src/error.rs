//! Errors, the server's `Status`, and how the reflector classifies them.

use std::fmt;
use std::time::Duration;

/// A boxed error from a lower layer (an HTTP client, a decoder).
pub type BoxError = Box<dyn std::error::Error + Send + Sync + 'static>;

/// The cause type the API server sets on a 504 when a requested resource version is ahead of it.
pub const CAUSE_RESOURCE_VERSION_TOO_LARGE: &str = "ResourceVersionTooLarge";

/// The message old API servers use for the same condition.
const TOO_LARGE_MESSAGE: &str = "Too large resource version";

/// One cause of a [`Status`] (`details.causes[]`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct StatusCause {
    /// The machine-readable cause type (`reason` on the wire), e.g. `ResourceVersionTooLarge`.
    pub reason: String,
    /// A human-readable description.
    pub message: String,
    /// The field the cause refers to, if any.
    pub field: String,
}

/// A failure the API server reported: a `metav1.Status`, as an HTTP error body or an `ERROR`
/// watch event. Only the fields the reflector acts on are kept.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Status {
    /// The HTTP code the status stands for (`code`, else the response's status); 0 when neither
    /// is known, e.g. an `ERROR` event whose object was not a `Status`.
    pub code: u16,
    /// The machine-readable reason, e.g. `Expired`, `TooManyRequests`; may be empty.
    pub reason: String,
    /// The human-readable message.
    pub message: String,
    /// `details.retryAfterSeconds`, or the response's `Retry-After` header.
    pub retry_after: Option<Duration>,
    /// `details.causes`.
    pub causes: Vec<StatusCause>,
}

impl Status {
    /// A status with a code, a reason and a message, and no details.
    pub fn new(code: u16, reason: impl Into<String>, message: impl Into<String>) -> Self {
        Self {
            code,
            reason: reason.into(),
            message: message.into(),
            ..Self::default()
        }
    }

    /// The same status with `retry_after` set.
    pub fn with_retry_after(mut self, retry_after: Duration) -> Self {
        self.retry_after = Some(retry_after);
        self
    }

    /// The same status with one more cause.
    pub fn with_cause(mut self, reason: impl Into<String>, message: impl Into<String>) -> Self {
        self.causes.push(StatusCause {
            reason: reason.into(),
            message: message.into(),
            field: String::new(),
        });
        self
    }

    /// A 410 `Expired` status, as the server sends for a resource version it no longer has.
    pub fn expired(message: impl Into<String>) -> Self {
        Self::new(410, "Expired", message)
    }

    /// A 504 `Timeout` with cause `ResourceVersionTooLarge`.
    pub fn too_large_resource_version() -> Self {
        Self::new(504, "Timeout", format!("Timeout: {TOO_LARGE_MESSAGE}"))
            .with_cause(CAUSE_RESOURCE_VERSION_TOO_LARGE, TOO_LARGE_MESSAGE)
    }

    /// A 429 `TooManyRequests`, optionally with a Retry-After.
    pub fn too_many_requests(retry_after: Option<Duration>) -> Self {
        Self {
            retry_after,
            ..Self::new(429, "TooManyRequests", "too many requests")
        }
    }

    /// A 500 `InternalError`.
    pub fn internal_error(message: impl Into<String>) -> Self {
        Self::new(500, "InternalError", message)
    }

    /// How the reflector reacts to this status.
    pub fn kind(&self) -> ErrorKind {
        if self.reason == "Expired" || self.reason == "Gone" || self.code == 410 {
            ErrorKind::Expired
        } else if self.is_too_large_resource_version() {
            ErrorKind::TooLargeResourceVersion
        } else if self.code == 429 || self.reason == "TooManyRequests" {
            ErrorKind::TooManyRequests {
                retry_after: self.retry_after,
            }
        } else if self.code == 503 || self.reason == "ServiceUnavailable" {
            ErrorKind::ServiceUnavailable
        } else if self.code == 404 || (self.code == 0 && self.reason == "NotFound") {
            ErrorKind::NotServed
        } else if self.reason == "InternalError" || (self.code == 500 && self.reason.is_empty()) {
            ErrorKind::InternalError
        } else {
            ErrorKind::Other
        }
    }

    fn is_too_large_resource_version(&self) -> bool {
        if self
            .causes
            .iter()
            .any(|c| c.reason == CAUSE_RESOURCE_VERSION_TOO_LARGE)
        {
            return true;
        }
        // Old servers: a Timeout whose cause or message says so.
        (self.code == 504 || self.reason == "Timeout")
            && (self.message.contains(TOO_LARGE_MESSAGE)
                || self.causes.iter().any(|c| c.message == TOO_LARGE_MESSAGE))
    }
}

impl fmt::Display for Status {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {}: {}", self.code, self.reason, self.message)
    }
}

/// What the reflector must do about an error: the classification of client-go's reflector.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorKind {
    /// 410 `Expired` or `Gone`: the requested resource version is no longer available.
    Expired,
    /// The requested resource version is ahead of the server (504 with cause
    /// `ResourceVersionTooLarge`, or "Too large resource version" from old servers).
    TooLargeResourceVersion,
    /// 429: the server asks the client to slow down, possibly saying for how long.
    TooManyRequests {
        /// The server's Retry-After, if it gave one.
        retry_after: Option<Duration>,
    },
    /// The connection was refused: the server is down or restarting.
    ConnectionRefused,
    /// 503 `ServiceUnavailable`: the server is up but not ready to serve (starting, or its
    /// storage is not reachable).
    ServiceUnavailable,
    /// 500 `InternalError`, or an event the client could not decode.
    InternalError,
    /// 404 `NotFound`. The reflector asks only for collections, so a 404 means the server
    /// does not serve the resource at all: a custom resource whose CRD is not installed (yet),
    /// or was deleted, or a wrong group or version. A list answered so makes the resource
    /// [not served](crate::Availability::NotServed), and the reflector waits for it.
    NotServed,
    /// Anything else.
    Other,
}

/// Everything a [`ListerWatcher`](crate::ListerWatcher) or the [`Reflector`](crate::Reflector)
/// reports.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The server answered with a failure `Status` (an HTTP error or an `ERROR` event).
    #[error("the server reported {0}")]
    Api(Status),

    /// The connection to the server was refused.
    #[error("connection refused: {0}")]
    ConnectionRefused(#[source] BoxError),

    /// The request could not be sent or its response could not be read.
    #[error("transport error: {0}")]
    Transport(#[source] BoxError),

    /// A response or watch event could not be decoded, or lacked a required field (an object
    /// without a name or a resourceVersion, a list without a resourceVersion, an event of an
    /// unknown type).
    #[error("undecodable response: {message}{}", source_suffix(source.as_ref()))]
    Decode {
        /// What was wrong.
        message: String,
        /// The decoder's error, if any.
        #[source]
        source: Option<BoxError>,
    },

    /// A watch closed within a second of its start without delivering any event.
    #[error(
        "very short watch: unexpected watch close - watch lasted less than a second and no items received"
    )]
    VeryShortWatch,

    /// The store (or queue) refused a write: its own error, boxed.
    #[error("the store refused a write: {0}")]
    Store(#[source] BoxError),

    /// The list failed and the reflector will list again after a backoff delay.
    #[error("failed to list: {0}")]
    List(#[source] Box<Error>),

    /// A streaming list failed and the reflector falls back to a list.
    #[error("failed to stream the initial list: {0}")]
    StreamingList(#[source] Box<Error>),

    /// The server refused the `shardSelector` of a list or watch (400 BadRequest). The
    /// selector is written by `informer_shard::ShardSelector`, in the grammar the server
    /// parses, so this is a bug (of the client or of the server), not a state to wait out: it
    /// [needs action](Self::needs_action), and the reflector retries only after backoff delays.
    #[error("the server refused the shard selector {selector:?}: {status}")]
    ShardSelectorRefused {
        /// The selector sent.
        selector: String,
        /// The server's answer.
        status: Status,
    },

    /// Something else.
    #[error(transparent)]
    Other(BoxError),
}

/// `": cause"` for an optional cause, nothing without one.
fn source_suffix(source: Option<&BoxError>) -> String {
    source.map(|s| format!(": {s}")).unwrap_or_default()
}

impl Error {
    /// A [`Decode`](Self::Decode) error with a message and no source.
    pub fn decode(message: impl Into<String>) -> Self {
        Self::Decode {
            message: message.into(),
            source: None,
        }
    }

    /// Whether retrying alone cannot cure it, so a person must act: the server does not accept
    /// the client's credentials (401) or its permissions (403), does not serve the resource
    /// (404, 405: a custom resource not installed, a wrong group or version), or refuses the
    /// request itself (400, 406, 415, 422: a malformed selector, an unsupported encoding). The
    /// default watch error handler logs these at WARN and everything else, which the reflector
    /// recovers from by itself, at DEBUG.
    pub fn needs_action(&self) -> bool {
        match self {
            Self::Api(status) => {
                matches!(status.code, 400 | 401 | 403 | 404 | 405 | 406 | 415 | 422)
            }
            Self::List(inner) | Self::StreamingList(inner) => inner.needs_action(),
            Self::ShardSelectorRefused { .. } => true,
            _ => false,
        }
    }

    /// How the reflector reacts to this error.
    pub fn kind(&self) -> ErrorKind {
        match self {
            Self::Api(status) => status.kind(),
            Self::ConnectionRefused(_) => ErrorKind::ConnectionRefused,
            Self::Decode { .. } => ErrorKind::InternalError,
            Self::List(inner) | Self::StreamingList(inner) => inner.kind(),
            Self::Transport(_)
            | Self::VeryShortWatch
            | Self::Store(_)
            | Self::Other(_)
            | Self::ShardSelectorRefused { .. } => ErrorKind::Other,
        }
    }

    /// The server's status, if this error carries one.
    pub fn status(&self) -> Option<&Status> {
        match self {
            Self::Api(status) | Self::ShardSelectorRefused { status, .. } => Some(status),
            Self::List(inner) | Self::StreamingList(inner) => inner.status(),
            _ => None,
        }
    }

    /// 410 Expired or Gone.
    pub fn is_expired(&self) -> bool {
        self.kind() == ErrorKind::Expired
    }

    /// The requested resource version is ahead of the server.
    pub fn is_too_large_resource_version(&self) -> bool {
        self.kind() == ErrorKind::TooLargeResourceVersion
    }
}

impl From<Status> for Error {
    fn from(status: Status) -> Self {
        Self::Api(status)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn expired_and_gone_are_expired() {
        assert_eq!(Status::expired("too old").kind(), ErrorKind::Expired);
        assert_eq!(Status::new(410, "Gone", "").kind(), ErrorKind::Expired);
        assert_eq!(Status::new(0, "Expired", "").kind(), ErrorKind::Expired);
        assert_eq!(Status::new(410, "", "").kind(), ErrorKind::Expired);
    }

    #[test]
    fn too_large_by_cause_or_by_old_message() {
        assert_eq!(
            Status::too_large_resource_version().kind(),
            ErrorKind::TooLargeResourceVersion
        );
        let old = Status::new(
            504,
            "Timeout",
            "Timeout: Too large resource version: 9, current: 5",
        );
        assert_eq!(old.kind(), ErrorKind::TooLargeResourceVersion);
        let cause_message =
            Status::new(504, "Timeout", "timeout").with_cause("", "Too large resource version");
        assert_eq!(cause_message.kind(), ErrorKind::TooLargeResourceVersion);
        // A plain 504 timeout is not.
        let plain = Status::new(504, "Timeout", "request did not complete");
        assert_eq!(plain.kind(), ErrorKind::Other);
    }

    #[test]
    fn too_many_requests_keeps_its_retry_after() {
        let s = Status::too_many_requests(Some(Duration::from_secs(3)));
        assert_eq!(
            s.kind(),
            ErrorKind::TooManyRequests {
                retry_after: Some(Duration::from_secs(3))
            }
        );
        assert_eq!(
            Status::new(429, "", "plain text").kind(),
            ErrorKind::TooManyRequests { retry_after: None }
        );
    }

    #[test]
    fn internal_errors_and_decode_errors() {
        assert_eq!(
            Status::internal_error("boom").kind(),
            ErrorKind::InternalError
        );
        assert_eq!(Error::decode("bad line").kind(), ErrorKind::InternalError);
        // 500 ServerTimeout is not an internal error.
        assert_eq!(
            Status::new(500, "ServerTimeout", "").kind(),
            ErrorKind::Other
        );
    }

    #[test]
    fn a_not_found_collection_is_not_served() {
        let plain = Status::new(
            404,
            "NotFound",
            "the server could not find the requested resource",
        );
        assert_eq!(plain.kind(), ErrorKind::NotServed);
        // A plain-text 404 keeps its code; an ERROR event's Status without one, its reason.
        assert_eq!(
            Status::new(404, "", "404 page not found").kind(),
            ErrorKind::NotServed
        );
        assert_eq!(Status::new(0, "NotFound", "").kind(), ErrorKind::NotServed);
        let listed = Error::List(Box::new(Error::Api(plain)));
        assert_eq!(listed.kind(), ErrorKind::NotServed);
    }

    #[test]
    fn a_non_status_error_event_is_other() {
        assert_eq!(Status::default().kind(), ErrorKind::Other);
        assert_eq!(Status::new(403, "Forbidden", "no").kind(), ErrorKind::Other);
    }

    #[test]
    fn every_wrapping_variant_displays_its_cause() {
        use std::error::Error as _;
        let boom = || Error::Api(Status::internal_error("boom"));
        let cases: Vec<(Error, &str)> = vec![
            (
                Error::ConnectionRefused("tcp connect: refused".into()),
                "tcp connect: refused",
            ),
            (Error::Transport("reset by peer".into()), "reset by peer"),
            (
                Error::Decode {
                    message: "bad line".into(),
                    source: Some("expected value at line 1".into()),
                },
                "expected value at line 1",
            ),
            (Error::List(Box::new(boom())), "500 InternalError: boom"),
            (
                Error::StreamingList(Box::new(boom())),
                "500 InternalError: boom",
            ),
            (Error::Other("something else".into()), "something else"),
        ];
        for (err, cause) in cases {
            let shown = err.to_string();
            assert!(shown.contains(cause), "{shown:?} lacks {cause:?}");
            // The cause is still reachable for downcasting.
            if !matches!(err, Error::Other(_)) {
                assert!(err.source().is_some(), "{err:?} has no source");
            }
        }
        assert_eq!(
            Error::List(Box::new(boom())).to_string(),
            "failed to list: the server reported 500 InternalError: boom"
        );
        assert_eq!(
            Error::decode("bad line").to_string(),
            "undecodable response: bad line"
        );
    }

    #[test]
    fn wrapped_errors_keep_their_kind() {
        let e = Error::List(Box::new(Error::Api(Status::expired("x"))));
        assert!(e.is_expired());
        assert_eq!(e.status().unwrap().code, 410);
        let refused = Error::ConnectionRefused("refused".into());
        assert_eq!(refused.kind(), ErrorKind::ConnectionRefused);
    }
}
