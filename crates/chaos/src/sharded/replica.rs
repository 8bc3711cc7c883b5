//! One replica of the sharded chaos controller: its own kube client (its bearer token is its
//! name, so that the simulator can cut it off alone), its own informers, queue and shard
//! runner, all polled by one task, so that aborting the task is a crash.

use std::sync::Arc;
use std::time::Duration;

use informer::{InformerError, SharedIndexInformer};
use informer_kube::{
    KubeIdentity, KubeListerWatcher, OWNER_UID_INDEX, UID_INDEX, key_func, namespace_index_func,
    owner_uid_index_func, uid_index_func,
};
use informer_leaderelection::{KubeLeases, ShardConfig, ShardRunner, Timings};
use informer_reflector::ShardBy;
use informer_runtime::{Action, Controller, Request, RuntimeError, ShardStatsHandle, Target};
use informer_shard::{ShardField, ShardSelector};
use informer_store::{Indexers, NAMESPACE_INDEX, ThreadSafeStore, indexers};
use informer_workqueue::WorkQueue;
use k8s_openapi::api::core::v1::{ConfigMap, Pod};
use k8s_openapi::serde::de::DeserializeOwned;
use kube::{Api, Resource};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use super::ledger::{Ledger, Saw};
use crate::controller::{
    CONCURRENCY, Ctx, OWNER_POD_INDEX, Tally, child_name, error_policy, owner_pod_index_func,
    owners_of, queue, reconcile,
};
use crate::journal::revision_of;
use crate::runner::SETTLE_BOUND;

/// The namespace of the shard Leases.
pub const LEASE_NAMESPACE: &str = "kube-system";

/// The prefix of the shard Leases' names.
pub const LEASE_PREFIX: &str = "chaos-shards";

/// The shard Leases' timings: a 2 s lease, renewed within 1.2 s, tried every 200 ms; so a
/// killed or cut-off replica's shards move within about 2.5 s.
pub fn timings() -> Timings {
    Timings::new(
        Duration::from_secs(2),
        Duration::from_millis(1200),
        Duration::from_millis(200),
    )
}

/// A kube client for the simulator at `url` whose requests carry `token` as their bearer
/// token: how the simulator tells the replicas apart ([`informer_apiserver::Faults::isolate`]).
pub fn client_as(url: &str, token: &str) -> Result<kube::Client, String> {
    let url = url.parse().map_err(|e| format!("server URL: {e}"))?;
    let mut config = kube::Config::new(url);
    config.default_retry = false;
    config.auth_info.token = Some(token.to_owned().into());
    kube::Client::try_from(config).map_err(|e| format!("kube client: {e}"))
}

/// How a replica lists and watches.
#[derive(Debug, Clone, Copy)]
pub struct ReplicaOptions {
    /// How many shards the pods are split into.
    pub shards: u32,
    /// The reflectors' minimum watch timeout.
    pub min_watch_timeout: Duration,
    /// Streaming lists.
    pub streaming_list: bool,
    /// Relists by page.
    pub relist_by_page: bool,
    /// JSON only (else protobuf).
    pub json_only: bool,
}

/// A running replica.
pub struct Replica {
    /// Its name: its identity on the Leases and its bearer token.
    pub name: String,
    /// Its shard runner (a clone of the controller's).
    pub runner: ShardRunner,
    /// Its pod informer.
    pub pods: Arc<SharedIndexInformer<Pod>>,
    /// Its ConfigMap informer (children follow their owner's shard).
    pub config_maps: Arc<SharedIndexInformer<ConfigMap>>,
    /// Its controller's queue.
    pub queue: WorkQueue<Arc<str>>,
    /// What its reconciles counted (and the violations they found in this replica).
    pub(crate) tally: Arc<Tally>,
    /// Its controller's shard counters.
    pub shard_stats: Option<ShardStatsHandle>,
    stop: CancellationToken,
    task: JoinHandle<Result<(), String>>,
}

impl std::fmt::Debug for Replica {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Replica")
            .field("name", &self.name)
            .field("status", &self.runner.status())
            .finish_non_exhaustive()
    }
}

fn informer<K>(
    lister_watcher: KubeListerWatcher<K>,
    options: &ReplicaOptions,
    indexers: Indexers<K>,
    by: ShardBy,
) -> Arc<SharedIndexInformer<K>>
where
    K: Resource + Clone + DeserializeOwned + std::fmt::Debug + Send + Sync + 'static,
{
    let lister_watcher = if options.json_only {
        lister_watcher.json_only()
    } else {
        lister_watcher
    };
    let builder = SharedIndexInformer::builder(lister_watcher, KubeIdentity)
        .cache(Arc::new(ThreadSafeStore::with_indexers(
            key_func::<K>(),
            indexers,
        )))
        .shard_by(by);
    Arc::new(
        crate::stack::configure(
            builder,
            options.min_watch_timeout,
            options.streaming_list,
            options.relist_by_page,
        )
        .build(),
    )
}

