//! The report: every workload once more, for ours and kube-runtime in the same run, as one
//! table (the `report` binary prints it).
//!
//! Each workload runs [`Options::reps`] times, ours and kube-runtime alternating, and a figure
//! is the median. Every row carries the one-minute load average read when it was measured:
//! on a shared machine a figure means little without it.

use std::path::PathBuf;
use std::process::Command;
use std::time::{Duration, Instant};

use informer_store::NAMESPACE_INDEX;

use crate::mem::{Mode, Sample};
use crate::realistic::ManagedFields;
use crate::w_idx::Phase;
use crate::workload::NODE_INDEX;
use crate::{Sizes, replay, w_ctrl, w_fifo, w_http, w_idx, w_inf, w_wq};

/// The workloads, by name (`--only` matches a part of one of these).
pub const WORKLOADS: [&str; 15] = [
    "w-fifo-a",
    "w-fifo-b",
    "w-fifo-c",
    "w-wq",
    "w-idx",
    "w-inf",
    "w-http",
    "w-http-realistic",
    "w-http-process",
    "decode",
    "w-ctrl",
    "mem",
    "mem-projection",
    "mem-relist",
    "lean",
];

/// What to run.
#[derive(Debug, Clone)]
pub struct Options {
    /// Workload sizes.
    pub sizes: Sizes,
    /// Repetitions of each workload; figures are medians.
    pub reps: usize,
    /// Only the workloads whose name contains one of these (all when empty).
    pub only: Vec<String>,
    /// The `mem` binary; without it, MEM is reported as not measured.
    pub mem_exe: Option<PathBuf>,
    /// The `w_http_client` binary; without it, W-HTTP's rows of each side in its own process
    /// are not measured.
    pub w_http_exe: Option<PathBuf>,
}

impl Options {
    /// Whether `workload` is selected.
    pub fn selected(&self, workload: &str) -> bool {
        self.only.is_empty() || self.only.iter().any(|o| workload.contains(o.as_str()))
    }

    /// The names in `only` that select no workload.
    pub fn unknown_names(&self) -> Vec<&str> {
        self.only
            .iter()
            .filter(|o| !WORKLOADS.iter().any(|w| w.contains(o.as_str())))
            .map(String::as_str)
            .collect()
    }
}

/// One figure of a row.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Figure {
    /// Nanoseconds per operation.
    Ns(f64),
    /// Wall time, seconds.
    Secs(f64),
    /// Bytes per cached object.
    Bytes(f64),
    /// A share, in percent.
    Percent(f64),
    /// A number of things done (reconciles, …): fewer is better.
    Count(f64),
    /// A resident set, bytes (shown in MiB).
    Rss(f64),
    /// One figure over another (shown as `1.23×`).
    Factor(f64),
    /// Not measured, or not supported by that side.
    NotApplicable,
}

impl Figure {
    fn value(self) -> Option<f64> {
        match self {
            Figure::Ns(v)
            | Figure::Secs(v)
            | Figure::Bytes(v)
            | Figure::Percent(v)
            | Figure::Count(v)
            | Figure::Rss(v)
            | Figure::Factor(v) => Some(v),
            Figure::NotApplicable => None,
        }
    }

    /// `ours` per op from durations.
    fn per_op(d: Duration) -> Figure {
        Figure::Ns(d.as_secs_f64() * 1e9)
    }

    fn bytes(v: Option<f64>) -> Figure {
        v.map_or(Figure::NotApplicable, Figure::Bytes)
    }
}

impl std::fmt::Display for Figure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match *self {
            Figure::Ns(ns) if ns >= 10_000.0 => write!(f, "{:.1} µs", ns / 1000.0),
            Figure::Ns(ns) => write!(f, "{ns:.0} ns"),
            Figure::Secs(s) if s < 0.1 => write!(f, "{s:.4} s"),
            Figure::Secs(s) => write!(f, "{s:.3} s"),
            Figure::Bytes(b) => write!(f, "{b:.0} B"),
            Figure::Percent(p) => write!(f, "{p:.1} %"),
            Figure::Count(n) => f.write_str(&thousands(n)),
            Figure::Rss(b) => write!(f, "{:.1} MiB", b / (1024.0 * 1024.0)),
            Figure::Factor(x) => write!(f, "{x:.2}×"),
            Figure::NotApplicable => f.write_str("n/a"),
        }
    }
}

/// One row of the table.
#[derive(Debug, Clone, PartialEq)]
pub struct Row {
    /// The workload (`W-IDX`, …).
    pub workload: &'static str,
    /// The phase or variant.
    pub phase: String,
    /// Our figure.
    pub ours: Figure,
    /// kube-runtime's figure.
    pub kube_runtime: Figure,
    /// The target of the figure, as text (`""` when none).
    pub target: &'static str,
    /// Our events (or operations) per second.
    pub rate: Option<f64>,
    /// The one-minute load average when measured.
    pub load: Option<f64>,
}

impl Row {
    fn new(
        workload: &'static str,
        phase: impl Into<String>,
        ours: Figure,
        kube_runtime: Figure,
    ) -> Self {
        Self {
            workload,
            phase: phase.into(),
            ours,
            kube_runtime,
            target: "",
            rate: None,
            load: load_average(),
        }
    }

    fn target(mut self, target: &'static str) -> Self {
        self.target = target;
        self
    }

    /// Operations per second from ns per op.
    fn rate_per_op(mut self) -> Self {
        self.rate = self.ours.value().filter(|&ns| ns > 0.0).map(|ns| 1e9 / ns);
        self
    }

    /// Events per second from a wall time over `events`.
    fn rate_over(mut self, events: usize) -> Self {
        self.rate = self
            .ours
            .value()
            .filter(|&s| s > 0.0)
            .map(|s| events as f64 / s);
        self
    }

    /// kube-runtime's figure over ours: above 1, ours is faster (or smaller).
    pub fn ratio(&self) -> Option<f64> {
        match (self.ours.value(), self.kube_runtime.value()) {
            (Some(o), Some(k)) if o > 0.0 => Some(k / o),
            _ => None,
        }
    }
}

