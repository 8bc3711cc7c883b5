//! A conformance suite for any [`Queue`] implementation.
//!
//! The suite checks what every queue shares: what a write queues, per key and in order; typed key
//! errors that change nothing; `has_synced` and the initial-list flag; tombstones on relist;
//! resync; transforms; `close`; a panicking process function; several producers at once; and
//! the unlocked pop: writes that never wait for a `process` in progress, the rules for a change
//! in flight (taken off the queue, not yet applied to the cache), `try_pop_batch` and the ready
//! hook. How a queue groups changes into [`Deltas`] is its own business, so the checks look at
//! each key's changes in order, plus the global order where it is part of the common contract.
//!
//! The checks read what a queue delivers as its consumer does: popped changes are applied to
//! the consumer's cache, and a change of the whole collection (an atomic queue's
//! [`ReplacedAll`](Delta::ReplacedAll) or [`SyncAll`](Delta::SyncAll)) is read as the
//! per-object changes it makes to that cache ([`changes`]). So one suite holds both kinds of
//! queue to the same outcomes; [`atomic_queue_suite`] runs it on an atomic queue, where a few
//! checks expect what applying a relist or a resync as one change means (a resync re-delivers
//! the cache as it is when it is applied; a panic drops a whole relist).
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
use std::panic::{AssertUnwindSafe, catch_unwind, resume_unwind};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, mpsc};
use std::thread;
use std::time::Duration;

pub use crate::store::conformance::{TestObject, key_func, obj};
use informer_store::{KeyFunc, KnownObjects, ReflectorStore, Store, ThreadSafeStore};

use informer_fifo::Error;

