//! The priority queue: against a plain model of its order (the highest priority first; within a
//! priority, tenants in turn in the order they came to have items; first in, first out within
//! a tenant), and its rules one test each.

use std::borrow::Cow;
use std::collections::{BTreeMap, HashMap, VecDeque};
use std::time::Duration;

use informer_workqueue::{ItemExponentialFailureRateLimiter, LOW_PRIORITY, QueueList, WorkQueue};
use proptest::prelude::*;

use crate::common;
use common::paused_runtime;

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

/// The priorities the property test uses.
const PRIORITIES: [i32; 4] = [LOW_PRIORITY, -1, 0, 7];

/// Key `k` of the property test: in the cluster ("k0"), or in namespace "a", "b" or "c".
fn key(k: u8) -> String {
    match k % 4 {
        0 => format!("k{k}"),
        n => format!("{}/k{k}", ["a", "b", "c"][usize::from(n) - 1]),
    }
}

/// The priority queue, written plainly: for each priority, the tenants with items in the order
/// of their turns, each with its items in order.
#[derive(Debug, Default)]
struct Model {
    levels: BTreeMap<i32, Vec<(String, VecDeque<String>)>>,
    /// Items waiting, at the highest priority they were added with.
    waiting: HashMap<String, i32>,
    /// Items being processed, with the priority they were handed out with.
    processing: HashMap<String, i32>,
    /// Delayed items: deadline (ms), sequence, priority.
    delayed: HashMap<String, (u64, u64, i32)>,
    seq: u64,
    now: u64,
}

fn tenant(key: &str) -> String {
    key.split_once('/').map_or("", |(ns, _)| ns).to_string()
}

impl Model {
    fn queued(&self) -> usize {
        self.levels
            .values()
            .flatten()
            .map(|(_, items)| items.len())
            .sum()
    }

    fn push(&mut self, k: String, p: i32) {
        let level = self.levels.entry(p).or_default();
        let t = tenant(&k);
        match level.iter_mut().find(|(name, _)| *name == t) {
            Some((_, items)) => items.push_back(k),
            None => level.push((t, VecDeque::from([k]))),
        }
    }

    fn unqueue(&mut self, k: &str, p: i32) {
        let level = self.levels.get_mut(&p).expect("its level");
        let lane = level.iter().position(|(t, _)| *t == tenant(k)).unwrap();
        level[lane].1.retain(|item| item != k);
        if level[lane].1.is_empty() {
            level.remove(lane);
        }
        if level.is_empty() {
            self.levels.remove(&p);
        }
    }

    fn add(&mut self, k: String, p: i32) {
        match self.waiting.get(&k).copied() {
            Some(old) if p > old => {
                if !self.processing.contains_key(&k) {
                    self.unqueue(&k, old);
                    self.push(k.clone(), p);
                }
                self.waiting.insert(k, p);
            }
            Some(_) => {}
            None => {
                self.waiting.insert(k.clone(), p);
                if !self.processing.contains_key(&k) {
                    self.push(k, p);
                }
            }
        }
    }

    /// A requeue's priority: the item's highest, or 0.
    fn priority_of(&self, k: &str) -> i32 {
        [
            self.processing.get(k).copied(),
            self.waiting.get(k).copied(),
            self.delayed.get(k).map(|d| d.2),
        ]
        .into_iter()
        .flatten()
        .max()
        .unwrap_or(0)
    }

    fn add_after(&mut self, k: String, d: u64) {
        let p = self.priority_of(&k);
        if d == 0 {
            return self.add(k, p);
        }
        let at = self.now + d;
        if let Some(old) = self.delayed.get_mut(&k) {
            old.2 = old.2.max(p);
            if old.0 <= at {
                return;
            }
            old.0 = at;
            self.seq += 1;
            old.1 = self.seq;
            return;
        }
        self.seq += 1;
        self.delayed.insert(k, (at, self.seq, p));
    }

    fn get(&mut self) -> Option<String> {
        let mut due: Vec<_> = self
            .delayed
            .iter()
            .filter(|(_, d)| d.0 <= self.now)
            .map(|(k, d)| (d.0, d.1, k.clone(), d.2))
            .collect();
        due.sort();
        for (_, _, k, p) in due {
            self.delayed.remove(&k);
            self.add(k, p);
        }
        let (&p, level) = self.levels.iter_mut().next_back()?;
        let (t, mut items) = level.remove(0);
        let k = items.pop_front().unwrap();
        if !items.is_empty() {
            level.push((t, items));
        }
        if level.is_empty() {
            self.levels.remove(&p);
        }
        self.waiting.remove(&k);
        self.processing.insert(k.clone(), p);
        Some(k)
    }

