//! Shard assignment on tokio's paused clock over in-memory Leases. Each replica reaches them
//! through a handle of its own, which a test cuts off as a partition would, and through a clock
//! of its own rate: a replica whose clock runs at rate `r` measures every duration `r` times
//! too fast (its timings, and the lease durations it reads, last `1/r` of real time).
//!
//! Each replica's consumer takes every term as it starts, and drops it a moment after it ends
//! (its work stopping). The history of terms — start, and the drop — is checked: no shard ever
//! has two replicas' terms at once.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use informer_leaderelection::{
    ConfigError, LeaderRecord, LeaseLock, LeaseStore, LockError, MAX_SHARDS, MemoryLeases,
    Observed, ShardConfig, ShardRunner, Timings, desired_owner,
};
use parking_lot::Mutex;
use tokio::task::JoinHandle;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

const LEASE: Duration = Duration::from_secs(15);
const DEADLINE: Duration = Duration::from_secs(10);
const RETRY: Duration = Duration::from_secs(2);
const NAME: &str = "ctl";

/// A replica's way to the Leases: its own reachability switch, its clock's rate, and a number
/// of updates to refuse with 409 Conflict (as if another replica wrote first).
#[derive(Clone)]
struct Linked {
    leases: MemoryLeases,
    rate: f64,
    conflicts: Arc<AtomicU32>,
}

impl Linked {
    /// A record as this replica's clock measures it.
    fn read(&self, mut observed: Observed) -> Observed {
        observed.record.lease_duration = observed.record.lease_duration.div_f64(self.rate);
        observed
    }

    /// A record as written: the lease it states is the nominal one, whatever its clock.
    fn written(&self, record: &LeaderRecord) -> LeaderRecord {
        let lease_duration = match record.holder {
            Some(_) => LEASE,
            None => Duration::from_secs(1),
        };
        LeaderRecord {
            lease_duration,
            ..record.clone()
        }
    }
}

struct LinkedLock {
    link: Linked,
    lock: Arc<dyn LeaseLock>,
}

#[async_trait::async_trait]
impl LeaseLock for LinkedLock {
    async fn get(&self) -> Result<Option<Observed>, LockError> {
        Ok(self.lock.get().await?.map(|o| self.link.read(o)))
    }
    async fn create(&self, record: &LeaderRecord) -> Result<Observed, LockError> {
        let created = self.lock.create(&self.link.written(record)).await?;
        Ok(self.link.read(created))
    }
    async fn update(&self, version: &str, record: &LeaderRecord) -> Result<Observed, LockError> {
        let refuse = self
            .link
            .conflicts
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| n.checked_sub(1));
        if refuse.is_ok() {
            return Err(LockError::Conflict);
        }
        let updated = self
            .lock
            .update(version, &self.link.written(record))
            .await?;
        Ok(self.link.read(updated))
    }
    fn describe(&self) -> String {
        self.lock.describe()
    }
}

#[async_trait::async_trait]
impl LeaseStore for Linked {
    fn lock(&self, name: &str) -> Arc<dyn LeaseLock> {
        Arc::new(LinkedLock {
            link: self.clone(),
            lock: self.leases.lock(name),
        })
    }
    async fn list(&self, prefix: &str) -> Result<Vec<(String, Observed)>, LockError> {
        let listed = self.leases.list(prefix).await?;
        Ok(listed.into_iter().map(|(n, o)| (n, self.read(o))).collect())
    }
    fn describe(&self) -> String {
        "linked".into()
    }
}

/// One term as the consumer saw it.
#[derive(Debug, Clone)]
struct Held {
    shard: u32,
    replica: String,
    start: Instant,
    /// When the consumer dropped the term (its work stopped); `None` while current.
    dropped: Option<Instant>,
}

type History = Arc<Mutex<Vec<Held>>>;

