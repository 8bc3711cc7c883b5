//! JSON straight to protobuf bytes: the stored JSON object is walked against a schema derived
//! once from the descriptor pool (per message: its fields in field-number order, each with its
//! JSON name, tag, kind and shape), and written into one buffer. A nested message's length goes
//! before its bytes: one byte is reserved for it, and the bytes are shifted right on the rare
//! message of 128 bytes or more (a copy within the buffer, cheaper than a first pass that
//! measures every message, which would serialise every `FieldsV1` twice).
//!
//! The rules are the reflective mapping's (`super::reflect`), which the tests hold it to:
//! fields are written in field-number order, every singular field present in the JSON (not
//! `null`) is written, zero or not (the messages are proto2: a set field is always on the
//! wire); a value of the wrong JSON type is left out (a list item or map entry alone, not its
//! list or map); a Go inlined struct (JSON name `-`) is read from the enclosing object and
//! written only when it has a field. Map entries go out in the JSON object's key order, which is
//! sorted, as Go writes them.

use std::collections::HashMap;
use std::sync::LazyLock;

use base64::Engine as _;
use prost_reflect::{FieldDescriptor, Kind, MessageDescriptor};
use serde_json::Value;

use super::{MAGIC, POOL};

/// The schema of every message in the pool, built on first use.
static SCHEMA: LazyLock<Schema> = LazyLock::new(Schema::build);

const VARINT: u64 = 0;
const FIXED64: u64 = 1;
const LEN: u64 = 2;
const FIXED32: u64 = 5;

struct Schema {
    messages: Vec<MessageSchema>,
    by_name: HashMap<String, usize>,
}

struct MessageSchema {
    special: Option<Special>,
    /// In field-number order.
    fields: Vec<FieldSchema>,
}

struct FieldSchema {
    /// The JSON name (the `.proto` field name).
    name: Box<str>,
    /// The field's key: its number and wire type, as the varint written before each value.
    tag: u64,
    kind: Scalar,
    shape: Shape,
}

#[derive(Clone, Copy)]
enum Shape {
    Single,
    /// A Go embedded struct: its fields are the enclosing JSON object's.
    Inline,
    List,
    /// `map<string, V>`: the key of the value field in each entry, and the value's kind.
    Map {
        value_tag: u64,
        value: Scalar,
    },
}

#[derive(Clone, Copy)]
enum Scalar {
    Message(usize),
    String,
    Bytes,
    Bool,
    Int32,
    Sint32,
    Sfixed32,
    Int64,
    Sint64,
    Sfixed64,
    Uint32,
    Fixed32,
    Uint64,
    Fixed64,
    Float,
    Double,
}

/// The messages whose JSON form is not an object of their fields.
#[derive(Clone, Copy)]
enum Special {
    Time,
    MicroTime,
    Duration,
    Quantity,
    IntOrString,
    /// `FieldsV1`, `RawExtension`: the JSON text as `raw` bytes.
    Raw,
}

impl Special {
    fn of(full_name: &str) -> Option<Self> {
        Some(match full_name {
            "k8s.io.apimachinery.pkg.apis.meta.v1.Time" => Special::Time,
            "k8s.io.apimachinery.pkg.apis.meta.v1.MicroTime" => Special::MicroTime,
            "k8s.io.apimachinery.pkg.apis.meta.v1.Duration" => Special::Duration,
            "k8s.io.apimachinery.pkg.api.resource.Quantity" => Special::Quantity,
            "k8s.io.apimachinery.pkg.util.intstr.IntOrString" => Special::IntOrString,
            "k8s.io.apimachinery.pkg.apis.meta.v1.FieldsV1"
            | "k8s.io.apimachinery.pkg.runtime.RawExtension" => Special::Raw,
            _ => return None,
        })
    }
}

impl Schema {
    fn build() -> Schema {
        let by_name: HashMap<String, usize> = POOL
            .all_messages()
            .enumerate()
            .map(|(i, m)| (m.full_name().to_owned(), i))
            .collect();
        let messages = POOL
            .all_messages()
            .map(|m| MessageSchema::build(&m, &by_name))
            .collect();
        Schema { messages, by_name }
    }
}

impl MessageSchema {
    fn build(descriptor: &MessageDescriptor, by_name: &HashMap<String, usize>) -> MessageSchema {
        let mut fields: Vec<(u32, FieldSchema)> = descriptor
            .fields()
            .filter_map(|field| Some((field.number(), FieldSchema::build(&field, by_name)?)))
            .collect();
        fields.sort_by_key(|(number, _)| *number);
        MessageSchema {
            special: Special::of(descriptor.full_name()),
            fields: fields.into_iter().map(|(_, field)| field).collect(),
        }
    }
}

