//! The queues' integration tests, in one test binary: a module per area. `allocations` counts
//! the process's allocations and `loom` runs only under `--cfg informer_loom`, so they stay
//! binaries of their own.

mod delta_fifo_rules;
mod fuzz_corpus;
mod in_order_fifo_rules;
mod queue_concurrency;
mod queue_conformance;
mod queue_model;