/// The one-minute load average, from `/proc/loadavg`.
pub fn load_average() -> Option<f64> {
    std::fs::read_to_string("/proc/loadavg")
        .ok()?
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

/// The machine: core count, CPU model, load averages.
pub fn machine() -> String {
    let cores = std::thread::available_parallelism().map_or(0, |n| n.get());
    let cpu = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|c| {
            c.lines()
                .find(|l| l.starts_with("model name"))
                .and_then(|l| l.split(':').nth(1))
                .map(|m| m.trim().to_owned())
        })
        .unwrap_or_else(|| "unknown CPU".to_owned());
    let load = std::fs::read_to_string("/proc/loadavg")
        .map(|l| l.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_default();
    format!("{cores} cores, {cpu}, load average {load}")
}

/// The median of `values` (the upper one of an even count).
pub fn median(mut values: Vec<f64>) -> f64 {
    assert!(!values.is_empty(), "a median of nothing");
    values.sort_by(f64::total_cmp);
    values[values.len() / 2]
}

fn median_of(reps: usize, mut f: impl FnMut() -> Duration) -> Duration {
    let runs = (0..reps.max(1)).map(|_| f().as_secs_f64()).collect();
    Duration::from_secs_f64(median(runs))
}

fn timed(f: impl FnOnce() -> usize) -> Duration {
    let start = Instant::now();
    std::hint::black_box(f());
    start.elapsed()
}

/// Runs the selected workloads; `progress` sees each row as it is measured.
pub fn run(opts: &Options, progress: &mut dyn FnMut(&Row)) -> Vec<Row> {
    let mut rows = Vec::new();
    let mut emit = |row: Row, rows: &mut Vec<Row>| {
        progress(&row);
        rows.push(row);
    };
    let s = opts.sizes;
    let reps = opts.reps;

    if opts.selected("w-fifo-a") {
        let objects = crate::workload::pods(s.fifo_a);
        for (name, make) in w_fifo::queues() {
            let t = median_of(reps, || timed(|| w_fifo::a(&*make(), &objects)));
            let row = Row::new(
                "W-FIFO-A",
                format!("{name}: ns per object (add + pop)"),
                Figure::per_op(t / s.fifo_a as u32),
                Figure::NotApplicable,
            );
            emit(row.target("160 ns").rate_per_op(), &mut rows);
        }
    }
    if opts.selected("w-fifo-b") {
        let updates = w_fifo::b_objects(s.fifo_b_keys, s.fifo_b_rounds);
        for (name, make) in w_fifo::queues() {
            let t = median_of(reps, || timed(|| w_fifo::b(&*make(), &updates)));
            let row = Row::new(
                "W-FIFO-B",
                format!("{name}: ns per update"),
                Figure::per_op(t / updates.len() as u32),
                Figure::NotApplicable,
            );
            emit(row.target("90 ns").rate_per_op(), &mut rows);
        }
    }
    if opts.selected("w-fifo-c") {
        let objects = w_fifo::c_objects(s.fifo_c_keys, s.fifo_c_ops);
        for (name, make) in w_fifo::queues() {
            let t = median_of(reps, || {
                let q = make();
                timed(|| w_fifo::c(&q, &objects, s.fifo_c_keys))
            });
            let row = Row::new(
                "W-FIFO-C",
                format!("{name}: ns per op"),
                Figure::per_op(t / s.fifo_c_ops as u32),
                Figure::NotApplicable,
            );
            emit(row.target("160 ns").rate_per_op(), &mut rows);
        }
    }
    if opts.selected("w-wq") {
        wq_rows(opts, &mut |r| emit(r, &mut rows));
    }
    if opts.selected("w-idx") {
        idx_rows(opts, &mut |r| emit(r, &mut rows));
    }
    let mut w_inf_ours = None;
    if opts.selected("w-inf") {
        w_inf_ours = inf_rows(opts, &mut |r| emit(r, &mut rows));
        inf_realistic_rows(opts, &mut |r| emit(r, &mut rows));
    }
    if opts.selected("w-http") {
        http_rows(opts, w_inf_ours, &mut |r| emit(r, &mut rows));
    }
    if opts.selected("w-http-process") {
        http_process_rows(opts, &mut |r| emit(r, &mut rows));
    }
    if opts.selected("w-http-realistic") {
        http_realistic_rows(opts, &mut |r| emit(r, &mut rows));
    }
    if opts.selected("decode") {
        decode_rows(opts, &mut |r| emit(r, &mut rows));
    }
    if opts.selected("w-ctrl") {
        ctrl_rows(opts, &mut |r| emit(r, &mut rows));
    }
    if opts.selected("mem") {
        mem_rows(opts, &mut |r| emit(r, &mut rows));
    }
    if opts.selected("mem-projection") {
        mem_projection_rows(opts, &mut |r| emit(r, &mut rows));
    }
    if opts.selected("mem-relist") {
        mem_relist_rows(opts, &mut |r| emit(r, &mut rows));
    }
    if opts.selected("lean") {
        lean_rows(opts, &mut |r| emit(r, &mut rows));
    }
    rows
}

/// LEAN: the read costs of the compact cache against the default cache, side by side (the
/// default cache in the kube-runtime column).
fn lean_rows(opts: &Options, emit: &mut dyn FnMut(Row)) {
    use crate::lean::{IN_NAMESPACE, by_index, caches, get_each, get_same};
    use informer_store::KnownObjects;
    let n = realistic_pods(&opts.sizes).min(10_000);
    let (plain, compact) = caches(n, crate::mem::COMPACT_HOT);
    let keys = plain.list_keys();
    let runs = opts.reps.max(3);
    let cold = |c: &dyn informer_store::Indexer<_>| median_of(runs, || get_each(c, &keys));
    let hot = |c: &dyn informer_store::Indexer<_>| median_of(runs, || get_same(c, &keys[0], 1_000));
    let index = |c: &dyn informer_store::Indexer<_>| median_of(runs, || by_index(c));
    for (what, ours, default) in [
        (
            format!("get of a pod not kept decoded ({n} realistic pods, every key once)"),
            cold(&*compact),
            cold(&plain),
        ),
        (
            "get of a pod kept decoded (the same key again)".to_owned(),
            hot(&*compact),
            hot(&plain),
        ),
        (
            format!("by_index of {IN_NAMESPACE} pods (one namespace)"),
            index(&*compact),
            index(&plain),
        ),
    ] {
        emit(Row::new(
            "LEAN",
            format!("{what}: compact cache (ours) vs the default cache"),
            Figure::per_op(ours),
            Figure::per_op(default),
        ));
    }
}

/// The target of a W-WQ row: a ratio to client-go that cannot be measured without Go.
const WQ_TARGET: &str =
    "≤ ⅓ of client-go's workqueue (client-go not measured here: no Go toolchain)";

/// The cost of metrics: `on` over `off` (medians of runs taken in turns), as a percentage.
fn overhead_row(workload: &'static str, phase: String, off: Vec<f64>, on: Vec<f64>) -> Row {
    let (off, on) = (median(off), median(on));
    let mut row = Row::new(
        workload,
        format!("{phase}: metrics on {on:.4} s, off {off:.4} s"),
        Figure::Percent((on / off - 1.0) * 100.0),
        Figure::NotApplicable,
    );
    row.target = "≤ 5 % (metrics on over off)";
    row
}

fn wq_rows(opts: &Options, emit: &mut dyn FnMut(Row)) {
    let s = opts.sizes;
    let rt = w_inf::runtime();
    let workers = w_wq::WORKERS;
    let t = median_of(opts.reps, || w_wq::distinct(&rt, s.wq_distinct, workers));
    let row = Row::new(
        "W-WQ",
        format!(
            "{} distinct keys, {workers} workers: ns per key (add + get + done)",
            thousands(s.wq_distinct as f64)
        ),
        Figure::per_op(t / s.wq_distinct as u32),
        Figure::NotApplicable,
    );
    emit(row.target(WQ_TARGET).rate_per_op());
    let adds = s.wq_hot_keys * s.wq_hot_rounds;
    let t = median_of(opts.reps, || {
        w_wq::hot(&rt, s.wq_hot_keys, s.wq_hot_rounds, workers)
    });
    let row = Row::new(
        "W-WQ",
        format!(
            "{} hot keys × {} re-adds while processed, {workers} workers: ns per add",
            thousands(s.wq_hot_keys as f64),
            s.wq_hot_rounds
        ),
        Figure::per_op(t / adds as u32),
        Figure::NotApplicable,
    );
    emit(row.target(WQ_TARGET).rate_per_op());
    let provider = || Some(informer_metrics::Metrics::new().workqueue_provider());
    let (mut off, mut on) = (Vec::new(), Vec::new());
    let (mut hot_off, mut hot_on) = (Vec::new(), Vec::new());
    for _ in 0..opts.reps.max(1) {
        off.push(w_wq::distinct_with(&rt, s.wq_distinct, workers, None).as_secs_f64());
        on.push(w_wq::distinct_with(&rt, s.wq_distinct, workers, provider()).as_secs_f64());
        let (k, r) = (s.wq_hot_keys, s.wq_hot_rounds);
        hot_off.push(w_wq::hot_with(&rt, k, r, workers, None).as_secs_f64());
        hot_on.push(w_wq::hot_with(&rt, k, r, workers, provider()).as_secs_f64());
    }
    emit(overhead_row(
        "W-WQ",
        format!("{} distinct keys", thousands(s.wq_distinct as f64)),
        off,
        on,
    ));
    emit(overhead_row(
        "W-WQ",
        format!(
            "{} hot keys × {}",
            thousands(s.wq_hot_keys as f64),
            s.wq_hot_rounds
        ),
        hot_off,
        hot_on,
    ));
}

fn ctrl_rows(opts: &Options, emit: &mut dyn FnMut(Row)) {
    let s = opts.sizes;
    let rt = w_inf::runtime();
    let data = w_ctrl::Data::new(s.ctrl_pods, s.ctrl_updates);
    let (mut ours, mut peer) = (Vec::new(), Vec::new());
    for _ in 0..opts.reps.max(1) {
        ours.push(w_ctrl::ours(&rt, &data));
        peer.push(w_ctrl::kube_runtime(&rt, &data));
    }
    let med =
        |runs: &[w_ctrl::Run], f: fn(&w_ctrl::Run) -> f64| median(runs.iter().map(f).collect());
    let cold = |r: &w_ctrl::Run| r.cold_start.as_secs_f64();
    let updates = |r: &w_ctrl::Run| r.updates.as_secs_f64();
    let count = |r: &w_ctrl::Run| r.reconciles as f64;
    let per_sec = |r: &w_ctrl::Run| r.reconciles_per_sec();
    let concurrency = w_ctrl::CONCURRENCY;
    let row = Row::new(
        "W-CTRL",
        format!(
            "cold start ({} reconciles), concurrency {concurrency}",
            thousands(data.pods() as f64)
        ),
        Figure::Secs(med(&ours, cold)),
        Figure::Secs(med(&peer, cold)),
    );
    emit(row.target("≥ 3× kube-runtime").rate_over(data.pods()));
    let row = Row::new(
        "W-CTRL",
        format!(
            "{} updates to quiescence (every pod reconciled at its final version, nothing \
             queued)",
            thousands(data.updates() as f64)
        ),
        Figure::Secs(med(&ours, updates)),
        Figure::Secs(med(&peer, updates)),
    );
    emit(row.target("≥ 3× kube-runtime").rate_over(data.updates()));
    let mut row = Row::new(
        "W-CTRL",
        "reconciles",
        Figure::Count(med(&ours, count)),
        Figure::Count(med(&peer, count)),
    );
    row.phase = format!(
        "reconciles of the {} updates (coalesced; at least {}, one per pod touched); \
         reconciles per second: ours {}, kube-runtime {}",
        thousands(data.updates() as f64),
        thousands(data.touched() as f64),
        thousands(med(&ours, per_sec)),
        thousands(med(&peer, per_sec)),
    );
    row.rate = Some(med(&ours, per_sec));
    emit(row);
}

fn idx_rows(opts: &Options, emit: &mut dyn FnMut(Row)) {
    let s = opts.sizes;
    let data = w_idx::Data::new(s.idx);
    let events = w_idx::PeerEvents::new(&data);
    let mut ours2 = Vec::new();
    let mut ours0 = Vec::new();
    let mut peer = Vec::new();
    for _ in 0..opts.reps.max(1) {
        ours2.push(w_idx::ours(&data, true, s.by_index_calls));
        ours0.push(w_idx::ours(&data, false, 0));
        peer.push(w_idx::kube_runtime(&events));
    }
    let med = |runs: &[Vec<(Phase, Duration)>], phase: Phase| {
        let v: Vec<f64> = runs
            .iter()
            .filter_map(|r| r.iter().find(|(p, _)| *p == phase))
            .map(|(_, d)| d.as_secs_f64() * 1e9)
            .collect();
        if v.is_empty() {
            Figure::NotApplicable
        } else {
            Figure::Ns(median(v))
        }
    };
    let per_call = s.idx / 100;
    for phase in Phase::ALL {
        let (label, target) = match phase {
            Phase::Add => ("add".to_owned(), "450 ns"),
            Phase::Update => ("update (to the next node)".to_owned(), "480 ns"),
            Phase::Delete => ("delete".to_owned(), "420 ns"),
            Phase::ByNamespace => (
                format!("by_index {NAMESPACE_INDEX} ({per_call} objects)"),
                "40 µs",
            ),
            Phase::ByNode => (
                format!("by_index {NODE_INDEX} ({} objects)", s.idx / 1000),
                "4.5 µs",
            ),
        };
        let row = Row::new(
            "W-IDX",
            format!("two indexes: {label}"),
            med(&ours2, phase),
            med(&peer, phase),
        );
        emit(row.target(target).rate_per_op());
    }
    for phase in [Phase::Add, Phase::Update, Phase::Delete] {
        let row = Row::new(
            "W-IDX",
            format!("no indexes: {}", phase.name()),
            med(&ours0, phase),
            med(&peer, phase),
        );
        emit(row.rate_per_op());
    }
}

fn inf_rows(opts: &Options, emit: &mut dyn FnMut(Row)) -> Option<f64> {
    let s = opts.sizes;
    let rt = w_inf::runtime();
    let data = w_inf::Data::new(s.listed, s.events);
    let subscribers = w_inf::Consumers::Subscribers {
        count: 4,
        buffer: w_inf::NO_COALESCING,
    };
    let latest = w_inf::Consumers::Latest {
        count: 4,
        buffer: informer::DEFAULT_BUFFER,
    };
    let (mut ours, mut subs, mut consumer) = (Vec::new(), Vec::new(), Vec::new());
    let (mut ours_subs, mut ours_latest) = (Vec::new(), Vec::new());
    let (mut latest_delivered, mut latest_coalesced) = (Vec::new(), Vec::new());
    let (mut metrics_off, mut metrics_on) = (Vec::new(), Vec::new());
    let handlers = w_inf::Consumers::Handlers {
        count: 4,
        buffer: w_inf::NO_COALESCING,
    };
    for _ in 0..opts.reps.max(1) {
        metrics_off.push(
            w_inf::ours_observed(&rt, &data, handlers, None)
                .elapsed
                .as_secs_f64(),
        );
        let metrics = informer_metrics::Metrics::new();
        let observer = Some(metrics.reflector_observer("w-inf"));
        metrics_on.push(
            w_inf::ours_observed(&rt, &data, handlers, observer)
                .elapsed
                .as_secs_f64(),
        );
        ours.push(w_inf::ours(&rt, &data, 4).as_secs_f64());
        let run = w_inf::ours_with(&rt, &data, subscribers);
        ours_subs.push(run.elapsed.as_secs_f64());
        let run = w_inf::ours_with(&rt, &data, latest);
        ours_latest.push(run.elapsed.as_secs_f64());
        latest_delivered.push(run.delivered as f64);
        latest_coalesced.push(run.coalesced as f64);
        let events = data.watcher_events();
        subs.push(w_inf::kube_runtime_subscribers(&rt, events, 4).as_secs_f64());
        let events = data.watcher_events();
        consumer.push(w_inf::kube_runtime_consumer(&rt, events, 4).as_secs_f64());
    }
    emit(overhead_row(
        "W-INF",
        "4 handlers, reflector observed (every event counted in the registry)".to_owned(),
        metrics_off,
        metrics_on,
    ));
    let ours = median(ours);
    let (ours_subs, ours_latest) = (median(ours_subs), median(ours_latest));
    let (subs, consumer) = (median(subs), median(consumer));
    let total = s.listed + s.events;
    let row = Row::new(
        "W-INF",
        "4 handlers (kube-runtime: 4 subscribers)",
        Figure::Secs(ours),
        Figure::Secs(subs),
    );
    emit(row.target("0.2 s").rate_over(total));
    let row = Row::new(
        "W-INF",
        "4 handlers (kube-runtime: one stream consumer counting for 4)",
        Figure::Secs(ours),
        Figure::Secs(consumer),
    );
    emit(row.target("0.2 s").rate_over(total));
    let row = Row::new(
        "W-INF",
        "4 async subscribers (kube-runtime: 4 subscribers)",
        Figure::Secs(ours_subs),
        Figure::Secs(subs),
    );
    emit(row.target("≥ 3× kube-runtime").rate_over(total));
    let mut row = Row::new(
        "W-INF",
        "async subscribers",
        Figure::NotApplicable,
        Figure::NotApplicable,
    );
    row.phase = format!(
        "4 async subscribers ÷ 4 handlers (time): {:.2}×",
        ours_subs / ours.max(1e-12)
    );
    emit(row.target("≤ 1×"));
    let mut row = Row::new(
        "W-INF",
        "final version",
        Figure::Secs(ours_latest),
        Figure::Secs(subs),
    );
    row.phase = format!(
        "4 async subscribers, default buffer, coalescing allowed: done at every pod's final \
         version; {} of {} notifications delivered, {} coalesced (medians, 4 together; \
         kube-runtime: 4 subscribers, every event)",
        thousands(median(latest_delivered)),
        thousands((4 * total) as f64),
        thousands(median(latest_coalesced)),
    );
    emit(row.rate_over(total));
    Some(ours)
}

/// W-HTTP client only with each side in a process of its own (`w_http_client`): in one process
/// the two sides alternate, and each run starts on the heap the other side's run left (freed,
/// or given back to the system and faulted in again), which moved either side's list by up to
/// 2× here. `reps` processes a side, alternating the sides (this machine's speed drifts over
/// minutes, and a side run all at once would take one moment's), each making two runs. The
/// second is the warm figure; the first, on a heap that grows from nothing, is reported on its
/// own rows as the cold start (what an informer starting in a new process feels). Medians.
fn http_process_rows(opts: &Options, emit: &mut dyn FnMut(Row)) {
    let s = opts.sizes;
    // One process: its first run and the one after it.
    type Runs = Vec<(f64, f64)>;
    // A run's figure in one phase: its list, its watch, or both.
    type Phase = fn(&(f64, f64)) -> f64;
    let process = |side: &str| -> Option<(Runs, Runs)> {
        let exe = opts.w_http_exe.as_deref()?;
        let (listed, events) = (s.listed.to_string(), s.events.to_string());
        let out = output_within(
            Command::new(exe)
                // Two runs: the cold start, and the warm one.
                .args([side, "2", "synthetic", &listed, &events]),
            CHILD_LIMIT,
        )
        .map_err(|e| eprintln!("w_http_client {side}: {e}"))
        .ok()?;
        let parsed: Vec<(f64, f64)> = String::from_utf8_lossy(&out)
            .lines()
            .filter_map(|line| {
                let mut words = line.strip_prefix("run ")?.split(' ');
                Some((words.next()?.parse().ok()?, words.next()?.parse().ok()?))
            })
            .collect();
        let mut parsed = parsed.into_iter();
        let cold = parsed.next().into_iter().collect();
        Some((cold, parsed.collect()))
    };
    let (mut ours, mut peer) = (
        Some((Vec::new(), Vec::new())),
        Some((Vec::new(), Vec::new())),
    );
    for _ in 0..opts.reps.max(1) {
        for (side, runs) in [("ours", &mut ours), ("kube-runtime", &mut peer)] {
            // A side whose process failed once has no figure (the failure is printed).
            if let Some((cold, warm)) = runs {
                match process(side) {
                    Some((c, w)) => {
                        cold.extend(c);
                        warm.extend(w);
                    }
                    None => *runs = None,
                }
            }
        }
    }
    let fig = |r: Option<&Runs>, f: Phase| {
        r.filter(|r| !r.is_empty())
            .map_or(Figure::NotApplicable, |r| {
                Figure::Secs(median(r.iter().map(f).collect()))
            })
    };
    for (which, pick) in [
        (
            "its first run (a cold start)",
            (|r| &r.0) as fn(&(Runs, Runs)) -> &Runs,
        ),
        ("its second run (warm: after the first)", |r| &r.1),
    ] {
        let (ours, peer) = (ours.as_ref().map(pick), peer.as_ref().map(pick));
        let phases: [(&str, Phase, usize); 3] = [
            ("list", |r| r.0, s.listed),
            ("watch", |r| r.1, s.events),
            ("list + watch", |r| r.0 + r.1, s.listed + s.events),
        ];
        for (phase, f, objects) in phases {
            let row = Row::new(
                "W-HTTP",
                format!("client only, each side in its own process, {which}: {phase}"),
                fig(ours, f),
                fig(peer, f),
            )
            .rate_over(objects);
            emit(if phase == "list + watch" {
                row.target("≥ 2× kube-runtime")
            } else {
                row
            });
        }
    }
}

fn http_rows(opts: &Options, w_inf_ours: Option<f64>, emit: &mut dyn FnMut(Row)) {
    let s = opts.sizes;
    let rt = w_inf::runtime();
    let data = w_inf::Data::new(s.listed, s.events);
    let encoded = std::sync::Arc::new(replay::Encoded::new(&data).with_protobuf(&data));
    http_protobuf_row(opts, &rt, &data, &encoded, "client only", emit);
    for (variant, backend) in [
        ("", w_http::Backend::Simulator),
        ("client only: ", w_http::Backend::Replay(&encoded)),
    ] {
        let (mut ours, mut peer) = (Vec::new(), Vec::new());
        for _ in 0..opts.reps.max(1) {
            ours.push(w_http::ours(&rt, &data, 4, backend, ManagedFields::Kept));
            peer.push(w_http::kube_runtime(&rt, &data, 4, backend, false));
        }
        let med = |runs: &[w_http::Run], f: fn(&w_http::Run) -> Duration| {
            Figure::Secs(median(runs.iter().map(|r| f(r).as_secs_f64()).collect()))
        };
        let list = Row::new(
            "W-HTTP",
            format!("{variant}list"),
            med(&ours, |r| r.list),
            med(&peer, |r| r.list),
        );
        emit(list.rate_over(s.listed));
        let watch = Row::new(
            "W-HTTP",
            format!("{variant}watch"),
            med(&ours, |r| r.watch),
            med(&peer, |r| r.watch),
        );
        emit(watch.rate_over(s.events));
        let total = Row::new(
            "W-HTTP",
            format!("{variant}list + watch"),
            med(&ours, w_http::Run::total),
            med(&peer, w_http::Run::total),
        );
        let total_secs = total.ours.value();
        let total = total.rate_over(s.listed + s.events);
        emit(if variant.is_empty() {
            total
        } else {
            total.target("≥ 2× kube-runtime")
        });
        if let (Some(inf), Some(http)) = (w_inf_ours, total_secs) {
            let row = Row::new(
                "W-HTTP",
                format!("{variant}the informer's share (W-INF ÷ W-HTTP)"),
                Figure::Percent(100.0 * inf / http),
                Figure::NotApplicable,
            );
            emit(row.target("< 10 %"));
        }
    }
}

/// W-HTTP client only, list + watch, with ours reading protobuf (the same objects as protobuf,
/// from the replay server) and ours reading JSON, against kube-runtime reading JSON; realistic
/// pods (`what` says so) without their managed fields on our side, as the factory reads them.
fn http_protobuf_row(
    opts: &Options,
    rt: &tokio::runtime::Runtime,
    data: &w_inf::Data,
    encoded: &std::sync::Arc<replay::Encoded>,
    what: &str,
    emit: &mut dyn FnMut(Row),
) {
    let realistic = what.contains("realistic");
    let managed = if realistic {
        ManagedFields::Skipped
    } else {
        ManagedFields::Kept
    };
    let backend = w_http::Backend::Replay(encoded);
    let (mut pb, mut json, mut peer) = (Vec::new(), Vec::new(), Vec::new());
    for _ in 0..opts.reps.max(1) {
        let total = |r: w_http::Run| r.total().as_secs_f64();
        pb.push(total(w_http::ours_reading(
            rt, data, 4, backend, managed, true,
        )));
        json.push(total(w_http::ours_reading(
            rt, data, 4, backend, managed, false,
        )));
        peer.push(total(w_http::kube_runtime(rt, data, 4, backend, realistic)));
    }
    let objects = data.list.len() + data.events.len();
    for (encoding, ours) in [("protobuf", pb), ("JSON", json)] {
        let row = Row::new(
            "W-HTTP",
            format!("{what}: list + watch, ours reading {encoding} (kube-runtime: JSON)"),
            Figure::Secs(median(ours)),
            Figure::Secs(median(peer.clone())),
        );
        emit(row.rate_over(objects).target("≥ 2× kube-runtime"));
    }
}

/// W-HTTP, client only, on realistic pods (a tenth of the synthetic sizes), list + watch: the
/// managed fields kept; stripped (ours: `strip_managed_fields` as the informer's transform;
/// kube-runtime: cleared in the watcher's stream); and, ours only, left out by the decoder
/// (against kube-runtime's stripping, its only way to drop them).
fn http_realistic_rows(opts: &Options, emit: &mut dyn FnMut(Row)) {
    let (listed, events) = (opts.sizes.listed / 10, opts.sizes.events / 10);
    let rt = w_inf::runtime();
    let data = w_inf::Data::realistic(listed, events);
    let encoded = std::sync::Arc::new(replay::Encoded::new(&data).with_protobuf(&data));
    http_protobuf_row(
        opts,
        &rt,
        &data,
        &encoded,
        &format!(
            "client only, realistic pods ({listed} listed, {events} events), ours decoded without managed fields"
        ),
        emit,
    );
    let backend = w_http::Backend::Replay(&encoded);
    for (what, managed, strip) in [
        ("as decoded", ManagedFields::Kept, false),
        (
            "strip_managed_fields (kube-runtime: cleared in its stream)",
            ManagedFields::Stripped,
            true,
        ),
        (
            "ours decoded without managed fields (kube-runtime: cleared in its stream)",
            ManagedFields::Skipped,
            true,
        ),
    ] {
        let (mut ours, mut peer) = (Vec::new(), Vec::new());
        for _ in 0..opts.reps.max(1) {
            ours.push(
                w_http::ours(&rt, &data, 4, backend, managed)
                    .total()
                    .as_secs_f64(),
            );
            peer.push(
                w_http::kube_runtime(&rt, &data, 4, backend, strip)
                    .total()
                    .as_secs_f64(),
            );
        }
        let row = Row::new(
            "W-HTTP",
            format!(
                "client only, realistic pods ({listed} listed, {events} events): list + watch, {what}"
            ),
            Figure::Secs(median(ours)),
            Figure::Secs(median(peer)),
        );
        emit(row.rate_over(listed + events));
    }
}

/// W-INF on realistic pods, with and without stripping the managed fields: ours 4 handlers
/// (with `strip_managed_fields` as the informer's transform), kube-runtime 4 subscribers (with
/// the managed fields cleared in the watcher's stream, `modify`). A tenth of the synthetic
/// sizes: a realistic pod is about 97 KB once decoded.
fn inf_realistic_rows(opts: &Options, emit: &mut dyn FnMut(Row)) {
    let (listed, events) = (opts.sizes.listed / 10, opts.sizes.events / 10);
    let rt = w_inf::runtime();
    let data = w_inf::Data::realistic(listed, events);
    let handlers = w_inf::Consumers::Handlers {
        count: 4,
        buffer: w_inf::NO_COALESCING,
    };
    let clear: fn(&mut k8s_openapi::api::core::v1::Pod) = |p| {
        p.metadata.managed_fields = None;
    };
    for (what, strip) in [("as decoded", false), ("strip_managed_fields", true)] {
        let (mut ours, mut peer) = (Vec::new(), Vec::new());
        for _ in 0..opts.reps.max(1) {
            let transform =
                strip.then(informer_kube::strip_managed_fields::<k8s_openapi::api::core::v1::Pod>);
            ours.push(
                w_inf::ours_transformed(&rt, &data, handlers, None, transform)
                    .elapsed
                    .as_secs_f64(),
            );
            let modify = if strip { clear } else { |_: &mut _| {} };
            peer.push(
                w_inf::kube_runtime_modified(&rt, data.watcher_events(), 4, modify).as_secs_f64(),
            );
        }
        let row = Row::new(
            "W-INF",
            format!(
                "realistic pods ({listed} listed, {events} events), {what}, 4 handlers (kube-runtime: 4 subscribers)"
            ),
            Figure::Secs(median(ours)),
            Figure::Secs(median(peer)),
        );
        emit(row.rate_over(listed + events));
    }
}

/// DECODE: each parser on the same documents, medians of runs taken in turns.
fn decode_rows(opts: &Options, emit: &mut dyn FnMut(Row)) {
    use crate::decode::{
        BODY_CHUNK, Parser, Path, list_body, per_doc, per_list_item, per_watch_line, protobuf,
        realistic, synthetic, watch_lines,
    };
    let n = if opts.sizes.listed < 50_000 {
        200
    } else {
        2_000
    };
    for (what, docs) in [
        ("synthetic pod", synthetic(n)),
        ("realistic pod", realistic(n / 4)),
    ] {
        let bytes = docs.iter().map(Vec::len).sum::<usize>() / docs.len();
        let pb_docs = protobuf(&docs);
        let pb_bytes = pb_docs.iter().map(Vec::len).sum::<usize>() / docs.len();
        let docs_of = |parser| {
            if parser == Parser::Protobuf {
                &pb_docs
            } else {
                &docs
            }
        };
        let mut runs: Vec<Vec<f64>> = vec![Vec::new(); Parser::ALL.len()];
        for _ in 0..opts.reps.max(1) {
            for (p, parser) in Parser::ALL.into_iter().enumerate() {
                runs[p].push(per_doc(parser, docs_of(parser)).as_nanos() as f64);
            }
        }
        for (parser, times) in Parser::ALL.into_iter().zip(runs) {
            let size = match parser {
                Parser::Protobuf => format!("{pb_bytes} B of protobuf"),
                _ => format!("{bytes} B of JSON"),
            };
            let row = Row::new(
                "DECODE",
                format!("{what} ({size}): {}", parser.name()),
                Figure::Ns(median(times)),
                Figure::NotApplicable,
            );
            emit(row.rate_per_op());
        }
        // The same pods as a list page and as watch lines, through the adapter's decoders and
        // kube-client's, side by side.
        let body = list_body(&docs);
        let lines = watch_lines(&docs);
        let (mut list, mut watch) = ([Vec::new(), Vec::new()], [Vec::new(), Vec::new()]);
        for _ in 0..opts.reps.max(1) {
            for (i, path) in [Path::Ours, Path::KubeClient].into_iter().enumerate() {
                list[i].push(per_list_item(path, &body, docs.len(), 3).as_nanos() as f64);
                watch[i].push(per_watch_line(path, &lines).as_nanos() as f64);
            }
        }
        let pods = docs.len();
        for (phase, [ours, peer]) in [
            (
                format!("{what}: list item (a page of {pods}, in {BODY_CHUNK} B pieces)"),
                list,
            ),
            (format!("{what}: watch line (MODIFIED)"), watch),
        ] {
            let row = Row::new(
                "DECODE",
                format!("{phase}: the adapter (ours) vs kube-client"),
                Figure::Ns(median(ours)),
                Figure::Ns(median(peer)),
            );
            emit(row.rate_per_op());
        }
    }
}

/// How long a measuring process (`mem`, `w_http_client`) may run before it is killed and its
/// figures reported as not measured: a hundred times a full-size run's (seconds), so that only
/// a hang reaches it.
pub const CHILD_LIMIT: Duration = Duration::from_secs(10 * 60);

/// Runs `command` to its end and returns its standard output; an error, with what it wrote to
/// standard error, if it cannot start, fails, or is still running after `limit` (it is then
/// killed: a hung child must not hang the report).
pub fn output_within(command: &mut Command, limit: Duration) -> Result<Vec<u8>, String> {
    use std::io::Read;
    use std::process::Stdio;
    use wait_timeout::ChildExt;

    let program = command.get_program().to_string_lossy().into_owned();
    let mut child = command
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| format!("{program}: {e}"))?;
    // Both pipes are drained while the child runs: one left full would block it.
    let drain = |pipe: Option<Box<dyn Read + Send>>| {
        std::thread::spawn(move || {
            let mut bytes = Vec::new();
            if let Some(mut pipe) = pipe {
                // A read error ends the output there; the exit status tells whether it matters.
                let _ = pipe.read_to_end(&mut bytes);
            }
            bytes
        })
    };
    let stdout = drain(child.stdout.take().map(|p| Box::new(p) as _));
    let stderr = drain(child.stderr.take().map(|p| Box::new(p) as _));
    let waited = child.wait_timeout(limit);
    let status = match waited {
        Ok(Some(status)) => Some(status),
        Ok(None) | Err(_) => {
            // Killing a child that has just exited fails harmlessly; the wait reaps it.
            let _ = child.kill();
            let _ = child.wait();
            None
        }
    };
    let stdout = stdout.join().unwrap_or_default();
    let stderr = String::from_utf8_lossy(&stderr.join().unwrap_or_default()).into_owned();
    match (status, waited) {
        (Some(status), _) if status.success() => Ok(stdout),
        (Some(status), _) => Err(format!("{program} failed ({status}): {stderr}")),
        (None, Ok(_)) => Err(format!(
            "{program} still running after {limit:?}, killed; it had written: {stderr}"
        )),
        (None, Err(e)) => Err(format!("{program}: waiting for it failed ({e}): {stderr}")),
    }
}