use informer_fifo::{
    Delta, Deltas, Queue, QueueClosed, ReadyHook, RefusalHandler, TransformFunc, sync_all_changes,
    transform_func,
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
/// initial list. A change of the whole collection is `*: ReplacedAll[ns/a@1 ns/b@2]` (the end
/// of a relist by page: `*: ReplacedAll[pages]`) or `*: SyncAll`.
pub fn render(deltas: &Deltas<TestObject>, is_in_initial_list: bool) -> String {
    let mut s = String::new();
    if is_in_initial_list {
        s.push_str("initial ");
    }
    match deltas.newest() {
        Delta::ReplacedAll(all) if all.is_by_pages() => s.push_str("*: ReplacedAll[pages]"),
        Delta::ReplacedAll(all) => {
            s.push_str("*: ReplacedAll[");
            let listed: Vec<String> = all
                .objects()
                .iter()
                .map(|(key, o)| format!("{key}@{}", o.resource_version))
                .collect();
            s.push_str(&listed.join(" "));
            s.push(']');
        }
        Delta::SyncAll => s.push_str("*: SyncAll"),
        newest => {
            s.push_str(&delta_key(newest));
            s.push(':');
            for delta in deltas.iter() {
                s.push(' ');
                s.push_str(&render_delta(delta));
            }
        }
    }
    s
}

/// What a consumer whose cache is `cache` (before it applies them) reads in popped `deltas`:
/// one entry per key with its deltas, or, for a change of the whole collection, the
/// per-object changes it makes to `cache`, one entry each
/// ([`ReplacedAll::changes`](informer_fifo::ReplacedAll::changes),
/// [`sync_all_changes`]).
pub fn changes(
    deltas: &Deltas<TestObject>,
    cache: &ThreadSafeStore<TestObject>,
) -> Vec<(String, Vec<Delta<TestObject>>)> {
    match deltas.newest() {
        Delta::ReplacedAll(all) => all
            .changes(cache)
            .into_iter()
            .map(|(key, delta)| (key, vec![delta]))
            .collect(),
        Delta::SyncAll => sync_all_changes(cache)
            .into_iter()
            .map(|(key, delta)| (key, vec![delta]))
            .collect(),
        newest => {
            let key = deltas
                .key()
                .map_or_else(|| delta_key(newest), str::to_owned);
            vec![(key, deltas.to_vec())]
        }
    }
}

/// [`changes`] rendered as [`render`] renders a pop of one key.
pub fn render_changes(
    deltas: &Deltas<TestObject>,
    is_in_initial_list: bool,
    cache: &ThreadSafeStore<TestObject>,
) -> Vec<String> {
    changes(deltas, cache)
        .into_iter()
        .map(|(key, list)| {
            let mut s = String::new();
            if is_in_initial_list {
                s.push_str("initial ");
            }
            s.push_str(&key);
            s.push(':');
            for delta in &list {
                s.push(' ');
                s.push_str(&render_delta(delta));
            }
            s
        })
        .collect()
}

/// Closes `queue` and pops everything left, rendered with [`render_changes`] against a cache of
/// the consumer's own, which the pops are applied to (see [`drain_into`]).
pub fn drain<Q: Queue<TestObject> + ?Sized>(queue: &Q) -> Vec<String> {
    drain_into(queue, &ThreadSafeStore::new(key_func()))
}

/// [`drain_per_key_into`] a cache of the consumer's own.
pub fn drain_per_key<Q: Queue<TestObject> + ?Sized>(
    queue: &Q,
) -> BTreeMap<String, Vec<(String, bool)>> {
    drain_per_key_into(queue, &ThreadSafeStore::new(key_func()))
}

/// Closes `queue`, pops everything left applying it to `cache`, and returns each key's deltas
/// in order (rendered with [`render_delta`]; a change of the whole collection read as its
/// [`changes`] to `cache`), plus the initial-list flag of each.
pub fn drain_per_key_into<Q: Queue<TestObject> + ?Sized>(
    queue: &Q,
    cache: &ThreadSafeStore<TestObject>,
) -> BTreeMap<String, Vec<(String, bool)>> {
    queue.close();
    let mut out: BTreeMap<String, Vec<(String, bool)>> = BTreeMap::new();
    while queue
        .pop(&mut |deltas, initial| {
            for (key, list) in changes(&deltas, cache) {
                let entry = out.entry(key).or_default();
                entry.extend(list.iter().map(|d| (render_delta(d), initial)));
            }
            apply(cache, &deltas);
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

/// Runs every [`Queue`] check on queues made by `make` (called once per check or more), a queue
/// that delivers one object per delta.
pub fn queue_suite<Q, F>(make: F)
where
    Q: Queue<TestObject> + 'static,
    F: Fn(QueueParts) -> Q,
{
    suite(&make, false);
}

/// Runs every [`Queue`] check on an atomic queue made by `make`: one that delivers a relist as
/// one [`ReplacedAll`](Delta::ReplacedAll) and a resync as one [`SyncAll`](Delta::SyncAll)
/// (see the module's docs).
pub fn atomic_queue_suite<Q, F>(make: F)
where
    Q: Queue<TestObject> + 'static,
    F: Fn(QueueParts) -> Q,
{
    suite(&make, true);
}

fn suite<Q, F>(make: &F, atomic: bool)
where
    Q: Queue<TestObject> + 'static,
    F: Fn(QueueParts) -> Q,
{
    writes_are_delivered_in_order_per_key(make);
    distinct_keys_are_delivered_in_arrival_order(make);
    key_errors_are_typed_and_change_nothing(make);
    has_synced_after_a_write_before_any_relist(make, atomic);
    has_synced_once_the_first_relist_is_popped(make, atomic);
    relist_tombstones_carry_the_last_known_state(make);
    resync_redelivers_known_objects_with_nothing_queued(make, atomic);
    transform_applies_to_entering_objects_only(make);
    refused_objects_never_stall_and_never_leave_a_stale_version(make);
    close_wakes_a_blocked_pop_and_drains_first(make);
    panicking_process_leaves_the_queue_usable(make, atomic);
    producers_lose_nothing_and_keep_their_order(make);
    pop_batch_hands_over_up_to_max_in_queue_order(make, atomic);
    writes_complete_while_process_is_held(make);
    process_may_write_to_its_own_queue_but_not_pop(make);
    a_relist_tombstones_keys_in_flight_as_the_cache_will_have_them(make);
    a_resync_skips_a_key_in_flight(make, atomic);
    a_refused_version_of_a_key_in_flight_is_withdrawn(make);
    has_synced_waits_for_process_of_the_last_initial_change(make, atomic);
    changes_not_handed_over_yet_are_in_flight_too(make);
    a_panicking_process_puts_the_rest_of_its_batch_back(make, atomic);
    try_pop_batch_never_waits_for_a_change(make);
    the_ready_hook_hears_every_write_and_close(make, atomic);
    a_backlog_wakes_its_producer_once_the_consumer_has_caught_up(make);
    if atomic {
        a_relist_reaches_the_cache_in_one_step(make);
        a_relist_by_page_queues_its_pages_then_deletes_what_none_listed(make);
        a_refused_version_reads_its_key_through_a_relist(make);
    }
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
    atomic: bool,
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
    if atomic {
        // Still one change: the consumer's cache may hold objects the empty list deletes.
        assert!(!q.has_synced(), "an empty first relist is one change");
        assert_eq!(drain(&q), Vec::<String>::new());
        assert!(q.has_synced(), "synced once that change is popped");
        return;
    }
    assert!(
        q.has_synced(),
        "an empty first relist syncs the queue at once"
    );
}

fn has_synced_once_the_first_relist_is_popped<Q: Queue<TestObject>>(
    make: &impl Fn(QueueParts) -> Q,
    atomic: bool,
) {
    let cache = cache(&[obj("ns", "gone", 1)]);
    let q = make(with_cache(&cache));
    q.replace(vec![obj("ns", "a", 2), obj("ns", "b", 3)], "3".into())
        .unwrap();
    let mut seen = Vec::new();
    // Three changes, or one relist of the whole collection.
    for _ in 0..if atomic { 1 } else { 3 } {
        assert!(!q.has_synced(), "not synced before the relist is popped");
        q.pop(&mut |deltas, initial| {
            seen.extend(render_changes(&deltas, initial, &cache));
            apply(&cache, &deltas);
        })
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
    atomic: bool,
) {
    let cache = cache(&[]);
    let q = make(with_cache(&cache));
    q.replace(vec![obj("ns", "a", 1), obj("ns", "b", 2)], "2".into())
        .unwrap();
    q.add(obj("ns", "c", 3)).unwrap();
    q.add(obj("ns", "d", 4)).unwrap();
    let mut seen = Vec::new();
    let mut record = |deltas: Deltas<TestObject>, initial| {
        seen.extend(render_changes(&deltas, initial, &cache));
        apply(&cache, &deltas);
    };
    assert_eq!(q.pop_batch(2, &mut record), Ok(2), "up to max");
    assert!(q.has_synced(), "the initial list is counted as popped");
    // The relist was one change of an atomic queue: c went in the first batch.
    let left = if atomic { 1 } else { 2 };
    assert_eq!(q.pop_batch(5, &mut record), Ok(left), "never waits to fill");
    assert_eq!(
        seen,
        [
            "initial ns/a: Replaced@1",
            "initial ns/b: Replaced@2",
            "ns/c: Added@3",
            "ns/d: Added@4"
        ],
        "in queue order, each flagged as it would be by pop"
    );
    q.close();
    assert_eq!(
        q.pop_batch(5, &mut |_, _| panic!("closed and empty")),
        Err(QueueClosed)
    );
}

/// Counts its wakes.
#[derive(Default)]
struct WakeCount(AtomicUsize);

impl std::task::Wake for WakeCount {
    fn wake(self: Arc<Self>) {
        self.0.fetch_add(1, Ordering::SeqCst);
    }
}

/// A producer's waker left with `backlog_waking` while the backlog is above the bound is woken
/// once, by the pop that leaves the bound or less, never before; at the bound, nothing is kept;
/// a close wakes a waiting producer too.
fn a_backlog_wakes_its_producer_once_the_consumer_has_caught_up<Q: Queue<TestObject>>(
    make: &impl Fn(QueueParts) -> Q,
) {
    let q = make(parts());
    for (i, name) in ["a", "b", "c", "d"].into_iter().enumerate() {
        q.add(obj("ns", name, i as u64 + 1)).unwrap();
    }
    let wakes = Arc::new(WakeCount::default());
    let waker = std::task::Waker::from(Arc::clone(&wakes));
    let woken = || wakes.0.load(Ordering::SeqCst);
    assert_eq!(q.backlog_waking(1, &waker), Some(4));
    assert_eq!(q.pop_batch(1, &mut |_, _| {}), Ok(1));
    assert_eq!(woken(), 0, "3 pending: still above the bound");
    assert_eq!(q.pop_batch(2, &mut |_, _| {}), Ok(2));
    assert_eq!(woken(), 1, "woken by the pop that left 1");
    assert_eq!(q.pop_batch(1, &mut |_, _| {}), Ok(1));
    assert_eq!(woken(), 1, "woken once");

    q.add(obj("ns", "e", 5)).unwrap();
    assert_eq!(q.backlog_waking(1, &waker), Some(1), "at the bound");
    assert_eq!(q.pop_batch(1, &mut |_, _| {}), Ok(1));
    assert_eq!(woken(), 1, "nothing kept at the bound");

    q.add(obj("ns", "f", 6)).unwrap();
    assert_eq!(q.backlog_waking(0, &waker), Some(1));
    q.close();
    assert_eq!(woken(), 2, "a close wakes the producer");
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
        drain_per_key_into(&q, &cache),
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
    atomic: bool,
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
    if atomic {
        assert_eq!(
            drain_per_key_into(&q, &cache),
            per_key(
                [("ns/a", &["Sync@1"]), ("ns/b", &["Updated@3", "Sync@3"])],
                false
            ),
            "resync re-delivers the cache as it is when the resync is applied: never a version \
             older than one queued before it"
        );
        return;
    }
    assert_eq!(
        drain_per_key_into(&q, &cache),
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
        drain_per_key_into(&q, &cache),
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
        drain_per_key_into(&q, &cache),
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
    atomic: bool,
) {
    let q = make(parts());
    q.replace(vec![obj("ns", "a", 1), obj("ns", "b", 2)], "2".into())
        .unwrap();
    let panicked = catch_unwind(AssertUnwindSafe(|| {
        q.pop(&mut |_, _| panic!("process function failed"))
    }));
    assert!(panicked.is_err(), "the panic propagates out of pop");
    if atomic {
        assert!(
            q.has_synced(),
            "the whole relist was the change dropped, counted as popped"
        );
        q.add(obj("ns", "c", 3)).unwrap();
        assert_eq!(drain(&q), ["ns/c: Added@3"], "the queue is usable");
        return;
    }
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

/// How long a check waits for what should happen at once (a write while `process` is held, a pop
/// that was let go) before it calls it stuck. Generous: it bounds a failure, it is never a delay.
pub const BOUND: Duration = Duration::from_secs(30);

/// Runs `f` on a thread of its own and returns what it returns (or resumes its panic); panics,
/// naming `what`, if it has not returned within [`BOUND`]. For checks that something does not
/// block: that it returns is the assertion.
pub fn within<T: Send + 'static>(what: &str, f: impl FnOnce() -> T + Send + 'static) -> T {
    let (tx, rx) = mpsc::channel();
    thread::spawn(move || {
        let _ = tx.send(catch_unwind(AssertUnwindSafe(f)));
    });
    match rx.recv_timeout(BOUND) {
        Ok(Ok(value)) => value,
        Ok(Err(panic)) => resume_unwind(panic),
        Err(_) => panic!("{what}: still blocked after {BOUND:?}"),
    }
}

/// Applies popped deltas to `cache` as a controller does, oldest first: a deletion (a tombstone
/// included) removes the key, any other delta stores its object; a relist of the whole
/// collection replaces the cache's content in one step (the end of a relist by page deletes
/// what no page listed), a resync of the whole cache changes nothing.
pub fn apply(cache: &ThreadSafeStore<TestObject>, deltas: &Deltas<TestObject>) {
    let key = match deltas.key() {
        Some(key) => key.to_owned(),
        None => delta_key(deltas.newest()),
    };
    for delta in deltas.iter() {
        match delta {
            Delta::ReplacedAll(all) if all.is_by_pages() => {
                for (key, _) in all.changes(cache) {
                    drop(cache.delete_by_key(&key).expect("a delete never fails"));
                }
            }
            Delta::ReplacedAll(all) => {
                let list = all.objects().iter().map(|(_, o)| Arc::clone(o)).collect();
                let rv = all.resource_version().to_owned();
                cache.replace(list, rv).expect("the cache has no index");
            }
            Delta::SyncAll => {}
            Delta::Deleted(_) => drop(cache.delete_by_key(&key).expect("a delete never fails")),
            live => {
                let obj = Arc::clone(live.object().expect("a live delta has an object"));
                cache
                    .upsert_with_key(&key, obj)
                    .expect("the cache has no index");
            }
        }
    }
}

/// `cache`'s objects as `key@version`, sorted.
pub fn contents(cache: &ThreadSafeStore<TestObject>) -> Vec<String> {
    let mut out: Vec<String> = cache
        .list()
        .iter()
        .map(|o| format!("{}/{}@{}", o.namespace, o.name, o.resource_version))
        .collect();
    out.sort();
    out
}

/// Closes `queue`, pops everything left applying it to `cache`, and returns what was popped
/// (rendered with [`render_changes`]: a change of the whole collection as the changes it makes
/// to `cache`).
pub fn drain_into<Q: Queue<TestObject> + ?Sized>(
    queue: &Q,
    cache: &ThreadSafeStore<TestObject>,
) -> Vec<String> {
    queue.close();
    let mut out = Vec::new();
    while queue
        .pop(&mut |deltas, initial| {
            out.extend(render_changes(&deltas, initial, cache));
            apply(cache, &deltas);
        })
        .is_ok()
    {}
    out
}

/// A `pop_batch` on a thread of its own whose `process` is held at each change until released:
/// while it is held, the change is in flight and the queue's lock is free.
#[derive(Debug)]
pub struct HeldPop {
    entered: mpsc::Receiver<String>,
    release: mpsc::Sender<()>,
    popper: thread::JoinHandle<Result<usize, QueueClosed>>,
}

impl HeldPop {
    /// Starts `queue.pop_batch(max, ..)`. Each `process` call reports its change (rendered with
    /// [`render`]), waits to be released, then applies it to `cache`, if given.
    pub fn start(
        queue: Arc<dyn Queue<TestObject>>,
        max: usize,
        cache: Option<Arc<ThreadSafeStore<TestObject>>>,
    ) -> Self {
        let (entered_tx, entered) = mpsc::channel();
        let (release, released) = mpsc::channel::<()>();
        let popper = thread::spawn(move || {
            queue.pop_batch(max, &mut |deltas, initial| {
                let _ = entered_tx.send(render(&deltas, initial));
                released
                    .recv_timeout(BOUND)
                    .expect("the held process is released in time");
                if let Some(cache) = &cache {
                    apply(cache, &deltas);
                }
            })
        });
        Self {
            entered,
            release,
            popper,
        }
    }

    /// Waits until `process` holds the next change, and returns it (rendered).
    pub fn entered(&self) -> String {
        self.entered
            .recv_timeout(BOUND)
            .expect("the pop calls process in time")
    }

    /// Lets the held `process` go on.
    pub fn release(&self) {
        self.release.send(()).expect("the popper is waiting");
    }

    /// Waits for the pop to return, and returns what it returned.
    pub fn join(self) -> Result<usize, QueueClosed> {
        let popper = self.popper;
        within("the released pop returns", move || {
            popper.join().expect("the popper does not panic")
        })
    }
}

/// A transform that refuses (an error) every object at version 99 and keeps the others.
fn refusing_version_99() -> TransformFunc<TestObject> {
    transform_func(|o: Arc<TestObject>| match o.resource_version {
        99 => Err("refused by transform".into()),
        _ => Ok(o),
    })
}

/// A write to make on a thread of its own.
type BoxedWrite = Box<dyn FnOnce(&dyn Queue<TestObject>) + Send>;

/// Runs one write on a thread of its own (see [`within`]) and returns its result.
fn write_within(
    queue: &Arc<dyn Queue<TestObject>>,
    what: &str,
    write: impl FnOnce(&dyn Queue<TestObject>) -> Result<(), Error> + Send + 'static,
) -> Result<(), Error> {
    let queue = Arc::clone(queue);
    within(what, move || write(&*queue))
}

fn shared_queue<Q: Queue<TestObject> + 'static>(
    make: &impl Fn(QueueParts) -> Q,
    parts: QueueParts,
) -> Arc<dyn Queue<TestObject>> {
    Arc::new(make(parts))
}

/// `process` runs with the queue's lock released: every write, and `has_synced`, returns while
/// a `process` is held.
fn writes_complete_while_process_is_held<Q: Queue<TestObject> + 'static>(
    make: &impl Fn(QueueParts) -> Q,
) {
    let cache = cache(&[obj("ns", "a", 1), obj("ns", "b", 1)]);
    let q = shared_queue(make, with_cache(&cache));
    q.add(obj("ns", "x", 1)).unwrap();
    let held = HeldPop::start(Arc::clone(&q), 1, Some(Arc::clone(&cache)));
    assert_eq!(held.entered(), "ns/x: Added@1");
    write_within(&q, "add while process is held", |q| {
        q.add(obj("ns", "c", 1))
    })
    .unwrap();
    write_within(&q, "update while process is held", |q| {
        q.update(obj("ns", "c", 2))
    })
    .unwrap();
    write_within(&q, "delete while process is held", |q| {
        q.delete(obj("ns", "b", 2))
    })
    .unwrap();
    write_within(&q, "replace while process is held", |q| {
        q.replace(vec![obj("ns", "a", 3), obj("ns", "c", 3)], "3".into())
    })
    .unwrap();
    write_within(&q, "resync while process is held", |q| q.resync()).unwrap();
    let reader = Arc::clone(&q);
    assert!(
        within("has_synced while process is held", move || reader
            .has_synced()),
        "a write came before any relist"
    );
    held.release();
    assert_eq!(held.join(), Ok(1));
    drain_into(&*q, &cache);
    assert_eq!(
        contents(&cache),
        ["ns/a@3", "ns/c@3"],
        "every write made while x was in flight reached the cache; the relist deleted x and b"
    );
}

/// A write from inside `process` does not deadlock; a pop from inside it is refused with a panic
/// (it would wait for its own batch to end).
fn process_may_write_to_its_own_queue_but_not_pop<Q: Queue<TestObject> + 'static>(
    make: &impl Fn(QueueParts) -> Q,
) {
    let q = shared_queue(make, parts());
    q.add(obj("ns", "a", 1)).unwrap();
    let popper = Arc::clone(&q);
    let inner_pop_panicked = within("a pop whose process writes to its queue", move || {
        let mut inner_pop_panicked = false;
        let inner = Arc::clone(&popper);
        popper
            .pop(&mut |_, _| {
                inner.add(obj("ns", "b", 2)).unwrap();
                inner.update(obj("ns", "a", 3)).unwrap();
                inner_pop_panicked =
                    catch_unwind(AssertUnwindSafe(|| inner.pop(&mut |_, _| {}))).is_err();
            })
            .unwrap();
        inner_pop_panicked
    });
    assert!(inner_pop_panicked, "a pop from inside process panics");
    assert_eq!(
        drain(&*q),
        ["ns/b: Added@2", "ns/a: Updated@3"],
        "the writes made from inside process are queued"
    );
}

/// While a key's change is in flight, a relist reads the key as the cache will have it once the
/// change is applied, not as the cache has it now.
fn a_relist_tombstones_keys_in_flight_as_the_cache_will_have_them<
    Q: Queue<TestObject> + 'static,
>(
    make: &impl Fn(QueueParts) -> Q,
) {
    // An Added in flight (not in the cache yet), missing from the relist: deleted.
    let cache = cache(&[]);
    let q = shared_queue(make, with_cache(&cache));
    q.add(obj("ns", "a", 1)).unwrap();
    let held = HeldPop::start(Arc::clone(&q), 1, Some(Arc::clone(&cache)));
    assert_eq!(held.entered(), "ns/a: Added@1");
    write_within(&q, "replace", |q| {
        q.replace(vec![obj("ns", "b", 2)], "2".into())
    })
    .unwrap();
    held.release();
    assert_eq!(held.join(), Ok(1));
    let mut popped = drain_into(&*q, &cache);
    popped.sort();
    assert_eq!(
        popped,
        ["ns/a: Deleted~@1", "ns/b: Replaced@2"],
        "the key in flight is tombstoned with its in-flight object"
    );
    assert_eq!(
        contents(&cache),
        ["ns/b@2"],
        "the key in flight ends deleted"
    );

    // A cached key whose newer version is in flight: the tombstone carries the newer version.
    let cache = self::cache(&[obj("ns", "a", 1)]);
    let q = shared_queue(make, with_cache(&cache));
    q.update(obj("ns", "a", 2)).unwrap();
    let held = HeldPop::start(Arc::clone(&q), 1, Some(Arc::clone(&cache)));
    assert_eq!(held.entered(), "ns/a: Updated@2");
    write_within(&q, "replace", |q| q.replace(Vec::new(), "3".into())).unwrap();
    held.release();
    assert_eq!(held.join(), Ok(1));
    assert_eq!(
        drain_into(&*q, &cache),
        ["ns/a: Deleted~@2"],
        "the last known state is the in-flight version, not the cache's"
    );
    assert!(contents(&cache).is_empty());

    // A deletion in flight: the cache will not have the key, so there is nothing to tombstone.
    let cache = self::cache(&[obj("ns", "a", 1)]);
    let q = shared_queue(make, with_cache(&cache));
    q.delete(obj("ns", "a", 2)).unwrap();
    let held = HeldPop::start(Arc::clone(&q), 1, Some(Arc::clone(&cache)));
    assert_eq!(held.entered(), "ns/a: Deleted@2");
    write_within(&q, "replace", |q| q.replace(Vec::new(), "3".into())).unwrap();
    held.release();
    assert_eq!(held.join(), Ok(1));
    assert!(
        drain_into(&*q, &cache).is_empty(),
        "a key whose deletion is in flight is not deleted again"
    );
    assert!(contents(&cache).is_empty());
}

/// A resync skips a key in flight, as it skips a queued one: the cache holds an older version.
fn a_resync_skips_a_key_in_flight<Q: Queue<TestObject> + 'static>(
    make: &impl Fn(QueueParts) -> Q,
    atomic: bool,
) {
    let cache = cache(&[obj("ns", "a", 1), obj("ns", "b", 1)]);
    let q = shared_queue(make, with_cache(&cache));
    q.update(obj("ns", "a", 2)).unwrap();
    let held = HeldPop::start(Arc::clone(&q), 1, Some(Arc::clone(&cache)));
    assert_eq!(held.entered(), "ns/a: Updated@2");
    write_within(&q, "resync", |q| q.resync()).unwrap();
    held.release();
    assert_eq!(held.join(), Ok(1));
    // An atomic queue's resync is applied after the change in flight: it re-delivers the
    // newer version.
    let expected: &[&str] = if atomic {
        &["ns/a: Sync@2", "ns/b: Sync@1"]
    } else {
        &["ns/b: Sync@1"]
    };
    assert_eq!(
        drain_into(&*q, &cache),
        expected,
        "no Sync of the cache's older version of the key in flight"
    );
    assert_eq!(
        contents(&cache),
        ["ns/a@2", "ns/b@1"],
        "nothing went back in time"
    );
}

/// A refused version of a key in flight (not in the cache yet) is withdrawn with the in-flight
/// version as the last known state.
fn a_refused_version_of_a_key_in_flight_is_withdrawn<Q: Queue<TestObject> + 'static>(
    make: &impl Fn(QueueParts) -> Q,
) {
    let transform = refusing_version_99();
    let cache = cache(&[]);
    let q = shared_queue(
        make,
        QueueParts {
            transform: Some(transform),
            ..with_cache(&cache)
        },
    );
    q.add(obj("ns", "a", 1)).unwrap();
    let held = HeldPop::start(Arc::clone(&q), 1, Some(Arc::clone(&cache)));
    assert_eq!(held.entered(), "ns/a: Added@1");
    let refused = write_within(&q, "a refused update", |q| q.update(obj("ns", "a", 99)));
    assert!(matches!(&refused, Err(Error::Transform { key, .. }) if key == "ns/a"));
    held.release();
    assert_eq!(held.join(), Ok(1));
    assert_eq!(
        drain_into(&*q, &cache),
        ["ns/a: Deleted~@1"],
        "the in-flight version is withdrawn"
    );
    assert!(contents(&cache).is_empty(), "no superseded version is kept");
}

/// The initial count falls once `process` has returned: whoever sees `has_synced` finds the
/// whole first relist in the cache.
fn has_synced_waits_for_process_of_the_last_initial_change<Q: Queue<TestObject> + 'static>(
    make: &impl Fn(QueueParts) -> Q,
    atomic: bool,
) {
    let cache = cache(&[]);
    let q = shared_queue(make, with_cache(&cache));
    q.replace(vec![obj("ns", "a", 1), obj("ns", "b", 2)], "2".into())
        .unwrap();
    let held = HeldPop::start(Arc::clone(&q), 1, Some(Arc::clone(&cache)));
    if atomic {
        assert_eq!(held.entered(), "initial *: ReplacedAll[ns/a@1 ns/b@2]");
        let reader = Arc::clone(&q);
        assert!(
            !within("has_synced", move || reader.has_synced()),
            "not synced while the relist is being processed"
        );
        held.release();
        assert_eq!(held.join(), Ok(1));
        assert!(q.has_synced(), "synced once its process returned");
        assert_eq!(contents(&cache), ["ns/a@1", "ns/b@2"]);
        return;
    }
    assert_eq!(held.entered(), "initial ns/a: Replaced@1");
    let reader = Arc::clone(&q);
    assert!(!within("has_synced", move || reader.has_synced()));
    held.release();
    assert_eq!(held.join(), Ok(1));
    assert!(!q.has_synced(), "b is not processed yet");

    let popper = Arc::clone(&q);
    let (inside, after) = within("the last initial pop", move || {
        let mut inside = None;
        let reader = Arc::clone(&popper);
        popper
            .pop(&mut |deltas, initial| {
                assert!(initial);
                apply(&cache, &deltas);
                inside = Some(reader.has_synced());
            })
            .unwrap();
        (inside, popper.has_synced())
    });
    assert_eq!(
        inside,
        Some(false),
        "not synced while the last initial change is being processed"
    );
    assert!(after, "synced once its process returned");
}

