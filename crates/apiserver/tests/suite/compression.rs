//! Response compression as kube-apiserver 1.36 does it, checked on the wire: a list of more
//! than 128 KiB is gzipped for a client that asks, and reads back as the same bytes; smaller
//! responses, clients that do not ask, and watch streams are sent as they are. And the
//! bandwidth limit, which changes the pace of a body, never its bytes.

use std::io::Read;
use std::time::Duration;

use informer_apiserver::{ApiServer, Config};
use k8s_openapi::api::core::v1::Pod;
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

const PROTOBUF: &str = "application/vnd.kubernetes.protobuf";

/// A server holding 400 pods of about 600 bytes of JSON each: a list of all of them is well
/// above the 128 KiB threshold, a page of 10 well below.
async fn server(config: Config) -> ApiServer {
    let server = ApiServer::start(config.with_core_types())
        .await
        .expect("server starts");
    for i in 0..400 {
        let pod: Pod = serde_json::from_value(json!({
            "metadata": {
                "name": format!("pod-{i}"),
                "namespace": format!("ns-{}", i % 10),
                "labels": {"app": "web", "idx": i.to_string()},
                "annotations": {"note": "x".repeat(200)},
            },
            "spec": {"containers": [{"name": "c", "image": "nginx"}]},
        }))
        .expect("a pod");
        server.create(&pod).expect("created");
    }
    server
}

/// One response, read whole from a connection of its own.
struct Reply {
    status: u16,
    headers: Vec<(String, String)>,
    /// The body as sent (chunked framing removed, content coding kept).
    body: Vec<u8>,
}

impl Reply {
    async fn get(server: &ApiServer, path: &str, headers: &[(&str, &str)]) -> Reply {
        let mut stream = TcpStream::connect(server.addr()).await.expect("connects");
        let mut head = format!("GET {path} HTTP/1.1\r\nHost: sim\r\nConnection: close\r\n");
        for (name, value) in headers {
            head.push_str(&format!("{name}: {value}\r\n"));
        }
        head.push_str("\r\n");
        stream.write_all(head.as_bytes()).await.expect("sent");
        let mut raw = Vec::new();
        stream.read_to_end(&mut raw).await.expect("read");
        let split = raw
            .windows(4)
            .position(|w| w == b"\r\n\r\n")
            .expect("a head");
        let head = String::from_utf8_lossy(&raw[..split]).into_owned();
        let mut lines = head.lines();
        let status = lines.next().expect("a status line")[9..12]
            .parse()
            .expect("a status");
        let headers: Vec<(String, String)> = lines
            .filter_map(|l| l.split_once(':'))
            .map(|(k, v)| (k.trim().to_ascii_lowercase(), v.trim().to_owned()))
            .collect();
        let mut body = raw[split + 4..].to_vec();
        if headers
            .iter()
            .any(|(k, v)| k == "transfer-encoding" && v == "chunked")
        {
            body = dechunk(&body);
        }
        Reply {
            status,
            headers,
            body,
        }
    }

    fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }

    /// The body with its content coding undone.
    fn decoded(&self) -> Vec<u8> {
        match self.header("content-encoding") {
            Some("gzip") => {
                let mut out = Vec::new();
                flate2::read::GzDecoder::new(self.body.as_slice())
                    .read_to_end(&mut out)
                    .expect("valid gzip");
                out
            }
            None => self.body.clone(),
            Some(other) => panic!("unexpected content encoding {other}"),
        }
    }
}

/// The data of a chunked body.
fn dechunk(mut raw: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    loop {
        let line_end = raw
            .windows(2)
            .position(|w| w == b"\r\n")
            .expect("a chunk size");
        let size = usize::from_str_radix(
            std::str::from_utf8(&raw[..line_end]).expect("hex").trim(),
            16,
        )
        .expect("a chunk size");
        raw = &raw[line_end + 2..];
        if size == 0 {
            return out;
        }
        out.extend_from_slice(&raw[..size]);
        raw = &raw[size + 2..];
    }
}

