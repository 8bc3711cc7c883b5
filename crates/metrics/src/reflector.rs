//! The reflector's metrics, recorded by its observer hooks.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use informer_reflector::{
    Availability, EventType, ListOutcome, ReflectorObserver, ServerFiltering, WatchEnd,
};
use parking_lot::Mutex;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
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
    responses: Family<Labels, Counter>,
    watches: Family<Labels, Counter>,
    watch_ends: Family<Labels, Counter>,
    events: Family<Labels, Counter>,
    backoff_waits: Family<Labels, Counter>,
    backoff_seconds: Family<Labels, Counter<f64>>,
    throttled: Family<Labels, Counter>,
    not_served: Family<Labels, Gauge>,
    shard_lists: Family<Labels, Counter>,
    /// When each informer's resourceVersion last moved (read by the collector).
    pub(crate) last_moved: Mutex<HashMap<String, Arc<LastMoved>>>,
}

/// [`LastMoved`] before the first move.
const NEVER: u64 = u64::MAX;

/// When an informer's resourceVersion last moved: nanoseconds since `base`, written with one
/// atomic store per event (no lock, no allocation on the reflector's path).
pub(crate) struct LastMoved {
    base: Instant,
    nanos: AtomicU64,
}

impl LastMoved {
    fn now(&self) {
        let nanos = u64::try_from(self.base.elapsed().as_nanos()).unwrap_or(NEVER - 1);
        self.nanos.store(nanos, Ordering::Relaxed);
    }

    /// Seconds since it last moved; `None` if it never has.
    pub(crate) fn age(&self) -> Option<f64> {
        let nanos = self.nanos.load(Ordering::Relaxed);
        (nanos != NEVER).then(|| {
            (self.base + Duration::from_nanos(nanos))
                .elapsed()
                .as_secs_f64()
        })
    }
}

impl Families {
    pub(crate) fn register(registry: &mut Registry) -> Self {
        let families = Self {
            lists: Family::default(),
            list_duration: Family::new_with_constructor(histogram),
            responses: Family::default(),
            watches: Family::default(),
            watch_ends: Family::default(),
            events: Family::default(),
            backoff_waits: Family::default(),
            backoff_seconds: Family::default(),
            throttled: Family::default(),
            not_served: Family::default(),
            shard_lists: Family::default(),
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
            "informer_reflector_responses",
            "List pages and watches read, by the encoding they came in (json, protobuf)",
            families.responses.clone(),
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
        registry.register(
            "informer_reflector_not_served",
            "1 while the server does not serve the informer's resource (its lists are answered 404: a CRD not installed, or deleted)",
            families.not_served.clone(),
        );
        registry.register(
            "informer_reflector_shard_lists",
            "Lists of a sharded informer, by whether the server filtered them by the shard selector (filtered, not_filtered: it sent everything and the client filtered; unknown: a streaming list)",
            families.shard_lists.clone(),
        );
        families
    }
}

/// One informer's reflector observer. The metrics every event or wait touches are looked up
/// once, here; lists, responses and watch ends, a few per minute, find theirs by label set (a
/// response's encoding only once one came in it, so that an informer has no series of an
/// encoding it never read).
pub(crate) struct Observer {
    families: Arc<Families>,
    labels: Labels,
    /// `informer_reflector_events_total`, by [`EventType`] in declaration order.
    events: [Counter; 5],
    watches: Counter,
    backoff_waits: Counter,
    backoff_seconds: Counter<f64>,
    throttled: Counter,
    list_duration: Histogram,
    last_moved: Arc<LastMoved>,
    /// The label sets of the series found by label set (lists, responses, watch ends, shard
    /// lists), by
    /// family, so that [`retired`](ReflectorObserver::retired) can remove them.
    by_label_set: Mutex<Vec<(Kind, Labels)>>,
}

/// A family whose series an observer finds by label set.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Kind {
    Lists,
    Responses,
    WatchEnds,
    ShardLists,
}

const EVENT_TYPES: [EventType; 5] = [
    EventType::Added,
    EventType::Modified,
    EventType::Deleted,
    EventType::Bookmark,
    EventType::Error,
];

