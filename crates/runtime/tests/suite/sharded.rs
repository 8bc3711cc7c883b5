//! Sharded controllers, on tokio's paused clock over in-memory Leases and one in-memory world
//! of objects that every replica's informer lists and watches: each replica caches only the
//! shards it owns (nothing while it owns none), every key is reconciled by the owner of its
//! shard, a shard moving (a replica joining, one stopping) moves its keys' reconciles, and no
//! key is ever reconciled by two replicas at once — a term's end cancels the reconcile under
//! way, and the shard's Lease goes to the next owner only after it stopped.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use futures::future::BoxFuture;
use informer::{ShardBy, ShardSelector, SharedIndexInformer};
use informer_leaderelection::{MemoryLeases, ShardConfig, ShardRunner};
use informer_reflector::{
    Error, ListPage, ListParams, ListerWatcher, WatchEvent, WatchParams, WatchStream,
};
use informer_runtime::{
    Action, Controller, RuntimeError, SHARD_WAIT_WARNING, ShardStatsHandle, Target,
};
use informer_shard::ShardRange;
use informer_store::{Identity, KeyError};
use informer_testing::eventually;
use parking_lot::Mutex;
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

const SHARDS: u32 = 8;
const LONG: Duration = Duration::from_secs(600);

#[derive(Debug)]
struct Obj {
    name: String,
    uid: String,
    rv: String,
}

struct ObjIdentity;

impl Identity<Obj> for ObjIdentity {
    fn key(&self, obj: &Obj) -> Result<String, KeyError> {
        Ok(obj.name.clone())
    }
    fn resource_version<'a>(&self, obj: &'a Obj) -> Option<&'a str> {
        Some(&obj.rv)
    }
    fn uid<'a>(&self, obj: &'a Obj) -> Option<&'a str> {
        Some(&obj.uid)
    }
}

fn shard_of_uid(uid: &str) -> u32 {
    ShardRange::index_of(informer_shard::hash(uid), SHARDS).unwrap()
}

/// The objects, only ever added to: their history by resource version.
struct World {
    history: Mutex<Vec<Arc<Obj>>>,
    version: watch::Sender<u64>,
}

impl World {
    fn new() -> Arc<Self> {
        Arc::new(Self {
            history: Mutex::default(),
            version: watch::Sender::new(0),
        })
    }

    fn add(&self, n: usize) {
        let mut history = self.history.lock();
        for _ in 0..n {
            let i = history.len();
            history.push(Arc::new(Obj {
                name: format!("obj-{i:03}"),
                uid: format!("uid-{i:03}-{}", i * 7919),
                rv: (i + 1).to_string(),
            }));
        }
        self.version.send_replace(history.len() as u64);
    }

    fn keys(&self) -> BTreeSet<String> {
        self.history.lock().iter().map(|o| o.name.clone()).collect()
    }

    /// The keys of the objects in `shards`.
    fn keys_in(&self, shards: &BTreeSet<u32>) -> BTreeSet<String> {
        let history = self.history.lock();
        let objects = history.iter();
        objects
            .filter(|o| shards.contains(&shard_of_uid(&o.uid)))
            .map(|o| o.name.clone())
            .collect()
    }

    fn shard_of_key(&self, key: &str) -> u32 {
        let history = self.history.lock();
        let obj = history.iter().find(|o| o.name == key).expect("a known key");
        shard_of_uid(&obj.uid)
    }
}

/// One replica's way to the world: every list's shard selector, recorded; each list waits
/// for a pass, and takes it (`passes`: unbounded unless a test sets it).
struct Source {
    world: Arc<World>,
    selectors: Mutex<Vec<Option<String>>>,
    passes: watch::Sender<u64>,
}

impl ListerWatcher<Obj> for Source {
    fn list(
        &self,
        params: &ListParams,
    ) -> impl Future<Output = Result<ListPage<Obj>, Error>> + Send {
        self.selectors.lock().push(params.shard_selector.clone());
        let items = self.world.history.lock().clone();
        let version = items.len().to_string();
        let passes = self.passes.clone();
        async move {
            let mut told = passes.subscribe();
            loop {
                let taken = passes.send_if_modified(|left| {
                    let some = *left > 0;
                    *left -= u64::from(some);
                    some
                });
                if taken || told.changed().await.is_err() {
                    break;
                }
            }
            Ok(ListPage::new(items, version))
        }
    }

    fn watch(
        &self,
        params: &WatchParams,
    ) -> impl Future<Output = Result<WatchStream<Obj>, Error>> + Send {
        let from: usize = params.resource_version.parse().unwrap_or(0);
        let (world, changes) = (Arc::clone(&self.world), self.world.version.subscribe());
        let events = futures::stream::unfold((from, changes), move |(seen, mut changes)| {
            let world = Arc::clone(&world);
            async move {
                loop {
                    let next = world.history.lock().get(seen).cloned();
                    if let Some(obj) = next {
                        let event = WatchEvent::added(obj, (seen + 1).to_string());
                        return Some((Ok(event), (seen + 1, changes)));
                    }
                    if changes.changed().await.is_err() {
                        return None;
                    }
                }
            }
        });
        async move { Ok(events.boxed()) }
    }
}

