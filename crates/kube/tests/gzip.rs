//! With the `gzip` feature, a factory over [`client_from_config`] syncs from a server that
//! gzips its list pages (the simulator does above 128 KiB, as kube-apiserver does), in both
//! encodings, in pages and as a streaming list, and so does a client that turns compression
//! off. Run with `cargo test -p informer-kube --features gzip --test gzip`.
#![cfg(feature = "gzip")]

use std::time::Duration;

use informer_apiserver::{ApiServer, Config};
use informer_kube::{KubeInformerFactory, KubeSource};
use informer_store::Everything;
use k8s_openapi::api::core::v1::Pod;

const PODS: usize = 2_000;

/// A server of 2,000 pods: a page of 500 is about 250 KB of JSON, above the threshold.
async fn server() -> ApiServer {
    let server = ApiServer::start(Config {
        history_size: PODS + 100,
        ..Config::default().with_core_types()
    })
    .await
    .expect("server starts");
    for i in 0..PODS {
        let pod: Pod = serde_json::from_value(serde_json::json!({
            "metadata": {
                "name": format!("pod-{i}"),
                "namespace": format!("ns-{}", i % 10),
                "labels": {"app": "web", "idx": i.to_string()},
            },
            "spec": {"containers": [{"name": "c", "image": "nginx", "args": ["--serve"]}]},
        }))
        .expect("a pod");
        server.create(&pod).expect("created");
    }
    server
}

async fn synced_pods(source: KubeSource, streaming: bool) -> Vec<String> {
    let factory = KubeInformerFactory::new(source).with_streaming_list(streaming);
    let pods = factory.informer::<Pod>();
    factory.start().expect("starts");
    let report = factory
        .wait_for_cache_sync(Some(Duration::from_secs(60)))
        .await;
    assert!(report.all_synced(), "{report}");
    let mut names: Vec<String> = pods
        .lister()
        .list(&Everything)
        .iter()
        .filter_map(|p| p.metadata.name.clone())
        .collect();
    factory.shutdown().await.expect("shuts down");
    names.sort();
    names
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gzipped_lists_sync_as_plain_ones_do() {
    let server = server().await;
    let config = || kube::Config::new(server.url().parse().expect("a URL"));
    let mut plain = config();
    plain.disable_compression = true;
    let expected = synced_pods(KubeSource::try_from_config(plain).expect("a source"), false).await;
    assert_eq!(expected.len(), PODS);
    for streaming in [false, true] {
        let protobuf = KubeSource::try_from_config(config()).expect("a source");
        assert_eq!(synced_pods(protobuf, streaming).await, expected);
        let json = KubeSource::try_from_config(config())
            .expect("a source")
            .json_only();
        assert_eq!(synced_pods(json, streaming).await, expected);
    }
    server.shutdown().await;
}
