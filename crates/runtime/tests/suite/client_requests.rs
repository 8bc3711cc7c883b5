//! What `Client`'s writes ask of the API server, and how it takes the answers: against a fake
//! server that records each request and answers from a script (server-side apply and the
//! `/status` subresource among them, with a 409 Conflict for an apply).

use std::sync::Arc;

use informer_runtime::{Client, ClientError};
use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::{Patch, PatchParams, PostParams};
use parking_lot::Mutex;
use serde_json::{Value, json};

/// A request as the fake server saw it.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Seen {
    method: String,
    path_and_query: String,
    content_type: String,
}

/// A kube client over a fake server answering every request with `status` and `body`, and
/// the requests it saw.
fn fake(status: u16, body: Value) -> (kube::Client, Arc<Mutex<Vec<Seen>>>) {
    let seen = Arc::new(Mutex::new(Vec::new()));
    let log = Arc::clone(&seen);
    let service = tower::service_fn(move |request: http::Request<kube::client::Body>| {
        let header = request.headers().get(http::header::CONTENT_TYPE);
        log.lock().push(Seen {
            method: request.method().to_string(),
            path_and_query: request.uri().to_string(),
            content_type: header
                .and_then(|h| h.to_str().ok())
                .unwrap_or_default()
                .to_owned(),
        });
        let response = http::Response::builder()
            .status(status)
            .header(http::header::CONTENT_TYPE, "application/json")
            .body(kube::client::Body::from(serde_json::to_vec(&body).unwrap()));
        async move { response }
    });
    (kube::Client::new(service, "demo"), seen)
}

fn config_map(resource_version: &str) -> Value {
    json!({
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": "c", "namespace": "demo", "resourceVersion": resource_version},
        "data": {"a": "1"},
    })
}

fn desired() -> ConfigMap {
    ConfigMap {
        metadata: ObjectMeta {
            name: Some("c".into()),
            namespace: Some("demo".into()),
            ..Default::default()
        },
        data: Some([("a".to_owned(), "1".to_owned())].into()),
        ..Default::default()
    }
}

fn conflict() -> Value {
    json!({
        "kind": "Status",
        "apiVersion": "v1",
        "status": "Failure",
        "message": "Apply failed with 1 conflict: conflict with \"other\": .data.a",
        "reason": "Conflict",
        "code": 409,
        "details": {"causes": [{
            "reason": "FieldManagerConflict",
            "message": "conflict with \"other\"",
            "field": ".data.a",
        }]},
    })
}

const APPLY: &str = "application/apply-patch+yaml";

impl Seen {
    /// The path, without the query.
    fn path(&self) -> &str {
        self.path_and_query.split('?').next().unwrap_or_default()
    }

    /// The query's parameters, sorted.
    fn query(&self) -> Vec<&str> {
        let query = self.path_and_query.split_once('?').map_or("", |(_, q)| q);
        let mut params: Vec<&str> = query.split('&').filter(|p| !p.is_empty()).collect();
        params.sort_unstable();
        params
    }
}

#[tokio::test]
async fn an_apply_is_a_server_side_apply_patch_with_its_field_manager_and_force() {
    let (kube, seen) = fake(200, config_map("7"));
    let client = Client::new(kube);
    let applied = client.apply(&desired(), "ours", true).await.unwrap();
    assert_eq!(applied.metadata.resource_version.as_deref(), Some("7"));
    client.apply(&desired(), "ours", false).await.unwrap();
    let seen = seen.lock().clone();
    let path = "/api/v1/namespaces/demo/configmaps/c";
    assert_eq!(seen[0].method, "PATCH");
    assert_eq!(seen[0].content_type, APPLY);
    assert_eq!(seen[0].path(), path);
    assert_eq!(seen[0].query(), ["fieldManager=ours", "force=true"]);
    assert_eq!(seen[1].path(), path);
    assert_eq!(seen[1].query(), ["fieldManager=ours"]);
}

