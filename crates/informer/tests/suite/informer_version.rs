//! The cache's resource version follows every change it applies (client-go 1.35+'s
//! `LastStoreSyncResourceVersion`), and a wait for a version resolves only once the cache holds
//! that change, with a typed answer where it cannot: not comparable, stopped, timed out.

use crate::common;

use std::sync::Arc;
use std::time::Duration;

use common::*;
use informer::VersionWaitError;
use informer_store::{FnIdentity, key_func, meta_namespace_key};

const LONG: Duration = Duration::from_secs(30);

on_each_setup!(
    the_cache_version_follows_every_event_and_a_wait_sees_the_change,
    a_wait_has_a_typed_answer_when_it_cannot_be_met,
);

async fn the_cache_version_follows_every_event_and_a_wait_sees_the_change(kind: Kind) {
    let source = ChannelSource::new();
    source.push_list(
        vec![obj("a", "o1", 1), obj("a", "o2", 2), obj("a", "o3", 3)],
        10,
    );
    let watch = source.open_watch();
    let informer = Arc::new(informer(&source, Duration::ZERO, kind));
    assert_eq!(informer.cache_version(), "", "nothing applied yet");
    let (stop, task) = start(&informer);
    assert!(informer.wait_for_sync_timeout(LONG).await);
    if matches!(kind, Kind::InOrder) {
        // The relist is one change, at its list's version.
        assert_eq!(informer.cache_version(), "10");
    }

    // A wait started before the change resolves once the cache holds it.
    let waiter = tokio::spawn({
        let informer = Arc::clone(&informer);
        async move {
            let reached = informer.wait_for_version("13", LONG).await;
            (reached, cache(&informer))
        }
    });
    watch.modified(&obj("a", "o1", 11));
    watch.added(&obj("b", "o4", 12));
    watch.modified(&obj("a", "o2", 13));
    let (reached, seen) = waiter.await.unwrap();
    assert_eq!(reached, Ok("13".to_owned()));
    assert_eq!(
        seen.get("a/o2"),
        Some(&13),
        "the cache held the change: {seen:?}"
    );
    assert_eq!(seen.get("b/o4"), Some(&12), "and every change before it");

    // A deletion carries the version of the delete.
    watch.deleted(&obj("a", "o3", 14));
    assert_eq!(
        informer.wait_for_version("14", LONG).await,
        Ok("14".to_owned())
    );
    assert!(!cache(&informer).contains_key("a/o3"));
    // An older version is reached already; the answer is the cache's.
    assert_eq!(
        informer.wait_for_version("9", LONG).await,
        Ok("14".to_owned())
    );
    assert_eq!(informer.cache_version(), "14");
    stop.cancel();
    task.await.unwrap().unwrap();
}

async fn a_wait_has_a_typed_answer_when_it_cannot_be_met(kind: Kind) {
    let source = ChannelSource::new();
    source.push_list(vec![obj("a", "o1", 5)], 5);
    let watch = source.open_watch();
    let informer = Arc::new(informer(&source, Duration::ZERO, kind));
    let (stop, task) = start(&informer);
    assert!(informer.wait_for_sync_timeout(LONG).await);
    watch.modified(&obj("a", "o1", 6));
    assert_eq!(informer.wait_for_version("6", LONG).await, Ok("6".into()));

    // Not a decimal integer: answered at once, whatever the timeout.
    assert_eq!(
        informer.wait_for_version("opaque", LONG).await,
        Err(VersionWaitError::NotComparable {
            wanted: "opaque".into(),
            cached: "6".into()
        })
    );
    // Nothing will reach version 100: the wait gives up when its time is up.
    match informer
        .wait_for_version("100", Duration::from_millis(50))
        .await
    {
        Err(VersionWaitError::TimedOut {
            wanted,
            cached,
            waited,
        }) => {
            assert_eq!((wanted.as_str(), cached.as_str()), ("100", "6"));
            assert!(waited >= Duration::from_millis(50), "{waited:?}");
        }
        other => panic!("expected a timeout, got {other:?}"),
    }
    // A wait in progress when the informer stops ends with it.
    let waiter = tokio::spawn({
        let informer = Arc::clone(&informer);
        async move { informer.wait_for_version("100", LONG).await }
    });
    stop.cancel();
    task.await.unwrap().unwrap();
    let stopped = Err(VersionWaitError::Stopped {
        wanted: "100".into(),
    });
    assert_eq!(waiter.await.unwrap(), stopped);
    // And a wait on a stopped informer returns at once, however long it may wait.
    assert_eq!(informer.wait_for_version("100", LONG).await, stopped);
    assert_eq!(
        informer.wait_for_version("100", Duration::MAX).await,
        stopped
    );
}

/// A server whose versions are opaque (here the identity reads them from the `node` field): the
/// cache's version is not comparable, and a wait says so at once rather than waiting its whole
/// timeout.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cache_with_opaque_versions_answers_not_comparable() {
    let source = ChannelSource::new();
    source.push_list(vec![], 1);
    let watch = source.open_watch();
    let identity = FnIdentity::new(key_func(|o: &Obj| meta_namespace_key(Some(&o.ns), &o.name)))
        .with_resource_version(Arc::new(|o: &Obj| Some(o.node.as_str())));
    let informer = Arc::new(informer::SharedIndexInformer::new(
        Arc::clone(&source),
        identity,
    ));
    let (stop, task) = start(&informer);
    assert!(informer.wait_for_sync_timeout(LONG).await);
    watch.added(&on_node("a", "o1", 2, "opaque-2"));
    eventually("the event is applied", || {
        informer.cache_version() == "opaque-2"
    })
    .await;
    assert_eq!(
        informer.wait_for_version("3", LONG).await,
        Err(VersionWaitError::NotComparable {
            wanted: "3".into(),
            cached: "opaque-2".into()
        })
    );
    stop.cancel();
    task.await.unwrap().unwrap();
}
