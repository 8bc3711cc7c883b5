//! The sharded controller scenario: the chaos controller ([`controller`](crate::controller):
//! one child ConfigMap per pod) run as 3 to 5 replicas that split the pods between them by the
//! hash of their UID, in shards assigned through Leases (`Controller::sharded`), each replica
//! with its own kube client, informers (caching only its shards) and queue.
//!
//! Through a seed's churn and faults, the replicas are killed (their task aborted: every
//! future dropped where it stands, no Lease released), cut off from the server for a while
//! (every request of theirs failing, or hanging until healed) and joined by new ones, as the
//! seed's [`ReplicaPlan`] says. Every reconcile is written into one [`Ledger`] with its
//! replica, key, pod UID, what it saw of the pod, and its start and end. Once the churn stops
//! and every cut is healed, the run waits (within [`SETTLE_BOUND`]) until the world on the
//! server has converged (as the controller scenario's check has it), every shard has one
//! owner, each replica's caches hold exactly its shards' objects as the server has them, and
//! every pod's last reconcile saw its final version; then it stops the replicas and checks the
//! ledger: **no two replicas ever reconciled one object at overlapping times**.
//!
//! The same scenario runs with each replica in a process of its own ([`process`]), killed
//! with `SIGKILL`.

use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::sync::Arc;
use std::time::{Duration, Instant};

use informer_apiserver::{ApiServer, Failure as ServerFailure, Isolation};
use informer_leaderelection::ShardStats;
use k8s_openapi::api::core::v1::{ConfigMap, Pod};
use tokio::task::JoinHandle;

use crate::controller::{key_of, server_world, shown, world_differences};
use crate::journal::{WriteLog, revision_of};
use crate::runner::{Failure, SETTLE_BOUND, Suite, on_a_runtime_of_its_own, start_server};
use crate::scenario::{Scenario, Step};
use crate::stack::{apply, calm, inject};

pub mod ledger;
pub mod plan;
pub mod process;
pub mod replica;
mod tally;

pub use self::ledger::{Entry, Ledger, Saw, finals, overlaps};
pub use self::plan::{Cut, ReplicaEvent, ReplicaPlan};
pub use self::replica::{Replica, ReplicaOptions};
pub use self::tally::{ShardedTally, run_sharded_seeds};

/// What a passing sharded run did.
#[derive(Debug, Clone, Default)]
pub struct ShardedOutcome {
    /// The seed.
    pub seed: u64,
    /// Replicas started, joins included.
    pub replicas: usize,
    /// Reconciles, every replica together (all of them checked for overlaps).
    pub reconciles: u64,
    /// Shard terms started, every replica together (the initial assignment included).
    pub terms_started: u64,
    /// Terms handed over gracefully.
    pub handed_off: u64,
    /// Terms lost at the renew deadline (a cut-off replica).
    pub lost: u64,
    /// Live pods whose last reconcile saw their final version.
    pub final_live: usize,
    /// Pods gone whose last reconcile saw their deletion.
    pub final_deleted: usize,
    /// Pods gone whose deletion no reconcile saw (nothing of them was left to clean up).
    pub unseen_deletions: usize,
    /// Faults and replica events fired, by kind.
    pub faults: BTreeMap<&'static str, u64>,
    /// Pods on the server at the end.
    pub pods: usize,
    /// From the end of the churn to a converged, quiet world.
    pub settled_in: Duration,
    /// The whole run.
    pub wall: Duration,
}

impl fmt::Display for ShardedOutcome {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "seed {} passed: {} replicas, {} reconciles checked (0 overlaps), {} terms started, \
             {} handed off, {} lost, {} faults and replica events, {} pods at their final \
             version, {} deletions seen ({} unseen, nothing left), settled in {:.2?}, {:.2?} \
             in all",
            self.seed,
            self.replicas,
            self.reconciles,
            self.terms_started,
            self.handed_off,
            self.lost,
            self.faults.values().sum::<u64>(),
            self.final_live,
            self.final_deleted,
            self.unseen_deletions,
            self.settled_in,
            self.wall
        )
    }
}

