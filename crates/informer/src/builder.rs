//! [`InformerBuilder`]: everything about an informer, chosen in one place and frozen when it is
//! built.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use informer_fifo::TransformFunc;
use informer_reflector::{
    BoxListerWatcher, ListerWatcher, ShardBy, ShardSelector, WatchErrorHandler,
};
use informer_store::{Identity, Indexer, SharedIdentity, ThreadSafeStore, identity_key_func};

use crate::informer::{InformerReflector, QueueKind, ReflectorConfig, SharedIndexInformer};
use crate::options::PanicPolicy;
use crate::pool::DeliveryPool;
use crate::shards::Shards;

/// How to build a [`SharedIndexInformer`]: its source and the [`Identity`] of its objects, then
/// any of its settings, each with a default; [`build`](Self::build) freezes them. Nothing about
/// an informer's configuration changes once it is built (handlers and indexes are added to the
/// informer itself).
///
/// ```
/// use std::sync::Arc;
/// use std::time::Duration;
/// use informer::{QueueKind, SharedIndexInformer};
/// use informer_reflector::FakeListerWatcher;
/// use informer_store::{FnIdentity, key_func};
///
/// let informer = SharedIndexInformer::builder(
///     FakeListerWatcher::<String>::new(),
///     FnIdentity::new(key_func(|s: &String| Ok(s.clone()))),
/// )
/// .name("strings")
/// .resync(Duration::from_secs(30))
/// .queue(QueueKind::DeltaFifo)
/// .build();
/// assert_eq!(informer.name(), "strings");
/// ```
pub struct InformerBuilder<K> {
    pub(crate) lister_watcher: BoxListerWatcher<K>,
    pub(crate) identity: SharedIdentity<K>,
    pub(crate) cache: Option<Arc<dyn Indexer<K>>>,
    pub(crate) resync: Duration,
    pub(crate) name: Option<String>,
    pub(crate) panic_policy: PanicPolicy,
    pub(crate) pool: Option<Arc<DeliveryPool>>,
    pub(crate) queue: QueueKind<K>,
    pub(crate) streaming_list: bool,
    pub(crate) relist_by_page: bool,
    pub(crate) transform: Option<TransformFunc<K>>,
    pub(crate) watch_error_handler: Option<WatchErrorHandler>,
    pub(crate) reflector_config: Option<ReflectorConfig<K>>,
    pub(crate) shards: Shards,
}

impl<K> fmt::Debug for InformerBuilder<K> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("InformerBuilder")
            .field("name", &self.name)
            .field("resync", &self.resync)
            .field("queue", &self.queue)
            .field("streaming_list", &self.streaming_list)
            .field("relist_by_page", &self.relist_by_page)
            .field("transform", &self.transform.is_some())
            .field("shards", &self.shards)
            .finish_non_exhaustive()
    }
}

