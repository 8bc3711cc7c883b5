//! Delivery to async consumers and under a slow consumer: subscriptions (streams), async
//! handlers, bounded buffers that coalesce per key, and a reflector that never waits on user
//! code.

use crate::common;

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex as StdMutex};
use std::time::Duration;

use common::*;
use futures::StreamExt;
use informer::{
    AsyncResourceEventHandler, Event, HandlerOptions, InformerError, ResourceEventHandlerFuncs,
    SharedIndexInformer, Subscription,
};
use informer_store::{FnIdentity, IndexValues, index_func, indexers, key_func, meta_namespace_key};

const LONG: Duration = Duration::from_secs(30);

/// A consumer's view, built from its events, checking each against what it saw before: no add
/// of a known key, every update from the version it saw, no delete of an unknown key, every
/// key the object's own.
#[derive(Debug, Default)]
struct View {
    objects: BTreeMap<String, u64>,
    initial: usize,
    events: usize,
}

impl View {
    fn apply(&mut self, event: &Event<Obj>) {
        self.events += 1;
        assert_eq!(
            event.key(),
            key(event.object()),
            "the event's key is its object's"
        );
        match event {
            Event::Add { key, obj, initial } => {
                self.initial += usize::from(*initial);
                let had = self.objects.insert(key.to_string(), obj.rv);
                assert!(had.is_none(), "add of {key}, already seen at {had:?}");
            }
            Event::Update { key, old, new } => {
                let had = self.objects.insert(key.to_string(), new.rv);
                assert_eq!(had, Some(old.rv), "update of {key} from a version not seen");
            }
            Event::Delete { key, .. } => {
                assert!(
                    self.objects.remove(&**key).is_some(),
                    "delete of unknown {key}"
                );
            }
            _ => unreachable!("no other kind of event"),
        }
    }
}

/// Reads `events` into `view` until it equals the informer's cache.
async fn read_until_equal(events: &mut Subscription<Obj>, view: &mut View, informer: &Informer) {
    tokio::time::timeout(LONG, async {
        while view.objects != cache(informer) {
            let event = events
                .next()
                .await
                .expect("the stream goes on while running");
            view.apply(&event);
        }
    })
    .await
    .expect("the stream's view reaches the cache");
}

async fn a_late_subscriber_gets_the_cache_then_every_change(kind: Kind) {
    let source = ChannelSource::new();
    source.push_list(
        (0..5).map(|i| obj("a", &format!("o{i}"), i + 1)).collect(),
        5,
    );
    let watch = source.open_watch();
    let informer = Arc::new(informer(&source, Duration::ZERO, kind));
    let (stop, task) = start(&informer);
    assert!(informer.wait_for_sync().await);
    watch.modified(&obj("a", "o1", 10));
    eventually("o1 at 10", || cache(&informer).get("a/o1") == Some(&10)).await;

    let mut events = informer.subscribe(HandlerOptions::new()).unwrap();
    let registration = events.registration().clone();
    let mut view = View::default();
    // The snapshot: every cached object, as it is now, marked initial.
    for _ in 0..5 {
        let event = events.next().await.unwrap();
        assert!(
            matches!(event, Event::Add { initial: true, .. }),
            "{event:?}"
        );
        view.apply(&event);
    }
    assert_eq!(view.objects, cache(&informer));
    assert!(
        registration.has_synced(),
        "the whole snapshot has been read"
    );
    // Then every change, nothing missed or repeated.
    watch.added(&obj("a", "new", 11));
    watch.modified(&obj("a", "o2", 12));
    watch.deleted(&obj("a", "o3", 13));
    watch.modified(&obj("a", "new", 14));
    eventually("the cache has every change", || cache(&informer).len() == 5).await;
    eventually("the cache at 14", || {
        cache(&informer).get("a/new") == Some(&14)
    })
    .await;
    read_until_equal(&mut events, &mut view, &informer).await;
    assert_eq!(
        view.events, 9,
        "five initial adds and four changes, each once"
    );
    assert_eq!(registration.coalesced(), 0);
    stop.cancel();
    task.await.unwrap().unwrap();
    assert!(
        events.next().await.is_none(),
        "the stream ends when the informer stops"
    );
    assert!(registration.is_stopped());
}

