//! Bad bytes are a typed [`Error`], never a panic: cut messages, wrong envelopes, lengths past
//! the buffer, unknown field numbers, wrong wire types, the wrong kind, oversized watch frames,
//! and list bodies cut short or holding garbage. Every object is read by both decoders, the
//! serde path and the type's generated one, which must give the same result, error included.

use informer_apiserver::{encode_protobuf, protobuf_watch_frame};
use informer_protobuf::envelope::{self, MAX_FRAME};
use informer_protobuf::{
    DecodeOptions, Error, FrameDecoder, ListDecoder, MAGIC, MessageType, ProtoMessage, from_slice,
    watch_event,
};
use k8s_openapi::api::core::v1::{ConfigMap, Pod};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ListMeta, Status};
use serde_json::{Value, json};

// ---------------------------------------------------------------------------------------------
// Bytes written by hand.

fn varint(mut n: u64, out: &mut Vec<u8>) {
    while n >= 0x80 {
        out.push((n as u8 & 0x7f) | 0x80);
        n >>= 7;
    }
    out.push(n as u8);
}

/// A field's key: its number and wire type.
fn key(number: u32, wire_type: u8) -> Vec<u8> {
    let mut out = Vec::new();
    varint(u64::from(number) << 3 | u64::from(wire_type), &mut out);
    out
}

/// A length-delimited field.
fn bytes_field(number: u32, value: &[u8]) -> Vec<u8> {
    let mut out = key(number, 2);
    varint(value.len() as u64, &mut out);
    out.extend_from_slice(value);
    out
}

/// A varint field.
fn varint_field(number: u32, value: u64) -> Vec<u8> {
    let mut out = key(number, 0);
    varint(value, &mut out);
    out
}

/// `k8s\0` + `runtime.Unknown{typeMeta{apiVersion, kind}, raw}`.
fn enveloped(api_version: &str, kind: &str, raw: &[u8]) -> Vec<u8> {
    let type_meta = [
        bytes_field(1, api_version.as_bytes()),
        bytes_field(2, kind.as_bytes()),
    ]
    .concat();
    [
        MAGIC.to_vec(),
        bytes_field(1, &type_meta),
        bytes_field(2, raw),
    ]
    .concat()
}

/// Where each top-level field of a message ends (every field length-delimited, as in an
/// envelope or a message of messages).
fn field_ends(message: &[u8]) -> Vec<usize> {
    fn read(buf: &[u8], at: &mut usize) -> u64 {
        let mut value = 0;
        for shift in (0..).step_by(7) {
            let b = buf[*at];
            *at += 1;
            value |= u64::from(b & 0x7f) << shift;
            if b < 0x80 {
                break;
            }
        }
        value
    }
    let mut ends = Vec::new();
    let mut at = 0;
    while at < message.len() {
        assert_eq!(read(message, &mut at) & 7, 2, "a length-delimited field");
        at += read(message, &mut at) as usize;
        ends.push(at);
    }
    ends
}

