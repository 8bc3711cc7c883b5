//! What a [`WorkQueue`](crate::WorkQueue) reports: client-go's workqueue metric set
//! (`util/workqueue/metrics.go`), kept by the queue itself under the lock it already holds and
//! read when asked ([`WorkQueue::stats`](crate::WorkQueue::stats)), so that an add, a get and
//! a done cost no atomic operation and no call through a trait object.
//!
//! A [`MetricsProvider`] is told of each queue built with it and reads the queues at each scrape
//! (a registry-backed provider lives with the metrics layer; [`QueueList`] keeps the handles, for
//! tests and quick looks).
//!
//! # Timings
//!
//! A queue with a provider times its items: add to get (`queue_duration`), get to done
//! (`work_duration`). The clock costs about as much as the queue itself, so at high rates the
//! queue times a sample: every item while items come at most one per [`SAMPLE_INTERVAL`], then
//! every second, fourth, … item (up to one in [`MAX_STRIDE`]) while they come faster, back to
//! every item as soon as a worker finds the queue empty. Each timed item is counted with the
//! weight of the untimed ones before it, so a histogram's count is the number of items (up to
//! the last timed one) and its buckets the sample's distribution. A controller's queue, whose
//! items take milliseconds, times every item.

use std::fmt;
use std::sync::{Arc, Weak};
use std::time::Duration;

use parking_lot::Mutex;
use tokio::time::Instant;

/// The upper bounds of the duration histograms' buckets, in seconds (client-go's: 1 µs to 10 s
/// by tens); a last bucket, `+Inf`, holds the rest.
pub const DURATION_BUCKETS: [f64; 8] = [1e-6, 1e-5, 1e-4, 1e-3, 1e-2, 1e-1, 1.0, 10.0];

/// Items closer together than this make the queue time fewer of them (see the module's
/// "Timings").
pub const SAMPLE_INTERVAL: Duration = Duration::from_micros(20);

/// However fast items come, at least one in this many is timed.
pub const MAX_STRIDE: u32 = 4096;

/// A histogram of durations over [`DURATION_BUCKETS`].
#[derive(Debug, Clone, Default, PartialEq)]
pub struct DurationHistogram {
    /// Per bucket (not cumulative), the last one `+Inf`.
    counts: [u64; DURATION_BUCKETS.len() + 1],
    sum: f64,
}

impl DurationHistogram {
    /// Records `weight` observations of `d`.
    pub(crate) fn observe(&mut self, d: Duration, weight: u64) {
        let seconds = d.as_secs_f64();
        let bucket = DURATION_BUCKETS
            .iter()
            .position(|&le| seconds <= le)
            .unwrap_or(DURATION_BUCKETS.len());
        self.counts[bucket] += weight;
        self.sum += seconds * weight as f64;
    }

    /// Observations.
    pub fn count(&self) -> u64 {
        self.counts.iter().sum()
    }

    /// Their sum, in seconds.
    pub fn sum(&self) -> f64 {
        self.sum
    }

    /// Each bucket's upper bound (the last `f64::INFINITY`) and the observations in it (not
    /// cumulative: add them up for Prometheus's `le` buckets).
    pub fn buckets(&self) -> Vec<(f64, u64)> {
        DURATION_BUCKETS
            .iter()
            .copied()
            .chain([f64::INFINITY])
            .zip(self.counts)
            .collect()
    }
}

/// A queue's numbers at one moment (client-go's workqueue metric set).
///
/// | field | client-go metric | meaning |
/// |---|---|---|
/// | `depth` | `workqueue_depth` | items waiting (queued, or to be queued again when done) |
/// | `adds` | `workqueue_adds_total` | adds that queued an item |
/// | `queue_duration` | `workqueue_queue_duration_seconds` | add to get |
/// | `work_duration` | `workqueue_work_duration_seconds` | get to done |
/// | `unfinished_work_seconds` | `workqueue_unfinished_work_seconds` | work in progress, all items |
/// | `longest_running_processor_seconds` | `workqueue_longest_running_processor_seconds` | the oldest item in progress |
/// | `retries` | `workqueue_retries_total` | delayed adds (`add_after`, `add_rate_limited`) |
#[derive(Debug, Clone, Default, PartialEq)]
pub struct QueueStats {
    /// The queue's name.
    pub name: String,
    /// Items waiting.
    pub depth: usize,
    /// Items being processed.
    pub in_flight: usize,
    /// Adds that queued an item.
    pub adds: u64,
    /// Delayed adds.
    pub retries: u64,
    /// Add to get (empty for a queue without a provider: it reads no clock).
    pub queue_duration: DurationHistogram,
    /// Get to done (empty for a queue without a provider).
    pub work_duration: DurationHistogram,
    /// Items actually timed, each standing for itself and the untimed ones before it (equal
    /// to the histograms' count while items come slowly).
    pub timed: u64,
    /// Seconds of work in progress, summed over the items being processed. An item that was
    /// not timed counts from the first read that saw it in progress.
    pub unfinished_work_seconds: f64,
    /// Seconds the longest-running item has been processed (the same lower bound for an item
    /// that was not timed).
    pub longest_running_processor_seconds: f64,
}

