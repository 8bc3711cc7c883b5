//! The simulator as kube-client sees it: lists, pagination, selectors, watches, bookmarks,
//! streaming lists, 410s after compaction, and watch faults.

use crate::kube_setup;

use std::time::Duration;

use futures::{Stream, StreamExt, TryStreamExt};
use informer_apiserver::{ApiServer, Config, Failure, Isolation, StatusError, Verb};
use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::api::core::v1::{ConfigMap, Node, Pod};
use kube::api::{Api, ListParams, PostParams, VersionMatch, WatchEvent, WatchParams};
use serde_json::json;

use kube_setup::start_with;

/// Generous bound for anything that should happen "at once".
const WAIT: Duration = Duration::from_secs(10);
/// How long a request of a hung client is watched for an answer that must not come (the
/// server's count of held requests is what says it is held).
const STILL_PENDING: Duration = Duration::from_secs(1);

async fn start() -> (ApiServer, kube::Client) {
    start_with(Config::for_tests(Duration::from_millis(100))).await
}

fn pod(ns: &str, name: &str, labels: serde_json::Value, node: &str) -> Pod {
    serde_json::from_value(json!({
        "metadata": {"name": name, "namespace": ns, "labels": labels},
        "spec": {"nodeName": node, "containers": [{"name": "c", "image": "nginx"}]},
    }))
    .unwrap()
}

fn names(pods: &[Pod]) -> Vec<String> {
    pods.iter()
        .map(|p| p.metadata.name.clone().unwrap_or_default())
        .collect()
}

/// The next watch event, within [`WAIT`].
async fn next<S, K>(stream: &mut S) -> WatchEvent<K>
where
    S: Stream<Item = kube::Result<WatchEvent<K>>> + Unpin,
{
    tokio::time::timeout(WAIT, stream.next())
        .await
        .expect("an event in time")
        .expect("the stream is open")
        .expect("a decodable event")
}

/// The next non-bookmark event.
async fn next_object<S, K>(stream: &mut S) -> WatchEvent<K>
where
    S: Stream<Item = kube::Result<WatchEvent<K>>> + Unpin,
{
    loop {
        match next(stream).await {
            WatchEvent::Bookmark(_) => continue,
            other => return other,
        }
    }
}

fn name_of(event: &WatchEvent<Pod>) -> (&'static str, String) {
    match event {
        WatchEvent::Added(p) => ("ADDED", p.metadata.name.clone().unwrap()),
        WatchEvent::Modified(p) => ("MODIFIED", p.metadata.name.clone().unwrap()),
        WatchEvent::Deleted(p) => ("DELETED", p.metadata.name.clone().unwrap()),
        WatchEvent::Bookmark(b) => ("BOOKMARK", b.metadata.resource_version.clone()),
        WatchEvent::Error(e) => ("ERROR", e.reason.clone()),
    }
}

#[tokio::test]
async fn paginated_list_is_one_consistent_snapshot() {
    let (server, client) = start().await;
    for i in 0..25 {
        server
            .create(&pod("demo", &format!("p{i:02}"), json!({}), "n1"))
            .unwrap();
    }
    let api: Api<Pod> = Api::namespaced(client, "demo");
    let first = api.list(&ListParams::default().limit(10)).await.unwrap();
    let snapshot_rv = first.metadata.resource_version.clone().unwrap();
    assert_eq!(first.items.len(), 10);
    assert_eq!(first.metadata.remaining_item_count, Some(15));
    // Changes after page 1 are invisible to the rest of the chain.
    server.delete::<Pod>(Some("demo"), "p15").unwrap();
    server.create(&pod("demo", "p99", json!({}), "n1")).unwrap();
    let mut all = first.items.clone();
    let mut token = first.metadata.continue_.clone();
    let mut pages = 1;
    while let Some(t) = token.filter(|t| !t.is_empty()) {
        let page = api
            .list(&ListParams::default().limit(10).continue_token(&t))
            .await
            .unwrap();
        assert_eq!(
            page.metadata.resource_version.as_deref(),
            Some(snapshot_rv.as_str())
        );
        all.extend(page.items);
        token = page.metadata.continue_;
        pages += 1;
    }
    assert_eq!(pages, 3);
    let expected: Vec<String> = (0..25).map(|i| format!("p{i:02}")).collect();
    assert_eq!(names(&all), expected);
    // A fresh list sees the changes, at a newer resource version.
    let fresh = api.list(&ListParams::default()).await.unwrap();
    assert!(names(&fresh.items).contains(&"p99".to_owned()));
    assert!(!names(&fresh.items).contains(&"p15".to_owned()));
    assert_eq!(
        fresh.metadata.resource_version,
        Some(server.resource_version().to_string())
    );
}

