//! What identifies an object to every layer: its key, its resource version and the indexes a
//! cache of it starts with, as one value the cache, the queue and the reflector share.

use std::fmt;
use std::sync::Arc;

use crate::index::Indexers;
use crate::key::{KeyError, KeyFunc, call_key_func};

/// Reads an object's resource version (`metadata.resourceVersion`); `None` when it has none.
pub type ResourceVersionFunc<K> = Arc<dyn for<'a> Fn(&'a K) -> Option<&'a str> + Send + Sync>;

/// What identifies an object of type `K`: its key (`namespace/name`) in caches and queues, its
/// resource version (a resync is an update whose two sides have the same one; a relist keeps a
/// cached object whose version did not change), and the indexes a cache of it starts with.
///
/// An informer takes one identity and hands the same key to its cache, its queue and its
/// reflector, so they cannot disagree. The kube adapter implements it for every
/// `kube::Resource` (`informer_kube::KubeIdentity`); [`FnIdentity`] builds one from closures
/// for any other type.
///
/// ```
/// use informer_store::{Identity, KeyError, meta_namespace_key};
///
/// struct Widget { namespace: String, name: String, version: String }
///
/// struct ByName;
/// impl Identity<Widget> for ByName {
///     fn key(&self, w: &Widget) -> Result<String, KeyError> {
///         meta_namespace_key(Some(&w.namespace), &w.name)
///     }
///     fn resource_version<'a>(&self, w: &'a Widget) -> Option<&'a str> {
///         Some(&w.version)
///     }
/// }
/// let w = Widget { namespace: "prod".into(), name: "w1".into(), version: "7".into() };
/// assert_eq!(ByName.key(&w).unwrap(), "prod/w1");
/// ```
pub trait Identity<K>: Send + Sync + 'static {
    /// The object's key.
    fn key(&self, obj: &K) -> Result<String, KeyError>;

    /// The object's resource version, if it has one (the default: none, so every update is a
    /// real one and a relist replaces every object).
    fn resource_version<'a>(&self, obj: &'a K) -> Option<&'a str> {
        let _ = obj;
        None
    }

    /// The indexes a cache of these objects starts with (the default: none).
    fn indexers(&self) -> Indexers<K> {
        Indexers::new()
    }

    /// The object's unique id (`metadata.uid`), if it has one (the default: none). A sharded
    /// informer hashes it to decide whether the object is in its shards.
    fn uid<'a>(&self, obj: &'a K) -> Option<&'a str> {
        let _ = obj;
        None
    }

    /// The object's namespace (`metadata.namespace`), if it has one (the default: none; a
    /// cluster-scoped object has none). A sharded informer hashes it (`""` when there is none,
    /// as the API server does) when its shards are by namespace.
    fn namespace<'a>(&self, obj: &'a K) -> Option<&'a str> {
        let _ = obj;
        None
    }

    /// The uid of the object's controller (the owner reference with `controller: true`), if it
    /// has one (the default: none). A sharded informer whose objects follow their owner's shard
    /// hashes it.
    fn controller_uid<'a>(&self, obj: &'a K) -> Option<&'a str> {
        let _ = obj;
        None
    }
}

/// A shared identity is an identity.
impl<K, I: Identity<K> + ?Sized> Identity<K> for Arc<I> {
    fn key(&self, obj: &K) -> Result<String, KeyError> {
        (**self).key(obj)
    }

    fn resource_version<'a>(&self, obj: &'a K) -> Option<&'a str> {
        (**self).resource_version(obj)
    }

    fn indexers(&self) -> Indexers<K> {
        (**self).indexers()
    }

    fn uid<'a>(&self, obj: &'a K) -> Option<&'a str> {
        (**self).uid(obj)
    }

    fn namespace<'a>(&self, obj: &'a K) -> Option<&'a str> {
        (**self).namespace(obj)
    }

    fn controller_uid<'a>(&self, obj: &'a K) -> Option<&'a str> {
        (**self).controller_uid(obj)
    }
}

