//! What both queues do to an object on its way in: compute its key, then transform it.

use std::fmt;
use std::sync::Arc;

use informer_store::{Error, KeyFunc, KnownObjects, Result};

use crate::queue::TransformFunc;

/// A queue's key function, optional transform and optional cache.
pub(crate) struct Intake<K> {
    pub(crate) key_func: KeyFunc<K>,
    pub(crate) known_objects: Option<Arc<dyn KnownObjects<K>>>,
    pub(crate) transform: Option<TransformFunc<K>>,
}

impl<K> Intake<K> {
    pub(crate) fn key(&self, obj: &K) -> Result<String> {
        Ok((self.key_func)(obj)?)
    }

    pub(crate) fn transform(&self, obj: Arc<K>) -> Result<Arc<K>> {
        match &self.transform {
            Some(transform) => transform(obj).map_err(Error::Transform),
            None => Ok(obj),
        }
    }

    /// Key, then transform (the key is computed from the object as received).
    pub(crate) fn admit(&self, obj: Arc<K>) -> Result<(String, Arc<K>)> {
        let key = self.key(&obj)?;
        Ok((key, self.transform(obj)?))
    }

    /// [`admit`](Self::admit) for a whole list: the first error aborts, before anything is queued.
    pub(crate) fn admit_all(&self, list: Vec<Arc<K>>) -> Result<Vec<(String, Arc<K>)>> {
        list.into_iter().map(|obj| self.admit(obj)).collect()
    }

    /// The cache's object for `key`, if there is a cache and it has one.
    pub(crate) fn known(&self, key: &str) -> Option<Arc<K>> {
        self.known_objects.as_ref()?.get_by_key(key)
    }
}

impl<K> fmt::Debug for Intake<K> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Intake")
            .field("known_objects", &self.known_objects.is_some())
            .field("transform", &self.transform.is_some())
            .finish()
    }
}
