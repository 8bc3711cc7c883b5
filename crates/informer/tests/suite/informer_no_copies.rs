//! No object is ever copied on its way through the informer: from the source, through the
//! queue, the cache and the notifications, to every handler, objects travel as `Arc`s.

use informer::HandlerOptions;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use informer::{ResourceEventHandler, SharedIndexInformer};
use informer_reflector::{FakeListerWatcher, ListPage, WatchEvent, WatchStep};
use informer_store::{FnIdentity, IndexValues, index_func, indexers, key_func};
use tokio_util::sync::CancellationToken;

static CLONES: AtomicUsize = AtomicUsize::new(0);

/// An object that counts its clones.
#[derive(Debug)]
struct Counted {
    name: String,
    node: String,
    rv: u64,
}

impl Clone for Counted {
    fn clone(&self) -> Self {
        CLONES.fetch_add(1, Ordering::SeqCst);
        Self {
            name: self.name.clone(),
            node: self.node.clone(),
            rv: self.rv,
        }
    }
}

fn counted(i: usize, rv: u64) -> Arc<Counted> {
    Arc::new(Counted {
        name: format!("o-{i}"),
        node: format!("node-{}", rv % 7),
        rv,
    })
}

#[derive(Default)]
struct Counter {
    adds: AtomicUsize,
    updates: AtomicUsize,
}

impl ResourceEventHandler<Counted> for Counter {
    fn on_add(&self, _: &str, _: &Arc<Counted>, _: bool) {
        self.adds.fetch_add(1, Ordering::SeqCst);
    }
    fn on_update(&self, _: &str, _: &Arc<Counted>, _: &Arc<Counted>) {
        self.updates.fetch_add(1, Ordering::SeqCst);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn objects_are_shared_never_cloned_from_source_to_handlers() {
    const OBJECTS: usize = 200;
    const EVENTS: usize = 1_000;
    let source = FakeListerWatcher::new();
    source.push_list(ListPage::new(
        (0..OBJECTS).map(|i| counted(i, 1)).collect(),
        "1",
    ));
    let mut steps: Vec<WatchStep<Counted>> = (0..EVENTS)
        .map(|k| {
            let rv = k as u64 + 2;
            let obj = counted(k * 7 % OBJECTS, rv);
            WatchStep::Event(WatchEvent::modified(obj, rv.to_string()))
        })
        .collect();
    steps.push(WatchStep::Hang);
    source.push_watch(steps);
    let informer = Arc::new(SharedIndexInformer::new(
        source,
        FnIdentity::new(key_func(|o: &Counted| Ok(o.name.clone()))).with_indexers(indexers([(
            "node",
            index_func(|o: &Counted| Ok(IndexValues::one(o.node.as_str()))),
        )])),
    ));
    let counters: Vec<Arc<Counter>> = (0..4).map(|_| Arc::default()).collect();
    for c in &counters {
        informer
            .add_event_handler(Arc::clone(c), HandlerOptions::new())
            .unwrap();
    }
    let stop = CancellationToken::new();
    let task = tokio::spawn({
        let (informer, stop) = (Arc::clone(&informer), stop.clone());
        async move { informer.run(stop).await }
    });
    let done = || {
        counters.iter().all(|c| {
            c.adds.load(Ordering::SeqCst) == OBJECTS && c.updates.load(Ordering::SeqCst) == EVENTS
        })
    };
    tokio::time::timeout(Duration::from_secs(30), async {
        while !done() {
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
    })
    .await
    .expect("every handler sees every add and update");
    stop.cancel();
    task.await.unwrap().unwrap();
    assert_eq!(informer.lister().len(), OBJECTS);
    assert_eq!(CLONES.load(Ordering::SeqCst), 0, "no object was cloned");
    // The counter does count: one deliberate clone shows up.
    let _copy = (*counted(0, 0)).clone();
    assert_eq!(CLONES.load(Ordering::SeqCst), 1);
}