#[tokio::test]
async fn selectors_filter_lists_and_bad_ones_are_400() {
    let (server, client) = start().await;
    server
        .create(&pod(
            "a",
            "web-1",
            json!({"app": "web", "tier": "fe"}),
            "n1",
        ))
        .unwrap();
    server
        .create(&pod("a", "web-2", json!({"app": "web"}), "n2"))
        .unwrap();
    server
        .create(&pod("b", "db-1", json!({"app": "db"}), "n1"))
        .unwrap();
    let api: Api<Pod> = Api::all(client.clone());
    let list = |lp: ListParams| {
        let api = api.clone();
        async move { names(&api.list(&lp).await.unwrap().items) }
    };
    assert_eq!(
        list(ListParams::default().labels("app=web")).await,
        ["web-1", "web-2"]
    );
    assert_eq!(
        list(ListParams::default().labels("app in (db),!tier")).await,
        ["db-1"]
    );
    assert_eq!(list(ListParams::default().labels("tier")).await, ["web-1"]);
    // All-namespaces lists are in namespace/name order.
    assert_eq!(
        list(ListParams::default().fields("spec.nodeName=n1")).await,
        ["web-1", "db-1"]
    );
    assert_eq!(
        list(ListParams::default().fields("metadata.namespace=a,spec.nodeName!=n1")).await,
        ["web-2"]
    );
    for bad in [
        ListParams::default().labels("app in web"),
        ListParams::default().fields("spec.image=x"),
    ] {
        match api.list(&bad).await {
            Err(kube::Error::Api(status)) => {
                assert_eq!((status.code, status.reason.as_str()), (400, "BadRequest"));
            }
            other => panic!("expected a 400, got {other:?}"),
        }
    }
    // A namespace that does not exist lists empty, not 404.
    let nowhere: Api<Pod> = Api::namespaced(client, "nowhere");
    assert!(
        nowhere
            .list(&ListParams::default())
            .await
            .unwrap()
            .items
            .is_empty()
    );
}

#[tokio::test]
async fn list_resource_version_semantics() {
    let (server, client) = start().await;
    let api: Api<ConfigMap> = Api::namespaced(client, "default");
    let mut cm = ConfigMap::default();
    cm.metadata.name = Some("one".into());
    let created = api.create(&PostParams::default(), &cm).await.unwrap();
    let rv1: u64 = created.metadata.resource_version.unwrap().parse().unwrap();
    cm.metadata.name = Some("two".into());
    api.create(&PostParams::default(), &cm).await.unwrap();

    // Exact at rv1: the state then.
    let exact = api
        .list(
            &ListParams::default()
                .at(&rv1.to_string())
                .matching(VersionMatch::Exact),
        )
        .await
        .unwrap();
    assert_eq!(exact.items.len(), 1);
    assert_eq!(exact.metadata.resource_version, Some(rv1.to_string()));
    // NotOlderThan rv1: the current state.
    let newer = api
        .list(
            &ListParams::default()
                .at(&rv1.to_string())
                .matching(VersionMatch::NotOlderThan),
        )
        .await
        .unwrap();
    assert_eq!(newer.items.len(), 2);
    // RV=0: any state (kube-client drops it when a limit is set; see the wire tests).
    let any = api.list(&ListParams::default().match_any()).await.unwrap();
    assert_eq!(any.items.len(), 2);

    // Compacted: 410 Expired with the etcd message.
    server.faults().compact_all();
    match api
        .list(
            &ListParams::default()
                .at(&rv1.to_string())
                .matching(VersionMatch::Exact),
        )
        .await
    {
        Err(kube::Error::Api(s)) => {
            assert_eq!((s.code, s.reason.as_str()), (410, "Expired"));
            assert_eq!(
                s.message,
                "The resourceVersion for the provided list is too old."
            );
        }
        other => panic!("expected 410, got {other:?}"),
    }
    // Ahead of the server: 504 with the ResourceVersionTooLarge cause, after the wait.
    let ahead = (server.resource_version() + 100).to_string();
    match api
        .list(
            &ListParams::default()
                .at(&ahead)
                .matching(VersionMatch::NotOlderThan),
        )
        .await
    {
        Err(kube::Error::Api(s)) => {
            assert_eq!((s.code, s.reason.as_str()), (504, "Timeout"));
            let cause = &s.details.unwrap().causes[0];
            assert_eq!(cause.reason, "ResourceVersionTooLarge");
        }
        other => panic!("expected 504, got {other:?}"),
    }
}

#[tokio::test]
async fn continue_token_expires_with_compaction() {
    let (server, client) = start().await;
    for i in 0..6 {
        server
            .create(&pod("demo", &format!("p{i}"), json!({}), "n1"))
            .unwrap();
    }
    let api: Api<Pod> = Api::namespaced(client, "demo");
    let first = api.list(&ListParams::default().limit(2)).await.unwrap();
    let token = first.metadata.continue_.unwrap();
    server
        .create(&pod("demo", "q-late", json!({}), "n1"))
        .unwrap();
    server.faults().compact_all();
    match api
        .list(&ListParams::default().limit(2).continue_token(&token))
        .await
    {
        Err(kube::Error::Api(s)) => {
            assert_eq!((s.code, s.reason.as_str()), (410, "Expired"));
            // The inconsistent continuation resumes from the current state.
            let inconsistent = s.metadata.and_then(|m| m.continue_).expect("a token");
            let rest = api
                .list(&ListParams::default().continue_token(&inconsistent))
                .await
                .unwrap();
            assert_eq!(names(&rest.items), ["p2", "p3", "p4", "p5", "q-late"]);
        }
        other => panic!("expected 410, got {other:?}"),
    }
}

