//! The election's timings on tokio's paused clock, over an in-memory lock that each candidate
//! reaches through a link of its own, which a test can break (requests fail) or stall
//! (requests hang), as a network partition would.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, SystemTime};

use informer_leaderelection::{
    ConfigError, ElectionConfig, LeaderCallbacks, LeaderElector, LeaderRecord, LeaseLock,
    LockError, MemoryLease, Observed,
};
use parking_lot::Mutex;
use tokio::task::JoinHandle;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

const LEASE: Duration = Duration::from_secs(15);
const DEADLINE: Duration = Duration::from_secs(10);
const RETRY: Duration = Duration::from_secs(2);

/// The state of one candidate's link to the lock.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Link {
    Up,
    Failing,
    Hanging,
    /// Every call answers, after this long.
    Slow(Duration),
}

/// How far a candidate's wall clock is off: the times it writes into the record are shifted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Skew {
    None,
    Behind(Duration),
    Ahead(Duration),
}

impl Skew {
    fn shift(self, t: Option<SystemTime>) -> Option<SystemTime> {
        match self {
            Skew::None => t,
            Skew::Behind(d) => t.map(|t| t - d),
            Skew::Ahead(d) => t.map(|t| t + d),
        }
    }
}

/// A candidate's way to the shared lock, with the instant of its last successful write.
#[derive(Clone)]
struct Linked {
    lease: MemoryLease,
    link: Arc<Mutex<Link>>,
    last_write: Arc<Mutex<Option<Instant>>>,
    failed: Arc<AtomicU64>,
    skew: Skew,
}

impl Linked {
    fn new(lease: &MemoryLease) -> Self {
        Self {
            lease: lease.clone(),
            link: Arc::new(Mutex::new(Link::Up)),
            last_write: Arc::default(),
            failed: Arc::default(),
            skew: Skew::None,
        }
    }

    /// The record as this candidate's wall clock would have written it.
    fn skewed(&self, record: &LeaderRecord) -> LeaderRecord {
        LeaderRecord {
            acquire_time: self.skew.shift(record.acquire_time),
            renew_time: self.skew.shift(record.renew_time),
            ..record.clone()
        }
    }

    fn set(&self, link: Link) {
        *self.link.lock() = link;
    }

    async fn gate(&self) -> Result<(), LockError> {
        loop {
            let link = *self.link.lock();
            match link {
                Link::Up => return Ok(()),
                Link::Failing => {
                    // A candidate retrying without a pause would never let the paused clock
                    // move: past a count no test reaches otherwise, let it.
                    if self.failed.fetch_add(1, Ordering::Relaxed) > 10_000 {
                        tokio::time::sleep(Duration::from_secs(1)).await;
                    }
                    return Err(LockError::Storage("link down".into()));
                }
                Link::Hanging => {}
                Link::Slow(delay) => {
                    tokio::time::sleep(delay).await;
                    return Ok(());
                }
            }
            // Hanging: no answer until the link changes (polled; the clock is paused).
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    fn wrote(&self, result: Result<Observed, LockError>) -> Result<Observed, LockError> {
        if result.is_ok() {
            *self.last_write.lock() = Some(Instant::now());
        }
        result
    }
}

#[async_trait::async_trait]
impl LeaseLock for Linked {
    async fn get(&self) -> Result<Option<Observed>, LockError> {
        self.gate().await?;
        self.lease.get().await
    }
    async fn create(&self, record: &LeaderRecord) -> Result<Observed, LockError> {
        self.gate().await?;
        let result = self.lease.create(&self.skewed(record)).await;
        self.wrote(result)
    }
    async fn update(&self, version: &str, record: &LeaderRecord) -> Result<Observed, LockError> {
        self.gate().await?;
        let result = self.lease.update(version, &self.skewed(record)).await;
        self.wrote(result)
    }
    fn describe(&self) -> String {
        "linked memory lease".into()
    }
}

/// A transition, when it happened, and whose.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Seen {
    Started(u64),
    Stopped(u64),
    Leader(Option<String>),
}

type History = Arc<Mutex<Vec<(Instant, String, Seen)>>>;

struct Recorder {
    name: String,
    history: History,
}

impl LeaderCallbacks for Recorder {
    fn started_leading(&self, term: u64) {
        self.push(Seen::Started(term));
    }
    fn stopped_leading(&self, term: u64) {
        self.push(Seen::Stopped(term));
    }
    fn new_leader(&self, identity: Option<&str>) {
        self.push(Seen::Leader(identity.map(str::to_owned)));
    }
}

impl Recorder {
    fn push(&self, seen: Seen) {
        self.history
            .lock()
            .push((Instant::now(), self.name.clone(), seen));
    }
}

/// One candidate: its elector, its link, its running election.
struct Candidate {
    name: String,
    elector: LeaderElector,
    link: Linked,
    stop: CancellationToken,
    task: Option<JoinHandle<()>>,
}

impl Candidate {
    fn new(name: &str, lease: &MemoryLease, history: &History) -> Self {
        Self::skewed(name, lease, history, Skew::None)
    }

