//! [`ThreadSafeStore`]: the in-memory cache with secondary indexes. Its objects are kept in
//! [`items`], its indexes with their functions in [`indexes`].

mod indexes;
mod items;

use std::borrow::Cow;
use std::fmt;
use std::sync::Arc;

use smallvec::SmallVec;

use self::indexes::{Index, IndexFuncs, call_index_func, funcs_of};
use self::items::Items;
use crate::error::{Error, Result};
use crate::index::{IndexFunc, IndexValues, Indexers};
use crate::key::{KeyFunc, call_key_func};
use crate::store::{Indexer, KnownObjects, ReflectorStore, Store};
use crate::sync::RwLock;
use crate::value_index::{SlotId, ValueIndex};

/// The thread-safe cache: key → `Arc<K>`, plus named secondary indexes kept exact on every write.
///
/// * `add` and `update` are the same upsert; `delete` of a missing key is a no-op.
/// * An update touches only the index entries whose values changed, and an index value left
///   with no keys is removed. Each index records the values every object was filed under, so an
///   update compares the new object's values with the record and a delete removes the recorded
///   entries: the index functions never run on the stored (old) object.
/// * `replace` builds the new content and its indexes aside, then swaps them in under one write
///   lock: readers see either the old content or the new, never a mix.
/// * A key function or index function that fails refuses the write with a typed [`Error`] and
///   leaves the store as it was (client-go panics on an index function error). An index
///   function that would now fail on an object that is *already* stored (a non-deterministic
///   function) never blocks its update or delete, since its old entries come from the record.
///
/// Layout: objects live in a slot array (key and `Arc<K>` per slot, freed slots reused); a hash
/// table maps keys to slots and index sets hold 4-byte slot numbers (a sorted vector, or a hash
/// set past a few thousand members). A key is stored once; an index lookup reads objects straight
/// out of the slot array.
///
/// No user function runs under the store's lock, so a slow key or index function never holds
/// up readers (or the queue reading the cache back) or other writers: a write computes the key
/// and every index value first, then takes the write lock only to file them; `replace` builds
/// its whole new content and indexes aside; [`Indexer::index`] computes the object's values
/// before it takes the read lock. The exceptions are [`Indexer::add_indexers`], which indexes
/// the stored objects under the write lock, and a write that an `add_indexers` overtook between
/// computing and locking: it computes the new indexes' values under the lock. Reads take a
/// shared lock and release it before returning.
///
/// ```
/// use std::sync::Arc;
/// use informer_store::{index_func, indexers, key_func, Indexer, IndexValues, Store, ThreadSafeStore,
///     ReflectorStore};
///
/// // (name, colour) pairs keyed by name, indexed by colour.
/// let store = ThreadSafeStore::with_indexers(
///     key_func(|o: &(String, String)| Ok(o.0.clone())),
///     indexers([("colour", index_func(|o: &(String, String)| Ok(IndexValues::one(o.1.as_str()))))]),
/// );
/// store.add(Arc::new(("apple".into(), "red".into()))).unwrap();
/// store.add(Arc::new(("cherry".into(), "red".into()))).unwrap();
/// store.add(Arc::new(("lime".into(), "green".into()))).unwrap();
/// assert_eq!(store.index_keys("colour", "red").unwrap(), ["apple", "cherry"]);
/// assert_eq!(store.len(), 3);
/// ```
pub struct ThreadSafeStore<K> {
    key_func: KeyFunc<K>,
    inner: RwLock<Inner<K>>,
}

struct Inner<K> {
    items: Items<K>,
    indexes: Vec<Index<K>>,
    /// The name and function of every index, in `indexes` order: what a write snapshots (one
    /// reference count) to compute index values outside the lock. Replaced, never changed in
    /// place, whenever an index is added; indexes are only ever appended.
    funcs: IndexFuncs<K>,
    resource_version: Option<String>,
}

impl<K> fmt::Debug for ThreadSafeStore<K> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let inner = self.inner.read();
        f.debug_struct("ThreadSafeStore")
            .field("len", &inner.items.len())
            .field(
                "indexes",
                &inner.indexes.iter().map(|i| &i.name).collect::<Vec<_>>(),
            )
            .field("resource_version", &inner.resource_version)
            .finish()
    }
}

