//! Leader election against the API server simulator, through kube-client: `KubeLease` against
//! a real Lease, and seeded fault schedules on three replicas — the leader crashed, cut off
//! (its requests failing or hanging), stopped, the server restarted — checked on the recorded
//! history: at no instant do two replicas lead, and after each fault a replica leads again
//! within a lease duration and a retry period (plus a request's worth of slack).
//!
//! Then the shard assignment on the same server: three replicas agree on eight shards through
//! real Leases, one cut off, one stopped.
//!
//! `ELECTION_SEEDS` sets how many seeds run (default 4), `ELECTION_FIRST_SEED` the first.

use std::sync::Arc;
use std::time::{Duration, Instant};

use informer_apiserver::{ApiServer, Config, Failure, Isolation};
use informer_leaderelection::{
    ElectionConfig, KubeLease, KubeLeases, LeaderCallbacks, LeaderElector, LeaderRecord, LeaseLock,
    LockError, ShardConfig, ShardRunner, Timings, desired_owner,
};
use parking_lot::Mutex;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

const LEASE: Duration = Duration::from_secs(2);
const DEADLINE: Duration = Duration::from_millis(1200);
const RETRY: Duration = Duration::from_millis(300);
/// What a takeover may take beyond `LEASE + RETRY`: requests over loopback HTTP on a busy
/// machine.
const SLACK: Duration = Duration::from_millis(700);

fn client(server: &ApiServer, identity: &str) -> kube::Client {
    let mut config = kube::Config::new(server.url().parse().expect("a URL"));
    config.auth_info.token = Some(identity.to_owned().into());
    kube::Client::try_from(config).expect("a client")
}

