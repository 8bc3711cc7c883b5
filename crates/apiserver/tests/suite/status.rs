//! The `/status` subresource over raw HTTP, as kube-apiserver's status strategies serve it: a
//! status write changes the status alone (and what the type lets through), the main resource
//! keeps the stored status, `generation` follows the spec; types without the subresource `404`.

use crate::http;

use std::time::Duration;

use http::{APPLY, JSON, MERGE, apply, entries, get, send, start, start_with, write};
use informer_apiserver::{Config, ResourceInfo};
use serde_json::{Value, json};

const POD: &str = "/api/v1/namespaces/demo/pods/web-0";

async fn create_pod(server: &informer_apiserver::ApiServer) -> Value {
    let pod = json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "web-0", "namespace": "demo", "labels": {"app": "web"},
            "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "rs",
                "uid": "6f0d7a3e-0000-4000-8000-000000000001"}]},
        "spec": {"nodeName": "node-1", "containers": [{"name": "app", "image": "nginx:1"}]},
    });
    write(
        server,
        "POST",
        "/api/v1/namespaces/demo/pods?fieldManager=creator",
        JSON,
        &pod.to_string(),
    )
    .await
    .object(201)
}

#[tokio::test]
async fn a_status_write_changes_the_status_and_keeps_the_spec() {
    let server = start().await;
    let created = create_pod(&server).await;
    assert_eq!(created["metadata"]["generation"], 1);
    // A PUT of /status that also tries to change the spec and the owner references.
    let mut body = created.clone();
    body["spec"]["containers"][0]["image"] = json!("nginx:2");
    body["metadata"]["ownerReferences"] = json!([]);
    body["metadata"]["labels"]["ready"] = json!("yes");
    body["status"] = json!({"phase": "Running"});
    let updated = write(
        &server,
        "PUT",
        &format!("{POD}/status?fieldManager=kubelet"),
        JSON,
        &body.to_string(),
    )
    .await
    .object(200);
    assert_eq!(
        updated["spec"], created["spec"],
        "the spec is the stored one"
    );
    assert_eq!(
        updated["metadata"]["ownerReferences"],
        created["metadata"]["ownerReferences"]
    );
    assert_eq!(
        updated["metadata"]["labels"]["ready"], "yes",
        "pods let labels through"
    );
    // The QoS class the write left out is kept.
    assert_eq!(
        updated["status"],
        json!({"phase": "Running", "qosClass": "BestEffort"})
    );
    assert_eq!(
        updated["metadata"]["generation"], 1,
        "a status write is no spec change"
    );
    assert_ne!(
        updated["metadata"]["resourceVersion"],
        created["metadata"]["resourceVersion"]
    );
    let kubelet = entries(&updated)
        .into_iter()
        .find(|e| e.0 == "kubelet")
        .expect("the kubelet's entry");
    assert_eq!(kubelet.1, "Update");
    assert_eq!(kubelet.2, "status");
    assert_eq!(
        kubelet.3,
        json!({"f:metadata": {"f:labels": {"f:ready": {}}}, "f:status": {"f:phase": {}}})
    );
    // GET of /status is the whole object.
    assert_eq!(
        get(&server, &format!("{POD}/status")).await.object(200),
        updated
    );

    // A merge patch of /status: the spec part is dropped.
    let patched = write(
        &server,
        "PATCH",
        &format!("{POD}/status"),
        MERGE,
        r#"{"spec":{"nodeName":"node-2"},"status":{"podIP":"10.0.0.1"}}"#,
    )
    .await
    .object(200);
    assert_eq!(patched["spec"]["nodeName"], "node-1");
    assert_eq!(patched["status"]["podIP"], "10.0.0.1");

    // An apply of /status: conditions merge by type; the entry is on the subresource.
    let conditions = json!({"apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "web-0", "namespace": "demo"},
        "spec": {"nodeName": "elsewhere"},
        "status": {"conditions": [{"type": "Ready", "status": "True"}]}});
    let applied = apply(
        &server,
        &format!("{POD}/status"),
        "status-applier",
        false,
        &conditions.to_string(),
    )
    .await
    .object(200);
    assert_eq!(applied["spec"]["nodeName"], "node-1");
    assert_eq!(
        applied["status"]["conditions"],
        json!([{"type": "Ready", "status": "True"}])
    );
    let entry = applied["metadata"]["managedFields"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["manager"] == "status-applier")
        .unwrap()
        .clone();
    assert_eq!(entry["operation"], "Apply");
    assert_eq!(entry["subresource"], "status");
    assert_eq!(
        entry["fieldsV1"],
        json!({"f:status": {"f:conditions": {"k:{\"type\":\"Ready\"}": {
            ".": {}, "f:status": {}, "f:type": {}}}}})
    );
}

