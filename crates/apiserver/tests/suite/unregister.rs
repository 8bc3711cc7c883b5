//! A resource added and removed while the server runs, as a CRD is installed and deleted:
//! `ApiServer::register_info` and `ApiServer::unregister`, seen through kube-client.

use std::time::Duration;

use futures::StreamExt;
use informer_apiserver::{ApiServer, Config, Error, ResourceInfo};
use kube::api::{Api, ApiResource, DynamicObject, ListParams, WatchEvent, WatchParams};
use kube::core::GroupVersionKind;
use serde_json::json;

/// Generous bound for anything that should happen "at once".
const WAIT: Duration = Duration::from_secs(10);

fn apps() -> ResourceInfo {
    ResourceInfo::custom("example.informers.dev", "v1", "App", "apps", true)
}

async fn start() -> (ApiServer, kube::Client) {
    let server = ApiServer::start(Config::for_tests(Duration::from_secs(60)))
        .await
        .expect("server starts");
    let mut config = kube::Config::new(server.url().parse().expect("a valid URL"));
    config.default_retry = false;
    let client = kube::Client::try_from(config).expect("a client");
    (server, client)
}

fn app_api(client: &kube::Client) -> Api<DynamicObject> {
    let resource = ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("example.informers.dev", "v1", "App"),
        "apps",
    );
    Api::namespaced_with(client.clone(), "demo", &resource)
}

fn create_app(server: &ApiServer, name: &str) {
    server
        .create_value(
            &apps(),
            json!({"metadata": {"name": name, "namespace": "demo"}, "spec": {"replicas": 1}}),
        )
        .expect("created");
}

/// A watch of `api` from the version of `listed`.
async fn watch_from(
    api: &Api<DynamicObject>,
    listed: &kube::core::ObjectList<DynamicObject>,
) -> futures::stream::BoxStream<'static, kube::Result<WatchEvent<DynamicObject>>> {
    let rv = listed
        .metadata
        .resource_version
        .as_deref()
        .expect("a list version");
    api.watch(&WatchParams::default(), rv)
        .await
        .expect("a watch")
        .boxed()
}

/// The code and reason of a failed kube-client call.
fn status_of<T>(result: kube::Result<T>) -> (u16, String, String) {
    match result {
        Err(kube::Error::Api(status)) => (status.code, status.reason, status.message),
        Err(other) => panic!("expected an API error, got {other}"),
        Ok(_) => panic!("expected an API error, got a success"),
    }
}

#[tokio::test]
async fn an_unregistered_resource_deletes_its_objects_closes_its_watches_and_is_404() {
    let (server, client) = start().await;
    server.register_info(apps());
    create_app(&server, "a");
    create_app(&server, "b");
    let api = app_api(&client);
    let listed = api.list(&ListParams::default()).await.expect("served");
    assert_eq!(listed.items.len(), 2);
    let mut watch = watch_from(&api, &listed).await;

    assert_eq!(server.unregister(&apps()).expect("registered"), 2);

    // What the watcher sees: a DELETED per object, then the end of the stream, no ERROR.
    let mut deleted = Vec::new();
    loop {
        let event = tokio::time::timeout(WAIT, watch.next())
            .await
            .expect("the watch goes on or ends in time");
        match event {
            None => break,
            Some(Ok(WatchEvent::Deleted(obj))) => deleted.push(obj.metadata.name.unwrap()),
            Some(Ok(WatchEvent::Bookmark(_))) => {}
            Some(other) => panic!("unexpected {other:?}"),
        }
    }
    assert_eq!(deleted, ["a", "b"]);
    tokio::time::timeout(WAIT, async {
        while server.open_watches() > 0 {
            tokio::task::yield_now().await;
        }
    })
    .await
    .expect("the watch is closed on the server's side too");

    // Every request now is kube-apiserver's 404 for a path it does not serve.
    let not_found = (
        404,
        "NotFound".to_owned(),
        "the server could not find the requested resource".to_owned(),
    );
    assert_eq!(status_of(api.list(&ListParams::default()).await), not_found);
    assert_eq!(
        status_of(api.watch(&WatchParams::default(), "0").await),
        not_found
    );
    assert_eq!(status_of(api.get("a").await), not_found);
    // Discovery no longer shows the group.
    let groups = client.list_api_groups().await.expect("discovery");
    assert!(
        groups
            .groups
            .iter()
            .all(|g| g.name != "example.informers.dev"),
        "{groups:?}"
    );
    assert_eq!(
        status_of(
            client
                .list_api_group_resources("example.informers.dev/v1")
                .await
        )
        .0,
        404
    );
    // The Rust handle refuses it too, and a second unregister finds nothing to remove.
    assert!(matches!(
        server.create_value(
            &apps(),
            json!({"metadata": {"name": "c", "namespace": "demo"}})
        ),
        Err(Error::NotRegistered(_))
    ));
    assert!(matches!(
        server.unregister(&apps()),
        Err(Error::NotRegistered(_))
    ));
}

#[tokio::test]
async fn a_resource_registered_again_is_served_empty_and_watched_anew() {
    let (server, client) = start().await;
    let api = app_api(&client);
    assert_eq!(status_of(api.list(&ListParams::default()).await).0, 404);

    server.register_info(apps());
    let groups = client.list_api_groups().await.expect("discovery");
    assert!(
        groups
            .groups
            .iter()
            .any(|g| g.name == "example.informers.dev")
    );
    create_app(&server, "a");
    server.unregister(&apps()).expect("registered");
    server.register_info(apps());

    let listed = api
        .list(&ListParams::default())
        .await
        .expect("served again");
    assert!(listed.items.is_empty(), "{listed:?}");
    let resources = client
        .list_api_group_resources("example.informers.dev/v1")
        .await
        .expect("discovered again");
    assert_eq!(resources.resources[0].name, "apps");

    let mut watch = watch_from(&api, &listed).await;
    create_app(&server, "b");
    let event = tokio::time::timeout(WAIT, watch.next())
        .await
        .expect("an event in time");
    match event {
        Some(Ok(WatchEvent::Added(obj))) => assert_eq!(obj.metadata.name.as_deref(), Some("b")),
        other => panic!("expected the new object, got {other:?}"),
    }
}
