//! DeltaFifo's own rules: coalescing per key, delete dedup, relist tombstones, resync, sync.

use std::sync::Arc;

use informer_fifo::{
    DeletedObject, Delta, DeltaFifo, DeltaFifoOptions, DeltaType, Queue, QueueExt, transform_func,
};
use informer_store::{KnownObjects, ReflectorStore, Store, ThreadSafeStore};
use informer_testing::fifo::conformance::{
    BOUND, HeldPop, TestObject, apply, contents, drain, drain_into, key_func, obj, render,
    render_delta, within,
};

fn fifo() -> DeltaFifo<TestObject> {
    DeltaFifo::new(key_func())
}

fn cache(objects: &[Arc<TestObject>]) -> Arc<ThreadSafeStore<TestObject>> {
    let cache = Arc::new(ThreadSafeStore::new(key_func()));
    for o in objects {
        cache.add(Arc::clone(o)).unwrap();
    }
    cache
}

fn fifo_over(cache: &Arc<ThreadSafeStore<TestObject>>) -> DeltaFifo<TestObject> {
    let known: Arc<dyn KnownObjects<TestObject>> = cache.clone();
    DeltaFifo::with_options(key_func(), DeltaFifoOptions::default().known_objects(known))
}

#[test]
fn a_key_keeps_its_place_however_many_deltas_pile_up() {
    let f = fifo();
    f.add(obj("ns", "a", 1)).unwrap();
    f.add(obj("ns", "b", 2)).unwrap();
    f.update(obj("ns", "a", 3)).unwrap();
    f.update(obj("ns", "b", 4)).unwrap();
    f.update(obj("ns", "a", 5)).unwrap();
    assert_eq!(f.queued_keys(), ["ns/a", "ns/b"]);
    assert_eq!(f.len(), 2);
    assert_eq!(
        drain(&f),
        [
            "ns/a: Added@1 Updated@3 Updated@5",
            "ns/b: Added@2 Updated@4"
        ]
    );
}

#[test]
fn a_popped_key_requeues_at_the_back() {
    let f = fifo();
    f.add(obj("ns", "a", 1)).unwrap();
    f.add(obj("ns", "b", 2)).unwrap();
    f.pop_with(|_, _| ()).unwrap();
    f.update(obj("ns", "a", 3)).unwrap();
    assert_eq!(drain(&f), ["ns/b: Added@2", "ns/a: Updated@3"]);
}

#[test]
fn repeated_adds_and_syncs_are_not_deduplicated() {
    let cache = cache(&[obj("ns", "a", 1)]);
    let f = fifo_over(&cache);
    f.add(obj("ns", "b", 2)).unwrap();
    f.add(obj("ns", "b", 2)).unwrap();
    f.resync().unwrap();
    f.pop_with(|_, _| ()).unwrap(); // ns/b
    f.pop_with(|_, _| ()).unwrap(); // ns/a
    f.resync().unwrap();
    f.resync().unwrap();
    assert_eq!(drain(&f), ["ns/a: Sync@1"]);
    let f = fifo();
    f.add(obj("ns", "b", 2)).unwrap();
    f.add(obj("ns", "b", 2)).unwrap();
    assert_eq!(drain(&f), ["ns/b: Added@2 Added@2"]);
}

#[test]
fn two_watch_deletes_collapse_into_the_older() {
    let cache = cache(&[obj("ns", "a", 1)]);
    let f = fifo_over(&cache);
    f.delete(obj("ns", "a", 2)).unwrap();
    f.delete(obj("ns", "a", 3)).unwrap();
    assert_eq!(drain(&f), ["ns/a: Deleted@2"]);
}

#[test]
fn a_relist_tombstone_after_a_watch_delete_is_absorbed() {
    let f = fifo();
    f.add(obj("ns", "a", 1)).unwrap();
    f.delete(obj("ns", "a", 2)).unwrap();
    f.replace(Vec::new(), "3".into()).unwrap();
    assert_eq!(
        drain(&f),
        ["ns/a: Added@1 Deleted@2"],
        "the watch's delete carries the final state: the tombstone adds nothing"
    );
}

#[test]
fn a_watch_delete_after_a_relist_tombstone_replaces_it() {
    let f = fifo();
    f.add(obj("ns", "a", 1)).unwrap();
    f.replace(Vec::new(), "2".into()).unwrap();
    f.delete(obj("ns", "a", 3)).unwrap();
    assert_eq!(drain(&f), ["ns/a: Added@1 Deleted@3"]);
}

