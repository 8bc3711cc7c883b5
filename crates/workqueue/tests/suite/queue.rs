//! The work queue against a model, under concurrent workers, with delays on tokio's paused
//! clock, and its metrics.

use std::borrow::Cow;
use std::collections::{BTreeMap, HashMap, HashSet, VecDeque};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use informer_workqueue::{ItemExponentialFailureRateLimiter, QueueList, WorkQueue};
use proptest::prelude::*;
use proptest::test_runner::TestCaseError;

use crate::common;
use common::paused_runtime;

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

/// client-go's queue, written plainly.
#[derive(Debug, Default)]
struct Model {
    queue: VecDeque<u8>,
    dirty: HashSet<u8>,
    processing: HashSet<u8>,
    /// (deadline in ms, sequence) → item.
    timeline: BTreeMap<(u64, u64), u8>,
    delayed: HashMap<u8, (u64, u64)>,
    seq: u64,
    now: u64,
    shut: bool,
}

impl Model {
    fn add(&mut self, k: u8) {
        if self.shut || !self.dirty.insert(k) {
            return;
        }
        if !self.processing.contains(&k) {
            self.queue.push_back(k);
        }
    }

    fn add_after(&mut self, k: u8, d: u64) {
        if self.shut {
            return;
        }
        if d == 0 {
            return self.add(k);
        }
        let at = self.now + d;
        if let Some(&(old, seq)) = self.delayed.get(&k) {
            if old <= at {
                return;
            }
            self.timeline.remove(&(old, seq));
        }
        self.seq += 1;
        self.timeline.insert((at, self.seq), k);
        self.delayed.insert(k, (at, self.seq));
    }

    fn get(&mut self) -> Option<u8> {
        if !self.shut {
            while let Some((&(at, seq), &k)) = self.timeline.first_key_value() {
                if at > self.now {
                    break;
                }
                self.timeline.remove(&(at, seq));
                self.delayed.remove(&k);
                self.add(k);
            }
        }
        let k = self.queue.pop_front()?;
        self.dirty.remove(&k);
        self.processing.insert(k);
        Some(k)
    }

    fn done(&mut self, k: u8) {
        if self.processing.remove(&k) && self.dirty.contains(&k) {
            self.queue.push_back(k);
        }
    }

    fn shut_down(&mut self) {
        self.shut = true;
        self.timeline.clear();
        self.delayed.clear();
    }
}

#[derive(Debug, Clone)]
enum Op {
    Add(u8),
    AddAfter(u8, u64),
    Get,
    /// Done with the n-th item in progress (modulo how many there are).
    Done(usize),
    Advance(u64),
    ShutDown,
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => (0u8..6).prop_map(Op::Add),
        2 => (0u8..6, 0u64..30).prop_map(|(k, d)| Op::AddAfter(k, d)),
        4 => Just(Op::Get),
        3 => (0usize..4).prop_map(Op::Done),
        2 => (1u64..20).prop_map(Op::Advance),
        1 => Just(Op::ShutDown),
    ]
}

/// Runs `ops` on `queue` and the model side by side: the queue hands out exactly what the
/// model does, in the same order, and its length agrees.
fn follows_the_model(queue: &WorkQueue<u8>, ops: Vec<Op>) -> Result<(), TestCaseError> {
    paused_runtime().block_on(async {
        let mut model = Model::default();
        let mut in_progress: Vec<u8> = Vec::new();
        for op in ops {
            match op {
                Op::Add(k) => {
                    queue.add(k);
                    model.add(k);
                }
                Op::AddAfter(k, d) => {
                    queue.add_after(k, ms(d));
                    model.add_after(k, d);
                }
                Op::Get => {
                    let got = tokio::time::timeout(Duration::ZERO, queue.get()).await;
                    let want = model.get();
                    match (got, want) {
                        (Ok(Some(k)), Some(w)) => {
                            prop_assert_eq!(k, w);
                            prop_assert!(!in_progress.contains(&k), "{} handed out twice", k);
                            in_progress.push(k);
                        }
                        // Nothing ready: pending while open, `None` once shut and empty.
                        (Err(_), None) => prop_assert!(!model.shut),
                        (Ok(None), None) => prop_assert!(model.shut),
                        (got, want) => prop_assert!(false, "got {:?}, the model {:?}", got, want),
                    }
                }
                Op::Done(i) => {
                    if !in_progress.is_empty() {
                        let k = in_progress.remove(i % in_progress.len());
                        queue.done(&k);
                        model.done(k);
                    }
                }
                Op::Advance(d) => {
                    tokio::time::advance(ms(d)).await;
                    model.now += d;
                }
                Op::ShutDown => {
                    queue.shut_down();
                    model.shut_down();
                }
            }
            prop_assert_eq!(queue.len(), model.queue.len());
            prop_assert_eq!(queue.in_flight(), model.processing.len());
        }
        Ok(())
    })
}