#[tokio::test]
async fn the_main_resource_keeps_the_stored_status_and_bumps_generation_on_spec_changes() {
    let server = start().await;
    let created = create_pod(&server).await;
    let mut body = created.clone();
    body["spec"]["containers"][0]["image"] = json!("nginx:2");
    body["status"] = json!({"phase": "Failed"});
    let updated = write(&server, "PUT", POD, JSON, &body.to_string())
        .await
        .object(200);
    assert_eq!(updated["spec"]["containers"][0]["image"], "nginx:2");
    assert_eq!(
        updated["status"], created["status"],
        "the status is the stored one"
    );
    assert_eq!(updated["metadata"]["generation"], 2);
    // A patch of the status alone changes nothing: no new revision.
    let head = server.resource_version();
    let same = write(
        &server,
        "PATCH",
        POD,
        MERGE,
        r#"{"status":{"phase":"Failed"}}"#,
    )
    .await
    .object(200);
    assert_eq!(same, updated);
    assert_eq!(server.resource_version(), head);
    // A label changes the metadata, not the spec: same generation.
    let labelled = write(
        &server,
        "PATCH",
        POD,
        MERGE,
        r#"{"metadata":{"labels":{"x":"1"}}}"#,
    )
    .await
    .object(200);
    assert_eq!(labelled["metadata"]["generation"], 2);
    // An apply of the main resource owns no status field.
    let applied = apply(
        &server,
        POD,
        "applier",
        false,
        &json!({"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "web-0", "namespace": "demo", "labels": {"y": "1"}},
            "status": {"phase": "Succeeded"}})
        .to_string(),
    )
    .await
    .object(200);
    assert_eq!(applied["status"], created["status"]);
    let entry = entries(&applied)
        .into_iter()
        .find(|e| e.0 == "applier")
        .unwrap();
    assert_eq!(entry.3, json!({"f:metadata": {"f:labels": {"f:y": {}}}}));
}

