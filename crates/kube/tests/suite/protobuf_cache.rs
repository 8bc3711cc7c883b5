//! The cache a reflector fills from protobuf against the one it fills from JSON, against the API
//! server simulator: the same objects, key for key, after a list and after a watch's adds,
//! updates and deletes.
//!
//! A `Pod` is read from protobuf by its generated decoder (with and without its managed fields);
//! a projection of a pod, which has none, by the serde path. Real time and real sockets; every
//! wait is on a condition with a generous bound.

use std::collections::BTreeMap;
use std::fmt::Debug;
use std::sync::Arc;
use std::time::Duration;

use informer_apiserver::{ApiServer, Config};
use informer_kube::{KubeListerWatcher, key_func};
use informer_protobuf::Generated;
use informer_reflector::Reflector;
use informer_store::{KnownObjects, ThreadSafeStore};
use informer_testing::eventually;
use k8s_openapi::api::core::v1::Pod;
use kube::core::NamespaceResourceScope;
use kube::{Api, Resource};
use serde::de::DeserializeOwned;
use serde_json::{Value, json};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

/// A pod as a real cluster has them: a dozen containers' worth of spec and status, owner
/// references, managed fields.
const REALISTIC: &str = include_str!("../../../../benches/fixtures/pod-realistic.json");

use crate::slim_pod;

use slim_pod::SlimPod;

/// What the caches here hold: a pod, or a projection of one.
trait Object:
    Resource<DynamicType = (), Scope = NamespaceResourceScope>
    + Clone
    + DeserializeOwned
    + Debug
    + PartialEq
    + Send
    + Sync
    + 'static
{
}

impl Object for Pod {}

impl Object for SlimPod {}

/// The realistic pod named `name`, without what the server sets.
fn realistic(name: &str) -> Value {
    let mut pod: Value = serde_json::from_str(REALISTIC).unwrap();
    let metadata = pod["metadata"].as_object_mut().unwrap();
    metadata.insert("name".into(), json!(name));
    for set_by_server in [
        "uid",
        "resourceVersion",
        "creationTimestamp",
        "generateName",
    ] {
        metadata.remove(set_by_server);
    }
    pod
}

/// Creates the realistic pod `name` and gives it its full status (the server resets a new
/// pod's status, as kube-apiserver does).
fn create(server: &ApiServer, name: &str) {
    let pod = realistic(name);
    let typed: Pod = serde_json::from_value(pod.clone()).unwrap();
    server.create(&typed).unwrap();
    let namespace = typed.metadata.namespace.as_deref();
    server
        .patch::<Pod>(namespace, name, &json!({"status": pod["status"]}))
        .unwrap();
}

/// A reflector filling a store of `K` from `lister_watcher`.
struct Cache<K: 'static> {
    lister_watcher: KubeListerWatcher<K>,
    store: Arc<ThreadSafeStore<K>>,
    stop: CancellationToken,
    task: JoinHandle<()>,
}

impl<K: Object> Cache<K> {
    fn start(lister_watcher: KubeListerWatcher<K>) -> Self {
        let store = Arc::new(ThreadSafeStore::new(key_func::<K>()));
        let reflector = Reflector::new(lister_watcher.clone(), store.clone())
            .with_min_watch_timeout(Duration::from_secs(30));
        let stop = CancellationToken::new();
        let task = tokio::spawn({
            let stop = stop.clone();
            async move { reflector.run(stop).await }
        });
        Self {
            lister_watcher,
            store,
            stop,
            task,
        }
    }

    /// key → object.
    fn objects(&self) -> BTreeMap<String, K> {
        self.store
            .list_keys()
            .into_iter()
            .filter_map(|k| self.store.get_by_key(&k).map(|o| (k, (*o).clone())))
            .collect()
    }

    /// key → resourceVersion.
    fn versions(&self) -> BTreeMap<String, String> {
        self.objects()
            .into_iter()
            .map(|(k, o)| (k, o.meta().resource_version.clone().unwrap_or_default()))
            .collect()
    }

    async fn stop(self) {
        self.stop.cancel();
        tokio::time::timeout(Duration::from_secs(10), self.task)
            .await
            .expect("the reflector stops")
            .unwrap();
    }
}

/// key → resourceVersion on the server.
fn truth(server: &ApiServer) -> BTreeMap<String, String> {
    let (pods, _) = server.list::<Pod>(None).unwrap();
    pods.into_iter()
        .map(|p| {
            let key = key_func::<Pod>()(&p).unwrap();
            (key, p.metadata.resource_version.unwrap_or_default())
        })
        .collect()
}

