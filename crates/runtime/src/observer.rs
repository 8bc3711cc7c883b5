//! The hook a metrics layer hangs on: told of every reconcile as it ends, and of every wait of
//! a reconcile for its key's previous writes.

use std::time::Duration;

use crate::Action;

/// How one reconcile went, as told to a [`ReconcileObserver`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct ReconcileOutcome {
    /// Whether `reconcile` returned `Ok`.
    pub succeeded: bool,
    /// Whether the object was gone from the cache ([`Target::Deleted`](crate::Target::Deleted)).
    pub deleted: bool,
    /// What happens to the key next (from `reconcile`, or the error policy).
    pub action: Action,
    /// How long `reconcile` took.
    pub duration: Duration,
    /// Whether it was cancelled at the controller's
    /// [`reconcile_timeout`](crate::Controller::reconcile_timeout) (then `succeeded` is false).
    pub timed_out: bool,
}

/// How the wait of a reconcile for the writes of its key's previous reconcile went
/// (read-your-own-writes, see [`Controller::read_your_writes`](crate::Controller::read_your_writes)),
/// as told to a [`ReconcileObserver`]. Told only when there was something to wait for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct WritesAwaited {
    /// How long the reconcile waited before it started.
    pub waited: Duration,
    /// What was awaited: one written version per informer, and one per deleted object.
    pub awaited: usize,
    /// A cache had not shown the writes when the wait's time was up: the reconcile ran on a
    /// stale read.
    pub timed_out: bool,
    /// A cache's resource versions cannot be compared (a server with opaque versions): it was
    /// not waited for.
    pub not_comparable: bool,
    /// An informer had stopped: it was not waited for.
    pub stopped: bool,
}

/// Told of every reconcile as it ends (the hook of a metrics layer); runs on the worker, so
/// keep it short.
pub trait ReconcileObserver: Send + Sync + 'static {
    /// A reconcile ended.
    fn reconciled(&self, outcome: ReconcileOutcome);

    /// A reconcile waited for the caches to show its key's previous writes, and is about to
    /// start (the waits, their durations, the stale reads). Nothing by default.
    fn writes_awaited(&self, wait: WritesAwaited) {
        let _ = wait;
    }
}
