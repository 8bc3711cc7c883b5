//! W-FIFO-A, W-FIFO-B, W-FIFO-C: the queue layer, for the DeltaFIFO and the in-order FIFO.
//!
//! Each benchmark times a whole workload; criterion's throughput figure is per operation (per
//! object for A, per `update` for B, per `add`/`update` for C).

use std::hint::black_box;
use std::sync::Arc;
use std::thread;

use criterion::{BatchSize, Criterion, Throughput, criterion_group, criterion_main};
use informer_benches::workload::{key_func, pod_at, pods};
use informer_fifo::{DeltaFIFO, InOrderFIFO, Queue};
use k8s_openapi::api::core::v1::Pod;

type MakeQueue = fn() -> Arc<dyn Queue<Pod>>;

fn queues() -> [(&'static str, MakeQueue); 2] {
    [
        ("delta_fifo", || Arc::new(DeltaFIFO::new(key_func()))),
        ("in_order_fifo", || Arc::new(InOrderFIFO::new(key_func()))),
    ]
}

/// Pops until the queue is closed and drained; returns the number of deltas seen.
fn drain(q: &dyn Queue<Pod>) -> usize {
    let mut n = 0;
    while q.pop(&mut |deltas, _| n += deltas.len()).is_ok() {}
    n
}

/// W-FIFO-A: add 100,000 distinct pods, then pop them all with a process function that does
/// nothing.
fn w_fifo_a(c: &mut Criterion) {
    const N: usize = 100_000;
    let objects = pods(N);
    let mut g = c.benchmark_group("w_fifo_a");
    g.sample_size(10);
    g.throughput(Throughput::Elements(N as u64));
    for (name, make) in queues() {
        g.bench_function(name, |b| {
            b.iter_batched(
                make,
                |q| {
                    for p in &objects {
                        q.add(Arc::clone(p)).unwrap();
                    }
                    q.close();
                    black_box(drain(&*q))
                },
                BatchSize::PerIteration,
            )
        });
    }
    g.finish();
}

/// W-FIFO-B: 1,000 keys, 200 rounds of `update` on every key (each a new object with a new
/// resource version), then pop all.
fn w_fifo_b(c: &mut Criterion) {
    const KEYS: usize = 1_000;
    const ROUNDS: usize = 200;
    let updates: Vec<Arc<Pod>> = (0..ROUNDS)
        .flat_map(|r| {
            (0..KEYS).map(move |i| Arc::new(pod_at(i, (r * KEYS + i + 1) as u64, i % 1000)))
        })
        .collect();
    let mut g = c.benchmark_group("w_fifo_b");
    g.sample_size(10);
    g.throughput(Throughput::Elements((KEYS * ROUNDS) as u64));
    // The floor no queue can go under: the key of every object, and the reference count
    // increment of the `Arc::clone` each call takes.
    let key = key_func();
    g.bench_function("key_func_only", |b| {
        b.iter(|| {
            let mut len = 0;
            for p in &updates {
                let p = Arc::clone(p);
                len += key(&p).unwrap().len();
            }
            black_box(len)
        })
    });
    for (name, make) in queues() {
        g.bench_function(name, |b| {
            b.iter_batched(
                make,
                |q| {
                    for p in &updates {
                        q.update(Arc::clone(p)).unwrap();
                    }
                    q.close();
                    black_box(drain(&*q))
                },
                BatchSize::PerIteration,
            )
        });
    }
    g.finish();
}

/// W-FIFO-C: one producer doing 200,000 add/update over 10,000 keys while one consumer pops,
/// until the queue is drained after the producer finishes.
fn w_fifo_c(c: &mut Criterion) {
    const KEYS: usize = 10_000;
    const OPS: usize = 200_000;
    let objects: Arc<Vec<Arc<Pod>>> = Arc::new(
        (0..OPS)
            .map(|j| Arc::new(pod_at(j % KEYS, j as u64 + 1, j % 1000)))
            .collect(),
    );
    let mut g = c.benchmark_group("w_fifo_c");
    g.sample_size(10);
    g.throughput(Throughput::Elements(OPS as u64));
    for (name, make) in queues() {
        g.bench_function(name, |b| {
            b.iter_batched(
                make,
                |q| {
                    let producer = {
                        let q = Arc::clone(&q);
                        let objects = Arc::clone(&objects);
                        thread::spawn(move || {
                            for (j, p) in objects.iter().enumerate() {
                                if j < KEYS {
                                    q.add(Arc::clone(p)).unwrap();
                                } else {
                                    q.update(Arc::clone(p)).unwrap();
                                }
                            }
                            q.close();
                        })
                    };
                    let popped = drain(&*q);
                    producer.join().unwrap();
                    black_box(popped)
                },
                BatchSize::PerIteration,
            )
        });
    }
    g.finish();
}

criterion_group!(benches, w_fifo_a, w_fifo_b, w_fifo_c);
criterion_main!(benches);
