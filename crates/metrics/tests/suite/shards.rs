//! A sharded controller's per-shard metrics follow its terms and reconciles.

use std::sync::Arc;
use std::time::Duration;

use informer::SharedIndexInformer;
use informer_leaderelection::{MemoryLeases, ShardConfig, ShardRunner, Timings};
use informer_metrics::Metrics;
use informer_reflector::{FakeListerWatcher, ListPage, WatchStep};
use informer_runtime::{Action, Controller};
use informer_store::{FnIdentity, key_func};
use informer_testing::eventually;
use tokio_util::sync::CancellationToken;

use crate::common;
use common::{assert_openmetrics, sample};

/// The sample of `name` with exactly `labels`.
fn at(text: &str, name: &str, labels: &str) -> Option<f64> {
    sample(text, &format!("{name}{{{labels}}}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shards_owned_moved_and_reconciled_are_counted_per_shard() {
    let metrics = Metrics::new();
    let source = Arc::new(FakeListerWatcher::<String>::new());
    let words: Vec<Arc<String>> = ["a", "b", "c"].map(|w| Arc::new(w.to_string())).into();
    // A list and a watch for each shard set: none, then the shards as their terms are held
    // (a term begins only once its shard is listed), and more for the moves a loaded machine
    // may add (a term lost at its renew deadline and taken again): a list the fake has no
    // answer for never ends, and a term waiting for it would never begin.
    for _ in 0..32 {
        source.push_list(ListPage::new(words.clone(), "1"));
        source.push_watch(vec![WatchStep::Hang]);
    }
    let informer = Arc::new(SharedIndexInformer::new(
        source,
        FnIdentity::new(key_func(|s: &String| Ok(s.clone()))),
    ));
    // A renew deadline no loaded machine misses: a term lost and taken again would add moves
    // and reconciles the counts below do not expect.
    let timings = Timings::new(
        Duration::from_secs(15),
        Duration::from_secs(10),
        Duration::from_millis(100),
    );
    let config = ShardConfig::new("words", "replica-a", 2).timings(timings);
    let runner = ShardRunner::new(MemoryLeases::new(), config).unwrap();
    let controller = Controller::new(Arc::clone(&informer)).sharded(runner);
    metrics.watch_shards("words", controller.shard_stats().expect("sharded"));
    let stop = CancellationToken::new();
    let running = tokio::spawn({
        let (informer, stop) = (Arc::clone(&informer), stop.clone());
        async move { informer.run(stop).await }
    });
    let reconciling = tokio::spawn(controller.run(
        stop.clone(),
        Arc::new(()),
        |_, _| async { Ok::<_, std::convert::Infallible>(Action::await_change()) },
        |_, _, _| Action::backoff(),
    ));

    // Objects without a uid hash "" (0xcbf2...): all in the upper of the two shards.
    let shard = |s: &str| format!("controller=\"words\",shard=\"{s}\"");
    // At least once each: a relist at a grown shard set delivers the objects it keeps again
    // (same-version updates, as any relist), which may queue them again.
    eventually("both shards owned and the three words reconciled", || {
        let text = metrics.encode();
        at(&text, "controller_shard_owned", &shard("0")) == Some(1.0)
            && at(&text, "controller_shard_owned", &shard("1")) == Some(1.0)
            && at(&text, "controller_shard_reconciles_total", &shard("1")).is_some_and(|n| n >= 3.0)
    })
    .await;
    let text = metrics.encode();
    assert_openmetrics(&text);
    assert_eq!(
        at(&text, "controller_shard_reconciles_total", &shard("0")),
        Some(0.0)
    );
    assert_eq!(
        at(&text, "controller_shard_terms_total", &shard("0")),
        Some(1.0)
    );
    // Both terms began: the informer relisted at both shards before anything was reconciled.
    assert_eq!(at(&text, "controller_shard_begun", &shard("1")), Some(1.0));
    let moves = |m: &str| format!("controller=\"words\",move=\"{m}\"");
    assert_eq!(
        at(&text, "controller_shard_moves_total", &moves("started")),
        Some(2.0)
    );
    assert_eq!(
        at(&text, "controller_shard_moves_total", &moves("lost")),
        Some(0.0)
    );
    assert_eq!(
        at(
            &text,
            "controller_shard_keys_unplaced_total",
            "controller=\"words\""
        ),
        Some(0.0)
    );

    stop.cancel();
    reconciling.await.unwrap().unwrap();
    running.await.unwrap().unwrap();
    // Stopped: every shard handed over (released), none owned.
    let text = metrics.encode();
    assert_eq!(
        at(&text, "controller_shard_moves_total", &moves("handed_off")),
        Some(2.0)
    );
    assert_eq!(at(&text, "controller_shard_owned", &shard("1")), Some(0.0));
    assert_eq!(at(&text, "controller_shard_begun", &shard("1")), Some(0.0));
}