proptest! {
    /// Every sequence of adds, delayed adds, gets, dones, clock steps and a shutdown: the
    /// queue hands out exactly what the model does, in the same order, and its length agrees
    /// — so no item is handed to two workers at once, an item added while processed comes
    /// back after done, and nothing is handed out after a shutdown empties it.
    #[test]
    fn the_queue_follows_the_model(ops in prop::collection::vec(op(), 1..120)) {
        follows_the_model(&WorkQueue::new(), ops)?;
    }

    /// The same for a priority queue whose items are all of one tenant and one priority:
    /// first in, first out, with every guarantee of the plain queue.
    #[test]
    fn a_priority_queue_of_one_tenant_follows_the_model(ops in prop::collection::vec(op(), 1..120)) {
        let queue = WorkQueue::builder().priority_by(|_: &u8| Cow::Borrowed("")).build();
        follows_the_model(&queue, ops)?;
    }
}

/// Four workers, keys re-added all the time: never two workers on one key; every key is
/// processed after its last add; nothing is processed once `shut_down_with_drain` returned.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_workers_never_share_a_key_and_miss_no_add() {
    workers_never_share_a_key_and_miss_no_add(WorkQueue::new(), |_| 0).await;
}

/// The same in a priority queue, the keys in three tenants at three priorities.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_workers_of_a_priority_queue_never_share_a_key_and_miss_no_add() {
    const TENANTS: [&str; 3] = ["a", "b", "c"];
    let queue = WorkQueue::builder()
        .priority_by(|k: &usize| Cow::Borrowed(TENANTS[k % 3]))
        .build();
    workers_never_share_a_key_and_miss_no_add(queue, |k| (k % 5) as i32 - 2).await;
}

/// Four workers on `queue`, two adders adding each key `k` at `priority(k)`.
async fn workers_never_share_a_key_and_miss_no_add(
    queue: WorkQueue<usize>,
    priority: fn(usize) -> i32,
) {
    const KEYS: usize = 50;
    let clock = Arc::new(AtomicU64::new(1));
    let busy: Arc<Vec<AtomicBool>> = Arc::new((0..KEYS).map(|_| AtomicBool::new(false)).collect());
    let last_add: Arc<Vec<AtomicU64>> = Arc::new((0..KEYS).map(|_| AtomicU64::new(0)).collect());
    let last_start: Arc<Vec<AtomicU64>> = Arc::new((0..KEYS).map(|_| AtomicU64::new(0)).collect());
    let drained = Arc::new(AtomicBool::new(false));
    let workers: Vec<_> = (0..4)
        .map(|_| {
            let (queue, clock, busy, last_start, drained) = (
                queue.clone(),
                clock.clone(),
                busy.clone(),
                last_start.clone(),
                drained.clone(),
            );
            tokio::spawn(async move {
                while let Some(k) = queue.get().await {
                    assert!(!drained.load(Ordering::SeqCst), "processed after the drain");
                    assert!(!busy[k].swap(true, Ordering::SeqCst), "two workers on {k}");
                    last_start[k].store(clock.fetch_add(1, Ordering::SeqCst), Ordering::SeqCst);
                    tokio::task::yield_now().await;
                    busy[k].store(false, Ordering::SeqCst);
                    queue.done(&k);
                }
            })
        })
        .collect();
    let adders: Vec<_> = (0..2)
        .map(|a| {
            let (queue, clock, last_add) = (queue.clone(), clock.clone(), last_add.clone());
            tokio::spawn(async move {
                for i in 0..5_000 {
                    let k = (i * 7 + a * 13) % KEYS;
                    // The add's time is taken before the add: a processing that starts after
                    // the add has a later time.
                    last_add[k].fetch_max(clock.fetch_add(1, Ordering::SeqCst), Ordering::SeqCst);
                    queue.add_with_priority(k, priority(k));
                    if i % 64 == 0 {
                        tokio::task::yield_now().await;
                    }
                }
            })
        })
        .collect();
    for a in adders {
        a.await.unwrap();
    }
    tokio::time::timeout(Duration::from_secs(30), queue.shut_down_with_drain())
        .await
        .expect("the workers drain the queue");
    drained.store(true, Ordering::SeqCst);
    for w in workers {
        w.await.unwrap();
    }
    for k in 0..KEYS {
        let (added, started) = (
            last_add[k].load(Ordering::SeqCst),
            last_start[k].load(Ordering::SeqCst),
        );
        assert!(
            started > added,
            "key {k}: last add at {added}, last processed at {started}"
        );
    }
    assert_eq!(queue.len(), 0);
    assert!(queue.get().await.is_none());
}

