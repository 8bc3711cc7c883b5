//! Rate limiters: how long an item waits before it is retried (client-go's
//! `util/workqueue/default_rate_limiters.go`).

use std::collections::HashMap;
use std::fmt;
use std::hash::Hash;
use std::time::Duration;

use parking_lot::Mutex;
use tokio::time::Instant;

/// Decides how long an item waits before it is added again (client-go's `RateLimiter`).
///
/// `when` is asked once per retry and may count it; `forget` says the item succeeded (its
/// failures are cleared); `num_requeues` is how many retries are counted for it.
pub trait RateLimiter<T>: Send + Sync {
    /// How long `item` waits now; counts one more retry where the limiter counts them.
    /// [`Duration::MAX`] means never: [`WorkQueue::add_after`](crate::WorkQueue::add_after)
    /// does not add an item with a delay past the clock's range.
    fn when(&self, item: &T) -> Duration;
    /// Forgets `item`'s retries (it succeeded, or is given up on).
    fn forget(&self, item: &T);
    /// How many retries are counted for `item`.
    fn num_requeues(&self, item: &T) -> usize;
}

impl<T, R: RateLimiter<T> + ?Sized> RateLimiter<T> for Box<R> {
    fn when(&self, item: &T) -> Duration {
        (**self).when(item)
    }
    fn forget(&self, item: &T) {
        (**self).forget(item)
    }
    fn num_requeues(&self, item: &T) -> usize {
        (**self).num_requeues(item)
    }
}

/// Per-item exponential backoff: `base × 2^failures`, capped at `max` (client-go's
/// `ItemExponentialFailureRateLimiter`).
///
/// Any durations and any number of failures are valid: the delay is exact until it passes
/// `max`, then `max` for ever (a zero `base`: zero for ever), with no overflow. `max` may be
/// [`Duration::MAX`], which the queue takes as "never" once the backoff reaches it. The count
/// of an item's failures saturates at `u32::MAX`.
pub struct ItemExponentialFailureRateLimiter<T> {
    base: Duration,
    max: Duration,
    failures: Mutex<HashMap<T, u32>>,
}

impl<T> fmt::Debug for ItemExponentialFailureRateLimiter<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ItemExponentialFailureRateLimiter")
            .field("base", &self.base)
            .field("max", &self.max)
            .finish_non_exhaustive()
    }
}

impl<T> ItemExponentialFailureRateLimiter<T> {
    /// Backoff from `base`, doubling on each failure of an item, never above `max`.
    pub fn new(base: Duration, max: Duration) -> Self {
        Self {
            base,
            max,
            failures: Mutex::new(HashMap::new()),
        }
    }

    /// `base × 2^exp`, or `max` if that is longer: exact for every `exp`, without overflow.
    fn backoff(&self, exp: u32) -> Duration {
        const NANOS_PER_SEC: u128 = 1_000_000_000;
        let base = self.base.as_nanos();
        if base == 0 {
            return Duration::ZERO;
        }
        // `base << exp` fits in a u128 while `exp` is at most its leading zeros.
        if exp > base.leading_zeros() {
            return self.max;
        }
        let nanos = base << exp;
        if nanos >= self.max.as_nanos() {
            return self.max;
        }
        // Below `max`, so its seconds fit in a u64.
        Duration::new(
            (nanos / NANOS_PER_SEC) as u64,
            (nanos % NANOS_PER_SEC) as u32,
        )
    }
}

impl<T: Clone + Eq + Hash + Send + Sync> RateLimiter<T> for ItemExponentialFailureRateLimiter<T> {
    fn when(&self, item: &T) -> Duration {
        let mut failures = self.failures.lock();
        let count = failures.entry(item.clone()).or_insert(0);
        let exp = *count;
        *count = count.saturating_add(1);
        self.backoff(exp)
    }

    fn forget(&self, item: &T) {
        self.failures.lock().remove(item);
    }

    fn num_requeues(&self, item: &T) -> usize {
        self.failures.lock().get(item).map_or(0, |n| *n as usize)
    }
}

/// An overall token bucket: `qps` tokens a second, at most `burst` saved up; each retry takes
/// one and waits until it is there (client-go's `BucketRateLimiter` over `x/time/rate`). It
/// counts no retries per item.
///
/// Any rate is valid, as `x/time/rate` reads it:
///
/// * **Zero** (also a negative rate, and NaN): the `burst` goes through, then every retry
///   waits for ever ([`Duration::MAX`]: the queue never adds it); no token ever comes back.
///   `x/time/rate`'s `Limit(0)` does the same (its "never" is `InfDuration`). NaN is taken as
///   zero rather than refused so that [`new`](Self::new) stays infallible, and zero is the
///   cautious reading of a rate that is not a number.
/// * **Infinite**: no retry ever waits, whatever the burst (`rate.Inf`).
/// * **Finite and positive**, however large or small (subnormal ones too): the wait is exact
///   up to float rounding; one past [`Duration::MAX`] is `Duration::MAX`, that is never.
#[derive(Debug)]
pub struct BucketRateLimiter {
    /// Tokens a second: positive (infinite included), or 0.
    qps: f64,
    burst: f64,
    state: Mutex<Bucket>,
}

