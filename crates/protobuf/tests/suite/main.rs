//! The protobuf codec's integration tests, in one test binary: a module per area.

mod bad_input;
mod equivalence;
mod fuzz_corpus;
mod wrappers;
