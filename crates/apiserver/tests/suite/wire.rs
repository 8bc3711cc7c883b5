//! The wire format, checked byte by byte over a raw TCP connection: status codes, Status
//! bodies, headers, chunked watch framing, and how each watch fault looks on the wire.

use std::time::Duration;

use informer_apiserver::{
    ApiServer, BookmarkShape, Config, ExpiredWatch, Failure, Isolation, RemainingItemCount,
    ResourceInfo, SlowStream, SlowWatcher, StatusError, Verb,
};
use k8s_openapi::api::core::v1::Pod;
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

const WAIT: Duration = Duration::from_secs(10);
/// How long a request held for a hung client is watched for an answer that must not come. The
/// server's count of held requests is what says it is held; this bound only checks that
/// nothing leaks out meanwhile.
const STILL_PENDING: Duration = Duration::from_secs(1);

async fn start() -> ApiServer {
    start_with(Config::for_tests(Duration::from_millis(100))).await
}

async fn start_with(config: Config) -> ApiServer {
    ApiServer::start(config).await.expect("server starts")
}

fn pod(ns: &str, name: &str) -> Pod {
    serde_json::from_value(json!({
        "metadata": {"name": name, "namespace": ns, "labels": {"app": "web"}},
        "spec": {"containers": [{"name": "c", "image": "nginx"}]},
    }))
    .unwrap()
}

/// One HTTP/1.1 exchange on its own connection.
struct Exchange {
    stream: TcpStream,
    /// Bytes read after the head.
    raw: Vec<u8>,
    status: u16,
    headers: Vec<(String, String)>,
}

impl Exchange {
    async fn send(
        server: &ApiServer,
        method: &str,
        path: &str,
        content_type: &str,
        body: &str,
    ) -> Exchange {
        let stream = Self::open(
            server,
            method,
            path,
            &[("Content-Type", content_type)],
            body,
        )
        .await;
        Self::receive(stream).await
    }

    /// Sends a request with extra headers on a connection of its own; the response is left
    /// to [`Exchange::receive`].
    async fn open(
        server: &ApiServer,
        method: &str,
        path: &str,
        headers: &[(&str, &str)],
        body: &str,
    ) -> TcpStream {
        let mut stream = TcpStream::connect(server.addr()).await.unwrap();
        let headers: String = headers
            .iter()
            .map(|(name, value)| format!("{name}: {value}\r\n"))
            .collect();
        let request = format!(
            "{method} {path} HTTP/1.1\r\nHost: localhost\r\nAccept: application/json\r\n\
             {headers}Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
            body.len()
        );
        stream.write_all(request.as_bytes()).await.unwrap();
        stream
    }

    /// Reads the response head on `stream`.
    async fn receive(mut stream: TcpStream) -> Exchange {
        let mut raw = Vec::new();
        let head_end = loop {
            if let Some(i) = raw.windows(4).position(|w| w == b"\r\n\r\n") {
                break i;
            }
            let mut buf = [0u8; 4096];
            let n = tokio::time::timeout(WAIT, stream.read(&mut buf))
                .await
                .expect("a response head in time")
                .unwrap();
            assert!(n > 0, "connection closed before the response head");
            raw.extend_from_slice(&buf[..n]);
        };
        let head = String::from_utf8(raw[..head_end].to_vec()).unwrap();
        let mut lines = head.split("\r\n");
        let status = lines
            .next()
            .unwrap()
            .split(' ')
            .nth(1)
            .unwrap()
            .parse()
            .unwrap();
        let headers = lines
            .filter_map(|l| l.split_once(':'))
            .map(|(k, v)| (k.trim().to_ascii_lowercase(), v.trim().to_owned()))
            .collect();
        Exchange {
            stream,
            raw: raw[head_end + 4..].to_vec(),
            status,
            headers,
        }
    }

    async fn get(server: &ApiServer, path: &str) -> Exchange {
        Self::send(server, "GET", path, "application/json", "").await
    }

    fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }

    /// Reads until the peer closes; returns whether it closed cleanly (EOF, not a reset).
    async fn read_to_end(&mut self) -> bool {
        let mut buf = [0u8; 65536];
        loop {
            match tokio::time::timeout(WAIT, self.stream.read(&mut buf))
                .await
                .expect("the server ends the response in time")
            {
                Ok(0) => return true,
                Ok(n) => self.raw.extend_from_slice(&buf[..n]),
                Err(_) => return false,
            }
        }
    }

    /// Reads until the de-chunked body contains `needle`.
    async fn read_until(&mut self, needle: &str) {
        let mut buf = [0u8; 65536];
        while !self.text().contains(needle) {
            let n = tokio::time::timeout(WAIT, self.stream.read(&mut buf))
                .await
                .unwrap_or_else(|_| panic!("{needle:?} not seen; got {:?}", self.text()))
                .unwrap();
            assert!(n > 0, "closed before {needle:?}; got {:?}", self.text());
            self.raw.extend_from_slice(&buf[..n]);
        }
    }

    /// Reads until the complete events read so far satisfy `done`.
    async fn read_until_events(&mut self, what: &str, done: impl Fn(&[Value]) -> bool) {
        let mut buf = [0u8; 65536];
        while !done(&self.events()) {
            let n = tokio::time::timeout(WAIT, self.stream.read(&mut buf))
                .await
                .unwrap_or_else(|_| panic!("{what} not seen; got {:?}", self.text()))
                .unwrap();
            assert!(n > 0, "closed before {what}; got {:?}", self.text());
            self.raw.extend_from_slice(&buf[..n]);
        }
    }

    fn chunked(&self) -> bool {
        self.header("transfer-encoding") == Some("chunked")
    }

    /// The body, de-chunked if needed, and whether the chunked terminator was seen.
    fn body(&self) -> (Vec<u8>, bool) {
        if !self.chunked() {
            return (self.raw.clone(), true);
        }
        let mut out = Vec::new();
        let mut rest = self.raw.as_slice();
        loop {
            let Some(eol) = rest.windows(2).position(|w| w == b"\r\n") else {
                return (out, false);
            };
            let size_text = std::str::from_utf8(&rest[..eol]).unwrap();
            let size = usize::from_str_radix(size_text.split(';').next().unwrap(), 16).unwrap();
            if size == 0 {
                return (out, rest[eol + 2..].starts_with(b"\r\n"));
            }
            let start = eol + 2;
            if rest.len() < start + size + 2 {
                out.extend_from_slice(&rest[start..rest.len().min(start + size)]);
                return (out, false);
            }
            out.extend_from_slice(&rest[start..start + size]);
            rest = &rest[start + size + 2..];
        }
    }

    fn text(&self) -> String {
        String::from_utf8_lossy(&self.body().0).into_owned()
    }

    fn json(&self) -> Value {
        serde_json::from_slice(&self.body().0).unwrap_or_else(|e| {
            panic!("not JSON ({e}): {:?}", self.text());
        })
    }

    /// Complete watch events: one JSON object per line.
    fn events(&self) -> Vec<Value> {
        let text = self.text();
        text.split_terminator('\n')
            .filter(|l| text.ends_with('\n') || !l.is_empty())
            .filter_map(|l| serde_json::from_str(l).ok())
            .collect()
    }
}

fn assert_status(x: &Exchange, code: u16, reason: &str) -> Value {
    assert_eq!(x.status, code, "{}", x.text());
    assert_eq!(x.header("content-type"), Some("application/json"));
    let body = x.json();
    assert_eq!(body["kind"], "Status");
    assert_eq!(body["apiVersion"], "v1");
    assert_eq!(body["status"], "Failure");
    assert_eq!(body["code"], code);
    assert_eq!(body["reason"], reason, "{body}");
    assert!(body["metadata"].is_object());
    body
}

#[tokio::test]
async fn error_statuses_are_the_ones_kube_apiserver_sends() {
    let server = start().await;
    server.create(&pod("demo", "web-0")).unwrap();

    let x = Exchange::get(&server, "/api/v1/widgets").await;
    let body = assert_status(&x, 404, "NotFound");
    assert_eq!(
        body["message"],
        "the server could not find the requested resource"
    );

    let x = Exchange::get(&server, "/api/v1/namespaces/demo/pods/nope").await;
    let body = assert_status(&x, 404, "NotFound");
    assert_eq!(body["message"], "pods \"nope\" not found");
    assert_eq!(body["details"], json!({"name": "nope", "kind": "pods"}));

    let pod_json =
        json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "web-0"}}).to_string();
    let x = Exchange::send(
        &server,
        "POST",
        "/api/v1/namespaces/demo/pods",
        "application/json",
        &pod_json,
    )
    .await;
    let body = assert_status(&x, 409, "AlreadyExists");
    assert_eq!(body["message"], "pods \"web-0\" already exists");

    let stale = json!({"metadata": {"name": "web-0", "resourceVersion": "1"}}).to_string();
    let x = Exchange::send(
        &server,
        "PUT",
        "/api/v1/namespaces/demo/pods/web-0",
        "application/json",
        &stale,
    )
    .await;
    let body = assert_status(&x, 409, "Conflict");
    assert_eq!(
        body["message"],
        "Operation cannot be fulfilled on pods \"web-0\": the object has been modified; \
         please apply your changes to the latest version and try again"
    );

    let x = Exchange::send(
        &server,
        "POST",
        "/api/v1/namespaces/demo/pods",
        "application/json",
        "{not json",
    )
    .await;
    assert_status(&x, 400, "BadRequest");

    let x = Exchange::send(
        &server,
        "POST",
        "/api/v1/namespaces/demo/pods",
        "application/json",
        r#"{"metadata":{}}"#,
    )
    .await;
    let body = assert_status(&x, 422, "Invalid");
    assert_eq!(
        body["message"],
        "Pod \"\" is invalid: metadata.name: Required value: name or generateName is required"
    );
    assert_eq!(body["details"]["causes"][0]["reason"], "FieldValueRequired");

    let x = Exchange::get(&server, "/api/v1/pods?resourceVersionMatch=Exact").await;
    let body = assert_status(&x, 422, "Invalid");
    assert_eq!(body["details"]["kind"], "ListOptions");
    assert_eq!(body["details"]["group"], "meta.k8s.io");
    assert_eq!(
        body["details"]["causes"][0]["field"],
        "resourceVersionMatch"
    );

    let x = Exchange::get(&server, "/api/v1/pods?labelSelector=app%20in%20web").await;
    assert_status(&x, 400, "BadRequest");
    let x = Exchange::get(&server, "/api/v1/pods?fieldSelector=spec.image%3Dx").await;
    let body = assert_status(&x, 400, "BadRequest");
    assert_eq!(body["message"], "field label not supported: spec.image");
    let x = Exchange::get(&server, "/api/v1/pods?limit=2&continue=garbage%21").await;
    let body = assert_status(&x, 400, "BadRequest");
    assert!(
        body["message"]
            .as_str()
            .unwrap()
            .starts_with("invalid continue token")
    );
    let x = Exchange::get(&server, "/api/v1/pods?continue=abc&resourceVersion=5").await;
    let body = assert_status(&x, 400, "BadRequest");
    assert_eq!(
        body["message"],
        "specifying resource version is not allowed when using continue"
    );

    let x = Exchange::send(
        &server,
        "PATCH",
        "/api/v1/namespaces/demo/pods/web-0",
        "application/json",
        "{}",
    )
    .await;
    assert_status(&x, 415, "UnsupportedMediaType");
}

