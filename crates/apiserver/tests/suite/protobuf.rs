//! The Kubernetes protobuf encoding over the wire: a protobuf client (the k8s-pb types) creates
//! built-in objects and reads them back, and kubectl (when installed) creates some.

#![cfg(feature = "protobuf")]

use std::collections::BTreeMap;
use std::time::Duration;

use informer_apiserver::{ApiServer, Config};
use k8s_pb::api::core::v1 as core;
use k8s_pb::apimachinery::pkg::apis::meta::v1 as meta;
use k8s_pb::apimachinery::pkg::runtime::{TypeMeta, Unknown};
use prost::Message as _;
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

const PROTOBUF: &str = "application/vnd.kubernetes.protobuf";
const WAIT: Duration = Duration::from_secs(20);

async fn start() -> ApiServer {
    ApiServer::start(Config::for_tests(Duration::from_millis(100)))
        .await
        .expect("server starts")
}

fn envelope(api_version: &str, kind: &str, raw: Vec<u8>) -> Vec<u8> {
    let unknown = Unknown {
        type_meta: Some(TypeMeta {
            api_version: Some(api_version.into()),
            kind: Some(kind.into()),
        }),
        raw: Some(raw),
        content_encoding: Some(String::new()),
        content_type: Some(String::new()),
    };
    let mut out = b"k8s\0".to_vec();
    out.extend(unknown.encode_to_vec());
    out
}

fn open_envelope(body: &[u8]) -> (String, Vec<u8>) {
    let rest = body.strip_prefix(b"k8s\0").expect("the protobuf magic");
    let unknown = Unknown::decode(rest).expect("a runtime.Unknown");
    (
        unknown.type_meta.unwrap().kind.unwrap(),
        unknown.raw.unwrap(),
    )
}

/// One request on its own connection, read to the end: (status, content type, body).
async fn request(
    server: &ApiServer,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &[u8],
) -> (u16, String, Vec<u8>) {
    let exchange = async {
        let mut stream = TcpStream::connect(server.addr()).await.unwrap();
        let headers: String = headers
            .iter()
            .map(|(k, v)| format!("{k}: {v}\r\n"))
            .collect();
        let head = format!(
            "{method} {path} HTTP/1.1\r\nHost: localhost\r\n{headers}Content-Length: {}\r\nConnection: close\r\n\r\n",
            body.len()
        );
        stream.write_all(head.as_bytes()).await.unwrap();
        stream.write_all(body).await.unwrap();
        let mut raw = Vec::new();
        stream.read_to_end(&mut raw).await.unwrap();
        raw
    };
    let raw = tokio::time::timeout(WAIT, exchange)
        .await
        .expect("an answer in time");
    let end = raw.windows(4).position(|w| w == b"\r\n\r\n").unwrap();
    let head = String::from_utf8_lossy(&raw[..end]).to_string();
    let status = head.split(' ').nth(1).unwrap().parse().unwrap();
    let header = |name: &str| {
        head.split("\r\n")
            .filter_map(|l| l.split_once(':'))
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.trim().to_owned())
    };
    let mut body = raw[end + 4..].to_vec();
    if header("transfer-encoding").as_deref() == Some("chunked") {
        body = dechunk(&body);
    }
    (status, header("content-type").unwrap_or_default(), body)
}

fn dechunk(mut raw: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    while let Some(line_end) = raw.windows(2).position(|w| w == b"\r\n") {
        let size = usize::from_str_radix(std::str::from_utf8(&raw[..line_end]).unwrap().trim(), 16)
            .unwrap_or(0);
        if size == 0 || raw.len() < line_end + 2 + size {
            break;
        }
        out.extend_from_slice(&raw[line_end + 2..line_end + 2 + size]);
        raw = &raw[(line_end + 4 + size).min(raw.len())..];
    }
    out
}