#[tokio::test]
async fn types_without_the_subresource_answer_404_and_it_serves_only_reads_and_writes() {
    let server = start().await;
    write(
        &server,
        "POST",
        "/api/v1/namespaces/demo/configmaps",
        JSON,
        r#"{"metadata":{"name":"c"},"data":{"a":"1"}}"#,
    )
    .await
    .object(201);
    for (method, content_type) in [
        ("GET", JSON),
        ("PUT", JSON),
        ("PATCH", MERGE),
        ("PATCH", APPLY),
    ] {
        let x = write(
            &server,
            method,
            "/api/v1/namespaces/demo/configmaps/c/status?fieldManager=m",
            content_type,
            "{}",
        )
        .await;
        assert_eq!(
            x.text,
            "{\"apiVersion\":\"v1\",\"code\":404,\"details\":{},\"kind\":\"Status\",\"message\":\
             \"the server could not find the requested resource\",\"metadata\":{},\
             \"reason\":\"NotFound\",\"status\":\"Failure\"}",
            "{method} {content_type}"
        );
    }
    create_pod(&server).await;
    // Another subresource is not served.
    get(&server, &format!("{POD}/scale"))
        .await
        .status_of(404, "NotFound");
    // Delete is not a verb of /status.
    send(&server, "DELETE", &format!("{POD}/status"), &[], b"")
        .await
        .status_of(405, "MethodNotAllowed");
    // A missing object: 404 for reads and writes, and an apply creates nothing.
    let status = get(&server, "/api/v1/namespaces/demo/pods/nope/status")
        .await
        .status_of(404, "NotFound");
    assert_eq!(status["message"], "pods \"nope\" not found");
    let pod = json!({"apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "nope", "namespace": "demo"}, "status": {"phase": "Running"}});
    apply(
        &server,
        "/api/v1/namespaces/demo/pods/nope/status",
        "m",
        false,
        &pod.to_string(),
    )
    .await
    .status_of(404, "NotFound");
}

#[tokio::test]
async fn namespaces_and_nodes_write_their_status_at_their_own_paths() {
    let server = start().await;
    write(
        &server,
        "POST",
        "/api/v1/namespaces",
        JSON,
        r#"{"metadata":{"name":"team"},"spec":{"finalizers":["kubernetes"]}}"#,
    )
    .await
    .object(201);
    let ns = write(
        &server,
        "PATCH",
        "/api/v1/namespaces/team/status",
        MERGE,
        r#"{"spec":{"finalizers":[]},"status":{"phase":"Terminating"}}"#,
    )
    .await
    .object(200);
    assert_eq!(ns["status"]["phase"], "Terminating");
    assert_eq!(ns["spec"]["finalizers"], json!(["kubernetes"]));
    write(
        &server,
        "POST",
        "/api/v1/nodes",
        JSON,
        r#"{"metadata":{"name":"node-1"},"spec":{"podCIDR":"10.0.0.0/24"},
            "status":{"capacity":{"cpu":"4"}}}"#,
    )
    .await
    .object(201);
    let node = write(
        &server,
        "PATCH",
        "/api/v1/nodes/node-1/status",
        MERGE,
        r#"{"spec":{"unschedulable":true},"status":{"capacity":{"cpu":"8"}}}"#,
    )
    .await
    .object(200);
    assert_eq!(node["status"]["capacity"]["cpu"], "8");
    assert_eq!(node["spec"], json!({"podCIDR": "10.0.0.0/24"}));
}

#[tokio::test]
async fn custom_resources_have_a_status_subresource_when_their_definition_declares_one() {
    let with = ResourceInfo::custom("example.com", "v1", "Widget", "widgets", true)
        .with_status_subresource(true);
    let without = ResourceInfo::custom("example.com", "v1", "Gadget", "gadgets", true);
    let server = start_with(
        Config::for_tests(Duration::from_millis(100))
            .register_info(with)
            .register_info(without),
    )
    .await;
    let path = "/apis/example.com/v1/namespaces/demo/widgets/w";
    // A create drops the status; every custom resource has a generation.
    let created = write(
        &server,
        "POST",
        "/apis/example.com/v1/namespaces/demo/widgets",
        JSON,
        r#"{"apiVersion":"example.com/v1","kind":"Widget","metadata":{"name":"w"},
            "spec":{"size":1},"status":{"ready":true}}"#,
    )
    .await
    .object(201);
    assert_eq!(created.get("status"), None);
    assert_eq!(created["metadata"]["generation"], 1);
    // /status takes the status and nothing else, labels included; no new generation.
    let mut body = created.clone();
    body["spec"]["size"] = json!(5);
    body["metadata"]["labels"] = json!({"x": "1"});
    body["status"] = json!({"ready": true});
    let status = write(
        &server,
        "PUT",
        &format!("{path}/status"),
        JSON,
        &body.to_string(),
    )
    .await
    .object(200);
    assert_eq!(status["status"], json!({"ready": true}));
    assert_eq!(status["spec"], json!({"size": 1}));
    assert_eq!(status["metadata"].get("labels"), None);
    assert_eq!(status["metadata"]["generation"], 1);
    // The main resource keeps the status; a spec change is a new generation, a label is not.
    let main = write(
        &server,
        "PATCH",
        path,
        MERGE,
        r#"{"spec":{"size":2},"status":{"ready":false}}"#,
    )
    .await
    .object(200);
    assert_eq!(main["status"], json!({"ready": true}));
    assert_eq!(main["metadata"]["generation"], 2);
    let labelled = write(
        &server,
        "PATCH",
        path,
        MERGE,
        r#"{"metadata":{"labels":{"a":"b"}}}"#,
    )
    .await
    .object(200);
    assert_eq!(labelled["metadata"]["generation"], 2);

    // Without the subresource: /status is 404, and the status is an ordinary field whose
    // changes are new generations.
    let gadgets = "/apis/example.com/v1/namespaces/demo/gadgets";
    let gadget = write(
        &server,
        "POST",
        gadgets,
        JSON,
        r#"{"apiVersion":"example.com/v1","kind":"Gadget","metadata":{"name":"g"},"status":{"ok":1}}"#,
    )
    .await
    .object(201);
    assert_eq!(gadget["status"], json!({"ok": 1}));
    assert_eq!(gadget["metadata"]["generation"], 1);
    get(&server, &format!("{gadgets}/g/status"))
        .await
        .status_of(404, "NotFound");
    let changed = write(
        &server,
        "PATCH",
        &format!("{gadgets}/g"),
        MERGE,
        r#"{"status":{"ok":2}}"#,
    )
    .await
    .object(200);
    assert_eq!(changed["metadata"]["generation"], 2);
}
