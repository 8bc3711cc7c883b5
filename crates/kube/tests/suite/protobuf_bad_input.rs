//! A bad protobuf watch frame through the adapter (`decode_watch_frame`, the decoding a
//! `KubeListerWatcher`'s protobuf watch stream does): a `Decode` error carrying the protobuf
//! decoder's error, never a panic, with or without managed fields.

use informer_apiserver::protobuf_watch_frame;
use informer_kube::decode_watch_frame;
use informer_reflector::{Error, ErrorKind};
use k8s_openapi::api::core::v1::Pod;
use kube::api::WatchEvent;
use serde_json::{Value, json};

fn pod() -> Value {
    json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "p", "namespace": "ns", "resourceVersion": "5",
                     "managedFields": [{"manager": "m", "operation": "Update",
                                        "fieldsType": "FieldsV1", "fieldsV1": {"f:spec": {}}}]},
        "spec": {"containers": [{"name": "c", "image": "i"}]},
    })
}

/// A frame's `WatchEvent` message (without its 4-byte length).
fn event(event_type: &str, object: &Value) -> Vec<u8> {
    protobuf_watch_frame(event_type, object).expect("a built-in kind")[4..].to_vec()
}

/// A length-delimited protobuf field.
fn field(number: u8, value: &[u8]) -> Vec<u8> {
    assert!(value.len() < 128 && number < 16);
    [&[number << 3 | 2, value.len() as u8][..], value].concat()
}

/// The frame's decoding, with and without managed fields: a `Decode` error whose message names
/// the watch event and whose source is the protobuf decoder's error, displayed as `expected`
/// says. Returns the source's text.
fn decode_error(frame: &[u8], expected: &str) -> String {
    let mut texts = Vec::new();
    for without_managed_fields in [false, true] {
        let err = decode_watch_frame::<Pod>(frame, without_managed_fields)
            .expect_err("a bad frame is an error");
        assert_eq!(err.kind(), ErrorKind::InternalError);
        let Error::Decode { message, source } = err else {
            panic!("not a decode error: {err:?}");
        };
        let source = source.expect("the protobuf decoder's error");
        let text = source.to_string();
        assert!(text.contains(expected), "{text}");
        assert_eq!(message, format!("watch event: {text}"));
        texts.push(text);
    }
    assert_eq!(texts[0], texts[1]);
    texts.remove(0)
}

#[test]
fn a_good_frame_decodes_for_contrast() {
    let frame = event("ADDED", &pod());
    for without_managed_fields in [false, true] {
        let Ok(WatchEvent::Added(read)) = decode_watch_frame::<Pod>(&frame, without_managed_fields)
        else {
            panic!("an ADDED event");
        };
        assert_eq!(read.metadata.name.as_deref(), Some("p"));
        assert_eq!(
            read.metadata.managed_fields.is_none(),
            without_managed_fields
        );
    }
}

#[test]
fn garbage_is_a_decode_error() {
    // `t`: field 14, wire type 4 (a group).
    decode_error(b"this is not protobuf", "wire type 4");
    // Nothing at all: an event without a type.
    decode_error(b"", "a watch event without a type");
}

#[test]
fn a_frame_cut_short_is_a_decode_error() {
    let frame = event("MODIFIED", &pod());
    decode_error(&frame[..frame.len() - 1], "bytes where");
    // Cut inside the type's length.
    decode_error(&frame[..1], "the input ends inside a varint");
}

#[test]
fn an_object_that_is_not_enveloped_is_a_decode_error() {
    let raw_extension = field(1, br#"{"kind":"Pod"}"#);
    let frame = [field(1, b"ADDED"), field(2, &raw_extension)].concat();
    decode_error(&frame, "the k8s\\0 prefix is missing");
}

#[test]
fn an_unknown_field_number_is_a_decode_error() {
    let mut frame = event("ADDED", &pod());
    frame.extend(field(9, b"x"));
    decode_error(&frame, "field 9 of meta.v1.WatchEvent is not known");
}

#[test]
fn a_status_where_a_pod_was_expected_is_a_decode_error() {
    let status = json!({"apiVersion": "v1", "kind": "Status", "status": "Failure", "code": 500});
    let text = decode_error(&event("ADDED", &status), "Status");
    assert!(text.contains("Pod"), "{text}");
    // As the `ERROR` event it is, it decodes.
    let Ok(WatchEvent::Error(read)) = decode_watch_frame::<Pod>(&event("ERROR", &status), false)
    else {
        panic!("an ERROR event");
    };
    assert_eq!(read.code, 500);
}

#[test]
fn an_unknown_event_type_is_a_decode_error_without_a_source() {
    let err = decode_watch_frame::<Pod>(&event("RENAMED", &pod()), false).unwrap_err();
    let Error::Decode { message, source } = err else {
        panic!("not a decode error: {err:?}");
    };
    assert!(message.contains("RENAMED"), "{message}");
    assert!(source.is_none());
}
