//! The election: client-go's `tools/leaderelection` algorithm on a [`LeaseLock`].

use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use parking_lot::Mutex;
use tokio::sync::watch;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::attempt::{Attempt, Claim, Seen, record_lease};
use crate::callbacks::LeaderCallbacks;
use crate::lock::LeaseLock;

/// The timings and identity of one candidate.
///
/// The defaults are client-go's: a 15 s lease, a 10 s renew deadline, a 2 s retry period.
/// The renew deadline is shorter than the lease by design: a leader that cannot renew stops
/// leading at the deadline, `lease_duration - renew_deadline` (5 s) before any other
/// candidate may take the lease over.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ElectionConfig {
    /// This candidate's identity, unique among the candidates (a pod name, a hostname plus a
    /// random suffix).
    pub identity: String,
    /// How long a lease holds without renewal, as written into the record; others wait this
    /// long, by their own clock, after they last saw the record change.
    pub lease_duration: Duration,
    /// How long the leader keeps retrying a failing renewal before it stops leading,
    /// counted from the start of its last successful renewal.
    pub renew_deadline: Duration,
    /// How often the leader renews, and at most how long a candidate waits between attempts
    /// (it waits a random time between half of it and all of it).
    pub retry_period: Duration,
    /// Whether a leader that is stopped gracefully frees the lease, so that a successor takes
    /// over at its next attempt instead of after a lease duration.
    pub release_on_cancel: bool,
}

impl ElectionConfig {
    /// client-go's defaults for `identity`: 15 s lease, 10 s renew deadline, 2 s retry
    /// period, release on graceful stop.
    pub fn new(identity: impl Into<String>) -> Self {
        let defaults = Timings::default();
        Self {
            identity: identity.into(),
            lease_duration: defaults.lease_duration,
            renew_deadline: defaults.renew_deadline,
            retry_period: defaults.retry_period,
            release_on_cancel: true,
        }
    }

    /// Sets the three timings.
    pub fn timings(
        mut self,
        lease_duration: Duration,
        renew_deadline: Duration,
        retry_period: Duration,
    ) -> Self {
        self.lease_duration = lease_duration;
        self.renew_deadline = renew_deadline;
        self.retry_period = retry_period;
        self
    }

    /// Whether to free the lease on a graceful stop (on by default).
    pub fn release_on_cancel(mut self, release: bool) -> Self {
        self.release_on_cancel = release;
        self
    }

    /// Checks client-go's constraints: a non-empty identity, a lease longer than the renew
    /// deadline, a renew deadline longer than the retry period, a retry period above zero,
    /// and a lease of at least a second (a Lease's `leaseDurationSeconds` is whole seconds: a
    /// fraction is written rounded up, which only makes others wait longer) and at most
    /// `i32::MAX` seconds.
    pub fn validate(&self) -> Result<(), ConfigError> {
        if self.identity.is_empty() {
            return Err(ConfigError::NoIdentity);
        }
        Timings::new(self.lease_duration, self.renew_deadline, self.retry_period).validate()
    }
}

/// The longest lease a Lease can state: `leaseDurationSeconds` is a 32-bit integer.
const MAX_LEASE: Duration = Duration::from_secs(i32::MAX as u64);

/// A lease's three timings, shared by the election and the shard assignment. The defaults are
/// client-go's: a 15 s lease, a 10 s renew deadline, a 2 s retry period.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Timings {
    /// How long a lease holds without renewal, as written into the record; others wait this
    /// long, by their own clock, after they last saw the record change.
    pub lease_duration: Duration,
    /// How long a holder keeps retrying a failing renewal before its term ends, counted from
    /// the start of its last successful renewal.
    pub renew_deadline: Duration,
    /// How often a holder renews, and at most how long a candidate waits between attempts.
    pub retry_period: Duration,
}

impl Default for Timings {
    fn default() -> Self {
        Self::new(
            Duration::from_secs(15),
            Duration::from_secs(10),
            Duration::from_secs(2),
        )
    }
}

impl Timings {
    /// The three timings.
    pub fn new(lease_duration: Duration, renew_deadline: Duration, retry_period: Duration) -> Self {
        Self {
            lease_duration,
            renew_deadline,
            retry_period,
        }
    }