impl FieldSchema {
    /// `None` for a field the mapping never writes (a group, an inlined scalar, a map with a
    /// key that is not a string).
    fn build(field: &FieldDescriptor, by_name: &HashMap<String, usize>) -> Option<FieldSchema> {
        let (kind, wire) = scalar(&field.kind(), by_name)?;
        let shape = if field.json_name() == "-" {
            if !matches!(kind, Scalar::Message(_)) {
                return None;
            }
            Shape::Inline
        } else if field.is_map() {
            let entry = field.kind().as_message()?.clone();
            if !matches!(entry.map_entry_key_field().kind(), Kind::String) {
                return None;
            }
            let value_field = entry.map_entry_value_field();
            let (value, value_wire) = scalar(&value_field.kind(), by_name)?;
            Shape::Map {
                value_tag: key(value_field.number(), value_wire),
                value,
            }
        } else if field.is_list() {
            Shape::List
        } else {
            Shape::Single
        };
        if field.is_group() {
            return None;
        }
        let wire = if matches!(shape, Shape::Map { .. }) {
            LEN
        } else {
            wire
        };
        Some(FieldSchema {
            name: field.name().into(),
            tag: key(field.number(), wire),
            kind,
            shape,
        })
    }
}

/// The encoder's kind and the wire type of a field kind.
fn scalar(kind: &Kind, by_name: &HashMap<String, usize>) -> Option<(Scalar, u64)> {
    Some(match kind {
        Kind::Message(m) => (Scalar::Message(*by_name.get(m.full_name())?), LEN),
        Kind::String => (Scalar::String, LEN),
        Kind::Bytes => (Scalar::Bytes, LEN),
        Kind::Bool => (Scalar::Bool, VARINT),
        Kind::Int32 | Kind::Enum(_) => (Scalar::Int32, VARINT),
        Kind::Sint32 => (Scalar::Sint32, VARINT),
        Kind::Sfixed32 => (Scalar::Sfixed32, FIXED32),
        Kind::Int64 => (Scalar::Int64, VARINT),
        Kind::Sint64 => (Scalar::Sint64, VARINT),
        Kind::Sfixed64 => (Scalar::Sfixed64, FIXED64),
        Kind::Uint32 => (Scalar::Uint32, VARINT),
        Kind::Fixed32 => (Scalar::Fixed32, FIXED32),
        Kind::Uint64 => (Scalar::Uint64, VARINT),
        Kind::Fixed64 => (Scalar::Fixed64, FIXED64),
        Kind::Float => (Scalar::Float, FIXED32),
        Kind::Double => (Scalar::Double, FIXED64),
    })
}

const fn key(number: u32, wire: u64) -> u64 {
    ((number as u64) << 3) | wire
}

/// The index of a message in the schema.
pub(super) fn message_index(descriptor: &MessageDescriptor) -> Option<usize> {
    SCHEMA.by_name.get(descriptor.full_name()).copied()
}

/// Appends the message `message` (an index from [`message_index`]) that `value` is the JSON
/// form of.
#[cfg(test)]
pub(super) fn write_message(out: &mut Vec<u8>, message: usize, value: &Value) {
    SCHEMA.message(out, message, value);
}

/// Appends `k8s\0` + `runtime.Unknown{typeMeta{apiVersion, kind}, raw: <message>,
/// contentEncoding: "", contentType: ""}`.
pub(super) fn write_envelope(
    out: &mut Vec<u8>,
    api_version: &str,
    kind: &str,
    message: usize,
    value: &Value,
) {
    write_type_meta(out, api_version, kind);
    let at = open(out, key(2, LEN));
    SCHEMA.message(out, message, value);
    close(out, at);
    write_content_fields(out);
}

/// The envelope up to its `raw`: the magic and `typeMeta`.
fn write_type_meta(out: &mut Vec<u8>, api_version: &str, kind: &str) {
    out.extend_from_slice(MAGIC);
    let at = open(out, key(1, LEN));
    put_str(out, key(1, LEN), api_version);
    put_str(out, key(2, LEN), kind);
    close(out, at);
}

/// The envelope after its `raw`: empty `contentEncoding` and `contentType`.
fn write_content_fields(out: &mut Vec<u8>) {
    out.extend_from_slice(&[key(3, LEN) as u8, 0, key(4, LEN) as u8, 0]);
}

