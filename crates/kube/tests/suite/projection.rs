//! A user-defined partial type (a projection of a pod: metadata, `spec.nodeName`,
//! `status.phase`) through the kube adapter and the factory, against the API server simulator:
//! list, watch (add, update, delete), an index by node, the namespace index, a transform.

use std::sync::Arc;
use std::time::Duration;

use informer_apiserver::{ApiServer, Config};
use informer_factory::InformerOptions;
use informer_kube::{KubeInformerFactory, KubeSource, strip_managed_fields};
use informer_store::{IndexValues, NAMESPACE_INDEX, index_func};
use informer_testing::eventually;
use k8s_openapi::api::core::v1::Pod;

use crate::slim_pod;

use slim_pod::SlimPod;

const LONG: Duration = Duration::from_secs(20);

/// A pod with a full spec and status, of which a `SlimPod` keeps three things.
fn pod(ns: &str, name: &str, node: &str, phase: &str) -> Pod {
    serde_json::from_value(serde_json::json!({
        "metadata": {
            "name": name, "namespace": ns, "labels": {"app": "web"},
            "managedFields": [{
                "manager": "kubectl", "operation": "Update", "apiVersion": "v1",
                "fieldsType": "FieldsV1", "fieldsV1": {"f:metadata": {"f:labels": {"f:app": {}}}}
            }]
        },
        "spec": {
            "nodeName": node,
            "containers": [{"name": "c", "image": "app", "ports": [{"containerPort": 80}]}]
        },
        "status": {"phase": phase, "podIP": "10.0.0.9", "conditions": [{"type": "Ready", "status": "True"}]}
    }))
    .unwrap()
}

/// Creates `pod(...)`; the server resets a new pod's status to `Pending` (as kube-apiserver
/// does), so any other phase is set by a patch after. Returns the pod as stored.
fn create(server: &ApiServer, ns: &str, name: &str, node: &str, phase: &str) -> Pod {
    let created = server.create(&pod(ns, name, node, phase)).unwrap();
    if phase == "Pending" {
        return created;
    }
    server
        .patch::<Pod>(
            Some(ns),
            name,
            &serde_json::json!({"status": {"phase": phase}}),
        )
        .unwrap()
}

fn client(server: &ApiServer) -> kube::Client {
    kube::Client::try_from(kube::Config::new(server.url().parse().unwrap())).unwrap()
}

fn node_index() -> informer_store::IndexFunc<SlimPod> {
    index_func(|p: &SlimPod| {
        Ok(p.spec
            .node_name
            .as_deref()
            .map(IndexValues::one)
            .unwrap_or_default())
    })
}