    fn done(&mut self, k: &str) {
        if self.processing.remove(k).is_some()
            && let Some(&p) = self.waiting.get(k)
        {
            self.push(k.to_string(), p);
        }
    }
}

#[derive(Debug, Clone)]
enum Op {
    Add(u8, i32),
    /// A requeue: keeps the item's priority.
    AddAfter(u8, u64),
    Get,
    /// Done with the n-th item in progress (modulo how many there are).
    Done(usize),
    Advance(u64),
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        6 => (0u8..12, prop::sample::select(PRIORITIES.to_vec())).prop_map(|(k, p)| Op::Add(k, p)),
        2 => (0u8..12, 0u64..20).prop_map(|(k, d)| Op::AddAfter(k, d)),
        5 => Just(Op::Get),
        3 => (0usize..4).prop_map(Op::Done),
        1 => (1u64..15).prop_map(Op::Advance),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    /// Every sequence of adds at any priority, requeues, gets, dones and clock steps: the
    /// queue hands out exactly what the model does, in the same order (highest priority first,
    /// tenants in turn, first in, first out within a tenant), never an item that is in
    /// progress, and its length and items in flight agree with the model's.
    #[test]
    fn the_priority_queue_follows_the_model(ops in prop::collection::vec(op(), 1..150)) {
        paused_runtime().block_on(async {
            let queue = WorkQueue::<String>::builder().priority().build();
            let mut model = Model::default();
            let mut in_progress: Vec<String> = Vec::new();
            for op in ops {
                match op {
                    Op::Add(k, p) => {
                        queue.add_with_priority(key(k), p);
                        model.add(key(k), p);
                    }
                    Op::AddAfter(k, d) => {
                        queue.add_after(key(k), ms(d));
                        model.add_after(key(k), d);
                    }
                    Op::Get => {
                        let got = tokio::time::timeout(Duration::ZERO, queue.get()).await;
                        let want = model.get();
                        match (got, want) {
                            (Ok(Some(k)), Some(w)) => {
                                prop_assert_eq!(&k, &w);
                                prop_assert!(!in_progress.contains(&k), "{} handed out twice", k);
                                in_progress.push(k);
                            }
                            (Err(_), None) => {}
                            (got, want) => prop_assert!(false, "got {:?}, the model {:?}", got, want),
                        }
                    }
                    Op::Done(i) => {
                        if !in_progress.is_empty() {
                            let k = in_progress.remove(i % in_progress.len());
                            queue.done(&k);
                            model.done(&k);
                        }
                    }
                    Op::Advance(d) => {
                        tokio::time::advance(ms(d)).await;
                        model.now += d;
                    }
                }
                prop_assert_eq!(queue.len(), model.queued());
                prop_assert_eq!(queue.in_flight(), model.processing.len());
                prop_assert_eq!(queue.stats().depth, model.waiting.len());
            }
            Ok(())
        })?;
    }
}

/// Takes every item queued now, each done at once, in the order handed out.
async fn drain(queue: &WorkQueue<String>) -> Vec<String> {
    let mut taken = Vec::new();
    while let Ok(Some(k)) = tokio::time::timeout(Duration::ZERO, queue.get()).await {
        queue.done(&k);
        taken.push(k);
    }
    taken
}

/// Changes go before the initial list: a change to a key of a 100,000-key backlog is the next
/// key handed out, and the backlog keeps its order.
#[tokio::test(start_paused = true)]
async fn a_change_goes_before_the_backlog() {
    let queue = WorkQueue::<String>::builder().priority().build();
    for i in 0..100_000 {
        queue.add_with_priority(format!("ns/{i}"), LOW_PRIORITY);
    }
    assert_eq!(queue.get().await.as_deref(), Some("ns/0"));
    queue.add("ns/99999".to_string());
    queue.add("ns/new".to_string());
    assert_eq!(queue.len(), 100_000, "raised, not added twice");
    let rest = drain(&queue).await;
    assert_eq!(rest[..3], ["ns/99999", "ns/new", "ns/1"]);
    assert_eq!(rest.len(), 100_000);
}

