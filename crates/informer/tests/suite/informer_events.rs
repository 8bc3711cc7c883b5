//! The informer end to end over an in-memory source: what handlers see, and when.

use crate::common;

on_each_setup!(
    initial_list_arrives_as_initial_adds_then_watch_events_follow,
    the_cache_is_updated_before_handlers_hear_of_a_change,
    a_relist_turns_a_vanished_object_into_a_tombstone_deletion,
    a_relist_keeps_the_cached_object_when_it_brings_the_same_version,
    a_relist_by_page_applies_each_page_before_the_next_arrives,
    a_late_handler_gets_the_cache_then_the_live_stream_with_nothing_missed,
    a_slow_handler_delays_nobody_else,
    a_removed_handler_gets_what_was_buffered_and_nothing_after,
    a_panicking_handler_goes_on_with_the_next_notification,
    stop_handler_policy_stops_only_the_panicking_handler,
    filtered_handler_sees_objects_enter_and_leave_its_set,
    the_filter_option_applies_to_handlers_and_streams_alike,
    transform_indexes_and_lister_see_the_transformed_objects,
    run_twice_is_a_no_op_and_stop_joins_everything,
    typed_index_handles_look_up_what_their_index_holds,
);

use informer::HandlerOptions;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use common::*;
use informer::{
    InformerError, PanicPolicy, ResourceEventHandler, ResourceEventHandlerExt,
    ResourceEventHandlerFuncs,
};
use informer_fifo::transform_func;
use informer_store::Indexers;

async fn initial_list_arrives_as_initial_adds_then_watch_events_follow(kind: Kind) {
    let source = ChannelSource::new();
    source.push_list(
        vec![obj("a", "x", 1), obj("a", "y", 2), obj("b", "z", 3)],
        3,
    );
    let watch = source.open_watch();
    let informer = Arc::new(informer(&source, Duration::ZERO, kind));
    let rec = Recorder::new();
    let reg = informer
        .add_event_handler(rec.clone(), HandlerOptions::new())
        .unwrap();
    assert!(
        !reg.has_synced() && !informer.has_synced(),
        "nothing synced before run"
    );
    let (stop, task) = start(&informer);

    tokio::time::timeout(Duration::from_secs(10), informer.wait_for_sync())
        .await
        .unwrap();
    eventually("handler synced", || reg.has_synced()).await;
    let mut initial = rec.seen();
    initial.sort_by(|a, b| format!("{a:?}").cmp(&format!("{b:?}")));
    assert_eq!(
        initial,
        [
            Seen::Add("a/x".into(), 1, true),
            Seen::Add("a/y".into(), 2, true),
            Seen::Add("b/z".into(), 3, true)
        ]
    );
    // Recorded once the store has taken the list, which the informer can have popped already.
    eventually("the list's resource version recorded", || {
        informer.last_sync_resource_version() == "3"
    })
    .await;

    watch.added(&obj("b", "new", 4));
    watch.modified(&obj("a", "x", 5));
    watch.deleted(&obj("a", "y", 6));
    eventually("three watch events", || rec.len() == 6).await;
    assert_eq!(
        rec.seen()[3..],
        [
            Seen::Add("b/new".into(), 4, false),
            Seen::Update("a/x".into(), 1, 5),
            Seen::Delete("a/y".into(), false)
        ]
    );
    assert_eq!(cache(&informer), rec.replay());
    eventually("resource version advanced", || {
        informer.last_sync_resource_version() == "6"
    })
    .await;

    stop.cancel();
    task.await.unwrap().unwrap();
    assert!(informer.is_stopped());
    assert!(reg.is_stopped());
}

