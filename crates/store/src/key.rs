//! Object keys: the `namespace/name` encoding and the caller-supplied key function.

use std::fmt;
use std::str::FromStr;
use std::sync::Arc;

/// Turns an object into the string key the store files it under.
///
/// Supplied by the caller, as in client-go: the store layer knows nothing about Kubernetes
/// metadata. For Kubernetes objects the key is [`ObjectName`]'s encoding, `namespace/name`, or just
/// `name` for cluster-scoped objects; [`meta_namespace_key`] builds it.
pub type KeyFunc<K> = Arc<dyn Fn(&K) -> Result<String, KeyError> + Send + Sync>;

/// Wraps a closure as a [`KeyFunc`].
pub fn key_func<K, F>(f: F) -> KeyFunc<K>
where
    F: Fn(&K) -> Result<String, KeyError> + Send + Sync + 'static,
{
    Arc::new(f)
}

/// Why a key could not be made or parsed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum KeyError {
    /// The object has no name (an empty or missing `metadata.name`).
    #[error("object has no name")]
    MissingName,
    /// A key string is not `name` or `namespace/name`.
    #[error("unexpected key format: {0:?}")]
    Malformed(String),
    /// The key function failed for another reason.
    #[error("couldn't create key for object: {0}")]
    Other(String),
    /// The key function panicked; the panic was caught (see [`catch_panic`](crate::catch_panic)).
    #[error("the key function panicked: {0}")]
    Panicked(String),
}

/// Calls `key_func` on `obj`, turning a panic into [`KeyError::Panicked`]: how every layer of
/// the stack computes keys, so a panicking key function refuses one object and kills nothing.
///
/// ```
/// use informer_store::{call_key_func, key_func, KeyError};
/// let keys = key_func(|s: &String| if s.is_empty() { panic!("no key") } else { Ok(s.clone()) });
/// assert_eq!(call_key_func(&keys, &"a".to_string()), Ok("a".to_string()));
/// assert_eq!(call_key_func(&keys, &String::new()), Err(KeyError::Panicked("no key".into())));
/// ```
pub fn call_key_func<K: ?Sized>(key_func: &KeyFunc<K>, obj: &K) -> Result<String, KeyError> {
    crate::panic::catch_panic(|| key_func(obj))
        .unwrap_or_else(|p| Err(KeyError::Panicked(p.message().to_owned())))
}

/// Builds the key of an object from its namespace and name: `namespace/name`, or `name` when the
/// namespace is absent or empty (cluster-scoped objects).
///
/// An empty name is refused with [`KeyError::MissingName`].
///
/// ```
/// use informer_store::meta_namespace_key;
/// assert_eq!(meta_namespace_key(Some("default"), "web-0").unwrap(), "default/web-0");
/// assert_eq!(meta_namespace_key(None, "node-1").unwrap(), "node-1");
/// assert!(meta_namespace_key(Some("default"), "").is_err());
/// ```
pub fn meta_namespace_key(namespace: Option<&str>, name: &str) -> Result<String, KeyError> {
    if name.is_empty() {
        return Err(KeyError::MissingName);
    }
    Ok(match namespace {
        Some(ns) if !ns.is_empty() => {
            let mut key = String::with_capacity(ns.len() + 1 + name.len());
            key.push_str(ns);
            key.push('/');
            key.push_str(name);
            key
        }
        _ => name.to_owned(),
    })
}

/// Splits a key into `(namespace, name)`; the namespace is `""` for a cluster-scoped key.
///
/// A key with more than one `/`, or with an empty name, is [`KeyError::Malformed`].
///
/// ```
/// use informer_store::split_meta_namespace_key;
/// assert_eq!(split_meta_namespace_key("ns/a").unwrap(), ("ns", "a"));
/// assert_eq!(split_meta_namespace_key("a").unwrap(), ("", "a"));
/// assert!(split_meta_namespace_key("a/b/c").is_err());
/// ```
pub fn split_meta_namespace_key(key: &str) -> Result<(&str, &str), KeyError> {
    let (namespace, name) = match key.split_once('/') {
        None => ("", key),
        Some((ns, name)) if !name.contains('/') => (ns, name),
        Some(_) => return Err(KeyError::Malformed(key.to_owned())),
    };
    if name.is_empty() {
        return Err(KeyError::Malformed(key.to_owned()));
    }
    Ok((namespace, name))
}

/// The namespace and name of an object; `Display` and `FromStr` use the key encoding.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct ObjectName {
    /// The namespace; empty for cluster-scoped objects.
    pub namespace: String,
    /// The name.
    pub name: String,
}

impl ObjectName {
    /// An object name from its parts.
    pub fn new(namespace: impl Into<String>, name: impl Into<String>) -> Self {
        Self {
            namespace: namespace.into(),
            name: name.into(),
        }
    }
}

impl fmt::Display for ObjectName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.namespace.is_empty() {
            f.write_str(&self.name)
        } else {
            write!(f, "{}/{}", self.namespace, self.name)
        }
    }
}

impl FromStr for ObjectName {
    type Err = KeyError;

    fn from_str(key: &str) -> Result<Self, KeyError> {
        let (namespace, name) = split_meta_namespace_key(key)?;
        Ok(Self::new(namespace, name))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn key_of_namespaced_and_cluster_scoped_objects() {
        assert_eq!(meta_namespace_key(Some("ns"), "a").unwrap(), "ns/a");
        assert_eq!(meta_namespace_key(Some(""), "a").unwrap(), "a");
        assert_eq!(meta_namespace_key(None, "a").unwrap(), "a");
    }

    #[test]
    fn key_of_object_without_name_is_an_error() {
        assert_eq!(
            meta_namespace_key(Some("ns"), ""),
            Err(KeyError::MissingName)
        );
        assert_eq!(meta_namespace_key(None, ""), Err(KeyError::MissingName));
    }

    #[test]
    fn split_accepts_one_or_two_parts() {
        assert_eq!(split_meta_namespace_key("a").unwrap(), ("", "a"));
        assert_eq!(split_meta_namespace_key("ns/a").unwrap(), ("ns", "a"));
        assert_eq!(split_meta_namespace_key("/a").unwrap(), ("", "a"));
    }

    #[test]
    fn split_rejects_malformed_keys_with_a_typed_error() {
        for bad in ["a/b/c", "", "ns/", "a//b"] {
            assert_eq!(
                split_meta_namespace_key(bad),
                Err(KeyError::Malformed(bad.to_owned())),
                "{bad:?}"
            );
        }
    }

    #[test]
    fn object_name_round_trips_through_its_key() {
        for key in ["ns/a", "a"] {
            let name: ObjectName = key.parse().unwrap();
            assert_eq!(name.to_string(), key);
        }
        assert_eq!(
            "ns/a".parse::<ObjectName>().unwrap(),
            ObjectName::new("ns", "a")
        );
        assert!("x/y/z".parse::<ObjectName>().is_err());
    }
}
