//! Health: an informer reports each way it can be stuck — a pop loop that stopped making
//! progress while changes wait, a watch that is not re-established, a consumer stopped by its
//! panic policy, the informer stopped — and is ready once synced with none of these.

use informer::HandlerOptions;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use informer::{
    HandlerRegistration, HealthOptions, InformerError, PanicPolicy, Problem,
    ResourceEventHandlerFuncs, SharedIndexInformer,
};
use informer_reflector::{FakeListerWatcher, ListPage, WatchEvent, WatchStep};
use informer_store::{FnIdentity, IndexValues, index_func, indexers, key_func};
use informer_testing::eventually;
use tokio_util::sync::CancellationToken;

const QUICK: HealthOptions = HealthOptions {
    stalled_after: Duration::from_millis(200),
    watch_down_after: Duration::from_millis(200),
};

fn informer(
    source: Arc<FakeListerWatcher<String>>,
    blocked: Arc<AtomicBool>,
) -> Arc<SharedIndexInformer<String>> {
    Arc::new(
        SharedIndexInformer::builder(
            source,
            FnIdentity::new(key_func(|s: &String| Ok(s.clone()))).with_indexers(
                // An index function that can hold the pop loop (a user function stuck in a lock).
                indexers([(
                    "all",
                    index_func(move |_: &String| {
                        while blocked.load(Ordering::Acquire) {
                            std::thread::sleep(Duration::from_millis(1));
                        }
                        Ok(IndexValues::one("all"))
                    }),
                )]),
            ),
        )
        .name("words")
        .panic_policy(PanicPolicy::StopHandler)
        .build(),
    )
}

fn added(name: &str, rv: &str) -> WatchStep<String> {
    WatchStep::Event(WatchEvent::Added {
        object: Arc::new(name.into()),
        resource_version: rv.into(),
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_healthy_informer_is_ready_and_live_and_a_stuck_pop_loop_is_reported() {
    let source = Arc::new(FakeListerWatcher::<String>::new());
    source.push_list(ListPage::new(vec![Arc::new("a".into())], "1"));
    source.push_watch(vec![
        WatchStep::Wait(Duration::from_millis(300)),
        added("b", "2"),
        added("c", "3"),
        added("d", "4"),
        WatchStep::Hang,
    ]);
    let blocked = Arc::new(AtomicBool::new(false));
    let informer = informer(Arc::clone(&source), Arc::clone(&blocked));
    let before = informer.health(&QUICK);
    assert!(!before.synced && before.is_live() && !before.is_ready());

    let stop = CancellationToken::new();
    let running = tokio::spawn({
        let (i, s) = (Arc::clone(&informer), stop.clone());
        async move { i.run(s).await }
    });
    eventually("ready", || informer.health(&QUICK).is_ready()).await;

    // The index function blocks: "b" is in hand, "c" and "d" wait, nothing is popped.
    blocked.store(true, Ordering::Release);
    eventually("the stall is reported", || {
        informer
            .health(&QUICK)
            .problems
            .iter()
            .any(|p| matches!(p, Problem::NoProgress { .. }))
    })
    .await;
    assert!(!informer.health(&QUICK).is_live());
    blocked.store(false, Ordering::Release);
    eventually("live again once the pop loop moves", || {
        informer.lister().len() == 4 && informer.health(&QUICK).is_live()
    })
    .await;

    stop.cancel();
    running.await.expect("no panic").expect("runs");
    assert_eq!(informer.health(&QUICK).problems, [Problem::Stopped]);
}

/// An informer listing `a` and then watching `watch`, with a handler that panics on `boom`
/// (stopped by the informer's panic policy), run until that handler has stopped.
async fn running_until_a_handler_stops(
    watch: Vec<WatchStep<String>>,
) -> (
    Arc<SharedIndexInformer<String>>,
    HandlerRegistration,
    CancellationToken,
    tokio::task::JoinHandle<Result<(), InformerError>>,
) {
    let source = Arc::new(FakeListerWatcher::<String>::new());
    source.push_list(ListPage::new(vec![Arc::new("a".into())], "1"));
    source.push_watch(watch);
    let informer = informer(Arc::clone(&source), Arc::default());
    let handler = informer
        .add_event_handler(
            ResourceEventHandlerFuncs::new().with_add(|_, s: &Arc<String>, _| {
                assert_ne!(s.as_str(), "boom", "a handler bug");
            }),
            HandlerOptions::new(),
        )
        .expect("registered");
    let stop = CancellationToken::new();
    let running = tokio::spawn({
        let (i, s) = (Arc::clone(&informer), stop.clone());
        async move { i.run(s).await }
    });
    eventually("the handler stopped by its panic policy", || {
        handler.is_stopped()
    })
    .await;
    (informer, handler, stop, running)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_watch_not_re_established_and_a_stopped_handler_are_problems() {
    // The first watch ends at once; the next request never gets an answer.
    let (informer, handler, stop, running) =
        running_until_a_handler_stops(vec![added("boom", "2")]).await;
    eventually("both problems reported", || {
        let health = informer.health(&QUICK);
        health.synced
            && health.problems.contains(&Problem::HandlerStopped {
                handler: handler.id(),
            })
            && health
                .problems
                .iter()
                .any(|p| matches!(p, Problem::WatchDown { .. }))
    })
    .await;
    let text = informer.health(&QUICK).to_string();
    assert!(text.starts_with("words: synced; "), "{text}");
    stop.cancel();
    running.await.expect("no panic").expect("runs");
}

/// A consumer its panic policy stopped leaves the informer's list of consumers at the next
/// distribution (here: another consumer registering); it stays a health problem after that, and
/// stops being one when it is removed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stopped_handler_stays_a_problem_once_it_has_left_the_consumers() {
    let (informer, failing, stop, running) =
        running_until_a_handler_stops(vec![added("boom", "2"), WatchStep::Hang]).await;
    let stopped = Problem::HandlerStopped {
        handler: failing.id(),
    };
    assert!(informer.health(&QUICK).problems.contains(&stopped));
    // Registering flushes what is distributed, which drops the stopped consumer from the list.
    let later = informer
        .add_event_handler(ResourceEventHandlerFuncs::new(), HandlerOptions::new())
        .expect("registered");
    eventually("the later handler synced", || later.has_synced()).await;
    let health = informer.health(&QUICK);
    assert!(health.problems.contains(&stopped), "{health}");
    assert!(!health.is_ready(), "{health}");
    // Removed, it is no longer the informer's problem.
    informer.remove_event_handler(&failing).expect("removed");
    let health = informer.health(&QUICK);
    assert!(!health.problems.contains(&stopped), "{health}");
    stop.cancel();
    running.await.expect("no panic").expect("runs");
}
