//! Replays the `watch_decode` fuzz target's committed corpus (`fuzz/corpus/watch_decode`) on
//! stable: every input goes through kube-client, the adapter and a reflector into a store, and is
//! compared with the reference decoder in `informer_testing::kube::model`.

use informer_testing::kube::model::check;
use informer_testing::replay_corpus;

#[test]
fn every_corpus_input_matches_the_model() {
    replay_corpus("watch_decode", 20, check);
}