/// One reconcile as a replica ran it.
#[derive(Debug, Clone)]
struct Run {
    key: String,
    replica: &'static str,
    start: Instant,
    /// When it stopped (finished, or cut); `None` while under way.
    end: Option<Instant>,
    /// Cut before it finished.
    cut: bool,
    /// Its `cancel` had fired when it stopped.
    cancelled: bool,
}

type Log = Arc<Mutex<Vec<Run>>>;

/// Records a reconcile's end when dropped: finished, or cut with its future.
struct Ending {
    log: Log,
    index: usize,
    cancel: CancellationToken,
    finished: bool,
}

impl Drop for Ending {
    fn drop(&mut self) {
        let mut log = self.log.lock();
        log[self.index].end = Some(Instant::now());
        log[self.index].cut = !self.finished;
        log[self.index].cancelled = self.cancel.is_cancelled();
    }
}

/// How each reconcile behaves: it takes `work`, then asks to be run again after `again`; and
/// how many run at once.
#[derive(Clone, Copy)]
struct Behaviour {
    work: Duration,
    again: Option<Duration>,
    concurrency: usize,
}

struct Replica {
    name: &'static str,
    informer: Arc<SharedIndexInformer<Obj>>,
    source: Arc<Source>,
    runner: ShardRunner,
    stats: ShardStatsHandle,
    stop: CancellationToken,
    tasks: Vec<JoinHandle<()>>,
}

impl Replica {
    fn start(
        name: &'static str,
        world: &Arc<World>,
        leases: &MemoryLeases,
        log: &Log,
        behaviour: Behaviour,
    ) -> Self {
        let source = Arc::new(Source {
            world: Arc::clone(world),
            selectors: Mutex::default(),
            passes: watch::Sender::new(u64::MAX),
        });
        let informer = Arc::new(
            SharedIndexInformer::builder(Arc::clone(&source), ObjIdentity)
                .name(name)
                .build(),
        );
        let runner = ShardRunner::new(leases.clone(), ShardConfig::new("ctl", name, SHARDS))
            .expect("a valid configuration");
        let controller = Controller::new(Arc::clone(&informer))
            .concurrency(behaviour.concurrency)
            .sharded(runner.clone());
        let stats = controller.shard_stats().expect("sharded");
        let stop = CancellationToken::new();
        let informing = tokio::spawn({
            let (i, s) = (Arc::clone(&informer), stop.clone());
            async move { i.run(s).await.expect("the informer runs") }
        });
        let ctx = Arc::new((Arc::clone(log), name, behaviour));
        let reconciling = tokio::spawn({
            let stop = stop.clone();
            async move {
                controller
                    .run(stop, ctx, reconcile, |_, _, _| Action::backoff())
                    .await
                    .expect("the controller runs");
            }
        });
        Self {
            name,
            informer,
            source,
            runner,
            stats,
            stop,
            tasks: vec![informing, reconciling],
        }
    }

    fn owned(&self) -> BTreeSet<u32> {
        self.runner.status().owned
    }

    fn cached(&self) -> BTreeSet<String> {
        self.informer.lister().keys().into_iter().collect()
    }

    async fn stop(self) {
        self.stop.cancel();
        // Bounded in real time: the informer's deliveries run on threads of their own, which
        // the paused clock does not wait for.
        let deadline = std::time::Instant::now() + Duration::from_secs(30);
        for (task, what) in self.tasks.into_iter().zip(["informer", "controller"]) {
            while !task.is_finished() {
                let name = self.name;
                assert!(
                    std::time::Instant::now() < deadline,
                    "{name}'s {what} stops in time"
                );
                tokio::time::sleep(Duration::from_millis(1)).await;
            }
            task.await.expect("no panic");
        }
    }
}

type Ctx = (Log, &'static str, Behaviour);

fn reconcile(
    request: informer_runtime::Request<Obj>,
    ctx: Arc<Ctx>,
) -> BoxFuture<'static, Result<Action, std::convert::Infallible>> {
    Box::pin(async move {
        let (log, replica, behaviour) = &*ctx;
        assert!(
            matches!(request.target, Target::Live(_)),
            "nothing is deleted"
        );
        let index = {
            let mut log = log.lock();
            log.push(Run {
                key: request.key.to_string(),
                replica,
                start: Instant::now(),
                end: None,
                cut: false,
                cancelled: false,
            });
            log.len() - 1
        };
        let mut ending = Ending {
            log: Arc::clone(log),
            index,
            cancel: request.cancel.clone(),
            finished: false,
        };
        tokio::time::sleep(behaviour.work).await;
        ending.finished = true;
        Ok(match behaviour.again {
            Some(after) => Action::requeue(after),
            None => Action::await_change(),
        })
    })
}

