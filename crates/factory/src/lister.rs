//! Typed listers over an informer's cache: [`ResourceLister`] and its [`NamespaceLister`].

use std::fmt;
use std::sync::Arc;

use informer_store::{Error, Indexer, Lister};

/// Picks objects out of a cache for [`ResourceLister::list`] (client-go's `labels.Selector`,
/// for any object type).
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

/// A typed, read-only view of one resource's cache: `get` by name, `list` by selector, and
/// [`namespace`](Self::namespace) for a namespace's objects (client-go's generated
/// `PodLister`, `NodeLister`...).
///
/// Cloning it is one reference-count increment; every call takes the cache's read lock only
/// while it copies out `Arc`s. Treat the objects as read-only.
///
/// ```
/// use std::sync::Arc;
/// use informer_factory::{Everything, ResourceLister};
/// use informer_store::{index_func, indexers, key_func, meta_namespace_key, IndexValues, ReflectorStore,
///     ThreadSafeStore, NAMESPACE_INDEX};
///
/// #[derive(Debug)]
/// struct Obj { ns: String, name: String, app: &'static str }
/// let store = Arc::new(ThreadSafeStore::with_indexers(
///     key_func(|o: &Obj| meta_namespace_key(Some(&o.ns), &o.name)),
///     indexers([(NAMESPACE_INDEX, index_func(|o: &Obj| Ok(IndexValues::one(o.ns.as_str()))))]),
/// ));
/// for (ns, name, app) in [("a", "web-0", "web"), ("a", "db-0", "db"), ("b", "web-0", "web")] {
///     store.add(Arc::new(Obj { ns: ns.into(), name: name.into(), app })).unwrap();
/// }
///
/// let lister = ResourceLister::new(store);
/// assert_eq!(lister.list(&Everything).len(), 3);
/// assert_eq!(lister.list(&|o: &Obj| o.app == "web").len(), 2);
/// assert_eq!(lister.namespace("a").get("db-0").unwrap().app, "db");
/// assert_eq!(lister.namespace("b").list(&|o: &Obj| o.app == "db").len(), 0);
/// ```
pub struct ResourceLister<K> {
    lister: Lister<K>,
}

impl<K> Clone for ResourceLister<K> {
    fn clone(&self) -> Self {
        Self {
            lister: self.lister.clone(),
        }
    }
}

impl<K: 'static> fmt::Debug for ResourceLister<K> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ResourceLister")
            .field("len", &self.lister.len())
            .finish()
    }
}

impl<K: 'static> ResourceLister<K> {
    /// A lister over `indexer` (an informer's [`indexer`](informer_controller::SharedIndexInformer::indexer)).
    pub fn new(indexer: Arc<dyn Indexer<K>>) -> Self {
        Self {
            lister: Lister::new(indexer),
        }
    }

    /// The object whose key is `name`: a cluster-scoped object. Namespaced objects are found
    /// through [`namespace`](Self::namespace) (or by their full `namespace/name` key here).
    pub fn get(&self, name: &str) -> Option<Arc<K>> {
        self.lister.get(name)
    }

    /// Every object `selector` selects, in all namespaces.
    pub fn list(&self, selector: &(impl Selector<K> + ?Sized)) -> Vec<Arc<K>> {
        if selector.matches_everything() {
            return self.lister.indexer().list();
        }
        self.lister.list(|o| selector.matches(o))
    }

    /// The objects of one namespace (`""`: all of them).
    pub fn namespace(&self, namespace: impl Into<String>) -> NamespaceLister<K> {
        NamespaceLister {
            lister: self.lister.clone(),
            namespace: namespace.into(),
        }
    }

    /// The objects filed under `value` in the index `index_name`.
    pub fn by_index(&self, index_name: &str, value: &str) -> Result<Vec<Arc<K>>, Error> {
        self.lister.by_index(index_name, value)
    }

    /// The number of cached objects.
    pub fn len(&self) -> usize {
        self.lister.len()
    }

    /// Whether the cache is empty.
    pub fn is_empty(&self) -> bool {
        self.lister.is_empty()
    }

    /// The untyped lister underneath.
    pub fn lister(&self) -> &Lister<K> {
        &self.lister
    }
}

/// The objects of one namespace, from [`ResourceLister::namespace`].
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

    /// The objects of this namespace that `selector` selects. Uses the `namespace` index when
    /// the cache has it, and a scan otherwise.
    pub fn list(&self, selector: &(impl Selector<K> + ?Sized)) -> Vec<Arc<K>> {
        if selector.matches_everything() {
            return self.lister.list_namespace(&self.namespace, |_| true);
        }
        self.lister
            .list_namespace(&self.namespace, |o| selector.matches(o))
    }
}