/// One namespace with 10,000 items does not starve another: the namespaces take turns.
#[tokio::test(start_paused = true)]
async fn a_busy_namespace_does_not_starve_another() {
    let queue = WorkQueue::<String>::builder().priority().build();
    for i in 0..10_000 {
        queue.add(format!("busy/{i}"));
    }
    queue.add("quiet/a".to_string());
    queue.add("quiet/b".to_string());
    queue.add("cluster-scoped".to_string());
    let order = drain(&queue).await;
    assert_eq!(
        order[..7],
        [
            "busy/0",
            "quiet/a",
            "cluster-scoped",
            "busy/1",
            "quiet/b",
            "busy/2",
            "busy/3"
        ]
    );
    assert_eq!(order.len(), 10_003);
}

/// An item added again at a lower priority keeps its higher one.
#[tokio::test(start_paused = true)]
async fn a_priority_is_raised_never_lowered() {
    let queue = WorkQueue::<String>::builder().priority().build();
    queue.add_with_priority("ns/a".to_string(), 5);
    queue.add_with_priority("ns/b".to_string(), 1);
    queue.add_with_priority("ns/a".to_string(), LOW_PRIORITY);
    assert_eq!(drain(&queue).await, ["ns/a", "ns/b"]);
}

/// An item added while processed comes back at done with the highest priority it was added
/// with meanwhile.
#[tokio::test(start_paused = true)]
async fn an_item_added_while_processed_comes_back_at_its_highest_priority() {
    let queue = WorkQueue::<String>::builder().priority().build();
    queue.add_with_priority("ns/a".to_string(), LOW_PRIORITY);
    let a = queue.get().await.unwrap();
    queue.add_with_priority("ns/b".to_string(), 0);
    queue.add_with_priority(a.clone(), LOW_PRIORITY);
    queue.add_with_priority(a.clone(), 3);
    assert_eq!(queue.len(), 1, "not queued while processed");
    queue.done(&a);
    assert_eq!(drain(&queue).await, ["ns/a", "ns/b"]);
}

/// A requeue (`add_rate_limited`, `add_after`) keeps the item's priority: a retried item of the
/// initial list stays behind the changes, a retried change ahead of the initial list.
#[tokio::test(start_paused = true)]
async fn a_requeue_keeps_its_priority() {
    let queue = WorkQueue::<String>::builder()
        .priority()
        .rate_limiter(ItemExponentialFailureRateLimiter::new(ms(10), ms(10)))
        .build();
    queue.add_with_priority("ns/initial".to_string(), LOW_PRIORITY);
    queue.add_with_priority("ns/change".to_string(), 0);
    let change = queue.get().await.unwrap();
    let initial = queue.get().await.unwrap();
    queue.add_rate_limited(initial.clone());
    queue.done(&initial);
    queue.add_after(change.clone(), ms(10));
    queue.done(&change);
    queue.add_with_priority("ns/list-2".to_string(), LOW_PRIORITY);
    tokio::time::advance(ms(10)).await;
    assert_eq!(
        drain(&queue).await,
        ["ns/change", "ns/list-2", "ns/initial"]
    );
    // An explicit priority on a delayed add: the higher of the two is kept.
    queue.add_after_with_priority("ns/y".to_string(), ms(5), 1);
    queue.add_after("ns/x".to_string(), ms(5));
    queue.add_after_with_priority("ns/x".to_string(), ms(50), 2);
    tokio::time::advance(ms(5)).await;
    assert_eq!(drain(&queue).await, ["ns/x", "ns/y"]);
}

/// A tenant function of the user's: tenants by the item's first letter.
#[tokio::test(start_paused = true)]
async fn tenants_come_from_the_tenant_function() {
    let queue = WorkQueue::<String>::builder()
        .priority_by(|k: &String| Cow::Owned(k[..1].to_string()))
        .build();
    for k in ["a1", "a2", "a3", "b1", "c1", "c2"] {
        queue.add(k.to_string());
    }
    assert_eq!(drain(&queue).await, ["a1", "b1", "c1", "a2", "c2", "a3"]);
}