/// Whether the replicas own every shard between them, each its own, and each caches exactly
/// the objects of its shards.
fn settled(world: &World, replicas: &[&Replica]) -> bool {
    let mut all = BTreeSet::new();
    for r in replicas {
        let owned = r.owned();
        if owned.iter().any(|s| all.contains(s)) || r.cached() != world.keys_in(&owned) {
            return false;
        }
        all.extend(owned);
    }
    all.len() == SHARDS as usize
}

/// The keys each replica reconciled.
fn reconciled_by(log: &Log) -> BTreeMap<&'static str, BTreeSet<String>> {
    let mut by: BTreeMap<_, BTreeSet<_>> = BTreeMap::new();
    for run in log.lock().iter() {
        by.entry(run.replica).or_default().insert(run.key.clone());
    }
    by
}

/// No key was ever reconciled by two replicas at once.
fn assert_no_overlap(log: &Log) {
    let log = log.lock();
    let mut by_key: BTreeMap<&str, Vec<&Run>> = BTreeMap::new();
    for run in log.iter() {
        by_key.entry(&run.key).or_default().push(run);
    }
    for (key, runs) in by_key {
        for a in &runs {
            for b in &runs {
                if a.replica == b.replica {
                    continue;
                }
                let a_end = a.end.unwrap_or(Instant::now() + LONG);
                let b_end = b.end.unwrap_or(Instant::now() + LONG);
                assert!(
                    a_end <= b.start || b_end <= a.start,
                    "{key} reconciled by {} and {} at once: {a:?} {b:?}",
                    a.replica,
                    b.replica
                );
            }
        }
    }
}

const ONCE: Behaviour = Behaviour {
    work: Duration::from_millis(50),
    again: None,
    concurrency: 4,
};

/// Three replicas settle on the shards; objects added then are each reconciled once, by the
/// replica owning its shard, which alone caches it.
#[tokio::test(start_paused = true)]
async fn every_key_is_reconciled_by_the_one_replica_owning_its_shard() {
    let (world, leases, log) = (World::new(), MemoryLeases::new(), Log::default());
    let replicas: Vec<Replica> = ["a", "b", "c"]
        .into_iter()
        .map(|name| Replica::start(name, &world, &leases.handle(), &log, ONCE))
        .collect();
    let all: Vec<&Replica> = replicas.iter().collect();
    eventually("the replicas share the shards", || {
        settled(&world, &all) && all.iter().all(|r| !r.owned().is_empty())
    })
    .await;

    world.add(60);
    eventually("every key reconciled", || {
        reconciled_by(&log).values().flatten().count() >= 60
    })
    .await;
    assert!(settled(&world, &all), "each replica caches its shards only");
    let mut seen = BTreeSet::new();
    let runs = log.lock().clone();
    for run in &runs {
        assert!(
            seen.insert(run.key.clone()),
            "{} reconciled twice: {:?}; assignments: {:?}",
            run.key,
            runs.iter().filter(|r| r.key == run.key).collect::<Vec<_>>(),
            all.iter()
                .map(|r| (r.name, r.stats.stats().assignment, r.stats.stats().shards))
                .collect::<Vec<_>>()
        );
        let owner = all
            .iter()
            .find(|r| r.name == run.replica)
            .expect("a replica");
        assert!(owner.owned().contains(&world.shard_of_key(&run.key)));
    }
    assert_eq!(seen, world.keys());
    for r in &all {
        let stats = r.stats.stats();
        let owned: BTreeSet<u32> = stats
            .shards
            .iter()
            .filter(|s| s.owned)
            .map(|s| s.shard)
            .collect();
        assert_eq!(
            owned,
            r.owned(),
            "{}: the stats show the shards owned",
            r.name
        );
        let reconciles: u64 = stats.shards.iter().map(|s| s.reconciles).sum();
        assert_eq!(reconciles as usize, reconciled_by(&log)[r.name].len());
    }
    for r in replicas {
        r.stop().await;
    }
}

const AGAIN: Behaviour = Behaviour {
    work: Duration::from_millis(2500),
    again: Some(Duration::from_millis(100)),
    concurrency: 4,
};

/// Adds 40 objects and starts replica `a` alone: once it owns every shard and has reconciled
/// every key.
async fn alone_with_40_keys(
    world: &Arc<World>,
    leases: &MemoryLeases,
    log: &Log,
    behaviour: Behaviour,
) -> Replica {
    world.add(40);
    let a = Replica::start("a", world, &leases.handle(), log, behaviour);
    eventually("a alone reconciled every key", || {
        a.owned().len() == SHARDS as usize
            && reconciled_by(log)
                .get("a")
                .is_some_and(|k| *k == world.keys())
    })
    .await;
    a
}

