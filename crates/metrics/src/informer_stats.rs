//! The caches' and consumers' metrics, read from the informers' own counters at each scrape.

use std::sync::Arc;

use informer::{HandlerRegistration, InformerStats};
use parking_lot::Mutex;
use prometheus_client::encoding::DescriptorEncoder;

use crate::Labels;
use crate::encode::{ConstHistogram, family, metrics};
use crate::reflector::Families as ReflectorFamilies;

type Source = Box<dyn Fn() -> Vec<InformerStats> + Send + Sync>;

/// A metric with one sample per informer (`T`: its stats) or per consumer (`T`: its
/// registration): name, help, whether a counter, the value.
type Column<T> = (&'static str, &'static str, bool, fn(&T) -> f64);

/// Where the informers' stats come from: factories and single informers.
#[derive(Default)]
pub(crate) struct Sources(Mutex<Vec<Source>>);

impl Sources {
    pub(crate) fn add(&self, source: impl Fn() -> Vec<InformerStats> + Send + Sync + 'static) {
        self.0.lock().push(Box::new(source));
    }

    pub(crate) fn read(&self) -> Vec<InformerStats> {
        self.0.lock().iter().flat_map(|source| source()).collect()
    }
}

/// Encodes the informers' stats at each scrape.
pub(crate) struct Collector {
    pub(crate) sources: Arc<Sources>,
    pub(crate) reflector: Arc<ReflectorFamilies>,
}

impl std::fmt::Debug for Collector {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Collector").finish_non_exhaustive()
    }
}

/// One sample per informer: name, help, counter (or gauge), value.
const INFORMER_COLUMNS: [Column<InformerStats>; 7] = [
    (
        "informer_cache_objects",
        "Objects in the informer's cache",
        false,
        |s| s.objects as f64,
    ),
    (
        "informer_synced",
        "Whether the informer has synced (1) or not (0)",
        false,
        |s| f64::from(u8::from(s.synced)),
    ),
    (
        "informer_caught_panics",
        "Panics caught in the informer's key, index, transform and resource-version functions",
        true,
        |s| s.caught_panics as f64,
    ),
    (
        "informer_queue_depth",
        "Keys (or events) waiting in the informer's queue",
        false,
        |s| s.queue.queued as f64,
    ),
    (
        "informer_queue_adds",
        "Changes written to the informer's queue",
        true,
        |s| s.queue.written as f64,
    ),
    (
        "informer_queue_coalesced",
        "Changes that joined a key already queued (coalesced into its deltas)",
        true,
        |s| s.queue.coalesced as f64,
    ),
    (
        "informer_queue_pops",
        "Entries the informer popped off its queue and processed",
        true,
        |s| s.queue.popped as f64,
    ),
];

/// The consumers' counters and gauges, in the order they are encoded, before
/// `informer_handler_wait_seconds` (its histogram) and `informer_handler_panics`.
const HANDLER_COLUMNS: [Column<HandlerRegistration>; 5] = [
    (
        "informer_handler_buffered",
        "Notifications buffered for the consumer, not handled yet",
        false,
        |h| h.buffered() as f64,
    ),
    (
        "informer_handler_delivered",
        "Notifications the consumer has handled",
        true,
        |h| h.delivered() as f64,
    ),
    (
        "informer_handler_coalesced",
        "Notifications taken into per-key coalescing while the consumer was behind its bound",
        true,
        |h| h.coalesced() as f64,
    ),
    (
        "informer_handler_overflows",
        "Times the consumer fell behind its buffer's bound",
        true,
        |h| h.overflows() as f64,
    ),
    (
        "informer_handler_lag_seconds",
        "Age of the oldest notification waiting for the consumer (0 when caught up)",
        false,
        |h| h.lag().as_secs_f64(),
    ),
];

impl prometheus_client::collector::Collector for Collector {
    fn encode(&self, mut encoder: DescriptorEncoder<'_>) -> Result<(), std::fmt::Error> {
        let stats = self.sources.read();
        encode_informers(&mut encoder, &stats)?;
        encode_refusals_and_indexes(&mut encoder, &stats)?;
        encode_consumers(&mut encoder, &stats)?;
        self.encode_resource_version_ages(&mut encoder)
    }
}

