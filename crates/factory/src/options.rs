//! [`InformerOptions`]: how one informer differs from the factory's defaults.

use std::fmt;
use std::time::Duration;

use std::sync::Arc;

use informer_fifo::TransformFunc;
use informer_store::{Indexer, Indexers, KeyFunc};

use crate::source::Selection;

/// Per-informer options for
/// [`informer_with`](crate::SharedInformerFactory::informer_with): each one left unset falls
/// back to the factory's default.
///
/// The namespace, the selectors and the transform's *name* are part of the key the informer is
/// shared under; the transform function itself cannot be compared, so two requests naming the
/// same transform get the informer built with the first one's function.
pub struct InformerOptions<O> {
    pub(crate) namespace: Option<String>,
    pub(crate) label_selector: Option<String>,
    pub(crate) field_selector: Option<String>,
    pub(crate) transform: Option<(String, TransformFunc<O>)>,
    pub(crate) resync: Option<Duration>,
    pub(crate) streaming_list: Option<bool>,
    pub(crate) relist_by_page: Option<bool>,
    pub(crate) cache: Option<(String, CacheBuilder<O>)>,
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
            resync: None,
            streaming_list: None,
            relist_by_page: None,
            cache: None,
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
            resync: self.resync,
            streaming_list: self.streaming_list,
            relist_by_page: self.relist_by_page,
            cache: self.cache.clone(),
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
            .field("resync", &self.resync)
            .field("streaming_list", &self.streaming_list)
            .field("relist_by_page", &self.relist_by_page)
            .field("cache", &self.cache.as_ref().map(|(name, _)| name))
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

    /// This resync period for a new informer, instead of the factory's for the type. Not part
    /// of the sharing key: an informer that exists already keeps its own.
    #[must_use]
    pub fn resync(mut self, period: Duration) -> Self {
        self.resync = Some(period);
        self
    }

    /// Get a new informer's initial state as a streaming list (`sendInitialEvents`), falling
    /// back to list and watch where the server refuses, instead of the factory's default. Not
    /// part of the sharing key: an informer that exists already keeps its own.
    #[must_use]
    pub fn streaming_list(mut self, enabled: bool) -> Self {
        self.streaming_list = Some(enabled);
        self
    }

    /// Apply each page of a new informer's relists as it arrives (see
    /// [`InformerBuilder::relist_by_page`](informer::InformerBuilder::relist_by_page)),
    /// instead of the factory's default. Not part of the sharing key: an informer that exists
    /// already keeps its own.
    #[must_use]
    pub fn relist_by_page(mut self, enabled: bool) -> Self {
        self.relist_by_page = Some(enabled);
        self
    }

    /// The selection these options give over the factory's `defaults`.
    /// Gives the informer a cache of its own kind, built by `build` (e.g. a compact cache that
    /// holds its objects encoded: `informer_kube::compact_cache`). Requests for the same
    /// resource and selection with the same cache name (and transform) share one informer.
    #[must_use]
    pub fn cache(mut self, name: impl Into<String>, build: CacheBuilder<O>) -> Self {
        self.cache = Some((name.into(), build));
        self
    }

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
        selection
    }
}