/// A replica alone reconciles everything, over and over; a second one joins and takes shards,
/// whose keys it then reconciles, never while the first still does; the first stops and hands
/// its shards over, whose keys the second then reconciles too.
#[tokio::test(start_paused = true)]
async fn shards_move_with_their_keys_and_no_key_is_reconciled_twice_at_once() {
    let (world, leases, log) = (World::new(), MemoryLeases::new(), Log::default());
    let a = alone_with_40_keys(&world, &leases, &log, AGAIN).await;

    let b = Replica::start("b", &world, &leases.handle(), &log, AGAIN);
    eventually("b took shards and reconciled their keys", || {
        settled(&world, &[&a, &b])
            && !b.owned().is_empty()
            && reconciled_by(&log)
                .get("b")
                .is_some_and(|k| *k == world.keys_in(&b.owned()))
    })
    .await;
    let handed = b.stats.stats().assignment.started;
    assert!(handed >= 1);
    assert!(a.runner.stats().handed_off >= 1, "a handed shards over");
    assert_no_overlap(&log);
    // Some reconcile of a was cut by its term's end (they run most of the time).
    assert!(log.lock().iter().any(|r| r.replica == "a" && r.cut));

    let since = Instant::now();
    a.stop().await;
    eventually("b owns every shard and reconciled every key since", || {
        b.owned().len() == SHARDS as usize && {
            let log = log.lock();
            let since: BTreeSet<String> = log
                .iter()
                .filter(|r| r.replica == "b" && r.start >= since)
                .map(|r| r.key.clone())
                .collect();
            since == world.keys()
        }
    })
    .await;
    assert_eq!(b.cached(), world.keys());
    assert_no_overlap(&log);
    b.stop().await;
}

/// A shard that moves away and comes back while the relist at the set without it is still
/// under way begins again only once the cache has listed the set that has it: that relist,
/// when it lands, takes the shard's objects out of the cache, and a term begun before it would
/// reconcile each of them as deleted (the shared reconcile asserts that nothing is).
#[tokio::test(start_paused = true)]
async fn a_shard_back_before_the_relist_without_it_waits_for_the_relist_with_it() {
    let (world, leases, log) = (World::new(), MemoryLeases::new(), Log::default());
    let a = alone_with_40_keys(&world, &leases, &log, ONCE).await;
    // a's last list was at every shard; its lists wait for a pass from now on.
    let every = a.source.selectors.lock().last().cloned();
    a.source.passes.send_replace(0);
    let b = Replica::start("b", &world, &leases.handle(), &log, ONCE);
    eventually("b took shards, and a relists without them (held)", || {
        !b.owned().is_empty()
            && a.owned().len() + b.owned().len() == SHARDS as usize
            && a.source.selectors.lock().last() != every.as_ref()
    })
    .await;
    let moved = b.owned();
    let lists = a.source.selectors.lock().len();
    b.stop().await;
    // Owned as the controller holds its terms, not only as the runner assigns them.
    eventually(
        "the shards came back to a, whose relist still waits",
        || a.owned().len() == SHARDS as usize && a.stats.stats().shards.iter().all(|s| s.owned),
    )
    .await;
    let not_begun = || {
        let shards = a.stats.stats().shards;
        let back: Vec<_> = shards.iter().filter(|s| moved.contains(&s.shard)).collect();
        assert!(back.iter().all(|s| s.owned && !s.begun), "{back:?}");
    };
    assert_eq!(
        a.source.selectors.lock().len(),
        lists,
        "no relist of a ended"
    );
    not_begun();

    // The relist without b's shards lands; the one with them starts, and waits.
    a.source.passes.send_replace(1);
    eventually("a's cache lost b's shards", || {
        a.source.selectors.lock().len() == lists + 1 && a.cached().len() < world.keys().len()
    })
    .await;
    not_begun();

    a.source.passes.send_replace(u64::MAX);
    eventually(
        "a relisted at every shard and reconciled the keys back",
        || {
            let begun = a.stats.stats().shards.iter().all(|s| s.begun);
            let runs = log.lock().iter().filter(|r| r.replica == "a").count();
            a.cached() == world.keys()
                && begun
                && runs >= world.keys().len() + world.keys_in(&moved).len()
        },
    )
    .await;
    assert_no_overlap(&log);
    a.stop().await;
}

/// A reconcile under way when its shard moves is cancelled (its token fired, its future
/// dropped), and the new owner starts that key's reconcile only after it stopped.
#[tokio::test(start_paused = true)]
async fn a_terms_end_cancels_its_reconcile_before_the_shard_moves() {
    let (world, leases, log) = (World::new(), MemoryLeases::new(), Log::default());
    world.add(24);
    // Every key at once: whichever shards move, a is reconciling each of their keys.
    let forever = Behaviour {
        work: Duration::from_secs(3600),
        again: None,
        concurrency: 24,
    };
    let a = Replica::start("a", &world, &leases.handle(), &log, forever);
    eventually("a reconciles every key", || {
        a.owned().len() == SHARDS as usize && log.lock().len() >= 24
    })
    .await;
    let b = Replica::start("b", &world, &leases.handle(), &log, forever);
    eventually("b reconciles", || {
        !b.owned().is_empty() && log.lock().iter().any(|r| r.replica == "b")
    })
    .await;
    let log_now = log.lock().clone();
    let cut: Vec<&Run> = log_now
        .iter()
        .filter(|r| r.replica == "a" && r.cut)
        .collect();
    assert!(
        !cut.is_empty(),
        "a's reconciles of the moved shards were cut"
    );
    for run in &cut {
        assert!(run.cancelled, "its cancel fired before it was dropped");
        assert!(
            b.owned().contains(&world.shard_of_key(&run.key)),
            "only moved shards are cut"
        );
    }
    assert_no_overlap(&log);
    // The reconciles a ran were all either cut or still running in its shards.
    for run in log_now
        .iter()
        .filter(|r| r.replica == "a" && r.end.is_none())
    {
        assert!(a.owned().contains(&world.shard_of_key(&run.key)));
    }
    a.stop().await;
    b.stop().await;
}

