//! Where the heap bytes of the realistic pod ([`crate::realistic`]) go, part by part.
//!
//! Each part is cut out of the fixture's JSON, written back as compact JSON, and decoded on its
//! own into the k8s-openapi type that holds it in a `Pod`; the live heap is read before and after
//! the decode, the decoded value still alive. A part's heap is therefore what that value owns:
//! its own inline bytes are not counted (they sit inside its parent), a list's buffer is. The
//! parts of [`PARTITION`] together make up the whole pod, so their heap adds up to the `Pod`'s.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{
    Container, ContainerStatus, EnvVar, Pod, PodCondition, PodSpec, PodStatus, Probe,
    ResourceRequirements, SecurityContext, Volume, VolumeMount,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{
    ManagedFieldsEntry, ObjectMeta, OwnerReference, Time,
};
use serde::de::DeserializeOwned;
use serde_json::Value;

use crate::mem::HeapProbe;
use crate::realistic::REALISTIC_POD_JSON;

/// One part of the pod and what it costs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Row {
    /// What was decoded.
    pub part: String,
    /// How many items the part holds (list entries, map entries; 1 for a single value).
    pub count: usize,
    /// Heap bytes the decoded part owns (0 without a probe).
    pub heap_bytes: usize,
    /// Heap blocks (allocations) the decoded part owns (0 without a probe).
    pub heap_blocks: usize,
    /// `size_of` the decoded type; for a list, of one element.
    pub inline_bytes: usize,
}

/// Decodes each value as one type and measures the heap it owns: `(probe, part, count, values)`.
pub type Decode = fn(HeapProbe, &str, usize, &[Value]) -> Row;

/// The parts that partition the pod: JSON pointer and decode; each row is named by
/// [`part_name`]. A part whose pointer is the prefix of others is decoded without them (`kind`
/// and `apiVersion` are constants of the type).
#[rustfmt::skip]
pub const PARTITION: [(&str, Decode); 11] = [
    ("/metadata/managedFields", decode::<Vec<Entry>, Entry>),
    ("/metadata/labels", decode::<Labels, Labels>),
    ("/metadata/annotations", decode::<Labels, Labels>),
    ("/metadata/ownerReferences", decode::<Vec<OwnerReference>, OwnerReference>),
    ("/metadata", decode::<ObjectMeta, ObjectMeta>),
    ("/spec/containers", decode::<Vec<Container>, Container>),
    ("/spec/volumes", decode::<Vec<Volume>, Volume>),
    ("/spec", decode::<PodSpec, PodSpec>),
    ("/status/containerStatuses", decode::<Vec<ContainerStatus>, ContainerStatus>),
    ("/status/conditions", decode::<Vec<PodCondition>, PodCondition>),
    ("/status", decode::<PodStatus, PodStatus>),
];

/// The row name of the part at `pointer`: `spec.containers`, or `spec, the rest`.
pub fn part_name(pointer: &str) -> String {
    let name = pointer.trim_start_matches('/').replace('/', ".");
    if name.contains('.') {
        name
    } else {
        format!("{name}, the rest")
    }
}

type Labels = BTreeMap<String, String>;
type Entry = ManagedFieldsEntry;

/// The fixture as JSON.
pub fn fixture() -> Value {
    serde_json::from_str(REALISTIC_POD_JSON).expect("the realistic pod fixture is JSON")
}

/// The JSON of each part of [`PARTITION`], in its order.
pub fn split(pod: &Value) -> Vec<Value> {
    let mut parts: Vec<Value> = PARTITION
        .iter()
        .map(|p| pod.pointer(p.0).cloned().unwrap_or_default())
        .collect();
    for (part, (outer, _)) in parts.iter_mut().zip(PARTITION) {
        for (inner, _) in PARTITION {
            let key = inner.strip_prefix(outer).and_then(|k| k.strip_prefix('/'));
            if let (Some(map), Some(key)) = (part.as_object_mut(), key) {
                map.remove(key);
            }
        }
    }
    parts
}