async fn dropping_a_subscription_unsubscribes(kind: Kind) {
    let source = ChannelSource::new();
    source.push_list(vec![obj("a", "x", 1)], 1);
    let watch = source.open_watch();
    let informer = Arc::new(informer(&source, Duration::ZERO, kind));
    let events = informer.subscribe(HandlerOptions::new()).unwrap();
    let registration = events.registration().clone();
    let witness = Recorder::new();
    informer
        .add_event_handler(witness.clone(), HandlerOptions::new())
        .unwrap();
    let (stop, task) = start(&informer);
    eventually("the witness saw the list", || witness.len() == 1).await;
    drop(events);
    assert!(
        registration.is_stopped(),
        "dropping the stream unsubscribes"
    );
    for i in 0..50 {
        watch.modified(&obj("a", "x", i + 2));
    }
    eventually("the witness saw every change", || witness.len() == 51).await;
    assert_eq!(
        registration.buffered(),
        0,
        "nothing is kept for a dropped stream"
    );
    stop.cancel();
    task.await.unwrap().unwrap();
}

/// The `synced` future resolves once the stream has yielded the whole initial state.
async fn a_subscription_is_synced_once_its_initial_state_is_read(kind: Kind) {
    let source = ChannelSource::new();
    source.push_list(
        (0..3).map(|i| obj("a", &format!("o{i}"), i + 1)).collect(),
        3,
    );
    let _watch = source.open_watch();
    let informer = Arc::new(informer(&source, Duration::ZERO, kind));
    let mut events = informer.subscribe(HandlerOptions::new()).unwrap();
    let synced = tokio::spawn(events.synced_timeout(LONG));
    let (stop, task) = start(&informer);
    assert!(informer.wait_for_sync().await);
    assert!(!events.has_synced(), "nothing read yet");
    for _ in 0..3 {
        let event = events.next().await.unwrap();
        assert!(matches!(event, Event::Add { initial: true, .. }));
    }
    assert!(
        synced.await.unwrap(),
        "synced once the three initial adds were read"
    );
    stop.cancel();
    task.await.unwrap().unwrap();
}

/// Records every event an async handler receives, awaiting between them.
#[derive(Default)]
struct AsyncView {
    view: StdMutex<View>,
    delay: Duration,
}

#[informer::async_trait]
impl AsyncResourceEventHandler<Obj> for AsyncView {
    async fn on_add(&self, key: Arc<str>, obj: Arc<Obj>, initial: bool) {
        tokio::time::sleep(self.delay).await;
        self.view
            .lock()
            .unwrap()
            .apply(&Event::Add { key, obj, initial });
    }
    async fn on_update(&self, key: Arc<str>, old: Arc<Obj>, new: Arc<Obj>) {
        tokio::time::sleep(self.delay).await;
        self.view
            .lock()
            .unwrap()
            .apply(&Event::Update { key, old, new });
    }
    async fn on_delete(&self, key: Arc<str>, obj: Arc<Obj>, final_state_unknown: bool) {
        tokio::time::sleep(self.delay).await;
        let event = Event::Delete {
            key,
            obj,
            final_state_unknown,
        };
        self.view.lock().unwrap().apply(&event);
    }
}

