//! Consuming an informer as a `futures::Stream`: the cache's state first (adds marked
//! `initial`), then every change, each event with the object's key. The stream has a bounded
//! buffer of its own (a reader that falls behind gets one event per changed key until it has
//! caught up) and slows no other consumer down; dropping it unsubscribes.
//!
//! ```sh
//! cargo run --example stream
//! ```

use std::time::Duration;

use futures::StreamExt;
use informers::apiserver::{ApiServer, Config};
use informers::k8s_openapi::api::core::v1::Pod;
use informers::kube_client;
use informers::prelude::*;

fn pod(ns: &str, name: &str) -> Result<Pod, serde_json::Error> {
    serde_json::from_value(serde_json::json!({
        "metadata": {"name": name, "namespace": ns},
        "spec": {"containers": [{"name": "app", "image": "registry.local/app:1"}]},
    }))
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
    let server = ApiServer::start(Config::default().with_core_types()).await?;
    for i in 0..5 {
        server.create(&pod("default", &format!("pod-{i}"))?)?;
    }
    let client = kube_client::Client::try_from(kube_client::Config::new(server.url().parse()?))?;
    let factory = KubeInformerFactory::new(KubeSource::new(client));
    let pods = factory.informer::<Pod>();

    // Subscribe before or after start: a late subscriber gets the cache's state first too.
    let mut events = pods.subscribe(HandlerOptions::new().buffer(256))?;
    factory.start()?;

    let mut initial = 0;
    let mut changed = false;
    while let Some(event) = tokio::time::timeout(Duration::from_secs(30), events.next()).await? {
        match &event {
            Event::Add {
                key, initial: true, ..
            } => {
                initial += 1;
                println!("initial: {key}");
                if initial == 5 {
                    // The whole first list has been read: make a change and watch it arrive.
                    server.delete::<Pod>(Some("default"), "pod-3")?;
                }
            }
            Event::Add { key, .. } => println!("added: {key}"),
            Event::Update { key, .. } => println!("updated: {key}"),
            Event::Delete { key, obj, .. } => {
                let rv = obj.metadata.resource_version.as_deref().unwrap_or_default();
                println!("deleted: {key} (last known at {rv})");
                changed = &**key == "default/pod-3";
            }
            _ => {}
        }
        if changed {
            break;
        }
    }
    println!(
        "read {} events; {} coalesced",
        events.registration().delivered(),
        events.registration().coalesced()
    );
    drop(events); // unsubscribes
    factory.shutdown().await?;
    server.shutdown().await;
    Ok(())
}
