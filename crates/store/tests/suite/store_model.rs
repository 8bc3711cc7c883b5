//! Property test: `ThreadSafeStore` against the reference model in `informer_testing::store::model` — a
//! `BTreeMap` of objects plus indexes recomputed from scratch after every step.

use std::sync::Arc;

use informer_store::{Indexer, KnownObjects, ReflectorStore, ThreadSafeStore, indexers};
use informer_testing::store::conformance::{TestObject, failing_index, key_func, labelled};
use informer_testing::store::model::{INDEX_NAMES, Op, check};
use proptest::prelude::*;

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
        1 => (0u64..1000).prop_map(Op::Bookmark),
        1 => proptest::sample::subsequence(INDEX_NAMES.to_vec(), 0..=2).prop_map(Op::AddIndexers),
    ]
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
        check(&ops);
    }
}
