//! A conformance suite for any [`Store`] or [`Indexer`] implementation.
//!
//! Each implementation runs the same checks with the same small object type, [`TestObject`],
//! keyed by [`key_func`]. A failing check panics with the rule it pins.
//!
//! ```
//! use informer_store::ThreadSafeStore;
//! use informer_testing::store::conformance;
//! conformance::store_suite(ThreadSafeStore::new);
//! conformance::indexer_suite(ThreadSafeStore::with_indexers);
//! ```

use std::collections::BTreeSet;
use std::sync::Arc;

use informer_store::{
    Error, IndexFunc, IndexValues, Indexer, Indexers, KeyError, KeyFunc, NAMESPACE_INDEX, Store,
    index_func, indexers, meta_namespace_key,
};

/// The object every conformance check stores.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TestObject {
    /// Namespace; empty for cluster-scoped objects.
    pub namespace: String,
    /// Name; an empty name makes [`key_func`] fail.
    pub name: String,
    /// Resource version.
    pub resource_version: u64,
    /// Labels, as `key=value` pairs.
    pub labels: Vec<(String, String)>,
}

/// A [`TestObject`] with no labels.
pub fn obj(namespace: &str, name: &str, resource_version: u64) -> Arc<TestObject> {
    labelled(namespace, name, resource_version, &[])
}

/// A [`TestObject`] with labels.
pub fn labelled(
    namespace: &str,
    name: &str,
    resource_version: u64,
    labels: &[(&str, &str)],
) -> Arc<TestObject> {
    Arc::new(TestObject {
        namespace: namespace.to_owned(),
        name: name.to_owned(),
        resource_version,
        labels: labels
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect(),
    })
}

/// `namespace/name`; fails with [`KeyError::MissingName`] for an empty name.
pub fn key_func() -> KeyFunc<TestObject> {
    Arc::new(|o: &TestObject| meta_namespace_key(Some(&o.namespace), &o.name))
}

/// Indexes by namespace (one value per object).
pub fn namespace_index() -> IndexFunc<TestObject> {
    index_func(|o: &TestObject| Ok(IndexValues::one(o.namespace.as_str())))
}

/// Indexes by every label, as `key=value` (zero or more values per object).
pub fn label_index() -> IndexFunc<TestObject> {
    index_func(|o: &TestObject| Ok(o.labels.iter().map(|(k, v)| format!("{k}={v}")).collect()))
}

/// Fails for objects labelled `poison=true`.
pub fn failing_index() -> IndexFunc<TestObject> {
    index_func(|o: &TestObject| {
        if o.labels.iter().any(|(k, v)| k == "poison" && v == "true") {
            Err("poisoned object".into())
        } else {
            Ok(IndexValues::one(o.name.as_str()))
        }
    })
}

fn keys<S: Store<TestObject> + ?Sized>(store: &S) -> BTreeSet<String> {
    store.list_keys().into_iter().collect()
}

fn versions<S: Store<TestObject> + ?Sized>(store: &S) -> BTreeSet<(String, u64)> {
    store
        .list()
        .iter()
        .map(|o| {
            (
                meta_namespace_key(Some(&o.namespace), &o.name).unwrap(),
                o.resource_version,
            )
        })
        .collect()
}

fn set<const N: usize>(items: [&str; N]) -> BTreeSet<String> {
    items.iter().map(|s| (*s).to_owned()).collect()
}

/// Runs every [`Store`] check on stores made by `make` (called once per check).
pub fn store_suite<S, F>(make: F)
where
    S: Store<TestObject>,
    F: Fn(KeyFunc<TestObject>) -> S,
{
    store_checks(make, true);
}

/// The [`store_suite`] for a store that keeps its objects encoded (such as
/// `informer_store::CompactStore`): a read returns an equal object, not necessarily the very
/// `Arc` written.
pub fn encoded_store_suite<S, F>(make: F)
where
    S: Store<TestObject>,
    F: Fn(KeyFunc<TestObject>) -> S,
{
    store_checks(make, false);
}