#[test]
fn only_the_two_newest_deletes_are_compared() {
    let f = fifo();
    f.add(obj("ns", "a", 1)).unwrap();
    f.delete(obj("ns", "a", 2)).unwrap();
    f.add(obj("ns", "a", 3)).unwrap();
    f.delete(obj("ns", "a", 4)).unwrap();
    assert_eq!(drain(&f), ["ns/a: Added@1 Deleted@2 Added@3 Deleted@4"]);
}

#[test]
fn delete_of_a_key_neither_queued_nor_known_is_ignored() {
    let f = fifo();
    f.delete(obj("ns", "a", 1)).unwrap();
    assert!(
        f.is_empty(),
        "without known objects, an unqueued key is ignored"
    );
    assert!(
        f.has_synced(),
        "an ignored delete still counts as a first write"
    );

    let cache = cache(&[obj("ns", "known", 1)]);
    let f = fifo_over(&cache);
    f.delete(obj("ns", "unknown", 1)).unwrap();
    assert!(f.is_empty(), "a key the cache lacks is ignored too");
    f.delete(obj("ns", "known", 2)).unwrap();
    f.add(obj("ns", "queued", 3)).unwrap();
    f.delete(obj("ns", "queued", 4)).unwrap();
    assert_eq!(
        drain(&f),
        ["ns/known: Deleted@2", "ns/queued: Added@3 Deleted@4"],
        "a known or queued key's delete is queued"
    );
}

#[test]
fn replace_emits_replaced_for_every_listed_object_in_list_order() {
    let f = fifo();
    f.replace(
        vec![
            obj("ns", "c", 1),
            obj("ns", "a", 2),
            obj("ns", "b", 3),
            obj("ns", "a", 4),
        ],
        "4".into(),
    )
    .unwrap();
    assert_eq!(
        drain(&f),
        [
            "initial ns/c: Replaced@1",
            "initial ns/a: Replaced@2 Replaced@4",
            "initial ns/b: Replaced@3"
        ],
        "a duplicate key in the list queues both objects under one entry"
    );
}

#[test]
fn replace_emits_sync_when_replaced_is_turned_off() {
    let f = DeltaFifo::with_options(
        key_func(),
        DeltaFifoOptions::default().emit_delta_type_replaced(false),
    );
    f.replace(vec![obj("ns", "a", 1)], "1".into()).unwrap();
    assert_eq!(drain(&f), ["initial ns/a: Sync@1"]);
}

#[test]
fn replace_counts_duplicate_keys_once_towards_sync() {
    let f = fifo();
    f.replace(vec![obj("ns", "a", 1), obj("ns", "a", 2)], "2".into())
        .unwrap();
    assert!(!f.has_synced());
    f.pop_with(|_, initial| assert!(initial)).unwrap();
    assert!(f.has_synced(), "one key, one pop");
}

#[test]
fn replace_tombstones_queued_keys_the_list_lacks_with_the_newest_queued_object() {
    let f = fifo();
    f.add(obj("ns", "a", 1)).unwrap();
    f.update(obj("ns", "a", 2)).unwrap();
    f.add(obj("ns", "b", 3)).unwrap();
    f.replace(vec![obj("ns", "b", 4)], "4".into()).unwrap();
    f.replace(vec![obj("ns", "b", 5)], "5".into()).unwrap();
    assert_eq!(
        drain(&f),
        [
            "ns/a: Added@1 Updated@2 Deleted~@2",
            "ns/b: Added@3 Replaced@4 Replaced@5",
        ],
        "the second relist's tombstone (newer) replaces the first; it carries the object of \
         the first tombstone"
    );
}

#[test]
fn replace_tombstones_known_keys_the_list_lacks_with_the_cached_object() {
    let cache = cache(&[obj("ns", "a", 1), obj("ns", "b", 2), obj("ns", "c", 3)]);
    let f = fifo_over(&cache);
    f.update(obj("ns", "c", 4)).unwrap();
    f.replace(vec![obj("ns", "b", 5)], "5".into()).unwrap();
    assert_eq!(
        drain(&f),
        [
            "ns/c: Updated@4 Deleted~@4",
            "ns/b: Replaced@5",
            "ns/a: Deleted~@1"
        ],
        "a queued key's tombstone carries the queued object, not the cache's; deletions of \
         known keys come after the listed objects"
    );
}

