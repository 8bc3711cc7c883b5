//! Replays the `store` fuzz target's committed corpus (`fuzz/corpus/store`) on stable, so every
//! test run checks the store against its model on the inputs the fuzzer found interesting.

use informer_store::model::{check, decode, replay_corpus};

#[test]
fn every_corpus_input_matches_the_model() {
    replay_corpus("store", 10, |bytes| check(&decode(bytes)));
}
