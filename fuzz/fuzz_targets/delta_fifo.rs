//! Decodes bytes into a queue configuration and a sequence of operations, runs them on a real
//! queue (the `DeltaFifo`, or the `InOrderFifo` when bit 3 of the first byte is set) and on its
//! reference model, and panics at the first difference.
#![no_main]

use informer_testing::fifo::model::{decode, run};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let (config, ops) = decode(data);
    run(config, &ops);
});