/// Follows `runner`'s terms: records each as it starts, and drops it `work` after it ends.
async fn consume(runner: ShardRunner, name: String, history: History, work: Duration) {
    let mut status = runner.subscribe();
    let mut taken = BTreeSet::new();
    loop {
        for term in runner.terms() {
            if !taken.insert((term.shard(), term.number())) {
                continue;
            }
            let index = {
                let mut history = history.lock();
                history.push(Held {
                    shard: term.shard(),
                    replica: name.clone(),
                    start: Instant::now(),
                    dropped: None,
                });
                history.len() - 1
            };
            let history = Arc::clone(&history);
            tokio::spawn(async move {
                term.ended().await;
                tokio::time::sleep(work).await;
                history.lock()[index].dropped = Some(Instant::now());
                drop(term);
            });
        }
        if status.changed().await.is_err() {
            return;
        }
    }
}

/// No shard has two replicas' terms at once (a term lasts from its start to its drop).
fn assert_no_overlap(history: &History) {
    let now = Instant::now();
    let history = history.lock();
    for (i, a) in history.iter().enumerate() {
        for b in &history[i + 1..] {
            if a.shard != b.shard || a.replica == b.replica {
                continue;
            }
            let (a_end, b_end) = (a.dropped.unwrap_or(now), b.dropped.unwrap_or(now));
            assert!(
                a_end <= b.start || b_end <= a.start,
                "shard {}: {} held it over {:?}..{:?} while {} held it over {:?}..{:?}",
                a.shard,
                a.replica,
                a.start,
                a_end,
                b.replica,
                b.start,
                b_end
            );
        }
    }
}

struct Replica {
    name: String,
    link: Linked,
    runner: ShardRunner,
    stop: CancellationToken,
    task: Option<JoinHandle<()>>,
}

impl Replica {
    fn new(
        name: &str,
        leases: &MemoryLeases,
        shards: u32,
        rate: f64,
        history: &History,
        work: Duration,
    ) -> Self {
        let link = Linked {
            leases: leases.handle(),
            rate,
            conflicts: Arc::default(),
        };
        let config = ShardConfig::new(NAME, name, shards).timings(Timings::new(
            LEASE.div_f64(rate),
            DEADLINE.div_f64(rate),
            RETRY.div_f64(rate),
        ));
        let runner = ShardRunner::new(link.clone(), config).expect("a valid config");
        tokio::spawn(consume(
            runner.clone(),
            name.to_owned(),
            Arc::clone(history),
            work,
        ));
        Self {
            name: name.to_owned(),
            link,
            runner,
            stop: CancellationToken::new(),
            task: None,
        }
    }

    fn start(&mut self) {
        self.stop = CancellationToken::new();
        let (runner, stop) = (self.runner.clone(), self.stop.clone());
        self.task = Some(tokio::spawn(async move { runner.run(stop).await }));
    }

    fn running(&self) -> bool {
        self.task.is_some()
    }

    /// A graceful stop: every shard handed over, the Leases released.
    async fn stop(&mut self) {
        self.stop.cancel();
        if let Some(task) = self.task.take() {
            task.await.expect("the runner's task");
        }
    }

    /// A crash: nothing released.
    async fn crash(&mut self) {
        if let Some(task) = self.task.take() {
            task.abort();
            let _ = task.await;
        }
    }

    fn owned(&self) -> BTreeSet<u32> {
        self.runner.status().owned
    }
}

/// Every shard owned by exactly its desired owner among the running replicas.
fn assert_settled(replicas: &[Replica], shards: u32) {
    let running: Vec<&str> = replicas
        .iter()
        .filter(|r| r.running())
        .map(|r| r.name.as_str())
        .collect();
    for shard in 0..shards {
        let owners: Vec<&str> = replicas
            .iter()
            .filter(|r| r.owned().contains(&shard))
            .map(|r| r.name.as_str())
            .collect();
        let desired = desired_owner(running.iter().copied(), shard);
        assert_eq!(
            owners,
            desired.into_iter().collect::<Vec<_>>(),
            "shard {shard}"
        );
    }
    for replica in replicas.iter().filter(|r| r.running()) {
        let mut expected: Vec<String> = running.iter().map(|s| s.to_string()).collect();
        expected.sort();
        assert_eq!(
            replica.runner.status().members,
            expected,
            "{}'s members",
            replica.name
        );
    }
}

