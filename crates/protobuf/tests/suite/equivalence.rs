//! Protobuf and JSON read the same: every built-in kind the API server simulator serves as
//! protobuf (core/v1, coordination.k8s.io/v1, meta/v1 `Status`) is generated as JSON, encoded by
//! the simulator's own encoder (prost-reflect over the vendored `.proto` files, independent of
//! this crate's table), and read back by this crate as the k8s-openapi type (through the serde
//! path and through the type's generated decoder, whole and without its managed fields) and as a
//! `serde_json::Value`: each must equal what serde_json makes of the JSON.
//!
//! The objects hold no empty optional string and no empty list or map: those read differently,
//! by design, and each difference has its own test at the end.

use std::fmt::Debug;

use base64::Engine as _;
use informer_apiserver::{encode_protobuf, protobuf_watch_frame};
use informer_protobuf::{
    DecodeOptions, FrameDecoder, Generated, ListDecoder, ProtoMessage, envelope, from_slice,
    watch_event,
};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{
    ConfigMap, Event, Namespace, Node, PersistentVolumeClaim, Pod, Secret, Service,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ListMeta, ObjectMeta, Status};
use k8s_openapi::jiff::Timestamp;
use proptest::prelude::*;
use proptest::test_runner::TestCaseError;
use serde_json::{Map, Value, json};

// ---------------------------------------------------------------------------------------------
// Generators of JSON values.

type Json = BoxedStrategy<Value>;
/// A field of an object: `None` leaves it out.
type FieldOf = BoxedStrategy<Option<Value>>;

/// An object of the fields that are `Some`.
fn object(fields: Vec<(&'static str, FieldOf)>) -> Json {
    let (names, values): (Vec<_>, Vec<_>) = fields.into_iter().unzip();
    values
        .prop_map(move |values| {
            let object: Map<String, Value> = names
                .iter()
                .zip(values)
                .filter_map(|(name, value)| Some(((*name).to_owned(), value?)))
                .collect();
            Value::Object(object)
        })
        .boxed()
}

/// A field that is always there.
fn req(value: Json) -> FieldOf {
    value.prop_map(Some).boxed()
}

/// A field that may be left out.
fn opt(value: Json) -> FieldOf {
    proptest::option::of(value).boxed()
}

fn constant(value: Value) -> Json {
    Just(value).boxed()
}

/// A short name: never empty.
fn word() -> Json {
    "[a-z][a-z0-9-]{0,10}".prop_map(Value::from).boxed()
}

/// Free text, never empty: quotes, backslashes, braces, non-ASCII.
fn text() -> Json {
    r#"[a-zA-Z0-9 "\\{}:/.é✓-]{1,16}"#.prop_map(Value::from).boxed()
}

/// Free text that may be empty (map values, where an empty string is kept).
fn any_text() -> Json {
    r#"[a-zA-Z0-9 "\\{}:/.é✓-]{0,16}"#.prop_map(Value::from).boxed()
}

fn one_of(choices: &'static [&'static str]) -> Json {
    proptest::sample::select(choices)
        .prop_map(Value::from)
        .boxed()
}

fn boolean() -> Json {
    any::<bool>().prop_map(Value::from).boxed()
}

fn int32(range: std::ops::RangeInclusive<i32>) -> Json {
    range.prop_map(Value::from).boxed()
}

fn int64(range: std::ops::RangeInclusive<i64>) -> Json {
    range.prop_map(Value::from).boxed()
}

/// A list of one to `max` elements.
fn list(element: Json, max: usize) -> Json {
    proptest::collection::vec(element, 1..=max)
        .prop_map(Value::Array)
        .boxed()
}

fn words(max: usize) -> Json {
    list(word(), max)
}

/// A map of one to three entries.
fn map_of(value: Json) -> Json {
    proptest::collection::btree_map("[a-z0-9][a-z0-9./-]{0,11}", value, 1..=3)
        .prop_map(|m| Value::Object(m.into_iter().collect()))
        .boxed()
}

/// Labels, annotations, selectors, `data`: values may be empty.
fn string_map() -> Json {
    map_of(any_text())
}

/// `Secret.data`, `ConfigMap.binaryData`: base64 of bytes, empty included.
fn bytes_map() -> Json {
    map_of(
        proptest::collection::vec(any::<u8>(), 0..12)
            .prop_map(|b| Value::from(base64::engine::general_purpose::STANDARD.encode(b)))
            .boxed(),
    )
}

/// Seconds from 1970-01-01T00:00:01Z to 2200.
fn seconds() -> impl Strategy<Value = i64> {
    1i64..7_258_118_400
}

/// A `meta.v1.Time`: RFC 3339 to the second, as Go writes it.
fn time() -> Json {
    seconds()
        .prop_map(|s| {
            let t = Timestamp::from_second(s).expect("in range");
            Value::from(t.strftime("%Y-%m-%dT%H:%M:%SZ").to_string())
        })
        .boxed()
}

/// A `meta.v1.MicroTime`: RFC 3339 with six fractional digits, as Go writes it.
fn micro_time() -> Json {
    (seconds(), 0i32..1_000_000)
        .prop_map(|(s, micros)| {
            let t = Timestamp::new(s, micros * 1000).expect("in range");
            Value::from(t.strftime("%Y-%m-%dT%H:%M:%S%.6fZ").to_string())
        })
        .boxed()
}

