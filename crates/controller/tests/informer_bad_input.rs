//! Bad input reaching an informer: what is skipped, what is retried, and that the cache and the
//! handlers stay in step whatever happens.

mod common;

use std::sync::Arc;
use std::time::Duration;

use common::*;
use informer_controller::process_deltas;
use informer_fifo::{Delta, DeltaType, Deltas};
use informer_store::{
    Error, IndexValues, Indexer, KnownObjects, Store, ThreadSafeStore, index_func, indexers,
};

/// An index that refuses objects on node `bad` (a stand-in for any index function failing).
fn strict_index() -> informer_store::Indexers<Obj> {
    indexers([(
        "strict",
        index_func(|o: &Obj| {
            if o.node == "bad" {
                Err("node `bad` cannot be indexed".into())
            } else {
                Ok(IndexValues::one(o.node.as_str()))
            }
        }),
    )])
}

on_both_queues!(
    a_watch_event_without_a_name_is_skipped_and_the_watch_goes_on,
    a_version_an_index_function_refuses_is_skipped_and_later_versions_apply,
    a_list_holding_an_object_without_a_name_is_refused_whole_and_retried,
    a_stop_during_the_first_list_returns_with_nothing_cached_and_nothing_heard,
);

async fn a_watch_event_without_a_name_is_skipped_and_the_watch_goes_on(kind: Kind) {
    let source = ChannelSource::new();
    source.push_list(vec![obj("a", "x", 1)], 1);
    let watch = source.open_watch();
    let informer = Arc::new(informer(&source, Duration::ZERO, kind));
    let rec = Recorder::new();
    informer.add_event_handler(rec.clone()).unwrap();
    let (stop, task) = start(&informer);
    informer.wait_for_sync().await;

    watch.added(&obj("a", "", 2));
    watch.modified(&obj("a", "x", 3));
    eventually("the event after the nameless one", || rec.len() == 2).await;
    assert_eq!(
        rec.seen(),
        [
            Seen::Add("a/x".into(), 1, true),
            Seen::Update("a/x".into(), 1, 3)
        ]
    );
    assert_eq!(cache(&informer), rec.replay());
    assert_eq!(
        source.lists_served(),
        1,
        "a key error is not a reason to relist"
    );
    stop.cancel();
    task.await.unwrap().unwrap();
}

async fn a_version_an_index_function_refuses_is_skipped_and_later_versions_apply(kind: Kind) {
    let source = ChannelSource::new();
    source.push_list(vec![obj("a", "x", 1)], 1);
    let watch = source.open_watch();
    let informer = Arc::new(informer(&source, Duration::ZERO, kind));
    informer.add_indexers(strict_index()).unwrap();
    let rec = Recorder::new();
    informer.add_event_handler(rec.clone()).unwrap();
    let (stop, task) = start(&informer);
    informer.wait_for_sync().await;

    // The refused version leaves the cached one in place and is never announced.
    watch.modified(&on_node("a", "x", 2, "bad"));
    watch.added(&obj("a", "marker", 3));
    eventually("the marker", || rec.len() == 2).await;
    assert_eq!(cache(&informer)["a/x"], 1);
    assert_eq!(rec.seen()[1], Seen::Add("a/marker".into(), 3, false));

    // The next good version applies on top of the last good one.
    watch.modified(&on_node("a", "x", 4, "good"));
    eventually("the good version", || rec.len() == 3).await;
    assert_eq!(rec.seen()[2], Seen::Update("a/x".into(), 1, 4));
    assert_eq!(cache(&informer), rec.replay());
    let indexer = informer.indexer();
    assert_eq!(indexer.index_keys("strict", "good").unwrap(), ["a/x"]);
    assert_eq!(source.lists_served(), 1);
    stop.cancel();
    task.await.unwrap().unwrap();
}

async fn a_list_holding_an_object_without_a_name_is_refused_whole_and_retried(kind: Kind) {
    let source = ChannelSource::new();
    source.push_list(vec![obj("a", "x", 1), obj("a", "", 2)], 2);
    source.push_list(vec![obj("a", "x", 1), obj("a", "y", 3)], 3);
    let _watch = source.open_watch();
    let informer = Arc::new(informer(&source, Duration::ZERO, kind));
    let rec = Recorder::new();
    informer.add_event_handler(rec.clone()).unwrap();
    let (stop, task) = start(&informer);
    informer.wait_for_sync().await;

    // Nothing of the refused list reached the cache or the handler.
    eventually("the second list's adds", || rec.len() == 2).await;
    assert_eq!(source.lists_served(), 2);
    assert_eq!(
        rec.seen(),
        [
            Seen::Add("a/x".into(), 1, true),
            Seen::Add("a/y".into(), 3, true)
        ]
    );
    assert_eq!(cache(&informer), rec.replay());
    stop.cancel();
    task.await.unwrap().unwrap();
}

async fn a_stop_during_the_first_list_returns_with_nothing_cached_and_nothing_heard(kind: Kind) {
    // No list is queued: the list request waits forever.
    let source = ChannelSource::new();
    let informer = Arc::new(informer(&source, Duration::ZERO, kind));
    let rec = Recorder::new();
    let registration = informer.add_event_handler(rec.clone()).unwrap();
    let (stop, task) = start(&informer);
    eventually("the list request", || source.lists_asked() == 1).await;
    stop.cancel();
    tokio::time::timeout(Duration::from_secs(10), task)
        .await
        .expect("run returns once stopped, even inside a list")
        .unwrap()
        .unwrap();
    assert!(!informer.has_synced());
    assert!(!registration.has_synced());
    assert_eq!(rec.len(), 0);
    assert!(informer.store().list().is_empty());
    assert_eq!(source.lists_served(), 0);
}

/// One key's deltas popped together: a refused version in the middle does not hide the ones
/// after it.
#[test]
fn process_deltas_skips_a_refused_delta_and_applies_the_rest() {
    let store = ThreadSafeStore::with_indexers(
        informer_store::key_func(|o: &Obj| Ok(key(o))),
        strict_index(),
    );
    store.upsert(on_node("a", "x", 1, "n1")).unwrap();
    let rec = Recorder::new();
    let deltas = Deltas::try_from(vec![
        Delta::new(DeltaType::Updated, on_node("a", "x", 2, "bad")),
        Delta::new(DeltaType::Updated, on_node("a", "x", 3, "n3")),
    ])
    .unwrap();

    let result = process_deltas(&*rec, &store, deltas, false);

    assert!(matches!(result, Err(Error::IndexFunc { .. })), "{result:?}");
    assert_eq!(rec.seen(), [Seen::Update("a/x".into(), 1, 3)]);
    assert_eq!(store.get_by_key("a/x").map(|o| o.rv), Some(3));
    assert_eq!(store.index_keys("strict", "n3").unwrap(), ["a/x"]);
    assert!(store.index_keys("strict", "n1").unwrap().is_empty());
}
