//! The rate limiters over their whole input range, against simple models: any failure count,
//! any durations (`Duration::MAX` included).

use std::collections::HashMap;
use std::time::Duration;

use informer_workqueue::{
    BucketRateLimiter, ItemExponentialFailureRateLimiter, ItemFastSlowRateLimiter,
    MaxOfRateLimiter, RateLimiter,
};
use proptest::prelude::*;

use crate::common;
use common::paused_runtime;

/// Any duration, with the edges and small ones more often than uniform seconds would give.
fn duration() -> impl Strategy<Value = Duration> {
    prop_oneof![
        Just(Duration::ZERO),
        Just(Duration::MAX),
        Just(Duration::from_nanos(1)),
        (0u64..10_000_000).prop_map(Duration::from_micros),
        (any::<u64>(), 0u32..1_000_000_000).prop_map(|(s, n)| Duration::new(s, n)),
        any::<u64>().prop_map(Duration::from_nanos),
    ]
}

/// A call on one of three items.
#[derive(Debug, Clone)]
enum Op {
    When(u8),
    Forget(u8),
}

fn ops() -> impl Strategy<Value = Vec<Op>> {
    prop::collection::vec(
        prop_oneof![
            12 => (0u8..3).prop_map(Op::When),
            1 => (0u8..3).prop_map(Op::Forget),
        ],
        1..400,
    )
}

/// The exponential backoff's next delay after `last`: twice it, no more than `max`.
fn double(last: Duration, max: Duration) -> Duration {
    last.checked_mul(2).map_or(max, |d| d.min(max))
}

/// Any rate: every float (NaN, infinities, subnormals, negatives), the edges more often.
fn qps() -> impl Strategy<Value = f64> {
    prop_oneof![
        any::<f64>(),
        Just(0.0),
        Just(f64::NAN),
        Just(f64::INFINITY),
        Just(f64::MAX),
        Just(f64::MIN_POSITIVE),
        Just(f64::from_bits(1)),
        0.0f64..1e4,
    ]
}

/// The bucket's next call: a retry, or the clock moving on.
#[derive(Debug, Clone)]
enum BucketOp {
    When,
    Advance(Duration),
}

fn bucket_ops() -> impl Strategy<Value = Vec<BucketOp>> {
    prop::collection::vec(
        prop_oneof![
            6 => Just(BucketOp::When),
            1 => (0u64..10_000_000).prop_map(|us| BucketOp::Advance(Duration::from_micros(us))),
            1 => (0u64..1 << 40).prop_map(|s| BucketOp::Advance(Duration::from_secs(s))),
        ],
        1..200,
    )
}

/// `x/time/rate`'s bucket, written plainly: a rate of 0 (NaN, negative) lets `burst` through
/// then never; an infinite one never waits; otherwise tokens come at the rate, up to the
/// burst, and a retry owing `d` tokens waits `d / rate` (never past `Duration::MAX`).
struct BucketModel {
    rate: f64,
    burst: f64,
    tokens: f64,
}

impl BucketModel {
    fn new(qps: f64, burst: usize) -> Self {
        let rate = if qps.is_nan() || qps < 0.0 { 0.0 } else { qps };
        let burst = burst.max(1) as f64;
        Self {
            rate,
            burst,
            tokens: burst,
        }
    }

    fn advance(&mut self, by: Duration) {
        if self.rate > 0.0 && self.rate.is_finite() {
            self.tokens = self.burst.min(self.tokens + by.as_secs_f64() * self.rate);
        }
    }

    fn when(&mut self) -> Duration {
        if self.rate == f64::INFINITY {
            return Duration::ZERO;
        }
        self.tokens -= 1.0;
        match self.tokens {
            t if t >= 0.0 => Duration::ZERO,
            _ if self.rate == 0.0 => Duration::MAX,
            t => Duration::try_from_secs_f64(-t / self.rate).unwrap_or(Duration::MAX),
        }
    }
}

