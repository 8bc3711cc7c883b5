//! A client for reconcilers: reads from the informers' caches, writes through kube-client, and
//! records what it wrote so that the key's next reconcile waits until the caches show it
//! (read-your-own-writes, see [`Controller::read_your_writes`](crate::Controller::read_your_writes)).

use std::any::{Any, TypeId, type_name};
use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use informer::SharedIndexInformer;
use informer_store::{Everything, Lister};
use kube::core::{ClusterResourceScope, NamespaceResourceScope, SelectorExt};
use kube::{Api, Resource};
use serde::Serialize;
use serde::de::DeserializeOwned;

mod cache;
mod error;
mod writes;

use cache::TypedCache;
pub use error::ClientError;
pub use writes::Deletion;

/// The objects a [`Client`] reads and writes: a Kubernetes resource type known at compile
/// time (every k8s-openapi type, and the custom resources of `kube::CustomResource`),
/// namespaced or cluster-scoped. Implemented for every type that qualifies.
pub trait ClientObject:
    Resource<DynamicType = (), Scope: ObjectScope>
    + Clone
    + fmt::Debug
    + Serialize
    + DeserializeOwned
    + Send
    + Sync
    + 'static
{
}

impl<K> ClientObject for K where
    K: Resource<DynamicType = (), Scope: ObjectScope>
        + Clone
        + fmt::Debug
        + Serialize
        + DeserializeOwned
        + Send
        + Sync
        + 'static
{
}

/// The scope of a resource, as a write needs it: a namespaced object is written in its
/// namespace, a cluster-scoped one without any. Implemented for kube's
/// [`NamespaceResourceScope`] and [`ClusterResourceScope`].
pub trait ObjectScope: sealed::Sealed {
    /// Whether objects of this scope live in a namespace.
    const NAMESPACED: bool;

    /// The api of `K` for an object in `namespace`; `None` if the scope needs a namespace and
    /// none is given.
    fn api<K>(client: kube::Client, namespace: Option<&str>) -> Option<Api<K>>
    where
        K: Resource<Scope = Self, DynamicType = ()>;
}

impl ObjectScope for NamespaceResourceScope {
    const NAMESPACED: bool = true;

    fn api<K>(client: kube::Client, namespace: Option<&str>) -> Option<Api<K>>
    where
        K: Resource<Scope = Self, DynamicType = ()>,
    {
        namespace.map(|ns| Api::namespaced(client, ns))
    }
}

impl ObjectScope for ClusterResourceScope {
    const NAMESPACED: bool = false;

    fn api<K>(client: kube::Client, _namespace: Option<&str>) -> Option<Api<K>>
    where
        K: Resource<Scope = Self, DynamicType = ()>,
    {
        Some(Api::all(client))
    }
}

mod sealed {
    pub trait Sealed {}
    impl Sealed for kube::core::NamespaceResourceScope {}
    impl Sealed for kube::core::ClusterResourceScope {}
}

/// A client for reconcilers (controller-runtime's default client): reads come from the
/// informers' caches, writes go to the API server through kube-client, and each write made in
/// a reconcile is recorded for the key's next reconcile to wait for (see
/// [`Controller::read_your_writes`](crate::Controller::read_your_writes)).
///
/// ```no_run
/// use std::sync::Arc;
/// use informer_kube::{KubeInformerFactory, KubeSource};
/// use informer_runtime::{Action, Client, ClientError, Controller, Request, Target};
/// use k8s_openapi::api::core::v1::{ConfigMap, Secret};
/// use kube::api::PostParams;
/// use tokio_util::sync::CancellationToken;
///
/// async fn reconcile(request: Request<ConfigMap>, client: Arc<Client>) -> Result<Action, ClientError> {
///     let Target::Live(owner) = &request.target else { return Ok(Action::await_change()) };
///     let namespace = owner.metadata.namespace.as_deref();
///     // From the cache; it shows every write of this key's previous reconciles.
///     if client.get::<Secret>(namespace, "credentials")?.is_none() {
///         let mut secret = Secret::default();
///         secret.metadata.name = Some("credentials".into());
///         secret.metadata.namespace = owner.metadata.namespace.clone();
///         // Through the API server; the answer's resource version is recorded.
///         client.create(&PostParams::default(), &secret).await?;
///     }
///     Ok(Action::await_change())
/// }
///
/// # async fn run() -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
/// let source = KubeSource::try_default().await?;
/// let factory = KubeInformerFactory::new(source.clone());
/// let owners = factory.informer::<ConfigMap>();
/// let client = Client::new(source.client().clone())
///     .with_cache(Arc::clone(&owners))
///     .with_cache(factory.informer::<Secret>());
/// factory.start()?;
/// Controller::new(owners)
///     .run(CancellationToken::new(), Arc::new(client), reconcile, |_, _, _| Action::backoff())
///     .await?;
/// # Ok(()) }
/// ```
///
/// One informer per type (a later [`with_cache`](Self::with_cache) of the same type replaces
/// the earlier). Reads of a type without one fail with [`ClientError::NoInformer`]; writes of
/// such a type go through, with nothing to wait for, since nothing of this client reads that
/// type back. Cloning is cheap and clones share everything.
///
/// What a write records, per informer, is the version the server answered with: the informer
/// has shown the write once its cache has applied that version or a later one. A deletion
/// answered with the object (one kept by finalizers or a grace period, or the final state of
/// a pod) records that object's version; a deletion answered with a `Status` records the
/// deleted object's UID, shown once the cache no longer holds it. An answer without a version
/// (or a `Status` without a UID, of an object the cache does not hold) makes the client ask
/// the server for the collection's version now (a list of at most one object), which is at
/// or past the write's, and record that: a wait that may be longer than needed, never
/// shorter. These are counted ([`ClientStats::versions_asked`]); if that fails too, the write
/// returns [`ClientError::NoResourceVersion`].
///
/// Only writes in a reconcile's own task are recorded: the futures it awaits, joined or not,
/// but not a task it spawns (`tokio::spawn`). A write elsewhere is made, with nothing to
/// record it in, and counted ([`ClientStats::unattributed`]).
///
/// Give it informers that see what it writes. A write outside an informer's selection (its
/// namespace, label or field selectors) never reaches that cache: its version is shown only
/// when the cache applies a later change, so the key's next reconcile may wait the whole
/// timeout (and count a stale read).
#[derive(Clone)]
pub struct Client {
    kube: kube::Client,
    /// Per type, its `Arc<TypedCache<K>>`.
    caches: Arc<HashMap<TypeId, Arc<dyn Any + Send + Sync>>>,
    counters: Arc<Counters>,
}