#[derive(Debug)]
struct Bucket {
    /// Negative: owed by the retries waiting for their token.
    tokens: f64,
    last: Option<Instant>,
}

impl BucketRateLimiter {
    /// A bucket refilling at `qps` a second, holding at most `burst` (at least 1) tokens; it
    /// starts full. Any `qps` is valid: see the [type's docs](Self) for 0, NaN and infinity.
    pub fn new(qps: f64, burst: usize) -> Self {
        let burst = burst.max(1) as f64;
        Self {
            // NaN and negative rates: 0.
            qps: if qps > 0.0 { qps } else { 0.0 },
            burst,
            state: Mutex::new(Bucket {
                tokens: burst,
                last: None,
            }),
        }
    }
}

impl<T> RateLimiter<T> for BucketRateLimiter {
    fn when(&self, _item: &T) -> Duration {
        if self.qps == f64::INFINITY {
            return Duration::ZERO;
        }
        let now = Instant::now();
        let mut bucket = self.state.lock();
        if let Some(last) = bucket.last {
            // Finite times a finite rate: no NaN (an overflow to infinity fills the bucket).
            let elapsed = now.saturating_duration_since(last).as_secs_f64();
            bucket.tokens = (bucket.tokens + elapsed * self.qps).min(self.burst);
        }
        bucket.last = Some(now);
        bucket.tokens -= 1.0;
        if bucket.tokens >= 0.0 {
            Duration::ZERO
        } else if self.qps == 0.0 {
            Duration::MAX
        } else {
            // Past `Duration::MAX` (infinite for a subnormal rate): never.
            Duration::try_from_secs_f64(-bucket.tokens / self.qps).unwrap_or(Duration::MAX)
        }
    }

    fn forget(&self, _item: &T) {}

    fn num_requeues(&self, _item: &T) -> usize {
        0
    }
}

/// `fast` for an item's first `max_fast_attempts` retries, `slow` after (client-go's
/// `ItemFastSlowRateLimiter`).
pub struct ItemFastSlowRateLimiter<T> {
    fast: Duration,
    slow: Duration,
    max_fast_attempts: u32,
    failures: Mutex<HashMap<T, u32>>,
}

impl<T> fmt::Debug for ItemFastSlowRateLimiter<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ItemFastSlowRateLimiter")
            .field("fast", &self.fast)
            .field("slow", &self.slow)
            .field("max_fast_attempts", &self.max_fast_attempts)
            .finish_non_exhaustive()
    }
}

impl<T> ItemFastSlowRateLimiter<T> {
    /// `fast` for the first `max_fast_attempts` retries of an item, then `slow`.
    pub fn new(fast: Duration, slow: Duration, max_fast_attempts: u32) -> Self {
        Self {
            fast,
            slow,
            max_fast_attempts,
            failures: Mutex::new(HashMap::new()),
        }
    }
}

impl<T: Clone + Eq + Hash + Send + Sync> RateLimiter<T> for ItemFastSlowRateLimiter<T> {
    fn when(&self, item: &T) -> Duration {
        let mut failures = self.failures.lock();
        let count = failures.entry(item.clone()).or_insert(0);
        *count = count.saturating_add(1);
        if *count <= self.max_fast_attempts {
            self.fast
        } else {
            self.slow
        }
    }

    fn forget(&self, item: &T) {
        self.failures.lock().remove(item);
    }

    fn num_requeues(&self, item: &T) -> usize {
        self.failures.lock().get(item).map_or(0, |n| *n as usize)
    }
}

/// The longest wait of several limiters, each asked every time (client-go's
/// `MaxOfRateLimiter`).
pub struct MaxOfRateLimiter<T> {
    limiters: Vec<Box<dyn RateLimiter<T>>>,
}

impl<T> fmt::Debug for MaxOfRateLimiter<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MaxOfRateLimiter")
            .field("limiters", &self.limiters.len())
            .finish()
    }
}

impl<T> MaxOfRateLimiter<T> {
    /// The longest wait of `limiters`.
    pub fn new(limiters: Vec<Box<dyn RateLimiter<T>>>) -> Self {
        Self { limiters }
    }
}

impl<T> RateLimiter<T> for MaxOfRateLimiter<T> {
    fn when(&self, item: &T) -> Duration {
        self.limiters
            .iter()
            .map(|l| l.when(item))
            .max()
            .unwrap_or(Duration::ZERO)
    }

