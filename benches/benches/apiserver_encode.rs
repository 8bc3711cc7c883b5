//! The API server simulator's encoders, without HTTP: a pod, a watch event and a list as JSON,
//! and in the protobuf encoding by the direct encoder the simulator uses and by the reflective
//! one (`prost_reflect::DynamicMessage`) it replaced. For the synthetic pod of the workloads and
//! the realistic one of `fixtures/pod-realistic.json`.
//!
//! `json` serialises the object's `serde_json::Value`; `json-joined` is what the simulator does
//! for a JSON list, which joins bodies it serialised when the objects were stored; the protobuf
//! rows encode the `Value`; `protobuf-reparsed` is what the simulator did for a protobuf list
//! before it kept each object's message: the JSON list read back into a `Value`, then encoded.
//! The `served-list` group asks a running simulator for the whole list over loopback HTTP, in
//! JSON and in protobuf (from the objects' cached messages once the first protobuf list has
//! written them); `served-watch` reads a streaming list's initial events the same way, to its
//! end bookmark: per watch event as served.

use std::hint::black_box;
use std::net::SocketAddr;
use std::time::Instant;

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use informer_apiserver::{
    ApiServer, Config, encode_protobuf, encode_protobuf_reflect, protobuf_watch_frame,
    protobuf_watch_frame_reflect,
};
use informer_benches::decode::list_body;
use informer_benches::realistic::realistic_pod;
use informer_benches::workload::pod;
use k8s_openapi::api::core::v1::Pod;
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// Pods per list: the synthetic pod is small, the realistic one about 6 KiB of JSON.
const SYNTHETIC_LIST: usize = 50_000;
const REALISTIC_LIST: usize = 10_000;

