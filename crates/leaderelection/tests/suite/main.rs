//! The leader election's integration tests, in one test binary: a module per area.

mod election;
mod shards;
mod simulator;
