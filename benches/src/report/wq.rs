//! W-WQ: the workqueue, distinct keys and hot keys, and the cost of its metrics; the priority
//! queue on the same workloads, and its cost over the plain one.

use super::figures::{Figure, Row, median, median_of, overhead_row, thousands};
use super::{Options, Rows};
use crate::w_wq::Order;
use crate::{w_inf, w_wq};

/// The target of a W-WQ row: a ratio to client-go that cannot be measured without Go.
const WQ_TARGET: &str =
    "≤ ⅓ of client-go's workqueue (client-go not measured here: no Go toolchain)";

/// W-WQ: distinct keys and hot keys re-added while processed, and the cost of the metrics on
/// each.
pub(super) fn wq_rows(opts: &Options, out: &mut Rows<'_>) {
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
    out.emit(row.target(WQ_TARGET).rate_per_op());
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
    out.emit(row.target(WQ_TARGET).rate_per_op());
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
    out.emit(overhead_row(
        "W-WQ",
        format!("{} distinct keys", thousands(s.wq_distinct as f64)),
        off,
        on,
    ));
    out.emit(overhead_row(
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

/// W-WQ on the priority queue: both workloads on it and on the plain queue, in turns; rows of
/// the priority queue's figures, and of its time over the plain queue's.
pub(super) fn wq_priority_rows(opts: &Options, out: &mut Rows<'_>) {
    let s = opts.sizes;
    let rt = w_inf::runtime();
    let workers = w_wq::WORKERS;
    let (k, r) = (s.wq_hot_keys, s.wq_hot_rounds);
    let mut runs = [(); 4].map(|()| Vec::new());
    for _ in 0..opts.reps.max(1) {
        for (i, order) in [Order::Fifo, Order::Priority].into_iter().enumerate() {
            let distinct = w_wq::distinct_on(&rt, order, s.wq_distinct, workers, None);
            runs[i].push(distinct.as_secs_f64());
            runs[2 + i].push(w_wq::hot_on(&rt, order, k, r, workers, None).as_secs_f64());
        }
    }
    let [plain, priority, hot_plain, hot_priority] = runs.map(median);
    let tenants = w_wq::TENANTS;
    let workloads = [
        (
            format!("{} distinct keys", thousands(s.wq_distinct as f64)),
            "ns per key (add + get + done)",
            s.wq_distinct,
            plain,
            priority,
        ),
        (
            format!(
                "{} hot keys × {r} re-adds while processed",
                thousands(k as f64)
            ),
            "ns per add",
            k * r,
            hot_plain,
            hot_priority,
        ),
    ];
    for (phase, unit, ops, plain, priority) in workloads {
        let per_op = |secs: f64| secs * 1e9 / ops as f64;
        let row = Row::new(
            "W-WQ",
            format!("{phase}, {workers} workers, priority queue ({tenants} tenants): {unit}"),
            Figure::Ns(per_op(priority)),
            Figure::NotApplicable,
        );
        out.emit(row.target(WQ_TARGET).rate_per_op());
        let row = Row::new(
            "W-WQ",
            format!(
                "{phase}: priority queue over plain, in turns ({:.0} ns vs {:.0} ns)",
                per_op(priority),
                per_op(plain)
            ),
            Figure::Factor(priority / plain),
            Figure::NotApplicable,
        );
        out.emit(row.target("≤ 1.5× the plain queue's time"));
    }
}
