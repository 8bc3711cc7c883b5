//! A projection: an informer that caches only the fields a controller reads.
//!
//! `SlimPod` is a type of our own with a pod's metadata, `spec.nodeName` and `status.phase`,
//! nothing else. It implements `kube::Resource` by hand (kind Pod, version v1, plural pods,
//! namespaced), so `factory.informer::<SlimPod>()` lists and watches `/api/v1/pods` and decodes
//! each pod into it: the rest of the JSON (containers, volumes, conditions, ...) is skipped by
//! the decoder and never kept. A `node` index files each pod under its node.
//!
//! The example starts the embedded API server simulator, creates pods on three nodes, answers
//! a by-node query from the cache, then changes, deletes and adds pods and checks that the cache
//! and its index follow. It exits non-zero if they do not.
//!
//! ```sh
//! cargo run --example projection
//! ```

use std::borrow::Cow;
use std::time::{Duration, Instant};

use informers::apiserver::{ApiServer, Config};
use informers::k8s_openapi::api::core::v1::Pod;
use informers::k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use informers::kube_client::{self, Resource, core::NamespaceResourceScope};
use informers::prelude::*;
use serde::Deserialize;

type Error = Box<dyn std::error::Error + Send + Sync>;

/// The pod as this program sees it: what it reads and nothing more. Its metadata is decoded
/// without `managedFields` (most of a real pod's metadata, and read by almost no controller):
/// they are skipped by the decoder, never built.
#[derive(Debug, Clone, Deserialize)]
struct SlimPod {
    #[serde(deserialize_with = "informers::kube::metadata_without_managed_fields")]
    metadata: ObjectMeta,
    #[serde(default)]
    spec: SlimSpec,
    #[serde(default)]
    status: SlimStatus,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
struct SlimSpec {
    node_name: Option<String>,
}

#[derive(Debug, Clone, Default, Deserialize)]
struct SlimStatus {
    phase: Option<String>,
}

/// Where a `SlimPod` lives on the API server: the pods of the core group, version v1.
impl Resource for SlimPod {
    type DynamicType = ();
    type Scope = NamespaceResourceScope;

    fn kind(_: &()) -> Cow<'_, str> {
        Cow::Borrowed("Pod")
    }

    fn group(_: &()) -> Cow<'_, str> {
        Cow::Borrowed("")
    }

    fn version(_: &()) -> Cow<'_, str> {
        Cow::Borrowed("v1")
    }

    fn plural(_: &()) -> Cow<'_, str> {
        Cow::Borrowed("pods")
    }

    fn meta(&self) -> &ObjectMeta {
        &self.metadata
    }

    fn meta_mut(&mut self) -> &mut ObjectMeta {
        &mut self.metadata
    }
}

/// A pod `name` in `ns-a` on `node`, with a full container spec the projection drops.
fn pod(name: &str, node: &str) -> Result<Pod, serde_json::Error> {
    serde_json::from_value(serde_json::json!({
        "metadata": {
            "name": name, "namespace": "ns-a", "labels": {"app": "web"},
            "managedFields": [{
                "manager": "kubectl-client-side-apply", "operation": "Update",
                "apiVersion": "v1", "fieldsType": "FieldsV1",
                "fieldsV1": {"f:metadata": {"f:labels": {"f:app": {}}}},
            }],
        },
        "spec": {
            "nodeName": node,
            "containers": [{
                "name": "app",
                "image": "registry.local/app:1",
                "ports": [{"containerPort": 8080}],
                "resources": {"requests": {"cpu": "100m", "memory": "128Mi"}},
            }],
        },
    }))
}

/// Creates pod `name` on `node` and marks it running (a new pod starts `Pending`, as the kubelet
/// would find it).
fn create_running(server: &ApiServer, name: &str, node: &str) -> Result<(), Error> {
    server.create(&pod(name, node)?)?;
    server.patch::<Pod>(
        Some("ns-a"),
        name,
        &serde_json::json!({"status": {"phase": "Running", "podIP": "10.0.0.1"}}),
    )?;
    Ok(())
}

