//! The Kubernetes protobuf encoding (`application/vnd.kubernetes.protobuf`) of the built-in
//! types, mapped to and from the JSON the simulator stores.
//!
//! The message shapes come from the vendored `.proto` files (`proto/`), compiled at build time
//! into a descriptor pool; a generic walk maps a message to its JSON object (field names are the
//! JSON names) and back, with the few types whose JSON form is not a plain object mapped by hand:
//! `Time`, `MicroTime`, `Quantity`, `IntOrString`, `FieldsV1`, `RawExtension`, `Duration`.

use std::sync::LazyLock;

use base64::Engine as _;
use prost::Message as _;
use prost_reflect::{
    DescriptorPool, DynamicMessage, FieldDescriptor, Kind, MapKey, MessageDescriptor,
    ReflectMessage as _, Value as Pb,
};
use serde_json::{Map, Value};

/// The media type.
pub(crate) const MEDIA_TYPE: &str = "application/vnd.kubernetes.protobuf";
/// The four bytes that open every enveloped object.
const MAGIC: &[u8; 4] = b"k8s\0";

const META: &str = "k8s.io.apimachinery.pkg.apis.meta.v1";

static POOL: LazyLock<DescriptorPool> = LazyLock::new(|| {
    DescriptorPool::decode(&include_bytes!(concat!(env!("OUT_DIR"), "/kubernetes.bin"))[..])
        .expect("the embedded descriptor set decodes")
});

/// Fields whose Go type is a pointer, so that a zero value on the wire is meaningful and kept
/// (every other zero scalar is taken as Go's always-written, `omitempty` zero and dropped).
const KEEPS_ZERO: &[&str] = &[
    "activeDeadlineSeconds",
    "allowPrivilegeEscalation",
    "automountServiceAccountToken",
    "defaultMode",
    "deletionGracePeriodSeconds",
    "enableServiceLinks",
    "fsGroup",
    "hostUsers",
    "immutable",
    "leaseDurationSeconds",
    "leaseTransitions",
    "mode",
    "optional",
    "priority",
    "privileged",
    "readOnlyRootFilesystem",
    "runAsGroup",
    "runAsNonRoot",
    "runAsUser",
    "setHostnameAsFQDN",
    "shareProcessNamespace",
    "strategicMergePatchSupport",
    "terminationGracePeriodSeconds",
];

/// The message of a built-in `apiVersion`/`kind`, if this encoding serves it.
pub(crate) fn message_for(api_version: &str, kind: &str) -> Option<MessageDescriptor> {
    if matches!(kind, "Status" | "WatchEvent") {
        return POOL.get_message_by_name(&format!("{META}.{kind}"));
    }
    let package = match api_version.split_once('/') {
        None => format!("k8s.io.api.core.{api_version}"),
        Some((group, version)) => {
            let short = group.strip_suffix(".k8s.io")?;
            if short.contains('.') {
                return None;
            }
            format!("k8s.io.api.{short}.{version}")
        }
    };
    POOL.get_message_by_name(&format!("{package}.{kind}"))
}

/// Decodes an enveloped object (`k8s\0` + `runtime.Unknown`) into its JSON form, `apiVersion`
/// and `kind` first. `Err(None)` when the kind is not one this encoding knows.
pub(crate) fn decode_object(body: &[u8]) -> Result<Value, Option<String>> {
    let (api_version, kind, raw) = open_envelope(body).map_err(Some)?;
    let descriptor = message_for(&api_version, &kind).ok_or(None)?;
    let message = DynamicMessage::decode(descriptor, raw.as_slice())
        .map_err(|e| Some(format!("decode {kind}: {e}")))?;
    let mut out = Map::new();
    out.insert("apiVersion".into(), Value::String(api_version));
    out.insert("kind".into(), Value::String(kind));
    if let Value::Object(fields) = message_to_json(&message) {
        out.extend(fields);
    }
    Ok(Value::Object(out))
}