fn quantity() -> Json {
    one_of(&[
        "0", "1", "500m", "1.5", "100Mi", "1Gi", "2Ki", "1e3", "250M",
    ])
}

fn quantities() -> Json {
    proptest::collection::btree_map(
        proptest::sample::select(&["cpu", "memory", "ephemeral-storage", "nvidia.com/gpu"][..]),
        quantity(),
        1..=3,
    )
    .prop_map(|m| Value::Object(m.into_iter().map(|(k, v)| (k.to_owned(), v)).collect()))
    .boxed()
}

/// An `IntOrString`: a number (zero included) or a name.
fn int_or_string() -> Json {
    prop_oneof![
        (0i32..=65535).prop_map(Value::from),
        "[a-z][a-z0-9-]{0,8}".prop_map(Value::from),
    ]
    .boxed()
}

/// A `FieldsV1` tree, as server-side apply writes it.
fn fields_v1() -> Json {
    let key = prop_oneof![
        "f:[a-zA-Z]{1,8}".prop_map(String::from),
        "[a-z]{1,6}".prop_map(|name| format!(r#"k:{{"name":"{name}"}}"#)),
        Just(".".to_owned()),
    ]
    .boxed();
    Just(json!({}))
        .prop_recursive(3, 12, 3, move |inner| {
            proptest::collection::btree_map(key.clone(), inner, 1..=3)
                .prop_map(|m| Value::Object(m.into_iter().collect()))
        })
        .boxed()
}

// ---------------------------------------------------------------------------------------------
// meta/v1

fn owner_reference() -> Json {
    object(vec![
        ("apiVersion", req(one_of(&["v1", "apps/v1", "batch/v1"]))),
        ("kind", req(one_of(&["ReplicaSet", "Job", "Node"]))),
        ("name", req(word())),
        ("uid", req(word())),
        ("controller", opt(boolean())),
        ("blockOwnerDeletion", opt(boolean())),
    ])
}

fn managed_fields_entry() -> Json {
    object(vec![
        ("manager", req(word())),
        ("operation", req(one_of(&["Update", "Apply"]))),
        ("apiVersion", opt(constant(json!("v1")))),
        ("time", opt(time())),
        ("fieldsType", req(constant(json!("FieldsV1")))),
        ("fieldsV1", req(fields_v1())),
        ("subresource", opt(one_of(&["status", "scale"]))),
    ])
}

fn object_meta() -> Json {
    object(vec![
        ("name", req(word())),
        ("generateName", opt(word())),
        ("namespace", opt(word())),
        ("uid", opt(word())),
        (
            "resourceVersion",
            opt("[1-9][0-9]{0,6}".prop_map(Value::from).boxed()),
        ),
        ("generation", opt(int64(0..=5))),
        ("creationTimestamp", opt(time())),
        ("deletionTimestamp", opt(time())),
        ("deletionGracePeriodSeconds", opt(int64(0..=60))),
        ("labels", opt(string_map())),
        ("annotations", opt(string_map())),
        ("ownerReferences", opt(list(owner_reference(), 2))),
        ("finalizers", opt(words(2))),
        ("managedFields", opt(list(managed_fields_entry(), 2))),
    ])
}

/// A `meta.v1.Condition`.
fn condition() -> Json {
    object(vec![
        ("type", req(word())),
        ("status", req(one_of(&["True", "False", "Unknown"]))),
        ("observedGeneration", opt(int64(0..=3))),
        ("lastTransitionTime", req(time())),
        ("reason", req(word())),
        ("message", req(text())),
    ])
}

/// The fields of a kind's object: `apiVersion`, `kind`, `metadata`, then `rest`.
fn resource(
    api_version: &'static str,
    kind: &'static str,
    rest: Vec<(&'static str, FieldOf)>,
) -> Json {
    let mut fields = vec![
        ("apiVersion", req(constant(json!(api_version)))),
        ("kind", req(constant(json!(kind)))),
        ("metadata", req(object_meta())),
    ];
    fields.extend(rest);
    object(fields)
}

// ---------------------------------------------------------------------------------------------
// core/v1 Pod

fn http_get() -> Json {
    object(vec![
        ("path", opt(one_of(&["/", "/healthz", "/ready"]))),
        ("port", req(int_or_string())),
        ("host", opt(word())),
        ("scheme", opt(one_of(&["HTTP", "HTTPS"]))),
        (
            "httpHeaders",
            opt(list(
                object(vec![("name", req(word())), ("value", req(text()))]),
                2,
            )),
        ),
    ])
}

/// A probe: its handler (Go's inlined `ProbeHandler`) and its numbers, zeros included.
fn probe() -> Json {
    let handler = prop_oneof![
        http_get().prop_map(|v| ("httpGet", v)),
        object(vec![("port", req(int_or_string())), ("host", opt(word()))])
            .prop_map(|v| ("tcpSocket", v)),
        object(vec![("command", req(words(3)))]).prop_map(|v| ("exec", v)),
        object(vec![
            ("port", req(int32(0..=65535))),
            ("service", opt(word()))
        ])
        .prop_map(|v| ("grpc", v)),
    ];
    let numbers = object(vec![
        ("initialDelaySeconds", opt(int32(0..=30))),
        ("timeoutSeconds", opt(int32(0..=10))),
        ("periodSeconds", opt(int32(0..=10))),
        ("successThreshold", opt(int32(0..=3))),
        ("failureThreshold", opt(int32(0..=3))),
        ("terminationGracePeriodSeconds", opt(int64(0..=30))),
    ]);
    (handler, numbers)
        .prop_map(|((name, handler), mut numbers)| {
            numbers[name] = handler;
            numbers
        })
        .boxed()
}

fn env_var() -> Json {
    let key_ref = || {
        object(vec![
            ("name", opt(word())),
            ("key", req(word())),
            ("optional", opt(boolean())),
        ])
    };
    let source = prop_oneof![
        key_ref().prop_map(|v| json!({ "configMapKeyRef": v })),
        key_ref().prop_map(|v| json!({ "secretKeyRef": v })),
        object(vec![
            ("apiVersion", opt(constant(json!("v1")))),
            ("fieldPath", req(one_of(&["metadata.name", "status.podIP"]))),
        ])
        .prop_map(|v| json!({ "fieldRef": v })),
        object(vec![
            ("containerName", opt(word())),
            ("resource", req(one_of(&["limits.cpu", "requests.memory"]))),
            ("divisor", opt(quantity())),
        ])
        .prop_map(|v| json!({ "resourceFieldRef": v })),
    ];
    object(vec![
        ("name", req(word())),
        ("value", opt(text())),
        ("valueFrom", opt(source.boxed())),
    ])
}

fn security_context() -> Json {
    object(vec![
        ("runAsUser", opt(int64(0..=2000))),
        ("runAsGroup", opt(int64(0..=2000))),
        ("runAsNonRoot", opt(boolean())),
        ("privileged", opt(boolean())),
        ("readOnlyRootFilesystem", opt(boolean())),
        ("allowPrivilegeEscalation", opt(boolean())),
        (
            "capabilities",
            opt(object(vec![
                ("add", opt(list(one_of(&["NET_ADMIN", "SYS_TIME"]), 2))),
                ("drop", opt(list(one_of(&["ALL", "NET_RAW"]), 2))),
            ])),
        ),
    ])
}

fn container() -> Json {
    object(vec![
        ("name", req(word())),
        ("image", opt(text())),
        ("command", opt(list(text(), 3))),
        ("args", opt(list(text(), 3))),
        ("workingDir", opt(word())),
        (
            "ports",
            opt(list(
                object(vec![
                    ("name", opt(word())),
                    ("hostPort", opt(int32(0..=65535))),
                    ("containerPort", req(int32(0..=65535))),
                    ("protocol", opt(one_of(&["TCP", "UDP", "SCTP"]))),
                    ("hostIP", opt(one_of(&["0.0.0.0", "10.0.0.1"]))),
                ]),
                3,
            )),
        ),
        ("env", opt(list(env_var(), 3))),
        (
            "resources",
            opt(object(vec![
                ("limits", opt(quantities())),
                ("requests", opt(quantities())),
            ])),
        ),
        (
            "volumeMounts",
            opt(list(
                object(vec![
                    ("name", req(word())),
                    ("readOnly", opt(boolean())),
                    ("mountPath", req(one_of(&["/data", "/etc/config"]))),
                    ("subPath", opt(word())),
                ]),
                2,
            )),
        ),
        ("livenessProbe", opt(probe())),
        ("readinessProbe", opt(probe())),
        ("startupProbe", opt(probe())),
        (
            "terminationMessagePath",
            opt(constant(json!("/dev/termination-log"))),
        ),
        (
            "imagePullPolicy",
            opt(one_of(&["Always", "IfNotPresent", "Never"])),
        ),
        ("securityContext", opt(security_context())),
        ("stdin", opt(boolean())),
        ("tty", opt(boolean())),
    ])
}

/// A volume: its name and one source (Go's inlined `VolumeSource`).
fn volume() -> Json {
    let items = || {
        opt(list(
            object(vec![
                ("key", req(word())),
                ("path", req(word())),
                ("mode", opt(int32(0..=511))),
            ]),
            2,
        ))
    };
    let source = prop_oneof![
        object(vec![
            ("medium", opt(constant(json!("Memory")))),
            ("sizeLimit", opt(quantity())),
        ])
        .prop_map(|v| ("emptyDir", v)),
        object(vec![
            ("name", opt(word())),
            ("items", items()),
            ("defaultMode", opt(int32(0..=511))),
            ("optional", opt(boolean())),
        ])
        .prop_map(|v| ("configMap", v)),
        object(vec![
            ("secretName", opt(word())),
            ("items", items()),
            ("defaultMode", opt(int32(0..=511))),
            ("optional", opt(boolean())),
        ])
        .prop_map(|v| ("secret", v)),
        object(vec![
            ("path", req(one_of(&["/var/log", "/tmp"]))),
            ("type", opt(one_of(&["Directory", "DirectoryOrCreate"]))),
        ])
        .prop_map(|v| ("hostPath", v)),
        object(vec![
            ("claimName", req(word())),
            ("readOnly", opt(boolean())),
        ])
        .prop_map(|v| ("persistentVolumeClaim", v)),
    ];
    (word(), source)
        .prop_map(|(name, (kind, source))| json!({ "name": name, kind: source }))
        .boxed()
}

fn pod_spec() -> Json {
    object(vec![
        ("volumes", opt(list(volume(), 3))),
        ("initContainers", opt(list(container(), 1))),
        ("containers", req(list(container(), 2))),
        (
            "restartPolicy",
            opt(one_of(&["Always", "OnFailure", "Never"])),
        ),
        ("terminationGracePeriodSeconds", opt(int64(0..=60))),
        ("activeDeadlineSeconds", opt(int64(0..=600))),
        ("dnsPolicy", opt(one_of(&["ClusterFirst", "Default"]))),
        ("nodeSelector", opt(string_map())),
        ("serviceAccountName", opt(word())),
        ("automountServiceAccountToken", opt(boolean())),
        ("nodeName", opt(word())),
        ("hostNetwork", opt(boolean())),
        ("shareProcessNamespace", opt(boolean())),
        (
            "securityContext",
            opt(object(vec![
                ("runAsUser", opt(int64(0..=2000))),
                ("runAsNonRoot", opt(boolean())),
                ("supplementalGroups", opt(list(int64(0..=3000), 3))),
                ("fsGroup", opt(int64(0..=2000))),
                (
                    "sysctls",
                    opt(list(
                        object(vec![("name", req(word())), ("value", req(text()))]),
                        2,
                    )),
                ),
            ])),
        ),
        ("hostname", opt(word())),
        ("schedulerName", opt(word())),
        (
            "tolerations",
            opt(list(
                object(vec![
                    ("key", opt(word())),
                    ("operator", opt(one_of(&["Exists", "Equal"]))),
                    ("value", opt(word())),
                    ("effect", opt(one_of(&["NoSchedule", "NoExecute"]))),
                    ("tolerationSeconds", opt(int64(0..=300))),
                ]),
                2,
            )),
        ),
        ("priorityClassName", opt(word())),
        // Negative int32s are ten bytes on the wire.
        ("priority", opt(int32(-5..=5))),
        ("enableServiceLinks", opt(boolean())),
    ])
}

fn container_state() -> Json {
    prop_oneof![
        object(vec![("startedAt", opt(time()))]).prop_map(|v| json!({ "running": v })),
        object(vec![("reason", opt(word())), ("message", opt(text()))])
            .prop_map(|v| json!({ "waiting": v })),
        object(vec![
            ("exitCode", req(int32(-2..=2))),
            ("signal", opt(int32(0..=15))),
            ("reason", opt(word())),
            ("startedAt", opt(time())),
            ("finishedAt", opt(time())),
            ("containerID", opt(word())),
        ])
        .prop_map(|v| json!({ "terminated": v })),
    ]
    .boxed()
}

fn pod_status() -> Json {
    object(vec![
        ("phase", opt(one_of(&["Pending", "Running", "Succeeded"]))),
        (
            "conditions",
            opt(list(
                object(vec![
                    ("type", req(one_of(&["Ready", "PodScheduled"]))),
                    ("status", req(one_of(&["True", "False"]))),
                    ("lastProbeTime", opt(time())),
                    ("lastTransitionTime", opt(time())),
                    ("reason", opt(word())),
                    ("message", opt(text())),
                ]),
                2,
            )),
        ),
        ("hostIP", opt(one_of(&["10.0.0.1", "192.168.1.2"]))),
        ("podIP", opt(one_of(&["10.1.0.5", "fd00::5"]))),
        (
            "podIPs",
            opt(list(
                object(vec![("ip", req(one_of(&["10.1.0.5", "fd00::5"])))]),
                2,
            )),
        ),
        ("startTime", opt(time())),
        (
            "containerStatuses",
            opt(list(
                object(vec![
                    ("name", req(word())),
                    ("state", opt(container_state())),
                    ("lastState", opt(container_state())),
                    ("ready", req(boolean())),
                    ("restartCount", req(int32(0..=3))),
                    ("image", req(word())),
                    ("imageID", req(word())),
                    ("containerID", opt(word())),
                    ("started", opt(boolean())),
                ]),
                2,
            )),
        ),
        (
            "qosClass",
            opt(one_of(&["Guaranteed", "Burstable", "BestEffort"])),
        ),
    ])
}

fn pod() -> Json {
    resource(
        "v1",
        "Pod",
        vec![("spec", opt(pod_spec())), ("status", opt(pod_status()))],
    )
}

// ---------------------------------------------------------------------------------------------
// The other kinds

fn config_map() -> Json {
    resource(
        "v1",
        "ConfigMap",
        vec![
            ("immutable", opt(boolean())),
            ("data", opt(string_map())),
            ("binaryData", opt(bytes_map())),
        ],
    )
}

fn secret() -> Json {
    resource(
        "v1",
        "Secret",
        vec![
            ("immutable", opt(boolean())),
            ("data", opt(bytes_map())),
            ("stringData", opt(string_map())),
            ("type", opt(one_of(&["Opaque", "kubernetes.io/tls"]))),
        ],
    )
}

fn namespace() -> Json {
    resource(
        "v1",
        "Namespace",
        vec![
            ("spec", opt(object(vec![("finalizers", opt(words(2)))]))),
            (
                "status",
                opt(object(vec![
                    ("phase", opt(one_of(&["Active", "Terminating"]))),
                    (
                        "conditions",
                        opt(list(
                            object(vec![
                                ("type", req(word())),
                                ("status", req(one_of(&["True", "False"]))),
                                ("lastTransitionTime", opt(time())),
                                ("reason", opt(word())),
                                ("message", opt(text())),
                            ]),
                            2,
                        )),
                    ),
                ])),
            ),
        ],
    )
}

fn node() -> Json {
    let spec = object(vec![
        ("podCIDR", opt(constant(json!("10.244.0.0/24")))),
        (
            "podCIDRs",
            opt(list(one_of(&["10.244.0.0/24", "fd00::/64"]), 2)),
        ),
        ("providerID", opt(word())),
        ("unschedulable", opt(boolean())),
        (
            "taints",
            opt(list(
                object(vec![
                    ("key", req(word())),
                    ("value", opt(word())),
                    ("effect", req(one_of(&["NoSchedule", "NoExecute"]))),
                    ("timeAdded", opt(time())),
                ]),
                2,
            )),
        ),
    ]);
    let node_info = object(vec![
        ("machineID", req(word())),
        ("systemUUID", req(word())),
        ("bootID", req(word())),
        ("kernelVersion", req(word())),
        ("osImage", req(text())),
        ("containerRuntimeVersion", req(word())),
        ("kubeletVersion", req(word())),
        ("kubeProxyVersion", req(word())),
        ("operatingSystem", req(constant(json!("linux")))),
        ("architecture", req(one_of(&["amd64", "arm64"]))),
    ]);
    let status = object(vec![
        ("capacity", opt(quantities())),
        ("allocatable", opt(quantities())),
        ("phase", opt(one_of(&["Running", "Pending"]))),
        (
            "conditions",
            opt(list(
                object(vec![
                    ("type", req(one_of(&["Ready", "MemoryPressure"]))),
                    ("status", req(one_of(&["True", "False", "Unknown"]))),
                    ("lastHeartbeatTime", opt(time())),
                    ("lastTransitionTime", opt(time())),
                    ("reason", opt(word())),
                    ("message", opt(text())),
                ]),
                2,
            )),
        ),
        (
            "addresses",
            opt(list(
                object(vec![
                    ("type", req(one_of(&["InternalIP", "Hostname"]))),
                    ("address", req(word())),
                ]),
                2,
            )),
        ),
        (
            "daemonEndpoints",
            opt(object(vec![(
                "kubeletEndpoint",
                opt(object(vec![("Port", req(int32(0..=65535)))])),
            )])),
        ),
        ("nodeInfo", opt(node_info)),
        (
            "images",
            opt(list(
                object(vec![
                    ("names", opt(words(2))),
                    ("sizeBytes", opt(int64(0..=i64::from(u32::MAX) * 4))),
                ]),
                2,
            )),
        ),
    ]);
    resource(
        "v1",
        "Node",
        vec![("spec", opt(spec)), ("status", opt(status))],
    )
}

fn service() -> Json {
    let spec = object(vec![
        (
            "ports",
            opt(list(
                object(vec![
                    ("name", opt(word())),
                    ("protocol", opt(one_of(&["TCP", "UDP"]))),
                    ("appProtocol", opt(one_of(&["http", "grpc"]))),
                    ("port", req(int32(0..=65535))),
                    ("targetPort", opt(int_or_string())),
                    ("nodePort", opt(int32(0..=32767))),
                ]),
                3,
            )),
        ),
        ("selector", opt(string_map())),
        ("clusterIP", opt(one_of(&["10.96.0.10", "None"]))),
        (
            "clusterIPs",
            opt(list(one_of(&["10.96.0.10", "fd00::10"]), 2)),
        ),
        (
            "type",
            opt(one_of(&["ClusterIP", "NodePort", "LoadBalancer"])),
        ),
        ("externalIPs", opt(list(one_of(&["1.2.3.4", "5.6.7.8"]), 2))),
        ("sessionAffinity", opt(one_of(&["None", "ClientIP"]))),
        ("externalTrafficPolicy", opt(one_of(&["Cluster", "Local"]))),
        ("healthCheckNodePort", opt(int32(0..=32767))),
        ("publishNotReadyAddresses", opt(boolean())),
        (
            "sessionAffinityConfig",
            opt(object(vec![(
                "clientIP",
                opt(object(vec![("timeoutSeconds", opt(int32(0..=86400)))])),
            )])),
        ),
        ("ipFamilies", opt(list(one_of(&["IPv4", "IPv6"]), 2))),
        (
            "ipFamilyPolicy",
            opt(one_of(&["SingleStack", "PreferDualStack"])),
        ),
        ("allocateLoadBalancerNodePorts", opt(boolean())),
        ("internalTrafficPolicy", opt(one_of(&["Cluster", "Local"]))),
    ]);
    let ingress = object(vec![
        ("ip", opt(one_of(&["1.2.3.4", "5.6.7.8"]))),
        ("hostname", opt(word())),
        ("ipMode", opt(one_of(&["VIP", "Proxy"]))),
        (
            "ports",
            opt(list(
                object(vec![
                    ("port", req(int32(0..=65535))),
                    ("protocol", req(one_of(&["TCP", "UDP"]))),
                    ("error", opt(word())),
                ]),
                2,
            )),
        ),
    ]);
    let status = object(vec![
        (
            "loadBalancer",
            opt(object(vec![("ingress", opt(list(ingress, 2)))])),
        ),
        ("conditions", opt(list(condition(), 2))),
    ]);
    resource(
        "v1",
        "Service",
        vec![("spec", opt(spec)), ("status", opt(status))],
    )
}

fn object_reference() -> Json {
    object(vec![
        ("kind", opt(one_of(&["Pod", "Node"]))),
        ("namespace", opt(word())),
        ("name", opt(word())),
        ("uid", opt(word())),
        ("apiVersion", opt(constant(json!("v1")))),
        ("resourceVersion", opt(word())),
        ("fieldPath", opt(constant(json!("spec.containers{c}")))),
    ])
}

fn event() -> Json {
    resource(
        "v1",
        "Event",
        vec![
            ("involvedObject", req(object_reference())),
            ("reason", opt(word())),
            ("message", opt(text())),
            (
                "source",
                opt(object(vec![
                    ("component", opt(word())),
                    ("host", opt(word())),
                ])),
            ),
            ("firstTimestamp", opt(time())),
            ("lastTimestamp", opt(time())),
            ("count", opt(int32(0..=5))),
            ("type", opt(one_of(&["Normal", "Warning"]))),
            ("eventTime", opt(micro_time())),
            (
                "series",
                opt(object(vec![
                    ("count", opt(int32(0..=5))),
                    ("lastObservedTime", opt(micro_time())),
                ])),
            ),
            ("action", opt(word())),
            ("related", opt(object_reference())),
            ("reportingComponent", opt(word())),
            ("reportingInstance", opt(word())),
        ],
    )
}

fn lease() -> Json {
    resource(
        "coordination.k8s.io/v1",
        "Lease",
        vec![(
            "spec",
            opt(object(vec![
                ("holderIdentity", opt(word())),
                ("leaseDurationSeconds", opt(int32(0..=60))),
                ("acquireTime", opt(micro_time())),
                ("renewTime", opt(micro_time())),
                ("leaseTransitions", opt(int32(0..=5))),
                ("strategy", opt(constant(json!("OldestEmulationVersion")))),
                ("preferredHolder", opt(word())),
            ])),
        )],
    )
}

/// A claim: its `storageClassName` and `volumeAttributesClassName` are pointers in Go, so an
/// empty string is generated too (and kept).
fn persistent_volume_claim() -> Json {
    let spec = object(vec![
        (
            "accessModes",
            opt(list(one_of(&["ReadWriteOnce", "ReadOnlyMany"]), 2)),
        ),
        (
            "selector",
            opt(object(vec![
                ("matchLabels", opt(string_map())),
                (
                    "matchExpressions",
                    opt(list(
                        object(vec![
                            ("key", req(word())),
                            ("operator", req(one_of(&["In", "NotIn", "Exists"]))),
                            ("values", opt(words(2))),
                        ]),
                        2,
                    )),
                ),
            ])),
        ),
        (
            "resources",
            opt(object(vec![
                ("limits", opt(quantities())),
                ("requests", opt(quantities())),
            ])),
        ),
        ("volumeName", opt(word())),
        ("storageClassName", opt(one_of(&["", "standard"]))),
        ("volumeMode", opt(one_of(&["Filesystem", "Block"]))),
        ("volumeAttributesClassName", opt(one_of(&["", "gold"]))),
    ]);
    let status = object(vec![
        ("phase", opt(one_of(&["Pending", "Bound"]))),
        ("accessModes", opt(list(one_of(&["ReadWriteOnce"]), 1))),
        ("capacity", opt(quantities())),
    ]);
    resource(
        "v1",
        "PersistentVolumeClaim",
        vec![("spec", opt(spec)), ("status", opt(status))],
    )
}

/// A meta/v1 `Status`, the body of an error response and of a watch's `ERROR` event.
fn status() -> Json {
    let details = object(vec![
        ("name", opt(word())),
        ("group", opt(one_of(&["apps", "batch"]))),
        ("kind", opt(one_of(&["pods", "deployments"]))),
        ("uid", opt(word())),
        (
            "causes",
            opt(list(
                object(vec![
                    (
                        "reason",
                        opt(one_of(&["FieldValueInvalid", "FieldValueRequired"])),
                    ),
                    ("message", opt(text())),
                    ("field", opt(constant(json!("spec.containers[0].name")))),
                ]),
                2,
            )),
        ),
        ("retryAfterSeconds", opt(int32(0..=10))),
    ]);
    object(vec![
        ("apiVersion", req(constant(json!("v1")))),
        ("kind", req(constant(json!("Status")))),
        (
            "metadata",
            opt(object(vec![
                ("resourceVersion", opt(word())),
                ("continue", opt(word())),
            ])),
        ),
        ("status", opt(one_of(&["Failure", "Success"]))),
        ("message", opt(text())),
        ("reason", opt(one_of(&["NotFound", "Expired", "Conflict"]))),
        ("details", opt(details)),
        ("code", opt(int32(0..=504))),
    ])
}

// ---------------------------------------------------------------------------------------------
// The comparison

fn failed(what: &str, err: impl std::fmt::Display) -> TestCaseError {
    TestCaseError::fail(format!("{what}: {err}"))
}

/// `json` encoded by the simulator, then read by this crate as a `T` (through the envelope, and
/// as bare message bytes; by the serde path and by the generated decoder, found statically and
/// by type) and as a `Value`: each equals what serde_json reads from `json`.
fn reads_as_json<T>(json: &Value) -> Result<(), TestCaseError>
where
    T: ProtoMessage + PartialEq + Debug,
{
    let bytes = encode_protobuf(json).ok_or_else(|| failed("encode", "no protobuf form"))?;
    let expected: T = serde_json::from_value(json.clone()).map_err(|e| failed("JSON", e))?;

    let typed: T = from_slice(&bytes).map_err(|e| failed("protobuf", e))?;
    prop_assert_eq!(&typed, &expected);

    let opened = envelope::open(&bytes).map_err(|e| failed("envelope", e))?;
    let bare: T = opened
        .message()
        .and_then(|m| m.decode(opened.raw))
        .map_err(|e| failed("bare message", e))?;
    prop_assert_eq!(&bare, &expected);

    let value: Value = from_slice(&bytes).map_err(|e| failed("protobuf as a Value", e))?;
    prop_assert_eq!(&value, json);

    let whole = DecodeOptions::new();
    let generated: T = opened
        .decode_generated(whole)
        .map_err(|e| failed("generated", e))?;
    prop_assert_eq!(&generated, &expected);
    let message = opened.message().map_err(|e| failed("message", e))?;
    let generated: T = message
        .decode_generated(opened.raw, whole)
        .map_err(|e| failed("generated bare message", e))?;
    prop_assert_eq!(&generated, &expected);
    let found = Generated::<T>::find().ok_or_else(|| failed("find", "no generated decoder"))?;
    let generated = found
        .decode_envelope(&opened, whole)
        .map_err(|e| failed("generated by type", e))?;
    prop_assert_eq!(&*generated, &expected);
    Ok(())
}

/// As [`reads_as_json`], and read without its managed fields (by the generated decoder, found
/// by type), `T` with `metadata.managedFields` unset.
fn reads_as_json_lean<T>(json: &Value) -> Result<(), TestCaseError>
where
    T: ProtoMessage + k8s_openapi::Metadata<Ty = ObjectMeta> + PartialEq + Debug,
{
    reads_as_json::<T>(json)?;
    let bytes = encode_protobuf(json).ok_or_else(|| failed("encode", "no protobuf form"))?;
    let mut lean: T = serde_json::from_value(json.clone()).map_err(|e| failed("JSON", e))?;
    lean.metadata_mut().managed_fields = None;
    let opened = envelope::open(&bytes).map_err(|e| failed("envelope", e))?;
    let message = opened.message().map_err(|e| failed("message", e))?;
    let found = Generated::<T>::find().ok_or_else(|| failed("find", "no generated decoder"))?;
    let options = DecodeOptions::new().without_managed_fields();
    let generated = found
        .decode_envelope(&opened, options)
        .map_err(|e| failed("generated by type", e))?;
    prop_assert_eq!(&*generated, &lean);
    let generated = found
        .decode_message(message, opened.raw, options)
        .map_err(|e| failed("generated bare message by type", e))?;
    prop_assert_eq!(&*generated, &lean);
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    #[test]
    fn a_pod_reads_as_its_json(json in pod()) {
        reads_as_json_lean::<Pod>(&json)?;

        // The same object as a watch event, through the frame decoder.
        let frame = protobuf_watch_frame("MODIFIED", &json).expect("a pod has a protobuf form");
        let mut frames = FrameDecoder::default();
        frames.push(&frame);
        let event = watch_event(frames.next_frame()?.expect("a whole frame"))?;
        prop_assert_eq!(event.event_type, "MODIFIED");
        let pod: Pod = from_slice(event.object)?;
        prop_assert_eq!(pod, serde_json::from_value::<Pod>(json).expect("valid JSON"));
        prop_assert_eq!(frames.pending(), 0);
    }

    #[test]
    fn a_config_map_reads_as_its_json(json in config_map()) {
        reads_as_json_lean::<ConfigMap>(&json)?;
    }

    #[test]
    fn a_secret_reads_as_its_json(json in secret()) {
        reads_as_json_lean::<Secret>(&json)?;
    }

    #[test]
    fn a_namespace_reads_as_its_json(json in namespace()) {
        reads_as_json_lean::<Namespace>(&json)?;
    }

    #[test]
    fn a_node_reads_as_its_json(json in node()) {
        reads_as_json_lean::<Node>(&json)?;
    }

    #[test]
    fn a_service_reads_as_its_json(json in service()) {
        reads_as_json_lean::<Service>(&json)?;
    }

    #[test]
    fn an_event_reads_as_its_json(json in event()) {
        reads_as_json_lean::<Event>(&json)?;
    }

    #[test]
    fn a_lease_reads_as_its_json(json in lease()) {
        reads_as_json_lean::<Lease>(&json)?;
    }

    #[test]
    fn a_persistent_volume_claim_reads_as_its_json(json in persistent_volume_claim()) {
        reads_as_json_lean::<PersistentVolumeClaim>(&json)?;
    }

    #[test]
    fn a_status_reads_as_its_json(json in status()) {
        reads_as_json::<Status>(&json)?;
    }

    /// A `PodList` read item by item as its bytes arrive, in pieces of any size: the items and
    /// the list's metadata are the JSON's.
    #[test]
    fn a_pod_list_read_in_pieces_reads_as_its_json(
        items in proptest::collection::vec(pod(), 0..4),
        resource_version in "[1-9][0-9]{0,5}",
        continue_token in proptest::option::of("[a-zA-Z0-9]{1,12}"),
        remaining in proptest::option::of(0i64..100),
        piece in 1usize..64,
    ) {
        let mut metadata = json!({ "resourceVersion": resource_version });
        if let Some(token) = continue_token {
            metadata["continue"] = json!(token);
        }
        if let Some(remaining) = remaining {
            metadata["remainingItemCount"] = json!(remaining);
        }
        let list = json!({
            "apiVersion": "v1", "kind": "PodList", "metadata": metadata, "items": items,
        });
        let body = encode_protobuf(&list).expect("a pod list has a protobuf form");

        let mut decoder = ListDecoder::default();
        let mut read = Vec::new();
        for chunk in body.chunks(piece) {
            decoder.push(chunk);
            while let Some((bytes, message)) = decoder.next_item()? {
                prop_assert_eq!(message.name(), "k8s.io.api.core.v1.Pod");
                let pod = message.decode::<Pod>(bytes)?;
                prop_assert_eq!(&message.decode_generated::<Pod>(bytes, DecodeOptions::new())?, &pod);
                read.push(pod);
            }
        }
        let read_metadata: ListMeta = decoder.finish()?;

        let expected: Vec<Pod> = items
            .into_iter()
            .map(|item| serde_json::from_value(item).expect("valid JSON"))
            .collect();
        prop_assert_eq!(read, expected);
        prop_assert_eq!(
            read_metadata,
            serde_json::from_value::<ListMeta>(metadata).expect("valid JSON")
        );
    }
}

// ---------------------------------------------------------------------------------------------
// The documented differences

/// An enveloped object read by `T`'s generated decoder, whole.
fn generated<T: ProtoMessage>(bytes: &[u8]) -> T {
    envelope::open(bytes)
        .and_then(|opened| opened.decode_generated(DecodeOptions::new()))
        .expect("the generated decoder reads it")
}

/// Go writes a non-pointer string field even when empty, where its JSON leaves it out; so an
/// empty string on the wire reads as absent. A JSON object that spells out `""` in such a field
/// reads as `Some("")` from JSON and `None` from protobuf. The few fields that are pointers in Go
/// (`storageClassName`, …) keep their empty string.
#[test]
fn an_empty_optional_string_reads_as_absent_except_in_a_go_pointer_field() {
    let pod = json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "p", "namespace": "", "labels": {"empty": ""}},
        "spec": {"containers": [{"name": "c", "image": ""}], "nodeName": ""},
    });
    let bytes = encode_protobuf(&pod).expect("a pod has a protobuf form");
    let from_json: Pod = serde_json::from_value(pod).unwrap();
    let from_protobuf: Pod = from_slice(&bytes).unwrap();
    assert_eq!(generated::<Pod>(&bytes), from_protobuf);

    assert_eq!(from_json.metadata.namespace.as_deref(), Some(""));
    assert_eq!(from_protobuf.metadata.namespace, None);
    let (json_spec, protobuf_spec) = (from_json.spec.unwrap(), from_protobuf.spec.unwrap());
    assert_eq!(json_spec.node_name.as_deref(), Some(""));
    assert_eq!(protobuf_spec.node_name, None);
    assert_eq!(json_spec.containers[0].image.as_deref(), Some(""));
    assert_eq!(protobuf_spec.containers[0].image, None);
    // A map's empty value is a value on both sides.
    assert_eq!(from_protobuf.metadata.labels, from_json.metadata.labels);
    assert_eq!(from_protobuf.metadata.labels.unwrap()["empty"], "");

    let claim = json!({
        "apiVersion": "v1", "kind": "PersistentVolumeClaim",
        "metadata": {"name": "c"},
        "spec": {"storageClassName": "", "volumeAttributesClassName": "", "volumeName": ""},
    });
    let bytes = encode_protobuf(&claim).expect("a claim has a protobuf form");
    let from_json: PersistentVolumeClaim = serde_json::from_value(claim).unwrap();
    let from_protobuf: PersistentVolumeClaim = from_slice(&bytes).unwrap();
    assert_eq!(generated::<PersistentVolumeClaim>(&bytes), from_protobuf);
    let (json_spec, protobuf_spec) = (from_json.spec.unwrap(), from_protobuf.spec.unwrap());
    assert_eq!(protobuf_spec.storage_class_name.as_deref(), Some(""));
    assert_eq!(
        protobuf_spec.storage_class_name,
        json_spec.storage_class_name
    );
    assert_eq!(
        protobuf_spec.volume_attributes_class_name.as_deref(),
        Some("")
    );
    assert_eq!(json_spec.volume_name.as_deref(), Some(""));
    assert_eq!(protobuf_spec.volume_name, None);
}

