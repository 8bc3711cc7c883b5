//! W-INF: a whole informer over in-memory events — a list of 50,000 pods at resource version
//! 50000, then 100,000 MODIFIED events (event `k` on pod `i = (k * 7919) % 50000`, increasing
//! resource versions, the pod moved to the next node: `node-{(i + 1 + k / 50000) % 1000}`, so
//! that every event is a real change, which W-HTTP's API server needs) — timed from start until
//! every handler has seen everything.
//!
//! * **Ours**: a `SharedIndexInformer` (DeltaFifo, the `namespace` and `node` indexes, no
//!   resync) over a scripted in-memory `ListerWatcher`, with handlers that count adds and
//!   updates; done when each has counted every listed pod as an add and every event as an
//!   update.
//! * **kube-runtime**: its `reflector` over a stream of the same objects as `watcher::Event`s —
//!   `Init`, one `InitApply` per listed pod, `InitDone`, then one `Apply` per event — exactly
//!   what its `watcher` yields for a paged list and a watch. The objects are owned copies built
//!   before the clock starts; its writer stores a deep clone of each behind an `Arc` (its
//!   design), and the event is dropped after. Its store has no indexes. The handlers are either
//!   [`subscribers`](kube_runtime_subscribers) (`store_shared` + `Writer::subscribe`, each a
//!   task reading its `ReflectHandle` — kube-runtime's way to share one store among several
//!   consumers; each receives every listed object at `InitDone` and every applied one) or
//!   [one stream consumer](kube_runtime_consumer) counting for all of them inline.

use std::pin::pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use futures::StreamExt;
use informer_controller::{ResourceEventHandler, SharedIndexInformer};
use informer_reflector::{FakeListerWatcher, ListPage, ListerWatcher, WatchEvent, WatchStep};
use k8s_openapi::api::core::v1::Pod;
use kube_runtime::reflector::{self, store};
use kube_runtime::watcher::Event;
use tokio::runtime::Runtime;
use tokio_util::sync::CancellationToken;

use crate::workload::{indexers, key_func, pod_at, resource_version_func};

/// The buffer of kube-runtime's shared store (`store_shared`): how many notifications may wait
/// for the slowest subscriber before the reflector waits.
pub const SUBSCRIBER_BUFFER: usize = 1024;

/// A handler that counts adds and updates.
#[derive(Debug, Default)]
pub struct Counter {
    /// Adds seen.
    pub adds: AtomicUsize,
    /// Updates seen.
    pub updates: AtomicUsize,
}

impl Counter {
    /// Whether it has seen `adds` adds and `updates` updates.
    pub fn saw(&self, adds: usize, updates: usize) -> bool {
        self.adds.load(Ordering::Relaxed) == adds && self.updates.load(Ordering::Relaxed) == updates
    }
}

impl<K: Send + Sync + 'static> ResourceEventHandler<K> for Counter {
    fn on_add(&self, _: &str, _: &Arc<K>, _: bool) {
        self.adds.fetch_add(1, Ordering::Relaxed);
    }
    fn on_update(&self, _: &str, _: &Arc<K>, _: &Arc<K>) {
        self.updates.fetch_add(1, Ordering::Relaxed);
    }
}

/// The objects of W-INF, built once.
#[derive(Debug)]
pub struct Data {
    /// The listed pods, all at resource version `listed`.
    pub list: Vec<Arc<Pod>>,
    /// The MODIFIED events: the object and its resource version.
    pub events: Vec<(Arc<Pod>, String)>,
}

impl Data {
    /// `listed` pods, then `events` events.
    pub fn new(listed: usize, events: usize) -> Self {
        let list = (0..listed)
            .map(|i| Arc::new(pod_at(i, listed as u64, i % 1000)))
            .collect();
        let events = (0..events)
            .map(|k| {
                let i = (k * 7919) % listed;
                let rv = (listed + k + 1) as u64;
                let node = (i + 1 + k / listed) % 1000;
                (Arc::new(pod_at(i, rv, node)), rv.to_string())
            })
            .collect();
        Self { list, events }
    }

    /// The same objects as kube-runtime's watcher would yield them (owned copies).
    pub fn watcher_events(&self) -> Vec<Event<Pod>> {
        let mut out = Vec::with_capacity(self.list.len() + self.events.len() + 2);
        out.push(Event::Init);
        out.extend(self.list.iter().map(|p| Event::InitApply(Pod::clone(p))));
        out.push(Event::InitDone);
        out.extend(self.events.iter().map(|(p, _)| Event::Apply(Pod::clone(p))));
        out
    }
}

/// A runtime for either side: two workers, the machine's cores.
pub fn runtime() -> Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a runtime")
}

