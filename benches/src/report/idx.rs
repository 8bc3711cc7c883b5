//! W-IDX: the indexer's writes and index reads, with two indexes and none.

use std::time::Duration;

use informer_store::NAMESPACE_INDEX;

use super::figures::{Figure, Row, median};
use super::{Options, Rows};
use crate::w_idx::{self, Phase};
use crate::workload::NODE_INDEX;

/// W-IDX: the indexer's writes and index reads with two indexes, and its writes with none,
/// against kube-runtime's store.
pub(super) fn idx_rows(opts: &Options, out: &mut Rows<'_>) {
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
        out.emit(row.target(target).rate_per_op());
    }
    for phase in [Phase::Add, Phase::Update, Phase::Delete] {
        let row = Row::new(
            "W-IDX",
            format!("no indexes: {}", phase.name()),
            med(&ours0, phase),
            med(&peer, phase),
        );
        out.emit(row.rate_per_op());
    }
}
