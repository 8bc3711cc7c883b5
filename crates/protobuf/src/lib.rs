//! Kubernetes protobuf (`application/vnd.kubernetes.protobuf`) read straight into serde types.
//!
//! The API server encodes every built-in type as protobuf when asked: about half the bytes of
//! JSON, and far cheaper to read. This crate reads those bytes into any type that derives
//! `Deserialize` for the JSON form (k8s-openapi's `Pod`, a user's projection of it) without
//! JSON text or a `serde_json::Value` in between: a table of every message of the Kubernetes
//! API (field numbers, JSON names, kinds; generated from the k8s-pb and k8s-openapi crates)
//! lets a deserializer present a message as the map its JSON form would be. A field the target
//! type does not read is skipped unread, so a projection (or a filter that drops
//! `metadata.managedFields`) allocates nothing for it.
//!
//! What is read, and how it maps to JSON:
//!
//! * [`envelope::open`] / [`from_slice`]: an enveloped object (`k8s\0` + `runtime.Unknown`),
//!   with its `apiVersion` and `kind`;
//! * [`ListDecoder`]: a list response item by item as its bytes arrive;
//! * [`FrameDecoder`] and [`watch_event`]: a watch stream's length-prefixed frames;
//! * `Time` and `MicroTime` read as RFC 3339 strings, `Quantity` as its string, `IntOrString`
//!   as a number or a string, `FieldsV1` and `RawExtension` as the JSON they hold, `bytes` as
//!   base64, maps as objects, Go's embedded structs merged into their parent;
//! * Go writes a non-pointer string field even when empty, where JSON leaves it out: an empty
//!   string reads as absent, except in the few fields that are pointers in Go
//!   (`storageClassName`, …). Zero numbers and `false` are kept (`replicas: 0` is a value).
//!
//! Bad input is an [`Error`], never a panic: a truncated message, a length beyond its buffer, a
//! wrong wire type, messages nested more than 128 deep (serde_json's limit for JSON), and a
//! field number the table does not know (a server newer than the table: read such a type as
//! JSON instead).
//!
//! ```
//! use informer_protobuf::MessageType;
//!
//! // A `v1` `ConfigMap` with `metadata.name = "a"` and `data = {"k": "v"}`, as bare message bytes.
//! let bytes = [0x0a, 0x03, 0x0a, 0x01, b'a', 0x12, 0x06, 0x0a, 0x01, b'k', 0x12, 0x01, b'v'];
//! let config_map = MessageType::for_kind("v1", "ConfigMap").unwrap();
//! let value: serde_json::Value = config_map.decode(&bytes)?;
//! assert_eq!(value, serde_json::json!({"metadata": {"name": "a"}, "data": {"k": "v"}}));
//! # Ok::<(), informer_protobuf::Error>(())
//! ```

mod de;
pub mod envelope;
mod schema;
mod time;
mod typed;
mod wire;

pub use crate::envelope::{
    Envelope, FrameDecoder, ListDecoder, MAGIC, MessageType, WatchEvent, from_slice, watch_event,
};
pub use crate::time::go_duration;
pub use crate::typed::{DecodeOptions, Generated, ProtoMessage};

/// The media type of the Kubernetes protobuf encoding.
pub const MEDIA_TYPE: &str = "application/vnd.kubernetes.protobuf";

/// Whether a `Content-Type` is the Kubernetes protobuf encoding (parameters aside).
pub fn is_protobuf(content_type: &str) -> bool {
    content_type
        .split(';')
        .next()
        .is_some_and(|t| t.trim().eq_ignore_ascii_case(MEDIA_TYPE))
}

/// Why protobuf bytes could not be read.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum Error {
    /// The bytes end inside a value.
    #[error("protobuf: the input ends inside {0}")]
    Truncated(&'static str),
    /// A length-delimited value longer than what is left of its message.
    #[error("protobuf: a length of {len} bytes where {left} are left")]
    LengthBeyondBuffer {
        /// The length read.
        len: u64,
        /// The bytes left.
        left: usize,
    },
    /// A watch frame longer than [`envelope::MAX_FRAME`].
    #[error("protobuf: a watch frame of {0} bytes")]
    FrameTooLarge(usize),
    /// The body does not start with `k8s\0`.
    #[error("not a Kubernetes protobuf object: the k8s\\0 prefix is missing")]
    NotEnveloped,
    /// A field number the table does not have (a type newer than the table).
    #[error("protobuf: field {number} of {message} is not known")]
    UnknownField {
        /// The message's name.
        message: &'static str,
        /// The field's number.
        number: u32,
    },
    /// A field on the wire as another type than its schema says.
    #[error("protobuf: field {field} of {message} has wire type {wire_type}")]
    WrongWireType {
        /// The message's name.
        message: &'static str,
        /// The field's JSON name.
        field: &'static str,
        /// The wire type found.
        wire_type: u8,
    },
    /// A type the table does not have.
    #[error("protobuf: no message for {api_version} {kind}")]
    UnknownKind {
        /// `apiVersion`.
        api_version: String,
        /// `kind`.
        kind: String,
    },
    /// The JSON a `FieldsV1` or `RawExtension` holds does not read.
    #[error("protobuf: raw JSON: {0}")]
    Json(String),
    /// Anything else the wire does not allow (a varint over 10 bytes, a group, a string that is
    /// not UTF-8, messages nested too deep).
    #[error("protobuf: {0}")]
    Invalid(String),
    /// The target type refused a value (serde's own message).
    #[error("{0}")]
    Custom(String),
}

impl serde::de::Error for Error {
    fn custom<T: std::fmt::Display>(msg: T) -> Self {
        Error::Custom(msg.to_string())
    }
}