/// The bare message `message` that `value` is the JSON form of.
pub(super) fn message_bytes(message: usize, value: &Value) -> Vec<u8> {
    let mut out = Vec::new();
    SCHEMA.message(&mut out, message, value);
    out
}

/// Appends an enveloped list (`message`, a `...List` of `metadata` and `items`) from the JSON
/// of its `metadata` and the bytes of its items' messages: the same bytes as the list written
/// whole. `false` (nothing appended) for a message not of that shape.
pub(super) fn write_list<B: AsRef<[u8]>>(
    out: &mut Vec<u8>,
    api_version: &str,
    kind: &str,
    message: usize,
    metadata: &Value,
    items: &[B],
) -> bool {
    let fields = &SCHEMA.messages[message].fields;
    let [meta, list] = &fields[..] else {
        return false;
    };
    if &*meta.name != "metadata"
        || &*list.name != "items"
        || !matches!(meta.shape, Shape::Single)
        || !matches!(list.shape, Shape::List)
        || !matches!(list.kind, Scalar::Message(_))
    {
        return false;
    }
    let mut head = Vec::new();
    if !metadata.is_null() {
        SCHEMA.value(&mut head, meta.tag, meta.kind, metadata);
    }
    let tag_len = varint_len(list.tag);
    let len = head.len()
        + items
            .iter()
            .map(|m| tag_len + varint_len(m.as_ref().len() as u64) + m.as_ref().len())
            .sum::<usize>();
    out.reserve(len + api_version.len() + kind.len() + 32);
    write_type_meta(out, api_version, kind);
    put_varint(out, key(2, LEN));
    put_varint(out, len as u64);
    out.extend_from_slice(&head);
    for item in items {
        let item = item.as_ref();
        put_varint(out, list.tag);
        put_varint(out, item.len() as u64);
        out.extend_from_slice(item);
    }
    write_content_fields(out);
    true
}

/// Appends a watch stream frame: the 4-byte big-endian length, then `WatchEvent{type,
/// object: RawExtension{raw: <envelope>}}`. `false` (and nothing appended) when the event
/// would not fit a 4-byte length.
pub(super) fn write_frame(
    out: &mut Vec<u8>,
    event_type: &str,
    api_version: &str,
    kind: &str,
    message: usize,
    value: &Value,
) -> bool {
    write_frame_with(out, event_type, api_version, kind, |out| {
        SCHEMA.message(out, message, value);
    })
}

/// [`write_frame`] from the bytes of the object's message, written before (a stored object's
/// cached message). Every length is known beforehand, so each is written once, in front of
/// what it measures: the message is copied once and never shifted (a watch's initial events
/// are thousands of these).
pub(super) fn write_frame_of(
    out: &mut Vec<u8>,
    event_type: &str,
    api_version: &str,
    kind: &str,
    message: &[u8],
) -> bool {
    // Every tag here is of a field below 16: one byte.
    let field = |len: usize| 1 + varint_len(len as u64) + len;
    let type_meta = field(api_version.len()) + field(kind.len());
    let content_fields = 4;
    let envelope = MAGIC.len() + field(type_meta) + field(message.len()) + content_fields;
    let raw_extension = field(envelope);
    let Ok(len) = u32::try_from(field(event_type.len()) + field(raw_extension)) else {
        return false;
    };
    out.reserve(4 + len as usize);
    out.extend_from_slice(&len.to_be_bytes());
    put_str(out, key(1, LEN), event_type);
    put_len(out, key(2, LEN), raw_extension);
    put_len(out, key(1, LEN), envelope);
    out.extend_from_slice(MAGIC);
    put_len(out, key(1, LEN), type_meta);
    put_str(out, key(1, LEN), api_version);
    put_str(out, key(2, LEN), kind);
    put_len(out, key(2, LEN), message.len());
    out.extend_from_slice(message);
    write_content_fields(out);
    true
}

/// A frame whose object's message `write_message` appends.
fn write_frame_with(
    out: &mut Vec<u8>,
    event_type: &str,
    api_version: &str,
    kind: &str,
    write_message: impl FnOnce(&mut Vec<u8>),
) -> bool {
    let start = out.len();
    out.extend_from_slice(&[0; 4]);
    put_str(out, key(1, LEN), event_type);
    let object = open(out, key(2, LEN));
    let raw = open(out, key(1, LEN));
    write_type_meta(out, api_version, kind);
    let at = open(out, key(2, LEN));
    write_message(out);
    close(out, at);
    write_content_fields(out);
    close(out, raw);
    close(out, object);
    let Ok(len) = u32::try_from(out.len() - start - 4) else {
        out.truncate(start);
        return false;
    };
    out[start..start + 4].copy_from_slice(&len.to_be_bytes());
    true
}