impl<K: Send + Sync + 'static> InformerBuilder<K> {
    pub(crate) fn new(
        lister_watcher: impl ListerWatcher<K> + 'static,
        identity: impl Identity<K>,
    ) -> Self {
        Self {
            lister_watcher: BoxListerWatcher::new(lister_watcher),
            identity: Arc::new(identity),
            cache: None,
            resync: Duration::ZERO,
            name: None,
            panic_policy: PanicPolicy::default(),
            pool: None,
            queue: QueueKind::InOrder,
            streaming_list: true,
            relist_by_page: false,
            transform: None,
            watch_error_handler: None,
            reflector_config: None,
            shards: Shards::default(),
        }
    }

    /// Every handler's default resync period (default: zero, none). A handler may ask for its
    /// own ([`HandlerOptions::resync_period`](crate::HandlerOptions::resync_period)).
    #[must_use]
    pub fn resync(mut self, period: Duration) -> Self {
        self.resync = period;
        self
    }

    /// The informer's cache: any [`Indexer`], with the indexes it already has (the identity's
    /// are not added to it), which must file objects by the identity's key. Default: a
    /// [`ThreadSafeStore`] with the identity's indexes. More indexes, on either, with
    /// [`SharedIndexInformer::add_indexers`].
    #[must_use]
    pub fn cache(mut self, cache: Arc<dyn Indexer<K>>) -> Self {
        self.cache = Some(cache);
        self
    }

    /// The name in its log lines and its reflector's (default: the object type's name; a
    /// factory names each informer by resource and selection).
    #[must_use]
    pub fn name(mut self, name: impl Into<String>) -> Self {
        self.name = Some(name.into());
        self
    }

    /// What a panicking handler does (default: [`PanicPolicy::Continue`]).
    #[must_use]
    pub fn panic_policy(mut self, policy: PanicPolicy) -> Self {
        self.panic_policy = policy;
        self
    }

    /// The pool its synchronous work (pop loop, synchronous handlers) runs on (default: the
    /// process-wide [`DeliveryPool::global`]).
    #[must_use]
    pub fn pool(mut self, pool: Arc<DeliveryPool>) -> Self {
        self.pool = Some(pool);
        self
    }

    /// The queue between the reflector and the cache (default: [`QueueKind::InOrder`], the
    /// atomic in-order queue, as client-go 1.36's informers).
    #[must_use]
    pub fn queue(mut self, kind: QueueKind<K>) -> Self {
        self.queue = kind;
        self
    }

    /// Whether to get the initial state, on the first list and every relist, as a streaming
    /// list (a watch with `sendInitialEvents=true`), falling back to list and watch when the
    /// server refuses; the identity's key files the objects. Default: on, as client-go 1.35+'s
    /// informers (`WatchListClient`); it takes effect only over a lister-watcher that can serve
    /// streaming lists (the kube adapter's:
    /// [`ListerWatcher::supports_streaming_list`](informer_reflector::ListerWatcher::supports_streaming_list)).
    #[must_use]
    pub fn streaming_list(mut self, enabled: bool) -> Self {
        self.streaming_list = enabled;
        self
    }

    /// Whether to apply each page of a relist as it arrives, instead of holding the whole list
    /// until its last page: the objects a relist replaces are freed as it goes, so its peak
    /// memory is the cache and a few pages rather than two copies of the collection (default:
    /// off). The first list (or streaming list) goes by page either way: the informer is not
    /// synced before its end, and its pages are cached as they arrive, so that a cache which
    /// keeps objects in another form (a compact cache) never holds the whole list decoded. A
    /// relist that fails part way leaves its first pages applied, with nothing deleted until a
    /// list succeeds (see
    /// [`Reflector::with_relist_by_page`](informer_reflector::Reflector::with_relist_by_page)).
    /// It trades the atomic relist of the default queue for that memory: the cache's readers
    /// see the pages land one by one, and the deletions after the last.
    #[must_use]
    pub fn relist_by_page(mut self, enabled: bool) -> Self {
        self.relist_by_page = enabled;
        self
    }

    /// The transform applied to objects as they enter the queue (default: none).
    #[must_use]
    pub fn transform(mut self, transform: TransformFunc<K>) -> Self {
        self.transform = Some(transform);
        self
    }

    /// The callback told about every list and watch failure (default:
    /// [`default_watch_error_handler`](informer_reflector::default_watch_error_handler)).
    #[must_use]
    pub fn watch_error_handler(mut self, handler: WatchErrorHandler) -> Self {
        self.watch_error_handler = Some(handler);
        self
    }

    /// Adjusts the reflector before it runs (backoff, page size, an observer), after any
    /// adjustment given before.
    #[must_use]
    pub fn reflector_config(
        mut self,
        f: impl FnOnce(InformerReflector<K>) -> InformerReflector<K> + Send + 'static,
    ) -> Self {
        self.reflector_config = Some(match self.reflector_config.take() {
            Some(before) => Box::new(move |r| f(before(r))),
            None => Box::new(f),
        });
        self
    }

    /// Caches only the objects of `shards` (KEP-5866's server-side sharded list and watch, with
    /// the same filter on the client): sent as `shardSelector` on every list and watch, and
    /// every listed object and watch event outside it dropped here too, so that a server which
    /// ignores the selector gives the same cache and events as one which applies it. Default:
    /// every object. Change it while the informer runs with
    /// [`SharedIndexInformer::set_shards`]. The identity must read the hashed values
    /// ([`Identity::uid`], [`Identity::namespace`], [`Identity::controller_uid`]); an object
    /// without one hashes as `""`.
    #[must_use]
    pub fn shards(self, shards: ShardSelector) -> Self {
        self.shards.selector.send_replace(Some(shards));
        self
    }

    /// Whose value decides an object's shard (default: [`ShardBy::Object`], its own uid or
    /// namespace; [`ShardBy::Owner`] follows the controller owner's uid, filtered on the
    /// client only).
    #[must_use]
    pub fn shard_by(mut self, by: ShardBy) -> Self {
        self.shards.by = by;
        self
    }

    /// The name the informer will have.
    pub fn current_name(&self) -> String {
        self.name
            .clone()
            .unwrap_or_else(|| std::any::type_name::<K>().to_owned())
    }

    /// The informer, its configuration frozen.
    pub fn build(mut self) -> SharedIndexInformer<K> {
        let cache = self.cache.take().unwrap_or_else(|| {
            Arc::new(ThreadSafeStore::with_indexers(
                identity_key_func(&self.identity),
                self.identity.indexers(),
            ))
        });
        SharedIndexInformer::from_builder(self, cache)
    }
}