/// Rate-limited retries come back after 5, 10, 20 ms (client-go's default backoff), and a
/// `forget` starts the backoff over.
#[tokio::test(start_paused = true)]
async fn rate_limited_retries_back_off_per_item() {
    let queue = WorkQueue::<&str>::new();
    let begun = tokio::time::Instant::now();
    let mut seen = Vec::new();
    queue.add("a");
    for _ in 0..4 {
        let k = queue.get().await.unwrap();
        seen.push(begun.elapsed());
        queue.add_rate_limited(k);
        queue.done(&k);
    }
    assert_eq!(seen, [ms(0), ms(5), ms(15), ms(35)]);
    assert_eq!(queue.num_requeues(&"a"), 4);
    queue.forget(&"a");
    assert_eq!(queue.num_requeues(&"a"), 0);
    let k = queue.get().await.unwrap();
    let at = begun.elapsed();
    queue.add_rate_limited(k);
    queue.done(&k);
    queue.get().await.unwrap();
    assert_eq!(begun.elapsed() - at, ms(5), "forgotten: 5 ms again");
}

/// A delayed item keeps the earlier of two deadlines; a later `add_after` does not postpone
/// it; a plain `add` does not wait for it.
#[tokio::test(start_paused = true)]
async fn add_after_keeps_the_earlier_deadline() {
    let queue = WorkQueue::<&str>::builder()
        .rate_limiter(ItemExponentialFailureRateLimiter::new(ms(1), ms(100)))
        .build();
    let begun = tokio::time::Instant::now();
    queue.add_after("a", ms(50));
    queue.add_after("a", ms(20));
    queue.add_after("a", ms(80));
    assert_eq!(queue.get().await, Some("a"));
    assert_eq!(begun.elapsed(), ms(20));
    queue.done(&"a");
    queue.add_after("b", ms(30));
    queue.add("c");
    assert_eq!(queue.get().await, Some("c"), "not behind the delayed one");
    assert_eq!(queue.get().await, Some("b"));
    assert_eq!(begun.elapsed(), ms(50));
}

/// The longest delay the clock can add to `now` (Linux's clock reaches about 292 billion
/// years; other platforms' less).
fn clock_range(now: tokio::time::Instant) -> Duration {
    let (mut lo, mut hi) = (0u128, Duration::MAX.as_nanos());
    let nanos = |n: u128| Duration::new((n / 1_000_000_000) as u64, (n % 1_000_000_000) as u32);
    while lo < hi {
        let mid = lo + (hi - lo).div_ceil(2);
        if now.checked_add(nanos(mid)).is_some() {
            lo = mid;
        } else {
            hi = mid - 1;
        }
    }
    nanos(lo)
}

