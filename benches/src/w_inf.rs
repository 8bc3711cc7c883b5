//! W-INF: a whole informer over in-memory events — a list of 50,000 pods at resource version
//! 50000, then 100,000 MODIFIED events (event `k` on pod `i = (k * 7919) % 50000`, increasing
//! resource versions, the pod moved to the next node: `node-{(i + 1 + k / 50000) % 1000}`, so
//! that every event is a real change, which W-HTTP's API server needs) — timed from start until
//! every handler has seen everything.
//!
//! * **Ours**: a `SharedIndexInformer` (its default queue, the atomic in-order FIFO, or the
//!   DeltaFifo where a row says so; the `namespace` and `node` indexes, no resync) over a scripted in-memory `ListerWatcher`, with handlers that count adds and
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
//!
//! Our consumers ([`Consumers`]) are sync handlers on the delivery pool or async
//! [`Subscription`]s, each read by a tokio task of its own. Every consumer has a bounded buffer
//! that coalesces per key once it is full; for an exact count of adds and updates the buffer is
//! [`NO_COALESCING`] notifications, more than the whole workload, so nothing coalesces (a run
//! that coalesced anyway panics rather than report a figure). [`Consumers::Latest`] keeps the
//! default buffer, lets it coalesce, and is done when each subscriber's last event for every pod
//! carries that pod's final resource version.

use std::pin::pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use futures::StreamExt;
use informer::{
    Event as InformerEvent, HandlerOptions, HandlerRegistration, InformerBuilder, QueueKind,
    ResourceEventHandler, SharedIndexInformer, Subscription,
};
use informer_reflector::{
    FakeListerWatcher, ListPage, ListerWatcher, ReflectorObserver, WatchEvent, WatchStep,
};
use k8s_openapi::api::core::v1::Pod;
use kube_runtime::WatchStreamExt;
use kube_runtime::reflector::{self, store};
use kube_runtime::watcher::Event;
use tokio::runtime::Runtime;
use tokio_util::sync::CancellationToken;

use crate::workload::{identity, indexers, key_func, pod_at};

/// The buffer of kube-runtime's shared store (`store_shared`): how many notifications may wait
/// for the slowest subscriber before the reflector waits.
pub const SUBSCRIBER_BUFFER: usize = 1024;

/// A consumer buffer larger than W-INF's 150,000 notifications: with it, no consumer coalesces,
/// so each sees every add and update.
pub const NO_COALESCING: usize = 200_000;

/// Our side's consumers of W-INF.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Consumers {
    /// `count` sync handlers counting adds and updates (on the delivery pool), each with a buffer
    /// of `buffer` notifications; done when each has counted everything.
    Handlers {
        /// How many.
        count: usize,
        /// Each one's buffer.
        buffer: usize,
    },
    /// `count` [`Subscription`]s, each read by a tokio task of its own that counts adds and
    /// updates; done when each has counted everything.
    Subscribers {
        /// How many.
        count: usize,
        /// Each one's buffer.
        buffer: usize,
    },
    /// `count` [`Subscription`]s with a buffer of `buffer` that may coalesce, each read by a
    /// tokio task of its own; done when each has seen, for every pod, an event carrying the
    /// pod's final resource version (the last one the workload gives it).
    Latest {
        /// How many.
        count: usize,
        /// Each one's buffer.
        buffer: usize,
    },
}

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
        Self::shaped(listed, events, pod_at)
    }

    /// Pod `i` listed at version `listed` on node `i % 1000`; event `k` on pod
    /// `(k * 7919) % listed`, moved to the next node; `at(i, version, node)` makes each pod.
    fn shaped(listed: usize, events: usize, at: impl Fn(usize, u64, usize) -> Pod) -> Self {
        let list = (0..listed)
            .map(|i| Arc::new(at(i, listed as u64, i % 1000)))
            .collect();
        let events = (0..events)
            .map(|k| {
                let i = (k * 7919) % listed;
                let rv = (listed + k + 1) as u64;
                let node = (i + 1 + k / listed) % 1000;
                (Arc::new(at(i, rv, node)), rv.to_string())
            })
            .collect();
        Self { list, events }
    }

    /// The same shape of run on realistic pods ([`crate::realistic`]): pod `i` listed at
    /// version `listed`, event `k` on pod `(k * 7919) % listed`, moved to the next node.
    pub fn realistic(listed: usize, events: usize) -> Self {
        let at = |i: usize, rv: u64, node: usize| {
            let mut pod = crate::realistic::realistic_pod(i);
            pod.metadata.resource_version = Some(rv.to_string());
            if let Some(spec) = pod.spec.as_mut() {
                spec.node_name = Some(format!("worker-{node}"));
            }
            pod
        };
        Self::shaped(listed, events, at)
    }

    /// A copy with objects of its own (no `Arc` shared with `self`).
    pub fn deep_copy(&self) -> Self {
        let copy = |p: &Arc<Pod>| Arc::new(Pod::clone(p));
        Self {
            list: self.list.iter().map(copy).collect(),
            events: self
                .events
                .iter()
                .map(|(p, rv)| (copy(p), rv.clone()))
                .collect(),
        }
    }

    /// The final resource version of every pod, by pod number: its last event's, or the
    /// list's if no event touches it.
    pub fn last_versions(&self) -> Vec<u64> {
        let mut last = vec![self.list.len() as u64; self.list.len()];
        for (k, (_, rv)) in self.events.iter().enumerate() {
            last[(k * 7919) % self.list.len()] = rv.parse().expect("a number");
        }
        last
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
    informer_in(source, handlers, None, |informer| informer)
}