/// A first-in-first-out queue takes the priorities and ignores them.
#[tokio::test(start_paused = true)]
async fn a_first_in_first_out_queue_ignores_priorities() {
    let queue = WorkQueue::<String>::new();
    assert!(!queue.is_priority());
    queue.add_with_priority("ns/a".to_string(), LOW_PRIORITY);
    queue.add_with_priority("other/b".to_string(), 10);
    queue.add_with_priority("ns/c".to_string(), 0);
    assert_eq!(drain(&queue).await, ["ns/a", "other/b", "ns/c"]);
}

/// `add_probed` is `add_with_priority` that builds the item only when it is added, and raises
/// an item waiting already without building it.
#[tokio::test(start_paused = true)]
async fn add_probed_raises_without_building() {
    let queue = WorkQueue::<std::sync::Arc<str>>::builder()
        .priority()
        .build();
    let built = std::cell::Cell::new(0);
    let make = |key: &str| {
        built.set(built.get() + 1);
        std::sync::Arc::<str>::from(key)
    };
    queue.add_probed("ns/a", LOW_PRIORITY, || make("ns/a"));
    queue.add_probed("ns/b", LOW_PRIORITY, || make("ns/b"));
    queue.add_probed("ns/b", 0, || make("ns/b"));
    assert_eq!((built.get(), queue.len()), (2, 2));
    assert_eq!(queue.get().await.as_deref(), Some("ns/b"));
}

/// Shutdown and drain as in the first-in-first-out queue: what is queued is handed out (in
/// priority order), then `None`; the drain returns once everything is done.
#[tokio::test(start_paused = true)]
async fn shutdown_and_drain_hand_out_the_rest_in_order() {
    let queue = WorkQueue::<String>::builder().priority().build();
    queue.add_with_priority("ns/low".to_string(), LOW_PRIORITY);
    queue.add("ns/high".to_string());
    queue.add_after("ns/delayed".to_string(), ms(5));
    let draining = tokio::spawn({
        let queue = queue.clone();
        async move { queue.shut_down_with_drain().await }
    });
    tokio::task::yield_now().await;
    queue.add("ns/late".to_string()); // shutting down: ignored
    assert_eq!(queue.get().await.as_deref(), Some("ns/high"));
    assert_eq!(queue.get().await.as_deref(), Some("ns/low"));
    assert!(!draining.is_finished());
    queue.done(&"ns/high".to_string());
    queue.done(&"ns/low".to_string());
    tokio::time::timeout(ms(1000), draining)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(queue.get().await, None);
}

/// The metric set counts as in the first-in-first-out queue; a raise is not an add.
#[tokio::test(start_paused = true)]
async fn metrics_count_a_raise_as_no_add() {
    let metrics = QueueList::new();
    let queue = WorkQueue::<String>::builder()
        .name("prio")
        .priority()
        .metrics(metrics.clone())
        .build();
    queue.add_with_priority("ns/a".to_string(), LOW_PRIORITY);
    queue.add_with_priority("ns/b".to_string(), LOW_PRIORITY);
    queue.add("ns/a".to_string());
    let stats = metrics.get("prio").unwrap();
    assert_eq!((stats.adds, stats.depth), (2, 2));
    tokio::time::advance(ms(20)).await;
    assert_eq!(
        queue.get().await.as_deref(),
        Some("ns/a"),
        "raised, so first"
    );
    let latency = metrics.get("prio").unwrap().queue_duration;
    assert_eq!(
        (latency.count(), latency.sum()),
        (1, 0.02),
        "timed from its first add"
    );
}

/// A level that is not served while an item of it is raised, handed out and added back a
/// thousand times (its lane compacted on the way) still hands out what waits in it, in order.
#[tokio::test(start_paused = true)]
async fn a_starved_level_keeps_its_order_through_many_raises() {
    let queue = WorkQueue::<String>::builder().priority().build();
    for k in ["ns/a", "ns/b", "ns/c"] {
        queue.add_with_priority(k.to_string(), LOW_PRIORITY);
    }
    for _ in 0..1_000 {
        queue.add_with_priority("ns/x".to_string(), LOW_PRIORITY);
        queue.add("ns/x".to_string());
        let x = queue.get().await.unwrap();
        assert_eq!(x, "ns/x");
        queue.done(&x);
        assert_eq!(queue.len(), 3);
    }
    assert_eq!(drain(&queue).await, ["ns/a", "ns/b", "ns/c"]);
}
