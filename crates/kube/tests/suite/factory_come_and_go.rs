//! Informers that come and go, through the kube factory against the API server simulator: a
//! custom resource whose CRD is not installed yet is reported not served, syncs once it is
//! installed (`register_info`), empties its cache and waits when the CRD is deleted
//! (`unregister`), or stops if told to; an informer removed from the factory ends its
//! consumers and is created again afresh; the wait for the served informers returns while one
//! is not served.

use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use informer::{HandlerOptions, HandlerRegistration, HealthOptions, ResourceEventHandlerFuncs};
use informer_apiserver::{ApiServer, Config, ResourceInfo};
use informer_factory::InformerOptions;
use informer_kube::{DynamicResource, KubeInformerFactory, KubeSource};
use informer_reflector::Availability;
use informer_testing::eventually;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{DynamicObject, GroupVersionKind};
use kube::discovery::ApiResource;
use parking_lot::Mutex;
use serde_json::json;

/// Generous bound for a wait that should end within a few polls.
const LONG: Duration = Duration::from_secs(20);
/// How often the informers here list a resource that is not served (5 s by default).
const POLL: Duration = Duration::from_millis(100);

fn apps_info() -> ResourceInfo {
    ResourceInfo::custom("example.informers.dev", "v1", "App", "apps", true)
}

fn apps() -> DynamicResource {
    DynamicResource::namespaced(ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("example.informers.dev", "v1", "App"),
        "apps",
    ))
}

fn create_app(server: &ApiServer, name: &str) {
    let app = json!({"metadata": {"name": name, "namespace": "demo"}, "spec": {"replicas": 1}});
    server.create_value(&apps_info(), app).expect("created");
}

fn config_map(name: &str) -> ConfigMap {
    serde_json::from_value(json!({"metadata": {"name": name, "namespace": "demo"}}))
        .expect("a config map")
}

async fn start() -> ApiServer {
    let server = ApiServer::start(Config::for_tests(Duration::from_millis(200)))
        .await
        .expect("server starts");
    server.create(&config_map("settings")).expect("created");
    server
}

/// A factory whose informers of custom resources look for a resource not served every
/// [`POLL`].
fn factory(server: &ApiServer) -> KubeInformerFactory {
    let config = kube::Config::new(server.url().parse().expect("a valid URL"));
    let client = kube::Client::try_from(config).expect("a client");
    KubeInformerFactory::new(KubeSource::new(client))
        .configure_for::<DynamicResource>(|b| b.reflector_config(|r| r.with_not_served_poll(POLL)))
}

/// The factory's view of the informer of apps.
fn apps_status(factory: &KubeInformerFactory) -> informer_factory::InformerStatus {
    factory
        .informers()
        .into_iter()
        .find(|i| i.dynamic.as_deref() == Some(&*apps().to_string()))
        .expect("the factory holds the informer of apps")
}

/// The keys of the objects a handler was told were deleted.
fn deletions(informer: &informer::SharedIndexInformer<DynamicObject>) -> Arc<Mutex<Vec<String>>> {
    let deleted = Arc::new(Mutex::new(Vec::new()));
    let seen = Arc::clone(&deleted);
    informer
        .add_event_handler(
            ResourceEventHandlerFuncs::new().with_delete(
                move |key: &str, _: &Arc<DynamicObject>, _| seen.lock().push(key.to_owned()),
            ),
            HandlerOptions::new(),
        )
        .expect("registered");
    deleted
}

/// Starts the `n` informers requested since the last start and waits until every one syncs.
async fn start_and_sync(factory: &KubeInformerFactory, n: usize) {
    assert_eq!(factory.start().expect("started"), n);
    let report = factory.wait_for_cache_sync(Some(LONG)).await;
    assert!(report.all_synced(), "{report}");
}

