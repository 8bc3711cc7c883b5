//! Replays the `store` fuzz target's committed corpus (`fuzz/corpus/store`) on stable, so every
//! test run checks the store against its model on the inputs the fuzzer found interesting.

use informer_testing::replay_corpus;
use informer_testing::store::model::{check, decode};

#[test]
fn every_corpus_input_matches_the_model() {
    replay_corpus("store", 10, |bytes| check(&decode(bytes)));
}
