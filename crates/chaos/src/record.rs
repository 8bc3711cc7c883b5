//! [`Recording`]: a [`ListerWatcher`] wrapper that logs every list and how every watch ended,
//! and [`check_relists`], which proves from that log that each relist had a reason.

use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use futures::Stream;
use informer_reflector::{
    Error, ErrorKind, ListPage, ListParams, ListerWatcher, WatchEvent, WatchParams, WatchStream,
};
use parking_lot::Mutex;

/// How a watch stream ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum End {
    /// The body ended cleanly.
    Closed,
    /// A transport error (the connection broke).
    Broken,
    /// An `ERROR` event or an undecodable event, with the reflector's classification.
    Failed(ErrorKind),
    /// The reader dropped the stream before it ended (the informer stopped).
    Abandoned,
}

/// One request the reflector made.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Call {
    /// The first page of a list (or an unpaginated list), and its outcome.
    List {
        /// `resourceVersion` asked for.
        resource_version: String,
        /// `Err` with the error's classification if it failed.
        outcome: Result<(), ErrorKind>,
    },
    /// A continuation page.
    Page {
        /// `Err` with the error's classification if it failed.
        outcome: Result<(), ErrorKind>,
    },
    /// A watch the server refused (a non-2xx answer).
    WatchRefused {
        /// `resourceVersion` asked for.
        resource_version: String,
        /// It was a streaming list (`sendInitialEvents=true`).
        streaming: bool,
        /// The error's classification.
        kind: ErrorKind,
    },
    /// A watch the server accepted, and how it ended (`None` while it is open).
    Watch {
        /// `resourceVersion` asked for.
        resource_version: String,
        /// It was a streaming list (`sendInitialEvents=true`): its initial events, then the
        /// initial-events-end bookmark, then a watch on the same stream.
        streaming: bool,
        /// A streaming list's initial-events-end bookmark arrived (always true for a plain
        /// watch).
        synced: bool,
        /// How it ended.
        end: Option<End>,
        /// Events read before the end, after the initial events of a streaming list (`ERROR`
        /// not counted, as the reflector counts them).
        events: u64,
        /// From the server's acceptance (or a streaming list's end bookmark) to the end.
        lasted: Duration,
    },
}

/// The log of one [`Recording`].
#[derive(Debug, Default)]
pub struct CallLog {
    calls: Mutex<Vec<Call>>,
    lists: AtomicU64,
}

impl CallLog {
    /// Every call so far, in order.
    pub fn calls(&self) -> Vec<Call> {
        self.calls.lock().clone()
    }

    /// Lists started so far: first pages and streaming lists.
    pub fn lists(&self) -> u64 {
        self.lists.load(Ordering::SeqCst)
    }

    fn push(&self, call: Call) -> usize {
        let mut calls = self.calls.lock();
        calls.push(call);
        calls.len() - 1
    }

    fn end_watch(&self, index: usize, how: End, events: u64, lasted_for: Duration) {
        if let Some(Call::Watch {
            end,
            events: count,
            lasted,
            ..
        }) = self.calls.lock().get_mut(index)
            && end.is_none()
        {
            *end = Some(how);
            *count = events;
            *lasted = lasted_for;
        }
    }

    fn mark_synced(&self, index: usize) {
        if let Some(Call::Watch { synced, .. }) = self.calls.lock().get_mut(index) {
            *synced = true;
        }
    }
}

/// Wraps a [`ListerWatcher`] and records every call in a [`CallLog`].
#[derive(Debug)]
pub struct Recording<L> {
    inner: L,
    log: Arc<CallLog>,
}

impl<L> Recording<L> {
    /// Wraps `inner`.
    pub fn new(inner: L) -> Self {
        Self {
            inner,
            log: Arc::default(),
        }
    }

    /// The log, shared.
    pub fn log(&self) -> Arc<CallLog> {
        Arc::clone(&self.log)
    }
}