/// Stops every replica gracefully, then checks the whole history.
async fn stop_all(all: &mut [Replica], history: &History) {
    for r in all.iter_mut() {
        r.stop().await;
    }
    assert_no_overlap(history);
}

/// Who owns each shard now.
fn owners(replicas: &[Replica], shards: u32) -> BTreeMap<u32, String> {
    (0..shards)
        .filter_map(|shard| {
            let owner = replicas.iter().find(|r| r.owned().contains(&shard))?;
            Some((shard, owner.name.clone()))
        })
        .collect()
}

fn replicas(names: &[&str], leases: &MemoryLeases, shards: u32, history: &History) -> Vec<Replica> {
    names
        .iter()
        .map(|n| Replica::new(n, leases, shards, 1.0, history, Duration::from_millis(500)))
        .collect()
}

#[tokio::test(start_paused = true)]
async fn a_join_moves_only_the_shards_rendezvous_hashing_moves() {
    const SHARDS: u32 = 32;
    let (leases, history) = (MemoryLeases::new(), History::default());
    let mut all = replicas(&["a", "b", "c", "d"], &leases, SHARDS, &history);
    for r in &mut all[..3] {
        r.start();
    }
    tokio::time::sleep(Duration::from_secs(30)).await;
    assert_settled(&all[..3], SHARDS);
    let before = owners(&all, SHARDS);
    assert_eq!(before.len(), SHARDS as usize, "every shard owned");
    // (Started together, the replicas first saw no one else and took shards they then handed
    // over: count from here.)
    let open_at_join: Vec<usize> = {
        let history = history.lock();
        (0..history.len())
            .filter(|i| history[*i].dropped.is_none())
            .collect()
    };
    assert_eq!(open_at_join.len(), SHARDS as usize, "one term per shard");
    let terms_before = history.lock().len();
    let handed_off =
        |all: &[Replica]| -> u64 { all.iter().map(|r| r.runner.stats().handed_off).sum() };
    let handed_before = handed_off(&all);

    all[3].start();
    tokio::time::sleep(Duration::from_secs(30)).await;
    assert_settled(&all, SHARDS);
    let after = owners(&all, SHARDS);
    let moved: BTreeSet<u32> = (0..SHARDS).filter(|s| before[s] != after[s]).collect();
    let expected: BTreeSet<u32> = (0..SHARDS)
        .filter(|s| desired_owner(["a", "b", "c"], *s) != desired_owner(["a", "b", "c", "d"], *s))
        .collect();
    assert_eq!(moved, expected);
    assert!(!moved.is_empty() && moved.iter().all(|s| after[s] == "d"));
    // The shards that stayed kept their term, never interrupted; each moved one has one new term.
    {
        let history = history.lock();
        assert_eq!(
            history.len(),
            terms_before + moved.len(),
            "one new term per moved shard"
        );
        for i in &open_at_join {
            let held = &history[*i];
            assert_eq!(
                held.dropped.is_some(),
                moved.contains(&held.shard),
                "shard {}",
                held.shard
            );
        }
    }
    assert_eq!(
        handed_off(&all) - handed_before,
        moved.len() as u64,
        "each move a hand-over"
    );
    assert_eq!(all[3].runner.stats().started, moved.len() as u64);

    // d leaves: its shards go back where they were, and only they move.
    all[3].stop().await;
    tokio::time::sleep(Duration::from_secs(10)).await;
    assert_settled(&all, SHARDS);
    assert_eq!(owners(&all, SHARDS), before);
    stop_all(&mut all, &history).await;
    assert!(
        history.lock().iter().all(|h| h.dropped.is_some()),
        "every term ended"
    );
}

