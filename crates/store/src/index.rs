//! Index functions: how an object maps to the values it is indexed under.

use std::collections::BTreeMap;
use std::sync::Arc;

use crate::error::BoxError;

/// The name of the conventional namespace index (client-go's `NamespaceIndex`).
pub const NAMESPACE_INDEX: &str = "namespace";

/// Computes the values an object is indexed under: zero, one (the usual case, e.g. its namespace)
/// or several (e.g. one per label).
///
/// It must be a pure function of the object. An error refuses the write that needed it and
/// leaves the store unchanged (see [`Error::IndexFunc`](crate::Error::IndexFunc)).
pub type IndexFunc<K> = Arc<dyn Fn(&K) -> Result<Vec<String>, BoxError> + Send + Sync>;

/// Named index functions, as registered on an [`Indexer`](crate::Indexer).
pub type Indexers<K> = BTreeMap<String, IndexFunc<K>>;

/// Wraps a closure as an [`IndexFunc`].
pub fn index_func<K, F>(f: F) -> IndexFunc<K>
where
    F: Fn(&K) -> Result<Vec<String>, BoxError> + Send + Sync + 'static,
{
    Arc::new(f)
}

/// Builds an [`Indexers`] map from `(name, function)` pairs.
///
/// ```
/// use informer_store::{index_func, indexers};
/// let by_len = indexers([("len", index_func(|s: &String| Ok(vec![s.len().to_string()])))]);
/// assert!(by_len.contains_key("len"));
/// ```
pub fn indexers<K, N, I>(entries: I) -> Indexers<K>
where
    N: Into<String>,
    I: IntoIterator<Item = (N, IndexFunc<K>)>,
{
    entries
        .into_iter()
        .map(|(name, f)| (name.into(), f))
        .collect()
}
