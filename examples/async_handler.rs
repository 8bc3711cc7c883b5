//! Handing notifications to async code: the handler (on its own thread) sends each change into a
//! tokio channel, and an async task does the slow work — here, a pretend HTTP call per change.
//!
//! An unbounded channel keeps the handler from ever blocking, as the informer's own buffers do;
//! with a bounded one, `blocking_send` would apply back-pressure to that handler only. A work
//! queue that coalesces by key (send the key, look the object up in the lister when working)
//! is the usual controller shape, and is what the `reconcile` task below does.
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

/// What the async side is told: the key of an object that changed.
#[derive(Debug)]
enum Change {
    Upserted(String),
    Deleted(String),
}

fn key(pod: &Pod) -> String {
    format!(
        "{}/{}",
        pod.metadata.namespace.as_deref().unwrap_or_default(),
        pod.metadata.name.as_deref().unwrap_or_default()
    )
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

    // The channel, and the handler feeding it: each hook sends the changed pod's key, and never
    // blocks.
    let (tx, mut rx) = mpsc::unbounded_channel();
    let (on_add, on_update, on_delete) = (tx.clone(), tx.clone(), tx);
    pods.add_event_handler(
        ResourceEventHandlerFuncs::new()
            .with_add(move |p: &Arc<Pod>, _| {
                let _ = on_add.send(Change::Upserted(key(p)));
            })
            .with_update(move |_: &Arc<Pod>, p: &Arc<Pod>| {
                let _ = on_update.send(Change::Upserted(key(p)));
            })
            .with_delete(move |d: DeletedObject<Pod>| {
                let key = d
                    .tombstone()
                    .map(|t| t.key.clone())
                    .or_else(|| d.object().map(|p| key(p)));
                if let Some(key) = key {
                    let _ = on_delete.send(Change::Deleted(key));
                }
            }),
    )?;

    // The async worker: reads the current state from the lister, never from the event.
    let lister = factory.lister::<Pod>();
    // What the worker has handled, for `main` to wait on (instead of sleeping and hoping).
    let (handled_tx, mut handled_rx) = mpsc::unbounded_channel::<Change>();
    let worker = tokio::spawn(async move {
        let mut handled = 0;
        while let Some(change) = rx.recv().await {
            tokio::time::sleep(Duration::from_millis(2)).await; // the "HTTP call"
            match &change {
                Change::Upserted(key) => {
                    let (ns, name) = key.split_once('/').unwrap_or(("", key));
                    let node = lister
                        .namespace(ns)
                        .get(name)
                        .and_then(|p| p.spec.as_ref()?.node_name.clone());
                    println!("reconciled {key} (now on {node:?})");
                }
                Change::Deleted(key) => println!("cleaned up after {key}"),
            }
            let _ = handled_tx.send(change);
            handled += 1;
        }
        handled
    });

    factory.start()?;
    factory
        .wait_for_cache_sync(Some(Duration::from_secs(30)))
        .await;
    server.delete::<Pod>(Some("ns-0"), "pod-0")?;
    server.patch::<Pod>(
        Some("ns-1"),
        "pod-1",
        &serde_json::json!({"spec": {"nodeName": "node-9"}}),
    )?;
    // Wait until the worker has handled both changes (it handles in order, so these come
    // after the initial adds).
    let pods_now = factory.lister::<Pod>();
    let (mut deleted, mut moved) = (false, false);
    while !(deleted && moved) {
        match handled_rx.recv().await {
            Some(Change::Deleted(key)) if key == "ns-0/pod-0" => deleted = true,
            Some(Change::Upserted(key))
                if key == "ns-1/pod-1"
                    && pods_now
                        .namespace("ns-1")
                        .get("pod-1")
                        .and_then(|p| p.spec.as_ref()?.node_name.clone())
                        .as_deref()
                        == Some("node-9") =>
            {
                moved = true
            }
            Some(_) => {}
            None => return Err("the worker ended early".into()),
        }
    }

    // Shutting down drops the handler, and with it the senders: the worker drains and ends.
    factory.shutdown().await?;
    drop(pods);
    let handled = worker.await?;
    println!("the async worker handled {handled} changes");
    server.shutdown().await;
    Ok(())
}
