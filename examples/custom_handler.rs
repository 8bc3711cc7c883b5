//! A handler of your own: a type implementing `ResourceEventHandler`, keeping a view derived
//! from every change (ready replicas per app label) — the shape of most controllers' bookkeeping.
//!
//! Each hook has an empty default, so a handler implements only what it needs. Handlers run on
//! their own thread, after the cache is updated, in order; `filtered` narrows one to the
//! objects it cares about.
//!
//! ```sh
//! cargo run --example custom_handler
//! ```

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use informers::apiserver::{ApiServer, Config};
use informers::k8s_openapi::api::core::v1::Pod;
use informers::kube_client;
use informers::prelude::*;
use tokio::sync::watch;

/// Pods per `app` label, kept from notifications alone. Kept in a `tokio::sync::watch` channel,
/// so that async code can wait for a state of it (`wait_for`) instead of polling.
struct PodsPerApp(watch::Sender<BTreeMap<String, usize>>);

impl Default for PodsPerApp {
    fn default() -> Self {
        Self(watch::Sender::new(BTreeMap::new()))
    }
}

fn app(pod: &Pod) -> Option<String> {
    pod.metadata.labels.as_ref()?.get("app").cloned()
}

impl ResourceEventHandler<Pod> for PodsPerApp {
    fn on_add(&self, _key: &str, pod: &Arc<Pod>, _is_in_initial_list: bool) {
        if let Some(app) = app(pod) {
            self.0
                .send_modify(|counts| *counts.entry(app).or_default() += 1);
        }
    }

    fn on_update(&self, _key: &str, old: &Arc<Pod>, new: &Arc<Pod>) {
        let (before, after) = (app(old), app(new));
        if before != after {
            self.0.send_modify(|counts| {
                if let Some(app) = before {
                    *counts.entry(app).or_default() -= 1;
                }
                if let Some(app) = after {
                    *counts.entry(app).or_default() += 1;
                }
            });
        }
    }

    fn on_delete(&self, _key: &str, pod: &Arc<Pod>, _final_state_unknown: bool) {
        // Every deletion carries the pod's last known state (the cached one, if a relist found
        // the deletion).
        if let Some(app) = app(pod) {
            self.0
                .send_modify(|counts| *counts.entry(app).or_default() -= 1);
        }
    }
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
    // The embedded API server simulator with 30 pods: `pod-<i>` in `ns-<i % 3>`, labelled
    // `app: app-<i % 5>`.
    let server = ApiServer::start(Config::default().with_core_types()).await?;
    for i in 0..30 {
        server.create(&serde_json::from_value::<Pod>(serde_json::json!({
            "metadata": {"name": format!("pod-{i}"), "namespace": format!("ns-{}", i % 3),
                         "labels": {"app": format!("app-{}", i % 5)}},
            "spec": {"containers": [{"name": "app", "image": "registry.local/app:1"}]},
        }))?)?;
    }
    let client = kube_client::Client::try_from(kube_client::Config::new(server.url().parse()?))?;

    let factory = KubeInformerFactory::new(KubeSource::new(client));
    let pods = factory.informer::<Pod>();

    let per_app = Arc::new(PodsPerApp::default());
    let all = pods.add_event_handler(Arc::clone(&per_app), HandlerOptions::new())?;
    // The same handler type, narrowed to one namespace with a filter.
    let in_ns0 = Arc::new(PodsPerApp::default());
    let ns0 = pods.add_event_handler(
        Arc::clone(&in_ns0).filtered(|p: &Pod| p.metadata.namespace.as_deref() == Some("ns-0")),
        HandlerOptions::new(),
    )?;

    factory.start()?;
    factory
        .wait_for_cache_sync(Some(Duration::from_secs(30)))
        .await;
    server.patch::<Pod>(
        Some("ns-0"),
        "pod-0",
        &serde_json::json!({"metadata": {"labels": {"app": "app-9"}}}),
    )?;
    server.delete::<Pod>(Some("ns-1"), "pod-1")?;
    // Wait until both handlers have seen everything so far: every handler has its own sync,
    // then the update (pod-0 moves to app-9) and, for the unfiltered one, the delete.
    assert!(all.wait_for_sync().await && ns0.wait_for_sync().await);
    let total = |counts: &BTreeMap<String, usize>| counts.values().sum::<usize>();
    per_app
        .0
        .subscribe()
        .wait_for(|c| c.get("app-9") == Some(&1) && total(c) == 29)
        .await?;
    in_ns0
        .0
        .subscribe()
        .wait_for(|c| c.get("app-9") == Some(&1))
        .await?;
    println!("pods per app, everywhere: {:?}", *per_app.0.borrow());
    println!("pods per app, in ns-0:    {:?}", *in_ns0.0.borrow());

    factory.shutdown().await?;
    server.shutdown().await;
    Ok(())
}