async fn get_json(server: &ApiServer, path: &str) -> Value {
    let (status, _, body) =
        request(server, "GET", path, &[("Accept", "application/json")], b"").await;
    assert_eq!(status, 200, "{}", String::from_utf8_lossy(&body));
    serde_json::from_slice(&body).unwrap()
}

/// Everything but the fields the server sets on each create.
fn user_fields(mut object: Value) -> Value {
    let metadata = object["metadata"].as_object_mut().unwrap();
    for key in [
        "uid",
        "resourceVersion",
        "creationTimestamp",
        "generation",
        "managedFields",
        "name",
    ] {
        metadata.remove(key);
    }
    object
}

fn meta(name: &str, namespace: Option<&str>) -> Option<meta::ObjectMeta> {
    Some(meta::ObjectMeta {
        name: Some(name.into()),
        namespace: namespace.map(Into::into),
        labels: BTreeMap::from([("app".to_owned(), "web".to_owned())]),
        ..Default::default()
    })
}

async fn create_both(server: &ApiServer, path: &str, kind: &str, protobuf: Vec<u8>, json: Value) {
    let (status, _, body) = request(
        server,
        "POST",
        path,
        &[("Content-Type", PROTOBUF), ("Accept", "application/json")],
        &envelope(json["apiVersion"].as_str().unwrap(), kind, protobuf),
    )
    .await;
    assert_eq!(status, 201, "{}", String::from_utf8_lossy(&body));
    let (status, _, body) = request(
        server,
        "POST",
        path,
        &[("Content-Type", "application/json")],
        json.to_string().as_bytes(),
    )
    .await;
    assert_eq!(status, 201, "{}", String::from_utf8_lossy(&body));
    let name = json["metadata"]["name"].as_str().unwrap();
    let from_protobuf = get_json(server, &format!("{path}/{name}-pb")).await;
    let from_json = get_json(server, &format!("{path}/{name}")).await;
    assert_eq!(user_fields(from_protobuf), user_fields(from_json), "{kind}");
}

#[tokio::test]
async fn protobuf_creates_store_what_the_same_json_creates() {
    let server = start().await;
    let cm = core::ConfigMap {
        metadata: meta("cm-pb", Some("default")),
        data: BTreeMap::from([("a".to_owned(), "b".to_owned())]),
        binary_data: BTreeMap::from([("bin".to_owned(), vec![0u8, 1, 255])]),
        immutable: Some(false),
    };
    create_both(
        &server,
        "/api/v1/namespaces/default/configmaps",
        "ConfigMap",
        cm.encode_to_vec(),
        json!({
            "apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "cm", "namespace": "default", "labels": {"app": "web"}},
            "data": {"a": "b"}, "binaryData": {"bin": "AAH/"}, "immutable": false
        }),
    )
    .await;

    let secret = core::Secret {
        metadata: meta("s-pb", Some("default")),
        data: BTreeMap::from([("k".to_owned(), b"v".to_vec())]),
        r#type: Some("Opaque".into()),
        ..Default::default()
    };
    create_both(
        &server,
        "/api/v1/namespaces/default/secrets",
        "Secret",
        secret.encode_to_vec(),
        json!({
            "apiVersion": "v1", "kind": "Secret",
            "metadata": {"name": "s", "namespace": "default", "labels": {"app": "web"}},
            "data": {"k": "dg=="}, "type": "Opaque"
        }),
    )
    .await;

    let pod = core::Pod {
        metadata: meta("p-pb", Some("default")),
        spec: Some(core::PodSpec {
            containers: vec![core::Container {
                name: Some("c".into()),
                image: Some("nginx".into()),
                ports: vec![core::ContainerPort {
                    container_port: Some(80),
                    ..Default::default()
                }],
                ..Default::default()
            }],
            termination_grace_period_seconds: Some(0),
            ..Default::default()
        }),
        status: None,
    };
    create_both(&server, "/api/v1/namespaces/default/pods", "Pod", pod.encode_to_vec(), json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "p", "namespace": "default", "labels": {"app": "web"}},
        "spec": {"containers": [{"name": "c", "image": "nginx", "ports": [{"containerPort": 80}]}],
                 "terminationGracePeriodSeconds": 0}
    })).await;

    let ns = core::Namespace {
        metadata: meta("n-pb", None),
        ..Default::default()
    };
    create_both(
        &server,
        "/api/v1/namespaces",
        "Namespace",
        ns.encode_to_vec(),
        json!({
            "apiVersion": "v1", "kind": "Namespace",
            "metadata": {"name": "n", "labels": {"app": "web"}}
        }),
    )
    .await;
}

