//! The reflector's share of W-INF / W-HTTP: list 50,000 pods at resource version 50000, then
//! apply 100,000 MODIFIED events (event `k` on pod `(k * 7919) % 50000`), into a ThreadSafeStore
//! with the `namespace` and `node` indexes.
//!
//! * `reflector/in_memory`: through the scripted in-memory `ListerWatcher` — our code only
//!   (reflector loop + store writes), no decoding; `in_memory_no_indexes` without the indexes,
//!   and `in_memory_null_store` into a store that keeps nothing: the reflector's own cost.
//! * `decode/*`: what kube-client does per response before the reflector sees anything: a
//!   50,000-pod list body and 100,000 watch lines decoded with serde_json into k8s-openapi pods.
//!
//! * `http/*` (W-HTTP's list-and-watch part): the reflector through `KubeListerWatcher` and
//!   kube-client against the in-process API server on loopback. `http/list_50k` times the list
//!   (request, encode, transfer, decode, replace); `http/watch_100k` times 100,000 MODIFIED
//!   events made before the watch starts, replayed from the server's history (encode, transfer,
//!   decode, apply), from the watch request to the last event applied.
//!
//! Together they say where the time of the HTTP path goes (decode vs our code).

use std::future::Future;
use std::hint::black_box;
use std::sync::Arc;
use std::time::{Duration, Instant};

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use informer_apiserver::{ApiServer, Config};
use informer_benches::workload::{indexers, key_func, pod, pod_at};
use informer_kube::KubeListerWatcher;
use informer_reflector::{
    FakeListerWatcher, ListPage, ListParams, ListerWatcher, Reflector, WatchEvent, WatchParams,
    WatchStep, WatchStream,
};
use informer_store::{Indexers, ReflectorStore, Store, ThreadSafeStore};
use k8s_openapi::api::core::v1::Pod;
use kube::Api;
use kube::core::{ObjectList, WatchEvent as KubeWatchEvent};
use tokio_util::sync::CancellationToken;

const PODS: usize = 50_000;
const EVENTS: usize = 100_000;

fn list() -> Vec<Arc<Pod>> {
    (0..PODS)
        .map(|i| Arc::new(pod_at(i, i as u64 + 1, i % 1000)))
        .collect()
}

/// Event `k`: pod `(k * 7919) % 50000` at resource version `50001 + k`, moved to another node.
fn modified(k: usize) -> Pod {
    let i = (k * 7919) % PODS;
    pod_at(i, (PODS + 1 + k) as u64, (i + k) % 1000)
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .unwrap()
}

/// A store that takes every write and keeps nothing: what is left is the reflector's own cost.
struct NullStore;

impl ReflectorStore<Pod> for NullStore {
    type Error = informer_store::Error;

    fn add(&self, obj: Arc<Pod>) -> informer_store::Result<()> {
        black_box(obj);
        Ok(())
    }
    fn update(&self, obj: Arc<Pod>) -> informer_store::Result<()> {
        black_box(obj);
        Ok(())
    }
    fn delete(&self, obj: Arc<Pod>) -> informer_store::Result<()> {
        black_box(obj);
        Ok(())
    }
    fn replace(&self, list: Vec<Arc<Pod>>, _rv: String) -> informer_store::Result<()> {
        black_box(list);
        Ok(())
    }
    fn resync(&self) -> informer_store::Result<()> {
        Ok(())
    }
}

#[derive(Clone, Copy)]
enum Sink {
    Indexed,
    NoIndexes,
    Null,
}

/// One full run: list, then every event; returns the time from start to the last event applied.
fn run_in_memory(listed: &[Arc<Pod>], events: &[Arc<Pod>], sink: Sink) -> Duration {
    match sink {
        Sink::Indexed => run_into(
            listed,
            events,
            ThreadSafeStore::with_indexers(key_func(), indexers()),
        ),
        Sink::NoIndexes => run_into(
            listed,
            events,
            ThreadSafeStore::with_indexers(key_func(), Indexers::new()),
        ),
        Sink::Null => run_into(listed, events, NullStore),
    }
}

fn run_into<S: ReflectorStore<Pod> + 'static>(
    listed: &[Arc<Pod>],
    events: &[Arc<Pod>],
    store: S,
) -> Duration {
    let fake = Arc::new(FakeListerWatcher::new());
    fake.push_list(ListPage::new(listed.to_vec(), PODS.to_string()));
    let mut steps: Vec<WatchStep<Pod>> = events
        .iter()
        .enumerate()
        .map(|(k, p)| WatchStep::Event(WatchEvent::modified(p.clone(), (PODS + 1 + k).to_string())))
        .collect();
    steps.push(WatchStep::Hang);
    fake.push_watch(steps);
    let store = Arc::new(store);
    let target = (PODS + EVENTS).to_string();
    let reflector = Arc::new(Reflector::new(fake, store.clone()).with_seed(1));
    runtime().block_on(async move {
        let stop = CancellationToken::new();
        let start = Instant::now();
        let task = tokio::spawn({
            let (reflector, stop) = (reflector.clone(), stop.clone());
            async move { reflector.run(stop).await }
        });
        while reflector.last_sync_resource_version() != target {
            tokio::task::yield_now().await;
        }
        let elapsed = start.elapsed();
        stop.cancel();
        task.await.unwrap();
        black_box(store);
        elapsed
    })
}

