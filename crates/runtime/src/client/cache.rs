//! One informer of a [`Client`](super::Client): the cache its reads come from, and what its
//! writes are awaited in.

use std::sync::Arc;
use std::time::Duration;

use futures::future::BoxFuture;
use informer::{SharedIndexInformer, VersionWaitError};
use kube::Resource;

use crate::written::WrittenCache;

/// The informer of one resource type.
pub(super) struct TypedCache<K> {
    pub(super) informer: Arc<SharedIndexInformer<K>>,
}

impl<K: Resource + Send + Sync + 'static> TypedCache<K> {
    /// The UID of the object the cache holds under `key`.
    pub(super) fn uid_at(&self, key: &str) -> Option<String> {
        self.informer.lister().get(key)?.meta().uid.clone()
    }
}

impl<K: Resource + Send + Sync + 'static> WrittenCache for TypedCache<K> {
    fn name(&self) -> &str {
        self.informer.name()
    }

    fn version(&self) -> String {
        self.informer.cache_version()
    }

    fn wait_for_version<'a>(
        &'a self,
        version: &'a str,
        timeout: Duration,
    ) -> BoxFuture<'a, Result<String, VersionWaitError>> {
        Box::pin(self.informer.wait_for_version(version, timeout))
    }

    fn holds(&self, key: &str, uid: &str) -> bool {
        self.uid_at(key).is_some_and(|cached| cached == uid)
    }
}