/// The changes of a batch that `process` has not been handed yet are in flight too.
fn changes_not_handed_over_yet_are_in_flight_too<Q: Queue<TestObject> + 'static>(
    make: &impl Fn(QueueParts) -> Q,
) {
    let cache = cache(&[]);
    let q = shared_queue(make, with_cache(&cache));
    q.add(obj("ns", "a", 1)).unwrap();
    q.add(obj("ns", "b", 1)).unwrap();
    let held = HeldPop::start(Arc::clone(&q), 2, Some(Arc::clone(&cache)));
    assert_eq!(held.entered(), "ns/a: Added@1");
    write_within(&q, "replace", |q| q.replace(Vec::new(), "2".into())).unwrap();
    write_within(&q, "resync", |q| q.resync()).unwrap();
    held.release();
    assert_eq!(held.entered(), "ns/b: Added@1");
    held.release();
    assert_eq!(held.join(), Ok(2));
    assert_eq!(
        drain_into(&*q, &cache),
        ["ns/a: Deleted~@1", "ns/b: Deleted~@1"],
        "both keys of the batch were in flight during the relist"
    );
    assert!(contents(&cache).is_empty());
}

/// A panic in `process`: the change is dropped (and counted as popped), the rest of the batch
/// goes back to the front in order, and the queue is usable, with nothing left in flight.
fn a_panicking_process_puts_the_rest_of_its_batch_back<Q: Queue<TestObject> + 'static>(
    make: &impl Fn(QueueParts) -> Q,
    atomic: bool,
) {
    if atomic {
        return a_panicking_process_puts_the_rest_of_its_writes_back(make);
    }
    let cache = cache(&[]);
    let q = shared_queue(make, with_cache(&cache));
    q.replace(
        vec![obj("ns", "a", 1), obj("ns", "b", 2), obj("ns", "c", 3)],
        "3".into(),
    )
    .unwrap();
    let mut seen = Vec::new();
    let panicked = catch_unwind(AssertUnwindSafe(|| {
        q.pop_batch(3, &mut |deltas, initial| {
            seen.push(render(&deltas, initial));
            if deltas.key() == Some("ns/b") {
                panic!("process function failed");
            }
            apply(&cache, &deltas);
            q.add(obj("ns", "d", 4)).unwrap();
        })
    }));
    assert!(panicked.is_err(), "the panic propagates out of pop_batch");
    assert_eq!(
        seen,
        ["initial ns/a: Replaced@1", "initial ns/b: Replaced@2"]
    );
    assert!(!q.has_synced(), "c is still to be processed");
    // Nothing is left in flight: a relist reads the cache again (b was never applied).
    q.replace(vec![obj("ns", "c", 5), obj("ns", "d", 5)], "5".into())
        .unwrap();
    let popped = drain_into(&*q, &cache);
    assert!(
        popped[0].starts_with("initial ns/c: Replaced@3"),
        "c, never handed over, went back to the front, still in the initial list: {popped:?}"
    );
    assert!(
        popped.iter().all(|pop| !pop.contains("ns/b")),
        "b is not in flight any more, and was never applied: nothing to delete: {popped:?}"
    );
    assert!(q.has_synced(), "the dropped change counted as popped");
    assert_eq!(
        contents(&cache),
        ["ns/c@5", "ns/d@5"],
        "a, never relisted, is deleted"
    );
}

