//! The kube informer factory against the API server simulator: shared informers for pods,
//! nodes and pod metadata, namespace and selector scoping, listers, churn and shutdown.

use std::sync::Arc;
use std::time::Duration;

use informer::SharedIndexInformer;
use informer_apiserver::{ApiServer, Config};
use informer_factory::{InformerOptions, Selection};
use informer_kube::{KubeInformerFactory, KubeSource, LabelSelector, Metadata};
use informer_store::Everything;
use informer_store::NAMESPACE_INDEX;
use k8s_openapi::api::core::v1::{ConfigMap, Node, Pod};
use kube::core::Expression;

const LONG: Duration = Duration::from_secs(20);

fn pod(ns: &str, name: &str, app: &str) -> Pod {
    serde_json::from_value(serde_json::json!({
        "metadata": {"name": name, "namespace": ns, "labels": {"app": app}},
        "spec": {"containers": [{"name": "c", "image": "app"}]}
    }))
    .unwrap()
}

fn node(name: &str) -> Node {
    serde_json::from_value(serde_json::json!({"metadata": {"name": name}})).unwrap()
}

use informer_testing::eventually;

async fn server() -> ApiServer {
    let server = ApiServer::start(Config::for_tests(Duration::from_millis(200)))
        .await
        .unwrap();
    for (ns, name, app) in [
        ("a", "web-0", "web"),
        ("a", "web-1", "web"),
        ("a", "db-0", "db"),
        ("b", "web-0", "web"),
    ] {
        server.create(&pod(ns, name, app)).unwrap();
    }
    for name in ["n1", "n2"] {
        server.create(&node(name)).unwrap();
    }
    server
}

