//! W-FIFO-A, W-FIFO-B, W-FIFO-C: the queue layer, for the DeltaFifo and the in-order FIFO.
//! kube-runtime has no queue between its watcher and its store, so it has no side here.

use std::hint::black_box;
use std::sync::Arc;
use std::thread;

use informer_fifo::{DeltaFifo, InOrderFifo, InOrderFifoOptions, Queue};
use k8s_openapi::api::core::v1::Pod;

use crate::workload::{key_func, pod_at};

/// Makes an empty queue.
pub type MakeQueue = fn() -> Arc<dyn Queue<Pod>>;

/// Every queue, by name, built with `new(key_func())` (no known objects, no transform): the
/// DeltaFifo, and the in-order FIFO in both modes (atomic: the informer's default queue; the
/// workloads write no relist or resync, so the two modes differ in nothing they measure but
/// confirm it).
pub fn queues() -> [(&'static str, MakeQueue); 3] {
    [
        ("delta_fifo", || Arc::new(DeltaFifo::new(key_func()))),
        ("in_order_fifo", || Arc::new(InOrderFifo::new(key_func()))),
        ("in_order_fifo_atomic", || {
            let options = InOrderFifoOptions::default().atomic(true);
            Arc::new(InOrderFifo::with_options(key_func(), options))
        }),
    ]
}

/// Pops until the queue is closed and drained, with a process function that only counts;
/// returns the number of deltas seen.
pub fn drain(q: &dyn Queue<Pod>) -> usize {
    let mut n = 0;
    while q.pop(&mut |deltas, _| n += deltas.len()).is_ok() {}
    n
}

/// W-FIFO-A: `add` every object, then pop them all; returns the deltas popped.
pub fn a(q: &dyn Queue<Pod>, objects: &[Arc<Pod>]) -> usize {
    for p in objects {
        q.add(Arc::clone(p)).expect("add");
    }
    q.close();
    black_box(drain(q))
}

/// W-FIFO-B's objects: `rounds` rounds over `keys` keys, each a new pod at a new resource
/// version.
pub fn b_objects(keys: usize, rounds: usize) -> Vec<Arc<Pod>> {
    (0..rounds)
        .flat_map(|r| {
            (0..keys).map(move |i| Arc::new(pod_at(i, (r * keys + i + 1) as u64, i % 1000)))
        })
        .collect()
}

/// W-FIFO-B: `update` every object, then pop them all; returns the deltas popped.
pub fn b(q: &dyn Queue<Pod>, updates: &[Arc<Pod>]) -> usize {
    for p in updates {
        q.update(Arc::clone(p)).expect("update");
    }
    q.close();
    black_box(drain(q))
}

/// W-FIFO-C's objects: `ops` pods over `keys` keys, each at a new resource version.
pub fn c_objects(keys: usize, ops: usize) -> Arc<Vec<Arc<Pod>>> {
    Arc::new(
        (0..ops)
            .map(|j| Arc::new(pod_at(j % keys, j as u64 + 1, j % 1000)))
            .collect(),
    )
}

/// W-FIFO-C: one producer thread (`add` for the first `keys` objects, `update` after) while this
/// thread pops, until the queue is drained after the producer closes it; returns the deltas
/// popped.
pub fn c(q: &Arc<dyn Queue<Pod>>, objects: &Arc<Vec<Arc<Pod>>>, keys: usize) -> usize {
    let producer = {
        let q = Arc::clone(q);
        let objects = Arc::clone(objects);
        thread::spawn(move || {
            for (j, p) in objects.iter().enumerate() {
                if j < keys {
                    q.add(Arc::clone(p)).expect("add");
                } else {
                    q.update(Arc::clone(p)).expect("update");
                }
            }
            q.close();
        })
    };
    let popped = drain(&**q);
    producer.join().expect("producer");
    black_box(popped)
}
