//! The encoding's round trips, and the direct encoder against the reflective one.

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
fn event_lines_become_frames_and_other_lines_stay_as_they_are() {
    let bookmark = serde_json::json!({"apiVersion": "v1", "kind": "Pod",
        "metadata": {"resourceVersion": "12", "annotations": {"k8s.io/initial-events-end": "true"}}});
    let line = format!("{{\"type\":\"BOOKMARK\",\"object\":{bookmark}}}\n");
    assert_eq!(
        line_frame(line.as_bytes()),
        watch_frame("BOOKMARK", &bookmark).expect("a pod frame")
    );
    assert_eq!(line_frame(b"this is not json\n"), b"this is not json\n");
    let torn = torn_frame(b"abc");
    assert_eq!(torn, [0, 0, 0, 6, b'a', b'b', b'c']);
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

// ---------------------------------------------------------------------------------------------
// The direct encoder against the reflective one

use proptest::prelude::*;
use rand::rngs::StdRng;
use rand::{Rng as _, SeedableRng as _};

/// Whether a decoded message holds a map of two entries or more anywhere (whose order on the
/// wire is the reflective encoder's hash order, so bytes are compared decoded).
fn has_long_map(message: &DynamicMessage) -> bool {
    let long = |v: &Pb| match v {
        Pb::Map(map) => {
            map.len() > 1
                || map
                    .values()
                    .any(|v| v.as_message().is_some_and(has_long_map))
        }
        Pb::List(items) => items
            .iter()
            .any(|v| v.as_message().is_some_and(has_long_map)),
        Pb::Message(m) => has_long_map(m),
        _ => false,
    };
    message.fields().any(|(_, v)| long(v))
}

/// The two encodings of one message are the same: the same length, the same decoded message,
/// and the same bytes when no map has two entries.
fn assert_same_message(descriptor: &MessageDescriptor, old: &[u8], new: &[u8]) {
    assert_eq!(old.len(), new.len(), "{}: lengths", descriptor.full_name());
    let decoded_old = DynamicMessage::decode(descriptor.clone(), old).expect("old decodes");
    let decoded_new = DynamicMessage::decode(descriptor.clone(), new).expect("new decodes");
    assert_eq!(decoded_old, decoded_new, "{}", descriptor.full_name());
    if !has_long_map(&decoded_old) {
        assert_eq!(old, new, "{}: bytes", descriptor.full_name());
    }
}

/// The two envelopes of one object are the same (as [`assert_same_message`]).
fn assert_same_envelope(old: &[u8], new: &[u8]) {
    let (old_version, old_kind, old_raw) = open_envelope(old).expect("old envelope");
    let (new_version, new_kind, new_raw) = open_envelope(new).expect("new envelope");
    assert_eq!((&old_version, &old_kind), (&new_version, &new_kind));
    let descriptor = message_for(&old_version, &old_kind).expect("a known kind");
    assert_same_message(&descriptor, &old_raw, &new_raw);
    let head = |raw: &[u8], bytes: &[u8]| bytes.len() - raw.len();
    assert_eq!(old.len(), new.len());
    assert_eq!(head(&old_raw, old), head(&new_raw, new));
}

/// Both encoders on an object: as an envelope, and as a watch frame.
fn assert_same_object(object: &Value) {
    let old = reflect::encode_object(object);
    let new = encode_object(object);
    assert_eq!(old.is_some(), new.is_some(), "{object}");
    let (Some(old), Some(new)) = (old, new) else {
        return;
    };
    assert_same_envelope(&old, &new);
    let old = reflect::watch_frame("MODIFIED", object).expect("old frame");
    let new = watch_frame("MODIFIED", object).expect("new frame");
    // A watch writes its frames from the stored object's cached message: the same bytes.
    let kind = |field: &str| object[field].as_str().unwrap_or_default().to_owned();
    if let Some(frames) = Frames::new(&kind("apiVersion"), &kind("kind")) {
        let stored = StoredObject::new(object.clone());
        let mut cached = vec![7];
        frames.write_event(&mut cached, "MODIFIED", &stored);
        assert_eq!(cached[0], 7, "appended");
        assert_eq!(cached[1..], new[..], "{object}");
    }
    assert_eq!(old.len(), new.len());
    assert_eq!(old[..4], new[..4], "the frame length");
    let event = POOL
        .get_message_by_name(&format!("{META}.WatchEvent"))
        .unwrap();
    let raw = |frame: &[u8]| {
        let event = DynamicMessage::decode(event.clone(), &frame[4..]).expect("an event");
        let object = event.get_field_by_name("object").unwrap();
        let raw = object
            .as_message()
            .unwrap()
            .get_field_by_name("raw")
            .unwrap();
        let ty = event
            .get_field_by_name("type")
            .unwrap()
            .as_str()
            .unwrap()
            .to_owned();
        (ty, raw.as_bytes().unwrap().to_vec())
    };
    let ((old_type, old_raw), (new_type, new_raw)) = (raw(&old), raw(&new));
    assert_eq!(old_type, new_type);
    assert_same_envelope(&old_raw, &new_raw);
}

/// Both encoders on a bare message.
fn assert_same_bare(descriptor: &MessageDescriptor, value: &Value) {
    let old = reflect::encode_message(descriptor, value);
    let mut new = Vec::new();
    encode::write_message(&mut new, encode::message_index(descriptor).unwrap(), value);
    assert_same_message(descriptor, &old, &new);
}

/// A JSON value for `descriptor`, mostly of the schema's shape, now and then not: a `null`, a
/// value of the wrong type, an integer out of range, a string that is not a time or base64.
struct Generator {
    rng: StdRng,
}

impl Generator {
    fn chance(&mut self, p: f64) -> bool {
        self.rng.random_bool(p)
    }

    fn text(&mut self) -> String {
        const WORDS: &[&str] = &["", "a", "pod-1", "kube-system", "é✓", "x y", "\"q\"", "\n"];
        let n = self.rng.random_range(0..3);
        (0..n)
            .map(|_| WORDS[self.rng.random_range(0..WORDS.len())])
            .collect()
    }

    /// Anything JSON: what a wrong-typed field holds, and the content of raw fields.
    fn any(&mut self, depth: u32) -> Value {
        match self.rng.random_range(0..if depth > 2 { 5 } else { 7 }) {
            0 => Value::Null,
            1 => Value::Bool(self.chance(0.5)),
            2 => Value::from(self.rng.random_range(-3_000_000_000i64..3_000_000_000)),
            3 => Value::from(self.rng.random_range(-1e3..1e3)),
            4 => Value::String(self.text()),
            5 => (0..self.rng.random_range(0..3))
                .map(|_| self.any(depth + 1))
                .collect(),
            _ => {
                let n = self.rng.random_range(0..3);
                Value::Object((0..n).map(|_| (self.text(), self.any(depth + 1))).collect())
            }
        }
    }

    fn integer(&mut self) -> Value {
        match self.rng.random_range(0..8) {
            0 => Value::from(0),
            1 => Value::from(self.rng.random_range(-5i64..5)),
            2 => Value::from(self.rng.random_range(0i64..1 << 40)),
            3 => Value::from(i64::from(i32::MAX) + 1),
            4 => Value::from(u64::MAX),
            5 => Value::from(1.5),
            _ => Value::from(self.rng.random_range(0i64..100_000)),
        }
    }

    fn scalar(&mut self, kind: &Kind, depth: u32) -> Value {
        if self.chance(0.05) {
            return self.any(depth);
        }
        match kind {
            Kind::Message(m) => self.message(m, depth + 1),
            Kind::String => Value::String(self.text()),
            Kind::Bool => Value::Bool(self.chance(0.5)),
            Kind::Bytes => {
                if self.chance(0.1) {
                    return Value::String("not base64!".into());
                }
                let bytes: Vec<u8> = (0..self.rng.random_range(0..6))
                    .map(|_| self.rng.random())
                    .collect();
                Value::String(base64::engine::general_purpose::STANDARD.encode(bytes))
            }
            Kind::Float | Kind::Double => Value::from(self.rng.random_range(-1e6..1e6)),
            _ => self.integer(),
        }
    }

    fn special(&mut self, name: &str) -> Value {
        const TIMES: &[&str] = &[
            "2024-01-02T03:04:05Z",
            "2024-01-02T03:04:05.123456789Z",
            "1970-01-01T00:00:00Z",
            "1969-12-31T23:59:59.5Z",
            "2024-01-02T03:04:05+02:00",
            "yesterday",
        ];
        const DURATIONS: &[&str] = &["1h2m3s", "1.5s", "-3ms", "0s", "300ns", "soon", ""];
        match name {
            "Time" | "MicroTime" if self.chance(0.9) => {
                Value::from(TIMES[self.rng.random_range(0..TIMES.len())])
            }
            "Duration" if self.chance(0.9) => {
                Value::from(DURATIONS[self.rng.random_range(0..DURATIONS.len())])
            }
            "Quantity" if self.chance(0.8) => {
                Value::from(["500m", "1Gi", "0", "1e3"][self.rng.random_range(0..4)])
            }
            "IntOrString" if self.chance(0.5) => Value::from(self.text()),
            "IntOrString" if self.chance(0.8) => self.integer(),
            _ => self.any(0),
        }
    }

    fn message(&mut self, descriptor: &MessageDescriptor, depth: u32) -> Value {
        if let Some(name) = special(descriptor) {
            return self.special(name);
        }
        let mut object = Map::new();
        if depth < 6 {
            self.fields(descriptor, depth, &mut object);
        }
        if self.chance(0.1) {
            object.insert("notAField".into(), self.any(0));
        }
        Value::Object(object)
    }

    fn fields(
        &mut self,
        descriptor: &MessageDescriptor,
        depth: u32,
        object: &mut Map<String, Value>,
    ) {
        let p = if depth < 3 { 0.5 } else { 0.25 };
        for field in descriptor.fields() {
            if is_inline(&field) {
                if let Kind::Message(inner) = field.kind()
                    && self.chance(0.7)
                {
                    self.fields(&inner, depth + 1, object);
                }
                continue;
            }
            if !self.chance(p) {
                continue;
            }
            let value = if self.chance(0.05) {
                Value::Null
            } else if field.is_map() {
                let entry = field.kind().as_message().unwrap().map_entry_value_field();
                let n = self.rng.random_range(0..4);
                Value::Object(
                    (0..n)
                        .map(|i| {
                            (
                                format!("k{i}{}", self.text()),
                                self.scalar(&entry.kind(), depth),
                            )
                        })
                        .collect(),
                )
            } else if field.is_list() {
                let n = self.rng.random_range(0..4);
                (0..n).map(|_| self.scalar(&field.kind(), depth)).collect()
            } else {
                self.scalar(&field.kind(), depth)
            };
            object.insert(field.name().to_owned(), value);
        }
    }
}

/// Every message of the pool that is not a map entry.
fn messages() -> Vec<MessageDescriptor> {
    POOL.all_messages().filter(|m| !m.is_map_entry()).collect()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn the_direct_encoder_writes_what_the_reflective_one_writes(seed: u64) {
        let messages = messages();
        let mut generator = Generator { rng: StdRng::seed_from_u64(seed) };
        for descriptor in &messages {
            let value = generator.message(descriptor, 0);
            assert_same_bare(descriptor, &value);
        }
    }

    #[test]
    fn enveloped_objects_and_watch_frames_are_the_same(seed: u64) {
        let mut generator = Generator { rng: StdRng::seed_from_u64(seed) };
        for (v, k) in [
            ("v1", "Pod"),
            ("v1", "PodList"),
            ("v1", "ConfigMap"),
            ("v1", "Secret"),
            ("v1", "Namespace"),
            ("v1", "Node"),
            ("v1", "NodeList"),
            ("coordination.k8s.io/v1", "Lease"),
            ("coordination.k8s.io/v1", "LeaseList"),
            ("v1", "Status"),
        ] {
            let descriptor = message_for(v, k).unwrap();
            let mut value = generator.message(&descriptor, 0);
            if let Value::Object(object) = &mut value {
                object.insert("apiVersion".into(), Value::from(v));
                object.insert("kind".into(), Value::from(k));
            }
            assert_same_object(&value);
        }
    }
}

#[test]
fn the_realistic_pod_encodes_the_same() {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../benches/fixtures/pod-realistic.json"
    );
    let Ok(text) = std::fs::read_to_string(path) else {
        return;
    };
    let pod: Value = serde_json::from_str(&text).expect("the fixture is JSON");
    assert_same_object(&pod);
    let list = serde_json::json!({
        "apiVersion": "v1", "kind": "PodList",
        "metadata": {"resourceVersion": "12", "continue": "abc", "remainingItemCount": 3},
        "items": [pod.clone(), pod],
    });
    assert_same_object(&list);
}

