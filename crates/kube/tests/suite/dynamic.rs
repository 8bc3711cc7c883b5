//! Informers of `DynamicObject`s through the kube factory, against the simulator's custom
//! resources: list and watch, the namespace index, cluster scope, and sharing per resource.

use informer::HandlerOptions;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use informer::ResourceEventHandlerFuncs;
use informer_apiserver::{ApiServer, Config, ResourceInfo};
use informer_factory::{InformerOptions, Selection};
use informer_kube::{
    CacheCheck, DynamicResource, KubeInformerFactory, KubeSource, check_at_same_version,
    informer_snapshot,
};
use informer_store::{Everything, NAMESPACE_INDEX};
use kube::api::{DynamicObject, GroupVersionKind};
use kube::discovery::ApiResource;
use parking_lot::Mutex;
use serde_json::{Value, json};

const LONG: Duration = Duration::from_secs(20);

fn widgets_info() -> ResourceInfo {
    ResourceInfo::custom("example.com", "v1", "Widget", "widgets", true)
}

fn gizmos_info() -> ResourceInfo {
    ResourceInfo::custom("example.com", "v1", "Gizmo", "gizmos", true)
}

fn gadgets_info() -> ResourceInfo {
    ResourceInfo::custom("example.com", "v1", "Gadget", "gadgets", false)
}

fn api_resource(kind: &str, plural: &str) -> ApiResource {
    ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk("example.com", "v1", kind), plural)
}

fn widgets() -> DynamicResource {
    DynamicResource::namespaced(api_resource("Widget", "widgets"))
}

fn gizmos() -> DynamicResource {
    DynamicResource::namespaced(api_resource("Gizmo", "gizmos"))
}

fn gadgets() -> DynamicResource {
    DynamicResource::cluster(api_resource("Gadget", "gadgets"))
}

fn object(ns: Option<&str>, name: &str, size: u32) -> Value {
    let mut metadata = json!({"name": name});
    if let Some(ns) = ns {
        metadata["namespace"] = json!(ns);
    }
    json!({"metadata": metadata, "spec": {"size": size}})
}

fn size(o: &DynamicObject) -> u64 {
    o.data["spec"]["size"].as_u64().unwrap()
}

use informer_testing::eventually;

async fn server() -> ApiServer {
    let config = Config::for_tests(Duration::from_millis(200))
        .register_info(widgets_info())
        .register_info(gizmos_info())
        .register_info(gadgets_info());
    let server = ApiServer::start(config).await.unwrap();
    for (ns, name, size) in [("a", "w1", 1), ("a", "w2", 2), ("b", "w3", 3)] {
        server
            .create_value(&widgets_info(), object(Some(ns), name, size))
            .unwrap();
    }
    server
        .create_value(&gizmos_info(), object(Some("a"), "z1", 9))
        .unwrap();
    server
        .create_value(&gadgets_info(), object(None, "g1", 7))
        .unwrap();
    server
}

fn client(server: &ApiServer) -> kube::Client {
    kube::Client::try_from(kube::Config::new(server.url().parse().unwrap())).unwrap()
}

fn sorted_keys(keys: Vec<String>) -> Vec<String> {
    let mut keys = keys;
    keys.sort();
    keys
}

#[derive(Debug, PartialEq)]
enum Seen {
    Add(String, bool),
    Update(String, u64),
    Delete(String),
}

