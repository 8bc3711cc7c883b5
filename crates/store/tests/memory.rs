//! The cache's own heap per object, counted by a counting global allocator (this test binary
//! only): what the store allocates to hold an object that is already built and shared.

use std::alloc::System;
use std::sync::Arc;

use informer_store::{
    IndexValues, Indexer, NAMESPACE_INDEX, ReflectorStore, ThreadSafeStore, index_func, indexers,
};
use informer_testing::store::conformance::{TestObject, key_func, labelled};
use stats_alloc::{INSTRUMENTED_SYSTEM, Region, StatsAlloc};

#[global_allocator]
static GLOBAL: &StatsAlloc<System> = &INSTRUMENTED_SYSTEM;

/// The objects of the W-IDX workload: `ns-{i % 100}/pod-{i}` on `node-{i % 1000}`.
const N: usize = 100_000;

/// Heap bytes still held after `f` returns, net of what it freed.
fn retained<T>(f: impl FnOnce() -> T) -> (T, usize) {
    let region = Region::new(GLOBAL);
    let out = f();
    let stats = region.change();
    // A reallocation's growth is counted in `bytes_allocated`, its shrinking in
    // `bytes_deallocated`.
    let held = stats
        .bytes_allocated
        .saturating_sub(stats.bytes_deallocated);
    (out, held)
}

#[test]
fn the_cache_holds_an_object_in_under_100_bytes_of_its_own_with_two_indexes() {
    let objects: Vec<Arc<TestObject>> = (0..N)
        .map(|i| {
            let node = format!("node-{}", i % 1000);
            labelled(
                &format!("ns-{}", i % 100),
                &format!("pod-{i}"),
                1,
                &[("node", &node)],
            )
        })
        .collect();
    let (store, bytes) = retained(|| {
        let store = ThreadSafeStore::with_indexers(
            key_func(),
            indexers([
                (
                    NAMESPACE_INDEX,
                    index_func(|o: &TestObject| Ok(IndexValues::one(o.namespace.as_str()))),
                ),
                (
                    "node",
                    index_func(|o: &TestObject| {
                        Ok(o.labels
                            .iter()
                            .find(|(k, _)| k == "node")
                            .map(|(_, v)| v.as_str())
                            .into())
                    }),
                ),
            ]),
        );
        for o in &objects {
            store.add(Arc::clone(o)).unwrap();
        }
        store
    });
    assert_eq!(store.by_index("node", "node-7").unwrap().len(), N / 1000);
    let per_object = bytes / N;
    // Printed for docs/benchmarks.md (`cargo test -p informer-store --test memory -- --nocapture`).
    println!("cache overhead with two indexes: {per_object} bytes per object ({N} objects)");
    assert!(per_object < 100, "{per_object} bytes per object");
}
