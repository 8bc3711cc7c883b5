//! Running scenarios: one on its own runtime ([`run_seed`]), many on a pool of threads
//! ([`run_seeds`]), with the verdict and the figures of each.

use std::collections::BTreeMap;
use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use informer_apiserver::{ApiServer, Config};
use informer_kube::EncodingCounts;
use parking_lot::Mutex;

use crate::journal::WriteLog;
use crate::scenario::{Scenario, Step, encodings_tally, server_settings_tally};
use crate::stack::{Stack, StackOptions, apply, calm, client, inject, sum_counts};

/// How long the caches and handlers get to converge once faults and churn stop.
pub const SETTLE_BOUND: Duration = Duration::from_secs(30);

/// What a passing run did.
#[derive(Debug, Clone, Default)]
pub struct Outcome {
    /// The seed.
    pub seed: u64,
    /// Writes made (initial objects included).
    pub writes: usize,
    /// Faults fired, by kind.
    pub faults: BTreeMap<&'static str, u64>,
    /// Notifications handled, every handler together.
    pub notifications: u64,
    /// Lists after the first, both informers together.
    pub relists: u64,
    /// Tombstones received, every handler together.
    pub tombstones: u64,
    /// Notifications the slow consumers (the slow handler and the stream) took into per-key
    /// coalescing because they were behind their bound.
    pub coalesced: u64,
    /// Pods on the server at the end.
    pub objects: usize,
    /// Responses the informers read, by encoding, both together.
    pub responses: EncodingCounts,
    /// From the end of the churn to convergence.
    pub settled_in: Duration,
    /// The whole run.
    pub wall: Duration,
}

/// Which suite a seed ran in: it decides the command that replays it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Suite {
    /// The informers' convergence runs ([`run_seed`]).
    #[default]
    Informers,
    /// The controller's convergence runs
    /// ([`run_controller_seed`](crate::controller::run_controller_seed)).
    Controller,
}

/// A failing run: the seed and what went wrong.
#[derive(Debug, Clone)]
pub struct Failure {
    /// The seed.
    pub seed: u64,
    /// Steps of the scenario (to replay it with the same length).
    pub steps: usize,
    /// The suite the seed ran in.
    pub suite: Suite,
    /// What went wrong.
    pub problems: Vec<String>,
}

impl Failure {
    /// A failure of `scenario` in `suite`.
    pub fn of(scenario: &Scenario, suite: Suite, problems: Vec<String>) -> Self {
        Self {
            seed: scenario.seed,
            steps: scenario.steps.len(),
            suite,
            problems,
        }
    }

    /// The command that replays this seed.
    pub fn replay(&self) -> String {
        match self.suite {
            Suite::Informers => replay_command(self.seed, self.steps),
            Suite::Controller => controller_replay_command(self.seed, self.steps),
        }
    }
}

impl fmt::Display for Failure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "seed {} failed:", self.seed)?;
        for problem in &self.problems {
            writeln!(f, "  - {problem}")?;
        }
        write!(f, "  replay: {}", self.replay())
    }
}

impl std::error::Error for Failure {}

/// The command that replays one seed.
pub fn replay_command(seed: u64, steps: usize) -> String {
    replay_with("", seed, steps)
}

/// The command that replays one seed of the controller scenario.
pub fn controller_replay_command(seed: u64, steps: usize) -> String {
    replay_with(" --controller", seed, steps)
}

fn replay_with(flag: &str, seed: u64, steps: usize) -> String {
    let mut command = format!("cargo run --release -p informer-chaos --{flag} --seed {seed}");
    if steps != crate::scenario::DEFAULT_STEPS {
        command.push_str(&format!(" --steps {steps}"));
    }
    command
}

/// Threads of this process named `informer-`: the delivery pool's (its threads, its monitor,
/// and any spare). `None` where `/proc` is not available.
pub fn informer_threads() -> Option<usize> {
    let tasks = std::fs::read_dir("/proc/self/task").ok()?;
    Some(
        tasks
            .filter_map(|t| std::fs::read_to_string(t.ok()?.path().join("comm")).ok())
            .filter(|name| name.starts_with("informer-"))
            .count(),
    )
}