async fn an_async_handler_sees_every_change_in_order(kind: Kind) {
    let source = ChannelSource::new();
    source.push_list(
        (0..10).map(|i| obj("a", &format!("o{i}"), i + 1)).collect(),
        10,
    );
    let watch = source.open_watch();
    let informer = Arc::new(informer(&source, Duration::ZERO, kind));
    let handler = Arc::new(AsyncView {
        delay: Duration::from_millis(1),
        ..AsyncView::default()
    });
    let registration = informer
        .add_async_event_handler(Arc::clone(&handler), HandlerOptions::new())
        .unwrap();
    let (stop, task) = start(&informer);
    assert!(registration.wait_for_sync_timeout(LONG).await);
    assert_eq!(handler.view.lock().unwrap().initial, 10);
    for i in 0..10 {
        watch.modified(&obj("a", &format!("o{i}"), 100 + i));
    }
    watch.deleted(&obj("a", "o0", 200));
    eventually("the cache has the changes", || cache(&informer).len() == 9).await;
    eventually("the async handler's view is the cache", || {
        handler.view.lock().unwrap().objects == cache(&informer)
    })
    .await;
    // A notification counts as delivered once its handler has returned, just after the
    // handler's last write to the view.
    eventually("all 21 notifications were handled", || {
        registration.delivered() >= 21
    })
    .await;
    assert_eq!(registration.delivered(), 21);
    stop.cancel();
    task.await.unwrap().unwrap();
    assert!(registration.is_stopped());
}

/// An async handler stuck in an await does not hold the informer's stop up: its task is
/// cancelled at the await.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_async_handler_stuck_in_an_await_is_cancelled_on_stop() {
    struct Stuck(Arc<AtomicBool>);
    #[informer::async_trait]
    impl AsyncResourceEventHandler<Obj> for Stuck {
        async fn on_add(&self, _: Arc<str>, _: Arc<Obj>, _: bool) {
            self.0.store(true, Ordering::SeqCst);
            std::future::pending::<()>().await;
        }
    }
    let source = ChannelSource::new();
    source.push_list(vec![obj("a", "x", 1)], 1);
    let _watch = source.open_watch();
    let informer = Arc::new(informer(&source, Duration::ZERO, Kind::DeltaFifo));
    let entered = Arc::new(AtomicBool::new(false));
    let registration = informer
        .add_async_event_handler(Stuck(Arc::clone(&entered)), HandlerOptions::new())
        .unwrap();
    let (stop, task) = start(&informer);
    eventually("the handler is awaiting", || entered.load(Ordering::SeqCst)).await;
    stop.cancel();
    tokio::time::timeout(LONG, task)
        .await
        .expect("the stop is prompt")
        .unwrap()
        .unwrap();
    assert!(registration.is_stopped());
}

#[test]
fn an_async_handler_needs_a_runtime() {
    let informer = informer(&ChannelSource::new(), Duration::ZERO, Kind::DeltaFifo);
    let refused = informer.add_async_event_handler(AsyncView::default(), HandlerOptions::new());
    assert!(
        matches!(refused, Err(InformerError::NoRuntime)),
        "{refused:?}"
    );
}