/// The handler runs after the cache has the change: it can read it back.
async fn the_cache_is_updated_before_handlers_hear_of_a_change(kind: Kind) {
    let source = ChannelSource::new();
    // No key is deleted and then re-added, so "the cache has seen this change" reads: an added
    // or updated object is cached at this version or newer; a deleted one is not cached.
    source.push_list(vec![obj("a", "x", 1), obj("a", "z", 1)], 1);
    let watch = source.open_watch();
    let informer = Arc::new(informer(&source, Duration::ZERO, kind));
    let checks = Arc::new(AtomicUsize::new(0));
    let lister = informer.lister();
    let (l1, l2, l3, c) = (lister.clone(), lister.clone(), lister, checks.clone());
    let (c2, c3) = (c.clone(), c.clone());
    informer
        .add_event_handler(
            ResourceEventHandlerFuncs::new()
                .with_add(move |k, o: &Arc<Obj>, _| {
                    assert!(l1.get(k).is_some_and(|cached| cached.rv >= o.rv));
                    c.fetch_add(1, Ordering::SeqCst);
                })
                .with_update(move |k, _, new| {
                    assert!(l2.get(k).is_some_and(|cached| cached.rv >= new.rv));
                    c2.fetch_add(1, Ordering::SeqCst);
                })
                .with_delete(move |k, _, _| {
                    assert!(l3.get(k).is_none());
                    c3.fetch_add(1, Ordering::SeqCst);
                }),
            HandlerOptions::new(),
        )
        .unwrap();
    let reg = informer
        .add_event_handler(Recorder::new(), HandlerOptions::new())
        .unwrap();
    let (stop, task) = start(&informer);
    // The initial adds (z's included) are handled before z is deleted.
    eventually("initial adds checked", || {
        checks.load(Ordering::SeqCst) == 2
    })
    .await;
    eventually("synced", || reg.has_synced()).await;
    watch.modified(&obj("a", "x", 2));
    watch.added(&obj("a", "y", 3));
    watch.deleted(&obj("a", "z", 4));
    watch.modified(&obj("a", "y", 5));
    eventually("six notifications checked", || {
        checks.load(Ordering::SeqCst) == 6
    })
    .await;
    stop.cancel();
    task.await.unwrap().unwrap();
}

async fn a_relist_turns_a_vanished_object_into_a_tombstone_deletion(kind: Kind) {
    let source = ChannelSource::new();
    source.push_list(vec![obj("a", "keep", 1), obj("a", "gone", 2)], 2);
    let first = source.open_watch();
    let informer = Arc::new(informer(&source, Duration::ZERO, kind));
    let rec = Recorder::new();
    informer
        .add_event_handler(rec.clone(), HandlerOptions::new())
        .unwrap();
    let (stop, task) = start(&informer);
    informer.wait_for_sync().await;
    eventually("initial adds", || rec.len() == 2).await;

    // The watch expires; meanwhile `gone` was deleted and `keep` did not change.
    source.push_list(vec![obj("a", "keep", 1), obj("a", "fresh", 5)], 6);
    let _second = source.open_watch();
    first.expire();
    eventually("relist handled", || rec.len() == 5).await;
    let mut after = rec.seen()[2..].to_vec();
    after.sort_by(|a, b| format!("{a:?}").cmp(&format!("{b:?}")));
    assert_eq!(
        after,
        [
            Seen::Add("a/fresh".into(), 5, false),
            Seen::Delete("a/gone".into(), true),
            // Same version: a resync-style update, delivered because the handler has never been
            // told otherwise (every handler takes resyncs until a resync check says not).
            Seen::Update("a/keep".into(), 1, 1),
        ]
    );
    assert_eq!(source.lists_served(), 2);
    assert_eq!(cache(&informer), rec.replay());
    stop.cancel();
    task.await.unwrap().unwrap();
}

/// A relist that brings an object at the version cached keeps the cached object (the same
/// `Arc`): the relist holds no second copy of what did not change. A changed object is the
/// relisted one.
async fn a_relist_keeps_the_cached_object_when_it_brings_the_same_version(kind: Kind) {
    let source = ChannelSource::new();
    source.push_list(vec![obj("a", "keep", 1), obj("a", "change", 2)], 2);
    let first = source.open_watch();
    let informer = Arc::new(informer(&source, Duration::ZERO, kind));
    let (stop, task) = start(&informer);
    informer.wait_for_sync().await;
    let before = |name: &str| informer.lister().get(&format!("a/{name}")).expect("cached");
    let (kept, changed) = (before("keep"), before("change"));

    let relisted_keep = obj("a", "keep", 1);
    source.push_list(vec![Arc::clone(&relisted_keep), obj("a", "change", 7)], 7);
    let _second = source.open_watch();
    first.expire();
    eventually("the relist applied", || cache(&informer)["a/change"] == 7).await;
    let after = |name: &str| informer.lister().get(&format!("a/{name}")).expect("cached");
    assert!(
        Arc::ptr_eq(&after("keep"), &kept),
        "the same version: the cached object is kept"
    );
    assert!(!Arc::ptr_eq(&after("keep"), &relisted_keep));
    assert!(!Arc::ptr_eq(&after("change"), &changed));
    assert_eq!(after("change").rv, 7);
    assert_eq!(source.lists_served(), 2);
    stop.cancel();
    task.await.unwrap().unwrap();
}

