//! [`BoxListerWatcher`]: any [`ListerWatcher`] behind one type.

use std::fmt;
use std::sync::Arc;

use futures::future::BoxFuture;

use crate::error::Error;
use crate::lister_watcher::{
    ListPage, ListParams, ListSink, ListerWatcher, WatchParams, WatchStream,
};

/// Any [`ListerWatcher`] behind one type: what an informer keeps, so that its own type does not
/// name where it lists from (a kube-client `Api`, a metadata client, a fake in a test).
///
/// Each call costs one boxed future, nothing next to a request to a server.
///
/// ```
/// use std::sync::Arc;
/// use informer_reflector::{BoxListerWatcher, FakeListerWatcher};
///
/// let fake: FakeListerWatcher<String> = FakeListerWatcher::new();
/// let boxed: BoxListerWatcher<String> = BoxListerWatcher::new(fake);
/// let _shared = boxed.clone(); // cheap: one reference count
/// ```
pub struct BoxListerWatcher<K>(Arc<dyn DynListerWatcher<K>>);

impl<K> Clone for BoxListerWatcher<K> {
    fn clone(&self) -> Self {
        Self(Arc::clone(&self.0))
    }
}

impl<K> fmt::Debug for BoxListerWatcher<K> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("BoxListerWatcher")
    }
}

impl<K: 'static> BoxListerWatcher<K> {
    /// `lister_watcher`, boxed.
    pub fn new(lister_watcher: impl ListerWatcher<K> + 'static) -> Self {
        Self(Arc::new(lister_watcher))
    }
}

/// The object-safe form of [`ListerWatcher`] behind [`BoxListerWatcher`].
trait DynListerWatcher<K>: Send + Sync {
    fn list<'a>(&'a self, params: &'a ListParams) -> BoxFuture<'a, Result<ListPage<K>, Error>>;
    fn list_into<'a, 'b: 'a>(
        &'a self,
        params: &'a ListParams,
        sink: &'a mut ListSink<'b, K>,
    ) -> BoxFuture<'a, Result<ListPage<K>, Error>>
    where
        K: Send + Sync;
    fn watch<'a>(&'a self, params: &'a WatchParams)
    -> BoxFuture<'a, Result<WatchStream<K>, Error>>;
    fn last_encoding(&self) -> Option<&'static str>;
    fn supports_streaming_list(&self) -> bool;
}

impl<K: 'static, L: ListerWatcher<K>> DynListerWatcher<K> for L {
    fn list<'a>(&'a self, params: &'a ListParams) -> BoxFuture<'a, Result<ListPage<K>, Error>> {
        Box::pin(ListerWatcher::list(self, params))
    }

    fn list_into<'a, 'b: 'a>(
        &'a self,
        params: &'a ListParams,
        sink: &'a mut ListSink<'b, K>,
    ) -> BoxFuture<'a, Result<ListPage<K>, Error>>
    where
        K: Send + Sync,
    {
        Box::pin(ListerWatcher::list_into(self, params, sink))
    }

    fn watch<'a>(
        &'a self,
        params: &'a WatchParams,
    ) -> BoxFuture<'a, Result<WatchStream<K>, Error>> {
        Box::pin(ListerWatcher::watch(self, params))
    }

    fn last_encoding(&self) -> Option<&'static str> {
        ListerWatcher::last_encoding(self)
    }

    fn supports_streaming_list(&self) -> bool {
        ListerWatcher::supports_streaming_list(self)
    }
}

impl<K: 'static> ListerWatcher<K> for BoxListerWatcher<K> {
    async fn list(&self, params: &ListParams) -> Result<ListPage<K>, Error> {
        self.0.list(params).await
    }

    async fn list_into(
        &self,
        params: &ListParams,
        sink: &mut ListSink<'_, K>,
    ) -> Result<ListPage<K>, Error>
    where
        K: Send + Sync,
    {
        self.0.list_into(params, sink).await
    }

    async fn watch(&self, params: &WatchParams) -> Result<WatchStream<K>, Error> {
        self.0.watch(params).await
    }

    fn last_encoding(&self) -> Option<&'static str> {
        self.0.last_encoding()
    }

    fn supports_streaming_list(&self) -> bool {
        self.0.supports_streaming_list()
    }
}