fn store_checks<S, F>(make: F, shares: bool)
where
    S: Store<TestObject>,
    F: Fn(KeyFunc<TestObject>) -> S,
{
    // add and update are the same upsert.
    let s = make(key_func());
    s.add(obj("ns", "a", 1)).unwrap();
    s.add(obj("ns", "a", 2)).unwrap();
    assert_eq!(
        s.get_by_key("ns/a").unwrap().resource_version,
        2,
        "add of an existing key upserts"
    );
    s.update(obj("ns", "b", 3)).unwrap();
    assert_eq!(
        s.get_by_key("ns/b").unwrap().resource_version,
        3,
        "update of a new key inserts"
    );
    assert_eq!(keys(&s), set(["ns/a", "ns/b"]));
    assert_eq!(s.len(), 2);
    assert!(!s.is_empty());
    assert_eq!(
        s.get(&obj("ns", "a", 0)).unwrap().unwrap().resource_version,
        2,
        "get by object"
    );
    assert!(
        s.get(&obj("other", "a", 0)).unwrap().is_none(),
        "get of a missing object"
    );

    // upsert returns what it replaced.
    assert!(
        s.upsert(obj("ns", "c", 4)).unwrap().is_none(),
        "upsert of a new key"
    );
    assert_eq!(
        s.upsert(obj("ns", "c", 5))
            .unwrap()
            .unwrap()
            .resource_version,
        4
    );
    assert_eq!(s.get_by_key("ns/c").unwrap().resource_version, 5);
    assert!(matches!(s.upsert(obj("ns", "", 1)), Err(Error::Key(_))));
    s.delete_by_key("ns/c").unwrap();

    // delete, and delete of a missing key.
    s.delete(obj("ns", "a", 9)).unwrap();
    assert!(s.get_by_key("ns/a").is_none(), "delete removes the key");
    s.delete(obj("ns", "missing", 1)).unwrap();
    assert_eq!(
        keys(&s),
        set(["ns/b"]),
        "delete of a missing key is a no-op"
    );
    assert_eq!(
        s.delete_by_key("ns/b").unwrap().unwrap().resource_version,
        3
    );
    assert!(
        s.delete_by_key("ns/b").unwrap().is_none(),
        "delete_by_key of a missing key"
    );
    assert!(s.is_empty());

    // cluster-scoped keys.
    let s = make(key_func());
    s.add(obj("", "node-1", 1)).unwrap();
    assert!(
        s.get_by_key("node-1").is_some(),
        "cluster-scoped key is the bare name"
    );

    // replace swaps the whole content and records the resource version.
    let s = make(key_func());
    s.add(obj("ns", "old", 1)).unwrap();
    s.add(obj("ns", "kept", 1)).unwrap();
    s.replace(
        vec![
            obj("ns", "kept", 5),
            obj("ns", "new", 6),
            obj("ns", "new", 7),
        ],
        "42".into(),
    )
    .unwrap();
    assert_eq!(
        versions(&s),
        [("ns/kept".to_owned(), 5), ("ns/new".to_owned(), 7)]
            .into_iter()
            .collect(),
        "replace: content is exactly the list; the last duplicate wins"
    );
    assert_eq!(s.last_sync_resource_version().as_deref(), Some("42"));
    s.replace(Vec::new(), String::new()).unwrap();
    assert!(s.is_empty(), "replace with an empty list empties the store");
    assert_eq!(
        s.last_sync_resource_version().as_deref(),
        Some(""),
        "even an empty RV is kept"
    );

    // resync changes nothing.
    let s = make(key_func());
    s.add(obj("ns", "a", 1)).unwrap();
    s.resync().unwrap();
    assert_eq!(
        versions(&s),
        [("ns/a".to_owned(), 1)].into_iter().collect(),
        "resync is a no-op"
    );

    // a key error is typed and changes nothing.
    let s = make(key_func());
    s.add(obj("ns", "a", 1)).unwrap();
    for result in [
        s.add(obj("ns", "", 2)),
        s.update(obj("ns", "", 2)),
        s.delete(obj("ns", "", 2)),
        s.replace(vec![obj("ns", "b", 2), obj("ns", "", 2)], "9".into()),
    ] {
        assert!(
            matches!(result, Err(Error::Key(KeyError::MissingName))),
            "a key function failure is a KeyError: {result:?}"
        );
    }
    assert!(matches!(s.get(&obj("ns", "", 0)), Err(Error::Key(_))));
    assert_eq!(
        versions(&s),
        [("ns/a".to_owned(), 1)].into_iter().collect(),
        "a failed write changes nothing"
    );
    assert_ne!(
        s.last_sync_resource_version().as_deref(),
        Some("9"),
        "failed replace keeps the RV"
    );

    // objects are shared, not copied (an encoded store returns an equal object).
    let s = make(key_func());
    let o = obj("ns", "shared", 1);
    s.add(Arc::clone(&o)).unwrap();
    let read = s.get_by_key("ns/shared").unwrap();
    assert_eq!(read, o, "the store returns the object written");
    if shares {
        assert!(Arc::ptr_eq(&o, &read), "the store keeps the same Arc");
    }
}