    fn forget(&self, item: &T) {
        for l in &self.limiters {
            l.forget(item);
        }
    }

    fn num_requeues(&self, item: &T) -> usize {
        self.limiters
            .iter()
            .map(|l| l.num_requeues(item))
            .max()
            .unwrap_or(0)
    }
}

/// client-go's `DefaultControllerRateLimiter`: the longer of a per-item exponential backoff
/// (5 ms doubling up to 1,000 s) and an overall bucket of 10 retries a second with a burst of
/// 100.
pub fn default_controller_rate_limiter<T>() -> MaxOfRateLimiter<T>
where
    T: Clone + Eq + Hash + Send + Sync + 'static,
{
    MaxOfRateLimiter::new(vec![
        Box::new(ItemExponentialFailureRateLimiter::new(
            Duration::from_millis(5),
            Duration::from_secs(1000),
        )),
        Box::new(BucketRateLimiter::new(10.0, 100)),
    ])
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    /// client-go's `TestItemExponentialFailureRateLimiter` numbers.
    #[test]
    fn exponential_failure_doubles_per_item_and_caps() {
        let limiter = ItemExponentialFailureRateLimiter::new(ms(1), Duration::from_secs(1));
        let waits: Vec<_> = (0..5).map(|_| limiter.when(&"one")).collect();
        assert_eq!(waits, [ms(1), ms(2), ms(4), ms(8), ms(16)]);
        assert_eq!(limiter.num_requeues(&"one"), 5);
        assert_eq!(limiter.when(&"two"), ms(1), "per item");
        assert_eq!(limiter.when(&"two"), ms(2));
        assert_eq!(limiter.num_requeues(&"two"), 2);
        limiter.forget(&"one");
        assert_eq!(limiter.num_requeues(&"one"), 0);
        assert_eq!(limiter.when(&"one"), ms(1));
        // Capped, and no overflow after many failures.
        for _ in 0..100 {
            limiter.when(&"three");
        }
        assert_eq!(limiter.when(&"three"), Duration::from_secs(1));
    }

    /// Any number of failures: exactly `base × 2^n` until that passes `max`, then `max` for
    /// ever; no early saturation (2^32 ns is 4.3 s, not `max`); a zero base stays zero.
    #[test]
    fn exponential_backoff_is_exact_then_saturates_at_any_count() {
        let ns = Duration::from_nanos;
        let limiter = ItemExponentialFailureRateLimiter::new(ns(1), Duration::MAX);
        let waits: Vec<_> = (0..10_000).map(|_| limiter.when(&"a")).collect();
        assert_eq!(waits[31], ns(1 << 31));
        assert_eq!(waits[32], ns(1 << 32));
        assert_eq!(waits[63], ns(1 << 63));
        // 2^64 ns, past u64 nanoseconds.
        assert_eq!(waits[64], Duration::new(18_446_744_073, 709_551_616));
        // Duration::MAX is about 2^93.9 ns.
        assert_eq!(waits[93].as_nanos(), 1 << 93);
        assert_eq!(waits[94], Duration::MAX, "2^94 ns is past Duration::MAX");
        assert!(waits.windows(2).all(|w| w[0] <= w[1]), "monotone");
        assert!(waits[94..].iter().all(|w| *w == Duration::MAX));
        assert_eq!(limiter.num_requeues(&"a"), 10_000);

        let zero = ItemExponentialFailureRateLimiter::new(Duration::ZERO, Duration::from_secs(1));
        for n in 0..10_000 {
            assert_eq!(zero.when(&"a"), Duration::ZERO, "failure {n}");
        }
        // A base above the cap: the cap from the first failure.
        let above = ItemExponentialFailureRateLimiter::new(ms(10), ms(3));
        assert_eq!(above.when(&"a"), ms(3));
    }

    /// client-go's `TestItemFastSlowRateLimiter`.
    #[test]
    fn fast_then_slow() {
        let limiter = ItemFastSlowRateLimiter::new(ms(5), Duration::from_secs(10), 3);
        let waits: Vec<_> = (0..4).map(|_| limiter.when(&"one")).collect();
        assert_eq!(waits, [ms(5), ms(5), ms(5), Duration::from_secs(10)]);
        assert_eq!(limiter.num_requeues(&"one"), 4);
        limiter.forget(&"one");
        assert_eq!(limiter.when(&"one"), ms(5));
    }

    /// client-go's `TestMaxOfRateLimiter`.
    #[test]
    fn max_of_takes_the_longest_and_asks_every_limiter() {
        let limiter: MaxOfRateLimiter<&str> = MaxOfRateLimiter::new(vec![
            Box::new(ItemFastSlowRateLimiter::new(
                ms(5),
                Duration::from_secs(3),
                3,
            )),
            Box::new(ItemExponentialFailureRateLimiter::new(
                ms(1),
                Duration::from_secs(1),
            )),
        ]);
        let waits: Vec<_> = (0..5).map(|_| limiter.when(&"one")).collect();
        assert_eq!(
            waits,
            [
                ms(5),
                ms(5),
                ms(5),
                Duration::from_secs(3),
                Duration::from_secs(3)
            ]
        );
        assert_eq!(limiter.num_requeues(&"one"), 5);
        limiter.forget(&"one");
        assert_eq!(limiter.num_requeues(&"one"), 0);
    }

    /// The bucket: a burst goes at once, then one token per 1/qps, on tokio's paused clock.
    #[tokio::test(start_paused = true)]
    async fn the_bucket_lets_a_burst_through_then_paces() {
        let limiter = BucketRateLimiter::new(10.0, 100);
        for i in 0..100 {
            assert_eq!(
                RateLimiter::<u32>::when(&limiter, &i),
                Duration::ZERO,
                "burst {i}"
            );
        }
        assert_eq!(RateLimiter::<u32>::when(&limiter, &100), ms(100));
        assert_eq!(RateLimiter::<u32>::when(&limiter, &101), ms(200));
        // A second later, ten tokens are back: the debt of two is paid and eight wait no more.
        tokio::time::advance(Duration::from_secs(1)).await;
        let waits: Vec<_> = (0..9)
            .map(|i| RateLimiter::<u32>::when(&limiter, &i))
            .collect();
        assert_eq!(&waits[..8], &[Duration::ZERO; 8]);
        assert_eq!(waits[8], ms(100));
        assert_eq!(RateLimiter::<u32>::num_requeues(&limiter, &1), 0);
    }

    /// A zero rate (or NaN, or a negative one) lets the burst through, then never again
    /// (`Duration::MAX`), however long one waits: `x/time/rate`'s `Limit(0)`. An infinite rate
    /// never waits (`rate.Inf`); a rate so low that the wait is past `Duration::MAX` is never;
    /// a huge finite one waits (almost) nothing.
    #[tokio::test(start_paused = true)]
    async fn a_bucket_takes_any_rate() {
        for qps in [0.0, -0.0, -1.0, f64::NEG_INFINITY, f64::NAN] {
            let limiter = BucketRateLimiter::new(qps, 3);
            let when = || RateLimiter::<u8>::when(&limiter, &0);
            assert_eq!([when(), when(), when()], [Duration::ZERO; 3], "{qps}");
            assert_eq!(when(), Duration::MAX, "{qps}");
            tokio::time::advance(Duration::from_secs(1_000_000)).await;
            assert_eq!(when(), Duration::MAX, "{qps}: no token comes back");
        }
        let unlimited = BucketRateLimiter::new(f64::INFINITY, 1);
        for _ in 0..1_000 {
            assert_eq!(RateLimiter::<u8>::when(&unlimited, &0), Duration::ZERO);
        }
        tokio::time::advance(ms(1)).await;
        assert_eq!(RateLimiter::<u8>::when(&unlimited, &0), Duration::ZERO);
        for (qps, second) in [
            // 1 / f64::MAX seconds: below a nanosecond.
            (f64::MAX, Duration::ZERO),
            (1e9, Duration::from_nanos(1)),
            (1.0 / 1_048_576.0, Duration::from_secs(1_048_576)),
            // 1e300 s, 1 / subnormal: past Duration::MAX, never.
            (1e-300, Duration::MAX),
            (f64::MIN_POSITIVE, Duration::MAX),
            (f64::from_bits(1), Duration::MAX),
        ] {
            let limiter = BucketRateLimiter::new(qps, 1);
            assert_eq!(
                RateLimiter::<u8>::when(&limiter, &0),
                Duration::ZERO,
                "{qps}"
            );
            assert_eq!(RateLimiter::<u8>::when(&limiter, &0), second, "{qps}");
        }
    }

    /// The default: the per-item backoff first, then the bucket once 100 retries are spent.
    #[tokio::test(start_paused = true)]
    async fn the_default_is_clientgos() {
        let limiter = default_controller_rate_limiter::<String>();
        let one = "one".to_owned();
        assert_eq!(limiter.when(&one), ms(5));
        assert_eq!(limiter.when(&one), ms(10));
        assert_eq!(limiter.when(&one), ms(20));
        assert_eq!(limiter.num_requeues(&one), 3);
        for i in 0..97 {
            assert_eq!(limiter.when(&format!("k{i}")), ms(5));
        }
        // The burst of 100 is spent: a first failure waits for the bucket, not 5 ms.
        assert_eq!(limiter.when(&"late".to_owned()), ms(100));
    }
}
