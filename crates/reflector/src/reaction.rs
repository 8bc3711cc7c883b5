//! What the reflector does after an error, as one pure table ([`react`]): where the error
//! reached it and what kind it is decide whether it waits, relists, re-watches, and from
//! which version; with the state a run keeps between cycles (backoff, the internal-error
//! window).

use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use crate::backoff::Backoff;
use crate::error::{Error, ErrorKind};
use crate::observer::{ListOutcome, ListReason, ReflectorObserver};

use crate::reflector::{Config, INTERNAL_ERROR_RESET};

/// Where an error reached the reflector: each step has its own column in [`react`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Step {
    /// A list: its first page, at the version [`RunState::relist_resource_version`] picks.
    List,
    /// A continue page of a paginated list.
    ListPage,
    /// The request of a streaming list, or its stream before the initial-events-end bookmark.
    StreamingList,
    /// The request that opens a watch.
    WatchStart,
    /// An open watch stream that ended with an error (an `ERROR` event, an undecodable line, a
    /// failed resync). A clean close, a transport failure mid-stream and a very short watch are
    /// not errors of the stream: [`Reflector::watch`](crate::Reflector::watch) handles them before asking.
    WatchEnd,
}

/// What the reflector does about an error, as [`react`] decides it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Reaction {
    /// Send the same request again after the delay: a watch re-watches from the last version
    /// (no relist), a streaming list streams again.
    Retry {
        /// How long to wait first.
        after: Delay,
    },
    /// The version asked for is gone: mark it unavailable and read again at once, in the same
    /// cycle, from `""` (a consistent read) — a list once more, or a streaming list.
    ReadLatest,
    /// A continue token expired: one full list at the original version, without a limit.
    ListWhole,
    /// Give up on the step with the error. A list or a watch ends the cycle (the watch error
    /// handler, a backoff delay, a relist); a streaming list falls back to a list in the same
    /// cycle.
    Fail {
        /// The version the next list asks for.
        relist_at: RelistAt,
    },
}

/// How long a [`Reaction::Retry`] waits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Delay {
    /// Not at all.
    None,
    /// The server's Retry-After, or a backoff delay without one.
    RetryAfter(Option<Duration>),
    /// The server is not ready (starting, restarting, or asking to come back): the server's
    /// Retry-After, or the next delay of the short readiness cadence, which does not grow the
    /// backoff (see [`RunState::ready_delay`]).
    Ready(Option<Duration>),
}

/// The version the list after a [`Reaction::Fail`] asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum RelistAt {
    /// Whatever [`RunState::relist_resource_version`] picks: the last synced version (`"0"`
    /// before the first sync), or `""` if it was already marked unavailable.
    LastSynced,
    /// `""`: the version is marked unavailable now.
    Latest,
}

/// The reflector's reaction to an error of kind `kind` at `step`: the one table of client-go's
/// rules (`list()`, `watch()`, `watchList()`, `isWatchErrorRetriable`, `retryWithDeadline`), with
/// this crate's differences (docs/semantics.md, RL-5, RL-6, RL-9, RL-11, RL-12, RL-15).
///
/// `within_internal_error_window` is asked (and advances the window, RL-12) only for an internal
/// error at the end of a watch.
pub(crate) fn react(
    kind: ErrorKind,
    step: Step,
    within_internal_error_window: impl FnOnce() -> bool,
) -> Reaction {
    use ErrorKind as K;
    use Step as S;
    let relist = Reaction::Fail {
        relist_at: RelistAt::LastSynced,
    };
    // A server that is not ready yet: asked again soon, on the readiness cadence.
    let when_ready = |retry_after| Reaction::Retry {
        after: Delay::Ready(retry_after),
    };
    match (step, kind) {
        // The resource is not served (404): every step gives up. A streaming list falls back
        // to a list, and a list's 404 ends the cycle, whose wait is the calm not-served
        // cadence (`cycle_delay`); a watch that cannot start relists, and that list decides.
        (_, K::NotServed) => relist,

        // A list at a version the server no longer has (or not yet): read the latest state now.
        (S::List, K::Expired | K::TooLargeResourceVersion) => Reaction::ReadLatest,
        // Any other failure of a list ends the cycle; the delay before the next one is chosen
        // by its kind (`Reflector::run`): the readiness cadence for a server not ready.
        (S::List, _) => relist,

        // An expired continue token: the whole list at once; anything else fails the list.
        (S::ListPage, K::Expired) => Reaction::ListWhole,
        (S::ListPage, _) => relist,

        // A server not ready is asked again soon, on the readiness cadence (or after its
        // Retry-After), by a streaming list and a watch alike.
        (S::StreamingList | S::WatchStart, K::TooManyRequests { retry_after }) => {
            when_ready(retry_after)
        }
        (S::StreamingList | S::WatchStart, K::ConnectionRefused | K::ServiceUnavailable) => {
            when_ready(None)
        }

        // A streaming list restarts from "" when its version is gone; anything else falls back
        // to a list.
        (S::StreamingList, K::Expired | K::TooLargeResourceVersion) => Reaction::ReadLatest,
        (S::StreamingList, _) => relist,

        // Watch start: a too-large version relists at ""; anything else (410 included)
        // relists at the last version.
        (S::WatchStart | S::WatchEnd, K::TooLargeResourceVersion) => Reaction::Fail {
            relist_at: RelistAt::Latest,
        },
        (S::WatchStart, _) => relist,

        // Watch end: 429 re-watches after a wait, an internal error at once while inside the
        // retry window; anything else (410 included) relists at the last version.
        (S::WatchEnd, K::TooManyRequests { retry_after }) => Reaction::Retry {
            after: Delay::RetryAfter(retry_after),
        },
        (S::WatchEnd, K::InternalError) if within_internal_error_window() => {
            Reaction::Retry { after: Delay::None }
        }
        (S::WatchEnd, _) => relist,
    }
}

