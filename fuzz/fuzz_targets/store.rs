//! Decodes bytes into store operations (adds, updates, deletes, replaces, bookmarks and index
//! registrations, with index functions that fail on some objects), runs them on a
//! `ThreadSafeStore` and on its reference model, and panics at the first difference.
#![no_main]

use informer_testing::store::model::{check, decode};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| check(&decode(data)));
