//! A conformance suite for any [`Queue`] implementation.
//!
//! The suite checks what every queue shares: what a write queues, per key and in order; typed key
//! errors that change nothing; `has_synced` and the initial-list flag; tombstones on relist;
//! resync; transforms; `close`; a panicking process function; several producers at once. How a
//! queue groups changes into [`Deltas`] is its own business, so the checks look at each key's
//! changes in order, plus the global order where it is part of the common contract.
//!
//! Objects are the store layer's [`TestObject`], keyed `namespace/name`.
//!
//! ```
//! use informer_fifo::{DeltaFifo, DeltaFifoOptions};
//! use informer_testing::fifo::conformance;
//!
//! conformance::queue_suite(|parts| {
//!     let mut options = DeltaFifoOptions::default();
//!     options.known_objects = parts.known_objects;
//!     options.transform = parts.transform;
//!     options.on_refused = parts.on_refused;
//!     DeltaFifo::with_options(parts.key_func, options)
//! });
//! ```

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Arc;
use std::thread;

pub use crate::store::conformance::{TestObject, key_func, obj};
use informer_store::{KeyFunc, KnownObjects, ReflectorStore, ThreadSafeStore};

use informer_fifo::Error;

use informer_fifo::{
    Delta, Deltas, Queue, QueueClosed, RefusalHandler, TransformFunc, transform_func,
};

/// What the suite hands the queue constructor.
#[non_exhaustive]
pub struct QueueParts {
    /// The key function ([`key_func`]).
    pub key_func: KeyFunc<TestObject>,
    /// The cache the queue reads back, when the check needs one.
    pub known_objects: Option<Arc<dyn KnownObjects<TestObject>>>,
    /// A transform, when the check needs one.
    pub transform: Option<TransformFunc<TestObject>>,
    /// The refusal handler, when the check needs one.
    pub on_refused: Option<RefusalHandler>,
}

impl std::fmt::Debug for QueueParts {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("QueueParts")
            .field("known_objects", &self.known_objects.is_some())
            .field("transform", &self.transform.is_some())
            .finish()
    }
}

/// The key of the object (or tombstone) a delta is about.
pub fn delta_key(delta: &Delta<TestObject>) -> String {
    match (delta, delta.object()) {
        (Delta::Deleted(deleted), _) if deleted.is_tombstone() => deleted
            .tombstone()
            .map(|t| t.key.clone())
            .unwrap_or_default(),
        (_, Some(o)) => key_func()(o).unwrap_or_default(),
        (_, None) => String::new(),
    }
}

/// One delta as text: `Added@3`; a tombstone is `Deleted~@3`, or `Deleted~@-` with no object.
pub fn render_delta(delta: &Delta<TestObject>) -> String {
    let mut s = format!("{:?}", delta.delta_type());
    if delta.is_tombstone() {
        s.push('~');
    }
    match delta.object() {
        Some(o) => write!(s, "@{}", o.resource_version).unwrap_or(()),
        None => s.push_str("@-"),
    }
    s
}

/// One pop as text: `ns/a: Added@1 Updated@2`, prefixed by `initial ` when it belongs to the
/// initial list.
pub fn render(deltas: &Deltas<TestObject>, is_in_initial_list: bool) -> String {
    let mut s = String::new();
    if is_in_initial_list {
        s.push_str("initial ");
    }
    s.push_str(&delta_key(deltas.newest()));
    s.push(':');
    for delta in deltas.iter() {
        s.push(' ');
        s.push_str(&render_delta(delta));
    }
    s
}

/// Closes `queue` and pops everything left, rendered with [`render`].
pub fn drain<Q: Queue<TestObject> + ?Sized>(queue: &Q) -> Vec<String> {
    queue.close();
    let mut out = Vec::new();
    while queue
        .pop(&mut |deltas, initial| out.push(render(&deltas, initial)))
        .is_ok()
    {}
    out
}

/// Closes `queue`, pops everything left, and returns each key's deltas in order (rendered with
/// [`render_delta`]), plus the initial-list flag of each.
pub fn drain_per_key<Q: Queue<TestObject> + ?Sized>(
    queue: &Q,
) -> BTreeMap<String, Vec<(String, bool)>> {
    queue.close();
    let mut out: BTreeMap<String, Vec<(String, bool)>> = BTreeMap::new();
    while queue
        .pop(&mut |deltas, initial| {
            for delta in deltas.iter() {
                out.entry(delta_key(delta))
                    .or_default()
                    .push((render_delta(delta), initial));
            }
        })
        .is_ok()
    {}
    out
}

