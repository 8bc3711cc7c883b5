//! Both queues (the in-order one in both modes) against their reference models over random
//! operation sequences.

use informer_testing::fifo::model::{Config, Obj, Op, decode, run};
use proptest::prelude::*;

fn object() -> impl Strategy<Value = Obj> {
    // Few keys so that operations collide; an empty name is a key error; poison is rare.
    (
        prop_oneof![8 => 0usize..5, 1 => Just(5usize)],
        0u64..100,
        prop::bool::weighted(0.05),
    )
        .prop_map(|(i, version, poison)| Obj {
            name: ["a", "b", "c", "d", "e", ""][i].to_owned(),
            version,
            poison,
        })
}

fn write() -> impl Strategy<Value = Op> {
    prop_oneof![
        3 => object().prop_map(Op::Add),
        3 => object().prop_map(Op::Update),
        2 => object().prop_map(Op::Delete),
        1 => prop::collection::vec(object(), 0..6).prop_map(Op::Replace),
        1 => prop::collection::vec(object(), 0..4).prop_map(Op::ReplacePart),
        1 => Just(Op::Resync),
    ]
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        10 => write(),
        4 => Just(Op::Pop),
        // Writes interleaved with a pop whose change is in flight, applied to the cache before
        // or after them.
        2 => (any::<bool>(), prop::collection::vec(write(), 0..4))
            .prop_map(|(apply_first, writes)| Op::PopDuring { apply_first, writes }),
    ]
}

fn config(in_order: bool, atomic: bool) -> impl Strategy<Value = Config> {
    (any::<bool>(), any::<bool>(), any::<bool>()).prop_map(
        move |(known_objects, emit_replaced, transform)| Config {
            known_objects,
            emit_replaced,
            transform,
            in_order,
            atomic,
        },
    )
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn delta_fifo_pops_exactly_what_the_model_pops(
        config in config(false, false),
        ops in prop::collection::vec(op(), 0..64),
    ) {
        run(config, &ops);
    }

    #[test]
    fn in_order_fifo_pops_exactly_what_the_model_pops(
        config in config(true, false),
        ops in prop::collection::vec(op(), 0..64),
    ) {
        run(config, &ops);
    }

    /// Atomic mode: a relist is one `ReplacedAll`, a resync one `SyncAll`; a refused version
    /// reads the key's state through them.
    #[test]
    fn atomic_in_order_fifo_pops_exactly_what_the_model_pops(
        config in config(true, true),
        ops in prop::collection::vec(op(), 0..64),
    ) {
        run(config, &ops);
    }

    #[test]
    fn any_bytes_decode_into_a_run_that_matches_the_model(
        bytes in prop::collection::vec(any::<u8>(), 0..256),
    ) {
        let (config, ops) = decode(&bytes);
        run(config, &ops);
    }
}

fn named(name: &str) -> Obj {
    Obj {
        name: name.to_owned(),
        version: 1,
        poison: false,
    }
}

/// An initial list in parts whose end comes while its first part is in flight: that change
/// counts towards `has_synced` although it was taken before the queue was populated, so
/// `has_synced` stays false until its `process` returns (it turned true at the end with
/// nothing queued, while the change was still in flight).
#[test]
fn an_initial_list_in_parts_ends_synced_only_after_its_changes_in_flight() {
    let ops = [
        Op::ReplacePart(vec![named("a")]),
        Op::PopDuring {
            apply_first: false,
            writes: vec![Op::Replace(vec![])],
        },
    ];
    for (in_order, atomic) in [(false, false), (true, false), (true, true)] {
        for known_objects in [false, true] {
            let config = Config {
                known_objects,
                emit_replaced: true,
                transform: false,
                in_order,
                atomic,
            };
            run(config, &ops);
        }
    }
}
