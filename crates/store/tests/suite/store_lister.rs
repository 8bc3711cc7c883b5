//! `Lister`: the read-only handle.

use std::collections::BTreeSet;
use std::sync::Arc;

use informer_store::{
    Everything, Indexers, Lister, NAMESPACE_INDEX, ReflectorStore, ThreadSafeStore, indexers,
};
use informer_testing::store::conformance::{TestObject, key_func, labelled, namespace_index};

fn fill(indexers: Indexers<TestObject>) -> Lister<TestObject> {
    let s = Arc::new(ThreadSafeStore::with_indexers(key_func(), indexers));
    for (ns, name, app) in [
        ("a", "x", "web"),
        ("a", "y", "db"),
        ("b", "x", "web"),
        ("", "n", "web"),
    ] {
        s.add(labelled(ns, name, 1, &[("app", app)])).unwrap();
    }
    Lister::new(s)
}

fn names(objects: Vec<Arc<TestObject>>) -> BTreeSet<String> {
    objects
        .iter()
        .map(|o| format!("{}/{}", o.namespace, o.name))
        .collect()
}

fn is_web(o: &TestObject) -> bool {
    o.labels.iter().any(|(k, v)| k == "app" && v == "web")
}

#[test]
fn list_namespace_is_the_same_with_and_without_the_namespace_index() {
    let indexed = fill(indexers([(NAMESPACE_INDEX, namespace_index())]));
    let scanned = fill(Indexers::new());
    for ns in ["a", "b", "c", ""] {
        for only_web in [false, true] {
            let pred = |o: &TestObject| !only_web || is_web(o);
            assert_eq!(
                names(indexed.namespace(ns).list(&pred)),
                names(scanned.namespace(ns).list(&pred)),
                "namespace {ns:?}"
            );
        }
    }
    assert_eq!(
        names(indexed.namespace("a").list(&is_web)),
        BTreeSet::from(["a/x".to_owned()])
    );
    assert_eq!(
        indexed.namespace("").list(&Everything).len(),
        4,
        "\"\" means every namespace"
    );
}

#[test]
fn get_and_list_with_a_predicate() {
    let lister = fill(Indexers::new());
    assert_eq!(lister.get("a/y").unwrap().name, "y");
    assert_eq!(lister.get_namespaced("b", "x").unwrap().namespace, "b");
    assert_eq!(
        lister.get_namespaced("", "n").unwrap().name,
        "n",
        "cluster-scoped"
    );
    assert!(lister.get_namespaced("b", "").is_none());
    assert!(lister.get("nope/x").is_none());
    assert_eq!(lister.list(&is_web).len(), 3);
    assert_eq!(lister.len(), 4);
    assert!(!lister.is_empty());
    assert!(
        lister.by_index(NAMESPACE_INDEX, "a").is_err(),
        "no such index here"
    );
}

#[test]
fn a_cloned_lister_sees_later_writes() {
    let store = Arc::new(ThreadSafeStore::new(key_func()));
    let lister = Lister::new(store.clone());
    let copy = lister.clone();
    store.add(labelled("a", "late", 1, &[])).unwrap();
    assert!(copy.get("a/late").is_some());
    assert!(Arc::ptr_eq(
        &lister.get("a/late").unwrap(),
        &copy.get("a/late").unwrap()
    ));
}