/// Runs every [`Indexer`] check (and the [`store_suite`]) on indexers made by `make`.
pub fn indexer_suite<S, F>(make: F)
where
    S: Indexer<TestObject>,
    F: Fn(KeyFunc<TestObject>, Indexers<TestObject>) -> S,
{
    indexer_checks(make, true);
}

/// The [`indexer_suite`] for an indexer that keeps its objects encoded (see
/// [`encoded_store_suite`]).
pub fn encoded_indexer_suite<S, F>(make: F)
where
    S: Indexer<TestObject>,
    F: Fn(KeyFunc<TestObject>, Indexers<TestObject>) -> S,
{
    indexer_checks(make, false);
}

fn indexer_checks<S, F>(make: F, shares: bool)
where
    S: Indexer<TestObject>,
    F: Fn(KeyFunc<TestObject>, Indexers<TestObject>) -> S,
{
    store_checks(|key_func| make(key_func, Indexers::new()), shares);
    let standard = || {
        make(
            key_func(),
            indexers([
                (NAMESPACE_INDEX, namespace_index()),
                ("label", label_index()),
            ]),
        )
    };

    // by_index, index_keys (sorted), index, list_index_func_values.
    let s = standard();
    s.add(labelled("a", "x", 1, &[("app", "web"), ("tier", "fe")]))
        .unwrap();
    s.add(labelled("a", "y", 1, &[("app", "db")])).unwrap();
    s.add(labelled("b", "x", 1, &[("app", "web")])).unwrap();
    s.add(labelled("a", "w", 1, &[])).unwrap();
    assert_eq!(
        s.index_keys(NAMESPACE_INDEX, "a").unwrap(),
        ["a/w", "a/x", "a/y"],
        "sorted"
    );
    assert_eq!(s.index_keys("label", "app=web").unwrap(), ["a/x", "b/x"]);
    assert_eq!(s.by_index("label", "app=web").unwrap().len(), 2);
    assert!(
        s.by_index("label", "app=none").unwrap().is_empty(),
        "unknown value → empty"
    );
    let values: BTreeSet<String> = s.list_index_func_values("label").into_iter().collect();
    assert_eq!(values, set(["app=db", "app=web", "tier=fe"]));
    assert!(
        s.list_index_func_values("nope").is_empty(),
        "unknown index → no values"
    );
    let probe = labelled("z", "probe", 0, &[("app", "db"), ("tier", "fe")]);
    let mut found: Vec<String> = s
        .index("label", &probe)
        .unwrap()
        .iter()
        .map(|o| format!("{}/{}", o.namespace, o.name))
        .collect();
    found.sort();
    assert_eq!(
        found,
        ["a/x", "a/y"],
        "index(): union of the object's values, no duplicates"
    );

    // unknown index names are errors, never panics.
    assert!(matches!(s.by_index("nope", "a"), Err(Error::UnknownIndex(n)) if n == "nope"));
    assert!(matches!(
        s.index_keys("nope", "a"),
        Err(Error::UnknownIndex(_))
    ));
    assert!(matches!(
        s.index("nope", &probe),
        Err(Error::UnknownIndex(_))
    ));

    // updates move keys between values; emptied values disappear.
    s.update(labelled("a", "y", 2, &[("app", "web")])).unwrap();
    assert_eq!(
        s.index_keys("label", "app=web").unwrap(),
        ["a/x", "a/y", "b/x"]
    );
    assert!(
        !s.list_index_func_values("label")
            .contains(&"app=db".to_owned()),
        "no empty set"
    );
    s.delete(obj("b", "x", 0)).unwrap();
    s.delete(obj("a", "x", 0)).unwrap();
    assert!(
        !s.list_index_func_values(NAMESPACE_INDEX)
            .contains(&"b".to_owned())
    );
    assert!(
        !s.list_index_func_values("label")
            .contains(&"tier=fe".to_owned())
    );

    // replace rebuilds every index.
    s.replace(vec![labelled("c", "q", 3, &[("app", "cache")])], "7".into())
        .unwrap();
    assert_eq!(s.list_index_func_values(NAMESPACE_INDEX), ["c"]);
    assert_eq!(s.list_index_func_values("label"), ["app=cache"]);

    // add_indexers indexes existing items; a duplicate name is a conflict, nothing added.
    let s = make(key_func(), Indexers::new());
    s.add(labelled("a", "x", 1, &[("app", "web")])).unwrap();
    s.add_indexers(indexers([("label", label_index())]))
        .unwrap();
    assert_eq!(
        s.index_keys("label", "app=web").unwrap(),
        ["a/x"],
        "existing items indexed"
    );
    let err = s
        .add_indexers(indexers([
            ("label", label_index()),
            (NAMESPACE_INDEX, namespace_index()),
        ]))
        .unwrap_err();
    assert!(matches!(&err, Error::IndexerConflict(names) if names == &["label".to_owned()]));
    assert!(
        !s.get_indexers().contains_key(NAMESPACE_INDEX),
        "conflict adds nothing"
    );
    assert_eq!(
        s.get_indexers().keys().cloned().collect::<Vec<_>>(),
        ["label"]
    );

    // a failing index function refuses the write and leaves the store as it was.
    let s = make(key_func(), indexers([("name", failing_index())]));
    s.add(labelled("a", "x", 1, &[])).unwrap();
    let poisoned = labelled("a", "x", 2, &[("poison", "true")]);
    assert!(matches!(
        s.update(Arc::clone(&poisoned)),
        Err(Error::IndexFunc { .. })
    ));
    assert!(matches!(
        s.add(labelled("a", "new", 1, &[("poison", "true")])),
        Err(Error::IndexFunc { .. })
    ));
    assert!(matches!(
        s.replace(vec![labelled("a", "z", 1, &[]), poisoned], "5".into()),
        Err(Error::IndexFunc { .. })
    ));
    assert_eq!(
        s.get_by_key("a/x").unwrap().resource_version,
        1,
        "refused update left the object"
    );
    assert!(s.get_by_key("a/new").is_none() && s.get_by_key("a/z").is_none());
    assert_eq!(
        s.index_keys("name", "x").unwrap(),
        ["a/x"],
        "indexes untouched"
    );
    let s = make(key_func(), Indexers::new());
    s.add(labelled("a", "p", 1, &[("poison", "true")])).unwrap();
    assert!(matches!(
        s.add_indexers(indexers([("name", failing_index())])),
        Err(Error::IndexFunc { .. })
    ));
    assert!(
        s.get_indexers().is_empty(),
        "a failed add_indexers adds nothing"
    );
}
