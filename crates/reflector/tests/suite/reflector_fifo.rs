//! The reflector feeding a DeltaFifo through the same `ReflectorStore` contract as a store, with
//! a consumer applying the popped deltas to a cache that the queue reads back: a deletion missed
//! while no watch could see it reaches the consumer as a tombstone, and the cache converges.

use crate::common;

use std::sync::Arc;
use std::time::Duration;

use common::model_server::ModelServer;
use common::*;
use informer_fifo::{Delta, DeltaFifo, DeltaFifoOptions, Queue, QueueExt};
use informer_reflector::Reflector;
use informer_store::{KnownObjects, ReflectorStore, Store, ThreadSafeStore, key_func};
use parking_lot::Mutex;
use tokio_util::sync::CancellationToken;

#[tokio::test(start_paused = true)]
async fn a_missed_deletion_reaches_the_consumer_as_a_tombstone() {
    let server = ModelServer::new();
    server.put("a");
    server.put("b");

    let key = key_func(|o: &Obj| Ok(o.name.clone()));
    let cache = Arc::new(ThreadSafeStore::new(key.clone()));
    let fifo = Arc::new(DeltaFifo::with_options(
        key,
        DeltaFifoOptions::default().known_objects(cache.clone()),
    ));
    let seen = Arc::new(Mutex::new(Vec::<String>::new()));

    // The consumer: a plain thread blocked in pop, applying each key's newest delta.
    let consumer = std::thread::spawn({
        let (fifo, cache, seen) = (fifo.clone(), cache.clone(), seen.clone());
        move || {
            while let Ok(()) = fifo.pop_with(|deltas, _| {
                for delta in &deltas {
                    let (what, name) = match delta {
                        Delta::Deleted(d) if d.is_tombstone() => {
                            ("tombstone", d.tombstone().unwrap().key.clone())
                        }
                        other => (
                            match other.delta_type() {
                                informer_fifo::DeltaType::Added => "added",
                                informer_fifo::DeltaType::Updated => "updated",
                                informer_fifo::DeltaType::Deleted => "deleted",
                                informer_fifo::DeltaType::Replaced => "replaced",
                                informer_fifo::DeltaType::Sync => "sync",
                            },
                            other.object().unwrap().name.clone(),
                        ),
                    };
                    seen.lock().push(format!("{what} {name}"));
                }
                match deltas.newest() {
                    Delta::Deleted(d) => {
                        let key = d
                            .tombstone()
                            .map(|t| t.key.clone())
                            .or_else(|| d.object().map(|o| o.name.clone()))
                            .unwrap();
                        cache.delete_by_key(&key).unwrap();
                    }
                    other => cache.update(other.object().unwrap().clone()).unwrap(),
                }
            }) {}
        }
    });

    let reflector = Arc::new(Reflector::new(server.clone(), fifo.clone()).with_seed(9));
    let stop = CancellationToken::new();
    let task = tokio::spawn({
        let (reflector, stop) = (reflector.clone(), stop.clone());
        async move { reflector.run(stop).await }
    });

    // The consumer is a real thread: give it real time, with a generous bound.
    let cached = || {
        let mut keys = cache.list_keys();
        keys.sort();
        keys
    };
    async fn eventually(what: &str, cond: impl Fn() -> bool) {
        for _ in 0..5_000 {
            if cond() {
                return;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
            std::thread::sleep(Duration::from_millis(1));
        }
        panic!("never happened: {what}");
    }

    eventually("the first list is cached", || cached() == ["a", "b"]).await;
    assert!(fifo.has_synced());
    server.put("c");
    eventually("c is cached", || cached() == ["a", "b", "c"]).await;

    // b is deleted and the history reset before the watch can tell: the relist finds b gone.
    server.delete("b");
    server.reset_history();
    eventually("b is gone", || cached() == ["a", "c"]).await;

    let seen = seen.lock().clone();
    assert_eq!(
        &seen[..2],
        ["replaced a", "replaced b"],
        "the first list: {seen:?}"
    );
    assert!(seen.contains(&"added c".to_owned()), "{seen:?}");
    assert!(seen.contains(&"tombstone b".to_owned()), "{seen:?}");
    assert!(!seen.contains(&"deleted b".to_owned()), "{seen:?}");

    stop.cancel();
    task.await.unwrap();
    fifo.close();
    consumer.join().unwrap();
}
