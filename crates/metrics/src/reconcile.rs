//! The reconciler's metrics (controller-runtime's names).

use std::sync::Arc;

use informer_runtime::{ReconcileObserver, ReconcileOutcome, WritesAwaited};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

use crate::Labels;

fn histogram() -> Histogram {
    // 100 µs .. ~100 s.
    Histogram::new(exponential_buckets(0.0001, 2.0, 21))
}

pub(crate) struct Families {
    reconciles: Family<Labels, Counter>,
    errors: Family<Labels, Counter>,
    duration: Family<Labels, Histogram, fn() -> Histogram>,
    writes_waits: Family<Labels, Counter>,
    writes_wait: Family<Labels, Histogram, fn() -> Histogram>,
}

impl Families {
    pub(crate) fn register(registry: &mut Registry) -> Self {
        let families = Self {
            reconciles: Family::default(),
            errors: Family::default(),
            duration: Family::new_with_constructor(histogram),
            writes_waits: Family::default(),
            writes_wait: Family::new_with_constructor(histogram),
        };
        registry.register(
            "controller_runtime_reconcile",
            "Reconciles, by result (success, requeue_after, error)",
            families.reconciles.clone(),
        );
        registry.register(
            "controller_runtime_reconcile_errors",
            "Reconciles that returned an error",
            families.errors.clone(),
        );
        registry.register(
            "controller_runtime_reconcile_time_seconds",
            "Seconds per reconcile",
            families.duration.clone(),
        );
        registry.register(
            "controller_runtime_read_your_writes_waits",
            "Reconciles that waited for their key's previous writes to reach the caches, by \
             result (caught_up, timed_out: run on a stale read, not_comparable, stopped)",
            families.writes_waits.clone(),
        );
        registry.register(
            "controller_runtime_read_your_writes_wait_seconds",
            "Seconds a reconcile waited for its key's previous writes to reach the caches",
            families.writes_wait.clone(),
        );
        families
    }
}

pub(crate) struct Observer {
    families: Arc<Families>,
    labels: Labels,
    success: Labels,
    requeue: Labels,
    error: Labels,
    /// The read-your-own-writes waits' labels, by result.
    waits: [Labels; 4],
}

impl Observer {
    pub(crate) fn new(families: Arc<Families>, controller: &str) -> Self {
        let labels: Labels = vec![("controller", controller.to_owned())];
        let with = |result: &str| {
            let mut l = labels.clone();
            l.push(("result", result.to_owned()));
            l
        };
        Self {
            waits: ["caught_up", "timed_out", "not_comparable", "stopped"].map(with),
            success: with("success"),
            requeue: with("requeue_after"),
            error: with("error"),
            families,
            labels,
        }
    }
}

impl ReconcileObserver for Observer {
    fn reconciled(&self, outcome: ReconcileOutcome) {
        let result = if !outcome.succeeded {
            self.families.errors.get_or_create(&self.labels).inc();
            &self.error
        } else if outcome.action.requeue_after().is_some() {
            &self.requeue
        } else {
            &self.success
        };
        self.families.reconciles.get_or_create(result).inc();
        self.families
            .duration
            .get_or_create(&self.labels)
            .observe(outcome.duration.as_secs_f64());
    }

    fn writes_awaited(&self, wait: WritesAwaited) {
        // A stale read first: it is what a user must know of; then why a cache was skipped.
        let result = if wait.timed_out {
            1
        } else if wait.not_comparable {
            2
        } else if wait.stopped {
            3
        } else {
            0
        };
        self.families
            .writes_waits
            .get_or_create(&self.waits[result])
            .inc();
        self.families
            .writes_wait
            .get_or_create(&self.labels)
            .observe(wait.waited.as_secs_f64());
    }
}