impl Replica {
    /// Starts the replica `name` against the simulator at `url`; its reconciles go into
    /// `ledger`.
    pub fn start(
        name: &str,
        url: &str,
        options: &ReplicaOptions,
        ledger: Arc<Ledger>,
    ) -> Result<Self, String> {
        let client = client_as(url, name)?;
        let pods = informer(
            KubeListerWatcher::new(Api::<Pod>::all(client.clone())),
            options,
            indexers([
                (NAMESPACE_INDEX, namespace_index_func::<Pod>()),
                (UID_INDEX, uid_index_func::<Pod>()),
            ]),
            ShardBy::Object,
        );
        let config_maps = informer(
            KubeListerWatcher::new(Api::<ConfigMap>::all(client.clone())),
            options,
            indexers([
                (NAMESPACE_INDEX, namespace_index_func::<ConfigMap>()),
                (OWNER_UID_INDEX, owner_uid_index_func::<ConfigMap>()),
                (OWNER_POD_INDEX, owner_pod_index_func()),
            ]),
            ShardBy::Owner,
        );
        let config = ShardConfig::new(LEASE_PREFIX, name, options.shards).timings(timings());
        let runner = ShardRunner::new(KubeLeases::new(client.clone(), LEASE_NAMESPACE), config)
            .map_err(|e| format!("the shard configuration: {e}"))?;
        let queue = queue();
        let tally = Arc::new(Tally::default());
        let owners = pods.lister();
        let controller = Controller::with_queue(Arc::clone(&pods), queue.clone())
            .owns(Arc::clone(&config_maps), move |cm: &ConfigMap| {
                owners_of(&owners, cm)
            })
            .concurrency(CONCURRENCY)
            .shutdown_timeout(SETTLE_BOUND)
            .sharded(runner.clone());
        let shard_stats = controller.shard_stats();
        let ctx = Arc::new(ReplicaCtx {
            name: name.into(),
            ledger,
            inner: Arc::new(Ctx {
                client,
                queue: queue.clone(),
                pods: Arc::clone(&pods),
                config_maps: Arc::clone(&config_maps),
                tally: Arc::clone(&tally),
            }),
        });
        let stop = CancellationToken::new();
        let task = tokio::spawn(run(
            Arc::clone(&pods),
            Arc::clone(&config_maps),
            controller,
            ctx,
            stop.clone(),
        ));
        Ok(Self {
            name: name.to_owned(),
            runner,
            pods,
            config_maps,
            queue,
            tally,
            shard_stats,
            stop,
            task,
        })
    }

    /// Kills the replica: its task is aborted, every future of it dropped where it stands
    /// (nothing released: its Leases lapse). Returns once it is gone.
    pub async fn kill(self) {
        self.task.abort();
        let _ = self.task.await;
    }

    /// Stops the replica gracefully (its shards handed over, its Leases released) and waits up
    /// to `bound` for it; what went wrong, if anything.
    pub async fn stop(self, bound: Duration) -> Vec<String> {
        self.stop.cancel();
        let mut problems = Vec::new();
        match tokio::time::timeout(bound, self.task).await {
            Ok(Ok(Ok(()))) => {}
            Ok(Ok(Err(e))) => problems.push(format!("replica {}: {e}", self.name)),
            Ok(Err(e)) => problems.push(format!("replica {}: its task failed: {e}", self.name)),
            Err(_) => problems.push(format!(
                "replica {} did not stop within {bound:?}",
                self.name
            )),
        }
        let running = self.tally.in_flight.lock().len();
        if running > 0 || self.queue.in_flight() > 0 {
            problems.push(format!(
                "replica {}: reconciles still under way after it stopped ({running} running)",
                self.name
            ));
        }
        problems
    }

    /// Keys its controller dequeued and dropped, their object neither cached nor a remembered
    /// deletion (no shard could be told).
    pub fn unplaced(&self) -> u64 {
        self.shard_stats.as_ref().map_or(0, |s| s.stats().unplaced)
    }

    /// The shard set it owns now, as a selector (`None`: no shard).
    pub fn owned(&self) -> Option<ShardSelector> {
        let status = self.runner.status();
        if status.owned.is_empty() {
            return None;
        }
        ShardSelector::for_shards(ShardField::Uid, self.runner.config().shards, status.owned).ok()
    }
}

/// The replica's informers and controller, polled together: aborting this future is a crash.
async fn run(
    pods: Arc<SharedIndexInformer<Pod>>,
    config_maps: Arc<SharedIndexInformer<ConfigMap>>,
    controller: Controller<Pod>,
    ctx: Arc<ReplicaCtx>,
    stop: CancellationToken,
) -> Result<(), String> {
    let informers_stop = CancellationToken::new();
    let controller = async {
        let ended = controller
            .run(stop.clone(), ctx, reconcile_recorded, policy)
            .await;
        informers_stop.cancel();
        ended
    };
    let (a, b, ended): (
        Result<(), InformerError>,
        Result<(), InformerError>,
        Result<(), RuntimeError>,
    ) = tokio::join!(
        pods.run(informers_stop.clone()),
        config_maps.run(informers_stop.clone()),
        controller
    );
    ended.map_err(|e| format!("the controller's run ended with an error: {e}"))?;
    a.and(b)
        .map_err(|e| format!("an informer ended with an error: {e}"))
}

