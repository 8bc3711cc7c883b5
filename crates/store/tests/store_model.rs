//! Property test: `ThreadSafeStore` against a trivial model — a `BTreeMap` of objects plus
//! indexes recomputed from scratch after every step.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use informer_store::conformance::{
    TestObject, failing_index, key_func, label_index, labelled, namespace_index,
};
use informer_store::{
    Error, IndexFunc, Indexer, KnownObjects, ReflectorStore, Store, ThreadSafeStore, indexers,
};
use proptest::prelude::*;

#[derive(Debug, Clone)]
enum Op {
    Add(Arc<TestObject>),
    Update(Arc<TestObject>),
    Delete(Arc<TestObject>),
    DeleteByKey(String),
    Replace(Vec<Arc<TestObject>>, u64),
    AddIndexer(&'static str),
}

fn index_by_name(name: &str) -> IndexFunc<TestObject> {
    match name {
        "namespace" => namespace_index(),
        "label" => label_index(),
        "fails" => failing_index(),
        other => unreachable!("no index {other}"),
    }
}

fn object() -> impl Strategy<Value = Arc<TestObject>> {
    let label = prop_oneof![
        Just(("app", "web")),
        Just(("app", "db")),
        Just(("tier", "fe")),
        Just(("tier", "be")),
        Just(("poison", "true")),
    ];
    (
        prop_oneof![Just("a"), Just("b"), Just("")],
        prop_oneof![Just("x"), Just("y"), Just("z"), Just("w"), Just("")],
        0u64..1000,
        proptest::collection::vec(label, 0..3),
    )
        .prop_map(|(ns, name, rv, labels)| labelled(ns, name, rv, &labels))
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => object().prop_map(Op::Add),
        4 => object().prop_map(Op::Update),
        2 => object().prop_map(Op::Delete),
        1 => prop_oneof![Just("a/x"), Just("b/y"), Just("z"), Just("nope")]
            .prop_map(|k| Op::DeleteByKey(k.to_owned())),
        1 => (proptest::collection::vec(object(), 0..6), 0u64..1000)
            .prop_map(|(list, rv)| Op::Replace(list, rv)),
        1 => prop_oneof![Just("namespace"), Just("label"), Just("fails")].prop_map(Op::AddIndexer),
    ]
}

#[derive(Default)]
struct Model {
    items: BTreeMap<String, Arc<TestObject>>,
    indexers: Vec<&'static str>,
    rv: Option<String>,
}

fn key(o: &TestObject) -> Option<String> {
    (key_func())(o).ok()
}