/// A replica that owns no shard caches nothing (its lists carry the narrowest selector, and
/// the client filters even that) and reconciles nothing; owning shards, it caches those.
#[tokio::test(start_paused = true)]
async fn owning_no_shard_caches_nothing() {
    let (world, leases, log) = (World::new(), MemoryLeases::new(), Log::default());
    world.add(30);
    let cut_off = leases.handle();
    cut_off.set_reachable(false);
    let a = Replica::start("a", &world, &cut_off, &log, ONCE);
    eventually("a synced", || a.informer.has_synced()).await;
    tokio::time::sleep(Duration::from_secs(60)).await;
    assert!(a.owned().is_empty());
    assert!(a.cached().is_empty(), "nothing cached: {:?}", a.cached());
    assert_eq!(
        a.informer.shards(),
        Some(ShardSelector::none(informer::ShardField::Uid))
    );
    let selectors = a.source.selectors.lock().clone();
    assert!(!selectors.is_empty());
    let narrowest = "shardRange(object.metadata.uid, '0x0000000000000000', '0x0000000000000001')";
    assert!(
        selectors.iter().all(|s| s.as_deref() == Some(narrowest)),
        "{selectors:?}"
    );
    assert!(log.lock().is_empty(), "nothing reconciled");

    cut_off.set_reachable(true);
    eventually(
        "a owns every shard, caches and reconciled everything",
        || {
            a.owned().len() == SHARDS as usize
                && a.cached() == world.keys()
                && reconciled_by(&log)
                    .get("a")
                    .is_some_and(|k| *k == world.keys())
        },
    )
    .await;
    let arrived: u64 = a.stats.stats().shards.iter().map(|s| s.terms).sum();
    assert_eq!(arrived, u64::from(SHARDS));
    a.stop().await;
}

/// Sharded with a leader election, or owning children hashed by their own uid: refused.
#[tokio::test(start_paused = true)]
async fn a_sharded_controller_refuses_what_it_cannot_keep() {
    let world = World::new();
    let leases = MemoryLeases::new();
    let informer = |by: ShardBy| {
        let source = Source {
            world: Arc::clone(&world),
            selectors: Mutex::default(),
            passes: watch::Sender::new(u64::MAX),
        };
        Arc::new(
            SharedIndexInformer::builder(source, ObjIdentity)
                .name("children")
                .shard_by(by)
                .build(),
        )
    };
    let runner = || ShardRunner::new(leases.clone(), ShardConfig::new("ctl", "a", 2)).unwrap();
    let run = |controller: Controller<Obj>| async move {
        controller
            .run(
                CancellationToken::new(),
                Arc::new(()),
                |_, _| async { Ok::<_, std::convert::Infallible>(Action::await_change()) },
                |_, _, _| Action::backoff(),
            )
            .await
    };
    let children_by_uid = Controller::new(informer(ShardBy::Object))
        .owns(informer(ShardBy::Object), |_| Vec::new())
        .sharded(runner());
    let refused = run(children_by_uid).await;
    assert!(
        matches!(&refused, Err(RuntimeError::ChildrenNotByOwner { informer }) if informer == "children"),
        "{refused:?}"
    );
    let elector = informer_leaderelection::LeaderElector::new(
        informer_leaderelection::MemoryLease::new(),
        informer_leaderelection::ElectionConfig::new("a"),
    )
    .unwrap();
    let both = Controller::new(informer(ShardBy::Object))
        .leader_election(elector)
        .sharded(runner());
    assert!(matches!(
        run(both).await,
        Err(RuntimeError::ShardedAndElected)
    ));
}

/// A child: in its controller owner's shard (`ShardBy::Owner`), mapped to its owner's key.
#[derive(Debug)]
struct Child {
    name: String,
    owner: String,
    owner_uid: String,
}

struct ChildIdentity;

impl Identity<Child> for ChildIdentity {
    fn key(&self, child: &Child) -> Result<String, KeyError> {
        Ok(child.name.clone())
    }
    fn resource_version<'a>(&self, _: &'a Child) -> Option<&'a str> {
        Some("1")
    }
    fn controller_uid<'a>(&self, child: &'a Child) -> Option<&'a str> {
        Some(&child.owner_uid)
    }
}

/// A source of fixed objects at version 1, whose watches never send anything.
struct Fixed<T>(Vec<Arc<T>>);

