//! Runnable examples of the informers stack. Run one with `cargo run --release --example <name>`:
//!
//! * `demo`: the main job — a shared informer factory against a busy, failing API server,
//!   checked object by object at the end (`--help` for its flags);
//! * `indexer`: the store and its secondary indexes at work on generated pods;
//! * `pods_by_node`: an index lookup — which pods run on a node — through a factory's informer;
//! * `custom_handler`: a handler of your own, keeping a derived view (replicas per app);
//! * `async_handler`: handing notifications to async code through a tokio channel;
//! * `metadata_only`: a metadata-only informer, for a lean cache.
//!
//! The examples run against the embedded API server simulator, so they need no cluster; this
//! library holds the little they share: a seeded simulator and a client for it.

use informers::apiserver::{ApiServer, Config};
use informers::k8s_openapi::api::core::v1::Pod;
use informers::kube_client;
use informers::store::IndexFunc;

/// The node a pod is scheduled on.
pub fn node_of(pod: &Pod) -> Option<&str> {
    pod.spec.as_ref()?.node_name.as_deref()
}

/// The `node` index function: a pod is filed under its node's name (unscheduled: nowhere).
pub fn node_index() -> IndexFunc<Pod> {
    informers::kube::pod_node_index_func()
}

/// A pod named `name` in `namespace`, scheduled on `node`, labelled `app`.
pub fn pod(namespace: &str, name: &str, node: &str, app: &str) -> Pod {
    serde_json::from_value(serde_json::json!({
        "metadata": {"name": name, "namespace": namespace, "labels": {"app": app}},
        "spec": {"nodeName": node, "containers": [{"name": "app", "image": "registry.local/app:1"}]},
    }))
    .expect("a valid pod")
}

/// The embedded API server with `pods` pods (`pod-<i>` in `ns-<i % 3>`, on `node-<i % 4>`, app
/// `app-<i % 5>`), and a kube client for it.
pub async fn simulator_with_pods(
    pods: usize,
) -> Result<(ApiServer, kube_client::Client), Box<dyn std::error::Error + Send + Sync>> {
    let server = ApiServer::start(Config::default().with_core_types()).await?;
    for i in 0..pods {
        server.create(&pod(
            &format!("ns-{}", i % 3),
            &format!("pod-{i}"),
            &format!("node-{}", i % 4),
            &format!("app-{}", i % 5),
        ))?;
    }
    let client = kube_client::Client::try_from(kube_client::Config::new(server.url().parse()?))?;
    Ok((server, client))
}