fn per_key<const N: usize>(
    entries: [(&str, &[&str]); N],
    initial: bool,
) -> BTreeMap<String, Vec<(String, bool)>> {
    entries
        .into_iter()
        .map(|(key, deltas)| {
            let deltas = deltas.iter().map(|d| ((*d).to_owned(), initial)).collect();
            (key.to_owned(), deltas)
        })
        .collect()
}

fn cache(objects: &[Arc<TestObject>]) -> Arc<ThreadSafeStore<TestObject>> {
    let cache = Arc::new(ThreadSafeStore::new(key_func()));
    for o in objects {
        cache.add(Arc::clone(o)).expect("test objects have keys");
    }
    cache
}

fn parts() -> QueueParts {
    QueueParts {
        key_func: key_func(),
        known_objects: None,
        transform: None,
        on_refused: None,
    }
}

fn with_cache(cache: &Arc<ThreadSafeStore<TestObject>>) -> QueueParts {
    QueueParts {
        known_objects: Some(Arc::clone(cache) as Arc<dyn KnownObjects<TestObject>>),
        ..parts()
    }
}

/// Runs every [`Queue`] check on queues made by `make` (called once per check or more).
pub fn queue_suite<Q, F>(make: F)
where
    Q: Queue<TestObject> + 'static,
    F: Fn(QueueParts) -> Q,
{
    writes_are_delivered_in_order_per_key(&make);
    distinct_keys_are_delivered_in_arrival_order(&make);
    key_errors_are_typed_and_change_nothing(&make);
    has_synced_after_a_write_before_any_relist(&make);
    has_synced_once_the_first_relist_is_popped(&make);
    relist_tombstones_carry_the_last_known_state(&make);
    resync_redelivers_known_objects_with_nothing_queued(&make);
    transform_applies_to_entering_objects_only(&make);
    refused_objects_never_stall_and_never_leave_a_stale_version(&make);
    close_wakes_a_blocked_pop_and_drains_first(&make);
    panicking_process_leaves_the_queue_usable(&make);
    producers_lose_nothing_and_keep_their_order(&make);
    pop_batch_hands_over_up_to_max_in_queue_order(&make);
}

fn writes_are_delivered_in_order_per_key<Q: Queue<TestObject>>(make: &impl Fn(QueueParts) -> Q) {
    let q = make(parts());
    q.add(obj("ns", "a", 1)).unwrap();
    q.update(obj("ns", "a", 2)).unwrap();
    q.add(obj("ns", "b", 3)).unwrap();
    q.delete(obj("ns", "a", 4)).unwrap();
    assert_eq!(
        drain_per_key(&q),
        per_key(
            [
                ("ns/a", &["Added@1", "Updated@2", "Deleted@4"]),
                ("ns/b", &["Added@3"]),
            ],
            false
        ),
        "each key's changes are delivered in the order they were written"
    );
}

fn distinct_keys_are_delivered_in_arrival_order<Q: Queue<TestObject>>(
    make: &impl Fn(QueueParts) -> Q,
) {
    let q = make(parts());
    for (i, name) in ["c", "a", "b"].into_iter().enumerate() {
        q.add(obj("ns", name, i as u64)).unwrap();
    }
    assert_eq!(
        drain(&q),
        ["ns/c: Added@0", "ns/a: Added@1", "ns/b: Added@2"],
        "distinct keys pop in arrival order"
    );
    assert!(
        matches!(
            q.pop(&mut |_, _| panic!("closed and empty")),
            Err(QueueClosed)
        ),
        "a closed, drained queue keeps returning QueueClosed"
    );
}

/// A key error refuses a write and changes nothing. (In a `replace` it refuses that one object
/// and the rest applies: `refused_objects_never_stall_and_never_leave_a_stale_version`.)
fn key_errors_are_typed_and_change_nothing<Q: Queue<TestObject>>(make: &impl Fn(QueueParts) -> Q) {
    let cache = cache(&[obj("ns", "known", 1)]);
    let q = make(with_cache(&cache));
    let nameless = obj("ns", "", 1);
    for result in [
        q.add(nameless.clone()),
        q.update(nameless.clone()),
        q.delete(nameless.clone()),
    ] {
        assert!(
            matches!(result, Err(Error::Key(_))),
            "a key error is Error::Key, got {result:?}"
        );
    }
    assert!(
        !q.has_synced(),
        "a failed write does not count as the first write"
    );
    assert!(drain(&q).is_empty(), "a failed write queues nothing");
}