#[tokio::test]
async fn watch_delivers_changes_in_order_with_selector_transitions() {
    let (server, client) = start().await;
    let api: Api<Pod> = Api::namespaced(client, "demo");
    server
        .create(&pod("demo", "before", json!({"app": "web"}), "n1"))
        .unwrap();
    let rv = server.resource_version().to_string();
    let mut stream = api
        .watch(&WatchParams::default().labels("app=web"), &rv)
        .await
        .unwrap()
        .boxed();
    server
        .create(&pod("demo", "a", json!({"app": "web"}), "n1"))
        .unwrap();
    server
        .create(&pod("demo", "b", json!({"app": "db"}), "n1"))
        .unwrap();
    server
        .patch::<Pod>(
            Some("demo"),
            "a",
            &json!({"metadata": {"annotations": {"x": "1"}}}),
        )
        .unwrap();
    // b starts matching, a stops matching.
    server
        .patch::<Pod>(
            Some("demo"),
            "b",
            &json!({"metadata": {"labels": {"app": "web"}}}),
        )
        .unwrap();
    let stop = server
        .patch::<Pod>(
            Some("demo"),
            "a",
            &json!({"metadata": {"labels": {"app": "db"}}}),
        )
        .unwrap();
    server.delete::<Pod>(Some("demo"), "b").unwrap();
    let mut seen = Vec::new();
    let mut last_deleted_rv = None;
    for _ in 0..5 {
        let event = next_object(&mut stream).await;
        if let WatchEvent::Deleted(p) = &event
            && p.metadata.name.as_deref() == Some("a")
        {
            last_deleted_rv = p.metadata.resource_version.clone();
            // The DELETED of a selector transition carries the previous state.
            assert_eq!(p.labels().get("app").map(String::as_str), Some("web"));
        }
        seen.push(name_of(&event));
    }
    use kube::ResourceExt;
    assert_eq!(
        seen,
        [
            ("ADDED", "a".into()),
            ("MODIFIED", "a".into()),
            ("ADDED", "b".into()),
            ("DELETED", "a".into()),
            ("DELETED", "b".into()),
        ]
    );
    assert_eq!(last_deleted_rv, stop.metadata.resource_version);
}

#[tokio::test]
async fn watch_from_a_compacted_version_gets_410_as_an_error_event() {
    let (server, client) = start().await;
    let api: Api<Pod> = Api::namespaced(client, "demo");
    server.create(&pod("demo", "a", json!({}), "n1")).unwrap();
    let old = server.resource_version().to_string();
    server.create(&pod("demo", "b", json!({}), "n1")).unwrap();
    server.faults().compact_all();
    let mut stream = api
        .watch(&WatchParams::default(), &old)
        .await
        .unwrap()
        .boxed();
    match next(&mut stream).await {
        WatchEvent::Error(status) => {
            assert_eq!((status.code, status.reason.as_str()), (410, "Expired"));
            assert_eq!(
                status.message,
                format!(
                    "too old resource version: {old} ({})",
                    server.history_floor()
                )
            );
        }
        other => panic!("expected an ERROR event, got {other:?}"),
    }
    let end = tokio::time::timeout(WAIT, stream.next()).await.unwrap();
    assert!(end.is_none(), "the stream ends after the ERROR event");

    // After a restart every earlier version is gone too.
    let current = server.resource_version().to_string();
    server.create(&pod("demo", "c", json!({}), "n1")).unwrap();
    server.faults().restart();
    let mut stream = api
        .watch(&WatchParams::default(), &current)
        .await
        .unwrap()
        .boxed();
    assert!(matches!(next(&mut stream).await, WatchEvent::Error(s) if s.code == 410));
}

#[tokio::test]
async fn bookmarks_advance_a_selective_watch_past_unrelated_changes() {
    let (server, client) = start().await;
    let api: Api<Pod> = Api::namespaced(client, "demo");
    let rv = server.resource_version().to_string();
    let mut stream = api
        .watch(&WatchParams::default().labels("app=quiet"), &rv)
        .await
        .unwrap()
        .boxed();
    for i in 0..5 {
        server
            .create(&pod(
                "demo",
                &format!("busy-{i}"),
                json!({"app": "busy"}),
                "n1",
            ))
            .unwrap();
    }
    let head = server.resource_version();
    // Bookmarks come every 100 ms; one of them must reach the head.
    loop {
        match next(&mut stream).await {
            WatchEvent::Bookmark(b) => {
                let at: u64 = b.metadata.resource_version.parse().unwrap();
                assert!(at <= server.resource_version());
                if at >= head {
                    break;
                }
            }
            other => panic!("only bookmarks expected, got {other:?}"),
        }
    }
}

#[tokio::test]
async fn streaming_list_ends_initial_events_with_the_annotated_bookmark() {
    let (server, client) = start().await;
    for name in ["x", "y"] {
        server.create(&pod("demo", name, json!({}), "n1")).unwrap();
    }
    let snapshot = server.resource_version().to_string();
    let api: Api<Pod> = Api::namespaced(client, "demo");
    let mut stream = api
        .watch(&WatchParams::streaming_lists(), "")
        .await
        .unwrap()
        .boxed();
    assert_eq!(name_of(&next(&mut stream).await), ("ADDED", "x".into()));
    assert_eq!(name_of(&next(&mut stream).await), ("ADDED", "y".into()));
    match next(&mut stream).await {
        WatchEvent::Bookmark(b) => {
            assert_eq!(b.metadata.resource_version, snapshot);
            assert_eq!(
                b.metadata
                    .annotations
                    .get("k8s.io/initial-events-end")
                    .map(String::as_str),
                Some("true")
            );
        }
        other => panic!("expected the end bookmark, got {other:?}"),
    }
    server.create(&pod("demo", "z", json!({}), "n1")).unwrap();
    assert_eq!(
        name_of(&next_object(&mut stream).await),
        ("ADDED", "z".into())
    );
}