fn try_pop_batch_never_waits_for_a_change<Q: Queue<TestObject> + 'static>(
    make: &impl Fn(QueueParts) -> Q,
) {
    let q = shared_queue(make, parts());
    let popper = Arc::clone(&q);
    assert_eq!(
        within("try_pop_batch on an empty queue", move || popper
            .try_pop_batch(5, &mut |_, _| panic!("nothing is ready"))),
        Ok(0),
        "an empty open queue: nothing, at once"
    );
    q.add(obj("ns", "a", 1)).unwrap();
    q.add(obj("ns", "b", 2)).unwrap();
    q.add(obj("ns", "c", 3)).unwrap();
    let mut seen = Vec::new();
    let mut record = |deltas: Deltas<TestObject>, initial| seen.push(render(&deltas, initial));
    assert_eq!(q.try_pop_batch(2, &mut record), Ok(2), "up to max");
    q.close();
    assert_eq!(
        q.try_pop_batch(5, &mut record),
        Ok(1),
        "closed: drains first"
    );
    assert_eq!(
        q.try_pop_batch(5, &mut |_, _| panic!("closed and empty")),
        Err(QueueClosed),
        "closed and empty"
    );
    assert_eq!(seen, ["ns/a: Added@1", "ns/b: Added@2", "ns/c: Added@3"]);
}

