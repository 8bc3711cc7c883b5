//! Start, wait for sync, shut down: idempotence, timeouts, and every handler ended.

use crate::common;

use informer::HandlerOptions;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use common::{Obj, Pods, Secrets, Source, Stuck, objects};
use informer::ResourceEventHandlerFuncs;
use informer_factory::{FactoryError, InformerOptions, Selection, SharedInformerFactory};
use informer_fifo::transform_func;
use informer_store::Everything;

const LONG: Duration = Duration::from_secs(30);

fn lists(made: &common::Made) -> usize {
    made.fake.requests().iter().filter(|r| r.is_list()).count()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn start_is_idempotent_and_starts_informers_requested_since() {
    let factory = SharedInformerFactory::new(Source::with(objects()));
    assert_eq!(factory.start().unwrap(), 0, "nothing requested yet");
    let pods = factory.informer::<Pods>();
    assert!(!pods.has_started());
    assert_eq!(factory.start().unwrap(), 1);
    assert_eq!(factory.start().unwrap(), 0);
    let secrets = factory.informer::<Secrets>();
    assert!(!secrets.has_started(), "not until the next start");
    assert_eq!(factory.start().unwrap(), 1);
    assert_eq!(factory.start().unwrap(), 0);

    let report = factory.wait_for_cache_sync(Some(LONG)).await;
    assert!(report.all_synced(), "{report}");
    assert!(pods.has_started() && secrets.has_started());
    // Each informer ran once: one lister-watcher each, listed exactly once.
    let made = factory.source().made();
    assert_eq!(made.len(), 2);
    assert!(made.iter().all(|m| lists(m) == 1));
    factory.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wait_for_cache_sync_without_a_timeout_waits_for_every_started_informer() {
    let factory = SharedInformerFactory::new(Source::with(objects()));
    let pods = factory.informer::<Pods>();
    let in_b = factory.informer_with::<Secrets>(InformerOptions::new().namespace("b"));
    factory.start().unwrap();
    let report = factory.wait_for_cache_sync(None).await;

    assert!(report.all_synced(), "{report}");
    assert_eq!(report.informers.len(), 2);
    assert_eq!(report.is_synced::<Pods>(&Selection::all()), Some(true));
    assert_eq!(
        report.is_synced::<Secrets>(&Selection::all().namespace("b")),
        Some(true)
    );
    assert_eq!(report.is_synced::<Stuck>(&Selection::all()), None);
    assert_eq!(pods.lister().len(), 3);
    assert_eq!(in_b.lister().len(), 1);
    factory.shutdown().await.unwrap();
}

/// The wait used to poll every informer on a timer; now each informer's own change wakes it.
/// On the paused clock a polling wait would let time jump forward; this one takes none.
#[tokio::test(start_paused = true)]
async fn wait_for_cache_sync_is_woken_by_the_syncs_not_a_timer() {
    let factory = SharedInformerFactory::new(Source::with(objects()));
    factory.informer::<Pods>();
    factory.informer_with::<Secrets>(InformerOptions::new().namespace("b"));
    factory.start().unwrap();
    let begun = tokio::time::Instant::now();
    let report = factory.wait_for_cache_sync(None).await;
    assert!(report.all_synced(), "{report}");
    assert_eq!(tokio::time::Instant::now(), begun, "no timer ran");
    factory.shutdown().await.unwrap();
}

/// A wait without a timeout returns when an unsynced informer stops (here: the factory shuts
/// down while the wait is on).
#[tokio::test(start_paused = true)]
async fn wait_for_cache_sync_returns_when_an_unsynced_informer_stops() {
    let factory = Arc::new(SharedInformerFactory::new(Source::with(objects())));
    let stuck = factory.informer::<Stuck>();
    factory.start().unwrap();
    let waiting = tokio::spawn({
        let factory = Arc::clone(&factory);
        async move { factory.wait_for_cache_sync(None).await }
    });
    tokio::task::yield_now().await;
    factory.shutdown().await.unwrap();
    let report = waiting.await.unwrap();
    assert!(!report.all_synced());
    assert!(report.informers[0].stopped, "{report}");
    assert!(stuck.is_stopped());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wait_for_cache_sync_ignores_informers_not_started() {
    let factory = SharedInformerFactory::new(Source::with(objects()));
    factory.informer::<Pods>();
    factory.start().unwrap();
    factory.informer::<Stuck>(); // requested, never started: not waited for
    let report = factory.wait_for_cache_sync(None).await;
    assert!(report.all_synced(), "{report}");
    assert_eq!(report.informers.len(), 1);
    assert_eq!(factory.informers().len(), 2);
    assert!(!factory.informers()[1].started);
    factory.shutdown().await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn wait_for_cache_sync_with_a_timeout_reports_what_has_not_synced() {
    let factory = SharedInformerFactory::new(Source::with(objects()));
    let pods = factory.informer::<Pods>();
    let stuck = factory.informer::<Stuck>();
    factory.start().unwrap();
    // The pods sync on the informer's pop job; the wait is woken by it, with no timer.
    assert!(pods.wait_for_sync().await);

    let begun = tokio::time::Instant::now();
    let report = factory
        .wait_for_cache_sync(Some(Duration::from_secs(5)))
        .await;
    let waited = begun.elapsed();
    assert!(
        waited >= Duration::from_secs(5) && waited < Duration::from_secs(6),
        "waited {waited:?}"
    );
    assert!(!report.all_synced());
    assert_eq!(report.is_synced::<Pods>(&Selection::all()), Some(true));
    assert_eq!(report.is_synced::<Stuck>(&Selection::all()), Some(false));
    let unsynced: Vec<_> = report.unsynced().map(|s| s.resource).collect();
    assert_eq!(unsynced, [std::any::type_name::<Stuck>()]);
    assert!(
        report.to_string().starts_with("1/2 informers synced"),
        "{report}"
    );
    assert!(!stuck.has_synced());

    // Shutting down stops the stuck informer too: its list is abandoned.
    factory.shutdown().await.unwrap();
    assert!(stuck.is_stopped());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_stops_every_informer_and_joins_every_handler_thread() {
    let factory = Arc::new(SharedInformerFactory::new(Source::with(objects())));
    let pods = factory.informer::<Pods>();
    let secrets = factory.informer::<Secrets>();
    let stuck = factory.informer::<Stuck>();
    let registrations: Vec<_> = [&pods, &secrets, &stuck]
        .iter()
        .flat_map(|i| {
            (0..2).map(|_| {
                i.add_event_handler(ResourceEventHandlerFuncs::new(), HandlerOptions::new())
                    .unwrap()
            })
        })
        .collect();
    factory.start().unwrap();
    factory
        .wait_for_cache_sync(Some(Duration::from_millis(200)))
        .await;
    // A late handler, registered while running.
    let late = pods
        .add_event_handler(ResourceEventHandlerFuncs::new(), HandlerOptions::new())
        .unwrap();

    // Two concurrent shutdowns: both return only once everything has stopped.
    let (a, b) = tokio::join!(
        {
            let f = Arc::clone(&factory);
            async move { f.shutdown().await }
        },
        {
            let f = Arc::clone(&factory);
            async move {
                tokio::task::yield_now().await;
                f.shutdown().await
            }
        }
    );
    a.unwrap();
    b.unwrap();
    for informer in [&pods, &secrets, &stuck] {
        assert!(informer.is_stopped());
    }
    for registration in registrations.iter().chain([&late]) {
        assert!(
            registration.is_stopped(),
            "handler still running after shutdown"
        );
    }
    assert!(factory.is_shut_down());
    assert!(factory.informers().iter().all(|i| i.stopped));

    // Afterwards: start refuses, shutdown is a no-op, informers refuse handlers.
    factory.informer_with::<Pods>(InformerOptions::new().namespace("a"));
    assert!(matches!(factory.start(), Err(FactoryError::ShutDown)));
    factory.shutdown().await.unwrap();
    assert!(
        pods.add_event_handler(ResourceEventHandlerFuncs::new(), HandlerOptions::new())
            .is_err()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_before_start_and_without_informers_returns_at_once() {
    let factory = SharedInformerFactory::new(Source::with(objects()));
    factory.shutdown().await.unwrap();
    let pods = factory.informer::<Pods>();
    assert!(matches!(factory.start(), Err(FactoryError::ShutDown)));
    assert!(!pods.has_started());
}

#[test]
fn start_outside_a_runtime_needs_a_handle() {
    let factory = SharedInformerFactory::new(Source::with(objects()));
    factory.informer::<Pods>();
    assert!(matches!(factory.start(), Err(FactoryError::NoRuntime)));

    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    let factory = factory.with_runtime(runtime.handle().clone());
    assert_eq!(factory.start().unwrap(), 1);
    let report = runtime.block_on(factory.wait_for_cache_sync(Some(LONG)));
    assert!(report.all_synced(), "{report}");
    runtime.block_on(factory.shutdown()).unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn listers_read_the_shared_cache_by_namespace_and_selector() {
    let factory = SharedInformerFactory::new(Source::with(objects()));
    let lister = factory.lister::<Pods>();
    factory.start().unwrap();
    assert!(factory.wait_for_cache_sync(Some(LONG)).await.all_synced());

    assert_eq!(lister.list(&Everything).len(), 3);
    assert_eq!(lister.list(&|o: &Obj| o.app == "web").len(), 2);
    let a = lister.namespace("a");
    assert_eq!(a.get("db-0").unwrap().app, "db");
    assert!(a.get("missing").is_none());
    assert_eq!(a.list(&Everything).len(), 2);
    assert_eq!(a.list(&|o: &Obj| o.app == "web").len(), 1);
    assert_eq!(lister.namespace("b").get("web-0").unwrap().ns, "b");
    assert!(lister.namespace("c").list(&Everything).is_empty());
    assert_eq!(lister.by_index("namespace", "a").unwrap().len(), 2);
    assert_eq!(lister.get("a/web-0").unwrap().name, "web-0");
    factory.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_transform_applies_to_its_informer_only() {
    let factory = SharedInformerFactory::new(Source::with(objects()));
    let plain = factory.informer::<Pods>();
    let renamed = factory.informer_with::<Pods>(InformerOptions::new().transform(
        "app-upper",
        transform_func(|o: Arc<Obj>| {
            let mut o = (*o).clone();
            o.app = o.app.to_uppercase();
            Ok(Arc::new(o))
        }),
    ));
    factory.start().unwrap();
    assert!(factory.wait_for_cache_sync(Some(LONG)).await.all_synced());
    assert_eq!(plain.lister().get("a/web-0").unwrap().app, "web");
    assert_eq!(renamed.lister().get("a/web-0").unwrap().app, "WEB");
    factory.shutdown().await.unwrap();
}

/// The per-type resync period (configured) beats the factory's default; a consumer's own
/// period beats both.
#[tokio::test(start_paused = true)]
async fn resync_periods_come_from_the_consumer_then_type_then_default() {
    let factory = SharedInformerFactory::new(Source::with(objects()))
        .with_default_resync(Duration::from_secs(100))
        .configure::<Secrets>(|informer| informer.resync(Duration::from_secs(10)));
    let counters: Vec<Arc<AtomicUsize>> = (0..3).map(|_| Arc::default()).collect();
    let informers = [
        factory.informer::<Pods>(),
        factory.informer::<Secrets>(),
        factory.informer_with::<Pods>(InformerOptions::new().namespace("a")),
    ];
    let consumer_resync = [None, None, Some(Duration::from_secs(4))];
    for ((informer, count), resync) in informers.iter().zip(&counters).zip(consumer_resync) {
        let count = Arc::clone(count);
        let options = match resync {
            Some(period) => HandlerOptions::new().resync_period(period),
            None => HandlerOptions::new(),
        };
        informer
            .add_event_handler(
                ResourceEventHandlerFuncs::new().with_update(
                    move |_, _: &Arc<Obj>, _: &Arc<Obj>| {
                        count.fetch_add(1, Ordering::SeqCst);
                    },
                ),
                options,
            )
            .unwrap();
    }
    let start = tokio::time::Instant::now();
    factory.start().unwrap();
    // Wait for the sync without sleeping on tokio's clock, which would move it on.
    let deadline = std::time::Instant::now() + LONG;
    while !informers.iter().all(|i| i.has_synced()) {
        assert!(std::time::Instant::now() < deadline, "no sync");
        std::thread::sleep(Duration::from_millis(1));
        tokio::task::yield_now().await;
    }
    assert_eq!(
        tokio::time::Instant::now(),
        start,
        "the clock has not moved"
    );
    // Wait on the wall clock, yielding so the runtime runs the reflectors' timers.
    async fn eventually(count: &AtomicUsize, at_least: usize) {
        let deadline = std::time::Instant::now() + LONG;
        while count.load(Ordering::SeqCst) < at_least {
            assert!(
                std::time::Instant::now() < deadline,
                "{} resyncs, want {at_least}",
                count.load(Ordering::SeqCst)
            );
            std::thread::sleep(Duration::from_millis(1));
            tokio::task::yield_now().await;
        }
    }
    // Step the clock to each due time and wait for that resync's notifications before the
    // next step (each resync is dispatched on the informer's own thread). The namespaced pods
    // (4 s) resync their 2 objects at 4, 8 and 12 s; the secrets (10 s) their 3 at 10 s.
    for (to, pods_a, secrets) in [(4, 2, 0), (8, 4, 0), (10, 4, 3), (12, 6, 3)] {
        let now = tokio::time::Instant::now();
        tokio::time::advance(start + Duration::from_secs(to) + Duration::from_millis(1) - now)
            .await;
        eventually(&counters[2], pods_a).await;
        eventually(&counters[1], secrets).await;
    }
    assert_eq!(counters[2].load(Ordering::SeqCst), 6);
    assert_eq!(counters[1].load(Ordering::SeqCst), 3);
    assert_eq!(
        counters[0].load(Ordering::SeqCst),
        0,
        "100 s has not passed"
    );
    factory.shutdown().await.unwrap();
}

/// Streaming lists are one option, on the factory or per type: the informer files the
/// streamed objects with its own key function (the user used to have to pass it again).
#[tokio::test(start_paused = true)]
async fn streaming_lists_are_one_option_on_the_factory_or_a_type() {
    let factory = SharedInformerFactory::new(Source::streaming(objects()))
        .with_streaming_list(true)
        .configure::<Secrets>(|informer| informer.streaming_list(false));
    factory.informer::<Pods>();
    factory.informer::<Secrets>();
    factory.start().unwrap();
    let made = factory.source().made();
    assert_eq!(made.len(), 2);
    for m in &made {
        m.fake.wait_for_requests(1).await;
    }
    let first = |resource: &str| {
        let m = made.iter().find(|m| m.resource == resource).unwrap();
        m.fake.requests()[0].clone()
    };
    assert!(
        matches!(first("Pods"), informer_reflector::Request::Watch { params, .. } if params.send_initial_events),
        "the factory's default: a streaming list"
    );
    assert!(
        first("Secrets").is_list(),
        "the type's own option: list and watch"
    );
    factory.shutdown().await.unwrap();
}

/// Relists applied page by page are one option, on the factory or per type: an informer
/// with it has the first page of its relist in its cache while the next page is still to come.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn relists_by_page_are_one_option_on_the_factory_or_a_type() {
    let mut changed = (*common::obj("a", "web-0", "web")).clone();
    changed.rv = "2".into();
    let source = Source::relisting(objects(), vec![Arc::new(changed)]);
    let factory = SharedInformerFactory::new(source)
        .with_relist_by_page(true)
        .configure::<Secrets>(|informer| informer.relist_by_page(false));
    let pods = factory.informer::<Pods>();
    let secrets = factory.informer::<Secrets>();
    factory.start().unwrap();
    let made = factory.source().made();
    let deadline = std::time::Instant::now() + LONG;
    // Both relists have had their first page and asked for the next one (never answered).
    while !made.iter().all(|m| lists(m) == 3) {
        assert!(std::time::Instant::now() < deadline, "the relists started");
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    let version = |informer: &informer::SharedIndexInformer<Obj>| {
        informer.lister().get("a/web-0").map(|o| o.rv.clone())
    };
    while version(&pods).as_deref() != Some("2") {
        assert!(
            std::time::Instant::now() < deadline,
            "the factory's default: the first page applied"
        );
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    assert_eq!(
        version(&secrets).as_deref(),
        Some("1"),
        "the informer's own option: the relist held until its last page"
    );
    assert_eq!(
        pods.lister().list(&Everything).len(),
        3,
        "nothing deleted yet"
    );
    factory.shutdown().await.unwrap();
}
