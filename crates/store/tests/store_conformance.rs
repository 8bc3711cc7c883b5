//! The shared conformance suites, run against `ThreadSafeStore` (directly and behind `Arc` /
//! `dyn`, which is how the upper layers hold it).

use std::sync::Arc;

use informer_store::{Indexer, ThreadSafeStore};
use informer_testing::store::conformance::{TestObject, indexer_suite, store_suite};

#[test]
fn thread_safe_store_passes_the_store_suite() {
    store_suite(ThreadSafeStore::new);
}

#[test]
fn thread_safe_store_passes_the_indexer_suite() {
    indexer_suite(ThreadSafeStore::with_indexers);
}

#[test]
fn shared_dyn_indexer_passes_the_indexer_suite() {
    indexer_suite(|key_func, indexers| -> Arc<dyn Indexer<TestObject>> {
        Arc::new(ThreadSafeStore::with_indexers(key_func, indexers))
    });
}

/// The plain-map cache the informer's suites also run on passes the same suites, so what
/// they show on it holds for any conforming cache.
#[test]
fn the_map_cache_passes_the_store_and_indexer_suites() {
    use informer_testing::store::map_cache::MapCache;
    store_suite(|key_func| MapCache::new(key_func, Default::default()));
    indexer_suite(MapCache::new);
}
