//! The lines of a watch stream, as kube-apiserver writes them: events
//! (`{"type":..,"object":..}`) and bookmarks.

use bytes::Bytes;
use serde_json::Value;

use crate::codec::Output;
use crate::config::{BookmarkShape, Config};
use crate::storage::{StoredObject, write_typed};

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
/// to `buffer`.
pub(crate) fn write_event(buffer: &mut Vec<u8>, ty: &str, typed_prefix: &[u8], body: &[u8]) {
    buffer.extend_from_slice(b"{\"type\":\"");
    buffer.extend_from_slice(ty.as_bytes());
    buffer.extend_from_slice(b"\",\"object\":");
    write_typed(buffer, typed_prefix, body);
    buffer.extend_from_slice(b"}\n");
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

/// How a watch writes its stream: JSON lines, or protobuf frames (a 4-byte length, then a
/// `meta.v1.WatchEvent`) written from the objects' cached messages.
#[derive(Debug, Clone)]
pub(crate) enum Encoding {
    /// `{"type":..,"object":..}` lines.
    Json,
    /// Length-prefixed `meta.v1.WatchEvent` frames.
    #[cfg(feature = "protobuf")]
    Protobuf(crate::protobuf::Frames),
}

impl Encoding {
    /// The encoding of a watch answered in `output`, of `kind` objects: protobuf when it was
    /// negotiated and the kind has a protobuf form, JSON otherwise.
    pub(crate) fn new(output: Output, api_version: &str, kind: &str) -> Self {
        #[cfg(feature = "protobuf")]
        if output == Output::Protobuf
            && let Some(frames) = crate::protobuf::Frames::new(api_version, kind)
        {
            return Self::Protobuf(frames);
        }
        let _ = (output, api_version, kind);
        Self::Json
    }

    /// The response's content type.
    pub(crate) fn content_type(&self) -> &'static str {
        match self {
            Self::Json => "application/json",
            #[cfg(feature = "protobuf")]
            Self::Protobuf(_) => "application/vnd.kubernetes.protobuf",
        }
    }

    /// Appends the event of type `ty` about a stored object (typed with `typed_prefix` as
    /// JSON) to `buffer`.
    pub(crate) fn write_event(
        &self,
        buffer: &mut Vec<u8>,
        ty: &str,
        typed_prefix: &[u8],
        object: &StoredObject,
    ) {
        match self {
            Self::Json => write_event(buffer, ty, typed_prefix, &object.body),
            #[cfg(feature = "protobuf")]
            Self::Protobuf(frames) => frames.write_event(buffer, ty, object),
        }
    }

    /// A JSON event line (a bookmark, an `ERROR`, a garbage line) in this encoding.
    pub(crate) fn line(&self, line: Bytes) -> Bytes {
        match self {
            Self::Json => line,
            #[cfg(feature = "protobuf")]
            Self::Protobuf(_) => Bytes::from(crate::protobuf::line_frame(&line)),
        }
    }

    /// What a stream torn inside an event ends with: half a line, or a frame cut short.
    pub(crate) fn half_event(&self) -> Bytes {
        match self {
            Self::Json => Bytes::from_static(HALF_EVENT),
            #[cfg(feature = "protobuf")]
            Self::Protobuf(_) => Bytes::from(crate::protobuf::torn_frame(HALF_EVENT)),
        }
    }
}