impl<K: Send + Sync + 'static> ThreadSafeStore<K> {
    /// An empty store with no index.
    pub fn new(key_func: KeyFunc<K>) -> Self {
        Self::with_indexers(key_func, Indexers::new())
    }

    /// An empty store with the given indexes.
    pub fn with_indexers(key_func: KeyFunc<K>, indexers: Indexers<K>) -> Self {
        let indexes: Vec<Index<K>> = indexers
            .into_iter()
            .map(|(name, func)| Index {
                name,
                func,
                values: ValueIndex::default(),
            })
            .collect();
        Self {
            key_func,
            inner: RwLock::new(Inner {
                items: Items::with_capacity(0),
                funcs: funcs_of(&indexes),
                indexes,
                resource_version: None,
            }),
        }
    }

    /// The key function this store files objects with.
    pub fn key_func(&self) -> &KeyFunc<K> {
        &self.key_func
    }

    /// The key of `obj`, as this store computes it.
    pub fn key_of(&self, obj: &K) -> Result<String> {
        Ok(call_key_func(&self.key_func, obj)?)
    }

    fn put(&self, obj: Arc<K>) -> Result<Option<Arc<K>>> {
        let key = call_key_func(&self.key_func, &obj)?;
        self.upsert_keyed(Cow::Owned(key), obj)
    }

    /// Stores `obj` under `key`; returns the object it replaced.
    ///
    /// Every index value is computed first, outside the lock, with a snapshot of the index
    /// functions (a failure leaves the store untouched); the write lock is taken only to file
    /// them. An index added in between (its functions are appended) is computed under the lock.
    fn upsert_keyed(&self, key: Cow<'_, str>, obj: Arc<K>) -> Result<Option<Arc<K>>> {
        let funcs = Arc::clone(&self.inner.read().funcs);
        let mut values: SmallVec<[IndexValues<'_>; 4]> = SmallVec::with_capacity(funcs.len());
        for (name, func) in funcs.iter() {
            values.push(call_index_func(name, func, &key, &*obj)?);
        }
        let mut inner = self.inner.write();
        if !Arc::ptr_eq(&inner.funcs, &funcs) {
            let appended = inner.funcs.len() >= funcs.len()
                && inner
                    .funcs
                    .iter()
                    .zip(funcs.iter())
                    .all(|(now, then)| now.0 == then.0 && Arc::ptr_eq(&now.1, &then.1));
            if !appended {
                values.clear();
            }
            for (name, func) in &inner.funcs[values.len()..] {
                values.push(call_index_func(name, func, &key, &*obj)?);
            }
        }
        let (hash, existing) = inner.file(&key, values);
        Ok(inner.store(hash, existing, key, obj))
    }
}

impl<K> Inner<K> {
    fn index(&self, name: &str) -> Result<&Index<K>> {
        self.indexes
            .iter()
            .find(|i| i.name == name)
            .ok_or_else(|| Error::UnknownIndex(name.to_owned()))
    }

    /// The first half of an upsert: files the slot `key` has (or will have) under `values`
    /// (one per index, in order: what each index function yields for the new object). Returns
    /// `key`'s hash and its slot, if it is stored, for [`store`](Self::store).
    ///
    /// The old values are not computed: each index recorded them when the slot was filed.
    fn file(&mut self, key: &str, values: SmallVec<[IndexValues<'_>; 4]>) -> (u64, Option<SlotId>) {
        debug_assert_eq!(values.len(), self.indexes.len());
        let Inner { items, indexes, .. } = self;
        let hash = items.hash(key);
        let existing = items.find_hashed(hash, key);
        if !indexes.is_empty() {
            // The slot an object will occupy is known before it is stored.
            let id = match existing {
                Some(id) => id,
                None => items.next_id(),
            };
            for (index, values) in indexes.iter_mut().zip(values) {
                index.values.set(id, values);
            }
        }
        (hash, existing)
    }

    /// The second half of an upsert (right after [`file`](Self::file)): stores `obj` under `key`;
    /// returns the object it replaced.
    fn store(
        &mut self,
        hash: u64,
        existing: Option<SlotId>,
        key: Cow<'_, str>,
        obj: Arc<K>,
    ) -> Option<Arc<K>> {
        let items = &mut self.items;
        match existing
            .and_then(|id| items.slots.get_mut(id as usize))
            .and_then(Option::as_mut)
        {
            Some(slot) => Some(std::mem::replace(&mut slot.obj, obj)),
            None => {
                items.insert_new(hash, key.into_owned().into_boxed_str(), obj);
                None
            }
        }
    }

    fn delete(&mut self, key: &str) -> Option<Arc<K>> {
        let (id, old) = self.items.remove(key)?;
        for index in &mut self.indexes {
            index.values.clear(id);
        }
        Some(old)
    }
}

impl<K: Send + Sync + 'static> ReflectorStore<K> for ThreadSafeStore<K> {
    type Error = Error;

