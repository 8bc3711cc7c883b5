//! W-WQ: the work queue alone (`informer-workqueue`, client-go's `util/workqueue`), two
//! workloads, each on a fresh queue (the default rate limiter, no metrics provider) and
//! [`WORKERS`] tokio tasks on the two-worker runtime of [`w_inf::runtime`](crate::w_inf::runtime):
//!
//! * [`distinct`]: 100,000 distinct keys added from the thread that drives the runtime, then
//!   taken by the workers until the queue is drained (`get` + `done` each; nothing is added
//!   while they run). Timed from the first `add` until `shut_down_with_drain` has returned and
//!   every worker has ended. Figure: time ÷ keys (add + get + done per key).
//! * [`hot`]: 1,000 hot keys re-added 100 times each by an adder task (one round of every key,
//!   then a yield, 100 rounds) while the workers take and finish them, so that most adds find
//!   their key waiting already, or being processed, and coalesce. Timed from the spawn of the
//!   adder and the workers until the adder has finished, the queue is drained and every worker
//!   has ended. Figure: time ÷ adds (100,000).
//!
//! Both run on either queue ([`Order`]): the first-in-first-out one (`WorkQueue::new()`, what
//! `distinct` and `hot` take) or the priority queue, fair across [`TENANTS`] tenants (key `k`
//! is of tenant `k % TENANTS`), every key added at the default priority as in the plain one.
//!
//! Both are shared by the criterion bench (`benches/benches/workqueue.rs`) and the report.

use std::borrow::Cow;
use std::hint::black_box;
use std::sync::{Arc, LazyLock};
use std::time::{Duration, Instant};

use informer_workqueue::{MetricsProvider, WorkQueue};
use tokio::runtime::Runtime;

/// The workers taking keys in both workloads.
pub const WORKERS: usize = 4;

/// The tenants of the priority queue's keys.
pub const TENANTS: u64 = 100;

/// Which queue a workload runs on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Order {
    /// First in, first out: `WorkQueue::new()`.
    Fifo,
    /// By priority, fair across [`TENANTS`] tenants.
    Priority,
}

/// The tenants' names, made once.
static TENANT_NAMES: LazyLock<Vec<String>> =
    LazyLock::new(|| (0..TENANTS).map(|t| format!("ns-{t}")).collect());

/// Key `k`'s tenant.
fn tenant(k: &u64) -> Cow<'_, str> {
    Cow::Borrowed(TENANT_NAMES[(k % TENANTS) as usize].as_str())
}

/// `workers` tasks taking keys until the queue is shut down and empty, with the queue shut
/// down and drained meanwhile; returns the keys they processed, all together.
async fn drain_with_workers(queue: &WorkQueue<u64>, workers: usize) -> u64 {
    let workers: Vec<_> = (0..workers)
        .map(|_| {
            let queue = queue.clone();
            tokio::spawn(async move {
                let mut n = 0u64;
                while let Some(k) = queue.get().await {
                    black_box(k);
                    queue.done(&k);
                    n += 1;
                }
                n
            })
        })
        .collect();
    queue.shut_down_with_drain().await;
    let mut total = 0;
    for w in workers {
        total += w.await.expect("a worker");
    }
    total
}

/// `keys` distinct keys added, then processed by `workers` workers; the time of it all.
///
/// Panics if the workers did not process every key exactly once.
pub fn distinct(rt: &Runtime, keys: u64, workers: usize) -> Duration {
    distinct_with(rt, keys, workers, None)
}

/// A queue in `order`, with `metrics` if given.
fn queue(order: Order, metrics: Option<Arc<dyn MetricsProvider>>) -> WorkQueue<u64> {
    let builder = WorkQueue::builder().name("w-wq");
    let builder = match metrics {
        Some(provider) => builder.metrics(provider),
        None => builder,
    };
    match order {
        Order::Fifo => builder.build(),
        Order::Priority => builder.priority_by(tenant).build(),
    }
}

/// [`distinct`] on a queue reporting to `metrics` (`None`: no metrics).
pub fn distinct_with(
    rt: &Runtime,
    keys: u64,
    workers: usize,
    metrics: Option<Arc<dyn MetricsProvider>>,
) -> Duration {
    distinct_on(rt, Order::Fifo, keys, workers, metrics)
}

/// [`distinct`] on a queue in `order`, reporting to `metrics` (`None`: no metrics).
pub fn distinct_on(
    rt: &Runtime,
    order: Order,
    keys: u64,
    workers: usize,
    metrics: Option<Arc<dyn MetricsProvider>>,
) -> Duration {
    rt.block_on(async {
        let queue = queue(order, metrics);
        let started = Instant::now();
        for k in 0..keys {
            queue.add(k);
        }
        let processed = drain_with_workers(&queue, workers).await;
        let elapsed = started.elapsed();
        assert_eq!(processed, keys, "every key processed once");
        elapsed
    })
}

/// `keys` hot keys re-added `rounds` times each while `workers` workers process them; the
/// time of it all.
///
/// Panics if a key added was never processed after its last add.
pub fn hot(rt: &Runtime, keys: u64, rounds: u64, workers: usize) -> Duration {
    hot_with(rt, keys, rounds, workers, None)
}

/// [`hot`] on a queue reporting to `metrics` (`None`: no metrics).
pub fn hot_with(
    rt: &Runtime,
    keys: u64,
    rounds: u64,
    workers: usize,
    metrics: Option<Arc<dyn MetricsProvider>>,
) -> Duration {
    hot_on(rt, Order::Fifo, keys, rounds, workers, metrics)
}

/// [`hot`] on a queue in `order`, reporting to `metrics` (`None`: no metrics).
pub fn hot_on(
    rt: &Runtime,
    order: Order,
    keys: u64,
    rounds: u64,
    workers: usize,
    metrics: Option<Arc<dyn MetricsProvider>>,
) -> Duration {
    rt.block_on(async {
        let queue = Arc::new(queue(order, metrics));
        let started = Instant::now();
        let adder = tokio::spawn({
            let queue = Arc::clone(&queue);
            async move {
                for _ in 0..rounds {
                    for k in 0..keys {
                        queue.add(k);
                    }
                    tokio::task::yield_now().await;
                }
            }
        });
        let workers: Vec<_> = (0..workers)
            .map(|_| {
                let queue = Arc::clone(&queue);
                tokio::spawn(async move {
                    let mut n = 0u64;
                    while let Some(k) = queue.get().await {
                        black_box(k);
                        queue.done(&k);
                        n += 1;
                    }
                    n
                })
            })
            .collect();
        adder.await.expect("the adder");
        queue.shut_down_with_drain().await;
        let mut processed = 0;
        for w in workers {
            processed += w.await.expect("a worker");
        }
        let elapsed = started.elapsed();
        // Each key's last add is processed (at least once per key), and no add is processed
        // twice.
        assert!(
            (keys.min(keys * rounds)..=keys * rounds).contains(&processed),
            "{processed} keys processed for {keys} keys added {rounds} times"
        );
        elapsed
    })
}