/// The heap of the values of `items`, all kept alive until the heap is read; `n` is the row's
/// count, `size_of::<I>()` its inline bytes.
fn measure<T, I>(probe: HeapProbe, part: &str, n: usize, items: impl Iterator<Item = T>) -> Row {
    let mut kept: Vec<T> = Vec::with_capacity(items.size_hint().0);
    let before = probe().unwrap_or_default();
    kept.extend(items);
    let after = probe().unwrap_or_default();
    drop(kept);
    Row {
        part: part.to_owned(),
        count: n,
        heap_bytes: after.bytes.saturating_sub(before.bytes),
        heap_blocks: after.blocks.saturating_sub(before.blocks),
        inline_bytes: size_of::<I>(),
    }
}

/// [`measure`] of `values`, each decoded as a `T` from its compact JSON.
fn decode<T: DeserializeOwned, I>(probe: HeapProbe, part: &str, n: usize, values: &[Value]) -> Row {
    let texts: Vec<String> = values.iter().map(Value::to_string).collect();
    let decoded = texts
        .iter()
        .map(|t| serde_json::from_str::<T>(t).expect(part));
    measure::<T, I>(probe, part, n, decoded)
}

/// The rows: the whole `Pod`, then each part (those of [`PARTITION`] under their names there),
/// each followed by the rows of what is inside it (named `↳ …`).
pub fn anatomy(probe: HeapProbe) -> Vec<Row> {
    let (pod, mut slim) = (fixture(), fixture());
    slim["metadata"]["managedFields"] = Value::Null;
    let parts = split(&pod);
    let list = |k: usize| parts[k].as_array().cloned().unwrap_or_default();
    let part = |k: usize| {
        let (pointer, decode) = PARTITION[k];
        let entries = parts[k].as_array().map(Vec::len);
        let entries = entries.or(parts[k].as_object().map(|m| m.len()));
        let n = entries.filter(|_| pointer[1..].contains('/')).unwrap_or(1);
        decode(probe, &part_name(pointer), n, &parts[k..=k])
    };
    let trees: Vec<Value> = list(0).iter().map(|m| m["fieldsV1"].clone()).collect();
    let texts: Vec<String> = trees.iter().map(Value::to_string).collect();
    let bytes = texts.iter().map(|t| Box::<[u8]>::from(t.as_bytes()));
    let (m, mut bare) = (trees.len(), list(0));
    bare.iter_mut().for_each(|m| m["fieldsV1"] = Value::Null);
    let mut rows = vec![
        decode::<Pod, Pod>(probe, "`Pod`, as decoded", 1, std::slice::from_ref(&pod)),
        decode::<Pod, Pod>(probe, "`Pod`, no managedFields", 1, &[slim]),
        part(0),
        decode::<Value, Value>(probe, "↳ fieldsV1 trees, `Value`", m, &trees),
        measure::<_, Box<[u8]>>(probe, "↳ fieldsV1 as JSON, `Box<[u8]>`", m, bytes),
        decode::<Entry, Entry>(probe, "↳ entries, no fieldsV1", m, &bare),
    ];
    rows.extend((1..6).map(part));
    rows.extend(each::<Container>(probe, "spec.containers", &parts[5]));
    rows.push(part(6));
    rows.extend(each::<Volume>(probe, "spec.volumes", &parts[6]));
    rows.extend((7..11).map(part));
    rows
}

/// One row per entry of the list at `path`, each decoded as a `T`.
fn each<T: DeserializeOwned>(probe: HeapProbe, path: &str, list: &Value) -> Vec<Row> {
    let list = list.as_array().map(Vec::as_slice).unwrap_or_default();
    let name =
        |i: usize, v: &Value| format!("↳ {path}[{i}] `{}`", v["name"].as_str().unwrap_or(""));
    let row = |(i, v)| decode::<T, T>(probe, &name(i, v), 1, std::slice::from_ref(v));
    list.iter().enumerate().map(row).collect()
}

/// `size_of` the main types of a decoded pod.
pub fn type_sizes() -> Vec<(&'static str, usize)> {
    macro_rules! sizes {
        ($($t:ty),*) => { vec![$((stringify!($t), size_of::<$t>())),*] };
    }
    sizes! {
        Pod, ObjectMeta, PodSpec, PodStatus, Container, Volume, ContainerStatus, ManagedFieldsEntry,
        Probe, SecurityContext, ResourceRequirements, EnvVar, VolumeMount, OwnerReference,
        PodCondition, Value, String, Vec<Value>, BTreeMap<String, String>, Option<Time>
    }
}

