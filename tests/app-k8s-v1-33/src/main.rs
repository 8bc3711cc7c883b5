//! A pod informer through the factory, against the embedded API server simulator, in an
//! application that picked k8s-openapi `v1_33` and no TLS stack. Exits 0 when the cache holds
//! the pods the server has.

use std::time::Duration;

use informers::apiserver::{ApiServer, Config};
use informers::kube_client;
use informers::prelude::*;
use k8s_openapi::api::core::v1::Pod;

// The version this application chose is the one every crate in it is built against.
k8s_openapi::k8s_if_ge_1_34! {
    compile_error!("k8s-openapi is built for another version than this application's v1_33");
}

fn pod(name: &str, node: &str) -> Pod {
    serde_json::from_value(serde_json::json!({
        "metadata": {"name": name, "namespace": "default"},
        "spec": {"nodeName": node, "containers": [{"name": "app", "image": "app"}]},
    }))
    .expect("a valid pod")
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let server = ApiServer::start(Config::default().with_core_types()).await?;
    server.create(&pod("web-0", "node-1"))?;
    server.create(&pod("web-1", "node-2"))?;
    let url = server.url();
    assert!(url.starts_with("http://"), "{url}");
    let client = kube_client::Client::try_from(kube_client::Config::new(url.parse()?))?;

    let factory = KubeInformerFactory::new(KubeSource::new(client));
    let pods = factory.informer::<Pod>();
    // A handler tells when web-2 has arrived: it hears of a change after the cache has it.
    let (arrived_tx, arrived) = tokio::sync::oneshot::channel();
    let arrived_tx = std::sync::Mutex::new(Some(arrived_tx));
    let handler =
        ResourceEventHandlerFuncs::new().with_add(move |_key, p: &std::sync::Arc<Pod>, _| {
            if p.metadata.name.as_deref() == Some("web-2")
                && let Some(tx) = arrived_tx.lock().ok().and_then(|mut tx| tx.take())
            {
                let _ = tx.send(());
            }
        });
    pods.add_event_handler(handler, HandlerOptions::new())?;
    factory.start()?;
    let report = factory
        .wait_for_cache_sync(Some(Duration::from_secs(30)))
        .await;
    assert!(report.all_synced(), "{report}");
    let mut keys = pods.lister().keys();
    keys.sort();
    assert_eq!(keys, ["default/web-0", "default/web-1"]);

    // A change after the sync reaches the cache through the watch.
    server.create(&pod("web-2", "node-1"))?;
    tokio::time::timeout(Duration::from_secs(30), arrived)
        .await
        .map_err(|_| "web-2 never reached the cache")??;
    assert!(pods.lister().namespace("default").get("web-2").is_some());

    factory.shutdown().await?;
    server.shutdown().await;
    println!("app-k8s-v1-33: 3 pods cached through the informer (k8s-openapi v1_33, no TLS)");
    Ok(())
}