/// [`informer()`], adjusted by `configure` before the handlers are added, each handler with a
/// buffer of [`NO_COALESCING`], as W-INF's: a handler that falls behind a burst of events
/// still counts every one (with the default buffer it would coalesce them, and never reach its
/// count).
pub fn informer_with<L: ListerWatcher<Pod> + 'static>(
    source: L,
    handlers: usize,
    configure: impl FnOnce(InformerBuilder<Pod>) -> InformerBuilder<Pod>,
) -> (Arc<SharedIndexInformer<Pod>>, Vec<Arc<Counter>>) {
    let handler = HandlerOptions::new().buffer(NO_COALESCING);
    built(source, handlers, handler, None, configure)
}

/// [`informer()`], on the cache `cache` builds (the default `ThreadSafeStore` if `None`),
/// adjusted by `configure` before the handlers are added.
pub fn informer_in<L: ListerWatcher<Pod> + 'static>(
    source: L,
    handlers: usize,
    cache: Option<informer_factory::CacheBuilder<Pod>>,
    configure: impl FnOnce(InformerBuilder<Pod>) -> InformerBuilder<Pod>,
) -> (Arc<SharedIndexInformer<Pod>>, Vec<Arc<Counter>>) {
    built(source, handlers, HandlerOptions::new(), cache, configure)
}

fn built<L: ListerWatcher<Pod> + 'static>(
    source: L,
    handlers: usize,
    handler: HandlerOptions<Pod>,
    cache: Option<informer_factory::CacheBuilder<Pod>>,
    configure: impl FnOnce(InformerBuilder<Pod>) -> InformerBuilder<Pod>,
) -> (Arc<SharedIndexInformer<Pod>>, Vec<Arc<Counter>>) {
    let mut builder = SharedIndexInformer::builder(source, identity());
    if let Some(cache) = cache {
        builder = builder.cache(cache(key_func(), indexers()));
    }
    let informer = Arc::new(configure(builder).build());
    let counters: Vec<Arc<Counter>> = (0..handlers).map(|_| Arc::default()).collect();
    for c in &counters {
        informer
            .add_event_handler(Arc::clone(c), handler.clone())
            .expect("handler before start");
    }
    (informer, counters)
}

/// The scripted source of W-INF: the list, then every event, then a watch that hangs.
fn source(data: &Data) -> FakeListerWatcher<Pod> {
    let source = FakeListerWatcher::new();
    source.push_list(ListPage::new(
        data.list.clone(),
        data.list.len().to_string(),
    ));
    let mut steps: Vec<WatchStep<Pod>> = data
        .events
        .iter()
        .map(|(p, rv)| WatchStep::Event(WatchEvent::modified(Arc::clone(p), rv.clone())))
        .collect();
    steps.push(WatchStep::Hang);
    source.push_watch(steps);
    source
}

/// Our side with `handlers` counting handlers, each with a buffer of [`NO_COALESCING`]: builds
/// the source (not timed), then times `run` → every counter has seen it all.
pub fn ours(rt: &Runtime, data: &Data, handlers: usize) -> Duration {
    ours_with(
        rt,
        data,
        Consumers::Handlers {
            count: handlers,
            buffer: NO_COALESCING,
        },
    )
    .elapsed
}

