//! loom models of every blocking and wake-up path of the queue.
//!
//! Run with `RUSTFLAGS="--cfg informer_loom" cargo test -p informer-fifo --release --test loom`.
#![cfg(informer_loom)]

use std::sync::Arc;

use informer_fifo::{
    DeltaFifo, DeltaFifoOptions, InOrderFifo, InOrderFifoOptions, Queue, QueueClosed,
};
use informer_store::{KnownObjects, ReflectorStore, ThreadSafeStore};
use informer_testing::fifo::conformance::{TestObject, apply, contents, key_func, obj, render};
use loom::thread;

fn pop_rendered(q: &dyn Queue<TestObject>) -> Result<String, QueueClosed> {
    let mut out = String::new();
    q.pop(&mut |d, i| out = render(&d, i))?;
    Ok(out)
}

#[test]
fn pop_blocked_while_add_runs_gets_the_item() {
    loom::model(|| {
        let q = Arc::new(DeltaFifo::new(key_func()));
        let popper = {
            let q = Arc::clone(&q);
            thread::spawn(move || pop_rendered(&*q))
        };
        q.add(obj("ns", "a", 1)).unwrap();
        assert_eq!(popper.join().unwrap(), Ok("ns/a: Added@1".to_owned()));
        assert!(q.is_empty());
    });
}

#[test]
fn close_wakes_every_blocked_pop() {
    loom::model(|| {
        let q = Arc::new(DeltaFifo::<TestObject>::new(key_func()));
        let poppers: Vec<_> = (0..2)
            .map(|_| {
                let q = Arc::clone(&q);
                thread::spawn(move || pop_rendered(&*q))
            })
            .collect();
        q.close();
        for popper in poppers {
            assert_eq!(popper.join().unwrap(), Err(QueueClosed));
        }
    });
}

#[test]
fn close_after_add_lets_exactly_one_pop_drain_the_item() {
    loom::model(|| {
        let q = Arc::new(DeltaFifo::new(key_func()));
        let poppers: Vec<_> = (0..2)
            .map(|_| {
                let q = Arc::clone(&q);
                thread::spawn(move || pop_rendered(&*q))
            })
            .collect();
        q.add(obj("ns", "a", 1)).unwrap();
        q.close();
        let mut results: Vec<_> = poppers.into_iter().map(|p| p.join().unwrap()).collect();
        results.sort();
        assert_eq!(results, [Ok("ns/a: Added@1".to_owned()), Err(QueueClosed)]);
    });
}

#[test]
fn replace_racing_pop_delivers_a_consistent_history() {
    loom::model(|| {
        let q = Arc::new(DeltaFifo::new(key_func()));
        q.add(obj("ns", "a", 1)).unwrap();
        let popper = {
            let q = Arc::clone(&q);
            thread::spawn(move || pop_rendered(&*q))
        };
        q.replace(vec![obj("ns", "b", 2)], "2".into()).unwrap();
        let first = popper.join().unwrap().unwrap();
        // Popped before the relist: the relist no longer knows "a" (no cache), so no tombstone.
        // Popped after: "a" carries the relist's tombstone.
        assert!(
            first == "ns/a: Added@1" || first == "ns/a: Added@1 Deleted~@1",
            "{first}"
        );
        assert_eq!(pop_rendered(&*q), Ok("ns/b: Replaced@2".to_owned()));
        assert!(q.is_empty());
        assert!(q.has_synced());
    });
}

#[test]
fn first_replace_racing_pop_counts_the_initial_list() {
    loom::model(|| {
        let q = Arc::new(DeltaFifo::new(key_func()));
        let popper = {
            let q = Arc::clone(&q);
            thread::spawn(move || pop_rendered(&*q))
        };
        q.replace(vec![obj("ns", "a", 1), obj("ns", "b", 2)], "2".into())
            .unwrap();
        assert_eq!(
            popper.join().unwrap(),
            Ok("initial ns/a: Replaced@1".to_owned())
        );
        assert!(!q.has_synced());
        assert_eq!(pop_rendered(&*q), Ok("initial ns/b: Replaced@2".to_owned()));
        assert!(q.has_synced());
    });
}

