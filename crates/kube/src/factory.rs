//! [`KubeInformerFactory`]: the shared informer factory over a `kube::Client`.

use std::fmt;
use std::marker::PhantomData;
use std::ops::Deref;
use std::sync::Arc;
use std::time::Duration;

use informer_controller::{ResourceVersionFunc, SharedIndexInformer};
use informer_factory::{
    InformerOptions, ListerWatcherSource, ResourceLister, Selection, Selector,
    SharedInformerFactory,
};
use informer_store::{Indexers, KeyFunc, NAMESPACE_INDEX, indexers};
use kube::core::{ClusterResourceScope, NamespaceResourceScope, PartialObjectMeta, SelectorExt};
use kube::{Api, Client, Resource};
use serde::de::DeserializeOwned;

use crate::key::{key_func, namespace_index_func};
use crate::lister_watcher::{KubeListerWatcher, MetadataListerWatcher};

/// The informer a [`KubeInformerFactory`] hands out for `K`.
pub type KubeInformer<K> = SharedIndexInformer<K, KubeListerWatcher<K>>;

/// The metadata-only informer a [`KubeInformerFactory`] hands out for `K`.
pub type MetadataInformer<K> = SharedIndexInformer<PartialObjectMeta<K>, MetadataListerWatcher<K>>;

/// Names the metadata-only view of `K` to a factory: `factory.informer_for::<Metadata<Pod>>()`
/// caches [`PartialObjectMeta<Pod>`](PartialObjectMeta), listed and watched through the
/// metadata API, in an informer of its own.
pub struct Metadata<K>(PhantomData<fn() -> K>);

impl<K> fmt::Debug for Metadata<K> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Metadata")
    }
}

/// How a resource's scope builds its [`Api`]: a namespaced resource is listed in one namespace
/// or in all of them; a cluster-scoped one always cluster-wide (a namespace is ignored, as in
/// client-go's generated informers).
pub trait ApiScope {
    /// The api for `K` in `namespace` (`None`: all namespaces).
    fn api<K>(client: Client, namespace: Option<&str>) -> Api<K>
    where
        K: Resource<Scope = Self>,
        K::DynamicType: Default;
}

impl ApiScope for NamespaceResourceScope {
    fn api<K>(client: Client, namespace: Option<&str>) -> Api<K>
    where
        K: Resource<Scope = Self>,
        K::DynamicType: Default,
    {
        match namespace {
            Some(ns) => Api::namespaced(client, ns),
            None => Api::all(client),
        }
    }
}

impl ApiScope for ClusterResourceScope {
    fn api<K>(client: Client, _namespace: Option<&str>) -> Api<K>
    where
        K: Resource<Scope = Self>,
        K::DynamicType: Default,
    {
        Api::all(client)
    }
}

/// The [`ListerWatcherSource`] over a `kube::Client`: a [`KubeListerWatcher`] for every
/// k8s-openapi (or derived custom) resource `K`, a [`MetadataListerWatcher`] for
/// [`Metadata<K>`]. Every informer starts with the `namespace` index, as in client-go.
#[derive(Clone)]
pub struct KubeSource {
    client: Client,
}

impl fmt::Debug for KubeSource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("KubeSource")
            .field("default_namespace", &self.client.default_namespace())
            .finish_non_exhaustive()
    }
}

impl KubeSource {
    /// A source over `client`.
    pub fn new(client: Client) -> Self {
        Self { client }
    }

    /// The client.
    pub fn client(&self) -> &Client {
        &self.client
    }

    fn api<K>(&self, selection: &Selection) -> Api<K>
    where
        K: Resource,
        K::Scope: ApiScope,
        K::DynamicType: Default,
    {
        <K::Scope as ApiScope>::api(self.client.clone(), selection.namespace.as_deref())
    }
}

fn resource_version_func<K: Resource + 'static>() -> ResourceVersionFunc<K> {
    Arc::new(|o: &K| o.meta().resource_version.as_deref())
}

