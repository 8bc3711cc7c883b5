//! A realistic pod, and a projection of it.
//!
//! The synthetic pods of [`workload`](crate::workload) carry a name, three labels and one
//! container: no managed fields, no status. The fixture `fixtures/pod-realistic.json` is what a
//! kube-apiserver v1.36 returns for a scheduled, running pod of a Deployment: three
//! `metadata.managedFields` entries (kube-controller-manager, the kubelet's `status`
//! subresource, a `kubectl label`), a ReplicaSet owner, a dozen labels and annotations, two
//! containers with resources, ports, env, mounts and probes, a projected service-account token
//! volume, and a `Running` status with five conditions and two container statuses.
//!
//! [`realistic_pod`] makes pod number `i` from it, as [`workload::pod`](crate::workload::pod)
//! does for the synthetic ones; [`SlimPod`] is a user-defined projection that keeps only what a
//! node-aware controller reads (metadata, `spec.nodeName`, `status.phase`).

use std::borrow::Cow;
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use informer_store::{IndexFunc, IndexValues, index_func};
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::core::NamespaceResourceScope;
use serde::Deserialize;
use serde::de::DeserializeOwned;

/// The fixture, as the API server would print it (indented).
pub const REALISTIC_POD_JSON: &str = include_str!("../fixtures/pod-realistic.json");

/// Realistic pods are spread over this many nodes (`worker-0` …).
pub const REALISTIC_NODES: usize = 8;

/// The fixture, parsed once.
pub fn realistic_template() -> &'static Pod {
    static TEMPLATE: OnceLock<Pod> = OnceLock::new();
    TEMPLATE.get_or_init(|| {
        serde_json::from_str(REALISTIC_POD_JSON).expect("the realistic pod fixture is a Pod")
    })
}

/// Realistic pod number `i`: the fixture with name `checkout-api-7d9c5f6b8d-{i}`, namespace
/// `ns-{i % 100}`, a uid of its own, resource version `i + 1`, on node
/// `worker-{i % REALISTIC_NODES}`.
pub fn realistic_pod(i: usize) -> Pod {
    let mut pod = realistic_template().clone();
    let meta = &mut pod.metadata;
    meta.name = Some(format!("checkout-api-7d9c5f6b8d-{i:05}"));
    meta.namespace = Some(format!("ns-{}", i % 100));
    meta.uid = Some(format!("5b0f3a52-9c1e-4c7a-8f0d-{i:012x}"));
    meta.resource_version = Some((i as u64 + 1).to_string());
    if let Some(spec) = pod.spec.as_mut() {
        spec.node_name = Some(format!("worker-{}", i % REALISTIC_NODES));
    }
    pod
}

/// Realistic pod number `i` as the API server sends it in a list or watch: compact JSON.
pub fn realistic_pod_json(i: usize) -> Vec<u8> {
    serde_json::to_vec(&realistic_pod(i)).expect("a pod serializes")
}

/// Realistic pod number `i` as the metadata-only API sends it: a `PartialObjectMetadata`
/// (its metadata, managed fields included), compact JSON.
pub fn realistic_metadata_json(i: usize) -> Vec<u8> {
    let pod = realistic_pod(i);
    serde_json::to_vec(&serde_json::json!({
        "kind": "PartialObjectMetadata",
        "apiVersion": "meta.k8s.io/v1",
        "metadata": pod.metadata,
    }))
    .expect("metadata serializes")
}

/// Decodes realistic pod number `i` as a `T` (a `Pod`, a `PartialObjectMeta<Pod>`, a
/// [`SlimPod`]), from the bytes the API server sends for a full pod.
pub fn decode_realistic<T: DeserializeOwned>(i: usize) -> T {
    serde_json::from_slice(&realistic_pod_json(i)).expect("the realistic pod decodes")
}

/// A projection of a pod: only what a node-aware controller reads. Every other field of the
/// JSON is skipped by the decoder and never allocated.
#[derive(Debug, Clone, Deserialize)]
pub struct SlimPod {
    /// The pod's metadata.
    pub metadata: ObjectMeta,
    /// `spec`, reduced to `nodeName`.
    #[serde(default)]
    pub spec: SlimPodSpec,
    /// `status`, reduced to `phase`.
    #[serde(default)]
    pub status: SlimPodStatus,
}

