//! The kube adapter's integration tests, in one test binary: a module per area.
//! `strip_allocations` counts the process's allocations and `gzip` needs the `gzip` feature, so
//! they stay binaries of their own.

mod slim_pod;

mod dynamic;
mod factory_come_and_go;
mod fuzz_corpus;
mod kube_adapter;
mod kube_factory;
mod lister_watcher_conformance;
mod projection;
mod protobuf_bad_input;
mod protobuf_cache;
mod reflector_apiserver;
mod shard_informers;