/// The delivery pool's threads once any spare has left (spares leave after
/// [`SPARE_IDLE`](informer::SPARE_IDLE) idle; waits up to ten seconds for that).
pub(crate) fn pool_threads_settled() -> Option<usize> {
    let resting = informer::DeliveryPool::global().size() + 1;
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let threads = informer_threads()?;
        if threads <= resting || Instant::now() >= deadline {
            return Some(threads);
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Waits (up to ten seconds) until no job is left on the delivery pool: every informer's pop
/// loop and every handler has ended. Returns what is left.
pub(crate) fn jobs_left_on_the_pool() -> usize {
    let pool = informer::DeliveryPool::global();
    let deadline = Instant::now() + Duration::from_secs(10);
    while pool.jobs() > 0 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(5));
    }
    pool.jobs()
}

/// Runs `scenario` on the current runtime: starts the simulator and the informers, applies
/// the steps, calms the server, and checks convergence, the notification history and the
/// relists, then stops everything. The runtime's own tasks are checked by [`run_seed`].
pub async fn run(scenario: &Scenario) -> Result<Outcome, Failure> {
    let begun = Instant::now();
    let fail = |problems: Vec<String>| Failure::of(scenario, Suite::Informers, problems);
    let server = start_server(scenario).await.map_err(|e| fail(vec![e]))?;
    let outcome = drive(scenario, &server).await;
    server.shutdown().await;
    let mut outcome = outcome.map_err(fail)?;
    outcome.wall = begun.elapsed();
    Ok(outcome)
}

/// Starts the simulator as `scenario` configures it.
pub(crate) async fn start_server(scenario: &Scenario) -> Result<ApiServer, String> {
    let server = ApiServer::start(server_config(scenario))
        .await
        .map_err(|e| format!("starting the API server: {e}"))?;
    server
        .faults()
        .set_cache_delay(Duration::from_millis(scenario.server.cache_delay_ms));
    Ok(server)
}

/// The simulator's configuration for `scenario`.
fn server_config(scenario: &Scenario) -> Config {
    let settings = scenario.server;
    Config {
        history_size: settings.history_size,
        watch_buffer: settings.watch_buffer,
        slow_watcher: settings.slow_watcher,
        expired_watch: settings.expired_watch,
        opaque_resource_versions: settings.opaque_resource_versions,
        bookmark_before_deadline: Duration::from_millis(300),
        ..Config::for_tests(Duration::from_millis(150))
    }
}

async fn drive(scenario: &Scenario, server: &ApiServer) -> Result<Outcome, Vec<String>> {
    let writes = WriteLog::default();
    for op in &scenario.initial {
        apply(server, op, &writes).map_err(|e| vec![e])?;
    }
    let client = client(server).map_err(|e| vec![e])?;
    let stack = Stack::start(
        &client,
        &StackOptions {
            min_watch_timeout: Duration::from_secs(scenario.server.min_watch_timeout_secs),
            streaming_list: scenario.server.streaming_list,
            relist_by_page: scenario.server.relist_by_page,
            slow_delay: Duration::from_micros(300),
            slow_buffer: 16,
            keep_notes: true,
            record_times: false,
            json_only: scenario.server.json_only,
        },
    )
    .map_err(|e| vec![e])?;
    drop(client);

    let mut faults: BTreeMap<&'static str, u64> = BTreeMap::new();
    for step in &scenario.steps {
        match step {
            Step::Op(op) => {
                if let Err(e) = apply(server, op, &writes) {
                    stack.shutdown(SETTLE_BOUND).await;
                    return Err(vec![e]);
                }
            }
            Step::Fault(fault) => {
                inject(server, fault);
                *faults.entry(fault.kind()).or_default() += 1;
            }
            Step::Pause(ms) => tokio::time::sleep(Duration::from_millis(*ms)).await,
        }
        tokio::task::yield_now().await;
    }
    calm(server);

    let mut problems = Vec::new();
    let settled_in = match stack.converge(server, SETTLE_BOUND).await {
        Ok(took) => took,
        Err(differences) => {
            problems.push(format!(
                "no convergence within {SETTLE_BOUND:?} after the churn stopped:"
            ));
            problems.extend(differences);
            SETTLE_BOUND
        }
    };
    problems.extend(stack.check_history(Some(&writes)));
    problems.extend(stack.check_encodings(scenario.server.encoding()));
    let outcome = Outcome {
        seed: scenario.seed,
        writes: writes.len(),
        faults,
        notifications: stack.notifications(),
        relists: stack.relists(),
        tombstones: stack.tombstones(),
        coalesced: stack.coalesced(),
        objects: server
            .list::<k8s_openapi::api::core::v1::Pod>(None)
            .map_or(0, |(p, _)| p.len()),
        responses: stack.encoding_counts(),
        settled_in,
        wall: Duration::ZERO,
    };
    problems.extend(stack.shutdown(SETTLE_BOUND).await);
    if problems.is_empty() {
        Ok(outcome)
    } else {
        Err(problems)
    }
}

