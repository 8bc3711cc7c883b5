//! Encoding what the layers keep themselves (read at each scrape) as metric families.

use std::borrow::Borrow;

use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric, MetricEncoder, NoLabelSet};
use prometheus_client::metrics::MetricType;
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;

use crate::Labels;

/// A histogram read from a layer: its sum, count and buckets (upper bound, observations in it,
/// not cumulative; the last bound `+Inf`).
#[derive(Debug)]
pub(crate) struct ConstHistogram {
    pub(crate) sum: f64,
    pub(crate) count: u64,
    pub(crate) buckets: Vec<(f64, u64)>,
}

impl EncodeMetric for ConstHistogram {
    fn encode(&self, mut encoder: MetricEncoder<'_>) -> Result<(), std::fmt::Error> {
        encoder.encode_histogram::<NoLabelSet>(self.sum, self.count, &self.buckets, None)
    }

    fn metric_type(&self) -> MetricType {
        MetricType::Histogram
    }
}

/// One metric over label sets: a gauge or a counter per label set.
pub(crate) fn family(
    encoder: &mut DescriptorEncoder<'_>,
    name: &str,
    help: &str,
    counter: bool,
    values: &[(Labels, f64)],
) -> Result<(), std::fmt::Error> {
    if counter {
        metrics(
            encoder,
            name,
            help,
            values.iter().map(|(l, v)| (l, ConstCounter::new(*v))),
        )
    } else {
        metrics(
            encoder,
            name,
            help,
            values.iter().map(|(l, v)| (l, ConstGauge::new(*v))),
        )
    }
}

/// One metric of any type over label sets (nothing for none).
pub(crate) fn metrics<L: Borrow<Labels>, M: EncodeMetric>(
    encoder: &mut DescriptorEncoder<'_>,
    name: &str,
    help: &str,
    values: impl IntoIterator<Item = (L, M)>,
) -> Result<(), std::fmt::Error> {
    let mut values = values.into_iter().peekable();
    let Some((_, first)) = values.peek() else {
        return Ok(());
    };
    let mut metric = encoder.encode_descriptor(name, help, None, first.metric_type())?;
    for (labels, value) in values {
        value.encode(metric.encode_family(labels.borrow())?)?;
    }
    Ok(())
}
