//! Metrics hooks: what a [`WorkQueue`](crate::WorkQueue) reports, in client-go's workqueue
//! metric set (`util/workqueue/metrics.go`). A [`MetricsProvider`] hands the queue one metric
//! of each kind for its name; a registry-backed provider lives with the metrics layer, and
//! [`CountingMetrics`] keeps plain numbers (for tests and quick looks).

use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};

use parking_lot::Mutex;

/// A counter (client-go's `CounterMetric`).
pub trait CounterMetric: Send + Sync {
    /// Adds one.
    fn inc(&self);
}

/// A gauge that goes up and down by one (client-go's `GaugeMetric`).
pub trait GaugeMetric: Send + Sync {
    /// Adds one.
    fn inc(&self);
    /// Takes one away.
    fn dec(&self);
}

/// A gauge set to a value (client-go's `SettableGaugeMetric`).
pub trait SettableGaugeMetric: Send + Sync {
    /// Sets the value.
    fn set(&self, value: f64);
}

/// A histogram of seconds (client-go's `HistogramMetric`).
pub trait HistogramMetric: Send + Sync {
    /// Records one observation.
    fn observe(&self, value: f64);
}

/// Makes a queue's metrics, by the queue's name (client-go's `MetricsProvider`). Every method
/// defaults to a metric that records nothing: implement the ones you export.
///
/// | method | client-go metric | meaning |
/// |---|---|---|
/// | `depth` | `workqueue_depth` | items waiting (queued, or to be queued again when done) |
/// | `adds` | `workqueue_adds_total` | adds that queued an item |
/// | `latency` | `workqueue_queue_duration_seconds` | seconds from add to get |
/// | `work_duration` | `workqueue_work_duration_seconds` | seconds from get to done |
/// | `unfinished_work_seconds` | `workqueue_unfinished_work_seconds` | seconds of work in progress, all items |
/// | `longest_running_processor_seconds` | `workqueue_longest_running_processor_seconds` | the oldest item in progress |
/// | `retries` | `workqueue_retries_total` | delayed adds (`add_after`, `add_rate_limited`) |
pub trait MetricsProvider: Send + Sync {
    /// Items waiting.
    fn depth(&self, name: &str) -> Arc<dyn GaugeMetric> {
        let _ = name;
        Arc::new(Noop)
    }
    /// Adds that queued an item.
    fn adds(&self, name: &str) -> Arc<dyn CounterMetric> {
        let _ = name;
        Arc::new(Noop)
    }
    /// Seconds from add to get.
    fn latency(&self, name: &str) -> Arc<dyn HistogramMetric> {
        let _ = name;
        Arc::new(Noop)
    }
    /// Seconds from get to done.
    fn work_duration(&self, name: &str) -> Arc<dyn HistogramMetric> {
        let _ = name;
        Arc::new(Noop)
    }
    /// Seconds of work in progress, summed over the items being processed.
    fn unfinished_work_seconds(&self, name: &str) -> Arc<dyn SettableGaugeMetric> {
        let _ = name;
        Arc::new(Noop)
    }
    /// Seconds the longest-running item has been processed.
    fn longest_running_processor_seconds(&self, name: &str) -> Arc<dyn SettableGaugeMetric> {
        let _ = name;
        Arc::new(Noop)
    }
    /// Delayed adds.
    fn retries(&self, name: &str) -> Arc<dyn CounterMetric> {
        let _ = name;
        Arc::new(Noop)
    }
}

/// A metric that records nothing.
#[derive(Debug, Clone, Copy, Default)]
pub struct Noop;

impl CounterMetric for Noop {
    fn inc(&self) {}
}
impl GaugeMetric for Noop {
    fn inc(&self) {}
    fn dec(&self) {}
}
impl SettableGaugeMetric for Noop {
    fn set(&self, _: f64) {}
}
impl HistogramMetric for Noop {
    fn observe(&self, _: f64) {}
}

/// The provider that records nothing (the default).
#[derive(Debug, Clone, Copy, Default)]
pub struct NoMetrics;

impl MetricsProvider for NoMetrics {}

/// A provider keeping plain numbers: counts, the current gauges, and every observation.
#[derive(Debug, Default)]
pub struct CountingMetrics {
    depth: Arc<Level>,
    adds: Arc<Count>,
    retries: Arc<Count>,
    latency: Arc<Observations>,
    work_duration: Arc<Observations>,
    unfinished: Arc<Setting>,
    longest: Arc<Setting>,
}