#[tokio::test]
async fn creating_with_a_resource_version_is_refused_and_revisions_can_be_sparse() {
    let server = start_with(Config {
        resource_version_step: 7,
        ..Config::for_tests(Duration::from_secs(60))
    })
    .await;
    let body = json!({"metadata": {"name": "a", "resourceVersion": "5"}}).to_string();
    let x = Exchange::send(
        &server,
        "POST",
        "/api/v1/namespaces/demo/configmaps",
        "application/json",
        &body,
    )
    .await;
    let status = assert_status(&x, 500, "InternalError");
    assert_eq!(
        status["message"],
        "Internal error occurred: resourceVersion should not be set on objects to be created"
    );
    let body = json!({"metadata": {"name": "a"}}).to_string();
    let x = Exchange::send(
        &server,
        "POST",
        "/api/v1/namespaces/demo/configmaps",
        "application/json",
        &body,
    )
    .await;
    assert_eq!(x.json()["metadata"]["resourceVersion"], "8");
    let x = Exchange::send(
        &server,
        "POST",
        "/api/v1/namespaces/demo/configmaps",
        "application/json",
        &json!({"metadata": {"name": "b"}}).to_string(),
    )
    .await;
    assert_eq!(x.json()["metadata"]["resourceVersion"], "15");
    assert!(
        x.json()["metadata"].get("generation").is_none(),
        "no spec, no generation"
    );
}

#[tokio::test]
async fn failures_carry_retry_after_in_json_and_plain_text() {
    let server = start().await;
    let faults = server.faults();
    faults.fail_next(Verb::List, 1, Failure::too_many_requests(7));
    let x = Exchange::get(&server, "/api/v1/pods").await;
    let body = assert_status(&x, 429, "TooManyRequests");
    assert_eq!(x.header("retry-after"), Some("7"));
    assert_eq!(body["details"]["retryAfterSeconds"], 7);

    faults.fail_next(Verb::Any, 1, Failure::shutting_down());
    let x = Exchange::get(&server, "/api/v1/pods").await;
    assert_eq!(x.status, 429);
    assert_eq!(x.header("retry-after"), Some("5"));
    assert_eq!(x.header("connection"), Some("close"));
    assert!(x.header("content-type").unwrap().starts_with("text/plain"));
    assert!(x.text().contains("shutting down"));

    // Only the requests of the named verb fail, and only as many as asked.
    faults.fail_next(Verb::Watch, 2, Failure::unavailable());
    assert_eq!(Exchange::get(&server, "/api/v1/pods").await.status, 200);
    for expected in [503, 503, 200] {
        let watch = "/api/v1/pods?watch=1&resourceVersion=1&timeoutSeconds=1";
        assert_eq!(Exchange::get(&server, watch).await.status, expected);
    }

    faults.set_unavailable(Some(2));
    let x = Exchange::get(&server, "/api/v1/pods").await;
    let body = assert_status(&x, 429, "TooManyRequests");
    assert_eq!(body["message"], "storage is (re)initializing");
    assert_eq!(x.header("retry-after"), Some("2"));
    faults.set_unavailable(None);
    assert_eq!(Exchange::get(&server, "/api/v1/pods").await.status, 200);

    faults.set_latency(Duration::from_millis(300));
    let started = std::time::Instant::now();
    assert_eq!(Exchange::get(&server, "/api/v1/pods").await.status, 200);
    assert!(started.elapsed() >= Duration::from_millis(300));
}

#[tokio::test]
async fn remaining_item_count_can_be_wrong_or_missing_on_purpose() {
    let server = start().await;
    for name in ["a", "b", "c", "d"] {
        server.create(&pod("demo", name)).unwrap();
    }
    async fn count(server: &ApiServer) -> Option<Value> {
        let list = Exchange::get(server, "/api/v1/namespaces/demo/pods?limit=1")
            .await
            .json();
        assert!(list["metadata"]["continue"].is_string(), "{list}");
        list["metadata"].get("remainingItemCount").cloned()
    }
    assert_eq!(count(&server).await, Some(json!(3)));
    server
        .faults()
        .set_remaining_item_count(RemainingItemCount::Off(-5));
    assert_eq!(count(&server).await, Some(json!(-2)));
    server
        .faults()
        .set_remaining_item_count(RemainingItemCount::Off(100));
    assert_eq!(count(&server).await, Some(json!(103)));
    server
        .faults()
        .set_remaining_item_count(RemainingItemCount::Omitted);
    assert_eq!(count(&server).await, None);
    // The last page carries no count, wrong or not.
    server
        .faults()
        .set_remaining_item_count(RemainingItemCount::Off(7));
    let last = Exchange::get(&server, "/api/v1/namespaces/demo/pods?limit=10")
        .await
        .json();
    assert!(
        last["metadata"].get("remainingItemCount").is_none(),
        "{last}"
    );
    server
        .faults()
        .set_remaining_item_count(RemainingItemCount::Exact);
    assert_eq!(count(&server).await, Some(json!(3)));
}

#[tokio::test]
async fn lists_have_the_kube_apiserver_shape() {
    let server = start().await;
    for name in ["b", "a", "c"] {
        server.create(&pod("demo", name)).unwrap();
    }
    let x = Exchange::get(&server, "/api/v1/namespaces/demo/pods?limit=2").await;
    assert_eq!(x.status, 200);
    assert_eq!(x.header("content-type"), Some("application/json"));
    let list = x.json();
    assert_eq!(list["kind"], "PodList");
    assert_eq!(list["apiVersion"], "v1");
    assert_eq!(
        list["metadata"]["resourceVersion"],
        server.resource_version().to_string()
    );
    assert_eq!(list["metadata"]["remainingItemCount"], 1);
    let items = list["items"].as_array().unwrap();
    assert_eq!(items.len(), 2);
    // Built-in list items carry no kind/apiVersion; keys are in order.
    assert!(items[0].get("kind").is_none() && items[0].get("apiVersion").is_none());
    assert_eq!(items[0]["metadata"]["name"], "a");
    assert!(items[0]["metadata"]["uid"].as_str().unwrap().len() == 36);
    assert_eq!(items[0]["metadata"]["generation"], 1);
    assert!(
        items[0]["metadata"]["creationTimestamp"]
            .as_str()
            .unwrap()
            .ends_with('Z')
    );

    // RV=0 is served from "cache": the limit is ignored.
    let x = Exchange::get(
        &server,
        "/api/v1/namespaces/demo/pods?limit=1&resourceVersion=0",
    )
    .await;
    let list = x.json();
    assert_eq!(list["items"].as_array().unwrap().len(), 3);
    assert!(list["metadata"].get("continue").is_none());

    // With a selector the page may be short, and remainingItemCount is not reported.
    let x = Exchange::get(
        &server,
        "/api/v1/namespaces/demo/pods?limit=1&labelSelector=app%3Dweb",
    )
    .await;
    let list = x.json();
    assert!(list["metadata"]["continue"].is_string());
    assert!(list["metadata"].get("remainingItemCount").is_none());

    // An empty collection still has `items: []`.
    let x = Exchange::get(&server, "/api/v1/namespaces/empty/configmaps").await;
    assert_eq!(x.json()["items"], json!([]));
    assert_eq!(x.json()["kind"], "ConfigMapList");

    // The same list at an Exact, still retained revision: with a limit and RV=N, legacy Exact.
    let rv_after_b = server.resource_version() - 2;
    let x = Exchange::get(
        &server,
        &format!("/api/v1/namespaces/demo/pods?limit=10&resourceVersion={rv_after_b}"),
    )
    .await;
    let list = x.json();
    assert_eq!(list["metadata"]["resourceVersion"], rv_after_b.to_string());
    assert_eq!(list["items"].as_array().unwrap().len(), 1);
}

#[tokio::test]
async fn watch_events_are_newline_delimited_json_over_chunks() {
    let server = start().await;
    let rv = server.resource_version();
    let mut x = Exchange::get(
        &server,
        &format!("/api/v1/namespaces/demo/pods?watch=1&resourceVersion={rv}"),
    )
    .await;
    assert_eq!(x.status, 200);
    assert!(x.chunked());
    assert_eq!(x.header("content-type"), Some("application/json"));
    server.create(&pod("demo", "a")).unwrap();
    server.delete::<Pod>(Some("demo"), "a").unwrap();
    x.read_until("DELETED").await;
    let events = x.events();
    assert_eq!(events.len(), 2);
    assert_eq!(events[0]["type"], "ADDED");
    // Objects inside watch events carry kind and apiVersion.
    assert_eq!(events[0]["object"]["kind"], "Pod");
    assert_eq!(events[0]["object"]["apiVersion"], "v1");
    // A DELETED carries the delete's revision.
    assert_eq!(
        events[1]["object"]["metadata"]["resourceVersion"],
        server.resource_version().to_string()
    );
    assert!(x.text().ends_with("}\n"));
    server.faults().close_watches();
    assert!(x.read_to_end().await);
    let (_, terminated) = x.body();
    assert!(terminated, "a clean end has the chunked terminator");
}

#[tokio::test]
async fn a_slow_stream_splits_events_across_chunks() {
    let server = start().await;
    let rv = server.resource_version();
    server.faults().set_slow_stream(Some(SlowStream {
        chunk_bytes: 7,
        delay: Duration::from_millis(1),
    }));
    let mut x = Exchange::get(
        &server,
        &format!("/api/v1/namespaces/demo/pods?watch=1&resourceVersion={rv}"),
    )
    .await;
    server.create(&pod("demo", "a")).unwrap();
    x.read_until("\n").await;
    // Many chunks of at most 7 bytes made one event.
    let chunk_headers = x.raw.windows(3).filter(|w| w == b"7\r\n").count();
    assert!(chunk_headers > 10, "{}", String::from_utf8_lossy(&x.raw));
    assert_eq!(x.events().len(), 1);
}

