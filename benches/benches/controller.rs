//! W-CTRL: a controller over an informer (docs/benchmarks.md). 10,000 pods reconciled once each
//! from a cold start, then 100,000 MODIFIED events on them that the controller coalesces, to
//! quiescence; ours (`informer_runtime::Controller`) and kube-runtime's `Controller`, 4
//! concurrent reconciles each, over the same in-memory objects (`informer_benches::w_ctrl` says
//! exactly what is timed).
//!
//! One run gives both phases; each bench times one of them, so every run is done once per
//! bench. The reconcile counts are in the report (`--only w-ctrl`).

use std::time::Duration;

use criterion::{Criterion, criterion_group, criterion_main};
use informer_benches::w_ctrl::{self, Data, Run};
use informer_benches::{Sizes, w_inf};

/// One phase's figure out of a run.
type Phase = fn(&Run) -> Duration;

fn w_ctrl(c: &mut Criterion) {
    let rt = w_inf::runtime();
    let sizes = Sizes::full();
    let data = Data::new(sizes.ctrl_pods, sizes.ctrl_updates);
    let mut g = c.benchmark_group("w_ctrl");
    g.sample_size(10);
    let phases: [(&str, Phase); 2] = [
        ("cold start", |r| r.cold_start),
        ("updates to quiescence", |r| r.updates),
    ];
    for (phase, figure) in phases {
        g.bench_function(format!("ours: {phase}"), |b| {
            b.iter_custom(|iters| (0..iters).map(|_| figure(&w_ctrl::ours(&rt, &data))).sum())
        });
        g.bench_function(format!("kube-runtime: {phase}"), |b| {
            b.iter_custom(|iters| {
                (0..iters)
                    .map(|_| figure(&w_ctrl::kube_runtime(&rt, &data)))
                    .sum()
            })
        });
    }
    g.finish();
}

criterion_group!(benches, w_ctrl);
criterion_main!(benches);
