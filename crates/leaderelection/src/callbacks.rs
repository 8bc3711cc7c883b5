//! What an elector tells of its transitions: [`LeaderCallbacks`], and [`LeaderCallbackFuncs`]
//! to give them as closures.

use std::fmt;

/// The closure told of a new holder.
type NewLeaderFn = Box<dyn Fn(Option<&str>) + Send + Sync>;

/// Told of an election's transitions, synchronously, at the instant the elector decides them:
/// keep it short and do not block (hand work to a task).
pub trait LeaderCallbacks: Send + Sync + 'static {
    /// This candidate started leading term `term`.
    fn started_leading(&self, term: u64) {
        let _ = term;
    }
    /// This candidate stopped leading term `term`: it lost the lease (renew deadline passed)
    /// or was stopped. Called before a release is written.
    fn stopped_leading(&self, term: u64) {
        let _ = term;
    }
    /// A holder other than the one observed before (`None`: the lease is free).
    fn new_leader(&self, identity: Option<&str>) {
        let _ = identity;
    }
}

/// [`LeaderCallbacks`] from closures, each optional (client-go's `LeaderCallbacks` struct of
/// funcs).
///
/// ```
/// use std::sync::Arc;
/// use std::sync::atomic::{AtomicU64, Ordering};
/// use informer_leaderelection::{LeaderCallbackFuncs, LeaderCallbacks};
///
/// let led = Arc::new(AtomicU64::new(0));
/// let callbacks = LeaderCallbackFuncs::new()
///     .on_started_leading({
///         let led = Arc::clone(&led);
///         move |term| led.store(term, Ordering::SeqCst)
///     })
///     .on_new_leader(|who| println!("leader: {who:?}"));
/// callbacks.started_leading(3);
/// callbacks.stopped_leading(3); // not set: nothing happens
/// assert_eq!(led.load(Ordering::SeqCst), 3);
/// ```
#[derive(Default)]
pub struct LeaderCallbackFuncs {
    started: Option<Box<dyn Fn(u64) + Send + Sync>>,
    stopped: Option<Box<dyn Fn(u64) + Send + Sync>>,
    new_leader: Option<NewLeaderFn>,
}

impl fmt::Debug for LeaderCallbackFuncs {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LeaderCallbackFuncs")
            .field("started_leading", &self.started.is_some())
            .field("stopped_leading", &self.stopped.is_some())
            .field("new_leader", &self.new_leader.is_some())
            .finish()
    }
}

impl LeaderCallbackFuncs {
    /// No callback set.
    pub fn new() -> Self {
        Self::default()
    }

    /// Called with the term's number when this candidate starts leading.
    #[must_use]
    pub fn on_started_leading(mut self, f: impl Fn(u64) + Send + Sync + 'static) -> Self {
        self.started = Some(Box::new(f));
        self
    }

    /// Called with the term's number when this candidate stops leading.
    #[must_use]
    pub fn on_stopped_leading(mut self, f: impl Fn(u64) + Send + Sync + 'static) -> Self {
        self.stopped = Some(Box::new(f));
        self
    }

    /// Called with the new holder (`None`: the lease is free) when it changes.
    #[must_use]
    pub fn on_new_leader(mut self, f: impl Fn(Option<&str>) + Send + Sync + 'static) -> Self {
        self.new_leader = Some(Box::new(f));
        self
    }
}

impl LeaderCallbacks for LeaderCallbackFuncs {
    fn started_leading(&self, term: u64) {
        if let Some(f) = &self.started {
            f(term);
        }
    }

    fn stopped_leading(&self, term: u64) {
        if let Some(f) = &self.stopped {
            f(term);
        }
    }

    fn new_leader(&self, identity: Option<&str>) {
        if let Some(f) = &self.new_leader {
            f(identity);
        }
    }
}