    /// Checks client-go's constraints: a retry period above zero, a renew deadline longer
    /// than it, a lease longer than the deadline, of at least a second (a Lease's
    /// `leaseDurationSeconds` is whole seconds: a fraction is written rounded up) and at most
    /// `i32::MAX` seconds.
    pub fn validate(&self) -> Result<(), ConfigError> {
        if self.retry_period.is_zero() {
            return Err(ConfigError::ZeroRetryPeriod);
        }
        if self.lease_duration <= self.renew_deadline {
            return Err(ConfigError::LeaseNotLongerThanDeadline);
        }
        if self.renew_deadline <= self.retry_period {
            return Err(ConfigError::DeadlineNotLongerThanRetry);
        }
        if self.lease_duration < Duration::from_secs(1) {
            return Err(ConfigError::LeaseUnderASecond);
        }
        if self.lease_duration > MAX_LEASE {
            return Err(ConfigError::LeaseTooLong);
        }
        Ok(())
    }
}

/// A configuration the elector refuses.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ConfigError {
    /// The identity is empty.
    #[error("the candidate's identity is empty")]
    NoIdentity,
    /// The retry period is zero.
    #[error("the retry period must be above zero")]
    ZeroRetryPeriod,
    /// The lease is not longer than the renew deadline.
    #[error("the lease duration must be longer than the renew deadline")]
    LeaseNotLongerThanDeadline,
    /// The renew deadline is not longer than the retry period.
    #[error("the renew deadline must be longer than the retry period")]
    DeadlineNotLongerThanRetry,
    /// The lease is under a second (a Lease counts it in whole seconds).
    #[error("the lease duration must be at least a second")]
    LeaseUnderASecond,
    /// The lease is longer than a Lease can state (`i32::MAX` seconds, about 68 years).
    #[error("the lease duration must be at most 2147483647 seconds")]
    LeaseTooLong,
    /// The shard count is zero.
    #[error("the shard count must be at least 1")]
    NoShards,
    /// The shard count is above [`MAX_SHARDS`](crate::MAX_SHARDS).
    #[error("the shard count {0} is above the maximum of {max}", max = crate::MAX_SHARDS)]
    TooManyShards(u32),
    /// The Leases' name prefix is not a lowercase DNS label start (`a-z`, `0-9`, `-`, `.`,
    /// starting and ending with a letter or digit) or too long for the names made from it.
    #[error(
        "{0:?} cannot prefix Lease names (lowercase letters, digits, '-' and '.', at most 200 characters)"
    )]
    BadLeasePrefix(String),
}

/// What a candidate knows: whether it leads, and who it last saw leading.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Status {
    /// Whether this candidate leads now.
    pub leading: bool,
    /// How many times this candidate started leading (the current term's number while
    /// leading).
    pub term: u64,
    /// The holder it last observed (itself included); `None` if the lease is free or not seen
    /// yet.
    pub leader: Option<String>,
}

/// One term of leadership: valid until [`lost`](Self::lost) completes.
#[derive(Debug, Clone)]
pub struct Term {
    /// The term's number (1 for this candidate's first).
    pub number: u64,
    ended: CancellationToken,
}

impl Term {
    /// Whether the term is still under way.
    pub fn is_current(&self) -> bool {
        !self.ended.is_cancelled()
    }

    /// Completes when the term ends: the lease was lost or the elector stopped.
    pub async fn lost(&self) {
        self.ended.cancelled().await;
    }

    /// A token cancelled when the term ends (to tie other work to it).
    pub fn token(&self) -> CancellationToken {
        self.ended.clone()
    }
}

/// A candidate in a leader election (see the crate docs). Cheap to clone: clones are the same
/// candidate. [`run`](Self::run) it once.
#[derive(Clone)]
pub struct LeaderElector {
    inner: Arc<Inner>,
}

struct Inner {
    lock: Box<dyn LeaseLock>,
    config: ElectionConfig,
    /// The lease duration as written into the record: whole seconds, rounded up.
    record_lease: Duration,
    status: watch::Sender<Status>,
    term: Mutex<Option<Term>>,
    running: AtomicBool,
    callbacks: Mutex<Vec<Arc<dyn LeaderCallbacks>>>,
}

impl fmt::Debug for LeaderElector {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LeaderElector")
            .field("lock", &self.inner.lock.describe())
            .field("config", &self.inner.config)
            .field("status", &*self.inner.status.borrow())
            .finish()
    }
}

/// Ends a term still under way when `run` returns or its future is dropped, and lets the
/// candidate run again.
struct RunGuard<'a> {
    elector: &'a LeaderElector,
    term: Option<Term>,
}

impl RunGuard<'_> {
    fn end_term(&mut self) {
        if let Some(term) = self.term.take() {
            self.elector.stop_leading(&term);
        }
    }
}

impl Drop for RunGuard<'_> {
    fn drop(&mut self) {
        self.end_term();
        self.elector.inner.running.store(false, Ordering::Release);
    }
}

