//! SYNC: list-and-sync as users run it. The simulator serves its pods from a process of its own
//! (`sync_server`), and each client is a fresh process (`sync_client`): the time from starting
//! the client to a synced cache, and the process's resident set after sync over before it.
//!
//! * [`Shape`]: 10,000 realistic pods (`benches/fixtures/pod-realistic.json`, renamed) or
//!   50,000 small pods (the workloads' pod: one container, three labels);
//! * [`Side`]: ours as the factory builds it by default (protobuf, managed fields left out by
//!   the decoder), ours reading JSON, ours keeping managed fields, and kube-runtime's
//!   `watcher` into a `reflector` store (JSON, managed fields kept: its default);
//! * [`Mode`]: a list in pages of 500 then a watch, or a streaming list (`sendInitialEvents`);
//! * [`Transport`]: HTTP/1.1 as kube-client sends it by default, HTTP/1.1 asking for gzip, or
//!   HTTP/2 with prior knowledge (h2c); the server may also be given a bandwidth limit
//!   (`sync_server`'s `bandwidth` command).

use std::time::{Duration, Instant};

use futures::StreamExt;
use informer_apiserver::{ApiServer, Config};
use informer_factory::InformerOptions;
use informer_kube::{KubeInformerFactory, KubeSource, compact_cache};
use k8s_openapi::api::core::v1::{Namespace, Pod};
use kube::Api;
use kube_runtime::{reflector, watcher};

use crate::realistic::realistic_pod;
use crate::relist::rss_now;
use crate::workload;

/// How many objects the compact cache keeps decoded (the ones written or read last), as in
/// the MEM rows.
pub const COMPACT_HOT: usize = 100;

/// The pods the server holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Shape {
    /// Realistic running pods (13 KB of JSON each, managed fields included).
    Realistic,
    /// The workloads' small pod (one container, three labels).
    Small,
}

impl Shape {
    /// The shape named `name` (`realistic`, `small`).
    pub fn parse(name: &str) -> Option<Self> {
        match name {
            "realistic" => Some(Self::Realistic),
            "small" => Some(Self::Small),
            _ => None,
        }
    }

    /// Its name on the command line.
    pub fn name(self) -> &'static str {
        match self {
            Self::Realistic => "realistic",
            Self::Small => "small",
        }
    }

    /// Pod number `i` of this shape, as written to the server (no resource version).
    pub fn pod(self, i: usize) -> Pod {
        let mut pod = match self {
            Self::Realistic => realistic_pod(i),
            Self::Small => workload::pod(i),
        };
        pod.metadata.resource_version = None;
        pod
    }
}

/// A client of the comparison.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Side {
    /// Ours as `KubeInformerFactory` builds it by default: protobuf for built-in types,
    /// managed fields left out as objects are decoded.
    Ours,
    /// Ours reading JSON (`KubeSource::json_only`), managed fields left out.
    OursJson,
    /// Ours reading protobuf and keeping managed fields (`KubeSource::with_managed_fields`).
    OursManagedFields,
    /// Ours by default on the compact cache (`informer_kube::compact_cache`, the 100 objects
    /// written or read last kept decoded): for memory over read time.
    OursCompact,
    /// kube-runtime's `watcher` into a `reflector` store: JSON, managed fields kept.
    KubeRuntime,
}

impl Side {
    /// Every side, in the order the report runs them.
    pub const ALL: [Side; 5] = [
        Self::Ours,
        Self::OursJson,
        Self::OursManagedFields,
        Self::OursCompact,
        Self::KubeRuntime,
    ];

    /// The side named `name`.
    pub fn parse(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|s| s.name() == name)
    }

    /// Its name on the command line.
    pub fn name(self) -> &'static str {
        match self {
            Self::Ours => "ours",
            Self::OursJson => "ours-json",
            Self::OursManagedFields => "ours-managed-fields",
            Self::OursCompact => "ours-compact",
            Self::KubeRuntime => "kube-runtime",
        }
    }
}

/// How the client fills its cache.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// A list in pages of 500, then a watch.
    List,
    /// A streaming list: a watch with `sendInitialEvents=true`, synced at its end bookmark.
    Streaming,
}

impl Mode {
    /// The mode named `name` (`list`, `streaming`).
    pub fn parse(name: &str) -> Option<Self> {
        match name {
            "list" => Some(Self::List),
            "streaming" => Some(Self::Streaming),
            _ => None,
        }
    }

    /// Its name on the command line.
    pub fn name(self) -> &'static str {
        match self {
            Self::List => "list",
            Self::Streaming => "streaming",
        }
    }
}