impl Observer {
    pub(crate) fn new(families: Arc<Families>, informer: &str) -> Self {
        let labels: Labels = vec![("informer", informer.to_owned())];
        let with = |key: &'static str, value: &str| {
            let mut labels = labels.clone();
            labels.push((key, value.to_owned()));
            labels
        };
        let events = EVENT_TYPES.map(|t| {
            families
                .events
                .get_or_create(&with("type", t.as_str()))
                .clone()
        });
        let last_moved = Arc::clone(
            families
                .last_moved
                .lock()
                .entry(informer.to_owned())
                .or_insert_with(|| {
                    Arc::new(LastMoved {
                        base: Instant::now(),
                        nanos: AtomicU64::new(NEVER),
                    })
                }),
        );
        let watches = families.watches.get_or_create(&labels).clone();
        let backoff_waits = families.backoff_waits.get_or_create(&labels).clone();
        let backoff_seconds = families.backoff_seconds.get_or_create(&labels).clone();
        let throttled = families.throttled.get_or_create(&labels).clone();
        let list_duration = families.list_duration.get_or_create(&labels).clone();
        Self {
            families,
            labels,
            events,
            watches,
            backoff_waits,
            backoff_seconds,
            throttled,
            list_duration,
            last_moved,
            by_label_set: Mutex::default(),
        }
    }

    /// Counts one more in the series of `kind` with `labels`, noting the label set.
    fn count(&self, kind: Kind, labels: Labels) {
        let family = self.family(kind);
        if family.get(&labels).is_none() {
            self.by_label_set.lock().push((kind, labels.clone()));
        }
        family.get_or_create(&labels).inc();
    }

    fn family(&self, kind: Kind) -> &Family<Labels, Counter> {
        match kind {
            Kind::Lists => &self.families.lists,
            Kind::Responses => &self.families.responses,
            Kind::WatchEnds => &self.families.watch_ends,
            Kind::ShardLists => &self.families.shard_lists,
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
        self.count(Kind::Lists, labels);
        self.list_duration.observe(outcome.duration.as_secs_f64());
    }

    fn response(&self, encoding: &'static str) {
        self.count(Kind::Responses, self.with("encoding", encoding));
    }

    fn watch_started(&self) {
        self.watches.inc();
    }

    fn watch_ended(&self, end: WatchEnd) {
        self.count(Kind::WatchEnds, self.with("end", end.as_str()));
    }

    fn event(&self, event: EventType) {
        if let Some(at) = EVENT_TYPES.iter().position(|&t| t == event) {
            self.events[at].inc();
        }
    }

    fn synced_to(&self, _resource_version: &str) {
        self.last_moved.now();
    }

    fn backoff(&self, delay: Duration) {
        self.backoff_waits.inc();
        self.backoff_seconds.inc_by(delay.as_secs_f64());
    }

    fn throttled(&self) {
        self.throttled.inc();
    }

    fn shard_filtering(&self, filtering: ServerFiltering) {
        self.count(Kind::ShardLists, self.with("server", filtering.as_str()));
    }

    fn availability(&self, availability: Availability) {
        let not_served = i64::from(availability == Availability::NotServed);
        self.families
            .not_served
            .get_or_create(&self.labels)
            .set(not_served);
    }

    fn retired(&self) {
        let families = &self.families;
        for t in EVENT_TYPES {
            families.events.remove(&self.with("type", t.as_str()));
        }
        families.watches.remove(&self.labels);
        families.backoff_waits.remove(&self.labels);
        families.backoff_seconds.remove(&self.labels);
        families.throttled.remove(&self.labels);
        families.list_duration.remove(&self.labels);
        families.not_served.remove(&self.labels);
        for (kind, labels) in std::mem::take(&mut *self.by_label_set.lock()) {
            self.family(kind).remove(&labels);
        }
        let informer = &self.labels[0].1;
        let mut last_moved = families.last_moved.lock();
        if last_moved
            .get(informer)
            .is_some_and(|l| Arc::ptr_eq(l, &self.last_moved))
        {
            last_moved.remove(informer);
        }
    }
}
