//! Many seeds of one suite on a pool of threads ([`run_suite`]) and their [`Summary`]: the part
//! every suite reports the same way (seeds run, passed and failed, faults fired, the server
//! settings and encodings drawn, what was left on the delivery pool, the wall time) around the
//! suite's own tally, which a [`SeedSuite`] supplies: the informers'
//! ([`InformersTally`](crate::runner::InformersTally)) and the controller's
//! ([`ControllerTally`](crate::controller::ControllerTally)).

use std::collections::BTreeMap;
use std::fmt;
use std::ops::Deref;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use informer_kube::EncodingCounts;
use parking_lot::Mutex;

use crate::runner::{Failure, Suite};
use crate::scenario::{Scenario, encodings_tally, server_settings_tally};
use crate::stack::sum_counts;

/// A suite of seeds, as its tally: how one seed runs, and the suite's own figures summed over
/// the passing seeds and written into the [`Summary`].
pub trait SeedSuite: Default + fmt::Debug + Send {
    /// What a passing seed did (shown as its `seed N passed: …` line).
    type Outcome: fmt::Display;

    /// The suite: how its seeds and faults are called, and how a failure replays.
    const SUITE: Suite;

    /// Runs one seed on a runtime of its own.
    const RUN_SEED: fn(&Scenario) -> Result<Self::Outcome, Failure>;

    /// Adds a passing seed's own figures, and hands back what the summary of every suite keeps
    /// of it: the faults (and disturbances) it fired, by kind, and the responses its informers
    /// read, by encoding.
    fn add(&mut self, outcome: Self::Outcome) -> (BTreeMap<&'static str, u64>, EncodingCounts);

    /// Writes the suite's own lines, between the seeds and the faults fired; `passed` seeds
    /// make the tally.
    fn write_lines(&self, passed: usize, f: &mut fmt::Formatter<'_>) -> fmt::Result;
}

/// The results of many seeds of the suite `T`.
///
/// It dereferences to the suite's tally, so that its figures read as the summary's own
/// (`summary.relists`).
#[derive(Debug, Default)]
pub struct Summary<T> {
    /// Seeds run.
    pub seeds: usize,
    /// Seeds that passed.
    pub passed: usize,
    /// The failures, by seed.
    pub failures: Vec<Failure>,
    /// Faults (and disturbances) fired, by kind, over all passing seeds.
    pub faults: BTreeMap<&'static str, u64>,
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
    /// The suite's own figures, over all passing seeds.
    pub tally: T,
}

impl<T> Deref for Summary<T> {
    type Target = T;

    fn deref(&self) -> &T {
        &self.tally
    }
}

impl<T: SeedSuite> Summary<T> {
    /// Whether every seed passed and nothing of any informer was left running.
    pub fn ok(&self) -> bool {
        self.failures.is_empty() && self.jobs_left == 0
    }

    fn add(&mut self, result: Result<T::Outcome, Failure>) {
        self.seeds += 1;
        match result {
            Ok(outcome) => {
                self.passed += 1;
                let (faults, responses) = self.tally.add(outcome);
                for (kind, n) in faults {
                    *self.faults.entry(kind).or_default() += n;
                }
                self.responses = sum_counts([self.responses, responses]);
            }
            Err(failure) => self.failures.push(failure),
        }
    }

    /// Writes how many seeds ran with each optional server setting.
    fn write_settings(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "server settings, seeds of {}:", self.seeds)?;
        for (name, n) in &self.settings {
            writeln!(f, "  {name:<28} {n}")?;
        }
        Ok(())
    }

    /// Writes how many seeds read each encoding, and the responses read in each.
    fn write_encodings(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "encodings, seeds of {}:", self.seeds)?;
        for (name, n) in &self.encodings {
            let read = match *name {
                "json" => self.responses.json,
                _ => self.responses.protobuf,
            };
            writeln!(f, "  {name:<28} {n} ({read} responses read)")?;
        }
        Ok(())
    }
}

impl<T: SeedSuite> fmt::Display for Summary<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "{} run: {}, passed: {}, failed: {}",
            T::SUITE.seeds(),
            self.seeds,
            self.passed,
            self.failures.len()
        )?;
        if !self.failures.is_empty() {
            let mut seeds: Vec<u64> = self.failures.iter().map(|f| f.seed).collect();
            seeds.sort_unstable();
            writeln!(f, "failed seeds: {seeds:?}")?;
        }
        self.tally.write_lines(self.passed, f)?;
        let (faults, width) = T::SUITE.faults();
        writeln!(
            f,
            "{faults} fired ({} in all):",
            self.faults.values().sum::<u64>()
        )?;
        for (kind, n) in &self.faults {
            writeln!(f, "  {kind:<width$} {n}")?;
        }
        self.write_settings(f)?;
        self.write_encodings(f)?;
        writeln!(f, "jobs left on the delivery pool: {}", self.jobs_left)?;
        match self.threads_left {
            Some(n) => writeln!(f, "delivery pool threads after the last seed: {n}")?,
            None => writeln!(f, "delivery pool threads: not measurable (no /proc)")?,
        }
        write!(f, "wall time: {:.2?}", self.wall)
    }
}

/// Runs the seeds of `scenarios` in the suite `T` on `jobs` threads, each seed on a runtime of
/// its own; `progress` is told of every result as it comes. Once all have finished, no job may
/// be left on the delivery pool.
pub fn run_suite<T: SeedSuite>(
    scenarios: Vec<Scenario>,
    jobs: usize,
    progress: impl Fn(&Result<T::Outcome, Failure>) + Sync,
) -> Summary<T> {
    let begun = Instant::now();
    let summary = Mutex::new(Summary::<T> {
        settings: server_settings_tally(&scenarios),
        encodings: encodings_tally(&scenarios),
        ..Summary::default()
    });
    on_threads(scenarios, jobs, T::RUN_SEED, |result| {
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
fn on_threads<T>(
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
fn pool_threads_settled() -> Option<usize> {
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
fn jobs_left_on_the_pool() -> usize {
    let pool = informer::DeliveryPool::global();
    let deadline = Instant::now() + Duration::from_secs(10);
    while pool.jobs() > 0 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(5));
    }
    pool.jobs()
}