/// [`ours`] on the queue `queue` instead of the default one.
pub fn ours_on(rt: &Runtime, data: &Data, handlers: usize, queue: QueueKind<Pod>) -> Duration {
    let consumers = Consumers::Handlers {
        count: handlers,
        buffer: NO_COALESCING,
    };
    ours_transformed(rt, data, consumers, None, None, Some(queue)).elapsed
}

/// One run of our side.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Run {
    /// From `run` until every consumer was done.
    pub elapsed: Duration,
    /// Notifications the consumers handled, all of them together.
    pub delivered: usize,
    /// Notifications taken into per-key coalescing, all consumers together.
    pub coalesced: usize,
}

/// Our side with `consumers`: builds the source and registers the consumers (not timed), then
/// times `run` → every consumer is done (see [`Consumers`]).
///
/// Panics if a consumer that must count exactly coalesced (its buffer was too small).
pub fn ours_with(rt: &Runtime, data: &Data, consumers: Consumers) -> Run {
    ours_observed(rt, data, consumers, None)
}

/// [`ours_with`], the reflector telling `observer` of every list, watch and event (a metrics
/// layer's hook; `None`: no observer, as in [`ours_with`]).
pub fn ours_observed(
    rt: &Runtime,
    data: &Data,
    consumers: Consumers,
    observer: Option<Arc<dyn ReflectorObserver>>,
) -> Run {
    ours_transformed(rt, data, consumers, observer, None, None)
}

/// [`ours_observed`] with `transform` set on the informer (applied to every object as it
/// enters the queue, inside the clock), on `queue` (`None`: the default queue).
pub fn ours_transformed(
    rt: &Runtime,
    data: &Data,
    consumers: Consumers,
    observer: Option<Arc<dyn ReflectorObserver>>,
    transform: Option<informer_fifo::TransformFunc<Pod>>,
    queue: Option<QueueKind<Pod>>,
) -> Run {
    let (listed, events) = (data.list.len(), data.events.len());
    let source = match &transform {
        // The objects reach the transform unshared, as a decoder's do (`strip_managed_fields`
        // then moves each object instead of copying it): the source gets copies of its own.
        Some(_) => source(&data.deep_copy()),
        None => source(data),
    };
    let mut builder = SharedIndexInformer::builder(source, identity());
    if let Some(observer) = observer {
        builder = builder.reflector_config(move |r| r.with_observer(observer));
    }
    if let Some(transform) = transform {
        builder = builder.transform(transform);
    }
    if let Some(queue) = queue {
        builder = builder.queue(queue);
    }
    let informer = Arc::new(builder.build());
    let options = |buffer| HandlerOptions::new().buffer(buffer);
    let (elapsed, registrations) = match consumers {
        Consumers::Handlers { count, buffer } => {
            let counters: Vec<Arc<Counter>> = (0..count).map(|_| Arc::default()).collect();
            let registrations: Vec<HandlerRegistration> = counters
                .iter()
                .map(|c| {
                    informer
                        .add_event_handler(Arc::clone(c), options(buffer))
                        .expect("handler before start")
                })
                .collect();
            let elapsed = timed_run(rt, &informer, async {
                while !counters.iter().all(|c| c.saw(listed, events)) {
                    assert_exact(&registrations);
                    tokio::time::sleep(Duration::from_micros(200)).await;
                }
            });
            (elapsed, registrations)
        }
        Consumers::Subscribers { count, buffer } => {
            let subscriptions = subscribe(&informer, count, buffer);
            let registrations: Vec<HandlerRegistration> = subscriptions
                .iter()
                .map(|s| s.registration().clone())
                .collect();
            let elapsed = timed_run(rt, &informer, async {
                let readers: Vec<_> = subscriptions
                    .into_iter()
                    .map(|s| tokio::spawn(count_events(s, listed, events)))
                    .collect();
                let mut all = pin!(futures::future::join_all(readers));
                loop {
                    tokio::select! {
                        done = &mut all => {
                            for r in done {
                                assert_eq!(r.expect("subscriber"), (listed, events));
                            }
                            break;
                        }
                        () = tokio::time::sleep(Duration::from_millis(5)) => {
                            assert_exact(&registrations);
                        }
                    }
                }
            });
            (elapsed, registrations)
        }
        Consumers::Latest { count, buffer } => {
            let subscriptions = subscribe(&informer, count, buffer);
            let registrations: Vec<HandlerRegistration> = subscriptions
                .iter()
                .map(|s| s.registration().clone())
                .collect();
            let last = Arc::new(data.last_versions());
            let elapsed = timed_run(rt, &informer, async {
                let readers: Vec<_> = subscriptions
                    .into_iter()
                    .map(|s| tokio::spawn(read_until_latest(s, Arc::clone(&last))))
                    .collect();
                for r in readers {
                    r.await.expect("subscriber");
                }
            });
            (elapsed, registrations)
        }
    };
    Run {
        elapsed,
        delivered: registrations
            .iter()
            .map(HandlerRegistration::delivered)
            .sum(),
        coalesced: registrations
            .iter()
            .map(HandlerRegistration::coalesced)
            .sum(),
    }
}

