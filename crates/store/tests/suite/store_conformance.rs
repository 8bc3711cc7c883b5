//! The shared conformance suites, run against `ThreadSafeStore` (directly and behind `Arc` /
//! `dyn`, which is how the upper layers hold it).

use std::sync::Arc;

use informer_store::{
    BoxError, Codec, CompactStore, Indexer, KnownObjects, ReflectorStore, Store, ThreadSafeStore,
};
use informer_testing::store::conformance::{
    TestObject, encoded_indexer_suite, encoded_store_suite, indexer_suite, store_suite,
};

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

/// A [`Codec`] for the suites' objects: one field a line, labels as `key=value` lines.
struct LinesCodec;

impl Codec<TestObject> for LinesCodec {
    fn encode(&self, o: &TestObject) -> Result<Vec<u8>, BoxError> {
        let mut text = format!("{}\n{}\n{}", o.namespace, o.name, o.resource_version);
        for (k, v) in &o.labels {
            text.push_str(&format!("\n{k}={v}"));
        }
        Ok(text.into_bytes())
    }

    fn decode(&self, bytes: &[u8]) -> Result<TestObject, BoxError> {
        let text = std::str::from_utf8(bytes)?;
        let mut lines = text.split('\n');
        let mut next = || lines.next().ok_or("a field is missing");
        let (namespace, name, rv) = (next()?.to_owned(), next()?.to_owned(), next()?.parse()?);
        let labels = lines
            .map(|l| l.split_once('=').map(|(k, v)| (k.to_owned(), v.to_owned())))
            .collect::<Option<Vec<_>>>()
            .ok_or("a label without '='")?;
        Ok(TestObject {
            namespace,
            name,
            resource_version: rv,
            labels,
        })
    }
}

/// The compact store passes both suites with every object decoded on read (nothing kept hot)
/// and with a few kept hot.
#[test]
fn compact_store_passes_the_store_and_indexer_suites() {
    for hot in [0, 3] {
        encoded_store_suite(|key_func| {
            CompactStore::new(key_func, Default::default(), Arc::new(LinesCodec), hot)
        });
        encoded_indexer_suite(|key_func, indexers| {
            CompactStore::new(key_func, indexers, Arc::new(LinesCodec), hot)
        });
    }
}

/// A codec that cannot read back what it wrote: the reads leave those objects out and count
/// them, never panic.
#[test]
fn a_codec_that_cannot_read_its_bytes_is_counted_not_a_panic() {
    struct Broken;
    impl Codec<TestObject> for Broken {
        fn encode(&self, _: &TestObject) -> Result<Vec<u8>, BoxError> {
            Ok(b"x".to_vec())
        }
        fn decode(&self, _: &[u8]) -> Result<TestObject, BoxError> {
            Err("unreadable".into())
        }
    }
    let store = CompactStore::new(
        informer_testing::store::conformance::key_func(),
        Default::default(),
        Arc::new(Broken),
        0,
    );
    store
        .add(informer_testing::store::conformance::obj("ns", "a", 1))
        .unwrap();
    assert_eq!(store.list_keys(), vec!["ns/a".to_owned()]);
    assert!(store.list().is_empty());
    assert_eq!(store.undecodable(), 1);
    assert!(store.get_by_key("ns/a").is_none());
}

/// A relist brings most objects back unchanged: an upsert whose encoding is the one stored
/// hands the new object back as the one it replaced, without decoding the stored bytes (equal
/// bytes are an equal object for a codec that reads back what it writes); a changed object's
/// old version is decoded, once.
#[test]
fn a_compact_upsert_of_an_unchanged_object_decodes_nothing() {
    use informer_testing::store::conformance::{key_func, obj};
    use std::sync::atomic::{AtomicUsize, Ordering};

    struct Counting(AtomicUsize);
    impl Codec<TestObject> for Counting {
        fn encode(&self, o: &TestObject) -> Result<Vec<u8>, BoxError> {
            LinesCodec.encode(o)
        }
        fn decode(&self, bytes: &[u8]) -> Result<TestObject, BoxError> {
            self.0.fetch_add(1, Ordering::Relaxed);
            LinesCodec.decode(bytes)
        }
    }
    let codec = Arc::new(Counting(AtomicUsize::new(0)));
    let decodes = || codec.0.load(Ordering::Relaxed);
    // Nothing kept decoded: every old version would have to be decoded.
    let store = CompactStore::new(key_func(), Default::default(), codec.clone(), 0);
    assert!(store.upsert(obj("ns", "a", 1)).unwrap().is_none());

    let same = obj("ns", "a", 1);
    let old = store
        .upsert(Arc::clone(&same))
        .unwrap()
        .expect("a replaced");
    assert_eq!(*old, *same);
    assert_eq!(decodes(), 0, "an unchanged object is not decoded");

    let changed = obj("ns", "a", 2);
    let old = store
        .upsert(Arc::clone(&changed))
        .unwrap()
        .expect("a replaced");
    assert_eq!(*old, *same);
    assert_eq!(
        decodes(),
        1,
        "a changed object's old version is decoded once"
    );
    assert_eq!(store.get_by_key("ns/a").as_deref(), Some(&*changed));
}
