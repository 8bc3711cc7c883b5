//! The report: every workload once more, for ours and kube-runtime in the same run, as one
//! table (the `report` binary prints it).
//!
//! Each workload runs [`Options::reps`] times, ours and kube-runtime alternating, and a figure
//! is the median. Every row carries the one-minute load average read when it was measured:
//! on a shared machine a figure means little without it.
//!
//! The workloads are the entries of [`TABLE`], in the order they run: a name (what `--only`
//! matches), what it measures, and its row function, in the module of its family.

use std::path::PathBuf;

use crate::Sizes;

mod child;
mod ctrl;
mod decode;
mod fifo;
mod figures;
mod http;
mod idx;
mod inf;
mod lean;
mod mem;
mod mem_projection;
mod mem_relist;
mod shard;
mod sync;
mod sync_wire;
mod wq;

pub use child::{CHILD_LIMIT, mem_sample, output_within};
pub use figures::{Figure, Row, load_average, machine, median, render};
pub use mem::realistic_pods;

/// A workload of the report.
#[derive(Debug, Clone, Copy)]
pub struct Workload {
    /// Its name (`--only` matches a part of it).
    pub name: &'static str,
    /// What it measures.
    pub measures: &'static str,
    /// Measures it and emits its rows.
    pub rows: fn(&Options, &mut Rows<'_>),
}

/// The workloads, in the order they run.
pub const TABLE: &[Workload] = &[
    Workload {
        name: "w-fifo-a",
        measures: "the queues: every object added, then popped",
        rows: fifo::fifo_a_rows,
    },
    Workload {
        name: "w-fifo-b",
        measures: "the queues: updates of the same keys in rounds, then popped",
        rows: fifo::fifo_b_rows,
    },
    Workload {
        name: "w-fifo-c",
        measures: "the queues: a producer adding and updating while the queue is popped",
        rows: fifo::fifo_c_rows,
    },
    Workload {
        name: "w-wq",
        measures: "the workqueue: distinct keys, hot keys, and the cost of its metrics",
        rows: wq::wq_rows,
    },
    Workload {
        name: "w-wq-priority",
        measures: "the priority workqueue on W-WQ's workloads, and its time over the plain one's",
        rows: wq::wq_priority_rows,
    },
    Workload {
        name: "w-idx",
        measures: "the indexer: adds, updates, deletes and index reads, with two indexes and none",
        rows: idx::idx_rows,
    },
    Workload {
        name: "w-inf",
        measures: "the informer from a replayed list and watch to its consumers, synthetic and \
                   realistic pods",
        rows: inf::inf_rows,
    },
    Workload {
        name: "w-http",
        measures: "list and watch over HTTP, from the simulator and from the replay server",
        rows: http::http_rows,
    },
    Workload {
        name: "w-http-process",
        measures: "list and watch over HTTP, each side in a process of its own, cold and warm",
        rows: http::http_process_rows,
    },
    Workload {
        name: "w-http-realistic",
        measures: "list and watch over HTTP of realistic pods, managed fields kept or dropped",
        rows: http::http_realistic_rows,
    },
    Workload {
        name: "decode",
        measures: "each parser on the same pods, and the adapter's decoders against kube-client's",
        rows: decode::decode_rows,
    },
    Workload {
        name: "w-ctrl",
        measures: "a controller's cold start and updates to quiescence",
        rows: ctrl::ctrl_rows,
    },
    Workload {
        name: "w-shard",
        measures: "a sharded controller with 1, 2 and 4 replicas: reconciles per second and \
                   each replica's informer heap",
        rows: shard::shard_rows,
    },
    Workload {
        name: "mem",
        measures: "heap and resident set per cached pod, and the cache's overhead",
        rows: mem::mem_rows,
    },
    Workload {
        name: "mem-projection",
        measures: "heap per cached pod and decode time of each view (Pod, metadata, projection)",
        rows: mem_projection::mem_projection_rows,
    },
    Workload {
        name: "mem-relist",
        measures: "the resident set through a relist over HTTP",
        rows: mem_relist::mem_relist_rows,
    },
    Workload {
        name: "sync",
        measures: "list-and-sync from the simulator in its own process, each client a fresh \
                   process: time to synced and resident set, list and streaming list",
        rows: sync::sync_rows,
    },
    Workload {
        name: "sync-wire",
        measures: "SYNC over plain HTTP/1.1, HTTP/1.1 asking for gzip and HTTP/2 (h2c), on \
                   loopback and behind a 100 MB/s link",
        rows: sync_wire::sync_wire_rows,
    },
    Workload {
        name: "lean",
        measures: "the read costs of the compact cache against the default cache",
        rows: lean::lean_rows,
    },
];

/// The workloads, by name, in the order they run (`--only` matches a part of one of these).
pub const WORKLOADS: [&str; TABLE.len()] = names();

const fn names<const N: usize>() -> [&'static str; N] {
    let mut names = [""; N];
    let mut i = 0;
    while i < N {
        names[i] = TABLE[i].name;
        i += 1;
    }
    names
}

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
    /// The `sync_server` and `sync_client` binaries; without them, SYNC is not measured.
    pub sync_exes: Option<(PathBuf, PathBuf)>,
    /// The `w_shard` binary; without it, W-SHARD is not measured.
    pub w_shard_exe: Option<PathBuf>,
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

/// Where the workloads' rows go: to the progress function as each is measured, and into the
/// table.
pub struct Rows<'a> {
    progress: &'a mut dyn FnMut(&Row),
    rows: Vec<Row>,
    /// W-INF's figure of ours (4 handlers, seconds), which W-HTTP sets the informer's share
    /// against: `None` unless W-INF ran.
    w_inf_ours: Option<f64>,
}

impl std::fmt::Debug for Rows<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Rows")
            .field("rows", &self.rows)
            .field("w_inf_ours", &self.w_inf_ours)
            .finish_non_exhaustive()
    }
}

impl Rows<'_> {
    fn emit(&mut self, row: Row) {
        (self.progress)(&row);
        self.rows.push(row);
    }
}

/// Runs the selected workloads; `progress` sees each row as it is measured.
pub fn run(opts: &Options, progress: &mut dyn FnMut(&Row)) -> Vec<Row> {
    let mut out = Rows {
        progress,
        rows: Vec::new(),
        w_inf_ours: None,
    };
    for workload in TABLE.iter().filter(|w| opts.selected(w.name)) {
        (workload.rows)(opts, &mut out);
    }
    out.rows
}