/// The `typeMeta` and `raw` of an enveloped object.
fn open_envelope(body: &[u8]) -> Result<(String, String, Vec<u8>), String> {
    let rest = body
        .strip_prefix(MAGIC)
        .ok_or("provided object is not a protobuf message: the k8s\\0 prefix is missing")?;
    let unknown = DynamicMessage::decode(unknown_descriptor(), rest).map_err(|e| e.to_string())?;
    let type_meta = unknown
        .get_field_by_name("typeMeta")
        .and_then(|v| v.as_message().cloned());
    let text = |name: &str| {
        type_meta
            .as_ref()
            .and_then(|t| t.get_field_by_name(name))
            .and_then(|v| v.as_str().map(str::to_owned))
            .unwrap_or_default()
    };
    let raw = unknown
        .get_field_by_name("raw")
        .and_then(|v| v.as_bytes().map(|b| b.to_vec()))
        .unwrap_or_default();
    Ok((text("apiVersion"), text("kind"), raw))
}

fn unknown_descriptor() -> MessageDescriptor {
    POOL.get_message_by_name("k8s.io.apimachinery.pkg.runtime.Unknown")
        .expect("runtime.Unknown is in the pool")
}

/// Encodes a JSON object (its own `apiVersion` and `kind` name the message) as an enveloped
/// object; `None` when the kind is not one this encoding knows.
pub(crate) fn encode_object(value: &Value) -> Option<Vec<u8>> {
    let api_version = value.get("apiVersion")?.as_str()?;
    let kind = value.get("kind")?.as_str()?;
    let descriptor = message_for(api_version, kind)?;
    let raw = json_to_message(&descriptor, value).encode_to_vec();
    Some(envelope(api_version, kind, raw))
}

/// `k8s\0` + `runtime.Unknown{typeMeta, raw}`.
fn envelope(api_version: &str, kind: &str, raw: Vec<u8>) -> Vec<u8> {
    let descriptor = unknown_descriptor();
    let mut type_meta = DynamicMessage::new(
        POOL.get_message_by_name("k8s.io.apimachinery.pkg.runtime.TypeMeta")
            .expect("runtime.TypeMeta is in the pool"),
    );
    type_meta.set_field_by_name("apiVersion", Pb::String(api_version.into()));
    type_meta.set_field_by_name("kind", Pb::String(kind.into()));
    let mut unknown = DynamicMessage::new(descriptor);
    unknown.set_field_by_name("typeMeta", Pb::Message(type_meta));
    unknown.set_field_by_name("raw", Pb::Bytes(raw.into()));
    unknown.set_field_by_name("contentEncoding", Pb::String(String::new()));
    unknown.set_field_by_name("contentType", Pb::String(String::new()));
    let mut out = MAGIC.to_vec();
    out.extend(unknown.encode_to_vec());
    out
}

/// One frame of a protobuf watch stream: the 4-byte big-endian length, then a bare (not
/// enveloped) `meta.v1.WatchEvent` whose `object.raw` is the enveloped object — the stream
/// serializer of kube-apiserver is the raw protobuf one, its embedded encoder the enveloping one.
pub(crate) fn watch_frame(event_type: &str, object: &Value) -> Option<Vec<u8>> {
    let object = encode_object(object)?;
    let event_descriptor = POOL.get_message_by_name(&format!("{META}.WatchEvent"))?;
    let mut raw_extension = DynamicMessage::new(
        POOL.get_message_by_name("k8s.io.apimachinery.pkg.runtime.RawExtension")?,
    );
    raw_extension.set_field_by_name("raw", Pb::Bytes(object.into()));
    let mut event = DynamicMessage::new(event_descriptor);
    event.set_field_by_name("type", Pb::String(event_type.into()));
    event.set_field_by_name("object", Pb::Message(raw_extension));
    let bytes = event.encode_to_vec();
    let mut out = Vec::with_capacity(bytes.len() + 4);
    out.extend_from_slice(&(u32::try_from(bytes.len()).ok()?).to_be_bytes());
    out.extend(bytes);
    Some(out)
}

// ---------------------------------------------------------------------------------------------
// message -> JSON

fn is_inline(field: &FieldDescriptor) -> bool {
    field.json_name() == "-"
}

