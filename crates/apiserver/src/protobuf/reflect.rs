//! The reflective encoder: the JSON object is turned into a `prost_reflect::DynamicMessage`,
//! which is then encoded. It is the reference the direct encoder (`super::encode`) is checked
//! and measured against; the server itself does not use it.

use base64::Engine as _;
use prost::Message as _;
use prost_reflect::{
    DynamicMessage, FieldDescriptor, Kind, MapKey, MessageDescriptor, Value as Pb,
};
use serde_json::Value;

use super::{MAGIC, META, POOL, is_inline, message_for, special, unknown_descriptor};

/// An enveloped object, as [`super::encode_object`] writes it.
pub(crate) fn encode_object(value: &Value) -> Option<Vec<u8>> {
    let api_version = value.get("apiVersion")?.as_str()?;
    let kind = value.get("kind")?.as_str()?;
    let descriptor = message_for(api_version, kind)?;
    let raw = json_to_message(&descriptor, value).encode_to_vec();
    Some(envelope(api_version, kind, raw))
}

/// A watch stream frame, as [`super::watch_frame`] writes it.
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

/// A bare message.
#[cfg(test)]
pub(crate) fn encode_message(descriptor: &MessageDescriptor, value: &Value) -> Vec<u8> {
    json_to_message(descriptor, value).encode_to_vec()
}
