//! Bad input reaching an informer: what is skipped, what is retried, and that the cache and the
//! handlers stay in step whatever happens.

use crate::common;

use informer::HandlerOptions;
use std::sync::Arc;
use std::time::Duration;

use common::*;
use informer::{RefusalReason, process_deltas};
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

on_each_setup!(
    a_watch_event_without_a_name_is_skipped_and_the_watch_goes_on,
    a_version_an_index_function_refuses_withdraws_the_stale_one_and_later_versions_apply,
    a_list_holding_an_object_without_a_name_applies_the_rest_and_syncs,
    a_list_holding_an_object_the_cache_refuses_applies_the_rest_and_syncs,
    panics_in_key_index_transform_and_version_functions_are_refusals_not_stalls,
    a_stop_during_the_first_list_returns_with_nothing_cached_and_nothing_heard,
);

async fn a_watch_event_without_a_name_is_skipped_and_the_watch_goes_on(kind: Kind) {
    let source = ChannelSource::new();
    source.push_list(vec![obj("a", "x", 1)], 1);
    let watch = source.open_watch();
    let informer = Arc::new(informer(&source, Duration::ZERO, kind));
    let rec = Recorder::new();
    informer
        .add_event_handler(rec.clone(), HandlerOptions::new())
        .unwrap();
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
    assert_eq!(informer.refused_deltas(), 1, "the refused event is counted");
    stop.cancel();
    task.await.unwrap().unwrap();
}

/// A version the cache refuses must not leave the version it superseded in the cache as if
/// current (it used to): the stale version is withdrawn, with a tombstone deletion handlers hear
/// of, and the next good version adds the object back.
async fn a_version_an_index_function_refuses_withdraws_the_stale_one_and_later_versions_apply(
    kind: Kind,
) {
    let source = ChannelSource::new();
    source.push_list(vec![obj("a", "x", 1)], 1);
    let watch = source.open_watch();
    let informer = Arc::new(informer(&source, Duration::ZERO, kind));
    informer.add_indexers(strict_index()).unwrap();
    let rec = Recorder::new();
    informer
        .add_event_handler(rec.clone(), HandlerOptions::new())
        .unwrap();
    let (stop, task) = start(&informer);
    assert!(informer.wait_for_sync().await);

    // The refused version withdraws the cached one, and handlers hear of it as a deletion.
    watch.modified(&on_node("a", "x", 2, "bad"));
    watch.added(&obj("a", "marker", 3));
    eventually("the marker", || rec.len() == 3).await;
    assert!(
        !cache(&informer).contains_key("a/x"),
        "no stale version left"
    );
    assert_eq!(rec.seen()[1], Seen::Delete("a/x".into(), true));
    assert_eq!(rec.seen()[2], Seen::Add("a/marker".into(), 3, false));
    assert_eq!(informer.refused_deltas(), 1);

    // The next good version adds it back.
    watch.modified(&on_node("a", "x", 4, "good"));
    eventually("the good version", || rec.len() == 4).await;
    assert_eq!(rec.seen()[3], Seen::Add("a/x".into(), 4, false));
    assert_eq!(cache(&informer), rec.replay());
    let indexer = informer.lister();
    assert_eq!(indexer.index_keys("strict", "good").unwrap(), ["a/x"]);
    assert_eq!(source.lists_served(), 1);
    assert_eq!(informer.refused_deltas(), 1);
    stop.cancel();
    task.await.unwrap().unwrap();
}

/// One object the queue cannot key used to fail the whole relist, so the informer relisted
/// forever and never synced. Now the rest of the list applies and the informer syncs.
async fn a_list_holding_an_object_without_a_name_applies_the_rest_and_syncs(kind: Kind) {
    let source = ChannelSource::new();
    source.push_list(vec![obj("a", "x", 1), obj("a", "", 2)], 2);
    let _watch = source.open_watch();
    let informer = Arc::new(informer(&source, Duration::ZERO, kind));
    let rec = Recorder::new();
    let registration = informer
        .add_event_handler(rec.clone(), HandlerOptions::new())
        .unwrap();
    let (stop, task) = start(&informer);
    assert!(
        informer
            .wait_for_sync_timeout(Duration::from_secs(10))
            .await,
        "the informer syncs on the rest of the list"
    );
    assert!(registration.wait_for_sync().await);
    assert_eq!(source.lists_served(), 1, "no relist for one bad object");
    assert_eq!(rec.seen(), [Seen::Add("a/x".into(), 1, true)]);
    assert_eq!(cache(&informer), rec.replay());
    assert_eq!(informer.refused_deltas(), 1);
    stop.cancel();
    task.await.unwrap().unwrap();
}

