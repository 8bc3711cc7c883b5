//! W-FIFO-A, W-FIFO-B, W-FIFO-C: the queue layer, for the DeltaFifo and the in-order FIFO
//! (`informer_benches::w_fifo`; kube-runtime has no queue).
//!
//! Each benchmark times a whole workload; criterion's throughput figure is per operation (per
//! object for A, per `update` for B, per `add`/`update` for C).

use std::hint::black_box;
use std::sync::Arc;

use criterion::{BatchSize, Criterion, Throughput, criterion_group, criterion_main};
use informer_benches::workload::{key_func, pods};
use informer_benches::{Sizes, w_fifo};

/// W-FIFO-A: add 100,000 distinct pods, then pop them all with a process function that does
/// nothing.
fn w_fifo_a(c: &mut Criterion) {
    let n = Sizes::full().fifo_a;
    let objects = pods(n);
    let mut g = c.benchmark_group("w_fifo_a");
    g.sample_size(10);
    g.throughput(Throughput::Elements(n as u64));
    for (name, make) in w_fifo::queues() {
        g.bench_function(name, |b| {
            b.iter_batched(make, |q| w_fifo::a(&*q, &objects), BatchSize::PerIteration)
        });
    }
    g.finish();
}

/// W-FIFO-B: 1,000 keys, 200 rounds of `update` on every key (each a new object with a new
/// resource version), then pop all.
fn w_fifo_b(c: &mut Criterion) {
    let sizes = Sizes::full();
    let updates = w_fifo::b_objects(sizes.fifo_b_keys, sizes.fifo_b_rounds);
    let mut g = c.benchmark_group("w_fifo_b");
    g.sample_size(10);
    g.throughput(Throughput::Elements(updates.len() as u64));
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
    for (name, make) in w_fifo::queues() {
        g.bench_function(name, |b| {
            b.iter_batched(make, |q| w_fifo::b(&*q, &updates), BatchSize::PerIteration)
        });
    }
    g.finish();
}

/// W-FIFO-C: one producer doing 200,000 add/update over 10,000 keys while one consumer pops,
/// until the queue is drained after the producer finishes.
fn w_fifo_c(c: &mut Criterion) {
    let sizes = Sizes::full();
    let objects = w_fifo::c_objects(sizes.fifo_c_keys, sizes.fifo_c_ops);
    let mut g = c.benchmark_group("w_fifo_c");
    g.sample_size(10);
    g.throughput(Throughput::Elements(sizes.fifo_c_ops as u64));
    for (name, make) in w_fifo::queues() {
        g.bench_function(name, |b| {
            b.iter_batched(
                make,
                |q| w_fifo::c(&q, &objects, sizes.fifo_c_keys),
                BatchSize::PerIteration,
            )
        });
    }
    g.finish();
}

criterion_group!(benches, w_fifo_a, w_fifo_b, w_fifo_c);
criterion_main!(benches);
