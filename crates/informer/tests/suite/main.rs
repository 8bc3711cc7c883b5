//! The informer's integration tests, in one test binary: a module per area. `informer_shutdown`
//! counts the process's threads, so it stays a binary of its own.

#[macro_use]
mod common;

mod informer_atomic_relist;
mod informer_bad_input;
mod informer_compact;
mod informer_consistency;
mod informer_delivery;
mod informer_events;
mod informer_health;
mod informer_kube_e2e;
mod informer_no_copies;
mod informer_not_served;
mod informer_readiness;
mod informer_resync;
mod informer_shards;
mod informer_version;