/// What a queue's handle reads.
pub(crate) trait Source: Send + Sync {
    fn stats(&self) -> QueueStats;
}

/// A queue, as its provider holds it: read at each scrape, without keeping the queue alive.
#[derive(Clone)]
pub struct QueueHandle {
    name: String,
    source: Weak<dyn Source>,
}

impl fmt::Debug for QueueHandle {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("QueueHandle")
            .field("name", &self.name)
            .field("alive", &(self.source.strong_count() > 0))
            .finish()
    }
}

impl QueueHandle {
    pub(crate) fn new(name: String, source: Weak<dyn Source>) -> Self {
        Self { name, source }
    }

    /// The queue's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The queue's numbers now; `None` once the queue is gone.
    pub fn stats(&self) -> Option<QueueStats> {
        self.source.upgrade().map(|s| s.stats())
    }
}

/// Told of each queue built with it (client-go's `MetricsProvider`, turned around: the queue
/// keeps its numbers, the provider reads them when it is scraped).
pub trait MetricsProvider: Send + Sync {
    /// A queue was built with this provider.
    fn register(&self, queue: QueueHandle);
}

/// A provider that keeps the handles of its queues.
#[derive(Debug, Default)]
pub struct QueueList(Mutex<Vec<QueueHandle>>);

impl QueueList {
    /// An empty list.
    pub fn new() -> Arc<Self> {
        Arc::new(Self::default())
    }

    /// The numbers of each queue still alive.
    pub fn stats(&self) -> Vec<QueueStats> {
        let mut queues = self.0.lock();
        queues.retain(|q| q.source.strong_count() > 0);
        queues.iter().filter_map(QueueHandle::stats).collect()
    }

    /// The numbers of the queue named `name`, if it is alive.
    pub fn get(&self, name: &str) -> Option<QueueStats> {
        self.stats().into_iter().find(|s| s.name == name)
    }
}

impl MetricsProvider for QueueList {
    fn register(&self, queue: QueueHandle) {
        self.0.lock().push(queue);
    }
}

/// When an item was added or started, for a timed item, with the items it stands for.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Stamp {
    pub(crate) at: Instant,
    pub(crate) weight: u32,
}

/// Decides which items are timed (see the module's "Timings").
#[derive(Debug)]
pub(crate) struct Sampler {
    /// Time items at all (a provider was given).
    on: bool,
    stride: u32,
    /// Items to let pass untimed before the next timed one.
    skip: u32,
    /// Items let pass untimed since the last timed one.
    passed: u32,
    last: Option<Instant>,
}

impl Sampler {
    pub(crate) fn new(on: bool) -> Self {
        Self {
            on,
            stride: 1,
            skip: 0,
            passed: 0,
            last: None,
        }
    }

    /// The stamp of a new item, if it is to be timed (reading the clock only then).
    pub(crate) fn sample(&mut self) -> Option<Stamp> {
        if !self.on {
            return None;
        }
        if self.skip > 0 {
            self.skip -= 1;
            self.passed += 1;
            return None;
        }
        let now = Instant::now();
        if let Some(last) = self.last {
            let gap = now.saturating_duration_since(last);
            if gap < SAMPLE_INTERVAL {
                self.stride = (self.stride * 2).min(MAX_STRIDE);
            } else if gap >= SAMPLE_INTERVAL * 4 {
                self.stride = (self.stride / 2).max(1);
            }
        }
        self.last = Some(now);
        self.skip = self.stride - 1;
        let weight = self.passed + 1;
        self.passed = 0;
        Some(Stamp { at: now, weight })
    }

    /// The queue ran empty: items come slowly enough to time each again.
    pub(crate) fn idle(&mut self) {
        self.stride = 1;
        self.skip = 0;
    }
}

/// A queue's counts and histograms, kept under its lock.
#[derive(Debug, Default)]
pub(crate) struct Numbers {
    pub(crate) adds: u64,
    pub(crate) retries: u64,
    pub(crate) timed: u64,
    pub(crate) queue_duration: DurationHistogram,
    pub(crate) work_duration: DurationHistogram,
}
