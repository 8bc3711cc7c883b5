//! The work queue's integration tests, in one test binary: a module per area.

mod common;

mod priority;
mod queue;
mod rate_limiters;