/// An empty list or map has no bytes on the wire: the encoding of an object with `[]` and `{}`
/// is that of the object without them, and reads as absent where JSON reads an empty value.
#[test]
fn an_empty_list_or_map_is_absent_on_the_wire() {
    let with_empties = json!({
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "cm", "finalizers": [], "labels": {}},
        "data": {}, "binaryData": {},
    });
    let without = json!({
        "apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "cm"},
    });
    let bytes = encode_protobuf(&with_empties).expect("a config map has a protobuf form");
    assert_eq!(bytes, encode_protobuf(&without).unwrap());

    let from_json: ConfigMap = serde_json::from_value(with_empties).unwrap();
    let from_protobuf: ConfigMap = from_slice(&bytes).unwrap();
    assert_eq!(generated::<ConfigMap>(&bytes), from_protobuf);
    assert_eq!(from_json.data, Some(Default::default()));
    assert_eq!(from_json.binary_data, Some(Default::default()));
    assert_eq!(from_json.metadata.finalizers, Some(vec![]));
    assert_eq!(from_json.metadata.labels, Some(Default::default()));
    assert_eq!(from_protobuf.data, None);
    assert_eq!(from_protobuf.binary_data, None);
    assert_eq!(from_protobuf.metadata.finalizers, None);
    assert_eq!(from_protobuf.metadata.labels, None);
    assert_eq!(from_protobuf, serde_json::from_value(without).unwrap());
}
