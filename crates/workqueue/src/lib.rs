//! An async work queue with client-go's `util/workqueue` semantics: the queue layer of a
//! controller, usable without informers (no dependency on kube).
//!
//! * [`WorkQueue`]: each item at most once waiting and never processed by two workers at once;
//!   an item added while it is processed is processed again after [`done`](WorkQueue::done);
//!   delayed adds ([`add_after`](WorkQueue::add_after)); rate-limited retries
//!   ([`add_rate_limited`](WorkQueue::add_rate_limited), [`forget`](WorkQueue::forget),
//!   [`num_requeues`](WorkQueue::num_requeues)); shutdown, with or without draining.
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

pub mod metrics;
mod queue;
mod rate_limiter;

pub use crate::metrics::{
    DURATION_BUCKETS, DurationHistogram, MAX_STRIDE, MetricsProvider, QueueHandle, QueueList,
    QueueStats, SAMPLE_INTERVAL,
};
pub use crate::queue::{WorkQueue, WorkQueueBuilder};
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
