//! The factory's integration tests, in one test binary: a module per area.

#[macro_use]
mod common;

mod factory_lifecycle;
mod factory_remove;
mod factory_sharing;
