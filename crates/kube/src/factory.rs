//! [`KubeInformerFactory`]: the shared informer factory over a `kube::Client`.

use std::fmt;
use std::marker::PhantomData;
use std::sync::Arc;

use informer_factory::{ListerWatcherSource, Selection, SharedInformerFactory};
use informer_store::Selector;
use informer_store::SharedIdentity;
use kube::core::{ClusterResourceScope, NamespaceResourceScope, PartialObjectMeta, SelectorExt};
use kube::{Api, Client, Resource};
use serde::de::DeserializeOwned;

use crate::key::KubeIdentity;
use crate::lister_watcher::{KubeListerWatcher, MetadataListerWatcher};

/// Names the metadata-only view of `K` to a factory: `factory.informer::<Metadata<Pod>>()`
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
/// [`Metadata<K>`], and a `KubeListerWatcher<DynamicObject>` for a
/// [`DynamicResource`](crate::DynamicResource) known only at run time (through
/// [`DynamicListerWatcherSource`](informer_factory::DynamicListerWatcherSource)). Every
/// informer starts with the `namespace` index, as in client-go.
#[derive(Clone)]
pub struct KubeSource {
    client: Client,
    pub(crate) without_managed_fields: bool,
    json_only: bool,
}

impl From<Client> for KubeSource {
    fn from(client: Client) -> Self {
        Self::new(client)
    }
}

impl fmt::Debug for KubeSource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("KubeSource")
            .field("default_namespace", &self.client.default_namespace())
            .field("without_managed_fields", &self.without_managed_fields)
            .field("json_only", &self.json_only)
            .finish_non_exhaustive()
    }
}

impl KubeSource {
    /// A source over `client`, used as given. Build it with [`client_from_config`] (or with
    /// `default_retry = false` in its `kube::Config`) so that the reflector sees every 429 and
    /// 503: a client with kube-client's retry layer (the default of `Client::try_default()`)
    /// retries them itself, invisibly, before the reflector's own rules apply.
    pub fn new(client: Client) -> Self {
        Self {
            client,
            without_managed_fields: true,
            json_only: false,
        }
    }

    /// Every informer of this source keeps `metadata.managedFields` in its objects. By default
    /// a source leaves them out as objects are decoded ([`without_managed_fields`]): they are
    /// half of a real object's memory (a realistic pod's `fieldsV1` trees: about 48 KB of
    /// 97 KB), controllers do not read them (server-side apply conflicts are the server's
    /// business), and dropping them there costs nothing, where dropping them after the decode
    /// costs a free of every tree. Keep them for a tool that shows or audits field ownership.
    ///
    /// [`without_managed_fields`]: Self::without_managed_fields
    #[must_use]
    pub fn with_managed_fields(mut self) -> Self {
        self.without_managed_fields = false;
        self
    }

    /// Every informer of this source asks for JSON only ([`KubeListerWatcher::json_only`]).
    /// By default built-in types are read as protobuf when the server sends it.
    #[must_use]
    pub fn json_only(mut self) -> Self {
        self.json_only = true;
        self
    }

    /// Every informer of this source leaves `metadata.managedFields` out of its objects as
    /// they are decoded ([`KubeListerWatcher::without_managed_fields`]): what
    /// [`strip_managed_fields`](crate::strip_managed_fields) does as a transform, for every
    /// resource, without building the managed fields first. The default; undone by
    /// [`with_managed_fields`](Self::with_managed_fields).
    #[must_use]
    pub fn without_managed_fields(mut self) -> Self {
        self.without_managed_fields = true;
        self
    }

    /// A source over [`default_client`]: the usual kubeconfig or in-cluster configuration,
    /// without kube-client's retry layer.
    pub async fn try_default() -> Result<Self, kube::Error> {
        Ok(Self::new(default_client().await?))
    }

    /// A source over a client built from `config` by [`client_from_config`] (without
    /// kube-client's retry layer, whatever `config.default_retry` says).
    pub fn try_from_config(config: kube::Config) -> Result<Self, kube::Error> {
        Ok(Self::new(client_from_config(config)?))
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
        if self.without_managed_fields {
            lw = lw.without_managed_fields();
        }
        if self.json_only {
            lw = lw.json_only();
        }
        if let Some(labels) = &selection.label_selector {
            lw = lw.labels(labels.as_str());
        }
        if let Some(fields) = &selection.field_selector {
            lw = lw.fields(fields.as_str());
        }
        lw
    }

    fn identity(&self) -> SharedIdentity<K> {
        Arc::new(KubeIdentity)
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
        if self.without_managed_fields {
            lw = lw.without_managed_fields();
        }
        if let Some(labels) = &selection.label_selector {
            lw = lw.labels(labels.as_str());
        }
        if let Some(fields) = &selection.field_selector {
            lw = lw.fields(fields.as_str());
        }
        lw
    }

    fn identity(&self) -> SharedIdentity<PartialObjectMeta<K>> {
        Arc::new(KubeIdentity)
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
/// The client speaks HTTP/1.1 (kube-client builds no other), uncompressed unless this crate's
/// `gzip` feature is on; with it, lists ask for gzip unless `config.disable_compression` is
/// set (watches never do: a 1.37 server's gzip of streaming lists, one gzip member per event,
/// is more than kube-client's decompression reads). docs/benchmarks.md ("SYNC-WIRE") has what
/// each costs and buys.
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
/// It is [`SharedInformerFactory`] over a [`KubeSource`], so every operation has one name:
/// `informer::<Pod>()`, `informer_with::<Pod>(options)`, `informer::<Metadata<Pod>>()` for
/// the metadata-only view, `lister::<Pod>()`, `start`, `wait_for_cache_sync`, `shutdown`.
///
/// ```no_run
/// use std::time::Duration;
/// use informer_kube::{KubeInformerFactory, KubeSource};
/// use k8s_openapi::api::core::v1::{Node, Pod};
///
/// # async fn run() -> Result<(), Box<dyn std::error::Error>> {
/// let factory = KubeInformerFactory::new(KubeSource::try_default().await?);
/// let pods = factory.informer::<Pod>();
/// let nodes = factory.lister::<Node>();
/// factory.start()?;
/// let report = factory.wait_for_cache_sync(Some(Duration::from_secs(60))).await;
/// assert!(report.all_synced(), "{report}");
/// println!("{} pods, {} nodes", pods.lister().len(), nodes.len());
/// factory.shutdown().await?;
/// # Ok(()) }
/// ```
pub type KubeInformerFactory = SharedInformerFactory<KubeSource>;

/// A label selector for [`Lister::list`](informer_store::Lister::list) over Kubernetes objects: kube's
/// [`Selector`](kube::core::Selector), matched against `metadata.labels`.
///
/// ```
/// use informer_store::Selector;
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