/// The same for an object the cache refuses (an index function failing on it) at pop time.
async fn a_list_holding_an_object_the_cache_refuses_applies_the_rest_and_syncs(kind: Kind) {
    let source = ChannelSource::new();
    source.push_list(
        vec![
            obj("a", "x", 1),
            on_node("a", "y", 2, "bad"),
            obj("a", "z", 3),
        ],
        3,
    );
    let _watch = source.open_watch();
    let informer = Arc::new(informer(&source, Duration::ZERO, kind));
    informer.add_indexers(strict_index()).unwrap();
    let rec = Recorder::new();
    let registration = informer
        .add_event_handler(rec.clone(), HandlerOptions::new())
        .unwrap();
    let (stop, task) = start(&informer);
    assert!(informer.wait_for_sync().await);
    assert!(registration.wait_for_sync().await);
    assert_eq!(source.lists_served(), 1);
    assert_eq!(
        cache(&informer).keys().collect::<Vec<_>>(),
        ["a/x", "a/z"],
        "the rest of the list is cached"
    );
    assert_eq!(cache(&informer), rec.replay());
    assert_eq!(informer.refused_deltas(), 1);
    stop.cancel();
    task.await.unwrap().unwrap();
}

/// A panic in a key, index, transform or resource-version function used to kill the thread it
/// ran on: the cache froze while `has_synced` stayed true and `is_stopped` false. Now each is
/// caught: the object is refused (counted, logged) and later changes still apply.
async fn panics_in_key_index_transform_and_version_functions_are_refusals_not_stalls(kind: Kind) {
    let source = ChannelSource::new();
    source.push_list(vec![obj("a", "x", 1), obj("a", "y", 1)], 1);
    let watch = source.open_watch();
    let informer = Arc::new(panicking_informer(&source, kind));
    let rec = Recorder::new();
    informer
        .add_event_handler(rec.clone(), HandlerOptions::new())
        .unwrap();
    let (stop, task) = start(&informer);
    assert!(informer.wait_for_sync().await);

    watch.added(&obj("a", "key-panics", 2)); // the key function panics
    watch.modified(&on_node("a", "x", 3, "index-panics")); // the index function panics
    watch.modified(&obj("a", "y", 666)); // the transform panics
    // An add: the version function panics when asked for the cache's version.
    watch.added(&obj("a", "version-panics", 777));
    // An update: it panics when asked whether this is a resync, and for the cache's version.
    watch.modified(&obj("a", "version-panics", 777));
    watch.added(&obj("a", "marker", 4));
    eventually("the marker after the panics", || {
        rec.seen().contains(&Seen::Add("a/marker".into(), 4, false))
    })
    .await;
    assert!(!informer.is_stopped());
    let cached = cache(&informer);
    assert!(
        !cached.contains_key("a/x") && !cached.contains_key("a/y"),
        "refused versions withdraw the stale ones: {cached:?}"
    );
    assert_eq!(
        cached["a/version-panics"], 777,
        "a version panic refuses nothing"
    );
    assert_eq!(cached["a/marker"], 4);
    assert_eq!(cached, rec.replay());
    assert_eq!(informer.refused_deltas(), 3, "key, index and transform");
    for reason in [
        RefusalReason::Key,
        RefusalReason::Index,
        RefusalReason::Transform,
    ] {
        assert_eq!(informer.refused_deltas_by(reason), 1, "{reason:?}");
    }
    assert_eq!(informer.refused_deltas_by(RefusalReason::Panic), 0);
    let stats = informer.stats();
    assert_eq!(stats.refused_by_reason.len(), RefusalReason::ALL.len());
    assert_eq!(stats.refused_by_reason.iter().map(|r| r.1).sum::<u64>(), 3);
    // Key, index, transform; the version function on the resync check, and for the cache's
    // version once per pop: the add and the update are one pop when the DeltaFifo has them
    // both queued by then.
    let caught = informer.caught_panics();
    assert!((5..=6).contains(&caught), "{caught} panics caught");
    assert_eq!(
        informer.cache_version(),
        "4",
        "the marker's: a version panic leaves the version where it was"
    );
    assert_eq!(source.lists_served(), 1);
    stop.cancel();
    task.await.unwrap().unwrap();
}

async fn a_stop_during_the_first_list_returns_with_nothing_cached_and_nothing_heard(kind: Kind) {
    // No list is queued: the list request waits forever.
    let source = ChannelSource::new();
    let informer = Arc::new(informer(&source, Duration::ZERO, kind));
    let rec = Recorder::new();
    let registration = informer
        .add_event_handler(rec.clone(), HandlerOptions::new())
        .unwrap();
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
    assert!(
        informer
            .lister()
            .list(&informer_store::Everything)
            .is_empty()
    );
    assert_eq!(source.lists_served(), 0);
}

/// One key's deltas popped together: a refused version in the middle withdraws the stale one
/// and does not hide the ones after it.
#[test]
fn process_deltas_withdraws_a_refused_version_and_applies_the_rest() {
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

    let refused = process_deltas(&*rec, &store, deltas, false);

    assert!(
        matches!(refused.as_slice(), [Error::IndexFunc { .. }]),
        "{refused:?}"
    );
    assert_eq!(
        rec.seen(),
        [
            Seen::Delete("a/x".into(), true),
            Seen::Add("a/x".into(), 3, false)
        ]
    );
    assert_eq!(store.get_by_key("a/x").map(|o| o.rv), Some(3));
    assert_eq!(store.index_keys("strict", "n3").unwrap(), ["a/x"]);
    assert!(store.index_keys("strict", "n1").unwrap().is_empty());
}