impl LeaderElector {
    /// A candidate for the lease behind `lock`.
    pub fn new(lock: impl LeaseLock, config: ElectionConfig) -> Result<Self, ConfigError> {
        config.validate()?;
        Ok(Self {
            inner: Arc::new(Inner {
                lock: Box::new(lock),
                record_lease: record_lease(config.lease_duration),
                config,
                status: watch::Sender::new(Status::default()),
                term: Mutex::new(None),
                running: AtomicBool::new(false),
                callbacks: Mutex::new(Vec::new()),
            }),
        })
    }

    /// Adds callbacks told of every transition: any [`LeaderCallbacks`], or closures through
    /// [`LeaderCallbackFuncs`](crate::LeaderCallbackFuncs).
    pub fn with_callbacks(self, callbacks: impl LeaderCallbacks) -> Self {
        self.inner.callbacks.lock().push(Arc::new(callbacks));
        self
    }

    /// The configuration.
    pub fn config(&self) -> &ElectionConfig {
        &self.inner.config
    }

    /// What the candidate knows now.
    pub fn status(&self) -> Status {
        self.inner.status.borrow().clone()
    }

    /// Whether the candidate leads now.
    pub fn is_leader(&self) -> bool {
        self.inner.status.borrow().leading
    }

    /// The status, as it changes.
    pub fn subscribe(&self) -> watch::Receiver<Status> {
        self.inner.status.subscribe()
    }

    /// The current term if the candidate leads now.
    pub fn current_term(&self) -> Option<Term> {
        self.inner.term.lock().clone().filter(Term::is_current)
    }

    /// Waits until the candidate leads, and returns the term. Waits forever if it never does
    /// (race it against your stop signal).
    pub async fn leading(&self) -> Term {
        let mut status = self.subscribe();
        loop {
            if let Some(term) = self.current_term() {
                return term;
            }
            if status.changed().await.is_err() {
                std::future::pending::<()>().await;
            }
        }
    }

    /// Runs the election until `stop` is cancelled: tries to acquire the lease, renews it while
    /// leading, and goes back to trying when a renewal keeps failing past the renew deadline
    /// (it stops leading first). On stop while leading, it stops leading, then frees the lease
    /// if [`release_on_cancel`](ElectionConfig::release_on_cancel) is set.
    ///
    /// Dropping the future while leading (a task aborted) ends the term too, without a
    /// release. Run one at a time: a second concurrent `run` of the same candidate returns at
    /// once.
    pub async fn run(&self, stop: CancellationToken) {
        if self.inner.running.swap(true, Ordering::AcqRel) {
            tracing::error!(
                identity = %self.inner.config.identity,
                "this candidate's election is already running; the second run returns"
            );
            return;
        }
        let mut guard = RunGuard {
            elector: self,
            term: None,
        };
        let mut seen = Seen::default();
        loop {
            // A candidate: attempt, then wait a jittered retry period (never past the moment
            // the observed lease expires).
            let acquired_at = loop {
                let start = Instant::now();
                let attempt = tokio::select! {
                    attempt = tokio::time::timeout(
                        self.inner.config.renew_deadline,
                        self.try_acquire_or_renew(&mut seen),
                    ) => attempt.unwrap_or(Attempt::Failed),
                    () = stop.cancelled() => return,
                };
                if matches!(attempt, Attempt::Held) {
                    break start;
                }
                let wait = self.candidate_wait(&seen);
                tokio::select! {
                    () = tokio::time::sleep(wait) => {}
                    () = stop.cancelled() => return,
                }
            };
            guard.term = Some(self.start_leading());
            let stopped = self.lead(&mut seen, acquired_at, &stop).await;
            guard.end_term();
            if stopped {
                if self.inner.config.release_on_cancel {
                    self.release(&mut seen).await;
                }
                return;
            }
        }
    }

    /// Renews every retry period, counted from the start of each attempt (a slow lease store
    /// does not stretch the cadence: an attempt that took longer than the period is followed at
    /// once), until a renewal fails for the whole renew deadline (returns `false`) or `stop` is
    /// cancelled (returns `true`).
    async fn lead(&self, seen: &mut Seen, acquired_at: Instant, stop: &CancellationToken) -> bool {
        let config = &self.inner.config;
        let mut renewed_at = acquired_at;
        loop {
            tokio::select! {
                () = tokio::time::sleep_until(renewed_at + config.retry_period) => {}
                () = stop.cancelled() => return true,
            }
            // Leading ends at the deadline, whatever a request in flight would answer.
            let deadline = renewed_at + config.renew_deadline;
            let renewed = loop {
                let start = Instant::now();
                if start >= deadline {
                    break false;
                }
                tokio::select! {
                    attempt = self.try_acquire_or_renew(seen) => {
                        if matches!(attempt, Attempt::Held) {
                            renewed_at = start;
                            break true;
                        }
                    }
                    () = tokio::time::sleep_until(deadline) => break false,
                    () = stop.cancelled() => return true,
                }
                tokio::select! {
                    () = tokio::time::sleep_until(deadline.min(start + config.retry_period)) => {}
                    () = stop.cancelled() => return true,
                }
            };
            if !renewed {
                tracing::warn!(
                    lock = %self.inner.lock.describe(),
                    identity = %config.identity,
                    "could not renew the lease within the renew deadline; stopped leading"
                );
                return false;
            }
        }
    }