/// A pod's metadata and nothing else, decoded from the whole pod's JSON: the least any
/// projection that keeps the metadata can decode (`kube::Resource::meta` requires an
/// `ObjectMeta`, and every other field is skipped without allocating). Its decode time is the
/// floor under [`SlimPod`]'s.
#[derive(Debug, Clone, Deserialize)]
pub struct MetadataAlone {
    /// The pod's metadata.
    pub metadata: ObjectMeta,
}

/// The part of a pod's spec a [`SlimPod`] keeps.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SlimPodSpec {
    /// The node the pod is bound to.
    pub node_name: Option<String>,
}

/// The part of a pod's status a [`SlimPod`] keeps.
#[derive(Debug, Clone, Default, Deserialize)]
pub struct SlimPodStatus {
    /// `Pending`, `Running`, `Succeeded`, `Failed` or `Unknown`.
    pub phase: Option<String>,
}

impl kube::Resource for SlimPod {
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

/// The node index of [`SlimPod`]s: `spec.nodeName`, borrowed.
pub fn slim_node_index() -> IndexFunc<SlimPod> {
    index_func(|p: &SlimPod| {
        Ok(p.spec
            .node_name
            .as_deref()
            .map(IndexValues::one)
            .unwrap_or_default())
    })
}

/// How the managed fields of a realistic pod are treated on the way into the cache.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ManagedFields {
    /// Decoded and cached.
    Kept,
    /// Decoded, then dropped by `strip_managed_fields` as the informer's transform.
    Stripped,
    /// Left out by the decoder ([`informer_kube::WithoutManagedFields`]): never built.
    Skipped,
}

/// `n` realistic pods, each decoded as a `T` from its JSON (without its managed fields if
/// `skip`), shared.
pub fn decoded<T: DeserializeOwned>(n: usize, skip: bool) -> Vec<Arc<T>> {
    (0..n)
        .map(|i| {
            Arc::new(if skip {
                decode_realistic::<informer_kube::WithoutManagedFields<T>>(i).0
            } else {
                decode_realistic(i)
            })
        })
        .collect()
}

/// `n` synthetic pods ([`crate::workload::pod`]), each decoded as a `T` from its JSON, shared.
pub fn decoded_synthetic<T: DeserializeOwned>(n: usize) -> Vec<Arc<T>> {
    (0..n)
        .map(|i| {
            let json = serde_json::to_vec(&crate::workload::pod(i)).expect("a pod serializes");
            Arc::new(serde_json::from_slice(&json).expect("the synthetic pod decodes"))
        })
        .collect()
}

/// The time to decode `bytes` as a `T`, per decode, over `count` decodes (then `after` on each
/// decoded value, inside the clock: a transform, or nothing).
pub fn decode_time<T: DeserializeOwned>(
    bytes: &[u8],
    count: usize,
    after: impl Fn(T) -> T,
) -> Duration {
    let count = count.max(1);
    let start = Instant::now();
    for _ in 0..count {
        let value: T = serde_json::from_slice(std::hint::black_box(bytes)).expect("decodes");
        std::hint::black_box(after(value));
    }
    start.elapsed() / count as u32
}

#[cfg(test)]
mod tests {
    use super::*;
    use kube::core::PartialObjectMeta;