#[tokio::test]
async fn watch_faults_end_streams_the_way_they_should() {
    let (server, client) = start().await;
    let api: Api<Node> = Api::all(client);
    let rv = server.resource_version().to_string();
    let wp = WatchParams::default().disable_bookmarks();

    // A clean close ends the stream without an error.
    let mut stream = api.watch(&wp, &rv).await.unwrap().boxed();
    wait_for(|| server.open_watches() == 1).await;
    server.faults().close_watches();
    assert!(
        tokio::time::timeout(WAIT, stream.next())
            .await
            .unwrap()
            .is_none()
    );

    // An abrupt drop ends the stream too: kube-client folds an unexpected EOF into the end of
    // the stream (the wire tests check that no chunked terminator was sent).
    let mut stream = api.watch(&wp, &rv).await.unwrap().boxed();
    wait_for(|| server.open_watches() == 1).await;
    server.faults().drop_watches();
    let got = tokio::time::timeout(WAIT, stream.try_next()).await.unwrap();
    assert!(
        matches!(got, Ok(None) | Err(_)),
        "expected the end, got {got:?}"
    );

    // An injected ERROR event arrives as kube's WatchEvent::Error.
    let mut stream = api.watch(&wp, &rv).await.unwrap().boxed();
    wait_for(|| server.open_watches() == 1).await;
    server
        .faults()
        .inject_watch_error(StatusError::too_many_requests("slow down", 3));
    match next(&mut stream).await {
        WatchEvent::Error(s) => {
            assert_eq!((s.code, s.reason.as_str()), (429, "TooManyRequests"));
            assert_eq!(s.details.unwrap().retry_after_seconds, 3);
        }
        other => panic!("expected an ERROR event, got {other:?}"),
    }
    wait_for(|| server.open_watches() == 0).await;

    // A failing next request, then normal service.
    server
        .faults()
        .fail_next(Verb::List, 1, Failure::internal("boom"));
    match api.list(&ListParams::default()).await {
        Err(kube::Error::Api(s)) => assert_eq!((s.code, s.reason.as_str()), (500, "InternalError")),
        other => panic!("expected a 500, got {other:?}"),
    }
    assert!(api.list(&ListParams::default()).await.is_ok());
}

#[tokio::test]
async fn a_disconnected_watcher_is_released() {
    let (server, client) = start().await;
    let api: Api<Pod> = Api::namespaced(client, "demo");
    let rv = server.resource_version().to_string();
    let stream = api
        .watch(&WatchParams::default().disable_bookmarks(), &rv)
        .await
        .unwrap()
        .boxed();
    wait_for(|| server.open_watches() == 1).await;
    drop(stream);
    // No event and no bookmark is due: the server notices the closed connection by itself.
    wait_for(|| server.open_watches() == 0).await;
}

#[tokio::test]
async fn watch_timeout_ends_the_stream_after_a_final_bookmark() {
    let (server, client) = start_with(Config {
        bookmark_interval: Duration::from_secs(3600),
        bookmark_before_deadline: Duration::from_millis(500),
        ..Config::default().with_core_types()
    })
    .await;
    let api: Api<Pod> = Api::namespaced(client, "demo");
    let rv = server.resource_version().to_string();
    server.create(&pod("demo", "a", json!({}), "n1")).unwrap();
    let mut stream = api
        .watch(&WatchParams::default().timeout(1), &rv)
        .await
        .unwrap()
        .boxed();
    assert_eq!(name_of(&next(&mut stream).await), ("ADDED", "a".into()));
    match next(&mut stream).await {
        WatchEvent::Bookmark(b) => {
            assert_eq!(
                b.metadata.resource_version,
                server.resource_version().to_string()
            );
        }
        other => panic!("expected the pre-deadline bookmark, got {other:?}"),
    }
    assert!(
        tokio::time::timeout(WAIT, stream.next())
            .await
            .unwrap()
            .is_none()
    );
}

