//! Runnable examples of the informers stack. Run one with `cargo run --release --example <name>`:
//!
//! * `indexer`: the store and its secondary indexes at work on generated pods.