    #[test]
    fn the_fixture_is_a_running_pod_with_two_containers() {
        let pod = realistic_template();
        let meta = &pod.metadata;
        let managed = meta.managed_fields.as_deref().unwrap_or_default();
        assert!(managed.len() >= 2);
        assert!(
            managed
                .iter()
                .any(|m| m.manager.as_deref() == Some("kube-controller-manager")
                    && m.operation.as_deref() == Some("Update")
                    && m.fields_v1.is_some())
        );
        assert!(
            managed
                .iter()
                .any(|m| m.manager.as_deref() == Some("kubelet")
                    && m.subresource.as_deref() == Some("status"))
        );
        let owners = meta.owner_references.as_deref().unwrap_or_default();
        assert_eq!(owners.len(), 1);
        assert_eq!(owners[0].kind, "ReplicaSet");
        assert_eq!(meta.labels.as_ref().map(|l| l.len()), Some(12));
        assert_eq!(meta.annotations.as_ref().map(|a| a.len()), Some(12));

        let spec = pod.spec.as_ref().expect("a spec");
        assert_eq!(spec.containers.len(), 2);
        let api = &spec.containers[0];
        assert!(api.resources.is_some() && api.liveness_probe.is_some());
        assert_eq!(api.ports.as_ref().map(Vec::len), Some(2));
        assert_eq!(api.env.as_ref().map(Vec::len), Some(5));
        assert_eq!(spec.node_name.as_deref(), Some("worker-a-3"));
        assert_eq!(spec.service_account_name.as_deref(), Some("checkout-api"));
        assert_eq!(spec.dns_policy.as_deref(), Some("ClusterFirst"));
        assert_eq!(spec.tolerations.as_ref().map(Vec::len), Some(3));
        let volumes = spec.volumes.as_deref().unwrap_or_default();
        let projected = volumes
            .iter()
            .find_map(|v| v.projected.as_ref())
            .expect("a projected volume");
        let sources = projected.sources.as_deref().unwrap_or_default();
        assert!(sources.iter().any(|s| s.service_account_token.is_some()));

        let status = pod.status.as_ref().expect("a status");
        assert_eq!(status.phase.as_deref(), Some("Running"));
        let conditions: Vec<&str> = status
            .conditions
            .as_deref()
            .unwrap_or_default()
            .iter()
            .map(|c| c.type_.as_str())
            .collect();
        assert_eq!(
            conditions,
            [
                "PodReadyToStartContainers",
                "Initialized",
                "Ready",
                "ContainersReady",
                "PodScheduled"
            ]
        );
        assert_eq!(status.host_ips.as_ref().map(Vec::len), Some(1));
        assert_eq!(status.pod_ip.as_deref(), Some("10.244.3.57"));
        assert_eq!(status.qos_class.as_deref(), Some("Burstable"));
        assert!(status.start_time.is_some());
        let statuses = status.container_statuses.as_deref().unwrap_or_default();
        assert_eq!(statuses.len(), 2);
        for s in statuses {
            assert!(s.ready && s.started == Some(true) && s.restart_count == 0);
            assert!(
                s.state
                    .as_ref()
                    .and_then(|st| st.running.as_ref())
                    .is_some()
            );
            assert!(
                s.container_id
                    .as_deref()
                    .unwrap_or_default()
                    .starts_with("containerd://")
            );
            assert!(s.image_id.contains("@sha256:"));
        }
    }

    #[test]
    fn pod_i_is_the_fixture_renamed_and_placed() {
        let (a, b) = (realistic_pod(1), realistic_pod(2));
        assert_ne!(a.metadata.name, b.metadata.name);
        assert_ne!(a.metadata.uid, b.metadata.uid);
        assert_eq!(a.metadata.resource_version.as_deref(), Some("2"));
        assert_eq!(
            a.spec.as_ref().and_then(|s| s.node_name.as_deref()),
            Some("worker-1")
        );
        assert_eq!(
            a.metadata.managed_fields,
            realistic_template().metadata.managed_fields
        );
        assert_eq!(a.status, realistic_template().status);
    }

    #[test]
    fn every_view_decodes_from_the_same_bytes() {
        let pod: Pod = decode_realistic(3);
        assert_eq!(pod, realistic_pod(3));
        let slim: SlimPod = decode_realistic(3);
        assert_eq!(slim.metadata, pod.metadata);
        assert_eq!(slim.spec.node_name.as_deref(), Some("worker-3"));
        assert_eq!(slim.status.phase.as_deref(), Some("Running"));
        let meta: PartialObjectMeta<Pod> = decode_realistic(3);
        assert_eq!(meta.metadata, pod.metadata);
        let informer_kube::WithoutManagedFields(skipped): informer_kube::WithoutManagedFields<
            SlimPod,
        > = decode_realistic(3);
        assert_eq!(skipped.metadata.managed_fields, None);
        let mut stripped = pod.metadata.clone();
        stripped.managed_fields = None;
        assert_eq!(skipped.metadata, stripped);
        let synthetic: Vec<Arc<SlimPod>> = decoded_synthetic(2);
        assert_eq!(synthetic[1].metadata, crate::workload::pod(1).metadata);
        assert_eq!(synthetic[1].spec.node_name.as_deref(), Some("node-1"));
        let from_metadata_api: PartialObjectMeta<Pod> =
            serde_json::from_slice(&realistic_metadata_json(3)).unwrap();
        assert_eq!(from_metadata_api.metadata, pod.metadata);
        assert_eq!(slim_node_index()(&slim).unwrap().as_slice(), ["worker-3"]);
    }
}