async fn wait_for(mut cond: impl FnMut() -> bool) {
    let deadline = tokio::time::Instant::now() + WAIT;
    while !cond() {
        assert!(
            tokio::time::Instant::now() < deadline,
            "condition not reached in time"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

#[tokio::test]
async fn the_kubeconfig_is_accepted_by_kube_client() {
    let server = ApiServer::start(Config::for_tests(Duration::from_secs(60)))
        .await
        .unwrap();
    server
        .create(&pod("default", "web", json!({}), "n1"))
        .unwrap();
    let kubeconfig = kube::config::Kubeconfig::from_yaml(&server.kubeconfig()).unwrap();
    let config = kube::Config::from_custom_kubeconfig(
        kubeconfig,
        &kube::config::KubeConfigOptions::default(),
    )
    .await
    .unwrap();
    assert_eq!(config.default_namespace, "default");
    let client = kube::Client::try_from(config).unwrap();
    let pods: Api<Pod> = Api::default_namespaced(client.clone());
    assert_eq!(
        names(&pods.list(&ListParams::default()).await.unwrap().items),
        ["web"]
    );
    let version = client.apiserver_version().await.unwrap();
    assert_eq!(
        (version.major.as_str(), version.minor.as_str()),
        ("1", "36")
    );
}

#[tokio::test]
async fn a_process_restart_refuses_connections_then_serves_with_history_lost() {
    let (server, client) = start().await;
    let api: Api<Pod> = Api::namespaced(client, "demo");
    server.create(&pod("demo", "a", json!({}), "n1")).unwrap();
    let rv = server.resource_version().to_string();
    server.create(&pod("demo", "b", json!({}), "n1")).unwrap();
    let mut stream = api
        .watch(&WatchParams::default(), &rv)
        .await
        .unwrap()
        .boxed();
    assert_eq!(
        name_of(&next_object(&mut stream).await),
        ("ADDED", "b".into())
    );
    let restart = server.restart_process(Duration::from_millis(500));
    let probe = async {
        // While it is down, connections are refused.
        wait_for(|| server.open_watches() == 0).await;
        tokio::time::sleep(Duration::from_millis(100)).await;
        assert!(tokio::net::TcpStream::connect(server.addr()).await.is_err());
    };
    let (restarted, ()) = tokio::join!(restart, probe);
    restarted.unwrap();
    // Objects survive, history does not.
    assert_eq!(
        api.list(&ListParams::default()).await.unwrap().items.len(),
        2
    );
    let mut stream = api
        .watch(&WatchParams::default(), &rv)
        .await
        .unwrap()
        .boxed();
    assert!(matches!(next(&mut stream).await, WatchEvent::Error(s) if s.code == 410));
}

#[tokio::test]
async fn a_rewound_server_makes_newer_versions_too_large() {
    let (server, client) = start().await;
    let api: Api<Pod> = Api::namespaced(client, "demo");
    server.create(&pod("demo", "a", json!({}), "n1")).unwrap();
    let snapshot = server.resource_version();
    server.create(&pod("demo", "b", json!({}), "n1")).unwrap();
    let seen = server.resource_version().to_string();
    assert!(server.faults().rewind_to(snapshot));
    assert_eq!(server.resource_version(), snapshot);
    let list = api.list(&ListParams::default()).await.unwrap();
    assert_eq!(names(&list.items), ["a"]);
    match api
        .list(
            &ListParams::default()
                .at(&seen)
                .matching(VersionMatch::NotOlderThan),
        )
        .await
    {
        Err(kube::Error::Api(s)) => assert_eq!(s.code, 504),
        other => panic!("expected 504 TooLarge, got {other:?}"),
    }
    assert!(
        !server.faults().rewind_to(snapshot + 100),
        "cannot rewind forward"
    );
}

/// `Api::delete` reads a removed config map as `Right(Status)`, and an object that stays
/// (a pod: its registry answers with the object; finalizers; graceful deletion) as `Left(K)`.
#[tokio::test]
async fn delete_answers_as_kube_client_reads_them() {
    use kube::api::DeleteParams;
    let (server, client) = start().await;
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), "demo");
    let pods: Api<Pod> = Api::namespaced(client, "demo");
    let plain: ConfigMap =
        serde_json::from_value(json!({"metadata": {"name": "plain", "namespace": "demo"}}))
            .unwrap();
    let held: ConfigMap = serde_json::from_value(
        json!({"metadata": {"name": "held", "namespace": "demo", "finalizers": ["example.com/x"]}}),
    )
    .unwrap();
    let plain = server.create(&plain).unwrap();
    server.create(&held).unwrap();

    let status = cms
        .delete("plain", &DeleteParams::default())
        .await
        .unwrap()
        .right()
        .expect("a Status for a removed config map");
    assert!(status.is_success(), "{status:?}");
    let details = status.details.unwrap();
    assert_eq!(details.name, "plain");
    assert_eq!(details.kind, "configmaps");
    assert_eq!(Some(details.uid), plain.metadata.uid);

    let marked = cms
        .delete("held", &DeleteParams::default())
        .await
        .unwrap()
        .left()
        .expect("the marked object");
    assert!(marked.metadata.deletion_timestamp.is_some());
    assert_eq!(marked.metadata.deletion_grace_period_seconds, Some(0));

    // A stale precondition is a 409 Conflict.
    let stale = DeleteParams {
        preconditions: Some(kube::api::Preconditions {
            resource_version: Some("1".into()),
            uid: None,
        }),
        ..DeleteParams::default()
    };
    match cms.delete("held", &stale).await {
        Err(kube::Error::Api(e)) => {
            assert_eq!(e.code, 409);
            assert_eq!(e.reason, "Conflict");
            // Worded as `rest.BeforeDelete` words it, about the kind.
            assert!(
                e.message.starts_with(
                    "Operation cannot be fulfilled on ConfigMap \"held\": the ResourceVersion in \
                     the precondition (1) does not match the ResourceVersion in record ("
                ),
                "{}",
                e.message
            );
            assert!(e.message.ends_with("The object might have been modified"));
        }
        other => panic!("expected a 409, got {other:?}"),
    }

    server
        .create(&pod("demo", "web-0", json!({}), "node-1"))
        .unwrap();
    let terminating = pods
        .delete("web-0", &DeleteParams::default().grace_period(120))
        .await
        .unwrap()
        .left()
        .expect("a pod answers with itself");
    assert_eq!(
        terminating.metadata.deletion_grace_period_seconds,
        Some(120)
    );
    assert!(
        pods.get("web-0")
            .await
            .unwrap()
            .metadata
            .deletion_timestamp
            .is_some()
    );
    server
        .finish_deletion::<Pod>(Some("demo"), "web-0")
        .unwrap();
    assert!(pods.get_opt("web-0").await.unwrap().is_none());
}

/// `Patch::Json`, `Patch::Strategic` and `Api::delete_collection` through kube-client.
#[tokio::test]
async fn json_and_strategic_patches_and_deletecollection() {
    use kube::api::{DeleteParams, Patch, PatchParams};
    let (server, client) = start().await;
    let pods: Api<Pod> = Api::namespaced(client.clone(), "demo");
    let cms: Api<ConfigMap> = Api::namespaced(client, "demo");
    server
        .create(&pod("demo", "web-0", json!({"app": "web"}), ""))
        .unwrap();

    let ops: json_patch::Patch = serde_json::from_value(json!([
        {"op": "add", "path": "/metadata/labels/tier", "value": "front"}
    ]))
    .unwrap();
    let patched = pods
        .patch("web-0", &PatchParams::default(), &Patch::Json::<()>(ops))
        .await
        .unwrap();
    assert_eq!(patched.metadata.labels.unwrap()["tier"], "front");

    let smp = json!({"spec": {"containers": [{"name": "c", "image": "nginx:2"}]}});
    let patched = pods
        .patch("web-0", &PatchParams::default(), &Patch::Strategic(smp))
        .await
        .unwrap();
    let containers = patched.spec.unwrap().containers;
    assert_eq!(containers.len(), 1);
    assert_eq!(containers[0].image.as_deref(), Some("nginx:2"));

    for (name, app) in [("a", "x"), ("b", "x"), ("c", "y")] {
        let cm: ConfigMap = serde_json::from_value(
            json!({"metadata": {"name": name, "namespace": "demo", "labels": {"app": app}}}),
        )
        .unwrap();
        server.create(&cm).unwrap();
    }
    let deleted = cms
        .delete_collection(
            &DeleteParams::default(),
            &ListParams::default().labels("app=x"),
        )
        .await
        .unwrap()
        .left()
        .expect("the list of what was deleted");
    let names: Vec<String> = deleted
        .items
        .iter()
        .map(|c| c.metadata.name.clone().unwrap())
        .collect();
    assert_eq!(names, ["a", "b"]);
    let left = cms.list(&ListParams::default()).await.unwrap();
    assert_eq!(left.items.len(), 1);
}

fn lease(name: &str, holder: &str) -> Lease {
    Lease {
        metadata: kube::api::ObjectMeta {
            name: Some(name.into()),
            namespace: Some("kube-system".into()),
            ..Default::default()
        },
        spec: Some(LeaseSpec {
            holder_identity: Some(holder.into()),
            lease_duration_seconds: Some(15),
            ..Default::default()
        }),
    }
}

fn holder(lease: &Lease) -> Option<&str> {
    lease.spec.as_ref()?.holder_identity.as_deref()
}

fn rv_of(lease: &Lease) -> u64 {
    lease
        .metadata
        .resource_version
        .as_deref()
        .unwrap()
        .parse()
        .unwrap()
}

/// The `Status` of a failed request.
fn api_error<T: std::fmt::Debug>(result: kube::Result<T>) -> Box<kube::core::Status> {
    match result {
        Err(kube::Error::Api(status)) => status,
        other => panic!("expected an API error, got {other:?}"),
    }
}

#[tokio::test]
async fn leases_over_kube_client() {
    let (server, client) = start().await;
    let api: Api<Lease> = Api::namespaced(client, "kube-system");
    let rv = server.resource_version().to_string();
    let mut watch = api
        .watch(&WatchParams::default().disable_bookmarks(), &rv)
        .await
        .unwrap()
        .boxed();

    let pp = PostParams::default();
    let created = api.create(&pp, &lease("leader", "a")).await.unwrap();
    assert_eq!(holder(&created), Some("a"));
    assert!(created.metadata.uid.is_some());
    assert_eq!(created.metadata.generation, None);
    let status = api_error(api.create(&pp, &lease("leader", "b")).await);
    assert_eq!(
        (status.code, status.reason.as_str()),
        (409, "AlreadyExists")
    );
    assert_eq!(api.get("leader").await.unwrap(), created);
    let listed = api.list(&ListParams::default()).await.unwrap();
    assert_eq!(listed.items, std::slice::from_ref(&created));

    // Renewed by its holder at the current resourceVersion.
    let mut renewal = created.clone();
    renewal.spec.as_mut().unwrap().lease_transitions = Some(1);
    let renewed = api.replace("leader", &pp, &renewal).await.unwrap();
    assert!(rv_of(&renewed) > rv_of(&created));
    assert_eq!(renewed.spec.as_ref().unwrap().lease_transitions, Some(1));

    // Another candidate with what it read before the renewal: 409 Conflict.
    let mut takeover = created.clone();
    takeover.spec.as_mut().unwrap().holder_identity = Some("b".into());
    let status = api_error(api.replace("leader", &pp, &takeover).await);
    assert_eq!((status.code, status.reason.as_str()), (409, "Conflict"));
    assert_eq!(
        status.message,
        "Operation cannot be fulfilled on leases.coordination.k8s.io \"leader\": the object has \
         been modified; please apply your changes to the latest version and try again"
    );
    let details = status.details.as_ref().unwrap();
    assert_eq!(
        (
            details.name.as_str(),
            details.group.as_str(),
            details.kind.as_str()
        ),
        ("leader", "coordination.k8s.io", "leases")
    );
    assert_eq!(holder(&api.get("leader").await.unwrap()), Some("a"));

    // Without a resourceVersion: leases refuse unconditional updates.
    takeover.metadata.resource_version = None;
    let status = api_error(api.replace("leader", &pp, &takeover).await);
    assert_eq!((status.code, status.reason.as_str()), (422, "Invalid"));
    assert!(
        status.message.ends_with(
            "metadata.resourceVersion: Invalid value: 0x0: must be specified for an update"
        ),
        "{}",
        status.message
    );

    // A replace of a missing lease creates it (leases allow create on update).
    let standby = api
        .replace("standby", &pp, &lease("standby", "c"))
        .await
        .unwrap();
    assert_eq!(holder(&standby), Some("c"));
    assert_eq!(rv_of(&standby), server.resource_version());

    api.delete("leader", &Default::default()).await.unwrap();
    let status = api_error(api.get("leader").await);
    assert_eq!((status.code, status.reason.as_str()), (404, "NotFound"));

    let mut seen = Vec::new();
    for _ in 0..4 {
        let (ty, lease) = match next(&mut watch).await {
            WatchEvent::Added(l) => ("ADDED", l),
            WatchEvent::Modified(l) => ("MODIFIED", l),
            WatchEvent::Deleted(l) => ("DELETED", l),
            other => panic!("unexpected {other:?}"),
        };
        seen.push((ty, lease.metadata.name.clone().unwrap(), rv_of(&lease)));
    }
    let deleted_rv = seen[3].2;
    assert_eq!(
        seen,
        [
            ("ADDED", "leader".to_owned(), rv_of(&created)),
            ("MODIFIED", "leader".to_owned(), rv_of(&renewed)),
            ("ADDED", "standby".to_owned(), rv_of(&standby)),
            ("DELETED", "leader".to_owned(), deleted_rv),
        ]
    );
    assert!(deleted_rv > rv_of(&standby));
}

/// A kube client that authenticates with bearer `token`, the identity the simulator isolates
/// (kube-client sends it over plain HTTP too). Retries are off, to see the failures.
fn client_with_token(server: &ApiServer, token: &str) -> kube::Client {
    let mut config = kube::Config::new(server.url().parse().unwrap());
    config.auth_info.token = Some(token.to_owned().into());
    config.default_retry = false;
    kube::Client::try_from(config).unwrap()
}

#[tokio::test]
async fn an_isolated_client_fails_while_another_goes_on() {
    let server = ApiServer::start(Config::for_tests(Duration::from_millis(100)))
        .await
        .unwrap();
    let created = server.create(&lease("leader", "a")).unwrap();
    let a: Api<Lease> = Api::namespaced(client_with_token(&server, "token-a"), "kube-system");
    let b: Api<Lease> = Api::namespaced(client_with_token(&server, "token-b"), "kube-system");
    let wp = WatchParams::default().disable_bookmarks();
    let rv = created.metadata.resource_version.clone().unwrap();
    let mut a_watch = a.watch(&wp, &rv).await.unwrap().boxed();
    let mut b_watch = b.watch(&wp, &rv).await.unwrap().boxed();
    wait_for(|| server.open_watches() == 2).await;

    server
        .faults()
        .isolate("token-a", Isolation::Fail(Failure::unavailable()));
    // a's open watch is cut; its requests fail.
    let got = tokio::time::timeout(WAIT, a_watch.try_next())
        .await
        .unwrap();
    assert!(
        matches!(got, Ok(None) | Err(_)),
        "expected the end, got {got:?}"
    );
    wait_for(|| server.open_watches() == 1).await;
    let status = api_error(a.get("leader").await);
    assert_eq!(
        (status.code, status.reason.as_str()),
        (503, "ServiceUnavailable")
    );
    match a.watch(&wp, &rv).await {
        Err(kube::Error::Api(status)) => assert_eq!(status.code, 503),
        Err(other) => panic!("expected a 503, got {other:?}"),
        Ok(_) => panic!("expected a 503, got a watch"),
    }

    // b reads, renews and watches as if nothing happened.
    let current = b.get("leader").await.unwrap();
    let mut renewal = current.clone();
    renewal.spec.as_mut().unwrap().lease_transitions = Some(1);
    let renewed = b
        .replace("leader", &PostParams::default(), &renewal)
        .await
        .unwrap();
    match next(&mut b_watch).await {
        WatchEvent::Modified(l) => assert_eq!(l, renewed),
        other => panic!("expected the renewal, got {other:?}"),
    }

    // Healed, a is served again, and sees what it missed.
    server.faults().heal("token-a");
    assert_eq!(a.get("leader").await.unwrap(), renewed);
    let mut a_watch = a.watch(&wp, &rv).await.unwrap().boxed();
    match next(&mut a_watch).await {
        WatchEvent::Modified(l) => assert_eq!(l, renewed),
        other => panic!("expected the renewal, got {other:?}"),
    }

    // A client identified by its kubeconfig's token, and one by its User-Agent.
    let kubeconfig =
        kube::config::Kubeconfig::from_yaml(&server.kubeconfig_with_token("token-c")).unwrap();
    let mut config = kube::Config::from_custom_kubeconfig(
        kubeconfig,
        &kube::config::KubeConfigOptions::default(),
    )
    .await
    .unwrap();
    config.default_retry = false;
    let c: Api<Lease> = Api::namespaced(kube::Client::try_from(config).unwrap(), "kube-system");
    let mut config = kube::Config::new(server.url().parse().unwrap());
    config.headers.push((
        axum::http::header::USER_AGENT,
        axum::http::HeaderValue::from_static("elector/1.0"),
    ));
    let d: Api<Lease> = Api::namespaced(kube::Client::try_from(config).unwrap(), "kube-system");
    server
        .faults()
        .isolate("token-c", Isolation::Fail(Failure::internal("isolated")));
    server.faults().isolate(
        "elector/1.0",
        Isolation::Fail(Failure::internal("isolated")),
    );
    assert_eq!(api_error(c.get("leader").await).code, 500);
    assert_eq!(api_error(d.get("leader").await).code, 500);
    assert!(a.get("leader").await.is_ok());
    server.faults().heal_all();
    assert!(c.get("leader").await.is_ok());
    assert!(d.get("leader").await.is_ok());
}

#[tokio::test]
async fn a_hung_client_gets_nothing_until_healed() {
    let server = ApiServer::start(Config::for_tests(Duration::from_millis(100)))
        .await
        .unwrap();
    let created = server.create(&lease("leader", "a")).unwrap();
    let a: Api<Lease> = Api::namespaced(client_with_token(&server, "token-a"), "kube-system");
    let b: Api<Lease> = Api::namespaced(client_with_token(&server, "token-b"), "kube-system");
    let wp = WatchParams::default().disable_bookmarks();
    let rv = created.metadata.resource_version.clone().unwrap();
    let mut a_watch = a.watch(&wp, &rv).await.unwrap().boxed();
    let mut b_watch = b.watch(&wp, &rv).await.unwrap().boxed();
    wait_for(|| server.open_watches() == 2).await;

    server.faults().isolate("token-a", Isolation::Hang);
    let held_api = a.clone();
    let mut held = tokio::spawn(async move { held_api.get("leader").await });
    wait_for(|| server.held_requests() == 1).await;
    assert!(
        tokio::time::timeout(STILL_PENDING, &mut held)
            .await
            .is_err(),
        "a hung client's request does not complete"
    );

    // b is served meanwhile: get, update, watch.
    let mut renewal = b.get("leader").await.unwrap();
    renewal.spec.as_mut().unwrap().lease_transitions = Some(1);
    let renewed = b
        .replace("leader", &PostParams::default(), &renewal)
        .await
        .unwrap();
    match next(&mut b_watch).await {
        WatchEvent::Modified(l) => assert_eq!(l, renewed),
        other => panic!("expected the renewal, got {other:?}"),
    }
    // a's open watch holds the event back, and its request is still pending.
    assert!(
        tokio::time::timeout(STILL_PENDING, a_watch.next())
            .await
            .is_err(),
        "a hung client's watch delivers nothing"
    );
    assert!(!held.is_finished());

    // Healed: the held request is served, the watch delivers what it held back.
    server.faults().heal("token-a");
    let got = tokio::time::timeout(WAIT, held)
        .await
        .expect("the held request completes once healed")
        .unwrap()
        .unwrap();
    // Served after the renewal, it reads the renewed lease.
    assert_eq!(got, renewed);
    match next(&mut a_watch).await {
        WatchEvent::Modified(l) => assert_eq!(l, renewed),
        other => panic!("expected the renewal, got {other:?}"),
    }
    assert_eq!(server.held_requests(), 0);
}

#[tokio::test]
async fn a_shutdown_does_not_wait_for_a_hung_client() {
    let server = ApiServer::start(Config::for_tests(Duration::from_millis(100)))
        .await
        .unwrap();
    server.create(&lease("leader", "a")).unwrap();
    let a: Api<Lease> = Api::namespaced(client_with_token(&server, "token-a"), "kube-system");
    let rv = server.resource_version().to_string();
    let mut a_watch = a
        .watch(&WatchParams::default().disable_bookmarks(), &rv)
        .await
        .unwrap()
        .boxed();
    wait_for(|| server.open_watches() == 1).await;
    server.faults().isolate("token-a", Isolation::Hang);
    let held = tokio::spawn(async move { a.get("leader").await });
    wait_for(|| server.held_requests() == 1).await;
    tokio::time::timeout(WAIT, server.shutdown())
        .await
        .expect("the server stops with a request held");
    let got = tokio::time::timeout(WAIT, held)
        .await
        .expect("the held request ends with the server")
        .unwrap();
    assert!(got.is_err(), "a dropped request is an error: {got:?}");
    let end = tokio::time::timeout(WAIT, a_watch.try_next())
        .await
        .unwrap();
    assert!(
        matches!(end, Ok(None) | Err(_)),
        "expected the end, got {end:?}"
    );
}
