//! loom models of every blocking and wake-up path of the queue.
//!
//! Run with `RUSTFLAGS="--cfg informer_loom" cargo test -p informer-fifo --release --test loom`.
#![cfg(informer_loom)]

use std::sync::Arc;

use informer_fifo::{DeltaFifo, InOrderFifo, Queue, QueueClosed};
use informer_store::ReflectorStore;
use informer_testing::fifo::conformance::{TestObject, key_func, obj, render};
use loom::thread;

fn pop_rendered(q: &dyn Queue<TestObject>) -> Result<String, QueueClosed> {
    let mut out = String::new();
    q.pop(&mut |d, i| out = render(&d, i))?;
    Ok(out)
}

#[test]
fn pop_blocked_while_add_runs_gets_the_item() {
    loom::model(|| {
        let q = Arc::new(DeltaFifo::new(key_func()));
        let popper = {
            let q = Arc::clone(&q);
            thread::spawn(move || pop_rendered(&*q))
        };
        q.add(obj("ns", "a", 1)).unwrap();
        assert_eq!(popper.join().unwrap(), Ok("ns/a: Added@1".to_owned()));
        assert!(q.is_empty());
    });
}

#[test]
fn close_wakes_every_blocked_pop() {
    loom::model(|| {
        let q = Arc::new(DeltaFifo::<TestObject>::new(key_func()));
        let poppers: Vec<_> = (0..2)
            .map(|_| {
                let q = Arc::clone(&q);
                thread::spawn(move || pop_rendered(&*q))
            })
            .collect();
        q.close();
        for popper in poppers {
            assert_eq!(popper.join().unwrap(), Err(QueueClosed));
        }
    });
}

#[test]
fn close_after_add_lets_exactly_one_pop_drain_the_item() {
    loom::model(|| {
        let q = Arc::new(DeltaFifo::new(key_func()));
        let poppers: Vec<_> = (0..2)
            .map(|_| {
                let q = Arc::clone(&q);
                thread::spawn(move || pop_rendered(&*q))
            })
            .collect();
        q.add(obj("ns", "a", 1)).unwrap();
        q.close();
        let mut results: Vec<_> = poppers.into_iter().map(|p| p.join().unwrap()).collect();
        results.sort();
        assert_eq!(results, [Ok("ns/a: Added@1".to_owned()), Err(QueueClosed)]);
    });
}

#[test]
fn replace_racing_pop_delivers_a_consistent_history() {
    loom::model(|| {
        let q = Arc::new(DeltaFifo::new(key_func()));
        q.add(obj("ns", "a", 1)).unwrap();
        let popper = {
            let q = Arc::clone(&q);
            thread::spawn(move || pop_rendered(&*q))
        };
        q.replace(vec![obj("ns", "b", 2)], "2".into()).unwrap();
        let first = popper.join().unwrap().unwrap();
        // Popped before the relist: the relist no longer knows "a" (no cache), so no tombstone.
        // Popped after: "a" carries the relist's tombstone.
        assert!(
            first == "ns/a: Added@1" || first == "ns/a: Added@1 Deleted~@1",
            "{first}"
        );
        assert_eq!(pop_rendered(&*q), Ok("ns/b: Replaced@2".to_owned()));
        assert!(q.is_empty());
        assert!(q.has_synced());
    });
}

#[test]
fn first_replace_racing_pop_counts_the_initial_list() {
    loom::model(|| {
        let q = Arc::new(DeltaFifo::new(key_func()));
        let popper = {
            let q = Arc::clone(&q);
            thread::spawn(move || pop_rendered(&*q))
        };
        q.replace(vec![obj("ns", "a", 1), obj("ns", "b", 2)], "2".into())
            .unwrap();
        assert_eq!(
            popper.join().unwrap(),
            Ok("initial ns/a: Replaced@1".to_owned())
        );
        assert!(!q.has_synced());
        assert_eq!(pop_rendered(&*q), Ok("initial ns/b: Replaced@2".to_owned()));
        assert!(q.has_synced());
    });
}

#[test]
fn in_order_pop_blocked_while_add_runs_gets_the_item() {
    loom::model(|| {
        let q = Arc::new(InOrderFifo::new(key_func()));
        let popper = {
            let q = Arc::clone(&q);
            thread::spawn(move || pop_rendered(&*q))
        };
        q.add(obj("ns", "a", 1)).unwrap();
        assert_eq!(popper.join().unwrap(), Ok("ns/a: Added@1".to_owned()));
    });
}

#[test]
fn in_order_replace_racing_pop_delivers_a_consistent_history() {
    loom::model(|| {
        let q = Arc::new(InOrderFifo::new(key_func()));
        q.add(obj("ns", "a", 1)).unwrap();
        let popper = {
            let q = Arc::clone(&q);
            thread::spawn(move || pop_rendered(&*q))
        };
        q.replace(vec![obj("ns", "b", 2)], "2".into()).unwrap();
        assert_eq!(popper.join().unwrap(), Ok("ns/a: Added@1".to_owned()));
        let mut rest = Vec::new();
        while !q.is_empty() {
            rest.push(pop_rendered(&*q).unwrap());
        }
        // Popped before the relist: no tombstone for "a". After: one, before the relist's item.
        assert!(
            rest == ["ns/b: Replaced@2"] || rest == ["ns/a: Deleted~@1", "ns/b: Replaced@2"],
            "{rest:?}"
        );
    });
}
