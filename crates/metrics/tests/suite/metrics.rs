//! Each metric moves when its event happens, and a scrape is well-formed OpenMetrics text.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use informer::{HandlerOptions, PanicPolicy, ResourceEventHandlerFuncs, SharedIndexInformer};
use informer_metrics::Metrics;
use informer_reflector::{FakeListerWatcher, ListPage, Status, WatchEvent, WatchStep};
use informer_runtime::{Action, Controller};
use informer_store::{FnIdentity, IndexValues, index_func, indexers, key_func};
use informer_testing::eventually;
use tokio_util::sync::CancellationToken;

use crate::common;
use common::{assert_openmetrics, sample};

fn informer(
    source: Arc<FakeListerWatcher<String>>,
    metrics: &Metrics,
) -> Arc<SharedIndexInformer<String>> {
    let observer = metrics.reflector_observer("words");
    let informer = Arc::new(
        SharedIndexInformer::builder(
            source,
            FnIdentity::new(key_func(|s: &String| Ok(s.clone()))).with_indexers(indexers([(
                "first-letter",
                index_func(|s: &String| Ok(IndexValues::one(&s[..1]))),
            )])),
        )
        .name("words")
        .panic_policy(PanicPolicy::Continue)
        .reflector_config(move |r| r.with_observer(observer))
        .build(),
    );
    metrics.watch_informer(&informer);
    informer
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reflector_cache_and_consumer_metrics_move_with_their_events() {
    let metrics = Metrics::new();
    let source = Arc::new(FakeListerWatcher::<String>::new());
    source.push_list(ListPage::new(
        vec![Arc::new("apple".into()), Arc::new("avocado".into())],
        "1",
    ));
    source.push_watch(vec![
        WatchStep::Event(WatchEvent::Added {
            object: Arc::new("banana".into()),
            resource_version: "2".into(),
        }),
        WatchStep::Event(WatchEvent::Error(Status::expired("too old"))),
    ]);
    source.push_list(ListPage::new(
        vec![
            Arc::new("apple".into()),
            Arc::new("banana".into()),
            Arc::new("cherry".into()),
        ],
        "5",
    ));
    // The watch after the relist is refused once with a 429: the reflector waits (a backoff
    // wait, counted) and watches again. (The relist after a 410 is sent at once, without one.)
    source.push_watch_error(informer_reflector::Error::Api(Status::too_many_requests(
        Some(Duration::from_millis(20)),
    )));
    source.push_watch(vec![WatchStep::Hang]);
    let informer = informer(Arc::clone(&source), &metrics);

    // A consumer that panics on "cherry", and one held back until the test lets it go.
    let panicky = informer
        .add_event_handler(
            ResourceEventHandlerFuncs::new().with_add(|_, s: &Arc<String>, _| {
                assert_ne!(s.as_str(), "cherry", "a handler bug");
            }),
            HandlerOptions::new(),
        )
        .expect("registered");
    let held = Arc::new(AtomicBool::new(true));
    let slow = informer
        .add_event_handler(
            ResourceEventHandlerFuncs::new().with_add({
                let held = Arc::clone(&held);
                move |_, _, _| {
                    while held.load(Ordering::Acquire) {
                        std::thread::sleep(Duration::from_millis(1));
                    }
                }
            }),
            HandlerOptions::new().buffer(2).name("slow"),
        )
        .expect("registered");

    let stop = CancellationToken::new();
    let running = tokio::spawn({
        let (informer, stop) = (Arc::clone(&informer), stop.clone());
        async move { informer.run(stop).await }
    });
    eventually("the relist after the 410", || {
        source.requests().iter().filter(|r| r.is_list()).count() == 2
            && informer.lister().len() == 3
    })
    .await;
    eventually("the panic is counted", || panicky.panics() == 1).await;
    eventually("the slow consumer lags by 20 ms", || {
        slow.lag() >= Duration::from_millis(20)
    })
    .await;
    // The watch after the 429 starts once its backoff wait is over: on a loaded machine,
    // possibly after the consumer's lag reached 20 ms.
    eventually("the watch after the 429", || {
        sample(
            &metrics.encode(),
            "informer_reflector_watches_total{informer=\"words\"}",
        ) == Some(2.0)
    })
    .await;

    let text = metrics.encode();
    if std::env::var_os("SHOW_SCRAPE").is_some() {
        println!("{text}");
    }
    assert_openmetrics(&text);
    let at = |series: &str| sample(&text, series);
    let words = "informer=\"words\"";
    assert_eq!(
        at(&format!(
            "informer_reflector_lists_total{{{words},reason=\"initial\",streaming=\"false\",result=\"ok\"}}"
        )),
        Some(1.0)
    );
    assert_eq!(
        at(&format!(
            "informer_reflector_lists_total{{{words},reason=\"expired\",streaming=\"false\",result=\"ok\"}}"
        )),
        Some(1.0)
    );
    assert_eq!(
        at(&format!(
            "informer_reflector_events_total{{{words},type=\"ADDED\"}}"
        )),
        Some(1.0)
    );
    assert_eq!(
        at(&format!(
            "informer_reflector_events_total{{{words},type=\"ERROR\"}}"
        )),
        Some(1.0)
    );
    assert_eq!(
        at(&format!(
            "informer_reflector_watch_ends_total{{{words},end=\"error\"}}"
        )),
        Some(1.0)
    );
    assert_eq!(
        at(&format!("informer_reflector_watches_total{{{words}}}")),
        Some(2.0)
    );
    assert_eq!(
        at(&format!(
            "informer_reflector_list_duration_seconds_count{{{words}}}"
        )),
        Some(2.0)
    );
    assert!(
        at(&format!(
            "informer_reflector_backoff_waits_total{{{words}}}"
        ))
        .is_some_and(|n| n >= 1.0)
    );
    assert!(
        at(&format!(
            "informer_reflector_last_resource_version_age_seconds{{{words}}}"
        ))
        .is_some()
    );
    // Two listed, one added, three relisted: six writes; every one popped by now.
    assert!(at(&format!("informer_queue_adds_total{{{words}}}")).is_some_and(|n| n >= 6.0));
    assert!(at(&format!("informer_queue_pops_total{{{words}}}")).is_some_and(|n| n >= 3.0));
    assert!(at(&format!("informer_queue_coalesced_total{{{words}}}")).is_some());
    assert_eq!(at(&format!("informer_queue_depth{{{words}}}")), Some(0.0));
    assert_eq!(at(&format!("informer_cache_objects{{{words}}}")), Some(3.0));
    assert_eq!(at(&format!("informer_synced{{{words}}}")), Some(1.0));
    assert_eq!(
        at(&format!(
            "informer_index_values{{{words},index=\"first-letter\"}}"
        )),
        Some(3.0)
    );
    // A consumer is labelled by its name, or by its registration number without one.
    let handler = |h: &informer::HandlerRegistration| {
        let label = h.name().map_or_else(|| h.id().to_string(), str::to_owned);
        format!("{words},handler=\"{label}\"")
    };
    assert_eq!(slow.name(), Some("slow"));
    assert!(text.contains("handler=\"slow\""), "{text}");
    assert_eq!(
        at(&format!(
            "informer_handler_panics_total{{{}}}",
            handler(&panicky)
        )),
        Some(1.0)
    );
    assert_eq!(
        at(&format!(
            "informer_handler_panics_total{{{}}}",
            handler(&slow)
        )),
        Some(0.0)
    );
    assert!(
        at(&format!(
            "informer_handler_lag_seconds{{{}}}",
            handler(&slow)
        ))
        .is_some_and(|lag| lag > 0.0)
    );
    assert!(
        at(&format!("informer_handler_buffered{{{}}}", handler(&slow))).is_some_and(|n| n >= 1.0)
    );
    assert!(
        at(&format!(
            "informer_handler_delivered_total{{{}}}",
            handler(&panicky)
        ))
        .is_some_and(|n| n >= 3.0)
    );

    held.store(false, Ordering::Release);
    eventually("the slow consumer catches up", || slow.buffered() == 0).await;
    // A wait is recorded when a notification is taken, a delivery once its handler returns.
    eventually(
        "the slow consumer returned from its last notification",
        || slow.delivered() as u64 >= slow.lag_histogram().count,
    )
    .await;
    let text = metrics.encode();
    assert_openmetrics(&text);
    // Every notification it took is in its wait histogram; those it took after the hold had
    // waited 20 ms or more, above the 10 ms bucket.
    let waits = |suffix: &str| {
        sample(
            &text,
            &format!(
                "informer_handler_wait_seconds_{suffix}{{{}}}",
                handler(&slow)
            ),
        )
    };
    let delivered = slow.delivered() as f64;
    assert_eq!(waits("count"), Some(delivered));
    assert!(
        waits("sum").is_some_and(|s| s >= 0.02),
        "{:?}",
        waits("sum")
    );
    let within_10ms = sample(
        &text,
        &format!(
            "informer_handler_wait_seconds_bucket{{le=\"0.01\",{}}}",
            handler(&slow)
        ),
    )
    .expect("the 10 ms bucket");
    assert!(
        within_10ms < delivered,
        "{within_10ms} of {delivered} within 10 ms"
    );
    assert_eq!(
        sample(
            &text,
            &format!("informer_handler_lag_seconds{{{}}}", handler(&slow))
        ),
        Some(0.0)
    );
    stop.cancel();
    running.await.expect("no panic").expect("runs");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reconciles_are_counted_by_result_and_timed() {
    let metrics = Metrics::new();
    let source = Arc::new(FakeListerWatcher::<String>::new());
    source.push_list(ListPage::new(
        vec![Arc::new("good".into()), Arc::new("bad".into())],
        "1",
    ));
    let informer = informer(source, &metrics);
    let stop = CancellationToken::new();
    let running = tokio::spawn({
        let (informer, stop) = (Arc::clone(&informer), stop.clone());
        async move { informer.run(stop).await }
    });
    let queue = informer_workqueue::WorkQueue::builder()
        .name("words")
        .metrics(metrics.workqueue_provider())
        .build();
    let controller = Controller::with_queue(Arc::clone(&informer), queue)
        .observer(metrics.reconcile_observer("words"));
    let reconciling = tokio::spawn(controller.run(
        stop.clone(),
        Arc::new(()),
        |request, _| async move {
            if &*request.key == "bad" {
                Err("refused")
            } else {
                Ok(Action::await_change())
            }
        },
        |_, _, _| Action::requeue(Duration::from_secs(3600)),
    ));
    let controller = "controller=\"words\"";
    eventually("both reconciled", || {
        let text = metrics.encode();
        sample(
            &text,
            &format!("controller_runtime_reconcile_total{{{controller},result=\"success\"}}"),
        ) == Some(1.0)
            && sample(
                &text,
                &format!("controller_runtime_reconcile_total{{{controller},result=\"error\"}}"),
            ) == Some(1.0)
    })
    .await;
    let text = metrics.encode();
    assert_openmetrics(&text);
    assert_eq!(
        sample(
            &text,
            &format!("controller_runtime_reconcile_errors_total{{{controller}}}")
        ),
        Some(1.0)
    );
    assert_eq!(
        sample(
            &text,
            &format!("controller_runtime_reconcile_time_seconds_count{{{controller}}}")
        ),
        Some(2.0)
    );
    assert_eq!(
        sample(&text, "workqueue_adds_total{name=\"words\"}"),
        Some(2.0)
    );
    assert_eq!(
        sample(&text, "workqueue_retries_total{name=\"words\"}"),
        Some(1.0)
    );
    assert_eq!(
        sample(
            &text,
            "workqueue_work_duration_seconds_count{name=\"words\"}"
        ),
        Some(2.0)
    );
    stop.cancel();
    reconciling.await.expect("no panic").expect("runs");
    running.await.expect("no panic").expect("runs");
}

/// A refused object is counted under its reason.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refused_deltas_are_counted_by_reason() {
    let metrics = Metrics::new();
    let source = Arc::new(FakeListerWatcher::<String>::new());
    // The empty word has no first letter: the index function panics on it, and the cache
    // refuses it.
    source.push_list(ListPage::new(
        vec![Arc::new("apple".into()), Arc::new(String::new())],
        "1",
    ));
    source.push_watch(vec![WatchStep::Hang]);
    let informer = informer(source, &metrics);
    let stop = CancellationToken::new();
    let running = tokio::spawn({
        let (informer, stop) = (Arc::clone(&informer), stop.clone());
        async move { informer.run(stop).await }
    });
    eventually("synced, one refusal", || {
        informer.has_synced() && informer.refused_deltas() == 1
    })
    .await;
    let text = metrics.encode();
    assert_openmetrics(&text);
    let refused = |reason: &str| {
        sample(
            &text,
            &format!("informer_refused_deltas_total{{informer=\"words\",reason=\"{reason}\"}}"),
        )
    };
    assert_eq!(refused("index"), Some(1.0));
    for other in ["key", "transform", "other", "panic"] {
        assert_eq!(refused(other), Some(0.0), "{other}");
    }
    assert_eq!(
        sample(&text, "informer_caught_panics_total{informer=\"words\"}"),
        Some(1.0)
    );
    stop.cancel();
    running.await.expect("no panic").expect("runs");
}

#[test]
fn lists_of_a_sharded_informer_are_counted_by_what_the_server_said_and_retired() {
    use informer_reflector::ServerFiltering;

    let metrics = Metrics::new();
    let observer = metrics.reflector_observer("pods-shard-1");
    observer.shard_filtering(ServerFiltering::Filtered);
    observer.shard_filtering(ServerFiltering::Filtered);
    observer.shard_filtering(ServerFiltering::NotFiltered);
    let text = metrics.encode();
    assert_openmetrics(&text);
    let series = |server: &str| {
        let name = "informer_reflector_shard_lists_total";
        sample(
            &text,
            &format!(r#"{name}{{informer="pods-shard-1",server="{server}"}}"#),
        )
    };
    assert_eq!(series("filtered"), Some(2.0));
    assert_eq!(series("not_filtered"), Some(1.0));
    assert_eq!(series("unknown"), None, "no series of what was never said");

    observer.retired();
    assert!(!metrics.encode().contains("pods-shard-1"));
}