/// How long each step of a sharded seed takes at least: 150 steps span about 6 s, three lease
/// durations, so that shards move (and partitions outlast a renew deadline) while the churn
/// goes on rather than after it.
pub const STEP_PACE: Duration = Duration::from_millis(40);

/// What the churn does to a run's replicas, in this process or in processes of their own.
pub(crate) trait Replicas {
    /// The names of the running replicas, in the order they started.
    fn names(&self) -> Vec<String>;
    /// Starts a new replica.
    async fn join(&mut self) -> Result<(), String>;
    /// Kills the running replica at `index` (of [`names`](Self::names)).
    async fn kill(&mut self, index: usize) -> Result<(), String>;
}

/// The partitions under way: each replica cut off is healed after its hold, or at the calm.
#[derive(Default)]
pub(crate) struct Cuts {
    heals: Vec<JoinHandle<()>>,
}

impl Cuts {
    /// Cuts `name` off from `server` for `hold`.
    pub(crate) fn cut(&mut self, server: &ApiServer, name: String, cut: Cut, hold: Duration) {
        let isolation = match cut {
            Cut::Fail => Isolation::Fail(ServerFailure::unavailable()),
            Cut::Hang => Isolation::Hang,
        };
        let faults = server.faults();
        faults.isolate(&name, isolation);
        self.heals.push(tokio::spawn(async move {
            tokio::time::sleep(hold).await;
            faults.heal(&name);
        }));
    }

    /// Ends every cut: the heals scheduled are dropped, every replica healed.
    pub(crate) async fn heal_all(&mut self, server: &ApiServer) {
        for heal in self.heals.drain(..) {
            heal.abort();
            let _ = heal.await;
        }
        server.faults().heal_all();
    }
}

/// Applies the scenario's steps and the plan's replica events, then calms the server and heals
/// every cut: the faults and events fired, and what went wrong.
pub(crate) async fn churn<R: Replicas>(
    scenario: &Scenario,
    server: &ApiServer,
    plan: &ReplicaPlan,
    replicas: &mut R,
) -> (BTreeMap<&'static str, u64>, Vec<String>) {
    let writes = WriteLog::default();
    let mut cuts = Cuts::default();
    let mut faults: BTreeMap<&'static str, u64> = BTreeMap::new();
    let mut problems = Vec::new();
    let mut events = plan.steps.iter().peekable();
    for (i, step) in scenario.steps.iter().enumerate() {
        if !problems.is_empty() {
            break;
        }
        let paced = tokio::time::sleep(STEP_PACE);
        match step {
            Step::Op(op) => problems.extend(apply(server, op, &writes).err()),
            Step::Fault(fault) => {
                inject(server, fault);
                *faults.entry(fault.kind()).or_default() += 1;
            }
            Step::Pause(ms) => tokio::time::sleep(Duration::from_millis(*ms)).await,
        }
        while let Some((_, event)) = events.next_if(|(at, _)| *at <= i) {
            let names = replicas.names();
            let done = match event {
                ReplicaEvent::Join => replicas.join().await,
                ReplicaEvent::Kill { pick } => replicas.kill(pick % names.len()).await,
                ReplicaEvent::Partition { pick, cut, hold } => {
                    cuts.cut(server, names[pick % names.len()].clone(), *cut, *hold);
                    Ok(())
                }
            };
            match done {
                Ok(()) => *faults.entry(event.kind()).or_default() += 1,
                Err(e) => problems.push(e),
            }
        }
        paced.await;
    }
    calm(server);
    cuts.heal_all(server).await;
    (faults, problems)
}

/// The replicas of a run (in this process, or processes of their own) and what they share:
/// where the server is, how they list and watch, the ledger, and the counts of those gone.
pub(crate) struct Roster<R> {
    pub(crate) url: String,
    pub(crate) options: ReplicaOptions,
    pub(crate) ledger: Arc<Ledger>,
    pub(crate) running: Vec<R>,
    pub(crate) started: usize,
    /// Shard stats of the replicas gone, summed.
    pub(crate) gone: ShardStats,
}