#[tokio::test]
async fn get_list_and_watch_answer_in_protobuf_when_asked() {
    let server = start().await;
    let accept = [(
        "Accept",
        "application/vnd.kubernetes.protobuf, application/json",
    )];
    let (status, _, _) = request(
        &server,
        "POST",
        "/api/v1/namespaces/default/configmaps",
        &[("Content-Type", "application/json")],
        json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "a"}, "data": {"x": "y"}})
            .to_string()
            .as_bytes(),
    )
    .await;
    assert_eq!(status, 201);

    let (status, content_type, body) = request(
        &server,
        "GET",
        "/api/v1/namespaces/default/configmaps/a",
        &accept,
        b"",
    )
    .await;
    assert_eq!((status, content_type.as_str()), (200, PROTOBUF));
    let (kind, raw) = open_envelope(&body);
    assert_eq!(kind, "ConfigMap");
    let cm = core::ConfigMap::decode(raw.as_slice()).unwrap();
    let json = get_json(&server, "/api/v1/namespaces/default/configmaps/a").await;
    assert_eq!(cm.data["x"], "y");
    let metadata = cm.metadata.unwrap();
    assert_eq!(
        metadata.resource_version.as_deref(),
        json["metadata"]["resourceVersion"].as_str()
    );
    assert_eq!(metadata.uid.as_deref(), json["metadata"]["uid"].as_str());

    let (status, _, body) = request(
        &server,
        "GET",
        "/api/v1/namespaces/default/configmaps",
        &accept,
        b"",
    )
    .await;
    assert_eq!(status, 200);
    let (kind, raw) = open_envelope(&body);
    assert_eq!(kind, "ConfigMapList");
    let list = core::ConfigMapList::decode(raw.as_slice()).unwrap();
    assert_eq!(list.items.len(), 1);
    assert_eq!(list.items[0].data["x"], "y");

    // A missing object: a protobuf Status.
    let (status, _, body) = request(
        &server,
        "GET",
        "/api/v1/namespaces/default/configmaps/none",
        &accept,
        b"",
    )
    .await;
    assert_eq!(status, 404);
    let (kind, raw) = open_envelope(&body);
    assert_eq!(kind, "Status");
    assert_eq!(
        meta::Status::decode(raw.as_slice())
            .unwrap()
            .reason
            .as_deref(),
        Some("NotFound")
    );

    // A watch from the list's resourceVersion ending at its timeout: length-prefixed events.
    let rv = list.metadata.unwrap().resource_version.unwrap();
    let watch = async {
        request(
            &server,
            "GET",
            &format!("/api/v1/namespaces/default/configmaps?watch=true&resourceVersion={rv}&timeoutSeconds=1"),
            &accept,
            b"",
        )
        .await
    };
    let ((status, content_type, body), _) = tokio::join!(watch, async {
        server.create(&k8s_openapi::api::core::v1::ConfigMap {
            metadata: k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta {
                name: Some("b".into()),
                namespace: Some("default".into()),
                ..Default::default()
            },
            ..Default::default()
        })
    });
    assert_eq!((status, content_type.as_str()), (200, PROTOBUF));
    let mut frames = Vec::new();
    let mut rest = body.as_slice();
    while rest.len() >= 4 {
        let len = u32::from_be_bytes(rest[..4].try_into().unwrap()) as usize;
        let event = meta::WatchEvent::decode(&rest[4..4 + len]).unwrap();
        let (kind, raw) = open_envelope(&event.object.unwrap().raw.unwrap());
        frames.push((event.r#type.unwrap(), kind, raw));
        rest = &rest[4 + len..];
    }
    let added: Vec<_> = frames
        .iter()
        .filter(|(t, k, _)| t == "ADDED" && k == "ConfigMap")
        .map(|(_, _, raw)| {
            core::ConfigMap::decode(raw.as_slice())
                .unwrap()
                .metadata
                .unwrap()
                .name
                .unwrap()
        })
        .collect();
    assert!(added.contains(&"b".to_owned()), "{frames:?}");
}

#[tokio::test]
async fn custom_resources_refuse_protobuf_bodies_and_answer_json() {
    let server = start().await;
    server.register_info(informer_apiserver::ResourceInfo::custom(
        "example.com",
        "v1",
        "Widget",
        "widgets",
        true,
    ));
    let (status, _, body) = request(
        &server,
        "POST",
        "/apis/example.com/v1/namespaces/default/widgets",
        &[("Content-Type", PROTOBUF)],
        &envelope("example.com/v1", "Widget", Vec::new()),
    )
    .await;
    assert_eq!(status, 415, "{}", String::from_utf8_lossy(&body));
    let status_json: Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(status_json["reason"], "UnsupportedMediaType");
    let (status, content_type, _) = request(
        &server,
        "GET",
        "/apis/example.com/v1/namespaces/default/widgets",
        &[(
            "Accept",
            "application/vnd.kubernetes.protobuf, application/json",
        )],
        b"",
    )
    .await;
    assert_eq!((status, content_type.as_str()), (200, "application/json"));
    let (status, _, _) = request(
        &server,
        "GET",
        "/apis/example.com/v1/namespaces/default/widgets",
        &[("Accept", PROTOBUF)],
        b"",
    )
    .await;
    assert_eq!(status, 406);
}

#[tokio::test]
async fn kubectl_creates_through_protobuf() {
    let Ok(kubectl) = which("kubectl") else {
        println!("kubectl is not installed: skipping the kubectl check");
        return;
    };
    let server = start().await;
    let dir =
        std::env::temp_dir().join(format!("informer-apiserver-kubectl-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let kubeconfig = dir.join("kubeconfig");
    std::fs::write(&kubeconfig, server.kubeconfig()).unwrap();
    for args in [
        &["create", "configmap", "x", "--from-literal=a=b"][..],
        &["create", "secret", "generic", "s", "--from-literal=k=v"],
        &["create", "namespace", "n"],
    ] {
        let kubectl = kubectl.clone();
        let kubeconfig = kubeconfig.clone();
        let args: Vec<String> = args.iter().map(|s| s.to_string()).collect();
        let output = tokio::task::spawn_blocking(move || {
            std::process::Command::new(kubectl)
                .arg("--kubeconfig")
                .arg(kubeconfig)
                .args(&args)
                .output()
                .unwrap()
        })
        .await
        .unwrap();
        assert!(
            output.status.success(),
            "{}",
            String::from_utf8_lossy(&output.stderr)
        );
    }
    let cm = get_json(&server, "/api/v1/namespaces/default/configmaps/x").await;
    assert_eq!(cm["data"], json!({"a": "b"}));
    let secret = get_json(&server, "/api/v1/namespaces/default/secrets/s").await;
    assert_eq!(secret["data"], json!({"k": "dg=="}));
    assert_eq!(secret["type"], "Opaque");
    let ns = get_json(&server, "/api/v1/namespaces/n").await;
    assert_eq!(ns["metadata"]["name"], "n");
    let _ = std::fs::remove_dir_all(dir);
}

fn which(name: &str) -> Result<std::path::PathBuf, ()> {
    std::env::var_os("PATH")
        .into_iter()
        .flat_map(|p| std::env::split_paths(&p).collect::<Vec<_>>())
        .map(|d| d.join(name))
        .find(|p| p.is_file())
        .ok_or(())
}

/// A protobuf list, written from the objects' cached messages, is the protobuf encoding of the
/// JSON list: whole and in pages, again after a read filled the caches, and after a write.
#[tokio::test]
async fn protobuf_lists_are_the_json_lists_encoded() {
    let server = start().await;
    for i in 0..5 {
        let pod = json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": format!("p{i}"), "namespace": "default",
                         "labels": {"app": "web", "idx": i.to_string(), "tier": "a"},
                         "annotations": {"b": "2", "a": "1"}},
            "spec": {"containers": [{"name": "c", "image": "i",
                "resources": {"limits": {"cpu": "500m", "memory": "1Gi"}}}]}
        });
        let pod: k8s_openapi::api::core::v1::Pod = serde_json::from_value(pod).unwrap();
        server.create(&pod).expect("create");
    }
    let same = |path: String| {
        let server = &server;
        async move {
            let (status, kind, body) =
                request(server, "GET", &path, &[("Accept", PROTOBUF)], b"").await;
            assert_eq!((status, kind.as_str()), (200, PROTOBUF));
            let json = get_json(server, &path).await;
            let expected = informer_apiserver::encode_protobuf(&json).expect("a pod list");
            assert_eq!(body, expected, "{path}");
            json
        }
    };
    for _ in 0..2 {
        same("/api/v1/pods".to_owned()).await;
        same("/api/v1/namespaces/default/pods?labelSelector=tier%3Da".to_owned()).await;
        let page = same("/api/v1/pods?limit=2".to_owned()).await;
        let token = page["metadata"]["continue"]
            .as_str()
            .expect("a token")
            .to_owned();
        same(format!("/api/v1/pods?limit=2&continue={token}")).await;
    }
    let patch = json!({"metadata": {"labels": {"app": "db"}}});
    server
        .patch::<k8s_openapi::api::core::v1::Pod>(Some("default"), "p1", &patch)
        .expect("patch");
    let list = same("/api/v1/pods".to_owned()).await;
    assert_eq!(list["items"][1]["metadata"]["labels"]["app"], "db");
}