#[test]
fn in_order_pop_blocked_while_add_runs_gets_the_item() {
    loom::model(|| {
        let q = Arc::new(InOrderFifo::new(key_func()));
        let popper = {
            let q = Arc::clone(&q);
            thread::spawn(move || pop_rendered(&*q))
        };
        q.add(obj("ns", "a", 1)).unwrap();
        assert_eq!(popper.join().unwrap(), Ok("ns/a: Added@1".to_owned()));
    });
}

#[test]
fn in_order_replace_racing_pop_delivers_a_consistent_history() {
    loom::model(|| {
        let q = Arc::new(InOrderFifo::new(key_func()));
        q.add(obj("ns", "a", 1)).unwrap();
        let popper = {
            let q = Arc::clone(&q);
            thread::spawn(move || pop_rendered(&*q))
        };
        q.replace(vec![obj("ns", "b", 2)], "2".into()).unwrap();
        assert_eq!(popper.join().unwrap(), Ok("ns/a: Added@1".to_owned()));
        let mut rest = Vec::new();
        while !q.is_empty() {
            rest.push(pop_rendered(&*q).unwrap());
        }
        // Popped before the relist: no tombstone for "a". After: one, before the relist's item.
        assert!(
            rest == ["ns/b: Replaced@2"] || rest == ["ns/a: Deleted~@1", "ns/b: Replaced@2"],
            "{rest:?}"
        );
    });
}

/// A queue of `kind` over `cache`, and a pop that applies what it pops to the cache (with the
/// queue's lock released, as every pop does).
fn cached(in_order: bool, cache: &Arc<ThreadSafeStore<TestObject>>) -> Arc<dyn Queue<TestObject>> {
    let known: Arc<dyn KnownObjects<TestObject>> = cache.clone();
    if in_order {
        Arc::new(InOrderFifo::with_options(
            key_func(),
            InOrderFifoOptions::default().known_objects(known),
        ))
    } else {
        Arc::new(DeltaFifo::with_options(
            key_func(),
            DeltaFifoOptions::default().known_objects(known),
        ))
    }
}

fn pop_applying(
    q: &dyn Queue<TestObject>,
    cache: &ThreadSafeStore<TestObject>,
) -> Result<(), QueueClosed> {
    q.pop(&mut |deltas, _| apply(cache, &deltas))
}

fn drain_applying(q: &dyn Queue<TestObject>, cache: &ThreadSafeStore<TestObject>) {
    q.close();
    while pop_applying(q, cache).is_ok() {}
}

/// One writer racing a pop whose change may be in flight (taken, not yet in the cache) while
/// the write runs: whatever the interleaving, the cache ends as the writer left it.
fn writer_racing_an_unlocked_pop(
    in_order: bool,
    cached_before: &[(&str, u64)],
    queued_before: impl Fn(&dyn Queue<TestObject>),
    write: impl Fn(&dyn Queue<TestObject>),
    expected: &[&str],
) {
    let cache = Arc::new(ThreadSafeStore::new(key_func()));
    for (name, version) in cached_before {
        informer_store::Store::upsert(&*cache, obj("ns", name, *version)).unwrap();
    }
    let q = cached(in_order, &cache);
    queued_before(&*q);
    let popper = {
        let (q, cache) = (Arc::clone(&q), Arc::clone(&cache));
        thread::spawn(move || pop_applying(&*q, &cache))
    };
    write(&*q);
    popper.join().unwrap().unwrap();
    drain_applying(&*q, &cache);
    assert_eq!(contents(&cache), expected);
}

#[test]
fn relist_racing_an_unlocked_pop_deletes_the_key_in_flight() {
    for in_order in [false, true] {
        loom::model(move || {
            writer_racing_an_unlocked_pop(
                in_order,
                &[],
                |q| q.add(obj("ns", "a", 1)).unwrap(),
                |q| q.replace(vec![obj("ns", "b", 2)], "2".into()).unwrap(),
                &["ns/b@2"],
            );
        });
    }
}

#[test]
fn delete_racing_an_unlocked_pop_of_the_added_is_not_lost() {
    loom::model(|| {
        writer_racing_an_unlocked_pop(
            false,
            &[],
            |q| q.add(obj("ns", "a", 1)).unwrap(),
            |q| q.delete(obj("ns", "a", 2)).unwrap(),
            &[],
        );
    });
}