    fn add(&self, obj: Arc<K>) -> Result<()> {
        self.put(obj).map(drop)
    }

    fn update(&self, obj: Arc<K>) -> Result<()> {
        self.put(obj).map(drop)
    }

    fn delete(&self, obj: Arc<K>) -> Result<()> {
        let key = call_key_func(&self.key_func, &obj)?;
        self.inner.write().delete(&key);
        Ok(())
    }

    fn replace(&self, list: Vec<Arc<K>>, resource_version: String) -> Result<()> {
        let mut items = Items::with_capacity(list.len());
        for obj in list {
            let key = call_key_func(&self.key_func, &obj)?;
            let hash = items.hash(&key);
            match items
                .find_hashed(hash, &key)
                .and_then(|id| items.slots.get_mut(id as usize))
            {
                Some(Some(slot)) => slot.obj = obj, // a duplicate key: the last one wins
                _ => {
                    items.insert_new(hash, key.into_boxed_str(), obj);
                }
            }
        }
        // Index outside the lock with a snapshot of the index functions; redo under the lock only
        // if the functions changed meanwhile.
        let build_all = |funcs: &[(String, IndexFunc<K>)], items: &Items<K>| {
            funcs
                .iter()
                .map(|(name, func)| Index::build(name, func, items))
                .collect::<Result<Vec<_>>>()
        };
        let funcs = Arc::clone(&self.inner.read().funcs);
        let mut indexes = build_all(&funcs, &items)?;
        let mut inner = self.inner.write();
        if !Arc::ptr_eq(&inner.funcs, &funcs) {
            indexes = build_all(&inner.funcs, &items)?;
        }
        inner.items = items;
        inner.indexes = indexes;
        inner.resource_version = Some(resource_version);
        Ok(())
    }

    fn resync(&self) -> Result<()> {
        Ok(())
    }

    fn bookmark(&self, resource_version: &str) -> Result<()> {
        self.inner.write().resource_version = Some(resource_version.to_owned());
        Ok(())
    }
}

impl<K: Send + Sync + 'static> KnownObjects<K> for ThreadSafeStore<K> {
    fn list_keys(&self) -> Vec<String> {
        let inner = self.inner.read();
        let mut keys = Vec::with_capacity(inner.items.len());
        keys.extend(inner.items.iter().map(|(_, s)| String::from(&*s.key)));
        keys
    }

    fn get_by_key(&self, key: &str) -> Option<Arc<K>> {
        self.inner.read().items.get(key).cloned()
    }
}

impl<K: Send + Sync + 'static> Store<K> for ThreadSafeStore<K> {
    fn list(&self) -> Vec<Arc<K>> {
        let inner = self.inner.read();
        let mut out = Vec::with_capacity(inner.items.len());
        out.extend(inner.items.iter().map(|(_, s)| Arc::clone(&s.obj)));
        out
    }

    fn get(&self, obj: &K) -> Result<Option<Arc<K>>> {
        let key = call_key_func(&self.key_func, obj)?;
        Ok(self.get_by_key(&key))
    }

    fn key_of(&self, obj: &K) -> Result<String> {
        ThreadSafeStore::key_of(self, obj)
    }

    fn upsert(&self, obj: Arc<K>) -> Result<Option<Arc<K>>> {
        self.put(obj)
    }

    fn upsert_with_key(&self, key: &str, obj: Arc<K>) -> Result<Option<Arc<K>>> {
        self.upsert_keyed(Cow::Borrowed(key), obj)
    }

    fn delete_by_key(&self, key: &str) -> Result<Option<Arc<K>>> {
        Ok(self.inner.write().delete(key))
    }

    fn len(&self) -> usize {
        self.inner.read().items.len()
    }

    fn last_sync_resource_version(&self) -> Option<String> {
        self.inner.read().resource_version.clone()
    }
}

