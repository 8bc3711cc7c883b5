//! Writers and readers at once: every index lookup is consistent at every moment, nothing is lost,
//! and the final content is exactly what the writers left.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread;

use informer_store::{
    Indexer, KnownObjects, NAMESPACE_INDEX, ReflectorStore, Store, ThreadSafeStore, indexers,
};
use informer_testing::store::conformance::{
    TestObject, key_func, label_index, labelled, namespace_index,
};

const WRITERS: usize = 4;
const READERS: usize = 3;
const OPS_PER_WRITER: usize = 20_000;
const NAMESPACES: [&str; 3] = ["a", "b", "c"];
const APPS: [&str; 3] = ["web", "db", "cache"];

/// A tiny deterministic generator (xorshift), one per thread.
struct Rng(u64);
impl Rng {
    fn next(&mut self, n: usize) -> usize {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        (self.0 % n as u64) as usize
    }
}

fn app_of(o: &TestObject) -> &str {
    o.labels
        .iter()
        .find(|(k, _)| k == "app")
        .map(|(_, v)| v.as_str())
        .unwrap_or("")
}

#[test]
fn concurrent_writers_and_readers_keep_indexes_exact() {
    let store = Arc::new(ThreadSafeStore::with_indexers(
        key_func(),
        indexers([
            (NAMESPACE_INDEX, namespace_index()),
            ("label", label_index()),
        ]),
    ));
    // Objects no writer touches: they must be visible in every lookup, all the time.
    for i in 0..30 {
        store
            .add(labelled(
                "stable",
                &format!("s{i}"),
                1,
                &[("app", "stable")],
            ))
            .unwrap();
    }
    let done = Arc::new(AtomicBool::new(false));

    let readers: Vec<_> = (0..READERS)
        .map(|r| {
            let store = Arc::clone(&store);
            let done = Arc::clone(&done);
            thread::spawn(move || {
                let mut rng = Rng(0x9e37_79b9 + r as u64);
                let mut checks = 0u64;
                while !done.load(Ordering::Acquire) || checks < 1000 {
                    let ns = NAMESPACES[rng.next(NAMESPACES.len())];
                    for o in store.by_index(NAMESPACE_INDEX, ns).unwrap() {
                        assert_eq!(o.namespace, ns, "by_index(namespace) returned a stranger");
                    }
                    let app = APPS[rng.next(APPS.len())];
                    for o in store.by_index("label", &format!("app={app}")).unwrap() {
                        assert_eq!(app_of(&o), app, "by_index(label) returned a stranger");
                    }
                    assert_eq!(store.by_index(NAMESPACE_INDEX, "stable").unwrap().len(), 30);
                    assert_eq!(store.index_keys("label", "app=stable").unwrap().len(), 30);
                    checks += 1;
                }
                checks
            })
        })
        .collect();

    let writers: Vec<_> = (0..WRITERS)
        .map(|w| {
            let store = Arc::clone(&store);
            thread::spawn(move || {
                let mut rng = Rng(0x2545_f491 + w as u64);
                // Each writer owns its names, so its final local view is the truth for them.
                let mut mine: BTreeMap<String, Arc<TestObject>> = BTreeMap::new();
                for op in 0..OPS_PER_WRITER {
                    let ns = NAMESPACES[rng.next(NAMESPACES.len())];
                    let name = format!("w{w}-{}", rng.next(50));
                    let key = format!("{ns}/{name}");
                    if rng.next(4) == 0 {
                        let gone = labelled(ns, &name, 0, &[]);
                        store.delete(gone).unwrap();
                        mine.remove(&key);
                    } else {
                        let app = APPS[rng.next(APPS.len())];
                        let o = labelled(ns, &name, op as u64, &[("app", app)]);
                        store.update(Arc::clone(&o)).unwrap();
                        mine.insert(key, o);
                    }
                }
                mine
            })
        })
        .collect();

    let mut expected: BTreeMap<String, Arc<TestObject>> = BTreeMap::new();
    for w in writers {
        expected.extend(w.join().unwrap());
    }
    done.store(true, Ordering::Release);
    for r in readers {
        assert!(r.join().unwrap() >= 1000);
    }

    // Final state: exactly the writers' objects plus the stable ones, indexes exact.
    let keys: std::collections::BTreeSet<String> = store.list_keys().into_iter().collect();
    assert_eq!(keys.len(), expected.len() + 30);
    for (k, o) in &expected {
        assert!(
            Arc::ptr_eq(&store.get_by_key(k).unwrap(), o),
            "{k} lost or stale"
        );
    }
    for ns in NAMESPACES {
        let want: Vec<&String> = expected
            .keys()
            .filter(|k| k.starts_with(&format!("{ns}/")))
            .collect();
        assert_eq!(
            store
                .index_keys(NAMESPACE_INDEX, ns)
                .unwrap()
                .iter()
                .collect::<Vec<_>>(),
            want
        );
    }
    for app in APPS {
        let want: Vec<&String> = expected
            .iter()
            .filter(|(_, o)| app_of(o) == app)
            .map(|(k, _)| k)
            .collect();
        let got = store.index_keys("label", &format!("app={app}")).unwrap();
        assert_eq!(got.iter().collect::<Vec<_>>(), want, "app={app}");
    }
}

#[test]
fn replace_racing_writers_never_exposes_a_mix() {
    // Each replace installs a full generation g: 100 objects, every one at resource version g.
    // A reader must never see two generations in one by_index call.
    let store = Arc::new(ThreadSafeStore::with_indexers(
        key_func(),
        indexers([(NAMESPACE_INDEX, namespace_index())]),
    ));
    let generation = |g: u64| -> Vec<Arc<TestObject>> {
        (0..100)
            .map(|i| labelled("ns", &format!("o{i}"), g, &[]))
            .collect()
    };
    store.replace(generation(0), "0".into()).unwrap();
    let done = Arc::new(AtomicBool::new(false));
    let reader = {
        let store = Arc::clone(&store);
        let done = Arc::clone(&done);
        thread::spawn(move || {
            let mut seen = 0u64;
            while !done.load(Ordering::Acquire) || seen < 100 {
                let objects = store.by_index(NAMESPACE_INDEX, "ns").unwrap();
                assert_eq!(
                    objects.len(),
                    100,
                    "replace is atomic: never a partial list"
                );
                let g = objects[0].resource_version;
                assert!(
                    objects.iter().all(|o| o.resource_version == g),
                    "mixed generations"
                );
                seen += 1;
            }
        })
    };
    for g in 1..=300 {
        store.replace(generation(g), g.to_string()).unwrap();
    }
    done.store(true, Ordering::Release);
    reader.join().unwrap();
    assert_eq!(store.last_sync_resource_version().as_deref(), Some("300"));
    assert!(store.list().iter().all(|o| o.resource_version == 300));
}