/// Runs the `mem` binary for `mode` over `pods`.
pub fn mem_sample(exe: &std::path::Path, mode: Mode, pods: usize) -> Result<Sample, String> {
    let out = output_within(
        Command::new(exe).args([mode.name(), &pods.to_string()]),
        CHILD_LIMIT,
    )
    .map_err(|e| format!("mem {}: {e}", mode.name()))?;
    let text = String::from_utf8_lossy(&out);
    text.lines()
        .rev()
        .find_map(Sample::from_json)
        .ok_or_else(|| format!("mem {}: no result in {text:?}", mode.name()))
}

fn mem_rows(opts: &Options, emit: &mut dyn FnMut(Row)) {
    let n = opts.sizes.mem;
    let samples = opts.mem_exe.as_deref().map(|exe| {
        Mode::ALL.map(|mode| match mem_sample(exe, mode, n) {
            Ok(s) => Some(s),
            Err(e) => {
                eprintln!("{e}");
                None
            }
        })
    });
    let [ours_base, ours, peer_base, peer] = samples.unwrap_or_default();
    let rss = |with: &Option<Sample>, without: &Option<Sample>| {
        let (a, b) = (with.as_ref()?.rss_peak?, without.as_ref()?.rss_peak?);
        Some((a as f64 - b as f64) / n as f64)
    };
    let heap =
        |s: &Option<Sample>, f: fn(&Sample) -> Option<f64>| Figure::bytes(s.as_ref().and_then(f));
    emit(Row::new(
        "MEM",
        "RSS: peak synced − peak built, per pod",
        Figure::bytes(rss(&ours, &ours_base)),
        Figure::bytes(rss(&peer, &peer_base)),
    ));
    emit(Row::new(
        "MEM",
        "heap: the object itself",
        heap(&ours, |s| s.object),
        heap(&peer, |s| s.object),
    ));
    emit(
        Row::new(
            "MEM",
            "heap: the cache's overhead",
            heap(&ours, Sample::overhead),
            heap(&peer, Sample::overhead),
        )
        .target("< 100 B"),
    );
    emit(
        Row::new(
            "MEM",
            "heap: all-in (object + overhead)",
            heap(&ours, |s| s.all_in),
            heap(&peer, |s| s.all_in),
        )
        .target("< 3,000 B"),
    );
    emit(Row::new(
        "MEM",
        "heap overhead: key + slot",
        heap(&ours, |s| s.key_and_slot),
        Figure::NotApplicable,
    ));
    emit(Row::new(
        "MEM",
        "heap overhead: index entries (two indexes)",
        heap(&ours, |s| s.index_entries),
        Figure::NotApplicable,
    ));
    emit(Row::new(
        "MEM",
        "heap overhead: queue leftovers (a drained DeltaFifo)",
        heap(&ours, |s| s.queue_leftovers),
        Figure::NotApplicable,
    ));
    emit(Row::new(
        "MEM",
        "heap overhead: the rest (processor, reflector, runtime)",
        heap(&ours, Sample::rest),
        Figure::NotApplicable,
    ));
    let metadata = opts.mem_exe.as_deref().and_then(|exe| {
        mem_sample(exe, Mode::OursMetadata, n)
            .map_err(|e| eprintln!("{e}"))
            .ok()
    });
    emit(
        Row::new(
            "MEM",
            "heap: all-in, metadata-only informer (PartialObjectMeta<Pod>)",
            heap(&metadata, |s| s.all_in),
            Figure::NotApplicable,
        )
        .target("< 3,000 B"),
    );
    let blocks = |s: &Option<Sample>| s.as_ref().and_then(|s| s.object_blocks);
    if let (Some(o), Some(k)) = (blocks(&ours), blocks(&peer)) {
        let mut row = Row::new(
            "MEM",
            "heap blocks per object",
            Figure::NotApplicable,
            Figure::NotApplicable,
        );
        row.phase = format!("heap blocks per object: ours {o:.1}, kube-runtime {k:.1}");
        emit(row);
    }
}