#[tokio::test]
async fn watch_faults_on_the_wire() {
    let server = start().await;
    let faults = server.faults();
    let rv = server.resource_version();
    let path = format!("/api/v1/namespaces/demo/pods?watch=1&resourceVersion={rv}");

    // Drop: the connection ends without the chunked terminator.
    let mut x = Exchange::get(&server, &path).await;
    server.create(&pod("demo", "a")).unwrap();
    x.read_until("ADDED").await;
    faults.drop_watches();
    x.read_to_end().await;
    assert!(!x.body().1, "an abrupt drop has no terminator: {:?}", x.raw);

    // Drop inside an event: half a JSON object and no terminator.
    let mut x = Exchange::get(&server, &path).await;
    x.read_until("ADDED").await;
    faults.drop_watches_mid_event();
    x.read_to_end().await;
    let (body, terminated) = x.body();
    assert!(!terminated);
    assert!(String::from_utf8_lossy(&body).ends_with(r#"{"type":"MODIFIED","object":{"kind":"Po"#));

    // Torn event: half a JSON object, then a clean end.
    let mut x = Exchange::get(&server, &path).await;
    x.read_until("ADDED").await;
    faults.torn_event();
    assert!(x.read_to_end().await);
    let (body, terminated) = x.body();
    assert!(terminated);
    assert!(String::from_utf8_lossy(&body).ends_with(r#"{"type":"MODIFIED","object":{"kind":"Po"#));

    // Garbage line, then the stream goes on.
    let mut x = Exchange::get(&server, &path).await;
    x.read_until("ADDED").await;
    faults.garbage_line();
    x.read_until("this is not json\n").await;
    faults.duplicate_last_event();
    server.create(&pod("demo", "b")).unwrap();
    x.read_until("\"name\":\"b\"").await;
    let added: Vec<String> = x
        .events()
        .iter()
        .map(|e| e["object"]["metadata"]["name"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(
        added,
        ["a", "a", "b"],
        "the duplicate repeats the last event"
    );

    // Injected ERROR with a non-Status object.
    let mut x = Exchange::get(&server, &path).await;
    x.read_until("ADDED").await;
    faults.inject_watch_error_object(json!({}));
    assert!(x.read_to_end().await);
    assert!(x.text().ends_with("{\"type\":\"ERROR\",\"object\":{}}\n"));

    // Injected 504 TooLarge ERROR.
    let mut x = Exchange::get(&server, &path).await;
    x.read_until("ADDED").await;
    faults.inject_watch_error(StatusError::too_large_resource_version("99", "5"));
    assert!(x.read_to_end().await);
    let error = x.events().pop().unwrap();
    assert_eq!(error["type"], "ERROR");
    assert_eq!(error["object"]["code"], 504);
    assert_eq!(
        error["object"]["details"]["causes"][0]["reason"],
        "ResourceVersionTooLarge"
    );
}

#[tokio::test]
async fn expired_watch_modes() {
    let server = start().await;
    server.create(&pod("demo", "a")).unwrap();
    let old = server.resource_version();
    server.create(&pod("demo", "b")).unwrap();
    server.faults().compact_all();
    let path = format!("/api/v1/pods?watch=1&resourceVersion={old}");

    let mut x = Exchange::get(&server, &path).await;
    assert_eq!(x.status, 200);
    assert!(x.read_to_end().await);
    let events = x.events();
    assert_eq!(events.len(), 1);
    assert_eq!(events[0]["object"]["reason"], "Expired");
    assert_eq!(events[0]["object"]["code"], 410);

    server
        .faults()
        .set_expired_watch(ExpiredWatch::ErrorEventGone);
    let mut x = Exchange::get(&server, &path).await;
    assert!(x.read_to_end().await);
    assert_eq!(x.events()[0]["object"]["reason"], "Gone");

    server.faults().set_expired_watch(ExpiredWatch::Http410);
    let x = Exchange::get(&server, &path).await;
    let body = assert_status(&x, 410, "Expired");
    assert!(
        body["message"]
            .as_str()
            .unwrap()
            .starts_with("too old resource version")
    );

    // A bumped revision (an etcd restore done right) expires everything before it.
    server.faults().set_expired_watch(ExpiredWatch::ErrorEvent);
    let before = server.resource_version();
    server.faults().bump_revision(1000);
    assert_eq!(server.resource_version(), before + 1000);
    let mut x = Exchange::get(
        &server,
        &format!("/api/v1/pods?watch=1&resourceVersion={before}"),
    )
    .await;
    assert!(x.read_to_end().await);
    assert_eq!(x.events()[0]["object"]["code"], 410);
}

#[tokio::test]
async fn streaming_list_waits_for_a_future_revision_then_fails_with_504() {
    let server = start().await;
    let ahead = server.resource_version() + 50;
    let mut x = Exchange::get(
        &server,
        &format!(
            "/api/v1/pods?watch=1&sendInitialEvents=true&allowWatchBookmarks=true\
             &resourceVersionMatch=NotOlderThan&resourceVersion={ahead}"
        ),
    )
    .await;
    assert_eq!(x.status, 200);
    assert!(x.read_to_end().await);
    let events = x.events();
    assert_eq!(events.len(), 1);
    assert_eq!(events[0]["type"], "ERROR");
    assert_eq!(events[0]["object"]["reason"], "Timeout");
    assert_eq!(
        events[0]["object"]["details"]["causes"][0]["reason"],
        "ResourceVersionTooLarge"
    );
}

#[tokio::test]
async fn legacy_watch_from_zero_is_a_streaming_list_with_an_end_marker() {
    let server = start_with(Config {
        bookmark_shape: BookmarkShape::NullFilled,
        ..Config::for_tests(Duration::from_secs(3600))
    })
    .await;
    server.create(&pod("demo", "a")).unwrap();
    let mut x = Exchange::get(
        &server,
        "/api/v1/watch/namespaces/demo/pods?resourceVersion=0&allowWatchBookmarks=true",
    )
    .await;
    x.read_until("BOOKMARK").await;
    let events = x.events();
    assert_eq!(events[0]["type"], "ADDED");
    let bookmark = &events[1]["object"];
    assert_eq!(
        bookmark["metadata"]["annotations"]["k8s.io/initial-events-end"],
        "true"
    );
    assert_eq!(bookmark["metadata"]["creationTimestamp"], Value::Null);
    assert_eq!(bookmark["spec"], json!({"containers": null}));
    assert_eq!(
        bookmark["metadata"]["resourceVersion"],
        server.resource_version().to_string()
    );

    // Without allowWatchBookmarks there is no end marker, only the state.
    let mut x = Exchange::get(&server, "/api/v1/namespaces/demo/pods?watch=true").await;
    x.read_until("ADDED").await;
    server.create(&pod("demo", "b")).unwrap();
    x.read_until("\"b\"").await;
    assert!(!x.text().contains("BOOKMARK"));
}

#[tokio::test]
async fn bookmarks_can_be_switched_off() {
    let server = start().await;
    server.faults().set_bookmarks(false);
    let rv = server.resource_version();
    let mut x = Exchange::get(
        &server,
        &format!(
            "/api/v1/pods?watch=1&allowWatchBookmarks=true&resourceVersion={rv}&timeoutSeconds=1"
        ),
    )
    .await;
    assert!(x.read_to_end().await);
    assert_eq!(x.text(), "", "no bookmark at all, even before the deadline");
    server.faults().set_bookmarks(true);
    let mut x = Exchange::get(
        &server,
        &format!("/api/v1/pods?watch=1&allowWatchBookmarks=true&resourceVersion={rv}"),
    )
    .await;
    x.read_until("BOOKMARK").await;
}

#[tokio::test]
async fn named_watch_and_writes_over_http() {
    let server = start().await;
    let rv = server.resource_version();
    let mut x = Exchange::get(
        &server,
        &format!("/api/v1/watch/namespaces/demo/pods/b?resourceVersion={rv}"),
    )
    .await;
    let body = json!({"metadata": {"name": "a"}, "spec": {"containers": []}}).to_string();
    let created = Exchange::send(
        &server,
        "POST",
        "/api/v1/namespaces/demo/pods",
        "application/json",
        &body,
    )
    .await;
    assert_eq!(created.status, 201);
    assert_eq!(created.json()["metadata"]["namespace"], "demo");
    let body = json!({"metadata": {"name": "b"}, "spec": {"containers": []}}).to_string();
    Exchange::send(
        &server,
        "POST",
        "/api/v1/namespaces/demo/pods",
        "application/json",
        &body,
    )
    .await;
    let patch = json!({"spec": {"nodeName": "n1"}}).to_string();
    let patched = Exchange::send(
        &server,
        "PATCH",
        "/api/v1/namespaces/demo/pods/b",
        "application/merge-patch+json",
        &patch,
    )
    .await;
    assert_eq!(patched.status, 200);
    assert_eq!(
        patched.json()["metadata"]["generation"],
        2,
        "a spec change bumps generation"
    );
    let deleted = Exchange::send(
        &server,
        "DELETE",
        "/api/v1/namespaces/demo/pods/b?gracePeriodSeconds=0",
        "application/json",
        "",
    )
    .await;
    assert_eq!(deleted.status, 200);
    x.read_until("DELETED").await;
    let names: Vec<(String, String)> = x
        .events()
        .iter()
        .map(|e| {
            (
                e["type"].as_str().unwrap().to_owned(),
                e["object"]["metadata"]["name"].as_str().unwrap().to_owned(),
            )
        })
        .collect();
    assert_eq!(
        names,
        [
            ("ADDED".into(), "b".into()),
            ("MODIFIED".into(), "b".into()),
            // The delete with grace period 0: marked, then removed.
            ("MODIFIED".into(), "b".into()),
            ("DELETED".into(), "b".into())
        ]
    );
    // A no-op update takes no new revision.
    let head = server.resource_version();
    let current = Exchange::get(&server, "/api/v1/namespaces/demo/pods/a")
        .await
        .json();
    let again = Exchange::send(
        &server,
        "PUT",
        "/api/v1/namespaces/demo/pods/a",
        "application/json",
        &current.to_string(),
    )
    .await;
    assert_eq!(again.status, 200);
    assert_eq!(server.resource_version(), head);
}

#[tokio::test]
async fn custom_resources_and_discovery() {
    let widgets = ResourceInfo::custom("example.com", "v1", "Widget", "widgets", true);
    let server =
        start_with(Config::for_tests(Duration::from_secs(60)).register_info(widgets.clone())).await;
    server
        .create_value(
            &widgets,
            json!({"metadata": {"name": "w1", "namespace": "demo"}, "size": 3}),
        )
        .unwrap();
    let x = Exchange::get(&server, "/apis/example.com/v1/namespaces/demo/widgets").await;
    let list = x.json();
    assert_eq!(list["kind"], "WidgetList");
    assert_eq!(list["apiVersion"], "example.com/v1");
    // Custom resource items carry their type.
    assert_eq!(list["items"][0]["kind"], "Widget");
    assert_eq!(list["items"][0]["size"], 3);

    let groups = Exchange::get(&server, "/apis").await.json();
    assert_eq!(groups["kind"], "APIGroupList");
    let group_names: Vec<&str> = groups["groups"]
        .as_array()
        .unwrap()
        .iter()
        .map(|g| g["name"].as_str().unwrap())
        .collect();
    assert_eq!(group_names, ["coordination.k8s.io", "example.com"]);
    let core = Exchange::get(&server, "/api/v1").await.json();
    let names: Vec<&str> = core["resources"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["name"].as_str().unwrap())
        .collect();
    // Subresources are listed after their resource, as kube-apiserver lists them.
    assert_eq!(
        names,
        [
            "pods",
            "pods/status",
            "configmaps",
            "secrets",
            "namespaces",
            "namespaces/status",
            "nodes",
            "nodes/status"
        ]
    );
    assert_eq!(
        Exchange::get(&server, "/api").await.json()["versions"],
        json!(["v1"])
    );
    assert_eq!(
        Exchange::get(&server, "/version").await.json()["gitVersion"],
        "v1.36.0"
    );
    assert_eq!(
        Exchange::get(&server, "/apis/example.com/v1").await.json()["resources"][0]["kind"],
        "Widget"
    );
}

#[tokio::test]
async fn a_cache_reinitialisation_ends_watches_cleanly_and_expires_old_versions() {
    let server = start().await;
    server.create(&pod("demo", "a")).unwrap();
    let rv = server.resource_version();
    let path = format!("/api/v1/pods?watch=1&resourceVersion={rv}");
    let mut x = Exchange::get(&server, &path).await;
    server.create(&pod("demo", "b")).unwrap();
    x.read_until("ADDED").await;
    server.faults().reinitialize_cache();
    assert!(x.read_to_end().await);
    assert!(x.body().1, "a clean end");
    assert_eq!(server.history_floor(), server.resource_version());
    let mut x = Exchange::get(&server, &path).await;
    assert!(x.read_to_end().await);
    assert_eq!(x.events()[0]["object"]["code"], 410);
    // The current revision is still a valid start.
    let head = server.resource_version();
    let mut x = Exchange::get(
        &server,
        &format!("/api/v1/pods?watch=1&resourceVersion={head}"),
    )
    .await;
    server.create(&pod("demo", "c")).unwrap();
    x.read_until("\"c\"").await;
}

/// A list of the demo pods not older than `rv` waits for the cache, which does not get there.
async fn assert_not_older_than_times_out(server: &ApiServer, rv: u64) {
    let x = Exchange::get(
        server,
        &format!(
            "/api/v1/namespaces/demo/pods?resourceVersion={rv}&resourceVersionMatch=NotOlderThan"
        ),
    )
    .await;
    assert_status(&x, 504, "Timeout");
}

/// The names in a list.
fn names(list: &Value) -> Vec<&str> {
    list["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|item| item["metadata"]["name"].as_str().unwrap())
        .collect()
}

#[tokio::test]
async fn a_delayed_cache_holds_changes_back_from_watches_and_cached_reads() {
    let server = start().await;
    server.create(&pod("demo", "a")).unwrap();
    let before = server.resource_version();
    let mut x = Exchange::get(
        &server,
        &format!(
            "/api/v1/namespaces/demo/pods?watch=1&resourceVersion={before}&allowWatchBookmarks=true"
        ),
    )
    .await;
    // Far longer than the test: what is committed now reaches the cache only when the delay
    // is lowered.
    server.faults().set_cache_delay(Duration::from_secs(3600));
    server.create(&pod("demo", "b")).unwrap();
    let after = server.resource_version();
    // Bookmarks come every 100 ms; none passes the change on its way.
    let bookmark = |e: &Value| e["type"] == "BOOKMARK";
    x.read_until_events("three bookmarks", |events| {
        events.iter().filter(|e| bookmark(e)).count() >= 3
    })
    .await;
    for event in x.events() {
        assert!(bookmark(&event), "{event}");
        assert_eq!(
            event["object"]["metadata"]["resourceVersion"],
            before.to_string()
        );
    }
    // Reads from the cache do not have it; consistent reads do.
    let cached = Exchange::get(&server, "/api/v1/namespaces/demo/pods?resourceVersion=0")
        .await
        .json();
    assert_eq!(cached["metadata"]["resourceVersion"], before.to_string());
    assert_eq!(names(&cached), ["a"]);
    let fresh = Exchange::get(&server, "/api/v1/namespaces/demo/pods")
        .await
        .json();
    assert_eq!(fresh["metadata"]["resourceVersion"], after.to_string());
    assert_eq!(names(&fresh), ["a", "b"]);
    assert_not_older_than_times_out(&server, after).await;
    // A consistent streaming list waits for the cache to have the head, in vain here.
    let mut streaming = Exchange::get(
        &server,
        "/api/v1/namespaces/demo/pods?watch=1&sendInitialEvents=true\
         &resourceVersionMatch=NotOlderThan&allowWatchBookmarks=true",
    )
    .await;
    streaming.read_until("ERROR").await;
    assert_eq!(streaming.events()[0]["object"]["code"], 504);

    // Lowered, the delay releases what is due at once: the event, then bookmarks past it.
    server.faults().set_cache_delay(Duration::ZERO);
    x.read_until("\"b\"").await;
    x.read_until_events("a bookmark after b", |events| {
        events
            .iter()
            .skip_while(|e| e["type"] != "ADDED")
            .any(bookmark)
    })
    .await;
    let events = x.events();
    let rest: Vec<&Value> = events.iter().skip_while(|e| bookmark(e)).collect();
    assert_eq!(rest[0]["type"], "ADDED");
    assert_eq!(rest[0]["object"]["metadata"]["name"], "b");
    assert_eq!(
        rest[1]["object"]["metadata"]["resourceVersion"],
        after.to_string()
    );
    let cached = Exchange::get(&server, "/api/v1/namespaces/demo/pods?resourceVersion=0")
        .await
        .json();
    assert_eq!(names(&cached), ["a", "b"]);

    // With a short delay a change reaches the watch no sooner than the delay after its commit.
    let delay = Duration::from_millis(300);
    server.faults().set_cache_delay(delay);
    let committed = std::time::Instant::now();
    server.create(&pod("demo", "c")).unwrap();
    x.read_until_events("c", |events| {
        events
            .iter()
            .any(|e| e["object"]["metadata"]["name"] == "c")
    })
    .await;
    assert!(committed.elapsed() >= delay, "{:?}", committed.elapsed());
}

#[tokio::test]
async fn a_lagging_cache_serves_stale_reads_at_resource_version_zero() {
    let server = start().await;
    for name in ["a", "b", "c"] {
        server.create(&pod("demo", name)).unwrap();
    }
    let head = server.resource_version();
    server.faults().set_cache_lag(2);
    let stale = Exchange::get(&server, "/api/v1/namespaces/demo/pods?resourceVersion=0")
        .await
        .json();
    assert_eq!(stale["metadata"]["resourceVersion"], (head - 2).to_string());
    assert_eq!(stale["items"].as_array().unwrap().len(), 1);
    // A consistent read still sees the head.
    let fresh = Exchange::get(&server, "/api/v1/namespaces/demo/pods")
        .await
        .json();
    assert_eq!(fresh["metadata"]["resourceVersion"], head.to_string());
    // Not older than the head: the cache never gets there in time.
    assert_not_older_than_times_out(&server, head).await;
    // A streaming list from "0" starts at the cache's snapshot, then catches up.
    let mut x = Exchange::get(
        &server,
        "/api/v1/namespaces/demo/pods?watch=1&resourceVersion=0&allowWatchBookmarks=true",
    )
    .await;
    x.read_until("\"c\"").await;
    let summary: Vec<(String, String)> = x
        .events()
        .iter()
        .map(|e| {
            (
                e["type"].as_str().unwrap().to_owned(),
                e["object"]["metadata"]["name"]
                    .as_str()
                    .unwrap_or("")
                    .to_owned(),
            )
        })
        .collect();
    assert_eq!(
        summary,
        [
            ("ADDED".into(), "a".into()),
            ("BOOKMARK".into(), String::new()),
            ("ADDED".into(), "b".into()),
            ("ADDED".into(), "c".into()),
        ]
    );
    assert_eq!(
        x.events()[1]["object"]["metadata"]["resourceVersion"],
        (head - 2).to_string()
    );
}

fn config_map(ns: &str, name: &str, finalizers: &[&str]) -> k8s_openapi::api::core::v1::ConfigMap {
    serde_json::from_value(json!({
        "metadata": {"name": name, "namespace": ns, "finalizers": finalizers},
        "data": {"k": "v"},
    }))
    .unwrap()
}

/// Opens a watch from the current head of a pod or config map collection.
async fn watch_from_head(server: &ApiServer, collection: &str) -> Exchange {
    let rv = server.resource_version();
    let x = Exchange::get(
        server,
        &format!("{collection}?watch=1&resourceVersion={rv}"),
    )
    .await;
    assert_eq!(x.status, 200);
    x
}

fn event_summary(events: &[Value]) -> Vec<(String, String)> {
    events
        .iter()
        .map(|e| {
            (
                e["type"].as_str().unwrap().to_owned(),
                e["object"]["metadata"]["resourceVersion"]
                    .as_str()
                    .unwrap()
                    .to_owned(),
            )
        })
        .collect()
}

#[tokio::test]
async fn deleting_a_config_map_answers_a_success_status_and_preconditions_are_409() {
    let server = start().await;
    let cm = server.create(&config_map("demo", "settings", &[])).unwrap();
    let uid = cm.metadata.uid.clone().unwrap();
    let rv = cm.metadata.resource_version.clone().unwrap();

    // A stale resourceVersion precondition.
    let body = json!({"kind": "DeleteOptions", "apiVersion": "v1",
        "preconditions": {"resourceVersion": "1"}})
    .to_string();
    let x = Exchange::send(
        &server,
        "DELETE",
        "/api/v1/namespaces/demo/configmaps/settings",
        "application/json",
        &body,
    )
    .await;
    // `rest.BeforeDelete` names the kind, not the resource, in the message and the details.
    assert_eq!(
        x.text(),
        format!(
            "{{\"apiVersion\":\"v1\",\"code\":409,\"details\":{{\"kind\":\"ConfigMap\",\"name\":\"settings\"}},\
             \"kind\":\"Status\",\"message\":\"Operation cannot be fulfilled on ConfigMap \\\"settings\\\": \
             the ResourceVersion in the precondition (1) does not match the ResourceVersion in record ({rv}). \
             The object might have been modified\",\
             \"metadata\":{{}},\"reason\":\"Conflict\",\"status\":\"Failure\"}}"
        )
    );
    assert_status(&x, 409, "Conflict");
    // A wrong uid precondition.
    let body = json!({"preconditions": {"uid": "not-the-uid"}}).to_string();
    let x = Exchange::send(
        &server,
        "DELETE",
        "/api/v1/namespaces/demo/configmaps/settings",
        "application/json",
        &body,
    )
    .await;
    let status = assert_status(&x, 409, "Conflict");
    assert_eq!(
        status["message"],
        format!(
            "Operation cannot be fulfilled on ConfigMap \"settings\": the UID in the precondition (not-the-uid) does not match the UID in record ({uid}). The object might have been deleted and then recreated"
        )
    );
    assert_eq!(
        status["details"],
        json!({"kind": "ConfigMap", "name": "settings"})
    );

    // Matching preconditions: deleted, and the answer is a Status, not the object.
    let body = json!({"preconditions": {"uid": uid, "resourceVersion": rv}}).to_string();
    let x = Exchange::send(
        &server,
        "DELETE",
        "/api/v1/namespaces/demo/configmaps/settings",
        "application/json",
        &body,
    )
    .await;
    assert_eq!(x.status, 200);
    assert_eq!(x.header("content-type"), Some("application/json"));
    assert_eq!(
        x.text(),
        format!(
            "{{\"apiVersion\":\"v1\",\"details\":{{\"kind\":\"configmaps\",\"name\":\"settings\",\"uid\":\"{uid}\"}},\
             \"kind\":\"Status\",\"metadata\":{{}},\"status\":\"Success\"}}"
        )
    );
    let x = Exchange::get(&server, "/api/v1/namespaces/demo/configmaps/settings").await;
    assert_status(&x, 404, "NotFound");
}

#[tokio::test]
async fn deleting_an_unscheduled_pod_is_a_modified_then_a_deleted() {
    let server = start().await;
    server.create(&pod("demo", "web-0")).unwrap();
    let mut watch = watch_from_head(&server, "/api/v1/namespaces/demo/pods").await;
    let head = server.resource_version();

    // No node: the grace period is 0 whatever the request asks.
    let x = Exchange::send(
        &server,
        "DELETE",
        "/api/v1/namespaces/demo/pods/web-0?gracePeriodSeconds=30",
        "application/json",
        "",
    )
    .await;
    assert_eq!(x.status, 200);
    let deleted = x.json();
    assert_eq!(
        deleted["kind"], "Pod",
        "pods answer with the object: {deleted}"
    );
    assert_eq!(deleted["metadata"]["deletionGracePeriodSeconds"], 0);
    assert!(deleted["metadata"]["deletionTimestamp"].is_string());
    assert_eq!(
        deleted["metadata"]["resourceVersion"],
        (head + 2).to_string()
    );

    watch.read_until("DELETED").await;
    let events = watch.events();
    assert_eq!(
        event_summary(&events),
        [
            ("MODIFIED".to_owned(), (head + 1).to_string()),
            ("DELETED".to_owned(), (head + 2).to_string()),
        ]
    );
    for e in &events {
        assert_eq!(e["object"]["metadata"]["deletionGracePeriodSeconds"], 0);
        assert_eq!(
            e["object"]["metadata"]["deletionTimestamp"],
            deleted["metadata"]["deletionTimestamp"]
        );
    }
    assert_status(
        &Exchange::get(&server, "/api/v1/namespaces/demo/pods/web-0").await,
        404,
        "NotFound",
    );
}

#[tokio::test]
async fn a_scheduled_pod_stays_terminating_until_its_deletion_is_finished() {
    let server = start().await;
    let mut p = pod("demo", "web-0");
    p.spec.as_mut().unwrap().node_name = Some("node-1".into());
    server.create(&p).unwrap();
    let mut watch = watch_from_head(&server, "/api/v1/namespaces/demo/pods").await;
    let head = server.resource_version();

    let body =
        json!({"kind": "DeleteOptions", "apiVersion": "v1", "gracePeriodSeconds": 600}).to_string();
    let x = Exchange::send(
        &server,
        "DELETE",
        "/api/v1/namespaces/demo/pods/web-0",
        "application/json",
        &body,
    )
    .await;
    assert_eq!(x.status, 200);
    let marked = x.json();
    assert_eq!(marked["metadata"]["deletionGracePeriodSeconds"], 600);
    let stamp: jiff::Timestamp = marked["metadata"]["deletionTimestamp"]
        .as_str()
        .unwrap()
        .parse()
        .unwrap();
    let ahead = stamp.duration_since(jiff::Timestamp::now()).as_secs();
    assert!(
        (590..=600).contains(&ahead),
        "deletionTimestamp is now + the grace period: {ahead}"
    );
    watch.read_until("MODIFIED").await;

    // Still there, marked; a second delete with a longer period changes nothing.
    let x = Exchange::send(
        &server,
        "DELETE",
        "/api/v1/namespaces/demo/pods/web-0?gracePeriodSeconds=900",
        "application/json",
        "",
    )
    .await;
    assert_eq!(x.status, 200);
    assert_eq!(
        x.json()["metadata"]["deletionTimestamp"],
        marked["metadata"]["deletionTimestamp"]
    );
    assert_eq!(server.resource_version(), head + 1);
    let got = Exchange::get(&server, "/api/v1/namespaces/demo/pods/web-0").await;
    assert_eq!(got.status, 200);
    assert_eq!(
        got.json()["metadata"]["deletionTimestamp"],
        marked["metadata"]["deletionTimestamp"]
    );

    // The kubelet's part: the grace period ends now.
    let last: Pod = server.finish_deletion(Some("demo"), "web-0").unwrap();
    assert_eq!(last.metadata.deletion_grace_period_seconds, Some(0));
    watch.read_until("DELETED").await;
    assert_eq!(
        event_summary(&watch.events()),
        [
            ("MODIFIED".to_owned(), (head + 1).to_string()),
            ("MODIFIED".to_owned(), (head + 2).to_string()),
            ("DELETED".to_owned(), (head + 3).to_string()),
        ]
    );
    assert_status(
        &Exchange::get(&server, "/api/v1/namespaces/demo/pods/web-0").await,
        404,
        "NotFound",
    );
}

#[tokio::test]
async fn finalizers_hold_a_deleted_object_until_the_last_one_is_removed() {
    let server = start().await;
    server
        .create(&config_map("demo", "held", &["example.com/hold"]))
        .unwrap();
    let mut watch = watch_from_head(&server, "/api/v1/namespaces/demo/configmaps").await;
    let head = server.resource_version();

    let x = Exchange::send(
        &server,
        "DELETE",
        "/api/v1/namespaces/demo/configmaps/held",
        "application/json",
        "",
    )
    .await;
    assert_eq!(x.status, 200);
    let marked = x.json();
    assert_eq!(
        marked["kind"], "ConfigMap",
        "a marked object is answered with itself"
    );
    assert_eq!(marked["metadata"]["deletionGracePeriodSeconds"], 0);
    assert_eq!(
        marked["metadata"]["finalizers"],
        json!(["example.com/hold"])
    );
    let stamp = marked["metadata"]["deletionTimestamp"].clone();
    assert!(stamp.is_string());
    watch.read_until("MODIFIED").await;

    // Deleting again keeps the timestamp and takes no revision.
    let again = Exchange::send(
        &server,
        "DELETE",
        "/api/v1/namespaces/demo/configmaps/held",
        "application/json",
        "",
    )
    .await;
    assert_eq!(again.json()["metadata"]["deletionTimestamp"], stamp);
    assert_eq!(server.resource_version(), head + 1);
    // An update cannot clear the mark.
    let mut body = marked.clone();
    body["metadata"]["deletionTimestamp"] = Value::Null;
    body["data"] = json!({"k": "w"});
    let x = Exchange::send(
        &server,
        "PUT",
        "/api/v1/namespaces/demo/configmaps/held",
        "application/json",
        &body.to_string(),
    )
    .await;
    assert_eq!(x.status, 200);
    assert_eq!(x.json()["metadata"]["deletionTimestamp"], stamp);

    // Removing the last finalizer deletes it.
    let x = Exchange::send(
        &server,
        "PATCH",
        "/api/v1/namespaces/demo/configmaps/held",
        "application/merge-patch+json",
        r#"{"metadata":{"finalizers":null}}"#,
    )
    .await;
    assert_eq!(x.status, 200);
    watch.read_until("DELETED").await;
    let events = watch.events();
    assert_eq!(
        event_summary(&events),
        [
            ("MODIFIED".to_owned(), (head + 1).to_string()),
            ("MODIFIED".to_owned(), (head + 2).to_string()),
            ("DELETED".to_owned(), (head + 3).to_string()),
        ]
    );
    assert_eq!(events[2]["object"]["metadata"]["deletionTimestamp"], stamp);
    assert_status(
        &Exchange::get(&server, "/api/v1/namespaces/demo/configmaps/held").await,
        404,
        "NotFound",
    );
}

/// The grace period runs on the server's (tokio) clock: paused here, so no real waiting.
#[tokio::test(start_paused = true)]
async fn a_grace_period_ends_on_the_servers_clock() {
    let server = start().await;
    let mut p = pod("demo", "web-0");
    let spec = p.spec.as_mut().unwrap();
    spec.node_name = Some("node-1".into());
    spec.termination_grace_period_seconds = Some(45);
    server.create(&p).unwrap();

    let marked: Pod = server
        .delete_with_grace(Some("demo"), "web-0", None)
        .unwrap();
    assert_eq!(
        marked.metadata.deletion_grace_period_seconds,
        Some(45),
        "the pod's own period"
    );
    tokio::time::sleep(Duration::from_secs(44)).await;
    let still: Pod = server.get(Some("demo"), "web-0").unwrap();
    assert_eq!(
        still.metadata.deletion_timestamp,
        marked.metadata.deletion_timestamp
    );
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert!(
        server.get::<Pod>(Some("demo"), "web-0").is_err(),
        "gone after 45 s"
    );

    // A shorter period given later moves the deadline closer.
    server.create(&p).unwrap();
    server
        .delete_with_grace::<Pod>(Some("demo"), "web-0", Some(300))
        .unwrap();
    let shorter: Pod = server
        .delete_with_grace(Some("demo"), "web-0", Some(10))
        .unwrap();
    assert_eq!(shorter.metadata.deletion_grace_period_seconds, Some(10));
    tokio::time::sleep(Duration::from_secs(11)).await;
    assert!(
        server.get::<Pod>(Some("demo"), "web-0").is_err(),
        "gone after 10 s"
    );
}

#[tokio::test]
async fn a_created_pod_gets_a_pending_status_with_its_qos_class() {
    let server = start().await;
    let cases = [
        (
            "best-effort",
            json!([{"name": "c", "image": "i"}]),
            "BestEffort",
        ),
        (
            "burstable",
            json!([{"name": "c", "image": "i", "resources": {"requests": {"cpu": "100m"}}}]),
            "Burstable",
        ),
        (
            // Limits only: the requests default to them, so requests equal limits.
            "guaranteed",
            json!([{"name": "c", "image": "i", "resources": {"limits": {"cpu": "0.5", "memory": "1Gi"}}}]),
            "Guaranteed",
        ),
        (
            "equal-values",
            json!([{"name": "c", "image": "i", "resources": {
                "requests": {"cpu": "500m", "memory": "1024Mi"},
                "limits": {"cpu": "0.5", "memory": "1Gi"}}}]),
            "Guaranteed",
        ),
        (
            "memory-limit-only",
            json!([{"name": "c", "image": "i", "resources": {"limits": {"memory": "1Gi"}}}]),
            "Burstable",
        ),
        (
            "one-of-two-unbounded",
            json!([
                {"name": "a", "image": "i", "resources": {"limits": {"cpu": "1", "memory": "1Gi"}}},
                {"name": "b", "image": "i"}
            ]),
            "Burstable",
        ),
    ];
    for (name, containers, qos) in cases {
        let body = json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name},
            "spec": {"containers": containers},
            // The client's status is discarded.
            "status": {"phase": "Running", "podIP": "10.0.0.1", "qosClass": "Guaranteed"},
        })
        .to_string();
        let x = Exchange::send(
            &server,
            "POST",
            "/api/v1/namespaces/demo/pods",
            "application/json",
            &body,
        )
        .await;
        assert_eq!(x.status, 201, "{}", x.text());
        let created = x.json();
        assert_eq!(
            created["status"],
            json!({"phase": "Pending", "qosClass": qos}),
            "{name}"
        );
        assert_eq!(
            created["spec"]["terminationGracePeriodSeconds"], 30,
            "{name}"
        );
    }
    let x = Exchange::get(&server, "/api/v1/namespaces/demo/pods/guaranteed").await;
    assert_eq!(
        x.json()["spec"]["containers"][0]["resources"]["requests"],
        json!({"cpu": "0.5", "memory": "1Gi"}),
        "requests defaulted from limits"
    );
}

#[tokio::test]
async fn a_watch_from_ahead_of_the_server_gets_nothing_until_that_revision_exists() {
    // Bookmarks every 50 ms: a watch that got one would show it within the window below.
    let server = start_with(Config::for_tests(Duration::from_millis(50))).await;
    server.create(&pod("demo", "a")).unwrap();
    let ahead = server.resource_version() + 2;
    let mut x = Exchange::get(
        &server,
        &format!(
            "/api/v1/namespaces/demo/pods?watch=1&allowWatchBookmarks=true&resourceVersion={ahead}"
        ),
    )
    .await;
    assert_eq!(x.status, 200);
    server.create(&pod("demo", "b")).unwrap();
    // Twenty bookmark intervals, the head still one short of the requested revision.
    let mut buf = [0u8; 4096];
    let quiet = tokio::time::timeout(Duration::from_secs(1), x.stream.read(&mut buf)).await;
    assert!(quiet.is_err(), "nothing may arrive yet; got {:?}", quiet);
    server.create(&pod("demo", "c")).unwrap(); // the requested revision: not sent (not newer)
    server.create(&pod("demo", "d")).unwrap();
    x.read_until("\"name\":\"d\"").await;
    let events = x.events();
    let added: Vec<&str> = events
        .iter()
        .filter(|e| e["type"] == "ADDED")
        .map(|e| e["object"]["metadata"]["name"].as_str().unwrap())
        .collect();
    assert_eq!(added, ["d"]);
    for e in events.iter().filter(|e| e["type"] == "BOOKMARK") {
        let rv: u64 = e["object"]["metadata"]["resourceVersion"]
            .as_str()
            .unwrap()
            .parse()
            .unwrap();
        assert!(rv >= ahead, "a bookmark below the requested revision: {e}");
    }
}

#[tokio::test]
async fn a_streaming_list_sends_exactly_one_bookmark_the_end_marker() {
    let server = start().await;
    for name in ["a", "b", "c"] {
        server.create(&pod("demo", name)).unwrap();
    }
    let head = server.resource_version();
    let paths = [
        // Explicit streaming list.
        "/api/v1/namespaces/demo/pods?watch=1&allowWatchBookmarks=true&sendInitialEvents=true&resourceVersionMatch=NotOlderThan".to_owned(),
        // v1.34+ defaulting of a watch from "0".
        "/api/v1/namespaces/demo/pods?watch=1&allowWatchBookmarks=true&resourceVersion=0".to_owned(),
        // Unset resource version.
        "/api/v1/namespaces/demo/pods?watch=1&allowWatchBookmarks=true".to_owned(),
    ];
    for path in paths {
        let mut x = Exchange::get(&server, &path).await;
        assert_eq!(x.status, 200);
        x.read_until("k8s.io/initial-events-end").await;
        let events = x.events();
        let types: Vec<&str> = events.iter().map(|e| e["type"].as_str().unwrap()).collect();
        assert_eq!(types, ["ADDED", "ADDED", "ADDED", "BOOKMARK"], "{path}");
        let end = &events[3]["object"]["metadata"];
        assert_eq!(end["resourceVersion"], head.to_string());
        assert_eq!(
            end["annotations"],
            json!({"k8s.io/initial-events-end": "true"})
        );
    }

    // Not older than a revision the server reaches while the watch waits: still one bookmark.
    let mut config = Config::for_tests(Duration::from_millis(50));
    config.too_large_wait = Duration::from_secs(30);
    let server = start_with(config).await;
    server.create(&pod("demo", "a")).unwrap();
    let next = server.resource_version() + 1;
    let mut x = Exchange::get(
        &server,
        &format!("/api/v1/namespaces/demo/pods?watch=1&allowWatchBookmarks=true&sendInitialEvents=true&resourceVersionMatch=NotOlderThan&resourceVersion={next}"),
    )
    .await;
    assert_eq!(x.status, 200);
    server.create(&pod("demo", "b")).unwrap();
    x.read_until("k8s.io/initial-events-end").await;
    let events = x.events();
    let types: Vec<&str> = events.iter().map(|e| e["type"].as_str().unwrap()).collect();
    assert_eq!(types, ["ADDED", "ADDED", "BOOKMARK"]);
    assert_eq!(
        events[2]["object"]["metadata"]["resourceVersion"],
        next.to_string()
    );
}

fn labelled_config_map(ns: &str, name: &str, app: &str) -> k8s_openapi::api::core::v1::ConfigMap {
    serde_json::from_value(json!({
        "metadata": {"name": name, "namespace": ns, "labels": {"app": app}},
    }))
    .unwrap()
}

#[tokio::test]
async fn deletecollection_deletes_what_the_selectors_select_and_answers_the_list() {
    let server = start().await;
    for (ns, name, app) in [
        ("demo", "a", "x"),
        ("demo", "b", "x"),
        ("demo", "c", "y"),
        ("other", "d", "x"),
    ] {
        server.create(&labelled_config_map(ns, name, app)).unwrap();
    }
    let x = Exchange::send(
        &server,
        "DELETE",
        "/api/v1/namespaces/demo/configmaps?labelSelector=app%3Dx",
        "application/json",
        "",
    )
    .await;
    assert_eq!(x.status, 200, "{}", x.text());
    let list = x.json();
    assert_eq!(list["kind"], "ConfigMapList");
    assert_eq!(list["apiVersion"], "v1");
    let names: Vec<&str> = list["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| i["metadata"]["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["a", "b"]);
    let left = |ns: &'static str| {
        let server = &server;
        async move {
            let list = Exchange::get(server, &format!("/api/v1/namespaces/{ns}/configmaps"))
                .await
                .json();
            list["items"]
                .as_array()
                .unwrap()
                .iter()
                .map(|i| i["metadata"]["name"].as_str().unwrap().to_owned())
                .collect::<Vec<_>>()
        }
    };
    assert_eq!(left("demo").await, ["c"]);
    assert_eq!(left("other").await, ["d"], "another namespace is untouched");

    let x = Exchange::send(
        &server,
        "DELETE",
        "/api/v1/namespaces/demo/configmaps?fieldSelector=metadata.name%3Dc",
        "application/json",
        "",
    )
    .await;
    assert_eq!(x.status, 200);
    assert!(left("demo").await.is_empty());
    // Not across namespaces: that path serves only list and watch.
    let x = Exchange::send(
        &server,
        "DELETE",
        "/api/v1/configmaps",
        "application/json",
        "",
    )
    .await;
    assert_status(&x, 405, "MethodNotAllowed");
    // A bad selector is a 400, as on a list.
    let x = Exchange::send(
        &server,
        "DELETE",
        "/api/v1/namespaces/other/configmaps?labelSelector=%3D%3D",
        "application/json",
        "",
    )
    .await;
    assert_status(&x, 400, "BadRequest");
    assert_eq!(left("other").await, ["d"]);
}

#[tokio::test]
async fn json_patch_strategic_merge_and_unsupported_patch_types() {
    let server = start().await;
    server
        .create(&config_map("demo", "cm", &["example.com/a"]))
        .unwrap();
    let path = "/api/v1/namespaces/demo/configmaps/cm";

    let ops = r#"[{"op":"add","path":"/data/extra","value":"1"},{"op":"replace","path":"/data/k","value":"w"}]"#;
    let x = Exchange::send(&server, "PATCH", path, "application/json-patch+json", ops).await;
    assert_eq!(x.status, 200, "{}", x.text());
    assert_eq!(x.json()["data"], json!({"k": "w", "extra": "1"}));
    // A failing operation is 422 with the server's fixed message.
    let x = Exchange::send(
        &server,
        "PATCH",
        path,
        "application/json-patch+json",
        r#"[{"op":"test","path":"/data/k","value":"nope"}]"#,
    )
    .await;
    assert_eq!(
        x.text(),
        "{\"apiVersion\":\"v1\",\"code\":422,\"details\":{},\"kind\":\"Status\",\"message\":\"the server rejected our request due to an error in our request\",\"metadata\":{},\"reason\":\"Invalid\",\"status\":\"Failure\"}"
    );
    // Not a patch document: 400.
    let x = Exchange::send(
        &server,
        "PATCH",
        path,
        "application/json-patch+json",
        r#"{"op":"add"}"#,
    )
    .await;
    assert_status(&x, 400, "BadRequest");
    // Removing the finalizer of a marked object with a JSON patch deletes it.
    Exchange::send(&server, "DELETE", path, "application/json", "").await;
    let x = Exchange::send(
        &server,
        "PATCH",
        path,
        "application/json-patch+json",
        r#"[{"op":"remove","path":"/metadata/finalizers/0"}]"#,
    )
    .await;
    assert_eq!(x.status, 200);
    assert_status(&Exchange::get(&server, path).await, 404, "NotFound");

    // Strategic merge: containers merge by name, a list without a merge key is replaced.
    let mut p = pod("demo", "web-0");
    p.spec
        .as_mut()
        .unwrap()
        .containers
        .push(serde_json::from_value(json!({"name": "side", "image": "s1"})).unwrap());
    server.create(&p).unwrap();
    let smp = r#"{"spec":{"containers":[{"name":"c","image":"nginx:2"}]}}"#;
    let x = Exchange::send(
        &server,
        "PATCH",
        "/api/v1/namespaces/demo/pods/web-0",
        "application/strategic-merge-patch+json",
        smp,
    )
    .await;
    assert_eq!(x.status, 200, "{}", x.text());
    assert_eq!(
        x.json()["spec"]["containers"],
        json!([{"name": "c", "image": "nginx:2"}, {"name": "side", "image": "s1"}])
    );

    // A patch type the server does not take: the 415 lists what is accepted, server-side
    // apply included.
    let x = Exchange::send(
        &server,
        "PATCH",
        "/api/v1/namespaces/demo/pods/web-0",
        "application/yaml",
        "metadata: {}",
    )
    .await;
    assert_eq!(
        x.text(),
        "{\"apiVersion\":\"v1\",\"code\":415,\"kind\":\"Status\",\"message\":\"the body of the request was in an unknown format - accepted media types include: application/json-patch+json, application/merge-patch+json, application/strategic-merge-patch+json, application/apply-patch+yaml\",\"metadata\":{},\"reason\":\"UnsupportedMediaType\",\"status\":\"Failure\"}"
    );
    // Custom resources take no strategic merge patch, as in kube-apiserver.
    server.register_info(ResourceInfo::custom(
        "example.com",
        "v1",
        "Widget",
        "widgets",
        true,
    ));
    server
        .create_value(
            &ResourceInfo::custom("example.com", "v1", "Widget", "widgets", true),
            json!({"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "w", "namespace": "demo"}}),
        )
        .unwrap();
    let x = Exchange::send(
        &server,
        "PATCH",
        "/apis/example.com/v1/namespaces/demo/widgets/w",
        "application/strategic-merge-patch+json",
        "{}",
    )
    .await;
    let status = assert_status(&x, 415, "UnsupportedMediaType");
    assert_eq!(
        status["message"],
        "the body of the request was in an unknown format - accepted media types include: application/json-patch+json, application/merge-patch+json, application/apply-patch+yaml"
    );
}

#[tokio::test]
async fn a_list_honours_the_timeout_parameter() {
    let mut config = Config::for_tests(Duration::from_millis(100));
    config.too_large_wait = Duration::from_secs(60);
    let server = start_with(config).await;
    let ahead = server.resource_version() + 100;
    let started = std::time::Instant::now();
    let x = Exchange::get(
        &server,
        &format!(
            "/api/v1/pods?resourceVersion={ahead}&resourceVersionMatch=NotOlderThan&timeout=500ms"
        ),
    )
    .await;
    assert!(
        started.elapsed() < Duration::from_secs(30),
        "cut by the timeout, not the 60 s wait"
    );
    assert_eq!(
        x.text(),
        "{\"apiVersion\":\"v1\",\"code\":504,\"details\":{},\"kind\":\"Status\",\"message\":\"Timeout: request did not complete within requested timeout - context deadline exceeded\",\"metadata\":{},\"reason\":\"Timeout\",\"status\":\"Failure\"}"
    );
    let x = Exchange::get(&server, "/api/v1/pods?timeout=10").await;
    let status = assert_status(&x, 400, "BadRequest");
    assert_eq!(
        status["message"],
        "invalid timeout specified in the request URL - time: missing unit in duration \"10\""
    );
    let x = Exchange::get(&server, "/api/v1/pods?timeout=abc").await;
    let status = assert_status(&x, 400, "BadRequest");
    assert_eq!(
        status["message"],
        "invalid timeout specified in the request URL - time: invalid duration \"abc\""
    );
    // A timeout long enough changes nothing.
    let x = Exchange::get(&server, "/api/v1/pods?timeout=1m30s").await;
    assert_eq!(x.status, 200);
}

/// Waits (within [`WAIT`]) until `cond` holds.
async fn wait_until(mut cond: impl FnMut() -> bool) {
    let deadline = tokio::time::Instant::now() + WAIT;
    while !cond() {
        assert!(
            tokio::time::Instant::now() < deadline,
            "condition not reached in time"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

const LEASES: &str = "/apis/coordination.k8s.io/v1/namespaces/kube-system/leases";

fn lease_body(name: &str, holder: &str) -> Value {
    json!({
        "apiVersion": "coordination.k8s.io/v1",
        "kind": "Lease",
        "metadata": {"name": name},
        "spec": {"holderIdentity": holder, "leaseDurationSeconds": 15},
    })
}

#[tokio::test]
async fn leases_are_discovered_and_written_as_kube_apiserver_does() {
    let server = start().await;
    let group = Exchange::get(&server, "/apis/coordination.k8s.io")
        .await
        .json();
    assert_eq!(group["kind"], "APIGroup");
    assert_eq!(
        group["preferredVersion"],
        json!({"groupVersion": "coordination.k8s.io/v1", "version": "v1"})
    );
    let resources = Exchange::get(&server, "/apis/coordination.k8s.io/v1")
        .await
        .json();
    let lease = &resources["resources"][0];
    assert_eq!(
        (&lease["name"], &lease["kind"], &lease["namespaced"]),
        (&json!("leases"), &json!("Lease"), &json!(true))
    );

    let lease_path = format!("{LEASES}/leader");
    let body = lease_body("leader", "a").to_string();
    let x = Exchange::send(&server, "POST", LEASES, "application/json", &body).await;
    assert_eq!(x.status, 201, "{}", x.text());
    let created = x.json();
    assert_eq!(created["apiVersion"], "coordination.k8s.io/v1");
    assert_eq!(created["metadata"]["namespace"], "kube-system");
    // The lease strategy sets no generation.
    assert!(created["metadata"].get("generation").is_none(), "{created}");
    let created_rv = created["metadata"]["resourceVersion"]
        .as_str()
        .unwrap()
        .to_owned();

    let x = Exchange::send(&server, "POST", LEASES, "application/json", &body).await;
    let status = assert_status(&x, 409, "AlreadyExists");
    assert_eq!(
        status["message"],
        "leases.coordination.k8s.io \"leader\" already exists"
    );

    // Renewed at the current resourceVersion: a new revision.
    let mut renewed = created.clone();
    renewed["spec"]["renewTime"] = json!("2026-01-01T00:00:00.000000Z");
    let x = Exchange::send(
        &server,
        "PUT",
        &lease_path,
        "application/json",
        &renewed.to_string(),
    )
    .await;
    assert_eq!(x.status, 200, "{}", x.text());
    let renewed_rv = x.json()["metadata"]["resourceVersion"]
        .as_str()
        .unwrap()
        .to_owned();
    assert!(renewed_rv.parse::<u64>().unwrap() > created_rv.parse::<u64>().unwrap());

    // At a stale one: 409 Conflict, byte for byte.
    let mut stale = created.clone();
    stale["spec"]["holderIdentity"] = json!("b");
    let x = Exchange::send(
        &server,
        "PUT",
        &lease_path,
        "application/json",
        &stale.to_string(),
    )
    .await;
    assert_status(&x, 409, "Conflict");
    assert_eq!(
        x.text(),
        "{\"apiVersion\":\"v1\",\"code\":409,\"details\":{\"group\":\"coordination.k8s.io\",\
         \"kind\":\"leases\",\"name\":\"leader\"},\"kind\":\"Status\",\"message\":\"Operation \
         cannot be fulfilled on leases.coordination.k8s.io \\\"leader\\\": the object has been \
         modified; please apply your changes to the latest version and try again\",\
         \"metadata\":{},\"reason\":\"Conflict\",\"status\":\"Failure\"}"
    );

    // Without one: leases refuse unconditional updates (422, qualified by the resource).
    let mut unconditional = renewed.clone();
    unconditional["metadata"]
        .as_object_mut()
        .unwrap()
        .remove("resourceVersion");
    let x = Exchange::send(
        &server,
        "PUT",
        &lease_path,
        "application/json",
        &unconditional.to_string(),
    )
    .await;
    assert_status(&x, 422, "Invalid");
    assert_eq!(
        x.text(),
        "{\"apiVersion\":\"v1\",\"code\":422,\"details\":{\"causes\":[{\"field\":\
         \"metadata.resourceVersion\",\"message\":\"Invalid value: 0x0: must be specified for \
         an update\",\"reason\":\"FieldValueInvalid\"}],\"group\":\"coordination.k8s.io\",\
         \"kind\":\"leases\",\"name\":\"leader\"},\"kind\":\"Status\",\"message\":\
         \"leases.coordination.k8s.io \\\"leader\\\" is invalid: metadata.resourceVersion: \
         Invalid value: 0x0: must be specified for an update\",\"metadata\":{},\"reason\":\
         \"Invalid\",\"status\":\"Failure\"}"
    );
    let stored = Exchange::get(&server, &lease_path).await.json();
    assert_eq!(stored["metadata"]["resourceVersion"], renewed_rv.as_str());
    assert_eq!(stored["spec"]["holderIdentity"], "a");

    // A PUT of a missing lease creates it (create on update), whatever resourceVersion it
    // carries.
    let mut standby = lease_body("standby", "c");
    standby["metadata"]["resourceVersion"] = json!("12345");
    let x = Exchange::send(
        &server,
        "PUT",
        &format!("{LEASES}/standby"),
        "application/json",
        &standby.to_string(),
    )
    .await;
    assert_eq!(x.status, 201, "{}", x.text());
    let standby = x.json();
    assert_eq!(
        standby["metadata"]["resourceVersion"],
        server.resource_version().to_string()
    );
    assert!(standby["metadata"]["uid"].is_string());
    assert!(standby["metadata"]["creationTimestamp"].is_string());

    // The lease's own validation.
    let mut invalid = lease_body("bad", "a");
    invalid["spec"]["leaseDurationSeconds"] = json!(0);
    let x = Exchange::send(
        &server,
        "POST",
        LEASES,
        "application/json",
        &invalid.to_string(),
    )
    .await;
    let status = assert_status(&x, 422, "Invalid");
    assert_eq!(
        status["message"],
        "Lease.coordination.k8s.io \"bad\" is invalid: spec.leaseDurationSeconds: Invalid value: 0: must be greater than 0"
    );
    assert_eq!(status["details"]["kind"], "Lease");
    assert_eq!(status["details"]["group"], "coordination.k8s.io");

    // A delete answers a Success Status naming the resource and its group.
    let x = Exchange::send(&server, "DELETE", &lease_path, "application/json", "").await;
    assert_eq!(x.status, 200);
    let status = x.json();
    assert_eq!(status["status"], "Success");
    assert_eq!(
        (&status["details"]["group"], &status["details"]["kind"]),
        (&json!("coordination.k8s.io"), &json!("leases"))
    );
    let x = Exchange::get(&server, &lease_path).await;
    let status = assert_status(&x, 404, "NotFound");
    assert_eq!(
        status["message"],
        "leases.coordination.k8s.io \"leader\" not found"
    );
}

#[tokio::test]
async fn an_isolated_client_is_failed_or_held_while_others_are_served() {
    let server = start().await;
    server.create(&pod("demo", "web-0")).unwrap();
    let faults = server.faults();
    let path = "/api/v1/namespaces/demo/pods/web-0";
    let as_a = [("Authorization", "Bearer token-a")];
    let as_b = [("Authorization", "Bearer token-b")];

    // Fail: the client's requests, discovery included, get the failure; others are served.
    faults.isolate("token-a", Isolation::Fail(Failure::unavailable()));
    let x = Exchange::receive(Exchange::open(&server, "GET", path, &as_a, "").await).await;
    assert_status(&x, 503, "ServiceUnavailable");
    let x = Exchange::receive(Exchange::open(&server, "GET", "/version", &as_a, "").await).await;
    assert_status(&x, 503, "ServiceUnavailable");
    let x = Exchange::receive(Exchange::open(&server, "GET", path, &as_b, "").await).await;
    assert_eq!(x.status, 200);
    let x = Exchange::get(&server, path).await;
    assert_eq!(
        x.status, 200,
        "a request without identity is never isolated"
    );

    // A client without a token is addressed by its User-Agent; with a token, by the token.
    faults.isolate("probe/1.0", Isolation::Fail(Failure::internal("isolated")));
    let x = Exchange::receive(
        Exchange::open(&server, "GET", path, &[("User-Agent", "probe/1.0")], "").await,
    )
    .await;
    assert_status(&x, 500, "InternalError");
    let x = Exchange::receive(
        Exchange::open(
            &server,
            "GET",
            path,
            &[
                ("User-Agent", "probe/1.0"),
                ("Authorization", "Bearer token-b"),
            ],
            "",
        )
        .await,
    )
    .await;
    assert_eq!(x.status, 200);

    // The open watch of a failing client is cut: no chunked terminator.
    faults.heal_all();
    let rv = server.resource_version();
    let mut watch = Exchange::receive(
        Exchange::open(
            &server,
            "GET",
            &format!("/api/v1/namespaces/demo/pods?watch=1&resourceVersion={rv}"),
            &as_a,
            "",
        )
        .await,
    )
    .await;
    assert_eq!(watch.status, 200);
    server.create(&pod("demo", "web-1")).unwrap();
    watch.read_until("web-1").await;
    faults.isolate("token-a", Isolation::Fail(Failure::unavailable()));
    watch.read_to_end().await;
    assert!(
        !watch.body().1,
        "a dropped watch has no terminator: {:?}",
        watch.raw
    );
    wait_until(|| server.open_watches() == 0).await;

    // Hang: the request is held, others go on; healed, it is served.
    faults.isolate("token-a", Isolation::Hang);
    let mut held = Exchange::open(&server, "GET", path, &as_a, "").await;
    wait_until(|| server.held_requests() == 1).await;
    let x = Exchange::receive(Exchange::open(&server, "GET", path, &as_b, "").await).await;
    assert_eq!(x.status, 200);
    let mut byte = [0u8; 1];
    assert!(
        tokio::time::timeout(STILL_PENDING, held.read(&mut byte))
            .await
            .is_err(),
        "a held request gets no answer"
    );
    faults.heal("token-a");
    let x = Exchange::receive(held).await;
    assert_eq!(x.status, 200);
    assert_eq!(x.json()["metadata"]["name"], "web-0");
    assert_eq!(server.held_requests(), 0);

    // Held, then failed: the held request gets the failure.
    faults.isolate("token-a", Isolation::Hang);
    let held = Exchange::open(&server, "GET", path, &as_a, "").await;
    wait_until(|| server.held_requests() == 1).await;
    faults.isolate("token-a", Isolation::Fail(Failure::throttled(3)));
    let x = Exchange::receive(held).await;
    assert_eq!(x.status, 429);
    assert_eq!(x.header("retry-after"), Some("3"));
}

/// A watcher that falls `watch_buffer` changes behind (here: held by a hang of its client while
/// 20 pods are created) is closed by default, and with `SlowWatcher::Block` gets everything it
/// missed, in order, and goes on.
#[tokio::test]
async fn a_slow_watcher_is_closed_or_waited_for() {
    for mode in [SlowWatcher::Close, SlowWatcher::Block] {
        let server = start_with(Config {
            watch_buffer: 4,
            slow_watcher: mode,
            ..Config::for_tests(Duration::from_secs(60))
        })
        .await;
        let as_a = [("Authorization", "Bearer token-a")];
        let path = "/api/v1/namespaces/demo/pods?watch=1&resourceVersion=1";
        let mut x = Exchange::receive(Exchange::open(&server, "GET", path, &as_a, "").await).await;
        server.create(&pod("demo", "first")).unwrap();
        x.read_until("first").await;
        server.faults().isolate("token-a", Isolation::Hang);
        let names: Vec<String> = (0..20).map(|i| format!("p{i:02}")).collect();
        for name in &names {
            server.create(&pod("demo", name)).unwrap();
        }
        server.faults().heal("token-a");
        let seen = |x: &Exchange| -> Vec<String> {
            x.events()
                .iter()
                .filter_map(|e| e["object"]["metadata"]["name"].as_str().map(str::to_owned))
                .filter(|name| name != "first")
                .collect()
        };
        match mode {
            SlowWatcher::Close => {
                assert!(x.read_to_end().await, "closed cleanly: {:?}", x.text());
                assert!(seen(&x).len() < names.len(), "{:?}", seen(&x));
            }
            SlowWatcher::Block => {
                x.read_until_events("every pod", |events| {
                    events
                        .iter()
                        .any(|e| e["object"]["metadata"]["name"] == "p19")
                })
                .await;
                assert_eq!(seen(&x), names);
                server.create(&pod("demo", "last")).unwrap();
                x.read_until("last").await;
            }
        }
        server.shutdown().await;
    }
}

/// Reads until the peer closes `stream` (cleanly or not); asserts that nothing came.
async fn assert_closed_unanswered(mut stream: TcpStream) {
    let mut rest = Vec::new();
    let _ = tokio::time::timeout(WAIT, stream.read_to_end(&mut rest))
        .await
        .expect("the held connection is closed");
    assert!(
        rest.is_empty(),
        "nothing is written to a dropped request: {:?}",
        String::from_utf8_lossy(&rest)
    );
}

#[tokio::test]
async fn a_restart_or_a_shutdown_drops_a_held_request_unanswered() {
    let server = start().await;
    server.faults().isolate("token-a", Isolation::Hang);
    let as_a = [("Authorization", "Bearer token-a")];
    let path = "/api/v1/namespaces/demo/pods";

    let held = Exchange::open(&server, "GET", path, &as_a, "").await;
    wait_until(|| server.held_requests() == 1).await;
    server.faults().restart();
    assert_closed_unanswered(held).await;
    wait_until(|| server.held_requests() == 0).await;

    // The client is still hung after the restart.
    let held = Exchange::open(&server, "GET", path, &as_a, "").await;
    wait_until(|| server.held_requests() == 1).await;
    tokio::time::timeout(WAIT, server.shutdown())
        .await
        .expect("the server stops with a request held");
    assert_closed_unanswered(held).await;
}

/// `PUT`'s version and uid rules, as the generic store applies them: `"0"` is no version at
/// all (unconditional where the type allows it), custom resources refuse unconditional
/// updates, and the body's `uid` is a precondition; a patch cannot change the `uid`.
#[tokio::test]
async fn a_put_reads_version_zero_as_none_and_its_uid_as_a_precondition() {
    let widgets = ResourceInfo::custom("example.com", "v1", "Widget", "widgets", true);
    let server =
        start_with(Config::for_tests(Duration::from_secs(60)).register_info(widgets.clone())).await;
    let put = |path: String, body: Value| {
        let server = &server;
        async move { Exchange::send(server, "PUT", &path, "application/json", &body.to_string()).await }
    };

    // A config map at version "0": an unconditional update, like one without a version.
    let path = "/api/v1/namespaces/demo/configmaps/c";
    let created = Exchange::send(
        &server,
        "POST",
        "/api/v1/namespaces/demo/configmaps",
        "application/json",
        &json!({"metadata": {"name": "c"}, "data": {"k": "1"}}).to_string(),
    )
    .await
    .json();
    let uid = created["metadata"]["uid"].as_str().unwrap().to_owned();
    let x = put(
        path.into(),
        json!({"metadata": {"name": "c", "resourceVersion": "0"}, "data": {"k": "2"}}),
    )
    .await;
    assert_eq!(x.status, 200, "{}", x.text());
    assert_eq!(x.json()["data"]["k"], "2");

    // Its own uid passes; another one is 409, and nothing is written.
    let x = put(
        path.into(),
        json!({"metadata": {"name": "c", "uid": uid}, "data": {"k": "3"}}),
    )
    .await;
    assert_eq!(x.status, 200, "{}", x.text());
    let x = put(
        path.into(),
        json!({"metadata": {"name": "c", "uid": "not-its-uid"}, "data": {"k": "4"}}),
    )
    .await;
    let status = assert_status(&x, 409, "Conflict");
    assert_eq!(
        status["message"],
        format!(
            "Operation cannot be fulfilled on configmaps \"c\": Precondition failed: UID in \
             precondition: not-its-uid, UID in object meta: {uid}"
        )
    );
    // The precondition comes before the version check: a stale version with a wrong uid is
    // about the uid.
    let x = put(
        path.into(),
        json!({"metadata": {"name": "c", "uid": "not-its-uid", "resourceVersion": "1"}}),
    )
    .await;
    assert!(
        assert_status(&x, 409, "Conflict")["message"]
            .as_str()
            .unwrap()
            .contains("UID in precondition")
    );
    let stored = Exchange::get(&server, path).await.json();
    assert_eq!(stored["data"]["k"], "3");
    assert_eq!(stored["metadata"]["uid"], uid.as_str());

    // A patch that changes the uid: the field is immutable.
    let x = Exchange::send(
        &server,
        "PATCH",
        path,
        "application/merge-patch+json",
        &json!({"metadata": {"uid": "not-its-uid"}}).to_string(),
    )
    .await;
    let status = assert_status(&x, 422, "Invalid");
    assert_eq!(
        status["message"],
        "ConfigMap \"c\" is invalid: metadata.uid: Invalid value: \"not-its-uid\": field is \
         immutable"
    );

    // A custom resource: without a version, or at "0", 422; at its version, 200.
    let widget_path = "/apis/example.com/v1/namespaces/demo/widgets/w";
    let created = server
        .create_value(
            &widgets,
            json!({"metadata": {"name": "w", "namespace": "demo"}, "size": 1}),
        )
        .unwrap();
    let rv = created["metadata"]["resourceVersion"]
        .as_str()
        .unwrap()
        .to_owned();
    for version in [None, Some("0")] {
        let mut body = json!({"apiVersion": "example.com/v1", "kind": "Widget",
                              "metadata": {"name": "w"}, "size": 2});
        if let Some(v) = version {
            body["metadata"]["resourceVersion"] = json!(v);
        }
        let x = put(widget_path.into(), body).await;
        let status = assert_status(&x, 422, "Invalid");
        assert_eq!(
            status["message"],
            "widgets.example.com \"w\" is invalid: metadata.resourceVersion: Invalid value: 0x0: \
             must be specified for an update",
            "{version:?}"
        );
    }
    let x = put(
        widget_path.into(),
        json!({"apiVersion": "example.com/v1", "kind": "Widget",
               "metadata": {"name": "w", "resourceVersion": rv}, "size": 2}),
    )
    .await;
    assert_eq!(x.status, 200, "{}", x.text());
    assert_eq!(x.json()["size"], 2);
}

/// With `opaque_resource_versions`, every resource version the server writes is `x` and hex —
/// objects, lists, watch events, bookmarks, errors — and requests must name those strings.
#[tokio::test]
async fn opaque_resource_versions_are_written_everywhere_and_required_back() {
    let server = start_with(Config {
        opaque_resource_versions: true,
        initial_resource_version: 30,
        ..Config::for_tests(Duration::from_millis(100))
    })
    .await;
    let pods = "/api/v1/namespaces/demo/pods";
    let created = Exchange::send(
        &server,
        "POST",
        pods,
        "application/json",
        &json!({"metadata": {"name": "a"}, "spec": {"containers": []}}).to_string(),
    )
    .await
    .json();
    let rv = created["metadata"]["resourceVersion"]
        .as_str()
        .unwrap()
        .to_owned();
    assert_eq!(rv, "x1f", "revision 31");
    let list = Exchange::get(&server, pods).await.json();
    assert_eq!(list["metadata"]["resourceVersion"], "x1f");
    assert_eq!(list["items"][0]["metadata"]["resourceVersion"], "x1f");

    // A watch from that version sees the next change, at the next version, and bookmarks.
    let mut watch = Exchange::get(
        &server,
        &format!("{pods}?watch=1&resourceVersion={rv}&allowWatchBookmarks=true"),
    )
    .await;
    // A replace at the version it read.
    let mut updated = created.clone();
    updated["metadata"]["labels"] = json!({"v": "2"});
    let x = Exchange::send(
        &server,
        "PUT",
        &format!("{pods}/a"),
        "application/json",
        &updated.to_string(),
    )
    .await;
    assert_eq!(x.status, 200, "{}", x.text());
    assert_eq!(x.json()["metadata"]["resourceVersion"], "x20");
    watch.read_until("BOOKMARK").await;
    let events = watch.events();
    assert_eq!(events[0]["type"], "MODIFIED");
    assert_eq!(events[0]["object"]["metadata"]["resourceVersion"], "x20");
    let bookmark = events.iter().find(|e| e["type"] == "BOOKMARK").unwrap();
    assert!(
        bookmark["object"]["metadata"]["resourceVersion"]
            .as_str()
            .unwrap()
            .starts_with('x')
    );

    // A decimal version is none this server wrote: 400. "0" keeps its meaning.
    let x = Exchange::get(&server, &format!("{pods}?resourceVersion=32")).await;
    assert_status(&x, 400, "BadRequest");
    let x = Exchange::get(&server, &format!("{pods}?resourceVersion=0")).await;
    assert_eq!(x.status, 200);

    // Compacted: the 410 names the versions as the server writes them.
    server.faults().compact_all();
    let x = Exchange::get(&server, &format!("{pods}?watch=1&resourceVersion={rv}")).await;
    let status = x
        .events()
        .into_iter()
        .find(|e| e["type"] == "ERROR")
        .map(|e| e["object"].clone())
        .unwrap_or_else(|| x.json());
    assert_eq!(status["code"], 410, "{status}");
    assert_eq!(status["message"], "too old resource version: x1f (x20)");
}
