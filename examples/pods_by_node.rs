//! An index lookup: which pods run on a node, answered from the cache, not the server.
//!
//! A factory's pod informer gets a `node` index: an index function files each pod under its
//! `spec.nodeName`. Once synced, the pods of a node are one lookup away, and stay right as pods
//! come and go.
//!
//! ```sh
//! cargo run --example pods_by_node
//! ```

use std::sync::{Arc, Mutex};
use std::time::Duration;

use informers::apiserver::{ApiServer, Config};
use informers::k8s_openapi::api::core::v1::Pod;
use informers::kube_client;
use informers::prelude::*;

/// A pod named `name` in `namespace`, scheduled on `node`.
fn pod(namespace: &str, name: &str, node: &str) -> Pod {
    serde_json::from_value(serde_json::json!({
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"nodeName": node, "containers": [{"name": "app", "image": "registry.local/app:1"}]},
    }))
    .expect("a valid pod")
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
    // The embedded API server simulator with 40 pods: `pod-<i>` in `ns-<i % 3>` on `node-<i % 4>`.
    let server = ApiServer::start(Config::default().with_core_types()).await?;
    for i in 0..40 {
        let (ns, name, node) = (i % 3, format!("pod-{i}"), i % 4);
        server.create(&pod(&format!("ns-{ns}"), &name, &format!("node-{node}")))?;
    }
    let client = kube_client::Client::try_from(kube_client::Config::new(server.url().parse()?))?;

    let factory = KubeInformerFactory::new(KubeSource::new(client));
    let pods = factory.informer::<Pod>();
    // The index function: a pod is filed under the name of its node; an unscheduled pod, nowhere.
    // Registering it gives a typed handle, so a lookup cannot name an index that is not there.
    let by_node = pods.add_index(
        "node",
        index_func(|p: &Pod| {
            Ok(p.spec
                .as_ref()
                .and_then(|s| s.node_name.as_deref())
                .map(IndexValues::one)
                .unwrap_or_default())
        }),
    )?;
    factory.start()?;
    let report = factory
        .wait_for_cache_sync(Some(Duration::from_secs(30)))
        .await;
    assert!(report.all_synced(), "{report}");

    // The lookups: the keys of a node's pods, every node indexed, the pods of each.
    let on_node = |node: &str| -> Result<Vec<String>, informers::store::Error> {
        pods.lister().lookup_keys(&by_node, node)
    };
    println!("node-1 runs {:?}", on_node("node-1")?);
    let mut nodes = pods.lister().index_values(by_node.name());
    nodes.sort();
    for node in nodes {
        println!(
            "{node}: {} pods",
            pods.lister().lookup(&by_node, &node)?.len()
        );
    }

    // The index follows the cluster: a new pod on node-1 shows up there. A handler hears of a
    // change after the cache (and its indexes) has it, so it tells when to look again.
    let (arrived_tx, arrived) = tokio::sync::oneshot::channel();
    let arrived_tx = Mutex::new(Some(arrived_tx));
    pods.add_event_handler(
        ResourceEventHandlerFuncs::new().with_add(move |_key, p: &Arc<Pod>, _| {
            if p.metadata.name.as_deref() == Some("late-arrival")
                && let Some(tx) = arrived_tx.lock().ok().and_then(|mut tx| tx.take())
            {
                let _ = tx.send(());
            }
        }),
        HandlerOptions::new(),
    )?;
    server.create(&pod("ns-0", "late-arrival", "node-1"))?;
    arrived.await?;
    assert!(on_node("node-1")?.contains(&"ns-0/late-arrival".to_owned()));
    println!(
        "after a new pod, node-1 runs {} pods",
        on_node("node-1")?.len()
    );

    factory.shutdown().await?;
    server.shutdown().await;
    Ok(())
}
