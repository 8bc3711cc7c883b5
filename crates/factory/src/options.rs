//! [`InformerOptions`]: which informer a request asks for, where it differs from the factory's
//! defaults.

use std::fmt;
use std::sync::Arc;

use informer_fifo::TransformFunc;
use informer_reflector::{ShardBy, ShardSelector};
use informer_store::{Indexer, Indexers, KeyFunc};

use crate::source::Selection;

/// Which informer a request to
/// [`informer_with`](crate::SharedInformerFactory::informer_with) asks for: what it caches
/// (namespace, selectors, shard set, transform, cache kind), each left unset falling back to the
/// factory's default.
///
/// Every option is part of the key the informer is shared under (the transform and the cache
/// by their *names*: functions cannot be compared, so two requests naming the same transform
/// get the informer built with the first one's function). How an informer runs (resync,
/// streaming list, queue, reflector settings) is set for the whole factory or per type with
/// [`configure`](crate::SharedInformerFactory::configure), never per request; a consumer that
/// wants its own resync period asks for it when it registers (`HandlerOptions::resync`).
pub struct InformerOptions<O> {
    pub(crate) namespace: Option<String>,
    pub(crate) label_selector: Option<String>,
    pub(crate) field_selector: Option<String>,
    pub(crate) transform: Option<(String, TransformFunc<O>)>,
    pub(crate) cache: Option<(String, CacheBuilder<O>)>,
    pub(crate) shards: Option<Option<ShardSelector>>,
    pub(crate) shard_by: Option<ShardBy>,
}

/// Builds an informer's cache from its key function and indexers: how an informer gets a cache
/// other than the default `ThreadSafeStore` (e.g. an `informer_store::CompactStore`).
pub type CacheBuilder<O> =
    Arc<dyn Fn(KeyFunc<O>, Indexers<O>) -> Arc<dyn Indexer<O>> + Send + Sync>;

impl<O> Default for InformerOptions<O> {
    fn default() -> Self {
        Self {
            namespace: None,
            label_selector: None,
            field_selector: None,
            transform: None,
            cache: None,
            shards: None,
            shard_by: None,
        }
    }
}

impl<O> Clone for InformerOptions<O> {
    fn clone(&self) -> Self {
        Self {
            namespace: self.namespace.clone(),
            label_selector: self.label_selector.clone(),
            field_selector: self.field_selector.clone(),
            transform: self.transform.clone(),
            cache: self.cache.clone(),
            shards: self.shards.clone(),
            shard_by: self.shard_by,
        }
    }
}

impl<O> fmt::Debug for InformerOptions<O> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("InformerOptions")
            .field("namespace", &self.namespace)
            .field("label_selector", &self.label_selector)
            .field("field_selector", &self.field_selector)
            .field("transform", &self.transform.as_ref().map(|(name, _)| name))
            .field("cache", &self.cache.as_ref().map(|(name, _)| name))
            .field("shards", &self.shards)
            .field("shard_by", &self.shard_by)
            .finish()
    }
}

impl<O> InformerOptions<O> {
    /// Options that change nothing: the factory's defaults.
    pub fn new() -> Self {
        Self::default()
    }

    /// Watch `namespace` only; `""` means all namespaces, whatever the factory's default.
    #[must_use]
    pub fn namespace(mut self, namespace: impl Into<String>) -> Self {
        self.namespace = Some(namespace.into());
        self
    }

    /// Narrow by this label selector; `""` means none, whatever the factory's default.
    #[must_use]
    pub fn labels(mut self, selector: impl Into<String>) -> Self {
        self.label_selector = Some(selector.into());
        self
    }

    /// Narrow by this field selector; `""` means none, whatever the factory's default.
    #[must_use]
    pub fn fields(mut self, selector: impl Into<String>) -> Self {
        self.field_selector = Some(selector.into());
        self
    }

    /// Transform objects with `transform` as they enter the queue (to drop fields the
    /// program never reads, say). `name` identifies it in the sharing key.
    #[must_use]
    pub fn transform(mut self, name: impl Into<String>, transform: TransformFunc<O>) -> Self {
        self.transform = Some((name.into(), transform));
        self
    }

    /// Gives the informer a cache of its own kind, built by `build` (e.g. a compact cache that
    /// holds its objects encoded: `informer_kube::compact_cache`). Requests for the same
    /// resource and selection with the same cache name (and transform) share one informer.
    #[must_use]
    pub fn cache(mut self, name: impl Into<String>, build: CacheBuilder<O>) -> Self {
        self.cache = Some((name.into(), build));
        self
    }

    /// Cache only the objects of `shards` (KEP-5866; `None`: every object, whatever the
    /// factory's default). Each shard set is its own informer: two replicas' sets, or a
    /// replica's set and the whole collection, are never shared. See
    /// `InformerBuilder::shards` for what is sent and filtered.
    #[must_use]
    pub fn shards(mut self, shards: Option<ShardSelector>) -> Self {
        self.shards = Some(shards);
        self
    }

    /// Decide an object's shard as `by` says ([`ShardBy::Owner`]: by its controller owner's
    /// uid, filtered on the client only). Part of the sharing key.
    #[must_use]
    pub fn shard_by(mut self, by: ShardBy) -> Self {
        self.shard_by = Some(by);
        self
    }

    /// The selection these options give over the factory's `defaults`.
    pub(crate) fn selection(&self, defaults: &Selection) -> Selection {
        let mut selection = defaults.clone();
        if let Some(ns) = &self.namespace {
            selection = selection.namespace(ns.as_str());
        }
        if let Some(labels) = &self.label_selector {
            selection = selection.labels(labels.as_str());
        }
        if let Some(fields) = &self.field_selector {
            selection = selection.fields(fields.as_str());
        }
        if let Some(shards) = &self.shards {
            selection = selection.shards(shards.clone());
        }
        if let Some(by) = self.shard_by {
            selection = selection.shard_by(by);
        }
        selection
    }
}