#[tokio::test]
async fn a_large_list_is_gzipped_when_asked_and_reads_back_identical() {
    let server = server(Config::default()).await;
    for accept in ["application/json", PROTOBUF] {
        let plain = Reply::get(&server, "/api/v1/pods", &[("Accept", accept)]).await;
        assert_eq!(plain.status, 200);
        assert_eq!(plain.header("content-encoding"), None, "{accept}");
        assert!(
            plain.body.len() > 128 * 1024,
            "{accept}: {}",
            plain.body.len()
        );

        let gzipped = Reply::get(
            &server,
            "/api/v1/pods",
            &[("Accept", accept), ("Accept-Encoding", "deflate, gzip")],
        )
        .await;
        assert_eq!(gzipped.status, 200);
        assert_eq!(gzipped.header("content-encoding"), Some("gzip"), "{accept}");
        assert!(
            gzipped
                .header("vary")
                .is_some_and(|v| v.to_ascii_lowercase().contains("accept-encoding")),
            "{accept}"
        );
        assert_eq!(
            gzipped
                .header("content-type")
                .map(|t| t.starts_with(accept)),
            Some(true)
        );
        assert!(gzipped.body.len() < plain.body.len() / 4, "{accept}");
        assert_eq!(gzipped.decoded(), plain.body, "{accept}");
    }
    server.shutdown().await;
}

#[tokio::test]
async fn small_responses_and_clients_that_do_not_ask_get_plain_bodies() {
    let server = server(Config::default()).await;
    let cases: [(&str, &[(&str, &str)]); 5] = [
        // Below the threshold.
        ("/api/v1/pods?limit=10", &[("Accept-Encoding", "gzip")]),
        (
            "/api/v1/namespaces/ns-1/pods/pod-1",
            &[("Accept-Encoding", "gzip")],
        ),
        // Not asked, or not in kube-apiserver's terms.
        ("/api/v1/pods", &[]),
        ("/api/v1/pods", &[("Accept-Encoding", "identity")]),
        ("/api/v1/pods", &[("Accept-Encoding", "gzip;q=1.0, br")]),
    ];
    for (path, headers) in cases {
        let reply = Reply::get(&server, path, headers).await;
        assert_eq!(reply.status, 200, "{path} {headers:?}");
        assert_eq!(reply.header("content-encoding"), None, "{path} {headers:?}");
        let parsed: Value = serde_json::from_slice(&reply.body).expect("plain JSON");
        assert!(parsed["metadata"].is_object(), "{path}");
    }
    server.shutdown().await;
}

#[tokio::test]
async fn compression_switched_off_sends_every_list_plain() {
    let server = server(Config::default().with_response_compression(false)).await;
    let reply = Reply::get(&server, "/api/v1/pods", &[("Accept-Encoding", "gzip")]).await;
    assert_eq!(reply.header("content-encoding"), None);
    assert!(reply.body.len() > 128 * 1024);
    serde_json::from_slice::<Value>(&reply.body).expect("plain JSON");
    server.shutdown().await;
}

#[tokio::test]
async fn watch_streams_are_never_compressed() {
    let server = server(Config::default()).await;
    let streaming = "/api/v1/pods?watch=true&sendInitialEvents=true&allowWatchBookmarks=true\
                     &resourceVersionMatch=NotOlderThan&timeoutSeconds=1";
    for (path, accept) in [
        (
            "/api/v1/pods?watch=true&resourceVersion=0&timeoutSeconds=1",
            "application/json",
        ),
        (streaming, "application/json"),
        (streaming, PROTOBUF),
    ] {
        let reply = Reply::get(
            &server,
            path,
            &[("Accept", accept), ("Accept-Encoding", "gzip")],
        )
        .await;
        assert_eq!(reply.status, 200, "{path}");
        assert_eq!(reply.header("content-encoding"), None, "{path} {accept}");
        // Every pod's ADDED event, more than the threshold in all, in the clear.
        assert!(reply.body.len() > 128 * 1024, "{path} {accept}");
        let needle = b"pod-399";
        assert!(
            reply.body.windows(needle.len()).any(|w| w == needle),
            "{path} {accept}"
        );
    }
    server.shutdown().await;
}

#[tokio::test]
async fn a_bandwidth_limit_changes_no_byte() {
    let limited = server(Config::default().with_bandwidth(50_000_000)).await;
    let gzipped = Reply::get(&limited, "/api/v1/pods", &[("Accept-Encoding", "gzip")]).await;
    assert_eq!(gzipped.header("content-encoding"), Some("gzip"));
    limited.faults().set_bandwidth(None);
    let plain = Reply::get(&limited, "/api/v1/pods", &[]).await;
    assert_eq!(gzipped.decoded(), plain.body);
    limited.faults().set_bandwidth(Some(20_000_000));
    let again = Reply::get(&limited, "/api/v1/pods", &[]).await;
    assert_eq!(again.body, plain.body);
    tokio::time::timeout(Duration::from_secs(10), limited.shutdown())
        .await
        .expect("shuts down");
}
