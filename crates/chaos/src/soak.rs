//! Soak mode: the same stack and checks at volume — 100,000 pods, sustained churn for minutes
//! with faults — reporting throughput, peak memory and handler lag, and proving at the end that
//! nothing was lost.

use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use informer::DeliveryPool;
use informer_apiserver::{ApiServer, Config};

use crate::journal::WriteLog;
use crate::scenario::{Fault, Generator, NAMESPACES, NODES, Op, PodKey};
use crate::server_process::ServerProcess;
use crate::stack::{Stack, StackOptions, apply, calm, client, client_for, inject};

/// The settings of a soak run.
#[derive(Debug, Clone)]
pub struct SoakOptions {
    /// Pods created before the informers start.
    pub objects: usize,
    /// How long the churn lasts.
    pub duration: Duration,
    /// Writes per second while churning.
    pub rate: u32,
    /// Writes between two faults.
    pub fault_every: u64,
    /// The seed of the churn and fault choices.
    pub seed: u64,
    /// How long the slow handler sleeps per notification. A relist hands every handler an
    /// update per object; a handler slower than that falls behind its bounded buffer (the
    /// default, [`DEFAULT_BUFFER`](informer::DEFAULT_BUFFER) notifications) and from
    /// then on receives one notification per changed key until it catches up.
    pub slow_handler: Duration,
    /// Run the simulator (and the churn, which writes through its Rust handle, and the faults)
    /// in a process of its own: this executable, started with `--soak-server` and the soak's
    /// settings (the `informer-chaos` binary is one). The figures of this process — peak RSS
    /// above all — are then the informers' alone. `None`: the simulator runs in this process.
    pub server_process: Option<PathBuf>,
}

/// Percentiles of the handler lag: from the write on the server to the main handler seeing it.
#[derive(Debug, Clone, Copy, Default)]
pub struct Lag {
    /// Changes measured.
    pub samples: usize,
    /// Median.
    pub p50: Duration,
    /// 90th percentile.
    pub p90: Duration,
    /// 99th percentile.
    pub p99: Duration,
    /// Worst.
    pub max: Duration,
}

/// What a soak run measured and found.
#[derive(Debug, Default)]
pub struct SoakReport {
    /// The settings.
    pub objects: usize,
    /// From the informers' start to both caches synced.
    pub initial_sync: Duration,
    /// The churn's length, as run.
    pub churned_for: Duration,
    /// Writes during the churn.
    pub writes: u64,
    /// Faults fired, by kind.
    pub faults: BTreeMap<String, u64>,
    /// Notifications the main handler handled during the churn, per second.
    pub events_per_sec: f64,
    /// Notifications handled, every handler together, whole run.
    pub notifications: u64,
    /// Lists after the first, both informers.
    pub relists: u64,
    /// Tombstones, every handler.
    pub tombstones: u64,
    /// Peak resident memory of this process (`VmHWM`), in KiB. With the simulator in this
    /// process, it holds every object and its history too; with
    /// [`server_process`](SoakOptions::server_process), this is the informers' process alone.
    pub peak_rss_kib: Option<u64>,
    /// Resident memory of this process just before the informers started (`VmRSS`), in KiB:
    /// with the simulator in this process, once it held the initial objects (its share of the
    /// peak); with a server process, the runtime and the client.
    pub rss_before_informers_kib: Option<u64>,
    /// With a server process: that process's peak resident memory (`VmHWM`), in KiB.
    pub server_peak_rss_kib: Option<u64>,
    /// This process's resident memory once both caches had synced (`VmRSS`), in KiB.
    pub rss_synced_kib: Option<u64>,
    /// The delivery pool's core threads.
    pub pool_size: usize,
    /// The most threads the delivery pool had at once (core and spares, sampled every 10 ms):
    /// above [`pool_size`](Self::pool_size), a handler was held up long enough for a spare.
    pub pool_threads_max: usize,
    /// Handler lag.
    pub lag: Lag,
    /// From the end of the churn to convergence.
    pub settled_in: Duration,
    /// Pods on the server at the end.
    pub final_objects: usize,
    /// What went wrong; empty if the run passed.
    pub problems: Vec<String>,
    /// The whole run.
    pub wall: Duration,
}

