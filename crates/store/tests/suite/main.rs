//! The store's integration tests, in one test binary: a module per area. `memory` counts the
//! process's allocations, so it stays a binary of its own.

mod fuzz_corpus;
mod store_concurrency;
mod store_conformance;
mod store_lister;
mod store_model;
mod store_slow_index;
