//! W-HTTP: W-INF through kube-client against the in-process API server on loopback (JSON over
//! HTTP): the same 50,000 pods listed, then the same 100,000 MODIFIED events, decoded from the
//! wire.
//!
//! How the events get there: the server is filled with the listed pods before the clock starts.
//! The informer lists them; its first watch request is held at a gate in the client (a tower
//! layer, [`WatchGate`], the same for both sides) until the list has reached every handler. The
//! clock stops there, the 100,000 updates are written into the server (not timed), then the
//! gate opens and the clock runs again until every handler has seen every event: the server
//! replays them from its history to the watch, as fast as the client reads. A figure is the
//! list time plus the watch time.
//!
//! * **Ours**: a `SharedIndexInformer` (DeltaFifo, the two indexes) over a `KubeListerWatcher`
//!   (kube `Api::<Pod>::all`, JSON only), 4 counting handlers whose buffers hold the whole
//!   workload (as W-INF's: none coalesces, so each counts every event), client-go's paging
//!   (pages of 500).
//! * **kube-runtime**: `watcher(Api::<Pod>::all, Config::default())` (pages of 500) into
//!   `reflector` over a shared store with 4 subscribers counting what they receive (see
//!   [`w_inf`]).

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use futures::StreamExt;
use informer_apiserver::{ApiServer, Config};
use informer_kube::KubeListerWatcher;
use k8s_openapi::api::core::v1::Pod;
use kube::Api;
use kube::client::ClientBuilder;
use kube_runtime::WatchStreamExt;
use kube_runtime::reflector::{self, store};
use kube_runtime::watcher;
use tokio::runtime::Runtime;
use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;

use crate::realistic::ManagedFields;
use crate::replay::{Encoded, ReplayServer};
use crate::w_inf::{self, Counter, Data, SUBSCRIBER_BUFFER};

/// The two phases of one W-HTTP run.
#[derive(Debug, Clone, Copy)]
pub struct Run {
    /// From start until every handler has every listed pod.
    pub list: Duration,
    /// From the gate's opening until every handler has every event.
    pub watch: Duration,
}

impl Run {
    /// List and watch.
    pub fn total(&self) -> Duration {
        self.list + self.watch
    }
}

/// Holds watch requests until opened; says whether one has arrived. Cloning shares the gate.
#[derive(Debug, Clone)]
pub struct WatchGate(Arc<GateState>);

#[derive(Debug)]
struct GateState {
    reached: AtomicBool,
    open: Semaphore,
}

impl Default for WatchGate {
    fn default() -> Self {
        Self(Arc::new(GateState {
            reached: AtomicBool::new(false),
            open: Semaphore::new(0),
        }))
    }
}

impl WatchGate {
    /// Whether a watch request has arrived at the gate.
    pub fn reached(&self) -> bool {
        self.0.reached.load(Ordering::Acquire)
    }

    /// Lets every watch request through, now and later.
    pub fn open(&self) {
        self.0.open.add_permits(Semaphore::MAX_PERMITS / 2);
    }

    async fn pass(self) {
        self.0.reached.store(true, Ordering::Release);
        drop(
            self.0
                .open
                .acquire()
                .await
                .expect("the gate is never closed"),
        );
    }
}

impl<S> tower::Layer<S> for WatchGate {
    type Service = Gated<S>;

    fn layer(&self, inner: S) -> Gated<S> {
        Gated {
            inner,
            gate: self.clone(),
        }
    }
}

/// The service of a [`WatchGate`].
#[derive(Debug)]
pub struct Gated<S> {
    inner: S,
    gate: WatchGate,
}

/// Whether a request is a watch (`watch=true` or `watch=1` in its query).
pub fn is_watch<B>(req: &http::Request<B>) -> bool {
    req.uri()
        .query()
        .is_some_and(|q| q.split('&').any(|kv| kv == "watch=true" || kv == "watch=1"))
}

impl<S, B> tower::Service<http::Request<B>> for Gated<S>
where
    S: tower::Service<http::Request<B>>,
    S::Future: Send + 'static,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = Pin<Box<dyn Future<Output = Result<S::Response, S::Error>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), S::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: http::Request<B>) -> Self::Future {
        let watch = is_watch(&req);
        // The inner future sends nothing until it is polled.
        let response = self.inner.call(req);
        let gate = self.gate.clone();
        Box::pin(async move {
            if watch {
                gate.pass().await;
            }
            response.await
        })
    }
}

/// An API server holding the listed pods of `data`, with room in its history for the events.
pub async fn server(data: &Data) -> ApiServer {
    let config = Config {
        history_size: 2 * (data.list.len() + data.events.len()),
        watch_buffer: 2 * data.events.len(),
        ..Config::default().register::<Pod>()
    };
    let server = ApiServer::start(config).await.expect("server starts");
    for p in &data.list {
        let mut p = Pod::clone(p);
        p.metadata.resource_version = None;
        server.create(&p).expect("create");
    }
    server
}

/// Writes the events of `data` into the server as updates.
pub fn write_events(server: &ApiServer, data: &Data) {
    for (p, _) in &data.events {
        let mut p = Pod::clone(p);
        p.metadata.resource_version = None;
        server.update(&p).expect("update");
    }
}

