//! A reference model of [`ThreadSafeStore`] and a harness that checks the real store against it
//! .
//!
//! The model is deliberately plain: a `BTreeMap` from key to object, the list of registered index
//! names, and the last synced resource version; indexes are recomputed from scratch whenever they
//! are compared. [`check`] applies the same operations to the model and to a real store and panics
//! at the first difference: a write's result (success, or which [`Error`] variant), the object
//! `delete_by_key` returns, the keys, the objects (by identity), the resource version, the index
//! names, and every index's values and keys.
//!
//! The property test, the fuzz target (`fuzz/`) and the replay of the fuzz corpus all use this one
//! module; [`decode`] turns arbitrary bytes into operations.
//!
//! ```
//! use informer_testing::store::model::{check, decode};
//! check(&decode(&[5, 2, 0, 0x11, 4, 1, 0, 3, 2, 0x40, 0x22, 7]));
//! ```

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use informer_store::{
    Error, IndexFunc, Indexer, KnownObjects, ReflectorStore, Store, ThreadSafeStore, indexers,
};

use super::conformance::{
    TestObject, failing_index, key_func, label_index, labelled, namespace_index,
};

/// The index functions a run may register, by name: one value per object (`namespace`), one per
/// label (`label`), and one that fails on objects labelled `poison=true` (`fails`).
pub const INDEX_NAMES: [&str; 3] = ["namespace", "label", "fails"];

/// The index function registered under `name`, one of [`INDEX_NAMES`].
///
/// # Panics
///
/// On any other name.
pub fn index_by_name(name: &str) -> IndexFunc<TestObject> {
    match name {
        "namespace" => namespace_index(),
        "label" => label_index(),
        "fails" => failing_index(),
        other => panic!("no index function named {other:?}"),
    }
}

/// One operation on the store.
#[derive(Debug, Clone)]
pub enum Op {
    /// `add`.
    Add(Arc<TestObject>),
    /// `update`.
    Update(Arc<TestObject>),
    /// `delete`.
    Delete(Arc<TestObject>),
    /// `delete_by_key`.
    DeleteByKey(String),
    /// `replace` with this list and resource version.
    Replace(Vec<Arc<TestObject>>, u64),
    /// `bookmark` at this resource version.
    Bookmark(u64),
    /// `add_indexers` with these functions (names from [`INDEX_NAMES`]), all in one call.
    AddIndexers(Vec<&'static str>),
}

/// How a write is expected to fail, as far as the comparison cares.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Failure {
    /// [`Error::Key`].
    Key,
    /// [`Error::IndexFunc`].
    IndexFunc,
    /// [`Error::IndexerConflict`].
    IndexerConflict,
}

impl Failure {
    /// The failure `error` is, or `None` for an error the store should never return here.
    pub fn of(error: &Error) -> Option<Self> {
        match error {
            Error::Key(_) => Some(Self::Key),
            Error::IndexFunc { .. } => Some(Self::IndexFunc),
            Error::IndexerConflict(_) => Some(Self::IndexerConflict),
            _ => None,
        }
    }
}

/// The reference model: objects by key, registered index names, last synced resource version.
#[derive(Debug, Default)]
pub struct Model {
    items: BTreeMap<String, Arc<TestObject>>,
    indexers: Vec<&'static str>,
    rv: Option<String>,
}

fn key(o: &TestObject) -> Option<String> {
    (key_func())(o).ok()
}