/// Runs `informer` on `rt` and times its start → `done`.
fn timed_run(
    rt: &Runtime,
    informer: &Arc<SharedIndexInformer<Pod>>,
    done: impl Future<Output = ()>,
) -> Duration {
    rt.block_on(async {
        let stop = CancellationToken::new();
        let started = Instant::now();
        let task = tokio::spawn({
            let (informer, stop) = (Arc::clone(informer), stop.clone());
            async move { informer.run(stop).await }
        });
        done.await;
        let elapsed = started.elapsed();
        stop.cancel();
        task.await.expect("informer task").expect("informer run");
        elapsed
    })
}

fn subscribe(
    informer: &SharedIndexInformer<Pod>,
    count: usize,
    buffer: usize,
) -> Vec<Subscription<Pod>> {
    (0..count)
        .map(|_| {
            informer
                .subscribe(HandlerOptions::new().buffer(buffer))
                .expect("subscription before start")
        })
        .collect()
}

/// An exact count is only meaningful if no consumer coalesced.
fn assert_exact(registrations: &[HandlerRegistration]) {
    for r in registrations {
        assert_eq!(
            r.coalesced(),
            0,
            "a consumer coalesced: its buffer is too small for an exact count"
        );
    }
}

/// Reads `subscription` until it has yielded `adds` adds and `updates` updates; returns them.
pub async fn count_events(
    mut subscription: Subscription<Pod>,
    adds: usize,
    updates: usize,
) -> (usize, usize) {
    let (mut a, mut u) = (0, 0);
    while a < adds || u < updates {
        match subscription.next().await {
            Some(InformerEvent::Add { .. }) => a += 1,
            Some(InformerEvent::Update { .. }) => u += 1,
            Some(_) => {}
            None => break,
        }
    }
    (a, u)
}

/// Reads `subscription` until, for every pod `i`, it has yielded an event whose object is at
/// `last[i]`, the pod's final resource version. Returns the events read.
pub async fn read_until_latest(mut subscription: Subscription<Pod>, last: Arc<Vec<u64>>) -> usize {
    let mut missing = last.len();
    let mut read = 0;
    while missing > 0 {
        let Some(event) = subscription.next().await else {
            break;
        };
        read += 1;
        let meta = &event.object().metadata;
        let pod = meta
            .name
            .as_deref()
            .and_then(|n| n.strip_prefix("pod-"))
            .and_then(|i| i.parse::<usize>().ok());
        let rv = meta
            .resource_version
            .as_deref()
            .and_then(|rv| rv.parse::<u64>().ok());
        if let (Some(i), Some(rv)) = (pod, rv)
            && last.get(i) == Some(&rv)
        {
            missing -= 1;
        }
    }
    assert_eq!(missing, 0, "the informer stopped first");
    read
}

/// kube-runtime with `subscribers` subscribers: times the reflector's start → every subscriber
/// has received every listed object and every event.
pub fn kube_runtime_subscribers(
    rt: &Runtime,
    events: Vec<Event<Pod>>,
    subscribers: usize,
) -> Duration {
    kube_runtime_modified(rt, events, subscribers, |_| {})
}

/// [`kube_runtime_subscribers`] with `modify` applied to every object on the watcher's stream
/// before the reflector stores it (kube-runtime's `WatchStreamExt::modify`, its way to strip
/// fields), inside the clock.
pub fn kube_runtime_modified(
    rt: &Runtime,
    events: Vec<Event<Pod>>,
    subscribers: usize,
    modify: fn(&mut Pod),
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
        let stream = futures::stream::iter(events.into_iter().map(Ok)).modify(modify);
        let driver = tokio::spawn(reflector::reflector(writer, stream).for_each(|_| async {}));
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