/// The hook is told after every write that queues something, after an empty list (it makes the
/// queue synced) and after close, without the queue's lock held (it reads the queue here: under the lock that would deadlock); a new hook
/// replaces the old one.
fn the_ready_hook_hears_every_write_and_close<Q: Queue<TestObject> + 'static>(
    make: &impl Fn(QueueParts) -> Q,
    atomic: bool,
) {
    let transform = refusing_version_99();
    let cache = cache(&[obj("ns", "cached", 1)]);
    let q = shared_queue(
        make,
        QueueParts {
            transform: Some(transform),
            ..with_cache(&cache)
        },
    );
    let calls = Arc::new(AtomicUsize::new(0));
    let hook: ReadyHook = {
        let (calls, queue) = (Arc::clone(&calls), Arc::downgrade(&q));
        Arc::new(move || {
            if let Some(queue) = queue.upgrade() {
                let _ = queue.is_closed();
            }
            calls.fetch_add(1, Ordering::SeqCst);
        })
    };
    q.set_ready_hook(hook);
    let told = |what: &str, write: BoxedWrite| {
        let before = calls.load(Ordering::SeqCst);
        let queue = Arc::clone(&q);
        within(what, move || write(&*queue));
        assert!(
            calls.load(Ordering::SeqCst) > before,
            "the ready hook is told after {what}"
        );
    };
    told("add", Box::new(|q| q.add(obj("ns", "a", 1)).unwrap()));
    told("update", Box::new(|q| q.update(obj("ns", "a", 2)).unwrap()));
    told("delete", Box::new(|q| q.delete(obj("ns", "a", 3)).unwrap()));
    told("resync", Box::new(|q| q.resync().unwrap()));
    told(
        "replace",
        Box::new(|q| q.replace(vec![obj("ns", "a", 4)], "4".into()).unwrap()),
    );
    told(
        "a refused update's tombstone",
        Box::new(|q| assert!(q.update(obj("ns", "a", 99)).is_err())),
    );
    // A consumer learns of a sync through the hook too: an empty first list queues nothing
    // but makes a fresh queue synced.
    let fresh = shared_queue(make, parts());
    let heard = Arc::new(AtomicUsize::new(0));
    fresh.set_ready_hook({
        let heard = Arc::clone(&heard);
        Arc::new(move || {
            heard.fetch_add(1, Ordering::SeqCst);
        })
    });
    fresh.replace(Vec::new(), "1".into()).unwrap();
    // An atomic queue's empty first list is one change, synced once popped.
    assert_eq!(fresh.has_synced(), !atomic);
    assert!(
        heard.load(Ordering::SeqCst) > 0,
        "the ready hook is told after an empty list that made the queue synced"
    );

    let replaced = Arc::new(AtomicBool::new(false));
    let new_hook: ReadyHook = {
        let replaced = Arc::clone(&replaced);
        Arc::new(move || replaced.store(true, Ordering::SeqCst))
    };
    q.set_ready_hook(new_hook);
    let before = calls.load(Ordering::SeqCst);
    q.add(obj("ns", "b", 1)).unwrap();
    assert!(replaced.load(Ordering::SeqCst), "the new hook is told");
    assert_eq!(
        calls.load(Ordering::SeqCst),
        before,
        "the old hook is not told any more"
    );
    replaced.store(false, Ordering::SeqCst);
    q.close();
    assert!(
        replaced.load(Ordering::SeqCst),
        "the hook is told after close"
    );
}