/// The mutable state of one [`Reflector::run`](crate::Reflector::run).
pub(crate) struct RunState {
    pub(crate) rv_unavailable: bool,
    /// Why the next list runs.
    pub(crate) list_reason: ListReason,
    observer: Option<Arc<dyn ReflectorObserver>>,
    pub(crate) backoff: Backoff,
    rng: fastrand::Rng,
    min_watch_timeout: Duration,
    internal_errors: InternalErrorWindow,
    /// Since when the server has not been ready (the first error of the current series of
    /// not-ready answers), if it is not.
    not_ready_since: Option<Instant>,
    /// The next nominal delay of the readiness cadence.
    ready_next: Duration,
    /// The last cycle ended with a 410 and the relist after it was sent at once: the next 410
    /// before a healthy watch waits a backoff delay.
    pub(crate) relisted_at_once: bool,
    /// How often a resource that is not served is listed again.
    not_served_poll: Duration,
}

/// The readiness cadence: the first delay after a not-ready answer, its growth per step and its
/// cap. A server back from a restart is read again within 2 s: [`READY_CAP`] stretched by
/// its jitter of up to 25 %.
const READY_FIRST: Duration = Duration::from_millis(250);
const READY_FACTOR: f64 = 1.5;
const READY_CAP: Duration = Duration::from_millis(1600);

/// How long a series of not-ready answers is polled on the readiness cadence; after that the
/// server is treated as failing, and the backoff protects it.
pub(crate) const READY_PATIENCE: Duration = Duration::from_secs(60);

impl RunState {
    pub(crate) fn new<K>(config: &Config<K>) -> Self {
        Self {
            rv_unavailable: false,
            list_reason: ListReason::Initial,
            observer: config.observer.clone(),
            backoff: Backoff::new(config.backoff),
            rng: config
                .seed
                .map_or_else(fastrand::Rng::new, fastrand::Rng::with_seed),
            min_watch_timeout: config.min_watch_timeout,
            internal_errors: InternalErrorWindow {
                max: config.max_internal_error_retry,
                first: None,
                last: None,
            },
            not_ready_since: None,
            ready_next: READY_FIRST,
            relisted_at_once: false,
            not_served_poll: config.not_served_poll,
        }
    }

    /// The wait before asking a server that is not ready again: its Retry-After if it gave one,
    /// else the next step of the readiness cadence (250 ms, ×1.5 a step, at most 1.6 s,
    /// each stretched by up to 25 %), without stepping the backoff. A series of not-ready answers
    /// longer than [`READY_PATIENCE`] is a failing server: the backoff takes over.
    pub(crate) fn ready_delay(&mut self, retry_after: Option<Duration>) -> Duration {
        let now = Instant::now();
        let since = *self.not_ready_since.get_or_insert(now);
        if now.saturating_duration_since(since) > READY_PATIENCE {
            return retry_after.unwrap_or_else(|| self.backoff_delay());
        }
        let delay = retry_after.unwrap_or_else(|| {
            let nominal = self.ready_next;
            self.ready_next = nominal.mul_f64(READY_FACTOR).min(READY_CAP);
            nominal.mul_f64(1.0 + 0.25 * self.rng.f64())
        });
        if let Some(observer) = &self.observer {
            observer.backoff(delay);
        }
        delay
    }

