//! The histogram of a consumer's lag: how long each notification waited in the consumer's
//! buffer, from its write to the moment the consumer took it.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// The upper bounds of the lag histogram's buckets, in seconds (1 µs to 10 s by tens, as
/// client-go's work queue durations); a last bucket, `+Inf`, holds the rest.
pub const LAG_BUCKETS: [f64; 8] = [1e-6, 1e-5, 1e-4, 1e-3, 1e-2, 1e-1, 1.0, 10.0];

/// Written by the consumer as it takes notifications, read by anyone.
#[derive(Debug, Default)]
pub(crate) struct LagRecorder {
    counts: [AtomicU64; LAG_BUCKETS.len() + 1],
    sum_nanos: AtomicU64,
}

impl LagRecorder {
    /// `n` notifications waited `lag` each.
    pub(crate) fn record(&self, lag: Duration, n: u64) {
        let seconds = lag.as_secs_f64();
        let bucket = LAG_BUCKETS
            .iter()
            .position(|&le| seconds <= le)
            .unwrap_or(LAG_BUCKETS.len());
        self.counts[bucket].fetch_add(n, Ordering::Relaxed);
        let nanos = u64::try_from(lag.as_nanos()).unwrap_or(u64::MAX);
        self.sum_nanos
            .fetch_add(nanos.saturating_mul(n), Ordering::Relaxed);
    }

    pub(crate) fn snapshot(&self) -> LagHistogram {
        let counts: Vec<u64> = self
            .counts
            .iter()
            .map(|c| c.load(Ordering::Relaxed))
            .collect();
        LagHistogram {
            count: counts.iter().sum(),
            sum_seconds: Duration::from_nanos(self.sum_nanos.load(Ordering::Relaxed)).as_secs_f64(),
            buckets: LAG_BUCKETS
                .iter()
                .copied()
                .chain([f64::INFINITY])
                .zip(counts)
                .collect(),
        }
    }
}

/// How long a consumer's notifications waited for it, from their write into its buffer to
/// the moment it took them ([`HandlerRegistration::lag_histogram`](crate::HandlerRegistration::lag_histogram)).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct LagHistogram {
    /// Notifications taken.
    pub count: u64,
    /// Their waits added up, in seconds.
    pub sum_seconds: f64,
    /// Each bucket's upper bound in seconds (the last `f64::INFINITY`, after
    /// [`LAG_BUCKETS`]) and the notifications in it (not cumulative).
    pub buckets: Vec<(f64, u64)>,
}
