//! W-WQ: the work queue alone (docs/benchmarks.md). 100,000 distinct keys added, then taken by
//! 4 workers (add + get + done per key); and 1,000 hot keys re-added 100 times each while the
//! workers process them (most adds coalesce). Figures are per key added. The workloads are
//! `informer_benches::w_wq`, which the report runs too.

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use informer_benches::{Sizes, w_inf, w_wq};

fn w_wq(c: &mut Criterion) {
    let rt = w_inf::runtime();
    let s = Sizes::full();
    let (distinct, hot_keys, rounds) = (s.wq_distinct, s.wq_hot_keys, s.wq_hot_rounds);
    let mut group = c.benchmark_group("W-WQ");
    group.throughput(Throughput::Elements(distinct));
    group.sample_size(20);
    group.bench_function("100k distinct keys, 4 workers", |b| {
        b.iter_custom(|iters| {
            (0..iters)
                .map(|_| w_wq::distinct(&rt, distinct, w_wq::WORKERS))
                .sum()
        });
    });
    group.throughput(Throughput::Elements(hot_keys * rounds));
    group.bench_function(
        "1k hot keys x 100 re-adds while processed, 4 workers",
        |b| {
            b.iter_custom(|iters| {
                (0..iters)
                    .map(|_| w_wq::hot(&rt, hot_keys, rounds, w_wq::WORKERS))
                    .sum()
            });
        },
    );
    group.finish();
}

criterion_group!(benches, w_wq);
criterion_main!(benches);