/// Runs one scenario on a runtime of its own, then checks that the runtime has no task left
/// (the informers, the server and the client all released theirs).
pub fn run_seed(scenario: &Scenario) -> Result<Outcome, Failure> {
    on_a_runtime_of_its_own(scenario, Suite::Informers, run(scenario))
}

/// Runs `run` on a current-thread runtime of its own, then checks that the runtime has no task
/// left once it has returned.
pub(crate) fn on_a_runtime_of_its_own<T>(
    scenario: &Scenario,
    suite: Suite,
    run: impl Future<Output = Result<T, Failure>>,
) -> Result<T, Failure> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| Failure::of(scenario, suite, vec![format!("building a runtime: {e}")]))?;
    let outcome = runtime.block_on(run)?;
    let metrics = runtime.metrics();
    let left = runtime.block_on(async {
        // A finished task's slot is released a moment after it completes.
        let deadline = Instant::now() + Duration::from_secs(10);
        while metrics.num_alive_tasks() > 0 && Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        metrics.num_alive_tasks()
    });
    if left > 0 {
        return Err(Failure::of(
            scenario,
            suite,
            vec![format!("{left} tasks still alive after shutdown")],
        ));
    }
    Ok(outcome)
}

/// The results of many seeds.
#[derive(Debug, Default)]
pub struct Summary {
    /// Seeds run.
    pub seeds: usize,
    /// Seeds that passed.
    pub passed: usize,
    /// The failures, by seed.
    pub failures: Vec<Failure>,
    /// Faults fired, by kind, over all passing seeds.
    pub faults: BTreeMap<&'static str, u64>,
    /// Writes made.
    pub writes: u64,
    /// Notifications handled.
    pub notifications: u64,
    /// Relists.
    pub relists: u64,
    /// Tombstones.
    pub tombstones: u64,
    /// Notifications the slow consumers coalesced.
    pub coalesced: u64,
    /// Seeds in which a slow consumer fell behind its bound and coalesced.
    pub seeds_coalescing: usize,
    /// The slowest convergence after churn stopped.
    pub slowest_settle: Duration,
    /// Jobs left on the delivery pool once every seed had finished (pop loops or handlers
    /// still running): must be 0.
    pub jobs_left: usize,
    /// `informer-` threads (the delivery pool's) once every seed had finished (`None`: not
    /// measurable here): the pool's fixed size, not one per informer or handler.
    pub threads_left: Option<usize>,
    /// Seeds per optional server setting (see
    /// [`ServerSettings::names`](crate::scenario::ServerSettings::names)).
    pub settings: BTreeMap<&'static str, usize>,
    /// Seeds per encoding the informers read (`json`, `protobuf`; see
    /// [`ServerSettings::json_only`](crate::scenario::ServerSettings::json_only)).
    pub encodings: BTreeMap<&'static str, usize>,
    /// Responses read by encoding, over all passing seeds.
    pub responses: EncodingCounts,
    /// The whole batch.
    pub wall: Duration,
}

/// Writes how many of `seeds` ran with each optional server setting.
pub(crate) fn write_settings(
    f: &mut fmt::Formatter<'_>,
    settings: &BTreeMap<&'static str, usize>,
    seeds: usize,
) -> fmt::Result {
    writeln!(f, "server settings, seeds of {seeds}:")?;
    for (name, n) in settings {
        writeln!(f, "  {name:<28} {n}")?;
    }
    Ok(())
}

/// Writes how many of `seeds` read each encoding, and the responses read in each.
pub(crate) fn write_encodings(
    f: &mut fmt::Formatter<'_>,
    encodings: &BTreeMap<&'static str, usize>,
    responses: EncodingCounts,
    seeds: usize,
) -> fmt::Result {
    writeln!(f, "encodings, seeds of {seeds}:")?;
    for (name, n) in encodings {
        let read = match *name {
            "json" => responses.json,
            _ => responses.protobuf,
        };
        writeln!(f, "  {name:<28} {n} ({read} responses read)")?;
    }
    Ok(())
}

