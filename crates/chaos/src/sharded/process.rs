//! The sharded scenario with each replica in a process of its own: this executable started
//! with `--sharded-replica` (the `informer-chaos` binary is one), the simulator, the churn and
//! the checks in the parent. Separate address spaces, and real kills: a kill is `SIGKILL`.
//!
//! A replica process runs one [`Replica`] and reports on its standard output, one line at a
//! time: each reconcile's start and end as a ledger [`Line`] (on the wall clock, which the
//! processes of one machine share), and every 100 ms its status,
//! `status <owned shards, comma-separated, or -> <queued> <in flight> <unplaced> <terms
//! started> <handed off> <lost>`. It stops
//! gracefully when its standard input closes, and says `stopped` (or `problem <text>` first).
//! The parent writes the reconciles into its own [`Ledger`]; those of a killed replica still
//! open end at the instant the parent saw it die.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::Arc;
use std::time::{Duration, Instant};

use informer_apiserver::ApiServer;
use informer_leaderelection::ShardStats;
use parking_lot::Mutex;
use tokio::io::{AsyncBufReadExt, AsyncReadExt, BufReader};
use tokio::process::{Child, ChildStdin, Command};
use tokio::task::JoinHandle;

use super::ledger::{Ledger, Line, finals, wall_now};
use super::replica::{Replica, ReplicaOptions};
use super::{
    ReplicaPlan, Replicas, Roster, RunFacts, ShardedOutcome, add_stats, churn, live_pods,
    options_of, settle, unconverged, verdict,
};
use crate::controller::{server_world, world_differences};
use crate::journal::WriteLog;
use crate::runner::{Failure, SETTLE_BOUND, Suite, start_server};
use crate::scenario::Scenario;
use crate::stack::apply;

/// What a replica process is told on its command line.
#[derive(Debug, Clone)]
pub struct ReplicaArgs {
    /// The simulator's URL.
    pub url: String,
    /// The replica's name.
    pub name: String,
    /// How it lists and watches.
    pub options: ReplicaOptions,
}

impl ReplicaArgs {
    /// The arguments that start it (after the executable).
    pub fn to_args(&self) -> Vec<String> {
        let o = &self.options;
        vec![
            "--sharded-replica".into(),
            format!(
                "{},{},{},{},{},{},{}",
                self.url,
                self.name,
                o.shards,
                o.min_watch_timeout.as_secs(),
                o.streaming_list,
                o.relist_by_page,
                o.json_only
            ),
        ]
    }

    /// Reads back what [`to_args`](Self::to_args) wrote after `--sharded-replica`.
    pub fn parse(spec: &str) -> Result<Self, String> {
        let bad = || format!("not a replica spec: {spec:?}");
        let parts: Vec<&str> = spec.split(',').collect();
        let [url, name, shards, timeout, streaming, by_page, json] = parts.as_slice() else {
            return Err(bad());
        };
        let flag = |s: &str| s.parse::<bool>().map_err(|_| bad());
        Ok(Self {
            url: (*url).to_owned(),
            name: (*name).to_owned(),
            options: ReplicaOptions {
                shards: shards.parse().map_err(|_| bad())?,
                min_watch_timeout: Duration::from_secs(timeout.parse().map_err(|_| bad())?),
                streaming_list: flag(streaming)?,
                relist_by_page: flag(by_page)?,
                json_only: flag(json)?,
            },
        })
    }
}

/// Writes one line to standard output at once (the parent reads as it goes).
fn say(line: &str) {
    let mut out = std::io::stdout().lock();
    // The parent gone: nothing to report to; the closed stdin stops the replica.
    let _ = writeln!(out, "{line}").and_then(|()| out.flush());
}

/// The replica side: runs the replica `args` names until standard input closes.
pub fn serve_replica(args: &ReplicaArgs) -> Result<(), String> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| format!("building a runtime: {e}"))?;
    runtime.block_on(async {
        let ledger = Arc::new(Ledger::echoing(say));
        let replica = Replica::start(&args.name, &args.url, &args.options, ledger)?;
        let report = async {
            loop {
                let owned: Vec<String> = replica
                    .runner
                    .status()
                    .owned
                    .iter()
                    .map(u32::to_string)
                    .collect();
                let owned = if owned.is_empty() {
                    "-".to_owned()
                } else {
                    owned.join(",")
                };
                let stats = replica.runner.stats();
                say(&format!(
                    "status {owned} {} {} {} {} {} {}",
                    replica.queue.len(),
                    replica.queue.in_flight(),
                    replica.unplaced(),
                    stats.started,
                    stats.handed_off,
                    stats.lost
                ));
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        };
        let closed = async {
            let mut sink = Vec::new();
            let _ = tokio::io::stdin().read_to_end(&mut sink).await;
        };
        tokio::select! {
            () = report => {}
            () = closed => {}
        }
        for problem in replica.stop(SETTLE_BOUND).await {
            say(&format!("problem {problem}"));
        }
        say("stopped");
        Ok(())
    })
}

