//! Metrics for the informers stack, in a [prometheus-client] registry, scraped as OpenMetrics
//! text.
//!
//! One [`Metrics`] holds the registry and hands each layer its hook:
//!
//! * **reflectors**: [`reflector_observers`](Metrics::reflector_observers) for
//!   `SharedInformerFactory::with_reflector_observers` (or
//!   [`reflector_observer`](Metrics::reflector_observer) for one informer): lists by reason and
//!   result, list durations, responses by encoding (JSON or protobuf), watches started and
//!   ended (by how), events by type, backoff waits, 429s, and the age of the last
//!   resourceVersion (a stale cache shows here);
//! * **caches and consumers**: [`watch_factory`](Metrics::watch_factory) or
//!   [`watch_informer`](Metrics::watch_informer), read at each scrape from the informers' own
//!   counters (nothing is recorded on their path): objects cached, values per index, refused
//!   deltas, caught panics, whether synced, and per consumer what is buffered, delivered,
//!   coalesced, its lag and its panics;
//! * **work queues**: [`workqueue_provider`](Metrics::workqueue_provider), client-go's
//!   workqueue metric set under client-go's names (`workqueue_depth`, `workqueue_adds_total`, …),
//!   read from the queues' own numbers at each scrape;
//! * **reconcilers**: [`reconcile_observer`](Metrics::reconcile_observer) for
//!   `Controller::observer`: reconciles by result, errors, durations (controller-runtime's
//!   names), and the read-your-own-writes waits (their results and durations);
//! * **sharded controllers**: [`watch_shards`](Metrics::watch_shards) for
//!   `Controller::shard_stats`, read at each scrape: per shard whether it is owned, its terms
//!   (moves in), the keys queued as its terms began, its reconciles and skipped keys; the
//!   replica's moves (started, handed off, lost).
//!
//! With the feature `http`, `Endpoints` serves `/metrics`, `/readyz` and `/livez` (from the
//! factories' health) as an axum router.
//!
//! Without this crate nothing is recorded: the layers' hooks are empty by default. The names,
//! types and labels are listed in `docs/metrics.md`.
//!
//! [prometheus-client]: https://docs.rs/prometheus-client
//!
//! # Example
//!
//! ```
//! use informer_metrics::Metrics;
//! use informer_workqueue::WorkQueue;
//!
//! # #[tokio::main(flavor = "current_thread")] async fn main() {
//! let metrics = Metrics::new();
//! let queue: WorkQueue<String> = WorkQueue::builder()
//!     .name("example")
//!     .metrics(metrics.workqueue_provider())
//!     .build();
//! queue.add("a".to_string());
//! let text = metrics.encode();
//! assert!(text.contains("workqueue_adds_total{name=\"example\"} 1"));
//! assert!(text.ends_with("# EOF\n"));
//! # }
//! ```

mod encode;
#[cfg(feature = "http")]
mod http;
mod informer_stats;
mod reconcile;
mod reflector;
mod shards;
mod workqueue;

use std::sync::Arc;

use informer::SharedIndexInformer;
use informer_factory::SharedInformerFactory;
use informer_reflector::ReflectorObserver;
use informer_runtime::{ReconcileObserver, ShardStatsHandle};
use informer_workqueue::{MetricsProvider, QueueList};
use parking_lot::Mutex;
use prometheus_client::registry::Registry;

#[cfg(feature = "http")]
pub use crate::http::{Endpoints, OPENMETRICS};
/// prometheus-client, the version the registry is of (to register metrics of your own).
pub use prometheus_client;

/// Labels as name–value pairs.
pub(crate) type Labels = Vec<(&'static str, String)>;

/// The registry and the metric families of every layer (see the crate docs). Cheap to clone:
/// clones share the registry.
#[derive(Clone)]
pub struct Metrics {
    inner: Arc<Inner>,
}

struct Inner {
    registry: Mutex<Registry>,
    reflector: Arc<reflector::Families>,
    workqueue: Arc<QueueList>,
    reconcile: Arc<reconcile::Families>,
    informers: Arc<informer_stats::Sources>,
    shards: Arc<shards::Sources>,
}

impl std::fmt::Debug for Metrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Metrics").finish_non_exhaustive()
    }
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

