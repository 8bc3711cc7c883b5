//! [`Lister`]: a cheap, cloneable, read-only view of an indexer.

use std::fmt;
use std::sync::Arc;

use crate::error::{Error, Result};
use crate::index::NAMESPACE_INDEX;
use crate::key::{meta_namespace_key, split_meta_namespace_key};
use crate::store::Indexer;

/// A read-only handle on a cache: cloning it is one reference-count increment.
///
/// Every call takes the cache's read lock, copies out `Arc`s and releases it before returning,
/// so a caller can hold the results as long as it likes without blocking writers. The objects
/// are shared with the cache and must be treated as read-only.
///
/// ```
/// use std::sync::Arc;
/// use informer_store::{index_func, indexers, key_func, meta_namespace_key, IndexValues, Lister, ReflectorStore,
///     ThreadSafeStore, NAMESPACE_INDEX};
///
/// #[derive(Debug)]
/// struct Obj { ns: String, name: String, app: String }
/// let store = Arc::new(ThreadSafeStore::with_indexers(
///     key_func(|o: &Obj| meta_namespace_key(Some(&o.ns), &o.name)),
///     indexers([(NAMESPACE_INDEX, index_func(|o: &Obj| Ok(IndexValues::one(o.ns.as_str()))))]),
/// ));
/// store.add(Arc::new(Obj { ns: "a".into(), name: "web".into(), app: "web".into() })).unwrap();
/// store.add(Arc::new(Obj { ns: "a".into(), name: "db".into(), app: "db".into() })).unwrap();
/// store.add(Arc::new(Obj { ns: "b".into(), name: "web".into(), app: "web".into() })).unwrap();
///
/// let lister = Lister::new(store);
/// assert_eq!(lister.get_namespaced("a", "db").unwrap().app, "db");
/// assert_eq!(lister.list(|o| o.app == "web").len(), 2);
/// assert_eq!(lister.list_namespace("a", |o| o.app == "web").len(), 1);
/// ```
pub struct Lister<K> {
    indexer: Arc<dyn Indexer<K>>,
}

impl<K> Clone for Lister<K> {
    fn clone(&self) -> Self {
        Self {
            indexer: Arc::clone(&self.indexer),
        }
    }
}

impl<K> fmt::Debug for Lister<K> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Lister")
            .field("len", &self.indexer.len())
            .finish()
    }
}

impl<K: 'static> Lister<K> {
    /// A lister over `indexer`.
    pub fn new(indexer: Arc<dyn Indexer<K>>) -> Self {
        Self { indexer }
    }

    /// The indexer this lister reads.
    pub fn indexer(&self) -> &Arc<dyn Indexer<K>> {
        &self.indexer
    }

    /// The object filed under `key`.
    pub fn get(&self, key: &str) -> Option<Arc<K>> {
        self.indexer.get_by_key(key)
    }

    /// The object named `name` in `namespace` (`""` for cluster-scoped objects).
    pub fn get_namespaced(&self, namespace: &str, name: &str) -> Option<Arc<K>> {
        let key = meta_namespace_key(Some(namespace), name).ok()?;
        self.indexer.get_by_key(&key)
    }

    /// Every object for which `predicate` holds (e.g. a label selector's `matches`).
    pub fn list(&self, predicate: impl Fn(&K) -> bool) -> Vec<Arc<K>> {
        let mut all = self.indexer.list();
        all.retain(|o| predicate(o));
        all
    }

    /// The objects of `namespace` for which `predicate` holds; `""` means every namespace.
    ///
    /// Uses the [`NAMESPACE_INDEX`] when the indexer has it, and a scan of the keys otherwise.
    pub fn list_namespace(&self, namespace: &str, predicate: impl Fn(&K) -> bool) -> Vec<Arc<K>> {
        if namespace.is_empty() {
            return self.list(predicate);
        }
        let mut found = match self.indexer.by_index(NAMESPACE_INDEX, namespace) {
            Ok(objects) => objects,
            Err(_) => self
                .indexer
                .list_keys()
                .iter()
                .filter(|key| split_meta_namespace_key(key).is_ok_and(|(ns, _)| ns == namespace))
                .filter_map(|key| self.indexer.get_by_key(key))
                .collect(),
        };
        found.retain(|o| predicate(o));
        found
    }

    /// The objects filed under `value` in index `index_name`.
    pub fn by_index(&self, index_name: &str, value: &str) -> Result<Vec<Arc<K>>, Error> {
        self.indexer.by_index(index_name, value)
    }

    /// The number of cached objects.
    pub fn len(&self) -> usize {
        self.indexer.len()
    }

    /// Whether the cache is empty.
    pub fn is_empty(&self) -> bool {
        self.indexer.is_empty()
    }
}
