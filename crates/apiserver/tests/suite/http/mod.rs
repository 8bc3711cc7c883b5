//! One HTTP/1.1 request on a connection of its own, read to the end: what the apply and status
//! tests send, without a client library in between.

#![allow(dead_code, unreachable_pub)]

use std::time::Duration;

use informer_apiserver::{ApiServer, Config};
use serde_json::Value;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// Generous bound for an answer that should come at once.
pub const WAIT: Duration = Duration::from_secs(20);
/// The media type of a server-side apply.
pub const APPLY: &str = "application/apply-patch+yaml";
/// JSON merge patch.
pub const MERGE: &str = "application/merge-patch+json";
/// JSON, for creates and replaces.
pub const JSON: &str = "application/json";

/// A server with the core types.
pub async fn start() -> ApiServer {
    start_with(Config::for_tests(Duration::from_millis(100))).await
}

/// A server with `config`.
pub async fn start_with(config: Config) -> ApiServer {
    ApiServer::start(config).await.expect("server starts")
}

/// An answer: its status code and its body (as JSON when it is JSON, else as a string).
#[derive(Debug)]
pub struct Answer {
    pub status: u16,
    pub text: String,
    pub body: Vec<u8>,
}

impl Answer {
    /// The body as JSON.
    pub fn json(&self) -> Value {
        serde_json::from_slice(&self.body)
            .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&self.body)))
    }

    /// Asserts a `Status` with this code and reason, and returns it.
    pub fn status_of(&self, code: u16, reason: &str) -> Value {
        assert_eq!(self.status, code, "{}", self.text);
        let status = self.json();
        assert_eq!(status["kind"], "Status", "{}", self.text);
        assert_eq!(status["code"], code, "{}", self.text);
        assert_eq!(status["reason"], reason, "{}", self.text);
        status
    }

    /// Asserts `200` or `201` and returns the object.
    pub fn object(&self, code: u16) -> Value {
        assert_eq!(self.status, code, "{}", self.text);
        self.json()
    }
}

/// Sends `method path` with the headers and body given, and reads the whole answer.
pub async fn send(
    server: &ApiServer,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &[u8],
) -> Answer {
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
    let end = raw
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .expect("a response head");
    let head = String::from_utf8_lossy(&raw[..end]).to_string();
    let status = head.split(' ').nth(1).unwrap().parse().unwrap();
    let chunked = head
        .to_ascii_lowercase()
        .contains("transfer-encoding: chunked");
    let mut body = raw[end + 4..].to_vec();
    if chunked {
        body = dechunk(&body);
    }
    Answer {
        status,
        text: String::from_utf8_lossy(&body).to_string(),
        body,
    }
}

fn dechunk(mut raw: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    while let Some(line_end) = raw.windows(2).position(|w| w == b"\r\n") {
        let size = std::str::from_utf8(&raw[..line_end])
            .ok()
            .and_then(|s| usize::from_str_radix(s.trim(), 16).ok())
            .unwrap_or(0);
        if size == 0 || raw.len() < line_end + 2 + size {
            break;
        }
        out.extend_from_slice(&raw[line_end + 2..line_end + 2 + size]);
        raw = &raw[(line_end + 4 + size).min(raw.len())..];
    }
    out
}

/// `GET path` as JSON.
pub async fn get(server: &ApiServer, path: &str) -> Answer {
    send(server, "GET", path, &[("Accept", JSON)], b"").await
}

/// A write with a body of `content_type`.
pub async fn write(
    server: &ApiServer,
    method: &str,
    path: &str,
    content_type: &str,
    body: &str,
) -> Answer {
    send(
        server,
        method,
        path,
        &[("Content-Type", content_type), ("Accept", JSON)],
        body.as_bytes(),
    )
    .await
}

/// A server-side apply of `body` by `manager` (`&force=true` when `force`).
pub async fn apply(
    server: &ApiServer,
    path: &str,
    manager: &str,
    force: bool,
    body: &str,
) -> Answer {
    let force = if force { "&force=true" } else { "" };
    let path = format!("{path}?fieldManager={manager}{force}");
    write(server, "PATCH", &path, APPLY, body).await
}

/// The entries of `object`'s managed fields as `(manager, operation, subresource, fieldsV1)`.
pub fn entries(object: &Value) -> Vec<(String, String, String, Value)> {
    object["metadata"]["managedFields"]
        .as_array()
        .map(|entries| {
            entries
                .iter()
                .map(|e| {
                    let text = |k: &str| e[k].as_str().unwrap_or("").to_owned();
                    (
                        text("manager"),
                        text("operation"),
                        text("subresource"),
                        e["fieldsV1"].clone(),
                    )
                })
                .collect()
        })
        .unwrap_or_default()
}
