//! The reflector's integration tests, in one test binary: a module per area. The tests of what
//! it logs (`reflector_log_levels`, `reflector_streaming_logs`) stay binaries of their own:
//! `tracing` caches each callsite's interest for the whole process, so another test reaching a
//! log line first could silence it for them.

mod common;

mod lister_watcher_conformance;
mod reflector_converge;
mod reflector_fifo;
mod reflector_list;
mod reflector_not_served;
mod reflector_observer;
mod reflector_shards;
mod reflector_streaming;
mod reflector_timing;
mod reflector_watch;
