//! The controller phase: a reconciler on the same shared informers. For every namespace it
//! keeps a ConfigMap `pod-count` whose `data.pods` is the number of pods in the namespace, owned
//! by the Namespace (an owner reference). A pod's change wakes its namespace (`watches`, the
//! pod informer's `namespace` index gives the count); a drifted `pod-count` wakes its owner
//! (`owns`, through the configmaps' owner-UID index and the namespaces' UID index). The pod and
//! configmap informers are the ones the mirrors read: nothing is listed or watched twice.

use std::collections::BTreeMap;
use std::sync::Arc;

use informers::k8s_openapi::api::core::v1::{ConfigMap, Namespace, Pod};
use informers::k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use informers::kube::{
    KubeInformerFactory, OWNER_UID_INDEX, UID_INDEX, owner_keys, owner_uid_index_func,
    uid_index_func,
};
use informers::kube_client::api::{Patch, PatchParams, PostParams};
use informers::kube_client::{self, Api, ResourceExt};
use informers::prelude::*;
use informers::runtime::{Controller, Request, RuntimeError};
use informers::store::NAMESPACE_INDEX;
use tokio::task::JoinHandle;

use crate::BoxError;
use crate::informers::Informers;
use informers::metrics::Metrics;
use informers::metrics::prometheus_client::metrics::counter::Counter;
use informers::workqueue::WorkQueue;

/// The name of the ConfigMap the controller keeps in every namespace.
pub(crate) const POD_COUNT: &str = "pod-count";

/// What reconcile reads and writes with.
struct Ctx {
    client: kube_client::Client,
    pods: Lister<Pod>,
    configmaps: Lister<ConfigMap>,
    /// The demo's own metric, in the same registry: writes the controller made.
    writes: Counter,
}

/// The running controller.
pub(crate) struct PodCounter {
    stop: CancellationToken,
    running: JoinHandle<Result<(), RuntimeError>>,
}

impl PodCounter {
    /// Builds the controller on `factory`'s namespace informer and `informers`' pod and
    /// configmap informers, and starts it: it reconciles once the caches have synced.
    pub(crate) fn start(
        factory: &KubeInformerFactory,
        informers: &Informers,
        metrics: &Metrics,
    ) -> Result<Self, BoxError> {
        let namespaces = factory.informer::<Namespace>();
        namespaces.add_index(UID_INDEX, uid_index_func::<Namespace>())?;
        informers
            .configmaps
            .add_index(OWNER_UID_INDEX, owner_uid_index_func::<ConfigMap>())?;
        let owners = namespaces.lister();
        // Its queue and its reconciles report to the registry; its writes too, as a metric of
        // the demo's own.
        let queue = WorkQueue::builder()
            .name("pod-count")
            .metrics(metrics.workqueue_provider())
            .build();
        let writes = Counter::default();
        metrics.registry().register(
            "demo_controller_writes",
            "Writes the pod-count controller made (creates and patches)",
            writes.clone(),
        );
        let controller = Controller::with_queue(namespaces, queue)
            .observer(metrics.reconcile_observer("pod-count"))
            .watches(Arc::clone(&informers.pods), |pod: &Pod| {
                pod.namespace().into_iter().collect()
            })
            .owns(Arc::clone(&informers.configmaps), move |cm: &ConfigMap| {
                owner_keys(&owners, cm)
            })
            .concurrency(4);
        let ctx = Arc::new(Ctx {
            client: factory.source().client().clone(),
            pods: informers.pods.lister(),
            configmaps: informers.configmaps.lister(),
            writes,
        });
        let stop = CancellationToken::new();
        let running = tokio::spawn(controller.run(
            stop.clone(),
            ctx,
            reconcile,
            |_request, _error, _ctx: &Arc<Ctx>| {
                // A write refused while the server restarts, or a create racing the cache:
                // retried with the key's backoff (and counted in the registry).
                Action::backoff()
            },
        ));
        Ok(PodCounter { stop, running })
    }

    /// Stops the controller: no new reconcile, those under way finish.
    pub(crate) async fn stop(self) -> Result<(), BoxError> {
        self.stop.cancel();
        self.running.await??;
        Ok(())
    }
}

/// The `pod-count` ConfigMap `namespace` should have.
fn desired(namespace: &Namespace, pods: usize) -> ConfigMap {
    ConfigMap {
        metadata: ObjectMeta {
            name: Some(POD_COUNT.to_owned()),
            namespace: Some(namespace.name_any()),
            owner_references: Some(vec![OwnerReference {
                api_version: "v1".to_owned(),
                kind: "Namespace".to_owned(),
                name: namespace.name_any(),
                uid: namespace.uid().unwrap_or_default(),
                ..OwnerReference::default()
            }]),
            ..ObjectMeta::default()
        },
        data: Some(BTreeMap::from([("pods".to_owned(), pods.to_string())])),
        ..ConfigMap::default()
    }
}

/// Brings a namespace's `pod-count` to the number of pods the cache has in it.
async fn reconcile(
    request: Request<Namespace>,
    ctx: Arc<Ctx>,
) -> Result<Action, kube_client::Error> {
    let Target::Live(namespace) = &request.target else {
        return Ok(Action::await_change()); // the demo deletes no namespace
    };
    let name = namespace.name_any();
    let pods = ctx
        .pods
        .index_keys(NAMESPACE_INDEX, &name)
        .map_or(0, |keys| keys.len());
    let want = desired(namespace, pods);
    let api: Api<ConfigMap> = Api::namespaced(ctx.client.clone(), &name);
    match ctx.configmaps.get(&format!("{name}/{POD_COUNT}")) {
        None => drop(api.create(&PostParams::default(), &want).await?),
        Some(have) if have.data != want.data => {
            let patch = serde_json::json!({"data": want.data});
            drop(
                api.patch(POD_COUNT, &PatchParams::default(), &Patch::Merge(&patch))
                    .await?,
            );
        }
        Some(_) => return Ok(Action::await_change()),
    }
    ctx.writes.inc();
    Ok(Action::await_change())
}