#[tokio::test]
async fn kube_lease_creates_updates_with_preconditions_and_loses_races() {
    let server = ApiServer::start(Config::default().with_core_types())
        .await
        .expect("server");
    let lock = KubeLease::new(client(&server, "a"), "kube-system", "my-controller");
    assert_eq!(lock.describe(), "leases/kube-system/my-controller");
    assert!(lock.get().await.expect("get").is_none(), "no lease yet");
    let record = LeaderRecord {
        holder: Some("a".into()),
        lease_duration: Duration::from_secs(15),
        acquire_time: Some(std::time::SystemTime::now()),
        renew_time: Some(std::time::SystemTime::now()),
        transitions: 0,
    };
    let created = lock.create(&record).await.expect("create");
    assert!(matches!(
        lock.create(&record).await,
        Err(LockError::AlreadyExists)
    ));
    let read = lock.get().await.expect("get").expect("the lease");
    assert_eq!(read.version, created.version);
    assert_eq!(read.record.holder.as_deref(), Some("a"));
    assert_eq!(read.record.lease_duration, Duration::from_secs(15));
    let renewed = lock
        .update(
            &read.version,
            &LeaderRecord {
                transitions: 1,
                ..record.clone()
            },
        )
        .await
        .expect("update with the current version");
    assert_ne!(renewed.version, read.version);
    assert!(
        matches!(
            lock.update(&read.version, &record).await,
            Err(LockError::Conflict)
        ),
        "a stale version is a lost race"
    );
    let stored = lock.get().await.expect("get").expect("the lease").record;
    assert_eq!(stored.transitions, 1);
    server.shutdown().await;
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mark {
    Started,
    Stopped,
}

type History = Arc<Mutex<Vec<(Instant, usize, Mark)>>>;

struct Recorder {
    replica: usize,
    history: History,
}

impl LeaderCallbacks for Recorder {
    fn started_leading(&self, _term: u64) {
        self.history
            .lock()
            .push((Instant::now(), self.replica, Mark::Started));
    }
    fn stopped_leading(&self, _term: u64) {
        self.history
            .lock()
            .push((Instant::now(), self.replica, Mark::Stopped));
    }
}

struct Replica {
    name: String,
    elector: LeaderElector,
    stop: CancellationToken,
    task: Option<JoinHandle<()>>,
}

impl Replica {
    fn start(&mut self) {
        self.stop = CancellationToken::new();
        let (elector, stop) = (self.elector.clone(), self.stop.clone());
        self.task = Some(tokio::spawn(async move { elector.run(stop).await }));
    }
}

/// The worst takeover of a seed, and its fault count.
struct SeedRun {
    /// Per fault kind ([`FAULTS`]): how many fired, and the longest time without a leader.
    faults: [usize; 5],
    worst: [Duration; 5],
}

/// The faults, by number.
const FAULTS: [&str; 5] = [
    "leader crashed",
    "leader cut off (failing)",
    "leader cut off (hanging)",
    "leader stopped",
    "server restarted",
];

async fn wait_for_leader(
    replicas: &[Replica],
    eligible: impl Fn(usize) -> bool,
    bound: Duration,
) -> Option<Duration> {
    let begun = Instant::now();
    loop {
        if replicas
            .iter()
            .enumerate()
            .any(|(i, r)| eligible(i) && r.elector.is_leader())
        {
            return Some(begun.elapsed());
        }
        if begun.elapsed() > bound {
            return None;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

async fn run_seed(seed: u64) -> Result<SeedRun, String> {
    let mut rng = fastrand::Rng::with_seed(seed);
    let server = ApiServer::start(Config::default().with_core_types())
        .await
        .map_err(|e| e.to_string())?;
    let history = History::default();
    let mut replicas: Vec<Replica> = (0..3)
        .map(|i| {
            let name = format!("replica-{i}");
            let lock = KubeLease::new(client(&server, &name), "kube-system", "chaos");
            let config = ElectionConfig::new(&name).timings(LEASE, DEADLINE, RETRY);
            let elector = LeaderElector::new(lock, config)
                .expect("valid timings")
                .with_callbacks(Recorder {
                    replica: i,
                    history: Arc::clone(&history),
                });
            Replica {
                name,
                elector,
                stop: CancellationToken::new(),
                task: None,
            }
        })
        .collect();
    for r in &mut replicas {
        r.start();
    }
    let bound = LEASE + RETRY + SLACK;
    let (mut faults, mut worst) = ([0; 5], [Duration::ZERO; 5]);
    let rounds = 6;
    for round in 0..rounds {
        let Some(_) = wait_for_leader(&replicas, |_| true, bound).await else {
            return Err(format!(
                "seed {seed} round {round}: no leader before the fault"
            ));
        };
        tokio::time::sleep(Duration::from_millis(rng.u64(0..800))).await;
        let Some(leader) = replicas.iter().position(|r| r.elector.is_leader()) else {
            continue; // it changed hands meanwhile: the next round
        };
        let fault = rng.usize(0..5);
        let name = replicas[leader].name.clone();
        match fault {
            0 => {
                // A crash: the task is gone, nothing released.
                if let Some(task) = replicas[leader].task.take() {
                    task.abort();
                    let _ = task.await;
                }
            }
            1 => server
                .faults()
                .isolate(&name, Isolation::Fail(Failure::unavailable())),
            2 => server.faults().isolate(&name, Isolation::Hang),
            3 => {
                replicas[leader].stop.cancel();
                if let Some(task) = replicas[leader].task.take() {
                    let _ = task.await;
                }
            }
            _ => server.faults().restart(),
        }
        // After a restart any replica may lead on; otherwise another one must take over.
        let eligible = |i: usize| fault == 4 || i != leader;
        let Some(took) = wait_for_leader(&replicas, eligible, bound).await else {
            return Err(format!(
                "seed {seed} round {round}: fault {fault} on {name}: no leader within {bound:?}"
            ));
        };
        faults[fault] += 1;
        worst[fault] = worst[fault].max(took);
        // The faulty replica comes back.
        server.faults().heal_all();
        if replicas[leader].task.is_none() {
            replicas[leader].start();
        }
    }
    for r in &mut replicas {
        r.stop.cancel();
        if let Some(task) = r.task.take() {
            let _ = tokio::time::timeout(Duration::from_secs(10), task).await;
        }
    }
    server.shutdown().await;
    check_history(&history).map_err(|e| format!("seed {seed}: {e}"))?;
    Ok(SeedRun { faults, worst })
}

/// At no instant do two replicas lead.
fn check_history(history: &History) -> Result<(), String> {
    let mut leading: Option<(usize, Instant)> = None;
    for (at, replica, mark) in history.lock().iter() {
        match (mark, leading) {
            (Mark::Started, None) => leading = Some((*replica, *at)),
            (Mark::Started, Some((other, since))) => {
                return Err(format!(
                    "replica {replica} started leading while replica {other} led (since {:?})",
                    at.duration_since(since)
                ));
            }
            (Mark::Stopped, Some((who, _))) if who == *replica => leading = None,
            (Mark::Stopped, _) => {
                return Err(format!("replica {replica} stopped a term it did not hold"));
            }
        }
    }
    Ok(())
}

fn env_u64(name: &str) -> Option<u64> {
    std::env::var(name).ok()?.parse().ok()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_replicas_under_faults_never_lead_at_once_and_recover_in_bound() {
    let first = env_u64("ELECTION_FIRST_SEED").unwrap_or(0);
    let count = env_u64("ELECTION_SEEDS").unwrap_or(4);
    let runs: Vec<_> = (first..first + count)
        .map(|seed| tokio::spawn(run_seed(seed)))
        .collect();
    let (mut faults, mut worst, mut failures) = ([0; 5], [Duration::ZERO; 5], Vec::new());
    for run in runs {
        match run.await.expect("no panic") {
            Ok(seed) => {
                for kind in 0..FAULTS.len() {
                    faults[kind] += seed.faults[kind];
                    worst[kind] = worst[kind].max(seed.worst[kind]);
                }
            }
            Err(e) => failures.push(e),
        }
    }
    println!(
        "{count} seeds, {} faults, {} failures; bound on the time without a leader {:?}",
        faults.iter().sum::<usize>(),
        failures.len(),
        LEASE + RETRY + SLACK,
    );
    for kind in 0..FAULTS.len() {
        println!(
            "  {:<26} {:>4} times, worst time without an eligible leader {:?}",
            FAULTS[kind], faults[kind], worst[kind]
        );
    }
    assert!(failures.is_empty(), "{failures:#?}");
}

/// Polls (every 20 ms, up to `bound`) until every shard is owned by its desired owner among
/// `members`; at every poll, no shard has two owners. Returns how long it took.
async fn settle(
    runners: &[ShardRunner],
    members: &[&str],
    bound: Duration,
) -> Result<Duration, String> {
    let begun = Instant::now();
    loop {
        let owned: Vec<_> = runners.iter().map(|r| r.status().owned).collect();
        let mut settled = true;
        for shard in 0..SHARDS {
            let owners: Vec<&str> = runners
                .iter()
                .zip(&owned)
                .filter(|(_, o)| o.contains(&shard))
                .map(|(r, _)| r.config().identity.as_str())
                .collect();
            if owners.len() > 1 {
                return Err(format!("shard {shard} owned by {owners:?}"));
            }
            settled &= owners.first().copied() == desired_owner(members.iter().copied(), shard);
        }
        if settled {
            return Ok(begun.elapsed());
        }
        if begun.elapsed() > bound {
            return Err(format!(
                "not settled on {members:?} within {bound:?}: {owned:?}"
            ));
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

const SHARDS: u32 = 8;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shard_assignment_on_real_leases_survives_a_partition_and_a_stop() {
    use k8s_openapi::api::coordination::v1::Lease;
    let server = ApiServer::start(Config::default().with_core_types())
        .await
        .expect("server");
    let names = ["a", "b", "c"];
    let runners: Vec<ShardRunner> = names
        .iter()
        .map(|name| {
            let config = ShardConfig::new("sharded", *name, SHARDS)
                .timings(Timings::new(LEASE, DEADLINE, RETRY));
            ShardRunner::new(
                KubeLeases::new(client(&server, name), "kube-system"),
                config,
            )
            .expect("valid")
        })
        .collect();
    let stops: Vec<CancellationToken> = names.iter().map(|_| CancellationToken::new()).collect();
    let mut tasks: Vec<Option<JoinHandle<()>>> = runners
        .iter()
        .zip(&stops)
        .map(|(r, s)| {
            let (r, s) = (r.clone(), s.clone());
            Some(tokio::spawn(async move { r.run(s).await }))
        })
        .collect();
    settle(&runners, &names, LEASE + SLACK)
        .await
        .expect("settled on a, b, c");

    // The Leases on the server: one per shard, held by its desired owner, one per member.
    let leases: kube::Api<Lease> = kube::Api::namespaced(client(&server, "reader"), "kube-system");
    let listed = leases.list(&Default::default()).await.expect("list");
    let holder = |name: &str| {
        listed
            .items
            .iter()
            .find(|l| l.metadata.name.as_deref() == Some(name))
            .and_then(|l| l.spec.as_ref()?.holder_identity.clone())
    };
    for shard in 0..SHARDS {
        let name = format!("sharded-shard-{shard}");
        assert_eq!(
            holder(&name).as_deref(),
            desired_owner(names, shard),
            "{name}"
        );
    }
    for runner in &runners {
        let config = runner.config();
        assert_eq!(
            holder(&config.member_lease()).as_deref(),
            Some(config.identity.as_str())
        );
    }

    // c cut off: its terms end at its deadline; a and b take its shards once their Leases expire.
    let c_shards = runners[2].status().owned;
    server
        .faults()
        .isolate("c", Isolation::Fail(Failure::unavailable()));
    let took = settle(&runners, &["a", "b"], 2 * LEASE + 2 * RETRY + SLACK)
        .await
        .expect("settled on a, b");
    assert!(
        c_shards.is_empty() || took >= LEASE - RETRY,
        "c's shards taken after {took:?}"
    );
    assert!(runners[2].status().owned.is_empty());
    server.faults().heal_all();
    settle(&runners, &names, LEASE + SLACK)
        .await
        .expect("c back");

    // b stopped: it hands its shards over and releases their Leases; a and c take them at once.
    stops[1].cancel();
    tasks[1].take().expect("b runs").await.expect("b stopped");
    let took = settle(&runners, &["a", "c"], 3 * RETRY + SLACK)
        .await
        .expect("settled on a, c");
    assert!(
        took < LEASE,
        "released Leases are taken without waiting for them to expire"
    );
    assert!(runners[1].stats().handed_off > 0);

    for (stop, task) in stops.iter().zip(&mut tasks) {
        stop.cancel();
        if let Some(task) = task.take() {
            task.await.expect("stopped");
        }
    }
    server.shutdown().await;
}
