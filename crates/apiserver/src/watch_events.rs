//! The lines of a watch stream, as kube-apiserver writes them: events
//! (`{"type":..,"object":..}`) and bookmarks.

use bytes::Bytes;
use serde_json::Value;

use crate::config::{BookmarkShape, Config};
use crate::storage::write_typed;

/// The annotation that marks the end of a streaming list's initial events.
pub(crate) const INITIAL_EVENTS_END: &str = "k8s.io/initial-events-end";

/// The first half of an event: what a torn stream ends with.
pub(crate) const HALF_EVENT: &[u8] = b"{\"type\":\"MODIFIED\",\"object\":{\"kind\":\"Po";

/// `{"type":<ty>,"object":<object>}\n`.
pub(crate) fn event_line(ty: &str, object: &Value) -> Bytes {
    let mut line = format!("{{\"type\":\"{ty}\",\"object\":").into_bytes();
    line.extend_from_slice(object.to_string().as_bytes());
    line.extend_from_slice(b"}\n");
    Bytes::from(line)
}

/// Appends the event of type `ty` about a stored object (its `body`, typed with `typed_prefix`)
/// to `buffer`, and returns that line.
pub(crate) fn write_event(
    buffer: &mut Vec<u8>,
    ty: &str,
    typed_prefix: &[u8],
    body: &[u8],
) -> Bytes {
    let start = buffer.len();
    buffer.extend_from_slice(b"{\"type\":\"");
    buffer.extend_from_slice(ty.as_bytes());
    buffer.extend_from_slice(b"\",\"object\":");
    write_typed(buffer, typed_prefix, body);
    buffer.extend_from_slice(b"}\n");
    Bytes::copy_from_slice(&buffer[start..])
}

/// A bookmark at `rv` for a watch of `kind`, in the configured shape; with `end_marker`, the
/// one that ends a streaming list's initial events.
pub(crate) fn bookmark_line(
    config: &Config,
    kind: &str,
    api_version: &str,
    is_pod: bool,
    rv: u64,
    end_marker: bool,
) -> Bytes {
    let mut metadata = serde_json::Map::new();
    metadata.insert(
        "resourceVersion".into(),
        Value::String(config.codec().encode(rv)),
    );
    let null_filled = config.bookmark_shape == BookmarkShape::NullFilled;
    if null_filled {
        metadata.insert("creationTimestamp".into(), Value::Null);
    }
    if end_marker {
        metadata.insert(
            "annotations".into(),
            serde_json::json!({ INITIAL_EVENTS_END: "true" }),
        );
    }
    let mut object = serde_json::Map::new();
    object.insert("kind".into(), Value::String(kind.to_owned()));
    object.insert("apiVersion".into(), Value::String(api_version.to_owned()));
    object.insert("metadata".into(), Value::Object(metadata));
    if null_filled && is_pod {
        object.insert("spec".into(), serde_json::json!({"containers": null}));
        object.insert("status".into(), serde_json::json!({}));
    }
    event_line("BOOKMARK", &Value::Object(object))
}