fn reflector_in_memory(c: &mut Criterion) {
    let listed = list();
    let events: Vec<Arc<Pod>> = (0..EVENTS).map(|k| Arc::new(modified(k))).collect();
    let mut g = c.benchmark_group("reflector");
    g.sample_size(10);
    g.throughput(Throughput::Elements((PODS + EVENTS) as u64));
    for (name, sink) in [
        ("in_memory", Sink::Indexed),
        ("in_memory_no_indexes", Sink::NoIndexes),
        ("in_memory_null_store", Sink::Null),
    ] {
        g.bench_function(name, |b| {
            b.iter_custom(|iters| {
                (0..iters)
                    .map(|_| run_in_memory(&listed, &events, sink))
                    .sum()
            })
        });
    }
    g.finish();
}

fn decode(c: &mut Criterion) {
    let list_body = serde_json::to_string(&serde_json::json!({
        "kind": "PodList",
        "apiVersion": "v1",
        "metadata": { "resourceVersion": PODS.to_string() },
        "items": (0..PODS).map(pod).collect::<Vec<_>>(),
    }))
    .unwrap();
    let lines: Vec<String> = (0..EVENTS)
        .map(|k| {
            serde_json::to_string(&serde_json::json!({ "type": "MODIFIED", "object": modified(k) }))
                .unwrap()
        })
        .collect();

    let mut g = c.benchmark_group("decode");
    g.sample_size(10);
    g.throughput(Throughput::Elements(PODS as u64));
    g.bench_function("list_50k_pods", |b| {
        b.iter(|| black_box(serde_json::from_str::<ObjectList<Pod>>(&list_body).unwrap()))
    });
    g.throughput(Throughput::Elements(EVENTS as u64));
    g.bench_function("watch_100k_lines", |b| {
        b.iter(|| {
            for line in &lines {
                black_box(serde_json::from_str::<KubeWatchEvent<Pod>>(line).unwrap());
            }
        })
    });
    g.finish();
}

/// A `ListerWatcher` whose first watch waits for a gate, and that says when it got there.
struct Gated<L> {
    inner: L,
    reached: Arc<tokio::sync::Notify>,
    open: Arc<tokio::sync::Semaphore>,
}

impl<L: ListerWatcher<Pod>> ListerWatcher<Pod> for Gated<L> {
    fn list(
        &self,
        params: &ListParams,
    ) -> impl Future<Output = Result<ListPage<Pod>, informer_reflector::Error>> + Send {
        self.inner.list(params)
    }

    fn watch(
        &self,
        params: &WatchParams,
    ) -> impl Future<Output = Result<WatchStream<Pod>, informer_reflector::Error>> + Send {
        let (reached, open) = (self.reached.clone(), self.open.clone());
        let watch = self.inner.watch(params);
        async move {
            reached.notify_one();
            drop(open.acquire().await);
            watch.await
        }
    }
    fn supports_streaming_list(&self) -> bool {
        self.inner.supports_streaming_list()
    }
}

/// One W-HTTP run: `(list time, watch time)`.
fn run_http() -> (Duration, Duration) {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let config = Config {
            history_size: 2 * EVENTS,
            watch_buffer: 2 * EVENTS,
            ..Config::default().register::<Pod>()
        };
        let server = ApiServer::start(config).await.unwrap();
        for i in 0..PODS {
            let mut p = pod(i);
            p.metadata.resource_version = None;
            server.create(&p).unwrap();
        }
        let mut kube_config = kube::Config::new(server.url().parse().unwrap());
        kube_config.default_retry = false;
        let client = kube::Client::try_from(kube_config).unwrap();
        let reached = Arc::new(tokio::sync::Notify::new());
        let open = Arc::new(tokio::sync::Semaphore::new(0));
        let lister_watcher = Gated {
            inner: KubeListerWatcher::new(Api::<Pod>::all(client)),
            reached: reached.clone(),
            open: open.clone(),
        };
        let store = Arc::new(ThreadSafeStore::with_indexers(key_func(), indexers()));
        let reflector = Arc::new(
            Reflector::new(lister_watcher, store.clone())
                .with_seed(1)
                .with_min_watch_timeout(Duration::from_secs(3600)),
        );
        let stop = CancellationToken::new();

        let start = Instant::now();
        let task = tokio::spawn({
            let (reflector, stop) = (reflector.clone(), stop.clone());
            async move { reflector.run(stop).await }
        });
        reached.notified().await;
        let list_time = start.elapsed();
        assert_eq!(store.len(), PODS);

        // 100,000 changes while the reflector waits at its watch.
        for k in 0..EVENTS {
            let mut p = modified(k);
            p.metadata.resource_version = None;
            server.update(&p).unwrap();
        }
        let target = server.resource_version().to_string();

        let start = Instant::now();
        open.add_permits(1);
        while reflector.last_sync_resource_version() != target {
            tokio::time::sleep(Duration::from_micros(200)).await;
        }
        let watch_time = start.elapsed();
        stop.cancel();
        task.await.unwrap();
        server.shutdown().await;
        (list_time, watch_time)
    })
}

fn http(c: &mut Criterion) {
    let mut g = c.benchmark_group("http");
    g.sample_size(10);
    g.throughput(Throughput::Elements(PODS as u64));
    g.bench_function("list_50k", |b| {
        b.iter_custom(|iters| (0..iters).map(|_| run_http().0).sum())
    });
    g.throughput(Throughput::Elements(EVENTS as u64));
    g.bench_function("watch_100k", |b| {
        b.iter_custom(|iters| (0..iters).map(|_| run_http().1).sum())
    });
    g.finish();
}

criterion_group!(benches, reflector_in_memory, decode, http);
criterion_main!(benches);