impl<K> ListerWatcherSource<K> for KubeSource
where
    K: Resource + Clone + DeserializeOwned + fmt::Debug + Send + Sync + 'static,
    K::DynamicType: Default,
    K::Scope: ApiScope,
{
    type Object = K;
    type ListerWatcher = KubeListerWatcher<K>;

    fn lister_watcher(&self, selection: &Selection) -> KubeListerWatcher<K> {
        let mut lw = KubeListerWatcher::new(self.api::<K>(selection));
        if let Some(labels) = &selection.label_selector {
            lw = lw.labels(labels.as_str());
        }
        if let Some(fields) = &selection.field_selector {
            lw = lw.fields(fields.as_str());
        }
        lw
    }

    fn key_func(&self) -> KeyFunc<K> {
        key_func::<K>()
    }

    fn resource_version_func(&self) -> ResourceVersionFunc<K> {
        resource_version_func::<K>()
    }

    fn indexers(&self) -> Indexers<K> {
        indexers([(NAMESPACE_INDEX, namespace_index_func::<K>())])
    }
}

impl<K> ListerWatcherSource<Metadata<K>> for KubeSource
where
    K: Resource + Clone + DeserializeOwned + fmt::Debug + Send + Sync + 'static,
    K::DynamicType: Default,
    K::Scope: ApiScope,
{
    type Object = PartialObjectMeta<K>;
    type ListerWatcher = MetadataListerWatcher<K>;

    fn lister_watcher(&self, selection: &Selection) -> MetadataListerWatcher<K> {
        let mut lw = MetadataListerWatcher::new(self.api::<K>(selection));
        if let Some(labels) = &selection.label_selector {
            lw = lw.labels(labels.as_str());
        }
        if let Some(fields) = &selection.field_selector {
            lw = lw.fields(fields.as_str());
        }
        lw
    }

    fn key_func(&self) -> KeyFunc<PartialObjectMeta<K>> {
        key_func::<PartialObjectMeta<K>>()
    }

    fn resource_version_func(&self) -> ResourceVersionFunc<PartialObjectMeta<K>> {
        resource_version_func::<PartialObjectMeta<K>>()
    }

    fn indexers(&self) -> Indexers<PartialObjectMeta<K>> {
        indexers([(
            NAMESPACE_INDEX,
            namespace_index_func::<PartialObjectMeta<K>>(),
        )])
    }
}

/// A `kube::Client` built by kube's usual rules (`$KUBECONFIG` or `~/.kube/config` and its
/// current context, else the in-cluster service account), without kube-client's retry layer:
/// see [`client_from_config`].
pub async fn default_client() -> Result<Client, kube::Error> {
    client_from_config(
        kube::Config::infer()
            .await
            .map_err(kube::Error::InferConfig)?,
    )
}

/// A `kube::Client` from `config`, with kube-client's own retry layer turned off
/// (`default_retry = false`).
///
/// The reflector decides every retry and relist: a 429 waits for its Retry-After and re-watches,
/// a 503 on a list backs off and lists again, and each of these reaches the watch error handler.
/// kube-client's retry layer would instead repeat 429/503/504 answers inside one request, out
/// of the reflector's sight and on top of its own backoff. A client built any other way (e.g.
/// `Client::try_default()`) keeps that layer; [`KubeInformerFactory::new`] uses such a client
/// as given.
pub fn client_from_config(mut config: kube::Config) -> Result<Client, kube::Error> {
    config.default_retry = false;
    Client::try_from(config)
}

