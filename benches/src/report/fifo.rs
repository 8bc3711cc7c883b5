//! W-FIFO-A, -B and -C: the queues (DeltaFifo and the in-order FIFO) on their own.

use std::time::Duration;

use super::figures::{Figure, Row, median_of, timed};
use super::{Options, Rows};
use crate::w_fifo::{self, MakeQueue};

/// One row per queue: `measure` makes a queue and times a run of it over `ops` operations.
fn queue_rows(
    opts: &Options,
    out: &mut Rows<'_>,
    (workload, per_op, target): (&'static str, &str, &'static str),
    ops: usize,
    measure: impl Fn(&MakeQueue) -> Duration,
) {
    for (name, make) in w_fifo::queues() {
        let t = median_of(opts.reps, || measure(&make));
        let row = Row::new(
            workload,
            format!("{name}: {per_op}"),
            Figure::per_op(t / ops as u32),
            Figure::NotApplicable,
        );
        out.emit(row.target(target).rate_per_op());
    }
}

/// W-FIFO-A: every object added, then all popped.
pub(super) fn fifo_a_rows(opts: &Options, out: &mut Rows<'_>) {
    let s = opts.sizes;
    let objects = crate::workload::pods(s.fifo_a);
    let what = ("W-FIFO-A", "ns per object (add + pop)", "160 ns");
    queue_rows(opts, out, what, s.fifo_a, |make| {
        timed(|| w_fifo::a(&*make(), &objects))
    });
}

/// W-FIFO-B: rounds of updates over the same keys, then all popped.
pub(super) fn fifo_b_rows(opts: &Options, out: &mut Rows<'_>) {
    let s = opts.sizes;
    let updates = w_fifo::b_objects(s.fifo_b_keys, s.fifo_b_rounds);
    let what = ("W-FIFO-B", "ns per update", "90 ns");
    queue_rows(opts, out, what, updates.len(), |make| {
        timed(|| w_fifo::b(&*make(), &updates))
    });
}

/// W-FIFO-C: a producer thread adding and updating while this thread pops.
pub(super) fn fifo_c_rows(opts: &Options, out: &mut Rows<'_>) {
    let s = opts.sizes;
    let objects = w_fifo::c_objects(s.fifo_c_keys, s.fifo_c_ops);
    let what = ("W-FIFO-C", "ns per op", "160 ns");
    queue_rows(opts, out, what, s.fifo_c_ops, |make| {
        let q = make();
        timed(|| w_fifo::c(&q, &objects, s.fifo_c_keys))
    });
}