/// Realistic pods in MEM: how many (a tenth of the synthetic count: a realistic pod is several
/// times larger).
pub fn realistic_pods(sizes: &Sizes) -> usize {
    (sizes.mem / 10).max(10)
}

/// MEM on realistic pods ([`crate::realistic`]): heap all-in per cached pod for the full `Pod`,
/// the metadata-only view and the [`SlimPod`](crate::realistic::SlimPod) projection, each as
/// decoded and with `strip_managed_fields`; then the decode time per pod of each view, from the
/// bytes of the full pod (medians of [`Options::reps`] runs, at least five).
fn mem_projection_rows(opts: &Options, emit: &mut dyn FnMut(Row)) {
    use crate::realistic::{SlimPod, decode_time, realistic_metadata_json, realistic_pod_json};
    use informer_kube::WithoutManagedFields;
    use k8s_openapi::api::core::v1::Pod;
    use kube::core::PartialObjectMeta;

    let n = realistic_pods(&opts.sizes);
    let sample = |mode: Mode| {
        opts.mem_exe
            .as_deref()
            .and_then(|exe| mem_sample(exe, mode, n).map_err(|e| eprintln!("{e}")).ok())
    };
    let label = |mode: Mode| match mode {
        Mode::RealisticPod => "Pod",
        Mode::RealisticPodStripped => "Pod, strip_managed_fields",
        Mode::RealisticMetadata => "metadata-only (PartialObjectMeta<Pod>)",
        Mode::RealisticMetadataStripped => {
            "metadata-only (PartialObjectMeta<Pod>), strip_managed_fields"
        }
        Mode::RealisticProjection => "projection (SlimPod: metadata, nodeName, phase)",
        Mode::RealisticProjectionStripped => "projection (SlimPod), strip_managed_fields",
        Mode::RealisticPodSkipped => "Pod, decoded without managed fields",
        Mode::RealisticMetadataSkipped => {
            "metadata-only (PartialObjectMeta<Pod>), decoded without managed fields"
        }
        Mode::RealisticProjectionSkipped => "projection (SlimPod), decoded without managed fields",
        Mode::RealisticPodCompact => {
            "Pod, decoded without managed fields, compact cache (compact JSON at rest, 100 hot)"
        }
        _ => unreachable!("a realistic mode"),
    };
    let mut full_object = None;
    for mode in Mode::REALISTIC {
        let s = sample(mode);
        if mode == Mode::RealisticPod {
            full_object = s.as_ref().and_then(|s| s.object);
        }
        let row = Row::new(
            "MEM",
            format!(
                "realistic pod ({} pods): heap all-in, {}",
                thousands(n as f64),
                label(mode)
            ),
            Figure::bytes(s.as_ref().and_then(|s| s.all_in)),
            Figure::NotApplicable,
        );
        let projected = matches!(
            mode,
            Mode::RealisticProjection
                | Mode::RealisticProjectionStripped
                | Mode::RealisticProjectionSkipped
        );
        emit(match mode {
            _ if projected => row.target("≤ 1,200 B"),
            Mode::RealisticPodCompact => row.target("≤ 13.8 KB"),
            Mode::RealisticPodSkipped => row.target("the default (KubeSource)"),
            _ => row,
        });
    }
    // client-go 1.36 on the same pod (10,000 distinct pods, an indexer with 2 indexes), a
    // fixed anchor measured with Go: there is no Go toolchain on this machine.
    for (what, bytes) in [
        ("as decoded", 27_529.0),
        ("managed fields dropped", 21_857.0),
    ] {
        emit(Row::new(
            "MEM",
            format!("realistic pod: heap all-in, client-go 1.36 (anchor), {what}"),
            Figure::bytes(Some(bytes)),
            Figure::NotApplicable,
        ));
    }
    emit(Row::new(
        "MEM",
        "realistic pod: heap of one decoded Pod (the object alone)",
        Figure::bytes(full_object),
        Figure::NotApplicable,
    ));

    let bytes = realistic_pod_json(0);
    let metadata_bytes = realistic_metadata_json(0);
    let runs = opts.reps.max(5);
    let count = n.min(2_000);
    let per_pod = |f: &dyn Fn() -> Duration| {
        let t = median_of(runs, f);
        Figure::per_op(t)
    };
    let strip = |mut p: Pod| {
        p.metadata.managed_fields = None;
        p
    };
    let full = per_pod(&|| decode_time::<Pod>(&bytes, count, |p| p));
    let stripped = per_pod(&|| decode_time::<Pod>(&bytes, count, strip));
    let metadata = per_pod(&|| decode_time::<PartialObjectMeta<Pod>>(&bytes, count, |m| m));
    let metadata_api =
        per_pod(&|| decode_time::<PartialObjectMeta<Pod>>(&metadata_bytes, count, |m| m));
    let slim = per_pod(&|| decode_time::<SlimPod>(&bytes, count, |p| p));
    let skipped = per_pod(&|| decode_time::<WithoutManagedFields<Pod>>(&bytes, count, |p| p));
    let slim_skipped =
        per_pod(&|| decode_time::<WithoutManagedFields<SlimPod>>(&bytes, count, |p| p));
    let size = thousands(bytes.len() as f64);
    for (what, figure) in [
        (format!("Pod ({size} B of JSON)"), full),
        ("Pod, then strip_managed_fields".to_owned(), stripped),
        ("Pod, decoded without managed fields".to_owned(), skipped),
        (
            "PartialObjectMeta<Pod> from the full pod's JSON".to_owned(),
            metadata,
        ),
        (
            format!(
                "PartialObjectMeta<Pod> from the metadata API's JSON ({} B)",
                thousands(metadata_bytes.len() as f64)
            ),
            metadata_api,
        ),
    ] {
        emit(Row::new(
            "MEM",
            format!("realistic pod: decode per pod, {what}"),
            figure,
            Figure::NotApplicable,
        ));
    }
    for (what, figure) in [
        ("SlimPod projection", slim),
        (
            "SlimPod projection, decoded without managed fields",
            slim_skipped,
        ),
    ] {
        let row = Row::new(
            "MEM",
            format!(
                "realistic pod: decode per pod, {what}{}",
                speedup(full, figure)
            ),
            figure,
            Figure::NotApplicable,
        );
        emit(row.target("≥ 3× faster than Pod").rate_per_op());
    }
    synthetic_projection_rows(opts, emit);
}

