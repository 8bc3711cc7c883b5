//! The HTTP endpoints: `/metrics` serves OpenMetrics text over a factory's informers, `/readyz`
//! turns 200 once they have synced, `/livez` turns 503 when one stops.

use std::sync::Arc;
use std::time::Duration;

use informer_factory::{ListerWatcherSource, Selection, SharedInformerFactory};
use informer_metrics::{Endpoints, Metrics, OPENMETRICS};
use informer_reflector::{FakeListerWatcher, ListPage};
use informer_store::{FnIdentity, SharedIdentity, key_func};
use informer_testing::eventually;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::common;
use common::assert_openmetrics;

/// Strings, from a scripted source.
struct Words {
    source: Arc<FakeListerWatcher<String>>,
}

impl ListerWatcherSource<String> for Words {
    type Object = String;
    type ListerWatcher = Arc<FakeListerWatcher<String>>;
    fn lister_watcher(&self, _: &Selection) -> Self::ListerWatcher {
        Arc::clone(&self.source)
    }
    fn identity(&self) -> SharedIdentity<String> {
        Arc::new(FnIdentity::new(key_func(|s: &String| Ok(s.clone()))))
    }
}

/// `GET path` over a fresh connection: the status code, the headers and the body.
async fn get(addr: std::net::SocketAddr, path: &str) -> (u16, String, String) {
    let mut stream = tokio::net::TcpStream::connect(addr).await.expect("connect");
    let request = format!("GET {path} HTTP/1.1\r\nHost: test\r\nConnection: close\r\n\r\n");
    stream.write_all(request.as_bytes()).await.expect("write");
    let mut response = String::new();
    stream.read_to_string(&mut response).await.expect("read");
    let (head, body) = response.split_once("\r\n\r\n").expect("a head and a body");
    let status = head
        .split(' ')
        .nth(1)
        .expect("a status")
        .parse()
        .expect("a code");
    (status, head.to_owned(), body.to_owned())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_readyz_and_livez_report_the_factory() {
    let source = Arc::new(FakeListerWatcher::<String>::new());
    let metrics = Metrics::new();
    let factory = SharedInformerFactory::new(Words {
        source: Arc::clone(&source),
    })
    .with_reflector_observers(metrics.reflector_observers());
    metrics.watch_factory(&factory);
    let informer = factory.informer::<String>();

    let app = Endpoints::new(metrics.clone())
        .with_factory(&factory)
        .router();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = listener.local_addr().expect("an address");
    let server = tokio::spawn(async move { axum::serve(listener, app).await });

    // Not started, so not synced: not ready, but live.
    let (status, _, body) = get(addr, "/readyz").await;
    assert_eq!(status, 503, "{body}");
    assert!(body.contains("not synced"), "{body}");
    assert_eq!(get(addr, "/livez").await.0, 200);

    source.push_list(ListPage::new(
        vec![Arc::new("a".into()), Arc::new("b".into())],
        "3",
    ));
    factory.start().expect("started");
    eventually("synced", || informer.has_synced()).await;
    let (status, _, body) = get(addr, "/readyz").await;
    assert_eq!(status, 200, "{body}");
    assert!(body.starts_with("ok\n"), "{body}");

    let (status, head, body) = get(addr, "/metrics").await;
    assert_eq!(status, 200);
    assert!(
        head.to_ascii_lowercase()
            .contains(&format!("content-type: {OPENMETRICS}")),
        "{head}"
    );
    assert!(
        body.contains("informer_cache_objects{informer=\"String(all)\"} 2"),
        "{body}"
    );
    assert!(
        body.contains("informer_reflector_lists_total{informer=\"String(all)\",reason=\"initial\",streaming=\"false\",result=\"ok\"} 1"),
        "{body}"
    );
    assert_openmetrics(&body);

    // Stopped: no longer live.
    factory.shutdown().await.expect("shut down");
    let (status, _, body) = get(addr, "/livez").await;
    assert_eq!(status, 503);
    assert!(body.contains("stopped"), "{body}");
    server.abort();
    let _ = tokio::time::timeout(Duration::from_secs(5), server).await;
}
