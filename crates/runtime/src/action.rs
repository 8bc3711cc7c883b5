//! What a reconcile asks for its key next.

use std::time::Duration;

/// What to do with a key after its reconcile (kube-runtime's `Action`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Action {
    pub(crate) next: Next,
}

/// The step an [`Action`] stands for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Next {
    AwaitChange,
    RequeueAfter(Duration),
    Backoff,
}

impl Action {
    /// Nothing more until something changes.
    pub fn await_change() -> Self {
        Self {
            next: Next::AwaitChange,
        }
    }

    /// Reconcile the key again after `delay` (sooner if something changes).
    pub fn requeue(delay: Duration) -> Self {
        Self {
            next: Next::RequeueAfter(delay),
        }
    }

    /// Retry through the rate limiter: the key's exponential backoff, which grows with each
    /// retry until a reconcile succeeds. The usual answer of an `error_policy`.
    pub fn backoff() -> Self {
        Self {
            next: Next::Backoff,
        }
    }

    /// The delay of a [`requeue`](Self::requeue).
    pub fn requeue_after(&self) -> Option<Duration> {
        match self.next {
            Next::RequeueAfter(d) => Some(d),
            _ => None,
        }
    }
}
