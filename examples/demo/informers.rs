//! The informer code: the factory, its pod and configmap informers, the `node` index, and the
//! three handlers (a pod mirror, a configmap mirror, a pods-per-node count).
//!
//! Everything else in the demo drives this (the world: `world.rs`), shows it (`progress.rs`) or
//! checks it (`check.rs`).

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use informers::k8s_openapi::api::core::v1::{ConfigMap, Pod};
use informers::kube::{KubeInformerFactory, KubeSource};
use informers::kube_client::{self, Resource, ResourceExt};
use informers::metrics::Metrics;
use informers::prelude::*;
use informers::reflector::BackoffConfig;
use parking_lot::Mutex;

use crate::BoxError;

/// The factory for the simulator at `url`: a short reflector backoff, so that the informers
/// ride out the injected faults quickly.
pub(crate) fn simulator_factory(
    url: &str,
    metrics: &Metrics,
) -> Result<KubeInformerFactory, BoxError> {
    let client = kube_client::Client::try_from(kube_client::Config::new(url.parse()?))?;
    let backoff = || BackoffConfig {
        initial: Duration::from_millis(50),
        cap: Duration::from_secs(1),
        ..BackoffConfig::default()
    };
    Ok(KubeInformerFactory::new(KubeSource::new(client))
        .with_reflector_observers(metrics.reflector_observers())
        .configure::<Pod>(move |i| i.reflector_config(move |r| r.with_backoff(backoff())))
        .configure::<ConfigMap>(move |i| i.reflector_config(move |r| r.with_backoff(backoff()))))
}

/// The factory for the cluster of the current kubeconfig (or the in-cluster service account).
pub(crate) async fn cluster_factory(metrics: &Metrics) -> Result<KubeInformerFactory, BoxError> {
    Ok(KubeInformerFactory::new(KubeSource::try_default().await?)
        .with_reflector_observers(metrics.reflector_observers()))
}

/// The demo's informers, with their handlers.
pub(crate) struct Informers {
    pub(crate) pods: Arc<SharedIndexInformer<Pod>>,
    pub(crate) configmaps: Arc<SharedIndexInformer<ConfigMap>>,
    pub(crate) pod_mirror: Arc<Mirror<Pod>>,
    pub(crate) configmap_mirror: Arc<Mirror<ConfigMap>>,
    pub(crate) per_node: Arc<PodsPerNode>,
    registrations: Vec<HandlerRegistration>,
}

impl Informers {
    /// The factory's pod and configmap informers, the `node` index and the three handlers.
    pub(crate) fn new(factory: &KubeInformerFactory) -> Result<Self, BoxError> {
        let pods = factory.informer::<Pod>(); // with the `namespace` index, as in client-go
        let configmaps = factory.informer::<ConfigMap>();
        // The `node` index: a pod is filed under its node's name (unscheduled: nowhere).
        pods.add_indexers(indexers([(
            "node",
            index_func(|p: &Pod| Ok(node_of(p).map(IndexValues::one).unwrap_or_default())),
        )]))?;
        let pod_mirror = Arc::new(Mirror::<Pod>::default());
        let configmap_mirror = Arc::new(Mirror::<ConfigMap>::default());
        let per_node = Arc::new(PodsPerNode::default());
        let registrations = vec![
            pods.add_event_handler(Arc::clone(&pod_mirror), HandlerOptions::new())?,
            pods.add_event_handler(Arc::clone(&per_node), HandlerOptions::new())?,
            configmaps.add_event_handler(Arc::clone(&configmap_mirror), HandlerOptions::new())?,
        ];
        Ok(Informers {
            pods,
            configmaps,
            pod_mirror,
            configmap_mirror,
            per_node,
            registrations,
        })
    }

    /// Notifications handled, all handlers together.
    pub(crate) fn delivered(&self) -> u64 {
        self.registrations
            .iter()
            .map(|r| r.delivered() as u64)
            .sum()
    }

    /// Notifications buffered for the handlers, not handled yet.
    pub(crate) fn backlog(&self) -> usize {
        self.registrations
            .iter()
            .map(HandlerRegistration::backlog)
            .sum()
    }
}

// ---------------------------------------------------------------------------------------------
// The three handlers.

/// Replays notifications into key → resourceVersion: a handler's view of the collection.
pub(crate) struct Mirror<K> {
    pub(crate) state: Mutex<HashMap<String, String>>,
    _kind: std::marker::PhantomData<fn(K)>,
}

impl<K> Default for Mirror<K> {
    fn default() -> Self {
        Self {
            state: Mutex::default(),
            _kind: std::marker::PhantomData,
        }
    }
}

impl<K: Resource + Send + Sync + 'static> ResourceEventHandler<K> for Mirror<K> {
    fn on_add(&self, key: &str, obj: &Arc<K>, _: bool) {
        self.state.lock().insert(key.to_owned(), rv_of(&**obj));
    }
    fn on_update(&self, key: &str, _: &Arc<K>, new: &Arc<K>) {
        self.state.lock().insert(key.to_owned(), rv_of(&**new));
    }
    fn on_delete(&self, key: &str, _: &Arc<K>, _: bool) {
        self.state.lock().remove(key);
    }
}

/// Counts pods per node from notifications alone; checked against the `node` index at the end.
#[derive(Default)]
pub(crate) struct PodsPerNode {
    pub(crate) counts: Mutex<HashMap<String, i64>>,
}

impl PodsPerNode {
    fn shift(&self, pod: &Pod, by: i64) {
        if let Some(node) = node_of(pod) {
            let mut counts = self.counts.lock();
            let count = counts.entry(node.to_owned()).or_default();
            *count += by;
            if *count == 0 {
                counts.remove(node);
            }
        }
    }
}

impl ResourceEventHandler<Pod> for PodsPerNode {
    fn on_add(&self, _: &str, pod: &Arc<Pod>, _: bool) {
        self.shift(pod, 1);
    }
    fn on_update(&self, _: &str, old: &Arc<Pod>, new: &Arc<Pod>) {
        if node_of(old) != node_of(new) {
            self.shift(old, -1);
            self.shift(new, 1);
        }
    }
    fn on_delete(&self, _: &str, pod: &Arc<Pod>, _: bool) {
        // Every deletion carries the pod's last known state, whose node it leaves.
        self.shift(pod, -1);
    }
}

// ---------------------------------------------------------------------------------------------
// What the handlers and the check read off an object.

/// The node a pod is scheduled on.
pub(crate) fn node_of(pod: &Pod) -> Option<&str> {
    pod.spec.as_ref()?.node_name.as_deref()
}

/// An object's cache key: `namespace/name`, or `name` for a cluster-scoped object.
pub(crate) fn key_of<K: Resource>(o: &K) -> String {
    match o.meta().namespace.as_deref() {
        Some(ns) => format!("{ns}/{}", o.name_any()),
        None => o.name_any(),
    }
}

/// An object's resourceVersion.
pub(crate) fn rv_of<K: Resource>(o: &K) -> String {
    o.resource_version().unwrap_or_default()
}
