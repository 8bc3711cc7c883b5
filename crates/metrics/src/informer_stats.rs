//! The caches' and consumers' metrics, read from the informers' own counters at each scrape.

use std::sync::Arc;

use informer::InformerStats;
use parking_lot::Mutex;
use prometheus_client::encoding::DescriptorEncoder;

use crate::Labels;
use crate::encode::{ConstHistogram, family, metrics};
use crate::reflector::Families as ReflectorFamilies;

type Source = Box<dyn Fn() -> Vec<InformerStats> + Send + Sync>;

/// A metric with one sample per informer: name, help, whether a counter, the value.
type Column = (&'static str, &'static str, bool, fn(&InformerStats) -> f64);

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

impl prometheus_client::collector::Collector for Collector {
    fn encode(&self, mut encoder: DescriptorEncoder<'_>) -> Result<(), std::fmt::Error> {
        let stats = self.sources.read();
        let informer = |s: &InformerStats| -> Labels { vec![("informer", s.name.clone())] };
        let per = |f: &dyn Fn(&InformerStats) -> f64| -> Vec<(Labels, f64)> {
            stats.iter().map(|s| (informer(s), f(s))).collect()
        };
        // One sample per informer: name, help, counter (or gauge), value.
        let columns: [Column; 7] = [
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
        for (name, help, counter, value) in columns {
            family(&mut encoder, name, help, counter, &per(&value))?;
        }
        let refused: Vec<(Labels, f64)> = stats
            .iter()
            .flat_map(|s| {
                s.refused_by_reason.iter().map(move |(reason, n)| {
                    let mut labels = informer(s);
                    labels.push(("reason", reason.as_str().to_owned()));
                    (labels, *n as f64)
                })
            })
            .collect();
        family(
            &mut encoder,
            "informer_refused_deltas",
            "Deltas the informer's queue or cache refused, by reason (a key, transform or index function failed; the cache refused; applying panicked)",
            true,
            &refused,
        )?;
        let indexes: Vec<(Labels, f64)> = stats
            .iter()
            .flat_map(|s| {
                s.indexes.iter().map(move |(index, values)| {
                    let mut labels = informer(s);
                    labels.push(("index", index.clone()));
                    (labels, *values as f64)
                })
            })
            .collect();
        family(
            &mut encoder,
            "informer_index_values",
            "Distinct values of each index",
            false,
            &indexes,
        )?;

        // Every consumer with its labels, built once for all the consumer families.
        let consumers: Vec<(Labels, &informer::HandlerRegistration)> = stats
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
        let handlers = |f: &dyn Fn(&informer::HandlerRegistration) -> f64| -> Vec<(Labels, f64)> {
            consumers.iter().map(|(l, h)| (l.clone(), f(h))).collect()
        };
        family(
            &mut encoder,
            "informer_handler_buffered",
            "Notifications buffered for the consumer, not handled yet",
            false,
            &handlers(&|h| h.buffered() as f64),
        )?;
        family(
            &mut encoder,
            "informer_handler_delivered",
            "Notifications the consumer has handled",
            true,
            &handlers(&|h| h.delivered() as f64),
        )?;
        family(
            &mut encoder,
            "informer_handler_coalesced",
            "Notifications taken into per-key coalescing while the consumer was behind its bound",
            true,
            &handlers(&|h| h.coalesced() as f64),
        )?;
        family(
            &mut encoder,
            "informer_handler_overflows",
            "Times the consumer fell behind its buffer's bound",
            true,
            &handlers(&|h| h.overflows() as f64),
        )?;
        family(
            &mut encoder,
            "informer_handler_lag_seconds",
            "Age of the oldest notification waiting for the consumer (0 when caught up)",
            false,
            &handlers(&|h| h.lag().as_secs_f64()),
        )?;
        metrics(
            &mut encoder,
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
            &mut encoder,
            "informer_handler_panics",
            "Panics caught in the consumer's handler",
            true,
            &handlers(&|h| h.panics() as f64),
        )?;

        let ages: Vec<(Labels, f64)> = self
            .reflector
            .last_moved
            .lock()
            .iter()
            .filter_map(|(name, at)| Some((vec![("informer", name.clone())], at.age()?)))
            .collect();
        family(
            &mut encoder,
            "informer_reflector_last_resource_version_age_seconds",
            "Seconds since the informer's last synced resourceVersion moved (bookmarks move it on a quiet collection)",
            false,
            &ages,
        )?;
        Ok(())
    }
}
