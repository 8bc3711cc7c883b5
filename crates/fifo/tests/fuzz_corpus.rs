//! Replays the fuzz target's committed corpus (`fuzz/corpus/delta_fifo`) on stable, so every test
//! run checks the queues against their models on the inputs the fuzzer found interesting.

use std::fs;
use std::path::Path;

use informer_fifo::model::{decode, run};

#[test]
fn every_corpus_input_matches_the_model() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fuzz/corpus/delta_fifo");
    let mut replayed = 0;
    for entry in fs::read_dir(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display())) {
        let path = entry.expect("a readable corpus entry").path();
        let bytes = fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        let (config, ops) = decode(&bytes);
        // A panic names the step; the file name says which input.
        eprintln!("replaying {}", path.display());
        run(config, &ops);
        replayed += 1;
    }
    assert!(
        replayed >= 7,
        "the seed corpus is missing ({replayed} files)"
    );
}