/// What a replica's reconcile reads: the chaos controller's context, and the ledger.
struct ReplicaCtx {
    name: String,
    ledger: Arc<Ledger>,
    inner: Arc<Ctx>,
}

/// The chaos controller's reconcile, recorded in the ledger from its start to its end (or to
/// the moment its future is dropped).
async fn reconcile_recorded(
    request: Request<Pod>,
    ctx: Arc<ReplicaCtx>,
) -> Result<Action, kube::Error> {
    let (uid, saw) = match &request.target {
        Target::Live(pod) => (
            pod.metadata.uid.clone(),
            Saw::Live(revision_of(pod.metadata.resource_version.as_deref())),
        ),
        Target::Deleted { last_known } => (
            last_known
                .as_ref()
                .and_then(|p| p.metadata.uid.clone())
                .or_else(|| request.owner_uid.as_deref().map(str::to_owned))
                .or_else(|| child_owner(&ctx.inner, &request.key)),
            Saw::Deleted,
        ),
    };
    let _open = ctx.ledger.begin(&ctx.name, &request.key, uid, saw);
    reconcile(request, Arc::clone(&ctx.inner)).await
}

/// The owner UID of the key's `-info` child in the cache, if it is there.
fn child_owner(ctx: &Ctx, key: &str) -> Option<String> {
    let (namespace, name) = key.split_once('/')?;
    let child = ctx
        .config_maps
        .lister()
        .get(&format!("{namespace}/{}", child_name(name)))?;
    let uid = child
        .metadata
        .owner_references
        .as_ref()?
        .first()?
        .uid
        .clone();
    Some(uid)
}

fn policy(request: &Request<Pod>, error: &kube::Error, ctx: &Arc<ReplicaCtx>) -> Action {
    error_policy(request, error, &ctx.inner)
}

#[cfg(test)]
mod tests {
    use super::*;
    use informer_apiserver::{ApiServer, Config, Failure, Isolation};

    /// The simulator tells a replica's requests by its bearer token: cutting one replica off
    /// fails its requests and no other's.
    #[tokio::test]
    async fn a_replica_alone_is_cut_off() {
        let server = ApiServer::start(Config::default().with_core_types())
            .await
            .expect("the simulator");
        let (a, b) = (
            client_as(&server.url(), "replica-a").expect("a"),
            client_as(&server.url(), "replica-b").expect("b"),
        );
        server
            .faults()
            .isolate("replica-a", Isolation::Fail(Failure::unavailable()));
        let list = |c: &kube::Client| Api::<Pod>::all(c.clone());
        let refused = list(&a).list(&Default::default()).await;
        assert!(
            matches!(&refused, Err(kube::Error::Api(s)) if s.code == 503),
            "{refused:?}"
        );
        assert!(list(&b).list(&Default::default()).await.is_ok());
        server.faults().heal("replica-a");
        assert!(list(&a).list(&Default::default()).await.is_ok());
        server.shutdown().await;
    }

    /// A replica cut off for longer than its renew deadline loses its shards, and takes them
    /// again once healed; a kill ends its task at once.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_replica_cut_off_past_its_deadline_loses_its_shards() {
        let server = ApiServer::start(Config::default().with_core_types())
            .await
            .expect("the simulator");
        let options = ReplicaOptions {
            shards: 4,
            min_watch_timeout: Duration::from_secs(2),
            streaming_list: false,
            relist_by_page: false,
            json_only: false,
        };
        let ledger = Arc::new(Ledger::default());
        let replica =
            Replica::start("replica-0", &server.url(), &options, ledger).expect("started");
        let owns_all = |r: &Replica| r.runner.status().owned.len() == 4;
        let waited = tokio::time::timeout(Duration::from_secs(20), async {
            while !owns_all(&replica) {
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        });
        waited.await.expect("every shard owned");
        server
            .faults()
            .isolate("replica-0", Isolation::Fail(Failure::unavailable()));
        let lost = tokio::time::timeout(Duration::from_secs(20), async {
            while replica.runner.stats().lost < 4 {
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        });
        lost.await.expect("every term lost at the renew deadline");
        assert!(replica.runner.status().owned.is_empty());
        server.faults().heal("replica-0");
        let back = tokio::time::timeout(Duration::from_secs(20), async {
            while !owns_all(&replica) {
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        });
        back.await.expect("every shard owned again");
        replica.kill().await;
        server.shutdown().await;
    }
}