/// An atomic queue's [`a_panicking_process_puts_the_rest_of_its_batch_back`], on watch events
/// (its relist would be one change): the changes not handed over go back to the front in
/// order, and a relist afterwards reads the cache again.
fn a_panicking_process_puts_the_rest_of_its_writes_back<Q: Queue<TestObject> + 'static>(
    make: &impl Fn(QueueParts) -> Q,
) {
    let cache = cache(&[]);
    let q = shared_queue(make, with_cache(&cache));
    for (name, version) in [("a", 1), ("b", 2), ("c", 3)] {
        q.add(obj("ns", name, version)).unwrap();
    }
    let mut seen = Vec::new();
    let panicked = catch_unwind(AssertUnwindSafe(|| {
        q.pop_batch(3, &mut |deltas, initial| {
            seen.push(render(&deltas, initial));
            if deltas.key() == Some("ns/b") {
                panic!("process function failed");
            }
            apply(&cache, &deltas);
        })
    }));
    assert!(panicked.is_err(), "the panic propagates out of pop_batch");
    assert_eq!(seen, ["ns/a: Added@1", "ns/b: Added@2"]);
    q.replace(vec![obj("ns", "c", 5), obj("ns", "d", 5)], "5".into())
        .unwrap();
    let popped = drain_into(&*q, &cache);
    assert_eq!(
        popped,
        [
            "ns/c: Added@3",
            "ns/a: Deleted~@1",
            "ns/c: Replaced@5",
            "ns/d: Replaced@5"
        ],
        "c, never handed over, went back to the front; b was never applied: nothing to delete"
    );
    assert_eq!(contents(&cache), ["ns/c@5", "ns/d@5"]);
}