/// A hand-over waits for the consumer: the new owner starts only after the old owner's term was
/// dropped, then within a retry period of it.
#[tokio::test(start_paused = true)]
async fn a_moving_shard_is_released_once_its_term_is_dropped_and_taken_at_once() {
    let (leases, history) = (MemoryLeases::new(), History::default());
    let work = Duration::from_secs(7); // longer than a lease: the Lease is renewed meanwhile
    let mut a = Replica::new("a", &leases, 8, 1.0, &history, work);
    let mut b = Replica::new("b", &leases, 8, 1.0, &history, work);
    a.start();
    tokio::time::sleep(Duration::from_secs(10)).await;
    assert_eq!(a.owned().len(), 8);
    b.start();
    tokio::time::sleep(Duration::from_secs(40)).await;
    let moved: Vec<u32> = (0..8)
        .filter(|s| desired_owner(["a", "b"], *s) == Some("b"))
        .collect();
    assert_eq!(b.owned(), moved.iter().copied().collect());
    for shard in &moved {
        let history = history.lock();
        let old = history
            .iter()
            .find(|h| h.shard == *shard && h.replica == "a")
            .expect("a's term");
        let new = history
            .iter()
            .find(|h| h.shard == *shard && h.replica == "b")
            .expect("b's term");
        let dropped = old.dropped.expect("a's term dropped");
        assert!(
            new.start >= dropped,
            "shard {shard}: b started before a's work stopped"
        );
        assert!(
            new.start <= dropped + RETRY,
            "shard {shard}: b waited {:?}",
            new.start - dropped
        );
    }
    stop_all(&mut [a, b], &history).await;
}

/// A partitioned owner's terms end at its renew deadline; another replica takes its shards a
/// lease duration after their last renewal, no earlier; healed, it gets them back.
#[tokio::test(start_paused = true)]
async fn a_partitioned_owner_stops_at_its_deadline_before_its_shards_are_taken() {
    const SHARDS: u32 = 8;
    let (leases, history) = (MemoryLeases::new(), History::default());
    let work = Duration::ZERO;
    let mut all: Vec<Replica> = ["a", "b"]
        .iter()
        .map(|n| Replica::new(n, &leases, SHARDS, 1.0, &history, work))
        .collect();
    for r in &mut all {
        r.start();
    }
    tokio::time::sleep(Duration::from_secs(30)).await;
    assert_settled(&all, SHARDS);
    let a_shards = all[0].owned();
    assert!(!a_shards.is_empty());
    let cut = Instant::now();
    all[0].link.leases.set_reachable(false);
    tokio::time::sleep(Duration::from_secs(40)).await;
    assert!(all[0].owned().is_empty() && !all[0].runner.status().member);
    assert_eq!(all[1].owned().len(), SHARDS as usize, "b took every shard");
    assert_eq!(all[0].runner.stats().lost, a_shards.len() as u64);
    {
        let history = history.lock();
        for shard in &a_shards {
            let old = history
                .iter()
                .rfind(|h| h.shard == *shard && h.replica == "a" && h.start < cut)
                .expect("a's term");
            let new = history
                .iter()
                .find(|h| h.shard == *shard && h.replica == "b" && h.start > cut)
                .expect("b's term");
            let ended = old.dropped.expect("ended");
            assert!(
                ended >= cut + DEADLINE - RETRY && ended <= cut + DEADLINE,
                "a stopped {:?} after the cut",
                ended - cut
            );
            assert!(
                new.start >= ended + (LEASE - DEADLINE),
                "b started {:?} after a stopped",
                new.start - ended
            );
            assert!(
                new.start <= cut + LEASE + 2 * RETRY,
                "b started {:?} after the cut",
                new.start - cut
            );
        }
    }
    all[0].link.leases.set_reachable(true);
    tokio::time::sleep(Duration::from_secs(30)).await;
    assert_settled(&all, SHARDS);
    assert_eq!(all[0].owned(), a_shards, "a got its shards back");
    stop_all(&mut all, &history).await;
}

