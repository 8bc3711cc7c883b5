//! The reflector's integration tests, in one test binary: a module per area.

mod common;

mod lister_watcher_conformance;
mod reflector_converge;
mod reflector_fifo;
mod reflector_list;
mod reflector_log_levels;
mod reflector_not_served;
mod reflector_observer;
mod reflector_shards;
mod reflector_streaming;
mod reflector_streaming_logs;
mod reflector_timing;
mod reflector_watch;
