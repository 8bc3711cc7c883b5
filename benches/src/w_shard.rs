//! W-SHARD: one controller scaled out to N replicas that split the objects between them by
//! the hash of their UID (`Controller::sharded`), against the simulator on loopback.
//!
//! The simulator holds the objects (100,000 small ConfigMaps, one data key each) and serves
//! `shardSelector`, so each replica lists and watches only its shards. Each replica has its own
//! kube client, its own ConfigMap informer and its own controller with [`CONCURRENCY`]
//! reconciles at once; the shard Leases are in memory (`MemoryLeases`, one handle per replica)
//! with short timings, so that the assignment settles within a second or so.
//!
//! **The reconcile** waits on I/O: it sleeps [`RECONCILE_IO`] (a stand-in for a write to the
//! server), then marks its object reconciled. Each reconcile first waits for a gate, so that
//! the clock can start with every key queued.
//!
//! **What is timed.** The replicas start, the shard assignment settles (every shard owned by
//! one replica, and each replica's cache holding exactly its shards' objects), and every key is
//! queued or held at the gate in its owner's controller; then the gate opens and the clock
//! runs until every object has been reconciled once. The figure is objects over that time,
//! reconciles per second, all replicas together.
//!
//! **Memory.** Once done, each replica is stopped and its informer dropped, and the live heap
//! before and after (the global allocator's count, [`Heap`](crate::mem::Heap)) is that
//! replica's cache: objects, keys, indexes and the informer's own structures.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use informer::SharedIndexInformer;
use informer_apiserver::{ApiServer, Config};
use informer_kube::{KubeIdentity, KubeListerWatcher};
use informer_leaderelection::{MemoryLeases, ShardConfig, ShardRunner, Timings};
use informer_runtime::{Action, Controller, Request};
use informer_workqueue::WorkQueue;
use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

/// Reconciles at once, per replica.
pub const CONCURRENCY: usize = 16;

/// What each reconcile waits for: its I/O.
pub const RECONCILE_IO: Duration = Duration::from_millis(1);

/// Shards of the hash space: enough that 1, 2 and 4 replicas get near-equal parts (the
/// assignment is a rendezvous hash: with 256 shards the largest of 4 replicas gets about 1.1×
/// its quarter).
pub const SHARDS: u32 = 256;

/// The namespaces the objects are spread over.
const NAMESPACES: usize = 100;

/// How long a phase may take before the run gives up.
const BOUND: Duration = Duration::from_secs(120);

/// One run's figures.
#[derive(Debug, Clone, PartialEq)]
pub struct Run {
    /// Replicas.
    pub replicas: usize,
    /// Objects reconciled.
    pub objects: usize,
    /// From the replicas' start to every key queued (the assignment settled and every cache
    /// synced with its shards).
    pub ready: Duration,
    /// From the gate's opening to the last object reconciled.
    pub reconciling: Duration,
    /// Objects cached by each replica.
    pub cached: Vec<usize>,
    /// Each replica's informer heap, bytes (`None`: no counting allocator).
    pub heap: Vec<Option<usize>>,
    /// Whether the server filtered every replica's lists by its shards.
    pub server_filtered: bool,
}

impl Run {
    /// Reconciles per second, all replicas together.
    pub fn rate(&self) -> f64 {
        self.objects as f64 / self.reconciling.as_secs_f64().max(1e-9)
    }

    /// The largest replica's informer heap, bytes.
    pub fn max_heap(&self) -> Option<usize> {
        self.heap
            .iter()
            .copied()
            .collect::<Option<Vec<_>>>()?
            .into_iter()
            .max()
    }
}

/// The objects' names: `cm-<i>` in namespace `ns-<i % 100>`.
fn object(i: usize) -> ConfigMap {
    ConfigMap {
        metadata: ObjectMeta {
            name: Some(format!("cm-{i}")),
            namespace: Some(format!("ns-{}", i % NAMESPACES)),
            ..ObjectMeta::default()
        },
        data: Some([("k".to_owned(), i.to_string())].into()),
        ..ConfigMap::default()
    }
}

/// What the reconciles share: the gate and which objects are done.
struct Shared {
    gate: watch::Receiver<bool>,
    done: Vec<AtomicBool>,
    reconciled: AtomicUsize,
}

async fn reconcile(request: Request<ConfigMap>, shared: Arc<Shared>) -> Result<Action, String> {
    let mut gate = shared.gate.clone();
    gate.wait_for(|open| *open)
        .await
        .map_err(|_| "the gate was dropped".to_owned())?;
    tokio::time::sleep(RECONCILE_IO).await;
    let i: usize = request
        .key
        .rsplit_once("/cm-")
        .and_then(|(_, i)| i.parse().ok())
        .ok_or_else(|| format!("not a W-SHARD key: {}", request.key))?;
    if !shared.done[i].swap(true, Ordering::AcqRel) {
        shared.reconciled.fetch_add(1, Ordering::AcqRel);
    }
    Ok(Action::await_change())
}

/// One replica.
struct Replica {
    informer: Arc<SharedIndexInformer<ConfigMap>>,
    runner: ShardRunner,
    queue: WorkQueue<Arc<str>>,
    stop: CancellationToken,
    task: JoinHandle<()>,
}