/// `; N× faster than Pod`, from the decode times of a `Pod` and of a view.
fn speedup(pod: Figure, view: Figure) -> String {
    match (pod.value(), view.value()) {
        (Some(f), Some(s)) if s > 0.0 => format!("; {:.1}× faster than Pod", f / s),
        _ => String::new(),
    }
}

/// The projection of the synthetic pods (the pods of MEM's other rows): heap all-in per
/// cached pod against the full `Pod`'s, and the decode time of each from the same JSON.
fn synthetic_projection_rows(opts: &Options, emit: &mut dyn FnMut(Row)) {
    use crate::realistic::{MetadataAlone, SlimPod, decode_time};
    use k8s_openapi::api::core::v1::Pod;

    let n = opts.sizes.mem;
    let sample = |mode: Mode| {
        opts.mem_exe
            .as_deref()
            .and_then(|exe| mem_sample(exe, mode, n).map_err(|e| eprintln!("{e}")).ok())
            .and_then(|s| s.all_in)
    };
    let (pod, slim) = (sample(Mode::Ours), sample(Mode::OursProjection));
    let smaller = match (pod, slim) {
        (Some(p), Some(s)) if s > 0.0 => format!("; {:.1}× smaller than Pod", p / s),
        _ => String::new(),
    };
    emit(Row::new(
        "MEM",
        format!(
            "synthetic pod ({} pods): heap all-in, Pod",
            thousands(n as f64)
        ),
        Figure::bytes(pod),
        Figure::NotApplicable,
    ));
    let row = Row::new(
        "MEM",
        format!(
            "synthetic pod ({} pods): heap all-in, projection (SlimPod){smaller}",
            thousands(n as f64)
        ),
        Figure::bytes(slim),
        Figure::NotApplicable,
    );
    emit(row.target("≤ 1,200 B"));

    let bytes = serde_json::to_vec(&crate::workload::pod(7)).expect("a pod serializes");
    let runs = opts.reps.max(5);
    let count = 20_000;
    // The three decodes alternate, so that a drift of the machine's speed falls on each.
    let (mut full, mut slim, mut floor) = (Vec::new(), Vec::new(), Vec::new());
    for _ in 0..runs {
        full.push(decode_time::<Pod>(&bytes, count, |p| p).as_secs_f64());
        slim.push(decode_time::<SlimPod>(&bytes, count, |p| p).as_secs_f64());
        floor.push(decode_time::<MetadataAlone>(&bytes, count, |p| p).as_secs_f64());
    }
    let med = |v: Vec<f64>| Figure::per_op(Duration::from_secs_f64(median(v)));
    let (full, slim, floor) = (med(full), med(slim), med(floor));
    emit(Row::new(
        "MEM",
        format!(
            "synthetic pod: decode per pod, Pod ({} B of JSON)",
            bytes.len()
        ),
        full,
        Figure::NotApplicable,
    ));
    let row = Row::new(
        "MEM",
        format!(
            "synthetic pod: decode per pod, SlimPod projection{}",
            speedup(full, slim)
        ),
        slim,
        Figure::NotApplicable,
    );
    emit(row.target("≥ 3× faster than Pod").rate_per_op());
    emit(
        Row::new(
            "MEM",
            format!(
                "synthetic pod: decode per pod, the metadata alone (ObjectMeta, the rest \
                 skipped: the floor of any projection that keeps it){}",
                speedup(full, floor)
            ),
            floor,
            Figure::NotApplicable,
        )
        .rate_per_op(),
    );
}