fn has_synced_after_a_write_before_any_relist<Q: Queue<TestObject>>(
    make: &impl Fn(QueueParts) -> Q,
) {
    let q = make(parts());
    assert!(!q.has_synced(), "a new queue has not synced");
    q.add(obj("ns", "a", 1)).unwrap();
    assert!(
        q.has_synced(),
        "a write before any relist syncs the queue at once"
    );
    q.replace(vec![obj("ns", "b", 2)], "2".into()).unwrap();
    assert!(q.has_synced(), "a later relist does not unsync it");
    assert!(
        drain(&q).iter().all(|pop| !pop.starts_with("initial")),
        "nothing is in the initial list once synced"
    );

    let q = make(parts());
    q.replace(Vec::new(), "1".into()).unwrap();
    assert!(
        q.has_synced(),
        "an empty first relist syncs the queue at once"
    );
}

fn has_synced_once_the_first_relist_is_popped<Q: Queue<TestObject>>(
    make: &impl Fn(QueueParts) -> Q,
) {
    let cache = cache(&[obj("ns", "gone", 1)]);
    let q = make(with_cache(&cache));
    q.replace(vec![obj("ns", "a", 2), obj("ns", "b", 3)], "3".into())
        .unwrap();
    let mut seen = Vec::new();
    for _ in 0..3 {
        assert!(!q.has_synced(), "not synced before the relist is popped");
        q.pop(&mut |deltas, initial| seen.push(render(&deltas, initial)))
            .unwrap();
    }
    assert!(
        q.has_synced(),
        "synced once the relist and its deletion are popped"
    );
    seen.sort();
    assert_eq!(
        seen,
        [
            "initial ns/a: Replaced@2",
            "initial ns/b: Replaced@3",
            "initial ns/gone: Deleted~@1"
        ],
        "the first relist and its deletions are in the initial list"
    );
    q.add(obj("ns", "c", 4)).unwrap();
    assert_eq!(
        drain(&q),
        ["ns/c: Added@4"],
        "later writes are not in the initial list"
    );
}

fn pop_batch_hands_over_up_to_max_in_queue_order<Q: Queue<TestObject>>(
    make: &impl Fn(QueueParts) -> Q,
) {
    let cache = cache(&[]);
    let q = make(with_cache(&cache));
    q.replace(vec![obj("ns", "a", 1), obj("ns", "b", 2)], "2".into())
        .unwrap();
    q.add(obj("ns", "c", 3)).unwrap();
    let mut seen = Vec::new();
    let mut record = |deltas: Deltas<TestObject>, initial| seen.push(render(&deltas, initial));
    assert_eq!(q.pop_batch(2, &mut record), Ok(2), "up to max");
    assert!(q.has_synced(), "the initial list is counted as popped");
    assert_eq!(q.pop_batch(5, &mut record), Ok(1), "never waits to fill");
    assert_eq!(
        seen,
        [
            "initial ns/a: Replaced@1",
            "initial ns/b: Replaced@2",
            "ns/c: Added@3"
        ],
        "in queue order, each flagged as it would be by pop"
    );
    q.close();
    assert_eq!(
        q.pop_batch(5, &mut |_, _| panic!("closed and empty")),
        Err(QueueClosed)
    );
}

fn relist_tombstones_carry_the_last_known_state<Q: Queue<TestObject>>(
    make: &impl Fn(QueueParts) -> Q,
) {
    let cache = cache(&[obj("ns", "cached", 1), obj("ns", "kept", 2)]);
    let q = make(with_cache(&cache));
    q.add(obj("ns", "queued", 3)).unwrap();
    q.update(obj("ns", "queued", 4)).unwrap();
    q.replace(vec![obj("ns", "kept", 5)], "5".into()).unwrap();
    assert_eq!(
        drain_per_key(&q),
        per_key(
            [
                ("ns/cached", &["Deleted~@1"]),
                ("ns/kept", &["Replaced@5"]),
                ("ns/queued", &["Added@3", "Updated@4", "Deleted~@4"]),
            ],
            false
        ),
        "a relist tombstones a cached key with the cache's object and a queued key with the \
         newest queued object"
    );
}