impl CountingMetrics {
    /// A provider with every number at zero.
    pub fn new() -> Arc<Self> {
        Arc::new(Self::default())
    }
    /// Items waiting now.
    pub fn depth(&self) -> i64 {
        self.depth.0.load(Ordering::Acquire)
    }
    /// Adds that queued an item.
    pub fn adds(&self) -> u64 {
        self.adds.0.load(Ordering::Acquire)
    }
    /// Delayed adds.
    pub fn retries(&self) -> u64 {
        self.retries.0.load(Ordering::Acquire)
    }
    /// Every add-to-get time observed, in seconds.
    pub fn latencies(&self) -> Vec<f64> {
        self.latency.0.lock().clone()
    }
    /// Every get-to-done time observed, in seconds.
    pub fn work_durations(&self) -> Vec<f64> {
        self.work_duration.0.lock().clone()
    }
    /// The last unfinished-work figure, in seconds.
    pub fn unfinished_work_seconds(&self) -> f64 {
        *self.unfinished.0.lock()
    }
    /// The last longest-running figure, in seconds.
    pub fn longest_running_processor_seconds(&self) -> f64 {
        *self.longest.0.lock()
    }
}

#[derive(Debug, Default)]
struct Level(AtomicI64);
#[derive(Debug, Default)]
struct Count(AtomicU64);
#[derive(Debug, Default)]
struct Observations(Mutex<Vec<f64>>);
#[derive(Debug, Default)]
struct Setting(Mutex<f64>);

impl GaugeMetric for Level {
    fn inc(&self) {
        self.0.fetch_add(1, Ordering::AcqRel);
    }
    fn dec(&self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}
impl CounterMetric for Count {
    fn inc(&self) {
        self.0.fetch_add(1, Ordering::AcqRel);
    }
}
impl HistogramMetric for Observations {
    fn observe(&self, value: f64) {
        self.0.lock().push(value);
    }
}
impl SettableGaugeMetric for Setting {
    fn set(&self, value: f64) {
        *self.0.lock() = value;
    }
}

impl MetricsProvider for CountingMetrics {
    fn depth(&self, _: &str) -> Arc<dyn GaugeMetric> {
        self.depth.clone()
    }
    fn adds(&self, _: &str) -> Arc<dyn CounterMetric> {
        self.adds.clone()
    }
    fn latency(&self, _: &str) -> Arc<dyn HistogramMetric> {
        self.latency.clone()
    }
    fn work_duration(&self, _: &str) -> Arc<dyn HistogramMetric> {
        self.work_duration.clone()
    }
    fn unfinished_work_seconds(&self, _: &str) -> Arc<dyn SettableGaugeMetric> {
        self.unfinished.clone()
    }
    fn longest_running_processor_seconds(&self, _: &str) -> Arc<dyn SettableGaugeMetric> {
        self.longest.clone()
    }
    fn retries(&self, _: &str) -> Arc<dyn CounterMetric> {
        self.retries.clone()
    }
}

/// The metrics one queue holds.
pub(crate) struct QueueMetrics {
    pub(crate) depth: Arc<dyn GaugeMetric>,
    pub(crate) adds: Arc<dyn CounterMetric>,
    pub(crate) latency: Arc<dyn HistogramMetric>,
    pub(crate) work_duration: Arc<dyn HistogramMetric>,
    pub(crate) unfinished: Arc<dyn SettableGaugeMetric>,
    pub(crate) longest: Arc<dyn SettableGaugeMetric>,
    pub(crate) retries: Arc<dyn CounterMetric>,
}

impl fmt::Debug for QueueMetrics {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("QueueMetrics").finish_non_exhaustive()
    }
}

impl QueueMetrics {
    pub(crate) fn new(provider: &dyn MetricsProvider, name: &str) -> Self {
        Self {
            depth: provider.depth(name),
            adds: provider.adds(name),
            latency: provider.latency(name),
            work_duration: provider.work_duration(name),
            unfinished: provider.unfinished_work_seconds(name),
            longest: provider.longest_running_processor_seconds(name),
            retries: provider.retries(name),
        }
    }
}
