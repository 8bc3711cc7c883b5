//! Replays the `apiserver_request` fuzz target's committed corpus (`fuzz/corpus/apiserver_request`)
//! on stable: queries, selectors, continue tokens and whole requests through the router, checked by
//! `informer_apiserver::fuzzing`.

use informer_apiserver::fuzzing::check;
use informer_testing::replay_corpus;

#[test]
fn every_corpus_input_passes_the_checks() {
    replay_corpus("apiserver_request", 41, check);
}
