//! W-CTRL: a controller's cold start and updates to quiescence, ours and kube-runtime.

use super::figures::{Figure, Row, median, thousands};
use super::{Options, Rows};
use crate::{w_ctrl, w_inf};

/// W-CTRL: ours and kube-runtime's controller, a cold start over every pod, then the updates
/// until quiescence, and the reconciles each ran.
pub(super) fn ctrl_rows(opts: &Options, out: &mut Rows<'_>) {
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
    out.emit(row.target("≥ 3× kube-runtime").rate_over(data.pods()));
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
    out.emit(row.target("≥ 3× kube-runtime").rate_over(data.updates()));
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
    out.emit(row);
}