/// The worst case the bounds allow: an owner whose clock runs 15 % slow (its deadline lasts
/// longer) cut off, the others' clocks 15 % fast (the lease they wait lasts less).
#[tokio::test(start_paused = true)]
async fn clocks_running_fast_or_slow_within_the_bounds_never_make_two_owners() {
    const SHARDS: u32 = 16;
    let (leases, history) = (MemoryLeases::new(), History::default());
    let mut all = vec![
        Replica::new("slow", &leases, SHARDS, 0.85, &history, Duration::ZERO),
        Replica::new("fast-1", &leases, SHARDS, 1.15, &history, Duration::ZERO),
        Replica::new("fast-2", &leases, SHARDS, 1.15, &history, Duration::ZERO),
    ];
    for r in &mut all {
        r.start();
    }
    for _ in 0..3 {
        tokio::time::sleep(Duration::from_secs(40)).await;
        assert_settled(&all, SHARDS);
        assert!(!all[0].owned().is_empty());
        all[0].link.leases.set_reachable(false);
        tokio::time::sleep(Duration::from_secs(40)).await;
        assert!(all[0].owned().is_empty());
        assert_eq!(all[1].owned().len() + all[2].owned().len(), SHARDS as usize);
        assert_no_overlap(&history);
        all[0].link.leases.set_reachable(true);
    }
    stop_all(&mut all, &history).await;
}

/// 409 Conflicts on the newcomer's writes (others writing first) are lost races: retried, the
/// shards still move.
#[tokio::test(start_paused = true)]
async fn write_conflicts_during_a_move_are_retried() {
    const SHARDS: u32 = 16;
    let (leases, history) = (MemoryLeases::new(), History::default());
    let mut all = replicas(&["a", "b"], &leases, SHARDS, &history);
    all[0].start();
    tokio::time::sleep(Duration::from_secs(10)).await;
    all[1].link.conflicts.store(12, Ordering::Release);
    all[1].start();
    tokio::time::sleep(Duration::from_secs(40)).await;
    assert_eq!(
        all[1].link.conflicts.load(Ordering::Acquire),
        0,
        "every conflict was met"
    );
    assert_settled(&all, SHARDS);
    // And an outside writer touching a held Lease costs no term.
    let shard = *all[0].owned().first().expect("a owns a shard");
    let lease = leases.lease(&format!("{NAME}-shard-{shard}"));
    for _ in 0..5 {
        let record = lease.record().expect("held");
        lease
            .update(&lease.writes().to_string(), &record)
            .await
            .expect("an outside write");
        tokio::time::sleep(RETRY).await;
    }
    assert_eq!(all[0].runner.stats().lost, 0);
    assert!(all[0].owned().contains(&shard));
    stop_all(&mut all, &history).await;
}

/// Seeded schedules on five replicas, clocks within ±10 %: joins, graceful leaves, crashes,
/// partitions and heals, checked after every step; once healed and left alone, every shard is
/// owned by its desired owner.
#[tokio::test(start_paused = true)]
async fn seeded_schedules_never_give_a_shard_two_owners_and_settle() {
    const SHARDS: u32 = 12;
    for seed in 0..8 {
        let mut rng = fastrand::Rng::with_seed(seed);
        let (leases, history) = (MemoryLeases::new(), History::default());
        let mut all: Vec<Replica> = (0..5)
            .map(|i| {
                let rate = 0.9 + rng.f64() * 0.2;
                let work = Duration::from_millis(rng.u64(0..1500));
                Replica::new(
                    &format!("replica-{i}"),
                    &leases,
                    SHARDS,
                    rate,
                    &history,
                    work,
                )
            })
            .collect();
        for r in &mut all[..3] {
            r.start();
        }
        for _ in 0..16 {
            let i = rng.usize(0..all.len());
            match rng.u8(0..6) {
                0 | 1 if !all[i].running() => all[i].start(),
                2 if all[i].running() => all[i].stop().await,
                3 if all[i].running() => all[i].crash().await,
                4 => all[i].link.leases.set_reachable(false),
                _ => all[i].link.leases.set_reachable(true),
            }
            tokio::time::sleep(Duration::from_secs(rng.u64(1..40))).await;
            assert_no_overlap(&history);
        }
        for r in &mut all {
            r.link.leases.set_reachable(true);
        }
        if !all.iter().any(Replica::running) {
            all[0].start();
        }
        tokio::time::sleep(Duration::from_secs(60)).await;
        assert_settled(&all, SHARDS);
        stop_all(&mut all, &history).await;
        assert!(leases.writes() > 0, "seed {seed}");
    }
}