fn client(server: &ApiServer) -> kube::Client {
    kube::Client::try_from(kube::Config::new(server.url().parse().unwrap())).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kube_factory_shares_syncs_lists_and_shuts_down() {
    let server = server().await;
    let factory = KubeInformerFactory::new(KubeSource::new(client(&server)));
    let pods = factory.informer::<Pod>();
    assert!(Arc::ptr_eq(&pods, &factory.informer::<Pod>()));
    let nodes = factory.lister::<Node>();
    let pod_meta = factory.informer::<Metadata<Pod>>();
    assert!(Arc::ptr_eq(&pod_meta, &factory.informer::<Metadata<Pod>>()));
    let in_b = factory.informer_with::<Pod>(InformerOptions::new().namespace("b"));
    let web = factory.informer_with::<Pod>(InformerOptions::new().labels("app=web"));
    let configmaps = factory.informer::<ConfigMap>();
    assert_eq!(factory.informers().len(), 6);

    assert_eq!(factory.start().unwrap(), 6);
    let report = factory.wait_for_cache_sync(Some(LONG)).await;
    assert!(report.all_synced(), "{report}");
    assert_eq!(
        report.is_synced::<Pod>(&Selection::all().namespace("b")),
        Some(true)
    );

    // Every informer sees what its selection covers.
    assert_eq!(pods.lister().len(), 4);
    assert_eq!(in_b.lister().len(), 1);
    assert_eq!(web.lister().len(), 3);
    assert_eq!(pod_meta.lister().len(), 4);
    assert!(configmaps.lister().is_empty());
    assert_eq!(nodes.len(), 2);
    assert!(
        nodes.get("n1").is_some(),
        "cluster-scoped: the key is the name"
    );
    // The namespace index is there, for cluster-scoped kinds too (as in client-go).
    assert_eq!(
        pods.lister().index_keys(NAMESPACE_INDEX, "a").unwrap(),
        ["a/db-0", "a/web-0", "a/web-1"]
    );
    assert_eq!(
        factory
            .informer::<Node>()
            .lister()
            .index_keys(NAMESPACE_INDEX, "")
            .unwrap()
            .len(),
        2
    );

    // Typed listers: by namespace, by label selector.
    let lister = factory.lister::<Pod>();
    let a = lister.namespace("a");
    assert_eq!(
        a.get("db-0").unwrap().metadata.labels.as_ref().unwrap()["app"],
        "db"
    );
    assert_eq!(a.list(&LabelSelector::from_iter([("app", "web")])).len(), 2);
    assert_eq!(
        lister
            .list(&LabelSelector::from(Expression::NotEqual(
                "app".into(),
                "web".into()
            )))
            .len(),
        1
    );
    assert_eq!(lister.list(&LabelSelector::default()).len(), 4);
    assert_eq!(lister.namespace("b").list(&Everything).len(), 1);
    let meta = pod_meta.lister().get("a/web-0").unwrap();
    assert_eq!(meta.metadata.labels.as_ref().unwrap()["app"], "web");

    // Changes reach every informer they concern.
    server.create(&pod("b", "web-9", "web")).unwrap();
    server.delete::<Pod>(Some("a"), "db-0").unwrap();
    eventually("all pods", || {
        pods.lister().len() == 4 && pods.lister().get("b/web-9").is_some()
    })
    .await;
    eventually("namespace b", || in_b.lister().len() == 2).await;
    eventually("app=web", || web.lister().len() == 4).await;
    eventually("metadata", || pod_meta.lister().get("a/db-0").is_none()).await;

    factory.shutdown().await.unwrap();
    assert!(factory.informers().iter().all(|i| i.stopped));
    server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn factory_namespace_and_selectors_apply_to_every_informer() {
    let server = server().await;
    let factory = KubeInformerFactory::new(KubeSource::new(client(&server)))
        .with_namespace("a")
        .with_selectors("app=web", "");
    let pods = factory.informer::<Pod>();
    let nodes = factory.informer::<Node>(); // cluster-scoped: the namespace does not apply
    let everywhere = factory.informer_with::<Pod>(InformerOptions::new().namespace("").labels(""));
    factory.start().unwrap();
    assert!(factory.wait_for_cache_sync(Some(LONG)).await.all_synced());
    let keys = |i: &SharedIndexInformer<Pod>| {
        let mut keys = i.lister().keys();
        keys.sort();
        keys
    };
    assert_eq!(keys(&pods), ["a/web-0", "a/web-1"]);
    assert_eq!(keys(&everywhere).len(), 4);
    // Nodes have no labels here: the label selector leaves none.
    assert!(nodes.lister().is_empty());
    factory.shutdown().await.unwrap();
    server.shutdown().await;
}

/// Starts a pod informer of `factory` that records every error reaching its watch error
/// handler, and waits for its sync; returns the errors and the list requests the server saw.
async fn sync_through_a_503_and_a_429(
    server: &ApiServer,
    factory: KubeInformerFactory,
) -> (Vec<String>, usize) {
    use informer_apiserver::{Failure, Verb};
    server.clear_recorded_requests();
    server.record_requests(true);
    server
        .faults()
        .fail_next(Verb::List, 1, Failure::unavailable());
    server
        .faults()
        .fail_next(Verb::List, 1, Failure::too_many_requests(1));
    let errors = Arc::new(parking_lot::Mutex::new(Vec::new()));
    let seen = errors.clone();
    // Lists, where the faults are: not a streaming list.
    let factory = factory.configure::<Pod>(move |informer| {
        let seen = seen.clone();
        informer.streaming_list(false).watch_error_handler(Arc::new(
            move |e: &informer_reflector::Error| {
                seen.lock().push(e.to_string());
            },
        ))
    });
    factory.informer::<Pod>();
    factory.start().unwrap();
    let report = factory.wait_for_cache_sync(Some(LONG)).await;
    assert!(report.all_synced(), "{report}");
    factory.shutdown().await.unwrap();
    let lists = server
        .recorded_requests()
        .iter()
        .filter(|r| r.path.ends_with("/pods") && !r.is_watch())
        .count();
    let errors = errors.lock().clone();
    (errors, lists)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_factorys_client_leaves_every_429_and_503_to_the_reflector() {
    let server = server().await;
    // kube's own default for a config is to retry; the factory turns that off.
    let config = kube::Config::new(server.url().parse().unwrap());
    assert!(config.default_retry);
    let factory = KubeInformerFactory::new(KubeSource::try_from_config(config).unwrap());
    let (errors, lists) = sync_through_a_503_and_a_429(&server, factory).await;
    // One request per reflector attempt: each failure reached the reflector (and its handler),
    // which backed off and listed again.
    assert_eq!(lists, 3, "{errors:?}");
    assert_eq!(errors.len(), 2, "{errors:?}");
    assert!(errors[0].contains("503"), "{errors:?}");
    assert!(errors[1].contains("429"), "{errors:?}");

    // For contrast, a client with kube-client's retry layer hides both from the reflector.
    let hidden = KubeInformerFactory::new(KubeSource::new(client(&server)));
    let (errors, lists) = sync_through_a_503_and_a_429(&server, hidden).await;
    assert_eq!(lists, 3);
    assert!(errors.is_empty(), "{errors:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cache_checked_at_its_own_version_matches_a_server_that_keeps_changing() {
    use informer_kube::{CacheCheck, Snapshot, check_at_same_version, informer_snapshot};
    let server = Arc::new(server().await);
    let factory = KubeInformerFactory::new(
        KubeSource::try_from_config(kube::Config::new(server.url().parse().unwrap())).unwrap(),
    );
    let pods = factory.informer::<Pod>();
    factory.start().unwrap();
    assert!(factory.wait_for_cache_sync(Some(LONG)).await.all_synced());

    // Churn: creates, updates and deletes as fast as the server takes them, all through the
    // check, so the latest state is never the cache's.
    let stop = tokio_util::sync::CancellationToken::new();
    let churn = tokio::spawn({
        let (server, stop) = (server.clone(), stop.clone());
        async move {
            let mut i = 0_u64;
            while !stop.is_cancelled() {
                let name = format!("churn-{}", i % 50);
                let _ = server.delete::<Pod>(Some("c"), &name);
                server.create(&pod("c", &name, "churn")).unwrap();
                i += 1;
                tokio::task::yield_now().await;
            }
            i
        }
    });
    eventually("churn is going", || server.resource_version() > 200).await;
    let api = kube::Api::<Pod>::all(client(&server));
    let pause = || tokio::time::sleep(Duration::from_millis(50));

    let verdict = check_at_same_version(&api, || informer_snapshot(&pods), 20, pause).await;
    assert!(verdict.passed(), "{verdict}");

    // A cache missing an object is caught, at its own version.
    let missing = || {
        informer_snapshot(&pods).map(|mut s: Snapshot| {
            s.objects.remove("a/web-0");
            s
        })
    };
    let verdict = check_at_same_version(&api, missing, 3, pause).await;
    match &verdict {
        CacheCheck::Differs { differences, .. } => {
            assert!(
                differences.iter().any(|d| d.starts_with("a/web-0")),
                "{verdict}"
            );
        }
        other => panic!("expected a difference, got {other}"),
    }
    let writes = {
        stop.cancel();
        churn.await.unwrap()
    };
    assert!(writes > 100, "{writes}");

    // A version the server has compacted away cannot be checked, and that is not a pass.
    server.faults().compact_all();
    let old = || {
        Some(Snapshot {
            resource_version: "2".into(),
            objects: Default::default(),
        })
    };
    let verdict = check_at_same_version(&api, old, 2, pause).await;
    assert!(matches!(verdict, CacheCheck::Unchecked { .. }), "{verdict}");
    assert!(!verdict.passed());
    factory.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_source_caches_every_kind_without_managed_fields_by_default() {
    let server = ApiServer::start(Config::for_tests(Duration::from_millis(200)))
        .await
        .unwrap();
    let managed = |name: &str| {
        serde_json::json!([{"manager": name, "operation": "Update", "apiVersion": "v1",
                            "fieldsType": "FieldsV1", "fieldsV1": {"f:metadata": {"f:labels": {}}}}])
    };
    let with_fields = |ns: &str, name: &str| -> Pod {
        let mut pod = serde_json::to_value(pod(ns, name, "web")).unwrap();
        pod["metadata"]["managedFields"] = managed("kubectl");
        serde_json::from_value(pod).unwrap()
    };
    server.create(&with_fields("a", "web-0")).unwrap();
    let stored = server.get::<Pod>(Some("a"), "web-0").unwrap();
    assert!(
        stored.metadata.managed_fields.is_some(),
        "the server keeps them"
    );

    // The default, and the same asked for explicitly.
    let factory = KubeInformerFactory::new(KubeSource::new(client(&server)));
    let pods = factory.informer::<Pod>();
    let meta = factory.informer::<Metadata<Pod>>();
    let explicit =
        KubeInformerFactory::new(KubeSource::new(client(&server)).without_managed_fields());
    let explicit_pods = explicit.informer::<Pod>();
    let whole = KubeInformerFactory::new(KubeSource::new(client(&server)).with_managed_fields());
    let kept = whole.informer::<Pod>();
    factory.start().unwrap();
    explicit.start().unwrap();
    whole.start().unwrap();
    assert!(factory.wait_for_cache_sync(Some(LONG)).await.all_synced());
    assert!(explicit.wait_for_cache_sync(Some(LONG)).await.all_synced());
    assert!(whole.wait_for_cache_sync(Some(LONG)).await.all_synced());

    // Listed: without the managed fields, and otherwise the object the other source caches.
    let listed = pods.lister().get("a/web-0").unwrap();
    assert_eq!(*explicit_pods.lister().get("a/web-0").unwrap(), *listed);
    assert_eq!(listed.metadata.managed_fields, None);
    let mut expected = (*kept.lister().get("a/web-0").unwrap()).clone();
    assert!(expected.metadata.managed_fields.is_some());
    expected.metadata.managed_fields = None;
    assert_eq!(*listed, expected);
    assert_eq!(
        meta.lister()
            .get("a/web-0")
            .unwrap()
            .metadata
            .managed_fields,
        None
    );

    // Watched: the same.
    server.create(&with_fields("b", "web-1")).unwrap();
    eventually("the watched pod", || {
        pods.lister().get("b/web-1").is_some() && meta.lister().get("b/web-1").is_some()
    })
    .await;
    let watched = pods.lister().get("b/web-1").unwrap();
    assert_eq!(watched.metadata.managed_fields, None);
    assert_eq!(watched.metadata.labels.as_ref().unwrap()["app"], "web");
    let watched_meta = meta.lister().get("b/web-1").unwrap();
    assert_eq!(watched_meta.metadata.managed_fields, None);

    factory.shutdown().await.unwrap();
    explicit.shutdown().await.unwrap();
    whole.shutdown().await.unwrap();
    server.shutdown().await;
}

/// An informer with a compact cache holds what a default one holds, object for object and
/// index for index, through a list and through watched changes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_compact_cache_holds_what_the_default_cache_holds() {
    let server = ApiServer::start(Config::for_tests(Duration::from_millis(200)))
        .await
        .unwrap();
    for i in 0..20 {
        server
            .create(&pod(&format!("ns{}", i % 3), &format!("p{i}"), "web"))
            .unwrap();
    }
    let factory = KubeInformerFactory::new(KubeSource::new(client(&server)));
    let plain = factory.informer::<Pod>();
    let compact = factory.informer_with::<Pod>(
        InformerOptions::new().cache("compact", informer_kube::compact_cache::<Pod>(4)),
    );
    assert!(
        !Arc::ptr_eq(&plain, &compact),
        "a cache of its own is an informer of its own"
    );
    factory.start().unwrap();
    assert!(factory.wait_for_cache_sync(Some(LONG)).await.all_synced());
    server.delete::<Pod>(Some("ns0"), "p0").unwrap();
    server.create(&pod("ns1", "late", "web")).unwrap();
    let same = || {
        let (a, b) = (plain.lister(), compact.lister());
        let mut keys_a = a.keys();
        let mut keys_b = b.keys();
        keys_a.sort();
        keys_b.sort();
        keys_a == keys_b
            && keys_a.iter().all(|k| a.get(k) == b.get(k))
            && ["ns0", "ns1", "ns2"].iter().all(|ns| {
                let mut x = a.by_index(NAMESPACE_INDEX, ns).unwrap();
                let mut y = b.by_index(NAMESPACE_INDEX, ns).unwrap();
                x.sort_by(|p, q| p.metadata.name.cmp(&q.metadata.name));
                y.sort_by(|p, q| p.metadata.name.cmp(&q.metadata.name));
                x == y
            })
    };
    eventually("the compact cache holds what the default one holds", || {
        same() && compact.lister().get("ns1/late").is_some()
    })
    .await;
    assert!(compact.lister().get("ns0/p0").is_none());
    factory.shutdown().await.unwrap();
    server.shutdown().await;
}

/// Streaming lists are the default, as in client-go 1.35+: a factory's informer over a kube
/// client streams its initial state (one watch with `sendInitialEvents`, no list) and goes on
/// watching on the same stream; told not to, it lists, then watches. Both caches hold the
/// server's pods and follow a change.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn informers_stream_their_initial_state_by_default_and_list_when_told_not_to() {
    for streaming in [true, false] {
        let server = server().await;
        server.record_requests(true);
        let mut factory = KubeInformerFactory::new(KubeSource::new(client(&server)));
        if !streaming {
            factory = factory.with_streaming_list(false);
        }
        let pods = factory.informer::<Pod>();
        factory.start().unwrap();
        assert!(factory.wait_for_cache_sync(Some(LONG)).await.all_synced());
        assert_eq!(pods.lister().len(), 4, "streaming: {streaming}");
        server.create(&pod("b", "web-1", "web")).unwrap();
        eventually("the new pod is cached", || pods.lister().len() == 5).await;
        let requests: Vec<_> = server
            .recorded_requests()
            .into_iter()
            .filter(|r| r.path.ends_with("/pods"))
            .collect();
        let first = &requests[0];
        assert_eq!(first.is_watch(), streaming, "{requests:?}");
        assert_eq!(
            first.param("sendInitialEvents").as_deref(),
            streaming.then_some("true"),
            "{requests:?}"
        );
        let lists = requests.iter().filter(|r| !r.is_watch()).count();
        assert_eq!(lists, usize::from(!streaming), "{requests:?}");
        factory.shutdown().await.unwrap();
    }
}