impl SoakReport {
    /// Whether the final checks passed.
    pub fn ok(&self) -> bool {
        self.problems.is_empty()
    }
}

impl fmt::Display for SoakReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "soak: {} pods to start, initial sync {:.2?}, churn for {:.1?}",
            self.objects, self.initial_sync, self.churned_for
        )?;
        writeln!(
            f,
            "writes: {} ({:.0}/s), main handler: {:.0} events/s, notifications (all handlers): {}",
            self.writes,
            self.writes as f64 / self.churned_for.as_secs_f64().max(1e-9),
            self.events_per_sec,
            self.notifications
        )?;
        writeln!(
            f,
            "relists: {}, tombstones: {}, faults: {} ({})",
            self.relists,
            self.tombstones,
            self.faults.values().sum::<u64>(),
            self.faults
                .iter()
                .map(|(k, n)| format!("{k} {n}"))
                .collect::<Vec<_>>()
                .join(", ")
        )?;
        let mib = |kib: u64| kib as f64 / 1024.0;
        match (
            self.peak_rss_kib,
            self.rss_before_informers_kib,
            self.server_peak_rss_kib,
        ) {
            (Some(peak), Some(before), Some(server)) => writeln!(
                f,
                "peak RSS (VmHWM): {:.1} MiB for the informers' process ({:.1} MiB before the \
                 informers started); the simulator's own process: {:.1} MiB",
                mib(peak),
                mib(before),
                mib(server)
            )?,
            (Some(peak), Some(before), None) => writeln!(
                f,
                "peak RSS (VmHWM): {:.1} MiB for the whole process; {:.1} MiB of it before the \
                 informers started (the simulator holding the objects)",
                mib(peak),
                mib(before)
            )?,
            (Some(peak), None, _) => writeln!(f, "peak RSS (VmHWM): {:.1} MiB", mib(peak))?,
            _ => writeln!(f, "peak RSS: not available")?,
        }
        if let Some(synced) = self.rss_synced_kib {
            writeln!(f, "RSS once both caches had synced: {:.1} MiB", mib(synced))?;
        }
        writeln!(
            f,
            "delivery pool: {} threads, at most {} at once (spares for handlers held up)",
            self.pool_size, self.pool_threads_max
        )?;
        writeln!(
            f,
            "handler lag (write → main handler, {} changes): p50 {:.2?}, p90 {:.2?}, p99 {:.2?}, \
             max {:.2?}",
            self.lag.samples, self.lag.p50, self.lag.p90, self.lag.p99, self.lag.max
        )?;
        if self.ok() {
            writeln!(
                f,
                "CONVERGED: {} pods, caches and every handler's view equal the server object by \
                 object (settled {:.2?} after the churn stopped); relists all had a reason",
                self.final_objects, self.settled_in
            )?;
        } else {
            writeln!(f, "FAILED:")?;
            for p in &self.problems {
                writeln!(f, "  - {p}")?;
            }
        }
        write!(f, "wall time: {:.1?}", self.wall)
    }
}

/// The process's peak resident set size, from `/proc/self/status`.
pub fn peak_rss_kib() -> Option<u64> {
    proc_status_kib("VmHWM:")
}

/// The process's current resident set size, from `/proc/self/status`.
pub fn rss_kib() -> Option<u64> {
    proc_status_kib("VmRSS:")
}

fn proc_status_kib(field: &str) -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with(field))?;
    line.split_whitespace().nth(1)?.parse().ok()
}

/// How long the soak waits for the first sync and for the final convergence.
const SOAK_BOUND: Duration = Duration::from_secs(300);

