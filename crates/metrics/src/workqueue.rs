//! client-go's workqueue metric set, under client-go's names, labelled by queue name, read from
//! the queues at each scrape (they keep their own numbers: nothing is recorded on their path).

use std::sync::Arc;

use informer_workqueue::{DurationHistogram, QueueList, QueueStats};
use prometheus_client::encoding::DescriptorEncoder;

use crate::Labels;
use crate::encode::{ConstHistogram, family, metrics};

/// Encodes the queues registered with [`Metrics::workqueue_provider`](crate::Metrics::workqueue_provider).
#[derive(Debug)]
pub(crate) struct Collector {
    pub(crate) queues: Arc<QueueList>,
}

fn histogram(h: &DurationHistogram) -> ConstHistogram {
    ConstHistogram {
        sum: h.sum(),
        count: h.count(),
        buckets: h.buckets(),
    }
}

/// A gauge or counter per queue: name, help, whether a counter, the value.
type Column = (&'static str, &'static str, bool, fn(&QueueStats) -> f64);

impl prometheus_client::collector::Collector for Collector {
    fn encode(&self, mut encoder: DescriptorEncoder<'_>) -> Result<(), std::fmt::Error> {
        let queues: Vec<(Labels, QueueStats)> = self
            .queues
            .stats()
            .into_iter()
            .map(|s| (vec![("name", s.name.clone())], s))
            .collect();
        let columns: [Column; 5] = [
            (
                "workqueue_depth",
                "Current depth of workqueue",
                false,
                |s| s.depth as f64,
            ),
            (
                "workqueue_adds",
                "Total number of adds handled by workqueue",
                true,
                |s| s.adds as f64,
            ),
            (
                "workqueue_unfinished_work_seconds",
                "How many seconds of work has been done that is in progress and hasn't been observed by work_duration",
                false,
                |s| s.unfinished_work_seconds,
            ),
            (
                "workqueue_longest_running_processor_seconds",
                "How many seconds has the longest running processor for workqueue been running",
                false,
                |s| s.longest_running_processor_seconds,
            ),
            (
                "workqueue_retries",
                "Total number of retries handled by workqueue",
                true,
                |s| s.retries as f64,
            ),
        ];
        for (name, help, counter, value) in columns {
            let values: Vec<(Labels, f64)> = queues
                .iter()
                .map(|(labels, s)| (labels.clone(), value(s)))
                .collect();
            family(&mut encoder, name, help, counter, &values)?;
        }
        metrics(
            &mut encoder,
            "workqueue_queue_duration_seconds",
            "How long in seconds an item stays in workqueue before being requested",
            queues
                .iter()
                .map(|(labels, s)| (labels, histogram(&s.queue_duration))),
        )?;
        metrics(
            &mut encoder,
            "workqueue_work_duration_seconds",
            "How long in seconds processing an item from workqueue takes",
            queues
                .iter()
                .map(|(labels, s)| (labels, histogram(&s.work_duration))),
        )
    }
}
