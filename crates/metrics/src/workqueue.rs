//! client-go's workqueue metric set, under client-go's names, labelled by queue name.

use std::sync::Arc;

use informer_workqueue::{
    CounterMetric, GaugeMetric, HistogramMetric, MetricsProvider, SettableGaugeMetric,
};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;
use std::sync::atomic::AtomicU64;

use crate::Labels;

fn histogram() -> Histogram {
    // client-go's buckets: 1 µs .. 10 s, by tens.
    Histogram::new(exponential_buckets(1e-6, 10.0, 8))
}

pub(crate) struct Families {
    depth: Family<Labels, Gauge>,
    adds: Family<Labels, Counter>,
    latency: Family<Labels, Histogram, fn() -> Histogram>,
    work_duration: Family<Labels, Histogram, fn() -> Histogram>,
    unfinished: Family<Labels, Gauge<f64, AtomicU64>>,
    longest: Family<Labels, Gauge<f64, AtomicU64>>,
    retries: Family<Labels, Counter>,
}

impl Families {
    pub(crate) fn register(registry: &mut Registry) -> Self {
        let f = Self {
            depth: Family::default(),
            adds: Family::default(),
            latency: Family::new_with_constructor(histogram),
            work_duration: Family::new_with_constructor(histogram),
            unfinished: Family::default(),
            longest: Family::default(),
            retries: Family::default(),
        };
        registry.register(
            "workqueue_depth",
            "Current depth of workqueue",
            f.depth.clone(),
        );
        registry.register(
            "workqueue_adds",
            "Total number of adds handled by workqueue",
            f.adds.clone(),
        );
        registry.register(
            "workqueue_queue_duration_seconds",
            "How long in seconds an item stays in workqueue before being requested",
            f.latency.clone(),
        );
        registry.register(
            "workqueue_work_duration_seconds",
            "How long in seconds processing an item from workqueue takes",
            f.work_duration.clone(),
        );
        registry.register(
            "workqueue_unfinished_work_seconds",
            "How many seconds of work has been done that is in progress and hasn't been observed by work_duration",
            f.unfinished.clone(),
        );
        registry.register(
            "workqueue_longest_running_processor_seconds",
            "How many seconds has the longest running processor for workqueue been running",
            f.longest.clone(),
        );
        registry.register(
            "workqueue_retries",
            "Total number of retries handled by workqueue",
            f.retries.clone(),
        );
        f
    }
}

fn labels(name: &str) -> Labels {
    vec![("name", name.to_owned())]
}

struct CounterOf(Counter);
impl CounterMetric for CounterOf {
    fn inc(&self) {
        self.0.inc();
    }
}

struct GaugeOf(Gauge);
impl GaugeMetric for GaugeOf {
    fn inc(&self) {
        self.0.inc();
    }
    fn dec(&self) {
        self.0.dec();
    }
}

struct SettableOf(Gauge<f64, AtomicU64>);
impl SettableGaugeMetric for SettableOf {
    fn set(&self, value: f64) {
        self.0.set(value);
    }
}

struct HistogramOf(Histogram);
impl HistogramMetric for HistogramOf {
    fn observe(&self, value: f64) {
        self.0.observe(value);
    }
}

impl MetricsProvider for Families {
    fn depth(&self, name: &str) -> Arc<dyn GaugeMetric> {
        Arc::new(GaugeOf(self.depth.get_or_create(&labels(name)).clone()))
    }
    fn adds(&self, name: &str) -> Arc<dyn CounterMetric> {
        Arc::new(CounterOf(self.adds.get_or_create(&labels(name)).clone()))
    }
    fn latency(&self, name: &str) -> Arc<dyn HistogramMetric> {
        Arc::new(HistogramOf(
            self.latency.get_or_create(&labels(name)).clone(),
        ))
    }
    fn work_duration(&self, name: &str) -> Arc<dyn HistogramMetric> {
        Arc::new(HistogramOf(
            self.work_duration.get_or_create(&labels(name)).clone(),
        ))
    }
    fn unfinished_work_seconds(&self, name: &str) -> Arc<dyn SettableGaugeMetric> {
        Arc::new(SettableOf(
            self.unfinished.get_or_create(&labels(name)).clone(),
        ))
    }
    fn longest_running_processor_seconds(&self, name: &str) -> Arc<dyn SettableGaugeMetric> {
        Arc::new(SettableOf(
            self.longest.get_or_create(&labels(name)).clone(),
        ))
    }
    fn retries(&self, name: &str) -> Arc<dyn CounterMetric> {
        Arc::new(CounterOf(self.retries.get_or_create(&labels(name)).clone()))
    }
}