/// An atomic queue's relist reaches the cache in one step: the consumer applies it under the
/// cache's lock, so a reader sees the whole old list or the whole new one.
fn a_relist_reaches_the_cache_in_one_step<Q: Queue<TestObject> + 'static>(
    make: &impl Fn(QueueParts) -> Q,
) {
    let cache = cache(&[obj("ns", "a", 1), obj("ns", "b", 1), obj("ns", "c", 1)]);
    let q = shared_queue(make, with_cache(&cache));
    q.replace(
        vec![obj("ns", "a", 2), obj("ns", "b", 2), obj("ns", "d", 2)],
        "2".into(),
    )
    .unwrap();
    assert_eq!(q.len(), 1, "one change for the whole relist");
    let held = HeldPop::start(Arc::clone(&q), 1, Some(Arc::clone(&cache)));
    assert_eq!(
        held.entered(),
        "initial *: ReplacedAll[ns/a@2 ns/b@2 ns/d@2]"
    );
    assert_eq!(
        contents(&cache),
        ["ns/a@1", "ns/b@1", "ns/c@1"],
        "before it is applied, the old list"
    );
    held.release();
    assert_eq!(held.join(), Ok(1));
    assert_eq!(
        contents(&cache),
        ["ns/a@2", "ns/b@2", "ns/d@2"],
        "after, the new list"
    );
    assert!(q.has_synced());
}