/// The shared informer factory over a `kube::Client` (client-go's
/// `informers.NewSharedInformerFactory`): one informer per resource type and selection.
///
/// Everything of [`SharedInformerFactory`] is reachable through `Deref`: `start`,
/// `wait_for_cache_sync`, `shutdown`, `informers`... The builder methods here return the kube
/// factory itself.
///
/// ```no_run
/// use std::time::Duration;
/// use informer_kube::KubeInformerFactory;
/// use k8s_openapi::api::core::v1::{Node, Pod};
///
/// # async fn run() -> Result<(), Box<dyn std::error::Error>> {
/// let factory = KubeInformerFactory::try_default().await?;
/// let pods = factory.informer::<Pod>();
/// let nodes = factory.lister::<Node>();
/// factory.start()?;
/// let report = factory.wait_for_cache_sync(Some(Duration::from_secs(60))).await;
/// assert!(report.all_synced(), "{report}");
/// println!("{} pods, {} nodes", pods.lister().len(), nodes.len());
/// factory.shutdown().await?;
/// # Ok(()) }
/// ```
#[derive(Debug)]
pub struct KubeInformerFactory {
    inner: SharedInformerFactory<KubeSource>,
}

impl Deref for KubeInformerFactory {
    type Target = SharedInformerFactory<KubeSource>;

    fn deref(&self) -> &Self::Target {
        &self.inner
    }
}

impl KubeInformerFactory {
    /// A factory over `client`: all namespaces, no selectors, no resync.
    ///
    /// The client is used as given. Build it with [`client_from_config`] (or with
    /// `default_retry = false` in its `kube::Config`) so that the reflector sees every 429 and
    /// 503: a client with kube-client's retry layer (the default of `Client::try_default()`)
    /// retries them itself, invisibly, before the reflector's own rules apply.
    pub fn new(client: Client) -> Self {
        Self {
            inner: SharedInformerFactory::new(KubeSource::new(client)),
        }
    }

    /// A factory over [`default_client`]: the usual kubeconfig or in-cluster configuration,
    /// without kube-client's retry layer.
    pub async fn try_default() -> Result<Self, kube::Error> {
        Ok(Self::new(default_client().await?))
    }

    /// A factory over a client built from `config` by [`client_from_config`] (without
    /// kube-client's retry layer, whatever `config.default_retry` says).
    pub fn try_from_config(config: kube::Config) -> Result<Self, kube::Error> {
        Ok(Self::new(client_from_config(config)?))
    }

    fn map(
        self,
        f: impl FnOnce(SharedInformerFactory<KubeSource>) -> SharedInformerFactory<KubeSource>,
    ) -> Self {
        Self {
            inner: f(self.inner),
        }
    }

    /// Every informer watches `namespace` only, unless its options say otherwise (`""`: all).
    #[must_use]
    pub fn with_namespace(self, namespace: impl Into<String>) -> Self {
        self.map(|f| f.with_namespace(namespace))
    }

    /// Every informer is narrowed by these label and field selectors (`""`: none).
    #[must_use]
    pub fn with_selectors(self, labels: impl Into<String>, fields: impl Into<String>) -> Self {
        self.map(|f| f.with_selectors(labels, fields))
    }

    /// The resync period of every informer without a per-type one.
    #[must_use]
    pub fn with_default_resync(self, period: Duration) -> Self {
        self.map(|f| f.with_default_resync(period))
    }

    /// Every informer gets its initial state as a streaming list (`sendInitialEvents=true`),
    /// falling back to list and watch where the server refuses (with a warning naming the
    /// server's reason), unless its options say otherwise. The informer's own key function
    /// files the streamed objects: nothing to repeat here.
    #[must_use]
    pub fn with_streaming_list(self, enabled: bool) -> Self {
        self.map(|f| f.with_streaming_list(enabled))
    }

