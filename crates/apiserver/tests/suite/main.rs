//! The simulator's integration tests, in one test binary: a module per area.

mod http;
mod kube_setup;

mod apply;
mod apply_clients;
mod compression;
mod convergence;
mod fuzz_corpus;
mod garbage_collection;
mod kube_client;
mod protobuf;
mod shard_selector;
mod status;
mod unregister;
mod wire;