    /// The wait before listing a resource that is not served again: [`crate::NOT_SERVED_POLL`] (or
    /// the reflector's own period), stretched by up to 20 %, however long it has been; the
    /// backoff is left alone.
    pub(crate) fn not_served_delay(&mut self) -> Duration {
        self.ready();
        let delay = self.not_served_poll.mul_f64(1.0 + 0.2 * self.rng.f64());
        if let Some(observer) = &self.observer {
            observer.backoff(delay);
        }
        delay
    }

    /// The server answered: a series of not-ready answers, if any, is over.
    pub(crate) fn ready(&mut self) {
        self.not_ready_since = None;
        self.ready_next = READY_FIRST;
    }

    pub(crate) fn relist_resource_version(&self, last: &str) -> String {
        if self.rv_unavailable {
            String::new()
        } else if last.is_empty() {
            "0".to_owned()
        } else {
            last.to_owned()
        }
    }

    pub(crate) fn backoff_delay(&mut self) -> Duration {
        let random = self.rng.f64();
        let delay = self.backoff.step(Instant::now(), random);
        if let Some(observer) = &self.observer {
            observer.backoff(delay);
        }
        delay
    }

    /// Tells the observer of a list that ended; the next one, if any, is for the same reason
    /// unless something else ends the cycle.
    pub(crate) fn observe_list(
        &self,
        streaming: bool,
        begun: Instant,
        result: Result<usize, ErrorKind>,
    ) {
        if let Some(observer) = &self.observer {
            observer.list(ListOutcome {
                reason: self.list_reason,
                streaming,
                duration: begun.elapsed(),
                result,
            });
        }
    }

    /// A random timeout in `[min, 2·min)`, in whole seconds, at least one.
    pub(crate) fn watch_timeout(&mut self) -> Duration {
        let min = self.min_watch_timeout.as_secs_f64();
        let secs = min + self.rng.f64() * min;
        Duration::from_secs((secs as u64).max(1))
    }

    fn internal_error_should_retry(&mut self) -> bool {
        self.internal_errors.should_retry(Instant::now())
    }

    /// [`react`] to `err` at `step`, with this run's internal-error window.
    pub(crate) fn react(&mut self, err: &Error, step: Step) -> Reaction {
        let kind = err.kind();
        if let (ErrorKind::TooManyRequests { .. }, Some(observer)) = (kind, &self.observer) {
            observer.throttled();
        }
        react(kind, step, || self.internal_error_should_retry())
    }

    /// Waits out a [`Delay`] (no wait at all for [`Delay::None`]).
    pub(crate) async fn wait(&mut self, after: Delay) {
        let delay = match after {
            Delay::None => return,
            Delay::RetryAfter(Some(retry_after)) => {
                if let Some(observer) = &self.observer {
                    observer.backoff(retry_after);
                }
                retry_after
            }
            Delay::RetryAfter(None) => self.backoff_delay(),
            Delay::Ready(retry_after) => self.ready_delay(retry_after),
        };
        tracing::trace!(?delay, "waiting before the retry");
        tokio::time::sleep(delay).await;
    }

    /// Carries out a reaction that gives up on the step ([`Reaction::Fail`]) and returns the
    /// error to end it with.
    pub(crate) fn fail(&mut self, reaction: Reaction, err: Error) -> Error {
        debug_assert!(
            matches!(reaction, Reaction::Fail { .. }),
            "{reaction:?} is not a failure"
        );
        if let Reaction::Fail {
            relist_at: RelistAt::Latest,
        } = reaction
        {
            self.rv_unavailable = true;
        }
        err
    }
}

/// client-go's `retryWithDeadline` for internal errors: retry while the first error of the
/// current series is no older than `max`; a series ends after a minute without errors.
#[derive(Debug)]
struct InternalErrorWindow {
    max: Duration,
    first: Option<Instant>,
    last: Option<Instant>,
}