/// A list to measure: its name, how to make item `i`, and how many items.
type ListOf<T> = (&'static str, fn(usize) -> T, usize);

fn synthetic(i: usize) -> Value {
    serde_json::to_value(pod(i)).expect("a pod serializes")
}

fn realistic(i: usize) -> Value {
    serde_json::to_value(realistic_pod(i)).expect("a pod serializes")
}

/// `{"type":"MODIFIED","object":..}\n`, as the simulator writes a watch event.
fn json_event(object: &Value) -> Vec<u8> {
    let mut line = br#"{"type":"MODIFIED","object":"#.to_vec();
    serde_json::to_writer(&mut line, object).expect("a value serializes");
    line.extend_from_slice(b"}\n");
    line
}

fn object(c: &mut Criterion) {
    let mut g = c.benchmark_group("apiserver-encode/object");
    for (name, value) in [("synthetic", synthetic(0)), ("realistic", realistic(0))] {
        g.bench_function(BenchmarkId::new("json", name), |b| {
            b.iter(|| serde_json::to_vec(black_box(&value)).expect("JSON"));
        });
        g.bench_function(BenchmarkId::new("protobuf-reflect", name), |b| {
            b.iter(|| encode_protobuf_reflect(black_box(&value)).expect("a pod"));
        });
        g.bench_function(BenchmarkId::new("protobuf-direct", name), |b| {
            b.iter(|| encode_protobuf(black_box(&value)).expect("a pod"));
        });
    }
    g.finish();
}

fn watch_event(c: &mut Criterion) {
    let mut g = c.benchmark_group("apiserver-encode/watch-event");
    for (name, value) in [("synthetic", synthetic(0)), ("realistic", realistic(0))] {
        g.bench_function(BenchmarkId::new("json", name), |b| {
            b.iter(|| json_event(black_box(&value)));
        });
        g.bench_function(BenchmarkId::new("protobuf-reflect", name), |b| {
            b.iter(|| protobuf_watch_frame_reflect("MODIFIED", black_box(&value)).expect("a pod"));
        });
        g.bench_function(BenchmarkId::new("protobuf-direct", name), |b| {
            b.iter(|| protobuf_watch_frame("MODIFIED", black_box(&value)).expect("a pod"));
        });
    }
    g.finish();
}

fn list(c: &mut Criterion) {
    let mut g = c.benchmark_group("apiserver-encode/list");
    g.sample_size(10);
    let lists: [ListOf<Value>; 2] = [
        ("synthetic-50k", synthetic, SYNTHETIC_LIST),
        ("realistic-10k", realistic, REALISTIC_LIST),
    ];
    for (name, make, n) in lists {
        let items: Vec<Value> = (0..n).map(make).collect();
        let bodies: Vec<Vec<u8>> = items
            .iter()
            .map(|v| serde_json::to_vec(v).expect("JSON"))
            .collect();
        let json_list = list_body(&bodies);
        let value = json!({
            "apiVersion": "v1", "kind": "PodList",
            "metadata": {"resourceVersion": "1"},
            "items": items,
        });
        g.throughput(Throughput::Elements(n as u64));
        g.bench_function(BenchmarkId::new("json", name), |b| {
            b.iter(|| serde_json::to_vec(black_box(&value)).expect("JSON"));
        });
        g.bench_function(BenchmarkId::new("json-joined", name), |b| {
            b.iter(|| list_body(black_box(&bodies)));
        });
        g.bench_function(BenchmarkId::new("protobuf-reflect", name), |b| {
            b.iter(|| encode_protobuf_reflect(black_box(&value)).expect("a list"));
        });
        g.bench_function(BenchmarkId::new("protobuf-direct", name), |b| {
            b.iter(|| encode_protobuf(black_box(&value)).expect("a list"));
        });
        g.bench_function(BenchmarkId::new("protobuf-reparsed", name), |b| {
            b.iter(|| {
                let value: Value = serde_json::from_slice(black_box(&json_list)).expect("JSON");
                encode_protobuf(&value).expect("a list")
            });
        });
    }
    g.finish();
}

/// A GET of `path` with `accept`, read to the end (the server closes): the bytes read.
async fn get_all(addr: SocketAddr, path: &str, accept: &str) -> usize {
    let mut stream = TcpStream::connect(addr).await.expect("connect");
    let request =
        format!("GET {path} HTTP/1.1\r\nHost: b\r\nAccept: {accept}\r\nConnection: close\r\n\r\n");
    stream.write_all(request.as_bytes()).await.expect("send");
    let mut out = Vec::with_capacity(1 << 24);
    stream.read_to_end(&mut out).await.expect("read");
    assert!(out.starts_with(b"HTTP/1.1 200"), "a list");
    out.len()
}

fn served_list(c: &mut Criterion) {
    served(c, "apiserver-encode/served-list", |addr, accept| {
        get_all(addr, "/api/v1/pods", accept)
    });
}

/// Each list (synthetic and realistic pods) served by a simulator over loopback HTTP, in JSON
/// and in protobuf: `fetch` reads it once (the first time alone, which for protobuf writes every
/// object's message, printed), then per iteration.
fn served<F, Fut>(c: &mut Criterion, group: &str, fetch: F)
where
    F: Fn(SocketAddr, &'static str) -> Fut,
    Fut: std::future::Future<Output = usize>,
{
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("a runtime");
    let mut g = c.benchmark_group(group);
    g.sample_size(10);
    let lists: [ListOf<Pod>; 2] = [
        ("synthetic-50k", pod, SYNTHETIC_LIST),
        ("realistic-10k", realistic_pod, REALISTIC_LIST),
    ];
    for (name, make, n) in lists {
        let server = rt.block_on(filled(make, n));
        for (accept, label) in [
            ("application/json", "json"),
            ("application/vnd.kubernetes.protobuf", "protobuf"),
        ] {
            let started = Instant::now();
            rt.block_on(fetch(server.addr(), accept));
            eprintln!("{group} {name} {label}: first {:?}", started.elapsed());
            g.throughput(Throughput::Elements(n as u64));
            g.bench_function(BenchmarkId::new(label, name), |b| {
                b.iter(|| rt.block_on(fetch(server.addr(), accept)));
            });
        }
    }
    g.finish();
}

/// The initial events of a streaming list of every pod (a watch with `sendInitialEvents`),
/// read until the end bookmark: the bytes read. The connection is dropped after it.
async fn stream_initial(addr: SocketAddr, accept: &str) -> usize {
    const MARK: &[u8] = b"initial-events-end";
    let path = "/api/v1/pods?watch=true&sendInitialEvents=true&allowWatchBookmarks=true\
                &resourceVersionMatch=NotOlderThan";
    let mut stream = TcpStream::connect(addr).await.expect("connect");
    let request = format!("GET {path} HTTP/1.1\r\nHost: b\r\nAccept: {accept}\r\n\r\n");
    stream.write_all(request.as_bytes()).await.expect("send");
    let mut buffer = vec![0u8; 1 << 20];
    let (mut read, mut tail) = (0, Vec::new());
    loop {
        let n = stream.read(&mut buffer).await.expect("read");
        assert!(n > 0, "the stream ended before its end bookmark");
        read += n;
        // The mark may straddle two reads: look in the end of the last one and this one.
        tail.extend_from_slice(&buffer[..n]);
        if tail.windows(MARK.len()).any(|w| w == MARK) {
            return read;
        }
        tail.drain(..tail.len().saturating_sub(MARK.len()));
    }
}

/// Per watch event as served: a streaming list's initial events over loopback HTTP, in JSON
/// and in protobuf (frames written from the objects' cached messages).
fn served_watch(c: &mut Criterion) {
    served(c, "apiserver-encode/served-watch", stream_initial);
}

/// A simulator holding pods `0..n` made by `make`.
async fn filled(make: fn(usize) -> Pod, n: usize) -> ApiServer {
    let server = ApiServer::start(Config::default().with_core_types())
        .await
        .expect("server starts");
    for i in 0..n {
        let mut p = make(i);
        p.metadata.resource_version = None;
        server.create(&p).expect("create");
    }
    server
}

criterion_group!(
    benches,
    object,
    watch_event,
    list,
    served_list,
    served_watch
);
criterion_main!(benches);
