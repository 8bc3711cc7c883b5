//! InOrderFifo's own rules: one event per write, in order; deletions first on relist.

use std::sync::Arc;

use informer_fifo::{InOrderFifo, InOrderFifoOptions, Queue, transform_func};
use informer_store::{KnownObjects, ReflectorStore, ThreadSafeStore};
use informer_testing::fifo::conformance::{
    HeldPop, TestObject, contents, drain, drain_into, key_func, obj, render, within,
};

fn fifo() -> InOrderFifo<TestObject> {
    InOrderFifo::new(key_func())
}

fn fifo_over(objects: &[Arc<TestObject>]) -> InOrderFifo<TestObject> {
    let cache = Arc::new(ThreadSafeStore::new(key_func()));
    for o in objects {
        cache.add(Arc::clone(o)).unwrap();
    }
    let known: Arc<dyn KnownObjects<TestObject>> = cache;
    InOrderFifo::with_options(
        key_func(),
        InOrderFifoOptions::default().known_objects(known),
    )
}

#[test]
fn every_write_is_one_event_delivered_in_arrival_order() {
    let f = fifo();
    f.add(obj("ns", "a", 1)).unwrap();
    f.add(obj("ns", "b", 2)).unwrap();
    f.update(obj("ns", "a", 3)).unwrap();
    f.update(obj("ns", "a", 3)).unwrap();
    assert_eq!(f.len(), 4);
    assert_eq!(f.queued_keys(), ["ns/a", "ns/b", "ns/a", "ns/a"]);
    assert_eq!(
        drain(&f),
        [
            "ns/a: Added@1",
            "ns/b: Added@2",
            "ns/a: Updated@3",
            "ns/a: Updated@3"
        ]
    );
}

#[test]
fn deletes_are_always_queued_and_never_deduplicated() {
    let f = fifo();
    f.delete(obj("ns", "never-seen", 1)).unwrap();
    f.delete(obj("ns", "never-seen", 2)).unwrap();
    assert_eq!(
        drain(&f),
        ["ns/never-seen: Deleted@1", "ns/never-seen: Deleted@2"]
    );
}

#[test]
fn replace_queues_deletions_first_then_replaced_in_list_order() {
    let f = fifo_over(&[obj("ns", "cached", 1), obj("ns", "kept", 2)]);
    f.add(obj("ns", "a", 3)).unwrap();
    f.update(obj("ns", "a", 4)).unwrap();
    f.add(obj("ns", "b", 5)).unwrap();
    f.replace(
        vec![obj("ns", "x", 6), obj("ns", "kept", 7), obj("ns", "x", 8)],
        "8".into(),
    )
    .unwrap();
    assert_eq!(
        drain(&f),
        [
            "ns/a: Added@3",
            "ns/a: Updated@4",
            "ns/b: Added@5",
            // queued keys in order of first appearance, each with its last queued object
            "ns/a: Deleted~@4",
            "ns/b: Deleted~@5",
            // then known keys nothing queued names
            "ns/cached: Deleted~@1",
            // then the list, in order, duplicates included
            "ns/x: Replaced@6",
            "ns/kept: Replaced@7",
            "ns/x: Replaced@8",
        ]
    );
}

#[test]
fn replace_skips_a_queued_key_whose_last_event_is_a_deletion() {
    let f = fifo();
    f.add(obj("ns", "a", 1)).unwrap();
    f.delete(obj("ns", "a", 2)).unwrap();
    f.add(obj("ns", "b", 3)).unwrap();
    f.delete(obj("ns", "b", 4)).unwrap();
    f.add(obj("ns", "b", 5)).unwrap();
    f.replace(Vec::new(), "5".into()).unwrap();
    assert_eq!(
        drain(&f),
        [
            "ns/a: Added@1",
            "ns/a: Deleted@2",
            "ns/b: Added@3",
            "ns/b: Deleted@4",
            "ns/b: Added@5",
            "ns/b: Deleted~@5",
        ]
    );
}

#[test]
fn replace_does_not_tombstone_a_known_key_that_is_queued() {
    let f = fifo_over(&[obj("ns", "a", 1)]);
    f.delete(obj("ns", "a", 2)).unwrap();
    f.replace(Vec::new(), "2".into()).unwrap();
    assert_eq!(drain(&f), ["ns/a: Deleted@2"]);
}

#[test]
fn first_replace_counts_the_whole_queue_as_the_initial_list() {
    let f = fifo_over(&[obj("ns", "a", 1)]);
    f.resync().unwrap();
    assert_eq!(
        f.len(),
        1,
        "a resync before any write queues, but is not a write"
    );
    f.replace(vec![obj("ns", "b", 2), obj("ns", "b", 3)], "3".into())
        .unwrap();
    assert_eq!(
        drain(&f),
        [
            "initial ns/a: Sync@1",
            "initial ns/a: Deleted~@1",
            "initial ns/b: Replaced@2",
            "initial ns/b: Replaced@3",
        ],
        "the events queued before the first replace and duplicate keys all count"
    );
}

#[test]
fn resync_skips_keys_named_anywhere_in_the_queue() {
    let f = fifo_over(&[obj("ns", "a", 1), obj("ns", "b", 2), obj("ns", "c", 3)]);
    f.update(obj("ns", "a", 4)).unwrap();
    f.delete(obj("ns", "b", 5)).unwrap();
    f.add(obj("ns", "z", 6)).unwrap();
    f.resync().unwrap();
    f.resync().unwrap();
    assert_eq!(
        drain(&f),
        [
            "ns/a: Updated@4",
            "ns/b: Deleted@5",
            "ns/z: Added@6",
            "ns/c: Sync@3"
        ]
    );
}