impl<T: Send + Sync + 'static> ListerWatcher<T> for Fixed<T> {
    fn list(&self, _: &ListParams) -> impl Future<Output = Result<ListPage<T>, Error>> + Send {
        let items = self.0.clone();
        async move { Ok(ListPage::new(items, "1")) }
    }

    async fn watch(&self, _: &WatchParams) -> Result<WatchStream<T>, Error> {
        Ok(futures::stream::pending().boxed())
    }
}

/// Runs `informer` until `stop`.
fn run_informer<T: Send + Sync + 'static>(
    informer: &Arc<SharedIndexInformer<T>>,
    stop: &CancellationToken,
) -> JoinHandle<()> {
    let (informer, stop) = (Arc::clone(informer), stop.clone());
    tokio::spawn(async move { informer.run(stop).await.expect("runs") })
}

/// Runs `controller` with `ctx` until `stop`, every error retried with backoff.
fn run_controller<Ctx, E, R, Fut>(
    controller: Controller<Obj>,
    stop: &CancellationToken,
    ctx: Arc<Ctx>,
    reconcile: R,
) -> JoinHandle<()>
where
    Ctx: Send + Sync + 'static,
    E: Send + 'static,
    R: Fn(informer_runtime::Request<Obj>, Arc<Ctx>) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<Action, E>> + Send + 'static,
{
    let stop = stop.clone();
    tokio::spawn(async move {
        let policy = |_: &_, _: &_, _: &_| Action::backoff();
        let ran = controller.run(stop, ctx, reconcile, policy).await;
        ran.expect("the controller runs");
    })
}

/// What a controller told of a gone owner saw: each reconcile's key, whether it had no object
/// at all, and the owner uid it was told of.
type Seen = Arc<Mutex<Vec<(String, bool, Option<String>)>>>;

/// Runs a sharded controller over no owners and one orphaned child, whose reconciles fail the
/// first `failures` times (each retried with backoff), until it has reconciled the gone owner
/// `failures + 1` times: what each reconcile saw, and the shard counts then.
async fn reconcile_the_gone_owner(failures: usize) -> (Seen, ShardStatsHandle) {
    let owners = Arc::new(
        SharedIndexInformer::builder(Arc::new(Fixed::<Obj>(Vec::new())), ObjIdentity)
            .name("owners")
            .build(),
    );
    let orphan = Child {
        name: "child-of-gone".into(),
        owner: "gone".into(),
        owner_uid: "uid-of-the-gone-owner".into(),
    };
    let children = Arc::new(
        SharedIndexInformer::builder(Arc::new(Fixed(vec![Arc::new(orphan)])), ChildIdentity)
            .name("children")
            .shard_by(ShardBy::Owner)
            .build(),
    );
    let runner = ShardRunner::new(MemoryLeases::new(), ShardConfig::new("ctl", "a", SHARDS))
        .expect("a valid configuration");
    let controller = Controller::new(Arc::clone(&owners))
        .owns(Arc::clone(&children), |c: &Child| vec![c.owner.clone()])
        .sharded(runner);
    let stats = controller.shard_stats().expect("sharded");
    let stop = CancellationToken::new();
    let seen: Seen = Arc::default();
    let reconcile = move |request: informer_runtime::Request<Obj>, seen: Seen| async move {
        let gone = matches!(request.target, Target::Deleted { last_known: None });
        let owner = request.owner_uid.as_deref().map(str::to_owned);
        let mut seen = seen.lock();
        seen.push((request.key.to_string(), gone, owner));
        if seen.len() <= failures {
            return Err(std::fmt::Error);
        }
        Ok(Action::await_change())
    };
    let tasks = [
        run_informer(&owners, &stop),
        run_informer(&children, &stop),
        run_controller(controller, &stop, Arc::clone(&seen), reconcile),
    ];
    // Or a retry dropped: the test then fails on its counts, not on a timeout.
    eventually("the gone owner reconciled, or a retry dropped", || {
        seen.lock().len() > failures || stats.stats().unplaced > 0
    })
    .await;
    stop.cancel();
    for task in tasks {
        task.await.expect("no panic");
    }
    (seen, stats)
}

/// An owner that is gone, woken by its orphaned child, has no object to tell its shard: it is
/// reconciled (as a deletion) in its child's shard, which is its own, by the replica owning it,
/// not dropped unreconciled.
#[tokio::test(start_paused = true)]
async fn an_owner_gone_is_reconciled_in_its_orphaned_childs_shard() {
    let (seen, stats) = reconcile_the_gone_owner(0).await;
    // Told which object it is for: the owner the orphan names, not whatever may carry the key
    // now in another shard.
    let owner = Some("uid-of-the-gone-owner".to_owned());
    assert_eq!(*seen.lock(), vec![("gone".to_owned(), true, owner)]);
    let stats = stats.stats();
    assert_eq!(stats.unplaced, 0, "no key dropped for want of a shard");
    let shard = shard_of_uid("uid-of-the-gone-owner") as usize;
    assert_eq!(stats.shards[shard].reconciles, 1, "{stats:?}");
}