/// Any delay is valid: one past the clock's range means never. The item is not added by
/// that call, an earlier deadline of the same item stands, nothing panics (neither the add
/// nor a worker's wait), and the queue goes on working.
#[tokio::test(start_paused = true)]
async fn a_delay_past_the_clock_is_never() {
    let queue = WorkQueue::<&str>::new();
    let begun = tokio::time::Instant::now();
    let range = clock_range(begun);
    assert!(range < Duration::MAX, "the clock ends before Duration::MAX");
    queue.add_after("never", Duration::MAX);
    queue.add_after("never", range + Duration::from_nanos(1));
    queue.add_after("soon", ms(10));
    queue.add_after("soon", Duration::MAX);
    assert_eq!(queue.len(), 0);
    assert_eq!(
        queue.get().await,
        Some("soon"),
        "the earlier deadline stands"
    );
    assert_eq!(begun.elapsed(), ms(10));
    queue.done(&"soon");
    // A worker waits for the far deadlines without panicking; the paused clock jumps an hour.
    let waited = tokio::time::timeout(Duration::from_secs(3600), queue.get()).await;
    assert!(waited.is_err(), "nothing due: got {waited:?}");
    queue.add("now");
    assert_eq!(queue.get().await, Some("now"));
    queue.done(&"now");
    queue.add_rate_limited("retried");
    queue.shut_down();
    // At the clock's very end and just inside it, each alone in a queue a worker waits on
    // (its sleep is for that deadline): far past anything a test can wait for.
    let fars: [fn(Duration) -> Duration; 7] = [
        |range| range,
        |range| range - Duration::from_nanos(1),
        |range| range - ms(1),
        |range| range - Duration::from_secs(1),
        |range| range - Duration::from_secs(2),
        |range| range / 2,
        |_| Duration::from_secs(100 * 365 * 86_400),
    ];
    for far in fars {
        // The paused clock has moved on: the range is shorter now.
        let delay = far(clock_range(tokio::time::Instant::now()));
        let queue = WorkQueue::<&str>::new();
        queue.add_after("far", delay);
        let waited = tokio::time::timeout(Duration::from_secs(3600), queue.get()).await;
        assert!(waited.is_err(), "{delay:?}: got {waited:?}");
    }
    // A far delay the clock can reach (three years: past the timer's range) comes, on time.
    let queue = WorkQueue::<&str>::new();
    let years = Duration::from_secs(3 * 365 * 86_400);
    let begun = tokio::time::Instant::now();
    queue.add_after("years", years);
    let got = tokio::time::timeout(years * 2, queue.get()).await;
    assert_eq!(got, Ok(Some("years")));
    assert_eq!(begun.elapsed(), years);
}

/// A delay for [`add_after_takes_any_delay`].
#[derive(Debug, Clone)]
enum Delay {
    Fixed(Duration),
    /// This many nanoseconds before the end of the clock's range (negative: past it).
    BeforeTheEnd(i64),
}

fn delay() -> impl Strategy<Value = Delay> {
    prop_oneof![
        3 => (0u64..5_000_000).prop_map(|us| Delay::Fixed(Duration::from_micros(us))),
        2 => (any::<u64>(), 0u32..1_000_000_000).prop_map(|(s, n)| Delay::Fixed(Duration::new(s, n))),
        1 => Just(Delay::Fixed(Duration::MAX)),
        1 => Just(Delay::Fixed(Duration::ZERO)),
        2 => any::<i64>().prop_map(Delay::BeforeTheEnd),
        2 => (-5_000_000_000i64..5_000_000_000).prop_map(Delay::BeforeTheEnd),
    ]
}