/// A kube client for `server` whose watch requests pass `gate`.
pub fn client(server: &ApiServer, gate: &WatchGate) -> kube::Client {
    client_for(&server.url(), gate)
}

/// A kube client for the server at `url` whose watch requests pass `gate`.
pub fn client_for(url: &str, gate: &WatchGate) -> kube::Client {
    let mut config = kube::Config::new(url.parse().expect("server URL"));
    config.default_retry = false;
    ClientBuilder::try_from(config)
        .expect("client config")
        .with_layer(gate)
        .build()
}

/// Where a run's responses come from.
#[derive(Debug, Clone, Copy)]
pub enum Backend<'a> {
    /// The simulator, encoding each response as it serves it (the figure includes it).
    Simulator,
    /// Pre-encoded bytes served from memory (the figure is the client's; see [`replay`](crate::replay)).
    Replay(&'a Arc<Encoded>),
}

enum Running {
    Simulator(ApiServer),
    Replay(ReplayServer),
}

/// Times one side: `start` begins the informer (given the client) and returns its counters
/// (one per handler: `adds` counts listed objects, `updates` events) and a stop function.
async fn timed<F, Fut>(data: &Data, backend: Backend<'_>, start: F) -> Run
where
    F: FnOnce(kube::Client) -> Fut,
    Fut: Future<
        Output = (
            Vec<Arc<Counter>>,
            Box<dyn FnOnce() -> Pin<Box<dyn Future<Output = ()>>>>,
        ),
    >,
{
    let (listed, events) = (data.list.len(), data.events.len());
    let server = match backend {
        Backend::Simulator => Running::Simulator(server(data).await),
        Backend::Replay(encoded) => Running::Replay(ReplayServer::start(Arc::clone(encoded)).await),
    };
    let gate = WatchGate::default();
    let client = match &server {
        Running::Simulator(s) => client(s, &gate),
        Running::Replay(s) => client_for(s.url(), &gate),
    };

    let started = Instant::now();
    let (counters, stop) = start(client).await;
    wait_for(&counters, "list", || {
        gate.reached() && counters.iter().all(|c| c.saw(listed, 0))
    })
    .await;
    let list = started.elapsed();

    if let Running::Simulator(server) = &server {
        write_events(server, data);
    }

    let started = Instant::now();
    gate.open();
    wait_for(&counters, "watch", || {
        counters.iter().all(|c| c.saw(listed, events))
    })
    .await;
    let watch = started.elapsed();
    stop().await;
    match server {
        Running::Simulator(s) => s.shutdown().await,
        Running::Replay(s) => s.shutdown().await,
    }
    Run { list, watch }
}

/// How long a run may go without a handler counting anything more before it is stalled.
const STALLED_AFTER: Duration = Duration::from_secs(30);

/// Waits until `done`. Panics, with what each handler counted, once they have counted nothing
/// more for [`STALLED_AFTER`]: the counts are exact or the run is broken (a handler whose buffer
/// overflowed coalesces updates, with many events per pod, and never reaches its count).
async fn wait_for(counters: &[Arc<Counter>], phase: &str, done: impl Fn() -> bool) {
    // Counts only grow: their sum tells progress, with nothing allocated while the clock runs.
    let total = || -> usize {
        counters
            .iter()
            .map(|c| c.adds.load(Ordering::Relaxed) + c.updates.load(Ordering::Relaxed))
            .sum()
    };
    let (mut last, mut since) = (total(), Instant::now());
    while !done() {
        tokio::time::sleep(Duration::from_micros(200)).await;
        let now = total();
        if now != last {
            (last, since) = (now, Instant::now());
        } else if since.elapsed() >= STALLED_AFTER {
            let each: Vec<_> = counters
                .iter()
                .map(|c| {
                    (
                        c.adds.load(Ordering::Relaxed),
                        c.updates.load(Ordering::Relaxed),
                    )
                })
                .collect();
            panic!(
                "W-HTTP stalled in its {phase} phase: nothing counted for {STALLED_AFTER:?}; \
                 (adds, updates) per handler: {each:?}"
            );
        }
    }
}

/// Our side with `handlers` counting handlers, the managed fields kept, stripped by
/// `strip_managed_fields` as the informer's transform, or left out by the decoder.
pub fn ours(
    rt: &Runtime,
    data: &Data,
    handlers: usize,
    backend: Backend<'_>,
    managed: ManagedFields,
) -> Run {
    ours_reading(rt, data, handlers, backend, managed, false)
}

/// [`ours`], asking for protobuf when `protobuf` (what the adapter does by default): a replay
/// server with [`Encoded::with_protobuf`] then answers protobuf.
pub fn ours_reading(
    rt: &Runtime,
    data: &Data,
    handlers: usize,
    backend: Backend<'_>,
    managed: ManagedFields,
    protobuf: bool,
) -> Run {
    rt.block_on(timed(data, backend, |client| async move {
        // JSON over HTTP, as kube-runtime reads it, unless protobuf is asked for: the JSON
        // figure compares the two clients on the same bytes (the simulator's protobuf encoder
        // is not a server's, so protobuf is measured against the replay server only).
        let lw = KubeListerWatcher::new(Api::<Pod>::all(client));
        let lw = if protobuf { lw } else { lw.json_only() };
        let lw = if managed == ManagedFields::Skipped {
            lw.without_managed_fields()
        } else {
            lw
        };
        // A list then a watch, as kube-runtime reads (and all the replay server serves).
        let (informer, counters) = w_inf::informer_with(lw, handlers, |b| {
            let b = b.streaming_list(false);
            if managed == ManagedFields::Stripped {
                b.transform(informer_kube::strip_managed_fields::<Pod>())
            } else {
                b
            }
        });
        let token = CancellationToken::new();
        let task = tokio::spawn({
            let (informer, token) = (Arc::clone(&informer), token.clone());
            async move { informer.run(token).await }
        });
        let stop: Box<dyn FnOnce() -> Pin<Box<dyn Future<Output = ()>>>> = Box::new(move || {
            Box::pin(async move {
                token.cancel();
                task.await.expect("informer task").expect("informer run");
            })
        });
        (counters, stop)
    }))
}

/// kube-runtime's side with `subscribers` subscribers; with `strip`, the managed fields are
/// cleared in the watcher's stream (`WatchStreamExt::modify`) before the store keeps them.
pub fn kube_runtime(
    rt: &Runtime,
    data: &Data,
    subscribers: usize,
    backend: Backend<'_>,
    strip: bool,
) -> Run {
    let listed = data.list.len();
    rt.block_on(timed(data, backend, |client| async move {
        let (_reader, writer) = store::store_shared::<Pod>(SUBSCRIBER_BUFFER);
        let counters: Vec<Arc<Counter>> = (0..subscribers).map(|_| Arc::default()).collect();
        let readers: Vec<_> = counters
            .iter()
            .map(|c| {
                let handle = writer.subscribe().expect("a shared store");
                tokio::spawn(count_into(handle, Arc::clone(c), listed))
            })
            .collect();
        let stream = watcher::watcher(Api::<Pod>::all(client), watcher::Config::default()).modify(
            move |p| {
                if strip {
                    p.metadata.managed_fields = None;
                }
            },
        );
        let driver = tokio::spawn(reflector::reflector(writer, stream).for_each(|_| async {}));
        let mut tasks = readers;
        tasks.push(driver);
        let stop: Box<dyn FnOnce() -> Pin<Box<dyn Future<Output = ()>>>> =
            Box::new(move || Box::pin(end_tasks(tasks)));
        (counters, stop)
    }))
}

/// Aborts `tasks` and returns once every one of them has ended (its future dropped); a task's
/// panic is passed on.
///
/// Aborting alone is not enough before the server goes away: an abort takes effect only when
/// the task's current poll returns, and kube-runtime's watcher (no backoff configured) that finds
/// its server gone retries at once, every error ready without waiting, so a poll caught in that
/// loop never returns. The task then holds a worker forever, and the runtime's shutdown (the
/// process's exit) waits for it.
pub async fn end_tasks(tasks: Vec<tokio::task::JoinHandle<()>>) {
    for task in &tasks {
        task.abort();
    }
    for task in tasks {
        if let Err(e) = task.await
            && e.is_panic()
        {
            std::panic::resume_unwind(e.into_panic());
        }
    }
}

/// Counts what a subscriber receives: the first `listed` as adds, the rest as updates.
async fn count_into(handle: reflector::ReflectHandle<Pod>, counter: Arc<Counter>, listed: usize) {
    let mut handle = std::pin::pin!(handle);
    let mut n = 0;
    while handle.next().await.is_some() {
        let field = if n < listed {
            &counter.adds
        } else {
            &counter.updates
        };
        field.fetch_add(1, Ordering::Relaxed);
        n += 1;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn current_thread() -> Runtime {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("a runtime")
    }

    #[test]
    fn end_tasks_returns_only_once_every_task_has_ended() {
        let rt = current_thread();
        let alive = Arc::new(());
        let ended = rt.block_on(async {
            let tasks: Vec<_> = (0..3)
                .map(|_| {
                    let alive = Arc::clone(&alive);
                    tokio::spawn(async move {
                        let _alive = alive;
                        std::future::pending::<()>().await;
                    })
                })
                .collect();
            // Let every task start and hold its clone.
            tokio::task::yield_now().await;
            assert_eq!(Arc::strong_count(&alive), 4);
            end_tasks(tasks).await;
            // Read as end_tasks returns: an abort not yet carried out would still hold a clone.
            Arc::strong_count(&alive)
        });
        assert_eq!(ended, 1, "a task outlived end_tasks");
    }

    #[test]
    fn end_tasks_passes_a_tasks_panic_on() {
        let rt = current_thread();
        let caught = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            rt.block_on(async {
                let task = tokio::spawn(async { panic!("the task's own panic") });
                tokio::task::yield_now().await;
                end_tasks(vec![task]).await;
            })
        }))
        .expect_err("the panic is passed on");
        assert_eq!(caught.downcast_ref::<&str>(), Some(&"the task's own panic"));
    }
}