/// With `with_relist_by_page`, a relist's first page reaches the cache (and the handlers) while
/// the next page has not been served yet; what no page listed is deleted after the last one.
async fn a_relist_by_page_applies_each_page_before_the_next_arrives(kind: Kind) {
    let source = ChannelSource::new();
    source.push_list(
        vec![
            obj("a", "keep", 1),
            obj("a", "change", 2),
            obj("a", "gone", 3),
        ],
        3,
    );
    let first = source.open_watch();
    let informer = Arc::new(
        informer_builder(&source, Duration::ZERO, kind)
            .relist_by_page(true)
            .build(),
    );
    let rec = Recorder::new();
    informer
        .add_event_handler(rec.clone(), HandlerOptions::new())
        .unwrap();
    let (stop, task) = start(&informer);
    informer.wait_for_sync().await;
    eventually("initial adds", || rec.len() == 3).await;

    source.push_page(vec![obj("a", "change", 7)], 8, Some("next"));
    let _second = source.open_watch();
    first.expire();
    eventually("the first page is applied", || {
        cache(&informer).get("a/change") == Some(&7)
    })
    .await;
    eventually("the next page asked for", || source.lists_asked() == 3).await;
    assert_eq!(
        source.lists_served(),
        2,
        "the second page is not served yet"
    );
    assert_eq!(
        cache(&informer).get("a/gone"),
        Some(&3),
        "nothing is deleted before the last page"
    );

    source.push_page(vec![obj("a", "keep", 1), obj("a", "fresh", 8)], 8, None);
    eventually("the relist applied", || rec.len() == 7).await;
    let after = rec.seen()[3..].to_vec();
    assert_eq!(after[0], Seen::Update("a/change".into(), 2, 7));
    let mut rest = after[1..].to_vec();
    rest.sort_by(|a, b| format!("{a:?}").cmp(&format!("{b:?}")));
    assert_eq!(
        rest,
        [
            Seen::Add("a/fresh".into(), 8, false),
            Seen::Delete("a/gone".into(), true),
            Seen::Update("a/keep".into(), 1, 1),
        ]
    );
    let expected: std::collections::BTreeMap<String, u64> =
        [("a/change", 7), ("a/fresh", 8), ("a/keep", 1)]
            .into_iter()
            .map(|(k, v)| (k.to_owned(), v))
            .collect();
    assert_eq!(cache(&informer), expected);
    assert_eq!(cache(&informer), rec.replay());
    // The reflector records the list's resource version once the store has taken the last
    // page, which a handler can have heard of already.
    eventually("the relist's resource version recorded", || {
        informer.last_sync_resource_version() == "8"
    })
    .await;
    stop.cancel();
    task.await.unwrap().unwrap();
}

async fn a_late_handler_gets_the_cache_then_the_live_stream_with_nothing_missed(kind: Kind) {
    let source = ChannelSource::new();
    source.push_list(
        (0..50).map(|i| obj("a", &format!("o{i}"), i + 1)).collect(),
        50,
    );
    let watch = source.open_watch();
    let informer = Arc::new(informer(&source, Duration::ZERO, kind));
    let early = Recorder::new();
    informer
        .add_event_handler(early.clone(), HandlerOptions::new())
        .unwrap();
    let (stop, task) = start(&informer);
    informer.wait_for_sync().await;

    // Events keep flowing while the late handler joins.
    let producer = tokio::spawn(async move {
        for rv in 51..=250u64 {
            watch.modified(&obj("a", &format!("o{}", rv % 50), rv));
            if rv % 20 == 0 {
                tokio::task::yield_now().await;
            }
        }
        watch
    });
    let late = Recorder::new();
    let reg = informer
        .add_event_handler(late.clone(), HandlerOptions::new())
        .unwrap();
    let _watch = producer.await.unwrap();
    eventually("early saw everything", || early.len() == 250).await;
    eventually("late caught up", || late.replay() == early.replay()).await;
    assert!(reg.has_synced());
    let seen = late.seen();
    let snapshot = seen
        .iter()
        .take_while(|s| matches!(s, Seen::Add(_, _, true)))
        .count();
    assert_eq!(snapshot, 50, "one initial add per cached object, first");
    assert!(
        seen[snapshot..]
            .iter()
            .all(|s| matches!(s, Seen::Update(..))),
        "then live updates"
    );
    // No update repeated or skipped: each key's versions strictly increase from its snapshot.
    let mut last = late.replay();
    last.clear();
    for s in &seen {
        let (k, rv) = match s {
            Seen::Add(k, rv, _) => (k, *rv),
            Seen::Update(k, old, rv) => {
                assert_eq!(
                    last.get(k),
                    Some(old),
                    "update's old side is the previous state"
                );
                (k, *rv)
            }
            Seen::Delete(..) => unreachable!(),
        };
        last.insert(k.clone(), rv);
    }
    assert_eq!(last, cache(&informer));
    stop.cancel();
    task.await.unwrap().unwrap();
}