proptest! {
    /// Any rate, any burst, any clock steps: the bucket never panics and waits what the model
    /// does (to float rounding), `Duration::MAX` exactly when the model says never; with
    /// the clock still, each retry waits at least as long as the one before.
    #[test]
    fn bucket_follows_the_model(
        qps in qps(),
        burst in prop_oneof![0usize..5, 0usize..1000, Just(usize::MAX)],
        ops in bucket_ops(),
    ) {
        paused_runtime().block_on(async {
            let limiter = BucketRateLimiter::new(qps, burst);
            let mut model = BucketModel::new(qps, burst);
            let mut last = Duration::ZERO;
            for op in ops {
                match op {
                    BucketOp::When => {
                        let (got, want) = (RateLimiter::<()>::when(&limiter, &()), model.when());
                        if want == Duration::MAX || got == Duration::MAX {
                            prop_assert_eq!(got, want);
                        } else {
                            let diff = got.abs_diff(want).as_secs_f64();
                            prop_assert!(diff <= 1e-9 + 1e-9 * want.as_secs_f64(), "got {:?}, the model {:?}", got, want);
                        }
                        prop_assert!(got >= last, "waits {:?} after {:?}, the clock still", got, last);
                        last = got;
                    }
                    BucketOp::Advance(by) => {
                        tokio::time::advance(by).await;
                        model.advance(by);
                        last = Duration::ZERO;
                    }
                }
                RateLimiter::<()>::forget(&limiter, &());
                prop_assert_eq!(RateLimiter::<()>::num_requeues(&limiter, &()), 0);
            }
            Ok(())
        })?;
    }

    /// The longest wait of an exponential backoff and a bucket, any parameters: `when` is the
    /// longer of the two limiters' (twins asked the same), `forget` and `num_requeues` reach
    /// the backoff.
    #[test]
    fn max_of_is_the_longest(
        base in duration(),
        max in duration(),
        qps in qps(),
        burst in 0usize..5,
        ops in ops(),
    ) {
        paused_runtime().block_on(async {
            let limiter: MaxOfRateLimiter<u8> = MaxOfRateLimiter::new(vec![
                Box::new(ItemExponentialFailureRateLimiter::new(base, max)),
                Box::new(BucketRateLimiter::new(qps, burst)),
            ]);
            let backoff = ItemExponentialFailureRateLimiter::new(base, max);
            let bucket = BucketRateLimiter::new(qps, burst);
            for op in ops {
                match op {
                    Op::When(k) => {
                        let want = backoff.when(&k).max(bucket.when(&k));
                        prop_assert_eq!(limiter.when(&k), want);
                    }
                    Op::Forget(k) => {
                        limiter.forget(&k);
                        backoff.forget(&k);
                    }
                }
                for k in 0..3 {
                    prop_assert_eq!(limiter.num_requeues(&k), backoff.num_requeues(&k));
                }
            }
            Ok(())
        })?;
    }

    /// Per item, the delays are `min(base, max)`, then each twice the last up to `max`: never
    /// above `max`, non-decreasing, saturating at `max` (for a non-zero base) after enough
    /// failures; `forget` starts over; `num_requeues` counts the failures.
    #[test]
    fn exponential_follows_the_model(base in duration(), max in duration(), ops in ops()) {
        let limiter = ItemExponentialFailureRateLimiter::new(base, max);
        // Per item: the last delay and the failures.
        let mut model: HashMap<u8, (Duration, usize)> = HashMap::new();
        for op in ops {
            match op {
                Op::When(k) => {
                    let got = limiter.when(&k);
                    let (last, n) = model.entry(k).or_insert((Duration::ZERO, 0));
                    let want = if *n == 0 { base.min(max) } else { double(*last, max) };
                    prop_assert_eq!(got, want, "failure {} of {}", *n, k);
                    prop_assert!(got <= max && got >= *last);
                    (*last, *n) = (got, *n + 1);
                }
                Op::Forget(k) => {
                    limiter.forget(&k);
                    model.remove(&k);
                }
            }
            for k in 0..3 {
                prop_assert_eq!(limiter.num_requeues(&k), model.get(&k).map_or(0, |m| m.1));
            }
        }
    }

    /// Thousands of failures of one item: the delay saturates at `max` (a zero base: zero) and
    /// stays there; nothing panics.
    #[test]
    fn exponential_saturates_after_any_number_of_failures(base in duration(), max in duration()) {
        let limiter = ItemExponentialFailureRateLimiter::new(base, max);
        let mut last = Duration::ZERO;
        for n in 0..5_000u32 {
            let got = limiter.when(&());
            let want = if n == 0 { base.min(max) } else { double(last, max) };
            prop_assert_eq!(got, want, "failure {}", n);
            last = got;
        }
        prop_assert_eq!(last, if base.is_zero() { Duration::ZERO } else { max });
        limiter.forget(&());
        prop_assert_eq!(limiter.num_requeues(&()), 0);
        prop_assert_eq!(limiter.when(&()), base.min(max), "forgotten: from the start");
    }

    /// Per item, `fast` for the first `max_fast` failures and `slow` after, for any durations
    /// and any `max_fast`; `forget` starts over.
    #[test]
    fn fast_slow_follows_the_model(
        fast in duration(),
        slow in duration(),
        max_fast in prop_oneof![0u32..5, Just(u32::MAX), any::<u32>()],
        ops in ops(),
    ) {
        let limiter = ItemFastSlowRateLimiter::new(fast, slow, max_fast);
        let mut failures: HashMap<u8, u32> = HashMap::new();
        for op in ops {
            match op {
                Op::When(k) => {
                    let n = failures.entry(k).or_insert(0);
                    *n += 1;
                    let want = if *n <= max_fast { fast } else { slow };
                    prop_assert_eq!(limiter.when(&k), want);
                }
                Op::Forget(k) => {
                    limiter.forget(&k);
                    failures.remove(&k);
                }
            }
            for k in 0..3 {
                let want = failures.get(&k).map_or(0, |n| *n as usize);
                prop_assert_eq!(limiter.num_requeues(&k), want);
            }
        }
    }
}
