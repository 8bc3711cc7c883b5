//! Metrics and health over HTTP: a factory's informers (pods and configmaps, against the
//! simulator) with every metric in one registry, served as `/metrics` (OpenMetrics text),
//! `/readyz` and `/livez`.
//!
//! ```sh
//! cargo run --example metrics_server                # serves on 127.0.0.1:9090 until Ctrl-C
//! curl -s localhost:9090/metrics | grep informer_cache_objects
//! cargo run --example metrics_server -- --check     # scrapes itself once, checks, exits
//! ```

use std::time::Duration;

use informers::apiserver::{ApiServer, Config};
use informers::k8s_openapi::api::core::v1::{ConfigMap, Pod};
use informers::kube_client;
use informers::metrics::{Endpoints, Metrics};
use informers::prelude::*;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

type BoxError = Box<dyn std::error::Error + Send + Sync>;

#[tokio::main]
async fn main() -> Result<(), BoxError> {
    let check = std::env::args().any(|a| a == "--check");
    let server = ApiServer::start(Config::default().with_core_types()).await?;
    for i in 0..20 {
        let mut cm = ConfigMap::default();
        cm.metadata.name = Some(format!("cm-{i}"));
        cm.metadata.namespace = Some("default".into());
        server.create(&cm)?;
    }

    // The metrics: every reflector observed, every informer read at each scrape.
    let metrics = Metrics::new();
    let client = kube_client::Client::try_from(kube_client::Config::new(server.url().parse()?))?;
    let factory = KubeInformerFactory::new(KubeSource::new(client))
        .with_reflector_observers(metrics.reflector_observers());
    metrics.watch_factory(&factory);
    factory.informer::<Pod>();
    factory.informer::<ConfigMap>();
    factory.start()?;

    let app = Endpoints::new(metrics).with_factory(&factory).router();
    let listener = tokio::net::TcpListener::bind(if check {
        "127.0.0.1:0"
    } else {
        "127.0.0.1:9090"
    })
    .await?;
    let addr = listener.local_addr()?;
    let serving = tokio::spawn(async move { axum::serve(listener, app).await });
    println!("serving http://{addr}/metrics, /readyz and /livez");

    if check {
        // Ready once synced; then one scrape, checked.
        let ready = tokio::time::timeout(Duration::from_secs(30), async {
            while get(addr, "/readyz").await?.0 != 200 {
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            Ok::<_, BoxError>(())
        })
        .await;
        ready.map_err(|_| "not ready within 30 s")??;
        let (status, body) = get(addr, "/metrics").await?;
        let objects = "informer_cache_objects{informer=\"ConfigMap(all)\"} 20";
        if status != 200 || !body.contains(objects) || !body.ends_with("# EOF\n") {
            return Err(format!("unexpected scrape ({status}):\n{body}").into());
        }
        println!("CHECK PASSED: ready, and the scrape shows {objects}");
    } else {
        tokio::signal::ctrl_c().await?;
    }
    serving.abort();
    factory.shutdown().await?;
    server.shutdown().await;
    Ok(())
}

/// `GET path`: the status code and the body.
async fn get(addr: std::net::SocketAddr, path: &str) -> Result<(u16, String), BoxError> {
    let mut stream = tokio::net::TcpStream::connect(addr).await?;
    let request = format!("GET {path} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n");
    stream.write_all(request.as_bytes()).await?;
    let mut response = String::new();
    stream.read_to_string(&mut response).await?;
    let (head, body) = response.split_once("\r\n\r\n").ok_or("no body")?;
    let status = head.split(' ').nth(1).ok_or("no status")?.parse()?;
    Ok((status, body.to_owned()))
}
