//! The reflector's backoff: exponential, jittered, capped, and reset after a quiet spell or a
//! healthy watch.

use std::time::Duration;

use tokio::time::Instant;

/// The backoff between failed attempts (client-go's reflector backoff).
///
/// Delays start at `initial` and grow by `factor` per step up to `cap`; each delay `d` is then
/// jittered to a value in `[d, d + jitter·d)`. With the defaults (800 ms, ×2, cap 30 s,
/// jitter 1.0) the nominal delays are 0.8, 1.6, 3.2, 6.4, 12.8, 25.6, 30, 30, … seconds, each
/// stretched by up to 100 %. The sequence starts again from `initial`
///
/// * when more than `reset_after` (2 minutes) has passed since the previous delay was taken, and
/// * when a watch has been healthy: open for at least
///   [`HEALTHY_WATCH`](crate::HEALTHY_WATCH) (the server was back, whatever ended the watch
///   afterwards), so that every outage after a recovery starts again from the short delays.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct BackoffConfig {
    /// The first delay.
    pub initial: Duration,
    /// The growth factor per step (≥ 1).
    pub factor: f64,
    /// The largest nominal delay.
    pub cap: Duration,
    /// The jitter fraction: a delay `d` becomes a value in `[d, d + jitter·d)`. 0 disables it.
    pub jitter: f64,
    /// A quiet spell this long (no delay taken) resets the sequence to `initial`.
    pub reset_after: Duration,
}

impl Default for BackoffConfig {
    fn default() -> Self {
        Self {
            initial: Duration::from_millis(800),
            factor: 2.0,
            cap: Duration::from_secs(30),
            jitter: 1.0,
            reset_after: Duration::from_secs(120),
        }
    }
}

/// The state of one backoff sequence.
#[derive(Debug)]
pub(crate) struct Backoff {
    config: BackoffConfig,
    next: Duration,
    last_step: Option<Instant>,
}

impl Backoff {
    pub(crate) fn new(config: BackoffConfig) -> Self {
        Self {
            config,
            next: config.initial,
            last_step: None,
        }
    }

    /// Starts the sequence again from `initial` (after a healthy watch).
    pub(crate) fn reset(&mut self) {
        self.next = self.config.initial;
        self.last_step = None;
    }

    /// The next delay. `random` is a uniform sample in `[0, 1)`.
    pub(crate) fn step(&mut self, now: Instant, random: f64) -> Duration {
        if let Some(last) = self.last_step
            && now.saturating_duration_since(last) > self.config.reset_after
        {
            self.next = self.config.initial;
        }
        self.last_step = Some(now);
        let nominal = self.next.min(self.config.cap);
        let grown = nominal.as_secs_f64() * self.config.factor.max(1.0);
        self.next = Duration::try_from_secs_f64(grown)
            .unwrap_or(self.config.cap)
            .min(self.config.cap);
        let jitter = self.config.jitter.max(0.0) * random.clamp(0.0, 1.0);
        nominal.mul_f64(1.0 + jitter)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn secs(d: Duration) -> f64 {
        d.as_secs_f64()
    }

    #[test]
    fn doubles_from_800ms_to_the_30s_cap_without_jitter_sample() {
        let mut b = Backoff::new(BackoffConfig::default());
        let t = Instant::now();
        let delays: Vec<f64> = (0..9).map(|_| secs(b.step(t, 0.0))).collect();
        assert_eq!(delays, [0.8, 1.6, 3.2, 6.4, 12.8, 25.6, 30.0, 30.0, 30.0]);
    }

    #[test]
    fn jitter_stretches_each_delay_by_up_to_its_own_length() {
        let mut b = Backoff::new(BackoffConfig::default());
        let t = Instant::now();
        let d = b.step(t, 0.5);
        assert_eq!(d, Duration::from_millis(1200));
        let d = b.step(t, 0.999);
        assert!(
            d >= Duration::from_millis(3196) && d < Duration::from_millis(3200),
            "{d:?}"
        );
    }

    #[test]
    fn resets_after_a_quiet_spell_longer_than_reset_after() {
        let mut b = Backoff::new(BackoffConfig::default());
        let t = Instant::now();
        for _ in 0..5 {
            b.step(t, 0.0);
        }
        // Exactly the reset interval later: not yet.
        let t = t + Duration::from_secs(120);
        assert_eq!(secs(b.step(t, 0.0)), 25.6);
        let t = t + Duration::from_secs(121);
        assert_eq!(secs(b.step(t, 0.0)), 0.8);
        assert_eq!(secs(b.step(t, 0.0)), 1.6);
    }

    #[test]
    fn reset_starts_again_from_the_initial_delay() {
        let mut b = Backoff::new(BackoffConfig::default());
        let t = Instant::now();
        for _ in 0..6 {
            b.step(t, 0.0);
        }
        b.reset();
        assert_eq!(secs(b.step(t, 0.0)), 0.8);
        assert_eq!(secs(b.step(t, 0.0)), 1.6);
    }
}