impl<R> Roster<R> {
    /// No replica yet, for the server at `url`.
    pub(crate) fn new(url: String, options: ReplicaOptions) -> Self {
        Self {
            url,
            options,
            ledger: Arc::new(Ledger::default()),
            running: Vec::new(),
            started: 0,
            gone: ShardStats::default(),
        }
    }

    /// The name of the next replica to start, counted as started.
    pub(crate) fn next_name(&mut self) -> String {
        self.started += 1;
        format!("replica-{}", self.started - 1)
    }
}

/// The replicas of a run, in this process.
type Fleet = Roster<Replica>;

impl Replicas for Fleet {
    fn names(&self) -> Vec<String> {
        self.running.iter().map(|r| r.name.clone()).collect()
    }

    async fn join(&mut self) -> Result<(), String> {
        let name = self.next_name();
        let replica = Replica::start(&name, &self.url, &self.options, Arc::clone(&self.ledger))?;
        self.running.push(replica);
        Ok(())
    }

    async fn kill(&mut self, index: usize) -> Result<(), String> {
        let replica = self.running.remove(index);
        add_stats(&mut self.gone, replica.runner.stats());
        replica.kill().await;
        Ok(())
    }
}

impl Fleet {
    fn stats(&self) -> ShardStats {
        let mut sum = self.gone;
        for replica in &self.running {
            add_stats(&mut sum, replica.runner.stats());
        }
        sum
    }
}

pub(crate) fn add_stats(sum: &mut ShardStats, s: ShardStats) {
    sum.started += s.started;
    sum.handed_off += s.handed_off;
    sum.lost += s.lost;
}

/// Runs the sharded scenario of `scenario` on the current runtime: starts the simulator and
/// the replicas, applies the steps and the replica plan, heals, waits for convergence, stops
/// every replica and checks the ledger.
pub async fn run_sharded(scenario: &Scenario) -> Result<ShardedOutcome, Failure> {
    let begun = Instant::now();
    let fail = |problems: Vec<String>| Failure::of(scenario, Suite::Sharded, problems);
    let server = start_server(scenario).await.map_err(|e| fail(vec![e]))?;
    let outcome = drive(scenario, &server).await;
    server.shutdown().await;
    let mut outcome = outcome.map_err(fail)?;
    outcome.wall = begun.elapsed();
    Ok(outcome)
}

/// The replicas' options for `scenario`'s server settings.
pub fn options_of(scenario: &Scenario, shards: u32) -> ReplicaOptions {
    ReplicaOptions {
        shards,
        min_watch_timeout: Duration::from_secs(scenario.server.min_watch_timeout_secs),
        streaming_list: scenario.server.streaming_list,
        relist_by_page: scenario.server.relist_by_page,
        json_only: scenario.server.json_only,
    }
}

async fn drive(scenario: &Scenario, server: &ApiServer) -> Result<ShardedOutcome, Vec<String>> {
    let plan = ReplicaPlan::of(scenario);
    for op in &scenario.initial {
        apply(server, op, &WriteLog::default()).map_err(|e| vec![e])?;
    }
    let mut fleet = Fleet::new(server.url(), options_of(scenario, plan.shards));
    for _ in 0..plan.initial {
        fleet.join().await.map_err(|e| vec![e])?;
    }
    let (faults, mut problems) = churn(scenario, server, &plan, &mut fleet).await;
    let settled_in = if problems.is_empty() {
        let shards = fleet.options.shards;
        match settle(SETTLE_BOUND, || unsettled(server, &fleet, shards)).await {
            Ok(took) => took,
            Err(differences) => {
                let unplaced = fleet.running.iter().map(|r| (r.name.clone(), r.unplaced()));
                problems.extend(unconverged(differences, unplaced));
                SETTLE_BOUND
            }
        }
    } else {
        SETTLE_BOUND
    };
    let stats = fleet.stats();
    for replica in fleet.running.drain(..) {
        problems.extend(shown(replica.tally.violations.lock().clone()));
        problems.extend(replica.stop(SETTLE_BOUND).await);
    }
    let facts = RunFacts {
        replicas: fleet.started,
        stats,
        faults,
        settled_in,
    };
    verdict(scenario, server, &fleet.ledger.entries(), facts, problems)
}