/// Our informer over `source` — the W-IDX key and indexes, no resync — with `handlers`
/// counting handlers.
#[allow(clippy::type_complexity)]
pub fn informer<L: ListerWatcher<Pod> + 'static>(
    source: L,
    handlers: usize,
) -> (Arc<SharedIndexInformer<Pod>>, Vec<Arc<Counter>>) {
    let informer = Arc::new(SharedIndexInformer::new(
        source,
        key_func(),
        resource_version_func(),
        Duration::ZERO,
        indexers(),
    ));
    let counters: Vec<Arc<Counter>> = (0..handlers).map(|_| Arc::default()).collect();
    for c in &counters {
        informer
            .add_event_handler(Arc::clone(c))
            .expect("handler before start");
    }
    (informer, counters)
}

/// Our side: builds the source (not timed), then times `run` → every one of `handlers`
/// counters has seen it all.
pub fn ours(rt: &Runtime, data: &Data, handlers: usize) -> Duration {
    let (listed, events) = (data.list.len(), data.events.len());
    let source = FakeListerWatcher::new();
    source.push_list(ListPage::new(data.list.clone(), listed.to_string()));
    let mut steps: Vec<WatchStep<Pod>> = data
        .events
        .iter()
        .map(|(p, rv)| WatchStep::Event(WatchEvent::modified(Arc::clone(p), rv.clone())))
        .collect();
    steps.push(WatchStep::Hang);
    source.push_watch(steps);
    let (informer, counters) = informer(source, handlers);
    rt.block_on(async {
        let stop = CancellationToken::new();
        let started = Instant::now();
        let task = tokio::spawn({
            let (informer, stop) = (Arc::clone(&informer), stop.clone());
            async move { informer.run(stop).await }
        });
        while !counters.iter().all(|c| c.saw(listed, events)) {
            tokio::time::sleep(Duration::from_micros(200)).await;
        }
        let elapsed = started.elapsed();
        stop.cancel();
        task.await.expect("informer task").expect("informer run");
        elapsed
    })
}

/// kube-runtime with `subscribers` subscribers: times the reflector's start → every subscriber
/// has received every listed object and every event.
pub fn kube_runtime_subscribers(
    rt: &Runtime,
    events: Vec<Event<Pod>>,
    subscribers: usize,
) -> Duration {
    let total = applied(&events);
    rt.block_on(async move {
        let (_reader, writer) = store::store_shared::<Pod>(SUBSCRIBER_BUFFER);
        let handles: Vec<_> = (0..subscribers)
            .map(|_| writer.subscribe().expect("a shared store"))
            .collect();
        let started = Instant::now();
        let readers: Vec<_> = handles
            .into_iter()
            .map(|handle| tokio::spawn(count_subscriber(handle, total)))
            .collect();
        let driver = tokio::spawn(
            reflector::reflector(writer, futures::stream::iter(events.into_iter().map(Ok)))
                .for_each(|_| async {}),
        );
        for r in readers {
            assert_eq!(r.await.expect("subscriber"), total);
        }
        let elapsed = started.elapsed();
        driver.await.expect("reflector");
        elapsed
    })
}

/// Reads `total` objects from a subscriber handle.
pub async fn count_subscriber(handle: reflector::ReflectHandle<Pod>, total: usize) -> usize {
    let mut handle = pin!(handle);
    let mut n = 0;
    while n < total && handle.next().await.is_some() {
        n += 1;
    }
    n
}

/// kube-runtime with one consumer of the reflector's stream that counts, for each of
/// `handlers` counters, `InitApply` as an add and `Apply` as an update.
pub fn kube_runtime_consumer(rt: &Runtime, events: Vec<Event<Pod>>, handlers: usize) -> Duration {
    let total = applied(&events);
    rt.block_on(async move {
        let (_reader, writer) = store::store::<Pod>();
        let counters: Vec<Counter> = (0..handlers).map(|_| Counter::default()).collect();
        let started = Instant::now();
        let mut stream = pin!(reflector::reflector(
            writer,
            futures::stream::iter(events.into_iter().map(Ok))
        ));
        while let Some(event) = stream.next().await {
            count_event(&counters, &event.expect("no errors in memory"));
        }
        let elapsed = started.elapsed();
        let seen: usize = counters
            .iter()
            .map(|c| c.adds.load(Ordering::Relaxed) + c.updates.load(Ordering::Relaxed))
            .sum();
        assert_eq!(seen, total * handlers);
        elapsed
    })
}

/// Counts an add (`InitApply`) or an update (`Apply`) on every counter.
pub fn count_event(counters: &[Counter], event: &Event<Pod>) {
    for c in counters {
        match event {
            Event::InitApply(_) => c.adds.fetch_add(1, Ordering::Relaxed),
            Event::Apply(_) => c.updates.fetch_add(1, Ordering::Relaxed),
            _ => 0,
        };
    }
}

/// How many objects the events carry (one per `InitApply` and `Apply`).
fn applied(events: &[Event<Pod>]) -> usize {
    events
        .iter()
        .filter(|e| matches!(e, Event::InitApply(_) | Event::Apply(_)))
        .count()
}