impl Summary {
    /// Whether every seed passed and nothing of any informer was left running.
    pub fn ok(&self) -> bool {
        self.failures.is_empty() && self.jobs_left == 0
    }

    fn add(&mut self, result: Result<Outcome, Failure>) {
        self.seeds += 1;
        match result {
            Ok(outcome) => {
                self.passed += 1;
                for (kind, n) in outcome.faults {
                    *self.faults.entry(kind).or_default() += n;
                }
                self.writes += outcome.writes as u64;
                self.notifications += outcome.notifications;
                self.relists += outcome.relists;
                self.tombstones += outcome.tombstones;
                self.coalesced += outcome.coalesced;
                self.seeds_coalescing += usize::from(outcome.coalesced > 0);
                self.responses = sum_counts([self.responses, outcome.responses]);
                self.slowest_settle = self.slowest_settle.max(outcome.settled_in);
            }
            Err(failure) => self.failures.push(failure),
        }
    }
}

impl fmt::Display for Summary {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "seeds run: {}, passed: {}, failed: {}",
            self.seeds,
            self.passed,
            self.failures.len()
        )?;
        if !self.failures.is_empty() {
            let mut seeds: Vec<u64> = self.failures.iter().map(|f| f.seed).collect();
            seeds.sort_unstable();
            writeln!(f, "failed seeds: {seeds:?}")?;
        }
        writeln!(
            f,
            "writes: {}, notifications: {}, relists: {}, tombstones: {}, slowest settle: {:.2?}",
            self.writes, self.notifications, self.relists, self.tombstones, self.slowest_settle
        )?;
        writeln!(
            f,
            "slow consumers coalesced {} notifications, in {} of {} seeds",
            self.coalesced, self.seeds_coalescing, self.passed
        )?;
        writeln!(
            f,
            "faults fired ({} in all):",
            self.faults.values().sum::<u64>()
        )?;
        for (kind, n) in &self.faults {
            writeln!(f, "  {kind:<22} {n}")?;
        }
        write_settings(f, &self.settings, self.seeds)?;
        write_encodings(f, &self.encodings, self.responses, self.seeds)?;
        writeln!(f, "jobs left on the delivery pool: {}", self.jobs_left)?;
        match self.threads_left {
            Some(n) => writeln!(f, "delivery pool threads after the last seed: {n}")?,
            None => writeln!(f, "delivery pool threads: not measurable (no /proc)")?,
        }
        write!(f, "wall time: {:.2?}", self.wall)
    }
}

/// Runs `scenarios` on `jobs` threads, each seed on a runtime of its own; `progress` is told of
/// every result as it comes. Once all have finished, no job may be left on the delivery pool.
pub fn run_seeds(
    scenarios: Vec<Scenario>,
    jobs: usize,
    progress: impl Fn(&Result<Outcome, Failure>) + Sync,
) -> Summary {
    let begun = Instant::now();
    let summary = Mutex::new(Summary {
        settings: server_settings_tally(&scenarios),
        encodings: encodings_tally(&scenarios),
        ..Summary::default()
    });
    on_threads(scenarios, jobs, run_seed, |result| {
        progress(&result);
        summary.lock().add(result);
    });
    let mut summary = summary.into_inner();
    summary.failures.sort_by_key(|f| f.seed);
    summary.jobs_left = jobs_left_on_the_pool();
    summary.threads_left = pool_threads_settled();
    summary.wall = begun.elapsed();
    summary
}

/// Runs `run` over `scenarios` on `jobs` threads, handing each result to `each` as it comes.
pub(crate) fn on_threads<T>(
    scenarios: Vec<Scenario>,
    jobs: usize,
    run: impl Fn(&Scenario) -> T + Sync,
    each: impl Fn(T) + Sync,
) {
    let next = AtomicUsize::new(0);
    let scenarios = Arc::new(scenarios);
    std::thread::scope(|scope| {
        for _ in 0..jobs.max(1) {
            scope.spawn(|| {
                loop {
                    let i = next.fetch_add(1, Ordering::SeqCst);
                    let Some(scenario) = scenarios.get(i) else {
                        return;
                    };
                    each(run(scenario));
                }
            });
        }
    });
}
