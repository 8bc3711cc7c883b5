//! W-INF: a whole shared index informer over an in-memory source — a list of 50,000 pods, then
//! 100,000 MODIFIED events — with the `namespace` and `node` indexes and handlers counting what
//! they see. The figure is the wall time from start until every handler has counted 50,000
//! adds and 100,000 updates. Also run with 1 and 16 handlers (dispatch fan-out).

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use criterion::{Criterion, criterion_group, criterion_main};
use informer_benches::workload::{indexers, key_func, pod_at};
use informer_controller::{ResourceEventHandler, SharedIndexInformer};
use informer_reflector::{FakeListerWatcher, ListPage, WatchEvent, WatchStep};
use k8s_openapi::api::core::v1::Pod;
use tokio_util::sync::CancellationToken;

const PODS: usize = 50_000;
const EVENTS: usize = 100_000;

#[derive(Default)]
struct Counter {
    adds: AtomicUsize,
    updates: AtomicUsize,
}

impl ResourceEventHandler<Pod> for Counter {
    fn on_add(&self, _: &Arc<Pod>, _: bool) {
        self.adds.fetch_add(1, Ordering::Relaxed);
    }
    fn on_update(&self, _: &Arc<Pod>, _: &Arc<Pod>) {
        self.updates.fetch_add(1, Ordering::Relaxed);
    }
}

struct Workload {
    list: Vec<Arc<Pod>>,
    events: Vec<(Arc<Pod>, String)>,
}

fn workload() -> Workload {
    let list = (0..PODS)
        .map(|i| Arc::new(pod_at(i, PODS as u64, i % 1000)))
        .collect();
    let events = (0..EVENTS)
        .map(|k| {
            let i = (k * 7919) % PODS;
            let rv = (PODS + k + 1) as u64;
            (Arc::new(pod_at(i, rv, i % 1000)), rv.to_string())
        })
        .collect();
    Workload { list, events }
}

/// One run: builds the source (not timed), then times start → every handler has seen it all.
fn run_once(rt: &tokio::runtime::Runtime, w: &Workload, handlers: usize) -> Duration {
    let source = FakeListerWatcher::new();
    source.push_list(ListPage::new(w.list.clone(), PODS.to_string()));
    let mut steps: Vec<WatchStep<Pod>> = w
        .events
        .iter()
        .map(|(p, rv)| WatchStep::Event(WatchEvent::modified(Arc::clone(p), rv.clone())))
        .collect();
    steps.push(WatchStep::Hang);
    source.push_watch(steps);
    let informer = Arc::new(SharedIndexInformer::new(
        source,
        key_func(),
        Arc::new(|p: &Pod| p.metadata.resource_version.as_deref()),
        Duration::ZERO,
        indexers(),
    ));
    let counters: Vec<Arc<Counter>> = (0..handlers).map(|_| Arc::default()).collect();
    for c in &counters {
        informer.add_event_handler(Arc::clone(c)).unwrap();
    }
    let done = || {
        counters.iter().all(|c| {
            c.adds.load(Ordering::Relaxed) == PODS && c.updates.load(Ordering::Relaxed) == EVENTS
        })
    };
    rt.block_on(async {
        let stop = CancellationToken::new();
        let started = Instant::now();
        let task = tokio::spawn({
            let (informer, stop) = (Arc::clone(&informer), stop.clone());
            async move { informer.run(stop).await }
        });
        while !done() {
            tokio::time::sleep(Duration::from_micros(200)).await;
        }
        let elapsed = started.elapsed();
        stop.cancel();
        task.await.unwrap().unwrap();
        elapsed
    })
}

fn w_inf(c: &mut Criterion) {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    let w = workload();
    let mut g = c.benchmark_group("w_inf");
    g.sample_size(10);
    for handlers in [4, 1, 16] {
        g.bench_function(format!("{handlers} handlers"), |b| {
            b.iter_custom(|iters| (0..iters).map(|_| run_once(&rt, &w, handlers)).sum())
        });
    }
    g.finish();
}

criterion_group!(benches, w_inf);
criterion_main!(benches);