/// An atomic queue's relist by page, once populated: each page queued as Replaced events as it
/// arrives, then one change that deletes, against the cache as it is then, what no page
/// listed.
fn a_relist_by_page_queues_its_pages_then_deletes_what_none_listed<
    Q: Queue<TestObject> + 'static,
>(
    make: &impl Fn(QueueParts) -> Q,
) {
    let cache = cache(&[]);
    let q = shared_queue(make, with_cache(&cache));
    q.add(obj("ns", "a", 1)).unwrap();
    q.add(obj("ns", "gone", 1)).unwrap();
    let mut parts = informer_store::ReplaceParts::new();
    q.replace_part(vec![obj("ns", "a", 2)], &mut parts).unwrap();
    q.add(obj("ns", "late", 1)).unwrap();
    q.replace_part(vec![obj("ns", "b", 2)], &mut parts).unwrap();
    q.replace_parts_done(parts, "2".into()).unwrap();
    assert_eq!(
        drain_into(&*q, &cache),
        [
            "ns/a: Added@1",
            "ns/gone: Added@1",
            "ns/a: Replaced@2",
            "ns/late: Added@1",
            "ns/b: Replaced@2",
            "ns/gone: Deleted~@1",
            "ns/late: Deleted~@1"
        ],
        "each page as it came, then the deletions of what no page listed"
    );
    assert_eq!(contents(&cache), ["ns/a@2", "ns/b@2"]);
}

/// A refused version of a key reads the key's state through a relist queued as one change:
/// listed there, its listed version is withdrawn; absent, there is nothing to withdraw.
fn a_refused_version_reads_its_key_through_a_relist<Q: Queue<TestObject> + 'static>(
    make: &impl Fn(QueueParts) -> Q,
) {
    let transform = refusing_version_99();
    let cache = cache(&[obj("ns", "a", 1), obj("ns", "b", 1)]);
    let q = make(QueueParts {
        transform: Some(transform),
        ..with_cache(&cache)
    });
    q.replace(vec![obj("ns", "a", 2)], "2".into()).unwrap();
    q.resync().unwrap();
    assert!(q.update(obj("ns", "a", 99)).is_err());
    assert!(q.update(obj("ns", "b", 99)).is_err());
    assert_eq!(
        drain_into(&q, &cache),
        [
            "initial ns/b: Deleted~@1",
            "initial ns/a: Replaced@2",
            "ns/a: Sync@2",
            "ns/a: Deleted~@2"
        ],
        "a's listed version is withdrawn; b, deleted by the relist, has nothing to withdraw"
    );
    assert!(contents(&cache).is_empty());
}