/// Waits until both caches hold what the server holds, then requires them equal, and each
/// read in its encoding only. Returns the protobuf cache's objects.
async fn same_caches<K: Object>(
    server: &ApiServer,
    protobuf: &Cache<K>,
    json: &Cache<K>,
    what: &str,
) -> BTreeMap<String, K> {
    eventually(what, || {
        let truth = truth(server);
        protobuf.versions() == truth && json.versions() == truth
    })
    .await;
    let objects = protobuf.objects();
    assert_eq!(objects, json.objects(), "{what}");
    let counts = protobuf.lister_watcher.encoding_counts();
    assert!(
        counts.protobuf > 0 && counts.json == 0,
        "{what}: {counts:?}"
    );
    let counts = json.lister_watcher.encoding_counts();
    assert!(
        counts.json > 0 && counts.protobuf == 0,
        "{what}: {counts:?}"
    );
    objects
}

/// A list of three realistic pods, then a watch that sees one added, one updated in spec,
/// status and managed fields, and one deleted: the protobuf cache equals the JSON one
/// throughout. `check` looks at the protobuf cache after each step.
async fn list_and_watch<K: Object>(
    without_managed_fields: bool,
    check: impl Fn(&BTreeMap<String, K>),
) {
    let server = ApiServer::start(Config::for_tests(Duration::from_millis(100)))
        .await
        .unwrap();
    for name in ["p0", "p1", "p2"] {
        create(&server, name);
    }
    let client = kube::Client::try_from(kube::Config::new(server.url().parse().unwrap())).unwrap();
    let lister_watcher = |json_only: bool| {
        let lw = KubeListerWatcher::new(Api::<K>::all(client.clone()));
        let lw = if json_only { lw.json_only() } else { lw };
        if without_managed_fields {
            lw.without_managed_fields()
        } else {
            lw
        }
    };
    let protobuf = Cache::start(lister_watcher(false));
    let json = Cache::start(lister_watcher(true));

    let listed = same_caches(&server, &protobuf, &json, "the list").await;
    assert_eq!(listed.len(), 3);
    check(&listed);

    create(&server, "p3");
    let namespace = Some("shop");
    server
        .patch::<Pod>(
            namespace,
            "p1",
            &json!({
                "metadata": {"labels": {"rollout": "2"}, "managedFields": [{
                    "manager": "controller", "operation": "Update", "apiVersion": "v1",
                    "time": "2026-01-02T03:04:05Z", "fieldsType": "FieldsV1",
                    "fieldsV1": {"f:metadata": {"f:labels": {"f:rollout": {}}}}
                }]},
                "spec": {"activeDeadlineSeconds": 600, "nodeName": "worker-b-1"},
                "status": {"phase": "Succeeded", "podIP": "10.1.2.3"},
            }),
        )
        .unwrap();
    server.delete::<Pod>(namespace, "p2").unwrap();
    let watched = same_caches(&server, &protobuf, &json, "the watch").await;
    assert_eq!(
        watched.keys().collect::<Vec<_>>(),
        ["shop/p0", "shop/p1", "shop/p3"]
    );
    check(&watched);

    protobuf.stop().await;
    json.stop().await;
    server.shutdown().await;
}

/// Each pod as the server holds it, and with `managed_fields` as the cache should have them.
fn server_pods(objects: &BTreeMap<String, Pod>, without_managed_fields: bool) {
    for (key, pod) in objects {
        assert!(pod.spec.as_ref().is_some_and(|s| s.containers.len() > 1));
        assert!(pod.status.as_ref().is_some_and(|s| s.start_time.is_some()));
        assert_eq!(
            pod.metadata.managed_fields.is_none(),
            without_managed_fields,
            "{key}"
        );
    }
}

#[test]
fn a_pod_has_a_generated_decoder_and_a_projection_has_none() {
    assert!(Generated::<Pod>::find().is_some());
    assert!(Generated::<SlimPod>::find().is_none());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pods_over_protobuf_fill_the_cache_json_fills() {
    list_and_watch::<Pod>(false, |pods| server_pods(pods, false)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pods_over_protobuf_without_managed_fields_fill_the_cache_json_fills() {
    list_and_watch::<Pod>(true, |pods| server_pods(pods, true)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_projection_over_protobuf_fills_the_cache_json_fills() {
    for without_managed_fields in [false, true] {
        list_and_watch::<SlimPod>(without_managed_fields, |pods| {
            for (key, pod) in pods {
                assert!(pod.spec.node_name.is_some(), "{key}");
                assert!(pod.status.phase.is_some(), "{key}");
                assert_eq!(
                    pod.metadata.managed_fields.is_none(),
                    without_managed_fields,
                    "{key}"
                );
            }
        })
        .await;
    }
}