/// A handler held up on its first notification while 600 changes to 10 keys arrive: it never
/// buffers more than its bound plus one entry per key; the others see every change as it
/// happens; once released it catches up to exactly the cache, and then it is back to one
/// notification per change.
async fn a_slow_consumer_coalesces_within_its_bound_and_delays_nobody(kind: Kind) {
    const KEYS: u64 = 10;
    const BOUND: usize = 8;
    let source = ChannelSource::new();
    source.push_list(vec![], 1);
    let watch = source.open_watch();
    let informer = Arc::new(informer(&source, Duration::ZERO, kind));
    let (release, held) = crossbeam_channel::bounded::<()>(0);
    let slow_view = Arc::new(StdMutex::new(View::default()));
    let view = Arc::clone(&slow_view);
    let slow = informer
        .add_event_handler(
            ResourceEventHandlerFuncs::new()
                .with_add({
                    let view = Arc::clone(&view);
                    move |k, o: &Arc<Obj>, initial| {
                        let _ = held.recv(); // held until the test lets go
                        view.lock().unwrap().apply(&Event::Add {
                            key: k.into(),
                            obj: Arc::clone(o),
                            initial,
                        });
                    }
                })
                .with_update({
                    let view = Arc::clone(&view);
                    move |k, old, new| {
                        view.lock().unwrap().apply(&Event::Update {
                            key: k.into(),
                            old: Arc::clone(old),
                            new: Arc::clone(new),
                        });
                    }
                })
                .with_delete(move |k, o, unknown| {
                    view.lock().unwrap().apply(&Event::Delete {
                        key: k.into(),
                        obj: Arc::clone(o),
                        final_state_unknown: unknown,
                    });
                }),
            HandlerOptions::new().buffer(BOUND),
        )
        .unwrap();
    let fast = Recorder::new();
    let fast_reg = informer
        .add_event_handler(fast.clone(), HandlerOptions::new())
        .unwrap();
    let (stop, task) = start(&informer);
    let mut rv = 1;
    let mut writes = 0;
    for k in 0..KEYS {
        rv += 1;
        writes += 1;
        watch.added(&obj("a", &format!("o{k}"), rv));
    }
    for round in 0..60 {
        for k in 0..KEYS {
            rv += 1;
            writes += 1;
            if round == 30 && k == 3 {
                watch.deleted(&obj("a", &format!("o{k}"), rv));
            } else if round == 31 && k == 3 {
                watch.added(&obj("a", &format!("o{k}"), rv));
            } else {
                watch.modified(&obj("a", &format!("o{k}"), rv));
            }
        }
    }
    eventually("the fast handler saw every change", || fast.len() == writes).await;
    assert_eq!(fast.replay(), cache(&informer));
    assert_eq!(fast_reg.coalesced(), 0, "the fast one never fell behind");
    assert!(
        slow.buffered() <= BOUND + KEYS as usize,
        "bounded: {} buffered",
        slow.buffered()
    );
    assert!(slow.coalesced() > 0 && slow.overflows() >= 1);
    assert!(slow.lag() > Duration::ZERO, "it is behind");
    drop(release); // every recv returns at once now
    eventually("the slow handler caught up to the cache", || {
        slow_view.lock().unwrap().objects == cache(&informer)
    })
    .await;
    eventually("nothing left for the slow handler", || slow.buffered() == 0).await;
    // The wait is recorded when a notification is taken, the delivery once its handler has
    // returned: wait for the last handler to return.
    eventually(
        "the slow handler returned from its last notification",
        || slow.delivered() as u64 >= slow.lag_histogram().count,
    )
    .await;
    assert_eq!(slow.lag(), Duration::ZERO);
    let waits = slow.lag_histogram();
    assert_eq!(
        waits.count,
        slow.delivered() as u64,
        "every notification it took is in its wait histogram"
    );
    assert_eq!(waits.buckets.iter().map(|b| b.1).sum::<u64>(), waits.count);
    assert!(waits.sum_seconds > 0.0, "it was held back");
    assert!(
        (slow.delivered() as u64) < writes as u64,
        "it received less than every change: {}",
        slow.delivered()
    );
    // Caught up: back to one notification per change.
    let (coalesced, delivered) = (slow.coalesced(), slow.delivered());
    watch.modified(&obj("a", "o0", rv + 1));
    eventually("the slow handler saw the change", || {
        slow.delivered() == delivered + 1
    })
    .await;
    assert_eq!(slow.coalesced(), coalesced);
    stop.cancel();
    task.await.unwrap().unwrap();
}

/// A stream nobody reads for a while: bounded the same way, then read to the cache.
async fn an_unread_stream_stays_bounded_and_catches_up(kind: Kind) {
    const BOUND: usize = 4;
    let source = ChannelSource::new();
    source.push_list(
        (0..5).map(|i| obj("a", &format!("o{i}"), i + 1)).collect(),
        5,
    );
    let watch = source.open_watch();
    let informer = Arc::new(informer(&source, Duration::ZERO, kind));
    let mut events = informer
        .subscribe(HandlerOptions::new().buffer(BOUND))
        .unwrap();
    let witness = Recorder::new();
    informer
        .add_event_handler(witness.clone(), HandlerOptions::new())
        .unwrap();
    let (stop, task) = start(&informer);
    for i in 0..200 {
        watch.modified(&obj("a", &format!("o{}", i % 5), 10 + i));
    }
    eventually("the witness saw every change", || witness.len() == 205).await;
    let registration = events.registration().clone();
    assert!(
        registration.buffered() <= BOUND + 5,
        "{}",
        registration.buffered()
    );
    let mut view = View::default();
    read_until_equal(&mut events, &mut view, &informer).await;
    assert!(view.events < 205, "coalesced: {} events", view.events);
    assert_eq!(
        view.initial, 5,
        "every object of the first list arrives marked initial"
    );
    stop.cancel();
    task.await.unwrap().unwrap();
}