/// A gone owner's reconcile that fails is retried in the same shard, told the same owner: its
/// retry, queued by the backoff rather than by its child, still knows where it belongs.
#[tokio::test(start_paused = true)]
async fn a_gone_owners_failed_reconcile_is_retried_in_its_orphans_shard() {
    let (seen, stats) = reconcile_the_gone_owner(2).await;
    let owner = Some("uid-of-the-gone-owner".to_owned());
    let once = ("gone".to_owned(), true, owner);
    assert_eq!(*seen.lock(), vec![once.clone(), once.clone(), once]);
    let stats = stats.stats();
    assert_eq!(stats.unplaced, 0, "no retry dropped for want of a shard");
    let shard = shard_of_uid("uid-of-the-gone-owner") as usize;
    assert_eq!(stats.shards[shard].reconciles, 3, "{stats:?}");
}

/// A source of one object at version 1, deleted at version 2 once `delete` is true: lists
/// have it until then, and a watch from version 1 then sends its deletion.
struct DeletedWhenTold {
    object: Arc<Obj>,
    delete: watch::Receiver<bool>,
}

impl ListerWatcher<Obj> for DeletedWhenTold {
    async fn list(&self, _: &ListParams) -> Result<ListPage<Obj>, Error> {
        Ok(match *self.delete.borrow() {
            false => ListPage::new(vec![Arc::clone(&self.object)], "1"),
            true => ListPage::new(Vec::new(), "2"),
        })
    }

    async fn watch(&self, params: &WatchParams) -> Result<WatchStream<Obj>, Error> {
        if params.resource_version != "1" {
            return Ok(futures::stream::pending().boxed());
        }
        let (mut delete, object) = (self.delete.clone(), Arc::clone(&self.object));
        let deletion = futures::stream::once(async move {
            let _ = delete.wait_for(|now| *now).await;
            Ok(WatchEvent::deleted(object, "2"))
        });
        Ok(deletion.chain(futures::stream::pending()).boxed())
    }
}

/// A deletion reconciled with success that asks to run again after a delay is run again, in
/// its shard, told its object is gone (its last known state was let go of with the success),
/// as an unsharded controller runs it, and told the uid of the object it was (the key may live
/// again under another uid in another shard): not dropped for want of a shard.
#[tokio::test(start_paused = true)]
async fn a_deletion_asked_to_run_again_is_run_again_in_its_shard() {
    let object = Arc::new(Obj {
        name: "obj-000".into(),
        uid: "uid-000".into(),
        rv: "1".into(),
    });
    let (delete, told) = watch::channel(false);
    let source = DeletedWhenTold {
        object,
        delete: told,
    };
    let informer = Arc::new(SharedIndexInformer::builder(Arc::new(source), ObjIdentity).build());
    let runner = ShardRunner::new(MemoryLeases::new(), ShardConfig::new("ctl", "a", SHARDS))
        .expect("a valid configuration");
    let controller = Controller::new(Arc::clone(&informer)).sharded(runner);
    let stats = controller.shard_stats().expect("sharded");
    let stop = CancellationToken::new();
    // Each reconcile: "live", "deleted, last known", or "deleted, gone"; and the uid it was
    // told of.
    type Told = Arc<Mutex<Vec<(&'static str, Option<String>)>>>;
    let seen: Told = Arc::default();
    let reconcile = |request: informer_runtime::Request<Obj>, seen: Told| async move {
        let (what, action) = match request.target {
            Target::Live(_) => ("live", Action::await_change()),
            Target::Deleted {
                last_known: Some(_),
            } => (
                "deleted, last known",
                Action::requeue(Duration::from_secs(1)),
            ),
            Target::Deleted { last_known: None } => ("deleted, gone", Action::await_change()),
        };
        let uid = request.owner_uid.as_deref().map(str::to_owned);
        seen.lock().push((what, uid));
        Ok::<_, std::convert::Infallible>(action)
    };
    let tasks = [
        run_informer(&informer, &stop),
        run_controller(controller, &stop, Arc::clone(&seen), reconcile),
    ];
    // Or the rerun dropped: the test then fails on its counts, not on a timeout.
    eventually("the live object reconciled", || !seen.lock().is_empty()).await;
    delete.send_replace(true);
    eventually("the deletion run again, or its rerun dropped", || {
        seen.lock().len() >= 3 || stats.stats().unplaced > 0
    })
    .await;
    stop.cancel();
    for task in tasks {
        task.await.expect("no panic");
    }
    let gone = Some("uid-000".to_owned());
    assert_eq!(
        *seen.lock(),
        vec![
            ("live", None),
            ("deleted, last known", None),
            ("deleted, gone", gone)
        ]
    );
    let stats = stats.stats();
    assert_eq!(stats.unplaced, 0, "no rerun dropped for want of a shard");
    let shard = shard_of_uid("uid-000") as usize;
    assert_eq!(stats.shards[shard].reconciles, 3, "{stats:?}");
}

/// A source of fixed objects whose lists after the first wait until `open` is true.
struct Gated<T> {
    items: Vec<Arc<T>>,
    lists: std::sync::atomic::AtomicUsize,
    open: watch::Receiver<bool>,
}

impl<T: Send + Sync + 'static> ListerWatcher<T> for Gated<T> {
    async fn list(&self, _: &ListParams) -> Result<ListPage<T>, Error> {
        let n = self.lists.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        if n > 0 {
            let mut open = self.open.clone();
            let _ = open.wait_for(|o| *o).await;
        }
        Ok(ListPage::new(self.items.clone(), "1"))
    }

    async fn watch(&self, _: &WatchParams) -> Result<WatchStream<T>, Error> {
        Ok(futures::stream::pending().boxed())
    }
}