fn sorted(mut keys: Vec<String>) -> Vec<String> {
    keys.sort();
    keys
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_partial_type_is_listed_watched_indexed_and_shared_by_the_factory() {
    let server = ApiServer::start(Config::for_tests(Duration::from_millis(200)))
        .await
        .unwrap();
    let web_0 = create(&server, "a", "web-0", "n1", "Running");
    create(&server, "a", "web-1", "n2", "Pending");
    create(&server, "b", "db-0", "n1", "Running");

    let factory = KubeInformerFactory::new(KubeSource::new(client(&server)).with_managed_fields());
    let slim = factory.informer::<SlimPod>();
    assert!(Arc::ptr_eq(&slim, &factory.informer::<SlimPod>()));
    // The full type is another informer of its own, over the same pods.
    let full = factory.informer::<Pod>();
    assert_eq!(factory.informers().len(), 2);
    let by_node = slim.add_index("node", node_index()).unwrap();
    assert_eq!(factory.start().unwrap(), 2);
    let report = factory.wait_for_cache_sync(Some(LONG)).await;
    assert!(report.all_synced(), "{report}");

    // The list: every pod, with the projected fields as the server has them.
    let lister = slim.lister();
    assert_eq!(lister.len(), 3);
    assert_eq!(full.lister().len(), 3);
    let cached = lister.get("a/web-0").expect("a/web-0 cached");
    assert_eq!(cached.metadata.uid, web_0.metadata.uid);
    assert_eq!(
        cached.metadata.resource_version,
        web_0.metadata.resource_version
    );
    assert_eq!(
        cached.metadata.labels.as_ref().and_then(|l| l.get("app")),
        Some(&"web".to_owned())
    );
    assert_eq!(
        cached.metadata.managed_fields.as_ref().map(Vec::len),
        Some(1)
    );
    assert_eq!(cached.spec.node_name.as_deref(), Some("n1"));
    assert_eq!(cached.status.phase.as_deref(), Some("Running"));
    assert_eq!(
        lister
            .get("a/web-1")
            .and_then(|p| p.status.phase.clone())
            .as_deref(),
        Some("Pending")
    );
    // The indexes: the one the factory starts with, and ours by node.
    assert_eq!(
        sorted(lister.index_keys(NAMESPACE_INDEX, "a").unwrap()),
        ["a/web-0", "a/web-1"]
    );
    assert_eq!(
        sorted(lister.lookup_keys(&by_node, "n1").unwrap()),
        ["a/web-0", "b/db-0"]
    );
    assert_eq!(lister.lookup_keys(&by_node, "n2").unwrap(), ["a/web-1"]);

    // Watch, add: a new pod on n2.
    create(&server, "b", "db-1", "n2", "Pending");
    eventually("b/db-1 added", || lister.get("b/db-1").is_some()).await;
    assert_eq!(
        sorted(lister.lookup_keys(&by_node, "n2").unwrap()),
        ["a/web-1", "b/db-1"]
    );

    // Watch, update: a phase changes, and a pod moves to another node (a new object at the
    // same key: the node index must follow the cached object).
    let updated = server
        .patch::<Pod>(
            Some("a"),
            "web-1",
            &serde_json::json!({"status": {"phase": "Running"}}),
        )
        .unwrap();
    eventually("a/web-1 running", || {
        lister.get("a/web-1").and_then(|p| p.status.phase.clone()) == Some("Running".into())
    })
    .await;
    assert_eq!(
        lister.get("a/web-1").unwrap().metadata.resource_version,
        updated.metadata.resource_version
    );
    server
        .patch::<Pod>(
            Some("b"),
            "db-0",
            &serde_json::json!({"spec": {"nodeName": "n3"}}),
        )
        .unwrap();
    eventually("b/db-0 on n3", || {
        lister.lookup_keys(&by_node, "n3").unwrap() == ["b/db-0"]
    })
    .await;
    assert_eq!(lister.lookup_keys(&by_node, "n1").unwrap(), ["a/web-0"]);

    // Watch, delete.
    server.delete::<Pod>(Some("a"), "web-0").unwrap();
    eventually("a/web-0 deleted", || lister.get("a/web-0").is_none()).await;
    assert!(lister.lookup_keys(&by_node, "n1").unwrap().is_empty());
    assert_eq!(
        lister.index_keys(NAMESPACE_INDEX, "a").unwrap(),
        ["a/web-1"]
    );
    assert_eq!(lister.len(), 3);
    // The full informer saw the same history.
    eventually("the full informer follows", || {
        full.lister().get("a/web-0").is_none() && full.lister().len() == 3
    })
    .await;

    factory.shutdown().await.unwrap();
    server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_partial_type_takes_a_transform_through_the_factory() {
    let server = ApiServer::start(Config::for_tests(Duration::from_millis(200)))
        .await
        .unwrap();
    create(&server, "a", "web-0", "n1", "Running");

    let factory = KubeInformerFactory::new(KubeSource::new(client(&server)).with_managed_fields());
    let options = InformerOptions::new().transform("strip", strip_managed_fields::<SlimPod>());
    let stripped = factory.informer_with::<SlimPod>(options);
    let plain = factory.informer::<SlimPod>();
    assert!(!Arc::ptr_eq(&stripped, &plain));
    factory.start().unwrap();
    let report = factory.wait_for_cache_sync(Some(LONG)).await;
    assert!(report.all_synced(), "{report}");

    let get = |i: &informer::SharedIndexInformer<SlimPod>| {
        i.lister().get("a/web-0").expect("a/web-0 cached")
    };
    assert_eq!(get(&stripped).metadata.managed_fields, None);
    assert!(get(&plain).metadata.managed_fields.is_some());
    assert_eq!(get(&stripped).spec.node_name.as_deref(), Some("n1"));

    // Objects that arrive by watch are stripped too.
    create(&server, "a", "web-1", "n2", "Pending");
    eventually("a/web-1 added", || {
        stripped.lister().get("a/web-1").is_some()
    })
    .await;
    let web_1 = stripped.lister().get("a/web-1").unwrap();
    assert_eq!(web_1.metadata.managed_fields, None);
    assert_eq!(web_1.status.phase.as_deref(), Some("Pending"));

    factory.shutdown().await.unwrap();
    server.shutdown().await;
}
