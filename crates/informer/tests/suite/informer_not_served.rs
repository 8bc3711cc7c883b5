//! An informer of a resource the server does not serve (its lists answered `404 NotFound`: a
//! CRD not installed yet, or deleted): its health and stats say so, it syncs as soon as a list
//! succeeds, and when the resource goes away its consumers hear every cached object deleted,
//! or, told to, it stops. On tokio's paused clock.

use std::sync::Arc;
use std::time::Duration;

use informer::{HandlerOptions, HealthOptions, Problem, ResourceEventHandlerFuncs};
use informer::{InformerBuilder, SharedIndexInformer};
use informer_reflector::{
    Availability, Error, FakeListerWatcher, ListPage, Status, WatchEvent, WatchStep,
};
use informer_store::{FnIdentity, key_func};
use parking_lot::Mutex;
use tokio_util::sync::CancellationToken;

/// Virtual time any wait here may take: far more than a few 5 s polls.
const LONG: Duration = Duration::from_secs(600);

fn not_found() -> Error {
    Error::Api(Status::new(
        404,
        "NotFound",
        "the server could not find the requested resource",
    ))
}

fn builder(source: &Arc<FakeListerWatcher<String>>) -> InformerBuilder<String> {
    SharedIndexInformer::builder(
        Arc::clone(source),
        FnIdentity::new(key_func(|s: &String| Ok(s.clone()))),
    )
    .name("apps")
}

fn page(names: &[&str], rv: &str) -> ListPage<String> {
    ListPage::new(names.iter().map(|n| Arc::new(n.to_string())).collect(), rv)
}

/// Waits, on the paused clock, until `cond` holds. The informer's pop loop and consumers run
/// on pool threads, which the paused clock does not wait for: the wait steps the clock by
/// 10 ms at a time, letting them catch up between steps.
async fn until(what: &str, cond: impl Fn() -> bool) {
    let waited = tokio::time::timeout(LONG, async {
        while !cond() {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await;
    assert!(waited.is_ok(), "never: {what}");
}

fn run(informer: &Arc<SharedIndexInformer<String>>) -> tokio::task::JoinHandle<()> {
    let informer = Arc::clone(informer);
    tokio::spawn(async move {
        informer
            .run(CancellationToken::new())
            .await
            .expect("a clean run");
    })
}

#[tokio::test(start_paused = true)]
async fn a_resource_not_served_yet_is_reported_then_synced_once_served() {
    let source = Arc::new(FakeListerWatcher::new());
    source.push_list_error(not_found());
    source.push_list_error(not_found());
    let informer = Arc::new(builder(&source).build());
    assert_eq!(informer.availability(), Availability::Unknown);
    let task = run(&informer);

    until("not served", || {
        informer.availability() == Availability::NotServed
    })
    .await;
    let health = informer.health(&HealthOptions::default());
    assert!(health.is_not_served(), "{health}");
    assert!(
        matches!(health.problems.as_slice(), [Problem::NotServed { .. }]),
        "{health}"
    );
    assert!(
        health.is_live(),
        "waiting for a resource is not a liveness problem"
    );
    assert!(!health.is_ready(), "not synced");
    assert!(
        health.to_string().contains("has not served the resource"),
        "{health}"
    );
    assert_eq!(informer.stats().availability, Availability::NotServed);
    assert!(!informer.has_synced());

    // The CRD is installed: the next poll lists it.
    source.push_list(page(&["a"], "7"));
    source.push_watch(vec![WatchStep::Hang]);
    until("synced", || informer.has_synced()).await;
    assert!(informer.lister().get("a").is_some() && informer.lister().len() == 1);
    let health = informer.health(&HealthOptions::default());
    assert!(health.is_ready() && !health.is_not_served(), "{health}");
    task.abort();
}

#[tokio::test(start_paused = true)]
async fn a_resource_that_goes_away_is_delivered_as_deletions_and_waited_for() {
    let source = Arc::new(FakeListerWatcher::new());
    source.push_list(page(&["a", "b"], "7"));
    // Its CRD is deleted while the watch misses the deletions: the watch ends, then 404s.
    source.push_watch(vec![WatchStep::Wait(Duration::from_secs(3))]);
    source.push_watch_error(not_found());
    source.push_list_error(not_found());
    let informer = Arc::new(builder(&source).build());
    let deleted = Arc::new(Mutex::new(Vec::new()));
    let seen = Arc::clone(&deleted);
    informer
        .add_event_handler(
            ResourceEventHandlerFuncs::new().with_delete(
                move |key: &str, _: &Arc<String>, final_state_unknown| {
                    seen.lock().push((key.to_owned(), final_state_unknown));
                },
            ),
            HandlerOptions::new(),
        )
        .expect("registered");
    let task = run(&informer);

    until("both deletions delivered", || deleted.lock().len() == 2).await;
    assert_eq!(
        *deleted.lock(),
        [("a".to_owned(), true), ("b".to_owned(), true)]
    );
    assert_eq!(informer.lister().len(), 0);
    assert_eq!(informer.availability(), Availability::NotServed);
    // Still synced (its cache is the server's: nothing), still running, waiting.
    assert!(informer.has_synced() && !informer.is_stopped());
    task.abort();
}

#[tokio::test(start_paused = true)]
async fn told_to_an_informer_stops_cleanly_when_its_resource_goes_away() {
    let source = Arc::new(FakeListerWatcher::new());
    source.push_list(page(&["a"], "7"));
    source.push_watch(vec![WatchStep::Event(WatchEvent::Added {
        object: Arc::new("b".into()),
        resource_version: "8".into(),
    })]);
    source.push_watch_error(not_found());
    source.push_list_error(not_found());
    let informer = Arc::new(
        builder(&source)
            .reflector_config(|r| r.with_stop_when_not_served(true))
            .build(),
    );
    let registration = informer
        .add_event_handler(ResourceEventHandlerFuncs::new(), HandlerOptions::new())
        .expect("registered");
    let task = run(&informer);
    until("the run ends by itself", || task.is_finished()).await;
    task.await.expect("no panic");
    assert!(informer.is_stopped());
    assert!(registration.is_stopped(), "its consumer is told");
    // Stopped because its resource went away, as told: live (a restart would not bring the
    // resource back), not ready.
    let health = informer.health(&HealthOptions::default());
    assert!(
        matches!(
            health.problems.as_slice(),
            [Problem::Stopped, Problem::NotServed { .. }]
        ),
        "{health}"
    );
    assert!(health.is_live() && !health.is_ready(), "{health}");
}

#[tokio::test(start_paused = true)]
async fn an_informer_stopped_while_its_resource_is_served_is_neither_live_nor_ready() {
    let source = Arc::new(FakeListerWatcher::new());
    source.push_list(page(&["a"], "7"));
    source.push_watch(vec![WatchStep::Hang]);
    let informer = Arc::new(builder(&source).build());
    let stop = CancellationToken::new();
    let task = tokio::spawn({
        let (informer, stop) = (Arc::clone(&informer), stop.clone());
        async move { informer.run(stop).await }
    });
    until("synced", || informer.has_synced()).await;
    stop.cancel();
    task.await.expect("no panic").expect("a clean run");
    let health = informer.health(&HealthOptions::default());
    assert_eq!(health.problems, [Problem::Stopped], "{health}");
    assert!(!health.is_live() && !health.is_ready(), "{health}");
}