/// Waits until `cond` holds, or fails after `timeout` saying what did not happen.
async fn converge(what: &str, timeout: Duration, cond: impl Fn() -> bool) -> Result<(), Error> {
    let deadline = Instant::now() + timeout;
    while !cond() {
        if Instant::now() >= deadline {
            return Err(format!("the cache did not converge: {what}").into());
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    Ok(())
}

#[tokio::main]
async fn main() -> Result<(), Error> {
    // The simulator with 12 running pods, `pod-<i>` on `node-<i % 3>`.
    let server = ApiServer::start(Config::default().with_core_types()).await?;
    for i in 0..12 {
        create_running(&server, &format!("pod-{i}"), &format!("node-{}", i % 3))?;
    }
    let client = kube_client::Client::try_from(kube_client::Config::new(server.url().parse()?))?;

    let factory = KubeInformerFactory::new(KubeSource::new(client));
    let pods = factory.informer::<SlimPod>();
    let by_node = pods.add_index(
        "node",
        index_func(|p: &SlimPod| {
            Ok(p.spec
                .node_name
                .as_deref()
                .map(IndexValues::one)
                .unwrap_or_default())
        }),
    )?;
    factory.start()?;
    let report = factory
        .wait_for_cache_sync(Some(Duration::from_secs(30)))
        .await;
    if !report.all_synced() {
        return Err(format!("not synced: {report}").into());
    }

    // A query from the cache: the pods of node-1 and their phases.
    let lister = pods.lister();
    let mut on_node_1: Vec<(String, String)> = lister
        .lookup(&by_node, "node-1")?
        .iter()
        .map(|p| {
            (
                p.metadata.name.clone().unwrap_or_default(),
                p.status.phase.clone().unwrap_or_default(),
            )
        })
        .collect();
    on_node_1.sort();
    println!("{} pods cached; node-1 runs {on_node_1:?}", lister.len());
    if lister.len() != 12 || on_node_1.len() != 4 || on_node_1.iter().any(|(_, p)| p != "Running") {
        return Err(format!("expected 12 pods, 4 running on node-1: {on_node_1:?}").into());
    }
    // The server sent every pod with its managed fields; none was kept.
    let stored = server.get::<Pod>(Some("ns-a"), "pod-0")?;
    if stored.metadata.managed_fields.is_none()
        || lister
            .list(&Everything)
            .iter()
            .any(|p| p.metadata.managed_fields.is_some())
    {
        return Err("the managed fields were not left out of the cache".into());
    }

    // The cluster changes: pod-1 finishes, pod-4 is deleted, pod-late arrives on node-1.
    server.patch::<Pod>(
        Some("ns-a"),
        "pod-1",
        &serde_json::json!({"status": {"phase": "Succeeded"}}),
    )?;
    server.delete::<Pod>(Some("ns-a"), "pod-4")?;
    create_running(&server, "pod-late", "node-1")?;

    let phase = |name: &str| {
        lister
            .namespace("ns-a")
            .get(name)
            .and_then(|p| p.status.phase.clone())
    };
    let node_1 = || {
        let mut keys = lister.lookup_keys(&by_node, "node-1").unwrap_or_default();
        keys.sort();
        keys
    };
    let timeout = Duration::from_secs(10);
    converge("pod-1 Succeeded", timeout, || {
        phase("pod-1").as_deref() == Some("Succeeded")
    })
    .await?;
    converge("pod-4 gone", timeout, || {
        lister.namespace("ns-a").get("pod-4").is_none()
    })
    .await?;
    converge("pod-late on node-1", timeout, || {
        node_1() == ["ns-a/pod-1", "ns-a/pod-10", "ns-a/pod-7", "ns-a/pod-late"]
    })
    .await?;
    println!(
        "after the changes: {} pods cached, node-1 runs {:?}, pod-1 is {}",
        lister.len(),
        node_1(),
        phase("pod-1").unwrap_or_default()
    );
    if lister.len() != 12 {
        return Err(format!("expected 12 pods after the changes, {}", lister.len()).into());
    }

    factory.shutdown().await?;
    server.shutdown().await;
    println!("the projection's cache converged");
    Ok(())
}