#[test]
fn replace_tombstone_carries_no_object_when_the_cache_lost_it() {
    // A cache whose key list names a key it no longer holds.
    struct Forgetful;
    impl KnownObjects<TestObject> for Forgetful {
        fn list_keys(&self) -> Vec<String> {
            vec!["ns/ghost".into()]
        }
        fn get_by_key(&self, _: &str) -> Option<Arc<TestObject>> {
            None
        }
    }
    let f = DeltaFifo::with_options(
        key_func(),
        DeltaFifoOptions::default().known_objects(Arc::new(Forgetful)),
    );
    f.replace(Vec::new(), "1".into()).unwrap();
    let popped = f.pop_with(|deltas, _| deltas.into_vec()).unwrap();
    match popped.as_slice() {
        [Delta::Deleted(DeletedObject::Tombstone(t))] => {
            assert_eq!(t.key, "ns/ghost");
            assert!(t.obj.is_none());
        }
        other => panic!("expected one tombstone, got {other:?}"),
    }
    f.resync().unwrap();
    assert!(f.is_empty(), "resync skips a key the cache cannot produce");
}

#[test]
fn first_replace_counts_its_deletions_towards_sync() {
    let cache = cache(&[obj("ns", "gone", 1)]);
    let f = fifo_over(&cache);
    f.resync().unwrap();
    assert!(!f.has_synced(), "a resync is not a first write");
    f.replace(vec![obj("ns", "a", 2)], "2".into()).unwrap();
    let mut popped = Vec::new();
    while !f.has_synced() {
        f.pop_with(|d, i| popped.push(render(&d, i))).unwrap();
    }
    assert_eq!(
        popped,
        [
            "initial ns/gone: Sync@1 Deleted~@1",
            "initial ns/a: Replaced@2"
        ]
    );
    assert!(f.is_empty());
}

#[test]
fn resync_skips_keys_with_queued_deltas_and_does_not_transform() {
    let cache = cache(&[obj("ns", "a", 1), obj("ns", "b", 2)]);
    let known: Arc<dyn KnownObjects<TestObject>> = cache.clone();
    let f = DeltaFifo::with_options(
        key_func(),
        DeltaFifoOptions::default()
            .known_objects(known)
            .transform(transform_func(|_| Err("transform must not run".into()))),
    );
    f.resync().unwrap();
    f.resync().unwrap();
    let mut popped = drain(&f);
    popped.sort();
    assert_eq!(
        popped,
        ["initial ns/a: Sync@1", "initial ns/b: Sync@2"],
        "the second resync adds nothing: both keys are queued; a pop before any write is in \
         the initial list"
    );
}

#[test]
fn delete_is_transformed_only_when_queued() {
    let f = DeltaFifo::with_options(
        key_func(),
        DeltaFifoOptions::default().transform(transform_func(|_| Err("no".into()))),
    );
    f.delete(obj("ns", "a", 1))
        .expect("an ignored delete never runs the transform");
}

/// A relist with one object the transform refuses used to be refused whole, so the informer
/// relisted forever and never synced. Now the rest applies: the refused object counts as absent.
#[test]
fn a_failing_transform_on_replace_refuses_only_that_object() {
    let cache = cache(&[obj("ns", "cached", 1)]);
    let known: Arc<dyn KnownObjects<TestObject>> = cache.clone();
    let f = DeltaFifo::with_options(
        key_func(),
        DeltaFifoOptions::default()
            .known_objects(known)
            .transform(transform_func(|o: Arc<TestObject>| {
                if o.name == "bad" {
                    Err("bad".into())
                } else {
                    Ok(o)
                }
            })),
    );
    f.replace(vec![obj("ns", "a", 1), obj("ns", "bad", 2)], "2".into())
        .expect("the rest of the list applies");
    assert_eq!(f.queued_keys(), ["ns/a", "ns/cached"]);
    assert!(!f.has_synced());
    let mut popped = Vec::new();
    while !f.has_synced() {
        f.pop(&mut |deltas, _| popped.push(render_delta(deltas.newest())))
            .unwrap();
    }
    assert_eq!(popped, ["Replaced@1", "Deleted~@1"]);
}

