//! The hook a metrics layer hangs on: told of every reconcile as it ends.

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

/// Told of every reconcile as it ends (the hook of a metrics layer); runs on the worker, so
/// keep it short.
pub trait ReconcileObserver: Send + Sync + 'static {
    /// A reconcile ended.
    fn reconciled(&self, outcome: ReconcileOutcome);
}