async fn a_slow_handler_delays_nobody_else(kind: Kind) {
    let source = ChannelSource::new();
    source.push_list(vec![], 1);
    let watch = source.open_watch();
    let informer = Arc::new(informer(&source, Duration::ZERO, kind));
    let (release_tx, release_rx) = crossbeam_channel::bounded::<()>(0);
    let slow_seen = Arc::new(AtomicUsize::new(0));
    let counter = slow_seen.clone();
    let slow = informer
        .add_event_handler(
            ResourceEventHandlerFuncs::new().with_add(move |_, _: &Arc<Obj>, _| {
                // Blocks until the test lets it go.
                let _ = release_rx.recv();
                counter.fetch_add(1, Ordering::SeqCst);
            }),
            HandlerOptions::new(),
        )
        .unwrap();
    let fast = Recorder::new();
    informer
        .add_event_handler(fast.clone(), HandlerOptions::new())
        .unwrap();
    let (stop, task) = start(&informer);
    for i in 0..100 {
        watch.added(&obj("a", &format!("o{i}"), i + 2));
    }
    eventually("the fast handler saw all 100", || fast.len() == 100).await;
    assert_eq!(
        slow_seen.load(Ordering::SeqCst),
        0,
        "the slow one is still on its first"
    );
    eventually("the slow handler's backlog", || slow.backlog() == 99).await;
    drop(release_tx); // every recv now returns at once
    eventually("the slow handler caught up", || {
        slow_seen.load(Ordering::SeqCst) == 100
    })
    .await;
    assert_eq!(slow.backlog(), 0);
    stop.cancel();
    task.await.unwrap().unwrap();
}

async fn a_removed_handler_gets_what_was_buffered_and_nothing_after(kind: Kind) {
    let source = ChannelSource::new();
    source.push_list(vec![], 1);
    let watch = source.open_watch();
    let informer = Arc::new(informer(&source, Duration::ZERO, kind));
    let (release_tx, release_rx) = crossbeam_channel::unbounded::<()>();
    let seen = Arc::new(AtomicUsize::new(0));
    let counter = seen.clone();
    let reg = informer
        .add_event_handler(
            ResourceEventHandlerFuncs::new().with_add(move |_, _: &Arc<Obj>, _| {
                let _ = release_rx.recv();
                counter.fetch_add(1, Ordering::SeqCst);
            }),
            HandlerOptions::new(),
        )
        .unwrap();
    let witness = Recorder::new();
    informer
        .add_event_handler(witness.clone(), HandlerOptions::new())
        .unwrap();
    let (stop, task) = start(&informer);
    for i in 0..10 {
        watch.added(&obj("a", &format!("o{i}"), i + 2));
    }
    eventually("all ten distributed", || witness.len() == 10).await;
    informer.remove_event_handler(&reg).unwrap();
    informer.remove_event_handler(&reg).unwrap(); // idempotent
    for i in 10..20 {
        watch.added(&obj("a", &format!("o{i}"), i + 2));
    }
    eventually("the witness saw the later ten", || witness.len() == 20).await;
    for _ in 0..20 {
        release_tx.send(()).unwrap();
    }
    tokio::time::timeout(Duration::from_secs(10), reg.stopped())
        .await
        .expect("the removed handler drains and stops");
    assert!(reg.is_stopped());
    assert_eq!(
        seen.load(Ordering::SeqCst),
        10,
        "buffered before removal: delivered; after: not"
    );
    stop.cancel();
    task.await.unwrap().unwrap();
}