impl Schema {
    fn message(&self, out: &mut Vec<u8>, message: usize, value: &Value) {
        let schema = &self.messages[message];
        if let Some(special) = schema.special {
            write_special(out, special, value);
            return;
        }
        let Value::Object(object) = value else {
            return;
        };
        for field in &schema.fields {
            if let Shape::Inline = field.shape {
                let Scalar::Message(inner) = field.kind else {
                    continue;
                };
                let start = out.len();
                let at = open(out, field.tag);
                self.message(out, inner, value);
                if out.len() == at + 1 {
                    out.truncate(start);
                } else {
                    close(out, at);
                }
                continue;
            }
            let json = match object.get(&*field.name) {
                None | Some(Value::Null) => continue,
                Some(json) => json,
            };
            match field.shape {
                Shape::Single | Shape::Inline => {
                    self.value(out, field.tag, field.kind, json);
                }
                Shape::List => {
                    let Value::Array(items) = json else { continue };
                    for item in items {
                        self.value(out, field.tag, field.kind, item);
                    }
                }
                Shape::Map { value_tag, value } => {
                    let Value::Object(entries) = json else {
                        continue;
                    };
                    for (k, v) in entries {
                        let start = out.len();
                        let at = open(out, field.tag);
                        put_str(out, key(1, LEN), k);
                        if self.value(out, value_tag, value, v) {
                            close(out, at);
                        } else {
                            out.truncate(start);
                        }
                    }
                }
            }
        }
    }

    /// Appends one value with its key; `false` (nothing appended) when `json` does not fit
    /// the kind.
    fn value(&self, out: &mut Vec<u8>, tag: u64, kind: Scalar, json: &Value) -> bool {
        let start = out.len();
        match kind {
            Scalar::Message(inner) => {
                let at = open(out, tag);
                self.message(out, inner, json);
                close(out, at);
            }
            Scalar::String => {
                let Some(s) = json.as_str() else { return false };
                put_str(out, tag, s);
            }
            Scalar::Bytes => {
                let Some(s) = json.as_str() else { return false };
                let at = open(out, tag);
                if base64::engine::general_purpose::STANDARD
                    .decode_vec(s, out)
                    .is_err()
                {
                    out.truncate(start);
                    return false;
                }
                close(out, at);
            }
            Scalar::Float | Scalar::Double => {
                let Some(n) = json.as_f64() else { return false };
                put_varint(out, tag);
                if let Scalar::Float = kind {
                    out.extend_from_slice(&(n as f32).to_le_bytes());
                } else {
                    out.extend_from_slice(&n.to_le_bytes());
                }
            }
            _ => return write_integer(out, tag, kind, json),
        }
        true
    }
}

/// Appends an integer or bool with its key; `false` when `json` is not one of its range.
fn write_integer(out: &mut Vec<u8>, tag: u64, kind: Scalar, json: &Value) -> bool {
    let signed = || json.as_i64();
    let int32 = || signed().and_then(|n| i32::try_from(n).ok());
    let uint32 = || json.as_u64().and_then(|n| u32::try_from(n).ok());
    enum Wire {
        Varint(u64),
        Fixed32([u8; 4]),
        Fixed64([u8; 8]),
    }
    let wire = match kind {
        Scalar::Bool => json.as_bool().map(|b| Wire::Varint(u64::from(b))),
        // Negative int32s are written sign-extended to 64 bits, as protobuf specifies.
        Scalar::Int32 => int32().map(|n| Wire::Varint(i64::from(n) as u64)),
        Scalar::Sint32 => int32().map(|n| Wire::Varint(u64::from(((n << 1) ^ (n >> 31)) as u32))),
        Scalar::Sfixed32 => int32().map(|n| Wire::Fixed32(n.to_le_bytes())),
        Scalar::Int64 => signed().map(|n| Wire::Varint(n as u64)),
        Scalar::Sint64 => signed().map(|n| Wire::Varint(((n << 1) ^ (n >> 63)) as u64)),
        Scalar::Sfixed64 => signed().map(|n| Wire::Fixed64(n.to_le_bytes())),
        Scalar::Uint32 => uint32().map(|n| Wire::Varint(u64::from(n))),
        Scalar::Fixed32 => uint32().map(|n| Wire::Fixed32(n.to_le_bytes())),
        Scalar::Uint64 => json.as_u64().map(Wire::Varint),
        Scalar::Fixed64 => json.as_u64().map(|n| Wire::Fixed64(n.to_le_bytes())),
        _ => None,
    };
    let Some(wire) = wire else { return false };
    put_varint(out, tag);
    match wire {
        Wire::Varint(n) => put_varint(out, n),
        Wire::Fixed32(b) => out.extend_from_slice(&b),
        Wire::Fixed64(b) => out.extend_from_slice(&b),
    }
    true
}

