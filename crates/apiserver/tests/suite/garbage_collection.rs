//! The optional garbage collector (`Config::garbage_collection`): a deleted owner's dependents
//! are deleted in the background, down the chain, unless another owner of theirs exists; off,
//! nothing cascades.

use crate::http;

use std::time::Duration;

use http::{JSON, get, send, write};
use informer_apiserver::{ApiServer, Config};
use serde_json::{Value, json};

const CONFIG_MAPS: &str = "/api/v1/namespaces/demo/configmaps";

async fn create(server: &ApiServer, name: &str, owners: &[&Value]) -> Value {
    let references: Vec<Value> = owners
        .iter()
        .map(|o| {
            json!({"apiVersion": "v1", "kind": "ConfigMap",
                "name": o["metadata"]["name"], "uid": o["metadata"]["uid"]})
        })
        .collect();
    let body = json!({"metadata": {"name": name, "ownerReferences": references}});
    write(server, "POST", CONFIG_MAPS, JSON, &body.to_string())
        .await
        .object(201)
}

async fn exists(server: &ApiServer, name: &str) -> bool {
    get(server, &format!("{CONFIG_MAPS}/{name}")).await.status == 200
}

/// Waits until `name` is gone (the collector runs in the background).
async fn wait_gone(server: &ApiServer, name: &str) {
    let gone = async {
        while exists(server, name).await {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    };
    tokio::time::timeout(http::WAIT, gone)
        .await
        .unwrap_or_else(|_| panic!("{name} still exists"));
}

#[tokio::test]
async fn dependents_of_a_deleted_owner_are_collected_unless_another_owner_remains() {
    let config = Config {
        garbage_collection: true,
        ..Config::for_tests(Duration::from_millis(100))
    };
    let server = http::start_with(config).await;
    let parent = create(&server, "parent", &[]).await;
    let other = create(&server, "other", &[]).await;
    let child = create(&server, "child", &[&parent]).await;
    create(&server, "grandchild", &[&child]).await;
    create(&server, "shared", &[&parent, &other]).await;
    let pod = json!({"metadata": {"name": "web", "namespace": "demo", "ownerReferences": [
            {"apiVersion": "v1", "kind": "ConfigMap", "name": "parent",
             "uid": parent["metadata"]["uid"]}]},
        "spec": {"containers": [{"name": "c", "image": "i"}]}});
    write(
        &server,
        "POST",
        "/api/v1/namespaces/demo/pods",
        JSON,
        &pod.to_string(),
    )
    .await
    .object(201);

    send(
        &server,
        "DELETE",
        &format!("{CONFIG_MAPS}/parent"),
        &[],
        b"",
    )
    .await
    .object(200);
    wait_gone(&server, "child").await;
    wait_gone(&server, "grandchild").await;
    let pods_gone = async {
        while get(&server, "/api/v1/namespaces/demo/pods/web")
            .await
            .status
            == 200
        {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    };
    tokio::time::timeout(http::WAIT, pods_gone)
        .await
        .expect("the pod collected");
    // The object with another owner stays, without the reference to the deleted one.
    let kept = async {
        loop {
            let shared = get(&server, &format!("{CONFIG_MAPS}/shared"))
                .await
                .object(200);
            let owners = shared["metadata"]["ownerReferences"]
                .as_array()
                .unwrap()
                .len();
            if owners == 1 {
                return shared;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    };
    let shared = tokio::time::timeout(http::WAIT, kept)
        .await
        .expect("the reference removed");
    assert_eq!(shared["metadata"]["ownerReferences"][0]["name"], "other");
    assert!(exists(&server, "other").await);
}

#[tokio::test]
async fn without_the_collector_nothing_cascades() {
    let server = http::start().await;
    let parent = create(&server, "parent", &[]).await;
    create(&server, "child", &[&parent]).await;
    send(
        &server,
        "DELETE",
        &format!("{CONFIG_MAPS}/parent"),
        &[],
        b"",
    )
    .await
    .object(200);
    // No collector runs: the child stays.
    assert!(exists(&server, "child").await);
}