/// An identity shared by the layers of one informer.
pub type SharedIdentity<K> = Arc<dyn Identity<K>>;

/// The key function of `identity`: the one the cache, the queue and the reflector file objects
/// by, computed by the identity itself.
pub fn identity_key_func<K: 'static>(identity: &SharedIdentity<K>) -> KeyFunc<K> {
    let identity = Arc::clone(identity);
    Arc::new(move |obj: &K| identity.key(obj))
}

/// An [`Identity`] made of closures: a key function, and optionally a resource-version function
/// and indexes. For types without an identity of their own, and to override one (a custom key).
///
/// ```
/// use std::sync::Arc;
/// use informer_store::{FnIdentity, Identity, key_func};
///
/// let identity = FnIdentity::new(key_func(|s: &String| Ok(s.clone())))
///     .with_resource_version(Arc::new(|s: &String| Some(s.as_str())));
/// assert_eq!(identity.key(&"a".to_string()).unwrap(), "a");
/// assert_eq!(identity.resource_version(&"a".to_string()), Some("a"));
/// ```
pub struct FnIdentity<K> {
    key: KeyFunc<K>,
    resource_version: Option<ResourceVersionFunc<K>>,
    indexers: Indexers<K>,
}

impl<K> FnIdentity<K> {
    /// Objects keyed by `key`, with no resource version and no index.
    pub fn new(key: KeyFunc<K>) -> Self {
        Self {
            key,
            resource_version: None,
            indexers: Indexers::new(),
        }
    }

    /// The same identity reading resource versions with `f`.
    #[must_use]
    pub fn with_resource_version(mut self, f: ResourceVersionFunc<K>) -> Self {
        self.resource_version = Some(f);
        self
    }

    /// The same identity with `indexers` among the indexes a cache starts with.
    #[must_use]
    pub fn with_indexers(mut self, indexers: Indexers<K>) -> Self {
        self.indexers.extend(indexers);
        self
    }
}

impl<K> fmt::Debug for FnIdentity<K> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FnIdentity")
            .field("resource_version", &self.resource_version.is_some())
            .field("indexers", &self.indexers.keys().collect::<Vec<_>>())
            .finish_non_exhaustive()
    }
}

impl<K: 'static> Identity<K> for FnIdentity<K> {
    fn key(&self, obj: &K) -> Result<String, KeyError> {
        call_key_func(&self.key, obj)
    }

    fn resource_version<'a>(&self, obj: &'a K) -> Option<&'a str> {
        self.resource_version.as_ref().and_then(|f| f(obj))
    }

    fn indexers(&self) -> Indexers<K> {
        self.indexers.clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{IndexValues, index_func, key_func};

    #[test]
    fn a_closure_identity_answers_with_its_closures_and_its_key_func_is_the_same() {
        let identity: SharedIdentity<String> = Arc::new(
            FnIdentity::new(key_func(|s: &String| Ok(format!("k/{s}"))))
                .with_resource_version(Arc::new(|s: &String| s.get(..1)))
                .with_indexers(Indexers::from([(
                    "first".to_string(),
                    index_func(|s: &String| Ok(IndexValues::one(&s[..1]))),
                )])),
        );
        let obj = "abc".to_string();
        assert_eq!(identity.key(&obj).unwrap(), "k/abc");
        assert_eq!(identity.resource_version(&obj), Some("a"));
        assert_eq!(identity.indexers().keys().collect::<Vec<_>>(), ["first"]);
        assert_eq!(identity_key_func(&identity)(&obj).unwrap(), "k/abc");
    }

    #[test]
    fn without_a_version_function_there_is_no_version_and_a_panicking_key_is_an_error() {
        let identity = FnIdentity::new(key_func(|_: &String| -> Result<String, KeyError> {
            panic!("boom")
        }));
        assert_eq!(identity.resource_version(&"a".to_string()), None);
        assert!(identity.key(&"a".to_string()).is_err());
    }
}
