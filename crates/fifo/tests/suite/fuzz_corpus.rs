//! Replays the fuzz target's committed corpus (`fuzz/corpus/delta_fifo`) on stable, so every test
//! run checks the queues against their models on the inputs the fuzzer found interesting.

use informer_testing::fifo::model::{decode, run};
use informer_testing::replay_corpus;

#[test]
fn every_corpus_input_matches_the_model() {
    replay_corpus("delta_fifo", 7, |bytes| {
        let (config, ops) = decode(bytes);
        // A panic names the step; the file name (printed first) says which input.
        run(config, &ops);
    });
}
