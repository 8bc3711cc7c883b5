//! An index lookup: which pods run on a node, answered from the cache, not the server.
//!
//! A factory's pod informer gets a `node` index (pod → `spec.nodeName`); once synced, the pods
//! of a node are one lookup away, and stay right as pods come and go.
//!
//! ```sh
//! cargo run --example pods_by_node
//! ```

use std::time::Duration;

use informer_examples::{node_index, pod, simulator_with_pods};
use informers::k8s_openapi::api::core::v1::Pod;
use informers::prelude::*;

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
    let (server, client) = simulator_with_pods(40).await?;

    let factory = KubeInformerFactory::new(KubeSource::new(client));
    let pods = factory.informer::<Pod>();
    // The index function: a pod's node name (see `informer_examples::node_index`).
    pods.add_indexers(indexers([("node", node_index())]))?;
    factory.start()?;
    let report = factory
        .wait_for_cache_sync(Some(Duration::from_secs(30)))
        .await;
    assert!(report.all_synced(), "{report}");

    let on_node = |node: &str| -> Result<Vec<String>, informers::store::Error> {
        pods.lister().index_keys("node", node)
    };
    println!("node-1 runs {:?}", on_node("node-1")?);
    let mut nodes = pods.lister().index_values("node");
    nodes.sort();
    for node in nodes {
        println!(
            "{node}: {} pods",
            pods.lister().by_index("node", &node)?.len()
        );
    }

    // The index follows the cluster: a new pod on node-1 shows up there. A handler hears of a
    // change after the cache (and its indexes) has it, so it tells when to look again.
    let (arrived_tx, arrived) = tokio::sync::oneshot::channel();
    let arrived_tx = std::sync::Mutex::new(Some(arrived_tx));
    pods.add_event_handler(ResourceEventHandlerFuncs::new().with_add(
        move |p: &std::sync::Arc<Pod>, _| {
            if p.metadata.name.as_deref() == Some("late-arrival")
                && let Some(tx) = arrived_tx.lock().ok().and_then(|mut tx| tx.take())
            {
                let _ = tx.send(());
            }
        },
    ))?;
    server.create(&pod("ns-0", "late-arrival", "node-1", "app-0"))?;
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
