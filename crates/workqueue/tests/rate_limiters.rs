//! The rate limiters over their whole input range, against simple models: any failure count,
//! any durations (`Duration::MAX` included).

use std::collections::HashMap;
use std::time::Duration;

use informer_workqueue::{ItemExponentialFailureRateLimiter, ItemFastSlowRateLimiter, RateLimiter};
use proptest::prelude::*;

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

proptest! {
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