async fn a_panicking_handler_goes_on_with_the_next_notification(kind: Kind) {
    let source = ChannelSource::new();
    source.push_list(vec![obj("a", "boom", 1), obj("a", "ok", 2)], 2);
    let watch = source.open_watch();
    let informer = Arc::new(informer(&source, Duration::ZERO, kind));
    let rec = Recorder::new();
    let inner = rec.clone();
    let reg = informer
        .add_event_handler(
            ResourceEventHandlerFuncs::new().with_add(move |k, o: &Arc<Obj>, initial| {
                if o.name == "boom" {
                    panic!("handler bug");
                }
                inner.on_add(k, o, initial);
            }),
            HandlerOptions::new(),
        )
        .unwrap();
    let (stop, task) = start(&informer);
    eventually("synced despite the panic", || reg.has_synced()).await;
    watch.added(&obj("a", "later", 3));
    eventually("the later add handled", || rec.len() == 2).await;
    assert_eq!(reg.panics(), 1);
    assert!(!reg.is_stopped());
    stop.cancel();
    task.await.unwrap().unwrap();
}

async fn stop_handler_policy_stops_only_the_panicking_handler(kind: Kind) {
    let source = ChannelSource::new();
    source.push_list(vec![obj("a", "boom", 1)], 1);
    let watch = source.open_watch();
    let informer = Arc::new(
        informer_builder(&source, Duration::ZERO, kind)
            .panic_policy(PanicPolicy::StopHandler)
            .build(),
    );
    let panicky = informer
        .add_event_handler(
            ResourceEventHandlerFuncs::new().with_add(|_, _: &Arc<Obj>, _| panic!("bug")),
            HandlerOptions::new(),
        )
        .unwrap();
    let rec = Recorder::new();
    informer
        .add_event_handler(rec.clone(), HandlerOptions::new())
        .unwrap();
    let (stop, task) = start(&informer);
    eventually("the panicking handler stopped", || panicky.is_stopped()).await;
    watch.added(&obj("a", "later", 2));
    eventually("the other handler goes on", || rec.len() == 2).await;
    assert_eq!(panicky.delivered(), 1);
    stop.cancel();
    task.await.unwrap().unwrap();
}

async fn filtered_handler_sees_objects_enter_and_leave_its_set(kind: Kind) {
    let source = ChannelSource::new();
    source.push_list(
        vec![on_node("a", "x", 1, "n1"), on_node("a", "y", 2, "n2")],
        2,
    );
    let watch = source.open_watch();
    let informer = Arc::new(informer(&source, Duration::ZERO, kind));
    let rec = Recorder::new();
    informer
        .add_event_handler(
            rec.clone().filtered(|o: &Obj| o.node == "n1"),
            HandlerOptions::new(),
        )
        .unwrap();
    let (stop, task) = start(&informer);
    eventually("initial", || rec.len() == 1).await;
    watch.modified(&on_node("a", "y", 3, "n1")); // enters
    watch.modified(&on_node("a", "x", 4, "n2")); // leaves
    watch.modified(&on_node("a", "x", 5, "n3")); // stays out
    watch.modified(&on_node("a", "y", 6, "n1")); // stays in
    eventually("four notifications", || rec.len() == 4).await;
    // The queue batches changes per key, so only each key's own order is fixed.
    let seen = rec.seen();
    let of = |k: &str| -> Vec<Seen> {
        seen[1..]
            .iter()
            .filter(|s| format!("{s:?}").contains(k))
            .cloned()
            .collect()
    };
    assert_eq!(
        of("a/y"),
        [
            Seen::Add("a/y".into(), 3, false),
            Seen::Update("a/y".into(), 3, 6)
        ]
    );
    assert_eq!(of("a/x"), [Seen::Delete("a/x".into(), false)]);
    stop.cancel();
    task.await.unwrap().unwrap();
}