#[test]
fn the_queue_reports_the_cache_delete_by_key_can_apply() {
    // A consumer applies a tombstone by key; the cache ends with exactly the listed objects.
    let cache = cache(&[obj("ns", "a", 1), obj("ns", "b", 2)]);
    let f = fifo_over(&cache);
    f.replace(vec![obj("ns", "b", 3), obj("ns", "c", 4)], "4".into())
        .unwrap();
    f.close();
    while f
        .pop(&mut |deltas, _| match deltas.newest() {
            Delta::Deleted(DeletedObject::Tombstone(t)) => {
                cache.delete_by_key(&t.key).unwrap();
            }
            Delta::Deleted(DeletedObject::Object(o)) => cache.delete(o.clone()).unwrap(),
            d => cache.update(d.object().unwrap().clone()).unwrap(),
        })
        .is_ok()
    {}
    let mut keys = cache.list_keys();
    keys.sort();
    assert_eq!(keys, ["ns/b", "ns/c"]);
    assert_eq!(cache.get_by_key("ns/b").unwrap().resource_version, 3);
}

#[test]
fn delta_type_of_every_variant() {
    let o = obj("ns", "a", 1);
    for kind in [
        DeltaType::Added,
        DeltaType::Updated,
        DeltaType::Deleted,
        DeltaType::Replaced,
        DeltaType::Sync,
    ] {
        let d = Delta::new(kind, o.clone());
        assert_eq!(d.delta_type(), kind);
        assert_eq!(d.object(), Some(&o));
    }
}

/// A popped key's deltas carry the key the queue filed them under, for live changes and for the
/// tombstones of a relist alike, so the consumer never computes it again.
#[test]
fn popped_deltas_carry_their_key() {
    let cache = cache(&[obj("ns", "gone", 1)]);
    let f = fifo_over(&cache);
    f.add(obj("ns", "a", 1)).unwrap();
    f.update(obj("ns", "a", 2)).unwrap();
    f.replace(vec![obj("ns", "a", 3), obj("other", "b", 1)], "3".into())
        .unwrap();
    let mut keys = Vec::new();
    while !f.is_empty() {
        f.pop_with(|deltas, _| keys.push(deltas.key().map(str::to_owned)))
            .unwrap();
    }
    assert_eq!(
        keys,
        [Some("ns/a"), Some("other/b"), Some("ns/gone")].map(|k| k.map(str::to_owned))
    );
}

fn shared_fifo_over(
    cache: &Arc<ThreadSafeStore<TestObject>>,
    transform: Option<informer_fifo::TransformFunc<TestObject>>,
) -> Arc<DeltaFifo<TestObject>> {
    let known: Arc<dyn KnownObjects<TestObject>> = cache.clone();
    let mut options = DeltaFifoOptions::default().known_objects(known);
    options.transform = transform;
    Arc::new(DeltaFifo::with_options(key_func(), options))
}

/// An Added taken off the queue but not in the cache yet, then a watch delete: the key is not
/// unknown, so the delete is queued (else the cache would keep the object forever).
#[test]
fn a_delete_arriving_while_an_added_is_in_flight_is_queued() {
    let cache = cache(&[]);
    let f = shared_fifo_over(&cache, None);
    f.add(obj("ns", "a", 1)).unwrap();
    let held = HeldPop::start(f.clone(), 1, Some(Arc::clone(&cache)));
    assert_eq!(held.entered(), "ns/a: Added@1");
    let writer = Arc::clone(&f);
    within("delete", move || writer.delete(obj("ns", "a", 2))).unwrap();
    held.release();
    assert_eq!(held.join(), Ok(1));
    assert_eq!(drain_into(&*f, &cache), ["ns/a: Deleted@2"]);
    assert!(contents(&cache).is_empty(), "the delete reached the cache");
}

/// A deletion in flight: once applied the key is unknown, so a second delete is ignored, as it
/// would be after the pop.
#[test]
fn a_delete_of_a_key_whose_deletion_is_in_flight_is_ignored() {
    let cache = cache(&[obj("ns", "a", 1)]);
    let f = shared_fifo_over(&cache, None);
    f.delete(obj("ns", "a", 2)).unwrap();
    let held = HeldPop::start(f.clone(), 1, Some(Arc::clone(&cache)));
    assert_eq!(held.entered(), "ns/a: Deleted@2");
    let writer = Arc::clone(&f);
    within("delete", move || writer.delete(obj("ns", "a", 3))).unwrap();
    held.release();
    assert_eq!(held.join(), Ok(1));
    assert!(drain_into(&*f, &cache).is_empty());
    assert!(contents(&cache).is_empty());
}

