//! W-INF: a whole shared index informer over an in-memory source — a list of 50,000 pods, then
//! 100,000 MODIFIED events — with the `namespace` and `node` indexes and handlers counting what
//! they see; the figure is the wall time from start until every handler has counted 50,000
//! adds and 100,000 updates. Also run with 1 and 16 handlers (dispatch fan-out).
//!
//! kube-runtime on the same objects (`informer_benches::w_inf` says exactly what each side
//! does): its `reflector` over the same events as `watcher::Event`s, with 4 subscribers of a
//! shared store, and with one stream consumer counting for 4 handlers.

use criterion::{Criterion, criterion_group, criterion_main};
use informer_benches::Sizes;
use informer_benches::w_inf::{self, Data};

fn w_inf(c: &mut Criterion) {
    let rt = w_inf::runtime();
    let sizes = Sizes::full();
    let data = Data::new(sizes.listed, sizes.events);
    let mut g = c.benchmark_group("w_inf");
    g.sample_size(10);
    for handlers in [4, 1, 16] {
        g.bench_function(format!("{handlers} handlers"), |b| {
            b.iter_custom(|iters| (0..iters).map(|_| w_inf::ours(&rt, &data, handlers)).sum())
        });
    }
    g.bench_function("kube-runtime 4 subscribers", |b| {
        b.iter_custom(|iters| {
            (0..iters)
                .map(|_| w_inf::kube_runtime_subscribers(&rt, data.watcher_events(), 4))
                .sum()
        })
    });
    g.bench_function("kube-runtime stream consumer", |b| {
        b.iter_custom(|iters| {
            (0..iters)
                .map(|_| w_inf::kube_runtime_consumer(&rt, data.watcher_events(), 4))
                .sum()
        })
    });
    g.finish();
}

criterion_group!(benches, w_inf);
criterion_main!(benches);