    /// The resync period of `K`'s informers.
    #[must_use]
    pub fn with_resync_for<K: 'static>(self, period: Duration) -> Self {
        self.map(|f| f.with_resync_for::<K>(period))
    }

    /// Adjusts each new informer of `K` (queue, reflector settings, panic policy); see
    /// [`SharedInformerFactory::configure`].
    #[must_use]
    pub fn configure<K>(
        self,
        f: impl Fn(KubeInformer<K>) -> KubeInformer<K> + Send + Sync + 'static,
    ) -> Self
    where
        K: Resource + Clone + DeserializeOwned + fmt::Debug + Send + Sync + 'static,
        K::DynamicType: Default,
        K::Scope: ApiScope,
    {
        self.map(|factory| factory.configure::<K>(f))
    }

    /// The client informers list and watch through.
    pub fn client(&self) -> &Client {
        self.inner.source().client()
    }

    /// The factory underneath.
    pub fn into_inner(self) -> SharedInformerFactory<KubeSource> {
        self.inner
    }

    /// The shared informer of `K` with the factory's defaults.
    pub fn informer<K>(&self) -> Arc<KubeInformer<K>>
    where
        K: Resource + Clone + DeserializeOwned + fmt::Debug + Send + Sync + 'static,
        K::DynamicType: Default,
        K::Scope: ApiScope,
    {
        self.inner.informer_for::<K>()
    }

    /// The shared informer of `K` with `options` over the factory's defaults.
    pub fn informer_with_options<K>(&self, options: InformerOptions<K>) -> Arc<KubeInformer<K>>
    where
        K: Resource + Clone + DeserializeOwned + fmt::Debug + Send + Sync + 'static,
        K::DynamicType: Default,
        K::Scope: ApiScope,
    {
        self.inner.informer_with::<K>(options)
    }

    /// The shared metadata-only informer of `K` (its own informer, beside `K`'s full one).
    pub fn metadata_informer<K>(&self) -> Arc<MetadataInformer<K>>
    where
        K: Resource + Clone + DeserializeOwned + fmt::Debug + Send + Sync + 'static,
        K::DynamicType: Default,
        K::Scope: ApiScope,
    {
        self.inner.informer_for::<Metadata<K>>()
    }

    /// A typed lister on the shared informer of `K`.
    pub fn lister<K>(&self) -> ResourceLister<K>
    where
        K: Resource + Clone + DeserializeOwned + fmt::Debug + Send + Sync + 'static,
        K::DynamicType: Default,
        K::Scope: ApiScope,
    {
        self.inner.lister_for::<K>()
    }
}

/// A label selector for [`ResourceLister::list`] over Kubernetes objects: kube's
/// [`Selector`](kube::core::Selector), matched against `metadata.labels`.
///
/// ```
/// use informer_factory::Selector;
/// use informer_kube::LabelSelector;
/// use k8s_openapi::api::core::v1::Pod;
/// use kube::core::Expression;
///
/// let web = LabelSelector::from_iter([("app", "web")]);
/// let not_canary = LabelSelector::from(Expression::DoesNotExist("canary".into()));
/// let mut pod = Pod::default();
/// pod.metadata.labels = Some([("app".to_owned(), "web".to_owned())].into());
/// assert!(web.matches(&pod));
/// assert!(not_canary.matches(&pod));
/// ```
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct LabelSelector(pub kube::core::Selector);

impl From<kube::core::Selector> for LabelSelector {
    fn from(selector: kube::core::Selector) -> Self {
        Self(selector)
    }
}

impl From<kube::core::Expression> for LabelSelector {
    fn from(expression: kube::core::Expression) -> Self {
        Self(expression.into())
    }
}

impl FromIterator<(&'static str, &'static str)> for LabelSelector {
    fn from_iter<T: IntoIterator<Item = (&'static str, &'static str)>>(iter: T) -> Self {
        Self(iter.into_iter().collect())
    }
}

impl fmt::Display for LabelSelector {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

impl<K: Resource> Selector<K> for LabelSelector {
    fn matches(&self, object: &K) -> bool {
        match &object.meta().labels {
            Some(labels) => self.0.matches(labels),
            None => self.0.matches(&Default::default()),
        }
    }

    fn matches_everything(&self) -> bool {
        self.0.selects_all()
    }
}
