//! An async work queue with client-go's `util/workqueue` semantics: the queue layer of a
//! controller, usable without informers (no dependency on kube).
//!
//! * [`WorkQueue`]: each item at most once waiting and never processed by two workers at once;
//!   an item added while it is processed is processed again after [`done`](WorkQueue::done);
//!   delayed adds ([`add_after`](WorkQueue::add_after)); rate-limited retries
//!   ([`add_rate_limited`](WorkQueue::add_rate_limited), [`forget`](WorkQueue::forget),
//!   [`num_requeues`](WorkQueue::num_requeues)); shutdown, with or without draining. First
//!   in, first out by default; or, built with
//!   [`priority`](WorkQueueBuilder::priority), a **priority queue** (controller-runtime's),
//!   fair across namespaces: the highest priority first, and within a priority the namespaces
//!   take turns, so one namespace with 10,000 items cannot starve another.
//! * [`RateLimiter`]s that compose: [`ItemExponentialFailureRateLimiter`],
//!   [`BucketRateLimiter`], [`ItemFastSlowRateLimiter`], [`MaxOfRateLimiter`], and client-go's
//!   default, [`default_controller_rate_limiter`].
//! * client-go's workqueue metric set, kept by the queue and read when asked
//!   ([`WorkQueue::stats`], [`MetricsProvider`]).
//!
//! # Example: workers with retries
//!
//! ```
//! use std::sync::Arc;
//! use std::sync::atomic::{AtomicUsize, Ordering};
//! use informer_workqueue::WorkQueue;
//!
//! # #[tokio::main(flavor = "current_thread", start_paused = true)] async fn main() {
//! let queue = WorkQueue::<String>::new(); // client-go's default rate limiter
//! let attempts = Arc::new(AtomicUsize::new(0));
//! let worker = tokio::spawn({
//!     let (queue, attempts) = (queue.clone(), attempts.clone());
//!     async move {
//!         while let Some(key) = queue.get().await {
//!             // Fails twice, then succeeds.
//!             if attempts.fetch_add(1, Ordering::SeqCst) < 2 {
//!                 queue.add_rate_limited(key.clone()); // retried after 5 ms, then 10 ms
//!             } else {
//!                 queue.forget(&key); // success: its backoff starts over
//!             }
//!             queue.done(&key);
//!         }
//!     }
//! });
//! queue.add("default/web".to_string());
//! while attempts.load(Ordering::SeqCst) < 3 {
//!     tokio::time::sleep(std::time::Duration::from_millis(1)).await;
//! }
//! queue.shut_down_with_drain().await;
//! worker.await.unwrap();
//! assert_eq!(queue.num_requeues(&"default/web".to_string()), 0);
//! # }
//! ```
//!
//! # Example: changes before the initial list, namespaces in turn
//!
//! A controller's queue fills with every key of the initial list at once. In a priority
//! queue those go in at [`LOW_PRIORITY`] and real changes at the default, 0: a change made
//! while a backlog of 100,000 keys drains is the next key handed out, not the 100,001st. Within
//! a priority the namespaces take turns.
//!
//! ```
//! use informer_workqueue::{LOW_PRIORITY, WorkQueue};
//!
//! # #[tokio::main(flavor = "current_thread")] async fn main() {
//! let queue = WorkQueue::<String>::builder().name("pods").priority().build();
//! // The initial list: 1,000 pods in "batch", then 2 in "web".
//! for i in 0..1000 {
//!     queue.add_with_priority(format!("batch/job-{i}"), LOW_PRIORITY);
//! }
//! queue.add_with_priority("web/a".to_string(), LOW_PRIORITY);
//! queue.add_with_priority("web/b".to_string(), LOW_PRIORITY);
//! // A change to a pod whose key is waiting: raised to priority 0.
//! queue.add("batch/job-999".to_string());
//!
//! let mut next = Vec::new();
//! for _ in 0..5 {
//!     let key = queue.get().await.unwrap();
//!     queue.done(&key);
//!     next.push(key);
//! }
//! // The change first; then "batch" and "web" in turn, not 998 "batch" keys before "web".
//! assert_eq!(next, ["batch/job-999", "batch/job-0", "web/a", "batch/job-1", "web/b"]);
//! # }
//! ```

mod builder;
pub mod metrics;
mod order;
mod queue;
mod rate_limiter;
mod state;

pub use crate::builder::WorkQueueBuilder;
pub use crate::metrics::{
    DURATION_BUCKETS, DurationHistogram, MAX_STRIDE, MetricsProvider, QueueHandle, QueueList,
    QueueStats, SAMPLE_INTERVAL,
};
pub use crate::order::{LOW_PRIORITY, namespace_of};
pub use crate::queue::WorkQueue;
pub use crate::rate_limiter::{
    BucketRateLimiter, ItemExponentialFailureRateLimiter, ItemFastSlowRateLimiter,
    MaxOfRateLimiter, RateLimiter, default_controller_rate_limiter,
};

#[cfg(test)]
mod send_sync {
    use super::*;

    const fn assert_send_sync<T: Send + Sync>() {}
    const _: () = assert_send_sync::<WorkQueue<String>>();
}