fn key(o: &DynamicObject) -> String {
    let meta = &o.metadata;
    match &meta.namespace {
        Some(ns) => format!("{ns}/{}", meta.name.as_deref().unwrap()),
        None => meta.name.clone().unwrap(),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dynamic_informers_list_watch_index_and_share_per_resource() {
    let server = server().await;
    let client = client(&server);
    let factory = KubeInformerFactory::new(KubeSource::new(client.clone()));

    // Equal resources share one informer; other resources, or selections, get their own.
    let informer = factory.informer_for(&widgets());
    assert!(Arc::ptr_eq(&informer, &factory.informer_for(&widgets())));
    let gizmo_informer = factory.informer_for(&gizmos());
    assert!(!Arc::ptr_eq(&informer, &gizmo_informer));
    let in_b = factory.informer_for_with(&widgets(), InformerOptions::new().namespace("b"));
    assert!(!Arc::ptr_eq(&informer, &in_b));
    assert!(Arc::ptr_eq(
        &in_b,
        &factory.informer_for_with(&widgets(), InformerOptions::new().namespace("b"))
    ));
    // Cluster-scoped: the namespace does not narrow the list.
    let gadget_informer =
        factory.informer_for_with(&gadgets(), InformerOptions::new().namespace("a"));
    let statuses = factory.informers();
    assert_eq!(statuses.len(), 4);
    assert_eq!(
        statuses[0].dynamic.as_deref(),
        Some("widgets.v1.example.com")
    );
    assert_eq!(
        statuses[1].dynamic.as_deref(),
        Some("gizmos.v1.example.com")
    );

    let seen = Arc::new(Mutex::new(Vec::new()));
    let (adds, updates, deletes) = (seen.clone(), seen.clone(), seen.clone());
    let registration = informer
        .add_event_handler(
            ResourceEventHandlerFuncs::new()
                .with_add(move |k, o: &Arc<DynamicObject>, initial| {
                    assert_eq!(k, key(o));
                    adds.lock().push(Seen::Add(key(o), initial));
                })
                .with_update(move |k, _, new: &Arc<DynamicObject>| {
                    assert_eq!(k, key(new));
                    updates.lock().push(Seen::Update(key(new), size(new)));
                })
                .with_delete(move |k, o, final_state_unknown| {
                    assert!(!final_state_unknown, "a delete seen by the watch");
                    assert_eq!(k, key(o));
                    deletes.lock().push(Seen::Delete(key(o)));
                }),
            HandlerOptions::new(),
        )
        .unwrap();

    assert_eq!(factory.start().unwrap(), 4);
    let report = factory.wait_for_cache_sync(Some(LONG)).await;
    assert!(report.all_synced(), "{report}");
    assert_eq!(
        report.is_synced_for(&widgets(), &Selection::all()),
        Some(true)
    );
    assert_eq!(
        report.is_synced_for(&widgets(), &Selection::all().namespace("b")),
        Some(true)
    );
    assert_eq!(
        report.is_synced_for(&gizmos(), &Selection::all().namespace("b")),
        None
    );

    // The list: every widget, keyed namespace/name, with its data; the namespace index.
    let lister = factory.lister_for(&widgets());
    assert_eq!(sorted_keys(lister.keys()), ["a/w1", "a/w2", "b/w3"]);
    let w1 = lister.namespace("a").get("w1").unwrap();
    assert_eq!(size(&w1), 1);
    assert_eq!(w1.types.as_ref().unwrap().kind, "Widget");
    assert_eq!(
        sorted_keys(lister.index_keys(NAMESPACE_INDEX, "a").unwrap()),
        ["a/w1", "a/w2"]
    );
    assert_eq!(lister.namespace("b").list(&Everything).len(), 1);
    assert_eq!(in_b.lister().keys(), ["b/w3"]);
    assert_eq!(gizmo_informer.lister().keys(), ["a/z1"]);
    assert_eq!(gadget_informer.lister().keys(), ["g1"]);
    assert_eq!(
        gadget_informer
            .lister()
            .index_keys(NAMESPACE_INDEX, "")
            .unwrap(),
        ["g1"]
    );
    // The informer's sync says the cache has the list; the handler's says it has handled it.
    assert!(registration.wait_for_sync_timeout(LONG).await);
    {
        let mut initial = seen.lock().drain(..).collect::<Vec<_>>();
        initial.sort_by_key(|s| format!("{s:?}"));
        assert_eq!(
            initial,
            [
                Seen::Add("a/w1".into(), true),
                Seen::Add("a/w2".into(), true),
                Seen::Add("b/w3".into(), true),
            ]
        );
    }

    // The watch: an add, an update and a delete arrive, in order, and only where they belong.
    server
        .create_value(&widgets_info(), object(Some("a"), "w4", 4))
        .unwrap();
    server
        .patch_value(
            &widgets_info(),
            Some("a"),
            "w1",
            &json!({"spec": {"size": 10}}),
        )
        .unwrap();
    server
        .delete_value(&widgets_info(), Some("a"), "w2")
        .unwrap();
    eventually("three events", || seen.lock().len() == 3).await;
    assert_eq!(
        *seen.lock(),
        [
            Seen::Add("a/w4".into(), false),
            Seen::Update("a/w1".into(), 10),
            Seen::Delete("a/w2".into()),
        ]
    );
    assert_eq!(sorted_keys(lister.keys()), ["a/w1", "a/w4", "b/w3"]);
    assert_eq!(size(&lister.get("a/w1").unwrap()), 10);
    assert_eq!(
        sorted_keys(lister.index_keys(NAMESPACE_INDEX, "a").unwrap()),
        ["a/w1", "a/w4"]
    );
    assert_eq!(in_b.lister().keys(), ["b/w3"]);
    assert_eq!(gizmo_informer.lister().keys(), ["a/z1"]);

    // The cache matches the server at the cache's own resource version.
    let check = check_at_same_version(
        &widgets().api(client.clone(), None),
        || informer_snapshot(&informer),
        20,
        || tokio::time::sleep(Duration::from_millis(50)),
    )
    .await;
    assert!(
        matches!(check, CacheCheck::Match { objects: 3, .. }),
        "{check}"
    );

    factory.shutdown().await.unwrap();
    assert!(factory.informers().iter().all(|i| i.stopped));
    server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dynamic_informers_take_the_factory_defaults_and_selectors() {
    let server = server().await;
    server
        .create_value(
            &widgets_info(),
            json!({"metadata": {"name": "w5", "namespace": "a", "labels": {"app": "web"}}}),
        )
        .unwrap();
    let configured = Arc::new(AtomicUsize::new(0));
    let factory = KubeInformerFactory::new(KubeSource::new(client(&server)))
        .with_namespace("a")
        .configure_for::<DynamicResource>({
            let configured = Arc::clone(&configured);
            move |informer| {
                configured.fetch_add(1, Ordering::SeqCst);
                informer
            }
        });
    let in_a = factory.informer_for(&widgets());
    let web = factory.informer_for_with(&widgets(), InformerOptions::new().labels("app=web"));
    let everywhere = factory.informer_for_with(&widgets(), InformerOptions::new().namespace(""));
    let named = factory.informer_for_with(
        &widgets(),
        InformerOptions::new()
            .fields("metadata.name=w3")
            .namespace(""),
    );
    assert!(
        Arc::ptr_eq(&factory.informer_for(&widgets()), &in_a),
        "shared"
    );
    assert_eq!(
        configured.load(Ordering::SeqCst),
        4,
        "the type's configuration ran once for each new informer"
    );
    factory.start().unwrap();
    let report = factory.wait_for_cache_sync(Some(LONG)).await;
    assert!(report.all_synced(), "{report}");
    assert_eq!(sorted_keys(in_a.lister().keys()), ["a/w1", "a/w2", "a/w5"]);
    assert_eq!(web.lister().keys(), ["a/w5"]);
    assert_eq!(everywhere.lister().len(), 4);
    assert_eq!(named.lister().keys(), ["b/w3"]);
    factory.shutdown().await.unwrap();
    server.shutdown().await;
}

#[test]
fn a_dynamic_resource_names_itself_and_comes_from_discovery() {
    let pods = DynamicResource::from((
        ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk("", "v1", "Pod"), "pods"),
        kube::discovery::ApiCapabilities {
            scope: kube::discovery::Scope::Namespaced,
            subresources: Vec::new(),
            operations: Vec::new(),
        },
    ));
    assert!(pods.is_namespaced());
    assert_eq!(pods.to_string(), "pods.v1");
    assert_eq!(gadgets().to_string(), "gadgets.v1.example.com");
    assert!(!gadgets().is_namespaced());
    assert_ne!(widgets(), gizmos());
}