/// Fields whose JSON objects are maps in the k8s-openapi types (their keys are `String`s too).
pub const MAP_FIELDS: &str =
    "labels annotations matchLabels nodeSelector limits requests allocatedResources";
/// Fields k8s-openapi holds as `Time` (a timestamp inline), not as a `String`.
pub const TIME_FIELDS: &str =
    "creationTimestamp deletionTimestamp time lastTransitionTime lastProbeTime startTime startedAt";

/// The string payload of `v` as a decoded `Pod` holds it: (bytes, non-empty strings). Every
/// string value but timestamps ([`TIME_FIELDS`]), every key of a map field ([`MAP_FIELDS`]) and
/// every key inside a `fieldsV1` tree; field names of structs are not stored. `key` is the
/// field `v` is the value of (`""` for a whole pod).
pub fn string_payload(v: &Value, key: &str) -> (usize, usize) {
    let text = |s: &str| (s.len(), usize::from(!s.is_empty()));
    let add = |a: (usize, usize), b: (usize, usize)| (a.0 + b.0, a.1 + b.1);
    let is = |list: &str| list.split(' ').any(|f| f == key);
    match v {
        Value::String(s) if !is(TIME_FIELDS) => text(s),
        Value::Array(items) => items
            .iter()
            .fold((0, 0), |a, x| add(a, string_payload(x, key))),
        // At the top, `kind` and `apiVersion` are constants of the type.
        Value::Object(map) => map.iter().fold((0, 0), |acc, (k, x)| {
            if key.is_empty() && (k == "kind" || k == "apiVersion") {
                return acc;
            }
            let tree = key == "fieldsV1";
            let own = if tree || is(MAP_FIELDS) {
                text(k)
            } else {
                (0, 0)
            };
            add(acc, add(own, string_payload(x, if tree { key } else { k })))
        }),
        _ => (0, 0),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_parts_partition_the_pod() {
        let pod = fixture();
        let mut whole = serde_json::json!({});
        let mut parts: Vec<_> = PARTITION.iter().zip(split(&pod)).collect();
        parts.sort_by_key(|((pointer, _), _)| pointer.matches('/').count());
        let mut strings = (0, 0);
        for ((pointer, _), part) in parts {
            let (parent, key) = pointer.rsplit_once('/').expect("a pointer");
            let (bytes, n) = string_payload(&part, key);
            strings = (strings.0 + bytes, strings.1 + n);
            whole.pointer_mut(parent).expect("parent first")[key] = part;
        }
        // No string is in two parts, and none is left out.
        assert_eq!(strings, string_payload(&pod, ""));
        let mut expected = pod.clone();
        for key in ["kind", "apiVersion"] {
            expected.as_object_mut().expect("an object").remove(key);
        }
        assert_eq!(whole, expected);
        let back: Pod = serde_json::from_value(whole).expect("the parts make a Pod");
        assert_eq!(&back, crate::realistic::realistic_template());

        let rows = anatomy(|| None);
        let row = |name: &str| rows.iter().find(|r| r.part == name).expect(name).clone();
        for (pointer, _) in PARTITION {
            assert!(row(&part_name(pointer)).count >= 1, "{pointer} is empty");
        }
        assert_eq!(row("metadata.managedFields").count, 3);
        assert_eq!(row("spec.containers").count, 2);
        assert_eq!(row("metadata.labels").count, 12);
        assert_eq!(row("`Pod`, as decoded").inline_bytes, size_of::<Pod>());
        assert_eq!(type_sizes()[0], ("Pod", size_of::<Pod>()));
        assert!(rows.iter().all(|r| r.heap_bytes == 0 && r.heap_blocks == 0));
    }

    #[test]
    fn string_payload_counts_data_keys_and_values_not_field_names() {
        let v = serde_json::json!({"metadata": {"name": "ab", "creationTimestamp": "2026",
            "labels": {"k": "vvv"}, "managedFields": [{"fieldsV1": {"f:spec": {"k:{}": {}}}}]}});
        assert_eq!(string_payload(&v, ""), (2 + 1 + 3 + 6 + 4, 5));
    }
}