fn special(descriptor: &MessageDescriptor) -> Option<&str> {
    let name = descriptor.full_name();
    [
        "k8s.io.apimachinery.pkg.apis.meta.v1.Time",
        "k8s.io.apimachinery.pkg.apis.meta.v1.MicroTime",
        "k8s.io.apimachinery.pkg.apis.meta.v1.Duration",
        "k8s.io.apimachinery.pkg.apis.meta.v1.FieldsV1",
        "k8s.io.apimachinery.pkg.api.resource.Quantity",
        "k8s.io.apimachinery.pkg.util.intstr.IntOrString",
        "k8s.io.apimachinery.pkg.runtime.RawExtension",
    ]
    .into_iter()
    .find(|s| *s == name)
    .and_then(|s| s.rsplit('.').next())
}

/// The JSON form of a message; `None` for a value JSON leaves out (a zero `Time`).
fn message_json(message: &DynamicMessage) -> Option<Value> {
    let int = |name: &str| {
        message
            .get_field_by_name(name)
            .and_then(|v| v.as_i64().or(v.as_i32().map(i64::from)))
            .unwrap_or(0)
    };
    let bytes = |name: &str| {
        message
            .get_field_by_name(name)
            .and_then(|v| v.as_bytes().map(|b| b.to_vec()))
            .unwrap_or_default()
    };
    match special(&message.descriptor()) {
        Some(kind @ ("Time" | "MicroTime")) => {
            let (seconds, nanos) = (int("seconds"), int("nanos"));
            if seconds == 0 && nanos == 0 {
                return None;
            }
            let time = jiff::Timestamp::new(seconds, i32::try_from(nanos).unwrap_or(0)).ok()?;
            let format = if kind == "Time" {
                "%Y-%m-%dT%H:%M:%SZ"
            } else {
                "%Y-%m-%dT%H:%M:%S%.6fZ"
            };
            Some(Value::String(time.strftime(format).to_string()))
        }
        Some("Duration") => Some(Value::String(informer_protobuf::go_duration(int(
            "duration",
        )))),
        Some("Quantity") => Some(Value::String(
            message
                .get_field_by_name("string")
                .and_then(|v| v.as_str().map(str::to_owned))
                .unwrap_or_default(),
        )),
        Some("IntOrString") => Some(if int("type") == 1 {
            Value::String(
                message
                    .get_field_by_name("strVal")
                    .and_then(|v| v.as_str().map(str::to_owned))
                    .unwrap_or_default(),
            )
        } else {
            Value::from(int("intVal"))
        }),
        Some(_) => {
            // FieldsV1, RawExtension: raw JSON (an embedded protobuf object is decoded).
            let raw = bytes("raw");
            if raw.starts_with(MAGIC) {
                return decode_object(&raw).ok();
            }
            Some(serde_json::from_slice(&raw).unwrap_or(Value::Null))
        }
        None => Some(message_to_json(message)),
    }
}

fn message_to_json(message: &DynamicMessage) -> Value {
    let mut out = Map::new();
    for (field, value) in message.fields() {
        if is_inline(&field) {
            if let Some(Value::Object(inner)) = value.as_message().and_then(message_json) {
                out.extend(inner);
            }
            continue;
        }
        let json = if field.is_map() {
            let Pb::Map(map) = value else { continue };
            let value_field = field
                .kind()
                .as_message()
                .map(|entry| entry.map_entry_value_field());
            let mut object = Map::new();
            for (key, item) in map {
                let (MapKey::String(key), Some(value_field)) = (key, &value_field) else {
                    continue;
                };
                if let Some(item) = scalar_json(value_field, item, true) {
                    object.insert(key.clone(), item);
                }
            }
            Value::Object(object)
        } else if field.is_list() {
            let Pb::List(items) = value else { continue };
            Value::Array(
                items
                    .iter()
                    .map(|item| scalar_json(&field, item, true).unwrap_or(Value::Null))
                    .collect(),
            )
        } else {
            let keep = KEEPS_ZERO.contains(&field.name());
            match scalar_json(&field, value, keep) {
                Some(json) => json,
                None => continue,
            }
        };
        out.insert(field.name().to_owned(), json);
    }
    Value::Object(out)
}

