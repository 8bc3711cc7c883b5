//! [`ListerWatcherSource`]: where a factory gets the lister-watcher, key function and default
//! indexes of each resource it is asked for.

use std::fmt;
use std::hash::Hash;

use informer_reflector::{ListerWatcher, ShardBy, ShardSelector};
use informer_store::SharedIdentity;

/// What an informer lists and watches: a namespace, label / field selectors, and a shard set.
///
/// Part of the key under which a factory shares informers: two requests for the same resource
/// with equal selections (and the same transform) get the same informer; informers for
/// different shard sets are different informers.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Selection {
    /// The namespace to watch; `None` for all namespaces (and for cluster-scoped resources).
    pub namespace: Option<String>,
    /// A label selector (`app=web,tier!=db`), in the API server's syntax.
    pub label_selector: Option<String>,
    /// A field selector (`spec.nodeName=node-1`), in the API server's syntax.
    pub field_selector: Option<String>,
    /// The shard set (KEP-5866) the informer caches; `None` for every object. The informer
    /// sends it as `shardSelector` and filters by it on the client too
    /// (`InformerBuilder::shards`); a source need not apply it.
    pub shards: Option<ShardSelector>,
    /// Whose value decides an object's shard (`InformerBuilder::shard_by`).
    pub shard_by: ShardBy,
}

impl Selection {
    /// Everything: all namespaces, no selectors.
    pub fn all() -> Self {
        Self::default()
    }

    /// The same selection, in `namespace` only (`""` means all namespaces).
    #[must_use]
    pub fn namespace(mut self, namespace: impl Into<String>) -> Self {
        let namespace = namespace.into();
        self.namespace = (!namespace.is_empty()).then_some(namespace);
        self
    }

    /// The same selection, narrowed by a label selector (`""` removes it).
    #[must_use]
    pub fn labels(mut self, selector: impl Into<String>) -> Self {
        let selector = selector.into();
        self.label_selector = (!selector.is_empty()).then_some(selector);
        self
    }

    /// The same selection, narrowed to the objects of `shards` (`None` removes it).
    #[must_use]
    pub fn shards(mut self, shards: Option<ShardSelector>) -> Self {
        self.shards = shards;
        self
    }

    /// The same selection, its objects' shards decided as `by` says.
    #[must_use]
    pub fn shard_by(mut self, by: ShardBy) -> Self {
        self.shard_by = by;
        self
    }

    /// The same selection, narrowed by a field selector (`""` removes it).
    #[must_use]
    pub fn fields(mut self, selector: impl Into<String>) -> Self {
        let selector = selector.into();
        self.field_selector = (!selector.is_empty()).then_some(selector);
        self
    }
}

/// A source of lister-watchers for the resources a factory serves: the factory's only link to
/// an API server.
///
/// `R` names the resource asked for (`factory.informer::<R>()`); the informer caches
/// [`Object`](Self::Object)s, which is usually `R` itself. Keeping the two apart lets one source
/// serve several views of a type (a kube source serves `Pod` as full objects and
/// `Metadata<Pod>` as metadata only), each with its own informer.
///
/// Both methods are required: the lister-watcher of a selection, and the [`Identity`](informer_store::Identity) of the
/// objects (their key, resource version and the indexes every informer of the resource starts
/// with: client-go adds the `namespace` index).
pub trait ListerWatcherSource<R: ?Sized>: Send + Sync + 'static {
    /// The objects the informer caches.
    type Object: Send + Sync + 'static;
    /// The lister-watcher the informer runs on.
    type ListerWatcher: ListerWatcher<Self::Object> + 'static;

    /// A lister-watcher for `selection`. Called once per informer the factory creates.
    fn lister_watcher(&self, selection: &Selection) -> Self::ListerWatcher;

    /// What identifies an object: its key (`namespace/name` for Kubernetes objects), its
    /// resource version, and the indexes each new informer of this resource starts with.
    fn identity(&self) -> SharedIdentity<Self::Object>;
}

/// A source of lister-watchers for resources named at run time by a value of type `P`, rather
/// than by a Rust type: custom resources found by discovery, say (`informer-kube` serves
/// `DynamicObject`s of a `DynamicResource` this way; client-go's `dynamicinformer`).
///
/// A factory asked for [`informer_for(&resource)`](crate::SharedInformerFactory::informer_for)
/// shares informers per `P` value, selection and transform: two requests for equal resources
/// get one informer, two different resources an informer each. The value's
/// [`Display`](fmt::Display) names the informer (in its threads and in sync reports).
///
/// The methods are those of [`ListerWatcherSource`], each given the resource asked for.
pub trait DynamicListerWatcherSource<P>: Send + Sync + 'static
where
    P: Clone + Eq + Hash + fmt::Display + Send + Sync + 'static,
{
    /// The objects the informer caches.
    type Object: Send + Sync + 'static;
    /// The lister-watcher the informer runs on.
    type ListerWatcher: ListerWatcher<Self::Object> + 'static;

    /// A lister-watcher for `resource` and `selection`. Called once per informer the factory
    /// creates.
    fn lister_watcher(&self, resource: &P, selection: &Selection) -> Self::ListerWatcher;

    /// What identifies an object of `resource` (see [`ListerWatcherSource::identity`]).
    fn identity(&self, resource: &P) -> SharedIdentity<Self::Object>;
}