    /// How long a candidate waits before its next attempt: a random time between half the
    /// retry period and all of it, but never past the expiry of another's lease it observed.
    fn candidate_wait(&self, seen: &Seen) -> Duration {
        let retry = self.inner.config.retry_period;
        let jittered = retry / 2 + retry.mul_f64(fastrand::f64() / 2.0);
        let mine = Some(self.inner.config.identity.as_str());
        match &seen.observed {
            Some(o) if o.record.holder.is_some() && o.record.holder.as_deref() != mine => {
                let expiry = seen.expiry().unwrap_or_else(Instant::now);
                match expiry.saturating_duration_since(Instant::now()) {
                    // Already expired and still not ours (the attempt failed): a full wait, so
                    // that a failing server is not hammered.
                    Duration::ZERO => jittered,
                    left => jittered.min(left),
                }
            }
            _ => jittered,
        }
    }

    /// One attempt: renew our lease, or acquire a free or expired one.
    async fn try_acquire_or_renew(&self, seen: &mut Seen) -> Attempt {
        let report = |holder: Option<&str>| self.report_leader(holder);
        match self.claim(&report).attempt(seen).await {
            Ok(attempt) => attempt,
            Err(e) if e.is_lost_race() => {
                tracing::debug!(lock = %self.inner.lock.describe(), "lost a race for the lease: {e}");
                Attempt::Failed
            }
            Err(e) => {
                tracing::warn!(lock = %self.inner.lock.describe(), "lease attempt failed: {e}");
                Attempt::Failed
            }
        }
    }

    fn claim<'a>(&'a self, report: &'a (dyn Fn(Option<&str>) + Send + Sync)) -> Claim<'a> {
        Claim {
            lock: self.inner.lock.as_ref(),
            identity: &self.inner.config.identity,
            lease: self.inner.record_lease,
            report,
        }
    }

    /// Tells of a new holder.
    fn report_leader(&self, holder: Option<&str>) {
        let holder = holder.map(str::to_owned);
        self.inner.status.send_modify(|s| s.leader = holder.clone());
        for callbacks in self.callbacks() {
            callbacks.new_leader(holder.as_deref());
        }
    }

    fn callbacks(&self) -> Vec<Arc<dyn LeaderCallbacks>> {
        self.inner.callbacks.lock().clone()
    }

    fn start_leading(&self) -> Term {
        let number = self.inner.status.borrow().term + 1;
        let term = Term {
            number,
            ended: CancellationToken::new(),
        };
        *self.inner.term.lock() = Some(term.clone());
        self.inner.status.send_modify(|s| {
            s.leading = true;
            s.term = number;
        });
        tracing::info!(
            lock = %self.inner.lock.describe(),
            identity = %self.inner.config.identity,
            term = number,
            "started leading"
        );
        for callbacks in self.callbacks() {
            callbacks.started_leading(number);
        }
        term
    }

    fn stop_leading(&self, term: &Term) {
        term.ended.cancel();
        self.inner.status.send_modify(|s| s.leading = false);
        tracing::info!(
            lock = %self.inner.lock.describe(),
            identity = %self.inner.config.identity,
            term = term.number,
            "stopped leading"
        );
        for callbacks in self.callbacks() {
            callbacks.stopped_leading(term.number);
        }
    }

    /// Frees the lease if we still hold it, so a successor need not wait for it to expire.
    /// Bounded by the renew deadline; a conflict means someone wrote in between: read again.
    async fn release(&self, seen: &mut Seen) {
        let report = |holder: Option<&str>| self.report_leader(holder);
        let claim = self.claim(&report);
        let released = tokio::time::timeout(self.inner.config.renew_deadline, claim.release(seen));
        let failure = match released.await {
            Ok(Ok(())) => return,
            Ok(Err(e)) => e.to_string(),
            Err(_) => "no answer within the renew deadline".to_owned(),
        };
        tracing::warn!(
            lock = %self.inner.lock.describe(),
            "the lease was not released ({failure}); a successor takes over once it expires"
        );
    }
}