proptest! {
    /// `add_after` with any delays, down to the nanosecond around the end of the clock's
    /// range: no panic; the items delayed up to 5 s come when due, in order; the others
    /// within the next ten seconds never.
    #[test]
    fn add_after_takes_any_delay(delays in prop::collection::vec(delay(), 1..8)) {
        paused_runtime().block_on(async {
            let queue = WorkQueue::<usize>::new();
            let begun = tokio::time::Instant::now();
            let range = clock_range(begun);
            let mut due = Vec::new();
            for (item, d) in delays.iter().enumerate() {
                let d = match *d {
                    Delay::Fixed(d) => d,
                    Delay::BeforeTheEnd(n) if n >= 0 => range.saturating_sub(Duration::from_nanos(n.unsigned_abs())),
                    Delay::BeforeTheEnd(n) => range.saturating_add(Duration::from_nanos(n.unsigned_abs())),
                };
                queue.add_after(item, d);
                if d <= Duration::from_secs(5) {
                    due.push((d, item));
                }
            }
            due.sort();
            let mut came = Vec::new();
            while let Ok(item) = tokio::time::timeout(Duration::from_secs(10), queue.get()).await {
                let item = item.expect("not shut down");
                came.push((begun.elapsed(), item));
                queue.done(&item);
            }
            prop_assert_eq!(came.len(), due.len(), "came {:?}, due {:?}", came, due);
            for ((at, item), (d, want)) in came.iter().zip(&due) {
                prop_assert_eq!(item, want);
                // The timer rounds up to the millisecond.
                prop_assert!(*d <= *at && *at <= *d + ms(1), "{} due at {:?} came at {:?}", item, d, at);
            }
            Ok(())
        })?;
    }
}

/// A rate limiter whose delay saturates at `Duration::MAX` (an exponential backoff with no
/// real cap) after many failures: the retries are never added, and the queue neither panics
/// nor stops working.
#[tokio::test(start_paused = true)]
async fn a_backoff_without_a_cap_never_panics_the_queue() {
    let queue = WorkQueue::<&str>::builder()
        .rate_limiter(ItemExponentialFailureRateLimiter::new(ms(5), Duration::MAX))
        .build();
    for _ in 0..200 {
        queue.add_rate_limited("a");
    }
    assert_eq!(queue.num_requeues(&"a"), 200);
    assert_eq!(queue.get().await, Some("a"), "the first retry, after 5 ms");
    queue.done(&"a");
    queue.add("b");
    assert_eq!(queue.get().await, Some("b"));
}

/// A shut-down queue ignores adds and drops delayed items, hands out what was queued, then
/// `None`.
#[tokio::test(start_paused = true)]
async fn shutdown_ignores_adds_and_hands_out_the_rest() {
    let queue = WorkQueue::<u32>::new();
    queue.add(1);
    queue.add(2);
    queue.add_after(3, ms(10));
    queue.shut_down();
    queue.add(4);
    queue.add_after(5, ms(1));
    assert!(queue.is_shutting_down());
    assert_eq!(queue.get().await, Some(1));
    assert_eq!(queue.get().await, Some(2));
    tokio::time::advance(ms(20)).await;
    assert_eq!(queue.get().await, None);
}

/// A `shut_down` while `shut_down_with_drain` waits for an item in flight releases the drain
/// (client-go's `ShutDown`): it returns at once, the item still in flight; the queue then
/// behaves as after `shut_down` (what is queued is still handed out). The paused clock jumps
/// the hour bound at once if the drain does not return.
#[tokio::test(start_paused = true)]
async fn shut_down_releases_a_drain() {
    let queue = WorkQueue::<u32>::new();
    queue.add(1);
    let one = queue.get().await.unwrap();
    queue.add(2);
    let drain = tokio::spawn({
        let queue = queue.clone();
        async move { queue.shut_down_with_drain().await }
    });
    // The drain has begun: it waits for 1 (in flight) and 2 (queued).
    while !queue.is_shutting_down() {
        tokio::task::yield_now().await;
    }
    let waited = tokio::time::timeout(ms(10), queue.clone().shut_down_with_drain()).await;
    assert!(waited.is_err(), "the drain waits while 1 is in flight");
    queue.shut_down();
    tokio::time::timeout(Duration::from_secs(3600), drain)
        .await
        .expect("shut_down released the drain")
        .unwrap();
    assert_eq!(queue.in_flight(), 1, "1 is still in flight");
    assert_eq!(
        queue.get().await,
        Some(2),
        "not drained: the queued item is handed out"
    );
    queue.done(&one);
    queue.done(&2);
    assert_eq!(queue.get().await, None);
}

