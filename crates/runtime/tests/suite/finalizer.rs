//! The finalizer helper against the simulator: added before anything else, the reconcile run
//! while the object lives, the cleanup run once it is being deleted and the finalizer removed
//! after it succeeds (not before), another controller's finalizer left alone, and a write based
//! on a stale object refused.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use informer_apiserver::{ApiServer, Config};
use informer_runtime::{Action, Finalize, FinalizerError, finalizer};
use k8s_openapi::api::core::v1::ConfigMap;
use kube::Api;
use kube::api::{DeleteParams, Patch, PatchParams, PostParams};
use serde_json::json;

const NAME: &str = "example.com/cleanup";

/// What the reconcile was asked to do, in order.
#[derive(Default)]
struct Calls {
    apply: AtomicUsize,
    cleanup: AtomicUsize,
}

/// A reconcile that counts its calls; its cleanup fails while `fail_cleanup`.
async fn run(
    api: &Api<ConfigMap>,
    obj: ConfigMap,
    calls: &Calls,
    fail_cleanup: bool,
) -> Result<Action, FinalizerError<std::io::Error>> {
    finalizer(api, NAME, Arc::new(obj), |step| async move {
        match step {
            Finalize::Apply(_) => {
                calls.apply.fetch_add(1, Ordering::SeqCst);
                Ok(Action::requeue(Duration::from_secs(300)))
            }
            Finalize::Cleanup(_) => {
                calls.cleanup.fetch_add(1, Ordering::SeqCst);
                if fail_cleanup {
                    Err(std::io::Error::other("the outside world is down"))
                } else {
                    Ok(Action::await_change())
                }
            }
        }
    })
    .await
}

fn finalizers(cm: &ConfigMap) -> Vec<String> {
    cm.metadata.finalizers.clone().unwrap_or_default()
}

#[tokio::test]
async fn the_finalizer_guards_the_cleanup_of_a_deleted_object() {
    let server = ApiServer::start(Config::for_tests(Duration::from_secs(60)))
        .await
        .expect("server starts");
    let mut config = kube::Config::new(server.url().parse().unwrap());
    config.default_retry = false;
    let client = kube::Client::try_from(config).unwrap();
    let api: Api<ConfigMap> = Api::namespaced(client, "demo");
    let cm: ConfigMap = serde_json::from_value(json!({"metadata": {"name": "a"}})).unwrap();
    let created = api.create(&PostParams::default(), &cm).await.unwrap();
    let calls = Calls::default();

    // Live, without the finalizer: it is added, and nothing else runs.
    let action = run(&api, created.clone(), &calls, false).await.unwrap();
    assert_eq!(action, Action::await_change());
    assert_eq!(calls.apply.load(Ordering::SeqCst), 0);
    let current = api.get("a").await.unwrap();
    assert_eq!(finalizers(&current), [NAME]);

    // The same stale object again: its test of the finalizers fails, nothing is written twice.
    let stale = run(&api, created, &calls, false).await.unwrap_err();
    assert!(
        matches!(&stale, FinalizerError::Add(kube::Error::Api(s)) if s.code == 422),
        "{stale:?}"
    );
    assert_eq!(finalizers(&api.get("a").await.unwrap()), [NAME]);

    // Live, with it: the reconcile runs and its action is returned.
    let action = run(&api, current, &calls, false).await.unwrap();
    assert_eq!(action, Action::requeue(Duration::from_secs(300)));
    assert_eq!(calls.apply.load(Ordering::SeqCst), 1);

    // Another controller's finalizer, then a delete: both finalizers hold the object.
    api.patch(
        "a",
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"finalizers": [NAME, "other.io/keep"]}})),
    )
    .await
    .unwrap();
    api.delete("a", &DeleteParams::default()).await.unwrap();
    let deleting = api.get("a").await.unwrap();
    assert!(deleting.metadata.deletion_timestamp.is_some());

    // The cleanup fails: the finalizer stays, and so does the object.
    let failed = run(&api, deleting.clone(), &calls, true).await.unwrap_err();
    assert!(matches!(failed, FinalizerError::Cleanup(_)), "{failed:?}");
    assert_eq!(
        finalizers(&api.get("a").await.unwrap()),
        [NAME, "other.io/keep"]
    );

    // It succeeds: ours is removed, the other stays, and the object with it.
    let deleting_copy = deleting.clone();
    let action = run(&api, deleting, &calls, false).await.unwrap();
    assert_eq!(action, Action::await_change());
    assert_eq!(calls.cleanup.load(Ordering::SeqCst), 2);
    let held = api.get("a").await.unwrap();
    assert_eq!(finalizers(&held), ["other.io/keep"]);

    // Being deleted without ours: nothing more to do.
    let action = run(&api, held, &calls, false).await.unwrap();
    assert_eq!(action, Action::await_change());
    assert_eq!(calls.cleanup.load(Ordering::SeqCst), 2);
    assert_eq!(calls.apply.load(Ordering::SeqCst), 1);

    // The other controller lets go: the object is gone.
    api.patch(
        "a",
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"finalizers": null}})),
    )
    .await
    .unwrap();
    assert!(api.get_opt("a").await.unwrap().is_none());

    // A reconcile of a stale copy from before the removal (a cache behind the server): the
    // cleanup runs again, and the object's absence is the finalizer's removal, not an error.
    let action = run(&api, deleting_copy, &calls, false).await.unwrap();
    assert_eq!(action, Action::await_change());
    assert_eq!(calls.cleanup.load(Ordering::SeqCst), 3);
    server.shutdown().await;
}

#[tokio::test]
async fn an_unnamed_object_is_an_error_not_a_panic() {
    let server = ApiServer::start(Config::for_tests(Duration::from_secs(60)))
        .await
        .expect("server starts");
    let client = kube::Client::try_from(kube::Config::new(server.url().parse().unwrap())).unwrap();
    let api: Api<ConfigMap> = Api::namespaced(client, "demo");
    let calls = Calls::default();
    let err = run(&api, ConfigMap::default(), &calls, false)
        .await
        .unwrap_err();
    assert!(matches!(err, FinalizerError::Unnamed), "{err:?}");
    assert_eq!(calls.apply.load(Ordering::SeqCst), 0);
    server.shutdown().await;
}
