//! Index functions: how an object maps to the values it is indexed under.

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::fmt;
use std::sync::Arc;

use smallvec::SmallVec;

use crate::error::BoxError;

/// The name of the conventional namespace index (client-go's `NamespaceIndex`).
pub const NAMESPACE_INDEX: &str = "namespace";

/// Computes the values an object is indexed under: zero, one (the usual case, e.g. its namespace)
/// or several (e.g. one per label).
///
/// The values may borrow from the object ([`IndexValues`] holds `Cow<str>`s), so the common case
/// — one value read off the object — allocates nothing. It must be a pure function of the
/// object. An error refuses the write that needed it and leaves the store unchanged (see
/// [`Error::IndexFunc`](crate::Error::IndexFunc)).
pub type IndexFunc<K> =
    Arc<dyn for<'a> Fn(&'a K) -> Result<IndexValues<'a>, BoxError> + Send + Sync>;

/// Named index functions, as registered on an [`Indexer`](crate::Indexer).
pub type Indexers<K> = BTreeMap<String, IndexFunc<K>>;

/// Wraps a closure as an [`IndexFunc`].
///
/// ```
/// use informer_store::{index_func, IndexValues};
/// struct Pod { namespace: String, labels: Vec<(String, String)> }
/// // One value borrowed from the object: no allocation.
/// let by_namespace = index_func(|p: &Pod| Ok(IndexValues::one(p.namespace.as_str())));
/// // Several owned values.
/// let by_label = index_func(|p: &Pod| {
///     Ok(p.labels.iter().map(|(k, v)| format!("{k}={v}")).collect())
/// });
/// let pod = Pod { namespace: "default".into(), labels: vec![("app".into(), "web".into())] };
/// assert_eq!(by_namespace(&pod).unwrap().as_slice(), ["default"]);
/// assert_eq!(by_label(&pod).unwrap().as_slice(), ["app=web"]);
/// ```
pub fn index_func<K, F>(f: F) -> IndexFunc<K>
where
    F: for<'a> Fn(&'a K) -> Result<IndexValues<'a>, BoxError> + Send + Sync + 'static,
{
    Arc::new(f)
}

/// Builds an [`Indexers`] map from `(name, function)` pairs.
///
/// ```
/// use informer_store::{index_func, indexers, IndexValues};
/// let by_len = indexers([("len", index_func(|s: &String| Ok(IndexValues::one(s.len().to_string()))))]);
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

/// The values an [`IndexFunc`] yields for one object: borrowed from the object or owned, stored
/// inline when there is just one.
#[derive(Clone, Default, PartialEq, Eq)]
pub struct IndexValues<'a>(SmallVec<[Cow<'a, str>; 1]>);

impl<'a> IndexValues<'a> {
    /// No value: the object is not in this index.
    pub fn none() -> Self {
        Self(SmallVec::new())
    }

    /// Exactly one value.
    pub fn one(value: impl Into<Cow<'a, str>>) -> Self {
        let mut values = SmallVec::new();
        values.push(value.into());
        Self(values)
    }

    /// Adds a value.
    pub fn push(&mut self, value: impl Into<Cow<'a, str>>) {
        self.0.push(value.into());
    }

    /// The values, in the order given.
    pub fn as_slice(&self) -> &[Cow<'a, str>] {
        &self.0
    }

    /// The number of values.
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// Whether there is no value.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Whether `value` is one of the values.
    pub fn contains(&self, value: &str) -> bool {
        self.0.iter().any(|v| v == value)
    }

    /// Iterates over the values.
    pub fn iter(&self) -> impl Iterator<Item = &str> {
        self.0.iter().map(|v| &**v)
    }
}

impl fmt::Debug for IndexValues<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list().entries(self.iter()).finish()
    }
}

impl<'a> IntoIterator for IndexValues<'a> {
    type Item = Cow<'a, str>;
    type IntoIter = smallvec::IntoIter<[Cow<'a, str>; 1]>;

    fn into_iter(self) -> Self::IntoIter {
        self.0.into_iter()
    }
}

impl<'a, V: Into<Cow<'a, str>>> FromIterator<V> for IndexValues<'a> {
    fn from_iter<I: IntoIterator<Item = V>>(iter: I) -> Self {
        Self(iter.into_iter().map(Into::into).collect())
    }
}

impl<'a, V: Into<Cow<'a, str>>> From<Option<V>> for IndexValues<'a> {
    /// `None` is no value, `Some(v)` is one.
    fn from(value: Option<V>) -> Self {
        match value {
            Some(v) => Self::one(v),
            None => Self::none(),
        }
    }
}

impl<'a> From<Vec<String>> for IndexValues<'a> {
    fn from(values: Vec<String>) -> Self {
        values.into_iter().collect()
    }
}

impl<'a> From<&'a str> for IndexValues<'a> {
    fn from(value: &'a str) -> Self {
        Self::one(value)
    }
}

impl<'a> From<String> for IndexValues<'a> {
    fn from(value: String) -> Self {
        Self::one(value)
    }
}
