//! [`Lister`]: a cheap, cloneable, read-only view of an indexer.

use std::fmt;
use std::sync::Arc;

use crate::error::{Error, Result};
use crate::index::NAMESPACE_INDEX;
use crate::index_handle::Index;
use crate::key::{meta_namespace_key, split_meta_namespace_key};
use crate::store::Indexer;

/// The read handle on a cache — the one way to read an informer's objects: by key, by
/// namespace and name, by selector, a namespace's view, and index lookups. Cloning it is one
/// reference-count increment.
///
/// Every call takes the cache's read lock, copies out `Arc`s and releases it before returning,
/// so a caller can hold the results as long as it likes without blocking writers. The objects
/// are shared with the cache and must be treated as read-only.
///
/// ```
/// use std::sync::Arc;
/// use informer_store::{index_func, indexers, key_func, meta_namespace_key, Everything, IndexValues,
///     Lister, ReflectorStore, ThreadSafeStore, NAMESPACE_INDEX};
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
/// assert_eq!(lister.list(&Everything).len(), 3);
/// assert_eq!(lister.list(&|o: &Obj| o.app == "web").len(), 2);
/// assert_eq!(lister.namespace("a").list(&|o: &Obj| o.app == "web").len(), 1);
/// assert_eq!(lister.namespace("a").get("db").unwrap().app, "db");
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

    /// The indexer this lister reads: the layer below, for what a read handle does not cover.
    pub fn indexer(&self) -> &Arc<dyn Indexer<K>> {
        &self.indexer
    }

    /// The object filed under `key` (`namespace/name`, or `name` for a cluster-scoped object).
    pub fn get(&self, key: &str) -> Option<Arc<K>> {
        self.indexer.get_by_key(key)
    }

    /// The object named `name` in `namespace` (`""` for cluster-scoped objects).
    pub fn get_namespaced(&self, namespace: &str, name: &str) -> Option<Arc<K>> {
        let key = meta_namespace_key(Some(namespace), name).ok()?;
        self.indexer.get_by_key(&key)
    }

    /// Every object `selector` selects: [`Everything`], a closure, a label selector.
    pub fn list(&self, selector: &(impl Selector<K> + ?Sized)) -> Vec<Arc<K>> {
        let mut all = self.indexer.list();
        if !selector.matches_everything() {
            all.retain(|o| selector.matches(o));
        }
        all
    }

    /// The objects of one namespace (client-go's namespace lister); `""` means every
    /// namespace.
    pub fn namespace(&self, namespace: impl Into<String>) -> NamespaceLister<K> {
        NamespaceLister {
            lister: self.clone(),
            namespace: namespace.into(),
        }
    }

    /// The objects filed under `value` in `index` (a typed handle: see [`Index`]).
    pub fn lookup(&self, index: &Index<K>, value: &str) -> Result<Vec<Arc<K>>, Error> {
        self.indexer.by_index(index.name(), value)
    }

    /// The keys filed under `value` in `index`, sorted.
    pub fn lookup_keys(&self, index: &Index<K>, value: &str) -> Result<Vec<String>, Error> {
        self.indexer.index_keys(index.name(), value)
    }

    /// The objects filed under `value` in index `index_name` (by name, for dynamic use; prefer
    /// [`lookup`](Self::lookup) with an [`Index`] handle).
    pub fn by_index(&self, index_name: &str, value: &str) -> Result<Vec<Arc<K>>, Error> {
        self.indexer.by_index(index_name, value)
    }

    /// The keys filed under `value` in index `index_name`, sorted.
    pub fn index_keys(&self, index_name: &str, value: &str) -> Result<Vec<String>, Error> {
        self.indexer.index_keys(index_name, value)
    }

    /// Every value of index `index_name` that has objects (empty for an unknown index).
    pub fn index_values(&self, index_name: &str) -> Vec<String> {
        self.indexer.list_index_func_values(index_name)
    }

    /// Every key, in no particular order.
    pub fn keys(&self) -> Vec<String> {
        self.indexer.list_keys()
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

/// The objects of one namespace, from [`Lister::namespace`].
pub struct NamespaceLister<K> {
    lister: Lister<K>,
    namespace: String,
}

impl<K> Clone for NamespaceLister<K> {
    fn clone(&self) -> Self {
        Self {
            lister: self.lister.clone(),
            namespace: self.namespace.clone(),
        }
    }
}

impl<K> fmt::Debug for NamespaceLister<K> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("NamespaceLister")
            .field("namespace", &self.namespace)
            .finish_non_exhaustive()
    }
}

impl<K: 'static> NamespaceLister<K> {
    /// The namespace this lister reads.
    pub fn namespace(&self) -> &str {
        &self.namespace
    }

    /// The object `name` in this namespace.
    pub fn get(&self, name: &str) -> Option<Arc<K>> {
        self.lister.get_namespaced(&self.namespace, name)
    }

    /// The objects of this namespace that `selector` selects; `""` means every namespace.
    ///
    /// Uses the [`NAMESPACE_INDEX`] when the indexer has it, and a scan of the keys otherwise.
    pub fn list(&self, selector: &(impl Selector<K> + ?Sized)) -> Vec<Arc<K>> {
        if self.namespace.is_empty() {
            return self.lister.list(selector);
        }
        let indexer = &self.lister.indexer;
        let mut found = match indexer.by_index(NAMESPACE_INDEX, &self.namespace) {
            Ok(objects) => objects,
            Err(_) => indexer
                .list_keys()
                .iter()
                .filter(|key| {
                    split_meta_namespace_key(key).is_ok_and(|(ns, _)| ns == self.namespace)
                })
                .filter_map(|key| indexer.get_by_key(key))
                .collect(),
        };
        if !selector.matches_everything() {
            found.retain(|o| selector.matches(o));
        }
        found
    }
}

/// Picks objects out of a cache for [`Lister::list`] (client-go's `labels.Selector`, for any
/// object type).
///
/// Closures `Fn(&K) -> bool` are selectors; [`Everything`] selects all objects without
/// looking at them. `informer-kube` adds a label selector for Kubernetes objects.
pub trait Selector<K: ?Sized> {
    /// Whether `object` is selected.
    fn matches(&self, object: &K) -> bool;

    /// Whether every object is selected, so that `matches` need not be called.
    fn matches_everything(&self) -> bool {
        false
    }
}

/// The selector that selects every object.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Everything;

impl<K: ?Sized> Selector<K> for Everything {
    fn matches(&self, _: &K) -> bool {
        true
    }

    fn matches_everything(&self) -> bool {
        true
    }
}

impl<K: ?Sized, F: Fn(&K) -> bool> Selector<K> for F {
    fn matches(&self, object: &K) -> bool {
        self(object)
    }
}
