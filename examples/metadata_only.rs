//! A metadata-only informer: names, labels, annotations, owners — without specs and statuses.
//!
//! `informer::<Metadata<Pod>>()` lists and watches through the API server's metadata view
//! (`PartialObjectMetadata`), so the cache holds `PartialObjectMeta<Pod>`s: a fraction of the
//! memory when a program only needs to know what exists and how it is labelled.
//!
//! ```sh
//! cargo run --example metadata_only
//! ```

use std::time::Duration;

use informers::apiserver::{ApiServer, Config};
use informers::k8s_openapi::api::core::v1::Pod;
use informers::kube_client::{self, core::Expression};
use informers::prelude::*;

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
    // The embedded API server simulator with 25 pods: `pod-<i>` in `ns-<i % 3>`, labelled
    // `app: app-<i % 5>`.
    let server = ApiServer::start(Config::default().with_core_types()).await?;
    for i in 0..25 {
        server.create(&serde_json::from_value::<Pod>(serde_json::json!({
            "metadata": {"name": format!("pod-{i}"), "namespace": format!("ns-{}", i % 3),
                         "labels": {"app": format!("app-{}", i % 5)}},
            "spec": {"containers": [{"name": "app", "image": "registry.local/app:1"}]},
        }))?)?;
    }
    let client = kube_client::Client::try_from(kube_client::Config::new(server.url().parse()?))?;

    // The metadata-only informer: `Metadata<Pod>` selects the metadata view of pods.
    let factory = KubeInformerFactory::new(KubeSource::new(client));
    let metadata = factory.informer::<Metadata<Pod>>();
    factory.start()?;
    let report = factory
        .wait_for_cache_sync(Some(Duration::from_secs(30)))
        .await;
    assert!(report.all_synced(), "{report}");

    let lister = metadata.lister();
    println!("{} pods known by metadata alone", lister.len());
    let app_2 = LabelSelector::from(Expression::Equal("app".into(), "app-2".into()));
    for pod in lister.namespace("ns-1").list(&app_2) {
        println!(
            "ns-1/{} labels={:?}",
            pod.metadata.name.as_deref().unwrap_or_default(),
            pod.metadata.labels.clone().unwrap_or_default()
        );
    }

    factory.shutdown().await?;
    server.shutdown().await;
    Ok(())
}