/// A pod with something in every part: labels, owner references, managed fields, containers
/// with ports, env, resources and probes, volumes, a status.
fn pod_json() -> Value {
    json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {
            "name": "web-0", "namespace": "default", "uid": "0b1c", "resourceVersion": "42",
            "generation": 3, "creationTimestamp": "2024-01-02T03:04:05Z",
            "labels": {"app": "web", "empty": ""}, "annotations": {"note": "é✓ \"quoted\""},
            "ownerReferences": [{"apiVersion": "apps/v1", "kind": "StatefulSet", "name": "web",
                                 "uid": "9f", "controller": true, "blockOwnerDeletion": false}],
            "finalizers": ["example.com/f"],
            "managedFields": [{"manager": "kubectl", "operation": "Apply", "apiVersion": "v1",
                               "time": "2024-01-02T03:04:05Z", "fieldsType": "FieldsV1",
                               "fieldsV1": {"f:metadata": {"f:labels": {"f:app": {}}}}}]
        },
        "spec": {
            "containers": [{
                "name": "c", "image": "nginx:1.27", "args": ["-g", "daemon off;"],
                "ports": [{"name": "http", "containerPort": 80, "protocol": "TCP"}],
                "env": [{"name": "A", "value": "1"},
                        {"name": "B", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}}],
                "resources": {"limits": {"cpu": "500m", "memory": "1Gi"}, "requests": {"cpu": "0"}},
                "livenessProbe": {"httpGet": {"path": "/", "port": "http"}, "periodSeconds": 0},
                "readinessProbe": {"tcpSocket": {"port": 8080}, "failureThreshold": 3}
            }],
            "volumes": [{"name": "tmp", "emptyDir": {}},
                        {"name": "s", "secret": {"secretName": "s", "defaultMode": 420}}],
            "terminationGracePeriodSeconds": 0, "priority": -1, "hostNetwork": false
        },
        "status": {
            "phase": "Running", "podIP": "10.0.0.5", "startTime": "2024-01-02T03:04:06Z",
            "containerStatuses": [{"name": "c", "ready": true, "restartCount": 0, "image": "nginx",
                                   "imageID": "sha256:1", "state": {"running": {}}}]
        }
    })
}

fn pod_bytes() -> Vec<u8> {
    encode_protobuf(&pod_json()).expect("a pod has a protobuf form")
}

/// An enveloped object read by the serde path and by `T`'s generated decoder: the same result.
fn read_object<T: ProtoMessage + PartialEq + std::fmt::Debug>(body: &[u8]) -> Result<T, Error> {
    let serde = from_slice::<T>(body);
    let generated =
        envelope::open(body).and_then(|opened| opened.decode_generated(DecodeOptions::new()));
    assert_eq!(
        generated, serde,
        "the generated decoder against the serde path"
    );
    serde
}

/// Bare message bytes of `message` read as a `T` by both decoders: the same result.
fn read_bare<T: ProtoMessage + PartialEq + std::fmt::Debug>(
    message: MessageType,
    bytes: &[u8],
) -> Result<T, Error> {
    let serde = message.decode::<T>(bytes);
    let generated = message.decode_generated::<T>(bytes, DecodeOptions::new());
    assert_eq!(
        generated, serde,
        "the generated decoder against the serde path"
    );
    serde
}

fn read_config_map(bytes: &[u8]) -> Result<ConfigMap, Error> {
    read_bare(config_map(), bytes)
}

fn config_map() -> MessageType {
    MessageType::for_kind("v1", "ConfigMap").expect("in the table")
}

// ---------------------------------------------------------------------------------------------
// Cut messages

/// Every prefix of an enveloped pod: `k8s\0` cut is `NotEnveloped`; a cut inside a field is
/// `Truncated` or `LengthBeyondBuffer`; a cut between the envelope's fields reads what came
/// before it (the pod once its `raw` is whole).
#[test]
fn every_prefix_of_an_enveloped_pod_is_an_error_or_reads_its_whole_fields() {
    let bytes = pod_bytes();
    let full: Pod = from_slice(&bytes).unwrap();
    assert_eq!(full, serde_json::from_value(pod_json()).unwrap());
    // `typeMeta`, `raw`, `contentEncoding`, `contentType`.
    let ends: Vec<usize> = field_ends(&bytes[4..]).iter().map(|e| e + 4).collect();
    assert_eq!(ends.len(), 4);
    let (type_meta_end, raw_end) = (ends[0], ends[1]);

    for n in 0..=bytes.len() {
        let prefix = &bytes[..n];
        match read_object::<Pod>(prefix) {
            Ok(pod) if n >= raw_end => {
                assert!(ends.contains(&n), "{n} bytes read");
                assert_eq!(pod, full, "{n} bytes");
            }
            Ok(pod) => {
                assert_eq!(n, type_meta_end, "{n} bytes read");
                assert_eq!(pod, Pod::default());
            }
            Err(Error::NotEnveloped) => assert!(n < 4, "{n} bytes"),
            Err(Error::UnknownKind { api_version, kind }) => {
                // The magic alone: no `typeMeta`.
                assert_eq!((n, api_version.as_str(), kind.as_str()), (4, "", ""));
            }
            Err(Error::Truncated(_) | Error::LengthBeyondBuffer { .. }) => {
                assert!(!ends.contains(&n), "{n} bytes: a whole field refused");
            }
            Err(other) => panic!("{n} bytes: {other:?}"),
        }
        // Read as a `Value` too (every field visited, none skipped): errors, no panic.
        let _ = from_slice::<Value>(prefix);
    }
}