#[test]
fn resync_racing_an_unlocked_pop_never_goes_back_in_time() {
    for in_order in [false, true] {
        loom::model(move || {
            writer_racing_an_unlocked_pop(
                in_order,
                &[("a", 1)],
                |q| q.update(obj("ns", "a", 2)).unwrap(),
                |q| q.resync().unwrap(),
                &["ns/a@2"],
            );
        });
    }
}

/// Whoever sees the queue synced finds the first relist in the cache: the count falls only once
/// `process` has returned.
#[test]
fn has_synced_is_seen_only_once_the_initial_list_is_in_the_cache() {
    loom::model(|| {
        let cache = Arc::new(ThreadSafeStore::new(key_func()));
        let q = cached(false, &cache);
        q.replace(vec![obj("ns", "a", 1)], "1".into()).unwrap();
        let popper = {
            let (q, cache) = (Arc::clone(&q), Arc::clone(&cache));
            thread::spawn(move || pop_applying(&*q, &cache))
        };
        if q.has_synced() {
            assert_eq!(contents(&cache), ["ns/a@1"]);
        }
        popper.join().unwrap().unwrap();
        assert!(q.has_synced());
    });
}

fn atomic(cache: &Arc<ThreadSafeStore<TestObject>>) -> Arc<dyn Queue<TestObject>> {
    let known: Arc<dyn KnownObjects<TestObject>> = cache.clone();
    let refuse_99 = informer_fifo::transform_func(|o: Arc<TestObject>| {
        if o.resource_version == 99 {
            return Err("refused".into());
        }
        Ok(o)
    });
    Arc::new(InOrderFifo::with_options(
        key_func(),
        InOrderFifoOptions::default()
            .known_objects(known)
            .transform(refuse_99)
            .atomic(true),
    ))
}

/// An atomic relist racing its pop and a reader of the cache: the pop applies it to the cache
/// in one step, so the reader sees the whole old list or the whole new one, never a mix.
#[test]
fn atomic_relist_reaches_a_reader_whole() {
    loom::model(|| {
        let cache = Arc::new(ThreadSafeStore::new(key_func()));
        for name in ["a", "b"] {
            informer_store::Store::upsert(&*cache, obj("ns", name, 1)).unwrap();
        }
        let q = atomic(&cache);
        let popper = {
            let (q, cache) = (Arc::clone(&q), Arc::clone(&cache));
            thread::spawn(move || pop_applying(&*q, &cache))
        };
        let reader = {
            let cache = Arc::clone(&cache);
            thread::spawn(move || contents(&cache))
        };
        q.replace(vec![obj("ns", "a", 2), obj("ns", "c", 2)], "2".into())
            .unwrap();
        popper.join().unwrap().unwrap();
        let seen = reader.join().unwrap();
        assert!(
            seen == ["ns/a@1", "ns/b@1"] || seen == ["ns/a@2", "ns/c@2"],
            "a mix of the two lists: {seen:?}"
        );
        assert_eq!(contents(&cache), ["ns/a@2", "ns/c@2"]);
        assert!(q.has_synced());
    });
}

/// A refused version written while an atomic relist is queued, in flight or applied: read
/// through the relist, from the change in flight (unknown, so a tombstone the consumer
/// resolves) or from the cache, the listed version is withdrawn in every interleaving.
#[test]
fn a_refused_version_racing_an_atomic_relist_is_withdrawn() {
    loom::model(|| {
        let cache = Arc::new(ThreadSafeStore::new(key_func()));
        informer_store::Store::upsert(&*cache, obj("ns", "b", 1)).unwrap();
        let q = atomic(&cache);
        q.replace(vec![obj("ns", "a", 2), obj("ns", "b", 2)], "2".into())
            .unwrap();
        let popper = {
            let (q, cache) = (Arc::clone(&q), Arc::clone(&cache));
            thread::spawn(move || pop_applying(&*q, &cache))
        };
        assert!(q.update(obj("ns", "a", 99)).is_err());
        popper.join().unwrap().unwrap();
        drain_applying(&*q, &cache);
        assert_eq!(contents(&cache), ["ns/b@2"]);
    });
}
