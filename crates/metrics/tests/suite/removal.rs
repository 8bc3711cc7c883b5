//! An informer removed from its factory leaves no series behind, and a resource the server
//! does not serve shows as `informer_reflector_not_served` while it is not.

use std::sync::Arc;
use std::time::Duration;

use informer_factory::{ListerWatcherSource, Selection, SharedInformerFactory};
use informer_metrics::Metrics;
use informer_reflector::{Error, FakeListerWatcher, ListPage, Status, WatchStep};
use informer_store::{FnIdentity, SharedIdentity, key_func};
use informer_testing::eventually;

use crate::common;
use common::{assert_openmetrics, sample};

/// Serves one word, after answering its first list `404 NotFound` (a CRD not installed yet).
struct Words;

impl ListerWatcherSource<String> for Words {
    type Object = String;
    type ListerWatcher = FakeListerWatcher<String>;

    fn lister_watcher(&self, _: &Selection) -> FakeListerWatcher<String> {
        let fake = FakeListerWatcher::new();
        fake.push_list_error(Error::Api(Status::new(
            404,
            "NotFound",
            "the server could not find the requested resource",
        )));
        fake.push_list(ListPage::new(vec![Arc::new("apple".to_owned())], "7"));
        fake.push_watch(vec![WatchStep::Hang]);
        fake
    }

    fn identity(&self) -> SharedIdentity<String> {
        Arc::new(FnIdentity::new(key_func(|s: &String| Ok(s.clone()))))
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_removed_informer_leaves_no_series_and_not_served_is_a_gauge() {
    let metrics = Metrics::new();
    let factory = SharedInformerFactory::new(Words)
        .with_reflector_observers(metrics.reflector_observers())
        .configure::<String>(|b| {
            b.reflector_config(|r| r.with_not_served_poll(Duration::from_millis(300)))
        });
    metrics.watch_factory(&factory);
    let informer = factory.informer::<String>();
    factory.start().expect("started");
    let not_served = "informer_reflector_not_served{informer=\"String(all)\"}";

    eventually("not served", || {
        sample(&metrics.encode(), not_served) == Some(1.0)
    })
    .await;
    eventually("synced once served", || informer.has_synced()).await;
    let text = metrics.encode();
    assert_openmetrics(&text);
    assert_eq!(sample(&text, not_served), Some(0.0), "{text}");
    assert!(
        text.contains("informer=\"String(all)\""),
        "the informer's series are there: {text}"
    );

    assert!(
        factory
            .remove::<String>(Default::default())
            .await
            .expect("removed")
    );
    let text = metrics.encode();
    assert_openmetrics(&text);
    assert!(
        !text.contains("String(all)"),
        "a removed informer leaves no series: {text}"
    );

    // Created again, it counts from nothing under the same name.
    let again = factory.informer::<String>();
    factory.start().expect("started");
    eventually("the new one syncs", || again.has_synced()).await;
    let text = metrics.encode();
    let lists = |result: &str| -> f64 {
        text.lines()
            .filter(|l| l.starts_with("informer_reflector_lists_total{informer=\"String(all)\""))
            .filter(|l| l.contains(&format!("result=\"{result}\"")))
            .filter_map(|l| l.rsplit_once(' ')?.1.parse::<f64>().ok())
            .sum()
    };
    assert_eq!(
        (lists("error"), lists("ok")),
        (1.0, 1.0),
        "the new informer's lists alone: {text}"
    );
    factory.shutdown().await.expect("a clean shutdown");
}