impl Metrics {
    /// A registry with every family of the stack registered (empty until something records).
    pub fn new() -> Self {
        let mut registry = Registry::default();
        let reflector = Arc::new(reflector::Families::register(&mut registry));
        let workqueue = QueueList::new();
        registry.register_collector(Box::new(workqueue::Collector {
            queues: Arc::clone(&workqueue),
        }));
        let reconcile = Arc::new(reconcile::Families::register(&mut registry));
        let informers = Arc::new(informer_stats::Sources::default());
        registry.register_collector(Box::new(informer_stats::Collector {
            sources: Arc::clone(&informers),
            reflector: Arc::clone(&reflector),
        }));
        let shards = Arc::new(shards::Sources::default());
        registry.register_collector(Box::new(shards::Collector {
            sources: Arc::clone(&shards),
        }));
        Self {
            inner: Arc::new(Inner {
                registry: Mutex::new(registry),
                reflector,
                workqueue,
                reconcile,
                informers,
                shards,
            }),
        }
    }

    /// The reflector observer of the informer named `informer`.
    pub fn reflector_observer(&self, informer: &str) -> Arc<dyn ReflectorObserver> {
        Arc::new(reflector::Observer::new(
            Arc::clone(&self.inner.reflector),
            informer,
        ))
    }

    /// A reflector observer per informer name, for
    /// `SharedInformerFactory::with_reflector_observers`.
    pub fn reflector_observers(
        &self,
    ) -> impl Fn(&str) -> Arc<dyn ReflectorObserver> + Send + Sync + 'static {
        let metrics = self.clone();
        move |name| metrics.reflector_observer(name)
    }

    /// Reads every informer of `factory` (those requested later too) at each scrape.
    pub fn watch_factory<S: Send + Sync + 'static>(&self, factory: &SharedInformerFactory<S>) {
        let handle = factory.stats_handle();
        self.inner.informers.add(move || handle.stats());
    }

    /// Reads `informer` at each scrape (while it lives).
    pub fn watch_informer<K: Send + Sync + 'static>(&self, informer: &Arc<SharedIndexInformer<K>>) {
        let informer = Arc::downgrade(informer);
        self.inner.informers.add(move || {
            informer
                .upgrade()
                .map(|i| vec![i.stats()])
                .unwrap_or_default()
        });
    }

    /// The metrics provider of work queues (`WorkQueue::builder().metrics(..)`).
    pub fn workqueue_provider(&self) -> Arc<dyn MetricsProvider> {
        Arc::clone(&self.inner.workqueue) as Arc<dyn MetricsProvider>
    }

    /// The reconcile observer of the controller named `controller`
    /// (`Controller::observer`).
    pub fn reconcile_observer(&self, controller: &str) -> Arc<dyn ReconcileObserver> {
        Arc::new(reconcile::Observer::new(
            Arc::clone(&self.inner.reconcile),
            controller,
        ))
    }

    /// Reads the shard counters of the sharded controller named `controller`
    /// (`Controller::shard_stats`) at each scrape: per shard whether it is owned, its terms
    /// begun, the keys its terms queued as they began, its reconciles and its keys skipped;
    /// the replica's moves (started, handed off, lost) and its unplaced keys.
    pub fn watch_shards(&self, controller: &str, stats: ShardStatsHandle) {
        self.inner.shards.add(controller, stats);
    }

    /// The registry, to register metrics of your own beside these.
    pub fn registry(&self) -> parking_lot::MutexGuard<'_, Registry> {
        self.inner.registry.lock()
    }

    /// Everything, as OpenMetrics text (`Content-Type: application/openmetrics-text;
    /// version=1.0.0; charset=utf-8`), ending in `# EOF`.
    pub fn encode(&self) -> String {
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &self.inner.registry.lock())
            .expect("writing to a String cannot fail");
        text
    }
}
