//! What a sharded controller logs when a shard's term waits long to begin: one WARN line for
//! the terms held back, once, naming the informer whose cache has not listed their shards.
//!
//! Alone in its binary on purpose: `tracing` caches each callsite's interest for the whole
//! process, so another test reaching the warning first, on a thread with no subscriber, could
//! silence it here.

use std::io::Write;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use futures::StreamExt;
use informer::SharedIndexInformer;
use informer_leaderelection::{MemoryLeases, ShardConfig, ShardRunner};
use informer_reflector::{Error, ListPage, ListParams, ListerWatcher, WatchParams, WatchStream};
use informer_runtime::{Action, Controller, SHARD_WAIT_WARNING};
use informer_store::{Identity, KeyError};
use informer_testing::eventually;
use parking_lot::Mutex;
use tokio_util::sync::CancellationToken;

const SHARDS: u32 = 4;

struct Obj {
    name: String,
}

struct ObjIdentity;

impl Identity<Obj> for ObjIdentity {
    fn key(&self, obj: &Obj) -> Result<String, KeyError> {
        Ok(obj.name.clone())
    }
    fn resource_version<'a>(&self, _: &'a Obj) -> Option<&'a str> {
        Some("1")
    }
}

/// A source whose first list (at no shard) answers at once, and whose relists (at the shards
/// of the terms held) never do: a relist that keeps hanging.
#[derive(Default)]
struct StuckRelists {
    lists: AtomicUsize,
}

impl ListerWatcher<Obj> for StuckRelists {
    async fn list(&self, _: &ListParams) -> Result<ListPage<Obj>, Error> {
        if self.lists.fetch_add(1, Ordering::SeqCst) > 0 {
            std::future::pending::<()>().await;
        }
        Ok(ListPage::new(Vec::new(), "1"))
    }

    async fn watch(&self, _: &WatchParams) -> Result<WatchStream<Obj>, Error> {
        Ok(futures::stream::pending().boxed())
    }
}

/// What the subscriber wrote.
#[derive(Clone, Default)]
struct Written(Arc<Mutex<Vec<u8>>>);

impl Write for Written {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        self.0.lock().extend_from_slice(bytes);
        Ok(bytes.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Written {
    fn warnings(&self) -> Vec<String> {
        String::from_utf8_lossy(&self.0.lock())
            .lines()
            .filter(|l| l.contains("WARN"))
            .map(str::to_owned)
            .collect()
    }
}

/// The shards a warning line names: `shard terms [0, 2] have waited ...`.
fn shards_named(line: &str) -> Vec<u32> {
    let Some((_, rest)) = line.split_once("shard terms [") else {
        return Vec::new();
    };
    let list = rest.split_once(']').map_or("", |(list, _)| list);
    list.split(", ").filter_map(|s| s.parse().ok()).collect()
}

#[tokio::test(start_paused = true)]
async fn a_term_that_waits_long_to_begin_is_told_once_naming_the_informer_behind() {
    let written = Written::default();
    let subscriber = tracing_subscriber::fmt()
        .with_max_level(tracing::Level::WARN)
        .with_ansi(false)
        .with_writer({
            let written = written.clone();
            move || written.clone()
        })
        .finish();
    let _guard = tracing::subscriber::set_default(subscriber);

    let informer = Arc::new(
        SharedIndexInformer::builder(Arc::new(StuckRelists::default()), ObjIdentity)
            .name("pods")
            .build(),
    );
    let runner = ShardRunner::new(MemoryLeases::new(), ShardConfig::new("ctl", "a", SHARDS))
        .expect("a valid configuration");
    let controller = Controller::new(Arc::clone(&informer)).sharded(runner.clone());
    let stats = controller.shard_stats().expect("sharded");
    let stop = CancellationToken::new();
    let tasks = [
        tokio::spawn({
            let (informer, stop) = (Arc::clone(&informer), stop.clone());
            async move { informer.run(stop).await.expect("runs") }
        }),
        tokio::spawn({
            let stop = stop.clone();
            async move {
                let reconcile = |_: informer_runtime::Request<Obj>, _: Arc<()>| async {
                    Ok::<_, std::convert::Infallible>(Action::await_change())
                };
                let policy = |_: &_, _: &_, _: &_| Action::backoff();
                let ran = controller.run(stop, Arc::new(()), reconcile, policy).await;
                ran.expect("the controller runs");
            }
        }),
    ];
    eventually("every shard held", || {
        runner.status().owned.len() == SHARDS as usize
    })
    .await;
    assert!(written.warnings().is_empty(), "{:?}", written.warnings());

    tokio::time::sleep(SHARD_WAIT_WARNING + Duration::from_secs(1)).await;
    let warnings = written.warnings();
    // Each term told once (the terms held at once, in one line), naming the informer behind.
    assert!(
        warnings
            .iter()
            .all(|w| w.contains("have waited") && w.contains("not yet listed by pods (main)")),
        "{warnings:?}"
    );
    let mut told: Vec<u32> = warnings.iter().flat_map(|w| shards_named(w)).collect();
    told.sort_unstable();
    assert_eq!(told, vec![0, 1, 2, 3], "{warnings:?}");
    let waiting = stats.stats().shards;
    assert!(
        waiting
            .iter()
            .all(|s| s.owned && !s.begun && s.waiting_for >= Some(SHARD_WAIT_WARNING)),
        "{waiting:?}"
    );

    // Once per term: nothing more five minutes on.
    tokio::time::sleep(Duration::from_secs(300)).await;
    assert_eq!(written.warnings(), warnings);
    stop.cancel();
    for task in tasks {
        task.await.expect("no panic");
    }
}