/// What the parent knows of a replica process, from its reports.
#[derive(Debug, Default)]
struct Status {
    owned: BTreeSet<u32>,
    busy: usize,
    unplaced: u64,
    terms: ShardStats,
    problems: Vec<String>,
    stopped: bool,
}

/// One replica process, seen from the parent.
struct ReplicaProcess {
    name: String,
    child: Child,
    stdin: Option<ChildStdin>,
    status: Arc<Mutex<Status>>,
    reader: JoinHandle<()>,
}

/// Reads a replica process's reports into `ledger` and `status` until its output ends.
async fn read_reports(
    stdout: tokio::process::ChildStdout,
    ledger: Arc<Ledger>,
    status: Arc<Mutex<Status>>,
) {
    let mut lines = BufReader::new(stdout).lines();
    let mut indexes: HashMap<usize, usize> = HashMap::new();
    while let Ok(Some(line)) = lines.next_line().await {
        if let Some(rest) = line.strip_prefix("status ") {
            let parts: Vec<&str> = rest.split(' ').collect();
            if let [
                owned,
                queued,
                in_flight,
                unplaced,
                started,
                handed_off,
                lost,
            ] = parts.as_slice()
            {
                let mut s = status.lock();
                s.terms = ShardStats {
                    started: started.parse().unwrap_or(0),
                    handed_off: handed_off.parse().unwrap_or(0),
                    lost: lost.parse().unwrap_or(0),
                    ..ShardStats::default()
                };
                s.owned = owned.split(',').filter_map(|n| n.parse().ok()).collect();
                s.busy =
                    queued.parse::<usize>().unwrap_or(1) + in_flight.parse::<usize>().unwrap_or(1);
                s.unplaced = unplaced.parse().unwrap_or(0);
            }
        } else if let Some(problem) = line.strip_prefix("problem ") {
            status.lock().problems.push(problem.to_owned());
        } else if line == "stopped" {
            status.lock().stopped = true;
        } else {
            match line.parse::<Line>() {
                Ok(Line::Begin(i, entry)) => {
                    indexes.insert(i, ledger.push(entry));
                }
                Ok(Line::End(i, at)) => {
                    if let Some(&mine) = indexes.get(&i) {
                        ledger.end(mine, at);
                    }
                }
                Err(e) => status.lock().problems.push(e),
            }
        }
    }
}

/// The replica processes of a run: this executable re-run as each.
struct ProcessFleet {
    exe: PathBuf,
    roster: Roster<ReplicaProcess>,
}

impl Replicas for ProcessFleet {
    fn names(&self) -> Vec<String> {
        self.roster.running.iter().map(|r| r.name.clone()).collect()
    }

    async fn join(&mut self) -> Result<(), String> {
        let name = self.roster.next_name();
        let args = ReplicaArgs {
            url: self.roster.url.clone(),
            name: name.clone(),
            options: self.roster.options,
        };
        let mut child = Command::new(&self.exe)
            .args(args.to_args())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .kill_on_drop(true)
            .spawn()
            .map_err(|e| format!("starting {name}: {e}"))?;
        let stdout = child.stdout.take().ok_or("no stdout")?;
        let status = Arc::new(Mutex::new(Status::default()));
        let reader = tokio::spawn(read_reports(
            stdout,
            Arc::clone(&self.roster.ledger),
            Arc::clone(&status),
        ));
        self.roster.running.push(ReplicaProcess {
            name,
            stdin: child.stdin.take(),
            child,
            status,
            reader,
        });
        Ok(())
    }

    async fn kill(&mut self, index: usize) -> Result<(), String> {
        let mut replica = self.roster.running.remove(index);
        replica
            .child
            .start_kill()
            .map_err(|e| format!("killing {}: {e}", replica.name))?;
        let _ = replica.child.wait().await;
        let died = wall_now();
        let _ = replica.reader.await;
        self.roster.ledger.close_replica(&replica.name, died);
        add_stats(&mut self.roster.gone, replica.status.lock().terms);
        Ok(())
    }
}