/// Runs a soak on a runtime of its own (two worker threads).
pub fn soak(options: &SoakOptions) -> SoakReport {
    let begun = Instant::now();
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            return SoakReport {
                problems: vec![format!("building a runtime: {e}")],
                ..SoakReport::default()
            };
        }
    };
    let mut report = runtime.block_on(async {
        let pool = DeliveryPool::global();
        let most = Arc::new(AtomicUsize::new(pool.threads()));
        let sampler = tokio::spawn({
            let most = Arc::clone(&most);
            async move {
                let mut tick = tokio::time::interval(Duration::from_millis(10));
                loop {
                    tick.tick().await;
                    most.fetch_max(pool.threads(), Ordering::Relaxed);
                }
            }
        });
        let mut report = soak_in_runtime(options).await;
        sampler.abort();
        report.pool_size = pool.size();
        report.pool_threads_max = most.load(Ordering::Relaxed);
        report
    });
    report.peak_rss_kib = peak_rss_kib();
    report.wall = begun.elapsed();
    report
}

/// The soak, with the simulator in this process or in one of its own.
async fn soak_in_runtime(options: &SoakOptions) -> SoakReport {
    if let Some(exe) = &options.server_process {
        return soak_with_server_process(exe, options).await;
    }
    let server = match ApiServer::start(Config::for_tests(Duration::from_secs(1))).await {
        Ok(s) => s,
        Err(e) => {
            return SoakReport {
                problems: vec![format!("starting the API server: {e}")],
                ..SoakReport::default()
            };
        }
    };
    let report = soak_on(&server, options).await;
    server.shutdown().await;
    report
}

/// The soak's churn, from a seed: the generator and the log of every write.
pub(crate) struct Churner {
    generator: Generator,
    writes: WriteLog,
}

/// What a churn did.
#[derive(Debug, Default)]
pub(crate) struct Churned {
    pub(crate) writes: u64,
    pub(crate) faults: BTreeMap<String, u64>,
    pub(crate) problems: Vec<String>,
}

impl Churner {
    /// Creates the initial pods on `server`.
    pub(crate) fn seed(server: &ApiServer, options: &SoakOptions) -> Result<Self, String> {
        let writes = WriteLog::default();
        // Names are reused after deletes; a fifth of them are free at any time.
        let per_namespace = (options.objects * 6 / 5).div_ceil(NAMESPACES.len()).max(1);
        let mut generator = Generator::new(options.seed, per_namespace);
        for i in 0..options.objects {
            let key = PodKey {
                namespace: NAMESPACES[i % NAMESPACES.len()].to_owned(),
                name: format!("pod-{}", i / NAMESPACES.len()),
            };
            let op = Op::Create {
                key,
                node: (i as u32) % NODES,
                gold: i % 2 == 0,
            };
            generator.adopt(&op);
            apply(server, &op, &writes)?;
        }
        Ok(Self { generator, writes })
    }

    /// When each revision was written.
    pub(crate) fn write_times(&self) -> HashMap<u64, Instant> {
        self.writes.times()
    }

    /// Churns at the rate for the duration, a fault every `fault_every` writes (windows close
    /// half a period later), then calms the server.
    pub(crate) async fn churn(&mut self, server: &ApiServer, options: &SoakOptions) -> Churned {
        let mut churned = Churned::default();
        let begun = Instant::now();
        let mut done: u64 = 0;
        let mut closing: Option<(u64, Fault)> = None;
        let mut tick = tokio::time::interval(Duration::from_millis(10));
        'churn: while begun.elapsed() < options.duration {
            tick.tick().await;
            let due = (begun.elapsed().as_secs_f64() * f64::from(options.rate)) as u64;
            while done < due {
                let op = self.generator.op();
                if let Err(e) = apply(server, &op, &self.writes) {
                    churned.problems.push(e);
                    break 'churn;
                }
                done += 1;
                if let Some((at, _)) = &closing
                    && done >= *at
                    && let Some((_, fault)) = closing.take()
                {
                    inject(server, &fault);
                    *churned.faults.entry(fault.kind().to_owned()).or_default() += 1;
                }
                if done.is_multiple_of(options.fault_every) {
                    let fault = self.generator.fault();
                    inject(server, &fault);
                    *churned.faults.entry(fault.kind().to_owned()).or_default() += 1;
                    let close = match fault {
                        Fault::Bookmarks(false) => Some(Fault::Bookmarks(true)),
                        Fault::SlowStream(Some(_)) => Some(Fault::SlowStream(None)),
                        _ => None,
                    };
                    if let Some(close) = close {
                        if let Some((_, pending)) = closing.take() {
                            inject(server, &pending);
                        }
                        closing = Some((done + options.fault_every / 2, close));
                    }
                }
            }
        }
        churned.writes = done;
        calm(server);
        churned
    }
}

