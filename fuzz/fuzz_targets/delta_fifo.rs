//! Decodes bytes into a queue configuration and a sequence of operations, runs them on a real
//! `DeltaFIFO` and on the reference model, and panics at the first difference.
#![no_main]

use informer_fifo::model::{decode, run};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let (config, ops) = decode(data);
    run(config, &ops);
});