/// The managed fields a write records are part of the object in protobuf too: each entry with
/// its `fieldsV1` as the JSON it holds.
#[tokio::test]
async fn managed_fields_are_served_in_protobuf() {
    let server = start().await;
    let body = json!({"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "settings", "namespace": "demo"}, "data": {"a": "1"}});
    let (status, _, created) = request(
        &server,
        "PATCH",
        "/api/v1/namespaces/demo/configmaps/settings?fieldManager=deployer",
        &[
            ("Content-Type", "application/apply-patch+yaml"),
            ("Accept", "application/json"),
        ],
        body.to_string().as_bytes(),
    )
    .await;
    assert_eq!(status, 201, "{}", String::from_utf8_lossy(&created));
    let (status, kind, bytes) = request(
        &server,
        "GET",
        "/api/v1/namespaces/demo/configmaps/settings",
        &[("Accept", PROTOBUF)],
        b"",
    )
    .await;
    assert_eq!((status, kind.as_str()), (200, PROTOBUF));
    let (kind, raw) = open_envelope(&bytes);
    assert_eq!(kind, "ConfigMap");
    let cm = core::ConfigMap::decode(raw.as_slice()).unwrap();
    let entries = cm.metadata.unwrap().managed_fields;
    assert_eq!(entries.len(), 1);
    assert_eq!(entries[0].manager.as_deref(), Some("deployer"));
    assert_eq!(entries[0].operation.as_deref(), Some("Apply"));
    let fields: Value =
        serde_json::from_slice(entries[0].fields_v1.as_ref().unwrap().raw.as_ref().unwrap())
            .unwrap();
    assert_eq!(fields, json!({"f:data": {"f:a": {}}}));
}