async fn soak_on(server: &ApiServer, options: &SoakOptions) -> SoakReport {
    let mut report = SoakReport {
        objects: options.objects,
        ..SoakReport::default()
    };
    let mut churner = match Churner::seed(server, options) {
        Ok(c) => c,
        Err(e) => {
            report.problems.push(e);
            return report;
        }
    };
    report.rss_before_informers_kib = rss_kib();
    let Some(stack) = start_stack(client(server), options, &mut report).await else {
        return report;
    };

    let churn_begun = Instant::now();
    let main_before = stack.main.notifications();
    let churned = churner.churn(server, options).await;
    report.churned_for = churn_begun.elapsed();
    report.events_per_sec = (stack.main.notifications() - main_before) as f64
        / report.churned_for.as_secs_f64().max(1e-9);
    report.writes = churned.writes;
    report.faults = churned.faults;
    report.problems.extend(churned.problems);

    let converged = stack.converge(server, SOAK_BOUND).await;
    finish(stack, &mut report, converged, &churner.write_times()).await;
    report
}

/// Starts the informers over `client` and waits for both caches to sync; `None` (with the
/// problem in `report`) if they cannot start or do not sync.
async fn start_stack(
    client: Result<kube::Client, String>,
    options: &SoakOptions,
    report: &mut SoakReport,
) -> Option<Stack> {
    let client = match client {
        Ok(c) => c,
        Err(e) => {
            report.problems.push(e);
            return None;
        }
    };
    let started = Instant::now();
    let stack = match Stack::start(
        &client,
        &StackOptions {
            min_watch_timeout: Duration::from_secs(60),
            streaming_list: false,
            relist_by_page: false,
            slow_delay: options.slow_handler,
            slow_buffer: informer::DEFAULT_BUFFER,
            keep_notes: false,
            record_times: true,
            json_only: false,
        },
    ) {
        Ok(s) => s,
        Err(e) => {
            report.problems.push(e);
            return None;
        }
    };
    drop(client);
    let synced = tokio::time::timeout(SOAK_BOUND, async {
        stack.all.wait_for_sync().await;
        stack.gold.wait_for_sync().await;
    })
    .await;
    if synced.is_err() {
        report
            .problems
            .push(format!("the caches did not sync within {SOAK_BOUND:?}"));
        report.problems.extend(stack.shutdown(SOAK_BOUND).await);
        return None;
    }
    report.initial_sync = started.elapsed();
    report.rss_synced_kib = rss_kib();
    Some(stack)
}

/// The convergence outcome, the history checks, the counters and the lag; then stops the
/// informers.
async fn finish(
    stack: Stack,
    report: &mut SoakReport,
    converged: Result<Duration, Vec<String>>,
    write_times: &HashMap<u64, Instant>,
) {
    match converged {
        Ok(took) => report.settled_in = took,
        Err(differences) => {
            report.problems.push(format!(
                "no convergence within {SOAK_BOUND:?} after the churn stopped:"
            ));
            report.problems.extend(differences);
        }
    }
    report.problems.extend(stack.check_history(None));
    report.notifications = stack.notifications();
    report.relists = stack.relists();
    report.tombstones = stack.tombstones();
    report.final_objects = stack.all.lister().list(&informer_store::Everything).len();
    report.lag = lag(write_times, stack.main.take_times());
    report.problems.extend(stack.shutdown(SOAK_BOUND).await);
}