/// One value's JSON; `None` for a zero scalar that is not kept, or a zero `Time`.
fn scalar_json(field: &FieldDescriptor, value: &Pb, keep_zero: bool) -> Option<Value> {
    let json = match value {
        Pb::Message(message) => return message_json(message),
        Pb::String(s) => Value::String(s.clone()),
        Pb::Bool(b) => Value::Bool(*b),
        Pb::I32(n) => Value::from(*n),
        Pb::I64(n) => Value::from(*n),
        Pb::U32(n) => Value::from(*n),
        Pb::U64(n) => Value::from(*n),
        Pb::F64(n) => Value::from(*n),
        Pb::F32(n) => Value::from(f64::from(*n)),
        Pb::Bytes(b) => Value::String(base64::engine::general_purpose::STANDARD.encode(b)),
        Pb::EnumNumber(n) => Value::from(*n),
        Pb::List(_) | Pb::Map(_) => return None,
    };
    let zero = match &json {
        Value::String(s) => s.is_empty() && !matches!(field.kind(), Kind::Bytes),
        Value::Bool(b) => !b,
        Value::Number(n) => n.as_f64() == Some(0.0),
        _ => false,
    };
    (keep_zero || !zero).then_some(json)
}

// ---------------------------------------------------------------------------------------------
// JSON -> message

fn json_to_message(descriptor: &MessageDescriptor, value: &Value) -> DynamicMessage {
    let mut message = DynamicMessage::new(descriptor.clone());
    if let Some(kind) = special(descriptor) {
        fill_special(&mut message, kind, value);
        return message;
    }
    let Some(object) = value.as_object() else {
        return message;
    };
    for field in descriptor.fields() {
        if is_inline(&field) {
            if let Kind::Message(inner) = field.kind() {
                let child = json_to_message(&inner, value);
                if child.fields().next().is_some() {
                    message.set_field(&field, Pb::Message(child));
                }
            }
            continue;
        }
        let Some(json) = object.get(field.name()) else {
            continue;
        };
        if json.is_null() {
            continue;
        }
        if field.is_map() {
            let (Some(entries), Kind::Message(entry)) = (json.as_object(), field.kind()) else {
                continue;
            };
            let value_field = entry.map_entry_value_field();
            let map = entries
                .iter()
                .filter_map(|(k, v)| {
                    Some((MapKey::String(k.clone()), json_to_value(&value_field, v)?))
                })
                .collect();
            message.set_field(&field, Pb::Map(map));
        } else if field.is_list() {
            let Some(items) = json.as_array() else {
                continue;
            };
            let list = items
                .iter()
                .filter_map(|item| json_to_value(&field, item))
                .collect();
            message.set_field(&field, Pb::List(list));
        } else if let Some(v) = json_to_value(&field, json) {
            message.set_field(&field, v);
        }
    }
    message
}

fn json_to_value(field: &FieldDescriptor, json: &Value) -> Option<Pb> {
    Some(match field.kind() {
        Kind::Message(inner) => Pb::Message(json_to_message(&inner, json)),
        Kind::String => Pb::String(json.as_str()?.to_owned()),
        Kind::Bool => Pb::Bool(json.as_bool()?),
        Kind::Int32 | Kind::Sint32 | Kind::Sfixed32 => Pb::I32(i32::try_from(json.as_i64()?).ok()?),
        Kind::Int64 | Kind::Sint64 | Kind::Sfixed64 => Pb::I64(json.as_i64()?),
        Kind::Uint32 | Kind::Fixed32 => Pb::U32(u32::try_from(json.as_u64()?).ok()?),
        Kind::Uint64 | Kind::Fixed64 => Pb::U64(json.as_u64()?),
        Kind::Double => Pb::F64(json.as_f64()?),
        Kind::Float => Pb::F32(json.as_f64()? as f32),
        Kind::Bytes => Pb::Bytes(
            base64::engine::general_purpose::STANDARD
                .decode(json.as_str()?)
                .ok()?
                .into(),
        ),
        Kind::Enum(_) => Pb::EnumNumber(i32::try_from(json.as_i64()?).ok()?),
    })
}