impl<K: Send + Sync + 'static> Indexer<K> for ThreadSafeStore<K> {
    fn index(&self, index_name: &str, obj: &K) -> Result<Vec<Arc<K>>> {
        // The object's values first, outside the lock. Indexes are never removed or renamed, so
        // the one found by name under the lock has the function used.
        let funcs = Arc::clone(&self.inner.read().funcs);
        let (name, func) = funcs
            .iter()
            .find(|(name, _)| name == index_name)
            .ok_or_else(|| Error::UnknownIndex(index_name.to_owned()))?;
        let values = call_index_func(name, func, "", obj)?;
        let inner = self.inner.read();
        let index = inner.index(index_name)?;
        Ok(match values.as_slice() {
            [] => Vec::new(),
            [value] => index
                .values
                .members(value)
                .map_or_else(Vec::new, |ids| inner.items.objects(ids)),
            _ => {
                let mut ids: Vec<SlotId> = values
                    .iter()
                    .flat_map(|value| index.values.members(value).into_iter().flatten())
                    .copied()
                    .collect();
                ids.sort_unstable();
                ids.dedup();
                inner.items.objects(&ids)
            }
        })
    }

    fn index_keys(&self, index_name: &str, indexed_value: &str) -> Result<Vec<String>> {
        let mut keys: Vec<String> = {
            let inner = self.inner.read();
            let index = inner.index(index_name)?;
            index
                .values
                .members(indexed_value)
                .map_or_else(Vec::new, |ids| {
                    ids.filter_map(|&id| inner.items.slot(id))
                        .map(|s| String::from(&*s.key))
                        .collect()
                })
        };
        keys.sort_unstable();
        Ok(keys)
    }

    fn list_index_func_values(&self, index_name: &str) -> Vec<String> {
        let inner = self.inner.read();
        match inner.index(index_name) {
            Ok(index) => index.values.values().map(str::to_owned).collect(),
            Err(_) => Vec::new(),
        }
    }

    fn by_index(&self, index_name: &str, indexed_value: &str) -> Result<Vec<Arc<K>>> {
        let inner = self.inner.read();
        let index = inner.index(index_name)?;
        Ok(index
            .values
            .members(indexed_value)
            .map_or_else(Vec::new, |ids| inner.items.objects(ids)))
    }

    fn add_indexers(&self, indexers: Indexers<K>) -> Result<()> {
        let mut inner = self.inner.write();
        let mut conflicts: Vec<String> = indexers
            .keys()
            .filter(|name| inner.indexes.iter().any(|i| &i.name == *name))
            .cloned()
            .collect();
        if !conflicts.is_empty() {
            conflicts.sort();
            return Err(Error::IndexerConflict(conflicts));
        }
        let added = indexers
            .iter()
            .map(|(name, func)| Index::build(name, func, &inner.items))
            .collect::<Result<Vec<_>>>()?;
        inner.indexes.extend(added);
        inner.funcs = funcs_of(&inner.indexes);
        Ok(())
    }

    fn get_indexers(&self) -> Indexers<K> {
        let inner = self.inner.read();
        inner
            .indexes
            .iter()
            .map(|i| (i.name.clone(), Arc::clone(&i.func)))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
    use std::sync::{OnceLock, Weak};

    use super::*;
    use crate::index::{index_func, indexers};
    use crate::key::{KeyError, meta_namespace_key};

    // The conformance suite's object (`informer-testing`), written out again: a unit test cannot
    // use that crate (it would see a second copy of this one).
    #[derive(Debug, Clone, PartialEq, Eq)]
    struct TestObject {
        namespace: String,
        name: String,
        resource_version: u64,
        labels: Vec<(String, String)>,
    }

    fn obj(namespace: &str, name: &str, resource_version: u64) -> Arc<TestObject> {
        labelled(namespace, name, resource_version, &[])
    }

    fn labelled(
        namespace: &str,
        name: &str,
        resource_version: u64,
        labels: &[(&str, &str)],
    ) -> Arc<TestObject> {
        Arc::new(TestObject {
            namespace: namespace.to_owned(),
            name: name.to_owned(),
            resource_version,
            labels: labels
                .iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                .collect(),
        })
    }

    fn key_func() -> KeyFunc<TestObject> {
        Arc::new(|o: &TestObject| meta_namespace_key(Some(&o.namespace), &o.name))
    }

    fn namespace_index() -> IndexFunc<TestObject> {
        index_func(|o: &TestObject| Ok(IndexValues::one(o.namespace.as_str())))
    }

    fn label_values(o: &TestObject) -> Vec<String> {
        o.labels.iter().map(|(k, v)| format!("{k}={v}")).collect()
    }

    #[test]
    fn deleted_slots_are_reused_so_churn_does_not_grow_the_store() {
        let s = ThreadSafeStore::with_indexers(
            key_func(),
            indexers([("namespace", namespace_index())]),
        );
        for round in 0..50u64 {
            for i in 0..20 {
                s.add(obj("ns", &format!("o{i}-{round}"), round)).unwrap();
            }
            for i in 0..20 {
                s.delete(obj("ns", &format!("o{i}-{round}"), round))
                    .unwrap();
            }
        }
        s.add(obj("ns", "last", 1)).unwrap();
        let inner = s.inner.read();
        assert_eq!(
            inner.items.slots.len(),
            20,
            "1,000 adds and deletes, never more than 20 slots"
        );
        assert_eq!(inner.items.len(), 1);
        drop(inner);
        assert_eq!(s.index_keys("namespace", "ns").unwrap(), ["ns/last"]);
    }

    #[test]
    fn update_moves_a_key_only_between_the_values_that_changed() {
        let s = ThreadSafeStore::with_indexers(
            key_func(),
            indexers([(
                "label",
                index_func(|o: &TestObject| Ok(label_values(o).into())),
            )]),
        );
        s.add(labelled("ns", "a", 1, &[("x", "1"), ("y", "1")]))
            .unwrap();
        s.add(labelled("ns", "b", 1, &[("x", "1")])).unwrap();
        s.update(labelled("ns", "a", 2, &[("y", "1"), ("z", "1")]))
            .unwrap();
        assert_eq!(s.index_keys("label", "x=1").unwrap(), ["ns/b"]);
        assert_eq!(s.index_keys("label", "y=1").unwrap(), ["ns/a"]);
        assert_eq!(s.index_keys("label", "z=1").unwrap(), ["ns/a"]);
        s.update(labelled("ns", "b", 2, &[])).unwrap();
        let mut values = s.list_index_func_values("label");
        values.sort();
        assert_eq!(
            values,
            ["y=1", "z=1"],
            "a value whose last key left is removed"
        );
    }

    #[test]
    fn repeated_index_values_are_one_entry() {
        let s = ThreadSafeStore::with_indexers(
            key_func(),
            indexers([(
                "twice",
                index_func(|o: &TestObject| {
                    Ok([o.name.as_str(), o.name.as_str()].into_iter().collect())
                }),
            )]),
        );
        s.add(obj("ns", "a", 1)).unwrap();
        assert_eq!(s.index_keys("twice", "a").unwrap(), ["ns/a"]);
        assert_eq!(s.by_index("twice", "a").unwrap().len(), 1);
        assert_eq!(s.index("twice", &obj("x", "a", 0)).unwrap().len(), 1);
        s.delete(obj("ns", "a", 1)).unwrap();
        assert!(s.list_index_func_values("twice").is_empty());
    }

    /// An index function that starts failing on objects it accepted before (it should never, but
    /// user code can): updates and deletes still clean the old entries up, from the record.
    #[test]
    fn an_index_function_failing_on_a_stored_object_does_not_block_update_or_delete() {
        let broken = Arc::new(AtomicBool::new(false));
        let flag = Arc::clone(&broken);
        let s = ThreadSafeStore::with_indexers(
            key_func(),
            indexers([(
                "ns",
                index_func(move |o: &TestObject| {
                    if flag.load(Ordering::SeqCst) && o.resource_version == 1 {
                        Err("no longer accepted".into())
                    } else {
                        Ok(IndexValues::one(o.namespace.as_str()))
                    }
                }),
            )]),
        );
        s.add(obj("a", "x", 1)).unwrap();
        s.add(obj("a", "y", 1)).unwrap();
        broken.store(true, Ordering::SeqCst);
        s.update(obj("a", "x", 2)).unwrap();
        assert_eq!(s.index_keys("ns", "a").unwrap(), ["a/x", "a/y"]);
        s.delete(obj("a", "y", 9)).unwrap();
        assert_eq!(
            s.index_keys("ns", "a").unwrap(),
            ["a/x"],
            "stale entry removed from the record"
        );
        assert!(s.get_by_key("a/y").is_none());
    }

    /// A panicking index or key function used to unwind through the store (and kill the thread
    /// writing to it); now it is a typed error and the store is left as it was.
    #[test]
    fn panicking_index_and_key_functions_are_errors_that_change_nothing() {
        let s = ThreadSafeStore::with_indexers(
            key_func(),
            indexers([(
                "ns",
                index_func(|o: &TestObject| {
                    assert!(o.resource_version != 66, "index function panicked");
                    Ok(IndexValues::one(o.namespace.as_str()))
                }),
            )]),
        );
        s.add(obj("a", "x", 1)).unwrap();
        let err = s.update(obj("a", "x", 66)).unwrap_err();
        assert!(
            matches!(&err, Error::IndexFunc { key, source, .. }
                if key == "a/x" && source.to_string().contains("index function panicked")),
            "{err:?}"
        );
        assert!(err.to_string().contains("index function panicked"), "{err}");
        assert_eq!(s.get_by_key("a/x").unwrap().resource_version, 1);
        assert_eq!(s.index_keys("ns", "a").unwrap(), ["a/x"]);

        let panicking_keys = ThreadSafeStore::new(crate::key_func(
            |_: &TestObject| -> std::result::Result<String, KeyError> {
                panic!("key function panicked")
            },
        ));
        let err = panicking_keys.add(obj("a", "x", 1)).unwrap_err();
        assert!(
            matches!(&err, Error::Key(KeyError::Panicked(m)) if m == "key function panicked"),
            "{err:?}"
        );
        assert!(panicking_keys.is_empty());
    }

    #[test]
    fn upsert_with_key_files_under_the_given_key_and_keeps_indexes_exact() {
        let s = ThreadSafeStore::with_indexers(
            key_func(),
            indexers([("namespace", namespace_index())]),
        );
        assert!(
            s.upsert_with_key("a/x", obj("a", "x", 1))
                .unwrap()
                .is_none()
        );
        let old = s.upsert_with_key("a/x", obj("a", "x", 2)).unwrap();
        assert_eq!(old.unwrap().resource_version, 1);
        assert_eq!(s.get_by_key("a/x").unwrap().resource_version, 2);
        assert_eq!(s.index_keys("namespace", "a").unwrap(), ["a/x"]);
        assert_eq!(s.len(), 1, "the same entry as add would have made");
        assert_eq!(s.delete_by_key("a/x").unwrap().unwrap().resource_version, 2);
        assert!(s.list_index_func_values("namespace").is_empty());
    }

    #[test]
    fn bookmark_records_the_resource_version() {
        let s = ThreadSafeStore::new(key_func());
        assert_eq!(s.last_sync_resource_version(), None);
        s.bookmark("17").unwrap();
        assert_eq!(s.last_sync_resource_version().as_deref(), Some("17"));
    }

    /// `replace` indexes outside the lock; an `add_indexers` that lands meanwhile must not be
    /// lost, and the new index must cover the replaced content.
    #[test]
    fn replace_racing_add_indexers_keeps_both() {
        let store: Arc<OnceLock<Weak<ThreadSafeStore<TestObject>>>> = Arc::new(OnceLock::new());
        let calls = Arc::new(AtomicUsize::new(0));
        let (handle, counter) = (Arc::clone(&store), Arc::clone(&calls));
        let s = Arc::new(ThreadSafeStore::with_indexers(
            key_func(),
            indexers([(
                "ns",
                index_func(move |o: &TestObject| {
                    // The first call happens while `replace` indexes outside the lock.
                    if counter.fetch_add(1, Ordering::SeqCst) == 0 {
                        let s = handle.get().and_then(Weak::upgrade).unwrap();
                        s.add_indexers(indexers([(
                            "name",
                            index_func(|o: &TestObject| Ok(IndexValues::one(o.name.as_str()))),
                        )]))
                        .unwrap();
                    }
                    Ok(IndexValues::one(o.namespace.as_str()))
                }),
            )]),
        ));
        store.set(Arc::downgrade(&s)).unwrap();
        s.replace(vec![obj("a", "x", 1), obj("b", "y", 1)], "5".into())
            .unwrap();
        assert_eq!(s.get_indexers().len(), 2);
        assert_eq!(s.index_keys("name", "y").unwrap(), ["b/y"]);
        assert_eq!(s.index_keys("ns", "a").unwrap(), ["a/x"]);
    }
}