/// The soak with the simulator and the churn in a process of their own, `exe --soak-server`.
async fn soak_with_server_process(exe: &Path, options: &SoakOptions) -> SoakReport {
    let mut report = SoakReport {
        objects: options.objects,
        ..SoakReport::default()
    };
    let mut server = match ServerProcess::spawn(exe, options).await {
        Ok(s) => s,
        Err(e) => {
            report.problems.push(e);
            return report;
        }
    };
    report.rss_before_informers_kib = rss_kib();
    let Some(stack) = start_stack(client_for(server.url()), options, &mut report).await else {
        server.quit().await;
        return report;
    };

    let churn_begun = Instant::now();
    let main_before = stack.main.notifications();
    let churned = server.churn().await;
    report.churned_for = churn_begun.elapsed();
    report.events_per_sec = (stack.main.notifications() - main_before) as f64
        / report.churned_for.as_secs_f64().max(1e-9);
    match churned {
        Ok(churned) => {
            report.writes = churned.writes;
            report.faults = churned.faults;
            report.problems.extend(churned.problems);
        }
        Err(e) => report.problems.push(e),
    }

    // The churn was the only writer: the server no longer changes (checked after).
    let converged = match server.pods().await {
        Ok((pods, head)) => {
            let converged = stack.converge_to(&pods, SOAK_BOUND).await;
            match server.head().await {
                Ok(now) if now == head => converged,
                Ok(now) => Err(vec![format!(
                    "the server changed after the churn (revision {head}, then {now})"
                )]),
                Err(e) => Err(vec![e]),
            }
        }
        Err(e) => Err(vec![e]),
    };
    let times = match server.write_times().await {
        Ok(t) => t,
        Err(e) => {
            report.problems.push(e);
            HashMap::new()
        }
    };
    finish(stack, &mut report, converged, &times).await;
    report.server_peak_rss_kib = server.peak_rss_kib().await;
    server.quit().await;
    report
}

/// The lag of each change the main handler saw, from its write's timestamp.
fn lag(times: &HashMap<u64, Instant>, seen: Vec<(u64, Instant)>) -> Lag {
    let mut lags: Vec<Duration> = seen
        .into_iter()
        .filter_map(|(rv, at)| Some(at.saturating_duration_since(*times.get(&rv)?)))
        .collect();
    if lags.is_empty() {
        return Lag::default();
    }
    lags.sort_unstable();
    let at = |q: f64| lags[((lags.len() - 1) as f64 * q).round() as usize];
    Lag {
        samples: lags.len(),
        p50: at(0.50),
        p90: at(0.90),
        p99: at(0.99),
        max: lags[lags.len() - 1],
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::journal::{Write, WriteKind};

    #[test]
    fn lag_percentiles_come_from_matching_revisions() {
        let log = WriteLog::default();
        let t0 = Instant::now();
        for rv in 1..=100u64 {
            log.record(
                format!("a/p{rv}"),
                Write {
                    rv,
                    kind: WriteKind::Upsert { gold: false },
                    at: t0,
                },
            );
        }
        let seen = (1..=100u64)
            .map(|rv| (rv, t0 + Duration::from_millis(rv)))
            .chain([(5000, t0 + Duration::from_secs(9))]) // not a write: ignored
            .collect();
        let lag = lag(&log.times(), seen);
        assert_eq!(lag.samples, 100);
        assert_eq!(lag.p50, Duration::from_millis(51));
        assert_eq!(lag.p90, Duration::from_millis(90));
        assert_eq!(lag.p99, Duration::from_millis(99));
        assert_eq!(lag.max, Duration::from_millis(100));
    }

    #[test]
    fn peak_rss_is_read_where_proc_exists() {
        if std::path::Path::new("/proc/self/status").exists() {
            // The resident set first: other tests' threads allocate meanwhile, and the peak
            // read after it is at least what it was then.
            let now = rss_kib().unwrap();
            let peak = peak_rss_kib().unwrap();
            assert!(peak > 0 && peak >= now, "VmHWM {peak} KiB, VmRSS {now} KiB");
        }
    }
}