#[tokio::test]
async fn a_refused_apply_is_an_apply_conflict_naming_the_fields() {
    let (kube, _) = fake(409, conflict());
    let client = Client::new(kube);
    let error = client.apply(&desired(), "ours", false).await.unwrap_err();
    assert!(error.is_apply_conflict(), "{error:?}");
    assert_eq!(error.conflicting_fields(), [".data.a"]);
    assert_eq!(error.status().map(|s| s.code), Some(409));
    let error = client
        .apply_status(&desired(), "ours", false)
        .await
        .unwrap_err();
    assert!(error.is_apply_conflict(), "{error:?}");
    // The same answer to a patch that is no apply (a replace's stale version, say) stays an
    // API error: transient, for a backoff.
    let error = client
        .patch::<ConfigMap, _>(
            Some("demo"),
            "c",
            &PatchParams::default(),
            &Patch::Merge(json!({"data": {"a": "2"}})),
        )
        .await
        .unwrap_err();
    assert!(matches!(error, ClientError::Api(_)), "{error:?}");
    assert!(error.conflicting_fields().is_empty());
}

/// An apply whose configuration carries a stale `metadata.resourceVersion` is refused with a
/// 409 Conflict too, but with no field-manager conflict: that one is transient, an API error.
#[tokio::test]
async fn an_apply_refused_for_a_stale_version_is_no_apply_conflict() {
    let stale = json!({
        "kind": "Status", "apiVersion": "v1", "status": "Failure",
        "message": "Operation cannot be fulfilled on configmaps \"c\": the object has been modified; please apply your changes to the latest version and try again",
        "reason": "Conflict", "code": 409,
        "details": {"name": "c", "kind": "configmaps"},
    });
    let (kube, _) = fake(409, stale);
    let client = Client::new(kube);
    let error = client.apply(&desired(), "ours", false).await.unwrap_err();
    assert!(matches!(error, ClientError::Api(_)), "{error:?}");
    assert!(!error.is_apply_conflict());
    assert_eq!(error.status().map(|s| s.code), Some(409));
}

#[tokio::test]
async fn status_writes_go_to_the_status_subresource() {
    let (kube, seen) = fake(200, config_map("9"));
    let client = Client::new(kube);
    let status = "/api/v1/namespaces/demo/configmaps/c/status";
    let patched: ConfigMap = client
        .patch_status(
            Some("demo"),
            "c",
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {}})),
        )
        .await
        .unwrap();
    assert_eq!(patched.metadata.resource_version.as_deref(), Some("9"));
    client
        .replace_status(&PostParams::default(), &desired())
        .await
        .unwrap();
    client.apply_status(&desired(), "ours", true).await.unwrap();
    let seen = seen.lock().clone();
    assert_eq!(
        (seen[0].method.as_str(), seen[0].content_type.as_str()),
        ("PATCH", "application/merge-patch+json")
    );
    assert_eq!(seen[0].path(), status);
    assert_eq!(seen[1].method, "PUT");
    assert_eq!(seen[1].path(), status);
    assert_eq!(
        (seen[2].method.as_str(), seen[2].content_type.as_str()),
        ("PATCH", APPLY)
    );
    assert_eq!(seen[2].path(), status);
    assert_eq!(seen[2].query(), ["fieldManager=ours", "force=true"]);
    // Outside a reconcile: made, counted, recorded for no key (the client reads no
    // ConfigMaps here, so there is nothing to record them in anyway).
    assert_eq!(client.stats().writes, 3);
}

#[tokio::test]
async fn an_object_without_a_name_is_neither_replaced_nor_applied() {
    let (kube, seen) = fake(200, config_map("1"));
    let client = Client::new(kube);
    let mut unnamed = desired();
    unnamed.metadata.name = None;
    assert!(matches!(
        client.apply(&unnamed, "ours", false).await,
        Err(ClientError::NoName { .. })
    ));
    assert!(matches!(
        client.replace(&PostParams::default(), &unnamed).await,
        Err(ClientError::NoName { .. })
    ));
    assert!(seen.lock().is_empty(), "nothing sent");
}