/// A term begins only once every cache holds its shard: while the children's relist at the new
/// shard set is held back, the owners (already relisted) are not reconciled, so no reconcile
/// reads a children cache without the children the previous owner made; once it is in, every
/// owner is reconciled, each seeing its child.
#[tokio::test(start_paused = true)]
async fn a_term_begins_only_once_every_cache_has_listed_its_shard() {
    let owners: Vec<Arc<Obj>> = (0..16)
        .map(|i| {
            Arc::new(Obj {
                name: format!("obj-{i:03}"),
                uid: format!("uid-{i:03}"),
                rv: "1".into(),
            })
        })
        .collect();
    let kids = owners.iter().map(|o| {
        Arc::new(Child {
            name: format!("child-of-{}", o.name),
            owner: o.name.clone(),
            owner_uid: o.uid.clone(),
        })
    });
    let (open, gate) = watch::channel(false);
    let children = Arc::new(
        SharedIndexInformer::builder(
            Arc::new(Gated {
                items: kids.collect(),
                lists: Default::default(),
                open: gate,
            }),
            ChildIdentity,
        )
        .name("children")
        .shard_by(ShardBy::Owner)
        .build(),
    );
    let owners_informer = Arc::new(
        SharedIndexInformer::builder(Arc::new(Fixed(owners.clone())), ObjIdentity)
            .name("owners")
            .build(),
    );
    let runner = ShardRunner::new(MemoryLeases::new(), ShardConfig::new("ctl", "a", SHARDS))
        .expect("a valid configuration");
    let controller = Controller::new(Arc::clone(&owners_informer))
        .owns(Arc::clone(&children), |c: &Child| vec![c.owner.clone()])
        .sharded(runner.clone());
    let stats = controller.shard_stats().expect("sharded");
    let stop = CancellationToken::new();
    // Each reconcile: its key, and whether its child was in the children's cache.
    type Seen = Arc<(Mutex<Vec<(String, bool)>>, Arc<SharedIndexInformer<Child>>)>;
    let seen: Seen = Arc::new((Mutex::default(), Arc::clone(&children)));
    let reconcile = |request: informer_runtime::Request<Obj>, seen: Seen| async move {
        let child = format!("child-of-{}", request.key);
        let cached = seen.1.lister().get(&child).is_some();
        seen.0.lock().push((request.key.to_string(), cached));
        Ok::<_, std::convert::Infallible>(Action::await_change())
    };
    let mut tasks = vec![
        tokio::spawn({
            let (informer, stop) = (Arc::clone(&owners_informer), stop.clone());
            async move { informer.run(stop).await.expect("runs") }
        }),
        tokio::spawn({
            let (informer, stop) = (Arc::clone(&children), stop.clone());
            async move { informer.run(stop).await.expect("runs") }
        }),
    ];
    tasks.push(tokio::spawn({
        let (stop, seen) = (stop.clone(), Arc::clone(&seen));
        async move {
            let policy = |_: &_, _: &_, _: &_| Action::backoff();
            let ran = controller.run(stop, seen, reconcile, policy).await;
            ran.expect("the controller runs");
        }
    }));
    eventually("every shard held, the owners relisted", || {
        runner.status().owned.len() == SHARDS as usize
            && owners_informer.lister().keys().len() == owners.len()
    })
    .await;
    tokio::time::sleep(Duration::from_secs(60)).await;
    assert!(seen.0.lock().is_empty(), "{:?}", seen.0.lock());
    let waiting = stats.stats().shards;
    assert!(waiting.iter().all(|s| s.owned && !s.begun), "{waiting:?}");
    // Each term has waited a minute: told in the counters (and at WARN, once).
    assert!(
        waiting
            .iter()
            .all(|s| s.waiting_for.is_some_and(|w| w >= SHARD_WAIT_WARNING)),
        "{waiting:?}"
    );

    open.send_replace(true);
    eventually("every owner reconciled", || {
        seen.0.lock().len() >= owners.len()
    })
    .await;
    let runs = seen.0.lock().clone();
    assert!(runs.iter().all(|(_, cached)| *cached), "{runs:?}");
    let keys: BTreeSet<String> = runs.into_iter().map(|(k, _)| k).collect();
    assert_eq!(keys.len(), owners.len());
    let begun = stats.stats().shards;
    assert!(
        begun.iter().all(|s| s.begun && s.waiting_for.is_none()),
        "{begun:?}"
    );
    stop.cancel();
    for task in tasks {
        task.await.expect("no panic");
    }
}