#[tokio::test(start_paused = true)]
async fn one_shard_many_shards_and_a_day_long_lease_all_work() {
    let day = Duration::from_secs(86_400);
    for (shards, lease, deadline, retry) in [
        (1, LEASE, DEADLINE, RETRY),
        (1024, LEASE, DEADLINE, RETRY),
        (4, day, day / 2, Duration::from_secs(3600)),
    ] {
        let leases = MemoryLeases::new();
        let runners: Vec<ShardRunner> = ["a", "b", "c"]
            .iter()
            .map(|n| {
                let config = ShardConfig::new(NAME, *n, shards)
                    .timings(Timings::new(lease, deadline, retry));
                ShardRunner::new(leases.handle(), config).expect("valid")
            })
            .collect();
        let stop = CancellationToken::new();
        let tasks: Vec<_> = runners
            .iter()
            .map(|r| {
                tokio::spawn({
                    let (r, s) = (r.clone(), stop.clone());
                    async move { r.run(s).await }
                })
            })
            .collect();
        tokio::time::sleep(retry * 10).await;
        for shard in 0..shards {
            let owners: Vec<_> = runners
                .iter()
                .filter(|r| r.status().owned.contains(&shard))
                .collect();
            assert_eq!(
                owners.len(),
                1,
                "{shards} shards, lease {lease:?}: shard {shard}"
            );
            assert_eq!(
                Some(owners[0].config().identity.as_str()),
                desired_owner(["a", "b", "c"], shard)
            );
        }
        let total: u32 = runners.iter().map(|r| r.stats().owned).sum();
        assert_eq!(total, shards);
        stop.cancel();
        for task in tasks {
            task.await.expect("stopped");
        }
        assert!(runners.iter().all(|r| r.status().owned.is_empty()));
    }
}

#[test]
fn configurations_that_break_the_assignment_are_refused() {
    let ok = ShardConfig::new("my-ctl.v1", "a", 16);
    assert_eq!(ok.validate(), Ok(()));
    assert_eq!(ok.shard_lease(3), "my-ctl.v1-shard-3");
    assert!(ok.member_lease().starts_with("my-ctl.v1-member-") && ok.member_lease().len() == 33);
    let refused = [
        (ShardConfig::new("ctl", "a", 0), ConfigError::NoShards),
        (
            ShardConfig::new("ctl", "a", MAX_SHARDS + 1),
            ConfigError::TooManyShards(MAX_SHARDS + 1),
        ),
        (
            ShardConfig::new("ctl", "a", u32::MAX),
            ConfigError::TooManyShards(u32::MAX),
        ),
        (ShardConfig::new("ctl", "", 4), ConfigError::NoIdentity),
        (
            ShardConfig::new("", "a", 4),
            ConfigError::BadLeasePrefix(String::new()),
        ),
        (
            ShardConfig::new("Ctl", "a", 4),
            ConfigError::BadLeasePrefix("Ctl".into()),
        ),
        (
            ShardConfig::new("ctl-", "a", 4),
            ConfigError::BadLeasePrefix("ctl-".into()),
        ),
        (
            ShardConfig::new("c/t", "a", 4),
            ConfigError::BadLeasePrefix("c/t".into()),
        ),
        (
            ShardConfig::new("c".repeat(201), "a", 4),
            ConfigError::BadLeasePrefix("c".repeat(201)),
        ),
        (
            ShardConfig::new("ctl", "a", 4).timings(Timings::new(DEADLINE, DEADLINE, RETRY)),
            ConfigError::LeaseNotLongerThanDeadline,
        ),
        (
            ShardConfig::new("ctl", "a", 4).timings(Timings::new(Duration::MAX, DEADLINE, RETRY)),
            ConfigError::LeaseTooLong,
        ),
    ];
    for (config, error) in refused {
        assert_eq!(config.validate(), Err(error.clone()));
        assert_eq!(
            ShardRunner::new(MemoryLeases::new(), config).map(|_| ()),
            Err(error)
        );
    }
    assert_eq!(MAX_SHARDS, 4096);
}