/// A delete's transform runs outside the lock (a pop goes on meanwhile); the delete checks again
/// once transformed, so a key popped and deleted in between is not deleted a second time.
#[test]
fn a_delete_checks_the_key_again_once_transformed() {
    let (entered_tx, entered) = std::sync::mpsc::channel();
    let (release, released) = std::sync::mpsc::channel::<()>();
    let (entered_tx, released) = (
        std::sync::Mutex::new(entered_tx),
        std::sync::Mutex::new(released),
    );
    let transform = transform_func(move |o: Arc<TestObject>| {
        if o.resource_version == 5 {
            entered_tx.lock().unwrap().send(()).unwrap();
            released.lock().unwrap().recv_timeout(BOUND).unwrap();
        }
        Ok(o)
    });
    let cache = cache(&[obj("ns", "a", 1)]);
    let f = shared_fifo_over(&cache, Some(transform));
    f.delete(obj("ns", "a", 2)).unwrap();
    let deleter = {
        let f = Arc::clone(&f);
        std::thread::spawn(move || f.delete(obj("ns", "a", 5)))
    };
    entered.recv_timeout(BOUND).unwrap();
    // The delete passed its first check (a is queued) and is in its transform.
    let (popper, applied) = (Arc::clone(&f), Arc::clone(&cache));
    within("a pop while a delete's transform runs", move || {
        popper.pop(&mut |deltas, _| apply(&applied, &deltas))
    })
    .unwrap();
    assert!(contents(&cache).is_empty(), "a is deleted from the cache");
    release.send(()).unwrap();
    within("the delete returns", move || deleter.join().unwrap()).unwrap();
    assert!(
        drain_into(&*f, &cache).is_empty(),
        "a was unknown by the time the delete was ready to be queued"
    );
}

/// A panic in the middle of a batch: a key of the batch that was queued again meanwhile gets its
/// put-back deltas in front of the newer ones, at the front of the queue.
#[test]
fn a_key_put_back_after_a_panic_keeps_its_newer_deltas_behind() {
    let cache = cache(&[]);
    let f = shared_fifo_over(&cache, None);
    f.replace(
        vec![obj("ns", "a", 1), obj("ns", "b", 2), obj("ns", "c", 3)],
        "3".into(),
    )
    .unwrap();
    let panicked = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        f.pop_batch(3, &mut |deltas, _| {
            if deltas.key() == Some("ns/b") {
                panic!("process function failed");
            }
            apply(&cache, &deltas);
            f.add(obj("ns", "c", 4)).unwrap();
            f.add(obj("ns", "d", 4)).unwrap();
        })
    }));
    assert!(panicked.is_err());
    assert!(!f.has_synced());
    assert_eq!(
        drain_into(&*f, &cache),
        ["initial ns/c: Replaced@3 Added@4", "ns/d: Added@4"],
        "c keeps its place at the front, with the Added queued meanwhile behind its Replaced"
    );
    assert!(f.has_synced(), "one entry for c, counted once");
    // Nothing is left in flight: b (dropped, never applied) is unknown, its delete ignored.
    let f = shared_fifo_over(&cache, None);
    f.delete(obj("ns", "b", 5)).unwrap();
    assert!(drain(&*f).is_empty());
}

/// The first relist arrives while a batch taken before it (which it does not count) is being
/// processed, and that batch panics: the initial list still ends exactly with its last entry.
#[test]
fn a_first_relist_during_a_batch_that_panics_counts_what_it_queued() {
    let cache = cache(&[obj("ns", "x", 1), obj("ns", "y", 1)]);
    let f = shared_fifo_over(&cache, None);
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
            "initial ns/y: Sync@1 Replaced@2",
            "initial ns/x: Replaced@2",
            "initial ns/z: Replaced@2"
        ],
        "y, put back, absorbed the relist's entry for it"
    );
}

#[test]
fn the_counts_follow_writes_coalescing_and_pops() {
    let f = fifo();
    f.add(obj("ns", "a", 1)).unwrap();
    f.add(obj("ns", "b", 2)).unwrap();
    f.update(obj("ns", "a", 3)).unwrap();
    let counts = f.counts();
    assert_eq!(
        (
            counts.queued,
            counts.written,
            counts.coalesced,
            counts.popped
        ),
        (2, 3, 1, 0)
    );
    f.pop_with(|_, _| ()).unwrap();
    f.replace(vec![obj("ns", "c", 4)], "5".into()).unwrap();
    let counts = f.counts();
    // The replace lists `c` and tombstones `b` (queued, not listed): two more writes; the
    // tombstone joins `b`'s queued deltas.
    assert_eq!(
        (
            counts.queued,
            counts.written,
            counts.coalesced,
            counts.popped
        ),
        (2, 5, 2, 1)
    );
    drain(&f);
    assert_eq!((f.counts().queued, f.counts().popped), (0, 3));
}
