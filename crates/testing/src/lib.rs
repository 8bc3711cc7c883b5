//! Test oracles of the informers stack: conformance suites, reference models and fuzz harnesses.
//!
//! They used to ship in the library crates behind features; they live here so that the libraries
//! carry none of them (nor their dependencies, such as tokio's `test-util`). The tests of every
//! layer crate, the fuzz targets (`fuzz/`) and the benches use this crate. It is not published.
//!
//! | module | checks |
//! |---|---|
//! | [`store::conformance`] | any `Store` / `Indexer` implementation |
//! | [`store::map_cache`] | a second `Indexer` (a plain map), to run the layers above on a cache that is not `ThreadSafeStore` |
//! | [`store::model`] | `ThreadSafeStore` against a `BTreeMap` model (property test, `store` fuzz target) |
//! | [`fifo::conformance`] | any `Queue` implementation |
//! | [`fifo::model`] | `DeltaFifo` and `InOrderFifo` against their models (property test, `delta_fifo` fuzz target) |
//! | [`reflector::conformance`] | a `ListerWatcher` against a live backend |
//! | [`kube::model`] | the watch-decoding path, kube-client to store (`watch_decode` fuzz target) |
//! | [`replay_corpus`] | replays a fuzz target's committed corpus on stable |
//!
//! The API server simulator's request-parsing harness stays in `informer-apiserver` (feature
//! `fuzzing`): it checks the simulator's private parsers and router.
//!
//! Integration tests and doctests of a layer crate may use this crate (cargo links the same copy
//! of the layer crate); unit tests inside a layer crate's `src` may not (they would see a second
//! copy of its types).

/// Oracles of the store layer (`informer-store`).
pub mod store {
    pub mod conformance;
    pub mod map_cache;
    pub mod model;
}

/// Oracles of the queue layer (`informer-fifo`).
pub mod fifo {
    pub mod conformance;
    pub mod model;
}

/// Oracles of the reflector layer (`informer-reflector`).
pub mod reflector {
    pub mod conformance;
}

/// Oracles of the kube-client adapter (`informer-kube`).
pub mod kube {
    pub mod model;
}

/// Waits (in real time, without a paused clock) until `cond` holds, looking every few
/// milliseconds; panics naming `what` after 20 seconds. For tests whose condition changes on
/// threads or servers outside the test's control, where no signal exists to wait on.
pub async fn eventually(what: &str, mut cond: impl FnMut() -> bool) {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    while !cond() {
        assert!(
            std::time::Instant::now() < deadline,
            "timed out waiting for: {what}"
        );
        tokio::time::sleep(std::time::Duration::from_millis(2)).await;
    }
}

/// Runs `check` on every file of the committed fuzz corpus `fuzz/corpus/<target>` of this
/// repository, naming each file on stderr first (so a panic says which input), and returns how
/// many there were.
///
/// The stable replay tests of every fuzz target (`crates/*/tests/suite/fuzz_corpus.rs`) use it.
///
/// # Panics
///
/// If the directory cannot be read, if it holds fewer than `at_least` files (the corpus is
/// missing), or if `check` panics.
pub fn replay_corpus(target: &str, at_least: usize, mut check: impl FnMut(&[u8])) -> usize {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../fuzz/corpus")
        .join(target);
    let entries = std::fs::read_dir(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
    let mut replayed = 0;
    for entry in entries {
        let path = entry.expect("a readable corpus entry").path();
        let bytes = std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        eprintln!("replaying {}", path.display());
        check(&bytes);
        replayed += 1;
    }
    assert!(
        replayed >= at_least,
        "the corpus of {target} is missing ({replayed} files)"
    );
    replayed
}