/// `HandlerOptions::filter` gives a handler and a stream the same view as the filtering
/// handler above; an initial add it filters out counts as handled, so both consumers sync.
async fn the_filter_option_applies_to_handlers_and_streams_alike(kind: Kind) {
    use futures::StreamExt;
    let source = ChannelSource::new();
    source.push_list(
        vec![on_node("a", "x", 1, "n1"), on_node("a", "y", 2, "n2")],
        2,
    );
    let watch = source.open_watch();
    let informer = Arc::new(informer(&source, Duration::ZERO, kind));
    let on_n1 = || HandlerOptions::new().filter(|o: &Obj| o.node == "n1");
    let rec = Recorder::new();
    let handler = informer.add_event_handler(rec.clone(), on_n1()).unwrap();
    let mut stream = informer.subscribe(on_n1()).unwrap();
    let (stop, task) = start(&informer);
    let Some(informer::Event::Add { key, obj, initial }) = stream.next().await else {
        panic!("the stream's first event is the initial add of a/x");
    };
    assert_eq!((&*key, obj.rv, initial), ("a/x", 1, true));
    assert!(handler.wait_for_sync().await, "the handler syncs");
    watch.modified(&on_node("a", "y", 3, "n1")); // enters
    watch.modified(&on_node("a", "x", 4, "n2")); // leaves
    watch.modified(&on_node("a", "x", 5, "n3")); // stays out
    watch.modified(&on_node("a", "y", 6, "n1")); // stays in
    let mut streamed = Vec::new();
    while streamed.len() < 3 {
        streamed.push(match stream.next().await.expect("the stream goes on") {
            informer::Event::Add { key, obj, initial } => {
                Seen::Add(key.to_string(), obj.rv, initial)
            }
            informer::Event::Update { key, old, new } => {
                Seen::Update(key.to_string(), old.rv, new.rv)
            }
            informer::Event::Delete {
                key,
                final_state_unknown,
                ..
            } => Seen::Delete(key.to_string(), final_state_unknown),
            other => panic!("an event of a kind not known here: {other:?}"),
        });
    }
    eventually("the handler's four notifications", || rec.len() == 4).await;
    // The stream counts an event handled when it is asked for the next one: it has synced.
    assert!(stream.has_synced(), "the stream syncs");
    // The queue batches changes per key, so only each key's own order is fixed.
    let of = |seen: &[Seen], k: &str| -> Vec<Seen> {
        seen.iter()
            .filter(|s| format!("{s:?}").contains(k))
            .cloned()
            .collect()
    };
    let handled = rec.seen()[1..].to_vec();
    for seen in [&handled, &streamed] {
        assert_eq!(
            of(seen, "a/y"),
            [
                Seen::Add("a/y".into(), 3, false),
                Seen::Update("a/y".into(), 3, 6)
            ]
        );
        assert_eq!(of(seen, "a/x"), [Seen::Delete("a/x".into(), false)]);
    }
    stop.cancel();
    task.await.unwrap().unwrap();
}

async fn transform_indexes_and_lister_see_the_transformed_objects(kind: Kind) {
    let source = ChannelSource::new();
    source.push_list(
        vec![on_node("a", "x", 1, "n1"), on_node("b", "y", 2, "n1")],
        2,
    );
    let _watch = source.open_watch();
    // The transform is chosen on the builder: once built, nothing can change it.
    let informer = Arc::new(
        informer_builder(&source, Duration::ZERO, kind)
            .transform(transform_func(|o: Arc<Obj>| {
                Ok(Arc::new(Obj {
                    node: o.node.to_uppercase(),
                    ..(*o).clone()
                }))
            }))
            .build(),
    );
    let (stop, task) = start(&informer);
    informer.wait_for_sync().await;
    let indexer = informer.lister();
    assert_eq!(indexer.index_keys("node", "N1").unwrap(), ["a/x", "b/y"]);
    assert!(indexer.by_index("node", "n1").unwrap().is_empty());
    assert_eq!(
        informer
            .lister()
            .namespace("b")
            .list(&informer_store::Everything)
            .len(),
        1
    );
    // Indexes added after start cover what is cached.
    informer
        .add_indexers(informer_store::indexers([(
            "name",
            informer_store::index_func(|o: &Obj| {
                Ok(informer_store::IndexValues::one(o.name.as_str()))
            }),
        )]))
        .unwrap();
    assert_eq!(indexer.index_keys("name", "y").unwrap(), ["b/y"]);
    stop.cancel();
    task.await.unwrap().unwrap();
    assert!(matches!(
        informer.add_indexers(Indexers::new()),
        Err(InformerError::Stopped)
    ));
    assert!(matches!(
        informer.add_event_handler(Recorder::new(), HandlerOptions::new()),
        Err(InformerError::Stopped)
    ));
}

