//! W-IDX: the indexer with the `namespace` and `node` indexes (and the same phases with none),
//! and kube-runtime's reflector store (no indexes: add, update, delete through
//! `Writer::apply_watcher_event`) on the same objects.
//!
//! Each phase reports time per iteration over 100,000 pods; divide by the element count (criterion
//! prints the throughput) for ns per operation. `by_index` is timed per call.

use std::hint::black_box;

use criterion::{BatchSize, Criterion, Throughput, criterion_group, criterion_main};
use informer_benches::Sizes;
use informer_benches::w_idx::{self, Data, PeerEvents};
use informer_benches::workload::NODE_INDEX;
use informer_store::{Indexer, NAMESPACE_INDEX, ThreadSafeStore};
use k8s_openapi::api::core::v1::Pod;
use kube_runtime::reflector::store::Writer;

fn filled(with_indexes: bool, data: &Data) -> ThreadSafeStore<Pod> {
    let s = w_idx::store(with_indexes);
    w_idx::add_all(&s, &data.objects);
    s
}

fn peer_filled(events: &PeerEvents) -> Writer<Pod> {
    let mut w = Writer::default();
    w_idx::apply_all(&mut w, &events.add);
    w
}

fn w_idx(c: &mut Criterion) {
    let data = Data::new(Sizes::full().idx);
    let n = data.len() as u64;

    for (label, with_indexes) in [("two-indexes", true), ("no-indexes", false)] {
        let mut g = c.benchmark_group(format!("w_idx/{label}"));
        g.sample_size(10);
        g.throughput(Throughput::Elements(n));
        g.bench_function("add", |b| {
            b.iter_batched(
                || w_idx::store(with_indexes),
                |s| {
                    w_idx::add_all(&s, &data.objects);
                    s
                },
                BatchSize::PerIteration,
            )
        });
        g.bench_function("update", |b| {
            b.iter_batched(
                || filled(with_indexes, &data),
                |s| {
                    w_idx::update_all(&s, &data.moved);
                    s
                },
                BatchSize::PerIteration,
            )
        });
        g.bench_function("delete", |b| {
            b.iter_batched(
                || filled(with_indexes, &data),
                |s| {
                    w_idx::delete_all(&s, &data.objects);
                    s
                },
                BatchSize::PerIteration,
            )
        });
        g.finish();
    }

    let events = PeerEvents::new(&data);
    let mut g = c.benchmark_group("w_idx/kube-runtime");
    g.sample_size(10);
    g.throughput(Throughput::Elements(n));
    g.bench_function("add", |b| {
        b.iter_batched(
            Writer::<Pod>::default,
            |mut w| {
                w_idx::apply_all(&mut w, &events.add);
                w
            },
            BatchSize::PerIteration,
        )
    });
    g.bench_function("update", |b| {
        b.iter_batched(
            || peer_filled(&events),
            |mut w| {
                w_idx::apply_all(&mut w, &events.update);
                w
            },
            BatchSize::PerIteration,
        )
    });
    g.bench_function("delete", |b| {
        b.iter_batched(
            || peer_filled(&events),
            |mut w| {
                w_idx::apply_all(&mut w, &events.delete);
                w
            },
            BatchSize::PerIteration,
        )
    });
    g.finish();
    drop(events);

    let s = filled(true, &data);
    let mut g = c.benchmark_group("w_idx/by_index");
    g.throughput(Throughput::Elements(1));
    let mut j = 0usize;
    g.bench_function("namespace (1,000 objects)", |b| {
        b.iter(|| {
            j += 1;
            black_box(
                s.by_index(NAMESPACE_INDEX, &data.namespaces[j % 100])
                    .unwrap(),
            )
        })
    });
    g.bench_function("node (100 objects)", |b| {
        b.iter(|| {
            j += 1;
            black_box(s.by_index(NODE_INDEX, &data.nodes[j % 1000]).unwrap())
        })
    });
    g.finish();
}

criterion_group!(benches, w_idx);
criterion_main!(benches);