/// The fuzz corpus of the protobuf readers: every envelope and bare `Pod` in it, read into
/// JSON, encodes the same both ways.
#[test]
fn the_decode_corpus_encodes_the_same() {
    let dir = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../fuzz/corpus/protobuf_decode"
    );
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    let pod = message_for("v1", "Pod").unwrap();
    let mut seen = 0;
    for entry in entries.flatten() {
        let bytes = std::fs::read(entry.path()).unwrap();
        if let Ok(object) = decode_object(&bytes) {
            assert_same_object(&object);
            seen += 1;
        }
        if let Ok(message) = DynamicMessage::decode(pod.clone(), bytes.as_slice()) {
            assert_same_bare(&pod, &message_to_json(&message));
            seen += 1;
        }
    }
    assert!(seen > 0);
}

#[test]
fn map_entries_go_out_in_key_order() {
    let config_map = serde_json::json!({
        "apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"},
        "data": {"b": "2", "a": "1", "c": "3"}
    });
    let bytes = encode_object(&config_map).unwrap();
    let at = |needle: &[u8]| {
        bytes
            .windows(needle.len())
            .position(|w| w == needle)
            .unwrap()
    };
    assert!(at(b"\x0a\x01a\x12\x011") < at(b"\x0a\x01b\x12\x012"));
    assert!(at(b"\x0a\x01b\x12\x012") < at(b"\x0a\x01c\x12\x013"));
}

#[test]
fn long_messages_carry_their_length_in_several_bytes() {
    let long = "x".repeat(20_000);
    let config_map = serde_json::json!({
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": long, "annotations": {"a": long}},
        "data": {"k": long}
    });
    assert_same_object(&config_map);
    assert_eq!(
        decode_object(&encode_object(&config_map).unwrap()).unwrap(),
        config_map
    );
}
