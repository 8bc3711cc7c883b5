//! LEAN: what a compact cache (`informer_kube::compact_cache`) costs to read, against the
//! default cache, on realistic pods without their managed fields (the factory's default): a
//! `get` of an object that is not kept decoded, one that is, and an index lookup of 1,000
//! objects.

use std::hint::black_box;
use std::sync::Arc;
use std::time::{Duration, Instant};

use informer_kube::WithoutManagedFields;
use informer_store::{Indexer, NAMESPACE_INDEX, ReflectorStore, ThreadSafeStore};
use k8s_openapi::api::core::v1::Pod;

/// Pods in one namespace for the index lookup.
pub const IN_NAMESPACE: usize = 1_000;

/// The two caches, filled with the same `n` realistic pods, [`IN_NAMESPACE`] of them in
/// namespace `lean`.
pub fn caches(n: usize, hot: usize) -> (ThreadSafeStore<Pod>, Arc<dyn Indexer<Pod>>) {
    let n = n.max(IN_NAMESPACE);
    let indexers = || {
        informer_store::indexers([(
            NAMESPACE_INDEX,
            informer_kube::namespace_index_func::<Pod>(),
        )])
    };
    let plain = ThreadSafeStore::with_indexers(informer_kube::key_func::<Pod>(), indexers());
    let compact = informer_kube::compact_cache::<Pod>(hot)(informer_kube::key_func(), indexers());
    for i in 0..n {
        let json = crate::realistic::realistic_pod_json(i);
        let WithoutManagedFields(mut pod) =
            serde_json::from_slice::<WithoutManagedFields<Pod>>(&json).expect("decodes");
        if i < IN_NAMESPACE {
            pod.metadata.namespace = Some("lean".into());
        }
        let pod = Arc::new(pod);
        plain.add(Arc::clone(&pod)).expect("adds");
        compact.add(pod).expect("adds");
    }
    (plain, compact)
}

/// Time per `get_by_key` over every key, in turn.
pub fn get_each(cache: &dyn Indexer<Pod>, keys: &[String]) -> Duration {
    let started = Instant::now();
    for key in keys {
        black_box(cache.get_by_key(key));
    }
    started.elapsed() / keys.len().max(1) as u32
}

/// Time per `get_by_key` of one key, `times` times (kept decoded after the first).
pub fn get_same(cache: &dyn Indexer<Pod>, key: &str, times: usize) -> Duration {
    black_box(cache.get_by_key(key));
    let started = Instant::now();
    for _ in 0..times {
        black_box(cache.get_by_key(key));
    }
    started.elapsed() / times.max(1) as u32
}

/// Time of one `by_index` of the [`IN_NAMESPACE`] pods of namespace `lean`.
pub fn by_index(cache: &dyn Indexer<Pod>) -> Duration {
    let started = Instant::now();
    let found = cache.by_index(NAMESPACE_INDEX, "lean").expect("the index");
    let elapsed = started.elapsed();
    assert_eq!(found.len(), IN_NAMESPACE);
    elapsed
}

#[cfg(test)]
mod tests {
    use super::*;
    use informer_store::KnownObjects;

    #[test]
    fn both_caches_read_the_same_pods() {
        let (plain, compact) = caches(IN_NAMESPACE, 2);
        let mut keys = plain.list_keys();
        keys.sort();
        let mut compact_keys = compact.list_keys();
        compact_keys.sort();
        assert_eq!(keys, compact_keys);
        for key in keys.iter().step_by(97) {
            assert_eq!(plain.get_by_key(key), compact.get_by_key(key));
        }
        let mut a = plain.by_index(NAMESPACE_INDEX, "lean").unwrap();
        let mut b = compact.by_index(NAMESPACE_INDEX, "lean").unwrap();
        a.sort_by(|x, y| x.metadata.name.cmp(&y.metadata.name));
        b.sort_by(|x, y| x.metadata.name.cmp(&y.metadata.name));
        assert_eq!(a, b);
    }
}