fn resync_redelivers_known_objects_with_nothing_queued<Q: Queue<TestObject>>(
    make: &impl Fn(QueueParts) -> Q,
) {
    let q = make(parts());
    q.resync().unwrap();
    assert!(
        drain(&q).is_empty(),
        "resync without known objects does nothing"
    );

    let cache = cache(&[obj("ns", "a", 1), obj("ns", "b", 2)]);
    let q = make(with_cache(&cache));
    q.update(obj("ns", "b", 3)).unwrap();
    q.resync().unwrap();
    assert_eq!(
        drain_per_key(&q),
        per_key([("ns/a", &["Sync@1"]), ("ns/b", &["Updated@3"])], false),
        "resync re-delivers the cache, except keys with queued changes (they are newer)"
    );
}

fn transform_applies_to_entering_objects_only<Q: Queue<TestObject>>(
    make: &impl Fn(QueueParts) -> Q,
) {
    // The transform adds 100 to the resource version.
    let transform = transform_func(|o: Arc<TestObject>| {
        if o.name == "refused" {
            return Err("refused by transform".into());
        }
        let mut o = (*o).clone();
        o.resource_version += 100;
        Ok(Arc::new(o))
    });
    let cache = cache(&[obj("ns", "cached", 1), obj("ns", "synced", 2)]);
    let q = make(QueueParts {
        transform: Some(transform),
        ..with_cache(&cache)
    });
    let refused = q.add(obj("ns", "refused", 1));
    assert!(
        matches!(&refused, Err(Error::Transform { key, .. }) if key == "ns/refused"),
        "a transform error is Error::Transform with the key, got {refused:?}"
    );
    q.add(obj("ns", "a", 3)).unwrap();
    q.update(obj("ns", "a", 4)).unwrap();
    q.delete(obj("ns", "a", 5)).unwrap();
    q.resync().unwrap();
    q.replace(vec![obj("ns", "synced", 6)], "6".into()).unwrap();
    assert_eq!(
        drain_per_key(&q),
        per_key(
            [
                ("ns/a", &["Added@103", "Updated@104", "Deleted@105"]),
                ("ns/cached", &["Sync@1", "Deleted~@1"]),
                ("ns/synced", &["Sync@2", "Replaced@106"]),
            ],
            false
        ),
        "added, updated, deleted and listed objects are transformed; resynced objects and \
         tombstones are not"
    );
}

fn refused_objects_never_stall_and_never_leave_a_stale_version<Q: Queue<TestObject>>(
    make: &impl Fn(QueueParts) -> Q,
) {
    // The transform refuses version 99 of anything (an error) and version 98 (a panic).
    let transform = transform_func(|o: Arc<TestObject>| match o.resource_version {
        99 => Err("refused by transform".into()),
        98 => panic!("transform panicked"),
        _ => Ok(o),
    });
    let refusals = Arc::new(std::sync::Mutex::new(Vec::new()));
    let on_refused: RefusalHandler = {
        let refusals = Arc::clone(&refusals);
        Arc::new(move |e: &Error| {
            refusals
                .lock()
                .unwrap()
                .push(e.key().unwrap_or("?").to_owned());
        })
    };
    let cache = cache(&[obj("ns", "a", 1), obj("ns", "b", 1), obj("ns", "c", 1)]);
    let q = make(QueueParts {
        transform: Some(transform),
        on_refused: Some(on_refused),
        ..with_cache(&cache)
    });
    // A refused version of a cached key: the cached version is withdrawn with a tombstone.
    let refused = q.update(obj("ns", "a", 99));
    assert!(matches!(&refused, Err(Error::Transform { key, .. }) if key == "ns/a"));
    // A panicking transform is a refusal too, not a panic out of the write.
    let refused = q.update(obj("ns", "b", 98));
    assert!(matches!(&refused, Err(Error::Transform { key, .. }) if key == "ns/b"));
    // A refused version of an unknown key has nothing to withdraw.
    assert!(q.add(obj("ns", "new", 99)).is_err());
    // A relist with refused objects applies the rest: c is listed, "bad" and the nameless
    // object are refused, so a's and b's tombstones stand and nothing else is deleted.
    q.replace(
        vec![obj("ns", "c", 2), obj("ns", "bad", 99), obj("ns", "", 3)],
        "3".into(),
    )
    .expect("a relist with refused objects still applies the rest");
    assert_eq!(
        drain_per_key(&q),
        per_key(
            [
                ("ns/a", &["Deleted~@1"]),
                ("ns/b", &["Deleted~@1"]),
                ("ns/c", &["Replaced@2"]),
            ],
            false
        ),
        "refused versions withdraw the cached ones; the rest of the relist applies"
    );
    assert_eq!(
        *refusals.lock().unwrap(),
        ["ns/a", "ns/b", "ns/new", "ns/bad", "?"],
        "every refused object is reported, with its key when it has one"
    );
}

