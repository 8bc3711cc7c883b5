//! The informers benchmark workloads (see `docs/benchmarks.md`), defined once and run by the
//! criterion benches, the `report` binary and the `mem` binary alike, for our stack and for
//! kube-runtime side by side.
//!
//! * [`workload`]: the objects (pod number `i`), the key function and the two indexes;
//! * [`w_idx`], [`w_fifo`], [`w_inf`], [`w_http`], [`w_ctrl`], [`w_wq`]: one module per
//!   workload, each with our side and, where kube-runtime has the same thing, its side;
//! * [`mem`]: bytes per cached object, run in a process of its own;
//! * [`anatomy`]: where the heap bytes of the realistic pod go, part by part;
//! * [`report`]: every workload once more, as one table.
//!
//! Every function builds its objects before its clock starts and returns the time of the work
//! alone, so that a figure is the work and nothing else.
//!
//! ```
//! use informer_benches::{Sizes, w_idx};
//!
//! let sizes = Sizes::tiny();
//! let data = w_idx::Data::new(sizes.idx);
//! let phases = w_idx::ours(&data, true, sizes.by_index_calls);
//! assert_eq!(phases.len(), 5);
//! ```

pub mod anatomy;
pub mod decode;
pub mod lean;
pub mod mem;
pub mod realistic;
pub mod relist;
pub mod replay;
pub mod report;
pub mod sync;
pub mod w_ctrl;
pub mod w_fifo;
pub mod w_http;
pub mod w_idx;
pub mod w_inf;
pub mod w_shard;
pub mod w_wq;
pub mod workload;

/// The sizes of every workload: [`full`](Self::full) is the definition, the others shrink it
/// for a smoke run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Sizes {
    /// W-IDX: pods added, updated and deleted.
    pub idx: usize,
    /// W-IDX: calls of each `by_index` phase.
    pub by_index_calls: usize,
    /// W-FIFO-A: distinct pods.
    pub fifo_a: usize,
    /// W-FIFO-B: keys.
    pub fifo_b_keys: usize,
    /// W-FIFO-B: rounds of `update` over every key.
    pub fifo_b_rounds: usize,
    /// W-FIFO-C: keys.
    pub fifo_c_keys: usize,
    /// W-FIFO-C: `add`/`update` calls.
    pub fifo_c_ops: usize,
    /// W-INF and W-HTTP: pods in the list.
    pub listed: usize,
    /// W-INF and W-HTTP: MODIFIED events after the list.
    pub events: usize,
    /// MEM: pods synced.
    pub mem: usize,
    /// W-CTRL: pods listed, each reconciled once from a cold start.
    pub ctrl_pods: usize,
    /// W-CTRL: MODIFIED events on those pods after the cold start.
    pub ctrl_updates: usize,
    /// W-SHARD: ConfigMaps the sharded controller's replicas split between them.
    pub shard_objects: usize,
    /// W-WQ: distinct keys added, then processed.
    pub wq_distinct: u64,
    /// W-WQ: hot keys re-added while processed.
    pub wq_hot_keys: u64,
    /// W-WQ: rounds of adds over every hot key.
    pub wq_hot_rounds: u64,
}

impl Sizes {
    /// The sizes of the workload definitions.
    pub const fn full() -> Self {
        Self {
            idx: 100_000,
            by_index_calls: 10_000,
            fifo_a: 100_000,
            fifo_b_keys: 1_000,
            fifo_b_rounds: 200,
            fifo_c_keys: 10_000,
            fifo_c_ops: 200_000,
            listed: 50_000,
            events: 100_000,
            mem: 100_000,
            ctrl_pods: 10_000,
            ctrl_updates: 100_000,
            shard_objects: 100_000,
            wq_distinct: 100_000,
            wq_hot_keys: 1_000,
            wq_hot_rounds: 100,
        }
    }

    /// A tenth of [`full`](Self::full): a smoke run of every code path in seconds.
    pub const fn quick() -> Self {
        Self {
            idx: 10_000,
            by_index_calls: 1_000,
            fifo_a: 10_000,
            fifo_b_keys: 1_000,
            fifo_b_rounds: 20,
            fifo_c_keys: 1_000,
            fifo_c_ops: 20_000,
            listed: 5_000,
            events: 10_000,
            mem: 10_000,
            ctrl_pods: 1_000,
            ctrl_updates: 10_000,
            shard_objects: 10_000,
            wq_distinct: 10_000,
            wq_hot_keys: 1_000,
            wq_hot_rounds: 10,
        }
    }

    /// A few hundred objects: for tests in debug builds.
    pub const fn tiny() -> Self {
        Self {
            idx: 300,
            by_index_calls: 50,
            fifo_a: 300,
            fifo_b_keys: 30,
            fifo_b_rounds: 5,
            fifo_c_keys: 50,
            fifo_c_ops: 400,
            listed: 200,
            events: 400,
            mem: 300,
            ctrl_pods: 100,
            ctrl_updates: 400,
            shard_objects: 1_000,
            wq_distinct: 300,
            wq_hot_keys: 30,
            wq_hot_rounds: 5,
        }
    }
}