/// How a client's requests travel.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Transport {
    /// HTTP/1.1 without compression: kube-client as `Client::try_from` builds it without its
    /// `gzip` feature (the workspace's build).
    Plain,
    /// HTTP/1.1 asking for gzip: kube-client's stack with the layer its `gzip` feature adds
    /// (tower-http's `DecompressionLayer`, gzip only), so list responses above 128 KiB come
    /// compressed; a 1.36 server compresses no watch, streaming lists included.
    Gzip,
    /// HTTP/2 with prior knowledge (h2c), no compression: kube's `ClientBuilder` over
    /// hyper-util's client with `http2_only`, with Go's HTTP/2 flow-control windows. Not
    /// reachable through `Client::try_from` (kube-client builds hyper for HTTP/1 only and
    /// offers TLS with no `h2` in ALPN): the figure of what HTTP/2 would give.
    H2c,
}

impl Transport {
    /// Every transport, in the order the report runs them.
    pub const ALL: [Transport; 3] = [Self::Plain, Self::Gzip, Self::H2c];

    /// The transport named `name` (`plain`, `gzip`, `h2c`).
    pub fn parse(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|t| t.name() == name)
    }

    /// Its name on the command line.
    pub fn name(self) -> &'static str {
        match self {
            Self::Plain => "plain",
            Self::Gzip => "gzip",
            Self::H2c => "h2c",
        }
    }
}

/// A simulator holding `n` pods of `shape` in namespaces `ns-0` to `ns-99`.
pub async fn server(shape: Shape, n: usize) -> ApiServer {
    let config = Config {
        history_size: n + 1_000,
        ..Config::default().register::<Pod>().register::<Namespace>()
    };
    let server = ApiServer::start(config).await.expect("the server starts");
    for i in 0..n {
        server.create(&shape.pod(i)).expect("a pod is created");
    }
    server
}

/// One client's sync.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Synced {
    /// From starting the client to a synced cache.
    pub time: Duration,
    /// The objects in the cache once synced.
    pub objects: usize,
    /// The process's resident set once synced, bytes.
    pub rss_after: u64,
    /// The process's resident set before the client started (the runtime alone), bytes.
    pub rss_before: u64,
}

impl Synced {
    /// The line `sync_client` prints, which [`Synced::parse`] reads back.
    pub fn line(&self) -> String {
        format!(
            "synced {} {} {} {}",
            self.time.as_secs_f64(),
            self.objects,
            self.rss_after,
            self.rss_before
        )
    }

    /// The figures of a [`line`](Self::line).
    pub fn parse(line: &str) -> Option<Self> {
        let mut words = line.strip_prefix("synced ")?.split(' ');
        Some(Self {
            time: Duration::from_secs_f64(words.next()?.parse().ok()?),
            objects: words.next()?.parse().ok()?,
            rss_after: words.next()?.parse().ok()?,
            rss_before: words.next()?.parse().ok()?,
        })
    }
}

/// A kube client for the server at `url` over `transport`, without kube-client's retry layer.
fn client(url: &str, transport: Transport) -> kube::Client {
    let mut config = kube::Config::new(url.parse().expect("a server URL"));
    config.default_retry = false;
    match transport {
        Transport::Plain => kube::Client::try_from(config).expect("a client"),
        Transport::Gzip | Transport::H2c => built_client(&config, transport),
    }
}

/// kube's `ClientBuilder` over hyper-util's client, behind the base-URI layer kube-client puts
/// first: with tower-http's gzip decompression under it for [`Transport::Gzip`] (where
/// kube-client's `gzip` feature puts it), speaking HTTP/2 with prior knowledge for
/// [`Transport::H2c`] with the windows of Go's HTTP/2 client (4 MiB a stream, 1 GiB the
/// connection).
fn built_client(config: &kube::Config, transport: Transport) -> kube::Client {
    use hyper_util::client::legacy::{Client, connect::HttpConnector};
    use kube::client::{Body, ClientBuilder, ConfigExt};
    let mut builder = Client::builder(hyper_util::rt::TokioExecutor::new());
    if transport == Transport::H2c {
        builder
            .http2_only(true)
            .http2_initial_stream_window_size(4 << 20)
            .http2_initial_connection_window_size(1 << 30);
    }
    let http = builder.build::<_, Body>(HttpConnector::new());
    let base = tower::ServiceBuilder::new().layer(config.base_uri_layer());
    let namespace = config.default_namespace.clone();
    if transport == Transport::Gzip {
        let gunzip = tower_http::decompression::DecompressionLayer::new()
            .no_br()
            .no_deflate()
            .no_zstd();
        ClientBuilder::new(base.layer(gunzip).service(http), namespace).build()
    } else {
        ClientBuilder::new(base.service(http), namespace).build()
    }
}

/// Syncs every pod of the server at `url` into a cache, as `side` does in `mode` over
/// `transport`; `None` if it has not synced within `limit`. The client is stopped once the
/// figures are taken.
pub async fn sync(
    url: &str,
    (side, mode, transport): (Side, Mode, Transport),
    limit: Duration,
) -> Option<Synced> {
    let rss_before = rss_now().unwrap_or(0);
    let started = Instant::now();
    let measure = |objects| Synced {
        time: started.elapsed(),
        objects,
        rss_after: rss_now().unwrap_or(0),
        rss_before,
    };
    let client = client(url, transport);
    match side {
        Side::KubeRuntime => kube_runtime_sync(client, mode, limit, measure).await,
        _ => ours_sync(client, side, mode, limit, measure).await,
    }
}

