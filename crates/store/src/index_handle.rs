//! [`Index`]: a typed handle on a registered index, so a lookup cannot name one that is not
//! there.

use std::fmt;
use std::marker::PhantomData;
use std::sync::Arc;

use crate::error::Result;
use crate::index::{IndexFunc, indexers};
use crate::store::Indexer;

/// A handle on an index registered on a cache of `K`s: what [`Lister::lookup`] takes instead of
/// a string, so that a lookup names an index that exists (it is returned by the registration
/// itself, or by [`Index::registered`], which checks) over the right object type.
///
/// String names remain for dynamic use ([`Lister::by_index`]).
///
/// ```
/// use std::sync::Arc;
/// use informer_store::{index_func, key_func, Index, IndexValues, Lister, ReflectorStore,
///     ThreadSafeStore};
///
/// let store = Arc::new(ThreadSafeStore::new(key_func(|s: &String| Ok(s.clone()))));
/// let by_len = Index::register(&*store, "len", index_func(|s: &String| {
///     Ok(IndexValues::one(s.len().to_string()))
/// })).unwrap();
/// store.add(Arc::new("abc".to_string())).unwrap();
/// let lister = Lister::new(store.clone());
/// assert_eq!(lister.lookup(&by_len, "3").unwrap().len(), 1);
/// assert!(Index::<String>::registered(&*store, "nope").is_none());
/// ```
///
/// A handle for one object type cannot be used on a cache of another:
///
/// ```compile_fail
/// use std::sync::Arc;
/// use informer_store::{index_func, key_func, Index, IndexValues, Lister, ThreadSafeStore};
///
/// let strings = Arc::new(ThreadSafeStore::new(key_func(|s: &String| Ok(s.clone()))));
/// let by_len = Index::register(&*strings, "len", index_func(|s: &String| {
///     Ok(IndexValues::one(s.len().to_string()))
/// })).unwrap();
/// let numbers = Lister::new(Arc::new(ThreadSafeStore::new(key_func(|n: &u32| Ok(n.to_string())))));
/// numbers.lookup(&by_len, "3");
/// ```
///
/// [`Lister::lookup`]: crate::Lister::lookup
/// [`Lister::by_index`]: crate::Lister::by_index
pub struct Index<K> {
    name: Arc<str>,
    _object: PhantomData<fn(&K)>,
}

impl<K> Clone for Index<K> {
    fn clone(&self) -> Self {
        Self {
            name: Arc::clone(&self.name),
            _object: PhantomData,
        }
    }
}

impl<K> fmt::Debug for Index<K> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("Index").field(&self.name).finish()
    }
}

impl<K> Index<K> {
    /// Registers `func` on `cache` under `name` (existing objects are indexed at once) and
    /// returns its handle. A name already registered is an
    /// [`IndexerConflict`](crate::Error::IndexerConflict).
    pub fn register(cache: &dyn Indexer<K>, name: &str, func: IndexFunc<K>) -> Result<Self> {
        cache.add_indexers(indexers([(name, func)]))?;
        Ok(Self::named(name))
    }

    /// The handle of the index `name`, if `cache` has it (e.g. one registered at construction,
    /// such as the `namespace` index of a Kubernetes informer).
    pub fn registered(cache: &dyn Indexer<K>, name: &str) -> Option<Self> {
        cache
            .get_indexers()
            .contains_key(name)
            .then(|| Self::named(name))
    }

    fn named(name: &str) -> Self {
        Self {
            name: name.into(),
            _object: PhantomData,
        }
    }

    /// The index's name.
    pub fn name(&self) -> &str {
        &self.name
    }
}