impl Collector {
    /// How long ago each informer's last synced resourceVersion moved.
    fn encode_resource_version_ages(
        &self,
        encoder: &mut DescriptorEncoder<'_>,
    ) -> Result<(), std::fmt::Error> {
        let ages: Vec<(Labels, f64)> = self
            .reflector
            .last_moved
            .lock()
            .iter()
            .filter_map(|(name, at)| Some((vec![("informer", name.clone())], at.age()?)))
            .collect();
        family(
            encoder,
            "informer_reflector_last_resource_version_age_seconds",
            "Seconds since the informer's last synced resourceVersion moved (bookmarks move it on a quiet collection)",
            false,
            &ages,
        )
    }
}

/// The labels of an informer's samples.
fn informer(s: &InformerStats) -> Labels {
    vec![("informer", s.name.clone())]
}

/// The metrics with one sample per informer ([`INFORMER_COLUMNS`]).
fn encode_informers(
    encoder: &mut DescriptorEncoder<'_>,
    stats: &[InformerStats],
) -> Result<(), std::fmt::Error> {
    for (name, help, counter, value) in INFORMER_COLUMNS {
        let samples: Vec<(Labels, f64)> = stats.iter().map(|s| (informer(s), value(s))).collect();
        family(encoder, name, help, counter, &samples)?;
    }
    Ok(())
}

/// One sample per informer and entry of `entries` (a label value and a number), the informer's
/// labels with `label` added.
fn per_entry<'a, E: IntoIterator<Item = (String, f64)>>(
    stats: &'a [InformerStats],
    label: &'static str,
    entries: impl Fn(&'a InformerStats) -> E,
) -> Vec<(Labels, f64)> {
    stats
        .iter()
        .flat_map(|s| {
            entries(s).into_iter().map(move |(value, n)| {
                let mut labels = informer(s);
                labels.push((label, value));
                (labels, n)
            })
        })
        .collect()
}

/// The deltas each informer refused, by reason, and the distinct values of each of its indexes.
fn encode_refusals_and_indexes(
    encoder: &mut DescriptorEncoder<'_>,
    stats: &[InformerStats],
) -> Result<(), std::fmt::Error> {
    let refused = per_entry(stats, "reason", |s| {
        s.refused_by_reason
            .iter()
            .map(|(reason, n)| (reason.as_str().to_owned(), *n as f64))
    });
    family(
        encoder,
        "informer_refused_deltas",
        "Deltas the informer's queue or cache refused, by reason (a key, transform or index function failed; the cache refused; applying panicked)",
        true,
        &refused,
    )?;
    let indexes = per_entry(stats, "index", |s| {
        s.indexes
            .iter()
            .map(|(index, values)| (index.clone(), *values as f64))
    });
    family(
        encoder,
        "informer_index_values",
        "Distinct values of each index",
        false,
        &indexes,
    )
}

/// The metrics of every consumer of every informer.
fn encode_consumers(
    encoder: &mut DescriptorEncoder<'_>,
    stats: &[InformerStats],
) -> Result<(), std::fmt::Error> {
    // Every consumer with its labels, built once for all the consumer families.
    let consumers: Vec<(Labels, &HandlerRegistration)> = stats
        .iter()
        .flat_map(|s| {
            s.handlers.iter().map(move |h| {
                let mut labels = informer(s);
                let handler = h.name().map_or_else(|| h.id().to_string(), str::to_owned);
                labels.push(("handler", handler));
                (labels, h)
            })
        })
        .collect();
    let handlers = |f: &dyn Fn(&HandlerRegistration) -> f64| -> Vec<(Labels, f64)> {
        consumers.iter().map(|(l, h)| (l.clone(), f(h))).collect()
    };
    for (name, help, counter, value) in HANDLER_COLUMNS {
        family(encoder, name, help, counter, &handlers(&value))?;
    }
    metrics(
        encoder,
        "informer_handler_wait_seconds",
        "How long notifications waited in the consumer's buffer, from their write to the consumer taking them",
        consumers.iter().map(|(labels, h)| {
            let lag = h.lag_histogram();
            (
                labels,
                ConstHistogram {
                    sum: lag.sum_seconds,
                    count: lag.count,
                    buckets: lag.buckets,
                },
            )
        }),
    )?;
    family(
        encoder,
        "informer_handler_panics",
        "Panics caught in the consumer's handler",
        true,
        &handlers(&|h| h.panics() as f64),
    )
}