async fn run_twice_is_a_no_op_and_stop_joins_everything(kind: Kind) {
    let source = ChannelSource::new();
    source.push_list(vec![obj("a", "x", 1)], 1);
    let _watch = source.open_watch();
    let informer = Arc::new(informer(&source, Duration::ZERO, kind));
    let regs: Vec<_> = (0..3)
        .map(|_| {
            informer
                .add_event_handler(Recorder::new(), HandlerOptions::new())
                .unwrap()
        })
        .collect();
    let (stop, task) = start(&informer);
    informer.wait_for_sync().await;
    // A second run returns at once.
    tokio::time::timeout(Duration::from_secs(5), informer.run(stop.clone()))
        .await
        .unwrap()
        .unwrap();
    assert!(!informer.is_stopped());
    stop.cancel();
    task.await.unwrap().unwrap();
    assert!(informer.is_stopped() && informer.has_started());
    assert!(
        regs.iter().all(|r| r.is_stopped()),
        "every handler worker has exited"
    );
}

/// Lookups through an `Index` handle cannot name an index that is not there: the handle comes
/// from the registration (or from a check that the index exists).
async fn typed_index_handles_look_up_what_their_index_holds(kind: Kind) {
    let source = ChannelSource::new();
    source.push_list(
        vec![
            on_node("a", "x", 1, "n1"),
            on_node("b", "y", 2, "n1"),
            on_node("b", "z", 3, "n2"),
        ],
        3,
    );
    let _watch = source.open_watch();
    let informer = Arc::new(informer(&source, Duration::ZERO, kind));
    let by_ns_and_node = informer
        .add_index(
            "ns-node",
            informer_store::index_func(|o: &Obj| {
                Ok(informer_store::IndexValues::one(format!(
                    "{}/{}",
                    o.ns, o.node
                )))
            }),
        )
        .unwrap();
    let by_node = informer.index("node").expect("registered at construction");
    assert!(informer.index("no-such-index").is_none());
    assert!(
        matches!(
            informer.add_index(
                "node",
                informer_store::index_func(|_: &Obj| Ok(Default::default()))
            ),
            Err(InformerError::Store(
                informer_store::Error::IndexerConflict(_)
            ))
        ),
        "a name already registered is refused"
    );
    let (stop, task) = start(&informer);
    assert!(informer.wait_for_sync().await);
    let lister = informer.lister();
    assert_eq!(lister.lookup_keys(&by_node, "n1").unwrap(), ["a/x", "b/y"]);
    assert_eq!(lister.lookup(&by_ns_and_node, "b/n2").unwrap().len(), 1);
    assert_eq!(by_node.name(), "node");
    stop.cancel();
    task.await.unwrap().unwrap();
}

/// An informer dropped before it ever ran leaves no consumer waiting: each registration's
/// `wait_for_sync` returns `false` and its `stopped` returns (they used to wait forever).
#[tokio::test]
async fn an_informer_dropped_before_it_ran_releases_its_consumers() {
    for kind in [Kind::DeltaFifo, Kind::InOrder, Kind::MapCache] {
        let source = ChannelSource::new();
        let informer = informer(&source, Duration::ZERO, kind);
        let first = informer
            .add_event_handler(Recorder::new(), HandlerOptions::new())
            .unwrap();
        let second = informer
            .add_event_handler(Recorder::new(), HandlerOptions::new())
            .unwrap();
        let waiting = tokio::spawn({
            let first = first.clone();
            async move { first.wait_for_sync().await }
        });
        drop(informer);
        let synced = tokio::time::timeout(Duration::from_secs(10), waiting)
            .await
            .expect("wait_for_sync returns once the informer is gone")
            .unwrap();
        assert!(!synced, "{kind:?}: never synced");
        assert!(!second.wait_for_sync().await, "{kind:?}");
        // Each consumer's end is marked by its own job on the pool: wait for both.
        for registration in [&first, &second] {
            tokio::time::timeout(Duration::from_secs(10), registration.stopped())
                .await
                .expect("stopped returns once the informer is gone");
        }
        assert!(first.is_stopped() && second.is_stopped(), "{kind:?}");
    }
}