/// The same across threads: a worker holds an item until told; a drain waits for it on
/// another thread; a `shut_down` from a third releases the drain while the item is still
/// held. Waits on conditions only (the bounds are generous, for a loaded machine).
#[tokio::test(flavor = "multi_thread", worker_threads = 3)]
async fn shut_down_releases_a_drain_across_threads() {
    let queue = WorkQueue::<u32>::new();
    let (got, mut got_rx) = tokio::sync::mpsc::channel(1);
    let (finish, finish_rx) = tokio::sync::oneshot::channel::<()>();
    let worker = tokio::spawn({
        let queue = queue.clone();
        async move {
            let k = queue.get().await.unwrap();
            got.send(k).await.unwrap();
            finish_rx.await.unwrap();
            queue.done(&k);
        }
    });
    queue.add(1);
    assert_eq!(got_rx.recv().await, Some(1), "the worker holds 1");
    let drain = tokio::spawn({
        let queue = queue.clone();
        async move { queue.shut_down_with_drain().await }
    });
    while !queue.is_shutting_down() {
        tokio::task::yield_now().await;
    }
    tokio::spawn({
        let queue = queue.clone();
        async move { queue.shut_down() }
    })
    .await
    .unwrap();
    tokio::time::timeout(Duration::from_secs(30), drain)
        .await
        .expect("shut_down released the drain")
        .unwrap();
    assert_eq!(queue.in_flight(), 1, "released while 1 is still held");
    finish.send(()).unwrap();
    worker.await.unwrap();
    assert_eq!(queue.in_flight(), 0);
}

/// `shut_down` before `shut_down_with_drain` does not stop the drain from waiting (as in
/// client-go, the drain starts afterwards); it returns once the items are done.
#[tokio::test(start_paused = true)]
async fn a_drain_after_shut_down_still_waits() {
    let queue = WorkQueue::<u32>::new();
    queue.add(1);
    let one = queue.get().await.unwrap();
    queue.shut_down();
    let drain = tokio::spawn({
        let queue = queue.clone();
        async move { queue.shut_down_with_drain().await }
    });
    let waited = tokio::time::timeout(
        Duration::from_secs(3600),
        queue.clone().shut_down_with_drain(),
    )
    .await;
    assert!(waited.is_err(), "the drain waits while 1 is in flight");
    assert!(!drain.is_finished());
    queue.done(&one);
    tokio::time::timeout(Duration::from_secs(3600), drain)
        .await
        .expect("the drain returns once 1 is done")
        .unwrap();
    assert_eq!(queue.get().await, None);
}

/// A worker blocked in `get` wakes for an item delayed after it started waiting.
#[tokio::test(start_paused = true)]
async fn a_waiting_worker_wakes_for_a_new_delay() {
    let queue = WorkQueue::<u32>::new();
    let worker = tokio::spawn({
        let queue = queue.clone();
        async move { queue.get().await }
    });
    tokio::task::yield_now().await;
    queue.add_after(7, ms(15));
    assert_eq!(worker.await.unwrap(), Some(7));
}

/// The metric set moves as client-go's does.
#[tokio::test(start_paused = true)]
async fn metrics_follow_the_queue() {
    let metrics = QueueList::new();
    let queue = WorkQueue::<u32>::builder()
        .name("test")
        .metrics(metrics.clone())
        .build();
    let stats = || metrics.get("test").expect("the queue is registered");
    queue.add(1);
    queue.add(1); // already waiting: not an add
    queue.add(2);
    assert_eq!((stats().adds, stats().depth), (2, 2));
    tokio::time::advance(ms(30)).await;
    let k = queue.get().await.unwrap();
    assert_eq!(stats().depth, 1);
    let latency = stats().queue_duration;
    assert_eq!((latency.count(), latency.sum()), (1, 0.03));
    // 30 ms: in the bucket up to 100 ms.
    assert_eq!(latency.buckets()[5], (0.1, 1));
    tokio::time::advance(ms(700)).await;
    assert!((stats().longest_running_processor_seconds - 0.7).abs() < 1e-9);
    assert!((stats().unfinished_work_seconds - 0.7).abs() < 1e-9);
    queue.done(&k);
    let work = stats().work_duration;
    assert_eq!((work.count(), work.sum()), (1, 0.7));
    assert_eq!(stats().timed, 1);
    assert_eq!(stats().longest_running_processor_seconds, 0.0);
    queue.add_rate_limited(3);
    assert_eq!(stats().retries, 1);
    assert_eq!(queue.get().await, Some(2));
    drop(queue);
    assert!(
        metrics.stats().is_empty(),
        "a dropped queue is no longer read"
    );
}

