//! The table's figures and rows, and the arithmetic of measuring them (medians of runs).

use std::time::{Duration, Instant};

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
    pub(super) fn value(self) -> Option<f64> {
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
    pub(super) fn per_op(d: Duration) -> Figure {
        Figure::Ns(d.as_secs_f64() * 1e9)
    }

    pub(super) fn bytes(v: Option<f64>) -> Figure {
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
    pub(super) fn new(
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

    pub(super) fn target(mut self, target: &'static str) -> Self {
        self.target = target;
        self
    }

    /// Operations per second from ns per op.
    pub(super) fn rate_per_op(mut self) -> Self {
        self.rate = self.ours.value().filter(|&ns| ns > 0.0).map(|ns| 1e9 / ns);
        self
    }

    /// Events per second from a wall time over `events`.
    pub(super) fn rate_over(mut self, events: usize) -> Self {
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

pub(super) fn median_of(reps: usize, mut f: impl FnMut() -> Duration) -> Duration {
    let runs = (0..reps.max(1)).map(|_| f().as_secs_f64()).collect();
    Duration::from_secs_f64(median(runs))
}

/// Runs `ours` and `peer` in turns, [`Options::reps`](super::Options::reps) times each: the
/// median of each side, seconds.
pub(super) fn secs_in_turns(
    reps: usize,
    mut ours: impl FnMut() -> Duration,
    mut peer: impl FnMut() -> Duration,
) -> (Figure, Figure) {
    let (mut o, mut p) = (Vec::new(), Vec::new());
    for _ in 0..reps.max(1) {
        o.push(ours().as_secs_f64());
        p.push(peer().as_secs_f64());
    }
    (Figure::Secs(median(o)), Figure::Secs(median(p)))
}

pub(super) fn timed(f: impl FnOnce() -> usize) -> Duration {
    let start = Instant::now();
    std::hint::black_box(f());
    start.elapsed()
}

/// The cost of metrics: `on` over `off` (medians of runs taken in turns), as a percentage.
pub(super) fn overhead_row(
    workload: &'static str,
    phase: String,
    off: Vec<f64>,
    on: Vec<f64>,
) -> Row {
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

pub(super) fn thousands(v: f64) -> String {
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