/// The target of the relist's peak.
const RELIST_TARGET: &str = "≤ 1.3× the synced cache's RSS";

/// MEM relist ([`crate::relist`]): over HTTP, [`Sizes::mem`](crate::Sizes) pods listed, the
/// watch expired (410), relisted; the resident set once synced, the peak until the relist has
/// reached the cache, and the ratio, for the list in pages of 500 and as one response; ours
/// through `KubeListerWatcher`, kube-runtime's `watcher` (kube-client's decoding) into its
/// store. Each in a process of its own, with a baseline process (runtime, server, client,
/// nothing listed) to tell the cache's own resident set apart.
fn mem_relist_rows(opts: &Options, emit: &mut dyn FnMut(Row)) {
    let n = opts.sizes.mem;
    let sample = |mode: Mode| {
        opts.mem_exe
            .as_deref()
            .and_then(|exe| mem_sample(exe, mode, n).map_err(|e| eprintln!("{e}")).ok())
    };
    let base = sample(Mode::RelistBaseline);
    let base_rss = base.as_ref().and_then(|s| s.rss_synced);
    emit(Row::new(
        "MEM",
        "relist: baseline process RSS (runtime, server, client; nothing listed)",
        base_rss.map_or(Figure::NotApplicable, |b| Figure::Rss(b as f64)),
        Figure::NotApplicable,
    ));
    let pods = thousands(n as f64);
    for (what, ours_mode, peer_mode) in [
        (
            "pages of 500",
            Mode::RelistPaged,
            Mode::RelistKubeRuntimePaged,
        ),
        (
            "one whole response",
            Mode::RelistWhole,
            Mode::RelistKubeRuntimeWhole,
        ),
        (
            "pages of 500, nothing changed (the relist brings the same versions)",
            Mode::RelistPagedUnchanged,
            Mode::RelistKubeRuntimePagedUnchanged,
        ),
        (
            "one whole response, nothing changed",
            Mode::RelistWholeUnchanged,
            Mode::RelistKubeRuntimeWholeUnchanged,
        ),
        (
            "pages of 500, ours applied by page (with_relist_by_page)",
            Mode::RelistPagedByPage,
            Mode::RelistKubeRuntimePaged,
        ),
        (
            "one whole response, ours applied by page (a page size at a time)",
            Mode::RelistWholeByPage,
            Mode::RelistKubeRuntimeWhole,
        ),
        (
            "pages of 500, ours on a compact cache, applied by page",
            Mode::RelistPagedCompact,
            Mode::RelistKubeRuntimePaged,
        ),
    ] {
        let (ours, peer) = (sample(ours_mode), sample(peer_mode));
        if let Some(s) = ours
            .iter()
            .chain(&peer)
            .find(|s| s.peak_reset == Some(false))
        {
            eprintln!("relist: the peak could not be reset ({s:?}): the peak is the whole run's");
        }
        let rss = |s: &Option<Sample>, f: fn(&Sample) -> Option<u64>| {
            s.as_ref()
                .and_then(f)
                .map_or(Figure::NotApplicable, |b| Figure::Rss(b as f64))
        };
        let cache = |s: &Option<Sample>| {
            let (synced, base) = (s.as_ref()?.rss_synced?, base_rss?);
            Some(synced as f64 - base as f64)
        };
        let ratio = |s: &Option<Sample>| {
            let s = s.as_ref()?;
            Some(s.rss_relist_peak? as f64 / s.rss_synced? as f64)
        };
        let cache_ratio = |s: &Option<Sample>| {
            let peak = s.as_ref()?.rss_relist_peak? as f64 - base_rss? as f64;
            Some(peak / cache(s)?)
        };
        let fig = |v: Option<f64>, f: fn(f64) -> Figure| v.map_or(Figure::NotApplicable, f);
        let phase = |p: &str| format!("relist {pods} pods, {what}: {p}");
        emit(Row::new(
            "MEM",
            phase("RSS synced"),
            rss(&ours, |s| s.rss_synced),
            rss(&peer, |s| s.rss_synced),
        ));
        emit(Row::new(
            "MEM",
            phase("cache RSS (synced − baseline)"),
            fig(cache(&ours), Figure::Rss),
            fig(cache(&peer), Figure::Rss),
        ));
        emit(Row::new(
            "MEM",
            phase("peak RSS during the relist"),
            rss(&ours, |s| s.rss_relist_peak),
            rss(&peer, |s| s.rss_relist_peak),
        ));
        emit(
            Row::new(
                "MEM",
                phase("peak ÷ synced RSS (whole process)"),
                fig(ratio(&ours), Figure::Factor),
                fig(ratio(&peer), Figure::Factor),
            )
            .target(RELIST_TARGET),
        );
        emit(
            Row::new(
                "MEM",
                phase("(peak − baseline) ÷ cache RSS"),
                fig(cache_ratio(&ours), Figure::Factor),
                fig(cache_ratio(&peer), Figure::Factor),
            )
            .target(RELIST_TARGET),
        );
        emit(Row::new(
            "MEM",
            phase("RSS once relisted"),
            rss(&ours, |s| s.rss_after_relist),
            rss(&peer, |s| s.rss_after_relist),
        ));
        emit(Row::new(
            "MEM",
            phase("live heap synced"),
            rss(&ours, |s| s.heap_synced),
            rss(&peer, |s| s.heap_synced),
        ));
        emit(Row::new(
            "MEM",
            phase("live heap once relisted"),
            rss(&ours, |s| s.heap_after_relist),
            rss(&peer, |s| s.heap_after_relist),
        ));
        emit(Row::new(
            "MEM",
            phase("relist time (expiry → cache relisted)"),
            fig(ours.as_ref().and_then(|s| s.relist_secs), Figure::Secs),
            fig(peer.as_ref().and_then(|s| s.relist_secs), Figure::Secs),
        ));
    }
}