/// Items added faster than the sampling interval are timed in a sample, each timed item
/// standing for the untimed ones before it: the histograms still count every item up to the
/// last timed one, and the queue times every item again once it has run empty.
#[tokio::test(start_paused = true)]
async fn fast_items_are_timed_in_a_sample_that_counts_them_all() {
    let metrics = QueueList::new();
    let queue = WorkQueue::<u32>::builder()
        .name("fast")
        .metrics(metrics.clone())
        .build();
    // The paused clock does not move between adds: as fast as items can come.
    for k in 0..10_000 {
        queue.add(k);
    }
    let mut taken = 0;
    while taken < 10_000 {
        let k = queue.get().await.unwrap();
        queue.done(&k);
        taken += 1;
    }
    let stats = metrics.get("fast").unwrap();
    let (latency, work) = (stats.queue_duration.count(), stats.work_duration.count());
    assert_eq!(latency, work, "a timed item is timed from add to done");
    assert!(
        stats.timed < 200,
        "{} of 10,000 items timed: the clock was read for each",
        stats.timed
    );
    assert!(
        latency <= 10_000 && latency > 10_000 - u64::from(informer_workqueue::MAX_STRIDE),
        "{latency} of 10,000 items counted"
    );
    // Run empty, the queue times each item again: one add, one item counted.
    let worker = tokio::spawn({
        let queue = queue.clone();
        async move {
            let k = queue.get().await.unwrap();
            queue.done(&k);
        }
    });
    tokio::task::yield_now().await;
    tokio::time::advance(ms(1)).await;
    queue.add(1);
    worker.await.unwrap();
    let after = metrics.get("fast").unwrap().work_duration.count();
    assert_eq!(
        after, 10_001,
        "the item after the idle worker carries the untimed ones before it"
    );
    queue.add(2);
    let k = queue.get().await.unwrap();
    queue.done(&k);
    // The worker found the queue empty before item 2 too: timed on its own.
    assert_eq!(metrics.get("fast").unwrap().work_duration.count(), 10_002);
}

/// An item that was not timed (no provider) still shows in the unfinished-work figures, from
/// the first read that sees it in progress.
#[tokio::test(start_paused = true)]
async fn untimed_items_in_progress_count_from_the_first_read() {
    let queue = WorkQueue::<u32>::new();
    queue.add(1);
    let k = queue.get().await.unwrap();
    assert_eq!(queue.stats().longest_running_processor_seconds, 0.0);
    tokio::time::advance(ms(400)).await;
    let stats = queue.stats();
    assert!((stats.longest_running_processor_seconds - 0.4).abs() < 1e-9);
    assert_eq!(stats.work_duration.count(), 0, "no provider: nothing timed");
    queue.done(&k);
    assert_eq!(queue.stats().unfinished_work_seconds, 0.0);
}

/// `add_with` is `add` that builds the item only when it must be added: not for an item
/// waiting already; yes for one being processed (it is queued again at `done`) or not there.
#[tokio::test(flavor = "current_thread")]
async fn add_with_builds_the_item_only_when_it_is_added() {
    use std::sync::Arc;
    let queue = WorkQueue::<Arc<str>>::new();
    let built = std::cell::Cell::new(0);
    let make = |key: &str| {
        built.set(built.get() + 1);
        Arc::<str>::from(key)
    };
    queue.add_with("a", || make("a"));
    queue.add_with("a", || make("a")); // waiting already
    assert_eq!((built.get(), queue.len()), (1, 1));
    let a = queue.get().await.unwrap();
    queue.add_with("a", || make("a")); // being processed: queued again at done
    assert_eq!((built.get(), queue.len()), (2, 0));
    queue.done(&a);
    assert_eq!(queue.len(), 1);
    queue.shut_down();
    queue.add_with("b", || make("b")); // shutting down: ignored, never built
    assert_eq!(built.get(), 2);
}