fn close_wakes_a_blocked_pop_and_drains_first<Q: Queue<TestObject> + 'static>(
    make: &impl Fn(QueueParts) -> Q,
) {
    let q: Arc<dyn Queue<TestObject>> = Arc::new(make(parts()));
    let popper = {
        let q = Arc::clone(&q);
        thread::spawn(move || q.pop(&mut |_, _| {}))
    };
    q.close();
    assert!(q.is_closed());
    assert_eq!(
        popper.join().expect("pop does not panic"),
        Err(QueueClosed),
        "close wakes a blocked pop, which returns QueueClosed"
    );

    let q: Arc<dyn Queue<TestObject>> = Arc::new(make(parts()));
    let popper = {
        let q = Arc::clone(&q);
        thread::spawn(move || {
            let mut got = Vec::new();
            q.pop(&mut |d, i| got.push(render(&d, i))).map(|()| got)
        })
    };
    q.add(obj("ns", "a", 1)).unwrap();
    assert_eq!(
        popper.join().expect("pop does not panic"),
        Ok(vec!["ns/a: Added@1".to_owned()]),
        "an add wakes a blocked pop"
    );

    let q = make(parts());
    q.add(obj("ns", "a", 1)).unwrap();
    q.close();
    q.add(obj("ns", "b", 2))
        .expect("writes after close are accepted");
    assert_eq!(
        drain(&q),
        ["ns/a: Added@1", "ns/b: Added@2"],
        "a closed queue drains what it holds, writes after close included, before QueueClosed"
    );
}

fn panicking_process_leaves_the_queue_usable<Q: Queue<TestObject>>(
    make: &impl Fn(QueueParts) -> Q,
) {
    let q = make(parts());
    q.replace(vec![obj("ns", "a", 1), obj("ns", "b", 2)], "2".into())
        .unwrap();
    let panicked = catch_unwind(AssertUnwindSafe(|| {
        q.pop(&mut |_, _| panic!("process function failed"))
    }));
    assert!(panicked.is_err(), "the panic propagates out of pop");
    assert!(!q.has_synced(), "the queue is not locked after the panic");
    q.add(obj("ns", "c", 3)).unwrap();
    assert_eq!(
        drain(&q),
        ["initial ns/b: Replaced@2", "ns/c: Added@3"],
        "the panicking item is dropped and counted as popped; the rest is intact"
    );
    assert!(q.has_synced());
}

fn producers_lose_nothing_and_keep_their_order<Q: Queue<TestObject> + 'static>(
    make: &impl Fn(QueueParts) -> Q,
) {
    const PRODUCERS: usize = 4;
    const PER_PRODUCER: u64 = 500;
    let q: Arc<dyn Queue<TestObject>> = Arc::new(make(parts()));
    let producers: Vec<_> = (0..PRODUCERS)
        .map(|p| {
            let q = Arc::clone(&q);
            thread::spawn(move || {
                for i in 0..PER_PRODUCER {
                    q.add(obj(&format!("p{p}"), &format!("o{i}"), i)).unwrap();
                }
            })
        })
        .collect();
    let consumer = {
        let q = Arc::clone(&q);
        thread::spawn(move || {
            let mut next = [0u64; PRODUCERS];
            let mut popped = 0;
            while q
                .pop(&mut |deltas, _| {
                    assert_eq!(deltas.len(), 1, "each key is added once");
                    let o = deltas.newest().object().expect("an added object");
                    let p: usize = o.namespace[1..].parse().expect("namespace p<n>");
                    assert_eq!(
                        o.resource_version, next[p],
                        "producer {p}'s objects pop in the order it added them"
                    );
                    next[p] += 1;
                    popped += 1;
                })
                .is_ok()
            {}
            (popped, next)
        })
    };
    for producer in producers {
        producer.join().expect("producer does not panic");
    }
    q.close();
    let (popped, next) = consumer.join().expect("consumer does not panic");
    assert_eq!(popped, PRODUCERS * PER_PRODUCER as usize, "nothing is lost");
    assert!(next.iter().all(|&n| n == PER_PRODUCER));
}