impl Model {
    /// Whether every index function in `names` accepts `o`.
    fn indexable(names: &[&'static str], o: &TestObject) -> bool {
        names.iter().all(|n| index_by_name(n)(o).is_ok())
    }

    /// Applies `op`; returns what `delete_by_key` removes (`Ok(None)` for every other success),
    /// or how the write should fail (leaving the model unchanged).
    pub fn apply(&mut self, op: &Op) -> Result<Option<Arc<TestObject>>, Failure> {
        match op {
            Op::Add(o) | Op::Update(o) => {
                let k = key(o).ok_or(Failure::Key)?;
                if !Self::indexable(&self.indexers, o) {
                    return Err(Failure::IndexFunc);
                }
                self.items.insert(k, Arc::clone(o));
            }
            Op::Delete(o) => {
                self.items.remove(&key(o).ok_or(Failure::Key)?);
            }
            Op::DeleteByKey(k) => return Ok(self.items.remove(k)),
            Op::Replace(list, rv) => {
                let mut items = BTreeMap::new();
                for o in list {
                    items.insert(key(o).ok_or(Failure::Key)?, Arc::clone(o));
                }
                // Only the surviving object of a duplicated key is indexed (the last one wins).
                if !items.values().all(|o| Self::indexable(&self.indexers, o)) {
                    return Err(Failure::IndexFunc);
                }
                self.items = items;
                self.rv = Some(rv.to_string());
            }
            Op::Bookmark(rv) => self.rv = Some(rv.to_string()),
            Op::AddIndexers(names) => {
                if names.iter().any(|n| self.indexers.contains(n)) {
                    return Err(Failure::IndexerConflict);
                }
                if !self.items.values().all(|o| Self::indexable(names, o)) {
                    return Err(Failure::IndexFunc);
                }
                self.indexers.extend(names.iter().copied());
            }
        }
        Ok(None)
    }

    /// Index `name` recomputed from scratch: value → sorted keys.
    pub fn index(&self, name: &str) -> BTreeMap<String, Vec<String>> {
        let f = index_by_name(name);
        let mut out: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
        for (k, o) in &self.items {
            for v in f(o).expect("stored objects are indexable") {
                out.entry(v.into_owned()).or_default().insert(k.clone());
            }
        }
        out.into_iter()
            .map(|(v, ks)| (v, ks.into_iter().collect()))
            .collect()
    }

    /// Panics unless `store` holds exactly what the model holds (see the module docs).
    pub fn assert_matches(&self, store: &ThreadSafeStore<TestObject>) {
        let keys: BTreeSet<String> = store.list_keys().into_iter().collect();
        assert_eq!(
            keys,
            self.items.keys().cloned().collect::<BTreeSet<_>>(),
            "keys"
        );
        for (k, o) in &self.items {
            let stored = store.get_by_key(k);
            assert!(stored.is_some_and(|s| Arc::ptr_eq(&s, o)), "object at {k}");
        }
        assert_eq!(store.len(), self.items.len(), "len");
        assert_eq!(store.list().len(), self.items.len(), "list");
        assert_eq!(
            store.last_sync_resource_version(),
            self.rv,
            "resource version"
        );
        let names: BTreeSet<String> = store.get_indexers().into_keys().collect();
        let expected: BTreeSet<String> = self.indexers.iter().map(|n| (*n).to_owned()).collect();
        assert_eq!(names, expected, "index names");
        for name in &self.indexers {
            let index = self.index(name);
            let values: BTreeSet<String> = store.list_index_func_values(name).into_iter().collect();
            assert_eq!(
                values,
                index.keys().cloned().collect::<BTreeSet<_>>(),
                "values of index {name}"
            );
            for (value, keys) in &index {
                let got = store.index_keys(name, value).expect("a registered index");
                assert_eq!(&got, keys, "keys of {name}={value}");
                let objects = store.by_index(name, value).expect("a registered index");
                assert_eq!(objects.len(), keys.len(), "objects of {name}={value}");
            }
        }
    }
}

/// Applies `op` to the real store, mapping the result to what [`Model::apply`] returns.
///
/// # Panics
///
/// On an error the model has no [`Failure`] for.
pub fn run(
    store: &ThreadSafeStore<TestObject>,
    op: &Op,
) -> Result<Option<Arc<TestObject>>, Failure> {
    let result = match op {
        Op::Add(o) => store.add(Arc::clone(o)).map(|()| None),
        Op::Update(o) => store.update(Arc::clone(o)).map(|()| None),
        Op::Delete(o) => store.delete(Arc::clone(o)).map(|()| None),
        Op::DeleteByKey(k) => store.delete_by_key(k),
        Op::Replace(list, rv) => store.replace(list.clone(), rv.to_string()).map(|()| None),
        Op::Bookmark(rv) => store.bookmark(&rv.to_string()).map(|()| None),
        Op::AddIndexers(names) => store
            .add_indexers(indexers(names.iter().map(|n| (*n, index_by_name(n)))))
            .map(|()| None),
    };
    result.map_err(|e| Failure::of(&e).unwrap_or_else(|| panic!("{op:?}: unexpected error {e}")))
}

/// Runs `ops` on a fresh store and a fresh model, comparing after every step.
///
/// # Panics
///
/// At the first difference, naming the step and the operation.
pub fn check(ops: &[Op]) {
    let store = ThreadSafeStore::new(key_func());
    let mut model = Model::default();
    for (step, op) in ops.iter().enumerate() {
        let expected = model.apply(op);
        let got = run(&store, op);
        match (&expected, &got) {
            (Ok(Some(a)), Ok(Some(b))) => {
                assert!(
                    Arc::ptr_eq(a, b),
                    "step {step}: {op:?} removed another object"
                );
            }
            _ => assert_eq!(
                got.as_ref().map(Option::is_some),
                expected.as_ref().map(Option::is_some),
                "step {step}: {op:?}"
            ),
        }
        model.assert_matches(&store);
    }
}

const NAMESPACES: [&str; 3] = ["a", "b", ""];
const NAMES: [&str; 5] = ["x", "y", "z", "w", ""];
const LABELS: [(&str, &str); 5] = [
    ("app", "web"),
    ("app", "db"),
    ("tier", "fe"),
    ("tier", "be"),
    ("poison", "true"),
];
const KEYS: [&str; 4] = ["a/x", "b/y", "z", "nope"];

/// Decodes arbitrary bytes into operations; every byte string is valid.
///
/// Each operation starts with a code byte (`code % 8`): 0–2 add, 3 update and 4 delete one
/// object; 5 deletes a key; 6 replaces with a list (`len % 6` objects follow, then a resource
/// version byte); 7 is `add_indexers` (bits of the next byte pick the functions) or, with the
/// high bit of the code set, a bookmark. An object is two bytes: the low nibble of the first
/// picks the namespace and name, its high nibble and the second byte the labels and resource
/// version. Truncated input ends the run.
pub fn decode(data: &[u8]) -> Vec<Op> {
    let mut bytes = data.iter().copied();
    let mut ops = Vec::new();
    let object = |bytes: &mut dyn Iterator<Item = u8>| -> Option<Arc<TestObject>> {
        let (a, b) = (bytes.next()?, bytes.next()?);
        let namespace = NAMESPACES[usize::from(a & 0x0f) % NAMESPACES.len()];
        let name = NAMES[usize::from(a & 0x0f) / NAMESPACES.len() % NAMES.len()];
        let labels: Vec<(&str, &str)> = (0..2)
            .map(|i| (a >> 4 >> (i * 2)) & 0b11)
            .zip([b & 1 == 1, b & 2 == 2])
            .filter(|&(_, on)| on)
            .map(|(pick, _)| LABELS[usize::from(pick) + usize::from(b >> 7)])
            .collect();
        Some(labelled(namespace, name, u64::from(b >> 2), &labels))
    };
    while let Some(code) = bytes.next() {
        let op = match code % 8 {
            0..=2 => object(&mut bytes).map(Op::Add),
            3 => object(&mut bytes).map(Op::Update),
            4 => object(&mut bytes).map(Op::Delete),
            5 => bytes
                .next()
                .map(|b| Op::DeleteByKey(KEYS[usize::from(b) % KEYS.len()].to_owned())),
            6 => bytes.next().and_then(|len| {
                let list = (0..len % 6)
                    .map(|_| object(&mut bytes))
                    .collect::<Option<Vec<_>>>()?;
                Some(Op::Replace(list, u64::from(bytes.next()?)))
            }),
            _ if code & 0x80 != 0 => bytes.next().map(|b| Op::Bookmark(u64::from(b))),
            _ => bytes.next().map(|b| {
                Op::AddIndexers(
                    INDEX_NAMES
                        .iter()
                        .enumerate()
                        .filter(|&(i, _)| b & (1 << i) != 0)
                        .map(|(_, n)| *n)
                        .collect(),
                )
            }),
        };
        match op {
            Some(op) => ops.push(op),
            None => break,
        }
    }
    ops
}
