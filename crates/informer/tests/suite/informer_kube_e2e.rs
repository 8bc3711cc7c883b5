//! End to end: the informer through kube-client against the API server simulator, with churn,
//! dropped watches and an expired resource version on the way.

use informer::HandlerOptions;
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use informer::{ResourceEventHandler, SharedIndexInformer};
use informer_apiserver::{ApiServer, Config};
use informer_kube::{KubeListerWatcher, key_func, namespace_index_func, pod_node_index_func};
use informer_reflector::BackoffConfig;
use informer_store::{FnIdentity, NAMESPACE_INDEX, indexers};
use k8s_openapi::api::core::v1::Pod;
use kube::Api;
use parking_lot::Mutex;
use tokio_util::sync::CancellationToken;

fn pod(ns: &str, name: &str, node: &str) -> Pod {
    serde_json::from_value(serde_json::json!({
        "metadata": {"name": name, "namespace": ns},
        "spec": {"nodeName": node, "containers": [{"name": "c", "image": "app"}]}
    }))
    .unwrap()
}

fn key_of(p: &Pod) -> String {
    format!(
        "{}/{}",
        p.metadata.namespace.as_deref().unwrap(),
        p.metadata.name.as_deref().unwrap()
    )
}

fn rv_of(p: &Pod) -> String {
    p.metadata.resource_version.clone().unwrap_or_default()
}

/// Replays notifications into key → resource version.
#[derive(Default)]
struct Replay(Mutex<BTreeMap<String, String>>);

impl ResourceEventHandler<Pod> for Replay {
    fn on_add(&self, key: &str, obj: &Arc<Pod>, _: bool) {
        assert_eq!(key, key_of(obj));
        self.0.lock().insert(key.to_owned(), rv_of(obj));
    }
    fn on_update(&self, key: &str, _: &Arc<Pod>, new: &Arc<Pod>) {
        assert_eq!(key, key_of(new));
        self.0.lock().insert(key.to_owned(), rv_of(new));
    }
    fn on_delete(&self, key: &str, obj: &Arc<Pod>, _: bool) {
        assert_eq!(key, key_of(obj));
        self.0.lock().remove(key);
    }
}

fn server_state(server: &ApiServer) -> BTreeMap<String, String> {
    let (pods, _) = server.list::<Pod>(None).unwrap();
    pods.iter().map(|p| (key_of(p), rv_of(p))).collect()
}

use informer_testing::eventually;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn informer_converges_through_kube_client_despite_faults() {
    let server = ApiServer::start(Config::for_tests(Duration::from_millis(100)))
        .await
        .unwrap();
    for i in 0..30 {
        server
            .create(&pod(
                &format!("ns-{}", i % 3),
                &format!("p{i}"),
                &format!("n{}", i % 4),
            ))
            .unwrap();
    }
    let client = kube::Client::try_from(kube::Config::new(server.url().parse().unwrap())).unwrap();
    let informer = Arc::new(
        SharedIndexInformer::builder(
            KubeListerWatcher::new(Api::<Pod>::all(client)),
            FnIdentity::new(key_func::<Pod>())
                .with_resource_version(Arc::new(|p: &Pod| p.metadata.resource_version.as_deref()))
                .with_indexers(indexers([
                    (NAMESPACE_INDEX, namespace_index_func::<Pod>()),
                    ("node", pod_node_index_func()),
                ])),
        )
        .reflector_config(|r| {
            r.with_backoff(BackoffConfig {
                initial: Duration::from_millis(20),
                cap: Duration::from_millis(200),
                ..BackoffConfig::default()
            })
        })
        .build(),
    );
    let replay = Arc::new(Replay::default());
    let reg = informer
        .add_event_handler(Arc::clone(&replay), HandlerOptions::new())
        .unwrap();
    let stop = CancellationToken::new();
    let task = tokio::spawn({
        let (informer, stop) = (Arc::clone(&informer), stop.clone());
        async move { informer.run(stop).await }
    });
    tokio::time::timeout(Duration::from_secs(20), informer.wait_for_sync())
        .await
        .unwrap();
    let cache = || -> BTreeMap<String, String> {
        informer
            .lister()
            .list(&informer_store::Everything)
            .iter()
            .map(|p| (key_of(p), rv_of(p)))
            .collect()
    };
    assert_eq!(
        cache(),
        server_state(&server),
        "synced cache equals the server"
    );
    eventually("handler synced", || reg.has_synced()).await;
    assert_eq!(informer.lister().index_keys("node", "n1").unwrap().len(), 8);

    // Churn, a dropped watch, more churn, then history compacted under a dropped watch: the
    // re-watch gets 410 and the informer relists.
    for i in 0..10 {
        server
            .patch::<Pod>(
                Some(&format!("ns-{}", i % 3)),
                &format!("p{i}"),
                &serde_json::json!({"spec": {"nodeName": "moved"}}),
            )
            .unwrap();
    }
    server.faults().drop_watches();
    for i in 10..15 {
        server
            .delete::<Pod>(Some(&format!("ns-{}", i % 3)), &format!("p{i}"))
            .unwrap();
    }
    for i in 30..35 {
        server
            .create(&pod("ns-new", &format!("p{i}"), "n0"))
            .unwrap();
    }
    server.faults().compact_all();
    server.faults().drop_watches();
    server.delete::<Pod>(Some("ns-0"), "p0").unwrap();

    let expected = server_state(&server);
    eventually("cache converges", || cache() == expected).await;
    eventually("handler converges", || *replay.0.lock() == expected).await;
    assert_eq!(
        informer.lister().index_keys("node", "moved").unwrap().len(),
        9
    );
    // The reflector records the version after the store has the change: wait for it too.
    let head = server.resource_version().to_string();
    eventually("resume version caught up", || {
        informer.last_sync_resource_version() == head
    })
    .await;

    stop.cancel();
    task.await.unwrap().unwrap();
    server.shutdown().await;
}
