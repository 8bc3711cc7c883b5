//! Serves the bytes as the body of a watch response to kube-client, through `KubeListerWatcher`
//! and a `Reflector` into a store, and compares what was applied with an independent decoder
//! (`informer_testing::kube::model`): no panic, the valid prefix applied exactly, the first bad line a typed
//! error, nothing after it.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| informer_testing::kube::model::check(data));