impl Model {
    /// Whether every registered index function accepts `o`.
    fn indexable(&self, names: &[&'static str], o: &TestObject) -> bool {
        names.iter().all(|n| index_by_name(n)(o).is_ok())
    }

    /// Applies `op` and returns whether it should have succeeded.
    fn apply(&mut self, op: &Op) -> bool {
        match op {
            Op::Add(o) | Op::Update(o) => match key(o) {
                Some(k) if self.indexable(&self.indexers, o) => {
                    self.items.insert(k, Arc::clone(o));
                    true
                }
                _ => false,
            },
            Op::Delete(o) => match key(o) {
                Some(k) => {
                    self.items.remove(&k);
                    true
                }
                None => false,
            },
            Op::DeleteByKey(k) => {
                self.items.remove(k);
                true
            }
            Op::Replace(list, rv) => {
                let mut items = BTreeMap::new();
                for o in list {
                    match key(o) {
                        Some(k) => items.insert(k, Arc::clone(o)),
                        None => return false,
                    };
                }
                // Only the surviving object of a duplicated key is indexed (the last one wins).
                if !items.values().all(|o| self.indexable(&self.indexers, o)) {
                    return false;
                }
                self.items = items;
                self.rv = Some(rv.to_string());
                true
            }
            Op::AddIndexer(name) => {
                if self.indexers.contains(name)
                    || !self.items.values().all(|o| self.indexable(&[name], o))
                {
                    return false;
                }
                self.indexers.push(name);
                true
            }
        }
    }

    /// Index `name` recomputed from scratch: value → sorted keys.
    fn index(&self, name: &str) -> BTreeMap<String, Vec<String>> {
        let f = index_by_name(name);
        let mut out: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
        for (k, o) in &self.items {
            for v in f(o).expect("stored objects are indexable") {
                out.entry(v.into_owned()).or_default().insert(k.clone());
            }
        }
        out.into_iter()
            .map(|(v, ks)| (v, ks.into_iter().collect()))
            .collect()
    }
}

fn run(s: &ThreadSafeStore<TestObject>, op: &Op) -> Result<(), Error> {
    match op {
        Op::Add(o) => s.add(Arc::clone(o)),
        Op::Update(o) => s.update(Arc::clone(o)),
        Op::Delete(o) => s.delete(Arc::clone(o)),
        Op::DeleteByKey(k) => s.delete_by_key(k).map(drop),
        Op::Replace(list, rv) => s.replace(list.clone(), rv.to_string()),
        Op::AddIndexer(name) => s.add_indexers(indexers([(*name, index_by_name(name))])),
    }
}

fn assert_same(s: &ThreadSafeStore<TestObject>, m: &Model) {
    let keys: BTreeSet<String> = s.list_keys().into_iter().collect();
    assert_eq!(
        keys,
        m.items.keys().cloned().collect::<BTreeSet<_>>(),
        "keys"
    );
    for (k, o) in &m.items {
        assert!(Arc::ptr_eq(&s.get_by_key(k).unwrap(), o), "object at {k}");
    }
    assert_eq!(s.len(), m.items.len());
    assert_eq!(s.list().len(), m.items.len());
    assert_eq!(s.last_sync_resource_version(), m.rv);
    let names: BTreeSet<String> = s.get_indexers().into_keys().collect();
    assert_eq!(
        names,
        m.indexers
            .iter()
            .map(|n| n.to_string())
            .collect::<BTreeSet<_>>()
    );
    for name in &m.indexers {
        let expected = m.index(name);
        let values: BTreeSet<String> = s.list_index_func_values(name).into_iter().collect();
        assert_eq!(
            values,
            expected.keys().cloned().collect::<BTreeSet<_>>(),
            "values of {name}"
        );
        for (value, keys) in &expected {
            assert_eq!(&s.index_keys(name, value).unwrap(), keys, "{name}={value}");
            assert_eq!(s.by_index(name, value).unwrap().len(), keys.len());
        }
    }
}

/// Found by the property test: a duplicate key in `replace` whose earlier object an index
/// function rejects is not an error, because only the last object of a key is kept and indexed.
#[test]
fn replace_indexes_only_the_last_object_of_a_duplicated_key() {
    let s = ThreadSafeStore::new(key_func());
    s.add_indexers(indexers([("fails", failing_index())]))
        .unwrap();
    let poisoned = labelled("b", "w", 0, &[("poison", "true")]);
    s.replace(vec![poisoned, labelled("b", "w", 1, &[])], "1".into())
        .unwrap();
    assert_eq!(s.get_by_key("b/w").unwrap().resource_version, 1);
    assert_eq!(s.index_keys("fails", "w").unwrap(), ["b/w"]);
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: 512,
        failure_persistence: None,
        ..ProptestConfig::default()
    })]

    #[test]
    fn store_matches_the_model(ops in proptest::collection::vec(op(), 1..60)) {
        let s = ThreadSafeStore::new(key_func());
        let mut m = Model::default();
        for op in &ops {
            let expected_ok = m.apply(op);
            let result = run(&s, op);
            prop_assert_eq!(result.is_ok(), expected_ok, "{:?} gave {:?}", op, result);
            assert_same(&s, &m);
        }
    }
}