/// Removing a subscription's registration ends its stream once what was buffered is read.
async fn a_removed_subscription_ends_after_what_was_buffered(kind: Kind) {
    let source = ChannelSource::new();
    source.push_list(vec![obj("a", "x", 1), obj("a", "y", 2)], 2);
    let watch = source.open_watch();
    let informer = Arc::new(informer(&source, Duration::ZERO, kind));
    let mut events = informer.subscribe(HandlerOptions::new()).unwrap();
    let registration = events.registration().clone();
    let (stop, task) = start(&informer);
    assert!(informer.wait_for_sync().await);
    eventually("both initial adds buffered", || {
        registration.buffered() == 2
    })
    .await;
    informer.remove_event_handler(&registration).unwrap();
    watch.modified(&obj("a", "x", 3));
    let mut keys = Vec::new();
    while let Some(event) = tokio::time::timeout(LONG, events.next()).await.unwrap() {
        keys.push(event.key().to_owned());
    }
    assert_eq!(keys, ["a/x", "a/y"], "what was buffered, then the end");
    assert!(registration.is_stopped());
    stop.cancel();
    task.await.unwrap().unwrap();
}

/// An async handler that panics: under `StopHandler` it stops, the others go on.
async fn a_panicking_async_handler_stops_under_its_policy(kind: Kind) {
    struct Panics;
    #[informer::async_trait]
    impl AsyncResourceEventHandler<Obj> for Panics {
        async fn on_add(&self, _: Arc<str>, obj: Arc<Obj>, _: bool) {
            tokio::task::yield_now().await;
            assert!(obj.name != "boom", "async handler bug");
        }
    }
    let source = ChannelSource::new();
    source.push_list(
        vec![obj("a", "ok", 1), obj("a", "boom", 2), obj("a", "after", 3)],
        3,
    );
    let _watch = source.open_watch();
    let informer = Arc::new(
        informer_builder(&source, Duration::ZERO, kind)
            .panic_policy(informer::PanicPolicy::StopHandler)
            .build(),
    );
    let panicky = informer
        .add_async_event_handler(Panics, HandlerOptions::new())
        .unwrap();
    let witness = Recorder::new();
    informer
        .add_event_handler(witness.clone(), HandlerOptions::new())
        .unwrap();
    let (stop, task) = start(&informer);
    eventually("the panicking handler stopped", || panicky.is_stopped()).await;
    assert_eq!(panicky.panics(), 1);
    assert_eq!(panicky.delivered(), 2, "ok, then boom; nothing after");
    eventually("the others go on", || witness.len() == 3).await;
    stop.cancel();
    task.await.unwrap().unwrap();
}

