//! The API server simulator's request parsing on arbitrary input: query parameters, label and
//! field selectors (against a model matcher), continue tokens, and whole HTTP requests through the
//! router in process (`informer_apiserver::fuzzing`). No panic, every rejection a typed 400/422
//! `Status`, never a 500 for bad input.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| informer_apiserver::fuzzing::check(data));
