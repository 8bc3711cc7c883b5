//! Index functions run outside the store's lock: a slow one (here, one held on a channel) never
//! holds up readers, the queue reading the cache back (`list_keys`, `get_by_key`), or writers.

use std::panic::{AssertUnwindSafe, catch_unwind, resume_unwind};
use std::sync::mpsc::{self, Receiver, Sender};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::Duration;

use informer_store::{
    IndexValues, Indexer, KnownObjects, ReflectorStore, Store, ThreadSafeStore, index_func,
    indexers,
};
use informer_testing::store::conformance::{TestObject, key_func, obj};

/// How long a check waits for what should happen at once before it calls it stuck. Generous: it
/// bounds a failure, it is never a delay.
const BOUND: Duration = Duration::from_secs(30);

/// Runs `f` on a thread of its own and returns what it returns; panics, naming `what`, if it has
/// not returned within [`BOUND`]: that it returns is the assertion.
fn within<T: Send + 'static>(what: &str, f: impl FnOnce() -> T + Send + 'static) -> T {
    let (tx, rx) = mpsc::channel();
    thread::spawn(move || {
        let _ = tx.send(catch_unwind(AssertUnwindSafe(f)));
    });
    match rx.recv_timeout(BOUND) {
        Ok(Ok(value)) => value,
        Ok(Err(panic)) => resume_unwind(panic),
        Err(_) => panic!("{what}: still blocked after {BOUND:?}"),
    }
}

/// Holds the index function on the objects named `slow`, once each, until released.
struct Gate {
    entered: Mutex<Sender<()>>,
    released: Mutex<Receiver<()>>,
}

impl Gate {
    /// The gate, what reports that an index function is held, and what releases it.
    fn new() -> (Arc<Self>, Receiver<()>, Sender<()>) {
        let (entered_tx, entered) = mpsc::channel();
        let (release, released) = mpsc::channel();
        let gate = Arc::new(Self {
            entered: Mutex::new(entered_tx),
            released: Mutex::new(released),
        });
        (gate, entered, release)
    }

    fn pass(&self, o: &TestObject) {
        if o.name == "slow" {
            self.entered.lock().unwrap().send(()).unwrap();
            self.released
                .lock()
                .unwrap()
                .recv_timeout(BOUND)
                .expect("the held index function is released in time");
        }
    }
}

fn gated_store(gate: &Arc<Gate>) -> Arc<ThreadSafeStore<TestObject>> {
    let gate = Arc::clone(gate);
    Arc::new(ThreadSafeStore::with_indexers(
        key_func(),
        indexers([(
            "ns",
            index_func(move |o: &TestObject| {
                gate.pass(o);
                Ok(IndexValues::one(o.namespace.as_str()))
            }),
        )]),
    ))
}

#[test]
fn a_slow_index_function_in_a_write_does_not_block_reads() {
    let (gate, entered, release) = Gate::new();
    let store = gated_store(&gate);
    store.add(obj("a", "x", 1)).unwrap();
    let writer = {
        let store = Arc::clone(&store);
        thread::spawn(move || store.add(obj("a", "slow", 1)))
    };
    entered.recv_timeout(BOUND).unwrap();
    // The add is inside its index function.
    let reader = Arc::clone(&store);
    let (keys, got, missing, by_index) = within("reads while an index function runs", move || {
        (
            reader.list_keys(),
            reader.get_by_key("a/x"),
            reader.get_by_key("a/slow"),
            reader.index_keys("ns", "a").unwrap(),
        )
    });
    assert_eq!(keys, ["a/x"], "the object being indexed is not stored yet");
    assert_eq!(got.unwrap().resource_version, 1);
    assert!(missing.is_none());
    assert_eq!(by_index, ["a/x"]);
    let other = Arc::clone(&store);
    within("another write while an index function runs", move || {
        other.update(obj("a", "x", 2))
    })
    .unwrap();
    release.send(()).unwrap();
    within("the held write returns", move || writer.join().unwrap()).unwrap();
    assert_eq!(store.index_keys("ns", "a").unwrap(), ["a/slow", "a/x"]);
    assert_eq!(store.get_by_key("a/x").unwrap().resource_version, 2);
}

#[test]
fn a_slow_index_function_in_a_lookup_does_not_block_writes() {
    let (gate, entered, release) = Gate::new();
    let store = gated_store(&gate);
    store.add(obj("a", "x", 1)).unwrap();
    let lookup = {
        let store = Arc::clone(&store);
        thread::spawn(move || store.index("ns", &obj("a", "slow", 0)))
    };
    entered.recv_timeout(BOUND).unwrap();
    let writer = Arc::clone(&store);
    within("a write while a lookup's index function runs", move || {
        writer.add(obj("a", "y", 1))
    })
    .unwrap();
    release.send(()).unwrap();
    let found = within("the lookup returns", move || lookup.join().unwrap()).unwrap();
    let mut names: Vec<&str> = found.iter().map(|o| o.name.as_str()).collect();
    names.sort_unstable();
    assert_eq!(
        names,
        ["x", "y"],
        "the lookup reads the index once its values are known"
    );
}

/// An index added between a write's computing its index values and its taking the lock: the
/// write indexes its object in the new index too.
#[test]
fn an_index_added_while_a_write_computes_covers_its_object() {
    let (gate, entered, release) = Gate::new();
    let store = gated_store(&gate);
    store.add(obj("a", "x", 1)).unwrap();
    let writer = {
        let store = Arc::clone(&store);
        thread::spawn(move || store.upsert_with_key("a/slow", obj("a", "slow", 1)))
    };
    entered.recv_timeout(BOUND).unwrap();
    let adder = Arc::clone(&store);
    within("add_indexers while a write computes", move || {
        adder.add_indexers(indexers([(
            "name",
            index_func(|o: &TestObject| Ok(IndexValues::one(o.name.as_str()))),
        )]))
    })
    .unwrap();
    release.send(()).unwrap();
    assert!(
        within("the held write returns", move || writer.join().unwrap())
            .unwrap()
            .is_none()
    );
    assert_eq!(store.index_keys("name", "slow").unwrap(), ["a/slow"]);
    assert_eq!(store.index_keys("name", "x").unwrap(), ["a/x"]);
    assert_eq!(store.index_keys("ns", "a").unwrap(), ["a/slow", "a/x"]);
}

/// The index values a write computed with the functions it saw are all refused or all filed: an
/// error in an index added meanwhile refuses the write, and leaves the store unchanged.
#[test]
fn an_index_added_while_a_write_computes_can_refuse_it() {
    let (gate, entered, release) = Gate::new();
    let store = gated_store(&gate);
    let writer = {
        let store = Arc::clone(&store);
        thread::spawn(move || store.add(obj("a", "slow", 1)))
    };
    entered.recv_timeout(BOUND).unwrap();
    store
        .add_indexers(indexers([(
            "picky",
            index_func(|o: &TestObject| {
                if o.name == "slow" {
                    Err("refused".into())
                } else {
                    Ok(IndexValues::none())
                }
            }),
        )]))
        .unwrap();
    release.send(()).unwrap();
    let refused = within("the held write returns", move || writer.join().unwrap());
    assert!(
        matches!(&refused, Err(informer_store::Error::IndexFunc { index, .. }) if index == "picky"),
        "{refused:?}"
    );
    assert!(store.is_empty(), "nothing was filed");
    assert!(store.list_index_func_values("ns").is_empty());
}