fn start_replica(n: usize, url: &str, leases: &MemoryLeases, shared: &Arc<Shared>) -> Replica {
    let config = kube::Config::new(url.parse().expect("the simulator's URL"));
    let client = kube::Client::try_from(config).expect("a kube client");
    let informer = Arc::new(
        SharedIndexInformer::builder(
            KubeListerWatcher::new(kube::Api::<ConfigMap>::all(client)),
            KubeIdentity,
        )
        // Each move of shards relists; a streaming relist that is not by page keeps only the
        // objects after its last full page (the reflector's `collect_initial_events` takes a
        // page's batch whether or not it hands it over), so the relists go by page.
        .relist_by_page(true)
        // Lists, not streaming lists: a list says whether the server applied the selector.
        .streaming_list(false)
        .build(),
    );
    let timings = Timings::new(
        Duration::from_secs(2),
        Duration::from_millis(1200),
        Duration::from_millis(250),
    );
    let config = ShardConfig::new("w-shard", format!("replica-{n}"), SHARDS).timings(timings);
    let runner = ShardRunner::new(leases.handle(), config).expect("a valid shard configuration");
    let controller = Controller::new(Arc::clone(&informer))
        .concurrency(CONCURRENCY)
        .sharded(runner.clone());
    let queue = controller.queue().clone();
    let stop = CancellationToken::new();
    let task = tokio::spawn({
        let (informer, stop, shared) = (Arc::clone(&informer), stop.clone(), Arc::clone(shared));
        async move {
            let informer_stop = CancellationToken::new();
            let run = async {
                let ended = controller
                    .run(stop, shared, reconcile, |_, _, _| Action::backoff())
                    .await;
                informer_stop.cancel();
                ended
            };
            let (informed, ran) = tokio::join!(informer.run(informer_stop.clone()), run);
            informed.expect("the informer ran");
            ran.expect("the controller ran");
        }
    });
    Replica {
        informer,
        runner,
        queue,
        stop,
        task,
    }
}

/// Polls `pending` every 5 ms until it has nothing to say; panics with what it said last after
/// [`BOUND`].
async fn until(mut pending: impl FnMut() -> Option<String>) {
    let begun = Instant::now();
    while let Some(what) = pending() {
        assert!(
            begun.elapsed() < BOUND,
            "W-SHARD: not within {BOUND:?}: {what}"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// What keeps the assignment from having settled: every shard owned by exactly one replica,
/// each replica's informer synced at its shards, and the caches holding every object once.
fn unsettled(replicas: &[Replica], objects: usize) -> Option<String> {
    let owned: Vec<_> = replicas.iter().map(|r| r.runner.status().owned).collect();
    let total: usize = owned.iter().map(|o| o.len()).sum();
    let all: std::collections::BTreeSet<u32> = owned.iter().flatten().copied().collect();
    if total != SHARDS as usize || all.len() != SHARDS as usize {
        return Some(format!("shards owned: {total}, distinct: {}", all.len()));
    }
    for (r, o) in replicas.iter().zip(&owned) {
        let want = informer_shard::ShardSelector::for_shards(
            informer_shard::ShardField::Uid,
            SHARDS,
            o.iter().copied(),
        )
        .ok();
        if !r.informer.has_synced() || r.informer.shards() != want {
            return Some("an informer not synced at its shards".to_owned());
        }
    }
    let cached: usize = replicas.iter().map(|r| r.informer.lister().len()).sum();
    (cached != objects).then(|| format!("{cached} of {objects} objects cached"))
}

/// Runs W-SHARD with `replicas` replicas over `objects` ConfigMaps; `heap` reads the live
/// heap, if the process counts it.
pub fn run(objects: usize, replicas: usize, heap: fn() -> Option<usize>) -> Run {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("a runtime");
    rt.block_on(async {
        let server = ApiServer::start(Config::default().with_core_types())
            .await
            .expect("the simulator");
        for i in 0..objects {
            server.create(&object(i)).expect("an object created");
        }
        let (open, gate) = watch::channel(false);
        let shared = Arc::new(Shared {
            gate,
            done: (0..objects).map(|_| AtomicBool::new(false)).collect(),
            reconciled: AtomicUsize::new(0),
        });
        let leases = MemoryLeases::new();
        let begun = Instant::now();
        let mut fleet: Vec<Replica> = (0..replicas)
            .map(|n| start_replica(n, &server.url(), &leases, &shared))
            .collect();
        until(|| unsettled(&fleet, objects)).await;
        until(|| {
            let queued: usize = fleet
                .iter()
                .map(|r| r.queue.len() + r.queue.in_flight())
                .sum();
            (queued < objects).then(|| format!("{queued} of {objects} keys queued"))
        })
        .await;
        let ready = begun.elapsed();
        let started = Instant::now();
        open.send_replace(true);
        until(|| {
            let done = shared.reconciled.load(Ordering::Acquire);
            (done < objects).then(|| format!("{done} of {objects} objects reconciled"))
        })
        .await;
        let reconciling = started.elapsed();
        let cached = fleet.iter().map(|r| r.informer.lister().len()).collect();
        let server_filtered = fleet.iter().all(|r| {
            r.informer.server_filtering() == informer_reflector::ServerFiltering::Filtered
        });
        let mut heaps = Vec::new();
        for replica in fleet.drain(..) {
            replica.stop.cancel();
            replica.task.await.expect("the replica stopped");
            let before = heap();
            drop(replica.informer);
            drop(replica.runner);
            drop(replica.queue);
            let after = heap();
            heaps.push(before.zip(after).map(|(b, a)| b.saturating_sub(a)));
        }
        server.shutdown().await;
        Run {
            replicas,
            objects,
            ready,
            reconciling,
            cached,
            heap: heaps,
            server_filtered,
        }
    })
}