/// Every popped event carries the key the queue filed it under, tombstones included.
#[test]
fn popped_events_carry_their_key() {
    use informer_fifo::QueueExt;
    let f = fifo_over(&[obj("ns", "gone", 1)]);
    f.add(obj("ns", "a", 1)).unwrap();
    f.replace(vec![obj("ns", "a", 2)], "2".into()).unwrap();
    let mut keys = Vec::new();
    while !f.is_empty() {
        f.pop_with(|deltas, _| keys.push(deltas.key().map(str::to_owned)))
            .unwrap();
    }
    let want = ["ns/a", "ns/gone", "ns/a"].map(|k| Some(k.to_owned()));
    assert_eq!(keys, want);
}

fn shared_fifo_over(cache: &Arc<ThreadSafeStore<TestObject>>) -> Arc<InOrderFifo<TestObject>> {
    let known: Arc<dyn KnownObjects<TestObject>> = cache.clone();
    let transform = transform_func(|o: Arc<TestObject>| match o.resource_version {
        99 => Err("refused by transform".into()),
        _ => Ok(o),
    });
    Arc::new(InOrderFifo::with_options(
        key_func(),
        InOrderFifoOptions::default()
            .known_objects(known)
            .transform(transform),
    ))
}

/// One batch can hold several events of a key: the key's state in flight is its last one. Here
/// a deletion: a relist does not tombstone the key and a refused version withdraws nothing.
#[test]
fn a_key_in_flight_is_read_from_its_last_event_in_the_batch() {
    let cache = Arc::new(ThreadSafeStore::new(key_func()));
    let f = shared_fifo_over(&cache);
    f.add(obj("ns", "a", 1)).unwrap();
    f.delete(obj("ns", "a", 2)).unwrap();
    f.add(obj("ns", "b", 3)).unwrap();
    f.update(obj("ns", "b", 4)).unwrap();
    let held = HeldPop::start(f.clone(), 4, Some(Arc::clone(&cache)));
    assert_eq!(held.entered(), "ns/a: Added@1");
    let writer = Arc::clone(&f);
    within("writes while a batch is in flight", move || {
        assert!(writer.update(obj("ns", "a", 99)).is_err());
        assert!(writer.update(obj("ns", "b", 99)).is_err());
        writer.replace(Vec::new(), "5".into()).unwrap();
    });
    for expected in ["ns/a: Deleted@2", "ns/b: Added@3", "ns/b: Updated@4"] {
        held.release();
        assert_eq!(held.entered(), expected);
    }
    held.release();
    assert_eq!(held.join(), Ok(4));
    assert_eq!(
        drain_into(&*f, &cache),
        ["ns/b: Deleted~@4"],
        "b (last in flight: Updated@4) is withdrawn, which the relist finds queued; a, whose \
         last event in flight is a deletion, is neither withdrawn nor deleted again"
    );
    assert!(contents(&cache).is_empty());
}

/// The first relist arrives while a batch taken before it (which it does not count, as the
/// queue had not been written to) is processed, and that batch panics: what is put back goes
/// in front of the relist, so it counts too, and the initial list still ends with its last
/// event.
#[test]
fn a_first_relist_during_a_batch_that_panics_counts_what_is_put_back() {
    let cache = Arc::new(ThreadSafeStore::new(key_func()));
    cache.add(obj("ns", "x", 1)).unwrap();
    cache.add(obj("ns", "y", 1)).unwrap();
    let f = shared_fifo_over(&cache);
    f.resync().unwrap();
    assert_eq!(f.len(), 2);
    let panicked = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        f.pop_batch(2, &mut |_, _| {
            f.replace(
                vec![obj("ns", "x", 2), obj("ns", "y", 2), obj("ns", "z", 2)],
                "2".into(),
            )
            .unwrap();
            panic!("process function failed");
        })
    }));
    assert!(panicked.is_err());
    let mut popped = Vec::new();
    while !f.is_empty() {
        assert!(!f.has_synced(), "not synced with {popped:?} popped");
        f.pop(&mut |d, i| popped.push(render(&d, i))).unwrap();
    }
    assert!(f.has_synced());
    assert_eq!(
        popped,
        [
            "initial ns/y: Sync@1",
            "initial ns/x: Replaced@2",
            "initial ns/y: Replaced@2",
            "initial ns/z: Replaced@2"
        ]
    );
}

#[test]
fn the_counts_follow_every_event_and_pop() {
    let f = informer_fifo::InOrderFifo::new(informer_testing::fifo::conformance::key_func());
    f.add(informer_testing::fifo::conformance::obj("ns", "a", 1))
        .unwrap();
    f.update(informer_testing::fifo::conformance::obj("ns", "a", 2))
        .unwrap();
    let counts = informer_fifo::Queue::counts(&f);
    assert_eq!(
        (
            counts.queued,
            counts.written,
            counts.coalesced,
            counts.popped
        ),
        (2, 2, 0, 0)
    );
    informer_fifo::QueueExt::pop_with(&f, |_, _| ()).unwrap();
    let counts = informer_fifo::Queue::counts(&f);
    assert_eq!((counts.queued, counts.popped), (1, 1));
}
