//! Allocations per change, counted by a counting global allocator (this test binary only).

use std::alloc::System;
use std::sync::Arc;

use informer_fifo::{DeltaFifo, Queue};
use informer_store::{IndexValues, ReflectorStore, Store, ThreadSafeStore, index_func, indexers};
use informer_testing::fifo::conformance::{TestObject, key_func, obj};
use stats_alloc::{INSTRUMENTED_SYSTEM, Region, StatsAlloc};

#[global_allocator]
static GLOBAL: &StatsAlloc<System> = &INSTRUMENTED_SYSTEM;

/// Allocations (and reallocations) made while `f` runs. The binary runs without the test
/// harness, on one thread, so nothing else allocates meanwhile.
fn allocations(f: impl FnOnce()) -> usize {
    let region = Region::new(GLOBAL);
    f();
    let stats = region.change();
    stats.allocations + stats.reallocations
}

fn main() {
    allocations_per_change();
    println!("allocations per change: ok");
}

fn allocations_per_change() {
    // DeltaFifo, steady state (the queue has held keys before): adding a new key allocates only
    // its key; popping it allocates nothing (a single delta is held inline).
    let fifo = DeltaFifo::new(key_func());
    let objects: Vec<Arc<TestObject>> = (0..100).map(|i| obj("ns", &format!("o{i}"), 1)).collect();
    for o in &objects {
        fifo.add(Arc::clone(o)).unwrap();
    }
    while fifo.pop(&mut |_, _| {}).is_ok() && !fifo.is_empty() {}
    for o in &objects {
        assert_eq!(
            allocations(|| fifo.add(Arc::clone(o)).unwrap()),
            1,
            "the key"
        );
        assert_eq!(allocations(|| fifo.pop(&mut |_, _| {}).unwrap()), 0);
    }

    // The indexed store: re-storing an object whose index values did not change allocates only
    // the key the key function makes, and nothing at all when the key is handed over.
    let store = ThreadSafeStore::with_indexers(
        key_func(),
        indexers([(
            "namespace",
            index_func(|o: &TestObject| Ok(IndexValues::one(o.namespace.as_str()))),
        )]),
    );
    for o in &objects {
        store.add(Arc::clone(o)).unwrap();
    }
    for (i, o) in objects.iter().enumerate() {
        let newer = obj("ns", &format!("o{i}"), 2);
        let key = format!("ns/o{i}");
        assert_eq!(
            allocations(|| store.update(Arc::clone(o)).unwrap()),
            1,
            "the key"
        );
        assert_eq!(
            allocations(|| drop(store.upsert_with_key(&key, newer).unwrap())),
            0
        );
    }
}