/// A filtered handler that falls behind while a pod leaves its filter and is deleted, and
/// another enters it and is deleted: it must end with neither, and never be told to delete a
/// pod it was not given. (Coalesced to one deletion carrying the last state, the first was
/// filtered out and kept for ever, and the second deleted unseen.)
async fn a_filtered_consumer_that_coalesces_sees_moves_before_deletions(kind: Kind) {
    let source = ChannelSource::new();
    source.push_list(vec![on_node("a", "out", 1, "node-1")], 1);
    let watch = source.open_watch();
    let informer = Arc::new(informer(&source, Duration::ZERO, kind));
    let (release, held) = crossbeam_channel::bounded::<()>(0);
    let seen = Arc::new(StdMutex::new(std::collections::BTreeSet::<String>::new()));
    let unknown_deletes = Arc::new(AtomicUsize::new(0));
    let (a, d, u) = (
        Arc::clone(&seen),
        Arc::clone(&seen),
        Arc::clone(&unknown_deletes),
    );
    let handler = ResourceEventHandlerFuncs::new()
        .with_add(move |k, o: &Arc<Obj>, _| {
            if o.name == "in" {
                let _ = held.recv(); // held until the test lets go
            }
            a.lock().unwrap().insert(k.to_owned());
        })
        .with_delete(move |k, _, _| {
            if !d.lock().unwrap().remove(k) {
                u.fetch_add(1, Ordering::SeqCst);
            }
        });
    let registration = informer
        .add_event_handler(
            informer::ResourceEventHandlerExt::filtered(handler, |o: &Obj| o.node == "node-0"),
            HandlerOptions::new().buffer(1),
        )
        .unwrap();
    let (stop, task) = start(&informer);
    assert!(informer.wait_for_sync().await);
    watch.added(&on_node("a", "in", 2, "node-0")); // held here
    watch.added(&on_node("a", "stays", 3, "node-0"));
    watch.modified(&on_node("a", "in", 4, "node-1")); // leaves the filter
    watch.deleted(&on_node("a", "in", 5, "node-1"));
    watch.modified(&on_node("a", "out", 6, "node-0")); // enters it
    watch.deleted(&on_node("a", "out", 7, "node-0"));
    eventually("the cache has one pod", || cache(&informer).len() == 1).await;
    eventually("it fell behind", || registration.coalesced() >= 3).await;
    drop(release);
    eventually("the filtered view is the filtered cache", || {
        registration.buffered() == 0
            && *seen.lock().unwrap() == std::collections::BTreeSet::from(["a/stays".to_owned()])
    })
    .await;
    assert_eq!(
        unknown_deletes.load(Ordering::SeqCst),
        0,
        "a delete of a pod never given"
    );
    stop.cancel();
    task.await.unwrap().unwrap();
}

on_each_setup!(
    a_filtered_consumer_that_coalesces_sees_moves_before_deletions,
    a_removed_subscription_ends_after_what_was_buffered,
    a_panicking_async_handler_stops_under_its_policy,
    a_late_subscriber_gets_the_cache_then_every_change,
    dropping_a_subscription_unsubscribes,
    a_subscription_is_synced_once_its_initial_state_is_read,
    an_async_handler_sees_every_change_in_order,
    a_slow_consumer_coalesces_within_its_bound_and_delays_nobody,
    an_unread_stream_stays_bounded_and_catches_up,
);

/// An index function held up on one object does not hold up the reflector: while it is
/// blocked (inside the pop loop, applying that object to the cache), the reflector goes on
/// reading the watch and queueing — its resource version reaches the last event's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_index_function_does_not_delay_the_watch() {
    let source = ChannelSource::new();
    source.push_list(vec![], 1);
    let watch = source.open_watch();
    let (release, held) = std::sync::mpsc::channel::<()>();
    let held = StdMutex::new(held);
    let blocked = Arc::new(AtomicUsize::new(0));
    let inside = Arc::clone(&blocked);
    let informer = Arc::new(SharedIndexInformer::new(
        Arc::clone(&source),
        FnIdentity::new(key_func(|o: &Obj| meta_namespace_key(Some(&o.ns), &o.name)))
            .with_indexers(indexers([(
                "slow",
                index_func(move |o: &Obj| {
                    if o.name == "slow" {
                        inside.fetch_add(1, Ordering::SeqCst);
                        let _ = held.lock().unwrap().recv();
                    }
                    Ok(IndexValues::one(o.node.as_str()))
                }),
            )])),
    ));
    let (stop, task) = start(&informer);
    assert!(informer.wait_for_sync().await);
    watch.added(&obj("a", "slow", 2));
    eventually("the index function is blocked", || {
        blocked.load(Ordering::SeqCst) == 1
    })
    .await;
    for i in 0..100 {
        watch.added(&obj("a", &format!("o{i}"), 3 + i));
    }
    eventually("the reflector read the whole watch", || {
        informer.last_sync_resource_version() == "102"
    })
    .await;
    assert_eq!(
        informer.lister().len(),
        0,
        "the cache waits for the index function"
    );
    release.send(()).unwrap();
    eventually("every object cached", || informer.lister().len() == 101).await;
    stop.cancel();
    task.await.unwrap().unwrap();
}
