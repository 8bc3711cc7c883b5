//! W-IDX: the indexer with the `namespace` and `node` indexes (and the same phases with none).
//!
//! Each phase reports time per iteration over 100,000 pods; divide by the element count (criterion
//! prints the throughput) for ns per operation. `by_index` is timed per call.

use std::hint::black_box;
use std::sync::Arc;

use criterion::{BatchSize, Criterion, Throughput, criterion_group, criterion_main};
use informer_benches::workload::{NODE_INDEX, indexers, key_func, pod_at, pods};
use informer_store::{Indexer, Indexers, NAMESPACE_INDEX, ReflectorStore, ThreadSafeStore};
use k8s_openapi::api::core::v1::Pod;

const N: usize = 100_000;

fn store(with_indexes: bool) -> ThreadSafeStore<Pod> {
    let idx = if with_indexes {
        indexers()
    } else {
        Indexers::new()
    };
    ThreadSafeStore::with_indexers(key_func(), idx)
}

fn filled(with_indexes: bool, objects: &[Arc<Pod>]) -> ThreadSafeStore<Pod> {
    let s = store(with_indexes);
    for p in objects {
        s.add(Arc::clone(p)).unwrap();
    }
    s
}

fn w_idx(c: &mut Criterion) {
    let objects = pods(N);
    // Every pod moved to the next node, at a newer resource version.
    let moved: Vec<Arc<Pod>> = (0..N)
        .map(|i| Arc::new(pod_at(i, (N + i + 1) as u64, (i + 1) % 1000)))
        .collect();

    for (label, with_indexes) in [("two-indexes", true), ("no-indexes", false)] {
        let mut g = c.benchmark_group(format!("w_idx/{label}"));
        g.sample_size(10);
        g.throughput(Throughput::Elements(N as u64));
        g.bench_function("add", |b| {
            b.iter_batched(
                || store(with_indexes),
                |s| {
                    for p in &objects {
                        s.add(Arc::clone(p)).unwrap();
                    }
                    s
                },
                BatchSize::PerIteration,
            )
        });
        g.bench_function("update", |b| {
            b.iter_batched(
                || filled(with_indexes, &objects),
                |s| {
                    for p in &moved {
                        s.update(Arc::clone(p)).unwrap();
                    }
                    s
                },
                BatchSize::PerIteration,
            )
        });
        g.bench_function("delete", |b| {
            b.iter_batched(
                || filled(with_indexes, &objects),
                |s| {
                    for p in &objects {
                        s.delete(Arc::clone(p)).unwrap();
                    }
                    s
                },
                BatchSize::PerIteration,
            )
        });
        g.finish();
    }

    let s = filled(true, &objects);
    let namespaces: Vec<String> = (0..100).map(|j| format!("ns-{j}")).collect();
    let nodes: Vec<String> = (0..1000).map(|j| format!("node-{j}")).collect();
    let mut g = c.benchmark_group("w_idx/by_index");
    g.throughput(Throughput::Elements(1));
    let mut j = 0usize;
    g.bench_function("namespace (1,000 objects)", |b| {
        b.iter(|| {
            j += 1;
            black_box(s.by_index(NAMESPACE_INDEX, &namespaces[j % 100]).unwrap())
        })
    });
    g.bench_function("node (100 objects)", |b| {
        b.iter(|| {
            j += 1;
            black_box(s.by_index(NODE_INDEX, &nodes[j % 1000]).unwrap())
        })
    });
    g.finish();
}

criterion_group!(benches, w_idx);
criterion_main!(benches);
