//! `informer_reflector_responses_total` counts the responses of a kube-client lister-watcher by
//! the encoding it read them in, against the API server simulator over HTTP: protobuf for pods
//! by default, JSON with `json_only`, a streaming list's watch included.

use std::sync::Arc;
use std::time::Duration;

use informer_apiserver::{ApiServer, Config};
use informer_kube::{KubeInformerFactory, KubeListerWatcher, KubeSource, key_func};
use informer_metrics::Metrics;
use informer_reflector::Reflector;
use informer_store::{Store, ThreadSafeStore};
use informer_testing::eventually;
use k8s_openapi::api::core::v1::{Container, Pod, PodSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::Api;
use tokio_util::sync::CancellationToken;

use crate::common;
use common::{assert_openmetrics, sample};

const PODS: usize = 12;

/// The simulator with [`PODS`] pods, and a kube client for it without kube-client's retries.
async fn server() -> (ApiServer, kube::Client) {
    let server = ApiServer::start(Config::for_tests(Duration::from_millis(100)))
        .await
        .expect("the simulator starts");
    for n in 0..PODS {
        let pod = Pod {
            metadata: ObjectMeta {
                name: Some(format!("p-{n}")),
                namespace: Some("demo".into()),
                ..ObjectMeta::default()
            },
            spec: Some(PodSpec {
                containers: vec![Container {
                    name: "c".into(),
                    image: Some("nginx".into()),
                    ..Container::default()
                }],
                ..PodSpec::default()
            }),
            ..Pod::default()
        };
        server.create(&pod).expect("created");
    }
    let mut config = kube::Config::new(server.url().parse().expect("the simulator's URL"));
    config.default_retry = false;
    let client = kube::Client::try_from(config).expect("a client");
    (server, client)
}

/// The responses series of `informer` in `encoding`.
fn responses(informer: &str, encoding: &str) -> String {
    format!("informer_reflector_responses_total{{informer=\"{informer}\",encoding=\"{encoding}\"}}")
}

/// A reflector over a `KubeListerWatcher` of pods (JSON only or not, with a streaming list or
/// not): once it has listed and opened its watch, the counter of each encoding equals what the
/// lister-watcher read in it, and the other encoding has no series at all.
async fn counted(json_only: bool, streaming: bool) {
    let (server, client) = server().await;
    let lister_watcher = KubeListerWatcher::new(Api::<Pod>::all(client));
    let lister_watcher = if json_only {
        lister_watcher.json_only()
    } else {
        lister_watcher
    };
    // A clone shares the original's encoding counts.
    let read = lister_watcher.clone();
    let metrics = Metrics::new();
    let store = Arc::new(ThreadSafeStore::new(key_func::<Pod>()));
    let mut reflector = Reflector::new(lister_watcher, Arc::clone(&store))
        .with_page_size(5)
        .with_observer(metrics.reflector_observer("pods"));
    if streaming {
        reflector = reflector.with_streaming_list(key_func::<Pod>());
    }
    let reflector = Arc::new(reflector);
    let stop = CancellationToken::new();
    let task = tokio::spawn({
        let (reflector, stop) = (Arc::clone(&reflector), stop.clone());
        async move { reflector.run(stop).await }
    });

    let (read_in, not_in) = if json_only {
        ("json", "protobuf")
    } else {
        ("protobuf", "json")
    };
    let series = responses("pods", read_in);
    // The list (its pages, or the streaming list's watch) and, after a paginated list, the
    // watch: the default watch timeout is minutes, so nothing is read after that.
    let at_least = if streaming { 1 } else { 2 };
    eventually("the pods listed and the watch open", || {
        store.list().len() == PODS && reflector.watch_down_since().is_none()
    })
    .await;
    eventually("every response counted, in its encoding", || {
        let counts = read.encoding_counts();
        let n = if json_only {
            counts.json
        } else {
            counts.protobuf
        };
        n >= at_least && sample(&metrics.encode(), &series) == Some(n as f64)
    })
    .await;
    let text = metrics.encode();
    assert_openmetrics(&text);
    let counts = read.encoding_counts();
    assert_eq!(
        (if json_only {
            counts.protobuf
        } else {
            counts.json
        }),
        0,
        "{counts:?}"
    );
    assert!(
        !text.contains(&responses("pods", not_in)),
        "no {not_in} series:\n{text}"
    );
    assert!(
        text.contains("# HELP informer_reflector_responses "),
        "the family is described:\n{text}"
    );

    stop.cancel();
    task.await.expect("the reflector stops");
    server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pods_are_read_as_protobuf_by_default() {
    counted(false, false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pods_are_read_as_json_with_json_only() {
    counted(true, false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_streaming_lists_watch_is_counted_in_its_encoding() {
    counted(false, true).await;
    counted(true, true).await;
}

/// Through a factory, as an application sets it up (its informers keep their lister-watchers
/// boxed): the encoding label follows the source's choice.
async fn factory_reads(json_only: bool) -> String {
    let (server, client) = server().await;
    let source = KubeSource::new(client);
    let source = if json_only {
        source.json_only()
    } else {
        source
    };
    let metrics = Metrics::new();
    let factory =
        KubeInformerFactory::new(source).with_reflector_observers(metrics.reflector_observers());
    factory.informer::<Pod>();
    factory.start().expect("the factory starts");
    assert!(
        factory
            .wait_for_cache_sync(Some(Duration::from_secs(20)))
            .await
            .all_synced()
    );
    let (read_in, not_in) = if json_only {
        ("json", "protobuf")
    } else {
        ("protobuf", "json")
    };
    eventually("a response counted", || {
        sample(&metrics.encode(), &responses("Pod(all)", read_in)).is_some_and(|n| n >= 1.0)
    })
    .await;
    let text = metrics.encode();
    factory.shutdown().await.expect("the factory shuts down");
    server.shutdown().await;
    assert!(
        !text.contains(&responses("Pod(all)", not_in)),
        "no {not_in} series:\n{text}"
    );
    text
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_factorys_informers_are_counted_by_the_encoding_its_source_chose() {
    factory_reads(false).await;
    factory_reads(true).await;
}