/// Ours: a factory's pod informer, started and waited for, measured by `measure` with the
/// cache's length, then shut down.
async fn ours_sync(
    client: kube::Client,
    side: Side,
    mode: Mode,
    limit: Duration,
    measure: impl FnOnce(usize) -> Synced,
) -> Option<Synced> {
    let source = KubeSource::new(client);
    let source = match side {
        Side::OursJson => source.json_only(),
        Side::OursManagedFields => source.with_managed_fields(),
        _ => source,
    };
    let factory = KubeInformerFactory::new(source).with_streaming_list(mode == Mode::Streaming);
    let pods = if side == Side::OursCompact {
        factory.informer_with::<Pod>(
            InformerOptions::new().cache("compact", compact_cache(COMPACT_HOT)),
        )
    } else {
        factory.informer::<Pod>()
    };
    factory.start().expect("the factory starts");
    let report = factory.wait_for_cache_sync(Some(limit)).await;
    let synced = report.all_synced().then(|| measure(pods.lister().len()));
    factory.shutdown().await.expect("the factory shuts down");
    synced
}

/// kube-runtime: its `watcher` (pages of 500, or a streaming list) into a `reflector` store,
/// waited for, measured by `measure` with the store's length, then stopped.
async fn kube_runtime_sync(
    client: kube::Client,
    mode: Mode,
    limit: Duration,
    measure: impl FnOnce(usize) -> Synced,
) -> Option<Synced> {
    let config = match mode {
        Mode::List => watcher::Config::default(),
        Mode::Streaming => watcher::Config::default().streaming_lists(),
    };
    let (reader, writer) = reflector::store::<Pod>();
    let stream = watcher::watcher(Api::<Pod>::all(client), config);
    let driver = tokio::spawn(reflector::reflector(writer, stream).for_each(|_| async {}));
    let ready = tokio::time::timeout(limit, reader.wait_until_ready()).await;
    let synced = matches!(ready, Ok(Ok(()))).then(|| measure(reader.state().len()));
    crate::w_http::end_tasks(vec![driver]).await;
    synced
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_line_reads_back_as_its_figures() {
        let synced = Synced {
            time: Duration::from_millis(1250),
            objects: 10_000,
            rss_after: 300 << 20,
            rss_before: 20 << 20,
        };
        assert_eq!(Synced::parse(&synced.line()), Some(synced));
        assert_eq!(Synced::parse("synced 1.0 10"), None);
    }

    #[test]
    fn names_read_back_as_what_they_name() {
        for side in Side::ALL {
            assert_eq!(Side::parse(side.name()), Some(side));
        }
        for mode in [Mode::List, Mode::Streaming] {
            assert_eq!(Mode::parse(mode.name()), Some(mode));
        }
        for shape in [Shape::Realistic, Shape::Small] {
            assert_eq!(Shape::parse(shape.name()), Some(shape));
        }
        assert_eq!(Side::parse("client-go"), None);
    }

    /// Every side syncs every pod of a small server, in both modes.
    #[test]
    fn every_side_syncs_every_pod_in_both_modes() {
        let rt = crate::w_inf::runtime();
        rt.block_on(async {
            let server = server(Shape::Small, 40).await;
            for side in Side::ALL {
                for mode in [Mode::List, Mode::Streaming] {
                    let how = (side, mode, Transport::Plain);
                    let synced = sync(&server.url(), how, Duration::from_secs(60))
                        .await
                        .unwrap_or_else(|| panic!("{side:?} {mode:?} synced"));
                    assert_eq!(synced.objects, 40, "{side:?} {mode:?}");
                }
            }
            server.shutdown().await;
        });
    }

    /// Ours syncs every pod over every transport, a list large enough to be gzipped included,
    /// from a server behind a bandwidth limit.
    #[test]
    fn ours_syncs_over_every_transport() {
        let rt = crate::w_inf::runtime();
        rt.block_on(async {
            let server = server(Shape::Small, 2_000).await;
            server.faults().set_bandwidth(Some(1 << 30));
            for transport in Transport::ALL {
                assert_eq!(Transport::parse(transport.name()), Some(transport));
                for mode in [Mode::List, Mode::Streaming] {
                    let how = (Side::OursJson, mode, transport);
                    let synced = sync(&server.url(), how, Duration::from_secs(60))
                        .await
                        .unwrap_or_else(|| panic!("{transport:?} {mode:?} synced"));
                    assert_eq!(synced.objects, 2_000, "{transport:?} {mode:?}");
                }
            }
            server.shutdown().await;
        });
    }
}