fn fill_special(message: &mut DynamicMessage, kind: &str, value: &Value) {
    match kind {
        "Time" | "MicroTime" => {
            let Some(time) = value
                .as_str()
                .and_then(|s| s.parse::<jiff::Timestamp>().ok())
            else {
                return;
            };
            message.set_field_by_name("seconds", Pb::I64(time.as_second()));
            let nanos = time.subsec_nanosecond();
            let nanos = if kind == "Time" {
                0
            } else {
                nanos - nanos % 1000
            };
            message.set_field_by_name("nanos", Pb::I32(nanos));
        }
        "Duration" => {
            if let Some(d) = value
                .as_str()
                .and_then(|s| crate::duration::parse_go_duration(s).ok())
            {
                let nanos = i64::try_from(d.as_nanos()).unwrap_or(i64::MAX);
                message.set_field_by_name("duration", Pb::I64(nanos));
            }
        }
        "Quantity" => {
            let text = match value {
                Value::String(s) => s.clone(),
                other => other.to_string(),
            };
            message.set_field_by_name("string", Pb::String(text));
        }
        "IntOrString" => match value {
            Value::String(s) => {
                message.set_field_by_name("type", Pb::I64(1));
                message.set_field_by_name("strVal", Pb::String(s.clone()));
            }
            other => {
                message.set_field_by_name("type", Pb::I64(0));
                let n = other.as_i64().and_then(|n| i32::try_from(n).ok());
                message.set_field_by_name("intVal", Pb::I32(n.unwrap_or(0)));
            }
        },
        _ => {
            message.set_field_by_name("raw", Pb::Bytes(value.to_string().into_bytes().into()));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_served_kinds_have_messages() {
        for (v, k) in [
            ("v1", "Pod"),
            ("v1", "PodList"),
            ("v1", "ConfigMap"),
            ("v1", "Secret"),
            ("v1", "Namespace"),
            ("v1", "Node"),
            ("coordination.k8s.io/v1", "Lease"),
            ("coordination.k8s.io/v1", "LeaseList"),
            ("v1", "Status"),
        ] {
            assert!(message_for(v, k).is_some(), "{v} {k}");
        }
        assert!(message_for("example.com/v1", "Widget").is_none());
    }

    #[test]
    fn a_pod_round_trips_through_protobuf() {
        let pod = serde_json::json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "p", "namespace": "ns", "labels": {"a": "b"},
                         "creationTimestamp": "2024-01-02T03:04:05Z",
                         "managedFields": [{"manager": "m", "operation": "Update",
                             "fieldsType": "FieldsV1", "fieldsV1": {"f:metadata": {}},
                             "time": "2024-01-02T03:04:05Z"}]},
            "spec": {
                "containers": [{"name": "c", "image": "i",
                    "ports": [{"containerPort": 80}],
                    "resources": {"limits": {"cpu": "500m", "memory": "1Gi"}},
                    "livenessProbe": {"httpGet": {"port": "http", "path": "/"}},
                    "readinessProbe": {"tcpSocket": {"port": 8080}},
                    "env": [{"name": "X", "valueFrom": {"configMapKeyRef": {"name": "cm", "key": "k"}}}]}],
                "volumes": [{"name": "v", "emptyDir": {}}, {"name": "s", "secret": {"secretName": "x", "defaultMode": 420}}],
                "terminationGracePeriodSeconds": 0,
                "securityContext": {"runAsUser": 0}
            },
            "status": {"phase": "Running", "startTime": "2024-01-02T03:04:05Z"}
        });
        let bytes = encode_object(&pod).expect("a pod encodes");
        assert_eq!(decode_object(&bytes).expect("and decodes"), pod);
    }

    #[test]
    fn micro_time_keeps_microseconds_and_durations_read_as_go_writes_them() {
        let lease = serde_json::json!({
            "apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
            "metadata": {"name": "l"},
            "spec": {"holderIdentity": "me", "renewTime": "2024-01-02T03:04:05.123456Z",
                     "leaseDurationSeconds": 15, "leaseTransitions": 0}
        });
        let bytes = encode_object(&lease).expect("a lease encodes");
        assert_eq!(decode_object(&bytes).expect("and decodes"), lease);
    }
}
