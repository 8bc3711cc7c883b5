//! The Kubernetes protobuf encoding (`application/vnd.kubernetes.protobuf`) of the built-in
//! types, mapped to and from the JSON the simulator stores.
//!
//! The message shapes come from the vendored `.proto` files (`proto/`), compiled at build time
//! into a descriptor pool; a generic walk maps a message to its JSON object (field names are the
//! JSON names) and back, with the few types whose JSON form is not a plain object mapped by hand:
//! `Time`, `MicroTime`, `Quantity`, `IntOrString`, `FieldsV1`, `RawExtension`, `Duration`.
//!
//! Decoding goes through `prost_reflect::DynamicMessage`. Encoding, the hot path (every list
//! and watch event a protobuf client reads), writes the bytes straight from the JSON against a
//! schema derived from the same pool (`encode`); the reflective encoder it replaced is kept
//! (`reflect`) as the reference the tests and benchmarks compare it with.

mod encode;
pub(crate) mod reflect;
#[cfg(test)]
mod tests;

use std::borrow::Cow;
use std::sync::{Arc, LazyLock, OnceLock};

use base64::Engine as _;
use prost_reflect::{
    DescriptorPool, DynamicMessage, FieldDescriptor, Kind, MapKey, MessageDescriptor,
    ReflectMessage as _, Value as Pb,
};
use serde_json::{Map, Value};

use crate::storage::StoredObject;

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
    let message = encode::message_index(&message_for(api_version, kind)?)?;
    let mut out = Vec::with_capacity(512);
    encode::write_envelope(&mut out, api_version, kind, message, value);
    Some(out)
}

/// A stored object's protobuf message (see [`StoredObject`]): the message it was written as,
/// and its bytes.
#[derive(Debug, Default)]
pub(crate) struct MessageCache(OnceLock<(usize, Vec<u8>)>);

impl MessageCache {
    /// The bytes of `value` (the object's JSON) as message `message`: the cached ones, written
    /// now on the first read. An object read as another message (its resource registered again
    /// under another kind) is written afresh.
    fn get(&self, message: usize, value: &Value) -> Cow<'_, [u8]> {
        let (cached, bytes) = self
            .0
            .get_or_init(|| (message, encode::message_bytes(message, value)));
        if *cached == message {
            Cow::Borrowed(bytes)
        } else {
            Cow::Owned(encode::message_bytes(message, value))
        }
    }
}

/// A list of stored objects as an enveloped `list_kind` (its `metadata`, then the objects as
/// `kind` messages, from their caches); the bytes [`encode_object`] writes for the whole list's
/// JSON. `None` when the kinds have no protobuf form.
pub(crate) fn encode_list(
    api_version: &str,
    kind: &str,
    list_kind: &str,
    metadata: &Map<String, Value>,
    items: &[&Arc<StoredObject>],
) -> Option<Vec<u8>> {
    let list = encode::message_index(&message_for(api_version, list_kind)?)?;
    let item = encode::message_index(&message_for(api_version, kind)?)?;
    let messages: Vec<Cow<'_, [u8]>> = items
        .iter()
        .map(|object| object.protobuf.get(item, &object.value))
        .collect();
    let metadata = Value::Object(metadata.clone());
    let mut out = Vec::new();
    encode::write_list(&mut out, api_version, list_kind, list, &metadata, &messages).then_some(out)
}

/// One frame of a protobuf watch stream: the 4-byte big-endian length, then a bare (not
/// enveloped) `meta.v1.WatchEvent` whose `object.raw` is the enveloped object — the stream
/// serializer of kube-apiserver is the raw protobuf one, its embedded encoder the enveloping one.
pub(crate) fn watch_frame(event_type: &str, object: &Value) -> Option<Vec<u8>> {
    let api_version = object.get("apiVersion")?.as_str()?;
    let kind = object.get("kind")?.as_str()?;
    let message = encode::message_index(&message_for(api_version, kind)?)?;
    let mut out = Vec::with_capacity(512);
    encode::write_frame(&mut out, event_type, api_version, kind, message, object).then_some(out)
}

/// What a protobuf watch writes its events' frames with: the message of its kind, the objects'
/// messages taken from their caches ([`StoredObject`]), so that an event costs no more than
/// the JSON line it stands for.
#[derive(Debug, Clone)]
pub(crate) struct Frames {
    message: usize,
    api_version: String,
    kind: String,
}

impl Frames {
    /// The frames of a watch of `kind` objects; `None` when the kind has no protobuf form.
    pub(crate) fn new(api_version: &str, kind: &str) -> Option<Self> {
        let message = encode::message_index(&message_for(api_version, kind)?)?;
        Some(Self {
            message,
            api_version: api_version.to_owned(),
            kind: kind.to_owned(),
        })
    }

    /// Appends the frame of an event of type `event_type` about `object`: the bytes
    /// [`watch_frame`] writes for its JSON.
    pub(crate) fn write_event(&self, out: &mut Vec<u8>, event_type: &str, object: &StoredObject) {
        let message = object.protobuf.get(self.message, &object.value);
        encode::write_frame_of(out, event_type, &self.api_version, &self.kind, &message);
    }
}

/// A JSON event line (a bookmark, an `ERROR`) as a frame; a line that is no event of a kind
/// with a protobuf form (the garbage fault's) as it is.
pub(crate) fn line_frame(line: &[u8]) -> Vec<u8> {
    serde_json::from_slice::<Value>(line)
        .ok()
        .and_then(|event| {
            let ty = event.get("type").and_then(Value::as_str).unwrap_or("");
            watch_frame(ty, event.get("object")?)
        })
        .unwrap_or_else(|| line.to_vec())
}

/// A frame cut short, as a stream torn inside an event ends: a length of twice the bytes that
/// follow, then `bytes`.
pub(crate) fn torn_frame(bytes: &[u8]) -> Vec<u8> {
    let claimed = u32::try_from(bytes.len() * 2).unwrap_or(u32::MAX);
    let mut out = claimed.to_be_bytes().to_vec();
    out.extend_from_slice(bytes);
    out
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
