//! Running scenarios: one on its own runtime ([`run_seed`]), many on a pool of threads
//! ([`run_seeds`]), with the verdict and the figures of each.

use std::collections::BTreeMap;
use std::fmt;
use std::time::{Duration, Instant};

use informer_apiserver::{ApiServer, Config};
use informer_kube::EncodingCounts;

use crate::journal::WriteLog;
use crate::scenario::{Scenario, Step};
use crate::seeds::{SeedSuite, Summary, run_suite};
use crate::stack::{Stack, StackOptions, apply, calm, client, inject};

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

impl fmt::Display for Outcome {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "seed {} passed: {} writes, {} faults, {} notifications, {} relists, {} tombstones, \
             {} protobuf and {} JSON responses, settled in {:.2?}, {:.2?} in all",
            self.seed,
            self.writes,
            self.faults.values().sum::<u64>(),
            self.notifications,
            self.relists,
            self.tombstones,
            self.responses.protobuf,
            self.responses.json,
            self.settled_in,
            self.wall
        )
    }
}

/// Which suite a seed ran in: it decides the command that replays it, and the words of its
/// summary.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Suite {
    /// The informers' convergence runs ([`run_seed`]).
    #[default]
    Informers,
    /// The controller's convergence runs
    /// ([`run_controller_seed`](crate::controller::run_controller_seed)).
    Controller,
    /// The sharded controller's runs: replicas killed, cut off and joining
    /// ([`run_sharded_seed`](crate::sharded::run_sharded_seed)).
    Sharded,
}

impl Suite {
    /// What its seeds are called: `seeds`, `controller seeds`.
    pub fn seeds(self) -> &'static str {
        match self {
            Suite::Informers => "seeds",
            Suite::Controller => "controller seeds",
            Suite::Sharded => "sharded seeds",
        }
    }

    /// What its summary calls the faults it fired, and the width of their kinds' column.
    pub fn faults(self) -> (&'static str, usize) {
        match self {
            Suite::Informers => ("faults", 22),
            Suite::Controller => ("faults and disturbances", 28),
            Suite::Sharded => ("faults and replica events", 28),
        }
    }

    /// The flag of the `informer-chaos` binary that runs it.
    fn flag(self) -> &'static str {
        match self {
            Suite::Informers => "",
            Suite::Controller => " --controller",
            Suite::Sharded => " --sharded",
        }
    }
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
        replay_with(self.suite.flag(), self.seed, self.steps)
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
    replay_with(Suite::Informers.flag(), seed, steps)
}

/// The command that replays one seed of the controller scenario.
pub fn controller_replay_command(seed: u64, steps: usize) -> String {
    replay_with(Suite::Controller.flag(), seed, steps)
}

fn replay_with(flag: &str, seed: u64, steps: usize) -> String {
    let mut command = format!("cargo run --release -p informer-chaos --{flag} --seed {seed}");
    if steps != crate::scenario::DEFAULT_STEPS {
        command.push_str(&format!(" --steps {steps}"));
    }
    command
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

/// The informers' figures over many seeds (see [`Summary`]).
#[derive(Debug, Default)]
pub struct InformersTally {
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
}

impl SeedSuite for InformersTally {
    type Outcome = Outcome;

    const SUITE: Suite = Suite::Informers;

    const RUN_SEED: fn(&Scenario) -> Result<Outcome, Failure> = run_seed;

    fn add(&mut self, outcome: Outcome) -> (BTreeMap<&'static str, u64>, EncodingCounts) {
        self.writes += outcome.writes as u64;
        self.notifications += outcome.notifications;
        self.relists += outcome.relists;
        self.tombstones += outcome.tombstones;
        self.coalesced += outcome.coalesced;
        self.seeds_coalescing += usize::from(outcome.coalesced > 0);
        self.slowest_settle = self.slowest_settle.max(outcome.settled_in);
        (outcome.faults, outcome.responses)
    }

    fn write_lines(&self, passed: usize, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "writes: {}, notifications: {}, relists: {}, tombstones: {}, slowest settle: {:.2?}",
            self.writes, self.notifications, self.relists, self.tombstones, self.slowest_settle
        )?;
        writeln!(
            f,
            "slow consumers coalesced {} notifications, in {} of {} seeds",
            self.coalesced, self.seeds_coalescing, passed
        )
    }
}

/// Runs `scenarios` on `jobs` threads, each seed on a runtime of its own; `progress` is told of
/// every result as it comes. Once all have finished, no job may be left on the delivery pool.
pub fn run_seeds(
    scenarios: Vec<Scenario>,
    jobs: usize,
    progress: impl Fn(&Result<Outcome, Failure>) + Sync,
) -> Summary<InformersTally> {
    run_suite(scenarios, jobs, progress)
}