    /// A candidate whose wall clock is off by `skew`.
    fn skewed(name: &str, lease: &MemoryLease, history: &History, skew: Skew) -> Self {
        let link = Linked {
            skew,
            ..Linked::new(lease)
        };
        let elector = LeaderElector::new(link.clone(), ElectionConfig::new(name))
            .expect("valid config")
            .with_callbacks(Recorder {
                name: name.to_owned(),
                history: Arc::clone(history),
            });
        let mut candidate = Self {
            name: name.to_owned(),
            elector,
            link,
            stop: CancellationToken::new(),
            task: None,
        };
        candidate.start();
        candidate
    }

    fn start(&mut self) {
        self.stop = CancellationToken::new();
        let (elector, stop) = (self.elector.clone(), self.stop.clone());
        self.task = Some(tokio::spawn(async move { elector.run(stop).await }));
    }

    /// A graceful stop: the lease is released.
    async fn stop(&mut self) {
        self.stop.cancel();
        if let Some(task) = self.task.take() {
            task.await.expect("the election task");
        }
    }

    /// A crash: the task is aborted, nothing is released.
    async fn crash(&mut self) {
        if let Some(task) = self.task.take() {
            task.abort();
            let _ = task.await;
        }
    }

    fn leads(&self) -> bool {
        self.elector.is_leader()
    }
}

/// Starts and stops of leading, as (name, from, to) intervals; an open one ends at `now`.
fn intervals(history: &History, now: Instant) -> Vec<(String, Instant, Instant)> {
    let mut open: Vec<(String, Instant)> = Vec::new();
    let mut done = Vec::new();
    for (at, name, seen) in history.lock().iter() {
        match seen {
            Seen::Started(_) => open.push((name.clone(), *at)),
            Seen::Stopped(_) => {
                let i = open
                    .iter()
                    .position(|(n, _)| n == name)
                    .expect("a stop follows a start");
                let (name, from) = open.remove(i);
                done.push((name, from, *at));
            }
            Seen::Leader(_) => {}
        }
    }
    done.extend(open.into_iter().map(|(n, from)| (n, from, now)));
    done
}

/// No two candidates lead at any instant.
fn assert_never_two_leaders(history: &History) {
    let all = intervals(history, Instant::now());
    for (i, (a, a_from, a_to)) in all.iter().enumerate() {
        for (b, b_from, b_to) in &all[i + 1..] {
            if a != b {
                assert!(
                    a_to <= b_from || b_to <= a_from,
                    "{a} led over {a_from:?}..{a_to:?} while {b} led over {b_from:?}..{b_to:?}"
                );
            }
        }
    }
}

/// When `name` next started leading at or after `after`.
fn started_after(history: &History, name: &str, after: Instant) -> Option<Instant> {
    history
        .lock()
        .iter()
        .find(|(at, n, seen)| *at >= after && n == name && matches!(seen, Seen::Started(_)))
        .map(|(at, _, _)| *at)
}

fn stopped_after(history: &History, name: &str, after: Instant) -> Option<Instant> {
    history
        .lock()
        .iter()
        .find(|(at, n, seen)| *at >= after && n == name && matches!(seen, Seen::Stopped(_)))
        .map(|(at, _, _)| *at)
}

/// Waits (on the paused clock) until `cond` holds, for at most `bound`.
async fn within(bound: Duration, mut cond: impl FnMut() -> bool) -> Duration {
    let begun = Instant::now();
    while !cond() {
        assert!(begun.elapsed() <= bound, "not within {bound:?}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    begun.elapsed()
}

#[tokio::test(start_paused = true)]
async fn a_lone_candidate_acquires_at_once_and_renews_every_retry_period() {
    let (lease, history) = (MemoryLease::new(), History::default());
    let begun = Instant::now();
    let mut a = Candidate::new("a", &lease, &history);
    a.elector.leading().await;
    assert_eq!(
        begun.elapsed(),
        Duration::ZERO,
        "a free lease is taken at the first attempt"
    );
    let record = lease.record().expect("created");
    assert_eq!(record.holder.as_deref(), Some("a"));
    assert_eq!(record.lease_duration, LEASE);
    assert_eq!(record.transitions, 0);

    tokio::time::sleep_until(begun + Duration::from_millis(11_000)).await;
    // The create, then a renewal at 2, 4, 6, 8 and 10 s.
    assert_eq!(lease.writes(), 6);
    assert_eq!(a.elector.status().term, 1, "one term, renewed");
    a.stop().await;
    assert_eq!(
        lease.record().expect("kept").holder,
        None,
        "released on stop"
    );
}

/// A slow lease store (each call 4.5 s, the retry period 2 s, the renew deadline 10 s): the
/// leader renews on a cadence counted from the start of each attempt, so every renewal
/// completes before its deadline and the term is kept. (Sleeping a full retry period after
/// each call, the next renewal completed 11 s after the last one began: the term was lost.)
#[tokio::test(start_paused = true)]
async fn a_slow_lease_store_does_not_cost_the_term() {
    let (lease, history) = (MemoryLease::new(), History::default());
    let mut a = Candidate::new("a", &lease, &history);
    a.elector.leading().await;
    a.link.set(Link::Slow(Duration::from_millis(4_500)));
    let writes = lease.writes();
    tokio::time::sleep(Duration::from_secs(60)).await;
    assert!(a.leads(), "still leading: {:?}", history.lock());
    assert_eq!(a.elector.status().term, 1, "one term, renewed");
    assert!(lease.writes() >= writes + 10, "renewed all along");
    a.stop().await;
}

#[tokio::test(start_paused = true)]
async fn a_renewed_lease_is_never_taken() {
    let (lease, history) = (MemoryLease::new(), History::default());
    let mut a = Candidate::new("a", &lease, &history);
    within(Duration::from_secs(1), || a.leads()).await;
    let mut b = Candidate::new("b", &lease, &history);
    let mut c = Candidate::new("c", &lease, &history);
    tokio::time::sleep(Duration::from_secs(300)).await;
    assert!(a.leads() && !b.leads() && !c.leads());
    assert_eq!(b.elector.status().leader.as_deref(), Some("a"));
    assert_eq!(c.elector.status().leader.as_deref(), Some("a"));
    assert_eq!(lease.record().expect("held").transitions, 0);
    for candidate in [&mut a, &mut b, &mut c] {
        candidate.stop().await;
    }
    assert_never_two_leaders(&history);
}

#[tokio::test(start_paused = true)]
async fn a_released_lease_is_taken_within_a_retry_period() {
    let (lease, history) = (MemoryLease::new(), History::default());
    let mut a = Candidate::new("a", &lease, &history);
    within(Duration::from_secs(1), || a.leads()).await;
    let mut b = Candidate::new("b", &lease, &history);
    tokio::time::sleep(Duration::from_secs(7)).await;
    let released = Instant::now();
    a.stop().await;
    let took = within(RETRY, || b.leads()).await;
    assert!(took <= RETRY, "took {took:?}");
    assert!(stopped_after(&history, "a", released).expect("a stopped") <= released + took);
    assert_eq!(lease.record().expect("held").transitions, 1);
    b.stop().await;
    assert_never_two_leaders(&history);
}

#[tokio::test(start_paused = true)]
async fn after_a_crash_the_lease_is_taken_once_it_expires() {
    let (lease, history) = (MemoryLease::new(), History::default());
    let mut a = Candidate::new("a", &lease, &history);
    within(Duration::from_secs(1), || a.leads()).await;
    let mut b = Candidate::new("b", &lease, &history);
    tokio::time::sleep(Duration::from_millis(9_300)).await;
    let crashed = Instant::now();
    a.crash().await;
    assert!(!a.leads(), "an aborted election ends its term");
    let last_renewal = a.link.last_write.lock().expect("a renewed");
    within(LEASE + RETRY, || b.leads()).await;
    let took_over = started_after(&history, "b", crashed).expect("b leads");
    assert!(
        took_over >= last_renewal + LEASE,
        "b waited the whole lease after a's last renewal"
    );
    assert!(
        took_over <= crashed + LEASE + RETRY,
        "b took over {:?} after the crash",
        took_over - crashed
    );
    b.stop().await;
    assert_never_two_leaders(&history);
}

/// Wall clocks an hour off either way change nothing: a leader whose renewals look an hour old
/// keeps its lease as long as it renews, and one whose renewals look an hour ahead loses it, once
/// it crashes, a lease duration after its last renewal (by the follower's clock), not an hour
/// later. The record's times are never compared with a candidate's own clock.
#[tokio::test(start_paused = true)]
async fn wall_clock_offsets_between_candidates_change_nothing() {
    const HOUR: Duration = Duration::from_secs(3600);
    for skew in [Skew::Behind(HOUR), Skew::Ahead(HOUR)] {
        let (lease, history) = (MemoryLease::new(), History::default());
        let mut a = Candidate::skewed("a", &lease, &history, skew);
        within(Duration::from_secs(1), || a.leads()).await;
        let mut b = Candidate::new("b", &lease, &history);
        let mut c = Candidate::skewed("c", &lease, &history, Skew::Behind(2 * HOUR));
        tokio::time::sleep(Duration::from_secs(300)).await;
        assert!(a.leads() && !b.leads() && !c.leads(), "{skew:?}");
        let renewed = lease.record().expect("held").renew_time.expect("renewed");
        let off = match renewed.duration_since(SystemTime::now()) {
            Ok(ahead) => ahead,
            Err(behind) => behind.duration(),
        };
        assert!(off > HOUR - LEASE, "{skew:?}: the skew is in the record");
        assert_eq!(lease.record().expect("held").transitions, 0, "{skew:?}");

        let crashed = Instant::now();
        a.crash().await;
        let last_renewal = a.link.last_write.lock().expect("a renewed");
        within(LEASE + RETRY, || b.leads() || c.leads()).await;
        let took_over = ["b", "c"]
            .iter()
            .filter_map(|n| started_after(&history, n, crashed))
            .min()
            .expect("b or c leads");
        assert!(took_over >= last_renewal + LEASE, "{skew:?}");
        assert!(took_over <= crashed + LEASE + RETRY, "{skew:?}");
        for candidate in [&mut b, &mut c] {
            candidate.stop().await;
        }
        assert_never_two_leaders(&history);
    }
}

/// A leader cut off from the lock (its requests failing or hanging) stops leading at its renew
/// deadline, at least `LEASE - DEADLINE` before another candidate takes over; and healed, it
/// is a candidate again, which takes over when the new leader releases.
async fn cut_off_leader(link: Link) {
    let (lease, history) = (MemoryLease::new(), History::default());
    let mut a = Candidate::new("a", &lease, &history);
    within(Duration::from_secs(1), || a.leads()).await;
    let mut b = Candidate::new("b", &lease, &history);
    tokio::time::sleep(Duration::from_millis(20_500)).await;
    let cut = Instant::now();
    a.link.set(link);
    let last_renewal = a.link.last_write.lock().expect("a renewed");
    within(LEASE + RETRY, || b.leads()).await;
    let a_stopped = stopped_after(&history, "a", cut).expect("a stopped leading");
    let b_started = started_after(&history, "b", cut).expect("b leads");
    assert!(
        a_stopped <= last_renewal + DEADLINE,
        "a stopped {:?} after its last renewal",
        a_stopped - last_renewal
    );
    assert!(
        b_started >= a_stopped + (LEASE - DEADLINE),
        "b started only {:?} after a stopped",
        b_started - a_stopped
    );
    assert!(
        b_started <= cut + LEASE + RETRY,
        "b took over {:?} after the cut",
        b_started - cut
    );

    // Healed, a follows b; when b goes, a leads again (its second term).
    a.link.set(Link::Up);
    tokio::time::sleep(Duration::from_secs(60)).await;
    assert!(b.leads() && !a.leads());
    assert_eq!(a.elector.status().leader.as_deref(), Some("b"));
    b.stop().await;
    within(RETRY, || a.leads()).await;
    assert_eq!(a.elector.status().term, 2);
    assert_eq!(lease.record().expect("held").transitions, 2);
    a.stop().await;
    assert_never_two_leaders(&history);
}

#[tokio::test(start_paused = true)]
async fn a_leader_whose_renewals_fail_stops_before_anyone_can_take_over() {
    cut_off_leader(Link::Failing).await;
}

#[tokio::test(start_paused = true)]
async fn a_leader_whose_renewals_hang_stops_at_its_deadline() {
    cut_off_leader(Link::Hanging).await;
}

#[tokio::test(start_paused = true)]
async fn candidates_racing_for_a_free_lease_elect_one() {
    let (lease, history) = (MemoryLease::new(), History::default());
    let mut all: Vec<_> = ["a", "b", "c", "d"]
        .into_iter()
        .map(|n| Candidate::new(n, &lease, &history))
        .collect();
    within(Duration::from_secs(1), || all.iter().any(Candidate::leads)).await;
    tokio::time::sleep(Duration::from_secs(30)).await;
    let leaders: Vec<_> = all
        .iter()
        .filter(|c| c.leads())
        .map(|c| c.name.clone())
        .collect();
    assert_eq!(leaders.len(), 1, "{leaders:?}");
    for c in &all {
        assert_eq!(c.elector.status().leader.as_ref(), Some(&leaders[0]));
    }
    for c in &mut all {
        c.stop().await;
    }
    assert_never_two_leaders(&history);
}

#[tokio::test(start_paused = true)]
async fn a_term_ends_when_leading_stops() {
    let (lease, history) = (MemoryLease::new(), History::default());
    let mut a = Candidate::new("a", &lease, &history);
    let term = a.elector.leading().await;
    assert_eq!(term.number, 1);
    assert!(term.is_current());
    let token = term.token();
    a.link.set(Link::Failing);
    tokio::time::timeout(DEADLINE + RETRY, term.lost())
        .await
        .expect("the term ends at the renew deadline");
    assert!(token.is_cancelled() && !a.leads());
    assert!(a.elector.current_term().is_none());
    a.link.set(Link::Up);
    // The lease still names a, unchanged since: a takes it back, in a new term.
    let second = tokio::time::timeout(LEASE + RETRY, a.elector.leading())
        .await
        .expect("a leads again");
    assert_eq!(second.number, 2);
    a.stop().await;
    assert!(!second.is_current());
}

#[tokio::test(start_paused = true)]
async fn a_candidate_whose_requests_fail_waits_between_attempts() {
    let (lease, history) = (MemoryLease::new(), History::default());
    let mut a = Candidate::new("a", &lease, &history);
    a.elector.leading().await;
    a.link.set(Link::Failing);
    // Its own lease expires under it (nobody else can write it): it stays a candidate whose
    // every attempt fails at once.
    tokio::time::sleep(Duration::from_secs(120)).await;
    assert!(!a.leads());
    let attempts = a.link.failed.load(Ordering::Relaxed);
    // At most one attempt per half retry period (the shortest wait), a few more while it still
    // led and retried within its deadline; each attempt makes at most two requests (the
    // direct renewal of its own record, then a read).
    let most = 2 * (120 / (RETRY.as_secs() / 2) + DEADLINE.as_secs() / RETRY.as_secs() + 2);
    assert!(
        (30..=most).contains(&attempts),
        "{attempts} failing requests in 120 s (at most {most})"
    );
    a.stop().await;
}

#[tokio::test(start_paused = true)]
async fn new_leaders_are_reported_once_each() {
    let (lease, history) = (MemoryLease::new(), History::default());
    let mut a = Candidate::new("a", &lease, &history);
    within(Duration::from_secs(1), || a.leads()).await;
    let mut b = Candidate::new("b", &lease, &history);
    tokio::time::sleep(Duration::from_secs(20)).await;
    a.stop().await;
    within(RETRY, || b.leads()).await;
    tokio::time::sleep(Duration::from_secs(20)).await;
    b.stop().await;
    let seen_by_b: Vec<_> = history
        .lock()
        .iter()
        .filter(|(_, n, s)| n == "b" && matches!(s, Seen::Leader(_)))
        .map(|(_, _, s)| s.clone())
        .collect();
    assert_eq!(
        seen_by_b,
        [
            Seen::Leader(Some("a".into())),
            Seen::Leader(None), // released
            Seen::Leader(Some("b".into())),
            Seen::Leader(None), // b's own release
        ]
    );
}

#[test]
fn configurations_that_break_the_guarantees_are_refused() {
    let base = ElectionConfig::new("a");
    assert_eq!(base.validate(), Ok(()));
    let s = Duration::from_secs;
    let cases = [
        (ElectionConfig::new(""), ConfigError::NoIdentity),
        (
            base.clone().timings(s(10), s(10), s(2)),
            ConfigError::LeaseNotLongerThanDeadline,
        ),
        (
            base.clone().timings(s(15), s(2), s(2)),
            ConfigError::DeadlineNotLongerThanRetry,
        ),
        (
            base.clone().timings(s(15), s(10), Duration::ZERO),
            ConfigError::ZeroRetryPeriod,
        ),
        (
            base.clone().timings(
                Duration::from_millis(900),
                Duration::from_millis(500),
                Duration::from_millis(200),
            ),
            ConfigError::LeaseUnderASecond,
        ),
    ];
    for (config, error) in cases {
        assert_eq!(config.validate(), Err(error.clone()));
        assert_eq!(
            LeaderElector::new(MemoryLease::new(), config).err(),
            Some(error)
        );
    }
}

/// Seeded schedules of faults on three candidates: whoever leads is crashed, cut off (failing
/// or hanging), stopped, or left alone; cut-off and crashed candidates come back later. At no
/// instant do two lead, and after each fault a leader exists again within a lease and a retry
/// period.
#[tokio::test(start_paused = true)]
async fn seeded_fault_schedules_never_elect_two_leaders() {
    for seed in 0..20u64 {
        let mut rng = fastrand::Rng::with_seed(seed);
        let (lease, history) = (MemoryLease::new(), History::default());
        let mut all: Vec<_> = ["a", "b", "c"]
            .into_iter()
            .map(|n| Candidate::new(n, &lease, &history))
            .collect();
        for round in 0..12 {
            within(LEASE + RETRY, || all.iter().any(Candidate::leads)).await;
            tokio::time::sleep(Duration::from_millis(rng.u64(0..5_000))).await;
            let leader = all.iter().position(Candidate::leads).expect("a leader");
            let fault = Instant::now();
            match rng.u8(0..4) {
                0 => all[leader].crash().await,
                1 => all[leader].link.set(Link::Failing),
                2 => all[leader].link.set(Link::Hanging),
                _ => all[leader].stop().await,
            }
            within(LEASE + RETRY, || {
                all.iter()
                    .enumerate()
                    .any(|(i, c)| i != leader && c.leads())
            })
            .await;
            assert!(
                fault.elapsed() <= LEASE + RETRY,
                "seed {seed} round {round}: no leader for {:?}",
                fault.elapsed()
            );
            // The faulty one comes back.
            let back = &mut all[leader];
            back.link.set(Link::Up);
            if back.task.is_none() {
                back.start();
            }
        }
        for c in &mut all {
            c.stop().await;
        }
        assert_never_two_leaders(&history);
    }
}
