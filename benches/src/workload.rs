//! The benchmark objects: pod number `i`, its key, and the `namespace` and `node` indexes.

use std::collections::BTreeMap;
use std::sync::Arc;

use informer_store::{
    IndexFunc, Indexers, KeyError, KeyFunc, NAMESPACE_INDEX, index_func, meta_namespace_key,
};
use k8s_openapi::api::core::v1::{Container, Pod, PodSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

/// The name of the node index.
pub const NODE_INDEX: &str = "node";

/// Pod number `i` at resource version `i + 1`.
pub fn pod(i: usize) -> Pod {
    pod_at(i, i as u64 + 1, i % 1000)
}

/// Pod number `i` at `resource_version`, scheduled on `node-{node}`:
/// name `pod-{i}`, namespace `ns-{i % 100}`, labels `app`, `tier`, `idx`, one container.
pub fn pod_at(i: usize, resource_version: u64, node: usize) -> Pod {
    let labels = BTreeMap::from([
        ("app".to_owned(), format!("app-{}", i % 50)),
        ("tier".to_owned(), format!("t-{}", i % 3)),
        ("idx".to_owned(), i.to_string()),
    ]);
    Pod {
        metadata: ObjectMeta {
            name: Some(format!("pod-{i}")),
            namespace: Some(format!("ns-{}", i % 100)),
            labels: Some(labels),
            resource_version: Some(resource_version.to_string()),
            ..ObjectMeta::default()
        },
        spec: Some(PodSpec {
            node_name: Some(format!("node-{node}")),
            containers: vec![Container {
                name: "c".to_owned(),
                image: Some(format!("registry/app:{}", i % 50)),
                ..Container::default()
            }],
            ..PodSpec::default()
        }),
        status: None,
    }
}

/// `n` pods, numbers `0..n`, shared.
pub fn pods(n: usize) -> Vec<Arc<Pod>> {
    (0..n).map(|i| Arc::new(pod(i))).collect()
}

/// `namespace/name`.
pub fn key_func() -> KeyFunc<Pod> {
    Arc::new(|p: &Pod| {
        let name = p.metadata.name.as_deref().ok_or(KeyError::MissingName)?;
        meta_namespace_key(p.metadata.namespace.as_deref(), name)
    })
}

/// `metadata.namespace`.
pub fn namespace_index() -> IndexFunc<Pod> {
    index_func(|p: &Pod| Ok(p.metadata.namespace.as_deref().into()))
}

/// `spec.nodeName`.
pub fn node_index() -> IndexFunc<Pod> {
    informer_kube::pod_node_index_func()
}

/// The `namespace` and `node` indexes.
pub fn indexers() -> Indexers<Pod> {
    informer_store::indexers([
        (NAMESPACE_INDEX, namespace_index()),
        (NODE_INDEX, node_index()),
    ])
}

/// `metadata.resourceVersion`.
pub fn resource_version_func() -> informer_store::ResourceVersionFunc<Pod> {
    Arc::new(|p: &Pod| p.metadata.resource_version.as_deref())
}

/// The workloads' identity of a pod: [`key_func`], [`resource_version_func`] and [`indexers`].
pub fn identity() -> informer_store::FnIdentity<Pod> {
    informer_store::FnIdentity::new(key_func())
        .with_resource_version(resource_version_func())
        .with_indexers(indexers())
}