impl InternalErrorWindow {
    fn should_retry(&mut self, now: Instant) -> bool {
        if self.max.is_zero() {
            return false;
        }
        let first = match (self.first, self.last) {
            (Some(first), Some(last))
                if now.saturating_duration_since(last) < INTERNAL_ERROR_RESET =>
            {
                first
            }
            _ => now,
        };
        self.first = Some(first);
        self.last = Some(now);
        if now.saturating_duration_since(first) <= self.max {
            true
        } else {
            self.first = None;
            self.last = None;
            false
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_reaction_table() {
        use ErrorKind as K;
        use Step as S;
        let retry_after = K::TooManyRequests {
            retry_after: Some(Duration::from_secs(3)),
        };
        let relist = Reaction::Fail {
            relist_at: RelistAt::LastSynced,
        };
        let relist_latest = Reaction::Fail {
            relist_at: RelistAt::Latest,
        };
        let wait = |after| Reaction::Retry { after };
        let when_ready = |retry_after| wait(Delay::Ready(retry_after));
        let three_seconds = Some(Duration::from_secs(3));
        let rows = [
            (S::List, K::Expired, Reaction::ReadLatest),
            (S::List, K::TooLargeResourceVersion, Reaction::ReadLatest),
            (S::List, retry_after, relist),
            (S::List, K::ConnectionRefused, relist),
            (S::List, K::ServiceUnavailable, relist),
            (S::List, K::InternalError, relist),
            (S::ListPage, K::Expired, Reaction::ListWhole),
            (S::ListPage, K::TooLargeResourceVersion, relist),
            (S::StreamingList, K::Expired, Reaction::ReadLatest),
            (
                S::StreamingList,
                K::TooLargeResourceVersion,
                Reaction::ReadLatest,
            ),
            (S::StreamingList, retry_after, when_ready(three_seconds)),
            (S::StreamingList, K::ConnectionRefused, when_ready(None)),
            (S::StreamingList, K::ServiceUnavailable, when_ready(None)),
            (S::StreamingList, K::InternalError, relist),
            (S::WatchStart, K::Expired, relist),
            (S::WatchStart, K::TooLargeResourceVersion, relist_latest),
            (
                S::WatchStart,
                K::TooManyRequests { retry_after: None },
                when_ready(None),
            ),
            (S::WatchStart, K::ConnectionRefused, when_ready(None)),
            (S::WatchStart, K::ServiceUnavailable, when_ready(None)),
            (S::WatchStart, K::InternalError, relist),
            (S::WatchStart, K::Other, relist),
            (S::WatchEnd, K::Expired, relist),
            (S::WatchEnd, K::TooLargeResourceVersion, relist_latest),
            (
                S::WatchEnd,
                retry_after,
                wait(Delay::RetryAfter(Some(Duration::from_secs(3)))),
            ),
            (S::WatchEnd, K::ConnectionRefused, relist),
            (S::WatchEnd, K::ServiceUnavailable, relist),
            (S::WatchEnd, K::Other, relist),
            (S::List, K::NotServed, relist),
            (S::ListPage, K::NotServed, relist),
            (S::StreamingList, K::NotServed, relist),
            (S::WatchStart, K::NotServed, relist),
            (S::WatchEnd, K::NotServed, relist),
        ];
        for (step, kind, want) in rows {
            let got = react(kind, step, || {
                panic!("asked the window at {step:?} for {kind:?}")
            });
            assert_eq!(got, want, "{step:?}, {kind:?}");
        }
        assert_eq!(
            react(K::InternalError, S::WatchEnd, || true),
            wait(Delay::None)
        );
        assert_eq!(react(K::InternalError, S::WatchEnd, || false), relist);
    }

    #[test]
    fn internal_error_window_retries_only_within_its_duration() {
        let t0 = Instant::now();
        let mut w = InternalErrorWindow {
            max: Duration::from_secs(30),
            first: None,
            last: None,
        };
        assert!(w.should_retry(t0));
        assert!(w.should_retry(t0 + Duration::from_secs(20)));
        assert!(w.should_retry(t0 + Duration::from_secs(30)));
        assert!(!w.should_retry(t0 + Duration::from_secs(31)));
        // A new series starts after that.
        assert!(w.should_retry(t0 + Duration::from_secs(32)));
        // A quiet minute also starts a new series.
        assert!(w.should_retry(t0 + Duration::from_secs(100)));
        let mut off = InternalErrorWindow {
            max: Duration::ZERO,
            first: None,
            last: None,
        };
        assert!(!off.should_retry(t0));
    }
}