/// A consumer of `informer` that does nothing but tell when it stops.
fn consumer(informer: &informer::SharedIndexInformer<DynamicObject>) -> HandlerRegistration {
    informer
        .add_event_handler(ResourceEventHandlerFuncs::new(), HandlerOptions::new())
        .expect("registered")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_custom_resource_is_not_served_then_synced_then_emptied_and_waited_for() {
    let server = start().await;
    let factory = factory(&server);
    let config_maps = factory.informer::<ConfigMap>();
    let informer = factory.informer_for(&apps());
    let deleted = deletions(&informer);
    factory.start().expect("started");

    // The wait for the served informers returns while the CRD is not installed.
    let report = factory.wait_for_cache_sync_served(Some(LONG)).await;
    assert!(
        report.all_served_synced() && !report.all_synced(),
        "{report}"
    );
    assert_eq!(report.not_served().count(), 1, "{report}");
    assert!(config_maps.has_synced() && config_maps.lister().len() == 1);
    assert!(report.to_string().contains("not served"), "{report}");
    let health = factory.health(&HealthOptions::default());
    assert!(health.is_live() && health.is_ready_served(), "{health}");
    assert_eq!(health.not_served().count(), 1, "{health}");

    // The CRD is installed: the informer lists it and syncs.
    server.register_info(apps_info());
    create_app(&server, "a1");
    create_app(&server, "a2");
    // The first list's pages reach the cache as they come; the informer is synced at its end.
    eventually("synced once served", || {
        informer.has_synced() && informer.lister().len() == 2
    })
    .await;
    assert!(informer.has_synced());
    assert_eq!(apps_status(&factory).availability, Availability::Served);
    let report = factory.wait_for_cache_sync(Some(LONG)).await;
    assert!(report.all_synced(), "{report}");

    // The CRD is deleted: every object is deleted, the informer reports it and waits.
    assert_eq!(server.unregister(&apps_info()).expect("registered"), 2);
    eventually("not served again", || apps_status(&factory).is_not_served()).await;
    eventually("every deletion delivered", || deleted.lock().len() == 2).await;
    assert_eq!(informer.lister().len(), 0, "the cache is emptied");
    assert!(!informer.is_stopped(), "it waits for the resource");
    let status = apps_status(&factory);
    assert_eq!(
        status.to_string(),
        format!("{}(all): synced, no longer served", apps())
    );
    assert!(config_maps.lister().len() == 1 && !config_maps.is_stopped());

    // Installed again: the cache converges to the server's objects.
    server.register_info(apps_info());
    create_app(&server, "a3");
    eventually("served again and listed", || {
        informer.lister().keys() == ["demo/a3"]
    })
    .await;
    assert_eq!(apps_status(&factory).availability, Availability::Served);
    factory.shutdown().await.expect("a clean shutdown");
    server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn told_to_an_informer_stops_when_its_resource_goes_away_and_is_created_again() {
    let server = start().await;
    server.register_info(apps_info());
    create_app(&server, "a1");
    let factory = factory(&server).with_stop_when_not_served(true);
    let informer = factory.informer_for(&apps());
    let registration = consumer(&informer);
    start_and_sync(&factory, 1).await;

    server.unregister(&apps_info()).expect("registered");
    eventually("it stops", || informer.is_stopped()).await;
    tokio::time::timeout(LONG, registration.stopped())
        .await
        .expect("its consumer is stopped");
    let status = apps_status(&factory);
    assert!(status.stopped && status.is_not_served(), "{status}");
    let health = factory.health(&HealthOptions::default());
    assert!(health.is_live() && !health.is_ready(), "{health}");
    assert!(health.is_ready_served(), "{health}");
    assert!(
        status.to_string().ends_with("stopped, no longer served"),
        "{status}"
    );

    // Removed, then requested again once the CRD is back: a fresh informer, synced anew.
    let removed = factory.remove_for(&apps(), InformerOptions::new()).await;
    assert!(removed.expect("it ended cleanly"));
    server.register_info(apps_info());
    create_app(&server, "a2");
    let fresh = factory.informer_for(&apps());
    assert!(!Arc::ptr_eq(&fresh, &informer));
    start_and_sync(&factory, 1).await;
    assert_eq!(fresh.lister().keys(), ["demo/a2"]);
    factory.shutdown().await.expect("a clean shutdown");
    server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_removed_informer_ends_its_consumers_and_leaves_the_others_running() {
    let server = start().await;
    server.register_info(apps_info());
    create_app(&server, "a1");
    let factory = factory(&server);
    let config_maps = factory.informer::<ConfigMap>();
    let informer = factory.informer_for(&apps());
    let registration = informer
        .add_event_handler(ResourceEventHandlerFuncs::new(), HandlerOptions::new())
        .expect("registered");
    let mut subscription = informer
        .subscribe(HandlerOptions::new())
        .expect("subscribed");
    factory.start().expect("started");
    let report = factory.wait_for_cache_sync(Some(LONG)).await;
    assert!(report.all_synced(), "{report}");

    let removed = factory.remove_for(&apps(), InformerOptions::new()).await;
    assert!(removed.expect("a clean stop"));
    assert!(informer.is_stopped() && registration.is_stopped());
    let drained =
        tokio::time::timeout(LONG, async { while subscription.next().await.is_some() {} }).await;
    assert!(drained.is_ok(), "the subscription's stream ends");
    assert_eq!(factory.informers().len(), 1);
    assert_eq!(factory.stats().len(), 1);

    // The other informer goes on following the server.
    server.create(&config_map("more")).expect("created");
    eventually("the config maps informer sees a new one", || {
        config_maps.lister().len() == 2
    })
    .await;
    assert!(!config_maps.is_stopped());

    // Created again: a new informer, listed and synced anew, with what the server has now.
    create_app(&server, "a2");
    let fresh = factory.informer_for(&apps());
    assert!(!Arc::ptr_eq(&fresh, &informer));
    start_and_sync(&factory, 1).await;
    assert_eq!(fresh.lister().len(), 2);
    factory.shutdown().await.expect("a clean shutdown");
    server.shutdown().await;
}
