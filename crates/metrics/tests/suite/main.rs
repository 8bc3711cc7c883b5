//! The metrics' integration tests, in one test binary: a module per area.

mod common;

mod encoding;
mod endpoints;
mod metrics;
mod read_your_writes;
mod removal;
mod shards;
