//! The reflector's metrics, recorded by its observer hooks.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use informer_reflector::{EventType, ListOutcome, ReflectorObserver, WatchEnd};
use parking_lot::Mutex;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

use crate::Labels;

fn histogram() -> Histogram {
    // 1 ms .. ~65 s.
    Histogram::new(exponential_buckets(0.001, 2.0, 17))
}

/// Every reflector's families, labelled by informer.
pub(crate) struct Families {
    lists: Family<Labels, Counter>,
    list_duration: Family<Labels, Histogram, fn() -> Histogram>,
    watches: Family<Labels, Counter>,
    watch_ends: Family<Labels, Counter>,
    events: Family<Labels, Counter>,
    backoff_waits: Family<Labels, Counter>,
    backoff_seconds: Family<Labels, Counter<f64>>,
    throttled: Family<Labels, Counter>,
    /// When each informer's resourceVersion last moved (read by the collector).
    pub(crate) last_moved: Mutex<HashMap<String, Instant>>,
}

impl Families {
    pub(crate) fn register(registry: &mut Registry) -> Self {
        let families = Self {
            lists: Family::default(),
            list_duration: Family::new_with_constructor(histogram),
            watches: Family::default(),
            watch_ends: Family::default(),
            events: Family::default(),
            backoff_waits: Family::default(),
            backoff_seconds: Family::default(),
            throttled: Family::default(),
            last_moved: Mutex::default(),
        };
        registry.register(
            "informer_reflector_lists",
            "Lists (paginated or streaming), by why they ran (initial, expired, too_large, error) and how they ended",
            families.lists.clone(),
        );
        registry.register(
            "informer_reflector_list_duration_seconds",
            "Seconds from a list's first request to its last page or end bookmark",
            families.list_duration.clone(),
        );
        registry.register(
            "informer_reflector_watches",
            "Watch requests answered with a stream",
            families.watches.clone(),
        );
        registry.register(
            "informer_reflector_watch_ends",
            "Watch streams ended, by how (closed, broken, very_short, error)",
            families.watch_ends.clone(),
        );
        registry.register(
            "informer_reflector_events",
            "Watch events received, by type (ADDED, MODIFIED, DELETED, BOOKMARK, ERROR)",
            families.events.clone(),
        );
        registry.register(
            "informer_reflector_backoff_waits",
            "Waits before a retry or the next list-and-watch cycle",
            families.backoff_waits.clone(),
        );
        registry.register(
            "informer_reflector_backoff_seconds",
            "Seconds waited before retries and cycles",
            families.backoff_seconds.clone(),
        );
        registry.register(
            "informer_reflector_throttled",
            "Responses 429 Too Many Requests",
            families.throttled.clone(),
        );
        families
    }
}

/// One informer's reflector observer.
pub(crate) struct Observer {
    families: std::sync::Arc<Families>,
    name: String,
    labels: Labels,
}

impl Observer {
    pub(crate) fn new(families: std::sync::Arc<Families>, informer: &str) -> Self {
        Self {
            families,
            name: informer.to_owned(),
            labels: vec![("informer", informer.to_owned())],
        }
    }

    fn with(&self, key: &'static str, value: &str) -> Labels {
        let mut labels = self.labels.clone();
        labels.push((key, value.to_owned()));
        labels
    }
}

impl ReflectorObserver for Observer {
    fn list(&self, outcome: ListOutcome) {
        let mut labels = self.with("reason", outcome.reason.as_str());
        labels.push((
            "streaming",
            if outcome.streaming { "true" } else { "false" }.to_owned(),
        ));
        labels.push((
            "result",
            if outcome.result.is_ok() {
                "ok"
            } else {
                "error"
            }
            .to_owned(),
        ));
        self.families.lists.get_or_create(&labels).inc();
        self.families
            .list_duration
            .get_or_create(&self.labels)
            .observe(outcome.duration.as_secs_f64());
    }

    fn watch_started(&self) {
        self.families.watches.get_or_create(&self.labels).inc();
    }

    fn watch_ended(&self, end: WatchEnd) {
        self.families
            .watch_ends
            .get_or_create(&self.with("end", end.as_str()))
            .inc();
    }

    fn event(&self, event: EventType) {
        self.families
            .events
            .get_or_create(&self.with("type", event.as_str()))
            .inc();
    }

    fn synced_to(&self, _resource_version: &str) {
        self.families
            .last_moved
            .lock()
            .insert(self.name.clone(), Instant::now());
    }

    fn backoff(&self, delay: Duration) {
        self.families
            .backoff_waits
            .get_or_create(&self.labels)
            .inc();
        self.families
            .backoff_seconds
            .get_or_create(&self.labels)
            .inc_by(delay.as_secs_f64());
    }

    fn throttled(&self) {
        self.families.throttled.get_or_create(&self.labels).inc();
    }
}