impl<K, L> ListerWatcher<K> for Recording<L>
where
    K: Send + Sync + 'static,
    L: ListerWatcher<K>,
{
    async fn list(&self, params: &ListParams) -> Result<ListPage<K>, Error> {
        let first = params.continue_token.is_none();
        if first {
            self.log.lists.fetch_add(1, Ordering::SeqCst);
        }
        let result = self.inner.list(params).await;
        let outcome = result.as_ref().map(drop).map_err(Error::kind);
        self.log.push(if first {
            Call::List {
                resource_version: params.resource_version.clone(),
                outcome,
            }
        } else {
            Call::Page { outcome }
        });
        result
    }

    async fn watch(&self, params: &WatchParams) -> Result<WatchStream<K>, Error> {
        let streaming = params.send_initial_events;
        if streaming {
            self.log.lists.fetch_add(1, Ordering::SeqCst);
        }
        match self.inner.watch(params).await {
            Ok(stream) => {
                let index = self.log.push(Call::Watch {
                    resource_version: params.resource_version.clone(),
                    streaming,
                    synced: !streaming,
                    end: None,
                    events: 0,
                    lasted: Duration::ZERO,
                });
                let recorded: WatchStream<K> = Box::pin(RecordedStream {
                    inner: stream,
                    log: Arc::clone(&self.log),
                    index,
                    events: 0,
                    started: Instant::now(),
                    initial: streaming,
                    ended: false,
                });
                Ok(recorded)
            }
            Err(err) => {
                self.log.push(Call::WatchRefused {
                    resource_version: params.resource_version.clone(),
                    streaming,
                    kind: err.kind(),
                });
                Err(err)
            }
        }
    }

    fn last_encoding(&self) -> Option<&'static str> {
        self.inner.last_encoding()
    }

    fn supports_streaming_list(&self) -> bool {
        self.inner.supports_streaming_list()
    }
}

/// A watch stream that records how it ended.
struct RecordedStream<K> {
    inner: WatchStream<K>,
    log: Arc<CallLog>,
    index: usize,
    events: u64,
    started: Instant,
    /// Still in a streaming list's initial events.
    initial: bool,
    ended: bool,
}

impl<K> RecordedStream<K> {
    fn end(&mut self, how: End) {
        if !self.ended {
            self.ended = true;
            self.log
                .end_watch(self.index, how, self.events, self.started.elapsed());
        }
    }
}

impl<K> Stream for RecordedStream<K> {
    type Item = Result<WatchEvent<K>, Error>;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let this = self.get_mut();
        let item = match this.inner.as_mut().poll_next(cx) {
            Poll::Pending => return Poll::Pending,
            Poll::Ready(item) => item,
        };
        match &item {
            None => this.end(End::Closed),
            Some(Ok(WatchEvent::Error(status))) => this.end(End::Failed(status.kind())),
            Some(Err(Error::Transport(_))) => this.end(End::Broken),
            Some(Err(err)) => this.end(End::Failed(err.kind())),
            Some(Ok(WatchEvent::Bookmark {
                initial_events_end: true,
                ..
            })) if this.initial => {
                // The reflector counts the watch's events and time from here.
                this.initial = false;
                this.events = 0;
                this.started = Instant::now();
                this.log.mark_synced(this.index);
            }
            Some(Ok(_)) => this.events += 1,
        }
        Poll::Ready(item)
    }
}

impl<K> Drop for RecordedStream<K> {
    fn drop(&mut self) {
        self.end(End::Abandoned);
    }
}

/// The reflector's "very short watch" threshold, plus a margin for where the two clocks start
/// and stop (this wrapper's and the reflector's differ by a poll).
const VERY_SHORT_WATCH: Duration = Duration::from_millis(1250);

/// Whether the reflector must list again after `call` (the call just before a list).
///
/// The reflector lists again after: any failed list or page, and any streaming list that was
/// refused or ended before its initial-events-end bookmark (it retries, or falls back to a
/// list); a watch refused for any reason but a 429 or a refused connection (those re-watch); a
/// watch ended by an error other than 429 (410 Expired, 504 too large, 500 and undecodable
/// events — no internal-error retry window is configured —, anything unclassified); and a
/// watch that ended with no event within a second (client-go's "very short watch"). A
/// streaming list that reached its end bookmark goes on as a watch and follows the watch rules.
pub fn justifies_relist(call: &Call) -> bool {
    match call {
        Call::List { outcome, .. } | Call::Page { outcome } => outcome.is_err(),
        Call::WatchRefused {
            streaming: true, ..
        }
        | Call::Watch { synced: false, .. } => true,
        Call::WatchRefused { kind, .. } => !matches!(
            kind,
            ErrorKind::TooManyRequests { .. } | ErrorKind::ConnectionRefused
        ),
        Call::Watch {
            end: Some(End::Failed(kind)),
            ..
        } => !matches!(kind, ErrorKind::TooManyRequests { .. }),
        Call::Watch {
            end: Some(End::Closed | End::Broken),
            events: 0,
            lasted,
            ..
        } => *lasted < VERY_SHORT_WATCH,
        Call::Watch { .. } => false,
    }
}

