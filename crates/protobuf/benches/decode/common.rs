//! The decoders on the realistic pod (`benches/fixtures/pod-realistic.json`, encoded by the API
//! server simulator) and on the synthetic pod of the workloads (`benches/src/workload.rs`): a
//! whole `Pod` and a `Pod` without its managed fields, through the generated decoder
//! (`decode_generated`), through the serde path (`from_slice`), and through serde_json from the
//! JSON form, side by side. Shared by the two bench targets: `decode` (the system allocator)
//! and `decode_mimalloc` (mimalloc as the global allocator), whose groups carry the allocator's
//! name after the first.

use std::hint::black_box;

use criterion::Criterion;
use informer_protobuf::{DecodeOptions, envelope};
use k8s_openapi::api::core::v1::Pod;
use serde_json::{Value, json};

const FIXTURE: &[u8] = include_bytes!("../../../../benches/fixtures/pod-realistic.json");

/// A `Pod` that leaves its managed fields out, as the adapter's default does.
#[derive(serde::Deserialize)]
struct Lean {
    #[serde(rename = "metadata")]
    _metadata: LeanMeta,
    #[serde(rename = "spec")]
    _spec: Option<k8s_openapi::api::core::v1::PodSpec>,
    #[serde(rename = "status")]
    _status: Option<k8s_openapi::api::core::v1::PodStatus>,
}

#[derive(serde::Deserialize)]
struct LeanMeta {
    #[serde(rename = "labels")]
    _labels: Option<std::collections::BTreeMap<String, String>>,
    #[serde(rename = "annotations")]
    _annotations: Option<std::collections::BTreeMap<String, String>>,
    #[serde(rename = "name")]
    _name: Option<String>,
    #[serde(rename = "namespace")]
    _namespace: Option<String>,
    #[serde(rename = "uid")]
    _uid: Option<String>,
    #[serde(rename = "resourceVersion")]
    _resource_version: Option<String>,
    #[serde(rename = "creationTimestamp")]
    _creation_timestamp: Option<k8s_openapi::apimachinery::pkg::apis::meta::v1::Time>,
    #[serde(rename = "ownerReferences")]
    _owner_references: Option<Vec<k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference>>,
}

/// The synthetic pod of the workloads (`informer_benches::workload::pod(7)`): a name, a
/// namespace, three labels, a resource version, a node and one container.
fn synthetic() -> Value {
    json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {
            "name": "pod-7", "namespace": "ns-7", "resourceVersion": "8",
            "labels": {"app": "app-7", "idx": "7", "tier": "t-1"},
        },
        "spec": {"nodeName": "node-7", "containers": [{"name": "c", "image": "registry/app:7"}]},
    })
}

fn generated(bytes: &[u8], options: DecodeOptions) -> Pod {
    envelope::open(bytes)
        .and_then(|e| e.decode_generated::<Pod>(options))
        .expect("decodes")
}

/// Every decoder on both pods, in groups named `realistic_pod` and `synthetic_pod`, followed
/// by `_{allocator}` unless it is the system allocator.
pub(crate) fn decode(c: &mut Criterion, allocator: &str) {
    let group = |name: &str| match allocator {
        "system" => name.to_owned(),
        other => format!("{name}_{other}"),
    };
    let value: Value = serde_json::from_slice(FIXTURE).expect("the fixture is JSON");
    let json = serde_json::to_vec(&value).expect("encodes");
    let protobuf = informer_apiserver::encode_protobuf(&value).expect("a built-in kind");
    let whole = DecodeOptions::new();
    let lean = DecodeOptions::new().without_managed_fields();
    let mut g = c.benchmark_group(group("realistic_pod"));
    g.bench_function("generated_pod", |b| {
        b.iter(|| black_box(generated(black_box(&protobuf), whole)))
    });
    g.bench_function("generated_without_managed_fields", |b| {
        b.iter(|| black_box(generated(black_box(&protobuf), lean)))
    });
    g.bench_function("protobuf_pod", |b| {
        b.iter(|| black_box(informer_protobuf::from_slice::<Pod>(black_box(&protobuf)).unwrap()))
    });
    g.bench_function("protobuf_without_managed_fields", |b| {
        b.iter(|| black_box(informer_protobuf::from_slice::<Lean>(black_box(&protobuf)).unwrap()))
    });
    g.bench_function("json_pod", |b| {
        b.iter(|| black_box(serde_json::from_slice::<Pod>(black_box(&json)).unwrap()))
    });
    g.bench_function("json_without_managed_fields", |b| {
        b.iter(|| black_box(serde_json::from_slice::<Lean>(black_box(&json)).unwrap()))
    });
    g.finish();

    let value = synthetic();
    let json = serde_json::to_vec(&value).expect("encodes");
    let protobuf = informer_apiserver::encode_protobuf(&value).expect("a built-in kind");
    let mut g = c.benchmark_group(group("synthetic_pod"));
    g.bench_function("generated_pod", |b| {
        b.iter(|| black_box(generated(black_box(&protobuf), whole)))
    });
    g.bench_function("protobuf_pod", |b| {
        b.iter(|| black_box(informer_protobuf::from_slice::<Pod>(black_box(&protobuf)).unwrap()))
    });
    g.bench_function("json_pod", |b| {
        b.iter(|| black_box(serde_json::from_slice::<Pod>(black_box(&json)).unwrap()))
    });
    g.finish();
}
