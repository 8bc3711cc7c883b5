//! W-WQ: the work queue alone (docs/benchmarks.md). 100,000 distinct keys added, then taken by
//! 4 workers (add + get + done per key); and 1,000 hot keys re-added 100 times each while the
//! workers process them (most adds coalesce). Figures are per key added.

use std::hint::black_box;
use std::sync::Arc;

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use informer_workqueue::WorkQueue;

const DISTINCT: u64 = 100_000;
const HOT_KEYS: u64 = 1_000;
const ROUNDS: u64 = 100;
const WORKERS: usize = 4;

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .build()
        .expect("a runtime")
}

/// Four workers taking keys until the queue is shut down and empty; returns keys processed.
async fn drain_with_workers(queue: &WorkQueue<u64>) -> u64 {
    let workers: Vec<_> = (0..WORKERS)
        .map(|_| {
            let queue = queue.clone();
            tokio::spawn(async move {
                let mut n = 0u64;
                while let Some(k) = queue.get().await {
                    black_box(k);
                    queue.done(&k);
                    n += 1;
                }
                n
            })
        })
        .collect();
    queue.shut_down_with_drain().await;
    let mut total = 0;
    for w in workers {
        total += w.await.expect("a worker");
    }
    total
}

fn distinct_keys(c: &mut Criterion) {
    let rt = runtime();
    let mut group = c.benchmark_group("W-WQ");
    group.throughput(Throughput::Elements(DISTINCT));
    group.sample_size(20);
    group.bench_function("100k distinct keys, 4 workers", |b| {
        b.iter(|| {
            rt.block_on(async {
                let queue = WorkQueue::<u64>::new();
                for k in 0..DISTINCT {
                    queue.add(k);
                }
                assert_eq!(drain_with_workers(&queue).await, DISTINCT);
            })
        });
    });
    group.throughput(Throughput::Elements(HOT_KEYS * ROUNDS));
    group.bench_function(
        "1k hot keys x 100 re-adds while processed, 4 workers",
        |b| {
            b.iter(|| {
                rt.block_on(async {
                    let queue = Arc::new(WorkQueue::<u64>::new());
                    let adder = tokio::spawn({
                        let queue = Arc::clone(&queue);
                        async move {
                            for _ in 0..ROUNDS {
                                for k in 0..HOT_KEYS {
                                    queue.add(k);
                                }
                                tokio::task::yield_now().await;
                            }
                        }
                    });
                    let workers: Vec<_> = (0..WORKERS)
                        .map(|_| {
                            let queue = Arc::clone(&queue);
                            tokio::spawn(async move {
                                while let Some(k) = queue.get().await {
                                    black_box(k);
                                    queue.done(&k);
                                }
                            })
                        })
                        .collect();
                    adder.await.expect("the adder");
                    queue.shut_down_with_drain().await;
                    for w in workers {
                        w.await.expect("a worker");
                    }
                })
            });
        },
    );
    group.finish();
}

criterion_group!(benches, distinct_keys);
criterion_main!(benches);
