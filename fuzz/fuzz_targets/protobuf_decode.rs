//! Feeds the bytes to every reader of `informer-protobuf`: the watch frame splitter (whole and in
//! two pieces), the watch event, the envelope read as a `Pod` and as a `serde_json::Value`, the
//! list decoder (whole and in pieces) and a bare `v1` `Pod` message. No panic; a reader fed in
//! pieces reads what it reads fed whole; a message that reads both as a `Pod` and as a `Value`
//! reads the same `Pod` through the `Value`; every envelope, list item and bare message is also
//! read by the `Pod`'s generated decoder (whole, and without managed fields), which must read
//! what the serde path reads: the same `Pod`, or the same error. The checks are those of the
//! stable corpus replay, `crates/protobuf/tests/suite/fuzz_corpus.rs`, compiled in here.
#![no_main]

#[path = "../../crates/protobuf/tests/suite/fuzz_corpus.rs"]
mod checks;

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| checks::check(data));
