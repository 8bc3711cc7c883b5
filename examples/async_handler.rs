//! An async event handler: its methods are `async fn`s, run as a tokio task of the informer's
//! own — no thread, no channel to bridge. Here each change does a pretend HTTP call.
//!
//! The handler receives every change in order, one at a time, each with the object's key. Its
//! buffer is bounded: if it falls behind by more than that, it receives one notification per
//! changed key (from the version it saw to the latest one) until it catches up, so a slow
//! handler never holds a stream of old versions alive. A controller that only needs "this key
//! changed, reconcile it" reads the current state from the lister, as `on_update` does below.
//!
//! ```sh
//! cargo run --example async_handler
//! ```

use std::sync::Arc;
use std::time::Duration;

use informers::apiserver::{ApiServer, Config};
use informers::k8s_openapi::api::core::v1::Pod;
use informers::kube_client;
use informers::prelude::*;
use tokio::sync::mpsc;

/// What the handler did, for `main` to wait on (instead of sleeping and hoping).
#[derive(Debug)]
enum Handled {
    Reconciled { key: Arc<str>, node: Option<String> },
    CleanedUp(Arc<str>),
}

struct Reconciler {
    pods: Lister<Pod>,
    handled: mpsc::UnboundedSender<Handled>,
}

impl Reconciler {
    async fn reconcile(&self, key: Arc<str>) {
        tokio::time::sleep(Duration::from_millis(2)).await; // the "HTTP call"
        // The current state, from the cache: never older than the event.
        let node = self
            .pods
            .get(&key)
            .and_then(|p| p.spec.as_ref()?.node_name.clone());
        println!("reconciled {key} (now on {node:?})");
        let _ = self.handled.send(Handled::Reconciled { key, node });
    }
}

#[async_trait]
impl AsyncResourceEventHandler<Pod> for Reconciler {
    async fn on_add(&self, key: Arc<str>, _pod: Arc<Pod>, _initial: bool) {
        self.reconcile(key).await;
    }

    async fn on_update(&self, key: Arc<str>, _old: Arc<Pod>, _new: Arc<Pod>) {
        self.reconcile(key).await;
    }

    async fn on_delete(&self, key: Arc<str>, last_known: Arc<Pod>, _unknown: bool) {
        tokio::time::sleep(Duration::from_millis(2)).await;
        let node = last_known.spec.as_ref().and_then(|s| s.node_name.clone());
        println!("cleaned up after {key} (was on {node:?})");
        let _ = self.handled.send(Handled::CleanedUp(key));
    }
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
    // The embedded API server simulator with 12 pods: `pod-<i>` in `ns-<i % 3>` on `node-<i % 4>`.
    let server = ApiServer::start(Config::default().with_core_types()).await?;
    for i in 0..12 {
        server.create(&serde_json::from_value::<Pod>(serde_json::json!({
            "metadata": {"name": format!("pod-{i}"), "namespace": format!("ns-{}", i % 3)},
            "spec": {"nodeName": format!("node-{}", i % 4),
                     "containers": [{"name": "app", "image": "registry.local/app:1"}]},
        }))?)?;
    }
    let client = kube_client::Client::try_from(kube_client::Config::new(server.url().parse()?))?;

    let factory = KubeInformerFactory::new(KubeSource::new(client));
    let pods = factory.informer::<Pod>();
    let (handled, mut handled_rx) = mpsc::unbounded_channel();
    let registration = pods.add_async_event_handler(
        Reconciler {
            pods: factory.lister::<Pod>(),
            handled,
        },
        HandlerOptions::new(),
    )?;

    factory.start()?;
    factory
        .wait_for_cache_sync(Some(Duration::from_secs(30)))
        .await;
    // The handler's own sync: it has handled all twelve initial adds.
    registration.wait_for_sync().await;
    server.delete::<Pod>(Some("ns-0"), "pod-0")?;
    server.patch::<Pod>(
        Some("ns-1"),
        "pod-1",
        &serde_json::json!({"spec": {"nodeName": "node-9"}}),
    )?;
    // Wait until the handler has handled both changes.
    let (mut deleted, mut moved) = (false, false);
    while !(deleted && moved) {
        match handled_rx.recv().await {
            Some(Handled::CleanedUp(key)) if &*key == "ns-0/pod-0" => deleted = true,
            Some(Handled::Reconciled { key, node })
                if &*key == "ns-1/pod-1" && node.as_deref() == Some("node-9") =>
            {
                moved = true
            }
            Some(_) => {}
            None => return Err("the handler stopped early".into()),
        }
    }
    println!(
        "the async handler handled {} changes",
        registration.delivered()
    );
    factory.shutdown().await?;
    server.shutdown().await;
    Ok(())
}