/// The fields of a message whose JSON form is a string or a number.
fn write_special(out: &mut Vec<u8>, special: Special, value: &Value) {
    match special {
        Special::Time | Special::MicroTime => {
            let Some(time) = value
                .as_str()
                .and_then(|s| s.parse::<jiff::Timestamp>().ok())
            else {
                return;
            };
            let nanos = match special {
                Special::Time => 0,
                _ => {
                    let nanos = time.subsec_nanosecond();
                    nanos - nanos % 1000
                }
            };
            put_varint(out, key(1, VARINT));
            put_varint(out, time.as_second() as u64);
            put_varint(out, key(2, VARINT));
            put_varint(out, i64::from(nanos) as u64);
        }
        Special::Duration => {
            if let Some(d) = value
                .as_str()
                .and_then(|s| crate::duration::parse_go_duration(s).ok())
            {
                let nanos = i64::try_from(d.as_nanos()).unwrap_or(i64::MAX);
                put_varint(out, key(1, VARINT));
                put_varint(out, nanos as u64);
            }
        }
        Special::Quantity => match value {
            Value::String(s) => put_str(out, key(1, LEN), s),
            other => put_str(out, key(1, LEN), &other.to_string()),
        },
        Special::IntOrString => match value {
            Value::String(s) => {
                out.extend_from_slice(&[key(1, VARINT) as u8, 1]);
                put_str(out, key(3, LEN), s);
            }
            other => {
                out.extend_from_slice(&[key(1, VARINT) as u8, 0]);
                let n = other.as_i64().and_then(|n| i32::try_from(n).ok());
                put_varint(out, key(2, VARINT));
                put_varint(out, i64::from(n.unwrap_or(0)) as u64);
            }
        },
        Special::Raw => {
            let at = open(out, key(1, LEN));
            // Writing a `Value` into a `Vec` cannot fail (its keys are strings).
            let _ = serde_json::to_writer(&mut *out, value);
            close(out, at);
        }
    }
}

fn put_varint(out: &mut Vec<u8>, mut n: u64) {
    while n >= 0x80 {
        out.push((n as u8) | 0x80);
        n >>= 7;
    }
    out.push(n as u8);
}

fn varint_len(n: u64) -> usize {
    (64 - (n | 1).leading_zeros() as usize).div_ceil(7)
}

fn put_str(out: &mut Vec<u8>, tag: u64, s: &str) {
    put_varint(out, tag);
    put_varint(out, s.len() as u64);
    out.extend_from_slice(s.as_bytes());
}

/// Writes `tag` and the length `len` of the field's bytes, which follow.
fn put_len(out: &mut Vec<u8>, tag: u64, len: usize) {
    put_varint(out, tag);
    put_varint(out, len as u64);
}

/// Writes `tag` and a one-byte length placeholder; returns where the placeholder is.
fn open(out: &mut Vec<u8>, tag: u64) -> usize {
    put_varint(out, tag);
    out.push(0);
    out.len() - 1
}

/// Fills the length placeholder at `at` with the length of what follows it, shifting that
/// right when the length takes more than one byte.
fn close(out: &mut Vec<u8>, at: usize) {
    let len = out.len() - at - 1;
    if len < 0x80 {
        out[at] = len as u8;
        return;
    }
    let mut varint = [0u8; 10];
    let mut width = 0;
    let mut n = len as u64;
    while n >= 0x80 {
        varint[width] = (n as u8) | 0x80;
        n >>= 7;
        width += 1;
    }
    varint[width] = n as u8;
    width += 1;
    let end = out.len();
    out.resize(end + width - 1, 0);
    out.copy_within(at + 1..end, at + width);
    out[at..at + width].copy_from_slice(&varint[..width]);
}