impl ProcessFleet {
    /// What keeps the run from having settled (see the module docs of [`super`]); the caches of
    /// the replica processes are not read, only their ownership, queues and reconciles.
    fn unsettled(&self, server: &ApiServer) -> Vec<String> {
        let (pods, config_maps) = match server_world(server) {
            Ok(world) => world,
            Err(e) => return vec![e],
        };
        let mut problems = world_differences(&pods, &config_maps);
        let mut owners: BTreeMap<u32, usize> = BTreeMap::new();
        for replica in &self.roster.running {
            let status = replica.status.lock();
            for shard in &status.owned {
                *owners.entry(*shard).or_default() += 1;
            }
            if status.busy > 0 {
                problems.push(format!("{} is busy", replica.name));
            }
        }
        for shard in 0..self.roster.options.shards {
            if owners.get(&shard) != Some(&1) {
                problems.push(format!("shard {shard} has {:?} owners", owners.get(&shard)));
            }
        }
        if problems.is_empty() {
            let live = live_pods(server).unwrap_or_default();
            problems.extend(finals(&self.roster.ledger.entries(), &live).problems);
        }
        problems
    }

    /// Closes every replica's standard input and waits (up to `bound`) for it to stop.
    async fn stop_all(&mut self, bound: Duration) -> Vec<String> {
        let mut problems = Vec::new();
        for mut replica in self.roster.running.drain(..) {
            add_stats(&mut self.roster.gone, replica.status.lock().terms);
            drop(replica.stdin.take());
            let exited = tokio::time::timeout(bound, replica.child.wait()).await;
            let _ = replica.reader.await;
            let status = replica.status.lock();
            problems.extend(
                status
                    .problems
                    .iter()
                    .map(|p| format!("{}: {p}", replica.name)),
            );
            match exited {
                Ok(Ok(code)) if code.success() && status.stopped => {}
                Ok(result) => problems.push(format!("{} ended: {result:?}", replica.name)),
                Err(_) => problems.push(format!("{} did not stop within {bound:?}", replica.name)),
            }
        }
        problems
    }
}

/// Runs the sharded scenario of `scenario` with each replica a process of `exe`.
pub async fn run_sharded_processes(
    scenario: &Scenario,
    exe: &Path,
) -> Result<ShardedOutcome, Failure> {
    let begun = Instant::now();
    let fail = |problems: Vec<String>| Failure::of(scenario, Suite::Sharded, problems);
    let server = start_server(scenario).await.map_err(|e| fail(vec![e]))?;
    let outcome = drive(scenario, &server, exe).await;
    server.shutdown().await;
    let mut outcome = outcome.map_err(fail)?;
    outcome.wall = begun.elapsed();
    Ok(outcome)
}

async fn drive(
    scenario: &Scenario,
    server: &ApiServer,
    exe: &Path,
) -> Result<ShardedOutcome, Vec<String>> {
    let plan = ReplicaPlan::of(scenario);
    for op in &scenario.initial {
        apply(server, op, &WriteLog::default()).map_err(|e| vec![e])?;
    }
    let mut fleet = ProcessFleet {
        exe: exe.to_owned(),
        roster: Roster::new(server.url(), options_of(scenario, plan.shards)),
    };
    for _ in 0..plan.initial {
        fleet.join().await.map_err(|e| vec![e])?;
    }
    let (faults, mut problems) = churn(scenario, server, &plan, &mut fleet).await;
    let mut settled_in = SETTLE_BOUND;
    if problems.is_empty() {
        match settle(SETTLE_BOUND, || fleet.unsettled(server)).await {
            Ok(took) => settled_in = took,
            Err(left) => {
                let running = fleet.roster.running.iter();
                let unplaced = running.map(|r| (r.name.clone(), r.status.lock().unplaced));
                problems.extend(unconverged(left, unplaced));
            }
        }
    }
    problems.extend(fleet.stop_all(SETTLE_BOUND).await);
    let facts = RunFacts {
        replicas: fleet.roster.started,
        stats: fleet.roster.gone,
        faults,
        settled_in,
    };
    verdict(
        scenario,
        server,
        &fleet.roster.ledger.entries(),
        facts,
        problems,
    )
}