/// The table, in Markdown.
pub fn render(rows: &[Row]) -> String {
    let mut out = String::from(
        "| workload | phase | ours | kube-runtime | ratio (kube-runtime ÷ ours) | target | events/s (ours) | load |\n\
         |---|---|---|---|---|---|---|---|\n",
    );
    for r in rows {
        let ratio = r
            .ratio()
            .map_or_else(|| "—".to_owned(), |x| format!("{x:.2}×"));
        let rate = r.rate.map_or_else(|| "—".to_owned(), thousands);
        let load = r.load.map_or_else(|| "—".to_owned(), |l| format!("{l:.2}"));
        let target = if r.target.is_empty() { "—" } else { r.target };
        let (ours, peer) = match (r.ours, r.kube_runtime) {
            (Figure::NotApplicable, Figure::NotApplicable) => ("—".to_owned(), "—".to_owned()),
            (o, k) => (o.to_string(), k.to_string()),
        };
        out.push_str(&format!(
            "| {} | {} | {ours} | {peer} | {ratio} | {target} | {rate} | {load} |\n",
            r.workload, r.phase
        ));
    }
    out
}

fn thousands(v: f64) -> String {
    let digits = format!("{:.0}", v);
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i) % 3 == 0 {
            out.push(',');
        }
        out.push(c);
    }
    out
}
