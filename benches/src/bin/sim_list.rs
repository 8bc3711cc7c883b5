//! The simulator's list path alone: the W-HTTP server (50,000 pods, the history of their
//! creates kept), listed in pages of 500, a few rounds over; prints milliseconds per page.
//!
//! `sim_list [raw|kube|both] [rounds]`
//!
//! * `raw`: one HTTP/1.1 connection kept alive, each response read whole and only scanned for
//!   its continue token, so the figure is the server's (plus loopback);
//! * `kube`: `Api::<Pod>::all(client).list(..)` with `limit(500)` and the continue token, so
//!   the figure adds kube-client's decoding of every page into typed pods.

use std::time::{Duration, Instant};

use informer_apiserver::{ApiServer, Config};
use informer_benches::workload::pod;
use k8s_openapi::api::core::v1::Pod;
use kube::Api;
use kube::api::ListParams;
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::TcpStream;

const LISTED: usize = 50_000;
const EVENTS: usize = 100_000;
const PAGE: usize = 500;

/// The server of W-HTTP (`w_http::server`): the listed pods, room in the history for the events.
async fn server() -> ApiServer {
    let config = Config {
        history_size: 2 * (LISTED + EVENTS),
        watch_buffer: 2 * EVENTS,
        ..Config::default().register::<Pod>()
    };
    let server = ApiServer::start(config).await.expect("server starts");
    for i in 0..LISTED {
        let mut p = pod(i);
        p.metadata.resource_version = None;
        server.create(&p).expect("create");
    }
    server
}

/// Reads one `Content-Length` or chunked HTTP/1.1 response body.
async fn read_response(reader: &mut BufReader<TcpStream>, body: &mut Vec<u8>) {
    body.clear();
    let mut line = String::new();
    let mut length: Option<usize> = None;
    let mut chunked = false;
    loop {
        line.clear();
        reader.read_line(&mut line).await.expect("header line");
        let header = line.trim_end();
        if header.is_empty() {
            break;
        }
        let lower = header.to_ascii_lowercase();
        if let Some(v) = lower.strip_prefix("content-length:") {
            length = v.trim().parse().ok();
        } else if lower.starts_with("transfer-encoding:") && lower.contains("chunked") {
            chunked = true;
        }
    }
    if let Some(n) = length.filter(|_| !chunked) {
        body.resize(n, 0);
        reader.read_exact(body).await.expect("body");
        return;
    }
    loop {
        line.clear();
        reader.read_line(&mut line).await.expect("chunk size");
        let size = usize::from_str_radix(line.trim_end(), 16).expect("chunk size");
        let at = body.len();
        body.resize(at + size + 2, 0);
        reader.read_exact(&mut body[at..]).await.expect("chunk");
        body.truncate(at + size);
        if size == 0 {
            break;
        }
    }
}

/// The continue token at the start of a list body, if any.
fn continue_token(body: &[u8]) -> Option<String> {
    let head = String::from_utf8_lossy(&body[..body.len().min(4096)]);
    let start = head.find("\"continue\":\"")? + 12;
    let rest = &head[start..];
    Some(rest[..rest.find('"')?].to_owned())
}

/// Lists every pod over one kept-alive connection; returns the pages.
async fn list_raw(server: &ApiServer) -> usize {
    let stream = TcpStream::connect(server.addr()).await.expect("connect");
    stream.set_nodelay(true).expect("nodelay");
    let mut reader = BufReader::with_capacity(1 << 20, stream);
    let mut body = Vec::with_capacity(1 << 20);
    let mut token: Option<String> = None;
    let mut pages = 0;
    loop {
        let path = match &token {
            None => format!("/api/v1/pods?limit={PAGE}"),
            Some(t) => format!("/api/v1/pods?limit={PAGE}&continue={t}"),
        };
        let request =
            format!("GET {path} HTTP/1.1\r\nHost: sim\r\nAccept: application/json\r\n\r\n");
        reader
            .get_mut()
            .write_all(request.as_bytes())
            .await
            .expect("send");
        read_response(&mut reader, &mut body).await;
        pages += 1;
        token = continue_token(&body);
        if token.is_none() {
            break;
        }
    }
    pages
}

/// Lists every pod through kube-client; returns the pages.
async fn list_kube(api: &Api<Pod>) -> usize {
    let mut params = ListParams::default().limit(PAGE as u32);
    let mut pages = 0;
    let mut items = 0;
    loop {
        let list = api.list(&params).await.expect("list");
        pages += 1;
        items += list.items.len();
        match list.metadata.continue_.filter(|t| !t.is_empty()) {
            Some(token) => params = params.continue_token(&token),
            None => break,
        }
    }
    assert_eq!(items, LISTED);
    pages
}

fn report(what: &str, elapsed: Duration, pages: usize) {
    assert_eq!(pages, LISTED / PAGE);
    println!(
        "{what}: {pages} pages in {:.1} ms, {:.3} ms per page",
        elapsed.as_secs_f64() * 1e3,
        elapsed.as_secs_f64() * 1e3 / pages as f64
    );
}

fn main() {
    let mut args = std::env::args().skip(1);
    let mode = args.next().unwrap_or_else(|| "both".into());
    let rounds: usize = args.next().and_then(|n| n.parse().ok()).unwrap_or(5);
    let rt = informer_benches::w_inf::runtime();
    rt.block_on(async {
        let server = server().await;
        let client =
            kube::Client::try_from(kube::Config::new(server.url().parse().expect("server URL")))
                .expect("client");
        let api = Api::<Pod>::all(client);
        for _ in 0..rounds {
            if mode == "raw" || mode == "both" {
                let started = Instant::now();
                let pages = list_raw(&server).await;
                report("raw HTTP", started.elapsed(), pages);
            }
            if mode == "kube" || mode == "both" {
                let started = Instant::now();
                let pages = list_kube(&api).await;
                report("kube-client", started.elapsed(), pages);
            }
        }
        server.shutdown().await;
    });
}