/// What a run's replicas did, beside its ledger.
pub(crate) struct RunFacts {
    /// Replicas started.
    pub(crate) replicas: usize,
    /// Their shard terms, summed.
    pub(crate) stats: ShardStats,
    /// Faults and replica events fired.
    pub(crate) faults: BTreeMap<&'static str, u64>,
    /// The settle time.
    pub(crate) settled_in: Duration,
}

/// The problems of a world that did not settle: what differs, and the keys each replica
/// dropped unplaced (`(name, count)`).
pub(crate) fn unconverged(
    differences: Vec<String>,
    unplaced: impl Iterator<Item = (String, u64)>,
) -> Vec<String> {
    let mut problems = vec![format!(
        "no convergence within {SETTLE_BOUND:?} after the churn and faults stopped:"
    )];
    problems.extend(shown(differences));
    let unplaced: Vec<String> = unplaced.map(|(name, n)| format!("{name} {n}")).collect();
    problems.push(format!(
        "keys dropped unplaced (neither cached nor a remembered deletion), by running \
         replica: {}",
        unplaced.join(", ")
    ));
    problems
}

/// Checks the ledger (no overlaps, final versions against the server) after the replicas
/// stopped, and gives the run's outcome, or every problem with a summary of the ledger.
pub(crate) fn verdict(
    scenario: &Scenario,
    server: &ApiServer,
    entries: &[Entry],
    facts: RunFacts,
    mut problems: Vec<String>,
) -> Result<ShardedOutcome, Vec<String>> {
    let found = overlaps(entries);
    problems.extend(shown(found.iter().map(ToString::to_string).collect()));
    let live = live_pods(server).map_err(|e| vec![e])?;
    let checked = finals(entries, &live);
    problems.extend(shown(checked.problems));
    let stats = facts.stats;
    if !problems.is_empty() {
        let events: Vec<String> = facts
            .faults
            .iter()
            .filter(|(kind, _)| kind.starts_with("replica-"))
            .map(|(kind, n)| format!("{kind} {n}"))
            .collect();
        problems.push(format!(
            "the ledger: {} reconciles by {} replicas, {} overlaps; shard terms started {}, \
             handed off {}, lost {}; replica events: {}",
            entries.len(),
            facts.replicas,
            found.len(),
            stats.started,
            stats.handed_off,
            stats.lost,
            events.join(", ")
        ));
        return Err(problems);
    }
    Ok(ShardedOutcome {
        seed: scenario.seed,
        replicas: facts.replicas,
        reconciles: entries.len() as u64,
        terms_started: stats.started,
        handed_off: stats.handed_off,
        lost: stats.lost,
        final_live: checked.live,
        final_deleted: checked.deleted,
        unseen_deletions: checked.unseen_deletions,
        faults: facts.faults,
        pods: live.len(),
        settled_in: facts.settled_in,
        wall: Duration::ZERO,
    })
}

/// The server's pods, by key: UID and revision.
pub fn live_pods(server: &ApiServer) -> Result<HashMap<String, (String, u64)>, String> {
    let (pods, _) = server
        .list::<Pod>(None)
        .map_err(|e| format!("listing the server's pods: {e}"))?;
    Ok(pods.iter().map(pod_state).collect())
}

fn pod_state(pod: &Pod) -> (String, (String, u64)) {
    (
        key_of(pod),
        (
            pod.metadata.uid.clone().unwrap_or_default(),
            revision_of(pod.metadata.resource_version.as_deref()),
        ),
    )
}

