//! Shared workload definitions for the informers benchmarks (see `docs/benchmarks.md`).
//!
//! Every bench builds its objects here, before timing starts, so that all of them measure the
//! same work.

pub mod workload;
