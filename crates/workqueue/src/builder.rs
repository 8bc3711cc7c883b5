//! [`WorkQueueBuilder`]: a [`WorkQueue`]'s name, rate limiter, metrics and order, frozen when
//! it is built.

use std::borrow::Cow;
use std::collections::VecDeque;
use std::fmt;
use std::hash::Hash;
use std::sync::Arc;

use parking_lot::Mutex;
use tokio::sync::Notify;

use crate::metrics::{MetricsProvider, QueueHandle, Source};
use crate::order::{Fair, Order, TenantFn, namespace_of};
use crate::queue::{Inner, WorkQueue};
use crate::rate_limiter::{RateLimiter, default_controller_rate_limiter};
use crate::state::State;

/// Builds a [`WorkQueue`] with a name, a rate limiter, metrics, and first-in-first-out or
/// priority order.
pub struct WorkQueueBuilder<T> {
    name: String,
    limiter: Option<Box<dyn RateLimiter<T>>>,
    metrics: Option<Arc<dyn MetricsProvider>>,
    /// The tenants of a priority queue; `None`: first in, first out.
    tenant: Option<TenantFn<T>>,
}

impl<T> fmt::Debug for WorkQueueBuilder<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("WorkQueueBuilder")
            .field("name", &self.name)
            .field("limiter", &self.limiter.is_some())
            .field("metrics", &self.metrics.is_some())
            .field("priority", &self.tenant.is_some())
            .finish()
    }
}

impl<T> WorkQueueBuilder<T>
where
    T: Clone + Eq + Hash + Send + Sync + 'static,
{
    /// A builder with every default: no name, client-go's default rate limiter, no metrics,
    /// first in, first out.
    pub(crate) fn new() -> Self {
        Self {
            name: String::new(),
            limiter: None,
            metrics: None,
            tenant: None,
        }
    }

    /// The queue's name, given to the metrics provider.
    pub fn name(mut self, name: impl Into<String>) -> Self {
        self.name = name.into();
        self
    }

    /// The rate limiter of [`add_rate_limited`](WorkQueue::add_rate_limited) (default:
    /// [`default_controller_rate_limiter`]).
    pub fn rate_limiter(mut self, limiter: impl RateLimiter<T> + 'static) -> Self {
        self.limiter = Some(Box::new(limiter));
        self
    }

    /// Who reads the queue's metrics (default: no one). With a provider the queue times its
    /// items (a sample of them at high rates: see the [`metrics`](crate::metrics) module).
    pub fn metrics(mut self, provider: Arc<dyn MetricsProvider>) -> Self {
        self.metrics = Some(provider);
        self
    }

    /// A priority queue, fair across the tenants `tenant` gives (see
    /// [`priority`](Self::priority) for the order). `tenant` runs under the queue's lock
    /// whenever an item is queued: it must be quick, must not use the queue, and must give an
    /// item the same tenant every time. If it panics, the add (or the `done`) panics and
    /// leaves the queue as it was.
    ///
    /// ```
    /// use std::borrow::Cow;
    /// use informer_workqueue::WorkQueue;
    ///
    /// // Items are (tenant, job) pairs.
    /// let queue = WorkQueue::<(String, u32)>::builder()
    ///     .priority_by(|item: &(String, u32)| Cow::Borrowed(item.0.as_str()))
    ///     .build();
    /// assert!(queue.is_priority());
    /// ```
    pub fn priority_by<F>(mut self, tenant: F) -> Self
    where
        F: for<'a> Fn(&'a T) -> Cow<'a, str> + Send + Sync + 'static,
    {
        self.tenant = Some(Arc::new(tenant));
        self
    }

    /// The queue.
    pub fn build(self) -> WorkQueue<T> {
        let order = match self.tenant {
            Some(tenant) => Order::Fair(Fair::new(tenant)),
            None => Order::Fifo(VecDeque::new()),
        };
        let inner = Arc::new(Inner {
            name: self.name,
            state: Mutex::new(State::new(order, self.metrics.is_some())),
            ready: Notify::new(),
            drained: Notify::new(),
            limiter: self
                .limiter
                .unwrap_or_else(|| Box::new(default_controller_rate_limiter())),
        });
        if let Some(provider) = self.metrics {
            let weak = Arc::downgrade(&inner);
            let source: std::sync::Weak<dyn Source> = weak;
            provider.register(QueueHandle::new(inner.name.clone(), source));
        }
        WorkQueue { inner }
    }
}

impl<T> WorkQueueBuilder<T>
where
    T: AsRef<str> + Clone + Eq + Hash + Send + Sync + 'static,
{
    /// A priority queue (controller-runtime's priority queue), fair across namespaces: the
    /// tenant of a `namespace/name` key is its namespace ([`namespace_of`]). Without this (or
    /// [`priority_by`](Self::priority_by)) the queue is first in, first out.
    ///
    /// * **Priority first.** Of the items queued, those of the highest priority are handed
    ///   out first ([`add_with_priority`](WorkQueue::add_with_priority); [`add`](WorkQueue::add)
    ///   is priority 0). An item added again at a higher priority is raised, never lowered;
    ///   a requeue ([`add_after`](WorkQueue::add_after),
    ///   [`add_rate_limited`](WorkQueue::add_rate_limited)) keeps its priority.
    /// * **Fair across tenants.** Within a priority, the tenants that have items take turns,
    ///   one item each, in the order they came to have items; each tenant's items are first
    ///   in, first out. One namespace with 10,000 items cannot starve another.
    /// * Everything else is as in the first-in-first-out queue: each item once, never two
    ///   workers on one item, delays, rate limiting, shutdown, drain and metrics.
    ///
    /// ```
    /// use informer_workqueue::{LOW_PRIORITY, WorkQueue};
    ///
    /// # #[tokio::main(flavor = "current_thread")] async fn main() {
    /// let queue = WorkQueue::<String>::builder().priority().build();
    /// for key in ["big/a", "big/b", "big/c", "small/x"] {
    ///     queue.add_with_priority(key.to_string(), LOW_PRIORITY); // an initial list
    /// }
    /// queue.add("big/c".to_string()); // a change: raised to 0
    /// let mut order = Vec::new();
    /// while let Ok(Some(key)) =
    ///     tokio::time::timeout(std::time::Duration::ZERO, queue.get()).await
    /// {
    ///     queue.done(&key);
    ///     order.push(key);
    /// }
    /// assert_eq!(order, ["big/c", "big/a", "small/x", "big/b"]);
    /// # }
    /// ```
    pub fn priority(self) -> Self {
        self.priority_by(|item: &T| Cow::Borrowed(namespace_of(item.as_ref())))
    }
}