/// What still keeps a sharded world from having settled: the world on the server, the shard
/// owners, each replica's caches against its shards, its queue, and the last reconciles.
fn unsettled(server: &ApiServer, fleet: &Fleet, shards: u32) -> Vec<String> {
    let (pods, config_maps) = match server_world(server) {
        Ok(world) => world,
        Err(e) => return vec![e],
    };
    let mut problems = world_differences(&pods, &config_maps);
    let mut owners: BTreeMap<u32, Vec<&str>> = BTreeMap::new();
    for replica in &fleet.running {
        for shard in replica.runner.status().owned {
            owners.entry(shard).or_default().push(&replica.name);
        }
    }
    for shard in 0..shards {
        match owners.get(&shard).map(Vec::as_slice) {
            Some([_]) => {}
            other => problems.push(format!("shard {shard} owned by {other:?}")),
        }
    }
    for replica in &fleet.running {
        problems.extend(cache_differences(replica, &pods, &config_maps));
        if !replica.queue.is_empty() || replica.queue.in_flight() > 0 {
            problems.push(format!("{} is busy", replica.name));
        }
    }
    if problems.is_empty() {
        let live: HashMap<_, _> = pods.iter().map(pod_state).collect();
        problems.extend(finals(&fleet.ledger.entries(), &live).problems);
    }
    problems
}

/// Whether the objects of `server` that `in_shards` selects are exactly those of `cache`, at
/// the same versions.
fn same_objects<K: kube::Resource + 'static>(
    server: &[K],
    in_shards: impl Fn(&K) -> bool,
    cache: &informer_store::Lister<K>,
) -> bool {
    let version = |o: &K| (key_of(o), revision_of(o.meta().resource_version.as_deref()));
    let want: BTreeMap<String, u64> = server
        .iter()
        .filter(|o| in_shards(o))
        .map(version)
        .collect();
    let have: BTreeMap<String, u64> = cache
        .list(&informer_store::Everything)
        .iter()
        .map(|o| version(o))
        .collect();
    want == have
}

/// What differs between `replica`'s caches and the server's objects of its shards (pods by
/// their UID, ConfigMaps by their controller owner's).
fn cache_differences(replica: &Replica, pods: &[Pod], config_maps: &[ConfigMap]) -> Vec<String> {
    let Some(mine) = replica.owned() else {
        return Vec::new();
    };
    let pod_uid = |p: &Pod| p.metadata.uid.clone().unwrap_or_default();
    let owner_uid = |c: &ConfigMap| {
        let refs = c.metadata.owner_references.iter().flatten();
        let mut controller = refs.filter(|r| r.controller == Some(true));
        controller
            .next()
            .map(|r| r.uid.clone())
            .or_else(|| c.metadata.uid.clone())
            .unwrap_or_default()
    };
    let mut problems = Vec::new();
    if !same_objects(pods, |p| mine.matches(&pod_uid(p)), &replica.pods.lister()) {
        problems.push(format!(
            "{}: its pod cache is not its shards'",
            replica.name
        ));
    }
    let children = |c: &ConfigMap| mine.matches(&owner_uid(c));
    if !same_objects(config_maps, children, &replica.config_maps.lister()) {
        problems.push(format!(
            "{}: its config map cache is not its shards'",
            replica.name
        ));
    }
    problems
}

/// Polls `unsettled` every 20 ms, up to `bound`, until it finds nothing left: how long that
/// took, or what was left at the end.
pub(crate) async fn settle(
    bound: Duration,
    mut unsettled: impl FnMut() -> Vec<String>,
) -> Result<Duration, Vec<String>> {
    let begun = Instant::now();
    loop {
        let problems = unsettled();
        if problems.is_empty() {
            return Ok(begun.elapsed());
        }
        if begun.elapsed() > bound {
            return Err(problems);
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Runs the sharded scenario of `scenario` on a runtime of its own, then checks that the
/// runtime has no task left.
pub fn run_sharded_seed(scenario: &Scenario) -> Result<ShardedOutcome, Failure> {
    on_a_runtime_of_its_own(scenario, Suite::Sharded, run_sharded(scenario))
}
