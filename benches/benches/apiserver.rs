//! The API server simulator: serving a list of 100,000 pods, and streaming watch events to one
//! watcher on loopback.
//!
//! The client side is a raw HTTP/1.1 reader that only counts bytes and event ends, so the
//! figures are the server's (storage walk, serialisation, chunked writes) plus loopback.

use std::time::{Duration, Instant};

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use informer_apiserver::{ApiServer, Config};
use informer_benches::workload::pod;
use k8s_openapi::api::core::v1::Pod;
use serde_json::json;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::runtime::Runtime;

const N: usize = 100_000;

fn runtime() -> Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("a runtime")
}

/// A server holding `N` pods, with room in the history and in the watch buffer for `N` more
/// changes.
async fn server_with_pods() -> ApiServer {
    let server = ApiServer::start(Config {
        history_size: 2 * N + 10,
        watch_buffer: 2 * N,
        ..Config::default().with_core_types()
    })
    .await
    .expect("server starts");
    for i in 0..N {
        let mut p = pod(i);
        p.metadata.resource_version = None;
        server.create(&p).expect("create");
    }
    server
}

/// Sends a GET and reads the whole response (the server closes it); returns the bytes read.
async fn get_all(server: &ApiServer, path: &str) -> Vec<u8> {
    let mut stream = TcpStream::connect(server.addr()).await.expect("connect");
    let request = format!(
        "GET {path} HTTP/1.1\r\nHost: b\r\nAccept: application/json\r\nConnection: close\r\n\r\n"
    );
    stream.write_all(request.as_bytes()).await.expect("send");
    let mut out = Vec::with_capacity(1 << 20);
    stream.read_to_end(&mut out).await.expect("read");
    out
}

/// Opens a watch and reads until `events` event lines have arrived.
async fn watch_count(server: &ApiServer, path: &str, events: usize) {
    let mut stream = TcpStream::connect(server.addr()).await.expect("connect");
    let request = format!("GET {path} HTTP/1.1\r\nHost: b\r\nAccept: application/json\r\n\r\n");
    stream.write_all(request.as_bytes()).await.expect("send");
    let mut buf = vec![0u8; 1 << 20];
    let mut seen = 0;
    let mut prev = 0u8;
    while seen < events {
        let n = stream.read(&mut buf).await.expect("read");
        assert!(n > 0, "watch ended after {seen} events");
        for &b in &buf[..n] {
            // Events end with `}\n`; chunk framing uses `\r\n`.
            if b == b'\n' && prev == b'}' {
                seen += 1;
            }
            prev = b;
        }
    }
}

fn list(c: &mut Criterion) {
    let rt = runtime();
    let server = rt.block_on(server_with_pods());
    let mut g = c.benchmark_group("apiserver/list");
    g.sample_size(10);
    g.throughput(Throughput::Elements(N as u64));
    g.bench_function("100k-pods-one-response", |b| {
        b.iter(|| {
            let body = rt.block_on(get_all(&server, "/api/v1/pods"));
            assert!(body.len() > N * 200);
        });
    });
    g.bench_function("100k-pods-pages-of-500", |b| {
        b.iter(|| {
            rt.block_on(async {
                let mut path = "/api/v1/pods?limit=500".to_owned();
                let mut pages = 0;
                loop {
                    let body = get_all(&server, &path).await;
                    pages += 1;
                    let text = String::from_utf8_lossy(&body[..body.len().min(4096)]);
                    let Some(start) = text.find("\"continue\":\"") else {
                        break;
                    };
                    let rest = &text[start + 12..];
                    let token = &rest[..rest.find('"').expect("token end")];
                    path = format!("/api/v1/pods?limit=500&continue={token}");
                }
                assert_eq!(pages, N / 500);
            });
        });
    });
    g.finish();
}

fn watch(c: &mut Criterion) {
    let rt = runtime();
    let server = rt.block_on(server_with_pods());
    let mut g = c.benchmark_group("apiserver/watch");
    g.sample_size(10);
    g.throughput(Throughput::Elements(N as u64));

    // Replaying history: the N creates, from the revision before them.
    g.bench_function("100k-events-from-history", |b| {
        b.iter(|| {
            rt.block_on(watch_count(
                &server,
                "/api/v1/pods?watch=1&resourceVersion=1",
                N,
            ));
        });
    });

    // Live: the watcher is open; N updates are written from Rust as fast as possible.
    g.bench_function("100k-live-updates", |b| {
        b.iter_custom(|iters| {
            let mut total = Duration::ZERO;
            for _ in 0..iters {
                total += rt.block_on(async {
                    let rv = server.resource_version();
                    // A label value no earlier round used: every patch is a real change.
                    let round = rv.to_string();
                    let path = format!("/api/v1/pods?watch=1&resourceVersion={rv}");
                    let started = Instant::now();
                    let reader = watch_count(&server, &path, N);
                    let writer = async {
                        for i in 0..N {
                            let ns = format!("ns-{}", i % 100);
                            let patch = json!({"metadata": {"labels": {"round": round.as_str()}}});
                            server
                                .patch::<Pod>(Some(&ns), &format!("pod-{i}"), &patch)
                                .expect("patch");
                        }
                    };
                    tokio::join!(reader, writer);
                    started.elapsed()
                });
            }
            total
        });
    });
    g.finish();
}

criterion_group!(benches, list, watch);
criterion_main!(benches);