/// Every prefix of a pod's bare message (as a list holds it): a cut between its top-level
/// fields (`metadata`, `spec`, `status`) reads the fields before it; any other is `Truncated` or
/// `LengthBeyondBuffer`, as a `Pod` and as a `Value`.
#[test]
fn every_prefix_of_a_bare_pod_message_is_an_error_or_reads_its_whole_fields() {
    let bytes = pod_bytes();
    let opened = envelope::open(&bytes).unwrap();
    let (raw, pod) = (opened.raw, opened.message().unwrap());
    let full: Pod = pod.decode(raw).unwrap();
    let ends = field_ends(raw);
    assert_eq!(ends.len(), 3, "metadata, spec, status");

    for n in 0..=raw.len() {
        let prefix = &raw[..n];
        let as_value = pod.decode::<Value>(prefix);
        match read_bare::<Pod>(pod, prefix) {
            Ok(read) => {
                assert!(n == 0 || ends.contains(&n), "{n} bytes read");
                let expected = Pod {
                    metadata: if n >= ends[0] {
                        full.metadata.clone()
                    } else {
                        Default::default()
                    },
                    spec: full.spec.clone().filter(|_| n >= ends[1]),
                    status: full.status.clone().filter(|_| n >= ends[2]),
                };
                assert_eq!(read, expected, "{n} bytes");
                assert!(as_value.is_ok(), "{n} bytes");
            }
            Err(e @ (Error::Truncated(_) | Error::LengthBeyondBuffer { .. })) => {
                assert!(!ends.contains(&n), "{n} bytes: a whole field refused");
                assert_eq!(as_value.unwrap_err(), e);
            }
            Err(other) => panic!("{n} bytes: {other:?}"),
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Envelopes

#[test]
fn a_body_without_the_magic_is_not_enveloped() {
    for body in [
        &b""[..],
        b"k8s",
        b"k8s\x01",
        b"K8S\0",
        br#"{"apiVersion":"v1","kind":"Pod"}"#,
    ] {
        assert_eq!(envelope::open(body), Err(Error::NotEnveloped), "{body:?}");
        assert_eq!(
            read_object::<Pod>(body),
            Err(Error::NotEnveloped),
            "{body:?}"
        );
    }
    // A bare message (a list item, a watch event) is not an enveloped object either.
    let raw = envelope::open(&pod_bytes()).unwrap().raw.to_vec();
    assert_eq!(read_object::<Pod>(&raw), Err(Error::NotEnveloped));
}

#[test]
fn garbage_after_the_magic_is_a_typed_error() {
    let after = |garbage: &[u8]| envelope::open(&[&MAGIC[..], garbage].concat()).map(|_| ());
    // A key of wire type 7.
    assert!(matches!(after(&[0x0f]), Err(Error::Invalid(_))));
    // A varint that never ends.
    assert!(matches!(after(&[0xff; 12]), Err(Error::Invalid(_))));
    assert!(matches!(after(&[0xff; 3]), Err(Error::Truncated(_))));
    // `he`: field 13, a varint.
    assert_eq!(
        after(b"hello"),
        Err(Error::UnknownField {
            message: "runtime.Unknown",
            number: 13
        })
    );
    // Field 0.
    assert!(matches!(after(&[0x02, 0x00]), Err(Error::Invalid(_))));
    // `typeMeta` as a varint: not a field of `runtime.Unknown` of that type.
    assert_eq!(
        after(&varint_field(1, 5)),
        Err(Error::UnknownField {
            message: "runtime.Unknown",
            number: 1
        })
    );
    // A content encoding (none is defined).
    assert!(matches!(
        after(&bytes_field(3, b"gzip")),
        Err(Error::Invalid(_))
    ));
    // A `typeMeta` holding something other than its two strings.
    assert!(matches!(
        after(&bytes_field(1, &varint_field(3, 1))),
        Err(Error::Invalid(_))
    ));
    // A type name that is not UTF-8.
    assert!(matches!(
        after(&bytes_field(1, &bytes_field(2, &[0xff, 0xfe]))),
        Err(Error::Invalid(_))
    ));
}

#[test]
fn an_envelope_of_a_kind_the_table_does_not_have_is_unknown_kind() {
    let body = enveloped("example.com/v1", "Widget", &[]);
    let opened = envelope::open(&body).unwrap();
    assert_eq!(opened.kind, "Widget");
    let unknown = Error::UnknownKind {
        api_version: "example.com/v1".into(),
        kind: "Widget".into(),
    };
    assert_eq!(opened.decode::<Value>(), Err(unknown.clone()));
    assert_eq!(read_object::<Pod>(&body), Err(unknown));
}

// ---------------------------------------------------------------------------------------------
// Messages

#[test]
fn a_length_beyond_the_buffer_is_an_error() {
    // `metadata` of 100 bytes where 3 follow.
    let bytes = [&key(1, 2)[..], &[100], &bytes_field(1, b"a")].concat();
    assert_eq!(
        read_config_map(&bytes),
        Err(Error::LengthBeyondBuffer { len: 100, left: 3 })
    );
    // The longest length a varint holds.
    let mut bytes = key(1, 2);
    varint(u64::MAX, &mut bytes);
    assert_eq!(
        read_config_map(&bytes),
        Err(Error::LengthBeyondBuffer {
            len: u64::MAX,
            left: 0
        })
    );
    // Inside a nested message: `metadata.name` of 9 bytes where 1 follows.
    let metadata = [&key(1, 2)[..], &[9], b"a"].concat();
    assert_eq!(
        read_config_map(&bytes_field(1, &metadata)),
        Err(Error::LengthBeyondBuffer { len: 9, left: 1 })
    );
    // An envelope whose `raw` runs past the body.
    let mut body = enveloped("v1", "ConfigMap", &bytes_field(1, b""));
    body.truncate(body.len() - 1);
    assert!(matches!(
        read_object::<ConfigMap>(&body),
        Err(Error::LengthBeyondBuffer { left, .. }) if left == 1
    ));
}

#[test]
fn a_field_number_the_table_does_not_have_is_unknown_field() {
    assert_eq!(
        read_config_map(&bytes_field(99, b"")),
        Err(Error::UnknownField {
            message: "k8s.io.api.core.v1.ConfigMap",
            number: 99
        })
    );
    // In a nested message, after fields that read.
    let metadata = [bytes_field(1, b"cm"), varint_field(99, 1)].concat();
    assert_eq!(
        read_config_map(&bytes_field(1, &metadata)),
        Err(Error::UnknownField {
            message: "k8s.io.apimachinery.pkg.apis.meta.v1.ObjectMeta",
            number: 99
        })
    );
    // Through an envelope, read as a `Value`.
    let body = enveloped("v1", "ConfigMap", &bytes_field(42, b"x"));
    assert_eq!(
        from_slice::<Value>(&body),
        Err(Error::UnknownField {
            message: "k8s.io.api.core.v1.ConfigMap",
            number: 42
        })
    );
}

#[test]
fn a_field_of_the_wrong_wire_type_is_wrong_wire_type() {
    let object_meta = "k8s.io.apimachinery.pkg.apis.meta.v1.ObjectMeta";
    let in_metadata = |field: Vec<u8>| read_config_map(&bytes_field(1, &field));
    // `name` (a string) as a varint.
    assert_eq!(
        in_metadata(varint_field(1, 7)),
        Err(Error::WrongWireType {
            message: object_meta,
            field: "name",
            wire_type: 0
        })
    );
    // `generation` (an int64) as bytes.
    assert_eq!(
        in_metadata(bytes_field(7, b"7")),
        Err(Error::WrongWireType {
            message: object_meta,
            field: "generation",
            wire_type: 2
        })
    );
    // `finalizers` (repeated strings) as a fixed64.
    let mut fixed = key(14, 1);
    fixed.extend_from_slice(&[0; 8]);
    assert_eq!(
        in_metadata(fixed),
        Err(Error::WrongWireType {
            message: object_meta,
            field: "finalizers",
            wire_type: 1
        })
    );
    // `metadata` (a message) as a varint.
    assert_eq!(
        read_config_map(&varint_field(1, 1)),
        Err(Error::WrongWireType {
            message: "k8s.io.api.core.v1.ConfigMap",
            field: "metadata",
            wire_type: 0
        })
    );
    // A `data` entry that is a varint rather than a `{key, value}` message.
    assert_eq!(
        read_config_map(&varint_field(2, 1)),
        Err(Error::WrongWireType {
            message: "k8s.io.api.core.v1.ConfigMap",
            field: "data",
            wire_type: 0
        })
    );
}

#[test]
fn a_string_that_is_not_utf8_is_invalid() {
    let metadata = bytes_field(1, &[b'a', 0xc3]);
    assert!(matches!(
        read_config_map(&bytes_field(1, &metadata)),
        Err(Error::Invalid(_))
    ));
}

#[test]
fn fields_v1_that_is_not_json_is_a_json_error() {
    // `metadata.managedFields[0].fieldsV1.raw` = `{not json`.
    let fields_v1 = bytes_field(1, b"{not json");
    let entry = [bytes_field(1, b"m"), bytes_field(7, &fields_v1)].concat();
    let metadata = bytes_field(17, &entry);
    assert!(matches!(
        read_config_map(&bytes_field(1, &metadata)),
        Err(Error::Json(_))
    ));
}

/// A `Status` (an error response, a watch's `ERROR` event) read where a `Pod` was expected: the
/// envelope opens and names `Status`, its message is `meta.v1.Status`, and k8s-openapi's `Pod`
/// refuses the `kind` the decoder yields first: [`Error::Custom`] with serde's message.
#[test]
fn a_status_where_a_pod_was_expected_is_refused_by_the_pod_type() {
    let status = json!({
        "apiVersion": "v1", "kind": "Status", "status": "Failure",
        "message": "pods \"p\" not found", "reason": "NotFound", "code": 404,
        "metadata": {"resourceVersion": "7"},
    });
    let bytes = encode_protobuf(&status).expect("a status has a protobuf form");
    let opened = envelope::open(&bytes).unwrap();
    assert_eq!((opened.api_version, opened.kind), ("v1", "Status"));
    assert_eq!(
        opened.message().unwrap().name(),
        "k8s.io.apimachinery.pkg.apis.meta.v1.Status"
    );
    match opened.decode::<Pod>() {
        Err(Error::Custom(message)) => {
            assert!(
                message.contains("Status") && message.contains("Pod"),
                "{message}"
            );
        }
        other => panic!("{other:?}"),
    }
    // Read as what it is, it reads.
    let read: Status = opened.decode().unwrap();
    assert_eq!(read.code, Some(404));
    assert_eq!(read.reason.as_deref(), Some("NotFound"));
}

/// A `CustomResourceDefinition` whose schema is a chain of `not`s `depth` long: five levels of
/// messages above the chain (the definition, its spec, a version, its `schema`, the
/// `openAPIV3Schema`), one for each `not`.
fn schema_chain(depth: usize) -> Vec<u8> {
    let mut props = bytes_field(5, b"string");
    for _ in 0..depth {
        props = bytes_field(28, &props);
    }
    let version = [
        bytes_field(1, b"v1"),
        bytes_field(4, &bytes_field(1, &props)),
    ]
    .concat();
    let spec = [bytes_field(1, b"example.com"), bytes_field(7, &version)].concat();
    [
        bytes_field(1, &bytes_field(1, b"w.example.com")),
        bytes_field(2, &spec),
    ]
    .concat()
}

/// Messages nested past 128 levels (serde_json's limit for JSON) are `Invalid`, where reading
/// on would overflow the stack (a few kilobytes of input suffice): through nested messages, and
/// through objects enveloped in `RawExtension`s. Runs on a test thread's 2 MiB stack, a tokio
/// worker's size.
#[test]
fn messages_nested_too_deep_are_invalid_not_a_stack_overflow() {
    use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
    let crd = MessageType::for_kind("apiextensions.k8s.io/v1", "CustomResourceDefinition").unwrap();

    // 128 levels read.
    let bytes = schema_chain(123);
    assert!(crd.decode::<Value>(&bytes).is_ok());
    let read: CustomResourceDefinition = read_bare(crd, &bytes).unwrap();
    let mut schema = read.spec.versions[0]
        .schema
        .clone()
        .unwrap()
        .open_api_v3_schema
        .unwrap();
    let mut depth = 0;
    while let Some(not) = schema.not {
        (schema, depth) = (*not, depth + 1);
    }
    assert_eq!((depth, schema.type_.as_deref()), (123, Some("string")));

    for depth in [124, 1_000, 100_000] {
        let bytes = schema_chain(depth);
        for err in [
            crd.decode::<Value>(&bytes).unwrap_err(),
            read_bare::<CustomResourceDefinition>(crd, &bytes).unwrap_err(),
        ] {
            assert!(
                matches!(&err, Error::Invalid(m) if m.contains("128")),
                "{depth}: {err:?}"
            );
        }
    }

    // A `v1` `List` whose one item is an enveloped `List`, and so on.
    let mut object = enveloped("v1", "ConfigMap", &bytes_field(1, &bytes_field(1, b"cm")));
    for _ in 0..1_000 {
        object = enveloped("v1", "List", &bytes_field(2, &bytes_field(1, &object)));
    }
    let err = from_slice::<Value>(&object).unwrap_err();
    assert!(
        matches!(&err, Error::Invalid(m) if m.contains("128")),
        "{err:?}"
    );
}

// ---------------------------------------------------------------------------------------------
// Watch frames

#[test]
fn a_watch_frame_over_the_limit_is_frame_too_large() {
    let mut frames = FrameDecoder::default();
    frames.push(&u32::try_from(MAX_FRAME + 1).unwrap().to_be_bytes());
    assert_eq!(
        frames.next_frame(),
        Err(Error::FrameTooLarge(MAX_FRAME + 1))
    );

    let mut frames = FrameDecoder::default();
    frames.push(&u32::MAX.to_be_bytes());
    assert_eq!(
        frames.next_frame(),
        Err(Error::FrameTooLarge(u32::MAX as usize))
    );

    // The limit itself is a frame whose bytes have not come yet.
    let mut frames = FrameDecoder::default();
    frames.push(&u32::try_from(MAX_FRAME).unwrap().to_be_bytes());
    assert_eq!(frames.next_frame(), Ok(None));
    assert_eq!(frames.pending(), 4);
}

#[test]
fn a_bad_watch_event_is_a_typed_error() {
    // No type.
    assert!(matches!(
        watch_event(&bytes_field(2, &bytes_field(1, b"x"))),
        Err(Error::Invalid(_))
    ));
    // An unknown field of the event and of its `RawExtension`.
    assert_eq!(
        watch_event(&bytes_field(3, b"x")),
        Err(Error::UnknownField {
            message: "meta.v1.WatchEvent",
            number: 3
        })
    );
    assert_eq!(
        watch_event(
            &[
                bytes_field(1, b"ADDED"),
                bytes_field(2, &varint_field(2, 0))
            ]
            .concat()
        ),
        Err(Error::UnknownField {
            message: "runtime.RawExtension",
            number: 2
        })
    );
    // Cut: every proper prefix of a real frame's event is an error or, cut between its two
    // fields, an event without an object (which then is not enveloped).
    let frame = protobuf_watch_frame("ADDED", &pod_json()).unwrap();
    let event = &frame[4..];
    let ends = field_ends(event);
    for n in 0..event.len() {
        match watch_event(&event[..n]) {
            Ok(read) => {
                assert_eq!(
                    (n, read.event_type, read.object),
                    (ends[0], "ADDED", &b""[..])
                );
                assert_eq!(envelope::open(read.object), Err(Error::NotEnveloped));
            }
            Err(Error::Truncated(_) | Error::LengthBeyondBuffer { .. } | Error::Invalid(_)) => {}
            Err(other) => panic!("{n} bytes: {other:?}"),
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Lists

fn pod_list_bytes() -> Vec<u8> {
    let mut second = pod_json();
    second["metadata"]["name"] = json!("web-1");
    let list = json!({
        "apiVersion": "v1", "kind": "PodList",
        "metadata": {"resourceVersion": "43", "continue": "next"},
        "items": [pod_json(), second],
    });
    encode_protobuf(&list).expect("a pod list has a protobuf form")
}

/// Every prefix of a list body, pushed whole: no item is an error, the items read are the
/// first ones whole, and `finish` is `Truncated` unless the body was cut after the list's
/// `raw`, between the envelope's fields.
#[test]
fn a_list_body_cut_short_finishes_truncated() {
    let body = pod_list_bytes();
    let ends: Vec<usize> = field_ends(&body[4..]).iter().map(|e| e + 4).collect();
    let raw_end = ends[1];

    for n in 0..body.len() {
        let mut decoder = ListDecoder::default();
        decoder.push(&body[..n]);
        let mut names = Vec::new();
        while let Some((bytes, message)) = decoder.next_item().unwrap() {
            let pod: Pod = message.decode(bytes).unwrap();
            names.push(pod.metadata.name.unwrap());
        }
        assert!(names.len() <= 2);
        assert_eq!(names, ["web-0", "web-1"][..names.len()], "{n} bytes");
        match decoder.finish::<ListMeta>() {
            Ok(metadata) => {
                assert!(n >= raw_end && ends.contains(&n), "{n} bytes");
                assert_eq!(names.len(), 2);
                assert_eq!(metadata.resource_version.as_deref(), Some("43"));
            }
            Err(Error::Truncated(_)) => assert!(!(n >= raw_end && ends.contains(&n)), "{n}"),
            Err(other) => panic!("{n} bytes: {other:?}"),
        }
    }
}

/// Whether an error is the one expected.
type IsExpected = fn(&Error) -> bool;

#[test]
fn a_list_item_of_garbage_is_an_error_of_the_item() {
    let list = |items: &[Vec<u8>]| {
        let raw: Vec<u8> = std::iter::once(bytes_field(1, &bytes_field(2, b"9")))
            .chain(items.iter().map(|item| bytes_field(2, item)))
            .collect::<Vec<_>>()
            .concat();
        enveloped("v1", "PodList", &raw)
    };
    let valid = envelope::open(&pod_bytes()).unwrap().raw.to_vec();
    let garbage: [(Vec<u8>, IsExpected); 4] = [
        (vec![0xff, 0xff], |e| matches!(e, Error::Truncated(_))),
        (vec![0x0f], |e| matches!(e, Error::Invalid(_))),
        (bytes_field(77, b""), |e| {
            matches!(
                e,
                Error::UnknownField {
                    message: "k8s.io.api.core.v1.Pod",
                    number: 77
                }
            )
        }),
        (valid[..valid.len() - 1].to_vec(), |e| {
            matches!(e, Error::LengthBeyondBuffer { .. })
        }),
    ];
    for (item, expected) in garbage {
        let mut decoder = ListDecoder::default();
        decoder.push(&list(&[valid.clone(), item]));
        let (bytes, message) = decoder.next_item().unwrap().unwrap();
        assert_eq!(
            message.decode::<Pod>(bytes).unwrap().metadata.name.unwrap(),
            "web-0"
        );
        let (bytes, message) = decoder.next_item().unwrap().unwrap();
        let err = message.decode::<Pod>(bytes).unwrap_err();
        assert!(expected(&err), "{err:?}");
        assert!(message.decode::<Value>(bytes).is_err());
        assert!(matches!(decoder.next_item(), Ok(None)));
        let metadata: ListMeta = decoder.finish().unwrap();
        assert_eq!(metadata.resource_version.as_deref(), Some("9"));
    }
}

/// Pushes `body` whole to a new decoder and reads items up to the first error or the end.
fn read_list(body: &[u8]) -> Result<usize, Error> {
    let mut decoder = ListDecoder::default();
    decoder.push(body);
    let mut items = 0;
    while decoder.next_item()?.is_some() {
        items += 1;
    }
    Ok(items)
}

#[test]
fn a_bad_list_body_is_a_typed_error() {
    // No magic.
    assert_eq!(
        read_list(br#"{"kind":"PodList"}"#),
        Err(Error::NotEnveloped)
    );
    // Items before the list's type.
    assert!(matches!(
        read_list(&[&MAGIC[..], &bytes_field(2, b"")].concat()),
        Err(Error::Invalid(_))
    ));
    // A type that is not a list.
    assert!(matches!(
        read_list(&enveloped("v1", "Pod", b"")),
        Err(Error::Invalid(_))
    ));
    // A list of a kind the table does not have.
    assert!(matches!(
        read_list(&enveloped("example.com/v1", "WidgetList", b"")),
        Err(Error::UnknownKind { .. })
    ));
    // A varint where the list holds messages.
    assert!(matches!(
        read_list(&enveloped("v1", "PodList", &varint_field(2, 1))),
        Err(Error::Invalid(_))
    ));
    // A field of the list that is neither its metadata nor its items: named as the list's.
    assert_eq!(
        read_list(&enveloped("v1", "PodList", &bytes_field(5, b""))),
        Err(Error::UnknownField {
            message: "k8s.io.api.core.v1.PodList",
            number: 5
        })
    );
    // An item longer than the list.
    let mut raw = key(2, 2);
    varint(1000, &mut raw);
    raw.extend_from_slice(b"abc");
    assert_eq!(
        read_list(&enveloped("v1", "PodList", &raw)),
        Err(Error::LengthBeyondBuffer { len: 1000, left: 3 })
    );
}

/// A length near `u64::MAX` in a list body, in the envelope or in the list: an error or more
/// bytes awaited, not an overflow.
#[test]
fn a_list_length_near_the_largest_varint_does_not_overflow() {
    for len in [u64::MAX, u64::MAX - 1, 1 << 63] {
        // `typeMeta` of that length.
        let mut body = [&MAGIC[..], &key(1, 2)].concat();
        varint(len, &mut body);
        body.extend_from_slice(b"abc");
        let mut decoder = ListDecoder::default();
        decoder.push(&body);
        assert!(matches!(decoder.next_item(), Ok(None)), "{len}");
        assert_eq!(
            decoder.finish::<ListMeta>(),
            Err(Error::Truncated("a list"))
        );

        // An item of that length inside the list.
        let mut raw = key(2, 2);
        varint(len, &mut raw);
        raw.extend_from_slice(b"abc");
        let body = enveloped("v1", "PodList", &raw);
        assert!(
            matches!(
                read_list(&body),
                Err(Error::LengthBeyondBuffer { left: 3, .. })
            ),
            "{len}"
        );
    }
}