/// What a [`Client`] has counted since it was built (all clones together).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct ClientStats {
    /// Writes the server accepted.
    pub writes: u64,
    /// Writes whose answer carried nothing to wait for (no resource version; a deletion's
    /// `Status` without a UID the cache held): the collection's version was asked for instead.
    pub versions_asked: u64,
    /// Writes made outside a reconcile's task, recorded for no key.
    pub unattributed: u64,
}

#[derive(Debug, Default)]
struct Counters {
    writes: AtomicU64,
    versions_asked: AtomicU64,
    unattributed: AtomicU64,
}

impl fmt::Debug for Client {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Client")
            .field("default_namespace", &self.kube.default_namespace())
            .field("caches", &self.caches.len())
            .field("stats", &self.stats())
            .finish()
    }
}

impl Client {
    /// A client writing through `kube`, with no informer yet.
    pub fn new(kube: kube::Client) -> Self {
        Self {
            kube,
            caches: Arc::default(),
            counters: Arc::default(),
        }
    }

    /// Reads `K` from `informer`'s cache (a controller's informer, or a factory's:
    /// `factory.informer::<Pod>()`), and waits for it to show the writes of `K`.
    #[must_use]
    pub fn with_cache<K>(mut self, informer: Arc<SharedIndexInformer<K>>) -> Self
    where
        K: Resource + Send + Sync + 'static,
    {
        let cache: Arc<dyn Any + Send + Sync> = Arc::new(TypedCache { informer });
        Arc::make_mut(&mut self.caches).insert(TypeId::of::<K>(), cache);
        self
    }

    /// The kube-client it writes through.
    pub fn kube(&self) -> &kube::Client {
        &self.kube
    }

    /// What it has counted so far.
    pub fn stats(&self) -> ClientStats {
        let c = &self.counters;
        ClientStats {
            writes: c.writes.load(Ordering::Relaxed),
            versions_asked: c.versions_asked.load(Ordering::Relaxed),
            unattributed: c.unattributed.load(Ordering::Relaxed),
        }
    }

    /// The informer of `K`, if the client has one.
    fn cache<K: Send + Sync + 'static>(&self) -> Option<Arc<TypedCache<K>>> {
        let cache = Arc::clone(self.caches.get(&TypeId::of::<K>())?);
        cache.downcast::<TypedCache<K>>().ok()
    }

    /// The lister of `K`'s cache.
    pub fn lister<K: Send + Sync + 'static>(&self) -> Result<Lister<K>, ClientError> {
        self.cache::<K>()
            .map(|c| c.informer.lister())
            .ok_or(ClientError::NoInformer {
                kind: type_name::<K>(),
            })
    }

    /// The object `namespace`/`name` (`None` for a cluster-scoped one) as the cache has it;
    /// `Ok(None)` if the cache does not hold it.
    pub fn get<K: Send + Sync + 'static>(
        &self,
        namespace: Option<&str>,
        name: &str,
    ) -> Result<Option<Arc<K>>, ClientError> {
        let lister = self.lister::<K>()?;
        Ok(match namespace {
            Some(ns) => lister.get_namespaced(ns, name),
            None => lister.get(name),
        })
    }

    /// Every object of the cache in `namespace` (`None`: all of them).
    pub fn list<K: Resource + Send + Sync + 'static>(
        &self,
        namespace: Option<&str>,
    ) -> Result<Vec<Arc<K>>, ClientError> {
        self.list_matching(namespace, &kube::core::Selector::default())
    }

    /// The objects of the cache in `namespace` (`None`: all) whose labels match `labels`.
    pub fn list_matching<K: Resource + Send + Sync + 'static>(
        &self,
        namespace: Option<&str>,
        labels: &kube::core::Selector,
    ) -> Result<Vec<Arc<K>>, ClientError> {
        let lister = self.lister::<K>()?;
        let no_labels = BTreeMap::new();
        let matches = |obj: &K| labels.matches(obj.meta().labels.as_ref().unwrap_or(&no_labels));
        Ok(match (namespace, labels.selects_all()) {
            (Some(ns), true) => lister.namespace(ns).list(&Everything),
            (Some(ns), false) => lister.namespace(ns).list(&matches),
            (None, true) => lister.list(&Everything),
            (None, false) => lister.list(&matches),
        })
    }

    /// The objects of the cache filed under `value` in its index `index`.
    pub fn by_index<K: Send + Sync + 'static>(
        &self,
        index: &str,
        value: &str,
    ) -> Result<Vec<Arc<K>>, ClientError> {
        Ok(self.lister::<K>()?.by_index(index, value)?)
    }
}