/// Whether `call` starts a list: a first page, or a streaming list.
pub fn is_list(call: &Call) -> bool {
    matches!(
        call,
        Call::List { .. }
            | Call::Watch {
                streaming: true,
                ..
            }
            | Call::WatchRefused {
                streaming: true,
                ..
            }
    )
}

/// Checks that every list (or streaming list) after the first follows a call that
/// [`justifies_relist`]. Returns the number of relists, or a description of the first
/// unjustified one.
pub fn check_relists(calls: &[Call]) -> Result<u64, String> {
    let mut relists = 0;
    let mut seen_list = false;
    for (i, call) in calls.iter().enumerate() {
        if !is_list(call) {
            continue;
        }
        if !seen_list {
            seen_list = true;
            continue;
        }
        relists += 1;
        let before = &calls[i - 1];
        if !justifies_relist(before) {
            return Err(format!(
                "relist #{relists} (call {i}: {call:?}) without a reason: it follows {before:?}"
            ));
        }
    }
    Ok(relists)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn list(ok: bool) -> Call {
        Call::List {
            resource_version: "5".into(),
            outcome: if ok { Ok(()) } else { Err(ErrorKind::Other) },
        }
    }

    fn watch(end: End, events: u64, lasted_ms: u64) -> Call {
        Call::Watch {
            resource_version: "5".into(),
            streaming: false,
            synced: true,
            end: Some(end),
            events,
            lasted: Duration::from_millis(lasted_ms),
        }
    }

    #[test]
    fn relists_after_expiry_errors_and_very_short_watches_are_justified() {
        let calls = [
            list(true),
            watch(End::Failed(ErrorKind::Expired), 3, 2000),
            list(false),
            list(true),
            watch(End::Closed, 0, 10),
            list(true),
            Call::WatchRefused {
                resource_version: "9".into(),
                streaming: false,
                kind: ErrorKind::Other,
            },
            list(true),
            watch(End::Failed(ErrorKind::InternalError), 1, 5000),
            list(true),
        ];
        assert_eq!(check_relists(&calls), Ok(5));
    }

    #[test]
    fn a_relist_after_a_clean_close_or_a_429_is_reported() {
        let clean = [list(true), watch(End::Closed, 4, 3000), list(true)];
        assert!(check_relists(&clean).is_err());
        let broken = [list(true), watch(End::Broken, 1, 10), list(true)];
        assert!(check_relists(&broken).is_err());
        let throttled = [
            list(true),
            watch(
                End::Failed(ErrorKind::TooManyRequests { retry_after: None }),
                0,
                10,
            ),
            list(true),
        ];
        assert!(check_relists(&throttled).is_err());
        let refused = [
            list(true),
            Call::WatchRefused {
                resource_version: "1".into(),
                streaming: false,
                kind: ErrorKind::ConnectionRefused,
            },
            list(true),
        ];
        assert!(check_relists(&refused).is_err());
    }

    #[test]
    fn watches_that_resume_are_not_relists() {
        let calls = [
            list(true),
            watch(End::Closed, 2, 1500),
            watch(End::Broken, 7, 20),
            watch(End::Failed(ErrorKind::Expired), 0, 5),
            list(true),
        ];
        assert_eq!(check_relists(&calls), Ok(1));
    }

    fn streaming(synced: bool, end: End, events: u64) -> Call {
        Call::Watch {
            resource_version: String::new(),
            streaming: true,
            synced,
            end: Some(end),
            events,
            lasted: Duration::from_millis(2000),
        }
    }

    #[test]
    fn streaming_lists_count_as_lists_and_retry_after_an_unfinished_one() {
        let calls = [
            Call::WatchRefused {
                resource_version: String::new(),
                streaming: true,
                kind: ErrorKind::TooManyRequests { retry_after: None },
            },
            streaming(false, End::Closed, 3),
            streaming(true, End::Failed(ErrorKind::Expired), 4),
            list(true),
            streaming(true, End::Closed, 0),
        ];
        // The 429 on the first attempt, the stream cut before its bookmark and the 410 each
        // justify the next attempt; the last one, after a healthy watch, does not.
        assert_eq!(check_relists(&calls[..4]), Ok(3));
        assert!(
            check_relists(&[
                calls[2].clone(),
                streaming(true, End::Closed, 5),
                list(true)
            ])
            .is_err()
        );
        assert!(is_list(&calls[0]) && is_list(&calls[4]));
        assert!(!is_list(&watch(End::Closed, 1, 1)));
    }
}
