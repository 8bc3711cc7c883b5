//! `Client`'s server-side apply and `/status` writes against the simulator: an object created
//! and then updated by apply, each version read back by the key's next reconcile however late
//! the watch cache is; an apply conflict as `ClientError::ApplyConflict` until forced; a status
//! written through the `/status` subresource and shown by the next reconcile's target.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use informer::SharedIndexInformer;
use informer_apiserver::{ApiServer, Config, Faults};
use informer_kube::{KubeInformerFactory, KubeSource};
use informer_runtime::{Action, Client, ClientError, Controller, Target};
use informer_workqueue::WorkQueue;
use k8s_openapi::api::core::v1::{ConfigMap, Container, Pod, PodSpec, PodStatus};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::{Patch, PatchParams, PostParams};
use parking_lot::Mutex;
use serde_json::json;
use tokio_util::sync::CancellationToken;

const WAIT: Duration = Duration::from_secs(20);
/// Longer than the test: what is committed while it is set reaches the cache only when it is
/// lowered.
const HELD: Duration = Duration::from_secs(3600);

async fn until(what: &str, mut cond: impl FnMut() -> bool) {
    tokio::time::timeout(WAIT, async {
        while !cond() {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    })
    .await
    .unwrap_or_else(|_| panic!("timed out waiting for: {what}"));
}

async fn start() -> (ApiServer, kube::Client) {
    let server = ApiServer::start(Config::for_tests(Duration::from_millis(100)))
        .await
        .expect("server starts");
    let mut config = kube::Config::new(server.url().parse().unwrap());
    config.default_retry = false;
    (server, kube::Client::try_from(config).unwrap())
}

/// A started factory, and its informer of `K`.
macro_rules! informer {
    ($kube:expr, $k:ty) => {{
        let factory = KubeInformerFactory::new(KubeSource::new($kube.clone()));
        let informer: Arc<SharedIndexInformer<$k>> = factory.informer::<$k>();
        factory.start().unwrap();
        (factory, informer)
    }};
}

fn config_map(name: &str, data: &[(&str, &str)]) -> ConfigMap {
    ConfigMap {
        metadata: ObjectMeta {
            name: Some(name.into()),
            namespace: Some("demo".into()),
            ..Default::default()
        },
        data: Some(
            data.iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                .collect(),
        ),
        ..Default::default()
    }
}

/// Once the first reconcile is over, queues `key` again, and waits until a worker has taken
/// it (it waits for its writes, or reconciles, or `reconciled()` says it is over).
async fn reconcile_again(queue: &WorkQueue<Arc<str>>, key: &str, reconciled: impl Fn() -> bool) {
    until("the first reconcile over", || {
        queue.in_flight() == 0 && queue.is_empty()
    })
    .await;
    queue.add(Arc::from(key));
    until("the next reconcile taken", || {
        queue.is_empty() && (queue.in_flight() == 1 || reconciled())
    })
    .await;
}

/// The count `demo/counter` holds, as `cm` has it.
fn count(cm: Option<&ConfigMap>) -> u32 {
    cm.and_then(|cm| cm.data.as_ref()?.get("n")?.parse().ok())
        .unwrap_or(0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_apply_creates_then_updates_and_the_next_reconcile_reads_each_back() {
    let (server, kube) = start().await;
    server.create(&config_map("owner", &[])).unwrap();
    let (factory, config_maps) = informer!(kube, ConfigMap);
    let client = Client::new(kube).with_cache(Arc::clone(&config_maps));
    let controller = Controller::new(Arc::clone(&config_maps)).read_your_writes(Duration::MAX);
    let queue = controller.queue().clone();
    let ctx = Arc::new((client, server.faults(), AtomicUsize::new(0)));
    let stop = CancellationToken::new();
    // Each reconcile of the owner counts one more in `demo/counter`, read from the cache and
    // applied: a stale read would count the same number twice.
    let running = tokio::spawn(controller.run(
        stop.clone(),
        Arc::clone(&ctx),
        |request, ctx: Arc<(Client, Faults, AtomicUsize)>| async move {
            let (client, faults, reconciles) = &*ctx;
            if &*request.key != "demo/owner" {
                return Ok(Action::await_change());
            }
            let counted = count(client.get(Some("demo"), "counter")?.as_deref());
            faults.set_cache_delay(HELD);
            let next = (counted + 1).to_string();
            client
                .apply(&config_map("counter", &[("n", &next)]), "counter", false)
                .await?;
            reconciles.fetch_add(1, Ordering::SeqCst);
            Ok::<_, ClientError>(Action::await_change())
        },
        |_, _, _| Action::backoff(),
    ));
    let reconciles = || ctx.2.load(Ordering::SeqCst);
    until("the first reconcile", || reconciles() == 1).await;
    let on_server = || {
        count(
            server
                .get::<ConfigMap>(Some("demo"), "counter")
                .ok()
                .as_ref(),
        )
    };
    assert_eq!(on_server(), 1, "created by apply");
    reconcile_again(&queue, "demo/owner", || reconciles() == 2).await;
    server.faults().set_cache_delay(Duration::ZERO);
    until("the second reconcile", || reconciles() == 2).await;
    assert_eq!(
        on_server(),
        2,
        "the first apply read back, the count updated by apply"
    );
    stop.cancel();
    running.await.unwrap().unwrap();
    factory.shutdown().await.unwrap();
    server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_apply_conflict_is_a_typed_error_until_forced() {
    let (server, kube) = start().await;
    let client = Client::new(kube);
    let theirs = config_map("settings", &[("a", "1")]);
    client.apply(&theirs, "deployer", false).await.unwrap();
    let ours = config_map("settings", &[("a", "2")]);
    let error = client.apply(&ours, "ours", false).await.unwrap_err();
    assert!(error.is_apply_conflict(), "{error:?}");
    assert_eq!(error.conflicting_fields(), [".data.a"]);
    let applied = client.apply(&ours, "ours", true).await.unwrap();
    assert_eq!(applied.data.unwrap()["a"], "2");
    // Outside a reconcile: made, and counted as recorded for no key (no informer here either).
    assert_eq!(client.stats().writes, 2);
    server.shutdown().await;
}

fn pod(name: &str) -> Pod {
    Pod {
        metadata: ObjectMeta {
            name: Some(name.into()),
            namespace: Some("demo".into()),
            ..Default::default()
        },
        spec: Some(PodSpec {
            containers: vec![Container {
                name: "app".into(),
                image: Some("app:1".into()),
                ..Default::default()
            }],
            ..Default::default()
        }),
        ..Default::default()
    }
}

/// The context of the status-writing controller: the phase each reconcile's target showed.
type Phases = (Client, Faults, Mutex<Vec<Option<String>>>);

fn phase(pod: &Pod) -> Option<&str> {
    pod.status.as_ref()?.phase.as_deref()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_status_written_is_the_one_the_next_reconciles_target_shows() {
    let (server, kube) = start().await;
    server.create(&pod("web-0")).unwrap();
    let (factory, pods) = informer!(kube, Pod);
    let client = Client::new(kube).with_cache(Arc::clone(&pods));
    let controller = Controller::new(Arc::clone(&pods)).read_your_writes(Duration::MAX);
    let queue = controller.queue().clone();
    let ctx = Arc::new((client, server.faults(), Mutex::new(Vec::new())));
    let stop = CancellationToken::new();
    // The first reconcile writes the status; each records the phase its target showed.
    let running = tokio::spawn(controller.run(
        stop.clone(),
        Arc::clone(&ctx),
        |request, ctx: Arc<Phases>| async move {
            let (client, faults, seen) = &*ctx;
            let Target::Live(pod) = &request.target else {
                return Ok(Action::await_change());
            };
            if seen.lock().is_empty() {
                faults.set_cache_delay(HELD);
                let status = json!({"status": {"phase": "Running"}});
                client
                    .patch_status::<Pod, _>(
                        Some("demo"),
                        "web-0",
                        &PatchParams::default(),
                        &Patch::Merge(&status),
                    )
                    .await?;
            }
            seen.lock().push(phase(pod).map(str::to_owned));
            Ok::<_, ClientError>(Action::await_change())
        },
        |_, _, _| Action::backoff(),
    ));
    let seen = || ctx.2.lock().len();
    until("the first reconcile", || seen() == 1).await;
    reconcile_again(&queue, "demo/web-0", || seen() >= 2).await;
    server.faults().set_cache_delay(Duration::ZERO);
    // (The status's update event queues the pod once more: a third reconcile may follow.)
    until("the second reconcile", || seen() >= 2).await;
    assert_eq!(ctx.2.lock()[1].as_deref(), Some("Running"));
    stop.cancel();
    running.await.unwrap().unwrap();

    // replace_status and apply_status, outside a reconcile.
    let client = &ctx.0;
    let mut current: Pod = server.get(Some("demo"), "web-0").unwrap();
    current.status = Some(PodStatus {
        phase: Some("Succeeded".into()),
        ..Default::default()
    });
    current.spec.as_mut().unwrap().node_name = Some("ignored".into());
    let replaced = client
        .replace_status(&PostParams::default(), &current)
        .await
        .unwrap();
    assert_eq!(phase(&replaced), Some("Succeeded"));
    assert_eq!(
        replaced.spec.unwrap().node_name,
        None,
        "a status write leaves the spec"
    );
    let mut applying = pod("web-0");
    applying.spec = None;
    applying.status = Some(PodStatus {
        pod_ip: Some("10.0.0.7".into()),
        ..Default::default()
    });
    let applied = client
        .apply_status(&applying, "kubelet", false)
        .await
        .unwrap();
    assert_eq!(applied.status.unwrap().pod_ip.as_deref(), Some("10.0.0.7"));
    factory.shutdown().await.unwrap();
    server.shutdown().await;
}

/// A status write to a type without the `/status` subresource (a ConfigMap) is the server's
/// 404, as a typed API error; nothing is recorded for the gate, and the object is unchanged.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_status_write_to_a_type_without_the_subresource_is_a_404() {
    let (server, kube) = start().await;
    server.create(&config_map("plain", &[("a", "1")])).unwrap();
    let client = Client::new(kube);
    let error = client
        .patch_status::<ConfigMap, _>(
            Some("demo"),
            "plain",
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"x": 1}})),
        )
        .await
        .unwrap_err();
    assert!(matches!(error, ClientError::Api(_)), "{error:?}");
    assert!(!error.is_apply_conflict());
    assert_eq!(error.status().map(|s| s.code), Some(404), "{error:?}");
    assert_eq!(client.stats().writes, 0);
    let stored: ConfigMap = server.get(Some("demo"), "plain").unwrap();
    assert_eq!(stored.data, config_map("plain", &[("a", "1")]).data);
    server.shutdown().await;
}
