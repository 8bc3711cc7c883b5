//! An informer's shard set: the set of its cache's last complete list follows a change only once
//! the relist at the new set is applied to the cache, not when the reflector has queued it.

use crate::common;

use std::sync::Arc;
use std::time::Duration;

use common::*;
use informer::{QueueKind, ShardField, ShardSelector, SharedIndexInformer};
use informer_store::{FnIdentity, IndexValues, index_func, indexers, key_func};

const OBJECTS: usize = 40;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_listed_set_is_the_caches_with_the_delta_fifo() {
    the_listed_set_is_the_caches(QueueKind::DeltaFifo).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_listed_set_is_the_caches_with_the_in_order_fifo() {
    the_listed_set_is_the_caches(QueueKind::InOrder).await;
}

/// The relist at the new set is applied slowly (an index function that takes a millisecond an
/// object): the moment the set is published, every object of it is in the cache.
async fn the_listed_set_is_the_caches(kind: QueueKind<Obj>) {
    let source = ChannelSource::new();
    let objects: Vec<_> = (0..OBJECTS)
        .map(|i| obj("a", &format!("o{i}"), 1))
        .collect();
    // The first list, at no shard at all; then the relist at every shard.
    source.push_list(objects.clone(), 1);
    let _first = source.open_watch();
    source.push_list(objects, 2);
    let _second = source.open_watch();
    let slow = indexers([(
        "slow",
        index_func(|o: &Obj| {
            std::thread::sleep(Duration::from_millis(1));
            Ok(IndexValues::one(o.ns.as_str()))
        }),
    )]);
    let identity = FnIdentity::new(key_func(|o: &Obj| Ok(key(o)))).with_indexers(slow);
    let informer = Arc::new(
        SharedIndexInformer::builder(Arc::clone(&source), identity)
            .queue(kind)
            .shards(ShardSelector::none(ShardField::Uid))
            .build(),
    );
    let mut listed = informer.watch_listed_shards();
    let (stop, task) = start(&informer);
    informer.wait_for_sync().await;
    let none = ShardSelector::none(ShardField::Uid);
    eventually("the first list's set published", || {
        informer.listed_shards() == Some(none.clone())
    })
    .await;
    assert!(cache(&informer).is_empty());

    let every = ShardSelector::for_shards(ShardField::Uid, 1, [0]).unwrap();
    informer.set_shards(Some(every.clone()));
    let published = listed.wait_for(|set| set.as_ref() == Some(&every));
    tokio::time::timeout(Duration::from_secs(60), published)
        .await
        .expect("the relist's set is published")
        .expect("the informer lives");
    // Read at once: published only once the cache holds the whole relist.
    assert_eq!(cache(&informer).len(), OBJECTS);
    stop.cancel();
    task.await.unwrap().unwrap();
}
